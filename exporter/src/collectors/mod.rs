//! The registry: every collector, once, in the order their output appears. The only place
//! that names them; `main` hands the list to command-line parsing and, once started, to the
//! scraper. Adding a collector is one module here and one row in [`ALL`].

use crate::collector::Registration;

pub mod ebpf;
pub mod mic;
pub mod modules;
pub mod pci;
pub mod rdma;
pub mod rdma_resources;
/// Issue 40's collector is on the ldcache40 branch: the lead replaces this with its
/// `mod.rs` and a `mod providers;` there.
pub mod rdma_userspace {
    pub mod providers;
}
pub mod verbs;

pub static ALL: [Registration; 7] = [
    rdma::REGISTRATION,
    rdma_resources::REGISTRATION,
    mic::REGISTRATION,
    modules::REGISTRATION,
    ebpf::REGISTRATION,
    pci::REGISTRATION,
    verbs::REGISTRATION,
];
