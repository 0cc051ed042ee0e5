//! The collectors, and the one list that registers them.

pub mod ebpf;
pub mod mic;
pub mod modules;
pub mod pci;
pub mod rdma;
pub mod verbs;
