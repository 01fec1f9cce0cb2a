//! The several-sources benchmark (`bench/sources`), three comparisons in one run, on
//! one nats-server (file store, loopback), streams pre-filled before each part:
//!
//! 1. `--only=fleet`: 8 durable sources in one jetrelay against 8 single-source
//!    jetrelays on the same 8 streams (`--streams`), `--messages` per stream, the fast
//!    Rust sink answering 200 at once: aggregate throughput (messages acked a second,
//!    from the first arrival at the app until every consumer has nothing pending and
//!    nothing unacked) and memory (the largest sum of the processes' VmRSS sampled
//!    every 50 ms, and the sum of their VmHWM at the end). A third arm runs the one
//!    process under `[budget] max_in_flight = --budget` (64: one source's worth):
//!    memory follows the requests in flight (one HTTP/1.1 connection each), not the
//!    number of sources.
//! 2. `--only=skip`: a source whose only route settles everything (`action = "ack"` on
//!    the stream's subjects) against the bare pull → ack loop (`bare` with no request),
//!    and beside it `bare` posting to the sink: acks a second, first delivery to drained
//!    (read from the consumer's info).
//! 3. `--only=stall`: a fast source with a stalled neighbour in one process (its path
//!    answers after `--stall-sleep-ms`, its `http.timeout_ms` is `--stall-timeout-ms`)
//!    against the fast source alone: the fast source's throughput over a stream of
//!    `--stall-messages` (a drain of several timeouts), and the ratio. No `[budget]`:
//!    each source has its own `max_in_flight`.
//! 4. `--only=when`: a source whose one route has a `when` over the body (CEL,
//!    `body.type == "order.created" && body.total > 10`, true for every message: each
//!    is parsed, evaluated and POSTed to the sink through the route) against the same
//!    source without routes, on a stream of `--messages` 1 KiB JSON bodies: msg/s
//!    (first arrival at the sink to drained) and jetrelay's CPU per message.
//!
//! Each arm runs `--rounds` times, interleaved, on fresh durables; medians. Prints a
//! markdown report and writes it to `<out>/sources-<unix-seconds>.md`. Never fails on
//! timing.
//!
//!   sources --nats-server=PATH --relay=PATH --bare=PATH [--out=DIR] [--messages=20000]
//!           [--streams=8] [--budget=64] [--rounds=1] [--only=fleet,skip,stall,when]
//!           [--stall-timeout-ms=2000]
//!           [--stall-sleep-ms=10000] [--stall-messages=100000]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use jetrelay_bench::{
    Args, CpuWindow, Delivery, Env, Error, IN_FLIGHT, KEYS, Msg, Running, Sink, fill, fill_msgs,
    free_port, machine, median, peak_rss_kib, save_report, spawn_relay, start_line_ready, stop,
    wait_for,
};
use tokio::process::Command;

/// The `[delivery]` every source of every arm takes: one message per request, 64 in
/// flight, no ordering (as `bench/run` runs jetrelay).
fn delivery() -> String {
    let d = Delivery::single("none");
    format!(
        "[delivery]\nmax_in_flight = {}\nmax_buffered = {}\nmax_batch = {}\nordering = \"none\"\n",
        d.max_in_flight, d.max_buffered, d.max_batch
    )
}

/// One `[sources.<name>]`: its table's body and its own sub-tables.
struct SourceText {
    name: String,
    stream: String,
    durable: String,
    /// Extra lines after the `[sources.<name>]` keys: its sub-tables and routes.
    extra: String,
}

/// A config of several sources, every one to `url` unless it says otherwise.
fn config(env: &Env, url: &str, sources: &[SourceText]) -> (String, u16) {
    let level = std::env::var("BENCH_LOG_LEVEL").unwrap_or_else(|_| "info".into());
    let admin = free_port();
    let mut t = format!(
        "[nats]\nservers = [\"{}\"]\n[consumer]\nack_wait_ms = 30000\nmax_deliver = -1\n{}[http]\nurl = \"{url}\"\n\
         [admin]\nlisten = \"127.0.0.1:{admin}\"\n[log]\nlevel = \"{level}\"\n",
        env.nats_url,
        delivery()
    );
    for s in sources {
        t.push_str(&format!(
            "[sources.{}]\nstream = \"{}\"\nkind = \"durable\"\ndurable = \"{}\"\n{}",
            s.name, s.stream, s.durable, s.extra
        ));
    }
    (t, admin)
}

/// Spawns a jetrelay per config, all at once, then waits until each is ready.
async fn start_all(env: &Env, configs: &[(String, u16)], tag: &str) -> Result<Vec<Running>, Error> {
    let mut children = Vec::new();
    for (i, (text, admin)) in configs.iter().enumerate() {
        let name = format!("{tag}-{i}");
        let path = env.dir.join(format!("{name}.toml"));
        std::fs::write(&path, text)?;
        children.push((spawn_relay(&env.relay_bin, &path, &name)?, *admin));
    }
    let http = reqwest::Client::new();
    let started = Instant::now();
    let mut out = Vec::new();
    for (child, admin) in children {
        loop {
            if let Ok(r) = http
                .get(format!("http://127.0.0.1:{admin}/ready"))
                .send()
                .await
                && r.status().is_success()
            {
                break;
            }
            if started.elapsed() > Duration::from_secs(30) {
                return Err(format!("{tag}: a jetrelay did not become ready").into());
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        out.push(Running {
            child,
            ready_after: started.elapsed(),
            admin: Some(admin),
        });
    }
    Ok(out)
}

fn vm_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// Samples the sum of the VmRSS of `pids` every 50 ms until dropped: the largest sum.
struct RssSampler {
    max: Arc<AtomicU64>,
    done: Arc<AtomicBool>,
}

impl RssSampler {
    fn start(pids: Vec<u32>) -> RssSampler {
        let (max, done) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let (m, d) = (max.clone(), done.clone());
        tokio::spawn(async move {
            while !d.load(SeqCst) {
                let sum: u64 = pids.iter().map(|&p| vm_rss_kib(p)).sum();
                m.fetch_max(sum, SeqCst);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        RssSampler { max, done }
    }

    fn finish(&self) -> u64 {
        self.done.store(true, SeqCst);
        self.max.load(SeqCst)
    }
}

/// Waits until every `(stream, durable)` has nothing pending and nothing unacked.
async fn drained(
    env: &Env,
    consumers: &[(String, String)],
    timeout: Duration,
) -> Result<(), Error> {
    let deadline = Instant::now() + timeout;
    for (stream, durable) in consumers {
        let s = env.js.get_stream(stream).await?;
        loop {
            let info = s.consumer_info(durable).await?;
            if info.num_ack_pending == 0 && info.num_pending == 0 {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("{stream}/{durable} did not drain").into());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    Ok(())
}

async fn filled(env: &Env, name: &str, n: u64) -> Result<(), Error> {
    let prefix = name.to_lowercase();
    env.js
        .create_stream(jetstream::stream::Config {
            name: name.to_string(),
            subjects: vec![format!("{prefix}.>")],
            allow_batch_publish: true,
            ..Default::default()
        })
        .await?;
    fill(&env.js, |i| format!("{prefix}.k{}", i % KEYS), n, 128).await?;
    Ok(())
}

/// What one arm of a run measured.
#[derive(Clone, Copy, Default)]
struct Figures {
    rate: f64,
    /// The largest sum of VmRSS sampled, KiB.
    rss_kib: u64,
    /// The sum of VmHWM at the end, KiB.
    hwm_kib: u64,
    /// Cores busy with other processes meanwhile.
    others: f64,
}

async fn stop_all(relays: Vec<Running>) {
    futures::future::join_all(relays.into_iter().map(|r| stop(r.child))).await;
}

/// Part 1's arms.
#[derive(Clone, Copy, Debug)]
enum Fleet {
    /// One process, every stream a source; under `[budget] max_in_flight` if given.
    Together(Option<u32>),
    /// One process per stream.
    Apart,
}

/// Part 1, one arm; durables `<tag>`.
async fn fleet_arm(
    env: &Env,
    sink: &Sink,
    streams: &[String],
    n: u64,
    arm: Fleet,
    tag: &str,
) -> Result<Figures, Error> {
    sink.reset();
    let source = |i: usize, s: &String| SourceText {
        name: format!("s{i}"),
        stream: s.clone(),
        durable: tag.to_string(),
        extra: String::new(),
    };
    let configs: Vec<(String, u16)> = if let Fleet::Together(budget) = arm {
        let all: Vec<SourceText> = streams
            .iter()
            .enumerate()
            .map(|(i, s)| source(i, s))
            .collect();
        let (mut text, admin) = config(env, &sink.url(), &all);
        if let Some(b) = budget {
            text.push_str(&format!("[budget]\nmax_in_flight = {b}\n"));
        }
        vec![(text, admin)]
    } else {
        streams
            .iter()
            .enumerate()
            .map(|(i, s)| config(env, &sink.url(), &[source(i, s)]))
            .collect()
    };
    let relays = start_all(env, &configs, tag).await?;
    let pids: Vec<u32> = relays.iter().filter_map(|r| r.child.id()).collect();
    let rss = RssSampler::start(pids.clone());
    let mut watched = pids.clone();
    watched.extend([env.nats_pid, std::process::id()]);
    let cpu = CpuWindow::start(env.ticks, &watched);
    let total = n * streams.len() as u64;
    wait_for("the sink", Duration::from_secs(600), || {
        sink.count() >= total
    })
    .await?;
    let consumers: Vec<(String, String)> = streams
        .iter()
        .map(|s| (s.clone(), tag.to_string()))
        .collect();
    drained(env, &consumers, Duration::from_secs(120)).await?;
    let end = Instant::now();
    let first = sink.first().ok_or("no arrival")?;
    let used = cpu.finish();
    let f = Figures {
        rate: total as f64 / end.duration_since(first).as_secs_f64().max(1e-6),
        rss_kib: rss.finish(),
        hwm_kib: pids.iter().map(|&p| peak_rss_kib(p)).sum(),
        others: used.others_cores,
    };
    stop_all(relays).await;
    Ok(f)
}

/// Acks a second of a consumer, from its first delivery to drained, read from its
/// info every 5 ms.
async fn ack_rate(env: &Env, stream: &str, durable: &str, n: u64) -> Result<f64, Error> {
    let s = env.js.get_stream(stream).await?;
    let deadline = Instant::now() + Duration::from_secs(600);
    let first = loop {
        if let Ok(info) = s.consumer_info(durable).await
            && info.delivered.stream_sequence > 0
        {
            break Instant::now();
        }
        if Instant::now() > deadline {
            return Err(format!("{stream}/{durable}: nothing delivered").into());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    drained(
        env,
        &[(stream.into(), durable.into())],
        Duration::from_secs(600),
    )
    .await?;
    Ok(n as f64 / first.elapsed().as_secs_f64().max(1e-6))
}

/// Part 2's arms.
#[derive(Clone, Copy, Debug)]
enum SkipArm {
    /// jetrelay, one source, one route: the stream's subjects, `action = "ack"`.
    Route,
    /// `bare` acking each message without a request.
    BareAck,
    /// `bare` posting each message to the sink, then acking.
    BarePost,
}

async fn skip_arm(
    env: &Env,
    bare: &Path,
    sink: &Sink,
    arm: SkipArm,
    n: u64,
    durable: &str,
) -> Result<f64, Error> {
    let running = match arm {
        SkipArm::Route => {
            let src = SourceText {
                name: "skip".into(),
                stream: "SKIP".into(),
                durable: durable.into(),
                extra: "[[sources.skip.routes]]\nsubjects = [\"skip.>\"]\naction = \"ack\"\n"
                    .into(),
            };
            start_all(env, &[config(env, &sink.url(), &[src])], durable).await?
        }
        SkipArm::BareAck | SkipArm::BarePost => {
            let url = match arm {
                SkipArm::BareAck => "none".to_string(),
                _ => sink.url(),
            };
            let mut cmd = Command::new(bare);
            cmd.args([&env.nats_url, "SKIP", durable, &url, &IN_FLIGHT.to_string()]);
            vec![start_line_ready(cmd).await?]
        }
    };
    let rate = ack_rate(env, "SKIP", durable, n).await?;
    stop_all(running).await;
    Ok(rate)
}

/// The app of part 3: `/fast` answers 200 at once (counted, its first arrival kept);
/// `/stall` answers 200 after `sleep`.
struct StallApp {
    url: String,
    fast: Arc<AtomicU64>,
    first: Arc<std::sync::Mutex<Option<Instant>>>,
    stalled: Arc<AtomicU64>,
}

impl StallApp {
    async fn start(sleep: Duration) -> Result<StallApp, Error> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let app = StallApp {
            url: format!("http://{}", listener.local_addr()?),
            fast: Arc::default(),
            first: Arc::default(),
            stalled: Arc::default(),
        };
        let (fast, first, stalled) = (app.fast.clone(), app.first.clone(), app.stalled.clone());
        let router = axum::Router::new()
            .route(
                "/fast",
                axum::routing::post(move || {
                    let (fast, first) = (fast.clone(), first.clone());
                    async move {
                        first.lock().unwrap().get_or_insert_with(Instant::now);
                        fast.fetch_add(1, SeqCst);
                    }
                }),
            )
            .route(
                "/stall",
                axum::routing::post(move || {
                    let stalled = stalled.clone();
                    async move {
                        stalled.fetch_add(1, SeqCst);
                        tokio::time::sleep(sleep).await;
                    }
                }),
            );
        tokio::spawn(async move { axum::serve(listener, router).await });
        Ok(app)
    }

    fn reset(&self) {
        self.fast.store(0, SeqCst);
        *self.first.lock().unwrap() = None;
        self.stalled.store(0, SeqCst);
    }
}

/// Part 3, one arm: the fast source's acks a second (its first arrival to drained),
/// and the requests the stalled path took meanwhile.
async fn stall_arm(
    env: &Env,
    app: &StallApp,
    n: u64,
    with_stalled: bool,
    timeout_ms: u64,
    durable: &str,
) -> Result<(f64, u64), Error> {
    app.reset();
    let mut sources = vec![SourceText {
        name: "fast".into(),
        stream: "FAST".into(),
        durable: durable.into(),
        extra: format!("[sources.fast.http]\nurl = \"{}/fast\"\n", app.url),
    }];
    if with_stalled {
        sources.push(SourceText {
            name: "stalled".into(),
            stream: "STALL".into(),
            durable: durable.into(),
            extra: format!(
                "[sources.stalled.http]\nurl = \"{}/stall\"\ntimeout_ms = {timeout_ms}\n",
                app.url
            ),
        });
    }
    let relays = start_all(
        env,
        &[config(env, &format!("{}/fast", app.url), &sources)],
        durable,
    )
    .await?;
    if with_stalled {
        // The neighbour stalls first: its requests hang before the fast one's start.
        wait_for("the stalled path", Duration::from_secs(30), || {
            app.stalled.load(SeqCst) > 0
        })
        .await?;
    }
    wait_for("the fast path", Duration::from_secs(600), || {
        app.fast.load(SeqCst) >= n
    })
    .await?;
    drained(
        env,
        &[("FAST".into(), durable.into())],
        Duration::from_secs(120),
    )
    .await?;
    let first = (*app.first.lock().unwrap()).ok_or("no arrival")?;
    let rate = n as f64 / first.elapsed().as_secs_f64().max(1e-6);
    let stalled = app.stalled.load(SeqCst);
    stop_all(relays).await;
    Ok((rate, stalled))
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

async fn fleet(env: &Env, args: &Args, n: u64, rounds: usize) -> Result<String, Error> {
    let count: usize = args.num("streams", 8)?;
    let budget: u32 = args.num("budget", IN_FLIGHT as u32)?;
    let streams: Vec<String> = (0..count).map(|i| format!("F{i}")).collect();
    for s in &streams {
        filled(env, s, n).await?;
    }
    let sink = Sink::start().await?;
    let arms = [
        (
            Fleet::Together(None),
            format!("one process, {count} sources"),
        ),
        (
            Fleet::Together(Some(budget)),
            format!("one process, {count} sources, `[budget] max_in_flight = {budget}`"),
        ),
        (Fleet::Apart, format!("{count} processes, one source each")),
    ];
    let mut figures = vec![Vec::new(); arms.len()];
    for round in 0..rounds {
        for (i, (arm, label)) in arms.iter().enumerate() {
            let f = fleet_arm(env, &sink, &streams, n, *arm, &format!("f{round}x{i}")).await?;
            eprintln!(
                "fleet round {round}, {label}: {:.0} msg/s, RSS {:.1} MiB (HWM {:.1})",
                f.rate,
                mib(f.rss_kib),
                mib(f.hwm_kib)
            );
            figures[i].push(f);
        }
    }
    let med =
        |v: &[Figures], f: fn(&Figures) -> f64| median(&mut v.iter().map(f).collect::<Vec<_>>());
    let mut md = format!(
        "## 1. {count} sources in one process against {count} processes\n\n{count} streams of {n} messages of 128 B, a durable source on each (`max_in_flight = {IN_FLIGHT}`, one message a request, `ordering = \"none\"`), the fast Rust sink answering 200 at once. msg/s: {} messages over the time from the first arrival at the sink until every consumer has nothing pending and nothing unacked. RSS: the largest sum of the jetrelay processes' VmRSS sampled every 50 ms; HWM: the sum of their VmHWM at the end. Other cores: busy with processes other than jetrelay, nats-server and this driver (the sink) meanwhile.\n\n| arm | msg/s | RSS MiB | HWM MiB | other cores |\n|---|---|---|---|---|\n",
        n * count as u64
    );
    for ((_, label), v) in arms.iter().zip(&figures) {
        md.push_str(&format!(
            "| {label} | {:.0} | {:.1} | {:.1} | {:.2} |\n",
            med(v, |f| f.rate),
            mib(med(v, |f| f.rss_kib as f64) as u64),
            mib(med(v, |f| f.hwm_kib as f64) as u64),
            med(v, |f| f.others)
        ));
    }
    let apart = &figures[2];
    md.push('\n');
    for (i, name) in [(0, "one process"), (1, "one process under the budget")] {
        let ratios: Vec<f64> = figures[i]
            .iter()
            .zip(apart)
            .map(|(a, b)| a.rate / b.rate.max(1e-9))
            .collect();
        md.push_str(&format!(
            "Throughput, {name} ÷ {count} processes: {:.2}× (per round {}; target ≥ 0.95×); memory {:.1} MiB against {:.1} MiB (target ≤ 30 MiB).\n",
            median(&mut ratios.clone()),
            ratios.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>().join(", "),
            mib(med(&figures[i], |f| f.rss_kib as f64) as u64),
            mib(med(apart, |f| f.rss_kib as f64) as u64),
        ));
    }
    md.push('\n');
    Ok(md)
}

async fn skip(env: &Env, bare: &Path, n: u64, rounds: usize) -> Result<String, Error> {
    // Every arm of every round drains the whole stream on its own durable.
    filled(env, "SKIP", n).await?;
    let sink = Sink::start().await?;
    let arms = [SkipArm::Route, SkipArm::BareAck, SkipArm::BarePost];
    let mut rates = vec![Vec::new(); arms.len()];
    for round in 0..rounds {
        for (i, arm) in arms.iter().enumerate() {
            sink.reset();
            let durable = format!("skip{round}x{i}");
            let r = skip_arm(env, bare, &sink, *arm, n, &durable).await?;
            eprintln!("skip round {round} {arm:?}: {r:.0} acks/s");
            rates[i].push(r);
        }
    }
    let m: Vec<f64> = rates.iter().map(|r| median(&mut r.clone())).collect();
    Ok(format!(
        "## 2. A route that settles without a request against the bare loop\n\nOne stream of {n} messages; each arm drains it on a fresh durable, {IN_FLIGHT} in flight. acks/s: {n} over the time from the consumer's first delivery to nothing pending and nothing unacked (its info read every 5 ms).\n\n| arm | acks/s | × bare pull → ack |\n|---|---|---|\n\
         | jetrelay, one route `subjects = [\"skip.>\"]`, `action = \"ack\"` | {:.0} | {:.2} |\n\
         | bare pull → ack (no request) | {:.0} | 1.00 |\n\
         | bare pull → POST to the sink → ack | {:.0} | {:.2} |\n\nSkip route ÷ bare pull → ack: {:.2}× (target ≥ 0.9×).\n\n",
        m[0],
        m[0] / m[1].max(1e-9),
        m[1],
        m[2],
        m[2] / m[1].max(1e-9),
        m[0] / m[1].max(1e-9),
    ))
}

/// Part 4's `when`: true for every message of the stream.
const WHEN: &str = r#"body.type == "order.created" && body.total > 10"#;

/// A 1 KiB JSON order (`type`, `total`, items, padding), the `i`-th.
fn order(i: u64) -> bytes::Bytes {
    let items: Vec<String> = (0..8)
        .map(|k| format!(r#"{{"sku": "sku-{i}-{k}", "qty": {k}, "price": 12.5}}"#))
        .collect();
    let head = format!(
        r#"{{"type": "order.created", "id": {i}, "tenant": "t{}", "total": {}, "items": [{}], "note": ""#,
        i % 7,
        100 + i % 50,
        items.join(", ")
    );
    let pad = 1024usize.saturating_sub(head.len() + 2);
    format!("{head}{}\"}}", "x".repeat(pad)).into()
}

/// Part 4, one arm: msg/s and jetrelay's CPU microseconds per message.
async fn when_arm(
    env: &Env,
    sink: &Sink,
    n: u64,
    with_when: bool,
    durable: &str,
) -> Result<(f64, f64), Error> {
    sink.reset();
    let extra = if with_when {
        format!("[[sources.when.routes]]\nwhen = '{WHEN}'\npath = \"/sink\"\n")
    } else {
        String::new()
    };
    let src = SourceText {
        name: "when".into(),
        stream: "WHEN".into(),
        durable: durable.into(),
        extra,
    };
    let relays = start_all(env, &[config(env, &sink.url(), &[src])], durable).await?;
    let pids: Vec<u32> = relays.iter().filter_map(|r| r.child.id()).collect();
    let cpu = CpuWindow::start(env.ticks, &pids);
    wait_for("the sink", Duration::from_secs(600), || sink.count() >= n).await?;
    drained(
        env,
        &[("WHEN".into(), durable.into())],
        Duration::from_secs(120),
    )
    .await?;
    let end = Instant::now();
    let first = sink.first().ok_or("no arrival")?;
    let used = cpu.finish();
    stop_all(relays).await;
    let rate = n as f64 / end.duration_since(first).as_secs_f64().max(1e-6);
    Ok((rate, used.per_pid.iter().sum::<f64>() / n as f64 * 1e6))
}

async fn when(env: &Env, n: u64, rounds: usize) -> Result<String, Error> {
    env.js
        .create_stream(jetstream::stream::Config {
            name: "WHEN".into(),
            subjects: vec!["when.>".into()],
            allow_batch_publish: true,
            ..Default::default()
        })
        .await?;
    fill_msgs(&env.js, n, |i| Msg {
        subject: format!("when.k{}", i % KEYS),
        headers: None,
        payload: order(i),
    })
    .await?;
    let sink = Sink::start().await?;
    let (mut plain, mut routed) = ((Vec::new(), Vec::new()), (Vec::new(), Vec::new()));
    for round in 0..rounds {
        for (with_when, into) in [(false, &mut plain), (true, &mut routed)] {
            let (rate, us) =
                when_arm(env, &sink, n, with_when, &format!("when{round}{with_when}")).await?;
            eprintln!(
                "when round {round} with_when={with_when}: {rate:.0} msg/s, {us:.1} µs CPU/msg"
            );
            into.0.push(rate);
            into.1.push(us);
        }
    }
    let (pr, pc) = (median(&mut plain.0), median(&mut plain.1));
    let (wr, wc) = (median(&mut routed.0), median(&mut routed.1));
    Ok(format!(
        "## 4. A route's `when` on a 1 KiB JSON body against no routes\n\nOne stream of {n} messages of 1 KiB of JSON; each arm drains it on a fresh durable, {IN_FLIGHT} in flight, every message POSTed to the sink. msg/s: {n} over the time from the first arrival until nothing is pending or unacked; CPU: jetrelay's user + system time over the drain, per message.\n\n| arm | msg/s | jetrelay CPU µs/msg |\n|---|---|---|\n\
         | no routes | {pr:.0} | {pc:.1} |\n\
         | one route, `when = '{WHEN}'` (true for each) | {wr:.0} | {wc:.1} |\n\nWith `when` ÷ without: {:.2}× (target ≥ 0.9×); CPU {:+.1} µs a message.\n\n",
        wr / pr.max(1e-9),
        wc - pc,
    ))
}

async fn stall(env: &Env, args: &Args, rounds: usize) -> Result<String, Error> {
    // Long enough a drain that the stalled source's requests time out and are retried
    // several times meanwhile.
    let n: u64 = args.num("stall-messages", 100_000)?;
    let timeout_ms: u64 = args.num("stall-timeout-ms", 2000)?;
    let sleep = Duration::from_millis(args.num("stall-sleep-ms", 10_000)?);
    filled(env, "FAST", n).await?;
    filled(env, "STALL", 2000).await?;
    let app = StallApp::start(sleep).await?;
    let (mut alone, mut beside, mut stalled) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let (a, _) = stall_arm(env, &app, n, false, timeout_ms, &format!("alone{round}")).await?;
        let (b, s) = stall_arm(env, &app, n, true, timeout_ms, &format!("beside{round}")).await?;
        eprintln!(
            "stall round {round}: alone {a:.0} msg/s, beside the stalled one {b:.0} msg/s ({s} stalled requests)"
        );
        alone.push(a);
        beside.push(b);
        stalled.push(s as f64);
    }
    let (a, b) = (median(&mut alone), median(&mut beside));
    Ok(format!(
        "## 3. A stalled source's cost to its neighbour\n\nTwo sources in one process, both {IN_FLIGHT} in flight, one app origin (one connection pool): `fast` drains a stream of {n} messages to a path answering 200 at once; `stalled` has a backlog of 2000 on a path that answers after {} ms, its `http.timeout_ms = {timeout_ms}` (every request times out and is retried). No `[budget]`. msg/s: the fast source's {n} over the time from its first arrival until its consumer has nothing pending and nothing unacked; against the same fast source alone in its process.\n\n| arm | fast msg/s | requests to the stalled path |\n|---|---|---|\n| fast alone | {a:.0} | — |\n| fast beside the stalled one | {b:.0} | {:.0} |\n\nWith the stalled neighbour ÷ alone: {:.2}× (a cost of {:.0} %; target ≤ 10 %).\n\n",
        sleep.as_millis(),
        median(&mut stalled),
        b / a.max(1e-9),
        (1.0 - b / a.max(1e-9)) * 100.0,
    ))
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args = Args::parse();
    let n: u64 = args.num("messages", 20_000)?;
    let rounds: usize = args.num("rounds", 1)?;
    let only = args.list("only");
    let part = |p: &str| only.as_ref().is_none_or(|o| o.iter().any(|x| x == p));
    let bare = PathBuf::from(args.required("bare")?);
    let env = Env::start(
        args.required("nats-server")?,
        args.required("relay")?.into(),
    )
    .await?;
    let (load0, started) = (
        jetrelay_bench::machine_busy_seconds(env.ticks),
        Instant::now(),
    );
    let mut md = format!(
        "# Several sources in one jetrelay\n\nMachine: {}; nats-server {} (file store) on loopback; {rounds} round(s) per comparison, arms interleaved, medians. jetrelay logs at `{}` to nowhere.\n\n",
        machine(),
        env.nats_version,
        std::env::var("BENCH_LOG_LEVEL").unwrap_or_else(|_| "info".into())
    );
    if part("fleet") {
        md.push_str(&fleet(&env, &args, n, rounds).await?);
    }
    if part("skip") {
        md.push_str(&skip(&env, &bare, n, rounds).await?);
    }
    if part("stall") {
        md.push_str(&stall(&env, &args, rounds).await?);
    }
    if part("when") {
        md.push_str(&when(&env, n, rounds).await?);
    }
    let busy = (jetrelay_bench::machine_busy_seconds(env.ticks) - load0)
        / started.elapsed().as_secs_f64().max(1e-6);
    md.push_str(&format!(
        "The machine was {busy:.2} cores busy on average over the whole run ({:.0} s), this benchmark included.\n",
        started.elapsed().as_secs_f64()
    ));
    print!("{md}");
    save_report(&args, "sources-", &md)?;
    env.close().await;
    Ok(())
}
