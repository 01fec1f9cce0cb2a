//! The local demo (`scripts/demo`): a nats-server, a small echo app and the jetrelay
//! binary, all on loopback. Publishes ten messages, shows them arriving at the app
//! (one answered 503 once, to show a delayed retry), prints the metrics, stops
//! jetrelay with SIGTERM, and ends with what to do next: the config it ran with and
//! the `jetrelay run --config …` line to start from.
//!
//! Nothing it starts outlives it: nats-server and jetrelay run in process groups of
//! their own (a Ctrl-C in the terminal reaches only the demo) and are killed by a
//! guard when the demo ends, whichever way it ends: done, an error, a panic, or
//! SIGINT / SIGTERM / SIGHUP.
//!
//! `demo --relay PATH [--save DIR]`: PATH is the jetrelay binary (`scripts/demo` asks
//! cargo where it built it); DIR is where the starting config is saved. The
//! nats-server binary comes from `NATS_SERVER_BIN` (`scripts/setup` installs one).

#![allow(clippy::print_stdout)] // A demo prints what happens.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use tokio::signal::unix::{SignalKind, signal};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// How long the demo waits for each step before it gives up (and cleans up).
const PATIENCE: Duration = Duration::from_secs(30);

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args = Args::parse()?;
    let dir = tempfile::tempdir()?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut hup = signal(SignalKind::hangup())?;
    // The guards live here, outside the demo's future, so that they are dropped (and
    // their processes killed) after it, however it ended.
    let mut procs = Vec::new();
    let outcome = tokio::select! {
        r = demo(&args, dir.path(), &mut procs) => r,
        _ = int.recv() => Err("interrupted (SIGINT)".into()),
        _ = term.recv() => Err("stopped (SIGTERM)".into()),
        _ = hup.recv() => Err("stopped (SIGHUP)".into()),
    };
    if let Err(e) = &outcome {
        println!("\ndemo failed: {e}; stopping what it started");
    }
    drop(procs);
    outcome
}

/// The command line.
struct Args {
    relay: PathBuf,
    save: Option<PathBuf>,
    nats: PathBuf,
}

impl Args {
    fn parse() -> Result<Args, Error> {
        let mut relay = std::env::var_os("DEMO_RELAY_BIN").map(PathBuf::from);
        let mut save = None;
        let mut it = std::env::args_os().skip(1);
        while let Some(a) = it.next() {
            match a.to_str() {
                Some("--relay") => relay = it.next().map(PathBuf::from),
                Some("--save") => save = it.next().map(PathBuf::from),
                _ => {
                    return Err(format!("usage: demo --relay PATH [--save DIR] (not {a:?})").into());
                }
            }
        }
        let relay = relay.ok_or("usage: demo --relay PATH [--save DIR]; scripts/demo finds it")?;
        if !relay.is_file() {
            return Err(format!(
                "no jetrelay binary at {} (scripts/demo builds it)",
                relay.display()
            )
            .into());
        }
        let nats = std::env::var_os("NATS_SERVER_BIN")
            .map_or_else(|| PathBuf::from("nats-server"), PathBuf::from);
        Ok(Args { relay, save, nats })
    }
}

/// A child process in a process group of its own, killed when the guard is dropped.
struct Guarded {
    name: &'static str,
    child: Child,
}

impl Guarded {
    fn spawn(name: &'static str, cmd: &mut Command) -> Result<Guarded, Error> {
        let child = cmd
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start {name}: {e}"))?;
        Ok(Guarded { name, child })
    }

    /// Fails when the process has exited.
    fn alive(&mut self) -> Result<(), Error> {
        match self.child.try_wait()? {
            Some(status) => Err(format!("{} exited with {status}", self.name).into()),
            None => Ok(()),
        }
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.child.kill().ok();
        }
        self.child.wait().ok();
    }
}

async fn demo(args: &Args, dir: &Path, procs: &mut Vec<Guarded>) -> Result<(), Error> {
    // 1. nats-server with JetStream on a free port.
    let mut cmd = Command::new(&args.nats);
    cmd.args(["-a", "127.0.0.1", "-p", "-1", "-js", "-sd"])
        .arg(dir.join("js"))
        .arg("--ports_file_dir")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    procs.push(Guarded::spawn("nats-server", &mut cmd)?);
    let ports = dir.join(format!("nats-server_{}.ports", procs[0].child.id()));
    let url = within("nats-server to start", || {
        let found = std::fs::read_to_string(&ports)
            .ok()
            .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
            .and_then(|v| v["nats"][0].as_str().map(String::from));
        async move { Ok(found) }
    })
    .await?;
    println!("nats-server   {url}");

    // 2. The app: prints what it receives; answers 503 once for sequence 3.
    let app = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let app_addr = app.local_addr()?;
    let seen3 = Arc::new(AtomicBool::new(false));
    let router = axum::Router::new().route(
        "/messages",
        axum::routing::post(move |headers: HeaderMap, body: axum::body::Bytes| {
            let seen3 = seen3.clone();
            async move {
                let h = |n: &str| {
                    headers
                        .get(n)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("")
                        .to_string()
                };
                let seq = h("nats-sequence");
                let status = if seq == "3" && !seen3.swap(true, Ordering::SeqCst) {
                    StatusCode::SERVICE_UNAVAILABLE
                } else {
                    StatusCode::OK
                };
                println!(
                    "app <- seq={seq} delivered={} subject={} body={:?} -> {}",
                    h("nats-delivered"),
                    h("nats-subject"),
                    String::from_utf8_lossy(&body),
                    status.as_u16()
                );
                status
            }
        }),
    );
    tokio::spawn(async move { axum::serve(app, router).await });
    println!("echo app      http://{app_addr}/messages");

    // 3. jetrelay, owning its stream (managed) and its durable consumer.
    let admin = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let config = dir.join("jetrelay.toml");
    let toml = demo_config(
        &url,
        &format!("http://{app_addr}/messages"),
        &admin.to_string(),
    );
    std::fs::write(&config, &toml)?;
    let mut cmd = Command::new(&args.relay);
    cmd.arg("run").arg("--config").arg(&config);
    procs.push(Guarded::spawn("jetrelay", &mut cmd)?);
    println!("jetrelay      admin http://{admin}  (/ready, /metrics)");
    let http = jetrelay::http::client::plain()?;
    let ready = format!("http://{admin}/ready");
    let relay = procs.len() - 1;
    let text = within("jetrelay to be ready", || {
        let alive = procs[relay].alive();
        let get = http.get(&ready).send();
        async move {
            alive?;
            Ok(match get.await {
                Ok(r) if r.status().is_success() => r.text().await.ok(),
                _ => None,
            })
        }
    })
    .await?;
    println!("ready         {text}\n");

    // 4. Publish, and wait until the app has answered 2xx for everything.
    let client = async_nats::connect(&url).await?;
    let js = async_nats::jetstream::new(client);
    for i in 1..=10 {
        js.publish(format!("demo.orders.{i}"), format!("order #{i}").into())
            .await?
            .await?;
    }
    let metrics_url = format!("http://{admin}/metrics");
    let text = within("the app to acknowledge all 10 messages", || {
        let get = http.get(&metrics_url).send();
        async move {
            let text = match get.await {
                Ok(r) => r.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            };
            Ok(text
                .contains("jetrelay_messages_settled_total{action=\"ack\"} 10")
                .then_some(text))
        }
    })
    .await?;
    println!("\nmetrics:");
    for line in text.lines().filter(|l| {
        l.starts_with("jetrelay_messages_")
            || l.starts_with("jetrelay_http_requests_total")
            || l.starts_with("jetrelay_redeliveries")
    }) {
        println!("  {line}");
    }

    // 5. Stop: SIGTERM drains and exits 0.
    let pid = procs[relay].child.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status()?;
    let status = within("jetrelay to stop", || {
        let status = procs[relay].child.try_wait();
        async move { Ok(status?) }
    })
    .await?;
    println!("\njetrelay exited with {status}");
    if !status.success() {
        return Err(format!("jetrelay exited with {status}").into());
    }

    // 6. What next.
    next_steps(args, &toml)
}

/// The config the demo runs jetrelay with.
fn demo_config(nats: &str, app: &str, admin: &str) -> String {
    format!(
        r#"# jetrelay's demo config: a durable consumer on a stream jetrelay creates.
[nats]
servers = ["{nats}"]

[source]
stream = "DEMO"
kind = "durable"
durable = "demo-worker"

[topology]
stream = "managed"                # jetrelay creates DEMO and owns it

[topology.managed_stream]
subjects = ["demo.>"]

[delivery]
retry_initial_ms = 500            # the first retry after half a second (default 1000)

[http]
url = "{app}"

[admin]
listen = "{admin}"

[log]
format = "text"
level = "warn"                    # the demo shows only retries and problems
"#
    )
}

/// Prints the config the demo used, saves a copy with the usual addresses, and the
/// lines to start from.
fn next_steps(args: &Args, used: &str) -> Result<(), Error> {
    println!("\nThe config this demo ran jetrelay with:\n");
    for line in used.lines() {
        println!("    {line}");
    }
    let starter = demo_config(
        "nats://127.0.0.1:4222",
        "http://127.0.0.1:8080/messages",
        "127.0.0.1:9090",
    )
    .replace("jetrelay's demo config", "Started from jetrelay's demo")
    .replace("format = \"text\"", "format = \"json\"")
    .replace(
        "level = \"warn\"                    # the demo shows only retries and problems",
        "level = \"info\"                    # one line per message",
    );
    let relay = shown(&args.relay);
    let Some(save) = &args.save else {
        println!(
            "\nNext: save it, point [nats] and [http] at yours, then: {relay} run --config FILE"
        );
        return Ok(());
    };
    std::fs::create_dir_all(save)?;
    let file = save.join("jetrelay.toml");
    std::fs::write(&file, starter)?;
    let file = shown(&file);
    println!(
        "\nWhat next: {file} is the same config with the usual addresses (NATS on\n\
         127.0.0.1:4222, your app on http://127.0.0.1:8080/messages, admin on 127.0.0.1:9090).\n\
         With a nats-server running ({} -js) and your app listening:\n\n    \
         {relay} check --config {file}   # what it would create; changes nothing\n    \
         {relay} run --config {file}\n\n\
         README.md, \"Quick start\", goes on from there.",
        shown(&args.nats)
    );
    Ok(())
}

/// A path as the user would type it: relative to the current directory when under it.
fn shown(p: &Path) -> String {
    std::env::current_dir()
        .ok()
        .and_then(|cwd| p.strip_prefix(cwd).ok().map(Path::to_path_buf))
        .unwrap_or_else(|| p.to_path_buf())
        .display()
        .to_string()
}

/// Polls `f` every 50 ms until it gives a value (or fails), or fails after
/// [`PATIENCE`].
async fn within<T, F, Fut>(what: &str, mut f: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>, Error>>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Some(v) = f().await? {
            return Ok(v);
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!("gave up waiting for {what} after {PATIENCE:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
