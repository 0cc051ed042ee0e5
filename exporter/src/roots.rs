//! `--path.sysfs`, `--path.procfs` and `--path.rootfs` checked once at start: a root that does
//! not look like the tree its flag names (a typo, a bind mount missing in a container) is one
//! log line and `hpcnode_path_root_valid 0`, and each collector that reads it reports a
//! `config` error and success 0, instead of an empty read with success 1.
//!
//! A root looks right when it is a directory holding at least one entry every such tree has.
//! The markers are few on purpose: the fixture trees under `tests/fixtures` hold only the
//! directories their collector reads (a `class/`, a `module/`, a `cmdline`).

use std::path::{Path, PathBuf};

use crate::error::{CollectError, ErrorKind};
use crate::logging::{self, Level};
use crate::metrics::{Desc, Samples, Value};

pub const PATH_ROOT_VALID: Desc = Desc::gauge(
    "hpcnode_path_root_valid",
    "Whether the root a --path.* flag names looked, at start, like the tree it stands for (1) or not (0: missing, or none of its usual entries).",
    None,
);

/// A tree the collectors read below a `--path.*` flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Root {
    Sysfs,
    Procfs,
    Rootfs,
}

impl Root {
    pub fn flag(self) -> &'static str {
        match self {
            Root::Sysfs => "path.sysfs",
            Root::Procfs => "path.procfs",
            Root::Rootfs => "path.rootfs",
        }
    }

    /// Entries of which a tree of this kind holds at least one.
    fn markers(self) -> &'static [&'static str] {
        match self {
            Root::Sysfs => &["class", "devices", "bus", "module", "kernel"],
            Root::Procfs => &["self", "1", "modules", "cmdline", "sys"],
            Root::Rootfs => &["etc", "usr", "lib", "var", "boot", "proc", "sys"],
        }
    }

    /// What is wrong with `path` as this root, or `None` when it looks right. Only `stat`s:
    /// nothing under it is opened or read.
    fn problem(self, path: &Path) -> Option<String> {
        if !path.is_dir() {
            return Some("not a directory".into());
        }
        let markers = self.markers();
        (!markers.iter().any(|m| path.join(m).exists()))
            .then(|| format!("none of {} in it", markers.join(", ")))
    }
}

/// The three roots as checked at start.
#[derive(Debug, Clone)]
pub struct Roots {
    checked: Vec<Checked>,
}

#[derive(Debug, Clone)]
struct Checked {
    root: Root,
    path: PathBuf,
    problem: Option<String>,
}

impl Roots {
    pub fn check(sysfs: &Path, procfs: &Path, rootfs: &Path) -> Self {
        let checked = [
            (Root::Sysfs, sysfs),
            (Root::Procfs, procfs),
            (Root::Rootfs, rootfs),
        ]
        .into_iter()
        .map(|(root, path)| Checked {
            root,
            path: path.to_path_buf(),
            problem: root.problem(path),
        })
        .collect();
        Roots { checked }
    }

    /// One line per root that does not look like one.
    pub fn log_invalid(&self) {
        for checked in &self.checked {
            if let Some(problem) = &checked.problem {
                logging::log(
                    Level::Warn,
                    "a --path.* root does not look like its tree; the collectors that read it report a config error",
                    &[
                        ("flag", &format!("--{}", checked.root.flag())),
                        ("path", &checked.path.display().to_string()),
                        ("missing", problem),
                    ],
                );
            }
        }
    }

    /// The `config` error of a collector that reads `reads`, when any of them looked wrong.
    pub fn error_for(&self, reads: &[Root]) -> Option<CollectError> {
        let wrong: Vec<_> = (self.checked.iter())
            .filter(|c| c.problem.is_some() && reads.contains(&c.root))
            .map(|c| format!("--{}={}", c.root.flag(), c.path.display()))
            .collect();
        (!wrong.is_empty()).then(|| {
            let cause = format!("not a usable root: {}", wrong.join(", "));
            CollectError::new(ErrorKind::Config, cause)
        })
    }

    pub fn export(&self, samples: &mut Samples) {
        for checked in &self.checked {
            let valid = u64::from(checked.problem.is_none());
            let label = vec![("flag", checked.root.flag().into())];
            samples.push(&PATH_ROOT_VALID, label, Value::Int(valid));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_root_is_valid_with_one_marker_and_invalid_without_or_missing() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        assert_eq!(
            Root::Sysfs.problem(&missing).as_deref(),
            Some("not a directory")
        );
        let problem = Root::Procfs.problem(dir.path()).unwrap();
        assert!(problem.starts_with("none of self, 1"), "{problem}");
        std::fs::create_dir(dir.path().join("cmdline")).unwrap();
        assert_eq!(Root::Procfs.problem(dir.path()), None);
    }

    #[test]
    fn only_a_collector_that_reads_a_wrong_root_gets_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("class")).unwrap();
        let roots = Roots::check(dir.path(), &dir.path().join("missing"), dir.path());
        assert!(roots.error_for(&[Root::Sysfs]).is_none());
        let error = roots.error_for(&[Root::Sysfs, Root::Procfs]).unwrap();
        assert_eq!(error.kind, ErrorKind::Config);
        assert!(error.cause.contains("--path.procfs="), "{}", error.cause);
        assert!(!error.cause.contains("--path.sysfs="), "{}", error.cause);
    }
}
