//! The directories the links of a listing lead to (`class/infiniband/<device>`,
//! `bus/pci/devices/<address>`), kept open from one scrape to the next on sysfs. Opening one
//! walks its link's target from the root (`openat2`: 4.8 µs on a VM's `/sys`, the cost of nine
//! held reads); on sysfs a link the listing shows with the inode number it had is the same
//! kernfs node, which leads to the same directory: a device removed and added again, or
//! another that took its name, is a new link. kernfs has numbered its nodes cyclically since
//! 4.14, a number coming back only after 2^31 others (never, with 64-bit numbers, since 5.5);
//! before, the lowest free number came back at once. On older kernels, and on trees of regular
//! files, which cannot tell a directory renamed aside and another made in its place without the
//! walk, each is opened every time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use super::budget::{HeldBudget, HeldSlot};
use super::{SysDir, SysfsError};
use crate::kernel_version::major_minor;
use crate::sync::lock;

/// A kept directory: its link's inode number when opened, the directory, and its two shares of
/// the budget of held descriptors (its own, and the root it keeps open).
type Kept = (u64, Arc<SysDir>, [HeldSlot; 2]);

pub struct LinkedDirs {
    /// By the link's name.
    kept: Mutex<HashMap<String, Kept>>,
    budget: &'static HeldBudget,
}

impl Default for LinkedDirs {
    fn default() -> Self {
        LinkedDirs {
            kept: Mutex::default(),
            budget: HeldBudget::process(),
        }
    }
}

impl LinkedDirs {
    /// Whether the directories `listing`'s links lead to may be kept: on sysfs, of a kernel
    /// that does not take a node's number back at once. Asked once per listing.
    pub fn keeps(listing: &SysDir) -> bool {
        listing.on_sysfs() && numbers_not_reused()
    }

    /// The directory the link `name` of `listing` leads to, the listing having shown the link
    /// with inode number `inode`: the one kept for that link when it is the same link, else
    /// opened now ([`SysDir::link_dir`]) and, where `keep` ([`LinkedDirs::keeps`]) and the
    /// budget of held descriptors allow, kept.
    pub fn dir(
        &self,
        listing: &SysDir,
        keep: bool,
        name: &str,
        inode: u64,
    ) -> Result<Arc<SysDir>, SysfsError> {
        if !keep {
            return listing.link_dir(name).map(Arc::new);
        }
        {
            let mut kept = lock(&self.kept);
            match kept.get(name) {
                Some((kept_inode, dir, _)) if *kept_inode == inode => return Ok(dir.clone()),
                // Another link's directory is closed, and its shares given back, even when the
                // new one does not open.
                Some(_) => drop(kept.remove(name)),
                None => {}
            }
        }
        let dir = Arc::new(listing.link_dir(name)?);
        if let Some(slots) = self.budget.reserve().zip(self.budget.reserve()) {
            let kept = (inode, dir.clone(), slots.into());
            lock(&self.kept).insert(name.to_string(), kept);
        }
        Ok(dir)
    }

    /// Closes the directories whose links the last listing no longer shows.
    pub fn retain(&self, listed: impl Fn(&str) -> bool) {
        lock(&self.kept).retain(|name, _| listed(name));
    }
}

/// Whether the running kernel's sysfs numbers its nodes without taking a number back at once:
/// kernfs allocates them cyclically since 4.14.
pub(super) fn numbers_not_reused() -> bool {
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

    /// A root with an empty `class/x`.
    fn class_tree() -> tempfile::TempDir {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("class/x")).unwrap();
        tmp
    }

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
    fn where_kept_the_same_link_keeps_its_directory_and_a_new_one_is_opened() {
        let tmp = class_tree();
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

    /// A kept directory takes two shares of the budget of held descriptors; without them it
    /// is opened each time.
    #[test]
    fn beyond_the_budget_directories_are_opened_each_time() {
        static BUDGET: HeldBudget = HeldBudget::new(3);
        let tmp = class_tree();
        let first = link(tmp.path(), "dev0", "a");
        let second = link(tmp.path(), "dev1", "b");
        let listing = SysDir::open(tmp.path(), "class/x").unwrap();
        let linked = LinkedDirs {
            kept: Mutex::default(),
            budget: &BUDGET,
        };
        let kept = linked.dir(&listing, true, "dev0", first).unwrap();
        assert!(Arc::ptr_eq(
            &kept,
            &linked.dir(&listing, true, "dev0", first).unwrap()
        ));
        assert_eq!(BUDGET.held(), 2);
        let unkept = linked.dir(&listing, true, "dev1", second).unwrap();
        assert!(!Arc::ptr_eq(
            &unkept,
            &linked.dir(&listing, true, "dev1", second).unwrap()
        ));
        assert_eq!(BUDGET.held(), 2);
        linked.retain(|name| name == "dev0");
        assert_eq!(BUDGET.held(), 2);
        // dev0's new link leads nowhere: the directory kept for its old link is closed.
        let gone = link(tmp.path(), "dev0", "c");
        std::fs::remove_dir(tmp.path().join("devices/c")).unwrap();
        assert!(linked.dir(&listing, true, "dev0", gone).is_err());
        assert_eq!(BUDGET.held(), 0);
        let back = link(tmp.path(), "dev0", "a");
        linked.dir(&listing, true, "dev0", back).unwrap();
        assert_eq!(BUDGET.held(), 2);
        linked.retain(|_| false);
        assert_eq!(BUDGET.held(), 0);
    }

    #[test]
    fn elsewhere_every_directory_is_opened_each_time() {
        let tmp = class_tree();
        let inode = link(tmp.path(), "dev0", "a");
        let listing = SysDir::open(tmp.path(), "class/x").unwrap();
        assert!(!LinkedDirs::keeps(&listing));
        let linked = LinkedDirs::default();
        let first = linked.dir(&listing, false, "dev0", inode).unwrap();
        let again = linked.dir(&listing, false, "dev0", inode).unwrap();
        assert!(!Arc::ptr_eq(&first, &again));
        assert!(lock(&linked.kept).is_empty());
    }
}
