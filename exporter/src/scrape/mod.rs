//! The scrape: every started collector run under one deadline, their listings and units read
//! by one crew of workers (one by default), and the framework's own metrics.
//!
//! Invariants:
//! - a scrape never fails and never waits past the deadline because of a collector;
//! - a collector's units (devices) are read independently: a unit whose read hangs is not read
//!   again until that read returns, so it hides only itself, and stuck threads never pile up
//!   (at most one per hung unit);
//! - a scrape that leaves any of a collector's units unread at the deadline says so: one
//!   `timeout` error and success 0 for that collector, never part of the devices with success 1;
//! - every error is counted in `hpcnode_collector_errors_total` and logged once per distinct cause.

mod busy;
mod error_log;
mod framework_metrics;
mod process_metrics;
mod run;
mod schedule;
mod selection;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use busy::Busy;
use error_log::ErrorLog;
pub use framework_metrics::FRAMEWORK_METRICS;
use framework_metrics::{BUILD_INFO, COLLECTOR_DURATION, COLLECTOR_SUCCESS};
use run::{Run, Work};
use schedule::{Crew, STALL_LOOKS_PER_DEADLINE};
pub use selection::{Selection, SelectionError};

use crate::collector::{
    CollectError, ErrorKind, Host, Registration, Settings, StartError, Started,
};
use crate::metrics::{Samples, Value};
use crate::privileges;
use crate::roots::{Root, Roots};

struct Slot {
    name: &'static str,
    collector: Started,
    busy: Busy,
    /// Set at start when a root it reads is not one: counted every scrape, success 0.
    misrooted: Option<CollectError>,
}

/// Runs the enabled collectors for each scrape.
pub struct Scraper {
    slots: Vec<Slot>,
    deadline: Duration,
    errors: ErrorLog,
    revision: &'static str,
    workers: usize,
    /// How long a worker may be in one piece before it counts as stuck and is replaced.
    stalled_after: Duration,
    roots: Option<Roots>,
}

impl Scraper {
    /// The started collectors, by name, in the order their output appears; at most `workers`
    /// threads read them at once while none is stuck.
    pub fn new(
        collectors: Vec<(&'static str, Started)>,
        deadline: Duration,
        workers: usize,
    ) -> Self {
        let names: Vec<_> = collectors.iter().map(|(name, _)| *name).collect();
        Scraper {
            slots: collectors
                .into_iter()
                .map(|(name, collector)| Slot {
                    name,
                    collector,
                    busy: Arc::default(),
                    misrooted: None,
                })
                .collect(),
            deadline,
            errors: ErrorLog::new(&names),
            revision: env!("HPCNODE_REVISION"),
            workers: workers.max(1),
            stalled_after: deadline / STALL_LOOKS_PER_DEADLINE,
            roots: None,
        }
    }

    /// Starts each enabled collector (its registration and validated settings, in the order
    /// their output appears) on `host`, the roots checked once (one that is not a root is
    /// logged, and fails every scrape of the collectors that read it): the scraper the exporter
    /// serves from, and the one `check` scrapes once. The first collector that cannot start
    /// fails the whole.
    pub fn start(
        enabled: impl IntoIterator<Item = (&'static Registration, Box<dyn Settings>)>,
        host: &Host,
        workers: usize,
    ) -> Result<Self, StartError> {
        let roots = Roots::check(&host.sysfs, &host.procfs, &host.rootfs);
        roots.log_invalid();
        let mut started = Vec::new();
        let mut reads = HashMap::new();
        for (registration, settings) in enabled {
            reads.insert(registration.name, registration.roots);
            started.push((registration.name, settings.start(host)?));
        }
        let scraper = Scraper::new(started, host.scrape_timeout, workers);
        Ok(scraper.with_roots(roots, |name| reads.get(name).copied().unwrap_or_default()))
    }

    /// Exports `roots` as checked at start, and fails every scrape of a collector that reads
    /// (`reads`, by collector name) one that does not look like a root.
    pub fn with_roots(mut self, roots: Roots, reads: impl Fn(&str) -> &'static [Root]) -> Self {
        for slot in &mut self.slots {
            slot.misrooted = roots.error_for(reads(slot.name));
        }
        self.roots = Some(roots);
        self
    }

    pub fn collector_names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.slots.iter().map(|slot| slot.name)
    }

    /// Stops every collector (SIGTERM): what their start acquired is released.
    pub fn stop(&self) {
        for slot in &self.slots {
            slot.collector.0.stop();
        }
    }

    /// The collectors a request's `collect[]` and `exclude[]` names select.
    pub fn select(
        &self,
        collect: &[String],
        exclude: &[String],
    ) -> Result<Selection, SelectionError> {
        let enabled: Vec<_> = self.collector_names().collect();
        Selection::new(&enabled, collect, exclude)
    }

    /// One scrape: the selected collectors' samples plus the framework's own metrics.
    pub async fn scrape(&self, selection: &Selection) -> Samples {
        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + self.deadline;
        // Beside the crew, on the blocking pool: no read runs on the async thread.
        let process = tokio::task::spawn_blocking(process_metrics::read);
        let slots: Vec<_> = (self.slots.iter().enumerate())
            .filter(|(position, _)| selection.runs(*position))
            .map(|(_, slot)| slot)
            .collect();
        let runs: Vec<_> = slots
            .iter()
            .map(|slot| {
                let run = Run::new(
                    &slot.collector,
                    &slot.busy,
                    self.deadline,
                    deadline.into_std(),
                );
                Arc::new(run) as Arc<dyn Work>
            })
            .collect();
        let crew = Arc::new(Crew::new(
            runs.clone(),
            started,
            deadline.into_std(),
            self.stalled_after,
            self.workers,
        ));
        let overran = crew.work(deadline).await;

        let mut samples = Samples::default();
        samples.push(
            &BUILD_INFO,
            vec![
                ("version", env!("CARGO_PKG_VERSION").into()),
                ("revision", self.revision.into()),
            ],
            Value::Int(1),
        );
        for (slot, run) in slots.iter().zip(runs) {
            let outcome = run.outcome(overran);
            let errors = outcome.output.errors.iter().chain(&outcome.failures);
            for error in errors.chain(&slot.misrooted) {
                self.errors.record(slot.name, error);
            }
            samples.append(outcome.output.samples);
            let success = outcome.failures.is_empty()
                && slot.misrooted.is_none()
                && outcome
                    .output
                    .errors
                    .iter()
                    .all(|e| e.kind != ErrorKind::StillRunning);
            let label = vec![("collector", slot.name.into())];
            samples.push(
                &COLLECTOR_SUCCESS,
                label.clone(),
                Value::Int(u64::from(success)),
            );
            samples.push(
                &COLLECTOR_DURATION,
                label,
                Value::Float(outcome.duration.as_secs_f64()),
            );
        }
        self.errors.export(&mut samples, |name| {
            slots.iter().any(|slot| slot.name == name)
        });
        if let Some(roots) = &self.roots {
            roots.export(&mut samples);
        }
        privileges::export_missing(&mut samples);
        // A process metric is missing rather than the scrape late or failed.
        samples.append(process.await.unwrap_or_default());
        samples
    }
}

#[cfg(test)]
mod tests;
