//! `jetrelay scaler` against real servers, no jetrelay consuming unless a test starts
//! one: a durable's pending and ack pending; a consumer that does not exist yet
//! reported by its stream's messages under its filter; a static group (the sum over
//! its members, a missing member's partitions counted from the stream); an elastic
//! group (its work-queue stream); a three-node cluster whose consumer leader steps
//! down (the figure follows the new leader). And the endpoints' edges: a service
//! source left out, an unknown name, `/metrics`, `/livez`, `/readyz`.

use std::time::Duration;

use async_nats::jetstream;
use figment::Figment;
use figment::providers::{Format, Toml};
use futures::StreamExt;
use jetrelay::config::Config;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::support::groups::{elastic_group, member_config, publish_keys, static_group};
use crate::support::*;

const T: Duration = Duration::from_secs(30);

/// `jetrelay scaler` in-process on a loopback port, stopped when dropped.
struct Scaler {
    base: String,
    stop: CancellationToken,
}

impl Drop for Scaler {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Scaler {
    async fn start(config: Config) -> Scaler {
        let scaler = Scaler::unready(config).await;
        eventually("the scaler ready", T, || async {
            scaler.get_text("/readyz").await.0 == 200
        })
        .await;
        scaler
    }

    /// Started, not waited for.
    async fn unready(config: Config) -> Scaler {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let stop = CancellationToken::new();
        let until = stop.clone();
        tokio::spawn(async move {
            jetrelay::cli::scaler::run(&config, listener, until)
                .await
                .unwrap();
        });
        Scaler { base, stop }
    }

    async fn get_text(&self, path: &str) -> (u16, String) {
        match http().get(format!("{}{path}", self.base)).send().await {
            Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
            Err(_) => (0, String::new()),
        }
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        let (code, text) = self.get_text(path).await;
        (code, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Waits until `/v1/lag?source=NAME` answers `want` (the reads are kept a second).
    async fn until(&self, source: &str, want: Value) {
        let path = format!("/v1/lag?source={source}");
        let deadline = std::time::Instant::now() + T;
        loop {
            let (code, body) = self.get(&path).await;
            if code == 200 && body == want {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{source}: want {want}, last {code} {body}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn lag(lag: u64, pending: u64, ack_pending: u64, consumer: &str) -> Value {
    json!({"lag": lag, "pending": pending, "ack_pending": ack_pending, "consumer": consumer})
}

/// A config of `[sources.*]` tables on `servers` (the app is never asked).
fn config(servers: &str, tables: &str) -> Config {
    let base = format!(
        r#"
        [nats]
        servers = "{servers}"
        [http]
        url = "http://127.0.0.1:9"
        [log]
        level = "warn"
        {tables}
        "#
    );
    Config::from_figment(Figment::from(Toml::string(&base))).unwrap()
}

/// A `[sources.<name>]` table: durable `<name>` on `stream`, with `extra` lines.
fn durable_table(name: &str, stream: &str, extra: &str) -> String {
    format!(
        "[sources.{name}]\nstream = \"{stream}\"\nkind = \"durable\"\ndurable = \"{name}\"\n{extra}\n"
    )
}

/// A durable pull consumer `name` on `stream` with `filter`, explicit acks.
async fn durable(js: &jetstream::Context, stream: &str, name: &str, filter: &str) {
    js.get_stream(stream)
        .await
        .unwrap()
        .create_consumer(jetstream::consumer::pull::Config {
            durable_name: Some(name.into()),
            filter_subject: filter.into(),
            ack_policy: jetstream::consumer::AckPolicy::Explicit,
            ..Default::default()
        })
        .await
        .unwrap();
}

/// `n` messages of consumer `name`, delivered and not acknowledged.
async fn take(
    js: &jetstream::Context,
    stream: &str,
    name: &str,
    n: usize,
) -> Vec<jetstream::Message> {
    let consumer: jetstream::consumer::PullConsumer = js
        .get_stream(stream)
        .await
        .unwrap()
        .get_consumer(name)
        .await
        .unwrap();
    let mut batch = consumer
        .fetch()
        .max_messages(n)
        .expires(Duration::from_secs(5))
        .messages()
        .await
        .unwrap();
    let mut out = Vec::new();
    while let Some(m) = batch.next().await {
        out.push(m.unwrap());
    }
    assert_eq!(out.len(), n);
    out
}

#[tokio::test]
async fn scaler_a_consumer_not_created_yet_reports_its_streams_messages_under_its_filter() {
    let env = Env::start(&["o.>"]).await;
    publish(&env.js, "o.a.x", 6).await;
    publish(&env.js, "o.b.y", 4).await;
    let tables = durable_table("orders", &env.stream, "filter_subjects = [\"o.a.>\"]")
        + &durable_table("all", &env.stream, "");
    let scaler = Scaler::start(config(env.nats.url(), &tables)).await;
    let (code, body) = scaler.get("/v1/lag").await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        body,
        json!({"lag": 16, "sources": {
            "all": lag(10, 10, 0, "missing"),
            "orders": lag(6, 6, 0, "missing"),
        }})
    );
    // Created: its own figures from then on.
    durable(&env.js, &env.stream, "orders", "o.a.>").await;
    scaler.until("orders", lag(6, 6, 0, "present")).await;
}

#[tokio::test]
async fn scaler_a_durable_reports_pending_and_ack_pending_from_its_consumer() {
    let env = Env::start(&["o.>"]).await;
    durable(&env.js, &env.stream, "orders", "o.>").await;
    publish(&env.js, "o.x", 10).await;
    let service = r#"
        [sources.rpc]
        kind = "service"
        service = "svc"
        endpoints = [{ name = "create", subject = "svc.create", path = "/x" }]
        "#;
    let tables = durable_table("orders", &env.stream, "") + service;
    let scaler = Scaler::start(config(env.nats.url(), &tables)).await;
    scaler.until("orders", lag(10, 10, 0, "present")).await;
    let held = take(&env.js, &env.stream, "orders", 3).await;
    scaler.until("orders", lag(10, 7, 3, "present")).await;
    held[0].ack().await.unwrap();
    scaler.until("orders", lag(9, 7, 2, "present")).await;
    // The service source has no lag: left out of the sum, 404 by name.
    let (code, body) = scaler.get("/v1/lag").await;
    assert_eq!(code, 200);
    assert_eq!(body["lag"], 9);
    assert_eq!(body["sources"].as_object().unwrap().len(), 1, "{body}");
    let (code, body) = scaler.get("/v1/lag?source=rpc").await;
    assert_eq!(code, 404);
    assert!(
        body["error"].as_str().unwrap().contains("service"),
        "{body}"
    );
    let (code, body) = scaler.get("/v1/lag?source=nope").await;
    assert_eq!(code, 404);
    assert!(body["error"].as_str().unwrap().contains("orders"), "{body}");
    assert_eq!(scaler.get("/v1/lag?src=orders").await.0, 400);
    // The gauge as the last read left it; the probes.
    let (_, text) = scaler.get_text("/metrics").await;
    assert_eq!(
        jetrelay::ops::metrics::sum_of(&text, "jetrelay_scaler_lag{source=\"orders\"}"),
        Some(9.0),
        "{text}"
    );
    assert_eq!(scaler.get_text("/livez").await.0, 200);
    assert_eq!(scaler.get_text("/readyz").await.0, 200);
}

#[tokio::test]
async fn scaler_a_source_that_cannot_be_read_fails_the_whole_answer_not_the_others() {
    let env = Env::start(&["o.>"]).await;
    publish(&env.js, "o.x", 2).await;
    let tables = durable_table("orders", &env.stream, "") + &durable_table("gone", "NOSUCH", "");
    let scaler = Scaler::start(config(env.nats.url(), &tables)).await;
    let (code, body) = scaler.get("/v1/lag").await;
    assert_eq!(code, 503, "{body}");
    assert!(
        body["errors"]["gone"]
            .as_str()
            .unwrap()
            .contains("NOSUCH does not exist"),
        "{body}"
    );
    assert_eq!(scaler.get("/v1/lag?source=gone").await.0, 503);
    scaler.until("orders", lag(2, 2, 0, "missing")).await;
}

/// What a group test goes on with.
struct GroupRun {
    nats: NatsServer,
    js: jetstream::Context,
    stream: String,
    app: MockApp,
    scaler: Scaler,
    m1: Relay,
}

/// A group of `kind` (`static` or `elastic`) with members m1 and m2 over two
/// partitions and ten keys published (five in each partition), and the scaler on its
/// config: the whole ten while no member consumer exists (scaled to zero); then m1
/// runs and consumes its five, and the scaler says `after_m1`.
async fn ten_keys_then_m1(kind: &str, after_m1: Value) -> GroupRun {
    let (nats, js, stream, _admin) = match kind {
        "static" => static_group(2, &["m1", "m2"]).await,
        _ => elastic_group(2, &["m1", "m2"]).await,
    };
    let (prefix, group) = if kind == "static" {
        ("o", "cg")
    } else {
        ("e", "eg")
    };
    publish_keys(&js, prefix, 10, 1).await;
    let app = MockApp::start(|_, _| Reply::status(200)).await;
    let config = member_config(&nats, &app, kind, &stream, group, "m1", "");
    let scaler = Scaler::start(config.clone()).await;
    scaler.until("default", lag(10, 10, 0, "missing")).await;
    let m1 = Relay::ready(config).await;
    app.wait_for("m1's five", T, |r| r.len() == 5).await;
    scaler.until("default", after_m1).await;
    GroupRun {
        nats,
        js,
        stream,
        app,
        scaler,
        m1,
    }
}

#[tokio::test]
async fn scaler_without_nats_is_not_ready_and_answers_503_at_once() {
    let tables = durable_table("orders", "S", "");
    let scaler = Scaler::unready(config("nats://127.0.0.1:1", &tables)).await;
    eventually("the scaler serving", T, || async {
        scaler.get_text("/livez").await.0 == 200
    })
    .await;
    let (code, why) = scaler.get_text("/readyz").await;
    assert_eq!(code, 503, "{why}");
    assert!(why.contains("NATS"), "{why}");
    for path in ["/v1/lag", "/v1/lag?source=orders"] {
        let t = std::time::Instant::now();
        let (code, body) = scaler.get(path).await;
        assert_eq!(code, 503, "{path}: {body}");
        assert!(body["error"].as_str().unwrap().contains("NATS"), "{body}");
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "{path}: {:?}",
            t.elapsed()
        );
    }
    assert_eq!(scaler.get("/v1/lag?source=nope").await.0, 404);
}

#[tokio::test]
async fn scaler_a_static_group_sums_its_members_consumers() {
    // While no member consumer exists, each member's partitions are counted from the
    // stream; with m1's present and m2's missing, the sum of both.
    let g = ten_keys_then_m1("static", lag(5, 5, 0, "missing")).await;
    g.m1.stop().await.unwrap();
    let m2 = member_config(&g.nats, &g.app, "static", &g.stream, "cg", "m2", "");
    let relay = Relay::ready(m2).await;
    g.app.wait_for("all ten", T, |r| r.len() == 10).await;
    g.scaler.until("default", lag(0, 0, 0, "present")).await;
    relay.stop().await.unwrap();
    // Durables stay at zero replicas: a new message is one member's pending.
    publish_keys(&g.js, "o", 1, 1).await;
    g.scaler.until("default", lag(1, 1, 0, "present")).await;
}

#[tokio::test]
async fn scaler_an_elastic_group_reports_its_work_queue_stream() {
    // Scaled to zero, the whole backlog is in the work queue; then what m1 left.
    let g = ten_keys_then_m1("elastic", lag(5, 5, 0, "present")).await;
    g.m1.stop().await.unwrap();
}

#[tokio::test]
async fn scaler_in_a_cluster_follows_the_consumer_leader_when_it_steps_down() {
    let cluster = Cluster::start().await;
    let addrs: Vec<async_nats::ServerAddr> = cluster
        .urls()
        .split(',')
        .map(|u| u.parse().unwrap())
        .collect();
    let client = async_nats::connect(addrs).await.unwrap();
    let js = jetstream::new(client.clone());
    let stream = unique("C");
    eventually("an R3 stream", T, || async {
        js.create_stream(jetstream::stream::Config {
            name: stream.clone(),
            subjects: vec!["c.>".into()],
            num_replicas: 3,
            ..Default::default()
        })
        .await
        .is_ok()
    })
    .await;
    durable(&js, &stream, "orders", "c.>").await;
    publish(&js, "c.x", 10).await;
    let held = take(&js, &stream, "orders", 3).await;
    // The scaler talks to one node only, whichever leads the consumer.
    let tables = durable_table("orders", &stream, "");
    let scaler = Scaler::start(config(cluster.nodes[0].url(), &tables)).await;
    scaler.until("orders", lag(10, 7, 3, "present")).await;
    let leader = |js: jetstream::Context, stream: String| async move {
        consumer_info(&js, &stream, "orders")
            .await
            .and_then(|i| i.cluster.and_then(|c| c.leader))
    };
    let before = leader(js.clone(), stream.clone()).await.unwrap();
    let answer: Value = serde_json::from_slice(
        &client
            .request(
                format!("$JS.API.CONSUMER.LEADER.STEPDOWN.{stream}.orders"),
                "".into(),
            )
            .await
            .unwrap()
            .payload,
    )
    .unwrap();
    assert_eq!(answer["success"], true, "{answer}");
    eventually("a new consumer leader", T, || async {
        leader(js.clone(), stream.clone())
            .await
            .is_some_and(|l| l != before)
    })
    .await;
    // What changes under the new leader is what the scaler reports.
    held[0].ack().await.unwrap();
    held[1].ack().await.unwrap();
    publish(&js, "c.y", 5).await;
    scaler.until("orders", lag(13, 12, 1, "present")).await;
}
