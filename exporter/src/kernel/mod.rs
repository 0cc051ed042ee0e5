//! Kernel knowledge that more than one collector needs: modprobe.d rules, the kernel command
//! line, taint flags, the kernel release. Collectors import this; it imports no collector.

pub mod cmdline;
pub mod modprobe;
pub mod release;
pub mod taint;
