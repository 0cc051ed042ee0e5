//! The only code that makes system calls on generic netlink: one `NETLINK_GENERIC` socket,
//! a request sent and its one reply received before a deadline; and a module's memory read
//! through it half page by half page, as `transceiver::wanted` asks.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Instant;

use super::{
    eeprom_reply, eeprom_request, family_reply, family_request, sequence, HalfPage, ReplyError,
    ADDRESS_A0, ADDRESS_A2,
};
use crate::transceiver::{self, DecodeError, Memory};

/// Room for a reply: a half page and its headers, or an error echoing the request.
const RECEIVE_BUFFER: usize = 4096;

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("netlink {0}: {1}")]
    Io(&'static str, io::Error),
    #[error("no reply before the scrape's deadline")]
    Timeout,
    #[error("{0}")]
    Reply(#[from] ReplyError),
    #[error("{0}")]
    Decode(#[from] DecodeError),
}

/// An open `NETLINK_GENERIC` socket and the ethtool family's id.
pub struct Socket {
    fd: OwnedFd,
    family: u16,
    sequence: u32,
    buffer: Vec<u8>,
}

impl Socket {
    pub fn open(deadline: Instant) -> Result<Socket, ReadError> {
        // SAFETY: socket takes plain integers and returns a new descriptor or -1.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_GENERIC,
            )
        };
        if fd < 0 {
            return Err(ReadError::Io("socket", io::Error::last_os_error()));
        }
        // SAFETY: fd is a descriptor this call just opened and nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut socket = Socket {
            fd,
            family: 0,
            sequence: 0,
            buffer: vec![0; RECEIVE_BUFFER],
        };
        let request = family_request(socket.next_sequence());
        socket.family = family_reply(socket.exchange(&request, deadline)?)?;
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
        Ok(eeprom_reply(self.exchange(&request, deadline)?, family)?)
    }

    fn next_sequence(&mut self) -> u32 {
        self.sequence = self.sequence.wrapping_add(1);
        self.sequence
    }

    /// Sends `request` and returns the first datagram that answers it (one left over from an
    /// earlier request that timed out is skipped).
    fn exchange(&mut self, request: &[u8], deadline: Instant) -> Result<&[u8], ReadError> {
        // SAFETY: a zeroed sockaddr_nl is the kernel's address once its family is set.
        let mut kernel: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        kernel.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        // SAFETY: request and kernel live across the call, with the lengths given.
        let sent = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                request.as_ptr().cast(),
                request.len(),
                0,
                std::ptr::addr_of!(kernel).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if sent < 0 {
            return Err(ReadError::Io("send", io::Error::last_os_error()));
        }
        loop {
            // SAFETY: buffer lives across the call and holds the length given.
            let received = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.buffer.as_mut_ptr().cast(),
                    self.buffer.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if received >= 0 {
                let datagram = &self.buffer[..received as usize];
                if sequence(datagram) == Some(self.sequence) {
                    return Ok(&self.buffer[..received as usize]);
                }
                continue;
            }
            let err = io::Error::last_os_error();
            match err.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => self.wait_readable(deadline)?,
                _ => return Err(ReadError::Io("receive", err)),
            }
        }
    }

    fn wait_readable(&self, deadline: Instant) -> Result<(), ReadError> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ReadError::Timeout);
        }
        let mut poll = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let millis = left.as_millis().clamp(1, i32::MAX as u128) as i32;
        // SAFETY: poll reads and writes the one pollfd it is given, which lives across the call.
        match unsafe { libc::poll(&mut poll, 1, millis) } {
            0 => Err(ReadError::Timeout),
            rc if rc < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted => {
                Err(ReadError::Io("poll", io::Error::last_os_error()))
            }
            _ => Ok(()),
        }
    }
}
