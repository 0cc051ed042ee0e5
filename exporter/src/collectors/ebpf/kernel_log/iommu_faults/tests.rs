use super::*;
use crate::collectors::ebpf::kernel_log::KernelLogCounts;

fn counted(lines: &[&str]) -> Vec<(Fault, u64)> {
    let counts = KernelLogCounts::new();
    for line in lines {
        counts.count_line(line);
    }
    counts.iommu_faults()
}

fn fault(device: &str, access: &'static str, reason: &str) -> Fault {
    Fault {
        device: device.to_string(),
        access,
        reason: reason.to_string(),
    }
}

#[test]
fn intel_one_line_forms() {
    assert_eq!(
            counted(&[
                // 6.x, seen in qemu.
                "DMAR: [DMA Read NO_PASID] Request device [00:03.0] fault addr 0x300000 [fault reason 0x06] PTE Read access is not set",
                "DMAR: [DMA Write NO_PASID] Request device [00:03.0] fault addr 0x400000 [fault reason 0x05] PTE Write access is not set",
                // With a PASID, and 5.x's decimal-looking reason and bare address.
                "DMAR: [DMA Read PASID 0x1] Request device [3b:00.0] PASID 1 fault addr 7f000 [fault reason 06] PTE Read access is not set",
                "DMAR: [DMA Write] Request device [3b:00.0] PASID ffffffff fault addr 1ff000 [fault reason 05] PTE Write access is not set",
                "DMAR: [INTR-REMAP] Request device [f0:1f.0] fault index 0x23 [fault reason 0x25] Blocked a compatibility format interrupt request",
                // Not faults.
                "DMAR: DRHD: handling fault status reg 2",
                "DMAR: IOMMU enabled",
            ]),
            [
                (fault("00:03.0", "read", "PTE Read access is not set"), 1),
                (fault("00:03.0", "write", "PTE Write access is not set"), 1),
                (fault("3b:00.0", "read", "PTE Read access is not set"), 1),
                (fault("3b:00.0", "write", "PTE Write access is not set"), 1),
                (
                    fault(
                        "f0:1f.0",
                        "interrupt",
                        "Blocked a compatibility format interrupt request"
                    ),
                    1
                ),
            ]
        );
}

#[test]
fn intel_two_line_form_of_3_10_and_4_x() {
    assert_eq!(
        counted(&[
            "DMAR:[DMA Read] Request device [3b:00.0] fault addr 1ff000 ",
            "DMAR:[fault reason 06] PTE Read access is not set",
            "dmar: [DMA Write] Request device [3b:00.0] fault addr 2ff000 ",
            "dmar: [fault reason 05] PTE Write access is not set",
            // A request whose reason line was lost, then a reason with no request.
            "DMAR:[DMA Read] Request device [5e:00.0] fault addr 3ff000 ",
            "DMAR:[DMA Read] Request device [3b:00.0] fault addr 4ff000 ",
            "DMAR:[fault reason 06] PTE Read access is not set",
            "DMAR:[fault reason 06] PTE Read access is not set",
        ]),
        [
            (fault("3b:00.0", "read", "PTE Read access is not set"), 2),
            (fault("3b:00.0", "write", "PTE Write access is not set"), 1),
            (fault("5e:00.0", "read", "unknown"), 1),
        ]
    );
}

#[test]
fn amd_vi_forms() {
    assert_eq!(
            counted(&[
                "vfio-pci 0000:3b:00.0: AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x000b address=0xfffd1000 flags=0x0000]",
                "nvidia 0000:3b:00.0: AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x000b address=0xfffd2000 flags=0x0020]",
                "AMD-Vi: Event logged [IO_PAGE_FAULT device=3b:00.0 domain=0x000b address=0x00000000fffd1000 flags=0x0010]",
                "AMD-Vi: Event logged [IO_PAGE_FAULT device=0000:3b:00.0 domain=0x0000 address=0x100 flags=0x0070]",
                "AMD-Vi: Event logged [INVALID_DEVICE_REQUEST device=00:00.0 pasid=0x00000 address=0x0 flags=0x0000]",
            ]),
            [
                (fault("0000:3b:00.0", "read", "IO_PAGE_FAULT"), 1),
                (fault("0000:3b:00.0", "write", "IO_PAGE_FAULT"), 2),
                (fault("3b:00.0", "read", "IO_PAGE_FAULT"), 1),
            ]
        );
}

#[test]
fn label_sets_are_capped() {
    let lines: Vec<String> = (0..MAX_FAULT_SETS + 3)
            .map(|i| format!("DMAR: [DMA Read NO_PASID] Request device [{:02x}:00.0] fault addr 0x1000 [fault reason 0x06] PTE Read access is not set", i % 256))
            .collect();
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let counts = counted(&refs);
    assert_eq!(counts.len(), MAX_FAULT_SETS + 1);
    assert!(counts.contains(&(fault("other", "other", "other"), 3)));
}
