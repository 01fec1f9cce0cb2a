//! The scale-out benchmark (`bench/scaleout`): an elastic group on a three-node
//! cluster (R3 streams, `--replicas`), auto-joined jetrelay members (`source.auto_join`), each with
//! a fixed `max_in_flight`, delivering to an app that takes `--latency-ms` per
//! message. Members are added 1 → 2 → 4 → 8 (`--sizes`); at each size, once the
//! partitions are spread, the aggregate throughput over `--window-s`, beside N × the
//! one-member figure. At each join (and at one clean leave at the end) the longest
//! gap in delivery of any partition that had messages. Then the rest of the backlog
//! is drained: every message delivered is counted (lost, and delivered more than
//! once). Prints a markdown report and writes it to `<out>/scaleout-<unix-seconds>.md`.
//! Never fails on timing.
//!
//!   scaleout --nats-server=PATH --relay=PATH [--out=DIR] [--sizes=1,2,4,8]
//!            [--in-flight=8] [--latency-ms=20] [--window-s=6] [--messages=45000]
//!            [--replicas=3]

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use axum::http::HeaderMap;
use bytes::Bytes;
use jetrelay_bench::{
    Args, Error, cpu_seconds, fill, free_port, machine, machine_busy_seconds, spawn_relay,
    wait_for, write_report,
};
use tokio::process::{Child, Command};

const PARTITIONS: u32 = 16;
const GROUP: &str = "eg";
const STREAM: &str = "SCALE";

/// What the app saw: per delivery, when, its partition and its body.
#[derive(Default)]
struct Seen {
    arrivals: Vec<(Instant, u32, Bytes)>,
    /// Deliveries per member.
    by_member: BTreeMap<String, usize>,
}

async fn app(latency: Duration) -> Result<(String, Arc<Mutex<Seen>>), Error> {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let s = seen.clone();
    let router = axum::Router::new().route(
        "/app/{member}",
        axum::routing::post(
            move |axum::extract::Path(member): axum::extract::Path<String>,
                  headers: HeaderMap,
                  body: Bytes| {
                let s = s.clone();
                async move {
                    tokio::time::sleep(latency).await;
                    let p = headers
                        .get("nats-partition")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(u32::MAX);
                    let mut s = s.lock().unwrap();
                    s.arrivals.push((Instant::now(), p, body));
                    *s.by_member.entry(member).or_default() += 1;
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/app", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, router).await });
    Ok((url, seen))
}

/// Three nodes on loopback, each routing to all.
async fn cluster(bin: &str, dir: &Path) -> Result<(Vec<Child>, String), Error> {
    let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
    let routes = ports
        .iter()
        .map(|(_, c)| format!("nats://127.0.0.1:{c}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut nodes = Vec::new();
    for (i, (p, c)) in ports.iter().enumerate() {
        nodes.push(
            Command::new(bin)
                .args(["-a", "127.0.0.1", "-p", &p.to_string(), "-js", "-sd"])
                .arg(dir.join(format!("n{i}")))
                .args(["--cluster", &format!("nats://127.0.0.1:{c}")])
                .args(["--cluster_name", "bench", "--server_name", &format!("n{i}")])
                .args(["--routes", &routes])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn()?,
        );
    }
    let urls = ports
        .iter()
        .map(|(p, _)| format!("nats://127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",");
    Ok((nodes, urls))
}

struct Member {
    name: String,
    child: Child,
    admin: u16,
}

async fn start_member(
    relay: &Path,
    dir: &Path,
    urls: &str,
    app: &str,
    i: usize,
    in_flight: usize,
) -> Result<Member, Error> {
    let name = format!("m{i}");
    let admin = free_port();
    let level = std::env::var("BENCH_LOG_LEVEL").unwrap_or_else(|_| "warn".into());
    let servers = urls
        .split(',')
        .map(|u| format!("\"{u}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let text = format!(
        "[nats]\nservers = [{servers}]\n[source]\nstream = \"{STREAM}\"\nkind = \"elastic\"\ngroup = \"{GROUP}\"\n\
         member = \"{name}\"\nauto_join = true\nmember_timeout_ms = 10000\n[consumer]\nack_wait_ms = 10000\nmax_deliver = -1\n\
         [delivery]\nmax_in_flight = {in_flight}\nmax_buffered = 64\nordering = \"subject\"\n[http]\nurl = \"{app}/{name}\"\n\
         [admin]\nlisten = \"127.0.0.1:{admin}\"\n[log]\nlevel = \"{level}\"\n"
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text)?;
    let child = spawn_relay(relay, &path, &name)?;
    Ok(Member { name, child, admin })
}

/// Each member's partitions, from `/ready` (empty where it cannot be read).
async fn partitions(http: &reqwest::Client, members: &[Member]) -> Vec<Vec<u32>> {
    let mut out = Vec::new();
    for m in members {
        let got = async {
            let v: serde_json::Value = http
                .get(format!("http://127.0.0.1:{}/ready", m.admin))
                .send()
                .await
                .ok()?
                .text()
                .await
                .ok()
                .and_then(|t| serde_json::from_str(&t).ok())?;
            Some(
                v["partitions"]
                    .as_array()?
                    .iter()
                    .filter_map(|p| p.as_u64().map(|p| p as u32))
                    .collect(),
            )
        }
        .await;
        out.push(got.unwrap_or_default());
    }
    out
}

/// Waits until the members own every partition between them, each its share.
async fn spread(http: &reqwest::Client, members: &[Member]) -> Result<Duration, Error> {
    let started = Instant::now();
    let share = PARTITIONS as usize / members.len();
    loop {
        let p = partitions(http, members).await;
        let total: usize = p.iter().map(Vec::len).sum();
        if total == PARTITIONS as usize && p.iter().all(|p| p.len() >= share) {
            return Ok(started.elapsed());
        }
        if started.elapsed() > Duration::from_secs(60) {
            return Err(format!(
                "the partitions never spread over {} members: {p:?}",
                members.len()
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The longest gap between two deliveries of one partition among the arrivals in
/// `[from, to]` (partitions with at least two of them).
fn longest_gap(seen: &Seen, from: Instant, to: Instant) -> Duration {
    let mut last: HashMap<u32, Instant> = HashMap::new();
    let mut gap = Duration::ZERO;
    let mut arrivals: Vec<&(Instant, u32, Bytes)> = seen
        .arrivals
        .iter()
        .filter(|(at, _, _)| *at >= from && *at <= to)
        .collect();
    arrivals.sort_by_key(|a| a.0);
    for (at, p, _) in arrivals {
        if let Some(prev) = last.insert(*p, *at) {
            gap = gap.max(at.duration_since(prev));
        }
    }
    gap
}

fn count(seen: &Arc<Mutex<Seen>>) -> usize {
    seen.lock().unwrap().arrivals.len()
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args = Args::parse();
    let nats_bin = args.required("nats-server")?.to_string();
    let relay = PathBuf::from(args.required("relay")?);
    let out = PathBuf::from(args.get("out").unwrap_or("bench/results"));
    let sizes: Vec<usize> = args
        .list("sizes")
        .unwrap_or_else(|| vec!["1".into(), "2".into(), "4".into(), "8".into()])
        .iter()
        .map(|s| s.parse())
        .collect::<Result<_, _>>()?;
    let in_flight: usize = args.num("in-flight", 8)?;
    let latency = Duration::from_millis(args.num("latency-ms", 20)?);
    let window = Duration::from_secs(args.num("window-s", 6)?);
    let messages: u64 = args.num("messages", 45_000)?;
    // The origin stream's replicas (the group's work-queue stream takes the same).
    let replicas: usize = args.num("replicas", 3)?;

    let dir = std::env::temp_dir().join(format!("jetrelay-scaleout-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (nodes, urls) = cluster(&nats_bin, &dir).await?;
    let addrs: Vec<async_nats::ServerAddr> = urls
        .split(',')
        .map(|u| u.parse())
        .collect::<Result<_, _>>()?;
    let started = Instant::now();
    let client = loop {
        match async_nats::connect(addrs.clone()).await {
            Ok(c) => break c,
            Err(_) if started.elapsed() < Duration::from_secs(30) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(e.into()),
        }
    };
    let js = jetstream::new(client);
    let started = Instant::now();
    while js
        .create_stream(jetstream::stream::Config {
            name: STREAM.into(),
            subjects: vec!["e.*".into()],
            num_replicas: replicas,
            ..Default::default()
        })
        .await
        .is_err()
    {
        if started.elapsed() > Duration::from_secs(60) {
            return Err("no stream in 60 s: the cluster did not form".into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let created = Command::new(&relay)
        .args([
            "group",
            "elastic",
            "create",
            STREAM,
            GROUP,
            &PARTITIONS.to_string(),
        ])
        .args(["--filter", "e.*", "--wildcards", "1", "--server", &urls])
        .output()
        .await?;
    if !created.status.success() {
        return Err(format!("group create: {}", String::from_utf8_lossy(&created.stderr)).into());
    }
    eprintln!("filling {messages} messages over 1000 keys");
    let mode = fill(&js, |i| format!("e.k{}", i % 1000), messages, 64).await?;
    // The group's work-queue stream sources the origin: let it take everything
    // first, so that the runs measure the members, not the sourcing.
    let work = format!("{STREAM}-{GROUP}");
    let sourcing = Instant::now();
    loop {
        let held = match js.get_stream(&work).await {
            Ok(s) => s.cached_info().state.messages,
            Err(_) => 0,
        };
        if held >= messages {
            break;
        }
        if sourcing.elapsed() > Duration::from_secs(300) {
            return Err(format!("{work} sourced only {held} of {messages} in 300 s").into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let sourced_in = sourcing.elapsed();
    eprintln!("{work} sourced {messages} in {sourced_in:?}");
    let (url, seen) = app(latency).await?;
    let http = reqwest::Client::new();
    let ticks: f64 = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());

    let mut members: Vec<Member> = Vec::new();
    let mut rows = Vec::new();
    let mut one = 0.0;
    for &n in &sizes {
        let joined_at = Instant::now();
        while members.len() < n {
            let i = members.len();
            members.push(start_member(&relay, &dir, &urls, &url, i, in_flight).await?);
        }
        let took = spread(&http, &members).await?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        // Where the CPU goes: the members, the servers, this process (the app).
        let split = |members: &[Member]| {
            let of = |pids: &mut dyn Iterator<Item = u32>| {
                pids.map(|p| cpu_seconds(p, ticks)).sum::<f64>()
            };
            [
                of(&mut members.iter().filter_map(|m| m.child.id())),
                of(&mut nodes.iter().filter_map(Child::id)),
                cpu_seconds(std::process::id(), ticks),
            ]
        };
        let (c0, t0, busy0) = (count(&seen), Instant::now(), machine_busy_seconds(ticks));
        let split0 = split(&members);
        tokio::time::sleep(window).await;
        let secs = t0.elapsed().as_secs_f64();
        let rate = (count(&seen) - c0) as f64 / secs;
        let busy = (machine_busy_seconds(ticks) - busy0) / secs;
        let split1 = split(&members);
        let cpu: [f64; 3] = std::array::from_fn(|i| (split1[i] - split0[i]) / secs);
        if n == sizes[0] {
            one = rate / n as f64;
        }
        let gap = (n > sizes[0]).then(|| {
            longest_gap(
                &seen.lock().unwrap(),
                joined_at,
                joined_at + took + Duration::from_secs(1),
            )
        });
        eprintln!("{n} member(s): {rate:.0} msg/s, spread in {took:?}, longest gap {gap:?}");
        eprintln!(
            "  cores: jetrelay {:.2}, nats-server {:.2}, app {:.2}, machine {busy:.2}",
            cpu[0], cpu[1], cpu[2]
        );
        rows.push((n, rate, took, gap, busy, cpu));
    }
    // One clean leave.
    let leaving = members.pop().ok_or("no members")?;
    let left_name = leaving.name.clone();
    let leave_at = Instant::now();
    let pid = leaving.child.id().unwrap_or(0);
    std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()?;
    let mut child = leaving.child;
    child.wait().await?;
    let leave_took = spread(&http, &members).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let leave_gap = longest_gap(
        &seen.lock().unwrap(),
        leave_at,
        leave_at + leave_took + Duration::from_secs(1),
    );
    // The rest of the backlog, then what was delivered.
    let drained = wait_for("the backlog drained", Duration::from_secs(120), || {
        let s = seen.lock().unwrap();
        let mut distinct: Vec<&Bytes> = s.arrivals.iter().map(|a| &a.2).collect();
        distinct.sort();
        distinct.dedup();
        distinct.len() as u64 >= messages
    })
    .await;
    let (delivered, distinct) = {
        let s = seen.lock().unwrap();
        let mut by: BTreeMap<&Bytes, usize> = BTreeMap::new();
        for a in &s.arrivals {
            *by.entry(&a.2).or_default() += 1;
        }
        (s.arrivals.len(), by.len())
    };
    for m in members {
        let pid = m.child.id().unwrap_or(0);
        std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()?;
        let mut c = m.child;
        let _ = tokio::time::timeout(Duration::from_secs(30), c.wait()).await;
    }
    drop(nodes);
    let _ = std::fs::remove_dir_all(&dir);

    let mut md = format!(
        "# Scale-out: auto-joined members of an elastic group\n\n{}\n\nThree nats-server nodes on loopback (R{replicas} streams), an elastic group of {PARTITIONS} partitions over 1000 keys, {messages} messages of 64 B filled first ({}; the group's work-queue stream sourced them in {:.1} s before the first member starts); each member `max_in_flight = {in_flight}`, the app takes {} ms per message; throughput over {} s once the partitions are spread.\n\n| members | msg/s | × one member | of N × one | partitions spread in | longest partition gap at the join | cores busy (of {cores}) | of which jetrelay / nats-server / app |\n|---|---|---|---|---|---|---|---|\n",
        machine(),
        mode.describe(),
        sourced_in.as_secs_f64(),
        latency.as_millis(),
        window.as_secs()
    );
    for (n, rate, took, gap, busy, cpu) in &rows {
        md.push_str(&format!(
            "| {n} | {rate:.0} | {:.2} | {:.2} | {:.2} s | {} | {busy:.2} | {:.2} / {:.2} / {:.2} |\n",
            rate / one,
            rate / (one * *n as f64),
            took.as_secs_f64(),
            gap.map_or("—".into(), |g| format!("{:.2} s", g.as_secs_f64())),
            cpu[0],
            cpu[1],
            cpu[2]
        ));
    }
    md.push_str(&format!(
        "\nA clean leave ({left_name}, SIGTERM: drain, leave, delete its consumer): partitions spread again in {:.2} s, longest partition gap {:.2} s.\n\nDelivered: {delivered} deliveries of {distinct} distinct messages of {messages} ({} lost, {} delivered more than once){}.\n",
        leave_took.as_secs_f64(),
        leave_gap.as_secs_f64(),
        messages.saturating_sub(distinct as u64),
        delivered - distinct,
        if drained.is_err() { "; the backlog did not drain in 120 s" } else { "" }
    ));
    println!("{md}");
    let path = write_report(&out, "scaleout-", None, &md)?;
    eprintln!("written to {}", path.display());
    Ok(())
}
