//! What a collector can report as failed: the error kinds counted in
//! `hpcnode_collector_errors_total`, and one error with its cause. Below everything else in the
//! crate, so the readers (`sysfs/`) and the framework (`collector.rs`) share it without
//! importing each other.

use crate::sync::lock;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    Io,
    Parse,
    NotRegularFile,
    Timeout,
    StillRunning,
    Panic,
    /// The exporter is set up wrong for the node (a `--path.*` root that is not one).
    Config,
}

impl ErrorKind {
    pub const ALL: [ErrorKind; 7] = [
        ErrorKind::Io,
        ErrorKind::Parse,
        ErrorKind::NotRegularFile,
        ErrorKind::Timeout,
        ErrorKind::StillRunning,
        ErrorKind::Panic,
        ErrorKind::Config,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Io => "io",
            ErrorKind::Parse => "parse",
            ErrorKind::NotRegularFile => "not_regular_file",
            ErrorKind::Timeout => "timeout",
            ErrorKind::StillRunning => "still_running",
            ErrorKind::Panic => "panic",
            ErrorKind::Config => "config",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectError {
    pub kind: ErrorKind,
    /// Stable across scrapes for the same fault (a path and an errno, not a timestamp), since it
    /// decides whether the error is logged again (unless a key does, see `keyed_by`).
    pub cause: String,
    /// Fields the log line carries besides the cause (a probe's target and result).
    pub context: Vec<(&'static str, String)>,
    /// What the fault is about when the cause quotes something that varies (a parse error quotes
    /// the file's content): errors of one kind with one key are one cause for the log.
    key: Option<String>,
}

impl CollectError {
    pub fn new(kind: ErrorKind, cause: impl Into<String>) -> Self {
        CollectError {
            kind,
            cause: cause.into(),
            context: Vec::new(),
            key: None,
        }
    }

    /// Makes `key` (a path and a reason) identify the fault for the log instead of the cause
    /// text.
    pub fn keyed_by(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// What identifies the fault for the once-per-cause log: the key, else the cause.
    pub fn key(&self) -> &str {
        self.key.as_deref().unwrap_or(&self.cause)
    }

    /// Adds a field to the log line.
    pub fn with(mut self, field: &'static str, value: impl Into<String>) -> Self {
        self.context.push((field, value.into()));
        self
    }
}

/// Failures that happen between scrapes (a probe run, a responder session): kept until the
/// next scrape hands them to the framework, which counts and logs them like any other error.
/// Bounded, so that an exporter nobody scrapes does not grow; past the bound failures are
/// still counted where they happen (the probe's own counters), not here.
#[derive(Debug, Default)]
pub struct PendingErrors(std::sync::Mutex<Vec<CollectError>>);

/// Failures kept between two scrapes at most.
const MAX_PENDING: usize = 1024;

impl PendingErrors {
    pub fn push(&self, error: CollectError) {
        let mut pending = lock(&self.0);
        if pending.len() < MAX_PENDING {
            pending.push(error);
        }
    }

    /// Everything since the last call.
    pub fn take(&self) -> Vec<CollectError> {
        std::mem::take(&mut *lock(&self.0))
    }
}
