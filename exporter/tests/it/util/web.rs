//! The web config's test kit: certificates and keys made by the openssl CLI at test time, curl
//! as the client, and the exporter's own web metrics.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::Exporter;

/// Certificates, keys and config files in one temporary directory.
pub struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    pub fn new() -> Pki {
        let pki = Pki {
            dir: tempfile::tempdir().unwrap(),
        };
        pki.ca("ca");
        pki.signed(
            "server",
            "ca",
            &["subjectAltName=DNS:localhost,IP:127.0.0.1"],
        );
        pki.signed(
            "client",
            "ca",
            &[
                "subjectAltName=DNS:scraper.example",
                "extendedKeyUsage=clientAuth",
            ],
        );
        pki
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn openssl(&self, args: &[&str]) {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn key(&self, name: &str) {
        self.openssl(&[
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-out",
            &format!("{name}.key"),
        ]);
    }

    /// A self-signed CA `name.crt` with its key.
    pub fn ca(&self, name: &str) {
        self.key(name);
        self.openssl(&[
            "req",
            "-x509",
            "-new",
            "-key",
            &format!("{name}.key"),
            "-subj",
            &format!("/CN={name}"),
            "-days",
            "2",
            "-out",
            &format!("{name}.crt"),
        ]);
    }

    /// A leaf certificate `name.crt` signed by `ca`, with `extensions` (openssl's syntax).
    pub fn signed(&self, name: &str, ca: &str, extensions: &[&str]) {
        self.key(name);
        self.openssl(&[
            "req",
            "-new",
            "-key",
            &format!("{name}.key"),
            "-subj",
            &format!("/CN={name}"),
            "-out",
            &format!("{name}.csr"),
        ]);
        let ext = format!("{name}.ext");
        std::fs::write(
            self.path(&ext),
            format!(
                "basicConstraints=critical,CA:FALSE\n{}\n",
                extensions.join("\n")
            ),
        )
        .unwrap();
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{ca}.crt"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            &ext,
            "-out",
            &format!("{name}.crt"),
        ]);
    }

    /// Writes `text` to `name` by renaming a new file into place, as rotation tools do.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let staged = self.path(&format!(".{name}.new"));
        std::fs::write(&staged, text).unwrap();
        std::fs::rename(&staged, self.path(name)).unwrap();
        self.path(name)
    }
}

pub fn bcrypt_hash(password: &str) -> String {
    bcrypt::hash(password, 4).unwrap()
}

/// curl's exit status and the HTTP status it got (0: none).
pub fn curl(port: &str, path: &str, args: &[&str]) -> (i32, u16, String) {
    let url = format!("https://localhost:{port}{path}");
    let resolve = format!("localhost:{port}:127.0.0.1");
    let out = Command::new("curl")
        .args([
            "-sS",
            "-m",
            "20",
            "--resolve",
            &resolve,
            "-D",
            "-",
            "-o",
            "/dev/null",
        ])
        .args(["-w", "\n%{http_code}"])
        .args(args)
        .arg(&url)
        .output()
        .expect("curl");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let status = stdout.lines().last().unwrap_or("0").parse().unwrap_or(0);
    (out.status.code().unwrap_or(-1), status, stdout)
}

pub fn port(exporter: &Exporter) -> String {
    exporter.address.rsplit(':').next().unwrap().to_string()
}

pub fn start(config: &Path) -> Exporter {
    let flag = format!("--web.config.file={}", config.display());
    Exporter::start(&["--collector.disable-defaults", &flag])
}

pub fn metrics_text(port: &str, auth: &[&str]) -> String {
    let resolve = format!("localhost:{port}:127.0.0.1");
    let out = Command::new("curl")
        .args(["-sS", "--resolve", &resolve])
        .args(auth)
        .arg(format!("https://localhost:{port}/metrics"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// The value of an unlabelled (or exactly labelled) sample in `/metrics`.
pub fn sample(port: &str, auth: &[&str], name: &str) -> u64 {
    let text = metrics_text(port, auth);
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
}

/// The sum of every series of metric `name` in `/metrics`.
pub fn sum(port: &str, auth: &[&str], name: &str) -> u64 {
    let text = metrics_text(port, auth);
    let values: Vec<u64> = text
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?;
            let value = match rest.strip_prefix('{') {
                Some(labelled) => labelled.split_once("} ")?.1,
                None => rest.strip_prefix(' ')?,
            };
            value.parse().ok()
        })
        .collect();
    assert!(!values.is_empty(), "no {name} in:\n{text}");
    values.iter().sum()
}

/// Waits (bounded) for `check` to hold: a change of the config is taken by its reader thread
/// once the file has settled, not by the request that sees it first.
pub fn eventually(what: &str, check: impl Fn() -> bool) {
    let until = Instant::now() + Duration::from_secs(15);
    while !check() {
        assert!(Instant::now() < until, "never: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
