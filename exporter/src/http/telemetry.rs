//! The telemetry endpoint: a scrape's collectors (`collect[]`, `exclude[]`), its slot, the
//! collection it joins or starts (concurrent scrapes of the same collectors share one), its
//! response encoded a piece at a time, and the server's own counters.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::header::{HeaderValue, ACCEPT, ACCEPT_ENCODING, CONTENT_ENCODING, CONTENT_TYPE, VARY};
use hyper::{Request, Response, StatusCode};
use tokio::sync::watch;

use super::body::Body;
use super::negotiate::{accepts_gzip, negotiate_format};
use super::query;
use super::{header, plain, Refusal, Server};
use crate::metrics::{Desc, Encodable, Format, LabelValue, Samples, Value};
use crate::scrape::Selection;
use crate::sync::lock;
use crate::web_config::WebConfigFile;

const WEB_CONFIG_RELOAD_FAILURES: Desc = Desc::counter(
    "hpcnode_web_config_reload_failures",
    "Times a change of --web.config.file or a file it names was not taken, by reason; the last good config stays in force.",
    None,
);
const TLS_HANDSHAKE_FAILURES: Desc = Desc::counter(
    "hpcnode_web_tls_handshake_failures",
    "TLS handshakes that failed (error) or did not finish in time (timeout), by reason.",
    None,
);
const AUTH_FAILURES: Desc = Desc::counter(
    "hpcnode_web_auth_failures",
    "Requests refused: no, malformed or wrong basic-auth credentials, a source throttled, or a client certificate the config in force no longer accepts; by reason.",
    None,
);

/// The server's own metrics, emitted when `--web.config.file` is given (for the METRICS.md
/// check).
pub const WEB_METRICS: [Desc; 3] = [
    WEB_CONFIG_RELOAD_FAILURES,
    TLS_HANDSHAKE_FAILURES,
    AUTH_FAILURES,
];

/// What a scrape's response is: its format, and whether it is gzipped.
#[derive(Debug, Clone, Copy)]
struct Variant {
    format: Format,
    gzip: bool,
}

/// A running collection's result as its waiters see it: `None` until it is done. Its sender
/// dropped without a result: the collection's task panicked.
pub(super) type Flight = watch::Receiver<Option<Arc<Encodable>>>;

impl Server {
    pub(super) async fn metrics(self: &Arc<Self>, request: &Request<Incoming>) -> Response<Body> {
        let filters = query::filters(request.uri().query().unwrap_or(""));
        let selection = match self.scraper.select(&filters.collect, &filters.exclude) {
            Ok(selection) => selection,
            Err(err) => return plain(StatusCode::BAD_REQUEST, format!("{err}\n")),
        };
        let Ok(slot) = self.scrape_slots.clone().try_acquire_owned() else {
            return too_many_scrapes();
        };
        let variant = Variant {
            format: negotiate_format(header(request, ACCEPT)),
            gzip: accepts_gzip(header(request, ACCEPT_ENCODING)),
        };
        let Some(mut flight) = self.join_or_start(selection) else {
            return too_many_scrapes();
        };
        // An error: the collection's task panicked before it had samples.
        let collected = match flight.wait_for(Option::is_some).await {
            Ok(done) => done.clone(),
            Err(_) => None,
        };
        let Some(collected) = collected else {
            return plain(StatusCode::INTERNAL_SERVER_ERROR, "collection failed\n");
        };
        let pieces = collected.pieces(variant.format);
        let mut response = Response::new(Body::encoding(pieces, variant.gzip).holding(slot));
        let headers = response.headers_mut();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static(variant.format.content_type()),
        );
        if variant.gzip {
            headers.insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        }
        headers.insert(VARY, HeaderValue::from_static("Accept, Accept-Encoding"));
        response
    }

    /// The running collection of `selection`, or a new one; `None` when as many collections
    /// run as scrapes may (clients that went away left them running). It runs as a task of
    /// its own, so a client that goes away takes nothing from those waiting with it.
    fn join_or_start(self: &Arc<Self>, selection: Selection) -> Option<Flight> {
        let mut running = lock(&self.flights);
        if let Some(flight) = running.get(&selection) {
            return Some(flight.clone());
        }
        let collecting = self.collection_slots.clone().try_acquire_owned().ok()?;
        let (done, flight) = watch::channel(None);
        running.insert(selection.clone(), flight.clone());
        let landing = Landing {
            server: self.clone(),
            selection,
        };
        tokio::spawn(async move {
            let collected = landing.server.collect(&landing.selection).await;
            // Scrapes from now on start a collection of their own.
            drop(landing);
            drop(collecting);
            let _ = done.send(Some(Arc::new(collected)));
        });
        Some(flight)
    }

    /// One collection, its samples grouped for the encoder.
    async fn collect(&self, selection: &Selection) -> Encodable {
        let mut samples = self.scraper.scrape(selection).await;
        if let Some(web) = &self.web {
            samples.append(self.web_samples(web));
        }
        Encodable::new(samples)
    }

    fn web_samples(&self, web: &WebConfigFile) -> Samples {
        let mut samples = Samples::default();
        for (reason, count) in web.reload_failures() {
            samples.push(
                &WEB_CONFIG_RELOAD_FAILURES,
                vec![("reason", LabelValue::Static(reason))],
                Value::Int(count),
            );
        }
        for (reason, count) in [
            ("error", &self.handshake_errors),
            ("timeout", &self.handshake_timeouts),
        ] {
            samples.push(
                &TLS_HANDSHAKE_FAILURES,
                vec![("reason", LabelValue::Static(reason))],
                Value::Int(count.load(Ordering::Relaxed)),
            );
        }
        for (refusal, count) in Refusal::ALL.iter().zip(&self.auth_failures) {
            samples.push(
                &AUTH_FAILURES,
                vec![("reason", LabelValue::Static(refusal.reason()))],
                Value::Int(count.load(Ordering::Relaxed)),
            );
        }
        samples
    }
}

fn too_many_scrapes() -> Response<Body> {
    plain(
        StatusCode::SERVICE_UNAVAILABLE,
        "Too many concurrent scrapes (--web.max-requests)\n",
    )
}

/// Takes a finished (or panicked) collection out of the running ones.
struct Landing {
    server: Arc<Server>,
    selection: Selection,
}

impl Drop for Landing {
    fn drop(&mut self) {
        lock(&self.server.flights).remove(&self.selection);
    }
}
