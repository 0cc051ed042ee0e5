//! What a collector can report as failed: the error kinds counted in
//! `hpcnode_collector_errors_total`, and one error with its cause. Below everything else in the
//! crate, so the readers (`sysfs.rs`) and the framework (`collector.rs`) share it without
//! importing each other.

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    Io,
    Parse,
    NotRegularFile,
    Timeout,
    StillRunning,
    Panic,
}

impl ErrorKind {
    pub const ALL: [ErrorKind; 6] = [
        ErrorKind::Io,
        ErrorKind::Parse,
        ErrorKind::NotRegularFile,
        ErrorKind::Timeout,
        ErrorKind::StillRunning,
        ErrorKind::Panic,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Io => "io",
            ErrorKind::Parse => "parse",
            ErrorKind::NotRegularFile => "not_regular_file",
            ErrorKind::Timeout => "timeout",
            ErrorKind::StillRunning => "still_running",
            ErrorKind::Panic => "panic",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectError {
    pub kind: ErrorKind,
    /// Stable across scrapes for the same fault (a path and an errno, not a timestamp), since it
    /// decides whether the error is logged again.
    pub cause: String,
}

impl CollectError {
    pub fn new(kind: ErrorKind, cause: impl Into<String>) -> Self {
        CollectError {
            kind,
            cause: cause.into(),
        }
    }
}
