//! The running kernel's side of the eBPF tests: whether BPF can be used here, and writing
//! kernel log lines.

use std::io::Write;

/// Why the eBPF tests cannot run here, if they cannot: they need root (CI runs as root) and a
/// kernel with BPF.
pub fn bpf_unavailable() -> Option<String> {
    if !super::is_root() {
        return Some("needs root to load BPF programs".into());
    }
    // The sysctl exists exactly when the kernel has the bpf() syscall (CONFIG_BPF_SYSCALL).
    if !std::path::Path::new("/proc/sys/kernel/bpf_stats_enabled").exists() {
        return Some("this kernel has no bpf() syscall".into());
    }
    None
}

/// Skips (with the reason on stderr) where BPF is unavailable; in CI that is a failure.
pub fn require_bpf(test: &str) -> bool {
    match bpf_unavailable() {
        None => true,
        Some(why) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "{test} must run in CI: {why}"
            );
            eprintln!("SKIPPED {test}: {why}");
            false
        }
    }
}

/// Writes one line to the kernel log. /dev/kmsg is opened per line: the kernel ratelimits
/// writes per open file (10 lines per 5 s) unless kernel.printk_devkmsg=on.
pub fn write_kmsg(line: &str) {
    let mut kmsg = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/kmsg")
        .expect("open /dev/kmsg");
    kmsg.write_all(format!("{line}\n").as_bytes())
        .expect("write /dev/kmsg");
}

/// A line the kernel_log probe counts as `lockdown_refused_module`, in the kernel's format.
pub const LOCKDOWN_LINE: &str =
    "Lockdown: modprobe: unsigned module loading is restricted; see man kernel_lockdown.7";

/// An Intel IOMMU fault line as 6.x kernels print it (seen in the kernel lab), counted in
/// `hpcnode_iommu_faults_total`.
pub const DMAR_FAULT_LINE: &str = "DMAR: [DMA Read NO_PASID] Request device [00:03.0] fault addr 0x300000 [fault reason 0x06] PTE Read access is not set";
