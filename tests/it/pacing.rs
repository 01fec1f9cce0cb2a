//! Protecting the app, end to end: against a real app with a fixed number of workers
//! and a queue that answers 503 when full, the adaptive limit settles near the app's
//! capacity with few 503s, follows a loss of workers, and shows itself on `/ready`
//! and in the gauges; nothing is lost on the way.

use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use crate::support::app::WorkersApp;
use crate::support::*;

const T: Duration = Duration::from_secs(60);

async fn limit(relay: &Relay) -> u64 {
    let (_, body) = relay.get("/ready").await;
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    v["concurrency_limit"]
        .as_u64()
        .expect("the limit on /ready")
}

#[tokio::test]
async fn the_adaptive_limit_settles_near_the_apps_workers_and_follows_them_down() {
    let app = WorkersApp::start(8, Duration::from_millis(10), 24).await;
    let env = Env::start(&["w.>"]).await;
    let config = durable_config_for(
        env.nats.url(),
        &app.url(),
        &env.stream,
        &env.durable,
        "[delivery]\nconcurrency = \"adaptive\"\nmax_in_flight = 64\nmax_buffered = 256\n",
    );
    let relay = Relay::ready(config).await;
    let total = 5000;
    let publisher = {
        let js = env.js.clone();
        tokio::spawn(async move { publish(&js, "w.a", total).await })
    };
    // Settled: near 8 for a while (the app takes 800 a second; the controller's
    // 3 ms slack admits less than one queued request per worker: near 12.5 at most).
    eventually("settled near 8", T, || async {
        app.answered.load(SeqCst) > 1500 && (6..=14).contains(&limit(&relay).await)
    })
    .await;
    // (A floor probe halves the limit for one window every 5 s, and on a loaded
    // machine a probe may read a little low.)
    let settled = relay.metric("jetrelay_concurrency_limit").await;
    assert!((2.0..=14.0).contains(&settled), "the gauge: {settled}");
    // In flight ÷ limit: at most 1 while the limit holds, above 1 for a moment after
    // it falls (the excess finishes, nothing is cut short). A cut is at most a half
    // and comes at most once a round trip, so within the round trip the excess takes
    // to finish it stays under 4; never 0 while the app is busy.
    let saturation = relay.metric("jetrelay_saturation").await;
    assert!(
        saturation > 0.0 && saturation <= 4.0,
        "saturation {saturation}"
    );
    // Half the workers go: the limit follows.
    app.lose_workers(4).await;
    eventually("followed 4 workers", T, || async {
        limit(&relay).await <= 6
    })
    .await;
    publisher.await.unwrap();
    eventually("all acked", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    let (answered, refused) = (app.answered.load(SeqCst), app.refused.load(SeqCst));
    assert!(answered >= total, "every message answered 200: {answered}");
    assert!(
        refused * 100 <= answered,
        "503s stay under 1%: {refused} of {}",
        answered + refused
    );
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn a_fixed_limit_reports_itself_and_a_rate_limit_holds_starts_back() {
    let app = MockApp::ok().await;
    let env = Env::start(&["w.>"]).await;
    let relay = env
        .relay(
            &app,
            "[delivery]\nmax_in_flight = 16\nrate_limit_per_s = 20\nrate_limit_burst = 5\n",
        )
        .await;
    assert_eq!(limit(&relay).await, 16);
    assert_eq!(relay.metric("jetrelay_concurrency_limit").await, 16.0);
    // Timed from before the publish: the first starts may come while it goes on.
    let started = tokio::time::Instant::now();
    publish(&env.js, "w.a", 25).await;
    eventually("all acked", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    // 5 at once, then 20 a second: the last of 25 starts a second after the first.
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "25 starts at 20/s after a burst of 5 take a second: {:?}",
        started.elapsed()
    );
    assert_eq!(app.arrivals(), 25, "each once: waiting spent no attempt");
    relay.stop().await.unwrap();
}
