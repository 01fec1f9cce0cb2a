//! The scaler's benchmark (`bench/scaler`): one `jetrelay scaler` answering for many
//! sources, the time per `/v1/lag`. Starts nats-server (file store), one stream
//! (`lag.>`) and `--sources` durable sources, each filtering `lag.<i>.>` with
//! `--per` messages; the first `--missing` of them have no consumer yet (their lag is
//! the stream's messages under their filter, a stream info with `subjects_filter`),
//! the others have theirs. Then, against the release binary:
//!
//!   cold       GET /v1/lag once the one-second cache has run out: every source read
//!              from NATS (consumer info, or stream info by filter), 32 at once
//!   cached     GET /v1/lag again within the second: no NATS request
//!   one cold   GET /v1/lag?source=<name> once its read has run out
//!   pollers    every source asked by name at once (a ScaledObject per source
//!              polling together), cold
//!
//! Checks that the sum is `sources x per`, prints a markdown report and writes it to
//! `<out>/scaler-<unix-seconds>.md`. Never fails on timing.
//!
//!   scaler --nats-server=PATH --relay=PATH [--out=DIR] [--sources=100] [--missing=10]
//!          [--per=100] [--rounds=20]

use std::time::{Duration, Instant};

use async_nats::jetstream;
use jetrelay_bench::{Args, Env, Error, free_port, machine, save_report, spread, stop};

const STREAM: &str = "LAG";

/// The time of one GET, checked to be 200; the body.
async fn timed(http: &reqwest::Client, url: &str) -> Result<(f64, String), Error> {
    let t = Instant::now();
    let r = http.get(url).send().await?;
    let code = r.status().as_u16();
    let body = r.text().await?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    if code != 200 {
        return Err(format!("{url}: {code} {body}").into());
    }
    Ok((ms, body))
}

/// The `"lag"` of a JSON answer.
fn lag_of(body: &str) -> u64 {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["lag"].as_u64())
        .unwrap_or(u64::MAX)
}

fn row(what: &str, ms: &[f64]) -> String {
    let (median, min, max) = spread(ms, |x| *x);
    format!(
        "| {what} | {} | {median:.2} | {min:.2} | {max:.2} |\n",
        ms.len()
    )
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args = Args::parse();
    let sources: usize = args.num("sources", 100)?;
    let missing: usize = args.num("missing", 10)?.min(sources);
    let per: usize = args.num("per", 100)?;
    let rounds: usize = args.num("rounds", 20)?;
    let env = Env::start(
        args.required("nats-server")?,
        args.required("relay")?.into(),
    )
    .await?;
    let stream = env
        .js
        .create_stream(jetstream::stream::Config {
            name: STREAM.into(),
            subjects: vec!["lag.>".into()],
            ..Default::default()
        })
        .await?;
    eprintln!("{sources} sources, {missing} without a consumer, {per} messages each");
    for i in 0..sources {
        // A source's messages, then their acks (the client bounds the acks in flight).
        let mut acks = Vec::with_capacity(per);
        for m in 0..per {
            acks.push(env.js.publish(format!("lag.{i}.m{m}"), "x".into()).await?);
        }
        for ack in acks {
            ack.await?;
        }
    }
    let mut config = format!(
        "[nats]\nservers = [\"{}\"]\n[http]\nurl = \"http://127.0.0.1:9\"\n[log]\nlevel = \"warn\"\n",
        env.nats_url
    );
    for i in 0..sources {
        if i >= missing {
            stream
                .create_consumer(jetstream::consumer::pull::Config {
                    durable_name: Some(format!("d{i}")),
                    filter_subject: format!("lag.{i}.>"),
                    ack_policy: jetstream::consumer::AckPolicy::Explicit,
                    ..Default::default()
                })
                .await?;
        }
        config.push_str(&format!(
            "[sources.s{i}]\nstream = \"{STREAM}\"\nkind = \"durable\"\ndurable = \"d{i}\"\nfilter_subjects = [\"lag.{i}.>\"]\n"
        ));
    }
    let path = env.dir.join("scaler.toml");
    std::fs::write(&path, config)?;
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let child = tokio::process::Command::new(&env.relay_bin)
        .arg("scaler")
        .arg("--config")
        .arg(&path)
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while http
        .get(format!("{base}/readyz"))
        .send()
        .await
        .map_or(true, |r| r.status() != 200)
    {
        if Instant::now() > deadline {
            return Err("the scaler never became ready".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let want = (sources * per) as u64;
    let all = format!("{base}/v1/lag");
    let expire = || tokio::time::sleep(Duration::from_millis(1100));
    let (mut cold, mut cached, mut one, mut pollers) = (vec![], vec![], vec![], vec![]);
    for _ in 0..rounds {
        expire().await;
        let (ms, body) = timed(&http, &all).await?;
        if lag_of(&body) != want {
            return Err(format!("lag {} != {want}: {body}", lag_of(&body)).into());
        }
        cold.push(ms);
        cached.push(timed(&http, &all).await?.0);
        expire().await;
        one.push(
            timed(&http, &format!("{all}?source=s{}", sources - 1))
                .await?
                .0,
        );
        expire().await;
        let t = Instant::now();
        let asks = (0..sources).map(|i| {
            let (http, url) = (http.clone(), format!("{all}?source=s{i}"));
            async move { timed(&http, &url).await }
        });
        for r in futures::future::join_all(asks).await {
            r?;
        }
        pollers.push(t.elapsed().as_secs_f64() * 1e3);
    }
    stop(child).await;
    let mut md = format!(
        "# jetrelay scaler: time per /v1/lag\n\n{}; nats-server {}, loopback, file store.\n\
         {sources} durable sources on one stream ({missing} without a consumer: counted \
         by stream info with subjects_filter), {per} messages each; lag {want}. \
         {rounds} rounds; the cache lasts 1 s.\n\n\
         | request | n | median ms | min ms | max ms |\n|---|---|---|---|---|\n",
        machine(),
        env.nats_version
    );
    md.push_str(&row(
        &format!("/v1/lag, cold ({sources} sources read)"),
        &cold,
    ));
    md.push_str(&row("/v1/lag, within the second (cached)", &cached));
    md.push_str(&row("/v1/lag?source=NAME, cold", &one));
    md.push_str(&row(
        &format!("{sources} pollers at once, one source each, cold (all answered)"),
        &pollers,
    ));
    println!("{md}");
    save_report(&args, "scaler-", &md)?;
    env.close().await;
    Ok(())
}
