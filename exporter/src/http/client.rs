//! The one HTTP client: `check --from` reads a running exporter's page with it. One GET over a
//! connection of its own, plain or TLS (the caller's rustls settings), with basic auth when
//! given; it asks for the text format (`Accept`, no `Accept-Encoding`: never gzip), follows no
//! redirect, takes only a 200, and reads at most the body size it is given. The whole exchange,
//! from the name look-up to the body's last byte, is under one deadline.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, LengthLimitError, Limited};
use hyper::header::{HeaderValue, ACCEPT, AUTHORIZATION, CONNECTION, HOST, USER_AGENT};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// What the exporter's `/metrics` answers in unless asked for OpenMetrics.
const TEXT_FORMAT: &str = "text/plain;version=0.0.4";

/// One GET.
pub struct Get<'a> {
    /// A host name or an IP address (an IPv6 one without brackets), and a port.
    pub host: &'a str,
    pub port: u16,
    /// The request's path and query.
    pub target: &'a str,
    /// TLS, and the name the server's certificate must be valid for (also sent as SNI).
    pub tls: Option<(Arc<ClientConfig>, ServerName<'static>)>,
    /// User name and password.
    pub basic_auth: Option<(&'a str, &'a str)>,
    /// The largest body taken.
    pub max_body: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("connecting: {0}")]
    Connect(std::io::Error),
    #[error("TLS handshake: {0}")]
    Tls(std::io::Error),
    #[error("the request: {0}")]
    Request(#[from] hyper::http::Error),
    #[error("HTTP: {0}")]
    Http(#[from] hyper::Error),
    #[error("HTTP status {0}")]
    Status(StatusCode),
    #[error("the body: {0}")]
    Body(String),
    #[error("a body larger than {0} bytes")]
    TooLarge(usize),
    #[error("no whole answer within {0:?}")]
    Timeout(Duration),
}

/// The body of a 200 answer to `get`, all of it within `timeout`.
pub async fn get(get: Get<'_>, timeout: Duration) -> Result<Bytes, ClientError> {
    tokio::time::timeout(timeout, fetch(get))
        .await
        .map_err(|_| ClientError::Timeout(timeout))?
}

async fn fetch(get: Get<'_>) -> Result<Bytes, ClientError> {
    let request = request(&get)?;
    let tcp = TcpStream::connect((get.host, get.port))
        .await
        .map_err(ClientError::Connect)?;
    match get.tls {
        None => exchange(tcp, request, get.max_body).await,
        Some((config, name)) => {
            let tls = tokio_rustls::TlsConnector::from(config)
                .connect(name, tcp)
                .await
                .map_err(ClientError::Tls)?;
            exchange(tls, request, get.max_body).await
        }
    }
}

fn request(get: &Get<'_>) -> Result<Request<Empty<Bytes>>, ClientError> {
    let host = match get.host.contains(':') {
        true => format!("[{}]:{}", get.host, get.port),
        false => format!("{}:{}", get.host, get.port),
    };
    let mut request = Request::get(get.target)
        .header(HOST, host)
        .header(ACCEPT, TEXT_FORMAT)
        .header(
            USER_AGENT,
            concat!("hpcnode_exporter/", env!("CARGO_PKG_VERSION")),
        )
        .header(CONNECTION, "close");
    if let Some((user, password)) = get.basic_auth {
        let credentials =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        let mut value = HeaderValue::try_from(format!("Basic {credentials}"))
            .map_err(hyper::http::Error::from)?;
        value.set_sensitive(true);
        request = request.header(AUTHORIZATION, value);
    }
    Ok(request.body(Empty::new())?)
}

async fn exchange<S>(
    stream: S,
    request: Request<Empty<Bytes>>,
    max_body: usize,
) -> Result<Bytes, ClientError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    // Driven beside the request on the one async thread; its end (or error) ends the exchange.
    let connection = tokio::spawn(connection);
    let response = sender.send_request(request).await?;
    if response.status() != StatusCode::OK {
        connection.abort();
        return Err(ClientError::Status(response.status()));
    }
    let body = Limited::new(response.into_body(), max_body).collect().await;
    connection.abort();
    match body {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(err) if err.is::<LengthLimitError>() => Err(ClientError::TooLarge(max_body)),
        Err(err) => Err(ClientError::Body(err.to_string())),
    }
}

#[cfg(test)]
mod tests;
