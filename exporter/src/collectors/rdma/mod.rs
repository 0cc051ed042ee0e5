//! RDMA collector: device and port state, rates and counters from `/sys/class/infiniband`.
//!
//! Unlike node_exporter's infiniband collector, one unreadable device, port or file never hides
//! the others: each failure is reported and the rest is exported. Every `hw_counters` file is
//! exported whatever its name, and PMA counters stuck at their width's maximum are flagged.
//!
//! A port's `hw_counters` come in one RDMA netlink request (`RDMA_NLDEV_CMD_STAT_GET`, the
//! values the files give) where the running kernel answers it, else from the files
//! (`--collector.rdma.hw-counters`); `hpcnode_rdma_port_hw_counters_source` says which.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use regex::Regex;

use crate::collector::{
    CollectError, Collector, Host, Output, Registration, Root, Settings, StartError, Started,
};
use crate::flags::{flag, optional, ConfigError, Flags};
use crate::logging::OncePerCause;
use crate::metrics::{Desc, Label, LabelSet, LabelValue, Value};
use crate::netlink::ethtool::socket::KeptSocket;
use crate::netlink::rdma::socket::Socket;
use crate::privileges;
use crate::rdma_port::{parse_rate, parse_state_id, ETHERNET_LINK_LAYER};
use crate::sync::lock;
use crate::sysfs::{AttributeReader, Entry, HeldByUnit, LinkedDirs, SysDir, SysfsError, UnitRead};

mod device_read;
mod devlink_health;
mod fec;
mod hw_counters_netlink;
mod module_eeprom;
mod module_events;
mod state;
mod vf_stats;

use device_read::DeviceRead;
use hw_counters_netlink::{NetlinkOutcome, NetlinkRead};
use state::{DeviceState, PortSets};

pub const REGISTRATION: Registration = Registration {
    name: "rdma",
    enabled_by_default: true,
    help: "RDMA (InfiniBand, RoCE, iWARP, Omni-Path) device and port state and counters from /sys/class/infiniband",
    metrics: &METRICS,
    roots: &[Root::Sysfs],
    flags: || {
        vec![
            optional(INCLUDE, "REGEX", "Regexp of RDMA devices to include (mutually exclusive with device-exclude).")
                .conflicts_with(EXCLUDE),
            optional(EXCLUDE, "REGEX", "Regexp of RDMA devices to exclude (mutually exclusive with device-include)."),
            optional(HW_COUNTER_INCLUDE, "REGEX", "Regexp of hw_counters names to export (mutually exclusive with hw-counter-exclude); the others are not read. link_downed is read all the same, for the port's downs.")
                .conflicts_with(HW_COUNTER_EXCLUDE),
            optional(HW_COUNTER_EXCLUDE, "REGEX", "Regexp of hw_counters names not to export (mutually exclusive with hw-counter-include)."),
            flag(HW_COUNTERS, "auto", "Where ports' hw_counters are read: netlink (one RDMA_NLDEV_CMD_STAT_GET per port), sysfs (one file per counter), or auto: netlink with sysfs as the fallback when --path.sysfs is /sys, else sysfs."),
            flag(MODULE_INTERVAL, "60s", "How often a RoCE port's cable or transceiver memory is read over ethtool netlink (slow: I2C through firmware; scrapes between export the last read); 0 disables. Only when --path.sysfs is /sys."),
        ]
    },
    configure: |flags| Ok(Box::new(RdmaSettings::from_flags(flags)?)),
    probe: None,
};

const INCLUDE: &str = "collector.rdma.device-include";
const EXCLUDE: &str = "collector.rdma.device-exclude";
const HW_COUNTERS: &str = "collector.rdma.hw-counters";
const HW_COUNTER_INCLUDE: &str = "collector.rdma.hw-counter-include";
const HW_COUNTER_EXCLUDE: &str = "collector.rdma.hw-counter-exclude";
const MODULE_INTERVAL: &str = "collector.rdma.module-interval";
/// The longest `--collector.rdma.module-interval`: a module read less than daily says little.
const MAX_MODULE_INTERVAL: Duration = Duration::from_secs(24 * 3600);

/// `--collector.rdma.hw-counters`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HwCountersFlag {
    Auto,
    Netlink,
    Sysfs,
}

/// Where the collector reads ports' `hw_counters`, once `auto` is settled at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HwCounters {
    Sysfs,
    /// Over RDMA netlink; where it fails, from the files (`auto`) or not at all (`netlink`:
    /// the failure is a scrape error).
    Netlink {
        fallback: bool,
    },
}

impl HwCountersFlag {
    /// Netlink answers for the running kernel only: a tree under another `--path.sysfs` (a
    /// fixture, a copy) is read from its files.
    fn settle(self, sysfs: &Path) -> HwCounters {
        match self {
            HwCountersFlag::Auto if sysfs == Path::new("/sys") => {
                HwCounters::Netlink { fallback: true }
            }
            HwCountersFlag::Auto | HwCountersFlag::Sysfs => HwCounters::Sysfs,
            HwCountersFlag::Netlink => HwCounters::Netlink { fallback: false },
        }
    }
}

/// Which devices, or which `hw_counters`, the collector exports, by name.
#[derive(Debug, Clone)]
pub enum NameFilter {
    All,
    Include(Regex),
    Exclude(Regex),
}

impl NameFilter {
    /// From an include and an exclude flag (clap refuses both at once).
    fn from_flags(flags: &Flags, include: &str, exclude: &str) -> Result<NameFilter, ConfigError> {
        Ok(
            match (
                flags.anchored_regex(include)?,
                flags.anchored_regex(exclude)?,
            ) {
                (Some(include), _) => NameFilter::Include(include),
                (None, Some(exclude)) => NameFilter::Exclude(exclude),
                (None, None) => NameFilter::All,
            },
        )
    }

    pub fn allows(&self, device: &str) -> bool {
        match self {
            NameFilter::All => true,
            NameFilter::Include(re) => re.is_match(device),
            NameFilter::Exclude(re) => !re.is_match(device),
        }
    }
}

#[derive(Debug)]
struct RdmaSettings {
    devices: NameFilter,
    hw_counter_names: NameFilter,
    hw_counters: HwCountersFlag,
    /// `None`: modules are not read.
    module_interval: Option<Duration>,
}

impl RdmaSettings {
    fn from_flags(flags: &Flags) -> Result<RdmaSettings, ConfigError> {
        let devices = NameFilter::from_flags(flags, INCLUDE, EXCLUDE)?;
        let hw_counter_names =
            NameFilter::from_flags(flags, HW_COUNTER_INCLUDE, HW_COUNTER_EXCLUDE)?;
        let hw_counters = match flags.value(HW_COUNTERS).as_deref() {
            Some("auto") | None => HwCountersFlag::Auto,
            Some("netlink") => HwCountersFlag::Netlink,
            Some("sysfs") => HwCountersFlag::Sysfs,
            Some(other) => {
                return Err(flags.invalid(HW_COUNTERS, other, "expected auto, netlink or sysfs"))
            }
        };
        let module_interval = match flags.value(MODULE_INTERVAL).as_deref() {
            Some("0" | "0s") => None,
            _ => Some(
                (flags.duration(MODULE_INTERVAL, MAX_MODULE_INTERVAL)?)
                    .unwrap_or(Duration::from_secs(60)),
            ),
        };
        Ok(RdmaSettings {
            devices,
            hw_counter_names,
            hw_counters,
            module_interval,
        })
    }
}

impl Settings for RdmaSettings {
    fn start(self: Box<Self>, host: &Host) -> Result<Started, StartError> {
        let mut collector = RdmaCollector::new(host.sysfs.clone(), self.devices);
        collector.hw_counters = self.hw_counters.settle(&host.sysfs);
        collector.hw_counter_names = self.hw_counter_names;
        collector.timeout = host.scrape_timeout;
        // Only the running kernel answers for its VFs.
        if host.sysfs == Path::new("/sys") {
            collector.vf_source = Some(Box::new(vf_stats::Rtnetlink::default()));
            collector.stats_source = Some(Box::new(module_events::EthtoolIoctl::default()));
            let withheld = self
                .module_interval
                .and(privileges::module_eeprom_missing());
            if let Some((missing, remedy)) = withheld {
                privileges::report_withheld(REGISTRATION.name, missing, remedy, MODULE_COSTS);
            }
            collector.fec_source = Some(Box::new(KeptSocket::default()));
            collector.health_source = Some(Box::new(devlink_health::DevlinkNetlink));
            collector.module_source =
                (self.module_interval)
                    .filter(|_| withheld.is_none())
                    .map(|interval| {
                        let source: Box<dyn module_eeprom::ModuleSource> =
                            Box::new(KeptSocket::default());
                        (source, interval)
                    });
        }
        Ok(Started::new(collector))
    }
}

struct RdmaCollector {
    sysfs: PathBuf,
    devices: NameFilter,
    /// Per device, the counters' descriptors held open between scrapes, the label values read
    /// from it (names, identities, port numbers) and its series' label sets, made once, not
    /// per sample and scrape.
    held: HeldByUnit<DeviceState>,
    hw_counters: HwCounters,
    /// Which `hw_counters` are exported.
    hw_counter_names: NameFilter,
    /// How long a netlink request may take (the scrape's timeout).
    timeout: Duration,
    /// The RDMA netlink index of each device as the last listing gave them, or why it failed;
    /// `None`: to be listed again (a device new to it, or a request that failed).
    netlink_indexes: Mutex<Option<Result<HashMap<String, u32>, String>>>,
    /// A `NETLINK_RDMA` socket kept between scrapes (one per unit read at a time).
    netlink_socket: Mutex<Option<Socket>>,
    /// Why netlink failed, per device and cause: logged once, since it repeats every scrape.
    fallbacks_logged: OncePerCause<String>,
    /// `class/infiniband` as the last listing opened and listed it: the units open their
    /// devices from it rather than open the root again for each.
    class_dir: Mutex<Option<Arc<ClassListing>>>,
    /// The devices' directories, kept between scrapes on sysfs.
    device_dirs: LinkedDirs,
    /// Where the VFs' counters come from: rtnetlink on the running kernel, else nowhere.
    vf_source: Option<Box<dyn vf_stats::VfSource>>,
    /// Where RoCE ports' modules are read (ethtool netlink on the running kernel), and how
    /// often; `None`: not at all.
    module_source: Option<(Box<dyn module_eeprom::ModuleSource>, Duration)>,
    /// Where RoCE ports' netdev statistics are read (the ethtool ioctl on the running
    /// kernel); `None`: not at all.
    stats_source: Option<Box<dyn module_events::StatsSource>>,
    /// Where RoCE ports' FEC counters are read (ethtool netlink on the running kernel);
    /// `None`: not at all.
    fec_source: Option<Box<dyn fec::FecSource>>,
    /// Where devlink health reporters are dumped (the running kernel); `None`: not at all.
    health_source: Option<Box<dyn devlink_health::HealthSource>>,
    /// The reporters the last listing's dump gave, for its devices' reads.
    health: Mutex<Option<Arc<devlink_health::HealthListing>>>,
}

/// `class/infiniband` as a listing opened it, whether its devices' directories are kept
/// ([`LinkedDirs::keeps`]), and the inode number of each device's link.
struct ClassListing {
    dir: SysDir,
    keep: bool,
    inodes: HashMap<String, u64>,
}

/// Fallback causes remembered by the log-once filter: a few per device on any real node.
const MAX_LOGGED_FALLBACKS: usize = 256;

impl RdmaCollector {
    fn new(sysfs: PathBuf, devices: NameFilter) -> Self {
        RdmaCollector {
            sysfs,
            devices,
            held: HeldByUnit::default(),
            hw_counters: HwCounters::Sysfs,
            hw_counter_names: NameFilter::All,
            timeout: Duration::from_secs(10),
            netlink_indexes: Mutex::new(None),
            netlink_socket: Mutex::new(None),
            fallbacks_logged: OncePerCause::new(MAX_LOGGED_FALLBACKS),
            class_dir: Mutex::new(None),
            device_dirs: LinkedDirs::default(),
            vf_source: None,
            module_source: None,
            stats_source: None,
            fec_source: None,
            health_source: None,
            health: Mutex::new(None),
        }
    }
}

/// What the rdma collector goes without when the kernel refuses module EEPROM reads.
const MODULE_COSTS: &str =
    "no cable and transceiver health (hpcnode_rdma_port_module_*) for RoCE ports";

/// Where the devices are, under `--path.sysfs`.
const CLASS_DIR: &str = "class/infiniband";
/// The index of a port's default GID in `gid_attrs/ndevs/`, and its file below the port.
const DEFAULT_GID: &str = "0";
const DEFAULT_GID_NETDEV: &str = "gid_attrs/ndevs/0";
/// Where network devices are, under `--path.sysfs`.
const NET_CLASS_DIR: &str = "class/net";

const DEVICE_INFO: Desc = Desc::gauge(
    "hpcnode_rdma_device_info",
    "RDMA device identity: firmware, board, HCA type, node GUID, PCI address and kernel driver.",
    None,
);
const PORT_INFO: Desc = Desc::gauge(
    "hpcnode_rdma_port_info",
    "RDMA port identity: link layer, network device, LID and subnet manager LID.",
    None,
);
const PORT_STATE: Desc = Desc::gauge(
    "hpcnode_rdma_port_state_id",
    "Logical port state: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER.",
    None,
);
const PORT_PHYSICAL_STATE: Desc = Desc::gauge(
    "hpcnode_rdma_port_physical_state_id",
    "Physical port state: 2 Polling, 3 Disabled, 5 LinkUp, 6 LinkErrorRecovery, ...",
    None,
);
const PORT_RATE: Desc = Desc::gauge(
    "hpcnode_rdma_port_rate",
    "Port rate as the kernel reports it (the rate file), in bytes per second.",
    Some("bytes_per_second"),
);
const PORT_DATA_RATE: Desc = Desc::gauge(
    "hpcnode_rdma_port_data_rate",
    "Payload rate after line encoding (8b/10b up to QDR, 64b/66b from FDR), in bytes per second.",
    Some("bytes_per_second"),
);
const PORT_DATA_TRANSMITTED: Desc = Desc::counter(
    "hpcnode_rdma_port_data_transmitted",
    "Data transmitted on the port (port_xmit_data x 4).",
    Some("bytes"),
);
const PORT_DATA_RECEIVED: Desc = Desc::counter(
    "hpcnode_rdma_port_data_received",
    "Data received on the port (port_rcv_data x 4).",
    Some("bytes"),
);
const PORT_PACKETS_TRANSMITTED: Desc = Desc::counter(
    "hpcnode_rdma_port_packets_transmitted",
    "Packets transmitted on the port.",
    None,
);
const PORT_PACKETS_RECEIVED: Desc = Desc::counter(
    "hpcnode_rdma_port_packets_received",
    "Packets received on the port.",
    None,
);
const PORT_UNICAST_TRANSMITTED: Desc = Desc::counter(
    "hpcnode_rdma_port_unicast_packets_transmitted",
    "Unicast packets transmitted on the port.",
    None,
);
const PORT_UNICAST_RECEIVED: Desc = Desc::counter(
    "hpcnode_rdma_port_unicast_packets_received",
    "Unicast packets received on the port.",
    None,
);
const PORT_MULTICAST_TRANSMITTED: Desc = Desc::counter(
    "hpcnode_rdma_port_multicast_packets_transmitted",
    "Multicast packets transmitted on the port.",
    None,
);
const PORT_MULTICAST_RECEIVED: Desc = Desc::counter(
    "hpcnode_rdma_port_multicast_packets_received",
    "Multicast packets received on the port.",
    None,
);
const PORT_TRANSMIT_WAIT: Desc = Desc::counter(
    "hpcnode_rdma_port_transmit_wait",
    "Ticks during which the port had data to send but could not (port_xmit_wait; tick length is HCA specific).",
    None,
);
const PORT_ERRORS: Desc = Desc::counter(
    "hpcnode_rdma_port_errors",
    "PMA error counters of the port, by sysfs counter name.",
    None,
);
const PORT_DOWNS: Desc = Desc::counter(
    "hpcnode_rdma_port_downs",
    "Times the port went down since the exporter started, at least: at each read the larger of link_downed's increase and one if the port was ACTIVE at the last read and is not now. A down and up between two reads with no link_downed counter (or a saturated one) is missed.",
    None,
);
const PORT_NETDEV_CARRIER_CHANGES: Desc = Desc::counter(
    "hpcnode_rdma_port_netdev_carrier_changes",
    "Carrier changes (downs and ups) of the RoCE port's network device since it was made (class/net/<netdev>/carrier_changes); the netdev is on hpcnode_rdma_port_info.",
    None,
);
const PORT_NETDEV_TX_TIMEOUTS: Desc = Desc::counter(
    "hpcnode_rdma_port_netdev_tx_timeouts",
    "Transmit timeouts of the RoCE port's network device, summed over its TX queues (class/net/<netdev>/queues/tx-*/tx_timeout): the watchdog's exact count.",
    None,
);
const PORT_PMA_SATURATED: Desc = Desc::gauge(
    "hpcnode_rdma_port_pma_saturated",
    "1 when a PMA counter sits at its width's maximum and no longer counts (reset it with perfquery -R), else 0.",
    None,
);
const PORT_HW_STAT: Desc = Desc::counter(
    "hpcnode_rdma_port_hw_stat",
    "Driver-specific port counters from hw_counters/, by file name.",
    None,
);
const PORT_HW_STATS_LIFESPAN: Desc = Desc::gauge(
    "hpcnode_rdma_port_hw_stats_lifespan",
    "How long the driver caches hw_counters values (a setting, not a counter).",
    Some("seconds"),
);
const DEVICE_HW_STAT: Desc = Desc::counter(
    "hpcnode_rdma_device_hw_stat",
    "Driver-specific device-wide counters from hw_counters/, by file name.",
    None,
);
const PORT_HW_COUNTERS_SOURCE: Desc = Desc::gauge(
    "hpcnode_rdma_port_hw_counters_source",
    "Where the port's hw_stat values came from this scrape: source netlink (RDMA_NLDEV_CMD_STAT_GET) or sysfs (hw_counters/ files); always 1.",
    None,
);

/// Every metric this collector emits (for the METRICS.md check).
pub const METRICS: [Desc; 44] = [
    DEVICE_INFO,
    PORT_INFO,
    PORT_STATE,
    PORT_PHYSICAL_STATE,
    PORT_RATE,
    PORT_DATA_RATE,
    PORT_DATA_TRANSMITTED,
    PORT_DATA_RECEIVED,
    PORT_PACKETS_TRANSMITTED,
    PORT_PACKETS_RECEIVED,
    PORT_UNICAST_TRANSMITTED,
    PORT_UNICAST_RECEIVED,
    PORT_MULTICAST_TRANSMITTED,
    PORT_MULTICAST_RECEIVED,
    PORT_TRANSMIT_WAIT,
    PORT_ERRORS,
    PORT_DOWNS,
    PORT_NETDEV_CARRIER_CHANGES,
    PORT_NETDEV_TX_TIMEOUTS,
    PORT_PMA_SATURATED,
    PORT_HW_STAT,
    PORT_HW_STATS_LIFESPAN,
    DEVICE_HW_STAT,
    PORT_HW_COUNTERS_SOURCE,
    vf_stats::VF_STAT,
    module_eeprom::MODULE_INFO,
    module_eeprom::TEMPERATURE,
    module_eeprom::SUPPLY_VOLTAGE,
    module_eeprom::TX_BIAS,
    module_eeprom::TX_POWER,
    module_eeprom::RX_POWER,
    module_eeprom::TEMPERATURE_THRESHOLD,
    module_eeprom::SUPPLY_VOLTAGE_THRESHOLD,
    module_eeprom::TX_BIAS_THRESHOLD,
    module_eeprom::TX_POWER_THRESHOLD,
    module_eeprom::RX_POWER_THRESHOLD,
    module_eeprom::ALARM,
    module_events::MODULE_EVENTS,
    fec::CORRECTED_BLOCKS,
    fec::UNCORRECTABLE_BLOCKS,
    fec::CORRECTED_BITS,
    devlink_health::ERRORS,
    devlink_health::RECOVERIES,
    devlink_health::HEALTHY,
];

impl Collector for RdmaCollector {
    /// A device; an entry whose name is not UTF-8 is a unit of its own, which reports it.
    type Unit = Entry;

    fn units(&self) -> Result<Vec<Entry>, CollectError> {
        let listing = SysDir::open(&self.sysfs, CLASS_DIR)
            .and_then(|class_dir| Ok((class_dir.entries_with_inodes()?, class_dir)));
        let (listing, class_dir) = match listing {
            Ok((devices, dir)) => {
                let inodes = (devices.iter())
                    .filter_map(|(device, inode)| Some((device.name().ok()?.to_string(), *inode)))
                    .collect();
                let keep = LinkedDirs::keeps(&dir);
                let devices: Vec<Entry> = devices.into_iter().map(|(device, _)| device).collect();
                let listing = ClassListing { dir, keep, inodes };
                (Ok(devices), Some(Arc::new(listing)))
            }
            Err(err) => (Err(err), None),
        };
        *lock(&self.class_dir) = class_dir;
        match listing {
            Ok(mut devices) => {
                devices
                    .retain(|device| device.name().map_or(true, |name| self.devices.allows(name)));
                // Devices gone since the last listing close their descriptors.
                let listed =
                    |name: &str| (devices.iter()).any(|device| device.name().ok() == Some(name));
                self.held.retain(listed);
                self.device_dirs.retain(listed);
                if matches!(self.hw_counters, HwCounters::Netlink { .. }) && !devices.is_empty() {
                    self.list_netlink_indexes(&devices);
                }
                // One dump a scrape, for every device's read.
                *lock(&self.health) = (self.health_source.as_ref())
                    .filter(|_| !devices.is_empty())
                    .map(|source| {
                        let deadline = Instant::now() + self.timeout;
                        Arc::new(devlink_health::list(source.as_ref(), deadline))
                    });
                Ok(devices)
            }
            // No RDMA stack loaded: nothing to export, and nothing failed.
            Err(err) if err.is_absent() => Ok(Vec::new()),
            Err(err) => Err(err.into()),
        }
    }

    fn collect_unit(&self, device: &Entry, out: &mut Output) {
        let Some(device) = out.reported(device.name()) else {
            return;
        };
        // A device gone between the listing and its read (unplugged, driver unloaded) is
        // absent, not broken.
        let class_dir = lock(&self.class_dir).clone();
        let dir = match class_dir {
            Some(listing) => match listing.inodes.get(device) {
                Some(inode) => (self.device_dirs).dir(&listing.dir, listing.keep, device, *inode),
                None => listing.dir.link_dir(device).map(Arc::new),
            },
            None => SysDir::open(&self.sysfs, format!("{CLASS_DIR}/{device}")).map(Arc::new),
        };
        let Some(dir) = out.optional(dir) else {
            return;
        };
        let now = Instant::now();
        let modules =
            (self.module_source.as_ref()).map(|(source, interval)| module_eeprom::ModuleRead {
                source: source.as_ref(),
                interval: *interval,
                now,
                deadline: now + self.timeout,
            });
        let fec = (self.fec_source.as_ref()).map(|source| (source.as_ref(), now + self.timeout));
        let health = lock(&self.health).clone();
        // A device that went and came back (or another that took its name) is other
        // directories, which hold nothing yet.
        self.held.read(device, |held, state| {
            // About as many as the last read: pushed without growing a list step by step.
            out.samples.reserve(state.pushed);
            let mut reader = AttributeReader::default();
            let mut read = DeviceRead {
                unit: UnitRead::new(held, &mut reader, out),
                device: state.labels.get(device),
                state,
                netlink: self.netlink_read(device),
                link_downed: None,
                hw_counter_names: &self.hw_counter_names,
                sysfs: &self.sysfs,
                modules: modules.as_ref(),
                stats: self.stats_source.as_deref(),
                fec,
                health: health.as_deref(),
            };
            read.device(&dir);
            read.state.end_read(read.unit.out().samples.pushed());
        });
        if let Some(source) = &self.vf_source {
            vf_stats::read(&dir, device, source.as_ref(), self.timeout, out);
        }
    }
}

#[cfg(test)]
mod tests;
