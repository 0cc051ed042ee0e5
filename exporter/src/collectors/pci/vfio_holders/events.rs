//! Holders from the `vfio_holders` probe's set ([`crate::vfio_holder_events`]): each recorded
//! process's descriptors are read, and read again only when the probe has a newer event of it,
//! one of its vfio descriptors no longer reads as it did, the devices bound to vfio-pci
//! changed, or [`MAX_AGE`] passed. A scrape then reads a few links per holder, however many
//! descriptors the node has open.
//!
//! The set is seeded by a scan of every process after each attach, as the scan without the
//! probe would read them, up to its budget a scrape: a node with more descriptors is seeded
//! over several scrapes, each going on from the pid the last one stopped at, the recorded
//! processes read all the while.
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
    /// While the seeding scan is not over: the pid it goes on from.
    seed_from: Option<u32>,
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
    /// The holds of the processes the probe recorded, once the scan after its attach (none
    /// where no vfio file can be open; over several scrapes where the node has more
    /// descriptors than a scan's budget) has added those that held before it; `false` when its
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
        let mut state = match state.filter(|state| state.attach == tracking.attach) {
            Some(state) => state,
            None => EventsState {
                attach: tracking.attach,
                bound: devices.to_vec(),
                processes: HashMap::new(),
                // Nothing to seed where no vfio file can be open.
                seed_from: (!none_open).then_some(0),
            },
        };
        let read = self.read_recorded(&proc, devices, nodes, tracking, &mut state);
        let seeded =
            read.and_then(|outcome| self.seed(&proc, nodes, tracking, &mut state, outcome));
        let (outcome, from_events) = match seeded {
            Ok(read) => read,
            Err(reason) => {
                collector.log_events_unusable(&reason);
                return false;
            }
        };
        *lock(&collector.events) = Some(state);
        *lock(&collector.kept_scan) = None;
        let from_events = Value::Int(u64::from(from_events));
        self.push(&VFIO_HOLDERS_FROM_EVENTS, Vec::new(), from_events);
        self.push_outcome(Some(&proc), devices, &outcome);
        true
    }

    /// The scan after an attach, of every process not recorded yet, in pid order and from
    /// where the last scrape's stopped at its budget (a node with more descriptors than the
    /// budget is seeded over several scrapes): those with a vfio file open are added to the
    /// set. `recorded`: the recorded processes' outcome, to which the scan's is added; whether
    /// it says all (the seeding is over).
    fn seed(
        &mut self,
        proc: &SysDir,
        nodes: &mut VfioNodes<'_>,
        tracking: &Tracking,
        state: &mut EventsState,
        mut recorded: Outcome,
    ) -> Result<(Outcome, bool), String> {
        let Some(from) = state.seed_from else {
            return Ok((recorded, true));
        };
        let known = &state.processes;
        let (scan, stopped_at) =
            self.scan_processes_from(proc, nodes, from, |pid| known.contains_key(&pid));
        if scan.stopped {
            self.collector.log_scan_stopped(scan.descriptors);
        }
        for (pid, _) in &scan.watched {
            tracking.set.seed(*pid)?;
        }
        state.seed_from = stopped_at;
        recorded.add(&Outcome::from(scan));
        Ok((recorded, false))
    }

    /// Every recorded process's holds: as last read where that still stands, else read now. A
    /// process gone is removed from the set.
    fn read_recorded(
        &mut self,
        proc: &SysDir,
        devices: &[String],
        nodes: &mut VfioNodes<'_>,
        tracking: &Tracking,
        state: &mut EventsState,
    ) -> Result<Outcome, String> {
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
        Ok(outcome)
    }
}

/// `CLOCK_MONOTONIC` in ns, the clock of `bpf_ktime_get_ns`.
pub(super) fn monotonic_ns() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    (now.tv_sec as u64).saturating_mul(1_000_000_000) + now.tv_nsec as u64
}
