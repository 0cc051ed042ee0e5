//! The choice of a probe's hook: `--collector.ebpf.hooks` and the first attempt that attaches
//! on the running kernel (each probe lists its own, cheapest first, in its [`ProbeSpec`]). The
//! kernel itself is behind [`Kernel`], so the choice is tested without root.

use std::fmt;

use super::hooks::{Attempt, Hook, KernelFeatures};
use super::spec::ProbeSpec;

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
