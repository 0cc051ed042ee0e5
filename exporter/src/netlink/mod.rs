//! Netlink protocols the exporter speaks, one module per family: RDMA, routing for a PF's
//! per-VF statistics, and over generic netlink (`generic/`) ethtool for module EEPROM and FEC
//! counters and devlink for health reporters; the ebpf collector's
//! uevent socket (`NETLINK_KOBJECT_UEVENT`) stays with the code that reads it.

pub mod datagram;
pub mod devlink;
pub mod ethtool;
pub mod generic;
pub mod rdma;
pub mod route;
