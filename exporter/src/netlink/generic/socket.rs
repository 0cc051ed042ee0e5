//! One `NETLINK_GENERIC` socket (through [`DatagramSocket`], the one layer of netlink system
//! calls) bound to a family by name: a request sent and its one reply received, or a dump's
//! datagrams received up to `NLMSG_DONE`, before a deadline.

use std::time::Instant;

use super::{dump_part, family_reply, family_request, sequence, Family, ReplyError};
use crate::error::ErrorKind;
use crate::netlink::datagram::{DatagramSocket, ReceiveError};

/// Why a request got no answer: none came, or the kernel's refused or could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    #[error("{0}")]
    Receive(#[from] ReceiveError),
    #[error("{0}")]
    Reply(#[from] ReplyError),
}

impl ExchangeError {
    /// The collector error it is: a timeout, a reply that could not be read, or I/O.
    pub fn kind(&self) -> ErrorKind {
        match self {
            ExchangeError::Receive(ReceiveError::Timeout) => ErrorKind::Timeout,
            ExchangeError::Receive(ReceiveError::Truncated(_))
            | ExchangeError::Reply(ReplyError::Malformed) => ErrorKind::Parse,
            ExchangeError::Receive(ReceiveError::Io(..)) | ExchangeError::Reply(_) => ErrorKind::Io,
        }
    }
}

/// An open `NETLINK_GENERIC` socket and its family's id.
pub struct GenericSocket {
    socket: DatagramSocket,
    family: Family,
    sequence: u32,
}

impl GenericSocket {
    /// A socket for the family `name` of `version`, whose replies fit in `buffer_len` bytes. A
    /// kernel without the family answers `ENOENT`.
    pub fn open(
        name: &str,
        version: u8,
        buffer_len: usize,
        deadline: Instant,
    ) -> Result<GenericSocket, ExchangeError> {
        let socket = DatagramSocket::open(libc::NETLINK_GENERIC, buffer_len);
        let mut socket = GenericSocket {
            socket: socket.map_err(|err| ReceiveError::Io("socket", err))?,
            family: Family { id: 0, version },
            sequence: 0,
        };
        let request = family_request(name, socket.next_sequence());
        socket.family.id = socket.exchange(&request, deadline, family_reply)?;
        Ok(socket)
    }

    pub fn family(&self) -> Family {
        self.family
    }

    /// The sequence number of the next request.
    pub fn next_sequence(&mut self) -> u32 {
        self.sequence = self.sequence.wrapping_add(1);
        self.sequence
    }

    /// Sends `request` and decodes the first datagram that answers it (one left over from an
    /// earlier request that timed out is skipped).
    pub fn exchange<T>(
        &mut self,
        request: &[u8],
        deadline: Instant,
        decode: impl Fn(&[u8]) -> Result<T, ReplyError>,
    ) -> Result<T, ExchangeError> {
        self.socket.send(request)?;
        loop {
            let datagram = self.socket.receive(deadline)?;
            if sequence(datagram) == Some(self.sequence) {
                return Ok(decode(datagram)?);
            }
        }
    }

    /// Sends the dump `request` (of `command`, answered by `reply_command`) and hands each
    /// message's payload to `each`, until the kernel ends the dump.
    pub fn dump(
        &mut self,
        request: &[u8],
        reply_command: u8,
        deadline: Instant,
        mut each: impl FnMut(&[u8]) -> Result<(), ReplyError>,
    ) -> Result<(), ExchangeError> {
        self.socket.send(request)?;
        loop {
            let datagram = self.socket.receive(deadline)?;
            if sequence(datagram) != Some(self.sequence) {
                continue;
            }
            let (payloads, done) = dump_part(datagram, self.family.id, reply_command)?;
            for payload in payloads {
                each(payload)?;
            }
            if done {
                return Ok(());
            }
        }
    }
}
