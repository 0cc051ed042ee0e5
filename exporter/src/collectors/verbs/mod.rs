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
mod results;
mod run;
mod scheduler;
mod visibility;

use std::fmt;
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::collector::{
    CollectError, Collector, Host, Output, PendingErrors, Registration, Root, Settings, StartError,
    Started,
};
use crate::logging::{self, Level};
use crate::metrics::{Desc, Value};
use crate::privileges;
use crate::sync::lock;
use crate::sysfs::{Entry, SysDir};
use cli::VerbsSettings;
use ffi::Verbs;
use mesh::MeshNode;
use peer::{ResponderSettings, ResponderStats};
pub use results::SKIP_REASONS;
use results::{export_series, Service};
pub use run::{
    probe, progress_line, result_table, ProbeError, Report, Target, MAX_DURATION, RESULTS,
};
pub use scheduler::{PortClaim, PortClaims};
use scheduler::{Scheduler, Stop};
use visibility::Visibility;

/// What a memlock limit below the probe's buffers costs.
const MEMLOCK_COSTS: &str = "every bandwidth and latency run: ibv_reg_mr fails";

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
    "Scheduled probes skipped by reason (port_busy: the port moved more than --collector.verbs.busy-share of its data rate since the last run; port_in_use: a responder session used it).",
    None,
);
const RESPONDER_SESSIONS: Desc = Desc::counter(
    "hpcnode_verbs_responder_sessions",
    "Sessions the responder served or refused, by result (success, denied, busy, bad_message, bad_token, version_mismatch, timeout, error).",
    None,
);

const MESH_NODES: Desc = Desc::gauge(
    "hpcnode_verbs_probe_mesh_nodes",
    "Nodes in the mesh's peers file (--collector.verbs.peers), in the last copy that parsed.",
    None,
);
const MESH_MEMBER: Desc = Desc::gauge(
    "hpcnode_verbs_probe_mesh_member",
    "1 when this node (--collector.verbs.node-name) is in the peers file in use and so probes its peers, 0 when it is not and probes nobody.",
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
pub const METRICS: [Desc; 14] = [
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
    visibility::VISIBLE,
];

pub const REGISTRATION: Registration = Registration {
    name: "verbs",
    enabled_by_default: true,
    help: "Results of the periodic RDMA verbs bandwidth and latency probe (silent unless --collector.verbs.interval or --collector.verbs.listen is set)",
    metrics: &METRICS,
    roots: &[Root::Sysfs],
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
    /// The loaded libibverbs, the sysfs root, and the devices it listed against sysfs's.
    visibility: Option<(Arc<Verbs>, PathBuf, Visibility)>,
}

impl Settings for VerbsSettings {
    /// Starts what the flags ask for (scheduler, responder); the collector reads their
    /// results. Unconfigured, it runs no probe: on the running kernel with RDMA devices it only
    /// loads libibverbs, as an application would, to say which devices verbs lists
    /// ([`visibility`]). An unreadable token file or peers file fails the start; a missing
    /// libibverbs does not (the node may rightly lack it).
    fn start(self: Box<Self>, host: &Host) -> Result<Started, StartError> {
        let stop = Arc::new(Stop::default());
        if self.interval.is_none() && self.listen.is_none() {
            let verbs = visibility::worth_asking(&host.sysfs)
                .then(|| self.load_verbs())
                .flatten();
            return Ok(Started::new(VerbsCollector {
                service: None,
                stop,
                listener: None,
                visibility: verbs.map(|verbs| (verbs, host.sysfs.clone(), Visibility::default())),
            }));
        }
        let token = self.token()?;
        let start_error = |reason: String| StartError {
            collector: REGISTRATION.name,
            reason,
        };
        let mesh = self
            .mesh
            .as_ref()
            .map(|settings| MeshNode::start(settings).map_err(|err| start_error(err.to_string())))
            .transpose()?;
        let verbs = self.load_verbs();
        if verbs.is_some() {
            let pinned = engine::pinned_bytes(&self.measurement.params);
            if let Some((missing, remedy)) = privileges::memlock_missing(pinned) {
                privileges::report_missing(REGISTRATION.name, missing, &remedy, MEMLOCK_COSTS);
            }
        }
        let claims = Arc::new(PortClaims::default());
        let responder = verbs
            .as_ref()
            .and_then(|verbs| start_responder(&self, &token, &host.sysfs, verbs, &claims, &stop));
        let (responder, listener) = responder.unzip();
        let visibility = (verbs.clone())
            .filter(|_| visibility::worth_asking(&host.sysfs))
            .map(|verbs| (verbs, host.sysfs.clone(), Visibility::default()));
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
            visibility,
        }))
    }
}

impl VerbsSettings {
    /// The token file's contents; none configured is the empty token.
    fn token(&self) -> Result<Vec<u8>, StartError> {
        let Some(path) = &self.measurement.token_file else {
            return Ok(Vec::new());
        };
        cli::read_token(path).map_err(|reason| StartError {
            collector: REGISTRATION.name,
            reason: format!("--collector.verbs.token-file {path:?}: {reason}"),
        })
    }

    /// libibverbs, or none (logged): a node may rightly lack it.
    fn load_verbs(&self) -> Option<Arc<Verbs>> {
        match Verbs::load(&self.measurement.library) {
            Ok(verbs) => {
                // The copy the dynamic linker chose, as an application's would be.
                let path = verbs.loaded_from().unwrap_or_default();
                let path = path.display().to_string();
                logging::log(Level::Info, "libibverbs loaded", &[("path", &path)]);
                Some(Arc::new(verbs))
            }
            Err(err) => {
                logging::log(
                    Level::Info,
                    "verbs probe unavailable",
                    &[("err", &err.to_string())],
                );
                None
            }
        }
    }
}

/// Binds and serves the responder when `--collector.verbs.listen` is set; its statistics and a
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

/// How long the verbs threads wait for the start-only capabilities to be settled before they
/// open a device (see `privileges::wait_until_settled`).
const SETTLE_LIMIT: Duration = Duration::from_secs(30);

/// What one read covers: whether the probe can run, the responder's sessions, or one
/// target's results (keyed as the results store keys them).
#[derive(Debug, Clone)]
enum Unit {
    Availability,
    Responder,
    Mesh,
    Visibility,
    Target(String),
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unit::Availability => f.write_str("availability"),
            Unit::Responder => f.write_str("responder"),
            Unit::Mesh => f.write_str("mesh"),
            Unit::Visibility => f.write_str("visibility"),
            Unit::Target(key) => f.write_str(key),
        }
    }
}

impl Collector for VerbsCollector {
    type Unit = Unit;

    fn units(&self) -> Result<Vec<Unit>, CollectError> {
        let mut units = Vec::new();
        if self.visibility.is_some() {
            units.push(Unit::Visibility);
        }
        // Unconfigured, there is no probe: what verbs lists is all.
        let Some(service) = &self.service else {
            return Ok(units);
        };
        units.push(Unit::Availability);
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
        if let Unit::Visibility = unit {
            if let Some((verbs, sysfs, visibility)) = &self.visibility {
                let list = || resources::device_names(verbs);
                if let Err(err) = visibility.collect(sysfs, list, &mut out.samples) {
                    out.errors.push(err);
                }
            }
            return;
        }
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
            Unit::Visibility => {}
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unconfigured_is_silent() {
        let collector = VerbsCollector {
            service: None,
            stop: Arc::default(),
            listener: None,
            visibility: None,
        };
        assert!(collector.units().unwrap().is_empty());
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
