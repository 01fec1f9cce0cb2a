//! The forwarding core end to end: ack after 2xx, delayed retries, term, headers,
//! backpressure bounds, and the admin endpoints moving.

use std::time::Duration;

use async_nats::HeaderMap;

use crate::support::*;

const T: Duration = Duration::from_secs(20);

#[tokio::test]
async fn every_message_reaches_the_app_unchanged_and_is_acked_after_2xx() {
    let app = MockApp::ok().await;
    let env = Env::start(&["orders.>"]).await;
    let relay = env.relay(&app, "").await;

    let mut headers = HeaderMap::new();
    headers.insert("X-Trace", "abc");
    headers.insert("Content-Type", "application/json");
    headers.insert("Nats-Msg-Id", "id-1");
    env.js
        .publish_with_headers("orders.eu", headers, "{\"n\":1}".into())
        .await
        .unwrap()
        .await
        .unwrap();
    publish(&env.js, "orders.us", 19).await;

    app.wait_for("20 requests", T, |r| r.len() >= 20).await;
    let first = app.requests().into_iter().find(|r| r.seq() == 1).unwrap();
    assert_eq!(first.body.as_ref(), b"{\"n\":1}");
    assert_eq!(first.header("content-type"), Some("application/json"));
    assert_eq!(first.header("x-trace"), Some("abc"));
    assert_eq!(first.header("nats-subject"), Some("orders.eu"));
    assert_eq!(first.header("nats-stream"), Some(env.stream.as_str()));
    assert_eq!(first.header("nats-delivered"), Some("1"));
    assert_eq!(first.header("nats-msg-id"), Some("id-1"));
    assert!(first.header("nats-published").unwrap().ends_with('Z'));
    assert!(first.header("nats-pin-id").is_none());
    let other = app.requests().into_iter().find(|r| r.seq() == 2).unwrap();
    assert_eq!(other.body.as_ref(), b"m0");
    assert_eq!(
        other.header("content-type"),
        Some("application/octet-stream")
    );

    eventually("all acked", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    assert_eq!(app.requests().len(), 20, "no duplicates");
    assert_eq!(relay.metric("jetrelay_messages_received_total").await, 20.0);
    assert_eq!(relay.settled("ack").await, 20.0);
    assert_eq!(
        relay
            .metric("jetrelay_http_requests_total{class=\"2xx\"}")
            .await,
        20.0
    );
    assert_eq!(relay.metric("jetrelay_nats_connected").await, 1.0);
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn a_503_twice_then_200_is_seen_three_times_no_sooner_than_the_delays() {
    let app = MockApp::start(|_, seen| Reply::status(if seen < 2 { 503 } else { 200 })).await;
    let env = Env::start(&["r.>"]).await;
    let cfg = env.config(&app, "[delivery]\nretry_initial_ms = 300\n");
    let relay = Relay::ready(cfg).await;
    publish(&env.js, "r.x", 1).await;

    app.wait_for("three attempts", T, |r| r.len() >= 3).await;
    eventually("acked", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    let r = app.requests();
    assert_eq!(r.len(), 3);
    let delivered: Vec<_> = r
        .iter()
        .map(|r| r.header("nats-delivered").unwrap().to_string())
        .collect();
    assert_eq!(delivered, ["1", "2", "3"]);
    // Exponential: 300 ms after the first failure, 600 ms after the second.
    assert!(
        r[1].at - r[0].at >= Duration::from_millis(300),
        "{:?}",
        r[1].at - r[0].at
    );
    assert!(
        r[2].at - r[1].at >= Duration::from_millis(600),
        "{:?}",
        r[2].at - r[1].at
    );
    assert_eq!(relay.settled("nak").await, 2.0);
    assert_eq!(relay.metric("jetrelay_redeliveries_total").await, 2.0);
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn retry_after_from_the_app_sets_the_delay() {
    let app = MockApp::start(|_, seen| {
        if seen == 0 {
            Reply::status(429).header("Retry-After", "1")
        } else {
            Reply::status(200)
        }
    })
    .await;
    let env = Env::start(&["r.>"]).await;
    let cfg = env.config(&app, "[delivery]\nretry_initial_ms = 10\n");
    let relay = Relay::ready(cfg).await;
    publish(&env.js, "r.x", 1).await;
    app.wait_for("two attempts", T, |r| r.len() >= 2).await;
    let r = app.requests();
    assert!(
        r[1].at - r[0].at >= Duration::from_secs(1),
        "{:?}",
        r[1].at - r[0].at
    );
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn a_400_is_terminated_and_never_redelivered() {
    let app = MockApp::start(|_, _| Reply::status(400)).await;
    let env = Env::start(&["t.>"]).await;
    let cfg = env.config(&app, "[consumer]\nack_wait_ms = 1000\n");
    let relay = Relay::ready(cfg).await;
    publish(&env.js, "t.x", 3).await;
    app.wait_for("three requests", T, |r| r.len() >= 3).await;
    // Terminated messages leave the consumer: nothing pending or awaiting an ack, so
    // nothing can come back (an unsettled one would be redelivered after 1 s).
    eventually("terminated", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    let info = consumer_info(&env.js, &env.stream, &env.durable)
        .await
        .unwrap();
    assert_eq!(info.ack_floor.stream_sequence, 3);
    assert_eq!(app.requests().len(), 3);
    assert_eq!(relay.settled("term").await, 3.0);
    assert_eq!(
        relay
            .metric("jetrelay_http_requests_total{class=\"4xx\"}")
            .await,
        3.0
    );
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn an_unreachable_app_means_delayed_retries_not_loss() {
    // An app that is not listening yet: bind a port, learn it, close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let app = MockApp::ok().await;
    let env = Env::start(&["u.>"]).await;
    let extra = format!(
        "[http]\nurl = \"http://127.0.0.1:{port}/messages\"\n[delivery]\nretry_initial_ms = 100\n"
    );
    let relay = env.relay(&app, &extra).await;
    publish(&env.js, "u.x", 2).await;
    eventually("connection errors counted", T, || async {
        relay
            .metric("jetrelay_http_requests_total{class=\"error\"}")
            .await
            >= 4.0
    })
    .await;
    let info = consumer_info(&env.js, &env.stream, &env.durable)
        .await
        .unwrap();
    assert_eq!(
        info.ack_floor.stream_sequence, 0,
        "nothing acked without the app"
    );
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn concurrency_and_buffer_bounds_hold_under_load() {
    let app = MockApp::start(|_, _| Reply::status(200).after(Duration::from_millis(40))).await;
    let env = Env::start(&["b.>"]).await;
    let cfg = env.config(
        &app,
        "[delivery]\nmax_in_flight = 4\nmax_buffered = 8\nmax_batch = 8\n",
    );
    let relay = Relay::ready(cfg).await;
    publish(&env.js, "b.x", 60).await;
    let mut max_ack_pending = 0;
    let mut max_buffered = 0.0f64;
    let deadline = tokio::time::Instant::now() + T;
    while app.requests().len() < 60 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {} delivered",
            app.requests().len()
        );
        if let Some(i) = consumer_info(&env.js, &env.stream, &env.durable).await {
            max_ack_pending = max_ack_pending.max(i.num_ack_pending);
            assert_eq!(
                i.config.max_ack_pending, 8,
                "max_ack_pending = max_buffered"
            );
        }
        max_buffered = max_buffered.max(relay.metric("jetrelay_buffered").await);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        app.max_in_flight() <= 4,
        "app saw {} concurrent requests",
        app.max_in_flight()
    );
    assert!(app.max_in_flight() >= 2, "requests ran concurrently");
    assert!(
        max_ack_pending <= 8,
        "server had {max_ack_pending} unacknowledged"
    );
    assert!(max_buffered <= 8.0, "daemon held {max_buffered}");
    eventually("all acked", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn admin_endpoints_answer_and_ready_tells_the_state() {
    let app = MockApp::ok().await;
    let env = Env::start(&["a.>"]).await;
    let relay = Relay::start(env.config(&app, "")).await;
    assert_eq!(relay.get("/healthz").await.0, 200);
    // Kubernetes' names answer as the old ones.
    assert_eq!(relay.get("/livez").await, relay.get("/healthz").await);
    relay.wait_ready(T).await;
    let (code, body) = relay.get("/ready").await;
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["ready"], true);
    assert_eq!(v["state"], "consuming");
    assert_eq!(v["pinned"], false);
    assert!(v["partitions"].as_array().unwrap().is_empty());
    let (code, body) = relay.get("/readyz").await;
    assert_eq!(code, 200);
    let z: serde_json::Value = serde_json::from_str(&body).unwrap();
    for field in [
        "ready",
        "state",
        "reason",
        "pinned",
        "partitions",
        "sources",
    ] {
        assert_eq!(z[field], v[field], "/readyz's {field}: {body}");
    }
    let (code, text) = relay.get("/metrics").await;
    assert_eq!(code, 200);
    assert!(text.contains("jetrelay_build_info{version=\""));
    assert_eq!(relay.metric("jetrelay_ready").await, 1.0);
    publish(&env.js, "a.b", 5).await;
    eventually("received moves", T, || async {
        relay.metric("jetrelay_messages_received_total").await == 5.0
    })
    .await;
    eventually("consumer gauges", T, || async {
        relay
            .metric("jetrelay_message_duration_seconds_count")
            .await
            == 5.0
    })
    .await;
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn headers_that_are_not_valid_http_are_skipped_and_counted_never_lost() {
    let app = MockApp::ok().await;
    let env = Env::start(&["h.>"]).await;
    let relay = env.relay(&app, "").await;
    // Valid NATS headers that HTTP forbids: '(' in a name, a control character in a value.
    let mut headers = HeaderMap::new();
    headers.insert("X(bad)", "v");
    headers.insert("X-Bell", "a\u{7}b");
    headers.insert("X-Good", "kept");
    env.js
        .publish_with_headers("h.x", headers, "payload".into())
        .await
        .unwrap()
        .await
        .unwrap();
    app.wait_for("the message", T, |r| r.len() == 1).await;
    let r = &app.requests()[0];
    assert_eq!(r.body.as_ref(), b"payload");
    assert_eq!(r.header("x-good"), Some("kept"));
    assert!(r.header("x-bell").is_none());
    eventually("acked", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    assert_eq!(relay.metric("jetrelay_headers_skipped_total").await, 2.0);
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn retry_after_zero_still_waits_the_first_retry_delay() {
    let app = MockApp::start(|_, _| Reply::status(503).header("retry-after", "0")).await;
    let env = Env::start(&["z.>"]).await;
    let extra = "[delivery]\nretry_initial_ms = 300\n[consumer]\nmax_deliver = 3\n";
    let relay = env.relay(&app, extra).await;
    publish(&env.js, "z.x", 1).await;
    app.wait_for("three attempts", T, |r| r.len() == 3).await;
    let r = app.requests();
    for pair in r.windows(2) {
        let gap = pair[1].at - pair[0].at;
        assert!(gap >= Duration::from_millis(300), "retried after {gap:?}");
    }
    eventually("terminated", T, || async {
        relay.settled("term").await == 1.0
    })
    .await;
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn a_publisher_cannot_forge_identity_headers_and_pass_headers_narrows_the_rest() {
    let app = MockApp::ok().await;
    let env = Env::start(&["id.>"]).await;
    let relay = env
        .relay(
            &app,
            "[http]\npass_headers = [\"X-Trace\", \"X-Tenant-*\"]\n",
        )
        .await;
    let mut headers = HeaderMap::new();
    for (n, v) in [
        ("Authorization", "Bearer forged"),
        ("Proxy-Authorization", "Basic forged"),
        ("Cookie", "session=forged"),
        ("Forwarded", "for=6.6.6.6"),
        ("X-Forwarded-For", "6.6.6.6"),
        ("X-Real-Ip", "6.6.6.6"),
        ("Jetrelay-Action", "ack"),
        ("X-Trace", "t-1"),
        ("X-Tenant-Id", "7"),
        ("X-Other", "dropped"),
    ] {
        headers.insert(n, v);
    }
    env.js
        .publish_with_headers("id.x", headers, "m".into())
        .await
        .unwrap()
        .await
        .unwrap();
    app.wait_for("the request", T, |r| r.len() == 1).await;
    let r = &app.requests()[0];
    for forged in [
        "authorization",
        "proxy-authorization",
        "cookie",
        "forwarded",
        "x-forwarded-for",
        "x-real-ip",
        "jetrelay-action",
        "x-other",
    ] {
        assert_eq!(r.header(forged), None, "{forged} reached the app");
    }
    assert_eq!(r.header("x-trace"), Some("t-1"));
    assert_eq!(r.header("x-tenant-id"), Some("7"));
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn proxy_variables_are_ignored_and_http_proxy_is_used_when_set() {
    let app = MockApp::ok().await;
    // A "proxy" that answers whatever reaches it (absolute-form requests route by
    // their path): what it records went through it.
    let proxy = MockApp::ok().await;
    let proxy_url = proxy.url().trim_end_matches("/messages").to_string();
    let Env {
        nats,
        js,
        stream,
        durable,
    } = Env::start(&["px.>"]).await;
    let text = |extra: &str| {
        format!(
            "[nats]\nservers = \"{}\"\n[source]\nstream = \"{stream}\"\nkind = \"durable\"\ndurable = \"{durable}\"\n\
             [http]\nurl = \"{}\"\n{extra}[admin]\nlisten = \"127.0.0.1:0\"\n",
            nats.url(),
            app.url()
        )
    };
    let env = [
        ("HTTP_PROXY", proxy_url.as_str()),
        ("http_proxy", proxy_url.as_str()),
        ("ALL_PROXY", proxy_url.as_str()),
    ];
    let d = crate::support::daemon::Daemon::start_with_env(&text(""), &env).await;
    publish(&js, "px.a", 1).await;
    app.wait_for("straight to the app", T, |r| r.len() == 1)
        .await;
    assert_eq!(
        proxy.arrivals(),
        0,
        "the environment diverted the app's traffic"
    );
    drop(d);
    let _d =
        crate::support::daemon::Daemon::start(&text(&format!("proxy = \"{proxy_url}\"\n"))).await;
    publish(&js, "px.b", 1).await;
    proxy
        .wait_for("through the configured proxy", T, |r| r.len() == 1)
        .await;
    assert_eq!(app.arrivals(), 1);
    assert_eq!(proxy.requests()[0].header("proxy-authorization"), None);
    drop(_d);
    // Its credentials come from a file (never in the URL).
    let dir = tempfile::tempdir().unwrap();
    let creds = dir.path().join("proxy");
    std::fs::write(&creds, "alice:s3cret\n").unwrap();
    let _d = crate::support::daemon::Daemon::start(&text(&format!(
        "proxy = \"{proxy_url}\"\nproxy_credentials_file = \"{}\"\n",
        creds.display()
    )))
    .await;
    publish(&js, "px.c", 1).await;
    proxy
        .wait_for("through the proxy, authenticated", T, |r| r.len() == 2)
        .await;
    assert_eq!(
        proxy.requests()[1].header("proxy-authorization"),
        Some("Basic YWxpY2U6czNjcmV0"),
        "alice:s3cret"
    );
}

#[tokio::test]
async fn a_rotated_token_is_used_without_a_restart_and_probes_carry_the_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let (token, key) = (dir.path().join("token"), dir.path().join("api-key"));
    std::fs::write(&token, "v1\n").unwrap();
    std::fs::write(&key, "k1").unwrap();
    // The app takes only the current token; another one is retried (503), not lost.
    let current = std::sync::Arc::new(std::sync::Mutex::new("Bearer v1".to_string()));
    let accepted = current.clone();
    let app = MockApp::start(move |r, _| {
        let ok = r.header("authorization") == Some(accepted.lock().unwrap().as_str())
            && r.header("x-api-key").is_some();
        Reply::status(if ok { 200 } else { 503 })
    })
    .await;
    app.set_healthy(true);
    let env = Env::start(&["tok.>"]).await;
    let extra = format!(
        "[http]\nbearer_token_file = \"{}\"\nheader_files = {{ \"X-Api-Key\" = \"{}\" }}\n\
         health_url = \"{}\"\nhealth_interval_ms = 50\n[delivery]\nretry_initial_ms = 100\nretry_max_ms = 200\n",
        token.display(),
        key.display(),
        app.health_url()
    );
    let relay = env.relay(&app, &extra).await;
    publish(&env.js, "tok.a", 1).await;
    app.wait_for("v1 accepted", T, |r| r.iter().any(|r| r.status == 200))
        .await;
    assert_eq!(
        app.probe_credentials(),
        (Some("Bearer v1".into()), Some("k1".into())),
        "probes carry the app's credentials"
    );

    // Rotation: the file changes, the app takes only the new token from now on.
    std::fs::write(&token, "v2-rotated\n").unwrap();
    *current.lock().unwrap() = "Bearer v2-rotated".into();
    publish(&env.js, "tok.b", 1).await;
    eventually("all acked with the new token", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    let last = app.requests().into_iter().last().unwrap();
    assert_eq!(last.header("authorization"), Some("Bearer v2-rotated"));
    assert_eq!(last.status, 200);
    assert_eq!(
        relay.settled("ack").await,
        2.0,
        "nothing was terminated for a stale token"
    );
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn a_half_sent_request_cannot_hold_the_admin_port_and_connections_are_bounded() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let app = MockApp::ok().await;
    let env = Env::start(&["adm.>"]).await;
    let relay = env.relay(&app, "").await;
    // Headers that never end: the server closes the connection after its header
    // timeout (5 s), not after minutes.
    let mut slow = tokio::net::TcpStream::connect(relay.admin).await.unwrap();
    slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let mut buf = [0u8; 256];
    let closed = tokio::time::timeout(Duration::from_secs(15), slow.read(&mut buf)).await;
    assert!(
        closed.is_ok(),
        "the half-sent request held the connection for 15 s"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );

    // 64 open connections at most: a 65th pushes out the oldest idle one, so a
    // flood of idle connections cannot lock a prober out, and the number open
    // never goes over the bound.
    let mut open = Vec::new();
    for _ in 0..64 {
        open.push(tokio::net::TcpStream::connect(relay.admin).await.unwrap());
    }
    let mut extra = tokio::net::TcpStream::connect(relay.admin).await.unwrap();
    extra
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let n = tokio::time::timeout(Duration::from_secs(5), extra.read(&mut buf))
        .await
        .expect("the prober past the bound is answered")
        .unwrap();
    let answer = String::from_utf8_lossy(&buf[..n]).to_string();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // The oldest of the flood was closed to make room.
    let oldest = tokio::time::timeout(Duration::from_secs(5), open[0].read(&mut buf))
        .await
        .expect("the oldest idle connection is closed")
        .unwrap_or(0);
    assert_eq!(oldest, 0, "the oldest idle connection still open");
    // And the newest of the flood still is: only one was pushed out.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), open[63].read(&mut buf))
            .await
            .is_err(),
        "more than the oldest connection was closed"
    );
    open.truncate(10);
    eventually("served again", T, || async {
        http()
            .get(format!("http://{}/healthz", relay.admin))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
    })
    .await;
    drop(open);
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn an_https_app_is_reached_with_its_private_ca_and_a_wrong_one_holds_messages_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let c = crate::support::certs::certs(dir.path());
    let app = MockApp::start_tls(&c.server_cert, &c.server_key, |_, _| Reply::status(200)).await;
    assert!(app.url().starts_with("https://"));
    let env = Env::start(&["tls.>"]).await;
    let extra = format!("[http]\ntls_ca_file = \"{}\"\n", c.ca.display());
    let relay = env.relay(&app, &extra).await;
    publish(&env.js, "tls.a", 2).await;
    eventually("acked over https", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    assert_eq!(app.arrivals(), 2);
    relay.stop().await.unwrap();

    // Without the private CA the server is not trusted: nothing is lost or
    // terminated, and /ready says why.
    let other = tempfile::tempdir().unwrap();
    let wrong = crate::support::certs::certs(other.path());
    let extra = format!("[http]\ntls_ca_file = \"{}\"\n", wrong.ca.display());
    let relay = Relay::start(env.config(&app, &extra)).await;
    publish(&env.js, "tls.b", 1).await;
    let mut status = relay.health.subscribe();
    let shown = tokio::time::timeout(
        T,
        status.wait_for(|s| s.reason.contains("tls handshake failed")),
    )
    .await
    .unwrap_or_else(|_| {
        panic!(
            "the reason names the TLS failure: {:?}",
            relay.health.status()
        )
    })
    .unwrap()
    .clone();
    assert!(!shown.ready, "{shown:?}");
    assert_eq!(app.arrivals(), 2);
    assert_eq!(relay.settled("term").await, 0.0);
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn cloudevents_format_sends_binary_mode_events_and_keeps_an_events_own_attributes() {
    let app = MockApp::ok().await;
    let env = Env::start(&["ce.>"]).await;
    let relay = env.relay(&app, "[http]\nformat = \"cloudevents\"\n").await;
    let mut own = HeaderMap::new();
    own.insert("ce-specversion", "1.0");
    own.insert("ce-id", "evt-9");
    own.insert("ce-type", "com.example.shipped");
    own.insert("ce-source", "/warehouse");
    env.js
        .publish_with_headers("ce.own", own, "{}".into())
        .await
        .unwrap()
        .await
        .unwrap();
    env.js
        .publish("ce.plain", "{}".into())
        .await
        .unwrap()
        .await
        .unwrap();
    app.wait_for("both", T, |r| r.len() == 2).await;
    let by_subject = |s: &str| {
        app.requests()
            .into_iter()
            .find(|r| r.header("nats-subject") == Some(s))
            .unwrap()
    };
    let plain = by_subject("ce.plain");
    assert_eq!(plain.header("ce-specversion"), Some("1.0"));
    assert_eq!(
        plain.header("ce-id"),
        Some(format!("{}:2", env.stream).as_str())
    );
    assert_eq!(
        plain.header("ce-source"),
        Some(format!("/jetstream/{}", env.stream).as_str())
    );
    assert_eq!(plain.header("ce-type"), Some("io.nats.jetstream.message"));
    assert_eq!(plain.header("ce-subject"), Some("ce.plain"));
    assert!(plain.header("ce-time").unwrap().ends_with('Z'));
    let own = by_subject("ce.own");
    assert_eq!(own.header("ce-id"), Some("evt-9"));
    assert_eq!(own.header("ce-type"), Some("com.example.shipped"));
    assert_eq!(own.header("ce-source"), Some("/warehouse"));
    relay.stop().await.unwrap();
}

/// `http.format = "cloudevents-structured"`: each body is a JSON CloudEvent with
/// binary mode's attributes, the payload as `data` when it is JSON, else as
/// `data_base64`; batches aside, every request is `application/cloudevents+json`.
#[tokio::test]
async fn cloudevents_structured_format_sends_json_events_with_data_or_data_base64() {
    let app = MockApp::ok().await;
    let env = Env::start(&["ces.>"]).await;
    let relay = env
        .relay(&app, "[http]\nformat = \"cloudevents-structured\"\n")
        .await;
    publish_with(
        &env.js,
        "ces.json",
        r#"{"order": 7}"#,
        &[("Nats-Msg-Id", "o-7")],
    )
    .await;
    publish_with(
        &env.js,
        "ces.text",
        "ping",
        &[("Content-Type", "text/plain")],
    )
    .await;
    app.wait_for("both", T, |r| r.len() == 2).await;
    let event = |s: &str| {
        let r = (app.requests().into_iter())
            .find(|r| r.header("nats-subject") == Some(s))
            .unwrap();
        assert_eq!(
            r.header("content-type"),
            Some("application/cloudevents+json")
        );
        assert_eq!(r.header("ce-id"), None, "structured: no binary headers");
        serde_json::from_slice::<serde_json::Value>(&r.body).unwrap()
    };
    let json = event("ces.json");
    assert_eq!(json["specversion"], "1.0");
    assert_eq!(json["id"], "o-7");
    assert_eq!(json["source"], format!("/jetstream/{}", env.stream));
    assert_eq!(json["type"], "io.nats.jetstream.message");
    assert_eq!(json["subject"], "ces.json");
    assert!(json["time"].as_str().unwrap().ends_with('Z'));
    assert_eq!(json["datacontenttype"], "application/json");
    assert_eq!(json["data"], serde_json::json!({"order": 7}));
    let text = event("ces.text");
    assert_eq!(text["id"], format!("{}:2", env.stream));
    assert_eq!(text["datacontenttype"], "text/plain");
    assert_eq!(text["data_base64"], "cGluZw==");
    assert!(text.get("data").is_none());
    relay.stop().await.unwrap();
}

/// `http.unwrap_cloudevents`: a structured CloudEvent (a Dapr publisher's, one with
/// `data_base64`) reaches the app as its data with its attributes as `ce-*` headers;
/// a message of another type goes as it came; an envelope that is not a valid
/// CloudEvent is dead-lettered as `malformed_cloudevent`, never sent.
#[tokio::test]
async fn unwrap_cloudevents_sends_the_data_with_ce_headers_and_dead_letters_a_malformed_envelope() {
    let app = MockApp::ok().await;
    let env = Env::start(&["ceu.>"]).await;
    let dlq_stream = unique("DLQ");
    create_stream(&env.js, &dlq_stream, &[&format!("dlq.{}", env.stream)]).await;
    let extra = format!(
        "[http]\nunwrap_cloudevents = true\nformat = \"cloudevents\"\n[dlq]\nsubject = \"dlq.{}\"\n",
        env.stream
    );
    let relay = env.relay(&app, &extra).await;
    let ce = [("Content-Type", "application/cloudevents+json")];
    let dapr = r#"{"data":{"orderId":7},"datacontenttype":"application/json","id":"5929aaac","pubsubname":"orderpubsub","source":"checkout","specversion":"1.0","time":"2026-12-06T17:00:00Z","topic":"orders","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","tracestate":"","type":"com.dapr.event.sent"}"#;
    publish_with(&env.js, "ceu.dapr", dapr, &ce).await;
    let bin = r#"{"specversion":"1.0","id":"b1","source":"/cam","type":"frame","datacontenttype":"image/png","data_base64":"iVBORw=="}"#;
    publish_with(&env.js, "ceu.bin", bin, &ce).await;
    publish_with(&env.js, "ceu.bad", r#"{"specversion":"1.0","id":"x"}"#, &ce).await;
    publish_with(&env.js, "ceu.plain", r#"{"specversion":"1.0"}"#, &[]).await;
    eventually("all settled", Duration::from_secs(20), || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    let sent = |s: &str| (app.requests().into_iter()).find(|r| r.header("nats-subject") == Some(s));
    let d = sent("ceu.dapr").unwrap();
    assert_eq!(&d.body[..], br#"{"orderId":7}"#);
    assert_eq!(d.header("content-type"), Some("application/json"));
    for (n, v) in [
        ("ce-specversion", "1.0"),
        ("ce-id", "5929aaac"),
        ("ce-source", "checkout"),
        ("ce-type", "com.dapr.event.sent"),
        ("ce-topic", "orders"),
        ("ce-pubsubname", "orderpubsub"),
        ("ce-time", "2026-12-06T17:00:00Z"),
    ] {
        assert_eq!(d.header(n), Some(v), "{n}");
    }
    let b = sent("ceu.bin").unwrap();
    assert_eq!(&b.body[..], b"\x89PNG");
    assert_eq!(b.header("content-type"), Some("image/png"));
    assert_eq!(b.header("ce-id"), Some("b1"));
    let p = sent("ceu.plain").unwrap();
    assert_eq!(&p.body[..], br#"{"specversion":"1.0"}"#, "not unwrapped");
    assert!(sent("ceu.bad").is_none(), "never sent");
    assert_eq!(app.requests().len(), 3);
    let mut dlq = env.js.get_stream(&dlq_stream).await.unwrap();
    assert_eq!(dlq.info().await.unwrap().state.messages, 1);
    let letter = dlq.get_raw_message(1).await.unwrap();
    let reason = letter.headers.get("Jetrelay-Dlq-Reason").unwrap().as_str();
    assert!(
        reason.starts_with("jetrelay: malformed_cloudevent: source is missing"),
        "{reason}"
    );
    assert_eq!(
        relay
            .metric("jetrelay_invalid_messages_total{reason=\"malformed_cloudevent\"}")
            .await,
        1.0
    );
    relay.stop().await.unwrap();
}
