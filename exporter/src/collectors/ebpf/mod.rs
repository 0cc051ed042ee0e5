//! The `ebpf` collector: kernel probes for module loads, signature verdicts, failed load
//! syscalls, kernel log lines, IOMMU faults and vfio failures, attached at startup (the vfio
//! probes also when their module loads later: [`late_attach`]) and read at every scrape.
//!
//! Invariant: nothing a probe does stops the exporter. Each probe loads and attaches on its
//! own, trying its hooks cheapest first ([`probes::attempts`]); a probe that gets none is
//! exported as `hpcnode_ebpf_probe_attached{hook="none"} 0` with one log line saying why,
//! and the others run. Only `--collector.ebpf.strict` turns a missed probe into a startup error (not
//! for the IOMMU and vfio probes, whose hooks a node may rightly lack).

pub mod kernel_log;
pub mod late_attach;
pub mod module_events;
pub mod probes;
mod sys;

use std::collections::BTreeMap;
use std::fmt;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::collector::{
    CollectError, Collector, ErrorKind, Host, Output, Registration, Settings, StartError, Started,
};
use crate::flags::{optional, switch};
use crate::kernel::release::major_minor;
use crate::logging::{self, Level};
use crate::metrics::{Desc, LabelValue, Labels, Value};
use crate::sync::lock;
use crate::sysfs::{AttributeReader, SysDir};
use kernel_log::{EventKey, KernelLogCounts};
use late_attach::{Loads, Step};
use module_events::ModuleNames;
use probes::{attach_first, HookChoice, KernelFeatures, Outcome, Probe};
use sys::Attachment;

const PROBE_ATTACHED: Desc = Desc::gauge(
    "hpcnode_ebpf_probe_attached",
    "Whether a kernel probe is attached (1, with the hook it uses) or not (0, hook=\"none\").",
    None,
);
const PROBE_FAILURE_INFO: Desc = Desc::gauge(
    "hpcnode_ebpf_probe_failure_info",
    "Why a kernel probe is not attached: every hook tried and its error.",
    None,
);
const PROBE_MODULE_ATTACHES: Desc = Desc::counter(
    "hpcnode_ebpf_probe_module_attaches",
    "Times a probe into a module's functions attached after the exporter started, because the module loaded or reloaded.",
    None,
);
const PROGRAM_RUNS: Desc = Desc::counter(
    "hpcnode_ebpf_program_runs",
    "Times the probe's BPF program ran, from the kernel's BPF run-time statistics.",
    None,
);
const PROGRAM_RUN_TIME: Desc = Desc::counter(
    "hpcnode_ebpf_program_run",
    "Time the probe's BPF program ran, from the kernel's BPF run-time statistics.",
    Some("seconds"),
);
const EVENTS_LOST: Desc = Desc::counter(
    "hpcnode_ebpf_events_lost",
    "Events the probe's kernel side could not record because its map or ring buffer was full.",
    None,
);
const MODULE_LOADS: Desc = Desc::counter(
    "hpcnode_module_loads",
    "Kernel modules loaded (module:module_load), by module; module=\"other\" past the series cap or when counted by perf without names.",
    None,
);
const MODULE_TAINTED_LOADS: Desc = Desc::counter(
    "hpcnode_module_tainted_loads",
    "Module loads that carried a taint flag (unsigned_module, oot_module, proprietary_module, forced_module), by module and flag.",
    None,
);
const SIGNATURE_CHECKS: Desc = Desc::counter(
    "hpcnode_module_signature_checks",
    "Module signature verdicts (return of module_sig_check or mod_verify_sig), by module and result; module=\"unknown\" where the probe could not name it, \"other\" past the series cap.",
    None,
);
const LOAD_FAILURES: Desc = Desc::counter(
    "hpcnode_module_load_failures",
    "Failed init_module / finit_module calls, by syscall, errno name and module; module=\"unknown\" where the probe could not name it, \"other\" past the series cap.",
    None,
);
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

const IOMMU_FAULTS: Desc = Desc::counter(
    "hpcnode_iommu_faults",
    "IOMMU faults by device, access and reason: from the kernel log (DMAR, AMD-Vi; a lower bound, the kernel ratelimits them) or the iommu:io_page_fault tracepoint (AMD-Vi, ARM SMMU).",
    None,
);
const IOMMU_FAULT_INTERRUPTS: Desc = Desc::counter(
    "hpcnode_iommu_fault_interrupts",
    "Intel VT-d fault interrupts (calls of dmar_fault), by IOMMU unit; one interrupt may report several faults.",
    None,
);
const VFIO_ENABLE_FAILURES: Desc = Desc::counter(
    "hpcnode_vfio_enable_failures",
    "Failed vfio-pci device enables (vfio_pci_core_enable), by errno name.",
    None,
);
const VFIO_AER_ERRORS: Desc = Desc::counter(
    "hpcnode_vfio_aer_errors",
    "AER errors reported on devices assigned through vfio-pci, by device and PCI channel state.",
    None,
);
const VFIO_PIN_FAILURES: Desc = Desc::counter(
    "hpcnode_vfio_pin_failures",
    "Failed vfio page pinnings (vfio_pin_pages_remote), by errno name; ENOMEM is the memlock limit.",
    None,
);

pub const METRICS: [Desc; 18] = [
    PROBE_ATTACHED,
    PROBE_FAILURE_INFO,
    PROBE_MODULE_ATTACHES,
    PROGRAM_RUNS,
    PROGRAM_RUN_TIME,
    EVENTS_LOST,
    MODULE_LOADS,
    MODULE_TAINTED_LOADS,
    SIGNATURE_CHECKS,
    LOAD_FAILURES,
    KERNEL_LOG_EVENTS,
    KERNEL_LOG_EVENTS_BEFORE_START,
    KERNEL_LOG_BEFORE_START_COMPLETE,
    IOMMU_FAULTS,
    IOMMU_FAULT_INTERRUPTS,
    VFIO_ENABLE_FAILURES,
    VFIO_AER_ERRORS,
    VFIO_PIN_FAILURES,
];

pub const REGISTRATION: Registration = Registration {
    name: "ebpf",
    enabled_by_default: true,
    help: "Kernel probes (eBPF, perf, /dev/kmsg): module loads and taints, signature verdicts, failed load syscalls, kernel log events",
    metrics: &METRICS,
    flags: || {
        vec![
            switch(STRICT, "Exit with an error at startup if any module or kernel-log eBPF probe attaches to no hook (for CI); the IOMMU and vfio probes are not required."),
            optional(HOOKS, "PROBE:HOOK,...", "Restrict the named probes to the named hooks (e.g. module_sig_check:kretprobe,kernel_log:kmsg; PROBE:none leaves a probe out); the other probes try all of theirs, cheapest first."),
            optional(BTF_PATH, "FILE", "Kernel BTF to use instead of /sys/kernel/btf/vmlinux (e.g. a BTFHub file for a kernel built without BTF); tp_btf, fentry and fexit still need the kernel's own BTF."),
        ]
    },
    configure: |flags| {
        let hooks = flags.value(HOOKS).unwrap_or_default();
        Ok(Box::new(EbpfSettings {
            strict: flags.is_set(STRICT),
            hooks: HookChoice::parse(&hooks)
                .map_err(|err| flags.invalid(HOOKS, &hooks, err.to_string()))?,
            btf_path: flags.path(BTF_PATH)?,
        }))
    },
    probe: None,
};

const STRICT: &str = "collector.ebpf.strict";
const HOOKS: &str = "collector.ebpf.hooks";
const BTF_PATH: &str = "collector.ebpf.btf-path";

#[derive(Debug)]
struct EbpfSettings {
    /// A probe that attaches to no hook is a startup error.
    strict: bool,
    hooks: HookChoice,
    /// BTF read from this file instead of the kernel's.
    btf_path: Option<std::path::PathBuf>,
}

impl Settings for EbpfSettings {
    /// Attaches every probe, before serving, so `--collector.ebpf.strict` fails the start and not a
    /// later scrape.
    fn start(self: Box<Self>, host: &Host) -> Result<Started, StartError> {
        let probes = Probes::attach(
            &host.procfs,
            &host.sysfs,
            &self.hooks,
            self.btf_path.as_deref(),
        );
        if self.strict {
            probes.require_all_attached().map_err(|err| StartError {
                collector: REGISTRATION.name,
                reason: err.to_string(),
            })?;
        }
        let probes = Arc::new(probes);
        if probes.module_support {
            let watcher = probes.clone();
            let watched = late_attach::watch_module_uevents(move |module| {
                watcher.modules_changed(module);
            });
            if let Err(err) = watched {
                logging::log(
                    Level::Warn,
                    "module uevents unavailable; probes into modules attach at the first scrape after their module loads",
                    &[("err", &err.to_string())],
                );
            }
        }
        Ok(Started::new(EbpfCollector { probes }))
    }

    fn calls_bpf_after_start(&self) -> bool {
        true
    }
}

#[derive(Debug, thiserror::Error)]
#[error("--collector.ebpf.strict: probes not attached: {0}")]
pub struct StrictError(String);

struct ProbeState {
    probe: Probe,
    live: Mutex<LiveProbe>,
}

/// A probe's attachment, which changes after start for probes into modules.
struct LiveProbe {
    outcome: Outcome<Attachment>,
    /// Why an attached probe's program is detached now (its module unloaded, or attaching it
    /// again after a reload failed); its maps, and so its counts, are still read.
    detached: Option<String>,
    /// Probes into modules: the loads of their modules last acted on.
    loads: Loads,
    /// Probes into modules: attaches after start, on their module's load or reload.
    module_attaches: u64,
}

impl LiveProbe {
    fn attached(&self) -> bool {
        matches!(self.outcome, Outcome::Attached { .. }) && self.detached.is_none()
    }
}

/// The reason a probe into modules gives while none of its modules is loaded.
fn waiting_for_module(probe: Probe) -> String {
    format!(
        "waiting for module {} to load",
        probe.target_modules().join(" or ")
    )
}

/// One log line per attach or failure; `trigger` says what started it.
fn log_outcome(probe: Probe, outcome: &Outcome<Attachment>, trigger: &str) {
    match outcome {
        Outcome::Attached { hook, attachment } => {
            logging::log(
                Level::Info,
                "eBPF probe attached",
                &[
                    ("probe", probe.name()),
                    ("hook", hook.name()),
                    ("on", trigger),
                ],
            );
            if let Attachment::Bpf {
                unnamed: Some(reason),
                ..
            } = attachment
            {
                logging::log(
                    Level::Warn,
                    "eBPF probe counts without module names (module=\"unknown\")",
                    &[("probe", probe.name()), ("reason", reason)],
                );
            }
        }
        Outcome::Missed { reason } => logging::log(
            Level::Warn,
            "eBPF probe not attached",
            &[("probe", probe.name()), ("reason", reason), ("on", trigger)],
        ),
    }
}

/// The choice of hook for a probe into modules, which keeps the first program that loaded but
/// could not attach (its module is not loaded, yet): [`sys::reattach`] attaches it later.
struct KeepLoaded<'k, 'b> {
    kernel: &'k sys::AyaKernel<'b>,
    loaded: Option<(probes::Hook, Attachment)>,
}

impl probes::Kernel for KeepLoaded<'_, '_> {
    type Attachment = Attachment;
    fn attach(&mut self, probe: Probe, attempt: &probes::Attempt) -> Result<Attachment, String> {
        let attachment = self.kernel.load_unattached(probe, attempt)?;
        match sys::attach_loaded(&attachment, attempt) {
            Ok(()) => Ok(attachment),
            Err(reason) => {
                self.loaded.get_or_insert((attempt.hook, attachment));
                Err(reason)
            }
        }
    }
}

pub struct Probes {
    probes: Vec<ProbeState>,
    /// The kernel has loadable modules: module uevents are worth watching.
    module_support: bool,
    sysfs: PathBuf,
    kernel_log: Arc<KernelLogCounts>,
    /// Whether run counts and times are being recorded (BPF_ENABLE_STATS held by
    /// `_stats`, or kernel.bpf_stats_enabled set by the operator).
    run_stats: bool,
    _stats: Option<OwnedFd>,
    module_names: Mutex<ModuleNames>,
}

impl Probes {
    fn attach(procfs: &Path, sysfs: &Path, choice: &HookChoice, btf_path: Option<&Path>) -> Probes {
        let proc = SysDir::open(procfs, "").ok();
        let mut reader = AttributeReader::default();
        let mut proc_value = |name: &str| {
            proc.as_ref()
                .and_then(|dir| dir.read(name, &mut reader).ok().map(str::to_string))
        };
        let release = proc_value("sys/kernel/osrelease");
        let loader = sys::bare_loader();
        let btf = match btf_path {
            Some(path) => sys::btf_file(path),
            None => sys::kernel_btf(),
        };
        let features = KernelFeatures {
            btf: btf.as_ref().map(drop).map_err(Clone::clone),
            x86_64: cfg!(target_arch = "x86_64"),
            release: release.as_deref().and_then(major_minor),
            modules: procfs.join("modules").exists(),
        };
        match sys::ensure_tracefs() {
            Ok(Some(mounted)) => logging::log(Level::Info, "mounted", &[("what", mounted)]),
            Ok(None) => {}
            Err(err) => logging::log(
                Level::Warn,
                "tracefs unavailable; classic tracepoint hooks will fail",
                &[("err", &err)],
            ),
        }
        let (run_stats, stats) = match sys::enable_run_time_stats() {
            Ok(fd) => (true, Some(fd)),
            Err(err) => {
                let sysctl = proc_value("sys/kernel/bpf_stats_enabled").as_deref() == Some("1");
                if !sysctl {
                    logging::log(
                        Level::Warn,
                        "BPF run-time statistics off: BPF_ENABLE_STATS failed and kernel.bpf_stats_enabled is 0; no program run metrics",
                        &[("err", &err)],
                    );
                }
                (sysctl, None)
            }
        };
        let kernel_log = KernelLogCounts::new();
        let mut kernel = sys::AyaKernel::new(loader, btf.as_ref().ok(), kernel_log.clone());
        let probes = Probe::ALL
            .into_iter()
            .map(|probe| {
                let loads = Loads::read(sysfs, probe.target_modules());
                let (outcome, detached) = if probe.target_modules().is_empty() {
                    (attach_first(&mut kernel, &features, choice, probe), None)
                } else {
                    let mut keep = KeepLoaded {
                        kernel: &kernel,
                        loaded: None,
                    };
                    let outcome = attach_first(&mut keep, &features, choice, probe);
                    match (outcome, keep.loaded) {
                        // Its module is not loaded (its functions are not built in either: the
                        // attach failed): the program stays loaded, while the kernel's BTF is
                        // at hand, and is attached when the module loads.
                        (Outcome::Missed { .. }, Some((hook, attachment)))
                            if features.modules && !loads.any() =>
                        {
                            let waiting = Some(waiting_for_module(probe));
                            (Outcome::Attached { hook, attachment }, waiting)
                        }
                        (outcome, _) => (outcome, None),
                    }
                };
                match (&outcome, &detached) {
                    (Outcome::Attached { .. }, Some(reason)) => logging::log(
                        Level::Info,
                        "eBPF probe loaded, not attached",
                        &[("probe", probe.name()), ("reason", reason)],
                    ),
                    _ => log_outcome(probe, &outcome, "start"),
                }
                let live = LiveProbe {
                    outcome,
                    detached,
                    loads,
                    module_attaches: 0,
                };
                ProbeState {
                    probe,
                    live: Mutex::new(live),
                }
            })
            .collect();
        // The BTF too (the kernel only borrowed it), before its heap is given back.
        drop(kernel);
        drop(btf);
        sys::release_startup_memory();
        Probes {
            probes,
            module_support: features.modules,
            sysfs: sysfs.to_path_buf(),
            kernel_log,
            run_stats,
            _stats: stats,
            module_names: Mutex::default(),
        }
    }

    /// For `--collector.ebpf.strict`: an error naming every required probe that is not attached, and why.
    pub fn require_all_attached(&self) -> Result<(), StrictError> {
        let missed: Vec<String> = self
            .probes
            .iter()
            .filter(|state| state.probe.required_by_strict())
            .filter_map(|state| match &lock(&state.live).outcome {
                Outcome::Missed { reason } => Some(format!("{} ({reason})", state.probe.name())),
                Outcome::Attached { .. } => None,
            })
            .collect();
        if missed.is_empty() {
            Ok(())
        } else {
            Err(StrictError(missed.join("; ")))
        }
    }

    /// Called on a module uevent (`None`: uevents were lost) with the probes into that module.
    fn modules_changed(&self, module: Option<&str>) {
        for state in &self.probes {
            if module.is_none_or(|module| state.probe.target_modules().contains(&module)) {
                self.follow_modules(state, "module uevent");
            }
        }
    }

    /// Attaches a probe into modules when one of its modules loaded or reloaded since the last
    /// call, and detaches it when they are all gone; nothing for other probes.
    fn follow_modules(&self, state: &ProbeState, trigger: &str) {
        let probe = state.probe;
        if probe.target_modules().is_empty() {
            return;
        }
        let now = Loads::read(&self.sysfs, probe.target_modules());
        let mut live = lock(&state.live);
        match late_attach::step(&live.loads, &now, live.attached()) {
            Step::Stay => {}
            Step::Detach => {
                if let Outcome::Attached { attachment, .. } = &live.outcome {
                    if let Err(err) = sys::detach(attachment) {
                        logging::log(
                            Level::Warn,
                            "eBPF probe detach failed",
                            &[("probe", probe.name()), ("err", &err)],
                        );
                    }
                }
                let reason = waiting_for_module(probe);
                logging::log(
                    Level::Info,
                    "eBPF probe detached",
                    &[
                        ("probe", probe.name()),
                        ("reason", &reason),
                        ("on", trigger),
                    ],
                );
                live.detached = Some(reason);
            }
            Step::Attach => {
                // A probe whose program never loaded keeps its reason.
                if let Outcome::Attached { hook, attachment } = &live.outcome {
                    match sys::reattach(probe, *hook, attachment) {
                        Ok(()) => {
                            live.detached = None;
                            live.module_attaches += 1;
                            log_outcome(probe, &live.outcome, trigger);
                        }
                        Err(reason) => {
                            logging::log(
                                Level::Warn,
                                "eBPF probe not attached to its reloaded module",
                                &[
                                    ("probe", probe.name()),
                                    ("reason", &reason),
                                    ("on", trigger),
                                ],
                            );
                            live.detached = Some(reason);
                        }
                    }
                }
            }
        }
        live.loads = now;
    }

    fn collect(&self, state: &ProbeState, out: &mut Output) {
        self.follow_modules(state, "scrape");
        let live = lock(&state.live);
        let probe_label = || -> Labels { vec![("probe", state.probe.name().into())] };
        if !state.probe.target_modules().is_empty() {
            out.samples.push(
                &PROBE_MODULE_ATTACHES,
                probe_label(),
                Value::Int(live.module_attaches),
            );
        }
        let not_attached = |out: &mut Output, reason: &str| {
            let mut labels = probe_label();
            labels.push(("hook", "none".into()));
            out.samples.push(&PROBE_ATTACHED, labels, Value::Int(0));
            let mut labels = probe_label();
            labels.push(("reason", LabelValue::composed(reason.to_string())));
            out.samples.push(&PROBE_FAILURE_INFO, labels, Value::Int(1));
        };
        let attachment = match (&live.outcome, &live.detached) {
            (Outcome::Missed { reason }, _) => return not_attached(out, reason),
            (Outcome::Attached { attachment, .. }, Some(reason)) => {
                not_attached(out, reason);
                attachment
            }
            (Outcome::Attached { hook, attachment }, None) => {
                let mut labels = probe_label();
                labels.push(("hook", hook.name().into()));
                out.samples.push(&PROBE_ATTACHED, labels, Value::Int(1));
                attachment
            }
        };
        // A detached program is unloaded: no run statistics, but its maps keep the counts.
        if self.run_stats && live.detached.is_none() {
            match sys::run_stats(attachment) {
                Some(Ok((runs, time))) => {
                    out.samples
                        .push(&PROGRAM_RUNS, probe_label(), Value::Int(runs));
                    out.samples.push(
                        &PROGRAM_RUN_TIME,
                        probe_label(),
                        Value::Float(time.as_secs_f64()),
                    );
                }
                Some(Err(err)) => out.errors.push(self.error(state.probe, err)),
                None => {}
            }
        }
        let counts = match sys::read_counts(state.probe, attachment) {
            Ok(counts) => counts,
            Err(err) => return out.errors.push(self.error(state.probe, err)),
        };
        if matches!(attachment, Attachment::Bpf { .. }) {
            out.samples
                .push(&EVENTS_LOST, probe_label(), Value::Int(counts.dropped));
        }
        match state.probe {
            Probe::ModuleLoad => self.push_module_loads(counts, out),
            Probe::ModuleSigCheck => self.push_signature_checks(&counts, out),
            Probe::ModuleLoadSyscall => self.push_load_failures(&counts, out),
            Probe::KernelLog => self.push_kernel_log(out),
            Probe::IommuFault => push_tracepoint_iommu_faults(&counts, out),
            Probe::DmarFault => push_fault_interrupts(&counts, out),
            Probe::VfioEnable => push_errnos(&VFIO_ENABLE_FAILURES, &counts, out),
            Probe::VfioPin => push_errnos(&VFIO_PIN_FAILURES, &counts, out),
            Probe::VfioAer => push_vfio_aer_errors(&counts, out),
        }
    }

    fn error(&self, probe: Probe, err: String) -> CollectError {
        CollectError::new(ErrorKind::Io, format!("{}: {err}", probe.name()))
    }

    fn push_module_loads(&self, counts: sys::ProbeCounts, out: &mut Output) {
        let mut names = lock(&self.module_names);
        let unnamed = counts.dropped + counts.unnamed_module_loads;
        let loads = module_events::module_load_counts(counts.module_loads, unnamed, &mut names);
        for (module, count) in loads.loads {
            out.samples.push(
                &MODULE_LOADS,
                vec![("module", module.into())],
                Value::Int(count),
            );
        }
        for ((module, taint), count) in loads.tainted {
            out.samples.push(
                &MODULE_TAINTED_LOADS,
                vec![("module", module.into()), ("taint", taint.into())],
                Value::Int(count),
            );
        }
    }

    fn push_signature_checks(&self, counts: &sys::ProbeCounts, out: &mut Output) {
        let mut names = lock(&self.module_names);
        let checks = module_events::signature_counts(&counts.signature_returns, &mut names);
        for ((module, result), count) in checks {
            out.samples.push(
                &SIGNATURE_CHECKS,
                vec![("module", module.into()), ("result", result.into())],
                Value::Int(count),
            );
        }
    }

    fn push_load_failures(&self, counts: &sys::ProbeCounts, out: &mut Output) {
        let mut names = lock(&self.module_names);
        let raw_names = counts.load_failures.keys().map(|(_, _, raw)| raw.as_str());
        let labels = module_events::module_labels(raw_names, &mut names);
        let mut failures: BTreeMap<(String, String, String), u64> = BTreeMap::new();
        for ((syscall_nr, errno, raw), count) in &counts.load_failures {
            let key = (
                syscall_name(*syscall_nr),
                module_events::errno_name(*errno),
                labels[raw.as_str()].clone(),
            );
            *failures.entry(key).or_default() += count;
        }
        for ((syscall, errno, module), count) in failures {
            out.samples.push(
                &LOAD_FAILURES,
                vec![
                    ("syscall", syscall.into()),
                    ("errno", errno.into()),
                    ("module", module.into()),
                ],
                Value::Int(count),
            );
        }
    }

    fn push_kernel_log(&self, out: &mut Output) {
        let event_labels = |(event, captured): EventKey| -> Labels {
            let mut labels: Labels = vec![("event", event.into()), ("source", "kernel_log".into())];
            labels.extend(
                captured
                    .into_iter()
                    .map(|(name, value)| (name, value.into())),
            );
            labels
        };
        for (key, count) in self.kernel_log.snapshot() {
            out.samples
                .push(&KERNEL_LOG_EVENTS, event_labels(key), Value::Int(count));
        }
        if let Some(before_start) = self.kernel_log.before_start() {
            for (key, count) in before_start.events.iter().cloned() {
                out.samples.push(
                    &KERNEL_LOG_EVENTS_BEFORE_START,
                    event_labels(key),
                    Value::Int(count),
                );
            }
            out.samples.push(
                &KERNEL_LOG_BEFORE_START_COMPLETE,
                vec![],
                Value::Int(before_start.complete.into()),
            );
        }
        for (fault, count) in self.kernel_log.iommu_faults() {
            let labels: Labels = vec![
                ("device", fault.device.into()),
                ("access", fault.access.into()),
                ("reason", fault.reason.into()),
                ("source", "kernel_log".into()),
            ];
            out.samples.push(&IOMMU_FAULTS, labels, Value::Int(count));
        }
    }
}

/// The label of an event whose device the kernel did not give (a NULL `struct device`).
const NO_DEVICE: &str = "unknown";
/// The label of events the kernel side could not record by device (its map was full).
const OTHER_DEVICE: &str = "other";

fn device_label(name: &str) -> String {
    if name.is_empty() {
        NO_DEVICE.into()
    } else {
        name.into()
    }
}

/// `iommu:io_page_fault` counts, in the series the kernel-log matcher also writes.
fn push_tracepoint_iommu_faults(counts: &sys::ProbeCounts, out: &mut Output) {
    let labels = |device: String, access: &str| -> Labels {
        vec![
            ("device", device.into()),
            ("access", access.to_string().into()),
            ("reason", "io_page_fault".into()),
            ("source", "tracepoint".into()),
        ]
    };
    for (device, write, count) in &counts.device_events {
        let access = if *write != 0 { "write" } else { "read" };
        out.samples.push(
            &IOMMU_FAULTS,
            labels(device_label(device), access),
            Value::Int(*count),
        );
    }
    if counts.dropped > 0 {
        out.samples.push(
            &IOMMU_FAULTS,
            labels(OTHER_DEVICE.into(), "other"),
            Value::Int(counts.dropped),
        );
    }
}

fn push_fault_interrupts(counts: &sys::ProbeCounts, out: &mut Output) {
    for (seq_id, count) in &counts.fault_interrupts {
        let iommu = if *seq_id >= 0 {
            format!("dmar{seq_id}")
        } else {
            NO_DEVICE.into()
        };
        out.samples.push(
            &IOMMU_FAULT_INTERRUPTS,
            vec![("iommu", iommu.into())],
            Value::Int(*count),
        );
    }
}

fn push_errnos(desc: &'static Desc, counts: &sys::ProbeCounts, out: &mut Output) {
    for (errno, count) in &counts.failure_errnos {
        out.samples.push(
            desc,
            vec![("errno", module_events::errno_name(*errno).into())],
            Value::Int(*count),
        );
    }
}

/// `pci_channel_state_t`: io_normal 1, io_frozen 2, io_perm_failure 3.
fn channel_state(state: u32) -> String {
    match state {
        1 => "normal".into(),
        2 => "frozen".into(),
        3 => "perm_failure".into(),
        other => format!("state_{other}"),
    }
}

fn push_vfio_aer_errors(counts: &sys::ProbeCounts, out: &mut Output) {
    for (device, state, count) in &counts.device_events {
        out.samples.push(
            &VFIO_AER_ERRORS,
            vec![
                ("device", device_label(device).into()),
                ("state", channel_state(*state).into()),
            ],
            Value::Int(*count),
        );
    }
}

/// The module syscalls by this architecture's numbers (what the kernel side records).
fn syscall_name(nr: u32) -> String {
    match i64::from(nr) {
        nr if nr == libc::SYS_init_module => "init_module".into(),
        nr if nr == libc::SYS_finit_module => "finit_module".into(),
        nr => format!("syscall_{nr}"),
    }
}

/// `6.1.0-27-amd64` -> (6, 1).
struct EbpfCollector {
    probes: Arc<Probes>,
}

impl fmt::Display for Probe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One unit per probe. The probes stay attached until the process exits: closing its file
/// descriptors detaches them, so stopping needs nothing more.
impl Collector for EbpfCollector {
    type Unit = Probe;

    fn units(&self) -> Result<Vec<Probe>, CollectError> {
        Ok(self.probes.probes.iter().map(|s| s.probe).collect())
    }

    fn collect_unit(&self, unit: &Probe, out: &mut Output) {
        if let Some(state) = self.probes.probes.iter().find(|s| s.probe == *unit) {
            self.probes.collect(state, out);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Whether a test that needs root (BPF, /dev/kmsg) can run; where it cannot it says so, and
    /// in CI (which runs as root) that is a failure.
    pub(crate) fn running_as_root(test: &str) -> bool {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            return true;
        }
        assert!(
            std::env::var_os("CI").is_none(),
            "{test} must run as root in CI"
        );
        eprintln!("SKIPPED {test}: needs root");
        false
    }

    /// Writes one kernel log line, opening /dev/kmsg per line (its ratelimit is per open file).
    pub(crate) fn write_kmsg(line: &str) {
        use std::io::Write;
        let mut kmsg = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/kmsg")
            .unwrap();
        kmsg.write_all(format!("{line}\n").as_bytes()).unwrap();
    }

    /// The exposition lines of what the push functions wrote.
    fn exposition(out: Output) -> Vec<String> {
        let text = crate::metrics::encode(out.samples, crate::metrics::Format::PrometheusText);
        let text = text.unwrap();
        text.lines()
            .filter(|line| !line.starts_with('#'))
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn iommu_and_vfio_counts_become_labelled_series() {
        let counts = sys::ProbeCounts {
            device_events: vec![
                ("0000:41:00.0".into(), 1, 3),
                ("0000:41:00.0".into(), 0, 1),
                (String::new(), 0, 2), // NULL device (SMMUv2)
            ],
            dropped: 4,
            ..Default::default()
        };
        let mut out = Output::default();
        push_tracepoint_iommu_faults(&counts, &mut out);
        let tracepoint = |device: &str, access: &str, count: u64| {
            format!("hpcnode_iommu_faults_total{{device=\"{device}\",access=\"{access}\",reason=\"io_page_fault\",source=\"tracepoint\"}} {count}")
        };
        assert_eq!(
            exposition(out),
            [
                tracepoint("0000:41:00.0", "write", 3),
                tracepoint("0000:41:00.0", "read", 1),
                tracepoint("unknown", "read", 2),
                tracepoint("other", "other", 4),
            ]
        );

        let mut out = Output::default();
        push_vfio_aer_errors(&counts, &mut out);
        assert_eq!(
            exposition(out)[..2],
            [
                "hpcnode_vfio_aer_errors_total{device=\"0000:41:00.0\",state=\"normal\"} 3",
                "hpcnode_vfio_aer_errors_total{device=\"0000:41:00.0\",state=\"state_0\"} 1",
            ]
        );

        let counts = sys::ProbeCounts {
            fault_interrupts: BTreeMap::from([(0, 2), (-1, 1)]),
            failure_errnos: BTreeMap::from([(12, 5)]),
            ..Default::default()
        };
        let mut out = Output::default();
        push_fault_interrupts(&counts, &mut out);
        push_errnos(&VFIO_PIN_FAILURES, &counts, &mut out);
        assert_eq!(
            exposition(out),
            [
                "hpcnode_iommu_fault_interrupts_total{iommu=\"unknown\"} 1",
                "hpcnode_iommu_fault_interrupts_total{iommu=\"dmar0\"} 2",
                "hpcnode_vfio_pin_failures_total{errno=\"ENOMEM\"} 5",
            ]
        );
        assert_eq!(channel_state(2), "frozen");
        assert_eq!(channel_state(3), "perm_failure");
    }

    #[test]
    fn syscall_names_follow_this_architecture() {
        assert_eq!(syscall_name(libc::SYS_finit_module as u32), "finit_module");
        assert_eq!(syscall_name(libc::SYS_init_module as u32), "init_module");
        assert_eq!(syscall_name(9999), "syscall_9999");
    }
}
