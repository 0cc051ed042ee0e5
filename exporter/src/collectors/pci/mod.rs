//! PCI collector: the host side of GPU passthrough and of fabric adapters, from
//! `/sys/bus/pci/devices`. Per device of interest (display, 3D, accelerator, InfiniBand and
//! fabric classes, Xeon Phi coprocessors, RDMA NIC vendors, devices named by flags or by a
//! Nova device_spec, anything bound to vfio-pci): identity, driver, BARs, IRQ, MSI/MSI-X,
//! link, power state and SR-IOV, a passthrough readiness verdict with one gauge per check,
//! its PCIe AER counters, and, for a device without a driver, the modules that would claim it.
//! The root ports above those devices are units of their own, for their AER counters (errors a
//! device's link partner saw). One unit reads the host's IOMMU state, another checks Nova's
//! `[pci]` options against the devices present.
//!
//! An idle GPU on vfio-pci shows memory decode off, IRQ 255 and D3hot: that is vfio-pci
//! waiting for a VM, not a fault. The same signs under a host driver are faults.

mod aer;
pub(crate) mod config_space;
mod descs;
mod device;
pub(crate) mod driver_modules;
mod host;
pub(crate) mod identity;
mod listing;
pub(crate) mod nova;
mod nova_check;
mod unbound;
mod vfio_holders;

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::collector::{
    CollectError, Collector, Host, Output, Registration, Root, Settings, StartError, Started,
};
use crate::flags::{repeated, ConfigError, Flags};
use crate::logging::{self, Level, OncePerCause};
use crate::metrics::{Desc, Label, LabelCache, Room, Value};
use crate::privileges;
use crate::sync::lock;
use crate::sysfs::{
    AttributeReader, DirStamp, Entry, FileStamp, HeldAttributes, HeldByUnit, LinkedDirs, SysDir,
    SysfsError, UnitRead,
};

use crate::sysfs::Stamped;
use crate::vfio_holder_events::HolderEvents;
pub use descs::METRICS;
use descs::*;
use driver_modules::ModprobeRules;
use identity::{Address, Identity};
use nova_check::{NovaFiles, NovaRead};
use vfio_holders::Unproven;

pub const REGISTRATION: Registration = Registration {
    name: "pci",
    enabled_by_default: true,
    help: "GPU, accelerator and fabric PCI devices: passthrough readiness, IOMMU state, unbound devices, Nova [pci] config check",
    metrics: &METRICS,
    roots: &[Root::Sysfs, Root::Procfs, Root::Rootfs],
    flags: || {
        vec![
            repeated(DEVICE, "VENDOR:DEVICE", "A PCI device of interest beyond the GPU, accelerator and fabric classes, by ids (10de:1eb8). Repeatable."),
            repeated(PASSTHROUGH_DEVICE, "ADDRESS|VENDOR:DEVICE", "A PCI device meant for passthrough, by address (0000:3b:00.0) or ids; its readiness is reported even when not bound to vfio-pci. Repeatable."),
            repeated(NOVA_CONFIG, "PATH", "An OpenStack Nova config file whose [pci] device_spec and alias are checked against the devices present, aliases also against the other files given (repeat for Kolla's split files: compute, API)."),
            repeated(NOVA_SCHEDULER_CONFIG, "PATH", "A config file nova-scheduler reads, in the order it reads them (Kolla: nova.conf, then nova/nova-scheduler.conf): its [filter_scheduler] enabled_filters must include PciPassthroughFilter. Checked like --collector.pci.nova-config too. Repeatable."),
        ]
    },
    configure: |flags| Ok(Box::new(PciSettings::from_flags(flags)?)),
    probe: None,
};

/// What a config space cut to its first 64 bytes costs.
const CONFIG_COSTS: &str = "MSI, MSI-X, link and SR-IOV details from config space (hpcnode_pci_config_space_readable shows 64)";

const DEVICE: &str = "collector.pci.device";
const PASSTHROUGH_DEVICE: &str = "collector.pci.passthrough-device";
const NOVA_CONFIG: &str = "collector.pci.nova-config";
const NOVA_SCHEDULER_CONFIG: &str = "collector.pci.nova-scheduler-config";

#[derive(Debug)]
struct PciSettings {
    /// Extra devices of interest, by ids.
    devices: Vec<DeviceSelector>,
    /// Devices meant for passthrough.
    passthrough: Vec<DeviceSelector>,
    /// Nova configs whose `[pci]` options are checked; read at scrape time.
    nova_configs: Vec<PathBuf>,
    /// The files nova-scheduler reads, in order.
    nova_scheduler_configs: Vec<PathBuf>,
}

impl PciSettings {
    fn from_flags(flags: &Flags) -> Result<PciSettings, ConfigError> {
        let devices = flags
            .values(DEVICE)
            .into_iter()
            .map(|value| match DeviceSelector::parse(&value) {
                Some(selector @ DeviceSelector::Ids { .. }) => Ok(selector),
                _ => Err(flags.invalid(
                    DEVICE,
                    &value,
                    "expected vendor:device in hexadecimal (10de:1eb8)",
                )),
            })
            .collect::<Result<_, _>>()?;
        let passthrough = flags
            .values(PASSTHROUGH_DEVICE)
            .into_iter()
            .map(|value| {
                DeviceSelector::parse(&value).ok_or_else(|| {
                    flags.invalid(
                        PASSTHROUGH_DEVICE,
                        &value,
                        "expected vendor:device in hexadecimal (10de:1eb8) or a PCI address (0000:3b:00.0)",
                    )
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(PciSettings {
            devices,
            passthrough,
            nova_configs: flags.paths(NOVA_CONFIG)?,
            nova_scheduler_configs: flags.paths(NOVA_SCHEDULER_CONFIG)?,
        })
    }
}

impl Settings for PciSettings {
    fn start(self: Box<Self>, host: &Host) -> Result<Started, StartError> {
        if let Some((missing, remedy)) = privileges::pci_config_missing() {
            privileges::report_withheld(REGISTRATION.name, missing, remedy, CONFIG_COSTS);
        }
        Ok(Started::new(PciCollector {
            sysfs: host.sysfs.clone(),
            procfs: host.procfs.clone(),
            rootfs: host.rootfs.clone(),
            devices: self.devices,
            passthrough: self.passthrough,
            nova: NovaFiles::new(
                self.nova_configs
                    .into_iter()
                    .chain(self.nova_scheduler_configs.iter().cloned()),
            ),
            nova_scheduler_configs: self.nova_scheduler_configs,
            logged_unreadable: AtomicBool::new(false),
            logged_scan_stopped: AtomicBool::new(false),
            max_descriptors: vfio_holders::MAX_DESCRIPTORS,
            kept_scan: Mutex::default(),
            vfio_holder_events: host.vfio_holder_events.clone(),
            events: Mutex::default(),
            logged_events_unusable: AtomicBool::new(false),
            logged_unproven: Unproven::log_filter(),
            aliases: Stamped::default(),
            modprobe_rules: Stamped::default(),
            held: HeldByUnit::default(),
            device_dirs: LinkedDirs::default(),
            scrape: Mutex::default(),
        }))
    }
}

/// A device named on the command line: by address, or by `vendor:device` ids.
#[derive(Debug, Clone, PartialEq, Eq)]
enum DeviceSelector {
    Address(String),
    Ids { vendor: u16, device: u16 },
}

impl DeviceSelector {
    /// `10de:1eb8` or `0000:3b:00.0`; `None` for anything else.
    fn parse(text: &str) -> Option<DeviceSelector> {
        if let Some(address) = Address::parse(text) {
            return Some(DeviceSelector::Address(address.to_string()));
        }
        let (vendor, device) = text.split_once(':')?;
        let id = |s: &str| (s.len() == 4).then(|| u16::from_str_radix(s, 16).ok())?;
        Some(DeviceSelector::Ids {
            vendor: id(vendor)?,
            device: id(device)?,
        })
    }

    fn matches(&self, address: &str, vendor: u16, device: u16) -> bool {
        match self {
            DeviceSelector::Address(wanted) => wanted == address,
            DeviceSelector::Ids {
                vendor: v,
                device: d,
            } => *v == vendor && *d == device,
        }
    }
}

struct PciCollector {
    sysfs: PathBuf,
    procfs: PathBuf,
    rootfs: PathBuf,
    devices: Vec<DeviceSelector>,
    passthrough: Vec<DeviceSelector>,
    /// Every Nova config file given (configs and scheduler configs), with what was parsed.
    nova: NovaFiles,
    nova_scheduler_configs: Vec<PathBuf>,
    /// Whether the vfio holder scan has logged that some processes were unreadable.
    logged_unreadable: AtomicBool,
    /// Whether a holder scan stopped at its budget was logged.
    logged_scan_stopped: AtomicBool,
    /// Descriptors a holder scan reads at most.
    max_descriptors: usize,
    /// The last full holder scan, kept while no vfio file opened or closed since.
    kept_scan: Mutex<Option<vfio_holders::KeptScan>>,
    /// The vfio_holders eBPF probe's set of processes, while it is attached.
    vfio_holder_events: Arc<HolderEvents>,
    /// What the processes in the probe's set held when last read.
    events: Mutex<Option<vfio_holders::EventsState>>,
    /// Whether the holder scan has logged that the probe's set cannot be used.
    logged_events_unusable: AtomicBool,
    /// The reasons the vfio holder scan has logged for descriptors it did not count.
    logged_unproven: OncePerCause<Unproven>,
    /// `modules.alias` by kernel release, kept while its stamp stays the same.
    aliases: Stamped<(String, FileStamp), String>,
    /// The modprobe.d rules, kept while the stamps of their directories and files stay the same.
    modprobe_rules: Stamped<Vec<FileStamp>, ModprobeRules>,
    /// Per PCI device (the identity attributes the listing reads, and those its unit's read
    /// reads), per root port and for the host unit ([`HOST_UNIT`]): the attributes read,
    /// held open between scrapes, and what the unit keeps.
    held: HeldByUnit<UnitState>,
    /// The devices' directories, kept between scrapes on sysfs.
    device_dirs: LinkedDirs,
    /// What the last listing opened, and what its units' reads share.
    scrape: Mutex<ScrapeState>,
}

/// What the units of one scrape share, reset by its listing.
#[derive(Default)]
struct ScrapeState {
    /// The sysfs root: the units' reads open their directories from it rather than open the
    /// root again for each.
    sysfs: Option<Arc<SysDir>>,
    /// The host's IOMMU hardware units and whether one is active, as the first device read
    /// that needed them read them without an error.
    iommu: Option<(usize, bool)>,
    /// What the listing opened and read of each device of interest, by address, for its
    /// unit's read to take rather than open and read again.
    listed: HashMap<String, ListedDevice>,
    /// The members of each IOMMU group listed in this scrape, by group number: the host unit
    /// counts every group's, a device meant for passthrough checks its own group's, and one
    /// listing serves both (two units that ask at the same moment may both list it).
    group_members: HashMap<String, Arc<[String]>>,
    /// The directories of the devices bound to vfio-pci as the listing opened them, and
    /// their IOMMU groups as it read them, for the vfio holders unit to take.
    vfio_bound: HashMap<String, (Arc<SysDir>, Option<String>)>,
    /// The Nova config files as the listing read them, for the nova unit to take.
    nova: Option<NovaRead>,
}

/// The key in [`PciCollector::held`] of the host unit, which no PCI address can be.
const HOST_UNIT: &str = "host";

/// What a unit keeps from one read to the next besides its held attributes.
#[derive(Default)]
struct UnitState {
    /// What it pushed: room to reserve for its next read.
    pushed: Room,
    /// Its label values, which repeat scrape after scrape (ids, driver, IOMMU group).
    labels: LabelCache,
    /// A device's root port, as found while its directory had this stamp.
    root_port: Option<(DirStamp, Option<String>)>,
}

/// A device of interest as the listing found it.
struct ListedDevice {
    dir: Arc<SysDir>,
    /// The target name of its `driver` link.
    driver: Result<String, SysfsError>,
    identity: Identity,
    /// The target name of its `iommu_group` link, read by the listing on vfio-pci: its unit
    /// and the vfio holders unit both need it.
    iommu_group: Option<Result<String, SysfsError>>,
}

impl PciCollector {
    /// `relative` under `--path.sysfs`, from the root the listing opened.
    fn sysfs_dir(&self, relative: &str) -> Result<SysDir, SysfsError> {
        let root = lock(&self.scrape).sysfs.clone();
        match root {
            Some(root) => root.link_dir(relative),
            None => SysDir::open(&self.sysfs, relative),
        }
    }

    /// A device's directory: as this scrape's listing opened it when `listed` has it, else
    /// opened now by its address.
    fn device_dir(
        &self,
        address: &str,
        listed: Option<Arc<SysDir>>,
    ) -> Result<Arc<SysDir>, SysfsError> {
        match listed {
            Some(dir) => Ok(dir),
            None => self
                .sysfs_dir(&format!("{DEVICES_DIR}/{address}"))
                .map(Arc::new),
        }
    }

    /// Says once, in the log, why the holder probe's set is not used (every process is scanned).
    fn log_events_unusable(&self, reason: &str) {
        if !self.logged_events_unusable.swap(true, Ordering::Relaxed) {
            logging::log(
                Level::Warn,
                "vfio holders: the vfio_holders probe's set of processes cannot be used; every process's open files are scanned",
                &[("reason", reason)],
            );
        }
    }

    /// Says once, in the log, that holders may be missing and what would show them.
    fn log_scan_stopped(&self, descriptors: usize) {
        if !self.logged_scan_stopped.swap(true, Ordering::Relaxed) {
            logging::log(
                Level::Warn,
                "vfio holders: the scan of processes' open files stopped at its budget; holders past it are not reported",
                &[("descriptors", &descriptors.to_string())],
            );
        }
    }

    fn log_unreadable_processes(&self, count: u64) {
        if !self.logged_unreadable.swap(true, Ordering::Relaxed) {
            logging::log(
                Level::Warn,
                "vfio holders: some processes' open files are unreadable; their holds are not reported (needs CAP_SYS_PTRACE or root)",
                &[("processes", &count.to_string())],
            );
        }
    }

    /// Says once per reason, in the log, that a descriptor named like a vfio node was not
    /// counted as a hold: the first process's pid and why, never what its link reads.
    fn log_unproven_hold(&self, reason: Unproven, pid: u32) {
        if self.logged_unproven.is_new(reason) {
            logging::log(
                Level::Warn,
                "vfio holders: a descriptor named like a vfio device node is not the device; not counted as a hold",
                &[("reason", reason.reason()), ("pid", &pid.to_string())],
            );
        }
    }
}

/// Class codes (base class and subclass) of the devices this collector is for.
const CLASSES_OF_INTEREST: [u32; 7] = [
    0x0300, // VGA
    0x0302, // 3D controller
    0x0380, // other display controller
    0x1200, // processing accelerator
    0x0207, // InfiniBand
    0x0208, // fabric controller (Omni-Path)
    0x0b40, // coprocessor (Xeon Phi)
];
/// Vendors whose network functions are RDMA capable: Mellanox/NVIDIA, Chelsio (iWARP),
/// QLogic/Cornelis (TrueScale, Omni-Path).
const RDMA_VENDORS: [u16; 3] = [0x15b3, 0x1425, 0x1fc1];
const VFIO_DRIVER: &str = "vfio-pci";
/// Every PCI device, under `--path.sysfs`.
const DEVICES_DIR: &str = "bus/pci/devices";

/// What one read covers: the host's IOMMU state, Nova's options, or one device.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Unit {
    Host,
    Nova,
    Device {
        address: String,
        /// Selected by a Nova device_spec: the listing says so, so that device reads need not
        /// parse the Nova config again.
        nova_selected: bool,
    },
    /// A root port above a device of interest (and not one itself): its AER counters.
    RootPort {
        address: String,
    },
    /// The processes holding vfio devices: those bound to vfio-pci (listed), and any other.
    VfioHolders(Vec<String>),
    /// An entry of `bus/pci/devices` whose name is not UTF-8: reported, never read.
    Unnamed(Entry),
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unit::Host => f.write_str("host"),
            Unit::Nova => f.write_str("nova"),
            Unit::VfioHolders(_) => f.write_str("vfio_holders"),
            Unit::Device { address, .. } | Unit::RootPort { address } => f.write_str(address),
            Unit::Unnamed(entry) => entry.fmt(f),
        }
    }
}

impl Collector for PciCollector {
    type Unit = Unit;

    fn units(&self) -> Result<Vec<Unit>, CollectError> {
        self.list_units()
    }

    fn collect_unit(&self, unit: &Unit, out: &mut Output) {
        let read_unit = |held: &mut HeldAttributes, labels: &mut LabelCache, out: &mut Output| {
            let mut reader = AttributeReader::default();
            let mut read = Read {
                collector: self,
                unit: UnitRead::new(held, &mut reader, out),
                labels,
            };
            match unit {
                Unit::Host => read.host(),
                Unit::Nova => read.nova(),
                Unit::Device {
                    address,
                    nova_selected,
                } => read.device(address, *nova_selected),
                Unit::RootPort { address } => read.root_port(address),
                Unit::VfioHolders(devices) => read.vfio_holders(devices),
                Unit::Unnamed(entry) => {
                    if let Err(err) = entry.name() {
                        read.error(err);
                    }
                }
            }
        };
        let held_as = match unit {
            Unit::Device { address, .. } | Unit::RootPort { address } => Some(address.as_str()),
            Unit::Host => Some(HOST_UNIT),
            // They read nothing through held descriptors.
            _ => None,
        };
        match held_as {
            Some(key) => self.held.read(key, |held, state| {
                // About as many as its last read: pushed without growing a list.
                out.samples.reserve(state.pushed);
                read_unit(held, &mut state.labels, out);
                state.pushed = out.samples.pushed();
            }),
            None => read_unit(
                &mut HeldAttributes::default(),
                &mut LabelCache::default(),
                out,
            ),
        }
    }
}

/// One unit's read: its sysfs read (attributes held open between scrapes, where samples and
/// errors go) and its label values.
struct Read<'a> {
    collector: &'a PciCollector,
    unit: UnitRead<'a, Output>,
    /// The unit's label values, kept between scrapes.
    labels: &'a mut LabelCache,
}

impl Read<'_> {
    fn push(&mut self, desc: &Desc, labels: impl IntoIterator<Item = Label>, value: Value) {
        self.unit.out().samples.push(desc, labels, value);
    }

    fn error(&mut self, err: SysfsError) {
        self.unit.out().errors.push(err.into());
    }

    fn flag(&mut self, desc: &Desc, labels: impl IntoIterator<Item = Label>, on: bool) {
        self.push(desc, labels, Value::Int(u64::from(on)));
    }
}

/// A device's labels and one more, for a sample pushed without a label list of its own (a
/// scrape of 256 devices pushes thousands).
fn with_label(labels: &[Label], label: Label) -> impl Iterator<Item = Label> + '_ {
    labels.iter().cloned().chain([label])
}

/// A collector of the tree at `root` (sysfs, procfs and rootfs alike) with no flags set.
#[cfg(test)]
fn collector_at(root: &std::path::Path) -> PciCollector {
    PciCollector {
        sysfs: root.to_path_buf(),
        procfs: root.join("proc"),
        rootfs: root.to_path_buf(),
        devices: Vec::new(),
        passthrough: Vec::new(),
        nova: Default::default(),
        nova_scheduler_configs: Vec::new(),
        logged_unreadable: Default::default(),
        logged_scan_stopped: Default::default(),
        max_descriptors: vfio_holders::MAX_DESCRIPTORS,
        kept_scan: Mutex::default(),
        vfio_holder_events: Default::default(),
        events: Mutex::default(),
        logged_events_unusable: Default::default(),
        logged_unproven: Unproven::log_filter(),
        aliases: Default::default(),
        modprobe_rules: Default::default(),
        held: Default::default(),
        device_dirs: Default::default(),
        scrape: Default::default(),
    }
}

/// What `read` gets in one unit's read through `held`, and how many errors it reports.
#[cfg(test)]
fn unit_read<R>(
    collector: &PciCollector,
    held: &mut HeldAttributes,
    read: impl FnOnce(&mut Read) -> R,
) -> (R, usize) {
    let mut out = Output::default();
    let got = read(&mut Read {
        collector,
        unit: UnitRead::new(held, &mut AttributeReader::default(), &mut out),
        labels: &mut LabelCache::default(),
    });
    (got, out.errors.len())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn settings(args: &[&str]) -> Result<PciSettings, ConfigError> {
        PciSettings::from_flags(&Flags::parse((REGISTRATION.flags)(), args)?)
    }

    #[test]
    fn device_flags_take_ids_or_addresses() {
        let parsed = settings(&[
            "--collector.pci.device=10de:1eb8",
            "--collector.pci.passthrough-device=0000:3b:00.0",
            "--collector.pci.passthrough-device=15b3:101b",
        ])
        .unwrap();
        assert_eq!(
            parsed.devices,
            [DeviceSelector::Ids {
                vendor: 0x10de,
                device: 0x1eb8
            }]
        );
        assert_eq!(parsed.passthrough.len(), 2);
        for bad in [
            "--collector.pci.device=0000:3b:00.0",
            "--collector.pci.passthrough-device=nvidia",
            "--collector.pci.nova-config=",
        ] {
            let err = settings(&[bad]).unwrap_err().to_string();
            let flag = bad.split('=').next().unwrap();
            assert!(err.starts_with(&format!("invalid {flag}")), "{err}");
            assert!(!err.contains('\n'), "{err}");
        }
    }

    /// A root port, of no interest itself, is read by its unit in the held set the listing
    /// read its identity in: the unit goes on in the listing's round, so neither closes what
    /// the other holds, and its AER files stay open from one scrape to the next.
    #[test]
    fn a_root_port_keeps_what_its_listing_and_its_unit_hold() {
        let sys = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/pci_host/sys");
        let collector = collector_at(&sys);
        for _ in 0..2 {
            let units = collector.units().unwrap();
            assert!(units.iter().any(
                |unit| matches!(unit, Unit::RootPort { address } if address == "0000:3a:00.0")
            ));
            for unit in &units {
                collector.collect_unit(unit, &mut Output::default());
            }
        }
        let held = collector
            .held
            .read_opening("0000:3a:00.0", |held, _| (held.len(), false));
        // vendor, device and class (the listing's), and six AER files (the unit's).
        assert_eq!(held, 3 + 6);
    }

    #[test]
    fn selectors() {
        assert_eq!(
            DeviceSelector::parse("10de:1eb8"),
            Some(DeviceSelector::Ids {
                vendor: 0x10de,
                device: 0x1eb8
            })
        );
        assert_eq!(
            DeviceSelector::parse("0000:3B:00.0"),
            Some(DeviceSelector::Address("0000:3b:00.0".into()))
        );
        for bad in ["10de", "10de:1eb8:1", "xyz:1eb8", "10de1:1eb8", ""] {
            assert_eq!(DeviceSelector::parse(bad), None, "{bad}");
        }
    }
}
