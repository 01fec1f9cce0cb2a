//! Phase e: the surfaces an app and the world reach, together and under load.
//!
//! - Two durables of one input stream, `e1` (batch delivery, its answers in odd
//!   shapes: results shuffled, ids of no message, keys beside `results`, a retry with
//!   a huge `retry_after_ms`, now and then an answer that does not parse) and `e2`
//!   (one message a request), each answering every input with one output into one
//!   shared stream: `out.<instance>.<id>`.
//! - Poison inputs (about 3%): the app dead-letters them (`dlq` in a batch, 422 one at
//!   a time) unless they are a replay; `jetrelay dlq replay --delete` runs every 10 s
//!   during delivery and again at the end, so each letter comes back once, to both
//!   consumers.
//! - The publish endpoint of `e2` under a flood (8 clients), one request in ten
//!   hostile (a form's type, a browser's `Origin`, a document that is not JSON, a
//!   jetrelay id), the others raw publishes retried until they answer 200.
//!
//! Accounted at the end: every input acked by both consumers; per consumer one output
//! per input, two per poison input (its two letters' replays); the DLQ empty; as many
//! flood messages stored as were answered 200; every hostile request refused.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::{Value, json};

use super::{
    Clock, Ctx, Error, PhaseResult, Publisher, Relay, RelaySpec, Server, Task, connect,
    create_stream, durable_source, free_port, secs, unit, wait_until,
};

/// The phase's title in the report.
pub(crate) const TITLE: &str = "outputs of two consumers into one stream, odd batch answers, DLQ replays, the endpoint flooded";

/// One in this many inputs is poison.
const POISON_EVERY: u64 = 33;
const IN: &str = "SOAK_E";
const OUT: &str = "SOAK_E_OUT";
const DLQ: &str = "SOAK_E_DLQ";

#[derive(Default)]
struct Shapes {
    requests: u64,
    batches: u64,
    unparsable: u64,
    shuffled_with_unknown: u64,
    extra_keys: u64,
    huge_retry: u64,
    dead_lettered: u64,
}

struct AppState {
    shapes: Mutex<Shapes>,
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> &'a str {
    h.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
}

/// Whether a message is poison: its body says so and it is not a replay.
fn poison(body: &str, msg_id: &str) -> bool {
    body.starts_with('p') && !msg_id.starts_with("jetrelay-replay:")
}

fn id_of(body: &str) -> &str {
    body.trim_start_matches('p')
}

/// One message a request: a publishing 200, or 422 for poison.
async fn single(State(app): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> Response {
    app.shapes.lock().unwrap().requests += 1;
    let text = String::from_utf8_lossy(&body).into_owned();
    if poison(&text, header(&headers, "nats-msg-id")) {
        app.shapes.lock().unwrap().dead_lettered += 1;
        return StatusCode::UNPROCESSABLE_ENTITY.into_response();
    }
    let instance = header(&headers, "x-instance");
    let doc = json!({"publish": [{
        "subject": format!("out.{instance}.{}", id_of(&text)),
        "data": format!("{instance}:{}:{}", id_of(&text), header(&headers, "nats-sequence")),
    }]});
    (
        [("content-type", "application/vnd.jetrelay.publish+json")],
        doc.to_string(),
    )
        .into_response()
}

/// A batch: each message its verdict, the answer in one of several shapes.
async fn batch(State(app): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> Response {
    let instance = header(&headers, "x-instance").to_string();
    let Ok(doc) = serde_json::from_slice::<Value>(&body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let x = unit();
    let mut shapes = app.shapes.lock().unwrap();
    shapes.batches += 1;
    if x < 0.05 {
        shapes.unparsable += 1;
        return (StatusCode::OK, "{\"results\": [ this is not JSON").into_response();
    }
    let messages = doc["messages"].as_array().cloned().unwrap_or_default();
    let mut results = Vec::new();
    let mut retried = false;
    for m in &messages {
        let text = m["data"].as_str().unwrap_or("");
        let msg_id = m["msg_id"].as_str().unwrap_or("");
        if poison(text, msg_id) {
            shapes.dead_lettered += 1;
            results.push(json!({"id": m["id"], "action": "dlq"}));
        } else if !retried && (0.05..0.08).contains(&x) {
            retried = true;
            shapes.huge_retry += 1;
            results.push(json!({"id": m["id"], "action": "retry", "retry_after_ms": u64::MAX / 2}));
        } else {
            results.push(json!({"id": m["id"], "action": "ack", "publish": [{
                "subject": format!("out.{instance}.{}", id_of(text)),
                "data": format!("{instance}:{}:{}", id_of(text), m["sequence"]),
            }]}));
        }
    }
    let answer = if (0.08..0.14).contains(&x) {
        shapes.shuffled_with_unknown += 1;
        results.reverse();
        results.push(json!({"id": "NOPE:1", "action": "term"}));
        json!({ "results": results })
    } else if (0.14..0.20).contains(&x) {
        shapes.extra_keys += 1;
        json!({"note": {"nested": [1, 2, 3]}, "results": results, "more": null})
    } else {
        json!({ "results": results })
    };
    ([("content-type", "application/json")], answer.to_string()).into_response()
}

#[derive(Default)]
struct Flood {
    stored: AtomicU64,
    retries: AtomicU64,
    hostile: AtomicU64,
    hostile_refused: AtomicU64,
    hostile_wrongly_taken: Mutex<Vec<String>>,
}

/// 8 clients on the endpoint until `stop`: raw publishes to `out.flood.<n>` (retried
/// with the same id until 200), one request in ten hostile instead.
fn flood(port: u16, stop: Arc<AtomicBool>, f: Arc<Flood>) -> Vec<Task<()>> {
    let next = Arc::new(AtomicU64::new(0));
    (0..8)
        .map(|_| {
            let (stop, f, next) = (stop.clone(), f.clone(), next.clone());
            Task(tokio::spawn(async move {
                let http = reqwest::Client::builder()
                    .timeout(Duration::from_secs(10))
                    .build()
                    .expect("an HTTP client");
                let base = format!("http://127.0.0.1:{port}/v1/publish");
                while !stop.load(Ordering::Relaxed) {
                    if unit() < 0.1 {
                        f.hostile.fetch_add(1, Ordering::Relaxed);
                        let n = next.fetch_add(1, Ordering::Relaxed);
                        let (what, req) = match n % 4 {
                            0 => (
                                "a form's type",
                                http.post(format!("{base}/out.flood.h{n}"))
                                    .header("content-type", "text/plain")
                                    .body("x"),
                            ),
                            1 => (
                                "a browser's Origin",
                                http.post(format!("{base}/out.flood.h{n}"))
                                    .header("content-type", "application/json")
                                    .header("origin", "https://evil.example")
                                    .body("x"),
                            ),
                            2 => (
                                "a document that is not JSON",
                                http.post(&base)
                                    .header("content-type", "application/json")
                                    .body("{\"publish\": ["),
                            ),
                            _ => (
                                "a jetrelay id",
                                http.post(format!("{base}/out.flood.h{n}"))
                                    .header("content-type", "application/json")
                                    .header("nats-msg-id", "jetrelay:SOAK_E:e1:1:0")
                                    .body("x"),
                            ),
                        };
                        match req.send().await {
                            Ok(r) if r.status().is_success() => {
                                f.hostile_wrongly_taken.lock().unwrap().push(what.into());
                            }
                            Ok(_) => {
                                f.hostile_refused.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(_) => {}
                        }
                        continue;
                    }
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    loop {
                        let r = http
                            .post(format!("{base}/out.flood.{n}"))
                            .header("content-type", "application/octet-stream")
                            .header("nats-msg-id", format!("flood-{n}"))
                            .body(n.to_string())
                            .send()
                            .await;
                        if r.is_ok_and(|r| r.status().is_success()) {
                            f.stored.fetch_add(1, Ordering::Relaxed);
                            break;
                        }
                        f.retries.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }))
        })
        .collect()
}

/// `jetrelay dlq replay <DLQ> --delete`: its summary line.
async fn replay(ctx: &Ctx, url: &str) -> String {
    let out = tokio::process::Command::new(&ctx.relay_bin)
        .args(["dlq", "replay", DLQ, "--delete", "--server", url])
        .output()
        .await;
    match out {
        Ok(o) => {
            let text = String::from_utf8_lossy(&o.stdout);
            let last = text.lines().last().unwrap_or("").to_string();
            if o.status.success() {
                last
            } else {
                format!(
                    "FAILED (exit {:?}): {last} {}",
                    o.status.code(),
                    String::from_utf8_lossy(&o.stderr).trim()
                )
            }
        }
        Err(e) => format!("FAILED to run: {e}"),
    }
}

async fn messages(js: &jetstream::Context, stream: &str) -> Option<u64> {
    Some(
        js.get_stream(stream)
            .await
            .ok()?
            .cached_info()
            .state
            .messages,
    )
}

/// Every message of the output stream: subject → how many.
async fn outputs(js: &jetstream::Context) -> Result<HashMap<String, u64>, Error> {
    let stream = js.get_stream(OUT).await?;
    let total = stream.cached_info().state.messages;
    let consumer = stream
        .create_consumer(jetstream::consumer::pull::OrderedConfig::default())
        .await?;
    let mut msgs = consumer.messages().await?;
    let mut by_subject = HashMap::new();
    let mut seen = 0;
    while seen < total {
        let Some(m) = tokio::time::timeout(Duration::from_secs(10), msgs.next())
            .await
            .ok()
            .flatten()
        else {
            break;
        };
        let m = m?;
        *by_subject.entry(m.subject.to_string()).or_insert(0) += 1;
        seen += 1;
    }
    Ok(by_subject)
}

pub(crate) async fn phase(ctx: &Ctx) -> Result<PhaseResult, Error> {
    let dir = ctx.dir.join("e");
    std::fs::create_dir_all(&dir)?;
    say!("phase e: {TITLE}");
    let server = Server::start(&ctx.nats_bin, dir.join("nats"), free_port(), vec![]).await?;
    let js = connect(&[server.url()]).await?;
    create_stream(
        &js,
        jetstream::stream::Config {
            name: IN.into(),
            subjects: vec!["soake.*".into()],
            ..Default::default()
        },
    )
    .await?;
    create_stream(
        &js,
        jetstream::stream::Config {
            name: OUT.into(),
            subjects: vec!["out.>".into()],
            allow_atomic_publish: true,
            storage: jetstream::stream::StorageType::Memory,
            duplicate_window: Duration::from_secs(300),
            ..Default::default()
        },
    )
    .await?;
    create_stream(
        &js,
        jetstream::stream::Config {
            name: DLQ.into(),
            subjects: vec!["dlq.soake".into()],
            allow_direct: true,
            ..Default::default()
        },
    )
    .await?;

    let state = Arc::new(AppState {
        shapes: Mutex::new(Shapes::default()),
    });
    let app_port = free_port();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", app_port)).await?;
    let router = axum::Router::new()
        .route("/single", axum::routing::post(single))
        .route("/batch", axum::routing::post(batch))
        .with_state(state.clone());
    let _app = Task(tokio::spawn(async move {
        axum::serve(listener, router).await.ok();
    }));
    let publish_port = free_port();
    let common = "[publish]\nallowed_subjects = [\"out.>\"]\n";
    let dlq = "[dlq]\nsubject = \"dlq.soake\"\n";
    let servers = [server.url()];
    let mut relays = Vec::new();
    let mut notes = Vec::new();
    // A retry's Retry-After is capped low: the huge ones would hold the drain.
    let capped = "retry_after_max_ms = 2000\n";
    for (tag, durable, path, delivery, extra) in [
        (
            1u8,
            "e1",
            "batch",
            format!("{capped}batch_size = 20\nbatch_wait_ms = 20\n"),
            format!("{common}{dlq}"),
        ),
        (
            2u8,
            "e2",
            "single",
            capped.to_string(),
            format!("{common}listen = \"127.0.0.1:{publish_port}\"\n{dlq}"),
        ),
    ] {
        let spec = RelaySpec {
            servers: &servers,
            source: durable_source(IN, durable),
            ordering: "none",
            app_url: format!("http://127.0.0.1:{app_port}/{path}"),
            delivery,
            extra,
        };
        let mut r = Relay::start(&dir, &ctx.relay_bin, &format!("relay{tag}"), tag, &spec).await?;
        r.wait_ready(Duration::from_secs(60), &mut notes).await;
        relays.push(r);
    }
    let clock = Clock::new(ctx.scale);
    let publisher = Publisher::start(js.clone(), "e", ctx.rate, |id| {
        format!("soake.k{}", id % 16)
    });
    // The publisher's bodies are the ids; every POISON_EVERY-th is published again as
    // poison under its own id space (p<id>), to the same subjects.
    let poisoned = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let poisoner = {
        let (js, stop, poisoned) = (js.clone(), stop.clone(), poisoned.clone());
        let every = Duration::from_secs_f64(POISON_EVERY as f64 / ctx.rate.max(1) as f64);
        Task(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(every).await;
                let id = 1_000_000 + n;
                let mut h = async_nats::HeaderMap::new();
                h.insert("Nats-Msg-Id", format!("e-poison-{n}").as_str());
                if let Ok(ack) = js
                    .publish_with_headers(format!("soake.k{}", n % 16), h, format!("p{id}").into())
                    .await
                    && ack.await.is_ok()
                {
                    poisoned.lock().unwrap().push(id);
                }
                n += 1;
            }
        }))
    };
    let flood_stats = Arc::new(Flood::default());
    let flooders = flood(publish_port, stop.clone(), flood_stats.clone());
    let mut replays = Vec::new();
    for t in [10.0, 20.0, 30.0, 40.0, 50.0] {
        clock.at(t).await;
        replays.push(replay(ctx, &server.url()).await);
        say!(
            "  replay at {t:.0} s: {}",
            replays.last().map_or("", String::as_str)
        );
    }
    clock.at(60.0).await;
    stop.store(true, Ordering::Relaxed);
    // Each client ends after its request in progress: what it counted is what it got.
    for mut client in flooders {
        (&mut client.0).await.ok();
    }
    drop(poisoner);
    let stats = publisher.finish().await;
    let poisoned = poisoned.lock().unwrap().clone();
    say!(
        "  publishing stopped: {} inputs, {} poison; replaying the rest of the DLQ",
        stats.published.len(),
        poisoned.len()
    );
    // Until nothing is left to do: the consumers drained, the DLQ empty.
    let started = Instant::now();
    let late = Mutex::new(Vec::new());
    let settled = wait_until(Duration::from_secs(180), || async {
        let r = replay(ctx, &server.url()).await;
        if !r.starts_with("selected 0,") {
            say!("  replay: {r}");
            late.lock().unwrap().push(r);
        }
        super::outstanding(&js, IN).await == Some(0) && messages(&js, DLQ).await == Some(0)
    })
    .await;
    replays.extend(late.into_inner().unwrap_or_default());
    if !settled {
        notes.push(format!(
            "not settled 180 s after publishing stopped: outstanding {:?}, letters {:?}",
            super::outstanding(&js, IN).await,
            messages(&js, DLQ).await
        ));
    }
    let drain = secs(started.elapsed());
    for r in &mut relays {
        if let Some(problem) = r.stop().await {
            notes.push(problem);
        }
    }

    // The accounting.
    let by_subject = outputs(&js).await?;
    let mut expected: BTreeMap<String, u64> = BTreeMap::new();
    for tag in [1, 2] {
        for id in &stats.published {
            expected.insert(format!("out.{tag}.{id}"), 1);
        }
        for id in &poisoned {
            expected.insert(format!("out.{tag}.{id}"), 2);
        }
    }
    let (mut missing, mut extra, mut complete) = (Vec::new(), 0usize, 0usize);
    for (subject, want) in &expected {
        let got = by_subject.get(subject).copied().unwrap_or(0);
        if got < *want {
            missing.push(subject.clone());
        } else if got > *want {
            extra += 1;
        } else {
            complete += 1;
        }
    }
    // Inputs whose outputs are all there, for both consumers.
    let inputs = stats.published.len() + poisoned.len();
    let incomplete: std::collections::HashSet<&str> = missing
        .iter()
        .filter_map(|s| s.rsplit('.').next())
        .collect();
    let delivered = inputs - incomplete.len();
    let flood_stored: u64 = by_subject
        .iter()
        .filter(|(s, _)| s.starts_with("out.flood."))
        .map(|(_, n)| *n)
        .sum();
    let unexpected = by_subject
        .keys()
        .filter(|s| !s.starts_with("out.flood.") && !expected.contains_key(*s))
        .count();
    let f = &flood_stats;
    let answered = f.stored.load(Ordering::Relaxed);
    if flood_stored != answered {
        notes.push(format!(
            "the endpoint answered 200 for {answered} flood messages, and {flood_stored} are stored"
        ));
    }
    let taken = f.hostile_wrongly_taken.lock().unwrap().clone();
    if !taken.is_empty() {
        notes.push(format!("hostile requests taken: {taken:?}"));
    }
    let shapes = state.shapes.lock().unwrap();
    let details = vec![
        format!(
            "inputs: {} published ({} abandoned) plus {} poison; each consumer's outputs as expected for {} of {} (input, consumer) pairs, {} missing, {} stored more than once, {} of no input",
            stats.published.len(),
            stats.abandoned.len(),
            poisoned.len(),
            complete,
            expected.len(),
            missing.len(),
            extra,
            unexpected
        ),
        format!(
            "app: {} single requests, {} batches: {} unparsable, {} shuffled with an unknown id, {} with keys beside results, {} with a retry of retry_after_ms 2^63; {} dead-lettered answers",
            shapes.requests,
            shapes.batches,
            shapes.unparsable,
            shapes.shuffled_with_unknown,
            shapes.extra_keys,
            shapes.huge_retry,
            shapes.dead_lettered
        ),
        format!(
            "DLQ replays during and after delivery ({}): {}",
            replays.len(),
            replays.join("; ")
        ),
        format!(
            "endpoint flood: {answered} publishes answered 200 ({} retries), {flood_stored} stored; {} hostile requests, {} refused, {} taken",
            f.retries.load(Ordering::Relaxed),
            f.hostile.load(Ordering::Relaxed),
            f.hostile_refused.load(Ordering::Relaxed),
            taken.len()
        ),
        format!("drain after publishing stopped {drain:.1} s"),
    ];
    drop(shapes);
    let lost = incomplete.len() + usize::from(flood_stored < answered);
    say!(
        "  e: {} pairs complete of {}, {} missing, {} duplicated; flood {answered} answered, {flood_stored} stored",
        complete,
        expected.len(),
        missing.len(),
        extra
    );
    Ok(PhaseResult {
        key: "e".into(),
        title: TITLE.into(),
        faults_summary: "hostile and odd input, no fault".into(),
        took: secs(clock.t0.elapsed()),
        published: inputs,
        abandoned: stats.abandoned.len(),
        delivered,
        lost,
        missing: Vec::new(),
        dup_ids: extra,
        dup_answers: extra as u64,
        unexpected,
        details: details
            .into_iter()
            .chain(missing.iter().take(10).map(|m| format!("missing: {m}")))
            .collect(),
        notes,
        ..PhaseResult::default()
    })
}
