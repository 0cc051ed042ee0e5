//! `kernel_log`: kernel log lines that match a known event, forwarded by the printk:console
//! program through a ring buffer or, where BPF cannot be used, read from `/dev/kmsg`; the
//! matching and counting is [`crate::collectors::ebpf::kernel_log`]'s.

use super::iommu_fault::IOMMU_FAULTS;
use crate::collectors::ebpf::error::SyscallError;
use crate::collectors::ebpf::hooks::{attempt, Attempt, Hook::*, Needs};
use crate::collectors::ebpf::kernel_log::{self as log, EventKey};
use crate::collectors::ebpf::maps::{self, Attached, Maps};
use crate::collectors::ebpf::spec::{ProbeSpec, Shared};
use crate::metrics::{Desc, Labels, Samples, Value};

pub const SPEC: ProbeSpec = ProbeSpec {
    name: "kernel_log",
    object: aya::include_bytes_aligned!("../../../../../ebpf/kernel_log.bpf.o"),
    attempts: ATTEMPTS,
    required_by_strict: true,
    target_modules: &[],
    needs_modules: false,
    lost_map: "kernel_log_lost",
    metrics: &[
        KERNEL_LOG_EVENTS,
        KERNEL_LOG_EVENTS_BEFORE_START,
        KERNEL_LOG_BEFORE_START_COMPLETE,
    ],
    started: Some(started),
    samples,
};

const ATTEMPTS: &[Attempt] = &[
    attempt(
        TpBtf,
        "kernel_log_btf",
        &["console"],
        Needs::ConsoleForEveryRecord,
    ),
    attempt(
        RawTp,
        "kernel_log_raw",
        &["console"],
        Needs::ConsoleForEveryRecord,
    ),
    attempt(
        Tracepoint,
        "kernel_log_tp",
        &["printk/console"],
        Needs::ConsoleForEveryRecord,
    ),
    attempt(Kmsg, "", &[], Needs::Nothing),
];

const KERNEL_LOG_EVENTS: Desc = Desc::counter(
    "hpcnode_kernel_log_events",
    "Kernel log lines that match a known event (text any root process can write: source=\"kernel_log\").",
    None,
);
const KERNEL_LOG_EVENTS_BEFORE_START: Desc = Desc::gauge(
    "hpcnode_kernel_log_events_before_start",
    "Kernel log lines that match a known event among the records the log held when the exporter started (boot-time module refusals); constant while it runs.",
    None,
);
const KERNEL_LOG_BEFORE_START_COMPLETE: Desc = Desc::gauge(
    "hpcnode_kernel_log_before_start_complete",
    "1 if the records the kernel log held at start reached back to boot and were all read; 0 if some had been overwritten or could not be read.",
    None,
);

/// Starts the thread that counts lines: from the ring buffer, or from /dev/kmsg. New records
/// are counted from here on; the ones the log held before are read apart.
fn started(attached: Attached<'_>, shared: &Shared) -> Result<(), SyscallError> {
    let counts = shared.kernel_log.clone();
    match attached {
        Attached::Bpf(ebpf) => {
            maps::follow_ring(
                ebpf,
                "kernel_log_lines",
                "hpcnode-kernel-log",
                move |record| {
                    if let Some(text) = log::ring_record_text(record) {
                        counts.count_line(&text);
                    }
                },
            )?;
        }
        Attached::Kmsg => {
            let kmsg = log::open_kmsg().map_err(SyscallError::Kmsg)?;
            maps::spawn("hpcnode-kmsg", move || log::follow_kmsg(kmsg, counts))?;
        }
        Attached::Perf => {}
    }
    log::read_before_start(shared.kernel_log.clone());
    Ok(())
}

/// The counts the reading thread keeps; the probe's maps hold only its lost-line count.
fn samples(_: &Maps<'_>, shared: &Shared, out: &mut Samples) -> Result<(), SyscallError> {
    let event_labels = |(event, captured): EventKey| -> Labels {
        let mut labels: Labels = vec![("event", event.into()), ("source", "kernel_log".into())];
        labels.extend(
            captured
                .into_iter()
                .map(|(name, value)| (name, value.into())),
        );
        labels
    };
    let kernel_log = &shared.kernel_log;
    for (key, count) in kernel_log.snapshot() {
        out.push(&KERNEL_LOG_EVENTS, event_labels(key), Value::Int(count));
    }
    if let Some(before_start) = kernel_log.before_start() {
        for (key, count) in before_start.events.iter().cloned() {
            out.push(
                &KERNEL_LOG_EVENTS_BEFORE_START,
                event_labels(key),
                Value::Int(count),
            );
        }
        out.push(
            &KERNEL_LOG_BEFORE_START_COMPLETE,
            vec![],
            Value::Int(before_start.complete.into()),
        );
    }
    for (fault, count) in kernel_log.iommu_faults() {
        let labels: Labels = vec![
            ("device", fault.device.into()),
            ("access", fault.access.into()),
            ("reason", fault.reason.into()),
            ("source", "kernel_log".into()),
        ];
        out.push(&IOMMU_FAULTS, labels, Value::Int(count));
    }
    Ok(())
}
