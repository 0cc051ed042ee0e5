use super::*;
use crate::test_strategies::{text, GLOB_TOKENS, MODULE_NAME};
use proptest::collection::vec;
use proptest::prelude::*;

const MODPROBE_TOKENS: &[&str] = &[
    "blacklist",
    "install",
    "options",
    "alias",
    "#",
    " ",
    "\t",
    "\n",
    "\\\n",
    "\\",
    "-",
    "mlx5_ib",
    "/bin/false",
    "true",
    "&&",
];

/// fnmatch by its definition, tried every way: exponential, for short inputs only.
fn reference_match(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.first() {
        None => text.is_empty(),
        Some(b'*') => (0..=text.len()).any(|skip| reference_match(&pattern[1..], &text[skip..])),
        Some(b'[') if !text.is_empty() => match class_match(pattern, 0, text[0]) {
            Some(Some(after)) => reference_match(&pattern[after..], &text[1..]),
            Some(None) => false,
            None => reference_match(&pattern[1..], &text[1..]) && text[0] == b'[',
        },
        Some(&c) => {
            text.first().is_some_and(|&t| c == b'?' || c == t)
                && reference_match(&pattern[1..], &text[1..])
        }
    }
}

/// A modprobe.d line and the rule it makes, if any.
fn written_line() -> impl Strategy<Value = (String, Option<Rule>)> {
    let module = MODULE_NAME.prop_map(|name| name.replace('_', "-"));
    let command = vec("[a-z/=-]{1,10}", 1..5);
    prop_oneof![
        module.clone().prop_map(|module| (
            format!("blacklist {module}"),
            Some(Rule {
                module: module_key(&module),
                action: Action::Blacklist
            }),
        )),
        (module.clone(), command, any::<bool>()).prop_map(|(module, words, continued)| {
            let separator = if continued { " \\\n  " } else { " " };
            let line = format!("install\t{module}{separator}{}", words.join("  "));
            let rule = Rule {
                module: module_key(&module),
                action: Action::Install(words.join(" ")),
            };
            (line, Some(rule))
        }),
        module.prop_map(|module| (format!("options {module} debug=1"), None)),
        // No backslash: one at the end would continue the comment onto the next line.
        r"# [ -\[\]-~]{0,30}".prop_map(|comment| (comment, None)),
    ]
}

proptest! {
    #[test]
    fn glob_matches_as_fnmatch_defines_it(
        pattern in vec(prop::sample::select(GLOB_TOKENS), 0..8),
        text in vec(prop::sample::select(&[b'a', b'b', b'[', b']', b'-', b'!'][..]), 0..8),
    ) {
        let pattern = pattern.concat();
        prop_assert_eq!(
            glob_match(pattern.as_bytes(), &text),
            reference_match(pattern.as_bytes(), &text)
        );
    }

    #[test]
    fn any_file_gives_rules_on_module_names(text in text(MODPROBE_TOKENS)) {
        for rule in parse_rules(&text) {
            prop_assert!(!rule.module.is_empty());
            prop_assert!(!rule.module.contains(['-', ' ', '\n']), "{:?}", rule.module);
            rule.action.disables();
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn written_rules_read_back(lines in vec(written_line(), 0..16)) {
        let text: String = lines.iter().map(|(line, _)| format!("{line}\n")).collect();
        let expected: Vec<Rule> = lines.into_iter().filter_map(|(_, rule)| rule).collect();
        prop_assert_eq!(parse_rules(&text), expected);
    }
}
