//! The rdma collector's hw counters over RDMA netlink: the device indexes, the socket kept
//! between scrapes, one `RDMA_NLDEV_CMD_STAT_GET` per port, and the fallback to the files.

use std::collections::hash_map::Entry as MapEntry;
use std::time::Instant;

use super::device_read::DeviceRead;
use super::state::counter_set;
use super::{HwCounters, RdmaCollector, PORT_HW_STAT};
use crate::collector::{CollectError, ErrorKind};
use crate::logging::{self, Level};
use crate::metrics::{LabelSet, LabelValue, Value};
use crate::netlink::rdma::message::Command;
use crate::netlink::rdma::reply::Counter;
use crate::netlink::rdma::socket::{DumpError, Socket};
use crate::sync::lock;
use crate::sysfs::Entry;

impl RdmaCollector {
    /// Lists the devices' netlink indexes again when a device is new to the last listing or a
    /// request failed since (a device deleted and added again has another index). Only where
    /// devices exist: opening a `NETLINK_RDMA` socket loads `ib_core`.
    pub(super) fn list_netlink_indexes(&self, devices: &[Entry]) {
        let mut indexes = lock(&self.netlink_indexes);
        if let Some(Ok(known)) = &*indexes {
            let names = devices.iter().filter_map(|device| device.name().ok());
            if names.clone().all(|name| known.contains_key(name)) {
                return;
            }
        }
        let listed = self
            .socket()
            .and_then(|mut socket| {
                let dump = socket.dump(Command::Devices, None, Instant::now() + self.timeout)?;
                *lock(&self.netlink_socket) = Some(socket);
                Ok(dump)
            })
            .map(|dump| {
                let devices = dump.devices.into_iter();
                devices.map(|device| (device.name, device.index)).collect()
            })
            .map_err(|err| format!("listing devices over RDMA netlink: {err}"));
        *indexes = Some(listed);
    }

    /// The kept socket, or a new one while another unit uses it.
    fn socket(&self) -> Result<Socket, DumpError> {
        lock(&self.netlink_socket)
            .take()
            .map_or_else(Socket::open, Ok)
    }

    /// The netlink side of one device's read, or `None` where its hw counters come from sysfs.
    pub(super) fn netlink_read(&self, device: &str) -> Option<NetlinkRead<'_>> {
        let HwCounters::Netlink { fallback } = self.hw_counters else {
            return None;
        };
        let index = match &*lock(&self.netlink_indexes) {
            Some(Ok(indexes)) => indexes.get(device).copied().ok_or(NoIndex::NotListed),
            Some(Err(cause)) => Err(NoIndex::ListingFailed(cause.clone())),
            None => Err(NoIndex::NotListed),
        };
        Some(NetlinkRead {
            collector: self,
            device: device.to_string(),
            index,
            fallback,
            socket: None,
            deadline: Instant::now() + self.timeout,
        })
    }
}

/// One device's port counters over RDMA netlink: its index, and the collector's socket, taken
/// at the first port asked and given back once the device is read without a failure.
pub(super) struct NetlinkRead<'a> {
    collector: &'a RdmaCollector,
    device: String,
    /// The device's netlink index, or why there is none.
    index: Result<u32, NoIndex>,
    fallback: bool,
    socket: Option<Socket>,
    deadline: Instant,
}

impl Drop for NetlinkRead<'_> {
    fn drop(&mut self) {
        if let Some(socket) = self.socket.take() {
            *lock(&self.collector.netlink_socket) = Some(socket);
        }
    }
}

/// How a port's read over netlink went.
pub(super) enum NetlinkOutcome {
    Read,
    /// Failed where the files may not stand in (`--collector.rdma.hw-counters=netlink`).
    Failed,
    /// Failed; the files stand in.
    FallBack,
}

/// Why a device has no netlink index this scrape.
#[derive(Debug, Clone, thiserror::Error)]
enum NoIndex {
    #[error("not listed by RDMA netlink")]
    NotListed,
    /// The listing's error, as it was logged when the listing failed.
    #[error("{0}")]
    ListingFailed(String),
}

/// Why a port's counters did not come over netlink.
#[derive(Debug, thiserror::Error)]
enum NetlinkCountersError {
    #[error("{0}")]
    NoIndex(NoIndex),
    #[error("port {0:?} is not a port number")]
    PortName(String),
    #[error("its index is now device {0:?}'s")]
    OtherDevice(String),
    #[error(transparent)]
    Request(#[from] DumpError),
}

impl NetlinkCountersError {
    fn collect_error(&self, what: &str) -> CollectError {
        match self {
            NetlinkCountersError::Request(err) => err.collect_error(what),
            err => CollectError::new(ErrorKind::Io, format!("RDMA netlink {what}: {err}"))
                .keyed_by(format!("rdma netlink {what}")),
        }
    }
}

impl NetlinkRead<'_> {
    fn port_counters(&mut self, port: &str) -> Result<Vec<Counter>, NetlinkCountersError> {
        let result = self.request(port);
        if result.is_err() {
            // A socket that failed may hold a late reply; the index may be another device's.
            self.socket = None;
            *lock(&self.collector.netlink_indexes) = None;
        }
        result
    }

    fn request(&mut self, port: &str) -> Result<Vec<Counter>, NetlinkCountersError> {
        let index = (self.index.clone()).map_err(NetlinkCountersError::NoIndex)?;
        let port = (port.parse()).map_err(|_| NetlinkCountersError::PortName(port.to_string()))?;
        let socket = match &mut self.socket {
            Some(socket) => socket,
            None => self.socket.insert(self.collector.socket()?),
        };
        let reply = socket.dump(Command::PortCounters { port }, Some(index), self.deadline)?;
        match reply.devices.first() {
            Some(device) if device.name == self.device => Ok(reply.counters),
            other => Err(NetlinkCountersError::OtherDevice(
                other.map(|device| device.name.clone()).unwrap_or_default(),
            )),
        }
    }
}

/// The most hw counter names over netlink a port keeps label sets for: mlx5 gives about 60.
const MAX_NETLINK_COUNTERS: usize = 1024;

impl DeviceRead<'_> {
    /// A port's hw counters over netlink; `None` where they come from the files.
    /// `sets`: the port's counters' label sets by name, kept from one read to the next.
    pub(super) fn netlink_hw_counters(
        &mut self,
        port: &LabelValue,
        sets: &mut foldhash::HashMap<String, LabelSet>,
    ) -> Option<NetlinkOutcome> {
        let netlink = self.netlink.as_mut()?;
        let err = match netlink.port_counters(port.as_str()) {
            Ok(counters) => {
                for Counter { name, value } in counters {
                    // The names a driver gives are a fixed table; the bound is for one
                    // that would make up new ones.
                    if sets.len() >= MAX_NETLINK_COUNTERS && !sets.contains_key(&name) {
                        sets.clear();
                    }
                    self.saw_port_counter(&name, value);
                    if !self.hw_counter_names.allows(&name) {
                        continue;
                    }
                    let set = match sets.entry(name) {
                        MapEntry::Occupied(set) => set.into_mut(),
                        MapEntry::Vacant(vacant) => {
                            let counter = LabelValue::from(vacant.key().clone());
                            vacant.insert(counter_set(&self.device, Some(port), counter))
                        }
                    };
                    (self.unit.out().samples).push_set(&PORT_HW_STAT, set, Value::Int(value));
                }
                return Some(NetlinkOutcome::Read);
            }
            Err(err) => err,
        };
        let what = format!(
            "{} port {}: hw counters",
            self.device.as_str(),
            port.as_str()
        );
        if !netlink.fallback {
            self.unit.out().errors.push(err.collect_error(&what));
            return Some(NetlinkOutcome::Failed);
        }
        let notice = format!("RDMA netlink failed for {what} read from sysfs instead: {err}");
        if netlink.collector.fallbacks_logged.is_new(notice.clone()) {
            logging::log(Level::Info, &notice, &[("collector", "rdma")]);
        }
        Some(NetlinkOutcome::FallBack)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{HwCounters, NameFilter, RdmaCollector, CLASS_DIR};
    use crate::collector::{Collector, Output};
    use crate::sync::lock;
    use crate::sysfs::Entry;

    /// rxe0 with one hw counter file, read by a collector whose netlink listing failed; and
    /// whether the fallback's notice would be new after that read (it was not logged).
    fn read_after_a_failed_listing(hw_counters: HwCounters) -> (Output, bool) {
        let tmp = tempfile::tempdir().unwrap();
        let port = tmp.path().join(CLASS_DIR).join("rxe0/ports/1");
        std::fs::create_dir_all(port.join("hw_counters")).unwrap();
        std::fs::write(port.join("hw_counters/rcvd_pkts"), "12\n").unwrap();
        std::fs::write(port.join("hw_counters/lifespan"), "10\n").unwrap();
        for (file, content) in [
            ("state", "4: ACTIVE"),
            ("phys_state", "5: LinkUp"),
            ("rate", "10 Gb/sec (1X QDR)"),
        ] {
            std::fs::write(port.join(file), content).unwrap();
        }
        let mut collector = RdmaCollector::new(tmp.path().to_path_buf(), NameFilter::All);
        collector.hw_counters = hw_counters;
        *lock(&collector.netlink_indexes) =
            Some(Err("listing devices over RDMA netlink: refused".into()));
        let mut out = Output::default();
        collector.collect_unit(&Entry::Name("rxe0".to_string()), &mut out);
        let notice = "RDMA netlink failed for rxe0 port 1: hw counters read from sysfs instead: listing devices over RDMA netlink: refused";
        (out, collector.fallbacks_logged.is_new(notice.to_string()))
    }

    fn text(out: Output) -> String {
        crate::metrics::encode(out.samples, crate::metrics::Format::PrometheusText).unwrap()
    }

    #[test]
    fn where_netlink_fails_auto_reads_the_files_and_says_so() {
        let (out, logged_again) =
            read_after_a_failed_listing(HwCounters::Netlink { fallback: true });
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        assert!(
            !logged_again,
            "the fallback's cause was logged: once per cause"
        );
        let text = text(out);
        for series in [
            r#"hpcnode_rdma_port_hw_stat_total{device="rxe0",port="1",counter="rcvd_pkts"} 12"#,
            r#"hpcnode_rdma_port_hw_counters_source{device="rxe0",port="1",source="sysfs"} 1"#,
        ] {
            assert!(text.contains(series), "{text}");
        }
    }

    #[test]
    fn where_netlink_is_forced_a_failure_is_an_error_not_the_files() {
        let (out, logged_again) =
            read_after_a_failed_listing(HwCounters::Netlink { fallback: false });
        assert!(logged_again, "no fallback, no notice");
        assert_eq!(out.errors.len(), 1, "{:?}", out.errors);
        assert!(
            format!("{:?}", out.errors[0]).contains("rxe0 port 1"),
            "{:?}",
            out.errors
        );
        let text = text(out);
        assert!(!text.contains("hw_stat"), "{text}");
        assert!(!text.contains("hw_counters_source"), "{text}");
    }
}
