//! The verbs probe: periodic RDMA WRITE bandwidth and latency per port, in loopback or against a
//! responder in another exporter, reported against the port's data rate.
//!
//! Invariants:
//! - libibverbs is loaded at run time ([`ffi`]); where it is absent the probe says so once
//!   (`hpcnode_verbs_probe_available 0`) and nothing else changes;
//! - runs happen on one scheduler thread, one at a time, never because of a scrape: scrapes read
//!   the last results;
//! - every verbs object is owned ([`resources`]) and released on every path.

pub mod auth;
mod cli;
pub mod engine;
pub mod ffi;
pub mod mesh;
pub mod oob;
pub mod peer;
pub mod port;
pub mod resources;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::hash::BuildHasher;
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use crate::collector::{
    lock, CollectError, Collector, ErrorKind, Host, Output, PendingErrors, Registration, Settings,
    StartError, Started,
};
use crate::logging::{self, Level};
use crate::metrics::{Desc, Labels, Value};
use crate::privileges;
use crate::sysfs::{Entry, SysDir, SysfsError};
use cli::VerbsSettings;
use engine::{Measurement, Params, Progress};
use ffi::Verbs;
use mesh::{MeshNode, MeshState};
use oob::{DecodeError, OobError, RejectReason};
use peer::{ResponderSettings, ResponderStats};

/// The longest bandwidth run a probe may be configured for.
pub const MAX_DURATION: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("{0}")]
    Load(#[from] ffi::LoadError),
    #[error("no RDMA device named {0:?}")]
    NoSuchDevice(String),
    #[error("{call} failed: {}", std::io::Error::from_raw_os_error(*errno))]
    Call { call: &'static str, errno: i32 },
    #[error("work completion failed with status {0}")]
    Completion(u32),
    #[error("timed out waiting for {0}")]
    Timeout(&'static str),
    #[error("port is not ACTIVE")]
    PortNotActive,
    #[error(
        "no RoCE v2 GID on the port (give the netdev an address, or set --probe.verbs.gid-index)"
    )]
    NoRoceV2Gid,
    #[error("invalid {0}")]
    Invalid(&'static str),
    #[error(transparent)]
    Sysfs(#[from] SysfsError),
    #[error("peer unreachable: {0}")]
    PeerUnreachable(String),
    #[error("peer rejected the probe: {}", .0.as_str())]
    Rejected(RejectReason),
    #[error(
        "the responder closed the connection without answering this exporter's protocol version {} hello: an exporter speaking version 1 does so, as does one whose --probe.verbs.allow does not list this node",
        oob::VERSION
    )]
    HelloUnanswered,
    #[error("the responder could not prove that it holds the token (its proof did not verify)")]
    ResponderUnproven,
    #[error(transparent)]
    Random(#[from] auth::RandomError),
    #[error(transparent)]
    Oob(#[from] OobError),
    #[error("the probe panicked (a bug)")]
    Panicked,
}

impl ProbeError {
    /// The `result` label of a failed run.
    pub fn result(&self) -> &'static str {
        match self {
            ProbeError::PortNotActive => "port_not_active",
            ProbeError::PeerUnreachable(_) => "peer_unreachable",
            ProbeError::Rejected(RejectReason::Version)
            | ProbeError::Oob(OobError::Decode(DecodeError::Version(_))) => "version_mismatch",
            ProbeError::Rejected(_)
            | ProbeError::HelloUnanswered
            | ProbeError::ResponderUnproven => "rejected",
            ProbeError::Timeout(_) | ProbeError::Oob(OobError::Timeout) => "timeout",
            _ => "error",
        }
    }
}

/// Every `result` label value of the runs counter.
pub const RESULTS: [&str; 7] = [
    "success",
    "port_not_active",
    "peer_unreachable",
    "rejected",
    "version_mismatch",
    "timeout",
    "error",
];

/// Every `reason` label value of the skipped counter: the port moved more than
/// `--probe.verbs.busy-share` of its data rate (a job is using it), or a responder session is
/// using it now.
pub const SKIP_REASONS: [&str; 2] = ["port_busy", "port_in_use"];

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

/// One port to probe.
#[derive(Debug, Clone)]
pub struct Target {
    pub sysfs: PathBuf,
    pub device: String,
    pub port: u8,
    /// Overrides the RoCE v2 GID choice.
    pub gid_index: Option<u8>,
}

/// A finished probe with what it is compared against.
#[derive(Debug, Clone, Copy)]
pub struct Report {
    pub measurement: Measurement,
    pub data_rate_bytes_per_second: Option<f64>,
}

impl Report {
    pub fn efficiency(&self) -> Option<f64> {
        self.data_rate_bytes_per_second
            .map(|rate| self.measurement.bandwidth.average_bytes_per_second / rate)
    }
}

/// One probe of `target` now: skipped when sysfs says the port is not ACTIVE.
pub fn probe(
    verbs: &Arc<Verbs>,
    target: &Target,
    peer: Option<&str>,
    token: &[u8],
    params: &Params,
    progress: &mut dyn FnMut(Progress),
) -> Result<Report, ProbeError> {
    let state = port::read_state(&target.sysfs, &target.device, target.port)?;
    if !state.active {
        return Err(ProbeError::PortNotActive);
    }
    let measurement = match peer {
        Some(peer) => peer::run_peer(verbs, target, peer, token, params, progress)?,
        None => {
            let (device, address) = port::open(verbs, target)?;
            engine::run_loopback(&device, &address, params, progress)?
        }
    };
    Ok(Report {
        measurement,
        data_rate_bytes_per_second: state.data_rate_bytes_per_second,
    })
}

const AVAILABLE: Desc = Desc::gauge(
    "hpcnode_verbs_probe_available",
    "1 when libibverbs.so.1 loaded and the verbs probe can run, 0 when it is absent.",
    None,
);
const BANDWIDTH: Desc = Desc::gauge(
    "hpcnode_verbs_probe_bandwidth",
    "Average RDMA WRITE bandwidth of the last successful probe.",
    Some("bytes_per_second"),
);
const LATENCY: Desc = Desc::gauge(
    "hpcnode_verbs_probe_latency",
    "Typical one-way latency of the last successful probe: half the median RDMA WRITE ping-pong round trip (ib_write_lat's t_typical).",
    Some("seconds"),
);
const EFFICIENCY: Desc = Desc::gauge(
    "hpcnode_verbs_probe_efficiency",
    "Bandwidth of the last successful probe divided by the port's effective data rate.",
    Some("ratio"),
);
const LAST_SUCCESS: Desc = Desc::gauge(
    "hpcnode_verbs_probe_last_success_timestamp",
    "When the last successful probe finished, in seconds since the epoch.",
    Some("seconds"),
);
const RUNS: Desc = Desc::counter(
    "hpcnode_verbs_probe_runs",
    "Probe runs by result (success, port_not_active, peer_unreachable, rejected, version_mismatch, timeout, error).",
    None,
);
const DURATION: Desc = Desc::gauge(
    "hpcnode_verbs_probe_duration",
    "How long the last probe run took, whatever its result.",
    Some("seconds"),
);
const SKIPPED: Desc = Desc::counter(
    "hpcnode_verbs_probe_skipped",
    "Scheduled probes skipped by reason (port_busy: the port moved more than --probe.verbs.busy-share of its data rate since the last run; port_in_use: a responder session used it).",
    None,
);
const RESPONDER_SESSIONS: Desc = Desc::counter(
    "hpcnode_verbs_responder_sessions",
    "Sessions the responder served or refused, by result (success, denied, busy, bad_message, bad_token, version_mismatch, timeout, error).",
    None,
);

const MESH_NODES: Desc = Desc::gauge(
    "hpcnode_verbs_probe_mesh_nodes",
    "Nodes in the mesh's peers file (--probe.verbs.peers), in the last copy that parsed.",
    None,
);
const MESH_MEMBER: Desc = Desc::gauge(
    "hpcnode_verbs_probe_mesh_member",
    "1 when this node (--probe.verbs.node-name) is in the peers file in use and so probes its peers, 0 when it is not and probes nobody.",
    None,
);
const MESH_FILE_VALID: Desc = Desc::gauge(
    "hpcnode_verbs_probe_mesh_file_valid",
    "1 when the peers file parsed when last read, 0 when it did not and the last good copy is in use (the log and hpcnode_collector_errors_total say why).",
    None,
);
const MESH_PEER_SUCCESS: Desc = Desc::gauge(
    "hpcnode_verbs_probe_mesh_peer_success",
    "1 when the last mesh probe of the peer (its name in the peers file) succeeded, 0 when it failed or was skipped; only this round's and the last round's peers.",
    None,
);

/// Every metric this collector emits (for the METRICS.md check).
pub const METRICS: [Desc; 13] = [
    AVAILABLE,
    BANDWIDTH,
    LATENCY,
    EFFICIENCY,
    LAST_SUCCESS,
    RUNS,
    SKIPPED,
    DURATION,
    RESPONDER_SESSIONS,
    MESH_NODES,
    MESH_MEMBER,
    MESH_FILE_VALID,
    MESH_PEER_SUCCESS,
];

/// What a run measures against, and so the `mode` and `peer` labels of its results.
#[derive(Debug, Clone, Copy)]
enum RunMode<'a> {
    Loopback,
    /// `--probe.verbs.peer`, labelled by its address.
    Peer(&'a str),
    /// A node of the mesh: its results labelled by its name, its runs counted with every
    /// other mesh peer's (`peer=""`), so that a node's counters do not grow with the fleet.
    Mesh(&'a mesh::Node),
}

impl<'a> RunMode<'a> {
    fn address(self) -> Option<&'a str> {
        match self {
            RunMode::Loopback => None,
            RunMode::Peer(address) => Some(address),
            RunMode::Mesh(node) => Some(&node.address),
        }
    }

    fn mode(self) -> &'static str {
        match self {
            RunMode::Loopback => "loopback",
            RunMode::Peer(_) => "peer",
            RunMode::Mesh(_) => "mesh",
        }
    }

    /// The `peer` label of the run and skip counters.
    fn counted_as(self) -> &'a str {
        match self {
            RunMode::Peer(address) => address,
            RunMode::Loopback | RunMode::Mesh(_) => "",
        }
    }

    /// The `peer` label of the last run's results.
    fn measured_as(self) -> &'a str {
        match self {
            RunMode::Mesh(node) => &node.name,
            run => run.counted_as(),
        }
    }
}

/// The results of one (device, port, mode, peer).
struct Series {
    labels: Labels,
    /// One mesh peer's results, without counters (those are the mesh's, `peer=""`).
    mesh_peer: bool,
    /// A mesh peer's: whether this round's run succeeded.
    last_ok: Option<bool>,
    runs: BTreeMap<&'static str, u64>,
    skipped: BTreeMap<&'static str, u64>,
    last_report: Option<Report>,
    last_success: Option<f64>,
    last_duration: Option<Duration>,
}

/// What the scheduler and the responder leave for scrapes to read.
struct Service {
    available: bool,
    series: Mutex<BTreeMap<String, Series>>,
    responder: Option<Arc<ResponderStats>>,
    /// `None` unless `--probe.verbs.peers` is set.
    mesh: Option<Mutex<MeshState>>,
    /// Run failures since the last scrape, for `hpcnode_collector_errors_total` and the log.
    failures: PendingErrors,
}

impl Service {
    fn record(
        &self,
        target: &Target,
        run: RunMode,
        result: Result<Report, ProbeError>,
        took: Duration,
    ) {
        let outcome = match &result {
            Ok(_) => "success",
            Err(err) => err.result(),
        };
        if let Err(err) = &result {
            let kind = match err {
                ProbeError::Panicked => ErrorKind::Panic,
                _ if outcome == "timeout" => ErrorKind::Timeout,
                _ => ErrorKind::Io,
            };
            let key = series_key(target, run.mode(), run.measured_as());
            self.failures.push(
                CollectError::new(kind, format!("verbs probe {key}: {err}"))
                    .with("target", key)
                    .with("result", outcome),
            );
        }
        let mut series = lock(&self.series);
        *Service::counters(&mut series, target, run)
            .runs
            .entry(outcome)
            .or_default() += 1;
        let entry = Service::results(&mut series, target, run);
        entry.last_duration = Some(took);
        if entry.mesh_peer {
            entry.last_ok = Some(result.is_ok());
        }
        if let Ok(report) = result {
            entry.last_report = Some(report);
            entry.last_success = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .ok()
                .map(|t| t.as_secs_f64());
        }
    }

    /// A scheduled probe not run, for one of [`SKIP_REASONS`].
    fn skip(&self, target: &Target, run: RunMode, reason: &'static str) {
        let mut series = lock(&self.series);
        *Service::counters(&mut series, target, run)
            .skipped
            .entry(reason)
            .or_default() += 1;
        let entry = Service::results(&mut series, target, run);
        if entry.mesh_peer {
            entry.last_ok = Some(false);
        }
    }

    /// Where a run of `run` is counted.
    fn counters<'s>(
        series: &'s mut BTreeMap<String, Series>,
        target: &Target,
        run: RunMode,
    ) -> &'s mut Series {
        Service::entry(series, target, run.mode(), run.counted_as(), false)
    }

    /// Where the results of a run of `run` are kept.
    fn results<'s>(
        series: &'s mut BTreeMap<String, Series>,
        target: &Target,
        run: RunMode,
    ) -> &'s mut Series {
        let mesh_peer = matches!(run, RunMode::Mesh(_));
        Service::entry(series, target, run.mode(), run.measured_as(), mesh_peer)
    }

    fn entry<'s>(
        series: &'s mut BTreeMap<String, Series>,
        target: &Target,
        mode: &'static str,
        peer: &str,
        mesh_peer: bool,
    ) -> &'s mut Series {
        series
            .entry(series_key(target, mode, peer))
            .or_insert_with(|| Series {
                labels: vec![
                    ("device", target.device.clone().into()),
                    ("port", target.port.to_string().into()),
                    ("mode", mode.into()),
                    ("peer", peer.to_string().into()),
                ],
                mesh_peer,
                last_ok: None,
                runs: BTreeMap::new(),
                skipped: BTreeMap::new(),
                last_report: None,
                last_success: None,
                last_duration: None,
            })
    }

    /// Drops the results of mesh peers other than `peers` (this round's and the last's, so
    /// that a peer's results stay until this round's run replaces them): a node exports results
    /// for at most twice `--probe.verbs.mesh-fanout` peers, however large the fleet.
    fn keep_mesh_peers(&self, target: &Target, peers: &[&mesh::Node]) {
        let keep: BTreeSet<String> = peers
            .iter()
            .map(|node| series_key(target, "mesh", &node.name))
            .collect();
        lock(&self.series).retain(|key, series| !series.mesh_peer || keep.contains(key));
    }

    fn set_mesh(&self, state: MeshState) {
        if let Some(mesh) = &self.mesh {
            *lock(mesh) = state;
        }
    }
}

/// The results store's key of one (device, port, mode, peer).
fn series_key(target: &Target, mode: &str, peer: &str) -> String {
    format!("{}/{}/{mode}/{peer}", target.device, target.port)
}

pub const REGISTRATION: Registration = Registration {
    name: "verbs",
    enabled_by_default: true,
    help: "Results of the periodic RDMA verbs bandwidth and latency probe (silent unless --probe.verbs.interval or --probe.verbs.listen is set)",
    metrics: &METRICS,
    flags: cli::exporter_flags,
    configure: |flags| Ok(Box::new(VerbsSettings::from_flags(flags)?)),
    probe: Some(cli::PROBE),
};

struct VerbsCollector {
    /// `None` when the flags ask for neither runs nor a responder.
    service: Option<Arc<Service>>,
    stop: Arc<Stop>,
    /// The responder's listening socket, shut down to end its accept loop.
    listener: Option<TcpListener>,
}

/// Tells the scheduler and the responder that the exporter is stopping.
#[derive(Default)]
struct Stop {
    stopped: Mutex<bool>,
    wake: Condvar,
}

impl Stop {
    fn stop(&self) {
        *lock(&self.stopped) = true;
        self.wake.notify_all();
    }

    fn is_stopped(&self) -> bool {
        *lock(&self.stopped)
    }

    /// Sleeps for `delay` or until stopped; whether it was stopped.
    fn sleep(&self, delay: Duration) -> bool {
        let stopped = lock(&self.stopped);
        let (stopped, _) = self
            .wake
            .wait_timeout_while(stopped, delay, |stopped| !*stopped)
            .unwrap_or_else(PoisonError::into_inner);
        *stopped
    }
}

impl Settings for VerbsSettings {
    /// Starts what the flags ask for (scheduler, responder); the collector reads their
    /// results. Unconfigured, it does nothing and exports nothing. An unreadable token file or
    /// peers file fails the start; a missing libibverbs does not (the node may rightly lack it).
    fn start(self: Box<Self>, host: &Host) -> Result<Started, StartError> {
        let stop = Arc::new(Stop::default());
        if self.interval.is_none() && self.listen.is_none() {
            return Ok(Started::new(VerbsCollector {
                service: None,
                stop,
                listener: None,
            }));
        }
        let token = match &self.measurement.token_file {
            None => Vec::new(),
            Some(path) => cli::read_token(path).map_err(|reason| StartError {
                collector: REGISTRATION.name,
                reason: format!("--probe.verbs.token-file {path:?}: {reason}"),
            })?,
        };
        let start_error = |reason: String| StartError {
            collector: REGISTRATION.name,
            reason,
        };
        let mesh = self
            .mesh
            .as_ref()
            .map(|settings| MeshNode::start(settings).map_err(start_error))
            .transpose()?;
        let verbs = match Verbs::load(&self.measurement.library) {
            Ok(verbs) => Some(Arc::new(verbs)),
            Err(err) => {
                logging::log(
                    Level::Info,
                    "verbs probe unavailable",
                    &[("err", &err.to_string())],
                );
                None
            }
        };
        let claims = Arc::new(PortClaims::default());
        let responder = verbs
            .as_ref()
            .and_then(|verbs| start_responder(&self, &token, &host.sysfs, verbs, &claims, &stop));
        let (responder, listener) = responder.unzip();
        let service = Arc::new(Service {
            available: verbs.is_some(),
            series: Mutex::default(),
            responder,
            mesh: mesh.as_ref().map(|node| Mutex::new(node.state())),
            failures: PendingErrors::default(),
        });
        if let (Some(verbs), Some(interval)) = (verbs, self.interval) {
            let (service, sysfs, stop) = (service.clone(), host.sysfs.clone(), stop.clone());
            let started = std::thread::Builder::new()
                .name("hpcnode-verbs-probe".into())
                .spawn(move || {
                    privileges::wait_until_settled(SETTLE_LIMIT);
                    let scheduler = Scheduler {
                        service: &service,
                        verbs: &verbs,
                        settings: &self,
                        token: &token,
                        sysfs: &sysfs,
                        claims: &claims,
                        stop: &stop,
                    };
                    match mesh {
                        Some(node) => scheduler.run_mesh(interval, node),
                        None => scheduler.run(interval),
                    }
                });
            if let Err(err) = started {
                logging::log(
                    Level::Error,
                    "cannot start the verbs probe thread",
                    &[("err", &err.to_string())],
                );
            }
        }
        Ok(Started::new(VerbsCollector {
            service: Some(service),
            stop,
            listener,
        }))
    }
}

/// Binds and serves the responder when `--probe.verbs.listen` is set; its statistics and a
/// handle on its socket.
fn start_responder(
    settings: &VerbsSettings,
    token: &[u8],
    sysfs: &Path,
    verbs: &Arc<Verbs>,
    claims: &Arc<PortClaims>,
    stop: &Arc<Stop>,
) -> Option<(Arc<ResponderStats>, TcpListener)> {
    let listen = settings.listen.clone()?;
    let Some(device) = settings
        .devices
        .first()
        .cloned()
        .or_else(|| first_device(sysfs))
    else {
        logging::log(
            Level::Error,
            "verbs responder not started: no RDMA device",
            &[("address", &listen)],
        );
        return None;
    };
    let measurement = &settings.measurement;
    let responder = Arc::new(ResponderSettings {
        listen,
        allow: settings.allow.clone(),
        token: (!token.is_empty()).then(|| token.to_vec()),
        target: Target {
            sysfs: sysfs.to_path_buf(),
            device,
            port: measurement.port,
            gid_index: measurement.gid_index,
        },
        step_timeout: measurement.params.step_timeout,
        claims: claims.clone(),
    });
    let cannot_listen = |err: std::io::Error| {
        logging::log(
            Level::Error,
            "verbs responder cannot listen",
            &[("address", &responder.listen), ("err", &err.to_string())],
        );
    };
    let listener = match peer::bind(&responder).and_then(|l| Ok((l.try_clone()?, l))) {
        Ok(listener) => listener,
        Err(err) => {
            cannot_listen(err);
            return None;
        }
    };
    logging::log(
        Level::Info,
        "verbs responder listening",
        &[
            ("address", &responder.listen),
            ("device", &responder.target.device),
        ],
    );
    let stats = Arc::new(ResponderStats::default());
    let (handle, listener) = listener;
    let (verbs, serving, stop) = (verbs.clone(), stats.clone(), stop.clone());
    let started = std::thread::Builder::new()
        .name("hpcnode-verbs-listen".into())
        .spawn(move || {
            privileges::wait_until_settled(SETTLE_LIMIT);
            peer::serve(listener, verbs, responder, serving, &|| stop.is_stopped())
        });
    if let Err(err) = started {
        logging::log(
            Level::Error,
            "cannot start the verbs responder thread",
            &[("err", &err.to_string())],
        );
        return None;
    }
    Some((stats, handle))
}

/// The RDMA devices under sysfs, sorted (an entry whose name is not UTF-8 last); none when
/// the class directory is absent.
fn devices(sysfs: &Path) -> Vec<Entry> {
    SysDir::open(sysfs, "class/infiniband")
        .and_then(|dir| dir.entries())
        .unwrap_or_default()
}

/// The first RDMA device in sysfs (what ib_write_bw uses without `-d`).
pub fn first_device(sysfs: &Path) -> Option<String> {
    devices(sysfs)
        .into_iter()
        .find_map(|entry| entry.into_name().ok())
}

/// One line of progress for a terminal (rewritten in place with `\r`).
pub fn progress_line(progress: &Progress) -> String {
    match progress {
        Progress::Bandwidth { elapsed, bytes } => format!(
            "bandwidth: {:5.1} s, {:10.2} MiB/sec so far",
            elapsed.as_secs_f64(),
            *bytes as f64 / elapsed.as_secs_f64().max(1e-9) / f64::from(1 << 20)
        ),
        Progress::Latency { done, of } => format!("latency: {done}/{of} round trips          "),
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
struct Scheduler<'a> {
    service: &'a Service,
    verbs: &'a Arc<Verbs>,
    settings: &'a VerbsSettings,
    token: &'a [u8],
    sysfs: &'a Path,
    claims: &'a Arc<PortClaims>,
    stop: &'a Stop,
}

/// How long the verbs threads wait for the start-only capabilities to be settled before they
/// open a device (see `privileges::wait_until_settled`).
const SETTLE_LIMIT: Duration = Duration::from_secs(30);

/// The shortest window over which a port's traffic is judged: a first run waits this long.
const TRAFFIC_WINDOW: Duration = Duration::from_secs(1);

impl Scheduler<'_> {
    /// Runs every target in turn, then sleeps the interval plus jitter. The first round starts
    /// after a jitter alone.
    fn run(&self, interval: Duration) {
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
    fn run_mesh(&self, interval: Duration, mut node: MeshNode) {
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

    /// Whether the port moved more than `--probe.verbs.busy-share` of its data rate since
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

/// What one read covers: whether the probe can run, the responder's sessions, or one
/// target's results (keyed as the results store keys them).
#[derive(Debug, Clone)]
enum Unit {
    Availability,
    Responder,
    Mesh,
    Target(String),
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unit::Availability => f.write_str("availability"),
            Unit::Responder => f.write_str("responder"),
            Unit::Mesh => f.write_str("mesh"),
            Unit::Target(key) => f.write_str(key),
        }
    }
}

impl Collector for VerbsCollector {
    type Unit = Unit;

    fn units(&self) -> Result<Vec<Unit>, CollectError> {
        let Some(service) = &self.service else {
            return Ok(Vec::new());
        };
        let mut units = vec![Unit::Availability];
        if service.responder.is_some() {
            units.push(Unit::Responder);
        }
        if service.mesh.is_some() {
            units.push(Unit::Mesh);
        }
        units.extend(lock(&service.series).keys().cloned().map(Unit::Target));
        Ok(units)
    }

    fn collect_unit(&self, unit: &Unit, out: &mut Output) {
        let Some(service) = &self.service else {
            return;
        };
        match unit {
            Unit::Availability => {
                out.samples.push(
                    &AVAILABLE,
                    Vec::new(),
                    Value::Int(u64::from(service.available)),
                );
                out.errors.extend(service.failures.take());
            }
            Unit::Responder => {
                if let Some(stats) = &service.responder {
                    for (result, count) in stats.counts() {
                        out.samples.push(
                            &RESPONDER_SESSIONS,
                            vec![("result", result.into())],
                            Value::Int(count),
                        );
                    }
                    out.errors.extend(stats.failures.take());
                }
            }
            Unit::Mesh => {
                if let Some(mesh) = &service.mesh {
                    let state = *lock(mesh);
                    for (desc, value) in [
                        (&MESH_NODES, state.nodes as u64),
                        (&MESH_MEMBER, u64::from(state.member)),
                        (&MESH_FILE_VALID, u64::from(state.file_valid)),
                    ] {
                        out.samples.push(desc, Vec::new(), Value::Int(value));
                    }
                }
            }
            Unit::Target(key) => {
                if let Some(series) = lock(&service.series).get(key) {
                    export_series(series, out);
                }
            }
        }
    }

    /// No new run starts, and the responder stops accepting; a run in progress finishes
    /// unless the process exits first.
    fn stop(&self) {
        self.stop.stop();
        if let Some(listener) = &self.listener {
            // SAFETY: shutdown(2) on a descriptor this value owns, open for as long as it
            // lives; it only makes the responder's blocked accept return with an error.
            unsafe { libc::shutdown(listener.as_raw_fd(), libc::SHUT_RDWR) };
        }
    }
}

/// A series' counters (none for one mesh peer: the mesh's own series counts its runs) and
/// results.
fn export_series(series: &Series, out: &mut Output) {
    let labels = || series.labels.clone();
    if let Some(ok) = series.last_ok {
        out.samples
            .push(&MESH_PEER_SUCCESS, labels(), Value::Int(u64::from(ok)));
    }
    if !series.mesh_peer {
        for result in RESULTS {
            let mut labeled = labels();
            labeled.push(("result", result.into()));
            let count = series.runs.get(result).copied().unwrap_or(0);
            out.samples.push(&RUNS, labeled, Value::Int(count));
        }
        for reason in SKIP_REASONS {
            let mut labeled = labels();
            labeled.push(("reason", reason.into()));
            let count = series.skipped.get(reason).copied().unwrap_or(0);
            out.samples.push(&SKIPPED, labeled, Value::Int(count));
        }
    }
    export_results(series, out);
}

/// The last run's duration and the last successful run's results.
fn export_results(series: &Series, out: &mut Output) {
    let labels = || series.labels.clone();
    if let Some(took) = series.last_duration {
        out.samples
            .push(&DURATION, labels(), Value::Float(took.as_secs_f64()));
    }
    if let Some(report) = &series.last_report {
        let measurement = &report.measurement;
        out.samples.push(
            &BANDWIDTH,
            labels(),
            Value::Float(measurement.bandwidth.average_bytes_per_second),
        );
        out.samples.push(
            &LATENCY,
            labels(),
            Value::Float(measurement.latency.as_secs_f64()),
        );
        if let Some(ratio) = report.efficiency() {
            out.samples.push(&EFFICIENCY, labels(), Value::Float(ratio));
        }
    }
    if let Some(at) = series.last_success {
        out.samples.push(&LAST_SUCCESS, labels(), Value::Float(at));
    }
}

/// ib_write_bw's result table for one report, in MiB/sec (2^20 bytes) as perftest computes it:
/// older perftest (Debian 12 ships 4.5-0.17) prints the same figure under the header `MB/sec`.
pub fn result_table(report: &Report) -> String {
    const MIB: f64 = (1 << 20) as f64;
    let bandwidth = &report.measurement.bandwidth;
    let mut table = format!(
        "{:<10} {:<14} {:<18} {:<20} {:<14}\n{:<10} {:<14} {:<18.2} {:<20.2} {:<14.6}\n",
        "#bytes",
        "#iterations",
        "BW peak[MiB/sec]",
        "BW average[MiB/sec]",
        "MsgRate[Mpps]",
        bandwidth.message_size,
        bandwidth.iterations,
        bandwidth.peak_bytes_per_second / MIB,
        bandwidth.average_bytes_per_second / MIB,
        bandwidth.messages_per_second() / 1e6,
    );
    table.push_str(&format!(
        "latency (t_typical) {:.2} usec\n",
        report.measurement.latency.as_secs_f64() * 1e6
    ));
    match (report.data_rate_bytes_per_second, report.efficiency()) {
        (Some(rate), Some(ratio)) => table.push_str(&format!(
            "port data rate {:.2} MiB/sec, efficiency {:.3}\n",
            rate / MIB,
            ratio
        )),
        _ => table.push_str("port data rate unknown, efficiency not computed\n"),
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{encode, Format, Samples};
    use engine::Bandwidth;

    fn report() -> Report {
        Report {
            measurement: Measurement {
                bandwidth: Bandwidth {
                    message_size: 65536,
                    iterations: 1000,
                    peak_bytes_per_second: 12.0e9,
                    average_bytes_per_second: 11.8e9,
                },
                latency: Duration::from_nanos(1500),
            },
            data_rate_bytes_per_second: Some(12.5e9),
        }
    }

    fn target() -> Target {
        Target {
            sysfs: PathBuf::from("/sys"),
            device: "mlx5_0".into(),
            port: 1,
            gid_index: None,
        }
    }

    fn scrape(collector: &VerbsCollector) -> String {
        let mut samples = Samples::default();
        for unit in collector.units().unwrap() {
            let mut out = Output::default();
            collector.collect_unit(&unit, &mut out);
            samples.append(out.samples);
        }
        encode(samples, Format::PrometheusText).unwrap()
    }

    fn service() -> Arc<Service> {
        Arc::new(Service {
            available: true,
            series: Mutex::default(),
            responder: None,
            mesh: None,
            failures: PendingErrors::default(),
        })
    }

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
    fn skips_are_exported_by_reason() {
        let service = service();
        service.skip(&target(), RunMode::Peer("n2:18515"), "port_busy");
        service.skip(&target(), RunMode::Peer("n2:18515"), "port_busy");
        let text = scrape(&VerbsCollector {
            service: Some(service),
            stop: Arc::default(),
            listener: None,
        });
        let labels = r#"device="mlx5_0",port="1",mode="peer",peer="n2:18515""#;
        for line in [
            format!("hpcnode_verbs_probe_skipped_total{{{labels},reason=\"port_busy\"}} 2"),
            format!("hpcnode_verbs_probe_skipped_total{{{labels},reason=\"port_in_use\"}} 0"),
            format!("hpcnode_verbs_probe_runs_total{{{labels},result=\"success\"}} 0"),
        ] {
            assert!(text.contains(&line), "{line} missing from\n{text}");
        }
    }

    fn node(name: &str) -> mesh::Node {
        mesh::Node {
            name: name.into(),
            address: format!("{name}:18515"),
        }
    }

    /// A mesh peer's results carry its name; its runs are counted with every other mesh peer's
    /// (`peer=""`); a peer not probed this round is dropped, so the series stay as many as the
    /// fanout.
    #[test]
    fn mesh_results_are_per_peer_and_only_for_this_rounds_peers() {
        let service = service();
        let (b, c, d) = (node("b"), node("c"), node("d"));
        service.keep_mesh_peers(&target(), &[&b, &c]);
        service.record(
            &target(),
            RunMode::Mesh(&b),
            Ok(report()),
            Duration::from_secs(3),
        );
        service.record(
            &target(),
            RunMode::Mesh(&c),
            Err(ProbeError::PeerUnreachable("c:18515: refused".into())),
            Duration::from_secs(1),
        );
        let collector = VerbsCollector {
            service: Some(service.clone()),
            stop: Arc::default(),
            listener: None,
        };
        let text = scrape(&collector);
        let mesh = r#"device="mlx5_0",port="1",mode="mesh""#;
        for line in [
            format!("hpcnode_verbs_probe_runs_total{{{mesh},peer=\"\",result=\"success\"}} 1"),
            format!(
                "hpcnode_verbs_probe_runs_total{{{mesh},peer=\"\",result=\"peer_unreachable\"}} 1"
            ),
            format!("hpcnode_verbs_probe_mesh_peer_success{{{mesh},peer=\"b\"}} 1"),
            format!("hpcnode_verbs_probe_mesh_peer_success{{{mesh},peer=\"c\"}} 0"),
            format!(
                "hpcnode_verbs_probe_bandwidth_bytes_per_second{{{mesh},peer=\"b\"}} 11800000000"
            ),
            format!("hpcnode_verbs_probe_duration_seconds{{{mesh},peer=\"c\"}} 1"),
        ] {
            assert!(text.contains(&line), "{line} missing from\n{text}");
        }
        assert!(!text.contains(r#"peer="b",result"#), "{text}");
        // The next round probes d (and c again): b's results go, the counters stay.
        service.keep_mesh_peers(&target(), &[&c, &d]);
        service.skip(&target(), RunMode::Mesh(&d), "port_busy");
        let text = scrape(&collector);
        assert!(!text.contains(r#"peer="b""#), "{text}");
        for line in [
            format!("hpcnode_verbs_probe_runs_total{{{mesh},peer=\"\",result=\"success\"}} 1"),
            format!("hpcnode_verbs_probe_skipped_total{{{mesh},peer=\"\",reason=\"port_busy\"}} 1"),
            format!("hpcnode_verbs_probe_mesh_peer_success{{{mesh},peer=\"c\"}} 0"),
            format!("hpcnode_verbs_probe_mesh_peer_success{{{mesh},peer=\"d\"}} 0"),
        ] {
            assert!(text.contains(&line), "{line} missing from\n{text}");
        }
    }

    #[test]
    fn jitter_stays_below_its_bound() {
        assert_eq!(random_below(Duration::ZERO), Duration::ZERO);
        let bound = Duration::from_secs(60);
        let draws: std::collections::HashSet<_> = (0..50).map(|_| random_below(bound)).collect();
        assert!(draws.iter().all(|d| *d < bound));
        assert!(draws.len() > 1, "no jitter: {draws:?}");
    }

    #[test]
    fn unconfigured_is_silent() {
        let collector = VerbsCollector {
            service: None,
            stop: Arc::default(),
            listener: None,
        };
        assert!(collector.units().unwrap().is_empty());
    }

    #[test]
    fn results_are_exported_per_target_and_failures_keep_the_last_success() {
        let service = service();
        service.record(
            &target(),
            RunMode::Loopback,
            Ok(report()),
            Duration::from_secs(3),
        );
        service.record(
            &target(),
            RunMode::Loopback,
            Err(ProbeError::PortNotActive),
            Duration::from_millis(1),
        );
        let text = scrape(&VerbsCollector {
            service: Some(service),
            stop: Arc::default(),
            listener: None,
        });
        let labels = r#"device="mlx5_0",port="1",mode="loopback",peer="""#;
        for line in [
            "hpcnode_verbs_probe_available 1".to_string(),
            format!("hpcnode_verbs_probe_bandwidth_bytes_per_second{{{labels}}} 11800000000"),
            format!("hpcnode_verbs_probe_efficiency_ratio{{{labels}}} 0.944"),
            format!("hpcnode_verbs_probe_latency_seconds{{{labels}}} 0.0000015"),
            format!("hpcnode_verbs_probe_duration_seconds{{{labels}}} 0.001"),
            format!("hpcnode_verbs_probe_runs_total{{{labels},result=\"success\"}} 1"),
            format!("hpcnode_verbs_probe_runs_total{{{labels},result=\"port_not_active\"}} 1"),
            format!("hpcnode_verbs_probe_runs_total{{{labels},result=\"timeout\"}} 0"),
        ] {
            assert!(text.contains(&line), "{line} missing from\n{text}");
        }
        assert!(text.contains("hpcnode_verbs_probe_last_success_timestamp_seconds{"));
    }

    #[test]
    fn table_has_perftest_columns() {
        let table = result_table(&report());
        let mut lines = table.lines();
        let header: Vec<_> = lines.next().unwrap().split_whitespace().collect();
        assert_eq!(
            header,
            [
                "#bytes",
                "#iterations",
                "BW",
                "peak[MiB/sec]",
                "BW",
                "average[MiB/sec]",
                "MsgRate[Mpps]"
            ]
        );
        let row: Vec<_> = lines.next().unwrap().split_whitespace().collect();
        // 12e9 / 2^20 = 11444.09; 11.8e9 / 2^20 = 11253.36; 11.8e9 / 65536 / 1e6 = 0.180054.
        assert_eq!(row, ["65536", "1000", "11444.09", "11253.36", "0.180054"]);
        assert!(table.contains("efficiency 0.944"));
    }

    #[test]
    fn failure_results() {
        assert_eq!(ProbeError::PortNotActive.result(), "port_not_active");
        assert_eq!(ProbeError::Timeout("x").result(), "timeout");
        assert_eq!(ProbeError::from(OobError::Timeout).result(), "timeout");
        assert_eq!(
            ProbeError::Rejected(RejectReason::BadToken).result(),
            "rejected"
        );
        assert_eq!(ProbeError::NoSuchDevice("x".into()).result(), "error");
    }

    /// A device named `bad\xff` does not hide the others from the probe's device choice.
    #[test]
    fn first_device_skips_a_name_that_is_not_utf8() {
        use std::os::unix::ffi::OsStrExt;
        let sysfs = tempfile::tempdir().unwrap();
        let class = sysfs.path().join("class/infiniband");
        std::fs::create_dir_all(class.join(std::ffi::OsStr::from_bytes(b"a\xff"))).unwrap();
        std::fs::create_dir(class.join("mlx5_0")).unwrap();
        assert_eq!(first_device(sysfs.path()).as_deref(), Some("mlx5_0"));
    }
}
