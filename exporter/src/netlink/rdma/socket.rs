//! The only code that makes system calls on netlink: one `NETLINK_RDMA`
//! socket per dump, a dump request sent and its replies received until the
//! kernel's `NLMSG_DONE`, each datagram handed to [`Dump::feed`].

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use crate::error::{CollectError, ErrorKind};

use super::message::{request, Command, Dump, NETLINK_RDMA};
use super::reply::ReplyError;

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

/// An open `NETLINK_RDMA` socket.
pub struct Socket {
    fd: OwnedFd,
    sequence: u32,
    /// The receive buffer, kept with the socket: a socket kept between scrapes allocates it once.
    buffer: Vec<u8>,
}

impl Socket {
    pub fn open() -> Result<Socket, DumpError> {
        // SAFETY: socket takes plain integers and returns a new descriptor or -1.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                NETLINK_RDMA,
            )
        };
        if fd < 0 {
            return Err(DumpError::Unavailable(io::Error::last_os_error()));
        }
        // SAFETY: fd is a descriptor this call just opened and nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Socket {
            fd,
            sequence: 0,
            buffer: vec![0; RECEIVE_BUFFER],
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
        let message = request(command, device, self.sequence);
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
            return Err(DumpError::Io("send", io::Error::last_os_error()));
        }
        let mut dump = Dump::new(command, device, self.sequence);
        while !dump.is_done() {
            // The kernel answers within sendto (netlink runs the request in the sender's
            // context): the reply is usually queued already, so receive first, poll only when
            // nothing is.
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
                let err = io::Error::last_os_error();
                match err.kind() {
                    io::ErrorKind::WouldBlock => {
                        let left = deadline.saturating_duration_since(Instant::now());
                        if left.is_zero() {
                            return Err(DumpError::Timeout);
                        }
                        self.wait_readable(left)?;
                        continue;
                    }
                    io::ErrorKind::Interrupted => continue,
                    _ => return Err(DumpError::Io("receive", err)),
                }
            }
            let received = received as usize;
            if received > self.buffer.len() {
                return Err(ReplyError::Truncated(received).into());
            }
            dump.feed(&self.buffer[..received])?;
        }
        Ok(dump)
    }

    fn wait_readable(&self, within: Duration) -> Result<(), DumpError> {
        let mut poll = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let millis = within.as_millis().clamp(1, i32::MAX as u128) as i32;
        // SAFETY: poll reads and writes the one pollfd it is given, which lives across the call.
        match unsafe { libc::poll(&mut poll, 1, millis) } {
            0 => Err(DumpError::Timeout),
            rc if rc < 0 => {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::Interrupted {
                    Ok(())
                } else {
                    Err(DumpError::Io("poll", err))
                }
            }
            _ => Ok(()),
        }
    }
}
