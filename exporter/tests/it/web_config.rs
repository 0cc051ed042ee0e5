//! `--web.config.file` on the real binary: TLS and basic auth with certificates made by the
//! openssl CLI at test time and curl as the client; rotation while running; and promtool's
//! `check web-config` as the reference parser for every config file here.

use crate::util;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use util::web::{bcrypt_hash, curl, eventually, port, sample, start, sum, Pki};
use util::Exporter;

#[test]
fn tls_with_basic_auth_guards_every_path() {
    let pki = Pki::new();
    let config = pki.write(
        "web.yml",
        &format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n\
             http_server_config:\n  headers:\n    X-Frame-Options: deny\n\
             basic_auth_users:\n  alice: {}\n",
            bcrypt_hash("wonderland")
        ),
    );
    let exporter = start(&config);
    let port = port(&exporter);
    let ca = pki.path("ca.crt");
    let ca = ca.to_str().unwrap();
    for path in ["/metrics", "/", "/-/healthy", "/-/ready"] {
        let (rc, status, head) = curl(&port, path, &["--cacert", ca]);
        assert_eq!((rc, status), (0, 401), "{path} without credentials: {head}");
        assert!(head.contains("www-authenticate: Basic"), "{head}");
        assert!(head.contains("x-frame-options: deny"), "{head}");
        let (_, status, _) = curl(&port, path, &["--cacert", ca, "-u", "alice:wrong"]);
        assert_eq!(status, 401, "{path} with a wrong password");
        let (_, status, _) = curl(&port, path, &["--cacert", ca, "-u", "mallory:wonderland"]);
        assert_eq!(status, 401, "{path} as an unknown user");
        let (rc, status, head) = curl(&port, path, &["--cacert", ca, "-u", "alice:wonderland"]);
        assert_eq!((rc, status), (0, 200), "{path}: {head}");
        assert!(head.contains("x-frame-options: deny"), "{head}");
    }
    // A CA that did not sign the server's certificate: curl refuses it (exit 60).
    pki.ca("other");
    let other = pki.path("other.crt");
    let (rc, status, _) = curl(&port, "/metrics", &["--cacert", other.to_str().unwrap()]);
    assert_eq!((rc, status), (60, 0));
    // Plain HTTP on the TLS port is a failed handshake, not a response.
    let plain = Command::new("curl")
        .args([
            "-sS",
            "-m",
            "10",
            &format!("http://127.0.0.1:{port}/metrics"),
        ])
        .output()
        .unwrap();
    assert!(!plain.status.success());

    let auth = ["--cacert", ca, "-u", "alice:wonderland"];
    assert_eq!(
        sample(
            &port,
            &auth,
            "hpcnode_web_auth_failures_total{reason=\"missing\"}"
        ),
        4
    );
    assert_eq!(
        sample(
            &port,
            &auth,
            "hpcnode_web_auth_failures_total{reason=\"wrong\"}"
        ),
        8
    );
    // Both curl's refusal (it aborts the handshake) and the plain HTTP request.
    assert!(
        sample(
            &port,
            &auth,
            "hpcnode_web_tls_handshake_failures_total{reason=\"error\"}"
        ) >= 2
    );
    assert_eq!(
        sum(&port, &auth, "hpcnode_web_config_reload_failures_total"),
        0
    );
    // Once per cause, not once per request.
    let log = exporter.log();
    assert_eq!(
        log.matches("request refused").count(),
        2,
        "no credentials, wrong ones:\n{log}"
    );
}

#[test]
fn client_certificates_and_tls_versions() {
    let pki = Pki::new();
    let config = pki.write(
        "web.yml",
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  \
         client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n  \
         min_version: TLS13\n",
    );
    let exporter = start(&config);
    let port = port(&exporter);
    let [ca, cert, key] = ["ca.crt", "client.crt", "client.key"].map(|f| pki.path(f));
    let [ca, cert, key] = [&ca, &cert, &key].map(|p| p.to_str().unwrap().to_string());
    let (rc, status, _) = curl(
        &port,
        "/metrics",
        &["--cacert", &ca, "--cert", &cert, "--key", &key],
    );
    assert_eq!((rc, status), (0, 200));
    // No client certificate: the server ends the handshake.
    let (rc, status, _) = curl(&port, "/metrics", &["--cacert", &ca]);
    assert_ne!(rc, 0);
    assert_eq!(status, 0);
    // A client certificate from another CA.
    pki.ca("other");
    pki.signed("stranger", "other", &["extendedKeyUsage=clientAuth"]);
    let [cert2, key2] = ["stranger.crt", "stranger.key"].map(|f| pki.path(f));
    let (rc, _, _) = curl(
        &port,
        "/metrics",
        &[
            "--cacert",
            &ca,
            "--cert",
            cert2.to_str().unwrap(),
            "--key",
            key2.to_str().unwrap(),
        ],
    );
    assert_ne!(rc, 0);
    // TLS 1.2 under min_version: TLS13.
    let (rc, status, _) = curl(
        &port,
        "/metrics",
        &[
            "--cacert",
            &ca,
            "--cert",
            &cert,
            "--key",
            &key,
            "--tls-max",
            "1.2",
        ],
    );
    assert_eq!((rc, status), (35, 0));
}

#[test]
fn certificate_and_users_rotate_without_restart_and_a_broken_file_keeps_the_last_good_one() {
    let pki = Pki::new();
    let users = |user: &str, password: &str| {
        format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n\
             basic_auth_users:\n  {user}: {}\n",
            bcrypt_hash(password)
        )
    };
    let config = pki.write("web.yml", &users("alice", "one"));
    let exporter = start(&config);
    let port = port(&exporter);
    let ca = pki.path("ca.crt").to_str().unwrap().to_string();
    assert_eq!(
        curl(&port, "/metrics", &["--cacert", &ca, "-u", "alice:one"]).1,
        200
    );

    // Users: taken once the file has settled.
    pki.write("web.yml", &users("bob", "two"));
    eventually("bob's password is taken", || {
        curl(&port, "/metrics", &["--cacert", &ca, "-u", "bob:two"]).1 == 200
    });
    assert_eq!(
        curl(&port, "/metrics", &["--cacert", &ca, "-u", "alice:one"]).1,
        401
    );

    // Certificate: a server certificate from a new CA, renamed into place.
    pki.ca("newca");
    pki.signed("next", "newca", &["subjectAltName=DNS:localhost"]);
    std::fs::copy(pki.path("next.key"), pki.path(".server.key")).unwrap();
    std::fs::copy(pki.path("next.crt"), pki.path(".server.crt")).unwrap();
    std::fs::rename(pki.path(".server.key"), pki.path("server.key")).unwrap();
    std::fs::rename(pki.path(".server.crt"), pki.path("server.crt")).unwrap();
    let newca = pki.path("newca.crt").to_str().unwrap().to_string();
    eventually("the new certificate is served", || {
        curl(&port, "/metrics", &["--cacert", &newca, "-u", "bob:two"]).1 == 200
    });
    assert_eq!(
        curl(&port, "/metrics", &["--cacert", &ca, "-u", "bob:two"]).0,
        60
    );
    assert_eq!(
        curl(&port, "/metrics", &["--cacert", &newca, "-u", "bob:two"]).1,
        200
    );

    // A broken file: reported, and the last good one stays in force.
    pki.write(
        "web.yml",
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n\
         basic_auth_users:\n  carol: not-a-hash\n",
    );
    let auth = ["--cacert", newca.as_str(), "-u", "bob:two"];
    let invalid = "hpcnode_web_config_reload_failures_total{reason=\"invalid\"}";
    eventually("the broken file is counted", || {
        sample(&port, &auth, invalid) == 1
    });
    assert_eq!(curl(&port, "/metrics", &auth).1, 200);
    // Named by its key and reason, never by what it holds.
    let log = exporter.log_with("web config file not reloaded");
    assert!(
        log.contains("basic_auth_users: the hash of user 1 of 1 is not bcrypt"),
        "{log}"
    );
    assert!(
        !log.contains("carol") && !log.contains("not-a-hash"),
        "{log}"
    );
}

#[test]
fn a_stalled_handshake_is_displaced_then_timed_out() {
    let pki = Pki::new();
    let config = pki.write(
        "web.yml",
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n",
    );
    let flag = format!("--web.config.file={}", config.display());
    let exporter = Exporter::start(&[
        "--collector.disable-defaults",
        "--web.max-connections=2",
        &flag,
    ]);
    let port = port(&exporter);
    // Connections that never start their handshake hold both places...
    let _silent: Vec<_> = (0..2).map(|_| exporter.connect()).collect();
    std::thread::sleep(Duration::from_millis(200));
    // ...and are displaced by a client that does.
    let ca = pki.path("ca.crt").to_str().unwrap().to_string();
    assert_eq!(curl(&port, "/-/healthy", &["--cacert", &ca]).1, 200);
    // Left silent, the other and a new one are closed after the handshake timeout, and counted.
    let silent = exporter.connect();
    let started = Instant::now();
    let mut buf = [0u8; 1];
    let mut silent = silent;
    silent
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let n = std::io::Read::read(&mut silent, &mut buf).unwrap_or(0);
    assert_eq!(n, 0, "closed without a byte");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(9) && waited < Duration::from_secs(25),
        "{waited:?}"
    );
    // Two when the first silent one was displaced before the second: curl's connection may
    // still hold its place when the new one arrives.
    let timeouts = sample(
        &port,
        &["--cacert", &ca],
        "hpcnode_web_tls_handshake_failures_total{reason=\"timeout\"}",
    );
    assert!((1..=2).contains(&timeouts), "{timeouts}");
}

#[test]
fn a_broken_file_at_startup_is_a_command_line_error() {
    let pki = Pki::new();
    let config = pki.write(
        "web.yml",
        "tls_server_config:\n  cert_file: missing.crt\n  key_file: server.key\n",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_hpcnode_exporter"))
        .arg(format!("--web.config.file={}", config.display()))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("missing.crt"), "{err}");
}

/// promtool accepts these, the exporter refuses them on purpose (see docs/security.md).
const STRICTER: [&str; 5] = [
    "min_version: TLS11",
    "min_version: TLS10",
    "cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA]",
    "cipher_suites: [TLS_RSA_WITH_AES_128_GCM_SHA256]",
    "curve_preferences: [CurveP521]",
];

/// promtool (Debian's 2.42) refuses these, newer exporter-toolkit and the exporter accept them
/// (as are the inline `cert`, `key` and `client_ca`).
const NEWER: [&str; 1] = ["client_allowed_sans: [scraper.example]"];

#[test]
fn promtool_and_the_exporter_agree_on_every_config() {
    let pki = Pki::new();
    let hash = bcrypt_hash("pw");
    let tls = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n";
    let verify =
        format!("{tls}  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n");
    let mut cases: Vec<(String, Option<bool>)> = vec![
        // promtool takes an empty file (plain HTTP, no auth); the exporter refuses it.
        (String::new(), Some(false)),
        (tls.to_string(), None),
        (format!("{tls}  certfile: server.crt\n"), None),
        (format!("{tls}basic_auth_users:\n  alice: {hash}\n"), None),
        ("basic_auth_users:\n  alice: plain\n".into(), None),
        ("basic_auth_user:\n  alice: x\n".into(), None),
        ("http_server_config:\n  http2: false\n  headers:\n    X-Content-Type-Options: nosniff\n    Strict-Transport-Security: max-age=31536000\n".into(), None),
        ("http_server_config:\n  headers:\n    X-Content-Type-Options: sniff\n".into(), None),
        ("http_server_config:\n  headers:\n    Server: me\n".into(), None),
        ("tls_server_config:\n  cert_file: server.crt\n".into(), None),
        ("tls_server_config:\n  key_file: server.key\n".into(), None),
        ("tls_server_config:\n  cert_file: nothere.crt\n  key_file: server.key\n".into(), None),
        (format!("{tls}  client_ca_file: ca.crt\n"), None),
        (verify.clone(), None),
        (format!("{tls}  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: ca.crt\n"), None),
        (format!("{tls}  client_auth_type: RequestClientCert\n"), None),
        (format!("{tls}  client_auth_type: RequireAnyClientCert\n"), None),
        (format!("{tls}  client_auth_type: RequireClientCert\n"), None),
        (format!("{tls}  client_auth_type: NoClientCert\n"), None),
        (format!("{tls}  client_auth_type: Sometimes\n"), None),
        (format!("{tls}  min_version: TLS13\n  max_version: TLS13\n"), None),
        (format!("{tls}  min_version: TLS14\n"), None),
        (format!("{tls}  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256]\n"), None),
        (format!("{tls}  cipher_suites: [TLS_NOPE]\n"), None),
        (format!("{tls}  curve_preferences: [X25519, CurveP256, CurveP384]\n"), None),
        (format!("{tls}  curve_preferences: [Curve25519]\n"), None),
        (format!("{tls}  prefer_server_cipher_suites: false\n"), None),
    ];
    for setting in STRICTER {
        cases.push((format!("{tls}  {setting}\n"), Some(false)));
    }
    for setting in NEWER {
        cases.push((format!("{verify}  {setting}\n"), Some(true)));
    }
    // Inline PEM (`cert`, `key`, `client_ca`): newer than promtool 2.42 too.
    cases.push((
        format!(
            "tls_server_config:\n  cert: |\n{}  key_file: server.key\n",
            indent(&pki.path("server.crt"))
        ),
        Some(true),
    ));
    cases.push((
        format!(
            "{tls}  client_auth_type: RequireAndVerifyClientCert\n  client_ca: |\n{}",
            indent(&pki.path("ca.crt"))
        ),
        Some(true),
    ));
    for (index, (text, differs)) in cases.iter().enumerate() {
        let path = pki.write(&format!("case{index}.yml"), text);
        let promtool = Command::new("promtool")
            .args(["check", "web-config"])
            .arg(&path)
            .output()
            .expect("promtool (tests/setup.sh installs it)");
        let ours = hpcnode_exporter::web_config::load(&path);
        let expected = match differs {
            None => promtool.status.success(),
            Some(ours) => {
                assert_ne!(
                    promtool.status.success(),
                    *ours,
                    "promtool now agrees on:\n{text}"
                );
                *ours
            }
        };
        assert_eq!(
            ours.is_ok(),
            expected,
            "case {index}:\n{text}\npromtool: {}\nours: {:?}",
            String::from_utf8_lossy(&promtool.stdout),
            ours.err()
        );
    }
}

fn indent(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| format!("    {line}\n"))
        .collect()
}
