//! The kernel's taint flags (kernel/panic.c `taint_flags`): one table, so that every metric
//! spells a flag the same way, as the kernel's TAINT_* name lowercased.

/// One bit of a taint mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaintFlag {
    /// `TAINT_OOT_MODULE` -> `oot_module`.
    pub name: &'static str,
    /// The letter the kernel prints for it (`/proc/modules`, oops reports): `O`.
    pub letter: &'static str,
}

const fn flag(name: &'static str, letter: &'static str) -> TaintFlag {
    TaintFlag { name, letter }
}

/// The flags in bit order: `FLAGS[n]` is bit n of `/proc/sys/kernel/tainted` and of a module's
/// taint mask. Bits past the table show in the raw mask only.
pub const FLAGS: [TaintFlag; 20] = [
    flag("proprietary_module", "P"),
    flag("forced_module", "F"),
    flag("cpu_out_of_spec", "S"),
    flag("forced_rmmod", "R"),
    flag("machine_check", "M"),
    flag("bad_page", "B"),
    flag("user", "U"),
    flag("die", "D"),
    flag("overridden_acpi_table", "A"),
    flag("warn", "W"),
    flag("crap", "C"),
    flag("firmware_workaround", "I"),
    flag("oot_module", "O"),
    flag("unsigned_module", "E"),
    flag("softlockup", "L"),
    flag("livepatch", "K"),
    flag("aux", "X"),
    flag("randstruct", "T"),
    flag("test", "N"),
    flag("fwctl", "J"),
];

/// The flags set in a taint mask, in bit order.
pub fn flags_set(mask: u64) -> impl Iterator<Item = &'static TaintFlag> {
    FLAGS
        .iter()
        .enumerate()
        .filter(move |(bit, _)| (mask >> bit) & 1 == 1)
        .map(|(_, flag)| flag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_matches_the_kernels_bits() {
        let bit = |letter| FLAGS.iter().position(|f| f.letter == letter).unwrap();
        // Proprietary 0, forced 1, out-of-tree 12, unsigned 13, live patch 15; 'T' is
        // randstruct (17) and the test taint is 'N' (18).
        assert_eq!(
            [
                bit("P"),
                bit("F"),
                bit("O"),
                bit("E"),
                bit("K"),
                bit("T"),
                bit("N")
            ],
            [0, 1, 12, 13, 15, 17, 18]
        );
        // Seen in qemu: an unsigned module turns 0 into 8192.
        assert_eq!(1u64 << bit("E"), 8192);
    }

    #[test]
    fn flags_set_in_bit_order() {
        let letters = |mask| flags_set(mask).map(|f| f.letter).collect::<String>();
        // 12289 = P, O and E, as on a node with NVIDIA and self-built OFED modules.
        assert_eq!(letters(12289), "POE");
        assert_eq!(letters(0), "");
        // Bits past the table are not named.
        assert_eq!(letters((1 << 40) | (1 << 9)), "W");
    }
}
