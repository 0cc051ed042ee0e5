//! The host unit: whether an IOMMU is active, the IOMMU parameters on the kernel command
//! line, the IOMMU groups, and which vfio modules are loaded.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::kernel::cmdline;
use crate::metrics::Value;
use crate::sync::lock;
use crate::sysfs::{Entry, SysDir, SysfsError};

use super::{
    Read, IOMMU_ENABLED, IOMMU_GROUP_DEVICES, IOMMU_KERNEL_PARAMETER, IOMMU_UNITS,
    VFIO_MODULE_LOADED,
};

/// Kernel parameters reported, each under this spelling (the command line may write `-` or
/// `_` in any of them).
const KERNEL_PARAMETERS: [&str; 4] = ["intel_iommu", "amd_iommu", "iommu", "vfio-pci.ids"];
const VFIO_MODULES: [&str; 3] = ["vfio", "vfio_iommu_type1", "vfio_pci"];
/// The IOMMU groups, under `--path.sysfs`.
pub(super) const IOMMU_GROUPS_DIR: &str = "kernel/iommu_groups";
/// The name vfio gives the groups it makes in no-IOMMU mode (`enable_unsafe_noiommu_mode`).
const NO_IOMMU_GROUP: &str = "vfio-noiommu";
/// Other `vfio*` entries of /sys/module kept (vfio_pci_core, vfio_virqfd, ...).
const MAX_OTHER_VFIO_MODULES: usize = 16;

impl Read<'_> {
    /// The host's IOMMU state: hardware units, command line, groups, vfio modules.
    pub(super) fn host(&mut self) {
        let collector = self.collector;
        let (units, enabled) = self.iommu();
        self.flag(&IOMMU_ENABLED, Vec::new(), enabled);
        self.push(&IOMMU_UNITS, Vec::new(), Value::Int(units as u64));

        if let Some(proc_dir) = self.unit.reported(SysDir::open(&collector.procfs, "")) {
            let cmdline = self.unit.unheld(&proc_dir, "cmdline").map(str::to_string);
            if let Some(cmdline) = self.unit.optional(cmdline) {
                for (parameter, value) in iommu_parameters(&cmdline) {
                    self.push(
                        &IOMMU_KERNEL_PARAMETER,
                        vec![("parameter", parameter.into()), ("value", value.into())],
                        Value::Int(1),
                    );
                }
            }
        }

        let groups = collector
            .sysfs_dir(IOMMU_GROUPS_DIR)
            .and_then(|d| d.entries_with_inodes().map(|e| (d, e)));
        if let Some((groups, entries)) = self.unit.optional(groups) {
            for (group, inode) in entries {
                let Some(group) = self.unit.reported(group.into_name()) else {
                    continue;
                };
                // Held from one scrape to the next within the budget (five shares a group:
                // three descriptors, two of them keeping the root open), so a group's
                // directory, `type` and `devices/` are not opened again, and outside sysfs its
                // listing is not read again while unchanged.
                let dir = self.unit.held().listed_subdir(&groups, &group, inode);
                let Some(dir) = self.unit.reported(dir) else {
                    continue;
                };
                let kind = self.labels.get(self.unit.label(&dir, "type"));
                let listing = self.unit.held().subdir_entries(&dir, "devices");
                if let Some(members) = self.keep_group_members(&group, listing) {
                    let labels = vec![("group", self.labels.get(&group)), ("type", kind)];
                    self.push(
                        &IOMMU_GROUP_DEVICES,
                        labels,
                        Value::Int(members.len() as u64),
                    );
                }
            }
        }

        let loaded = collector.sysfs_dir("module").and_then(SysDir::into_entries);
        let loaded: Vec<String> = (self.unit.optional(loaded).unwrap_or_default().into_iter())
            .filter_map(|module| self.unit.reported(module.into_name()))
            .collect();
        let others = loaded
            .iter()
            .filter(|m| m.starts_with("vfio") && !VFIO_MODULES.contains(&m.as_str()))
            .take(MAX_OTHER_VFIO_MODULES);
        for module in VFIO_MODULES
            .iter()
            .map(|m| m.to_string())
            .chain(others.cloned())
        {
            let present = loaded.contains(&module);
            self.flag(
                &VFIO_MODULE_LOADED,
                vec![("module", module.into())],
                present,
            );
        }
    }

    /// The names in `kernel/iommu_groups/<group>/devices`, as the host unit (which lists every
    /// group) or the first device unit of the scrape that asks before it (or each of two that
    /// ask at once) listed them, kept for the others. A listing that fails is reported by each
    /// unit that tried it, and not kept; a name that is not UTF-8, by the unit that listed it,
    /// and left out.
    pub(super) fn group_members(&mut self, group: &str) -> Option<Arc<[String]>> {
        if let Some(members) = lock(&self.collector.scrape).group_members.get(group) {
            return Some(members.clone());
        }
        let members_dir = format!("{IOMMU_GROUPS_DIR}/{group}/devices");
        let listing = (self.collector.sysfs_dir(&members_dir)).and_then(SysDir::into_entries);
        self.keep_group_members(group, listing.map(Arc::from))
    }

    /// The names `listing` of `group`'s `devices/` gave, kept for the scrape's other units.
    fn keep_group_members(
        &mut self,
        group: &str,
        listing: Result<Arc<[Entry]>, SysfsError>,
    ) -> Option<Arc<[String]>> {
        let members: Arc<[String]> = (self.unit.reported(listing)?.iter())
            .filter_map(|member| self.unit.reported(member.name().map(str::to_string)))
            .collect();
        let mut scrape = lock(&self.collector.scrape);
        scrape
            .group_members
            .insert(group.to_string(), members.clone());
        Some(members)
    }

    /// [`Read::read_iommu`], once per scrape: the host unit and each device meant for
    /// passthrough ask for it.
    pub(super) fn iommu(&mut self) -> (usize, bool) {
        if let Some(iommu) = lock(&self.collector.scrape).iommu {
            return iommu;
        }
        // Read once per scrape, unless it met an error, which each read reports then.
        let errors = self.unit.out().errors.len();
        let iommu = self.read_iommu();
        if self.unit.out().errors.len() == errors {
            lock(&self.collector.scrape).iommu = Some(iommu);
        }
        iommu
    }

    /// The IOMMU units in `/sys/class/iommu`, and whether an IOMMU is active: a unit there
    /// (kernels since 3.17), else an IOMMU group, which only an IOMMU driver makes (kernels 3.5
    /// to 3.16 have groups but no `/sys/class/iommu`). Groups that vfio's no-IOMMU mode makes
    /// without one do not count.
    fn read_iommu(&mut self) -> (usize, bool) {
        let units = self
            .collector
            .sysfs_dir("class/iommu")
            .and_then(SysDir::into_entries);
        let units = self.unit.optional(units).unwrap_or_default().len();
        if units > 0 {
            return (units, true);
        }
        // A listing that fails is reported where the host unit lists the groups, once.
        let groups = self
            .collector
            .sysfs_dir(IOMMU_GROUPS_DIR)
            .and_then(|d| d.entries().map(|e| (d, e)));
        let Ok((groups, entries)) = groups else {
            return (0, false);
        };
        let enabled = entries.iter().filter_map(|e| e.name().ok()).any(|group| {
            let name = self.unit.unheld(&groups, &format!("{group}/name"));
            let no_iommu = name.map(|name| name == NO_IOMMU_GROUP);
            self.unit.optional(no_iommu) != Some(true)
        });
        (0, enabled)
    }
}

/// The IOMMU parameters on a kernel command line, last occurrence winning as in the kernel
/// (`vfio_pci.ids` is reported as `vfio-pci.ids`).
fn iommu_parameters(text: &str) -> Vec<(&'static str, String)> {
    let mut found: BTreeMap<&'static str, String> = BTreeMap::new();
    for parameter in cmdline::parameters(text) {
        if let Some(name) = KERNEL_PARAMETERS.iter().find(|name| parameter.is(name)) {
            let value = parameter.value.unwrap_or_default();
            found.insert(name, value.to_string());
        }
    }
    found.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::super::{collector_at as collector, PciCollector};
    use super::*;

    /// `hpcnode_iommu_enabled` on a sysfs root with the given IOMMU groups (`None`: unnamed)
    /// and no `/sys/class/iommu`, as kernels before 3.17 have.
    fn enabled_with_groups(groups: &[Option<&str>]) -> bool {
        let tmp = tempfile::tempdir().unwrap();
        for (number, name) in groups.iter().enumerate() {
            let group = tmp.path().join(format!("kernel/iommu_groups/{number}"));
            std::fs::create_dir_all(group.join("devices")).unwrap();
            if let Some(name) = name {
                std::fs::write(group.join("name"), format!("{name}\n")).unwrap();
            }
        }
        let collector = collector(tmp.path());
        let ((units, enabled), errors) = unit_read(&collector, |read| read.iommu());
        assert_eq!(units, 0);
        assert_eq!(errors, 0);
        enabled
    }

    /// What one unit's read gets from `read`, and how many errors it reports.
    fn unit_read<R>(collector: &PciCollector, read: impl FnOnce(&mut Read) -> R) -> (R, usize) {
        super::super::unit_read(collector, &mut Default::default(), read)
    }

    /// What one device read gets of the IOMMU state, and the errors it reports.
    fn iommu_read(collector: &PciCollector) -> ((usize, bool), usize) {
        unit_read(collector, |read| read.iommu())
    }

    /// What `read` gets of the directory `listed` (under the tree's root) is kept for the
    /// scrape: with `first` in it, then `second` made, which shows from the next listing on.
    /// A read that met an error is not kept, so that each read reports it (here `listed`
    /// made a link to itself: ELOOP).
    fn kept_for_the_scrape<T: Clone + PartialEq + std::fmt::Debug>(
        listed: &str,
        [first, second]: [&str; 2],
        read: impl Fn(&PciCollector) -> (T, usize),
        [one, two, broken]: [T; 3],
    ) {
        use crate::collector::Collector;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join(listed);
        std::fs::create_dir_all(dir.join(first)).unwrap();
        let collector = collector(tmp.path());
        assert_eq!(read(&collector), (one.clone(), 0));
        std::fs::create_dir(dir.join(second)).unwrap();
        assert_eq!(read(&collector), (one, 0));
        collector.units().unwrap();
        assert_eq!(read(&collector), (two, 0));
        std::fs::remove_dir_all(&dir).unwrap();
        std::os::unix::fs::symlink(dir.file_name().unwrap(), &dir).unwrap();
        collector.units().unwrap();
        assert_eq!(read(&collector), (broken.clone(), 1));
        assert_eq!(read(&collector), (broken, 1));
    }

    /// The IOMMU state is read once per scrape (each device meant for passthrough asks).
    #[test]
    fn the_iommu_state_is_read_once_per_scrape() {
        kept_for_the_scrape(
            "class/iommu",
            ["dmar0", "dmar1"],
            iommu_read,
            [(1, true), (2, true), (0, false)],
        );
    }

    /// What one unit's read gets of a group's members, and the errors it reports.
    fn members_read(collector: &PciCollector, group: &str) -> (Option<Vec<String>>, usize) {
        unit_read(collector, |read| {
            read.group_members(group).map(|members| members.to_vec())
        })
    }

    /// A group is listed once per scrape, for the host unit and the device units alike.
    #[test]
    fn a_group_is_listed_once_per_scrape() {
        let names = |names: &[&str]| Some(names.iter().map(|name| name.to_string()).collect());
        kept_for_the_scrape(
            "kernel/iommu_groups/7/devices",
            ["0000:3b:00.0", "0000:3b:00.1"],
            |collector| members_read(collector, "7"),
            [
                names(&["0000:3b:00.0"]),
                names(&["0000:3b:00.0", "0000:3b:00.1"]),
                None,
            ],
        );
    }

    #[test]
    fn iommu_groups_without_the_iommu_class_mean_an_iommu() {
        assert!(!enabled_with_groups(&[]));
        assert!(enabled_with_groups(&[None, None]));
        // vfio's no-IOMMU mode makes groups without an IOMMU.
        assert!(!enabled_with_groups(&[Some(NO_IOMMU_GROUP)]));
        assert!(enabled_with_groups(&[Some(NO_IOMMU_GROUP), None]));
    }

    #[test]
    fn iommu_parameters_last_one_wins() {
        assert_eq!(
            iommu_parameters("BOOT_IMAGE=/vmlinuz quiet intel_iommu=on iommu=pt vfio_pci.ids=10de:1eb8 intel_iommu=on,sm_on"),
            [
                ("intel_iommu", "on,sm_on".to_string()),
                ("iommu", "pt".to_string()),
                ("vfio-pci.ids", "10de:1eb8".to_string())
            ]
        );
        // Init's arguments after `--` set no kernel parameter; kmod still passes module options.
        assert_eq!(
            iommu_parameters("intel-iommu=\"on\" -- iommu=pt vfio-pci.ids=15b3:1017"),
            [
                ("intel_iommu", "on".to_string()),
                ("vfio-pci.ids", "15b3:1017".to_string())
            ]
        );
    }
}
