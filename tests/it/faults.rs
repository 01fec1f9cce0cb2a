//! Faults of a three-node cluster while the daemon consumes: every node killed
//! (SIGKILL) and started again in turn, the consumer's leader first, under a steady
//! publisher. Nothing may be lost, and the daemon must end ready.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use jetrelay::group::model::GroupConfig;

use crate::support::groups::{admin_at, bodies, member_config_at};
use crate::support::*;

const T: Duration = Duration::from_secs(30);
const N: usize = 600;

/// A client of every node.
async fn connect(cluster: &Cluster) -> jetstream::Context {
    let addrs: Vec<async_nats::ServerAddr> = cluster
        .urls()
        .split(',')
        .map(|u| u.parse().unwrap())
        .collect();
    jetstream::new(async_nats::connect(addrs).await.unwrap())
}

/// Creates a stream with three replicas once the cluster has a meta leader.
async fn r3_stream(js: &jetstream::Context, config: jetstream::stream::Config) {
    eventually("an R3 stream", T, || async {
        js.create_stream(jetstream::stream::Config {
            num_replicas: 3,
            ..config.clone()
        })
        .await
        .is_ok()
    })
    .await;
}

/// Publishes `m0`..`m{N-1}` to `subject(i)` every 40 ms; each is retried until the
/// stream stores it (Nats-Msg-Id makes a retry after a lost PubAck harmless).
fn publish_steadily(
    js: &jetstream::Context,
    subject: impl Fn(usize) -> String + Send + 'static,
) -> (tokio::task::JoinHandle<()>, Arc<AtomicUsize>) {
    let published = Arc::new(AtomicUsize::new(0));
    let (js, count) = (js.clone(), published.clone());
    let task = tokio::spawn(async move {
        let mut pace = tokio::time::interval(Duration::from_millis(40));
        for i in 0..N {
            pace.tick().await;
            let body = format!("m{i}");
            let mut headers = async_nats::HeaderMap::new();
            headers.insert("Nats-Msg-Id", body.as_str());
            for attempt in 0.. {
                let stored = match js
                    .publish_with_headers(subject(i), headers.clone(), body.clone().into())
                    .await
                {
                    Ok(ack) => ack.await.is_ok(),
                    Err(_) => false,
                };
                if stored {
                    count.fetch_add(1, Ordering::SeqCst);
                    break;
                }
                assert!(attempt < 300, "{body} could not be published");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    });
    (task, published)
}

/// Whether every replica of a stream's or consumer's group is online and current.
fn settled(cluster: Option<&jetstream::stream::ClusterInfo>) -> bool {
    cluster
        .is_some_and(|c| c.leader.is_some() && c.replicas.iter().all(|r| r.current && !r.offline))
}

/// Kills and restarts every node, the consumer's leader first; before each kill the
/// apps receive again (or everything is published), and each node catches up before
/// the next one goes.
async fn rolling_restart(
    cluster: &mut Cluster,
    js: &jetstream::Context,
    stream: &str,
    consumer: &str,
    apps: &[&MockApp],
    published: &AtomicUsize,
) {
    let leader = consumer_info(js, stream, consumer)
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
    let arrivals = || apps.iter().map(|a| a.arrivals()).sum::<usize>();
    for name in order {
        let before = arrivals();
        eventually("consuming before the kill", T, || async {
            arrivals() > before || published.load(Ordering::SeqCst) == N
        })
        .await;
        cluster.node(&name).kill();
        cluster.node(&name).start_again().await;
        eventually("every replica current again", T, || async {
            let Ok(mut s) = js.get_stream(stream).await else {
                return false;
            };
            let stream_ok = s.info().await.is_ok_and(|i| settled(i.cluster.as_ref()));
            let consumer_ok = consumer_info(js, stream, consumer)
                .await
                .is_some_and(|i| settled(i.cluster.as_ref()));
            stream_ok && consumer_ok
        })
        .await;
    }
}

/// Every message reached an app and the consumer has nothing left.
async fn everything_delivered(
    js: &jetstream::Context,
    stream: &str,
    consumer: &str,
    apps: &[&MockApp],
) {
    let want: BTreeSet<String> = (0..N).map(|i| format!("m{i}")).collect();
    eventually(
        "every message delivered and acknowledged",
        Duration::from_secs(60),
        || async { bodies(apps) == want && consumer_drained(js, stream, consumer).await },
    )
    .await;
}

#[tokio::test]
async fn a_durable_consumer_rides_out_a_rolling_restart_of_the_cluster() {
    let mut cluster = Cluster::start().await;
    let js = connect(&cluster).await;
    let (stream, durable) = (unique("F"), unique("d"));
    r3_stream(
        &js,
        jetstream::stream::Config {
            name: stream.clone(),
            subjects: vec!["f.>".into()],
            ..Default::default()
        },
    )
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
    let (publisher, published) = publish_steadily(&js, |_| "f.x".to_string());
    rolling_restart(&mut cluster, &js, &stream, &durable, &[&app], &published).await;
    publisher.await.unwrap();
    everything_delivered(&js, &stream, &durable, &[&app]).await;
    relay.wait_ready(T).await;
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn a_group_member_with_a_hot_standby_rides_out_a_rolling_restart_of_the_cluster() {
    let mut cluster = Cluster::start().await;
    let js = connect(&cluster).await;
    let stream = unique("G");
    r3_stream(
        &js,
        jetstream::stream::Config {
            name: stream.clone(),
            subjects: vec!["o.*".into()],
            subject_transform: Some(jetstream::stream::SubjectTransform {
                source: "o.*".into(),
                destination: "{{partition(2,1)}}.o.{{wildcard(1)}}".into(),
            }),
            ..Default::default()
        },
    )
    .await;
    admin_at(&cluster.urls())
        .await
        .create_static(
            &stream,
            "cg",
            GroupConfig::new_static(2, vec![], vec!["m1".into()], vec![]),
        )
        .await
        .unwrap();
    let (app1, app2) = (MockApp::ok().await, MockApp::ok().await);
    let extra = "[consumer]\nmax_deliver = -1\n";
    let urls = cluster.urls();
    let i1 = Relay::ready(member_config_at(
        &urls, &app1, "static", &stream, "cg", "m1", extra,
    ))
    .await;
    let i2 = Relay::ready(member_config_at(
        &urls, &app2, "static", &stream, "cg", "m1", extra,
    ))
    .await;
    // What each instance's readiness said along the way.
    let said = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    for relay in [&i1, &i2] {
        let (mut rx, said) = (relay.health.subscribe(), said.clone());
        tokio::spawn(async move {
            while rx.changed().await.is_ok() {
                let s = rx.borrow_and_update().clone();
                said.lock()
                    .unwrap()
                    .push(format!("{}: {}", s.ready, s.reason));
            }
        });
    }
    let (publisher, published) = publish_steadily(&js, |i| format!("o.k{}", i % 10));
    let consumer = jetrelay::group::static_consumer("cg", "m1");
    eventually("the member consumer exists", T, || async {
        consumer_info(&js, &stream, &consumer).await.is_some()
    })
    .await;
    rolling_restart(
        &mut cluster,
        &js,
        &stream,
        &consumer,
        &[&app1, &app2],
        &published,
    )
    .await;
    publisher.await.unwrap();
    everything_delivered(&js, &stream, &consumer, &[&app1, &app2]).await;
    // While the consumer could not be created again, the instances said so.
    assert!(
        said.lock()
            .unwrap()
            .iter()
            .any(|s| s.starts_with("false: the member consumer cannot be created")),
        "{:?}",
        said.lock().unwrap()
    );
    // One of the two is served again, the other stands by. An instance learns it holds
    // the pin from a message's Nats-Pin-Id (ADR-42): when the last restart moved the
    // consumer's leader after the last message, the new leader pins a pull nobody
    // hears of until something is delivered, so a message now and then tells it.
    let nudged = std::sync::Mutex::new(Instant::now() - Duration::from_secs(1));
    eventually("one instance pinned", T, || async {
        let due = {
            let mut at = nudged.lock().unwrap();
            let due = at.elapsed() >= Duration::from_secs(1);
            if due {
                *at = Instant::now();
            }
            due
        };
        if due {
            // A nudge that is not stored is sent again a second later.
            js.publish("o.nudge", "nudge".into()).await.ok();
        }
        i1.health.status().pinned != i2.health.status().pinned
    })
    .await;
    i1.stop().await.unwrap();
    i2.stop().await.unwrap();
}

#[tokio::test]
async fn an_elastic_member_rides_out_a_rolling_restart_of_the_cluster() {
    let mut cluster = Cluster::start().await;
    let js = connect(&cluster).await;
    let stream = unique("E");
    r3_stream(
        &js,
        jetstream::stream::Config {
            name: stream.clone(),
            subjects: vec!["e.*".into()],
            ..Default::default()
        },
    )
    .await;
    let admin = admin_at(&cluster.urls()).await;
    let filters = vec![jetrelay::group::model::PartitioningFilter {
        filter: "e.*".into(),
        wildcards: vec![1],
    }];
    admin
        .create_elastic(&stream, "eg", GroupConfig::new_elastic(4, filters, -1, -1))
        .await
        .unwrap();
    admin.add(&stream, "eg", &["m1".into()]).await.unwrap();
    let (app1, app2) = (MockApp::ok().await, MockApp::ok().await);
    let extra = "[consumer]\nmax_deliver = -1\n";
    let urls = cluster.urls();
    let i1 = Relay::ready(member_config_at(
        &urls, &app1, "elastic", &stream, "eg", "m1", extra,
    ))
    .await;
    let i2 = Relay::ready(member_config_at(
        &urls, &app2, "elastic", &stream, "eg", "m1", extra,
    ))
    .await;
    let (publisher, published) = publish_steadily(&js, |i| format!("e.k{}", i % 10));
    let group_stream = jetrelay::group::elastic_stream(&stream, "eg");
    eventually("the member consumer exists", T, || async {
        consumer_info(&js, &group_stream, "m1").await.is_some()
    })
    .await;
    rolling_restart(
        &mut cluster,
        &js,
        &group_stream,
        "m1",
        &[&app1, &app2],
        &published,
    )
    .await;
    publisher.await.unwrap();
    everything_delivered(&js, &group_stream, "m1", &[&app1, &app2]).await;
    i1.stop().await.unwrap();
    i2.stop().await.unwrap();
}
