//! Batch delivery end to end (`delivery.batch_size` > 1): the JSON document on the
//! wire, a verdict per message, the held-back later messages of a key, and batches
//! kept alive while the app works on them.

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::HeaderMap;
use serde_json::{Value, json};

use crate::support::app::Recorded;
use crate::support::peer::ReadmeApp;
use crate::support::*;

const T: Duration = Duration::from_secs(20);

/// The messages a batch request carried.
fn items(r: &Recorded) -> Vec<Value> {
    let doc: Value = serde_json::from_slice(&r.body).expect("a batch request is JSON");
    doc["messages"]
        .as_array()
        .expect("a batch request has messages")
        .clone()
}

/// Every message item the app was sent, in arrival order of the requests.
fn sent(app: &MockApp) -> Vec<Value> {
    let mut reqs = app.requests();
    reqs.sort_by_key(|r| r.at);
    reqs.iter().flat_map(items).collect()
}

/// `{"results": [...]}` as the app's answer.
fn results(entries: Vec<Value>) -> String {
    json!({ "results": entries }).to_string()
}

fn batch_config(env: &Env, app: &MockApp, extra: &str) -> jetrelay::config::Config {
    durable_config(&env.nats, app, &env.stream, &env.durable, extra)
}

#[tokio::test]
async fn a_batch_is_one_json_request_carrying_every_field_of_its_messages() {
    let app = MockApp::ok().await;
    let env = Env::start(&["b.>"]).await;
    // Published before the daemon starts: the first pull finds all five ready.
    let mut headers = HeaderMap::new();
    headers.insert("X-Trace", "abc");
    headers.insert("Content-Type", "application/json");
    headers.insert("Nats-Msg-Id", "id-1");
    env.js
        .publish_with_headers("b.eu", headers, "{\"n\":1}".into())
        .await
        .unwrap()
        .await
        .unwrap();
    env.js
        .publish("b.bin", vec![0xff, 0xfe].into())
        .await
        .unwrap()
        .await
        .unwrap();
    publish(&env.js, "b.us", 3).await;
    let extra = "[delivery]\nbatch_size = 10\nbatch_wait_ms = 500\nmax_in_flight = 1\n";
    let relay = Relay::ready(batch_config(&env, &app, extra)).await;
    eventually("all acked", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;

    let reqs = app.requests();
    for r in &reqs {
        assert_eq!(r.header("content-type"), Some("application/json"));
        let n = items(r).len();
        assert_eq!(
            r.header("jetrelay-batch-size"),
            Some(n.to_string().as_str())
        );
        assert!(
            r.header("nats-sequence").is_none(),
            "no per-message headers"
        );
    }
    assert!(
        reqs.iter().any(|r| items(r).len() > 1),
        "messages that were ready went together"
    );
    assert_eq!(app.max_in_flight(), 1, "max_in_flight counts requests");
    let all = sent(&app);
    assert_eq!(all.len(), 5, "each message once: {all:?}");
    let first = &all[0];
    let published = first["published"].as_str().unwrap().to_string();
    assert!(published.ends_with('Z'), "{published}");
    assert_eq!(
        first,
        &json!({
            "id": format!("{}:1", env.stream),
            "stream": env.stream,
            "sequence": 1,
            "subject": "b.eu",
            "delivered": 1,
            "published": published,
            "msg_id": "id-1",
            "headers": {"Content-Type": ["application/json"], "X-Trace": ["abc"]},
            "data": "{\"n\":1}",
        }),
        "no partition or origin_* for a plain durable"
    );
    assert_eq!(all[1]["data_base64"], "//4=", "not UTF-8: base64");
    assert!(all[1].get("data").is_none());
    assert_eq!(all[2]["data"], "m0");
    let seqs: Vec<u64> = all
        .iter()
        .map(|i| i["sequence"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5]);

    let m = |s: &'static str| relay.metric(s);
    assert_eq!(m("jetrelay_batch_messages_sum").await, 5.0);
    assert_eq!(m("jetrelay_batch_messages_count").await, reqs.len() as f64);
    assert_eq!(
        m("jetrelay_messages_settled_total{action=\"ack\"}").await,
        5.0,
        "settled counters stay per message"
    );
    assert_eq!(
        m("jetrelay_http_requests_total{class=\"2xx\"}").await,
        reqs.len() as f64
    );
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn each_listed_message_gets_its_action_the_others_are_acked_unknown_ids_counted() {
    // By sequence, whichever batch it is in: 1 is retried once (after 400 ms), 2 is
    // terminated, 3 is dead-lettered, 4 is not listed (acked). The first answer also
    // names a message the batch did not carry.
    let app = MockApp::start({
        move |r, seen| {
            let mut entries: Vec<Value> = items(r)
                .iter()
                .filter_map(|i| {
                    let id = i["id"].clone();
                    match (i["sequence"].as_u64(), i["delivered"].as_u64()) {
                        (Some(1), Some(1)) => {
                            Some(json!({"id": id, "action": "retry", "retry_after_ms": 400}))
                        }
                        (Some(2), _) => Some(json!({"id": id, "action": "term"})),
                        (Some(3), _) => Some(json!({"id": id, "action": "dlq"})),
                        _ => None,
                    }
                })
                .collect();
            if seen == 0 {
                entries.push(json!({"id": "NOPE:99", "action": "ack"}));
            }
            Reply::status(200).body(results(entries))
        }
    })
    .await;
    let env = Env::start(&["r.>"]).await;
    let dlq_stream = unique("DLQ");
    create_stream(&env.js, &dlq_stream, &[&format!("dlq.{}", env.stream)]).await;
    publish(&env.js, "r.x", 4).await;
    let extra = format!(
        "[dlq]\nsubject = \"dlq.{}\"\n[delivery]\nbatch_size = 10\nbatch_wait_ms = 300\n\
         ordering = \"none\"\nretry_initial_ms = 50\n",
        env.stream
    );
    let relay = Relay::ready(batch_config(&env, &app, &extra)).await;
    eventually("all settled", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;

    let mut seen_by_seq: BTreeMap<u64, Vec<(u64, tokio::time::Instant)>> = BTreeMap::new();
    for r in app.requests() {
        for i in items(&r) {
            seen_by_seq
                .entry(i["sequence"].as_u64().unwrap())
                .or_default()
                .push((i["delivered"].as_u64().unwrap(), r.at));
        }
    }
    let delivered = |seq| -> Vec<u64> { seen_by_seq[&seq].iter().map(|(d, _)| *d).collect() };
    assert_eq!(
        delivered(1),
        [1, 2],
        "retried once, with its attempt counted"
    );
    let (first, again) = (seen_by_seq[&1][0].1, seen_by_seq[&1][1].1);
    assert!(
        again - first >= Duration::from_millis(400),
        "the retry came after {:?}, retry_after_ms is 400",
        again - first
    );
    assert_eq!(delivered(2), [1], "terminated: never again");
    assert_eq!(delivered(3), [1], "dead-lettered: never again");
    assert_eq!(delivered(4), [1], "not listed: acked");

    let dlq = env.js.get_stream(&dlq_stream).await.unwrap();
    // A term is dead-lettered first when a DLQ is configured, as for one message.
    assert_eq!(dlq.cached_info().state.messages, 2);
    let reason = |seq| {
        let dlq = dlq.clone();
        async move {
            let letter = dlq.get_raw_message(seq).await.unwrap();
            let reason = letter.headers.get("Jetrelay-Dlq-Reason").unwrap();
            (letter.payload, reason.as_str().to_string())
        }
    };
    let (payload, why) = reason(1).await;
    assert_eq!(
        (payload.as_ref(), why.contains("term")),
        (&b"m1"[..], true),
        "{why}"
    );
    let (payload, why) = reason(2).await;
    assert_eq!(
        (payload.as_ref(), why.contains("dlq")),
        (&b"m2"[..], true),
        "{why}"
    );
    let m = |s: &'static str| relay.metric(s);
    assert_eq!(m("jetrelay_batch_unknown_ids_total").await, 1.0);
    assert_eq!(
        m("jetrelay_messages_settled_total{action=\"ack\"}").await,
        2.0
    );
    assert_eq!(
        m("jetrelay_messages_settled_total{action=\"dlq\"}").await,
        2.0
    );
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn a_key_retried_in_a_batch_holds_back_its_later_messages_which_come_again_after_it() {
    // a0 is retried once; the app accepts a1 and a2 in the same batch, but they must
    // not be acked before a0: they come again after it, in order. Key b is unaffected.
    let app = MockApp::start(|r, _| {
        let entries = items(r)
            .iter()
            .filter(|i| i["data"] == "a0" && i["delivered"] == 1)
            .map(|i| json!({"id": i["id"], "action": "retry", "retry_after_ms": 100}))
            .collect();
        Reply::status(200).body(results(entries))
    })
    .await;
    let env = Env::start(&["k.>"]).await;
    publish_each(
        &env.js,
        &[("k.a", "a0"), ("k.b", "b0"), ("k.a", "a1"), ("k.a", "a2")],
    )
    .await;
    let extra = "[delivery]\nbatch_size = 10\nbatch_wait_ms = 300\nordering = \"subject\"\n\
                 retry_initial_ms = 50\n";
    let relay = Relay::ready(batch_config(&env, &app, extra)).await;
    eventually("all acked", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;

    let all = sent(&app);
    let key = |k: &str| -> Vec<(String, u64)> {
        all.iter()
            .filter(|i| i["subject"] == k)
            .map(|i| {
                let data = i["data"].as_str().unwrap().to_string();
                (data, i["delivered"].as_u64().unwrap())
            })
            .collect()
    };
    let a = key("k.a");
    let first_round = [("a0", 1), ("a1", 1), ("a2", 1)];
    // a0 comes again with its attempt counted; a1 and a2 did not fail, so theirs is not.
    let second_round = [("a0", 2), ("a1", 1), ("a2", 1)];
    let expected: Vec<(String, u64)> = first_round
        .iter()
        .chain(&second_round)
        .map(|(d, n)| (d.to_string(), *n))
        .collect();
    assert_eq!(a, expected, "key a: held back, then again in order");
    assert_eq!(key("k.b"), [("b0".to_string(), 1)], "key b was not held");
    let m = |s: &'static str| relay.metric(s);
    assert_eq!(
        m("jetrelay_messages_settled_total{action=\"ack\"}").await,
        4.0
    );
    assert_eq!(
        m("jetrelay_redeliveries_total").await,
        0.0,
        "retried in place"
    );
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn a_message_that_ends_in_a_batch_holds_nothing_back() {
    // a0 is dead-lettered, a1 terminated: both end there, as they would one message
    // at a time. a1 and a2 are not sent again; each key's messages are sent once.
    let app = MockApp::start(|r, _| {
        let entries = items(r)
            .iter()
            .filter_map(|i| match i["data"].as_str() {
                Some("a0") => Some(json!({"id": i["id"], "action": "dlq"})),
                Some("a1") => Some(json!({"id": i["id"], "action": "term"})),
                _ => None,
            })
            .collect();
        Reply::status(200).body(results(entries))
    })
    .await;
    let env = Env::start(&["h.>"]).await;
    create_stream(&env.js, "HDLQ", &["hdlq"]).await;
    publish_each(
        &env.js,
        &[("h.a", "a0"), ("h.a", "a1"), ("h.a", "a2"), ("h.b", "b0")],
    )
    .await;
    let extra = "[delivery]\nbatch_size = 10\nbatch_wait_ms = 300\nordering = \"subject\"\n\
                 retry_initial_ms = 50\n[dlq]\nsubject = \"hdlq\"\n";
    let relay = Relay::ready(batch_config(&env, &app, extra)).await;
    eventually("all settled", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    let mut bodies: Vec<String> = sent(&app)
        .iter()
        .map(|i| i["data"].as_str().unwrap().to_string())
        .collect();
    bodies.sort();
    assert_eq!(bodies, ["a0", "a1", "a2", "b0"], "each sent once");
    let m = |s: &'static str| relay.metric(s);
    assert_eq!(
        m("jetrelay_messages_settled_total{action=\"ack\"}").await,
        2.0
    );
    assert_eq!(
        m("jetrelay_messages_settled_total{action=\"dlq\"}").await,
        2.0
    );
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn an_unparsable_answer_retries_the_whole_batch_and_is_counted() {
    let app = MockApp::start(|_, seen| {
        if seen == 0 {
            Reply::status(200).body("this is not JSON")
        } else {
            Reply::status(200)
        }
    })
    .await;
    let env = Env::start(&["u.>"]).await;
    publish(&env.js, "u.x", 3).await;
    let extra = "[delivery]\nbatch_size = 10\nbatch_wait_ms = 300\nretry_initial_ms = 50\n";
    let relay = Relay::ready(batch_config(&env, &app, extra)).await;
    eventually("all acked", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    let reqs = app.requests();
    let first = items(&reqs[0]).len();
    let all = sent(&app);
    assert_eq!(all.len(), 3 + first, "the first batch came again: {all:?}");
    assert_eq!(
        all.iter().filter(|i| i["delivered"] == 2).count(),
        first,
        "each counted as a failed attempt"
    );
    assert_eq!(relay.metric("jetrelay_batch_bad_answers_total").await, 1.0);
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn a_failed_batch_request_gives_every_message_what_it_would_get_alone() {
    // 503 for everything: with max_deliver = 2 every message is retried once, then
    // dead-lettered, each on its own count.
    let app = MockApp::start(|_, _| Reply::status(503)).await;
    let env = Env::start(&["f.>"]).await;
    let dlq_stream = unique("DLQ");
    create_stream(&env.js, &dlq_stream, &[&format!("dlq.{}", env.stream)]).await;
    publish(&env.js, "f.x", 3).await;
    let extra = format!(
        "[dlq]\nsubject = \"dlq.{}\"\n[consumer]\nmax_deliver = 2\n\
         [delivery]\nbatch_size = 10\nbatch_wait_ms = 300\nretry_initial_ms = 50\n",
        env.stream
    );
    let relay = Relay::ready(batch_config(&env, &app, &extra)).await;
    eventually("all dead-lettered", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    let all = sent(&app);
    for seq in 1..=3u64 {
        let d: Vec<u64> = all
            .iter()
            .filter(|i| i["sequence"] == seq)
            .map(|i| i["delivered"].as_u64().unwrap())
            .collect();
        assert_eq!(d, [1, 2], "message {seq}");
    }
    let dlq = env.js.get_stream(&dlq_stream).await.unwrap();
    assert_eq!(dlq.cached_info().state.messages, 3);
    let letter = dlq.get_raw_message(1).await.unwrap();
    assert_eq!(
        letter
            .headers
            .get("Jetrelay-Dlq-Status")
            .map(|v| v.as_str().to_string())
            .as_deref(),
        Some("503")
    );
    let m = |s: &'static str| relay.metric(s);
    assert_eq!(
        m("jetrelay_messages_settled_total{action=\"dlq\"}").await,
        3.0
    );
    assert_eq!(
        m("jetrelay_messages_settled_total{action=\"nak\"}").await,
        3.0,
        "unordered: retried by NAK with delay"
    );
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn a_batch_the_app_works_on_keeps_every_message_alive() {
    // The app takes three ack waits to answer: only +WPI for every message in the
    // batch stops JetStream from redelivering them.
    let app = MockApp::start(|_, _| Reply::status(200).after(Duration::from_millis(3000))).await;
    let env = Env::start(&["w.>"]).await;
    publish(&env.js, "w.x", 3).await;
    let extra =
        "[delivery]\nbatch_size = 10\nbatch_wait_ms = 300\n[consumer]\nack_wait_ms = 1000\n";
    let relay = Relay::ready(batch_config(&env, &app, extra)).await;
    eventually("all acked", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    let all = sent(&app);
    assert_eq!(all.len(), 3, "no message came twice: {all:?}");
    assert_eq!(relay.metric("jetrelay_redeliveries_total").await, 0.0);
    assert!(
        relay.metric("jetrelay_progress_sent_total").await >= 3.0 * 4.0,
        "+WPI every ack_wait/2 for each message"
    );
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn the_drain_leaves_an_unanswered_batch_unacked() {
    // The app never answers within the grace: nothing of the batch may be acked.
    let app = MockApp::start(|_, _| Reply::status(200).after(Duration::from_secs(30))).await;
    let env = Env::start(&["d.>"]).await;
    publish(&env.js, "d.x", 3).await;
    let extra = "[delivery]\nbatch_size = 10\nbatch_wait_ms = 300\nshutdown_grace_ms = 500\n\
                 [http]\ntimeout_ms = 60000\n";
    let relay = Relay::ready(batch_config(&env, &app, extra)).await;
    eventually("the batch arrived", T, || async { app.arrivals() >= 1 }).await;
    relay.stop().await.unwrap();
    let info = consumer_info(&env.js, &env.stream, &env.durable)
        .await
        .unwrap();
    assert_eq!(info.ack_floor.stream_sequence, 0, "nothing acked");
    assert_eq!(info.num_ack_pending, 3, "left for the next instance");
}

#[tokio::test]
async fn the_readme_batch_handler_works_as_documented() {
    let handler = ReadmeApp::start("docs/batch.md", "# Batch delivery").await;
    let port = handler.port;

    let env = Env::start(&["o.>"]).await;
    let dlq_stream = unique("DLQ");
    create_stream(&env.js, &dlq_stream, &[&format!("dlq.{}", env.stream)]).await;
    publish_each(
        &env.js,
        &[
            ("o.1", r#"{"total": 10}"#),
            ("o.1", r#"{"total": -1}"#),
            ("o.2", "not JSON"),
            ("o.2", r#"{"total": 3}"#),
        ],
    )
    .await;
    let url = format!("http://127.0.0.1:{port}/batch");
    let extra = format!(
        "[dlq]\nsubject = \"dlq.{}\"\n[delivery]\nbatch_size = 10\nbatch_wait_ms = 300\n\
         ordering = \"subject\"\n",
        env.stream
    );
    let cfg = durable_config_for(env.nats.url(), &url, &env.stream, &env.durable, &extra);
    let relay = Relay::ready(cfg).await;
    eventually("all settled", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    let dlq = env.js.get_stream(&dlq_stream).await.unwrap();
    assert_eq!(dlq.cached_info().state.messages, 2, "the two bad inputs");
    let bodies = [
        dlq.get_raw_message(1).await.unwrap().payload,
        dlq.get_raw_message(2).await.unwrap().payload,
    ];
    assert_eq!(bodies, [&br#"{"total": -1}"#[..], b"not JSON"]);
    let m = |s: &'static str| relay.metric(s);
    assert_eq!(
        m("jetrelay_messages_settled_total{action=\"ack\"}").await,
        2.0
    );
    assert_eq!(
        m("jetrelay_messages_settled_total{action=\"dlq\"}").await,
        2.0
    );
    assert!(m("jetrelay_batch_messages_count").await >= 1.0);
    relay.stop().await.unwrap();
}
