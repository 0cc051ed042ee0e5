//! The probe registry: one [`ProbeSpec`] per kernel probe, each in a module named after its
//! `ebpf/src/<name>.bpf.c`. The loader and the collector only iterate [`ALL`] and ask each
//! spec, so adding a probe is its `.bpf.c`, its module and one row here.

pub mod dmar_fault;
pub mod iommu_fault;
pub mod kernel_log;
pub mod module_load;
pub mod module_load_syscall;
pub mod module_sig_check;
pub mod rdma_port_events;
pub mod vfio;
pub mod vfio_holders;

use super::spec::ProbeSpec;

/// Every probe, in the order they attach and are listed.
pub const ALL: &[&ProbeSpec] = &[
    &module_load::SPEC,
    &module_sig_check::SPEC,
    &module_load_syscall::SPEC,
    &kernel_log::SPEC,
    &iommu_fault::SPEC,
    &dmar_fault::SPEC,
    &vfio::ENABLE,
    &vfio::AER,
    &vfio::PIN,
    &vfio_holders::SPEC,
    &rdma_port_events::SPEC,
];
