//! HTTP/1.1 to a plain `http://` app without a proxy (over TCP or the socket), on
//! hyper's connection API: a pool of idle connections per origin, each request on a
//! connection of its own while it is in flight.
//!
//! reqwest (which still serves `https://` apps and proxies) goes through
//! hyper-util's pool, its connector's layers and a timer per request, and converts
//! the URL and the answer on the way; for a message of 128 B that was half of the
//! client's CPU (`bench/transports` shows what this does for jetrelay as a whole).
//!
//! A connection goes back to the pool once its answer's body has been read to the
//! end (one read only in part, or dropped, is closed), at most `keep` of them per
//! origin, each for at most 60 s (`IDLE`): a task closes those that have waited that long,
//! and ends when none is left. A request that finds a pooled connection closed
//! (the app restarted, or closed it as idle) before the request was written is sent on
//! another, so an app's keep-alive timeout never fails a delivery.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use reqwest::header::{HOST, HeaderMap};
use tokio::time::Instant;

use crate::http::broke::Broke;
use crate::http::dial::{OriginKey, dial, host_header, origin};

/// The longest a connection stays idle in the pool (reqwest's pool kept them as long).
const IDLE: Duration = Duration::from_secs(60);

type Tx = SendRequest<Full<Bytes>>;

/// The HTTP/1.1 client of one [`crate::http::app::AppClient`]: idle connections per
/// origin.
#[derive(Debug)]
pub(crate) struct H1 {
    /// `http.unix_socket`: every origin is reached through it.
    socket: Option<Arc<Path>>,
    /// Idle connections kept per origin.
    keep: usize,
    /// How long a connection is kept unused ([`IDLE`]).
    idle_for: Duration,
    pool: Mutex<Pool>,
}

/// The idle connections, and whether the task that closes the expired ones runs.
#[derive(Debug, Default)]
struct Pool {
    idle: HashMap<OriginKey, Vec<Idle>>,
    reaping: bool,
}

/// A connection waiting for its next request.
#[derive(Debug)]
struct Idle {
    tx: Tx,
    since: Instant,
}

impl Idle {
    /// Still open, and idle for less than `idle_for`.
    fn usable(&self, idle_for: Duration) -> bool {
        !self.tx.is_closed() && self.since.elapsed() < idle_for
    }
}

/// An answer's head, and its body still to be read.
pub(crate) struct H1Answer {
    pub(crate) head: ::http::response::Parts,
    body: Incoming,
    /// The connection, back to the pool once the body has been read to its end.
    back: Option<(Arc<H1>, OriginKey, Tx)>,
}

impl H1Answer {
    /// The body's next chunk; `None` at its end (the connection then back in the pool).
    pub(crate) async fn chunk(&mut self) -> Result<Option<Bytes>, Broke> {
        loop {
            match self.body.frame().await {
                None => {
                    if let Some((pool, key, tx)) = self.back.take() {
                        pool.put(key, tx);
                    }
                    return Ok(None);
                }
                Some(Ok(frame)) => {
                    // Trailers say nothing here: read past them.
                    if let Ok(data) = frame.into_data() {
                        return Ok(Some(data));
                    }
                }
                Some(Err(e)) => return Err(broke(&e)),
            }
        }
    }
}

impl H1 {
    /// A client that connects over `socket` when set, to the URL's host otherwise,
    /// keeping up to `keep` idle connections per origin.
    pub(crate) fn new(socket: Option<Arc<Path>>, keep: usize) -> H1 {
        H1::keeping_for(socket, keep, IDLE)
    }

    /// As [`H1::new`], an idle connection kept for `idle_for`.
    fn keeping_for(socket: Option<Arc<Path>>, keep: usize, idle_for: Duration) -> H1 {
        H1 {
            socket,
            keep,
            idle_for,
            pool: Mutex::new(Pool::default()),
        }
    }

    /// Sends `method` to `url` with `headers` and `body` (`None`: no body), and
    /// returns the answer's head (the caller bounds it in time).
    ///
    /// # Errors
    /// [`Broke`]: no connection (`connect`), or the request or its connection broke.
    pub(crate) async fn exchange(
        self: &Arc<Self>,
        method: reqwest::Method,
        url: &reqwest::Url,
        headers: HeaderMap,
        body: Option<Bytes>,
    ) -> Result<H1Answer, Broke> {
        let mut request = request(method, url, headers, body)?;
        let key = origin(self.socket.as_deref(), url);
        loop {
            let (mut tx, pooled) = match self.take(&key) {
                Some(tx) => (tx, true),
                None => (self.connect(url).await?, false),
            };
            if let Err(e) = tx.ready().await {
                // A pooled connection that closed since: another takes the request.
                if pooled {
                    continue;
                }
                return Err(broke(&e));
            }
            match tx.try_send_request(request).await {
                Ok(answer) => {
                    let (head, body) = answer.into_parts();
                    let back = Some((self.clone(), key, tx));
                    return Ok(H1Answer { head, body, back });
                }
                Err(mut e) => match e.take_message() {
                    // Not written: the connection closed before it took the request.
                    Some(unsent) if pooled => request = unsent,
                    _ => return Err(broke(e.error())),
                },
            }
        }
    }

    /// A new connection to `url`'s origin, its task spawned.
    async fn connect(&self, url: &reqwest::Url) -> Result<Tx, Broke> {
        let io = hyper_util::rt::TokioIo::new(dial(self.socket.as_deref(), url).await?);
        let (tx, connection) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(|e| broke(&e))?;
        tokio::spawn(async move {
            // Its error reaches the request on it; the pool drops it as closed.
            connection.await.ok();
        });
        Ok(tx)
    }

    /// The most recently used idle connection of `key` that is still open.
    fn take(&self, key: &OriginKey) -> Option<Tx> {
        let mut pool = self.pool.lock().unwrap_or_else(PoisonError::into_inner);
        let conns = pool.idle.get_mut(key)?;
        while let Some(c) = conns.pop() {
            if c.usable(self.idle_for) {
                return Some(c.tx);
            }
        }
        None
    }

    /// `tx` back in the pool, unless it is full; the task that closes expired
    /// connections started if it is not running.
    fn put(self: &Arc<Self>, key: OriginKey, tx: Tx) {
        let reap = {
            let mut pool = self.pool.lock().unwrap_or_else(PoisonError::into_inner);
            let conns = pool.idle.entry(key).or_default();
            // The oldest are the first to have been closed by the app as idle.
            conns.retain(|c| c.since.elapsed() < self.idle_for);
            if conns.len() < self.keep {
                conns.push(Idle {
                    tx,
                    since: Instant::now(),
                });
            }
            !std::mem::replace(&mut pool.reaping, true)
        };
        if reap {
            tokio::spawn(reap_idle(Arc::downgrade(self)));
        }
    }

    /// Drops (so closes) the connections idle for `idle_for` or closed by the app;
    /// returns when the next one expires, `None` when none is left (the reaping task
    /// then ends: the next [`H1::put`] starts another).
    fn expire(&self) -> Option<Instant> {
        let mut pool = self.pool.lock().unwrap_or_else(PoisonError::into_inner);
        pool.idle.retain(|_, conns| {
            conns.retain(|c| c.usable(self.idle_for));
            !conns.is_empty()
        });
        let next = pool.idle.values().flatten().map(|c| c.since).min();
        pool.reaping = next.is_some();
        next.map(|since| since + self.idle_for)
    }
}

/// Closes a pool's connections as they expire, while it has any (and exists).
async fn reap_idle(pool: Weak<H1>) {
    loop {
        let next = match pool.upgrade() {
            Some(h1) => h1.expire(),
            None => return,
        };
        match next {
            Some(at) => tokio::time::sleep_until(at).await,
            None => return,
        }
    }
}

/// The request: its target in origin form (path and query), a `Host` from the URL
/// unless the caller gave one; hyper adds the `Content-Length`.
fn request(
    method: reqwest::Method,
    url: &reqwest::Url,
    mut headers: HeaderMap,
    body: Option<Bytes>,
) -> Result<::http::Request<Full<Bytes>>, Broke> {
    let target = match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_string(),
    };
    let uri: ::http::Uri = target
        .parse()
        .map_err(|e: ::http::uri::InvalidUri| Broke::other(e.to_string()))?;
    if !headers.contains_key(HOST)
        && let Some(host) = host_header(url)
    {
        headers.insert(HOST, host);
    }
    let mut request = ::http::Request::new(Full::new(body.unwrap_or_default()));
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.headers_mut() = headers;
    Ok(request)
}

/// What hyper's error says.
fn broke(e: &hyper::Error) -> Broke {
    Broke {
        body: e.is_body_write_aborted(),
        ..Broke::of_error(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// An app on loopback answering `200 ok` to each request it reads whole; after
    /// its first answer on a connection it closes it when `close` says so (as an app
    /// whose keep-alive ran out would, without `Connection: close`). Counts the
    /// connections it took, and those that ended.
    async fn app(close: bool) -> (reqwest::Url, Arc<AtomicUsize>, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/m", listener.local_addr().unwrap());
        let conns = Arc::new(AtomicUsize::new(0));
        let ended = Arc::new(AtomicUsize::new(0));
        let (counted, ends) = (conns.clone(), ended.clone());
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                let ends = ends.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    let _count = Ended(ends);
                    loop {
                        let mut have = 0;
                        // A head and its two-byte body.
                        while !String::from_utf8_lossy(&buf[..have]).ends_with("\r\n\r\n{}") {
                            match conn.read(&mut buf[have..]).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => have += n,
                            }
                        }
                        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        if conn.write_all(answer).await.is_err() || close {
                            return;
                        }
                    }
                });
            }
        });
        (url.parse().unwrap(), conns, ended)
    }

    /// Counts a connection's end when the app's task for it ends.
    struct Ended(Arc<AtomicUsize>);

    impl Drop for Ended {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Waits (5 s at most) until `cond` holds.
    async fn until(what: &str, cond: impl Fn() -> bool) {
        let holds = async {
            while !cond() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(5), holds)
            .await
            .unwrap_or_else(|_| panic!("{what}: not within 5 s"));
    }

    async fn post(h1: &Arc<H1>, url: &reqwest::Url) -> Result<Bytes, Broke> {
        let body = Some(Bytes::from_static(b"{}"));
        let sent = h1.exchange(reqwest::Method::POST, url, HeaderMap::new(), body);
        let mut a = tokio::time::timeout(Duration::from_secs(5), sent)
            .await
            .unwrap()?;
        assert_eq!(a.head.status, 200);
        let mut got = Vec::new();
        while let Some(c) = a.chunk().await? {
            got.extend_from_slice(&c);
        }
        Ok(Bytes::from(got))
    }

    #[tokio::test]
    async fn a_connection_is_kept_for_the_next_request_and_one_the_app_closed_is_not_used() {
        let (url, conns, _) = app(false).await;
        let h1 = Arc::new(H1::new(None, 4));
        for _ in 0..5 {
            assert_eq!(&post(&h1, &url).await.unwrap()[..], b"ok");
        }
        assert_eq!(conns.load(Ordering::SeqCst), 1, "one connection, kept");

        let (url, conns, _) = app(true).await;
        for n in 1..=5 {
            assert_eq!(&post(&h1, &url).await.unwrap()[..], b"ok");
            // Eventually the app's close has reached the pooled connection.
            let key = origin(None, &url);
            until("the app's close reached the pool", || {
                h1.pool.lock().unwrap().idle[&key]
                    .iter()
                    .all(|c| c.tx.is_closed())
            })
            .await;
            assert_eq!(conns.load(Ordering::SeqCst), n);
        }
    }

    #[tokio::test]
    async fn no_more_idle_connections_are_kept_than_asked() {
        let (url, conns, _) = app(false).await;
        let h1 = Arc::new(H1::new(None, 2));
        let together = (0..6).map(|_| post(&h1, &url));
        for got in futures::future::join_all(together).await {
            assert_eq!(&got.unwrap()[..], b"ok");
        }
        assert_eq!(
            conns.load(Ordering::SeqCst),
            6,
            "six at once, a connection each"
        );
        assert_eq!(h1.pool.lock().unwrap().idle[&origin(None, &url)].len(), 2);
    }

    #[tokio::test]
    async fn an_idle_connection_is_closed_once_kept_its_time_and_the_reaper_ends() {
        let (url, conns, ended) = app(false).await;
        let idle_for = Duration::from_millis(300);
        let h1 = Arc::new(H1::keeping_for(None, 4, idle_for));
        let together = (0..3).map(|_| post(&h1, &url));
        for got in futures::future::join_all(together).await {
            assert_eq!(&got.unwrap()[..], b"ok");
        }
        assert_eq!(conns.load(Ordering::SeqCst), 3);
        assert_eq!(ended.load(Ordering::SeqCst), 0, "kept while young");
        // With no request after them, the app sees the three closed.
        until("idle connections closed", || {
            ended.load(Ordering::SeqCst) >= 3
        })
        .await;
        until("the reaper ends with the pool empty", || {
            !h1.pool.lock().unwrap().reaping
        })
        .await;
        // The next request connects again, and its connection is reaped in turn.
        assert_eq!(&post(&h1, &url).await.unwrap()[..], b"ok");
        assert_eq!(conns.load(Ordering::SeqCst), 4);
        until("the new connection reaped too", || {
            ended.load(Ordering::SeqCst) >= 4
        })
        .await;
    }

    #[test]
    fn a_request_is_in_origin_form_with_the_urls_host() {
        let url: reqwest::Url = "http://app.local:8080/m?q=1#frag".parse().unwrap();
        let r = request(reqwest::Method::POST, &url, HeaderMap::new(), None).unwrap();
        assert_eq!(r.uri(), "/m?q=1");
        assert_eq!(r.headers()[HOST], "app.local:8080");
        let mut given = HeaderMap::new();
        given.insert(HOST, reqwest::header::HeaderValue::from_static("other"));
        let url: reqwest::Url = "http://app.local/m".parse().unwrap();
        let r = request(reqwest::Method::GET, &url, given, None).unwrap();
        assert_eq!(r.uri(), "/m");
        assert_eq!(r.headers()[HOST], "other");
    }
}
