//! Reading sysfs: the one place that opens files under `--path.sysfs` (and `--path.procfs`,
//! `--path.rootfs`).
//!
//! A scrape reads thousands of small attributes, so every read is relative to an open directory
//! (one path component to resolve, not ten) and takes three system calls: open, one read,
//! close; the counters a collector reads every scrape can be kept open instead and read again
//! with one `pread` ([`HeldAttributes`]). Opens are non-blocking, so a FIFO planted where an
//! attribute belongs returns at once; whatever is not a regular file is refused. A read that still hangs inside a driver is
//! bounded by the collector framework's deadline, not here. The few files longer than a page
//! (`/proc/modules`, `modules.builtin`) are read to their end under an explicit byte bound.
//!
//! Nothing under a root is reached outside it: a [`SysDir`] remembers the root it was opened
//! under, and every open resolves as if that root were `/` (`RESOLVE_IN_ROOT`): `..` stops at
//! it, absolute links start from it, and `/proc/<pid>/fd`-style magic links are refused. So a
//! `board_id` linked to `/etc/shadow` is `<root>/etc/shadow`, which does not exist, and the
//! host's file never reaches a label or a log line. Directories are still reached through the
//! relative links sysfs is made of (`class/infiniband/mlx5_0 -> ../../devices/...`). An
//! attribute (a plain name, never a link in sysfs) is opened with `O_NOFOLLOW`, still one
//! `openat`; links and paths are resolved by openat2 (Linux 5.6), or before it by a walk that
//! reads each link itself (`resolve.rs`).

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, StatxFlags};
use rustix::io::Errno;

mod budget;
mod by_unit;
mod entry;
mod error;
mod held;
mod linked;
mod named;
mod resolve;
mod stamped;
mod unit;

pub use budget::HeldBudget;
pub use by_unit::HeldByUnit;
pub use entry::Entry;
use entry::{list, without_inodes};
pub use error::SysfsError;
pub use held::{DirStamp, HeldAttributes};
pub use linked::LinkedDirs;
use named::read_to_end;
pub use named::{read_named_file, read_private_file, FileStamp, NamedFile};
use resolve::{resolve, Scope};
pub use stamped::Stamped;
pub use unit::{Report, UnitRead};

/// sysfs attributes are at most one page; anything longer is not an attribute.
const MAX_ATTRIBUTE_BYTES: usize = 4096;

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

/// An open directory under a root; attributes and subdirectories are opened relative to it,
/// never outside the root.
pub struct SysDir {
    /// Unique in the process: tells this open directory from any other, as a held set keeps
    /// the one it read from last (see `held.rs`).
    id: u64,
    fd: OwnedFd,
    /// The root it was opened under, and its path from there: what an open that leaves this
    /// directory (a relative link to a sibling, `device/spad/post_code`) resolves from.
    root: Arc<OwnedFd>,
    relative: PathBuf,
    /// The full path, for messages.
    path: PathBuf,
}

/// `SYSFS_MAGIC` of `linux/magic.h`: the `f_type` statfs reports for sysfs.
const SYSFS_MAGIC: i64 = 0x6265_6572;
/// `PROC_SUPER_MAGIC`: the same for procfs.
const PROC_SUPER_MAGIC: i64 = 0x9fa0;

/// What the file behind a process's open descriptor is ([`SysDir::open_file`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenFile {
    /// A character device, by its major and minor numbers.
    CharDevice(u32, u32),
    /// Anything else: a regular file, a directory, a socket, a pipe, a block device.
    Other,
    /// Not looked at: the directory is not on procfs, so its entries are plain links, names
    /// that prove nothing (a fixture tree).
    NotOnProcfs,
}

/// A new [`SysDir::id`].
fn next_dir_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl SysDir {
    /// `relative` under `root` (a `--path.*` directory, whose own links are followed: the
    /// operator named it). `""` is the root itself.
    pub fn open(root: &Path, relative: impl AsRef<Path>) -> Result<SysDir, SysfsError> {
        let relative = relative.as_ref();
        let path = join(root, relative);
        let root_flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let opened = rustix::fs::open(root, root_flags, Mode::empty()).and_then(|root| {
            let fd = resolve(root.as_fd(), relative, dir_flags(), Scope::InRoot)?;
            Ok((root, fd))
        });
        let (root, fd) = opened.map_err(|errno| SysfsError::io(path.clone(), errno))?;
        Ok(SysDir {
            id: next_dir_id(),
            fd,
            root: Arc::new(root),
            relative: relative.to_path_buf(),
            path,
        })
    }

    /// A subdirectory (following links inside the root, as `class/infiniband/<dev>` is one).
    pub fn subdir(&self, name: &str) -> Result<SysDir, SysfsError> {
        let fd = self
            .open_entry(name, dir_flags())
            .map_err(|errno| SysfsError::io(self.path(name), errno))?;
        Ok(self.child(fd, name))
    }

    fn child(&self, fd: OwnedFd, name: &str) -> SysDir {
        SysDir {
            id: next_dir_id(),
            fd,
            root: self.root.clone(),
            relative: join(&self.relative, name),
            path: self.path(name),
        }
    }

    /// The full path of an entry, for messages.
    pub fn path(&self, name: &str) -> PathBuf {
        join(&self.path, name)
    }

    /// Opens `name` (one component, or a path below this directory) inside the root. A plain
    /// name is opened without following a link (`O_NOFOLLOW`), which cannot leave this
    /// directory: the attributes a scrape reads by the thousand cost one `openat`, as ever. A
    /// link, or a path, is resolved below this directory, and one that leaves it (`..`, a
    /// link to a sibling, an absolute link) again from the root, so it ends inside the root
    /// or nowhere.
    fn open_entry(&self, name: &str, flags: OFlags) -> Result<OwnedFd, Errno> {
        self.open_entry_in(name, flags).map(|(fd, _)| fd)
    }

    /// As [`SysDir::open_entry`], and whether the file opened is an entry of this directory
    /// itself (a plain name, no link followed).
    fn open_entry_in(&self, name: &str, flags: OFlags) -> Result<(OwnedFd, bool), Errno> {
        if is_plain_name(name) {
            let nofollow = flags | OFlags::NOFOLLOW;
            match rustix::fs::openat(&self.fd, name, nofollow, Mode::empty()) {
                // A link (or a file where a directory belongs). sysfs's links lead out of
                // their directory (`../../devices/...`): resolved from the root at once, not
                // first beneath this directory to fail there.
                Err(Errno::LOOP | Errno::NOTDIR) => {}
                opened => return opened.map(|fd| (fd, true)),
            }
            return self.open_from_root(name, flags).map(|fd| (fd, false));
        }
        let opened = match resolve(self.fd.as_fd(), Path::new(name), flags, Scope::Beneath) {
            Err(Errno::XDEV) => self.open_from_root(name, flags),
            opened => opened,
        };
        opened.map(|fd| (fd, false))
    }

    /// `name` below this directory, resolved from the root (links inside the root followed).
    fn open_from_root(&self, name: &str, flags: OFlags) -> Result<OwnedFd, Errno> {
        let path = join(&self.relative, name);
        resolve(self.root.as_fd(), &path, flags, Scope::InRoot)
    }

    /// A subdirectory reached through a link, as the entries of `bus/pci/devices` and
    /// `class/*` are: resolved from the root in one openat2 ([`SysDir::subdir`] tries the
    /// name as a directory of its own first). A plain directory opens the same way.
    pub fn link_dir(&self, name: &str) -> Result<SysDir, SysfsError> {
        let fd = self
            .open_from_root(name, dir_flags())
            .map_err(|errno| SysfsError::io(self.path(name), errno))?;
        Ok(self.child(fd, name))
    }

    /// An attribute's content with surrounding whitespace (the kernel's trailing newline, the
    /// extra blank line some drivers print) removed.
    pub fn read<'r>(
        &self,
        name: &str,
        reader: &'r mut AttributeReader,
    ) -> Result<&'r str, SysfsError> {
        let content = self.read_bytes(name, reader)?;
        self.text(name, content)
    }

    /// An attribute's raw bytes (binary attributes such as EFI variables), at most one page.
    pub fn read_bytes<'r>(
        &self,
        name: &str,
        reader: &'r mut AttributeReader,
    ) -> Result<&'r [u8], SysfsError> {
        let len = self.open_and_read_at(name, &mut reader.buf[..], 0)?;
        self.one_page(name, &reader.buf[..len])
    }

    /// As [`SysDir::read_held`], with `None` for an attribute that is absent (the rule of
    /// `Output::optional`), made without an error: optional attributes (`aer_dev_*` without
    /// AER, `sriov_*` without SR-IOV) are absent on most devices, every scrape.
    fn read_held_optional<'r>(
        &self,
        name: &str,
        held: &mut HeldAttributes,
        reader: &'r mut AttributeReader,
    ) -> Result<Option<&'r str>, SysfsError> {
        let len = match held.read_present_at(self, name, &mut reader.buf[..], 0) {
            Ok(Some(len)) => len,
            Ok(None) => return Ok(None),
            Err(err) if err.is_absent() => return Ok(None),
            Err(err) => return Err(err),
        };
        let content = self.one_page(name, &reader.buf[..len])?;
        self.text(name, content).map(Some)
    }

    /// As [`SysDir::read_held_optional`], parsed as [`SysDir::read_u64`] parses.
    fn read_held_optional_u64(
        &self,
        name: &str,
        held: &mut HeldAttributes,
        reader: &mut AttributeReader,
    ) -> Result<Option<u64>, SysfsError> {
        let text = self.read_held_optional(name, held, reader)?;
        text.map(|text| self.parse_u64(name, text)).transpose()
    }

    /// As [`SysDir::read`], through a descriptor `held` keeps open from one scrape to the
    /// next (see [`HeldAttributes`]): a pread at offset 0 instead of open, read and close.
    fn read_held<'r>(
        &self,
        name: &str,
        held: &mut HeldAttributes,
        reader: &'r mut AttributeReader,
    ) -> Result<&'r str, SysfsError> {
        let content = self.read_held_bytes(name, held, reader)?;
        self.text(name, content)
    }

    /// As [`SysDir::read_held`], for an attribute the kernel fixes when it makes the directory:
    /// on sysfs read once per directory (see [`HeldAttributes::read_fixed`]).
    fn read_fixed<'r>(
        &self,
        name: &str,
        held: &mut HeldAttributes,
        reader: &'r mut AttributeReader,
    ) -> Result<&'r str, SysfsError> {
        let content = self.read_fixed_bytes(name, held, reader)?;
        self.text(name, content)
    }

    /// As [`SysDir::read_fixed`], its raw bytes (see [`SysDir::read_bytes`]).
    fn read_fixed_bytes<'r>(
        &self,
        name: &str,
        held: &mut HeldAttributes,
        reader: &'r mut AttributeReader,
    ) -> Result<&'r [u8], SysfsError> {
        let len = held.read_fixed(self, name, &mut reader.buf[..])?;
        self.one_page(name, &reader.buf[..len])
    }

    /// `len` bytes at most from `offset` in an attribute, through a held descriptor (see
    /// [`SysDir::read_held`]): a register of a binary attribute whose every byte read costs
    /// the kernel (a PCI device's `config`).
    fn read_held_at<'r>(
        &self,
        name: &str,
        offset: usize,
        len: usize,
        held: &mut HeldAttributes,
        reader: &'r mut AttributeReader,
    ) -> Result<&'r [u8], SysfsError> {
        let len = len.min(MAX_ATTRIBUTE_BYTES);
        let read = held.read_at(self, name, &mut reader.buf[..len], offset as u64)?;
        Ok(&reader.buf[..read])
    }

    /// As [`SysDir::read_bytes`], through a held descriptor (see [`SysDir::read_held`]).
    fn read_held_bytes<'r>(
        &self,
        name: &str,
        held: &mut HeldAttributes,
        reader: &'r mut AttributeReader,
    ) -> Result<&'r [u8], SysfsError> {
        let len = held.read_at(self, name, &mut reader.buf[..], 0)?;
        self.one_page(name, &reader.buf[..len])
    }

    /// As [`SysDir::read_u64`], through a held descriptor (see [`SysDir::read_held`]).
    fn read_held_u64(
        &self,
        name: &str,
        held: &mut HeldAttributes,
        reader: &mut AttributeReader,
    ) -> Result<u64, SysfsError> {
        let text = self.read_held(name, held, reader)?;
        self.parse_u64(name, text)
    }

    /// What one read gave, refused when it filled the buffer (more than a page).
    fn one_page<'r>(&self, name: &str, content: &'r [u8]) -> Result<&'r [u8], SysfsError> {
        if content.len() > MAX_ATTRIBUTE_BYTES {
            let reason = "longer than a page";
            return Err(SysfsError::unparsed(self.path(name), reason, content.len()));
        }
        Ok(content)
    }

    /// An attribute's bytes as trimmed text.
    fn text<'r>(&self, name: &str, content: &'r [u8]) -> Result<&'r str, SysfsError> {
        match std::str::from_utf8(content) {
            Ok(text) => Ok(text.trim()),
            Err(_) => Err(SysfsError::unparsed(
                self.path(name),
                "not UTF-8 text",
                content.len(),
            )),
        }
    }

    /// What tells whether a file changed without reading it: device, inode, size and
    /// modification time of `name` inside the root (a link itself, not what it points to).
    pub fn stamp(&self, name: &str) -> Result<FileStamp, SysfsError> {
        let io_error = |errno| SysfsError::io(self.path(name), errno);
        let flags = OFlags::PATH | OFlags::CLOEXEC;
        let stat =
            rustix::fs::fstat(self.open_entry(name, flags).map_err(io_error)?).map_err(io_error)?;
        Ok(FileStamp::of(&stat))
    }

    /// The directory's own stamp, as opened (links followed): two paths to one directory (a
    /// merged `/usr`'s `/lib` and `/usr/lib`) have one identity, and a changed listing a new
    /// modification time.
    pub fn own_stamp(&self) -> Result<FileStamp, SysfsError> {
        let stat = rustix::fs::fstat(&self.fd)
            .map_err(|errno| SysfsError::io(self.path.clone(), errno))?;
        Ok(FileStamp::of(&stat))
    }

    /// A text file that spans many pages (procfs seq files such as `/proc/modules`, index files
    /// such as `modules.builtin`), read to its end but never past `max_bytes`.
    pub fn read_text_file(&self, name: &str, max_bytes: usize) -> Result<String, SysfsError> {
        String::from_utf8(self.read_file(name, max_bytes)?).map_err(|err| {
            SysfsError::unparsed(self.path(name), "not UTF-8 text", err.as_bytes().len())
        })
    }

    /// Opens a file non-blocking, reads once into `buf` from `offset` and closes it; refuses
    /// what is not a regular file.
    fn open_and_read_at(
        &self,
        name: &str,
        buf: &mut [u8],
        offset: u64,
    ) -> Result<usize, SysfsError> {
        let fd = self
            .open_entry(name, read_flags())
            .map_err(|errno| SysfsError::io(self.path(name), errno))?;
        // Regular files return everything up to EOF in one read; only an empty or refused read
        // needs a look at what the file is (a FIFO reads as empty or EAGAIN).
        let read = match offset {
            0 => rustix::io::read(&fd, buf),
            // A FIFO refuses an offset (ESPIPE): it is not a regular file.
            _ => rustix::io::pread(&fd, buf, offset).map_err(|errno| match errno {
                Errno::SPIPE => Errno::AGAIN,
                errno => errno,
            }),
        };
        let len = match read {
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
    /// (`modules.alias`). Same rules as [`SysDir::read`]: non-blocking, regular files only
    /// (checked before reading, since this reads until end of file), and a file longer than
    /// `limit` is refused rather than cut.
    pub fn read_file(&self, name: &str, limit: usize) -> Result<Vec<u8>, SysfsError> {
        let path = self.path(name);
        let fd = self
            .open_entry(name, read_flags())
            .map_err(|errno| SysfsError::io(path.clone(), errno))?;
        read_to_end(&fd, path, limit)
    }

    /// A regular file opened for reading in parts (kernel module files, many MiB, of which only
    /// the end or a decompressed stream is needed), with its size. Same rules as
    /// [`SysDir::read_file`]: inside the root, non-blocking, regular files only; the caller
    /// bounds what it reads.
    pub fn open_regular_file(&self, name: &str) -> Result<(std::fs::File, u64), SysfsError> {
        let path = self.path(name);
        let fd = self
            .open_entry(name, read_flags())
            .map_err(|errno| SysfsError::io(path.clone(), errno))?;
        let stat = rustix::fs::fstat(&fd).map_err(|errno| SysfsError::io(path.clone(), errno))?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return Err(SysfsError::NotRegularFile { path });
        }
        Ok((std::fs::File::from(fd), stat.st_size.max(0) as u64))
    }

    /// An unsigned integer attribute (counters, ids).
    pub fn read_u64(&self, name: &str, reader: &mut AttributeReader) -> Result<u64, SysfsError> {
        let text = self.read(name, reader)?;
        self.parse_u64(name, text)
    }

    fn parse_u64(&self, name: &str, text: &str) -> Result<u64, SysfsError> {
        text.parse()
            .map_err(|_| SysfsError::parse(&self.path(name), "not an unsigned integer", text))
    }

    /// The directory's entries, sorted so output order is stable: numeric names (ports, GID
    /// indexes) by value, then the other names, then the names that are not UTF-8.
    pub fn entries(&self) -> Result<Vec<Entry>, SysfsError> {
        self.entries_with_inodes().map(without_inodes)
    }

    /// As [`SysDir::entries`], each with the inode number the listing gives it: on sysfs its
    /// kernfs node's id, which another node takes only after 2^31 others (see [`LinkedDirs`]).
    pub fn entries_with_inodes(&self) -> Result<Vec<(Entry, u64)>, SysfsError> {
        // A descriptor of its own, so that the directory's stays at offset 0 for other readers.
        let listing = rustix::fs::openat(&self.fd, ".", dir_flags(), Mode::empty());
        let listing = listing.map_err(|errno| SysfsError::io(self.path.clone(), errno))?;
        list(listing.as_fd(), &self.path)
    }

    /// As [`SysDir::entries`], for a directory opened only to be listed: its own descriptor is
    /// read, not one opened again.
    pub fn into_entries(self) -> Result<Vec<Entry>, SysfsError> {
        list(self.fd.as_fd(), &self.path).map(without_inodes)
    }

    /// As [`SysDir::entries`], listed through the directory's own descriptor, from its start:
    /// no descriptor opened. Only for a directory no other thread lists at once (one a held set
    /// holds, listed under its `&mut`).
    pub(super) fn entries_from_start(&self) -> Result<Vec<Entry>, SysfsError> {
        let io_error = |errno| SysfsError::io(self.path.clone(), errno);
        rustix::fs::seek(&self.fd, rustix::fs::SeekFrom::Start(0)).map_err(io_error)?;
        list(self.fd.as_fd(), &self.path).map(without_inodes)
    }

    /// Whether the directory is on sysfs (and not on a tree of regular files made like it).
    pub fn on_sysfs(&self) -> bool {
        self.on_filesystem(SYSFS_MAGIC)
    }

    fn on_filesystem(&self, magic: i64) -> bool {
        rustix::fs::fstatfs(&self.fd).is_ok_and(|fs| {
            #[allow(clippy::unnecessary_cast)] // `f_type`'s width differs between targets.
            let f_type = fs.f_type as i64;
            f_type == magic
        })
    }

    /// The file behind descriptor `name` of this `/proc/<pid>/fd` directory, as `stat` finds
    /// it through the kernel's link: the open file itself, wherever it lives (another mount
    /// namespace, a node since deleted), never a path looked up by its name. Attributes as
    /// cached (`AT_STATX_DONT_SYNC`): a FUSE or NFS file's server is not asked, so it cannot
    /// stall the scrape.
    pub fn open_file(&self, name: &str) -> Result<OpenFile, SysfsError> {
        if !self.on_filesystem(PROC_SUPER_MAGIC) {
            return Ok(OpenFile::NotOnProcfs);
        }
        let io_error = |errno| SysfsError::io(self.path(name), errno);
        if !is_plain_name(name) {
            return Err(io_error(Errno::INVAL));
        }
        let statx = rustix::fs::statx(&self.fd, name, AtFlags::STATX_DONT_SYNC, StatxFlags::TYPE);
        let (mode, device) = match statx {
            Ok(stat) => (
                u32::from(stat.stx_mode),
                (stat.stx_rdev_major, stat.stx_rdev_minor),
            ),
            // Before Linux 4.11; and before 4.18 no unprivileged FUSE mount to stall it.
            Err(Errno::NOSYS) => {
                let stat =
                    rustix::fs::statat(&self.fd, name, AtFlags::empty()).map_err(io_error)?;
                let rdev = stat.st_rdev;
                (
                    stat.st_mode,
                    (rustix::fs::major(rdev), rustix::fs::minor(rdev)),
                )
            }
            Err(errno) => return Err(io_error(errno)),
        };
        Ok(match FileType::from_raw_mode(mode) {
            FileType::CharacterDevice => OpenFile::CharDevice(device.0, device.1),
            _ => OpenFile::Other,
        })
    }

    /// The last path component of a symlink's target (`device` -> `0000:05:00.0`,
    /// `device/driver` -> `mlx5_core`).
    pub fn link_target_name(&self, name: &str) -> Result<String, SysfsError> {
        // A link of this directory itself (`driver`, `iommu_group`) into a buffer on the stack:
        // one allocation, for the name, where a target of any length takes three.
        if is_plain_name(name) {
            let mut buf = [0; 256];
            match rustix::fs::readlinkat_raw(&self.fd, name, &mut buf[..]) {
                Ok(len) if len < buf.len() => {
                    let target = &buf[..len];
                    let last = target.rsplit(|&b| b == b'/').next().unwrap_or_default();
                    return Ok(String::from_utf8_lossy(last).into_owned());
                }
                // Perhaps cut: read again whole.
                Ok(_) => {}
                Err(errno) => return Err(SysfsError::io(self.path(name), errno)),
            }
        }
        let target = self.link_target(name)?;
        let target = target.to_string_lossy();
        Ok(target.rsplit('/').next().unwrap_or_default().to_string())
    }

    /// A symlink's target as written in the link (absolute or relative, not resolved). The
    /// directories on the way to it (`device` in `device/driver`) resolve inside the root,
    /// from the root at once: they are links out of this directory themselves, as a rule.
    pub fn link_target(&self, name: &str) -> Result<PathBuf, SysfsError> {
        let io_error = |errno| SysfsError::io(self.path(name), errno);
        let target = match name.rsplit_once('/') {
            None => rustix::fs::readlinkat(&self.fd, name, Vec::new()),
            Some((parent, link)) => {
                let parent = join(&self.relative, parent);
                let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
                let parent = resolve(self.root.as_fd(), &parent, flags, Scope::InRoot);
                rustix::fs::readlinkat(&parent.map_err(io_error)?, link, Vec::new())
            }
        }
        .map_err(io_error)?;
        Ok(PathBuf::from(std::ffi::OsString::from_vec(
            target.into_bytes(),
        )))
    }
}

/// `base/relative`, or `base` when `relative` is empty, in one allocation (`Path::join` copies
/// `base`, then grows the copy): paths are made for every directory opened and every error,
/// thousands a scrape.
fn join(base: &Path, relative: impl AsRef<Path>) -> PathBuf {
    let relative = relative.as_ref();
    let len = base.as_os_str().len() + 1 + relative.as_os_str().len();
    let mut path = PathBuf::with_capacity(len);
    path.push(base);
    if !relative.as_os_str().is_empty() {
        path.push(relative);
    }
    path
}

/// One entry of a directory itself: not a path, not `.` or `..`.
fn is_plain_name(name: &str) -> bool {
    !name.is_empty() && !name.contains('/') && name != "." && name != ".."
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC
}

fn read_flags() -> OFlags {
    OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY
}

#[cfg(test)]
pub(crate) mod tests;

#[cfg(test)]
mod proptests {
    use super::*;
    use crate::error::ErrorKind;
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
        let dir = SysDir::open(tmp.path(), "").unwrap();
        let config = ProptestConfig::with_cases(128);
        proptest!(config, |(content in bytes(NUMBER_TOKENS), limit in 0usize..8192)| {
            fs::write(tmp.path().join("attr"), &content).unwrap();
            check_readers(&dir, &content, limit)?;
        });
    }

    #[test]
    fn a_printed_number_reads_back() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SysDir::open(tmp.path(), "").unwrap();
        let config = ProptestConfig::with_cases(64);
        proptest!(config, |(number: u64, before in "[ \t\n]{0,3}", after in "[ \t\n]{0,3}")| {
            fs::write(tmp.path().join("attr"), format!("{before}{number}{after}")).unwrap();
            let read = dir.read_u64("attr", &mut AttributeReader::default());
            prop_assert_eq!(read.unwrap(), number);
        });
    }
}
