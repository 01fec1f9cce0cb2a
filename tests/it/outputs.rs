//! The outputs of answers end to end: an answer that publishes stores its outputs (as one
//! atomic batch), exactly once, before the input is acked; failures lose nothing;
//! refusals are permanent; ordered modes keep outputs in input order per key.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use async_nats::jetstream;
use serde_json::json;

use crate::support::app::Recorded;
use crate::support::daemon::Daemon;
use crate::support::peer::ReadmeApp;
use crate::support::*;

const T: Duration = Duration::from_secs(30);
const PUBLISH_TYPE: &str = "application/vnd.jetrelay.publish+json";

/// A 200 that publishes `outputs` (subject, data).
fn publishing(outputs: &[(String, String)]) -> Reply {
    let list: Vec<_> = outputs
        .iter()
        .map(|(subject, data)| json!({"subject": subject, "data": data, "headers": {"X-From": "app"}}))
        .collect();
    Reply::status(200)
        .header("Content-Type", PUBLISH_TYPE)
        .body(json!({ "publish": list }).to_string())
}

/// Three outputs per input: `<payload>-0..2` to `out.<seq>`.
fn three_outputs(r: &Recorded) -> Reply {
    let payload = String::from_utf8_lossy(&r.body).into_owned();
    let subject = format!("out.{}", r.seq());
    publishing(
        &(0..3)
            .map(|i| (subject.clone(), format!("{payload}-{i}")))
            .collect::<Vec<_>>(),
    )
}

/// One stored message: its sequence, id, subject, payload and time.
#[derive(Debug, Clone)]
struct Stored {
    seq: u64,
    id: String,
    subject: String,
    payload: String,
    at: time::OffsetDateTime,
}

async fn stored(js: &jetstream::Context, name: &str) -> Vec<Stored> {
    let mut s = js.get_stream(name).await.unwrap();
    let last = s.info().await.unwrap().state.last_sequence;
    let mut out = Vec::new();
    for seq in 1..=last {
        let Ok(m) = s.get_raw_message(seq).await else {
            continue;
        };
        out.push(Stored {
            seq,
            id: m
                .headers
                .get("Nats-Msg-Id")
                .map(|v| v.as_str().to_string())
                .unwrap_or_default(),
            subject: m.subject.to_string(),
            payload: String::from_utf8_lossy(&m.payload).into_owned(),
            at: m.time,
        });
    }
    out
}

fn publish_config(env: &Env, app: &MockApp, extra: &str) -> jetrelay::config::Config {
    durable_config(&env.nats, app, &env.stream, &env.durable, extra)
}

#[tokio::test]
async fn an_answer_publishes_its_outputs_atomically_before_the_input_is_acked() {
    let app = MockApp::start(|r, _| three_outputs(r)).await;
    let env = Env::start(&["in.>"]).await;
    let out = unique("OUT");
    atomic_stream(&env.js, &out, &["out.>"], true).await;
    let extra = "[publish]\nallowed_subjects = [\"out.>\"]\n";
    let relay = Relay::ready(publish_config(&env, &app, extra)).await;
    publish(&env.js, "in.x", 5).await;
    eventually("all acked", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;

    let got = stored(&env.js, &out).await;
    assert_eq!(got.len(), 15);
    for input in 1..=5u64 {
        let mine: Vec<&Stored> = got
            .iter()
            .filter(|s| s.subject == format!("out.{input}"))
            .collect();
        let ids: Vec<&str> = mine.iter().map(|s| s.id.as_str()).collect();
        let want: Vec<String> = (0..3)
            .map(|i| format!("jetrelay:{}:{}:{input}:{i}", env.stream, env.durable))
            .collect();
        assert_eq!(
            ids, want,
            "input {input}: deterministic ids, in answer order"
        );
        assert_eq!(
            mine[2].seq - mine[0].seq,
            2,
            "one batch: consecutive sequences"
        );
        assert_eq!(mine[0].payload, format!("m{}-0", input - 1));
    }
    let first = env.js.get_stream(&out).await.unwrap();
    let m = first.get_raw_message(1).await.unwrap();
    assert_eq!(
        m.headers.get("X-From").map(|v| v.as_str().to_string()),
        Some("app".into()),
        "the answer's headers go with the output"
    );
    let metric = |s: &'static str| relay.metric(s);
    assert_eq!(
        metric("jetrelay_published_total{via=\"answer\"}").await,
        15.0
    );
    assert_eq!(
        metric("jetrelay_messages_settled_total{action=\"ack\"}").await,
        5.0
    );
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn outputs_stored_before_a_crash_are_not_stored_again_and_the_input_is_acked() {
    // The outputs of input 1 were committed, and the process died before its ack:
    // the redelivered input's outputs carry the same ids, and are known stored.
    let app = MockApp::start(|r, _| three_outputs(r)).await;
    let env = Env::start(&["in.>"]).await;
    let out = unique("OUT");
    atomic_stream(&env.js, &out, &["out.>"], true).await;
    publish(&env.js, "in.x", 1).await;
    let outputs = jetrelay::nats::Nats::connect(
        &jetrelay::daemon::settings::connection(&jetrelay::config::NatsConfig {
            servers: vec![env.nats.url().to_string()],
            ..Default::default()
        }),
        false,
    )
    .await
    .unwrap()
    .outputs();
    let before: Vec<jetrelay::outputs::Output> = (0..3)
        .map(|i| jetrelay::outputs::Output {
            subject: "out.1".into(),
            headers: vec![(
                "Nats-Msg-Id".into(),
                format!("jetrelay:{}:{}:1:{i}", env.stream, env.durable),
            )],
            payload: format!("m0-{i}").into(),
        })
        .collect();
    outputs.publish(&before, true).await.unwrap();

    let extra = "[publish]\nallowed_subjects = [\"out.>\"]\n";
    let relay = Relay::ready(publish_config(&env, &app, extra)).await;
    eventually("acked", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    assert_eq!(app.arrivals(), 1);
    assert_eq!(stored(&env.js, &out).await.len(), 3, "stored once");
    assert_eq!(
        relay
            .metric("jetrelay_published_total{via=\"answer\"}")
            .await,
        0.0,
        "nothing new was stored"
    );
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn sigkill_between_answers_under_load_stores_every_output_exactly_once() {
    let app = MockApp::start(|r, _| three_outputs(r).after(Duration::from_millis(3))).await;
    let env = Env::start(&["in.>"]).await;
    let out = unique("OUT");
    atomic_stream(&env.js, &out, &["out.>"], true).await;
    let total = 300u64;
    publish(&env.js, "in.x", total as usize).await;
    let config = format!(
        "[nats]\nservers = \"{}\"\n[source]\nstream = \"{}\"\nkind = \"durable\"\ndurable = \"{}\"\n\
         [http]\nurl = \"{}\"\ntimeout_ms = 1000\n[admin]\nlisten = \"127.0.0.1:0\"\n\
         [consumer]\nack_wait_ms = 2000\n[delivery]\nmax_in_flight = 16\n\
         [publish]\nallowed_subjects = [\"out.>\"]\n",
        env.nats.url(),
        env.stream,
        env.durable,
        app.url()
    );
    // Killed twice mid-stream, then left to finish.
    for round in 1..=2u64 {
        let mut d = Daemon::start(&config).await;
        let target = round as usize * 80;
        eventually("progress", T, || async { app.arrivals() >= target }).await;
        d.signal("KILL");
        d.wait_exit(T).await;
    }
    let _last = Daemon::start(&config).await;
    eventually("every input acked", Duration::from_secs(60), || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;

    let got = stored(&env.js, &out).await;
    let ids: BTreeSet<&str> = got.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids.len(), got.len(), "no output stored twice");
    assert_eq!(got.len() as u64, 3 * total, "every output stored");
    let mut by_input: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for s in &got {
        by_input.entry(&s.subject).or_default().push(s.seq);
    }
    for (subject, seqs) in by_input {
        assert_eq!(seqs.len(), 3, "{subject}");
        assert_eq!(
            seqs[2] - seqs[0],
            2,
            "{subject}: one atomic batch: {seqs:?}"
        );
    }
    assert!(
        app.arrivals() as u64 > total,
        "the kills made redeliveries (else this test shows nothing)"
    );
}

#[tokio::test]
async fn a_failed_publish_retries_the_input_and_loses_nothing() {
    // No stream captures the outputs at first: the input is retried, never acked;
    // once the stream exists, its outputs are stored and it is acked.
    let app = MockApp::start(|r, _| three_outputs(r)).await;
    let env = Env::start(&["in.>"]).await;
    let extra = "[publish]\nallowed_subjects = [\"out.>\"]\n[delivery]\nretry_initial_ms = 100\nretry_max_ms = 200\n";
    let relay = Relay::ready(publish_config(&env, &app, extra)).await;
    publish(&env.js, "in.x", 1).await;
    eventually("tried twice", T, || async { app.arrivals() >= 2 }).await;
    let info = consumer_info(&env.js, &env.stream, &env.durable)
        .await
        .unwrap();
    assert_eq!(info.ack_floor.stream_sequence, 0, "nothing acked");
    assert!(
        relay
            .metric("jetrelay_publish_failures_total{reason=\"no_stream\"}")
            .await
            >= 1.0
    );
    let out = unique("OUT");
    atomic_stream(&env.js, &out, &["out.>"], true).await;
    eventually("acked", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    assert_eq!(stored(&env.js, &out).await.len(), 3);
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn outputs_that_cannot_be_published_fail_the_input_for_good() {
    // By payload: a subject not allowed, too many messages, a document that does not
    // parse. Each is dead-lettered (reason publish_refused), nothing is published.
    let app = MockApp::start(|r, _| match r.body.as_ref() {
        b"elsewhere" => publishing(&[("secret.x".into(), "x".into())]),
        b"many" => publishing(
            &(0..5)
                .map(|i| ("out.x".to_string(), i.to_string()))
                .collect::<Vec<_>>(),
        ),
        _ => Reply::status(200)
            .header("Content-Type", PUBLISH_TYPE)
            .body("{\"publish\": \"no\"}"),
    })
    .await;
    let env = Env::start(&["in.>"]).await;
    let out = unique("OUT");
    atomic_stream(&env.js, &out, &["out.>", "secret.>"], true).await;
    let dlq = unique("DLQ");
    create_stream(&env.js, &dlq, &[&format!("dlq.{}", env.stream)]).await;
    for body in ["elsewhere", "many", "broken"] {
        env.js
            .publish("in.x", body.into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let extra = format!(
        "[publish]\nallowed_subjects = [\"out.>\"]\nmax_messages = 4\n[dlq]\nsubject = \"dlq.{}\"\n",
        env.stream
    );
    let relay = Relay::ready(publish_config(&env, &app, &extra)).await;
    eventually("all settled", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    assert_eq!(stored(&env.js, &out).await.len(), 0, "nothing published");
    assert_eq!(app.arrivals(), 3, "never retried");
    let letters = stored(&env.js, &dlq).await;
    assert_eq!(letters.len(), 3);
    let dlq_stream = env.js.get_stream(&dlq).await.unwrap();
    for (seq, why) in [(1, "secret.x"), (2, "max_messages"), (3, "malformed")] {
        let letter = dlq_stream.get_raw_message(seq).await.unwrap();
        let reason = letter
            .headers
            .get("Jetrelay-Dlq-Reason")
            .unwrap()
            .as_str()
            .to_string();
        assert!(
            reason.starts_with("jetrelay: publish_refused: ") && reason.contains(why),
            "{reason}"
        );
    }
    let metric = |s: &'static str| relay.metric(s);
    for (label, n) in [("not_allowed", 1.0), ("too_large", 1.0), ("malformed", 1.0)] {
        let sample = format!("jetrelay_publish_failures_total{{reason=\"{label}\"}}");
        assert_eq!(relay.metric(&sample).await, n, "{label}");
    }
    assert_eq!(
        metric("jetrelay_messages_settled_total{action=\"dlq\"}").await,
        3.0
    );
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn without_atomic_outputs_go_one_by_one_to_a_stream_that_does_not_take_batches() {
    let app = MockApp::start(|r, _| three_outputs(r)).await;
    let env = Env::start(&["in.>"]).await;
    let out = unique("OUT");
    atomic_stream(&env.js, &out, &["out.>"], false).await;
    let extra = "[publish]\nallowed_subjects = [\"out.>\"]\natomic = false\n";
    let relay = Relay::ready(publish_config(&env, &app, extra)).await;
    publish(&env.js, "in.x", 2).await;
    eventually("acked", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    let got = stored(&env.js, &out).await;
    assert_eq!(got.len(), 6);
    assert_eq!(
        got[0].id,
        format!("jetrelay:{}:{}:1:0", env.stream, env.durable)
    );
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn outputs_of_two_consumers_of_one_stream_never_collide() {
    // Two durables of one stream, each publishing one output per input into one
    // shared stream: every output of each is stored (the ids carry the consumer).
    let env = Env::start(&["in.>"]).await;
    let out = unique("OUT");
    atomic_stream(&env.js, &out, &["shared.>"], true).await;
    let mut relays = Vec::new();
    let durables = [unique("a"), unique("b")];
    for name in &durables {
        let who = name.clone();
        let app = MockApp::start(move |r, _| {
            publishing(&[(format!("shared.{}", r.seq()), format!("{who}-{}", r.seq()))])
        })
        .await;
        let config = durable_config(
            &env.nats,
            &app,
            &env.stream,
            name,
            "[publish]\nallowed_subjects = [\"shared.>\"]\n",
        );
        relays.push((Relay::ready(config).await, app));
    }
    publish(&env.js, "in.x", 30).await;
    for name in &durables {
        eventually("acked", T, || consumer_drained(&env.js, &env.stream, name)).await;
    }
    let got = stored(&env.js, &out).await;
    assert_eq!(got.len(), 60, "each consumer's 30 outputs");
    for name in &durables {
        let mine = got
            .iter()
            .filter(|s| s.payload.starts_with(name.as_str()))
            .count();
        assert_eq!(mine, 30, "{name}");
    }
    for (relay, _) in relays {
        relay.stop().await.unwrap();
    }
}

#[tokio::test]
async fn ordered_modes_commit_a_keys_outputs_in_input_order() {
    // Two keys, eight inputs each: the next input of a key reaches the app only
    // after the previous one's outputs are stored.
    let app = MockApp::start(|r, _| {
        let key = r.header("nats-subject").unwrap().to_string();
        let payload = String::from_utf8_lossy(&r.body).into_owned();
        publishing(&[(format!("out.{key}"), payload)]).after(Duration::from_millis(2))
    })
    .await;
    let env = Env::start(&["k.>"]).await;
    let out = unique("OUT");
    atomic_stream(&env.js, &out, &["out.>"], true).await;
    let extra = "[publish]\nallowed_subjects = [\"out.>\"]\n[delivery]\nordering = \"subject\"\n";
    let relay = Relay::ready(publish_config(&env, &app, extra)).await;
    for i in 0..8 {
        for key in ["a", "b"] {
            env.js
                .publish(format!("k.{key}"), format!("{key}{i}").into())
                .await
                .unwrap()
                .await
                .unwrap();
        }
    }
    eventually("all acked", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    let got = stored(&env.js, &out).await;
    for key in ["a", "b"] {
        let outputs: Vec<&Stored> = got
            .iter()
            .filter(|s| s.subject == format!("out.k.{key}"))
            .collect();
        let payloads: Vec<&str> = outputs.iter().map(|s| s.payload.as_str()).collect();
        let want: Vec<String> = (0..8).map(|i| format!("{key}{i}")).collect();
        assert_eq!(payloads, want, "key {key}: outputs in input order");
        // Each output was stored before the next input of its key reached the app.
        let mut arrivals: Vec<(String, time::OffsetDateTime)> = app
            .requests()
            .iter()
            .filter(|r| r.header("nats-subject") == Some(&format!("k.{key}")))
            .map(|r| (String::from_utf8_lossy(&r.body).into_owned(), r.wall))
            .collect();
        arrivals.sort_by_key(|(_, at)| *at);
        for (i, o) in outputs.iter().enumerate().take(7) {
            let (next, at) = &arrivals[i + 1];
            assert!(
                o.at <= *at,
                "{} stored at {}, {next} arrived at {at}",
                o.payload,
                o.at
            );
        }
    }
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn each_batch_result_publishes_for_its_own_input() {
    // Batch delivery: each result item carries its input's outputs; input 2's
    // subject is not allowed, so it alone is dead-lettered.
    let app = MockApp::start(|r, _| {
        let doc: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        let results: Vec<_> = doc["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                let seq = m["sequence"].as_u64().unwrap();
                let subject = if seq == 2 {
                    "secret.2".to_string()
                } else {
                    format!("out.{seq}")
                };
                json!({"id": m["id"], "action": "ack", "publish": [
                    {"subject": subject, "data": "a"}, {"subject": subject, "data": "b"}
                ]})
            })
            .collect();
        Reply::status(200).body(json!({ "results": results }).to_string())
    })
    .await;
    let env = Env::start(&["in.>"]).await;
    let out = unique("OUT");
    atomic_stream(&env.js, &out, &["out.>", "secret.>"], true).await;
    let dlq = unique("DLQ");
    create_stream(&env.js, &dlq, &[&format!("dlq.{}", env.stream)]).await;
    publish(&env.js, "in.x", 4).await;
    let extra = format!(
        "[publish]\nallowed_subjects = [\"out.>\"]\n[dlq]\nsubject = \"dlq.{}\"\n\
         [delivery]\nbatch_size = 10\nbatch_wait_ms = 300\n",
        env.stream
    );
    let relay = Relay::ready(publish_config(&env, &app, &extra)).await;
    eventually("all settled", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    let got = stored(&env.js, &out).await;
    let subjects: BTreeSet<&str> = got.iter().map(|s| s.subject.as_str()).collect();
    assert_eq!(subjects, BTreeSet::from(["out.1", "out.3", "out.4"]));
    assert_eq!(got.len(), 6);
    for s in &got {
        let input = s.subject.trim_start_matches("out.");
        assert!(
            s.id.starts_with(&format!("jetrelay:{}:{}:{input}:", env.stream, env.durable)),
            "{s:?}"
        );
    }
    assert_eq!(stored(&env.js, &dlq).await.len(), 1);
    let metric = |s: &'static str| relay.metric(s);
    assert_eq!(
        metric("jetrelay_published_total{via=\"answer\"}").await,
        6.0
    );
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn the_readme_publishing_handler_survives_a_crash_with_each_output_stored_once() {
    let handler = ReadmeApp::start("docs/publishing.md", "# Publishing through jetrelay").await;
    let env = Env::start(&["orders.>"]).await;
    let out = unique("OUT");
    atomic_stream(&env.js, &out, &["invoices.>", "audit.>"], true).await;
    let dlq = unique("DLQ");
    create_stream(&env.js, &dlq, &[&format!("dlq.{}", env.stream)]).await;
    let total = 60u64;
    for i in 0..total {
        let order = json!({"id": format!("o{i}"), "customer": format!("c{}", i % 3), "total": i});
        env.js
            .publish(format!("orders.{i}"), order.to_string().into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    env.js
        .publish("orders.bad", "not an order".into())
        .await
        .unwrap()
        .await
        .unwrap();
    let config = format!(
        "[nats]\nservers = \"{}\"\n[source]\nstream = \"{}\"\nkind = \"durable\"\ndurable = \"{}\"\n\
         [http]\nurl = \"http://127.0.0.1:{}/orders\"\n[admin]\nlisten = \"127.0.0.1:0\"\n\
         [consumer]\nack_wait_ms = 2000\n[delivery]\nmax_in_flight = 4\n\
         [dlq]\nsubject = \"dlq.{}\"\n\
         [publish]\nallowed_subjects = [\"invoices.>\", \"audit.>\"]\n",
        env.nats.url(),
        env.stream,
        env.durable,
        handler.port,
        env.stream
    );
    let mut first = Daemon::start(&config).await;
    eventually("some outputs", T, || async {
        stored(&env.js, &out).await.len() >= 20
    })
    .await;
    first.signal("KILL");
    first.wait_exit(T).await;
    let _second = Daemon::start(&config).await;
    eventually("every order settled", Duration::from_secs(60), || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    let got = stored(&env.js, &out).await;
    assert_eq!(
        got.len() as u64,
        2 * total,
        "an invoice and an audit line per order, once"
    );
    let ids: BTreeSet<&str> = got.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids.len(), got.len());
    let invoice = got.iter().find(|s| s.subject == "invoices.c1").unwrap();
    let body: serde_json::Value = serde_json::from_str(&invoice.payload).unwrap();
    assert_eq!(body["customer"], "c1");
    assert_eq!(stored(&env.js, &dlq).await.len(), 1, "the bad order");
}

#[tokio::test]
async fn a_dead_letter_after_failed_publishes_says_what_the_last_try_ran_into() {
    // The outputs go to a stream that takes no atomic batches: each try fails, and
    // when the attempts are spent the dead letter names that, not only "exhausted".
    let app = MockApp::start(|r, _| three_outputs(r)).await;
    let env = Env::start(&["in.>"]).await;
    atomic_stream(&env.js, &unique("OUT"), &["out.>"], false).await;
    let dlq = unique("DLQ");
    create_stream(&env.js, &dlq, &[&format!("dlq.{}", env.stream)]).await;
    let extra = format!(
        "[publish]\nallowed_subjects = [\"out.>\"]\n[consumer]\nmax_deliver = 2\n\
         [delivery]\nretry_initial_ms = 100\nretry_max_ms = 200\n[dlq]\nsubject = \"dlq.{}\"\n",
        env.stream
    );
    let relay = Relay::ready(publish_config(&env, &app, &extra)).await;
    publish(&env.js, "in.x", 1).await;
    eventually("settled", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    let letter = env
        .js
        .get_stream(&dlq)
        .await
        .unwrap()
        .get_raw_message(1)
        .await
        .unwrap();
    let reason = letter.headers.get("Jetrelay-Dlq-Reason").unwrap().as_str();
    assert_eq!(
        reason,
        "jetrelay: 2 attempts exhausted, last: outputs not published (not_atomic)"
    );
    relay.stop().await.unwrap();
}
