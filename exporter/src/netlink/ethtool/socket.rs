//! The ethtool family's `NETLINK_GENERIC` socket (through [`GenericSocket`]): a module's
//! memory read half page by half page, as `transceiver::wanted` asks, and a netdev's FEC
//! counters; and the socket kept between scrapes ([`KeptSocket`]).

use std::sync::Mutex;
use std::time::Instant;

use super::{
    eeprom_reply, eeprom_request, fec_reply, fec_request, FecStats, HalfPage, ReplyError,
    ADDRESS_A0, ADDRESS_A2, FAMILY, VERSION,
};
use crate::netlink::generic::socket::{ExchangeError, GenericSocket};
use crate::sync::lock;
use crate::transceiver::{self, DecodeError, Memory};

/// Room for a reply: a half page and its headers, FEC modes and counters, or an error echoing
/// the request.
const RECEIVE_BUFFER: usize = 4096;

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{0}")]
    Exchange(#[from] ExchangeError),
    #[error("{0}")]
    Decode(#[from] DecodeError),
}

impl From<ReplyError> for ReadError {
    fn from(err: ReplyError) -> ReadError {
        ReadError::Exchange(err.into())
    }
}

/// An open `NETLINK_GENERIC` socket of the ethtool family.
pub struct Socket {
    socket: GenericSocket,
}

impl Socket {
    pub fn open(deadline: Instant) -> Result<Socket, ReadError> {
        let socket = GenericSocket::open(FAMILY, VERSION, RECEIVE_BUFFER, deadline)?;
        Ok(Socket { socket })
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

    /// The FEC counters of `netdev`.
    pub fn read_fec(&mut self, netdev: &str, deadline: Instant) -> Result<FecStats, ReadError> {
        let family = self.socket.family();
        let request = fec_request(family, netdev, self.socket.next_sequence());
        Ok((self.socket).exchange(&request, deadline, |reply| fec_reply(reply, family.id))?)
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
        let family = self.socket.family();
        let request = eeprom_request(family, netdev, half, self.socket.next_sequence());
        Ok((self.socket).exchange(&request, deadline, |reply| eeprom_reply(reply, family.id))?)
    }
}

/// A socket kept between scrapes, taken by one read at a time (another opens its own).
#[derive(Default)]
pub struct KeptSocket {
    socket: Mutex<Option<Socket>>,
}

impl KeptSocket {
    /// `read` on the kept socket, or a new one; a socket whose read failed may hold a late
    /// reply, so only one that read cleanly is kept.
    pub fn read<T>(
        &self,
        deadline: Instant,
        read: impl FnOnce(&mut Socket) -> Result<T, ReadError>,
    ) -> Result<T, ReadError> {
        let taken = lock(&self.socket).take();
        let mut socket = match taken {
            Some(socket) => socket,
            None => Socket::open(deadline)?,
        };
        let value = read(&mut socket)?;
        *lock(&self.socket) = Some(socket);
        Ok(value)
    }
}
