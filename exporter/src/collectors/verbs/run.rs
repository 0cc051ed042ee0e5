//! One probe run: the port it probes, what it measures against, what it reports (and how a
//! terminal shows it), and how it fails.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::engine::{self, Measurement, Params, Progress};
use super::ffi::{self, Verbs};
use super::oob::{self, DecodeError, OobError, RejectReason};
use super::{auth, mesh, peer, port};
use crate::sysfs::SysfsError;

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
        "no RoCE v2 GID on the port (give the netdev an address, or set --collector.verbs.gid-index)"
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
        "the responder closed the connection without answering this exporter's protocol version {} hello: an exporter speaking version 1 does so, as does one whose --collector.verbs.allow does not list this node",
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

/// What a run measures against, and so the `mode` and `peer` labels of its results.
#[derive(Debug, Clone, Copy)]
pub(super) enum RunMode<'a> {
    Loopback,
    /// `--collector.verbs.peer`, labelled by its address.
    Peer(&'a str),
    /// A node of the mesh: its results labelled by its name, its runs counted with every
    /// other mesh peer's (`peer=""`), so that a node's counters do not grow with the fleet.
    Mesh(&'a mesh::Node),
}

impl<'a> RunMode<'a> {
    pub(super) fn address(self) -> Option<&'a str> {
        match self {
            RunMode::Loopback => None,
            RunMode::Peer(address) => Some(address),
            RunMode::Mesh(node) => Some(&node.address),
        }
    }

    pub(super) fn mode(self) -> &'static str {
        match self {
            RunMode::Loopback => "loopback",
            RunMode::Peer(_) => "peer",
            RunMode::Mesh(_) => "mesh",
        }
    }

    /// The `peer` label of the run and skip counters.
    pub(super) fn counted_as(self) -> &'a str {
        match self {
            RunMode::Peer(address) => address,
            RunMode::Loopback | RunMode::Mesh(_) => "",
        }
    }

    /// The `peer` label of the last run's results.
    pub(super) fn measured_as(self) -> &'a str {
        match self {
            RunMode::Mesh(node) => &node.name,
            run => run.counted_as(),
        }
    }
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

/// Tests only: a finished probe, 11.8 GB/s on a port whose data rate is 12.5 GB/s.
#[cfg(test)]
pub(super) fn test_report() -> Report {
    Report {
        measurement: Measurement {
            bandwidth: engine::Bandwidth {
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

/// Tests only: port 1 of `mlx5_0`.
#[cfg(test)]
pub(super) fn test_target() -> Target {
    Target {
        sysfs: PathBuf::from("/sys"),
        device: "mlx5_0".into(),
        port: 1,
        gid_index: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use test_report as report;

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
}
