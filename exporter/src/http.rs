//! The HTTP server: the only module that knows about HTTP.
//!
//! `/metrics` (or `--web.telemetry-path`) in Prometheus text 0.0.4, or OpenMetrics 1.0 when the
//! `Accept` header prefers it, gzip when asked; a landing page; `/-/healthy` and `/-/ready`.

use std::convert::Infallible;
use std::future::Future;
use std::io::Write as _;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ACCEPT, ACCEPT_ENCODING, CONTENT_ENCODING, CONTENT_TYPE, VARY};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::logging::{self, Level};
use crate::metrics::{encode, Format};
use crate::scrape::Scraper;

/// A client gets this long to send its request head (slowloris guard).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Request heads larger than this are refused; a scrape request is a few hundred bytes.
const MAX_REQUEST_HEAD_BYTES: usize = 16 * 1024;
/// How long a response write may make no progress (a client that stopped reading) before the
/// connection is closed; without it such a client holds its connection and response forever.
const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long shutdown waits for in-flight requests.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

pub struct Server {
    scraper: Arc<Scraper>,
    telemetry_path: String,
    /// `None`: no limit on concurrent scrapes.
    scrape_slots: Option<Semaphore>,
    landing_page: String,
}

impl Server {
    pub fn new(scraper: Arc<Scraper>, telemetry_path: String, max_requests: usize) -> Self {
        let landing_page = landing_page(&telemetry_path, scraper.collector_names());
        Server {
            scraper,
            telemetry_path,
            scrape_slots: (max_requests > 0).then(|| Semaphore::new(max_requests)),
            landing_page,
        }
    }

    /// Serves until `shutdown` completes, then lets in-flight requests finish.
    pub async fn serve(
        self: Arc<Self>,
        listener: TcpListener,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        let graceful = GracefulShutdown::new();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let (stream, _) = match accepted {
                        Ok(conn) => conn,
                        Err(err) => {
                            // EMFILE and friends: back off instead of spinning.
                            logging::log(Level::Error, "accept failed", &[("err", &err.to_string())]);
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    };
                    let server = self.clone();
                    let service = service_fn(move |request| {
                        let server = server.clone();
                        async move { Ok::<_, Infallible>(server.handle(request).await) }
                    });
                    let connection = http1::Builder::new()
                        .timer(TokioTimer::new())
                        .header_read_timeout(HEADER_READ_TIMEOUT)
                        .max_buf_size(MAX_REQUEST_HEAD_BYTES)
                        .serve_connection(
                            TokioIo::new(StallLimit::new(stream, WRITE_STALL_TIMEOUT)),
                            service,
                        );
                    let connection = graceful.watch(connection);
                    tokio::spawn(async move {
                        // Client errors (resets, malformed requests) are the client's business.
                        let _ = connection.await;
                    });
                }
                _ = &mut shutdown => break,
            }
        }
        drop(listener);
        tokio::select! {
            _ = graceful.shutdown() => {}
            _ = tokio::time::sleep(SHUTDOWN_GRACE) => {
                logging::log(Level::Warn, "shutdown grace period over; closing remaining connections", &[]);
            }
        }
    }

    async fn handle(&self, request: Request<Incoming>) -> Response<Full<Bytes>> {
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

    async fn metrics(&self, request: &Request<Incoming>) -> Response<Full<Bytes>> {
        let _permit = match &self.scrape_slots {
            Some(slots) => match slots.try_acquire() {
                Ok(permit) => Some(permit),
                Err(_) => {
                    return plain(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "Too many concurrent scrapes (--web.max-requests)\n",
                    )
                }
            },
            None => None,
        };
        let format = negotiate_format(header(request, ACCEPT));
        let body = match encode(self.scraper.scrape().await, format) {
            Ok(body) => body,
            Err(_) => {
                logging::log(Level::Error, "encoding metrics failed", &[]);
                return plain(StatusCode::INTERNAL_SERVER_ERROR, "encoding failed\n");
            }
        };
        let gzip = accepts_gzip(header(request, ACCEPT_ENCODING));
        let mut response = if gzip {
            let mut encoder = flate2::write::GzEncoder::new(
                Vec::with_capacity(body.len() / 4),
                flate2::Compression::fast(),
            );
            match encoder
                .write_all(body.as_bytes())
                .and_then(|_| encoder.finish())
            {
                Ok(compressed) => {
                    let mut response = Response::new(Full::new(Bytes::from(compressed)));
                    response
                        .headers_mut()
                        .insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
                    response
                }
                Err(_) => Response::new(Full::new(Bytes::from(body))),
            }
        } else {
            Response::new(Full::new(Bytes::from(body)))
        };
        let headers = response.headers_mut();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static(format.content_type()),
        );
        headers.insert(VARY, HeaderValue::from_static("Accept, Accept-Encoding"));
        response
    }
}

/// A stream whose writes fail with `TimedOut` once they have made no progress for `limit`.
/// Reads pass through: hyper bounds the wait for a request head itself.
struct StallLimit<S> {
    inner: S,
    limit: Duration,
    stalled_since: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S> StallLimit<S> {
    fn new(inner: S, limit: Duration) -> Self {
        StallLimit {
            inner,
            limit,
            stalled_since: None,
        }
    }

    /// Passes a ready result on (progress: the stall clock stops); a pending one waits for the
    /// stall clock, which starts at the first pending write.
    fn bound<T>(
        &mut self,
        cx: &mut Context<'_>,
        result: Poll<std::io::Result<T>>,
    ) -> Poll<std::io::Result<T>> {
        if result.is_ready() {
            self.stalled_since = None;
            return result;
        }
        let limit = self.limit;
        let stall = self
            .stalled_since
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match stall.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "client stopped reading the response",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for StallLimit<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for StallLimit<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.bound(cx, result)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.bound(cx, result)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_flush(cx);
        this.bound(cx, result)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.bound(cx, result)
    }
}

fn header(request: &Request<Incoming>, name: hyper::header::HeaderName) -> &str {
    request
        .headers()
        .get(name)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("")
}

fn plain(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// Media ranges of an `Accept`-style header with their quality (`q`, default 1).
fn media_ranges(header: &str) -> impl Iterator<Item = (&str, f32)> {
    header.split(',').filter_map(|range| {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().filter(|m| !m.is_empty())?;
        let quality = parts
            .filter_map(|p| p.strip_prefix("q="))
            .find_map(|q| q.parse::<f32>().ok())
            .unwrap_or(1.0);
        Some((media, quality))
    })
}

/// OpenMetrics when the client ranks it above the text format (Prometheus does), else 0.0.4.
pub fn negotiate_format(accept: &str) -> Format {
    let mut openmetrics = 0.0f32;
    let mut text = 0.0f32;
    for (media, quality) in media_ranges(accept) {
        match media.to_ascii_lowercase().as_str() {
            "application/openmetrics-text" => openmetrics = openmetrics.max(quality),
            "text/plain" | "text/*" | "*/*" => text = text.max(quality),
            _ => {}
        }
    }
    if openmetrics > 0.0 && openmetrics > text {
        Format::OpenMetrics
    } else {
        Format::PrometheusText
    }
}

pub fn accepts_gzip(accept_encoding: &str) -> bool {
    media_ranges(accept_encoding)
        .any(|(coding, quality)| coding.eq_ignore_ascii_case("gzip") && quality > 0.0)
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

/// Binds the listen address; `:port` means every interface (IPv6 and IPv4 where available).
pub async fn bind(host: Option<&str>, port: u16) -> std::io::Result<TcpListener> {
    match host {
        Some(host) => TcpListener::bind((host, port)).await,
        None => match TcpListener::bind(SocketAddr::from(([0u16; 8], port))).await {
            Ok(listener) => Ok(listener),
            Err(_) => TcpListener::bind(SocketAddr::from(([0u8; 4], port))).await,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_scrape_accept_header_gets_openmetrics() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(negotiate_format(prometheus), Format::OpenMetrics);
    }

    #[test]
    fn default_and_text_preference_get_text() {
        assert_eq!(negotiate_format(""), Format::PrometheusText);
        assert_eq!(negotiate_format("*/*"), Format::PrometheusText);
        assert_eq!(
            negotiate_format("text/plain;version=0.0.4,application/openmetrics-text;q=0.5"),
            Format::PrometheusText
        );
        assert_eq!(
            negotiate_format("application/openmetrics-text;q=0"),
            Format::PrometheusText
        );
    }

    /// Writes 64 KiB chunks to `stream` until a write fails or `within` passes.
    async fn write_until_error(
        stream: &mut StallLimit<tokio::net::TcpStream>,
        within: Duration,
    ) -> Option<std::io::Error> {
        let chunk = vec![0u8; 64 * 1024];
        let give_up = tokio::time::Instant::now() + within;
        loop {
            let write = std::future::poll_fn(|cx| Pin::new(&mut *stream).poll_write(cx, &chunk));
            match tokio::time::timeout_at(give_up, write).await {
                Ok(Ok(_)) => {}
                Ok(Err(err)) => return Some(err),
                Err(_) => return None,
            }
        }
    }

    #[tokio::test]
    async fn a_client_that_stops_reading_times_out_one_that_reads_does_not() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();

        // Never reads: the kernel's buffers fill, then the write stalls past the limit.
        let _silent = tokio::net::TcpStream::connect(address).await.unwrap();
        let (server_side, _) = listener.accept().await.unwrap();
        let mut stream = StallLimit::new(server_side, Duration::from_millis(200));
        let err = write_until_error(&mut stream, Duration::from_secs(20))
            .await
            .expect("a stalled write never failed");
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);

        // Reads steadily, if slowly: writes keep making progress and never time out.
        let reader = std::net::TcpStream::connect(address).unwrap();
        let (server_side, _) = listener.accept().await.unwrap();
        let reading = std::thread::spawn(move || {
            use std::io::Read as _;
            let mut reader = reader;
            let mut buf = vec![0u8; 256 * 1024];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        // A limit far above the reader's pace: on a loaded machine its thread can be off the
        // CPU for a few hundred milliseconds without having stopped reading.
        let mut stream = StallLimit::new(server_side, Duration::from_secs(5));
        let err = write_until_error(&mut stream, Duration::from_secs(1)).await;
        assert!(err.is_none(), "{err:?}");
        drop(stream);
        reading.join().unwrap();
    }

    #[test]
    fn gzip_negotiation() {
        assert!(accepts_gzip("gzip"));
        assert!(accepts_gzip("deflate, GZIP;q=0.5"));
        assert!(!accepts_gzip("gzip;q=0"));
        assert!(!accepts_gzip("br"));
        assert!(!accepts_gzip(""));
    }
}
