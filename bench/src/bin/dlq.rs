//! The dead-letter benchmark (`bench/dlq`): `jetrelay dlq ls` and `jetrelay dlq
//! replay` against the obvious script. Starts nats-server (file store), fills a DLQ
//! stream (`DLQ`, `dlq.orders`, `allow_direct`) once with `--letters` dead letters as
//! jetrelay writes them (the payload, an original header, `Nats-Msg-Id` and the
//! `Jetrelay-Dlq-*` headers; the original subject is `orders.k<i mod 1000>`, captured
//! by the target stream `ORDERS`), in fast-ingest batches (so the DLQ stream also has
//! `allow_batched`), and runs every contender interleaved for several rounds:
//!
//!   lsjson     `jetrelay dlq ls DLQ --json` over every letter, stdout to a file
//!   lstable    `jetrelay dlq ls DLQ` (the table) over every letter, stdout to a file
//!   pyread     bench/py_dlq.py read: nats-py, an ordered consumer reading every
//!              letter and listing what it says (rendered as JSON)
//!   atomic     `jetrelay dlq replay DLQ --seq 1-R --json` into a fresh `ORDERS` with
//!              `allow_atomic` (pages of 1000 as atomic batches)
//!   fast       the same with `--fast` into a fresh `ORDERS` with `allow_batched`
//!              (pages of 1000 as fast-ingest batches)
//!   pyreplay   bench/py_dlq.py replay: nats-py, an ordered consumer over the DLQ,
//!              reading R letters and republishing each to its original subject with
//!              a JetStream publish awaiting its PubAck (the obvious script), into a
//!              fresh plain `ORDERS`
//!   rustreplay the same loop in Rust (async-nats, in this driver)
//!
//! Per run: letters per second over the process's wall time (spawn to exit; the
//! Python script's and the Rust loop's own loop time too), CPU seconds per 10,000
//! letters of the tool and of nats-server, and the check that the listing is
//! complete or that `ORDERS` ends with exactly R messages, the last one being letter
//! R's replay (and jetrelay's summary says R replayed, 0 failed). Prints a markdown
//! report and writes it to `<out>/dlq-<unix-seconds>.md`. Never fails on timing.
//!
//! With `--trace`, one more fast replay runs after the rounds with an observer on the
//! server (every replay message, its flow-control replies, the direct gets and the
//! JetStream API requests), and the report gains where that replay's time went.
//!
//!   dlq --nats-server=PATH --relay=PATH --python=PATH --py-script=PATH [--out=DIR]
//!       [--rounds=3] [--letters=100000] [--replay=10000] [--size=128] [--subjects=1000]
//!       [--only=lsjson,lstable,pyread,atomic,fast,pyreplay,rustreplay]
//!       [--quiet-wait=60] [--trace]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use async_nats::jetstream::{self, consumer};
use futures::StreamExt;
use jetrelay_bench::{
    Args, CpuWindow, Env, Error, FillMode, KEYS, Msg, fill_msgs, machine, payload, quiet,
    quiet_note, ratio, save_report, spread,
};
use tokio::process::Command;

const DLQ: &str = "DLQ";
const DLQ_SUBJECT: &str = "dlq.orders";
const TARGET: &str = "ORDERS";

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Contender {
    LsJson,
    LsTable,
    PyRead,
    Atomic,
    Fast,
    PyReplay,
    RustReplay,
}

impl Contender {
    const ALL: [Contender; 7] = [
        Contender::LsJson,
        Contender::LsTable,
        Contender::PyRead,
        Contender::Atomic,
        Contender::Fast,
        Contender::PyReplay,
        Contender::RustReplay,
    ];

    fn lists(self) -> bool {
        matches!(
            self,
            Contender::LsJson | Contender::LsTable | Contender::PyRead
        )
    }

    fn label(self) -> &'static str {
        match self {
            Contender::LsJson => "`jetrelay dlq ls --json`",
            Contender::LsTable => "`jetrelay dlq ls` (table)",
            Contender::PyRead => "Python nats-py, ordered consumer",
            Contender::Atomic => "`jetrelay dlq replay` (atomic pages)",
            Contender::Fast => "`jetrelay dlq replay --fast` (fast-ingest pages)",
            Contender::PyReplay => "Python nats-py: ordered consumer, publish one by one",
            Contender::RustReplay => "Rust async-nats: ordered consumer, publish one by one",
        }
    }

    /// The target stream's flags: (`allow_atomic`, `allow_batched`).
    fn target_flags(self) -> (bool, bool) {
        (self == Contender::Atomic, self == Contender::Fast)
    }

    /// The `Nats-Msg-Id` the replay of DLQ sequence `seq` carries.
    fn replay_id(self, seq: u64) -> String {
        match self {
            Contender::Atomic | Contender::Fast => format!("jetrelay-replay:{DLQ}:{seq}"),
            _ => format!("replay:{DLQ}:{seq}"),
        }
    }
}

struct Sample {
    /// Letters per second over the process's wall time.
    per_s: f64,
    /// Letters per second over the script's (or the Rust loop's) own loop.
    loop_per_s: Option<f64>,
    wall: f64,
    tool_cpu_per_10k: f64,
    server_cpu_per_10k: f64,
    /// `None`: the listing or the target is exactly as it must be; else what is not.
    wrong: Option<String>,
    others_cores: f64,
}

struct Bench<'a> {
    env: &'a Env,
    python: PathBuf,
    py_script: PathBuf,
    letters: u64,
    replay: u64,
    /// Distinct original subjects of the letters.
    subjects: u64,
    quiet_wait: Duration,
}

/// What a tool run gave: its wall time, its stdout, and its own loop time.
struct Ran {
    wall: f64,
    stdout: String,
    loop_secs: Option<f64>,
}

impl Bench<'_> {
    fn count(&self, c: Contender) -> u64 {
        if c.lists() { self.letters } else { self.replay }
    }

    /// Deletes the target stream and creates it again with `c`'s flags.
    async fn fresh_target(&self, c: Contender) -> Result<jetstream::stream::Stream, Error> {
        let js = &self.env.js;
        let _ = js.delete_stream(TARGET).await;
        let (atomic, batched) = c.target_flags();
        Ok(js
            .create_stream(jetstream::stream::Config {
                name: TARGET.into(),
                subjects: vec!["orders.>".into()],
                allow_atomic_publish: atomic,
                allow_batch_publish: batched,
                ..Default::default()
            })
            .await?)
    }

    /// Runs `program args`, its stdout to a file; the wall time from spawn to exit.
    async fn tool(&self, program: &Path, args: &[String]) -> Result<Ran, Error> {
        let out = self.env.dir.join("stdout");
        let t = Instant::now();
        let status = Command::new(program)
            .args(args)
            .env_remove("JETRELAY_CONFIG")
            .stdout(Stdio::from(std::fs::File::create(&out)?))
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .status()
            .await?;
        let wall = t.elapsed().as_secs_f64();
        let stdout = std::fs::read_to_string(&out)?;
        if !status.success() {
            return Err(format!(
                "{} {args:?} exited with {status}: {}",
                program.display(),
                stdout.chars().take(500).collect::<String>()
            )
            .into());
        }
        Ok(Ran {
            wall,
            stdout,
            loop_secs: None,
        })
    }

    async fn relay(&self, args: &[&str]) -> Result<Ran, Error> {
        let mut all: Vec<String> = vec!["dlq".into()];
        all.extend(args.iter().map(|a| a.to_string()));
        all.extend(["--server".into(), self.env.nats_url.clone()]);
        self.tool(&self.env.relay_bin, &all).await
    }

    async fn python(&self, mode: &str, count: u64) -> Result<Ran, Error> {
        let args: Vec<String> = vec![
            self.py_script.display().to_string(),
            mode.into(),
            self.env.nats_url.clone(),
            DLQ.into(),
            DLQ_SUBJECT.into(),
            "1".into(),
            count.to_string(),
        ];
        let mut ran = self.tool(&self.python, &args).await?;
        let v: serde_json::Value = serde_json::from_str(ran.stdout.trim())?;
        if v["count"].as_u64() != Some(count) {
            return Err(format!("the script handled {}", v["count"]).into());
        }
        ran.loop_secs = v["loop_secs"].as_f64();
        Ok(ran)
    }

    async fn run_one(&self, c: Contender) -> Result<Sample, Error> {
        let env = self.env;
        quiet(env.ticks, self.quiet_wait).await;
        let n = self.count(c);
        let target = if c.lists() {
            None
        } else {
            Some(self.fresh_target(c).await?)
        };
        let window = CpuWindow::start(env.ticks, &[env.nats_pid, std::process::id()]);
        let range = format!("1-{n}");
        let ran = match c {
            Contender::LsJson => self.relay(&["ls", DLQ, "--json"]).await?,
            Contender::LsTable => self.relay(&["ls", DLQ]).await?,
            Contender::PyRead => self.python("read", n).await?,
            Contender::Atomic => {
                self.relay(&["replay", DLQ, "--seq", &range, "--json"])
                    .await?
            }
            Contender::Fast => {
                self.relay(&["replay", DLQ, "--seq", &range, "--fast", "--json"])
                    .await?
            }
            Contender::PyReplay => self.python("replay", n).await?,
            Contender::RustReplay => {
                let t = Instant::now();
                rust_replay(&env.js, n).await?;
                let secs = t.elapsed().as_secs_f64();
                Ran {
                    wall: secs,
                    stdout: String::new(),
                    loop_secs: Some(secs),
                }
            }
        };
        let cpu = window.finish();
        // The tool: a child that ended (jetrelay, Python), or this driver (Rust).
        let tool_cpu = if c == Contender::RustReplay {
            cpu.per_pid[1]
        } else {
            cpu.children
        };
        let wrong = match &target {
            None => check_listing(c, &ran.stdout, n),
            Some(t) => self.check_target(c, t, &ran.stdout, n).await?,
        };
        let per_10k = |s: f64| s / n as f64 * 10_000.0;
        Ok(Sample {
            per_s: n as f64 / ran.wall.max(1e-6),
            loop_per_s: ran.loop_secs.map(|s| n as f64 / s.max(1e-6)),
            wall: ran.wall,
            tool_cpu_per_10k: per_10k(tool_cpu),
            server_cpu_per_10k: per_10k(cpu.per_pid[0]),
            wrong,
            others_cores: cpu.others_cores,
        })
    }

    /// `None` when the target holds exactly `n` messages, the last one letter `n`'s
    /// replay, and jetrelay's summary agrees.
    async fn check_target(
        &self,
        c: Contender,
        target: &jetstream::stream::Stream,
        stdout: &str,
        n: u64,
    ) -> Result<Option<String>, Error> {
        let mut wrong = Vec::new();
        if matches!(c, Contender::Atomic | Contender::Fast) {
            let v: serde_json::Value = serde_json::from_str(stdout.trim())?;
            let fast_ok =
                c != Contender::Fast || v["not_fast"].as_array().is_some_and(|a| a.is_empty());
            if v["replayed"].as_u64() != Some(n) || v["failed"].as_u64() != Some(0) || !fast_ok {
                wrong.push(format!("summary {v}"));
            }
        }
        let stored = target.get_info().await?.state.messages;
        if stored != n {
            wrong.push(format!("{TARGET} holds {stored}"));
        } else {
            let last = target.get_raw_message(n).await?;
            let id = last
                .headers
                .get("Nats-Msg-Id")
                .map(|v| v.as_str().to_string());
            let subject = format!("orders.k{}", (n - 1) % self.subjects);
            if id.as_deref() != Some(c.replay_id(n).as_str()) || last.subject.as_str() != subject {
                wrong.push(format!(
                    "its last message is {} with id {id:?}",
                    last.subject
                ));
            }
        }
        Ok((!wrong.is_empty()).then(|| wrong.join("; ")))
    }
}

/// `None` when the listing holds every letter.
fn check_listing(c: Contender, stdout: &str, n: u64) -> Option<String> {
    match c {
        Contender::LsJson => match serde_json::from_str::<serde_json::Value>(stdout) {
            Ok(v) => {
                let rows = v.as_array().map_or(0, Vec::len) as u64;
                let last = v
                    .as_array()
                    .and_then(|a| a.last())
                    .map(|e| e["dlq_seq"].clone());
                (rows != n || last != Some(serde_json::json!(n)))
                    .then(|| format!("{rows} rows, the last {last:?}"))
            }
            Err(e) => Some(format!("not JSON: {e}")),
        },
        // A header line, then a line per letter.
        Contender::LsTable => {
            let rows = stdout.lines().count() as u64;
            (rows != n + 1).then(|| format!("{rows} lines"))
        }
        // The script checked its count.
        _ => None,
    }
}

/// The obvious loop in Rust: an ordered consumer over the DLQ from sequence 1, each
/// of the first `n` letters republished to its original subject with its original
/// headers and an id of its own, awaiting the PubAck.
async fn rust_replay(js: &jetstream::Context, n: u64) -> Result<(), Error> {
    let mut messages = js
        .get_stream(DLQ)
        .await?
        .create_consumer(consumer::pull::OrderedConfig {
            deliver_policy: consumer::DeliverPolicy::All,
            ..Default::default()
        })
        .await?
        .messages()
        .await?;
    for _ in 0..n {
        let m = messages
            .next()
            .await
            .ok_or("the ordered consumer ended")??;
        let seq = m.info()?.stream_sequence;
        let mut headers = HeaderMap::new();
        let mut subject = m.subject.to_string();
        if let Some(h) = &m.headers {
            for (name, values) in h.iter() {
                let lower = name.to_string().to_ascii_lowercase();
                if lower == "jetrelay-dlq-subject" {
                    subject = values.first().map_or(subject, |v| v.as_str().to_string());
                }
                if lower.starts_with("jetrelay-dlq-") || lower.starts_with("nats-") {
                    continue;
                }
                for v in values {
                    headers.append(name.clone(), v.clone());
                }
            }
        }
        headers.insert("Nats-Msg-Id", format!("replay:{DLQ}:{seq}").as_str());
        js.publish_with_headers(subject, headers, m.payload.clone())
            .await?
            .await?;
    }
    Ok(())
}

/// Dead letter `i` (DLQ sequence i + 1) as jetrelay writes it for a message of
/// `ORDERS` at sequence i + 1 that exhausted its attempts.
fn letter(i: u64, size: usize, subjects: u64, time: &str) -> Msg {
    let seq = i + 1;
    let mut h = HeaderMap::new();
    h.insert("Content-Type", "application/json");
    h.insert(
        "Jetrelay-Dlq-Subject",
        format!("orders.k{}", i % subjects).as_str(),
    );
    h.insert("Jetrelay-Dlq-Stream", TARGET);
    h.insert("Jetrelay-Dlq-Consumer", "worker");
    h.insert("Jetrelay-Dlq-Sequence", seq.to_string().as_str());
    h.insert(
        "Nats-Msg-Id",
        format!("jetrelay-dlq:{TARGET}:worker:{seq}").as_str(),
    );
    h.insert("Jetrelay-Dlq-Delivered", "5");
    h.insert("Jetrelay-Dlq-Status", "503");
    h.insert("Jetrelay-Dlq-Reason", "jetrelay: 5 attempts exhausted");
    h.insert("Jetrelay-Dlq-Time", time);
    h.insert("Jetrelay-Dlq-Msg-Id", format!("order-{i}").as_str());
    Msg {
        subject: DLQ_SUBJECT.into(),
        headers: Some(h),
        payload: payload(size, 0),
    }
}

/// Now, RFC 3339 in UTC (from `date`).
fn now_rfc3339() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| "2026-01-01T00:00:00Z".into())
}

// === the trace of one fast replay ===

/// One thing the observer saw, `ms` after the replay started.
struct Seen {
    ms: f64,
    subject: String,
    reply: String,
    payload: bytes::Bytes,
}

/// Runs one fast replay of `n` into a fresh target with an observer on `>`, and says
/// where its time went.
async fn trace_fast(bench: &Bench<'_>, n: u64) -> Result<String, Error> {
    bench.fresh_target(Contender::Fast).await?;
    let observer = async_nats::connect(&bench.env.nats_url).await?;
    let mut all = observer.subscribe(">").await?;
    observer.flush().await?;
    let seen = Arc::new(Mutex::new(Vec::<Seen>::new()));
    let t0 = Arc::new(Mutex::new(Instant::now()));
    let (s, t) = (seen.clone(), t0.clone());
    let task = tokio::spawn(async move {
        while let Some(m) = all.next().await {
            let ms = t.lock().unwrap().elapsed().as_secs_f64() * 1000.0;
            let interesting = !m.subject.starts_with("_INBOX.")
                || m.subject.ends_with(".$FI")
                || m.payload.len() < 200;
            s.lock().unwrap().push(Seen {
                ms,
                subject: m.subject.to_string(),
                reply: m.reply.map(|r| r.to_string()).unwrap_or_default(),
                payload: if interesting {
                    m.payload
                } else {
                    bytes::Bytes::new()
                },
            });
        }
    });
    let range = format!("1-{n}");
    *t0.lock().unwrap() = Instant::now();
    let ran = bench
        .relay(&["replay", DLQ, "--seq", &range, "--fast", "--json"])
        .await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    task.abort();
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    Ok(trace_report(&seen, ran.wall, ran.stdout.trim()))
}

/// Per fast batch: when it started and ended, its flow acks and pings, its stalls;
/// and what the API requests and direct gets between the batches took.
fn trace_report(seen: &[Seen], wall: f64, summary: &str) -> String {
    #[derive(Default)]
    struct Batch {
        first: f64,
        commit: f64,
        end: f64,
        sends: u64,
        acks: u64,
        pings: u64,
        /// Gaps between consecutive sends above 5 ms: count and total ms.
        gaps: (u64, f64),
        last_send: f64,
    }
    let mut batches: BTreeMap<String, Batch> = BTreeMap::new();
    let mut api: BTreeMap<String, (u64, f64, f64)> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    // Page reads: reply inbox → (requested at, first reply, last reply, replies).
    let mut pages: Vec<(String, f64, f64, f64, u64)> = Vec::new();
    for s in seen {
        if let Some(p) = pages.iter_mut().find(|p| p.0 == s.subject) {
            if p.4 == 0 {
                p.2 = s.ms;
            }
            p.3 = s.ms;
            p.4 += 1;
            continue;
        }
        if s.subject.starts_with("$JS.API.DIRECT.GET.") {
            pages.push((s.reply.clone(), s.ms, 0.0, 0.0, 0));
        }
        if s.subject.starts_with("$JS.API.") {
            let kind = s
                .subject
                .trim_start_matches("$JS.API.")
                .split('.')
                .take(2)
                .collect::<Vec<_>>()
                .join(".");
            let e = api.entry(kind).or_insert((0, s.ms, s.ms));
            e.0 += 1;
            e.2 = s.ms;
            continue;
        }
        // A replay message: its reply is `<inbox>.<flow>.fail.<seq>.<op>.$FI`.
        let tokens: Vec<&str> = s.reply.split('.').collect();
        if s.reply.ends_with(".$FI") && tokens.len() >= 6 {
            let inbox = tokens[..tokens.len() - 5].join(".");
            let op = tokens[tokens.len() - 2];
            if !batches.contains_key(&inbox) {
                order.push(inbox.clone());
            }
            let b = batches.entry(inbox).or_insert_with(|| Batch {
                first: s.ms,
                last_send: s.ms,
                ..Batch::default()
            });
            if op == "4" {
                b.pings += 1;
                continue;
            }
            b.sends += 1;
            if s.ms - b.last_send > 5.0 {
                b.gaps.0 += 1;
                b.gaps.1 += s.ms - b.last_send;
            }
            b.last_send = s.ms;
            if op == "2" {
                b.commit = s.ms;
            }
            continue;
        }
        // A reply to a fast batch: on `<inbox>.….$FI`.
        if s.subject.ends_with(".$FI") {
            let tokens: Vec<&str> = s.subject.split('.').collect();
            if tokens.len() < 6 {
                continue;
            }
            let inbox = tokens[..tokens.len() - 5].join(".");
            if let Some(b) = batches.get_mut(&inbox) {
                let v: serde_json::Value =
                    serde_json::from_slice(&s.payload).unwrap_or(serde_json::Value::Null);
                if v["type"] == "ack" {
                    b.acks += 1;
                } else if v.get("count").is_some() || v.get("error").is_some() {
                    b.end = s.ms;
                }
            }
        }
    }
    let mut md = format!(
        "## Where a fast replay's time goes (`--trace`)\n\nOne more `dlq replay --fast` of the same letters into a fresh target, with an observer connection subscribed to `>` (it sees every replay message with its reply subject, the server's flow-control replies, the direct gets and the API requests; its copy costs the server a little). The replay took {wall:.2} s (process wall); summary `{summary}`.\n\n| batch | first message at ms | commit sent at ms | PubAck at ms | messages | flow acks | pings | send gaps > 5 ms (count, total ms) | from the previous batch's PubAck, ms |\n|---|---|---|---|---|---|---|---|---|\n"
    );
    let mut prev_end = 0.0;
    for (i, inbox) in order.iter().enumerate() {
        let b = &batches[inbox];
        md.push_str(&format!(
            "| {} | {:.1} | {:.1} | {:.1} | {} | {} | {} | {}, {:.1} | {:.1} |\n",
            i + 1,
            b.first,
            b.commit,
            b.end,
            b.sends,
            b.acks,
            b.pings,
            b.gaps.0,
            b.gaps.1,
            b.first - prev_end,
        ));
        prev_end = b.end;
    }
    md.push_str("\nPage reads (batch direct gets of the DLQ stream), ms:\n\n| page | requested | first reply | last reply (the end-of-batch status) | replies |\n|---|---|---|---|---|\n");
    for (i, (_, at, first, last, n)) in pages.iter().enumerate() {
        md.push_str(&format!(
            "| {} | {at:.1} | {first:.1} | {last:.1} | {n} |\n",
            i + 1
        ));
    }
    md.push_str("\nJetStream API requests seen (kind: count, first–last ms):\n\n");
    for (kind, (count, first, last)) in &api {
        md.push_str(&format!("- `{kind}`: {count}, {first:.1}–{last:.1}\n"));
    }
    md
}

// === the report ===

fn report(
    bench: &Bench<'_>,
    rounds: usize,
    fill: (FillMode, f64),
    size: usize,
    results: &BTreeMap<Contender, Vec<Sample>>,
) -> String {
    let (letters, r) = (bench.letters, bench.replay);
    let mut md = format!(
        "# jetrelay dead-letter benchmark\n\nMachine: {}; nats-server {} (file store) on loopback. A DLQ stream (`{DLQ}`, `{DLQ_SUBJECT}`, file store, `allow_direct`) filled once with {letters} dead letters as jetrelay writes them: a {size} B payload, an original `Content-Type`, `Nats-Msg-Id` and the `Jetrelay-Dlq-*` headers (`Subject` `orders.k<i mod {}>`, `Stream` {TARGET}, `Consumer`, `Sequence`, `Delivered`, `Status` 503, `Reason`, `Time`, `Msg-Id`), about 400 B a letter; filled with {} in {:.1} s (so the DLQ stream also has `allow_batched`). {rounds} rounds, contenders interleaved. The listings read all {letters} letters; the replays take DLQ sequences 1–{r} into a freshly created `{TARGET}` (`orders.>`, file store): with `allow_atomic` for `dlq replay`, with `allow_batched` for `dlq replay --fast`, plain for the scripts. The jetrelay commands are the release binary run by the driver (`--server`, stdout to a file); the Python script is `bench/py_dlq.py` on nats-py, as a user writes it: an ordered consumer over the DLQ, and for the replay a JetStream publish awaiting each PubAck. Letters/s = letters over the process's wall time, spawn to exit (connecting included); for the scripts also over their own loop alone (from creating the consumer to the last letter). Medians, with min–max.{}\n\n",
        machine(),
        bench.env.nats_version,
        bench.subjects,
        fill.0.describe(),
        fill.1,
        quiet_note(bench.quiet_wait),
    );
    let row = |md: &mut String, c: Contender, v: &[Sample]| {
        let (t, lo, hi) = spread(v, |s| s.per_s);
        let m = |f: fn(&Sample) -> f64| spread(v, f).0;
        let loops: Vec<f64> = v.iter().filter_map(|s| s.loop_per_s).collect();
        let loop_col = if loops.is_empty() {
            "–".to_string()
        } else {
            let (a, b, c) = spread(&loops, |x| *x);
            format!("{a:.0} ({b:.0}–{c:.0})")
        };
        let wrong = v.iter().filter(|s| s.wrong.is_some()).count();
        let exact = if wrong == 0 {
            format!("yes, {}/{}", v.len(), v.len())
        } else {
            format!("**NO in {wrong} of {}**", v.len())
        };
        md.push_str(&format!(
            "| {} | {t:.0} ({lo:.0}–{hi:.0}) | {loop_col} | {:.2} | {:.3} | {:.3} | {exact} | {:.2} |\n",
            c.label(),
            m(|s| s.wall),
            m(|s| s.tool_cpu_per_10k),
            m(|s| s.server_cpu_per_10k),
            m(|s| s.others_cores),
        ));
    };
    let head = "| contender | letters/s, process (min–max) | letters/s, own loop | wall s | tool CPU s / 10k | nats-server CPU s / 10k | {} | other processes, cores |\n|---|---|---|---|---|---|---|---|\n";
    md.push_str(&format!("## Listing {letters} dead letters\n\n"));
    md.push_str(&head.replace("{}", "complete listing"));
    for (&c, v) in results.iter().filter(|(c, _)| c.lists()) {
        row(&mut md, c, v);
    }
    md.push_str(&format!("\n## Replaying {r} dead letters\n\n"));
    md.push_str(&head.replace("{}", &format!("target exact ({r}, in order)")));
    for (&c, v) in results.iter().filter(|(c, _)| !c.lists()) {
        row(&mut md, c, v);
    }
    for (c, v) in results {
        for s in v {
            if let Some(w) = &s.wrong {
                md.push_str(&format!("\n- {c:?}: {w}"));
            }
        }
    }
    let per = |c: Contender, own_loop: bool| -> Vec<f64> {
        results.get(&c).map_or(Vec::new(), |v| {
            v.iter()
                .map(|s| {
                    if own_loop {
                        s.loop_per_s.unwrap_or(s.per_s)
                    } else {
                        s.per_s
                    }
                })
                .collect()
        })
    };
    md.push_str(&format!(
        "\n\"Target exact\": after each replay `{TARGET}` held exactly {r} messages, the last one letter {r}'s replay (its subject and id), and jetrelay's summary said {r} replayed, 0 failed (and, for `--fast`, no target without `allow_batched`). \"Complete listing\": `ls --json` printed {letters} entries ending at sequence {letters}, the table {letters} rows.\n\n## Targets (per-round ratios of letters/s: median, min–max)\n\n| ratio | process wall | against the script's own loop | goal |\n|---|---|---|---|\n"
    ));
    let py = Contender::PyReplay;
    for (num, den, goal) in [
        (Contender::Atomic, py, "≥ 5×"),
        (Contender::Fast, py, "≥ 5×"),
        (Contender::Atomic, Contender::RustReplay, "–"),
        (Contender::Fast, Contender::RustReplay, "–"),
        (Contender::Fast, Contender::Atomic, "–"),
        (Contender::LsJson, Contender::PyRead, "–"),
    ] {
        md.push_str(&format!(
            "| {} ÷ {} | {} | {} | {goal} |\n",
            num.label(),
            den.label(),
            ratio(&per(num, false), &per(den, false)),
            ratio(&per(num, false), &per(den, true)),
        ));
    }
    md
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args = Args::parse();
    let letters: u64 = args.num("letters", 100_000)?;
    let replay: u64 = args.num("replay", 10_000)?;
    let rounds: usize = args.num("rounds", 3)?;
    let size: usize = args.num("size", 128)?;
    if replay == 0 || replay > letters {
        return Err("--replay must be between 1 and --letters".into());
    }
    let contenders = args.only(&Contender::ALL);
    let env = Env::start(
        args.required("nats-server")?,
        args.required("relay")?.into(),
    )
    .await?;
    env.js
        .create_stream(jetstream::stream::Config {
            name: DLQ.into(),
            subjects: vec![DLQ_SUBJECT.into()],
            allow_direct: true,
            // The fill goes in fast-ingest batches.
            allow_batch_publish: true,
            ..Default::default()
        })
        .await?;
    eprintln!("filling {DLQ} with {letters} dead letters of {size} B");
    let time = now_rfc3339();
    let t = Instant::now();
    let subjects: u64 = args.num("subjects", KEYS)?.max(1);
    let mode = fill_msgs(&env.js, letters, |i| letter(i, size, subjects, &time)).await?;
    let fill = (mode, t.elapsed().as_secs_f64());
    eprintln!("  filled with {} in {:.1} s", mode.describe(), fill.1);
    let bench = Bench {
        env: &env,
        python: args.required("python")?.into(),
        py_script: args.required("py-script")?.into(),
        letters,
        replay,
        subjects,
        quiet_wait: Duration::from_secs(args.num("quiet-wait", 60)?),
    };
    let mut results: BTreeMap<Contender, Vec<Sample>> = BTreeMap::new();
    for round in 1..=rounds {
        for &c in &contenders {
            eprintln!("round {round}: {}", c.label());
            let s = bench.run_one(c).await?;
            eprintln!(
                "  {:.0} letters/s ({:.2} s){}, tool CPU s/10k {:.3}, server {:.3}, {}, others {:.2} cores",
                s.per_s,
                s.wall,
                s.loop_per_s
                    .map_or(String::new(), |l| format!(", own loop {l:.0} letters/s")),
                s.tool_cpu_per_10k,
                s.server_cpu_per_10k,
                s.wrong.as_deref().unwrap_or("exact"),
                s.others_cores,
            );
            results.entry(c).or_default().push(s);
        }
    }
    let mut md = report(&bench, rounds, fill, size, &results);
    if args.get("trace").is_some() || std::env::args().any(|a| a == "--trace") {
        eprintln!("tracing one fast replay");
        md.push('\n');
        md.push_str(&trace_fast(&bench, replay).await?);
    }
    print!("{md}");
    save_report(&args, "dlq-", &md)?;
    env.close().await;
    Ok(())
}
