//! The benchmark driver (`bench/run`): starts nats-server (file store) and a fast
//! HTTP sink, fills a 16-partition stream (1,000 keys) for each message size, and
//! runs every contender interleaved for several rounds:
//!
//!   a  bare    — the bare-minimum Rust loop (bench/src/bin/bare.rs)
//!   b  none    — jetrelay, durable source, ordering "none"
//!   c  group   — jetrelay, static group member owning all 16 partitions, "partition"
//!   d  subject — jetrelay, durable source, ordering "subject"
//!   e  python  — natsio-pcgroups + aiohttp forwarder (bench/py_forwarder.py)
//!
//! Per run: drain throughput, CPU seconds per 10,000 messages and peak RSS of the
//! contender process, then end-to-end p50/p99 latency at 1,000 msg/s. Also: start to
//! ready, and the handover time after SIGTERM and SIGKILL of a pinned instance.
//! Prints a markdown report and writes it to bench/results/.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_nats::jetstream;
use axum::body::Bytes;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

type Error = Box<dyn std::error::Error + Send + Sync>;

const PARTITIONS: u32 = 16;
const KEYS: u64 = 1000;
const LATENCY_RATE: u64 = 1000;
const LATENCY_MSGS: u64 = 3000;
const IN_FLIGHT: usize = 64;

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

// === the sink ===

#[derive(Default)]
struct SinkState {
    count: u64,
    first: Option<Instant>,
    last: Option<Instant>,
    latencies_us: Vec<u64>,
}

#[derive(Clone)]
struct Sink {
    addr: SocketAddr,
    state: Arc<Mutex<SinkState>>,
}

impl Sink {
    async fn start() -> Result<Sink, Error> {
        let state = Arc::new(Mutex::new(SinkState::default()));
        let s = state.clone();
        let router = axum::Router::new().route(
            "/sink",
            axum::routing::post(move |body: Bytes| {
                let s = s.clone();
                async move {
                    let at = Instant::now();
                    let mut st = s.lock().unwrap();
                    st.count += 1;
                    st.first.get_or_insert(at);
                    st.last = Some(at);
                    if body.len() >= 9 && body[8] == 1 {
                        let ts = u64::from_le_bytes(body[..8].try_into().unwrap_or_default());
                        st.latencies_us.push(now_ns().saturating_sub(ts) / 1000);
                    }
                    axum::http::StatusCode::OK
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(async move { axum::serve(listener, router).await });
        Ok(Sink { addr, state })
    }

    fn url(&self) -> String {
        format!("http://{}/sink", self.addr)
    }

    fn reset(&self) {
        *self.state.lock().unwrap() = SinkState::default();
    }

    fn count(&self) -> u64 {
        self.state.lock().unwrap().count
    }

    /// Milliseconds from `t` to the first message received since the last reset.
    fn first_ms_since(&self, t: Instant) -> f64 {
        self.state
            .lock()
            .unwrap()
            .first
            .map_or(0.0, |f| f.duration_since(t).as_secs_f64() * 1000.0)
    }
}

// === processes ===

fn cpu_seconds(pid: u32, ticks: f64) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the ")" of the command name: state is field 3; utime 14, stime 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let n = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (n(11) + n(12)) / ticks
}

fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

async fn signal(child: &Child, sig: &str) {
    if let Some(pid) = child.id() {
        let _ = Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .await;
    }
}

async fn wait_for<F: FnMut() -> bool>(
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

// === contenders ===

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Contender {
    Bare,
    BareFiltered,
    RelayNone,
    RelayGroup,
    RelaySubject,
    Python,
}

impl Contender {
    const ALL: [Contender; 6] = [
        Contender::Bare,
        Contender::BareFiltered,
        Contender::RelayNone,
        Contender::RelayGroup,
        Contender::RelaySubject,
        Contender::Python,
    ];

    fn label(self) -> &'static str {
        match self {
            Contender::Bare => "(a) bare Rust loop",
            Contender::BareFiltered => "(a') bare loop, 16 partition filters",
            Contender::RelayNone => "(b) jetrelay durable, ordering none",
            Contender::RelayGroup => "(c) jetrelay static group, ordering partition",
            Contender::RelaySubject => "(d) jetrelay durable, ordering subject",
            Contender::Python => "(e) Python natsio-pcgroups + aiohttp",
        }
    }
}

struct Env {
    nats_url: String,
    relay_bin: PathBuf,
    bare_bin: PathBuf,
    python: PathBuf,
    py_forwarder: PathBuf,
    js: jetstream::Context,
    ticks: f64,
    dir: PathBuf,
    nats_pid: u32,
}

struct Running {
    child: Child,
    ready_after: Duration,
}

/// A jetrelay config file's text and the admin port it listens on.
struct RelayConfig {
    text: String,
    admin: u16,
}

fn relay_config(
    env: &Env,
    source: &str,
    ordering: &str,
    sink: &Sink,
    ack_wait_ms: u64,
) -> RelayConfig {
    let level = std::env::var("BENCH_LOG_LEVEL").unwrap_or_else(|_| "info".into());
    let admin = free_port();
    let text = format!(
        "[nats]\nservers = [\"{}\"]\n[source]\n{source}\n[consumer]\nack_wait_ms = {ack_wait_ms}\nmax_deliver = -1\n\
         [delivery]\nmax_in_flight = {IN_FLIGHT}\nmax_buffered = 256\nmax_batch = 64\nordering = \"{ordering}\"\n\
         [http]\nurl = \"{}\"\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n[log]\nlevel = \"{level}\"\n",
        env.nats_url,
        sink.url()
    );
    RelayConfig { text, admin }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_or(0, |a| a.port())
}

async fn start_relay(env: &Env, config: &RelayConfig, name: &str) -> Result<Running, Error> {
    let path = env.dir.join(format!("{name}.toml"));
    std::fs::write(&path, &config.text)?;
    let started = Instant::now();
    let child = Command::new(&env.relay_bin)
        .arg("run")
        .arg("--config")
        .arg(&path)
        .env_remove("JETRELAY_CONFIG")
        .stdout(Stdio::null())
        .stderr(match std::env::var_os("BENCH_LOGS") {
            Some(d) => Stdio::from(std::fs::File::create(
                Path::new(&d).join(format!("{name}.log")),
            )?),
            None => Stdio::null(),
        })
        .kill_on_drop(true)
        .spawn()?;
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
    })
}

async fn start_line_ready(mut cmd: Command) -> Result<Running, Error> {
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
    })
}

async fn create_static_group(env: &Env, stream: &str, group: &str) -> Result<(), Error> {
    let out = Command::new(&env.relay_bin)
        .args([
            "group",
            "static",
            "create",
            "balanced",
            stream,
            group,
            &PARTITIONS.to_string(),
            "m1",
            "--server",
            &env.nats_url,
        ])
        .output()
        .await?;
    if !out.status.success() {
        return Err(format!("group create: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(())
}

async fn start_contender(
    env: &Env,
    c: Contender,
    stream: &str,
    run: usize,
    sink: &Sink,
) -> Result<Running, Error> {
    let durable = format!("d{run}");
    let group = format!("g{run}");
    match c {
        Contender::Bare | Contender::BareFiltered => {
            let mut cmd = Command::new(&env.bare_bin);
            cmd.args([
                &env.nats_url,
                stream,
                &durable,
                &sink.url(),
                &IN_FLIGHT.to_string(),
            ]);
            if c == Contender::BareFiltered {
                cmd.arg(PARTITIONS.to_string());
            }
            start_line_ready(cmd).await
        }
        Contender::RelayNone | Contender::RelaySubject => {
            let ordering = if c == Contender::RelayNone {
                "none"
            } else {
                "subject"
            };
            let source =
                format!("stream = \"{stream}\"\nkind = \"durable\"\ndurable = \"{durable}\"");
            start_relay(
                env,
                &relay_config(env, &source, ordering, sink, 30_000),
                &format!("run{run}"),
            )
            .await
        }
        Contender::RelayGroup => {
            create_static_group(env, stream, &group).await?;
            let source = format!(
                "stream = \"{stream}\"\nkind = \"static\"\ngroup = \"{group}\"\nmember = \"m1\""
            );
            let ordering =
                std::env::var("BENCH_GROUP_ORDERING").unwrap_or_else(|_| "partition".into());
            start_relay(
                env,
                &relay_config(env, &source, &ordering, sink, 30_000),
                &format!("run{run}"),
            )
            .await
        }
        Contender::Python => {
            create_static_group(env, stream, &group).await?;
            let mut cmd = Command::new(&env.python);
            cmd.arg(&env.py_forwarder)
                .args([&env.nats_url, stream, &group, "m1", &sink.url()]);
            start_line_ready(cmd).await
        }
    }
}

struct Sample {
    throughput: f64,
    cpu_per_10k: f64,
    server_cpu_per_10k: f64,
    rss_mib: f64,
    p50_ms: f64,
    p99_ms: f64,
    ready_ms: f64,
}

fn payload(size: usize, phase: u8) -> Bytes {
    let mut v = vec![b'x'; size.max(9)];
    v[..8].copy_from_slice(&now_ns().to_le_bytes());
    v[8] = phase;
    Bytes::from(v)
}

async fn fill(js: &jetstream::Context, prefix: &str, n: u64, size: usize) -> Result<(), Error> {
    let mut acks = Vec::with_capacity(1000);
    for i in 0..n {
        acks.push(
            js.publish(format!("{prefix}.k{}", i % KEYS), payload(size, 0))
                .await?,
        );
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

async fn run_one(
    env: &Env,
    c: Contender,
    stream: &str,
    prefix: &str,
    size: usize,
    run: usize,
    sink: &Sink,
) -> Result<Sample, Error> {
    sink.reset();
    let target = env
        .js
        .get_stream(stream)
        .await?
        .info()
        .await?
        .state
        .messages;
    let running = start_contender(env, c, stream, run, sink).await?;
    let pid = running.child.id().unwrap_or(0);
    let cpu0 = cpu_seconds(pid, env.ticks);
    let server0 = cpu_seconds(env.nats_pid, env.ticks);
    let timeout = if c == Contender::Python {
        Duration::from_secs(600)
    } else {
        Duration::from_secs(120)
    };
    wait_for("the drain", timeout, || sink.count() >= target).await?;
    let cpu = cpu_seconds(pid, env.ticks) - cpu0;
    let server_cpu = cpu_seconds(env.nats_pid, env.ticks) - server0;
    let (first, last) = {
        let st = sink.state.lock().unwrap();
        (st.first, st.last)
    };
    let secs = match (first, last) {
        (Some(f), Some(l)) => l.duration_since(f).as_secs_f64().max(1e-6),
        _ => 1e-6,
    };
    // Latency at a fixed, moderate rate.
    sink.reset();
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / LATENCY_RATE));
    let mut acks = Vec::new();
    for i in 0..LATENCY_MSGS {
        tick.tick().await;
        acks.push(
            env.js
                .publish(format!("{prefix}.k{}", i % KEYS), payload(size, 1))
                .await?,
        );
    }
    for a in acks {
        a.await?;
    }
    wait_for("the latency run", Duration::from_secs(120), || {
        sink.count() >= LATENCY_MSGS
    })
    .await?;
    let mut lat = sink.state.lock().unwrap().latencies_us.clone();
    lat.sort_unstable();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 - 1.0) * p).round() as usize)
            .copied()
            .unwrap_or(0) as f64
            / 1000.0
    };
    let rss_mib = peak_rss_kib(pid) as f64 / 1024.0;
    signal(&running.child, "-TERM").await;
    let mut child = running.child;
    let _ = tokio::time::timeout(Duration::from_secs(30), child.wait()).await;
    let _ = child.kill().await;
    // Leave the stream to the next contender: drop this run's consumers.
    let s = env.js.get_stream(stream).await?;
    for name in [format!("d{run}"), format!("g{run}-m1")] {
        let _ = s.delete_consumer(&name).await;
    }
    Ok(Sample {
        throughput: target as f64 / secs,
        cpu_per_10k: cpu / target as f64 * 10_000.0,
        server_cpu_per_10k: server_cpu / target as f64 * 10_000.0,
        rss_mib,
        p50_ms: pct(0.5),
        p99_ms: pct(0.99),
        ready_ms: running.ready_after.as_secs_f64() * 1000.0,
    })
}

/// Handover of a static member between two jetrelay instances: SIGTERM, then SIGKILL
/// of the pinned one, with a steady 200 msg/s; the time to the first message served
/// by the other instance.
async fn handover(
    env: &Env,
    stream: &str,
    prefix: &str,
    group: &str,
) -> Result<(f64, f64, u64), Error> {
    create_static_group(env, stream, group).await?;
    let (sink_a, sink_b) = (Sink::start().await?, Sink::start().await?);
    let source =
        format!("stream = \"{stream}\"\nkind = \"static\"\ngroup = \"{group}\"\nmember = \"m1\"");
    let ack_wait = 2000;
    let publishing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let publisher = {
        let (js, prefix, on) = (env.js.clone(), prefix.to_string(), publishing.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(5));
            let mut i = 0u64;
            while on.load(std::sync::atomic::Ordering::Relaxed) {
                tick.tick().await;
                let _ = js
                    .publish(format!("{prefix}.k{}", i % KEYS), payload(128, 0))
                    .await;
                i += 1;
            }
        })
    };
    let a = start_relay(
        env,
        &relay_config(env, &source, "partition", &sink_a, ack_wait),
        &format!("{group}-a"),
    )
    .await?;
    wait_for("A serves", Duration::from_secs(60), || sink_a.count() > 50).await?;
    let b = start_relay(
        env,
        &relay_config(env, &source, "partition", &sink_b, ack_wait),
        &format!("{group}-b"),
    )
    .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    sink_b.reset();
    let t = Instant::now();
    signal(&a.child, "-TERM").await;
    wait_for("B serves after SIGTERM", Duration::from_secs(30), || {
        sink_b.count() > 0
    })
    .await?;
    let term = sink_b.first_ms_since(t);
    let mut a_child = a.child;
    let _ = a_child.wait().await;
    let a2 = start_relay(
        env,
        &relay_config(env, &source, "partition", &sink_a, ack_wait),
        &format!("{group}-a2"),
    )
    .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    sink_a.reset();
    let t = Instant::now();
    signal(&b.child, "-KILL").await;
    wait_for("A serves after SIGKILL", Duration::from_secs(30), || {
        sink_a.count() > 0
    })
    .await?;
    let kill = sink_a.first_ms_since(t);
    publishing.store(false, std::sync::atomic::Ordering::Relaxed);
    let _ = publisher.await;
    signal(&a2.child, "-TERM").await;
    let mut a2c = a2.child;
    let _ = a2c.wait().await;
    Ok((term, kill, ack_wait))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() { 0.0 } else { v[v.len() / 2] }
}

fn machine() -> String {
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

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args: BTreeMap<String, String> = std::env::args()
        .skip(1)
        .filter_map(|a| {
            a.strip_prefix("--")
                .and_then(|a| a.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect();
    let get = |k: &str| {
        args.get(k)
            .cloned()
            .ok_or_else(|| format!("--{k}=... is required"))
    };
    let n: u64 = args.get("n").map_or(Ok(20_000), |v| v.parse())?;
    let rounds: usize = args.get("rounds").map_or(Ok(3), |v| v.parse())?;
    let sizes: Vec<usize> = args
        .get("sizes")
        .map_or("128,1024", String::as_str)
        .split(',')
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let only: Option<Vec<String>> = args
        .get("only")
        .map(|v| v.split(',').map(str::to_string).collect());
    let dir = std::env::temp_dir().join(format!("jetrelay-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;

    let nats_bin = get("nats-server")?;
    let mut nats = Command::new(&nats_bin)
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
    let env = Env {
        nats_url,
        relay_bin: get("relay")?.into(),
        bare_bin: get("bare")?.into(),
        python: get("python")?.into(),
        py_forwarder: get("py-forwarder")?.into(),
        js: jetstream::new(client),
        ticks,
        dir: dir.clone(),
        nats_pid: nats.id().unwrap_or(0),
    };
    let sink = Sink::start().await?;
    let contenders: Vec<Contender> = Contender::ALL
        .into_iter()
        .filter(|c| {
            only.as_ref()
                .is_none_or(|o| o.iter().any(|x| format!("{c:?}").eq_ignore_ascii_case(x)))
        })
        .collect();

    let mut results: BTreeMap<(usize, Contender), Vec<Sample>> = BTreeMap::new();
    let mut run = 0;
    for &size in &sizes {
        let stream = format!("BENCH{size}");
        let prefix = format!("bench{size}");
        env.js
            .create_stream(jetstream::stream::Config {
                name: stream.clone(),
                subjects: vec![format!("{prefix}.*")],
                subject_transform: Some(jetstream::stream::SubjectTransform {
                    source: format!("{prefix}.*"),
                    destination: format!(
                        "{{{{partition({PARTITIONS},1)}}}}.{prefix}.{{{{wildcard(1)}}}}"
                    ),
                }),
                ..Default::default()
            })
            .await?;
        eprintln!("filling {stream} with {n} messages of {size} B");
        fill(&env.js, &prefix, n, size).await?;
        for round in 1..=rounds {
            for &c in &contenders {
                run += 1;
                eprintln!("size {size} round {round}: {}", c.label());
                let s = run_one(&env, c, &stream, &prefix, size, run, &sink).await?;
                eprintln!(
                    "  {:.0} msg/s, {:.3} CPU s/10k (server {:.3}), {:.1} MiB, p50 {:.2} ms, p99 {:.2} ms, ready {:.0} ms",
                    s.throughput,
                    s.cpu_per_10k,
                    s.server_cpu_per_10k,
                    s.rss_mib,
                    s.p50_ms,
                    s.p99_ms,
                    s.ready_ms
                );
                results.entry((size, c)).or_default().push(s);
            }
        }
    }
    let (mut terms, mut kills, mut ack_wait) = (Vec::new(), Vec::new(), 0);
    for round in 1..=rounds {
        let (t, k, a) = handover(
            &env,
            &format!("BENCH{}", sizes[0]),
            &format!("bench{}", sizes[0]),
            &format!("handover{round}"),
        )
        .await?;
        eprintln!("handover round {round}: SIGTERM {t:.0} ms, SIGKILL {k:.0} ms");
        terms.push(t);
        kills.push(k);
        ack_wait = a;
    }
    let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    let (term_max, kill_max) = (max(&terms), max(&kills));
    let (term_ms, kill_ms) = (median(&mut terms), median(&mut kills));

    // === the report ===
    let mut md = String::new();
    md.push_str(&format!(
        "# jetrelay benchmark\n\nMachine: {}; nats-server {nats_version} (file store) on loopback. {rounds} rounds, contenders interleaved; {n} messages pre-filled per size over {PARTITIONS} partitions and {KEYS} keys; {IN_FLIGHT} requests in flight for every Rust contender; latency at {LATENCY_RATE} msg/s ({LATENCY_MSGS} messages). Medians, with min–max for throughput; jetrelay logs one JSON line per message at `info`, as deployed.\n\n",
        machine()
    ));
    md.push_str("| size | contender | throughput msg/s (min–max) | × (a) | p50 ms | p99 ms | CPU s / 10k msgs | nats-server CPU s / 10k | peak RSS MiB |\n|---|---|---|---|---|---|---|---|---|\n");
    for &size in &sizes {
        let base = results
            .get(&(size, Contender::Bare))
            .map(|v| median(&mut v.iter().map(|s| s.throughput).collect::<Vec<_>>()));
        for &c in &contenders {
            let Some(v) = results.get(&(size, c)) else {
                continue;
            };
            let mut t: Vec<f64> = v.iter().map(|s| s.throughput).collect();
            let (min, max) = (
                t.iter().copied().fold(f64::MAX, f64::min),
                t.iter().copied().fold(0.0, f64::max),
            );
            let tm = median(&mut t);
            let ratio = base.map_or("–".to_string(), |b| format!("{:.2}", tm / b));
            let m = |f: fn(&Sample) -> f64| median(&mut v.iter().map(f).collect::<Vec<_>>());
            let rss = v.iter().map(|s| s.rss_mib).fold(0.0, f64::max);
            md.push_str(&format!(
                "| {size} B | {} | {tm:.0} ({min:.0}–{max:.0}) | {ratio} | {:.2} | {:.2} | {:.3} | {:.3} | {rss:.1} |\n",
                c.label(),
                m(|s| s.p50_ms),
                m(|s| s.p99_ms),
                m(|s| s.cpu_per_10k),
                m(|s| s.server_cpu_per_10k)
            ));
        }
    }
    let ready: Vec<f64> = results
        .iter()
        .filter(|((_, c), _)| *c == Contender::RelayNone)
        .flat_map(|(_, v)| v.iter().map(|s| s.ready_ms))
        .collect();
    let mut ready = ready;
    md.push_str(&format!(
        "\nStart to `/ready` (jetrelay, NATS up, consumer created): median {:.0} ms.\n\nHandover of a pinned static member (ack_wait {ack_wait} ms, so pin timeout {ack_wait} ms), first message served by the other instance (median, max of {rounds}): after SIGTERM {term_ms:.0} ms ({term_max:.0}); after SIGKILL {kill_ms:.0} ms ({kill_max:.0}).\n",
        median(&mut ready)
    ));
    print!("{md}");
    if let Some(out) = args.get("out") {
        let out = Path::new(out);
        std::fs::create_dir_all(out)?;
        let stamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        std::fs::write(out.join(format!("{stamp}.md")), &md)?;
        std::fs::write(out.join("latest.md"), &md)?;
    }
    let _ = nats.kill().await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
