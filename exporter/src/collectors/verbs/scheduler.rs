//! When probes run: the plain schedule (every target each interval) and the mesh's (this node's
//! probes each in its slot of the round), the claims that keep a probe and a responder session
//! off one port, and the stop signal both threads wait on.

use std::collections::{BTreeSet, HashMap};
use std::hash::BuildHasher;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};

use super::cli::VerbsSettings;
use super::ffi::Verbs;
use super::mesh::{self, MeshNode};
use super::results::Service;
use super::run::{probe, ProbeError, RunMode, Target};
use super::{devices, first_device, port};
use crate::sync::{lock, wait_while};
use crate::sysfs::Entry;

/// The ports a probe or a responder session uses now: never two on one port at once.
#[derive(Debug, Default)]
pub struct PortClaims(Mutex<BTreeSet<(String, u8)>>);

/// A port in use until dropped.
#[derive(Debug)]
pub struct PortClaim {
    claims: Arc<PortClaims>,
    port: (String, u8),
}

impl PortClaims {
    /// The target's port, unless something else uses it now.
    pub fn claim(self: &Arc<Self>, target: &Target) -> Option<PortClaim> {
        let port = (target.device.clone(), target.port);
        lock(&self.0).insert(port.clone()).then(|| PortClaim {
            claims: self.clone(),
            port,
        })
    }
}

impl Drop for PortClaim {
    fn drop(&mut self) {
        lock(&self.claims.0).remove(&self.port);
    }
}

/// Tells the scheduler and the responder that the exporter is stopping.
#[derive(Default)]
pub(super) struct Stop {
    stopped: Mutex<bool>,
    wake: Condvar,
}

impl Stop {
    pub(super) fn stop(&self) {
        *lock(&self.stopped) = true;
        self.wake.notify_all();
    }

    pub(super) fn is_stopped(&self) -> bool {
        *lock(&self.stopped)
    }

    /// Sleeps for `delay` or until stopped; whether it was stopped.
    pub(super) fn sleep(&self, delay: Duration) -> bool {
        let stopped = lock(&self.stopped);
        *wait_while(&self.wake, stopped, delay, |stopped| !*stopped)
    }
}

/// A random duration below `bound` (zero when it is zero), so that nodes do not probe in step.
fn random_below(bound: Duration) -> Duration {
    let nanos = u64::try_from(bound.as_nanos()).unwrap_or(u64::MAX);
    if nanos == 0 {
        return Duration::ZERO;
    }
    let random = std::collections::hash_map::RandomState::new().hash_one(Instant::now());
    Duration::from_nanos(random % nanos)
}

/// Now, since the epoch: a mesh's rounds follow the wall clock, the same on every node.
fn since_epoch() -> Duration {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
}

/// What the scheduler thread works with.
pub(super) struct Scheduler<'a> {
    pub(super) service: &'a Service,
    pub(super) verbs: &'a Arc<Verbs>,
    pub(super) settings: &'a VerbsSettings,
    pub(super) token: &'a [u8],
    pub(super) sysfs: &'a Path,
    pub(super) claims: &'a Arc<PortClaims>,
    pub(super) stop: &'a Stop,
}

/// The shortest window over which a port's traffic is judged: a first run waits this long.
const TRAFFIC_WINDOW: Duration = Duration::from_secs(1);

impl Scheduler<'_> {
    /// Runs every target in turn, then sleeps the interval plus jitter. The first round starts
    /// after a jitter alone.
    pub(super) fn run(&self, interval: Duration) {
        let mut readings = HashMap::new();
        let mut delay = random_below(self.settings.jitter);
        loop {
            if self.stop.sleep(delay) {
                return;
            }
            let devices = if self.settings.devices.is_empty() {
                devices(self.sysfs)
            } else {
                self.settings
                    .devices
                    .iter()
                    .cloned()
                    .map(Entry::Name)
                    .collect()
            };
            let run = match &self.settings.measurement.peer {
                Some(address) => RunMode::Peer(address),
                None => RunMode::Loopback,
            };
            for device in devices {
                // Counted in the next scrape, as a failed run is.
                match device.into_name() {
                    Ok(device) => self.run_target(&self.target(device), run, &mut readings),
                    Err(err) => self.service.failures.push(err.into()),
                }
            }
            delay = interval + random_below(self.settings.jitter);
        }
    }

    /// The configured port of `device`.
    fn target(&self, device: String) -> Target {
        let measurement = &self.settings.measurement;
        Target {
            sysfs: self.sysfs.to_path_buf(),
            device,
            port: measurement.port,
            gid_index: measurement.gid_index,
        }
    }

    /// Runs the mesh: each round, the probes the schedule gives this node, each at the start of
    /// its slot; the peers file is read again at each round when it changed.
    pub(super) fn run_mesh(&self, interval: Duration, mut node: MeshNode) {
        let mut readings = HashMap::new();
        let mut last_round_peers: Vec<mesh::Node> = Vec::new();
        loop {
            let (round, into) = mesh::round_at(since_epoch(), interval);
            let round_start = since_epoch().saturating_sub(into);
            if let Err(err) = node.refresh() {
                self.service.failures.push(err.into());
            }
            self.service.set_mesh(node.state());
            if !node.state().member {
                self.service.failures.push(node.not_member());
            }
            let device = self.settings.devices.first().cloned();
            let device = device.or_else(|| first_device(self.sysfs));
            let probes = node.probes(round);
            if let Some(device) = device {
                let target = self.target(device);
                let peers: Vec<_> = probes.iter().map(|(_, peer)| *peer).collect();
                let kept: Vec<_> = peers.iter().copied().chain(&last_round_peers).collect();
                self.service.keep_mesh_peers(&target, &kept);
                last_round_peers = peers.into_iter().cloned().collect();
                let fanout = mesh::effective_fanout(node.peers.nodes().len(), node.fanout);
                let slot_length = mesh::slot_start(interval, fanout, 1);
                for (slot, peer) in probes {
                    let at = mesh::slot_start(interval, fanout, slot);
                    if at + slot_length <= into {
                        // Started mid-round: this slot has passed. (A round that starts late
                        // because the last one overran still runs its first slot, late.)
                        continue;
                    }
                    let delay = (round_start + at).saturating_sub(since_epoch());
                    if self.stop.sleep(delay) {
                        return;
                    }
                    self.run_target(&target, RunMode::Mesh(peer), &mut readings);
                }
            }
            let next = round_start + interval;
            if self.stop.sleep(next.saturating_sub(since_epoch())) {
                return;
            }
        }
    }

    /// One target's turn: skipped while a responder session uses the port or a job does.
    fn run_target(
        &self,
        target: &Target,
        run: RunMode,
        readings: &mut HashMap<String, port::TrafficReading>,
    ) {
        let measurement = &self.settings.measurement;
        let Some(_claim) = self.claims.claim(target) else {
            self.service.skip(target, run, "port_in_use");
            return;
        };
        let key = format!("{}/{}", target.device, target.port);
        if self.port_busy(target, readings.remove(&key)) {
            self.service.skip(target, run, "port_busy");
        } else {
            let started = Instant::now();
            // A bug in one run must not end the schedule: it is counted as that run's error.
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                probe(
                    self.verbs,
                    target,
                    run.address(),
                    self.token,
                    &measurement.params,
                    &mut |_| {},
                )
            }))
            .unwrap_or(Err(ProbeError::Panicked));
            self.service.record(target, run, result, started.elapsed());
        }
        // The next window starts after this run, so that its own traffic does not count.
        if let Ok(Some(reading)) = port::read_traffic(self.sysfs, &target.device, target.port) {
            readings.insert(key, reading);
        }
    }

    /// Whether the port moved more than `--collector.verbs.busy-share` of its data rate since
    /// `since` (the end of the last run), or without one over [`TRAFFIC_WINDOW`]. A port whose
    /// traffic or data rate is unknown is not busy: the probe runs.
    fn port_busy(&self, target: &Target, since: Option<port::TrafficReading>) -> bool {
        let read = || port::read_traffic(self.sysfs, &target.device, target.port);
        let Ok(state) = port::read_state(self.sysfs, &target.device, target.port) else {
            return false;
        };
        let (Some(rate), Ok(Some(mut before))) = (state.data_rate_bytes_per_second, read()) else {
            return false;
        };
        if let Some(since) = since {
            before = since;
        }
        let waited = before.at.elapsed();
        if waited < TRAFFIC_WINDOW && self.stop.sleep(TRAFFIC_WINDOW - waited) {
            return false;
        }
        match read() {
            Ok(Some(now)) => port::busy(before, now, rate, self.settings.busy_share),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::verbs::run::test_target as target;

    #[test]
    fn stop_wakes_a_sleeping_scheduler_at_once() {
        let stop = Arc::new(Stop::default());
        let sleeper = {
            let stop = stop.clone();
            std::thread::spawn(move || stop.sleep(Duration::from_secs(3600)))
        };
        assert!(!stop.sleep(Duration::from_millis(1)));
        let started = Instant::now();
        stop.stop();
        assert!(sleeper.join().unwrap(), "woke without being stopped");
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(
            stop.sleep(Duration::from_secs(3600)),
            "a stopped schedule slept on"
        );
    }

    /// One probe or session per port: a second claim fails until the first is dropped; other
    /// ports are free.
    #[test]
    fn a_port_is_claimed_once_at_a_time() {
        let claims = Arc::new(PortClaims::default());
        let first = claims.claim(&target()).unwrap();
        assert!(claims.claim(&target()).is_none());
        let other_port = Target {
            port: 2,
            ..target()
        };
        assert!(claims.claim(&other_port).is_some());
        drop(first);
        assert!(claims.claim(&target()).is_some());
    }

    #[test]
    fn jitter_stays_below_its_bound() {
        assert_eq!(random_below(Duration::ZERO), Duration::ZERO);
        let bound = Duration::from_secs(60);
        let draws: std::collections::HashSet<_> = (0..50).map(|_| random_below(bound)).collect();
        assert!(draws.iter().all(|d| *d < bound));
        assert!(draws.len() > 1, "no jitter: {draws:?}");
    }
}
