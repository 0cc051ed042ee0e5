//! The pci collector's listing: which devices of `bus/pci/devices` are units this scrape (of
//! interest, named, selected by Nova, bound to vfio-pci), the root ports above them, and what
//! it read of each for their units' reads to take.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::collector::{CollectError, Output};
use crate::sync::lock;
use crate::sysfs::{AttributeReader, Entry, LinkedDirs, SysDir, SysfsError, UnitRead};

use super::identity::{parse_id, read_identity, Identity};
use super::{
    aer, nova, nova_check, DeviceSelector, ListedDevice, PciCollector, ScrapeState, Unit,
    UnitState, CLASSES_OF_INTEREST, DEVICES_DIR, HOST_UNIT, RDMA_VENDORS, VFIO_DRIVER,
};

/// What the listing read of one device, in the device's held set.
struct ListedRead {
    identity: Identity,
    by_nova: bool,
    driver: Result<String, SysfsError>,
    on_vfio: bool,
    interesting: bool,
    root_port: Option<String>,
}

/// What the listing gathers, device by device.
#[derive(Default)]
struct Listing {
    units: Vec<Unit>,
    root_ports: Vec<String>,
    vfio_bound: Vec<String>,
    vfio_dirs: HashMap<String, (Arc<SysDir>, Option<String>)>,
    of_interest: HashMap<String, ListedDevice>,
}

/// The device directories listed, and the Nova device specs the listing selects devices by.
struct Selection<'a> {
    devices: &'a SysDir,
    specs: Vec<&'a nova::DeviceSpec>,
    with_netdevs: bool,
}

impl PciCollector {
    pub(super) fn list_units(&self) -> Result<Vec<Unit>, CollectError> {
        let sysfs = SysDir::open(&self.sysfs, "").ok().map(Arc::new);
        *lock(&self.scrape) = ScrapeState {
            sysfs,
            ..ScrapeState::default()
        };
        let listing = self
            .sysfs_dir(DEVICES_DIR)
            .and_then(|dir| dir.entries_with_inodes().map(|entries| (dir, entries)));
        let (devices, entries) = match listing {
            Ok(listing) => listing,
            // No PCI bus: nothing to report.
            Err(err) if err.is_absent() => return Ok(Vec::new()),
            Err(err) => return Err(err.into()),
        };
        let keep = LinkedDirs::keeps(&devices);
        let mut addresses = Vec::new();
        let mut inodes = Vec::new();
        let mut unnamed = Vec::new();
        for (entry, inode) in entries {
            match entry {
                Entry::Name(address) => {
                    addresses.push(address);
                    inodes.push(inode);
                }
                entry => unnamed.push(Unit::Unnamed(entry)),
            }
        }
        // Errors in these files are the nova unit's to report.
        let nova = self.nova.read();
        let specs: Vec<&nova::DeviceSpec> = nova.configs().flat_map(|c| &c.specs).collect();
        let with_netdevs = specs.iter().any(|spec| spec.names_netdev());
        let selection = Selection {
            devices: &devices,
            specs,
            with_netdevs,
        };
        let mut reader = AttributeReader::default();
        let mut unreported = Output::default();
        let mut listing = Listing::default();
        for (address, inode) in addresses.iter().zip(inodes) {
            // A device that vanished or cannot be identified is not one of interest; a
            // device named by address that is absent is still listed (to report it absent).
            let Ok(dir) = self.device_dirs.dir(&devices, keep, address, inode) else {
                continue;
            };
            // Read in the device's held set, in a round its unit's read goes on in.
            let read = self.held.read_opening(address, |held, state| {
                // What fails makes the device one not chosen, reported by none.
                let mut unit = UnitRead::new(held, &mut reader, &mut unreported);
                let read = self.read_listed(&selection, &dir, address, &mut unit, state);
                // Open for any unit that reads the device (a root port is one, of no interest
                // itself, in the same held set): ended by the next listing's read if none does.
                let open = read.is_some();
                (read, open)
            });
            if let Some(read) = read {
                listing.add(address, dir, read);
            }
        }
        let listed: HashSet<&str> = addresses.iter().map(String::as_str).collect();
        self.held
            .retain(|unit| unit == HOST_UNIT || listed.contains(unit));
        self.device_dirs.retain(|address| listed.contains(address));
        let units = self.finish(listing, &addresses, unnamed);
        lock(&self.scrape).nova = Some(nova);
        Ok(units)
    }

    /// One device's identity, whether it is of interest, and its root port (kept while its
    /// directory stays the same); `None` when it cannot be identified.
    fn read_listed(
        &self,
        selection: &Selection<'_>,
        dir: &SysDir,
        address: &str,
        unit: &mut UnitRead<'_, Output>,
        state: &mut UnitState,
    ) -> Option<ListedRead> {
        // The kernel fixes the ids with the device (read at enumeration).
        let identity = read_identity(address, |name| parse_id(unit.fixed(dir, name).ok()?))?;
        // Unusable names under `net` are the nova unit's to report.
        let nova_identity =
            nova_check::nova_identity(dir, &identity, selection.with_netdevs, &mut Vec::new());
        let by_nova = selection
            .specs
            .iter()
            .any(|spec| spec.matches(&nova_identity));
        let named = self
            .devices
            .iter()
            .chain(&self.passthrough)
            .any(|s| s.matches(address, identity.vendor, identity.device));
        let driver = dir.link_target_name("driver");
        let on_vfio = driver.as_ref().is_ok_and(|d| d == VFIO_DRIVER);
        let interesting = by_nova
            || named
            || on_vfio
            || CLASSES_OF_INTEREST.contains(&(identity.class >> 8))
            || RDMA_VENDORS.contains(&identity.vendor);
        let root_port = match interesting.then(|| unit.held().stamp(dir)) {
            None => None,
            Some(stamp) => match &state.root_port {
                Some((kept, port)) if Some(*kept) == stamp => port.clone(),
                _ => {
                    let port = selection
                        .devices
                        .link_target(address)
                        .ok()
                        .and_then(|path| aer::root_port_of(&path));
                    state.root_port = stamp.map(|stamp| (stamp, port.clone()));
                    port
                }
            },
        };
        Some(ListedRead {
            identity,
            by_nova,
            driver,
            on_vfio,
            interesting,
            root_port,
        })
    }

    /// The units in the order they are read: host, nova, devices, vfio holders, root ports,
    /// unnamed entries; what the listing read is left for the units' reads.
    fn finish(&self, listing: Listing, addresses: &[String], unnamed: Vec<Unit>) -> Vec<Unit> {
        let Listing {
            mut units,
            mut root_ports,
            vfio_bound,
            vfio_dirs,
            of_interest,
        } = listing;
        // A root port that is a device of interest itself is read as one.
        root_ports.retain(|port| {
            !units
                .iter()
                .any(|unit| matches!(unit, Unit::Device { address, .. } if address == port))
        });
        for selector in &self.passthrough {
            if let DeviceSelector::Address(address) = selector {
                if !addresses.contains(address) {
                    units.push(Unit::Device {
                        address: address.clone(),
                        nova_selected: false,
                    });
                }
            }
        }
        // The host's IOMMU state matters where there is a device to pass through or check;
        // a node without one stays silent.
        if !self.nova.is_empty() {
            units.insert(0, Unit::Nova);
        }
        if !units.is_empty() {
            units.insert(0, Unit::Host);
        }
        // Scanning every process's open files costs: only where vfio is loaded (a process
        // may still hold a group whose device left vfio-pci).
        if !vfio_bound.is_empty() || self.sysfs_dir("module/vfio").is_ok() {
            units.push(Unit::VfioHolders(vfio_bound));
        }
        units.extend(
            root_ports
                .into_iter()
                .map(|address| Unit::RootPort { address }),
        );
        units.extend(unnamed);
        let mut scrape = lock(&self.scrape);
        scrape.listed = of_interest;
        scrape.vfio_bound = vfio_dirs;
        units
    }
}

impl Listing {
    /// A device the listing read: a unit when of interest, a vfio holder's device when on
    /// vfio-pci.
    fn add(&mut self, address: &str, dir: Arc<SysDir>, read: ListedRead) {
        let iommu_group = read.on_vfio.then(|| dir.link_target_name("iommu_group"));
        if read.on_vfio {
            self.vfio_bound.push(address.to_string());
            let group = iommu_group.as_ref().and_then(|group| group.as_ref().ok());
            self.vfio_dirs
                .insert(address.to_string(), (dir.clone(), group.cloned()));
        }
        if read.interesting {
            self.units.push(Unit::Device {
                address: address.to_string(),
                nova_selected: read.by_nova,
            });
            if let Some(root_port) = read
                .root_port
                .filter(|port| !self.root_ports.contains(port))
            {
                self.root_ports.push(root_port);
            }
            let device = ListedDevice {
                dir,
                driver: read.driver,
                identity: read.identity,
                iommu_group,
            };
            self.of_interest.insert(address.to_string(), device);
        }
    }
}
