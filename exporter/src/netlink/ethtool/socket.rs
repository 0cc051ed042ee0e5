//! One `NETLINK_GENERIC` socket (through [`DatagramSocket`], the one layer of netlink system
//! calls): a request sent and its one reply received before a deadline; and a module's memory
//! read through it half page by half page, as `transceiver::wanted` asks.

use std::io;
use std::time::Instant;

use super::{
    eeprom_reply, eeprom_request, family_reply, family_request, sequence, HalfPage, ReplyError,
    ADDRESS_A0, ADDRESS_A2,
};
use crate::netlink::datagram::{DatagramSocket, ReceiveError};
use crate::transceiver::{self, DecodeError, Memory};

/// Room for a reply: a half page and its headers, or an error echoing the request.
const RECEIVE_BUFFER: usize = 4096;

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("netlink {0}: {1}")]
    Io(&'static str, io::Error),
    #[error("no reply before the scrape's deadline")]
    Timeout,
    #[error("a reply of {0} bytes, more than the receive buffer")]
    Truncated(usize),
    #[error("{0}")]
    Reply(#[from] ReplyError),
    #[error("{0}")]
    Decode(#[from] DecodeError),
}

impl From<ReceiveError> for ReadError {
    fn from(err: ReceiveError) -> ReadError {
        match err {
            ReceiveError::Io(what, err) => ReadError::Io(what, err),
            ReceiveError::Timeout => ReadError::Timeout,
            ReceiveError::Truncated(len) => ReadError::Truncated(len),
        }
    }
}

/// An open `NETLINK_GENERIC` socket and the ethtool family's id.
pub struct Socket {
    socket: DatagramSocket,
    family: u16,
    sequence: u32,
}

impl Socket {
    pub fn open(deadline: Instant) -> Result<Socket, ReadError> {
        let socket = DatagramSocket::open(libc::NETLINK_GENERIC, RECEIVE_BUFFER);
        let mut socket = Socket {
            socket: socket.map_err(|err| ReadError::Io("socket", err))?,
            family: 0,
            sequence: 0,
        };
        let request = family_request(socket.next_sequence());
        socket.family = socket.exchange(&request, deadline, family_reply)?;
        Ok(socket)
    }

    /// The module memory of `netdev` that its layout needs: the lower page first, then what
    /// it names. A refused A2h is a module without diagnostics, decoded as identity only.
    pub fn read_module(&mut self, netdev: &str, deadline: Instant) -> Result<Memory, ReadError> {
        let lower = self.half(netdev, ADDRESS_A0, 0, 0, deadline)?;
        let wanted = transceiver::wanted(&lower)?;
        let mut memory = Memory {
            lower,
            ..Memory::default()
        };
        for page in wanted.upper {
            let bytes = self.half(netdev, ADDRESS_A0, page, 128, deadline)?;
            memory.upper.insert(page, bytes);
        }
        if wanted.a2 {
            memory.a2 = self.half(netdev, ADDRESS_A2, 0, 0, deadline)?;
        }
        Ok(memory)
    }

    fn half(
        &mut self,
        netdev: &str,
        i2c_address: u8,
        page: u8,
        offset: u8,
        deadline: Instant,
    ) -> Result<Vec<u8>, ReadError> {
        let half = HalfPage {
            i2c_address,
            page,
            offset,
        };
        let request = eeprom_request(self.family, netdev, half, self.next_sequence());
        let family = self.family;
        self.exchange(&request, deadline, |reply| eeprom_reply(reply, family))
    }

    fn next_sequence(&mut self) -> u32 {
        self.sequence = self.sequence.wrapping_add(1);
        self.sequence
    }

    /// Sends `request` and decodes the first datagram that answers it (one left over from an
    /// earlier request that timed out is skipped).
    fn exchange<T>(
        &mut self,
        request: &[u8],
        deadline: Instant,
        decode: impl Fn(&[u8]) -> Result<T, ReplyError>,
    ) -> Result<T, ReadError> {
        self.socket.send(request)?;
        loop {
            let datagram = self.socket.receive(deadline)?;
            if sequence(datagram) == Some(self.sequence) {
                return Ok(decode(datagram)?);
            }
        }
    }
}
