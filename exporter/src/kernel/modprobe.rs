//! modprobe configuration as kmod reads it: the effective modprobe.d files under
//! `--path.rootfs` and their `blacklist` and `install` rules. Shared by the kernel-state
//! collector (rules on expected modules) and the PCI collector (rules on the modules that would
//! claim an unbound device).

use std::collections::BTreeMap;
use std::path::Path;

use crate::sysfs::{FileStamp, SysDir, SysfsError};

/// Where kmod reads modprobe configuration, highest priority first: a file name found in an
/// earlier directory hides the same name in the later ones (libkmod `default_config_paths`).
const CONFIG_DIRS: [&str; 5] = [
    "etc/modprobe.d",
    "run/modprobe.d",
    "usr/local/lib/modprobe.d",
    "usr/lib/modprobe.d",
    "lib/modprobe.d",
];

/// Real modprobe.d files are a few KiB; 1 MiB bounds a hostile one.
const MAX_CONFIG_BYTES: usize = 1 << 20;

/// modprobe treats `-` and `_` in module names alike; the kernel spells them `_`.
pub fn module_key(name: &str) -> String {
    name.replace('-', "_")
}

/// The module pattern of a modprobe.d line as kmod keys it (`underscores()` in kmod's
/// `shared/util.c`): `-` becomes `_` except inside a `[...]` range such as `[0-9]`; `None` for
/// an unbalanced bracket, which kmod rejects as a syntax error.
fn pattern_key(pattern: &str) -> Option<String> {
    let mut key = String::with_capacity(pattern.len());
    let mut in_range = false;
    for c in pattern.chars() {
        match (c, in_range) {
            ('-', false) => key.push('_'),
            ('[', false) => {
                in_range = true;
                key.push(c);
            }
            (']', true) => {
                in_range = false;
                key.push(c);
            }
            (']', false) => return None,
            _ => key.push(c),
        }
    }
    (!in_range).then_some(key)
}

/// One effective configuration file.
#[derive(Debug)]
pub struct ConfigFile {
    /// Where it is on the node: `/etc/modprobe.d/mlx5.conf`.
    pub path: String,
    pub rules: Vec<Rule>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// The module name in the kernel's spelling (see [`module_key`]).
    pub module: String,
    pub action: Action,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// `blacklist`: the module's own aliases are ignored.
    Blacklist,
    /// `install`: loading the module runs this command instead (words joined by one space).
    Install(String),
}

impl Action {
    /// An install command that is only `true` or `false` (any path) never loads the module.
    pub fn disables(&self) -> bool {
        match self {
            Action::Blacklist => false,
            Action::Install(command) => {
                !command.contains(' ')
                    && matches!(command.rsplit('/').next(), Some("true" | "false"))
            }
        }
    }
}

/// The effective modprobe.d files under `rootfs` in the order kmod applies them (by file
/// name), each with its rules; files and directories that cannot be read go to `errors`.
/// kmod's precedence applies: `*.conf` and `*.alias` files, not hidden ones, a name in an
/// earlier directory hiding the same name in later ones, and a link to `/dev/null` masking it.
pub fn read_config(rootfs: &Path, errors: &mut Vec<SysfsError>) -> Vec<ConfigFile> {
    let (dirs, names) = effective_files(rootfs, errors);
    let mut files = Vec::new();
    for (name, index) in names {
        let (dir_name, dir) = &dirs[index];
        // systemd's way to disable a vendor file: a link to /dev/null of the same name.
        if dir
            .link_target(&name)
            .is_ok_and(|target| target == Path::new("/dev/null"))
        {
            continue;
        }
        match dir.read_text_file(&name, MAX_CONFIG_BYTES) {
            Ok(text) => files.push(ConfigFile {
                path: format!("/{dir_name}/{name}"),
                rules: parse_rules(&text),
            }),
            Err(err) => errors.push(err),
        }
    }
    files
}

/// What [`read_config`] would read, stamped: each configuration directory present and each
/// effective file in it (a link as the link). The same stamps, the same rules.
pub fn config_stamps(rootfs: &Path, errors: &mut Vec<SysfsError>) -> Vec<FileStamp> {
    let (dirs, names) = effective_files(rootfs, errors);
    let dir_stamps = dirs.iter().map(|(_, dir)| dir.stamp("."));
    let file_stamps = names.iter().map(|(name, index)| dirs[*index].1.stamp(name));
    (dir_stamps.chain(file_stamps))
        .filter_map(|stamp| stamp.map_err(|err| errors.push(err)).ok())
        .collect()
}

/// The configuration directories present, and each effective file name with the index in
/// them of the directory whose file wins.
fn effective_files(
    rootfs: &Path,
    errors: &mut Vec<SysfsError>,
) -> (Vec<(&'static str, SysDir)>, BTreeMap<String, usize>) {
    let mut dirs = Vec::new();
    // File name -> index in `dirs` of the directory whose file wins.
    let mut names: BTreeMap<String, usize> = BTreeMap::new();
    for dir_name in CONFIG_DIRS {
        let dir = match SysDir::open(rootfs, dir_name) {
            Ok(dir) => dir,
            Err(err) if err.is_absent() => continue,
            Err(err) => {
                errors.push(err);
                continue;
            }
        };
        match dir.entries() {
            Ok(entries) => {
                for entry in entries {
                    let name = match entry.into_name() {
                        Ok(name) => name,
                        Err(err) => {
                            errors.push(err);
                            continue;
                        }
                    };
                    let config = name.ends_with(".conf") || name.ends_with(".alias");
                    if config && !name.starts_with('.') {
                        names.entry(name).or_insert(dirs.len());
                    }
                }
            }
            Err(err) => errors.push(err),
        }
        dirs.push((dir_name, dir));
    }
    (dirs, names)
}

/// fnmatch(3) without flags, as modprobe uses it: `*`, `?`, `[...]` with ranges and `!`/`^`.
pub fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    // Where to resume after the last `*`: the pattern position after it, the text position.
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        let step = match pattern.get(p) {
            Some(b'*') => {
                star = Some((p + 1, t));
                p += 1;
                continue;
            }
            Some(b'?') => Some(p + 1),
            Some(b'[') => match class_match(pattern, p, text[t]) {
                Some(matched) => matched,
                None => (text[t] == b'[').then_some(p + 1),
            },
            Some(&c) if c == text[t] => Some(p + 1),
            _ => None,
        };
        match (step, star) {
            (Some(next), _) => {
                p = next;
                t += 1;
            }
            (None, Some((after_star, from))) => {
                p = after_star;
                t = from + 1;
                star = Some((after_star, from + 1));
            }
            (None, None) => return false,
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// Matches `c` against the bracket expression at `pattern[open]`: `Some(Some(after))` when it
/// matches, `Some(None)` when not, `None` when the `[` is unterminated (then a literal, as in
/// fnmatch).
fn class_match(pattern: &[u8], open: usize, c: u8) -> Option<Option<usize>> {
    let mut i = open + 1;
    let negated = matches!(pattern.get(i), Some(b'!' | b'^'));
    if negated {
        i += 1;
    }
    let mut matched = false;
    let mut first = true;
    loop {
        let &lo = pattern.get(i)?;
        if lo == b']' && !first {
            break;
        }
        first = false;
        if pattern.get(i + 1) == Some(&b'-') && pattern.get(i + 2).is_some_and(|&hi| hi != b']') {
            let hi = pattern[i + 2];
            matched |= lo <= c && c <= hi;
            i += 3;
        } else {
            matched |= lo == c;
            i += 1;
        }
    }
    Some((matched != negated).then_some(i + 1))
}

/// The `blacklist` and `install` rules of one modprobe.d file, in file order (a backslash
/// before the newline continues a line; comments, other commands and lines kmod rejects as
/// syntax errors are skipped).
pub fn parse_rules(text: &str) -> Vec<Rule> {
    let joined = text.replace("\\\n", " ");
    let mut rules = Vec::new();
    for line in joined.lines() {
        let mut words = line.split_whitespace();
        let (Some(command), Some(module)) = (words.next(), words.next()) else {
            continue;
        };
        let action = match command {
            "blacklist" => Action::Blacklist,
            "install" => match words.collect::<Vec<_>>().join(" ") {
                command if command.is_empty() => continue,
                command => Action::Install(command),
            },
            _ => continue,
        };
        let Some(module) = pattern_key(module) else {
            continue;
        };
        rules.push(Rule { module, action });
    }
    rules
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(module: &str, action: Action) -> Rule {
        Rule {
            module: module.to_string(),
            action,
        }
    }

    #[test]
    fn install_and_blacklist_rules() {
        let text = "# OFED\n\
                    install mlx5_ib /bin/false\n\
                    install ib-uverbs /sbin/modprobe --ignore-install ib_uverbs \\\n  && /usr/bin/logger loaded\n\
                    install usb-storage true\n\
                    # blacklist nouveau\n\
                    blacklist rdma-ucm\n\
                    options mlx5_core prof_sel=2\n\
                    blacklist\n";
        let install = |command: &str| Action::Install(command.to_string());
        assert_eq!(
            parse_rules(text),
            [
                rule("mlx5_ib", install("/bin/false")),
                rule(
                    "ib_uverbs",
                    install("/sbin/modprobe --ignore-install ib_uverbs && /usr/bin/logger loaded")
                ),
                rule("usb_storage", install("true")),
                rule("rdma_ucm", Action::Blacklist),
            ]
        );
    }

    #[test]
    fn only_a_lone_true_or_false_disables() {
        let disables = |text| parse_rules(text)[0].action.disables();
        assert!(disables("install mlx5_ib /bin/false"));
        assert!(disables("install mlx5_ib true"));
        assert!(!disables("install mlx5_ib /bin/true && modprobe mlx5_ib"));
        assert!(!disables("install mlx5_ib /sbin/truex"));
        assert!(!disables("blacklist true"));
    }

    #[test]
    fn glob_corner_cases() {
        assert!(glob_match(b"*", b""));
        assert!(glob_match(b"a*b*c", b"axxbyyc"));
        assert!(!glob_match(b"a*b*c", b"axxbyy"));
        assert!(glob_match(b"[!0-9]x", b"ax"));
        assert!(!glob_match(b"[!0-9]x", b"1x"));
        assert!(glob_match(b"[]]", b"]"));
        assert!(glob_match(b"[a", b"[a"));
        assert!(glob_match(b"??", b"ab"));
        assert!(!glob_match(b"?", b""));
    }

    /// kmod's `underscores()`: ranges keep their dashes, unbalanced brackets and an install
    /// without a command are syntax errors (the line is ignored).
    #[test]
    fn patterns_and_syntax_errors_as_kmod_reads_them() {
        let install = |command: &str| Action::Install(command.to_string());
        assert_eq!(
            parse_rules(
                "install mlx[4-5]-ib /bin/false\n\
                 blacklist ib-[a-z]*\n\
                 install mlx5_ib\n\
                 blacklist mlx5]ib\n\
                 blacklist mlx5[ib\n"
            ),
            [
                rule("mlx[4-5]_ib", install("/bin/false")),
                rule("ib_[a-z]*", Action::Blacklist),
            ]
        );
    }

    #[test]
    fn kmod_precedence_and_dev_null_masks() {
        let root = tempfile::tempdir().unwrap();
        let write = |path: &str, text: &str| {
            let path = root.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        write("etc/modprobe.d/mlx5.conf", "blacklist mlx5_ib\n");
        write("usr/lib/modprobe.d/mlx5.conf", "blacklist mlx5_core\n");
        write(
            "usr/local/lib/modprobe.d/local.alias",
            "install ib_srp /bin/true\n",
        );
        write("lib/modprobe.d/90-nvidia.conf", "blacklist nvidia\n");
        write("lib/modprobe.d/.hidden.conf", "blacklist hidden\n");
        write("lib/modprobe.d/README", "blacklist readme\n");
        std::os::unix::fs::symlink(
            "/dev/null",
            root.path().join("etc/modprobe.d/90-nvidia.conf"),
        )
        .unwrap();
        // A file where a directory would be is no directory, as for kmod.
        write("run/modprobe.d", "");

        let mut errors = Vec::new();
        let files = read_config(root.path(), &mut errors);
        assert!(errors.is_empty(), "{errors:?}");
        let summary: Vec<(&str, Vec<&str>)> = files
            .iter()
            .map(|f| {
                (
                    f.path.as_str(),
                    f.rules.iter().map(|r| r.module.as_str()).collect(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("/usr/local/lib/modprobe.d/local.alias", vec!["ib_srp"]),
                ("/etc/modprobe.d/mlx5.conf", vec!["mlx5_ib"]),
            ]
        );
    }

    #[test]
    fn an_unreadable_file_is_an_error_and_the_others_are_read() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("etc/modprobe.d");
        std::fs::create_dir_all(dir.join("sub.conf")).unwrap();
        std::fs::write(dir.join("nouveau.conf"), "blacklist nouveau\n").unwrap();
        let mut errors = Vec::new();
        let files = read_config(root.path(), &mut errors);
        assert_eq!(files.len(), 1);
        assert_eq!(files[0].rules, [rule("nouveau", Action::Blacklist)]);
        assert_eq!(errors.len(), 1, "{errors:?}");
    }

    /// Debian's alternatives link a modprobe.d file by an absolute path
    /// (`/etc/modprobe.d/nvidia.conf -> /etc/alternatives/...`): it is followed inside the
    /// root, where the exporter in a container finds the host's file, never the container's.
    #[test]
    fn absolute_links_are_followed_inside_the_root() {
        let root = tempfile::tempdir().unwrap();
        let conf = root.path().join("usr/lib/nvidia/nvidia-modprobe.conf");
        std::fs::create_dir_all(conf.parent().unwrap()).unwrap();
        std::fs::write(&conf, "blacklist nouveau\n").unwrap();
        for dir in ["etc/modprobe.d", "etc/alternatives"] {
            std::fs::create_dir_all(root.path().join(dir)).unwrap();
        }
        let link = |target: &str, path: &str| {
            std::os::unix::fs::symlink(target, root.path().join(path)).unwrap();
        };
        link(
            "/usr/lib/nvidia/nvidia-modprobe.conf",
            "etc/alternatives/nvidia--nvidia-modprobe.conf",
        );
        link(
            "/etc/alternatives/nvidia--nvidia-modprobe.conf",
            "etc/modprobe.d/nvidia.conf",
        );
        let mut errors = Vec::new();
        let files = read_config(root.path(), &mut errors);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(files[0].path, "/etc/modprobe.d/nvidia.conf");
        assert_eq!(files[0].rules, [rule("nouveau", Action::Blacklist)]);
    }
}

#[cfg(test)]
mod proptests {
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
            Some(b'*') => {
                (0..=text.len()).any(|skip| reference_match(&pattern[1..], &text[skip..]))
            }
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
}
