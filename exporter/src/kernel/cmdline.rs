//! The kernel command line (`/proc/cmdline`) split into parameters the way the kernel splits
//! it: words apart by white space, double quotes around spaces (lib/cmdline.c `next_arg`),
//! and a lone `--` ending the kernel's own parameters (kernel/params.c `parse_args`).

/// One word of the command line: `name` or `name=value`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parameter<'a> {
    /// As written, without quotes: `vfio_pci.ids`.
    pub name: &'a str,
    /// Without quotes; `None` for a word without `=`.
    pub value: Option<&'a str>,
}

impl Parameter<'_> {
    /// Whether this is the parameter `name`: the kernel treats `-` and `_` in parameter names
    /// alike (kernel/params.c `parameq`).
    pub fn is(&self, name: &str) -> bool {
        let underscores = |c| if c == '-' { '_' } else { c };
        self.name
            .chars()
            .map(underscores)
            .eq(name.chars().map(underscores))
    }

    /// `module.option`: kmod reads these from the whole line when it loads the module.
    fn is_module_option(&self) -> bool {
        self.name.contains('.')
    }
}

/// The parameters of a command line that take effect, in order. Words after a lone `--` are
/// init's arguments, which the kernel does not parse; of those only module options
/// (`vfio-pci.ids=`, `modprobe.blacklist=`) are kept, because kmod reads them from the whole
/// line.
pub fn parameters(cmdline: &str) -> Vec<Parameter<'_>> {
    let mut parameters = Vec::new();
    let mut for_init = false;
    let mut rest = cmdline.trim_start_matches(is_space);
    while !rest.is_empty() {
        let (parameter, after) = next_parameter(rest);
        rest = after;
        if !for_init && parameter.value.is_none() && parameter.name == "--" {
            for_init = true;
        } else if !for_init || parameter.is_module_option() {
            parameters.push(parameter);
        }
    }
    parameters
}

/// The kernel's `isspace`, ASCII part (it counts `\v`, which `char::is_ascii_whitespace` does
/// not).
fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r')
}

/// The first word of `args` (which starts with no space) and what follows it, spaces skipped.
/// As in `next_arg`: a `"` anywhere toggles quoting; the name ends at the first `=` after its
/// first character; when the word or its value starts with `"`, that quote and a `"` ending
/// the word are dropped, and quotes inside stay.
fn next_parameter(args: &str) -> (Parameter<'_>, &str) {
    let (quoted, body) = match args.strip_prefix('"') {
        Some(body) => (true, body),
        None => (false, args),
    };
    let mut in_quote = quoted;
    let end = body
        .char_indices()
        .find(|&(_, c)| {
            in_quote ^= c == '"';
            is_space(c) && !in_quote
        })
        .map_or(body.len(), |(index, _)| index);
    let (word, rest) = body.split_at(end);
    let equals = word
        .char_indices()
        .skip(1)
        .find(|&(_, c)| c == '=')
        .map(|(index, _)| index);
    let value_quoted = equals.is_some_and(|index| word[index + 1..].starts_with('"'));
    let word = match quoted || value_quoted {
        true => word.strip_suffix('"').unwrap_or(word),
        false => word,
    };
    let parameter = match equals {
        None => Parameter {
            name: word,
            value: None,
        },
        Some(index) => {
            let value = &word[index + 1..];
            Parameter {
                name: &word[..index],
                value: Some(value.strip_prefix('"').unwrap_or(value)),
            }
        }
    };
    (parameter, rest.trim_start_matches(is_space))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(cmdline: &str) -> Vec<(&str, Option<&str>)> {
        parameters(cmdline)
            .into_iter()
            .map(|p| (p.name, p.value))
            .collect()
    }

    #[test]
    fn words_and_values() {
        assert_eq!(
            words("BOOT_IMAGE=/vmlinuz-5.14 ro  quiet\tintel_iommu=on,sm_on iommu= =x a=b=c\n"),
            [
                ("BOOT_IMAGE", Some("/vmlinuz-5.14")),
                ("ro", None),
                ("quiet", None),
                ("intel_iommu", Some("on,sm_on")),
                ("iommu", Some("")),
                ("=x", None),
                ("a", Some("b=c")),
            ]
        );
        assert!(words("").is_empty());
        assert!(words(" \n").is_empty());
    }

    #[test]
    fn quotes_group_spaces_and_are_dropped() {
        assert_eq!(
            words(r#"dyndbg="file x.c +p" "parport.dyndbg=file y.c +p" "quiet" a="b" c="d"#),
            [
                ("dyndbg", Some("file x.c +p")),
                ("parport.dyndbg", Some("file y.c +p")),
                ("quiet", None),
                ("a", Some("b")),
                // Unterminated: to the end of the line.
                ("c", Some("d")),
            ]
        );
        // A quote inside a value groups but stays, as in the kernel.
        assert_eq!(words(r#"x=a"b c"d"#), [("x", Some(r#"a"b c"d"#))]);
        assert_eq!(words(r#"x="" y"#), [("x", Some("")), ("y", None)]);
    }

    #[test]
    fn names_compare_with_dashes_as_underscores() {
        let parameter = &parameters("vfio_pci.ids=10de:1eb8")[0];
        assert!(parameter.is("vfio-pci.ids"));
        assert!(parameter.is("vfio_pci.ids"));
        assert!(!parameter.is("vfio_pci.id"));
        assert!(parameters("module-blacklist=nouveau")[0].is("module_blacklist"));
    }

    #[test]
    fn init_arguments_keep_only_module_options() {
        assert_eq!(
            words("ro -- module_blacklist=nouveau single vfio-pci.ids=10de:1eb8 -- x"),
            [("ro", None), ("vfio-pci.ids", Some("10de:1eb8"))]
        );
        // `--=x` or a quoted `"--"`: the same rule as the kernel's.
        assert_eq!(
            words("--=x iommu=pt"),
            [("--", Some("x")), ("iommu", Some("pt"))]
        );
        assert!(words(r#""--" iommu=pt"#).is_empty());
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use crate::test_strategies::text;
    use proptest::collection::vec;
    use proptest::prelude::*;

    const CMDLINE_TOKENS: &[&str] = &[
        " ",
        "\t",
        "\n",
        "\x0b",
        "\"",
        "=",
        "--",
        "-",
        "_",
        ".",
        "ro",
        "quiet",
        "iommu",
        "vfio-pci.ids",
        "modprobe.blacklist",
        "10de:1eb8",
        "on,sm_on",
    ];

    /// A parameter as written on a command line, and what it means.
    fn written_parameter() -> impl Strategy<Value = (String, (String, Option<String>))> {
        let name = "[a-z][a-z0-9_.-]{0,15}";
        let value = prop::option::of("[a-z0-9,:/.= -]{0,16}");
        (name, value, any::<bool>()).prop_map(|(name, value, quote_word)| {
            let written = match &value {
                None => name.clone(),
                Some(value) if quote_word => format!("\"{name}={value}\""),
                Some(value) if value.contains(' ') || value.is_empty() => {
                    format!("{name}=\"{value}\"")
                }
                Some(value) => format!("{name}={value}"),
            };
            (written, (name, value))
        })
    }

    proptest! {
        #[test]
        fn any_command_line_splits_into_words_from_it(cmdline in text(CMDLINE_TOKENS)) {
            // Names and values borrow from the line: pieces of it, not copies.
            let line = cmdline.as_bytes().as_ptr_range();
            for parameter in parameters(&cmdline) {
                for piece in std::iter::once(parameter.name).chain(parameter.value) {
                    let piece = piece.as_bytes().as_ptr_range();
                    prop_assert!(line.start <= piece.start && piece.end <= line.end);
                }
            }
        }

        #[test]
        fn dashes_and_underscores_name_the_same_parameter(name in "[a-z_.-]{1,20}") {
            let parameter = Parameter { name: &name, value: None };
            prop_assert!(parameter.is(&name.replace('-', "_")));
            prop_assert!(parameter.is(&name.replace('_', "-")));
            let longer = format!("{name}x");
            prop_assert!(!parameter.is(&longer));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn written_parameters_read_back(
            written in vec(written_parameter(), 0..12),
            spaces in vec("[ \t\n\x0b\x0c\r]{1,3}", 12),
            init in vec(written_parameter(), 0..4),
        ) {
            let mut cmdline = String::new();
            for ((word, _), space) in written.iter().zip(&spaces) {
                cmdline.push_str(space);
                cmdline.push_str(word);
            }
            cmdline.push_str(" -- ");
            for (word, _) in &init {
                cmdline.push_str(word);
                cmdline.push(' ');
            }
            let read: Vec<(String, Option<String>)> = parameters(&cmdline)
                .into_iter()
                .map(|p| (p.name.to_string(), p.value.map(str::to_string)))
                .collect();
            // Of init's arguments, only module options are the kernel's (kmod reads them).
            let expected: Vec<(String, Option<String>)> = written
                .into_iter()
                .map(|(_, meaning)| meaning)
                .chain(init.into_iter().map(|(_, meaning)| meaning).filter(|(name, _)| name.contains('.')))
                .collect();
            prop_assert_eq!(read, expected);
        }
    }
}
