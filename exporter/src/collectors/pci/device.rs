//! The device unit: one PCI device's identity, driver, BARs, IRQ, MSI/MSI-X, link, power
//! state and SR-IOV; its faults; its passthrough readiness checks; its AER counters; and,
//! without a driver, the modules that would claim it and the modprobe.d rules on them. The
//! root port unit: the AER counters of a root port above such a device.

use crate::metrics::{Labels, Value};
use crate::sync::lock;
use crate::sysfs::{SysDir, SysfsError};

use super::config_space::{self, ConfigSpace, BAR_COUNT};
use super::host::IOMMU_GROUPS_DIR;
use super::identity::{kernel_hex, parse_id, parse_id16, KERNEL_HEX_BYTES};
use super::nova::DeviceType;
use super::{
    with_label, DeviceSelector, ListedDevice, Read, BARS, CONFIG_READABLE, DEVICE_FAULT,
    DEVICE_INFO, DRIVER_BOUND, INTERRUPT_CAPABILITY, IRQ, LINK_SPEED, LINK_WIDTH, MEMORY_DECODE,
    MSIX_TABLE_SIZE, PASSTHROUGH_CHECK, PASSTHROUGH_READY, POWER_STATE, SRIOV_TOTAL_VFS, SRIOV_VFS,
    VFIO_DRIVER,
};

const PCI_BRIDGE_CLASS: u32 = 0x0604;
const PASSTHROUGH_DRIVERS: [&str; 2] = [VFIO_DRIVER, "pci-stub"];
const IRQ_UNASSIGNED: [u64; 2] = [0, 255];
/// What `power_state` prints for PCI_UNKNOWN (a device no driver has enabled) and
/// PCI_POWER_ERROR (drivers/pci/pci.c `pci_power_names`).
const POWER_STATE_UNKNOWN: [&str; 2] = ["unknown", "error"];
/// PCI's configuration space before the extended capabilities of PCIe.
const STANDARD_CONFIG_BYTES: usize = 256;

/// What the device's identity read gives the rest of its read.
struct Identity {
    ids: Option<(u16, u16)>,
    driver: String,
    iommu_group: String,
    /// `sriov_totalvfs`, where the kernel shows it.
    sysfs_total_vfs: Option<u64>,
}

/// What the passthrough checks and the fault gauges need from a device's read.
struct DeviceState {
    /// Vendor and device ids.
    ids: Option<(u16, u16)>,
    driver: String,
    /// The target name of its `iommu_group` link; empty without one.
    iommu_group: String,
    bars_implemented: usize,
    bars_assigned: usize,
    irq: Option<u64>,
    space: ConfigSpace,
    power_state: Option<u64>,
}

impl Read<'_> {
    pub(super) fn device(&mut self, address: &str, by_nova: bool) {
        let collector = self.collector;
        let labels: Labels = vec![("device", self.labels.get(address))];
        let listed = lock(&collector.scrape).listed.remove(address);
        let dir = match collector.device_dir(address, listed.as_ref().map(|l| l.dir.clone())) {
            Ok(dir) => dir,
            Err(err) if err.is_absent() => {
                // Meant for passthrough but not on the bus (removed, or a wrong address); any
                // other device that vanished since the listing is simply gone.
                let named = collector
                    .passthrough
                    .contains(&DeviceSelector::Address(address.to_string()));
                if named || by_nova {
                    self.passthrough(&labels, &[("present", false)]);
                }
                return;
            }
            Err(err) => return self.error(err),
        };
        let state = self.device_attributes(&dir, &labels, listed);
        let named = state.ids.is_some_and(|(vendor, device)| {
            collector
                .passthrough
                .iter()
                .any(|s| s.matches(address, vendor, device))
        });
        if by_nova || named || state.driver == VFIO_DRIVER {
            let (_, iommu_enabled) = self.iommu();
            let isolated = self.group_isolated(&dir, address, &state.iommu_group);
            let checks = [
                ("present", true),
                ("iommu_enabled", iommu_enabled),
                ("vfio_bound", state.driver == VFIO_DRIVER),
                ("group_isolated", isolated),
                (
                    "bars_assigned",
                    state.bars_implemented > 0 && state.bars_assigned == state.bars_implemented,
                ),
            ];
            self.passthrough(&labels, &checks);
        }
        self.faults(&labels, &state);
        self.aer(&dir, &labels);
        if state.driver.is_empty() {
            self.alias_modules(&dir, &labels);
        }
    }

    /// A root port that was above a device of interest at the listing: gone since, nothing.
    pub(super) fn root_port(&mut self, address: &str) {
        let dir = self.collector.device_dir(address, None);
        if let Some(dir) = self.unit.optional(dir) {
            self.aer(&dir, &vec![("device", address.to_string().into())]);
        }
    }

    fn passthrough(&mut self, labels: &Labels, checks: &[(&'static str, bool)]) {
        let ready = checks.iter().all(|(_, ok)| *ok);
        self.flag(&PASSTHROUGH_READY, labels.iter().cloned(), ready);
        for (check, ok) in checks {
            self.flag(
                &PASSTHROUGH_CHECK,
                with_label(labels, ("check", (*check).into())),
                *ok,
            );
        }
    }

    /// Identity, driver, BARs, IRQ, config space, link, power and SR-IOV of one device;
    /// `listed`: what this scrape's listing read of it.
    fn device_attributes(
        &mut self,
        dir: &SysDir,
        labels: &Labels,
        listed: Option<ListedDevice>,
    ) -> DeviceState {
        let identity = self.identity(dir, labels, listed);
        let space = self.config_space(dir);
        let space = self.unit.optional(space).unwrap_or_default();
        let (bars_implemented, bars_assigned) = self.bars(dir, labels, &space);
        let irq = self.unit.u64(dir, "irq");
        let irq = self.unit.optional(irq);
        if let Some(irq) = irq {
            self.push(&IRQ, labels.iter().cloned(), Value::Int(irq));
        }
        self.config_registers(labels, &space);
        self.link_state(dir, labels, &space);
        let power_state = self.power_state(dir, labels, &space);
        self.sriov(dir, labels, &space, identity.sysfs_total_vfs);
        DeviceState {
            ids: identity.ids,
            driver: identity.driver,
            iommu_group: identity.iommu_group,
            bars_implemented,
            bars_assigned,
            irq,
            space,
            power_state,
        }
    }

    /// The info series and whether a driver is bound.
    fn identity(
        &mut self,
        dir: &SysDir,
        labels: &Labels,
        listed: Option<ListedDevice>,
    ) -> Identity {
        // Label values: the unit's own, made once.
        let text = |read: &mut Self, name: &str| read.labels.get(read.unit.label(dir, name));
        let fixed = |read: &mut Self, name: &str| {
            let value = read.unit.fixed(dir, name).map(|text| read.labels.get(text));
            (read.unit.optional(value)).unwrap_or_else(|| read.labels.get(""))
        };
        let hex = |read: &mut Self, value: u32, digits: usize| {
            read.labels
                .get(kernel_hex(value, digits, &mut [0; KERNEL_HEX_BYTES]))
        };
        let link = |read: &mut Self, target: Result<String, SysfsError>| {
            read.unit.optional(target).unwrap_or_default()
        };
        let (listed_driver, identity, listed_group) = match listed {
            Some(listed) => (
                Some(listed.driver),
                Some(listed.identity),
                listed.iommu_group,
            ),
            None => (None, None, None),
        };
        let driver = listed_driver.unwrap_or_else(|| dir.link_target_name("driver"));
        let driver = link(self, driver);
        let physical_function = link(self, dir.link_target_name("physfn"));
        let sysfs_total_vfs = self.unit.optional_u64(dir, "sriov_totalvfs");
        let sysfs_total_vfs = self.unit.reported(sysfs_total_vfs).flatten();
        let device_type = DeviceType::of(!physical_function.is_empty(), sysfs_total_vfs.is_some());
        let (vendor, device, class) = match identity {
            // As the kernel prints them: `0x%04x`, the class `0x%06x`.
            Some(id) => (
                hex(self, id.vendor.into(), 4),
                hex(self, id.device.into(), 4),
                hex(self, id.class, 6),
            ),
            None => (
                text(self, "vendor"),
                text(self, "device"),
                text(self, "class"),
            ),
        };
        let ids = parse_id16(vendor.as_str()).zip(parse_id16(device.as_str()));
        let iommu_group = listed_group.unwrap_or_else(|| dir.link_target_name("iommu_group"));
        let iommu_group = link(self, iommu_group);
        let mut info = labels.clone();
        info.extend([
            ("vendor_id", vendor),
            ("device_id", device),
            ("subsystem_vendor_id", fixed(self, "subsystem_vendor")),
            ("subsystem_device_id", fixed(self, "subsystem_device")),
            ("class", class),
            ("driver", self.labels.get(&driver)),
            ("iommu_group", self.labels.get(&iommu_group)),
            ("numa_node", text(self, "numa_node")),
            ("physical_function", self.labels.get(&physical_function)),
            ("nova_device_type", device_type.as_str().into()),
        ]);
        self.push(&DEVICE_INFO, info, Value::Int(1));
        self.flag(&DRIVER_BOUND, labels.iter().cloned(), !driver.is_empty());
        Identity {
            ids,
            driver,
            iommu_group,
            sysfs_total_vfs,
        }
    }

    /// Implemented and assigned BARs, from `resource` and the header's registers.
    fn bars(&mut self, dir: &SysDir, labels: &Labels, space: &ConfigSpace) -> (usize, usize) {
        // Parsed where it was read into, not copied out first.
        let bars = self.unit.text(dir, "resource").and_then(|resource| {
            parse_bars(resource, &space.bars_in_header).ok_or_else(|| {
                SysfsError::parse(
                    &dir.path("resource"),
                    "expected '0x<start> 0x<end> 0x<flags>' lines",
                    resource,
                )
            })
        });
        let (bars_implemented, bars_assigned) = self.unit.optional(bars).unwrap_or((0, 0));
        for (state, count) in [
            ("assigned", bars_assigned),
            ("unassigned", bars_implemented - bars_assigned),
        ] {
            self.push(
                &BARS,
                with_label(labels, ("state", state.into())),
                Value::Int(count as u64),
            );
        }
        (bars_implemented, bars_assigned)
    }

    /// What the config space's registers say: how much is readable, memory decode, MSI and
    /// MSI-X.
    fn config_registers(&mut self, labels: &Labels, space: &ConfigSpace) {
        if space.readable_bytes > 0 {
            self.push(
                &CONFIG_READABLE,
                labels.iter().cloned(),
                Value::Int(space.readable_bytes as u64),
            );
        }
        if let Some(decode) = space.memory_decode {
            self.flag(&MEMORY_DECODE, labels.iter().cloned(), decode);
        }
        for (capability, enabled) in [("msi", space.msi), ("msix", space.msix.map(|m| m.enabled))] {
            if let Some(enabled) = enabled {
                self.flag(
                    &INTERRUPT_CAPABILITY,
                    with_label(labels, ("capability", capability.into())),
                    enabled,
                );
            }
        }
        if let Some(msix) = space.msix {
            self.push(
                &MSIX_TABLE_SIZE,
                labels.iter().cloned(),
                Value::Int(msix.table_size.into()),
            );
        }
    }

    /// `power_state`, or the PM capability's where the kernel knows none.
    fn power_state(&mut self, dir: &SysDir, labels: &Labels, space: &ConfigSpace) -> Option<u64> {
        let power_state = self.unit.text(dir, "power_state").map(str::to_string);
        let power_state = match self.unit.optional(power_state) {
            // The kernel knows no state (a device no driver enabled): the PM capability may.
            Some(text) if POWER_STATE_UNKNOWN.contains(&text.as_str()) => {
                space.power_state.map(u64::from)
            }
            Some(text) => match power_state_id(&text) {
                Some(id) => Some(id),
                None => {
                    self.error(SysfsError::parse(
                        &dir.path("power_state"),
                        "expected D0, D1, D2, D3hot or D3cold",
                        &text,
                    ));
                    None
                }
            },
            None => space.power_state.map(u64::from),
        };
        if let Some(id) = power_state {
            self.push(&POWER_STATE, labels.iter().cloned(), Value::Int(id));
        }
        power_state
    }

    /// SR-IOV's VFs: from the `sriov_*` files, else the capability's registers.
    fn sriov(
        &mut self,
        dir: &SysDir,
        labels: &Labels,
        space: &ConfigSpace,
        sysfs_total_vfs: Option<u64>,
    ) {
        let total_vfs = sysfs_total_vfs.or(space.sriov.map(|s| s.total_vfs.into()));
        if let Some(total) = total_vfs {
            self.push(&SRIOV_TOTAL_VFS, labels.iter().cloned(), Value::Int(total));
            let numvfs = self.unit.optional_u64(dir, "sriov_numvfs");
            let enabled = match self.unit.reported(numvfs).flatten() {
                Some(enabled) => Some(enabled),
                // No sriov_* files (a kernel without CONFIG_PCI_IOV): NumVFs is the register's,
                // read now, since the extended space is kept from its first read (TotalVFs
                // is fixed; NumVFs is not).
                None if space.sriov.is_some() => self.current_num_vfs(dir),
                None => None,
            };
            if let Some(enabled) = enabled {
                self.push(&SRIOV_VFS, labels.iter().cloned(), Value::Int(enabled));
            }
        }
    }

    /// The device's config space, parsed. The kernel reads it a register at a time, each a
    /// config cycle (all 4096 bytes cost 4.5 ms of CPU per device in a VM, the standard 256
    /// bytes 1.75 ms, the 64-byte header 0.44 ms), so on sysfs the whole space is read once per
    /// device and kept ([`crate::sysfs::UnitRead::fixed_bytes`]), and each scrape reads again only the
    /// registers of its standard part that change (command, BARs, the capabilities' registers
    /// parsed: [`config_space::changing_registers`]). Of the extended space only SR-IOV's
    /// TotalVFs and NumVFs are parsed, a fallback for the `sriov_*` attributes, which a kernel
    /// that can enable VFs shows. Elsewhere (fixture trees) the whole space is read each scrape.
    fn config_space(&mut self, dir: &SysDir) -> Result<ConfigSpace, SysfsError> {
        let whole = self.unit.fixed_bytes(dir, "config");
        let (whole, kept) = match whole {
            Ok(whole) => whole,
            // Its failure costs the extended space alone: the standard part is parsed still.
            Err(err) => {
                let standard = self.standard_part(dir)?;
                self.error(err);
                return Ok(config_space::parse(&standard));
            }
        };
        // Read now whole (outside sysfs): parsed where it was read into.
        if !kept {
            return Ok(config_space::parse(whole));
        }
        let mut config = whole.to_vec();
        let standard = config.len().min(STANDARD_CONFIG_BYTES);
        // A copy kept from a device that could not answer then (all ones, as in D3cold): read
        // whole again. A reader short of root keeps the 64-byte header, whose command register
        // and BARs are read again as any others.
        let answered = |config: &[u8]| config.get(..2).is_some_and(|id| id != [0xFF, 0xFF]);
        if !answered(&config) {
            return self.standard_read_now(dir, config);
        }
        for range in config_space::changing_registers(&config[..standard]) {
            let (offset, len) = (range.start, range.len());
            let now = self.unit.bytes_at(dir, "config", offset, len)?;
            // Cut short, or a device that stopped answering since: the standard part whole.
            if now.len() != len || now.iter().all(|b| *b == 0xFF) {
                return self.standard_read_now(dir, config);
            }
            config[range].copy_from_slice(now);
        }
        Ok(config_space::parse(&config))
    }

    /// `kept` with its standard part read now; a read cut short is all there is to parse.
    fn standard_read_now(
        &mut self,
        dir: &SysDir,
        mut kept: Vec<u8>,
    ) -> Result<ConfigSpace, SysfsError> {
        let now = self.standard_part(dir)?;
        if now.len() < STANDARD_CONFIG_BYTES {
            return Ok(config_space::parse(&now));
        }
        kept.splice(..STANDARD_CONFIG_BYTES.min(kept.len()), now);
        Ok(config_space::parse(&kept))
    }

    /// The standard part of `config` (its first 256 bytes), read now.
    fn standard_part(&mut self, dir: &SysDir) -> Result<Vec<u8>, SysfsError> {
        let read = self.unit.bytes_at(dir, "config", 0, STANDARD_CONFIG_BYTES);
        read.map(<[u8]>::to_vec)
    }

    /// SR-IOV's NumVFs from the whole config space read now.
    fn current_num_vfs(&mut self, dir: &SysDir) -> Option<u64> {
        let sriov =
            (self.unit.bytes(dir, "config")).map(|config| config_space::parse(config).sriov);
        self.unit.reported(sriov)?.map(|s| s.num_vfs.into())
    }

    /// Link speed and width from the PCIe capability when config space could be read, else
    /// from sysfs (`current_link_speed`, ...).
    fn link_state(&mut self, dir: &SysDir, labels: &Labels, space: &ConfigSpace) {
        // The PCIe capability, where the config space read has it (as root), holds what the
        // kernel reads for the `*_link_*` attributes (a config cycle each), and those registers
        // were just read with it. (For `max_link_speed` the kernel takes the top speed of Link
        // Capabilities 2's vector, which Max Link Speed names on a compliant device.) The
        // attributes are read where it is not (the 64-byte header of a reader short of root),
        // and for a speed whose encoding is newer than this table.
        for (which, from_config, [speed_file, width_file]) in [
            (
                "current",
                space.link_current,
                ["current_link_speed", "current_link_width"],
            ),
            (
                "maximum",
                space.link_maximum,
                ["max_link_speed", "max_link_width"],
            ),
        ] {
            let speed = match from_config.and_then(|l| l.speed_gts) {
                Some(gts) => Some(gts),
                None => {
                    let speed = self.unit.text(dir, speed_file);
                    let speed = speed.map(str::to_string);
                    (self.unit.optional(speed)).and_then(|text| parse_link_speed(&text))
                }
            };
            // The width is 0 while the link is down.
            let width = match from_config {
                Some(link) => Some(u64::from(link.width)),
                None => {
                    let width = self.unit.text(dir, width_file);
                    let width = width.map(str::to_string);
                    (self.unit.optional(width)).and_then(|text| match text.parse::<u64>() {
                        Ok(width) => Some(width),
                        Err(_) => {
                            let path = dir.path(width_file);
                            self.error(SysfsError::parse(&path, "not a link width", &text));
                            None
                        }
                    })
                }
            };
            let link = || with_label(labels, ("link", which.into()));
            if let Some(gts) = speed {
                self.push(&LINK_SPEED, link(), Value::Float(gts * 1e9));
            }
            if let Some(width) = width.filter(|w| *w > 0) {
                self.push(&LINK_WIDTH, link(), Value::Int(width));
            }
        }
    }

    /// Faults visible on any device (BARs) and those that are faults only under a host
    /// driver: vfio-pci leaves an idle device disabled, without IRQ, in D3hot.
    fn faults(&mut self, labels: &Labels, state: &DeviceState) {
        let mut faults = vec![(
            "bars_unassigned",
            state.bars_implemented == 0 || state.bars_assigned < state.bars_implemented,
        )];
        let host_driver =
            !state.driver.is_empty() && !PASSTHROUGH_DRIVERS.contains(&state.driver.as_str());
        if host_driver {
            let message_interrupts =
                state.space.msi == Some(true) || state.space.msix.is_some_and(|m| m.enabled);
            if let Some(decode) = state.space.memory_decode {
                faults.push(("memory_decode_disabled", !decode));
            }
            if let Some(irq) = state.irq {
                faults.push((
                    "irq_unassigned",
                    IRQ_UNASSIGNED.contains(&irq) && !message_interrupts,
                ));
            }
            if let Some(power) = state.power_state {
                faults.push(("low_power_state", power >= 3));
            }
        }
        for (fault, present) in faults {
            self.flag(
                &DEVICE_FAULT,
                with_label(labels, ("fault", fault.into())),
                present,
            );
        }
    }

    /// Every member of the device's IOMMU group other than the device itself is a PCI bridge
    /// or bound to vfio-pci or pci-stub. False without a group (no IOMMU).
    fn group_isolated(&mut self, dir: &SysDir, address: &str, group: &str) -> bool {
        if group.is_empty() {
            return false;
        }
        // It becomes a path component under kernel/iommu_groups: a number, never `..`.
        if !group.bytes().all(|b| b.is_ascii_digit()) {
            let path = dir.path("iommu_group");
            self.error(SysfsError::parse(&path, "not an IOMMU group number", group));
            return false;
        }
        let Some(members) = self.group_members(group) else {
            return false;
        };
        members
            .iter()
            .filter(|member| member.as_str() != address)
            .all(|member| {
                let member_dir = format!("{IOMMU_GROUPS_DIR}/{group}/devices/{member}");
                let Ok(member_dir) = self.collector.sysfs_dir(&member_dir) else {
                    return false;
                };
                let class = self
                    .unit
                    .unheld(&member_dir, "class")
                    .ok()
                    .and_then(parse_id);
                let driver = member_dir.link_target_name("driver").unwrap_or_default();
                class.is_some_and(|c| c >> 8 == PCI_BRIDGE_CLASS)
                    || PASSTHROUGH_DRIVERS.contains(&driver.as_str())
            })
    }
}

/// Implemented and assigned BARs: a BAR is implemented when its `resource` line has flags or
/// an end, or its register shows it (the kernel zeroes the resource of a BAR it could not
/// place); it is assigned when its start is not zero.
fn parse_bars(resource: &str, in_header: &[bool; BAR_COUNT]) -> Option<(usize, usize)> {
    let (mut implemented, mut assigned) = (0, 0);
    for (line, in_header) in resource.lines().zip(in_header) {
        let mut fields = line
            .split_whitespace()
            .map(|f| u64::from_str_radix(f.trim_start_matches("0x"), 16).ok());
        let (start, end, flags) = (fields.next()??, fields.next()??, fields.next()??);
        if flags != 0 || end != 0 || *in_header {
            implemented += 1;
            if start != 0 {
                assigned += 1;
            }
        }
    }
    Some((implemented, assigned))
}

/// `8.0 GT/s PCIe` (older kernels: `8.0 GT/s`, or `8 GT/s`) -> 8.0; `Unknown` -> None.
fn parse_link_speed(text: &str) -> Option<f64> {
    let (number, rest) = text.split_once(' ')?;
    rest.starts_with("GT/s").then(|| number.parse().ok())?
}

fn power_state_id(text: &str) -> Option<u64> {
    ["D0", "D1", "D2", "D3hot", "D3cold"]
        .iter()
        .position(|s| *s == text)
        .map(|i| i as u64)
}

#[cfg(test)]
mod tests {
    use super::super::PciCollector;
    use super::*;
    use crate::sysfs::HeldAttributes;

    #[test]
    fn bars_from_resource() {
        let t4 = "0x00000000b7000000 0x00000000b7ffffff 0x0000000000040200\n\
                  0x000038bfc0000000 0x000038bfcfffffff 0x000000000014220c\n\
                  0x0000000000000000 0x0000000000000000 0x0000000000000000\n\
                  0x000038bff0000000 0x000038bff1ffffff 0x000000000014220c\n\
                  0x0000000000000000 0x0000000000000000 0x0000000000000000\n\
                  0x0000000000000000 0x0000000000000000 0x0000000000000000\n\
                  0x0000000000000000 0x0000000000000000 0x0000000000000000\n";
        let none = [false; BAR_COUNT];
        assert_eq!(parse_bars(t4, &none), Some((3, 3)));
        let zero = "0x0000000000000000 0x0000000000000000 0x0000000000000000\n".repeat(13);
        assert_eq!(parse_bars(&zero, &none), Some((0, 0)));
        // Firmware left the 64-bit BARs 1 and 3 unplaced: their registers keep the type bits.
        let header = [false, true, false, true, false, false];
        assert_eq!(parse_bars(&zero, &header), Some((2, 0)));
        assert_eq!(parse_bars("0x1 banana 0x2", &none), None);
    }

    /// A device directory `0000:3b:00.0` with a `config` file, and what to write it with.
    fn config_tree() -> (tempfile::TempDir, PciCollector, SysDir, impl Fn(&[u8])) {
        let tmp = tempfile::tempdir().unwrap();
        let config_path = tmp.path().join("0000:3b:00.0/config");
        std::fs::create_dir(config_path.parent().unwrap()).unwrap();
        let collector = super::super::collector_at(tmp.path());
        let dir = SysDir::open(tmp.path(), "0000:3b:00.0").unwrap();
        let write = move |config: &[u8]| std::fs::write(&config_path, config).unwrap();
        (tmp, collector, dir, write)
    }

    /// The config space one unit's read parses, which reports no error.
    fn space(collector: &PciCollector, dir: &SysDir, held: &mut HeldAttributes) -> ConfigSpace {
        let (space, errors) =
            super::super::unit_read(collector, held, |read| read.config_space(dir).unwrap());
        assert_eq!(errors, 0);
        space
    }

    /// On sysfs a device's config space is read whole once and kept; each scrape reads again
    /// only the registers that change, so a change there is seen and one in the capability
    /// list (fixed with the device) is not. A device that stops answering (all ones) has its
    /// standard part read whole. Elsewhere the whole space is read each scrape.
    #[test]
    fn config_space_on_sysfs_reads_the_changing_registers_again() {
        let (_tmp, collector, dir, write) = config_tree();
        let space = |held: &mut HeldAttributes| space(&collector, &dir, held);
        let first = config_space::t4_like(true);
        write(&first);
        let mut sysfs = HeldAttributes::default();
        sysfs.as_on_sysfs(&dir);
        let mut fixture = HeldAttributes::default();
        for held in [&mut sysfs, &mut fixture] {
            assert_eq!(space(held), config_space::parse(&first));
        }

        // MSI-X disabled (a register that changes), and the list cut after PM (fixed).
        let mut now = config_space::t4_like(false);
        now[0x61] = 0;
        write(&now);
        let mut kept = first.clone();
        kept[0xca..0xcc].copy_from_slice(&now[0xca..0xcc]);
        assert_eq!(space(&mut sysfs), config_space::parse(&kept));
        assert_eq!(space(&mut sysfs).msix.map(|m| m.enabled), Some(false));
        assert_eq!(space(&mut fixture), config_space::parse(&now));
        assert_eq!(space(&mut fixture).msix, None);

        // Not answering: all ones from the command register on.
        let mut gone = first.clone();
        gone[4..256].fill(0xFF);
        write(&gone);
        let mut read_whole = gone[..256].to_vec();
        read_whole.extend_from_slice(&first[256..]);
        assert_eq!(space(&mut sysfs), config_space::parse(&read_whole));

        // Cut short (the header alone): what is there, not the kept space after it.
        write(&first[..64]);
        assert_eq!(space(&mut sysfs), config_space::parse(&first[..64]));
        assert!(space(&mut sysfs).capabilities_unreadable);
    }

    /// A reader short of root keeps the 64-byte header it may read, and reads its command
    /// register and BARs again each scrape, not the rest of it.
    #[test]
    fn a_header_kept_without_root_has_its_registers_read_again() {
        let (_tmp, collector, dir, write) = config_tree();
        let mut held = HeldAttributes::default();
        held.as_on_sysfs(&dir);
        let header = config_space::t4_like(true)[..64].to_vec();
        write(&header);
        assert_eq!(
            space(&collector, &dir, &mut held),
            config_space::parse(&header)
        );
        // Memory decode off and BAR 0 moved (changing); the status register's capability
        // bit cleared (fixed: not read again).
        let mut now = header.clone();
        now[0x04] = 0;
        now[0x13] = 0xb8;
        now[0x06] = 0;
        write(&now);
        let mut kept = header.clone();
        kept[0x04] = 0;
        kept[0x13] = 0xb8;
        let patched = space(&collector, &dir, &mut held);
        assert_eq!(patched, config_space::parse(&kept));
        assert_eq!(patched.memory_decode, Some(false));
        assert!(patched.capabilities_unreadable);
    }

    #[test]
    fn link_speeds() {
        assert_eq!(parse_link_speed("8.0 GT/s PCIe"), Some(8.0));
        assert_eq!(parse_link_speed("2.5 GT/s"), Some(2.5));
        assert_eq!(parse_link_speed("Unknown"), None);
        assert_eq!(parse_link_speed("Unknown speed"), None);
    }
}
