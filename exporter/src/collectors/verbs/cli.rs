//! The verbs probe's command line: the exporter's `--collector.verbs.*` flags, and the
//! `hpcnode_exporter probe verbs` subcommand, which shares the measurement flags without the
//! prefix. Values are validated here; the token file is read only when the probe starts.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::Arg;

use super::engine::{Params, LATENCY_MESSAGE};
use super::ffi::{self, Verbs};
use super::mesh::{self, MeshSettings};
use super::peer::{self, Cidr};
use super::{first_device, oob, progress_line, result_table, ProbeError, Target, MAX_DURATION};
use crate::collector::{ProbeCommand, RunOnce};
use crate::flags::{optional, parse_listen_address, ConfigError, Flags};
use crate::sysfs::read_private_file;

/// The exporter's flags: when and what to probe, the responder, then the measurement.
pub(super) fn exporter_flags() -> Vec<Arg> {
    let flag = |name: &str, value, help| optional(format!("{EXPORTER}{name}"), value, help);
    let mut flags = vec![
        flag("interval", "DURATION", "Run the verbs probe this often (e.g. 1h, at most 168h); unset or 0: never."),
        flag("jitter", "DURATION", "Add a random delay up to this to each probe interval (default 0, at most 168h)."),
        flag("device", "NAMES", "Comma-separated RDMA devices to probe (default: all)."),
        flag("listen", "ADDR:PORT", "Serve other exporters' peer probes here (off by default; requires --collector.verbs.allow)."),
        flag("allow", "CIDRS", "Comma-separated addresses or networks allowed to use the responder."),
        flag("busy-share", "RATIO", "Skip a scheduled probe when the port moved more than this share of its data rate since the last run (default 0.05; 1: never skip)."),
        flag("peers", "FILE", "Probe a mesh: the fleet's responders, one `NAME HOST:PORT` a line (# comments), read again when it changes; each node probes --collector.verbs.mesh-fanout of them per interval. Needs --collector.verbs.interval and --collector.verbs.listen; excludes --collector.verbs.peer."),
        flag("mesh-fanout", "K", "Peers each node probes, and is probed by, per interval in a mesh (default 2)."),
        flag("node-name", "NAME", "This node's name in --collector.verbs.peers (default: the hostname)."),
    ];
    flags.extend(measurement_flags(EXPORTER));
    flags
}

const EXPORTER: &str = "collector.verbs.";

/// The longest `--collector.verbs.interval` and `--collector.verbs.jitter`: a week.
const MAX_INTERVAL: Duration = Duration::from_secs(7 * 24 * 3600);

/// The probe's measurement and connection flags, shared by the exporter (`--collector.verbs.*`) and
/// the `probe verbs` subcommand (no prefix).
fn measurement_flags(prefix: &str) -> Vec<Arg> {
    let flag = |name: &str, value, help| optional(format!("{prefix}{name}"), value, help);
    vec![
        flag("port", "N", "Port number to probe (default 1)."),
        flag("gid-index", "N", "GID index on RoCE (default: the first RoCE v2 GID, IPv4-mapped preferred)."),
        flag("peer", "HOST:PORT", "Probe against the responder of another exporter there instead of in loopback."),
        flag("token-file", "FILE", "File holding the shared token both sides prove they hold (never sent); mode 0600 or stricter."),
        flag("message-size", "BYTES", "RDMA WRITE message size for the bandwidth run (default 65536, at least 8)."),
        flag("queue-depth", "N", "Writes in flight during the bandwidth run (default 128)."),
        flag("duration", "DURATION", "Length of the bandwidth run (default 2s, at most 60s)."),
        flag("latency-iterations", "N", "Ping-pong round trips for the latency (default 1000)."),
        flag("timeout", "DURATION", "Longest wait for any single step: a completion, an echo, a peer message (default 5s)."),
        flag("library", "PATH", "The libibverbs to load (default libibverbs.so.1, wherever the dynamic linker finds it)."),
    ]
}

/// The measurement flags, validated.
#[derive(Debug, Clone)]
pub(super) struct Measurement {
    pub port: u8,
    pub gid_index: Option<u8>,
    /// `HOST:PORT` of a responder; `None`: loopback.
    pub peer: Option<String>,
    /// Read when the probe starts ([`read_token`]), not while parsing.
    pub token_file: Option<PathBuf>,
    pub params: Params,
    /// The libibverbs to load: [`ffi::LIBRARY`] unless a flag names another.
    pub library: String,
}

fn measurement(flags: &Flags, prefix: &str) -> Result<Measurement, ConfigError> {
    let name = |name: &str| format!("{prefix}{name}");
    let number = |flag: &str, min, max| flags.number(&name(flag), min, max);
    let duration = |flag: &str, max| flags.duration(&name(flag), max);
    let defaults = Params::default();
    let params = Params {
        // The latency run writes LATENCY_MESSAGE bytes into the same buffer: a smaller size is
        // refused rather than quietly raised.
        message_size: number(
            "message-size",
            LATENCY_MESSAGE as u64,
            peer::MAX_MESSAGE_SIZE as u64,
        )?
        .map_or(defaults.message_size, |n| n as usize),
        queue_depth: number("queue-depth", 1, 4096)?.map_or(defaults.queue_depth, |n| n as u32),
        duration: duration("duration", MAX_DURATION)?.unwrap_or(defaults.duration),
        latency_iterations: number("latency-iterations", 1, 100_000)?
            .map_or(defaults.latency_iterations, |n| n as u32),
        step_timeout: duration("timeout", Duration::from_secs(300))?
            .unwrap_or(defaults.step_timeout),
    };
    let peer = flags.value(&name("peer"));
    if let Some(peer) = &peer {
        if !mesh::is_host_port(peer) {
            return Err(flags.invalid(&name("peer"), peer, "expected HOST:PORT"));
        }
    }
    Ok(Measurement {
        port: number("port", 1, 255)?.map_or(1, |n| n as u8),
        gid_index: number("gid-index", 0, 255)?.map(|n| n as u8),
        peer,
        token_file: flags.path(&name("token-file"))?,
        params,
        library: flags
            .value(&name("library"))
            .unwrap_or_else(|| ffi::LIBRARY.to_string()),
    })
}

/// The exporter's `--collector.verbs.*` flags, validated.
#[derive(Debug)]
pub(super) struct VerbsSettings {
    /// `None`: no scheduled runs.
    pub interval: Option<Duration>,
    pub jitter: Duration,
    /// Empty: every device under /sys/class/infiniband.
    pub devices: Vec<String>,
    /// `ADDR:PORT` to serve other exporters' probes on; `None`: no responder.
    pub listen: Option<String>,
    pub allow: Vec<Cidr>,
    /// A port that moved more than this share of its data rate is busy: no scheduled probe.
    pub busy_share: f64,
    /// `None`: loopback or the one `--collector.verbs.peer`.
    pub mesh: Option<MeshSettings>,
    pub measurement: Measurement,
}

/// The most peers a node probes per round.
const MAX_FANOUT: u64 = 16;

impl VerbsSettings {
    pub(super) fn from_flags(flags: &Flags) -> Result<VerbsSettings, ConfigError> {
        let name = |name: &str| format!("{EXPORTER}{name}");
        let off_or_duration = |flag: &str| -> Result<Option<Duration>, ConfigError> {
            match flags.value(&name(flag)).as_deref() {
                Some("0" | "0s") => Ok(None),
                _ => flags.duration(&name(flag), MAX_INTERVAL),
            }
        };
        let allow = match flags.value(&name("allow")) {
            None => Vec::new(),
            Some(list) => list
                .split(',')
                .map(|cidr| {
                    Cidr::parse(cidr.trim()).ok_or_else(|| {
                        flags.invalid(
                            &name("allow"),
                            cidr,
                            "expected an address or ADDRESS/PREFIX",
                        )
                    })
                })
                .collect::<Result<_, _>>()?,
        };
        let listen = flags.value(&name("listen"));
        if let Some(listen) = &listen {
            parse_listen_address(listen)
                .map_err(|reason| flags.invalid(&name("listen"), listen, reason))?;
            if allow.is_empty() {
                return Err(flags.invalid(
                    &name("listen"),
                    listen,
                    "requires --collector.verbs.allow (the peers it serves)",
                ));
            }
        }
        let interval = off_or_duration("interval")?;
        let jitter = off_or_duration("jitter")?.unwrap_or_default();
        let measurement = measurement(flags, EXPORTER)?;
        let mesh = mesh_settings(flags, interval, jitter, listen.is_some(), &measurement)?;
        Ok(VerbsSettings {
            interval,
            jitter,
            devices: flags
                .value(&name("device"))
                .map(|list| {
                    list.split(',')
                        .map(str::to_string)
                        .filter(|d| !d.is_empty())
                        .collect()
                })
                .unwrap_or_default(),
            listen,
            allow,
            busy_share: share(flags, &name("busy-share"))?.unwrap_or(0.05),
            mesh,
            measurement,
        })
    }
}

/// The mesh flags, checked against the others: a mesh node also answers (`listen`), runs on a
/// schedule (`interval`) that the clock sets (no jitter), and each slot of a round holds a run.
fn mesh_settings(
    flags: &Flags,
    interval: Option<Duration>,
    jitter: Duration,
    listens: bool,
    measurement: &Measurement,
) -> Result<Option<MeshSettings>, ConfigError> {
    let name = |name: &str| format!("{EXPORTER}{name}");
    let fanout = flags.number(&name("mesh-fanout"), 1, MAX_FANOUT)?;
    let node_name = flags.value(&name("node-name"));
    let Some(peers) = flags.path(&name("peers"))? else {
        for (flag, given) in [
            ("mesh-fanout", fanout.is_some()),
            ("node-name", node_name.is_some()),
        ] {
            if given {
                let value = flags.value(&name(flag)).unwrap_or_default();
                return Err(flags.invalid(
                    &name(flag),
                    &value,
                    "only with --collector.verbs.peers",
                ));
            }
        }
        return Ok(None);
    };
    let shown = peers.display().to_string();
    let conflict = |reason: &str| Err(flags.invalid(&name("peers"), &shown, reason));
    if measurement.peer.is_some() {
        return conflict(
            "excludes --collector.verbs.peer (a mesh of the file's nodes, or one peer)",
        );
    }
    if !listens {
        return conflict(
            "requires --collector.verbs.listen (each node of a mesh answers the others' probes)",
        );
    }
    if !jitter.is_zero() {
        return conflict(
            "excludes --collector.verbs.jitter (a mesh's rounds and slots follow the clock)",
        );
    }
    if let Some(node) = &node_name {
        if !mesh::is_node_name(node) {
            return Err(flags.invalid(
                &name("node-name"),
                node,
                "expected 1 to 64 of A-Z a-z 0-9 . _ -",
            ));
        }
    }
    let fanout = fanout.map_or(2, |k| k as usize);
    let Some(interval) = interval else {
        return conflict("requires --collector.verbs.interval (the length of a round)");
    };
    let slot = interval / mesh::slots(fanout) as u32;
    let run = measurement.params.duration * 2;
    if slot < run {
        let value = flags.value(&name("interval")).unwrap_or_default();
        return Err(flags.invalid(
            &name("interval"),
            &value,
            format!(
                "a mesh round has {} slots (3 x --collector.verbs.mesh-fanout) of {slot:?}, shorter than twice --collector.verbs.duration ({run:?}): lengthen the interval",
                mesh::slots(fanout)
            ),
        ));
    }
    Ok(Some(MeshSettings {
        peers,
        fanout,
        node_name,
    }))
}

/// A share from 0 to 1.
fn share(flags: &Flags, flag: &str) -> Result<Option<f64>, ConfigError> {
    let Some(value) = flags.value(flag) else {
        return Ok(None);
    };
    match value.parse::<f64>() {
        Ok(share) if (0.0..=1.0).contains(&share) => Ok(Some(share)),
        _ => Err(flags.invalid(flag, &value, "must be a number from 0 to 1")),
    }
}

/// Reads the shared token: a regular file (never a FIFO or a device, which could block or never
/// end) that neither its group nor others may access, trimmed, 1 to [`oob::MAX_TOKEN`] bytes.
/// Errors never quote the file's content.
pub(super) fn read_token(path: &Path) -> Result<Vec<u8>, String> {
    let too_long = format!("the token must be 1 to {} bytes", oob::MAX_TOKEN);
    // Room for whitespace around the longest token; anything longer is not a token file.
    let text = read_private_file(path, 4 * oob::MAX_TOKEN).map_err(|err| match err {
        crate::sysfs::SysfsError::Parse { .. } => too_long.clone(),
        err => err.to_string(),
    })?;
    let token = text.trim_ascii();
    if token.is_empty() || token.len() > oob::MAX_TOKEN {
        return Err(too_long);
    }
    Ok(token.to_vec())
}

/// `hpcnode_exporter probe verbs`.
pub(super) const PROBE: ProbeCommand = ProbeCommand {
    about: "Run one RDMA WRITE bandwidth and latency probe now and print ib_write_bw's table; exit 1 below --min-ratio.",
    flags: || {
        let mut flags = vec![
            optional("device", "NAME", "RDMA device (default: the first one)."),
            optional("path.sysfs", "PATH", "sysfs mountpoint.").default_value("/sys"),
            optional("min-ratio", "RATIO", "Fail when bandwidth / port data rate is below this (e.g. 0.9)."),
        ];
        flags.extend(measurement_flags(""));
        flags
    },
    configure: |flags| Ok(Box::new(ProbeOnce::from_flags(flags)?)),
};

/// The validated `probe verbs` subcommand.
#[derive(Debug)]
struct ProbeOnce {
    sysfs: PathBuf,
    /// `None`: the first RDMA device.
    device: Option<String>,
    measurement: Measurement,
    /// Fail (exit 1) when the efficiency ratio is below this.
    min_ratio: Option<f64>,
}

impl ProbeOnce {
    fn from_flags(flags: &Flags) -> Result<ProbeOnce, ConfigError> {
        let min_ratio = match flags.value("min-ratio") {
            None => None,
            Some(value) => match value.parse::<f64>() {
                Ok(ratio) if ratio.is_finite() && ratio >= 0.0 => Some(ratio),
                _ => {
                    return Err(flags.invalid("min-ratio", &value, "must be a non-negative number"))
                }
            },
        };
        Ok(ProbeOnce {
            sysfs: flags.path("path.sysfs")?.unwrap_or_else(|| "/sys".into()),
            device: flags.value("device"),
            measurement: measurement(flags, "")?,
            min_ratio,
        })
    }
}

/// Why `probe verbs` could not give a verdict.
#[derive(Debug, thiserror::Error)]
enum ProbeOnceError {
    #[error(transparent)]
    Load(#[from] ffi::LoadError),
    #[error("invalid --token-file {path:?}: {reason}")]
    Token { path: PathBuf, reason: String },
    #[error("no RDMA device under the sysfs class/infiniband directory")]
    NoDevice,
    #[error("{device}/{port}: {source}")]
    Probe {
        device: String,
        port: u8,
        source: ProbeError,
    },
    #[error("--min-ratio given but the port's data rate is unknown")]
    NoDataRate,
}

impl RunOnce for ProbeOnce {
    /// One probe now, progress on stderr, ib_write_bw's table on stdout; whether it passed
    /// `--min-ratio` (always, without one).
    fn run(self: Box<Self>) -> Result<bool, Box<dyn std::error::Error>> {
        let ProbeOnce {
            sysfs,
            device,
            measurement,
            min_ratio,
        } = *self;
        let token = match &measurement.token_file {
            None => Vec::new(),
            Some(path) => read_token(path).map_err(|reason| ProbeOnceError::Token {
                path: path.clone(),
                reason,
            })?,
        };
        let library = Arc::new(Verbs::load(&measurement.library).map_err(ProbeOnceError::from)?);
        let device = match device {
            Some(device) => device,
            None => first_device(&sysfs).ok_or(ProbeOnceError::NoDevice)?,
        };
        let target = Target {
            sysfs,
            device,
            port: measurement.port,
            gid_index: measurement.gid_index,
        };
        let params = &measurement.params;
        let mode = measurement.peer.as_deref().unwrap_or("loopback");
        eprintln!(
            "probing {}/{} ({mode}): {} bytes x {} in flight for {:?}",
            target.device, target.port, params.message_size, params.queue_depth, params.duration
        );
        let report = super::probe(
            &library,
            &target,
            measurement.peer.as_deref(),
            &token,
            params,
            &mut |progress| eprint!("\r{}", progress_line(&progress)),
        );
        eprintln!();
        let report = report.map_err(|source| ProbeOnceError::Probe {
            device: target.device.clone(),
            port: target.port,
            source,
        })?;
        print!("{}", result_table(&report));
        let Some(min_ratio) = min_ratio else {
            return Ok(true);
        };
        let ratio = report.efficiency().ok_or(ProbeOnceError::NoDataRate)?;
        let passed = ratio >= min_ratio;
        println!(
            "{}: efficiency {ratio:.3} {} --min-ratio {min_ratio}",
            if passed { "PASS" } else { "FAIL" },
            if passed { ">=" } else { "<" }
        );
        Ok(passed)
    }
}

#[cfg(test)]
mod tests;
