//! One `NETLINK_RDMA` socket: a dump request sent and its replies received (through
//! [`DatagramSocket`], the one layer of netlink system calls) until the kernel's `NLMSG_DONE`,
//! each datagram handed to [`Dump::feed`].

use std::io;
use std::time::Instant;

use crate::error::{CollectError, ErrorKind};

use super::message::{request, Command, Dump, NETLINK_RDMA};
use super::reply::ReplyError;
use crate::netlink::datagram::{DatagramSocket, ReceiveError};

/// Room for the largest datagram a netlink dump sends (the kernel sizes dump messages up to
/// 32 KiB); a bigger one is reported as truncated.
const RECEIVE_BUFFER: usize = 64 << 10;

/// Why a dump did not complete.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    /// No RDMA netlink in this kernel (`ib_core` not loaded: EPROTONOSUPPORT), or netlink
    /// sockets refused.
    #[error("opening a NETLINK_RDMA socket: {0}")]
    Unavailable(io::Error),
    #[error("netlink {0}: {1}")]
    Io(&'static str, io::Error),
    #[error("no complete reply before the scrape's deadline")]
    Timeout,
    #[error("{0}")]
    Reply(#[from] ReplyError),
}

impl DumpError {
    /// The scrape error for a failed request about `what`.
    pub fn collect_error(&self, what: &str) -> CollectError {
        let kind = match self {
            DumpError::Reply(ReplyError::Kernel(_))
            | DumpError::Io(..)
            | DumpError::Unavailable(_) => ErrorKind::Io,
            DumpError::Reply(_) => ErrorKind::Parse,
            DumpError::Timeout => ErrorKind::Timeout,
        };
        CollectError::new(kind, format!("RDMA netlink dump of {what}: {self}"))
            .keyed_by(format!("rdma netlink {what} {kind:?}"))
    }
}

impl From<ReceiveError> for DumpError {
    fn from(err: ReceiveError) -> DumpError {
        match err {
            ReceiveError::Io(what, err) => DumpError::Io(what, err),
            ReceiveError::Timeout => DumpError::Timeout,
            ReceiveError::Truncated(len) => ReplyError::Truncated(len).into(),
        }
    }
}

/// An open `NETLINK_RDMA` socket.
pub struct Socket {
    socket: DatagramSocket,
    sequence: u32,
}

impl Socket {
    pub fn open() -> Result<Socket, DumpError> {
        let socket = DatagramSocket::open(NETLINK_RDMA, RECEIVE_BUFFER);
        Ok(Socket {
            socket: socket.map_err(DumpError::Unavailable)?,
            sequence: 0,
        })
    }

    /// Runs one request (a dump, or a single reply and its acknowledgement) to its end or to
    /// `deadline`.
    pub fn dump(
        &mut self,
        command: Command,
        device: Option<u32>,
        deadline: Instant,
    ) -> Result<Dump, DumpError> {
        self.sequence = self.sequence.wrapping_add(1);
        self.socket.send(&request(command, device, self.sequence))?;
        let mut dump = Dump::new(command, device, self.sequence);
        while !dump.is_done() {
            dump.feed(self.socket.receive(deadline)?)?;
        }
        Ok(dump)
    }
}
