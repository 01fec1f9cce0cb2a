//! The transports benchmark (`bench/transports`): the same jetrelay, the same app
//! (the fast Rust sink answering 200 at once, serving HTTP/1.1 and h2c alike), reached
//! four ways: HTTP/1.1 over loopback TCP, HTTP/1.1 over a Unix socket, h2c over TCP,
//! h2c over the socket; and a fifth, h2c over TCP to the same app with its HTTP/2
//! windows raised from hyper's 1 MiB to 16 MiB (how much of h2c's cost is the app's
//! flow control); and a sixth, h2c over TCP with `http.max_concurrent_streams = 16`
//! (the 64 requests in flight over 4 connections). Per message size (`--sizes`, 128 B and 16 KiB), a stream of
//! `--messages` is drained by each arm on a fresh durable (64 in flight, one message a
//! request, no ordering): messages a second (first arrival to the last), jetrelay's
//! and the app's CPU seconds per 10k messages, jetrelay's peak RSS; then publish →
//! arrival latency (p50, p99) at a fixed 1000 msg/s. Arms interleaved, `--rounds`,
//! medians; ratios to HTTP/1.1 over TCP taken per round (paired), their median and
//! range. `--arms` runs only some (their places in the table: 0 to 5), as for a
//! profile of one. Never fails on timing.
//!
//!   transports --nats-server=PATH --relay=PATH [--out=DIR] [--messages=60000]
//!              [--sizes=128,16384] [--rounds=5] [--arms=0,2]

use std::time::Duration;

use async_nats::jetstream;
use jetrelay_bench::{
    Args, Delivery, Env, Error, KEYS, Sink, cpu_seconds, fill, latency_run, machine, median,
    peak_rss_kib, ratio, relay_config, save_report, start_relay, stop, wait_for,
};

/// How the app is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Arm {
    socket: bool,
    h2c: bool,
    /// The app's HTTP/2 windows raised from hyper's 1 MiB to [`WIDE`].
    wide: bool,
    /// `http.max_concurrent_streams` (0: the app's limit alone).
    streams: u32,
}

/// The app's HTTP/2 connection and stream windows in the `wide` arm.
const WIDE: u32 = 16 << 20;

/// `http.max_concurrent_streams` in the last arm: 64 in flight over 4 connections.
const SPREAD: u32 = 16;

impl Arm {
    const fn of(socket: bool, h2c: bool, wide: bool, streams: u32) -> Arm {
        Arm {
            socket,
            h2c,
            wide,
            streams,
        }
    }

    const ALL: [Arm; 6] = [
        Arm::of(false, false, false, 0),
        Arm::of(true, false, false, 0),
        Arm::of(false, true, false, 0),
        Arm::of(true, true, false, 0),
        Arm::of(false, true, true, 0),
        Arm::of(false, true, false, SPREAD),
    ];

    fn label(self) -> &'static str {
        match (self.socket, self.h2c, self.wide, self.streams) {
            (false, false, _, _) => "HTTP/1.1, TCP",
            (true, false, _, _) => "HTTP/1.1, Unix socket",
            (false, true, false, 0) => "h2c, TCP",
            (true, true, _, _) => "h2c, Unix socket",
            (false, true, true, _) => "h2c, TCP, the app's HTTP/2 windows 16 MiB",
            (false, true, false, _) => "h2c, TCP, `max_concurrent_streams = 16` (4 connections)",
        }
    }
}

#[derive(Clone, Copy, Default)]
struct Sample {
    rate: f64,
    cpu_per_10k: f64,
    /// The app's (this process's, the sink's) CPU seconds per 10k over the drain.
    app_cpu_per_10k: f64,
    rss_mib: f64,
    p50_ms: f64,
    p99_ms: f64,
}

async fn run_one(
    env: &Env,
    arm: Arm,
    stream: &str,
    prefix: &str,
    size: usize,
    durable: &str,
) -> Result<Sample, Error> {
    let sink = if arm.socket {
        Sink::start_unix(env.dir.join(format!("{durable}.sock"))).await?
    } else if arm.wide {
        Sink::start_h2_window(WIDE).await?
    } else {
        Sink::start().await?
    };
    let target = env
        .js
        .get_stream(stream)
        .await?
        .info()
        .await?
        .state
        .messages;
    let source = jetrelay_bench::durable_source(stream, durable);
    let mut config = relay_config(env, &source, &Delivery::single("none"), &sink.url(), 30_000);
    let mut http = String::from("[http]\n");
    if let Some(path) = sink.socket() {
        http.push_str(&format!("unix_socket = \"{}\"\n", path.display()));
    }
    http.push_str(&format!(
        "version = \"{}\"\n",
        if arm.h2c { "h2c" } else { "http1" }
    ));
    if arm.streams > 0 {
        http.push_str(&format!("max_concurrent_streams = {}\n", arm.streams));
    }
    config.text = config.text.replacen("[http]\n", &http, 1);
    let running = start_relay(env, &config, durable).await?;
    let pid = running.child.id().unwrap_or(0);
    let cpu0 = cpu_seconds(pid, env.ticks);
    let app0 = cpu_seconds(std::process::id(), env.ticks);
    wait_for("the drain", Duration::from_secs(300), || {
        sink.count() >= target
    })
    .await?;
    let cpu = cpu_seconds(pid, env.ticks) - cpu0;
    let app_cpu = cpu_seconds(std::process::id(), env.ticks) - app0;
    let rate = sink.rate();
    let (p50_ms, p99_ms) =
        latency_run(&env.js, &sink, |i| format!("{prefix}.k{}", i % KEYS), size).await?;
    let rss_mib = peak_rss_kib(pid) as f64 / 1024.0;
    stop(running.child).await;
    let _ = env
        .js
        .get_stream(stream)
        .await?
        .delete_consumer(durable)
        .await;
    Ok(Sample {
        rate,
        cpu_per_10k: cpu / target as f64 * 10_000.0,
        app_cpu_per_10k: app_cpu / target as f64 * 10_000.0,
        rss_mib,
        p50_ms,
        p99_ms,
    })
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args = Args::parse();
    let env = Env::start(
        args.required("nats-server")?,
        args.required("relay")?.into(),
    )
    .await?;
    let n: u64 = args.num("messages", 60_000)?;
    let rounds: usize = args.num("rounds", 5)?;
    let sizes: Vec<usize> = args
        .list("sizes")
        .unwrap_or_else(|| vec!["128".into(), "16384".into()])
        .iter()
        .map(|s| s.parse())
        .collect::<Result<_, _>>()?;
    // `--arms=0,2`: only these arms (their places in the table), for a profile of one.
    let arms: Vec<usize> = match args.list("arms") {
        Some(v) => v.iter().map(|s| s.parse()).collect::<Result<_, _>>()?,
        None => (0..Arm::ALL.len()).collect(),
    };
    let mut md = format!(
        "# The app over TCP or a Unix socket, HTTP/1.1 or h2c\n\n{}; nats-server {} on loopback. One durable source, `max_in_flight = 64`, one message a request, no ordering; the fast Rust sink (answers 200 at once) serves HTTP/1.1 and h2c, on loopback TCP or a Unix socket, with hyper's HTTP/2 defaults (1 MiB connection and stream windows, as a Go server's) but in the fifth arm (16 MiB); the sixth spreads the requests over connections of 16 streams. The sink sets TCP_NODELAY, as Go's and Node's servers do. msg/s: a stream of {n} messages drained, first arrival to last; CPU: jetrelay's and the app's (the sink's) seconds per 10k messages over the drain; RSS: jetrelay's peak; latency: publish → arrival of 3000 more at 1000 msg/s. Medians of {rounds} rounds, arms interleaved; the × columns are the median (min–max) of each round's ratio to that round's HTTP/1.1 over TCP.\n\n",
        machine(),
        env.nats_version
    );
    for size in sizes {
        let stream = format!("T{size}");
        let prefix = format!("t{size}");
        env.js
            .create_stream(jetstream::stream::Config {
                name: stream.clone(),
                subjects: vec![format!("{prefix}.>")],
                allow_batch_publish: true,
                ..Default::default()
            })
            .await?;
        fill(&env.js, |i| format!("{prefix}.k{}", i % KEYS), n, size).await?;
        let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); Arm::ALL.len()];
        for round in 0..rounds {
            for (i, arm) in Arm::ALL.iter().enumerate() {
                if !arms.contains(&i) {
                    continue;
                }
                let s = run_one(
                    &env,
                    *arm,
                    &stream,
                    &prefix,
                    size,
                    &format!("s{size}r{round}x{i}"),
                )
                .await?;
                eprintln!(
                    "{size} B, round {round}, {}: {:.0} msg/s, {:.3} CPU s/10k (app {:.3}), {:.1} MiB, p50 {:.2} ms, p99 {:.2} ms",
                    arm.label(),
                    s.rate,
                    s.cpu_per_10k,
                    s.app_cpu_per_10k,
                    s.rss_mib,
                    s.p50_ms,
                    s.p99_ms
                );
                samples[i].push(s);
            }
        }
        let med =
            |v: &[Sample], f: fn(&Sample) -> f64| median(&mut v.iter().map(f).collect::<Vec<_>>());
        // The first arm run is the base (HTTP/1.1 over TCP unless `--arms` left it out);
        // each arm's ratio to it is taken within a round (the arms ran one after the
        // other), and the median of those is given with their range.
        let base = samples
            .iter()
            .find(|v| !v.is_empty())
            .cloned()
            .unwrap_or_default();
        let of = |v: &[Sample], f: fn(&Sample) -> f64| v.iter().map(f).collect::<Vec<_>>();
        let ratio = |v: &[Sample], f: fn(&Sample) -> f64| ratio(&of(v, f), &of(&base, f));
        md.push_str(&format!(
            "## {size} B\n\n| transport | msg/s | × HTTP/1.1 TCP | jetrelay CPU s / 10k | × HTTP/1.1 TCP | app CPU s / 10k | × HTTP/1.1 TCP | peak RSS MiB | p50 ms | p99 ms |\n|---|---|---|---|---|---|---|---|---|---|\n"
        ));
        for (arm, v) in Arm::ALL.iter().zip(&samples) {
            if v.is_empty() {
                continue;
            }
            md.push_str(&format!(
                "| {} | {:.0} | {} | {:.3} | {} | {:.3} | {} | {:.1} | {:.2} | {:.2} |\n",
                arm.label(),
                med(v, |s| s.rate),
                ratio(v, |s| s.rate),
                med(v, |s| s.cpu_per_10k),
                ratio(v, |s| s.cpu_per_10k),
                med(v, |s| s.app_cpu_per_10k),
                ratio(v, |s| s.app_cpu_per_10k),
                med(v, |s| s.rss_mib),
                med(v, |s| s.p50_ms),
                med(v, |s| s.p99_ms),
            ));
        }
        md.push('\n');
    }
    println!("{md}");
    save_report(&args, "transports-", &md)?;
    env.close().await;
    Ok(())
}
