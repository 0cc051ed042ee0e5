//! Descriptors of sysfs attributes kept open between scrapes and read again with `pread`, within
//! a process-wide budget ([`super::budget`]).
//!
//! What is kept, and when it is dropped:
//! - an attribute's descriptor, until the file is gone or its directory changed: one `fstat` of
//!   each directory a scrape (none on sysfs for a directory held or kept); at an offset, for a
//!   register of a binary attribute;
//! - an attribute a directory lacks, remembered as absent until the directory changes;
//! - listings and subdirectories of directories whose entries the kernel makes with them
//!   (`fixed_subdir`), a subdirectory while it is asked for each round; one the kernel makes
//!   apart from its parent (an IOMMU group, `listed_subdir`), on sysfs while the parent's listing
//!   shows it with the same inode number; a held subdirectory's entries listed again each time
//!   through its own descriptor (`subdir_entries`);
//! - on sysfs, attributes the kernel fixes with their directory, read once per directory;
//! - a directory's [`DirStamp`] (inode and modification time), for what a collector derives
//!   from where a directory is (a PCI device's root port) and keeps while it stays the same.
//!
//! Collectors reach these through [`super::UnitRead`], one per unit ([`super::HeldByUnit`]).

use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use foldhash::fast::RandomState as FastState;
use foldhash::{HashMap as FastMap, HashMapExt, HashSet as FastSet, HashSetExt};
use indexmap::IndexMap;
use rustix::fs::FileType;
use rustix::io::Errno;

mod file_name;

use file_name::FileName;

use super::budget::{HeldBudget, HeldSlot};
use super::linked::numbers_not_reused;
use super::{is_plain_name, read_flags, Entry, SysDir, SysfsError};

/// Attributes read scrape after scrape through descriptors kept open: a `pread` at offset 0 of
/// a held sysfs attribute runs the driver's `show()` again and costs about a tenth of open,
/// read and close, which is most of a scrape's CPU when it reads thousands of counters.
///
/// An attribute is opened as [`SysDir::read`] opens it (by its path inside the root,
/// non-blocking) and held only when it is a regular file. A held descriptor is dropped, and the
/// attribute opened again by its path, when a read fails with `ENODEV` (a sysfs attribute
/// removed with its device) or `ENOENT`, or when the directory it is in changed.
///
/// Each round looks once at each directory read from (one `fstat` of the [`SysDir`] the
/// caller opened), not at each file: a directory that is another inode, or whose entries
/// changed (its modification time moved: a file removed, created or renamed over), drops what
/// was held in it. On sysfs a directory looked at before through the same [`SysDir`] (held or
/// kept between scrapes) is not looked at again: it is the same inode, and what is held in it
/// lasts as long as that descriptor. A file rewritten in place leaves the directory as it was,
/// and `pread` reads the new content. An attribute the directory lacks is remembered as absent
/// until the directory changes (on sysfs: until it is another one), so that an optional
/// attribute (`aer_dev_*` without AER, `sriov_*` without SR-IOV) costs no failed open per
/// scrape: sysfs creates a device's attributes with its directory, and a device registered
/// again is a new directory (another inode). Outside sysfs (fixture trees), a directory
/// modified less than [`SETTLING_TIME`] before the look may change again within the same timestamp, so while it
/// settles each of its files is checked itself: an inode with no name left (`st_nlink` 0:
/// removed, or replaced by a rename) is opened again. A sysfs attribute is never renamed over,
/// so sysfs reads need neither.
///
/// An attribute not read in a round ([`HeldAttributes::end_round`]) is closed. Descriptors held
/// by the whole process are bounded ([`HeldBudget`]); beyond the bound attributes are read as
/// [`SysDir::read`] reads them.
pub struct HeldAttributes {
    /// By the directory's path inside its root. The maps of held things are looked up once or
    /// twice per attribute read, thousands of times a scrape, by keys the kernel names: a fast
    /// hash, not SipHash's flooding resistance.
    dirs: IndexMap<Vec<u8>, HeldDir, FastState>,
    /// The directory read from last in this round: the [`SysDir`] (by its id) and where it is in
    /// `dirs`. A collector reads a directory's attributes one after the other, so most reads
    /// find their directory here rather than by hashing and comparing its path.
    last_dir: Option<(u64, usize)>,
    budget: &'static HeldBudget,
    round: u64,
    /// When this round first looked at a directory: the `now` of its looks (an earlier time
    /// than each look's own only makes fewer directories settled), one clock read a round.
    round_time: Option<Duration>,
}

impl Default for HeldAttributes {
    fn default() -> Self {
        HeldAttributes::with_budget(HeldBudget::process())
    }
}

/// How long after a directory's last modification its timestamp may still hide another one
/// (filesystems keep times at a tick's, a second's, or FAT's two seconds' granularity).
const SETTLING_TIME: Duration = Duration::from_secs(2);

/// Errors of a held descriptor that mean the attribute it read is gone, not broken.
fn held_attribute_gone(errno: Errno) -> bool {
    matches!(errno, Errno::NODEV | Errno::NOENT)
}

/// What tells a directory's entries changed: its inode and modification time.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct DirStamp {
    device: u64,
    inode: u64,
    modified: (i64, u64),
}

/// The attributes held in one directory.
struct HeldDir {
    stamp: DirStamp,
    on_sysfs: bool,
    /// The round the directory was last looked at in.
    looked_at_in: u64,
    /// The [`SysDir`] it was last looked at through (its id).
    looked_through: u64,
    /// Whether each file must be checked for a name before its read (outside sysfs, while the
    /// directory settles).
    check_links: bool,
    /// In about the order read (a file opened again goes to the end), which is the order a
    /// collector reads them in.
    files: IndexMap<FileName, HeldFile, FastState>,
    /// Where in `files` the file read after the last one is, most likely.
    next_file: usize,
    /// Names of its own entries found absent since it last changed (see [`HeldAttributes`]).
    absent: FastSet<Box<str>>,
    /// Its listing, taken when no file needed a check of its own (see
    /// [`HeldAttributes::fixed_entries`]).
    entries: Option<Arc<[Entry]>>,
    /// Attributes whose values the kernel fixes with the directory, as first read in it on
    /// sysfs (see [`HeldAttributes::read_fixed`]).
    fixed: FastMap<Box<str>, Box<[u8]>>,
    /// Its subdirectories held open (see [`HeldAttributes::fixed_subdir`]).
    subdirs: FastMap<Box<str>, HeldSubdir>,
}

/// A subdirectory held open, with two shares of the budget: its descriptor, and the root it
/// keeps open (shared with others as a rule, so this counts more than is held, never less).
struct HeldSubdir {
    dir: Arc<SysDir>,
    /// The inode number its parent's listing gave it when opened (see
    /// [`HeldAttributes::listed_subdir`]); `None` for one the kernel makes with its parent.
    listed_inode: Option<u64>,
    /// The round it was last asked for in.
    used_in: u64,
    _slots: [HeldSlot; 2],
}

struct HeldFile {
    fd: OwnedFd,
    /// An entry of the directory itself, which the directory's look covers; one reached
    /// through a link or a path is checked itself outside sysfs.
    in_dir: bool,
    /// The round it was last read in.
    read_in: u64,
    _slot: HeldSlot,
}

impl HeldFile {
    /// The attribute's content now from `offset`; `Ok(None)` when the held inode has no name
    /// any more.
    fn read(&self, buf: &mut [u8], offset: u64, check_links: bool) -> Result<Option<usize>, Errno> {
        if check_links && rustix::fs::fstat(&self.fd)?.st_nlink == 0 {
            return Ok(None);
        }
        rustix::io::pread(&self.fd, buf, offset).map(Some)
    }
}

impl HeldDir {
    /// The held file `name` and where it is in `files`: looked for where the last read ended
    /// first, by name alone.
    fn file(&mut self, name: &str) -> Option<(usize, &mut HeldFile)> {
        let index = match self.files.get_index(self.next_file) {
            Some((held, _)) if held.as_bytes() == name.as_bytes() => self.next_file,
            _ => self.files.get_index_of(name.as_bytes())?,
        };
        self.next_file = index + 1;
        let (_, file) = self.files.get_index_mut(index)?;
        Some((index, file))
    }

    /// `dir` as it is now: `None` when it cannot be looked at (then nothing in it is held).
    /// `now`: a time taken before the look (a change after it gets this time or a later one).
    fn look(dir: &SysDir, now: Duration) -> Option<(DirStamp, bool)> {
        let stat = rustix::fs::fstat(&dir.fd).ok()?;
        let stamp = DirStamp {
            device: stat.st_dev,
            inode: stat.st_ino,
            modified: (stat.st_mtime, stat.st_mtime_nsec),
        };
        let modified = Duration::new(
            u64::try_from(stat.st_mtime).unwrap_or(0),
            u32::try_from(stat.st_mtime_nsec).unwrap_or(0),
        );
        let settled = modified + SETTLING_TIME <= now;
        Some((stamp, settled))
    }

    fn new(dir: &SysDir, stamp: DirStamp, round: u64) -> HeldDir {
        HeldDir {
            stamp,
            on_sysfs: dir.on_sysfs(),
            looked_at_in: round,
            looked_through: dir.id,
            check_links: true,
            files: IndexMap::default(),
            next_file: 0,
            absent: FastSet::new(),
            entries: None,
            fixed: FastMap::new(),
            subdirs: FastMap::new(),
        }
    }
}

impl HeldAttributes {
    pub fn with_budget(budget: &'static HeldBudget) -> Self {
        HeldAttributes {
            dirs: IndexMap::default(),
            last_dir: None,
            budget,
            round: 0,
            round_time: None,
        }
    }

    /// The time this round's looks take as now, read at its first look; `None` before 1970.
    fn round_time(&mut self) -> Option<Duration> {
        if self.round_time.is_none() {
            self.round_time = SystemTime::now().duration_since(UNIX_EPOCH).ok();
        }
        self.round_time
    }

    /// What is held in `dir`, looked at once per round; `None` when it cannot be looked at.
    /// Found without a look-up when it is the directory read from last.
    fn held_dir(&mut self, dir: &SysDir) -> Option<&mut HeldDir> {
        let round = self.round;
        if let Some((id, index)) = self.last_dir {
            if id == dir.id {
                return self.dirs.get_index_mut(index).map(|(_, held)| held);
            }
        }
        let key = dir.relative.as_os_str().as_bytes();
        let (index, settled) = match self.dirs.get_index_of(key) {
            Some(index) if self.dirs[index].looked_at_in == round => {
                self.last_dir = Some((dir.id, index));
                return Some(&mut self.dirs[index]);
            }
            // On sysfs a directory looked at before through the same descriptor (a directory
            // held or kept between scrapes) is the same inode, and its time need not move
            // there (kernfs moves it only for a node with attributes of its own): no `fstat`,
            // and what is held in it lasts as long as the descriptor.
            Some(index)
                if self.dirs[index].on_sysfs && self.dirs[index].looked_through == dir.id =>
            {
                (index, true)
            }
            Some(index) => match HeldDir::look(dir, self.round_time()?) {
                None => {
                    self.dirs.swap_remove_index(index);
                    // Another directory is at `index` now.
                    self.last_dir = None;
                    return None;
                }
                Some((stamp, settled)) => {
                    let held = &mut self.dirs[index];
                    if held.stamp != stamp {
                        *held = HeldDir::new(dir, stamp, round);
                    }
                    (index, settled)
                }
            },
            None => {
                let (stamp, settled) = HeldDir::look(dir, self.round_time()?)?;
                let held = HeldDir::new(dir, stamp, round);
                (self.dirs.insert_full(key.to_vec(), held).0, settled)
            }
        };
        let held = &mut self.dirs[index];
        self.last_dir = Some((dir.id, index));
        held.looked_at_in = round;
        held.looked_through = dir.id;
        held.check_links = !held.on_sysfs && !settled;
        if held.check_links {
            held.absent.clear();
            held.subdirs.clear();
        }
        Some(held)
    }

    /// Reads `name` under `dir` into `buf` from `offset` through its held descriptor, opening
    /// (and holding) it first when there is none or the held one is gone.
    pub(super) fn read_at(
        &mut self,
        dir: &SysDir,
        name: &str,
        buf: &mut [u8],
        offset: u64,
    ) -> Result<usize, SysfsError> {
        self.read_present_at(dir, name, buf, offset)?
            .ok_or_else(|| SysfsError::io(dir.path(name), Errno::NOENT))
    }

    /// As [`HeldAttributes::read_at`], with `None` for an attribute the directory lacks as
    /// remembered, or found now: no error made (and no path for it) for what most devices
    /// lack every scrape.
    pub(super) fn read_present_at(
        &mut self,
        dir: &SysDir,
        name: &str,
        buf: &mut [u8],
        offset: u64,
    ) -> Result<Option<usize>, SysfsError> {
        let round = self.round;
        let budget = self.budget;
        let Some(held) = self.held_dir(dir) else {
            return dir.open_and_read_at(name, buf, offset).map(Some);
        };
        // Held first: the common case, and a name is never both held and absent.
        let (check_links, on_sysfs) = (held.check_links, held.on_sysfs);
        if let Some((index, file)) = held.file(name) {
            file.read_in = round;
            let check_links = check_links || !(file.in_dir || on_sysfs);
            match file.read(buf, offset, check_links) {
                Ok(Some(len)) => return Ok(Some(len)),
                Ok(None) => {}
                Err(errno) if held_attribute_gone(errno) => {}
                Err(errno) => {
                    held.files.swap_remove_index(index);
                    return Err(SysfsError::io(dir.path(name), errno));
                }
            }
            held.files.swap_remove_index(index);
        } else if held.absent.contains(name) {
            return Ok(None);
        }
        let Some(slot) = budget.reserve() else {
            return dir.open_and_read_at(name, buf, offset).map(Some);
        };
        let io_error = |errno| SysfsError::io(dir.path(name), errno);
        let (fd, in_dir) = match dir.open_entry_in(name, read_flags()) {
            Ok(opened) => opened,
            Err(Errno::NOENT) if !held.check_links && is_plain_name(name) => {
                held.absent.insert(name.into());
                return Ok(None);
            }
            Err(errno) => return Err(io_error(errno)),
        };
        let stat = rustix::fs::fstat(&fd).map_err(io_error)?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return Err(SysfsError::NotRegularFile {
                path: dir.path(name),
            });
        }
        let len = rustix::io::pread(&fd, &mut *buf, offset).map_err(io_error)?;
        let file = HeldFile {
            fd,
            in_dir,
            read_in: round,
            _slot: slot,
        };
        held.files.insert(FileName::new(name), file);
        Ok(Some(len))
    }

    /// As [`HeldAttributes::read_at`], for an attribute whose value the kernel fixes when it makes
    /// the directory (a PCI device's `subsystem_vendor`, read by the kernel at enumeration):
    /// on sysfs read once and kept while the directory stays the same
    /// (its look: a device registered again is another inode), with no descriptor held for it;
    /// elsewhere (fixture trees, where a file may be rewritten in place) read as any other.
    pub(super) fn read_fixed(
        &mut self,
        dir: &SysDir,
        name: &str,
        buf: &mut [u8],
    ) -> Result<usize, SysfsError> {
        if let Some(held) = self.held_dir(dir).filter(|held| held.on_sysfs) {
            if let Some(content) = held.fixed.get(name) {
                buf[..content.len()].copy_from_slice(content);
                return Ok(content.len());
            }
        }
        let len = self.read_at(dir, name, buf, 0)?;
        if let Some(held) = self.held_dir(dir).filter(|held| held.on_sysfs) {
            held.files.swap_remove(name.as_bytes());
            held.fixed.insert(name.into(), buf[..len].into());
        }
        Ok(len)
    }

    /// `dir`'s stamp as this round looked at it, for what a collector derives from where the
    /// directory is and keeps while it is the same (a PCI device's root port, from the path
    /// its link leads to: the kernel never moves a device's directory, and one registered
    /// again is another inode). `None` when it cannot be looked at, or outside sysfs while it
    /// settles (its time may hide a change).
    pub fn stamp(&mut self, dir: &SysDir) -> Option<DirStamp> {
        let held = self.held_dir(dir)?;
        (!held.check_links).then_some(held.stamp)
    }

    /// `dir`'s stamp on sysfs alone, for what a collector keeps of what the kernel fixes with
    /// the directory (as [`HeldAttributes::read_fixed`] keeps attributes): elsewhere (fixture
    /// trees, laid out as their makers like) `None`, and it is read each time.
    pub fn sysfs_stamp(&mut self, dir: &SysDir) -> Option<DirStamp> {
        let held = self.held_dir(dir)?;
        held.on_sysfs.then_some(held.stamp)
    }

    /// Reads `dir` from now on as if it were on sysfs: what a collector does there, tested on
    /// a tree of regular files.
    #[cfg(test)]
    pub(crate) fn as_on_sysfs(&mut self, dir: &SysDir) {
        if let Some(held) = self.held_dir(dir) {
            held.on_sysfs = true;
            held.check_links = false;
        }
    }

    /// Whether [`HeldAttributes::read_fixed`] gives `name` in `dir` as kept from its first
    /// read (on sysfs), not as read now.
    pub(super) fn keeps_fixed(&mut self, dir: &SysDir, name: &str) -> bool {
        self.held_dir(dir)
            .is_some_and(|held| held.on_sysfs && held.fixed.contains_key(name))
    }

    /// The entries of `dir` as [`SysDir::entries`] lists them, listed again only when the
    /// directory changed: outside sysfs, when its stamp moved or it had not settled when last
    /// listed. On sysfs the same directory may gain or lose entries with the same stamp
    /// (kernfs does not always move a directory's time), so this is only for directories whose
    /// entries the kernel makes with them: an RDMA device's `ports/`, a device's or port's
    /// `hw_counters/`, a port's GID table `gid_attrs/ndevs/`, whose ports, counters and GID
    /// entries are registered with the device (a device registered again is new directories).
    pub(super) fn fixed_entries(&mut self, dir: &SysDir) -> Result<Arc<[Entry]>, SysfsError> {
        let Some(held) = self.held_dir(dir) else {
            return dir.entries().map(Arc::from);
        };
        if held.check_links {
            held.entries = None;
        }
        if let Some(entries) = &held.entries {
            return Ok(entries.clone());
        }
        let entries: Arc<[Entry]> = dir.entries()?.into();
        if !held.check_links {
            held.entries = Some(entries.clone());
        }
        Ok(entries)
    }

    /// The subdirectory `name` of `dir`, held open from one round to the next while `dir`
    /// stays the same directory (its look, as for attributes: one `fstat`) and each round asks
    /// for it, so that a scrape opens no directory it opened before; one `dir` lacks is
    /// remembered as absent likewise.
    /// As for [`HeldAttributes::fixed_entries`], only for directories the kernel makes with
    /// `dir` (an RDMA device's `ports/` and `hw_counters/`, a port's `counters/` and
    /// `gid_attrs/`, its `ndevs/`): on sysfs the directory that holds them is another one when
    /// they are made again.
    pub(super) fn fixed_subdir(
        &mut self,
        dir: &SysDir,
        name: &str,
    ) -> Result<Arc<SysDir>, SysfsError> {
        self.held_subdir(dir, name, None)
    }

    /// The subdirectory `name` of `dir`, which a listing of `dir` this round gave with inode
    /// number `inode`: held from one round to the next while it is the same directory, as
    /// [`super::UnitRead::subdir`] holds one, for a directory the kernel makes and removes
    /// apart from its parent (an IOMMU group in `kernel/iommu_groups/`). Outside sysfs the
    /// parent's look tells it (a directory removed, made or renamed in it moves its time). On
    /// sysfs, where it does not, the listing does: an entry with the inode number it had is the
    /// same kernfs node, where kernfs does not take numbers back at once (see
    /// [`super::LinkedDirs`]); on older kernels it is opened each time.
    pub fn listed_subdir(
        &mut self,
        dir: &SysDir,
        name: &str,
        inode: u64,
    ) -> Result<Arc<SysDir>, SysfsError> {
        self.held_subdir(dir, name, Some(inode))
    }

    /// [`HeldAttributes::fixed_subdir`] (`listed_inode` `None`), or
    /// [`HeldAttributes::listed_subdir`].
    fn held_subdir(
        &mut self,
        dir: &SysDir,
        name: &str,
        listed_inode: Option<u64>,
    ) -> Result<Arc<SysDir>, SysfsError> {
        let (budget, round) = (self.budget, self.round);
        let Some(held) = self.held_dir(dir) else {
            return dir.subdir(name).map(Arc::new);
        };
        let by_inode = held.on_sysfs && listed_inode.is_some();
        if held.check_links || (by_inode && !numbers_not_reused()) {
            return dir.subdir(name).map(Arc::new);
        }
        if held.absent.contains(name) {
            return Err(SysfsError::io(dir.path(name), Errno::NOENT));
        }
        match held.subdirs.get_mut(name) {
            Some(subdir) if !by_inode || subdir.listed_inode == listed_inode => {
                subdir.used_in = round;
                return Ok(subdir.dir.clone());
            }
            // Another node's directory is closed, and its shares given back, even when the
            // new one does not open.
            Some(_) => drop(held.subdirs.remove(name)),
            None => {}
        }
        let subdir = match dir.subdir(name) {
            Ok(subdir) => Arc::new(subdir),
            // An entry listed may be gone since: a listed subdirectory is not kept absent.
            Err(err) => {
                if err.is_not_found() && is_plain_name(name) && listed_inode.is_none() {
                    held.absent.insert(name.into());
                }
                return Err(err);
            }
        };
        if let Some(slots) = budget.reserve().zip(budget.reserve()) {
            let held_subdir = HeldSubdir {
                dir: subdir.clone(),
                listed_inode,
                used_in: round,
                _slots: slots.into(),
            };
            held.subdirs.insert(name.into(), held_subdir);
        }
        Ok(subdir)
    }

    /// The entries of the subdirectory `name` of `dir`, one the kernel makes with `dir` but
    /// whose entries come and go (an IOMMU group's `devices/`), held as
    /// [`super::UnitRead::subdir`] holds it. Outside sysfs they are listed again only
    /// when its look says it changed (as [`super::UnitRead::list`] lists); on sysfs,
    /// where its time need not move, each time, through its own descriptor (no open).
    pub fn subdir_entries(&mut self, dir: &SysDir, name: &str) -> Result<Arc<[Entry]>, SysfsError> {
        let subdir = self.fixed_subdir(dir, name)?;
        match self.held_dir(&subdir) {
            Some(held) if !held.on_sysfs => self.fixed_entries(&subdir),
            // Held by this set alone, or opened just now: no one else lists it.
            _ => subdir.entries_from_start().map(Arc::from),
        }
    }

    /// Closes the descriptors of attributes not read and subdirectories not asked for since
    /// the last call (a counter the driver no longer has, a port gone, an IOMMU group
    /// removed), and starts a new round.
    pub fn end_round(&mut self) {
        let round = self.round;
        self.dirs.retain(|_, held| {
            if held.looked_at_in != round {
                return false;
            }
            held.files.retain(|_, file| file.read_in == round);
            held.subdirs.retain(|_, subdir| subdir.used_in == round);
            // A directory's files are added once and then kept for many rounds: without the
            // room their list doubled into (a quarter of it on average).
            if held.files.capacity() > held.files.len() + held.files.len() / 8 {
                held.files.shrink_to_fit();
            }
            held.next_file = 0;
            true
        });
        self.last_dir = None;
        self.round = round.wrapping_add(1);
        self.round_time = None;
    }

    /// Descriptors held now.
    pub fn len(&self) -> usize {
        let held = self.dirs.values();
        held.map(|held| held.files.len() + held.subdirs.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests;
