//! The real binary under signals: SIGHUP (a reload, to node_exporter's Debian unit) is logged
//! and survived; a second SIGTERM or SIGINT while in-flight requests finish exits at once.

use crate::util;

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use util::{fixture, Exporter, TreeCopy, LARGE_NODE};

#[test]
fn sighup_is_logged_and_survived() {
    let sysfs = format!("--path.sysfs={}", fixture("procfs").display());
    let mut exporter =
        Exporter::start(&["--collector.disable-defaults", "--collector.rdma", &sysfs]);
    for _ in 0..3 {
        exporter.signal(libc::SIGHUP);
        assert_eq!(exporter.exit_within(Duration::from_millis(300)), None);
        assert_eq!(exporter.get("/metrics").status, 200);
    }
    let log = exporter.log_with("SIGHUP received");
    assert_eq!(
        log.matches("msg=\"SIGHUP received; nothing to reload\"")
            .count(),
        3,
        "{log}"
    );
    let status = exporter.terminate();
    assert!(status.success(), "{status:?}");
}

/// A client that stops reading a large response holds graceful shutdown until its write
/// stalls out (30 s); a second signal cuts that short.
#[test]
fn a_second_signal_while_shutting_down_exits_at_once() {
    let tree = TreeCopy::many_rdma_devices(LARGE_NODE);
    for (first, second) in [(libc::SIGTERM, libc::SIGINT), (libc::SIGINT, libc::SIGTERM)] {
        let mut exporter = Exporter::start(&[
            "--collector.disable-defaults",
            "--collector.rdma",
            &tree.sys_arg(),
            "--scrape.timeout=60s",
        ]);
        let (status, _stalled) = exporter.stalled_get("/metrics");
        assert_eq!(status, 200);
        exporter.signal(first);
        exporter.log_with("shutting down");
        assert_eq!(
            exporter.exit_within(Duration::from_secs(1)),
            None,
            "did not wait for the response in flight"
        );
        exporter.signal(second);
        let status = exporter
            .exit_within(Duration::from_secs(10))
            .expect("a second signal did not end the shutdown");
        assert_eq!(
            status.code(),
            Some(1),
            "{status:?} (signal {:?})",
            status.signal()
        );
        assert!(exporter
            .log_with("exiting at once")
            .contains("msg=\"exiting at once; in-flight requests abandoned\""));
    }
}
