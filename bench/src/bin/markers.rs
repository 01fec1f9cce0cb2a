//! The idempotency markers' benchmark (`bench/markers`): what `delivery.idempotency_bucket`
//! costs. Starts nats-server (file store), fills an input stream (`in.>`, 1,000
//! subjects) once, every message with its own `Nats-Msg-Id` (so that each delivery
//! reads its marker and each processed one writes it: the worst case), and runs the
//! contenders interleaved for several rounds, each on a fresh durable and, with
//! markers, a freshly created bucket:
//!
//!   plain       one message per request, 32 in flight, no markers
//!   markers     the same with `idempotency_bucket` (key `msg_id`)
//!   batch       batch delivery (`batch_size` 100, 4 in flight, `max_buffered` 1024,
//!               pulls of 500), no markers
//!   batchmark   the same with markers
//!
//! The app is `bench/run`'s Rust sink answering 200 at once. Per run: the drain
//! throughput (inputs per second from the first arrival at the app to every input
//! acked), CPU seconds per 10,000 inputs of jetrelay and nats-server, peak RSS, the
//! messages the app got beyond one per input, and the markers stored. Then the floor:
//! nats-server's and the client's CPU per marker written and read by a bare client,
//! 256, 64 and 8 at a time, and the bound it puts on the ratio with markers. Prints a
//! markdown report with the per-round ratios and writes it to
//! `<out>/markers-<unix-seconds>.md`. Never fails on timing.
//!
//!   markers --nats-server=PATH --relay=PATH [--out=DIR] [--rounds=3] [--n=20000]
//!          [--size=128] [--only=plain,markers,batch,batchmark] [--quiet-wait=60]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use futures::StreamExt;
use jetrelay_bench::{
    Args, CpuWindow, Delivery, Env, Error, KEYS, Msg, Sink, cpu_seconds, durable_source, fill_msgs,
    machine, payload, peak_rss_kib, quiet, quiet_note, ratio, relay_config, relay_metric,
    save_report, spread, start_relay_bin, stop, wait_acked, wait_for,
};

const INPUT: &str = "IN";
const BUCKET: &str = "bench-marks";

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Contender {
    Plain,
    Markers,
    Batch,
    BatchMark,
}

impl Contender {
    const ALL: [Contender; 4] = [
        Contender::Plain,
        Contender::Markers,
        Contender::Batch,
        Contender::BatchMark,
    ];

    fn name(self) -> &'static str {
        match self {
            Contender::Plain => "plain",
            Contender::Markers => "markers",
            Contender::Batch => "batch",
            Contender::BatchMark => "batchmark",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Contender::Plain => "one message per request, no markers",
            Contender::Markers => "one message per request, markers",
            Contender::Batch => "batch delivery (100), no markers",
            Contender::BatchMark => "batch delivery (100), markers",
        }
    }

    fn marks(self) -> bool {
        matches!(self, Contender::Markers | Contender::BatchMark)
    }

    /// The contender without markers it is measured against.
    fn base(self) -> Contender {
        match self {
            Contender::Markers => Contender::Plain,
            Contender::BatchMark => Contender::Batch,
            c => c,
        }
    }

    fn delivery(self) -> Delivery {
        match self {
            Contender::Plain | Contender::Markers => Delivery::single("none"),
            Contender::Batch | Contender::BatchMark => Delivery {
                ordering: "none".into(),
                max_in_flight: 4,
                max_buffered: 1024,
                max_batch: 500,
                batch_size: 100,
                batch_wait_ms: 0,
            },
        }
    }
}

struct Sample {
    throughput: f64,
    relay_cpu_per_10k: f64,
    server_cpu_per_10k: f64,
    rss_mib: f64,
    extra: u64,
    marked: u64,
    suppressed: f64,
    failures: f64,
}

async fn run_one(
    env: &Env,
    sink: &Sink,
    c: Contender,
    n: u64,
    run: usize,
    quiet_wait: Duration,
) -> Result<Sample, Error> {
    quiet(env.ticks, quiet_wait).await;
    // A fresh bucket: the markers of the last run would make every message a duplicate.
    let _ = env.js.delete_key_value(BUCKET).await;
    sink.reset();
    let durable = format!("d{run}");
    let mut config = relay_config(
        env,
        &durable_source(INPUT, &durable),
        &c.delivery(),
        &sink.url(),
        30_000,
    );
    if c.marks() {
        config.text = config.text.replacen(
            "[http]",
            &format!("idempotency_bucket = \"{BUCKET}\"\n[http]"),
            1,
        );
    }
    let running = start_relay_bin(env, &env.relay_bin, &config, &format!("markers{run}")).await?;
    let pid = running.child.id().unwrap_or(0);
    let window = CpuWindow::start(env.ticks, &[pid, env.nats_pid]);
    wait_for("the drain", Duration::from_secs(600), || sink.count() >= n).await?;
    if wait_acked(&env.js, INPUT, &durable, Duration::from_secs(300))
        .await?
        .is_none()
    {
        return Err(format!("{c:?}: inputs still unacked after 300 s").into());
    }
    let done = Instant::now();
    let cpu = window.finish();
    let secs = sink
        .first()
        .map_or(1e-6, |f| done.duration_since(f).as_secs_f64().max(1e-6));
    let per_10k = |i: usize| cpu.per_pid[i] / n as f64 * 10_000.0;
    let metric = |name: &'static str| async move {
        Ok::<f64, Error>(
            relay_metric(config.admin, name)
                .await?
                .iter()
                .map(|(_, v)| v)
                .sum(),
        )
    };
    let suppressed = metric("jetrelay_duplicates_suppressed_total").await?;
    let failures = metric("jetrelay_idempotency_failures_total").await?;
    let marked = if c.marks() {
        env.js
            .get_stream(format!("KV_{BUCKET}"))
            .await?
            .get_info()
            .await?
            .state
            .messages
    } else {
        0
    };
    let rss_mib = peak_rss_kib(pid) as f64 / 1024.0;
    stop(running.child).await;
    let _ = env
        .js
        .get_stream(INPUT)
        .await?
        .delete_consumer(&durable)
        .await;
    Ok(Sample {
        throughput: n as f64 / secs,
        relay_cpu_per_10k: per_10k(0),
        server_cpu_per_10k: per_10k(1),
        rss_mib,
        extra: sink.count().saturating_sub(n),
        marked,
        suppressed,
        failures,
    })
}

type Results = BTreeMap<Contender, Vec<Sample>>;

/// Markers written and read by the floor's client.
const FLOOR_N: usize = 20_000;

/// nats-server's and this process's (the bare client's; the sink is idle) CPU µs per
/// marker for `work` (`FLOOR_N` markers).
async fn cpu_us<F: std::future::Future<Output = Result<(), Error>>>(
    env: &Env,
    work: F,
) -> Result<(f64, f64), Error> {
    let me = std::process::id();
    let cpus = || {
        (
            cpu_seconds(env.nats_pid, env.ticks),
            cpu_seconds(me, env.ticks),
        )
    };
    let before = cpus();
    work.await?;
    let after = cpus();
    let per = |cpu: f64| cpu / FLOOR_N as f64 * 1e6;
    Ok((per(after.0 - before.0), per(after.1 - before.1)))
}

/// The floor: what a marker costs nats-server with no jetrelay and no app, written
/// and read by a bare client the ways the server offers, `depth` at a time. Where
/// jetrelay's cost over it lies, and how far below the forwarding's it can go.
async fn floor(env: &Env, bases: &[(&str, f64)]) -> Result<String, Error> {
    let bucket = "bench-floor";
    let _ = env.js.delete_key_value(bucket).await;
    env.js
        .create_key_value(jetstream::kv::Config {
            bucket: bucket.into(),
            history: 1,
            limit_markers: Some(Duration::from_secs(1)),
            ..Default::default()
        })
        .await?;
    let nc = env.js.client();
    let mut rows = String::new();
    let mut least = f64::MAX;
    let mut least_depth = 0;
    for depth in [256usize, 64, 8] {
        // Writes: `depth` KV publishes with `Nats-TTL` sent, then their PubAcks awaited.
        let (write, write_client) = cpu_us(env, async {
            for from in (0..FLOOR_N).step_by(depth) {
                let mut acks = Vec::with_capacity(depth);
                for i in from..(from + depth).min(FLOOR_N) {
                    let mut h = async_nats::HeaderMap::new();
                    h.insert("Nats-TTL", "86400");
                    let subject = format!("$KV.{bucket}.s{depth}.m{i}");
                    acks.push(env.js.publish_with_headers(subject, h, "".into()).await?);
                }
                for a in acks {
                    a.await?;
                }
            }
            Ok(())
        })
        .await?;
        // Reads: one batched direct get (`multi_last`) of `depth` keys not there, as
        // the bench's inputs find them.
        let inbox = nc.new_inbox();
        let mut replies = nc.subscribe(inbox.clone()).await?;
        let (read, read_client) = cpu_us(env, async {
            for from in (0..FLOOR_N).step_by(depth) {
                let subjects: Vec<String> = (from..(from + depth).min(FLOOR_N))
                    .map(|i| format!("$KV.{bucket}.absent.m{i}"))
                    .collect();
                let req = serde_json::json!({"batch": subjects.len(), "multi_last": subjects});
                nc.publish_with_reply(
                    format!("$JS.API.DIRECT.GET.KV_{bucket}"),
                    inbox.clone(),
                    req.to_string().into(),
                )
                .await?;
                // Until the end of the batch: a reply that is no stored message.
                while let Some(m) = replies.next().await {
                    let stored = m
                        .headers
                        .as_ref()
                        .is_some_and(|h| h.get("Nats-Sequence").is_some());
                    if !stored {
                        break;
                    }
                }
            }
            Ok(())
        })
        .await?;
        rows.push_str(&format!(
            "| {depth} | {write:.1} | {read:.1} | {write_client:.1} | {read_client:.1} |\n"
        ));
        let all = write + read + write_client + read_client;
        if all < least {
            (least, least_depth) = (all, depth);
        }
    }
    let _ = env.js.delete_key_value(bucket).await;
    let cores = std::thread::available_parallelism().map_or(1, usize::from) as f64;
    // Per delivery mode: the CPU an input takes without markers (the cores busy at its
    // throughput), and what the ratio would be if a marker cost only the floor.
    let bound: String = bases
        .iter()
        .map(|(mode, t)| {
            format!(
                " {mode}: without markers the machine forwarded {t:.0} inputs/s with its {cores} cores busy, {:.1} µs of CPU per input; the least a marker adds ({least:.1} µs, written and read {least_depth} at a time by the bare client, both sides) bounds the ratio with markers at {:.2}×.",
                cores * 1e6 / t,
                1.0 / (1.0 + t * least / (cores * 1e6))
            )
        })
        .collect();
    Ok(format!(
        "\n## The floor: a marker's cost to nats-server alone\n\nA bare client (async-nats, no jetrelay, no app) writes {FLOOR_N} markers per depth into a bucket made as jetrelay makes it (KV publishes with `Nats-TTL`, `depth` sent and then their PubAcks awaited) and reads {FLOOR_N} absent keys (batched direct gets, `multi_last`, `depth` keys each). CPU µs per marker, nats-server's and the client's:\n\n| depth | nats-server write µs | nats-server read µs | client write µs | client read µs |\n|---|---|---|---|---|\n{rows}\nThe server charges per round trip more than per message; the deepest rows are the least a marker costs it, whoever writes it, and the client's columns what the leanest client spends on it.{bound}\n"
    ))
}

fn report(
    n: u64,
    size: usize,
    rounds: usize,
    version: &str,
    quiet_wait: Duration,
    results: &Results,
) -> String {
    let mut md = format!(
        "# jetrelay idempotency markers benchmark\n\nMachine: {}; nats-server {version} (file store) on loopback. {rounds} rounds, contenders interleaved, each on a fresh durable and, with markers, a freshly created bucket (`{BUCKET}`, R1, file store, per-key TTLs). {n} inputs of {size} B pre-filled over {KEYS} subjects, each with its own `Nats-Msg-Id` (every delivery reads its marker, every processed one writes it). The app is `bench/run`'s Rust sink answering 200 at once. Throughput = inputs per second from the first arrival at the app to every input acked. Medians, with min–max. jetrelay logs one JSON line per message at `info`, as deployed.{}\n\n",
        machine(),
        quiet_note(quiet_wait),
    );
    md.push_str("| contender | inputs/s (min–max) | × without markers (per round) | jetrelay CPU s / 10k | nats-server CPU s / 10k | peak RSS MiB | extra deliveries | markers stored | suppressed | marker failures |\n|---|---|---|---|---|---|---|---|---|---|\n");
    let t = |c: Contender| -> Vec<f64> {
        results
            .get(&c)
            .map_or(Vec::new(), |v| v.iter().map(|s| s.throughput).collect())
    };
    for (&c, v) in results {
        let (tp, lo, hi) = spread(v, |s| s.throughput);
        let m = |f: fn(&Sample) -> f64| spread(v, f).0;
        md.push_str(&format!(
            "| {} | {tp:.0} ({lo:.0}–{hi:.0}) | {} | {:.3} | {:.3} | {:.1} | {} | {} | {:.0} | {:.0} |\n",
            c.label(),
            if c.marks() { ratio(&t(c), &t(c.base())) } else { "1.00".into() },
            m(|s| s.relay_cpu_per_10k),
            m(|s| s.server_cpu_per_10k),
            v.iter().map(|s| s.rss_mib).fold(0.0, f64::max),
            v.iter().map(|s| s.extra).sum::<u64>(),
            if c.marks() { format!("{:.0}", m(|s| s.marked as f64)) } else { "–".into() },
            v.iter().map(|s| s.suppressed).sum::<f64>(),
            v.iter().map(|s| s.failures).sum::<f64>(),
        ));
    }
    md.push_str("\n\"× without markers\": per round, the contender's throughput divided by the same delivery's without markers in that round. \"Markers stored\": the bucket's messages after the drain (one per input). \"Suppressed\" and \"marker failures\": `jetrelay_duplicates_suppressed_total` and `jetrelay_idempotency_failures_total`, summed over the rounds (0 expected: no input is a duplicate).\n");
    md
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args = Args::parse();
    let n: u64 = args.num("n", 20_000)?;
    let rounds: usize = args.num("rounds", 3)?;
    let size: usize = args.num("size", 128)?;
    let quiet_wait = Duration::from_secs(args.num("quiet-wait", 60)?);
    let only = args
        .get("only")
        .map(|s| s.split(',').map(String::from).collect::<Vec<_>>());
    let contenders: Vec<Contender> = Contender::ALL
        .into_iter()
        .filter(|c| {
            only.as_ref()
                .is_none_or(|o| o.iter().any(|x| x == c.name()))
        })
        .collect();
    let env = Env::start(
        args.required("nats-server")?,
        args.required("relay")?.into(),
    )
    .await?;
    let sink = Sink::start().await?;
    env.js
        .create_stream(jetstream::stream::Config {
            name: INPUT.into(),
            subjects: vec!["in.>".into()],
            allow_batch_publish: true,
            ..Default::default()
        })
        .await?;
    eprintln!("filling {INPUT} with {n} messages of {size} B, each with its own id");
    fill_msgs(&env.js, n, |i| {
        let mut h = async_nats::HeaderMap::new();
        h.insert("Nats-Msg-Id", format!("order-{i}").as_str());
        Msg {
            subject: format!("in.fill.k{}", i % KEYS),
            headers: Some(h),
            payload: payload(size, 0),
        }
    })
    .await?;
    let mut results = Results::new();
    let mut run = 0;
    for round in 1..=rounds {
        for &c in &contenders {
            run += 1;
            eprintln!("round {round}: {}", c.label());
            let s = run_one(&env, &sink, c, n, run, quiet_wait).await?;
            eprintln!(
                "  {:.0} inputs/s, CPU s/10k {:.3} (server {:.3}), {:.1} MiB, {} extra, {} markers, {} suppressed, {} failures",
                s.throughput,
                s.relay_cpu_per_10k,
                s.server_cpu_per_10k,
                s.rss_mib,
                s.extra,
                s.marked,
                s.suppressed,
                s.failures
            );
            results.entry(c).or_default().push(s);
        }
    }
    let mut md = report(n, size, rounds, &env.nats_version, quiet_wait, &results);
    eprintln!("the server's own cost of a marker");
    let bases: Vec<(&str, f64)> = [
        (Contender::Plain, "One message per request"),
        (Contender::Batch, "Batch delivery (100)"),
    ]
    .iter()
    .filter_map(|(c, mode)| Some((*mode, spread(results.get(c)?, |s| s.throughput).0)))
    .collect();
    md.push_str(&floor(&env, &bases).await?);
    print!("{md}");
    save_report(&args, "markers-", &md)?;
    env.close().await;
    Ok(())
}
