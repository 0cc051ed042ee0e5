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

mod holders;
mod qp_counters;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::collector::{
    CollectError, Collector, Host, Output, Registration, Settings, StartError, Started,
};
use crate::flags::{flag, switch, ConfigError, Flags};
use crate::logging::{self, Level};
use crate::metrics::{Desc, LabelValue, Value};
use crate::sync::lock;
use crate::sysfs::{AttributeReader, Entry as SysEntry, SysDir};

use crate::netlink::rdma::counters::QpCounter;
use crate::netlink::rdma::message::{Command, Device, Dump, Entry, Resource};
use crate::netlink::rdma::reply::{Holder, ReplyError};
use crate::netlink::rdma::socket::{DumpError, Socket};
use holders::{by_holder, capped, slurm_job, Process, Usage};
use qp_counters::{bind_port, Binding, Sums};

pub const REGISTRATION: Registration = Registration {
    name: "rdma_netlink",
    enabled_by_default: true,
    help: "RDMA resources (QPs, CQs, MRs and pinned bytes, PDs, CM IDs) per device, process and Slurm job, over RDMA netlink",
    metrics: &METRICS,
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

/// `/proc/PID/cgroup` is one line per hierarchy; a few KiB at most.
const MAX_CGROUP_BYTES: usize = 64 << 10;

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

    /// Per holder and per Slurm job, each capped to `max_holders` series per device; the
    /// holders' QP counter sums follow the same cap.
    fn holders(
        &self,
        device: &LabelValue,
        entries: &[(Resource, Entry)],
        counters: &BTreeMap<Holder, Sums>,
        out: &mut Output,
    ) {
        let holders = by_holder(entries);
        let mut processes = BTreeMap::new();
        let mut jobs: BTreeMap<String, Usage> = BTreeMap::new();
        let proc = SysDir::open(&self.procfs, "").ok();
        let mut reader = AttributeReader::default();
        for (holder, usage) in &holders {
            if let Holder::Process(pid) = holder {
                let process = proc
                    .as_ref()
                    .map(|proc| process(proc, *pid, &mut reader))
                    .unwrap_or_default();
                if let Some(job) = &process.slurm_job {
                    jobs.entry(job.clone()).or_default().add(usage);
                }
                processes.insert(*pid, process);
            }
        }
        let mut job_counters: BTreeMap<String, Sums> = BTreeMap::new();
        for (holder, sums) in counters {
            let job = match holder {
                Holder::Process(pid) => processes.get(pid).and_then(|p| p.slurm_job.as_ref()),
                _ => None,
            };
            if let Some(job) = job {
                qp_counters::add(job_counters.entry(job.clone()).or_default(), sums);
            }
        }
        let (kept, rest) = capped(&holders, self.max_holders);
        // The counters of holders not kept one by one (or gone from the resource dumps).
        let mut other_counters = Sums::new();
        for (holder, sums) in counters {
            if !kept.iter().any(|(kept, _)| kept == holder) {
                qp_counters::add(&mut other_counters, sums);
            }
        }
        for (holder, usage) in kept {
            let sums = counters.get(&holder);
            let (kind, pid, comm, job): (&'static str, LabelValue, LabelValue, LabelValue) =
                match &holder {
                    Holder::Process(pid) => {
                        let process = processes.remove(pid).unwrap_or_default();
                        (
                            "process",
                            pid.to_string().into(),
                            process.comm.into(),
                            process.slurm_job.unwrap_or_default().into(),
                        )
                    }
                    Holder::Kernel(name) => ("kernel", "".into(), name.clone().into(), "".into()),
                    Holder::Unknown => ("unknown", "".into(), "".into(), "".into()),
                };
            let labels = vec![
                ("device", device.clone()),
                ("holder", kind.into()),
                ("pid", pid),
                ("comm", comm),
                ("slurm_job", job),
            ];
            push_counters(&HOLDER_QP_COUNTER, &labels, sums, out);
            push_usage(&HOLDER_RESOURCES, &HOLDER_PINNED, labels, &usage, out);
        }
        let labels = vec![
            ("device", device.clone()),
            ("holder", "other".into()),
            ("pid", "".into()),
            ("comm", "".into()),
            ("slurm_job", "".into()),
        ];
        push_counters(&HOLDER_QP_COUNTER, &labels, Some(&other_counters), out);
        if let Some(rest) = rest {
            push_usage(&HOLDER_RESOURCES, &HOLDER_PINNED, labels, &rest, out);
        }
        let (kept, rest) = capped(&jobs, self.max_holders);
        let mut other_job_counters = Sums::new();
        for (job, sums) in &job_counters {
            if !kept.iter().any(|(kept, _)| kept == job) {
                qp_counters::add(&mut other_job_counters, sums);
            }
        }
        let other = || ("other".to_string(), Usage::default());
        let rest = (rest.is_some() || !other_job_counters.is_empty())
            .then(|| rest.map_or_else(other, |usage| ("other".to_string(), usage)));
        for (job, usage) in kept.into_iter().chain(rest) {
            let sums = match job.as_str() {
                "other" => Some(&other_job_counters),
                job => job_counters.get(job),
            };
            let labels = vec![("device", device.clone()), ("slurm_job", job.into())];
            push_counters(&JOB_QP_COUNTER, &labels, sums, out);
            push_usage(&JOB_RESOURCES, &JOB_PINNED, labels, &usage, out);
        }
    }
}

/// A QP's port, type and state, as the kernel gave them.
type QueuePairKind = (Option<u32>, Option<u8>, Option<u8>);

/// Queue pairs by port, type and state.
fn queue_pairs(device: &LabelValue, entries: &[(Resource, Entry)], out: &mut Output) {
    let mut counts: BTreeMap<QueuePairKind, u64> = BTreeMap::new();
    for (_, entry) in entries
        .iter()
        .filter(|(resource, _)| *resource == Resource::QueuePair)
    {
        *counts
            .entry((entry.port, entry.qp_type, entry.qp_state))
            .or_default() += 1;
    }
    for ((port, qp_type, state), count) in counts {
        let labels = vec![
            ("device", device.clone()),
            (
                "port",
                port.map(|port| port.to_string()).unwrap_or_default().into(),
            ),
            ("type", qp_type.map_or(LabelValue::from(""), qp_type_name)),
            ("state", state.map_or(LabelValue::from(""), qp_state_name)),
        ];
        out.samples.push(&QUEUE_PAIRS, labels, Value::Int(count));
    }
}

/// Counts per resource type (every type, 0 included, so a holder's series stay the same set)
/// and pinned bytes, under `labels`.
fn push_usage(
    resources: &Desc,
    pinned: &Desc,
    labels: Vec<(&'static str, LabelValue)>,
    usage: &Usage,
    out: &mut Output,
) {
    for resource in Resource::ALL {
        let mut labels = labels.clone();
        labels.push(("resource", resource.label().into()));
        let count = usage.counts.get(&resource).copied().unwrap_or(0);
        out.samples.push(resources, labels, Value::Int(count));
    }
    out.samples
        .push(pinned, labels, Value::Int(usage.pinned_bytes));
}

/// Each summed counter under `labels`, with its name as `counter`.
fn push_counters(
    desc: &Desc,
    labels: &[(&'static str, LabelValue)],
    sums: Option<&Sums>,
    out: &mut Output,
) {
    for (name, value) in sums.into_iter().flatten() {
        let mut labels = labels.to_vec();
        labels.push(("counter", name.clone().into()));
        out.samples.push(desc, labels, Value::Int(*value));
    }
}

/// A process's `comm` and Slurm job; empty for a process gone meanwhile or hidden from the
/// exporter (`ProtectProc=invisible` hides other users' processes without CAP_SYS_PTRACE).
fn process(proc: &SysDir, pid: u32, reader: &mut AttributeReader) -> Process {
    let comm = proc
        .read(&format!("{pid}/comm"), reader)
        .map(str::to_string)
        .unwrap_or_default();
    let slurm_job = proc
        .read_text_file(&format!("{pid}/cgroup"), MAX_CGROUP_BYTES)
        .ok()
        .and_then(|cgroup| slurm_job(&cgroup));
    Process { comm, slurm_job }
}

/// `enum ib_qp_type`, spelled as `rdma resource show qp` spells it (underscores for spaces).
fn qp_type_name(qp_type: u8) -> LabelValue {
    match qp_type {
        0 => "SMI".into(),
        1 => "GSI".into(),
        2 => "RC".into(),
        3 => "UC".into(),
        4 => "UD".into(),
        5 => "RAW_IPV6".into(),
        6 => "RAW_ETHERTYPE".into(),
        8 => "RAW_PACKET".into(),
        9 => "XRC_INI".into(),
        10 => "XRC_TGT".into(),
        0xff => "DRIVER".into(),
        other => other.to_string().into(),
    }
}

/// `enum ib_qp_state`.
fn qp_state_name(state: u8) -> LabelValue {
    match state {
        0 => "RESET".into(),
        1 => "INIT".into(),
        2 => "RTR".into(),
        3 => "RTS".into(),
        4 => "SQD".into(),
        5 => "SQE".into(),
        6 => "ERR".into(),
        other => other.to_string().into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{encode, Format};
    use crate::netlink::rdma::counters::encode as counter_replies;
    use crate::netlink::rdma::counters::QpCounterMode;
    use crate::netlink::rdma::message::encode as replies;

    fn collector(procfs: PathBuf, max_holders: usize) -> NetlinkCollector {
        NetlinkCollector {
            sysfs: PathBuf::new(),
            procfs,
            timeout: Duration::from_secs(1),
            max_holders,
            available: Mutex::new(true),
            reported: Mutex::default(),
            bindings: None,
        }
    }

    /// A process as procfs shows it: `comm` and `cgroup`.
    fn process(proc: &std::path::Path, pid: u32, comm: &str, cgroup: &str) {
        let dir = proc.join(pid.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("comm"), format!("{comm}\n")).unwrap();
        std::fs::write(dir.join("cgroup"), cgroup).unwrap();
    }

    fn entry(
        holder: Holder,
        port: Option<u32>,
        qp: Option<(u8, u8)>,
        mr_length: Option<u64>,
    ) -> Entry {
        Entry {
            holder,
            port,
            qp_number: None,
            qp_type: qp.map(|(qp_type, _)| qp_type),
            qp_state: qp.map(|(_, state)| state),
            mr_length,
        }
    }

    fn text(out: Output) -> String {
        encode(out.samples, Format::PrometheusText).unwrap()
    }

    /// Two ranks of Slurm job 77, one process outside any job, one that exited, and ib_core's
    /// GSI QP; two holders kept, the rest summed.
    #[test]
    fn holders_are_named_capped_and_summed_per_job() {
        let proc = tempfile::tempdir().unwrap();
        let job = "0::/system.slice/slurmstepd.scope/job_77/step_0/user/task_0\n";
        process(proc.path(), 100, "mpi_rank", job);
        process(proc.path(), 101, "mpi_rank", job);
        process(proc.path(), 200, "ib_write_bw", "0::/user.slice\n");
        let (rc_rts, gsi_rts) = (Some((2, 3)), Some((1, 3)));
        let entries = vec![
            (
                Resource::QueuePair,
                entry(Holder::Kernel("ib_core".into()), Some(1), gsi_rts, None),
            ),
            (
                Resource::QueuePair,
                entry(Holder::Process(100), Some(1), rc_rts, None),
            ),
            (
                Resource::QueuePair,
                entry(Holder::Process(101), None, Some((2, 0)), None),
            ),
            (
                Resource::MemoryRegion,
                entry(Holder::Process(100), None, None, Some(1 << 30)),
            ),
            (
                Resource::MemoryRegion,
                entry(Holder::Process(101), None, None, Some(1 << 20)),
            ),
            (
                Resource::MemoryRegion,
                entry(Holder::Process(200), None, None, Some(1 << 25)),
            ),
            (
                Resource::MemoryRegion,
                entry(Holder::Process(300), None, None, Some(4096)),
            ),
            (
                Resource::ProtectionDomain,
                entry(Holder::Process(300), None, None, None),
            ),
        ];
        let mut out = Output::default();
        let device = LabelValue::from("mlx5_0");
        collector(proc.path().to_path_buf(), 2).holders(
            &device,
            &entries,
            &BTreeMap::new(),
            &mut out,
        );
        queue_pairs(&device, &entries, &mut out);
        let text = text(out);
        let has = |line: &str| assert!(text.lines().any(|l| l == line), "no {line} in\n{text}");
        has(
            r#"hpcnode_rdma_holder_pinned_bytes{device="mlx5_0",holder="process",pid="100",comm="mpi_rank",slurm_job="77"} 1073741824"#,
        );
        has(
            r#"hpcnode_rdma_holder_pinned_bytes{device="mlx5_0",holder="process",pid="200",comm="ib_write_bw",slurm_job=""} 33554432"#,
        );
        // pid 101 (1 MiB), the exited pid 300 (4 KiB) and ib_core (nothing pinned) summed.
        has(
            r#"hpcnode_rdma_holder_pinned_bytes{device="mlx5_0",holder="other",pid="",comm="",slurm_job=""} 1052672"#,
        );
        has(
            r#"hpcnode_rdma_holder_resources{device="mlx5_0",holder="other",pid="",comm="",slurm_job="",resource="qp"} 2"#,
        );
        has(
            r#"hpcnode_rdma_holder_resources{device="mlx5_0",holder="other",pid="",comm="",slurm_job="",resource="pd"} 1"#,
        );
        // The job counts both ranks, whether kept one by one or not.
        has(r#"hpcnode_rdma_slurm_job_pinned_bytes{device="mlx5_0",slurm_job="77"} 1074790400"#);
        has(r#"hpcnode_rdma_slurm_job_resources{device="mlx5_0",slurm_job="77",resource="qp"} 2"#);
        has(r#"hpcnode_rdma_slurm_job_resources{device="mlx5_0",slurm_job="77",resource="mr"} 2"#);
        assert_eq!(text.matches("hpcnode_rdma_holder_pinned_bytes{").count(), 3);
        has(r#"hpcnode_rdma_queue_pairs{device="mlx5_0",port="1",type="RC",state="RTS"} 1"#);
        has(r#"hpcnode_rdma_queue_pairs{device="mlx5_0",port="1",type="GSI",state="RTS"} 1"#);
        has(r#"hpcnode_rdma_queue_pairs{device="mlx5_0",port="",type="RC",state="RESET"} 1"#);
    }

    fn json_records(path: &std::path::Path) -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(path).unwrap();
        serde_json::from_str(&text).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
    }

    /// Real kernels' replies (Debian 6.12 and 6.1 in the kernel lab, Soft-RoCE with
    /// ib_write_bw running), captured at the moment iproute2's `rdma resource show qp -j` /
    /// `mr -j` printed theirs: the decoder reads every entry as rdma does.
    #[test]
    fn captured_kernel_replies_decode_as_rdma_prints_them() {
        for release in ["6.12", "6.1"] {
            let dir = replies::fixtures(release);
            let devices = replies::replay(&dir.join("devices.bin"), Command::Devices, None);
            let rxe0 = devices
                .devices
                .iter()
                .find(|device| device.name == "rxe0")
                .expect("rxe0 listed");
            let index = Some(rxe0.index);
            let qps = replies::replay(
                &dir.join("qp.bin"),
                Command::Resources(Resource::QueuePair),
                index,
            );
            let records = json_records(&dir.join("qp.json"));
            assert_eq!(qps.entries.len(), records.len(), "{release}: QPs");
            for (entry, record) in qps.entries.iter().zip(&records) {
                let holder = match record.get("pid") {
                    Some(pid) => Holder::Process(pid.as_u64().unwrap() as u32),
                    None => Holder::Kernel(record["comm"].as_str().unwrap().to_string()),
                };
                assert_eq!(entry.holder, holder, "{release}: {record}");
                assert_eq!(
                    entry.port.map(u64::from),
                    record["port"].as_u64(),
                    "{release}: {record}"
                );
                assert_eq!(
                    entry.qp_type.map(qp_type_name).unwrap().as_str(),
                    record["type"],
                    "{release}: {record}"
                );
                assert_eq!(
                    entry.qp_state.map(qp_state_name).unwrap().as_str(),
                    record["state"],
                    "{release}: {record}"
                );
            }
            assert!(qps
                .entries
                .iter()
                .any(|entry| matches!(entry.holder, Holder::Process(_))));
            let mrs = replies::replay(
                &dir.join("mr.bin"),
                Command::Resources(Resource::MemoryRegion),
                index,
            );
            let records = json_records(&dir.join("mr.json"));
            assert_eq!(mrs.entries.len(), records.len(), "{release}: MRs");
            for (entry, record) in mrs.entries.iter().zip(&records) {
                assert_eq!(
                    entry.mr_length,
                    record["mrlen"].as_u64(),
                    "{release}: {record}"
                );
                assert_eq!(
                    entry.holder,
                    Holder::Process(record["pid"].as_u64().unwrap() as u32)
                );
            }
            for resource in [Resource::CompletionQueue, Resource::ProtectionDomain] {
                let dump = replies::replay(
                    &dir.join(format!("{}.bin", resource.label())),
                    Command::Resources(resource),
                    index,
                );
                assert!(
                    !dump.entries.is_empty(),
                    "{release}: no {} entries",
                    resource.label()
                );
            }
            replies::replay(
                &dir.join("cm_id.bin"),
                Command::Resources(Resource::CmId),
                index,
            );
        }
    }

    /// The requests a unit sends, recorded, each answered with bytes as the kernel encodes
    /// them and decoded by the real decoder.
    struct Replies<F: FnMut(Command) -> Vec<u8>> {
        sent: Vec<Command>,
        reply: F,
    }

    impl<F: FnMut(Command) -> Vec<u8>> Requests for Replies<F> {
        fn request(
            &mut self,
            command: Command,
            device: Option<u32>,
            _deadline: Instant,
        ) -> Result<Dump, DumpError> {
            self.sent.push(command);
            let mut dump = Dump::new(command, device, 1);
            dump.feed(&(self.reply)(command))?;
            Ok(dump)
        }
    }

    fn rxe0() -> Device {
        Device {
            index: 3,
            name: "rxe0".into(),
        }
    }

    /// A node with rxe0 (one port) and two ranks of Slurm job 77 holding one QP each (numbers
    /// 17 and 18), each with a counter of its own; the port's mode as `mode`, and `set` the
    /// kernel's answer to a mode set.
    /// A node with rxe0's port 1 in `mode`, two processes of job 77 with a counted QP each, and
    /// a kernel that answers them (`set`: its reply to a mode set), nothing sent yet.
    fn node(
        mode: QpCounterMode,
        set: Vec<u8>,
    ) -> (tempfile::TempDir, Replies<impl FnMut(Command) -> Vec<u8>>) {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("sys/class/infiniband/rxe0/ports/1")).unwrap();
        let job = "0::/system.slice/slurmstepd.scope/job_77/step_0/user/task_0\n";
        process(&root.path().join("proc"), 100, "mpi_rank", job);
        process(&root.path().join("proc"), 101, "mpi_rank", job);
        let qps = [(100, 17), (101, 18)].map(|(pid, number)| Entry {
            qp_number: Some(number),
            ..entry(Holder::Process(pid), Some(1), Some((2, 3)), None)
        });
        let counters = [(100, 17, 1 << 33), (101, 18, 5)].map(|(pid, number, value)| {
            let values = [("rx_write_requests", value)];
            counter_replies::counter(number, Some(Holder::Process(pid)), &[number], &values)
        });
        let reply = move |command| match command {
            Command::Resources(Resource::QueuePair) => [
                replies::resources(Resource::QueuePair, &rxe0(), 1, &qps),
                replies::done(1, 0),
            ]
            .concat(),
            Command::QpCounterMode { port } => counter_replies::mode(&rxe0(), port, 1, mode),
            Command::SetQpCounterAuto { .. } => set.clone(),
            Command::QpCounters => [
                counter_replies::dump(&rxe0(), 1, &counters),
                replies::done(1, 0),
            ]
            .concat(),
            _ => replies::done(1, 0),
        };
        let kernel = Replies {
            sent: Vec::new(),
            reply,
        };
        (root, kernel)
    }

    fn qp_counting(root: &std::path::Path) -> NetlinkCollector {
        NetlinkCollector {
            sysfs: root.join("sys"),
            bindings: Some(Mutex::default()),
            ..collector(root.join("proc"), 1)
        }
    }

    fn resource_dumps() -> Vec<Command> {
        Resource::ALL.map(Command::Resources).to_vec()
    }

    /// Off by default: the unit asks for the resources alone, and nothing of the counters.
    #[test]
    fn without_the_flag_no_counter_request_is_sent() {
        let (root, mut kernel) = node(QpCounterMode::None, counter_replies::set(&rxe0(), 1, 1));
        let collector = NetlinkCollector {
            sysfs: root.path().join("sys"),
            ..collector(root.path().join("proc"), 1)
        };
        let mut out = Output::default();
        collector.read_device(&rxe0(), &mut kernel, &mut out);
        assert_eq!(kernel.sent, resource_dumps());
        assert!(!text(out).contains("qp_counter"));
    }

    /// A port in no mode is put in auto mode once; each scrape then dumps the counters, summed
    /// per holder (one kept, the other in `other`) and per job.
    #[test]
    fn with_the_flag_auto_mode_is_turned_on_once_and_counters_summed() {
        let (root, mut kernel) = node(QpCounterMode::None, counter_replies::set(&rxe0(), 1, 1));
        let collector = qp_counting(root.path());
        let mut out = Output::default();
        collector.read_device(&rxe0(), &mut kernel, &mut out);
        let set = Command::SetQpCounterAuto { port: 1, mask: 3 };
        let mut first = resource_dumps();
        first.extend([Command::QpCounterMode { port: 1 }, set, Command::QpCounters]);
        assert_eq!(kernel.sent, first);
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        let text = text(out);
        let has = |line: &str| assert!(text.lines().any(|l| l == line), "no {line} in\n{text}");
        has(
            r#"hpcnode_rdma_qp_counter_port_binding{device="rxe0",port="1",binding="exporter_auto"} 1"#,
        );
        has(r#"hpcnode_rdma_qp_counters{device="rxe0"} 2"#);
        // One holder kept (max-holders 1; ties by pid), the other summed as other.
        has(
            r#"hpcnode_rdma_holder_qp_counter_total{device="rxe0",holder="process",pid="100",comm="mpi_rank",slurm_job="77",counter="rx_write_requests"} 8589934592"#,
        );
        has(
            r#"hpcnode_rdma_holder_qp_counter_total{device="rxe0",holder="other",pid="",comm="",slurm_job="",counter="rx_write_requests"} 5"#,
        );
        has(
            r#"hpcnode_rdma_slurm_job_qp_counter_total{device="rxe0",slurm_job="77",counter="rx_write_requests"} 8589934597"#,
        );
        kernel.sent.clear();
        collector.read_device(&rxe0(), &mut kernel, &mut Output::default());
        let mut second = resource_dumps();
        second.push(Command::QpCounters);
        assert_eq!(kernel.sent, second, "the port is bound once");
    }

    /// Soft-RoCE's answer on a kernel whose rxe lacks counter support, or a caller without
    /// CAP_NET_ADMIN: refused, said once (a metric and one line), not asked again; and an
    /// admin's manual binding is never changed.
    #[test]
    fn a_refusal_is_reported_once_and_an_admins_mode_kept() {
        let refused = replies::error(1, libc::EOPNOTSUPP);
        let (root, mut kernel) = node(QpCounterMode::None, refused);
        let collector = qp_counting(root.path());
        for _ in 0..2 {
            let mut out = Output::default();
            collector.read_device(&rxe0(), &mut kernel, &mut out);
            assert!(out.errors.is_empty(), "{:?}", out.errors);
            assert!(text(out).contains(
                r#"hpcnode_rdma_qp_counter_port_binding{device="rxe0",port="1",binding="refused"} 1"#
            ));
        }
        let sets = kernel
            .sent
            .iter()
            .filter(|c| matches!(c, Command::SetQpCounterAuto { .. }));
        assert_eq!(sets.count(), 1);
        let reported = lock(&collector.reported);
        let refusals = reported.iter().filter(|notice| notice.contains("refused"));
        assert_eq!(refusals.count(), 1, "{reported:?}");
        drop(reported);

        let (root, mut kernel) = node(QpCounterMode::Manual, Vec::new());
        let collector = qp_counting(root.path());
        let mut out = Output::default();
        collector.read_device(&rxe0(), &mut kernel, &mut out);
        assert!(!(kernel.sent.iter()).any(|c| matches!(c, Command::SetQpCounterAuto { .. })));
        assert!(text(out).contains(r#"binding="admin_manual"} 1"#));
    }

    #[test]
    fn kernel_holders_are_named_by_module() {
        let proc = tempfile::tempdir().unwrap();
        let entries = vec![(
            Resource::QueuePair,
            entry(
                Holder::Kernel("ib_ipoib".into()),
                Some(1),
                Some((4, 3)),
                None,
            ),
        )];
        let mut out = Output::default();
        collector(proc.path().to_path_buf(), 20).holders(
            &"ib0".into(),
            &entries,
            &BTreeMap::new(),
            &mut out,
        );
        let text = text(out);
        assert!(
            text.contains(r#"hpcnode_rdma_holder_resources{device="ib0",holder="kernel",pid="",comm="ib_ipoib",slurm_job="",resource="qp"} 1"#),
            "{text}"
        );
        assert!(!text.contains("slurm_job_"), "{text}");
    }
}
