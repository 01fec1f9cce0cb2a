//! Nothing hung: shutdown never waits on NATS (gone, or refusing the credentials), a
//! second signal ends the process at once, and `/ready` always says why it is not
//! ready, or what is true of the pin.

use std::time::Duration;

use jetrelay::ops::readiness::State;

use crate::support::daemon::Daemon;
use crate::support::groups::*;
use crate::support::*;

const T: Duration = Duration::from_secs(20);
const GRACE_MS: u64 = 2000;

fn durable_text(servers: &str, app: &MockApp, stream: &str, durable: &str, extra: &str) -> String {
    format!(
        "[nats]\nservers = \"{servers}\"\nreconnect_delay_ms = 50\nreconnect_delay_max_ms = 200\n\
         [source]\nstream = \"{stream}\"\nkind = \"durable\"\ndurable = \"{durable}\"\n\
         [http]\nurl = \"{}\"\n[admin]\nlisten = \"127.0.0.1:0\"\n\
         [delivery]\nshutdown_grace_ms = {GRACE_MS}\n{extra}",
        app.url()
    )
}

/// The exit must come within the grace plus one second, with status 0.
fn assert_clean_exit_in_time((code, took): (Option<i32>, Duration)) {
    assert_eq!(code, Some(0), "exit status");
    assert!(
        took <= Duration::from_millis(GRACE_MS + 1000),
        "took {took:?} to exit, the grace is {GRACE_MS} ms"
    );
}

#[tokio::test]
async fn sigterm_with_the_server_gone_exits_zero_within_the_grace() {
    let app = MockApp::ok().await;
    let Env {
        mut nats,
        js,
        stream,
        durable,
    } = Env::start(&["g.>"]).await;
    let mut d = Daemon::start(&durable_text(nats.url(), &app, &stream, &durable, "")).await;
    d.wait_ready_body("ready", T, |code, _| code == 200).await;
    publish(&js, "g.x", 3).await;
    app.wait_for("3 requests", T, |r| r.len() == 3).await;

    nats.kill();
    let body = d
        .wait_ready_body("the lost connection", T, |code, b| {
            code == 503 && b["state"] == "not_ready"
        })
        .await;
    assert_eq!(body["ready"], false);
    assert!(
        body["reason"]
            .as_str()
            .unwrap()
            .starts_with("NATS connection lost"),
        "{body}"
    );
    d.signal("TERM");
    assert_clean_exit_in_time(d.wait_exit(T).await);
}

#[tokio::test]
async fn a_refused_password_is_the_reason_and_shutdown_still_ends_in_time() {
    let nats = NatsServer::start_with(&["--user", "app", "--pass", "right"]).await;
    let app = MockApp::ok().await;
    let dir = tempfile::tempdir().unwrap();
    let password = dir.path().join("password");
    std::fs::write(&password, "wrong\n").unwrap();
    // One [nats] table per file: the credentials go into the existing one.
    let text = durable_text(nats.url(), &app, "S", "d", "").replace(
        "[nats]\n",
        &format!(
            "[nats]\nuser = \"app\"\npassword_file = \"{}\"\n",
            password.display()
        ),
    );
    let mut d = Daemon::start(&text).await;
    let body = d
        .wait_ready_body("the refused credential", T, |code, b| {
            code == 503
                && b["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("authorization violation"))
        })
        .await;
    assert_eq!(body["state"], "not_ready", "{body}");
    d.signal("TERM");
    assert_clean_exit_in_time(d.wait_exit(T).await);
}

#[tokio::test]
async fn a_second_signal_stops_at_once() {
    // The app never answers in time: the drain would wait the whole (long) grace.
    let app = MockApp::start(|_, _| Reply::status(200).after(Duration::from_secs(60))).await;
    let env = Env::start(&["h.>"]).await;
    let text = durable_text(env.nats.url(), &app, &env.stream, &env.durable, "")
        .replace(
            &format!("shutdown_grace_ms = {GRACE_MS}"),
            "shutdown_grace_ms = 60000",
        )
        .replace("[http]\n", "[http]\ntimeout_ms = 90000\n");
    let mut d = Daemon::start(&text).await;
    d.wait_ready_body("ready", T, |code, _| code == 200).await;
    publish(&env.js, "h.x", 1).await;
    eventually("the request arrived", T, || async { app.arrivals() == 1 }).await;
    d.signal("TERM");
    d.wait_line("draining", T, |l| l["message"] == "draining")
        .await;
    d.signal("INT");
    let (code, took) = d.wait_exit(T).await;
    assert_eq!(code, Some(1), "a forced stop is not a clean stop");
    assert!(took < Duration::from_secs(2), "took {took:?}");
}

/// Publishes about 100 messages a second until the returned token is cancelled.
fn steady_publisher(js: &async_nats::jetstream::Context) -> tokio_util::sync::CancellationToken {
    let stop = tokio_util::sync::CancellationToken::new();
    let (js, done) = (js.clone(), stop.clone());
    tokio::spawn(async move {
        while !done.is_cancelled() {
            publish_keys(&js, "o", 1, 1).await;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    stop
}

/// Every state `relay` shows for `span`.
async fn states_for(relay: &Relay, span: Duration) -> Vec<(State, String)> {
    let mut rx = relay.health.subscribe();
    let mut seen = vec![{
        let s = rx.borrow_and_update();
        (s.state, s.reason.clone())
    }];
    let until = tokio::time::Instant::now() + span;
    while let Ok(Ok(())) = tokio::time::timeout_at(until, rx.changed()).await {
        let s = rx.borrow_and_update();
        seen.push((s.state, s.reason.clone()));
    }
    seen
}

#[tokio::test]
async fn a_standby_says_another_instance_holds_the_pin_in_either_order_of_start_up() {
    // Order 1: one instance pinned and serving ~100 msg/s, the other starts: never
    // "idle" (nobody holds the pin), which would be a lie.
    let (nats, js, stream, _admin) = static_group(1, &["m1"]).await;
    let app = MockApp::ok().await;
    let cfg = member_config(&nats, &app, "static", &stream, "cg", "m1", "");
    let first = Relay::ready(cfg.clone()).await;
    let publisher = steady_publisher(&js);
    let mut status = first.health.subscribe();
    tokio::time::timeout(T, status.wait_for(|s| s.pinned))
        .await
        .expect("pinned")
        .unwrap();
    let second = Relay::ready(cfg.clone()).await;
    let seen = states_for(&second, Duration::from_secs(3)).await;
    assert!(seen.iter().all(|(s, _)| *s != State::Idle), "{seen:?}");
    assert_eq!(
        seen.last().unwrap(),
        &(State::Standby, "another instance holds the pin".to_string())
    );
    publisher.cancel();
    second.stop().await.unwrap();
    first.stop().await.unwrap();

    // Order 2: both start while nothing is published (both idle, truly); then one is
    // pinned by the traffic, and the other says so within two seconds, and stays so.
    let (nats, js, stream, _admin) = static_group(1, &["m1"]).await;
    let cfg = member_config(&nats, &app, "static", &stream, "cg", "m1", "");
    let (a, b) = (Relay::ready(cfg.clone()).await, Relay::ready(cfg).await);
    for r in [&a, &b] {
        let mut rx = r.health.subscribe();
        tokio::time::timeout(T, rx.wait_for(|s| s.state == State::Idle))
            .await
            .expect("idle while nothing was delivered")
            .unwrap();
    }
    let publisher = steady_publisher(&js);
    let (mut ra, mut rb) = (a.health.subscribe(), b.health.subscribe());
    let standby = tokio::select! {
        _ = ra.wait_for(|s| s.pinned) => &b,
        _ = rb.wait_for(|s| s.pinned) => &a,
    };
    let mut rx = standby.health.subscribe();
    tokio::time::timeout(
        Duration::from_secs(2),
        rx.wait_for(|s| s.reason == "another instance holds the pin"),
    )
    .await
    .expect("the standby learns within two seconds that the pin is held")
    .unwrap();
    let seen = states_for(standby, Duration::from_secs(3)).await;
    assert!(seen.iter().all(|(s, _)| *s == State::Standby), "{seen:?}");
    publisher.cancel();
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}

#[tokio::test]
async fn a_sole_instance_of_an_idle_pinned_member_says_nobody_holds_the_pin() {
    let (nats, js, stream, _admin) = static_group(2, &["m1"]).await;
    let app = MockApp::ok().await;
    let cfg = member_config(&nats, &app, "static", &stream, "cg", "m1", "");
    let first = Relay::ready(cfg.clone()).await;
    let mut status = first.health.subscribe();
    let idle = tokio::time::timeout(T, status.wait_for(|s| s.state == State::Idle))
        .await
        .expect("idle while nothing was delivered")
        .unwrap()
        .clone();
    assert!(idle.ready && !idle.pinned, "{idle:?}");
    assert!(idle.reason.contains("no instance"), "{}", idle.reason);

    publish_keys(&js, "o", 2, 1).await;
    tokio::time::timeout(
        T,
        status.wait_for(|s| s.state == State::Consuming && s.pinned),
    )
    .await
    .expect("pinned by the first message")
    .unwrap();

    // A second instance of the member learns from the consumer that the pin is held.
    let second = Relay::ready(cfg).await;
    let mut other = second.health.subscribe();
    let standby = tokio::time::timeout(
        T,
        other.wait_for(|s| s.reason == "another instance holds the pin"),
    )
    .await
    .expect("standby, knowing why")
    .unwrap()
    .clone();
    assert_eq!(standby.state, State::Standby);
    assert!(standby.ready && !standby.pinned);
    second.stop().await.unwrap();
    first.stop().await.unwrap();
}

#[tokio::test]
async fn in_process_shutdown_with_nats_gone_returns_within_the_grace() {
    let app = MockApp::ok().await;
    let Env {
        mut nats,
        stream,
        durable,
        ..
    } = Env::start(&["i.>"]).await;
    let extra =
        format!("[delivery]\nshutdown_grace_ms = {GRACE_MS}\n[nats]\nreconnect_delay_ms = 50\n");
    let relay = Relay::ready(durable_config(&nats, &app, &stream, &durable, &extra)).await;
    nats.kill();
    let mut status = relay.health.subscribe();
    tokio::time::timeout(T, status.wait_for(|s| !s.ready))
        .await
        .unwrap()
        .unwrap();
    let s = relay.health.status();
    assert_eq!(s.state, State::NotReady, "{s:?}");
    let started = tokio::time::Instant::now();
    relay.stop().await.unwrap();
    let took = started.elapsed();
    assert!(
        took <= Duration::from_millis(GRACE_MS + 1000),
        "took {took:?}"
    );
}
