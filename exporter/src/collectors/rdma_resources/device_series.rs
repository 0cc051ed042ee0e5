//! The series of one device's read, from its resource dumps: queue pairs by port, type and
//! state, and usage and QP counter sums per holder and per Slurm job, capped to `max_holders`.

use std::collections::BTreeMap;

use super::holders::{by_holder, capped, Process, Usage};
use super::qp_counters::{self, Sums};
use super::{
    NetlinkCollector, HOLDER_PINNED, HOLDER_QP_COUNTER, HOLDER_RESOURCES, JOB_PINNED,
    JOB_QP_COUNTER, JOB_RESOURCES, QUEUE_PAIRS,
};
use crate::collector::Output;
use crate::metrics::{Desc, LabelValue, Value};
use crate::netlink::rdma::message::{Entry, Resource};
use crate::netlink::rdma::reply::Holder;
use crate::slurm_job::{Found, Jobs, MAX_CGROUP_BYTES};
use crate::sysfs::{AttributeReader, SysDir};

impl NetlinkCollector {
    /// Per holder and per Slurm job, each capped to `max_holders` series per device; the
    /// holders' QP counter sums follow the same cap.
    pub(super) fn holders(
        &self,
        device: &LabelValue,
        entries: &[(Resource, Entry)],
        counters: &BTreeMap<Holder, Sums>,
        out: &mut Output,
    ) {
        let holders = by_holder(entries);
        let (processes, jobs) = self.processes(&holders);
        let job_counters = by_job(counters, &processes);
        holder_series(device, &holders, processes, counters, self.max_holders, out);
        job_series(device, &jobs, &job_counters, self.max_holders, out);
    }

    /// The processes among `holders`, and what they hold summed by their Slurm job.
    fn processes(
        &self,
        holders: &BTreeMap<Holder, Usage>,
    ) -> (BTreeMap<u32, Process>, BTreeMap<String, Usage>) {
        let mut processes = BTreeMap::new();
        let mut jobs: BTreeMap<String, Usage> = BTreeMap::new();
        let proc = SysDir::open(&self.procfs, "").ok();
        let mut reader = AttributeReader::default();
        let mut slurm_jobs = Jobs::new(&self.sysfs);
        for (holder, usage) in holders {
            if let Holder::Process(pid) = holder {
                let (process, hidden) = process(proc.as_ref(), *pid, &mut reader, &mut slurm_jobs);
                if hidden {
                    self.notice_once(HIDDEN.to_string());
                }
                if let Some(job) = &process.slurm_job {
                    jobs.entry(job.clone()).or_default().add(usage);
                }
                processes.insert(*pid, process);
            }
        }
        (processes, jobs)
    }
}

/// The holders' QP counter sums summed again by their processes' Slurm job.
fn by_job(
    counters: &BTreeMap<Holder, Sums>,
    processes: &BTreeMap<u32, Process>,
) -> BTreeMap<String, Sums> {
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
    job_counters
}

/// The holders kept one by one, then `other` for the rest and for the counters of holders not
/// kept (or gone from the resource dumps).
fn holder_series(
    device: &LabelValue,
    holders: &BTreeMap<Holder, Usage>,
    mut processes: BTreeMap<u32, Process>,
    counters: &BTreeMap<Holder, Sums>,
    max_holders: usize,
    out: &mut Output,
) {
    let (kept, rest) = capped(holders, max_holders);
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
}

/// The jobs kept one by one, then `other` for the rest and for the counters of jobs not kept.
fn job_series(
    device: &LabelValue,
    jobs: &BTreeMap<String, Usage>,
    job_counters: &BTreeMap<String, Sums>,
    max_holders: usize,
    out: &mut Output,
) {
    let (kept, rest) = capped(jobs, max_holders);
    let mut other_job_counters = Sums::new();
    for (job, sums) in job_counters {
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

/// A QP's port, type and state, as the kernel gave them.
type QueuePairKind = (Option<u32>, Option<u8>, Option<u8>);

/// Queue pairs by port, type and state.
pub(super) fn queue_pairs(device: &LabelValue, entries: &[(Resource, Entry)], out: &mut Output) {
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

/// Logged once: what a `/proc` that hides other users' processes costs.
const HIDDEN: &str = "a process holding RDMA resources is hidden from the exporter's /proc (hidepid=, or ProtectProc=invisible): its comm is not exported, its Slurm job is taken from the job cgroups' cgroup.procs";

/// A process's `comm` and Slurm job, and whether the process was hidden from `/proc` while
/// slurmd's cgroups still list it. `comm` is empty for a process gone meanwhile or hidden
/// (`/proc` mounted `hidepid=`); the job of a hidden one comes from the cgroup tree.
fn process(
    proc: Option<&SysDir>,
    pid: u32,
    reader: &mut AttributeReader,
    slurm_jobs: &mut Jobs,
) -> (Process, bool) {
    let comm = proc
        .and_then(|proc| proc.read(&format!("{pid}/comm"), reader).ok())
        .map(str::to_string)
        .unwrap_or_default();
    let cgroup = proc.and_then(|proc| {
        proc.read_text_file(&format!("{pid}/cgroup"), MAX_CGROUP_BYTES)
            .ok()
    });
    let found = slurm_jobs.of(pid, cgroup.as_deref());
    let hidden = matches!(found, Found::Tree(Some(_)));
    let slurm_job = found.job();
    (Process { comm, slurm_job }, hidden)
}

/// `enum ib_qp_type`, spelled as `rdma resource show qp` spells it (underscores for spaces).
pub(super) fn qp_type_name(qp_type: u8) -> LabelValue {
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
pub(super) fn qp_state_name(state: u8) -> LabelValue {
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
