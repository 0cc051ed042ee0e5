//! FEC counters of RoCE ports: the port's netdev's `ETHTOOL_MSG_FEC_GET` with its statistics
//! (`netlink/ethtool/`, Linux 5.13+), the totals over its lanes. Per-lane counts are left out:
//! a lane count says which lane of a cable degrades, which the module's per-lane optical
//! power (`hpcnode_rdma_port_module_*`) already tells, at four to eight series more a port.
//! The request needs no privilege (`ETHTOOL_MSG_FEC_GET` has no `GENL_UNS_ADMIN_PERM` in
//! `net/ethtool/netlink.c`). A netdev that answers `EOPNOTSUPP` (no FEC operation: IPoIB,
//! veth, dummy; or a kernel before 5.13, which refuses the statistics flag), `ENODEV` or
//! `ENOENT` (no ethtool family, before 5.6) is not asked again until the port's netdev
//! changes. One whose driver counts nothing (no `get_fec_stats`, or mlx5 with FEC off) exports
//! nothing and is asked again: FEC may come on when the link renegotiates. Only the running
//! kernel answers: the collector asks when `--path.sysfs` is `/sys`.

use std::time::Instant;

use crate::collector::Output;
use crate::error::{CollectError, ErrorKind};
use crate::metrics::{Desc, LabelSet, Value};
use crate::netlink::ethtool::socket::{KeptSocket, ReadError};
use crate::netlink::ethtool::{FecStats, ReplyError};
use crate::netlink::generic::socket::ExchangeError;

pub(super) const CORRECTED_BLOCKS: Desc = Desc::counter(
    "hpcnode_rdma_port_fec_corrected_blocks",
    "FEC blocks of the RoCE port's netdev that had errors FEC corrected, over all lanes, since the driver last reset its counters.",
    None,
);
pub(super) const UNCORRECTABLE_BLOCKS: Desc = Desc::counter(
    "hpcnode_rdma_port_fec_uncorrectable_blocks",
    "FEC blocks of the RoCE port's netdev with errors FEC could not correct (the frame is lost), over all lanes.",
    None,
);
pub(super) const CORRECTED_BITS: Desc = Desc::counter(
    "hpcnode_rdma_port_fec_corrected_bits",
    "Bits FEC corrected on the RoCE port's netdev, over all lanes, where the driver counts them.",
    None,
);

/// The FEC counters of a netdev.
pub(super) trait FecSource: Send + Sync {
    fn read_fec(&self, netdev: &str, deadline: Instant) -> Result<FecStats, ReadError>;
}

/// The running kernel's answer, over a generic netlink socket kept between scrapes.
impl FecSource for KeptSocket {
    fn read_fec(&self, netdev: &str, deadline: Instant) -> Result<FecStats, ReadError> {
        self.read(deadline, |socket| socket.read_fec(netdev, deadline))
    }
}

/// What a port keeps between scrapes: the netdev that refused FEC, not asked again.
#[derive(Default)]
pub(super) struct PortFec {
    refused: Option<String>,
}

impl PortFec {
    /// Exports the FEC counters of the port's `netdev` under the port's labels.
    pub(super) fn read(
        &mut self,
        source: &dyn FecSource,
        deadline: Instant,
        netdev: &str,
        port: &LabelSet,
        out: &mut Output,
    ) {
        if self.refused.as_deref() == Some(netdev) {
            return;
        }
        self.refused = None;
        let stats = match source.read_fec(netdev, deadline) {
            Ok(stats) => stats,
            Err(ReadError::Exchange(ExchangeError::Reply(ReplyError::Kernel(errno))))
                if [libc::EOPNOTSUPP, libc::ENODEV, libc::ENOENT].contains(&errno) =>
            {
                self.refused = Some(netdev.to_string());
                return;
            }
            Err(err) => {
                out.errors.push(read_error(netdev, &err));
                return;
            }
        };
        for (desc, value) in [
            (&CORRECTED_BLOCKS, stats.corrected_blocks),
            (&UNCORRECTABLE_BLOCKS, stats.uncorrectable_blocks),
            (&CORRECTED_BITS, stats.corrected_bits),
        ] {
            if let Some(value) = value {
                out.samples.push_set(desc, port, Value::Int(value));
            }
        }
    }
}

fn read_error(netdev: &str, err: &ReadError) -> CollectError {
    let kind = match err {
        ReadError::Exchange(err) => err.kind(),
        ReadError::Decode(_) => ErrorKind::Parse,
    };
    CollectError::new(kind, format!("FEC counters of {netdev}: {err}"))
}

#[cfg(test)]
mod tests;
