//! `dmar_fault`: Intel VT-d fault interrupts (calls of dmar_fault), by IOMMU unit.

use std::collections::BTreeMap;

use crate::collectors::ebpf::error::SyscallError;
use crate::collectors::ebpf::hooks::{attempt, Attempt, Hook::*, Needs};
use crate::collectors::ebpf::maps::Maps;
use crate::collectors::ebpf::spec::{ProbeSpec, Shared, NO_DEVICE};
use crate::metrics::{Desc, Samples, Value};

pub const SPEC: ProbeSpec = ProbeSpec {
    name: "dmar_fault",
    object: aya::include_bytes_aligned!("../../../../../ebpf/dmar_fault.bpf.o"),
    attempts: ATTEMPTS,
    required_by_strict: false,
    target_modules: &[],
    needs_modules: false,
    lost_map: "fault_interrupts_dropped",
    metrics: &[IOMMU_FAULT_INTERRUPTS],
    started: None,
    samples,
    follow: None,
};

const ATTEMPTS: &[Attempt] = &[
    attempt(Fentry, "dmar_fault_fentry", &["dmar_fault"], Needs::Btf),
    attempt(
        Kprobe,
        "dmar_fault_kprobe",
        &["dmar_fault"],
        Needs::BtfOnX86_64,
    ),
];

const IOMMU_FAULT_INTERRUPTS: Desc = Desc::counter(
    "hpcnode_iommu_fault_interrupts",
    "Intel VT-d fault interrupts (calls of dmar_fault), by IOMMU unit; one interrupt may report several faults.",
    None,
);

fn samples(maps: &Maps<'_>, _: &Shared, out: &mut Samples) -> Result<(), SyscallError> {
    push_interrupts(&maps.i32_counts("fault_interrupts")?, out);
    Ok(())
}

/// IOMMU sequence number (`dmar<N>`) -> fault interrupts.
fn push_interrupts(interrupts: &BTreeMap<i32, u64>, out: &mut Samples) {
    for (seq_id, count) in interrupts {
        let iommu = if *seq_id >= 0 {
            format!("dmar{seq_id}")
        } else {
            NO_DEVICE.into()
        };
        out.push(
            &IOMMU_FAULT_INTERRUPTS,
            vec![("iommu", iommu.into())],
            Value::Int(*count),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::ebpf::spec::tests::exposition;

    #[test]
    fn interrupts_are_labelled_by_unit() {
        let mut out = Samples::default();
        push_interrupts(&BTreeMap::from([(0, 2), (-1, 1)]), &mut out);
        assert_eq!(
            exposition(out),
            [
                "hpcnode_iommu_fault_interrupts_total{iommu=\"unknown\"} 1",
                "hpcnode_iommu_fault_interrupts_total{iommu=\"dmar0\"} 2",
            ]
        );
    }
}
