//! The three probes of vfio.bpf.c, into functions of the vfio modules: failed device enables
//! (`vfio_enable`), AER errors on assigned devices (`vfio_aer`), failed page pinnings
//! (`vfio_pin`). Kprobes only (aya 0.14 loads fentry/fexit against vmlinux BTF, never a
//! module's), attached while their module is loaded ([`super::super::late_attach`]).

use std::collections::BTreeMap;

use crate::collectors::ebpf::error::SyscallError;
use crate::collectors::ebpf::hooks::{attempt, Attempt, Hook::*, Needs};
use crate::collectors::ebpf::maps::Maps;
use crate::collectors::ebpf::module_events;
use crate::collectors::ebpf::spec::{device_events, device_label, ProbeSpec, Shared};
use crate::metrics::{Desc, Samples, Value};

const OBJECT: &[u8] = aya::include_bytes_aligned!("../../../../../ebpf/vfio.bpf.o");
/// The vfio-pci functions are in vfio_pci_core since 5.15, in vfio_pci before.
const VFIO_PCI: &[&str] = &["vfio_pci_core", "vfio_pci"];

pub const ENABLE: ProbeSpec = ProbeSpec {
    name: "vfio_enable",
    object: OBJECT,
    attempts: ENABLE_ATTEMPTS,
    required_by_strict: false,
    target_modules: VFIO_PCI,
    needs_modules: false,
    lost_map: "vfio_failures_dropped",
    metrics: &[VFIO_ENABLE_FAILURES],
    started: None,
    samples: |maps, _, out| push_errnos(&VFIO_ENABLE_FAILURES, maps, out),
    follow: None,
};

pub const AER: ProbeSpec = ProbeSpec {
    name: "vfio_aer",
    object: OBJECT,
    attempts: AER_ATTEMPTS,
    required_by_strict: false,
    target_modules: VFIO_PCI,
    needs_modules: false,
    lost_map: "vfio_aer_errors_dropped",
    metrics: &[VFIO_AER_ERRORS],
    started: None,
    samples: aer_samples,
    follow: None,
};

pub const PIN: ProbeSpec = ProbeSpec {
    name: "vfio_pin",
    object: OBJECT,
    attempts: PIN_ATTEMPTS,
    required_by_strict: false,
    target_modules: &["vfio_iommu_type1"],
    needs_modules: false,
    lost_map: "vfio_failures_dropped",
    metrics: &[VFIO_PIN_FAILURES],
    started: None,
    samples: |maps, _, out| push_errnos(&VFIO_PIN_FAILURES, maps, out),
    follow: None,
};

const ENABLE_ATTEMPTS: &[Attempt] = &[
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

const AER_ATTEMPTS: &[Attempt] = &[
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

const PIN_ATTEMPTS: &[Attempt] = &[attempt(
    Kretprobe,
    "vfio_pin_kretprobe",
    &["vfio_pin_pages_remote"],
    Needs::BtfOnX86_64,
)];

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

/// errno -> failed calls, from the map the enable and pin programs share the layout of.
fn push_errnos(desc: &Desc, maps: &Maps<'_>, out: &mut Samples) -> Result<(), SyscallError> {
    push_errno_counts(desc, &maps.i32_counts("vfio_failures")?, out);
    Ok(())
}

fn push_errno_counts(desc: &Desc, errnos: &BTreeMap<i32, u64>, out: &mut Samples) {
    for (errno, count) in errnos {
        out.push(
            desc,
            vec![("errno", module_events::errno_name(*errno).into())],
            Value::Int(*count),
        );
    }
}

fn aer_samples(maps: &Maps<'_>, _: &Shared, out: &mut Samples) -> Result<(), SyscallError> {
    push_aer_errors(&device_events(maps, "vfio_aer_errors")?, out);
    Ok(())
}

/// (device name, channel state) -> AER errors.
fn push_aer_errors(errors: &[(String, u32, u64)], out: &mut Samples) {
    for (device, state, count) in errors {
        out.push(
            &VFIO_AER_ERRORS,
            vec![
                ("device", device_label(device).into()),
                ("state", channel_state(*state).into()),
            ],
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::ebpf::spec::tests::exposition;

    #[test]
    fn aer_errors_and_errnos_become_labelled_series() {
        let errors = [("0000:41:00.0".into(), 1, 3), ("0000:41:00.0".into(), 0, 1)];
        let mut out = Samples::default();
        push_aer_errors(&errors, &mut out);
        push_errno_counts(&VFIO_PIN_FAILURES, &BTreeMap::from([(12, 5)]), &mut out);
        assert_eq!(
            exposition(out),
            [
                "hpcnode_vfio_aer_errors_total{device=\"0000:41:00.0\",state=\"normal\"} 3",
                "hpcnode_vfio_aer_errors_total{device=\"0000:41:00.0\",state=\"state_0\"} 1",
                "hpcnode_vfio_pin_failures_total{errno=\"ENOMEM\"} 5",
            ]
        );
        assert_eq!(channel_state(2), "frozen");
        assert_eq!(channel_state(3), "perm_failure");
    }
}
