//! Descriptors of sysfs attributes kept open between scrapes and read again with `pread`, within
//! a process-wide budget.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use rustix::fs::FileType;
use rustix::io::Errno;

use super::{read_flags, SysDir, SysfsError};

/// Attributes read scrape after scrape through descriptors kept open: a `pread` at offset 0 of
/// a held sysfs attribute runs the driver's `show()` again and costs about a tenth of open,
/// read and close, which is most of a scrape's CPU when it reads thousands of counters.
///
/// An attribute is opened as [`SysDir::read`] opens it (by its path inside the root,
/// non-blocking) and held only when it is a regular file. A held descriptor is dropped, and the
/// attribute opened again by its path, when a read fails with `ENODEV` (a sysfs attribute
/// removed with its device) or `ENOENT`, or outside sysfs (fixture trees) when its inode has no
/// name left (`st_nlink` 0: removed, or replaced by a rename), which an `fstat` of the
/// descriptor tells without a path walk; a sysfs attribute is never renamed over, so sysfs
/// reads need no `fstat`. An attribute not read in a round ([`HeldAttributes::end_round`]) is
/// closed, and the owner drops the whole set when the directory it reads is not the one it was
/// ([`SysDir::identity`]). Descriptors held by the whole process are bounded
/// ([`HeldBudget`]); beyond the bound attributes are read as [`SysDir::read`] reads them.
pub struct HeldAttributes {
    files: HashMap<PathBuf, HeldFile>,
    budget: &'static HeldBudget,
    round: u64,
}

impl Default for HeldAttributes {
    fn default() -> Self {
        HeldAttributes::with_budget(HeldBudget::process())
    }
}

/// `SYSFS_MAGIC` of `linux/magic.h`: the `f_type` statfs reports for sysfs.
const SYSFS_MAGIC: i64 = 0x6265_6572;

/// Errors of a held descriptor that mean the attribute it read is gone, not broken.
fn held_attribute_gone(errno: Errno) -> bool {
    matches!(errno, Errno::NODEV | Errno::NOENT)
}

struct HeldFile {
    fd: OwnedFd,
    /// Outside sysfs: look whether the inode still has a name before each read.
    check_links: bool,
    /// The round it was last read in.
    read_in: u64,
    _slot: HeldSlot,
}

impl HeldFile {
    /// The attribute's content now; `Ok(None)` when the held inode has no name any more.
    fn read(&self, buf: &mut [u8]) -> Result<Option<usize>, Errno> {
        if self.check_links && rustix::fs::fstat(&self.fd)?.st_nlink == 0 {
            return Ok(None);
        }
        rustix::io::pread(&self.fd, buf, 0).map(Some)
    }
}

impl HeldAttributes {
    pub fn with_budget(budget: &'static HeldBudget) -> Self {
        HeldAttributes {
            files: HashMap::new(),
            budget,
            round: 0,
        }
    }

    /// Reads `name` under `dir` into `buf` through its held descriptor, opening (and holding)
    /// it first when there is none or the held one is gone.
    pub(super) fn read(
        &mut self,
        dir: &SysDir,
        name: &str,
        buf: &mut [u8],
    ) -> Result<usize, SysfsError> {
        let key = dir.relative.join(name);
        if let Some(file) = self.files.get_mut(&key) {
            file.read_in = self.round;
            match file.read(buf) {
                Ok(Some(len)) => return Ok(len),
                Ok(None) => {}
                Err(errno) if held_attribute_gone(errno) => {}
                Err(errno) => {
                    self.files.remove(&key);
                    return Err(SysfsError::io(dir.path(name), errno));
                }
            }
            self.files.remove(&key);
        }
        let Some(slot) = self.budget.reserve() else {
            return dir.open_and_read_first(name, buf);
        };
        let io_error = |errno| SysfsError::io(dir.path(name), errno);
        let fd = dir.open_entry(name, read_flags()).map_err(io_error)?;
        let stat = rustix::fs::fstat(&fd).map_err(io_error)?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return Err(SysfsError::NotRegularFile {
                path: dir.path(name),
            });
        }
        let len = rustix::io::pread(&fd, &mut *buf, 0).map_err(io_error)?;
        let check_links = rustix::fs::fstatfs(&fd).map_or(true, |fs| {
            #[allow(clippy::unnecessary_cast)] // `f_type`'s width differs between targets.
            let magic = fs.f_type as i64;
            magic != SYSFS_MAGIC
        });
        let file = HeldFile {
            fd,
            check_links,
            read_in: self.round,
            _slot: slot,
        };
        self.files.insert(key, file);
        Ok(len)
    }

    /// Closes the descriptors of attributes not read since the last call (a counter the
    /// driver no longer has, a port gone), and starts a new round.
    pub fn end_round(&mut self) {
        let round = self.round;
        self.files.retain(|_, file| file.read_in == round);
        self.round = round.wrapping_add(1);
    }

    /// Descriptors held now.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

/// The bound on descriptors held by [`HeldAttributes`] across the process, so that holding
/// never takes the descriptors connections and other reads need.
pub struct HeldBudget {
    limit: usize,
    held: AtomicUsize,
}

/// Most descriptors ever held, whatever the open-file limit: a 64-HCA node holds about 7000.
const MAX_HELD: usize = 1 << 16;

static PROCESS_BUDGET: OnceLock<HeldBudget> = OnceLock::new();

impl HeldBudget {
    pub const fn new(limit: usize) -> Self {
        HeldBudget {
            limit,
            held: AtomicUsize::new(0),
        }
    }

    /// Sets the process's budget to `spare`, the descriptors the open-file limit leaves beside
    /// connections and the exporter's own (`None`: no limit), at most [`MAX_HELD`]. main calls
    /// it before the collectors start; a later call changes nothing.
    pub fn set_process(spare: Option<u64>) {
        let spare = spare.map_or(MAX_HELD, |n| usize::try_from(n).unwrap_or(MAX_HELD));
        PROCESS_BUDGET.get_or_init(|| HeldBudget::new(spare.min(MAX_HELD)));
    }

    /// The process's budget: as [`HeldBudget::set_process`] set it, else half the soft
    /// open-file limit in force at the first read, at most [`MAX_HELD`].
    pub fn process() -> &'static HeldBudget {
        PROCESS_BUDGET.get_or_init(|| {
            let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
            let half = soft.map_or(MAX_HELD, |soft| {
                usize::try_from(soft / 2).unwrap_or(MAX_HELD)
            });
            HeldBudget::new(half.min(MAX_HELD))
        })
    }

    fn reserve(&'static self) -> Option<HeldSlot> {
        self.held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                (held < self.limit).then_some(held + 1)
            })
            .ok()
            .map(|_| HeldSlot { budget: self })
    }

    /// Descriptors held now, process-wide.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }
}

/// One descriptor's share of a [`HeldBudget`], given back when it is dropped.
struct HeldSlot {
    budget: &'static HeldBudget,
}

impl Drop for HeldSlot {
    fn drop(&mut self) {
        self.budget.held.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use crate::sysfs::tests::{dir_with, mkfifo};
    use crate::sysfs::AttributeReader;
    use std::fs;
    use std::path::Path;

    /// A held attribute reads what the file holds now: rewritten in place (the same inode,
    /// read again at offset 0), replaced by a rename (the held inode has no name left), removed
    /// and made again. One descriptor is held all along.
    #[test]
    fn a_held_attribute_reads_the_file_as_it_is_now() {
        let (tmp, dir) = dir_with(&[("port_rcv_data", "1\n")]);
        let budget: &'static HeldBudget = Box::leak(Box::new(HeldBudget::new(8)));
        let mut held = HeldAttributes::with_budget(budget);
        let mut reader = AttributeReader::default();
        let mut read = |held: &mut HeldAttributes| {
            let text = dir.read_held("port_rcv_data", held, &mut reader);
            text.map(str::to_string)
        };
        assert_eq!(read(&mut held).unwrap(), "1");
        let path = tmp.path().join("port_rcv_data");
        fs::write(&path, "22\n").unwrap();
        assert_eq!(read(&mut held).unwrap(), "22");
        fs::write(tmp.path().join("new"), "333\n").unwrap();
        fs::rename(tmp.path().join("new"), &path).unwrap();
        assert_eq!(read(&mut held).unwrap(), "333");
        assert_eq!((held.len(), budget.held()), (1, 1));
        fs::remove_file(&path).unwrap();
        assert!(read(&mut held).unwrap_err().is_not_found());
        assert_eq!((held.len(), budget.held()), (0, 0));
        fs::write(&path, "4\n").unwrap();
        assert_eq!(read(&mut held).unwrap(), "4");
        assert_eq!((held.len(), budget.held()), (1, 1));
    }

    /// Beyond the budget attributes are read and closed as unheld ones are; what is not a
    /// regular file is never held; a round closes what it did not read.
    #[test]
    fn held_descriptors_stay_within_their_budget_and_their_round() {
        let (tmp, dir) = dir_with(&[("a", "1\n"), ("b", "2\n")]);
        mkfifo(&tmp.path().join("fifo"));
        let budget: &'static HeldBudget = Box::leak(Box::new(HeldBudget::new(1)));
        let mut held = HeldAttributes::with_budget(budget);
        let mut reader = AttributeReader::default();
        let err = dir.read_held("fifo", &mut held, &mut reader).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotRegularFile, "{err}");
        assert_eq!(budget.held(), 0);
        for _ in 0..2 {
            assert_eq!(dir.read_held("a", &mut held, &mut reader).unwrap(), "1");
            assert_eq!(dir.read_held("b", &mut held, &mut reader).unwrap(), "2");
            assert_eq!((held.len(), budget.held()), (1, 1));
            held.end_round();
        }
        held.end_round();
        assert_eq!((held.len(), budget.held()), (0, 0));
        assert_eq!(dir.read_held("b", &mut held, &mut reader).unwrap(), "2");
        assert_eq!((held.len(), budget.held()), (1, 1));
        drop(held);
        assert_eq!(budget.held(), 0);
    }

    /// A real sysfs attribute held open is read fresh each time: `/sys/kernel/uevent_seqnum`
    /// moves when a uevent is sent, as the kernel's `show()` runs again on every pread.
    #[test]
    fn a_held_sysfs_attribute_is_read_fresh() {
        let Ok(dir) = SysDir::open(Path::new("/sys"), "kernel") else {
            return;
        };
        let mut held = HeldAttributes::default();
        let mut reader = AttributeReader::default();
        let mut seqnum = || -> u64 {
            let text = dir.read_held("uevent_seqnum", &mut held, &mut reader);
            text.unwrap().parse().unwrap()
        };
        let before = seqnum();
        // Writing "change" to a device's uevent sends one; the loopback device is everywhere.
        if fs::write("/sys/class/net/lo/uevent", "change").is_err() {
            return;
        }
        assert!(seqnum() > before);
        assert!(!held.is_empty());
    }
}
