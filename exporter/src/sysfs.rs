//! Reading sysfs attributes: the one place that opens files under `--path.sysfs`.
//!
//! Every read is non-blocking at open (a FIFO planted where an attribute belongs returns at once
//! instead of waiting for a writer) and refuses anything that is not a regular file. A read that
//! still hangs inside a driver is bounded by the collector framework's deadline, not here.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::collector::ErrorKind;

/// sysfs attributes are at most one page; anything longer is not an attribute.
const MAX_ATTRIBUTE_BYTES: usize = 4096;

/// Why one sysfs attribute could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SysfsError {
    #[error("read {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("read {path}: not a regular file")]
    NotRegularFile { path: PathBuf },
    #[error("parse {path}: {reason}: {content:?}")]
    Parse {
        path: PathBuf,
        reason: &'static str,
        content: String,
    },
}

impl SysfsError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            SysfsError::Io { .. } => ErrorKind::Io,
            SysfsError::NotRegularFile { .. } => ErrorKind::NotRegularFile,
            SysfsError::Parse { .. } => ErrorKind::Parse,
        }
    }

    /// True when the attribute simply does not exist (an optional file on this driver).
    pub fn is_not_found(&self) -> bool {
        matches!(self, SysfsError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }

    pub fn parse(path: &Path, reason: &'static str, content: &str) -> Self {
        SysfsError::Parse {
            path: path.to_path_buf(),
            reason,
            content: content.chars().take(64).collect(),
        }
    }
}

/// Reads attributes with one reusable buffer (a scrape reads thousands of small files).
#[derive(Default)]
pub struct AttributeReader {
    buf: Vec<u8>,
}

impl AttributeReader {
    /// The attribute's content with surrounding whitespace (the kernel's trailing newline, the
    /// extra blank line some drivers print) removed.
    pub fn read(&mut self, path: &Path) -> Result<&str, SysfsError> {
        let io_error = |source| SysfsError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = open_nonblocking(path).map_err(io_error)?;
        if !file.metadata().map_err(io_error)?.is_file() {
            return Err(SysfsError::NotRegularFile {
                path: path.to_path_buf(),
            });
        }
        self.buf.clear();
        file.take(MAX_ATTRIBUTE_BYTES as u64)
            .read_to_end(&mut self.buf)
            .map_err(io_error)?;
        match std::str::from_utf8(&self.buf) {
            Ok(text) => Ok(text.trim()),
            Err(_) => Err(SysfsError::parse(
                path,
                "not UTF-8 text",
                &String::from_utf8_lossy(&self.buf),
            )),
        }
    }

    /// An unsigned integer attribute (counters, ids).
    pub fn read_u64(&mut self, path: &Path) -> Result<u64, SysfsError> {
        let text = self.read(path)?;
        text.parse()
            .map_err(|_| SysfsError::parse(path, "not an unsigned integer", text))
    }
}

fn open_nonblocking(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
}

/// Names of the entries of a directory, sorted so output order is stable.
/// Numeric names (ports, GID indexes) sort by value.
pub fn sorted_entries(dir: &Path) -> Result<Vec<String>, SysfsError> {
    let io_error = |source| SysfsError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut names = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_error)? {
        let entry = entry.map_err(io_error)?;
        match entry.file_name().into_string() {
            Ok(name) => names.push(name),
            Err(raw) => {
                return Err(SysfsError::parse(
                    &dir.join(&raw),
                    "entry name is not UTF-8",
                    &raw.to_string_lossy(),
                ))
            }
        }
    }
    names.sort_by(|a, b| match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(x), Ok(y)) => x.cmp(&y),
        _ => a.cmp(b),
    });
    Ok(names)
}

/// The last path component of a symlink's target (`device` -> `0000:05:00.0`,
/// `device/driver` -> `mlx5_core`).
pub fn link_target_name(link: &Path) -> Result<String, SysfsError> {
    let target = fs::read_link(link).map_err(|source| SysfsError::Io {
        path: link.to_path_buf(),
        source,
    })?;
    Ok(target
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    use std::time::{Duration, Instant};

    #[test]
    fn trims_trailing_newline_and_blank_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("link_layer");
        fs::write(&path, "InfiniBand\n\n").unwrap();
        assert_eq!(
            AttributeReader::default().read(&path).unwrap(),
            "InfiniBand"
        );
    }

    #[test]
    fn fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("port_xmit_data");
        let c_path = CString::new(path.as_os_str().as_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o644) }, 0);
        let started = Instant::now();
        let err = AttributeReader::default().read(&path).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(1));
        assert_eq!(err.kind(), ErrorKind::NotRegularFile, "{err}");
    }

    #[test]
    fn directory_is_not_an_attribute() {
        let dir = tempfile::tempdir().unwrap();
        let err = AttributeReader::default().read(dir.path()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotRegularFile, "{err}");
    }

    #[test]
    fn garbage_integer_is_a_parse_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("symbol_error");
        fs::write(&path, "-x\n").unwrap();
        let err = AttributeReader::default().read_u64(&path).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Parse);
        assert!(err.to_string().contains("symbol_error"), "{err}");
    }

    #[test]
    fn missing_file_is_not_found() {
        let dir = tempfile::tempdir().unwrap();
        let err = AttributeReader::default()
            .read(&dir.path().join("hca_type"))
            .unwrap_err();
        assert!(err.is_not_found());
    }

    #[test]
    fn ports_sort_numerically() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["10", "2", "1"] {
            fs::create_dir(dir.path().join(name)).unwrap();
        }
        assert_eq!(sorted_entries(dir.path()).unwrap(), ["1", "2", "10"]);
    }
}
