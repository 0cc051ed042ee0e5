//! The hooks a probe can use, what each needs from the kernel, and the choice of the first
//! hook that works on the running kernel (each probe lists its own, cheapest first, in its
//! [`ProbeSpec`]). The kernel itself is behind [`Kernel`], so the choice is tested without root.

use std::fmt;

use super::probes::ProbeSpec;

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
/// kmsg), and the hook targets (tracepoints as `category/name`, or kernel functions).
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
    }
}

pub const fn named(main: Attempt, namer: &'static Attempt) -> Attempt {
    Attempt {
        namer: Some(namer),
        ..main
    }
}

/// The hooks each probe may use (`--collector.ebpf.hooks=PROBE:HOOK,...`): a probe named there tries only
/// the named hooks, in its usual order (`PROBE:none`: none, the probe is left out); the others
/// try all of theirs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HookChoice(Vec<(&'static str, Option<Hook>)>);

/// The hook name that leaves a probe out.
const NO_HOOK: &str = "none";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HookChoiceError {
    #[error("{0:?} is not PROBE:HOOK")]
    NotAPair(String),
    #[error("no probe {0:?}; probes: {1}")]
    UnknownProbe(String, String),
    #[error("{probe} has no hook {hook:?}; its hooks: {hooks}")]
    UnknownHook {
        probe: &'static str,
        hook: String,
        hooks: String,
    },
}

impl HookChoice {
    /// `--collector.ebpf.hooks`, against the probes of `registry`.
    pub fn parse(
        value: &str,
        registry: &[&'static ProbeSpec],
    ) -> Result<HookChoice, HookChoiceError> {
        let mut chosen = Vec::new();
        for pair in value
            .split(',')
            .map(str::trim)
            .filter(|pair| !pair.is_empty())
        {
            let (probe_name, hook_name) = pair
                .split_once(':')
                .ok_or_else(|| HookChoiceError::NotAPair(pair.to_string()))?;
            let probe = registry.iter().find(|probe| probe.name == probe_name);
            let probe = probe.ok_or_else(|| {
                let names: Vec<_> = registry.iter().map(|probe| probe.name).collect();
                HookChoiceError::UnknownProbe(probe_name.to_string(), names.join(", "))
            })?;
            let mut hooks: Vec<&str> = probe.attempts.iter().map(|a| a.hook.name()).collect();
            hooks.dedup();
            hooks.push(NO_HOOK);
            let hook = Hook::from_name(hook_name)
                .filter(|hook| hooks.contains(&hook.name()))
                .map(Some)
                .or((hook_name == NO_HOOK).then_some(None))
                .ok_or_else(|| HookChoiceError::UnknownHook {
                    probe: probe.name,
                    hook: hook_name.to_string(),
                    hooks: hooks.join(", "),
                })?;
            chosen.push((probe.name, hook));
        }
        Ok(HookChoice(chosen))
    }

    fn allows(&self, probe: &ProbeSpec, hook: Hook) -> bool {
        let mut named = self
            .0
            .iter()
            .filter(|(named, _)| *named == probe.name)
            .peekable();
        named.peek().is_none() || named.any(|(_, chosen)| *chosen == Some(hook))
    }

    fn leaves_out(&self, probe: &ProbeSpec) -> bool {
        !probe
            .attempts
            .iter()
            .any(|attempt| self.allows(probe, attempt.hook))
    }
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

/// Loads and attaches one attempt; the seam between the choice of hook and the kernel.
pub trait Kernel {
    type Attachment;
    type Error: fmt::Display;
    fn attach(
        &mut self,
        probe: &'static ProbeSpec,
        attempt: &Attempt,
    ) -> Result<Self::Attachment, Self::Error>;
}

/// How a probe ended up: attached with a hook, or not attached and why.
pub enum Outcome<A> {
    Attached { hook: Hook, attachment: A },
    Missed { reason: String },
}

/// Why every attempt of a probe failed, one `hook(target): reason` per attempt.
struct Failures(Vec<String>);

impl fmt::Display for Failures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join("; "))
    }
}

/// Tries the probe's hooks in order and keeps the first that attaches.
pub fn attach_first<K: Kernel>(
    kernel: &mut K,
    features: &KernelFeatures,
    choice: &HookChoice,
    probe: &'static ProbeSpec,
) -> Outcome<K::Attachment> {
    if probe.needs_modules && !features.modules {
        return Outcome::Missed {
            reason: "kernel without module support (no /proc/modules)".into(),
        };
    }
    if choice.leaves_out(probe) {
        return Outcome::Missed {
            reason: format!(
                "left out by --collector.ebpf.hooks={}:{NO_HOOK}",
                probe.name
            ),
        };
    }
    let mut failures = Failures(Vec::new());
    for attempt in probe
        .attempts
        .iter()
        .filter(|attempt| choice.allows(probe, attempt.hook))
    {
        let what = match attempt.targets.first() {
            Some(target) => format!("{}({target})", attempt.hook.name()),
            None => attempt.hook.name().to_string(),
        };
        let result = match features.unmet(attempt.needs) {
            Some(unmet) => Err(unmet),
            None => kernel.attach(probe, attempt).map_err(|err| err.to_string()),
        };
        match result {
            Ok(attachment) => {
                return Outcome::Attached {
                    hook: attempt.hook,
                    attachment,
                }
            }
            Err(reason) => failures.0.push(format!("{what}: {reason}")),
        }
    }
    Outcome::Missed {
        reason: failures.to_string(),
    }
}

#[cfg(test)]
mod tests;
