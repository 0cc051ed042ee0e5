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

/// The netlink protocol number of RDMA (`NETLINK_RDMA`).
pub const NETLINK_RDMA: i32 = 20;

const NLMSG_HEADER_LEN: usize = 16;
const NLMSG_NOOP: u16 = 1;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLMSG_OVERRUN: u16 = 4;
const NLM_F_REQUEST: u16 = 0x1;
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
pub(crate) mod encode {
    use super::*;
    use crate::netlink::rdma::reply::NLA_HEADER_LEN;

    /// An attribute: header, payload, padding to 4 bytes.
    pub fn attribute(kind: u16, payload: &[u8]) -> Vec<u8> {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&((NLA_HEADER_LEN + payload.len()) as u16).to_ne_bytes());
        bytes.extend_from_slice(&kind.to_ne_bytes());
        bytes.extend_from_slice(payload);
        bytes.resize(aligned(bytes.len()), 0);
        bytes
    }

    pub fn u8(kind: u16, value: u8) -> Vec<u8> {
        attribute(kind, &[value])
    }

    pub fn u32(kind: u16, value: u32) -> Vec<u8> {
        attribute(kind, &value.to_ne_bytes())
    }

    pub fn u64(kind: u16, value: u64) -> Vec<u8> {
        attribute(kind, &value.to_ne_bytes())
    }

    pub fn string(kind: u16, value: &str) -> Vec<u8> {
        attribute(kind, &[value.as_bytes(), b"\0"].concat())
    }

    /// A nest, flagged `NLA_F_NESTED` as `nla_nest_start` flags it since 5.2.
    pub fn nested(kind: u16, attributes: &[Vec<u8>]) -> Vec<u8> {
        attribute(kind | 0x8000, &attributes.concat())
    }

    pub fn message(kind: u16, flags: u16, sequence: u32, payload: &[u8]) -> Vec<u8> {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&((NLMSG_HEADER_LEN + payload.len()) as u32).to_ne_bytes());
        bytes.extend_from_slice(&kind.to_ne_bytes());
        bytes.extend_from_slice(&flags.to_ne_bytes());
        bytes.extend_from_slice(&sequence.to_ne_bytes());
        bytes.extend_from_slice(&4242u32.to_ne_bytes());
        bytes.extend_from_slice(payload);
        bytes.resize(aligned(bytes.len()), 0);
        bytes
    }

    /// `NLMSG_DONE` with the dump's result.
    pub fn done(sequence: u32, error: i32) -> Vec<u8> {
        message(NLMSG_DONE, 0x2, sequence, &error.to_ne_bytes())
    }

    /// `NLMSG_ERROR` with a negative errno (and the request's header, as the kernel echoes it).
    pub fn error(sequence: u32, errno: i32) -> Vec<u8> {
        let request = request(Command::Devices, None, sequence);
        message(
            NLMSG_ERROR,
            0,
            sequence,
            &[&(-errno).to_ne_bytes()[..], &request].concat(),
        )
    }

    /// One entry's attributes as `fill_res_{qp,cq,mr,pd,cm_id}_entry` puts those read here.
    pub fn entry(resource: Resource, entry: &Entry) -> Vec<u8> {
        let mut attributes = Vec::new();
        if let Some(port) = entry.port {
            attributes.push(u32(attr::PORT_INDEX, port));
        }
        if let Some(number) = entry.qp_number {
            attributes.push(u32(attr::RES_LQPN, number));
        }
        if let Some(qp_type) = entry.qp_type {
            attributes.push(u8(attr::RES_TYPE, qp_type));
        }
        if let Some(state) = entry.qp_state {
            attributes.push(u8(attr::RES_STATE, state));
        }
        if let Some(length) = entry.mr_length {
            attributes.push(u64(attr::RES_MRLEN, length));
        }
        match &entry.holder {
            Holder::Process(pid) => attributes.push(u32(attr::RES_PID, *pid)),
            Holder::Kernel(name) => attributes.push(string(attr::RES_KERN_NAME, name)),
            Holder::Unknown => {}
        }
        // Attributes the collector does not read: skipped, whatever their size.
        attributes.push(u32(33, 0x0a00_0001)); // RDMA_NLDEV_ATTR_RES_SRC_ADDR, cut short
        attributes.push(u64(200, 7)); // an attribute of a later kernel
        nested(resource.table().1, &attributes)
    }

    /// One dump reply message: device index and name, then the table of `entries`.
    pub fn resources(
        resource: Resource,
        device: &Device,
        sequence: u32,
        entries: &[Entry],
    ) -> Vec<u8> {
        let entries: Vec<Vec<u8>> = entries.iter().map(|item| entry(resource, item)).collect();
        let payload = [
            u32(attr::DEV_INDEX, device.index),
            string(attr::DEV_NAME, &device.name),
            nested(resource.table().0, &entries),
        ]
        .concat();
        message(
            Command::Resources(resource).message_type(),
            0x2,
            sequence,
            &payload,
        )
    }

    /// The reply to `RDMA_NLDEV_CMD_STAT_GET` on a port, as `stat_get_doit_default_counter`
    /// fills it: `fill_nldev_handle`, the port index, then the counters.
    pub fn port_counters(
        device: &Device,
        port: u32,
        sequence: u32,
        counters: &[Counter],
    ) -> Vec<u8> {
        let payload = [
            u32(attr::DEV_INDEX, device.index),
            string(attr::DEV_NAME, &device.name),
            u32(attr::PORT_INDEX, port),
            hw_counters(counters),
        ]
        .concat();
        let command = Command::PortCounters { port };
        message(command.message_type(), 0, sequence, &payload)
    }

    /// The `STAT_HWCOUNTERS` table as `fill_stat_counter_hwcounters` and
    /// `stat_get_doit_default_counter` put it: per counter `rdma_nl_stat_hwcounter_entry`, the
    /// name, then the value through `nla_put_u64_64bit`, which puts a `RDMA_NLDEV_ATTR_PAD`
    /// before it where the value would be unaligned. Here a pad goes after every name whose
    /// attribute ends on 8 bytes, so both forms are read.
    pub fn hw_counters(counters: &[Counter]) -> Vec<u8> {
        let entries: Vec<Vec<u8>> = counters
            .iter()
            .map(|counter| {
                let name = string(attr::STAT_HWCOUNTER_ENTRY_NAME, &counter.name);
                let pad = match name.len() % 8 {
                    0 => attribute(0, &[]),
                    _ => Vec::new(),
                };
                let value = u64(attr::STAT_HWCOUNTER_ENTRY_VALUE, counter.value);
                nested(attr::STAT_HWCOUNTER_ENTRY, &[name, pad, value])
            })
            .collect();
        nested(attr::STAT_HWCOUNTERS, &entries)
    }

    /// One request's replies as `tests/lab/helpers/rdma_nl_capture.c` wrote them (each
    /// datagram after its length, a native u32), fed to the decoder as the socket would.
    pub fn replay(path: &std::path::Path, command: Command, device: Option<u32>) -> Dump {
        let bytes = std::fs::read(path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
        let mut dump = Dump::new(command, device, 1);
        let mut rest = &bytes[..];
        while let Some((length, after)) = rest.split_first_chunk::<4>() {
            let (datagram, after) = after.split_at(u32::from_ne_bytes(*length) as usize);
            dump.feed(datagram)
                .unwrap_or_else(|err| panic!("{}: {err}", path.display()));
            rest = after;
        }
        assert!(dump.is_done(), "{}: incomplete", path.display());
        dump
    }

    /// The real kernels' captures in `tests/fixtures/rdma_netlink/<release>/`.
    pub fn fixtures(release: &str) -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/rdma_netlink")
            .join(release)
    }

    pub fn device(device: &Device, sequence: u32) -> Vec<u8> {
        let payload = [
            u32(attr::DEV_INDEX, device.index),
            string(attr::DEV_NAME, &device.name),
            string(5, "2.0.0"), // RDMA_NLDEV_ATTR_FW_VERSION
        ]
        .concat();
        message(Command::Devices.message_type(), 0x2, sequence, &payload)
    }
}

#[cfg(test)]
mod tests {
    use super::encode;
    use super::*;

    fn rxe0() -> Device {
        Device {
            index: 3,
            name: "rxe0".to_string(),
        }
    }

    fn qp(holder: Holder, port: Option<u32>, qp_type: u8, state: u8) -> Entry {
        Entry {
            holder,
            port,
            qp_number: Some(port.unwrap_or(0) * 1000 + u32::from(state)),
            qp_type: Some(qp_type),
            qp_state: Some(state),
            mr_length: None,
        }
    }

    #[test]
    fn a_resource_dump_request_names_command_and_device() {
        let bytes = request(Command::Resources(Resource::MemoryRegion), Some(3), 7);
        assert_eq!(bytes.len(), 24);
        assert_eq!(u32_at(&bytes, 0), 24);
        assert_eq!(u16::from_ne_bytes([bytes[4], bytes[5]]), (5 << 10) + 13);
        assert_eq!(u16::from_ne_bytes([bytes[6], bytes[7]]), 0x301);
        assert_eq!(u32_at(&bytes, 8), 7);
        assert_eq!(&bytes[16..], &encode::u32(attr::DEV_INDEX, 3)[..]);
        assert_eq!(request(Command::Devices, None, 1).len(), 16);
    }

    fn counters(pairs: &[(&str, u64)]) -> Vec<Counter> {
        pairs
            .iter()
            .map(|(name, value)| Counter {
                name: name.to_string(),
                value: *value,
            })
            .collect()
    }

    #[test]
    fn a_port_counters_request_names_device_and_port() {
        let bytes = request(Command::PortCounters { port: 2 }, Some(3), 7);
        assert_eq!(bytes.len(), 32);
        assert_eq!(u32_at(&bytes, 0), 32);
        assert_eq!(u16::from_ne_bytes([bytes[4], bytes[5]]), (5 << 10) + 17);
        // NLM_F_REQUEST alone: a dump flag would ask the kernel for its counter dump.
        assert_eq!(u16::from_ne_bytes([bytes[6], bytes[7]]), 0x1);
        assert_eq!(&bytes[16..24], &encode::u32(attr::DEV_INDEX, 3)[..]);
        assert_eq!(&bytes[24..], &encode::u32(attr::PORT_INDEX, 2)[..]);
    }

    #[test]
    fn port_counters_read_back_from_one_message() {
        let written = counters(&[("sent_pkts", 1 << 40), ("rcvd_pkts", 7), ("link_downed", 0)]);
        let command = Command::PortCounters { port: 1 };
        let reply = encode::port_counters(&rxe0(), 1, 4, &written);
        let mut read = Dump::new(command, Some(3), 4);
        read.feed(&reply).unwrap();
        assert!(read.is_done());
        assert_eq!(read.counters, written);
        // Anything after the one reply is not of this request.
        let mut twice = Dump::new(command, Some(3), 4);
        assert_eq!(
            twice.feed(&[reply.clone(), reply].concat()).unwrap_err(),
            ReplyError::AfterDone
        );
        // A driver without counters sends an empty table.
        let mut empty = Dump::new(command, Some(3), 4);
        empty
            .feed(&encode::port_counters(&rxe0(), 1, 4, &[]))
            .unwrap();
        assert!(empty.is_done() && empty.counters.is_empty());
    }

    #[test]
    fn port_counters_of_another_port_or_without_table_or_value_are_refused() {
        let command = Command::PortCounters { port: 1 };
        let written = counters(&[("sent_pkts", 1)]);
        assert_eq!(
            refused(command, &encode::port_counters(&rxe0(), 2, 1, &written)),
            ReplyError::OtherPort { got: 2, asked: 1 }
        );
        let handle = [
            encode::u32(attr::DEV_INDEX, 3),
            encode::string(attr::DEV_NAME, "rxe0"),
            encode::u32(attr::PORT_INDEX, 1),
        ];
        let no_table = encode::message(command.message_type(), 0, 1, &handle.concat());
        assert_eq!(
            refused(command, &no_table),
            ReplyError::Missing(attr::STAT_HWCOUNTERS)
        );
        let nameless_value = encode::nested(
            attr::STAT_HWCOUNTERS,
            &[encode::nested(
                attr::STAT_HWCOUNTER_ENTRY,
                &[encode::string(attr::STAT_HWCOUNTER_ENTRY_NAME, "sent_pkts")],
            )],
        );
        let payload = [&handle[..], &[nameless_value]].concat().concat();
        assert_eq!(
            refused(
                command,
                &encode::message(command.message_type(), 0, 1, &payload)
            ),
            ReplyError::Missing(attr::STAT_HWCOUNTER_ENTRY_VALUE)
        );
        let short_value = encode::nested(
            attr::STAT_HWCOUNTERS,
            &[encode::nested(
                attr::STAT_HWCOUNTER_ENTRY,
                &[
                    encode::string(attr::STAT_HWCOUNTER_ENTRY_NAME, "sent_pkts"),
                    encode::u32(attr::STAT_HWCOUNTER_ENTRY_VALUE, 1),
                ],
            )],
        );
        let payload = [&handle[..], &[short_value]].concat().concat();
        assert!(matches!(
            refused(
                command,
                &encode::message(command.message_type(), 0, 1, &payload)
            ),
            ReplyError::AttributeSize {
                kind: attr::STAT_HWCOUNTER_ENTRY_VALUE,
                length: 4,
                ..
            }
        ));
        // A kernel before 5.3 (no STAT_GET) or a driver without port counters: EINVAL.
        assert_eq!(
            refused(command, &encode::error(1, libc::EINVAL)),
            ReplyError::Kernel(libc::EINVAL)
        );
    }

    /// Real kernels' replies (Debian 6.12 and 6.1 in the kernel lab, Soft-RoCE's rxe0 after
    /// ib_write_bw ran), captured with rxe0's `hw_counters/` files read right after: the same
    /// counters, the same values.
    #[test]
    fn captured_port_counters_are_the_hw_counters_files() {
        for release in ["6.12", "6.1"] {
            let dir = encode::fixtures(release);
            let devices = encode::replay(&dir.join("devices.bin"), Command::Devices, None);
            let rxe0 = devices.devices.iter().find(|device| device.name == "rxe0");
            let index = rxe0.expect("rxe0 listed").index;
            let port = Command::PortCounters { port: 1 };
            let reply = encode::replay(&dir.join("stat_port1.bin"), port, Some(index));
            assert_eq!(reply.devices[0].name, "rxe0");
            let mut read: Vec<(String, u64)> = (reply.counters.into_iter())
                .map(|counter| (counter.name, counter.value))
                .collect();
            let text = std::fs::read_to_string(dir.join("hw_counters_port1.txt")).unwrap();
            let mut files: Vec<(String, u64)> = (text.lines())
                .map(|line| {
                    let (name, value) = line.split_once(' ').unwrap();
                    (name.to_string(), value.parse().unwrap())
                })
                .collect();
            read.sort();
            files.sort();
            assert_eq!(read, files, "{release}");
            assert!(files
                .iter()
                .any(|(name, value)| name == "sent_pkts" && *value > 0));
        }
    }

    #[test]
    fn a_queue_pair_dump_over_two_datagrams_reads_back() {
        let entries = [
            qp(Holder::Kernel("ib_core".into()), Some(1), 1, 3),
            qp(Holder::Process(812), None, 2, 0),
            qp(Holder::Process(812), Some(1), 2, 3),
        ];
        let mut dump = Dump::new(Command::Resources(Resource::QueuePair), Some(3), 9);
        let first = encode::resources(Resource::QueuePair, &rxe0(), 9, &entries[..2]);
        let second = [
            encode::resources(Resource::QueuePair, &rxe0(), 9, &entries[2..]),
            encode::done(9, 0),
        ]
        .concat();
        dump.feed(&first).unwrap();
        assert!(!dump.is_done());
        dump.feed(&second).unwrap();
        assert!(dump.is_done());
        assert_eq!(dump.entries, entries);
    }

    #[test]
    fn memory_regions_carry_their_length() {
        let mr = Entry {
            holder: Holder::Process(5),
            port: None,
            qp_number: None,
            qp_type: None,
            qp_state: None,
            mr_length: Some(1 << 33),
        };
        let mut dump = Dump::new(Command::Resources(Resource::MemoryRegion), Some(3), 1);
        dump.feed(
            &[
                encode::resources(
                    Resource::MemoryRegion,
                    &rxe0(),
                    1,
                    std::slice::from_ref(&mr),
                ),
                encode::done(1, 0),
            ]
            .concat(),
        )
        .unwrap();
        assert_eq!(dump.entries, [mr]);
    }

    #[test]
    fn the_device_list_reads_back() {
        let devices = [
            rxe0(),
            Device {
                index: 4,
                name: "mlx5_0".into(),
            },
        ];
        let mut dump = Dump::new(Command::Devices, None, 2);
        let bytes: Vec<u8> = devices
            .iter()
            .flat_map(|device| encode::device(device, 2))
            .chain(encode::done(2, 0))
            .collect();
        dump.feed(&bytes).unwrap();
        assert_eq!(dump.devices, devices);
    }

    fn refused(command: Command, bytes: &[u8]) -> ReplyError {
        Dump::new(command, Some(3), 1).feed(bytes).unwrap_err()
    }

    #[test]
    fn kernel_errors_are_reported_with_their_errno() {
        let command = Command::Resources(Resource::CmId);
        assert_eq!(
            refused(command, &encode::error(1, libc::EOPNOTSUPP)),
            ReplyError::Kernel(libc::EOPNOTSUPP)
        );
        assert_eq!(
            refused(command, &encode::done(1, -libc::EINTR)),
            ReplyError::Kernel(libc::EINTR)
        );
        // An acknowledgement is no error.
        assert!(Dump::new(command, Some(3), 1)
            .feed(&encode::error(1, 0))
            .is_ok());
    }

    #[test]
    fn malformed_replies_are_refused() {
        let command = Command::Resources(Resource::QueuePair);
        let good = encode::resources(
            Resource::QueuePair,
            &rxe0(),
            1,
            &[qp(Holder::Process(1), Some(1), 2, 3)],
        );
        // Cut inside the header, inside the message, or with a length beyond the datagram.
        assert!(matches!(
            refused(command, &good[..10]),
            ReplyError::MessageLength { .. }
        ));
        assert!(matches!(
            refused(command, &good[..good.len() - 8]),
            ReplyError::MessageLength { .. }
        ));
        let mut long = good.clone();
        long[..4].copy_from_slice(&(good.len() as u32 + 4).to_ne_bytes());
        assert!(matches!(
            refused(command, &long),
            ReplyError::MessageLength { .. }
        ));
        // An attribute longer than its message.
        let mut overlong = good.clone();
        overlong[16..18].copy_from_slice(&200u16.to_ne_bytes());
        assert!(matches!(
            refused(command, &overlong),
            ReplyError::AttributeLength { kind: 1, .. }
        ));
        // A u32 of 2 bytes, a u8 of 4, a string without its NUL.
        let short_index = encode::message(
            command.message_type(),
            0,
            1,
            &encode::attribute(attr::DEV_INDEX, &[1, 0]),
        );
        assert!(matches!(
            refused(command, &short_index),
            ReplyError::AttributeSize {
                kind: 1,
                length: 2,
                ..
            }
        ));
        let wide_state = [
            encode::u32(attr::DEV_INDEX, 3),
            encode::nested(
                attr::RES_QP,
                &[encode::nested(
                    attr::RES_QP_ENTRY,
                    &[encode::u32(attr::RES_STATE, 3)],
                )],
            ),
        ]
        .concat();
        assert!(matches!(
            refused(
                command,
                &encode::message(command.message_type(), 0, 1, &wide_state)
            ),
            ReplyError::AttributeSize {
                kind: attr::RES_STATE,
                length: 4,
                ..
            }
        ));
        let unterminated = [
            encode::u32(attr::DEV_INDEX, 3),
            encode::attribute(attr::DEV_NAME, b"rxe0"),
        ]
        .concat();
        let devices = Command::Devices;
        assert_eq!(
            Dump::new(devices, None, 1)
                .feed(&encode::message(
                    devices.message_type(),
                    0,
                    1,
                    &unterminated
                ))
                .unwrap_err(),
            ReplyError::BadString(attr::DEV_NAME)
        );
    }

    #[test]
    fn replies_of_another_request_are_refused() {
        let command = Command::Resources(Resource::QueuePair);
        let entry = [qp(Holder::Process(1), Some(1), 2, 3)];
        assert_eq!(
            refused(
                command,
                &encode::resources(Resource::QueuePair, &rxe0(), 2, &entry)
            ),
            ReplyError::Sequence { got: 2, sent: 1 }
        );
        let other = Device {
            index: 9,
            name: "mlx5_0".into(),
        };
        assert_eq!(
            refused(
                command,
                &encode::resources(Resource::QueuePair, &other, 1, &entry)
            ),
            ReplyError::OtherDevice { got: 9, asked: 3 }
        );
        assert_eq!(
            refused(
                command,
                &encode::resources(Resource::CompletionQueue, &rxe0(), 1, &[])
            ),
            ReplyError::UnexpectedType(
                Command::Resources(Resource::CompletionQueue).message_type()
            )
        );
        assert_eq!(
            refused(command, &[encode::done(1, 0), encode::done(1, 0)].concat()),
            ReplyError::AfterDone
        );
    }
}

#[cfg(test)]
mod proptests {
    use super::encode;
    use super::*;
    use crate::netlink::rdma::reply::NLA_HEADER_LEN;
    use proptest::prelude::*;

    fn holder() -> impl Strategy<Value = Holder> {
        prop_oneof![
            any::<u32>().prop_map(Holder::Process),
            "[a-z_]{1,20}".prop_map(Holder::Kernel),
            Just(Holder::Unknown),
        ]
    }

    fn entry(resource: Resource) -> impl Strategy<Value = Entry> {
        let queue_pair = resource == Resource::QueuePair;
        let memory_region = resource == Resource::MemoryRegion;
        (
            holder(),
            proptest::option::of(1u32..=255),
            any::<u8>(),
            any::<u8>(),
            any::<u64>(),
            any::<u32>(),
        )
            .prop_map(
                move |(holder, port, qp_type, state, length, number)| Entry {
                    holder,
                    port,
                    qp_number: queue_pair.then_some(number),
                    qp_type: queue_pair.then_some(qp_type),
                    qp_state: queue_pair.then_some(state),
                    mr_length: memory_region.then_some(length),
                },
            )
    }

    fn resource() -> impl Strategy<Value = Resource> {
        proptest::sample::select(Resource::ALL.to_vec())
    }

    /// A whole dump: entries split over messages, the messages over datagrams, then DONE.
    fn dump() -> impl Strategy<Value = (Resource, Vec<Entry>, Vec<Vec<u8>>)> {
        resource()
            .prop_flat_map(|resource| {
                (
                    Just(resource),
                    proptest::collection::vec(entry(resource), 0..40),
                    1usize..8,
                    1usize..4,
                )
            })
            .prop_map(|(resource, entries, per_message, per_datagram)| {
                let device = Device {
                    index: 3,
                    name: "rxe0".into(),
                };
                let mut messages: Vec<Vec<u8>> = entries
                    .chunks(per_message)
                    .map(|chunk| encode::resources(resource, &device, 1, chunk))
                    .collect();
                messages.push(encode::done(1, 0));
                let datagrams = messages
                    .chunks(per_datagram)
                    .map(|chunk| chunk.concat())
                    .collect();
                (resource, entries, datagrams)
            })
    }

    fn counter() -> impl Strategy<Value = Counter> {
        ("[a-z_]{1,40}", any::<u64>()).prop_map(|(name, value)| Counter { name, value })
    }

    proptest! {
        #[test]
        fn written_port_counters_read_back(
            written in proptest::collection::vec(counter(), 0..64),
            port in 1u32..=255,
        ) {
            let device = Device { index: 3, name: "rxe0".into() };
            let mut read = Dump::new(Command::PortCounters { port }, Some(3), 1);
            read.feed(&encode::port_counters(&device, port, 1, &written)).unwrap();
            prop_assert!(read.is_done());
            prop_assert_eq!(read.counters, written);
        }

        /// A real reply cut short or with bytes changed: an error or counters, never a panic,
        /// and never more counters than the bytes could hold.
        #[test]
        fn damaged_port_counters_never_panic(
            written in proptest::collection::vec(counter(), 0..32),
            cut in any::<proptest::sample::Index>(),
            flips in proptest::collection::vec((any::<proptest::sample::Index>(), any::<u8>()), 0..6),
        ) {
            let device = Device { index: 3, name: "rxe0".into() };
            let reply = encode::port_counters(&device, 1, 1, &written);
            let mut damaged = reply[..cut.index(reply.len() + 1)].to_vec();
            for (at, byte) in &flips {
                if !damaged.is_empty() {
                    let at = at.index(damaged.len());
                    damaged[at] ^= byte;
                }
            }
            let mut read = Dump::new(Command::PortCounters { port: 1 }, Some(3), 1);
            let _ = read.feed(&damaged);
            prop_assert!(read.counters.len() <= damaged.len() / (3 * NLA_HEADER_LEN));
        }

        #[test]
        fn a_written_dump_reads_back((resource, entries, datagrams) in dump()) {
            let mut read = Dump::new(Command::Resources(resource), Some(3), 1);
            for datagram in &datagrams {
                read.feed(datagram).unwrap();
            }
            prop_assert!(read.is_done());
            prop_assert_eq!(read.entries, entries);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096), resource in resource()) {
            for command in [Command::Resources(resource), Command::Devices, Command::PortCounters { port: 1 }] {
                let _ = Dump::new(command, Some(3), 1).feed(&bytes);
                // The same bytes as the attributes of a reply whose header is right.
                let message = encode::message(command.message_type(), 0x2, 1, &bytes);
                let _ = Dump::new(command, Some(3), 1).feed(&message);
            }
        }

        /// A real dump cut short, grown, or with bytes changed: an error or entries, never a
        /// panic, and never more entries than were written.
        #[test]
        fn damaged_dumps_never_panic(
            (resource, entries, datagrams) in dump(),
            cut in any::<proptest::sample::Index>(),
            flips in proptest::collection::vec((any::<proptest::sample::Index>(), any::<u8>()), 0..6),
            extra in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let mut read = Dump::new(Command::Resources(resource), Some(3), 1);
            for datagram in &datagrams {
                let mut damaged = datagram[..cut.index(datagram.len() + 1)].to_vec();
                for (at, byte) in &flips {
                    if !damaged.is_empty() {
                        let at = at.index(damaged.len());
                        damaged[at] ^= byte;
                    }
                }
                damaged.extend_from_slice(&extra);
                if read.feed(&damaged).is_err() {
                    break;
                }
            }
            // A flipped length can split one entry's attributes into more entries only
            // within the bytes written, each at least one attribute header long.
            let written: usize = datagrams.iter().map(Vec::len).sum::<usize>() + extra.len() * datagrams.len();
            prop_assert!(read.entries.len() <= entries.len().max(written / NLA_HEADER_LEN));
        }
    }
}
