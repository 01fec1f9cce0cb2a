//! Faults and shutdown: a drain under load loses nothing and acks nothing without the
//! app's 2xx; a nats-server restart mid-stream is ridden out by the client's own
//! reconnect, with readiness following.

use std::time::Duration;

use jetrelay::ops::readiness::State;

use crate::support::*;

const T: Duration = Duration::from_secs(30);

#[tokio::test]
async fn shutdown_under_load_then_restart_delivers_everything_and_acks_only_after_2xx() {
    // Every 7th sequence fails once, so retries are in play during the shutdown too.
    let app = MockApp::start(|r, seen| {
        let status = if r.seq() % 7 == 0 && seen == 0 {
            503
        } else {
            200
        };
        Reply::status(status).after(Duration::from_millis(30))
    })
    .await;
    let env = Env::start(&["s.>"]).await;
    // ack_wait (60 s) is longer than the test's patience (30 s): a message the drain
    // left unsettled would only come back after it, and the test would time out.
    let extra = "[delivery]\nmax_in_flight = 8\nmax_buffered = 32\nretry_initial_ms = 50\nshutdown_grace_ms = 5000\n\
                 [consumer]\nack_wait_ms = 60000\n";
    let cfg = env.config(&app, extra);
    let total = 200u64;
    let relay = Relay::ready(cfg.clone()).await;
    publish(&env.js, "s.x", total as usize).await;
    app.wait_for("some progress", T, |r| r.len() >= 40).await;

    // Every state shown during the stop: the drain itself says so while it runs
    // (the final "stopped" is set by the daemon after everything, whatever happened).
    let mut states = relay.health.subscribe();
    let seen = tokio::spawn(async move {
        let mut seen = Vec::new();
        while states.changed().await.is_ok() {
            let s = states.borrow_and_update().clone();
            seen.push((s.state, s.shown.reason));
        }
        seen
    });
    relay.stop().await.unwrap();
    let seen = seen.await.unwrap();
    assert!(
        seen.contains(&(State::Draining, "shutting down".to_string())),
        "{seen:?}"
    );
    // In-flight requests finished and were settled; queued ones were released (NAK
    // without delay). Nothing is acked by the drain without a 2xx (checked below).
    let answered = app.requests().len();
    assert!(
        answered < total as usize,
        "the drain stopped intake, yet {answered} were sent"
    );
    assert_eq!(
        requests_a_moment_later(&app).await,
        answered,
        "nothing is sent after the stop returns"
    );

    let relay = Relay::ready(cfg).await;
    eventually("every message answered 2xx", T, || async {
        app.acked_seqs().len() as u64 == total
    })
    .await;
    eventually("all acked", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    let info = consumer_info(&env.js, &env.stream, &env.durable)
        .await
        .unwrap();
    assert_eq!(info.ack_floor.stream_sequence, total);
    // Every acked message was answered 2xx by the app at least once.
    assert_eq!(app.acked_seqs(), (1..=total).collect());
    relay.stop().await.unwrap();
}

/// What the app has seen a moment after the stop: a stopped daemon sends nothing more
/// (what must not happen can only be waited out).
async fn requests_a_moment_later(app: &MockApp) -> usize {
    tokio::time::sleep(Duration::from_millis(200)).await;
    app.requests().len()
}

#[tokio::test]
async fn a_nats_server_restart_mid_stream_is_ridden_out() {
    let app = MockApp::start(|_, _| Reply::status(200).after(Duration::from_millis(5))).await;
    let Env {
        mut nats,
        js,
        stream,
        durable,
    } = Env::start(&["n.>"]).await;
    let extra = "[nats]\nreconnect_delay_ms = 50\nreconnect_delay_max_ms = 200\n[consumer]\nack_wait_ms = 4000\n";
    let relay = Relay::ready(durable_config(&nats, &app, &stream, &durable, extra)).await;
    publish(&js, "n.x", 50).await;
    app.wait_for("first half", T, |r| r.len() >= 10).await;

    let mut ready = relay.health.subscribe();
    nats.restart().await;
    tokio::time::timeout(T, ready.wait_for(|s| !s.ready))
        .await
        .expect("ready went false")
        .unwrap();
    tokio::time::timeout(T, ready.wait_for(|s| s.ready))
        .await
        .expect("ready came back")
        .unwrap();

    let (_, js) = client(&nats).await;
    publish(&js, "n.y", 50).await;
    eventually("all 100 answered", T, || async {
        app.acked_seqs().len() == 100
    })
    .await;
    eventually("all acked", T, || consumer_drained(&js, &stream, &durable)).await;
    assert_eq!(relay.metric("jetrelay_nats_connected").await, 1.0);
    relay.stop().await.unwrap();
}
