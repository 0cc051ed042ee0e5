//! The only code that makes system calls on request-and-reply netlink sockets: open one of a
//! protocol, send a request to the kernel, receive its reply datagrams whole, none later than a
//! deadline. The protocols (`rdma/`, `route/`) build the requests and decode the replies.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Instant;

/// The header every netlink message starts with (`struct nlmsghdr`, `linux/netlink.h`): its
/// length, the error reply's type, and the request flag.
pub const NLMSG_HEADER_LEN: usize = 16;
pub const NLMSG_ERROR: u16 = 2;
pub const NLM_F_REQUEST: u16 = 0x1;

/// Why no datagram came.
#[derive(Debug, thiserror::Error)]
pub enum ReceiveError {
    #[error("netlink {0}: {1}")]
    Io(&'static str, io::Error),
    #[error("no reply before the scrape's deadline")]
    Timeout,
    /// A datagram longer than the receive buffer (its whole length).
    #[error("a reply of {0} bytes, more than the receive buffer")]
    Truncated(usize),
}

/// A netlink socket to the kernel, with its receive buffer (allocated once: a socket kept
/// between scrapes reuses it).
pub struct DatagramSocket {
    fd: OwnedFd,
    buffer: Vec<u8>,
}

impl DatagramSocket {
    /// A socket of `protocol` (`NETLINK_RDMA`, `NETLINK_ROUTE`) whose replies fit in
    /// `buffer_len` bytes.
    pub fn open(protocol: libc::c_int, buffer_len: usize) -> io::Result<DatagramSocket> {
        // SAFETY: socket takes plain integers and returns a new descriptor or -1.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                protocol,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a descriptor this call just opened and nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(DatagramSocket {
            fd,
            buffer: vec![0; buffer_len],
        })
    }

    /// Sends `message` to the kernel.
    pub fn send(&self, message: &[u8]) -> Result<(), ReceiveError> {
        // SAFETY: a zeroed sockaddr_nl is the kernel's address (pid 0, no groups) once its
        // family is set.
        let mut kernel: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        kernel.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        // SAFETY: message and kernel live across the call, with the lengths given.
        let sent = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                message.as_ptr().cast(),
                message.len(),
                0,
                std::ptr::addr_of!(kernel).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if sent < 0 {
            return Err(ReceiveError::Io("send", io::Error::last_os_error()));
        }
        Ok(())
    }

    /// The next datagram, whole. The kernel answers within sendto (netlink runs a request in
    /// the sender's context), so the reply is usually queued already: receive first, and
    /// poll only when nothing is, until `deadline`.
    pub fn receive(&mut self, deadline: Instant) -> Result<&[u8], ReceiveError> {
        loop {
            // SAFETY: buffer lives across the call and holds the length given; MSG_TRUNC makes
            // the call return the datagram's whole length, so a cut one is seen.
            let received = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.buffer.as_mut_ptr().cast(),
                    self.buffer.len(),
                    libc::MSG_TRUNC | libc::MSG_DONTWAIT,
                )
            };
            if received >= 0 {
                let received = received as usize;
                if received > self.buffer.len() {
                    return Err(ReceiveError::Truncated(received));
                }
                return Ok(&self.buffer[..received]);
            }
            let err = io::Error::last_os_error();
            match err.kind() {
                io::ErrorKind::WouldBlock => self.wait_readable(deadline)?,
                io::ErrorKind::Interrupted => {}
                _ => return Err(ReceiveError::Io("receive", err)),
            }
        }
    }

    fn wait_readable(&self, deadline: Instant) -> Result<(), ReceiveError> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ReceiveError::Timeout);
        }
        let mut poll = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let millis = left.as_millis().clamp(1, i32::MAX as u128) as i32;
        // SAFETY: poll reads and writes the one pollfd it is given, which lives across the call.
        match unsafe { libc::poll(&mut poll, 1, millis) } {
            0 => Err(ReceiveError::Timeout),
            rc if rc < 0 => match io::Error::last_os_error() {
                err if err.kind() == io::ErrorKind::Interrupted => Ok(()),
                err => Err(ReceiveError::Io("poll", err)),
            },
            _ => Ok(()),
        }
    }
}
