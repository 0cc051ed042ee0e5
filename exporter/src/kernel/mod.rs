//! Kernel knowledge that more than one collector needs: modprobe.d rules, the kernel command
//! line, taint flags. Collectors import this; it imports no collector.

pub mod modprobe;
