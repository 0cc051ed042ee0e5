//! `ld.so.conf` lines as glibc's `ldconfig` reads them (`parse_conf` in `elf/ldconfig.c`): a
//! `#` ends the line; blank lines are skipped; `include` and a blank start a list of glob
//! patterns (each word one), `hwcap` and a blank is ignored; any other line is a directory
//! (`add_dir_1`: trailing blanks and slashes dropped). Plain code, no I/O.

use std::path::{Path, PathBuf};

use crate::kernel::modprobe::glob_match;

/// One line that says something.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    Dir(String),
    /// A glob pattern made absolute: `parse_conf_include` joins a relative one to the including
    /// file's directory.
    Include(PathBuf),
}

/// The lines of the file at `path` (absolute inside the root) with text `text`.
pub fn parse(path: &Path, text: &str) -> Vec<Line> {
    let base = path.parent().unwrap_or(Path::new("/"));
    let mut lines = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim_start();
        if line.is_empty() {
            continue;
        }
        if let Some(patterns) = keyword(line, "include", false) {
            let words = patterns.split([' ', '\t']).filter(|w| !w.is_empty());
            lines.extend(words.map(|word| Line::Include(base.join(word))));
        } else if keyword(line, "hwcap", true).is_none() {
            let dir = line.trim_end().trim_end_matches('/');
            // `/` itself: add_dir_1 keeps one slash.
            lines.push(Line::Dir(if dir.is_empty() {
                "/".into()
            } else {
                dir.into()
            }));
        }
    }
    lines
}

/// What follows `word` and a blank at the start of `line` (`strncmp`, or `strncasecmp` when
/// `any_case`, then `isblank`).
fn keyword<'l>(line: &'l str, word: &str, any_case: bool) -> Option<&'l str> {
    let head = line.get(..word.len())?;
    let same = if any_case {
        head.eq_ignore_ascii_case(word)
    } else {
        head == word
    };
    let rest = &line[word.len()..];
    (same && rest.starts_with([' ', '\t'])).then(|| &rest[1..])
}

/// Whether a directory entry `name` matches one component of a glob pattern as glob(3)
/// without flags does: fnmatch, and a leading `.` only by a leading `.`.
pub fn glob_component(pattern: &str, name: &str) -> bool {
    if name.starts_with('.') && !pattern.starts_with('.') {
        return false;
    }
    glob_match(pattern.as_bytes(), name.as_bytes())
}

/// Whether a path component holds glob(3)'s special characters.
pub fn is_pattern(component: &str) -> bool {
    component.contains(['*', '?', '['])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_as_ldconfig_reads_them() {
        // Debian 12's /etc/ld.so.conf, then a site's lines.
        let text = "include /etc/ld.so.conf.d/*.conf\n\n  /usr/local/lib64/ # site\n#/opt/x\nhwcap 1 nosegneg\nHWCAP\t0 x\ninclude  a.d/*.conf\tb.conf\ninclude_x\n/\n";
        assert_eq!(
            parse(Path::new("/etc/ld.so.conf"), text),
            vec![
                Line::Include("/etc/ld.so.conf.d/*.conf".into()),
                Line::Dir("/usr/local/lib64".into()),
                Line::Include("/etc/a.d/*.conf".into()),
                Line::Include("/etc/b.conf".into()),
                Line::Dir("include_x".into()),
                Line::Dir("/".into()),
            ]
        );
    }

    #[test]
    fn globs_as_glob_matches_names() {
        assert!(glob_component("*.conf", "x86_64-linux-gnu.conf"));
        assert!(!glob_component("*.conf", ".hidden.conf"));
        assert!(glob_component(".*.conf", ".hidden.conf"));
        assert!(!glob_component("*.conf", "libc.conf.dpkg-old"));
        assert!(is_pattern("*.conf") && !is_pattern("ld.so.conf.d"));
    }
}
