//! Reading the web config and the files it names, as a guard of access must: regular files
//! only, opened without blocking (a FIFO or a device is refused, never waited on), bounded in
//! size, and with the identity of what was read taken from the descriptor that was read, so
//! that a file renamed into place or rewritten while it was read is a change at the next look
//! (an identity taken from the path after the read could describe a newer file than the bytes).

use std::fs::File;
use std::io::Read as _;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

/// A file larger than this is refused: real ones are a few KiB, a CA bundle a few hundred.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// What identifies a file's content without reading it. The change time is there because a
/// rewrite in place within one modification-time tick can keep size and mtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Identity {
    fn of(meta: &std::fs::Metadata) -> Identity {
        Identity {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }
}

/// The identity of the file at `path` now (links followed); `None` when it cannot be stat'ed.
pub fn identity(path: &Path) -> Option<Identity> {
    std::fs::metadata(path).ok().map(|meta| Identity::of(&meta))
}

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("reading {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a regular file")]
    NotRegular { path: PathBuf },
    #[error("{path}: larger than {MAX_FILE_BYTES} bytes")]
    TooLarge { path: PathBuf },
    #[error("{path}: changed while it was read")]
    Changed { path: PathBuf },
}

/// The whole of the regular file at `path`, and the identity of what was read.
pub fn read(path: &Path) -> Result<(Vec<u8>, Identity), ReadError> {
    let io = |source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(io)?;
    let before = file.metadata().map_err(io)?;
    if !before.file_type().is_file() {
        return Err(ReadError::NotRegular {
            path: path.to_path_buf(),
        });
    }
    if before.size() > MAX_FILE_BYTES {
        return Err(ReadError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    let mut bytes = Vec::with_capacity(before.size() as usize);
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    let after = Identity::of(&std::fs::metadata(path).map_err(io)?);
    // Shorter or longer than the size it had when opened, or replaced meanwhile: a writer is at
    // work, and what was read is not a file anybody wrote.
    if Identity::of(&before) != after || bytes.len() as u64 != before.size() {
        return Err(ReadError::Changed {
            path: path.to_path_buf(),
        });
    }
    Ok((bytes, after))
}

#[cfg(test)]
mod tests;
