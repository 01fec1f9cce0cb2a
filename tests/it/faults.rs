//! Faults of a three-node cluster while the daemon consumes: every node killed and
//! started again in turn (a rolling restart), the consumer's leader first.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_nats::jetstream;

use crate::support::groups::bodies;
use crate::support::*;

const T: Duration = Duration::from_secs(30);
const N: usize = 600;

/// Whether every replica of a stream's or consumer's group is online and current.
fn settled(cluster: Option<&jetstream::stream::ClusterInfo>) -> bool {
    cluster
        .is_some_and(|c| c.leader.is_some() && c.replicas.iter().all(|r| r.current && !r.offline))
}

#[tokio::test]
async fn a_rolling_restart_of_the_cluster_loses_nothing() {
    let mut cluster = Cluster::start();
    let addrs: Vec<async_nats::ServerAddr> = cluster
        .urls()
        .split(',')
        .map(|u| u.parse().unwrap())
        .collect();
    let js = jetstream::new(async_nats::connect(addrs).await.unwrap());
    let (stream, durable) = (unique("F"), unique("d"));
    eventually("an R3 stream", T, || async {
        js.create_stream(jetstream::stream::Config {
            name: stream.clone(),
            subjects: vec!["f.>".into()],
            num_replicas: 3,
            ..Default::default()
        })
        .await
        .is_ok()
    })
    .await;
    let app = MockApp::start(|_, _| Reply::status(200).after(Duration::from_millis(5))).await;
    let relay = Relay::ready(durable_config_at(
        &cluster.urls(),
        &app,
        &stream,
        &durable,
        "[consumer]\nack_wait_ms = 2000\nmax_deliver = -1\n",
    ))
    .await;

    // A steady publisher: each message is retried until the stream stores it
    // (Nats-Msg-Id makes a retry after a lost PubAck harmless).
    let published = Arc::new(AtomicUsize::new(0));
    let publisher = {
        let (js, published) = (js.clone(), published.clone());
        tokio::spawn(async move {
            let mut pace = tokio::time::interval(Duration::from_millis(40));
            for i in 0..N {
                pace.tick().await;
                let body = format!("m{i}");
                let mut headers = async_nats::HeaderMap::new();
                headers.insert("Nats-Msg-Id", body.as_str());
                for attempt in 0.. {
                    let stored = match js
                        .publish_with_headers("f.x", headers.clone(), body.clone().into())
                        .await
                    {
                        Ok(ack) => ack.await.is_ok(),
                        Err(_) => false,
                    };
                    if stored {
                        published.fetch_add(1, Ordering::SeqCst);
                        break;
                    }
                    assert!(attempt < 300, "{body} could not be published");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        })
    };

    let leader = consumer_info(&js, &stream, &durable)
        .await
        .and_then(|i| i.cluster)
        .and_then(|c| c.leader)
        .expect("the consumer's leader");
    let mut order = vec![leader.clone()];
    order.extend(
        ["n1", "n2", "n3"]
            .into_iter()
            .filter(|n| *n != leader)
            .map(String::from),
    );
    for name in order {
        // The daemon consumes again (or has taken everything) before the next kill.
        let before = app.arrivals();
        eventually("consuming before the kill", T, || async {
            app.arrivals() > before || published.load(Ordering::SeqCst) == N
        })
        .await;
        cluster.node(&name).kill();
        cluster.node(&name).start_again();
        // The next node goes only when this one has caught up.
        eventually("every replica current again", T, || async {
            let Ok(mut s) = js.get_stream(&stream).await else {
                return false;
            };
            let stream_ok = s.info().await.is_ok_and(|i| settled(i.cluster.as_ref()));
            let consumer_ok = consumer_info(&js, &stream, &durable)
                .await
                .is_some_and(|i| settled(i.cluster.as_ref()));
            stream_ok && consumer_ok
        })
        .await;
    }
    publisher.await.unwrap();

    let want: BTreeSet<String> = (0..N).map(|i| format!("m{i}")).collect();
    eventually(
        "every message delivered and acknowledged",
        Duration::from_secs(60),
        || async { bodies(&[&app]) == want && consumer_drained(&js, &stream, &durable).await },
    )
    .await;
    relay.wait_ready(T).await;
    relay.stop().await.unwrap();
}
