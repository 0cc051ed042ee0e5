//! `iommu_fault`: IOMMU faults from the iommu:io_page_fault tracepoint (AMD-Vi, ARM SMMU), by
//! device and access, in the series the kernel-log matcher also writes.

use crate::collectors::ebpf::error::SyscallError;
use crate::collectors::ebpf::hooks::{attempt, Attempt, Hook::*, Needs};
use crate::collectors::ebpf::maps::Maps;
use crate::collectors::ebpf::spec::{device_events, device_label, ProbeSpec, Shared};
use crate::metrics::{Desc, Labels, Samples, Value};

pub const SPEC: ProbeSpec = ProbeSpec {
    name: "iommu_fault",
    object: aya::include_bytes_aligned!("../../../../../ebpf/iommu_fault.bpf.o"),
    attempts: ATTEMPTS,
    required_by_strict: false,
    target_modules: &[],
    needs_modules: false,
    lost_map: "iommu_faults_dropped",
    metrics: &[IOMMU_FAULTS],
    started: None,
    samples,
    follow: None,
};

/// No classic tracepoint: its dev_name() crashes on the NULL device of recent SMMUv2.
const ATTEMPTS: &[Attempt] = &[
    attempt(TpBtf, "iommu_fault_btf", &["io_page_fault"], Needs::Btf),
    attempt(RawTp, "iommu_fault_raw", &["io_page_fault"], Needs::Btf),
];

/// Also written by the kernel log probe, with `source="kernel_log"`.
pub const IOMMU_FAULTS: Desc = Desc::counter(
    "hpcnode_iommu_faults",
    "IOMMU faults by device, access and reason: from the kernel log (DMAR, AMD-Vi; a lower bound, the kernel ratelimits them) or the iommu:io_page_fault tracepoint (AMD-Vi, ARM SMMU).",
    None,
);

/// The label of events the kernel side could not record by device (its map was full).
const OTHER_DEVICE: &str = "other";

/// (device name, write flag) -> faults; the name is empty where the kernel passed no device.
pub(in crate::collectors::ebpf) fn faults(
    maps: &Maps<'_>,
) -> Result<Vec<(String, u32, u64)>, SyscallError> {
    device_events(maps, "iommu_faults")
}

fn samples(maps: &Maps<'_>, _: &Shared, out: &mut Samples) -> Result<(), SyscallError> {
    push_faults(&faults(maps)?, maps.dropped, out);
    Ok(())
}

fn push_faults(faults: &[(String, u32, u64)], dropped: u64, out: &mut Samples) {
    let labels = |device: String, access: &str| -> Labels {
        vec![
            ("device", device.into()),
            ("access", access.to_string().into()),
            ("reason", "io_page_fault".into()),
            ("source", "tracepoint".into()),
        ]
    };
    for (device, write, count) in faults {
        let access = if *write != 0 { "write" } else { "read" };
        out.push(
            &IOMMU_FAULTS,
            labels(device_label(device), access),
            Value::Int(*count),
        );
    }
    if dropped > 0 {
        out.push(
            &IOMMU_FAULTS,
            labels(OTHER_DEVICE.into(), "other"),
            Value::Int(dropped),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::ebpf::spec::tests::exposition;

    #[test]
    fn faults_become_labelled_series() {
        let faults = [
            ("0000:41:00.0".into(), 1, 3),
            ("0000:41:00.0".into(), 0, 1),
            (String::new(), 0, 2), // NULL device (SMMUv2)
        ];
        let mut out = Samples::default();
        push_faults(&faults, 4, &mut out);
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
    }
}
