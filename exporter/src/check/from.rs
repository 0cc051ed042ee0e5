//! `check --from URL`: the page of a running exporter, read over HTTP(S) with what Prometheus
//! admins already write for a scrape (`--from.config FILE`: a scrape config's `tls_config` and
//! `basic_auth`), so the check needs no privileges of its own.
//!
//! Fails closed: the file is read whole and every key known, or it is an error (exit 2), never
//! a request made with less than it asks for. `tls_config` with an `http://` URL, an `https://`
//! URL without a CA to trust (no system roots are read) and half a client certificate are
//! errors, as is a password file others may read. Relative paths in the file are relative to
//! its directory, and a password file's text is trimmed of surrounding white space, as
//! Prometheus does (prometheus/common config/http_config.go: `SetDirectory`, `FileSecret`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hyper::Uri;
use rustls::crypto::ring as ring_provider;
use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{PrivateKeyDer, ServerName};
use serde::Deserialize;

use crate::exposition::MAX_TEXT_BYTES;
use crate::http::client::{self, ClientError, Get};
use crate::sysfs::{read_named_file, read_private_file, SysfsError};
use crate::web_config::{certificates, describe_yaml_error, AnyCert};

/// The path a URL without one asks for, as a scrape config's `metrics_path` defaults.
const DEFAULT_PATH: &str = "/metrics";
/// A larger config, CA bundle, certificate, key or password file is refused.
const MAX_FILE_BYTES: usize = 1 << 20;

/// What `--from` names, checked (no I/O).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// As given, for messages.
    pub url: String,
    https: bool,
    /// Without brackets around an IPv6 address.
    host: String,
    port: u16,
    /// Path and query.
    target: String,
}

#[derive(Debug, thiserror::Error)]
pub enum FromConfigError {
    #[error(transparent)]
    File(#[from] SysfsError),
    #[error("{path}: {reason}")]
    Invalid { path: PathBuf, reason: String },
}

impl Source {
    /// `url` as `--from` takes it: `http://` or `https://`, a host, a port or the scheme's,
    /// a path (`/metrics` when none) and query; no credentials (they belong in the file).
    pub fn parse(url: &str) -> Result<Source, &'static str> {
        let uri: Uri = url.parse().map_err(|_| "not a URL")?;
        let https = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err("the scheme must be http or https"),
        };
        let authority = uri.authority().ok_or("no host")?;
        if authority.as_str().contains('@') {
            return Err("credentials go in --from.config's basic_auth, not in the URL");
        }
        let host = authority.host();
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if host.is_empty() {
            return Err("no host");
        }
        let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
        // A URL that names no path (`http://node:10133`) asks for the metrics.
        let named_path = url
            .split_once("://")
            .is_some_and(|(_, rest)| rest.contains('/'));
        let target = match (named_path, uri.path_and_query()) {
            (true, Some(target)) => target.as_str().to_string(),
            _ => DEFAULT_PATH.to_string(),
        };
        Ok(Source {
            url: url.to_string(),
            https,
            host: host.to_string(),
            port,
            target,
        })
    }
}

/// How to reach a [`Source`]: TLS and basic auth, as the `--from.config` file says.
#[derive(Default)]
pub struct Client {
    tls: Option<(Arc<ClientConfig>, ServerName<'static>)>,
    basic_auth: Option<(String, String)>,
}

/// The file as written: a scrape config's two blocks, and no other key.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawFile {
    tls_config: Option<RawTls>,
    basic_auth: Option<RawBasicAuth>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawTls {
    ca_file: String,
    cert_file: String,
    key_file: String,
    server_name: String,
    insecure_skip_verify: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBasicAuth {
    username: String,
    password_file: String,
}

impl Client {
    /// What reaching `source` takes, read from the `--from.config` file at `config` (none:
    /// plain HTTP, no credentials, which an `https://` source refuses).
    pub fn load(source: &Source, config: Option<&Path>) -> Result<Client, FromConfigError> {
        let Some(path) = config else {
            return match source.https {
                true => Err(FromConfigError::Invalid {
                    path: PathBuf::from("--from"),
                    reason: "https needs --from.config with tls_config.ca_file (or insecure_skip_verify): no system roots are trusted".into(),
                }),
                false => Ok(Client::default()),
            };
        };
        let invalid = |reason: String| FromConfigError::Invalid {
            path: path.to_path_buf(),
            reason,
        };
        let bytes = read_named_file(path, MAX_FILE_BYTES)?;
        let text = std::str::from_utf8(&bytes).map_err(|_| invalid("not UTF-8 text".into()))?;
        // An empty file is no config: whoever named it meant something.
        let raw = serde_norway::from_str::<Option<RawFile>>(text)
            .map_err(|err| invalid(describe_yaml_error(&err)))?
            .ok_or_else(|| invalid("empty".into()))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let tls =
            match (raw.tls_config, source.https) {
                (Some(_), false) => {
                    return Err(invalid(
                        "tls_config, but --from is http://: the page would be read in plain text"
                            .into(),
                    ))
                }
                (None, true) => return Err(invalid(
                    "--from is https:// but there is no tls_config to trust its certificate with"
                        .into(),
                )),
                (None, false) => None,
                (Some(tls), true) => Some(tls_client(&tls, &source.host, dir).map_err(invalid)?),
            };
        let basic_auth = match raw.basic_auth {
            None => None,
            Some(auth) => Some(credentials(&auth, dir).map_err(|err| match err {
                Credentials::File(err) => FromConfigError::File(err),
                Credentials::Invalid(reason) => invalid(reason),
            })?),
        };
        Ok(Client { tls, basic_auth })
    }
}

/// Why the basic auth block cannot be used.
enum Credentials {
    File(SysfsError),
    Invalid(String),
}

fn credentials(auth: &RawBasicAuth, dir: &Path) -> Result<(String, String), Credentials> {
    if auth.username.is_empty() || auth.username.contains(':') {
        return Err(Credentials::Invalid(
            "basic_auth.username: empty, or with a ':' (basic auth cannot carry one)".into(),
        ));
    }
    if auth.password_file.is_empty() {
        return Err(Credentials::Invalid(
            "basic_auth.password_file: empty".into(),
        ));
    }
    let bytes = read_private_file(&dir.join(&auth.password_file), MAX_FILE_BYTES)
        .map_err(Credentials::File)?;
    let password = std::str::from_utf8(&bytes)
        .map_err(|_| Credentials::Invalid("basic_auth.password_file: not UTF-8 text".into()))?
        .trim();
    if password.is_empty() {
        return Err(Credentials::Invalid(
            "basic_auth.password_file: no password in it".into(),
        ));
    }
    Ok((auth.username.clone(), password.to_string()))
}

/// The rustls client settings of `tls` and the name the server's certificate must carry.
fn tls_client(
    tls: &RawTls,
    host: &str,
    dir: &Path,
) -> Result<(Arc<ClientConfig>, ServerName<'static>), String> {
    let pem = |field: &str, file: &str, private: bool| -> Result<Vec<u8>, String> {
        let path = dir.join(file);
        let read = match private {
            true => read_private_file(&path, MAX_FILE_BYTES),
            false => read_named_file(&path, MAX_FILE_BYTES),
        };
        read.map_err(|err| format!("tls_config.{field}: {err}"))
    };
    let provider = Arc::new(ring_provider::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|err| err.to_string())?;
    let builder =
        match (tls.insecure_skip_verify, tls.ca_file.as_str()) {
            (true, _) => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCert {
                    mandatory: true,
                    algorithms: provider.signature_verification_algorithms,
                })),
            (false, "") => return Err(
                "tls_config: no ca_file (no system roots are trusted) and no insecure_skip_verify"
                    .into(),
            ),
            (false, ca_file) => {
                let mut roots = RootCertStore::empty();
                let cas = certificates("tls_config.ca_file", &pem("ca_file", ca_file, false)?)
                    .map_err(|err| err.to_string())?;
                for ca in cas {
                    roots
                        .add(ca)
                        .map_err(|err| format!("tls_config.ca_file: {err}"))?;
                }
                builder.with_root_certificates(roots)
            }
        };
    let mut config = match (tls.cert_file.as_str(), tls.key_file.as_str()) {
        ("", "") => builder.with_no_client_auth(),
        ("", _) | (_, "") => {
            return Err("tls_config: cert_file and key_file go together".into());
        }
        (cert_file, key_file) => {
            let chain = certificates("tls_config.cert_file", &pem("cert_file", cert_file, false)?)
                .map_err(|err| err.to_string())?;
            let key = PrivateKeyDer::from_pem_slice(&pem("key_file", key_file, true)?)
                .map_err(|_| "tls_config.key_file: no PEM private key".to_string())?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|err| format!("tls_config: {err}"))?
        }
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let name = match tls.server_name.as_str() {
        "" => host,
        name => name,
    };
    let name = ServerName::try_from(name.to_string())
        .map_err(|_| "tls_config.server_name: not a DNS name or IP address".to_string())?;
    Ok((Arc::new(config), name))
}

/// The page at `source`, as `client` reaches it, within `timeout`.
pub async fn fetch(
    source: &Source,
    client: &Client,
    timeout: Duration,
) -> Result<String, ClientError> {
    let get = Get {
        host: &source.host,
        port: source.port,
        target: &source.target,
        tls: client.tls.clone(),
        basic_auth: (client.basic_auth.as_ref()).map(|(user, pass)| (user.as_str(), pass.as_str())),
        max_body: MAX_TEXT_BYTES,
    };
    let body = client::get(get, timeout).await?;
    String::from_utf8(body.to_vec()).map_err(|_| ClientError::Body("not UTF-8 text".into()))
}

#[cfg(test)]
mod tests;
