//! Directory listings: an `Entry` per name (a name that is not UTF-8 kept as an entry of its
//! own), read with `getdents64` and sorted in one total order.

use std::ffi::CStr;
use std::fmt;
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};

use rustix::io::Errno;

use super::SysfsError;

/// The buffer a listing is read into.
const LISTING_BYTES: usize = 16 << 10;

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
    pub(super) fn new(dir: &Path, name: &CStr) -> Entry {
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

/// The entries of the directory open as `fd` at `path` with their inode numbers, sorted as
/// [`SysDir::entries`] says; read from where `fd`'s offset is (its start, when just opened).
pub(super) fn list(fd: BorrowedFd<'_>, path: &Path) -> Result<Vec<(Entry, u64)>, SysfsError> {
    let io_error = |errno| SysfsError::io(path.to_path_buf(), errno);
    // Room for a device directory's entries or a PCI bus's few hundred in one `getdents64`;
    // any name fits (at most 255 bytes).
    let mut buf = Vec::with_capacity(LISTING_BYTES);
    let mut listing = rustix::fs::RawDir::new(fd, buf.spare_capacity_mut());
    let mut entries = Vec::new();
    while let Some(entry) = listing.next() {
        let entry = match entry {
            Ok(entry) => entry,
            // As rustix's `Dir` (and readdir) have it: a directory removed while listed ends
            // its listing, and an interrupted read is read again.
            Err(Errno::NOENT) => break,
            Err(Errno::INTR) => continue,
            Err(errno) => return Err(io_error(errno)),
        };
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        entries.push((Entry::new(path, name), entry.ino()));
    }
    // A total order whatever the names. Each key is made again at each comparison, borrowing
    // the name: keys made once would copy every name of a listing of hundreds.
    entries.sort_unstable_by(|(a, _), (b, _)| sort_key(a).cmp(&sort_key(b)));
    Ok(entries)
}

pub(super) fn without_inodes(entries: Vec<(Entry, u64)>) -> Vec<Entry> {
    entries.into_iter().map(|(entry, _)| entry).collect()
}

/// Where [`list`] puts an entry: numbers by value, then names, then names not UTF-8.
fn sort_key(entry: &Entry) -> (u8, u64, &str) {
    match entry {
        Entry::Name(name) => match name.parse::<u64>() {
            Ok(number) => (0, number, name),
            Err(_) => (1, 0, name),
        },
        Entry::NotUtf8 { escaped, .. } => (2, 0, escaped),
    }
}
