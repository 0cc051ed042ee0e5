//! The contract of a kernel probe: its [`ProbeSpec`], what the probes share at run time
//! ([`Shared`]) and the helpers their specs decode with. Each probe's spec
//! (`probes/<name>.rs`) fills one in; the loader and the collector only ask it.

use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use super::error::SyscallError;
use super::hooks::Attempt;
use super::kernel_log::KernelLogCounts;
use super::maps::{Attached, Maps};
use super::module_events::ModuleNames;
use crate::metrics::{Desc, Samples};
use crate::vfio_holder_events::HolderEvents;

/// One kernel probe: its object, its hooks in the order tried, and what its maps yield.
pub struct ProbeSpec {
    /// The probe's name in labels, logs and `--collector.ebpf.hooks`.
    pub name: &'static str,
    /// Its compiled object (ebpf/*.bpf.o, rebuilt by ebpf/build.sh), aligned for the ELF parser.
    pub object: &'static [u8],
    /// Its hooks, cheapest first: the first that attaches wins.
    pub attempts: &'static [Attempt],
    /// Whether `--collector.ebpf.strict` requires it: not for hooks a node may rightly lack.
    pub required_by_strict: bool,
    /// The loadable modules whose functions its hooks target: it attaches while one of them is
    /// loaded ([`super::late_attach`]).
    pub target_modules: &'static [&'static str],
    /// Pointless on a kernel without module support: skipped there.
    pub needs_modules: bool,
    /// The per-CPU array counting the events its kernel side could not record.
    pub lost_map: &'static str,
    /// The metrics only it yields (their `Desc`s, in the collector's list in this order).
    pub metrics: &'static [Desc],
    /// What it starts in user space once attached (a thread draining a ring buffer).
    pub started: Option<Starter>,
    /// Reads its maps (or perf count) and pushes its samples.
    pub samples: Sampler,
    /// Told each time its programs attach (with its maps) or detach (`None`): for a probe whose
    /// maps another collector reads.
    pub follow: Option<Follower>,
}

/// [`ProbeSpec::started`]: called once the probe attached, with what it attached.
pub type Starter = fn(Attached<'_>, &Shared) -> Result<(), SyscallError>;
/// [`ProbeSpec::samples`]: called at every scrape of an attached (or detached) probe.
pub type Sampler = fn(&Maps<'_>, &Shared, &mut Samples) -> Result<(), SyscallError>;
/// [`ProbeSpec::follow`].
pub type Follower = fn(Option<&Maps<'_>>, &Shared) -> Result<(), SyscallError>;

impl fmt::Display for ProbeSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

impl fmt::Debug for ProbeSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

/// A probe is its name: specs are consts, so their addresses may differ.
impl PartialEq for ProbeSpec {
    fn eq(&self, other: &ProbeSpec) -> bool {
        self.name == other.name
    }
}

/// What the probes' user-space sides share: the kernel log counts (fed by a thread), the
/// module names the module probes' labels are capped by, and where the vfio holder probe
/// hands its set to the `pci` collector.
pub struct Shared {
    pub kernel_log: Arc<KernelLogCounts>,
    pub module_names: Mutex<ModuleNames>,
    pub vfio_holder_events: Arc<HolderEvents>,
}

impl Shared {
    /// Driver health events name their RDMA devices from `sysfs`.
    pub fn new(sysfs: &Path, vfio_holder_events: Arc<HolderEvents>) -> Shared {
        Shared {
            kernel_log: KernelLogCounts::on(sysfs),
            module_names: Mutex::default(),
            vfio_holder_events,
        }
    }
}

/// How many metrics the probes of `registry` yield.
pub const fn metric_count(registry: &[&ProbeSpec]) -> usize {
    let mut count = 0;
    let mut probe = 0;
    while probe < registry.len() {
        count += registry[probe].metrics.len();
        probe += 1;
    }
    count
}

/// `first`, then every probe's metrics in registry order: the collector's metric list.
pub const fn metrics<const N: usize>(first: &[Desc], registry: &[&ProbeSpec]) -> [Desc; N] {
    let mut all = [first[0]; N];
    let mut n = 0;
    while n < first.len() {
        all[n] = first[n];
        n += 1;
    }
    let mut probe = 0;
    while probe < registry.len() {
        let mut metric = 0;
        while metric < registry[probe].metrics.len() {
            all[n] = registry[probe].metrics[metric];
            n += 1;
            metric += 1;
        }
        probe += 1;
    }
    assert!(n == N, "N is not the number of metrics");
    all
}

/// The label of an event whose device the kernel did not give (a NULL `struct device`).
pub(super) const NO_DEVICE: &str = "unknown";

pub(super) fn device_label(name: &str) -> String {
    if name.is_empty() {
        NO_DEVICE.into()
    } else {
        name.into()
    }
}

/// The text before the first NUL of a fixed-size name the kernel side filled.
pub(super) fn c_name(bytes: &[u8]) -> String {
    let len = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..len]).into_owned()
}

/// `struct device_event_key` of ebpf/include/device_name.h.
#[repr(C)]
#[derive(Clone, Copy)]
struct DeviceEventKey {
    device: [u8; 48],
    detail: u32,
}
// SAFETY: bytes and a 32-bit integer, no padding (48 + 4 bytes, 4-byte aligned).
unsafe impl aya::Pod for DeviceEventKey {}

/// (device name, detail) -> events of a device_name.h count hash; the name is empty where the
/// kernel passed no device.
pub(super) fn device_events(
    maps: &Maps<'_>,
    map: &str,
) -> Result<Vec<(String, u32, u64)>, SyscallError> {
    Ok(maps
        .keyed_counts::<DeviceEventKey>(map)?
        .into_iter()
        .map(|(key, count)| (c_name(&key.device), key.detail, count))
        .collect())
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::metrics::Samples;

    /// The exposition lines of what a probe pushed.
    pub(crate) fn exposition(samples: Samples) -> Vec<String> {
        let text = crate::metrics::encode(samples, crate::metrics::Format::PrometheusText);
        text.unwrap()
            .lines()
            .filter(|line| !line.starts_with('#'))
            .map(str::to_string)
            .collect()
    }
}
