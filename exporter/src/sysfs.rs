//! Reading sysfs: the one place that opens files under `--path.sysfs` (and `--path.procfs`,
//! `--path.rootfs`).
//!
//! A scrape reads thousands of small attributes, so every read is relative to an open directory
//! (`openat`: one path component to resolve, not ten) and takes three system calls: open, one
//! read, close. Opens are non-blocking, so a FIFO planted where an attribute belongs returns at
//! once; whatever is not a regular file is refused. A read that still hangs inside a driver is
//! bounded by the collector framework's deadline, not here. The few files longer than a page
//! (`/proc/modules`, `modules.builtin`) are read to their end under an explicit byte bound.

use std::ffi::CStr;
use std::fmt;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::error::{CollectError, ErrorKind};

/// sysfs attributes are at most one page; anything longer is not an attribute.
const MAX_ATTRIBUTE_BYTES: usize = 4096;

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
    #[error("parse {path}: {reason}: {content:?}")]
    Parse {
        path: PathBuf,
        reason: &'static str,
        content: String,
    },
    #[error("list {dir}: entry name is not UTF-8: {name}")]
    NameNotUtf8 { dir: PathBuf, name: String },
}

impl SysfsError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            SysfsError::Io { .. } => ErrorKind::Io,
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

    pub fn parse(path: &Path, reason: &'static str, content: &str) -> Self {
        SysfsError::Parse {
            path: path.to_path_buf(),
            reason,
            content: content.chars().take(64).collect(),
        }
    }

    fn io(path: PathBuf, errno: Errno) -> Self {
        match errno {
            Errno::ISDIR => SysfsError::NotRegularFile { path },
            errno => SysfsError::Io {
                path,
                source: errno.into(),
            },
        }
    }
}

/// One reusable read buffer per device read.
pub struct AttributeReader {
    buf: Vec<u8>,
}

impl Default for AttributeReader {
    fn default() -> Self {
        AttributeReader {
            // One byte more than an attribute can hold, to tell "full page" from "too long".
            buf: vec![0; MAX_ATTRIBUTE_BYTES + 1],
        }
    }
}

/// One entry of a directory listing. A name that is not UTF-8 is an entry of its own, reported
/// where it is used, so that it hides none of its siblings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    Name(String),
    /// The directory's path, and the name with its bytes escaped (`bad\xff`).
    NotUtf8 {
        dir: PathBuf,
        escaped: String,
    },
}

impl Entry {
    fn new(dir: &Path, name: &CStr) -> Entry {
        match name.to_str() {
            Ok(name) => Entry::Name(name.to_string()),
            Err(_) => Entry::NotUtf8 {
                dir: dir.to_path_buf(),
                escaped: name.to_bytes().escape_ascii().to_string(),
            },
        }
    }

    /// The name, or the error that reports an entry without a usable one.
    pub fn name(&self) -> Result<&str, SysfsError> {
        match self {
            Entry::Name(name) => Ok(name),
            Entry::NotUtf8 { dir, escaped } => Err(SysfsError::NameNotUtf8 {
                dir: dir.clone(),
                name: escaped.clone(),
            }),
        }
    }

    /// As [`Entry::name`], owned.
    pub fn into_name(self) -> Result<String, SysfsError> {
        match self {
            Entry::Name(name) => Ok(name),
            Entry::NotUtf8 { dir, escaped } => Err(SysfsError::NameNotUtf8 { dir, name: escaped }),
        }
    }
}

/// The name; an entry without one shows its escaped path, which no name can equal (a name has
/// no `/`), so listings stay usable as unit names.
impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Entry::Name(name) => f.write_str(name),
            Entry::NotUtf8 { dir, escaped } => write!(f, "{}/{escaped}", dir.display()),
        }
    }
}

/// An open sysfs directory; attributes and subdirectories are opened relative to it.
pub struct SysDir {
    fd: OwnedFd,
    path: PathBuf,
}

impl SysDir {
    pub fn open(path: &Path) -> Result<SysDir, SysfsError> {
        let fd = rustix::fs::open(path, dir_flags(), Mode::empty())
            .map_err(|errno| SysfsError::io(path.to_path_buf(), errno))?;
        Ok(SysDir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// A subdirectory (following symlinks, as `class/infiniband/<dev>` is one).
    pub fn subdir(&self, name: &str) -> Result<SysDir, SysfsError> {
        let fd = rustix::fs::openat(&self.fd, name, dir_flags(), Mode::empty())
            .map_err(|errno| SysfsError::io(self.path(name), errno))?;
        Ok(SysDir {
            fd,
            path: self.path(name),
        })
    }

    /// The full path of an entry, for messages.
    pub fn path(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// An attribute's content with surrounding whitespace (the kernel's trailing newline, the
    /// extra blank line some drivers print) removed.
    pub fn read<'r>(
        &self,
        name: &str,
        reader: &'r mut AttributeReader,
    ) -> Result<&'r str, SysfsError> {
        let content = self.read_bytes(name, reader)?;
        match std::str::from_utf8(content) {
            Ok(text) => Ok(text.trim()),
            Err(_) => Err(SysfsError::parse(
                &self.path(name),
                "not UTF-8 text",
                &String::from_utf8_lossy(content),
            )),
        }
    }

    /// An attribute's raw bytes (binary attributes such as EFI variables), at most one page.
    pub fn read_bytes<'r>(
        &self,
        name: &str,
        reader: &'r mut AttributeReader,
    ) -> Result<&'r [u8], SysfsError> {
        let len = self.open_and_read_first(name, &mut reader.buf[..])?;
        let content = &reader.buf[..len];
        if len > MAX_ATTRIBUTE_BYTES {
            let text = String::from_utf8_lossy(content);
            return Err(SysfsError::parse(
                &self.path(name),
                "longer than a page",
                &text,
            ));
        }
        Ok(content)
    }

    /// A text file that spans many pages (procfs seq files such as `/proc/modules`, index files
    /// such as `modules.builtin`), read to its end but never past `max_bytes`.
    pub fn read_text_file(&self, name: &str, max_bytes: usize) -> Result<String, SysfsError> {
        String::from_utf8(self.read_file(name, max_bytes)?).map_err(|err| {
            SysfsError::parse(
                &self.path(name),
                "not UTF-8 text",
                &String::from_utf8_lossy(err.as_bytes()),
            )
        })
    }

    /// Opens a file non-blocking, reads once into `buf` and closes it; refuses what is not a
    /// regular file.
    fn open_and_read_first(&self, name: &str, buf: &mut [u8]) -> Result<usize, SysfsError> {
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
        let fd = rustix::fs::openat(&self.fd, name, flags, Mode::empty())
            .map_err(|errno| SysfsError::io(self.path(name), errno))?;
        // Regular files return everything up to EOF in one read; only an empty or refused read
        // needs a look at what the file is (a FIFO reads as empty or EAGAIN).
        let len = match rustix::io::read(&fd, buf) {
            Ok(0) | Err(Errno::AGAIN) => {
                let stat = rustix::fs::fstat(&fd)
                    .map_err(|errno| SysfsError::io(self.path(name), errno))?;
                if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
                    return Err(SysfsError::NotRegularFile {
                        path: self.path(name),
                    });
                }
                0
            }
            Ok(len) => len,
            Err(errno) => return Err(SysfsError::io(self.path(name), errno)),
        };
        Ok(len)
    }

    /// A whole file as bytes, at most `limit` of them: binary attributes (a PCI device's
    /// `config`, up to 4096 bytes) and the few longer text files read under `--path.rootfs`
    /// (`modules.alias`, `nova.conf`). Same rules as [`SysDir::read`]: non-blocking, regular
    /// files only (checked before reading, since this reads until end of file), and a file
    /// longer than `limit` is refused rather than cut.
    pub fn read_file(&self, name: &str, limit: usize) -> Result<Vec<u8>, SysfsError> {
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
        let io_error = |errno| SysfsError::io(self.path(name), errno);
        let fd = rustix::fs::openat(&self.fd, name, flags, Mode::empty()).map_err(io_error)?;
        let stat = rustix::fs::fstat(&fd).map_err(io_error)?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return Err(SysfsError::NotRegularFile {
                path: self.path(name),
            });
        }
        // sysfs reports a size that need not match what a read returns (`config` says 4096
        // and gives 64 bytes to non-root readers), so the size is only a capacity hint.
        let hint = usize::try_from(stat.st_size).unwrap_or(limit).min(limit);
        let mut content = Vec::with_capacity(hint + 1);
        let mut chunk = [0u8; 4096];
        loop {
            match rustix::io::read(&fd, &mut chunk[..]) {
                Ok(0) => return Ok(content),
                Ok(len) => {
                    content.extend_from_slice(&chunk[..len]);
                    if content.len() > limit {
                        return Err(SysfsError::parse(
                            &self.path(name),
                            "longer than this file may be",
                            &String::from_utf8_lossy(&content[..content.len().min(64)]),
                        ));
                    }
                }
                Err(Errno::INTR) => continue,
                Err(errno) => return Err(io_error(errno)),
            }
        }
    }

    /// An unsigned integer attribute (counters, ids).
    pub fn read_u64(&self, name: &str, reader: &mut AttributeReader) -> Result<u64, SysfsError> {
        let text = self.read(name, reader)?;
        text.parse()
            .map_err(|_| SysfsError::parse(&self.path(name), "not an unsigned integer", text))
    }

    /// The directory's entries, sorted so output order is stable: numeric names (ports, GID
    /// indexes) by value, then the other names, then the names that are not UTF-8.
    pub fn entries(&self) -> Result<Vec<Entry>, SysfsError> {
        let io_error = |errno| SysfsError::io(self.path.clone(), errno);
        let listing = rustix::fs::openat(&self.fd, ".", dir_flags(), Mode::empty())
            .and_then(rustix::fs::Dir::new)
            .map_err(io_error)?;
        let mut entries = Vec::new();
        for entry in listing {
            let entry = entry.map_err(io_error)?;
            let name = entry.file_name();
            if name == c"." || name == c".." {
                continue;
            }
            entries.push(Entry::new(&self.path, name));
        }
        // A total order whatever the names.
        entries.sort_by_cached_key(|entry| match entry {
            Entry::Name(name) => (
                name.parse::<u64>().map_or(1, |_| 0),
                name.parse::<u64>().unwrap_or(0),
                name.clone(),
            ),
            Entry::NotUtf8 { escaped, .. } => (2, 0, escaped.clone()),
        });
        Ok(entries)
    }

    /// The last path component of a symlink's target (`device` -> `0000:05:00.0`,
    /// `device/driver` -> `mlx5_core`).
    pub fn link_target_name(&self, name: &str) -> Result<String, SysfsError> {
        let target = self.link_target(name)?;
        let target = target.to_string_lossy();
        Ok(target.rsplit('/').next().unwrap_or_default().to_string())
    }

    /// A symlink's target as written in the link (absolute or relative, not resolved).
    pub fn link_target(&self, name: &str) -> Result<PathBuf, SysfsError> {
        let target = rustix::fs::readlinkat(&self.fd, name, Vec::new())
            .map_err(|errno| SysfsError::io(self.path(name), errno))?;
        Ok(PathBuf::from(std::ffi::OsString::from_vec(
            target.into_bytes(),
        )))
    }
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC
}

impl From<SysfsError> for CollectError {
    fn from(err: SysfsError) -> Self {
        CollectError::new(err.kind(), err.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::{CString, OsStr};
    use std::fs;
    use std::os::unix::ffi::OsStrExt;
    use std::time::{Duration, Instant};

    fn mkfifo(path: &Path) {
        let c_path = CString::new(path.as_os_str().as_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o644) }, 0);
    }

    fn dir_with(files: &[(&str, &str)]) -> (tempfile::TempDir, SysDir) {
        let tmp = tempfile::tempdir().unwrap();
        for (name, content) in files {
            fs::write(tmp.path().join(name), content).unwrap();
        }
        let dir = SysDir::open(tmp.path()).unwrap();
        (tmp, dir)
    }

    #[test]
    fn trims_trailing_newline_and_blank_lines() {
        let (_tmp, dir) = dir_with(&[("link_layer", "InfiniBand\n\n")]);
        let mut reader = AttributeReader::default();
        assert_eq!(dir.read("link_layer", &mut reader).unwrap(), "InfiniBand");
    }

    #[test]
    fn empty_regular_file_is_empty_text() {
        let (_tmp, dir) = dir_with(&[("0", "")]);
        assert_eq!(dir.read("0", &mut AttributeReader::default()).unwrap(), "");
    }

    #[test]
    fn fifo_is_refused_without_blocking() {
        let (tmp, dir) = dir_with(&[]);
        mkfifo(&tmp.path().join("port_xmit_data"));
        let started = Instant::now();
        let err = dir
            .read("port_xmit_data", &mut AttributeReader::default())
            .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(1));
        assert_eq!(err.kind(), ErrorKind::NotRegularFile, "{err}");
    }

    #[test]
    fn fifo_with_a_silent_writer_is_refused_without_blocking() {
        let (tmp, dir) = dir_with(&[]);
        let path = tmp.path().join("rate");
        mkfifo(&path);
        let _writer = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let err = dir
            .read("rate", &mut AttributeReader::default())
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotRegularFile, "{err}");
    }

    #[test]
    fn directory_is_not_an_attribute() {
        let (tmp, dir) = dir_with(&[]);
        fs::create_dir(tmp.path().join("port_xmit_discards")).unwrap();
        let err = dir
            .read("port_xmit_discards", &mut AttributeReader::default())
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotRegularFile, "{err}");
    }

    #[test]
    fn longer_than_a_page_is_refused() {
        let long = "1".repeat(MAX_ATTRIBUTE_BYTES + 10);
        let (_tmp, dir) = dir_with(&[("big", &long)]);
        let err = dir
            .read("big", &mut AttributeReader::default())
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Parse, "{err}");
    }

    #[test]
    fn text_file_spanning_pages_is_read_whole_within_its_bound() {
        let line = "mlx5_core 2134016 1 mlx5_ib, Live 0xffffffffc0a3e000 (OE)\n";
        let long = line.repeat(500);
        let (_tmp, dir) = dir_with(&[("modules", &long)]);
        assert_eq!(dir.read_text_file("modules", long.len()).unwrap(), long);
        let err = dir.read_text_file("modules", long.len() - 1).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Parse, "{err}");
    }

    /// A real procfs seq file hands out at most a buffer per read(): the loop must read on.
    #[test]
    fn procfs_seq_file_longer_than_a_page_is_read_whole() {
        let proc = SysDir::open(Path::new("/proc")).unwrap();
        let text = proc.read_text_file("crypto", 1 << 20).unwrap();
        assert!(
            text.len() > MAX_ATTRIBUTE_BYTES,
            "/proc/crypto is {} bytes on this kernel; the test needs a multi-page seq file",
            text.len()
        );
        assert_eq!(text, fs::read_to_string("/proc/crypto").unwrap());
    }

    #[test]
    fn text_file_from_a_fifo_is_refused_without_blocking() {
        let (tmp, dir) = dir_with(&[]);
        mkfifo(&tmp.path().join("modules"));
        let err = dir.read_text_file("modules", 1 << 20).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotRegularFile, "{err}");
    }

    /// A device that never reaches end of file (`/dev/zero` linked where a file belongs): the
    /// readers that read to end of file refuse it before reading (a 1 GiB bound would not save
    /// the scrape); the one-read attribute readers stop at a page.
    #[test]
    fn endless_device_is_never_read_to_its_end() {
        let (tmp, dir) = dir_with(&[]);
        std::os::unix::fs::symlink("/dev/zero", tmp.path().join("zero")).unwrap();
        let started = Instant::now();
        for err in [
            dir.read_text_file("zero", 1 << 30).unwrap_err(),
            dir.read_file("zero", 1 << 30).unwrap_err(),
        ] {
            assert_eq!(err.kind(), ErrorKind::NotRegularFile, "{err}");
        }
        let mut reader = AttributeReader::default();
        for err in [
            dir.read_bytes("zero", &mut reader).unwrap_err(),
            dir.read("zero", &mut reader).unwrap_err(),
        ] {
            assert_eq!(err.kind(), ErrorKind::Parse, "{err}");
        }
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn binary_attribute_keeps_every_byte() {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join("SecureBoot"), [6, 0, 0, 0, 1]).unwrap();
        let dir = SysDir::open(tmp.path()).unwrap();
        let mut reader = AttributeReader::default();
        assert_eq!(
            dir.read_bytes("SecureBoot", &mut reader).unwrap(),
            [6, 0, 0, 0, 1]
        );
    }

    #[test]
    fn garbage_integer_is_a_parse_error_naming_the_file() {
        let (_tmp, dir) = dir_with(&[("symbol_error", "-x\n")]);
        let err = dir
            .read_u64("symbol_error", &mut AttributeReader::default())
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Parse);
        assert!(err.to_string().contains("symbol_error"), "{err}");
    }

    #[test]
    fn missing_file_is_not_found() {
        let (_tmp, dir) = dir_with(&[]);
        let err = dir
            .read("hca_type", &mut AttributeReader::default())
            .unwrap_err();
        assert!(err.is_not_found());
    }

    #[test]
    fn bytes_are_read_whole_up_to_the_limit() {
        let config: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join("config"), &config).unwrap();
        let dir = SysDir::open(tmp.path()).unwrap();
        assert_eq!(dir.read_file("config", 4096).unwrap(), config);
        let err = dir.read_file("config", 4095).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Parse, "{err}");
        mkfifo(&tmp.path().join("fifo"));
        let err = dir.read_file("fifo", 4096).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotRegularFile, "{err}");
    }

    #[test]
    fn entries_sort_numerically_and_links_name_their_target() {
        let (tmp, dir) = dir_with(&[]);
        for name in ["10", "2", "1"] {
            fs::create_dir(tmp.path().join(name)).unwrap();
        }
        std::os::unix::fs::symlink("../../../0000:05:00.0", tmp.path().join("device")).unwrap();
        let names = ["1", "2", "10", "device"].map(|name| Entry::Name(name.to_string()));
        assert_eq!(dir.entries().unwrap(), names);
        assert_eq!(dir.link_target_name("device").unwrap(), "0000:05:00.0");
        assert_eq!(
            dir.link_target("device").unwrap(),
            Path::new("../../../0000:05:00.0")
        );
    }

    /// One name that is not UTF-8 is one entry of its own, after the others, which it does not
    /// hide; used, it is a parse error naming the directory and the escaped name.
    #[test]
    fn a_name_that_is_not_utf8_hides_no_sibling() {
        let (tmp, dir) = dir_with(&[("port_rcv_data", "1\n"), ("2", "")]);
        fs::write(tmp.path().join(OsStr::from_bytes(b"bad\xff")), "").unwrap();
        let entries = dir.entries().unwrap();
        assert_eq!(
            entries[..2],
            ["2", "port_rcv_data"].map(|n| Entry::Name(n.into()))
        );
        let err = entries[2].name().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Parse);
        let cause = format!(
            "list {}: entry name is not UTF-8: bad\\xff",
            tmp.path().display()
        );
        assert_eq!(err.to_string(), cause);
        assert_eq!(
            entries[2].to_string(),
            format!("{}/bad\\xff", tmp.path().display())
        );
    }
}
