//! Which probes exist, the hooks each can use (cheapest first), and the choice of the first
//! hook that works on the running kernel. The kernel itself is behind [`Kernel`], so the
//! choice is tested without root.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Probe {
    ModuleLoad,
    ModuleSigCheck,
    ModuleLoadSyscall,
    KernelLog,
    IommuFault,
    DmarFault,
    VfioEnable,
    VfioAer,
    VfioPin,
}

impl Probe {
    pub const ALL: [Probe; 9] = [
        Probe::ModuleLoad,
        Probe::ModuleSigCheck,
        Probe::ModuleLoadSyscall,
        Probe::KernelLog,
        Probe::IommuFault,
        Probe::DmarFault,
        Probe::VfioEnable,
        Probe::VfioAer,
        Probe::VfioPin,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Probe::ModuleLoad => "module_load",
            Probe::ModuleSigCheck => "module_sig_check",
            Probe::ModuleLoadSyscall => "module_load_syscall",
            Probe::KernelLog => "kernel_log",
            Probe::IommuFault => "iommu_fault",
            Probe::DmarFault => "dmar_fault",
            Probe::VfioEnable => "vfio_enable",
            Probe::VfioAer => "vfio_aer",
            Probe::VfioPin => "vfio_pin",
        }
    }

    pub fn from_name(name: &str) -> Option<Probe> {
        Probe::ALL.into_iter().find(|probe| probe.name() == name)
    }

    /// Whether `--collector.ebpf.strict` requires the probe. The IOMMU and vfio probes hook code that a
    /// node may rightly lack (no IOMMU support, an AMD or ARM IOMMU, vfio modules not loaded
    /// when the exporter starts), so their absence is reported but is not an error.
    pub fn required_by_strict(self) -> bool {
        matches!(
            self,
            Probe::ModuleLoad | Probe::ModuleSigCheck | Probe::ModuleLoadSyscall | Probe::KernelLog
        )
    }

    /// The loadable modules whose functions the probe's hooks target: it attaches while one
    /// of them is loaded ([`super::late_attach`]). The vfio-pci functions are in vfio_pci_core
    /// since 5.15, in vfio_pci before.
    pub fn target_modules(self) -> &'static [&'static str] {
        match self {
            Probe::VfioEnable | Probe::VfioAer => &["vfio_pci_core", "vfio_pci"],
            Probe::VfioPin => &["vfio_iommu_type1"],
            _ => &[],
        }
    }

    /// Whether the probe is pointless on a kernel without module support. Only the syscall
    /// probe is skipped there: its raw `sys_exit` fallback exists on every kernel and would run
    /// for every syscall; the others find their hooks missing and say so.
    pub fn needs_modules(self) -> bool {
        self == Probe::ModuleLoadSyscall
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    TpBtf,
    RawTp,
    Tracepoint,
    Fentry,
    Fexit,
    Kprobe,
    Kretprobe,
    /// Counting a tracepoint with perf events, no BPF.
    Perf,
    /// Reading `/dev/kmsg` in user space, no BPF.
    Kmsg,
}

impl Hook {
    pub const ALL: [Hook; 9] = [
        Hook::TpBtf,
        Hook::RawTp,
        Hook::Tracepoint,
        Hook::Fentry,
        Hook::Fexit,
        Hook::Kprobe,
        Hook::Kretprobe,
        Hook::Perf,
        Hook::Kmsg,
    ];

    pub fn from_name(name: &str) -> Option<Hook> {
        Hook::ALL.into_iter().find(|hook| hook.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            Hook::TpBtf => "tp_btf",
            Hook::RawTp => "raw_tp",
            Hook::Tracepoint => "tracepoint",
            Hook::Fentry => "fentry",
            Hook::Fexit => "fexit",
            Hook::Kprobe => "kprobe",
            Hook::Kretprobe => "kretprobe",
            Hook::Perf => "perf",
            Hook::Kmsg => "kmsg",
        }
    }
}

/// What an attempt needs from the kernel beyond the hook itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    Nothing,
    /// Kernel BTF: tp_btf, fentry and fexit, and CO-RE reads of kernel structs.
    Btf,
    /// Kernel BTF and x86-64: reads `struct pt_regs` registers.
    BtfOnX86_64,
    /// x86-64: reads `struct pt_regs` registers at their fixed offsets, no BTF.
    X86_64,
    /// `printk:console` firing for every record (5.19+), not only console-printed ones.
    ConsoleForEveryRecord,
}

/// One way to attach a probe: a hook, the program in the probe's object (none for perf and
/// kmsg), and the hook targets (tracepoints as `category/name`, or kernel functions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt {
    pub hook: Hook,
    pub program: &'static str,
    pub targets: &'static [&'static str],
    pub needs: Needs,
    /// A second program of the same object that finds which module an event is about (at the
    /// syscall's or the function's entry, for the program to read at its exit), attached after
    /// this one where there is kernel BTF: it reads kernel structs through CO-RE. Without it the
    /// events are counted with `module="unknown"`.
    pub namer: Option<&'static Attempt>,
}

const fn attempt(
    hook: Hook,
    program: &'static str,
    targets: &'static [&'static str],
    needs: Needs,
) -> Attempt {
    Attempt {
        hook,
        program,
        targets,
        needs,
        namer: None,
    }
}

const fn named(main: Attempt, namer: &'static Attempt) -> Attempt {
    Attempt {
        namer: Some(namer),
        ..main
    }
}

use Hook::*;

const MODULE_LOAD: &[Attempt] = &[
    attempt(TpBtf, "module_load_btf", &["module_load"], Needs::Btf),
    attempt(RawTp, "module_load_raw", &["module_load"], Needs::Btf),
    attempt(
        Tracepoint,
        "module_load_tp",
        &["module/module_load"],
        Needs::Nothing,
    ),
    // Where BPF is refused but perf events are not: counts without module names.
    attempt(Perf, "", &["module/module_load"], Needs::Nothing),
];

/// fexit reads the image under check from the function's arguments; a kretprobe sees only the
/// return value, so its namer, a kprobe on the same function, reads it at the call.
const MODULE_SIG_CHECK: &[Attempt] = &[
    attempt(Fexit, "sig_check_fexit", &["module_sig_check"], Needs::Btf),
    attempt(Fexit, "verify_sig_fexit", &["mod_verify_sig"], Needs::Btf),
    named(
        attempt(
            Kretprobe,
            "sig_check_kretprobe",
            &["module_sig_check"],
            Needs::X86_64,
        ),
        &attempt(
            Kprobe,
            "sig_check_kprobe",
            &["module_sig_check"],
            Needs::Btf,
        ),
    ),
    named(
        attempt(
            Kretprobe,
            "sig_check_kretprobe",
            &["mod_verify_sig"],
            Needs::X86_64,
        ),
        &attempt(Kprobe, "verify_sig_kprobe", &["mod_verify_sig"], Needs::Btf),
    ),
];

/// The per-syscall tracepoints run the program for the two module syscalls only; sys_exit
/// runs it for every syscall on the node, so it comes last here. Each exit program's namer is
/// the matching entry program, which names the module the call is about.
const MODULE_LOAD_SYSCALL: &[Attempt] = &[
    named(
        attempt(
            Tracepoint,
            "syscall_exit_tp",
            &[
                "syscalls/sys_exit_finit_module",
                "syscalls/sys_exit_init_module",
            ],
            Needs::Nothing,
        ),
        &attempt(
            Tracepoint,
            "syscall_enter_tp",
            &[
                "syscalls/sys_enter_finit_module",
                "syscalls/sys_enter_init_module",
            ],
            Needs::Btf,
        ),
    ),
    named(
        attempt(TpBtf, "syscall_exit_btf", &["sys_exit"], Needs::BtfOnX86_64),
        &attempt(
            TpBtf,
            "syscall_enter_btf",
            &["sys_enter"],
            Needs::BtfOnX86_64,
        ),
    ),
    named(
        attempt(RawTp, "syscall_exit_raw", &["sys_exit"], Needs::BtfOnX86_64),
        &attempt(
            RawTp,
            "syscall_enter_raw",
            &["sys_enter"],
            Needs::BtfOnX86_64,
        ),
    ),
];

const KERNEL_LOG: &[Attempt] = &[
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

/// No classic tracepoint: its dev_name() crashes on the NULL device of recent SMMUv2.
const IOMMU_FAULT: &[Attempt] = &[
    attempt(TpBtf, "iommu_fault_btf", &["io_page_fault"], Needs::Btf),
    attempt(RawTp, "iommu_fault_raw", &["io_page_fault"], Needs::Btf),
];

const DMAR_FAULT: &[Attempt] = &[
    attempt(Fentry, "dmar_fault_fentry", &["dmar_fault"], Needs::Btf),
    attempt(
        Kprobe,
        "dmar_fault_kprobe",
        &["dmar_fault"],
        Needs::BtfOnX86_64,
    ),
];

/// The vfio functions live in modules: kprobes only (aya 0.14 loads fentry/fexit against
/// vmlinux BTF, never a module's), attached while the module is loaded ([`super::late_attach`]).
const VFIO_ENABLE: &[Attempt] = &[
    attempt(
        Kretprobe,
        "vfio_enable_kretprobe",
        &["vfio_pci_core_enable"],
        Needs::BtfOnX86_64,
    ),
    // Before 5.15.
    attempt(
        Kretprobe,
        "vfio_enable_kretprobe",
        &["vfio_pci_enable"],
        Needs::BtfOnX86_64,
    ),
    // Where vfio_pci_enable is inlined (Debian 11's 5.10: not in vfio-pci.ko's symbols), its
    // only caller returns its error on the first open (-ENODEV only while vfio_pci unloads).
    attempt(
        Kretprobe,
        "vfio_enable_kretprobe",
        &["vfio_pci_open"],
        Needs::BtfOnX86_64,
    ),
];

const VFIO_AER: &[Attempt] = &[
    attempt(
        Kprobe,
        "vfio_aer_kprobe",
        &["vfio_pci_core_aer_err_detected"],
        Needs::BtfOnX86_64,
    ),
    // Before 5.15, with the same arguments (pdev, state).
    attempt(
        Kprobe,
        "vfio_aer_kprobe",
        &["vfio_pci_aer_err_detected"],
        Needs::BtfOnX86_64,
    ),
];

const VFIO_PIN: &[Attempt] = &[attempt(
    Kretprobe,
    "vfio_pin_kretprobe",
    &["vfio_pin_pages_remote"],
    Needs::BtfOnX86_64,
)];

/// The hooks of each probe, in the order tried: the cheapest that exists wins.
pub fn attempts(probe: Probe) -> &'static [Attempt] {
    match probe {
        Probe::ModuleLoad => MODULE_LOAD,
        Probe::ModuleSigCheck => MODULE_SIG_CHECK,
        Probe::ModuleLoadSyscall => MODULE_LOAD_SYSCALL,
        Probe::KernelLog => KERNEL_LOG,
        Probe::IommuFault => IOMMU_FAULT,
        Probe::DmarFault => DMAR_FAULT,
        Probe::VfioEnable => VFIO_ENABLE,
        Probe::VfioAer => VFIO_AER,
        Probe::VfioPin => VFIO_PIN,
    }
}

/// The hooks each probe may use (`--collector.ebpf.hooks=PROBE:HOOK,...`): a probe named there tries only
/// the named hooks, in its usual order (`PROBE:none`: none, the probe is left out); the others
/// try all of theirs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HookChoice(Vec<(Probe, Option<Hook>)>);

/// The hook name that leaves a probe out.
const NO_HOOK: &str = "none";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HookChoiceError {
    #[error("{0:?} is not PROBE:HOOK")]
    NotAPair(String),
    #[error("no probe {0:?}; probes: {1}")]
    UnknownProbe(String, String),
    #[error("{probe} has no hook {hook:?}; its hooks: {hooks}")]
    UnknownHook {
        probe: &'static str,
        hook: String,
        hooks: String,
    },
}

impl HookChoice {
    pub fn parse(value: &str) -> Result<HookChoice, HookChoiceError> {
        let mut chosen = Vec::new();
        for pair in value
            .split(',')
            .map(str::trim)
            .filter(|pair| !pair.is_empty())
        {
            let (probe_name, hook_name) = pair
                .split_once(':')
                .ok_or_else(|| HookChoiceError::NotAPair(pair.to_string()))?;
            let probe = Probe::from_name(probe_name).ok_or_else(|| {
                let names: Vec<_> = Probe::ALL.iter().map(|probe| probe.name()).collect();
                HookChoiceError::UnknownProbe(probe_name.to_string(), names.join(", "))
            })?;
            let mut hooks: Vec<&str> = attempts(probe).iter().map(|a| a.hook.name()).collect();
            hooks.dedup();
            hooks.push(NO_HOOK);
            let hook = Hook::from_name(hook_name)
                .filter(|hook| hooks.contains(&hook.name()))
                .map(Some)
                .or((hook_name == NO_HOOK).then_some(None))
                .ok_or_else(|| HookChoiceError::UnknownHook {
                    probe: probe.name(),
                    hook: hook_name.to_string(),
                    hooks: hooks.join(", "),
                })?;
            chosen.push((probe, hook));
        }
        Ok(HookChoice(chosen))
    }

    fn allows(&self, probe: Probe, hook: Hook) -> bool {
        let mut named = self
            .0
            .iter()
            .filter(|(named, _)| *named == probe)
            .peekable();
        named.peek().is_none() || named.any(|(_, chosen)| *chosen == Some(hook))
    }

    fn leaves_out(&self, probe: Probe) -> bool {
        !attempts(probe)
            .iter()
            .any(|attempt| self.allows(probe, attempt.hook))
    }
}

/// What the running kernel offers, found once at startup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelFeatures {
    /// Why kernel BTF (`/sys/kernel/btf/vmlinux`) is unavailable, if it is.
    pub btf: Result<(), String>,
    pub x86_64: bool,
    /// (major, minor) of the release, when it parses.
    pub release: Option<(u32, u32)>,
    /// `false` on a kernel built without module support (no `/proc/modules`).
    pub modules: bool,
}

impl KernelFeatures {
    /// Why `needs` is not met on this kernel, if it is not.
    pub fn unmet(&self, needs: Needs) -> Option<String> {
        let btf = || {
            self.btf
                .as_ref()
                .err()
                .map(|why| format!("needs kernel BTF ({why})"))
        };
        match needs {
            Needs::Nothing => None,
            Needs::Btf => btf(),
            Needs::BtfOnX86_64 | Needs::X86_64 if !self.x86_64 => {
                Some("reads x86-64 registers; this is not x86-64".into())
            }
            Needs::BtfOnX86_64 => btf(),
            Needs::X86_64 => None,
            Needs::ConsoleForEveryRecord => match self.release {
                Some(release) if release < (5, 19) => {
                    Some("printk:console fires only for console-printed lines before 5.19".into())
                }
                _ => None,
            },
        }
    }
}

/// Loads and attaches one attempt; the seam between the choice of hook and the kernel.
pub trait Kernel {
    type Attachment;
    fn attach(&mut self, probe: Probe, attempt: &Attempt) -> Result<Self::Attachment, String>;
}

/// How a probe ended up: attached with a hook, or not attached and why.
pub enum Outcome<A> {
    Attached { hook: Hook, attachment: A },
    Missed { reason: String },
}

/// Why every attempt of a probe failed, one `hook(target): reason` per attempt.
struct Failures(Vec<String>);

impl fmt::Display for Failures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join("; "))
    }
}

/// Tries the probe's hooks in order and keeps the first that attaches.
pub fn attach_first<K: Kernel>(
    kernel: &mut K,
    features: &KernelFeatures,
    choice: &HookChoice,
    probe: Probe,
) -> Outcome<K::Attachment> {
    if probe.needs_modules() && !features.modules {
        return Outcome::Missed {
            reason: "kernel without module support (no /proc/modules)".into(),
        };
    }
    if choice.leaves_out(probe) {
        return Outcome::Missed {
            reason: format!(
                "left out by --collector.ebpf.hooks={}:{NO_HOOK}",
                probe.name()
            ),
        };
    }
    let mut failures = Failures(Vec::new());
    for attempt in attempts(probe)
        .iter()
        .filter(|attempt| choice.allows(probe, attempt.hook))
    {
        let what = match attempt.targets.first() {
            Some(target) => format!("{}({target})", attempt.hook.name()),
            None => attempt.hook.name().to_string(),
        };
        let result = match features.unmet(attempt.needs) {
            Some(unmet) => Err(unmet),
            None => kernel.attach(probe, attempt),
        };
        match result {
            Ok(attachment) => {
                return Outcome::Attached {
                    hook: attempt.hook,
                    attachment,
                }
            }
            Err(reason) => failures.0.push(format!("{what}: {reason}")),
        }
    }
    Outcome::Missed {
        reason: failures.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kernel where the listed hooks attach (on the listed targets only, where given) and
    /// every other attempt fails as given.
    struct FakeKernel {
        works: Vec<(Probe, Hook)>,
        targets: Option<Vec<&'static str>>,
        failure: &'static str,
        tried: Vec<(Probe, Hook, &'static str)>,
    }

    impl Kernel for FakeKernel {
        type Attachment = &'static str;
        fn attach(&mut self, probe: Probe, attempt: &Attempt) -> Result<&'static str, String> {
            let target = attempt.targets.first().copied().unwrap_or("");
            self.tried.push((probe, attempt.hook, target));
            let target_exists = self
                .targets
                .as_ref()
                .is_none_or(|targets| targets.contains(&target));
            if self.works.contains(&(probe, attempt.hook)) && target_exists {
                Ok(attempt.program)
            } else {
                Err(self.failure.to_string())
            }
        }
    }

    fn kernel(works: &[(Probe, Hook)], failure: &'static str) -> FakeKernel {
        FakeKernel {
            works: works.to_vec(),
            targets: None,
            failure,
            tried: Vec::new(),
        }
    }

    fn modern() -> KernelFeatures {
        KernelFeatures {
            btf: Ok(()),
            x86_64: true,
            release: Some((6, 18)),
            modules: true,
        }
    }

    fn hook<A>(outcome: &Outcome<A>) -> Option<Hook> {
        match outcome {
            Outcome::Attached { hook, .. } => Some(*hook),
            Outcome::Missed { .. } => None,
        }
    }

    fn reason<A>(outcome: &Outcome<A>) -> &str {
        match outcome {
            Outcome::Attached { .. } => panic!("attached"),
            Outcome::Missed { reason } => reason,
        }
    }

    #[test]
    fn cheapest_working_hook_wins_and_later_ones_are_not_tried() {
        let mut fake = kernel(
            &[
                (Probe::KernelLog, Hook::TpBtf),
                (Probe::KernelLog, Hook::RawTp),
            ],
            "EPERM",
        );
        let outcome = attach_first(
            &mut fake,
            &modern(),
            &HookChoice::default(),
            Probe::KernelLog,
        );
        assert_eq!(hook(&outcome), Some(Hook::TpBtf));
        assert_eq!(fake.tried, [(Probe::KernelLog, Hook::TpBtf, "console")]);
    }

    #[test]
    fn falls_back_in_order_through_every_hook() {
        // A 6.x kernel where only kretprobes work (fexit refused): both fexit targets, then
        // the kretprobe on module_sig_check.
        let mut fake = kernel(&[(Probe::ModuleSigCheck, Hook::Kretprobe)], "EPERM");
        let outcome = attach_first(
            &mut fake,
            &modern(),
            &HookChoice::default(),
            Probe::ModuleSigCheck,
        );
        assert_eq!(hook(&outcome), Some(Hook::Kretprobe));
        assert_eq!(
            fake.tried,
            [
                (Probe::ModuleSigCheck, Hook::Fexit, "module_sig_check"),
                (Probe::ModuleSigCheck, Hook::Fexit, "mod_verify_sig"),
                (Probe::ModuleSigCheck, Hook::Kretprobe, "module_sig_check"),
            ]
        );
        // BPF refused altogether: module loads are still counted, by perf.
        let mut refused = kernel(&[(Probe::ModuleLoad, Hook::Perf)], "EPERM");
        let outcome = attach_first(
            &mut refused,
            &modern(),
            &HookChoice::default(),
            Probe::ModuleLoad,
        );
        assert_eq!(hook(&outcome), Some(Hook::Perf));
        let hooks: Vec<_> = refused.tried.iter().map(|t| t.1).collect();
        assert_eq!(
            hooks,
            [Hook::TpBtf, Hook::RawTp, Hook::Tracepoint, Hook::Perf]
        );
    }

    #[test]
    fn vfio_probes_find_the_functions_of_kernels_before_5_15() {
        // Debian 11's 5.10: no vfio_pci_core; vfio_pci_enable inlined into vfio_pci_open.
        let mut fake = kernel(
            &[
                (Probe::VfioEnable, Hook::Kretprobe),
                (Probe::VfioAer, Hook::Kprobe),
            ],
            "No such file or directory",
        );
        fake.targets = Some(vec!["vfio_pci_open", "vfio_pci_aer_err_detected"]);
        for probe in [Probe::VfioEnable, Probe::VfioAer] {
            let outcome = attach_first(&mut fake, &modern(), &HookChoice::default(), probe);
            assert!(hook(&outcome).is_some(), "{}", probe.name());
            assert_eq!(probe.target_modules(), ["vfio_pci_core", "vfio_pci"]);
        }
        let targets: Vec<_> = fake.tried.iter().map(|tried| tried.2).collect();
        assert_eq!(
            targets,
            [
                "vfio_pci_core_enable",
                "vfio_pci_enable",
                "vfio_pci_open",
                "vfio_pci_core_aer_err_detected",
                "vfio_pci_aer_err_detected",
            ]
        );
    }

    #[test]
    fn nothing_works_gives_one_reason_naming_every_attempt() {
        let mut fake = kernel(&[], "No such file or directory");
        let outcome = attach_first(
            &mut fake,
            &modern(),
            &HookChoice::default(),
            Probe::ModuleLoadSyscall,
        );
        assert_eq!(
            reason(&outcome),
            "tracepoint(syscalls/sys_exit_finit_module): No such file or directory; \
             tp_btf(sys_exit): No such file or directory; raw_tp(sys_exit): No such file or directory"
        );
    }

    #[test]
    fn unmet_needs_skip_the_kernel_call() {
        // Old kernel, no BTF, not x86-64: only the classic tracepoint and perf are tried for
        // module loads, and the kernel log is read from /dev/kmsg.
        let old = KernelFeatures {
            btf: Err("no /sys/kernel/btf/vmlinux".into()),
            x86_64: false,
            release: Some((4, 18)),
            modules: true,
        };
        let mut fake = kernel(&[(Probe::KernelLog, Hook::Kmsg)], "ENOENT");
        let outcome = attach_first(&mut fake, &old, &HookChoice::default(), Probe::ModuleLoad);
        let hooks: Vec<_> = fake.tried.iter().map(|t| t.1).collect();
        assert_eq!(hooks, [Hook::Tracepoint, Hook::Perf]);
        assert!(reason(&outcome).starts_with(
            "tp_btf(module_load): needs kernel BTF (no /sys/kernel/btf/vmlinux); raw_tp"
        ));
        let log = attach_first(&mut fake, &old, &HookChoice::default(), Probe::KernelLog);
        assert_eq!(hook(&log), Some(Hook::Kmsg));
        let sig = attach_first(
            &mut fake,
            &old,
            &HookChoice::default(),
            Probe::ModuleSigCheck,
        );
        assert!(reason(&sig).contains("kretprobe(module_sig_check): reads x86-64 registers"));
    }

    #[test]
    fn no_module_support_skips_the_syscall_probe() {
        let features = KernelFeatures {
            modules: false,
            ..modern()
        };
        let mut fake = kernel(&[(Probe::ModuleLoadSyscall, Hook::RawTp)], "ENOENT");
        let outcome = attach_first(
            &mut fake,
            &features,
            &HookChoice::default(),
            Probe::ModuleLoadSyscall,
        );
        assert_eq!(
            reason(&outcome),
            "kernel without module support (no /proc/modules)"
        );
        assert!(fake.tried.is_empty());
        // The other module probes try their hooks and report what the kernel said.
        let outcome = attach_first(
            &mut fake,
            &features,
            &HookChoice::default(),
            Probe::ModuleLoad,
        );
        assert!(reason(&outcome).starts_with("tp_btf(module_load): ENOENT"));
    }

    #[test]
    fn a_hook_choice_restricts_the_named_probes_only() {
        let choice =
            HookChoice::parse("module_sig_check:kretprobe, kernel_log:kmsg,kernel_log:raw_tp")
                .unwrap();
        let mut fake = kernel(
            &[
                (Probe::ModuleSigCheck, Hook::Fexit),
                (Probe::ModuleSigCheck, Hook::Kretprobe),
                (Probe::KernelLog, Hook::TpBtf),
                (Probe::KernelLog, Hook::Kmsg),
                (Probe::ModuleLoad, Hook::TpBtf),
            ],
            "EPERM",
        );
        let sig = attach_first(&mut fake, &modern(), &choice, Probe::ModuleSigCheck);
        assert_eq!(hook(&sig), Some(Hook::Kretprobe));
        // Two hooks named: tried in the probe's own order, raw_tp before kmsg.
        let log = attach_first(&mut fake, &modern(), &choice, Probe::KernelLog);
        assert_eq!(hook(&log), Some(Hook::Kmsg));
        let load = attach_first(&mut fake, &modern(), &choice, Probe::ModuleLoad);
        assert_eq!(hook(&load), Some(Hook::TpBtf));
        let hooks: Vec<_> = fake.tried.iter().map(|t| (t.0, t.1)).collect();
        assert_eq!(
            hooks,
            [
                (Probe::ModuleSigCheck, Hook::Kretprobe),
                (Probe::KernelLog, Hook::RawTp),
                (Probe::KernelLog, Hook::Kmsg),
                (Probe::ModuleLoad, Hook::TpBtf),
            ]
        );
        // A chosen hook that fails is reported; the probe does not fall back to another.
        let choice = HookChoice::parse("module_load:perf,kernel_log:none").unwrap();
        let load = attach_first(&mut fake, &modern(), &choice, Probe::ModuleLoad);
        assert_eq!(reason(&load), "perf(module/module_load): EPERM");
        // `none` leaves the probe out without a kernel call.
        let tried = fake.tried.len();
        let log = attach_first(&mut fake, &modern(), &choice, Probe::KernelLog);
        assert_eq!(
            reason(&log),
            "left out by --collector.ebpf.hooks=kernel_log:none"
        );
        assert_eq!(fake.tried.len(), tried);
    }

    #[test]
    fn a_bad_hook_choice_names_what_exists() {
        assert_eq!(HookChoice::parse(""), Ok(HookChoice::default()));
        assert_eq!(
            HookChoice::parse("module_load"),
            Err(HookChoiceError::NotAPair("module_load".into()))
        );
        let unknown = HookChoice::parse("module_loads:perf")
            .unwrap_err()
            .to_string();
        assert!(unknown.starts_with("no probe \"module_loads\"; probes: module_load, "));
        assert_eq!(
            HookChoice::parse("module_sig_check:kprobe")
                .unwrap_err()
                .to_string(),
            "module_sig_check has no hook \"kprobe\"; its hooks: fexit, kretprobe, none"
        );
    }
}
