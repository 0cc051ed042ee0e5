//! `module_sig_check`: module signature verdicts (the return of module_sig_check or
//! mod_verify_sig), by module and result.

use std::collections::BTreeMap;

use crate::collectors::ebpf::error::SyscallError;
use crate::collectors::ebpf::hooks::{attempt, named, Attempt, Hook::*, Needs};
use crate::collectors::ebpf::maps::Maps;
use crate::collectors::ebpf::module_events;
use crate::collectors::ebpf::spec::{c_name, ProbeSpec, Shared};
use crate::metrics::{Desc, Samples, Value};
use crate::sync::lock;

pub const SPEC: ProbeSpec = ProbeSpec {
    name: "module_sig_check",
    object: aya::include_bytes_aligned!("../../../../../ebpf/module_sig_check.bpf.o"),
    attempts: ATTEMPTS,
    required_by_strict: true,
    target_modules: &[],
    needs_modules: false,
    lost_map: "signature_checks_dropped",
    metrics: &[SIGNATURE_CHECKS],
    started: None,
    samples,
    follow: None,
};

/// fexit reads the image under check from the function's arguments; a kretprobe sees only the
/// return value, so its namer, a kprobe on the same function, reads it at the call.
const ATTEMPTS: &[Attempt] = &[
    attempt(Fexit, "sig_check_fexit", &["module_sig_check"], Needs::Btf),
    attempt(Fexit, "verify_sig_fexit", &["mod_verify_sig"], Needs::Btf),
    named(
        attempt(
            Kretprobe,
            "sig_check_kretprobe",
            &["module_sig_check"],
            Needs::X86_64,
        ),
        &attempt(
            Kprobe,
            "sig_check_kprobe",
            &["module_sig_check"],
            Needs::Btf,
        ),
    ),
    named(
        attempt(
            Kretprobe,
            "sig_check_kretprobe",
            &["mod_verify_sig"],
            Needs::X86_64,
        ),
        &attempt(Kprobe, "verify_sig_kprobe", &["mod_verify_sig"], Needs::Btf),
    ),
];

const SIGNATURE_CHECKS: Desc = Desc::counter(
    "hpcnode_module_signature_checks",
    "Module signature verdicts (return of module_sig_check or mod_verify_sig), by module and result; module=\"unknown\" where the probe could not name it, \"other\" past the series cap.",
    None,
);

/// `struct signature_key` of module_sig_check.bpf.c.
#[repr(C)]
#[derive(Clone, Copy)]
struct SignatureKey {
    ret: i32,
    module: [u8; 56],
}
// SAFETY: a 32-bit integer and bytes, no padding (4 + 56 bytes, 4-byte aligned).
unsafe impl aya::Pod for SignatureKey {}

/// (return value, module name in the image) -> count; the name is empty where none was found.
fn signature_returns(maps: &Maps<'_>) -> Result<BTreeMap<(i32, String), u64>, SyscallError> {
    Ok(maps
        .keyed_counts::<SignatureKey>("signature_checks")?
        .into_iter()
        .map(|(key, count)| ((key.ret, c_name(&key.module)), count))
        .collect())
}

fn samples(maps: &Maps<'_>, shared: &Shared, out: &mut Samples) -> Result<(), SyscallError> {
    let returns = signature_returns(maps)?;
    let mut names = lock(&shared.module_names);
    for ((module, result), count) in module_events::signature_counts(&returns, &mut names) {
        out.push(
            &SIGNATURE_CHECKS,
            vec![("module", module.into()), ("result", result.into())],
            Value::Int(count),
        );
    }
    Ok(())
}
