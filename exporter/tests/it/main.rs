//! The integration tests, one test binary: a module per area, linked once rather than once a
//! file. `cargo test --test it golden::` runs one module; `util` starts the real binary.
//! Tests that need a process to themselves (a counting global allocator, capabilities dropped on
//! every thread) are binaries of their own beside this folder: `allocations.rs`, `privileges.rs`.

mod util;

mod architecture;
mod check;
mod cli;
mod ebpf;
mod golden;
mod http;
mod listen;
mod log_hygiene;
mod metrics_catalog;
mod mic;
mod modules;
mod pci;
mod process;
mod rdma_userspace;
mod registry;
mod series_budget;
mod signals;
mod sysfs;
mod verbs;
mod web_config;
mod web_fail_closed;
