//! A real HTTP app on 127.0.0.1:0 (or a Unix socket; HTTP/1.1, h2c, or TLS with
//! ALPN) that records every request and answers from a script, so tests observe
//! exactly what the daemon sent.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use tokio::time::Instant;

#[derive(Debug, Clone)]
pub struct Recorded {
    pub headers: HashMap<String, Vec<String>>,
    pub body: Bytes,
    pub at: Instant,
    /// When it was answered (after the reply's delay, before the answer is written).
    pub done: Instant,
    /// When it arrived, by the wall clock (to compare with server timestamps).
    pub wall: time::OffsetDateTime,
    /// The status the app answered (set after the delay).
    pub status: u16,
    /// The HTTP version it came in (`HTTP/1.1`, `HTTP/2.0`).
    pub version: String,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .and_then(|v| v.last())
            .map(String::as_str)
    }

    pub fn seq(&self) -> u64 {
        self.header("nats-sequence").unwrap().parse().unwrap()
    }
}

/// What the app answers.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub delay: Duration,
    pub body: String,
}

impl Reply {
    pub fn status(status: u16) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            delay: Duration::ZERO,
            body: String::new(),
        }
    }

    pub fn body(mut self, body: impl Into<String>) -> Reply {
        self.body = body.into();
        self
    }

    pub fn after(mut self, delay: Duration) -> Reply {
        self.delay = delay;
        self
    }

    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Reply {
        self.headers.push((name, value.into()));
        self
    }
}

/// The script: (the request, how many times this sequence was seen before) → reply.
pub type Script = Arc<dyn Fn(&Recorded, usize) -> Reply + Send + Sync>;

#[derive(Default)]
struct Inner {
    requests: Vec<Recorded>,
    seen: HashMap<u64, usize>,
    in_flight: usize,
    max_in_flight: usize,
    /// Requests in flight per subject, and the most ever seen at once for one subject.
    subject_in_flight: HashMap<String, usize>,
    max_subject_in_flight: usize,
    arrivals: usize,
}

#[derive(Clone)]
pub struct MockApp {
    scheme: &'static str,
    addr: SocketAddr,
    inner: Arc<Mutex<Inner>>,
    notify: Arc<tokio::sync::Notify>,
    health: Arc<Health>,
    /// Connections accepted (by the servers below that count them: h2c, TLS, Unix).
    connections: Arc<std::sync::atomic::AtomicUsize>,
    /// The Unix socket server, when it serves one: stopped and started again by
    /// [`MockApp::close`] and [`MockApp::reopen`].
    unix: Option<Arc<UnixServer>>,
}

/// How the app is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Http {
    /// HTTP/1.1 only.
    One,
    /// HTTP/2 only, without TLS (h2c by prior knowledge); over TLS: ALPN h2 or
    /// http/1.1, as the client offers.
    Two,
    /// h2c taking at most this many streams at once on a connection
    /// (`SETTINGS_MAX_CONCURRENT_STREAMS`).
    TwoStreams(u32),
}

/// An app on a Unix socket: its path, the router and the task that accepts (its
/// connections die with it).
pub struct UnixServer {
    path: std::path::PathBuf,
    http: Http,
    router: axum::Router,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// The app's health endpoint: answers 200 while `ok`, 503 otherwise; counts probes.
#[derive(Default)]
pub struct Health {
    pub ok: std::sync::atomic::AtomicBool,
    pub probes: std::sync::atomic::AtomicUsize,
    /// The `Authorization` and `X-Api-Key` of the last probe.
    pub last_credentials: Mutex<(Option<String>, Option<String>)>,
}

#[derive(Clone)]
struct AppState {
    inner: Arc<Mutex<Inner>>,
    script: Script,
    notify: Arc<tokio::sync::Notify>,
}

impl MockApp {
    pub async fn start(
        script: impl Fn(&Recorded, usize) -> Reply + Send + Sync + 'static,
    ) -> MockApp {
        Self::start_on(0, script).await
    }

    /// On a given loopback port (0: any free one).
    pub async fn start_on(
        port: u16,
        script: impl Fn(&Recorded, usize) -> Reply + Send + Sync + 'static,
    ) -> MockApp {
        Self::start_with(port, Listen::Tcp, script).await
    }

    /// Over https with this certificate and key (PEM files); `url()` says https.
    pub async fn start_tls(
        cert: &std::path::Path,
        key: &std::path::Path,
        script: impl Fn(&Recorded, usize) -> Reply + Send + Sync + 'static,
    ) -> MockApp {
        Self::start_with(0, Listen::Tls(cert, key, Http::One), script).await
    }

    /// HTTP/2 without TLS (h2c) on a loopback port: nothing but HTTP/2.
    pub async fn start_h2c(
        script: impl Fn(&Recorded, usize) -> Reply + Send + Sync + 'static,
    ) -> MockApp {
        Self::start_with(0, Listen::Plain(Http::Two), script).await
    }

    /// HTTP/1.1 and nothing else on a loopback port (`MockApp::start`'s server also
    /// answers h2c's preface in HTTP/2).
    /// An h2c app that takes at most `streams` requests at once on a connection.
    pub async fn start_h2c_streams(
        streams: u32,
        script: impl Fn(&Recorded, usize) -> Reply + Send + Sync + 'static,
    ) -> MockApp {
        Self::start_with(0, Listen::Plain(Http::TwoStreams(streams)), script).await
    }

    pub async fn start_http1_only(
        script: impl Fn(&Recorded, usize) -> Reply + Send + Sync + 'static,
    ) -> MockApp {
        Self::start_with(0, Listen::Plain(Http::One), script).await
    }

    /// Over https, ALPN `h2` and `http/1.1`: HTTP/2 when the client offers it.
    pub async fn start_tls_h2(
        cert: &std::path::Path,
        key: &std::path::Path,
        script: impl Fn(&Recorded, usize) -> Reply + Send + Sync + 'static,
    ) -> MockApp {
        Self::start_with(0, Listen::Tls(cert, key, Http::Two), script).await
    }

    /// On the Unix socket `path` in `http`; `url()` is `http://app.local/messages`.
    pub async fn start_unix(
        path: &std::path::Path,
        http: Http,
        script: impl Fn(&Recorded, usize) -> Reply + Send + Sync + 'static,
    ) -> MockApp {
        Self::start_with(0, Listen::Unix(path, http), script).await
    }

    async fn start_with(
        port: u16,
        listen: Listen<'_>,
        script: impl Fn(&Recorded, usize) -> Reply + Send + Sync + 'static,
    ) -> MockApp {
        let inner = Arc::new(Mutex::new(Inner::default()));
        let notify = Arc::new(tokio::sync::Notify::new());
        let state = AppState {
            inner: inner.clone(),
            script: Arc::new(script),
            notify: notify.clone(),
        };
        let health = Arc::new(Health::default());
        let probe = health.clone();
        let router = axum::Router::new()
            .route("/messages", axum::routing::post(handle))
            .with_state(state)
            .route(
                "/health",
                axum::routing::get(move |headers: HeaderMap| {
                    let h = probe.clone();
                    async move {
                        let get = |n: &str| {
                            headers
                                .get(n)
                                .and_then(|v| v.to_str().ok())
                                .map(str::to_string)
                        };
                        *h.last_credentials.lock().unwrap() =
                            (get("authorization"), get("x-api-key"));
                        h.probes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        if h.ok.load(std::sync::atomic::Ordering::SeqCst) {
                            StatusCode::OK
                        } else {
                            StatusCode::SERVICE_UNAVAILABLE
                        }
                    }
                }),
            );
        let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        if let Listen::Unix(path, http) = listen {
            let server = Arc::new(UnixServer {
                path: path.to_path_buf(),
                http,
                router,
                task: Mutex::new(None),
            });
            let app = MockApp {
                scheme: "http",
                addr: ([127, 0, 0, 1], 0).into(),
                inner,
                notify,
                health,
                connections,
                unix: Some(server),
            };
            app.reopen();
            return app;
        }
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let scheme = match listen {
            Listen::Tcp => {
                tokio::spawn(async move { axum::serve(listener, router).await });
                "http"
            }
            Listen::Plain(http) => {
                let count = connections.clone();
                tokio::spawn(async move {
                    let mut conns = tokio::task::JoinSet::new();
                    while let Ok((tcp, _)) = listener.accept().await {
                        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        conns.spawn(serve_connection(tcp, router.clone(), http));
                    }
                });
                "http"
            }
            Listen::Tls(cert, key, http) => {
                serve_tls(listener, router, cert, key, http, connections.clone());
                "https"
            }
            Listen::Unix(..) => unreachable!("served above"),
        };
        MockApp {
            scheme,
            addr,
            inner,
            notify,
            health,
            connections,
            unix: None,
        }
    }

    /// Connections accepted so far (h2c, TLS and Unix-socket apps count them).
    pub fn connections(&self) -> usize {
        self.connections.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// A Unix-socket app stops: its socket is removed and its connections closed.
    pub fn close(&self) {
        let server = self.unix.as_ref().expect("a Unix-socket app");
        if let Some(task) = server.task.lock().unwrap().take() {
            task.abort();
        }
        // Gone already is fine: the app is closed either way.
        std::fs::remove_file(&server.path).ok();
    }

    /// A Unix-socket app serves again: its socket is made anew.
    pub fn reopen(&self) {
        let server = self.unix.as_ref().expect("a Unix-socket app").clone();
        // A socket left by a close that did not remove it is made anew.
        std::fs::remove_file(&server.path).ok();
        let listener = tokio::net::UnixListener::bind(&server.path).unwrap();
        let count = self.connections.clone();
        let (router, http) = (server.router.clone(), server.http);
        let task = tokio::spawn(async move {
            // Dropped with the task: every connection ends with it.
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                conns.spawn(serve_connection(stream, router.clone(), http));
            }
        });
        *server.task.lock().unwrap() = Some(task);
    }

    pub fn health_url(&self) -> String {
        format!("{}://{}/health", self.scheme, self.authority())
    }

    /// `host:port`; for a Unix-socket app the name its URL gives as `Host`.
    fn authority(&self) -> String {
        match self.unix {
            Some(_) => "app.local".into(),
            None => self.addr.to_string(),
        }
    }

    pub fn set_healthy(&self, ok: bool) {
        self.health
            .ok
            .store(ok, std::sync::atomic::Ordering::SeqCst);
    }

    /// The `Authorization` and `X-Api-Key` headers of the last probe.
    pub fn probe_credentials(&self) -> (Option<String>, Option<String>) {
        self.health.last_credentials.lock().unwrap().clone()
    }

    pub fn health_probes(&self) -> usize {
        self.health.probes.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Requests that arrived (answered or not yet).
    pub fn arrivals(&self) -> usize {
        self.inner.lock().unwrap().arrivals
    }

    /// The most requests ever in flight at once for one subject.
    pub fn max_subject_in_flight(&self) -> usize {
        self.inner.lock().unwrap().max_subject_in_flight
    }

    /// Answers 200 at once.
    pub async fn ok() -> MockApp {
        MockApp::start(|_, _| Reply::status(200)).await
    }

    pub fn url(&self) -> String {
        format!("{}://{}/messages", self.scheme, self.authority())
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.inner.lock().unwrap().requests.clone()
    }

    pub fn max_in_flight(&self) -> usize {
        self.inner.lock().unwrap().max_in_flight
    }

    /// Sequences answered 2xx at least once.
    pub fn acked_seqs(&self) -> std::collections::BTreeSet<u64> {
        self.requests()
            .iter()
            .filter(|r| (200..300).contains(&r.status))
            .map(Recorded::seq)
            .collect()
    }

    /// Waits until `cond` holds over the answered requests.
    pub async fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        cond: impl Fn(&[Recorded]) -> bool,
    ) {
        let deadline = Instant::now() + timeout;
        loop {
            let notified = self.notify.notified();
            if cond(&self.requests()) {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                let n = self.requests().len();
                panic!("timed out after {timeout:?} waiting for {what} ({n} requests seen)");
            }
        }
    }
}

async fn handle(
    State(s): State<AppState>,
    version: axum::http::Version,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut map: HashMap<String, Vec<String>> = HashMap::new();
    for (k, v) in &headers {
        map.entry(k.as_str().to_string())
            .or_default()
            .push(String::from_utf8_lossy(v.as_bytes()).into_owned());
    }
    let mut rec = Recorded {
        headers: map,
        body,
        at: Instant::now(),
        done: Instant::now(),
        wall: time::OffsetDateTime::now_utc(),
        status: 0,
        version: format!("{version:?}"),
    };
    let (reply, seen) = {
        let mut inner = s.inner.lock().unwrap();
        inner.arrivals += 1;
        inner.in_flight += 1;
        inner.max_in_flight = inner.max_in_flight.max(inner.in_flight);
        let subject = rec.header("nats-subject").unwrap_or_default().to_string();
        let n = inner.subject_in_flight.entry(subject).or_default();
        *n += 1;
        let n = *n;
        inner.max_subject_in_flight = inner.max_subject_in_flight.max(n);
        let seq = rec
            .header("nats-sequence")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let seen = inner.seen.entry(seq).or_default();
        let before = *seen;
        *seen += 1;
        ((s.script)(&rec, before), before)
    };
    let _ = seen;
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    rec.status = reply.status;
    rec.done = Instant::now();
    {
        let mut inner = s.inner.lock().unwrap();
        inner.in_flight -= 1;
        let subject = rec.header("nats-subject").unwrap_or_default().to_string();
        if let Some(n) = inner.subject_in_flight.get_mut(&subject) {
            *n -= 1;
        }
        inner.requests.push(rec);
    }
    s.notify.notify_waiters();
    let mut resp = (StatusCode::from_u16(reply.status).unwrap(), reply.body).into_response();
    for (k, v) in reply.headers {
        resp.headers_mut().insert(k, v.parse().unwrap());
    }
    resp
}

/// Where and how [`MockApp::start_with`] serves.
enum Listen<'a> {
    /// HTTP/1.1 on a loopback port.
    Tcp,
    /// HTTP/1.1 only, or HTTP/2 only (h2c), on a loopback port.
    Plain(Http),
    /// TLS with this certificate and key: HTTP/1.1 only, or ALPN h2 and http/1.1.
    Tls(&'a std::path::Path, &'a std::path::Path, Http),
    /// On a Unix socket.
    Unix(&'a std::path::Path, Http),
}

/// Serves one connection of `router` in `http`.
async fn serve_connection<I>(io: I, router: axum::Router, http: Http)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let io = hyper_util::rt::TokioIo::new(io);
    let service = hyper_util::service::TowerToHyperService::new(router);
    match http {
        Http::One => hyper::server::conn::http1::Builder::new()
            .serve_connection(io, service)
            .await
            .ok(),
        Http::Two => hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .serve_connection(io, service)
            .await
            .ok(),
        Http::TwoStreams(n) => {
            hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                .max_concurrent_streams(n)
                .serve_connection(io, service)
                .await
                .ok()
        }
    };
}

/// Serves `router` over TLS (rustls) on `listener`: HTTP/1.1 only, or (`Http::Two`)
/// ALPN `h2` then `http/1.1`, each connection in what the handshake agreed.
fn serve_tls(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    cert: &std::path::Path,
    key: &std::path::Path,
    http: Http,
    connections: Arc<std::sync::atomic::AtomicUsize>,
) {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let key = PrivateKeyDer::from_pem_file(key).unwrap();
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    if http == Http::Two {
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    }
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            connections.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let (acceptor, router) = (acceptor.clone(), router.clone());
            tokio::spawn(async move {
                // A client that refuses the certificate ends here.
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let agreed = match tls.get_ref().1.alpn_protocol() {
                    Some(b"h2") => Http::Two,
                    _ => Http::One,
                };
                serve_connection(tls, router, agreed).await;
            });
        }
    });
}

/// A free loopback port for an app that is started later (released at once: a test
/// that takes it knows nothing else binds it in between on its own machine).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// An app with a fixed number of workers, each taking `service` per request, first
/// come first served, that answers 503 at once when `queue` requests already wait:
/// the shape of an app whose capacity a limit must find. Workers can be taken away.
#[derive(Clone)]
pub struct WorkersApp {
    addr: SocketAddr,
    workers: Arc<tokio::sync::Semaphore>,
    waiting: Arc<std::sync::atomic::AtomicUsize>,
    pub answered: Arc<std::sync::atomic::AtomicUsize>,
    pub refused: Arc<std::sync::atomic::AtomicUsize>,
}

impl WorkersApp {
    pub async fn start(workers: usize, service: Duration, queue: usize) -> WorkersApp {
        use std::sync::atomic::Ordering::SeqCst;
        let app = WorkersApp {
            addr: "127.0.0.1:0".parse().unwrap(),
            workers: Arc::new(tokio::sync::Semaphore::new(workers)),
            waiting: Arc::default(),
            answered: Arc::default(),
            refused: Arc::default(),
        };
        let state = app.clone();
        let router = axum::Router::new().route(
            "/messages",
            axum::routing::post(move || {
                let s = state.clone();
                async move {
                    if s.waiting.fetch_add(1, SeqCst) >= queue + s.workers.available_permits() {
                        s.waiting.fetch_sub(1, SeqCst);
                        s.refused.fetch_add(1, SeqCst);
                        return StatusCode::SERVICE_UNAVAILABLE;
                    }
                    let permit = s.workers.acquire().await.unwrap();
                    s.waiting.fetch_sub(1, SeqCst);
                    tokio::time::sleep(service).await;
                    drop(permit);
                    s.answered.fetch_add(1, SeqCst);
                    StatusCode::OK
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await });
        WorkersApp { addr, ..app }
    }

    pub fn url(&self) -> String {
        format!("http://{}/messages", self.addr)
    }

    /// Takes `n` workers away (once they finish what they do).
    pub async fn lose_workers(&self, n: u32) {
        let gone = self.workers.acquire_many(n).await.unwrap();
        gone.forget();
    }
}
