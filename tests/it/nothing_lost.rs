//! Nothing lost: an app that is down burns no attempts, a dead letter that cannot be
//! published yet is kept, one too large goes without its payload, dead letters of two
//! consumers are both kept, and the bytes held stay within `max_buffered_bytes`.

use std::time::Duration;

use async_nats::jetstream;
use jetrelay::ops::readiness::State;

use crate::support::app::free_port;
use crate::support::groups::member_config;
use crate::support::groups::static_group;
use crate::support::*;

const T: Duration = Duration::from_secs(30);

async fn dlq_stream(js: &jetstream::Context, name: &str, subject: &str) {
    create_stream(js, name, &[subject]).await;
}

async fn stream_messages(
    js: &jetstream::Context,
    stream: &str,
) -> Vec<jetstream::message::StreamMessage> {
    let s = js.get_stream(stream).await.unwrap();
    let last = s.cached_info().state.last_sequence;
    let mut out = Vec::new();
    for seq in 1..=last {
        if let Ok(m) = s.get_raw_message(seq).await {
            out.push(m);
        }
    }
    out
}

async fn stored(js: &jetstream::Context, stream: &str) -> u64 {
    js.get_stream(stream)
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .state
        .messages
}

#[tokio::test]
async fn an_app_that_is_down_burns_no_attempts_and_delivery_resumes_when_it_is_back() {
    let env = Env::start(&["u.>"]).await;
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/messages");
    // max_deliver 3 would terminate everything within a second if refused connections
    // counted; ack_wait 2 s is shorter than the outage, so only +WPI keeps them.
    let extra = "[delivery]\nretry_initial_ms = 100\nretry_max_ms = 400\n\
                 [consumer]\nmax_deliver = 3\nack_wait_ms = 2000\n";
    let relay = Relay::ready(durable_config_for(
        env.nats.url(),
        &url,
        &env.stream,
        &env.durable,
        extra,
    ))
    .await;
    publish(&env.js, "u.x", 20).await;

    let mut status = relay.health.subscribe();
    let down = tokio::time::timeout(T, status.wait_for(|s| !s.ready))
        .await
        .expect("not ready while the app is down")
        .unwrap()
        .clone();
    assert_eq!(down.state, State::NotReady);
    assert_eq!(down.reason, "app unreachable: connection refused");
    assert_eq!(
        relay.metric("jetrelay_app_healthy").await,
        0.0,
        "an app that cannot be reached is not healthy, probe or no probe"
    );
    // Probes keep failing for longer than the ack wait and max_deliver allow.
    eventually("several refused probes", T, || async {
        relay
            .metric("jetrelay_http_requests_total{class=\"error\"}")
            .await
            >= 6.0
    })
    .await;
    // Three rounds of keep-alives: held for longer than the ack wait.
    eventually("keep-alives sent", T, || async {
        relay.metric("jetrelay_progress_sent_total").await >= 60.0
    })
    .await;
    for action in ["term", "dlq", "nak"] {
        let sample = format!("jetrelay_messages_settled_total{{action=\"{action}\"}}");
        assert_eq!(relay.metric(&sample).await, 0.0, "{action}");
    }

    let app = MockApp::start_on(port, |_, _| Reply::status(200)).await;
    eventually("every message acked", T, || async {
        app.acked_seqs().len() == 20
    })
    .await;
    eventually("drained", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    assert!(
        app.requests()
            .iter()
            .all(|r| r.header("nats-delivered") == Some("1")),
        "no attempt was counted and nothing was redelivered"
    );
    assert_eq!(relay.metric("jetrelay_redeliveries_total").await, 0.0);
    tokio::time::timeout(
        T,
        status.wait_for(|s| s.ready && s.state == State::Consuming),
    )
    .await
    .expect("ready again")
    .unwrap();
    assert_eq!(relay.metric("jetrelay_app_healthy").await, 1.0);
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn a_dead_letter_that_cannot_be_published_on_the_last_delivery_is_kept_until_it_can() {
    let app = MockApp::start(|_, _| Reply::status(400)).await;
    let env = Env::start(&["l.>"]).await;
    // No stream captures the DLQ subject yet; the first delivery is the last one.
    let extra = "[dlq]\nsubject = \"dead.l\"\n[consumer]\nmax_deliver = 1\n\
                 [delivery]\nretry_initial_ms = 100\nretry_max_ms = 300\n";
    let relay = env.relay(&app, extra).await;
    publish(&env.js, "l.x", 1).await;
    eventually("the dead letter failed a few times", T, || async {
        relay.metric("jetrelay_dlq_failures_total").await >= 3.0
    })
    .await;
    assert_eq!(app.requests().len(), 1, "the app is not asked again");

    let dead = unique("DLQ");
    dlq_stream(&env.js, &dead, "dead.l").await;
    eventually("dead-lettered", T, || async {
        stored(&env.js, &dead).await == 1
    })
    .await;
    eventually("terminated", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    assert_eq!(relay.settled("dlq").await, 1.0);
    let letter = &stream_messages(&env.js, &dead).await[0];
    assert_eq!(letter.payload.as_ref(), b"m0");
    assert_eq!(
        letter
            .headers
            .get("Jetrelay-Dlq-Status")
            .map(|v| v.as_str()),
        Some("400")
    );
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn a_dead_letter_too_large_for_its_headers_goes_without_its_payload() {
    let app = MockApp::start(|_, _| Reply::status(400)).await;
    let env = Env::start(&["big.>"]).await;
    let dead = unique("DLQ");
    dlq_stream(&env.js, &dead, "dead.big").await;
    let extra = "[dlq]\nsubject = \"dead.big\"\n";
    let relay = env.relay(&app, extra).await;
    // Fits the server's 1 MiB alone, not with the dead letter's headers.
    let payload = vec![b'x'; 1_048_570];
    env.js
        .publish("big.x", payload.into())
        .await
        .unwrap()
        .await
        .unwrap();
    eventually("dead-lettered", T, || async {
        stored(&env.js, &dead).await == 1
    })
    .await;
    eventually("terminated", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    let letter = &stream_messages(&env.js, &dead).await[0];
    assert!(letter.payload.is_empty());
    assert_eq!(
        letter
            .headers
            .get("Jetrelay-Dlq-Payload-Omitted")
            .map(|v| v.as_str()),
        Some("1048570")
    );
    assert_eq!(
        letter
            .headers
            .get("Jetrelay-Dlq-Sequence")
            .map(|v| v.as_str()),
        Some("1"),
        "the original stays in its stream under this sequence"
    );
    assert_eq!(stored(&env.js, &env.stream).await, 1);
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn messages_whose_letters_are_too_large_even_without_payload_never_stall_the_consumer() {
    // Just under 64 KiB of headers each: a letter with them (jetrelay adds its own)
    // is over JetStream's header limit.
    // Refused by the app, with max_buffered 4: they are dead-lettered without their
    // headers, and the good messages behind them flow.
    let app = MockApp::start(|r, _| {
        if r.header("X-Big").is_some() {
            Reply::status(400)
        } else {
            Reply::status(200)
        }
    })
    .await;
    let env = Env::start(&["fat.>"]).await;
    let dead = unique("DLQ");
    dlq_stream(&env.js, &dead, "dead.fat").await;
    let extra = "[dlq]\nsubject = \"dead.fat\"\n[delivery]\nmax_buffered = 4\nmax_in_flight = 4\n";
    let relay = Relay::ready(durable_config(
        &env.nats,
        &app,
        &env.stream,
        &env.durable,
        extra,
    ))
    .await;
    for i in 0..4 {
        let mut h = async_nats::HeaderMap::new();
        h.insert("X-Big", "h".repeat(65_400).as_str());
        h.insert("X-Small", format!("{i}").as_str());
        env.js
            .publish_with_headers("fat.x", h, "fat".into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    publish(&env.js, "fat.y", 20).await;
    eventually("every message settled", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    assert_eq!(app.acked_seqs().len(), 20, "the good ones were delivered");
    let letters = stream_messages(&env.js, &dead).await;
    assert_eq!(letters.len(), 4);
    for l in &letters {
        assert!(l.headers.get("X-Big").is_none() && l.headers.get("X-Small").is_none());
        let omitted: usize = l
            .headers
            .get("Jetrelay-Dlq-Headers-Omitted")
            .unwrap()
            .as_str()
            .parse()
            .unwrap();
        assert!(omitted > 65_400, "{omitted}");
        assert!(l.headers.get("Jetrelay-Dlq-Payload-Omitted").is_some());
    }
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn letters_the_dlq_never_stores_are_kept_within_a_bound_and_the_rest_flows() {
    // No stream captures the DLQ subject and the first delivery is the last: the
    // letters cannot be stored. max_buffered 8: at most 2 are kept, the others are
    // terminated without one, and the good messages flow; /ready and a gauge say so.
    let app = MockApp::start(|r, _| {
        if String::from_utf8_lossy(&r.body).starts_with("bad") {
            Reply::status(400)
        } else {
            Reply::status(200)
        }
    })
    .await;
    let env = Env::start(&["nl.>"]).await;
    let extra = "[dlq]\nsubject = \"nowhere.letters\"\n[consumer]\nmax_deliver = 1\n\
                 [delivery]\nmax_buffered = 8\nmax_in_flight = 8\nretry_initial_ms = 100\nretry_max_ms = 200\n";
    let relay = Relay::ready(durable_config(
        &env.nats,
        &app,
        &env.stream,
        &env.durable,
        extra,
    ))
    .await;
    for i in 0..6 {
        env.js
            .publish("nl.bad", format!("bad {i}").into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    publish(&env.js, "nl.good", 30).await;
    eventually("the good ones delivered", T, || async {
        app.requests()
            .iter()
            .filter(|r| !String::from_utf8_lossy(&r.body).starts_with("bad"))
            .count()
            == 30
    })
    .await;
    eventually("two letters wait", T, || async {
        relay.metric("jetrelay_dead_letters_waiting").await == 2.0
    })
    .await;
    let status = relay.health.status();
    assert!(status.ready, "{status:?}");
    assert_eq!(
        status.reason,
        "2 message(s) wait for their dead letter: the DLQ does not store it yet"
    );
    assert_eq!(
        relay.settled("term").await,
        4.0,
        "the others, terminated without a letter"
    );
    // The DLQ comes: the two kept are dead-lettered.
    let dead = unique("DLQ");
    dlq_stream(&env.js, &dead, "nowhere.letters").await;
    eventually("the kept ones stored", T, || async {
        stored(&env.js, &dead).await == 2
    })
    .await;
    eventually("nothing waits", T, || async {
        relay.metric("jetrelay_dead_letters_waiting").await == 0.0
            && relay.health.status().reason.is_empty()
    })
    .await;
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn a_dead_letter_id_taken_beforehand_does_not_lose_the_letter() {
    // Someone publishes under the id jetrelay will give the letter of sequence 1:
    // the duplicate PubAck is checked, and the letter is stored under another id.
    let app = MockApp::start(|_, _| Reply::status(400)).await;
    let env = Env::start(&["pre.>"]).await;
    let dead = unique("DLQ");
    dlq_stream(&env.js, &dead, "dead.pre").await;
    let mut h = async_nats::HeaderMap::new();
    let id = format!("jetrelay-dlq:{}:{}:1", env.stream, env.durable);
    h.insert("Nats-Msg-Id", id.as_str());
    env.js
        .publish_with_headers("dead.pre", h, "squatter".into())
        .await
        .unwrap()
        .await
        .unwrap();
    let extra = "[dlq]\nsubject = \"dead.pre\"\n";
    let relay = Relay::ready(durable_config(
        &env.nats,
        &app,
        &env.stream,
        &env.durable,
        extra,
    ))
    .await;
    publish(&env.js, "pre.x", 1).await;
    eventually("dead-lettered", T, || async {
        stored(&env.js, &dead).await == 2
    })
    .await;
    let letters = stream_messages(&env.js, &dead).await;
    let letter = &letters[1];
    assert_eq!(letter.payload.as_ref(), b"m0");
    assert_eq!(
        letter.headers.get("Nats-Msg-Id").map(|v| v.to_string()),
        Some(format!("{id}:1")),
        "under the id and the squatter's sequence"
    );
    eventually("terminated", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn the_dead_letters_of_two_consumers_of_one_message_are_both_kept() {
    let app = MockApp::start(|_, _| Reply::status(400)).await;
    let env = Env::start(&["two.>"]).await;
    let dead = unique("DLQ");
    dlq_stream(&env.js, &dead, "dead.two").await;
    let extra = "[dlq]\nsubject = \"dead.two\"\n";
    let other = unique("d");
    let a = env.relay(&app, extra).await;
    let b = Relay::ready(durable_config(&env.nats, &app, &env.stream, &other, extra)).await;
    publish(&env.js, "two.x", 1).await;
    eventually("both dead-lettered", T, || async {
        stored(&env.js, &dead).await == 2
    })
    .await;
    let ids: std::collections::BTreeSet<String> = stream_messages(&env.js, &dead)
        .await
        .iter()
        .map(|m| m.headers.get("Nats-Msg-Id").unwrap().to_string())
        .collect();
    assert_eq!(
        ids,
        [
            format!("jetrelay-dlq:{}:{}:1", env.stream, env.durable),
            format!("jetrelay-dlq:{}:{other}:1", env.stream)
        ]
        .into_iter()
        .collect()
    );
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}

const KB100: usize = 100_000;

#[tokio::test]
async fn the_payload_bytes_held_stay_within_max_buffered_bytes() {
    let gate = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let open = gate.clone();
    // Slow until the gate opens, so that everything the daemon can hold is held.
    let app = MockApp::start(move |_, _| {
        let slow = !open.load(std::sync::atomic::Ordering::SeqCst);
        Reply::status(200).after(Duration::from_millis(if slow { 1500 } else { 0 }))
    })
    .await;
    let env = Env::start(&["b.>"]).await;
    let extra = "[delivery]\nmax_in_flight = 32\nmax_buffered = 256\nmax_buffered_bytes = 500000\n";
    let relay = env.relay(&app, extra).await;
    for _ in 0..40 {
        env.js
            .publish("b.x", vec![b'p'; KB100].into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let mut most = 0;
    let until = tokio::time::Instant::now() + Duration::from_secs(4);
    while tokio::time::Instant::now() < until {
        let info = consumer_info(&env.js, &env.stream, &env.durable)
            .await
            .unwrap();
        most = most.max(info.num_ack_pending);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(most >= 1, "something was held");
    assert!(
        most <= 500_000 / KB100,
        "{most} messages of 100 kB were held with max_buffered_bytes = 500000"
    );
    assert!(app.max_in_flight() <= 5, "{}", app.max_in_flight());
    gate.store(true, std::sync::atomic::Ordering::SeqCst);
    eventually("all delivered", T, || async {
        app.acked_seqs().len() == 40
    })
    .await;
    eventually("drained", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn a_member_full_in_bytes_keeps_its_pin() {
    let (nats, js, stream, _admin) = static_group(1, &["m1"]).await;
    let gate = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let open = gate.clone();
    let app_a = MockApp::start(move |_, _| {
        let slow = !open.load(std::sync::atomic::Ordering::SeqCst);
        Reply::status(200).after(Duration::from_millis(if slow { 7000 } else { 0 }))
    })
    .await;
    let app_b = MockApp::ok().await;
    // Two messages fill the bytes; the pin timeout (= ack_wait) is 2 s, far shorter
    // than the app's answers.
    let extra = "[delivery]\nmax_buffered_bytes = 250000\n[http]\ntimeout_ms = 20000\n\
                 [consumer]\nack_wait_ms = 2000\n";
    let a = Relay::ready(member_config(
        &nats, &app_a, "static", &stream, "cg", "m1", extra,
    ))
    .await;
    for _ in 0..10 {
        js.publish("o.k", vec![b'p'; KB100].into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    eventually("A pinned and busy", T, || async {
        a.health.status().pinned && app_a.arrivals() >= 1
    })
    .await;
    let b = Relay::ready(member_config(
        &nats, &app_b, "static", &stream, "cg", "m1", extra,
    ))
    .await;
    // Three pin timeouts with A full in bytes: its keep-alive pulls keep the pin. What
    // must not happen (a takeover) can only be waited out.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(a.health.status().pinned, "A lost its pin while full");
    assert_eq!(app_b.arrivals(), 0, "B was served while A held the pin");
    assert!(app_a.arrivals() <= 2, "{} held", app_a.arrivals());
    gate.store(true, std::sync::atomic::Ordering::SeqCst);
    eventually("all delivered by A", T, || async {
        app_a.acked_seqs().len() == 10
    })
    .await;
    b.stop().await.unwrap();
    a.stop().await.unwrap();
}

#[tokio::test]
async fn a_message_whose_subject_is_not_utf8_is_dead_lettered_and_the_connection_stays_up() {
    let app = MockApp::ok().await;
    let env = Env::start(&["ms.>"]).await;
    let dead = unique("DLQ");
    dlq_stream(&env.js, &dead, "dead.ms").await;
    // The server stores what a publisher sends; the client dropped its connection on
    // every delivery of such a message (and the message came back after each one).
    let block = b"NATS/1.0\r\nGood: yes\r\n\r\n";
    raw_hpub(env.nats.url(), b"ms.caf\xe9", None, block, b"bad0").await;
    publish(&env.js, "ms.good", 20).await;
    let extra = "[dlq]\nsubject = \"dead.ms\"\n";
    let relay = env.relay(&app, extra).await;
    eventually("the good ones delivered", T, || async {
        app.acked_seqs().len() == 20
    })
    .await;
    eventually("the bad one dead-lettered", T, || async {
        stored(&env.js, &dead).await == 1
    })
    .await;
    assert!(app.requests().iter().all(|r| r.seq() > 1));
    let letters = stream_messages(&env.js, &dead).await;
    assert_eq!(letters[0].payload.as_ref(), b"bad0");
    let reason = letters[0].headers.get("Jetrelay-Dlq-Reason").unwrap();
    assert!(
        reason.as_str().starts_with("jetrelay: malformed_subject: "),
        "{reason}"
    );
    let series = "jetrelay_invalid_messages_total{reason=\"malformed_subject\"}";
    assert_eq!(relay.metric(series).await, 1.0);
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn messages_whose_headers_do_not_parse_are_dead_lettered_and_the_rest_flows() {
    let app = MockApp::ok().await;
    let env = Env::start(&["mh.>"]).await;
    let dead = unique("DLQ");
    dlq_stream(&env.js, &dead, "dead.mh").await;
    let bad: [&[u8]; 8] = [
        b"NATS/1.0\r\nBad Name: v\r\nGood: yes\r\n\r\n",
        b"NATS/1.0\r\nN\xc3\xa4me: v\r\nGood: yes\r\n\r\n",
        b"NATS/1.0\r\nno colon here\r\nGood: yes\r\n\r\n",
        b"NATS/1.0\r\nX-Latin1: caf\xe9\r\nGood: yes\r\n\r\n",
        // A CR or LF alone inside a value: the client's parser panicked on it, the
        // connection died and the process with it, on every delivery.
        b"NATS/1.0\r\nX-Bad: a\rb\r\nGood: yes\r\n\r\n",
        b"NATS/1.0\r\nX-Bad: a\nb\r\nGood: yes\r\n\r\n",
        b"NATS/1.0\r\nX-Bad: a\r\n b\rc\r\nGood: yes\r\n\r\n",
        // No name at all (the fuzz target's find): the client kept it as a header.
        b"NATS/1.0\r\n: v\r\nGood: yes\r\n\r\n",
    ];
    for (i, block) in bad.iter().enumerate() {
        raw_publish(
            env.nats.url(),
            "mh.bad",
            block,
            format!("bad{i}").as_bytes(),
        )
        .await;
    }
    publish(&env.js, "mh.good", 20).await;
    let extra = "[dlq]\nsubject = \"dead.mh\"\n";
    let relay = env.relay(&app, extra).await;

    eventually("the good ones delivered", T, || async {
        app.acked_seqs().len() == 20
    })
    .await;
    eventually("the bad ones dead-lettered", T, || async {
        stored(&env.js, &dead).await == bad.len() as u64
    })
    .await;
    eventually("all settled", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    assert!(
        app.requests().iter().all(|r| r.seq() > bad.len() as u64),
        "no malformed message reached the app"
    );
    let letters = stream_messages(&env.js, &dead).await;
    for (i, letter) in letters.iter().enumerate() {
        assert_eq!(letter.payload.as_ref(), format!("bad{i}").as_bytes());
        let reason = letter
            .headers
            .get("Jetrelay-Dlq-Reason")
            .unwrap()
            .to_string();
        assert!(
            reason.starts_with("jetrelay: malformed_headers: "),
            "{reason}"
        );
        assert_eq!(
            letter.headers.get("Good").map(|v| v.as_str()),
            Some("yes"),
            "the lines that parse are kept"
        );
    }
    assert_eq!(
        relay
            .metric("jetrelay_invalid_messages_total{reason=\"malformed_headers\"}")
            .await,
        bad.len() as f64
    );
    assert_eq!(relay.settled("dlq").await, bad.len() as f64);
    relay.stop().await.unwrap();
}
