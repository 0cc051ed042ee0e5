use std::collections::HashMap;
use std::path::Path;

use super::*;
use crate::collector::Collector;
use crate::collectors::rdma::{NameFilter, RdmaCollector, CLASS_DIR};
use crate::netlink::route::link::encode::{reply, vf_info};
use crate::netlink::route::link::{decode, VfCounter};
use crate::sysfs::Entry;

/// Replies by interface index, as the kernel would build them, decoded as the socket does.
struct Replies(HashMap<u32, Vec<u8>>);

impl VfSource for Replies {
    fn vf_stats(&self, ifindex: u32, _: Instant) -> Result<Vec<VfStats>, RequestError> {
        let datagram = self.0.get(&ifindex).ok_or(RequestError::Timeout)?;
        Ok(decode(datagram, 1, ifindex)?)
    }
}

/// `class/infiniband/<device>` over the PCI function `pf` with `vfs` VFs (at functions 2, 3,
/// ...) and the netdevs `(name, ifindex)`.
fn pf(root: &Path, device: &str, pf: &str, vfs: u32, netdevs: &[(&str, u32)]) {
    let function = root.join("devices/pci0000:3a/0000:3a:00.0").join(pf);
    std::fs::create_dir_all(function.join("net")).unwrap();
    std::fs::write(function.join("sriov_numvfs"), format!("{vfs}\n")).unwrap();
    for vf in 0..vfs {
        let address = format!("{}.{}", &pf[..pf.len() - 2], vf + 2);
        std::fs::create_dir_all(function.parent().unwrap().join(&address)).unwrap();
        std::os::unix::fs::symlink(
            format!("../{address}"),
            function.join(format!("virtfn{vf}")),
        )
        .unwrap();
    }
    for (name, ifindex) in netdevs {
        std::fs::create_dir_all(function.join("net").join(name)).unwrap();
        std::fs::write(
            function.join("net").join(name).join("ifindex"),
            format!("{ifindex}\n"),
        )
        .unwrap();
    }
    let class_device = root.join(CLASS_DIR).join(device);
    std::fs::create_dir_all(&class_device).unwrap();
    let target = format!("../../../devices/pci0000:3a/0000:3a:00.0/{pf}");
    std::os::unix::fs::symlink(target, class_device.join("device")).unwrap();
}

/// The `hpcnode_rdma_vf_stat` samples of one read of `device`, and the errors.
fn read_vfs(root: &Path, device: &str, replies: Replies) -> (Vec<(String, Value)>, usize) {
    let mut collector = RdmaCollector::new(root.to_path_buf(), NameFilter::All);
    collector.vf_source = Some(Box::new(replies));
    let mut out = Output::default();
    collector.collect_unit(&Entry::Name(device.to_string()), &mut out);
    let families = out.samples.families();
    let family = families.iter().find(|f| f.desc.name == VF_STAT.name);
    let samples = family.into_iter().flat_map(|family| family.samples());
    let samples = samples
        .map(|(labels, value)| (labels.to_string(), value))
        .collect();
    (samples, out.errors.len())
}

/// mlx5e's `mlx5e_get_vf_stats()`: the e-switch vport's counters, all eight.
#[test]
fn an_ethernet_pfs_vfs_by_pci_address() {
    let tmp = tempfile::tempdir().unwrap();
    pf(tmp.path(), "mlx5_0", "0000:3b:00.0", 2, &[("ens1f0np0", 4)]);
    let counters = |base: u64| -> Vec<_> {
        VfCounter::ALL
            .iter()
            .zip(base..)
            .map(|(&c, v)| (c, v))
            .collect()
    };
    let vfs = [vf_info(0, &counters(10)), vf_info(1, &counters(20))];
    let replies = Replies(HashMap::from([(4, reply(1, 4, "ens1f0np0", Some(&vfs)))]));
    let (samples, errors) = read_vfs(tmp.path(), "mlx5_0", replies);
    assert_eq!(errors, 0);
    assert_eq!(samples.len(), 16);
    let labels = |vf: u32, counter: &str| {
        format!(
            "device=\"mlx5_0\",netdev=\"ens1f0np0\",vf=\"{vf}\",vf_address=\"0000:3b:00.{}\",counter=\"{counter}\"",
            vf + 2
        )
    };
    assert!(
        samples.contains(&(labels(0, "rx_packets"), Value::Int(10))),
        "{samples:?}"
    );
    assert!(
        samples.contains(&(labels(1, "tx_bytes"), Value::Int(23))),
        "{samples:?}"
    );
    assert!(
        samples.contains(&(labels(1, "tx_dropped"), Value::Int(27))),
        "{samples:?}"
    );
}

/// IPoIB's PF netdev (`ipoib_get_vf_stats()` -> `mlx5_ib_get_vf_stats()`): unicast packets
/// and bytes and multicast packets; the kernel writes the other counters as 0.
#[test]
fn an_infiniband_pfs_vfs_through_ipoib() {
    let tmp = tempfile::tempdir().unwrap();
    pf(tmp.path(), "mlx5_1", "0000:3b:00.1", 1, &[("ib0", 7)]);
    let filled = [
        (VfCounter::RxPackets, 5),
        (VfCounter::TxPackets, 6),
        (VfCounter::RxBytes, 5 * 4096),
        (VfCounter::TxBytes, 6 * 4096),
        (VfCounter::Broadcast, 0),
        (VfCounter::Multicast, 2),
        (VfCounter::RxDropped, 0),
        (VfCounter::TxDropped, 0),
    ];
    let replies = Replies(HashMap::from([(
        7,
        reply(1, 7, "ib0", Some(&[vf_info(0, &filled)])),
    )]));
    let (samples, errors) = read_vfs(tmp.path(), "mlx5_1", replies);
    assert_eq!(errors, 0);
    let rx_bytes = samples
        .iter()
        .find(|(labels, _)| labels.contains("rx_bytes"))
        .unwrap();
    assert_eq!(
        rx_bytes,
        &(
            "device=\"mlx5_1\",netdev=\"ib0\",vf=\"0\",vf_address=\"0000:3b:00.2\",counter=\"rx_bytes\"".to_string(),
            Value::Int(5 * 4096)
        )
    );
}

/// A function without VFs asks nothing (the source would fail the read); a netdev without
/// VF operations (a representor) has no VFs; a failed request is one error, and the other
/// netdevs are still read.
#[test]
fn only_functions_with_vfs_are_asked_and_a_failure_hides_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    pf(tmp.path(), "mlx5_2", "0000:5e:00.0", 0, &[("ens2f0", 9)]);
    assert_eq!(
        read_vfs(tmp.path(), "mlx5_2", Replies(HashMap::new())),
        (Vec::new(), 0)
    );

    pf(
        tmp.path(),
        "mlx5_3",
        "0000:5e:00.1",
        1,
        &[("a_rep", 11), ("b_lost", 12), ("c_pf", 13)],
    );
    let vfs = [vf_info(0, &[(VfCounter::RxBytes, 99)])];
    let replies = Replies(HashMap::from([
        (11, reply(1, 11, "a_rep", None)),
        (13, reply(1, 13, "c_pf", Some(&vfs))),
    ]));
    let (samples, errors) = read_vfs(tmp.path(), "mlx5_3", replies);
    assert_eq!(errors, 1);
    assert_eq!(
        samples,
        vec![(
            "device=\"mlx5_3\",netdev=\"c_pf\",vf=\"0\",vf_address=\"0000:5e:00.2\",counter=\"rx_bytes\"".to_string(),
            Value::Int(99)
        )]
    );
}
