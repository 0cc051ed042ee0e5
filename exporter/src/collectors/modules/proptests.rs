use super::*;
use crate::test_strategies::{text, MODULE_NAME};
use proptest::collection::{btree_set, vec};
use proptest::prelude::*;

const LIST_TOKENS: &[&str] = &[
    " ",
    "\n",
    "mlx5_ib",
    "393216",
    "0",
    "-",
    ",",
    "Live",
    "Loading",
    "Unloading",
    "0x0",
    "(OE)",
    "(",
    ")",
    "+",
    "[",
    "]",
    "none",
    "integrity",
    ".ko",
    "/",
    "kernel/",
    "module_blacklist=",
    "modprobe.blacklist=",
    "\"",
];

/// A `/proc/modules` line (`m_show` in kernel/module) for module `name`: the line, its
/// state and its taint letters.
fn module_line(name: String) -> impl Strategy<Value = (String, &'static str, String)> {
    (
        any::<u64>(),
        prop::option::of(0u32..100),
        "-|([a-z_]{1,8},){1,3}",
        prop::sample::select(&["Live", "Loading", "Unloading"][..]),
        any::<u64>(),
        prop::option::of("[A-Z+-]{1,6}"),
    )
        .prop_map(move |(size, refcount, deps, state, address, taints)| {
            let refcount = refcount.map_or("-".to_string(), |n| n.to_string());
            let mut line = format!("{name} {size} {refcount} {deps} {state} 0x{address:016x}");
            if let Some(taints) = &taints {
                line.push_str(&format!(" ({taints})"));
            }
            let letters = taints.unwrap_or_default().replace(['+', '-'], "");
            (line, state, letters)
        })
}

fn proc_modules() -> impl Strategy<Value = Vec<(String, (String, &'static str, String))>> {
    btree_set(MODULE_NAME, 0..20).prop_flat_map(|names| {
        names
            .into_iter()
            .map(|name| (Just(name.clone()), module_line(name)))
            .collect::<Vec<_>>()
    })
}

proptest! {
    #[test]
    fn any_proc_modules_gives_a_module_or_an_error_per_line(text in text(LIST_TOKENS)) {
        let (modules, errors) = parse_modules(Path::new("modules"), &text);
        let lines = text.lines().filter(|line| !line.trim().is_empty()).count();
        prop_assert_eq!(modules.len() + errors.len(), lines);
        let names: HashSet<&str> = modules.iter().map(|m| m.name.as_str()).collect();
        prop_assert_eq!(names.len(), modules.len());
        for module in &modules {
            prop_assert!(module.taints.chars().all(|c| c.is_ascii_uppercase()));
        }
    }

    #[test]
    fn a_builtin_index_names_its_modules(names in vec(MODULE_NAME, 0..10), dashes: bool) {
        let index = names
            .iter()
            .map(|name| {
                let file = if dashes { name.replace('_', "-") } else { name.clone() };
                format!("kernel/drivers/misc/{file}.ko\n")
            })
            .collect::<String>();
        let parsed = parse_builtin_index(&index);
        prop_assert_eq!(parsed, names.into_iter().collect::<HashSet<_>>());
    }

    #[test]
    fn lockdown_modes_read_back(modes in btree_set("[a-z]{1,16}", 1..5), active in any::<prop::sample::Index>()) {
        let modes: Vec<String> = modes.into_iter().collect();
        let active = active.index(modes.len());
        let text = modes
            .iter()
            .enumerate()
            .map(|(i, mode)| if i == active { format!("[{mode}]") } else { mode.clone() })
            .collect::<Vec<_>>()
            .join(" ");
        let expected: Vec<(String, bool)> = modes
            .into_iter()
            .enumerate()
            .map(|(i, mode)| (mode, i == active))
            .collect();
        prop_assert_eq!(parse_lockdown(&text), Some(expected));
    }

    #[test]
    fn an_expected_module_list_reads_back_in_the_kernels_spelling(names in vec("[a-z][a-z0-9_-]{0,54}", 1..8)) {
        let mut expected: Vec<String> = Vec::new();
        for name in &names {
            let name = name.replace('-', "_");
            if !expected.contains(&name) {
                expected.push(name);
            }
        }
        prop_assert_eq!(parse_module_list(&names.join(", ")), Ok(expected));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn written_proc_modules_read_back(modules in proc_modules(), twice in any::<prop::sample::Index>()) {
        let mut text: String = modules.iter().map(|(_, (line, _, _))| format!("{line}\n")).collect();
        let (read, errors) = parse_modules(Path::new("modules"), &text);
        prop_assert!(errors.is_empty(), "{errors:?}");
        let read: Vec<_> = read.into_iter().map(|m| (m.name, m.state, m.taints)).collect();
        let expected: Vec<_> = modules
            .iter()
            .map(|(name, (_, state, taints))| (name.clone(), *state, taints.clone()))
            .collect();
        prop_assert_eq!(read, expected);
        // A module listed twice is an error; the first listing stays.
        if !modules.is_empty() {
            text.push_str(&modules[twice.index(modules.len())].1 .0);
            let (read, errors) = parse_modules(Path::new("modules"), &text);
            prop_assert_eq!((read.len(), errors.len()), (modules.len(), 1));
        }
    }

    #[test]
    fn other_kernel_lists_never_panic(text in text(LIST_TOKENS)) {
        for module in parse_builtin_index(&text) {
            prop_assert!(!module.contains('-'));
        }
        for (module, _) in parse_cmdline_blacklists(&text) {
            prop_assert!(!module.is_empty() && !module.contains('-'));
        }
        if let Some(modes) = parse_lockdown(&text) {
            prop_assert_eq!(modes.iter().filter(|(_, active)| *active).count(), 1);
        }
        if let Ok(modules) = parse_module_list(&text) {
            prop_assert!(modules.iter().all(|m| !m.is_empty() && !m.contains('-')));
        }
    }
}
