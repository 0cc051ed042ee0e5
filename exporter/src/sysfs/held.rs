//! Descriptors of sysfs attributes kept open between scrapes and read again with `pread`, within
//! a process-wide budget.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use foldhash::fast::RandomState as FastState;
use foldhash::{HashMap as FastMap, HashMapExt, HashSet as FastSet, HashSetExt};
use indexmap::IndexMap;
use rustix::fs::FileType;
use rustix::io::Errno;

use super::budget::{HeldBudget, HeldSlot};
use super::linked::numbers_not_reused;
use super::{is_plain_name, read_flags, Entry, SysDir, SysfsError};
use crate::sync::{lock, try_lock};

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

/// A held file's name, inline when short (nearly every attribute's): each read compares it
/// with the name asked for, and a name elsewhere on the heap costs that compare a cache miss.
enum FileName {
    Inline { len: u8, bytes: [u8; INLINE_NAME] },
    Elsewhere(Box<[u8]>),
}

/// The longest name kept inline: `FileName` fits in 40 bytes.
const INLINE_NAME: usize = 38;

impl FileName {
    fn new(name: &str) -> FileName {
        let name = name.as_bytes();
        match u8::try_from(name.len()) {
            Ok(len) if name.len() <= INLINE_NAME => {
                let mut bytes = [0; INLINE_NAME];
                bytes[..name.len()].copy_from_slice(name);
                FileName::Inline { len, bytes }
            }
            _ => FileName::Elsewhere(name.into()),
        }
    }

    fn as_bytes(&self) -> &[u8] {
        match self {
            FileName::Inline { len, bytes } => &bytes[..usize::from(*len)],
            FileName::Elsewhere(name) => name,
        }
    }
}

// Hashed and compared as its bytes, so that a map of them is looked up by `&[u8]`.
impl std::hash::Hash for FileName {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl PartialEq for FileName {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for FileName {}

impl std::borrow::Borrow<[u8]> for FileName {
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
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
    pub fn keeps_fixed(&mut self, dir: &SysDir, name: &str) -> bool {
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
    pub fn fixed_entries(&mut self, dir: &SysDir) -> Result<Arc<[Entry]>, SysfsError> {
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
    pub fn fixed_subdir(&mut self, dir: &SysDir, name: &str) -> Result<Arc<SysDir>, SysfsError> {
        self.held_subdir(dir, name, None)
    }

    /// The subdirectory `name` of `dir`, which a listing of `dir` this round gave with inode
    /// number `inode`: held from one round to the next while it is the same directory, as
    /// [`HeldAttributes::fixed_subdir`] holds one, for a directory the kernel makes and removes
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
    /// [`HeldAttributes::fixed_subdir`] holds it. Outside sysfs they are listed again only
    /// when its look says it changed (as [`HeldAttributes::fixed_entries`] lists); on sysfs,
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

/// One [`HeldAttributes`] per unit of a collector (an RDMA device, a PCI device), with the
/// collector's own state for the unit (`T`: the RDMA device's room, label values and label
/// sets, a PCI unit's room, label values and root port), each with a lock of its own: the
/// scrape claims a unit before reading it,
/// so only one read locks it, a read hung in a driver blocks no other unit, and units read at
/// once share none of the collector's state.
pub struct HeldByUnit<T = ()> {
    units: Mutex<HashMap<String, Arc<Mutex<UnitHeld<T>>>>>,
}

/// What one unit holds: its descriptors and the collector's state for it.
#[derive(Default)]
struct UnitHeld<T> {
    held: HeldAttributes,
    state: T,
    /// Whether its round was left open by [`HeldByUnit::read_opening`].
    round_open: bool,
}

impl<T> Default for HeldByUnit<T> {
    fn default() -> Self {
        HeldByUnit {
            units: Mutex::default(),
        }
    }
}

impl<T: Default> HeldByUnit<T> {
    /// Runs `read` with what `unit` holds, then ends its round. Were the unit's set still
    /// locked (a read of it still running), `read` gets a set (and state) of its own for its
    /// length rather than wait.
    pub fn read<R>(&self, unit: &str, read: impl FnOnce(&mut HeldAttributes, &mut T) -> R) -> R {
        self.read_in_round(unit, false, |held, state| (read(held, state), false))
    }

    /// As [`HeldByUnit::read`], in a new round that stays open when `read` says so: the
    /// unit's next [`HeldByUnit::read`] (a collector's read of a unit its listing read from)
    /// goes on in it, looking at no directory again. A round left open and never gone on
    /// with (the unit was not read after all) is ended first.
    pub fn read_opening<R>(
        &self,
        unit: &str,
        read: impl FnOnce(&mut HeldAttributes, &mut T) -> (R, bool),
    ) -> R {
        self.read_in_round(unit, true, read)
    }

    fn read_in_round<R>(
        &self,
        unit: &str,
        new_round: bool,
        read: impl FnOnce(&mut HeldAttributes, &mut T) -> (R, bool),
    ) -> R {
        let held = {
            let mut units = lock(&self.units);
            // Looked up before it is made: a scrape reads hundreds of units, all known.
            match units.get(unit) {
                Some(held) => held.clone(),
                None => units.entry(unit.to_string()).or_default().clone(),
            }
        };
        let Some(mut guard) = try_lock(&held) else {
            return read(&mut HeldAttributes::default(), &mut T::default()).0;
        };
        let unit = &mut *guard;
        if new_round && unit.round_open {
            unit.held.end_round();
        }
        // Open while it reads: one that panics leaves its round for the next opening to end.
        unit.round_open = true;
        let (result, stays_open) = read(&mut unit.held, &mut unit.state);
        unit.round_open = stays_open;
        if !stays_open {
            unit.held.end_round();
        }
        result
    }

    /// Closes what the units `keep` refuses held (units gone since the last listing).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        let mut units = lock(&self.units);
        units.retain(|unit, _| keep(unit));
    }

    /// Units with a held set.
    pub fn len(&self) -> usize {
        lock(&self.units).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use crate::sysfs::tests::{dir_with, mkfifo, settle};
    use crate::sysfs::AttributeReader;
    use std::fs;
    use std::path::Path;

    /// A set of held attributes with a budget of its own, `limit` descriptors.
    fn held_within(limit: usize) -> (&'static HeldBudget, HeldAttributes) {
        let budget: &'static HeldBudget = Box::leak(Box::new(HeldBudget::new(limit)));
        (budget, HeldAttributes::with_budget(budget))
    }

    /// A held attribute reads what the file holds now: rewritten in place (the same inode,
    /// read again at offset 0), replaced by a rename (the held inode has no name left), removed
    /// and made again. One descriptor is held all along.
    #[test]
    fn a_held_attribute_reads_the_file_as_it_is_now() {
        let (tmp, dir) = dir_with(&[("port_rcv_data", "1\n")]);
        let (budget, mut held) = held_within(8);
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

    /// Reads in any order, across directories and through another [`SysDir`] of the same
    /// directory, each get their own file's content, from the descriptors held the first time.
    #[test]
    fn reads_in_any_order_find_their_own_file() {
        let (tmp, root) = dir_with(&[]);
        for port in ["1", "2"] {
            fs::create_dir(tmp.path().join(port)).unwrap();
            for counter in ["a", "b", "c"] {
                fs::write(
                    tmp.path().join(port).join(counter),
                    format!("{port}{counter}"),
                )
                .unwrap();
            }
            settle(&tmp.path().join(port));
        }
        let (_, mut held) = held_within(16);
        let mut reader = AttributeReader::default();
        let orders = [
            ["1a", "1b", "2a", "1c", "2b", "2c"],
            ["2c", "1a", "1c", "2a", "2b", "1b"],
            ["1c", "1b", "1a", "2c", "2b", "2a"],
        ];
        for order in orders {
            // Each round opens its directories again, as a scrape does.
            let ports = [root.subdir("1").unwrap(), root.subdir("2").unwrap()];
            for name in order {
                let (port, counter) = name.split_at(1);
                let dir = &ports[usize::from(port == "2")];
                assert_eq!(
                    dir.read_held(counter, &mut held, &mut reader).unwrap(),
                    name
                );
            }
            held.end_round();
            assert_eq!(held.len(), 6);
        }
    }

    /// A directory's files, all added in one round, keep no room for more after it (a scrape
    /// at 64 HCAs holds 8128 of them).
    #[test]
    fn a_round_leaves_no_room_to_grow() {
        let names: Vec<String> = (0..33).map(|i| format!("counter_{i}")).collect();
        let files: Vec<(&str, &str)> = names.iter().map(|name| (name.as_str(), "1")).collect();
        let (tmp, dir) = dir_with(&files);
        settle(tmp.path());
        let (_, mut held) = held_within(64);
        let mut reader = AttributeReader::default();
        for name in &names {
            dir.read_held(name, &mut held, &mut reader).unwrap();
        }
        let files = |held: &HeldAttributes| {
            let dir = held.dirs.values().next().unwrap();
            (dir.files.len(), dir.files.capacity())
        };
        assert!(files(&held).1 >= 48, "grew by doubling: {:?}", files(&held));
        held.end_round();
        let (len, capacity) = files(&held);
        assert_eq!(len, 33);
        assert!(capacity <= len + len / 8, "{capacity} for {len}");
    }

    /// Names too long to keep inline are held and found as the short ones are.
    #[test]
    fn a_long_name_is_held_as_a_short_one() {
        let long = "x".repeat(INLINE_NAME + 1);
        let short = "x".repeat(INLINE_NAME);
        let (tmp, dir) = dir_with(&[(&long, "long"), (&short, "short")]);
        settle(tmp.path());
        let (_, mut held) = held_within(8);
        let mut reader = AttributeReader::default();
        for round in ["", "again"] {
            fs::write(tmp.path().join(&long), format!("long{round}")).unwrap();
            for (name, content) in [(&short, "short"), (&long, "long"), (&short, "short")] {
                let text = dir.read_held(name, &mut held, &mut reader).unwrap();
                let content = if name == &long {
                    format!("{content}{round}")
                } else {
                    content.into()
                };
                assert_eq!(text, content);
            }
            held.end_round();
            assert_eq!(held.len(), 2);
        }
    }

    /// In a settled directory no file is checked on its own: the directory's look tells a
    /// file renamed over, removed or made since the last round (its modification time moves),
    /// and a file rewritten in place is read fresh by `pread`.
    #[test]
    fn a_settled_directory_tells_its_files_changed() {
        let (tmp, dir) = dir_with(&[("port_rcv_data", "1\n"), ("port_xmit_data", "5\n")]);
        let (budget, mut held) = held_within(8);
        let mut reader = AttributeReader::default();
        let mut round = |held: &mut HeldAttributes| {
            let mut texts = Vec::new();
            for name in ["port_rcv_data", "port_xmit_data"] {
                let text = dir.read_held(name, held, &mut reader);
                texts.push(text.map_or_else(|err| err.to_string(), str::to_string));
            }
            held.end_round();
            texts
        };
        let path = |name: &str| tmp.path().join(name);
        settle(tmp.path());
        assert_eq!(round(&mut held), ["1", "5"]);
        assert!(!held.dirs.values().any(|dir| dir.check_links));
        fs::write(path("port_rcv_data"), "2\n").unwrap();
        assert_eq!(round(&mut held), ["2", "5"]);
        fs::write(path("new"), "3\n").unwrap();
        fs::rename(path("new"), path("port_rcv_data")).unwrap();
        assert_eq!(round(&mut held), ["3", "5"]);
        settle(tmp.path());
        assert_eq!(round(&mut held), ["3", "5"]);
        fs::remove_file(path("port_xmit_data")).unwrap();
        fs::write(path("port_xmit_data"), "6\n").unwrap();
        settle(tmp.path());
        assert_eq!(round(&mut held), ["3", "6"]);
        assert_eq!((held.len(), budget.held()), (2, 2));
    }

    /// An attribute a settled directory lacks is remembered as absent, with no failed open
    /// per round, until the directory changes: a file made behind its back (the directory's
    /// time set back) stays absent, and is read once the directory's time moves.
    #[test]
    fn an_absent_attribute_is_remembered_until_its_directory_changes() {
        let (tmp, dir) = dir_with(&[("vendor", "0x10de\n")]);
        let (_, mut held) = held_within(8);
        let mut reader = AttributeReader::default();
        let mut round = |held: &mut HeldAttributes| {
            let text = dir.read_held("sriov_totalvfs", held, &mut reader);
            held.end_round();
            text.map(str::to_string)
        };
        settle(tmp.path());
        assert!(round(&mut held).unwrap_err().is_not_found());
        let settled = fs::metadata(tmp.path()).unwrap().modified().unwrap();
        fs::write(tmp.path().join("sriov_totalvfs"), "8\n").unwrap();
        let directory = fs::File::open(tmp.path()).unwrap();
        directory.set_modified(settled).unwrap();
        assert!(round(&mut held).unwrap_err().is_not_found());
        settle(tmp.path());
        assert_eq!(round(&mut held).unwrap(), "8");
    }

    /// A held subdirectory is the one its parent holds now: the same descriptor while the
    /// parent stays as it was, the new directory once one is renamed in its place; one the
    /// parent lacks stays absent until the parent changes.
    #[test]
    fn a_held_subdirectory_is_the_one_its_parent_holds_now() {
        let (tmp, dir) = dir_with(&[]);
        let path = |name: &str| tmp.path().join(name);
        fs::create_dir(path("counters")).unwrap();
        fs::write(path("counters/port_rcv_data"), "1\n").unwrap();
        settle(&path("counters"));
        settle(tmp.path());
        let (budget, mut held) = held_within(8);
        let mut reader = AttributeReader::default();
        let mut round = |held: &mut HeldAttributes, name: &str| {
            let read = held.fixed_subdir(&dir, name).and_then(|subdir| {
                let text = subdir.read_held("port_rcv_data", held, &mut reader)?;
                Ok((text.to_string(), subdir))
            });
            held.end_round();
            read
        };
        let (first, counters) = round(&mut held, "counters").unwrap();
        let (again, same) = round(&mut held, "counters").unwrap();
        assert_eq!((first.as_str(), again.as_str()), ("1", "1"));
        assert!(Arc::ptr_eq(&counters, &same));
        // The file, the subdirectory and the root it keeps open.
        assert_eq!((held.len(), budget.held()), (2, 3));

        fs::create_dir(path("new")).unwrap();
        fs::write(path("new/port_rcv_data"), "2\n").unwrap();
        fs::rename(path("counters"), path("old")).unwrap();
        fs::rename(path("new"), path("counters")).unwrap();
        settle(&path("counters"));
        settle(tmp.path());
        let (text, replaced) = round(&mut held, "counters").unwrap();
        assert_eq!(text, "2");
        assert!(!Arc::ptr_eq(&counters, &replaced));

        assert!(round(&mut held, "hw_counters").is_err_and(|err| err.is_not_found()));
        let settled = fs::metadata(tmp.path()).unwrap().modified().unwrap();
        fs::create_dir(path("hw_counters")).unwrap();
        fs::write(path("hw_counters/port_rcv_data"), "3\n").unwrap();
        settle(&path("hw_counters"));
        fs::File::open(tmp.path())
            .unwrap()
            .set_modified(settled)
            .unwrap();
        assert!(round(&mut held, "hw_counters").is_err_and(|err| err.is_not_found()));
        settle(tmp.path());
        assert_eq!(round(&mut held, "hw_counters").unwrap().0, "3");
    }

    /// An IOMMU group's directory as `kernel/iommu_groups` holds it, and its members.
    fn make_group(groups: &Path, group: &str, members: &[&str]) {
        fs::create_dir_all(groups.join(group).join("devices")).unwrap();
        fs::write(groups.join(group).join("type"), "DMA\n").unwrap();
        for member in members {
            fs::create_dir(groups.join(group).join("devices").join(member)).unwrap();
        }
    }

    /// Runs `change` in `dir`, then sets `dir`'s time back to what it was.
    fn with_time_kept(dir: &Path, change: impl FnOnce()) {
        let time = fs::metadata(dir).unwrap().modified().unwrap();
        change();
        fs::File::open(dir).unwrap().set_modified(time).unwrap();
    }

    /// One scrape of the groups' directory as the PCI host unit reads it: the group `group`
    /// (by its listing's inode number), its members, and its `type` as held.
    fn read_group(
        held: &mut HeldAttributes,
        root: &Path,
        group: &str,
        as_on_sysfs: bool,
    ) -> (Arc<SysDir>, Vec<String>) {
        let groups = SysDir::open(root, "").unwrap();
        let listing = groups.entries_with_inodes().unwrap();
        let (_, inode) = (listing.iter())
            .find(|(entry, _)| entry.name().ok() == Some(group))
            .unwrap();
        if as_on_sysfs {
            held.as_on_sysfs(&groups);
        }
        let dir = held.listed_subdir(&groups, group, *inode).unwrap();
        if as_on_sysfs {
            held.as_on_sysfs(&dir);
            let devices = held.fixed_subdir(&dir, "devices").unwrap();
            held.as_on_sysfs(&devices);
        }
        let mut reader = AttributeReader::default();
        assert_eq!(dir.read_held("type", held, &mut reader).unwrap(), "DMA");
        let members = held.subdir_entries(&dir, "devices").unwrap();
        let members = members.iter().map(|m| m.name().unwrap().to_string());
        let members = members.collect();
        held.end_round();
        (dir, members)
    }

    /// As on sysfs, a listed subdirectory is kept while the listing shows it with the inode
    /// number it had, and another in its place is opened; its entries are listed again each
    /// round, so a member added is seen though no time moved; one not asked for in a round is
    /// closed.
    #[test]
    fn as_on_sysfs_a_listed_subdirectory_is_kept_while_its_listing_shows_the_same_node() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        make_group(root, "48", &["0000:3b:00.0"]);
        settle(root);
        let (budget, mut held) = held_within(16);
        let (first, members) = read_group(&mut held, root, "48", true);
        assert_eq!(members, ["0000:3b:00.0"]);
        let (again, _) = read_group(&mut held, root, "48", true);
        // Kept where kernfs does not take node numbers back at once (4.14 and later).
        assert_eq!(Arc::ptr_eq(&first, &again), numbers_not_reused());

        // As kernfs does, with no time moved.
        with_time_kept(&root.join("48/devices"), || {
            fs::create_dir(root.join("48/devices/0000:3b:00.1")).unwrap();
        });
        let (_, members) = read_group(&mut held, root, "48", true);
        assert_eq!(members, ["0000:3b:00.0", "0000:3b:00.1"]);

        with_time_kept(root, || {
            fs::rename(root.join("48"), root.join("old")).unwrap();
            make_group(root, "48", &["0000:5e:00.0"]);
        });
        let (replaced, members) = read_group(&mut held, root, "48", true);
        assert!(!Arc::ptr_eq(&first, &replaced));
        assert_eq!(members, ["0000:5e:00.0"]);

        // A group no longer listed is closed, its shares given back: group 49's directory,
        // its `devices/` and `type` are all that is held.
        with_time_kept(root, || {
            make_group(root, "49", &["0000:af:00.0"]);
            fs::remove_dir_all(root.join("48")).unwrap();
        });
        let (_, members) = read_group(&mut held, root, "49", true);
        assert_eq!(members, ["0000:af:00.0"]);
        // Its `type` and `devices/`, and the group's directory where it is kept.
        assert_eq!(held.len(), 2 + usize::from(numbers_not_reused()));
        held.end_round();
        assert_eq!((held.len(), budget.held()), (0, 0));
    }

    /// Outside sysfs a listed subdirectory is kept while its parent's look says nothing in it
    /// changed, and its entries while its own look says so: a member added, or a group
    /// renamed aside and another made in its place, is seen the next round.
    #[test]
    fn a_listed_subdirectory_and_its_entries_are_kept_while_unchanged() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        make_group(root, "7", &["0000:3b:00.0"]);
        let settle_all = || {
            for dir in ["7/devices", "7", ""] {
                settle(&root.join(dir));
            }
        };
        settle_all();
        let (_budget, mut held) = held_within(16);
        let (first, members) = read_group(&mut held, root, "7", false);
        assert_eq!(members, ["0000:3b:00.0"]);
        let (again, _) = read_group(&mut held, root, "7", false);
        assert!(Arc::ptr_eq(&first, &again));

        fs::create_dir(root.join("7/devices/0000:3b:00.1")).unwrap();
        let (_, members) = read_group(&mut held, root, "7", false);
        assert_eq!(members, ["0000:3b:00.0", "0000:3b:00.1"]);
        settle_all();
        let (_, members) = read_group(&mut held, root, "7", false);
        assert_eq!(members, ["0000:3b:00.0", "0000:3b:00.1"]);

        fs::rename(root.join("7"), root.join("old")).unwrap();
        make_group(root, "7", &["0000:5e:00.0"]);
        settle_all();
        let (replaced, members) = read_group(&mut held, root, "7", false);
        assert!(!Arc::ptr_eq(&first, &replaced));
        assert_eq!(members, ["0000:5e:00.0"]);
    }

    /// A held subdirectory a round does not ask for is closed at its end, its shares given
    /// back; beyond the budget a listed subdirectory is opened each time and nothing is held.
    #[test]
    fn a_subdirectory_not_asked_for_or_beyond_the_budget_is_not_held() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        make_group(root, "3", &["0000:3b:00.0"]);
        fs::create_dir(root.join("3/other")).unwrap();
        for dir in ["3/devices", "3/other", "3", ""] {
            settle(&root.join(dir));
        }
        let (budget, mut held) = held_within(16);
        let group = SysDir::open(root, "3").unwrap();
        for name in ["devices", "other"] {
            held.fixed_subdir(&group, name).unwrap();
        }
        held.end_round();
        // Two subdirectories, two shares each.
        assert_eq!((held.len(), budget.held()), (2, 4));
        held.fixed_subdir(&group, "devices").unwrap();
        held.end_round();
        assert_eq!((held.len(), budget.held()), (1, 2));

        let (budget, mut held) = held_within(1);
        for _ in 0..2 {
            let (first, members) = read_group(&mut held, root, "3", false);
            let (again, _) = read_group(&mut held, root, "3", false);
            assert!(!Arc::ptr_eq(&first, &again));
            assert_eq!(members, ["0000:3b:00.0"]);
        }
        // The one share left takes the group's `type`.
        assert_eq!(budget.held(), 1);
        held.end_round();
        assert_eq!(budget.held(), 0);
    }

    /// A fixed attribute on sysfs is read once per directory: kept, with no descriptor, while
    /// the directory stays the same one (rewritten behind its back, it still reads as first
    /// read), read again once another directory (a device registered again) is in its place.
    /// Outside sysfs it is read as any other, so a fixture rewritten in place is seen.
    #[test]
    fn a_fixed_attribute_is_read_once_per_directory_on_sysfs() {
        let tmp = tempfile::tempdir().unwrap();
        let path = |name: &str| tmp.path().join(name);
        let make_device = |name: &str, speed: &str| {
            fs::create_dir(path(name)).unwrap();
            fs::write(path(name).join("max_link_speed"), speed).unwrap();
            settle(&path(name));
        };
        make_device("device", "8.0 GT/s PCIe\n");
        let (budget, mut held) = held_within(8);
        let mut reader = AttributeReader::default();
        let mut round = |held: &mut HeldAttributes, as_on_sysfs: bool| {
            let dir = SysDir::open(tmp.path(), "device").unwrap();
            let key = dir.relative.as_os_str().as_bytes();
            if let Some(held_dir) = held.held_dir(&dir).filter(|_| as_on_sysfs) {
                held_dir.on_sysfs = true;
            }
            assert!(held.dirs.contains_key(key));
            let text = dir.read_fixed("max_link_speed", held, &mut reader);
            let text = text.map(str::to_string);
            held.end_round();
            text.unwrap()
        };
        // Outside sysfs: held, and read fresh.
        assert_eq!(round(&mut held, false), "8.0 GT/s PCIe");
        assert_eq!((held.len(), budget.held()), (1, 1));
        fs::write(path("device/max_link_speed"), "16.0 GT/s PCIe\n").unwrap();
        assert_eq!(round(&mut held, false), "16.0 GT/s PCIe");

        // As on sysfs: kept, its descriptor closed.
        assert_eq!(round(&mut held, true), "16.0 GT/s PCIe");
        assert_eq!((held.len(), budget.held()), (0, 0));
        fs::write(path("device/max_link_speed"), "2.5 GT/s PCIe\n").unwrap();
        assert_eq!(round(&mut held, true), "16.0 GT/s PCIe");

        // Another directory in its place: read again.
        make_device("new", "32.0 GT/s PCIe\n");
        fs::rename(path("device"), path("old")).unwrap();
        fs::rename(path("new"), path("device")).unwrap();
        assert_eq!(round(&mut held, true), "32.0 GT/s PCIe");
    }

    /// Beyond the budget attributes are read and closed as unheld ones are; what is not a
    /// regular file is never held; a round closes what it did not read.
    #[test]
    fn held_descriptors_stay_within_their_budget_and_their_round() {
        let (tmp, dir) = dir_with(&[("a", "1\n"), ("b", "2\n")]);
        mkfifo(&tmp.path().join("fifo"));
        let (budget, mut held) = held_within(1);
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

    /// A round the listing leaves open goes on in the unit's read (what both read stays
    /// held); one never gone on with ends before the next, closing what it did not read.
    #[test]
    fn a_round_left_open_goes_on_in_the_next_read_or_ends_before_the_next_opening() {
        let (_tmp, dir) = dir_with(&[("a", "1\n"), ("b", "2\n")]);
        let units: HeldByUnit = HeldByUnit::default();
        let mut reader = AttributeReader::default();
        // Reads `name` (whose content is `1` for `a`, `2` for `b`): how many are held then.
        let mut read = |name: &str, held: &mut HeldAttributes| {
            let content = if name == "a" { "1" } else { "2" };
            assert_eq!(dir.read_held(name, held, &mut reader).unwrap(), content);
            held.len()
        };
        assert_eq!(
            units.read_opening("u", |held, ()| (read("a", held), true)),
            1
        );
        assert_eq!(units.read("u", |held, ()| read("b", held)), 2);
        // Left open, and never gone on with: "b", not read in it, is closed when it ends.
        assert_eq!(
            units.read_opening("u", |held, ()| (read("a", held), true)),
            2
        );
        assert_eq!(
            units.read_opening("u", |held, ()| (read("a", held), false)),
            1
        );
        // Not left open: that round ended with it, and this one closes "a", not read in it.
        assert_eq!(units.read("u", |held, ()| read("b", held)), 2);
        assert_eq!(units.read("u", |held, ()| read("b", held)), 1);
        // Left open and gone on with: "a", read by the opening, stays when the read ends it.
        assert_eq!(
            units.read_opening("u", |held, ()| (read("a", held), true)),
            2
        );
        assert_eq!(units.read("u", |held, ()| read("b", held)), 2);
        assert_eq!(units.read("u", |held, ()| held.len()), 2);
    }

    /// On real sysfs a fixed attribute is read once and kept with no descriptor: a PCI
    /// device's `subsystem_vendor` reads as the file does, round after round.
    #[test]
    fn a_fixed_sysfs_attribute_holds_no_descriptor() {
        let Some(device) = fs::read_dir("/sys/bus/pci/devices")
            .ok()
            .and_then(|mut devices| devices.next()?.ok())
        else {
            eprintln!("skipped: this machine's /sys/bus/pci/devices lists no PCI device");
            return;
        };
        let name = device.file_name().into_string().unwrap();
        let sysfs = SysDir::open(Path::new("/sys"), "").unwrap();
        let dir = sysfs.link_dir(&format!("bus/pci/devices/{name}")).unwrap();
        let expected = fs::read_to_string(device.path().join("subsystem_vendor")).unwrap();
        let (budget, mut held) = held_within(8);
        let mut reader = AttributeReader::default();
        for _ in 0..2 {
            let text = dir.read_fixed("subsystem_vendor", &mut held, &mut reader);
            assert_eq!(text.unwrap(), expected.trim());
            assert_eq!((held.len(), budget.held()), (0, 0));
            held.end_round();
        }
    }

    /// A real sysfs directory listed again through its own descriptor lists what a fresh
    /// listing does, round after round.
    #[test]
    fn a_sysfs_directory_listed_again_from_its_start_lists_it_all() {
        // Every machine has a CPU, and this directory has more entries than CPUs.
        let dir = SysDir::open(Path::new("/sys"), "devices/system/cpu").unwrap();
        let fresh = dir.entries().unwrap();
        assert!(fresh.iter().any(|entry| entry.name().ok() == Some("cpu0")));
        for _ in 0..2 {
            assert_eq!(dir.entries_from_start().unwrap(), fresh);
        }
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
