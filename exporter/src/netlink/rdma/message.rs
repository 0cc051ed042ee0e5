//! The RDMA netlink protocol (`NETLINK_RDMA`, the `RDMA_NLDEV_*` commands of the kernel's
//! `include/uapi/rdma/rdma_netlink.h`, what iproute2's `rdma` speaks): dump requests built, and
//! dump replies decoded. Plain code over bytes, no I/O: every message and attribute length is
//! checked against what surrounds it, and every attribute the collector reads against the type
//! and length the kernel gives it, so a truncated, oversized or malformed reply is an error,
//! never a panic or a wrong number. Attributes the collector does not know are skipped (newer
//! kernels add them).

use super::counters::{self, QpCounter, QpCounterMode};
use super::reply::{
    aligned, attr, holder, hw_counters, take, Attributes, Counter, Holder, ReplyError,
    MAX_DUMP_BYTES, MAX_ENTRIES,
};
use crate::netlink::datagram::{NLMSG_ERROR, NLMSG_HEADER_LEN, NLM_F_REQUEST};

/// The netlink protocol number of RDMA (`NETLINK_RDMA`).
pub const NETLINK_RDMA: i32 = 20;

const NLMSG_NOOP: u16 = 1;
const NLMSG_DONE: u16 = 3;
const NLMSG_OVERRUN: u16 = 4;
const NLM_F_DUMP: u16 = 0x300;

/// `RDMA_NL_NLDEV`: the client every `RDMA_NLDEV_CMD_*` belongs to.
const RDMA_NL_NLDEV: u16 = 5;

/// The dumps the collector asks for (`enum rdma_nldev_command`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// `RDMA_NLDEV_CMD_GET`: every device, its index and name.
    Devices,
    /// `RDMA_NLDEV_CMD_RES_*_GET` of one device.
    Resources(Resource),
    /// `RDMA_NLDEV_CMD_STAT_GET` of one port (since Linux 5.3): not a dump but one reply, the
    /// port's default counters, as `hw_counters/` gives them.
    PortCounters { port: u32 },
    /// `RDMA_NLDEV_CMD_STAT_GET` of one port for QPs, with a mode attribute so the kernel
    /// answers the mode alone (`stat_get_doit_qp`; `rdma statistic qp mode`).
    QpCounterMode { port: u32 },
    /// `RDMA_NLDEV_CMD_STAT_SET`: one port's QP counters in auto mode, binding every new QP
    /// to a counter by the criteria in `mask` (`rdma statistic qp set link DEV/PORT auto
    /// type,pid on`). Needs CAP_NET_ADMIN.
    SetQpCounterAuto { port: u32, mask: u32 },
    /// `RDMA_NLDEV_CMD_STAT_GET` dump for QPs (`nldev_res_get_counter_dumpit`): every bound
    /// counter of one device, its QPs and values (`rdma statistic qp show`).
    QpCounters,
}

/// The resource types the kernel tracks per device (`rdma resource show <type>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Resource {
    QueuePair,
    CompletionQueue,
    MemoryRegion,
    ProtectionDomain,
    CmId,
}

impl Resource {
    pub const ALL: [Resource; 5] = [
        Resource::QueuePair,
        Resource::CompletionQueue,
        Resource::MemoryRegion,
        Resource::ProtectionDomain,
        Resource::CmId,
    ];

    /// The label value, as `rdma resource show` names the type.
    pub fn label(self) -> &'static str {
        match self {
            Resource::QueuePair => "qp",
            Resource::CompletionQueue => "cq",
            Resource::MemoryRegion => "mr",
            Resource::ProtectionDomain => "pd",
            Resource::CmId => "cm_id",
        }
    }

    /// `RDMA_NLDEV_CMD_RES_{QP,CQ,MR,PD,CM_ID}_GET`.
    fn command(self) -> u16 {
        match self {
            Resource::QueuePair => 10,
            Resource::CmId => 11,
            Resource::CompletionQueue => 12,
            Resource::MemoryRegion => 13,
            Resource::ProtectionDomain => 14,
        }
    }

    /// The reply's table attribute and the attribute of each entry in it
    /// (`RDMA_NLDEV_ATTR_RES_<TYPE>` and `RDMA_NLDEV_ATTR_RES_<TYPE>_ENTRY`).
    fn table(self) -> (u16, u16) {
        match self {
            Resource::QueuePair => (attr::RES_QP, attr::RES_QP_ENTRY),
            Resource::CmId => (attr::RES_CM_ID, attr::RES_CM_ID_ENTRY),
            Resource::CompletionQueue => (attr::RES_CQ, attr::RES_CQ_ENTRY),
            Resource::MemoryRegion => (attr::RES_MR, attr::RES_MR_ENTRY),
            Resource::ProtectionDomain => (attr::RES_PD, attr::RES_PD_ENTRY),
        }
    }
}

impl Command {
    fn code(self) -> u16 {
        match self {
            Command::Devices => 1,
            Command::Resources(resource) => resource.command(),
            Command::PortCounters { .. } | Command::QpCounterMode { .. } | Command::QpCounters => {
                17
            }
            Command::SetQpCounterAuto { .. } => 16,
        }
    }

    /// The port a request names.
    fn port(self) -> Option<u32> {
        match self {
            Command::PortCounters { port }
            | Command::QpCounterMode { port }
            | Command::SetQpCounterAuto { port, .. } => Some(port),
            Command::Devices | Command::Resources(_) | Command::QpCounters => None,
        }
    }

    /// Dumps end with `NLMSG_DONE`; a single request is answered with one message, the reply
    /// or an error (asked without `NLM_F_ACK`, which would cost one more datagram to receive).
    fn is_dump(self) -> bool {
        matches!(
            self,
            Command::Devices | Command::Resources(_) | Command::QpCounters
        )
    }

    /// The netlink message type of the request and of each reply (`RDMA_NL_GET_TYPE`).
    pub(crate) fn message_type(self) -> u16 {
        (RDMA_NL_NLDEV << 10) + self.code()
    }
}

/// The request for `command`, as one netlink message: header, then the device index for the
/// per-device requests (the kernel refuses those without one), and the port index for a port's.
pub fn request(command: Command, device: Option<u32>, sequence: u32) -> Vec<u8> {
    // As iproute2's rdma puts them: device, port, then what the counter requests add.
    let mut words = vec![
        (attr::DEV_INDEX, device),
        (attr::PORT_INDEX, command.port()),
    ];
    let qp_counters = Some(u32::from(attr::RES_QP));
    match command {
        // Any mode value: its presence asks for the mode instead of the counters.
        Command::QpCounterMode { .. } => words.extend([
            (attr::STAT_MODE, Some(counters::MODE_MANUAL)),
            (attr::STAT_RES, qp_counters),
        ]),
        Command::SetQpCounterAuto { mask, .. } => words.extend([
            (attr::STAT_RES, qp_counters),
            (attr::STAT_MODE, Some(counters::MODE_AUTO)),
            (attr::STAT_AUTO_MODE_MASK, Some(mask)),
        ]),
        Command::QpCounters => words.push((attr::STAT_RES, qp_counters)),
        Command::Devices | Command::Resources(_) | Command::PortCounters { .. } => {}
    }
    let mut attributes = Vec::new();
    for (kind, value) in words {
        if let Some(value) = value {
            attributes.extend_from_slice(&8u16.to_ne_bytes());
            attributes.extend_from_slice(&kind.to_ne_bytes());
            attributes.extend_from_slice(&value.to_ne_bytes());
        }
    }
    let flags = match command.is_dump() {
        true => NLM_F_REQUEST | NLM_F_DUMP,
        false => NLM_F_REQUEST,
    };
    let length = NLMSG_HEADER_LEN + attributes.len();
    let mut message = Vec::with_capacity(length);
    message.extend_from_slice(&(length as u32).to_ne_bytes());
    message.extend_from_slice(&command.message_type().to_ne_bytes());
    message.extend_from_slice(&flags.to_ne_bytes());
    message.extend_from_slice(&sequence.to_ne_bytes());
    message.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel's is 0
    message.extend_from_slice(&attributes);
    message
}

/// An RDMA device as `RDMA_NLDEV_CMD_GET` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    pub index: u32,
    pub name: String,
}

/// One tracked resource: what the collector counts of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub holder: Holder,
    /// QPs and CM IDs bound to a port (a QP in RESET has none yet).
    pub port: Option<u32>,
    /// A QP's number (`RDMA_NLDEV_ATTR_RES_LQPN`), which names it in a counter's QP list.
    pub qp_number: Option<u32>,
    /// A QP's type (`enum ib_qp_type`) and state (`enum ib_qp_state`); a CM ID's QP type and
    /// CM state are not read.
    pub qp_type: Option<u8>,
    pub qp_state: Option<u8>,
    /// An MR's length in bytes: the memory it pins.
    pub mr_length: Option<u64>,
}

/// The replies of one request (a dump, or a single reply), fed datagram by datagram as they
/// arrive.
#[derive(Debug)]
pub struct Dump {
    command: Command,
    device: Option<u32>,
    sequence: u32,
    done: bool,
    bytes: usize,
    pub devices: Vec<Device>,
    pub entries: Vec<Entry>,
    pub counters: Vec<Counter>,
    pub qp_counter_mode: Option<QpCounterMode>,
    pub qp_counters: Vec<QpCounter>,
}

impl Dump {
    pub fn new(command: Command, device: Option<u32>, sequence: u32) -> Self {
        Dump {
            command,
            device,
            sequence,
            done: false,
            bytes: 0,
            devices: Vec::new(),
            entries: Vec::new(),
            counters: Vec::new(),
            qp_counter_mode: None,
            qp_counters: Vec::new(),
        }
    }

    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Decodes one datagram (one or more netlink messages).
    pub fn feed(&mut self, mut datagram: &[u8]) -> Result<(), ReplyError> {
        self.bytes = self.bytes.saturating_add(datagram.len());
        if self.bytes > MAX_DUMP_BYTES {
            return Err(ReplyError::TooLarge(MAX_ENTRIES));
        }
        while !datagram.is_empty() {
            if self.done {
                return Err(ReplyError::AfterDone);
            }
            let header = take(datagram, 0, NLMSG_HEADER_LEN).ok_or(ReplyError::MessageLength {
                length: NLMSG_HEADER_LEN,
                available: datagram.len(),
            })?;
            let length = u32_at(header, 0) as usize;
            let kind = u16::from_ne_bytes([header[4], header[5]]);
            let sequence = u32_at(header, 8);
            if length < NLMSG_HEADER_LEN || length > datagram.len() {
                return Err(ReplyError::MessageLength {
                    length,
                    available: datagram.len(),
                });
            }
            if sequence != self.sequence {
                return Err(ReplyError::Sequence {
                    got: sequence,
                    sent: self.sequence,
                });
            }
            self.message(kind, &datagram[NLMSG_HEADER_LEN..length])?;
            datagram = &datagram[aligned(length).min(datagram.len())..];
        }
        Ok(())
    }

    fn message(&mut self, kind: u16, payload: &[u8]) -> Result<(), ReplyError> {
        match kind {
            NLMSG_NOOP => Ok(()),
            NLMSG_OVERRUN => Err(ReplyError::Overrun),
            // An error (negative errno) or, with 0, an acknowledgement.
            NLMSG_ERROR => match i32_at(payload)? {
                0 => Ok(()),
                error => Err(ReplyError::Kernel(error.saturating_neg())),
            },
            // A dump's end; since 4.x with the dump's own error, if any, in it.
            NLMSG_DONE => {
                self.done = true;
                match payload.len() {
                    0 => Ok(()),
                    _ => match i32_at(payload)? {
                        error if error < 0 => Err(ReplyError::Kernel(error.saturating_neg())),
                        _ => Ok(()),
                    },
                }
            }
            kind if kind == self.command.message_type() => match self.command {
                Command::Devices => {
                    let attributes = Attributes::parse(payload)?;
                    self.devices.push(Device {
                        index: attributes.u32(attr::DEV_INDEX)?,
                        name: attributes.string(attr::DEV_NAME)?,
                    });
                    Ok(())
                }
                Command::Resources(resource) => self.resources(resource, payload),
                Command::PortCounters { port } => {
                    // The one message that answers a single request.
                    self.done = true;
                    self.port_counters(port, payload)
                }
                Command::QpCounterMode { port } => {
                    self.done = true;
                    let attributes = self.of_port(port, payload)?;
                    self.qp_counter_mode = Some(counters::mode(&attributes)?);
                    Ok(())
                }
                // `nldev_stat_set_doit` answers with the device and port alone; older
                // kernels (Debian's 5.10, seen in the lab) fill nothing in for auto mode.
                Command::SetQpCounterAuto { port, .. } => {
                    self.done = true;
                    match payload.is_empty() {
                        true => Ok(()),
                        false => self.of_port(port, payload).map(drop),
                    }
                }
                Command::QpCounters => {
                    let attributes = self.of_device(payload)?;
                    counters::qp_counters(&attributes, &mut self.qp_counters)
                }
            },
            other => Err(ReplyError::UnexpectedType(other)),
        }
    }

    /// The attributes of a reply about the device asked for.
    fn of_device<'a>(&self, payload: &'a [u8]) -> Result<Attributes<'a>, ReplyError> {
        let attributes = Attributes::parse(payload)?;
        let index = attributes.u32(attr::DEV_INDEX)?;
        match self.device.filter(|&asked| asked != index) {
            Some(asked) => Err(ReplyError::OtherDevice { got: index, asked }),
            None => Ok(attributes),
        }
    }

    /// The attributes of a reply about the device and port asked for.
    fn of_port<'a>(&self, port: u32, payload: &'a [u8]) -> Result<Attributes<'a>, ReplyError> {
        let attributes = self.of_device(payload)?;
        let got = attributes.u32(attr::PORT_INDEX)?;
        match got == port {
            true => Ok(attributes),
            false => Err(ReplyError::OtherPort { got, asked: port }),
        }
    }

    /// `stat_get_doit_default_counter` (drivers/infiniband/core/nldev.c): device index and name
    /// (kept in `devices`), port index, then the table of counters (`hw_counters`).
    fn port_counters(&mut self, port: u32, payload: &[u8]) -> Result<(), ReplyError> {
        let attributes = self.of_port(port, payload)?;
        // Which device the index is now: one deleted and added again has another.
        self.devices.push(Device {
            index: attributes.u32(attr::DEV_INDEX)?,
            name: attributes.string(attr::DEV_NAME)?,
        });
        self.counters = hw_counters(&attributes)?;
        Ok(())
    }

    fn resources(&mut self, resource: Resource, payload: &[u8]) -> Result<(), ReplyError> {
        let attributes = self.of_device(payload)?;
        let (table, entry_kind) = resource.table();
        // A device with none of this resource sends no table.
        let Some(table) = attributes.nested(table)? else {
            return Ok(());
        };
        for (kind, entry) in table.all() {
            if kind != entry_kind {
                continue;
            }
            if self.entries.len() >= MAX_ENTRIES {
                return Err(ReplyError::TooLarge(MAX_ENTRIES));
            }
            let entry = Attributes::parse(entry)?;
            let queue_pair = resource == Resource::QueuePair;
            self.entries.push(Entry {
                holder: holder(&entry)?,
                port: entry.optional_u32(attr::PORT_INDEX)?,
                qp_number: queue_pair
                    .then(|| entry.optional_u32(attr::RES_LQPN))
                    .transpose()?
                    .flatten(),
                qp_type: queue_pair
                    .then(|| entry.optional_u8(attr::RES_TYPE))
                    .transpose()?
                    .flatten(),
                qp_state: queue_pair
                    .then(|| entry.optional_u8(attr::RES_STATE))
                    .transpose()?
                    .flatten(),
                mr_length: entry.optional_u64(attr::RES_MRLEN)?,
            });
        }
        Ok(())
    }
}

fn u32_at(bytes: &[u8], offset: usize) -> u32 {
    let mut word = [0; 4];
    word.copy_from_slice(&bytes[offset..offset + 4]);
    u32::from_ne_bytes(word)
}

/// The `int` that opens an error or done message's payload.
fn i32_at(payload: &[u8]) -> Result<i32, ReplyError> {
    let word = take(payload, 0, 4).ok_or(ReplyError::MessageLength {
        length: NLMSG_HEADER_LEN + 4,
        available: NLMSG_HEADER_LEN + payload.len(),
    })?;
    Ok(i32::from_ne_bytes([word[0], word[1], word[2], word[3]]))
}

/// Replies built as the kernel builds them (`nla_put_*`, `nla_nest_start`, `nlmsg_put`), for
/// the tests here and the collector's.
#[cfg(test)]
pub(crate) mod encode;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod proptests;
