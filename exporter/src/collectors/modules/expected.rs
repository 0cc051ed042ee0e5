//! Expected modules: loaded, built in, or held back by a modprobe.d or command-line rule.

use super::*;

impl Read<'_> {
    pub(super) fn expected(&mut self) {
        let Some(procfs) = self.procfs() else {
            return;
        };
        let Some(modules) = self.loaded_modules(&procfs) else {
            return;
        };
        let modules = modules.list();
        let live: HashSet<&str> = modules
            .iter()
            .filter(|m| m.state == "Live")
            .map(|m| m.name.as_str())
            .collect();
        let listed: HashSet<&str> = modules.iter().map(|m| m.name.as_str()).collect();
        let builtin_index = self.builtin_index(&procfs);
        let sysfs = self.collector.sysfs.clone();
        let sys_module = self.dir(&sysfs, "module");
        let expected = self.collector.expected.clone();

        for module in &expected {
            let builtin = !listed.contains(module.as_str())
                && (builtin_index.contains(module)
                    || sys_module
                        .as_ref()
                        .is_some_and(|dir| self.is_builtin_in_sysfs(dir, module)));
            let loaded = builtin || live.contains(module.as_str());
            let labels = vec![("module", module.clone().into())];
            self.push(&EXPECTED_LOADED, labels.clone(), u64::from(loaded));
            self.push(&EXPECTED_BUILTIN, labels, u64::from(builtin));
        }

        let mut rules = self.modprobe_rules(&expected);
        rules.extend(self.cmdline_rules(&procfs, &expected));
        for rule in rules {
            let labels = vec![
                ("module", rule.module.into()),
                ("rule", rule.rule.into()),
                ("file", rule.file.into()),
            ];
            self.push(&MODPROBE_RULE, labels, 1);
        }
    }

    /// Module names in `<rootfs>/lib/modules/<release>/modules.builtin`; empty when absent.
    fn builtin_index(&mut self, procfs: &SysDir) -> HashSet<String> {
        let Some(release) = self.release(procfs) else {
            return HashSet::new();
        };
        let rootfs = self.collector.rootfs.clone();
        let Some(dir) = self.dir(&rootfs, &format!("lib/modules/{release}")) else {
            return HashSet::new();
        };
        let index = dir.read_text_file("modules.builtin", MAX_LIST_BYTES);
        self.out
            .optional(index)
            .map(|text| parse_builtin_index(&text))
            .unwrap_or_default()
    }

    /// A module in `/sys/module` without `initstate` is built in: only loadable modules have
    /// one, and built-in modules appear there when they have parameters or a version.
    fn is_builtin_in_sysfs(&mut self, sys_module: &SysDir, module: &str) -> bool {
        let Some(dir) = self.out.optional(sys_module.subdir(module)) else {
            return false;
        };
        match dir.read("initstate", &mut self.reader).map(|_| ()) {
            Err(err) if err.is_absent() => true,
            initstate => {
                self.out.reported(initstate);
                false
            }
        }
    }

    /// The rules of the effective modprobe.d files that name an expected module.
    fn modprobe_rules(&mut self, expected: &[String]) -> BTreeSet<ModprobeRule> {
        let mut errors = Vec::new();
        let files = modprobe::read_config(&self.collector.rootfs, &mut errors);
        for err in errors {
            self.error(err);
        }
        let mut rules = BTreeSet::new();
        for file in files {
            for rule in file.rules {
                let kind = match &rule.action {
                    Action::Blacklist => "blacklist",
                    install if install.disables() => "install_disabled",
                    Action::Install(_) => "install",
                };
                // kmod compares blacklist entries by name and install patterns by fnmatch.
                let names = |module: &&String| match rule.action {
                    Action::Blacklist => **module == rule.module,
                    Action::Install(_) => glob_match(rule.module.as_bytes(), module.as_bytes()),
                };
                for module in expected.iter().filter(names) {
                    rules.insert(ModprobeRule {
                        module: module.clone(),
                        rule: kind,
                        file: file.path.clone(),
                    });
                }
            }
        }
        rules
    }

    /// `modprobe.blacklist=` (kmod honours it) and `module_blacklist=` (the kernel refuses the
    /// load itself) on the kernel command line.
    fn cmdline_rules(&mut self, procfs: &SysDir, expected: &[String]) -> Vec<ModprobeRule> {
        let Some(text) = self.out.reported(procfs.read("cmdline", &mut self.reader)) else {
            return Vec::new();
        };
        parse_cmdline_blacklists(text)
            .into_iter()
            .filter(|(module, _)| expected.contains(module))
            .map(|(module, rule)| ModprobeRule {
                module,
                rule,
                file: "/proc/cmdline".to_string(),
            })
            .collect()
    }
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct ModprobeRule {
    module: String,
    rule: &'static str,
    /// Where the rule is, as a path on the node (`/etc/modprobe.d/mlx5.conf`, `/proc/cmdline`).
    file: String,
}

/// `kernel/drivers/vfio/pci/vfio-pci.ko` -> `vfio_pci`, the name the kernel uses.
pub(crate) fn parse_builtin_index(text: &str) -> HashSet<String> {
    text.lines()
        .filter_map(|line| line.trim().rsplit('/').next())
        .filter_map(|file| file.strip_suffix(".ko"))
        .map(modprobe::module_key)
        .collect()
}

/// The modules in `modprobe.blacklist=a,b` and `module_blacklist=a,b` on the kernel command
/// line, with the rule that names them.
pub(crate) fn parse_cmdline_blacklists(text: &str) -> Vec<(String, &'static str)> {
    let mut rules = Vec::new();
    for parameter in cmdline::parameters(text) {
        let rule = if parameter.is("modprobe.blacklist") {
            "blacklist"
        } else if parameter.is("module_blacklist") {
            "module_blacklist"
        } else {
            continue;
        };
        let list = parameter.value.unwrap_or_default();
        for module in list.split(',').filter(|m| !m.is_empty()) {
            rules.push((modprobe::module_key(module), rule));
        }
    }
    rules
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An install pattern names every expected module it matches, as kmod's fnmatch does; a
    /// blacklist entry only the module of that exact name.
    #[test]
    fn install_patterns_match_as_kmod_matches_them() {
        let root = tempfile::tempdir().unwrap();
        let conf = root.path().join("etc/modprobe.d/ofed.conf");
        std::fs::create_dir_all(conf.parent().unwrap()).unwrap();
        std::fs::write(&conf, "install mlx[4-5]-ib /bin/false\nblacklist mlx5*\n").unwrap();
        let collector = ModulesCollector::new(
            &Host::of_tree(root.path()),
            vec!["mlx5_ib".into(), "mlx5_core".into(), "mlx4_ib".into()],
            10,
        );
        let mut out = Output::default();
        let mut read = Read {
            collector: &collector,
            reader: AttributeReader::default(),
            out: &mut out,
        };
        let rules: Vec<(String, &str)> = (read.modprobe_rules(&collector.expected).into_iter())
            .map(|rule| (rule.module, rule.rule))
            .collect();
        assert_eq!(
            rules,
            [
                ("mlx4_ib".to_string(), "install_disabled"),
                ("mlx5_ib".to_string(), "install_disabled")
            ]
        );
    }
}
