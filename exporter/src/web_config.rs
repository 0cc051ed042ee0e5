//! `--web.config.file`: TLS, HTTP headers and basic auth in the format of Prometheus'
//! exporter-toolkit (`web-config.yml`), so one file serves every exporter of a site.
//!
//! The file is checked at every request and before every TLS handshake, by the identity of the
//! files it names (device, inode, size, mtime), and read again only when one changed: users,
//! headers, certificates and CAs rotate without a restart, as with exporter-toolkit, at the cost
//! of a few `stat` calls. A file that no longer parses is reported (a counter, a log line once
//! per cause) and the last good one kept: exporter-toolkit answers 500 to every request instead,
//! which turns a typo during a rotation into an outage of every scrape.
//!
//! Deliberately stricter than exporter-toolkit (each is an error, never a silent downgrade):
//! TLS 1.0 and 1.1, CBC and RSA key-exchange suites, the P-521 curve (not in the `ring`
//! provider), a verifying `client_auth_type` without a client CA (Go would use the system roots)
//! and `client_allowed_sans` entries that are not DNS names or IP addresses.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use hyper::header::{HeaderName, HeaderValue};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{ring as ring_provider, CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{
    DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig, SignatureScheme,
    SupportedProtocolVersion,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use serde::Deserialize;

use crate::collector::lock;
use crate::logging::{self, Level, OncePerCause};

/// A web config file larger than this is refused: real ones are a few KiB, even with inline
/// certificates.
const MAX_FILE_BYTES: u64 = 1 << 20;
/// Distinct reload failures remembered for logging each once.
const MAX_LOGGED_CAUSES: usize = 32;

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
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: larger than {MAX_FILE_BYTES} bytes")]
    TooLarge { path: PathBuf },
    #[error("{0}")]
    Yaml(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{what}: {reason}")]
    Pem { what: String, reason: String },
    #[error("TLS settings: {0}")]
    Tls(#[from] rustls::Error),
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
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// User name to bcrypt hash; empty: no authentication.
    pub users: BTreeMap<String, String>,
}

/// Reads and validates the file at `path`; returns it with the files it names (for rotation).
pub fn load(path: &Path) -> Result<(WebConfig, Vec<PathBuf>), WebConfigError> {
    let read_error = |source| WebConfigError::Read {
        path: path.to_path_buf(),
        source,
    };
    let size = std::fs::metadata(path).map_err(read_error)?.len();
    if size > MAX_FILE_BYTES {
        return Err(WebConfigError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    let text = std::fs::read_to_string(path).map_err(read_error)?;
    // An empty file (or only comments) is a valid config with nothing enabled, as in Go.
    let raw: RawConfig = serde_norway::from_str::<Option<RawConfig>>(&text)
        .map_err(|err| WebConfigError::Yaml(err.to_string().replace('\n', " ")))?
        .unwrap_or_default();
    let dir = path.parent().unwrap_or(Path::new("."));
    let headers = validate_headers(&raw.http_server_config.headers)?;
    for (user, hash) in &raw.basic_auth_users {
        hash.parse::<bcrypt::HashParts>().map_err(|err| {
            invalid(format!(
                "basic_auth_users: the hash of {user:?} is not bcrypt: {err}"
            ))
        })?;
    }
    let mut named = Vec::new();
    let tls = match raw.tls_server_config.is_enabled() {
        false => None,
        true => Some(Arc::new(server_config(
            &raw.tls_server_config,
            dir,
            &mut named,
        )?)),
    };
    Ok((
        WebConfig {
            tls,
            headers,
            users: raw.basic_auth_users,
        },
        named,
    ))
}

fn validate_headers(
    headers: &BTreeMap<String, String>,
) -> Result<Vec<(HeaderName, HeaderValue)>, WebConfigError> {
    headers
        .iter()
        .map(|(name, value)| {
            let (_, allowed) = ALLOWED_HEADERS
                .iter()
                .find(|(allowed, _)| allowed == name)
                .ok_or_else(|| invalid(format!("HTTP header {name:?} can not be configured")))?;
            if !allowed.is_empty() && !allowed.contains(&value.as_str()) {
                return Err(invalid(format!(
                    "invalid value for {name}: expected one of {allowed:?}, got {value:?}"
                )));
            }
            let value = HeaderValue::from_str(value)
                .map_err(|_| invalid(format!("invalid value for {name}: {value:?}")))?;
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| invalid(format!("HTTP header {name:?} can not be configured")))?;
            Ok((name, value))
        })
        .collect()
}

/// Reads `file` (relative to the config's directory) or takes the inline `text`.
fn pem_source(
    file: &str,
    text: &str,
    dir: &Path,
    named: &mut Vec<PathBuf>,
) -> Result<Vec<u8>, WebConfigError> {
    if file.is_empty() {
        return Ok(text.as_bytes().to_vec());
    }
    let path = dir.join(file);
    let bytes = std::fs::read(&path).map_err(|source| WebConfigError::Read {
        path: path.clone(),
        source,
    })?;
    named.push(path);
    Ok(bytes)
}

fn certificates(what: &str, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, WebConfigError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| WebConfigError::Pem {
            what: what.to_string(),
            reason: err.to_string(),
        })?;
    if certs.is_empty() {
        return Err(WebConfigError::Pem {
            what: what.to_string(),
            reason: "no PEM certificate".into(),
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
        _ => Err(invalid(format!("{field}: unknown TLS version: {name}"))),
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
        for name in &raw.cipher_suites {
            let suite = provider
                .cipher_suites
                .iter()
                .find(|suite| suite.suite().as_str() == Some(name.as_str()))
                .ok_or_else(|| {
                    invalid(format!(
                        "cipher_suites: {name} is unknown or refused (only ECDHE suites with AES-GCM or ChaCha20-Poly1305; CBC and RSA key exchange are insecure)"
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
                _ => Err(invalid(format!("curve_preferences: unknown curve: {name}"))),
            })
            .collect::<Result<_, _>>()?;
    }
    Ok(provider)
}

fn server_config(
    raw: &RawTls,
    dir: &Path,
    named: &mut Vec<PathBuf>,
) -> Result<ServerConfig, WebConfigError> {
    let min = version(&raw.min_version, "min_version")?;
    let max = version(&raw.max_version, "max_version")?;
    if raw.cert_file.is_empty() && raw.cert.is_empty() {
        return Err(invalid("missing one of cert or cert_file"));
    }
    if raw.key_file.is_empty() && raw.key.is_empty() {
        return Err(invalid("missing one of key or key_file"));
    }
    let chain = certificates("cert", &pem_source(&raw.cert_file, &raw.cert, dir, named)?)?;
    let key_pem = pem_source(&raw.key_file, &raw.key, dir, named)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|err| WebConfigError::Pem {
        what: "key".into(),
        reason: err.to_string(),
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
            &pem_source(&raw.client_ca_file, &raw.client_ca, dir, named)?,
        )?),
    };
    let verifier = client_verifier(raw, client_cas, &provider)?;
    let builder =
        ServerConfig::builder_with_provider(provider).with_protocol_versions(&versions)?;
    let mut config = match verifier {
        Some(verifier) => builder.with_client_cert_verifier(verifier),
        None => builder.with_no_client_auth(),
    }
    .with_single_cert(chain, key)?;
    config.ignore_client_order = raw.prefer_server_cipher_suites;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
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
        Arc::new(AnyClientCert {
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
        other => return Err(invalid(format!("invalid ClientAuth: {other}"))),
    };
    let Some(sans) = &raw.client_allowed_sans else {
        return Ok(Some(verifier));
    };
    let allowed = sans
        .iter()
        .map(|san| {
            ServerName::try_from(san.clone()).map_err(|_| {
                invalid(format!(
                    "client_allowed_sans: {san:?} is not a DNS name or IP address (the only SANs checked)"
                ))
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(Some(Arc::new(AllowedSans {
        inner: verifier,
        allowed,
    })))
}

/// `RequestClientCert` and `RequireAnyClientCert`: any certificate, unverified, but the client
/// must still prove it holds its key.
#[derive(Debug)]
struct AnyClientCert {
    mandatory: bool,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for AnyClientCert {
    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// `client_allowed_sans`: the client certificate must name one of these.
#[derive(Debug)]
struct AllowedSans {
    inner: Arc<dyn ClientCertVerifier>,
    allowed: Vec<ServerName<'static>>,
}

impl ClientCertVerifier for AllowedSans {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let cert = webpki::EndEntityCert::try_from(end_entity).map_err(|_| {
            rustls::Error::InvalidCertificate(rustls::CertificateError::BadEncoding)
        })?;
        if self
            .allowed
            .iter()
            .any(|name| cert.verify_is_valid_for_subject_name(name).is_ok())
        {
            return Ok(verified);
        }
        Err(rustls::Error::InvalidCertificate(
            rustls::CertificateError::Other(rustls::OtherError(Arc::new(NoAllowedSan))),
        ))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[derive(Debug, thiserror::Error)]
#[error("the client certificate names none of client_allowed_sans")]
struct NoAllowedSan;

/// What identifies a file's content without reading it.
type Identity = Option<(u64, u64, u64, SystemTime)>;

fn identity(path: &Path) -> Identity {
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.dev(), meta.ino(), meta.len(), meta.modified().ok()?))
}

/// The web config file, read again when it or a file it names changes.
pub struct WebConfigFile {
    path: PathBuf,
    state: Mutex<State>,
    reload_failures: std::sync::atomic::AtomicU64,
    failures_logged: OncePerCause<String>,
}

struct State {
    /// The config file first, then the files it names, with their identities when read.
    watched: Vec<(PathBuf, Identity)>,
    current: Arc<WebConfig>,
}

fn watch(path: &Path, named: Vec<PathBuf>) -> Vec<(PathBuf, Identity)> {
    std::iter::once(path.to_path_buf())
        .chain(named)
        .map(|path| {
            let id = identity(&path);
            (path, id)
        })
        .collect()
}

impl WebConfigFile {
    /// Reads the file for the first time: an error here is a startup error.
    pub fn open(path: &Path) -> Result<WebConfigFile, WebConfigError> {
        // Identities first: a change while reading is seen at the next check.
        let before = identity(path);
        let (config, named) = load(path)?;
        let mut watched = watch(path, named);
        watched[0].1 = before;
        Ok(WebConfigFile {
            path: path.to_path_buf(),
            state: Mutex::new(State {
                watched,
                current: Arc::new(config),
            }),
            reload_failures: Default::default(),
            failures_logged: OncePerCause::new(MAX_LOGGED_CAUSES),
        })
    }

    /// The config now in force: read again if a file changed, the last good one if that
    /// reading failed.
    pub fn current(&self) -> Arc<WebConfig> {
        let mut state = lock(&self.state);
        let changed = state
            .watched
            .iter()
            .any(|(path, seen)| identity(path) != *seen);
        if !changed {
            return state.current.clone();
        }
        let before: Vec<_> = state
            .watched
            .iter()
            .map(|(path, _)| (path.clone(), identity(path)))
            .collect();
        match load(&self.path) {
            Ok((config, named)) => {
                let mut watched = watch(&self.path, named);
                watched[0].1 = before[0].1;
                state.watched = watched;
                state.current = Arc::new(config);
                logging::log(
                    Level::Info,
                    "web config file reloaded",
                    &[("file", &self.path.display().to_string())],
                );
            }
            Err(err) => {
                // Tried again only when a file changes again.
                state.watched = before;
                self.reload_failures
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let err = err.to_string();
                if self.failures_logged.is_new(err.clone()) {
                    logging::log(
                        Level::Error,
                        "web config file invalid; keeping the last good one",
                        &[
                            ("file", &self.path.display().to_string()),
                            ("err", &err),
                            ("note", "logged once per cause"),
                        ],
                    );
                }
            }
        }
        state.current.clone()
    }

    /// Reloads that failed since start.
    pub fn reload_failures(&self) -> u64 {
        self.reload_failures
            .load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<WebConfig, WebConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("web.yml");
        std::fs::write(&path, text).unwrap();
        load(&path).map(|(config, _)| config)
    }

    #[test]
    fn empty_file_is_plain_http_without_auth() {
        let config = parse("# nothing\n").unwrap();
        assert!(config.tls.is_none() && config.users.is_empty() && config.headers.is_empty());
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let err = parse("basic_auth_user:\n  a: b\n").unwrap_err().to_string();
        assert!(err.contains("unknown field"), "{err}");
        let err = parse("tls_server_config:\n  certfile: x\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field"), "{err}");
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
        let err =
            parse("tls_server_config:\n  cert_file: c\n  key_file: k\n  min_version: TLS11\n")
                .unwrap_err()
                .to_string();
        assert!(err.starts_with("min_version: TLS11 is refused"), "{err}");
    }
}
