//! The publishing benchmark (`bench/outputs`): the outputs of jetrelay's answers (README,
//! "Publishing through jetrelay") against plain forwarding. Starts nats-server (file
//! store), fills an input stream (`in.>`, 1,000 subjects) once and runs every
//! contender interleaved for several rounds, each on a fresh durable and a freshly
//! created output stream (`out.>`; jetrelay has `[publish] allowed_subjects =
//! ["out.>"]`):
//!
//!   plain     the app answers a plain 200: no outputs (plain forwarding)
//!   atomic    the app answers 200 `application/vnd.jetrelay.publish+json` with three
//!             outputs (`out.a`, `out.b`, `out.c`, each carrying the input's payload);
//!             jetrelay publishes them as one atomic batch to a stream with
//!             `allow_atomic: true`, then acks the input (confirmed)
//!   onebyone  the same answer with `publish.atomic = false`: three publishes, each
//!             awaiting its PubAck, to a stream without `allow_atomic`
//!   atomicmem `atomic` to an output stream in memory storage: nats-server stages
//!             each atomic batch of an R1 file-store stream in a file store of its
//!             own (`newBatchStore` in server/jetstream_batching.go), of any other
//!             stream in memory; this contender shows what that staging costs
//!   batch     batch delivery (`batch_size` 100, `ordering = "none"`, 4 requests in
//!             flight, `max_buffered` 1024, pulls of 500, as `bench/batch`): the app
//!             answers each batch with `{"results": [...]}`, a result per message (by
//!             its `id`) carrying that message's three outputs; each message's
//!             outputs go as one atomic batch to the output stream in memory
//!   batchsubj `batch` with `ordering = "subject"` (the inputs are spread over 1,000
//!             subjects: a batch holds mostly distinct keys)
//!
//! The app is the Rust sink of `bench/run`, answering at once. Per run: the drain
//! throughput (inputs per second from the first arrival at the app to every input
//! acked), outputs stored per second, CPU seconds per 10,000 inputs of jetrelay,
//! nats-server and the driver (the sink), peak RSS, redeliveries and jetrelay's
//! publish failures by reason; then the check that the output stream holds exactly 3
//! × inputs messages, `inputs` per output subject (no loss, no duplicates); then the
//! latency at a steady rate: publish of the input to its arrival at the app, and to
//! its last output (`out.c`) delivered from the output stream (an ordered consumer),
//! i.e. stored. Prints a markdown report and writes it to
//! `<out>/<prefix><unix-seconds>.md` (`outputs-` unless `--prefix`). Never fails on
//! timing.
//!
//! With `--baseline=PATH` (another jetrelay build, e.g. of an earlier commit), every
//! contender runs with both builds back to back in each round, and the report compares
//! them (`--relay-name`, `--baseline-name`: what to call them).
//!
//!   outputs --nats-server=PATH --relay=PATH [--out=DIR] [--rounds=3] [--n=20000]
//!          [--size=128] [--in-flight=32] [--batch=100] [--batch-in-flight=4]
//!          [--batch-buffered=1024] [--batch-pull=500]
//!          [--only=plain,atomic,onebyone,atomicmem,batch,batchsubj]
//!          [--baseline=PATH] [--relay-name=current] [--baseline-name=baseline]
//!          [--prefix=outputs-] [--quiet-wait=60]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer};
use futures::StreamExt;
use jetrelay_bench::{
    Answer, Args, CpuWindow, Delivery, Env, Error, KEYS, LATENCY_MSGS, LATENCY_RATE, Sink,
    durable_source, fill, latency_run, machine, now_ns, p50_p99_ms, peak_rss_kib, quiet,
    quiet_note, ratio, relay_config, relay_metric, spread, stamp, start_relay_bin, stop,
    wait_acked, wait_for, write_report,
};

/// Requests in flight: below nats-server's default limit of 50 atomic batches in
/// flight per stream (`max_batch_inflight_per_stream`), which more would hit (the
/// publish fails with 10210, `too_many_batches`, and the input is retried).
const IN_FLIGHT: usize = 32;

const INPUT: &str = "IN";
const OUTPUT: &str = "OUT";
/// The subjects of the three outputs of each input; the last one is watched for the
/// latency.
const OUTPUTS: [&str; 3] = ["out.a", "out.b", "out.c"];

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Contender {
    Plain,
    Atomic,
    OneByOne,
    AtomicMem,
    Batch,
    BatchSubj,
}

impl Contender {
    const ALL: [Contender; 6] = [
        Contender::Plain,
        Contender::Atomic,
        Contender::OneByOne,
        Contender::AtomicMem,
        Contender::Batch,
        Contender::BatchSubj,
    ];

    fn label(self) -> &'static str {
        match self {
            Contender::Plain => "plain forwarding (200, no outputs)",
            Contender::Atomic => "3 outputs, atomic batch (`allow_atomic`)",
            Contender::OneByOne => "3 outputs, one by one (`publish.atomic = false`)",
            Contender::AtomicMem => "3 outputs, atomic batch, output stream in memory",
            Contender::Batch => {
                "batch delivery, 3 outputs per message, atomic, output stream in memory"
            }
            Contender::BatchSubj => {
                "batch delivery by subject, 3 outputs per message, atomic, output stream in memory"
            }
        }
    }

    /// Batch delivery (`batch_size` > 1).
    fn batched(self) -> bool {
        matches!(self, Contender::Batch | Contender::BatchSubj)
    }

    fn publishes(self) -> bool {
        self != Contender::Plain
    }

    /// `publish.atomic`, and the output stream's `allow_atomic`.
    fn atomic(self) -> bool {
        self.publishes() && self != Contender::OneByOne
    }

    /// The output stream's storage.
    fn storage(self) -> jetstream::stream::StorageType {
        match self {
            Contender::AtomicMem | Contender::Batch | Contender::BatchSubj => {
                jetstream::stream::StorageType::Memory
            }
            _ => jetstream::stream::StorageType::File,
        }
    }

    /// jetrelay's `[delivery]`.
    fn delivery(self, in_flight: usize, knobs: &BatchKnobs) -> Delivery {
        if !self.batched() {
            return Delivery {
                max_in_flight: in_flight,
                ..Delivery::single("none")
            };
        }
        Delivery {
            ordering: if self == Contender::BatchSubj {
                "subject"
            } else {
                "none"
            }
            .into(),
            max_in_flight: knobs.in_flight,
            max_buffered: knobs.buffered,
            max_batch: knobs.pull,
            batch_size: knobs.batch,
            batch_wait_ms: 0,
        }
    }
}

/// The batch contenders' `[delivery]`.
struct BatchKnobs {
    batch: usize,
    in_flight: usize,
    buffered: usize,
    pull: usize,
}

/// A jetrelay build the contenders run with.
struct Build {
    name: String,
    bin: PathBuf,
}

struct Sample {
    /// Inputs per second, from the first arrival at the app to every input acked.
    throughput: f64,
    /// Outputs stored per second over the same window.
    outputs_per_s: f64,
    relay_cpu_per_10k: f64,
    server_cpu_per_10k: f64,
    driver_cpu_per_10k: f64,
    rss_mib: f64,
    /// Messages the app got beyond one per input (retries, redeliveries).
    extra_requests: u64,
    /// jetrelay_publish_failures_total by reason (only those above 0).
    failures: Vec<(String, f64)>,
    /// `None`: the output stream holds exactly what it must; else what was wrong.
    wrong: Option<String>,
    /// p50, p99 ms: publish of the input to its arrival at the app (`None`: not
    /// measured, the drain ran below 1.5 × the latency run's rate).
    app_latency: Option<(f64, f64)>,
    /// p50, p99 ms: publish of the input to its last output delivered from the
    /// output stream (publishing contenders).
    stored_latency: Option<(f64, f64)>,
    others_cores: f64,
}

struct Bench<'a> {
    env: &'a Env,
    plain: &'a Sink,
    publishing: &'a Sink,
    n: u64,
    size: usize,
    in_flight: usize,
    batch: BatchKnobs,
    /// The first is `--relay`, the second `--baseline` if given.
    builds: Vec<Build>,
    quiet_wait: Duration,
}

impl Bench<'_> {
    /// Deletes the output stream (its duplicate window with it) and creates it again.
    async fn fresh_output(&self, c: Contender) -> Result<jetstream::stream::Stream, Error> {
        let js = &self.env.js;
        let _ = js.delete_stream(OUTPUT).await;
        Ok(js
            .create_stream(jetstream::stream::Config {
                name: OUTPUT.into(),
                subjects: vec!["out.>".into()],
                allow_atomic_publish: c.atomic(),
                storage: c.storage(),
                ..Default::default()
            })
            .await?)
    }

    async fn run_one(&self, c: Contender, build: &Build, run: usize) -> Result<Sample, Error> {
        let env = self.env;
        quiet(env.ticks, self.quiet_wait).await;
        let out = self.fresh_output(c).await?;
        let sink = if c.publishes() {
            self.publishing
        } else {
            self.plain
        };
        sink.reset();
        let durable = format!("d{run}");
        let delivery = c.delivery(self.in_flight, &self.batch);
        let mut config = relay_config(
            env,
            &durable_source(INPUT, &durable),
            &delivery,
            &sink.url(),
            30_000,
        );
        config.text.push_str(&format!(
            "[publish]\nallowed_subjects = [\"out.>\"]\natomic = {}\n",
            c.atomic()
        ));
        let running = start_relay_bin(env, &build.bin, &config, &format!("outputs{run}")).await?;
        let pid = running.child.id().unwrap_or(0);
        let window = CpuWindow::start(env.ticks, &[pid, env.nats_pid, std::process::id()]);
        let n = self.n;
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
        // Messages, not requests: a batch request counts its messages.
        let extra_requests = sink.count().saturating_sub(n);
        let expected = if c.publishes() { n } else { 0 };
        let wrong = self.check_outputs(&out, expected).await?;
        let stored = out.get_info().await?.state.messages;
        let failures = relay_metric(config.admin, "jetrelay_publish_failures_total")
            .await?
            .into_iter()
            .filter(|(_, v)| *v > 0.0)
            .collect();
        // The latency at a steady rate, where the drain shows room for it (else it
        // would measure a growing queue).
        let throughput = n as f64 / secs;
        let (app_latency, stored_latency) = if throughput < 1.5 * LATENCY_RATE as f64 {
            (None, None)
        } else {
            let watcher = if c.publishes() {
                Some(Watcher::start(&out).await?)
            } else {
                None
            };
            let subject = |i| format!("in.lat.k{}", i % KEYS);
            let app = latency_run(&env.js, sink, subject, self.size).await?;
            let stored = match watcher {
                Some(w) => Some(w.finish(LATENCY_MSGS).await?),
                None => None,
            };
            (Some(app), stored)
        };
        let rss_mib = peak_rss_kib(pid) as f64 / 1024.0;
        stop(running.child).await;
        let input = env.js.get_stream(INPUT).await?;
        let _ = input.delete_consumer(&durable).await;
        input.purge().filter("in.lat.>").await?;
        Ok(Sample {
            throughput,
            outputs_per_s: stored as f64 / secs,
            relay_cpu_per_10k: per_10k(0),
            server_cpu_per_10k: per_10k(1),
            driver_cpu_per_10k: per_10k(2),
            rss_mib,
            extra_requests,
            failures,
            wrong,
            app_latency,
            stored_latency,
            others_cores: cpu.others_cores,
        })
    }

    /// `None` when the output stream holds exactly `per_subject` messages on each
    /// output subject and nothing else; else what it holds.
    async fn check_outputs(
        &self,
        out: &jetstream::stream::Stream,
        per_subject: u64,
    ) -> Result<Option<String>, Error> {
        // The inputs were acked after their outputs' PubAck: nothing is on its way.
        let mut subjects = out.info_with_subjects("out.>").await?;
        let total = subjects.info.state.messages;
        let mut counts = BTreeMap::new();
        while let Some(s) = subjects.next().await {
            let (subject, count) = s?;
            counts.insert(subject, count as u64);
        }
        let good = total == per_subject * OUTPUTS.len() as u64
            && if per_subject == 0 {
                counts.is_empty()
            } else {
                counts.len() == OUTPUTS.len()
                    && OUTPUTS
                        .iter()
                        .all(|s| counts.get(*s).copied() == Some(per_subject))
            };
        Ok((!good).then(|| format!("{total} stored: {counts:?}")))
    }
}

/// Publish-to-stored latencies: an ordered consumer on the output stream reads each
/// new `out.c` (the last output of an input) and times it from the input's stamp.
struct Watcher {
    latencies_us: Arc<Mutex<Vec<u64>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Watcher {
    async fn start(out: &jetstream::stream::Stream) -> Result<Watcher, Error> {
        let mut messages = out
            .create_consumer(consumer::pull::OrderedConfig {
                filter_subject: OUTPUTS[2].into(),
                deliver_policy: consumer::DeliverPolicy::New,
                ..Default::default()
            })
            .await?
            .messages()
            .await?;
        let latencies_us = Arc::new(Mutex::new(Vec::new()));
        let l = latencies_us.clone();
        let task = tokio::spawn(async move {
            while let Some(Ok(m)) = messages.next().await {
                let at = now_ns();
                if let Some((ts, 1)) = stamp(&m.payload) {
                    l.lock().unwrap().push(at.saturating_sub(ts) / 1000);
                }
            }
        });
        Ok(Watcher { latencies_us, task })
    }

    /// Waits (at most 60 s) for `n` outputs; p50 and p99 in ms.
    async fn finish(self, n: u64) -> Result<(f64, f64), Error> {
        let l = self.latencies_us.clone();
        let seen = wait_for(
            "the outputs of the latency run",
            Duration::from_secs(60),
            || l.lock().unwrap().len() as u64 >= n,
        )
        .await;
        self.task.abort();
        seen?;
        let mut v = self.latencies_us.lock().unwrap().clone();
        Ok(p50_p99_ms(&mut v))
    }
}

// === the report ===

/// The samples of each contender with each build (index into `Bench::builds`).
type Results = BTreeMap<(Contender, usize), Vec<Sample>>;

fn report(bench: &Bench<'_>, rounds: usize, results: &Results) -> String {
    let (n, size, b) = (bench.n, bench.size, &bench.batch);
    let compared = bench.builds.len() > 1;
    let mut md = format!(
        "# jetrelay publishing benchmark (outputs of answers)\n\nMachine: {}; nats-server {} (file store) on loopback. {rounds} rounds, contenders interleaved, each on a fresh durable consumer and a freshly created output stream (`out.>`, R1, file store except for the memory-storage contenders, default 2-minute duplicate window). {n} inputs of {size} B pre-filled over {KEYS} subjects; jetrelay with `[publish] allowed_subjects = [\"out.>\"]`; one message per request: `ordering = \"none\"`, {} requests in flight, `max_buffered` 256; batch delivery: `batch_size` {}, {} requests in flight, `max_buffered` {}, pulls of {}, `batch_wait_ms` 0, `ordering = \"none\"` (`batch`) or `\"subject\"` (`batchsubj`). The app is `bench/run`'s Rust sink answering at once: a plain 200, or 200 `{}` with `{{\"publish\": [...]}}` of three outputs (`out.a`, `out.b`, `out.c`, each carrying the input's {size} B payload), all captured by the one output stream; to a batch, 200 `{{\"results\": [{{\"id\": ..., \"action\": \"ack\", \"publish\": [...]}}, ...]}}`, a result per message of the request with its three outputs. Throughput = inputs per second from the first arrival at the app to every input acked (the consumer has nothing pending or unacked); outputs/s over the same window. Medians, with min–max. jetrelay logs one JSON line per message at `info`, as deployed.{}",
        machine(),
        bench.env.nats_version,
        bench.in_flight,
        b.batch,
        b.in_flight,
        b.buffered,
        b.pull,
        jetrelay_bench::PUBLISH_TYPE,
        quiet_note(bench.quiet_wait),
    );
    if compared {
        md.push_str(&format!(
            " Two jetrelay builds, `{}` and `{}`: in each round every contender ran with both, back to back.",
            bench.builds[0].name, bench.builds[1].name
        ));
    }
    md.push_str("\n\n");
    let row_label = |c: Contender, build: usize| {
        if compared {
            format!("{} — `{}`", c.label(), bench.builds[build].name)
        } else {
            c.label().to_string()
        }
    };
    md.push_str("## Drain of the pre-filled inputs\n\n| contender | inputs/s (min–max) | × plain | outputs stored/s | jetrelay CPU s / 10k inputs | nats-server CPU s / 10k | sink (driver) CPU s / 10k | peak RSS MiB | extra deliveries | publish failures | output stream exact | other processes, cores |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    let t = |c: Contender, build: usize| -> Vec<f64> {
        results
            .get(&(c, build))
            .map_or(Vec::new(), |v| v.iter().map(|s| s.throughput).collect())
    };
    for (&(c, build), v) in results {
        let (tp, lo, hi) = spread(v, |s| s.throughput);
        let m = |f: fn(&Sample) -> f64| spread(v, f).0;
        let rss = v.iter().map(|s| s.rss_mib).fold(0.0, f64::max);
        let failures: BTreeMap<String, f64> =
            v.iter()
                .flat_map(|s| s.failures.iter())
                .fold(BTreeMap::new(), |mut m, (k, x)| {
                    *m.entry(k.clone()).or_default() += x;
                    m
                });
        let failures = if failures.is_empty() {
            "0".to_string()
        } else {
            failures
                .iter()
                .map(|(k, x)| format!("{x:.0} {k}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let wrong = v.iter().filter(|s| s.wrong.is_some()).count();
        let exact = if wrong == 0 {
            format!("yes, {}/{}", v.len(), v.len())
        } else {
            format!("**NO in {wrong} of {}**", v.len())
        };
        md.push_str(&format!(
            "| {} | {tp:.0} ({lo:.0}–{hi:.0}) | {} | {} | {:.3} | {:.3} | {:.3} | {rss:.1} | {} | {failures} | {exact} | {:.2} |\n",
            row_label(c, build),
            if c == Contender::Plain { "1.00".into() } else { ratio(&t(c, build), &t(Contender::Plain, build)) },
            if c.publishes() { format!("{:.0}", m(|s| s.outputs_per_s)) } else { "–".into() },
            m(|s| s.relay_cpu_per_10k),
            m(|s| s.server_cpu_per_10k),
            m(|s| s.driver_cpu_per_10k),
            v.iter().map(|s| s.extra_requests).sum::<u64>(),
            m(|s| s.others_cores),
        ));
    }
    for ((c, build), v) in results {
        for s in v {
            if let Some(w) = &s.wrong {
                md.push_str(&format!(
                    "\n- {c:?} (`{}`): the output stream held {w}",
                    bench.builds[*build].name
                ));
            }
        }
    }
    md.push_str(&format!(
        "\n\"Output stream exact\": after each drain the output stream held exactly 3 × {n} messages, {n} on each output subject (0 for plain forwarding): none lost, none stored twice. \"Extra deliveries\": messages the app got beyond one per input, summed over the rounds (retries after a failed publish, redeliveries). \"Publish failures\": `jetrelay_publish_failures_total` by reason, summed over the rounds. The sink's CPU is the driver process's (the sink and its polling).\n\n"
    ));
    md.push_str(&format!(
        "## Latency at a steady {LATENCY_RATE} msg/s ({LATENCY_MSGS} inputs)\n\n| contender | input published → at the app: p50 ms | p99 ms | input published → last output stored (`out.c` read from the stream): p50 ms | p99 ms |\n|---|---|---|---|---|\n"
    ));
    for (&(c, build), v) in results {
        let stored: Vec<(f64, f64)> = v.iter().filter_map(|s| s.stored_latency).collect();
        let (s50, s99) = if stored.is_empty() {
            ("–".to_string(), "–".to_string())
        } else {
            (
                format!("{:.2}", spread(&stored, |x| x.0).0),
                format!("{:.2}", spread(&stored, |x| x.1).0),
            )
        };
        let app: Vec<(f64, f64)> = v.iter().filter_map(|s| s.app_latency).collect();
        if app.is_empty() {
            md.push_str(&format!(
                "| {} | not measured: the drain ran below 1.5 × {LATENCY_RATE} inputs/s | | | |\n",
                row_label(c, build)
            ));
            continue;
        }
        md.push_str(&format!(
            "| {} | {:.2} | {:.2} | {s50} | {s99} |\n",
            row_label(c, build),
            spread(&app, |x| x.0).0,
            spread(&app, |x| x.1).0,
        ));
    }
    md.push_str(
        "\n## Per-round ratios of throughput (median, min–max)\n\n| ratio | |\n|---|---|\n",
    );
    let pairs = [
        (Contender::Atomic, Contender::Plain, "atomic ÷ plain"),
        (Contender::OneByOne, Contender::Plain, "one by one ÷ plain"),
        (
            Contender::Atomic,
            Contender::OneByOne,
            "atomic ÷ one by one",
        ),
        (
            Contender::AtomicMem,
            Contender::Plain,
            "atomic, output in memory ÷ plain",
        ),
        (
            Contender::AtomicMem,
            Contender::OneByOne,
            "atomic, output in memory ÷ one by one",
        ),
        (
            Contender::Batch,
            Contender::AtomicMem,
            "batch delivery ÷ atomic, output in memory (one message per request)",
        ),
        (
            Contender::BatchSubj,
            Contender::Batch,
            "batch delivery by subject ÷ batch delivery",
        ),
    ];
    for (build, b) in bench.builds.iter().enumerate() {
        for (num, den, what) in pairs {
            let (x, y) = (t(num, build), t(den, build));
            if x.is_empty() || y.is_empty() {
                continue;
            }
            let what = if compared {
                format!("{what}, `{}`", b.name)
            } else {
                what.to_string()
            };
            md.push_str(&format!("| {what} | {} |\n", ratio(&x, &y)));
        }
    }
    if compared {
        let (now, then) = (&bench.builds[0].name, &bench.builds[1].name);
        md.push_str(&format!(
            "\n## `{now}` ÷ `{then}`, per round (median, min–max)\n\n| contender | inputs/s | outputs stored/s |\n|---|---|---|\n"
        ));
        for c in Contender::ALL {
            let (Some(a), Some(z)) = (results.get(&(c, 0)), results.get(&(c, 1))) else {
                continue;
            };
            let out = |v: &Vec<Sample>| v.iter().map(|s| s.outputs_per_s).collect::<Vec<_>>();
            md.push_str(&format!(
                "| {} | {} | {} |\n",
                c.label(),
                ratio(&t(c, 0), &t(c, 1)),
                if c.publishes() {
                    ratio(&out(a), &out(z))
                } else {
                    "–".into()
                },
            ));
        }
    }
    md
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args = Args::parse();
    let n: u64 = args.num("n", 20_000)?;
    let rounds: usize = args.num("rounds", 3)?;
    let size: usize = args.num("size", 128)?;
    let contenders = args.only(&Contender::ALL);
    let relay: PathBuf = args.required("relay")?.into();
    let mut builds = vec![Build {
        name: args.get("relay-name").unwrap_or("current").into(),
        bin: relay.clone(),
    }];
    if let Some(bin) = args.get("baseline") {
        builds.push(Build {
            name: args.get("baseline-name").unwrap_or("baseline").into(),
            bin: bin.into(),
        });
    }
    let env = Env::start(args.required("nats-server")?, relay).await?;
    let plain = Sink::start().await?;
    let publishing = Sink::start_with(Answer::Publish(OUTPUTS.map(String::from).to_vec())).await?;
    env.js
        .create_stream(jetstream::stream::Config {
            name: INPUT.into(),
            subjects: vec!["in.>".into()],
            // The fill goes in fast-ingest batches.
            allow_batch_publish: true,
            ..Default::default()
        })
        .await?;
    eprintln!("filling {INPUT} with {n} messages of {size} B");
    let mode = fill(&env.js, |i| format!("in.fill.k{}", i % KEYS), n, size).await?;
    eprintln!("  filled with {}", mode.describe());
    let bench = Bench {
        env: &env,
        plain: &plain,
        publishing: &publishing,
        n,
        size,
        in_flight: args.num("in-flight", IN_FLIGHT)?,
        batch: BatchKnobs {
            batch: args.num("batch", 100)?,
            in_flight: args.num("batch-in-flight", 4)?,
            buffered: args.num("batch-buffered", 1024)?,
            pull: args.num("batch-pull", 500)?,
        },
        builds,
        quiet_wait: Duration::from_secs(args.num("quiet-wait", 60)?),
    };
    let mut results = Results::new();
    let mut run = 0;
    for round in 1..=rounds {
        for &c in &contenders {
            for (i, build) in bench.builds.iter().enumerate() {
                run += 1;
                eprintln!("round {round}: {} ({})", c.label(), build.name);
                let s = bench.run_one(c, build, run).await?;
                eprintln!(
                    "  {:.0} inputs/s, {:.0} outputs/s, CPU s/10k {:.3} (server {:.3}, sink {:.3}), {:.1} MiB, {} extra deliveries, failures {:?}, output stream {}{}{}, others {:.2} cores",
                    s.throughput,
                    s.outputs_per_s,
                    s.relay_cpu_per_10k,
                    s.server_cpu_per_10k,
                    s.driver_cpu_per_10k,
                    s.rss_mib,
                    s.extra_requests,
                    s.failures,
                    s.wrong.as_deref().unwrap_or("exact"),
                    s.app_latency.map_or(String::new(), |(a, b)| format!(
                        ", app p50/p99 {a:.2}/{b:.2} ms"
                    )),
                    s.stored_latency.map_or(String::new(), |(a, b)| format!(
                        ", stored p50/p99 {a:.2}/{b:.2} ms"
                    )),
                    s.others_cores,
                );
                results.entry((c, i)).or_default().push(s);
            }
        }
    }
    let md = report(&bench, rounds, &results);
    print!("{md}");
    if let Some(out) = args.get("out") {
        let prefix = args.get("prefix").unwrap_or("outputs-");
        let path = write_report(Path::new(out), prefix, None, &md)?;
        eprintln!("written to {}", path.display());
    }
    env.close().await;
    Ok(())
}
