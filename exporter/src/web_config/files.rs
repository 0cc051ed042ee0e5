//! The web config and the files it names are read as every file named by a flag is read
//! ([`NamedFile`]: without blocking, so a FIFO or a device is refused and never waited on;
//! regular files only; bounded), with the stamp of what was read taken from the open file
//! before the read: a file renamed into place meanwhile has another stamp at the next look.

use std::path::Path;

use crate::sysfs::{FileStamp, NamedFile, SysfsError};

/// A file larger than this is refused: real ones are a few KiB, a CA bundle a few hundred.
pub const MAX_FILE_BYTES: usize = 1 << 20;

/// The whole of the regular file at `path`, and the stamp of what was read.
pub fn read(path: &Path) -> Result<(Vec<u8>, FileStamp), SysfsError> {
    let file = NamedFile::open(path)?;
    Ok((file.read(MAX_FILE_BYTES)?, file.stamp()))
}

#[cfg(test)]
mod tests;
