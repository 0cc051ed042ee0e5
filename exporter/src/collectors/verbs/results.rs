//! The results store: what the scheduler's runs leave for scrapes to read (counters, the last
//! run's and the last success's results per device, port, mode and peer), and their export.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use super::mesh::{self, MeshState};
use super::peer::ResponderStats;
use super::run::{ProbeError, Report, RunMode, Target, RESULTS};
use super::{
    BANDWIDTH, DURATION, EFFICIENCY, LAST_SUCCESS, LATENCY, MESH_PEER_SUCCESS, RUNS, SKIPPED,
};
use crate::collector::{CollectError, ErrorKind, Output, PendingErrors};
use crate::metrics::{Labels, Value};
use crate::sync::lock;

/// Every `reason` label value of the skipped counter: the port moved more than
/// `--collector.verbs.busy-share` of its data rate (a job is using it), or a responder session is
/// using it now.
pub const SKIP_REASONS: [&str; 2] = ["port_busy", "port_in_use"];

/// The results of one (device, port, mode, peer).
pub(super) struct Series {
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
pub(super) struct Service {
    pub(super) available: bool,
    pub(super) series: Mutex<BTreeMap<String, Series>>,
    pub(super) responder: Option<Arc<ResponderStats>>,
    /// `None` unless `--collector.verbs.peers` is set.
    pub(super) mesh: Option<Mutex<MeshState>>,
    /// Run failures since the last scrape, for `hpcnode_collector_errors_total` and the log.
    pub(super) failures: PendingErrors,
}

impl Service {
    pub(super) fn record(
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
    pub(super) fn skip(&self, target: &Target, run: RunMode, reason: &'static str) {
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
    /// for at most twice `--collector.verbs.mesh-fanout` peers, however large the fleet.
    pub(super) fn keep_mesh_peers(&self, target: &Target, peers: &[&mesh::Node]) {
        let keep: BTreeSet<String> = peers
            .iter()
            .map(|node| series_key(target, "mesh", &node.name))
            .collect();
        lock(&self.series).retain(|key, series| !series.mesh_peer || keep.contains(key));
    }

    pub(super) fn set_mesh(&self, state: MeshState) {
        if let Some(mesh) = &self.mesh {
            *lock(mesh) = state;
        }
    }
}

/// The results store's key of one (device, port, mode, peer).
fn series_key(target: &Target, mode: &str, peer: &str) -> String {
    format!("{}/{}/{mode}/{peer}", target.device, target.port)
}

/// A series' counters (none for one mesh peer: the mesh's own series counts its runs) and
/// results.
pub(super) fn export_series(series: &Series, out: &mut Output) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collector::Collector;
    use crate::collectors::verbs::run::{test_report as report, test_target as target};
    use crate::collectors::verbs::VerbsCollector;
    use crate::metrics::{encode, Format, Samples};

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
    fn skips_are_exported_by_reason() {
        let service = service();
        service.skip(&target(), RunMode::Peer("n2:18515"), "port_busy");
        service.skip(&target(), RunMode::Peer("n2:18515"), "port_busy");
        let text = scrape(&VerbsCollector {
            service: Some(service),
            stop: Arc::default(),
            listener: None,
            visibility: None,
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
            visibility: None,
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
            visibility: None,
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
}
