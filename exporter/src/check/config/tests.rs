use super::*;

fn chosen(yaml: &str) -> Result<Vec<Chosen>, String> {
    parse(
        Path::new("/etc/hpcnode_exporter/checks.yml"),
        yaml.as_bytes(),
    )
    .map_err(|err| err.to_string())
}

fn choice<'c>(chosen: &'c [Chosen], name: &str) -> &'c Chosen {
    chosen.iter().find(|c| c.check.name == name).unwrap()
}

fn built_in(chosen: &[Chosen]) -> bool {
    chosen.len() == ALL.len()
        && chosen.iter().zip(&ALL).all(|(c, check)| {
            c.check.name == check.name
                && c.enabled == check.enabled_by_default
                && c.ignore.is_empty()
                && (c.threshold == check.threshold.as_ref().map_or(f64::NAN, |t| t.default)
                    || (c.threshold.is_nan() && check.threshold.is_none()))
        })
}

#[test]
fn no_file_at_the_default_path_is_every_check_as_built_in() {
    let dir = tempfile::tempdir().unwrap();
    let absent = dir.path().join("checks.yml");
    assert!(built_in(&load(&absent, false).unwrap()));
    // Named on the command line, it must be there.
    let err = load(&absent, true).unwrap_err().to_string();
    assert!(err.contains("No such file"), "{err}");
}

#[test]
fn a_file_of_comments_or_without_checks_is_every_check_as_built_in() {
    for yaml in ["", "# nothing\n", "checks: {}\n", "checks:\n"] {
        assert!(built_in(&chosen(yaml).unwrap()), "{yaml:?}");
    }
}

#[test]
fn enabled_threshold_and_ignore_are_taken() {
    let yaml = "checks:\n  pci_link_width:\n    enabled: true\n    threshold: 0.5\n  module_expected:\n    enabled: false\n  pci_driver:\n    ignore: ['0000:3b:00\\.0', '0000:5e:.*']\n";
    let chosen = chosen(yaml).unwrap();
    let link = choice(&chosen, "pci_link_width");
    assert!(link.enabled);
    assert_eq!(link.threshold, 0.5);
    assert!(!choice(&chosen, "module_expected").enabled);
    let driver = choice(&chosen, "pci_driver");
    assert!(driver.enabled);
    assert!(driver.ignores("0000:3b:00.0"));
    assert!(driver.ignores("0000:5e:00.1"));
    // Anchored: a pattern is the whole device, not a part of it.
    assert!(!driver.ignores("0000:3b:00.01"));
    assert!(!driver.ignores("10000:3b:00.0"));
    // The checks not named stay as built in.
    let mic = choice(&chosen, "mic_die_temperature");
    assert_eq!(mic.threshold, 90.0);
    assert!(mic.enabled);
}

#[test]
fn what_it_does_not_know_is_an_error_naming_where() {
    for (yaml, message) in [
        (
            "checks:\n  pci_drivers:\n    enabled: false\n",
            "checks.pci_drivers: no such check (the checks: module_expected, ",
        ),
        (
            "checks:\n  pci_driver:\n    enable: false\n",
            "unknown key at line 3 column 5",
        ),
        (
            "check:\n  pci_driver: {}\n",
            "unknown key at line 1 column 1",
        ),
        (
            "checks:\n  pci_driver:\n    enabled: maybe\n",
            "a value of the wrong type at line 3 column 14",
        ),
        (
            "checks:\n  pci_driver:\n    threshold: 1\n",
            "checks.pci_driver.threshold: this check has no threshold",
        ),
        (
            "checks:\n  pci_link_width:\n    threshold: .nan\n",
            "checks.pci_link_width.threshold: not a finite number",
        ),
        (
            "checks:\n  pci_driver:\n    ignore: ['ok', '0000:(3b']\n",
            "checks.pci_driver.ignore[1]: not a regular expression",
        ),
        (
            "checks: [pci_driver]\n",
            "a value of the wrong type at line 1",
        ),
        (
            "checks:\n  pci_driver: {}\n  pci_driver: {}\n",
            "a duplicate key",
        ),
        (":\n  - [", "not valid YAML"),
    ] {
        let err = chosen(yaml).unwrap_err();
        assert!(
            err.starts_with("/etc/hpcnode_exporter/checks.yml: ") && err.contains(message),
            "{yaml:?}: {err}"
        );
    }
    let err = parse(Path::new("c.yml"), b"\xff").unwrap_err().to_string();
    assert_eq!(err, "c.yml: not UTF-8 text");
}

/// The file the packages install says what the built-in checks are, every check named.
#[test]
fn the_packaged_file_is_the_built_in_checks() {
    let path = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../packaging/checks.yml"
    ));
    let text = std::fs::read_to_string(path).unwrap();
    assert!(built_in(&parse(path, text.as_bytes()).unwrap()));
    for check in &ALL {
        assert!(
            text.contains(&format!("\n  {}:\n", check.name)),
            "{} is not in packaging/checks.yml",
            check.name
        );
        assert!(
            text.contains(check.alert),
            "{}'s alert is not named",
            check.name
        );
    }
}

mod proptests {
    use proptest::prelude::*;

    use super::*;
    use crate::test_strategies::text;

    const TOKENS: &[&str] = &[
        "checks:",
        "\n",
        "  ",
        "    ",
        ":",
        " ",
        "enabled",
        "threshold",
        "ignore",
        "true",
        "0.5",
        "[",
        "]",
        "'",
        ",",
        "{",
        "}",
        "-",
        "#",
        ".nan",
        "(",
        "*",
        "pci_driver",
        "pci_link_width",
        "module_expected",
    ];

    proptest! {
        /// Whatever the file, the checks as it chooses them or an error naming the file: never
        /// a panic, and never a check missing or a threshold that is not a number.
        #[test]
        fn any_file_is_the_checks_or_an_error(yaml in text(TOKENS)) {
            match parse(Path::new("checks.yml"), yaml.as_bytes()) {
                Ok(chosen) => {
                    prop_assert_eq!(chosen.len(), ALL.len());
                    for choice in chosen {
                        prop_assert!(choice.threshold.is_finite() == choice.check.threshold.is_some());
                    }
                }
                Err(err) => prop_assert!(err.to_string().starts_with("checks.yml: ")),
            }
        }
    }
}
