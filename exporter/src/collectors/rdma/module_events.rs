//! Module events of RoCE ports, as mlx5e counts them: the `module_*` statistics of the port's
//! netdev (`ethtool -S`), read over the ethtool ioctl (`ethtool_ioctl/`). mlx5e counts each
//! module event the firmware reports (`mlx5_port_module_event` in `mlx5/core/events.c`) in
//! `module_unplug` (`mlx5e_pme_status_desc`) and `module_bus_stuck`, `module_high_temp`,
//! `module_bad_shorted` (`mlx5e_pme_error_desc`), `drivers/net/ethernet/mellanox/mlx5/core/
//! en_stats.c`: the same four names in the tables of 4.x and of 5.10 to 6.12
//! (`MLX5E_DECLARE_STATS_GRP(pme)`).
//!
//! A netdev's string table is read once (`ETHTOOL_GSSET_INFO`, `ETHTOOL_GSTRINGS`: no
//! capability needed) and kept while the port's netdev is the same and the driver's count
//! does not change, so a scrape costs one `ETHTOOL_GSTATS` per port. A netdev whose table
//! has none of the four (veth, dummy, IPoIB, other drivers), or that answers `EOPNOTSUPP` or
//! `ENODEV`, is not asked again until the port's netdev changes. Only the running kernel
//! answers: the collector asks when `--path.sysfs` is `/sys`.

use std::sync::{Arc, Mutex};

use crate::collector::Output;
use crate::error::{CollectError, ErrorKind};
use crate::ethtool_ioctl::socket::{IoctlError, Socket};
use crate::ethtool_ioctl::AnswerError;
use crate::metrics::{Desc, LabelSet, LabelValue, Value};
use crate::sync::lock;

pub(super) const MODULE_EVENTS: Desc = Desc::counter(
    "hpcnode_rdma_port_module_events",
    "Module events of a RoCE port's netdev as mlx5e counts them (ethtool -S module_*): unplug, bus_stuck, high_temp, bad_shorted.",
    None,
);

/// The statistics counted, each with its `event` label: the name without `module_`.
const EVENTS: [&str; 4] = [
    "module_unplug",
    "module_bus_stuck",
    "module_high_temp",
    "module_bad_shorted",
];

/// A netdev's statistics.
pub(super) trait StatsSource: Send + Sync {
    /// How many it has; `None`: none.
    fn count(&self, netdev: &str) -> Result<Option<u32>, IoctlError>;
    fn names(&self, netdev: &str, count: u32) -> Result<Vec<String>, IoctlError>;
    fn values(&self, netdev: &str, count: u32) -> Result<Vec<u64>, IoctlError>;
}

/// The running kernel's answer over one socket, opened at the first read (and again after
/// one that could not be).
#[derive(Default)]
pub(super) struct EthtoolIoctl {
    socket: Mutex<Option<Arc<Socket>>>,
}

impl EthtoolIoctl {
    fn socket(&self) -> Result<Arc<Socket>, IoctlError> {
        let mut kept = lock(&self.socket);
        if let Some(socket) = &*kept {
            return Ok(socket.clone());
        }
        let socket = Arc::new(Socket::open()?);
        *kept = Some(socket.clone());
        Ok(socket)
    }
}

impl StatsSource for EthtoolIoctl {
    fn count(&self, netdev: &str) -> Result<Option<u32>, IoctlError> {
        self.socket()?.stats_count(netdev)
    }

    fn names(&self, netdev: &str, count: u32) -> Result<Vec<String>, IoctlError> {
        self.socket()?.stat_names(netdev, count)
    }

    fn values(&self, netdev: &str, count: u32) -> Result<Vec<u64>, IoctlError> {
        self.socket()?.stats(netdev, count)
    }
}

/// What a port keeps of its netdev's statistics: the netdev, and where its events are.
#[derive(Default)]
pub(super) struct PortEvents {
    table: Option<(String, Table)>,
}

enum Table {
    /// No module events there, or no statistics at all: not asked again.
    Without,
    /// The driver's count, and each event's index in the table with its series' labels.
    With {
        count: u32,
        events: Vec<(usize, LabelSet)>,
    },
}

impl PortEvents {
    /// Exports the module events of the port's `netdev`.
    pub(super) fn read(
        &mut self,
        source: &dyn StatsSource,
        netdev: &str,
        port: [&LabelValue; 2],
        out: &mut Output,
    ) {
        if self.table.as_ref().is_some_and(|(kept, _)| kept != netdev) {
            self.table = None;
        }
        // A count changed since the table was read (channels added or removed): the table
        // is read again, once.
        for retry in [false, true] {
            let answer = self.values(source, netdev, port);
            match answer {
                Ok(None) => return,
                Ok(Some(pushed)) => {
                    for (set, value) in pushed {
                        out.samples
                            .push_set(&MODULE_EVENTS, &set, Value::Int(value));
                    }
                    return;
                }
                Err(err) if counts_changed(&err) && !retry => self.table = None,
                Err(err) if unsupported(&err) => {
                    self.table = Some((netdev.to_string(), Table::Without));
                    return;
                }
                Err(err) => {
                    self.table = None;
                    out.errors.push(read_error(netdev, &err));
                    return;
                }
            }
        }
    }

    /// The events' label sets and values; `None`: the netdev has none.
    fn values(
        &mut self,
        source: &dyn StatsSource,
        netdev: &str,
        port: [&LabelValue; 2],
    ) -> Result<Option<Vec<(LabelSet, u64)>>, IoctlError> {
        if self.table.is_none() {
            let table = read_table(source, netdev, port)?;
            self.table = Some((netdev.to_string(), table));
        }
        let Some((_, Table::With { count, events })) = &self.table else {
            return Ok(None);
        };
        let values = source.values(netdev, *count)?;
        Ok(Some(
            (events.iter())
                .filter_map(|(index, set)| Some((set.clone(), *values.get(*index)?)))
                .collect(),
        ))
    }
}

fn read_table(
    source: &dyn StatsSource,
    netdev: &str,
    [device, port]: [&LabelValue; 2],
) -> Result<Table, IoctlError> {
    let Some(count) = source.count(netdev)? else {
        return Ok(Table::Without);
    };
    let names = source.names(netdev, count)?;
    let events: Vec<(usize, LabelSet)> = (names.iter().enumerate())
        .filter(|(_, name)| EVENTS.contains(&name.as_str()))
        .map(|(index, name)| {
            let event = name.trim_start_matches("module_").to_string();
            let labels = [
                ("device", device.clone()),
                ("port", port.clone()),
                ("event", event.into()),
            ];
            (index, LabelSet::new(&labels))
        })
        .collect();
    Ok(match events.is_empty() {
        true => Table::Without,
        false => Table::With { count, events },
    })
}

/// The driver's count is not the table's: a kernel with the overflow fix says so, an older
/// one fills the buffer up to its guard page (`EFAULT`).
fn counts_changed(err: &IoctlError) -> bool {
    matches!(err, IoctlError::Answer(AnswerError::CountChanged { .. }))
        || err.errno() == Some(libc::EFAULT)
}

/// No ethtool statistics operation (`EOPNOTSUPP`) or no such netdev (`ENODEV`).
fn unsupported(err: &IoctlError) -> bool {
    matches!(err.errno(), Some(libc::EOPNOTSUPP | libc::ENODEV))
}

fn read_error(netdev: &str, err: &IoctlError) -> CollectError {
    let kind = match err {
        IoctlError::Answer(_) => ErrorKind::Parse,
        IoctlError::Io(..) | IoctlError::Name => ErrorKind::Io,
    };
    CollectError::new(kind, format!("ethtool statistics of {netdev}: {err}"))
}

#[cfg(test)]
mod tests;
