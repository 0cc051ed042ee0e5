//! What the replies of RDMA netlink are made of: attributes, each checked to lie within its
//! level and read by type with the size the kernel gives it; the attribute numbers; the values
//! several replies share (holders, hardware counters); and why a reply is refused. `message.rs`
//! (requests, dumps) and `counters.rs` (QP counters) both decode with it, and so does
//! `netlink/route/` (attributes are netlink's, not RDMA's).

pub(crate) const NLA_HEADER_LEN: usize = 4;
/// The two flag bits of an attribute's type (`NLA_F_NESTED`, `NLA_F_NET_BYTEORDER`).
const NLA_TYPE_MASK: u16 = 0x3fff;

/// `enum rdma_nldev_attr`: the attributes the collector reads.
pub(crate) mod attr {
    pub const DEV_INDEX: u16 = 1;
    pub const DEV_NAME: u16 = 2;
    pub const PORT_INDEX: u16 = 3;
    pub const RES_QP: u16 = 19;
    pub const RES_QP_ENTRY: u16 = 20;
    pub const RES_LQPN: u16 = 21;
    pub const RES_TYPE: u16 = 26;
    pub const RES_STATE: u16 = 27;
    pub const RES_PID: u16 = 28;
    pub const RES_KERN_NAME: u16 = 29;
    pub const RES_CM_ID: u16 = 30;
    pub const RES_CM_ID_ENTRY: u16 = 31;
    pub const RES_CQ: u16 = 35;
    pub const RES_CQ_ENTRY: u16 = 36;
    pub const RES_MR: u16 = 40;
    pub const RES_MR_ENTRY: u16 = 41;
    pub const RES_MRLEN: u16 = 45;
    pub const RES_PD: u16 = 46;
    pub const RES_PD_ENTRY: u16 = 47;
    pub const STAT_MODE: u16 = 74;
    pub const STAT_RES: u16 = 75;
    pub const STAT_AUTO_MODE_MASK: u16 = 76;
    pub const STAT_COUNTER: u16 = 77;
    pub const STAT_COUNTER_ENTRY: u16 = 78;
    pub const STAT_COUNTER_ID: u16 = 79;
    pub const STAT_HWCOUNTERS: u16 = 80;
    pub const STAT_HWCOUNTER_ENTRY: u16 = 81;
    pub const STAT_HWCOUNTER_ENTRY_NAME: u16 = 82;
    pub const STAT_HWCOUNTER_ENTRY_VALUE: u16 = 83;
}

/// The most entries one dump may hold before it is refused: far above any real node (a few
/// thousand QPs per process for the largest MPI jobs), low enough to bound a scrape's memory.
pub const MAX_ENTRIES: usize = 1 << 20;
/// The most bytes one dump's replies may hold together.
pub const MAX_DUMP_BYTES: usize = 256 << 20;

/// Why a reply was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    #[error("netlink message of {length} bytes in a datagram with {available} left")]
    MessageLength { length: usize, available: usize },
    #[error("netlink message type {0}, expected another")]
    UnexpectedType(u16),
    #[error("netlink reply to sequence {got}, sent {sent}")]
    Sequence { got: u32, sent: u32 },
    #[error("kernel error {0} ({errno})", errno = std::io::Error::from_raw_os_error(*.0))]
    Kernel(i32),
    #[error("netlink buffer overrun: replies were lost")]
    Overrun,
    #[error("attribute {kind} of {length} bytes with {available} left")]
    AttributeLength {
        kind: u16,
        length: usize,
        available: usize,
    },
    #[error("attribute {kind}: {length} bytes, expected {expected}")]
    AttributeSize {
        kind: u16,
        length: usize,
        expected: &'static str,
    },
    #[error("attribute {0}: string not NUL-terminated UTF-8")]
    BadString(u16),
    #[error("reply without attribute {0}")]
    Missing(u16),
    #[error("reply for device {got}, asked for {asked}")]
    OtherDevice { got: u32, asked: u32 },
    #[error("reply for port {got}, asked for {asked}")]
    OtherPort { got: u32, asked: u32 },
    #[error("dump larger than {0} entries or {MAX_DUMP_BYTES} bytes")]
    TooLarge(usize),
    #[error("datagram of {0} bytes truncated by the receive buffer")]
    Truncated(usize),
    #[error("data after the end of the dump")]
    AfterDone,
}

/// Who holds a resource: a process by id in the exporter's pid namespace, or a kernel module
/// (`ib_core`, `ib_ipoib`, `rdma_cm`) by name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Holder {
    Process(u32),
    Kernel(String),
    /// Neither attribute given (a kernel that names no holder).
    Unknown,
}

/// A port counter as `RDMA_NLDEV_CMD_STAT_GET` gives it: the `hw_counters/` file's name and
/// its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counter {
    pub name: String,
    pub value: u64,
}

/// Who holds a resource (`fill_res_name_pid`): a process's pid, else a kernel module's name.
pub(super) fn holder(entry: &Attributes) -> Result<Holder, ReplyError> {
    Ok(
        match (
            entry.optional_u32(attr::RES_PID)?,
            entry.get(attr::RES_KERN_NAME),
        ) {
            (Some(pid), _) => Holder::Process(pid),
            (None, Some(_)) => Holder::Kernel(entry.string(attr::RES_KERN_NAME)?),
            (None, None) => Holder::Unknown,
        },
    )
}

/// The `RDMA_NLDEV_ATTR_STAT_HWCOUNTERS` table of `attributes`, each entry a name and a u64
/// value (`rdma_nl_stat_hwcounter_entry`); counters the driver disabled are left out by the
/// kernel.
pub(super) fn hw_counters(attributes: &Attributes) -> Result<Vec<Counter>, ReplyError> {
    let table = attributes
        .nested(attr::STAT_HWCOUNTERS)?
        .ok_or(ReplyError::Missing(attr::STAT_HWCOUNTERS))?;
    let mut counters = Vec::new();
    for (kind, entry) in table.all() {
        if kind != attr::STAT_HWCOUNTER_ENTRY {
            continue;
        }
        if counters.len() >= MAX_ENTRIES {
            return Err(ReplyError::TooLarge(MAX_ENTRIES));
        }
        let entry = Attributes::parse(entry)?;
        let value = entry.optional_u64(attr::STAT_HWCOUNTER_ENTRY_VALUE)?;
        counters.push(Counter {
            name: entry.string(attr::STAT_HWCOUNTER_ENTRY_NAME)?,
            value: value.ok_or(ReplyError::Missing(attr::STAT_HWCOUNTER_ENTRY_VALUE))?,
        });
    }
    Ok(counters)
}

/// The attributes of one level, each checked to lie within it; looked up by type.
pub(crate) struct Attributes<'a> {
    list: Vec<(u16, &'a [u8])>,
}

impl<'a> Attributes<'a> {
    pub(crate) fn parse(mut bytes: &'a [u8]) -> Result<Self, ReplyError> {
        let mut list = Vec::new();
        while !bytes.is_empty() {
            let header = take(bytes, 0, NLA_HEADER_LEN).ok_or(ReplyError::AttributeLength {
                kind: 0,
                length: NLA_HEADER_LEN,
                available: bytes.len(),
            })?;
            let length = usize::from(u16::from_ne_bytes([header[0], header[1]]));
            let kind = u16::from_ne_bytes([header[2], header[3]]) & NLA_TYPE_MASK;
            if length < NLA_HEADER_LEN || length > bytes.len() {
                return Err(ReplyError::AttributeLength {
                    kind,
                    length,
                    available: bytes.len(),
                });
            }
            list.push((kind, &bytes[NLA_HEADER_LEN..length]));
            // The last attribute's padding may be left out.
            bytes = &bytes[aligned(length).min(bytes.len())..];
        }
        Ok(Attributes { list })
    }

    pub(crate) fn all(&self) -> impl Iterator<Item = (u16, &'a [u8])> + '_ {
        self.list.iter().copied()
    }

    pub(crate) fn get(&self, kind: u16) -> Option<&'a [u8]> {
        self.list
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, payload)| *payload)
    }

    fn fixed<const N: usize>(
        &self,
        kind: u16,
        expected: &'static str,
    ) -> Result<Option<[u8; N]>, ReplyError> {
        self.get(kind)
            .map(|payload| {
                <[u8; N]>::try_from(payload).map_err(|_| ReplyError::AttributeSize {
                    kind,
                    length: payload.len(),
                    expected,
                })
            })
            .transpose()
    }

    pub(super) fn optional_u8(&self, kind: u16) -> Result<Option<u8>, ReplyError> {
        Ok(self.fixed::<1>(kind, "1 (u8)")?.map(|[byte]| byte))
    }

    pub(super) fn optional_u32(&self, kind: u16) -> Result<Option<u32>, ReplyError> {
        Ok(self.fixed::<4>(kind, "4 (u32)")?.map(u32::from_ne_bytes))
    }

    pub(crate) fn optional_u64(&self, kind: u16) -> Result<Option<u64>, ReplyError> {
        Ok(self.fixed::<8>(kind, "8 (u64)")?.map(u64::from_ne_bytes))
    }

    pub(super) fn u32(&self, kind: u16) -> Result<u32, ReplyError> {
        self.optional_u32(kind)?.ok_or(ReplyError::Missing(kind))
    }

    /// A `NLA_NUL_STRING`: text, then a NUL within the attribute.
    pub(super) fn string(&self, kind: u16) -> Result<String, ReplyError> {
        let payload = self.get(kind).ok_or(ReplyError::Missing(kind))?;
        let end = payload
            .iter()
            .position(|&byte| byte == 0)
            .ok_or(ReplyError::BadString(kind))?;
        String::from_utf8(payload[..end].to_vec()).map_err(|_| ReplyError::BadString(kind))
    }

    pub(crate) fn nested(&self, kind: u16) -> Result<Option<Attributes<'a>>, ReplyError> {
        self.get(kind).map(Attributes::parse).transpose()
    }
}

/// Netlink's 4-byte alignment of messages and attributes.
pub(crate) fn aligned(length: usize) -> usize {
    length.saturating_add(3) & !3
}

pub(crate) fn take(bytes: &[u8], start: usize, length: usize) -> Option<&[u8]> {
    bytes.get(start..start.checked_add(length)?)
}
