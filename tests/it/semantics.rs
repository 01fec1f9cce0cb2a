//! Delivery semantics end to end: ordered lanes, retries that keep order, in-progress
//! keep-alives, app-driven actions, the DLQ, confirmed acks and app health gating.

use std::collections::HashMap;
use std::time::Duration;

use crate::support::app::Recorded;
use crate::support::*;

const T: Duration = Duration::from_secs(30);

/// The subject's messages, in the order the app received them.
fn arrival_order(app: &MockApp) -> HashMap<String, Vec<u64>> {
    let mut reqs = app.requests();
    reqs.sort_by_key(|r| r.at);
    let mut by_key: HashMap<String, Vec<u64>> = HashMap::new();
    for r in reqs {
        by_key
            .entry(r.header("nats-subject").unwrap().to_string())
            .or_default()
            .push(r.seq());
    }
    by_key
}

#[tokio::test]
async fn per_key_order_is_exact_while_keys_run_in_parallel() {
    // 0–5 ms of app latency, pseudo-random per sequence.
    let app =
        MockApp::start(|r, _| Reply::status(200).after(Duration::from_millis(r.seq() * 7919 % 6)))
            .await;
    let env = Env::start(&["k.>"]).await;
    let cfg = env.config(
        &app,
        "[delivery]\nordering = \"subject\"\nmax_in_flight = 16\nmax_buffered = 256\n",
    );
    let relay = Relay::ready(cfg).await;
    // 50 keys × 40 messages, interleaved as publishers would.
    let mut acks = Vec::new();
    for i in 0..40 {
        for key in 0..50 {
            acks.push(
                env.js
                    .publish(format!("k.{key}"), format!("{key}-{i}").into())
                    .await
                    .unwrap(),
            );
        }
    }
    for a in acks {
        a.await.unwrap();
    }
    app.wait_for("2000 requests", Duration::from_secs(60), |r| {
        r.len() >= 2000
    })
    .await;
    let order = arrival_order(&app);
    assert_eq!(order.len(), 50);
    for (key, seqs) in &order {
        assert_eq!(seqs.len(), 40, "{key}");
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "{key} out of order: {seqs:?}"
        );
    }
    assert_eq!(
        app.max_subject_in_flight(),
        1,
        "one message in flight per lane"
    );
    assert!(app.max_in_flight() > 1, "keys overlapped in time");
    assert!(app.max_in_flight() <= 16);
    eventually("all acked", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    relay.stop().await.unwrap();
}

/// Per key (what `key` says of a request), its requests came in stream order, each
/// after the one before it was answered; returns how many requests each key had.
fn one_at_a_time_in_order(
    app: &MockApp,
    key: impl Fn(&Recorded) -> String,
) -> HashMap<String, usize> {
    let mut reqs = app.requests();
    reqs.sort_by_key(|r| r.at);
    let mut last: HashMap<String, Recorded> = HashMap::new();
    let mut counts: HashMap<String, usize> = HashMap::new();
    for r in reqs {
        let k = key(&r);
        if let Some(prev) = last.get(&k) {
            assert!(
                prev.seq() < r.seq(),
                "{k}: {} after {}",
                r.seq(),
                prev.seq()
            );
            assert!(
                r.at >= prev.done,
                "{k}: {} started before {} was answered",
                r.seq(),
                prev.seq()
            );
        }
        *counts.entry(k.clone()).or_default() += 1;
        last.insert(k, r);
    }
    counts
}

#[tokio::test]
async fn header_ordering_keeps_each_keys_order_across_subjects_while_keys_run_in_parallel() {
    // 1–5 ms of app latency, pseudo-random per sequence.
    let app = MockApp::start(|r, _| {
        Reply::status(200).after(Duration::from_millis(r.seq() * 7919 % 5 + 1))
    })
    .await;
    let env = Env::start(&["h.>"]).await;
    // The name in another case than the messages': header names match either way.
    let cfg = env.config(
        &app,
        "[delivery]\nordering = \"header:x-key\"\nmax_in_flight = 16\nmax_buffered = 256\n",
    );
    let relay = Relay::ready(cfg).await;
    // 8 keys × 30 messages spread over 7 subjects (each subject carries every key,
    // each key many subjects), and 30 without the header on one subject.
    let mut acks = Vec::new();
    for i in 0..30u32 {
        for key in 0..9u32 {
            let (subject, headers) = if key == 8 {
                ("h.unkeyed".to_string(), async_nats::HeaderMap::new())
            } else {
                let mut h = async_nats::HeaderMap::new();
                h.insert("X-Key", format!("k{key}").as_str());
                (format!("h.{}", (i * 8 + key) % 7), h)
            };
            let body = format!("{key}-{i}");
            acks.push(
                env.js
                    .publish_with_headers(subject, headers, body.into())
                    .await
                    .unwrap(),
            );
        }
    }
    for a in acks {
        a.await.unwrap();
    }
    app.wait_for("270 requests", Duration::from_secs(60), |r| r.len() >= 270)
        .await;
    let counts = one_at_a_time_in_order(&app, |r| {
        r.header("x-key").map_or_else(
            || r.header("nats-subject").unwrap().to_string(),
            str::to_string,
        )
    });
    assert_eq!(counts.len(), 9, "{counts:?}");
    assert!(counts.values().all(|n| *n == 30), "{counts:?}");
    assert!(
        app.max_subject_in_flight() > 1,
        "one subject's keys overlapped in time"
    );
    assert!(app.max_in_flight() <= 16);
    eventually("all acked", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn token_ordering_keys_on_one_subject_token_and_a_shorter_subject_on_itself() {
    let app =
        MockApp::start(|r, _| Reply::status(200).after(Duration::from_millis(r.seq() * 7919 % 6)))
            .await;
    let env = Env::start(&["t.>", "short"]).await;
    let cfg = env.config(
        &app,
        "[delivery]\nordering = \"token:2\"\nmax_in_flight = 16\nmax_buffered = 256\n",
    );
    let relay = Relay::ready(cfg).await;
    // 8 keys × 30 messages, each on a subject of its own (`t.<key>.<i>`), and 30 on
    // a subject of one token.
    let mut acks = Vec::new();
    for i in 0..30 {
        for key in 0..9 {
            let subject = if key == 8 {
                "short".to_string()
            } else {
                format!("t.k{key}.{i}")
            };
            acks.push(
                env.js
                    .publish(subject, format!("{key}-{i}").into())
                    .await
                    .unwrap(),
            );
        }
    }
    for a in acks {
        a.await.unwrap();
    }
    app.wait_for("270 requests", Duration::from_secs(60), |r| r.len() >= 270)
        .await;
    let counts = one_at_a_time_in_order(&app, |r| {
        let subject = r.header("nats-subject").unwrap();
        subject.split('.').nth(1).unwrap_or(subject).to_string()
    });
    assert_eq!(counts.len(), 9, "{counts:?}");
    assert!(counts.values().all(|n| *n == 30), "{counts:?}");
    assert!(app.max_in_flight() > 1, "keys overlapped in time");
    assert!(app.max_in_flight() <= 16);
    eventually("all acked", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn a_retry_keeps_its_key_in_order_and_does_not_block_other_keys() {
    // The first message of key a is answered 503 twice.
    let app = MockApp::start(|r, seen| {
        let first_of_a = r.header("nats-subject") == Some("k.a") && r.body.as_ref() == b"a0";
        Reply::status(if first_of_a && seen < 2 { 503 } else { 200 })
    })
    .await;
    let env = Env::start(&["k.>"]).await;
    let cfg = env.config(&app, "[delivery]\nordering = \"subject\"\nretry_initial_ms = 1000\n[consumer]\nack_wait_ms = 1000\n",);
    let relay = Relay::ready(cfg).await;
    for i in 0..5 {
        for key in ["a", "b"] {
            env.js
                .publish(format!("k.{key}"), format!("{key}{i}").into())
                .await
                .unwrap()
                .await
                .unwrap();
        }
    }
    app.wait_for("all answered 2xx", T, |r| {
        r.iter().filter(|r| r.status == 200).count() == 10
    })
    .await;
    let mut reqs = app.requests();
    reqs.sort_by_key(|r| r.at);
    let a: Vec<(String, String)> = reqs
        .iter()
        .filter(|r| r.header("nats-subject") == Some("k.a"))
        .map(|r| {
            (
                String::from_utf8_lossy(&r.body).into_owned(),
                r.header("nats-delivered").unwrap().to_string(),
            )
        })
        .collect();
    let expected: Vec<(String, String)> = [
        ("a0", "1"),
        ("a0", "2"),
        ("a0", "3"),
        ("a1", "1"),
        ("a2", "1"),
        ("a3", "1"),
        ("a4", "1"),
    ]
    .iter()
    .map(|(b, d)| (b.to_string(), d.to_string()))
    .collect();
    assert_eq!(
        a, expected,
        "key a in publish order, the retried one counted"
    );
    // Key b finished while a0 waited for its retries (1 s + 2 s, three times the
    // ack_wait: only the keep-alive stops a redelivery).
    let last_b = reqs
        .iter()
        .filter(|r| r.header("nats-subject") == Some("k.b"))
        .map(|r| r.at)
        .max()
        .unwrap();
    let a0_done = reqs
        .iter()
        .filter(|r| r.body.as_ref() == b"a0")
        .map(|r| r.at)
        .max()
        .unwrap();
    assert!(last_b < a0_done, "key b was blocked behind key a");
    eventually("all acked", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    // Retries stayed in place, kept alive: JetStream redelivered nothing, and the app
    // saw exactly 10 messages plus 2 retries.
    assert_eq!(relay.metric("jetrelay_redeliveries_total").await, 0.0);
    assert_eq!(app.arrivals(), 12);
    assert_eq!(relay.metric("jetrelay_retries_in_place_total").await, 2.0);
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn a_slow_app_keeps_its_message_alive_with_in_progress() {
    let app = MockApp::start(|_, _| Reply::status(200).after(Duration::from_millis(3000))).await;
    let env = Env::start(&["w.>"]).await;
    let cfg = env.config(&app, "[consumer]\nack_wait_ms = 1000\n");
    let relay = Relay::ready(cfg).await;
    publish(&env.js, "w.x", 1).await;
    eventually("acked", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    assert_eq!(app.arrivals(), 1, "the app never saw a duplicate");
    let r = &app.requests()[0];
    assert_eq!(r.header("nats-delivered"), Some("1"));
    assert_eq!(relay.metric("jetrelay_redeliveries_total").await, 0.0);
    assert!(
        relay.metric("jetrelay_progress_sent_total").await >= 4.0,
        "+WPI every ack_wait/2"
    );
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn the_app_can_override_the_status_mapping() {
    let app = MockApp::start(|r, seen| match (r.body.as_ref(), seen) {
        (b"retry-me", 0) => Reply::status(200).header("Jetrelay-Action", "retry"),
        (b"term-me", _) => Reply::status(200).header("Jetrelay-Action", "term"),
        (b"ack-me", _) => Reply::status(500).header("Jetrelay-Action", "ack"),
        _ => Reply::status(200),
    })
    .await;
    let env = Env::start(&["o.>"]).await;
    let cfg = env.config(&app, "[delivery]\nretry_initial_ms = 50\n");
    let relay = Relay::ready(cfg).await;
    for body in ["retry-me", "term-me", "ack-me"] {
        env.js
            .publish("o.x", body.into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    eventually("all settled", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    let count = |b: &[u8]| {
        app.requests()
            .iter()
            .filter(|r| r.body.as_ref() == b)
            .count()
    };
    assert_eq!(count(b"retry-me"), 2);
    assert_eq!(count(b"term-me"), 1);
    assert_eq!(count(b"ack-me"), 1);
    assert_eq!(relay.settled("term").await, 1.0);
    assert_eq!(relay.settled("ack").await, 2.0);
    assert_eq!(
        relay
            .metric("jetrelay_action_overrides_total{action=\"retry\"}")
            .await,
        1.0
    );
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn permanent_failures_are_dead_lettered_before_their_term() {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    let app = MockApp::start(|r, _| match r.body.as_ref() {
        b"bad" => Reply::status(400),
        b"poison" => Reply::status(503).header("Jetrelay-Action", "dlq"),
        _ => Reply::status(503),
    })
    .await;
    let (stream, durable, dlq_stream) = (unique("S"), unique("d"), unique("DLQ"));
    create_stream(&js, &stream, &["q.>"]).await;
    create_stream(&js, &dlq_stream, &[&format!("dlq.{stream}")]).await;
    let extra = format!(
        "[dlq]\nsubject = \"dlq.{stream}\"\n[consumer]\nmax_deliver = 3\n[delivery]\nretry_initial_ms = 20\n"
    );
    let relay = Relay::ready(durable_config(&nats, &app, &stream, &durable, &extra)).await;
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("X-Trace", "t-1");
    js.publish_with_headers("q.a", headers, "bad".into())
        .await
        .unwrap()
        .await
        .unwrap();
    js.publish("q.b", "poison".into())
        .await
        .unwrap()
        .await
        .unwrap();
    js.publish("q.c", "flaky".into())
        .await
        .unwrap()
        .await
        .unwrap();
    eventually("all terminated", T, || {
        consumer_drained(&js, &stream, &durable)
    })
    .await;

    let dlq = js.get_stream(&dlq_stream).await.unwrap();
    assert_eq!(dlq.cached_info().state.messages, 3);
    let first = dlq.get_raw_message(1).await.unwrap();
    assert_eq!(first.payload.as_ref(), b"bad");
    let h = first.headers;
    let get = |n: &str| h.get(n).map(|v| v.as_str().to_string());
    assert_eq!(get("X-Trace").as_deref(), Some("t-1"));
    assert_eq!(get("Jetrelay-Dlq-Subject").as_deref(), Some("q.a"));
    assert_eq!(get("Jetrelay-Dlq-Stream").as_deref(), Some(stream.as_str()));
    assert_eq!(get("Jetrelay-Dlq-Sequence").as_deref(), Some("1"));
    assert_eq!(get("Jetrelay-Dlq-Status").as_deref(), Some("400"));
    assert!(get("Jetrelay-Dlq-Reason").unwrap().contains("400"));
    assert!(get("Jetrelay-Dlq-Time").is_some());
    let flaky = dlq.get_raw_message(3).await.unwrap();
    assert_eq!(flaky.payload.as_ref(), b"flaky");
    assert_eq!(
        flaky
            .headers
            .get("Jetrelay-Dlq-Delivered")
            .map(|v| v.as_str().to_string())
            .as_deref(),
        Some("3")
    );
    assert_eq!(
        app.requests()
            .iter()
            .filter(|r| r.body.as_ref() == b"poison")
            .count(),
        1,
        "dlq = no retries"
    );
    assert_eq!(relay.settled("dlq").await, 3.0);
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn a_failed_dead_letter_publish_loses_nothing() {
    let app = MockApp::start(|_, _| Reply::status(400)).await;
    let env = Env::start(&["f.>"]).await;
    // No stream captures the DLQ subject: every dead-letter publish fails.
    let extra = "[dlq]\nsubject = \"nowhere.dlq\"\n[delivery]\nretry_initial_ms = 50\n";
    let relay = env.relay(&app, extra).await;
    publish(&env.js, "f.x", 1).await;
    eventually(
        "the message comes back after the failed DLQ publish",
        T,
        || async { app.arrivals() >= 2 },
    )
    .await;
    assert!(relay.metric("jetrelay_dlq_failures_total").await >= 1.0);
    assert_eq!(relay.settled("term").await, 0.0);
    let info = consumer_info(&env.js, &env.stream, &env.durable)
        .await
        .unwrap();
    assert_eq!(
        info.ack_floor.stream_sequence, 0,
        "never terminated without the DLQ's PubAck"
    );
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn confirmed_acks_are_confirmed_and_a_failed_one_is_counted() {
    let app = MockApp::start(|r, _| {
        let slow = r.body.as_ref() == b"slow";
        Reply::status(200).after(Duration::from_millis(if slow { 1500 } else { 0 }))
    })
    .await;
    let env = Env::start(&["c.>"]).await;
    let cfg = env.config(
        &app,
        "[delivery]\nack = \"confirmed\"\n[nats]\nrequest_timeout_ms = 500\n",
    );
    let relay = Relay::ready(cfg).await;
    publish(&env.js, "c.x", 5).await;
    eventually("confirmed acks", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    assert_eq!(relay.settled("ack").await, 5.0);
    assert_eq!(relay.metric("jetrelay_ack_failures_total").await, 0.0);

    // While the app holds a message, its consumer disappears: the ack cannot be confirmed.
    env.js
        .publish("c.x", "slow".into())
        .await
        .unwrap()
        .await
        .unwrap();
    eventually("the slow one arrived", T, || async { app.arrivals() == 6 }).await;
    env.js
        .get_stream(&env.stream)
        .await
        .unwrap()
        .delete_consumer(&env.durable)
        .await
        .unwrap();
    eventually("the failed ack is counted", T, || async {
        relay.metric("jetrelay_ack_failures_total").await == 1.0
    })
    .await;
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn before_the_first_probe_answers_ready_says_it_waits_for_it() {
    // A health URL that accepts the connection and never answers.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let health = format!("http://{}/healthz", silent.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((conn, _)) = silent.accept().await {
            open.push(conn);
        }
    });
    let app = MockApp::ok().await;
    let env = Env::start(&["w.>"]).await;
    let extra = format!(
        "[http]\nhealth_url = \"{health}\"\nhealth_timeout_ms = 60000\nhealth_interval_ms = 60000\n"
    );
    let relay = Relay::start(durable_config(
        &env.nats,
        &app,
        &env.stream,
        &env.durable,
        &extra,
    ))
    .await;
    eventually("waiting for the probe", T, || async {
        relay.health.status().reason == "waiting for the first health probe (http.health_url)"
    })
    .await;
    let (code, body) = relay.get("/ready").await;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("\"state\":\"not_ready\""), "{body}");
    relay.stop().await.unwrap();
    held.abort();
}

#[tokio::test]
async fn pulling_waits_for_a_healthy_app_and_pauses_while_it_is_unhealthy() {
    let app = MockApp::ok().await;
    let env = Env::start(&["h.>"]).await;
    let extra = format!(
        "[http]\nhealth_url = \"{}\"\nhealth_interval_ms = 30\nhealth_threshold = 2\n",
        app.health_url()
    );
    let relay = Relay::start(env.config(&app, &extra)).await;
    publish(&env.js, "h.x", 3).await;
    eventually("probed while unhealthy", T, || async {
        app.health_probes() >= 5
    })
    .await;
    assert_eq!(
        app.arrivals(),
        0,
        "nothing is pulled before the app is healthy"
    );
    let (code, body) = relay.get("/ready").await;
    assert_eq!(code, 503);
    assert!(body.contains("not healthy"), "{body}");
    assert_eq!(relay.metric("jetrelay_app_healthy").await, 0.0);

    app.set_healthy(true);
    relay.wait_ready(T).await;
    app.wait_for("3 requests", T, |r| r.len() == 3).await;
    eventually("acked", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;

    app.set_healthy(false);
    eventually("unhealthy again", T, || async {
        !relay.health.status().ready
    })
    .await;
    let probes = app.health_probes();
    publish(&env.js, "h.x", 2).await;
    eventually("probed some more", T, || async {
        app.health_probes() >= probes + 5
    })
    .await;
    assert_eq!(app.arrivals(), 3, "no new pulls while unhealthy");
    app.set_healthy(true);
    app.wait_for("resumed", T, |r| r.len() == 5).await;
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn a_redelivery_of_a_message_still_in_flight_is_not_sent_again() {
    // The app takes 3 s. The test NAKs the message's delivery itself (on the reply
    // subject of the daemon's first +WPI), as when a keep-alive is lost: JetStream
    // redelivers the message to the daemon while it still holds it.
    let app = MockApp::start(|_, _| Reply::status(200).after(Duration::from_millis(3000))).await;
    let env = Env::start(&["w.>"]).await;
    let (snoop, _) = client(&env.nats).await;
    let mut acks = snoop
        .subscribe(format!("$JS.ACK.{}.{}.>", env.stream, env.durable))
        .await
        .unwrap();
    snoop.flush().await.unwrap();
    let cfg = env.config(&app, "[consumer]\nack_wait_ms = 1000\n");
    let relay = Relay::ready(cfg).await;
    publish(&env.js, "w.x", 1).await;
    let wpi = tokio::time::timeout(T, futures::StreamExt::next(&mut acks))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&wpi.payload[..], b"+WPI");
    snoop
        .publish(wpi.subject.clone(), "-NAK".into())
        .await
        .unwrap();
    snoop.flush().await.unwrap();
    eventually("redelivered, then acked", T, || async {
        relay.metric("jetrelay_redeliveries_total").await >= 1.0
            && consumer_drained(&env.js, &env.stream, &env.durable).await
    })
    .await;
    assert_eq!(app.arrivals(), 1, "the app saw the message once");
    assert_eq!(relay.metric("jetrelay_messages_received_total").await, 2.0);
    relay.stop().await.unwrap();
}
