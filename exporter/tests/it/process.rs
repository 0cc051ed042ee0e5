//! The exporter's own `process_*` metrics, as the Prometheus client libraries name, type and
//! describe them, read from the real process.

use crate::util;

use std::time::{SystemTime, UNIX_EPOCH};

use util::golden::{assert_lines, scrape};
use util::Exporter;

/// The value of the one sample of `name`.
fn value(text: &str, name: &str) -> f64 {
    let prefix = format!("{name} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
        .parse()
        .unwrap()
}

#[test]
fn process_metrics_are_the_client_libraries() {
    let before = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let exporter = Exporter::start_with_open_files(&["--collector.disable-defaults"], 2048, 2048);
    let text = scrape(&exporter);
    assert_lines(
        &text,
        &[
            "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.",
            "# TYPE process_cpu_seconds_total counter",
            "# HELP process_resident_memory_bytes Resident memory size in bytes.",
            "# TYPE process_resident_memory_bytes gauge",
            "# HELP process_virtual_memory_bytes Virtual memory size in bytes.",
            "# TYPE process_virtual_memory_bytes gauge",
            "# HELP process_virtual_memory_max_bytes Maximum amount of virtual memory available in bytes.",
            "# TYPE process_virtual_memory_max_bytes gauge",
            "# HELP process_open_fds Number of open file descriptors.",
            "# TYPE process_open_fds gauge",
            "# HELP process_max_fds Maximum number of open file descriptors.",
            "# TYPE process_max_fds gauge",
            "# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.",
            "# TYPE process_start_time_seconds gauge",
            "process_max_fds 2048",
        ],
    );
    let after = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let started = value(&text, "process_start_time_seconds");
    // Clock ticks are a hundredth of a second; a second either side is plenty.
    assert!(
        (before.as_secs_f64() - 1.0..=after.as_secs_f64() + 1.0).contains(&started),
        "started at {started}, not between {before:?} and {after:?}"
    );
    let resident = value(&text, "process_resident_memory_bytes");
    let kib = exporter.status_field("VmRSS") as f64;
    assert!(
        resident > kib * 1024.0 / 2.0 && resident < kib * 1024.0 * 2.0,
        "resident {resident} bytes, VmRSS {kib} KiB"
    );
    assert!(value(&text, "process_virtual_memory_bytes") >= resident);
    assert!(value(&text, "process_cpu_seconds_total") >= 0.0);
    // The exporter's descriptors, give or take the listing's own and a connection.
    let fds = value(&text, "process_open_fds");
    let open = exporter.open_files() as f64;
    assert!(
        (fds - open).abs() <= 2.0,
        "process_open_fds {fds}, /proc lists {open}"
    );
}
