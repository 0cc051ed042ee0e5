//! The HTTP server, and the one client (`client`, for `check --from`): the only module that
//! knows about HTTP.
//!
//! `/metrics` (or `--web.telemetry-path`) in Prometheus text 0.0.4, or OpenMetrics 1.0 when the
//! `Accept` header prefers it, gzip when asked; a landing page; `/-/healthy` and `/-/ready`.
//!
//! What hostile or merely many clients can hold is bounded:
//! - connections (`--web.max-connections`): at the cap, a new connection takes the place of the
//!   one idle the longest (kept alive between requests, or still sending its request head), which
//!   is closed; idle connections never lock a scrape out;
//! - scrapes (`--web.max-requests`, at most one below the connection cap, so a connection is
//!   always left for the health checks): beyond it, 503; each holds its slot until its body is
//!   written or its connection is gone, so clients that do not read cannot pile up bodies;
//! - collections: scrapes that arrive while one of the same collectors (`collect[]`,
//!   `exclude[]`) is running wait for it and share its samples, so concurrent scrapes cost one
//!   collection; no more collections run at once than scrapes may; each response encodes them
//!   a piece at a time as it is written, so no whole text is held beside them;
//! - TLS handshakes (`--web.config.file`): bounded in time, and a connection still in its
//!   handshake is idle to the connection cap, so it is the first displaced;
//! - basic auth: see [`auth`]; wrong passwords cost one core at most and cannot delay a client
//!   that authenticated before.
//!
//! With `--web.config.file` every path is behind the same TLS and basic auth, and the file's
//! headers are on every response. Whether connections are TLS is decided at start; every
//! request, kept-alive ones too, is checked against the config in force when it arrives
//! (its users, and a client certificate against the client CA now configured).

mod auth;
mod body;
pub mod client;
mod limits;
mod listen;
mod negotiate;
mod query;
mod telemetry;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, AUTHORIZATION, CONNECTION, CONTENT_TYPE, WWW_AUTHENTICATE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::logging::{self, Level, OncePerCause};
use crate::scrape::{Scraper, Selection};
use crate::sync::lock;
use crate::web_config::{WebConfig, WebConfigFile};
use auth::{Authenticator, Verdict};
use body::{Body, StallLimit};
use limits::{Busy, Connection, Connections};
pub use listen::{bind, systemd_sockets, ListenError, SystemdError};
pub use negotiate::{accepts_gzip, negotiate_format};
use telemetry::Flight;
pub use telemetry::WEB_METRICS;

/// A client gets this long to send its request head (slowloris guard).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Request heads larger than this are refused; a scrape request is a few hundred bytes.
const MAX_REQUEST_HEAD_BYTES: usize = 16 * 1024;
/// How long a response write may make no progress (a client that stopped reading) before the
/// connection is closed; without it such a client holds its connection and response forever.
const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long shutdown waits for in-flight requests.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);
/// After a failed accept (EMFILE, ENFILE, ENOBUFS) the next waits this long, doubling up to
/// [`ACCEPT_BACKOFF_MAX`] while failures go on, as Go's net/http does.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(5);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Distinct accept, handshake and authentication failures remembered for logging each once.
const MAX_ACCEPT_CAUSES: usize = 32;
/// A client gets this long to finish its TLS handshake (slowloris guard, as for request heads).
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What clients may hold at once.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Scrape requests in flight; 0: only the connection cap limits them.
    pub max_requests: usize,
    /// Open connections; at least 2 (one is left for health checks).
    pub max_connections: usize,
}

pub struct Server {
    scraper: Arc<Scraper>,
    telemetry_path: String,
    /// One permit per scrape in flight, held by its response body.
    scrape_slots: Arc<Semaphore>,
    /// The collections running, by the collectors they run; scrapes of the same collectors
    /// arriving meanwhile join one.
    flights: Mutex<HashMap<Selection, Flight>>,
    /// One permit per collection running, held by its task.
    collection_slots: Arc<Semaphore>,
    connections: Arc<Connections>,
    /// Accept failures and refusals, each logged once per cause.
    accept_log: OncePerCause<String>,
    landing_page: String,
    /// `--web.config.file`, when given.
    web: Option<Arc<WebConfigFile>>,
    authenticator: Arc<Authenticator>,
    handshake_errors: AtomicU64,
    handshake_timeouts: AtomicU64,
    /// By [`Refusal`].
    auth_failures: [AtomicU64; Refusal::ALL.len()],
}

/// Why a request was refused, the `reason` label of the auth failures.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    Missing,
    Wrong,
    Throttled,
    ClientCertificate,
}

impl Refusal {
    const ALL: [Refusal; 4] = [
        Refusal::Missing,
        Refusal::Wrong,
        Refusal::Throttled,
        Refusal::ClientCertificate,
    ];

    /// The `reason` label.
    fn reason(self) -> &'static str {
        match self {
            Refusal::Missing => "missing",
            Refusal::Wrong => "wrong",
            Refusal::Throttled => "throttled",
            Refusal::ClientCertificate => "client_certificate",
        }
    }

    /// The log line's cause.
    fn cause(self) -> &'static str {
        match self {
            Refusal::Missing => "no or malformed basic-auth credentials",
            Refusal::Wrong => "wrong user or password",
            Refusal::Throttled => {
                "its source has a check pending or is backing off after wrong passwords"
            }
            Refusal::ClientCertificate => {
                "its client certificate is not accepted by the config in force"
            }
        }
    }
}

/// The next connection on any of `listeners`, asking them in turn from `turn` on, so that a
/// busy one cannot starve the others.
async fn accept_any(
    listeners: &[TcpListener],
    turn: usize,
) -> std::io::Result<(TcpStream, SocketAddr)> {
    std::future::poll_fn(|cx| {
        let (later, first) = listeners.split_at(turn % listeners.len().max(1));
        first
            .iter()
            .chain(later)
            .find_map(|listener| match listener.poll_accept(cx) {
                std::task::Poll::Ready(accepted) => Some(accepted),
                std::task::Poll::Pending => None,
            })
            .map_or(std::task::Poll::Pending, std::task::Poll::Ready)
    })
    .await
}

/// Who is at the other end of a connection, as the config checks each of its requests.
struct Peer {
    address: IpAddr,
    /// The client's certificate chain from the TLS handshake, if it sent one.
    certificates: Option<Vec<rustls_pki_types::CertificateDer<'static>>>,
    /// The config the certificate was last found good under (the handshake's at first).
    checked_under: Mutex<Option<Arc<WebConfig>>>,
}

impl Server {
    pub fn new(
        scraper: Arc<Scraper>,
        telemetry_path: String,
        limits: Limits,
        web: Option<Arc<WebConfigFile>>,
    ) -> Self {
        let landing_page = landing_page(&telemetry_path, scraper.collector_names());
        // The command line keeps max_requests below max_connections (at least 2).
        let scrape_slots = match limits.max_requests {
            0 => limits.max_connections - 1,
            n => n,
        };
        Server {
            scraper,
            telemetry_path,
            scrape_slots: Arc::new(Semaphore::new(scrape_slots)),
            flights: Mutex::default(),
            collection_slots: Arc::new(Semaphore::new(scrape_slots)),
            connections: Arc::new(Connections::new(limits.max_connections)),
            accept_log: OncePerCause::new(MAX_ACCEPT_CAUSES),
            landing_page,
            web,
            authenticator: Arc::default(),
            handshake_errors: AtomicU64::new(0),
            handshake_timeouts: AtomicU64::new(0),
            auth_failures: Default::default(),
        }
    }

    /// Serves every listener the same routes until `shutdown` completes, then lets in-flight
    /// requests finish.
    pub async fn serve(
        self: Arc<Self>,
        listeners: Vec<TcpListener>,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        let graceful = GracefulShutdown::new();
        tokio::pin!(shutdown);
        let mut backoff = Duration::ZERO;
        let mut turn = 0;
        loop {
            turn += 1;
            tokio::select! {
                accepted = accept_any(&listeners, turn) => {
                    let (stream, address) = match accepted {
                        Ok((stream, address)) => {
                            backoff = Duration::ZERO;
                            // A scrape's text is written a piece at a time: without this the
                            // last small segment waits for the client's delayed ACK (up to 40
                            // ms on Linux). Go's net/http, node_exporter's, sets it too. A
                            // socket that refuses it only answers slower.
                            let _ = stream.set_nodelay(true);
                            (stream, address.ip())
                        }
                        Err(err) => {
                            self.log_once(Level::Error, "accept failed; retrying with backoff", &err.to_string());
                            backoff = (backoff * 2).clamp(ACCEPT_BACKOFF_MIN, ACCEPT_BACKOFF_MAX);
                            tokio::select! {
                                _ = tokio::time::sleep(backoff) => continue,
                                _ = &mut shutdown => break,
                            }
                        }
                    };
                    let Some(place) = self.connections.admit() else {
                        self.log_once(
                            Level::Warn,
                            "connection refused: every connection has a request in progress",
                            "--web.max-connections",
                        );
                        continue;
                    };
                    // Read here, per connection: a rotated certificate is in the next handshake.
                    // Whether there is TLS at all was decided at start: no reload changes it.
                    let config = self.web.as_ref().map(|web| web.current());
                    let server = self.clone();
                    let watcher = graceful.watcher();
                    tokio::spawn(async move {
                        // Client errors (resets, malformed requests) are the client's business;
                        // a connection displaced by a newer one is closed by dropping it.
                        let stream = StallLimit::new(stream, WRITE_STALL_TIMEOUT);
                        let connection = place.connection.clone();
                        tokio::select! {
                            () = server.connection(stream, address, config, connection, watcher) => {}
                            () = place.connection.displaced.notified() => {}
                        }
                        drop(place);
                    });
                }
                _ = &mut shutdown => break,
            }
        }
        drop(listeners);
        tokio::select! {
            _ = graceful.shutdown() => {}
            _ = tokio::time::sleep(SHUTDOWN_GRACE) => {
                logging::log(Level::Warn, "shutdown grace period over; closing remaining connections", &[]);
            }
        }
    }

    fn log_once(&self, level: Level, msg: &str, cause: &str) {
        if self.accept_log.is_new(format!("{msg}: {cause}")) {
            logging::log(
                level,
                msg,
                &[("err", cause), ("note", "logged once per cause")],
            );
        }
    }

    /// Serves one connection: its TLS handshake, if any, then HTTP/1.1.
    async fn connection(
        self: Arc<Self>,
        stream: StallLimit<TcpStream>,
        address: IpAddr,
        config: Option<Arc<WebConfig>>,
        connection: Arc<Connection>,
        watcher: Watcher,
    ) {
        let mut peer = Peer {
            address,
            certificates: None,
            checked_under: Mutex::new(None),
        };
        let Some(tls) = config.as_ref().and_then(|config| config.tls.clone()) else {
            return self.http(stream, peer, connection, watcher).await;
        };
        let handshake = tokio_rustls::TlsAcceptor::from(tls).accept(stream);
        match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, handshake).await {
            Ok(Ok(stream)) => {
                peer.certificates = stream
                    .get_ref()
                    .1
                    .peer_certificates()
                    .map(|chain| chain.iter().map(|cert| cert.clone().into_owned()).collect());
                // The handshake checked the certificate against this config's client CA.
                peer.checked_under = Mutex::new(config);
                self.http(stream, peer, connection, watcher).await
            }
            Ok(Err(err)) => {
                self.handshake_errors.fetch_add(1, Ordering::Relaxed);
                self.log_once(Level::Warn, "TLS handshake failed", &err.to_string());
            }
            Err(_) => {
                self.handshake_timeouts.fetch_add(1, Ordering::Relaxed);
                self.log_once(
                    Level::Warn,
                    "TLS handshake failed",
                    "not finished within 10s",
                );
            }
        }
    }

    async fn http<S>(
        self: Arc<Self>,
        stream: S,
        peer: Peer,
        connection: Arc<Connection>,
        watcher: Watcher,
    ) where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let server = self.clone();
        let peer = Arc::new(peer);
        let service = service_fn(move |request| {
            let server = server.clone();
            let peer = peer.clone();
            let busy = Busy::new(connection.clone());
            async move {
                let response = server.handle(request, &peer).await;
                Ok::<_, Infallible>(response.map(|body| body.marking(busy)))
            }
        });
        let connection = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_READ_TIMEOUT)
            .max_buf_size(MAX_REQUEST_HEAD_BYTES)
            .serve_connection(TokioIo::new(stream), service);
        let _ = watcher.watch(connection).await;
    }

    /// Every request: the web config's authentication and headers around the route.
    async fn handle(self: &Arc<Self>, request: Request<Incoming>, peer: &Peer) -> Response<Body> {
        let Some(web) = self.web.as_ref().map(|web| web.current()) else {
            return self.route(request).await;
        };
        let refused = if !client_certificate_holds(&web, peer) {
            Some(Refusal::ClientCertificate)
        } else if web.users.is_empty() {
            None
        } else {
            let authorization = header(&request, AUTHORIZATION);
            let verdict = (self.authenticator)
                .check(&web.users, peer.address, authorization)
                .await;
            match verdict {
                Verdict::Accepted => None,
                Verdict::Missing => Some(Refusal::Missing),
                Verdict::Wrong => Some(Refusal::Wrong),
                Verdict::Throttled => Some(Refusal::Throttled),
            }
        };
        let mut response = match refused {
            None => self.route(request).await,
            Some(refusal) => self.refuse(refusal),
        };
        for (name, value) in &web.headers {
            response.headers_mut().insert(name.clone(), value.clone());
        }
        response
    }

    /// The answer to a request the config does not let in, counted and logged by reason.
    fn refuse(&self, refusal: Refusal) -> Response<Body> {
        self.auth_failures[refusal as usize].fetch_add(1, Ordering::Relaxed);
        self.log_once(Level::Warn, "request refused", refusal.cause());
        if let Refusal::ClientCertificate = refusal {
            // Only a new handshake can present another certificate.
            let mut response = plain(StatusCode::FORBIDDEN, "Forbidden\n");
            response
                .headers_mut()
                .insert(CONNECTION, HeaderValue::from_static("close"));
            return response;
        }
        let mut response = plain(StatusCode::UNAUTHORIZED, "Unauthorized\n");
        response
            .headers_mut()
            .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Basic"));
        response
    }

    async fn route(self: &Arc<Self>, request: Request<Incoming>) -> Response<Body> {
        let path = request.uri().path();
        if request.method() != Method::GET && request.method() != Method::HEAD {
            return plain(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed\n");
        }
        if path == self.telemetry_path {
            return self.metrics(&request).await;
        }
        match path {
            "/" => {
                let mut response = plain(StatusCode::OK, self.landing_page.clone());
                response.headers_mut().insert(
                    CONTENT_TYPE,
                    HeaderValue::from_static("text/html; charset=utf-8"),
                );
                response
            }
            "/-/healthy" => plain(StatusCode::OK, "Healthy\n"),
            "/-/ready" => plain(StatusCode::OK, "Ready\n"),
            _ => plain(StatusCode::NOT_FOUND, "Not Found\n"),
        }
    }
}

/// Whether the connection's client certificate, checked at its handshake, is still good under
/// `web`: a kept-alive connection must not outlive a revoked client CA.
fn client_certificate_holds(web: &Arc<WebConfig>, peer: &Peer) -> bool {
    let mut checked_under = lock(&peer.checked_under);
    if checked_under
        .as_ref()
        .is_some_and(|checked| Arc::ptr_eq(checked, web))
    {
        return true;
    }
    let holds = match (&web.client_verifier, &peer.certificates) {
        (None, _) => true,
        (Some(verifier), None) => !verifier.client_auth_mandatory(),
        (Some(verifier), Some(chain)) => chain.split_first().is_some_and(|(end, intermediates)| {
            let now = rustls_pki_types::UnixTime::now();
            verifier.verify_client_cert(end, intermediates, now).is_ok()
        }),
    };
    if holds {
        *checked_under = Some(web.clone());
    }
    holds
}

fn header(request: &Request<Incoming>, name: hyper::header::HeaderName) -> &str {
    request
        .headers()
        .get(name)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("")
}

fn plain(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let mut response = Response::new(Body::new(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

fn landing_page<'a>(telemetry_path: &str, collectors: impl Iterator<Item = &'a str>) -> String {
    let items: String = collectors.map(|name| format!("<li>{name}</li>")).collect();
    format!(
        "<!DOCTYPE html>\n<html><head><title>hpcnode_exporter</title></head><body>\n\
         <h1>hpcnode_exporter {}</h1>\n<p><a href=\"{telemetry_path}\">Metrics</a></p>\n\
         <h2>Enabled collectors</h2>\n<ul>{items}</ul>\n</body></html>\n",
        env!("CARGO_PKG_VERSION")
    )
}
