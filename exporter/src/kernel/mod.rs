//! Kernel knowledge that more than one collector needs: modprobe.d rules, the kernel command
//! line, taint flags, the kernel release, module files and their signatures, `/proc/keys`. Collectors import this; it imports no collector.

pub mod cmdline;
pub mod keys;
pub mod modprobe;
pub mod module_file;
pub mod release;
pub mod taint;
