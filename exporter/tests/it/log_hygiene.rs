//! Nothing read from a node or a config file reaches the log beyond the file's name and the
//! reason (issue 36, point 7): the real binary on fixture trees whose every file holds bad
//! input that carries a marker, and on peers and token files that carry one; the log must
//! name the failures and hold no marker.

use crate::util;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use util::golden::{errors_total, scrape};
use util::{start_on_root, TreeCopy, BINARY};

/// What every marker starts with; nothing else the exporter logs contains it.
const MARKER: &str = "MARKER-";

/// Bad input carrying marker `n`, in one of three forms: text that is no value, bytes that are
/// not UTF-8, more than a page. The marker comes first, where a quote of the content's start
/// would show it.
fn bad_input(n: usize, form: usize) -> Vec<u8> {
    let mut bytes = format!("{MARKER}{n}-7f3a !?").into_bytes();
    match form % 3 {
        0 => bytes.extend_from_slice(b" not a value\n"),
        1 => bytes.extend_from_slice(b"\xff\xfe\n"),
        _ => bytes.resize(5000, b'x'),
    }
    bytes
}

/// Which of a tree's files a run spoils: all of them, every other one (so that a file a
/// collector reads only after another parsed is reached too), or those whose name holds a
/// pattern (files read only when many others parsed).
#[derive(Clone, Copy, Debug)]
enum Spoil {
    All,
    Even,
    Odd,
    Named(&'static str),
}

/// Every regular file under `dir` (links not followed), sorted.
fn regular_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            files.extend(regular_files(&entry.path()));
        } else if kind.is_file() {
            files.push(entry.path());
        }
    }
    files.sort();
    files
}

/// Replaces the files of `root` that `spoil` picks by bad input, each with its own marker.
fn spoil_tree(root: &Path, spoil: Spoil) {
    for (n, file) in regular_files(root).iter().enumerate() {
        let (picked, form) = match spoil {
            Spoil::All => (true, n),
            Spoil::Even => (n % 2 == 0, n + 1),
            Spoil::Odd => (n % 2 == 1, n + 2),
            Spoil::Named(pattern) => (file.to_string_lossy().contains(pattern), n),
        };
        if picked {
            fs::write(file, bad_input(n, form)).unwrap();
        }
    }
}

/// The errors `collector` counted in two scrapes of `fixture` spoiled as `spoil`; fails unless
/// the log, up to the exporter's shutdown, names files of the tree where there were errors and
/// holds no marker.
fn check_tree(fixture: &str, collector: &str, extra: &[&str], spoil: Spoil) -> u64 {
    let tree = TreeCopy::with_rootfs(fixture);
    spoil_tree(tree.root(), spoil);
    let exporter = start_on_root(collector, tree.root(), extra);
    // The second scrape reads again what the first kept open or cached.
    scrape(&exporter);
    let text = scrape(&exporter);
    exporter.signal(libc::SIGTERM);
    // Lines go out in order: the scrapes' errors are in before the shutdown's line.
    let log = exporter.log_with("msg=\"shutting down");
    let case = format!("{fixture} ({spoil:?} files spoiled)");
    let errors = errors_total(&text, collector);
    let root = tree.root().display().to_string();
    assert!(
        errors == 0
            || log
                .lines()
                .any(|l| l.contains("collector error") && l.contains(&root)),
        "{case}: {errors} errors, none logged naming a file of the tree:\n{log}"
    );
    let quoting: Vec<&str> = log.lines().filter(|l| l.contains(MARKER)).collect();
    assert!(
        quoting.is_empty(),
        "{case}: the log quotes content:\n{quoting:#?}"
    );
    errors
}

/// Each tree a collector reads, spoiled whole and then half by half: errors counted (a
/// collector may rightly pass over a device it cannot identify, so not in every run), none
/// quoted.
fn check_spoiled(fixture: &str, collector: &str, extra: &[&str]) {
    let errors: u64 = [Spoil::All, Spoil::Even, Spoil::Odd]
        .into_iter()
        .map(|spoil| check_tree(fixture, collector, extra, spoil))
        .sum();
    assert!(errors > 0, "{fixture}: spoiled files, and no error counted");
}

#[test]
fn rdma_files_are_never_quoted() {
    for fixture in ["procfs", "rdma_edge", "rdma_bad"] {
        check_spoiled(fixture, "rdma", &[]);
    }
}

#[test]
fn mic_files_are_never_quoted() {
    let micras = [
        "--collector.mic.micras-path=mic0=/var/lib/micras/mic0",
        "--collector.mic.micras-path=mic1=/var/lib/micras/mic1",
        "--collector.mic.micras-path=mic2=/var/lib/micras/mic2",
    ];
    let mut flags = vec!["--no-collector.mic.libmicmgmt"];
    for fixture in ["mic_card", "mic_mpss4"] {
        check_spoiled(fixture, "mic", &flags);
    }
    flags.extend(micras);
    for fixture in ["mic_mpss3", "mic_bad"] {
        check_spoiled(fixture, "mic", &flags);
    }
}

#[test]
fn pci_files_are_never_quoted() {
    for fixture in ["pci_host", "pci_sriov_host", "pci_failing_host"] {
        check_spoiled(fixture, "pci", &[]);
    }
}

#[test]
fn module_files_are_never_quoted() {
    let expected = "--collector.modules.expected=mlx5_core,vfio_pci,8250";
    for fixture in [
        "modules_rhel7",
        "modules_secureboot",
        "modules_signed_files",
    ] {
        check_spoiled(fixture, "modules", &[expected]);
    }
    // The module files modprobe would load are read only where the release, modules.dep and
    // the expected modules lead to them: every one spoiled, the rest of the root intact.
    let expected = "--collector.modules.expected=geniv,pcspkr,lab_mok,lab_foreign_keyid,lab_foreign_serial,lab_unsigned,lab_debian,lab_truncated";
    let spoiled = Spoil::Named(".ko");
    let errors = check_tree("modules_signed_files", "modules", &[expected], spoiled);
    assert!(errors > 0, "spoiled module files, and no error counted");
}

/// The exporter's stderr when it is started with the verbs probe mesh on `peers` (and the
/// token file `token`, if any): a start that must fail.
fn failed_verbs_start(peers: &Path, token: Option<&Path>) -> String {
    let peers = format!("--collector.verbs.peers={}", peers.display());
    let token = token.map(|path| format!("--collector.verbs.token-file={}", path.display()));
    let output = Command::new(BINARY)
        .args([
            "--web.listen-address=127.0.0.1:0",
            "--collector.disable-defaults",
            "--collector.verbs",
            "--collector.verbs.listen=127.0.0.1:0",
            "--collector.verbs.allow=127.0.0.1",
            "--collector.verbs.interval=2s",
            "--collector.verbs.duration=100ms",
            "--collector.verbs.mesh-fanout=1",
            "--collector.verbs.node-name=self",
            &peers,
        ])
        .args(token)
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "started:\n{log}");
    log
}

/// A peers file or a token file that cannot be used fails the start, and the error names the
/// file and the line, never what it holds.
#[test]
fn peers_and_token_files_are_never_quoted() {
    let dir = tempfile::tempdir().unwrap();
    let peers = dir.path().join("peers");
    let mut too_long = format!("{MARKER}6-7f3a 127.0.0.1:1\n").into_bytes();
    too_long.resize(2 << 20, b'#');
    let cases: [&[u8]; 6] = [
        b"MARKER-1-7f3a 127.0.0.1:1 extra\n",
        b"MARKER-2-7f3a! 127.0.0.1:1\n",
        b"self MARKER-3-7f3a\n",
        b"MARKER-4-7f3a 127.0.0.1:1\nMARKER-4-7f3a 127.0.0.1:2\n",
        b"MARKER-5-7f3a\xff 127.0.0.1:1\n",
        &too_long,
    ];
    for case in cases {
        fs::write(&peers, case).unwrap();
        let log = failed_verbs_start(&peers, None);
        assert!(log.contains(&peers.display().to_string()), "{log}");
        assert!(
            !log.contains(MARKER),
            "the log quotes the peers file:\n{log}"
        );
    }
    fs::write(&peers, "self 127.0.0.1:1\nother 127.0.0.1:2\n").unwrap();
    let token = dir.path().join("token");
    fs::write(&token, bad_input(7, 2)).unwrap();
    fs::set_permissions(&token, fs::Permissions::from_mode(0o600)).unwrap();
    let log = failed_verbs_start(&peers, Some(&token));
    assert!(log.contains(&token.display().to_string()), "{log}");
    assert!(
        !log.contains(MARKER),
        "the log quotes the token file:\n{log}"
    );
}
