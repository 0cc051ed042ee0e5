//! A holder scan kept from one scrape to the next while nothing says a vfio file was opened or
//! closed, so that a node running VMs does not read every process's descriptors every scrape.
//!
//! Every open vfio file (group, cdev, container, device) holds a reference to the `vfio` module
//! (see the parent module), so while its count stays as it was, files were opened and closed
//! only in pairs. A pair that moved a hold from one process to another has its close in a
//! process the last scan saw with a vfio file open: those descriptors are read again each
//! scrape, and one that changed means a full scan. What neither shows, a descriptor handed on by
//! `fork` or `SCM_RIGHTS` while its first holder keeps it, waits for the next change, at most
//! [`MAX_AGE`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{vfio_device_node, ProcessScan, Unproven};
use crate::sysfs::SysDir;

/// The longest a kept scan is used: what it cannot see is found this late at worst.
pub(super) const MAX_AGE: Duration = Duration::from_secs(600);

/// What a holder scan found, owned, to be kept.
#[derive(Debug, Default)]
pub(super) struct Outcome {
    /// Per holding process: the devices bound to vfio-pci it holds, and the stale nodes.
    pub(super) holding: Vec<(u32, BTreeSet<String>, BTreeSet<String>)>,
    pub(super) unreadable: u64,
    pub(super) unproven: BTreeMap<Unproven, u64>,
    /// Whether the scan stopped at its budget.
    pub(super) stopped: bool,
}

impl Outcome {
    /// Adds another process's outcome to this one.
    pub(super) fn add(&mut self, other: &Outcome) {
        self.holding.extend(other.holding.iter().cloned());
        self.unreadable += other.unreadable;
        for (reason, count) in &other.unproven {
            *self.unproven.entry(*reason).or_default() += count;
        }
        self.stopped |= other.stopped;
    }
}

impl From<ProcessScan<'_>> for Outcome {
    fn from(scan: ProcessScan) -> Outcome {
        let holding = scan.holding.into_iter().map(|(pid, holds)| {
            let devices = holds.devices.into_iter().map(str::to_string).collect();
            (pid, devices, holds.stale)
        });
        Outcome {
            holding: holding.collect(),
            unreadable: scan.unreadable,
            unproven: scan.unproven,
            stopped: scan.stopped,
        }
    }
}

/// A full scan, with what tells whether it still holds.
pub(in crate::collectors::pci) struct KeptScan {
    /// The `vfio` module's reference count when it was made.
    refs: u64,
    /// The devices bound to vfio-pci then.
    bound: Vec<String>,
    made: Instant,
    /// The descriptors that were vfio files, by process, and what their links read.
    watched: Vec<(u32, Vec<(String, PathBuf)>)>,
    pub(super) outcome: Outcome,
}

impl KeptScan {
    pub(super) fn new(refs: u64, bound: &[String], mut scan: ProcessScan) -> KeptScan {
        KeptScan {
            refs,
            bound: bound.to_vec(),
            made: Instant::now(),
            watched: std::mem::take(&mut scan.watched),
            outcome: Outcome::from(scan),
        }
    }

    /// Whether this scan still says who holds what: the same count of `vfio` references, the
    /// same devices bound, not too old, and every watched descriptor still what it was.
    pub(super) fn holds(&self, refs: u64, bound: &[String], proc: &SysDir) -> bool {
        refs == self.refs
            && bound == self.bound
            && self.made.elapsed() < MAX_AGE
            && self
                .watched
                .iter()
                .all(|(pid, fds)| watched_unchanged(proc, *pid, fds))
    }
}

/// Whether each of process `pid`'s descriptors `fds` still reads as it did.
pub(super) fn watched_unchanged(proc: &SysDir, pid: u32, fds: &[(String, PathBuf)]) -> bool {
    fds.iter().all(|(fd, target)| {
        proc.link_target(&format!("{pid}/fd/{fd}"))
            .is_ok_and(|now| &now == target)
    })
}

/// Whether a descriptor whose link reads `target` is a vfio file: a group's or a cdev's node,
/// the container, or a device's file (`anon_inode:[vfio-device]`).
pub(super) fn is_vfio_file(target: &Path) -> bool {
    vfio_device_node(target).is_some()
        || target == Path::new("/dev/vfio/vfio")
        || target == Path::new("anon_inode:[vfio-device]")
}
