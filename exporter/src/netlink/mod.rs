//! Netlink protocols the exporter speaks, one module per family: RDMA, routing for a PF's
//! per-VF statistics, and ethtool over generic netlink for module EEPROM; the ebpf collector's
//! uevent socket (`NETLINK_KOBJECT_UEVENT`) stays with the code that reads it.

pub mod datagram;
pub mod ethtool;
pub mod rdma;
pub mod route;
