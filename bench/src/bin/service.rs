//! The service benchmark (`bench/service`): a NATS request answered by an HTTP app,
//! three ways, in one run: jetrelay's service source (`kind = "service"`), the bare
//! Rust loop (`bare_service`: queue subscription → POST → reply, nothing else), and
//! what a user would write in Python (`py_service.py`: natsio + aiohttp). The app is
//! the fast Rust sink (200 at once). Per concurrency (`--concurrency`, 1 and 64
//! requesters, each sending its next request when its reply came), for `--seconds`
//! after a half-second warm-up: requests a second, round-trip p50 and p99, p50 added
//! over the bare loop, the responder's CPU seconds per 10k requests and its peak RSS.
//! Each responder takes 64 requests at once. Contenders interleaved, `--rounds`,
//! medians. Never fails on timing.
//!
//!   service --nats-server=PATH --relay=PATH --bare=PATH --python=PATH --py-service=PATH
//!           [--out=DIR] [--seconds=3] [--concurrency=1,64] [--rounds=3] [--only=jetrelay,bare]

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use jetrelay_bench::{
    Args, Delivery, Env, Error, Running, Sink, cpu_seconds, machine, machine_busy_seconds, median,
    p50_p99_ms, peak_rss_kib, relay_config, save_report, start_line_ready, start_relay, stop,
};
use tokio::process::Command;

/// Requests each responder takes at once.
const IN_FLIGHT: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Contender {
    Jetrelay,
    Bare,
    Python,
}

impl Contender {
    const ALL: [Contender; 3] = [Contender::Jetrelay, Contender::Bare, Contender::Python];

    fn label(self) -> &'static str {
        match self {
            Contender::Jetrelay => "jetrelay `kind = \"service\"`",
            Contender::Bare => "bare Rust loop",
            Contender::Python => "Python (natsio + aiohttp)",
        }
    }
}

struct Tools {
    bare: PathBuf,
    python: PathBuf,
    py_service: PathBuf,
}

#[derive(Clone, Copy, Default)]
struct Sample {
    rate: f64,
    p50_ms: f64,
    p99_ms: f64,
    cpu_per_10k: f64,
    rss_mib: f64,
    /// nats-server's CPU seconds per 10k requests.
    server_per_10k: f64,
    /// This process's (the requesters' and the sink's) CPU seconds per 10k requests.
    driver_per_10k: f64,
    /// The whole machine's busy cores over the window.
    busy_cores: f64,
}

async fn start(
    env: &Env,
    tools: &Tools,
    c: Contender,
    subject: &str,
    url: &str,
) -> Result<Running, Error> {
    match c {
        Contender::Jetrelay => {
            let source = format!(
                "kind = \"service\"\nservice = \"bench\"\nversion = \"1.0.0\"\nqueue_group = \"q\"\nendpoints = [{{ name = \"echo\", subject = \"{subject}\" }}]"
            );
            let mut delivery = Delivery::single("none");
            delivery.max_in_flight = IN_FLIGHT;
            let config = relay_config(env, &source, &delivery, url, 30_000);
            start_relay(env, &config, &format!("service-{subject}")).await
        }
        Contender::Bare => {
            let mut cmd = Command::new(&tools.bare);
            cmd.args([&env.nats_url, subject, url, &IN_FLIGHT.to_string()]);
            start_line_ready(cmd).await
        }
        Contender::Python => {
            let mut cmd = Command::new(&tools.python);
            cmd.arg(&tools.py_service)
                .args([&env.nats_url, subject, url, &IN_FLIGHT.to_string()]);
            start_line_ready(cmd).await
        }
    }
}

/// `concurrency` requesters for a warm-up and then `seconds`: the requests answered
/// in the measured window and their round trips (µs).
async fn drive(
    nc: &async_nats::Client,
    subject: &str,
    concurrency: usize,
    seconds: f64,
) -> (u64, Vec<u64>) {
    let measured_from = Instant::now() + Duration::from_millis(500);
    let until = measured_from + Duration::from_secs_f64(seconds);
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let payload = Bytes::from(vec![b'x'; 128]);
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let (nc, subject, payload, latencies) = (
                nc.clone(),
                subject.to_string(),
                payload.clone(),
                latencies.clone(),
            );
            tokio::spawn(async move {
                let mut own = Vec::new();
                loop {
                    let t = Instant::now();
                    if t >= until {
                        break;
                    }
                    let ok = nc.request(subject.clone(), payload.clone()).await.is_ok();
                    if ok && t >= measured_from {
                        own.push(t.elapsed().as_micros() as u64);
                    }
                }
                latencies.lock().unwrap().extend(own);
            })
        })
        .collect();
    for t in tasks {
        let _ = t.await;
    }
    let lat = std::mem::take(&mut *latencies.lock().unwrap());
    (lat.len() as u64, lat)
}

/// What every run shares.
struct Bench<'a> {
    env: &'a Env,
    tools: &'a Tools,
    sink: &'a Sink,
    nc: &'a async_nats::Client,
    seconds: f64,
}

async fn run_one(
    b: &Bench<'_>,
    c: Contender,
    concurrency: usize,
    subject: &str,
) -> Result<Sample, Error> {
    let (env, seconds) = (b.env, b.seconds);
    let running = start(env, b.tools, c, subject, &b.sink.url()).await?;
    let pid = running.child.id().unwrap_or(0);
    // The measured window's CPU: from half a second in (the warm-up) to the end; the
    // responder's, nats-server's, this process's (requesters and sink), the machine's.
    let (ticks, server, me) = (env.ticks, env.nats_pid, std::process::id());
    let cpus = move || {
        [
            cpu_seconds(pid, ticks),
            cpu_seconds(server, ticks),
            cpu_seconds(me, ticks),
            machine_busy_seconds(ticks),
        ]
    };
    let warm = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        cpus()
    });
    let (n, mut lat) = drive(b.nc, subject, concurrency, seconds).await;
    let [cpu, server_cpu, driver_cpu, busy] = {
        let (end, start) = (cpus(), warm.await.unwrap_or_default());
        [0, 1, 2, 3].map(|i| end[i] - start[i])
    };
    let per_10k = |cpu: f64| cpu / (n.max(1) as f64) * 10_000.0;
    let rss_mib = peak_rss_kib(pid) as f64 / 1024.0;
    stop(running.child).await;
    let (p50_ms, p99_ms) = p50_p99_ms(&mut lat);
    Ok(Sample {
        rate: n as f64 / seconds,
        p50_ms,
        p99_ms,
        cpu_per_10k: per_10k(cpu),
        rss_mib,
        server_per_10k: per_10k(server_cpu),
        driver_per_10k: per_10k(driver_cpu),
        busy_cores: busy / seconds,
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
    let tools = Tools {
        bare: args.required("bare")?.into(),
        python: args.required("python")?.into(),
        py_service: args.required("py-service")?.into(),
    };
    let seconds: f64 = args.num("seconds", 3.0)?;
    let rounds: usize = args.num("rounds", 3)?;
    let levels: Vec<usize> = args
        .list("concurrency")
        .unwrap_or_else(|| vec!["1".into(), "64".into()])
        .iter()
        .map(|s| s.parse())
        .collect::<Result<_, _>>()?;
    let contenders = args.only(&Contender::ALL);
    let sink = Sink::start().await?;
    let nc = async_nats::connect(&env.nats_url).await?;
    let bench = Bench {
        env: &env,
        tools: &tools,
        sink: &sink,
        nc: &nc,
        seconds,
    };
    let mut md = format!(
        "# NATS requests answered by an HTTP app\n\n{}; nats-server {} on loopback. A requester on its own connection sends 128 B requests, each of N requesters its next one when its reply came, for {seconds} s after a 0.5 s warm-up; each responder takes {IN_FLIGHT} requests at once and POSTs each to the fast Rust sink (200 at once, empty body), replying with its body. jetrelay: a service source (`max_in_flight = {IN_FLIGHT}`, the info log level); bare: `bench/src/bin/bare_service.rs` (queue subscription → POST → reply, nothing else); Python: `bench/py_service.py` (natsio + aiohttp, the tools venv's client). req/s: replies in the window; p50/p99: round trip at the requester; added p50: over the bare loop's; CPU: the responder's seconds per 10k requests in the window, nats-server's, and the driver's (this process: the requesters and the sink); busy: the whole machine's busy cores over the window (of {cores}: at the machine's limit every contender is bounded by the CPU left to it, not by its own design); RSS: the responder's peak. Medians of {rounds} rounds, contenders interleaved.\n\n",
        machine(),
        env.nats_version,
        cores = std::thread::available_parallelism().map_or(1, usize::from),
    );
    for &concurrency in &levels {
        let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); contenders.len()];
        for round in 0..rounds {
            for (i, c) in contenders.iter().enumerate() {
                let subject = format!("svc.c{concurrency}.r{round}.{i}");
                let s = run_one(&bench, *c, concurrency, &subject).await?;
                eprintln!(
                    "{concurrency} requesters, round {round}, {}: {:.0} req/s, p50 {:.3} ms, p99 {:.3} ms, {:.3} CPU s/10k, {:.1} MiB",
                    c.label(),
                    s.rate,
                    s.p50_ms,
                    s.p99_ms,
                    s.cpu_per_10k,
                    s.rss_mib
                );
                samples[i].push(s);
            }
        }
        let med =
            |v: &[Sample], f: fn(&Sample) -> f64| median(&mut v.iter().map(f).collect::<Vec<_>>());
        let bare = contenders
            .iter()
            .position(|c| *c == Contender::Bare)
            .map(|i| (med(&samples[i], |s| s.rate), med(&samples[i], |s| s.p50_ms)));
        let python = contenders
            .iter()
            .position(|c| *c == Contender::Python)
            .map(|i| med(&samples[i], |s| s.rate));
        md.push_str(&format!(
            "## {concurrency} requester{}\n\n| responder | req/s | × bare | × Python | p50 ms | p99 ms | added p50 ms | CPU s / 10k | nats-server CPU s / 10k | driver CPU s / 10k | machine busy cores | peak RSS MiB |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n",
            if concurrency == 1 { "" } else { "s" }
        ));
        for (c, v) in contenders.iter().zip(&samples) {
            let (rate, p50) = (med(v, |s| s.rate), med(v, |s| s.p50_ms));
            let (ratio, added) = match bare {
                Some((r, p)) => (
                    format!("{:.2}", rate / r.max(1e-9)),
                    format!("{:+.3}", p50 - p),
                ),
                None => ("–".into(), "–".into()),
            };
            let over_python =
                python.map_or_else(|| "–".into(), |p| format!("{:.2}", rate / p.max(1e-9)));
            md.push_str(&format!(
                "| {} | {rate:.0} | {ratio} | {over_python} | {p50:.3} | {:.3} | {added} | {:.3} | {:.3} | {:.3} | {:.2} | {:.1} |\n",
                c.label(),
                med(v, |s| s.p99_ms),
                med(v, |s| s.cpu_per_10k),
                med(v, |s| s.server_per_10k),
                med(v, |s| s.driver_per_10k),
                med(v, |s| s.busy_cores),
                med(v, |s| s.rss_mib),
            ));
        }
        md.push('\n');
    }
    println!("{md}");
    save_report(&args, "service-", &md)?;
    env.close().await;
    Ok(())
}
