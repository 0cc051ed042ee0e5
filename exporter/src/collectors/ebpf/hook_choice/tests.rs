use super::*;
use crate::collectors::ebpf::probes::{
    self, kernel_log, module_load, module_load_syscall, module_sig_check, rdma_port_events, vfio,
};

type Probe = &'static ProbeSpec;

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
    type Error = String;
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
            (&kernel_log::SPEC, Hook::TpBtf),
            (&kernel_log::SPEC, Hook::RawTp),
        ],
        "EPERM",
    );
    let outcome = attach_first(
        &mut fake,
        &modern(),
        &HookChoice::default(),
        &kernel_log::SPEC,
    );
    assert_eq!(hook(&outcome), Some(Hook::TpBtf));
    assert_eq!(fake.tried, [(&kernel_log::SPEC, Hook::TpBtf, "console")]);
}

#[test]
fn falls_back_in_order_through_every_hook() {
    // A 6.x kernel where only kretprobes work (fexit refused): both fexit targets, then
    // the kretprobe on module_sig_check.
    let mut fake = kernel(&[(&module_sig_check::SPEC, Hook::Kretprobe)], "EPERM");
    let outcome = attach_first(
        &mut fake,
        &modern(),
        &HookChoice::default(),
        &module_sig_check::SPEC,
    );
    assert_eq!(hook(&outcome), Some(Hook::Kretprobe));
    assert_eq!(
        fake.tried,
        [
            (&module_sig_check::SPEC, Hook::Fexit, "module_sig_check"),
            (&module_sig_check::SPEC, Hook::Fexit, "mod_verify_sig"),
            (&module_sig_check::SPEC, Hook::Kretprobe, "module_sig_check"),
        ]
    );
    // BPF refused altogether: module loads are still counted, by perf.
    let mut refused = kernel(&[(&module_load::SPEC, Hook::Perf)], "EPERM");
    let outcome = attach_first(
        &mut refused,
        &modern(),
        &HookChoice::default(),
        &module_load::SPEC,
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
        &[(&vfio::ENABLE, Hook::Kretprobe), (&vfio::AER, Hook::Kprobe)],
        "No such file or directory",
    );
    fake.targets = Some(vec!["vfio_pci_open", "vfio_pci_aer_err_detected"]);
    for probe in [&vfio::ENABLE, &vfio::AER] {
        let outcome = attach_first(&mut fake, &modern(), &HookChoice::default(), probe);
        assert!(hook(&outcome).is_some(), "{}", probe.name);
        assert_eq!(probe.target_modules, ["vfio_pci_core", "vfio_pci"]);
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
fn rdma_port_events_fall_back_to_the_drivers_dispatch() {
    // A kernel whose ib_dispatch_event_clients is inlined: ib_dispatch_event, which misses
    // only the GID changes the core dispatches itself.
    let probe = &rdma_port_events::SPEC;
    let mut fake = kernel(&[(probe, Hook::Kprobe)], "No such file or directory");
    fake.targets = Some(vec!["ib_dispatch_event"]);
    let outcome = attach_first(&mut fake, &modern(), &HookChoice::default(), probe);
    assert_eq!(hook(&outcome), Some(Hook::Kprobe));
    let targets: Vec<_> = fake.tried.iter().map(|tried| tried.2).collect();
    assert_eq!(targets, ["ib_dispatch_event_clients", "ib_dispatch_event"]);
    assert_eq!(probe.target_modules, ["ib_core"]);
}

#[test]
fn nothing_works_gives_one_reason_naming_every_attempt() {
    let mut fake = kernel(&[], "No such file or directory");
    let outcome = attach_first(
        &mut fake,
        &modern(),
        &HookChoice::default(),
        &module_load_syscall::SPEC,
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
    let mut fake = kernel(&[(&kernel_log::SPEC, Hook::Kmsg)], "ENOENT");
    let outcome = attach_first(&mut fake, &old, &HookChoice::default(), &module_load::SPEC);
    let hooks: Vec<_> = fake.tried.iter().map(|t| t.1).collect();
    assert_eq!(hooks, [Hook::Tracepoint, Hook::Perf]);
    assert!(reason(&outcome)
        .starts_with("tp_btf(module_load): needs kernel BTF (no /sys/kernel/btf/vmlinux); raw_tp"));
    let log = attach_first(&mut fake, &old, &HookChoice::default(), &kernel_log::SPEC);
    assert_eq!(hook(&log), Some(Hook::Kmsg));
    let sig = attach_first(
        &mut fake,
        &old,
        &HookChoice::default(),
        &module_sig_check::SPEC,
    );
    assert!(reason(&sig).contains("kretprobe(module_sig_check): reads x86-64 registers"));
}

#[test]
fn no_module_support_skips_the_syscall_probe() {
    let features = KernelFeatures {
        modules: false,
        ..modern()
    };
    let mut fake = kernel(&[(&module_load_syscall::SPEC, Hook::RawTp)], "ENOENT");
    let outcome = attach_first(
        &mut fake,
        &features,
        &HookChoice::default(),
        &module_load_syscall::SPEC,
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
        &module_load::SPEC,
    );
    assert!(reason(&outcome).starts_with("tp_btf(module_load): ENOENT"));
}

#[test]
fn a_hook_choice_restricts_the_named_probes_only() {
    let choice = HookChoice::parse(
        "module_sig_check:kretprobe, kernel_log:kmsg,kernel_log:raw_tp",
        probes::ALL,
    )
    .unwrap();
    let mut fake = kernel(
        &[
            (&module_sig_check::SPEC, Hook::Fexit),
            (&module_sig_check::SPEC, Hook::Kretprobe),
            (&kernel_log::SPEC, Hook::TpBtf),
            (&kernel_log::SPEC, Hook::Kmsg),
            (&module_load::SPEC, Hook::TpBtf),
        ],
        "EPERM",
    );
    let sig = attach_first(&mut fake, &modern(), &choice, &module_sig_check::SPEC);
    assert_eq!(hook(&sig), Some(Hook::Kretprobe));
    // Two hooks named: tried in the probe's own order, raw_tp before kmsg.
    let log = attach_first(&mut fake, &modern(), &choice, &kernel_log::SPEC);
    assert_eq!(hook(&log), Some(Hook::Kmsg));
    let load = attach_first(&mut fake, &modern(), &choice, &module_load::SPEC);
    assert_eq!(hook(&load), Some(Hook::TpBtf));
    let hooks: Vec<_> = fake.tried.iter().map(|t| (t.0, t.1)).collect();
    assert_eq!(
        hooks,
        [
            (&module_sig_check::SPEC, Hook::Kretprobe),
            (&kernel_log::SPEC, Hook::RawTp),
            (&kernel_log::SPEC, Hook::Kmsg),
            (&module_load::SPEC, Hook::TpBtf),
        ]
    );
    // A chosen hook that fails is reported; the probe does not fall back to another.
    let choice = HookChoice::parse("module_load:perf,kernel_log:none", probes::ALL).unwrap();
    let load = attach_first(&mut fake, &modern(), &choice, &module_load::SPEC);
    assert_eq!(reason(&load), "perf(module/module_load): EPERM");
    // `none` leaves the probe out without a kernel call.
    let tried = fake.tried.len();
    let log = attach_first(&mut fake, &modern(), &choice, &kernel_log::SPEC);
    assert_eq!(
        reason(&log),
        "left out by --collector.ebpf.hooks=kernel_log:none"
    );
    assert_eq!(fake.tried.len(), tried);
}

#[test]
fn a_bad_hook_choice_names_what_exists() {
    assert_eq!(
        HookChoice::parse("", probes::ALL),
        Ok(HookChoice::default())
    );
    assert_eq!(
        HookChoice::parse("module_load", probes::ALL),
        Err(HookChoiceError::NotAPair("module_load".into()))
    );
    let unknown = HookChoice::parse("module_loads:perf", probes::ALL)
        .unwrap_err()
        .to_string();
    assert!(unknown.starts_with("no probe \"module_loads\"; probes: module_load, "));
    assert_eq!(
        HookChoice::parse("module_sig_check:kprobe", probes::ALL)
            .unwrap_err()
            .to_string(),
        "module_sig_check has no hook \"kprobe\"; its hooks: fexit, kretprobe, none"
    );
}
