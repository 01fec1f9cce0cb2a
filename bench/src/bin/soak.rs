//! The soak driver (`bench/soak`): jetrelay under faults, counting every message.
//!
//! Each phase gets its own nats-server(s), stream and recording HTTP app; a publisher
//! sends uniquely numbered messages (the id is the body, `Nats-Msg-Id` makes a retried
//! publish harmless) at a steady rate for the whole phase while a fault is injected:
//!
//!   a1 / a2  a flapping app (503s, connections reset without an answer, slow answers,
//!            answers after the HTTP timeout, and a period with the port closed);
//!            durable consumer, ordering "none" (a1) and "subject" (a2)
//!   b        one SIGKILL of the nats-server mid-stream, started again on the same
//!            port and store
//!   c        a static consumer-group member run as two jetrelay processes (pinned +
//!            hot standby): the pinned one is SIGKILLed and replaced, twice
//!   d        a rolling restart (SIGKILL, start again, wait until caught up) of a
//!            three-node cluster holding an R3 stream, consumer leader first
//!   f        processed once (`delivery.idempotency_bucket`), an elastic group of two
//!            members: acks lost on purpose (a TCP proxy drops them for longer than
//!            ack_wait), the nats-server SIGKILLed and restarted, jetrelay SIGKILLed and
//!            started again, ids re-sent after the stream's duplicate window, and one
//!            member's partitions moved to the other while acks are lost, then back;
//!            no id may be answered 2xx twice but those first answered within a second
//!            of the SIGKILL (`once.rs`)
//!   e        the surfaces an app and the world reach (`surfaces.rs`): two consumers of
//!            one stream publishing outputs into one shared stream (one in batches
//!            answered in odd shapes), poison messages dead-lettered and replayed from
//!            the DLQ during delivery, and the publish endpoint under a flood with
//!            hostile requests among it; every input and every output accounted for
//!
//! Then publishing stops and the driver waits (bounded) until every published id was
//! answered 2xx by the app and the consumer has nothing pending. Per phase: published,
//! delivered (distinct ids answered 2xx), lost (published − delivered), duplicates
//! (ids answered 2xx more than once), the most requests in flight at the app and the
//! most messages jetrelay held, the recovery after each fault, and in the ordered
//! phases (a2, c) how many ids were first answered after a later id of their subject.
//! Every normal answer takes a few tens of ms, so that something is in flight at each
//! fault. Prints a markdown report and writes it to `<out>/soak-<unix-seconds>.md`.
//! Timing never fails the run: the exit code is 1 only when a message was lost, or (phase
//! f) processed twice without a SIGKILL to explain it (2 when
//! a phase could not run at all). `--keep` keeps the work dir (configs, jetrelay and
//! nats-server logs), which is also kept whenever something was lost.
//!
//!   soak --nats-server=PATH --relay=PATH [--out=DIR] [--rate=200] [--scale=1.0]
//!        [--only=a1,a2,b,c,d,e,f] [--keep] [--source=REVISION]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_nats::jetstream;
use axum::body::Bytes;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, StatusCode};
use futures::StreamExt;
use tokio::process::{Child, Command};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

type Error = Box<dyn std::error::Error + Send + Sync>;

// The jetrelay settings every phase uses.
const ACK_WAIT_MS: u64 = 3000;
const HTTP_TIMEOUT_MS: u64 = 2000;
const MAX_IN_FLIGHT: usize = 32;
const MAX_BUFFERED: usize = 256;
const MAX_BATCH: usize = 64;
const RETRY_INITIAL_MS: u64 = 250;
const RETRY_MAX_MS: u64 = 2000;
const KEYS: u64 = 64;
const PARTITIONS: u32 = 16;
// The flapping app.
const SLOW_MS: (u64, u64) = (400, 1200);
const TOO_SLOW_MS: u64 = 2500;

static START: OnceLock<Instant> = OnceLock::new();

macro_rules! say {
    ($($arg:tt)*) => {
        eprintln!(
            "[{:7.1}s] {}",
            $crate::START.get_or_init(std::time::Instant::now).elapsed().as_secs_f64(),
            format!($($arg)*)
        )
    };
}

// Phase e, in a file of its own (after `say!`, which it uses).
#[path = "soak/once.rs"]
mod once;
// The ack-dropping proxy is the integration tests' own.
#[path = "../../../tests/it/support/proxy.rs"]
mod proxy;
#[path = "soak/surfaces.rs"]
mod surfaces;

// === small helpers ===

static RNG: AtomicU64 = AtomicU64::new(0);

/// SplitMix64 over a shared counter: a uniform number in [0, 1).
fn unit() -> f64 {
    let mut z = RNG
        .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// A free loopback port below the ephemeral range, so that no outgoing connection
/// takes it while a server that owns it is down.
fn free_port() -> u16 {
    for _ in 0..1000 {
        let p = 20_000 + (unit() * 12_000.0) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", p)).is_ok() {
            return p;
        }
    }
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_or(0, |a| a.port())
}

/// A task aborted when dropped.
struct Task<T>(JoinHandle<T>);

impl<T> Drop for Task<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The phase's clock: `at(s)` sleeps until `s` (scaled) seconds after the start.
struct Clock {
    t0: Instant,
    scale: f64,
}

impl Clock {
    fn new(scale: f64) -> Clock {
        Clock {
            t0: Instant::now(),
            scale,
        }
    }

    async fn at(&self, secs: f64) {
        let when = self.t0 + Duration::from_secs_f64(secs * self.scale);
        tokio::time::sleep_until(when.into()).await;
    }

    fn scaled(&self, secs: f64) -> Duration {
        Duration::from_secs_f64(secs * self.scale)
    }
}

/// Polls `f` every 100 ms until it is true or `timeout` passed; whether it became true.
async fn wait_until<F, Fut>(timeout: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if f().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

// === the recording app ===

/// What the app does with a request, as probabilities (the rest is answered 200).
#[derive(Clone, Copy, Default)]
struct Faults {
    status_503: f64,
    reset: f64,
    slow: f64,
    too_slow: f64,
}

impl Faults {
    const FLAKY: Faults = Faults {
        status_503: 0.10,
        reset: 0.05,
        slow: 0.05,
        too_slow: 0.01,
    };
}

#[derive(Default)]
struct Record {
    /// Id → how many times it was answered 2xx.
    ok: HashMap<u64, u32>,
    /// When each 2xx answer was given, and by which jetrelay instance (X-Instance).
    ok_times: Vec<(Instant, u8)>,
    /// When each id was first answered 2xx.
    first_ok: HashMap<u64, Instant>,
    requests: u64,
    answered_503: u64,
    resets: u64,
    slow: u64,
    too_slow: u64,
    no_id: u64,
    max_delivered: u64,
    in_flight: usize,
    max_in_flight: usize,
    ok_by_instance: BTreeMap<u8, u64>,
    /// Per subject (id % KEYS): the highest id answered 2xx so far.
    highest_by_key: HashMap<u64, u64>,
    /// First 2xx answers of an id lower than one of its subject already answered.
    out_of_order: u64,
    /// The first few of them: when, id, the higher id already answered, instance,
    /// Nats-Delivered.
    out_of_order_samples: Vec<(Instant, u64, u64, u8, u64)>,
}

struct AppShared {
    rec: Mutex<Record>,
    faults: Mutex<Faults>,
    /// How long an ordinary answer (2xx or 503) takes: uniform in this range, ms.
    normal_ms: (u64, u64),
}

impl AppShared {
    async fn work(&self) {
        let (lo, hi) = self.normal_ms;
        let ms = lo + (unit() * hi.saturating_sub(lo) as f64) as u64;
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

/// Decrements the app's in-flight count when the request ends, however it ends.
struct InFlight(Arc<AppShared>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.rec.lock().unwrap().in_flight -= 1;
    }
}

/// The connection's kill switch: notified, the connection is dropped unanswered.
#[derive(Clone)]
struct Reset(Arc<Notify>);

enum Action {
    Ok,
    Unavailable,
    Reset,
    Slow(u64),
    TooSlow,
}

impl Record {
    fn answered_ok(&mut self, id: u64, instance: u8, delivered: u64) {
        let n = self.ok.entry(id).or_insert(0);
        *n += 1;
        if *n == 1 {
            self.first_ok.insert(id, Instant::now());
            let highest = self.highest_by_key.entry(id % KEYS).or_insert(id);
            if id < *highest {
                self.out_of_order += 1;
                if self.out_of_order_samples.len() < 10 {
                    let sample = (Instant::now(), id, *highest, instance, delivered);
                    self.out_of_order_samples.push(sample);
                }
            }
            *highest = (*highest).max(id);
        }
        self.ok_times.push((Instant::now(), instance));
        *self.ok_by_instance.entry(instance).or_insert(0) += 1;
    }
}

async fn handle(
    State(app): State<Arc<AppShared>>,
    Extension(reset): Extension<Reset>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
    };
    let Some(id) = std::str::from_utf8(&body)
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
    else {
        app.rec.lock().unwrap().no_id += 1;
        return StatusCode::OK;
    };
    let instance = u8::try_from(header("x-instance").unwrap_or(0)).unwrap_or(0);
    let delivered = header("nats-delivered").unwrap_or(0);
    {
        let mut r = app.rec.lock().unwrap();
        r.requests += 1;
        r.in_flight += 1;
        r.max_in_flight = r.max_in_flight.max(r.in_flight);
        r.max_delivered = r.max_delivered.max(delivered);
    }
    // Counted as in flight until the answer is decided; a request jetrelay gives up on
    // (reset, timeout) stops counting no later than jetrelay's side does.
    let guard = InFlight(app.clone());
    let f = *app.faults.lock().unwrap();
    let x = unit();
    let action = if x < f.reset {
        Action::Reset
    } else if x < f.reset + f.status_503 {
        Action::Unavailable
    } else if x < f.reset + f.status_503 + f.slow {
        Action::Slow(SLOW_MS.0 + (unit() * (SLOW_MS.1 - SLOW_MS.0) as f64) as u64)
    } else if x < f.reset + f.status_503 + f.slow + f.too_slow {
        Action::TooSlow
    } else {
        Action::Ok
    };
    match action {
        Action::Reset => {
            app.rec.lock().unwrap().resets += 1;
            drop(guard);
            reset.0.notify_one();
            // The connection is dropped (with this future) before anything is written.
            std::future::pending::<StatusCode>().await
        }
        Action::Unavailable => {
            app.work().await;
            app.rec.lock().unwrap().answered_503 += 1;
            StatusCode::SERVICE_UNAVAILABLE
        }
        Action::TooSlow => {
            app.rec.lock().unwrap().too_slow += 1;
            // Past jetrelay's HTTP timeout; never a 2xx, whether or not it is read. It
            // stops counting as in flight a little before jetrelay's timeout fires.
            let counted = HTTP_TIMEOUT_MS - 100;
            tokio::time::sleep(Duration::from_millis(counted)).await;
            drop(guard);
            tokio::time::sleep(Duration::from_millis(TOO_SLOW_MS - counted)).await;
            StatusCode::SERVICE_UNAVAILABLE
        }
        Action::Slow(ms) => {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            let mut r = app.rec.lock().unwrap();
            r.slow += 1;
            r.answered_ok(id, instance, delivered);
            StatusCode::OK
        }
        Action::Ok => {
            app.work().await;
            app.rec.lock().unwrap().answered_ok(id, instance, delivered);
            StatusCode::OK
        }
    }
}

/// The HTTP app jetrelay delivers to: records every id answered 2xx; can misbehave
/// (`set_faults`) and stop listening altogether (`down`, then `up` on the same port).
struct App {
    shared: Arc<AppShared>,
    port: u16,
    server: Option<Task<()>>,
}

impl App {
    async fn start(normal_ms: (u64, u64)) -> Result<App, Error> {
        let mut app = App {
            shared: Arc::new(AppShared {
                rec: Mutex::new(Record::default()),
                faults: Mutex::new(Faults::default()),
                normal_ms,
            }),
            port: free_port(),
            server: None,
        };
        app.up().await?;
        Ok(app)
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/messages", self.port)
    }

    fn set_faults(&self, f: Faults) {
        *self.shared.faults.lock().unwrap() = f;
    }

    /// Listens (again) on the app's port.
    async fn up(&mut self) -> Result<(), Error> {
        let mut tries = 0;
        let listener = loop {
            match tokio::net::TcpListener::bind(("127.0.0.1", self.port)).await {
                Ok(l) => break l,
                Err(e) if tries < 100 => {
                    tries += 1;
                    if tries == 1 {
                        say!("app: cannot bind port {} yet: {e}", self.port);
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e.into()),
            }
        };
        let router = axum::Router::new()
            .route("/messages", axum::routing::post(handle))
            .with_state(self.shared.clone());
        self.server = Some(Task(tokio::spawn(serve(listener, router))));
        Ok(())
    }

    /// Stops listening and drops every open connection (abortively): the app is gone,
    /// connecting is refused.
    async fn down(&mut self) {
        if let Some(task) = self.server.take() {
            task.0.abort();
            let mut task = task;
            let _ = (&mut task.0).await;
        }
    }

    fn ok_after(&self, t: Instant, except: Option<u8>) -> Option<Instant> {
        let r = self.shared.rec.lock().unwrap();
        let i = r.ok_times.partition_point(|(at, _)| *at < t);
        r.ok_times[i..]
            .iter()
            .find(|(_, inst)| Some(*inst) != except)
            .map(|(at, _)| *at)
    }

    /// The longest time without a 2xx answer between `a` and `b`.
    fn longest_gap(&self, a: Instant, b: Instant) -> Duration {
        let r = self.shared.rec.lock().unwrap();
        let i = r.ok_times.partition_point(|(at, _)| *at < a);
        let mut prev = a;
        let mut gap = Duration::ZERO;
        for (at, _) in &r.ok_times[i..] {
            if *at > b {
                break;
            }
            gap = gap.max(at.duration_since(prev));
            prev = *at;
        }
        gap.max(b.saturating_duration_since(prev))
    }

    fn last_ok(&self) -> Option<Instant> {
        self.shared
            .rec
            .lock()
            .unwrap()
            .ok_times
            .last()
            .map(|(t, _)| *t)
    }

    fn ok_count(&self) -> usize {
        self.shared.rec.lock().unwrap().ok_times.len()
    }

    fn in_flight(&self) -> usize {
        self.shared.rec.lock().unwrap().in_flight
    }
}

/// Serves HTTP/1.1 on `listener`; every connection can be reset by its own request.
/// Aborting this task drops the listener and (with the JoinSet) every connection.
async fn serve(listener: tokio::net::TcpListener, router: axum::Router) {
    let mut conns = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((sock, _)) = accepted else { continue };
                let _ = sock.set_nodelay(true);
                // Every close by the app is abortive: RST, not FIN.
                let _ = sock.set_zero_linger();
                let kill = Arc::new(Notify::new());
                let svc = hyper_util::service::TowerToHyperService::new(
                    router.clone().layer(Extension(Reset(kill.clone()))),
                );
                conns.spawn(async move {
                    let conn = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(sock), svc);
                    tokio::select! {
                        _ = conn => {}
                        () = kill.notified() => {}
                    }
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

// === nats-server ===

struct Server {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    extra: Vec<String>,
    child: Option<Child>,
}

impl Server {
    async fn start(
        bin: &Path,
        dir: PathBuf,
        port: u16,
        extra: Vec<String>,
    ) -> Result<Server, Error> {
        std::fs::create_dir_all(&dir)?;
        let mut s = Server {
            bin: bin.to_path_buf(),
            dir,
            port,
            extra,
            child: None,
        };
        s.start_again().await?;
        Ok(s)
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Starts the (killed) server on its port and store; waits until it listens.
    async fn start_again(&mut self) -> Result<(), Error> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("nats.log"))?;
        let mut child = Command::new(&self.bin)
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(self.dir.join("js"))
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()?;
        let port = self.port;
        let up = wait_until(Duration::from_secs(20), || async move {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
        })
        .await;
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("nats-server on port {port} exited: {status}").into());
        }
        self.child = Some(child);
        if !up {
            return Err(format!("nats-server on port {port} did not listen in 20 s").into());
        }
        Ok(())
    }

    /// SIGKILL, and waits until it is gone.
    async fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.start_kill();
            let _ = c.wait().await;
        }
    }
}

struct Cluster {
    nodes: Vec<Server>,
}

impl Cluster {
    async fn start(bin: &Path, dir: &Path) -> Result<Cluster, Error> {
        let routes_ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let client_ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let routes = routes_ports
            .iter()
            .map(|p| format!("nats://127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut nodes = Vec::new();
        for i in 0..3 {
            let extra = vec![
                "--cluster".into(),
                format!("nats://127.0.0.1:{}", routes_ports[i]),
                "--cluster_name".into(),
                "soak".into(),
                "--server_name".into(),
                format!("n{}", i + 1),
                "--routes".into(),
                routes.clone(),
            ];
            nodes.push(
                Server::start(bin, dir.join(format!("n{}", i + 1)), client_ports[i], extra).await?,
            );
        }
        Ok(Cluster { nodes })
    }

    fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Server::url).collect()
    }
}

async fn connect(urls: &[String]) -> Result<jetstream::Context, Error> {
    let addrs = urls
        .iter()
        .map(|u| u.parse::<async_nats::ServerAddr>())
        .collect::<Result<Vec<_>, _>>()?;
    let client = async_nats::ConnectOptions::new()
        .name("soak-driver")
        .reconnect_delay_callback(|n| Duration::from_millis((100 * n as u64).min(1000)))
        .connect(addrs)
        .await?;
    let mut js = jetstream::new(client);
    js.set_timeout(Duration::from_secs(3));
    Ok(js)
}

async fn create_stream(
    js: &jetstream::Context,
    config: jetstream::stream::Config,
) -> Result<(), Error> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match js.create_stream(config.clone()).await {
            Ok(_) => return Ok(()),
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => return Err(format!("cannot create stream {}: {e}", config.name).into()),
        }
    }
}

/// Pending plus ack-pending over every consumer of the stream (`None`: not readable).
async fn outstanding(js: &jetstream::Context, stream: &str) -> Option<u64> {
    let s = js.get_stream(stream).await.ok()?;
    let mut consumers = s.consumers();
    let mut total = 0;
    let mut any = false;
    while let Some(c) = consumers.next().await {
        let c = c.ok()?;
        total += c.num_pending + c.num_ack_pending as u64;
        any = true;
    }
    any.then_some(total)
}

fn cluster_ok(c: Option<&jetstream::stream::ClusterInfo>) -> bool {
    c.is_some_and(|c| c.leader.is_some() && c.replicas.iter().all(|r| r.current && !r.offline))
}

/// The server names of the stream's and the consumer's leaders.
async fn leaders(
    js: &jetstream::Context,
    stream: &str,
    consumer: &str,
) -> (Option<String>, Option<String>) {
    let Ok(mut s) = js.get_stream(stream).await else {
        return (None, None);
    };
    let stream_leader = s
        .info()
        .await
        .ok()
        .and_then(|i| i.cluster.as_ref())
        .and_then(|c| c.leader.clone());
    let consumer_leader = s
        .consumer_info(consumer)
        .await
        .ok()
        .and_then(|i| i.cluster)
        .and_then(|c| c.leader);
    (stream_leader, consumer_leader)
}

/// Whether the stream's and the consumer's replicas all have a leader and are current.
async fn caught_up(js: &jetstream::Context, stream: &str, consumer: &str) -> bool {
    let Ok(mut s) = js.get_stream(stream).await else {
        return false;
    };
    let stream_ok = s.info().await.is_ok_and(|i| cluster_ok(i.cluster.as_ref()));
    let consumer_ok = s
        .consumer_info(consumer)
        .await
        .is_ok_and(|i| cluster_ok(i.cluster.as_ref()));
    stream_ok && consumer_ok
}

// === jetrelay ===

struct Relay {
    name: String,
    tag: u8,
    admin: u16,
    child: Option<Child>,
    http: reqwest::Client,
}

struct RelaySpec<'a> {
    servers: &'a [String],
    source: String,
    ordering: &'a str,
    app_url: String,
    /// More `[delivery]` keys.
    delivery: String,
    /// More config, appended (whole tables: `[publish]`, `[dlq]`, ...).
    extra: String,
}

impl Relay {
    async fn start(
        dir: &Path,
        bin: &Path,
        name: &str,
        tag: u8,
        spec: &RelaySpec<'_>,
    ) -> Result<Relay, Error> {
        let admin = free_port();
        let servers = spec
            .servers
            .iter()
            .map(|s| format!("\"{s}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let toml = format!(
            "[nats]\nservers = [{servers}]\nname = \"soak-{name}\"\nreconnect_delay_ms = 100\nreconnect_delay_max_ms = 1000\n\
             [source]\n{source}\n\
             [consumer]\nack_wait_ms = {ACK_WAIT_MS}\nmax_deliver = -1\n\
             [delivery]\nmax_in_flight = {MAX_IN_FLIGHT}\nmax_buffered = {MAX_BUFFERED}\nmax_batch = {MAX_BATCH}\n\
             ordering = \"{ordering}\"\nretry_initial_ms = {RETRY_INITIAL_MS}\nretry_max_ms = {RETRY_MAX_MS}\nshutdown_grace_ms = 5000\n{delivery}\
             [http]\nurl = \"{url}\"\ntimeout_ms = {HTTP_TIMEOUT_MS}\nheaders = {{ \"X-Instance\" = \"{tag}\" }}\n\
             [admin]\nlisten = \"127.0.0.1:{admin}\"\n[log]\nlevel = \"info\"\n{extra}",
            source = spec.source,
            ordering = spec.ordering,
            url = spec.app_url,
            delivery = spec.delivery,
            extra = spec.extra,
        );
        let config = dir.join(format!("{name}.toml"));
        std::fs::write(&config, toml)?;
        let log = std::fs::File::create(dir.join(format!("{name}.log")))?;
        let child = Command::new(bin)
            .arg("run")
            .arg("--config")
            .arg(&config)
            .env_remove("JETRELAY_CONFIG")
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()?;
        Ok(Relay {
            name: name.to_string(),
            tag,
            admin,
            child: Some(child),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(2))
                .build()?,
        })
    }

    /// The `/ready` JSON, whatever the status code.
    async fn ready(&self) -> Option<serde_json::Value> {
        let r = self
            .http
            .get(format!("http://127.0.0.1:{}/ready", self.admin))
            .send()
            .await
            .ok()?;
        serde_json::from_slice(&r.bytes().await.ok()?).ok()
    }

    /// Waits (bounded) for `/ready` 200; a note when it did not come.
    async fn wait_ready(&mut self, timeout: Duration, notes: &mut Vec<String>) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.ready().await.is_some_and(|v| v["ready"] == true) {
                return true;
            }
            if let Some(status) = self.exited() {
                notes.push(format!(
                    "{} exited before it was ready: {status}",
                    self.name
                ));
                return false;
            }
            if Instant::now() >= deadline {
                notes.push(format!(
                    "{} not ready after {:.0} s: {}",
                    self.name,
                    secs(timeout),
                    self.ready()
                        .await
                        .map_or("no answer".into(), |v| v.to_string())
                ));
                return false;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn metrics(&self) -> Option<String> {
        let r = self
            .http
            .get(format!("http://127.0.0.1:{}/metrics", self.admin))
            .send()
            .await
            .ok()?;
        r.text().await.ok()
    }

    /// "held H (in flight F)" from the metrics, for the fault notes.
    async fn held(&self) -> String {
        match self.metrics().await {
            Some(m) => format!(
                "held {:.0}, in flight {:.0}",
                metric(&m, "jetrelay_buffered").unwrap_or(0.0),
                metric(&m, "jetrelay_in_flight").unwrap_or(0.0)
            ),
            None => "held ?".into(),
        }
    }

    /// The exit status, when the process has exited.
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    async fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.start_kill();
            let _ = c.wait().await;
        }
    }

    /// SIGTERM and waits (bounded); what the exit said when it was not clean.
    async fn stop(&mut self) -> Option<String> {
        let mut c = self.child.take()?;
        if let Ok(Some(status)) = c.try_wait() {
            return Some(format!("{} had exited by itself: {status}", self.name));
        }
        if let Some(pid) = c.id() {
            let _ = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .await;
        }
        match tokio::time::timeout(Duration::from_secs(10), c.wait()).await {
            Ok(Ok(s)) if s.success() => None,
            Ok(Ok(s)) => Some(format!("{} exited with {s} after SIGTERM", self.name)),
            _ => {
                let _ = c.start_kill();
                let _ = c.wait().await;
                Some(format!("{} did not exit within 10 s of SIGTERM", self.name))
            }
        }
    }
}

/// The sum of a metric's samples in Prometheus text.
fn metric(text: &str, name: &str) -> Option<f64> {
    let mut found = None;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        if !(rest.starts_with(' ') || rest.starts_with('{')) {
            continue;
        }
        if let Some(v) = rest.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) {
            *found.get_or_insert(0.0) += v;
        }
    }
    found
}

/// Samples `jetrelay_buffered` of the listed admin ports every 200 ms; keeps the peak.
fn sample_held(ports: Arc<Mutex<Vec<u16>>>, peak: Arc<AtomicU64>) -> Task<()> {
    Task(tokio::spawn(async move {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(1))
            .build()
            .expect("an HTTP client");
        loop {
            let list = ports.lock().unwrap().clone();
            for port in list {
                if let Ok(r) = http
                    .get(format!("http://127.0.0.1:{port}/metrics"))
                    .send()
                    .await
                    && let Ok(text) = r.text().await
                    && let Some(v) = metric(&text, "jetrelay_buffered")
                {
                    peak.fetch_max(v as u64, Ordering::Relaxed);
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }))
}

/// `jetrelay group <args> --server <url>`, tried again while the server is not ready
/// (a meta leader being elected) for up to ten seconds.
async fn group_cli(bin: &Path, url: &str, args: &[&str]) -> Result<(), Error> {
    let mut last = String::new();
    for _ in 0..20 {
        let out = Command::new(bin)
            .arg("group")
            .args(args)
            .args(["--server", url])
            .output()
            .await?;
        if out.status.success() {
            return Ok(());
        }
        last = String::from_utf8_lossy(&out.stderr).into_owned();
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(format!("group {}: {last}", args.join(" ")).into())
}

async fn create_static_group(
    bin: &Path,
    url: &str,
    stream: &str,
    group: &str,
) -> Result<(), Error> {
    let partitions = PARTITIONS.to_string();
    let args = [
        "static",
        "create",
        "balanced",
        stream,
        group,
        &partitions,
        "m1",
    ];
    group_cli(bin, url, &args).await
}

// === the publisher ===

#[derive(Default)]
struct PubStats {
    /// Ids whose PubAck came back.
    published: Vec<u64>,
    /// Ids given up on after 60 s of retries (they may still be stored).
    abandoned: Vec<u64>,
    retries: u64,
    longest_ms: u64,
}

struct Publisher {
    stop: Arc<AtomicBool>,
    stats: Arc<Mutex<PubStats>>,
    task: Task<()>,
}

impl Publisher {
    /// Publishes ids 0, 1, … at `rate` per second to `subject(id)`, each retried until
    /// the stream stores it (bounded).
    fn start(
        js: jetstream::Context,
        phase: &str,
        rate: u64,
        subject: impl Fn(u64) -> String + Send + 'static,
    ) -> Publisher {
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(Mutex::new(PubStats::default()));
        let (on, st, phase) = (stop.clone(), stats.clone(), phase.to_string());
        let task = tokio::spawn(async move {
            let mut pace = tokio::time::interval(Duration::from_micros(1_000_000 / rate.max(1)));
            pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut id = 0u64;
            while !on.load(Ordering::SeqCst) {
                pace.tick().await;
                let t = Instant::now();
                let mut headers = async_nats::HeaderMap::new();
                headers.insert("Nats-Msg-Id", format!("{phase}-{id}").as_str());
                let body = Bytes::from(id.to_string());
                let mut stored = false;
                while t.elapsed() < Duration::from_secs(60) {
                    let ok = match js
                        .publish_with_headers(subject(id), headers.clone(), body.clone())
                        .await
                    {
                        Ok(ack) => ack.await.is_ok(),
                        Err(_) => false,
                    };
                    if ok {
                        stored = true;
                        break;
                    }
                    st.lock().unwrap().retries += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                let mut s = st.lock().unwrap();
                s.longest_ms = s.longest_ms.max(t.elapsed().as_millis() as u64);
                if stored {
                    s.published.push(id);
                } else {
                    s.abandoned.push(id);
                }
                id += 1;
            }
        });
        Publisher {
            stop,
            stats,
            task: Task(task),
        }
    }

    fn published(&self) -> usize {
        self.stats.lock().unwrap().published.len()
    }

    /// Stops after the message being published; its stats.
    async fn finish(mut self) -> PubStats {
        self.stop.store(true, Ordering::SeqCst);
        let _ = (&mut self.task.0).await;
        std::mem::take(&mut *self.stats.lock().unwrap())
    }
}

// === phases ===

struct Ctx {
    nats_bin: PathBuf,
    relay_bin: PathBuf,
    dir: PathBuf,
    rate: u64,
    scale: f64,
    /// What jetrelay was built from (`--source`, from bench/soak).
    source: String,
}

/// A fault and when it happened: `at` the fault, `back` when it was over (the server
/// started again, the app listening again; = `at` for a killed member). `except`: a
/// killed instance, whose own answers do not count as recovery.
struct Fault {
    what: String,
    at: Instant,
    back: Instant,
    except: Option<u8>,
    held: String,
}

/// What a phase measured.
#[derive(Default)]
struct PhaseResult {
    key: String,
    title: String,
    faults_summary: String,
    took: f64,
    published: usize,
    abandoned: usize,
    delivered: usize,
    lost: usize,
    missing: Vec<u64>,
    dup_ids: usize,
    /// The ids answered 2xx more than once.
    dup_list: Vec<u64>,
    /// Phase f: duplicates that no SIGKILL between a 2xx and its marker explains.
    unexplained_dups: usize,
    dup_answers: u64,
    unexpected: usize,
    app_peak_in_flight: usize,
    peak_held: u64,
    recovery: Vec<String>,
    longest_gap: f64,
    details: Vec<String>,
    notes: Vec<String>,
    error: Option<String>,
}

/// Everything a running phase owns: dropping it kills every process.
struct Phase {
    key: String,
    title: String,
    dir: PathBuf,
    app: App,
    relays: Vec<Relay>,
    admin_ports: Arc<Mutex<Vec<u16>>>,
    peak_held: Arc<AtomicU64>,
    _sampler: Task<()>,
    faults: Vec<Fault>,
    notes: Vec<String>,
    t0: Instant,
    /// Whether jetrelay keeps per-subject order here (ordering "subject"/"partition").
    ordered: bool,
}

impl Phase {
    async fn new(ctx: &Ctx, key: &str, title: &str, normal_ms: (u64, u64)) -> Result<Phase, Error> {
        let dir = ctx.dir.join(key);
        std::fs::create_dir_all(&dir)?;
        let admin_ports = Arc::new(Mutex::new(Vec::new()));
        let peak_held = Arc::new(AtomicU64::new(0));
        say!("phase {key}: {title}");
        Ok(Phase {
            key: key.into(),
            title: title.into(),
            dir,
            app: App::start(normal_ms).await?,
            relays: Vec::new(),
            _sampler: sample_held(admin_ports.clone(), peak_held.clone()),
            admin_ports,
            peak_held,
            faults: Vec::new(),
            notes: Vec::new(),
            t0: Instant::now(),
            ordered: false,
        })
    }

    /// Starts a jetrelay instance (tag = its X-Instance) and waits until it is ready.
    async fn relay(
        &mut self,
        ctx: &Ctx,
        tag: u8,
        servers: &[String],
        source: String,
        ordering: &str,
    ) -> Result<usize, Error> {
        self.relay_with(ctx, tag, servers, source, ordering, String::new())
            .await
    }

    /// [`Phase::relay`] with more `[delivery]` keys.
    async fn relay_with(
        &mut self,
        ctx: &Ctx,
        tag: u8,
        servers: &[String],
        source: String,
        ordering: &str,
        delivery: String,
    ) -> Result<usize, Error> {
        let name = format!("relay{tag}");
        let spec = RelaySpec {
            servers,
            source,
            ordering,
            app_url: self.app.url(),
            delivery,
            extra: String::new(),
        };
        let mut r = Relay::start(&self.dir, &ctx.relay_bin, &name, tag, &spec).await?;
        self.admin_ports.lock().unwrap().push(r.admin);
        r.wait_ready(Duration::from_secs(60), &mut self.notes).await;
        say!("  {name} ready (admin port {})", r.admin);
        self.relays.push(r);
        Ok(self.relays.len() - 1)
    }

    fn fault(&mut self, what: String, at: Instant, except: Option<u8>, held: String) {
        say!("  fault: {what} ({held})");
        self.faults.push(Fault {
            what,
            at,
            back: Instant::now(),
            except,
            held,
        });
    }

    /// Waits until the publisher got some messages through and the app answered some.
    async fn flowing(&self, publisher: &Publisher, timeout: Duration) -> bool {
        let (p0, a0) = (publisher.published(), self.app.ok_count());
        wait_until(timeout, || async {
            publisher.published() > p0 + 10 && self.app.ok_count() > a0 + 10
        })
        .await
    }

    /// Stops publishing; waits (bounded) until every published id was answered 2xx and
    /// nothing is pending; stops the relays; counts.
    async fn finish(
        mut self,
        publisher: Publisher,
        js: &jetstream::Context,
        stream: &str,
        faults_summary: &str,
    ) -> PhaseResult {
        let publish_end = Instant::now();
        let stats = publisher.finish().await;
        say!(
            "  publishing stopped: {} published ({} abandoned), waiting for the app",
            stats.published.len(),
            stats.abandoned.len()
        );
        let drained = wait_until(Duration::from_secs(180), || async {
            let r = self.app.shared.rec.lock().unwrap();
            stats.published.iter().all(|id| r.ok.contains_key(id))
        })
        .await;
        let drain_secs = secs(publish_end.elapsed());
        if !drained {
            self.notes
                .push("not every published id was answered 2xx within 180 s".into());
        }
        // Redeliveries of messages whose acks were lost come back within ack_wait:
        // wait until the server has nothing pending or unacknowledged.
        let settled = wait_until(Duration::from_secs(60), || async {
            outstanding(js, stream).await == Some(0) && self.app.in_flight() == 0
        })
        .await;
        if !settled {
            self.notes.push(format!(
                "the consumer still had pending or unacknowledged messages 60 s after the app had them all ({:?})",
                outstanding(js, stream).await
            ));
        }
        tokio::time::sleep(Duration::from_millis(ACK_WAIT_MS / 2)).await;
        // The instances still running must be ready, then stop cleanly.
        for r in &mut self.relays {
            if r.child.is_none() {
                continue;
            }
            if let Some(status) = r.exited() {
                self.notes
                    .push(format!("{} exited unexpectedly: {status}", r.name));
                continue;
            }
            let ready = r.ready().await;
            if !ready.as_ref().is_some_and(|v| v["ready"] == true) {
                self.notes.push(format!(
                    "{} not ready at the end: {}",
                    r.name,
                    ready.map_or("no answer".into(), |v| v.to_string())
                ));
            }
        }
        let pinned: Vec<String> = {
            let mut v = Vec::new();
            for r in &self.relays {
                if r.child.is_some()
                    && let Some(j) = r.ready().await
                    && j["pinned"] == true
                {
                    v.push(r.name.clone());
                }
            }
            v
        };
        for r in &mut self.relays {
            if let Some(problem) = r.stop().await {
                self.notes.push(problem);
            }
        }
        let took = secs(self.t0.elapsed());

        let rec = self.app.shared.rec.lock().unwrap();
        let published: HashSet<u64> = stats.published.iter().copied().collect();
        let missing: Vec<u64> = stats
            .published
            .iter()
            .copied()
            .filter(|id| !rec.ok.contains_key(id))
            .collect();
        let delivered = stats.published.len() - missing.len();
        let dup_list: Vec<u64> = rec
            .ok
            .iter()
            .filter(|(_, n)| **n > 1)
            .map(|(id, _)| *id)
            .collect();
        let dup_ids = dup_list.len();
        let dup_answers: u64 = rec
            .ok
            .values()
            .map(|&n| u64::from(n.saturating_sub(1)))
            .sum();
        let unexpected = rec.ok.keys().filter(|id| !published.contains(id)).count();
        let first_ok = rec.ok_times.first().map_or(self.t0, |(t, _)| *t);
        drop(rec);
        let longest_gap = secs(self.app.longest_gap(first_ok, publish_end));
        let mut recovery = Vec::new();
        let mut details = Vec::new();
        for f in &self.faults {
            let resumed = self.app.ok_after(f.back, f.except);
            // From the fault to 5 s after delivery resumed (not past the last answer).
            let gap = resumed.map(|r| {
                let end = (r + Duration::from_secs(5)).min(self.app.last_ok().unwrap_or(r));
                secs(self.app.longest_gap(f.at, end.max(r)))
            });
            let resumed_s = resumed.map(|t| secs(t.duration_since(f.back)));
            let down = secs(f.back.duration_since(f.at));
            recovery.push(resumed_s.map_or("never".into(), |r| format!("{r:.1} s")));
            details.push(format!(
                "{}: at {:.1} s, {}; {}delivery resumed {} after it; longest gap between 2xx answers from the fault to 5 s after that {}",
                f.what,
                secs(f.at.duration_since(self.t0)),
                f.held,
                if down > 0.05 {
                    format!("over after {down:.1} s; ")
                } else {
                    String::new()
                },
                resumed_s.map_or("never".into(), |r| format!("{r:.2} s")),
                gap.map_or("–".into(), |g| format!("{g:.1} s"))
            ));
        }
        let rec = self.app.shared.rec.lock().unwrap();
        details.push(format!(
            "app: {} requests; {} answered 2xx ({} of them slowly, {}–{} ms), {} answered 503, {} reset without an answer, {} answered 503 after {} ms (past the {} ms HTTP timeout); highest Nats-Delivered {}",
            rec.requests,
            rec.ok_times.len(),
            rec.slow,
            SLOW_MS.0,
            SLOW_MS.1,
            rec.answered_503,
            rec.resets,
            rec.too_slow,
            TOO_SLOW_MS,
            HTTP_TIMEOUT_MS,
            rec.max_delivered
        ));
        if self.ordered {
            details.push(format!(
                "order: {} ids were first answered 2xx after a later id of the same subject{}",
                rec.out_of_order,
                if rec.out_of_order_samples.is_empty() {
                    String::new()
                } else {
                    format!(
                        " (first ones: {})",
                        rec.out_of_order_samples
                            .iter()
                            .map(|(t, id, hi, inst, d)| format!(
                                "id {id} after {hi} at {:.1} s by relay{inst}, Nats-Delivered {d}",
                                secs(t.duration_since(self.t0))
                            ))
                            .collect::<Vec<_>>()
                            .join("; ")
                    )
                }
            ));
        }
        if rec.ok_by_instance.len() > 1 {
            details.push(format!(
                "2xx answers per jetrelay instance: {}",
                rec.ok_by_instance
                    .iter()
                    .map(|(k, v)| format!("relay{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if self.relays.len() > 1 {
            details.push(format!(
                "pinned at the end: {}",
                if pinned.is_empty() {
                    "none".into()
                } else {
                    pinned.join(", ")
                }
            ));
        }
        details.push(format!(
            "publisher: {} retries, longest publish (with retries) {} ms; drain after publishing stopped {:.1} s",
            stats.retries, stats.longest_ms, drain_secs
        ));
        if rec.no_id > 0 {
            self.notes
                .push(format!("{} requests carried no id", rec.no_id));
        }
        let result = PhaseResult {
            key: self.key.clone(),
            title: self.title.clone(),
            faults_summary: faults_summary.into(),
            took,
            published: stats.published.len(),
            abandoned: stats.abandoned.len(),
            delivered,
            lost: missing.len(),
            missing: missing.iter().copied().take(20).collect(),
            dup_ids,
            dup_list,
            unexplained_dups: 0,
            dup_answers,
            unexpected,
            app_peak_in_flight: rec.max_in_flight,
            peak_held: self.peak_held.load(Ordering::Relaxed),
            recovery,
            longest_gap,
            details,
            notes: std::mem::take(&mut self.notes),
            error: None,
        };
        drop(rec);
        say!(
            "  {}: published {}, delivered {}, lost {}, duplicates {} ids ({} answers), took {:.0} s",
            result.key,
            result.published,
            result.delivered,
            result.lost,
            result.dup_ids,
            result.dup_answers,
            result.took
        );
        result
    }
}

fn durable_source(stream: &str, durable: &str) -> String {
    format!("stream = \"{stream}\"\nkind = \"durable\"\ndurable = \"{durable}\"")
}

/// a1 / a2: the app flaps — 503s, resets, slow answers, answers past the timeout, and
/// a period with its port closed.
async fn phase_flapping(ctx: &Ctx, key: &str, ordering: &str) -> Result<PhaseResult, Error> {
    let mut p = Phase::new(
        ctx,
        key,
        &format!("flapping app, durable consumer, ordering \"{ordering}\""),
        (5, 50),
    )
    .await?;
    p.ordered = ordering != "none";
    let server = Server::start(&ctx.nats_bin, p.dir.join("nats"), free_port(), vec![]).await?;
    let js = connect(&[server.url()]).await?;
    let stream = "SOAK_A";
    create_stream(
        &js,
        jetstream::stream::Config {
            name: stream.into(),
            subjects: vec!["soaka.*".into()],
            ..Default::default()
        },
    )
    .await?;
    p.relay(
        ctx,
        1,
        &[server.url()],
        durable_source(stream, "soak"),
        ordering,
    )
    .await?;
    let clock = Clock::new(ctx.scale);
    p.t0 = clock.t0;
    let publisher = Publisher::start(js.clone(), key, ctx.rate, |id| {
        format!("soaka.k{}", id % KEYS)
    });
    clock.at(10.0).await;
    say!("  app flaky");
    p.app.set_faults(Faults::FLAKY);
    clock.at(30.0).await;
    let held = p.relays[0].held().await;
    let at = Instant::now();
    p.app.down().await;
    say!("  app down (port closed)");
    tokio::time::sleep(clock.scaled(12.0)).await;
    p.app.up().await?;
    p.fault(
        format!("app not listening for {:.0} s", secs(clock.scaled(12.0))),
        at,
        None,
        held,
    );
    clock.at(60.0).await;
    say!("  app healthy");
    p.app.set_faults(Faults::default());
    clock.at(70.0).await;
    let summary = format!(
        "flaky {:.0} s (10% 503, 5% reset, 5% slow, 1% past the timeout), port closed {:.0} s",
        secs(clock.scaled(38.0)),
        secs(clock.scaled(12.0))
    );
    let r = p.finish(publisher, &js, stream, &summary).await;
    drop(server);
    Ok(r)
}

/// b: one nats-server SIGKILLed mid-stream and started again on its port and store.
async fn phase_server_restart(ctx: &Ctx) -> Result<PhaseResult, Error> {
    let mut p = Phase::new(
        ctx,
        "b",
        "nats-server SIGKILL + restart, durable consumer",
        (10, 100),
    )
    .await?;
    let mut server = Server::start(&ctx.nats_bin, p.dir.join("nats"), free_port(), vec![]).await?;
    let js = connect(&[server.url()]).await?;
    let stream = "SOAK_B";
    create_stream(
        &js,
        jetstream::stream::Config {
            name: stream.into(),
            subjects: vec!["soakb.*".into()],
            ..Default::default()
        },
    )
    .await?;
    p.relay(
        ctx,
        1,
        &[server.url()],
        durable_source(stream, "soak"),
        "none",
    )
    .await?;
    let clock = Clock::new(ctx.scale);
    p.t0 = clock.t0;
    let publisher = Publisher::start(js.clone(), "b", ctx.rate, |id| {
        format!("soakb.k{}", id % KEYS)
    });
    clock.at(20.0).await;
    let held = p.relays[0].held().await;
    let at = Instant::now();
    server.kill().await;
    say!("  nats-server killed");
    tokio::time::sleep(Duration::from_secs(3)).await;
    server.start_again().await?;
    p.fault("nats-server SIGKILL, down 3 s".into(), at, None, held);
    clock.at(60.0).await;
    let r = p
        .finish(publisher, &js, stream, "1 SIGKILL of the server, 3 s down")
        .await;
    drop(server);
    Ok(r)
}

/// Which live instance says it holds the pin (else the one that answered last).
async fn pinned_instance(p: &Phase) -> Option<usize> {
    for (i, r) in p.relays.iter().enumerate() {
        if r.child.is_some() && r.ready().await.is_some_and(|v| v["pinned"] == true) {
            return Some(i);
        }
    }
    None
}

/// c: a static group member run by two instances; the pinned one is SIGKILLed and
/// replaced, twice.
async fn phase_group_failover(ctx: &Ctx) -> Result<PhaseResult, Error> {
    let mut p = Phase::new(
        ctx,
        "c",
        "static group member, pinned + hot standby, ordering \"partition\"",
        (5, 30),
    )
    .await?;
    p.ordered = true;
    let server = Server::start(&ctx.nats_bin, p.dir.join("nats"), free_port(), vec![]).await?;
    let js = connect(&[server.url()]).await?;
    let stream = "SOAK_C";
    create_stream(
        &js,
        jetstream::stream::Config {
            name: stream.into(),
            subjects: vec!["soakc.*".into()],
            subject_transform: Some(jetstream::stream::SubjectTransform {
                source: "soakc.*".into(),
                destination: format!("{{{{partition({PARTITIONS},1)}}}}.soakc.{{{{wildcard(1)}}}}"),
            }),
            ..Default::default()
        },
    )
    .await?;
    create_static_group(&ctx.relay_bin, &server.url(), stream, "g").await?;
    let source =
        format!("stream = \"{stream}\"\nkind = \"static\"\ngroup = \"g\"\nmember = \"m1\"");
    let servers = [server.url()];
    let clock = Clock::new(ctx.scale);
    p.t0 = clock.t0;
    let publisher = Publisher::start(js.clone(), "c", ctx.rate, |id| {
        format!("soakc.k{}", id % KEYS)
    });
    p.relay(ctx, 1, &servers, source.clone(), "partition")
        .await?;
    if !p.flowing(&publisher, Duration::from_secs(30)).await {
        p.notes.push("relay1 delivered nothing within 30 s".into());
    }
    p.relay(ctx, 2, &servers, source.clone(), "partition")
        .await?;
    for (next_tag, (kill_at, replace_at)) in (3..).zip([(20.0, 30.0), (50.0, 60.0)]) {
        clock.at(kill_at).await;
        let victim = match pinned_instance(&p).await {
            Some(i) => i,
            None => {
                p.notes.push(format!(
                    "at {kill_at:.0} s no instance said it was pinned; killed the one that answered last"
                ));
                let last = p
                    .app
                    .shared
                    .rec
                    .lock()
                    .unwrap()
                    .ok_times
                    .last()
                    .map(|(_, t)| *t);
                p.relays
                    .iter()
                    .position(|r| r.child.is_some() && Some(r.tag) == last)
                    .unwrap_or(0)
            }
        };
        let held = p.relays[victim].held().await;
        let at = Instant::now();
        p.relays[victim].kill().await;
        let (name, tag) = (p.relays[victim].name.clone(), p.relays[victim].tag);
        p.admin_ports
            .lock()
            .unwrap()
            .retain(|&a| a != p.relays[victim].admin);
        p.fault(format!("SIGKILL of the pinned {name}"), at, Some(tag), held);
        clock.at(replace_at).await;
        p.relay(ctx, next_tag, &servers, source.clone(), "partition")
            .await?;
    }
    clock.at(80.0).await;
    let r = p
        .finish(
            publisher,
            &js,
            stream,
            "2 × SIGKILL of the pinned instance, replaced 10 s later",
        )
        .await;
    drop(server);
    Ok(r)
}

/// d: a rolling restart of a three-node cluster (R3 stream), consumer leader first.
async fn phase_rolling_restart(ctx: &Ctx) -> Result<PhaseResult, Error> {
    let mut p = Phase::new(
        ctx,
        "d",
        "rolling restart of a 3-node cluster (R3 stream), durable consumer",
        (10, 100),
    )
    .await?;
    let mut cluster = Cluster::start(&ctx.nats_bin, &p.dir).await?;
    let urls = cluster.urls();
    let js = connect(&urls).await?;
    let stream = "SOAK_D";
    create_stream(
        &js,
        jetstream::stream::Config {
            name: stream.into(),
            subjects: vec!["soakd.*".into()],
            num_replicas: 3,
            ..Default::default()
        },
    )
    .await?;
    p.relay(ctx, 1, &urls, durable_source(stream, "soak"), "none")
        .await?;
    let clock = Clock::new(ctx.scale);
    p.t0 = clock.t0;
    let publisher = Publisher::start(js.clone(), "d", ctx.rate, |id| {
        format!("soakd.k{}", id % KEYS)
    });
    clock.at(10.0).await;
    if !wait_until(Duration::from_secs(60), || caught_up(&js, stream, "soak")).await {
        p.notes
            .push("the stream and consumer were not all current before the restarts".into());
    }
    let leader = leaders(&js, stream, "soak")
        .await
        .1
        .unwrap_or_else(|| "n1".into());
    let mut order = vec![leader.clone()];
    order.extend(
        ["n1", "n2", "n3"]
            .into_iter()
            .filter(|n| *n != leader)
            .map(String::from),
    );
    let mut caught_up_after = Vec::new();
    for name in &order {
        let i: usize = name.trim_start_matches('n').parse::<usize>().unwrap_or(1) - 1;
        let (stream_leader, consumer_leader) = leaders(&js, stream, "soak").await;
        let role = match (
            stream_leader.as_deref() == Some(name),
            consumer_leader.as_deref() == Some(name),
        ) {
            (true, true) => " (leader of the stream and the consumer)",
            (false, true) => " (the consumer's leader)",
            (true, false) => " (the stream's leader)",
            (false, false) => "",
        };
        let held = p.relays[0].held().await;
        let at = Instant::now();
        cluster.nodes[i].kill().await;
        say!("  {name} killed");
        tokio::time::sleep(Duration::from_secs(2)).await;
        cluster.nodes[i].start_again().await?;
        p.fault(format!("SIGKILL of {name}{role}, down 2 s"), at, None, held);
        let back = Instant::now();
        let ok = wait_until(Duration::from_secs(90), || caught_up(&js, stream, "soak")).await;
        caught_up_after.push(if ok {
            format!("{name} {:.1} s", secs(back.elapsed()))
        } else {
            p.notes.push(format!(
                "after restarting {name} the replicas were not current within 90 s"
            ));
            format!("{name} >90 s")
        });
        // Keep consuming a while on the full cluster before the next node goes.
        tokio::time::sleep(clock.scaled(8.0)).await;
    }
    tokio::time::sleep(clock.scaled(10.0)).await;
    let mut r = p
        .finish(
            publisher,
            &js,
            stream,
            "each node SIGKILLed (2 s down) and caught up in turn",
        )
        .await;
    r.details.push(format!(
        "replicas of the stream and consumer current again after the restart: {}",
        caught_up_after.join(", ")
    ));
    drop(cluster);
    Ok(r)
}

// === the report ===

fn command_line(cmd: &str, args: &[&str]) -> String {
    std::process::Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .map(|o| {
            let mut s = String::from_utf8_lossy(&o.stdout).trim().to_string();
            if s.is_empty() {
                s = String::from_utf8_lossy(&o.stderr).trim().to_string();
            }
            s
        })
        .unwrap_or_default()
}

fn machine(nats_bin: &Path, relay_bin: &Path, source: &str) -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    let mem_kib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines().next().and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse::<u64>().ok())
            })
        })
        .unwrap_or(0);
    format!(
        "{} cores (`nproc`; {cpu}), {:.1} GiB RAM, Linux {}; {}; {} (release build of {source})",
        command_line("nproc", &[]),
        mem_kib as f64 / 1024.0 / 1024.0,
        command_line("uname", &["-r"]),
        command_line(&nats_bin.to_string_lossy(), &["--version"]),
        command_line(&relay_bin.to_string_lossy(), &["--version"]),
    )
}

fn report(ctx: &Ctx, results: &[PhaseResult], total: Duration) -> String {
    let mut md = String::from("# jetrelay soak\n\n");
    md.push_str(&format!(
        "Machine: {}. Everything on loopback.\n\n",
        machine(&ctx.nats_bin, &ctx.relay_bin, &ctx.source)
    ));
    md.push_str(&format!(
        "Each phase: its own nats-server(s) (file store), stream and recording HTTP app; a publisher sends uniquely numbered messages (id in the body and `Nats-Msg-Id`, each publish retried until its PubAck) at {} msg/s over {KEYS} subjects for the whole phase; then publishing stops and the driver waits until every published id was answered 2xx and the consumer has nothing pending or unacknowledged. jetrelay: `ack_wait_ms` {ACK_WAIT_MS}, `max_deliver` -1, `max_in_flight` {MAX_IN_FLIGHT}, `max_buffered` {MAX_BUFFERED}, `max_batch` {MAX_BATCH}, `http.timeout_ms` {HTTP_TIMEOUT_MS}, retries {RETRY_INITIAL_MS}–{RETRY_MAX_MS} ms, `info` JSON logs. Phase timeline scale {}; total {:.0} s.\n\n",
        ctx.rate,
        ctx.scale,
        secs(total)
    ));
    md.push_str("Lost = published − delivered (distinct ids answered 2xx). Duplicates = ids answered 2xx more than once (extra 2xx answers in brackets). Recovery = from the end of each fault (the server or app back; the kill itself for a group member) to the next 2xx answer (from another instance for a member kill). Longest gap = the longest time without any 2xx answer while publishing.\n\n");
    md.push_str("| phase | faults | took s | published | delivered | lost | duplicates | peak in flight at app / max_in_flight | peak held (sampled) / max_buffered | recovery after each fault | longest gap s |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    for r in results {
        if let Some(e) = &r.error {
            md.push_str(&format!(
                "| {} {} | could not run: {} | | | | | | | | | |\n",
                r.key,
                r.title,
                e.replace('|', "/").replace('\n', " ")
            ));
            continue;
        }
        md.push_str(&format!(
            "| {} {} | {} | {:.0} | {} | {} | **{}** | {} ({}) | {} / {MAX_IN_FLIGHT} | {} / {MAX_BUFFERED} | {} | {:.1} |\n",
            r.key,
            r.title,
            r.faults_summary,
            r.took,
            r.published,
            r.delivered,
            r.lost,
            r.dup_ids,
            r.dup_answers,
            r.app_peak_in_flight,
            r.peak_held,
            if r.recovery.is_empty() {
                "–".into()
            } else {
                r.recovery.join(", ")
            },
            r.longest_gap
        ));
    }
    let lost: usize = results.iter().map(|r| r.lost).sum();
    let failed = results.iter().filter(|r| r.error.is_some()).count();
    md.push_str(&format!(
        "\n**Result: {}.**\n",
        match (lost, failed) {
            (0, 0) => "no message lost in any phase".to_string(),
            (0, f) => format!("no message lost, but {f} phase(s) could not run"),
            (l, _) => format!("{l} message(s) LOST"),
        }
    ));
    md.push_str("\n## Details\n");
    for r in results {
        md.push_str(&format!("\n### {} — {}\n\n", r.key, r.title));
        if let Some(e) = &r.error {
            md.push_str(&format!("- could not run: {e}\n"));
        }
        for d in &r.details {
            md.push_str(&format!("- {d}\n"));
        }
        if r.abandoned > 0 || r.unexpected > 0 {
            md.push_str(&format!(
                "- {} publishes abandoned after 60 s of retries; {} ids answered that were not confirmed as published\n",
                r.abandoned, r.unexpected
            ));
        }
        if r.lost > 0 {
            md.push_str(&format!(
                "- LOST ids (first {}): {:?}\n",
                r.missing.len(),
                r.missing
            ));
        }
        for n in &r.notes {
            md.push_str(&format!("- note: {n}\n"));
        }
    }
    md
}

// === main ===

async fn run(args: &BTreeMap<String, String>) -> Result<i32, Error> {
    let get = |k: &str| {
        args.get(k)
            .cloned()
            .ok_or_else(|| format!("--{k}=... is required"))
    };
    let ctx = Ctx {
        nats_bin: get("nats-server")?.into(),
        relay_bin: get("relay")?.into(),
        dir: std::env::temp_dir().join(format!("jetrelay-soak-{}", std::process::id())),
        rate: args.get("rate").map_or(Ok(200), |v| v.parse())?,
        scale: args.get("scale").map_or(Ok(1.0), |v| v.parse())?,
        source: args
            .get("source")
            .cloned()
            .unwrap_or_else(|| "an unknown revision".into()),
    };
    std::fs::create_dir_all(&ctx.dir)?;
    say!("soak: work dir {}", ctx.dir.display());
    let only: Option<Vec<String>> = args
        .get("only")
        .map(|v| v.split(',').map(str::to_string).collect());
    let wanted = |k: &str| only.as_ref().is_none_or(|o| o.iter().any(|x| x == k));
    let started = Instant::now();
    let mut results = Vec::new();
    let phases: [(&str, &str); 7] = [
        ("a1", "flapping app, ordering \"none\""),
        ("a2", "flapping app, ordering \"subject\""),
        ("b", "nats-server restart"),
        ("c", "static group member failover"),
        ("d", "rolling restart of a 3-node cluster"),
        ("e", surfaces::TITLE),
        ("f", once::TITLE),
    ];
    for (key, title) in phases {
        if !wanted(key) {
            continue;
        }
        let r = match key {
            "a1" => phase_flapping(&ctx, key, "none").await,
            "a2" => phase_flapping(&ctx, key, "subject").await,
            "b" => phase_server_restart(&ctx).await,
            "c" => phase_group_failover(&ctx).await,
            "d" => phase_rolling_restart(&ctx).await,
            "f" => once::phase(&ctx).await,
            _ => surfaces::phase(&ctx).await,
        };
        results.push(r.unwrap_or_else(|e| {
            say!("phase {key} could not run: {e}");
            PhaseResult {
                key: key.into(),
                title: title.into(),
                error: Some(e.to_string()),
                ..PhaseResult::default()
            }
        }));
    }
    let md = report(&ctx, &results, started.elapsed());
    print!("{md}");
    if let Some(out) = args.get("out") {
        let out = Path::new(out);
        std::fs::create_dir_all(out)?;
        let stamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let path = out.join(format!("soak-{stamp}.md"));
        std::fs::write(&path, &md)?;
        say!("report written to {}", path.display());
    }
    let lost: usize = results.iter().map(|r| r.lost + r.unexplained_dups).sum();
    let failed = results.iter().any(|r| r.error.is_some());
    if lost == 0 && !failed && !args.contains_key("keep") {
        let _ = std::fs::remove_dir_all(&ctx.dir);
    } else {
        say!("logs and configs kept in {}", ctx.dir.display());
    }
    Ok(if lost > 0 {
        1
    } else if failed {
        2
    } else {
        0
    })
}

#[tokio::main]
async fn main() {
    START.get_or_init(Instant::now);
    RNG.store(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64),
        Ordering::Relaxed,
    );
    let args: BTreeMap<String, String> = std::env::args()
        .skip(1)
        .filter_map(|a| {
            let a = a.strip_prefix("--")?;
            Some(match a.split_once('=') {
                Some((k, v)) => (k.to_string(), v.to_string()),
                None => (a.to_string(), String::new()),
            })
        })
        .collect();
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("soak: {e}");
            std::process::exit(2);
        }
    };
    // On a signal the run is dropped, and with it every process it started.
    let code = tokio::select! {
        r = run(&args) => match r {
            Ok(code) => code,
            Err(e) => {
                eprintln!("soak: {e}");
                2
            }
        },
        _ = tokio::signal::ctrl_c() => { eprintln!("soak: interrupted"); 130 }
        _ = term.recv() => { eprintln!("soak: terminated"); 143 }
    };
    std::process::exit(code);
}
