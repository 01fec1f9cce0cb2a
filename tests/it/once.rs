//! Processed once: messages whose `Nats-TTL` passes are dead-lettered unsent, and
//! (with `delivery.idempotency_bucket`) a message the app answered 2xx is never sent
//! again, whatever redelivers it: a lost ack, a `Nats-Msg-Id` sent again after the
//! duplicate window, or a partition of an elastic group that moves to another member.

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
    assert_eq!(relay.settled("term").await, 2.0);
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

/// A new bucket, with per-key TTLs (as jetrelay makes it) or without.
async fn new_bucket(js: &jetstream::Context, ttls: bool) -> String {
    let name = unique("marks");
    if ttls {
        new_bucket_named(js, &name).await;
    } else {
        js.create_key_value(jetstream::kv::Config {
            bucket: name.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    }
    name
}

/// A bucket named `name`, with per-key TTLs, as jetrelay makes it.
async fn new_bucket_named(js: &jetstream::Context, name: &str) {
    js.create_key_value(jetstream::kv::Config {
        bucket: name.to_string(),
        limit_markers: Some(Duration::from_secs(1)),
        ..Default::default()
    })
    .await
    .unwrap();
}

/// The markers' bucket's keys, decoded: `(scope, id)` with the id as
/// `i<Nats-Msg-Id>` or `s<stream>:<sequence>`.
async fn marker_ids(js: &jetstream::Context, bucket: &str) -> Vec<(String, String)> {
    use base64::Engine as _;
    use futures::StreamExt;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let kv = js.get_key_value(bucket).await.unwrap();
    let mut keys = match kv.keys().await {
        Ok(k) => k,
        Err(_) => return Vec::new(),
    };
    let mut out = Vec::new();
    while let Some(k) = keys.next().await {
        let k = k.unwrap();
        let (scope, id) = k.split_once('.').unwrap();
        let text = |s: &str| String::from_utf8(b64.decode(s).unwrap()).unwrap();
        out.push((text(scope), format!("{}{}", &id[..1], text(&id[1..]))));
    }
    out.sort();
    out
}

#[tokio::test]
async fn a_lost_ack_redelivers_a_processed_message_that_the_app_never_sees_again() {
    let nats = NatsServer::start().await;
    let proxy = crate::support::proxy::AckDropper::start(nats.url())
        .await
        .unwrap();
    let (_, js) = client(&nats).await;
    let (stream, durable, bucket) = (unique("S"), unique("d"), unique("marks"));
    create_stream(&js, &stream, &["once.>"]).await;
    let app = MockApp::ok().await;
    let config = durable_config_at(
        proxy.url(),
        &app,
        &stream,
        &durable,
        &format!("[consumer]\nack_wait_ms = 1000\n[delivery]\nidempotency_bucket = \"{bucket}\"\n"),
    );
    let relay = Relay::ready(config).await;
    proxy.drop_acks(true);
    publish(&js, "once.a", 1).await;
    eventually("the ack was lost", T, || async { proxy.dropped() >= 1 }).await;
    proxy.drop_acks(false);
    eventually("redelivered and acked", T, || {
        consumer_drained(&js, &stream, &durable)
    })
    .await;
    assert_eq!(app.requests().len(), 1, "the app saw it once");
    assert!(relay.metric("jetrelay_redeliveries_total").await >= 1.0);
    assert_eq!(
        relay.metric("jetrelay_duplicates_suppressed_total").await,
        1.0
    );
    assert_eq!(
        marker_ids(&js, &bucket).await,
        [(durable.clone(), format!("s{stream}:1"))],
        "without a Nats-Msg-Id the key is the stream and sequence"
    );
    let mut s = js.get_stream(format!("KV_{bucket}")).await.unwrap();
    let last = s.info().await.unwrap().state.last_sequence;
    let digest: String = jetrelay::seam::markers::digest("once.a", b"m0")
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        s.get_raw_message(last).await.unwrap().payload,
        format!("v1 {stream} 1 {digest}"),
        "the marker records the message: its stream, sequence and digest"
    );
    relay.stop().await.unwrap();
}

/// A stream on `once.>` whose duplicate window is half a second.
async fn short_window_stream(js: &jetstream::Context, name: &str) {
    js.create_stream(stream::Config {
        name: name.to_string(),
        subjects: vec!["once.>".into()],
        duplicate_window: Duration::from_millis(500),
        ..Default::default()
    })
    .await
    .unwrap();
}

/// Publishes `payload` with `Nats-Msg-Id: id` until the stream stores it (its
/// duplicate window for the id has passed).
async fn publish_past_the_window(js: &jetstream::Context, id: &str, payload: &'static str) {
    eventually("stored again", T, || async {
        let mut h = HeaderMap::new();
        h.insert("Nats-Msg-Id", id);
        let ack = js
            .publish_with_headers("once.a", h, payload.into())
            .await
            .unwrap()
            .await
            .unwrap();
        !ack.duplicate
    })
    .await;
}

/// The requests' bodies, and what each said of a conflicting marker.
fn conflicts(app: &MockApp) -> Vec<(String, Option<String>)> {
    app.requests()
        .iter()
        .map(|r| {
            (
                String::from_utf8_lossy(&r.body).into_owned(),
                r.header("Jetrelay-Idempotency-Conflict").map(String::from),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_msg_id_sent_again_after_the_duplicate_window_is_suppressed_with_its_payload_and_sent_with_another()
 {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    let (stream, durable, bucket) = (unique("S"), unique("d"), unique("marks"));
    short_window_stream(&js, &stream).await;
    let app = MockApp::ok().await;
    let relay = Relay::ready(durable_config(
        &nats,
        &app,
        &stream,
        &durable,
        &format!("[delivery]\nidempotency_bucket = \"{bucket}\"\n"),
    ))
    .await;
    publish_with(&js, "once.a", "first", &[("Nats-Msg-Id", "order-7")]).await;
    app.wait_for("the first", T, |r| r.len() == 1).await;
    eventually("acked", T, || consumer_drained(&js, &stream, &durable)).await;
    // The same message sent again (sequence 2): the same digest, suppressed.
    publish_past_the_window(&js, "order-7", "first").await;
    eventually("suppressed", T, || async {
        relay.metric("jetrelay_duplicates_suppressed_total").await == 1.0
    })
    .await;
    // Another message under the same id (sequence 3): sent, naming the marked one.
    publish_past_the_window(&js, "order-7", "again").await;
    publish_with(&js, "once.a", "other", &[("Nats-Msg-Id", "order-8")]).await;
    app.wait_for("the other", T, |r| r.len() == 3).await;
    eventually("all acked", T, || consumer_drained(&js, &stream, &durable)).await;
    assert_eq!(
        conflicts(&app),
        [
            ("first".to_string(), None),
            ("again".to_string(), Some(format!("{stream}:1"))),
            ("other".to_string(), None),
        ]
    );
    assert_eq!(
        relay.metric("jetrelay_duplicates_suppressed_total").await,
        1.0
    );
    assert_eq!(
        relay.metric("jetrelay_idempotency_conflicts_total").await,
        1.0
    );
    assert_eq!(
        marker_ids(&js, &bucket).await,
        [
            (durable.clone(), "iorder-7".to_string()),
            (durable.clone(), "iorder-8".to_string())
        ]
    );
    // The marker now records the message the app answered last under the id.
    let kv = js.get_key_value(&bucket).await.unwrap();
    let value = kv
        .get(marker_key(&durable, "order-7"))
        .await
        .unwrap()
        .unwrap();
    let want = jetrelay::seam::markers::Marked {
        stream: stream.clone(),
        sequence: 3,
        digest: jetrelay::seam::markers::digest("once.a", b"again"),
    };
    assert_eq!(value, want.value().as_bytes());
    relay.stop().await.unwrap();
}

/// The marker key of `Nats-Msg-Id: id` under the durable `scope`.
fn marker_key(scope: &str, id: &str) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    format!("{}.i{}", b64.encode(scope), b64.encode(id))
}

#[tokio::test]
async fn a_marker_that_does_not_record_the_message_does_not_suppress_it_nor_an_empty_one() {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    let (stream, durable) = (unique("S"), unique("d"));
    create_stream(&js, &stream, &["once.>"]).await;
    let bucket = new_bucket(&js, true).await;
    let kv = js.get_key_value(&bucket).await.unwrap();
    let zeros = "0".repeat(64);
    let foreign: [(&str, Vec<u8>); 5] = [
        ("garbage", b"\xff\x00 not a marker\n".to_vec()),
        ("forged", format!("v1 OTHER 9 {zeros}").into_bytes()),
        ("future", format!("v2 {stream} 1 {zeros}").into_bytes()),
        ("bad-stream", format!("v1 a\rb 1 {zeros}").into_bytes()),
        ("legacy", Vec::new()),
    ];
    for (id, value) in &foreign {
        kv.put(marker_key(&durable, id), value.clone().into())
            .await
            .unwrap();
    }
    let app = MockApp::ok().await;
    let relay = Relay::ready(durable_config(
        &nats,
        &app,
        &stream,
        &durable,
        &format!("[delivery]\nidempotency_bucket = \"{bucket}\"\nmax_in_flight = 1\n"),
    ))
    .await;
    for (id, _) in &foreign {
        publish_with(&js, "once.a", id, &[("Nats-Msg-Id", id)]).await;
    }
    eventually("all acked", T, || consumer_drained(&js, &stream, &durable)).await;
    let unknown = Some("unknown".to_string());
    assert_eq!(
        conflicts(&app),
        [
            ("garbage".to_string(), unknown.clone()),
            ("forged".to_string(), Some("OTHER:9".to_string())),
            ("future".to_string(), unknown.clone()),
            ("bad-stream".to_string(), unknown.clone()),
            ("legacy".to_string(), unknown),
        ],
        "sent with the conflict named, the empty marker (an older version's, or anyone's) too"
    );
    assert_eq!(
        relay.metric("jetrelay_idempotency_conflicts_total").await,
        5.0
    );
    assert_eq!(
        relay.metric("jetrelay_duplicates_suppressed_total").await,
        0.0
    );
    // Each one the app answered is marked as its own now.
    let value = kv
        .get(marker_key(&durable, "forged"))
        .await
        .unwrap()
        .unwrap();
    assert!(
        value.starts_with(format!("v1 {stream} 2 ").as_bytes()),
        "{value:?}"
    );
    relay.stop().await.unwrap();
}

/// A server where connections without credentials are `admin` (allowed everything)
/// and user `b` (password in `<dir>/b.pass`) may not create streams.
async fn server_where_b_cannot_create_streams() -> (tempfile::TempDir, NatsServer) {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("nats.conf");
    std::fs::write(
        &conf,
        "no_auth_user: admin\nauthorization { users: [\n  {user: admin, password: admin}\n  {user: b, password: bpass, permissions: { publish: { deny: [\"$JS.API.STREAM.CREATE.>\"] } }}\n] }\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("b.pass"), "bpass").unwrap();
    let nats = NatsServer::start_with(&["-c", conf.to_str().unwrap()]).await;
    (dir, nats)
}

#[tokio::test]
async fn a_missing_bucket_is_made_with_per_key_ttls_and_one_that_cannot_be_is_a_clear_error() {
    // `b` may not create streams: no bucket of its own.
    let (dir, nats) = server_where_b_cannot_create_streams().await;
    let (_, js) = client(&nats).await;
    let (stream, bucket) = (unique("S"), unique("marks"));
    create_stream(&js, &stream, &["once.>"]).await;
    let app = MockApp::ok().await;
    let with = |bucket: &str, extra: &str| {
        durable_config(
            &nats,
            &app,
            &stream,
            &unique("d"),
            &format!(
                "[delivery]\nidempotency_bucket = \"{bucket}\"\nidempotency_ttl_ms = 90000\n{extra}"
            ),
        )
    };

    // Missing: made, with per-key TTLs, and each marker carries its TTL.
    let relay = Relay::ready(with(&bucket, "")).await;
    let info = js.get_stream(format!("KV_{bucket}")).await.unwrap();
    assert!(info.cached_info().config.allow_message_ttl);
    publish(&js, "once.a", 1).await;
    app.wait_for("one", T, |r| r.len() == 1).await;
    eventually("marked", T, || async {
        marker_ids(&js, &bucket).await.len() == 1
    })
    .await;
    let mut s = js.get_stream(format!("KV_{bucket}")).await.unwrap();
    let last = s.info().await.unwrap().state.last_sequence;
    let marker = s.get_raw_message(last).await.unwrap();
    assert_eq!(
        marker.headers.get("Nats-TTL").map(|v| v.as_str()),
        Some("90")
    );
    relay.stop().await.unwrap();

    // Not creatable (no permission): the source stops, naming the bucket.
    let as_b = format!(
        "[nats]\nuser = \"b\"\npassword_file = \"{}\"\n",
        dir.path().join("b.pass").display()
    );
    let other = unique("marks");
    let relay = Relay::start(with(&other, &as_b)).await;
    let err = tokio::time::timeout(T, relay.handle)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    let text = format!("{:#}", anyhow::Error::from(err));
    assert!(
        text.contains(&format!(
            "idempotency bucket {other}: cannot open it, nor create it"
        )),
        "{text}"
    );

    // Made without per-key TTLs: refused, saying why.
    let plain = new_bucket(&js, false).await;
    let relay = Relay::start(with(&plain, "")).await;
    let err = tokio::time::timeout(T, relay.handle)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    let text = format!("{:#}", anyhow::Error::from(err));
    assert!(
        text.contains(&plain) && text.contains("per-key TTL"),
        "{text}"
    );
}

#[tokio::test]
async fn a_bucket_deleted_at_run_time_is_made_again_and_every_message_goes_on_being_marked_and_acked()
 {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    let (stream, durable, bucket) = (unique("S"), unique("d"), unique("marks"));
    create_stream(&js, &stream, &["once.>"]).await;
    let app = MockApp::ok().await;
    let relay = Relay::ready(durable_config(
        &nats,
        &app,
        &stream,
        &durable,
        &format!("[delivery]\nidempotency_bucket = \"{bucket}\"\n"),
    ))
    .await;
    publish(&js, "once.a", 50).await;
    eventually("acked", T, || consumer_drained(&js, &stream, &durable)).await;
    js.delete_key_value(&bucket).await.unwrap();
    // 600 more: without the bucket made again, each request in flight waited for
    // its marker until ack_wait (30 s) ran out.
    publish(&js, "once.a", 600).await;
    eventually("all acked", T, || consumer_drained(&js, &stream, &durable)).await;
    assert_eq!(app.requests().len(), 650, "each message once");
    let info = js.get_stream(format!("KV_{bucket}")).await.unwrap();
    assert!(
        info.cached_info().config.allow_message_ttl,
        "made as at startup"
    );
    let marked = marker_ids(&js, &bucket).await.len();
    assert!(marked >= 590, "the markers written since: {marked}");
    let (_, ready) = relay.get("/ready").await;
    assert!(ready.contains("\"state\":\"consuming\""), "{ready}");
    assert!(!ready.contains(&bucket), "{ready}");
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn while_the_bucket_cannot_be_made_again_ready_names_it_and_each_message_is_acked_without_its_marker()
 {
    // `b` may not create streams: the bucket, once deleted, stays gone.
    let (dir, nats) = server_where_b_cannot_create_streams().await;
    let (_, js) = client(&nats).await;
    let (stream, durable) = (unique("S"), unique("d"));
    create_stream(&js, &stream, &["once.>"]).await;
    let bucket = new_bucket(&js, true).await;
    let app = MockApp::ok().await;
    // One request at a time; a marker write is tried for ack_wait / 2 = 2 s.
    let relay = Relay::ready(durable_config(
        &nats,
        &app,
        &stream,
        &durable,
        &format!(
            "[nats]\nuser = \"b\"\npassword_file = \"{}\"\n[consumer]\nack_wait_ms = 4000\n\
             [delivery]\nidempotency_bucket = \"{bucket}\"\nmax_in_flight = 1\n",
            dir.path().join("b.pass").display()
        ),
    ))
    .await;
    js.delete_key_value(&bucket).await.unwrap();
    let start = std::time::Instant::now();
    publish(&js, "once.a", 20).await;
    eventually("all acked", T, || consumer_drained(&js, &stream, &durable)).await;
    // The first held 2 s; the others tried once each, while /ready said why.
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "acked in {:?}",
        start.elapsed()
    );
    assert_eq!(app.requests().len(), 20);
    assert!(relay.metric("jetrelay_idempotency_failures_total").await >= 20.0);
    let (code, ready) = relay.get("/ready").await;
    assert_eq!(code, 200, "messages are acked: {ready}");
    assert!(
        ready.contains(&format!(
            "idempotency markers cannot be written to bucket {bucket}"
        )),
        "{ready}"
    );
    assert!(ready.contains("markers cannot be written"), "{ready}");

    // Made again by someone who may: the next marker is written, and /ready says
    // nothing of it any more.
    new_bucket_named(&js, &bucket).await;
    publish(&js, "once.a", 1).await;
    eventually("written again", T, || async {
        !relay.get("/ready").await.1.contains(&bucket)
    })
    .await;
    eventually("marked", T, || async {
        marker_ids(&js, &bucket).await.len() == 1
    })
    .await;
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn markers_asked_for_together_are_read_in_one_batched_direct_get_and_deletes_are_no_markers()
{
    use jetrelay::seam::markers::Markers as _;
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    let cfg = jetrelay::config::NatsConfig {
        servers: vec![nats.url().to_string()],
        ..Default::default()
    };
    let n = jetrelay::nats::Nats::connect(&jetrelay::daemon::settings::connection(&cfg), false)
        .await
        .unwrap();
    let bucket = unique("marks");
    let store = n.marker_store(&bucket, T).await.unwrap();
    // 300 keys (more than one request's 256 subjects): every third marked, and one
    // of those deleted again.
    let keys: Vec<String> = (0..300).map(|i| format!("s.k{i}")).collect();
    let marked: Vec<(String, String)> = keys
        .iter()
        .step_by(3)
        .map(|k| (k.clone(), format!("value of {k}")))
        .collect();
    store.mark(&marked).await.unwrap();
    let kv = js.get_key_value(&bucket).await.unwrap();
    kv.delete("s.k0").await.unwrap();
    assert_eq!(
        store.marked("s.k3").await.unwrap().as_deref(),
        Some(&b"value of s.k3"[..])
    );
    assert_eq!(
        store.marked("s.k0").await.unwrap(),
        None,
        "a delete is no marker"
    );
    assert_eq!(store.read_requests(), 2, "a lone read each");
    let answers = futures::future::join_all(keys.iter().map(|k| store.marked(k))).await;
    for (i, a) in answers.into_iter().enumerate() {
        let want = (i % 3 == 0 && i > 0).then(|| format!("value of s.k{i}").into_bytes());
        assert_eq!(a.unwrap().map(|b| b.to_vec()), want, "s.k{i}");
    }
    assert_eq!(
        store.read_requests(),
        4,
        "the first alone, the other 299 in the next turn"
    );
}

/// The messages the elastic group `eg` of `stream` still holds in its work queue.
async fn group_queue(js: &jetstream::Context, stream: &str) -> u64 {
    match js.get_stream(format!("{stream}-eg")).await {
        Ok(mut s) => s.info().await.map_or(u64::MAX, |i| i.state.messages),
        Err(_) => u64::MAX,
    }
}

#[tokio::test]
async fn a_partition_that_moves_to_another_member_brings_back_what_the_first_answered_without_a_request()
 {
    use crate::support::groups::*;
    let (nats, js, stream, admin) = elastic_group(2, &["m1"]).await;
    let proxy = crate::support::proxy::AckDropper::start(nats.url())
        .await
        .unwrap();
    let bucket = unique("marks");
    let marks = format!("[delivery]\nordering = \"none\"\nidempotency_bucket = \"{bucket}\"\n");
    let (app1, app2) = (MockApp::ok().await, MockApp::ok().await);
    // m1 answers every message, and none of its acks reaches the server.
    let m1 = Relay::ready(member_config_at(
        proxy.url(),
        &app1,
        "elastic",
        &stream,
        "eg",
        "m1",
        &marks,
    ))
    .await;
    proxy.drop_acks(true);
    publish_keys(&js, "e", 4, 5).await;
    eventually("m1's app answered all 20", T, || async {
        bodies(&[&app1]).len() == 20
    })
    .await;
    assert_eq!(group_queue(&js, &stream).await, 20, "no ack got through");

    // The partitions move to m2: every message comes back, from another consumer.
    admin.add(&stream, "eg", &["m2".to_string()]).await.unwrap();
    admin
        .drop_members(&stream, "eg", &["m1".to_string()])
        .await
        .unwrap();
    let m2 = Relay::ready(member_config(
        &nats, &app2, "elastic", &stream, "eg", "m2", &marks,
    ))
    .await;
    eventually("m2 settled the whole work queue", T, || async {
        group_queue(&js, &stream).await == 0
    })
    .await;
    assert!(
        app2.requests().is_empty(),
        "m2's app never saw what m1's had answered: {:?}",
        bodies(&[&app2])
    );
    assert_eq!(
        m2.metric("jetrelay_duplicates_suppressed_total").await,
        20.0,
        "each one acked as processed before"
    );
    assert_eq!(bodies(&[&app1]).len(), 20);
    assert_eq!(app1.requests().len(), 20, "m1's app saw each once too");
    m2.stop().await.unwrap();
    m1.stop().await.unwrap();
}

#[tokio::test]
async fn check_says_whether_the_bucket_is_there_to_be_made_or_refused_without_per_key_ttls() {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    let stream = unique("S");
    create_stream(&js, &stream, &["once.>"]).await;
    let app = MockApp::ok().await;
    let dir = tempfile::tempdir().unwrap();
    let check = |bucket: &str| {
        let path = dir.path().join(format!("{bucket}.toml"));
        std::fs::write(
            &path,
            format!(
                "[nats]\nservers = [\"{}\"]\n[source]\nstream = \"{stream}\"\nkind = \"durable\"\ndurable = \"d\"\n\
                 [delivery]\nidempotency_bucket = \"{bucket}\"\n[http]\nurl = \"{}\"\n",
                nats.url(),
                app.url()
            ),
        )
        .unwrap();
        let out = std::process::Command::new(crate::support::daemon::BIN)
            .arg("check")
            .arg("--config")
            .arg(&path)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };

    let (missing, plain, made) = (
        unique("marks"),
        new_bucket(&js, false).await,
        new_bucket(&js, true).await,
    );
    let cases = [
        (
            &missing,
            0,
            format!(
                "idempotency bucket {missing}: would be created (1 replica, file storage, per-key TTLs"
            ),
        ),
        // Made without per-key TTLs: run refuses it, so check fails.
        (
            &plain,
            1,
            format!("the idempotency bucket {plain} does not take per-key TTLs"),
        ),
        (
            &made,
            0,
            format!(
                "idempotency bucket {made}: exists with per-key TTLs, 1 replica(s), 0 marker(s)"
            ),
        ),
    ];
    for (bucket, code, says) in cases {
        let (got, said) = check(bucket);
        assert_eq!(got, Some(code), "{said}");
        assert!(said.contains(&says), "{said}");
    }
    assert!(
        js.get_key_value(&missing).await.is_err(),
        "check made the bucket"
    );
}
