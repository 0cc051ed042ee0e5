//! RDMA collector: device and port state, rates and counters from `/sys/class/infiniband`.
//!
//! Unlike node_exporter's infiniband collector, one unreadable device, port or file never hides
//! the others: each failure is reported and the rest is exported. Every `hw_counters` file is
//! exported whatever its name, and PMA counters stuck at their width's maximum are flagged.

use std::path::{Path, PathBuf};

use crate::collector::{CollectError, Collector, Output};
use crate::config::{Config, DeviceFilter};
use crate::metrics::{Desc, Labels, Samples, Value};
use crate::sysfs::{link_target_name, sorted_entries, AttributeReader, SysfsError};

pub fn build(config: &Config) -> Box<dyn Collector> {
    Box::new(RdmaCollector {
        class_dir: config.sysfs.join("class/infiniband"),
        devices: config.rdma_devices.clone(),
    })
}

pub struct RdmaCollector {
    class_dir: PathBuf,
    devices: DeviceFilter,
}

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

/// Every metric this collector emits (for the METRICS.md check).
pub const METRICS: [Desc; 20] = [
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
    PORT_PMA_SATURATED,
    PORT_HW_STAT,
    PORT_HW_STATS_LIFESPAN,
    DEVICE_HW_STAT,
];

/// What a PMA counter file feeds.
#[derive(Clone, Copy)]
enum Target {
    /// A named metric, value multiplied by the factor (4 for the `*_data` 4-byte units).
    Metric(&'static Desc, u64),
    /// `hpcnode_rdma_port_errors_total{counter=<file name>}`.
    Error,
}

/// A PMA counter in `counters/`: file name, what it feeds, and its width in bits in the PMA
/// PortCounters attribute when it may be that narrow (the kernel reads 64-bit
/// PortCountersExtended instead where the HCA has it; a value above 2^32-1 shows it did).
struct PmaCounter {
    file: &'static str,
    target: Target,
    width: Option<u32>,
}

const fn pma(file: &'static str, target: Target, width: Option<u32>) -> PmaCounter {
    PmaCounter {
        file,
        target,
        width,
    }
}

const PMA_COUNTERS: [PmaCounter; 21] = [
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
const PMA_EXTRA_ERRORS: [&str; 1] = ["port_rcv_discards"];

/// Legacy 64-bit `counters_ext/` (kernels before 4.5): file, and the `counters/` file it replaces.
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

/// What iWARP ports print in every PMA counter file: no data, not an error.
const NO_PMA: &str = "N/A (no PMA)";

impl Collector for RdmaCollector {
    fn units(&self) -> Result<Vec<String>, CollectError> {
        match sorted_entries(&self.class_dir) {
            Ok(mut devices) => {
                devices.retain(|device| self.devices.allows(device));
                Ok(devices)
            }
            // No RDMA stack loaded: nothing to export, and nothing failed.
            Err(err) if err.is_not_found() => Ok(Vec::new()),
            Err(err) => Err(err.into()),
        }
    }

    fn collect_unit(&self, device: &str, out: &mut Output) {
        let mut scrape = Scrape {
            reader: AttributeReader::default(),
            out,
        };
        scrape.device(&self.class_dir.join(device), device);
    }
}

/// One device's read: the read buffer and where samples and errors go.
struct Scrape<'a> {
    reader: AttributeReader,
    out: &'a mut Output,
}

impl Scrape<'_> {
    fn samples(&mut self) -> &mut Samples {
        &mut self.out.samples
    }

    fn error(&mut self, err: SysfsError) {
        self.out.errors.push(err.into());
    }

    /// An optional text attribute: missing is "", other failures are reported and give "".
    fn text(&mut self, path: &Path) -> String {
        match self.reader.read(path) {
            Ok(text) => text.to_string(),
            Err(err) => {
                if !err.is_not_found() {
                    self.error(err);
                }
                String::new()
            }
        }
    }

    /// An optional symlink's target name: missing is "", other failures are reported.
    fn link(&mut self, path: &Path) -> String {
        match link_target_name(path) {
            Ok(name) => name,
            Err(err) => {
                if !err.is_not_found() {
                    self.error(err);
                }
                String::new()
            }
        }
    }

    fn device(&mut self, dir: &Path, device: &str) {
        let labels = vec![
            ("device", device.to_string()),
            ("board_id", self.text(&dir.join("board_id"))),
            ("firmware_version", self.text(&dir.join("fw_ver"))),
            ("hca_type", self.text(&dir.join("hca_type"))),
            ("node_guid", self.text(&dir.join("node_guid"))),
            ("node_type", self.text(&dir.join("node_type"))),
            ("pci_address", self.link(&dir.join("device"))),
            ("driver", self.link(&dir.join("device/driver"))),
        ];
        self.samples().push(&DEVICE_INFO, labels, Value::Int(1));
        self.hw_counters(&dir.join("hw_counters"), &DEVICE_HW_STAT, None, || {
            vec![("device", device.to_string())]
        });

        let ports_dir = dir.join("ports");
        match sorted_entries(&ports_dir) {
            Ok(ports) => {
                for port in ports {
                    self.port(&ports_dir.join(&port), device, &port);
                }
            }
            Err(err) => self.error(err),
        }
    }

    fn port(&mut self, dir: &Path, device: &str, port: &str) {
        let labels = || vec![("device", device.to_string()), ("port", port.to_string())];

        let link_layer = self.text(&dir.join("link_layer"));
        let netdev = if link_layer == "Ethernet" {
            self.netdev(&dir.join("gid_attrs/ndevs"))
        } else {
            String::new()
        };
        let mut info = labels();
        info.extend([
            ("link_layer", link_layer.clone()),
            ("netdev", netdev),
            ("lid", self.text(&dir.join("lid"))),
            ("sm_lid", self.text(&dir.join("sm_lid"))),
        ]);
        self.samples().push(&PORT_INFO, info, Value::Int(1));

        for (file, desc) in [("state", &PORT_STATE), ("phys_state", &PORT_PHYSICAL_STATE)] {
            let path = dir.join(file);
            match self
                .reader
                .read(&path)
                .and_then(|t| parse_state_id(&path, t))
            {
                Ok(id) => self.samples().push(desc, labels(), Value::Int(id)),
                Err(err) => self.error(err),
            }
        }

        let rate_path = dir.join("rate");
        match self
            .reader
            .read(&rate_path)
            .and_then(|text| parse_rate(&rate_path, text))
        {
            Ok(rate) => {
                let data_rate = rate.data_gbps(link_layer == "Ethernet");
                self.samples()
                    .push(&PORT_RATE, labels(), Value::Float(gbps_to_bytes(rate.gbps)));
                match data_rate {
                    Some(gbps) => self.samples().push(
                        &PORT_DATA_RATE,
                        labels(),
                        Value::Float(gbps_to_bytes(gbps)),
                    ),
                    None => self.error(SysfsError::parse(
                        &rate_path,
                        "unknown link speed generation; data rate not exported",
                        &rate.generation,
                    )),
                }
            }
            Err(err) => self.error(err),
        }

        let replaced = self.counters_ext(&dir.join("counters_ext"), &labels);
        self.pma_counters(&dir.join("counters"), &labels, &replaced);
        self.hw_counters(
            &dir.join("hw_counters"),
            &PORT_HW_STAT,
            Some(&PORT_HW_STATS_LIFESPAN),
            labels,
        );
    }

    /// The first network device bound to a GID of a RoCE port. Unused GID entries fail to read
    /// on real kernels, so failures here are expected and not reported.
    fn netdev(&mut self, ndevs: &Path) -> String {
        let Ok(indexes) = sorted_entries(ndevs) else {
            return String::new();
        };
        indexes
            .iter()
            .find_map(|index| match self.reader.read(&ndevs.join(index)) {
                Ok(name) if !name.is_empty() => Some(name.to_string()),
                _ => None,
            })
            .unwrap_or_default()
    }

    /// Reads `counters_ext/` if present; returns the `counters/` files it supersedes.
    fn counters_ext(&mut self, dir: &Path, labels: &dyn Fn() -> Labels) -> Vec<&'static str> {
        let mut replaced = Vec::new();
        if !dir.is_dir() {
            return replaced;
        }
        for (file, legacy) in COUNTERS_EXT {
            let path = dir.join(file);
            let Some(value) = self.counter_value(&path) else {
                continue;
            };
            let pma = PMA_COUNTERS
                .iter()
                .find(|c| c.file == legacy)
                .expect("every counters_ext file maps to a counters file");
            if let Target::Metric(desc, factor) = pma.target {
                self.samples()
                    .push(desc, labels(), Value::Int(value.wrapping_mul(factor)));
                replaced.push(legacy);
            }
        }
        replaced
    }

    fn pma_counters(&mut self, dir: &Path, labels: &dyn Fn() -> Labels, replaced: &[&str]) {
        // Soft-RoCE, irdma and bnxt_re have no PMA: no counters/ at all.
        if !dir.is_dir() {
            return;
        }
        for counter in PMA_COUNTERS.iter().filter(|c| !replaced.contains(&c.file)) {
            let Some(value) = self.counter_value(&dir.join(counter.file)) else {
                continue;
            };
            match counter.target {
                Target::Metric(desc, factor) => {
                    self.samples()
                        .push(desc, labels(), Value::Int(value.wrapping_mul(factor)))
                }
                Target::Error => self.push_error_counter(labels, counter.file, value),
            }
            if let Some(width) = counter.width {
                let saturated = value == (1u64 << width) - 1;
                let mut with_counter = labels();
                with_counter.push(("counter", counter.file.to_string()));
                self.samples().push(
                    &PORT_PMA_SATURATED,
                    with_counter,
                    Value::Int(u64::from(saturated)),
                );
            }
        }
        for file in PMA_EXTRA_ERRORS {
            if let Some(value) = self.counter_value(&dir.join(file)) {
                self.push_error_counter(labels, file, value);
            }
        }
    }

    fn push_error_counter(&mut self, labels: &dyn Fn() -> Labels, file: &str, value: u64) {
        let mut with_counter = labels();
        with_counter.push(("counter", file.to_string()));
        self.samples()
            .push(&PORT_ERRORS, with_counter, Value::Int(value));
    }

    /// A counter's value; `None` when absent, `N/A (no PMA)`, or broken (then reported).
    fn counter_value(&mut self, path: &Path) -> Option<u64> {
        match self.reader.read(path) {
            Ok(NO_PMA) => None,
            Ok(text) => match text.parse() {
                Ok(value) => Some(value),
                Err(_) => {
                    let err = SysfsError::parse(path, "not an unsigned integer", text);
                    self.error(err);
                    None
                }
            },
            Err(err) if err.is_not_found() => None,
            Err(err) => {
                self.error(err);
                None
            }
        }
    }

    /// Every file of a `hw_counters/` directory, whatever its name; `lifespan` is a setting.
    fn hw_counters(
        &mut self,
        dir: &Path,
        desc: &Desc,
        lifespan: Option<&Desc>,
        labels: impl Fn() -> Labels,
    ) {
        let names = match sorted_entries(dir) {
            Ok(names) => names,
            Err(err) if err.is_not_found() => return,
            Err(err) => return self.error(err),
        };
        for name in names {
            let path = dir.join(&name);
            let Some(value) = self.counter_value(&path) else {
                continue;
            };
            if name == "lifespan" {
                if let Some(lifespan) = lifespan {
                    let seconds = value as f64 / 1000.0;
                    self.samples()
                        .push(lifespan, labels(), Value::Float(seconds));
                }
                continue;
            }
            let mut with_counter = labels();
            with_counter.push(("counter", name));
            self.samples().push(desc, with_counter, Value::Int(value));
        }
    }
}

/// `4: ACTIVE` -> 4.
fn parse_state_id(path: &Path, text: &str) -> Result<u64, SysfsError> {
    text.split_once(':')
        .and_then(|(id, _)| id.trim().parse().ok())
        .ok_or_else(|| SysfsError::parse(path, "expected '<id>: <NAME>'", text))
}

/// A parsed `rate` file: `100 Gb/sec (4X EDR)`, `10 Gb/sec (4X)`, `0 GB/sec`.
#[derive(Debug, PartialEq)]
struct Rate {
    gbps: f64,
    lanes: u32,
    generation: String,
}

impl Rate {
    /// Payload rate in Gb/s. Ethernet speeds are already payload rates; InfiniBand generations
    /// up to QDR lose 20% to 8b/10b, FDR and later use 64b/66b on a faster signal.
    fn data_gbps(&self, ethernet: bool) -> Option<f64> {
        if ethernet || self.gbps == 0.0 {
            return Some(self.gbps);
        }
        let per_lane = match self.generation.as_str() {
            // Kernels before 4.x print no generation for SDR.
            "" | "SDR" => 2.0,
            "DDR" => 4.0,
            "QDR" => 8.0,
            "FDR10" => 10.0,
            "FDR" => 14.0625 * 64.0 / 66.0,
            "EDR" => 25.0,
            "HDR" => 50.0,
            "NDR" => 100.0,
            "XDR" => 200.0,
            _ => return None,
        };
        Some(per_lane * f64::from(self.lanes))
    }
}

fn parse_rate(path: &Path, text: &str) -> Result<Rate, SysfsError> {
    let invalid = || SysfsError::parse(path, "expected '<n> Gb/sec (<w>X <generation>)'", text);
    let (number, rest) = text.split_once(' ').ok_or_else(invalid)?;
    let gbps: f64 = number.parse().map_err(|_| invalid())?;
    if !gbps.is_finite() || gbps < 0.0 {
        return Err(invalid());
    }
    // The kernel prints `0 GB/sec` (sic) when neither speed nor width is known: an empty cage.
    if gbps == 0.0 && rest.trim() == "GB/sec" {
        return Ok(Rate {
            gbps,
            lanes: 0,
            generation: String::new(),
        });
    }
    let inner = rest
        .strip_prefix("Gb/sec (")
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(invalid)?;
    let (width, generation) = inner.split_once(' ').unwrap_or((inner, ""));
    let lanes = width
        .strip_suffix('X')
        .and_then(|w| w.parse().ok())
        .ok_or_else(invalid)?;
    Ok(Rate {
        gbps,
        lanes,
        generation: generation.to_string(),
    })
}

fn gbps_to_bytes(gbps: f64) -> f64 {
    gbps * 1e9 / 8.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(text: &str) -> Rate {
        parse_rate(Path::new("rate"), text).unwrap()
    }

    #[test]
    fn qdr_signals_40_and_carries_32() {
        let qdr = rate("40 Gb/sec (4X QDR)");
        assert_eq!(gbps_to_bytes(qdr.gbps), 5e9);
        assert_eq!(gbps_to_bytes(qdr.data_gbps(false).unwrap()), 4e9);
    }

    #[test]
    fn edr_100_is_12_5_gigabytes() {
        let edr = rate("100 Gb/sec (4X EDR)");
        assert_eq!(gbps_to_bytes(edr.gbps), 12_500_000_000.0);
        assert_eq!(edr.data_gbps(false), Some(100.0));
    }

    #[test]
    fn generations_and_widths() {
        assert_eq!(rate("200 Gb/sec (4X HDR)").data_gbps(false), Some(200.0));
        assert_eq!(rate("400 Gb/sec (4X NDR)").data_gbps(false), Some(400.0));
        assert_eq!(rate("2.5 Gb/sec (1X SDR)").data_gbps(false), Some(2.0));
        assert_eq!(rate("10 Gb/sec (4X)").data_gbps(false), Some(8.0));
        assert_eq!(rate("40 Gb/sec (4X FDR10)").data_gbps(false), Some(40.0));
        let fdr = rate("56 Gb/sec (4X FDR)").data_gbps(false).unwrap();
        assert!((fdr - 54.545_454).abs() < 1e-3, "{fdr}");
        assert_eq!(rate("300 Gb/sec (12X EDR)").data_gbps(false), Some(300.0));
        assert_eq!(rate("1600 Gb/sec (8X XXR)").data_gbps(false), None);
    }

    #[test]
    fn ethernet_rate_is_the_data_rate() {
        assert_eq!(rate("40 Gb/sec (4X QDR)").data_gbps(true), Some(40.0));
    }

    #[test]
    fn empty_cage() {
        let empty = rate("0 GB/sec");
        assert_eq!(empty.gbps, 0.0);
        assert_eq!(empty.data_gbps(false), Some(0.0));
    }

    #[test]
    fn garbage_rates_are_errors() {
        for text in [
            "fast",
            "",
            "40 Gb/sec",
            "40 Gb/sec (QDR)",
            "NaN Gb/sec (4X)",
            "-1 Gb/sec (4X)",
            "5 GB/sec",
        ] {
            assert!(parse_rate(Path::new("rate"), text).is_err(), "{text:?}");
        }
    }

    #[test]
    fn state_ids() {
        let id = |t| parse_state_id(Path::new("state"), t);
        assert_eq!(id("4: ACTIVE").unwrap(), 4);
        assert_eq!(id("5: LinkUp").unwrap(), 5);
        assert!(id("banana").is_err());
        assert!(id(": ACTIVE").is_err());
    }

    #[test]
    fn widths_give_the_saturation_value() {
        let max = |file| {
            let width = PMA_COUNTERS.iter().find(|c| c.file == file).unwrap().width;
            (1u64 << width.unwrap()) - 1
        };
        assert_eq!(max("port_xmit_wait"), 4_294_967_295);
        assert_eq!(max("symbol_error"), 65_535);
        assert_eq!(max("link_downed"), 255);
        assert_eq!(max("local_link_integrity_errors"), 15);
    }
}
