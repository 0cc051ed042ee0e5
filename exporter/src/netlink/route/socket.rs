//! The only code that makes system calls on `NETLINK_ROUTE`: one socket, kept by its owner, that
//! sends one `RTM_GETLINK` at a time and receives its one reply, waiting no longer than the
//! scrape's deadline.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Instant;

use super::link::{decode, request, VfStats, NETLINK_ROUTE};
use crate::netlink::rdma::reply::ReplyError;

/// Room for the largest reply: a PF with its VFs' entries (a few hundred bytes a VF, 127 VFs
/// on a ConnectX) is tens of KiB; one cut by this buffer is reported as truncated.
const RECEIVE_BUFFER: usize = 256 << 10;

/// Why a request got no answer.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("opening a NETLINK_ROUTE socket: {0}")]
    Unavailable(io::Error),
    #[error("netlink {0}: {1}")]
    Io(&'static str, io::Error),
    #[error("no reply before the scrape's deadline")]
    Timeout,
    #[error("{0}")]
    Reply(#[from] ReplyError),
}

/// An open `NETLINK_ROUTE` socket.
pub struct Socket {
    fd: OwnedFd,
    sequence: u32,
    buffer: Vec<u8>,
}

impl Socket {
    pub fn open() -> Result<Socket, RequestError> {
        // SAFETY: socket takes plain integers and returns a new descriptor or -1.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                NETLINK_ROUTE,
            )
        };
        if fd < 0 {
            return Err(RequestError::Unavailable(io::Error::last_os_error()));
        }
        // SAFETY: fd is a descriptor this call just opened and nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Socket {
            fd,
            sequence: 0,
            buffer: vec![0; RECEIVE_BUFFER],
        })
    }

    /// The per-VF statistics of the netdev `ifindex`.
    pub fn vf_stats(
        &mut self,
        ifindex: u32,
        deadline: Instant,
    ) -> Result<Vec<VfStats>, RequestError> {
        self.sequence = self.sequence.wrapping_add(1);
        let message = request(ifindex, self.sequence);
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
            return Err(RequestError::Io("send", io::Error::last_os_error()));
        }
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let millis = left.as_millis().min(i32::MAX as u128) as i32;
            let mut poll = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: poll reads and writes the one pollfd it is given, which lives across
            // the call.
            match unsafe { libc::poll(&mut poll, 1, millis) } {
                0 => return Err(RequestError::Timeout),
                rc if rc < 0 => match io::Error::last_os_error() {
                    err if err.kind() == io::ErrorKind::Interrupted => continue,
                    err => return Err(RequestError::Io("poll", err)),
                },
                _ => {}
            }
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
            if received < 0 {
                match io::Error::last_os_error() {
                    err if matches!(
                        err.kind(),
                        io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
                    ) =>
                    {
                        continue
                    }
                    err => return Err(RequestError::Io("receive", err)),
                }
            }
            let received = received as usize;
            if received > self.buffer.len() {
                return Err(ReplyError::Truncated(received).into());
            }
            return match decode(&self.buffer[..received], self.sequence, ifindex) {
                // The reply to an earlier request that timed out: this one's comes next.
                Err(ReplyError::Sequence { got, sent }) if got < sent => continue,
                decoded => Ok(decoded?),
            };
        }
    }
}

/// The running kernel, through a real socket: the loopback device (index 1, no VF
/// operations) has no VFs; an index no device has is the kernel's ENODEV.
#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_running_kernel_answers() {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut socket = Socket::open().unwrap();
        assert_eq!(socket.vf_stats(1, deadline).unwrap(), Vec::new());
        match socket.vf_stats(i32::MAX as u32, deadline) {
            Err(RequestError::Reply(ReplyError::Kernel(errno))) => {
                assert_eq!(errno, libc::ENODEV)
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(socket.vf_stats(1, deadline).unwrap(), Vec::new());
    }
}
