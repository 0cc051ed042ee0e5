//! The host unit: whether an IOMMU is active, the IOMMU parameters on the kernel command
//! line, the IOMMU groups, and which vfio modules are loaded.

use std::collections::BTreeMap;

use crate::kernel::cmdline;
use crate::metrics::Value;
use crate::sysfs::SysDir;

use super::{
    Read, IOMMU_ENABLED, IOMMU_GROUP_DEVICES, IOMMU_KERNEL_PARAMETER, IOMMU_UNITS,
    VFIO_MODULE_LOADED,
};

/// Kernel parameters reported, each under this spelling (the command line may write `-` or
/// `_` in any of them).
const KERNEL_PARAMETERS: [&str; 4] = ["intel_iommu", "amd_iommu", "iommu", "vfio-pci.ids"];
const VFIO_MODULES: [&str; 3] = ["vfio", "vfio_iommu_type1", "vfio_pci"];
/// Other `vfio*` entries of /sys/module kept (vfio_pci_core, vfio_virqfd, ...).
const MAX_OTHER_VFIO_MODULES: usize = 16;

impl Read<'_> {
    /// The host's IOMMU state: hardware units, command line, groups, vfio modules.
    pub(super) fn host(&mut self) {
        let collector = self.collector;
        let units = self.iommu_units();
        self.flag(&IOMMU_ENABLED, Vec::new(), !units.is_empty());
        self.push(&IOMMU_UNITS, Vec::new(), Value::Int(units.len() as u64));

        if let Some(proc_dir) = self.out.reported(SysDir::open(&collector.procfs, "")) {
            let cmdline = proc_dir
                .read("cmdline", &mut self.reader)
                .map(str::to_string);
            if let Some(cmdline) = self.out.optional(cmdline) {
                for (parameter, value) in iommu_parameters(&cmdline) {
                    self.push(
                        &IOMMU_KERNEL_PARAMETER,
                        vec![("parameter", parameter.into()), ("value", value.into())],
                        Value::Int(1),
                    );
                }
            }
        }

        let groups = SysDir::open(&collector.sysfs, "kernel/iommu_groups")
            .and_then(|d| d.entries().map(|e| (d, e)));
        if let Some((groups, entries)) = self.out.optional(groups) {
            for group in entries {
                let Some(group) = self.out.reported(group.into_name()) else {
                    continue;
                };
                let Some(group_dir) = self.out.reported(groups.subdir(&group)) else {
                    continue;
                };
                let kind = group_dir.read("type", &mut self.reader).map(str::to_string);
                let kind = self.out.optional(kind).unwrap_or_default();
                let members = group_dir.subdir("devices").and_then(|d| d.entries());
                if let Some(members) = self.out.reported(members) {
                    let members = (members.into_iter())
                        .filter(|member| self.out.reported(member.name()).is_some())
                        .count();
                    self.push(
                        &IOMMU_GROUP_DEVICES,
                        vec![("group", group.into()), ("type", kind.into())],
                        Value::Int(members as u64),
                    );
                }
            }
        }

        let loaded = SysDir::open(&collector.sysfs, "module").and_then(|d| d.entries());
        let loaded: Vec<String> = (self.out.optional(loaded).unwrap_or_default().into_iter())
            .filter_map(|module| self.out.reported(module.into_name()))
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

    pub(super) fn iommu_units(&mut self) -> Vec<String> {
        let units = SysDir::open(&self.collector.sysfs, "class/iommu").and_then(|d| d.entries());
        (self.out.optional(units).unwrap_or_default().into_iter())
            .filter_map(|unit| self.out.reported(unit.into_name()))
            .collect()
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
    use super::*;

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
