//! `--web.config.file`: TLS, HTTP headers and basic auth in the format of Prometheus'
//! exporter-toolkit (`web-config.yml`), so one file serves every exporter of a site.
//!
//! This module parses and validates one reading of the file; [`reload`] keeps it in force and
//! takes changes, and [`files`] reads the files, as a guard of access must.
//!
//! Deliberately stricter than exporter-toolkit (each is an error, never a silent downgrade):
//! an empty file (exporter-toolkit: plain HTTP without auth), TLS 1.0 and 1.1, CBC and RSA
//! key-exchange suites, the P-521 curve (not in the `ring` provider), a verifying
//! `client_auth_type` without a client CA (Go would use the system roots), `client_allowed_sans`
//! entries that are not DNS names or IP addresses, and user names with a `:` (basic auth cannot
//! carry them).
//!
//! Errors name the file, the key and the reason, never a value read from the file: the log is
//! read by more people than the file (it may hold a password hash or a private key).

mod files;
mod reload;
mod verifiers;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hyper::header::{HeaderName, HeaderValue};
use rustls::crypto::{ring as ring_provider, CryptoProvider};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, SupportedProtocolVersion};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde::Deserialize;

use crate::sysfs::{FileStamp, SysfsError};
use verifiers::AllowedSans;

pub use files::MAX_FILE_BYTES;
pub use reload::{WebConfigFile, RELOAD_FAILURE_REASONS};
pub use verifiers::AnyCert;

/// exporter-toolkit's hash for unknown users, so that they cost the same bcrypt work as known
/// ones and response times do not tell which user names exist.
pub const UNKNOWN_USER_HASH: &str = "$2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi";

/// The headers exporter-toolkit lets a config set, with the values allowed (none: any).
const ALLOWED_HEADERS: [(&str, &[&str]); 5] = [
    ("Strict-Transport-Security", &[]),
    ("X-Content-Type-Options", &["nosniff"]),
    ("X-Frame-Options", &["deny", "sameorigin"]),
    ("X-XSS-Protection", &[]),
    ("Content-Security-Policy", &[]),
];

#[derive(Debug, thiserror::Error)]
pub enum WebConfigError {
    #[error(transparent)]
    File(#[from] SysfsError),
    #[error("{path}: empty; an empty web config is refused (to serve plain HTTP without auth, leave out --web.config.file)")]
    Empty { path: PathBuf },
    #[error("{0}")]
    Yaml(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{what}: {reason}")]
    Pem {
        what: &'static str,
        reason: &'static str,
    },
    #[error("TLS settings: {0}")]
    Tls(#[from] rustls::Error),
    #[error(
        "{path}: not read within {:?} (a hung file system?)",
        reload::READ_DEADLINE
    )]
    Timeout { path: PathBuf },
    #[error("starting the web config's reader thread: {0}")]
    Thread(std::io::Error),
}

fn invalid(reason: impl Into<String>) -> WebConfigError {
    WebConfigError::Invalid(reason.into())
}

/// The file as written; every key exporter-toolkit knows (except the newer `rate_limit`), and
/// no other.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawConfig {
    tls_server_config: RawTls,
    http_server_config: RawHttp,
    basic_auth_users: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawTls {
    cert: String,
    key: String,
    client_ca: String,
    cert_file: String,
    key_file: String,
    client_auth_type: String,
    client_ca_file: String,
    cipher_suites: Vec<String>,
    curve_preferences: Vec<String>,
    min_version: String,
    max_version: String,
    prefer_server_cipher_suites: bool,
    client_allowed_sans: Option<Vec<String>>,
}

impl Default for RawTls {
    fn default() -> Self {
        RawTls {
            cert: String::new(),
            key: String::new(),
            client_ca: String::new(),
            cert_file: String::new(),
            key_file: String::new(),
            client_auth_type: String::new(),
            client_ca_file: String::new(),
            cipher_suites: Vec::new(),
            curve_preferences: Vec::new(),
            min_version: "TLS12".into(),
            max_version: "TLS13".into(),
            prefer_server_cipher_suites: true,
            client_allowed_sans: None,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawHttp {
    /// Checked (a bool) and otherwise unused: the server speaks HTTP/1.1 only, which
    /// Prometheus scrapes with unless told otherwise.
    #[serde(rename = "http2")]
    _http2: bool,
    headers: BTreeMap<String, String>,
}

impl Default for RawHttp {
    fn default() -> Self {
        RawHttp {
            _http2: true,
            headers: BTreeMap::new(),
        }
    }
}

impl RawTls {
    fn is_enabled(&self) -> bool {
        [
            &self.cert_file,
            &self.cert,
            &self.key_file,
            &self.key,
            &self.client_ca_file,
            &self.client_ca,
            &self.client_auth_type,
        ]
        .iter()
        .any(|field| !field.is_empty())
    }
}

/// One good reading of the file.
#[derive(Debug)]
pub struct WebConfig {
    /// `None`: plain HTTP.
    pub tls: Option<Arc<ServerConfig>>,
    /// What checks client certificates in `tls`; kept to check a kept-alive connection's
    /// certificate again against a newer config (a revoked CA).
    pub client_verifier: Option<Arc<dyn ClientCertVerifier>>,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// User name to bcrypt hash; empty: no authentication.
    pub users: BTreeMap<String, String>,
}

/// What a config guards, each of which a reload may not take away (that needs a restart):
/// a reload whose posture is weaker than the one at start is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Posture {
    pub tls: bool,
    pub client_cert_required: bool,
    pub basic_auth: bool,
}

impl WebConfig {
    pub fn posture(&self) -> Posture {
        Posture {
            tls: self.tls.is_some(),
            client_cert_required: self
                .client_verifier
                .as_ref()
                .is_some_and(|verifier| verifier.client_auth_mandatory()),
            basic_auth: !self.users.is_empty(),
        }
    }
}

impl Posture {
    /// Why `next` may not replace a config with this posture, if it may not. TLS is decided at
    /// start either way: a listener that served plain HTTP has clients that expect it.
    pub fn refuses(&self, next: &Posture) -> Option<&'static str> {
        if next.tls != self.tls {
            return Some("it would turn TLS on or off, which takes a restart");
        }
        if self.client_cert_required && !next.client_cert_required {
            return Some("it would stop requiring client certificates, which takes a restart");
        }
        if self.basic_auth && !next.basic_auth {
            return Some("it would turn basic auth off, which takes a restart");
        }
        None
    }
}

/// A reading of the config and of every file it names, each with the stamp of what was read.
pub struct Loaded {
    pub config: WebConfig,
    /// The config file first.
    pub files: Vec<(PathBuf, FileStamp)>,
}

/// Reads and validates the file at `path` and the files it names.
pub fn load(path: &Path) -> Result<Loaded, WebConfigError> {
    let (bytes, identity) = files::read(path)?;
    let mut files = vec![(path.to_path_buf(), identity)];
    let config = parse(path, &bytes, &mut files)?;
    Ok(Loaded { config, files })
}

/// The config in `bytes`, read from `path`; the files it names are read relative to its
/// directory and added to `files`.
fn parse(
    path: &Path,
    bytes: &[u8],
    files: &mut Vec<(PathBuf, FileStamp)>,
) -> Result<WebConfig, WebConfigError> {
    let empty = || WebConfigError::Empty {
        path: path.to_path_buf(),
    };
    let text = std::str::from_utf8(bytes).map_err(|_| invalid("not UTF-8 text"))?;
    // Empty, or only comments: exporter-toolkit's plain HTTP without auth, and also what a
    // file being rewritten (truncated, then written) looks like for a moment.
    let raw: RawConfig = serde_norway::from_str::<Option<RawConfig>>(text)
        .map_err(yaml_error)?
        .ok_or_else(empty)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let headers = validate_headers(&raw.http_server_config.headers)?;
    for (index, (user, hash)) in raw.basic_auth_users.iter().enumerate() {
        if user.contains(':') {
            return Err(invalid(format!(
                "basic_auth_users: user {} of {} has a ':' in its name, which HTTP basic auth cannot carry",
                index + 1,
                raw.basic_auth_users.len()
            )));
        }
        if hash.parse::<bcrypt::HashParts>().is_err() {
            return Err(invalid(format!(
                "basic_auth_users: the hash of user {} of {} is not bcrypt",
                index + 1,
                raw.basic_auth_users.len()
            )));
        }
    }
    let (tls, client_verifier) = match raw.tls_server_config.is_enabled() {
        false => (None, None),
        true => {
            let (config, verifier) = server_config(&raw.tls_server_config, dir, files)?;
            (Some(Arc::new(config)), verifier)
        }
    };
    Ok(WebConfig {
        tls,
        client_verifier,
        headers,
        users: raw.basic_auth_users,
    })
}

/// The YAML error's kind and place: serde's messages quote the value they could not take.
fn yaml_error(err: serde_norway::Error) -> WebConfigError {
    WebConfigError::Yaml(describe_yaml_error(&err))
}

/// A YAML error of a config file as its kind and place (`unknown key at line 3 column 5`),
/// without the value serde's message quotes: a config may hold a secret. Also the checks
/// file's and the `check --from.config` file's.
pub fn describe_yaml_error(err: &serde_norway::Error) -> String {
    let message = err.to_string();
    let kind = if message.contains("unknown field") {
        "unknown key"
    } else if message.contains("invalid type") || message.contains("invalid value") {
        "a value of the wrong type"
    } else if message.contains("duplicate") {
        "a duplicate key"
    } else if message.contains("missing field") {
        "a key missing"
    } else {
        "not valid YAML"
    };
    match err.location() {
        Some(at) => format!("{kind} at line {} column {}", at.line(), at.column()),
        None => kind.to_string(),
    }
}

fn validate_headers(
    headers: &BTreeMap<String, String>,
) -> Result<Vec<(HeaderName, HeaderValue)>, WebConfigError> {
    headers
        .iter()
        .map(|(name, value)| {
            let (name, allowed) = ALLOWED_HEADERS
                .iter()
                .find(|(allowed, _)| allowed == name)
                .ok_or_else(|| {
                    invalid(format!(
                        "http_server_config: a header other than {:?} can not be configured",
                        ALLOWED_HEADERS.map(|(name, _)| name)
                    ))
                })?;
            if !allowed.is_empty() && !allowed.contains(&value.as_str()) {
                return Err(invalid(format!(
                    "invalid value for {name}: expected one of {allowed:?}"
                )));
            }
            let value = HeaderValue::from_str(value)
                .map_err(|_| invalid(format!("invalid value for {name}")))?;
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| invalid(format!("HTTP header {name} can not be configured")))?;
            Ok((name, value))
        })
        .collect()
}

/// Reads `file` (relative to the config's directory) or takes the inline `text`.
fn pem_source(
    file: &str,
    text: &str,
    dir: &Path,
    files: &mut Vec<(PathBuf, FileStamp)>,
) -> Result<Vec<u8>, WebConfigError> {
    if file.is_empty() {
        return Ok(text.as_bytes().to_vec());
    }
    let path = dir.join(file);
    let (bytes, identity) = files::read(&path)?;
    files.push((path, identity));
    Ok(bytes)
}

/// The PEM certificates of `pem`, at least one; `what` names them in an error. Also the CA of
/// `check --from`.
pub fn certificates(
    what: &'static str,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, WebConfigError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| WebConfigError::Pem {
            what,
            reason: "not valid PEM",
        })?;
    if certs.is_empty() {
        return Err(WebConfigError::Pem {
            what,
            reason: "no PEM certificate",
        });
    }
    Ok(certs)
}

fn version(name: &str, field: &str) -> Result<&'static SupportedProtocolVersion, WebConfigError> {
    match name {
        "TLS13" => Ok(&rustls::version::TLS13),
        "TLS12" => Ok(&rustls::version::TLS12),
        "TLS10" | "TLS11" => Err(invalid(format!(
            "{field}: {name} is refused: TLS 1.0 and 1.1 are insecure (exporter-toolkit accepts them)"
        ))),
        _ => Err(invalid(format!(
            "{field}: not a known TLS version (TLS12 or TLS13)"
        ))),
    }
}

fn provider(raw: &RawTls) -> Result<CryptoProvider, WebConfigError> {
    let mut provider = ring_provider::default_provider();
    if !raw.cipher_suites.is_empty() {
        // As in Go, the list applies to TLS 1.2; TLS 1.3's suites are always all enabled.
        let mut suites: Vec<_> = provider
            .cipher_suites
            .iter()
            .filter(|suite| suite.version() == &rustls::version::TLS13)
            .copied()
            .collect();
        for (index, name) in raw.cipher_suites.iter().enumerate() {
            let suite = provider
                .cipher_suites
                .iter()
                .find(|suite| suite.suite().as_str() == Some(name.as_str()))
                .ok_or_else(|| {
                    invalid(format!(
                        "cipher_suites: entry {} is unknown or refused (only ECDHE suites with AES-GCM or ChaCha20-Poly1305; CBC and RSA key exchange are insecure)", index + 1
                    ))
                })?;
            if !suites.contains(suite) {
                suites.push(*suite);
            }
        }
        provider.cipher_suites = suites;
    }
    if !raw.curve_preferences.is_empty() {
        provider.kx_groups = raw
            .curve_preferences
            .iter()
            .map(|name| match name.as_str() {
                "X25519" => Ok(ring_provider::kx_group::X25519),
                "CurveP256" => Ok(ring_provider::kx_group::SECP256R1),
                "CurveP384" => Ok(ring_provider::kx_group::SECP384R1),
                "CurveP521" => Err(invalid(
                    "curve_preferences: CurveP521 is not supported (the ring provider has X25519, CurveP256, CurveP384)",
                )),
                _ => Err(invalid(
                    "curve_preferences: an unknown curve (X25519, CurveP256 and CurveP384 are known)",
                )),
            })
            .collect::<Result<_, _>>()?;
    }
    Ok(provider)
}

/// The TLS settings, and what checks client certificates when any are asked for.
fn server_config(
    raw: &RawTls,
    dir: &Path,
    files: &mut Vec<(PathBuf, FileStamp)>,
) -> Result<(ServerConfig, Option<Arc<dyn ClientCertVerifier>>), WebConfigError> {
    let min = version(&raw.min_version, "min_version")?;
    let max = version(&raw.max_version, "max_version")?;
    if raw.cert_file.is_empty() && raw.cert.is_empty() {
        return Err(invalid("missing one of cert or cert_file"));
    }
    if raw.key_file.is_empty() && raw.key.is_empty() {
        return Err(invalid("missing one of key or key_file"));
    }
    let chain = certificates("cert", &pem_source(&raw.cert_file, &raw.cert, dir, files)?)?;
    let key_pem = pem_source(&raw.key_file, &raw.key, dir, files)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|_| WebConfigError::Pem {
        what: "key",
        reason: "no PEM private key",
    })?;
    let versions: Vec<&'static SupportedProtocolVersion> =
        [&rustls::version::TLS12, &rustls::version::TLS13]
            .into_iter()
            .filter(|v| {
                (u16::from(min.version)..=u16::from(max.version)).contains(&u16::from(v.version))
            })
            .collect();
    if versions.is_empty() {
        return Err(invalid("min_version is above max_version"));
    }
    let provider = Arc::new(provider(raw)?);
    let client_cas = match (raw.client_ca_file.is_empty(), raw.client_ca.is_empty()) {
        (true, true) => None,
        _ => Some(certificates(
            "client CA",
            &pem_source(&raw.client_ca_file, &raw.client_ca, dir, files)?,
        )?),
    };
    let verifier = client_verifier(raw, client_cas, &provider)?;
    let builder =
        ServerConfig::builder_with_provider(provider).with_protocol_versions(&versions)?;
    let mut config = match &verifier {
        Some(verifier) => builder.with_client_cert_verifier(verifier.clone()),
        None => builder.with_no_client_auth(),
    }
    .with_single_cert(chain, key)?;
    config.ignore_client_order = raw.prefer_server_cipher_suites;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((config, verifier))
}

/// The verifier for `client_auth_type`, or `None` when no client certificate is asked for.
fn client_verifier(
    raw: &RawTls,
    client_cas: Option<Vec<CertificateDer<'static>>>,
    provider: &Arc<CryptoProvider>,
) -> Result<Option<Arc<dyn ClientCertVerifier>>, WebConfigError> {
    let verifying = |cas: Option<Vec<CertificateDer<'static>>>, mandatory: bool| {
        let cas = cas.ok_or_else(|| {
            invalid(format!(
                "client_auth_type {} needs client_ca_file or client_ca",
                raw.client_auth_type
            ))
        })?;
        let mut roots = RootCertStore::empty();
        for ca in cas {
            roots.add(ca).map_err(WebConfigError::Tls)?;
        }
        let builder =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
        let builder = match mandatory {
            true => builder,
            false => builder.allow_unauthenticated(),
        };
        builder
            .build()
            .map_err(|err| invalid(format!("client CA: {err}")))
    };
    let any = |mandatory| -> Arc<dyn ClientCertVerifier> {
        Arc::new(AnyCert {
            mandatory,
            algorithms: provider.signature_verification_algorithms,
        })
    };
    let verifier = match raw.client_auth_type.as_str() {
        "" | "NoClientCert" => {
            if client_cas.is_some() {
                return Err(invalid(
                    "client CA's have been configured without a Client Auth Policy",
                ));
            }
            return Ok(None);
        }
        "RequestClientCert" => any(false),
        "RequireAnyClientCert" | "RequireClientCert" => any(true),
        "VerifyClientCertIfGiven" => verifying(client_cas, false)?,
        "RequireAndVerifyClientCert" => verifying(client_cas, true)?,
        _ => {
            return Err(invalid(
                "client_auth_type: not one of NoClientCert, RequestClientCert, RequireAnyClientCert, VerifyClientCertIfGiven, RequireAndVerifyClientCert",
            ))
        }
    };
    let Some(sans) = &raw.client_allowed_sans else {
        return Ok(Some(verifier));
    };
    let allowed = sans
        .iter()
        .enumerate()
        .map(|(index, san)| {
            ServerName::try_from(san.clone()).map_err(|_| {
                invalid(format!(
                    "client_allowed_sans: entry {} is not a DNS name or IP address (the only SANs checked)",
                    index + 1
                ))
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(Some(Arc::new(AllowedSans {
        inner: verifier,
        allowed,
    })))
}

#[cfg(test)]
mod tests;
