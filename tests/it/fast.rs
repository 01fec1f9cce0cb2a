//! Fast-ingest batch publish (ADR-50, nats-server 2.14+) on the wire, pinned against
//! the real nats-server: what it stores and in which order, what it refuses, how it
//! treats duplicates, and that the publisher waits for the server's flow acks (seen
//! from a second connection, and against a fake server that stops acking).

use std::time::Duration;

use async_nats::jetstream;
use bytes::Bytes;
use futures::StreamExt;
use jetrelay::nats::{FAST_FLOW, FastError, FastPublisher, Nats, PageRequest};
use jetrelay::outputs::Output;
use serde_json::{Value, json};

use crate::support::*;

pub async fn connect_with(nats: &NatsServer, request_timeout_ms: u64) -> Nats {
    let cfg = jetrelay::config::NatsConfig {
        servers: vec![nats.url().to_string()],
        request_timeout_ms,
        ..Default::default()
    };
    Nats::connect(&jetrelay::daemon::settings::connection(&cfg), false)
        .await
        .unwrap()
}

async fn publisher(nats: &NatsServer) -> FastPublisher {
    connect_with(nats, 5000).await.fast_ingest()
}

/// Creates a stream over the raw API: async-nats is built without `server_2_14`, so
/// its `Config` has no `allow_batched`.
pub async fn batched_stream(
    client: &async_nats::Client,
    name: &str,
    subjects: &[&str],
    batched: bool,
    extra: Value,
) {
    let mut config = json!({
        "name": name,
        "subjects": subjects,
        "storage": "file",
        "allow_direct": true,
        "allow_batched": batched,
    });
    if let (Some(c), Some(e)) = (config.as_object_mut(), extra.as_object()) {
        c.extend(e.clone());
    }
    let answer = client
        .request(
            format!("$JS.API.STREAM.CREATE.{name}"),
            Bytes::from(config.to_string()),
        )
        .await
        .unwrap();
    let answer: Value = serde_json::from_slice(&answer.payload).unwrap();
    assert!(answer.get("error").is_none(), "{answer}");
    assert_eq!(
        answer["config"]["allow_batched"].as_bool().unwrap_or(false),
        batched,
        "{answer}"
    );
}

/// Returns once the server has taken this connection's subscriptions: `flush` only
/// writes them out, a request's answer comes after the server has read them.
pub async fn subscribed(client: &async_nats::Client) {
    client.request("$JS.API.INFO", Bytes::new()).await.unwrap();
}

fn output(subject: &str, id: &str, payload: &str) -> Output {
    Output {
        subject: subject.into(),
        headers: vec![("Nats-Msg-Id".into(), id.into())],
        payload: Bytes::from(payload.to_string()),
    }
}

/// `n` outputs on `f.<i % 5>` with ids `id-<from + i>` and payloads `m<from + i>`.
fn outputs(from: usize, n: usize) -> Vec<Output> {
    (from..from + n)
        .map(|i| {
            output(
                &format!("f.{}", i % 5),
                &format!("id-{i}"),
                &format!("m{i}"),
            )
        })
        .collect()
}

async fn messages(js: &jetstream::Context, name: &str) -> u64 {
    js.get_stream(name)
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .state
        .messages
}

/// Every stored message of `stream`, in sequence order (batch direct get).
pub async fn stored(nats: &Nats, stream: &str) -> Vec<jetrelay::dead_letter::stored::Stored> {
    let mut all = Vec::new();
    let mut seq = 1;
    loop {
        let page = nats
            .direct_page(
                stream,
                &PageRequest {
                    seq,
                    batch: 1000,
                    ..PageRequest::default()
                },
            )
            .await
            .unwrap();
        let last = page.last_seq;
        all.extend(page.messages);
        match last {
            Some(l) if page.pending > 0 => seq = l + 1,
            _ => return all,
        }
    }
}

/// The batch sequence in a fast-ingest reply subject `….<seq>.<op>.$FI`.
fn batch_seq(reply: &str) -> Option<(u64, u8)> {
    let mut t = reply.rsplit('.');
    (t.next()? == "$FI").then_some(())?;
    let op = t.next()?.parse().ok()?;
    let seq = t.next()?.parse().ok()?;
    Some((seq, op))
}

#[tokio::test]
async fn twenty_thousand_messages_are_stored_in_order_at_the_pace_of_the_servers_acks() {
    let nats = NatsServer::start().await;
    let (client, js) = client(&nats).await;
    batched_stream(&client, "F", &["f.>"], true, json!({})).await;
    publish(&js, "f.before", 1).await;
    // A second connection sees, in the server's order, every message of the batch
    // (with its reply subject) and every flow ack the server sends back.
    let observer = async_nats::connect(nats.url()).await.unwrap();
    let mut all = observer.subscribe(">").await.unwrap();
    subscribed(&observer).await;
    let watch = tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Ok(Some(m)) = tokio::time::timeout(Duration::from_secs(3), all.next()).await {
            seen.push(m);
        }
        seen
    });

    let n = 20_000;
    let nats_handle = connect_with(&nats, 5000).await;
    let got = nats_handle
        .fast_ingest()
        .publish(&outputs(0, n))
        .await
        .unwrap();
    assert_eq!(
        (got.stream.as_str(), got.seq, got.count, got.duplicate),
        ("F", n as u64 + 1, n, false)
    );
    assert!(got.acks >= 2, "{got:?}");

    let all = stored(&nats_handle, "F").await;
    assert_eq!(all.len(), n + 1);
    for (i, m) in all[1..].iter().enumerate() {
        assert_eq!(m.seq, i as u64 + 2);
        assert_eq!(m.payload, format!("m{i}").as_bytes(), "in batch order");
        assert_eq!(m.subject, format!("f.{}", i % 5));
        assert!(
            m.headers
                .iter()
                .all(|(name, _)| !name.starts_with("Nats-Batch")),
            "fast ingest carries the protocol in the reply subject, not in headers: {:?}",
            m.headers
        );
    }

    // Flow control, as the server saw it: message 1 goes alone and waits for the
    // first reply; after that a message is only sent while fewer than two acks
    // (of `msgs` messages each) are outstanding.
    let seen = watch.await.unwrap();
    let (mut acked, mut flow, mut acks, mut messages_seen) = (None::<u64>, 0u64, 0, 0);
    let mut ahead = 0;
    for m in &seen {
        if m.subject.starts_with("f.") {
            let Some((seq, op)) = m.reply.as_deref().and_then(batch_seq) else {
                continue;
            };
            if op == 4 {
                // A ping (the publisher waited long for an ack): not a message.
                continue;
            }
            messages_seen += 1;
            let expected_op = match seq {
                1 => 0,
                s if s == n as u64 => 2,
                _ => 1,
            };
            assert_eq!(op, expected_op, "the operation of message {seq}");
            assert!(
                m.reply
                    .as_deref()
                    .unwrap()
                    .contains(&format!(".{FAST_FLOW}.fail.")),
                "{:?}",
                m.reply
            );
            match acked {
                None => assert_eq!(seq, 1, "message {seq} went before the first reply"),
                Some(a) => {
                    assert!(
                        seq <= a + 2 * flow,
                        "message {seq} went with only {a} acked (acks of {flow})"
                    );
                    ahead = ahead.max(seq - a);
                }
            }
        } else if m.subject.ends_with(".$FI") {
            let v: Value = serde_json::from_slice(&m.payload).unwrap();
            if v["type"] == "ack" {
                acks += 1;
                acked = Some(acked.unwrap_or(0).max(v["seq"].as_u64().unwrap()));
                flow = flow.max(v["msgs"].as_u64().unwrap());
            }
        }
    }
    assert_eq!(messages_seen, n);
    assert!(flow >= 1 && flow <= FAST_FLOW as u64, "{flow}");
    assert!(
        acks as u64 >= n as u64 / (2 * flow),
        "{acks} acks of {flow} messages for {n}"
    );
    assert!(
        ahead > 1,
        "more than one message in flight at a time: {ahead}"
    );
}

#[tokio::test]
async fn a_stream_without_allow_batched_refuses_the_batch_and_stores_nothing() {
    let nats = NatsServer::start().await;
    let (client, js) = client(&nats).await;
    batched_stream(&client, "PLAIN", &["f.>"], false, json!({})).await;
    let handle = connect_with(&nats, 5000).await;
    let e = handle
        .fast_ingest()
        .publish(&outputs(0, 50))
        .await
        .unwrap_err();
    assert!(matches!(e.error, FastError::NotEnabled), "{e:?}");
    assert_eq!(e.confirmed, 0);
    assert!(e.error.to_string().contains("allow_batched"));
    assert_eq!(messages(&js, "PLAIN").await, 0);
    // A one-message batch is refused the same way.
    let e = handle
        .fast_ingest()
        .publish(&outputs(0, 1))
        .await
        .unwrap_err();
    assert!(matches!(e.error, FastError::NotEnabled), "{e:?}");

    batched_stream(&client, "FAST", &["g.>"], true, json!({})).await;
    // Whether a stream takes them is read with its config, listed or looked up.
    let batched = |name: &str, listed: &[jetrelay::nats::Listed]| {
        listed
            .iter()
            .find(|l| l.capture.stream == name)
            .map(|l| l.capture.batched)
    };
    let listed = handle.stream_captures().await.unwrap();
    assert_eq!(batched("PLAIN", &listed), Some(false));
    assert_eq!(batched("FAST", &listed), Some(true));
    assert_eq!(batched("NOPE", &listed), None);
    let found = handle.capturing("g.x").await.unwrap();
    assert!(found.len() == 1 && found[0].stream == "FAST" && found[0].batched);

    let e = handle
        .fast_ingest()
        .publish(&[
            output("nowhere.x", "n-1", "x"),
            output("nowhere.x", "n-2", "y"),
        ])
        .await
        .unwrap_err();
    assert!(matches!(e.error, FastError::NoStream(_)), "{e:?}");
}

#[tokio::test]
async fn duplicates_by_id_are_not_stored_twice_and_a_batch_of_them_stores_nothing() {
    let nats = NatsServer::start().await;
    let (client, js) = client(&nats).await;
    batched_stream(&client, "F", &["f.>"], true, json!({})).await;
    let p = publisher(&nats).await;
    let first = p.publish(&outputs(0, 100)).await.unwrap();
    assert_eq!((first.seq, first.count, first.duplicate), (100, 100, false));

    // Half of these were stored before: only the new half is stored, and the
    // PubAck's seq is the last one this batch stored.
    let mixed = p.publish(&outputs(50, 100)).await.unwrap();
    assert_eq!((mixed.seq, mixed.count), (150, 100), "{mixed:?}");
    assert!(
        !mixed.duplicate,
        "a mixed batch stored something new: {mixed:?}"
    );
    assert_eq!(messages(&js, "F").await, 150);

    // All of them stored before: the PubAck says seq 0, nothing new.
    let again = p.publish(&outputs(0, 150)).await.unwrap();
    assert_eq!((again.seq, again.count, again.duplicate), (0, 150, true));
    assert_eq!(messages(&js, "F").await, 150);

    // A one-message batch that is a duplicate gets a plain duplicate PubAck, with
    // the sequence stored before.
    let one = p.publish(&outputs(7, 1)).await.unwrap();
    assert_eq!((one.seq, one.count, one.duplicate), (8, 1, true), "{one:?}");

    // The same id twice within one batch: stored once.
    let twice = vec![
        output("f.x", "t-1", "a"),
        output("f.x", "t-2", "b"),
        output("f.x", "t-1", "c"),
        output("f.x", "t-3", "d"),
    ];
    let got = p.publish(&twice).await.unwrap();
    assert_eq!((got.seq, got.count, got.duplicate), (153, 4, false));
    assert_eq!(messages(&js, "F").await, 153);
    let handle = connect_with(&nats, 5000).await;
    let tail: Vec<Bytes> = stored(&handle, "F").await[150..]
        .iter()
        .map(|m| m.payload.clone())
        .collect();
    assert_eq!(tail, ["a", "b", "d"]);
}

#[tokio::test]
async fn a_message_the_stream_refuses_ends_the_batch_and_nothing_after_it_is_stored() {
    let nats = NatsServer::start().await;
    let (client, js) = client(&nats).await;
    batched_stream(
        &client,
        "SMALL",
        &["f.>"],
        true,
        json!({ "max_msg_size": 300 }),
    )
    .await;
    let mut batch = outputs(0, 10);
    batch[4].payload = Bytes::from(vec![b'x'; 1000]);
    let e = publisher(&nats).await.publish(&batch).await.unwrap_err();
    assert!(matches!(e.error, FastError::TooLarge(_)), "{e:?}");
    assert!(e.confirmed <= 4, "{e:?}");
    // Gap mode `fail`: the refused message leaves a gap, and the batch ends there.
    eventually("the batch settled", Duration::from_secs(5), || async {
        messages(&js, "SMALL").await == 4
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(messages(&js, "SMALL").await, 4, "nothing after the refusal");
}

/// A fake "stream": a plain subscriber that answers the first message with a flow
/// ack, acks up to 100 when message 200 arrives, and then never again. Returns the
/// batch sequences and operations it received.
async fn fake_server(
    client: async_nats::Client,
    subject: &str,
) -> tokio::task::JoinHandle<Vec<(u64, u8)>> {
    let mut sub = client.subscribe(subject.to_string()).await.unwrap();
    subscribed(&client).await;
    tokio::spawn(async move {
        let mut got = Vec::new();
        while let Ok(Some(m)) = tokio::time::timeout(Duration::from_secs(2), sub.next()).await {
            let reply = m.reply.unwrap().to_string();
            let (seq, op) = batch_seq(&reply).unwrap();
            got.push((seq, op));
            let ack = match (seq, op) {
                (1, 0) => Some(json!({"type": "ack", "seq": 0, "msgs": 100})),
                (200, 1) => Some(json!({"type": "ack", "seq": 100, "msgs": 100})),
                _ => None,
            };
            if let Some(ack) = ack {
                client
                    .publish(reply, Bytes::from(ack.to_string()))
                    .await
                    .unwrap();
            }
        }
        got
    })
}

#[tokio::test]
async fn publishing_stalls_at_two_outstanding_acks_pings_and_times_out_with_what_was_acked() {
    let nats = NatsServer::start().await;
    let (client, _) = client(&nats).await;
    let fake = fake_server(client, "fake.>").await;
    // Patience 2 s: a ping every ~0.7 s of stall, far more than the fake needs to
    // answer (a slow machine must not turn an ack into a ping's reason).
    let p = connect_with(&nats, 2000).await.fast_ingest();
    let batch: Vec<Output> = (0..1000)
        .map(|i| output("fake.x", &format!("id-{i}"), "x"))
        .collect();
    let started = tokio::time::Instant::now();
    let e = p.publish(&batch).await.unwrap_err();
    let took = started.elapsed();
    assert!(matches!(e.error, FastError::Timeout), "{e:?}");
    assert_eq!(e.confirmed, 100, "what the last ack covered");
    assert!(
        took < Duration::from_secs(20),
        "bounded by the request timeout: {took:?}"
    );
    let got = fake.await.unwrap();
    let data: Vec<u64> = got
        .iter()
        .filter(|(_, op)| *op != 4)
        .map(|(s, _)| *s)
        .collect();
    // 0 + 100 × 2 ≤ 200: it waits after 200; the ack for 100 lets it go to 300.
    assert_eq!(data, (1..=300).collect::<Vec<_>>());
    let pings: Vec<u64> = got
        .iter()
        .filter(|(_, op)| *op == 4)
        .map(|(s, _)| *s)
        .collect();
    assert!(
        pings.contains(&300),
        "a stalled publisher pings with the highest sequence sent: {pings:?}"
    );
    assert!(
        pings.iter().all(|s| *s == 200 || *s == 300),
        "pings carry the highest sequence sent then: {pings:?}"
    );

    // Nobody answers the first message at all: a timeout, nothing more sent.
    let (client, _) = crate::support::client(&nats).await;
    let silent = client.subscribe("quiet.>").await.unwrap();
    subscribed(&client).await;
    let started = tokio::time::Instant::now();
    let e = p
        .publish(&[output("quiet.x", "q-1", "a"), output("quiet.x", "q-2", "b")])
        .await
        .unwrap_err();
    assert!(matches!(e.error, FastError::Timeout), "{e:?}");
    assert!(started.elapsed() < Duration::from_secs(20));
    drop(silent);
}
