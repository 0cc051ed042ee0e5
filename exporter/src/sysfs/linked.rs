//! The directories the links of a listing lead to (`class/infiniband/<device>`,
//! `bus/pci/devices/<address>`), kept open from one scrape to the next on sysfs. Opening one
//! walks its link's target from the root (`openat2`: 4.8 µs on a VM's `/sys`, the cost of nine
//! held reads); on sysfs a link the listing shows with the inode number it had is the same
//! kernfs node (kernfs numbers its nodes without reuse), which leads to the same directory: a
//! device removed and added again, or another that took its name, is a new link. kernfs has
//! numbered its nodes cyclically since 4.14 (before, the lowest free number came back at once):
//! on older kernels, and on trees of regular files, which cannot tell a directory renamed aside
//! and another made in its place without the walk, each is opened every time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use super::{SysDir, SysfsError};
use crate::kernel::release::major_minor;

/// At most this many directories kept (a descriptor each); the others are opened each time.
const MAX_KEPT: usize = 4096;

#[derive(Default)]
pub struct LinkedDirs {
    /// By the link's name: its inode number when opened, and the directory.
    kept: Mutex<HashMap<String, (u64, Arc<SysDir>)>>,
}

impl LinkedDirs {
    /// The directory the link `name` of `listing` leads to, the listing having shown the link
    /// with inode number `inode`: the one kept for that link when it is the same link, else
    /// opened now ([`SysDir::link_dir`]) and, where `on_sysfs` (the listing's
    /// [`SysDir::on_sysfs`], asked once per listing), kept.
    pub fn dir(
        &self,
        listing: &SysDir,
        on_sysfs: bool,
        name: &str,
        inode: u64,
    ) -> Result<Arc<SysDir>, SysfsError> {
        let on_sysfs = on_sysfs && numbers_not_reused();
        if on_sysfs {
            if let Some((kept, dir)) = self.lock().get(name) {
                if *kept == inode {
                    return Ok(dir.clone());
                }
            }
        }
        let dir = Arc::new(listing.link_dir(name)?);
        let mut kept = self.lock();
        if on_sysfs && (kept.len() < MAX_KEPT || kept.contains_key(name)) {
            kept.insert(name.to_string(), (inode, dir.clone()));
        } else {
            kept.remove(name);
        }
        Ok(dir)
    }

    /// Closes the directories whose links the last listing no longer shows.
    pub fn retain(&self, listed: impl Fn(&str) -> bool) {
        self.lock().retain(|name, _| listed(name));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (u64, Arc<SysDir>)>> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Whether the running kernel's sysfs numbers its nodes without taking a number back at once:
/// kernfs allocates them cyclically since 4.14.
fn numbers_not_reused() -> bool {
    static NOT_REUSED: OnceLock<bool> = OnceLock::new();
    *NOT_REUSED.get_or_init(|| {
        let uname = rustix::system::uname();
        let release = uname.release().to_str().unwrap_or_default();
        major_minor(release).is_some_and(|version| version >= (4, 14))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// `class/x/<name>` linking to `devices/<target>`, listed: the link's inode number.
    fn link(root: &std::path::Path, name: &str, target: &str) -> u64 {
        std::fs::create_dir_all(root.join("devices").join(target)).unwrap();
        // Made beside the old link, then renamed over it: a new inode, as on sysfs.
        let at = root.join("class/x").join(name);
        let new = root.join("class/x").join(format!("{name}.new"));
        symlink(format!("../../devices/{target}"), &new).unwrap();
        std::fs::rename(&new, &at).unwrap();
        let listing = SysDir::open(root, "class/x").unwrap();
        let entries = listing.entries_with_inodes().unwrap();
        let found = entries
            .iter()
            .find(|(entry, _)| entry.name().ok() == Some(name));
        found.unwrap().1
    }

    #[test]
    fn on_sysfs_the_same_link_keeps_its_directory_and_a_new_one_is_opened() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("class/x")).unwrap();
        let inode = link(tmp.path(), "dev0", "a");
        let listing = SysDir::open(tmp.path(), "class/x").unwrap();
        let linked = LinkedDirs::default();
        let first = linked.dir(&listing, true, "dev0", inode).unwrap();
        let again = linked.dir(&listing, true, "dev0", inode).unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        // Another link by the same name (the device added again, elsewhere): opened anew.
        let other = link(tmp.path(), "dev0", "b");
        std::fs::write(tmp.path().join("devices/b/mark"), "b").unwrap();
        let reopened = linked.dir(&listing, true, "dev0", other).unwrap();
        assert!(!Arc::ptr_eq(&first, &reopened));
        let mut reader = crate::sysfs::AttributeReader::default();
        assert_eq!(reopened.read("mark", &mut reader).unwrap(), "b");
        // A link the listing no longer shows closes its directory.
        linked.retain(|name| name != "dev0");
        let after = linked.dir(&listing, true, "dev0", other).unwrap();
        assert!(!Arc::ptr_eq(&reopened, &after));
    }

    #[test]
    fn elsewhere_every_directory_is_opened_each_time() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("class/x")).unwrap();
        let inode = link(tmp.path(), "dev0", "a");
        let listing = SysDir::open(tmp.path(), "class/x").unwrap();
        assert!(!listing.on_sysfs());
        let linked = LinkedDirs::default();
        let first = linked.dir(&listing, false, "dev0", inode).unwrap();
        let again = linked.dir(&listing, false, "dev0", inode).unwrap();
        assert!(!Arc::ptr_eq(&first, &again));
        assert!(linked.lock().is_empty());
    }
}
