//! h2c (`http.version = "h2c"`, HTTP/2 by prior knowledge) on the h2 crate itself.
//!
//! reqwest reaches HTTP/2 through hyper-util's pool and hyper's dispatch: a request
//! is handed to the connection's task through a channel, a task is spawned per
//! request to await its answer, and the answer comes back through another channel.
//! Here the caller's own task opens the stream, sends the body and awaits the answer;
//! the connection's task only reads and writes frames. That halves the client's CPU a
//! request (`bench/transports` shows what it does for jetrelay as a whole).
//!
//! One connection per origin (host and port; the socket when `http.unix_socket` is
//! set), made on first use and made again once it has closed (the app restarted, a
//! GOAWAY); every request is a stream on it, up to the app's
//! `SETTINGS_MAX_CONCURRENT_STREAMS`. A request that finds every connection's streams
//! in use opens another connection, as Envoy and gRPC's clients do, so that the app's
//! stream limit does not become jetrelay's concurrency: the connections are at most
//! the requests in flight over the limit, and one the app closes is not made again
//! until it is needed. `http.max_concurrent_streams` lowers that limit, to spread the
//! requests over a few connections (each side handles a connection's frames in
//! turn). A request that finds its connection closed before anything was sent is sent
//! on a new one, once. The settings are hyper's client's: answers get windows of 2 MiB
//! a stream and 5 MiB a connection, their headers up to 16 KiB; no server push.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use h2::RecvStream;
use h2::client::SendRequest;
use reqwest::header::{
    CONNECTION, CONTENT_LENGTH, HeaderMap, HeaderName, HeaderValue, TE, TRANSFER_ENCODING, UPGRADE,
};

use crate::http::broke::Broke;
use crate::http::dial::{Dialed, OriginKey, dial, origin};

/// What the app may send of one answer before jetrelay reads it.
const STREAM_WINDOW: u32 = 2 * 1024 * 1024;
/// What the app may send of all answers before jetrelay reads them.
const CONNECTION_WINDOW: u32 = 5 * 1024 * 1024;
/// The largest header block an answer may have.
const MAX_ANSWER_HEADERS: u32 = 16 * 1024;
/// Streams opened before the app's SETTINGS say how many it takes.
const FIRST_STREAMS: usize = 100;
/// The most of a request's body queued for the connection beyond its window.
const SEND_BUFFER: usize = 1024 * 1024;

/// The h2c client of one [`crate::http::app::AppClient`]: a connection per origin.
#[derive(Debug)]
pub(crate) struct H2c {
    /// `http.unix_socket`: every origin is reached through it.
    socket: Option<Arc<Path>>,
    /// `http.max_concurrent_streams`: the most streams jetrelay opens on one
    /// connection, below the app's own limit (`usize::MAX`: that alone).
    streams_cap: usize,
    origins: Mutex<HashMap<OriginKey, Arc<OriginSlot>>>,
}

/// One origin's connections, while they are open.
#[derive(Debug, Default)]
struct OriginSlot {
    live: Mutex<Vec<OpenConnection>>,
    /// Held while a connection is made, so that the requests waiting for it make one.
    making: tokio::sync::Mutex<()>,
}

/// An open connection: a handle that opens streams, whether its task has ended, and
/// its streams in use.
#[derive(Debug, Clone)]
struct OpenConnection {
    tx: SendRequest<Bytes>,
    closed: Arc<AtomicBool>,
    streams: Arc<AtomicUsize>,
}

/// A stream counted as in use on its connection until it is dropped.
#[derive(Debug)]
struct InUse(Arc<AtomicUsize>);

impl Drop for InUse {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// An answer's head, and its body still to be read.
pub(crate) struct H2Answer {
    pub(crate) head: ::http::response::Parts,
    body: RecvStream,
    /// Its stream, counted on the connection until the answer is dropped.
    _stream: InUse,
}

impl H2Answer {
    /// The body's next chunk (its window given back to the app); `None` at its end.
    pub(crate) async fn chunk(&mut self) -> Result<Option<Bytes>, Broke> {
        match self.body.data().await {
            None => Ok(None),
            Some(Ok(chunk)) => {
                // Fails only when the stream is gone, which the next read says.
                self.body.flow_control().release_capacity(chunk.len()).ok();
                Ok(Some(chunk))
            }
            Some(Err(e)) => Err(broke(&e)),
        }
    }
}

impl H2c {
    /// A client that connects over `socket` when set, to the URL's host otherwise,
    /// with at most `max_concurrent_streams` requests on a connection (0: as many as
    /// the app takes).
    pub(crate) fn new(socket: Option<Arc<Path>>, max_concurrent_streams: u32) -> H2c {
        let streams_cap = match max_concurrent_streams {
            0 => usize::MAX,
            n => usize::try_from(n).unwrap_or(usize::MAX),
        };
        H2c {
            socket,
            streams_cap,
            origins: Mutex::new(HashMap::new()),
        }
    }

    /// Sends `method` to `url` with `headers` and `body` (`None`: no body), and
    /// returns the answer's head (the caller bounds it in time).
    ///
    /// # Errors
    /// [`Broke`]: no connection (`connect`), or the request or its connection broke.
    pub(crate) async fn exchange(
        &self,
        method: reqwest::Method,
        url: &reqwest::Url,
        headers: HeaderMap,
        body: Option<Bytes>,
    ) -> Result<H2Answer, Broke> {
        let request = request(method, url, headers, body.as_ref().map(Bytes::len))?;
        let origin = self.origin(url);
        let mut fresh = false;
        let (mut tx, in_use) = loop {
            let (live, in_use) = origin
                .stream(self.socket.as_deref(), url, self.streams_cap, &mut fresh)
                .await?;
            match live.tx.clone().ready().await {
                Ok(tx) => break (tx, in_use),
                // It closed since it was last used: nothing was sent, so a new one
                // takes the request.
                Err(_) if !fresh => live.closed.store(true, Ordering::Release),
                Err(e) => return Err(broke(&e)),
            }
        };
        let body = body.filter(|b| !b.is_empty());
        let (answer, mut stream) = tx
            .send_request(request, body.is_none())
            .map_err(|e| broke(&e))?;
        if let Some(body) = body {
            stream.send_data(body, true).map_err(|e| Broke {
                body: true,
                ..broke(&e)
            })?;
        }
        let (head, body) = answer.await.map_err(|e| broke(&e))?.into_parts();
        Ok(H2Answer {
            head,
            body,
            _stream: in_use,
        })
    }

    /// The origin `url` is sent to.
    fn origin(&self, url: &reqwest::Url) -> Arc<OriginSlot> {
        let key = origin(self.socket.as_deref(), url);
        let mut origins = self.origins.lock().unwrap_or_else(PoisonError::into_inner);
        origins.entry(key).or_default().clone()
    }
}

impl OriginSlot {
    /// A stream on an open connection with one free, or on a new connection (`fresh`
    /// then set).
    async fn stream(
        &self,
        socket: Option<&Path>,
        url: &reqwest::Url,
        cap: usize,
        fresh: &mut bool,
    ) -> Result<(OpenConnection, InUse), Broke> {
        if let Some(found) = self.free(cap) {
            return Ok(found);
        }
        let _making = self.making.lock().await;
        if let Some(found) = self.free(cap) {
            return Ok(found);
        }
        let live = start(dial(socket, url).await?).await?;
        *fresh = true;
        let stream = live.take_stream();
        let mut open = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        open.push(live.clone());
        Ok((live, stream))
    }

    /// A stream on the first open connection with one free, below the app's limit
    /// and `cap` (the closed ones forgotten).
    fn free(&self, cap: usize) -> Option<(OpenConnection, InUse)> {
        let mut open = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        open.retain(|c| !c.closed.load(Ordering::Acquire));
        let live = open.iter().find(|c| {
            c.streams.load(Ordering::Acquire) < c.tx.current_max_send_streams().min(cap)
        })?;
        Some((live.clone(), live.take_stream()))
    }
}

impl OpenConnection {
    /// One more of its streams in use.
    fn take_stream(&self) -> InUse {
        self.streams.fetch_add(1, Ordering::AcqRel);
        InUse(self.streams.clone())
    }
}

/// The preface and SETTINGS on `io`, and the connection's task.
async fn start(io: Dialed) -> Result<OpenConnection, Broke> {
    let (tx, connection) = h2::client::Builder::new()
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_header_list_size(MAX_ANSWER_HEADERS)
        .initial_max_send_streams(FIRST_STREAMS)
        .max_send_buffer_size(SEND_BUFFER)
        .enable_push(false)
        .handshake::<_, Bytes>(io)
        .await
        .map_err(|e| broke(&e))?;
    let closed = Arc::new(AtomicBool::new(false));
    let ended = closed.clone();
    tokio::spawn(async move {
        // Its error reaches every stream on it; the next request connects again.
        connection.await.ok();
        ended.store(true, Ordering::Release);
    });
    Ok(OpenConnection {
        tx,
        closed,
        streams: Arc::new(AtomicUsize::new(0)),
    })
}

/// The request's head: the URL as `:scheme`, `:authority` and `:path`; the headers
/// without those HTTP/2 forbids (RFC 9113 §8.2.2, as hyper's client drops them); a
/// `Content-Length` for a body, or an empty POST.
fn request(
    method: reqwest::Method,
    url: &reqwest::Url,
    mut headers: HeaderMap,
    body: Option<usize>,
) -> Result<::http::Request<()>, Broke> {
    drop_connection_headers(&mut headers);
    if let Some(len) = body {
        headers
            .entry(CONTENT_LENGTH)
            .or_insert_with(|| HeaderValue::from(len));
    }
    let target = url.as_str().split('#').next().unwrap_or_default();
    let uri: ::http::Uri = target
        .parse()
        .map_err(|e: ::http::uri::InvalidUri| Broke::other(e.to_string()))?;
    let mut request = ::http::Request::new(());
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.headers_mut() = headers;
    Ok(request)
}

/// Connection-specific headers (and those a `Connection` header names), and a `TE`
/// other than `trailers`: HTTP/2 refuses a request with them.
fn drop_connection_headers(headers: &mut HeaderMap) {
    if let Some(listed) = headers.remove(CONNECTION) {
        for name in listed.to_str().unwrap_or_default().split(',') {
            if let Ok(name) = HeaderName::from_bytes(name.trim().as_bytes()) {
                headers.remove(name);
            }
        }
    }
    for name in ["keep-alive", "proxy-connection"] {
        headers.remove(name);
    }
    headers.remove(TRANSFER_ENCODING);
    headers.remove(UPGRADE);
    if headers.get(TE).is_some_and(|te| te != "trailers") {
        headers.remove(TE);
    }
}

/// What an h2 error says, its I/O error's kind kept.
fn broke(e: &h2::Error) -> Broke {
    Broke {
        io: e.get_io().map(std::io::Error::kind),
        ..Broke::other(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_specific_headers_are_dropped_and_the_rest_kept() {
        let mut h = HeaderMap::new();
        for (n, v) in [
            ("connection", "close, x-hop"),
            ("x-hop", "1"),
            ("keep-alive", "5"),
            ("proxy-connection", "keep-alive"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("te", "gzip"),
            ("nats-subject", "orders"),
            ("host", "app.local"),
        ] {
            h.append(HeaderName::from_static(n), HeaderValue::from_static(v));
        }
        drop_connection_headers(&mut h);
        let mut left: Vec<_> = h.keys().map(HeaderName::as_str).collect();
        left.sort_unstable();
        assert_eq!(left, ["host", "nats-subject"]);
        let mut trailers = HeaderMap::new();
        trailers.insert(TE, HeaderValue::from_static("trailers"));
        drop_connection_headers(&mut trailers);
        assert_eq!(trailers.len(), 1, "TE: trailers is HTTP/2's own");
    }

    #[test]
    fn a_request_has_its_length_and_no_fragment() {
        let url: reqwest::Url = "http://app.local:8080/m?q=1#frag".parse().unwrap();
        let r = request(reqwest::Method::POST, &url, HeaderMap::new(), Some(0)).unwrap();
        assert_eq!(r.uri(), "http://app.local:8080/m?q=1");
        assert_eq!(r.headers()[CONTENT_LENGTH], "0");
        let r = request(reqwest::Method::GET, &url, HeaderMap::new(), None).unwrap();
        assert!(r.headers().get(CONTENT_LENGTH).is_none());
    }
}
