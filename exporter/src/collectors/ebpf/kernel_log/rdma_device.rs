//! The RDMA device a driver health line is about, as an `rdma_device` label: mlx5 names the
//! PCI function, the TX watchdog the netdev, and the alerts and dashboards speak of `mlx5_0`.
//! Resolved when the line is counted (lines are rare), so a series keeps its labels even if the
//! device goes later; empty where the node has no RDMA device on that function or netdev.

use std::path::Path;

/// The events that get the label: those of the RDMA drivers' patterns.
pub const MAPPED_EVENTS: &[&str] = &[
    "mlx5_cmd_timeout",
    "mlx5_health_compromised",
    "mlx5_fatal_error",
    "mlx5_health_syndrome",
    "mlx5_port_module",
    "netdev_tx_timeout",
];

/// Appends `rdma_device` to the labels of a mapped event: the first entry (by name) of the PCI
/// function's `infiniband/` directory (`device`, as mlx5 prints it: `0000:3b:00.0`), else of the
/// netdev's parent device (`netdev`: a RoCE port's Ethernet netdev or an IPoIB one).
pub fn add_label(sysfs: &Path, event: &str, labels: &mut Vec<(&'static str, String)>) {
    if !MAPPED_EVENTS.contains(&event) {
        return;
    }
    let value = |name: &str| {
        labels
            .iter()
            .find(|(label, value)| *label == name && is_file_name(value))
            .map(|(_, value)| value.as_str())
    };
    let by_function = value("device").map(|pci| sysfs.join("bus/pci/devices").join(pci));
    let by_netdev =
        value("netdev").map(|netdev| sysfs.join("class/net").join(netdev).join("device"));
    let device = [by_function, by_netdev]
        .into_iter()
        .flatten()
        .find_map(|parent| first_entry(&parent.join("infiniband")))
        .unwrap_or_default();
    labels.push(("rdma_device", device));
}

/// A captured value used as a path component: never `..` or a path.
fn is_file_name(value: &str) -> bool {
    !value.is_empty() && value != "." && value != ".." && !value.contains('/')
}

fn first_entry(dir: &Path) -> Option<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    names.into_iter().next()
}

#[cfg(test)]
mod tests;
