//! One RDMA device's sysfs read: its state, ports, rates, PMA counters (with saturation) and
//! `hw_counters`, pushed as it goes; a failed file is reported and the rest still read.

use super::*;

/// What a PMA counter file feeds.
#[derive(Clone, Copy)]
pub(super) enum Target {
    /// A named metric, value multiplied by the factor (4 for the `*_data` 4-byte units).
    Metric(&'static Desc, u64),
    /// `hpcnode_rdma_port_errors_total{counter=<file name>}`.
    Error,
}

/// A PMA counter in `counters/`: file name, what it feeds, and its width in bits in the PMA
/// PortCounters attribute when it may be that narrow (the kernel reads 64-bit
/// PortCountersExtended instead where the HCA has it; a value above 2^32-1 shows it did).
pub(super) struct PmaCounter {
    pub(super) file: &'static str,
    pub(super) target: Target,
    pub(super) width: Option<u32>,
}

const fn pma(file: &'static str, target: Target, width: Option<u32>) -> PmaCounter {
    PmaCounter {
        file,
        target,
        width,
    }
}

pub(super) const PMA_COUNTERS: [PmaCounter; 21] = [
    pma(
        "port_xmit_data",
        Target::Metric(&PORT_DATA_TRANSMITTED, 4),
        Some(32),
    ),
    pma(
        "port_rcv_data",
        Target::Metric(&PORT_DATA_RECEIVED, 4),
        Some(32),
    ),
    pma(
        "port_xmit_packets",
        Target::Metric(&PORT_PACKETS_TRANSMITTED, 1),
        Some(32),
    ),
    pma(
        "port_rcv_packets",
        Target::Metric(&PORT_PACKETS_RECEIVED, 1),
        Some(32),
    ),
    pma(
        "unicast_xmit_packets",
        Target::Metric(&PORT_UNICAST_TRANSMITTED, 1),
        None,
    ),
    pma(
        "unicast_rcv_packets",
        Target::Metric(&PORT_UNICAST_RECEIVED, 1),
        None,
    ),
    pma(
        "multicast_xmit_packets",
        Target::Metric(&PORT_MULTICAST_TRANSMITTED, 1),
        None,
    ),
    pma(
        "multicast_rcv_packets",
        Target::Metric(&PORT_MULTICAST_RECEIVED, 1),
        None,
    ),
    pma(
        "port_xmit_wait",
        Target::Metric(&PORT_TRANSMIT_WAIT, 1),
        Some(32),
    ),
    pma("symbol_error", Target::Error, Some(16)),
    pma("link_error_recovery", Target::Error, Some(8)),
    pma("link_downed", Target::Error, Some(8)),
    pma("port_rcv_errors", Target::Error, Some(16)),
    pma("port_rcv_remote_physical_errors", Target::Error, Some(16)),
    pma("port_rcv_switch_relay_errors", Target::Error, Some(16)),
    pma("port_xmit_discards", Target::Error, Some(16)),
    pma("port_xmit_constraint_errors", Target::Error, Some(8)),
    pma("port_rcv_constraint_errors", Target::Error, Some(8)),
    pma("local_link_integrity_errors", Target::Error, Some(4)),
    pma("excessive_buffer_overrun_errors", Target::Error, Some(4)),
    pma("VL15_dropped", Target::Error, Some(16)),
];

/// `counters/port_rcv_discards` is not in the PortCounters attribute (width unknown).
pub(super) const PMA_EXTRA_ERRORS: [&str; 1] = ["port_rcv_discards"];

/// The 64-bit `counters_ext/` of kernels before 4.5: each file and the `counters/` file that
/// counts the same thing. `DeviceRead::pma_counters` says which of the two is exported.
const COUNTERS_EXT: [(&str, &str); 8] = [
    ("port_xmit_data_64", "port_xmit_data"),
    ("port_rcv_data_64", "port_rcv_data"),
    ("port_xmit_packets_64", "port_xmit_packets"),
    ("port_rcv_packets_64", "port_rcv_packets"),
    ("port_unicast_xmit_packets", "unicast_xmit_packets"),
    ("port_unicast_rcv_packets", "unicast_rcv_packets"),
    ("port_multicast_xmit_packets", "multicast_xmit_packets"),
    ("port_multicast_rcv_packets", "multicast_rcv_packets"),
];

/// The `state` ids of a port that is up (`IB_PORT_ACTIVE`, `IB_PORT_ACTIVE_DEFER`).
const ACTIVE: u64 = 4;
const ACTIVE_DEFER: u64 = 5;

/// The counter of a port's downs, as PMA and hw counter (Soft-RoCE) both name it.
const LINK_DOWNED: &str = "link_downed";

/// What iWARP ports print in every PMA counter file: no data, not an error.
const NO_PMA: &str = "N/A (no PMA)";

/// One device's read: its sysfs read (held descriptors, buffer, where samples and errors go)
/// and what it keeps.
pub(super) struct DeviceRead<'a> {
    pub(super) unit: UnitRead<'a, Output>,
    pub(super) device: LabelValue,
    /// What the device's last read kept.
    pub(super) state: &'a mut DeviceState,
    /// Where ports' hw counters come over netlink; `None`: from sysfs.
    pub(super) netlink: Option<NetlinkRead<'a>>,
    /// The `link_downed` counter of the port being read (PMA or hw counter), for its downs.
    pub(super) link_downed: Option<u64>,
    /// Which `hw_counters` are exported.
    pub(super) hw_counter_names: &'a NameFilter,
    /// `--path.sysfs`, where a RoCE port's network device is.
    pub(super) sysfs: &'a Path,
    /// Where RoCE ports' modules are read; `None`: not at all.
    pub(super) modules: Option<&'a module_eeprom::ModuleRead<'a>>,
    /// Where RoCE ports' netdev statistics are read; `None`: not at all.
    pub(super) stats: Option<&'a dyn module_events::StatsSource>,
    /// Where RoCE ports' FEC counters are read, and by when; `None`: not at all.
    pub(super) fec: Option<(&'a dyn fec::FecSource, Instant)>,
    /// This scrape's devlink health reporters; `None`: not read.
    pub(super) health: Option<&'a devlink_health::HealthListing>,
}

impl DeviceRead<'_> {
    fn push(&mut self, desc: &Desc, labels: impl IntoIterator<Item = Label>, value: Value) {
        self.unit.out().samples.push(desc, labels, value);
    }

    fn push_set(&mut self, desc: &Desc, labels: &LabelSet, value: Value) {
        self.unit.out().samples.push_set(desc, labels, value);
    }

    fn device_label(&self) -> Label {
        ("device", self.device.clone())
    }

    /// An optional text attribute as a label value: "" when absent or broken (then reported).
    fn text(&mut self, dir: &SysDir, name: &str) -> LabelValue {
        self.state.labels.get(self.unit.label(dir, name))
    }

    /// An optional symlink's target name as a label value: "" when absent or broken (then
    /// reported).
    fn link(&mut self, dir: &SysDir, name: &str) -> LabelValue {
        let target = self.unit.optional(dir.link_target_name(name));
        self.state.labels.get(target.as_deref().unwrap_or_default())
    }

    /// The address and driver of the device's parent (the targets of its `device` and
    /// `device/driver` links), on sysfs read once per device directory: neither moves while
    /// the directory lives (its parent is set at registration; the parent's driver, or the
    /// netdev a software device is made over, goes only with the device), and a device
    /// registered again is another directory. Elsewhere read each time: a fixture tree may
    /// re-point a link anywhere.
    fn parent_labels(&mut self, dir: &SysDir) -> [LabelValue; 2] {
        let stamp = self.unit.held().sysfs_stamp(dir);
        if let Some((kept, labels)) = &self.state.parent {
            if Some(*kept) == stamp {
                return labels.clone();
            }
        }
        let errors = self.unit.out().errors.len();
        let labels = [self.link(dir, "device"), self.link(dir, "device/driver")];
        // An error is counted again at each read, as any other.
        let read_well = self.unit.out().errors.len() == errors;
        self.state.parent = stamp
            .filter(|_| read_well)
            .map(|stamp| (stamp, labels.clone()));
        labels
    }

    pub(super) fn device(&mut self, dir: &SysDir) {
        let labels = [
            self.device_label(),
            ("board_id", self.text(dir, "board_id")),
            ("firmware_version", self.text(dir, "fw_ver")),
            ("hca_type", self.text(dir, "hca_type")),
            ("node_guid", self.text(dir, "node_guid")),
            ("node_type", self.text(dir, "node_type")),
        ];
        let [pci_address, driver] = self.parent_labels(dir);
        if let Some(health) = self.health {
            devlink_health::push(health, &self.device, pci_address.as_str(), self.unit.out());
        }
        let labels = labels
            .into_iter()
            .chain([("pci_address", pci_address), ("driver", driver)]);
        self.push(&DEVICE_INFO, labels, Value::Int(1));
        let hw = self.unit.subdir(dir, "hw_counters");
        if let Some(hw) = self.unit.optional(hw) {
            self.hw_counters(&hw, None);
        }

        let ports = self.unit.subdir(dir, "ports");
        let Some(ports) = self.unit.optional(ports) else {
            return;
        };
        let listing = self.unit.list(&ports);
        for port in self.unit.reported(listing).unwrap_or_default().iter() {
            let Some(port) = self.unit.reported(port.name()) else {
                continue;
            };
            let port_dir = self.unit.subdir(&ports, port);
            if let Some(port_dir) = self.unit.reported(port_dir) {
                let port_label = self.state.labels.get(port);
                self.port(&port_dir, &port_label);
            }
        }
    }

    fn port(&mut self, dir: &SysDir, port: &LabelValue) {
        let mut sets = self.state.take_port(&self.device, port);
        self.port_series(dir, port, &mut sets.1);
        self.state.put_port(sets);
    }

    fn port_series(&mut self, dir: &SysDir, port: &LabelValue, sets: &mut PortSets) {
        let link_layer = self.text(dir, "link_layer");
        let netdev = match link_layer.as_str() {
            ETHERNET_LINK_LAYER => self.netdev(dir),
            _ => String::new(),
        };
        if !netdev.is_empty() {
            self.netdev_counters(&netdev, &sets.port);
            if let Some(modules) = self.modules {
                let labels = [&self.device, port];
                sets.module.read(modules, &netdev, labels, self.unit.out());
            }
            if let Some(stats) = self.stats {
                let labels = [&self.device, port];
                sets.events.read(stats, &netdev, labels, self.unit.out());
            }
            if let Some((source, deadline)) = self.fec {
                let out = self.unit.out();
                sets.fec.read(source, deadline, &netdev, &sets.port, out);
            }
        }
        let netdev = self.state.labels.get(&netdev);
        let info = [
            self.device_label(),
            ("port", port.clone()),
            ("link_layer", link_layer.clone()),
            ("netdev", netdev),
            ("lid", self.text(dir, "lid")),
            ("sm_lid", self.text(dir, "sm_lid")),
        ];
        self.push(&PORT_INFO, info, Value::Int(1));

        let mut active = None;
        for (file, desc) in [("state", &PORT_STATE), ("phys_state", &PORT_PHYSICAL_STATE)] {
            let id = (self.unit.text(dir, file))
                .and_then(|text| parse_state_id(|| dir.path(file), text));
            if let Some(id) = self.unit.reported(id) {
                self.push_set(desc, &sets.port, Value::Int(id));
                if file == "state" {
                    active = Some(matches!(id, ACTIVE | ACTIVE_DEFER));
                }
            }
        }

        let rate =
            (self.unit.text(dir, "rate")).and_then(|text| parse_rate(|| dir.path("rate"), text));
        if let Some(rate) = self.unit.reported(rate) {
            let bytes = Value::Float(rate.bytes_per_second());
            self.push_set(&PORT_RATE, &sets.port, bytes);
            let data_rate = rate
                .data_bytes_per_second(link_layer.as_str() == ETHERNET_LINK_LAYER)
                .ok_or_else(|| {
                    SysfsError::parse(
                        &dir.path("rate"),
                        "unknown link speed generation; data rate not exported",
                        rate.generation(),
                    )
                });
            if let Some(bytes) = self.unit.reported(data_rate) {
                self.push_set(&PORT_DATA_RATE, &sets.port, Value::Float(bytes));
            }
        }

        let ext = self.unit.subdir(dir, "counters_ext");
        let extended = match self.unit.optional(ext) {
            Some(ext) => self.counters_ext(&ext),
            None => Vec::new(),
        };
        // Soft-RoCE, irdma and bnxt_re have no PMA: no counters/ at all.
        let counters = self.unit.subdir(dir, "counters");
        let counters = self.unit.optional(counters);
        self.link_downed = None;
        self.pma_counters(counters.as_deref(), sets, &extended);
        self.port_hw_counters(dir, port, sets);
        let downs = sets.downs.read(active, self.link_downed);
        self.push_set(&PORT_DOWNS, &sets.port, Value::Int(downs));
    }

    /// A port's `hw_counters`: over netlink where asked, else (or where netlink failed and
    /// may fall back) from the files; and where they came from.
    fn port_hw_counters(&mut self, dir: &SysDir, port: &LabelValue, sets: &mut PortSets) {
        let [netlink, sysfs] = &sets.sources;
        let source = match self.netlink_hw_counters(port, &mut sets.netlink) {
            Some(NetlinkOutcome::Read) => netlink,
            // Netlink forced, and failed: reported, no counters.
            Some(NetlinkOutcome::Failed) => return,
            Some(NetlinkOutcome::FallBack) | None => {
                let hw = self.unit.subdir(dir, "hw_counters");
                if let Some(hw) = self.unit.optional(hw) {
                    self.hw_counters(&hw, Some((port, &sets.port)));
                }
                sysfs
            }
        };
        self.push_set(&PORT_HW_COUNTERS_SOURCE, source, Value::Int(1));
    }

    /// The first network device bound to a GID of a RoCE port. The default GID, index 0 (made
    /// from the network device's address), has it on every RoCE port with one: read first,
    /// through a held descriptor, so that a scrape need not list the GID table (255 entries on
    /// mlx5, 1024 on rxe) every time; the table is read in order only where index 0 names none.
    /// Read by its path below the port, index 0's file is checked itself outside sysfs (see
    /// `sysfs::HeldAttributes`): a fixture that renames `gid_attrs/` or `ndevs/` aside, keeping it,
    /// is read through the old one until the port's directory changes. Unused GID entries fail
    /// to read on real kernels, so read failures here are expected and not reported; an entry
    /// whose name is not UTF-8 is no GID entry, and is reported when the table is read.
    fn netdev(&mut self, port_dir: &SysDir) -> String {
        let bound_to = |read: &mut Self, dir: &SysDir, index: &str| match read.unit.text(dir, index)
        {
            Ok(name) if !name.is_empty() => Some(name.to_string()),
            _ => None,
        };
        if let Some(netdev) = bound_to(self, port_dir, DEFAULT_GID_NETDEV) {
            return netdev;
        }
        // Made with the port, as its `counters/`.
        let ndevs = (self.unit.subdir(port_dir, "gid_attrs"))
            .and_then(|gid_attrs| self.unit.subdir(&gid_attrs, "ndevs"));
        let Ok(ndevs) = ndevs else {
            return String::new();
        };
        let listing = self.unit.list(&ndevs).unwrap_or_default();
        let indexes: Vec<&str> = (listing.iter())
            .filter_map(|index| self.unit.reported(index.name()))
            .filter(|index| *index != DEFAULT_GID)
            .collect();
        (indexes.into_iter())
            .find_map(|index| bound_to(self, &ndevs, index))
            .unwrap_or_default()
    }

    /// What a RoCE port's network device counts itself: its carrier changes
    /// (`class/net/<netdev>/carrier_changes`, 3.16+; the kernel counts every down and up of the
    /// link under the port, so a flap between two scrapes shows here even where the port has
    /// no `link_downed`) and its transmit timeouts, summed over its TX queues
    /// (`queues/tx-*/tx_timeout`: the watchdog's exact count, where the kernel log says it once
    /// or rate-limited). No series where the device or the files are absent.
    fn netdev_counters(&mut self, netdev: &str, port: &LabelSet) {
        let dir = SysDir::open(self.sysfs, Path::new(NET_CLASS_DIR).join(netdev));
        let Some(dir) = self.unit.optional(dir) else {
            return;
        };
        let changes = self.unit.optional_u64(&dir, "carrier_changes");
        if let Some(Some(changes)) = self.unit.reported(changes) {
            self.push_set(&PORT_NETDEV_CARRIER_CHANGES, port, Value::Int(changes));
        }
        let queues = self.unit.subdir(&dir, "queues");
        let Some(queues) = self.unit.optional(queues) else {
            return;
        };
        let listing = self.unit.list(&queues);
        let mut timeouts = None;
        for entry in self.unit.reported(listing).unwrap_or_default().iter() {
            let Some(name) = entry.name().ok().filter(|name| name.starts_with("tx-")) else {
                continue;
            };
            let queue = self.unit.subdir(&queues, name);
            let Some(queue) = self.unit.optional(queue) else {
                continue;
            };
            let count = self.unit.optional_u64(&queue, "tx_timeout");
            if let Some(Some(count)) = self.unit.reported(count) {
                *timeouts.get_or_insert(0u64) += count;
            }
        }
        if let Some(timeouts) = timeouts {
            self.push_set(&PORT_NETDEV_TX_TIMEOUTS, port, Value::Int(timeouts));
        }
    }

    /// The values of `counters_ext/`, each under the name of the `counters/` file it doubles.
    fn counters_ext(&mut self, dir: &SysDir) -> Vec<(&'static str, u64)> {
        COUNTERS_EXT
            .iter()
            .filter_map(|(file, basic)| Some((*basic, self.counter_value(dir, file)?)))
            .collect()
    }

    /// The PMA counters of a port: from `counters/` when the port has it, and from
    /// `counters_ext/` (`extended`) for the counters it doubles.
    ///
    /// Where both give a counter, the larger value is exported. Either can be the wrong one:
    /// `counters_ext/` reads 0 on mlx4 ports whose firmware does not fill the extended
    /// attribute, while `counters/` holds the traffic (node_exporter, which exports
    /// `counters/`, shows it); and a 32-bit `counters/` value stops at 2^32-1 while the 64-bit
    /// one goes on. Each file only grows until the counters are reset, so the larger of the two
    /// only grows too, scrape after scrape: `rate()` never sees a counter go backwards because
    /// the exporter switched files. Preferring `counters_ext/` whenever it is not 0 would: an
    /// extended counter that starts late (from 0) or is reset alone (`perfquery -x -R`) would
    /// take the series back below the basic value it showed before.
    fn pma_counters(
        &mut self,
        dir: Option<&SysDir>,
        sets: &PortSets,
        extended: &[(&'static str, u64)],
    ) {
        let basics = match dir {
            Some(dir) => self.counter_values(dir, PMA_COUNTERS.iter().map(|c| Some(c.file))),
            None => vec![None; PMA_COUNTERS.len()],
        };
        for ((counter, set), basic) in PMA_COUNTERS.iter().zip(&sets.pma).zip(basics) {
            let doubled = extended
                .iter()
                .find(|(file, _)| *file == counter.file)
                .map(|(_, value)| *value);
            // `None` is below every `Some`: one file alone gives the value.
            let Some(value) = basic.max(doubled) else {
                continue;
            };
            self.saw_port_counter(counter.file, value);
            match counter.target {
                Target::Metric(desc, factor) => {
                    // Exact while the product fits a u64; past it (2^62 data words and on) a
                    // float, as Prometheus holds every value, rather than a wrapped one.
                    let scaled = value
                        .checked_mul(factor)
                        .map_or_else(|| Value::Float(value as f64 * factor as f64), Value::Int);
                    self.push_set(desc, &sets.port, scaled);
                }
                Target::Error => self.push_set(&PORT_ERRORS, set, Value::Int(value)),
            }
            // Of the value exported: it is what stops counting. A value from the 64-bit
            // `counters_ext/` file never does.
            let narrow = doubled.is_none_or(|wide| wide < value);
            if let Some(width) = counter.width {
                let saturated = narrow && value == (1u64 << width) - 1;
                let saturated = Value::Int(u64::from(saturated));
                self.push_set(&PORT_PMA_SATURATED, set, saturated);
            }
        }
        let Some(dir) = dir else {
            return;
        };
        let extra = PMA_EXTRA_ERRORS.iter().zip(&sets.pma[PMA_COUNTERS.len()..]);
        for (file, set) in extra {
            if let Some(value) = self.counter_value(dir, file) {
                self.push_set(&PORT_ERRORS, set, Value::Int(value));
            }
        }
    }

    /// Keeps a port counter's value where the port's downs need it.
    pub(super) fn saw_port_counter(&mut self, name: &str, value: u64) {
        if name == LINK_DOWNED {
            self.link_downed = Some(value);
        }
    }

    /// A counter's value; `None` when absent, `N/A (no PMA)`, or broken (then reported).
    fn counter_value(&mut self, dir: &SysDir, name: &str) -> Option<u64> {
        let value = self.unit.text(dir, name).and_then(|text| match text {
            NO_PMA => Ok(None),
            text => text
                .parse()
                .map(Some)
                .map_err(|_| SysfsError::parse(&dir.path(name), "not an unsigned integer", text)),
        });
        self.unit.optional(value).flatten()
    }

    /// The values of `names` in `dir` (`None` for a name to skip), all read before any is
    /// pushed: reads back to back, with no pushing between them, keep the kernel's read path
    /// in the CPU's caches where a scrape's files outgrow them (0.93x to 0.97x the CPU per
    /// scrape of a read and a push in turn at 64 HCAs; at 16, 0.94x on a busy machine, 1.00x on
    /// a quiet one).
    fn counter_values<'n>(
        &mut self,
        dir: &SysDir,
        names: impl Iterator<Item = Option<&'n str>>,
    ) -> Vec<Option<u64>> {
        names
            .map(|name| name.and_then(|name| self.counter_value(dir, name)))
            .collect()
    }

    /// Every file of a `hw_counters/` directory, whatever its name; `lifespan` is a setting.
    /// `port` is the port's name and label set, `None` for the device-wide directory.
    fn hw_counters(&mut self, dir: &SysDir, port: Option<(&LabelValue, &LabelSet)>) {
        let names = self.unit.list(dir);
        let Some(names) = self.unit.reported(names) else {
            return;
        };
        let port_name = port.map(|(name, _)| name);
        let counters = self.state.counter_sets(&names, &self.device, port_name);
        // A counter not exported is not read, but for the port's downs.
        let filter = self.hw_counter_names;
        let read = names.iter().map(|name| {
            let name = name.name().ok()?;
            let needed = name == "lifespan" || name == LINK_DOWNED || filter.allows(name);
            needed.then_some(name)
        });
        let values = self.counter_values(dir, read);
        for ((name, counter), value) in names.iter().zip(counters.iter()).zip(values) {
            let Some(name) = self.unit.reported(name.name()) else {
                continue;
            };
            let Some(value) = value else {
                continue;
            };
            match (name, port) {
                ("lifespan", Some((_, port))) => {
                    let seconds = Value::Float(value as f64 / 1000.0);
                    self.push_set(&PORT_HW_STATS_LIFESPAN, port, seconds);
                }
                // The device-wide lifespan mirrors the ports'; it is not exported twice.
                ("lifespan", None) => {}
                (_, Some(_)) => {
                    self.saw_port_counter(name, value);
                    if filter.allows(name) {
                        self.push_set(&PORT_HW_STAT, counter, Value::Int(value));
                    }
                }
                (_, None) if filter.allows(name) => {
                    self.push_set(&DEVICE_HW_STAT, counter, Value::Int(value))
                }
                (_, None) => {}
            }
        }
    }
}
