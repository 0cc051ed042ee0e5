//! `hpcnode_exporter check`, the real binary: collecting itself on a fixture root, and reading
//! a running exporter's page (`--from`), plain and behind TLS with basic auth. What Slurm's
//! glue reads is the exit code and stdout: 1 and exactly the failure lines, 0 and nothing;
//! never 1 (or 0) when it could not look (3), never a run on a bad command line (2).

use crate::cli::run;
use crate::util;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use util::web::{bcrypt_hash, port, Pki};
use util::{fixture_root, Exporter, HungTree, TreeCopy};

/// The modules issue 4 expects on an RDMA and GPU node; `modules_rhel7` has all but vfio_pci.
const EXPECTED: &str =
    "--collector.modules.expected=mlx5_core,mlx5_ib,ib_uverbs,rdma_ucm,ib_ipoib,vfio_pci,nvidia";
const MISSING: &str =
    "ERROR: hpcnode: module_expected vfio_pci: expected module not loaded (neither Live nor built in)\n";

/// The flags that collect the modules of the fixture root `root`.
fn modules_of(root: &Path) -> Vec<String> {
    vec![
        "--collector.disable-defaults".into(),
        "--collector.modules".into(),
        EXPECTED.into(),
        format!("--path.procfs={}", root.join("proc").display()),
        format!("--path.sysfs={}", root.join("sys").display()),
        format!("--path.rootfs={}", root.display()),
    ]
}

/// `hpcnode_exporter check` with `args`, and an empty checks file (every check as built in)
/// unless `args` names one: the test's outcome may not depend on the machine's /etc.
fn check(args: &[&str]) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let checks = dir.path().join("checks.yml");
    std::fs::write(&checks, "# every check as built in\n").unwrap();
    let checks = format!("--checks={}", checks.display());
    let mut all = vec!["check"];
    all.extend_from_slice(args);
    if !args.iter().any(|arg| arg.starts_with("--checks")) {
        all.push(&checks);
    }
    run(&all)
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

#[test]
fn collecting_itself_a_missing_module_is_exit_1_and_its_line_then_fixed_exit_0_and_nothing() {
    let args = modules_of(&fixture_root("modules_rhel7"));
    assert_eq!(check(&strs(&args)), (1, MISSING.to_string(), String::new()));
    // The module loaded: a line in /proc/modules, as the kernel writes it.
    let fixed = TreeCopy::with_rootfs("modules_rhel7");
    let modules = fixed.root().join("proc/modules");
    let mut text = std::fs::read_to_string(&modules).unwrap();
    text.push_str("vfio_pci 16384 0 - Live 0x0000000000000000\n");
    std::fs::write(&modules, text).unwrap();
    let args = modules_of(fixed.root());
    assert_eq!(check(&strs(&args)), (0, String::new(), String::new()));
}

#[test]
fn a_check_turned_off_or_a_device_ignored_in_the_checks_file_does_not_count() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("checks.yml");
    let mut args = modules_of(&fixture_root("modules_rhel7"));
    args.push(format!("--checks={}", file.display()));
    for yaml in [
        "checks:\n  module_expected:\n    enabled: false\n",
        "checks:\n  module_expected:\n    ignore: [vfio_.*]\n",
    ] {
        std::fs::write(&file, yaml).unwrap();
        assert_eq!(
            check(&strs(&args)),
            (0, String::new(), String::new()),
            "{yaml}"
        );
    }
    std::fs::write(&file, "checks:\n  module_expected:\n    enabeld: false\n").unwrap();
    let (code, stdout, stderr) = check(&strs(&args));
    assert_eq!((code, stdout.as_str()), (2, ""));
    assert!(
        stderr.contains("unknown key at line 3 column 5"),
        "{stderr}"
    );
}

/// The exporter serving the `modules_rhel7` root, with `extra` flags.
fn exporter_of_rhel7(extra: &[&str]) -> Exporter {
    let root = fixture_root("modules_rhel7");
    let mut args = modules_of(&root);
    args.extend(extra.iter().map(|arg| arg.to_string()));
    Exporter::start(&strs(&args))
}

#[test]
fn from_a_running_exporter() {
    let exporter = exporter_of_rhel7(&[]);
    let url = format!("http://{}/metrics", exporter.address);
    assert_eq!(
        check(&["--from", &url]),
        (1, MISSING.to_string(), String::new())
    );
    // No path in the URL: /metrics.
    let bare = format!("http://{}", exporter.address);
    assert_eq!(check(&["--from", &bare]).0, 1);
}

#[test]
fn from_an_exporter_behind_tls_and_basic_auth() {
    let pki = Pki::new();
    let web = pki.write(
        "web.yml",
        &format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n\
             basic_auth_users:\n  slurm: {}\n",
            bcrypt_hash("health")
        ),
    );
    let exporter = exporter_of_rhel7(&[&format!("--web.config.file={}", web.display())]);
    let url = format!("https://localhost:{}/metrics", port(&exporter));
    let private = |name: &str, text: &str| {
        let path = pki.write(name, text);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        path
    };
    private("password", "health\n");
    private("wrong", "wrong\n");
    // Paths relative to the config's directory, as Prometheus reads them.
    let config = |password: &str| {
        let text = format!(
            "tls_config:\n  ca_file: ca.crt\n  server_name: localhost\n\
             basic_auth:\n  username: slurm\n  password_file: {password}\n"
        );
        pki.write(&format!("from-{password}.yml"), &text)
            .display()
            .to_string()
    };
    let good = config("password");
    assert_eq!(
        check(&["--from", &url, "--from.config", &good]),
        (1, MISSING.to_string(), String::new())
    );
    // A wrong password: it cannot tell (3), never healthy (0) nor unhealthy (1).
    let (code, stdout, stderr) = check(&["--from", &url, "--from.config", &config("wrong")]);
    assert_eq!((code, stdout.as_str()), (3, ""), "{stderr}");
    assert!(stderr.contains("HTTP status 401 Unauthorized"), "{stderr}");
    // No credentials, or plain HTTP to a TLS port: the same.
    let no_auth = pki.write("from-noauth.yml", "tls_config:\n  ca_file: ca.crt\n");
    let (code, _, stderr) = check(&["--from", &url, "--from.config", no_auth.to_str().unwrap()]);
    assert_eq!(code, 3, "{stderr}");
    let plain = format!("http://127.0.0.1:{}/metrics", port(&exporter));
    assert_eq!(check(&["--from", &plain]).0, 3);
    // A CA that did not sign the server's certificate: 3, the handshake refused.
    pki.ca("other");
    let other_ca = pki.write("from-other.yml", "tls_config:\n  ca_file: other.crt\n  server_name: localhost\nbasic_auth:\n  username: slurm\n  password_file: password\n");
    let (code, _, stderr) = check(&["--from", &url, "--from.config", other_ca.to_str().unwrap()]);
    assert_eq!(code, 3, "{stderr}");
    assert!(stderr.contains("TLS handshake"), "{stderr}");
    // https without a file to trust the server with, or the file fails closed: 2, no request.
    let (code, _, stderr) = check(&["--from", &url]);
    assert_eq!(code, 2, "{stderr}");
    let http_with_tls = format!("http://localhost:{}/metrics", port(&exporter));
    let (code, _, stderr) = check(&["--from", &http_with_tls, "--from.config", &good]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("would be read in plain text"), "{stderr}");
}

#[test]
fn cannot_tell_is_3_and_a_bad_command_line_is_2() {
    // A port nobody listens on (bound, then closed).
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/metrics", free.local_addr().unwrap());
    drop(free);
    let (code, stdout, stderr) = check(&["--from", &url]);
    assert_eq!((code, stdout.as_str()), (3, ""));
    assert!(
        stderr.contains("cannot tell") && stderr.contains("connecting"),
        "{stderr}"
    );
    for args in [
        &["--no-such-flag"][..],
        &["--from", "node01:10133"],
        &["--from", "http://127.0.0.1:1/", "--path.sysfs=/sys"],
        &["--from.timeout", "1m"],
        &["--checks", "/nonexistent/checks.yml"],
    ] {
        let (code, stdout, stderr) = check(args);
        assert_eq!((code, stdout.as_str()), (2, ""), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
    }
}

/// A collector the checks read failed on the page: 3 and why (a failure it shows would still be 1:
/// the unit tests of `check::judge`).
#[test]
fn a_failed_collector_is_3_and_why() {
    // A procfs root that is no procfs: the modules collector fails every scrape.
    let empty = tempfile::tempdir().unwrap();
    let args = [
        "--collector.disable-defaults",
        "--collector.modules",
        "--path.procfs",
        empty.path().to_str().unwrap(),
    ];
    let (code, stdout, stderr) = check(&args);
    assert_eq!((code, stdout.as_str()), (3, ""), "{stderr}");
    assert!(
        stderr.contains(
            "the modules collector failed on this page (hpcnode_scrape_collector_success 0)"
        ),
        "{stderr}"
    );
}

/// A read hung in a driver (a FUSE file that never answers): the check still ends soon after
/// its scrape's deadline, exit 3 (that collector did not finish), instead of waiting on the
/// stuck thread as Slurm's 60 s run out.
#[test]
fn a_hung_read_ends_the_check_at_its_deadline() {
    let Some(hung) = HungTree::mount("a_hung_read_ends_the_check_at_its_deadline") else {
        return;
    };
    let started = Instant::now();
    let (code, stdout, stderr) = check(&[
        "--collector.disable-defaults",
        "--collector.rdma",
        &hung.tree.sys_arg(),
        "--scrape.timeout=1s",
    ]);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!((code, stdout.as_str()), (3, ""), "{stderr}");
    assert!(
        stderr.contains("the rdma collector failed on this page"),
        "{stderr}"
    );
}
