//! `rdma_netlink`: who holds the fabric. The kernel's RDMA resource tracking, read over RDMA
//! netlink as `rdma resource show` reads it: per device the queue pairs by port, type and
//! state, the CQs, MRs and the bytes they pin, PDs and CM IDs; per holder (a process by pid and
//! `comm`, or a kernel module such as `ib_ipoib`) and per Slurm job, capped to the holders
//! pinning the most memory; with `--collector.rdma_netlink.qp-counters`, their traffic from
//! per-QP counters too. `crate::netlink::rdma` decodes the replies and makes the calls,
//! `holders.rs` sums and names the holders, `qp_counters.rs` binds ports and sums counters.
//!
//! A kernel without RDMA netlink (no `ib_core` loaded) is `hpcnode_rdma_netlink_available 0`
//! and one log line, not an error at every scrape; the collector does not open the socket
//! then, since that alone would load `ib_core`.

mod device_series;
mod holders;
mod qp_counters;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::collector::{
    CollectError, Collector, Host, Output, Registration, Root, Settings, StartError, Started,
};
use crate::flags::{flag, switch, ConfigError, Flags};
use crate::logging::{self, Level};
use crate::metrics::{Desc, LabelValue, Value};
use crate::sync::lock;
use crate::sysfs::{Entry as SysEntry, SysDir};

use crate::netlink::rdma::counters::QpCounter;
use crate::netlink::rdma::message::{Command, Device, Dump, Entry, Resource};
use crate::netlink::rdma::reply::ReplyError;
use crate::netlink::rdma::socket::{DumpError, Socket};
use device_series::queue_pairs;
use holders::Usage;
use qp_counters::{bind_port, Binding};

pub const REGISTRATION: Registration = Registration {
    name: "rdma_netlink",
    enabled_by_default: true,
    help: "RDMA resources (QPs, CQs, MRs and pinned bytes, PDs, CM IDs) per device, process and Slurm job, over RDMA netlink",
    metrics: &METRICS,
    roots: &[Root::Sysfs, Root::Procfs],
    flags: || {
        vec![
            flag(
                MAX_HOLDERS,
                "20",
                "Holders (processes, kernel modules) and Slurm jobs exported per device, those pinning the most memory first; the rest are summed in one `other` series (1 to 10000).",
            ),
            switch(
                QP_COUNTERS,
                "Export per-QP counters summed per holder and Slurm job. CHANGES THE KERNEL'S COUNTER BINDING: every port in no counter mode is put in auto mode (`rdma statistic qp set link DEV/PORT auto type,pid on`, needs CAP_NET_ADMIN), so each new QP is bound to a counter of its process; a mode someone else set is kept. Off by default.",
            ),
        ]
    },
    configure: |flags| Ok(Box::new(NetlinkSettings::from_flags(flags)?)),
    probe: None,
};

const MAX_HOLDERS: &str = "collector.rdma_netlink.max-holders";
const QP_COUNTERS: &str = "collector.rdma_netlink.qp-counters";

#[derive(Debug)]
struct NetlinkSettings {
    max_holders: usize,
    qp_counters: bool,
}

impl NetlinkSettings {
    fn from_flags(flags: &Flags) -> Result<Self, ConfigError> {
        let max_holders = flags.number(MAX_HOLDERS, 1, 10_000)?.unwrap_or(20);
        Ok(NetlinkSettings {
            max_holders: max_holders as usize,
            qp_counters: flags.is_set(QP_COUNTERS),
        })
    }
}

impl Settings for NetlinkSettings {
    fn start(self: Box<Self>, host: &Host) -> Result<Started, StartError> {
        let collector = NetlinkCollector {
            sysfs: host.sysfs.clone(),
            procfs: host.procfs.clone(),
            timeout: host.scrape_timeout,
            max_holders: self.max_holders,
            available: Mutex::new(false),
            reported: Mutex::default(),
            bindings: self.qp_counters.then(Mutex::default),
        };
        // Bound now, so QPs created before the first scrape count too; a failure here is
        // reported by that scrape, which binds every port not bound yet.
        if collector.bindings.is_some() {
            for unit in collector.units().unwrap_or_default() {
                if let Unit::Device(device) = unit {
                    if let Ok(mut socket) = Socket::open() {
                        collector.bind_new_ports(&device, &mut socket, &mut Output::default());
                    }
                }
            }
        }
        Ok(Started::new(collector))
    }
}

const AVAILABLE: Desc = Desc::gauge(
    "hpcnode_rdma_netlink_available",
    "1 when the kernel answers RDMA netlink (ib_core loaded), else 0: no RDMA stack, or a kernel without it.",
    None,
);
const RESOURCES: Desc = Desc::gauge(
    "hpcnode_rdma_resources",
    "RDMA resources the kernel tracks on the device, by type (qp, cq, mr, pd, cm_id).",
    None,
);
const QUEUE_PAIRS: Desc = Desc::gauge(
    "hpcnode_rdma_queue_pairs",
    "Queue pairs on the device, by port (empty before the QP is bound to one), type and state.",
    None,
);
const PINNED: Desc = Desc::gauge(
    "hpcnode_rdma_pinned",
    "Memory registered in the device's memory regions (the sum of their lengths): what RDMA pins.",
    Some("bytes"),
);
const HOLDER_RESOURCES: Desc = Desc::gauge(
    "hpcnode_rdma_holder_resources",
    "RDMA resources on the device per holder (a process, a kernel module, or the other holders summed), by type.",
    None,
);
const HOLDER_PINNED: Desc = Desc::gauge(
    "hpcnode_rdma_holder_pinned",
    "Memory registered in the device's memory regions per holder.",
    Some("bytes"),
);
const JOB_RESOURCES: Desc = Desc::gauge(
    "hpcnode_rdma_slurm_job_resources",
    "RDMA resources on the device held by the processes of one Slurm job, by type.",
    None,
);
const JOB_PINNED: Desc = Desc::gauge(
    "hpcnode_rdma_slurm_job_pinned",
    "Memory registered in the device's memory regions by the processes of one Slurm job.",
    Some("bytes"),
);

const PORT_BINDING: Desc = Desc::gauge(
    "hpcnode_rdma_qp_counter_port_binding",
    "1 for the port's QP counter binding under --collector.rdma_netlink.qp-counters: exporter_auto (the exporter turned auto mode on), admin_auto, admin_manual (someone else's mode, kept), refused (the kernel refused auto mode).",
    None,
);
const BOUND_COUNTERS: Desc = Desc::gauge(
    "hpcnode_rdma_qp_counters",
    "QP counters bound on the device (RDMA_NLDEV_CMD_STAT_GET dump), under --collector.rdma_netlink.qp-counters.",
    None,
);
const HOLDER_QP_COUNTER: Desc = Desc::counter(
    "hpcnode_rdma_holder_qp_counter",
    "Per-QP counters of the device summed per holder, named as the driver names them (counter); a counter freed with its last QP leaves the sum.",
    None,
);
const JOB_QP_COUNTER: Desc = Desc::counter(
    "hpcnode_rdma_slurm_job_qp_counter",
    "Per-QP counters of the device summed over the processes of one Slurm job, named as the driver names them (counter).",
    None,
);

/// Every metric this collector emits (for the METRICS.md check).
pub const METRICS: [Desc; 12] = [
    AVAILABLE,
    RESOURCES,
    QUEUE_PAIRS,
    PINNED,
    HOLDER_RESOURCES,
    HOLDER_PINNED,
    JOB_RESOURCES,
    JOB_PINNED,
    PORT_BINDING,
    BOUND_COUNTERS,
    HOLDER_QP_COUNTER,
    JOB_QP_COUNTER,
];

struct NetlinkCollector {
    sysfs: PathBuf,
    procfs: PathBuf,
    timeout: Duration,
    max_holders: usize,
    /// Whether the last listing reached the kernel.
    available: Mutex<bool>,
    /// What was logged once: why netlink is unavailable, resource types a kernel lacks.
    reported: Mutex<BTreeSet<String>>,
    /// Under `--collector.rdma_netlink.qp-counters`: each port's binding, by device index
    /// (a device added again has a new one) and port.
    bindings: Option<Mutex<BTreeMap<(u32, u32), Binding>>>,
}

/// One unit: the kernel (whether netlink answers), or one device's resources.
enum Unit {
    Kernel,
    Device(Device),
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // Not a device name: those are at most IB_DEVICE_NAME_MAX characters, no spaces.
            Unit::Kernel => f.write_str("RDMA netlink"),
            Unit::Device(device) => f.write_str(&device.name),
        }
    }
}

impl NetlinkCollector {
    /// Logs `notice` the first time it is seen (and, for unavailability, again after netlink
    /// answered in between).
    fn notice_once(&self, notice: String) {
        if lock(&self.reported).insert(notice.clone()) {
            logging::log(Level::Info, &notice, &[("collector", "rdma_netlink")]);
        }
    }

    fn deadline(&self) -> Instant {
        Instant::now() + self.timeout
    }
}

impl Collector for NetlinkCollector {
    type Unit = Unit;

    fn units(&self) -> Result<Vec<Unit>, CollectError> {
        // Opening a NETLINK_RDMA socket loads ib_core (its module alias net-pf-16-proto-20):
        // a node without an RDMA stack is left as it is.
        if let Err(err) = SysDir::open(&self.sysfs, RDMA_CLASS) {
            if err.is_absent() {
                *lock(&self.available) = false;
                self.notice_once(format!(
                    "{UNAVAILABLE}: no RDMA stack loaded ({RDMA_CLASS} absent under --path.sysfs); not asked, since asking would load ib_core"
                ));
                return Ok(vec![Unit::Kernel]);
            }
        }
        let listed = Socket::open()
            .and_then(|mut socket| socket.dump(Command::Devices, None, self.deadline()));
        match listed {
            Ok(dump) => {
                *lock(&self.available) = true;
                lock(&self.reported).retain(|notice| !notice.starts_with(UNAVAILABLE));
                if let Some(bindings) = &self.bindings {
                    let listed: BTreeSet<u32> = dump.devices.iter().map(|d| d.index).collect();
                    lock(bindings).retain(|(index, _), _| listed.contains(index));
                }
                Ok(std::iter::once(Unit::Kernel)
                    .chain(dump.devices.into_iter().map(Unit::Device))
                    .collect())
            }
            Err(DumpError::Unavailable(err)) => {
                *lock(&self.available) = false;
                self.notice_once(format!(
                    "{UNAVAILABLE}: {err}; nothing to export until ib_core is loaded"
                ));
                Ok(vec![Unit::Kernel])
            }
            Err(err) => {
                *lock(&self.available) = false;
                Err(err.collect_error("listing RDMA devices"))
            }
        }
    }

    fn collect_unit(&self, unit: &Unit, out: &mut Output) {
        match unit {
            Unit::Kernel => {
                let available = *lock(&self.available);
                out.samples
                    .push(&AVAILABLE, vec![], Value::Int(u64::from(available)));
            }
            Unit::Device(device) => self.device(device, out),
        }
    }
}

const UNAVAILABLE: &str = "RDMA netlink unavailable";
/// Registered by ib_core when it loads (or at boot when built in).
const RDMA_CLASS: &str = "class/infiniband";

/// Where a unit's requests go: the kernel's socket, or in tests replies the kernel gave.
trait Requests {
    fn request(
        &mut self,
        command: Command,
        device: Option<u32>,
        deadline: Instant,
    ) -> Result<Dump, DumpError>;
}

impl Requests for Socket {
    fn request(
        &mut self,
        command: Command,
        device: Option<u32>,
        deadline: Instant,
    ) -> Result<Dump, DumpError> {
        self.dump(command, device, deadline)
    }
}

impl NetlinkCollector {
    fn device(&self, device: &Device, out: &mut Output) {
        match Socket::open() {
            Ok(mut socket) => self.read_device(device, &mut socket, out),
            Err(err) => out.errors.push(err.collect_error(&device.name)),
        }
    }

    fn read_device(&self, device: &Device, socket: &mut impl Requests, out: &mut Output) {
        let deadline = self.deadline();
        let label = LabelValue::from(device.name.clone());
        let mut entries: Vec<(Resource, Entry)> = Vec::new();
        let mut totals = Usage::default();
        for resource in Resource::ALL {
            match socket.request(Command::Resources(resource), Some(device.index), deadline) {
                Ok(dump) => {
                    totals.counts.insert(resource, 0);
                    for entry in dump.entries {
                        totals.add_entry(resource, &entry);
                        entries.push((resource, entry));
                    }
                    let count = totals.counts[&resource];
                    out.samples.push(
                        &RESOURCES,
                        vec![
                            ("device", label.clone()),
                            ("resource", resource.label().into()),
                        ],
                        Value::Int(count),
                    );
                }
                // A kernel that tracks no such resource (before 4.18, CQs, MRs and PDs; CM IDs
                // without rdma_cm): nothing to count, said once.
                Err(DumpError::Reply(ReplyError::Kernel(errno)))
                    if errno == libc::EOPNOTSUPP || errno == libc::EINVAL =>
                {
                    self.notice_once(format!(
                        "RDMA netlink: this kernel does not dump {} resources ({})",
                        resource.label(),
                        std::io::Error::from_raw_os_error(errno)
                    ));
                }
                Err(err) => out.errors.push(err.collect_error(&format!(
                    "{} {}",
                    device.name,
                    resource.label()
                ))),
            }
        }
        if totals.counts.contains_key(&Resource::MemoryRegion) {
            out.samples.push(
                &PINNED,
                vec![("device", label.clone())],
                Value::Int(totals.pinned_bytes),
            );
        }
        queue_pairs(&label, &entries, out);
        let counters = match self.bindings.is_some() {
            true => {
                self.bind_new_ports(device, socket, out);
                let counters = self.qp_counters(device, socket, out);
                qp_counters::by_holder(&counters, &entries)
            }
            false => BTreeMap::new(),
        };
        self.holders(&label, &entries, &counters, out);
    }

    /// Under `--collector.rdma_netlink.qp-counters`, each port of `device` not seen before
    /// (from sysfs): its mode read, auto mode turned on where none is set; logged once.
    fn bind_new_ports(&self, device: &Device, socket: &mut impl Requests, out: &mut Output) {
        let Some(bindings) = &self.bindings else {
            return;
        };
        let listing = SysDir::open(&self.sysfs, format!("{RDMA_CLASS}/{}/ports", device.name))
            .and_then(SysDir::into_entries);
        let ports: Vec<u32> = match listing {
            Ok(entries) => entries
                .into_iter()
                .filter_map(|entry| match entry {
                    SysEntry::Name(name) => name.parse().ok(),
                    SysEntry::NotUtf8 { .. } => None,
                })
                .filter(|port| !lock(bindings).contains_key(&(device.index, *port)))
                .collect(),
            Err(err) => return out.errors.push(err.into()),
        };
        for port in ports {
            match bind_port(socket, device.index, port, self.deadline()) {
                Ok(binding) => {
                    self.notice_once(binding.notice(&device.name, port));
                    lock(bindings).insert((device.index, port), binding);
                }
                Err(err) => out.errors.push(
                    err.collect_error(&format!("{} port {port} QP counter mode", device.name)),
                ),
            }
        }
    }

    /// The device's ports' bindings, and its bound counters.
    fn qp_counters(
        &self,
        device: &Device,
        socket: &mut impl Requests,
        out: &mut Output,
    ) -> Vec<QpCounter> {
        let label = LabelValue::from(device.name.clone());
        if let Some(bindings) = &self.bindings {
            for ((index, port), binding) in lock(bindings).iter() {
                if *index == device.index {
                    let labels = vec![
                        ("device", label.clone()),
                        ("port", port.to_string().into()),
                        ("binding", binding.label().into()),
                    ];
                    out.samples.push(&PORT_BINDING, labels, Value::Int(1));
                }
            }
        }
        match socket.request(Command::QpCounters, Some(device.index), self.deadline()) {
            Ok(dump) => {
                let count = dump.qp_counters.len() as u64;
                out.samples
                    .push(&BOUND_COUNTERS, vec![("device", label)], Value::Int(count));
                dump.qp_counters
            }
            // A kernel before 5.3 has no counter dump: said once.
            Err(DumpError::Reply(ReplyError::Kernel(errno)))
                if errno == libc::EOPNOTSUPP || errno == libc::EINVAL =>
            {
                self.notice_once(format!(
                    "RDMA netlink: this kernel does not dump QP counters ({})",
                    std::io::Error::from_raw_os_error(errno)
                ));
                Vec::new()
            }
            Err(err) => {
                out.errors
                    .push(err.collect_error(&format!("{} QP counters", device.name)));
                Vec::new()
            }
        }
    }
}

#[cfg(test)]
mod tests;
