use super::*;

fn parse(text: &str) -> Result<WebConfig, WebConfigError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("web.yml");
    std::fs::write(&path, text).unwrap();
    load(&path).map(|loaded| loaded.config)
}

#[test]
fn an_empty_file_is_not_a_config() {
    for text in ["", "\n", "# nothing\n", "---\n"] {
        let err = parse(text).unwrap_err();
        assert!(
            matches!(err, WebConfigError::Empty { .. }),
            "{text:?}: {err}"
        );
    }
}

#[test]
fn a_user_name_with_a_colon_is_refused() {
    let err = parse(&format!(
        "basic_auth_users:\n  'prom:etheus': '{UNKNOWN_USER_HASH}'\n"
    ))
    .unwrap_err()
    .to_string();
    assert!(err.contains("':'") && !err.contains("prom"), "{err}");
}

#[test]
fn errors_name_the_key_and_reason_never_a_value() {
    let marker = "MARKER7f3a";
    for text in [
        format!("basic_auth_users:\n  alice: {marker}\n"),
        format!("basic_auth_users:\n  {marker}: x\n"),
        format!("{marker}: 1\n"),
        format!("basic_auth_users: {marker}\n"),
        format!("http_server_config:\n  headers:\n    X-Frame-Options: {marker}\n"),
        format!("http_server_config:\n  headers:\n    {marker}: x\n"),
        format!("tls_server_config:\n  cert: {marker}\n  key: {marker}\n"),
        format!(
            "tls_server_config:\n  cert: \"-----BEGIN CERTIFICATE-----\\n{marker}\"\n  key: x\n"
        ),
        format!("tls_server_config:\n  cert_file: c\n  key_file: k\n  min_version: {marker}\n"),
        format!(
            "tls_server_config:\n  cert_file: c\n  key_file: k\n  client_auth_type: {marker}\n"
        ),
        format!("tls_server_config:\n  cert_file: c\n  key_file: k\n  cipher_suites: [{marker}]\n"),
        format!(
            "tls_server_config:\n  cert_file: c\n  key_file: k\n  curve_preferences: [{marker}]\n"
        ),
        format!("{marker}\n"),
        format!("[{marker}\n"),
    ] {
        let err = parse(&text).unwrap_err().to_string();
        assert!(!err.contains(marker), "{text:?} gave: {err}");
    }
}

#[test]
fn a_reload_may_not_weaken_what_the_config_guards() {
    let start = Posture {
        tls: true,
        client_cert_required: true,
        basic_auth: true,
    };
    assert_eq!(start.refuses(&start), None);
    for weaker in [
        Posture {
            tls: false,
            ..start
        },
        Posture {
            client_cert_required: false,
            ..start
        },
        Posture {
            basic_auth: false,
            ..start
        },
    ] {
        assert!(start.refuses(&weaker).is_some(), "{weaker:?}");
    }
    let plain = Posture {
        tls: false,
        client_cert_required: false,
        basic_auth: false,
    };
    // TLS is decided at start, both ways; auth may be added.
    assert!(plain.refuses(&Posture { tls: true, ..plain }).is_some());
    assert_eq!(
        plain.refuses(&Posture {
            basic_auth: true,
            ..plain
        }),
        None
    );
}

#[test]
fn unknown_keys_are_rejected() {
    let err = parse("basic_auth_user:\n  a: b\n").unwrap_err().to_string();
    assert_eq!(err, "unknown key at line 1 column 1");
    let err = parse("tls_server_config:\n  certfile: x\n")
        .unwrap_err()
        .to_string();
    assert_eq!(err, "unknown key at line 2 column 3");
}

#[test]
fn headers_are_checked_like_exporter_toolkit() {
    let ok = parse("http_server_config:\n  headers:\n    X-Frame-Options: deny\n").unwrap();
    assert_eq!(ok.headers[0].0.as_str(), "x-frame-options");
    assert!(parse("http_server_config:\n  headers:\n    X-Frame-Options: allow\n").is_err());
    assert!(parse("http_server_config:\n  headers:\n    Server: x\n").is_err());
}

#[test]
fn users_need_bcrypt_hashes() {
    assert!(parse("basic_auth_users:\n  alice: secret\n").is_err());
    let ok = parse(&format!(
        "basic_auth_users:\n  alice: '{UNKNOWN_USER_HASH}'\n"
    ))
    .unwrap();
    assert_eq!(ok.users.len(), 1);
}

#[test]
fn tls_needs_cert_and_key_and_refuses_old_versions() {
    let err = parse("tls_server_config:\n  client_auth_type: RequestClientCert\n")
        .unwrap_err()
        .to_string();
    assert_eq!(err, "missing one of cert or cert_file");
    let err = parse("tls_server_config:\n  cert_file: c\n  key_file: k\n  min_version: TLS11\n")
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("min_version: TLS11 is refused"), "{err}");
}

mod proptests {
    use super::*;
    use crate::test_strategies::text;
    use proptest::prelude::*;

    const MARKER: &str = "MARKER7f3a";
    const TOKENS: &[&str] = &[
        "\n",
        "  ",
        "    ",
        ": ",
        "- ",
        "[",
        "]",
        "{",
        "}",
        ", ",
        "'",
        "\"",
        "#",
        "|",
        MARKER,
        "tls_server_config",
        "http_server_config",
        "basic_auth_users",
        "headers",
        "http2",
        "cert",
        "key",
        "client_ca",
        "client_auth_type",
        "RequireAndVerifyClientCert",
        "min_version",
        "max_version",
        "TLS13",
        "cipher_suites",
        "curve_preferences",
        "client_allowed_sans",
        "X-Frame-Options",
        "deny",
        "true",
        "-----BEGIN CERTIFICATE-----",
        "-----END CERTIFICATE-----",
        "-----BEGIN PRIVATE KEY-----",
        UNKNOWN_USER_HASH,
    ];

    proptest! {
        /// Whatever the file holds, an error names keys and reasons, never a value; only an
        /// error reading a file the config names shows that name.
        #[test]
        fn no_error_quotes_what_the_file_holds(text in text(TOKENS)) {
            if let Err(err) = parse(&text) {
                let message = err.to_string();
                prop_assert!(
                    !message.contains(MARKER) || matches!(err, WebConfigError::File(_)),
                    "{text:?} gave {message}"
                );
            }
        }
    }
}
