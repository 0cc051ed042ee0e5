//! What the probe needs to know about a port: from sysfs whether it is ACTIVE, its data rate
//! and which GID is RoCE v2; from verbs its LID, GID and active MTU.

use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;

use super::engine::PortAddress;
use super::ffi::{self, Verbs};
use super::resources::Device;
use super::{ProbeError, Target};
use crate::rdma_port::{self, ETHERNET_LINK_LAYER};
use crate::sysfs::{AttributeReader, SysDir};

/// A port as sysfs describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct PortState {
    pub active: bool,
    pub ethernet: bool,
    /// The effective data rate (encoding removed), when the rate file says.
    pub data_rate_bytes_per_second: Option<f64>,
}

/// Reads `<sysfs>/class/infiniband/<device>/ports/<port>/{state,link_layer,rate}`.
pub fn read_state(sysfs: &Path, device: &str, port: u8) -> Result<PortState, ProbeError> {
    let dir = SysDir::open(sysfs, port_dir(device, port))?;
    let mut reader = AttributeReader::default();
    let state = dir.read("state", &mut reader)?.to_string();
    let state_id = rdma_port::parse_state_id(|| dir.path("state"), &state)?;
    let ethernet = dir.read("link_layer", &mut reader)? == ETHERNET_LINK_LAYER;
    let data_rate = dir
        .read("rate", &mut reader)
        .ok()
        .and_then(|rate| rdma_port::parse_rate(|| dir.path("rate"), rate).ok())
        .and_then(|rate| rate.data_bytes_per_second(ethernet));
    Ok(PortState {
        active: state_id == u64::from(ffi::PORT_ACTIVE),
        ethernet,
        data_rate_bytes_per_second: data_rate.filter(|rate| *rate > 0.0),
    })
}

/// The bytes the port sent and received so far, from its PMA counters
/// `counters/port_xmit_data` and `port_rcv_data` (4-byte units); `None` where the port has no
/// `counters/` (Soft-RoCE, irdma, bnxt_re) or prints `N/A` there (iWARP): its traffic is unknown.
pub fn read_traffic(
    sysfs: &Path,
    device: &str,
    port: u8,
) -> Result<Option<TrafficReading>, ProbeError> {
    let dir = SysDir::open(sysfs, port_dir(device, port))?;
    let counters = match dir.subdir("counters") {
        Ok(counters) => counters,
        Err(err) if err.is_absent() => return Ok(None),
        Err(err) => return Err(err.into()),
    };
    let mut reader = AttributeReader::default();
    let mut bytes = |name| -> Result<Option<u64>, ProbeError> {
        let words = counters.read(name, &mut reader)?.parse::<u64>().ok();
        Ok(words.map(|words| words.saturating_mul(4)))
    };
    let (Some(sent), Some(received)) = (bytes("port_xmit_data")?, bytes("port_rcv_data")?) else {
        return Ok(None);
    };
    Ok(Some(TrafficReading {
        at: std::time::Instant::now(),
        sent,
        received,
    }))
}

/// A reading of a port's traffic counters.
#[derive(Debug, Clone, Copy)]
pub struct TrafficReading {
    pub at: std::time::Instant,
    pub sent: u64,
    pub received: u64,
}

/// Whether the port moved more than `share` of its data rate in either direction between two
/// readings: a job is using it. A counter that went back (reset) says nothing, nor does a
/// window of no length.
pub fn busy(
    before: TrafficReading,
    after: TrafficReading,
    data_rate_bytes_per_second: f64,
    share: f64,
) -> bool {
    let seconds = after.at.saturating_duration_since(before.at).as_secs_f64();
    let over = |before: u64, after: u64| {
        after.checked_sub(before).is_some_and(|moved| {
            seconds > 0.0 && moved as f64 / seconds > share * data_rate_bytes_per_second
        })
    };
    over(before.sent, after.sent) || over(before.received, after.received)
}

/// Under `--path.sysfs`.
fn port_dir(device: &str, port: u8) -> String {
    format!("class/infiniband/{device}/ports/{port}")
}

/// The GID index to use on a RoCE port: the first RoCE v2 entry, preferring an IPv4-mapped GID
/// (routable between hosts) over a link-local one. Unused entries fail to read; they are skipped.
pub fn roce_v2_gid_index(sysfs: &Path, device: &str, port: u8) -> Result<u8, ProbeError> {
    let dir = SysDir::open(sysfs, port_dir(device, port))?;
    let types = dir.subdir("gid_attrs/types")?;
    let mut reader = AttributeReader::default();
    // Names that are no index, UTF-8 or not, are no GID entry.
    let mut indexes: Vec<u8> = types
        .entries()?
        .iter()
        .filter_map(|entry| entry.name().ok()?.parse().ok())
        .filter(|index: &u8| {
            types
                .read(&index.to_string(), &mut reader)
                .is_ok_and(|kind| kind == "RoCE v2")
        })
        .collect();
    indexes.sort_unstable();
    let mut gid = |index: &u8| {
        dir.read(&format!("gids/{index}"), &mut reader)
            .map(str::to_string)
    };
    let ipv4_mapped = indexes.iter().find(|index| {
        gid(index).is_ok_and(|text| text.starts_with("0000:0000:0000:0000:0000:ffff:"))
    });
    ipv4_mapped
        .or(indexes.first())
        .copied()
        .ok_or(ProbeError::NoRoceV2Gid)
}

/// Opens the target's device and resolves its port's address.
pub fn open(verbs: &Arc<Verbs>, target: &Target) -> Result<(Rc<Device>, PortAddress), ProbeError> {
    let device = Device::open(verbs.clone(), &target.device)?;
    let address = resolve_address(
        &device,
        &target.sysfs,
        &target.device,
        target.port,
        target.gid_index,
    )?;
    Ok((device, address))
}

/// The port's address for connecting QPs: LID, or on RoCE the chosen GID; and its active MTU.
fn resolve_address(
    device: &Device,
    sysfs: &Path,
    device_name: &str,
    port: u8,
    gid_index: Option<u8>,
) -> Result<PortAddress, ProbeError> {
    let attr = device.query_port(port)?;
    if attr.state != ffi::PORT_ACTIVE {
        return Err(ProbeError::PortNotActive);
    }
    let gid = match (attr.link_layer, gid_index) {
        (ffi::LINK_LAYER_ETHERNET, None) => {
            let index = roce_v2_gid_index(sysfs, device_name, port)?;
            Some((index, device.query_gid(port, index)?))
        }
        (_, Some(index)) => Some((index, device.query_gid(port, index)?)),
        _ => None,
    };
    Ok(PortAddress {
        port,
        lid: attr.lid,
        gid,
        active_mtu: u8::try_from(attr.active_mtu).unwrap_or(1),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_port_moving_more_than_its_share_is_busy() {
        let start = Instant::now();
        let reading = |seconds, sent, received| TrafficReading {
            at: start + Duration::from_secs(seconds),
            sent,
            received,
        };
        // 12.5 GB/s (EDR): 5 % is 625 MB/s, in either direction.
        let rate = 12.5e9;
        let quiet = reading(0, 0, 0);
        assert!(busy(quiet, reading(10, 6_300_000_000, 0), rate, 0.05));
        assert!(busy(quiet, reading(10, 0, 6_300_000_000), rate, 0.05));
        assert!(!busy(
            quiet,
            reading(10, 6_200_000_000, 6_200_000_000),
            rate,
            0.05
        ));
        assert!(
            !busy(reading(0, 5, 5), reading(10, 4, 4), rate, 0.05),
            "went back"
        );
        assert!(
            !busy(reading(3, 0, 0), reading(3, 1 << 40, 0), rate, 0.05),
            "no window"
        );
        assert!(
            busy(quiet, reading(1, 1, 0), rate, 0.0),
            "share 0: any traffic"
        );
        assert!(
            !busy(quiet, reading(1, 12_000_000_000, 0), rate, 1.0),
            "share 1: never"
        );
    }

    #[test]
    fn traffic_is_read_from_the_pma_counters_in_4_byte_units() {
        let root = tempfile::tempdir().unwrap();
        let port = "class/infiniband/mlx5_0/ports/1";
        write(
            root.path(),
            &format!("{port}/counters/port_xmit_data"),
            "1000\n",
        );
        write(
            root.path(),
            &format!("{port}/counters/port_rcv_data"),
            "24\n",
        );
        let reading = read_traffic(root.path(), "mlx5_0", 1).unwrap().unwrap();
        assert_eq!((reading.sent, reading.received), (4000, 96));
        write(
            root.path(),
            &format!("{port}/counters/port_rcv_data"),
            "N/A (no PMA)\n",
        );
        assert!(read_traffic(root.path(), "mlx5_0", 1).unwrap().is_none());
        // Soft-RoCE: hw_counters only, no counters/.
        write(
            root.path(),
            "class/infiniband/rxe0/ports/1/hw_counters/sent_pkts",
            "5\n",
        );
        assert!(read_traffic(root.path(), "rxe0", 1).unwrap().is_none());
        assert!(read_traffic(root.path(), "nosuch", 1).is_err());
    }

    fn write(root: &Path, rel: &str, content: &str) {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    /// A RoCE port with its GID table: `(index, type, gid)`.
    fn roce_port(root: &Path, device: &str, gids: &[(u8, &str, &str)]) -> String {
        let port = format!("class/infiniband/{device}/ports/1");
        write(root, &format!("{port}/state"), "4: ACTIVE\n");
        write(root, &format!("{port}/link_layer"), "Ethernet\n");
        write(root, &format!("{port}/rate"), "2.5 Gb/sec (1X SDR)\n");
        for (index, kind, gid) in gids {
            write(
                root,
                &format!("{port}/gid_attrs/types/{index}"),
                &format!("{kind}\n"),
            );
            write(root, &format!("{port}/gids/{index}"), &format!("{gid}\n"));
        }
        port
    }

    /// Soft-RoCE on 6.12 with an IPv4 address on its netdev, as a guest of the kernel lab
    /// showed it: RoCE v2 entries only, the link-local GID first.
    const RXE_GIDS: [(u8, &str, &str); 2] = [
        (0, "RoCE v2", "fe80:0000:0000:0000:a046:15ff:febc:71d5"),
        (1, "RoCE v2", "0000:0000:0000:0000:0000:ffff:0a00:0001"),
    ];

    #[test]
    fn rxe_uses_its_ipv4_mapped_gid() {
        let root = tempfile::tempdir().unwrap();
        roce_port(root.path(), "rxe0", &RXE_GIDS);
        assert_eq!(roce_v2_gid_index(root.path(), "rxe0", 1).unwrap(), 1);
    }

    #[test]
    fn roce_v1_entries_are_skipped() {
        // mlx5 lists a RoCE v1 and a RoCE v2 entry per address.
        let root = tempfile::tempdir().unwrap();
        let link_local = "fe80:0000:0000:0000:b4e3:5aff:fe10:0c01";
        let ipv4 = "0000:0000:0000:0000:0000:ffff:0a00:0001";
        let port = roce_port(
            root.path(),
            "mlx5_0",
            &[
                (0, "IB/RoCE v1", link_local),
                (1, "RoCE v2", link_local),
                (2, "IB/RoCE v1", ipv4),
                (3, "RoCE v2", ipv4),
            ],
        );
        assert_eq!(roce_v2_gid_index(root.path(), "mlx5_0", 1).unwrap(), 3);
        // Without an IPv4 address: the link-local RoCE v2 entry.
        for index in [2, 3] {
            std::fs::remove_file(root.path().join(format!("{port}/gid_attrs/types/{index}")))
                .unwrap();
        }
        assert_eq!(roce_v2_gid_index(root.path(), "mlx5_0", 1).unwrap(), 1);
        // RoCE v1 only: refused.
        std::fs::remove_file(root.path().join(format!("{port}/gid_attrs/types/1"))).unwrap();
        assert!(matches!(
            roce_v2_gid_index(root.path(), "mlx5_0", 1),
            Err(ProbeError::NoRoceV2Gid)
        ));
    }

    #[test]
    fn state_and_data_rate() {
        let root = tempfile::tempdir().unwrap();
        let port = roce_port(root.path(), "rxe0", &RXE_GIDS);
        // Ethernet rates are data rates already: 2.5 Gb/s is 312.5 MB/s.
        assert_eq!(
            read_state(root.path(), "rxe0", 1).unwrap(),
            PortState {
                active: true,
                ethernet: true,
                data_rate_bytes_per_second: Some(312_500_000.0)
            }
        );
        write(root.path(), &format!("{port}/state"), "1: DOWN\n");
        write(root.path(), &format!("{port}/link_layer"), "InfiniBand\n");
        write(root.path(), &format!("{port}/rate"), "40 Gb/sec (4X QDR)\n");
        let down = read_state(root.path(), "rxe0", 1).unwrap();
        assert!(!down.active);
        assert_eq!(down.data_rate_bytes_per_second, Some(4e9));
        assert!(read_state(root.path(), "rxe0", 2).is_err());
    }
}
