//! Netlink protocols the exporter speaks, one module per family: RDMA, and routing for a PF's
//! per-VF statistics; the ebpf collector's uevent socket (`NETLINK_KOBJECT_UEVENT`) stays with
//! the code that reads it.

pub mod datagram;
pub mod rdma;
pub mod route;
