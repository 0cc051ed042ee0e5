//! The framework's own metrics: build info, each collector's success and duration, its
//! error counts, the log's suppressed and dropped lines, whether the `--path.*` roots looked
//! right at start, the privileges collectors found missing, and the process's own (defined in
//! `process_metrics.rs`). Every one is listed for METRICS.md.

use super::process_metrics::{
    CPU, MAX_FDS, OPEN_FDS, RESIDENT_MEMORY, START_TIME, VIRTUAL_MEMORY, VIRTUAL_MEMORY_MAX,
};
use crate::metrics::Desc;
use crate::privileges::PRIVILEGE_MISSING;
use crate::roots::PATH_ROOT_VALID;

pub(super) const BUILD_INFO: Desc = Desc::gauge(
    "hpcnode_build_info",
    "A metric with a constant '1' value labeled by version and git revision of hpcnode_exporter.",
    None,
);
pub(super) const COLLECTOR_SUCCESS: Desc = Desc::gauge(
    "hpcnode_scrape_collector_success",
    "Whether a collector finished within the scrape deadline (1) or failed, overran or is still stuck (0).",
    None,
);
pub(super) const COLLECTOR_DURATION: Desc = Desc::gauge(
    "hpcnode_scrape_collector_duration",
    "How long a collector ran in this scrape; the deadline when it overran.",
    Some("seconds"),
);
pub(super) const COLLECTOR_ERRORS: Desc = Desc::counter(
    "hpcnode_collector_errors",
    "Errors met by collectors since start, by kind (io, parse, not_regular_file, timeout, still_running, panic, config).",
    None,
);

pub(super) const LOG_SUPPRESSED: Desc = Desc::counter(
    "hpcnode_log_messages_suppressed",
    "Collector errors counted but not logged since start, because their cause was logged recently.",
    None,
);
pub(super) const LOG_DROPPED: Desc = Desc::counter(
    "hpcnode_log_messages_dropped",
    "Log lines dropped since start because stderr did not keep up.",
    None,
);

/// Every metric the framework itself emits (for the METRICS.md check).
pub const FRAMEWORK_METRICS: [Desc; 15] = [
    BUILD_INFO,
    COLLECTOR_SUCCESS,
    COLLECTOR_DURATION,
    COLLECTOR_ERRORS,
    LOG_SUPPRESSED,
    LOG_DROPPED,
    CPU,
    RESIDENT_MEMORY,
    VIRTUAL_MEMORY,
    VIRTUAL_MEMORY_MAX,
    OPEN_FDS,
    MAX_FDS,
    START_TIME,
    PATH_ROOT_VALID,
    PRIVILEGE_MISSING,
];
