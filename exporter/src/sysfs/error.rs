//! `SysfsError`: why one attribute, directory or named file could not be used; its text never
//! carries what a file holds, only its path, the reason and how much was read.

use std::path::{Path, PathBuf};

use rustix::io::Errno;

use crate::error::{CollectError, ErrorKind};

/// Why one sysfs attribute or directory could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SysfsError {
    #[error("read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("read {path}: not a regular file")]
    NotRegularFile { path: PathBuf },
    #[error("read {path}: mode {mode:04o} lets its group or others at it (chmod 600 {path})")]
    NotPrivate { path: PathBuf, mode: u32 },
    /// Never the content: a file may hold anything (a secret, a terminal escape), so its name,
    /// the reason and how much was read are all a log line may carry.
    #[error("parse {path}: {reason}{}", bytes_read(.len))]
    Parse {
        path: PathBuf,
        reason: &'static str,
        /// The length of what could not be parsed, where there was one text to parse.
        len: Option<usize>,
    },
    #[error("list {dir}: entry name is not UTF-8: {name}")]
    NameNotUtf8 { dir: PathBuf, name: String },
}

impl SysfsError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            SysfsError::Io { .. } | SysfsError::NotPrivate { .. } => ErrorKind::Io,
            SysfsError::NotRegularFile { .. } => ErrorKind::NotRegularFile,
            SysfsError::Parse { .. } | SysfsError::NameNotUtf8 { .. } => ErrorKind::Parse,
        }
    }

    /// True when the file simply does not exist (an optional attribute of this driver).
    pub fn is_not_found(&self) -> bool {
        matches!(self, SysfsError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }

    /// True when the file, or a directory on its path, does not exist.
    pub fn is_absent(&self) -> bool {
        self.is_not_found()
            || matches!(self, SysfsError::Io { source, .. } if source.raw_os_error() == Some(libc::ENOTDIR))
    }

    /// True when the kernel refused access (another user's `/proc/<pid>/fd` without ptrace
    /// access, a file only root may read).
    pub fn is_permission_denied(&self) -> bool {
        matches!(self, SysfsError::Io { source, .. } if source.kind() == std::io::ErrorKind::PermissionDenied)
    }

    /// `content` could not be parsed: only its length is kept.
    pub fn parse(path: &Path, reason: &'static str, content: &str) -> Self {
        SysfsError::unparsed(path.to_path_buf(), reason, content.len())
    }

    /// The file is not what it should be, for `reason` alone (a module's signature block, a
    /// compressed stream): no one text was parsed.
    pub fn invalid(path: &Path, reason: &'static str) -> Self {
        SysfsError::Parse {
            path: path.to_path_buf(),
            reason,
            len: None,
        }
    }

    /// `len` bytes (binary, or not text) could not be parsed.
    pub fn unparsed(path: PathBuf, reason: &'static str, len: usize) -> Self {
        SysfsError::Parse {
            path,
            reason,
            len: Some(len),
        }
    }

    pub(super) fn io(path: PathBuf, errno: Errno) -> Self {
        match errno {
            Errno::ISDIR => SysfsError::NotRegularFile { path },
            errno => SysfsError::Io {
                path,
                source: errno.into(),
            },
        }
    }
}

/// ` (N bytes)` after a parse error's reason, where it has a length.
fn bytes_read(len: &Option<usize>) -> String {
    len.map_or_else(String::new, |len| format!(" ({len} bytes)"))
}

impl From<SysfsError> for CollectError {
    fn from(err: SysfsError) -> Self {
        let error = CollectError::new(err.kind(), err.to_string());
        match &err {
            // The length may change every read; the file and the reason are the fault.
            SysfsError::Parse { path, reason, .. } => {
                error.keyed_by(format!("{}: {reason}", path.display()))
            }
            _ => error,
        }
    }
}
