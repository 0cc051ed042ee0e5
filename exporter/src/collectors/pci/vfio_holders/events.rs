//! Holders from the `vfio_holders` probe's set ([`crate::vfio_holder_events`]): each recorded
//! process's descriptors are read, and read again only when the probe has a newer event of it,
//! one of its vfio descriptors no longer reads as it did, the devices bound to vfio-pci
//! changed, or [`MAX_AGE`] passed. A scrape then reads a few links per holder, however many
//! descriptors the node has open.
//!
//! The probe records an event as its system call begins, before the new descriptor is in the
//! table: a read less than [`SETTLE`] after a process's event is done again at the next scrape.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::kept::{watched_unchanged, Outcome, MAX_AGE};
use super::{ProcessScan, Read, VfioNodes, VFIO_HOLDERS_FROM_EVENTS};
use crate::metrics::Value;
use crate::sync::lock;
use crate::sysfs::SysDir;
use crate::vfio_holder_events::Tracking;

/// Longer than any open or receive takes from its probe to its descriptor in the table.
const SETTLE: Duration = Duration::from_secs(5);

/// What the recorded processes held when last read.
pub(in crate::collectors::pci) struct EventsState {
    /// The attach whose set a scan seeded.
    attach: u64,
    /// The devices bound to vfio-pci then.
    bound: Vec<String>,
    processes: HashMap<u32, ReadProcess>,
}

struct ReadProcess {
    /// The time of its last event when it was read, and whether the read came [`SETTLE`] after.
    stamp: u64,
    settled: bool,
    read: Instant,
    /// Its descriptors that are vfio files, and what their links read.
    watched: Vec<(String, PathBuf)>,
    outcome: Outcome,
}

impl Read<'_> {
    /// The holds of the processes the probe recorded, once a full scan after its attach (none
    /// where no vfio file can be open) has added those that held before it; `false` when its
    /// set cannot say (the kernel side had no room for a process, or a map operation failed),
    /// and every process must be scanned.
    pub(super) fn holders_from_events(
        &mut self,
        devices: &[String],
        nodes: &mut VfioNodes<'_>,
        tracking: &Tracking,
        none_open: bool,
    ) -> bool {
        let collector = self.collector;
        let unusable = match tracking.set.dropped() {
            Ok(0) => None,
            Ok(_) => Some("its kernel side had no room for a process".to_string()),
            Err(err) => Some(err),
        };
        if let Some(reason) = unusable {
            collector.log_events_unusable(&reason);
            return false;
        }
        let Some(proc) = self.unit.reported(SysDir::open(&collector.procfs, "")) else {
            return true;
        };
        let state = lock(&collector.events).take();
        let read = match state.filter(|state| state.attach == tracking.attach) {
            Some(state) => self.read_recorded(&proc, devices, nodes, tracking, state),
            None => self.seed(&proc, devices, nodes, tracking, none_open),
        };
        let (outcome, state, from_events) = match read {
            Ok(read) => read,
            Err(reason) => {
                collector.log_events_unusable(&reason);
                return false;
            }
        };
        *lock(&collector.events) = state;
        *lock(&collector.kept_scan) = None;
        let from_events = Value::Int(u64::from(from_events));
        self.push(&VFIO_HOLDERS_FROM_EVENTS, Vec::new(), from_events);
        self.push_outcome(Some(&proc), devices, &outcome);
        true
    }

    /// The scan after an attach: every process (none while vfio's count proves no file open),
    /// those with a vfio file open added to the set. A scan stopped at its budget seeds nothing.
    fn seed(
        &mut self,
        proc: &SysDir,
        devices: &[String],
        nodes: &mut VfioNodes<'_>,
        tracking: &Tracking,
        none_open: bool,
    ) -> Result<(Outcome, Option<EventsState>, bool), String> {
        let scan = if none_open {
            ProcessScan::default()
        } else {
            self.scan_processes(proc, nodes)
        };
        if scan.stopped {
            self.collector.log_scan_stopped(scan.descriptors);
            return Ok((Outcome::from(scan), None, false));
        }
        for (pid, _) in &scan.watched {
            tracking.set.seed(*pid)?;
        }
        let state = EventsState {
            attach: tracking.attach,
            bound: devices.to_vec(),
            processes: HashMap::new(),
        };
        Ok((Outcome::from(scan), Some(state), false))
    }

    /// Every recorded process's holds: as last read where that still stands, else read now. A
    /// process gone is removed from the set.
    fn read_recorded(
        &mut self,
        proc: &SysDir,
        devices: &[String],
        nodes: &mut VfioNodes<'_>,
        tracking: &Tracking,
        mut state: EventsState,
    ) -> Result<(Outcome, Option<EventsState>, bool), String> {
        let collector = self.collector;
        let same_devices = state.bound == devices;
        let now = monotonic_ns();
        let mut outcome = Outcome::default();
        let mut processes = HashMap::new();
        let mut descriptors = 0;
        for (pid, stamp) in tracking.set.entries()? {
            let kept = state.processes.remove(&pid).filter(|read| {
                same_devices
                    && read.stamp == stamp
                    && read.settled
                    && read.read.elapsed() < MAX_AGE
                    && watched_unchanged(proc, pid, &read.watched)
            });
            let read = match kept {
                Some(read) => read,
                None if descriptors >= collector.max_descriptors => {
                    outcome.stopped = true;
                    continue;
                }
                None => {
                    let mut scan = ProcessScan::default();
                    if !self.scan_process(proc, pid, nodes, &mut scan) {
                        // Exited. A failure leaves it to be found gone again.
                        let _ = tracking.set.remove(pid);
                        continue;
                    }
                    descriptors += scan.descriptors;
                    let watched = scan.watched.pop().map(|(_, fds)| fds).unwrap_or_default();
                    ReadProcess {
                        stamp,
                        settled: now.saturating_sub(stamp) >= SETTLE.as_nanos() as u64,
                        read: Instant::now(),
                        watched,
                        outcome: Outcome::from(scan),
                    }
                }
            };
            outcome.add(&read.outcome);
            processes.insert(pid, read);
        }
        if outcome.stopped {
            collector.log_scan_stopped(descriptors);
        }
        state.bound = devices.to_vec();
        state.processes = processes;
        Ok((outcome, Some(state), true))
    }
}

/// `CLOCK_MONOTONIC` in ns, the clock of `bpf_ktime_get_ns`.
pub(super) fn monotonic_ns() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    (now.tv_sec as u64).saturating_mul(1_000_000_000) + now.tv_nsec as u64
}
