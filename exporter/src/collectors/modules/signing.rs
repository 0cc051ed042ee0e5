//! Module signature enforcement, lockdown and Secure Boot.

use super::*;

const SECURE_BOOT_VARIABLE: &str = "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c";

impl Read<'_> {
    pub(super) fn signing(&mut self) {
        let sysfs = self.collector.sysfs.clone();
        // Kernels without CONFIG_MODULE_SIG have no such parameter: no series, not an error.
        if let Some(params) = self.dir(&sysfs, "module/module/parameters") {
            let path = params.path("sig_enforce");
            let enforce =
                params
                    .read("sig_enforce", &mut self.reader)
                    .and_then(|text| match text {
                        "Y" => Ok(1),
                        "N" => Ok(0),
                        _ => Err(SysfsError::parse(&path, "expected Y or N", text)),
                    });
            if let Some(enforce) = self.out.optional(enforce) {
                self.push(&SIG_ENFORCE, Vec::new(), enforce);
            }
        }

        // Absent before Linux 5.4 or with securityfs unmounted: no series, not an error.
        if let Some(security) = self.dir(&sysfs, "kernel/security") {
            let path = security.path("lockdown");
            let modes = security
                .read("lockdown", &mut self.reader)
                .and_then(|text| {
                    let reason = "expected modes with one in [brackets]";
                    parse_lockdown(text).ok_or_else(|| SysfsError::parse(&path, reason, text))
                });
            for (mode, active) in self.out.optional(modes).unwrap_or_default() {
                let labels = vec![("mode", mode.into())];
                self.push(&LOCKDOWN_MODE, labels, u64::from(active));
            }
        }
    }

    pub(super) fn secure_boot(&mut self) {
        let sysfs = self.collector.sysfs.clone();
        if let Some(enabled) = self.secure_boot_enabled(&sysfs) {
            self.push(&SECURE_BOOT, Vec::new(), enabled);
        }
    }

    /// Secure Boot from the EFI variable: 4 attribute bytes, then 1 data byte (1 = on). No EFI
    /// (BIOS boot), or efivarfs not mounted: unknown, no series. EFI without the variable:
    /// firmware without Secure Boot, so off.
    fn secure_boot_enabled(&mut self, sysfs: &Path) -> Option<u64> {
        let efi = self.dir(sysfs, "firmware/efi")?;
        let efivars = self.out.optional(efi.subdir("efivars"))?;
        let path = efivars.path(SECURE_BOOT_VARIABLE);
        let enabled = efivars
            .read_bytes(SECURE_BOOT_VARIABLE, &mut self.reader)
            .and_then(|bytes| match bytes {
                [_, _, _, _, data @ (0 | 1)] => Ok(u64::from(*data)),
                _ => Err(SysfsError::unparsed(
                    path,
                    "expected 4 attribute bytes and a 0 or 1",
                    bytes.len(),
                )),
            });
        match enabled {
            // An empty efivars directory is an unmounted efivarfs, not a firmware fact.
            Err(err) if err.is_absent() => {
                let entries = self.out.reported(efivars.entries())?;
                for entry in &entries {
                    if let Err(err) = entry.name() {
                        self.error(err);
                    }
                }
                (!entries.is_empty()).then_some(0)
            }
            enabled => self.out.reported(enabled),
        }
    }
}

/// `none [integrity] confidentiality` -> each mode and whether it is the active one; `None`
/// unless exactly one mode is in brackets.
pub(crate) fn parse_lockdown(text: &str) -> Option<Vec<(String, bool)>> {
    let modes: Vec<(String, bool)> = text
        .split_whitespace()
        .map(
            |word| match word.strip_prefix('[').and_then(|w| w.strip_suffix(']')) {
                Some(active) => (active.to_string(), true),
                None => (word.to_string(), false),
            },
        )
        .collect();
    let valid = modes.iter().filter(|(_, active)| *active).count() == 1
        && modes
            .iter()
            .all(|(mode, _)| !mode.is_empty() && mode.chars().all(|c| c.is_ascii_lowercase()));
    valid.then_some(modes)
}
