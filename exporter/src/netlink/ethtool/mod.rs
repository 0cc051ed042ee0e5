//! Ethtool over generic netlink (family `ethtool`, Linux 5.6+): the module EEPROM of a netdev,
//! read a half page at a time (`ETHTOOL_MSG_MODULE_EEPROM_GET`, Linux 5.13+, `net/ethtool/
//! eeprom.c`). Requests and replies are built and decoded here by plain code; `socket.rs` is
//! the only code that sends them. Numbers from `include/uapi/linux/ethtool_netlink.h` and
//! `genetlink.h` (as ethtool's `uapi/` copies them).

pub mod socket;

use crate::netlink::datagram::{NLMSG_ERROR, NLMSG_HEADER_LEN, NLM_F_REQUEST};

/// `GENL_ID_CTRL` and `CTRL_CMD_NEWFAMILY` (the reply), `CTRL_CMD_GETFAMILY`,
/// `CTRL_ATTR_FAMILY_ID`, `CTRL_ATTR_FAMILY_NAME`.
const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_NEWFAMILY: u8 = 1;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
/// `ETHTOOL_GENL_NAME`, `ETHTOOL_GENL_VERSION`.
const FAMILY: &str = "ethtool";
const VERSION: u8 = 1;
/// `ETHTOOL_MSG_MODULE_EEPROM_GET` (user to kernel) and its reply's command.
const MODULE_EEPROM_GET: u8 = 31;
const MODULE_EEPROM_GET_REPLY: u8 = 32;
/// `ETHTOOL_A_MODULE_EEPROM_*` and `ETHTOOL_A_HEADER_DEV_NAME`.
const EEPROM_HEADER: u16 = 1;
const EEPROM_OFFSET: u16 = 2;
const EEPROM_LENGTH: u16 = 3;
const EEPROM_PAGE: u16 = 4;
const EEPROM_I2C_ADDRESS: u16 = 6;
const EEPROM_DATA: u16 = 7;
const HEADER_DEV_NAME: u16 = 2;

const NLA_F_NESTED: u16 = 1 << 15;
const GENL_HEADER_LEN: usize = 4;

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

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    #[error("the kernel answered errno {0}")]
    Kernel(i32),
    #[error("malformed reply")]
    Malformed,
    #[error("no ethtool generic netlink family")]
    NoFamily,
}

/// `CTRL_CMD_GETFAMILY` for the ethtool family.
pub fn family_request(sequence: u32) -> Vec<u8> {
    let mut name = FAMILY.as_bytes().to_vec();
    name.push(0);
    message(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, sequence, |out| {
        attribute(out, CTRL_ATTR_FAMILY_NAME, &name)
    })
}

/// `ETHTOOL_MSG_MODULE_EEPROM_GET` of one half page of `netdev`'s module.
pub fn eeprom_request(family: u16, netdev: &str, half: HalfPage, sequence: u32) -> Vec<u8> {
    let mut name = netdev.as_bytes().to_vec();
    name.push(0);
    message(family, MODULE_EEPROM_GET, sequence, |out| {
        let mut header = Vec::new();
        attribute(&mut header, HEADER_DEV_NAME, &name);
        attribute(out, EEPROM_HEADER | NLA_F_NESTED, &header);
        attribute(out, EEPROM_OFFSET, &u32::from(half.offset).to_ne_bytes());
        attribute(out, EEPROM_LENGTH, &128u32.to_ne_bytes());
        attribute(out, EEPROM_PAGE, &[half.page]);
        attribute(out, EEPROM_I2C_ADDRESS, &[half.i2c_address]);
    })
}

/// The family id in a `CTRL_CMD_GETFAMILY` reply datagram.
pub fn family_reply(datagram: &[u8]) -> Result<u16, ReplyError> {
    let payload = reply(datagram, GENL_ID_CTRL, CTRL_CMD_NEWFAMILY)?;
    let id = attributes(payload)?
        .find(|&(kind, _)| kind == CTRL_ATTR_FAMILY_ID)
        .ok_or(ReplyError::NoFamily)?
        .1;
    Ok(u16::from_ne_bytes(
        id.try_into().map_err(|_| ReplyError::Malformed)?,
    ))
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

fn message(kind: u16, command: u8, sequence: u32, body: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut out = vec![0; NLMSG_HEADER_LEN];
    out.extend([command, VERSION, 0, 0]);
    body(&mut out);
    let length = out.len() as u32;
    out[0..4].copy_from_slice(&length.to_ne_bytes());
    out[4..6].copy_from_slice(&kind.to_ne_bytes());
    // No NLM_F_ACK: a reply is the answer, and an error comes as NLMSG_ERROR anyway.
    out[6..8].copy_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    out[8..12].copy_from_slice(&sequence.to_ne_bytes());
    out
}

fn attribute(out: &mut Vec<u8>, kind: u16, value: &[u8]) {
    out.extend(((4 + value.len()) as u16).to_ne_bytes());
    out.extend(kind.to_ne_bytes());
    out.extend(value);
    out.resize(aligned(out.len()), 0);
}

fn aligned(length: usize) -> usize {
    (length + 3) & !3
}

/// The sequence number a datagram answers, if it is long enough to say.
pub fn sequence(datagram: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(datagram.get(8..12)?.try_into().ok()?))
}

/// The generic netlink payload (after the command header) of the first message of a reply
/// datagram, which must be `command` of `kind`, or an error.
fn reply(datagram: &[u8], kind: u16, command: u8) -> Result<&[u8], ReplyError> {
    let header = datagram
        .get(..NLMSG_HEADER_LEN)
        .ok_or(ReplyError::Malformed)?;
    let length = u32::from_ne_bytes(header[0..4].try_into().expect("4 bytes")) as usize;
    let message_kind = u16::from_ne_bytes([header[4], header[5]]);
    let message = datagram
        .get(NLMSG_HEADER_LEN..length.max(NLMSG_HEADER_LEN))
        .ok_or(ReplyError::Malformed)?;
    if message_kind == NLMSG_ERROR {
        let errno = message.get(..4).ok_or(ReplyError::Malformed)?;
        return Err(ReplyError::Kernel(-i32::from_ne_bytes(
            errno.try_into().expect("4 bytes"),
        )));
    }
    if message_kind != kind || message.first() != Some(&command) {
        return Err(ReplyError::Malformed);
    }
    message.get(GENL_HEADER_LEN..).ok_or(ReplyError::Malformed)
}

/// The attributes of a payload, each checked to lie within it.
fn attributes(mut bytes: &[u8]) -> Result<impl Iterator<Item = (u16, &[u8])>, ReplyError> {
    let mut found = Vec::new();
    while bytes.len() >= 4 {
        let length = usize::from(u16::from_ne_bytes([bytes[0], bytes[1]]));
        let kind = u16::from_ne_bytes([bytes[2], bytes[3]]) & 0x3fff;
        let value = bytes.get(4..length).ok_or(ReplyError::Malformed)?;
        found.push((kind, value));
        bytes = bytes
            .get(aligned(length).min(bytes.len())..)
            .unwrap_or_default();
    }
    Ok(found.into_iter())
}

#[cfg(test)]
mod tests;
