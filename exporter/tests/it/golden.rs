//! Golden end-to-end tests: the real binary on fixture trees, the whole `/metrics` output
//! compared with `exporter/tests/golden/<case>.prom` (node_exporter's e2e-output.txt contract).
//! `HPCNODE_UPDATE_GOLDEN=1 cargo test --test it golden::` rewrites the golden files.

use crate::util;

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::time::{Duration, Instant};

use util::golden::{check_fixture_output, scrape};
use util::{fixture, is_root, Exporter, HungTree, TreeCopy};

#[test]
fn real_procfs_tree() {
    let sysfs = format!("--path.sysfs={}", fixture("procfs").display());
    let exporter = Exporter::start(&["--collector.disable-defaults", "--collector.rdma", &sysfs]);
    let text = check_fixture_output("procfs", &exporter);

    // Facts from the fixture's README (the procfs parser's own tests).
    assert!(text.contains(
        "hpcnode_rdma_port_data_received_bytes_total{device=\"hfi1_0\",port=\"1\"} 1380366808104\n"
    ));
    assert!(text.contains(
        "hpcnode_rdma_port_rate_bytes_per_second{device=\"hfi1_0\",port=\"1\"} 12500000000.0\n"
    ));
    assert!(text.contains("hpcnode_rdma_port_physical_state_id{device=\"mlx5_0\",port=\"1\"} 4\n"));
    // QDR: 40 Gb/s signalling, 32 Gb/s of data.
    assert!(text.contains(
        "hpcnode_rdma_port_rate_bytes_per_second{device=\"mlx4_0\",port=\"2\"} 5000000000.0\n"
    ));
    assert!(text.contains(
        "hpcnode_rdma_port_data_rate_bytes_per_second{device=\"mlx4_0\",port=\"2\"} 4000000000.0\n"
    ));
    assert!(text.contains("hpcnode_scrape_collector_success{collector=\"rdma\"} 1\n"));
}

#[test]
fn edge_cases_tree() {
    let sysfs = format!("--path.sysfs={}", fixture("rdma_edge").display());
    let exporter = Exporter::start(&["--collector.disable-defaults", "--collector.rdma", &sysfs]);
    let text = check_fixture_output("rdma_edge", &exporter);

    let lines_for = |device: &str| -> Vec<&str> {
        text.lines()
            .filter(|l| l.contains(&format!("device=\"{device}\"")))
            .collect()
    };
    // iWARP: `N/A (no PMA)` means no counter series and no error.
    assert!(!lines_for("irdma0")
        .iter()
        .any(|l| l.starts_with("hpcnode_rdma_port_errors_total")
            || l.starts_with("hpcnode_rdma_port_data_transmitted")
            || l.starts_with("hpcnode_rdma_port_pma_saturated")));
    assert!(text.contains("hpcnode_scrape_collector_success{collector=\"rdma\"} 1\n"));
    assert!(!text
        .lines()
        .any(|l| l.starts_with("hpcnode_collector_errors_total") && !l.ends_with(" 0")));
    // Soft-RoCE has no counters/ but still exports state, rate and hw_counters.
    let rxe = lines_for("rxe0");
    for metric in [
        "hpcnode_rdma_port_state_id",
        "hpcnode_rdma_port_rate_bytes_per_second",
        "hpcnode_rdma_port_hw_stat_total",
    ] {
        assert!(
            rxe.iter().any(|l| l.starts_with(metric)),
            "rxe0 lacks {metric}"
        );
    }
    // Saturated PMA counters are flagged, one width each (gpud PR #943's node: link_downed,
    // port_xmit_discards and port_xmit_wait at their maxima).
    for counter in [
        "port_xmit_wait",
        "symbol_error",
        "link_downed",
        "local_link_integrity_errors",
        "port_xmit_discards",
    ] {
        assert!(
            text.contains(&format!(
                "hpcnode_rdma_port_pma_saturated{{device=\"mlx5_1\",port=\"1\",counter=\"{counter}\"}} 1\n"
            )),
            "{counter} not flagged"
        );
    }
    // counters/ and counters_ext/ both count the traffic: the larger is exported, whichever
    // file holds it (mlx4_3's counters_ext/ reads 0, mlx4_2's 32-bit counters/ are the lower).
    for (series, value) in [
        (
            "packets_received_total{device=\"mlx4_3\",port=\"1\"}",
            6825908347u64,
        ),
        (
            "data_received_bytes_total{device=\"mlx4_3\",port=\"1\"}",
            1843996411297 * 4,
        ),
        (
            "unicast_packets_received_total{device=\"mlx4_3\",port=\"1\"}",
            0,
        ),
        (
            "packets_received_total{device=\"mlx4_2\",port=\"1\"}",
            300000000005,
        ),
        (
            "data_transmitted_bytes_total{device=\"mlx4_2\",port=\"1\"}",
            21474836480123 * 4,
        ),
    ] {
        let line = format!("hpcnode_rdma_port_{series} {value}\n");
        assert!(text.contains(&line), "missing {line}");
    }
    // NDR 4X: 400 Gb/s is 5e10 bytes/s of data.
    assert!(text.contains(
        "hpcnode_rdma_port_data_rate_bytes_per_second{device=\"mlx5_1\",port=\"1\"} 50000000000.0\n"
    ));
}

/// A FIFO where a counter belongs (it must not block), an unreadable file, garbage values, a
/// directory in place of a file, a symlink loop: each is reported, the rest is exported.
#[test]
fn bad_input_tree() {
    let tree = TreeCopy::of("rdma_bad");
    let counters = tree
        .sys()
        .join("class/infiniband/mlx5_bad/ports/1/counters");
    let fifo = counters.join("port_xmit_data");
    let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo reads a NUL-terminated path that lives across the call.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o644) }, 0);
    let unreadable = counters.join("port_rcv_packets");
    fs::write(&unreadable, "12\n").unwrap();
    fs::set_permissions(&unreadable, fs::Permissions::from_mode(0o000)).unwrap();
    // Root reads anything: drop to nobody so the permission bits bite, as on a hardened node.
    let uid = if is_root() {
        fs::set_permissions(tree.dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        Some(65534)
    } else {
        None
    };
    let exporter = Exporter::start_as(
        &[
            "--collector.disable-defaults",
            "--collector.rdma",
            &tree.sys_arg(),
        ],
        uid,
    );

    let started = Instant::now();
    let text = check_fixture_output("rdma_bad", &exporter);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "a FIFO blocked the scrape"
    );

    let good: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("device=\"mlx5_good\""))
        .collect();
    assert!(good
        .iter()
        .any(|l| l.starts_with("hpcnode_rdma_port_data_transmitted_bytes_total")));
    assert!(good
        .iter()
        .any(|l| l.starts_with("hpcnode_rdma_port_state_id")));

    // Two more scrapes: errors are counted each time but logged once per cause.
    scrape(&exporter);
    scrape(&exporter);
    for cause in [
        "port_xmit_data: not a regular file",
        "port_rcv_packets: Permission denied",
        "port_xmit_discards: not a regular file",
        "symbol_error: Too many levels of symbolic links",
    ] {
        // Lines reach stderr through the log's writer thread, after the response.
        let log = exporter.log_with(cause);
        assert_eq!(log.matches(cause).count(), 1, "{cause:?} in log:\n{log}");
    }
}

/// A read that hangs in the kernel (a FUSE file that never answers, standing in for a wedged
/// driver) must not hang the scrape, hide other devices, or pile up threads.
#[test]
fn hung_read_is_bounded() {
    let Some(hung) = HungTree::mount("hung_read_is_bounded") else {
        return;
    };
    let exporter = Exporter::start(&[
        "--collector.disable-defaults",
        "--collector.rdma",
        &hung.tree.sys_arg(),
        "--scrape.timeout=500ms",
    ]);
    let mut threads = Vec::new();
    for attempt in 0..20 {
        let started = Instant::now();
        let text = scrape(&exporter);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "scrape waited on a hung read"
        );
        assert!(text.contains("hpcnode_scrape_collector_success{collector=\"rdma\"} 0\n"));
        assert!(text.contains("hpcnode_rdma_port_state_id{device=\"hfi1_0\",port=\"1\"} 4\n"));
        // From the second scrape on, the hung device is skipped and hides only itself (in the
        // first, a one-CPU machine has no second worker to read what comes after it).
        if attempt > 0 {
            assert!(text.contains("hpcnode_rdma_port_state_id{device=\"mlx5_0\",port=\"1\"} 4\n"));
            assert!(!text.contains("device=\"mlx4_0\",port=\"2\""));
        }
        threads.push(exporter.threads());
    }
    let text = scrape(&exporter);
    assert!(
        text.contains("hpcnode_collector_errors_total{collector=\"rdma\",kind=\"timeout\"} 1\n")
    );
    assert!(text.contains(
        "hpcnode_collector_errors_total{collector=\"rdma\",kind=\"still_running\"} 20\n"
    ));
    // One thread stays stuck in the hung read; a pile-up would add one per scrape (19 more by
    // the last). The blocking pool may hold a few more while slow (not hung) reads finish on a
    // loaded machine, and keeps idle ones for a while: that stays well below a pile-up.
    let most = *threads.iter().max().unwrap();
    assert!(most <= threads[0] + 10, "threads grew: {threads:?}");
}

/// A sysfs root with `count` ConnectX-6 HDR ports, `mlx5_0` to `mlx5_<count - 1>`, in
/// `rdma_edge`'s layout (class link into `devices/pci…`, `device` link) and formats. Only a
/// port's state and rate files: the tree must be quick to write on a slow, busy disk.
fn many_hcas(count: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let sys = dir.path().join("sys");
    let bridge = "devices/pci0000:00/0000:00:02.0";
    let class = sys.join("class/infiniband");
    fs::create_dir_all(&class).unwrap();
    for i in 0..count {
        let address = format!("0000:{:02x}:00.{}", 1 + i / 8, i % 8);
        let name = format!("mlx5_{i}");
        let device = sys
            .join(bridge)
            .join(&address)
            .join("infiniband")
            .join(&name);
        let port = device.join("ports/1");
        fs::create_dir_all(&port).unwrap();
        symlink(format!("../../../{address}"), device.join("device")).unwrap();
        symlink(
            format!("../../{bridge}/{address}/infiniband/{name}"),
            class.join(&name),
        )
        .unwrap();
        for (file, value) in [
            ("state", "4: ACTIVE"),
            ("phys_state", "5: LinkUp"),
            ("rate", "200 Gb/sec (4X HDR)"),
        ] {
            fs::write(port.join(file), format!("{value}\n")).unwrap();
        }
    }
    dir
}

/// A `--scrape.timeout` far too short for the tree: each scrape is complete with success 1, or
/// says it is not (success 0 and one timeout, or a unit skipped as still running); never some
/// devices silently missing with success 1. Asserts that invariant, not the machine's speed.
#[test]
fn scrape_cut_short_by_the_deadline_says_so() {
    const HCAS: usize = 300;
    let tree = many_hcas(HCAS);
    let sysfs = format!("--path.sysfs={}", tree.path().join("sys").display());
    let exporter = Exporter::start(&[
        "--collector.disable-defaults",
        "--collector.rdma",
        &sysfs,
        "--scrape.timeout=10ms",
    ]);
    let count = |text: &str, kind: &str| -> u64 {
        let series =
            format!("hpcnode_collector_errors_total{{collector=\"rdma\",kind=\"{kind}\"}} ");
        text.lines()
            .find_map(|line| line.strip_prefix(&series))
            .unwrap_or_else(|| panic!("no {series}in {text}"))
            .parse()
            .unwrap()
    };
    let (mut timeouts, mut still_running) = (0, 0);
    for _ in 0..20 {
        let text = scrape(&exporter);
        let devices: BTreeSet<&str> = text
            .lines()
            .filter_map(|line| line.strip_prefix("hpcnode_rdma_port_state_id{device=\""))
            .filter_map(|rest| rest.split('"').next())
            .collect();
        let success = text.contains("hpcnode_scrape_collector_success{collector=\"rdma\"} 1\n");
        let (now_timeouts, now_still_running) =
            (count(&text, "timeout"), count(&text, "still_running"));
        let flagged = now_timeouts - timeouts + now_still_running - still_running;
        assert!(
            now_timeouts - timeouts <= 1,
            "one timeout per scrape at most"
        );
        if success {
            assert_eq!(devices.len(), HCAS, "devices missing with success 1");
            assert_eq!(flagged, 0, "an error counted with success 1");
        } else {
            assert!(
                flagged >= 1,
                "success 0 with no timeout or still_running counted"
            );
        }
        (timeouts, still_running) = (now_timeouts, now_still_running);
    }
    // However many scrapes were cut short, each cause of a timeout is logged once.
    if timeouts > 0 {
        let log = exporter.log_with("kind=timeout");
        let lines: Vec<&str> = log.lines().filter(|l| l.contains("kind=timeout")).collect();
        for line in &lines {
            let cause = line
                .split(" err=")
                .nth(1)
                .unwrap()
                .split('"')
                .nth(1)
                .unwrap();
            assert_eq!(
                log.matches(cause).count(),
                1,
                "{cause:?} logged again:\n{log}"
            );
        }
        assert!(!lines.is_empty());
    }
}
