//! `module_load_syscall`: failed init_module / finit_module calls, by syscall, errno and the
//! module the call was about (its entry program names it, where there is kernel BTF).

use std::collections::BTreeMap;

use crate::collectors::ebpf::error::SyscallError;
use crate::collectors::ebpf::hooks::{attempt, named, Attempt, Hook::*, Needs};
use crate::collectors::ebpf::maps::Maps;
use crate::collectors::ebpf::module_events;
use crate::collectors::ebpf::spec::{c_name, ProbeSpec, Shared};
use crate::metrics::{Desc, Samples, Value};
use crate::sync::lock;

/// Only the syscall probe is skipped without module support: its raw `sys_exit` fallback
/// exists on every kernel and would run for every syscall.
pub const SPEC: ProbeSpec = ProbeSpec {
    name: "module_load_syscall",
    object: aya::include_bytes_aligned!("../../../../../ebpf/module_load_syscall.bpf.o"),
    attempts: ATTEMPTS,
    required_by_strict: true,
    target_modules: &[],
    needs_modules: true,
    lost_map: "load_failures_dropped",
    metrics: &[LOAD_FAILURES],
    started: None,
    samples,
    follow: None,
};

/// The per-syscall tracepoints run the program for the two module syscalls only; sys_exit
/// runs it for every syscall on the node, so it comes last here. Each exit program's namer is
/// the matching entry program, which names the module the call is about.
const ATTEMPTS: &[Attempt] = &[
    named(
        attempt(
            Tracepoint,
            "syscall_exit_tp",
            &[
                "syscalls/sys_exit_finit_module",
                "syscalls/sys_exit_init_module",
            ],
            Needs::Nothing,
        ),
        &attempt(
            Tracepoint,
            "syscall_enter_tp",
            &[
                "syscalls/sys_enter_finit_module",
                "syscalls/sys_enter_init_module",
            ],
            Needs::Btf,
        ),
    ),
    named(
        attempt(TpBtf, "syscall_exit_btf", &["sys_exit"], Needs::BtfOnX86_64),
        &attempt(
            TpBtf,
            "syscall_enter_btf",
            &["sys_enter"],
            Needs::BtfOnX86_64,
        ),
    ),
    named(
        attempt(RawTp, "syscall_exit_raw", &["sys_exit"], Needs::BtfOnX86_64),
        &attempt(
            RawTp,
            "syscall_enter_raw",
            &["sys_enter"],
            Needs::BtfOnX86_64,
        ),
    ),
];

const LOAD_FAILURES: Desc = Desc::counter(
    "hpcnode_module_load_failures",
    "Failed init_module / finit_module calls, by syscall, errno name and module; module=\"unknown\" where the probe could not name it, \"other\" past the series cap.",
    None,
);

/// `struct load_failure_key` of module_load_syscall.bpf.c.
#[repr(C)]
#[derive(Clone, Copy)]
struct LoadFailureKey {
    syscall_nr: u32,
    errno: i32,
    module: [u8; 56],
}
// SAFETY: two 32-bit integers and bytes, no padding (4 + 4 + 56 bytes, 4-byte aligned).
unsafe impl aya::Pod for LoadFailureKey {}

/// (syscall number, errno, module: the file name for finit_module, the name in the image for
/// init_module, empty where none was found) -> failures.
pub(in crate::collectors::ebpf) fn load_failures(
    maps: &Maps<'_>,
) -> Result<BTreeMap<(u32, i32, String), u64>, SyscallError> {
    Ok(maps
        .keyed_counts::<LoadFailureKey>("load_failures")?
        .into_iter()
        .map(|(key, count)| ((key.syscall_nr, key.errno, c_name(&key.module)), count))
        .collect())
}

fn samples(maps: &Maps<'_>, shared: &Shared, out: &mut Samples) -> Result<(), SyscallError> {
    let load_failures = load_failures(maps)?;
    let mut names = lock(&shared.module_names);
    let raw_names = load_failures.keys().map(|(_, _, raw)| raw.as_str());
    let labels = module_events::module_labels(raw_names, &mut names);
    let mut failures: BTreeMap<(String, String, String), u64> = BTreeMap::new();
    for ((syscall_nr, errno, raw), count) in &load_failures {
        let key = (
            syscall_name(*syscall_nr),
            module_events::errno_name(*errno),
            labels[raw.as_str()].clone(),
        );
        *failures.entry(key).or_default() += count;
    }
    for ((syscall, errno, module), count) in failures {
        out.push(
            &LOAD_FAILURES,
            vec![
                ("syscall", syscall.into()),
                ("errno", errno.into()),
                ("module", module.into()),
            ],
            Value::Int(count),
        );
    }
    Ok(())
}

/// The module syscalls by this architecture's numbers (what the kernel side records).
fn syscall_name(nr: u32) -> String {
    match i64::from(nr) {
        nr if nr == libc::SYS_init_module => "init_module".into(),
        nr if nr == libc::SYS_finit_module => "finit_module".into(),
        nr => format!("syscall_{nr}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syscall_names_follow_this_architecture() {
        assert_eq!(syscall_name(libc::SYS_finit_module as u32), "finit_module");
        assert_eq!(syscall_name(libc::SYS_init_module as u32), "init_module");
        assert_eq!(syscall_name(9999), "syscall_9999");
    }
}
