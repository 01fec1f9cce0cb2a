//! Processed once: messages whose `Nats-TTL` passes are dead-lettered unsent, and
//! (with `delivery.idempotency_bucket`) a message the app answered 2xx is never sent
//! again, whatever redelivers it.

use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, stream};

use crate::support::*;

const T: Duration = Duration::from_secs(30);

/// A stream on `subjects` that takes per-message TTLs.
async fn ttl_stream(js: &jetstream::Context, name: &str, subjects: &[&str]) {
    js.create_stream(stream::Config {
        name: name.to_string(),
        subjects: subjects.iter().map(|s| s.to_string()).collect(),
        allow_message_ttl: true,
        ..Default::default()
    })
    .await
    .unwrap();
}

/// Publishes `body` to `subject` with the headers given, awaiting its PubAck.
async fn publish_with(
    js: &jetstream::Context,
    subject: &str,
    body: &str,
    headers: &[(&str, &str)],
) {
    let mut h = HeaderMap::new();
    for (n, v) in headers {
        h.insert(*n, *v);
    }
    js.publish_with_headers(subject.to_string(), h, body.to_string().into())
        .await
        .unwrap()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_nats_ttl_that_passes_while_held_or_between_retries_ends_the_message_unsent() {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    let (stream, durable) = (unique("S"), unique("d"));
    ttl_stream(&js, &stream, &["ttl.>"]).await;
    // One request at a time: the first takes 3 s, so the second (TTL 1 s) expires
    // while it waits; the third (TTL 6 s) is answered 503 until its next retry would
    // come after its expiry.
    let app = MockApp::start(|r, _| match r.body.as_ref() {
        b"slow" => Reply::status(200).after(Duration::from_secs(3)),
        b"busy" => Reply::status(503),
        _ => Reply::status(200),
    })
    .await;
    let relay = Relay::ready(durable_config(
        &nats,
        &app,
        &stream,
        &durable,
        r#"
        [delivery]
        max_in_flight = 1
        retry_initial_ms = 500
        "#,
    ))
    .await;
    publish_with(&js, "ttl.a", "slow", &[]).await;
    publish_with(&js, "ttl.a", "short", &[("Nats-TTL", "1s")]).await;
    publish_with(&js, "ttl.a", "busy", &[("Nats-TTL", "6")]).await;
    eventually("both expired", T, || async {
        relay.metric("jetrelay_expired_total").await == 2.0
    })
    .await;
    let bodies: Vec<String> = app
        .requests()
        .iter()
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .collect();
    assert!(
        !bodies.iter().any(|b| b == "short"),
        "never sent: {bodies:?}"
    );
    let busy = bodies.iter().filter(|b| *b == "busy").count();
    assert!(busy >= 2, "retried before it expired: {bodies:?}");
    let first_busy = app
        .requests()
        .into_iter()
        .find(|r| r.body.as_ref() == b"busy")
        .unwrap();
    let last_busy = app
        .requests()
        .into_iter()
        .rfind(|r| r.body.as_ref() == b"busy")
        .unwrap();
    assert!(
        last_busy.wall - first_busy.wall < time::Duration::seconds(4),
        "no request after the expiry"
    );
    assert_eq!(
        relay
            .metric("jetrelay_messages_settled_total{action=\"term\"}")
            .await,
        2.0
    );
    assert_eq!(
        relay
            .metric("jetrelay_message_age_seconds_count{stage=\"expired\"}")
            .await,
        2.0
    );
    eventually("nothing left", T, || {
        consumer_drained(&js, &stream, &durable)
    })
    .await;
    relay.stop().await.unwrap();
}
