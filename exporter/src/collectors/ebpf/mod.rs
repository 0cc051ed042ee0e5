//! The `ebpf` collector: kernel probes for module loads, signature verdicts, failed load
//! syscalls, kernel log lines, IOMMU faults, vfio failures and RDMA port events, attached at
//! startup (the vfio and RDMA probes also when their module loads later: [`late_attach`]) and
//! read at every scrape.
//!
//! Invariant: nothing a probe does stops the exporter. Each probe loads and attaches on its
//! own, trying its hooks cheapest first ([`spec::ProbeSpec`]); a probe that gets none is
//! exported as `hpcnode_ebpf_probe_attached{hook="none"} 0` with one log line saying why,
//! and the others run. Only `--collector.ebpf.strict` turns a missed probe into a startup error (not
//! for the IOMMU, vfio and RDMA probes, whose hooks a node may rightly lack).

mod error;
pub mod hook_choice;
pub mod hooks;
pub mod kernel_log;
pub mod late_attach;
mod maps;
pub mod module_events;
pub mod probes;
pub mod spec;
mod syscalls;

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::collector::{
    CollectError, Collector, ErrorKind, Host, Output, Registration, Root, Settings, StartError,
    Started,
};
use crate::flags::{optional, switch};
use crate::kernel_version::major_minor;
use crate::logging::{self, Level};
use crate::metrics::{Desc, LabelValue, Labels, Samples, Value};
use crate::privileges;
use crate::sync::lock;
use crate::sysfs::{AttributeReader, SysDir};
use error::SyscallError;
use hook_choice::{attach_first, HookChoice, Outcome};
use hooks::{Attempt, KernelFeatures};
use late_attach::{Loads, Step};
use spec::{ProbeSpec, Shared};
use syscalls::Attachment;

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
/// What every probe yields about itself, whatever it counts.
const PROBE_METRICS: [Desc; 6] = [
    PROBE_ATTACHED,
    PROBE_FAILURE_INFO,
    PROBE_MODULE_ATTACHES,
    PROGRAM_RUNS,
    PROGRAM_RUN_TIME,
    EVENTS_LOST,
];

/// The probes' own metrics, then each probe's, in registry order.
pub const METRICS: [Desc; PROBE_METRICS.len() + spec::metric_count(probes::ALL)] =
    spec::metrics(&PROBE_METRICS, probes::ALL);

pub const REGISTRATION: Registration = Registration {
    name: "ebpf",
    enabled_by_default: true,
    help: "Kernel probes (eBPF, perf, /dev/kmsg): module loads and taints, signature verdicts, failed load syscalls, kernel log events",
    metrics: &METRICS,
    roots: &[Root::Sysfs, Root::Procfs],
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
            hooks: HookChoice::parse(&hooks, probes::ALL)
                .map_err(|err| flags.invalid(HOOKS, &hooks, err.to_string()))?,
            btf_path: flags.path(BTF_PATH)?,
        }))
    },
    probe: None,
};

/// What the collector loses without the capabilities `bpf()` tracing programs take.
const BPF_COSTS: &str = "no probe attaches through bpf(): module loads, module signature checks, IOMMU and DMAR faults and vfio events are not counted";
/// What it loses when `/dev/kmsg` is refused.
const KMSG_COSTS: &str = "the kernel log from before start is not read, lines processes write to /dev/kmsg count as the kernel's, and without a BPF hook no kernel log line is counted";

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
        let probes = Probes::attach(host, &self.hooks, self.btf_path.as_deref());
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
    probe: &'static ProbeSpec,
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
fn waiting_for_module(probe: &ProbeSpec) -> String {
    format!(
        "waiting for module {} to load",
        probe.target_modules.join(" or ")
    )
}

/// One log line per attach or failure, a failure at `missed`; `trigger` says what started it.
fn log_outcome(probe: &ProbeSpec, outcome: &Outcome<Attachment>, trigger: &str, missed: Level) {
    match outcome {
        Outcome::Attached { hook, attachment } => {
            logging::log(
                Level::Info,
                "eBPF probe attached",
                &[
                    ("probe", probe.name),
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
                    &[("probe", probe.name), ("reason", reason)],
                );
            }
        }
        Outcome::Missed { reason } => logging::log(
            missed,
            "eBPF probe not attached",
            &[("probe", probe.name), ("reason", reason), ("on", trigger)],
        ),
    }
}

/// Tells a probe's follower ([`ProbeSpec::follow`]) whether its programs are attached now.
fn announce(probe: &ProbeSpec, live: &LiveProbe, shared: &Shared) {
    let Some(follow) = probe.follow else {
        return;
    };
    let told = match &live.outcome {
        Outcome::Attached { attachment, .. } if live.attached() => {
            syscalls::with_maps(attachment, probe.lost_map, |maps| {
                follow(Some(maps), shared)
            })
        }
        _ => follow(None, shared),
    };
    if let Err(err) = told {
        logging::log(
            Level::Warn,
            "eBPF probe attached, but what reads its maps cannot",
            &[("probe", probe.name), ("err", &err.to_string())],
        );
    }
}

/// The kernel as the loader uses it: attach an attempt, or load it to attach later.
trait Loader: hook_choice::Kernel<Attachment = Attachment, Error = SyscallError> {
    fn load_unattached(
        &self,
        probe: &ProbeSpec,
        attempt: &Attempt,
    ) -> Result<Attachment, SyscallError>;
}

impl Loader for syscalls::AyaKernel<'_> {
    fn load_unattached(
        &self,
        probe: &ProbeSpec,
        attempt: &Attempt,
    ) -> Result<Attachment, SyscallError> {
        syscalls::AyaKernel::load_unattached(self, probe, attempt)
    }
}

/// The choice of hook for a probe into modules, which keeps the first program that loaded but
/// could not attach (its module is not loaded, yet): [`syscalls::reattach`] attaches it later.
/// Such a probe has no [`ProbeSpec::started`]: nothing in user space follows its maps.
struct KeepLoaded<'k, K> {
    kernel: &'k K,
    loaded: Option<(hooks::Hook, Attachment)>,
}

impl<K: Loader> hook_choice::Kernel for KeepLoaded<'_, K> {
    type Attachment = Attachment;
    type Error = SyscallError;
    fn attach(
        &mut self,
        probe: &'static ProbeSpec,
        attempt: &Attempt,
    ) -> Result<Attachment, SyscallError> {
        let attachment = self.kernel.load_unattached(probe, attempt)?;
        match syscalls::attach_loaded(&attachment, attempt) {
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
    shared: Shared,
    /// Whether run counts and times are being recorded (BPF_ENABLE_STATS held by
    /// `_stats`, or kernel.bpf_stats_enabled set by the operator).
    run_stats: bool,
    _stats: Option<OwnedFd>,
}

impl Probes {
    fn attach(host: &Host, choice: &HookChoice, btf_path: Option<&Path>) -> Probes {
        let (procfs, sysfs) = (host.procfs.as_path(), host.sysfs.as_path());
        let proc = SysDir::open(procfs, "").ok();
        let mut reader = AttributeReader::default();
        let mut proc_value = |name: &str| {
            proc.as_ref()
                .and_then(|dir| dir.read(name, &mut reader).ok().map(str::to_string))
        };
        let release = proc_value("sys/kernel/osrelease");
        // A missing privilege is said once, with its remedy; the failures it causes (every
        // probe's, tracefs, statistics) are then only detail.
        let bpf_missing = privileges::bpf_tracing_missing(procfs);
        if let Some((missing, remedy)) = bpf_missing {
            privileges::report_missing(REGISTRATION.name, missing, remedy, BPF_COSTS);
        }
        if let Some((missing, remedy)) = privileges::kmsg_missing(procfs) {
            privileges::report_missing(REGISTRATION.name, missing, remedy, KMSG_COSTS);
        }
        let detail = if bpf_missing.is_some() {
            Level::Debug
        } else {
            Level::Warn
        };
        let loader = syscalls::bare_loader();
        let btf = match btf_path {
            Some(path) => syscalls::btf_file(path),
            None => syscalls::kernel_btf(),
        };
        let features = KernelFeatures {
            btf: btf.as_ref().map(drop).map_err(ToString::to_string),
            x86_64: cfg!(target_arch = "x86_64"),
            release: release.as_deref().and_then(major_minor),
            modules: procfs.join("modules").exists(),
        };
        match syscalls::ensure_tracefs() {
            Ok(Some(mounted)) => logging::log(Level::Info, "mounted", &[("what", mounted)]),
            Ok(None) => {}
            Err(err) => logging::log(
                detail,
                "tracefs unavailable; classic tracepoint hooks will fail",
                &[("err", &err.to_string())],
            ),
        }
        let (run_stats, stats) = match syscalls::enable_run_time_stats() {
            Ok(fd) => (true, Some(fd)),
            Err(err) => {
                let sysctl = proc_value("sys/kernel/bpf_stats_enabled").as_deref() == Some("1");
                if !sysctl {
                    logging::log(
                        detail,
                        "BPF run-time statistics off: BPF_ENABLE_STATS failed and kernel.bpf_stats_enabled is 0; no program run metrics",
                        &[("err", &err.to_string())],
                    );
                }
                (sysctl, None)
            }
        };
        let shared = Shared::new(sysfs, host.vfio_holder_events.clone());
        let mut kernel = syscalls::AyaKernel::new(loader, btf.as_ref().ok(), &shared);
        let probes = start(probes::ALL, &mut kernel, &features, choice, sysfs, detail);
        for state in &probes {
            announce(state.probe, &lock(&state.live), &shared);
        }
        // The BTF too (the kernel only borrowed it), before its heap is given back.
        drop(kernel);
        drop(btf);
        syscalls::release_startup_memory();
        Probes {
            probes,
            module_support: features.modules,
            sysfs: sysfs.to_path_buf(),
            shared,
            run_stats,
            _stats: stats,
        }
    }
}
/// Loads and attaches every probe of `registry`, each on its own.
fn start<K: Loader>(
    registry: &[&'static ProbeSpec],
    kernel: &mut K,
    features: &KernelFeatures,
    choice: &HookChoice,
    sysfs: &Path,
    missed: Level,
) -> Vec<ProbeState> {
    registry
        .iter()
        .map(|&probe| {
            let loads = Loads::read(sysfs, probe.target_modules);
            let (outcome, detached) = if probe.target_modules.is_empty() {
                (attach_first(kernel, features, choice, probe), None)
            } else {
                let mut keep = KeepLoaded {
                    kernel: &*kernel,
                    loaded: None,
                };
                let outcome = attach_first(&mut keep, features, choice, probe);
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
                    &[("probe", probe.name), ("reason", reason)],
                ),
                _ => log_outcome(probe, &outcome, "start", missed),
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
        .collect()
}

impl Probes {
    /// For `--collector.ebpf.strict`: an error naming every required probe that is not attached, and why.
    pub fn require_all_attached(&self) -> Result<(), StrictError> {
        let missed: Vec<String> = self
            .probes
            .iter()
            .filter(|state| state.probe.required_by_strict)
            .filter_map(|state| match &lock(&state.live).outcome {
                Outcome::Missed { reason } => Some(format!("{} ({reason})", state.probe.name)),
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
            if module.is_none_or(|module| state.probe.target_modules.contains(&module)) {
                self.follow_modules(state, "module uevent");
            }
        }
    }

    /// Attaches a probe into modules when one of its modules loaded or reloaded since the last
    /// call, and detaches it when they are all gone; nothing for other probes.
    fn follow_modules(&self, state: &ProbeState, trigger: &str) {
        let probe = state.probe;
        if probe.target_modules.is_empty() {
            return;
        }
        let now = Loads::read(&self.sysfs, probe.target_modules);
        let mut live = lock(&state.live);
        match late_attach::step(&live.loads, &now, live.attached()) {
            Step::Stay => {}
            Step::Detach => {
                if let Outcome::Attached { attachment, .. } = &live.outcome {
                    if let Err(err) = syscalls::detach(attachment) {
                        logging::log(
                            Level::Warn,
                            "eBPF probe detach failed",
                            &[("probe", probe.name), ("err", &err.to_string())],
                        );
                    }
                }
                let reason = waiting_for_module(probe);
                logging::log(
                    Level::Info,
                    "eBPF probe detached",
                    &[("probe", probe.name), ("reason", &reason), ("on", trigger)],
                );
                live.detached = Some(reason);
                announce(probe, &live, &self.shared);
            }
            Step::Attach => {
                // A probe whose program never loaded keeps its reason.
                if let Outcome::Attached { hook, attachment } = &live.outcome {
                    match syscalls::reattach(probe, *hook, attachment) {
                        Ok(()) => {
                            live.detached = None;
                            live.module_attaches += 1;
                            log_outcome(probe, &live.outcome, trigger, Level::Warn);
                            announce(probe, &live, &self.shared);
                        }
                        Err(err) => {
                            let reason = err.to_string();
                            logging::log(
                                Level::Warn,
                                "eBPF probe not attached to its reloaded module",
                                &[("probe", probe.name), ("reason", &reason), ("on", trigger)],
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
        let probe_label = || -> Labels { vec![("probe", state.probe.name.into())] };
        if !state.probe.target_modules.is_empty() {
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
            match syscalls::run_stats(attachment) {
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
        let probe = state.probe;
        let mut samples = Samples::default();
        let read = syscalls::with_maps(attachment, probe.lost_map, |maps| {
            (probe.samples)(maps, &self.shared, &mut samples).map(|()| maps.dropped)
        });
        let dropped = match read {
            Ok(dropped) => dropped,
            Err(err) => return out.errors.push(self.error(probe, err)),
        };
        if matches!(attachment, Attachment::Bpf { .. }) {
            out.samples
                .push(&EVENTS_LOST, probe_label(), Value::Int(dropped));
        }
        out.samples.append(samples);
    }

    fn error(&self, probe: &ProbeSpec, err: SyscallError) -> CollectError {
        CollectError::new(ErrorKind::Io, format!("{}: {err}", probe.name))
    }
}

struct EbpfCollector {
    probes: Arc<Probes>,
}

/// One unit per probe. The probes stay attached until the process exits: closing its file
/// descriptors detaches them, so stopping needs nothing more.
impl Collector for EbpfCollector {
    type Unit = &'static ProbeSpec;

    fn units(&self) -> Result<Vec<&'static ProbeSpec>, CollectError> {
        Ok(self.probes.probes.iter().map(|s| s.probe).collect())
    }

    fn collect_unit(&self, unit: &&'static ProbeSpec, out: &mut Output) {
        if let Some(state) = self.probes.probes.iter().find(|s| s.probe == *unit) {
            self.probes.collect(state, out);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

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

    const TEST_METRIC: Desc = Desc::counter(
        "hpcnode_test_probe_events",
        "Events of a probe added in a test.",
        None,
    );

    /// A probe added in a test only, as a new probe's module would add it: no other edit.
    const TEST_PROBE: ProbeSpec = ProbeSpec {
        name: "test_probe",
        object: &[],
        attempts: &[hooks::attempt(
            hooks::Hook::Kmsg,
            "",
            &[],
            hooks::Needs::Nothing,
        )],
        required_by_strict: true,
        target_modules: &[],
        needs_modules: false,
        lost_map: "test_probe_lost",
        metrics: &[TEST_METRIC],
        started: None,
        samples: |_, _, out| {
            out.push(&TEST_METRIC, vec![("detail", "x".into())], Value::Int(7));
            Ok(())
        },
        follow: None,
    };

    /// A kernel where every attempt attaches, as a /dev/kmsg reader does: nothing to load.
    struct EveryHookWorks;

    impl hook_choice::Kernel for EveryHookWorks {
        type Attachment = Attachment;
        type Error = SyscallError;
        fn attach(
            &mut self,
            _: &'static ProbeSpec,
            _: &Attempt,
        ) -> Result<Attachment, SyscallError> {
            Ok(Attachment::Kmsg)
        }
    }

    impl Loader for EveryHookWorks {
        fn load_unattached(&self, _: &ProbeSpec, _: &Attempt) -> Result<Attachment, SyscallError> {
            Err(SyscallError::NotBpf)
        }
    }

    /// Adding a probe is its spec and a registry row: the loader attaches it, `--collector.ebpf.hooks`
    /// and `--collector.ebpf.strict` know it, the collector lists and reads it, and the metric list has
    /// its metric, with nothing else edited.
    #[test]
    fn a_probe_added_to_the_registry_is_loaded_listed_and_collected() {
        const REGISTRY: &[&ProbeSpec] = &[&probes::module_load::SPEC, &TEST_PROBE];
        let choice = HookChoice::parse("module_load:none,test_probe:kmsg", REGISTRY).unwrap();
        let features = KernelFeatures {
            btf: Ok(()),
            x86_64: true,
            release: Some((6, 1)),
            modules: true,
        };
        let sysfs = Path::new("/nonexistent");
        let probes = Probes {
            probes: start(
                REGISTRY,
                &mut EveryHookWorks,
                &features,
                &choice,
                sysfs,
                Level::Warn,
            ),
            module_support: false,
            sysfs: sysfs.to_path_buf(),
            shared: Shared::new(sysfs, Arc::default()),
            run_stats: false,
            _stats: None,
        };
        let strict = probes.require_all_attached().unwrap_err().to_string();
        assert!(strict.contains("module_load (left out"), "{strict}");
        assert!(!strict.contains("test_probe"), "{strict}");

        let collector = EbpfCollector {
            probes: Arc::new(probes),
        };
        let units = collector.units().unwrap();
        let names: Vec<String> = units.iter().map(ToString::to_string).collect();
        assert_eq!(names, ["module_load", "test_probe"]);
        let mut out = Output::default();
        for unit in &units {
            collector.collect_unit(unit, &mut out);
        }
        assert!(out.errors.is_empty());
        let text = crate::metrics::encode(out.samples, crate::metrics::Format::PrometheusText);
        let text = text.unwrap();
        for line in [
            "hpcnode_ebpf_probe_attached{probe=\"test_probe\",hook=\"kmsg\"} 1",
            "hpcnode_test_probe_events_total{detail=\"x\"} 7",
            "hpcnode_ebpf_probe_attached{probe=\"module_load\",hook=\"none\"} 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }

        let metrics: [Desc; 7] = spec::metrics(&PROBE_METRICS, &[&TEST_PROBE]);
        assert_eq!(metrics[6].sample_name(), TEST_METRIC.sample_name());
    }

    /// The collector's metric list is its own six, then each probe's, none twice.
    #[test]
    fn every_probe_metric_is_listed_once() {
        let mut names: Vec<String> = METRICS.iter().map(Desc::sample_name).collect();
        assert_eq!(names.len(), 20);
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 20);
    }
}
