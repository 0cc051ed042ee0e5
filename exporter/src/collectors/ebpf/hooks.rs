//! The hooks a probe can use and what each needs from the kernel: the words every probe's
//! spec lists its attempts in, below the specs ([`super::hook_choice`] picks among them).

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
/// kmsg), and the hook targets (tracepoints as `category/name`, or kernel functions). A
/// tracepoint program attaches to every target; a kprobe to the first, and to each later one
/// the kernel has (a function newer kernels add).
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
    /// Programs of the same object that must run beside this one (other events the probe
    /// needs), each loaded and attached with the object, before this one: the attempt fails
    /// if one fails. They stay attached while this one detaches and attaches again with its
    /// module, so they hook the core kernel only.
    pub companions: &'static [Attempt],
}

pub const fn attempt(
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
        companions: &[],
    }
}

pub const fn named(main: Attempt, namer: &'static Attempt) -> Attempt {
    Attempt {
        namer: Some(namer),
        ..main
    }
}

pub const fn with_companions(main: Attempt, companions: &'static [Attempt]) -> Attempt {
    Attempt { companions, ..main }
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
