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
}

impl SysfsError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            SysfsError::Io { .. } => ErrorKind::Io,
            SysfsError::NotRegularFile { .. } => ErrorKind::NotRegularFile,
            SysfsError::Parse { .. } => ErrorKind::Parse,
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

    /// Names of the directory's entries, sorted so output order is stable; numeric names
    /// (ports, GID indexes) sort by value.
    pub fn entries(&self) -> Result<Vec<String>, SysfsError> {
        let io_error = |errno| SysfsError::io(self.path.clone(), errno);
        let listing = rustix::fs::openat(&self.fd, ".", dir_flags(), Mode::empty())
            .and_then(rustix::fs::Dir::new)
            .map_err(io_error)?;
        let mut names = Vec::new();
        for entry in listing {
            let entry = entry.map_err(io_error)?;
            let name = entry.file_name();
            if name == c"." || name == c".." {
                continue;
            }
            names.push(utf8_name(&self.path, name)?);
        }
        // Numbers first, by value; then the rest by name: a total order whatever the names.
        names.sort_by_cached_key(|name| {
            (
                name.parse::<u64>().map_or(1, |_| 0),
                name.parse::<u64>().unwrap_or(0),
                name.clone(),
            )
        });
        Ok(names)
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

fn utf8_name(dir: &Path, name: &CStr) -> Result<String, SysfsError> {
    name.to_str().map(str::to_string).map_err(|_| {
        let lossy = name.to_string_lossy();
        SysfsError::parse(&dir.join(&*lossy), "entry name is not UTF-8", &lossy)
    })
}

impl From<SysfsError> for CollectError {
    fn from(err: SysfsError) -> Self {
        let error = CollectError::new(err.kind(), err.to_string());
        match &err {
            // The quoted content may change every read; the file and the reason are the fault.
            SysfsError::Parse { path, reason, .. } => {
                error.keyed_by(format!("{}: {reason}", path.display()))
            }
            _ => error,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;
    use std::fs;
    use std::os::unix::ffi::OsStrExt;
    use std::time::{Duration, Instant};

    fn mkfifo(path: &Path) {
        let c_path = CString::new(path.as_os_str().as_bytes()).unwrap();
        // SAFETY: mkfifo reads a NUL-terminated path that lives across the call.
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
        assert_eq!(dir.entries().unwrap(), ["1", "2", "10", "device"]);
        assert_eq!(dir.link_target_name("device").unwrap(), "0000:05:00.0");
        assert_eq!(
            dir.link_target("device").unwrap(),
            Path::new("../../../0000:05:00.0")
        );
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use crate::test_strategies::bytes;
    use proptest::prelude::*;
    use std::fs;

    const NUMBER_TOKENS: &[&str] = &[
        "0",
        "1",
        "7",
        "42",
        " ",
        "\n",
        "\t",
        "-",
        "+",
        "0x",
        "18446744073709551615",
        "18446744073709551616",
        "N/A",
    ];

    /// Each of `SysDir`'s readers on one file holding `content`, against what it must give.
    fn check_readers(dir: &SysDir, content: &[u8], limit: usize) -> Result<(), TestCaseError> {
        let mut reader = AttributeReader::default();
        let one_page = content.len() <= MAX_ATTRIBUTE_BYTES;
        let text = std::str::from_utf8(content).ok();

        match dir.read_bytes("attr", &mut reader) {
            Ok(read) => prop_assert!(one_page && read == content),
            Err(err) => prop_assert!(!one_page && err.kind() == ErrorKind::Parse, "{err}"),
        }
        match dir.read("attr", &mut reader) {
            Ok(read) => prop_assert_eq!(Some(read), text.filter(|_| one_page).map(str::trim)),
            Err(err) => prop_assert!(
                (!one_page || text.is_none()) && err.kind() == ErrorKind::Parse,
                "{err}"
            ),
        }
        let number = text.filter(|_| one_page).map(|t| t.trim().parse::<u64>());
        match dir.read_u64("attr", &mut reader) {
            Ok(read) => prop_assert_eq!(number, Some(Ok(read))),
            Err(err) => prop_assert!(
                !matches!(number, Some(Ok(_))) && err.kind() == ErrorKind::Parse,
                "{err}"
            ),
        }
        match dir.read_file("attr", limit) {
            Ok(read) => prop_assert!(content.len() <= limit && read == content),
            Err(err) => prop_assert!(content.len() > limit && err.kind() == ErrorKind::Parse),
        }
        match dir.read_text_file("attr", limit) {
            Ok(read) => prop_assert!(content.len() <= limit && Some(read.as_str()) == text),
            Err(err) => prop_assert!(
                (content.len() > limit || text.is_none()) && err.kind() == ErrorKind::Parse,
                "{err}"
            ),
        }
        Ok(())
    }

    #[test]
    fn every_reader_gives_the_content_or_a_parse_error() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SysDir::open(tmp.path()).unwrap();
        let config = ProptestConfig::with_cases(128);
        proptest!(config, |(content in bytes(NUMBER_TOKENS), limit in 0usize..8192)| {
            fs::write(tmp.path().join("attr"), &content).unwrap();
            check_readers(&dir, &content, limit)?;
        });
    }

    #[test]
    fn a_printed_number_reads_back() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SysDir::open(tmp.path()).unwrap();
        let config = ProptestConfig::with_cases(64);
        proptest!(config, |(number: u64, before in "[ \t\n]{0,3}", after in "[ \t\n]{0,3}")| {
            fs::write(tmp.path().join("attr"), format!("{before}{number}{after}")).unwrap();
            let read = dir.read_u64("attr", &mut AttributeReader::default());
            prop_assert_eq!(read.unwrap(), number);
        });
    }
}
