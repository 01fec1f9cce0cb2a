//! What the benchmark drivers share (`bench/run`: src/main.rs; `bench/batch`:
//! src/bin/batch.rs; `bench/outputs`: src/bin/outputs.rs; `bench/dlq`: src/bin/dlq.rs):
//! the NATS server, the HTTP sink that timestamps what it receives (and may answer
//! with outputs to publish), the message payload, processes and their CPU and memory,
//! the quiet-machine wait, jetrelay's config, start and metrics, the latency run, the
//! statistics, the machine line and the report files.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_nats::jetstream;
use axum::body::Bytes;
use axum::http::HeaderMap;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

pub type Error = Box<dyn std::error::Error + Send + Sync>;

pub const PARTITIONS: u32 = 16;
pub const KEYS: u64 = 1000;
pub const LATENCY_RATE: u64 = 1000;
pub const LATENCY_MSGS: u64 = 3000;
/// Requests in flight for every Rust contender sending one message per request.
pub const IN_FLIGHT: usize = 64;

/// The request header by which jetrelay says how many messages a batch carries.
pub const BATCH_SIZE_HEADER: &str = "jetrelay-batch-size";

pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

// === the payload ===

/// The publish time (20 decimal digits of Unix nanoseconds) and the phase (one digit:
/// 0 = pre-filled for the drain, 1 = the latency run) as text, then `x` up to `size`:
/// valid UTF-8, so that a batch carries it as `"data"`, unchanged.
const STAMP: usize = 21;

pub fn payload(size: usize, phase: u8) -> Bytes {
    let mut v = format!("{:020}{}", now_ns(), phase % 10).into_bytes();
    v.resize(size.max(STAMP), b'x');
    Bytes::from(v)
}

/// The publish time and phase at the start of `b`, if it holds a stamp.
pub fn stamp(b: &[u8]) -> Option<(u64, u8)> {
    let head = b.get(..STAMP)?;
    if !head.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let ns = head[..20].iter().fold(0u64, |n, d| {
        n.wrapping_mul(10).wrapping_add(u64::from(d - b'0'))
    });
    Some((ns, head[20] - b'0'))
}

/// The stamps of every message of a batch request's body (each message's `"data"`;
/// jetrelay writes compact JSON).
fn batch_stamps(body: &[u8]) -> Vec<(u64, u8)> {
    const KEY: &str = "\"data\":\"";
    let Ok(text) = std::str::from_utf8(body) else {
        return Vec::new();
    };
    text.match_indices(KEY)
        .filter_map(|(at, _)| stamp(&body[at + KEY.len()..]))
        .collect()
}

// === the sink ===

#[derive(Default)]
pub struct SinkState {
    /// Messages received (a batch request counts its `Jetrelay-Batch-Size`).
    pub count: u64,
    pub requests: u64,
    pub first: Option<Instant>,
    /// Messages in the first request (they arrive at `first`, so the rate is taken
    /// over the others).
    pub first_count: u64,
    pub last: Option<Instant>,
    /// Publish to arrival, per message of the latency run.
    pub latencies_us: Vec<u64>,
    /// OTLP exports taken on `/v1/traces` (the local collector), and their bytes.
    pub span_exports: u64,
    pub span_bytes: u64,
}

/// The `Content-Type` of an answer whose body lists messages for jetrelay to publish.
pub const PUBLISH_TYPE: &str = "application/vnd.jetrelay.publish+json";

/// What the sink answers.
#[derive(Clone, Debug, Default)]
pub enum Answer {
    /// 200 with an empty body.
    #[default]
    Plain,
    /// To a single-message request, 200 with [`PUBLISH_TYPE`] and `{"publish":
    /// [...]}`: one output per subject, each carrying the request's body as its
    /// `data` (so the stamp travels on). To a batch request, 200 `application/json`
    /// with `{"results": [{"id": ..., "action": "ack", "publish": [...]}]}`: a result
    /// per message of the request (by its `id`), each with one output per subject
    /// carrying that message's `data`.
    Publish(Vec<String>),
}

/// One output per subject, each carrying `data`.
fn outputs(subjects: &[String], data: &serde_json::Value) -> serde_json::Value {
    subjects
        .iter()
        .map(|s| serde_json::json!({"subject": s, "data": data}))
        .collect()
}

impl Answer {
    fn respond(&self, body: &[u8], batch: bool) -> axum::response::Response {
        use axum::response::IntoResponse;
        match self {
            Answer::Plain => axum::http::StatusCode::OK.into_response(),
            Answer::Publish(subjects) if batch => {
                let request: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
                let results: Vec<serde_json::Value> = request["messages"]
                    .as_array()
                    .map_or(&[][..], Vec::as_slice)
                    .iter()
                    .map(|m| {
                        serde_json::json!({
                            "id": m["id"],
                            "action": "ack",
                            "publish": outputs(subjects, &m["data"]),
                        })
                    })
                    .collect();
                (
                    [(axum::http::header::CONTENT_TYPE, "application/json")],
                    serde_json::json!({ "results": results }).to_string(),
                )
                    .into_response()
            }
            Answer::Publish(subjects) => {
                let data = serde_json::Value::from(String::from_utf8_lossy(body));
                (
                    [(axum::http::header::CONTENT_TYPE, PUBLISH_TYPE)],
                    serde_json::json!({ "publish": outputs(subjects, &data) }).to_string(),
                )
                    .into_response()
            }
        }
    }
}

/// A fast HTTP app: answers 200 at once (with an empty body, or outputs to publish:
/// [`Answer`]), and counts and times what it gets, per message (one per request, or a
/// batch).
#[derive(Clone)]
pub struct Sink {
    addr: SocketAddr,
    pub state: Arc<Mutex<SinkState>>,
    socket: Option<PathBuf>,
}

/// Serves `router` as `axum::serve` does (HTTP/1.1 and h2c, a task per connection),
/// with HTTP/2 connection and stream windows of `window` bytes.
async fn serve_h2_window(listener: tokio::net::TcpListener, router: axum::Router, window: u32) {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        tcp.set_nodelay(true).ok();
        let service = hyper_util::service::TowerToHyperService::new(router.clone());
        tokio::spawn(async move {
            let mut b = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            b.http2()
                .initial_connection_window_size(window)
                .initial_stream_window_size(window);
            let _ = b.serve_connection(TokioIo::new(tcp), service).await;
        });
    }
}

impl Sink {
    /// A sink answering a plain 200.
    pub async fn start() -> Result<Sink, Error> {
        Sink::start_with(Answer::Plain).await
    }

    pub async fn start_with(answer: Answer) -> Result<Sink, Error> {
        Sink::serve(answer, None, None).await
    }

    /// A sink answering a plain 200 on loopback TCP whose HTTP/2 connection and stream
    /// windows are `window` bytes (hyper's defaults, which `start` keeps, are 1 MiB):
    /// how much of h2c's cost is the app's flow control.
    pub async fn start_h2_window(window: u32) -> Result<Sink, Error> {
        Sink::serve(Answer::Plain, None, Some(window)).await
    }

    /// Serves on loopback TCP, or on the Unix socket `socket`; HTTP/1.1 and h2c (prior
    /// knowledge) alike.
    async fn serve(
        answer: Answer,
        socket: Option<PathBuf>,
        h2_window: Option<u32>,
    ) -> Result<Sink, Error> {
        let state = Arc::new(Mutex::new(SinkState::default()));
        let s = state.clone();
        let answer = Arc::new(answer);
        let router = axum::Router::new().route(
            "/sink",
            axum::routing::post(move |headers: HeaderMap, body: Bytes| {
                let (s, answer) = (s.clone(), answer.clone());
                async move {
                    let at = Instant::now();
                    let batch = headers
                        .get(BATCH_SIZE_HEADER)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.parse::<u64>().ok());
                    let (n, stamps) = match batch {
                        Some(n) => (n, batch_stamps(&body)),
                        None => (1, stamp(&body).into_iter().collect()),
                    };
                    let arrived = now_ns();
                    let mut st = s.lock().unwrap();
                    st.count += n;
                    st.requests += 1;
                    if st.first.is_none() {
                        st.first = Some(at);
                        st.first_count = n;
                    }
                    st.last = Some(at);
                    for (ts, phase) in stamps {
                        if phase == 1 {
                            st.latencies_us.push(arrived.saturating_sub(ts) / 1000);
                        }
                    }
                    drop(st);
                    answer.respond(&body, batch.is_some())
                }
            }),
        );
        // A local OpenTelemetry collector beside the app: takes every export.
        let s = state.clone();
        let router = router.route(
            "/v1/traces",
            axum::routing::post(move |body: Bytes| {
                let s = s.clone();
                async move {
                    let mut st = s.lock().unwrap();
                    st.span_exports += 1;
                    st.span_bytes += body.len() as u64;
                }
            }),
        );
        let (addr, socket) = match socket {
            None if let Some(window) = h2_window => {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
                let addr = listener.local_addr()?;
                tokio::spawn(serve_h2_window(listener, router, window));
                (addr, None)
            }
            None => {
                use axum::serve::ListenerExt;
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
                let addr = listener.local_addr()?;
                // As Go's and Node's servers do (axum leaves Nagle on): answers are
                // written whole, and h2c's go out back to back on one connection.
                let listener = listener.tap_io(|tcp| {
                    tcp.set_nodelay(true).ok();
                });
                tokio::spawn(async move { axum::serve(listener, router).await });
                (addr, None)
            }
            Some(path) => {
                let _ = std::fs::remove_file(&path);
                let listener = tokio::net::UnixListener::bind(&path)?;
                tokio::spawn(async move { axum::serve(listener, router).await });
                (SocketAddr::from(([127, 0, 0, 1], 80)), Some(path))
            }
        };
        Ok(Sink {
            addr,
            state,
            socket,
        })
    }

    /// A sink answering a plain 200 on the Unix socket `path` (HTTP/1.1 or h2c); its
    /// [`Sink::url`] names the host the requests carry.
    pub async fn start_unix(path: PathBuf) -> Result<Sink, Error> {
        Sink::serve(Answer::Plain, Some(path), None).await
    }

    /// The Unix socket it serves on, if it does.
    pub fn socket(&self) -> Option<&Path> {
        self.socket.as_deref()
    }

    pub fn url(&self) -> String {
        format!("http://{}/sink", self.addr)
    }

    /// The `otel.endpoint` of the collector on the sink's port (`POST /v1/traces`).
    pub fn otel_endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn reset(&self) {
        *self.state.lock().unwrap() = SinkState::default();
    }

    pub fn count(&self) -> u64 {
        self.state.lock().unwrap().count
    }

    pub fn requests(&self) -> u64 {
        self.state.lock().unwrap().requests
    }

    /// Messages per second from the first to the last arrival since the last reset.
    pub fn rate(&self) -> f64 {
        let st = self.state.lock().unwrap();
        match (st.first, st.last) {
            (Some(f), Some(l)) => {
                (st.count - st.first_count) as f64 / l.duration_since(f).as_secs_f64().max(1e-6)
            }
            _ => 0.0,
        }
    }

    /// When the first request since the last reset arrived.
    pub fn first(&self) -> Option<Instant> {
        self.state.lock().unwrap().first
    }

    /// Milliseconds from `t` to the first message received since the last reset.
    pub fn first_ms_since(&self, t: Instant) -> f64 {
        self.state
            .lock()
            .unwrap()
            .first
            .map_or(0.0, |f| f.duration_since(t).as_secs_f64() * 1000.0)
    }

    /// p50 and p99 of the latencies since the last reset, in ms.
    pub fn latency_ms(&self) -> (f64, f64) {
        let mut lat = self.state.lock().unwrap().latencies_us.clone();
        p50_p99_ms(&mut lat)
    }
}

/// p50 and p99 in ms of latencies in µs (0 for none).
pub fn p50_p99_ms(lat: &mut [u64]) -> (f64, f64) {
    lat.sort_unstable();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 - 1.0) * p).round() as usize)
            .copied()
            .unwrap_or(0) as f64
            / 1000.0
    };
    (pct(0.5), pct(0.99))
}

// === processes ===

pub fn cpu_seconds(pid: u32, ticks: f64) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the ")" of the command name: state is field 3; utime 14, stime 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let n = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (n(11) + n(12)) / ticks
}

/// CPU seconds of this process's children that have ended and been waited for
/// (`cutime` + `cstime`): what a command run to its end cost.
pub fn children_cpu_seconds(ticks: f64) -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let n = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (n(13) + n(14)) / ticks
}

/// CPU seconds the whole machine spent busy (every core, from /proc/stat): with the
/// CPU seconds of one's own processes, what others took meanwhile.
pub fn machine_busy_seconds(ticks: f64) -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return 0.0;
    };
    // cpu  user nice system idle iowait irq softirq steal ...
    let f: Vec<f64> = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap_or(0.0))
        .collect();
    let n = |i: usize| f.get(i).copied().unwrap_or(0.0);
    (n(0) + n(1) + n(2) + n(5) + n(6) + n(7)) / ticks
}

/// Waits, at most `max`, for a quiet machine: fewer than `cores` busy over half a
/// second (the caller's own processes idle meanwhile). Returns the cores last seen
/// busy.
pub async fn wait_quiet(ticks: f64, max: Duration, cores: f64) -> f64 {
    let deadline = Instant::now() + max;
    loop {
        let (b0, t0) = (machine_busy_seconds(ticks), Instant::now());
        tokio::time::sleep(Duration::from_millis(500)).await;
        let busy = (machine_busy_seconds(ticks) - b0) / t0.elapsed().as_secs_f64();
        if busy < cores || Instant::now() >= deadline {
            return busy;
        }
    }
}

/// Before each run the drivers wait (bounded) until fewer cores than this are busy:
/// other work on the machine skews the figures.
pub const QUIET_CORES: f64 = 0.2;

/// Waits at most `max` (0: not at all) for fewer than [`QUIET_CORES`] busy, and says
/// so when it took more than a second.
pub async fn quiet(ticks: f64, max: Duration) {
    if max.is_zero() {
        return;
    }
    let t = Instant::now();
    let busy = wait_quiet(ticks, max, QUIET_CORES).await;
    if t.elapsed() > Duration::from_secs(1) {
        eprintln!(
            "  waited {:.0} s for a quiet machine ({busy:.2} cores busy)",
            t.elapsed().as_secs_f64()
        );
    }
}

/// The sentence a report gives the quiet-machine wait.
pub fn quiet_note(max: Duration) -> String {
    if max.is_zero() {
        String::new()
    } else {
        format!(
            " Before each run the driver waited (at most {} s) for fewer than {QUIET_CORES} cores busy.",
            max.as_secs()
        )
    }
}

/// CPU over a window: of some processes, of the children waited for meanwhile, and
/// of the whole machine (so what other processes took).
pub struct CpuWindow {
    ticks: f64,
    pids: Vec<u32>,
    per_pid: Vec<f64>,
    children: f64,
    machine: f64,
    at: Instant,
}

/// What a [`CpuWindow`] saw.
pub struct CpuUse {
    /// CPU seconds per process, in the order given.
    pub per_pid: Vec<f64>,
    /// CPU seconds of the children that ended and were waited for in the window.
    pub children: f64,
    /// Cores busy with processes other than these and the children.
    pub others_cores: f64,
    /// Seconds.
    pub wall: f64,
}

impl CpuWindow {
    pub fn start(ticks: f64, pids: &[u32]) -> CpuWindow {
        CpuWindow {
            ticks,
            pids: pids.to_vec(),
            per_pid: pids.iter().map(|&p| cpu_seconds(p, ticks)).collect(),
            children: children_cpu_seconds(ticks),
            machine: machine_busy_seconds(ticks),
            at: Instant::now(),
        }
    }

    pub fn finish(&self) -> CpuUse {
        let per_pid: Vec<f64> = self
            .pids
            .iter()
            .zip(&self.per_pid)
            .map(|(&p, before)| cpu_seconds(p, self.ticks) - before)
            .collect();
        let children = children_cpu_seconds(self.ticks) - self.children;
        let wall = self.at.elapsed().as_secs_f64().max(1e-6);
        let own = per_pid.iter().sum::<f64>() + children;
        let others_cores =
            ((machine_busy_seconds(self.ticks) - self.machine - own) / wall).max(0.0);
        CpuUse {
            per_pid,
            children,
            others_cores,
            wall,
        }
    }
}

pub fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

pub async fn signal(child: &Child, sig: &str) {
    if let Some(pid) = child.id() {
        let _ = Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .await;
    }
}

/// SIGTERM, a bounded wait, then SIGKILL.
pub async fn stop(mut child: Child) {
    signal(&child, "-TERM").await;
    let _ = tokio::time::timeout(Duration::from_secs(30), child.wait()).await;
    let _ = child.kill().await;
}

pub async fn wait_for<F: FnMut() -> bool>(
    what: &str,
    timeout: Duration,
    mut f: F,
) -> Result<(), Error> {
    let deadline = Instant::now() + timeout;
    while !f() {
        if Instant::now() > deadline {
            return Err(format!("timed out waiting for {what}").into());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_or(0, |a| a.port())
}

pub struct Running {
    pub child: Child,
    pub ready_after: Duration,
    /// jetrelay's admin port (`None` for other contenders).
    pub admin: Option<u16>,
}

/// Starts `cmd` and waits for it to print `ready` on its stdout.
pub async fn start_line_ready(mut cmd: Command) -> Result<Running, Error> {
    let started = Instant::now();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let mut lines = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line()).await??;
    if line.as_deref() != Some("ready") {
        return Err(format!("contender said {line:?}").into());
    }
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok(Running {
        child,
        ready_after: started.elapsed(),
        admin: None,
    })
}

// === the environment ===

/// The nats-server (file store, loopback) and what every run needs.
pub struct Env {
    pub nats_url: String,
    pub nats_version: String,
    pub nats_pid: u32,
    pub relay_bin: PathBuf,
    pub js: jetstream::Context,
    /// Clock ticks per second (for /proc CPU times).
    pub ticks: f64,
    /// The work dir: the server's store, jetrelay configs.
    pub dir: PathBuf,
    nats: Child,
}

impl Env {
    /// Starts nats-server from `nats_bin` in a fresh work dir.
    pub async fn start(nats_bin: &str, relay_bin: PathBuf) -> Result<Env, Error> {
        let dir = std::env::temp_dir().join(format!("jetrelay-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let nats = Command::new(nats_bin)
            .args(["-a", "127.0.0.1", "-p", "-1", "-js", "-sd"])
            .arg(dir.join("js"))
            .arg("--ports_file_dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        let ports = dir.join(format!("nats-server_{}.ports", nats.id().unwrap_or(0)));
        let mut nats_url = String::new();
        wait_for("nats-server", Duration::from_secs(15), || {
            if let Ok(t) = std::fs::read_to_string(&ports)
                && let Ok(v) = serde_json::from_str::<serde_json::Value>(&t)
            {
                nats_url = v["nats"][0].as_str().unwrap_or_default().to_string();
            }
            !nats_url.is_empty()
        })
        .await?;
        let client = async_nats::connect(&nats_url).await?;
        let nats_version = client.server_info().version;
        let ticks: f64 = std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0);
        Ok(Env {
            nats_url,
            nats_version,
            nats_pid: nats.id().unwrap_or(0),
            relay_bin,
            js: jetstream::new(client),
            ticks,
            dir,
            nats,
        })
    }

    /// Stops nats-server and removes the work dir.
    pub async fn close(mut self) {
        let _ = self.nats.kill().await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

// === jetrelay ===

/// The `[delivery]` a run uses.
#[derive(Clone, Debug)]
pub struct Delivery {
    pub ordering: String,
    pub max_in_flight: usize,
    pub max_buffered: usize,
    /// The largest single pull.
    pub max_batch: usize,
    /// `batch_size` (1: one message per request, and no batch keys are written).
    pub batch_size: usize,
    pub batch_wait_ms: u64,
}

impl Delivery {
    /// One message per request, as `bench/run` runs every jetrelay contender.
    pub fn single(ordering: &str) -> Delivery {
        Delivery {
            ordering: ordering.to_string(),
            max_in_flight: IN_FLIGHT,
            max_buffered: 256,
            max_batch: 64,
            batch_size: 1,
            batch_wait_ms: 0,
        }
    }

    fn toml(&self) -> String {
        let mut t = format!(
            "[delivery]\nmax_in_flight = {}\nmax_buffered = {}\nmax_batch = {}\nordering = \"{}\"\n",
            self.max_in_flight, self.max_buffered, self.max_batch, self.ordering
        );
        if self.batch_size > 1 {
            t.push_str(&format!(
                "batch_size = {}\nbatch_wait_ms = {}\n",
                self.batch_size, self.batch_wait_ms
            ));
        }
        t
    }
}

/// A jetrelay config file's text and the admin port it listens on.
pub struct RelayConfig {
    pub text: String,
    pub admin: u16,
}

/// jetrelay's config: `source` is the `[source]` table's body; messages go to `url`.
/// The log level is `info` (one JSON line per message, as deployed) unless
/// `BENCH_LOG_LEVEL` says otherwise.
pub fn relay_config(
    env: &Env,
    source: &str,
    delivery: &Delivery,
    url: &str,
    ack_wait_ms: u64,
) -> RelayConfig {
    let level = std::env::var("BENCH_LOG_LEVEL").unwrap_or_else(|_| "info".into());
    let admin = free_port();
    let text = format!(
        "[nats]\nservers = [\"{}\"]\n[source]\n{source}\n[consumer]\nack_wait_ms = {ack_wait_ms}\nmax_deliver = -1\n\
         {}[http]\nurl = \"{url}\"\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n[log]\nlevel = \"{level}\"\n",
        env.nats_url,
        delivery.toml(),
    );
    RelayConfig { text, admin }
}

/// The `[source]` of a plain durable consumer.
pub fn durable_source(stream: &str, durable: &str) -> String {
    format!("stream = \"{stream}\"\nkind = \"durable\"\ndurable = \"{durable}\"")
}

/// Starts jetrelay with `config` (written as `<name>.toml`) and waits for `/ready`.
/// With `BENCH_LOGS=<dir>`, its log goes to `<dir>/<name>.log`.
pub async fn start_relay(env: &Env, config: &RelayConfig, name: &str) -> Result<Running, Error> {
    start_relay_bin(env, &env.relay_bin, config, name).await
}

/// [`start_relay`] with the jetrelay binary `bin` instead of the environment's (a
/// build to compare with).
/// `bin run --config path`, its stderr to `$BENCH_LOGS/<name>.log` when that is set
/// (else nowhere), killed when dropped.
pub fn spawn_relay(bin: &Path, path: &Path, name: &str) -> Result<Child, Error> {
    Ok(Command::new(bin)
        .arg("run")
        .arg("--config")
        .arg(path)
        .env_remove("JETRELAY_CONFIG")
        .stdout(Stdio::null())
        .stderr(match std::env::var_os("BENCH_LOGS") {
            Some(d) => Stdio::from(std::fs::File::create(
                Path::new(&d).join(format!("{name}.log")),
            )?),
            None => Stdio::null(),
        })
        .kill_on_drop(true)
        .spawn()?)
}

pub async fn start_relay_bin(
    env: &Env,
    bin: &Path,
    config: &RelayConfig,
    name: &str,
) -> Result<Running, Error> {
    let path = env.dir.join(format!("{name}.toml"));
    std::fs::write(&path, &config.text)?;
    let started = Instant::now();
    let child = spawn_relay(bin, &path, name)?;
    let http = reqwest::Client::new();
    let ready = format!("http://127.0.0.1:{}/ready", config.admin);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(r) = http.get(&ready).send().await
            && r.status().is_success()
        {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("{name} did not become ready").into());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(Running {
        child,
        ready_after: started.elapsed(),
        admin: Some(config.admin),
    })
}

/// jetrelay's `/metrics`: the values of `name` (a counter or gauge), by label set
/// (`""` without labels).
pub async fn relay_metric(admin: u16, name: &str) -> Result<Vec<(String, f64)>, Error> {
    let text = reqwest::get(format!("http://127.0.0.1:{admin}/metrics"))
        .await?
        .text()
        .await?;
    Ok(text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            let (labels, value) = match rest.strip_prefix('{') {
                Some(r) => r.split_once("} ")?,
                None => ("", rest.strip_prefix(' ')?),
            };
            Some((labels.to_string(), value.trim().parse().ok()?))
        })
        .collect())
}

/// Milliseconds until the consumer has nothing pending and nothing unacked (every
/// message delivered was acked); `None` after `timeout`.
pub async fn wait_acked(
    js: &jetstream::Context,
    stream: &str,
    durable: &str,
    timeout: Duration,
) -> Result<Option<f64>, Error> {
    let s = js.get_stream(stream).await?;
    let t = Instant::now();
    while t.elapsed() < timeout {
        let info = s.consumer_info(durable).await?;
        if info.num_ack_pending == 0 && info.num_pending == 0 {
            return Ok(Some(t.elapsed().as_secs_f64() * 1000.0));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(None)
}

// === publishing ===

/// One message to publish.
pub struct Msg {
    pub subject: String,
    pub headers: Option<async_nats::HeaderMap>,
    pub payload: Bytes,
}

/// How a fill went in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FillMode {
    /// Fast-ingest batches (the stream has `allow_batched`, nats-server 2.14+).
    Fast,
    /// Async publishes, 1,000 PubAcks outstanding (the server or the stream refused
    /// fast ingest).
    Async,
}

impl FillMode {
    pub fn describe(self) -> &'static str {
        match self {
            FillMode::Fast => "fast-ingest batches",
            FillMode::Async => "async publishes (the stream refused fast ingest)",
        }
    }
}

/// Publishes `n` messages of `size` bytes (phase 0) to `subject(i)`: fast-ingest
/// batches where the stream allows them, else async publishes ([`fill_msgs`]).
pub async fn fill(
    js: &jetstream::Context,
    subject: impl Fn(u64) -> String,
    n: u64,
    size: usize,
) -> Result<FillMode, Error> {
    fill_msgs(js, n, |i| Msg {
        subject: subject(i),
        headers: None,
        payload: payload(size, 0),
    })
    .await
}

/// Messages per fast-ingest batch of a fill.
const FILL_BATCH: u64 = 10_000;

/// Publishes the `n` messages `make(0..n)`, all to one stream, in order: as
/// fast-ingest batches of [`FILL_BATCH`] ([`fast_batch`]); when the first batch is
/// refused (a stream without `allow_batched`, a server before 2.14), as async
/// publishes instead. Any later failure is an error.
pub async fn fill_msgs(
    js: &jetstream::Context,
    n: u64,
    make: impl Fn(u64) -> Msg,
) -> Result<FillMode, Error> {
    let client = js.client();
    let mut from = 0;
    while from < n {
        let to = (from + FILL_BATCH).min(n);
        if to - from < 2 {
            // A batch has at least two messages.
            break;
        }
        let msgs: Vec<Msg> = (from..to).map(&make).collect();
        match fast_batch(&client, &msgs).await {
            Ok(()) => from = to,
            Err(FastFailure::Refused(why)) if from == 0 => {
                eprintln!("  fast ingest refused ({why}): filling with async publishes");
                return publish_async(js, 0..n, make)
                    .await
                    .map(|()| FillMode::Async);
            }
            Err(FastFailure::PlainPublish) if from == 0 => {
                eprintln!("  the server took a fast batch as a plain publish: async publishes");
                return publish_async(js, 1..n, make)
                    .await
                    .map(|()| FillMode::Async);
            }
            Err(FastFailure::Refused(why)) => return Err(why.into()),
            Err(FastFailure::PlainPublish) => {
                return Err("the server took a fast batch as a plain publish".into());
            }
            Err(FastFailure::Other(e)) => return Err(e),
        }
    }
    publish_async(js, from..n, make).await?;
    Ok(FillMode::Fast)
}

/// Async publishes of `make(i)` for `range`, 1,000 PubAcks outstanding at most.
async fn publish_async(
    js: &jetstream::Context,
    range: std::ops::Range<u64>,
    make: impl Fn(u64) -> Msg,
) -> Result<(), Error> {
    let mut acks = Vec::with_capacity(1000);
    for i in range {
        let m = make(i);
        let ack = match m.headers {
            Some(h) => js.publish_with_headers(m.subject, h, m.payload).await?,
            None => js.publish(m.subject, m.payload).await?,
        };
        acks.push(ack);
        if acks.len() == 1000 {
            for a in acks.drain(..) {
                a.await?;
            }
        }
    }
    for a in acks {
        a.await?;
    }
    Ok(())
}

// === fast ingest ===
//
// A fast-ingest batch (ADR-50, nats-server 2.14+; jetrelay's own is src/nats/fast.rs,
// whose top comment describes the wire): no batch headers, the protocol rides in each
// message's reply subject, `<inbox>.<flow>.fail.<batch seq>.<op>.$FI` (op 0 start, 1
// append, 2 commit, 4 ping), and the server answers on `<inbox>.>`: `{"type":"ack",
// "seq":N,"msgs":M}` once the first message is in and then every M messages
// persisted, `gap` / `err` frames that end the batch, and last a PubAck with `count`.
// The sender keeps at most two acks outstanding (it stalls while
// `acked + 2 × M <= sent`).

/// Messages per flow ack this publisher allows (the server may lower it).
const FAST_FLOW: u64 = 500;

/// Why a fast batch did not go through.
#[derive(Debug)]
pub enum FastFailure {
    /// The first message was refused: nothing of the batch is stored.
    Refused(String),
    /// The server answered the first message with a plain PubAck: it stored it as an
    /// ordinary publish (a server without fast ingest).
    PlainPublish,
    /// Anything else (the batch may be partly stored).
    Other(Error),
}

/// One answer on a fast batch's inbox.
enum FastReply {
    Ack {
        seq: u64,
        msgs: u64,
    },
    /// The final PubAck: the messages the batch took.
    End {
        count: Option<u64>,
    },
    Failed(String),
}

fn fast_reply(m: &async_nats::Message) -> FastReply {
    if let Some(status) = m.status {
        return FastReply::Failed(match u16::from(status) {
            503 => "no stream captures the subject".into(),
            code => format!("status {code}"),
        });
    }
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&m.payload) else {
        return FastReply::Failed(format!("not JSON: {}", String::from_utf8_lossy(&m.payload)));
    };
    match v["type"].as_str() {
        Some("ack") => FastReply::Ack {
            seq: v["seq"].as_u64().unwrap_or(0),
            msgs: v["msgs"].as_u64().unwrap_or(FAST_FLOW).max(1),
        },
        Some(_) => FastReply::Failed(v.to_string()),
        None if v.get("error").is_some() => FastReply::Failed(v["error"].to_string()),
        None => FastReply::End {
            count: v["count"].as_u64(),
        },
    }
}

/// Publishes `msgs` (at least two, all to one stream) as one fast-ingest batch, gap
/// mode `fail`, and waits for its PubAck; 10 s without an answer fails it (a ping
/// goes after 2 s, in case an ack was lost).
pub async fn fast_batch(client: &async_nats::Client, msgs: &[Msg]) -> Result<(), FastFailure> {
    use futures::{FutureExt, StreamExt};
    let other = |e: &dyn std::fmt::Display| FastFailure::Other(e.to_string().into());
    let len = msgs.len() as u64;
    if len < 2 {
        return Err(FastFailure::Other("a fast batch needs two messages".into()));
    }
    let inbox = client.new_inbox();
    let mut replies = client
        .subscribe(format!("{inbox}.>"))
        .await
        .map_err(|e| other(&e))?;
    let reply = |seq: u64, op: u8| format!("{inbox}.{FAST_FLOW}.fail.{seq}.{op}.$FI");
    let send = |seq: u64, op: u8| {
        let m = &msgs[seq as usize - 1];
        client.publish_with_reply_and_headers(
            m.subject.clone(),
            reply(seq, op),
            m.headers.clone().unwrap_or_default(),
            m.payload.clone(),
        )
    };
    let patience = Duration::from_secs(10);
    // The next answer, pinging (the highest sequence sent) after 2 s without one.
    let next = async |replies: &mut async_nats::Subscriber, sent: u64| {
        let deadline = Instant::now() + patience;
        loop {
            match tokio::time::timeout(Duration::from_secs(2), replies.next()).await {
                Ok(Some(m)) => return Ok(fast_reply(&m)),
                Ok(None) => return Err(other(&"the reply inbox closed")),
                Err(_) if Instant::now() >= deadline => {
                    return Err(other(&"no answer to the fast batch within 10 s"));
                }
                Err(_) => client
                    .publish_with_reply(
                        msgs[sent as usize - 1].subject.clone(),
                        reply(sent, 4),
                        Bytes::new(),
                    )
                    .await
                    .map_err(|e| other(&e))?,
            }
        }
    };
    send(1, 0).await.map_err(|e| other(&e))?;
    let mut flow = match next(&mut replies, 1).await? {
        FastReply::Ack { msgs, .. } => msgs,
        FastReply::Failed(why) => return Err(FastFailure::Refused(why)),
        FastReply::End { .. } => return Err(FastFailure::PlainPublish),
    };
    let (mut acked, mut sent) = (0, 1);
    let take = |r: FastReply, acked: &mut u64, flow: &mut u64| match r {
        FastReply::Ack { seq, msgs } => {
            *acked = (*acked).max(seq);
            *flow = msgs;
            Ok(None)
        }
        FastReply::End { count } => Ok(Some(count)),
        FastReply::Failed(why) => Err(FastFailure::Other(
            format!("the fast batch failed with {acked} known stored: {why}").into(),
        )),
    };
    for seq in 2..=len {
        send(seq, if seq == len { 2 } else { 1 })
            .await
            .map_err(|e| other(&e))?;
        sent = seq;
        if seq == len {
            break;
        }
        while let Some(Some(m)) = replies.next().now_or_never() {
            if take(fast_reply(&m), &mut acked, &mut flow)?.is_some() {
                return Err(other(&format!("the fast batch ended early, at {seq}")));
            }
        }
        while acked + 2 * flow <= sent {
            let r = next(&mut replies, sent).await?;
            if take(r, &mut acked, &mut flow)?.is_some() {
                return Err(other(&format!("the fast batch ended early, at {seq}")));
            }
        }
    }
    loop {
        let r = next(&mut replies, sent).await?;
        if let Some(count) = take(r, &mut acked, &mut flow)? {
            return match count {
                Some(c) if c == len => Ok(()),
                c => Err(other(&format!("the fast batch took {c:?} of {len}"))),
            };
        }
    }
}

/// The latency run: publishes `LATENCY_MSGS` messages of `size` bytes (phase 1) to
/// `subject(i)` at `LATENCY_RATE` and waits until the sink has them all; p50 and p99
/// in ms, publish to arrival.
pub async fn latency_run(
    js: &jetstream::Context,
    sink: &Sink,
    subject: impl Fn(u64) -> String,
    size: usize,
) -> Result<(f64, f64), Error> {
    sink.reset();
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / LATENCY_RATE));
    let mut acks = Vec::new();
    for i in 0..LATENCY_MSGS {
        tick.tick().await;
        acks.push(js.publish(subject(i), payload(size, 1)).await?);
    }
    for a in acks {
        a.await?;
    }
    wait_for("the latency run", Duration::from_secs(120), || {
        sink.count() >= LATENCY_MSGS
    })
    .await?;
    Ok(sink.latency_ms())
}

// === statistics and the report ===

pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() { 0.0 } else { v[v.len() / 2] }
}

/// The median, min and max of `f` over `v`.
pub fn spread<T>(v: &[T], f: impl Fn(&T) -> f64) -> (f64, f64, f64) {
    let mut x: Vec<f64> = v.iter().map(f).collect();
    let min = x.iter().copied().fold(f64::MAX, f64::min);
    let max = x.iter().copied().fold(0.0, f64::max);
    (median(&mut x), min, max)
}

/// `median× (min–max)` of the per-round ratios `num[i] / den[i]`; `–` when either
/// is empty.
pub fn ratio(num: &[f64], den: &[f64]) -> String {
    let r: Vec<f64> = num.iter().zip(den).map(|(a, b)| a / b.max(1e-9)).collect();
    if r.is_empty() {
        return "–".into();
    }
    let (m, lo, hi) = spread(&r, |x| *x);
    format!("{m:.2}× ({lo:.2}–{hi:.2})")
}

pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem = std::fs::read_to_string("/proc/meminfo")
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
        "{cores} cores ({cpu}), {:.0} GiB RAM, Linux",
        mem as f64 / 1024.0 / 1024.0
    )
}

/// `--key=value` arguments.
pub struct Args(BTreeMap<String, String>);

impl Args {
    pub fn parse() -> Args {
        Args(
            std::env::args()
                .skip(1)
                .filter_map(|a| {
                    a.strip_prefix("--")
                        .and_then(|a| a.split_once('='))
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                })
                .collect(),
        )
    }

    pub fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(String::as_str)
    }

    pub fn required(&self, k: &str) -> Result<&str, Error> {
        self.get(k)
            .ok_or_else(|| format!("--{k}=... is required").into())
    }

    pub fn num<T: std::str::FromStr>(&self, k: &str, default: T) -> Result<T, Error>
    where
        T::Err: std::error::Error + Send + Sync + 'static,
    {
        self.get(k).map_or(Ok(default), |v| Ok(v.parse()?))
    }

    /// A comma-separated list.
    pub fn list(&self, k: &str) -> Option<Vec<String>> {
        self.get(k)
            .map(|v| v.split(',').map(str::to_string).collect())
    }

    /// The contenders `--only=a,b` names (by their `Debug` name, any case), or all.
    pub fn only<T: Copy + std::fmt::Debug>(&self, all: &[T]) -> Vec<T> {
        let only = self.list("only");
        all.iter()
            .copied()
            .filter(|c| {
                only.as_ref()
                    .is_none_or(|o| o.iter().any(|x| format!("{c:?}").eq_ignore_ascii_case(x)))
            })
            .collect()
    }
}

/// With `--out`, writes the report as `<out>/<prefix><unix-seconds>.md` and says
/// where on stderr.
pub fn save_report(args: &Args, prefix: &str, md: &str) -> Result<(), Error> {
    if let Some(out) = args.get("out") {
        let path = write_report(Path::new(out), prefix, None, md)?;
        eprintln!("written to {}", path.display());
    }
    Ok(())
}

/// Writes the report to `<out>/<prefix><unix-seconds>.md` and, with `latest`, to
/// `<out>/<latest>`.
pub fn write_report(
    out: &Path,
    prefix: &str,
    latest: Option<&str>,
    md: &str,
) -> Result<PathBuf, Error> {
    std::fs::create_dir_all(out)?;
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let path = out.join(format!("{prefix}{stamp}.md"));
    std::fs::write(&path, md)?;
    if let Some(latest) = latest {
        std::fs::write(out.join(latest), md)?;
    }
    Ok(path)
}

/// The bare loop (src/bin/bare.rs) on a durable `durable` of `stream`, `IN_FLIGHT`
/// requests to `url`; with `partitions`, filtered on each partition like a group
/// member owning them all.
pub async fn start_bare(
    env: &Env,
    bare_bin: &Path,
    stream: &str,
    durable: &str,
    url: &str,
    partitions: Option<u32>,
) -> Result<Running, Error> {
    let mut cmd = Command::new(bare_bin);
    cmd.args([&env.nats_url, stream, durable, url, &IN_FLIGHT.to_string()]);
    if let Some(p) = partitions {
        cmd.arg(p.to_string());
    }
    start_line_ready(cmd).await
}
