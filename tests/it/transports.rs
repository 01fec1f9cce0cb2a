//! The app over a Unix socket or HTTP/2 (`http.unix_socket`, `http.version`): every
//! request, batch and probe goes over the socket, a socket that goes away holds the
//! messages with no attempt spent; h2c is HTTP/2 on one connection with the same
//! answers as HTTP/1.1, and an app that does not speak it is held with a reason;
//! `auto` agrees on h2 by ALPN over TLS; `check` says what it finds.

use std::time::Duration;

use jetrelay::ops::readiness::State;

use crate::support::app::{Http, Recorded};
use crate::support::certs::certs;
use crate::support::*;

const T: Duration = Duration::from_secs(30);

const NOT_HTTP2: &str = "app unreachable: the app does not speak HTTP/2 (http.version = \"h2c\")";

fn versions(app: &MockApp) -> Vec<String> {
    let mut v: Vec<String> = app.requests().iter().map(|r| r.version.clone()).collect();
    v.dedup();
    v
}

#[tokio::test]
async fn a_unix_socket_app_removed_and_made_again_holds_the_messages_and_spends_no_attempt() {
    socket_removed_and_made_again(Http::One, "http1", "HTTP/1.1").await;
}

/// h2c's own connection (`http/h2.rs`) breaks with the app, and is made again to the
/// new socket.
#[tokio::test]
async fn an_h2c_app_on_a_socket_removed_and_made_again_holds_the_messages() {
    socket_removed_and_made_again(Http::Two, "h2c", "HTTP/2.0").await;
}

async fn socket_removed_and_made_again(http: Http, version: &str, seen_as: &str) {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("app.sock");
    let app = MockApp::start_unix(&sock, http, |_, _| Reply::status(200)).await;
    let env = Env::start(&["u.>"]).await;
    // max_deliver 3 would terminate everything if a missing socket spent attempts;
    // the ack wait is shorter than the outage, so only the keep-alives keep them.
    let extra = format!(
        "[http]\nunix_socket = \"{}\"\nversion = \"{version}\"\n\
         [delivery]\nretry_initial_ms = 100\nretry_max_ms = 400\n\
         [consumer]\nmax_deliver = 3\nack_wait_ms = 2000\n",
        sock.display()
    );
    let relay = env.relay(&app, &extra).await;
    publish(&env.js, "u.x", 5).await;
    eventually("the first five acked", T, || async {
        app.acked_seqs().len() == 5
    })
    .await;
    let first = &app.requests()[0];
    assert_eq!(first.header("accept"), Some("*/*"), "as reqwest sends it");
    assert_eq!(
        first.header("host"),
        Some("app.local"),
        "the URL gives Host"
    );
    assert_eq!(first.header("nats-subject"), Some("u.x"));
    assert_eq!(first.version, seen_as);
    let accepted = app.connections();
    assert!(accepted >= 1, "the requests came over the socket");

    app.close();
    let mut status = relay.health.subscribe();
    publish(&env.js, "u.x", 10).await;
    let down = tokio::time::timeout(T, status.wait_for(|s| !s.ready))
        .await
        .expect("not ready while the socket is gone")
        .unwrap()
        .clone();
    assert_eq!(down.state, State::NotReady);
    assert_eq!(down.reason, "app unreachable: no socket");
    eventually("held past the ack wait", T, || async {
        relay.metric("jetrelay_progress_sent_total").await >= 20.0
    })
    .await;
    for action in ["term", "dlq", "nak"] {
        let sample = format!("jetrelay_messages_settled_total{{action=\"{action}\"}}");
        assert_eq!(relay.metric(&sample).await, 0.0, "{action}");
    }

    app.reopen();
    eventually("every message acked", T, || async {
        app.acked_seqs().len() == 15
    })
    .await;
    eventually("drained", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    assert!(
        app.requests()
            .iter()
            .all(|r| r.header("nats-delivered") == Some("1")),
        "no attempt was spent on the missing socket and nothing was redelivered"
    );
    assert_eq!(relay.metric("jetrelay_redeliveries_total").await, 0.0);
    assert!(
        app.connections() > accepted,
        "a new connection to the new socket"
    );
    tokio::time::timeout(
        T,
        status.wait_for(|s| s.ready && s.state == State::Consuming),
    )
    .await
    .expect("ready again")
    .unwrap();
    relay.stop().await.unwrap();
}

/// A script by subject: `u.retry` answers 503 the first time, `u.bad` 400, the rest
/// 200 after a while (so that requests overlap).
fn by_subject(r: &Recorded, seen: usize) -> Reply {
    match (r.header("nats-subject"), seen) {
        (Some("u.retry"), 0) => Reply::status(503),
        (Some("u.bad"), _) => Reply::status(400),
        _ => Reply::status(200).after(Duration::from_millis(200)),
    }
}

#[tokio::test]
async fn h2c_is_http2_on_one_connection_with_the_same_headers_and_answers() {
    let app = MockApp::start_h2c(by_subject).await;
    let env = Env::start(&["u.>"]).await;
    let extra = "[http]\nversion = \"h2c\"\nheaders = { \"X-Api-Key\" = \"k1\" }\n\
                 [delivery]\nmax_in_flight = 32\nretry_initial_ms = 100\n";
    let relay = env.relay(&app, extra).await;
    publish(&env.js, "u.ok", 40).await;
    publish(&env.js, "u.retry", 2).await;
    publish(&env.js, "u.bad", 2).await;
    eventually("drained", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    let reqs = app.requests();
    assert_eq!(versions(&app), ["HTTP/2.0"], "h2c is HTTP/2");
    assert_eq!(app.connections(), 1, "every request on one connection");
    assert!(
        app.max_in_flight() >= 8,
        "requests in flight together on it: {}",
        app.max_in_flight()
    );
    let ok = reqs
        .iter()
        .find(|r| r.header("nats-subject") == Some("u.ok"))
        .unwrap();
    assert_eq!(ok.header("x-api-key"), Some("k1"));
    assert_eq!(ok.header("accept"), Some("*/*"), "as over HTTP/1.1");
    assert!(ok.header("nats-sequence").is_some() && ok.header("nats-msg-id").is_none());
    let count = |subject: &str| {
        (reqs.iter())
            .filter(|r| r.header("nats-subject") == Some(subject))
            .count()
    };
    assert_eq!(count("u.ok"), 40, "each once");
    assert_eq!(count("u.retry"), 4, "503 retried once each");
    assert_eq!(count("u.bad"), 2, "400 terminated, not retried");
    assert_eq!(relay.settled("term").await, 2.0);
    relay.stop().await.unwrap();
}

/// An app whose HTTP/2 connection takes only 4 streams at once: jetrelay opens more
/// connections rather than holding `max_in_flight = 16` to 4, and each message is
/// delivered once.
#[tokio::test]
async fn h2c_opens_another_connection_when_the_apps_stream_limit_is_reached() {
    let slow = |_: &Recorded, _: usize| Reply::status(200).after(Duration::from_millis(40));
    let app = MockApp::start_h2c_streams(4, slow).await;
    spread_over_connections(app, "").await;
}

/// `http.max_concurrent_streams = 4` does the same with an app that takes 200 a
/// connection.
#[tokio::test]
async fn max_concurrent_streams_spreads_the_requests_over_connections() {
    let slow = |_: &Recorded, _: usize| Reply::status(200).after(Duration::from_millis(40));
    let app = MockApp::start_h2c(slow).await;
    spread_over_connections(app, "max_concurrent_streams = 4\n").await;
}

/// 160 messages, 16 in flight, at most 4 a connection: each delivered once, on 4 or
/// more connections, more than 8 at once.
async fn spread_over_connections(app: MockApp, http: &str) {
    let env = Env::start(&["u.>"]).await;
    let extra = format!("[http]\nversion = \"h2c\"\n{http}[delivery]\nmax_in_flight = 16\n");
    let relay = env.relay(&app, &extra).await;
    publish(&env.js, "u.x", 160).await;
    eventually("drained", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    assert_eq!(versions(&app), ["HTTP/2.0"]);
    assert_eq!(app.acked_seqs().len(), 160, "each message delivered");
    assert_eq!(app.requests().len(), 160, "and once");
    assert!(
        (4..=16).contains(&app.connections()),
        "connections for 16 requests at 4 streams each: {}",
        app.connections()
    );
    assert!(
        app.max_in_flight() > 8,
        "more requests at once than one connection's 4: {}",
        app.max_in_flight()
    );
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn h2c_over_the_socket_carries_batches_and_health_probes() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("h2.sock");
    let app = MockApp::start_unix(&sock, Http::Two, |_, _| Reply::status(200)).await;
    app.set_healthy(true);
    let env = Env::start(&["b.>"]).await;
    publish(&env.js, "b.x", 12).await;
    let extra = format!(
        "[http]\nunix_socket = \"{}\"\nversion = \"h2c\"\nhealth_url = \"{}\"\n\
         health_interval_ms = 100\n\
         [delivery]\nbatch_size = 6\nbatch_wait_ms = 300\nmax_in_flight = 2\n",
        sock.display(),
        app.health_url()
    );
    let relay = env.relay(&app, &extra).await;
    eventually("drained", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    let reqs = app.requests();
    let carried: usize = reqs
        .iter()
        .map(|r| {
            let doc: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
            doc["messages"].as_array().unwrap().len()
        })
        .sum();
    assert_eq!(carried, 12, "each message once");
    assert!(reqs.len() < 12, "in batches: {} requests", reqs.len());
    assert!(
        reqs.iter()
            .all(|r| r.header("jetrelay-batch-size").is_some())
    );
    assert_eq!(versions(&app), ["HTTP/2.0"]);
    assert!(app.health_probes() >= 1, "the probe went over the socket");
    assert_eq!(app.connections(), 1, "probes and batches on one connection");
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn h2c_to_an_app_that_speaks_only_http1_is_held_with_the_reason() {
    let app = MockApp::start_http1_only(|_, _| Reply::status(200)).await;
    let env = Env::start(&["u.>"]).await;
    let extra = "[http]\nversion = \"h2c\"\n[delivery]\nretry_initial_ms = 100\n\
                 retry_max_ms = 300\n[consumer]\nmax_deliver = 2\n";
    let relay = env.relay(&app, extra).await;
    let mut status = relay.health.subscribe();
    publish(&env.js, "u.x", 3).await;
    let down = tokio::time::timeout(T, status.wait_for(|s| !s.ready))
        .await
        .expect("not ready: the app does not speak HTTP/2")
        .unwrap()
        .clone();
    assert_eq!(down.reason, NOT_HTTP2);
    eventually("several tries", T, || async {
        relay
            .metric("jetrelay_http_requests_total{class=\"error\"}")
            .await
            >= 4.0
    })
    .await;
    assert_eq!(app.arrivals(), 0, "no request ever reached the app");
    for action in ["term", "dlq", "nak"] {
        let sample = format!("jetrelay_messages_settled_total{{action=\"{action}\"}}");
        assert_eq!(
            relay.metric(&sample).await,
            0.0,
            "{action}: no attempt spent"
        );
    }
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn auto_agrees_on_h2_over_tls_and_http1_stays_http1() {
    let dir = tempfile::tempdir().unwrap();
    let c = certs(dir.path());
    let app = MockApp::start_tls_h2(&c.server_cert, &c.server_key, |_, _| Reply::status(200)).await;
    let env = Env::start(&["t.>"]).await;
    let ca = c.ca.display();
    let auto = env
        .relay(
            &app,
            &format!("[http]\ntls_ca_file = \"{ca}\"\nversion = \"auto\"\n"),
        )
        .await;
    publish(&env.js, "t.x", 5).await;
    eventually("five over h2", T, || async { app.acked_seqs().len() == 5 }).await;
    assert_eq!(versions(&app), ["HTTP/2.0"], "ALPN agreed on h2");
    auto.stop().await.unwrap();

    // The same app under the default: ALPN offers only http/1.1.
    let cfg = durable_config(
        &env.nats,
        &app,
        &env.stream,
        &unique("d"),
        &format!("[http]\ntls_ca_file = \"{ca}\"\n[consumer]\ndeliver_policy = \"all\"\n"),
    );
    let one = Relay::ready(cfg).await;
    eventually("the five again over HTTP/1.1", T, || async {
        app.requests().len() == 10
    })
    .await;
    assert_eq!(versions(&app), ["HTTP/2.0", "HTTP/1.1"]);
    one.stop().await.unwrap();
}

#[tokio::test]
async fn check_says_whether_the_socket_is_there_and_whether_h2c_is_spoken() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("app.sock");
    let env = Env::start(&["c.>"]).await;
    let cfg = |version: &str, url: &str| {
        durable_config_for(
            env.nats.url(),
            url,
            &env.stream,
            &env.durable,
            &format!(
                "[http]\nunix_socket = \"{}\"\nversion = \"{version}\"\n",
                sock.display()
            ),
        )
    };
    let url = "http://app.local/messages";
    // Missing: a warning, not a failure (the app may not be up yet).
    let offline = jetrelay::cli::check::without_nats(&cfg("http1", url))
        .await
        .unwrap();
    assert!(offline.contains("app socket"), "{offline}");
    assert!(offline.contains("warning: missing"), "{offline}");
    let report = jetrelay::cli::check::check(&cfg("http1", url))
        .await
        .unwrap();
    assert!(report.ok, "{:?}", report.lines);
    assert!(
        report.lines[0].contains("warning: missing"),
        "{:?}",
        report.lines
    );

    let app = MockApp::start_unix(&sock, Http::One, |_, _| Reply::status(200)).await;
    let offline = jetrelay::cli::check::without_nats(&cfg("http1", url))
        .await
        .unwrap();
    assert!(offline.contains("exists and is a socket"), "{offline}");
    let report = jetrelay::cli::check::check(&cfg("http1", url))
        .await
        .unwrap();
    assert!(report.ok, "{:?}", report.lines);
    assert!(
        report.lines[0].contains("accepts a connection"),
        "{:?}",
        report.lines
    );
    // h2c to an HTTP/1 app: check fails, saying why.
    let report = jetrelay::cli::check::check(&cfg("h2c", url)).await.unwrap();
    assert!(!report.ok, "{:?}", report.lines);
    assert!(
        report
            .lines
            .iter()
            .any(|l| l.contains("does not speak HTTP/2")),
        "{:?}",
        report.lines
    );
    drop(app);
    let h2 = MockApp::start_h2c(|_, _| Reply::status(200)).await;
    let plain = durable_config(
        &env.nats,
        &h2,
        &env.stream,
        &env.durable,
        "[http]\nversion = \"h2c\"\n",
    );
    let report = jetrelay::cli::check::check(&plain).await.unwrap();
    assert!(report.ok, "{:?}", report.lines);
    assert!(
        report.lines.iter().any(|l| l == "app (h2c): speaks HTTP/2"),
        "{:?}",
        report.lines
    );
}
