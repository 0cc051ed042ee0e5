//! HTTP behaviour of the real binary: content negotiation, compression, routes, the request
//! limit, clients that vanish, misbehave, hold connections or do not read, concurrent scrapes,
//! and graceful shutdown.

use crate::util;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use util::{fixture, Exporter, HungTree, TreeCopy, LARGE_NODE};

fn procfs_exporter(extra: &[&str]) -> Exporter {
    let sysfs = format!("--path.sysfs={}", fixture("procfs").display());
    let mut args = vec![
        "--collector.disable-defaults",
        "--collector.rdma",
        sysfs.as_str(),
    ];
    args.extend_from_slice(extra);
    Exporter::start(&args)
}

#[test]
fn text_format_by_default() {
    let exporter = procfs_exporter(&[]);
    let response = exporter.get("/metrics");
    assert_eq!(response.status, 200);
    assert_eq!(
        response.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    assert!(!response.text().contains("# EOF"));
    assert!(response
        .text()
        .contains("# TYPE hpcnode_rdma_port_errors_total counter\n"));
}

#[test]
fn openmetrics_when_prometheus_asks_for_it() {
    let exporter = procfs_exporter(&[]);
    let accept = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    let response = exporter.get_with("/metrics", &[("Accept", accept)]);
    assert_eq!(response.status, 200);
    assert_eq!(
        response.header("content-type"),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
    );
    let text = response.text();
    assert!(text.ends_with("# EOF\n"));
    assert!(text.contains("# TYPE hpcnode_rdma_port_errors counter\n"));
    // A client that prefers text gets text.
    let text_first = exporter.get_with(
        "/metrics",
        &[(
            "Accept",
            "text/plain;version=0.0.4,application/openmetrics-text;q=0.2",
        )],
    );
    assert_eq!(
        text_first.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
}

fn gunzip(body: &[u8]) -> String {
    let mut decoded = String::new();
    flate2::read::GzDecoder::new(body)
        .read_to_string(&mut decoded)
        .unwrap();
    decoded
}

/// A scrape's lines but those that differ from scrape to scrape: its collectors' durations
/// and the process's own samples.
fn without_durations(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| !l.starts_with("hpcnode_scrape_collector_duration_seconds{"))
        .filter(|l| !l.starts_with("process_"))
        .collect()
}

#[test]
fn gzip_when_asked() {
    let exporter = procfs_exporter(&[]);
    let plain = exporter.get("/metrics").text();
    let response = exporter.get_with("/metrics", &[("Accept-Encoding", "gzip")]);
    assert_eq!(response.status, 200);
    assert_eq!(response.header("content-encoding"), Some("gzip"));
    let decoded = gunzip(&response.body);
    assert_eq!(without_durations(&decoded), without_durations(&plain));
    assert!(response.body.len() < plain.len() / 3);
    let refused = exporter.get_with("/metrics", &[("Accept-Encoding", "gzip;q=0")]);
    assert_eq!(refused.header("content-encoding"), None);
}

#[test]
fn routes() {
    let exporter = procfs_exporter(&["--web.telemetry-path=/custom"]);
    let landing = exporter.get("/");
    assert_eq!(landing.status, 200);
    assert!(landing
        .header("content-type")
        .unwrap()
        .starts_with("text/html"));
    assert!(landing.text().contains("<li>rdma</li>"));
    assert!(landing.text().contains("href=\"/custom\""));
    assert_eq!(exporter.get("/custom").status, 200);
    assert_eq!(exporter.get("/metrics").status, 404);
    assert_eq!(exporter.get("/-/healthy").status, 200);
    assert_eq!(exporter.get("/-/ready").status, 200);
    assert_eq!(exporter.get("/nope").status, 404);
    let post = exporter.request(
        "POST /custom HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(post.status, 405);
}

#[test]
fn hostile_requests_do_not_hurt() {
    let exporter = procfs_exporter(&[]);
    // Garbage instead of HTTP.
    let mut stream = exporter.connect();
    stream.write_all(b"\x00\x01\x02 not http\r\n\r\n").unwrap();
    let mut reply = Vec::new();
    let _ = stream.read_to_end(&mut reply);
    assert!(reply.is_empty() || reply.starts_with(b"HTTP/1.1 400"));
    // A request head far beyond any scrape's.
    let huge = format!(
        "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Filler: {}\r\n\r\n",
        "a".repeat(64 * 1024)
    );
    let mut stream = exporter.connect();
    let _ = stream.write_all(huge.as_bytes());
    let mut reply = Vec::new();
    let _ = stream.read_to_end(&mut reply);
    assert!(
        reply.is_empty() || reply.starts_with(b"HTTP/1.1 431"),
        "{:?}",
        String::from_utf8_lossy(&reply)
    );
    // Half a request, then gone.
    let mut stream = exporter.connect();
    stream.write_all(b"GET /metr").unwrap();
    drop(stream);
    assert_eq!(exporter.get("/metrics").status, 200);
}

/// Slowloris: a client that sends its request head a byte now and then, or goes idle on a
/// kept-alive connection, is cut off once the head's time (10 s) is up, and holds nothing.
#[test]
fn slow_request_heads_are_cut_off() {
    let exporter = procfs_exporter(&[]);
    let mut trickle = exporter.connect();
    trickle.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
    let mut idle = exporter.connect();
    idle.write_all(b"GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let started = Instant::now();
    let mut closed = false;
    while started.elapsed() < Duration::from_secs(25) {
        // One header line a second keeps the connection busy but never finishes the head.
        if trickle.write_all(b"X-Slow: 1\r\n").is_err() {
            closed = true;
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    assert!(
        closed,
        "a trickled request head held its connection for 25 s"
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "cut off only after {:?}",
        started.elapsed()
    );
    // The idle kept-alive connection got its answer, then was closed too.
    let mut reply = Vec::new();
    let _ = idle.read_to_end(&mut reply);
    assert!(reply.starts_with(b"HTTP/1.1 200"), "{reply:?}");
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(exporter.get("/metrics").status, 200);
}

/// A scrape that waits on a hung read (bounded by the deadline) holds its request slot; with
/// `--web.max-requests=1` a second concurrent scrape gets 503, and a client that disconnects
/// mid-scrape does not leak its slot.
#[test]
fn request_limit_and_disconnects() {
    let Some(hung) = HungTree::mount("request_limit_and_disconnects") else {
        return;
    };
    let exporter = Exporter::start(&[
        "--collector.disable-defaults",
        "--collector.rdma",
        &hung.tree.sys_arg(),
        "--web.max-requests=1",
        "--scrape.timeout=2s",
    ]);
    let slow = exporter.connect();
    (&slow)
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let refused = exporter.get("/metrics");
    assert_eq!(refused.status, 503);
    // Health checks are not scrapes: never limited.
    assert_eq!(exporter.get("/-/healthy").status, 200);
    // The first client goes away while its scrape is in flight.
    drop(slow);
    let started = Instant::now();
    loop {
        let response = exporter.get("/metrics");
        if response.status == 200 {
            break;
        }
        assert_eq!(response.status, 503);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "slot never released"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Many clients vanishing mid-scrape leave the exporter serving.
    for _ in 0..20 {
        let mut stream = exporter.connect();
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
    }
    scrapes_answer_again(&exporter, "exporter stopped serving");
}

/// Waits until a scrape is answered with 200 again, for 10 s at most; else fails with `why`.
fn scrapes_answer_again(exporter: &Exporter, why: &str) {
    let started = Instant::now();
    while exporter.get("/metrics").status != 200 {
        assert!(started.elapsed() < Duration::from_secs(10), "{why}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// SIGTERM during a scrape: the scrape finishes and is answered, then the process exits 0.
#[test]
fn graceful_shutdown_finishes_in_flight_scrapes() {
    let Some(hung) = HungTree::mount("graceful_shutdown_finishes_in_flight_scrapes") else {
        return;
    };
    let exporter = Exporter::start(&[
        "--collector.disable-defaults",
        "--collector.rdma",
        &hung.tree.sys_arg(),
        "--scrape.timeout=1s",
    ]);
    let mut in_flight = exporter.connect();
    in_flight
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let address = exporter.address.clone();
    let status = exporter.terminate();
    assert!(status.success(), "exit status {status:?}");
    let mut reply = String::new();
    in_flight.read_to_string(&mut reply).unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(reply.contains("hpcnode_rdma_port_state_id{device=\"hfi1_0\",port=\"1\"} 4"));
    assert!(
        std::net::TcpStream::connect(address).is_err(),
        "still listening"
    );
}

/// `n` `hw_counters` files under `counters` that are not numbers: one parse error, and one log
/// line, each.
fn write_bad_counters(counters: &std::path::Path, names: std::ops::Range<usize>) {
    std::fs::create_dir_all(counters).unwrap();
    for i in names {
        std::fs::write(counters.join(format!("bad_counter_{i}")), "x\n").unwrap();
    }
}

fn log_lines_dropped(response: &util::Response) -> u64 {
    let text = response.text();
    let value = text
        .lines()
        .find_map(|l| l.strip_prefix("hpcnode_log_messages_dropped_total "));
    value.unwrap_or_else(|| panic!("{text}")).parse().unwrap()
}

/// A stuck journald: stderr is a pipe nobody reads, and thousands of new faults want a log line
/// each. Scrapes and health checks still answer at once, the lines that do not fit are dropped
/// and counted, and SIGTERM still ends the process promptly.
#[test]
fn a_stalled_stderr_holds_up_neither_serving_nor_exit() {
    const BOUND: Duration = Duration::from_secs(5);
    let root = tempfile::tempdir().unwrap();
    let counters = root.path().join("class/infiniband/mlx5_0/hw_counters");
    write_bad_counters(&counters, 0..3000);
    let sysfs = format!("--path.sysfs={}", root.path().display());
    let exporter = Exporter::start_with_stalled_stderr(&[
        "--collector.disable-defaults",
        "--collector.rdma",
        &sysfs,
    ]);

    let first = exporter.get_within("/metrics", BOUND);
    assert_eq!(first.status, 200);
    assert!(first
        .text()
        .contains("hpcnode_collector_errors_total{collector=\"rdma\",kind=\"parse\"} 3000"));
    let dropped = log_lines_dropped(&first);
    assert!(dropped > 0, "{}", first.text());
    assert_eq!(exporter.get_within("/-/healthy", BOUND).status, 200);

    write_bad_counters(&counters, 3000..6000);
    let second = exporter.get_within("/metrics", BOUND);
    assert!(log_lines_dropped(&second) > dropped, "{}", second.text());
    assert_eq!(exporter.get_within("/-/healthy", BOUND).status, 200);

    let stopping = Instant::now();
    let status = exporter.terminate();
    assert!(status.success(), "exit status {status:?}");
    assert!(
        stopping.elapsed() < BOUND,
        "exit took {:?}",
        stopping.elapsed()
    );
}

/// A scrape request that must be answered before the idle connections around it could have
/// timed out (10 s for a request head): `None` when it was not.
fn scrape_before_idle_timeout(exporter: &Exporter) -> Option<u16> {
    let mut stream = exporter.connect();
    stream
        .set_read_timeout(Some(Duration::from_secs(8)))
        .unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..]).ok()?.parse().ok()
}

/// Connections that send nothing, as many as `count`.
fn idle_connections(exporter: &Exporter, count: usize) -> Vec<std::net::TcpStream> {
    (0..count)
        .map(|_| std::net::TcpStream::connect(&exporter.address).expect("connect"))
        .collect()
}

/// More idle connections than `--web.max-connections`, under a file limit that the old server
/// (no cap) exhausted: each new connection takes the place of the one idle the longest, so a
/// scrape is answered at once and the open files stay near the cap.
#[test]
fn idle_connections_beyond_the_cap_do_not_lock_out_scrapes() {
    let sysfs = format!("--path.sysfs={}", fixture("procfs").display());
    let exporter = Exporter::start_with_open_files(
        &[
            "--collector.disable-defaults",
            "--collector.rdma",
            &sysfs,
            "--web.max-connections=32",
        ],
        128,
        128,
    );
    let idle = idle_connections(&exporter, 200);
    assert_eq!(scrape_before_idle_timeout(&exporter), Some(200));
    assert_eq!(exporter.get("/-/healthy").status, 200);
    // Displaced connections are closed by their own tasks, soon after. The rdma collector's
    // held attributes get only what the file limit leaves beside the connections (128 - 32 -
    // 64 = 32): counted apart.
    let held = exporter.open_files_under(&fixture("procfs"));
    assert!(held <= 32, "{held} attributes held with 32 to spare");
    let started = Instant::now();
    while exporter.open_files() - exporter.open_files_under(&fixture("procfs")) > 32 + 40 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{} files open with a cap of 32 ({held} of them held attributes)",
            exporter.open_files()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(idle);
}

/// Under systemd's soft limit the old server ran out of descriptors at a few dozen connections;
/// the limit is raised to the hard one at startup, and said so.
#[test]
fn soft_open_file_limit_is_raised_to_the_hard_one() {
    let sysfs = format!("--path.sysfs={}", fixture("procfs").display());
    // Below the test's own hard limit, which only root could raise.
    let hard = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .maximum
        .map_or(4096, |hard| hard.min(4096));
    let exporter = Exporter::start_with_open_files(
        &["--collector.disable-defaults", "--collector.rdma", &sysfs],
        64,
        hard,
    );
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", exporter.pid())).unwrap();
    let open_files = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let hard = hard.to_string();
    assert_eq!(
        open_files.split_whitespace().collect::<Vec<_>>()[3..5],
        [hard.as_str(), hard.as_str()],
        "{open_files}"
    );
    assert!(exporter.log().contains(&format!(
        "msg=\"raised the open file limit to its hard limit\" from=64 to={hard}"
    )));
    let idle = idle_connections(&exporter, 150);
    assert_eq!(scrape_before_idle_timeout(&exporter), Some(200));
    drop(idle);
}

/// Accepts failing for want of descriptors (a hard file limit below what the connection cap
/// needs) are logged once, not ten times a second, and retried with backoff; the exporter
/// serves again as soon as descriptors are free.
#[test]
fn failing_accepts_are_logged_once_and_retried() {
    let sysfs = format!("--path.sysfs={}", fixture("procfs").display());
    let exporter = Exporter::start_with_open_files(
        &["--collector.disable-defaults", "--collector.rdma", &sysfs],
        48,
        48,
    );
    assert!(exporter
        .log()
        .contains("the open file limit leaves less than --web.max-connections"));
    let idle = idle_connections(&exporter, 100);
    std::thread::sleep(Duration::from_secs(3));
    let log = exporter.log();
    let failures = log.matches("accept failed").count();
    assert_eq!(failures, 1, "{log}");
    assert!(log.contains("Too many open files"), "{log}");
    drop(idle);
    scrapes_answer_again(&exporter, "not serving");
}

/// The rdma collector on a generated tree, with a deadline that a loaded machine meets.
fn generated_node_exporter(tree: &TreeCopy, max_requests: &str) -> Exporter {
    Exporter::start(&[
        "--collector.disable-defaults",
        "--collector.rdma",
        &tree.sys_arg(),
        "--scrape.timeout=60s",
        max_requests,
    ])
}

/// `--web.max-requests` bounds the bodies held for clients that do not read them: a scrape's
/// slot is held until its body is written or its connection is gone, so beyond the limit new
/// scrapes get 503 instead of one more body each (the old server released the slot before
/// writing, and every such client held a whole body).
#[test]
fn clients_that_do_not_read_hold_their_scrape_slot() {
    let tree = TreeCopy::many_rdma_devices(LARGE_NODE);
    let exporter = generated_node_exporter(&tree, "--web.max-requests=2");
    let body = exporter.get("/metrics").body.len() as u64;
    let baseline = exporter.status_field("VmRSS") * 1024;
    // One after another, so that no two share a collection: each 200 is a body of its own.
    let stalled: Vec<_> = (0..20).map(|_| exporter.stalled_get("/metrics")).collect();
    let statuses: Vec<u16> = stalled.iter().map(|(status, _)| *status).collect();
    assert_eq!(statuses[..2], [200, 200], "{statuses:?}");
    assert!(statuses[2..].iter().all(|s| *s == 503), "{statuses:?}");
    let grown = (exporter.status_field("VmRSS") * 1024).saturating_sub(baseline);
    assert!(
        grown < 6 * body,
        "RSS grew by {grown} bytes with bodies of {body} bytes"
    );
    // Health checks are not scrapes.
    assert_eq!(exporter.get("/-/healthy").status, 200);
    // The clients go away: their slots come back.
    drop(stalled);
    scrapes_answer_again(&exporter, "slots not released");
}

/// Concurrent scrapes join the collection in progress and share its samples: all are answered
/// in full, and the threads stay those of one scrape (the old server ran one collection per
/// scrape, with its own blocking threads).
#[test]
fn concurrent_scrapes_share_one_collection() {
    const DEVICES: usize = 400;
    const SCRAPES: usize = 40;
    let tree = TreeCopy::many_rdma_devices(DEVICES);
    let exporter = generated_node_exporter(&tree, "--web.max-requests=0");
    let barrier = std::sync::Barrier::new(SCRAPES);
    let done = std::sync::atomic::AtomicBool::new(false);
    let started = Instant::now();
    let (bodies, most_threads) = std::thread::scope(|scope| {
        let watcher = scope.spawn(|| {
            let mut most = 0;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                most = most.max(exporter.threads());
                std::thread::sleep(Duration::from_millis(10));
            }
            most
        });
        let scrapes: Vec<_> = (0..SCRAPES)
            .map(|_| {
                scope.spawn(|| {
                    barrier.wait();
                    exporter.get("/metrics")
                })
            })
            .collect();
        let bodies: Vec<_> = scrapes.into_iter().map(|s| s.join().unwrap()).collect();
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        (bodies, watcher.join().unwrap())
    });
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{SCRAPES} scrapes took {:?}",
        started.elapsed()
    );
    for response in &bodies {
        assert_eq!(response.status, 200);
        let text = response.text();
        let devices = text
            .lines()
            .filter(|l| l.starts_with("hpcnode_rdma_port_state_id{"))
            .count();
        assert_eq!(devices, DEVICES);
        assert!(text.contains("hpcnode_scrape_collector_success{collector=\"rdma\"} 1\n"));
    }
    assert!(
        most_threads <= 24,
        "{most_threads} threads for {SCRAPES} concurrent scrapes"
    );
}

/// A large scrape's text, encoded a piece at a time as it is written (chunked), and gzipped
/// piece by piece, is one whole exposition: each family's header once, though its samples
/// span pieces; OpenMetrics' `# EOF` once, at the end; and gzip decodes to the plain text.
#[test]
fn a_large_scrape_written_in_pieces_is_one_text() {
    let tree = TreeCopy::many_rdma_devices(LARGE_NODE);
    let exporter = generated_node_exporter(&tree, "--web.max-requests=0");
    let response = exporter.get("/metrics");
    assert_eq!(response.header("transfer-encoding"), Some("chunked"));
    let plain = response.text();
    // Many pieces of at most 700 samples.
    let samples = plain.lines().filter(|l| !l.starts_with('#')).count();
    assert!(samples > 10 * 700, "{samples} samples");
    let headers: Vec<&str> = plain.lines().filter(|l| l.starts_with("# TYPE ")).collect();
    let distinct: std::collections::HashSet<&str> = headers.iter().copied().collect();
    assert_eq!(headers.len(), distinct.len(), "{headers:#?}");

    let openmetrics = [("Accept", "application/openmetrics-text; version=1.0.0")];
    let openmetrics = exporter.get_with("/metrics", &openmetrics).text();
    assert_eq!(openmetrics.matches("# EOF").count(), 1);
    assert!(openmetrics.ends_with("\n# EOF\n"));

    let gzipped = exporter.get_with("/metrics", &[("Accept-Encoding", "gzip")]);
    assert_eq!(gzipped.header("content-encoding"), Some("gzip"));
    let decoded = gunzip(&gzipped.body);
    assert_eq!(without_durations(&decoded), without_durations(&plain));
}

/// rdma on `sysfs` beside modules on `modules_rhel7`'s /proc and root.
fn rdma_and_modules(sysfs: &str, extra: &[&str]) -> Exporter {
    let root = util::fixture_root("modules_rhel7");
    let procfs = format!("--path.procfs={}", root.join("proc").display());
    let rootfs = format!("--path.rootfs={}", root.display());
    let mut args = vec![
        "--collector.disable-defaults",
        "--collector.rdma",
        "--collector.modules",
        sysfs,
        &procfs,
        &rootfs,
    ];
    args.extend_from_slice(extra);
    Exporter::start(&args)
}

/// The collectors a page has run, in its order.
fn collectors_in(text: &str) -> Vec<&str> {
    text.lines()
        .filter_map(|l| l.strip_prefix("hpcnode_scrape_collector_success{collector=\""))
        .map(|rest| rest.split('"').next().unwrap())
        .collect()
}

/// What every page has, whatever its collectors: the framework's and the process's metrics.
const FRAMEWORK_PREFIXES: &[&str] = &[
    "hpcnode_build_info{",
    "hpcnode_scrape_collector_",
    "hpcnode_collector_errors_total{",
    "hpcnode_log_messages_",
    "hpcnode_path_root_valid{",
    "hpcnode_collector_privilege_missing{",
    "process_",
];

#[test]
fn collect_and_exclude_choose_the_collectors_of_a_scrape() {
    let sysfs = format!("--path.sysfs={}", fixture("procfs").display());
    let exporter = rdma_and_modules(&sysfs, &[]);
    assert_eq!(
        collectors_in(&exporter.get("/metrics").text()),
        ["rdma", "modules"]
    );
    // As Prometheus sends `params` (brackets escaped), unescaped, repeated; or all but one.
    for query in [
        "collect%5B%5D=rdma",
        "collect[]=rdma",
        "collect[]=rdma&collect[]=rdma",
        "exclude[]=modules",
    ] {
        let text = exporter.get(&format!("/metrics?{query}")).text();
        assert_eq!(collectors_in(&text), ["rdma"], "{query}");
        assert!(
            text.contains("\nhpcnode_rdma_port_"),
            "{query}: no rdma series"
        );
        assert!(
            text.contains("\nprocess_open_fds "),
            "{query}: no process metrics"
        );
        let foreign: Vec<_> = (text.lines())
            .filter(|l| !l.starts_with('#') && !l.starts_with("hpcnode_rdma_"))
            .filter(|l| !FRAMEWORK_PREFIXES.iter().any(|p| l.starts_with(p)))
            .collect();
        assert!(foreign.is_empty(), "{query}: not rdma's: {foreign:#?}");
        assert!(!text.contains("collector=\"modules\""), "{query}");
    }
    // Excluding a collector that is not enabled excludes nothing, as in node_exporter.
    let text = exporter.get("/metrics?exclude[]=pci").text();
    assert_eq!(collectors_in(&text), ["rdma", "modules"]);
    for (query, reason) in [
        (
            "collect[]=pci",
            "collect[]: \"pci\" is not an enabled collector\n",
        ),
        (
            "collect[]=",
            "collect[]: \"\" is not an enabled collector\n",
        ),
        (
            "collect[]=%3Cb%3E",
            "collect[]: a name given is not an enabled collector\n",
        ),
        (
            "collect[]=rdma&exclude[]=modules",
            "collect[] and exclude[] cannot be combined\n",
        ),
    ] {
        let response = exporter.get(&format!("/metrics?{query}"));
        assert_eq!(response.status, 400, "{query}");
        assert_eq!(response.text(), reason, "{query}");
    }
}

#[test]
fn a_filtered_scrape_does_not_share_an_unfiltered_collection() {
    let test = "a_filtered_scrape_does_not_share_an_unfiltered_collection";
    let Some(hung) = HungTree::mount(test) else {
        return;
    };
    let exporter = rdma_and_modules(&hung.tree.sys_arg(), &["--scrape.timeout=3s"]);
    let unfiltered = exporter.connect();
    (&unfiltered)
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let text = exporter.get("/metrics?collect[]=modules").text();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the filtered scrape waited for the unfiltered collection"
    );
    assert_eq!(collectors_in(&text), ["modules"]);
    let mut whole = String::new();
    (&unfiltered).read_to_string(&mut whole).unwrap();
    assert_eq!(collectors_in(&whole), ["rdma", "modules"]);
}
