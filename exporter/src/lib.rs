//! hpcnode_exporter: a Prometheus exporter for HPC node driver stacks.
//!
//! See ARCHITECTURE.md at the repository root for the code map and invariants.

pub mod check;
pub mod collector;
pub mod collectors;
pub mod config;
pub mod dynlib;
pub mod elf_versions;
pub mod error;
pub mod ethtool_ioctl;
pub mod exposition;
pub mod flags;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
pub mod http;
pub mod kernel;
pub mod kernel_version;
pub mod ld_cache;
pub mod logging;
pub mod metrics;
pub mod netlink;
pub mod privileges;
pub mod rdma_port;
pub mod roots;
pub mod scrape;
pub mod slurm_job;
pub(crate) mod sync;
pub mod sysfs;
pub mod transceiver;
pub mod vfio_holder_events;
pub mod web_config;

#[cfg(test)]
mod test_strategies;
