//! The command line of the real binary: help, version, and one-line errors with exit code 2.

use crate::util;

use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use util::{Exporter, BINARY};

/// Runs the binary to its exit. A run that should exit but serves instead (a bad value
/// accepted, a taken port not noticed) fails after 30 s and is killed, rather than hanging
/// the test run and leaving an exporter behind.
pub fn run(args: &[&str]) -> (i32, String, String) {
    let child = Command::new(BINARY)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    let out = match finished.recv_timeout(Duration::from_secs(30)) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            // Not reaped yet (the waiting thread reaps it after this), so the pid is still ours.
            // SAFETY: kill(2) on a pid that is ours and not yet reaped; no memory is involved.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("hpcnode_exporter {args:?} did not exit within 30 s");
        }
    };
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn help_lists_generated_collector_flags() {
    let (code, stdout, _) = run(&["--help"]);
    assert_eq!(code, 0);
    for flag in [
        "--web.listen-address",
        "--web.telemetry-path",
        "--web.max-requests",
        "--web.max-connections",
        "--path.sysfs",
        "--path.procfs",
        "--path.rootfs",
        "--collector.rdma",
        "--no-collector.rdma",
        "--collector.rdma.device-include",
        "--collector.rdma.device-exclude",
        "--scrape.timeout",
        "--log.level",
        "--log.format",
        "--collector.ebpf.strict",
        "--collector.verbs.interval",
        "--collector.verbs.token-file",
    ] {
        assert!(stdout.contains(flag), "--help lacks {flag}");
    }
    // Each collector's flags are under `--collector.<name>.`; the old spellings are hidden.
    for old in ["--ebpf.", "--probe.verbs."] {
        assert!(!stdout.contains(old), "--help names {old}");
    }
}

/// The old spellings still work: they reach the renamed flag (its errors name the new one),
/// and a start with them logs one warning per old spelling, naming both.
#[test]
fn old_flag_spellings_still_work_and_are_logged_once_as_deprecated() {
    let (code, _, stderr) = run(&["--probe.verbs.mesh-fanout=0"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("invalid --collector.verbs.mesh-fanout \"0\""),
        "{stderr}"
    );
    let lines = lines_until_listening(&[
        "--path.sysfs=/nonexistent",
        "--collector.disable-defaults",
        "--ebpf.strict",
        "--probe.verbs.device",
        "mlx5_0",
        "--ebpf.hooks=kernel_log:none",
    ]);
    let deprecated: Vec<_> = lines
        .iter()
        .filter(|line| line.contains("deprecated flag spelling"))
        .collect();
    assert_eq!(deprecated.len(), 3, "{lines:?}");
    for (old, new) in [
        ("ebpf.strict", "collector.ebpf.strict"),
        ("probe.verbs.device", "collector.verbs.device"),
        ("ebpf.hooks", "collector.ebpf.hooks"),
    ] {
        let named = format!("flag=--{old} use=--{new}");
        let count = deprecated
            .iter()
            .filter(|line| line.contains(&named))
            .count();
        assert_eq!(count, 1, "{named}: {lines:?}");
        assert!(deprecated.iter().all(|line| line.contains("level=warn")));
    }
}

#[test]
fn version() {
    let (code, stdout, _) = run(&["--version"]);
    assert_eq!(code, 0);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[0],
        format!("hpcnode_exporter {}", env!("CARGO_PKG_VERSION"))
    );
    let field = |name: &str| {
        lines
            .iter()
            .find_map(|line| line.strip_prefix(&format!("{name}: ")))
            .unwrap_or_else(|| panic!("--version lacks {name}: {stdout}"))
    };
    let revision = field("revision");
    assert!(
        revision == "unknown"
            || revision.len() == 12 && revision.bytes().all(|b| b.is_ascii_hexdigit()),
        "revision {revision:?}"
    );
    let date = field("build date");
    assert!(
        date.len() == 10
            && date.as_bytes()[4] == b'-'
            && date.as_bytes()[7] == b'-'
            && date.starts_with("20"),
        "build date {date:?}"
    );
    assert!(field("target").ends_with("-linux-gnu"), "{stdout}");
    assert!(!field("glibc floor").is_empty());
}

#[test]
fn bad_values_give_one_line_and_exit_2() {
    for args in [
        &["--web.listen-address=nonsense"][..],
        &["--web.max-requests=many"],
        &["--scrape.timeout=soon"],
        &["--collector.rdma.device-include=("],
        &[
            "--collector.rdma.device-include=a",
            "--collector.rdma.device-exclude=b",
        ],
        &["--log.level=chatty"],
        &["--log.format=xml"],
        &["--no-such-flag"],
        &["--web.systemd-socket", "--web.listen-address=127.0.0.1:0"],
    ] {
        let (code, stdout, stderr) = run(args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stdout.is_empty());
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.starts_with("hpcnode_exporter: error: "), "{stderr}");
    }
}

/// Values that parsed but overflowed later: a semaphore too large (a panic after "listening"),
/// a deadline past the clock's range (every scrape panicked). Every numeric flag is bounded.
#[test]
fn numeric_flags_out_of_range_give_one_line_naming_the_flag_and_exit_2() {
    for (arg, flag) in [
        (
            "--web.max-requests=2305843009213693952",
            "--web.max-requests",
        ),
        ("--web.max-requests=1048577", "--web.max-requests"),
        ("--web.max-connections=1", "--web.max-connections"),
        ("--web.max-connections=1048577", "--web.max-connections"),
        ("--web.max-connections=many", "--web.max-connections"),
        ("--scrape.timeout=999999999h", "--scrape.timeout"),
        ("--scrape.timeout=2h", "--scrape.timeout"),
        (
            "--collector.modules.max-modules=0",
            "--collector.modules.max-modules",
        ),
        (
            "--collector.modules.max-modules=99999999999999999999",
            "--collector.modules.max-modules",
        ),
        (
            "--collector.verbs.interval=999999999h",
            "--collector.verbs.interval",
        ),
        ("--collector.verbs.jitter=169h", "--collector.verbs.jitter"),
        (
            "--collector.verbs.duration=61s",
            "--collector.verbs.duration",
        ),
        (
            "--collector.verbs.timeout=999999999h",
            "--collector.verbs.timeout",
        ),
        (
            "--collector.verbs.message-size=0",
            "--collector.verbs.message-size",
        ),
        (
            "--collector.verbs.queue-depth=4097",
            "--collector.verbs.queue-depth",
        ),
        (
            "--collector.verbs.latency-iterations=0",
            "--collector.verbs.latency-iterations",
        ),
        ("--collector.verbs.port=256", "--collector.verbs.port"),
        (
            "--collector.verbs.gid-index=256",
            "--collector.verbs.gid-index",
        ),
    ] {
        let (code, stdout, stderr) = run(&[arg]);
        assert_eq!(code, 2, "{arg}: {stderr}");
        assert!(stdout.is_empty());
        assert_eq!(stderr.lines().count(), 1, "{arg}: {stderr}");
        assert!(
            stderr.starts_with(&format!("hpcnode_exporter: error: invalid {flag} ")),
            "{arg}: {stderr}"
        );
    }
}

/// A token file that never ends or blocks (a device, a FIFO) is refused at start without being
/// read, naming the flag: by the exporter (exit 1) and by `probe verbs` (exit 1).
#[test]
fn token_files_that_never_end_or_block_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("token.fifo");
    let path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo only creates a file.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    for token in ["/dev/zero".to_string(), fifo.display().to_string()] {
        let (code, _, stderr) = run(&[
            "--web.listen-address=127.0.0.1:0",
            "--collector.verbs.interval=1h",
            &format!("--collector.verbs.token-file={token}"),
        ]);
        assert_eq!(code, 1, "{token}: {stderr}");
        assert!(stderr.contains("--collector.verbs.token-file"), "{stderr}");
        assert!(stderr.contains("not a regular file"), "{stderr}");
        let (code, _, stderr) = run(&["probe", "verbs", &format!("--token-file={token}")]);
        assert_eq!(code, 1, "{token}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains("--token-file"), "{stderr}");
    }
}

/// A port in use fails the start at once, before any collector starts: exit 3 (a code of its
/// own, which the unit's RestartPreventExitStatus= names) and one line saying why. The token
/// file here would fail the verbs collector's start (exit 1): it is never reached.
#[test]
fn a_port_in_use_exits_3_before_any_collector_starts() {
    let first = Exporter::start(&["--collector.disable-defaults"]);
    let listen = format!("--web.listen-address={}", first.address);
    let (code, _, stderr) = run(&[
        &listen,
        "--collector.disable-defaults",
        "--collector.verbs",
        "--collector.verbs.interval=1h",
        "--collector.verbs.token-file=/dev/zero",
    ]);
    assert_eq!(code, 3, "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("Address already in use"), "{stderr}");
    assert!(stderr.contains(&first.address), "{stderr}");
    assert!(!stderr.contains("token-file"), "{stderr}");
}

/// `--web.systemd-socket` where systemd passed this process no socket: exit 3, one line.
#[test]
fn a_systemd_socket_not_passed_exits_3() {
    let (code, _, stderr) = run(&["--web.systemd-socket", "--collector.disable-defaults"]);
    assert_eq!(code, 3, "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("--web.systemd-socket: LISTEN_PID"),
        "{stderr}"
    );
}

/// A listen address that never collides: a value wrongly accepted serves there, not on 10133.
const ANY_PORT: &str = "--web.listen-address=127.0.0.1:0";

/// Values that other flags or the probe cannot use were quietly clamped: `--web.max-requests`
/// to one below `--web.max-connections`, a verbs message size up to the latency run's 8 bytes.
#[test]
fn values_once_clamped_give_one_line_naming_the_flag_and_exit_2() {
    for (args, flag) in [
        (
            &[ANY_PORT, "--web.max-connections=2", "--web.max-requests=40"][..],
            "--web.max-requests",
        ),
        (
            &[
                ANY_PORT,
                "--web.max-connections=40",
                "--web.max-requests=40",
            ],
            "--web.max-requests",
        ),
        (
            &[ANY_PORT, "--collector.verbs.message-size=7"],
            "--collector.verbs.message-size",
        ),
        (&["probe", "verbs", "--message-size=1"], "--message-size"),
    ] {
        let (code, stdout, stderr) = run(args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stdout.is_empty());
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            stderr.starts_with(&format!("hpcnode_exporter: error: invalid {flag} ")),
            "{args:?}: {stderr}"
        );
    }
}

/// The log lines of a start with `args`, up to "listening" (probes log before it).
fn lines_until_listening(args: &[&str]) -> Vec<String> {
    let mut command = Command::new(BINARY);
    command.args(args);
    util::lines_until_listening(command)
}

#[test]
fn json_logs() {
    let lines = lines_until_listening(&["--log.format=json", "--path.sysfs=/nonexistent"]);
    assert!(
        lines
            .last()
            .is_some_and(|l| l.contains("\"msg\":\"listening\"")),
        "{lines:?}"
    );
    assert!(lines.iter().all(|l| l.starts_with('{')), "{lines:?}");
}

/// A mistyped root is said at start, once per flag, and fails the scrapes of the collectors
/// that read it (a `config` error, logged once), instead of an empty success.
#[test]
fn roots_that_are_not_roots_are_logged_exported_and_fail_their_collectors() {
    let exporter = Exporter::start(&[
        "--path.sysfs=/nonexistent",
        "--path.procfs=/nonexistent",
        "--path.rootfs=/nonexistent",
        "--collector.modules",
    ]);
    let text = exporter.get("/metrics").text();
    let text = text + &exporter.get("/metrics").text();
    for line in [
        "hpcnode_path_root_valid{flag=\"path.sysfs\"} 0\n",
        "hpcnode_path_root_valid{flag=\"path.procfs\"} 0\n",
        "hpcnode_path_root_valid{flag=\"path.rootfs\"} 0\n",
        "hpcnode_scrape_collector_success{collector=\"rdma\"} 0\n",
        "hpcnode_scrape_collector_success{collector=\"modules\"} 0\n",
        "hpcnode_collector_errors_total{collector=\"rdma\",kind=\"config\"} 2\n",
    ] {
        assert!(text.contains(line), "{line} missing from:\n{text}");
    }
    assert!(!text.contains("hpcnode_scrape_collector_success{collector=\"rdma\"} 1"));
    let log = exporter.log_with("kind=config");
    for flag in ["--path.sysfs", "--path.procfs", "--path.rootfs"] {
        let said = log.lines().filter(|l| l.contains(&format!("flag={flag} ")));
        assert_eq!(said.count(), 1, "{flag}:\n{log}");
    }
    let config_errors = log.lines().filter(|l| l.contains("kind=config"));
    let rdma = config_errors.filter(|l| l.contains("collector=rdma "));
    assert_eq!(rdma.count(), 1, "{log}");
}

#[test]
fn roots_that_look_like_roots_are_valid() {
    let root = util::tests_dir().join("fixtures/pci_host");
    let exporter = Exporter::start(&[
        &format!("--path.sysfs={}", root.join("sys").display()),
        &format!("--path.procfs={}", root.join("proc").display()),
        &format!("--path.rootfs={}", root.display()),
    ]);
    let text = exporter.get("/metrics").text();
    for flag in ["path.sysfs", "path.procfs", "path.rootfs"] {
        let line = format!("hpcnode_path_root_valid{{flag=\"{flag}\"}} 1\n");
        assert!(text.contains(&line), "{line} missing from:\n{text}");
    }
    assert!(text.contains("hpcnode_scrape_collector_success{collector=\"rdma\"} 1\n"));
}

/// `--collector.ebpf.hooks` takes only probes and hooks that exist: a wrong one is one line
/// naming what exists, exit 2, before anything is attached.
#[test]
fn ebpf_hooks_refuses_a_hook_the_probe_lacks_naming_its_hooks() {
    for (arg, reason) in [
        (
            "--collector.ebpf.hooks=module_load:fexit",
            "module_load has no hook \"fexit\"; its hooks: tp_btf, raw_tp, tracepoint, perf, none",
        ),
        (
            "--collector.ebpf.hooks=kernel_log",
            "\"kernel_log\" is not PROBE:HOOK",
        ),
    ] {
        let (code, stdout, stderr) = run(&[arg]);
        assert_eq!(code, 2, "{arg}: {stderr}");
        assert!(stdout.is_empty());
        let value = arg.split_once('=').unwrap().1;
        assert_eq!(
            stderr.trim_end(),
            format!("hpcnode_exporter: error: invalid --collector.ebpf.hooks {value:?}: {reason}")
        );
    }
}
