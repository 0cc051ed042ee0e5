//! `kernel_log`: kernel log lines that match a known event, forwarded by the printk:console
//! program through a ring buffer or, where BPF cannot be used, read from `/dev/kmsg`; the
//! matching and counting is [`crate::collectors::ebpf::kernel_log`]'s.

use super::iommu_fault::IOMMU_FAULTS;
use crate::collectors::ebpf::error::SyscallError;
use crate::collectors::ebpf::hooks::{attempt, Attempt, Hook::*, Needs};
use crate::collectors::ebpf::kernel_log::{self as log, EventKey};
use crate::collectors::ebpf::maps::{self, Attached, Maps};
use crate::collectors::ebpf::spec::{ProbeSpec, Shared};
use crate::logging::{self, Level};
use crate::metrics::{Desc, LabelValue, Labels, Samples, Value};

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
        KERNEL_LOG_PROCESS_LINES,
    ],
    started: Some(started),
    samples,
    follow: None,
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
    "Kernel log lines the kernel logged (facility LOG_KERN) that match a known event (source=\"kernel_log\"); lines processes write to /dev/kmsg are in hpcnode_kernel_log_process_lines_total.",
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

const KERNEL_LOG_PROCESS_LINES: Desc = Desc::counter(
    "hpcnode_kernel_log_process_lines",
    "Lines processes wrote to /dev/kmsg (facility not LOG_KERN) that read as a known kernel event, with the event's labels (IOMMU fault lines as event=\"iommu_fault\"); never counted as events: a test, or a process imitating the kernel.",
    None,
);

/// Starts the thread that counts lines: from the ring buffer, or from /dev/kmsg. New records
/// are counted from here on; the ones the log held before are read apart.
fn started(attached: Attached<'_>, shared: &Shared) -> Result<(), SyscallError> {
    let counts = shared.kernel_log.clone();
    match attached {
        Attached::Bpf(ebpf) => {
            let mut origins = log::Origins::open().unwrap_or_else(|err| {
                // A refusal is the missing CAP_SYSLOG the collector has already said, with
                // this cost.
                let level = match err.kind() {
                    std::io::ErrorKind::PermissionDenied => Level::Debug,
                    _ => Level::Warn,
                };
                logging::log(
                    level,
                    "cannot tell the lines processes write to /dev/kmsg from the kernel's: every matching line counts as an event",
                    &[("err", &err.to_string())],
                );
                log::Origins::unreadable()
            });
            maps::follow_ring(
                ebpf,
                "kernel_log_lines",
                "hpcnode-kernel-log",
                move |record| {
                    if let Some(text) = log::ring_record_text(record) {
                        counts.count_forwarded(&text, &mut origins);
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
        labels.extend(captured_labels(captured));
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
    for ((event, captured), count) in kernel_log.process_lines() {
        let mut labels: Labels = vec![("event", event.into())];
        labels.extend(captured_labels(captured));
        out.push(&KERNEL_LOG_PROCESS_LINES, labels, Value::Int(count));
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

fn captured_labels(
    captured: Vec<(&'static str, String)>,
) -> impl Iterator<Item = (&'static str, LabelValue)> {
    captured
        .into_iter()
        .map(|(name, value)| (name, value.into()))
}
