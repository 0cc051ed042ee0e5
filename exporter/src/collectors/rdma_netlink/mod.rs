//! `rdma_netlink`: who holds the fabric. The kernel's RDMA resource tracking, read over RDMA
//! netlink as `rdma resource show` reads it: per device the queue pairs by port, type and
//! state, the CQs, MRs and the bytes they pin, PDs and CM IDs; per holder (a process by pid and
//! `comm`, or a kernel module such as `ib_ipoib`) and per Slurm job, capped to the holders
//! pinning the most memory. `crate::rdma_netlink` decodes the replies and makes the calls,
//! `holders.rs` sums and names the holders.
//!
//! A kernel without RDMA netlink (no `ib_core` loaded) is `hpcnode_rdma_netlink_available 0`
//! and one log line, not an error at every scrape; the collector does not open the socket
//! then, since that alone would load `ib_core`.

mod holders;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::collector::{
    lock, CollectError, Collector, Host, Output, Registration, Settings, StartError, Started,
};
use crate::flags::{flag, ConfigError, Flags};
use crate::logging::{self, Level};
use crate::metrics::{Desc, LabelValue, Value};
use crate::sysfs::{AttributeReader, SysDir};

use crate::rdma_netlink::message::{Command, Device, Entry, Holder, ReplyError, Resource};
use crate::rdma_netlink::socket::{DumpError, Socket};
use holders::{by_holder, capped, slurm_job, Process, Usage};

pub const REGISTRATION: Registration = Registration {
    name: "rdma_netlink",
    enabled_by_default: true,
    help: "RDMA resources (QPs, CQs, MRs and pinned bytes, PDs, CM IDs) per device, process and Slurm job, over RDMA netlink",
    metrics: &METRICS,
    flags: || {
        vec![flag(
            MAX_HOLDERS,
            "20",
            "Holders (processes, kernel modules) and Slurm jobs exported per device, those pinning the most memory first; the rest are summed in one `other` series (1 to 10000).",
        )]
    },
    configure: |flags| Ok(Box::new(NetlinkSettings::from_flags(flags)?)),
    probe: None,
};

const MAX_HOLDERS: &str = "collector.rdma_netlink.max-holders";

#[derive(Debug)]
struct NetlinkSettings {
    max_holders: usize,
}

impl NetlinkSettings {
    fn from_flags(flags: &Flags) -> Result<Self, ConfigError> {
        let max_holders = flags.number(MAX_HOLDERS, 1, 10_000)?.unwrap_or(20);
        Ok(NetlinkSettings {
            max_holders: max_holders as usize,
        })
    }
}

impl Settings for NetlinkSettings {
    fn start(self: Box<Self>, host: &Host) -> Result<Started, StartError> {
        Ok(Started::new(NetlinkCollector {
            sysfs: host.sysfs.clone(),
            procfs: host.procfs.clone(),
            timeout: host.scrape_timeout,
            max_holders: self.max_holders,
            available: Mutex::new(false),
            reported: Mutex::default(),
        }))
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

/// Every metric this collector emits (for the METRICS.md check).
pub const METRICS: [Desc; 8] = [
    AVAILABLE,
    RESOURCES,
    QUEUE_PAIRS,
    PINNED,
    HOLDER_RESOURCES,
    HOLDER_PINNED,
    JOB_RESOURCES,
    JOB_PINNED,
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

impl NetlinkCollector {
    fn device(&self, device: &Device, out: &mut Output) {
        let mut socket = match Socket::open() {
            Ok(socket) => socket,
            Err(err) => return out.errors.push(err.collect_error(&device.name)),
        };
        let deadline = self.deadline();
        let label = LabelValue::from(device.name.clone());
        let mut entries: Vec<(Resource, Entry)> = Vec::new();
        let mut totals = Usage::default();
        for resource in Resource::ALL {
            match socket.dump(Command::Resources(resource), Some(device.index), deadline) {
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
        self.holders(&label, &entries, out);
    }

    /// Per holder and per Slurm job, each capped to `max_holders` series per device.
    fn holders(&self, device: &LabelValue, entries: &[(Resource, Entry)], out: &mut Output) {
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
        let (kept, rest) = capped(&holders, self.max_holders);
        for (holder, usage) in kept {
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
            push_usage(&HOLDER_RESOURCES, &HOLDER_PINNED, labels, &usage, out);
        }
        if let Some(rest) = rest {
            let labels = vec![
                ("device", device.clone()),
                ("holder", "other".into()),
                ("pid", "".into()),
                ("comm", "".into()),
                ("slurm_job", "".into()),
            ];
            push_usage(&HOLDER_RESOURCES, &HOLDER_PINNED, labels, &rest, out);
        }
        let (kept, rest) = capped(&jobs, self.max_holders);
        let rest = rest.map(|usage| ("other".to_string(), usage));
        for (job, usage) in kept.into_iter().chain(rest) {
            let labels = vec![("device", device.clone()), ("slurm_job", job.into())];
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
    use crate::rdma_netlink::message::encode as replies;

    fn collector(procfs: PathBuf, max_holders: usize) -> NetlinkCollector {
        NetlinkCollector {
            sysfs: PathBuf::new(),
            procfs,
            timeout: Duration::from_secs(1),
            max_holders,
            available: Mutex::new(true),
            reported: Mutex::default(),
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
        collector(proc.path().to_path_buf(), 2).holders(&device, &entries, &mut out);
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
        collector(proc.path().to_path_buf(), 20).holders(&"ib0".into(), &entries, &mut out);
        let text = text(out);
        assert!(
            text.contains(r#"hpcnode_rdma_holder_resources{device="ib0",holder="kernel",pid="",comm="ib_ipoib",slurm_job="",resource="qp"} 1"#),
            "{text}"
        );
        assert!(!text.contains("slurm_job_"), "{text}");
    }
}
