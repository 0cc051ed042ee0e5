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
mod proptests;
#[cfg(test)]
mod tests;
