//! The adaptive-concurrency benchmark (`bench/adaptive`): jetrelay against a modelled
//! app of W workers (each request takes `--service-ms`, first come first served; 503
//! at once when `--queue` requests already wait), W = 8 then 4, with fixed limits
//! swept (1, 2, 4, …, 256) as the oracle beside `concurrency = "adaptive"` (max 256).
//! Per run (a fresh durable on a pre-filled stream): throughput (answers 200 per
//! second, first to last), the share of requests answered 503, the p99 of the app's
//! own time per answered request (queueing included). Then: how long after the app
//! loses half its workers the adaptive limit has moved; rejected messages (an app of
//! `--rejects-workers` taking `--rejects-service-ms`, answering 404 at once to 1 % of
//! the messages and 500 to 3 %, by stream sequence, every attempt): adaptive against
//! the fixed limit at the same maximum, throughput of the good messages side by side;
//! 3 % poison (the same app answering 500 to 3 % of the messages on every attempt,
//! `max_deliver` 1000, a retry every second, `--poison-rate` messages a second
//! published for `--poison-secs`): the good messages answered in that time, adaptive
//! beside fixed; and against the fast Rust sink, adaptive against fixed at 64 in
//! flight. Prints a markdown report and writes it to
//! `<out>/adaptive-<unix-seconds>.md`. Never fails on timing.
//!
//!   adaptive --nats-server=PATH --relay=PATH [--out=DIR] [--n=2000] [--workers=8,4]
//!            [--limits=1,2,4,8,16,32,64,256] [--queue=24] [--service-ms=10]
//!            [--only=sink|rejects|poison] [--sink-n=60000] [--rounds=3]
//!            [--sink-arms=fixed64,adaptive] [--rejects-n=4000] [--rejects-workers=32]
//!            [--rejects-service-ms=40] [--poison-rate=200] [--poison-secs=60]

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use axum::http::StatusCode;
use jetrelay_bench::{
    Args, Delivery, Env, Error, KEYS, Running, Sink, durable_source, fill, machine, relay_config,
    relay_metric, start_relay, stop, wait_for, write_report,
};

/// The modelled app.
#[derive(Clone)]
struct Workers {
    url: String,
    workers: Arc<tokio::sync::Semaphore>,
    waiting: Arc<AtomicUsize>,
    answered: Arc<AtomicUsize>,
    refused: Arc<AtomicUsize>,
    /// Answered 404 or 500 (the message's own failure).
    rejected: Arc<AtomicUsize>,
    /// Per answered request: when, and how long it took in the app.
    times: Arc<Mutex<Vec<(Instant, Duration)>>>,
}

/// With rejects on: what the app answers the message of stream sequence `seq` at once
/// (1 % 404, 3 % 500), or `None` for one it processes.
fn rejection(headers: &axum::http::HeaderMap) -> Option<StatusCode> {
    let seq: u64 = headers.get("nats-sequence")?.to_str().ok()?.parse().ok()?;
    match seq % 100 {
        0 => Some(StatusCode::NOT_FOUND),
        25 | 50 | 75 => Some(StatusCode::INTERNAL_SERVER_ERROR),
        _ => None,
    }
}

/// Poison: the message of stream sequence `seq` answered 500 at once on every attempt
/// (3 %: the 500s of [`rejection`], without its 404s).
fn poisoned(headers: &axum::http::HeaderMap) -> Option<StatusCode> {
    let seq: u64 = headers.get("nats-sequence")?.to_str().ok()?.parse().ok()?;
    matches!(seq % 100, 25 | 50 | 75).then_some(StatusCode::INTERNAL_SERVER_ERROR)
}

/// What the modelled app answers at once, before its workers (none: it works on all).
type Rule = fn(&axum::http::HeaderMap) -> Option<StatusCode>;

/// Of stream sequences `1..=n`, those [`rejection`] answers with a 200.
fn good_of(n: usize) -> usize {
    (1..=n as u64)
        .filter(|s| !matches!(s % 100, 0 | 25 | 50 | 75))
        .count()
}

impl Workers {
    async fn start(workers: usize, service: Duration, queue: usize) -> Result<Workers, Error> {
        Workers::start_with(workers, service, queue, None).await
    }

    /// With a `rule`, some messages are answered at once ([`rejection`], [`poisoned`]).
    async fn start_with(
        workers: usize,
        service: Duration,
        queue: usize,
        rule: Option<Rule>,
    ) -> Result<Workers, Error> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let w = Workers {
            url: format!("http://{}/app", listener.local_addr()?),
            workers: Arc::new(tokio::sync::Semaphore::new(workers)),
            waiting: Arc::default(),
            answered: Arc::default(),
            refused: Arc::default(),
            rejected: Arc::default(),
            times: Arc::default(),
        };
        let s = w.clone();
        let router = axum::Router::new().route(
            "/app",
            axum::routing::post(move |headers: axum::http::HeaderMap| {
                let s = s.clone();
                async move {
                    let arrived = Instant::now();
                    if let Some(code) = rule.and_then(|r| r(&headers)) {
                        s.rejected.fetch_add(1, SeqCst);
                        return code;
                    }
                    if s.waiting.fetch_add(1, SeqCst) >= queue + s.workers.available_permits() {
                        s.waiting.fetch_sub(1, SeqCst);
                        s.refused.fetch_add(1, SeqCst);
                        return StatusCode::SERVICE_UNAVAILABLE;
                    }
                    let Ok(permit) = s.workers.acquire().await else {
                        return StatusCode::SERVICE_UNAVAILABLE;
                    };
                    s.waiting.fetch_sub(1, SeqCst);
                    tokio::time::sleep(service).await;
                    drop(permit);
                    s.answered.fetch_add(1, SeqCst);
                    s.times
                        .lock()
                        .unwrap()
                        .push((Instant::now(), arrived.elapsed()));
                    StatusCode::OK
                }
            }),
        );
        tokio::spawn(async move { axum::serve(listener, router).await });
        Ok(w)
    }

    fn reset(&self) {
        self.answered.store(0, SeqCst);
        self.refused.store(0, SeqCst);
        self.rejected.store(0, SeqCst);
        self.times.lock().unwrap().clear();
    }

    async fn lose(&self, n: u32) -> Result<(), Error> {
        self.workers.acquire_many(n).await?.forget();
        Ok(())
    }
}

struct Row {
    label: String,
    throughput: f64,
    refused_pct: f64,
    p99_ms: f64,
}

fn p99(mut v: Vec<Duration>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort();
    v[(v.len() * 99 / 100).min(v.len() - 1)].as_secs_f64() * 1000.0
}

/// How the limit is set.
#[derive(Clone, Copy, Debug)]
enum Mode {
    Fixed,
    /// `concurrency = "adaptive"`, with `min_in_flight` when given.
    Adaptive(Option<usize>),
}

/// jetrelay on a durable of `stream`, at most `max` in flight, its limit by `mode`.
fn config(
    env: &Env,
    stream: &str,
    durable: &str,
    url: &str,
    max: usize,
    mode: Mode,
) -> jetrelay_bench::RelayConfig {
    let mut d = Delivery::single("none");
    d.max_in_flight = max;
    d.max_buffered = max.max(256);
    let mut c = relay_config(env, &durable_source(stream, durable), &d, url, 30_000);
    if let Mode::Adaptive(min) = mode {
        let min = min.map_or(String::new(), |m| format!("min_in_flight = {m}\n"));
        c.text = c.text.replacen(
            "[delivery]\n",
            &format!("[delivery]\nconcurrency = \"adaptive\"\n{min}"),
            1,
        );
    }
    c
}

async fn run_one(
    env: &Env,
    app: &Workers,
    stream: &str,
    run: usize,
    n: usize,
    limit: Option<usize>,
) -> Result<Row, Error> {
    app.reset();
    let durable = format!("d{run}");
    let (max, mode) = limit.map_or((256, Mode::Adaptive(None)), |l| (l, Mode::Fixed));
    let relay = start_relay(
        env,
        &config(env, stream, &durable, &app.url, max, mode),
        &durable,
    )
    .await?;
    wait_for("the drain", Duration::from_secs(600), || {
        app.answered.load(SeqCst) >= n
    })
    .await?;
    finish(env, stream, relay, &durable).await?;
    let times = app.times.lock().unwrap().clone();
    let (first, last) = (times.first().map(|t| t.0), times.last().map(|t| t.0));
    let span = match (first, last) {
        (Some(f), Some(l)) => l.duration_since(f).as_secs_f64().max(1e-6),
        _ => 1e-6,
    };
    let (answered, refused) = (app.answered.load(SeqCst), app.refused.load(SeqCst));
    Ok(Row {
        label: limit.map_or("adaptive (1–256)".to_string(), |l| format!("fixed {l}")),
        throughput: answered.saturating_sub(1) as f64 / span,
        refused_pct: refused as f64 * 100.0 / (answered + refused).max(1) as f64,
        p99_ms: p99(times.iter().map(|t| t.1).collect()),
    })
}

/// Adaptive against 8 workers that become 4: the time from the loss to a limit of 5
/// or less (read from `/ready` every 10 ms), and the limit before.
async fn step_down(
    env: &Env,
    stream: &str,
    service: Duration,
    queue: usize,
) -> Result<(u64, Duration), Error> {
    let app = Workers::start(8, service, queue).await?;
    let relay = start_relay(
        env,
        &config(env, stream, "dstep", &app.url, 256, Mode::Adaptive(None)),
        "dstep",
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let admin = relay.admin.ok_or("no admin port")?;
    let limit = || async move {
        relay_metric(admin, "jetrelay_concurrency_limit")
            .await
            .ok()
            .and_then(|v| v.first().map(|x| x.1 as u64))
            .unwrap_or(0)
    };
    let before = limit().await;
    app.lose(4).await?;
    let lost = Instant::now();
    while limit().await > 5 && lost.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let moved = lost.elapsed();
    finish(env, stream, relay, "dstep").await?;
    Ok((before, moved))
}

/// One arm of the fast-sink comparison: `fixed64`, `adaptive` (min 1, max 64), or
/// `fixedN` / `adaptiveN` (adaptive pinned at min = max = N: the controller's own cost).
#[derive(Clone, Debug)]
struct Arm {
    label: String,
    max: usize,
    mode: Mode,
}

impl Arm {
    fn parse(s: &str) -> Result<Arm, Error> {
        let (kind, n) = s.split_at(s.find(|c: char| c.is_ascii_digit()).unwrap_or(s.len()));
        let n: Option<usize> = if n.is_empty() { None } else { Some(n.parse()?) };
        match kind {
            "fixed" => Ok(Arm {
                label: format!("fixed {}", n.unwrap_or(64)),
                max: n.unwrap_or(64),
                mode: Mode::Fixed,
            }),
            "adaptive" => Ok(Arm {
                label: n.map_or("adaptive".into(), |n| format!("adaptive pinned at {n}")),
                max: n.unwrap_or(64),
                mode: Mode::Adaptive(n),
            }),
            _ => Err(format!("--sink-arms: {s:?} is not fixedN or adaptive[N]").into()),
        }
    }
}

/// The arms against the fast sink, `rounds` rounds interleaved: per arm the median
/// messages a second and the mean limit it held. Every arm is observed the same way
/// (its limit read from `/metrics` every 100 ms), so the scrapes cost each the same.
async fn fast_sink(
    env: &Env,
    stream: &str,
    n: u64,
    rounds: usize,
    arms: &[Arm],
) -> Result<Vec<(f64, f64)>, Error> {
    let sink = Sink::start().await?;
    let mut rates = vec![Vec::new(); arms.len()];
    let mut limits = vec![(0.0, 0u32); arms.len()];
    for round in 0..rounds {
        for (i, arm) in arms.iter().enumerate() {
            sink.reset();
            let durable = format!("dsink{round}x{i}");
            let c = config(env, stream, &durable, &sink.url(), arm.max, arm.mode);
            let relay = start_relay(env, &c, &durable).await?;
            let admin = relay.admin.ok_or("no admin port")?;
            let deadline = Instant::now() + Duration::from_secs(300);
            let mut seen: Vec<f64> = Vec::new();
            while sink.count() < n {
                if Instant::now() > deadline {
                    return Err("the sink did not drain in 300 s".into());
                }
                if let Some(v) = relay_metric(admin, "jetrelay_concurrency_limit")
                    .await
                    .ok()
                    .and_then(|v| v.first().map(|x| x.1))
                {
                    limits[i].0 += v;
                    limits[i].1 += 1;
                    seen.push(v);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            seen.sort_by(f64::total_cmp);
            let q = |p: usize| seen.get(seen.len() * p / 100).copied().unwrap_or(0.0);
            eprintln!(
                "sink round {round} {}: {:.0} msg/s; limit p10 {} p50 {} p90 {}",
                arm.label,
                sink.rate(),
                q(10),
                q(50),
                q(90)
            );
            rates[i].push(sink.rate());
            finish(env, stream, relay, &durable).await?;
        }
    }
    Ok(rates
        .into_iter()
        .zip(limits)
        .map(|(mut r, (sum, k))| {
            r.sort_by(f64::total_cmp);
            let median = r.get(r.len() / 2).copied().unwrap_or(0.0);
            (median, sum / f64::from(k.max(1)))
        })
        .collect())
}

/// One arm against the rejecting app: the good messages' answers a second (first to
/// last), the answers 404/500 (retries included), the mean limit (`/metrics` every
/// 100 ms, every arm alike).
async fn rejects_run(
    env: &Env,
    app: &Workers,
    stream: &str,
    durable: &str,
    (max, mode): (usize, Mode),
    good: usize,
) -> Result<(f64, usize, f64), Error> {
    app.reset();
    let relay = start_relay(
        env,
        &config(env, stream, durable, &app.url, max, mode),
        durable,
    )
    .await?;
    let admin = relay.admin.ok_or("no admin port")?;
    let deadline = Instant::now() + Duration::from_secs(600);
    let (mut sum, mut k) = (0.0, 0u32);
    while app.answered.load(SeqCst) < good {
        if Instant::now() > deadline {
            return Err("the good messages were not all answered in 600 s".into());
        }
        if let Some(v) = relay_metric(admin, "jetrelay_concurrency_limit")
            .await
            .ok()
            .and_then(|v| v.first().map(|x| x.1))
        {
            sum += v;
            k += 1;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    finish(env, stream, relay, durable).await?;
    let times = app.times.lock().unwrap().clone();
    let span = match (times.first(), times.last()) {
        (Some(f), Some(l)) => l.0.duration_since(f.0).as_secs_f64().max(1e-6),
        _ => 1e-6,
    };
    Ok((
        app.answered.load(SeqCst).saturating_sub(1) as f64 / span,
        app.rejected.load(SeqCst),
        sum / f64::from(k.max(1)),
    ))
}

/// Rejected messages: fixed and adaptive at the same maximum, `rounds` rounds
/// interleaved, against an app of `workers` that rejects 4 % of the messages.
async fn rejects(env: &Env, args: &Args, rounds: usize) -> Result<String, Error> {
    let n: usize = args.num("rejects-n", 4000)?;
    let workers: usize = args.num("rejects-workers", 32)?;
    let service = Duration::from_millis(args.num("rejects-service-ms", 40)?);
    filled(env, "REJECT", n as u64).await?;
    let app = Workers::start_with(workers, service, 10 * workers, Some(rejection)).await?;
    let good = good_of(n);
    let arms = [
        (format!("fixed {workers}"), (workers, Mode::Fixed)),
        (
            format!("adaptive (1–{workers})"),
            (workers, Mode::Adaptive(None)),
        ),
    ];
    let mut figures = vec![Vec::new(); arms.len()];
    for round in 0..rounds {
        for (i, (label, arm)) in arms.iter().enumerate() {
            let durable = format!("drej{round}x{i}");
            let f = rejects_run(env, &app, "REJECT", &durable, *arm, good).await?;
            eprintln!(
                "rejects round {round} {label}: {:.0} msg/s, {} answers 404/500, mean limit {:.1}",
                f.0, f.1, f.2
            );
            figures[i].push(f);
        }
    }
    let mut md = format!(
        "Rejected messages: an app of {workers} workers, {} ms a request, answering 404 at once to 1 % of the messages and 500 to 3 % (by stream sequence, every attempt; both retried, the default); {n} messages per run, {good} good, {rounds} rounds interleaved, medians; msg/s: answers 200 a second, first to last; the limit from `/metrics` every 100 ms:\n\n| arm | msg/s | × {} | answers 404/500 | mean limit |\n|---|---|---|---|---|\n",
        service.as_millis(),
        arms[0].0
    );
    let median = |v: &mut Vec<(f64, usize, f64)>| {
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v[v.len() / 2]
    };
    let base = median(&mut figures[0].clone()).0.max(1e-9);
    for ((label, _), mut f) in arms.iter().zip(figures) {
        let (rate, rejected, limit) = median(&mut f);
        md.push_str(&format!(
            "| {label} | {rate:.0} | {:.2} | {rejected} | {limit:.1} |\n",
            rate / base
        ));
    }
    md.push('\n');
    Ok(md)
}

/// One arm of 3 % poison on its own stream: jetrelay started on it, then `rate`
/// messages a second published for `secs`: the good ones answered 200 by the end of
/// the publishing and 10 s later, the limit's mean (`/metrics` every second) and its
/// last reading.
async fn poison_run(
    env: &Env,
    app: &Workers,
    stream: &str,
    (max, mode): (usize, Mode),
    rate: u64,
    secs: u64,
) -> Result<(usize, usize, f64, f64), Error> {
    app.reset();
    env.js
        .create_stream(jetstream::stream::Config {
            name: stream.to_string(),
            subjects: vec![format!("{}.>", stream.to_lowercase())],
            ..Default::default()
        })
        .await?;
    let mut c = config(env, stream, "dpoison", &app.url, max, mode);
    // Retried every second, for ever within the run; the poison held (ack pending)
    // never fills the consumer's max_ack_pending (max_buffered).
    c.text = c
        .text
        .replacen("max_deliver = -1", "max_deliver = 1000", 1)
        .replacen("max_buffered = 256", "max_buffered = 4096", 1)
        .replacen(
            "[delivery]\n",
            "[delivery]\nretry_initial_ms = 1000\nretry_max_ms = 1000\n",
            1,
        );
    let relay = start_relay(env, &c, "dpoison").await?;
    let admin = relay.admin.ok_or("no admin port")?;
    let subject = format!("{}.m", stream.to_lowercase());
    let payload = bytes::Bytes::from(vec![b'x'; 128]);
    let start = Instant::now();
    let (mut sum, mut k, mut last) = (0.0, 0u32, 0.0);
    // One tick of 100 ms publishes a tenth of a second's messages.
    for tick in 0..secs * 10 {
        let mut acks = Vec::new();
        for _ in 0..rate / 10 {
            acks.push(env.js.publish(subject.clone(), payload.clone()).await?);
        }
        for ack in acks {
            ack.await?;
        }
        if tick % 10 == 0
            && let Some(v) = relay_metric(admin, "jetrelay_concurrency_limit")
                .await
                .ok()
                .and_then(|v| v.first().map(|x| x.1))
        {
            (sum, k, last) = (sum + v, k + 1, v);
        }
        let next = start + Duration::from_millis(100 * (tick + 1));
        tokio::time::sleep_until(tokio::time::Instant::from_std(next)).await;
    }
    let in_time = app.answered.load(SeqCst);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let later = app.answered.load(SeqCst);
    finish(env, stream, relay, "dpoison").await?;
    env.js.delete_stream(stream).await?;
    Ok((in_time, later, sum / f64::from(k.max(1)), last))
}

/// 3 % poison, retried every second for ever: fixed and adaptive at the same maximum,
/// one run each on a stream of its own, as a report section.
async fn poison(env: &Env, args: &Args) -> Result<String, Error> {
    let workers: usize = args.num("rejects-workers", 32)?;
    let service = Duration::from_millis(args.num("rejects-service-ms", 40)?);
    let rate: u64 = args.num("poison-rate", 200)?;
    let secs: u64 = args.num("poison-secs", 60)?;
    let app = Workers::start_with(workers, service, 10 * workers, Some(poisoned)).await?;
    let sent = (rate / 10 * 10 * secs) as usize;
    let good = good_of(sent) + sent / 100;
    let arms = [
        (format!("fixed {workers}"), (workers, Mode::Fixed)),
        (
            format!("adaptive (1–{workers})"),
            (workers, Mode::Adaptive(None)),
        ),
    ];
    let mut md = format!(
        "3 % poison: an app of {workers} workers, {} ms a request, answering 500 at once to 3 % of the messages (by stream sequence) on every attempt; `max_deliver` 1000, retried every second (`retry_initial_ms` = `retry_max_ms` = 1000); {rate} messages a second published for {secs} s, {good} of them good; one run per arm, each on a stream of its own; the limit from `/metrics` every second:\n\n| arm | good answered in the {secs} s | × {} | 10 s later | mean limit | last limit |\n|---|---|---|---|---|---|\n",
        service.as_millis(),
        arms[0].0
    );
    let mut base = None;
    for (i, (label, arm)) in arms.iter().enumerate() {
        let f = poison_run(env, &app, &format!("POISON{i}"), *arm, rate, secs).await?;
        eprintln!(
            "poison {label}: {} good in {secs} s, {} 10 s later, mean limit {:.1}, last {}",
            f.0, f.1, f.2, f.3
        );
        let base = *base.get_or_insert(f.0.max(1));
        md.push_str(&format!(
            "| {label} | {} | {:.2} | {} | {:.1} | {} |\n",
            f.0,
            f.0 as f64 / base as f64,
            f.1,
            f.2,
            f.3
        ));
    }
    md.push('\n');
    Ok(md)
}

/// Stops a run's jetrelay and deletes its durable.
async fn finish(env: &Env, stream: &str, relay: Running, durable: &str) -> Result<(), Error> {
    stop(relay.child).await;
    let _ = env
        .js
        .get_stream(stream)
        .await?
        .delete_consumer(durable)
        .await;
    Ok(())
}

async fn filled(env: &Env, name: &str, n: u64) -> Result<(), Error> {
    env.js
        .create_stream(jetstream::stream::Config {
            name: name.to_string(),
            subjects: vec![format!("{}.>", name.to_lowercase())],
            allow_batch_publish: true,
            ..Default::default()
        })
        .await?;
    let prefix = name.to_lowercase();
    fill(&env.js, |i| format!("{prefix}.k{}", i % KEYS), n, 128).await?;
    Ok(())
}

/// The fast Rust sink's arms, as a report section.
async fn sink_section(env: &Env, args: &Args, rounds: usize) -> Result<String, Error> {
    let mut md = String::new();
    let sink_n: u64 = args.num("sink-n", 60_000)?;
    filled(env, "SINK", sink_n).await?;
    let arms = args
        .get("sink-arms")
        .unwrap_or("fixed64,adaptive")
        .split(',')
        .map(Arm::parse)
        .collect::<Result<Vec<_>, _>>()?;
    let results = fast_sink(env, "SINK", sink_n, rounds, &arms).await?;
    let base = results.first().map_or(1.0, |r| r.0.max(1e-9));
    md.push_str(&format!(
        "Against the fast Rust sink ({sink_n} messages per run, {rounds} rounds interleaved, medians; every arm's `/metrics` read every 100 ms):\n\n| arm | msg/s | × {} | mean limit |\n|---|---|---|---|\n",
        arms.first().map_or("", |a| a.label.as_str())
    ));
    for (arm, (rate, limit)) in arms.iter().zip(&results) {
        md.push_str(&format!(
            "| {} | {rate:.0} | {:.2} | {limit:.1} |\n",
            arm.label,
            rate / base
        ));
    }
    Ok(md)
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args = Args::parse();
    let n: usize = args.num("n", 2000)?;
    let queue: usize = args.num("queue", 24)?;
    let service = Duration::from_millis(args.num("service-ms", 10)?);
    let list = |key: &str, default: &str| -> Result<Vec<usize>, Error> {
        Ok(args
            .get(key)
            .unwrap_or(default)
            .split(',')
            .map(str::parse)
            .collect::<Result<_, _>>()?)
    };
    // `--only=sink`: the fast sink alone (a quick look at what adaptive costs);
    // `--only=rejects`: the rejected messages alone; `--only=poison`: 3 % poison alone.
    let only = args.get("only");
    let one_part = only.is_some();
    let workers = if one_part {
        Vec::new()
    } else {
        list("workers", "8,4")?
    };
    let limits = list("limits", "1,2,4,8,16,32,64,256")?;
    let env = Env::start(
        args.required("nats-server")?,
        args.required("relay")?.into(),
    )
    .await?;
    // Every run drains n messages: the stream holds enough for all of them.
    let runs = workers.len() * (limits.len() + 1);
    if runs > 0 {
        filled(&env, "ADAPT", (n * runs) as u64).await?;
    }
    let mut md = format!(
        "# jetrelay adaptive concurrency\n\nMachine: {}; nats-server {} (file store) on loopback. The app: W workers, {} ms per request, first come first served, 503 at once when {queue} requests wait. {n} messages per run, one run per row, a fresh durable each; retries after the default 1 s NAK delay. Throughput: answers 200 per second; 503: of all requests; p99: the app's own time per answered request, its queue included.\n\n",
        machine(),
        env.nats_version,
        service.as_millis()
    );
    let mut run = 0;
    for &w in &workers {
        let app = Workers::start(w, service, queue).await?;
        md.push_str(&format!(
            "## W = {w}\n\n| limit | msg/s | 503 % | p99 ms |\n|---|---|---|---|\n"
        ));
        let mut rows = Vec::new();
        for limit in limits.iter().map(|&l| Some(l)).chain([None]) {
            run += 1;
            let r = run_one(&env, &app, "ADAPT", run, n, limit).await?;
            eprintln!(
                "W={w} {}: {:.0} msg/s, 503 {:.2} %, p99 {:.1} ms",
                r.label, r.throughput, r.refused_pct, r.p99_ms
            );
            md.push_str(&format!(
                "| {} | {:.0} | {:.2} | {:.1} |\n",
                r.label, r.throughput, r.refused_pct, r.p99_ms
            ));
            rows.push(r);
        }
        let (fixed, adaptive) = rows.split_at(rows.len() - 1);
        if let Some(best) = fixed
            .iter()
            .max_by(|a, b| a.throughput.total_cmp(&b.throughput))
        {
            let a = &adaptive[0];
            md.push_str(&format!(
                "\nAdaptive against the best fixed limit ({}): {:.2}× its throughput, p99 {:.2}× its p99, 503s {:.2} % of requests.\n\n",
                best.label,
                a.throughput / best.throughput,
                a.p99_ms / best.p99_ms.max(1e-6),
                a.refused_pct
            ));
        }
    }
    let rounds: usize = args.num("rounds", 3)?;
    if !matches!(only, Some("sink" | "poison")) {
        md.push_str(&rejects(&env, &args, rounds).await?);
    }
    if !matches!(only, Some("sink" | "rejects")) {
        md.push_str(&poison(&env, &args).await?);
    }
    if !one_part {
        filled(&env, "STEP", 100_000).await?;
        let (before, moved) = step_down(&env, "STEP", service, queue).await?;
        md.push_str(&format!(
            "W = 8 → 4 under load: the limit was {before}; it was 5 or less {:.0} ms after the loss.\n\n",
            moved.as_secs_f64() * 1000.0
        ));
    }
    if !matches!(only, Some("rejects" | "poison")) {
        md.push_str(&sink_section(&env, &args, rounds).await?);
    }
    print!("{md}");
    if let Some(out) = args.get("out") {
        write_report(Path::new(out), "adaptive-", None, &md)?;
    }
    env.close().await;
    Ok(())
}
