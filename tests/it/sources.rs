//! Several sources in one process (`[sources.<name>]`): each consumes its own stream
//! with its own settings over the top-level tables, says its own readiness and
//! metrics, and one that cannot run (a missing stream, a topology conflict) never
//! stops another.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use figment::Figment;
use figment::providers::{Format, Toml};
use jetrelay::config::Config;
use jetrelay::ops::readiness::State;

use crate::support::*;

const T: Duration = Duration::from_secs(30);

/// A config of the sources `tables` (TOML of `[sources.*]`), the top-level `[http]`
/// at `app`.
fn sources_config(nats: &NatsServer, app: &MockApp, tables: &str) -> Config {
    let base = format!(
        r#"
        [nats]
        servers = "{}"
        [http]
        url = "{}"
        timeout_ms = 5000
        [admin]
        listen = "127.0.0.1:0"
        [log]
        level = "warn"
        {tables}
        "#,
        nats.url(),
        app.url(),
    );
    Config::from_figment(Figment::from(Toml::string(&base)))
        .unwrap_or_else(|e| panic!("test config: {e}"))
}

#[tokio::test]
async fn two_sources_consume_their_own_streams_with_their_own_settings_and_labels() {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    let (a, b) = (unique("A"), unique("B"));
    create_stream(&js, &a, &["a.>"]).await;
    create_stream(&js, &b, &["b.>"]).await;
    let app = MockApp::start(|_, _| Reply::status(200)).await;
    let relay = Relay::ready(sources_config(
        &nats,
        &app,
        &format!(
            r#"
            [sources.orders]
            stream = "{a}"
            kind = "durable"
            durable = "orders"
            [sources.orders.delivery]
            max_in_flight = 3
            [sources.audit]
            stream = "{b}"
            kind = "durable"
            durable = "audit"
            "#
        ),
    ))
    .await;
    publish(&js, "a.x", 5).await;
    publish(&js, "b.y", 3).await;
    app.wait_for("8 requests", T, |r| r.len() == 8).await;
    let streams: Vec<String> = app
        .requests()
        .iter()
        .map(|r| r.header("nats-stream").unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        streams.iter().filter(|s| **s == a).count(),
        5,
        "{streams:?}"
    );
    assert_eq!(
        streams.iter().filter(|s| **s == b).count(),
        3,
        "{streams:?}"
    );
    eventually("each source's acks under its label", T, || async {
        relay
            .metric("jetrelay_messages_settled_total{action=\"ack\",source=\"orders\"}")
            .await
            == 5.0
            && relay
                .metric("jetrelay_messages_settled_total{action=\"ack\",source=\"audit\"}")
                .await
                == 3.0
    })
    .await;
    assert_eq!(
        relay
            .metric("jetrelay_concurrency_limit{source=\"orders\"}")
            .await,
        3.0,
        "its own delivery.max_in_flight"
    );
    let (code, body) = relay.get("/ready").await;
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["ready"], true);
    for name in ["orders", "audit"] {
        assert_eq!(v["sources"][name]["state"], "consuming", "{body}");
        assert_eq!(v["sources"][name]["ready"], true, "{body}");
    }
    assert!(consumer_drained(&js, &a, "orders").await);
    assert!(consumer_drained(&js, &b, "audit").await);
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn a_source_that_cannot_run_never_stops_another_and_ready_says_which() {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    let (good, conflict) = (unique("G"), unique("C"));
    create_stream(&js, &good, &["g.>"]).await;
    create_stream(&js, &conflict, &["c.>"]).await;
    // The conflict: the consumer exists with another ack wait.
    js.get_stream(&conflict)
        .await
        .unwrap()
        .create_consumer(async_nats::jetstream::consumer::pull::Config {
            durable_name: Some("held".into()),
            ack_wait: Duration::from_secs(7),
            ..Default::default()
        })
        .await
        .unwrap();
    let app = MockApp::start(|_, _| Reply::status(200)).await;
    let relay = Relay::start(sources_config(
        &nats,
        &app,
        &format!(
            r#"
            [sources.good]
            stream = "{good}"
            kind = "durable"
            durable = "good"
            [sources.missing]
            stream = "NOPE"
            kind = "durable"
            durable = "m"
            [sources.clash]
            stream = "{conflict}"
            kind = "durable"
            durable = "held"
            "#
        ),
    ))
    .await;
    eventually("the good source consumes", T, || async {
        relay
            .health
            .status()
            .sources
            .iter()
            .any(|(n, s)| n == "good" && s.state == State::Consuming)
    })
    .await;
    publish(&js, "g.x", 4).await;
    app.wait_for("4 requests", T, |r| r.len() == 4).await;
    eventually("the others say why they do not run", T, || async {
        let s = relay.health.status();
        let of = |name: &str| {
            s.sources
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, s)| s.reason.clone())
                .unwrap_or_default()
        };
        of("missing").contains("NOPE") && of("clash").starts_with("stopped:")
    })
    .await;
    let (code, body) = relay.get("/ready").await;
    assert_eq!(code, 503, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["sources"]["good"]["ready"], true, "{body}");
    assert_eq!(v["sources"]["missing"]["ready"], false, "{body}");
    assert_eq!(v["sources"]["clash"]["ready"], false, "{body}");
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .starts_with("source clash: stopped:")
            || v["reason"].as_str().unwrap().starts_with("source missing:"),
        "{body}"
    );
    assert!(!relay.handle.is_finished(), "the process runs on");
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn routes_send_to_their_target_or_settle_by_their_action_first_match_first() {
    let r = Routed::start(
        r#"
        [[sources.orders.routes]]
        name = "created"
        subjects = ["o.*.created"]
        url = "{created}"
        [[sources.orders.routes]]
        subjects = ["o.noise.>", "o.*.created"]
        action = "ack"
        "#,
    )
    .await;
    let (js, main_app, created) = (&r.js, &r.main, &r.created);
    publish_each(
        js,
        &[
            ("o.1.created", "c1"),
            ("o.noise.x", "n1"),
            ("o.1.updated", "u1"),
            ("o.2.created", "c2"),
            ("o.noise.y.z", "n2"),
        ],
    )
    .await;
    created.wait_for("2 created", T, |r| r.len() == 2).await;
    main_app.wait_for("1 updated", T, |r| r.len() == 1).await;
    r.settled().await;
    let bodies = |app: &MockApp| -> Vec<String> {
        app.requests()
            .iter()
            .map(|r| String::from_utf8_lossy(&r.body).to_string())
            .collect()
    };
    assert_eq!(bodies(created), ["c1", "c2"], "the first match wins");
    assert_eq!(bodies(main_app), ["u1"], "no route: the source's url");
    r.counted(&[
        (
            "jetrelay_routed_total{route=\"created\",source=\"orders\",target=\"app\"}",
            2.0,
        ),
        (
            "jetrelay_routed_total{route=\"1\",source=\"orders\",target=\"skip\"}",
            2.0,
        ),
        (
            "jetrelay_messages_settled_total{action=\"ack\",source=\"orders\"}",
            5.0,
        ),
        ("jetrelay_http_requests_total{source=\"orders\"}", 3.0),
    ])
    .await;
}

/// `when` (CEL over the subject, the headers' first values and the JSON body) is one
/// more condition of a route, with its subjects and headers: a message whose body
/// is not JSON, or whose expression fails (a missing field), is no match.
#[tokio::test]
async fn a_when_route_decides_on_the_json_body_and_headers_before_the_app() {
    let r = Routed::start(
        r#"
        [[sources.orders.routes]]
        name = "created"
        subjects = ["o.>"]
        when = 'body.type == "order.created" && headers["Tenant"] != "test"'
        url = "{created}"
        [[sources.orders.routes]]
        name = "ping"
        when = 'body.type == "ping" || body.items.exists(i, i.sku == "noise")'
        action = "ack"
        "#,
    )
    .await;
    let order = r#"{"type": "order.created", "items": [{"sku": "a"}]}"#;
    type Case<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);
    let cases: &[Case<'_>] = &[
        ("o.1", order, &[("Tenant", "prod")]),
        ("o.2", order, &[("Tenant", "test")]),
        ("o.3", r#"{"type": "ping"}"#, &[]),
        ("o.4", r#"{"type": "x", "items": [{"sku": "noise"}]}"#, &[]),
        ("o.5", "order.created, but not JSON", &[]),
        ("o.6", r#"{"kind": "no type field"}"#, &[]),
        ("o.7", order, &[]),
    ];
    for (subject, body, headers) in cases {
        publish_with(&r.js, subject, body, headers).await;
    }
    r.settled().await;
    let subjects = |app: &MockApp| -> Vec<String> {
        let mut s: Vec<String> = (app.requests().iter())
            .map(|r| r.header("nats-subject").unwrap_or_default().to_string())
            .collect();
        s.sort();
        s
    };
    // o.7 has no Tenant: `headers["Tenant"]` fails, so no match.
    assert_eq!(subjects(&r.created), ["o.1"]);
    assert_eq!(subjects(&r.main), ["o.2", "o.5", "o.6", "o.7"]);
    r.counted(&[
        (
            "jetrelay_routed_total{route=\"created\",source=\"orders\",target=\"app\"}",
            1.0,
        ),
        (
            "jetrelay_routed_total{route=\"ping\",source=\"orders\",target=\"skip\"}",
            2.0,
        ),
        (
            "jetrelay_messages_settled_total{action=\"ack\",source=\"orders\"}",
            7.0,
        ),
    ])
    .await;
}

/// A durable source `orders` on a stream of `o.>`, its app `main`, with `routes` (the
/// tables of `sources.orders.routes`; `{created}` is a second app's URL).
struct Routed {
    _nats: NatsServer,
    js: async_nats::jetstream::Context,
    stream: String,
    main: MockApp,
    created: MockApp,
    relay: Relay,
}

impl Routed {
    async fn start(routes: &str) -> Self {
        let nats = NatsServer::start().await;
        let (_, js) = client(&nats).await;
        let stream = unique("R");
        create_stream(&js, &stream, &["o.>"]).await;
        let main = MockApp::start(|_, _| Reply::status(200)).await;
        let created = MockApp::start(|_, _| Reply::status(200)).await;
        let tables = format!(
            "[sources.orders]\nstream = \"{stream}\"\nkind = \"durable\"\ndurable = \"orders\"\n{}",
            routes.replace("{created}", &created.url())
        );
        let relay = Relay::ready(sources_config(&nats, &main, &tables)).await;
        Self {
            _nats: nats,
            js,
            stream,
            main,
            created,
            relay,
        }
    }

    async fn settled(&self) {
        eventually("every message settled", T, || async {
            consumer_drained(&self.js, &self.stream, "orders").await
        })
        .await;
    }

    /// Each series at its count; then the relay stops.
    async fn counted(self, series: &[(&str, f64)]) {
        for &(series, n) in series {
            assert_eq!(self.relay.metric(series).await, n, "{series}");
        }
        self.relay.stop().await.unwrap();
    }
}

#[test]
fn a_broken_route_is_refused_at_load_naming_it() {
    let text = r#"
        [http]
        url = "http://127.0.0.1:1/m"
        [sources.orders]
        stream = "S"
        kind = "durable"
        durable = "d"
        [[sources.orders.routes]]
        subjects = ["o.>"]
        path = "/x"
        [[sources.orders.routes]]
        subjects = ["o.>"]
        path = "/x"
        action = "ack"
        [[sources.orders.routes]]
        action = "ack"
        [[sources.orders.routes]]
        subjects = ["o..x"]
        url = "ftp://h/x"
    "#;
    let err = Config::from_figment(Figment::from(Toml::string(text))).unwrap_err();
    let keys: Vec<&str> = err.problems().iter().map(|p| p.key.as_str()).collect();
    assert!(!keys.contains(&"sources.orders.routes[0]"), "{err}");
    for key in [
        "sources.orders.routes[1]",
        "sources.orders.routes[2]",
        "sources.orders.routes[3]",
    ] {
        assert!(keys.contains(&key), "{key} missing: {err}");
    }
    let text = err.to_string();
    assert!(text.contains("beside a target"), "{text}");
    assert!(text.contains("an empty match"), "{text}");
    assert!(text.contains("ftp://"), "{text}");
}

/// The `[sources.<name>]` table of a durable source on `stream`.
fn durable_table(name: &str, stream: &str) -> String {
    format!("[sources.{name}]\nstream = \"{stream}\"\nkind = \"durable\"\ndurable = \"{name}\"\n")
}

#[tokio::test]
async fn a_reload_starts_an_added_source_and_drains_a_removed_one_and_the_other_sees_nothing() {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    let (a, b) = (unique("A"), unique("B"));
    create_stream(&js, &a, &["a.>"]).await;
    create_stream(&js, &b, &["b.>"]).await;
    let app = MockApp::start(|_, _| Reply::status(200).after(Duration::from_millis(5))).await;
    let only_a = sources_config(&nats, &app, &durable_table("a", &a));
    let relay = Relay::ready(only_a.clone()).await;
    // Load on a throughout.
    let load = {
        let js = js.clone();
        tokio::spawn(async move {
            for _ in 0..20 {
                publish(&js, "a.x", 10).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let both = sources_config(
        &nats,
        &app,
        &format!("{}{}", durable_table("a", &a), durable_table("b", &b)),
    );
    relay.reloader.request(Ok(both));
    eventually("b starts", T, || async {
        relay
            .health
            .status()
            .sources
            .iter()
            .any(|(n, s)| n == "b" && s.state == State::Consuming)
    })
    .await;
    publish(&js, "b.y", 30).await;
    load.await.unwrap();
    eventually("all of a and b delivered", T, || async {
        consumer_drained(&js, &a, "a").await && consumer_drained(&js, &b, "b").await
    })
    .await;
    // Remove a: it drains and leaves readiness and the metrics; b goes on.
    let only_b = sources_config(&nats, &app, &durable_table("b", &b));
    relay.reloader.request(Ok(only_b));
    eventually("a is gone", T, || async {
        let s = relay.health.status();
        s.sources.len() == 1 && s.sources[0].0 == "b" && s.ready
    })
    .await;
    publish(&js, "b.z", 10).await;
    eventually("b delivers on", T, || async {
        consumer_drained(&js, &b, "b").await
            && relay
                .metric("jetrelay_messages_settled_total{action=\"ack\",source=\"b\"}")
                .await
                == 40.0
    })
    .await;
    let (_, text) = relay.get("/metrics").await;
    assert!(
        !text.contains("source=\"a\""),
        "a's series are gone:\n{text}"
    );
    for source in ["b"] {
        assert_eq!(
            relay
                .metric(&format!(
                    "jetrelay_redeliveries_total{{source=\"{source}\"}}"
                ))
                .await,
            0.0,
            "no redelivery for {source}"
        );
    }
    // Every message once: a's 200 and b's 40.
    let seqs: std::collections::BTreeSet<(String, u64)> = app
        .requests()
        .iter()
        .map(|r| {
            (
                r.header("nats-stream").unwrap_or_default().to_string(),
                r.seq(),
            )
        })
        .collect();
    assert_eq!(seqs.len(), 240);
    assert_eq!(app.requests().len(), 240, "nothing twice");
    // a's consumer is kept, with its position.
    assert!(consumer_drained(&js, &a, "a").await);
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn with_a_budget_a_source_whose_app_hangs_leaves_the_other_its_share() {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    let (slow, fast) = (unique("SLOW"), unique("FAST"));
    create_stream(&js, &slow, &["slow.>"]).await;
    create_stream(&js, &fast, &["fast.>"]).await;
    let hung = slow.clone();
    // The slow stream's requests hang past the timeout (1 s); the fast one's take 5 ms.
    let app = MockApp::start(move |r, _| {
        if r.header("nats-stream") == Some(hung.as_str()) {
            Reply::status(200).after(Duration::from_secs(30))
        } else {
            Reply::status(200).after(Duration::from_millis(5))
        }
    })
    .await;
    let relay = Relay::ready(sources_config(
        &nats,
        &app,
        &format!(
            "[budget]\nmax_in_flight = 4\nreserve = 0\n[delivery]\nmax_in_flight = 4\n\
             {}[sources.slow.http]\ntimeout_ms = 1000\n{}",
            durable_table("slow", &slow),
            durable_table("fast", &fast)
        ),
    ))
    .await;
    publish(&js, "slow.x", 40).await;
    // Slow alone borrows the whole budget; then fast comes.
    eventually("slow holds the budget", T, || async {
        relay.metric("jetrelay_in_flight{source=\"slow\"}").await == 4.0
    })
    .await;
    publish(&js, "fast.y", 200).await;
    let most = std::sync::Mutex::new(0.0f64);
    eventually("fast drains beside the hung source", T, || async {
        let total = relay.metric("jetrelay_in_flight").await;
        {
            let mut m = most.lock().unwrap();
            *m = m.max(total);
        }
        consumer_drained(&js, &fast, "fast").await
    })
    .await;
    let most = *most.lock().unwrap();
    assert!(most <= 4.0, "never past the budget: {most}");
    assert!(
        relay
            .metric("jetrelay_http_requests_total{class=\"timeout\",source=\"slow\"}")
            .await
            >= 4.0,
        "slow's requests timed out meanwhile"
    );
    relay.stop().await.unwrap();
}

/// `budget.reserve`: the slot kept for a source is never lent, so one whose app hangs
/// (its requests held for the whole 30 s timeout) cannot hold another's first request:
/// it reaches the app at once, not when the hung requests time out. A reload to
/// `reserve = 0` lends it.
#[tokio::test]
async fn a_source_whose_app_hangs_cannot_hold_back_another_s_first_request() {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    let (slow, fast) = (unique("SLOW"), unique("FAST"));
    create_stream(&js, &slow, &["slow.>"]).await;
    create_stream(&js, &fast, &["fast.>"]).await;
    let hung = slow.clone();
    let first_fast = Arc::new(Mutex::new(None));
    let first = Arc::clone(&first_fast);
    // The slow stream's requests never end within the test; the fast one's take 5 ms.
    let app = MockApp::start(move |r, _| {
        if r.header("nats-stream") == Some(hung.as_str()) {
            Reply::status(200).after(Duration::from_secs(120))
        } else {
            first.lock().unwrap().get_or_insert_with(Instant::now);
            Reply::status(200).after(Duration::from_millis(5))
        }
    })
    .await;
    let config = |reserve: &str| {
        sources_config(
            &nats,
            &app,
            &format!(
                "[budget]\nmax_in_flight = 8\n{reserve}[delivery]\nmax_in_flight = 8\nshutdown_grace_ms = 500\n\
                 {}[sources.slow.http]\ntimeout_ms = 30000\n{}",
                durable_table("slow", &slow),
                durable_table("fast", &fast)
            ),
        )
    };
    // The default reserve, 1.
    let relay = Relay::ready(config("")).await;
    publish(&js, "slow.x", 40).await;
    // Slow alone borrows all it may: the budget less fast's reserve.
    eventually("slow holds the budget", T, || async {
        relay.metric("jetrelay_in_flight{source=\"slow\"}").await >= 7.0
    })
    .await;
    publish(&js, "fast.y", 20).await;
    // Within a second on an idle host; 5 s leaves room for a loaded one, and is far
    // from the 30 s a hung request holds its slot.
    eventually(
        "fast's first request reaches its app",
        Duration::from_secs(5),
        || async { first_fast.lock().unwrap().is_some() },
    )
    .await;
    assert_eq!(
        relay.metric("jetrelay_in_flight{source=\"slow\"}").await,
        7.0,
        "slow's hung requests still hold their slots"
    );
    assert!(
        relay.metric("jetrelay_in_flight").await <= 8.0,
        "the budget"
    );
    eventually("fast drained", T, || async {
        consumer_drained(&js, &fast, "fast").await
    })
    .await;
    relay.reloader.request(Ok(config("reserve = 0\n")));
    eventually("slow borrows fast's slot too", T, || async {
        relay.metric("jetrelay_in_flight{source=\"slow\"}").await == 8.0
    })
    .await;
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn each_source_says_whether_its_own_app_is_healthy() {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    let (up, down) = (unique("U"), unique("D"));
    create_stream(&js, &up, &["u.>"]).await;
    create_stream(&js, &down, &["d.>"]).await;
    let app = MockApp::start(|_, _| Reply::status(200)).await;
    // `down` sends to a port nobody listens on; `up` to the app.
    let relay = Relay::start(sources_config(
        &nats,
        &app,
        &format!(
            r#"
            [sources.up]
            stream = "{up}"
            kind = "durable"
            durable = "up"
            [sources.down]
            stream = "{down}"
            kind = "durable"
            durable = "down"
            [sources.down.http]
            url = "http://127.0.0.1:1/x"
            "#
        ),
    ))
    .await;
    publish(&js, "d.x", 2).await;
    publish(&js, "u.x", 2).await;
    app.wait_for("the up source's 2", T, |r| r.len() == 2).await;
    let healthy = |text: &str, source: &str| {
        sample_of(
            text,
            &format!("jetrelay_app_healthy{{source=\"{source}\"}}"),
        )
    };
    eventually("down's app is unreachable, up's is fine", T, || async {
        let (_, text) = relay.get("/metrics").await;
        healthy(&text, "down") == Some(0.0) && healthy(&text, "up") == Some(1.0)
    })
    .await;
    // More traffic on `up` while `down` keeps failing: neither writes the other's.
    publish(&js, "u.x", 4).await;
    app.wait_for("6 in all", T, |r| r.len() == 6).await;
    let (_, text) = relay.get("/metrics").await;
    assert_eq!(healthy(&text, "down"), Some(0.0), "{text}");
    assert_eq!(healthy(&text, "up"), Some(1.0), "{text}");
    relay.stop().await.unwrap();
}
