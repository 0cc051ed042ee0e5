//! Which kernel modules would claim a device: `modules.alias` patterns matched against the
//! device's `modalias` the way modprobe matches them (fnmatch globs), and the modprobe.d
//! rules that change what loading them does (`install` runs a command instead, `blacklist`
//! ignores the module's own aliases).

use std::collections::HashSet;

use crate::kernel::modprobe::{glob_match, Action, ConfigFile};

/// One `alias pci:... module` line.
pub struct ModuleAlias<'a> {
    pub pattern: &'a str,
    pub module: &'a str,
}

/// The PCI entries of a `modules.alias` file.
pub fn pci_aliases(text: &str) -> impl Iterator<Item = ModuleAlias<'_>> {
    text.lines().filter_map(|line| {
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (Some("alias"), Some(pattern), Some(module)) if pattern.starts_with("pci:") => {
                Some(ModuleAlias { pattern, module })
            }
            _ => None,
        }
    })
}

/// Modules matching a modalias, each once, in file order.
pub fn matching_modules<'a>(aliases: &'a str, modalias: &str) -> Vec<&'a str> {
    let mut modules: Vec<&str> = Vec::new();
    for alias in pci_aliases(aliases) {
        if glob_match(alias.pattern.as_bytes(), modalias.as_bytes())
            && !modules.contains(&alias.module)
        {
            modules.push(alias.module);
        }
    }
    modules
}

/// What modprobe.d says about modules.
#[derive(Debug, Default)]
pub struct ModprobeRules {
    /// `install` rules in the order kmod reads them: the module name (an fnmatch pattern)
    /// and the command run instead of loading a module it matches.
    install: Vec<(String, String)>,
    /// Module names, matched exactly (kmod compares them with `streq`).
    pub blacklist: HashSet<String>,
}

impl ModprobeRules {
    /// The rules of the effective configuration files, applied in their order.
    pub fn from_config(files: Vec<ConfigFile>) -> Self {
        let mut rules = ModprobeRules::default();
        for rule in files.into_iter().flat_map(|file| file.rules) {
            match rule.action {
                Action::Install(command) => rules.install.push((rule.module, command)),
                Action::Blacklist => {
                    rules.blacklist.insert(rule.module);
                }
            }
        }
        rules
    }

    /// The command modprobe runs instead of loading `module` (in the kernel's spelling): that
    /// of the first `install` rule whose name, a pattern, matches it. kmod takes the first
    /// (libkmod-module.c, kmod_module_get_install_commands: `fnmatch(modname, mod->name, 0)`,
    /// then `break`), as module-init-tools did.
    pub fn install_command(&self, module: &str) -> Option<&str> {
        self.install
            .iter()
            .find(|(pattern, _)| glob_match(pattern.as_bytes(), module.as_bytes()))
            .map(|(_, command)| command.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONNECTX5: &str = "pci:v000015B3d00001017sv000015B3sd00000020bc02sc07i00";

    #[test]
    fn modalias_globs_as_modprobe_matches_them() {
        let aliases = "# Aliases extracted from modules themselves.\n\
            alias pci:v000015B3d00001017sv*sd*bc*sc*i* mlx5_core\n\
            alias pci:v000015B3d0000101[79]sv*sd*bc*sc*i* mlx5_core\n\
            alias pci:v000015B3d*sv*sd*bc02sc07i* mlx5_ib_oem\n\
            alias pci:v000015B3d00001003sv*sd*bc*sc*i* mlx4_core\n\
            alias usb:v*p*d*dc*dsc*dp*ic*isc*ip*in* usbcore\n";
        assert_eq!(
            matching_modules(aliases, CONNECTX5),
            ["mlx5_core", "mlx5_ib_oem"]
        );
        assert!(matching_modules(
            aliases,
            "pci:v000010DEd00001EB8sv000010DEsd000012A2bc03sc02i00"
        )
        .is_empty());
    }

    #[test]
    fn the_first_matching_install_rule_wins_as_in_kmod() {
        let file = |path: &str, text| ConfigFile {
            path: path.to_string(),
            rules: crate::kernel::modprobe::parse_rules(text),
        };
        let rules = ModprobeRules::from_config(vec![
            file(
                "/etc/modprobe.d/a.conf",
                "install mlx5-core /bin/true\nblacklist nouveau\n",
            ),
            file(
                "/lib/modprobe.d/b.conf",
                "install mlx5_core /sbin/modprobe --ignore-install mlx5_core\n\
                 install mlx4_* /bin/false\n",
            ),
        ]);
        assert_eq!(rules.install_command("mlx5_core"), Some("/bin/true"));
        // The module name of an install rule is a pattern.
        assert_eq!(rules.install_command("mlx4_ib"), Some("/bin/false"));
        assert_eq!(rules.install_command("mlx4"), None);
        assert!(rules.blacklist.contains("nouveau"));
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use crate::kernel::modprobe::parse_rules;
    use crate::test_strategies::{lines, text, GLOB_TOKENS, MODULE_NAME};
    use proptest::prelude::*;

    const ALIAS_TOKENS: &[&str] = &[
        "alias ",
        "pci:",
        "v000015B3",
        "d00001017",
        "sv",
        "sd",
        "bc02",
        "sc07",
        "i00",
        "*",
        "?",
        "[",
        "]",
        "!",
        "^",
        "-",
        "0-9",
        " ",
        "\n",
        "mlx5_core",
    ];

    /// A PCI modalias (`pci:v%08Xd%08Xsv%08Xsd%08Xbc%02Xsc%02Xi%02X`) and an alias pattern
    /// that matches it: some fields replaced by `*`, as modpost writes them.
    fn modalias_and_pattern() -> impl Strategy<Value = (String, String)> {
        (any::<[u16; 4]>(), any::<[u8; 3]>(), any::<[bool; 7]>()).prop_map(|(ids, class, wild)| {
            let fields = [
                ("v", format!("{:08X}", ids[0])),
                ("d", format!("{:08X}", ids[1])),
                ("sv", format!("{:08X}", ids[2])),
                ("sd", format!("{:08X}", ids[3])),
                ("bc", format!("{:02X}", class[0])),
                ("sc", format!("{:02X}", class[1])),
                ("i", format!("{:02X}", class[2])),
            ];
            let modalias: String = fields
                .iter()
                .map(|(key, value)| format!("{key}{value}"))
                .collect();
            let pattern: String = fields
                .iter()
                .zip(wild)
                .map(|((key, value), wild)| format!("{key}{}", if wild { "*" } else { value }))
                .collect();
            (format!("pci:{modalias}"), format!("pci:{pattern}"))
        })
    }

    proptest! {
        #[test]
        fn any_aliases_and_modalias_never_panic(aliases in text(ALIAS_TOKENS), modalias in text(ALIAS_TOKENS)) {
            for module in matching_modules(&aliases, &modalias) {
                prop_assert!(aliases.contains(module));
            }
        }

        #[test]
        fn a_generated_alias_matches_its_modalias(
            (modalias, pattern) in modalias_and_pattern(),
            module in MODULE_NAME,
            others in lines("alias pci:v0000(1|2)[0-9A-F]{3}d\\*sv\\*sd\\*bc\\*sc\\*i\\* [a-z_]{1,8}", 8),
        ) {
            let aliases = format!("{others}alias {pattern} {module}\n");
            prop_assert!(matching_modules(&aliases, &modalias).contains(&module.as_str()));
            // Vendors 1xxx and 2xxx (the other lines) match no device of vendor 0xxx.
            if modalias.as_bytes()[10] == b'0' {
                prop_assert_eq!(matching_modules(&aliases, &modalias), [module.as_str()]);
            }
        }

        #[test]
        fn install_rules_never_panic(config in text(&["install ", "blacklist ", "*", "?", "[", "]", "mlx5_core", " ", "\n"]), module in text(GLOB_TOKENS)) {
            let rules = ModprobeRules::from_config(vec![ConfigFile {
                path: "/etc/modprobe.d/x.conf".to_string(),
                rules: parse_rules(&config),
            }]);
            if let Some(command) = rules.install_command(&module) {
                prop_assert!(config.contains(command) || command.contains(' '));
            }
        }
    }
}
