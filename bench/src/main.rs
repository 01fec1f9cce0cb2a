//! The benchmark driver (`bench/run`): starts nats-server (file store) and a fast
//! HTTP sink, fills a 16-partition stream (1,000 keys) for each message size, and
//! runs every contender interleaved for several rounds:
//!
//!   a  bare    — the bare-minimum Rust loop (bench/src/bin/bare.rs)
//!   b  none    — jetrelay, durable source, ordering "none"
//!   c  group   — jetrelay, static group member owning all 16 partitions, "partition"
//!   d  subject — jetrelay, durable source, ordering "subject"
//!   e  python  — natsio-pcgroups + aiohttp forwarder (bench/py_forwarder.py)
//!   f  otel    — (b) exporting spans to a local OTLP collector, sample_ratio 0.1 and 1.0
//!
//! The rounds run the contenders in the orders of a Williams design: over k rounds
//! (2k when k is odd) each contender runs right after each other equally often.
//!
//! Per run: drain throughput, CPU seconds per 10,000 messages and peak RSS of the
//! contender process, then end-to-end p50/p99 latency at 1,000 msg/s. Also: start to
//! ready, and the handover time after SIGTERM and SIGKILL of a pinned instance.
//! Ratios are given two ways: the median throughputs' ratio, and the median of each
//! round's ratio (the two runs of a round are minutes apart, so a slow stretch of a
//! shared machine weighs on both sides of it).
//! Prints a markdown report and writes it to bench/results/.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use jetrelay_bench::{
    Args, Delivery, Env, Error, IN_FLIGHT, KEYS, LATENCY_MSGS, LATENCY_RATE, PARTITIONS, Running,
    Sink, cpu_seconds, durable_source, fill, latency_run, machine, median, payload, peak_rss_kib,
    relay_config, signal, start_bare, start_line_ready, start_relay, stop, wait_for, write_report,
};
use tokio::process::Command;

// === contenders ===

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Contender {
    Bare,
    BareFiltered,
    RelayNone,
    RelayGroup,
    RelaySubject,
    Python,
    OtelTenth,
    OtelAll,
}

impl Contender {
    const ALL: [Contender; 8] = [
        Contender::Bare,
        Contender::BareFiltered,
        Contender::RelayNone,
        Contender::RelayGroup,
        Contender::RelaySubject,
        Contender::Python,
        Contender::OtelTenth,
        Contender::OtelAll,
    ];

    fn label(self) -> &'static str {
        match self {
            Contender::Bare => "(a) bare Rust loop",
            Contender::BareFiltered => "(a') bare loop, 16 partition filters",
            Contender::RelayNone => "(b) jetrelay durable, ordering none",
            Contender::RelayGroup => "(c) jetrelay static group, ordering partition",
            Contender::RelaySubject => "(d) jetrelay durable, ordering subject",
            Contender::Python => "(e) Python natsio-pcgroups + aiohttp",
            Contender::OtelTenth => "(f) (b) + tracing, sample_ratio 0.1",
            Contender::OtelAll => "(f') (b) + tracing, sample_ratio 1.0",
        }
    }
}

/// The contenders' programs besides jetrelay.
struct Tools {
    bare_bin: PathBuf,
    python: PathBuf,
    py_forwarder: PathBuf,
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
    tools: &Tools,
    c: Contender,
    stream: &str,
    run: usize,
    sink: &Sink,
) -> Result<Running, Error> {
    let durable = format!("d{run}");
    let group = format!("g{run}");
    match c {
        Contender::Bare | Contender::BareFiltered => {
            let partitions = (c == Contender::BareFiltered).then_some(PARTITIONS);
            start_bare(
                env,
                &tools.bare_bin,
                stream,
                &durable,
                &sink.url(),
                partitions,
            )
            .await
        }
        Contender::RelayNone
        | Contender::RelaySubject
        | Contender::OtelTenth
        | Contender::OtelAll => {
            let ordering = if c == Contender::RelaySubject {
                "subject"
            } else {
                "none"
            };
            let mut config = relay_config(
                env,
                &durable_source(stream, &durable),
                &Delivery::single(ordering),
                &sink.url(),
                30_000,
            );
            let ratio = match c {
                Contender::OtelTenth => Some(0.1),
                Contender::OtelAll => Some(1.0),
                _ => None,
            };
            if let Some(ratio) = ratio {
                config.text.push_str(&format!(
                    "[otel]\nendpoint = \"{}\"\nsample_ratio = {ratio}\n",
                    sink.otel_endpoint()
                ));
            }
            start_relay(env, &config, &format!("run{run}")).await
        }
        Contender::RelayGroup => {
            create_static_group(env, stream, &group).await?;
            let source = static_source(stream, &group);
            let ordering =
                std::env::var("BENCH_GROUP_ORDERING").unwrap_or_else(|_| "partition".into());
            start_relay(
                env,
                &relay_config(
                    env,
                    &source,
                    &Delivery::single(&ordering),
                    &sink.url(),
                    30_000,
                ),
                &format!("run{run}"),
            )
            .await
        }
        Contender::Python => {
            create_static_group(env, stream, &group).await?;
            let mut cmd = Command::new(&tools.python);
            cmd.arg(&tools.py_forwarder)
                .args([&env.nats_url, stream, &group, "m1", &sink.url()]);
            start_line_ready(cmd).await
        }
    }
}

fn static_source(stream: &str, group: &str) -> String {
    format!("stream = \"{stream}\"\nkind = \"static\"\ngroup = \"{group}\"\nmember = \"m1\"")
}

struct Sample {
    throughput: f64,
    cpu_per_10k: f64,
    server_cpu_per_10k: f64,
    rss_mib: f64,
    p50_ms: f64,
    p99_ms: f64,
    ready_ms: f64,
    /// OTLP bytes the local collector took during the run, and the spans jetrelay
    /// dropped.
    span_bytes: u64,
    spans_dropped: f64,
}

/// The order of k contenders in `round` (from 1): a row of a Williams design, in
/// which over k rounds (2k when k is odd: each row, then each row reversed) every
/// contender runs right after every other the same number of times.
fn order(k: usize, round: usize) -> Vec<usize> {
    // 0, 1, k-1, 2, k-2, …: the first row, whose steps between neighbours are all
    // different modulo k.
    let first = (0..k).map(|j| match j {
        0 => 0,
        j if j % 2 == 1 => j.div_ceil(2),
        j => k - j / 2,
    });
    let period = if k.is_multiple_of(2) { k } else { 2 * k };
    let r = (round.max(1) - 1) % period.max(1);
    let mut row: Vec<usize> = first.map(|b| (b + r) % k).collect();
    if r >= k {
        row.reverse();
    }
    row
}

/// The median throughput of a contender's runs.
fn throughput(v: &[Sample]) -> f64 {
    median(&mut v.iter().map(|s| s.throughput).collect::<Vec<f64>>())
}

/// The median over the rounds of `v`'s throughput over `base`'s in the same round:
/// the contenders of one round run minutes apart, so a slower stretch of a shared
/// machine weighs on both sides of each ratio.
fn per_round(v: &[Sample], base: &[Sample]) -> f64 {
    median(
        &mut v
            .iter()
            .zip(base)
            .map(|(s, b)| s.throughput / b.throughput)
            .collect::<Vec<f64>>(),
    )
}

#[allow(clippy::too_many_arguments)]
async fn run_one(
    env: &Env,
    tools: &Tools,
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
    let running = start_contender(env, tools, c, stream, run, sink).await?;
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
    let throughput = sink.rate();
    // The latency run starts from a reset sink: keep what the drain exported.
    let drain_span_bytes = sink.state.lock().unwrap().span_bytes;
    // Latency at a fixed, moderate rate.
    let (p50_ms, p99_ms) =
        latency_run(&env.js, sink, |i| format!("{prefix}.k{}", i % KEYS), size).await?;
    let rss_mib = peak_rss_kib(pid) as f64 / 1024.0;
    let spans_dropped = match running.admin {
        Some(port) => jetrelay_bench::relay_metric(port, "jetrelay_otel_spans_dropped_total")
            .await?
            .first()
            .map_or(0.0, |(_, v)| *v),
        None => 0.0,
    };
    stop(running.child).await;
    let span_bytes = drain_span_bytes + sink.state.lock().unwrap().span_bytes;
    // Leave the stream to the next contender: drop this run's consumers.
    let s = env.js.get_stream(stream).await?;
    for name in [format!("d{run}"), format!("g{run}-m1")] {
        let _ = s.delete_consumer(&name).await;
    }
    Ok(Sample {
        throughput,
        cpu_per_10k: cpu / target as f64 * 10_000.0,
        server_cpu_per_10k: server_cpu / target as f64 * 10_000.0,
        rss_mib,
        p50_ms,
        p99_ms,
        ready_ms: running.ready_after.as_secs_f64() * 1000.0,
        span_bytes,
        spans_dropped,
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
    let source = static_source(stream, group);
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
        &relay_config(
            env,
            &source,
            &Delivery::single("partition"),
            &sink_a.url(),
            ack_wait,
        ),
        &format!("{group}-a"),
    )
    .await?;
    wait_for("A serves", Duration::from_secs(60), || sink_a.count() > 50).await?;
    let b = start_relay(
        env,
        &relay_config(
            env,
            &source,
            &Delivery::single("partition"),
            &sink_b.url(),
            ack_wait,
        ),
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
        &relay_config(
            env,
            &source,
            &Delivery::single("partition"),
            &sink_a.url(),
            ack_wait,
        ),
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

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args = Args::parse();
    let n: u64 = args.num("n", 20_000)?;
    let rounds: usize = args.num("rounds", 3)?;
    let sizes: Vec<usize> = args
        .get("sizes")
        .unwrap_or("128,1024")
        .split(',')
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let tools = Tools {
        bare_bin: args.required("bare")?.into(),
        python: args.required("python")?.into(),
        py_forwarder: args.required("py-forwarder")?.into(),
    };
    let env = Env::start(
        args.required("nats-server")?,
        args.required("relay")?.into(),
    )
    .await?;
    let nats_version = env.nats_version.clone();
    let sink = Sink::start().await?;
    let contenders = args.only(&Contender::ALL);

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
                // The fill goes in fast-ingest batches.
                allow_batch_publish: true,
                ..Default::default()
            })
            .await?;
        eprintln!("filling {stream} with {n} messages of {size} B");
        let mode = fill(&env.js, |i| format!("{prefix}.k{}", i % KEYS), n, size).await?;
        eprintln!("  filled with {}", mode.describe());
        for round in 1..=rounds {
            // What one contender leaves behind, the next pays for: the orders are
            // balanced so that each runs right after each other equally often.
            for c in order(contenders.len(), round)
                .into_iter()
                .map(|i| contenders[i])
            {
                run += 1;
                eprintln!("size {size} round {round}: {}", c.label());
                let s = run_one(&env, &tools, c, &stream, &prefix, size, run, &sink).await?;
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
    md.push_str("| size | contender | throughput msg/s (min–max) | × (a) | × (a) per round | p50 ms | p99 ms | CPU s / 10k msgs | nats-server CPU s / 10k | peak RSS MiB |\n|---|---|---|---|---|---|---|---|---|---|\n");
    for &size in &sizes {
        let bare = results.get(&(size, Contender::Bare));
        let base = bare.map(|v| throughput(v));
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
            let paired = bare.map_or("–".to_string(), |b| format!("{:.2}", per_round(v, b)));
            let m = |f: fn(&Sample) -> f64| median(&mut v.iter().map(f).collect::<Vec<_>>());
            let rss = v.iter().map(|s| s.rss_mib).fold(0.0, f64::max);
            md.push_str(&format!(
                "| {size} B | {} | {tm:.0} ({min:.0}–{max:.0}) | {ratio} | {paired} | {:.2} | {:.2} | {:.3} | {:.3} | {rss:.1} |\n",
                c.label(),
                m(|s| s.p50_ms),
                m(|s| s.p99_ms),
                m(|s| s.cpu_per_10k),
                m(|s| s.server_cpu_per_10k)
            ));
        }
    }
    // Tracing beside export off, each size: the throughput ratio and what went out.
    for &size in &sizes {
        let tm = |c| results.get(&(size, c)).map(|v: &Vec<Sample>| throughput(v));
        let Some(offs) = results.get(&(size, Contender::RelayNone)) else {
            continue;
        };
        let off = throughput(offs);
        for c in [Contender::OtelTenth, Contender::OtelAll] {
            let (Some(on), Some(v)) = (tm(c), results.get(&(size, c))) else {
                continue;
            };
            let mib = median(
                &mut v
                    .iter()
                    .map(|s| s.span_bytes as f64 / 1048576.0)
                    .collect::<Vec<f64>>(),
            );
            let dropped = median(&mut v.iter().map(|s| s.spans_dropped).collect::<Vec<f64>>());
            md.push_str(&format!(
                "\n{size} B, {}: {:.2}× export off (b), {:.2}× per round; {mib:.1} MiB of OTLP per run to the collector, {dropped:.0} spans dropped.",
                c.label(),
                on / off,
                per_round(v, offs)
            ));
        }
    }
    md.push('\n');
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
        // latest.md is the full report the README shows: a run of some contenders,
        // sizes or rounds only goes beside it.
        let full = args.get("only").is_none();
        write_report(Path::new(out), "", full.then_some("latest.md"), &md)?;
    }
    env.close().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::order;
    use std::collections::HashMap;

    #[test]
    fn over_a_period_each_contender_follows_each_other_equally_often() {
        for k in 1..=9usize {
            let period = if k.is_multiple_of(2) { k } else { 2 * k };
            let mut after: HashMap<(usize, usize), usize> = HashMap::new();
            for round in 1..=period {
                let row = order(k, round);
                let mut sorted = row.clone();
                sorted.sort_unstable();
                assert_eq!(sorted, (0..k).collect::<Vec<_>>(), "k {k} round {round}");
                for w in row.windows(2) {
                    *after.entry((w[0], w[1])).or_default() += 1;
                }
            }
            let counts: Vec<usize> = after.values().copied().collect();
            assert_eq!(after.len(), k * (k - 1), "k {k}: every ordered pair");
            assert!(counts.iter().all(|&c| c == counts[0]), "k {k}: {after:?}");
        }
    }
}
