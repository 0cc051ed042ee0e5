//! `module_load`: every module load (module:module_load), by module name and taint flags; where
//! BPF is refused, counted by a perf event without names.

use crate::collectors::ebpf::error::SyscallError;
use crate::collectors::ebpf::hooks::{attempt, Attempt, Hook::*, Needs};
use crate::collectors::ebpf::maps::Maps;
use crate::collectors::ebpf::module_events;
use crate::collectors::ebpf::spec::{c_name, ProbeSpec, Shared};
use crate::metrics::{Desc, Samples, Value};
use crate::sync::lock;

pub const SPEC: ProbeSpec = ProbeSpec {
    name: "module_load",
    object: aya::include_bytes_aligned!("../../../../../ebpf/module_load.bpf.o"),
    attempts: ATTEMPTS,
    required_by_strict: true,
    target_modules: &[],
    needs_modules: false,
    lost_map: "module_loads_dropped",
    metrics: &[MODULE_LOADS, MODULE_TAINTED_LOADS],
    started: None,
    samples,
    follow: None,
};

const ATTEMPTS: &[Attempt] = &[
    attempt(TpBtf, "module_load_btf", &["module_load"], Needs::Btf),
    attempt(RawTp, "module_load_raw", &["module_load"], Needs::Btf),
    attempt(
        Tracepoint,
        "module_load_tp",
        &["module/module_load"],
        Needs::Nothing,
    ),
    // Where BPF is refused but perf events are not: counts without module names.
    attempt(Perf, "", &["module/module_load"], Needs::Nothing),
];

const MODULE_LOADS: Desc = Desc::counter(
    "hpcnode_module_loads",
    "Kernel modules loaded (module:module_load), by module; module=\"other\" past the series cap or when counted by perf without names.",
    None,
);
const MODULE_TAINTED_LOADS: Desc = Desc::counter(
    "hpcnode_module_tainted_loads",
    "Module loads that carried a taint flag (unsigned_module, oot_module, proprietary_module, forced_module), by module and flag.",
    None,
);

/// `struct module_load_key` of module_load.bpf.c: (name, taint mask) per module load.
#[repr(C)]
#[derive(Clone, Copy)]
struct ModuleLoadKey {
    name: [u8; 56],
    taints: u32,
}
// SAFETY: plain integers and bytes, no padding (56 + 4 bytes, 4-byte aligned).
unsafe impl aya::Pod for ModuleLoadKey {}

fn samples(maps: &Maps<'_>, shared: &Shared, out: &mut Samples) -> Result<(), SyscallError> {
    let entries = maps
        .keyed_counts::<ModuleLoadKey>("module_loads")?
        .into_iter()
        .map(|(key, count)| (c_name(&key.name), key.taints, count))
        .collect();
    // Loads dropped on a full map, and those perf counted, have no name.
    let unnamed = maps.dropped + maps.perf_count;
    let mut names = lock(&shared.module_names);
    let loads = module_events::module_load_counts(entries, unnamed, &mut names);
    for (module, count) in loads.loads {
        out.push(
            &MODULE_LOADS,
            vec![("module", module.into())],
            Value::Int(count),
        );
    }
    for ((module, taint), count) in loads.tainted {
        out.push(
            &MODULE_TAINTED_LOADS,
            vec![("module", module.into()), ("taint", taint.into())],
            Value::Int(count),
        );
    }
    Ok(())
}
