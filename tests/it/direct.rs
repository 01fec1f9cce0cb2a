//! Batch direct get against the real nats-server: pages over gaps, an empty stream,
//! a start time, and a stream that does not answer direct gets.

use std::collections::BTreeSet;

use async_nats::jetstream::{self, stream};
use jetrelay::nats::{DirectError, Nats, PageRequest};

use crate::support::*;

async fn connect(nats: &NatsServer) -> Nats {
    let cfg = jetrelay::config::NatsConfig {
        servers: vec![nats.url().to_string()],
        ..Default::default()
    };
    Nats::connect(&jetrelay::daemon::settings::connection(&cfg), false)
        .await
        .unwrap()
}

async fn direct_stream(js: &jetstream::Context, name: &str, subjects: &[&str], direct: bool) {
    js.create_stream(stream::Config {
        name: name.to_string(),
        subjects: subjects.iter().map(|s| s.to_string()).collect(),
        allow_direct: direct,
        ..Default::default()
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn pages_cover_every_message_across_deleted_sequences() {
    let nats = NatsServer::start().await;
    let (client, js) = client(&nats).await;
    direct_stream(&js, "D", &["d.>"], true).await;
    for i in 0..5000u32 {
        // Fire and forget, then one flush: a quick fill.
        js.publish(format!("d.{}", i % 10), format!("m{i}").into())
            .await
            .unwrap();
    }
    client.flush().await.unwrap();
    eventually("stored", std::time::Duration::from_secs(20), || async {
        js.get_stream("D")
            .await
            .unwrap()
            .info()
            .await
            .unwrap()
            .state
            .messages
            == 5000
    })
    .await;
    let s = js.get_stream("D").await.unwrap();
    let gone: BTreeSet<u64> = (1..=5000)
        .filter(|n| n % 97 == 0 || (2000..2100).contains(n))
        .collect();
    for seq in &gone {
        s.delete_message(*seq).await.unwrap();
    }
    let n = connect(&nats).await;
    let mut seen = Vec::new();
    let mut next = 1;
    let mut pages = 0;
    loop {
        let page = n
            .direct_page(
                "D",
                &PageRequest {
                    seq: next,
                    batch: 1000,
                    up_to_seq: Some(5000),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        pages += 1;
        assert!(page.messages.len() <= 1000);
        seen.extend(page.messages.iter().map(|m| m.seq));
        if let Some(m) = page.messages.first() {
            assert_eq!(m.payload, format!("m{}", m.seq - 1).as_bytes());
            assert_eq!(m.subject, format!("d.{}", (m.seq - 1) % 10));
            assert!(m.time.ends_with('Z'), "{}", m.time);
        }
        if page.pending == 0 {
            break;
        }
        next = page.last_seq.unwrap() + 1;
        assert!(pages < 20, "paging does not end");
    }
    let want: Vec<u64> = (1..=5000).filter(|n| !gone.contains(n)).collect();
    assert_eq!(seen, want);
    assert_eq!(pages, want.len().div_ceil(1000));

    // A subject filter pages the same way.
    let page = n
        .direct_page(
            "D",
            &PageRequest {
                seq: 1,
                batch: 50,
                next_by_subj: Some("d.3".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(page.messages.len(), 50);
    assert!(page.messages.iter().all(|m| m.subject == "d.3"));
    assert!(page.pending > 0);
}

#[tokio::test]
async fn an_empty_stream_is_an_empty_last_page() {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    direct_stream(&js, "E", &["e.>"], true).await;
    let page = connect(&nats)
        .await
        .direct_page(
            "E",
            &PageRequest {
                seq: 1,
                batch: 100,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(page.messages.is_empty());
    assert_eq!(page.pending, 0);
}

#[tokio::test]
async fn a_start_time_starts_at_the_first_message_stored_then() {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    direct_stream(&js, "T", &["t.>"], true).await;
    publish(&js, "t.x", 5).await;
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    publish(&js, "t.x", 5).await;
    let s = js.get_stream("T").await.unwrap();
    let sixth = s.get_raw_message(6).await.unwrap().time;
    let since = sixth
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let page = connect(&nats)
        .await
        .direct_page(
            "T",
            &PageRequest {
                batch: 100,
                start_time: Some(since),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let seqs: Vec<u64> = page.messages.iter().map(|m| m.seq).collect();
    assert_eq!(seqs, [6, 7, 8, 9, 10]);
}

#[tokio::test]
async fn a_stream_without_allow_direct_says_how_to_enable_it() {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    direct_stream(&js, "N", &["n.>"], false).await;
    publish(&js, "n.x", 1).await;
    let err = connect(&nats)
        .await
        .direct_page(
            "N",
            &PageRequest {
                seq: 1,
                batch: 10,
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(err, DirectError::NotEnabled(_)), "{err:?}");
    assert!(err.to_string().contains("allow_direct"), "{err}");
}
