//! `UnitRead`: one unit's read (an RDMA device, a PCI device) through one value that owns its
//! held descriptors, its read buffer and where its failures go, so a collector names what it
//! reads and nothing it reads with.

use std::sync::Arc;

use super::{AttributeReader, Entry, HeldAttributes, SysDir, SysfsError};

/// Where a unit's read counts what failed: the collector framework's output, which sysfs does
/// not name (it sits above sysfs).
pub trait Report {
    fn report(&mut self, err: SysfsError);
}

/// A unit's read: its [`HeldAttributes`] (attributes re-read with `pread` at offset 0, those a
/// directory lacks remembered as absent), one [`AttributeReader`] buffer for every attribute
/// (borrowed, so that a listing reading many units' sets uses one), and `out`, where errors go
/// (and, to its collector, samples). Verbs that give a `Result`
/// leave the error to the caller; [`UnitRead::label`], [`UnitRead::optional`] and
/// [`UnitRead::reported`] count it.
pub struct UnitRead<'a, O> {
    held: &'a mut HeldAttributes,
    reader: &'a mut AttributeReader,
    out: &'a mut O,
}

impl<'a, O: Report> UnitRead<'a, O> {
    pub fn new(
        held: &'a mut HeldAttributes,
        reader: &'a mut AttributeReader,
        out: &'a mut O,
    ) -> Self {
        UnitRead { held, reader, out }
    }

    /// Where the unit's samples and errors go.
    pub fn out(&mut self) -> &mut O {
        self.out
    }

    /// The unit's held set, for what it tells of a directory (its stamp) rather than reads.
    pub fn held(&mut self) -> &mut HeldAttributes {
        self.held
    }

    /// An attribute's trimmed text, through its held descriptor.
    pub fn text(&mut self, dir: &SysDir, name: &str) -> Result<&str, SysfsError> {
        dir.read_held(name, self.held, self.reader)
    }

    /// As [`UnitRead::text`], `None` for an attribute the directory lacks, made without an
    /// error: optional attributes (`aer_dev_*` without AER, `sriov_*` without SR-IOV) are
    /// absent on most devices, every scrape.
    pub fn optional_text(&mut self, dir: &SysDir, name: &str) -> Result<Option<&str>, SysfsError> {
        dir.read_held_optional(name, self.held, self.reader)
    }

    /// An unsigned integer attribute, through its held descriptor.
    pub fn u64(&mut self, dir: &SysDir, name: &str) -> Result<u64, SysfsError> {
        dir.read_held_u64(name, self.held, self.reader)
    }

    /// As [`UnitRead::u64`], `None` for an attribute the directory lacks, as
    /// [`UnitRead::optional_text`].
    pub fn optional_u64(&mut self, dir: &SysDir, name: &str) -> Result<Option<u64>, SysfsError> {
        dir.read_held_optional_u64(name, self.held, self.reader)
    }

    /// An attribute the kernel fixes with its directory: on sysfs read once per directory.
    pub fn fixed(&mut self, dir: &SysDir, name: &str) -> Result<&str, SysfsError> {
        dir.read_fixed(name, self.held, self.reader)
    }

    /// As [`UnitRead::fixed`], its raw bytes, and whether they are kept from the directory's
    /// first read (on sysfs) rather than read now.
    pub fn fixed_bytes(&mut self, dir: &SysDir, name: &str) -> Result<(&[u8], bool), SysfsError> {
        let bytes = dir.read_fixed_bytes(name, self.held, self.reader)?;
        Ok((bytes, self.held.keeps_fixed(dir, name)))
    }

    /// An attribute's raw bytes, at most a page, through its held descriptor.
    pub fn bytes(&mut self, dir: &SysDir, name: &str) -> Result<&[u8], SysfsError> {
        dir.read_held_bytes(name, self.held, self.reader)
    }

    /// `len` bytes at most from `offset` of a binary attribute, through its held descriptor.
    pub fn bytes_at(
        &mut self,
        dir: &SysDir,
        name: &str,
        offset: usize,
        len: usize,
    ) -> Result<&[u8], SysfsError> {
        dir.read_held_at(name, offset, len, self.held, self.reader)
    }

    /// An attribute read without a held descriptor (open, read, close), for one read once.
    pub fn unheld(&mut self, dir: &SysDir, name: &str) -> Result<&str, SysfsError> {
        dir.read(name, self.reader)
    }

    /// An optional attribute's text for a label: "" when absent, or broken (then counted).
    pub fn label(&mut self, dir: &SysDir, name: &str) -> &str {
        let text = dir.read_held(name, self.held, self.reader);
        optional(self.out, text).unwrap_or_default()
    }

    /// A subdirectory the kernel makes with `dir` (an RDMA device's `ports/`, a port's
    /// `counters/`), held open between rounds while `dir` stays the same directory.
    pub fn subdir(&mut self, dir: &SysDir, name: &str) -> Result<Arc<SysDir>, SysfsError> {
        self.held.fixed_subdir(dir, name)
    }

    /// The entries of a directory the kernel makes with its entries (`ports/`,
    /// `hw_counters/`), listed again only when it changed.
    pub fn list(&mut self, dir: &SysDir) -> Result<Arc<[Entry]>, SysfsError> {
        self.held.fixed_entries(dir)
    }

    /// The value, or `None` after counting the error.
    pub fn reported<T>(&mut self, result: Result<T, SysfsError>) -> Option<T> {
        reported(self.out, result)
    }

    /// The value of something a driver or kernel may rightly lack: `None` when it is absent
    /// ([`SysfsError::is_absent`]); any other failure is counted and gives `None`.
    pub fn optional<T>(&mut self, result: Result<T, SysfsError>) -> Option<T> {
        optional(self.out, result)
    }
}

fn reported<T>(out: &mut impl Report, result: Result<T, SysfsError>) -> Option<T> {
    result.map_err(|err| out.report(err)).ok()
}

fn optional<T>(out: &mut impl Report, result: Result<T, SysfsError>) -> Option<T> {
    match result {
        Err(err) if err.is_absent() => None,
        result => reported(out, result),
    }
}
