//! A service source (`kind = "service"`) against a real nats-server and a real HTTP
//! app, asked by an async-nats requester: replies and error codes, concurrent
//! requests each matched to its reply, discovery, two instances in one queue group,
//! the app down, and a stream source beside it in one process.

use std::time::{Duration, Instant};

use bytes::Bytes;
use figment::Figment;
use figment::providers::{Format, Toml};
use jetrelay::config::Config;

use crate::support::app::Recorded;
use crate::support::*;

const T: Duration = Duration::from_secs(30);

/// A config with the service source `rpc` (service `svc`, endpoints `create` on
/// `<prefix>.create` and `cancel` on `<prefix>.cancel`, both to `app`'s path), and
/// `extra` TOML on top.
fn service_config(nats: &NatsServer, app_url: &str, svc: &str, extra: &str) -> Config {
    let base = format!(
        r#"
        [nats]
        servers = "{}"
        [http]
        url = "{app_url}"
        timeout_ms = 5000
        [admin]
        listen = "127.0.0.1:0"
        [log]
        level = "warn"
        [sources.rpc]
        kind = "service"
        service = "{svc}"
        version = "1.2.3"
        queue_group = "q"
        endpoints = [
          {{ name = "create", subject = "{svc}.create", path = "/messages" }},
          {{ name = "cancel", subject = "{svc}.cancel", path = "/messages" }},
        ]
        max_reply_bytes = 64
        "#,
        nats.url(),
    );
    Config::from_figment(Figment::from(Toml::string(&base)).merge(Toml::string(extra)))
        .unwrap_or_else(|e| panic!("test config: {e}"))
}

/// The app's answer to a request: its payload echoed, or what the payload asks.
fn echo(r: &Recorded, _: usize) -> Reply {
    let body = String::from_utf8_lossy(&r.body).to_string();
    match body.as_str() {
        "missing" => Reply::status(404).body("no such order"),
        "big" => Reply::status(200).body("x".repeat(65)),
        "slow" => Reply::status(200).after(Duration::from_secs(3)),
        _ => Reply::status(200)
            .header("content-type", "application/json")
            .body(format!("{{\"echo\":\"{body}\"}}")),
    }
}

fn header(m: &async_nats::Message, name: &str) -> Option<String> {
    m.headers
        .as_ref()
        .and_then(|h| h.get(name))
        .map(|v| v.as_str().to_string())
}

async fn ask(nc: &async_nats::Client, subject: &str, payload: &str) -> async_nats::Message {
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Authorization", "Bearer stolen");
    headers.insert("X-Trace-Me", "1");
    tokio::time::timeout(
        T,
        nc.request_with_headers(
            subject.to_string(),
            headers,
            Bytes::from(payload.to_string()),
        ),
    )
    .await
    .expect("an answer in time")
    .expect("a reply")
}

#[tokio::test]
async fn a_service_replies_with_the_apps_answer_and_its_errors_as_service_errors() {
    let nats = NatsServer::start().await;
    let (nc, _) = client(&nats).await;
    let app = MockApp::start(echo).await;
    let svc = unique("svc").to_lowercase();
    let relay = Relay::ready(service_config(
        &nats,
        &app.url(),
        &svc,
        "[sources.rpc.http]\ntimeout_ms = 500\n",
    ))
    .await;
    let ok = ask(&nc, &format!("{svc}.create"), "o-1").await;
    assert_eq!(&ok.payload[..], b"{\"echo\":\"o-1\"}");
    assert_eq!(
        header(&ok, "Content-Type").as_deref(),
        Some("application/json")
    );
    assert_eq!(header(&ok, "Nats-Service-Error-Code"), None);
    let r = &app.requests()[0];
    assert_eq!(
        r.header("nats-subject"),
        Some(format!("{svc}.create").as_str())
    );
    assert_eq!(r.header("nats-service-endpoint"), Some("create"));
    assert_eq!(r.header("x-trace-me"), Some("1"));
    assert_eq!(
        r.header("authorization"),
        None,
        "identity headers never pass"
    );
    let missing = ask(&nc, &format!("{svc}.cancel"), "missing").await;
    assert_eq!(&missing.payload[..], b"no such order");
    assert_eq!(
        header(&missing, "Nats-Service-Error-Code").as_deref(),
        Some("404")
    );
    assert_eq!(
        header(&missing, "Nats-Service-Error").as_deref(),
        Some("Not Found")
    );
    let big = ask(&nc, &format!("{svc}.create"), "big").await;
    assert_eq!(
        header(&big, "Nats-Service-Error-Code").as_deref(),
        Some("502")
    );
    assert!(
        big.payload.is_empty(),
        "over max_reply_bytes: nothing of it"
    );
    let slow = ask(&nc, &format!("{svc}.create"), "slow").await;
    assert_eq!(
        header(&slow, "Nats-Service-Error-Code").as_deref(),
        Some("504")
    );
    let (code, body) = relay.get("/ready").await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("\"rpc\""), "{body}");
    let m = |class: &str, endpoint: &str| {
        format!(
            "jetrelay_requests_total{{class=\"{class}\",endpoint=\"{endpoint}\",source=\"rpc\"}}"
        )
    };
    assert_eq!(relay.metric(&m("2xx", "create")).await, 1.0);
    assert_eq!(relay.metric(&m("4xx", "cancel")).await, 1.0);
    assert_eq!(relay.metric(&m("too_large", "create")).await, 1.0);
    assert_eq!(relay.metric(&m("timeout", "create")).await, 1.0);
    assert_eq!(
        relay
            .metric("jetrelay_request_duration_seconds_count{endpoint=\"create\",source=\"rpc\"}")
            .await,
        3.0
    );
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn a_request_whose_headers_the_client_cannot_take_is_answered_400_and_the_service_goes_on() {
    let nats = NatsServer::start().await;
    let (nc, _) = client(&nats).await;
    let app = MockApp::start(echo).await;
    let svc = unique("svc").to_lowercase();
    let relay = Relay::ready(service_config(&nats, &app.url(), &svc, "")).await;
    let bad: [&[u8]; 4] = [
        b"NATS/1.0\r\nX-Bad: a\rb\r\n\r\n",
        b"NATS/1.0\r\nX-Bad: a\nb\r\n\r\n",
        b"NATS/1.0\r\nBad Name: v\r\n\r\n",
        b"NATS/1.0\r\nno colon here\r\n\r\n",
    ];
    let inbox = nc.new_inbox();
    let mut replies = nc.subscribe(inbox.clone()).await.unwrap();
    nc.flush().await.unwrap();
    for block in bad {
        let subject = format!("{svc}.create");
        raw_request(nats.url(), &subject, Some(&inbox), block, b"o-1").await;
        let reply = tokio::time::timeout(T, futures::StreamExt::next(&mut replies))
            .await
            .expect("a reply in time")
            .expect("a reply");
        assert_eq!(
            header(&reply, "Nats-Service-Error-Code").as_deref(),
            Some("400"),
            "{block:?}"
        );
        let why = header(&reply, "Nats-Service-Error").unwrap_or_default();
        assert!(why.starts_with("malformed headers: "), "{why}");
    }
    assert!(app.requests().is_empty(), "the app is never asked");
    let ok = ask(&nc, &format!("{svc}.create"), "o-2").await;
    assert_eq!(&ok.payload[..], b"{\"echo\":\"o-2\"}");
    let malformed =
        "jetrelay_requests_total{class=\"malformed\",endpoint=\"create\",source=\"rpc\"}";
    assert_eq!(relay.metric(malformed).await, bad.len() as f64);
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn fifty_concurrent_requests_each_get_their_own_reply_beside_a_stream_source() {
    let nats = NatsServer::start().await;
    let (nc, js) = client(&nats).await;
    let stream = unique("S");
    create_stream(&js, &stream, &["jobs.>"]).await;
    let app = MockApp::start(|r, n| {
        if r.header("nats-stream").is_some() {
            Reply::status(200)
        } else {
            echo(r, n).after(Duration::from_millis(20))
        }
    })
    .await;
    let svc = unique("svc").to_lowercase();
    let relay = Relay::ready(service_config(
        &nats,
        &app.url(),
        &svc,
        &format!(
            r#"
            [sources.rpc.delivery]
            max_in_flight = 16
            [sources.jobs]
            stream = "{stream}"
            kind = "durable"
            durable = "jobs"
            "#
        ),
    ))
    .await;
    publish(&js, "jobs.a", 20).await;
    let asks = (0..50).map(|i| {
        let nc = nc.clone();
        let subject = format!("{svc}.create");
        async move { (i, ask(&nc, &subject, &format!("n{i}")).await) }
    });
    for (i, reply) in futures::future::join_all(asks).await {
        assert_eq!(
            String::from_utf8_lossy(&reply.payload),
            format!("{{\"echo\":\"n{i}\"}}"),
            "request {i} got its own reply"
        );
    }
    assert!(
        app.max_in_flight() <= 16 + 1,
        "the source's limit (and the stream's one)"
    );
    eventually("the stream source's messages acked", T, || async {
        relay
            .metric("jetrelay_messages_settled_total{action=\"ack\",source=\"jobs\"}")
            .await
            == 20.0
    })
    .await;
    let (code, body) = relay.get("/ready").await;
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["sources"]["rpc"]["ready"], true, "{body}");
    assert_eq!(v["sources"]["jobs"]["ready"], true, "{body}");
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn discovery_answers_as_the_service_with_its_endpoints_and_counts() {
    let nats = NatsServer::start().await;
    let (nc, _) = client(&nats).await;
    let app = MockApp::start(echo).await;
    let svc = unique("svc").to_lowercase();
    let relay = Relay::ready(service_config(&nats, &app.url(), &svc, "")).await;
    ask(&nc, &format!("{svc}.create"), "a").await;
    ask(&nc, &format!("{svc}.cancel"), "missing").await;
    let json =
        |m: async_nats::Message| serde_json::from_slice::<serde_json::Value>(&m.payload).unwrap();
    let ping = json(
        nc.request(format!("$SRV.PING.{svc}"), Bytes::new())
            .await
            .unwrap(),
    );
    assert_eq!(ping["type"], "io.nats.micro.v1.ping_response");
    assert_eq!(ping["name"], svc.as_str());
    assert_eq!(ping["version"], "1.2.3");
    let info = json(
        nc.request(format!("$SRV.INFO.{svc}"), Bytes::new())
            .await
            .unwrap(),
    );
    assert_eq!(info["type"], "io.nats.micro.v1.info_response");
    assert_eq!(info["endpoints"][0]["name"], "create");
    assert_eq!(info["endpoints"][0]["subject"], format!("{svc}.create"));
    assert_eq!(info["endpoints"][1]["queue_group"], "q");
    let id = info["id"].as_str().unwrap().to_string();
    let stats = json(
        nc.request(format!("$SRV.STATS.{svc}.{id}"), Bytes::new())
            .await
            .unwrap(),
    );
    assert_eq!(stats["type"], "io.nats.micro.v1.stats_response");
    let cancel = &stats["endpoints"][1];
    assert_eq!(
        (
            cancel["num_requests"].as_u64(),
            cancel["num_errors"].as_u64()
        ),
        (Some(1), Some(1))
    );
    assert_eq!(cancel["last_error"], "404:Not Found");
    assert!(stats["endpoints"][0]["processing_time"].as_u64().unwrap() > 0);
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn two_instances_share_the_queue_group_and_the_healthy_one_answers_while_the_other_app_is_down()
 {
    let nats = NatsServer::start().await;
    let (nc, _) = client(&nats).await;
    let (a, b) = (MockApp::start(echo).await, MockApp::start(echo).await);
    a.set_healthy(true);
    b.set_healthy(true);
    let svc = unique("svc").to_lowercase();
    let probe = |app: &MockApp| {
        format!(
            "[http]\nhealth_url = \"{}\"\nhealth_interval_ms = 100\nhealth_threshold = 1\n",
            app.health_url()
        )
    };
    let ra = Relay::ready(service_config(&nats, &a.url(), &svc, &probe(&a))).await;
    let rb = Relay::ready(service_config(&nats, &b.url(), &svc, &probe(&b))).await;
    for i in 0..40 {
        ask(&nc, &format!("{svc}.create"), &format!("n{i}")).await;
    }
    let (na, nb) = (a.requests().len(), b.requests().len());
    assert_eq!(na + nb, 40);
    assert!(
        na > 0 && nb > 0,
        "the queue group shares them: {na} and {nb}"
    );
    a.set_healthy(false);
    eventually("A's instance out of the group", T, || async {
        !ra.health.status().ready
    })
    .await;
    for i in 0..20 {
        let reply = ask(&nc, &format!("{svc}.create"), &format!("m{i}")).await;
        assert_eq!(
            header(&reply, "Nats-Service-Error-Code"),
            None,
            "request {i}"
        );
    }
    assert_eq!(a.requests().len(), na, "none went to the unhealthy app");
    assert_eq!(b.requests().len(), nb + 20);
    a.set_healthy(true);
    eventually("A back in the group", T, || async {
        ra.health.status().ready
    })
    .await;
    ra.stop().await.unwrap();
    rb.stop().await.unwrap();
}

#[tokio::test]
async fn an_app_that_is_not_there_gets_a_fast_503_not_the_callers_timeout() {
    let nats = NatsServer::start().await;
    let (nc, _) = client(&nats).await;
    let svc = unique("svc").to_lowercase();
    // Nothing listens there.
    let relay = Relay::start(service_config(
        &nats,
        "http://127.0.0.1:9/messages",
        &svc,
        "",
    ))
    .await;
    relay.wait_ready(T).await;
    let started = Instant::now();
    let reply = ask(&nc, &format!("{svc}.create"), "x").await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        header(&reply, "Nats-Service-Error-Code").as_deref(),
        Some("503")
    );
    assert_eq!(
        header(&reply, "Nats-Service-Error").as_deref(),
        Some("the app is unreachable")
    );
    eventually("not ready, out of the group", T, || async {
        !relay.health.status().ready
    })
    .await;
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn a_drain_answers_the_requests_in_flight_before_it_ends() {
    let nats = NatsServer::start().await;
    let (nc, _) = client(&nats).await;
    let app = MockApp::start(|r, n| echo(r, n).after(Duration::from_millis(800))).await;
    let svc = unique("svc").to_lowercase();
    let relay = Relay::ready(service_config(&nats, &app.url(), &svc, "")).await;
    let asks: Vec<_> = (0..5)
        .map(|i| {
            let nc = nc.clone();
            let subject = format!("{svc}.create");
            tokio::spawn(async move { ask(&nc, &subject, &format!("d{i}")).await })
        })
        .collect();
    app.wait_for("5 requests at the app", T, |r| r.len() == 5)
        .await;
    relay.shutdown.cancel();
    for (i, a) in asks.into_iter().enumerate() {
        let reply = a.await.unwrap();
        assert_eq!(
            String::from_utf8_lossy(&reply.payload),
            format!("{{\"echo\":\"d{i}\"}}")
        );
    }
    relay.handle.await.unwrap().unwrap();
    let after = nc
        .request(format!("{svc}.create"), Bytes::from_static(b"late"))
        .await;
    assert!(after.is_err(), "nobody serves after the drain: {after:?}");
}

/// natsio's micro module (ADR-32) side by side with a jetrelay service: its
/// discovery answers have the same fields, natsio's own types read jetrelay's with
/// nothing left over, and a natsio requester gets its reply.
#[tokio::test]
async fn natsio_reads_the_services_discovery_as_its_own_and_gets_its_replies() {
    let nats = NatsServer::start().await;
    let app = MockApp::start(echo).await;
    let svc = unique("svc").to_lowercase();
    let relay = Relay::ready(service_config(&nats, &app.url(), &svc, "")).await;
    let out = tokio::process::Command::new(crate::support::peer::python())
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/interop/micro.py"
        ))
        .args([nats.url(), svc.as_str(), &format!("{svc}.create")])
        .output()
        .await
        .expect("python from the tools venv (scripts/setup)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["reply"], "{\"echo\":\"py\"}");
    assert_eq!(v["reply_headers"]["Content-Type"], "application/json");
    assert_eq!(app.requests()[0].header("x-from"), Some("python"));
    for verb in ["PING", "INFO", "STATS"] {
        let s = &v["shapes"][verb];
        assert_eq!(s["ref"], s["jetrelay"], "{verb}: {s}");
        assert_eq!(s["ref_endpoint"], s["jetrelay_endpoint"], "{verb}: {s}");
        assert_eq!(v["unknown"][verb], serde_json::json!([]), "{verb}: {v}");
    }
    assert_eq!(v["unknown"]["STATS.endpoint"], serde_json::json!([]), "{v}");
    relay.stop().await.unwrap();
}

/// Requests the server had delivered to a membership the instance left are taken
/// after it rejoins, not dropped with the old subscriptions (their requesters would
/// time out). 2,000 of 16 KiB, so that some are still on the wire when the
/// subscriptions are drained (async-nats ended a drained subscription before the
/// server's PONG and dropped them: vendor/README.md).
#[tokio::test]
async fn what_a_left_membership_still_holds_is_taken_after_a_quick_rejoin() {
    const N: usize = 2_000;
    let body = Bytes::from(vec![b'x'; 16 * 1024]);
    use jetrelay::seam::service::Requests;
    let nats = NatsServer::start().await;
    let cfg = jetrelay::config::NatsConfig {
        servers: vec![nats.url().to_string()],
        ..Default::default()
    };
    let conn = jetrelay::nats::Nats::connect(&jetrelay::daemon::settings::connection(&cfg), false)
        .await
        .unwrap();
    let mut requests = conn.service_requests(vec!["rejoin.x".into()], "q");
    requests.join().await.unwrap();
    let asker = async_nats::connect(nats.url()).await.unwrap();
    for i in 0..N {
        asker
            .publish_with_reply("rejoin.x", format!("r.{i}"), body.clone())
            .await
            .unwrap();
    }
    // Once the server has read them (an echo on the asker's own connection comes
    // back after them), they are on their way to the subscription.
    let inbox = asker.new_inbox();
    let mut echo = asker.subscribe(inbox.clone()).await.unwrap();
    asker.publish(inbox, Bytes::new()).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), futures::StreamExt::next(&mut echo))
        .await
        .unwrap();
    requests.leave().await;
    requests.join().await.unwrap();
    let mut got = std::collections::BTreeSet::new();
    while got.len() < N {
        let next = tokio::time::timeout(Duration::from_secs(5), requests.next()).await;
        let Ok(Some(r)) = next else {
            panic!("lost after the rejoin: {} of {N} taken", got.len());
        };
        got.insert(r.reply.unwrap());
    }
    assert!(got.contains("r.0") && got.contains(&format!("r.{}", N - 1)));
}
