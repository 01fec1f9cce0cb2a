//! The local demo (`scripts/demo`): a nats-server, a small echo app and the jetrelay
//! binary, all on loopback. Publishes messages, shows them arriving at the app (one
//! answered 503 once, to show a delayed retry), prints the metrics, then stops
//! jetrelay with SIGTERM.

#![allow(clippy::print_stdout)] // A demo prints what happens.

use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};

type Error = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let nats_bin = std::env::var("NATS_SERVER_BIN").unwrap_or_else(|_| "nats-server".into());
    let relay_bin =
        std::env::var("DEMO_RELAY_BIN").unwrap_or_else(|_| "target/release/jetrelay".into());
    let dir = tempfile::tempdir()?;

    // 1. nats-server with JetStream on a free port.
    let mut nats = Command::new(&nats_bin)
        .args(["-a", "127.0.0.1", "-p", "-1", "-js", "-sd"])
        .arg(dir.path().join("js"))
        .arg("--ports_file_dir")
        .arg(dir.path())
        .stderr(Stdio::null())
        .spawn()?;
    let ports = dir.path().join(format!("nats-server_{}.ports", nats.id()));
    let url = loop {
        if let Ok(text) = std::fs::read_to_string(&ports) {
            let v: serde_json::Value = serde_json::from_str(&text)?;
            if let Some(u) = v["nats"][0].as_str() {
                break u.to_string();
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    println!("nats-server   {url}");

    // 2. The app: prints what it receives; answers 503 once for sequence 3.
    let app = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let app_addr = app.local_addr()?;
    let seen3 = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
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
                let status = if seq == "3" && !seen3.swap(true, std::sync::atomic::Ordering::SeqCst)
                {
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
    let admin = TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let config = dir.path().join("jetrelay.toml");
    std::fs::write(
        &config,
        format!(
            "[nats]\nservers = [\"{url}\"]\n\
             [source]\nstream = \"DEMO\"\nkind = \"durable\"\ndurable = \"demo-worker\"\n\
             [topology]\nstream = \"managed\"\n[topology.managed_stream]\nsubjects = [\"demo.>\"]\n\
             [delivery]\nretry_initial_ms = 500\n\
             [http]\nurl = \"http://{app_addr}/messages\"\n\
             [admin]\nlisten = \"{admin}\"\n[log]\nformat = \"text\"\nlevel = \"warn\"\n"
        ),
    )?;
    let mut relay = Command::new(&relay_bin)
        .arg("run")
        .arg("--config")
        .arg(&config)
        .spawn()?;
    println!("jetrelay      admin http://{admin}  (/ready, /metrics)");
    let http = reqwest::Client::new();
    let ready = format!("http://{admin}/ready");
    loop {
        if let Some(status) = relay.try_wait()? {
            return Err(format!("jetrelay exited with {status}").into());
        }
        if let Ok(r) = http.get(&ready).send().await
            && r.status().is_success()
        {
            println!("ready         {}", r.text().await?);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // 4. Publish, and wait until the app has answered 2xx for everything.
    let client = async_nats::connect(&url).await?;
    let js = async_nats::jetstream::new(client);
    for i in 1..=10 {
        js.publish(format!("demo.orders.{i}"), format!("order #{i}").into())
            .await?
            .await?;
    }
    let metrics_url = format!("http://{admin}/metrics");
    loop {
        let text = http.get(&metrics_url).send().await?.text().await?;
        if text.contains("jetrelay_messages_settled_total{action=\"ack\"} 10") {
            println!("\nmetrics:");
            for line in text.lines().filter(|l| {
                l.starts_with("jetrelay_messages_")
                    || l.starts_with("jetrelay_http_requests_total")
                    || l.starts_with("jetrelay_redeliveries")
            }) {
                println!("  {line}");
            }
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // 5. Stop: SIGTERM drains and exits 0.
    Command::new("kill")
        .args(["-TERM", &relay.id().to_string()])
        .status()?;
    let status = relay.wait()?;
    println!("\njetrelay exited with {status}");
    nats.kill()?;
    nats.wait()?;
    Ok(())
}
