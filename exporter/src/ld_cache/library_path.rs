//! The node's library path under `--path.rootfs`, the copies of a library on it, and the copy
//! the dynamic linker takes: `etc/ld.so.conf` with its `include`s ([`super::conf`]), then the
//! architecture's default directories, then `/usr/local/lib64` and `/usr/local/lib`; every
//! path resolved inside the root (`sysfs::SysDir`), so a link never leads out of it, and two
//! paths to one directory (a merged `/usr`'s `/lib -> usr/lib`) count once.
//!
//! With an `etc/ld.so.cache` the linker's copy is the cache's entry ([`super::Cache::lookup`]);
//! without one (or with one the linker would ignore) it searches the default directories only
//! (`_dl_init_paths` in glibc's `elf/dl-load.c`; Debian 12's `ld.so --help` lists
//! `/lib/x86_64-linux-gnu`, `/usr/lib/x86_64-linux-gnu`, `/lib`, `/usr/lib`; RHEL's are
//! `/lib64`, `/usr/lib64`), so the first copy found there, in that order, is taken.
//!
//! [`Watch`] keeps what it read and reads again only when the stat of the cache, a config
//! file, an include directory or a library directory changed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::conf::{self, Line};
use super::{Cache, MAX_CACHE_BYTES};
use crate::sync::lock;
use crate::sysfs::{FileStamp, SysDir, SysfsError};

/// The default directories, in the order the linker searches them without a cache (a
/// distribution has some of them): the multiarch pair of Debian and Ubuntu, then RHEL's
/// `lib64` pair, then the plain pair.
#[cfg(target_arch = "x86_64")]
const DEFAULT_DIRS: [&str; 6] = [
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
];
#[cfg(target_arch = "aarch64")]
const DEFAULT_DIRS: [&str; 6] = [
    "/lib/aarch64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
];
/// Where sites and vendor installers put their own copies; on the path whether or not
/// `ld.so.conf` lists them, since the incident's stale copy was there.
const LOCAL_DIRS: [&str; 2] = ["/usr/local/lib64", "/usr/local/lib"];
const LD_SO_CONF: &str = "/etc/ld.so.conf";
const LD_SO_CACHE: &str = "etc/ld.so.cache";
/// Config files read at most (include loops, a glob matching thousands).
const MAX_CONF_FILES: usize = 256;
const MAX_CONF_BYTES: usize = 1 << 20;
const MAX_DIRS: usize = 512;
/// Links followed from a soname to the real file's name.
const MAX_LINKS: usize = 8;
/// The most of a library read for its symbol versions, where its name gives no version.
const MAX_LIBRARY_BYTES: u64 = 32 << 20;

/// One copy of a library on the library path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copy {
    /// The soname's path in its directory inside the root, as `ldconfig -p` prints it.
    pub path: String,
    /// From the real file's name after the soname's `.so.` (`libibverbs.so.1.14.44.0` ->
    /// `1.14.44.0`); empty when the name says none, or for a cache entry whose file is gone.
    pub version: String,
    /// The copy the linker takes.
    pub resolved: bool,
}

/// What one read of the node found, for the sonames asked for.
#[derive(Debug, Default)]
pub struct Libraries {
    copies: HashMap<String, Vec<Copy>>,
    /// Whether the linker has a cache to use (absent, unreadable or corrupt: it has none).
    pub cache_used: bool,
}

impl Libraries {
    /// Each copy of `soname`, in library path order, the resolved one's path as the cache has it.
    pub fn copies(&self, soname: &str) -> &[Copy] {
        self.copies.get(soname).map_or(&[], Vec::as_slice)
    }

    /// The path (inside the root) of the copy of `soname` the dynamic linker takes, if any:
    /// join it to `--path.rootfs` to open it from the exporter.
    pub fn resolved(&self, soname: &str) -> Option<PathBuf> {
        let copy = self.copies(soname).iter().find(|copy| copy.resolved)?;
        Some(PathBuf::from(&copy.path))
    }
}

/// What a change of means a new read: a file, or a directory (links followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    File,
    Dir,
}

/// Each file or directory read, with its stamp then (`None`: absent).
type Stamps = Vec<(PathBuf, Kind, Option<FileStamp>)>;

/// Reads the node once and again only after a change (see the module's doc).
pub struct Watch {
    rootfs: PathBuf,
    sonames: &'static [&'static str],
    last: std::sync::Mutex<Option<(Stamps, Arc<Libraries>)>>,
}

impl Watch {
    pub fn new(rootfs: &Path, sonames: &'static [&'static str]) -> Watch {
        Watch {
            rootfs: rootfs.to_path_buf(),
            sonames,
            last: std::sync::Mutex::new(None),
        }
    }

    /// What the node has now, and the errors of a read made for it (none when nothing changed).
    pub fn libraries(&self) -> (Arc<Libraries>, Vec<SysfsError>) {
        let mut last = lock(&self.last);
        if let Some((stamps, libraries)) = last.as_ref() {
            let unchanged = stamps
                .iter()
                .all(|(path, kind, stamp)| stamp_of(&self.rootfs, path, *kind) == *stamp);
            if unchanged {
                return (libraries.clone(), Vec::new());
            }
        }
        let mut read = Read {
            rootfs: &self.rootfs,
            stamps: Vec::new(),
            errors: Vec::new(),
        };
        let libraries = Arc::new(read.libraries(self.sonames));
        *last = Some((read.stamps, libraries.clone()));
        (libraries, read.errors)
    }
}

/// The stamp of `path` inside the root now.
fn stamp_of(rootfs: &Path, path: &Path, kind: Kind) -> Option<FileStamp> {
    let relative = path.strip_prefix("/").unwrap_or(path);
    match kind {
        Kind::File => {
            let name = relative.file_name()?.to_str()?;
            SysDir::open(rootfs, relative.parent()?)
                .ok()?
                .stamp(name)
                .ok()
        }
        Kind::Dir => SysDir::open(rootfs, relative).ok()?.own_stamp().ok(),
    }
}

/// One read of the node.
struct Read<'r> {
    rootfs: &'r Path,
    stamps: Stamps,
    errors: Vec<SysfsError>,
}

/// A library directory opened, and which directory it is (device and inode).
struct LibDir {
    path: String,
    dir: SysDir,
    identity: (u64, u64),
}

/// The library directories, each once, and the default ones' identities in search order.
struct Dirs {
    listed: Vec<LibDir>,
    defaults: Vec<(u64, u64)>,
}

impl Read<'_> {
    fn libraries(&mut self, sonames: &[&str]) -> Libraries {
        let dirs = self.library_dirs();
        let cache = self.cache();
        let mut libraries = Libraries {
            cache_used: cache.is_some(),
            ..Libraries::default()
        };
        for &soname in sonames {
            let copies = self.copies(&dirs, cache.as_ref(), soname);
            libraries.copies.insert(soname.to_string(), copies);
        }
        libraries
    }

    /// `ld.so.conf`'s directories, then the defaults and the local ones, each once.
    fn library_dirs(&mut self) -> Dirs {
        let mut listed = Vec::new();
        let mut conf_files = 0;
        self.conf_file(Path::new(LD_SO_CONF), &mut listed, &mut conf_files);
        let defaults = DEFAULT_DIRS.iter().map(|d| (d.to_string(), true));
        let local = LOCAL_DIRS.iter().map(|d| (d.to_string(), false));
        let mut dirs = Dirs {
            listed: Vec::new(),
            defaults: Vec::new(),
        };
        let mut seen = Vec::new();
        let conf = listed.into_iter().map(|d| (d, false));
        for (path, default) in conf.chain(defaults).chain(local) {
            if dirs.listed.len() >= MAX_DIRS {
                break;
            }
            let relative = path.trim_start_matches('/');
            self.stamps.push((PathBuf::from(&path), Kind::Dir, None));
            let Some(dir) = self.optional(SysDir::open(self.rootfs, relative)) else {
                continue;
            };
            let Some(stamp) = self.optional(dir.own_stamp()) else {
                continue;
            };
            if let Some(last) = self.stamps.last_mut() {
                last.2 = Some(stamp);
            }
            let identity = stamp.identity();
            if default {
                dirs.defaults.push(identity);
            }
            if seen.contains(&identity) {
                continue;
            }
            seen.push(identity);
            dirs.listed.push(LibDir {
                path,
                dir,
                identity,
            });
        }
        dirs
    }

    /// The directories of one config file and of the files it includes, in order.
    fn conf_file(&mut self, path: &Path, dirs: &mut Vec<String>, files: &mut usize) {
        *files += 1;
        if *files > MAX_CONF_FILES {
            return;
        }
        let relative = path.strip_prefix("/").unwrap_or(path);
        let (Some(parent), Some(name)) = (
            relative.parent(),
            relative.file_name().and_then(|n| n.to_str()),
        ) else {
            return;
        };
        let stamp = SysDir::open(self.rootfs, parent).and_then(|dir| dir.stamp(name));
        self.stamps
            .push((path.to_path_buf(), Kind::File, stamp.ok()));
        let read = SysDir::open(self.rootfs, parent)
            .and_then(|dir| dir.read_text_file(name, MAX_CONF_BYTES));
        let Some(text) = self.optional(read) else {
            return;
        };
        for line in conf::parse(path, &text) {
            match line {
                Line::Dir(dir) => dirs.push(dir),
                Line::Include(pattern) => {
                    for file in self.glob(&pattern) {
                        self.conf_file(&file, dirs, files);
                    }
                }
            }
        }
    }

    /// The files an `include` pattern names, sorted as glob(3) sorts them (`LC_COLLATE=C`, which
    /// `ldconfig` sets). Patterns in the last component only; a directory component with one
    /// matches nothing.
    fn glob(&mut self, pattern: &Path) -> Vec<PathBuf> {
        let (Some(parent), Some(last)) = (
            pattern.parent(),
            pattern.file_name().and_then(|n| n.to_str()),
        ) else {
            return Vec::new();
        };
        if !conf::is_pattern(last) {
            return vec![pattern.to_path_buf()];
        }
        self.stamps.push((parent.to_path_buf(), Kind::Dir, None));
        let relative = parent.strip_prefix("/").unwrap_or(parent);
        let Some(dir) = self.optional(SysDir::open(self.rootfs, relative)) else {
            return Vec::new();
        };
        if let Some(last_stamp) = self.stamps.last_mut() {
            last_stamp.2 = dir.own_stamp().ok();
        }
        let Some(entries) = self.optional(dir.entries()) else {
            return Vec::new();
        };
        let mut names: Vec<String> = entries
            .into_iter()
            .filter_map(|entry| entry.into_name().ok())
            .filter(|name| conf::glob_component(last, name))
            .collect();
        names.sort();
        names.into_iter().map(|name| parent.join(name)).collect()
    }

    /// The cache the linker would use, if any: a corrupt one is an error and no cache.
    fn cache(&mut self) -> Option<Cache> {
        let (parent, name) = LD_SO_CACHE.rsplit_once('/').unwrap_or(("", LD_SO_CACHE));
        let etc = SysDir::open(self.rootfs, parent);
        let stamp = etc.as_ref().ok().and_then(|etc| etc.stamp(name).ok());
        let path = PathBuf::from(format!("/{LD_SO_CACHE}"));
        self.stamps.push((path, Kind::File, stamp));
        let bytes = self.optional(etc.and_then(|etc| etc.read_file(name, MAX_CACHE_BYTES)))?;
        match Cache::parse(&bytes) {
            Ok(cache) => Some(cache),
            Err(err) => {
                let path = self.rootfs.join(LD_SO_CACHE);
                self.errors
                    .push(SysfsError::invalid(&path, cache_error(&err)));
                None
            }
        }
    }

    /// The copies of `soname` on the path, the resolved one marked.
    fn copies(&mut self, dirs: &Dirs, cache: Option<&Cache>, soname: &str) -> Vec<Copy> {
        let mut copies: Vec<(Copy, Option<(u64, u64)>)> = Vec::new();
        // The directory each copy was found in.
        let mut found_in: Vec<(u64, u64)> = Vec::new();
        for dir in &dirs.listed {
            let Some((identity, version)) = self.copy_in(&dir.dir, soname) else {
                continue;
            };
            if copies.iter().any(|(_, seen)| *seen == Some(identity)) {
                continue;
            }
            let path = format!("{}/{soname}", dir.path.trim_end_matches('/'));
            let copy = Copy {
                path,
                version,
                resolved: false,
            };
            copies.push((copy, Some(identity)));
            found_in.push(dir.identity);
        }
        match cache {
            Some(cache) => {
                if let Some(entry) = cache.lookup(soname) {
                    self.mark_cached(&mut copies, &entry.path, soname);
                }
            }
            None => {
                // Without a cache the linker searches the default directories only.
                let first_default = (dirs.defaults.iter())
                    .find_map(|dir| found_in.iter().position(|found| found == dir));
                if let Some(index) = first_default {
                    copies[index].0.resolved = true;
                }
            }
        }
        copies.into_iter().map(|(copy, _)| copy).collect()
    }

    /// Marks the copy the cache entry at `path` names, adding it when it is on no directory the
    /// path has now (a cache older than the config), or gone (`version` empty).
    fn mark_cached(
        &mut self,
        copies: &mut Vec<(Copy, Option<(u64, u64)>)>,
        path: &str,
        soname: &str,
    ) {
        let found = Path::new(path.trim_start_matches('/'))
            .parent()
            .zip(Path::new(path).file_name().and_then(|n| n.to_str()))
            .and_then(|(parent, name)| {
                let dir = SysDir::open(self.rootfs, parent).ok()?;
                let (identity, version) = self.copy_in(&dir, name)?;
                Some((
                    identity,
                    if name == soname {
                        version
                    } else {
                        String::new()
                    },
                ))
            });
        let at = found
            .as_ref()
            .and_then(|(identity, _)| copies.iter().position(|(_, seen)| *seen == Some(*identity)));
        match at {
            Some(index) => {
                copies[index].0.resolved = true;
                copies[index].0.path = path.to_string();
            }
            None => {
                let version = found.map(|(_, version)| version).unwrap_or_default();
                let copy = Copy {
                    path: path.to_string(),
                    version,
                    resolved: true,
                };
                copies.push((copy, None));
            }
        }
    }

    /// The file `name` in `dir` leads to (links followed inside the root): its identity, and the
    /// version its real name says, else its newest symbol version.
    fn copy_in(&mut self, dir: &SysDir, name: &str) -> Option<((u64, u64), String)> {
        let (file, _) = self.optional(dir.open_regular_file(name))?;
        let metadata = file.metadata().ok()?;
        let identity = std::os::unix::fs::MetadataExt::dev(&metadata);
        let inode = std::os::unix::fs::MetadataExt::ino(&metadata);
        let by_name = version(&real_name(dir, name), name);
        let version = if by_name.is_empty() {
            symbol_version(file)
        } else {
            by_name
        };
        Some(((identity, inode), version))
    }

    fn optional<T>(&mut self, result: Result<T, SysfsError>) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(err) if err.is_absent() => None,
            Err(err) => {
                self.errors.push(err);
                None
            }
        }
    }
}

/// The name of the file at the end of the links from `name` in `dir` (a link's target in the
/// same directory followed again; one with a `/` gives its last component).
fn real_name(dir: &SysDir, name: &str) -> String {
    let mut name = name.to_string();
    for _ in 0..MAX_LINKS {
        let Ok(target) = dir.link_target(&name) else {
            break;
        };
        let target = target.to_string_lossy().into_owned();
        match target.rsplit_once('/') {
            Some((_, last)) => return last.to_string(),
            None => name = target,
        }
    }
    name
}

/// The newest version a library defines, as its `.gnu.version_d` names it (`IBVERBS_1.11`),
/// leaving out private ones (`IBVERBS_PRIVATE_33`, an ABI, not a release): the version of a
/// copy made by hand under the soname's own name (`cp ... /usr/local/lib64/libibverbs.so.1`).
/// Empty for a file that is no ELF object or defines none.
fn symbol_version(file: std::fs::File) -> String {
    use std::io::Read;
    let mut bytes = Vec::new();
    if file
        .take(MAX_LIBRARY_BYTES)
        .read_to_end(&mut bytes)
        .is_err()
    {
        return String::new();
    }
    crate::elf_versions::read_shared_object(&bytes, |_| false)
        .ok()
        .and_then(|object| {
            (object.definitions.into_iter().rev()).find(|name| !name.contains("PRIVATE"))
        })
        .unwrap_or_default()
}

/// `libibverbs.so.1.14.44.0` of `libibverbs.so.1` -> `1.14.44.0`; empty when the real name
/// does not extend the soname.
pub fn version(real_name: &str, soname: &str) -> String {
    let Some((stem, _)) = soname
        .rsplit_once(".so.")
        .or_else(|| soname.strip_suffix(".so").map(|s| (s, "")))
    else {
        return String::new();
    };
    match real_name.strip_prefix(soname) {
        Some(rest) if rest.starts_with('.') && rest.len() > 1 => {
            real_name[stem.len() + ".so.".len()..].to_string()
        }
        _ => String::new(),
    }
}

/// The reason a cache is refused, for the error count and log (never the file's content).
fn cache_error(err: &super::LdCacheError) -> &'static str {
    use super::LdCacheError::*;
    match err {
        NoMagic => "not an ld.so.cache (no magic)",
        Truncated { .. } => "ld.so.cache entries past its end",
        TooManyEntries(_) => "ld.so.cache with too many entries",
        OtherByteOrder(_) => "ld.so.cache of the other byte order or marked invalid",
        BadExtension => "ld.so.cache extension directory corrupt",
    }
}
