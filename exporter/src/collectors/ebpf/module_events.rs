//! What the module probes' raw kernel values mean: errno names, signature verdicts, taint flags,
//! and the cap on per-module series.

use std::collections::{BTreeMap, BTreeSet};

use crate::kernel::taint;

/// Errno names for the values a module load or a signature check can return (asm-generic
/// numbering, shared by x86-64 and arm64); any other value is written `E<n>`.
const ERRNO_NAMES: &[(i32, &str)] = &[
    (1, "EPERM"),
    (2, "ENOENT"),
    (4, "EINTR"),
    (5, "EIO"),
    (7, "E2BIG"),
    (8, "ENOEXEC"),
    (9, "EBADF"),
    (11, "EAGAIN"),
    (12, "ENOMEM"),
    (13, "EACCES"),
    (14, "EFAULT"),
    (16, "EBUSY"),
    (17, "EEXIST"),
    (19, "ENODEV"),
    (22, "EINVAL"),
    (26, "ETXTBSY"),
    (27, "EFBIG"),
    (28, "ENOSPC"),
    (36, "ENAMETOOLONG"),
    (38, "ENOSYS"),
    (61, "ENODATA"),
    (65, "ENOPKG"),
    (74, "EBADMSG"),
    (75, "EOVERFLOW"),
    (95, "EOPNOTSUPP"),
    (126, "ENOKEY"),
    (127, "EKEYEXPIRED"),
    (128, "EKEYREVOKED"),
    (129, "EKEYREJECTED"),
];

/// The name of a positive errno value, e.g. 129 -> `EKEYREJECTED`, 4000 -> `E4000`.
pub fn errno_name(errno: i32) -> String {
    ERRNO_NAMES
        .iter()
        .find(|(value, _)| *value == errno)
        .map_or_else(|| format!("E{errno}"), |(_, name)| (*name).to_string())
}

/// Every `result` label of `hpcnode_module_signature_checks_total`, in output order.
pub const SIGNATURE_RESULTS: [&str; 8] = [
    "ok",
    "key_rejected",
    "unknown_key",
    "bad_message",
    "no_signature",
    "no_crypto",
    "lockdown",
    "other",
];

/// The verdict of a `module_sig_check` / `mod_verify_sig` return value.
pub fn signature_result(ret: i32) -> &'static str {
    match ret {
        0 => "ok",
        -129 => "key_rejected", // EKEYREJECTED: bad signature, or enforcement refused it
        -126 => "unknown_key",  // ENOKEY
        -74 => "bad_message",   // EBADMSG
        -61 => "no_signature",  // ENODATA
        -65 => "no_crypto",     // ENOPKG
        -1 => "lockdown",       // EPERM: lockdown (Secure Boot) refused an unverified module
        _ => "other",
    }
}

/// The taints of a module load worth a series, by letter: proprietary (P), forced (F), out of
/// tree (O), unsigned (E).
const SERIES_TAINTS: [&str; 4] = ["P", "F", "O", "E"];

/// The `taint` labels set in a module's taint mask, in bit order.
pub fn taint_flags(taints: u32) -> impl Iterator<Item = &'static str> {
    taint::flags_set(u64::from(taints))
        .filter(|flag| SERIES_TAINTS.contains(&flag.letter))
        .map(|flag| flag.name)
}

/// Per-module series beyond this many names are summed into `module="other"`.
pub const MAX_MODULE_SERIES: usize = 128;

/// The label value for loads that have no series of their own.
pub const OTHER_MODULE: &str = "other";

/// The label for verdicts and failures whose module the probe could not name (no kernel BTF, an
/// image that is not ELF, a call that began before the probe attached). Not subject to the cap.
pub const UNKNOWN_MODULE: &str = "unknown";

/// A module name as kmod normalizes it (`modname_normalize`): up to the first `.`, so a file
/// name loses its `.ko`, `.ko.xz`, and every `-` as `_` (`snd-pcsp.ko` is `snd_pcsp`). Names
/// from a module image are in that form already.
pub fn normalized_module_name(raw: &str) -> String {
    raw.split('.').next().unwrap_or_default().replace('-', "_")
}

/// Module names admitted to their own series, first come first kept, so a series never moves
/// to `other` once it exists. One set for loads, signature verdicts and load failures, so a
/// module has a series in all three or in none.
#[derive(Debug, Default)]
pub struct ModuleNames {
    admitted: BTreeSet<String>,
}

impl ModuleNames {
    /// The label for `name`: itself while there is room (or it already has a series),
    /// otherwise `other`.
    pub fn label(&mut self, name: &str) -> String {
        if self.admitted.contains(name) || self.admitted.len() < MAX_MODULE_SERIES {
            self.admitted.insert(name.to_string());
            name.to_string()
        } else {
            OTHER_MODULE.to_string()
        }
    }
}

/// The label of each raw name the module probes read (a module name, a file name, or empty),
/// admitted in sorted order so which names get a series does not depend on the kernel's hash
/// order.
pub fn module_labels<'a>(
    raw_names: impl IntoIterator<Item = &'a str>,
    names: &mut ModuleNames,
) -> BTreeMap<&'a str, String> {
    let raw_names: BTreeSet<&str> = raw_names.into_iter().collect();
    raw_names
        .into_iter()
        .map(|raw| {
            let normalized = normalized_module_name(raw);
            let label = if normalized.is_empty() {
                UNKNOWN_MODULE.to_string()
            } else {
                names.label(&normalized)
            };
            (raw, label)
        })
        .collect()
}

/// Signature verdicts as exported: the kernel's (return value, module) -> count entries summed
/// per (module label, result).
pub fn signature_counts(
    entries: &BTreeMap<(i32, String), u64>,
    names: &mut ModuleNames,
) -> BTreeMap<(String, &'static str), u64> {
    let labels = module_labels(entries.keys().map(|(_, raw)| raw.as_str()), names);
    let mut counts = BTreeMap::new();
    for ((ret, raw), count) in entries {
        let key = (labels[raw.as_str()].clone(), signature_result(*ret));
        *counts.entry(key).or_default() += count;
    }
    counts
}

/// Module load counts as exported: loads per module and tainted loads per (module, taint).
#[derive(Debug, Default, PartialEq)]
pub struct ModuleLoadCounts {
    pub loads: BTreeMap<String, u64>,
    pub tainted: BTreeMap<(String, &'static str), u64>,
}

/// Sums the kernel's (name, taint mask) -> count entries into exported series; `dropped`
/// loads (the kernel map was full) count as `other` without taints. Names are admitted in
/// sorted order, so which names get a series does not depend on the kernel's hash order.
pub fn module_load_counts(
    mut entries: Vec<(String, u32, u64)>,
    dropped: u64,
    names: &mut ModuleNames,
) -> ModuleLoadCounts {
    entries.sort();
    let mut counts = ModuleLoadCounts::default();
    for (name, taints, count) in entries {
        let module = names.label(&name);
        for taint in taint_flags(taints) {
            *counts.tainted.entry((module.clone(), taint)).or_default() += count;
        }
        *counts.loads.entry(module).or_default() += count;
    }
    if dropped > 0 {
        *counts.loads.entry(OTHER_MODULE.to_string()).or_default() += dropped;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_names_known_and_unknown() {
        assert_eq!(errno_name(129), "EKEYREJECTED");
        assert_eq!(errno_name(1), "EPERM");
        assert_eq!(errno_name(8), "ENOEXEC");
        assert_eq!(errno_name(17), "EEXIST");
        assert_eq!(errno_name(4000), "E4000");
    }

    #[test]
    fn signature_verdicts() {
        // Returns seen in qemu: 0 for an unsigned module when not enforcing, -129 for a
        // corrupted signature.
        assert_eq!(signature_result(0), "ok");
        assert_eq!(signature_result(-129), "key_rejected");
        assert_eq!(signature_result(-126), "unknown_key");
        assert_eq!(signature_result(-74), "bad_message");
        assert_eq!(signature_result(-61), "no_signature");
        assert_eq!(signature_result(-65), "no_crypto");
        assert_eq!(signature_result(-1), "lockdown");
        assert_eq!(signature_result(-22), "other");
        for result in [0, -129, -126, -74, -61, -65, -1, -22].map(signature_result) {
            assert!(SIGNATURE_RESULTS.contains(&result));
        }
    }

    #[test]
    fn taints_decoded_from_the_tracepoint_bits() {
        // `module_load: pcspkr E` in qemu: 8192 = bit 13.
        assert_eq!(taint_flags(8192).collect::<Vec<_>>(), ["unsigned_module"]);
        // (POE): proprietary, out-of-tree, unsigned; bit 15 (K, livepatch) is not exported.
        let poe = 1 | 1 << 12 | 1 << 13 | 1 << 15;
        assert_eq!(
            taint_flags(poe).collect::<Vec<_>>(),
            ["proprietary_module", "oot_module", "unsigned_module"]
        );
        assert_eq!(taint_flags(2).collect::<Vec<_>>(), ["forced_module"]);
        assert_eq!(taint_flags(0).count(), 0);
    }

    #[test]
    fn module_series_are_capped_and_stable() {
        let mut names = ModuleNames::default();
        let mut entries: Vec<_> = (0..MAX_MODULE_SERIES + 2)
            .map(|i| (format!("mod{i:03}"), 0, 1))
            .collect();
        entries.push(("nvidia".into(), 1 | 1 << 12, 2));
        let counts = module_load_counts(entries, 3, &mut names);
        assert_eq!(counts.loads.len(), MAX_MODULE_SERIES + 1);
        // Sorted admission: mod000..mod127 get series; mod128, mod129, nvidia and the 3
        // dropped loads go to other.
        assert_eq!(counts.loads["mod000"], 1);
        assert_eq!(counts.loads[OTHER_MODULE], 1 + 1 + 2 + 3);
        assert_eq!(
            counts.tainted[&(OTHER_MODULE.into(), "proprietary_module")],
            2
        );
        assert_eq!(counts.tainted[&(OTHER_MODULE.into(), "oot_module")], 2);
        // A later scrape keeps the same names.
        let again = module_load_counts(vec![("mod005".into(), 8192, 4)], 0, &mut names);
        assert_eq!(again.loads["mod005"], 4);
        assert_eq!(again.tainted[&("mod005".into(), "unsigned_module")], 4);
    }

    #[test]
    fn file_names_become_module_names_as_kmod_writes_them() {
        assert_eq!(normalized_module_name("mlx5_ib.ko"), "mlx5_ib");
        assert_eq!(normalized_module_name("mlx5_ib.ko.xz"), "mlx5_ib");
        assert_eq!(normalized_module_name("snd-pcsp.ko.zst"), "snd_pcsp");
        // The lab's variants: pcspkr.badsig.ko is pcspkr.
        assert_eq!(normalized_module_name("pcspkr.badsig.ko"), "pcspkr");
        assert_eq!(normalized_module_name("pcspkr"), "pcspkr");
        assert_eq!(normalized_module_name(""), "");
        assert_eq!(normalized_module_name(".ko"), "");
    }

    #[test]
    fn verdicts_are_summed_per_module_and_result_under_the_shared_cap() {
        let mut names = ModuleNames::default();
        // Loads fill the cap first: mod000..mod127 have series.
        let loads: Vec<_> = (0..MAX_MODULE_SERIES)
            .map(|i| (format!("mod{i:03}"), 0, 1))
            .collect();
        module_load_counts(loads, 0, &mut names);
        let entries = BTreeMap::from([
            ((0, "mod001".to_string()), 2),
            ((-129, "mod001".to_string()), 1),
            ((-74, "mod001".to_string()), 1),   // bad_message
            ((-129, "mlx5_ib".to_string()), 3), // past the cap
            ((-126, "nvidia".to_string()), 1),  // past the cap
            ((-129, String::new()), 4),         // not named
            ((-22, String::new()), 1),
        ]);
        let counts = signature_counts(&entries, &mut names);
        let expected = BTreeMap::from([
            (("mod001".to_string(), "ok"), 2),
            (("mod001".to_string(), "key_rejected"), 1),
            (("mod001".to_string(), "bad_message"), 1),
            ((OTHER_MODULE.to_string(), "key_rejected"), 3),
            ((OTHER_MODULE.to_string(), "unknown_key"), 1),
            ((UNKNOWN_MODULE.to_string(), "key_rejected"), 4),
            ((UNKNOWN_MODULE.to_string(), "other"), 1),
        ]);
        assert_eq!(counts, expected);
    }

    #[test]
    fn file_and_image_names_of_one_module_share_its_series() {
        let mut names = ModuleNames::default();
        let labels = module_labels(
            ["pcspkr.badsig.ko", "pcspkr", "snd-pcsp.ko", ""],
            &mut names,
        );
        assert_eq!(labels["pcspkr.badsig.ko"], "pcspkr");
        assert_eq!(labels["pcspkr"], "pcspkr");
        assert_eq!(labels["snd-pcsp.ko"], "snd_pcsp");
        assert_eq!(labels[""], UNKNOWN_MODULE);
        // Two names admitted, not four: "unknown" does not take a place under the cap.
        let loads: Vec<_> = (0..MAX_MODULE_SERIES)
            .map(|i| (format!("mod{i:03}"), 0, 1))
            .collect();
        let counts = module_load_counts(loads, 0, &mut names);
        assert_eq!(counts.loads[OTHER_MODULE], 2);
    }

    #[test]
    fn same_module_with_different_taints_sums() {
        let mut names = ModuleNames::default();
        let counts = module_load_counts(
            vec![("edu".into(), 0, 1), ("edu".into(), 8192, 2)],
            0,
            &mut names,
        );
        assert_eq!(counts.loads["edu"], 3);
        assert_eq!(counts.tainted[&("edu".into(), "unsigned_module")], 2);
    }
}
