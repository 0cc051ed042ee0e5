//! The verbs probe on a machine without RDMA hardware: the binding's layouts against the real
//! `verbs.h`, the real `libibverbs.so.1` loaded (from Debian's package, unpacked by
//! `exporter/tests/support/fetch-rdma-core.sh`, which `tests/setup.sh` runs), the unavailable state where it
//! is absent, and the responder against hostile peers over real TCP sockets.
//! What needs an RDMA device (a successful probe) runs in the kernel lab on Soft-RoCE.

use crate::util;

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use hpcnode_exporter::collectors::verbs::auth::Transcript;
use hpcnode_exporter::collectors::verbs::engine::Endpoint;
use hpcnode_exporter::collectors::verbs::ffi::ABI_LAYOUT;
use hpcnode_exporter::collectors::verbs::oob::{decode, Message, VERSION};
use hpcnode_exporter::collectors::verbs::peer::MAX_HANDSHAKES;
use util::{Exporter, BINARY};

/// Exporter flags that load the real library.
fn real_library() -> String {
    format!("--collector.verbs.library={}", util::libibverbs())
}

/// A library path that cannot load: a node without rdma-core.
const NO_LIBRARY: &str = "--collector.verbs.library=/nonexistent/libibverbs.so.1";

fn edge_sysfs() -> String {
    format!("--path.sysfs={}", util::fixture("rdma_edge").display())
}

/// Scrapes until `line` appears (the probe and the responder work in the background).
fn wait_for(exporter: &Exporter, line: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = exporter.get("/metrics").text();
        if text.contains(line) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{line} never appeared; last scrape:\n{text}\nlog:\n{}",
            exporter.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn binding_layout_matches_verbs_h() {
    let dir = tempfile::tempdir().unwrap();
    let mut program = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <infiniband/verbs.h>\nint main(void) {\n",
    );
    for (expression, _) in ABI_LAYOUT {
        program.push_str(&format!(
            "    printf(\"%zu\\n\", (size_t)({expression}));\n"
        ));
    }
    program.push_str("    return 0;\n}\n");
    let source = dir.path().join("layout.c");
    std::fs::write(&source, program).unwrap();
    let binary = dir.path().join("layout");
    let compiled = Command::new("gcc")
        .arg("-I")
        .arg(util::rdma_core().join("usr/include"))
        .arg(&source)
        .arg("-o")
        .arg(&binary)
        .output()
        .expect("gcc is required for this test");
    assert!(
        compiled.status.success(),
        "{}",
        String::from_utf8_lossy(&compiled.stderr)
    );
    let output = Command::new(&binary).output().unwrap();
    let values: Vec<usize> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| line.parse().unwrap())
        .collect();
    assert_eq!(values.len(), ABI_LAYOUT.len());
    let mismatches: Vec<_> = ABI_LAYOUT
        .iter()
        .zip(&values)
        .filter(|((_, ours), theirs)| ours != *theirs)
        .map(|((expression, ours), theirs)| {
            format!("{expression}: binding {ours}, verbs.h {theirs}")
        })
        .collect();
    assert!(mismatches.is_empty(), "{mismatches:#?}");
}

#[test]
fn without_libibverbs_the_probe_says_unavailable_once() {
    let exporter = Exporter::start(&[
        "--collector.disable-defaults",
        "--collector.verbs",
        "--collector.verbs.interval=1s",
        NO_LIBRARY,
        &edge_sysfs(),
    ]);
    for _ in 0..3 {
        let text = exporter.get("/metrics").text();
        assert!(text.contains("hpcnode_verbs_probe_available 0"), "{text}");
        assert!(!text.contains("hpcnode_verbs_probe_runs_total"), "{text}");
        assert!(text.contains("hpcnode_scrape_collector_success{collector=\"verbs\"} 1"));
    }
    let log = exporter.log();
    assert_eq!(log.matches("verbs probe unavailable").count(), 1, "{log}");
    assert!(log.contains("/nonexistent/libibverbs.so.1"), "{log}");
}

#[test]
fn unconfigured_probe_is_silent() {
    let exporter = Exporter::start(&[
        "--collector.disable-defaults",
        "--collector.verbs",
        &edge_sysfs(),
    ]);
    let text = exporter.get("/metrics").text();
    assert!(!text.contains("hpcnode_verbs_"), "{text}");
}

#[test]
fn real_library_loads_and_each_failure_is_counted() {
    let exporter = Exporter::start(&[
        "--collector.disable-defaults",
        "--collector.verbs",
        &real_library(),
        "--collector.verbs.interval=1h",
        "--collector.verbs.device=rxe0,mlx4_1",
        &edge_sysfs(),
    ]);
    // rxe0 is ACTIVE in sysfs but libibverbs finds no such device on this machine;
    // mlx4_1's port is DOWN, so it is skipped before any verbs call.
    let rxe = r#"device="rxe0",port="1",mode="loopback",peer="""#;
    let mlx = r#"device="mlx4_1",port="1",mode="loopback",peer="""#;
    let text = wait_for(
        &exporter,
        &format!("hpcnode_verbs_probe_runs_total{{{mlx},result=\"port_not_active\"}} 1"),
    );
    let text = if text.contains(&format!("{{{rxe},result=\"error\"}} 1")) {
        text
    } else {
        wait_for(
            &exporter,
            &format!("hpcnode_verbs_probe_runs_total{{{rxe},result=\"error\"}} 1"),
        )
    };
    assert!(text.contains("hpcnode_verbs_probe_available 1"), "{text}");
    assert!(text.contains(&format!("hpcnode_verbs_probe_duration_seconds{{{rxe}}}")));
    assert!(text.contains(&format!(
        "hpcnode_verbs_probe_runs_total{{{rxe},result=\"success\"}} 0"
    )));
    assert!(!text.contains("hpcnode_verbs_probe_bandwidth_bytes_per_second"));
    assert!(!text.contains("hpcnode_verbs_probe_last_success_timestamp_seconds"));
    // Lines reach stderr through the log's writer thread, after the response.
    let log = exporter.log_with("result=port_not_active");
    assert!(log.contains("result=port_not_active"), "{log}");
}

/// libibverbs reads the running kernel's `/sys`: against another tree (`rdma_edge`'s eight
/// devices) what it lists says nothing, so no `visible_to_verbs` is exported, while the probe
/// runs. The log names the file the linker loaded. (What verbs lists on a real kernel, and a
/// device it stops listing when its provider goes: the lab's `rdma_userspace` group.)
#[test]
fn visibility_is_only_asked_of_the_running_kernel() {
    let exporter = Exporter::start(&[
        "--collector.disable-defaults",
        "--collector.verbs",
        &real_library(),
        "--collector.verbs.interval=1h",
        "--collector.verbs.device=mlx4_1",
        &edge_sysfs(),
    ]);
    let text = exporter.get("/metrics").text();
    assert!(text.contains("hpcnode_verbs_probe_available 1"), "{text}");
    assert!(
        !text.contains("hpcnode_rdma_device_visible_to_verbs{"),
        "{text}"
    );
    let loaded = std::fs::canonicalize(util::libibverbs()).unwrap();
    let log = exporter.log_with("libibverbs loaded");
    assert!(
        log.contains(&loaded.display().to_string()) || log.contains(&util::libibverbs()),
        "{log}"
    );
}

/// A loopback address nothing listens on.
fn closed_address() -> std::net::SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

#[test]
fn unreachable_peer_is_counted() {
    let closed = closed_address();
    let peer = format!("--collector.verbs.peer={closed}");
    let exporter = Exporter::start(&[
        "--collector.disable-defaults",
        "--collector.verbs",
        &real_library(),
        "--collector.verbs.interval=1h",
        "--collector.verbs.device=rxe0",
        "--collector.verbs.timeout=1s",
        &peer,
        &edge_sysfs(),
    ]);
    wait_for(
        &exporter,
        &format!(
            "hpcnode_verbs_probe_runs_total{{device=\"rxe0\",port=\"1\",mode=\"peer\",peer=\"{closed}\",result=\"peer_unreachable\"}} 1"
        ),
    );
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

const CLIENT: Endpoint = Endpoint {
    qp_num: 0x42,
    psn: 1,
    lid: 0,
    gid: [0; 16],
    rkey: 1,
    addr: 0x1000,
    len: 65536,
    mtu: 3,
};

fn hello() -> Vec<u8> {
    Message::Hello {
        nonce: [0x5a; 32],
        endpoint: CLIENT,
        latency_iterations: 10,
    }
    .encode()
}

/// A client's side of the handshake with `token`, up to its proof: every byte it sent.
fn prove(stream: &mut TcpStream, token: &[u8]) -> Vec<u8> {
    let hello = hello();
    stream.write_all(&hello).unwrap();
    let Message::Challenge { nonce } = read_frame(stream) else {
        panic!("no challenge");
    };
    let proof = Message::Proof {
        proof: Transcript::new(&[0x5a; 32], &nonce, &CLIENT, 10).client_proof(token),
    }
    .encode();
    stream.write_all(&proof).unwrap();
    [hello, proof].concat()
}

/// The next frame from the responder (a reject in place of a challenge is named).
fn read_frame(stream: &mut TcpStream) -> Message {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut frame = vec![0u8; 8];
    stream.read_exact(&mut frame).unwrap();
    frame.resize(8 + usize::from(u16::from_be_bytes([frame[6], frame[7]])), 0);
    stream.read_exact(&mut frame[8..]).unwrap();
    match decode(&frame) {
        Ok((Message::Reject { reason }, _)) => panic!("rejected: {}", reason.as_str()),
        Ok((message, _)) => message,
        Err(err) => panic!("{err}: {frame:?}"),
    }
}

/// What the responder sends before closing (nothing, for a peer it drops). A reset (it closed
/// with our unread bytes in its buffer) is a close too.
fn reply(mut stream: TcpStream) -> Vec<u8> {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut bytes = Vec::new();
    match stream.read_to_end(&mut bytes) {
        Ok(_) => {}
        Err(err) if err.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(err) => panic!("the responder did not close: {err}"),
    }
    bytes
}

fn reject(code: u8) -> Vec<u8> {
    vec![b'H', b'P', b'V', b'B', VERSION, 3, 0, 1, code]
}

/// A token file as it must be: private to its owner.
fn token_file(dir: &std::path::Path, token: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("token");
    std::fs::write(&path, token).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

fn sessions(result: &str, count: u32) -> String {
    format!("hpcnode_verbs_responder_sessions_total{{result=\"{result}\"}} {count}")
}

/// An exporter whose responder listens on a free loopback port for `allow`, with `extra` flags;
/// returned with that port's address once the responder answers.
fn responder(allow: &str, extra: &[&str]) -> (Exporter, String) {
    responder_loading(&real_library(), allow, extra)
}

/// As [`responder`], loading `library` (a `--collector.verbs.library` flag).
fn responder_loading(library: &str, allow: &str, extra: &[&str]) -> (Exporter, String) {
    let address = format!("127.0.0.1:{}", free_port());
    let (listen, allow, sysfs) = (
        format!("--collector.verbs.listen={address}"),
        format!("--collector.verbs.allow={allow}"),
        edge_sysfs(),
    );
    let mut args = vec![
        "--collector.disable-defaults",
        "--collector.verbs",
        "--collector.verbs.device=rxe0",
        library,
        &listen,
        &allow,
        &sysfs,
    ];
    args.extend_from_slice(extra);
    let exporter = Exporter::start(&args);
    wait_for(&exporter, &sessions("success", 0));
    (exporter, address)
}

/// The responder's connection threads, by name (the kernel keeps 15 characters of
/// "hpcnode-verbs-responder").
fn responder_threads(exporter: &Exporter) -> usize {
    std::fs::read_dir(format!("/proc/{}/task", exporter.pid()))
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim() == "hpcnode-verbs-r")
        .count()
}

/// A responder for 127.0.0.0/8 whose token is `right-token`, with a 1 s step timeout; the
/// token file's directory is returned with it, to live as long.
fn responder_with_token() -> (tempfile::TempDir, Exporter, String) {
    let dir = tempfile::tempdir().unwrap();
    let token = format!(
        "--collector.verbs.token-file={}",
        token_file(dir.path(), "right-token\n").display()
    );
    let (exporter, address) = responder("127.0.0.0/8", &[&token, "--collector.verbs.timeout=1s"]);
    (dir, exporter, address)
}

/// Waits (bounded) until the responder's connections left no thread, and no file descriptor
/// above the `files` it had before them.
fn await_nothing_left_behind(exporter: &Exporter, files: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while responder_threads(exporter) > 0 || exporter.open_files() > files {
        assert!(
            Instant::now() < deadline,
            "connections left threads ({}) or files ({} > {files}) behind",
            responder_threads(exporter),
            exporter.open_files()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn hostile_peers_cost_a_counted_failure_and_nothing_else() {
    let (_token, exporter, address) = responder_with_token();
    let files = exporter.open_files();
    let connect = || TcpStream::connect(&address).unwrap();

    // Garbage: rejected at the header, connection closed.
    let mut garbage = connect();
    garbage.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    assert_eq!(reply(garbage), b"");
    wait_for(&exporter, &sessions("bad_message", 1));

    // Half a message, then silence: the step timeout ends it.
    let mut half = connect();
    half.write_all(&hello()[..20]).unwrap();
    let started = Instant::now();
    assert_eq!(reply(half), b"");
    assert!(started.elapsed() < Duration::from_secs(5));
    wait_for(&exporter, &sessions("timeout", 1));

    // Wrong token: told so, counted.
    let mut wrong = connect();
    prove(&mut wrong, b"guess");
    assert_eq!(reply(wrong), reject(1));
    wait_for(&exporter, &sessions("bad_token", 1));

    // Silence: the connection holds nothing, and is closed at the handshake deadline.
    let silent = connect();
    let started = Instant::now();
    assert_eq!(reply(silent), b"");
    assert!(started.elapsed() < Duration::from_secs(5));
    wait_for(&exporter, &sessions("timeout", 2));

    // The right token: the responder tries its device, which this machine lacks, and says so.
    let mut right = connect();
    prove(&mut right, b"right-token");
    assert_eq!(reply(right), reject(4));
    let text = wait_for(&exporter, &sessions("error", 1));
    assert!(text.contains(&sessions("success", 0)));

    // Still serving, with no thread or file descriptor left behind by any session.
    assert!(text.contains("hpcnode_scrape_collector_success{collector=\"verbs\"} 1"));
    await_nothing_left_behind(&exporter, files);
    let log = exporter.log();
    assert!(log.contains("result=bad_token"), "{log}");
}

/// A recorded session (a client that proved the right token, whose session got as far as the
/// responder's device) replayed byte for byte: the responder's fresh nonce makes the recorded
/// proof worthless.
#[test]
fn a_replayed_session_is_rejected() {
    let (_token, exporter, address) = responder_with_token();
    let mut recorded = TcpStream::connect(&address).unwrap();
    let sent = prove(&mut recorded, b"right-token");
    // Accepted: the responder went on to its device, which this machine lacks.
    assert_eq!(reply(recorded), reject(4));
    wait_for(&exporter, &sessions("error", 1));

    let mut replayed = TcpStream::connect(&address).unwrap();
    replayed.write_all(&sent).unwrap();
    let answer = reply(replayed);
    assert_eq!(answer[..5], *b"HPVB\x02", "{answer:?}");
    assert_eq!(
        answer[8 + 32..],
        reject(1),
        "a challenge, then the rejection"
    );
    let text = wait_for(&exporter, &sessions("bad_token", 1));
    assert!(text.contains(&sessions("error", 1)), "{text}");
}

/// An exporter from before the handshake sends its token in a version 1 hello: it is told the
/// version (in a frame of version 2, which that exporter reports as unsupported version 2),
/// and the session is counted and logged with both versions.
#[test]
fn a_version_1_client_gets_a_version_error() {
    let (exporter, address) = responder("127.0.0.0/8", &[]);
    // Version 1's hello: an endpoint (47 bytes), the ping-pong count, the token's length and
    // the token.
    let mut v1_hello = b"HPVB\x01\x01\x00\x3a".to_vec();
    v1_hello.extend_from_slice(&[0; 47]);
    v1_hello.extend_from_slice(&10u32.to_be_bytes());
    v1_hello.push(6);
    v1_hello.extend_from_slice(b"s3cret");
    let mut stream = TcpStream::connect(&address).unwrap();
    stream.write_all(&v1_hello).unwrap();
    assert_eq!(reply(stream), reject(5));
    wait_for(&exporter, &sessions("version_mismatch", 1));
    let log = exporter.log_with("result=version_mismatch");
    assert!(
        log.contains("peer speaks protocol version 1, this exporter version 2"),
        "{log}"
    );
}

/// The token file is checked when the exporter starts: one others may read stops it with the
/// path, the mode and the fix.
#[test]
fn a_token_file_others_may_read_stops_the_start() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = token_file(dir.path(), "right-token\n");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    let mut exporter = Command::new(BINARY)
        .args([
            "--web.listen-address=127.0.0.1:0",
            "--collector.disable-defaults",
            "--collector.verbs",
            "--collector.verbs.interval=1h",
            &real_library(),
            &edge_sysfs(),
            &format!("--collector.verbs.token-file={}", path.display()),
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = exporter.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            exporter.kill().unwrap();
            exporter.wait().unwrap();
            panic!("the exporter started with a token file others may read");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    exporter
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_ne!(status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "mode 0640 lets its group or others at it (chmod 600 {})",
            path.display()
        )),
        "{stderr}"
    );
    let (code, _, stderr) = probe_command(&[
        "--device=rxe0",
        &format!("--library={}", util::libibverbs()),
        &edge_sysfs(),
        &format!("--token-file={}", path.display()),
    ]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("mode 0640") && stderr.contains("chmod 600"),
        "{stderr}"
    );
}

/// A sysfs tree with rxe0's port ACTIVE at 2.5 Gb/sec (a data rate of 312.5 MB/s) and PMA
/// counters, which a thread moves by 4 MB (in 4-byte words) every 10 ms (400 MB/s, above 5 %)
/// until the returned flag is set.
fn busy_port_sysfs() -> (
    tempfile::TempDir,
    std::sync::Arc<std::sync::atomic::AtomicBool>,
) {
    let root = tempfile::tempdir().unwrap();
    let port = root.path().join("class/infiniband/rxe0/ports/1");
    std::fs::create_dir_all(port.join("counters")).unwrap();
    for (name, content) in [
        ("state", "4: ACTIVE\n"),
        ("link_layer", "Ethernet\n"),
        ("rate", "2.5 Gb/sec (1X SDR)\n"),
        ("counters/port_xmit_data", "0\n"),
        ("counters/port_rcv_data", "0\n"),
    ] {
        std::fs::write(port.join(name), content).unwrap();
    }
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop = done.clone();
    std::thread::spawn(move || {
        let mut words = 0u64;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            words += 1_000_000;
            // Replaced whole, so that no read sees a file cut short.
            let next = port.join("counters/.port_xmit_data");
            let written = std::fs::write(&next, format!("{words}\n"))
                .and_then(|()| std::fs::rename(&next, port.join("counters/port_xmit_data")));
            if written.is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    });
    (root, done)
}

/// A port moving more than --collector.verbs.busy-share of its data rate is not probed: skipped,
/// counted, and no run is tried; once the port is quiet it is probed (and fails here, for want
/// of a device).
#[test]
fn a_busy_port_is_skipped() {
    let (sysfs, done) = busy_port_sysfs();
    let sysfs_flag = format!("--path.sysfs={}", sysfs.path().display());
    let flags = |share: &str| {
        vec![
            "--collector.disable-defaults".to_string(),
            "--collector.verbs".to_string(),
            real_library(),
            "--collector.verbs.interval=1s".to_string(),
            "--collector.verbs.device=rxe0".to_string(),
            format!("--collector.verbs.busy-share={share}"),
            sysfs_flag.clone(),
        ]
    };
    let labels = r#"device="rxe0",port="1",mode="loopback",peer="""#;
    let args = flags("0.05");
    let exporter = Exporter::start(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let text = wait_for(
        &exporter,
        &format!("hpcnode_verbs_probe_skipped_total{{{labels},reason=\"port_busy\"}} 2"),
    );
    assert!(
        text.contains(&format!(
            "hpcnode_verbs_probe_runs_total{{{labels},result=\"error\"}} 0"
        )),
        "{text}"
    );
    drop(exporter);
    // The job ends: the same port, quiet now, is probed.
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let args = flags("0.05");
    let exporter = Exporter::start(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let text = wait_for(
        &exporter,
        &format!("hpcnode_verbs_probe_runs_total{{{labels},result=\"error\"}} 1"),
    );
    assert!(
        text.contains(&format!(
            "hpcnode_verbs_probe_skipped_total{{{labels},reason=\"port_busy\"}} 0"
        )),
        "{text}"
    );
}

/// The stand-in libibverbs whose device list waits at a gate
/// (`exporter/tests/support/gated_libibverbs.c`), built into a directory of its own.
struct GatedLibrary {
    dir: tempfile::TempDir,
}

impl GatedLibrary {
    fn build() -> GatedLibrary {
        let dir = tempfile::tempdir().unwrap();
        let gate = format!("-DGATE=\"{}\"", dir.path().join("gate").display());
        let output = Command::new("gcc")
            .args(["-shared", "-fPIC", "-Wall", "-Werror", &gate, "-o"])
            .arg(dir.path().join("libibverbs.so.1"))
            .arg(util::support("gated_libibverbs.c"))
            .output()
            .expect("gcc is required for this test");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        GatedLibrary { dir }
    }

    fn flag(&self) -> String {
        let library = self.dir.path().join("libibverbs.so.1");
        format!("--collector.verbs.library={}", library.display())
    }

    /// From now on a session that opens its device waits, holding the port.
    fn close(&self) {
        std::fs::write(self.dir.path().join("gate"), "").unwrap();
    }

    /// Lets the waiting session go on (to find no device).
    fn open(&self) {
        std::fs::remove_file(self.dir.path().join("gate")).unwrap();
    }

    /// Whether a session waits at the closed gate.
    fn held(&self) -> bool {
        self.dir.path().join("gate.held").exists()
    }
}

/// A session that proved the (empty) token and now holds the responder's port, waiting at the
/// closed gate. One that comes while a scheduled probe runs there is refused as busy (a reply
/// at once), and is made again.
fn session_holding_the_port(address: &str, library: &GatedLibrary) -> TcpStream {
    for _ in 0..20 {
        let mut stream = TcpStream::connect(address).unwrap();
        prove(&mut stream, b"");
        stream
            .set_read_timeout(Some(Duration::from_millis(10)))
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !library.held() {
            match stream.peek(&mut [0; 1]) {
                Err(err) if matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    assert!(Instant::now() < deadline, "no session reached the gate");
                }
                _ => break,
            }
        }
        if library.held() {
            return stream;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("every session was refused");
}

/// While a responder session holds the port, the scheduler does not probe it: skipped as
/// port_in_use, and probed again once the session ends. The scheduled probe is against a closed
/// peer, so that it fails before it opens the device (and never waits at the gate itself).
#[test]
fn a_scheduled_probe_waits_for_a_responder_session_on_its_port() {
    let library = GatedLibrary::build();
    let closed = closed_address();
    let peer = format!("--collector.verbs.peer={closed}");
    let (exporter, address) = responder_loading(
        &library.flag(),
        "127.0.0.0/8",
        &["--collector.verbs.interval=1s", &peer],
    );
    library.close();
    let held = session_holding_the_port(&address, &library);
    let labels = format!(r#"device="rxe0",port="1",mode="peer",peer="{closed}""#);
    wait_for(
        &exporter,
        &format!("hpcnode_verbs_probe_skipped_total{{{labels},reason=\"port_in_use\"}} 2"),
    );
    library.open();
    assert_eq!(reply(held), reject(4));
    wait_for(&exporter, &sessions("error", 1));
    let runs = |text: &str| {
        text.lines()
            .find(|line| {
                line.starts_with(&format!(
                    "hpcnode_verbs_probe_runs_total{{{labels},result=\"peer_unreachable\"}}"
                ))
            })
            .and_then(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let before = runs(&exporter.get("/metrics").text());
    let deadline = Instant::now() + Duration::from_secs(10);
    while runs(&exporter.get("/metrics").text()) <= before {
        assert!(Instant::now() < deadline, "no run after the session ended");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A peer that proves the token while a session holds the port is told busy, after its proof:
/// a connection is not refused as busy before it proved the token. The session that held the
/// port goes on once its device answers.
#[test]
fn a_peer_with_the_token_is_told_busy_while_a_session_runs() {
    let library = GatedLibrary::build();
    let (exporter, address) = responder_loading(&library.flag(), "127.0.0.0/8", &[]);
    library.close();
    let held = session_holding_the_port(&address, &library);
    let mut second = TcpStream::connect(&address).unwrap();
    prove(&mut second, b"");
    assert_eq!(reply(second), reject(2));
    wait_for(&exporter, &sessions("busy", 1));
    library.open();
    assert_eq!(reply(held), reject(4));
    let text = wait_for(&exporter, &sessions("error", 1));
    assert!(text.contains(&sessions("busy", 1)), "{text}");
}

/// A connection to `address` from the loopback address `source`.
fn connect_from(source: &str, address: &str) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let source: std::net::SocketAddr = format!("{source}:0").parse().unwrap();
    socket.bind(&source.into()).unwrap();
    let address: std::net::SocketAddr = address.parse().unwrap();
    socket.connect(&address.into()).unwrap();
    socket.into()
}

/// Allow-listed connections that never send a byte do not keep out a peer that proves the
/// token: it is served (its session goes on to the device, which this machine lacks, and is
/// told so; not busy), and each idle one is closed at the handshake deadline. Nor does a flood
/// of them from another address, more than the responder takes handshakes for at once, each
/// made again as soon as it is closed: the responder's threads stay bounded, and none is left
/// when the flood stops.
#[test]
fn idle_connections_cannot_keep_a_peer_with_the_token_out() {
    let (_token, exporter, address) = responder_with_token();
    let files = exporter.open_files();
    let started = Instant::now();
    let idle: Vec<TcpStream> = (0..2)
        .map(|_| TcpStream::connect(&address).unwrap())
        .collect();
    let mut served = TcpStream::connect(&address).unwrap();
    prove(&mut served, b"right-token");
    assert_eq!(reply(served), reject(4));
    for stream in idle {
        assert_eq!(reply(stream), b"");
    }
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "the idle connections were closed after {:?}",
        started.elapsed()
    );
    wait_for(&exporter, &sessions("timeout", 2));
    wait_for(&exporter, &sessions("error", 1));

    let flooding = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let flood = {
        let (flooding, address) = (flooding.clone(), address.clone());
        std::thread::spawn(move || {
            let mut open = std::collections::VecDeque::new();
            while flooding.load(std::sync::atomic::Ordering::Relaxed) {
                open.push_back(connect_from("127.0.0.2", &address));
                if open.len() > 3 * MAX_HANDSHAKES {
                    open.pop_front();
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let mut most_threads = 0;
    for round in 2..=6 {
        std::thread::sleep(Duration::from_millis(200));
        most_threads = most_threads.max(responder_threads(&exporter));
        let mut served = TcpStream::connect(&address).unwrap();
        prove(&mut served, b"right-token");
        assert_eq!(reply(served), reject(4), "round {round}");
        wait_for(&exporter, &sessions("error", round));
    }
    flooding.store(false, std::sync::atomic::Ordering::Relaxed);
    flood.join().unwrap();
    assert!(
        most_threads <= 2 * MAX_HANDSHAKES,
        "{most_threads} responder threads"
    );
    let text = exporter.get("/metrics").text();
    assert!(text.contains(&sessions("busy", 0)), "{text}");
    // Hundreds closed to make room: one line for their address.
    let crowded = "verbs responder session from 127.0.0.2: closed before it proved the token";
    let log = exporter.log_with(crowded);
    assert_eq!(log.matches(crowded).count(), 1, "{log}");
    await_nothing_left_behind(&exporter, files);
}

#[test]
fn peers_outside_the_allow_list_are_dropped_unread() {
    let (exporter, address) = responder("10.0.0.0/8", &[]);
    let mut stream = TcpStream::connect(&address).unwrap();
    let _ = stream.write_all(&hello());
    assert_eq!(reply(stream), b"");
    wait_for(&exporter, &sessions("denied", 1));
}

fn probe_command(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BINARY)
        .args(["probe", "verbs"])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn probe_command_fails_cleanly() {
    let sysfs = edge_sysfs();
    let (code, stdout, stderr) = probe_command(&[
        "--device=rxe0",
        "--library=/nonexistent/libibverbs.so.1",
        &sysfs,
    ]);
    assert_eq!(code, 1);
    assert!(stdout.is_empty());
    assert!(
        stderr.starts_with(
            "hpcnode_exporter: probe verbs: cannot load /nonexistent/libibverbs.so.1:"
        ),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");

    let library = format!("--library={}", util::libibverbs());
    let (code, _, stderr) = probe_command(&["--device=mlx4_1", &library, &sysfs]);
    assert_eq!(code, 1);
    assert!(stderr.contains("mlx4_1/1: port is not ACTIVE"), "{stderr}");

    // No RDMA device here: the real library says so (no uverbs in this kernel).
    let (code, stdout, stderr) =
        probe_command(&["--device=rxe0", "--min-ratio=0.9", &library, &sysfs]);
    assert_eq!(code, 1);
    assert!(stdout.is_empty());
    assert!(stderr.contains("probing rxe0/1 (loopback)"), "{stderr}");
    assert!(stderr.contains("probe verbs: rxe0/1: "), "{stderr}");

    let (code, _, stderr) = probe_command(&["--min-ratio=fast"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("--min-ratio"), "{stderr}");
}

/// Whether process `pid` holds a TCP socket listening on `port` (IPv4): a LISTEN entry of
/// `/proc/net/tcp` whose inode is one of its descriptors' `socket:[inode]`.
fn listens_on(pid: u32, port: u16) -> bool {
    let sockets: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter_map(|target| {
            let target = target.to_string_lossy();
            Some(
                target
                    .strip_prefix("socket:[")?
                    .strip_suffix(']')?
                    .to_string(),
            )
        })
        .collect();
    let tcp = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).unwrap();
    tcp.lines().skip(1).any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let local_port = fields[1].rsplit(':').next().unwrap();
        u16::from_str_radix(local_port, 16) == Ok(port)
            && fields[3] == "0A"
            && sockets.iter().any(|inode| inode == fields[9])
    })
}

#[test]
fn responder_without_a_device_says_why_it_is_not_listening() {
    let sysfs = tempfile::tempdir().unwrap();
    let address = format!("127.0.0.1:{}", free_port());
    let exporter = Exporter::start(&[
        "--collector.disable-defaults",
        "--collector.verbs",
        &real_library(),
        &format!("--collector.verbs.listen={address}"),
        "--collector.verbs.allow=127.0.0.1",
        &format!("--path.sysfs={}", sysfs.path().display()),
    ]);
    let text = exporter.get("/metrics").text();
    assert!(text.contains("hpcnode_verbs_probe_available 1"), "{text}");
    assert!(
        !text.contains("hpcnode_verbs_responder_sessions_total"),
        "{text}"
    );
    // Not a connection attempt: the port is free only for this test's own process, and a
    // concurrent test's listener may take it once free_port() has let it go.
    let port_of = |address: &str| address.rsplit(':').next().unwrap().parse().unwrap();
    assert!(!listens_on(exporter.pid(), port_of(&address)));
    // The same look finds the socket the exporter does listen on, its web port.
    assert!(listens_on(exporter.pid(), port_of(&exporter.address)));
    let log = exporter.log();
    assert!(
        log.contains("verbs responder not started: no RDMA device"),
        "{log}"
    );
}

/// Below the buffers the probe registers, RLIMIT_MEMLOCK (64 KiB: the default before Linux
/// 5.16, so RHEL 8's) makes every `ibv_reg_mr` fail: said once at start with its remedy, and
/// exported. Run as root, CAP_IPC_LOCK (which lifts the limit) is taken away first.
#[test]
fn a_memlock_limit_below_the_probe_buffers_is_said_once_with_its_remedy() {
    let mut command = Command::new("prlimit");
    command.arg("--memlock=65536:65536");
    if util::is_root() {
        command.args([
            "setpriv",
            "--bounding-set=-ipc_lock",
            "--inh-caps=-ipc_lock",
        ]);
    }
    command.args([
        BINARY,
        "--web.listen-address=127.0.0.1:0",
        "--collector.disable-defaults",
        "--collector.verbs",
        "--collector.verbs.interval=1h",
        &real_library(),
    ]);
    let exporter = Exporter::start_command(command);
    let text = exporter.get("/metrics").text();
    assert!(
        text.contains(
            r#"hpcnode_collector_privilege_missing{collector="verbs",capability="cap_ipc_lock"} 1"#
        ),
        "{text}"
    );
    let log = exporter.log();
    let said: Vec<_> = log
        .lines()
        .filter(|l| l.contains("missing=cap_ipc_lock"))
        .collect();
    assert_eq!(said.len(), 1, "{log}");
    assert!(
        said[0].contains("level=warn") && said[0].contains("LimitMEMLOCK=infinity"),
        "{log}"
    );
}
