//! The rollout benchmark (`bench/rollout`): what a pod's stop costs, in Kubernetes'
//! order, with and without the drain hook. One member of a static group runs as two
//! instances (pods), each with its own app: `a` holds the pin, `b` stands by. A
//! publisher sends `--rate` messages a second (keys in order) all along; then `a`'s
//! pod stops:
//!
//! - `no hook`: the app gets its TERM first and stops (its listener closed, what it
//!   was answering cut), `--app-stop-ms` later jetrelay gets its TERM (Kubernetes
//!   sends a native sidecar its TERM only after the app exited).
//! - `drain hook`: the app container's preStop drains jetrelay (`POST /drain`), then
//!   the app stops, then jetrelay's TERM.
//!
//! Per arm, medians of `--rounds`: how long the hook took; when `b` delivered its
//! first message after the stop began; the longest gap in deliveries; requests that
//! reached a stopping app (refused or cut) or came after; messages delivered more than
//! once; messages lost; how long jetrelay took to exit after its TERM.
//!
//!   rollout --nats-server=PATH --relay=PATH [--out=DIR] [--rate=200] [--rounds=3]
//!           [--app-stop-ms=2000] [--app-ms=5] [--ack-wait-ms=5000]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use axum::http::HeaderMap;
use bytes::Bytes;
use jetrelay_bench::{
    Args, Env, Error, RelayConfig, free_port, machine, median, save_report, signal, start_relay,
    wait_for,
};

const STREAM: &str = "ROLL";
const GROUP: &str = "g";
const MEMBER: &str = "m1";
const KEYS: u64 = 8;

/// What one app saw.
#[derive(Default)]
struct Seen {
    /// Each message body (its id) and when it arrived, in arrival order.
    arrivals: Vec<(u64, Instant)>,
    /// Requests that arrived once its stop began (refused from then on, or cut).
    after_stop: u64,
    /// Requests of a message delivered before (`Nats-Delivered` above 1).
    redelivered: u64,
}

/// An app one pod runs: answers 200 after `--app-ms`, records what it got; stopping
/// closes its listener and cuts what it was answering.
struct App {
    addr: SocketAddr,
    seen: Arc<Mutex<Seen>>,
    stopping: Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl App {
    async fn start(app_ms: u64) -> Result<App, Error> {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let stopping = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (s, stop) = (seen.clone(), stopping.clone());
        let router = axum::Router::new().route(
            "/m",
            axum::routing::post(move |h: HeaderMap, body: Bytes| {
                let (s, stop) = (s.clone(), stop.clone());
                async move {
                    let id: u64 = std::str::from_utf8(&body)
                        .ok()
                        .and_then(|b| b.split('-').nth(1))
                        .and_then(|n| n.parse().ok())
                        .unwrap_or(u64::MAX);
                    if stop.load(std::sync::atomic::Ordering::SeqCst) {
                        s.lock().map(|mut s| s.after_stop += 1).ok();
                        return axum::http::StatusCode::SERVICE_UNAVAILABLE;
                    }
                    let again = h
                        .get("nats-delivered")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.parse::<u64>().ok())
                        .is_some_and(|n| n > 1);
                    tokio::time::sleep(Duration::from_millis(app_ms)).await;
                    s.lock()
                        .map(|mut s| {
                            s.arrivals.push((id, Instant::now()));
                            s.redelivered += u64::from(again);
                        })
                        .ok();
                    axum::http::StatusCode::OK
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            axum::serve(listener, router).await.ok();
        });
        Ok(App {
            addr,
            seen,
            stopping,
            task,
        })
    }

    fn url(&self) -> String {
        format!("http://{}/m", self.addr)
    }

    /// The app's TERM: what arrives now is counted, and the server goes away
    /// (connections cut, the port refused).
    fn stop(&self) {
        self.stopping
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.task.abort();
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Arm {
    NoHook,
    Drain,
}

impl Arm {
    fn label(self) -> &'static str {
        match self {
            Arm::NoHook => "no hook: the app stops, then jetrelay's TERM",
            Arm::Drain => "drain hook: /drain, then the app stops, then jetrelay's TERM",
        }
    }
}

#[derive(Default, Clone, Copy)]
struct Figures {
    hook_ms: f64,
    b_first_ms: f64,
    longest_gap_ms: f64,
    to_stopping_app: f64,
    failed_requests: f64,
    redelivered: f64,
    twice: f64,
    lost: f64,
    exit_ms: f64,
}

fn config(env: &Env, url: &str, admin: u16, ack_wait_ms: u64) -> String {
    format!(
        "[nats]\nservers = [\"{}\"]\n[source]\nstream = \"{STREAM}\"\nkind = \"static\"\ngroup = \"{GROUP}\"\nmember = \"{MEMBER}\"\n\
         [consumer]\nack_wait_ms = {ack_wait_ms}\nmax_deliver = -1\n[delivery]\nordering = \"subject\"\nshutdown_grace_ms = 20000\n\
         [http]\nurl = \"{url}\"\n[admin]\nlisten = \"127.0.0.1:{admin}\"\nannounce = false\n[log]\nlevel = \"warn\"\n",
        env.nats_url
    )
}

/// The requests to the app that got no answer (refused, cut, timed out) so far.
async fn failed(admin: u16) -> f64 {
    jetrelay_bench::relay_metric(admin, "jetrelay_http_requests_total")
        .await
        .unwrap_or_default()
        .iter()
        .filter(|(labels, _)| {
            labels.contains("class=\"error\"") || labels.contains("class=\"timeout\"")
        })
        .map(|(_, v)| v)
        .sum()
}

async fn pinned(admin: u16) -> bool {
    let Ok(r) = reqwest::get(format!("http://127.0.0.1:{admin}/ready")).await else {
        return false;
    };
    r.text()
        .await
        .is_ok_and(|t| t.contains("\"pinned\":true") && t.contains("\"state\":\"consuming\""))
}

/// One round of `arm` on a fresh group (stream `ROLL`, purged) and fresh pods.
async fn round(env: &Env, args: &Args, arm: Arm, tag: &str) -> Result<Figures, Error> {
    let (rate, app_ms, stop_ms, ack_wait): (u64, u64, u64, u64) = (
        args.num("rate", 200)?,
        args.num("app-ms", 5)?,
        args.num("app-stop-ms", 2000)?,
        args.num("ack-wait-ms", 5000)?,
    );
    let (app_a, app_b) = (App::start(app_ms).await?, App::start(app_ms).await?);
    let (admin_a, admin_b) = (free_port(), free_port());
    let pod = |app: &App, admin: u16| RelayConfig {
        text: config(env, &app.url(), admin, ack_wait),
        admin,
    };
    let mut a = start_relay(env, &pod(&app_a, admin_a), &format!("{tag}-a"))
        .await?
        .child;
    let mut b = start_relay(env, &pod(&app_b, admin_b), &format!("{tag}-b"))
        .await?
        .child;
    // The publisher: `rate` a second, ids counted up, keys in turn.
    let js = env.js.clone();
    let published = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let run = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let (p, r) = (published.clone(), run.clone());
    let publisher = tokio::spawn(async move {
        let every = Duration::from_secs_f64(1.0 / rate as f64);
        let mut tick = tokio::time::interval(every);
        let mut id = 0u64;
        while r.load(std::sync::atomic::Ordering::SeqCst) {
            tick.tick().await;
            let body = format!("k{}-{id}", id % KEYS);
            if let Ok(ack) = js.publish(format!("r.k{}", id % KEYS), body.into()).await
                && ack.await.is_ok()
            {
                id += 1;
                p.store(id, std::sync::atomic::Ordering::SeqCst);
            }
        }
    });
    // Whoever took the pin (the first to pull) is the pod that stops.
    let deadline = Instant::now() + Duration::from_secs(30);
    let (who, standby) = loop {
        if pinned(admin_a).await {
            break ((&mut a, &app_a, admin_a), (&app_b, admin_b));
        }
        if pinned(admin_b).await {
            break ((&mut b, &app_b, admin_b), (&app_a, admin_a));
        }
        if Instant::now() > deadline {
            return Err("nobody took the pin".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let (child, app, admin) = who;
    let (other_app, _) = standby;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let failed_before = failed(admin).await;
    let began = Instant::now();
    let mut f = Figures::default();
    if arm == Arm::Drain {
        let answer = reqwest::Client::new()
            .post(format!("http://127.0.0.1:{admin}/drain?wait=20s"))
            .send()
            .await?;
        if !answer.status().is_success() {
            return Err(format!("/drain answered {}", answer.status()).into());
        }
        f.hook_ms = began.elapsed().as_secs_f64() * 1e3;
    }
    app.stop();
    tokio::time::sleep(Duration::from_millis(stop_ms)).await;
    f.failed_requests = failed(admin).await - failed_before;
    let term = Instant::now();
    signal(child, "-TERM").await;
    let _ = tokio::time::timeout(Duration::from_secs(60), child.wait()).await;
    f.exit_ms = term.elapsed().as_secs_f64() * 1e3;
    // A while more on the standby, then everything published must have arrived.
    tokio::time::sleep(Duration::from_secs(2)).await;
    run.store(false, std::sync::atomic::Ordering::SeqCst);
    publisher.await.ok();
    let total = published.load(std::sync::atomic::Ordering::SeqCst);
    let all = |apps: [&App; 2]| {
        let mut ids: Vec<(u64, Instant)> = Vec::new();
        for a in apps {
            ids.extend(
                a.seen
                    .lock()
                    .map(|s| s.arrivals.clone())
                    .unwrap_or_default(),
            );
        }
        ids
    };
    let _ = wait_for("every message", Duration::from_secs(60), || {
        let got: std::collections::BTreeSet<u64> =
            all([&app_a, &app_b]).iter().map(|(i, _)| *i).collect();
        got.len() as u64 >= total
    })
    .await;
    let mut arrivals = all([&app_a, &app_b]);
    arrivals.sort_by_key(|(_, t)| *t);
    let mut count: BTreeMap<u64, u64> = BTreeMap::new();
    for (id, _) in &arrivals {
        *count.entry(*id).or_default() += 1;
    }
    f.twice = count.values().filter(|&&n| n > 1).count() as f64;
    f.lost = (0..total).filter(|i| !count.contains_key(i)).count() as f64;
    f.to_stopping_app = app.seen.lock().map(|s| s.after_stop).unwrap_or(0) as f64;
    f.redelivered = [&app_a, &app_b]
        .iter()
        .map(|a| a.seen.lock().map(|s| s.redelivered).unwrap_or(0))
        .sum::<u64>() as f64;
    f.b_first_ms = other_app
        .seen
        .lock()
        .ok()
        .and_then(|s| {
            s.arrivals
                .iter()
                .find(|(_, t)| *t >= began)
                .map(|(_, t)| t.duration_since(began))
        })
        .map_or(f64::NAN, |d| d.as_secs_f64() * 1e3);
    let window: Vec<Instant> = arrivals
        .iter()
        .map(|(_, t)| *t)
        .filter(|t| *t >= began)
        .collect();
    f.longest_gap_ms = std::iter::once(began)
        .chain(window.iter().copied())
        .collect::<Vec<_>>()
        .windows(2)
        .map(|w| w[1].duration_since(w[0]).as_secs_f64() * 1e3)
        .fold(0.0, f64::max);
    // The standby and its app go; the stream is emptied for the next round.
    signal(&a, "-TERM").await;
    signal(&b, "-TERM").await;
    let _ = tokio::time::timeout(Duration::from_secs(30), b.wait()).await;
    let _ = tokio::time::timeout(Duration::from_secs(30), a.wait()).await;
    app_a.task.abort();
    app_b.task.abort();
    env.js.get_stream(STREAM).await?.purge().await?;
    Ok(f)
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args = Args::parse();
    let env = Env::start(
        args.required("nats-server")?,
        args.required("relay")?.into(),
    )
    .await?;
    let rounds: usize = args.num("rounds", 3)?;
    env.js
        .create_stream(jetstream::stream::Config {
            name: STREAM.into(),
            subjects: vec!["r.*".into()],
            subject_transform: Some(jetstream::stream::SubjectTransform {
                source: "r.*".into(),
                destination: "{{partition(1,1)}}.r.{{wildcard(1)}}".into(),
            }),
            ..Default::default()
        })
        .await?;
    let created = tokio::process::Command::new(&env.relay_bin)
        .args([
            "group", "static", "create", "balanced", STREAM, GROUP, "1", MEMBER,
        ])
        .arg("--server")
        .arg(&env.nats_url)
        .env_remove("JETRELAY_CONFIG")
        .output()
        .await?;
    if !created.status.success() {
        return Err(format!("group create: {}", String::from_utf8_lossy(&created.stderr)).into());
    }
    let arms = [Arm::NoHook, Arm::Drain];
    let mut figures: Vec<Vec<Figures>> = vec![Vec::new(); arms.len()];
    for r in 0..rounds {
        for (i, arm) in arms.iter().enumerate() {
            let f = round(&env, &args, *arm, &format!("r{r}x{i}")).await?;
            eprintln!(
                "round {r}, {arm:?}: hook {:.0} ms, standby first {:.0} ms, gap {:.0} ms, to the stopping app {}, failed {}, redelivered {}, twice {}, lost {}, exit {:.0} ms",
                f.hook_ms,
                f.b_first_ms,
                f.longest_gap_ms,
                f.to_stopping_app,
                f.failed_requests,
                f.redelivered,
                f.twice,
                f.lost,
                f.exit_ms
            );
            figures[i].push(f);
        }
    }
    let med =
        |v: &[Figures], g: fn(&Figures) -> f64| median(&mut v.iter().map(g).collect::<Vec<_>>());
    let mut md = format!(
        "# A pod's stop, with and without the drain hook\n\n{}; nats-server {} on loopback. One member of a static group, two instances (pods) each with its own app answering after {} ms; `a` holds the pin (`ack_wait_ms = {}`, so the pin's timeout is as long); a publisher sends {} messages a second over {KEYS} keys all along. At the stop, Kubernetes' order: the app's preStop hook (none, or `POST /drain?wait=20s`), the app's TERM (its listener closed, what it was answering cut), {} ms later jetrelay's TERM. Medians of {rounds} rounds.\n\n| arm | hook ms | standby's first message after the stop began, ms | longest gap in deliveries, ms | requests that reached the stopping app | requests refused, cut or timed out | redeliveries | delivered twice | lost | jetrelay's exit after its TERM, ms |\n|---|---|---|---|---|---|---|---|---|---|\n",
        machine(),
        env.nats_version,
        args.num("app-ms", 5u64)?,
        args.num("ack-wait-ms", 5000u64)?,
        args.num("rate", 200u64)?,
        args.num("app-stop-ms", 2000u64)?,
    );
    for (arm, v) in arms.iter().zip(&figures) {
        md.push_str(&format!(
            "| {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} |\n",
            arm.label(),
            med(v, |f| f.hook_ms),
            med(v, |f| f.b_first_ms),
            med(v, |f| f.longest_gap_ms),
            med(v, |f| f.to_stopping_app),
            med(v, |f| f.failed_requests),
            med(v, |f| f.redelivered),
            med(v, |f| f.twice),
            med(v, |f| f.lost),
            med(v, |f| f.exit_ms),
        ));
    }
    println!("{md}");
    save_report(&args, "rollout-", &md)?;
    env.close().await;
    Ok(())
}
