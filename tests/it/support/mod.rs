//! Shared test harness: real nats-server processes, a real HTTP app, and the daemon
//! run in-process from a TOML config, as a user would write it.

pub mod app;
pub mod certs;
pub mod collector;
pub mod daemon;
pub mod groups;
pub mod nats_server;
pub mod peer;
pub mod proxy;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_nats::jetstream;
use figment::Figment;
use figment::providers::{Format, Toml};
use jetrelay::config::Config;
use jetrelay::daemon::{Daemon, DaemonError};
use jetrelay::ops::readiness::Readiness;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use app::{MockApp, Reply};
pub use nats_server::{Cluster, NatsServer};

/// An HTTP client for the tests' own requests, built as jetrelay builds every client
/// (reqwest has no default crypto provider; none is installed process-wide here, so
/// the daemon's clients run in the tests exactly as in production).
pub fn http() -> reqwest::Client {
    jetrelay::http::client::plain().expect("an HTTP client")
}

/// Unique names per test, so tests never collide even on a shared server.
pub fn unique(prefix: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{prefix}{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Polls `cond` every 20 ms until it holds, or panics after `timeout`.
pub async fn eventually<F, Fut>(what: &str, timeout: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !cond().await {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub async fn client(nats: &NatsServer) -> (async_nats::Client, jetstream::Context) {
    let client = async_nats::connect(nats.url()).await.unwrap();
    let js = jetstream::new(client.clone());
    (client, js)
}

pub async fn create_stream(js: &jetstream::Context, name: &str, subjects: &[&str]) {
    js.create_stream(jetstream::stream::Config {
        name: name.to_string(),
        subjects: subjects.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    })
    .await
    .unwrap();
}

/// A stream `name` on `subjects` that takes atomic batches (`atomic`) or not.
pub async fn atomic_stream(js: &jetstream::Context, name: &str, subjects: &[&str], atomic: bool) {
    js.create_stream(jetstream::stream::Config {
        name: name.to_string(),
        subjects: subjects.iter().map(|s| s.to_string()).collect(),
        allow_atomic_publish: atomic,
        ..Default::default()
    })
    .await
    .unwrap();
}

/// Publishes `body` to `subject` with the headers given, awaiting its PubAck.
pub async fn publish_with(
    js: &jetstream::Context,
    subject: &str,
    body: &str,
    headers: &[(&str, &str)],
) {
    let mut h = async_nats::HeaderMap::new();
    for (n, v) in headers {
        h.insert(*n, *v);
    }
    js.publish_with_headers(subject.to_string(), h, body.to_string().into())
        .await
        .unwrap()
        .await
        .unwrap();
}

/// Publishes `n` messages `"<subject>" / "m<i>"`, waiting for each PubAck.
/// Publishes each `(subject, body)` in order, awaiting each PubAck.
pub async fn publish_each(js: &jetstream::Context, messages: &[(&str, &str)]) {
    for (subject, body) in messages {
        js.publish(subject.to_string(), body.to_string().into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
}

pub async fn publish(js: &jetstream::Context, subject: &str, n: usize) {
    for i in 0..n {
        js.publish(subject.to_string(), format!("m{i}").into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
}

pub async fn consumer_info(
    js: &jetstream::Context,
    stream: &str,
    consumer: &str,
) -> Option<jetstream::consumer::Info> {
    let s = js.get_stream(stream).await.ok()?;
    s.consumer_info(consumer).await.ok()
}

/// The consumer has nothing pending and nothing unacknowledged.
pub async fn consumer_drained(js: &jetstream::Context, stream: &str, consumer: &str) -> bool {
    consumer_info(js, stream, consumer)
        .await
        .is_some_and(|i| i.num_pending == 0 && i.num_ack_pending == 0)
}

/// A nats-server with one stream and the names of a durable for it.
pub struct Env {
    pub nats: NatsServer,
    pub js: jetstream::Context,
    pub stream: String,
    pub durable: String,
}

impl Env {
    /// Starts a server and creates a stream (unique name) with `subjects`.
    pub async fn start(subjects: &[&str]) -> Env {
        let nats = NatsServer::start().await;
        let (_, js) = client(&nats).await;
        let (stream, durable) = (unique("S"), unique("d"));
        create_stream(&js, &stream, subjects).await;
        Env {
            nats,
            js,
            stream,
            durable,
        }
    }

    /// The durable-source config on this stream and durable, delivering to `app`,
    /// with `extra` TOML on top.
    pub fn config(&self, app: &MockApp, extra: &str) -> Config {
        durable_config(&self.nats, app, &self.stream, &self.durable, extra)
    }

    /// jetrelay on [`Env::config`], started and ready.
    pub async fn relay(&self, app: &MockApp, extra: &str) -> Relay {
        Relay::ready(self.config(app, extra)).await
    }
}

/// A durable-source config for `stream`/`durable` delivering to `app`, plus `extra`
/// TOML merged on top.
pub fn durable_config(
    nats: &NatsServer,
    app: &MockApp,
    stream: &str,
    durable: &str,
    extra: &str,
) -> Config {
    durable_config_at(nats.url(), app, stream, durable, extra)
}

/// [`durable_config`] for any server list (comma-separated URLs).
pub fn durable_config_at(
    servers: &str,
    app: &MockApp,
    stream: &str,
    durable: &str,
    extra: &str,
) -> Config {
    durable_config_for(servers, &app.url(), stream, durable, extra)
}

/// [`durable_config`] for any server list and any app URL (an app not started yet).
pub fn durable_config_for(
    servers: &str,
    app_url: &str,
    stream: &str,
    durable: &str,
    extra: &str,
) -> Config {
    let base = format!(
        r#"
        [nats]
        servers = "{servers}"
        [source]
        stream = "{stream}"
        kind = "durable"
        durable = "{durable}"
        [http]
        url = "{app_url}"
        timeout_ms = 5000
        [admin]
        listen = "127.0.0.1:0"
        [log]
        level = "warn"
        "#,
    );
    Config::from_figment(Figment::from(Toml::string(&base)).merge(Toml::string(extra)))
        .unwrap_or_else(|e| panic!("test config: {e}"))
}

/// The daemon running in-process.
pub struct Relay {
    pub admin: SocketAddr,
    /// The publish endpoint, when `publish.listen` is set.
    pub publish: Option<SocketAddr>,
    pub health: Readiness,
    /// What SIGHUP does: hands the daemon a config to reload.
    pub reloader: jetrelay::daemon::reload::Reloader,
    pub shutdown: CancellationToken,
    pub handle: JoinHandle<Result<(), DaemonError>>,
}

impl Relay {
    pub async fn start(config: Config) -> Relay {
        // TEST_LOG=1 shows the daemon's log lines (text) for a failing test.
        if std::env::var_os("TEST_LOG").is_some() {
            jetrelay::ops::telemetry::init(
                jetrelay::ops::telemetry::LogFormat::Text,
                "jetrelay=debug",
            );
        }
        let app = Daemon::build(config).await.unwrap();
        let shutdown = CancellationToken::new();
        Relay {
            admin: app.admin_addr().unwrap(),
            publish: app.publish_addr(),
            health: app.readiness(),
            reloader: app.reloader(),
            handle: tokio::spawn(app.run(shutdown.clone())),
            shutdown,
        }
    }

    /// Starts and waits until ready.
    pub async fn ready(config: Config) -> Relay {
        let relay = Relay::start(config).await;
        relay.wait_ready(Duration::from_secs(30)).await;
        relay
    }

    /// Cancels and waits for the run to end.
    pub async fn stop(self) -> Result<(), DaemonError> {
        self.shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(60), self.handle)
            .await
            .expect("the daemon did not stop")
            .unwrap()
    }

    pub async fn wait_ready(&self, timeout: Duration) {
        let mut rx = self.health.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|s| s.ready))
            .await
            .unwrap_or_else(|_| panic!("not ready after {timeout:?}: {:?}", self.health.status()))
            .unwrap();
    }

    pub async fn get(&self, path: &str) -> (u16, String) {
        let resp = http()
            .get(format!("http://{}{path}", self.admin))
            .send()
            .await
            .unwrap();
        (resp.status().as_u16(), resp.text().await.unwrap())
    }

    /// A series' value from /metrics (0 when absent): the sum of every sample of
    /// that name whose labels include the ones given (`name{a="x"}`), so that a
    /// series names what it is about whatever source label it also carries.
    pub async fn metric(&self, series: &str) -> f64 {
        let (_, text) = self.get("/metrics").await;
        sum_of(&text, series)
    }

    /// Messages settled with `action` (ack, nak, term) so far.
    pub async fn settled(&self, action: &str) -> f64 {
        self.metric(&format!(
            "jetrelay_messages_settled_total{{action=\"{action}\"}}"
        ))
        .await
    }
}

/// Publishes one message with a raw header block (which a client library would refuse
/// to build: a bad name, a line without `:`, bytes that are not UTF-8) over the NATS
/// protocol itself, and waits for the server's PONG.
pub async fn raw_publish(url: &str, subject: &str, header_block: &[u8], payload: &[u8]) {
    raw_request(url, subject, None, header_block, payload).await;
}

/// As [`raw_publish`], with `reply` as the message's reply subject when given.
pub async fn raw_request(
    url: &str,
    subject: &str,
    reply: Option<&str>,
    header_block: &[u8],
    payload: &[u8],
) {
    raw_hpub(url, subject.as_bytes(), reply, header_block, payload).await;
}

/// As [`raw_request`], with the subject as bytes (a subject that is not UTF-8, as
/// any publisher may send).
pub async fn raw_hpub(
    url: &str,
    subject: &[u8],
    reply: Option<&str>,
    header_block: &[u8],
    payload: &[u8],
) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let mut subject = subject.to_vec();
    if let Some(reply) = reply {
        subject.push(b' ');
        subject.extend_from_slice(reply.as_bytes());
    }
    let addr = url.trim_start_matches("nats://");
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    let info = lines.next_line().await.unwrap().unwrap();
    assert!(info.starts_with("INFO"), "{info}");
    let mut out =
        b"CONNECT {\"verbose\":false,\"pedantic\":false,\"headers\":true,\"protocol\":1}\r\n"
            .to_vec();
    out.extend_from_slice(b"HPUB ");
    out.extend_from_slice(&subject);
    out.extend_from_slice(
        format!(
            " {} {}\r\n",
            header_block.len(),
            header_block.len() + payload.len()
        )
        .as_bytes(),
    );
    out.extend_from_slice(header_block);
    out.extend_from_slice(payload);
    out.extend_from_slice(b"\r\nPING\r\n");
    write.write_all(&out).await.unwrap();
    loop {
        let line = lines.next_line().await.unwrap().unwrap();
        assert!(!line.starts_with("-ERR"), "{line}");
        if line == "PONG" {
            return;
        }
    }
}

/// The sum of the samples of `series` in a metrics exposition: its name, and labels
/// (`name{a="x",b="y"}`) each sample counted must have among its own; 0 when none.
pub fn sum_of(text: &str, series: &str) -> f64 {
    sample_of(text, series).unwrap_or(0.0)
}

/// As [`sum_of`], `None` when no sample of `series` is exposed: the crate's own
/// reader of its exposition.
pub use jetrelay::ops::metrics::sum_of as sample_of;
