//! Netlink protocols the exporter speaks, one module per family: RDMA, and ethtool over generic
//! netlink for module EEPROM. The ebpf
//! collector's uevent socket (`NETLINK_KOBJECT_UEVENT`) stays with the code that reads it.

pub mod ethtool;
pub mod rdma;
