//! The batch benchmark (`bench/batch`): jetrelay's batch delivery against one message
//! per request. Starts nats-server (file store), fills a stream (1,000 subjects) and
//! runs every contender interleaved for several rounds, each on a fresh durable:
//!
//!   bare          the bare single-message Rust loop (bench/src/bin/bare.rs) → Rust sink
//!   relay1        jetrelay, batch_size 1, ordering none → Rust sink
//!   batch         jetrelay, batch_size N, batch_wait_ms 0, ordering none → Rust sink
//!   batchwait     jetrelay, batch_size N, batch_wait_ms W, ordering none → Rust sink
//!   batchsubject  jetrelay, batch_size N, batch_wait_ms 0, ordering subject → Rust sink
//!   py1           jetrelay, batch_size 1, ordering none → Python app (py_batch_app.py)
//!   pybatch       jetrelay, batch_size N, batch_wait_ms 0, ordering none → Python app
//!
//! The Rust sink (the one of `bench/run`) counts messages, not requests, and times each
//! message of a batch (publish to arrival of its request). Per run: the drain
//! throughput (messages per second from the first to the last arrival at the app),
//! messages per request, CPU seconds per 10,000 messages of jetrelay (or the bare
//! loop), of the app and of nats-server, and peak RSS; then, for the Rust sink,
//! p50/p99 latency at a steady 1,000 msg/s. Prints a markdown report and writes it to
//! `<out>/batch-<unix-seconds>.md`. Never fails on timing.
//!
//!   batch --nats-server=PATH --relay=PATH --bare=PATH --python=PATH --py-app=PATH
//!         [--out=DIR] [--rounds=5] [--n=50000] [--size=128] [--batch=100] [--wait=20]
//!         [--in-flight=4] [--buffered=1024] [--pull=500] [--only=bare,batch,...]
//!         [--quiet-wait=60]
//!
//! Before each run the driver waits, at most `--quiet-wait` seconds (0: not at all),
//! for the machine to be quiet; the report shows the cores that other processes
//! still took during each drain. `BENCH_COUNT_PULLS=1` also prints the pull requests
//! per 1,000 messages of each run (a diagnostic).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use futures::StreamExt;
use jetrelay_bench::{
    Args, CpuWindow, Delivery, Env, Error, IN_FLIGHT, KEYS, LATENCY_MSGS, LATENCY_RATE, Running,
    Sink, durable_source, fill, free_port, latency_run, machine, peak_rss_kib, quiet, quiet_note,
    relay_config, save_report, spread, start_bare, start_line_ready, start_relay, stop, wait_acked,
    wait_for,
};
use tokio::process::Command;

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Contender {
    Bare,
    Relay1,
    Batch,
    BatchWait,
    BatchSubject,
    Py1,
    PyBatch,
}

impl Contender {
    const ALL: [Contender; 7] = [
        Contender::Bare,
        Contender::Relay1,
        Contender::Batch,
        Contender::BatchWait,
        Contender::BatchSubject,
        Contender::Py1,
        Contender::PyBatch,
    ];

    fn python(self) -> bool {
        matches!(self, Contender::Py1 | Contender::PyBatch)
    }

    /// The contender's name, its app, and its delivery as `batch_size / wait / ordering`.
    fn label(self, knobs: &Knobs) -> (&'static str, &'static str, String) {
        let (b, w) = (knobs.batch, knobs.wait_ms);
        match self {
            Contender::Bare => ("bare Rust loop", "Rust sink", "1 / – / none".into()),
            Contender::Relay1 => ("jetrelay", "Rust sink", "1 / – / none".into()),
            Contender::Batch => ("jetrelay", "Rust sink", format!("{b} / 0 / none")),
            Contender::BatchWait => ("jetrelay", "Rust sink", format!("{b} / {w} / none")),
            Contender::BatchSubject => ("jetrelay", "Rust sink", format!("{b} / 0 / subject")),
            Contender::Py1 => ("jetrelay", "Python aiohttp", "1 / – / none".into()),
            Contender::PyBatch => ("jetrelay", "Python aiohttp", format!("{b} / 0 / none")),
        }
    }

    /// jetrelay's `[delivery]` (`None`: the bare loop).
    fn delivery(self, knobs: &Knobs) -> Option<Delivery> {
        let batched = |ordering: &str, wait_ms| Delivery {
            ordering: ordering.into(),
            max_in_flight: knobs.in_flight,
            max_buffered: knobs.buffered,
            max_batch: knobs.pull,
            batch_size: knobs.batch,
            batch_wait_ms: wait_ms,
        };
        match self {
            Contender::Bare => None,
            Contender::Relay1 | Contender::Py1 => Some(Delivery::single("none")),
            Contender::Batch | Contender::PyBatch => Some(batched("none", 0)),
            Contender::BatchWait => Some(batched("none", knobs.wait_ms)),
            Contender::BatchSubject => Some(batched("subject", 0)),
        }
    }
}

/// The batch contenders' settings.
struct Knobs {
    batch: usize,
    wait_ms: u64,
    in_flight: usize,
    buffered: usize,
    pull: usize,
}

// === the apps ===

/// The Python app (bench/py_batch_app.py), one process.
struct PyApp {
    running: Running,
    base: String,
    http: reqwest::Client,
}

impl PyApp {
    async fn start(python: &Path, script: &Path) -> Result<PyApp, Error> {
        let port = free_port();
        let mut cmd = Command::new(python);
        cmd.arg(script).arg(port.to_string());
        Ok(PyApp {
            running: start_line_ready(cmd).await?,
            base: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::new(),
        })
    }

    /// Messages, requests, and the rate from the first to the last arrival.
    async fn stats(&self) -> Result<(u64, u64, f64), Error> {
        let body = self
            .http
            .get(format!("{}/stats", self.base))
            .send()
            .await?
            .bytes()
            .await?;
        let v: serde_json::Value = serde_json::from_slice(&body)?;
        let n = |k: &str| v[k].as_u64().unwrap_or(0);
        let secs = (n("last_ns").saturating_sub(n("first_ns")) as f64 / 1e9).max(1e-6);
        let rate = n("count").saturating_sub(n("first_count")) as f64 / secs;
        Ok((n("count"), n("requests"), rate))
    }
}

/// Where a run's messages go.
enum App<'a> {
    Sink(&'a Sink),
    Python(Box<PyApp>),
}

impl App<'_> {
    fn url(&self) -> String {
        match self {
            App::Sink(s) => s.url(),
            App::Python(p) => format!("{}/deliver", p.base),
        }
    }

    fn pid(&self) -> u32 {
        match self {
            // The sink runs in this process.
            App::Sink(_) => std::process::id(),
            App::Python(p) => p.running.child.id().unwrap_or(0),
        }
    }

    /// Waits until `target` messages arrived; messages per request and the rate.
    async fn drained(&self, target: u64, timeout: Duration) -> Result<(f64, f64), Error> {
        match self {
            App::Sink(s) => {
                wait_for("the drain", timeout, || s.count() >= target).await?;
                Ok((s.count() as f64 / s.requests().max(1) as f64, s.rate()))
            }
            App::Python(p) => {
                let deadline = Instant::now() + timeout;
                loop {
                    let (count, requests, rate) = p.stats().await?;
                    if count >= target {
                        return Ok((count as f64 / requests.max(1) as f64, rate));
                    }
                    if Instant::now() > deadline {
                        return Err("timed out waiting for the drain".into());
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }
}

// === a run ===

struct Sample {
    throughput: f64,
    per_request: f64,
    cpu_per_10k: f64,
    app_cpu_per_10k: f64,
    server_cpu_per_10k: f64,
    rss_mib: f64,
    /// p50, p99 (ms) and messages per request of the latency run (Rust sink only).
    latency: Option<(f64, f64, f64)>,
    /// From the end of the drain to every message acked (`None`: not within 10 s).
    acked_ms: Option<f64>,
    /// Cores busy with other processes during the drain (other work on the machine).
    others_cores: f64,
}

struct Bench<'a> {
    env: &'a Env,
    sink: &'a Sink,
    knobs: Knobs,
    bare_bin: PathBuf,
    python: PathBuf,
    py_app: PathBuf,
    stream: String,
    prefix: String,
    size: usize,
    /// With `BENCH_COUNT_PULLS` set: pull requests seen on the server (a diagnostic,
    /// off by default as the copy to this driver costs the server a little).
    pulls: Option<Arc<AtomicU64>>,
    /// How long to wait for a quiet machine before each run.
    quiet_wait: Duration,
}

impl Bench<'_> {
    async fn run_one(&self, c: Contender, run: usize) -> Result<Sample, Error> {
        let (env, stream) = (self.env, self.stream.as_str());
        quiet(env.ticks, self.quiet_wait).await;
        self.sink.reset();
        let target = env
            .js
            .get_stream(stream)
            .await?
            .info()
            .await?
            .state
            .messages;
        let app = if c.python() {
            App::Python(Box::new(PyApp::start(&self.python, &self.py_app).await?))
        } else {
            App::Sink(self.sink)
        };
        let durable = format!("d{run}");
        let running = match c.delivery(&self.knobs) {
            None => start_bare(env, &self.bare_bin, stream, &durable, &app.url(), None).await?,
            Some(d) => {
                let source = durable_source(stream, &durable);
                let config = relay_config(env, &source, &d, &app.url(), 30_000);
                start_relay(env, &config, &format!("batch{run}")).await?
            }
        };
        let (pid, app_pid) = (running.child.id().unwrap_or(0), app.pid());
        // jetrelay (or bare), the app, nats-server, and this driver (the Rust sink, or
        // the Python app's poller) when it is not the app.
        let mut ours = vec![pid, app_pid, env.nats_pid];
        if app_pid != std::process::id() {
            ours.push(std::process::id());
        }
        let pulls = || self.pulls.as_ref().map(|p| p.load(Ordering::Relaxed));
        let (window, pulls0) = (CpuWindow::start(env.ticks, &ours), pulls());
        let (per_request, throughput) = app.drained(target, Duration::from_secs(600)).await?;
        let (cpu, pulls1) = (window.finish(), pulls());
        if let (Some(a), Some(b)) = (pulls0, pulls1) {
            eprintln!(
                "  {:.1} pull requests per 1,000 messages",
                (b - a) as f64 / target as f64 * 1000.0
            );
        }
        let per_10k = |i: usize| cpu.per_pid[i] / target as f64 * 10_000.0;
        let acked_ms = wait_acked(&env.js, stream, &durable, Duration::from_secs(10)).await?;
        let latency = match &app {
            App::Sink(sink) => {
                let subject = |i| format!("{}.lat.k{}", self.prefix, i % KEYS);
                let (p50, p99) = latency_run(&env.js, sink, subject, self.size).await?;
                Some((
                    p50,
                    p99,
                    sink.count() as f64 / sink.requests().max(1) as f64,
                ))
            }
            App::Python(_) => None,
        };
        let rss_mib = peak_rss_kib(pid) as f64 / 1024.0;
        stop(running.child).await;
        if let App::Python(p) = app {
            stop(p.running.child).await;
        }
        // Leave the stream as filled to the next contender.
        let s = env.js.get_stream(stream).await?;
        let _ = s.delete_consumer(&durable).await;
        s.purge().filter(format!("{}.lat.>", self.prefix)).await?;
        Ok(Sample {
            throughput,
            per_request,
            cpu_per_10k: per_10k(0),
            app_cpu_per_10k: per_10k(1),
            server_cpu_per_10k: per_10k(2),
            rss_mib,
            latency,
            acked_ms,
            others_cores: cpu.others_cores,
        })
    }
}

/// Counts the pull requests of every consumer (`$JS.API.CONSUMER.MSG.NEXT.>`).
async fn count_pulls(url: &str) -> Result<Arc<AtomicU64>, Error> {
    let client = async_nats::connect(url).await?;
    let mut sub = client.subscribe("$JS.API.CONSUMER.MSG.NEXT.>").await?;
    client.flush().await?;
    let n = Arc::new(AtomicU64::new(0));
    let counter = n.clone();
    tokio::spawn(async move {
        let _client = client;
        while sub.next().await.is_some() {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    });
    Ok(n)
}

// === the report ===

/// `median (min–max)` of the per-round ratios of throughput `num / den` (rounds where
/// both ran).
fn ratio(results: &BTreeMap<Contender, Vec<Sample>>, num: Contender, den: Contender) -> String {
    let t = |c| {
        results.get(&c).map_or(Vec::new(), |v: &Vec<Sample>| {
            v.iter().map(|s| s.throughput).collect()
        })
    };
    jetrelay_bench::ratio(&t(num), &t(den))
}

fn report(
    bench: &Bench<'_>,
    (rounds, n): (usize, u64),
    results: &BTreeMap<Contender, Vec<Sample>>,
) -> String {
    let (knobs, size) = (&bench.knobs, bench.size);
    let quiet = quiet_note(bench.quiet_wait);
    let mut md = format!(
        "# jetrelay batch delivery benchmark\n\nMachine: {}; nats-server {} (file store) on loopback. {rounds} rounds, contenders interleaved, each on a fresh plain durable consumer; {n} messages of {size} B pre-filled over {KEYS} subjects (UTF-8 payloads, so batches carry them as `data`). One message per request: {IN_FLIGHT} requests in flight, `max_buffered` 256, pulls of 64 (as `bench/run`). Batches: `batch_size` {}, `max_in_flight` {}, `max_buffered` {}, pulls of {} (`max_batch`), `batch_max_bytes` default. The Rust sink is `bench/run`'s, answering 200 at once and counting messages; the Python app is `bench/py_batch_app.py`, one aiohttp process answering at once (a batch's JSON parsed). Throughput = messages per second from the first to the last arrival at the app; medians, with min–max. jetrelay logs one JSON line per message at `info`, as deployed.{quiet}\n\n",
        machine(),
        bench.env.nats_version,
        knobs.batch,
        knobs.in_flight,
        knobs.buffered,
        knobs.pull,
    );
    md.push_str("## Throughput (drain of the pre-filled stream)\n\n| contender | app | batch_size / wait ms / ordering | msg/s (min–max) | msgs / request | jetrelay (or bare) CPU s / 10k | app CPU s / 10k | nats-server CPU s / 10k | peak RSS MiB | other processes, cores |\n|---|---|---|---|---|---|---|---|---|---|\n");
    for (&c, v) in results {
        let (who, app, how) = c.label(knobs);
        let (t, lo, hi) = spread(v, |s| s.throughput);
        let m = |f: fn(&Sample) -> f64| spread(v, f).0;
        let rss = v.iter().map(|s| s.rss_mib).fold(0.0, f64::max);
        md.push_str(&format!(
            "| {who} | {app} | {how} | {t:.0} ({lo:.0}–{hi:.0}) | {:.1} | {:.3} | {:.3} | {:.3} | {rss:.1} | {:.2} |\n",
            m(|s| s.per_request),
            m(|s| s.cpu_per_10k),
            m(|s| s.app_cpu_per_10k),
            m(|s| s.server_cpu_per_10k),
            m(|s| s.others_cores),
        ));
    }
    let all: Vec<&Sample> = results.values().flatten().collect();
    let unacked = all.iter().filter(|s| s.acked_ms.is_none()).count();
    let acked_max = all.iter().filter_map(|s| s.acked_ms).fold(0.0, f64::max);
    md.push_str(&format!(
        "\nThe Rust sink's app CPU is the driver process's (the sink and its polling). \"Other processes\": cores busy outside the benchmark's own processes during the drain (other work sharing the machine). After each drain the consumer had nothing pending or unacked within {acked_max:.0} ms (at most){}.\n\n",
        if unacked == 0 {
            String::new()
        } else {
            format!("; **{unacked} runs still had messages unacked after 10 s**")
        }
    ));
    let b = knobs.batch;
    md.push_str(&format!(
        "## Targets (per-round ratios of throughput: median, min–max)\n\n| target | ratio | goal |\n|---|---|---|\n\
         | Python app: jetrelay batch {b} ÷ jetrelay batch 1 | {} | ≥ 8× |\n\
         | Rust sink: jetrelay batch {b} ÷ bare single-message loop | {} | ≥ 2× |\n\
         | Rust sink: jetrelay batch {b} ÷ jetrelay batch 1 | {} | – |\n\
         | Rust sink: batch {b} ordering subject ÷ ordering none | {} | – |\n\n",
        ratio(results, Contender::PyBatch, Contender::Py1),
        ratio(results, Contender::Batch, Contender::Bare),
        ratio(results, Contender::Batch, Contender::Relay1),
        ratio(results, Contender::BatchSubject, Contender::Batch),
    ));
    md.push_str(&format!(
        "## Latency at a steady {LATENCY_RATE} msg/s ({LATENCY_MSGS} messages; publish to arrival of each message at the Rust sink)\n\n| contender | batch_size / wait ms / ordering | p50 ms | p99 ms | msgs / request |\n|---|---|---|---|---|\n"
    ));
    for (&c, v) in results {
        let l: Vec<(f64, f64, f64)> = v.iter().filter_map(|s| s.latency).collect();
        if l.is_empty() {
            continue;
        }
        let (who, _, how) = c.label(knobs);
        md.push_str(&format!(
            "| {who} | {how} | {:.2} | {:.2} | {:.1} |\n",
            spread(&l, |x| x.0).0,
            spread(&l, |x| x.1).0,
            spread(&l, |x| x.2).0,
        ));
    }
    md
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args = Args::parse();
    let n: u64 = args.num("n", 50_000)?;
    let rounds: usize = args.num("rounds", 5)?;
    let size: usize = args.num("size", 128)?;
    let knobs = Knobs {
        batch: args.num("batch", 100)?,
        wait_ms: args.num("wait", 20)?,
        in_flight: args.num("in-flight", 4)?,
        buffered: args.num("buffered", 1024)?,
        pull: args.num("pull", 500)?,
    };
    let contenders = args.only(&Contender::ALL);
    let env = Env::start(
        args.required("nats-server")?,
        args.required("relay")?.into(),
    )
    .await?;
    let sink = Sink::start().await?;
    let (stream, prefix) = (format!("BATCH{size}"), format!("batch{size}"));
    env.js
        .create_stream(jetstream::stream::Config {
            name: stream.clone(),
            subjects: vec![format!("{prefix}.>")],
            // The fill goes in fast-ingest batches.
            allow_batch_publish: true,
            ..Default::default()
        })
        .await?;
    eprintln!("filling {stream} with {n} messages of {size} B");
    let mode = fill(&env.js, |i| format!("{prefix}.fill.k{}", i % KEYS), n, size).await?;
    eprintln!("  filled with {}", mode.describe());
    let pulls = match std::env::var_os("BENCH_COUNT_PULLS") {
        Some(_) => Some(count_pulls(&env.nats_url).await?),
        None => None,
    };
    let bench = Bench {
        env: &env,
        sink: &sink,
        knobs,
        bare_bin: args.required("bare")?.into(),
        python: args.required("python")?.into(),
        py_app: args.required("py-app")?.into(),
        stream,
        prefix,
        size,
        pulls,
        quiet_wait: Duration::from_secs(args.num("quiet-wait", 60)?),
    };
    let mut results: BTreeMap<Contender, Vec<Sample>> = BTreeMap::new();
    let mut run = 0;
    for round in 1..=rounds {
        for &c in &contenders {
            run += 1;
            let (who, app, how) = c.label(&bench.knobs);
            eprintln!("round {round}: {who} → {app}, {how}");
            let s = bench.run_one(c, run).await?;
            eprintln!(
                "  {:.0} msg/s, {:.1} msgs/request, CPU s/10k {:.3} (app {:.3}, server {:.3}), {:.1} MiB, all acked after {}, others {:.2} cores{}",
                s.throughput,
                s.per_request,
                s.cpu_per_10k,
                s.app_cpu_per_10k,
                s.server_cpu_per_10k,
                s.rss_mib,
                s.acked_ms
                    .map_or("never".into(), |ms| format!("{ms:.0} ms")),
                s.others_cores,
                s.latency.map_or(String::new(), |(p50, p99, per)| format!(
                    ", p50 {p50:.2} ms, p99 {p99:.2} ms ({per:.1} msgs/request)"
                )),
            );
            results.entry(c).or_default().push(s);
        }
    }
    let md = report(&bench, (rounds, n), &results);
    print!("{md}");
    save_report(&args, "batch-", &md)?;
    drop(bench);
    env.close().await;
    Ok(())
}
