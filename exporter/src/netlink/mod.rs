//! Netlink protocols the exporter speaks, one module per family. Only RDMA today; the ebpf
//! collector's uevent socket (`NETLINK_KOBJECT_UEVENT`) stays with the code that reads it.

pub mod rdma;
