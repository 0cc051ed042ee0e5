//! Ethtool over generic netlink (family `ethtool`, Linux 5.6+): the module EEPROM of a netdev,
//! read a half page at a time (`ETHTOOL_MSG_MODULE_EEPROM_GET`, Linux 5.13+, `net/ethtool/
//! eeprom.c`), and its FEC counters (`ETHTOOL_MSG_FEC_GET` with `ETHTOOL_FLAG_STATS`, Linux
//! 5.13+, `net/ethtool/fec.c`). Requests and replies are built and decoded here by plain code
//! over `generic/`; `socket.rs` is the only code that sends them. Numbers from
//! `include/uapi/linux/ethtool_netlink.h` (as ethtool's `uapi/` copies them).

pub mod socket;

use crate::netlink::datagram::NLM_F_REQUEST;
pub use crate::netlink::generic::ReplyError;
use crate::netlink::generic::{
    attribute, attributes, message, reply, string_attribute, u64_value, Family, NLA_F_NESTED,
};

/// `ETHTOOL_GENL_NAME`, `ETHTOOL_GENL_VERSION`.
pub const FAMILY: &str = "ethtool";
pub const VERSION: u8 = 1;
/// `ETHTOOL_MSG_MODULE_EEPROM_GET` (user to kernel) and its reply's command.
const MODULE_EEPROM_GET: u8 = 31;
const MODULE_EEPROM_GET_REPLY: u8 = 32;
/// `ETHTOOL_A_MODULE_EEPROM_*`.
const EEPROM_HEADER: u16 = 1;
const EEPROM_OFFSET: u16 = 2;
const EEPROM_LENGTH: u16 = 3;
const EEPROM_PAGE: u16 = 4;
const EEPROM_I2C_ADDRESS: u16 = 6;
const EEPROM_DATA: u16 = 7;
/// `ETHTOOL_MSG_FEC_GET` and its reply's command (`ETHTOOL_MSG_FEC_GET_REPLY`).
const FEC_GET: u8 = 29;
const FEC_GET_REPLY: u8 = 30;
/// `ETHTOOL_A_FEC_HEADER`, `ETHTOOL_A_FEC_STATS` and, in that nest,
/// `ETHTOOL_A_FEC_STAT_CORRECTED`, `_UNCORR`, `_CORR_BITS`.
const FEC_HEADER: u16 = 1;
const FEC_STATS: u16 = 5;
const FEC_STAT_CORRECTED: u16 = 2;
const FEC_STAT_UNCORR: u16 = 3;
const FEC_STAT_CORR_BITS: u16 = 4;
/// `ETHTOOL_A_HEADER_DEV_NAME`, `ETHTOOL_A_HEADER_FLAGS`, and the flags a FEC request sets:
/// `ETHTOOL_FLAG_COMPACT_BITSETS` (the FEC modes as a bitmap, not by name) and
/// `ETHTOOL_FLAG_STATS`.
const HEADER_DEV_NAME: u16 = 2;
const HEADER_FLAGS: u16 = 3;
const FLAG_COMPACT_BITSETS: u32 = 1 << 0;
const FLAG_STATS: u32 = 1 << 2;

/// The I2C addresses of module memory: 0x50 for every layout, 0x51 for SFF-8472's A2h.
pub const ADDRESS_A0: u8 = 0x50;
pub const ADDRESS_A2: u8 = 0x51;

/// One half page: the kernel refuses a request that crosses byte 128.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HalfPage {
    pub i2c_address: u8,
    pub page: u8,
    /// 0 for the lower half, 128 for the upper.
    pub offset: u8,
}

/// `ETHTOOL_MSG_MODULE_EEPROM_GET` of one half page of `netdev`'s module.
pub fn eeprom_request(family: Family, netdev: &str, half: HalfPage, sequence: u32) -> Vec<u8> {
    message(family, MODULE_EEPROM_GET, NLM_F_REQUEST, sequence, |out| {
        let mut header = Vec::new();
        string_attribute(&mut header, HEADER_DEV_NAME, netdev);
        attribute(out, EEPROM_HEADER | NLA_F_NESTED, &header);
        attribute(out, EEPROM_OFFSET, &u32::from(half.offset).to_ne_bytes());
        attribute(out, EEPROM_LENGTH, &128u32.to_ne_bytes());
        attribute(out, EEPROM_PAGE, &[half.page]);
        attribute(out, EEPROM_I2C_ADDRESS, &[half.i2c_address]);
    })
}

/// The bytes in a `ETHTOOL_MSG_MODULE_EEPROM_GET` reply datagram.
pub fn eeprom_reply(datagram: &[u8], family: u16) -> Result<Vec<u8>, ReplyError> {
    let payload = reply(datagram, family, MODULE_EEPROM_GET_REPLY)?;
    Ok(attributes(payload)?
        .find(|&(kind, _)| kind == EEPROM_DATA)
        .ok_or(ReplyError::Malformed)?
        .1
        .to_vec())
}

/// `ETHTOOL_MSG_FEC_GET` of `netdev` with its statistics (Linux 5.13+; an older kernel refuses
/// the flag with `EOPNOTSUPP`, `ethnl_parse_header_dev_get()`).
pub fn fec_request(family: Family, netdev: &str, sequence: u32) -> Vec<u8> {
    message(family, FEC_GET, NLM_F_REQUEST, sequence, |out| {
        let mut header = Vec::new();
        string_attribute(&mut header, HEADER_DEV_NAME, netdev);
        let flags = FLAG_COMPACT_BITSETS | FLAG_STATS;
        attribute(&mut header, HEADER_FLAGS, &flags.to_ne_bytes());
        attribute(out, FEC_HEADER | NLA_F_NESTED, &header);
    })
}

/// A netdev's FEC counters since its driver last reset them: the totals over its lanes,
/// each `None` where the driver does not count it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FecStats {
    pub corrected_blocks: Option<u64>,
    pub uncorrectable_blocks: Option<u64>,
    pub corrected_bits: Option<u64>,
}

/// The counters in a `ETHTOOL_MSG_FEC_GET` reply datagram. `fec_put_stats()` (`net/ethtool/
/// fec.c`) writes each as a `u64` array, total first, then one per lane where the driver
/// counts lanes (`fec_stats_recalc()`): empty where the driver gives no total. Only the total
/// is read.
pub fn fec_reply(datagram: &[u8], family: u16) -> Result<FecStats, ReplyError> {
    let payload = reply(datagram, family, FEC_GET_REPLY)?;
    let mut stats = FecStats::default();
    let Some((_, nest)) = attributes(payload)?.find(|&(kind, _)| kind == FEC_STATS) else {
        return Ok(stats);
    };
    for (kind, value) in attributes(nest)? {
        let slot = match kind {
            FEC_STAT_CORRECTED => &mut stats.corrected_blocks,
            FEC_STAT_UNCORR => &mut stats.uncorrectable_blocks,
            FEC_STAT_CORR_BITS => &mut stats.corrected_bits,
            // ETHTOOL_A_FEC_STAT_PAD, and what later kernels add (histograms).
            _ => continue,
        };
        if value.len() % 8 != 0 {
            return Err(ReplyError::Malformed);
        }
        *slot = value.get(..8).map(u64_value).transpose()?;
    }
    Ok(stats)
}

#[cfg(test)]
mod tests;
