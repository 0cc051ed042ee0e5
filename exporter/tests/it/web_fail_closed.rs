//! `--web.config.file` against clients and writers that try to get in, on the real binary with
//! real sockets: a config rewritten in place, a client CA revoked under a kept-alive
//! connection, certificates renamed in during a reload, a FIFO named by the config, and a flood
//! of wrong passwords while a real Prometheus scrapes.

use crate::util;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use util::web::{bcrypt_hash, curl, eventually, port, sample, start, Pki};

/// The flag a test's client threads poll; set when dropped, so that a failing assertion
/// stops them too.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// A child process killed when dropped, so that a failing assertion leaves none behind.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const TLS: &str = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n";

/// One plain-HTTP request on a new connection: its status line, if any came.
fn plain_status(port: &str) -> Option<String> {
    let mut stream = TcpStream::connect(format!("127.0.0.1:{port}")).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let request = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    stream.write_all(request.as_bytes()).ok()?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).ok()?;
    Some(String::from_utf8_lossy(&head).to_string())
}

#[test]
fn a_config_rewritten_in_place_never_serves_plain_http_or_skips_auth() {
    let pki = Pki::new();
    let text = |round: usize| {
        format!(
            "{TLS}basic_auth_users:\n  alice: {}\n# round {round}\n",
            bcrypt_hash("wonderland")
        )
    };
    let config = pki.write("web.yml", &text(0));
    let exporter = start(&config);
    let port = port(&exporter);
    let ca = pki.path("ca.crt").to_str().unwrap().to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = StopOnDrop(stop.clone());
    let plain_answers = Arc::new(AtomicU64::new(0));
    let unauthenticated_200s = Arc::new(AtomicU64::new(0));
    let mut clients = Vec::new();
    for _ in 0..8 {
        let (stop, plain_answers, port) = (stop.clone(), plain_answers.clone(), port.clone());
        clients.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if plain_status(&port).is_some_and(|head| head.starts_with("HTTP/1.")) {
                    plain_answers.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for _ in 0..2 {
        let (stop, unauthenticated, port, ca) = (
            stop.clone(),
            unauthenticated_200s.clone(),
            port.clone(),
            ca.clone(),
        );
        clients.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if curl(&port, "/metrics", &["--cacert", &ca]).1 == 200 {
                    unauthenticated.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    // `cat > web.yml`: truncated, then written, here in two writes with pauses between.
    let path = pki.path("web.yml");
    for round in 1..=60 {
        let text = text(round);
        let (head, tail) = text.split_at(text.len() / 2);
        let mut file = std::fs::File::create(&path).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        file.write_all(head.as_bytes()).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        file.write_all(tail.as_bytes()).unwrap();
        drop(file);
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(stopping);
    for client in clients {
        client.join().unwrap();
    }
    assert_eq!(
        plain_answers.load(Ordering::Relaxed),
        0,
        "plain HTTP answered"
    );
    assert_eq!(
        unauthenticated_200s.load(Ordering::Relaxed),
        0,
        "served without credentials"
    );
    let auth = ["--cacert", ca.as_str(), "-u", "alice:wonderland"];
    assert_eq!(curl(&port, "/metrics", &auth).1, 200);
}

/// An `openssl s_client` connection kept open: requests written to it one at a time.
struct KeptAlive {
    child: KillOnDrop,
    lines: mpsc::Receiver<String>,
}

impl KeptAlive {
    fn connect(port: &str, pki: &Pki, cert: &str) -> KeptAlive {
        let mut child = Command::new("openssl")
            .args([
                "s_client",
                "-quiet",
                "-connect",
                &format!("127.0.0.1:{port}"),
            ])
            .arg("-CAfile")
            .arg(pki.path("ca.crt"))
            .arg("-cert")
            .arg(pki.path(&format!("{cert}.crt")))
            .arg("-key")
            .arg(pki.path(&format!("{cert}.key")))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("openssl");
        let stdout = child.stdout.take().unwrap();
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    return;
                }
            }
        });
        KeptAlive {
            child: KillOnDrop(child),
            lines,
        }
    }

    /// The status line of the answer to one more request on this connection.
    fn status(&mut self) -> Option<String> {
        let stdin = self.child.0.stdin.as_mut().unwrap();
        stdin
            .write_all(b"GET /-/healthy HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .ok()?;
        stdin.flush().ok()?;
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let left = until.checked_duration_since(Instant::now())?;
            let line = self.lines.recv_timeout(left).ok()?;
            if line.starts_with("HTTP/1.1 ") {
                // The rest of the answer: headers, then the short body.
                while self.lines.recv_timeout(Duration::from_millis(200)).is_ok() {}
                return Some(line.trim().to_string());
            }
        }
    }
}

#[test]
fn a_kept_alive_connection_is_refused_once_its_client_ca_is_revoked() {
    let pki = Pki::new();
    std::fs::copy(pki.path("ca.crt"), pki.path("clients.crt")).unwrap();
    let verify = format!(
        "{TLS}  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: clients.crt\n"
    );
    let config = pki.write("web.yml", &verify);
    let exporter = start(&config);
    let port = port(&exporter);
    let mut kept = KeptAlive::connect(&port, &pki, "client");
    assert_eq!(kept.status().as_deref(), Some("HTTP/1.1 200 OK"));

    // The clients' CA replaced by another: the client's certificate no longer verifies.
    pki.ca("replacement");
    let replacement = std::fs::read_to_string(pki.path("replacement.crt")).unwrap();
    pki.write("clients.crt", &replacement);
    let [ca, cert, key] = ["ca.crt", "client.crt", "client.key"].map(|f| pki.path(f));
    let [ca, cert, key] = [&ca, &cert, &key].map(|p| p.to_str().unwrap().to_string());
    let new_handshake = ["--cacert", &ca, "--cert", &cert, "--key", &key];
    eventually("a new handshake with the revoked CA fails", || {
        curl(&port, "/-/healthy", &new_handshake).0 != 0
    });
    // The connection made before is refused too, and closed.
    assert_eq!(kept.status().as_deref(), Some("HTTP/1.1 403 Forbidden"));
    assert_eq!(kept.status(), None, "the connection stayed open");
    drop(kept);
    drop(exporter);
}

#[test]
fn certificates_renamed_in_during_a_reload_are_served_soon_after() {
    let pki = Pki::new();
    // A large CA bundle makes each reading long, and so the window for a rename in its middle.
    let ca = std::fs::read_to_string(pki.path("ca.crt")).unwrap();
    std::fs::write(pki.path("bundle.crt"), ca.repeat(1500)).unwrap();
    let text = |round: usize| {
        format!(
            "{TLS}  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: bundle.crt\n# round {round}\n"
        )
    };
    let config = pki.write("web.yml", &text(0));
    let exporter = start(&config);
    let port = port(&exporter);
    for round in 1..=12u64 {
        let issuer = format!("round{round}");
        pki.ca(&issuer);
        pki.signed(
            &format!("{issuer}-server"),
            &issuer,
            &["subjectAltName=DNS:localhost"],
        );
        for (name, extension) in [("server.key", "key"), ("server.crt", "crt")] {
            let from = pki.path(&format!("{issuer}-server.{extension}"));
            std::fs::copy(&from, pki.path(&format!(".{name}"))).unwrap();
        }
        // A reload starts (the config file changed, and a connection asks for the config);
        // the new key and certificate are renamed in a little later each round, so that some
        // land while the large bundle is read.
        pki.write("web.yml", &text(round as usize));
        drop(TcpStream::connect(format!("127.0.0.1:{port}")).unwrap());
        std::thread::sleep(Duration::from_millis(8 * round));
        for name in ["server.key", "server.crt"] {
            std::fs::rename(pki.path(&format!(".{name}")), pki.path(name)).unwrap();
        }
        let cafile = pki
            .path(&format!("{issuer}.crt"))
            .to_str()
            .unwrap()
            .to_string();
        eventually(&format!("round {round}'s certificate is served"), || {
            curl(&port, "/-/healthy", &["--cacert", &cafile]).1 == 200
        });
    }
}

#[test]
fn a_fifo_named_by_the_config_blocks_no_request_and_sigterm_still_stops() {
    let pki = Pki::new();
    let config = pki.write("web.yml", TLS);
    let mut exporter = start(&config);
    let port = port(&exporter);
    let ca = pki.path("ca.crt").to_str().unwrap().to_string();
    let status = Command::new("mkfifo")
        .arg(pki.path("fifo.crt"))
        .status()
        .unwrap();
    assert!(status.success());
    pki.write(
        "web.yml",
        &format!("{TLS}  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: fifo.crt\n"),
    );
    let unreadable = "hpcnode_web_config_reload_failures_total{reason=\"unreadable\"}";
    eventually("the FIFO is refused", || {
        sample(&port, &["--cacert", &ca], unreadable) == 1
    });
    for _ in 0..5 {
        let started = Instant::now();
        assert_eq!(curl(&port, "/-/healthy", &["--cacert", &ca]).1, 200);
        assert!(started.elapsed() < Duration::from_secs(5));
    }
    let log = exporter.log_with("web config file not reloaded");
    assert!(log.contains("fifo.crt: not a regular file"), "{log}");
    exporter.signal(libc::SIGTERM);
    assert!(
        exporter.exit_within(Duration::from_secs(10)).is_some(),
        "SIGTERM did not stop the exporter"
    );
}

/// A free loopback port (a race with other tests is possible, and harmless: Prometheus fails
/// to start and says so).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One value of an instant query to Prometheus at `prometheus`.
fn query(prometheus: &str, expr: &str) -> Option<f64> {
    let out = Command::new("curl")
        .args(["-sS", "-m", "10", "--data-urlencode"])
        .arg(format!("query={expr}"))
        .arg(format!("http://{prometheus}/api/v1/query"))
        .output()
        .ok()?;
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    answer["data"]["result"][0]["value"][1]
        .as_str()?
        .parse()
        .ok()
}

/// Seconds of CPU the process has used (utime + stime, at 100 ticks a second).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    ticks as f64 / 100.0
}

#[test]
fn a_wrong_password_flood_does_not_lock_prometheus_out() {
    let dir = tempfile::tempdir().unwrap();
    // Cost 10, as a site's hash would be.
    let hash = bcrypt::hash("right", 10).unwrap();
    let config = dir.path().join("web.yml");
    std::fs::write(
        &config,
        format!("basic_auth_users:\n  prometheus: '{hash}'\n"),
    )
    .unwrap();
    let exporter = start(&config);
    let port = port(&exporter);
    let cpu_before = cpu_seconds(exporter.pid());

    // 200 connections from 200 addresses of their own, each sending wrong passwords as fast as
    // they are answered.
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = StopOnDrop(stop.clone());
    let mut flood = Vec::new();
    for index in 0..200u32 {
        let (stop, port) = (stop.clone(), port.parse::<u16>().unwrap());
        flood.push(std::thread::spawn(move || {
            let source = Ipv4Addr::from(u32::from(Ipv4Addr::new(127, 0, 1, 0)) + index);
            let mut attempt = 0u64;
            while !stop.load(Ordering::Relaxed) {
                attempt += 1;
                let credentials = format!("prometheus:guess-{index}-{attempt}");
                let encoded = base64_encode(credentials.as_bytes());
                let _ = flood_request(source, port, &encoded);
            }
        }));
    }
    std::thread::sleep(Duration::from_secs(2));

    let prometheus_address = format!("127.0.0.1:{}", free_port());
    std::fs::write(
        dir.path().join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n\
             - job_name: hpcnode\n  basic_auth:\n    username: prometheus\n    password: right\n\
             \x20 static_configs:\n  - targets: ['127.0.0.1:{port}']\n"
        ),
    )
    .unwrap();
    let prometheus = Command::new("prometheus")
        .arg(format!(
            "--config.file={}",
            dir.path().join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address={prometheus_address}"))
        .arg("--log.level=warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("prometheus (tests/setup.sh installs it)");
    let prometheus = KillOnDrop(prometheus);
    // A new source waits behind the other new sources' first checks (one per flooding
    // address, tens of seconds on a loaded machine); main never let it in at all.
    let first_up = Instant::now();
    let up_within = Duration::from_secs(150);
    while query(&prometheus_address, "up{job=\"hpcnode\"}") != Some(1.0) {
        assert!(first_up.elapsed() < up_within, "Prometheus never got in");
        std::thread::sleep(Duration::from_millis(250));
    }
    let first_up = first_up.elapsed();
    // Every scrape in the next 20 s, the flood going on, must succeed within its 1 s timeout.
    std::thread::sleep(Duration::from_secs(20));
    let window = "[19s]";
    let scrapes = query(
        &prometheus_address,
        &format!("count_over_time(up{{job=\"hpcnode\"}}{window})"),
    );
    let successes = query(
        &prometheus_address,
        &format!("sum_over_time(up{{job=\"hpcnode\"}}{window})"),
    );
    let slowest = query(
        &prometheus_address,
        &format!("max_over_time(scrape_duration_seconds{{job=\"hpcnode\"}}{window})"),
    );
    drop(stopping);
    for thread in flood {
        thread.join().unwrap();
    }
    drop(prometheus);
    let cpu = cpu_seconds(exporter.pid()) - cpu_before;
    let rss_kib = exporter.status_field("VmHWM");
    let auth = format!("Basic {}", base64_encode(b"prometheus:right"));
    let refused = plain_metrics(&port, &auth);
    eprintln!(
        "flood: Prometheus first up after {first_up:?}; {scrapes:?} scrapes in the window, \
         {successes:?} up, slowest {slowest:?} s; exporter CPU {cpu:.1} s, peak RSS {rss_kib} KiB; \
         refused: {refused}"
    );
    let scrapes = scrapes.expect("no scrapes in the window");
    assert!(scrapes >= 15.0, "{scrapes} scrapes in 19 s");
    assert_eq!(successes, Some(scrapes), "a scrape failed during the flood");
    assert!(slowest.is_some_and(|slowest| slowest < 1.0), "{slowest:?}");
}

/// One request with `Basic <encoded>` credentials from `source`; its status line.
fn flood_request(source: Ipv4Addr, port: u16, encoded: &str) -> std::io::Result<String> {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    socket.bind(&SocketAddr::from((source, 0)).into())?;
    socket.connect(&SocketAddr::from(([127, 0, 0, 1], port)).into())?;
    let mut stream: TcpStream = socket.into();
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let request = format!(
        "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {encoded}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes())?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head)?;
    Ok(String::from_utf8_lossy(&head).to_string())
}

/// The refusal counters from a plain-HTTP scrape with `authorization`.
fn plain_metrics(port: &str, authorization: &str) -> String {
    let out = Command::new("curl")
        .args(["-sS", "-m", "10", "-H"])
        .arg(format!("Authorization: {authorization}"))
        .arg(format!("http://127.0.0.1:{port}/metrics"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|line| line.starts_with("hpcnode_web_auth_failures_total"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
