//! The error log shared by all scrapes: errors counted by collector and kind, and each
//! distinct cause logged once, so a fault that repeats every scrape does not flood the log.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use super::framework_metrics::{COLLECTOR_ERRORS, LOG_DROPPED, LOG_SUPPRESSED};
use crate::collector::{CollectError, ErrorKind};
use crate::logging::{self, Level, OncePerCause};
use crate::metrics::{Samples, Value};

/// Distinct causes remembered for log deduplication.
const MAX_LOGGED_CAUSES: usize = 4096;

/// Error counters and the once-per-cause log filter, shared by all scrapes.
pub(super) struct ErrorLog {
    counts: HashMap<(&'static str, ErrorKind), AtomicU64>,
    /// By collector, kind and the error's key (a parse error's path and reason), not the cause
    /// text, which may quote content that changes every scrape.
    logged: OncePerCause<(&'static str, ErrorKind, String)>,
    suppressed: AtomicU64,
}

impl ErrorLog {
    pub(super) fn new(collectors: &[&'static str]) -> Self {
        let counts = collectors
            .iter()
            .flat_map(|name| ErrorKind::ALL.map(|kind| ((*name, kind), AtomicU64::new(0))))
            .collect();
        ErrorLog {
            counts,
            logged: OncePerCause::new(MAX_LOGGED_CAUSES),
            suppressed: AtomicU64::new(0),
        }
    }

    pub(super) fn record(&self, collector: &'static str, error: &CollectError) {
        if let Some(count) = self.counts.get(&(collector, error.kind)) {
            count.fetch_add(1, Ordering::Relaxed);
        }
        if !self
            .logged
            .is_new((collector, error.kind, error.key().to_string()))
        {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let mut fields = vec![
            ("collector", collector),
            ("kind", error.kind.as_str()),
            ("err", error.cause.as_str()),
        ];
        fields.extend(error.context.iter().map(|(k, v)| (*k, v.as_str())));
        logging::log(
            Level::Warn,
            "collector error (logged once per cause)",
            &fields,
        );
    }

    /// The counts of the collectors `exported` takes, and the log's own.
    pub(super) fn export(&self, samples: &mut Samples, exported: impl Fn(&str) -> bool) {
        let mut counts: Vec<_> = (self.counts.iter())
            .filter(|((collector, _), _)| exported(collector))
            .collect();
        counts.sort_by_key(|((collector, kind), _)| (*collector, kind.as_str()));
        for ((collector, kind), count) in counts {
            samples.push(
                &COLLECTOR_ERRORS,
                vec![
                    ("collector", (*collector).into()),
                    ("kind", kind.as_str().into()),
                ],
                Value::Int(count.load(Ordering::Relaxed)),
            );
        }
        let suppressed = self.suppressed.load(Ordering::Relaxed);
        samples.push(&LOG_SUPPRESSED, Vec::new(), Value::Int(suppressed));
        samples.push(
            &LOG_DROPPED,
            Vec::new(),
            Value::Int(logging::dropped_lines()),
        );
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::metrics::{encode, Format};
    use crate::sysfs::SysfsError;

    /// The exported `hpcnode_log_messages_suppressed_total`.
    fn suppressed(errors: &ErrorLog) -> usize {
        let mut samples = Samples::default();
        errors.export(&mut samples, |_| true);
        let text = encode(samples, Format::PrometheusText).unwrap();
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix("hpcnode_log_messages_suppressed_total "));
        line.unwrap().parse().unwrap()
    }

    #[test]
    fn a_file_whose_content_changes_every_scrape_does_not_silence_later_faults() {
        let errors = ErrorLog::new(&["test"]);
        let counter = Path::new("/sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error");
        let scrapes = 2 * MAX_LOGGED_CAUSES;
        for scrape in 0..scrapes {
            let garbage = format!("garbage {scrape}");
            let error = SysfsError::parse(counter, "not an unsigned integer", &garbage);
            errors.record("test", &error.into());
        }
        let before = suppressed(&errors);
        errors.record(
            "test",
            &CollectError::new(ErrorKind::Io, "read /sys/class/x: Input/output error"),
        );
        assert_eq!(suppressed(&errors), before, "a new fault was not logged");
        // The changing file is one cause: logged once, then suppressed.
        assert_eq!(before, scrapes - 1);
    }
}
