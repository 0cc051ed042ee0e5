use std::os::unix::fs::symlink;
use std::path::Path;

use super::*;
use crate::collectors::ebpf::kernel_log::patterns::{LineKind, PATTERNS};
use crate::collectors::ebpf::kernel_log::KernelLogCounts;

/// A sysfs as the kernel lays out a ConnectX port: the PCI function with its RDMA device and
/// Ethernet netdev, the bus and class links to them, and a netdev without RDMA (veth).
fn connectx_sysfs(root: &Path) {
    let function = root.join("devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0");
    std::fs::create_dir_all(function.join("infiniband/mlx5_0")).unwrap();
    std::fs::create_dir_all(function.join("net/enp59s0f0")).unwrap();
    symlink(
        "../../../0000:3b:00.0",
        function.join("net/enp59s0f0/device"),
    )
    .unwrap();
    std::fs::create_dir_all(root.join("bus/pci/devices")).unwrap();
    symlink(
        "../../../devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0",
        root.join("bus/pci/devices/0000:3b:00.0"),
    )
    .unwrap();
    std::fs::create_dir_all(root.join("class/net")).unwrap();
    symlink(
        "../../devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/net/enp59s0f0",
        root.join("class/net/enp59s0f0"),
    )
    .unwrap();
    std::fs::create_dir_all(root.join("devices/virtual/net/veth0")).unwrap();
    symlink(
        "../../devices/virtual/net/veth0",
        root.join("class/net/veth0"),
    )
    .unwrap();
}

fn labelled(
    sysfs: &Path,
    event: &str,
    labels: &[(&'static str, &str)],
) -> Vec<(&'static str, String)> {
    let mut labels = labels.iter().map(|(n, v)| (*n, v.to_string())).collect();
    add_label(sysfs, event, &mut labels);
    labels
}

fn rdma_device<'l>(labels: &'l [(&'static str, String)]) -> Option<&'l str> {
    labels
        .iter()
        .find(|(name, _)| *name == "rdma_device")
        .map(|(_, value)| value.as_str())
}

#[test]
fn the_pci_function_or_the_netdev_names_the_rdma_device() {
    let dir = tempfile::tempdir().unwrap();
    let sysfs = dir.path();
    connectx_sysfs(sysfs);
    let timeout = labelled(
        sysfs,
        "mlx5_cmd_timeout",
        &[
            ("device", "0000:3b:00.0"),
            ("command", "QUERY_VPORT_COUNTER"),
        ],
    );
    assert_eq!(rdma_device(&timeout), Some("mlx5_0"));
    let watchdog = [
        ("driver", "mlx5_core"),
        ("device", "0000:3b:00.0"),
        ("netdev", "enp59s0f0"),
    ];
    assert_eq!(
        rdma_device(&labelled(sysfs, "netdev_tx_timeout", &watchdog)),
        Some("mlx5_0")
    );
    // 5.10's watchdog line names the netdev alone.
    let old = [
        ("driver", "mlx5_core"),
        ("device", ""),
        ("netdev", "enp59s0f0"),
    ];
    assert_eq!(
        rdma_device(&labelled(sysfs, "netdev_tx_timeout", &old)),
        Some("mlx5_0")
    );
    // No RDMA device behind it, or not on this node: the label is there, empty.
    let veth = [("driver", "veth"), ("device", ""), ("netdev", "veth0")];
    assert_eq!(
        rdma_device(&labelled(sysfs, "netdev_tx_timeout", &veth)),
        Some("")
    );
    let gone = [("device", "0000:af:00.1")];
    assert_eq!(
        rdma_device(&labelled(sysfs, "mlx5_health_compromised", &gone)),
        Some("")
    );
    // A captured value is never a path.
    let escape = [
        ("driver", "x"),
        ("device", ".."),
        ("netdev", "../../bus/pci/devices/0000:3b:00.0"),
    ];
    assert_eq!(
        rdma_device(&labelled(sysfs, "netdev_tx_timeout", &escape)),
        Some("")
    );
    // Events that are not the RDMA drivers' get no label.
    let xid = labelled(
        sysfs,
        "nvidia_xid",
        &[("device", "0000:3b:00"), ("xid", "79")],
    );
    assert_eq!(rdma_device(&xid), None);
}

#[test]
fn every_mapped_event_is_a_pattern_s() {
    for event in MAPPED_EVENTS {
        assert!(
            PATTERNS.iter().any(|pattern| matches!(
                pattern.kind,
                LineKind::Event { event: name, .. } if name == *event
            )),
            "{event} is no pattern's event"
        );
    }
}

#[test]
fn a_counted_line_carries_the_rdma_device_it_names() {
    let dir = tempfile::tempdir().unwrap();
    connectx_sysfs(dir.path());
    let counts = KernelLogCounts::on(dir.path());
    counts.count_line("mlx5_core 0000:3b:00.0: poll_health:799:(pid 0): device's health compromised - reached miss count");
    assert_eq!(
        counts.snapshot(),
        vec![(
            (
                "mlx5_health_compromised",
                vec![
                    ("device", "0000:3b:00.0".to_string()),
                    ("rdma_device", "mlx5_0".to_string())
                ]
            ),
            1
        )]
    );
}
