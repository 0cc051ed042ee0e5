//! One `NETLINK_ROUTE` socket, kept by its owner, that sends one `RTM_GETLINK` at a time and
//! receives its one reply (through [`DatagramSocket`], the one layer of netlink system calls),
//! waiting no longer than the scrape's deadline.

use std::io;
use std::time::Instant;

use super::link::{decode, request, VfStats, NETLINK_ROUTE};
use crate::netlink::datagram::{DatagramSocket, ReceiveError};
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

impl From<ReceiveError> for RequestError {
    fn from(err: ReceiveError) -> RequestError {
        match err {
            ReceiveError::Io(what, err) => RequestError::Io(what, err),
            ReceiveError::Timeout => RequestError::Timeout,
            ReceiveError::Truncated(len) => ReplyError::Truncated(len).into(),
        }
    }
}

/// An open `NETLINK_ROUTE` socket.
pub struct Socket {
    socket: DatagramSocket,
    sequence: u32,
}

impl Socket {
    pub fn open() -> Result<Socket, RequestError> {
        let socket = DatagramSocket::open(NETLINK_ROUTE, RECEIVE_BUFFER);
        Ok(Socket {
            socket: socket.map_err(RequestError::Unavailable)?,
            sequence: 0,
        })
    }

    /// The per-VF statistics of the netdev `ifindex`.
    pub fn vf_stats(
        &mut self,
        ifindex: u32,
        deadline: Instant,
    ) -> Result<Vec<VfStats>, RequestError> {
        self.sequence = self.sequence.wrapping_add(1);
        self.socket.send(&request(ifindex, self.sequence))?;
        loop {
            let datagram = self.socket.receive(deadline)?;
            return match decode(datagram, self.sequence, ifindex) {
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
