//! `RTM_GETLINK` for one netdev with its VFs (`IFLA_EXT_MASK` = `RTEXT_FILTER_VF`), and the
//! per-VF statistics of its reply: `IFLA_VFINFO_LIST`, one `IFLA_VF_INFO` per VF, the VF's
//! number in `IFLA_VF_MAC` (`struct ifla_vf_mac`, whose first `__u32` is `vf`) and its counters
//! in the `IFLA_VF_STATS` nest.
//!
//! The kernel writes each VF's entry in `rtnl_fill_vfinfo()` (`net/core/rtnetlink.c`) when the
//! netdev has `ndo_get_vf_config`: `IFLA_VF_STATS` with every counter, zeroed first and filled
//! by `ndo_get_vf_stats` where the driver has one (unless the request says
//! `RTEXT_FILTER_SKIP_STATS`, which this one does not). `IFLA_VF_STATS` and, after it, the
//! dropped counters are later additions to `if_link.h`: an older kernel's entry without them
//! is read as far as it goes. The numbers below are `include/uapi/linux/if_link.h`'s and
//! `rtnetlink.h`'s (their enums counted from 0).

use crate::netlink::datagram::{NLMSG_ERROR, NLMSG_HEADER_LEN, NLM_F_REQUEST};
use crate::netlink::rdma::reply::{aligned, take, Attributes, ReplyError};

pub const NETLINK_ROUTE: i32 = 0;
/// `RTM_NEWLINK`, `RTM_GETLINK` (`enum` of `rtnetlink.h`, from `RTM_BASE` 16).
const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
/// `struct ifinfomsg`: family, pad, type (u16), index (i32), flags, change.
const IFINFOMSG_LEN: usize = 16;
/// `enum` of `if_link.h`: `IFLA_VFINFO_LIST` 22, `IFLA_EXT_MASK` 29.
const IFLA_VFINFO_LIST: u16 = 22;
const IFLA_EXT_MASK: u16 = 29;
/// `RTEXT_FILTER_VF` (`rtnetlink.h`, `1 << 0`).
const RTEXT_FILTER_VF: u32 = 1;
/// `IFLA_VF_INFO` in `IFLA_VFINFO_LIST`; `IFLA_VF_MAC` and `IFLA_VF_STATS` in it.
const IFLA_VF_INFO: u16 = 1;
const IFLA_VF_MAC: u16 = 1;
const IFLA_VF_STATS: u16 = 8;
/// PCIe allows at most 65535 VFs per PF (`TotalVFs` is 16 bits): more entries are no reply.
const MAX_VFS: usize = 1 << 16;

/// A counter of `IFLA_VF_STATS`, by its attribute number (`IFLA_VF_STATS_PAD`, 6, is
/// padding).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum VfCounter {
    RxPackets = 0,
    TxPackets = 1,
    RxBytes = 2,
    TxBytes = 3,
    Broadcast = 4,
    Multicast = 5,
    RxDropped = 7,
    TxDropped = 8,
}

impl VfCounter {
    pub const ALL: [VfCounter; 8] = [
        VfCounter::RxPackets,
        VfCounter::TxPackets,
        VfCounter::RxBytes,
        VfCounter::TxBytes,
        VfCounter::Broadcast,
        VfCounter::Multicast,
        VfCounter::RxDropped,
        VfCounter::TxDropped,
    ];
}

/// One VF's counters as its PF reports them, in attribute order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VfStats {
    /// The VF's number: `virtfn<vf>` under the PF's PCI device.
    pub vf: u32,
    pub counters: Vec<(VfCounter, u64)>,
}

/// `RTM_GETLINK` for the netdev `ifindex`, with its VFs.
pub fn request(ifindex: u32, sequence: u32) -> Vec<u8> {
    let attribute_len = 4 + 4;
    let length = NLMSG_HEADER_LEN + IFINFOMSG_LEN + attribute_len;
    let mut bytes = Vec::with_capacity(length);
    bytes.extend_from_slice(&(length as u32).to_ne_bytes());
    bytes.extend_from_slice(&RTM_GETLINK.to_ne_bytes());
    bytes.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    bytes.extend_from_slice(&sequence.to_ne_bytes());
    bytes.extend_from_slice(&0u32.to_ne_bytes());
    // ifinfomsg: AF_UNSPEC, the index, nothing else.
    bytes.extend_from_slice(&[0; 4]);
    bytes.extend_from_slice(&ifindex.to_ne_bytes());
    bytes.extend_from_slice(&[0; 8]);
    bytes.extend_from_slice(&(attribute_len as u16).to_ne_bytes());
    bytes.extend_from_slice(&IFLA_EXT_MASK.to_ne_bytes());
    bytes.extend_from_slice(&RTEXT_FILTER_VF.to_ne_bytes());
    bytes
}

/// The VFs' statistics in the reply to [`request`]: one `RTM_NEWLINK` for `ifindex`, or an
/// `NLMSG_ERROR`. A netdev without VF operations has no `IFLA_VFINFO_LIST`: no VFs.
pub fn decode(datagram: &[u8], sequence: u32, ifindex: u32) -> Result<Vec<VfStats>, ReplyError> {
    let header = take(datagram, 0, NLMSG_HEADER_LEN).ok_or(ReplyError::MessageLength {
        length: NLMSG_HEADER_LEN,
        available: datagram.len(),
    })?;
    let length = u32_at(header, 0) as usize;
    let kind = u16::from_ne_bytes([header[4], header[5]]);
    if length < NLMSG_HEADER_LEN || length > datagram.len() {
        return Err(ReplyError::MessageLength {
            length,
            available: datagram.len(),
        });
    }
    let got = u32_at(header, 8);
    if got != sequence {
        return Err(ReplyError::Sequence {
            got,
            sent: sequence,
        });
    }
    let payload = &datagram[NLMSG_HEADER_LEN..length];
    match kind {
        NLMSG_ERROR => {
            let errno = take(payload, 0, 4).ok_or(ReplyError::MessageLength {
                length: 4,
                available: payload.len(),
            })?;
            Err(ReplyError::Kernel(
                i32::from_ne_bytes([errno[0], errno[1], errno[2], errno[3]]).saturating_neg(),
            ))
        }
        RTM_NEWLINK => link(payload, ifindex),
        other => Err(ReplyError::UnexpectedType(other)),
    }
}

fn link(payload: &[u8], ifindex: u32) -> Result<Vec<VfStats>, ReplyError> {
    let info = take(payload, 0, IFINFOMSG_LEN).ok_or(ReplyError::MessageLength {
        length: IFINFOMSG_LEN,
        available: payload.len(),
    })?;
    let got = u32_at(info, 4);
    if got != ifindex {
        return Err(ReplyError::OtherDevice {
            got,
            asked: ifindex,
        });
    }
    let attributes = Attributes::parse(&payload[aligned(IFINFOMSG_LEN)..])?;
    let Some(list) = attributes.nested(IFLA_VFINFO_LIST)? else {
        return Ok(Vec::new());
    };
    let mut vfs = Vec::new();
    for (kind, entry) in list.all() {
        if kind != IFLA_VF_INFO {
            continue;
        }
        if vfs.len() >= MAX_VFS {
            return Err(ReplyError::TooLarge(MAX_VFS));
        }
        let entry = Attributes::parse(entry)?;
        let mac = entry
            .get(IFLA_VF_MAC)
            .ok_or(ReplyError::Missing(IFLA_VF_MAC))?;
        let vf = take(mac, 0, 4).ok_or(ReplyError::AttributeSize {
            kind: IFLA_VF_MAC,
            length: mac.len(),
            expected: "36 (struct ifla_vf_mac)",
        })?;
        // An older kernel's entry: no counters for this VF.
        let Some(stats) = entry.nested(IFLA_VF_STATS)? else {
            continue;
        };
        let mut counters = Vec::with_capacity(VfCounter::ALL.len());
        for counter in VfCounter::ALL {
            if let Some(value) = stats.optional_u64(counter as u16)? {
                counters.push((counter, value));
            }
        }
        vfs.push(VfStats {
            vf: u32_at(vf, 0),
            counters,
        });
    }
    Ok(vfs)
}

fn u32_at(bytes: &[u8], offset: usize) -> u32 {
    let mut value = [0; 4];
    value.copy_from_slice(&bytes[offset..offset + 4]);
    u32::from_ne_bytes(value)
}

/// Replies built as `rtnl_fill_ifinfo()` and `rtnl_fill_vfinfo()` build them, for the tests
/// here and the collector's.
#[cfg(test)]
pub(crate) mod encode;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod proptests;
