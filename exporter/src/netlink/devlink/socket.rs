//! The devlink family's `NETLINK_GENERIC` socket (through [`GenericSocket`]): one dump of every
//! instance's health reporters.

use std::time::Instant;

use super::{
    health_reporter, health_reporters_request, Reporter, FAMILY, HEALTH_REPORTER_GET, VERSION,
};
use crate::netlink::generic::socket::{ExchangeError, GenericSocket};

/// Room for a datagram of the dump: the kernel fills a dump's datagrams up to the receive
/// buffer a reader last used, 32 KiB at most (`netlink_recvmsg()`, `netlink_dump()` in
/// `net/netlink/af_netlink.c`).
const RECEIVE_BUFFER: usize = 32 * 1024;

pub struct Socket {
    socket: GenericSocket,
}

impl Socket {
    /// A socket of the devlink family; a kernel without devlink answers `ENOENT`.
    pub fn open(deadline: Instant) -> Result<Socket, ExchangeError> {
        let socket = GenericSocket::open(FAMILY, VERSION, RECEIVE_BUFFER, deadline)?;
        Ok(Socket { socket })
    }

    /// Every instance's health reporters, in the kernel's order.
    pub fn health_reporters(&mut self, deadline: Instant) -> Result<Vec<Reporter>, ExchangeError> {
        let request = health_reporters_request(self.socket.family(), self.socket.next_sequence());
        let mut reporters = Vec::new();
        self.socket
            .dump(&request, HEALTH_REPORTER_GET, deadline, |payload| {
                reporters.push(health_reporter(payload)?);
                Ok(())
            })?;
        Ok(reporters)
    }
}
