use std::os::unix::fs::PermissionsExt;

use super::*;

fn source(url: &str) -> Source {
    Source::parse(url).unwrap_or_else(|reason| panic!("{url}: {reason}"))
}

#[test]
fn urls_as_a_scrape_target_writes_them() {
    let parsed = source("http://node01:10133/metrics");
    assert_eq!(
        (parsed.https, parsed.host.as_str(), parsed.port),
        (false, "node01", 10133)
    );
    assert_eq!(parsed.target, "/metrics");
    // No path: the metrics; a path and a query: as written.
    assert_eq!(source("https://node01:10133").target, "/metrics");
    assert_eq!(source("http://node01:10133/").target, "/");
    assert_eq!(
        source("http://127.0.0.1:1/metrics?collect[]=rdma").target,
        "/metrics?collect[]=rdma"
    );
    // The scheme's port; an IPv6 address without its brackets.
    assert_eq!(source("https://node01/metrics").port, 443);
    assert_eq!(source("http://node01/metrics").port, 80);
    let v6 = source("http://[::1]:10133/metrics");
    assert_eq!((v6.host.as_str(), v6.port), ("::1", 10133));
}

#[test]
fn urls_it_refuses() {
    for (url, reason) in [
        ("node01:10133", "the scheme must be http or https"),
        ("ftp://node01/metrics", "the scheme must be http or https"),
        ("/metrics", "the scheme must be http or https"),
        (
            "http://user:pass@node01/metrics",
            "credentials go in --from.config's basic_auth, not in the URL",
        ),
        ("http:// node", "not a URL"),
        ("", "not a URL"),
    ] {
        assert_eq!(Source::parse(url), Err(reason), "{url:?}");
    }
}

/// A directory with a `--from.config` and the files it names.
struct Files(tempfile::TempDir);

impl Files {
    fn new() -> Self {
        Files(tempfile::tempdir().unwrap())
    }

    fn write(&self, name: &str, text: &str, mode: u32) -> PathBuf {
        let path = self.0.path().join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    /// `Client::load` of `url` with `config` as the file, or its error's text.
    fn load(&self, url: &str, config: &str) -> Result<Client, String> {
        let path = self.write("from.yml", config, 0o600);
        Client::load(&source(url), Some(&path)).map_err(|err| err.to_string())
    }
}

fn error(result: Result<Client, String>) -> String {
    match result {
        Ok(_) => panic!("accepted"),
        Err(err) => err,
    }
}

#[test]
fn plain_http_needs_no_file_and_https_cannot_go_without_one() {
    let plain = Client::load(&source("http://node01:10133/metrics"), None).unwrap();
    assert!(plain.tls.is_none() && plain.basic_auth.is_none());
    let err = Client::load(&source("https://node01:10133/metrics"), None)
        .err()
        .unwrap();
    assert!(
        err.to_string().contains("https needs --from.config"),
        "{err}"
    );
}

/// Whatever the file leaves out, the request is never made with less than the URL asks for:
/// each of these is an error (exit 2), not plain text or no credentials.
#[test]
fn the_file_fails_closed() {
    let files = Files::new();
    for (url, config, message) in [
        ("http://n:1/", "", "empty"),
        ("http://n:1/", "# only a comment\n", "empty"),
        (
            "http://n:1/",
            "tls_config:\n  insecure_skip_verify: true\n",
            "tls_config, but --from is http://",
        ),
        (
            "https://n:1/",
            "basic_auth:\n  username: u\n  password_file: p\n",
            "no tls_config",
        ),
        (
            "https://n:1/",
            "tls_config:\n  server_name: n\n",
            "no ca_file",
        ),
        (
            "https://n:1/",
            "tls_config:\n  insecure_skip_verify: true\n  cert_file: c.crt\n",
            "cert_file and key_file go together",
        ),
        (
            "https://n:1/",
            "tls_config:\n  ca_file: missing.crt\n",
            "tls_config.ca_file: read",
        ),
        (
            "https://n:1/",
            "tls_config:\n  ca: inline\n",
            "unknown key at line 2 column 3",
        ),
        (
            "http://n:1/",
            "job_name: hpcnode\n",
            "unknown key at line 1 column 1",
        ),
        (
            "http://n:1/",
            "basic_auth:\n  username: u\n  password: inline\n",
            "unknown key at line 3 column 3",
        ),
        (
            "http://n:1/",
            "basic_auth:\n  username: u\n",
            "a key missing at line 2 column 3",
        ),
        (
            "http://n:1/",
            "basic_auth:\n  username: 'a:b'\n  password_file: p\n",
            "basic_auth.username: empty, or with a ':'",
        ),
        (
            "http://n:1/",
            "basic_auth:\n  username: u\n  password_file: ''\n",
            "basic_auth.password_file: empty",
        ),
    ] {
        let err = error(files.load(url, config));
        assert!(err.contains(message), "{url} {config:?}: {err}");
    }
}

#[test]
fn a_ca_file_that_holds_no_certificate_is_refused() {
    let files = Files::new();
    files.write("ca.crt", "not a certificate\n", 0o644);
    let err = error(files.load("https://n:1/", "tls_config:\n  ca_file: ca.crt\n"));
    assert!(
        err.contains("tls_config.ca_file: no PEM certificate"),
        "{err}"
    );
}

#[test]
fn insecure_skip_verify_needs_no_ca_and_names_the_server() {
    let files = Files::new();
    let client = files
        .load(
            "https://10.1.2.3:10133/",
            "tls_config:\n  insecure_skip_verify: true\n",
        )
        .unwrap();
    let (config, name) = client.tls.unwrap();
    assert_eq!(name.to_str(), "10.1.2.3");
    assert_eq!(config.alpn_protocols, [b"http/1.1".to_vec()]);
    let named = files
        .load(
            "https://10.1.2.3:10133/",
            "tls_config:\n  insecure_skip_verify: true\n  server_name: node01.example\n",
        )
        .unwrap();
    assert_eq!(named.tls.unwrap().1.to_str(), "node01.example");
}

/// A password file relative to the config's directory, trimmed as Prometheus trims it; one
/// that others may read is refused, as the verbs token file is.
#[test]
fn the_password_file() {
    let files = Files::new();
    files.write("password", "  s3cret \n", 0o600);
    let config = "basic_auth:\n  username: prometheus\n  password_file: password\n";
    let client = files.load("http://n:1/", config).unwrap();
    assert_eq!(
        client.basic_auth,
        Some(("prometheus".to_string(), "s3cret".to_string()))
    );
    files.write("password", "s3cret\n", 0o644);
    let err = error(files.load("http://n:1/", config));
    assert!(err.contains("lets its group or others at it"), "{err}");
    assert!(!err.contains("s3cret"), "{err}");
    files.write("password", " \n", 0o600);
    let err = error(files.load("http://n:1/", config));
    assert!(err.contains("no password in it"), "{err}");
}

mod proptests {
    use proptest::prelude::*;

    use super::*;
    use crate::test_strategies::text;

    const TOKENS: &[&str] = &[
        "tls_config:",
        "basic_auth:",
        "\n",
        "  ",
        ":",
        " ",
        "ca_file",
        "cert_file",
        "key_file",
        "server_name",
        "insecure_skip_verify",
        "username",
        "password_file",
        "true",
        "false",
        "password",
        "'",
        "[",
        "]",
        "{",
        "}",
        "#",
        "-",
    ];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Whatever the file, a client or an error, never a panic; and never TLS settings for
        /// a plain URL nor none for an https one.
        #[test]
        fn any_file_is_a_client_or_an_error(yaml in text(TOKENS)) {
            let files = Files::new();
            for url in ["http://n:1/", "https://n:1/"] {
                if let Ok(client) = files.load(url, &yaml) {
                    prop_assert_eq!(client.tls.is_some(), url.starts_with("https"));
                }
            }
        }
    }
}
