//! `vfio_holders`: the processes that may hold a vfio group's or device's file, recorded as they
//! open, receive or inherit one (vfio_holders.bpf.c), for the `pci` collector to read instead of
//! every process's descriptors ([`crate::vfio_holder_events`]). It counts nothing itself: what
//! it yields is its set, handed over each time it attaches, and the framework's attach and lost
//! events metrics.

use crate::collectors::ebpf::error::SyscallError;
use crate::collectors::ebpf::hooks::{attempt, with_companions, Attempt, Hook::*, Needs};
use crate::collectors::ebpf::maps::Maps;
use crate::collectors::ebpf::spec::{ProbeSpec, Shared};

pub const SPEC: ProbeSpec = ProbeSpec {
    name: "vfio_holders",
    object: aya::include_bytes_aligned!("../../../../../ebpf/vfio_holders.bpf.o"),
    attempts: ATTEMPTS,
    required_by_strict: false,
    target_modules: &["vfio"],
    needs_modules: false,
    lost_map: DROPPED,
    metrics: &[],
    started: None,
    samples: |_, _, _| Ok(()),
    follow: Some(follow),
};

const SET: &str = "vfio_candidates";
const DROPPED: &str = "vfio_candidates_dropped";

/// The opens, into the vfio module, with the receives and forks beside them (core kernel). The
/// cdev (`/dev/vfio/devices/vfio<N>`) is 6.6+.
const ATTEMPTS: &[Attempt] = &[with_companions(
    attempt(
        Kprobe,
        "vfio_holder_open",
        &["vfio_group_fops_open", "vfio_device_fops_cdev_open"],
        Needs::BtfOnX86_64,
    ),
    &[
        attempt(
            Kprobe,
            "vfio_holder_receive",
            &["security_file_receive"],
            Needs::BtfOnX86_64,
        ),
        attempt(
            RawTp,
            "vfio_holder_fork",
            &["sched_process_fork"],
            Needs::Btf,
        ),
    ],
)];

fn follow(maps: Option<&Maps<'_>>, shared: &Shared) -> Result<(), SyscallError> {
    match maps {
        Some(maps) => shared
            .vfio_holder_events
            .attached(maps.candidate_set(SET, DROPPED)?),
        None => shared.vfio_holder_events.detached(),
    }
    Ok(())
}
