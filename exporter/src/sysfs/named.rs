//! Files named by flags (config, token and secret files): not under a root, so their links are
//! followed as for any path the operator writes; read whole within a bound, regular files only.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode};
use rustix::io::Errno;

use super::{read_flags, SysfsError};

/// A file's identity and version as `stat` tells them ([`super::SysDir::stamp`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    device: u64,
    inode: u64,
    size: i64,
    modified: (i64, u64),
}

impl FileStamp {
    pub(super) fn of(stat: &rustix::fs::Stat) -> FileStamp {
        FileStamp {
            device: stat.st_dev,
            inode: stat.st_ino,
            size: stat.st_size,
            modified: (stat.st_mtime, stat.st_mtime_nsec),
        }
    }

    /// Device and inode: which file it is, whatever its version.
    pub fn identity(&self) -> (u64, u64) {
        (self.device, self.inode)
    }

    /// The stamp of the file a path names now (links followed, as for a [`NamedFile`]);
    /// `None` when it cannot be stat'ed.
    pub fn of_path(path: &Path) -> Option<FileStamp> {
        rustix::fs::stat(path).ok().map(|stat| FileStamp::of(&stat))
    }
}

/// A file named by a flag (a config or token file; not under a root, so its links are
/// followed as for any path the operator writes), opened: its stamp, taken from the open
/// file before any read, tells whether what was made from it before still holds.
pub struct NamedFile {
    fd: OwnedFd,
    path: PathBuf,
    stamp: FileStamp,
}

impl NamedFile {
    pub fn open(path: &Path) -> Result<NamedFile, SysfsError> {
        let io_error = |errno| SysfsError::io(path.to_path_buf(), errno);
        let fd = rustix::fs::open(path, read_flags(), Mode::empty()).map_err(io_error)?;
        let stamp = FileStamp::of(&rustix::fs::fstat(&fd).map_err(io_error)?);
        Ok(NamedFile {
            fd,
            path: path.to_path_buf(),
            stamp,
        })
    }

    pub fn stamp(&self) -> FileStamp {
        self.stamp
    }

    /// Read as [`super::SysDir::read_file`] reads.
    pub fn read(&self, limit: usize) -> Result<Vec<u8>, SysfsError> {
        read_to_end(&self.fd, self.path.clone(), limit)
    }
}

/// A file named by a flag, read whole as [`NamedFile::read`] reads.
pub fn read_named_file(path: &Path, limit: usize) -> Result<Vec<u8>, SysfsError> {
    NamedFile::open(path)?.read(limit)
}

/// A secret named by a flag, read as [`read_named_file`] reads (a regular file only), refused
/// when its mode gives its group or others any access (checked on the opened file, so a link is judged by the
/// file it leads to).
pub fn read_private_file(path: &Path, limit: usize) -> Result<Vec<u8>, SysfsError> {
    let fd = rustix::fs::open(path, read_flags(), Mode::empty())
        .map_err(|errno| SysfsError::io(path.to_path_buf(), errno))?;
    let stat = rustix::fs::fstat(&fd).map_err(|errno| SysfsError::io(path.to_path_buf(), errno))?;
    let mode = stat.st_mode & 0o7777;
    // A device or FIFO is refused as such, whatever its mode.
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(SysfsError::NotRegularFile {
            path: path.to_path_buf(),
        });
    }
    if mode & 0o077 != 0 {
        return Err(SysfsError::NotPrivate {
            path: path.to_path_buf(),
            mode,
        });
    }
    read_to_end(&fd, path.to_path_buf(), limit)
}

/// Reads an open file to its end: regular files only (checked before reading, since this
/// reads until end of file), at most `limit` bytes, a longer file refused rather than cut.
pub(super) fn read_to_end(
    fd: &OwnedFd,
    path: PathBuf,
    limit: usize,
) -> Result<Vec<u8>, SysfsError> {
    let stat = rustix::fs::fstat(fd).map_err(|errno| SysfsError::io(path.clone(), errno))?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(SysfsError::NotRegularFile { path });
    }
    // sysfs reports a size that need not match what a read returns (`config` says 4096
    // and gives 64 bytes to non-root readers), so the size is only a capacity hint.
    let hint = usize::try_from(stat.st_size).unwrap_or(limit).min(limit);
    let mut content = Vec::with_capacity(hint + 1);
    let mut chunk = [0u8; 4096];
    loop {
        match rustix::io::read(fd, &mut chunk[..]) {
            Ok(0) => return Ok(content),
            Ok(len) => {
                content.extend_from_slice(&chunk[..len]);
                if content.len() > limit {
                    let reason = "longer than this file may be";
                    return Err(SysfsError::unparsed(path, reason, content.len()));
                }
            }
            Err(Errno::INTR) => continue,
            Err(errno) => return Err(SysfsError::io(path, errno)),
        }
    }
}
