//! Response bodies, handed to hyper a piece at a time, and the write-stall limit on the stream
//! under them.

use std::future::Future;
use std::io::Write as _;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::OwnedSemaphorePermit;

use super::limits::Busy;
use crate::logging::{self, Level};
use crate::metrics::Pieces;

/// Bodies go to hyper in pieces of this size: it asks for the next once the last is written.
const BODY_CHUNK: usize = 64 * 1024;
/// A gzipped scrape goes to hyper once this much is compressed.
const GZIP_CHUNK: usize = 16 * 1024;

/// A response body handed to hyper a chunk at a time: hyper asks for the next chunk only once
/// it has written most of the last, so the body, and what it holds (a scrape's slot, its
/// connection marked busy), is dropped only when the response is written or its connection is
/// gone.
pub(super) struct Body {
    data: BodyData,
    _slot: Option<OwnedSemaphorePermit>,
    _busy: Option<Busy>,
}

enum BodyData {
    Whole(Bytes),
    /// A scrape's text, encoded a piece at a time as hyper asks for it, and compressed when
    /// `gzip` is there.
    Encoding {
        pieces: Pieces,
        gzip: Option<flate2::write::GzEncoder<Vec<u8>>>,
    },
}

impl Body {
    pub(super) fn new(data: impl Into<Bytes>) -> Body {
        Body {
            data: BodyData::Whole(data.into()),
            _slot: None,
            _busy: None,
        }
    }

    pub(super) fn encoding(pieces: Pieces, gzip: bool) -> Body {
        let gzip = gzip.then(|| {
            let out = Vec::with_capacity(GZIP_CHUNK * 2);
            flate2::write::GzEncoder::new(out, flate2::Compression::fast())
        });
        Body {
            data: BodyData::Encoding { pieces, gzip },
            _slot: None,
            _busy: None,
        }
    }

    pub(super) fn holding(self, slot: OwnedSemaphorePermit) -> Body {
        Body {
            _slot: Some(slot),
            ..self
        }
    }

    pub(super) fn marking(self, busy: Busy) -> Body {
        Body {
            _busy: Some(busy),
            ..self
        }
    }
}

/// The next chunk of an encoding body: a piece of text as it comes, or once compressed about
/// [`GZIP_CHUNK`] of gzip; `None` at the end.
fn next_chunk(
    pieces: &mut Pieces,
    gzip: &mut Option<flate2::write::GzEncoder<Vec<u8>>>,
) -> std::io::Result<Option<Bytes>> {
    loop {
        let Some(piece) = pieces.next() else {
            let Some(encoder) = gzip.take() else {
                return Ok(None);
            };
            let rest = encoder.finish()?;
            return Ok((!rest.is_empty()).then(|| Bytes::from(rest)));
        };
        let piece = piece.map_err(|_| std::io::Error::other("encoding metrics failed"))?;
        let Some(encoder) = gzip else {
            return Ok(Some(Bytes::from(piece)));
        };
        encoder.write_all(piece.as_bytes())?;
        // About four pieces of text: the runtime's one thread is not held much longer than
        // for a plain chunk.
        if encoder.get_ref().len() >= GZIP_CHUNK {
            let compressed =
                std::mem::replace(encoder.get_mut(), Vec::with_capacity(GZIP_CHUNK * 2));
            return Ok(Some(Bytes::from(compressed)));
        }
    }
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let chunk = match &mut self.get_mut().data {
            BodyData::Whole(data) if data.is_empty() => None,
            BodyData::Whole(data) => Some(data.split_to(data.len().min(BODY_CHUNK))),
            BodyData::Encoding { pieces, gzip } => match next_chunk(pieces, gzip) {
                Ok(chunk) => chunk,
                Err(err) => {
                    // hyper closes the connection: over HTTP/1.1 (chunked) the client sees a
                    // body cut short. An HTTP/1.0 body ends with its connection, so such a
                    // client cannot tell; nothing a string is written into fails, so this is
                    // the encoder refusing what it was given (see `Pieces`).
                    logging::log(
                        Level::Error,
                        "writing metrics failed",
                        &[("err", &err.to_string())],
                    );
                    return Poll::Ready(Some(Err(err)));
                }
            },
        };
        Poll::Ready(chunk.map(|chunk| Ok(Frame::data(chunk))))
    }

    fn size_hint(&self) -> SizeHint {
        match &self.data {
            BodyData::Whole(data) => SizeHint::with_exact(data.len() as u64),
            BodyData::Encoding { .. } => SizeHint::default(),
        }
    }
}

/// A stream whose writes fail with `TimedOut` once they have made no progress for `limit`.
/// Reads pass through: hyper bounds the wait for a request head itself.
pub(super) struct StallLimit<S> {
    inner: S,
    limit: Duration,
    stalled_since: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S> StallLimit<S> {
    pub(super) fn new(inner: S, limit: Duration) -> Self {
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

#[cfg(test)]
mod tests;
