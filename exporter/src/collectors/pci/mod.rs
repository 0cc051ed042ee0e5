//! PCI collector: the host side of GPU passthrough and of fabric adapters, from
//! `/sys/bus/pci/devices`. Per device of interest (display, 3D, accelerator, InfiniBand and
//! fabric classes, Xeon Phi coprocessors, RDMA NIC vendors, devices named by flags or by a
//! Nova device_spec, anything bound to vfio-pci): identity, driver, BARs, IRQ, MSI/MSI-X,
//! link, power state and SR-IOV, a passthrough readiness verdict with one gauge per check,
//! and, for a device without a driver, the modules that would claim it. One unit reads the
//! host's IOMMU state, another checks Nova's `[pci]` options against the devices present.
//!
//! An idle GPU on vfio-pci shows memory decode off, IRQ 255 and D3hot: that is vfio-pci
//! waiting for a VM, not a fault. The same signs under a host driver are faults.

mod config_space;
mod modules;
mod nova;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::collector::{
    CollectError, Collector, ErrorKind, Host, Output, Registration, Settings, StartError, Started,
};
use crate::flags::{repeated, ConfigError, Flags};
use crate::kernel::cmdline;
use crate::kernel::modprobe;
use crate::kernel::release::checked_release;
use crate::metrics::{Desc, LabelValue, Labels, Value};
use crate::sysfs::{AttributeReader, SysDir, SysfsError};

use config_space::{ConfigSpace, BAR_COUNT};
use nova::{Address, DeviceType, NovaConfig, PciIdentity};

pub const REGISTRATION: Registration = Registration {
    name: "pci",
    enabled_by_default: true,
    help: "GPU, accelerator and fabric PCI devices: passthrough readiness, IOMMU state, unbound devices, Nova [pci] config check",
    metrics: &METRICS,
    flags: || {
        vec![
            repeated(DEVICE, "VENDOR:DEVICE", "A PCI device of interest beyond the GPU, accelerator and fabric classes, by ids (10de:1eb8). Repeatable."),
            repeated(PASSTHROUGH_DEVICE, "ADDRESS|VENDOR:DEVICE", "A PCI device meant for passthrough, by address (0000:3b:00.0) or ids; its readiness is reported even when not bound to vfio-pci. Repeatable."),
            repeated(NOVA_CONFIG, "PATH", "An OpenStack Nova config file whose [pci] device_spec and alias are checked against the devices present (repeat for Kolla's split files)."),
        ]
    },
    configure: |flags| Ok(Box::new(PciSettings::from_flags(flags)?)),
    probe: None,
};

const DEVICE: &str = "collector.pci.device";
const PASSTHROUGH_DEVICE: &str = "collector.pci.passthrough-device";
const NOVA_CONFIG: &str = "collector.pci.nova-config";

#[derive(Debug)]
struct PciSettings {
    /// Extra devices of interest, by ids.
    devices: Vec<DeviceSelector>,
    /// Devices meant for passthrough.
    passthrough: Vec<DeviceSelector>,
    /// Nova configs whose `[pci]` options are checked; read at scrape time.
    nova_configs: Vec<PathBuf>,
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
        })
    }
}

impl Settings for PciSettings {
    fn start(self: Box<Self>, host: &Host) -> Result<Started, StartError> {
        Ok(Started::new(PciCollector {
            sysfs: host.sysfs.clone(),
            procfs: host.procfs.clone(),
            rootfs: host.rootfs.clone(),
            devices: self.devices,
            passthrough: self.passthrough,
            nova_configs: self.nova_configs,
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
            return Some(DeviceSelector::Address(format!(
                "{:04x}:{:02x}:{:02x}.{:x}",
                address.domain, address.bus, address.slot, address.function
            )));
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
    nova_configs: Vec<PathBuf>,
}

const DEVICE_INFO: Desc = Desc::gauge(
    "hpcnode_pci_device_info",
    "PCI device identity: ids, class, driver, IOMMU group, NUMA node, physical function and the type Nova reports.",
    None,
);
const DRIVER_BOUND: Desc = Desc::gauge(
    "hpcnode_pci_driver_bound",
    "1 when a driver is bound to the device, else 0.",
    None,
);
const MEMORY_DECODE: Desc = Desc::gauge(
    "hpcnode_pci_memory_decode_enabled",
    "Memory Space Enable of the command register (lspci shows [disabled] when 0).",
    None,
);
const BARS: Desc = Desc::gauge(
    "hpcnode_pci_bars",
    "Implemented BARs by state: assigned (an address in resource) or unassigned (all-zero start).",
    None,
);
const IRQ: Desc = Desc::gauge(
    "hpcnode_pci_irq",
    "The device's irq attribute: 0 or 255 mean no interrupt assigned yet.",
    None,
);
const INTERRUPT_CAPABILITY: Desc = Desc::gauge(
    "hpcnode_pci_interrupt_capability_enabled",
    "For each message interrupt capability the device has (msi, msix): 1 when enabled.",
    None,
);
const MSIX_TABLE_SIZE: Desc = Desc::gauge(
    "hpcnode_pci_msix_table_size",
    "Entries of the MSI-X table.",
    None,
);
const LINK_SPEED: Desc = Desc::gauge(
    "hpcnode_pci_link_speed",
    "PCIe link speed, current or maximum, in transfers per second.",
    Some("transfers_per_second"),
);
const LINK_WIDTH: Desc = Desc::gauge(
    "hpcnode_pci_link_width",
    "PCIe link width in lanes, current or maximum.",
    None,
);
const POWER_STATE: Desc = Desc::gauge(
    "hpcnode_pci_power_state_id",
    "Power state: 0 D0, 1 D1, 2 D2, 3 D3hot, 4 D3cold.",
    None,
);
const SRIOV_TOTAL_VFS: Desc = Desc::gauge(
    "hpcnode_pci_sriov_total_vfs",
    "Virtual functions the device supports (present only with an SR-IOV capability).",
    None,
);
const SRIOV_VFS: Desc = Desc::gauge(
    "hpcnode_pci_sriov_vfs",
    "Virtual functions currently enabled.",
    None,
);
const CONFIG_READABLE: Desc = Desc::gauge(
    "hpcnode_pci_config_space_readable",
    "Bytes of configuration space the exporter could read: 64 without root, so no MSI, MSI-X, link or SR-IOV from config space.",
    Some("bytes"),
);
const DEVICE_FAULT: Desc = Desc::gauge(
    "hpcnode_pci_device_fault",
    "1 when the fault is present: bars_unassigned; under a host driver also memory_decode_disabled, irq_unassigned (with no MSI/MSI-X enabled), low_power_state (D3).",
    None,
);
const PASSTHROUGH_READY: Desc = Desc::gauge(
    "hpcnode_pci_passthrough_ready",
    "For a device meant for passthrough (vfio-pci, Nova device_spec, --collector.pci.passthrough-device): 1 when every check passes.",
    None,
);
const PASSTHROUGH_CHECK: Desc = Desc::gauge(
    "hpcnode_pci_passthrough_check",
    "One passthrough check of a device meant for passthrough: present, iommu_enabled, vfio_bound, group_isolated, bars_assigned.",
    None,
);
const UNBOUND_ALIAS_MODULES: Desc = Desc::gauge(
    "hpcnode_pci_unbound_device_alias_modules",
    "For a device without a driver: how many modules' modules.alias entries match its modalias.",
    None,
);
const UNBOUND_ALIAS_MODULE: Desc = Desc::gauge(
    "hpcnode_pci_unbound_device_alias_module",
    "For a device without a driver: one series per module whose alias matches, with its modprobe.d install command and blacklisting.",
    None,
);
const IOMMU_ENABLED: Desc = Desc::gauge(
    "hpcnode_iommu_enabled",
    "1 when an IOMMU is active (/sys/class/iommu has an entry), else 0.",
    None,
);
const IOMMU_UNITS: Desc = Desc::gauge(
    "hpcnode_iommu_hardware_units",
    "Entries of /sys/class/iommu (dmar0, ivhd0, ...).",
    None,
);
const IOMMU_KERNEL_PARAMETER: Desc = Desc::gauge(
    "hpcnode_iommu_kernel_parameter_info",
    "IOMMU-related kernel command line parameters present (intel_iommu, amd_iommu, iommu, vfio-pci.ids) and their values.",
    None,
);
const IOMMU_GROUP_DEVICES: Desc = Desc::gauge(
    "hpcnode_iommu_group_devices",
    "Devices in each IOMMU group, with the group's domain type.",
    None,
);
const VFIO_MODULE_LOADED: Desc = Desc::gauge(
    "hpcnode_vfio_module_loaded",
    "1 when the vfio module is loaded (or built in with parameters), from /sys/module.",
    None,
);
const NOVA_CONFIG_VALID: Desc = Desc::gauge(
    "hpcnode_nova_config_valid",
    "1 when the Nova config file was read and Nova would accept every [pci] device_spec and alias in it.",
    None,
);
const NOVA_SPEC_DEVICES: Desc = Desc::gauge(
    "hpcnode_nova_device_spec_matching_devices",
    "Present PCI devices matched by each Nova device_spec.",
    None,
);
const NOVA_ALIAS_DEVICES: Desc = Desc::gauge(
    "hpcnode_nova_alias_matching_devices",
    "Devices Nova could allocate for each alias: matched by a device_spec, the alias's ids and its device_type.",
    None,
);
const NOVA_ALIAS_MISMATCH: Desc = Desc::gauge(
    "hpcnode_nova_alias_type_mismatch_devices",
    "Devices matched by a device_spec and an alias's ids whose Nova type is not the alias's device_type.",
    None,
);

/// Every metric this collector emits (for the METRICS.md check).
pub const METRICS: [Desc; 27] = [
    DEVICE_INFO,
    DRIVER_BOUND,
    MEMORY_DECODE,
    BARS,
    IRQ,
    INTERRUPT_CAPABILITY,
    MSIX_TABLE_SIZE,
    LINK_SPEED,
    LINK_WIDTH,
    POWER_STATE,
    SRIOV_TOTAL_VFS,
    SRIOV_VFS,
    CONFIG_READABLE,
    DEVICE_FAULT,
    PASSTHROUGH_READY,
    PASSTHROUGH_CHECK,
    UNBOUND_ALIAS_MODULES,
    UNBOUND_ALIAS_MODULE,
    IOMMU_ENABLED,
    IOMMU_UNITS,
    IOMMU_KERNEL_PARAMETER,
    IOMMU_GROUP_DEVICES,
    VFIO_MODULE_LOADED,
    NOVA_CONFIG_VALID,
    NOVA_SPEC_DEVICES,
    NOVA_ALIAS_DEVICES,
    NOVA_ALIAS_MISMATCH,
];

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
const PCI_BRIDGE_CLASS: u32 = 0x0604;
const VFIO_DRIVER: &str = "vfio-pci";
const PASSTHROUGH_DRIVERS: [&str; 2] = [VFIO_DRIVER, "pci-stub"];
const IRQ_UNASSIGNED: [u64; 2] = [0, 255];
const CONFIG_SPACE_BYTES: usize = 4096;
/// Real `modules.alias` files are 1 to 2 MiB; nova.conf with its comments about 200 KiB.
/// modules.alias is read once per unbound device, by up to four units at once.
const MODULES_ALIAS_LIMIT: usize = 16 << 20;
const CONFIG_FILE_LIMIT: usize = 4 << 20;
/// Candidate modules kept per unbound device; more go to one `other` series.
const MAX_ALIAS_MODULES: usize = 8;
const MAX_LABEL_CHARS: usize = 160;
/// Kernel parameters reported, each under this spelling (the command line may write `-` or
/// `_` in any of them).
const KERNEL_PARAMETERS: [&str; 4] = ["intel_iommu", "amd_iommu", "iommu", "vfio-pci.ids"];
const VFIO_MODULES: [&str; 3] = ["vfio", "vfio_iommu_type1", "vfio_pci"];
/// Other `vfio*` entries of /sys/module kept (vfio_pci_core, vfio_virqfd, ...).
const MAX_OTHER_VFIO_MODULES: usize = 16;

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
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unit::Host => f.write_str("host"),
            Unit::Nova => f.write_str("nova"),
            Unit::Device { address, .. } => f.write_str(address),
        }
    }
}

impl Collector for PciCollector {
    type Unit = Unit;

    fn units(&self) -> Result<Vec<Unit>, CollectError> {
        let listing = SysDir::open(&self.sysfs.join("bus/pci/devices"))
            .and_then(|dir| dir.entries().map(|addresses| (dir, addresses)));
        let (devices, addresses) = match listing {
            Ok(listing) => listing,
            // No PCI bus: nothing to report.
            Err(err) if err.is_not_found() => return Ok(Vec::new()),
            Err(err) => return Err(err.into()),
        };
        // Errors in these files are the nova unit's to report.
        let specs: Vec<nova::DeviceSpec> = self
            .nova_configs
            .iter()
            .flat_map(|path| read_nova_config(path).map(|c| c.specs).unwrap_or_default())
            .collect();
        let with_netdevs = specs.iter().any(nova::DeviceSpec::names_netdev);
        let mut reader = AttributeReader::default();
        let mut units = Vec::new();
        for address in &addresses {
            // A device that vanished or cannot be identified is not one of interest; a
            // device named by address that is absent is still listed (to report it absent).
            let Ok(dir) = devices.subdir(address) else {
                continue;
            };
            let Some(identity) = read_identity(&dir, address, &mut reader, with_netdevs) else {
                continue;
            };
            let by_nova = specs.iter().any(|spec| spec.matches(&identity.nova));
            let named = self
                .devices
                .iter()
                .chain(&self.passthrough)
                .any(|s| s.matches(address, identity.nova.vendor, identity.nova.device));
            let interesting = by_nova
                || named
                || CLASSES_OF_INTEREST.contains(&(identity.class >> 8))
                || RDMA_VENDORS.contains(&identity.nova.vendor)
                || dir
                    .link_target_name("driver")
                    .is_ok_and(|d| d == VFIO_DRIVER);
            if interesting {
                units.push(Unit::Device {
                    address: address.clone(),
                    nova_selected: by_nova,
                });
            }
        }
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
        if !self.nova_configs.is_empty() {
            units.insert(0, Unit::Nova);
        }
        if !units.is_empty() {
            units.insert(0, Unit::Host);
        }
        Ok(units)
    }

    fn collect_unit(&self, unit: &Unit, out: &mut Output) {
        let mut read = Read {
            collector: self,
            reader: AttributeReader::default(),
            out,
        };
        match unit {
            Unit::Host => read.host(),
            Unit::Nova => read.nova(),
            Unit::Device {
                address,
                nova_selected,
            } => read.device(address, *nova_selected),
        }
    }
}

/// What the listing reads of every device: enough to choose and to match Nova specs.
struct Identity {
    class: u32,
    nova: PciIdentity,
}

/// `0x10de` -> 0x10de.
fn hex_id(text: &str) -> Option<u16> {
    u16::from_str_radix(text.strip_prefix("0x")?, 16).ok()
}

/// `with_netdevs` lists the device's network interfaces too (for `devname` specs).
fn read_identity(
    dir: &SysDir,
    address: &str,
    reader: &mut AttributeReader,
    with_netdevs: bool,
) -> Option<Identity> {
    let mut hex = |name: &str| {
        let text = dir.read(name, reader).ok()?;
        u32::from_str_radix(text.trim_start_matches("0x"), 16).ok()
    };
    let (vendor, device, class) = (hex("vendor")?, hex("device")?, hex("class")?);
    Some(Identity {
        class,
        nova: PciIdentity {
            address: Address::parse(address)?,
            vendor: u16::try_from(vendor).ok()?,
            device: u16::try_from(device).ok()?,
            netdevs: match with_netdevs {
                true => dir
                    .subdir("net")
                    .and_then(|net| net.entries())
                    .unwrap_or_default(),
                false => Vec::new(),
            },
        },
    })
}

/// A config file named by a flag, read whole (it is not under a root: the flag names it).
fn read_file(path: &Path, limit: usize) -> Result<Vec<u8>, SysfsError> {
    // `nova.conf` has the parent "", which no directory opens: it means the working directory.
    let parent = match path.parent() {
        Some(parent) if parent.as_os_str().is_empty() => Path::new("."),
        Some(parent) => parent,
        None => Path::new("/"),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    SysDir::open(parent)?.read_file(&name, limit)
}

fn read_nova_config(path: &Path) -> Result<NovaConfig, SysfsError> {
    let bytes = read_file(path, CONFIG_FILE_LIMIT)?;
    Ok(nova::parse_config(&String::from_utf8_lossy(&bytes)))
}

/// The Nova device type of a present device: type-VF with a `physfn` link, type-PF with an
/// SR-IOV capability (`sriov_totalvfs`), else type-PCI.
fn nova_device_type(dir: &SysDir, reader: &mut AttributeReader) -> DeviceType {
    DeviceType::of(
        dir.link_target_name("physfn").is_ok(),
        dir.read("sriov_totalvfs", reader).is_ok(),
    )
}

/// One unit's read: where samples and errors go.
struct Read<'a> {
    collector: &'a PciCollector,
    reader: AttributeReader,
    out: &'a mut Output,
}

/// What the passthrough checks and the fault gauges need from a device's read.
struct DeviceState {
    /// Vendor and device ids.
    ids: Option<(u16, u16)>,
    driver: String,
    bars_implemented: usize,
    bars_assigned: usize,
    irq: Option<u64>,
    space: ConfigSpace,
    power_state: Option<u64>,
}

impl Read<'_> {
    fn push(&mut self, desc: &Desc, labels: Labels, value: Value) {
        self.out.samples.push(desc, labels, value);
    }

    fn error(&mut self, err: SysfsError) {
        self.out.errors.push(err.into());
    }

    fn flag(&mut self, desc: &Desc, labels: Labels, on: bool) {
        self.push(desc, labels, Value::Int(u64::from(on)));
    }

    /// An optional text attribute: `None` when missing; other failures are reported.
    fn optional(&mut self, dir: &SysDir, name: &str) -> Option<String> {
        match dir.read(name, &mut self.reader) {
            Ok(text) => Some(text.to_string()),
            Err(err) => {
                if !err.is_not_found() {
                    self.error(err);
                }
                None
            }
        }
    }

    fn optional_u64(&mut self, dir: &SysDir, name: &str) -> Option<u64> {
        let text = self.optional(dir, name)?;
        match text.parse() {
            Ok(value) => Some(value),
            Err(_) => {
                self.error(SysfsError::parse(
                    &dir.path(name),
                    "not an unsigned integer",
                    &text,
                ));
                None
            }
        }
    }

    fn link(&mut self, dir: &SysDir, name: &str) -> String {
        match dir.link_target_name(name) {
            Ok(target) => target,
            Err(err) => {
                if !err.is_not_found() {
                    self.error(err);
                }
                String::new()
            }
        }
    }

    fn iommu_units(&mut self) -> Vec<String> {
        match SysDir::open(&self.collector.sysfs.join("class/iommu")).and_then(|d| d.entries()) {
            Ok(units) => units,
            Err(err) => {
                if !err.is_not_found() {
                    self.error(err);
                }
                Vec::new()
            }
        }
    }

    fn device(&mut self, address: &str, by_nova: bool) {
        let collector = self.collector;
        let device: LabelValue = address.to_string().into();
        let labels = || vec![("device", device.clone())];
        let dir = match SysDir::open(&collector.sysfs.join("bus/pci/devices").join(address)) {
            Ok(dir) => dir,
            Err(err) if err.is_not_found() => {
                // Meant for passthrough but not on the bus (removed, or a wrong address); any
                // other device that vanished since the listing is simply gone.
                let named = collector
                    .passthrough
                    .contains(&DeviceSelector::Address(address.to_string()));
                if named || by_nova {
                    self.passthrough(&labels(), &[("present", false)]);
                }
                return;
            }
            Err(err) => return self.error(err),
        };
        let state = self.device_attributes(&dir, &labels());
        let named = state.ids.is_some_and(|(vendor, device)| {
            collector
                .passthrough
                .iter()
                .any(|s| s.matches(address, vendor, device))
        });
        if by_nova || named || state.driver == VFIO_DRIVER {
            let iommu_enabled = !self.iommu_units().is_empty();
            let isolated = self.group_isolated(&dir, address);
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
            self.passthrough(&labels(), &checks);
        }
        self.faults(&labels(), &state);
        if state.driver.is_empty() {
            self.alias_modules(&dir, &labels());
        }
    }

    fn passthrough(&mut self, labels: &Labels, checks: &[(&'static str, bool)]) {
        let ready = checks.iter().all(|(_, ok)| *ok);
        self.flag(&PASSTHROUGH_READY, labels.clone(), ready);
        for (check, ok) in checks {
            let mut labels = labels.clone();
            labels.push(("check", (*check).into()));
            self.flag(&PASSTHROUGH_CHECK, labels, *ok);
        }
    }

    /// Identity, driver, BARs, IRQ, config space, link, power and SR-IOV of one device.
    fn device_attributes(&mut self, dir: &SysDir, labels: &Labels) -> DeviceState {
        let text = |read: &mut Self, name: &str| read.optional(dir, name).unwrap_or_default();
        let driver = self.link(dir, "driver");
        let physical_function = self.link(dir, "physfn");
        let sysfs_total_vfs = self.optional_u64(dir, "sriov_totalvfs");
        let device_type = DeviceType::of(!physical_function.is_empty(), sysfs_total_vfs.is_some());
        let (vendor, device) = (text(self, "vendor"), text(self, "device"));
        let ids = hex_id(&vendor).zip(hex_id(&device));
        let mut info = labels.clone();
        info.extend([
            ("vendor_id", vendor.into()),
            ("device_id", device.into()),
            ("subsystem_vendor_id", text(self, "subsystem_vendor").into()),
            ("subsystem_device_id", text(self, "subsystem_device").into()),
            ("class", text(self, "class").into()),
            ("driver", driver.clone().into()),
            ("iommu_group", self.link(dir, "iommu_group").into()),
            ("numa_node", text(self, "numa_node").into()),
            ("physical_function", physical_function.into()),
            ("nova_device_type", device_type.as_str().into()),
        ]);
        self.push(&DEVICE_INFO, info, Value::Int(1));
        self.flag(&DRIVER_BOUND, labels.clone(), !driver.is_empty());

        let space = match dir.read_file("config", CONFIG_SPACE_BYTES) {
            Ok(bytes) => config_space::parse(&bytes),
            Err(err) => {
                if !err.is_not_found() {
                    self.error(err);
                }
                ConfigSpace::default()
            }
        };
        let (bars_implemented, bars_assigned) = match self.optional(dir, "resource") {
            Some(resource) => match parse_bars(&resource, &space.bars_in_header) {
                Some(bars) => bars,
                None => {
                    self.error(SysfsError::parse(
                        &dir.path("resource"),
                        "expected '0x<start> 0x<end> 0x<flags>' lines",
                        &resource,
                    ));
                    (0, 0)
                }
            },
            None => (0, 0),
        };
        for (state, count) in [
            ("assigned", bars_assigned),
            ("unassigned", bars_implemented - bars_assigned),
        ] {
            let mut labels = labels.clone();
            labels.push(("state", state.into()));
            self.push(&BARS, labels, Value::Int(count as u64));
        }
        let irq = self.optional_u64(dir, "irq");
        if let Some(irq) = irq {
            self.push(&IRQ, labels.clone(), Value::Int(irq));
        }

        if space.readable_bytes > 0 {
            self.push(
                &CONFIG_READABLE,
                labels.clone(),
                Value::Int(space.readable_bytes as u64),
            );
        }
        if let Some(decode) = space.memory_decode {
            self.flag(&MEMORY_DECODE, labels.clone(), decode);
        }
        for (capability, enabled) in [("msi", space.msi), ("msix", space.msix.map(|m| m.enabled))] {
            if let Some(enabled) = enabled {
                let mut labels = labels.clone();
                labels.push(("capability", capability.into()));
                self.flag(&INTERRUPT_CAPABILITY, labels, enabled);
            }
        }
        if let Some(msix) = space.msix {
            self.push(
                &MSIX_TABLE_SIZE,
                labels.clone(),
                Value::Int(msix.table_size.into()),
            );
        }
        self.link_state(dir, labels, &space);

        let power_state = match self.optional(dir, "power_state") {
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
            self.push(&POWER_STATE, labels.clone(), Value::Int(id));
        }

        let total_vfs = sysfs_total_vfs.or(space.sriov.map(|s| s.total_vfs.into()));
        if let Some(total) = total_vfs {
            self.push(&SRIOV_TOTAL_VFS, labels.clone(), Value::Int(total));
            let enabled = self
                .optional_u64(dir, "sriov_numvfs")
                .or(space.sriov.map(|s| s.num_vfs.into()));
            if let Some(enabled) = enabled {
                self.push(&SRIOV_VFS, labels.clone(), Value::Int(enabled));
            }
        }
        DeviceState {
            ids,
            driver,
            bars_implemented,
            bars_assigned,
            irq,
            space,
            power_state,
        }
    }

    /// Link speed and width from sysfs (`current_link_speed`, ...), else from the PCIe
    /// capability when config space could be read.
    fn link_state(&mut self, dir: &SysDir, labels: &Labels, space: &ConfigSpace) {
        for (which, from_config) in [
            ("current", space.link_current),
            ("maximum", space.link_maximum),
        ] {
            let prefix = if which == "current" { "current" } else { "max" };
            let speed_file = format!("{prefix}_link_speed");
            let width_file = format!("{prefix}_link_width");
            let speed = match self.optional(dir, &speed_file) {
                Some(text) => parse_link_speed(&text),
                None => from_config.and_then(|l| l.speed_gts),
            };
            // The kernel prints the width as a number (0 while the link is down).
            let width = match self.optional(dir, &width_file) {
                Some(text) => match text.parse::<u64>() {
                    Ok(width) => Some(width).filter(|w| *w > 0),
                    Err(_) => {
                        let path = dir.path(&width_file);
                        self.error(SysfsError::parse(&path, "not a link width", &text));
                        None
                    }
                },
                None => from_config.map(|l| u64::from(l.width)).filter(|w| *w > 0),
            };
            let mut labels = labels.clone();
            labels.push(("link", which.into()));
            if let Some(gts) = speed {
                self.push(&LINK_SPEED, labels.clone(), Value::Float(gts * 1e9));
            }
            if let Some(width) = width {
                self.push(&LINK_WIDTH, labels, Value::Int(width));
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
            let mut labels = labels.clone();
            labels.push(("fault", fault.into()));
            self.flag(&DEVICE_FAULT, labels, present);
        }
    }

    /// Every member of the device's IOMMU group other than the device itself is a PCI bridge
    /// or bound to vfio-pci or pci-stub. False without a group (no IOMMU).
    fn group_isolated(&mut self, dir: &SysDir, address: &str) -> bool {
        let group = self.link(dir, "iommu_group");
        if group.is_empty() {
            return false;
        }
        // It becomes a path component under kernel/iommu_groups: a number, never `..`.
        if !group.bytes().all(|b| b.is_ascii_digit()) {
            let path = dir.path("iommu_group");
            self.error(SysfsError::parse(
                &path,
                "not an IOMMU group number",
                &group,
            ));
            return false;
        }
        let members_dir = self
            .collector
            .sysfs
            .join("kernel/iommu_groups")
            .join(&group)
            .join("devices");
        let members = match SysDir::open(&members_dir).and_then(|d| d.entries().map(|e| (d, e))) {
            Ok(members) => members,
            Err(err) => {
                self.error(err);
                return false;
            }
        };
        let (members_dir, names) = members;
        names
            .iter()
            .filter(|member| member.as_str() != address)
            .all(|member| {
                let Ok(member_dir) = members_dir.subdir(member) else {
                    return false;
                };
                let class = member_dir
                    .read("class", &mut self.reader)
                    .ok()
                    .and_then(|c| u32::from_str_radix(c.trim_start_matches("0x"), 16).ok());
                let driver = member_dir.link_target_name("driver").unwrap_or_default();
                class.is_some_and(|c| c >> 8 == PCI_BRIDGE_CLASS)
                    || PASSTHROUGH_DRIVERS.contains(&driver.as_str())
            })
    }

    /// For a device without a driver: the modules whose aliases match its modalias, and the
    /// modprobe.d rules on them.
    fn alias_modules(&mut self, dir: &SysDir, labels: &Labels) {
        let Some(modalias) = self.optional(dir, "modalias") else {
            return;
        };
        let Some(aliases) = self.modules_alias() else {
            return;
        };
        let modules = modules::matching_modules(&aliases, &modalias);
        self.push(
            &UNBOUND_ALIAS_MODULES,
            labels.clone(),
            Value::Int(modules.len() as u64),
        );
        let rules = self.modprobe_rules();
        let mut series: BTreeMap<(String, String, bool), u64> = BTreeMap::new();
        for (index, module) in modules.iter().enumerate() {
            let key = modprobe::module_key(module);
            let entry = if index < MAX_ALIAS_MODULES {
                let install = rules
                    .install
                    .get(&key)
                    .map(|c| c.chars().take(MAX_LABEL_CHARS).collect())
                    .unwrap_or_default();
                (module.to_string(), install, rules.blacklist.contains(&key))
            } else {
                ("other".to_string(), String::new(), false)
            };
            *series.entry(entry).or_default() += 1;
        }
        for ((module, install, blacklisted), count) in series {
            let mut labels = labels.clone();
            labels.extend([
                ("module", module.into()),
                ("install", install.into()),
                ("blacklisted", if blacklisted { "1" } else { "0" }.into()),
            ]);
            self.push(&UNBOUND_ALIAS_MODULE, labels, Value::Int(count));
        }
    }

    /// `<rootfs>/lib/modules/<release>/modules.alias`, release from procfs.
    fn modules_alias(&mut self) -> Option<String> {
        let collector = self.collector;
        let kernel = SysDir::open(&collector.procfs.join("sys/kernel"))
            .map_err(|err| self.error(err))
            .ok()?;
        let release = self.optional(&kernel, "osrelease")?;
        let release = checked_release(&kernel.path("osrelease"), &release)
            .map_err(|err| self.error(err))
            .ok()?;
        let dir = collector.rootfs.join("lib/modules").join(&release);
        match SysDir::open(&dir).and_then(|d| d.read_file("modules.alias", MODULES_ALIAS_LIMIT)) {
            // Valid UTF-8 (as depmod writes it) is kept without a copy.
            Ok(bytes) => Some(String::from_utf8(bytes).unwrap_or_else(|invalid| {
                String::from_utf8_lossy(invalid.as_bytes()).into_owned()
            })),
            Err(err) => {
                self.error(err);
                None
            }
        }
    }

    /// The rules of the effective modprobe.d files (kmod's precedence and masking).
    fn modprobe_rules(&mut self) -> modules::ModprobeRules {
        let mut errors = Vec::new();
        let files = modprobe::read_config(&self.collector.rootfs, &mut errors);
        for err in errors {
            self.error(err);
        }
        modules::ModprobeRules::from_config(files)
    }

    /// The host's IOMMU state: hardware units, command line, groups, vfio modules.
    fn host(&mut self) {
        let collector = self.collector;
        let units = self.iommu_units();
        self.flag(&IOMMU_ENABLED, Vec::new(), !units.is_empty());
        self.push(&IOMMU_UNITS, Vec::new(), Value::Int(units.len() as u64));

        if let Ok(proc_dir) = SysDir::open(&collector.procfs).map_err(|e| self.error(e)) {
            if let Some(cmdline) = self.optional(&proc_dir, "cmdline") {
                for (parameter, value) in iommu_parameters(&cmdline) {
                    self.push(
                        &IOMMU_KERNEL_PARAMETER,
                        vec![("parameter", parameter.into()), ("value", value.into())],
                        Value::Int(1),
                    );
                }
            }
        }

        let groups_path = collector.sysfs.join("kernel/iommu_groups");
        match SysDir::open(&groups_path).and_then(|d| d.entries().map(|e| (d, e))) {
            Ok((groups, names)) => {
                for group in names {
                    let Ok(group_dir) = groups.subdir(&group).map_err(|e| self.error(e)) else {
                        continue;
                    };
                    let kind = self.optional(&group_dir, "type").unwrap_or_default();
                    match group_dir.subdir("devices").and_then(|d| d.entries()) {
                        Ok(members) => self.push(
                            &IOMMU_GROUP_DEVICES,
                            vec![("group", group.into()), ("type", kind.into())],
                            Value::Int(members.len() as u64),
                        ),
                        Err(err) => self.error(err),
                    }
                }
            }
            Err(err) if err.is_not_found() => {}
            Err(err) => self.error(err),
        }

        let loaded = match SysDir::open(&collector.sysfs.join("module")).and_then(|d| d.entries()) {
            Ok(modules) => modules,
            Err(err) => {
                if !err.is_not_found() {
                    self.error(err);
                }
                Vec::new()
            }
        };
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

    /// Nova's `[pci]` options against the devices present.
    fn nova(&mut self) {
        let collector = self.collector;
        let mut configs = Vec::new();
        for path in &collector.nova_configs {
            let label: LabelValue = path.display().to_string().into();
            match read_nova_config(path) {
                Ok(config) => {
                    for reason in &config.errors {
                        self.out.errors.push(CollectError::new(
                            ErrorKind::Parse,
                            format!("nova config {}: {reason}", path.display()),
                        ));
                    }
                    self.flag(
                        &NOVA_CONFIG_VALID,
                        vec![("path", label.clone())],
                        config.errors.is_empty(),
                    );
                    configs.push((label, config));
                }
                Err(err) => {
                    self.error(err);
                    self.flag(&NOVA_CONFIG_VALID, vec![("path", label)], false);
                }
            }
        }
        // Every present device with its Nova identity and type.
        let devices_dir = collector.sysfs.join("bus/pci/devices");
        let Ok(devices) = SysDir::open(&devices_dir).map_err(|e| self.error(e)) else {
            return;
        };
        let mut present = Vec::new();
        let addresses = match devices.entries() {
            Ok(addresses) => addresses,
            Err(err) => return self.error(err),
        };
        for address in addresses {
            let Ok(dir) = devices.subdir(&address) else {
                continue;
            };
            if let Some(identity) = read_identity(&dir, &address, &mut self.reader, true) {
                let device_type = nova_device_type(&dir, &mut self.reader);
                present.push((identity.nova, device_type));
            }
        }
        let specs: Vec<&nova::DeviceSpec> = configs.iter().flat_map(|(_, c)| &c.specs).collect();
        for (path, config) in &configs {
            for spec in &config.specs {
                let count = present.iter().filter(|(d, _)| spec.matches(d)).count();
                self.push(
                    &NOVA_SPEC_DEVICES,
                    vec![
                        ("path", path.clone()),
                        ("option", spec.option.into()),
                        ("spec", spec.text.clone().into()),
                    ],
                    Value::Int(count as u64),
                );
            }
        }
        // Only devices a device_spec allows are in Nova's pool.
        let pool: Vec<&(PciIdentity, DeviceType)> = present
            .iter()
            .filter(|(d, _)| specs.iter().any(|s| s.matches(d)))
            .collect();
        for (path, config) in &configs {
            for alias in &config.aliases {
                let named: Vec<DeviceType> = pool
                    .iter()
                    .filter(|(d, _)| alias.names(d))
                    .map(|(_, t)| *t)
                    .collect();
                let labels = vec![
                    ("path", path.clone()),
                    ("alias", alias.name.clone().into()),
                    ("alias_device_type", alias.device_type.as_str().into()),
                ];
                let matching = named.iter().filter(|t| **t == alias.device_type).count();
                self.push(
                    &NOVA_ALIAS_DEVICES,
                    labels.clone(),
                    Value::Int(matching as u64),
                );
                let mut by_type: BTreeMap<&'static str, u64> = BTreeMap::new();
                for device_type in named.iter().filter(|t| **t != alias.device_type) {
                    *by_type.entry(device_type.as_str()).or_default() += 1;
                }
                for (device_type, count) in by_type {
                    let mut labels = labels.clone();
                    labels.push(("device_type", device_type.into()));
                    self.push(&NOVA_ALIAS_MISMATCH, labels, Value::Int(count));
                }
            }
        }
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

/// The IOMMU parameters on a kernel command line, last occurrence winning as in the kernel
/// (`vfio_pci.ids` is reported as `vfio-pci.ids`).
fn iommu_parameters(text: &str) -> Vec<(&'static str, String)> {
    let mut found: BTreeMap<&'static str, String> = BTreeMap::new();
    for parameter in cmdline::parameters(text) {
        if let Some(name) = KERNEL_PARAMETERS.iter().find(|name| parameter.is(name)) {
            let value = parameter.value.unwrap_or_default();
            found.insert(name, value.chars().take(MAX_LABEL_CHARS).collect());
        }
    }
    found.into_iter().collect()
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn a_config_file_named_without_a_directory_is_in_the_working_directory() {
        // Unit tests run in the crate directory.
        let bytes = read_file(Path::new("Cargo.toml"), CONFIG_FILE_LIMIT).unwrap();
        assert!(String::from_utf8_lossy(&bytes).contains("[package]"));
    }

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

    #[test]
    fn link_speeds_and_parameters() {
        assert_eq!(parse_link_speed("8.0 GT/s PCIe"), Some(8.0));
        assert_eq!(parse_link_speed("2.5 GT/s"), Some(2.5));
        assert_eq!(parse_link_speed("Unknown"), None);
        assert_eq!(parse_link_speed("Unknown speed"), None);
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
