//! The local publish endpoint (`publish.listen`): the app publishes without a NATS
//! client, raw or as a JSON list (one atomic batch), and every answer says what
//! happened.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;

const T: Duration = Duration::from_secs(20);

/// A relay whose endpoint allows `out.>` and `nowhere.>` (no stream captures the
/// latter), at most 3 messages and 1000 bytes per request.
async fn relay_with_endpoint(env: &Env) -> (Relay, String) {
    let app = MockApp::ok().await;
    let extra = "[publish]\nlisten = \"127.0.0.1:0\"\nallowed_subjects = [\"out.>\", \"nowhere.>\", \"plain.>\"]\n\
                 max_messages = 3\nmax_bytes = 1000\n[nats]\nrequest_timeout_ms = 1000\n";
    let relay = Relay::ready(durable_config(
        &env.nats,
        &app,
        &env.stream,
        &env.durable,
        extra,
    ))
    .await;
    let base = format!(
        "http://{}/v1/publish",
        relay.publish.expect("the endpoint is on")
    );
    (relay, base)
}

/// POSTs as the app would: JSON (or bytes), with the request's own headers after.
async fn post(url: &str, headers: &[(&str, &str)], body: impl Into<reqwest::Body>) -> (u16, Value) {
    let mut req = http()
        .post(url)
        .header("Content-Type", "application/json")
        .body(body);
    for (n, v) in headers {
        req = req.header(*n, *v);
    }
    let resp = req.send().await.unwrap();
    let code = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (
        code,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[tokio::test]
async fn the_endpoint_publishes_raw_and_json_and_answers_as_documented() {
    let env = Env::start(&["in.>"]).await;
    let out = unique("OUT");
    atomic_stream(&env.js, &out, &["out.>", "secret.>"], true).await;
    let (relay, base) = relay_with_endpoint(&env).await;

    let headers = [
        ("Nats-Msg-Id", "k1"),
        ("Nats-Header-X-Trace", "7"),
        ("Authorization", "x"),
    ];
    let (code, body) = post(&format!("{base}/out.a"), &headers, "hello").await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body, json!({"stream": out, "seq": 1, "duplicate": false}));
    let (code, body) = post(&format!("{base}/out.a"), &headers, "hello").await;
    assert_eq!((code, &body["duplicate"]), (200, &json!(true)), "{body}");
    let stored = env
        .js
        .get_stream(&out)
        .await
        .unwrap()
        .get_raw_message(1)
        .await
        .unwrap();
    assert_eq!(stored.payload.as_ref(), b"hello");
    let header = |n: &str| stored.headers.get(n).map(|v| v.as_str().to_string());
    assert_eq!(header("X-Trace").as_deref(), Some("7"));
    assert_eq!(header("Nats-Msg-Id").as_deref(), Some("k1"));
    assert_eq!(
        header("Authorization"),
        None,
        "request headers are not the message's"
    );

    let list = json!({"publish": [
        {"subject": "out.b", "data": "one"},
        {"subject": "out.c", "data_base64": "dHdv", "headers": {"Nats-Msg-Id": "k2"}}
    ]});
    let (code, body) = post(&base, &[], list.to_string()).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body, json!({"stream": out, "seq": 3, "count": 2}));

    let four = json!({"publish": (0..4).map(|i| json!({"subject": "out.d", "data": i.to_string()})).collect::<Vec<_>>()});
    let secret = json!({"publish": [{"subject": "secret.x", "data": "no"}]});
    create_stream(&env.js, &unique("PLAIN"), &["plain.>"]).await;
    let plain = json!({"publish": [{"subject": "plain.a", "data": "1"}, {"subject": "plain.b", "data": "2"}]});
    let cases: Vec<(String, String, u16)> = vec![
        (base.clone(), "{not json".into(), 400),
        (
            base.clone(),
            json!({"publish": [{"data": "x"}]}).to_string(),
            400,
        ),
        (format!("{base}/out.*"), "x".into(), 400),
        (format!("{base}/secret.x"), "x".into(), 403),
        (base.clone(), secret.to_string(), 403),
        (format!("{base}/out.e"), "x".repeat(2000), 413),
        (base.clone(), four.to_string(), 413),
        // Refusals a retry cannot fix are 409, with the reason: 503 is for what may
        // pass (a client retrying on 503 would retry these forever).
        (format!("{base}/nowhere.x"), "x".into(), 409),
        (base.clone(), plain.to_string(), 409),
    ];
    for (url, body, want) in cases {
        let (code, answer) = post(&url, &[], body).await;
        assert_eq!(code, want, "{url}: {answer}");
        if want == 409 {
            let why = answer["error"].as_str().unwrap_or_default();
            assert!(
                why.contains("no stream captures") || why.contains("does not allow atomic publish"),
                "{url}: {answer}"
            );
        }
        if want != 413 || url.ends_with("/publish") {
            assert!(answer["error"].is_string(), "{url}: {answer}");
        }
    }
    let info = env
        .js
        .get_stream(&out)
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .state
        .messages;
    assert_eq!(info, 3, "nothing refused was stored");
    // Routing answers are JSON too.
    let (code, answer) = post(&base.replace("/v1/publish", "/v2/nope"), &[], "x").await;
    assert_eq!(code, 404, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("POST /v1/publish"),
        "{answer}"
    );
    let resp = http().get(format!("{base}/out.a")).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 405);
    let answer: Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
    assert!(
        answer["error"].as_str().unwrap().starts_with("only POST"),
        "{answer}"
    );
    let (_, answer) = post(&format!("{base}/out.*"), &[], "x").await;
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .starts_with("malformed publish: subject"),
        "{answer}"
    );
    let m = |s: &'static str| relay.metric(s);
    assert_eq!(m("jetrelay_published_total{via=\"endpoint\"}").await, 3.0);
    assert_eq!(
        m("jetrelay_publish_failures_total{reason=\"not_allowed\"}").await,
        2.0
    );
    assert_eq!(
        m("jetrelay_publish_failures_total{reason=\"malformed\"}").await,
        4.0,
        "three cases and the raw publish to out.* again"
    );
    assert_eq!(
        m("jetrelay_publish_failures_total{reason=\"no_stream\"}").await,
        1.0
    );
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn concurrent_clients_get_exactly_what_they_publish() {
    let env = Env::start(&["in.>"]).await;
    let out = unique("OUT");
    atomic_stream(&env.js, &out, &["out.>"], true).await;
    let (relay, base) = relay_with_endpoint(&env).await;
    let clients = 8;
    let per_client = 40;
    let mut tasks = Vec::new();
    for c in 0..clients {
        let base = base.clone();
        tasks.push(tokio::spawn(async move {
            let http = http();
            for i in 0..per_client {
                // Alternately one raw message and a batch of two.
                let resp = if i % 2 == 0 {
                    http.post(format!("{base}/out.c{c}"))
                        .header("Content-Type", "application/octet-stream")
                        .header("Nats-Msg-Id", format!("{c}-{i}"))
                        .body(format!("{c}-{i}"))
                        .send()
                        .await
                } else {
                    let list = json!({"publish": [
                        {"subject": format!("out.c{c}"), "data": format!("{c}-{i}-a")},
                        {"subject": format!("out.c{c}"), "data": format!("{c}-{i}-b")}
                    ]});
                    http.post(&base)
                        .header("Content-Type", "application/json")
                        .body(list.to_string())
                        .send()
                        .await
                };
                assert_eq!(resp.unwrap().status().as_u16(), 200);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let expected = (clients * per_client / 2 * 3) as u64;
    eventually("all stored", T, || async {
        env.js
            .get_stream(&out)
            .await
            .unwrap()
            .info()
            .await
            .unwrap()
            .state
            .messages
            == expected
    })
    .await;
    assert_eq!(
        relay
            .metric("jetrelay_published_total{via=\"endpoint\"}")
            .await,
        expected as f64
    );
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn with_nats_gone_the_endpoint_answers_503_and_stays_up() {
    let mut env = Env::start(&["in.>"]).await;
    let out = unique("OUT");
    atomic_stream(&env.js, &out, &["out.>"], true).await;
    let (relay, base) = relay_with_endpoint(&env).await;
    assert_eq!(post(&format!("{base}/out.a"), &[], "1").await.0, 200);
    env.nats.kill();
    let (code, body) = post(&format!("{base}/out.a"), &[], "2").await;
    assert_eq!(code, 503, "{body}");
    assert!(body["error"].is_string());
    env.nats.start_again().await;
    eventually("publishing again", T, || async {
        post(&format!("{base}/out.a"), &[], "3").await.0 == 200
    })
    .await;
    relay.stop().await.unwrap();
}

/// A raw request on the endpoint's socket: exactly these headers, nothing added.
async fn raw(addr: std::net::SocketAddr, request: String) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).await.unwrap();
    answer
}

fn request(path: &str, headers: &[&str], body: &str) -> String {
    let mut r = format!(
        "POST {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for h in headers {
        r.push_str(h);
        r.push_str("\r\n");
    }
    r.push_str("\r\n");
    r.push_str(body);
    r
}

#[tokio::test]
async fn a_browsers_cross_site_post_and_hostile_headers_are_refused_and_nothing_is_stored() {
    let env = Env::start(&["in.>"]).await;
    let out = unique("OUT");
    atomic_stream(&env.js, &out, &["out.>"], true).await;
    let (relay, _) = relay_with_endpoint(&env).await;
    let addr = relay.publish.unwrap();
    let local = "Host: 127.0.0.1";
    let long = format!("/v1/publish/out.{}", "x".repeat(5000));
    // (path, headers, body, the status line's code, a word of the reason)
    let cases: Vec<(&str, Vec<&str>, &str, &str, &str)> = vec![
        // What a page's fetch or form sends: refused, with or without the Origin.
        (
            "/v1/publish/out.a",
            vec![
                "Host: 127.0.0.1:9091",
                "Origin: https://evil.example",
                "Content-Type: text/plain",
            ],
            "x",
            "403",
            "browser",
        ),
        (
            "/v1/publish/out.a",
            vec![
                local,
                "Sec-Fetch-Site: cross-site",
                "Content-Type: application/json",
            ],
            "x",
            "403",
            "browser",
        ),
        (
            "/v1/publish/out.a",
            vec![local, "Content-Type: text/plain"],
            "x",
            "415",
            "application/octet-stream",
        ),
        (
            "/v1/publish/out.a",
            vec![local, "Content-Type: application/x-www-form-urlencoded"],
            "x",
            "415",
            "form",
        ),
        ("/v1/publish/out.a", vec![local], "x", "415", "Content-Type"),
        (
            "/v1/publish",
            vec![local, "Content-Type: text/plain"],
            "{}",
            "415",
            "application/json",
        ),
        // DNS rebinding: a name that is not the loopback's.
        (
            "/v1/publish/out.a",
            vec!["Host: evil.example:9091", "Content-Type: application/json"],
            "x",
            "403",
            "Host",
        ),
        // An encoded body is never decoded; a header value that is not ASCII is
        // refused, not dropped.
        (
            "/v1/publish/out.a",
            vec![
                local,
                "Content-Type: application/json",
                "Content-Encoding: gzip",
            ],
            "x",
            "400",
            "never decoded",
        ),
        (
            "/v1/publish/out.a",
            vec![
                local,
                "Content-Type: application/json",
                "Nats-Msg-Id: caf\u{e9}",
            ],
            "x",
            "400",
            "visible ASCII",
        ),
        // jetrelay's own ids.
        (
            "/v1/publish/out.a",
            vec![
                local,
                "Content-Type: application/json",
                "Nats-Msg-Id: jetrelay:S:c:1:0",
            ],
            "x",
            "400",
            "jetrelay's own",
        ),
        (
            "/v1/publish/out.a",
            vec![
                local,
                "Content-Type: application/json",
                "Nats-Msg-Id: jetrelay-dlq:S:c:1",
            ],
            "x",
            "400",
            "jetrelay's own",
        ),
        // A subject the server's control line cannot carry.
        (
            &long,
            vec![local, "Content-Type: application/json"],
            "x",
            "400",
            "at most 2048",
        ),
    ];
    for (path, headers, body, code, why) in &cases {
        let answer = raw(addr, request(path, headers, body)).await;
        let status = answer.split_whitespace().nth(1).unwrap_or("");
        assert_eq!(status, *code, "{headers:?}: {answer}");
        assert!(answer.contains(why), "{headers:?} lacks {why}: {answer}");
    }
    // The document form refuses jetrelay's ids too.
    let doc = json!({"publish": [{"subject": "out.b", "headers": {"Nats-Msg-Id": "jetrelay-replay:D:1"}}]});
    let answer = raw(
        addr,
        request(
            "/v1/publish",
            &[local, "Content-Type: application/json"],
            &doc.to_string(),
        ),
    )
    .await;
    assert!(
        answer.starts_with("HTTP/1.1 400") && answer.contains("jetrelay's own"),
        "{answer}"
    );
    // Nothing was stored, and the connection to NATS survived the long subject.
    let ok = raw(
        addr,
        request(
            "/v1/publish/out.ok",
            &[
                "Host: localhost:9091",
                "Content-Type: application/octet-stream",
            ],
            "fine",
        ),
    )
    .await;
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    let stored = env
        .js
        .get_stream(&out)
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .state
        .messages;
    assert_eq!(stored, 1);
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn with_a_token_only_requests_that_carry_it_publish() {
    let env = Env::start(&["in.>"]).await;
    let out = unique("OUT");
    atomic_stream(&env.js, &out, &["out.>"], true).await;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret\n").unwrap();
    let app = MockApp::ok().await;
    let extra = format!(
        "[publish]\nlisten = \"127.0.0.1:0\"\nallowed_subjects = [\"out.>\"]\ntoken_file = \"{}\"\n",
        token.display()
    );
    let relay = Relay::ready(durable_config(
        &env.nats,
        &app,
        &env.stream,
        &env.durable,
        &extra,
    ))
    .await;
    let addr = relay.publish.unwrap();
    let named = "Host: publisher.orders.svc:9091";
    for (headers, code) in [
        (vec![named, "Content-Type: text/plain"], "401"),
        (
            vec![
                named,
                "Content-Type: text/plain",
                "Authorization: Bearer wrong",
            ],
            "401",
        ),
        // With the token: a name, any type.
        (
            vec![
                named,
                "Content-Type: text/plain",
                "Authorization: Bearer s3cret",
            ],
            "200",
        ),
        // The scheme in any case (RFC 7235).
        (
            vec![
                named,
                "Content-Type: text/plain",
                "Authorization: bearer s3cret",
            ],
            "200",
        ),
        // A browser is refused even with it.
        (
            vec![
                named,
                "Authorization: Bearer s3cret",
                "Origin: https://evil.example",
            ],
            "403",
        ),
    ] {
        let answer = raw(addr, request("/v1/publish/out.t", &headers, "x")).await;
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {code}")),
            "{headers:?}: {answer}"
        );
    }
    // A rotated token is read again.
    std::fs::write(&token, "rotated\n").unwrap();
    eventually("the rotated token is used", T, || async {
        raw(
            addr,
            request(
                "/v1/publish/out.t",
                &[named, "Authorization: Bearer rotated"],
                "y",
            ),
        )
        .await
        .starts_with("HTTP/1.1 200")
    })
    .await;
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn a_document_of_empty_strings_costs_a_small_multiple_of_its_size_and_memory_comes_back() {
    // The audit's document: 719,030 empty strings in 2.1 MB (the headers of one
    // message), within the body bound, past every count. The built binary, so that
    // its own RSS is measured.
    const MB: u64 = 1 << 20;
    let empties = vec!["\"\""; 719_030].join(",");
    let doc = format!(
        r#"{{"publish": [{{"subject": "out.a", "headers": {{"X-Padding": [{empties}]}}}}]}}"#
    );
    let size = doc.len() as u64;
    assert!(size > 2_100_000, "{size}");
    let env = Env::start(&["in.>"]).await;
    let app = MockApp::ok().await;
    let port = crate::support::app::free_port();
    let config = format!(
        "[nats]\nservers = [\"{}\"]\n[source]\nstream = \"{}\"\nkind = \"durable\"\ndurable = \"{}\"\n\
         [http]\nurl = \"{}\"\n[admin]\nlisten = \"127.0.0.1:0\"\n\
         [publish]\nlisten = \"127.0.0.1:{port}\"\nallowed_subjects = [\"out.>\"]\n",
        env.nats.url(),
        env.stream,
        env.durable,
        app.url()
    );
    let d = crate::support::daemon::Daemon::start(&config).await;
    d.wait_ready_body("ready", T, |code, _| code == 200).await;
    let url = format!("http://127.0.0.1:{port}/v1/publish");
    // A client of its own: its connections (and what the daemon holds for each)
    // are closed with it.
    let client = http();
    let send = |doc: String| {
        let request = client
            .post(&url)
            .header("Content-Type", "application/json")
            .body(doc);
        async move {
            let resp = request.send().await.unwrap();
            (resp.status().as_u16(), resp.text().await.unwrap())
        }
    };
    // A small request first: what serving any request costs is in the baseline.
    let (code, _) = send(r#"{"publish": [{"subject": "nowhere.a"}]}"#.into()).await;
    assert_eq!(code, 403);
    let (start_rss, start_peak) = (d.rss(), d.peak_rss());
    let (code, body) = send(doc.clone()).await;
    assert_eq!(code, 413, "{body}");
    let one = d.peak_rss().saturating_sub(start_peak);
    let concurrent = 32;
    let before = d.peak_rss();
    let answers = futures::future::join_all((0..concurrent).map(|_| send(doc.clone()))).await;
    assert!(answers.iter().all(|(code, _)| *code == 413), "{answers:?}");
    let many = d.peak_rss().saturating_sub(before);
    // One document: a small multiple of its size. Many at once: what the endpoint
    // holds of bodies at once (its budget), not their sum.
    let budget = jetrelay::serve::endpoint::BODY_BUDGET as u64;
    assert!(
        one <= 4 * size,
        "one document of {} MB took {} MB more",
        size / MB,
        one / MB
    );
    assert!(
        many <= budget + 4 * size,
        "{concurrent} documents of {} MB took {} MB more",
        size / MB,
        many / MB
    );
    // The allocator keeps what a spike took for reuse (it has no safe way to be
    // told to give it back now): what stays is bounded by that budget, not by how
    // many came at once.
    drop(client);
    let bound = start_rss + budget + 4 * size;
    eventually("RSS back within the budget of where it started", T, || {
        let now = d.rss();
        async move { now <= bound }
    })
    .await;
}
