//! HTTP behaviour of the real binary: content negotiation, compression, routes, the request
//! limit, clients that vanish or misbehave, and graceful shutdown.

mod util;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use util::{fixture, Exporter, HungTree};

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

#[test]
fn gzip_when_asked() {
    let exporter = procfs_exporter(&[]);
    let plain = exporter.get("/metrics").text();
    let response = exporter.get_with("/metrics", &[("Accept-Encoding", "gzip")]);
    assert_eq!(response.status, 200);
    assert_eq!(response.header("content-encoding"), Some("gzip"));
    let mut decoded = String::new();
    flate2::read::GzDecoder::new(&response.body[..])
        .read_to_string(&mut decoded)
        .unwrap();
    let without_durations = |t: &str| -> Vec<String> {
        t.lines()
            .filter(|l| !l.starts_with("hpcnode_scrape_collector_duration_seconds{"))
            .map(str::to_string)
            .collect()
    };
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
    let started = Instant::now();
    while exporter.get("/metrics").status != 200 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "exporter stopped serving"
        );
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
