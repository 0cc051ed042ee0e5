use super::*;

fn settings(args: &[&str]) -> Result<VerbsSettings, ConfigError> {
    VerbsSettings::from_flags(&Flags::parse(exporter_flags(), args)?)
}

fn probe(args: &[&str]) -> Result<ProbeOnce, ConfigError> {
    ProbeOnce::from_flags(&Flags::parse((PROBE.flags)(), args)?)
}

#[test]
fn verbs_probe_is_off_unless_asked_for() {
    let off = settings(&[]).unwrap();
    assert_eq!(off.interval, None);
    assert_eq!(off.listen, None);
    let zero = settings(&["--collector.verbs.interval=0"]).unwrap();
    assert_eq!(zero.interval, None);
    let on = settings(&[
        "--collector.verbs.interval=1h",
        "--collector.verbs.jitter=5m",
        "--collector.verbs.device=mlx5_0,mlx5_1",
        "--collector.verbs.message-size=4096",
        "--collector.verbs.duration=10s",
    ])
    .unwrap();
    assert_eq!(on.interval, Some(Duration::from_secs(3600)));
    assert_eq!(on.jitter, Duration::from_secs(300));
    assert_eq!(on.devices, ["mlx5_0", "mlx5_1"]);
    assert_eq!(on.measurement.port, 1);
    assert_eq!(on.measurement.params.message_size, 4096);
    assert_eq!(on.measurement.params.duration, Duration::from_secs(10));
    assert_eq!(on.measurement.params.queue_depth, 128);
    assert_eq!(on.busy_share, 0.05);
    let share = settings(&["--collector.verbs.busy-share=0.2"]).unwrap();
    assert_eq!(share.busy_share, 0.2);
}

#[test]
fn verbs_responder_needs_an_allow_list() {
    let err = settings(&["--collector.verbs.listen=:18515"]).unwrap_err();
    assert!(err.to_string().contains("--collector.verbs.allow"), "{err}");
    let ok = settings(&[
        "--collector.verbs.listen=0.0.0.0:18515",
        "--collector.verbs.allow=10.0.0.0/8,127.0.0.1",
    ])
    .unwrap();
    assert_eq!(ok.allow.len(), 2);
}

#[test]
fn errors_name_the_flag_given() {
    for (args, flag) in [
        (
            &[
                "--collector.verbs.listen=:1",
                "--collector.verbs.allow=10.0.0.0/40",
            ][..],
            "--collector.verbs.allow",
        ),
        (
            &["--collector.verbs.duration=2m"],
            "--collector.verbs.duration",
        ),
        (
            &["--collector.verbs.message-size=0"],
            "--collector.verbs.message-size",
        ),
        (&["--collector.verbs.peer=nohost"], "--collector.verbs.peer"),
        (
            &["--collector.verbs.interval=soon"],
            "--collector.verbs.interval",
        ),
        (
            &["--collector.verbs.interval=-5s"],
            "--collector.verbs.interval",
        ),
        (
            &["--collector.verbs.interval=169h"],
            "--collector.verbs.interval",
        ),
        (
            &["--collector.verbs.jitter=999999999h"],
            "--collector.verbs.jitter",
        ),
        (
            &["--collector.verbs.queue-depth=99999"],
            "--collector.verbs.queue-depth",
        ),
        (
            &["--collector.verbs.timeout=0s"],
            "--collector.verbs.timeout",
        ),
        (
            &["--collector.verbs.busy-share=1.5"],
            "--collector.verbs.busy-share",
        ),
        (
            &["--collector.verbs.busy-share=-0.1"],
            "--collector.verbs.busy-share",
        ),
        (
            &["--collector.verbs.busy-share=NaN"],
            "--collector.verbs.busy-share",
        ),
        (
            &["--collector.verbs.busy-share=5%"],
            "--collector.verbs.busy-share",
        ),
    ] {
        let err = settings(args).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("invalid {flag} ")),
            "{args:?}: {err}"
        );
        assert!(!err.contains('\n'), "{args:?}: {err}");
    }
}

const MESH: [&str; 4] = [
    "--collector.verbs.peers=/etc/hpcnode/peers",
    "--collector.verbs.interval=10m",
    "--collector.verbs.listen=:18515",
    "--collector.verbs.allow=10.0.0.0/8",
];

#[test]
fn a_mesh_needs_a_responder_and_a_schedule() {
    let mesh = settings(&MESH).unwrap().mesh.unwrap();
    assert_eq!(mesh.peers, PathBuf::from("/etc/hpcnode/peers"));
    assert_eq!(mesh.fanout, 2);
    assert_eq!(mesh.node_name, None);
    let named = settings(
        &[
            &MESH[..],
            &[
                "--collector.verbs.mesh-fanout=3",
                "--collector.verbs.node-name=n1.rack4",
            ],
        ]
        .concat(),
    )
    .unwrap()
    .mesh
    .unwrap();
    assert_eq!(
        (named.fanout, named.node_name.as_deref()),
        (3, Some("n1.rack4"))
    );
    assert!(settings(&[]).unwrap().mesh.is_none());
    for (args, flag, reason) in [
        (vec![MESH[0], MESH[1], MESH[2], MESH[3], "--collector.verbs.peer=n2:18515"], "peers", "excludes --collector.verbs.peer"),
        (vec![MESH[0], MESH[1]], "peers", "requires --collector.verbs.listen"),
        (vec![MESH[0], MESH[2], MESH[3]], "peers", "requires --collector.verbs.interval"),
        (vec![MESH[0], MESH[1], MESH[2], MESH[3], "--collector.verbs.jitter=1m"], "peers", "excludes --collector.verbs.jitter"),
        (vec![MESH[0], "--collector.verbs.interval=10s", MESH[2], MESH[3]], "interval", "6 slots (3 x --collector.verbs.mesh-fanout) of 1.666666666s, shorter than twice --collector.verbs.duration (4s)"),
        (vec!["--collector.verbs.mesh-fanout=2"], "mesh-fanout", "only with --collector.verbs.peers"),
        (vec!["--collector.verbs.node-name=n1"], "node-name", "only with --collector.verbs.peers"),
        (vec![MESH[0], MESH[1], MESH[2], MESH[3], "--collector.verbs.node-name=n 1"], "node-name", "expected 1 to 64"),
        (vec![MESH[0], MESH[1], MESH[2], MESH[3], "--collector.verbs.mesh-fanout=0"], "mesh-fanout", ""),
        (vec![MESH[0], MESH[1], MESH[2], MESH[3], "--collector.verbs.mesh-fanout=17"], "mesh-fanout", ""),
    ] {
        let err = settings(&args).unwrap_err().to_string();
        assert!(err.starts_with(&format!("invalid --collector.verbs.{flag} ")), "{args:?}: {err}");
        assert!(err.contains(reason), "{args:?}: {err}");
    }
    // Three slots of 1 s hold a run of 500 ms twice over.
    let short = settings(&[
        MESH[0],
        "--collector.verbs.interval=3s",
        MESH[2],
        MESH[3],
        "--collector.verbs.mesh-fanout=1",
        "--collector.verbs.duration=500ms",
    ]);
    assert!(short.is_ok(), "{short:?}");
}

#[test]
fn the_token_file_is_read_at_start_not_while_parsing() {
    let parsed = settings(&["--collector.verbs.token-file=/nonexistent/token"]).unwrap();
    let path = parsed.measurement.token_file.unwrap();
    assert!(read_token(&path).is_err());
}

/// Writes `content` to `path`, private to its owner as a token file must be.
fn write_private(path: &Path, content: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, content).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

#[test]
fn token_file_is_trimmed_bounded_and_never_quoted() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    write_private(&token, "s3cret\n");
    assert_eq!(read_token(&token).unwrap(), b"s3cret");
    write_private(&token, &"x".repeat(65));
    assert!(read_token(&token).is_err());
    write_private(&token, "\n");
    assert!(read_token(&token).is_err());
    write_private(&token, &"secret".repeat(100));
    let err = read_token(&token).unwrap_err();
    assert!(!err.contains("secret"), "{err}");
    // Neither endless nor blocking: a device and a FIFO are refused without reading.
    let err = read_token(Path::new("/dev/zero")).unwrap_err();
    assert!(err.ends_with("not a regular file"), "{err}");
    let fifo = dir.path().join("fifo");
    assert!(std::process::Command::new("mkfifo")
        .args(["-m", "644"])
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let err = read_token(&fifo).unwrap_err();
    assert!(err.ends_with("not a regular file"), "{err}");
}

/// Any access for the group or others refuses the file, naming it, its mode and the fix;
/// the owner's own bits do not matter.
#[test]
fn a_token_file_others_may_read_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    write_private(&token, "s3cret\n");
    for mode in [0o644, 0o640, 0o604, 0o620, 0o602, 0o610, 0o601] {
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(mode)).unwrap();
        let err = read_token(&token).unwrap_err();
        let path = token.display();
        assert_eq!(
            err,
            format!(
                "read {path}: mode {mode:04o} lets its group or others at it (chmod 600 {path})"
            )
        );
    }
    for mode in [0o600, 0o400] {
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(mode)).unwrap();
        assert_eq!(read_token(&token).unwrap(), b"s3cret", "{mode:o}");
    }
    // A link is judged by the file it leads to.
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&token, &link).unwrap();
    assert_eq!(read_token(&link).unwrap(), b"s3cret");
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(read_token(&link).unwrap_err().contains("mode 0644"));
}

#[test]
fn probe_subcommand() {
    let command = probe(&[
        "--device=rxe0",
        "--port=1",
        "--peer=10.0.0.2:18515",
        "--min-ratio=0.9",
        "--duration=500ms",
    ])
    .unwrap();
    assert_eq!(command.device.as_deref(), Some("rxe0"));
    assert_eq!(command.measurement.peer.as_deref(), Some("10.0.0.2:18515"));
    assert_eq!(command.min_ratio, Some(0.9));
    assert_eq!(
        command.measurement.params.duration,
        Duration::from_millis(500)
    );
    assert_eq!(command.sysfs, PathBuf::from("/sys"));
    assert!(probe(&["--min-ratio=-1"]).is_err());
    assert!(probe(&["--port=0"]).is_err());
    assert!(probe(&["--no-such"]).is_err());
}
