//! Atomic batch publish (ADR-50) on the wire, pinned against the real nats-server:
//! what it stores, what it refuses, and how jetrelay reads each answer.

use async_nats::jetstream::{self, stream};
use bytes::Bytes;
use jetrelay::nats::{Nats, OutputError, OutputPublisher};
use jetrelay::outputs::Output;
use jetrelay::seam::publish::{Committed, OutputFailure};

use crate::support::*;

async fn publisher(nats: &NatsServer) -> OutputPublisher {
    let cfg = jetrelay::config::NatsConfig {
        servers: vec![nats.url().to_string()],
        ..Default::default()
    };
    Nats::connect(&jetrelay::daemon::settings::connection(&cfg), false)
        .await
        .unwrap()
        .outputs()
}

fn output(subject: &str, id: &str, payload: &str) -> Output {
    Output {
        subject: subject.into(),
        headers: vec![("Nats-Msg-Id".into(), id.into())],
        payload: Bytes::from(payload.to_string()),
    }
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

#[tokio::test]
async fn a_thousand_message_batch_is_stored_whole_at_consecutive_sequences() {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    atomic_stream(&js, "A", &["a.>"], true).await;
    publish(&js, "a.before", 1).await;
    let outs: Vec<Output> = (0..1000)
        .map(|i| {
            output(
                &format!("a.{}", i % 7),
                &format!("id-{i}"),
                &format!("m{i}"),
            )
        })
        .collect();
    let got = publisher(&nats).await.publish(&outs, true).await.unwrap();
    assert_eq!(
        got,
        Committed {
            stream: "A".into(),
            seq: 1001,
            count: 1000,
            duplicate: false
        }
    );
    assert_eq!(messages(&js, "A").await, 1001);
    let s = js.get_stream("A").await.unwrap();
    for (seq, i) in [(2, 0), (501, 499), (1001, 999)] {
        let m = s.get_raw_message(seq).await.unwrap();
        assert_eq!(m.payload.as_ref(), format!("m{i}").as_bytes());
        let id = m.headers.get("Nats-Msg-Id").map(|v| v.as_str().to_string());
        assert_eq!(id, Some(format!("id-{i}")));
    }
}

#[tokio::test]
async fn a_stream_without_allow_atomic_refuses_the_batch_with_10174() {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    atomic_stream(&js, "N", &["n.>"], false).await;
    let outs = [output("n.1", "a", "x"), output("n.2", "b", "y")];
    let err = publisher(&nats)
        .await
        .publish(&outs, true)
        .await
        .unwrap_err();
    assert!(matches!(err, OutputError::NotAtomic), "{err:?}");
    assert!(err.to_string().contains("allow_atomic"), "{err}");
    assert_eq!(messages(&js, "N").await, 0);
    // One by one works on that stream, with the same ids.
    let got = publisher(&nats).await.publish(&outs, false).await.unwrap();
    assert_eq!((got.count, got.seq, got.duplicate), (2, 2, false));
}

#[tokio::test]
async fn a_batch_with_an_id_already_stored_is_refused_whole_and_read_as_a_duplicate() {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    atomic_stream(&js, "D", &["d.>"], true).await;
    let p = publisher(&nats).await;
    let first = [output("d.1", "k1", "x"), output("d.2", "k2", "y")];
    assert!(!p.publish(&first, true).await.unwrap().duplicate);
    // The same batch again: already committed.
    let again = p.publish(&first, true).await.unwrap();
    assert!(again.duplicate, "{again:?}");
    // A batch with one id already stored and one new: nothing of it is stored.
    let mixed = [output("d.3", "k3", "new"), output("d.1", "k1", "x")];
    assert!(p.publish(&mixed, true).await.unwrap().duplicate);
    assert_eq!(
        messages(&js, "D").await,
        2,
        "nothing of a refused batch is stored"
    );
    // One by one, a repeated id is a duplicate PubAck.
    let one = p.publish(&first[..1], true).await.unwrap();
    assert!(one.duplicate && one.count == 1, "{one:?}");
}

#[tokio::test]
async fn a_batch_across_two_streams_is_refused_and_nothing_is_stored() {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    atomic_stream(&js, "X", &["x.>"], true).await;
    atomic_stream(&js, "Y", &["y.>"], true).await;
    let outs = [
        output("x.1", "a", "1"),
        output("y.1", "b", "2"),
        output("x.2", "c", "3"),
    ];
    let err = publisher(&nats)
        .await
        .publish(&outs, true)
        .await
        .unwrap_err();
    // The stream of the first message sees a gap in the batch: "incomplete".
    assert!(
        matches!(
            err,
            OutputError::Refused {
                err_code: 10176,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(messages(&js, "X").await, 0);
    assert_eq!(messages(&js, "Y").await, 0);
}

#[tokio::test]
async fn no_stream_and_too_large_are_told_apart() {
    let nats = NatsServer::start().await;
    let p = publisher(&nats).await;
    let err = p
        .publish(&[output("nowhere.1", "a", "x")], true)
        .await
        .unwrap_err();
    assert!(matches!(err, OutputError::NoStream(_)), "{err:?}");
    assert!(!err.is_permanent());
    let big = "x".repeat(2 * 1024 * 1024);
    let err = p
        .publish(&[output("nowhere.1", "a", &big)], true)
        .await
        .unwrap_err();
    assert!(err.is_permanent(), "{err:?}");
}

#[tokio::test]
async fn more_batches_at_once_than_the_server_takes_wait_their_turn_and_all_commit() {
    // nats-server keeps at most 50 atomic batches open per stream and refuses one
    // over (10210): the publisher holds the rest back instead.
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    js.create_stream(stream::Config {
        name: "MANY".into(),
        subjects: vec!["many.>".into()],
        allow_atomic_publish: true,
        storage: stream::StorageType::Memory,
        ..Default::default()
    })
    .await
    .unwrap();
    let publisher = publisher(&nats).await;
    let batches = 200;
    let tasks: Vec<_> = (0..batches)
        .map(|b| {
            let publisher = publisher.clone();
            tokio::spawn(async move {
                let outs: Vec<Output> = (0..3)
                    .map(|i| output(&format!("many.{b}"), &format!("{b}-{i}"), "x"))
                    .collect();
                publisher.publish(&outs, true).await
            })
        })
        .collect();
    for t in tasks {
        let committed = t.await.unwrap();
        assert!(committed.is_ok(), "{committed:?}");
    }
    assert_eq!(messages(&js, "MANY").await, 3 * batches);
}
