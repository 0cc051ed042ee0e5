//! A device without a driver: the modules whose `modules.alias` patterns match its modalias,
//! and the modprobe.d rules on them, with what they are read from kept while it stays the same.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::kernel::modprobe;
use crate::kernel::release::checked_release;
use crate::metrics::{Labels, Value};
use crate::sysfs::SysDir;

use super::{driver_modules, Read, UNBOUND_ALIAS_MODULE, UNBOUND_ALIAS_MODULES};

/// Real `modules.alias` files are 1 to 2 MiB, read once per unbound device, by up to four
/// units at once.
const MODULES_ALIAS_LIMIT: usize = 16 << 20;
/// Candidate modules kept per unbound device; more go to one `other` series.
const MAX_ALIAS_MODULES: usize = 8;

impl Read<'_> {
    /// For a device without a driver: the modules whose aliases match its modalias, and the
    /// modprobe.d rules on them.
    pub(super) fn alias_modules(&mut self, dir: &SysDir, labels: &Labels) {
        let modalias = self.unit.text(dir, "modalias");
        let modalias = modalias.map(str::to_string);
        let Some(modalias) = self.unit.optional(modalias) else {
            return;
        };
        let Some(aliases) = self.modules_alias() else {
            return;
        };
        let modules = driver_modules::matching_modules(&aliases, &modalias);
        self.push(
            &UNBOUND_ALIAS_MODULES,
            labels.iter().cloned(),
            Value::Int(modules.len() as u64),
        );
        let rules = self.modprobe_rules();
        let mut series: BTreeMap<(String, String, bool), u64> = BTreeMap::new();
        for (index, module) in modules.iter().enumerate() {
            let key = modprobe::module_key(module);
            let entry = if index < MAX_ALIAS_MODULES {
                let install = rules
                    .install_command(&key)
                    .map(str::to_string)
                    .unwrap_or_default();
                (module.to_string(), install, rules.blacklist.contains(&key))
            } else {
                ("other".to_string(), String::new(), false)
            };
            *series.entry(entry).or_default() += 1;
        }
        for ((module, install, blacklisted), count) in series {
            let mut labels = labels.clone();
            labels.extend([
                ("module", module.into()),
                ("install", install.into()),
                ("blacklisted", if blacklisted { "1" } else { "0" }.into()),
            ]);
            self.push(&UNBOUND_ALIAS_MODULE, labels, Value::Int(count));
        }
    }

    /// `<rootfs>/lib/modules/<release>/modules.alias`, release from procfs.
    fn modules_alias(&mut self) -> Option<Arc<String>> {
        let collector = self.collector;
        let kernel = (self.unit).reported(SysDir::open(&collector.procfs, "sys/kernel"))?;
        let release = self.unit.unheld(&kernel, "osrelease").map(str::to_string);
        let release = self.unit.optional(release)?;
        let release = (self.unit).reported(checked_release(&kernel.path("osrelease"), &release))?;
        let dir = self.unit.reported(SysDir::open(
            &collector.rootfs,
            format!("lib/modules/{release}"),
        ))?;
        let key = (release, self.unit.reported(dir.stamp("modules.alias"))?);
        if let Some(aliases) = collector.aliases.get(&key) {
            return Some(aliases);
        }
        let bytes = self
            .unit
            .reported(dir.read_file("modules.alias", MODULES_ALIAS_LIMIT))?;
        // Valid UTF-8 (as depmod writes it) is kept without a copy.
        let text = String::from_utf8(bytes)
            .unwrap_or_else(|invalid| String::from_utf8_lossy(invalid.as_bytes()).into_owned());
        Some(collector.aliases.keep(key, text))
    }

    /// The rules of the effective modprobe.d files (kmod's precedence and masking). Rules read
    /// with errors are not kept, so that each scrape reports them.
    fn modprobe_rules(&mut self) -> Arc<driver_modules::ModprobeRules> {
        let (rootfs, kept) = (&self.collector.rootfs, &self.collector.modprobe_rules);
        // Errors here are those the read below meets again, and reports.
        let mut stamp_errors = Vec::new();
        let stamps = modprobe::config_stamps(rootfs, &mut stamp_errors);
        if stamp_errors.is_empty() {
            if let Some(rules) = kept.get(&stamps) {
                return rules;
            }
        }
        let mut errors = Vec::new();
        let files = modprobe::read_config(rootfs, &mut errors);
        let rules = driver_modules::ModprobeRules::from_config(files);
        if errors.is_empty() && stamp_errors.is_empty() {
            return kept.keep(stamps, rules);
        }
        for err in errors {
            self.error(err);
        }
        Arc::new(rules)
    }
}
