//! What autoscalers read: the backlog gauges, current or absent. (The shipped
//! dashboard, alerts and KEDA queries are checked against a running daemon in
//! `deploy.rs`.)

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::support::groups::*;
use crate::support::*;

const T: Duration = Duration::from_secs(30);

/// A sample's value from a /metrics text, `None` when the metric is not exposed.
fn sample(text: &str, name: &str) -> Option<f64> {
    sample_of(text, name)
}

#[tokio::test]
async fn an_elastic_members_gauges_show_the_groups_backlog_and_are_withdrawn_when_nats_is_gone() {
    let (mut nats, js, stream, _admin) = elastic_group(2, &["a"]).await;
    // The app refuses until told otherwise: the messages wait in the work queue.
    let open = Arc::new(AtomicBool::new(false));
    let gate = open.clone();
    let app = MockApp::start(move |_, _| {
        Reply::status(if gate.load(Ordering::SeqCst) {
            200
        } else {
            503
        })
    })
    .await;
    let relay = Relay::ready(member_config(
        &nats,
        &app,
        "elastic",
        &stream,
        "eg",
        "a",
        "[consumer]\nmax_deliver = -1\n[delivery]\nretry_initial_ms = 100\nretry_max_ms = 200\n",
    ))
    .await;
    publish(&js, "e.k", 7).await;
    eventually("the backlog of 7 shown", T, || async {
        let (_, text) = relay.get("/metrics").await;
        sample(&text, "jetrelay_group_backlog") == Some(7.0)
            && sample(&text, "jetrelay_consumer_ack_pending").is_some()
            && sample(&text, "jetrelay_consumer_pending").is_some()
    })
    .await;

    // The app takes them: the work queue empties, and the gauge follows.
    open.store(true, Ordering::SeqCst);
    eventually("the backlog drained", T, || async {
        let (_, text) = relay.get("/metrics").await;
        sample(&text, "jetrelay_group_backlog") == Some(0.0)
            && sample(&text, "jetrelay_consumer_pending") == Some(0.0)
    })
    .await;

    // NATS gone: no value is left standing that looks current.
    nats.kill();
    eventually("the gauges withdrawn", T, || async {
        let (_, text) = relay.get("/metrics").await;
        sample(&text, "jetrelay_group_backlog").is_none()
            && sample(&text, "jetrelay_consumer_pending").is_none()
            && sample(&text, "jetrelay_consumer_ack_pending").is_none()
    })
    .await;
    // And they come back with it.
    nats.start_again().await;
    eventually("the gauges back", T, || async {
        let (_, text) = relay.get("/metrics").await;
        sample(&text, "jetrelay_group_backlog") == Some(0.0)
    })
    .await;
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn probes_are_answered_through_a_flood_of_slow_connections() {
    use std::sync::atomic::AtomicUsize;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let app = MockApp::ok().await;
    let env = Env::start(&["fl.>"]).await;
    let relay = Relay::ready(durable_config(
        &env.nats,
        &app,
        &env.stream,
        &env.durable,
        "",
    ))
    .await;
    let admin = relay.admin;
    // 100 clients trickling a request's header bytes, one every 200 ms, each
    // connecting again as soon as it is closed: more than the admin port holds.
    let stop = tokio_util::sync::CancellationToken::new();
    let connected = Arc::new(AtomicUsize::new(0));
    let mut flood = Vec::new();
    for _ in 0..100 {
        let (stop, connected) = (stop.clone(), connected.clone());
        flood.push(tokio::spawn(async move {
            while !stop.is_cancelled() {
                let Ok(mut conn) = tokio::net::TcpStream::connect(admin).await else {
                    continue;
                };
                connected.fetch_add(1, Ordering::Relaxed);
                for b in b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaa" {
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = tokio::time::sleep(Duration::from_millis(200)) => {}
                    }
                    if conn.write_all(&[*b]).await.is_err() {
                        break;
                    }
                }
            }
        }));
    }
    eventually("the flood is on", T, || async {
        connected.load(Ordering::Relaxed) >= 100
    })
    .await;
    let mut answered = 0;
    for _ in 0..24 {
        let probe = async {
            let mut conn = tokio::net::TcpStream::connect(admin).await.ok()?;
            conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: kubelet\r\nConnection: close\r\n\r\n")
                .await
                .ok()?;
            let mut answer = String::new();
            conn.read_to_string(&mut answer).await.ok()?;
            answer.starts_with("HTTP/1.1 200").then_some(())
        };
        if tokio::time::timeout(Duration::from_secs(2), probe)
            .await
            .ok()
            .flatten()
            .is_some()
        {
            answered += 1;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.cancel();
    for f in flood {
        f.await.unwrap();
    }
    assert_eq!(answered, 24, "probes answered through the flood");
    relay.stop().await.unwrap();
}
