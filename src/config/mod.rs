//! The configuration tree, its layering (TOML file, then `JETRELAY_` environment
//! variables) and its validation.
//!
//! Nothing else in the crate parses configuration. Every problem is reported with the
//! dotted key it concerns (`delivery.max_in_flight: must be at least 1`), and
//! validation collects all problems rather than stopping at the first.
//! Secrets are never read here: only their file paths are, so `Debug` cannot leak them.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Env, Format, Toml};
use serde::{Deserialize, Serialize};

use crate::policy::StatusSet;
use crate::subject;

/// The whole configuration, as the user wrote it (after defaults).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Connection to NATS.
    pub nats: NatsConfig,
    /// Where messages come from.
    pub source: SourceConfig,
    /// Who owns the stream and the consumer.
    pub topology: TopologyConfig,
    /// The template of the durable or member consumer.
    pub consumer: ConsumerConfig,
    /// Concurrency, ordering, retries and shutdown.
    pub delivery: DeliveryConfig,
    /// The local app.
    pub http: HttpConfig,
    /// Dead-letter subject.
    pub dlq: DlqConfig,
    /// The admin endpoints.
    pub admin: AdminConfig,
    /// Logging.
    pub log: LogConfig,
}

/// `[nats]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
#[allow(missing_docs)]
pub struct NatsConfig {
    /// A list, or one string of comma-separated URLs (handy in environment variables).
    #[serde(deserialize_with = "one_or_many")]
    pub servers: Vec<String>,
    pub name: String,
    pub creds_file: String,
    pub nkey_seed_file: String,
    pub token_file: String,
    pub user: String,
    pub password_file: String,
    pub tls_ca_file: String,
    pub tls_cert_file: String,
    pub tls_key_file: String,
    pub tls_required: bool,
    pub connect_timeout_ms: u64,
    pub request_timeout_ms: u64,
    pub reconnect_delay_ms: u64,
    pub reconnect_delay_max_ms: u64,
    pub max_reconnects: u64,
}

impl Default for NatsConfig {
    fn default() -> Self {
        Self {
            servers: vec!["nats://127.0.0.1:4222".into()],
            name: "jetrelay".into(),
            creds_file: String::new(),
            nkey_seed_file: String::new(),
            token_file: String::new(),
            user: String::new(),
            password_file: String::new(),
            tls_ca_file: String::new(),
            tls_cert_file: String::new(),
            tls_key_file: String::new(),
            tls_required: false,
            connect_timeout_ms: 5000,
            request_timeout_ms: 5000,
            reconnect_delay_ms: 250,
            reconnect_delay_max_ms: 8000,
            max_reconnects: 0,
        }
    }
}

/// Server URLs from one comma-separated string (`nats://a:4222, nats://b:4222`).
pub fn split_servers(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// A list of strings, or one string split at commas.
fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => split_servers(&s),
        OneOrMany::Many(v) => v,
    })
}

/// `source.kind`
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SourceKind {
    /// A plain durable pull consumer.
    Durable,
    /// A member of a static partitioned consumer group.
    Static,
    /// A member of an elastic partitioned consumer group.
    Elastic,
}

impl SourceKind {
    /// Whether messages carry a partition token.
    pub fn is_group(self) -> bool {
        !matches!(self, SourceKind::Durable)
    }
}

/// `[source]`
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
#[allow(missing_docs)]
pub struct SourceConfig {
    pub stream: String,
    pub kind: Option<SourceKind>,
    pub group: String,
    pub member: String,
    pub durable: String,
    pub filter_subjects: Vec<String>,
}

/// `topology.stream`
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum StreamMode {
    /// The publisher owns the stream; it is only checked.
    #[default]
    External,
    /// This daemon owns the stream: it creates it and adds missing subjects.
    Managed,
}

/// `topology.consumer`
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ConsumerMode {
    /// Create the consumer when missing, then validate it.
    #[default]
    Ensure,
    /// Only read, validate and bind.
    Bind,
}

/// `topology.on_missing`
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum OnMissing {
    /// Not ready; wait with backoff until the topology appears.
    #[default]
    Retry,
    /// Stop with an error.
    Fail,
}

/// `[topology]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
#[allow(missing_docs)]
pub struct TopologyConfig {
    pub stream: StreamMode,
    pub consumer: ConsumerMode,
    pub on_missing: OnMissing,
    pub retry_initial_ms: u64,
    pub retry_max_ms: u64,
    pub managed_stream: Option<ManagedStreamConfig>,
}

impl Default for TopologyConfig {
    fn default() -> Self {
        Self {
            stream: StreamMode::External,
            consumer: ConsumerMode::Ensure,
            on_missing: OnMissing::Retry,
            retry_initial_ms: 500,
            retry_max_ms: 30_000,
            managed_stream: None,
        }
    }
}

/// `[topology.managed_stream]`: the complete config of a stream this daemon owns.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
#[allow(missing_docs)]
pub struct ManagedStreamConfig {
    pub subjects: Vec<String>,
    pub storage: Storage,
    pub replicas: u32,
    pub retention: Retention,
    pub discard: Discard,
    /// 0 = unlimited.
    pub max_age_ms: u64,
    /// -1 = unlimited.
    pub max_msgs: i64,
    /// -1 = unlimited.
    pub max_bytes: i64,
    pub duplicate_window_ms: u64,
}

impl Default for ManagedStreamConfig {
    fn default() -> Self {
        Self {
            subjects: Vec::new(),
            storage: Storage::File,
            replicas: 1,
            retention: Retention::Limits,
            discard: Discard::Old,
            max_age_ms: 0,
            max_msgs: -1,
            max_bytes: -1,
            duplicate_window_ms: 120_000,
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum Storage {
    File,
    Memory,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum Retention {
    Limits,
    Interest,
    Workqueue,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum Discard {
    Old,
    New,
}

/// `consumer.deliver_policy`
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum DeliverPolicy {
    #[default]
    All,
    New,
    Last,
    LastPerSubject,
}

/// `[consumer]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
#[allow(missing_docs)]
pub struct ConsumerConfig {
    pub ack_wait_ms: u64,
    /// -1 = unlimited.
    pub max_deliver: i64,
    pub deliver_policy: DeliverPolicy,
    pub backoff_ms: Vec<u64>,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        Self {
            ack_wait_ms: 30_000,
            max_deliver: 10,
            deliver_policy: DeliverPolicy::All,
            backoff_ms: Vec::new(),
        }
    }
}

/// `delivery.ordering`
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Ordering {
    /// One lane per partition number.
    Partition,
    /// One lane per subject (partition token stripped).
    Subject,
    /// No order: full concurrency.
    None,
}

/// `delivery.ack`
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum AckMode {
    /// Publish the ack and move on.
    #[default]
    Fire,
    /// Wait for the server's confirmation.
    Confirmed,
}

/// `[delivery]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
#[allow(missing_docs)]
pub struct DeliveryConfig {
    pub max_in_flight: u32,
    pub max_buffered: u32,
    pub max_batch: u32,
    /// `None` = the default for the source kind (see [`Config::ordering`]).
    pub ordering: Option<Ordering>,
    pub retry_initial_ms: u64,
    pub retry_max_ms: u64,
    pub retry_after_max_ms: u64,
    pub ack: AckMode,
    pub shutdown_grace_ms: u64,
    /// Payload bytes held at most; pulls ask for no more (`max_bytes`).
    pub max_buffered_bytes: u64,
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        Self {
            max_in_flight: 32,
            max_buffered: 256,
            max_batch: 64,
            ordering: None,
            retry_initial_ms: 1000,
            retry_max_ms: 60_000,
            retry_after_max_ms: 300_000,
            ack: AckMode::Fire,
            shutdown_grace_ms: 20_000,
            max_buffered_bytes: 64 * 1024 * 1024,
        }
    }
}

/// `[http]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
#[allow(missing_docs)]
pub struct HttpConfig {
    pub url: String,
    pub timeout_ms: u64,
    pub headers: BTreeMap<String, String>,
    pub bearer_token_file: String,
    pub health_url: String,
    pub health_interval_ms: u64,
    pub health_timeout_ms: u64,
    /// Consecutive failed probes that make the app unhealthy.
    pub health_threshold: u32,
    /// Group sources: how long the app may be unhealthy before this instance steps
    /// down so that a healthy instance of the member takes over.
    pub unhealthy_handover_ms: u64,
    pub retry_statuses: Vec<String>,
    pub term_statuses: Vec<String>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            url: String::new(),
            timeout_ms: 30_000,
            headers: BTreeMap::new(),
            bearer_token_file: String::new(),
            health_url: String::new(),
            health_interval_ms: 2000,
            health_timeout_ms: 1000,
            health_threshold: 3,
            unhealthy_handover_ms: 30_000,
            retry_statuses: ["408", "409", "425", "429", "5xx", "404"]
                .map(String::from)
                .to_vec(),
            term_statuses: vec!["4xx".into()],
        }
    }
}

/// `[dlq]`
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
#[allow(missing_docs)]
pub struct DlqConfig {
    pub subject: String,
}

/// `[admin]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
#[allow(missing_docs)]
pub struct AdminConfig {
    pub listen: String,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            listen: "0.0.0.0:9090".into(),
        }
    }
}

/// `log.format`
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum LogFormat {
    #[default]
    Json,
    Text,
}

/// `[log]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
#[allow(missing_docs)]
pub struct LogConfig {
    pub format: LogFormat,
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            format: LogFormat::Json,
            level: "info".into(),
        }
    }
}

/// One problem with one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The dotted key, e.g. `delivery.max_in_flight`.
    pub key: String,
    /// What is wrong with it.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

/// Why a configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file named on the command line does not exist.
    #[error("config file {0} does not exist")]
    MissingFile(PathBuf),
    /// The file or environment could not be read into the config tree, or values break
    /// the rules; every problem is listed.
    #[error("invalid configuration:\n{}", list(.0))]
    Invalid(Vec<Problem>),
}

impl ConfigError {
    /// The problems, for tests and callers that want the keys.
    pub fn problems(&self) -> &[Problem] {
        match self {
            ConfigError::MissingFile(_) => &[],
            ConfigError::Invalid(p) => p,
        }
    }
}

fn list(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| format!("  {p}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The environment variable prefix.
pub const ENV_PREFIX: &str = "JETRELAY_";

/// An hour in milliseconds: the bound of timeouts and delays that are about one
/// connection or request.
const HOUR: u64 = 3_600_000;
/// A day in milliseconds: the bound of ack waits and retry delays (a NAK delay is
/// sent in nanoseconds; an unbounded one overflowed into an immediate redelivery).
const DAY: u64 = 86_400_000;

impl Config {
    /// Loads the layered configuration: the TOML file (when given), then the
    /// `JETRELAY_` environment, then validates it.
    ///
    /// # Errors
    /// [`ConfigError`] naming every bad key.
    pub fn load(file: Option<&Path>) -> Result<Config, ConfigError> {
        Self::from_figment(layered(file)?)
    }

    /// Extracts and validates a config from any figment (tests feed strings).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming every bad key.
    pub fn from_figment(figment: Figment) -> Result<Config, ConfigError> {
        let config: Config = figment.extract().map_err(invalid)?;
        let problems = config.problems();
        if problems.is_empty() {
            Ok(config)
        } else {
            Err(ConfigError::Invalid(problems))
        }
    }

    /// The source kind; validation guarantees it is set.
    pub fn kind(&self) -> SourceKind {
        self.source.kind.unwrap_or(SourceKind::Durable)
    }

    /// The effective ordering: configured, else `partition` for groups and `none`
    /// for durable consumers.
    pub fn ordering(&self) -> Ordering {
        self.delivery.ordering.unwrap_or(if self.kind().is_group() {
            Ordering::Partition
        } else {
            Ordering::None
        })
    }

    /// The retry status set; validation guarantees it parses.
    pub fn retry_statuses(&self) -> StatusSet {
        StatusSet::parse(&self.http.retry_statuses).unwrap_or_default()
    }

    /// The term status set; validation guarantees it parses.
    pub fn term_statuses(&self) -> StatusSet {
        StatusSet::parse(&self.http.term_statuses).unwrap_or_default()
    }

    /// Every rule broken by this config, in key order of the file.
    pub fn problems(&self) -> Vec<Problem> {
        let mut p = Problems::default();
        nats_problems(&self.nats, &mut p);
        self.check_source(&mut p);
        self.check_topology(&mut p);
        self.check_consumer(&mut p);
        self.check_delivery(&mut p);
        self.check_http(&mut p);
        if !self.dlq.subject.is_empty()
            && let Err(e) = subject::validate_publish_subject(&self.dlq.subject)
        {
            p.add("dlq.subject", e);
        }
        if self.admin.listen.parse::<SocketAddr>().is_err() {
            p.add(
                "admin.listen",
                "must be an address and port, like 0.0.0.0:9090",
            );
        }
        if !crate::ops::telemetry::is_valid_filter(&self.log.level) {
            p.add(
                "log.level",
                "must be a level (error, warn, info, debug, trace) or a filter directive",
            );
        }
        p.0
    }

    fn check_source(&self, p: &mut Problems) {
        let s = &self.source;
        if s.stream.is_empty() {
            p.add("source.stream", "is required");
        } else if let Err(e) = subject::validate_name(&s.stream) {
            p.add("source.stream", e);
        }
        let Some(kind) = s.kind else {
            p.add(
                "source.kind",
                "is required: \"durable\", \"static\" or \"elastic\"",
            );
            return;
        };
        match kind {
            SourceKind::Durable => {
                if s.durable.is_empty() {
                    p.add(
                        "source.durable",
                        "is required when source.kind = \"durable\"",
                    );
                } else if let Err(e) = subject::validate_name(&s.durable) {
                    p.add("source.durable", e);
                }
                for key in [("source.group", &s.group), ("source.member", &s.member)] {
                    if !key.1.is_empty() {
                        p.add(key.0, "is only for group sources (static, elastic)");
                    }
                }
                for f in &s.filter_subjects {
                    if let Err(e) = subject::validate_filter(f) {
                        p.add("source.filter_subjects", format!("{f:?}: {e}"));
                    }
                }
                if let Some(e) = subject::first_overlap(&s.filter_subjects) {
                    p.add("source.filter_subjects", e);
                }
            }
            SourceKind::Static | SourceKind::Elastic => {
                for (key, v) in [("source.group", &s.group), ("source.member", &s.member)] {
                    if v.is_empty() {
                        p.add(key, "is required for group sources");
                    } else if let Err(e) = subject::validate_name(v) {
                        p.add(key, e);
                    }
                }
                if !s.durable.is_empty() {
                    p.add("source.durable", "is only for source.kind = \"durable\"");
                }
                if !s.filter_subjects.is_empty() {
                    p.add(
                        "source.filter_subjects",
                        "is only for source.kind = \"durable\": a group's filters are in its config",
                    );
                }
            }
        }
    }

    fn check_topology(&self, p: &mut Problems) {
        let t = &self.topology;
        if self.kind().is_group() {
            // The group owns its topology: the static stream is the publisher's, the
            // elastic one is made by `jetrelay group elastic create`, and member
            // consumers are created and replaced by the group protocol.
            if t.stream == StreamMode::Managed {
                p.add(
                    "topology.stream",
                    "must be \"external\" for a group member: the group's stream is created with the group",
                );
            }
            if t.consumer == ConsumerMode::Bind {
                p.add(
                    "topology.consumer",
                    "must be \"ensure\" for a group member: the group protocol owns member consumers",
                );
            }
        }
        p.range("topology.retry_initial_ms", t.retry_initial_ms, 1, HOUR);
        p.range("topology.retry_max_ms", t.retry_max_ms, 1, HOUR);
        if t.retry_max_ms < t.retry_initial_ms {
            p.add(
                "topology.retry_max_ms",
                "must be at least topology.retry_initial_ms",
            );
        }
        match (t.stream, &t.managed_stream) {
            (StreamMode::Managed, None) => p.add(
                "topology.managed_stream",
                "is required when topology.stream = \"managed\"",
            ),
            (StreamMode::External, Some(_)) => p.add(
                "topology.managed_stream",
                "is only for topology.stream = \"managed\"",
            ),
            (StreamMode::Managed, Some(m)) => {
                if m.subjects.is_empty() {
                    p.add(
                        "topology.managed_stream.subjects",
                        "must name at least one subject",
                    );
                }
                for s in &m.subjects {
                    if let Err(e) = subject::validate_filter(s) {
                        p.add("topology.managed_stream.subjects", format!("{s:?}: {e}"));
                    }
                }
                if !(1..=5).contains(&m.replicas) {
                    p.add(
                        "topology.managed_stream.replicas",
                        "must be between 1 and 5",
                    );
                }
                if m.max_msgs < -1 || m.max_msgs == 0 {
                    p.add(
                        "topology.managed_stream.max_msgs",
                        "must be -1 (unlimited) or positive",
                    );
                }
                if m.max_bytes < -1 || m.max_bytes == 0 {
                    p.add(
                        "topology.managed_stream.max_bytes",
                        "must be -1 (unlimited) or positive",
                    );
                }
            }
            (StreamMode::External, None) => {}
        }
    }

    fn check_consumer(&self, p: &mut Problems) {
        let c = &self.consumer;
        p.range("consumer.ack_wait_ms", c.ack_wait_ms, 500, DAY);
        if c.max_deliver == 0 || c.max_deliver < -1 || c.max_deliver > 1_000_000 {
            p.add(
                "consumer.max_deliver",
                "must be -1 (unlimited) or between 1 and 1000000",
            );
        }
        if !c.backoff_ms.is_empty() {
            if c.backoff_ms.iter().any(|d| !(1..=DAY).contains(d)) {
                p.add(
                    "consumer.backoff_ms",
                    format!("every delay must be between 1 and {DAY}"),
                );
            }
            if c.backoff_ms.len() > 100 {
                p.add("consumer.backoff_ms", "at most 100 delays");
            }
            let len = i64::try_from(c.backoff_ms.len()).unwrap_or(i64::MAX);
            if c.max_deliver != -1 && c.max_deliver <= len {
                p.add(
                    "consumer.backoff_ms",
                    "needs consumer.max_deliver greater than its length (or -1)",
                );
            }
        }
    }

    fn check_delivery(&self, p: &mut Problems) {
        let d = &self.delivery;
        p.range(
            "delivery.max_in_flight",
            u64::from(d.max_in_flight),
            1,
            10_000,
        );
        p.range(
            "delivery.max_buffered",
            u64::from(d.max_buffered),
            1,
            100_000,
        );
        p.range("delivery.max_batch", u64::from(d.max_batch), 1, 10_000);
        if d.max_buffered < d.max_in_flight {
            p.add(
                "delivery.max_buffered",
                "must be at least delivery.max_in_flight",
            );
        }
        p.range("delivery.retry_initial_ms", d.retry_initial_ms, 1, DAY);
        p.range("delivery.retry_max_ms", d.retry_max_ms, 1, DAY);
        p.range("delivery.retry_after_max_ms", d.retry_after_max_ms, 1, DAY);
        if d.retry_after_max_ms < d.retry_initial_ms {
            p.add(
                "delivery.retry_after_max_ms",
                "must be at least delivery.retry_initial_ms (no retry comes sooner than that)",
            );
        }
        p.range("delivery.shutdown_grace_ms", d.shutdown_grace_ms, 0, HOUR);
        p.range(
            "delivery.max_buffered_bytes",
            d.max_buffered_bytes,
            1024,
            64 * 1024 * 1024 * 1024,
        );
        if d.retry_max_ms < d.retry_initial_ms {
            p.add(
                "delivery.retry_max_ms",
                "must be at least delivery.retry_initial_ms",
            );
        }
        if d.ordering == Some(Ordering::Partition) && self.source.kind == Some(SourceKind::Durable)
        {
            p.add(
                "delivery.ordering",
                "\"partition\" needs a group source; use \"subject\" or \"none\" with a durable",
            );
        }
    }

    fn check_http(&self, p: &mut Problems) {
        let h = &self.http;
        if h.url.is_empty() {
            p.add("http.url", "is required");
        } else if let Err(e) = check_http_url(&h.url) {
            p.add("http.url", e);
        }
        if !h.health_url.is_empty()
            && let Err(e) = check_http_url(&h.health_url)
        {
            p.add("http.health_url", e);
        }
        p.range("http.timeout_ms", h.timeout_ms, 1, HOUR);
        p.range("http.health_interval_ms", h.health_interval_ms, 10, HOUR);
        p.range("http.health_timeout_ms", h.health_timeout_ms, 1, HOUR);
        p.range(
            "http.health_threshold",
            u64::from(h.health_threshold),
            1,
            1000,
        );
        p.range(
            "http.unhealthy_handover_ms",
            h.unhealthy_handover_ms,
            1,
            DAY,
        );
        for (name, value) in &h.headers {
            if !crate::http::headers::is_valid_name(name) {
                p.add(
                    format!("http.headers.{name}"),
                    "is not a valid HTTP header name",
                );
            } else if !crate::http::headers::is_valid_value(value) {
                p.add(
                    format!("http.headers.{name}"),
                    "is not a valid HTTP header value",
                );
            }
        }
        let retry = StatusSet::parse(&h.retry_statuses);
        let term = StatusSet::parse(&h.term_statuses);
        for (key, set) in [
            ("http.retry_statuses", &retry),
            ("http.term_statuses", &term),
        ] {
            match set {
                Err(e) => p.add(key, e.to_string()),
                Ok(s) if s.contains(200) => p.add(key, "cannot contain 2xx statuses: 2xx is ack"),
                Ok(_) => {}
            }
        }
    }
}

fn check_http_url(url: &str) -> Result<(), String> {
    let parsed = url::Url::parse(url).map_err(|e| format!("{url:?} is not a URL: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
        return Err(format!(
            "{url:?} must be an http:// or https:// URL with a host"
        ));
    }
    Ok(())
}

/// The rules of `[nats]`.
fn nats_problems(n: &NatsConfig, p: &mut Problems) {
    if n.servers.is_empty() {
        p.add("nats.servers", "must name at least one server");
    }
    for s in &n.servers {
        let ok = ["nats://", "tls://", "ws://", "wss://"]
            .iter()
            .any(|scheme| s.starts_with(scheme) && s.len() > scheme.len());
        if !ok {
            p.add(
                "nats.servers",
                format!("{s:?} must be a URL like nats://host:4222"),
            );
        }
    }
    let auth = [
        !n.creds_file.is_empty(),
        !n.nkey_seed_file.is_empty(),
        !n.token_file.is_empty(),
        !n.user.is_empty(),
    ];
    if auth.iter().filter(|x| **x).count() > 1 {
        p.add(
            "nats",
            "set only one of creds_file, nkey_seed_file, token_file, user",
        );
    }
    if n.user.is_empty() != n.password_file.is_empty() {
        p.add("nats.password_file", "user and password_file go together");
    }
    if n.tls_cert_file.is_empty() != n.tls_key_file.is_empty() {
        p.add(
            "nats.tls_key_file",
            "tls_cert_file and tls_key_file go together",
        );
    }
    p.range("nats.connect_timeout_ms", n.connect_timeout_ms, 1, HOUR);
    p.range("nats.request_timeout_ms", n.request_timeout_ms, 1, HOUR);
    p.range("nats.reconnect_delay_ms", n.reconnect_delay_ms, 1, HOUR);
    p.range(
        "nats.reconnect_delay_max_ms",
        n.reconnect_delay_max_ms,
        1,
        HOUR,
    );
    p.range("nats.max_reconnects", n.max_reconnects, 0, 1_000_000_000);
    if n.reconnect_delay_max_ms < n.reconnect_delay_ms {
        p.add(
            "nats.reconnect_delay_max_ms",
            "must be at least nats.reconnect_delay_ms",
        );
    }
}

/// The file (when given), then the `JETRELAY_` environment.
fn layered(file: Option<&Path>) -> Result<Figment, ConfigError> {
    let mut figment = Figment::new();
    if let Some(path) = file {
        if !path.is_file() {
            return Err(ConfigError::MissingFile(path.to_path_buf()));
        }
        figment = figment.merge(Toml::file_exact(path));
    }
    // JETRELAY_CONFIG names the file; it is not a key of the tree.
    let env = Env::prefixed(ENV_PREFIX)
        .split("__")
        .filter(|k| !k.as_str().eq_ignore_ascii_case("config"));
    Ok(figment.merge(env))
}

fn invalid(e: figment::Error) -> ConfigError {
    ConfigError::Invalid(
        e.into_iter()
            .map(|e| Problem {
                key: if e.path.is_empty() {
                    "config".into()
                } else {
                    e.path.join(".")
                },
                message: e.kind.to_string(),
            })
            .collect(),
    )
}

impl NatsConfig {
    /// Only the `[nats]` table of the layered configuration (the file, then
    /// `JETRELAY_NATS__*`), validated: how `jetrelay group` connects like the daemon.
    /// The other tables are not read.
    ///
    /// # Errors
    /// [`ConfigError`] naming every bad `nats.*` key.
    pub fn load(file: Option<&Path>) -> Result<NatsConfig, ConfigError> {
        /// The tree with every table but `[nats]` ignored.
        #[derive(Deserialize)]
        struct OnlyNats {
            #[serde(default)]
            nats: NatsConfig,
        }
        let nats = layered(file)?.extract::<OnlyNats>().map_err(invalid)?.nats;
        let mut p = Problems::default();
        nats_problems(&nats, &mut p);
        if p.0.is_empty() {
            Ok(nats)
        } else {
            Err(ConfigError::Invalid(p.0))
        }
    }
}

#[derive(Default)]
struct Problems(Vec<Problem>);

impl Problems {
    fn add(&mut self, key: impl Into<String>, message: impl Into<String>) {
        self.0.push(Problem {
            key: key.into(),
            message: message.into(),
        });
    }

    /// Between `min` and `max`, both included.
    fn range(&mut self, key: &str, value: u64, min: u64, max: u64) {
        if value < min {
            self.add(key, format!("must be at least {min}"));
        } else if value > max {
            self.add(key, format!("must be at most {max}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(toml: &str) -> Result<Config, ConfigError> {
        Config::from_figment(Figment::from(Toml::string(toml)))
    }

    const MINIMAL: &str = r#"
        [source]
        stream = "ORDERS"
        kind = "durable"
        durable = "worker"
        [http]
        url = "http://127.0.0.1:8080/messages"
    "#;

    fn keys(err: ConfigError) -> Vec<String> {
        err.problems().iter().map(|p| p.key.clone()).collect()
    }

    #[test]
    fn minimal_config_gets_the_documented_defaults() {
        let c = parse(MINIMAL).unwrap();
        assert_eq!(c.delivery.max_in_flight, 32);
        assert_eq!(c.delivery.max_buffered, 256);
        assert_eq!(c.consumer.ack_wait_ms, 30_000);
        assert_eq!(c.ordering(), Ordering::None);
        assert_eq!(c.nats.servers, vec!["nats://127.0.0.1:4222"]);
        assert_eq!(c.admin.listen, "0.0.0.0:9090");
    }

    #[test]
    fn group_sources_default_to_partition_ordering() {
        let c = parse(
            r#"
            [source]
            stream = "S"
            kind = "static"
            group = "cg"
            member = "m1"
            [http]
            url = "http://127.0.0.1:1/x"
        "#,
        )
        .unwrap();
        assert_eq!(c.ordering(), Ordering::Partition);
    }

    #[test]
    fn empty_config_names_every_required_key() {
        let k = keys(parse("").unwrap_err());
        assert!(k.contains(&"source.stream".to_string()), "{k:?}");
        assert!(k.contains(&"source.kind".to_string()), "{k:?}");
        assert!(k.contains(&"http.url".to_string()), "{k:?}");
    }

    #[test]
    fn unknown_keys_and_sections_are_rejected_with_their_path() {
        let err = parse(&format!("{MINIMAL}\n[delivery]\nmax_inflight = 3\n")).unwrap_err();
        assert_eq!(keys(err), vec!["delivery.max_inflight"]);
        let err = parse(&format!("{MINIMAL}\n[extra]\nx = 1\n")).unwrap_err();
        assert!(err.to_string().contains("extra"), "{err}");
    }

    #[test]
    fn wrong_types_name_the_key() {
        let err = parse(&format!(
            "{MINIMAL}\n[delivery]\nmax_in_flight = \"many\"\n"
        ))
        .unwrap_err();
        assert_eq!(keys(err), vec!["delivery.max_in_flight"]);
    }

    #[test]
    fn zero_in_flight_reads_as_the_documented_message() {
        let err = parse(&format!("{MINIMAL}\n[delivery]\nmax_in_flight = 0\n")).unwrap_err();
        assert!(
            err.to_string()
                .contains("delivery.max_in_flight: must be at least 1"),
            "{err}"
        );
    }

    #[test]
    fn rule_table() {
        // (extra toml, the key that must be reported)
        let cases: &[(&str, &str)] = &[
            (
                "[delivery]\nmax_buffered = 4\nmax_in_flight = 8",
                "delivery.max_buffered",
            ),
            ("[delivery]\nmax_batch = 0", "delivery.max_batch"),
            ("[delivery]\nmax_batch = 10001", "delivery.max_batch"),
            (
                "[delivery]\nmax_buffered = 4000000000",
                "delivery.max_buffered",
            ),
            (
                "[delivery]\nmax_in_flight = 20000\nmax_buffered = 30000",
                "delivery.max_in_flight",
            ),
            (
                "[delivery]\nretry_after_max_ms = 0",
                "delivery.retry_after_max_ms",
            ),
            (
                "[delivery]\nretry_after_max_ms = 500",
                "delivery.retry_after_max_ms",
            ),
            (
                "[delivery]\nretry_after_max_ms = 9223372036854775807",
                "delivery.retry_after_max_ms",
            ),
            (
                "[delivery]\nretry_max_ms = 86400001",
                "delivery.retry_max_ms",
            ),
            (
                "[delivery]\nshutdown_grace_ms = 3600001",
                "delivery.shutdown_grace_ms",
            ),
            (
                "[delivery]\nmax_buffered_bytes = 100",
                "delivery.max_buffered_bytes",
            ),
            (
                "[consumer]\nack_wait_ms = 9223372036854775807",
                "consumer.ack_wait_ms",
            ),
            ("[consumer]\nmax_deliver = 1000001", "consumer.max_deliver"),
            (
                "[consumer]\nbackoff_ms = [100, 86400001]\nmax_deliver = 5",
                "consumer.backoff_ms",
            ),
            ("[http]\ntimeout_ms = 3600001", "http.timeout_ms"),
            ("[http]\nhealth_threshold = 1001", "http.health_threshold"),
            (
                "[nats]\nrequest_timeout_ms = 3600001",
                "nats.request_timeout_ms",
            ),
            (
                "[topology]\nretry_max_ms = 3600001",
                "topology.retry_max_ms",
            ),
            (
                "[delivery]\nretry_max_ms = 10\nretry_initial_ms = 20",
                "delivery.retry_max_ms",
            ),
            ("[delivery]\nordering = \"partition\"", "delivery.ordering"),
            ("[consumer]\nmax_deliver = 0", "consumer.max_deliver"),
            ("[consumer]\nack_wait_ms = 10", "consumer.ack_wait_ms"),
            (
                "[consumer]\nbackoff_ms = [100, 200]\nmax_deliver = 2",
                "consumer.backoff_ms",
            ),
            ("[http]\nretry_statuses = [\"5xy\"]", "http.retry_statuses"),
            ("[http]\nterm_statuses = [\"2xx\"]", "http.term_statuses"),
            (
                "[http]\nheaders = { \"bad name\" = \"v\" }",
                "http.headers.bad name",
            ),
            ("[http]\nhealth_url = \"ftp://x\"", "http.health_url"),
            ("[http]\nhealth_threshold = 0", "http.health_threshold"),
            ("[dlq]\nsubject = \"dlq.*\"", "dlq.subject"),
            ("[admin]\nlisten = \"nowhere\"", "admin.listen"),
            ("[log]\nlevel = \"loud,,=x\"", "log.level"),
            ("[nats]\nservers = []", "nats.servers"),
            ("[nats]\nservers = [\"localhost:4222\"]", "nats.servers"),
            ("[nats]\nuser = \"u\"", "nats.password_file"),
            ("[nats]\ntoken_file = \"t\"\ncreds_file = \"c\"", "nats"),
            ("[nats]\ntls_cert_file = \"c\"", "nats.tls_key_file"),
            (
                "[topology]\nstream = \"managed\"",
                "topology.managed_stream",
            ),
            (
                "[topology.managed_stream]\nsubjects = [\"a\"]",
                "topology.managed_stream",
            ),
            (
                "[topology]\nstream = \"managed\"\n[topology.managed_stream]\nsubjects = []",
                "topology.managed_stream.subjects",
            ),
            (
                "[topology]\nstream = \"managed\"\n[topology.managed_stream]\nsubjects = [\"a\"]\nreplicas = 7",
                "topology.managed_stream.replicas",
            ),
            (
                "[source]\nfilter_subjects = [\"a..b\"]",
                "source.filter_subjects",
            ),
            (
                "[source]\nfilter_subjects = [\"a.>\", \"a.b\"]",
                "source.filter_subjects",
            ),
            ("[source]\ngroup = \"g\"", "source.group"),
        ];
        for (extra, key) in cases {
            // Merge the case over the minimal config so only the case's key is wrong.
            let figment = Figment::from(Toml::string(MINIMAL)).merge(Toml::string(extra));
            let err = Config::from_figment(figment).expect_err(extra);
            let k = keys(err);
            assert!(
                k.iter().any(|k| k == key),
                "{extra:?}: expected {key}, got {k:?}"
            );
        }
    }

    #[test]
    fn group_kinds_require_group_and_member_and_refuse_durable_keys() {
        let err = parse(
            r#"
            [source]
            stream = "S"
            kind = "elastic"
            durable = "d"
            filter_subjects = ["a"]
            [http]
            url = "http://127.0.0.1:1/x"
        "#,
        )
        .unwrap_err();
        let k = keys(err);
        for key in [
            "source.group",
            "source.member",
            "source.durable",
            "source.filter_subjects",
        ] {
            assert!(k.contains(&key.to_string()), "{key} in {k:?}");
        }
    }

    #[test]
    fn group_members_leave_the_stream_and_consumer_to_the_group() {
        let member = r#"
            [source]
            stream = "S"
            kind = "static"
            group = "g"
            member = "m"
            [http]
            url = "http://127.0.0.1:1/x"
        "#;
        assert!(parse(member).is_ok());
        let table = [
            (
                "[topology]\nstream = \"managed\"\n[topology.managed_stream]\nsubjects = [\"a\"]",
                "topology.stream",
            ),
            ("[topology]\nconsumer = \"bind\"", "topology.consumer"),
        ];
        for (extra, key) in table {
            for kind in ["static", "elastic"] {
                let figment = Figment::from(Toml::string(member))
                    .merge(Toml::string(&format!("[source]\nkind = \"{kind}\"")))
                    .merge(Toml::string(extra));
                let k = keys(Config::from_figment(figment).expect_err(extra));
                assert_eq!(k, vec![key.to_string()], "{kind}: {extra}");
            }
            // The same keys are fine for a durable.
            let figment = Figment::from(Toml::string(MINIMAL)).merge(Toml::string(extra));
            assert!(Config::from_figment(figment).is_ok(), "{extra}");
        }
    }

    #[test]
    fn servers_take_a_list_or_one_comma_separated_string() {
        let table = [
            ("servers = [\"nats://a:4222\"]", vec!["nats://a:4222"]),
            (
                "servers = \"nats://a:4222, nats://b:4222\"",
                vec!["nats://a:4222", "nats://b:4222"],
            ),
            ("servers = \"nats://a:4222\"", vec!["nats://a:4222"]),
        ];
        for (line, want) in table {
            let c = parse(&format!("{MINIMAL}\n[nats]\n{line}\n")).unwrap();
            assert_eq!(c.nats.servers, want, "{line}");
        }
        let err = parse(&format!("{MINIMAL}\n[nats]\nservers = \"\"\n")).unwrap_err();
        assert_eq!(keys(err), vec!["nats.servers"]);
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment::Jail fixes the closure's error type.
    fn the_nats_table_loads_alone_with_the_environment_over_it() {
        figment::Jail::expect_with(|jail| {
            // The rest of the file is not read (this [source] would be invalid).
            jail.create_file(
                "c.toml",
                "[nats]\nservers = [\"nats://a:4222\"]\ncreds_file = \"/x.creds\"\n[source]\nkind = \"static\"\n",
            )?;
            let n = NatsConfig::load(Some(Path::new("c.toml"))).map_err(|e| e.to_string())?;
            assert_eq!(n.servers, vec!["nats://a:4222"]);
            assert_eq!(n.creds_file, "/x.creds");
            jail.set_env("JETRELAY_NATS__SERVERS", "nats://b:4222,nats://c:4222");
            let n = NatsConfig::load(Some(Path::new("c.toml"))).map_err(|e| e.to_string())?;
            assert_eq!(n.servers, vec!["nats://b:4222", "nats://c:4222"]);
            assert_eq!(
                NatsConfig::load(None)
                    .map_err(|e| e.to_string())?
                    .servers
                    .len(),
                2
            );
            jail.set_env("JETRELAY_NATS__USER", "u");
            let err = NatsConfig::load(Some(Path::new("c.toml"))).unwrap_err();
            assert_eq!(keys(err), vec!["nats", "nats.password_file"]);
            jail.create_file("d.toml", "[nats]\nnope = 1\n")?;
            let err = NatsConfig::load(Some(Path::new("d.toml"))).unwrap_err();
            assert_eq!(keys(err), vec!["nats.nope"]);
            assert!(matches!(
                NatsConfig::load(Some(Path::new("missing.toml"))),
                Err(ConfigError::MissingFile(_))
            ));
            Ok(())
        });
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment::Jail fixes the closure's error type.
    fn environment_overrides_the_file_with_double_underscores() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("c.toml", MINIMAL)?;
            jail.set_env("JETRELAY_DELIVERY__MAX_IN_FLIGHT", "7");
            jail.set_env("JETRELAY_HTTP__URL", "http://127.0.0.1:9/app");
            jail.set_env("JETRELAY_NATS__SERVERS", "[\"nats://10.0.0.1:4222\"]");
            jail.set_env("JETRELAY_CONFIG", "c.toml");
            let c = Config::load(Some(Path::new("c.toml"))).map_err(|e| e.to_string())?;
            assert_eq!(c.delivery.max_in_flight, 7);
            assert_eq!(c.http.url, "http://127.0.0.1:9/app");
            assert_eq!(c.nats.servers, vec!["nats://10.0.0.1:4222"]);
            jail.set_env("JETRELAY_DELIVERY__NOPE", "1");
            let err = Config::load(Some(Path::new("c.toml"))).unwrap_err();
            assert_eq!(keys(err), vec!["delivery.nope"]);
            Ok(())
        });
    }

    #[test]
    fn a_missing_file_is_an_error_not_an_empty_config() {
        let err = Config::load(Some(Path::new("/nonexistent/jetrelay.toml"))).unwrap_err();
        assert!(matches!(err, ConfigError::MissingFile(_)));
    }

    #[test]
    fn every_shipped_config_file_loads() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                let figment = Figment::from(Toml::file_exact(&path));
                if let Err(e) = Config::from_figment(figment) {
                    panic!("{}: {e}", path.display());
                }
                seen += 1;
            }
        }
        assert!(seen >= 3, "expected a config per source kind, saw {seen}");
    }

    proptest::proptest! {
        #[test]
        fn validation_never_panics(in_flight in 0u32..100, buffered in 0u32..300, batch in 0u32..100,
                                   ack_wait in 0u64..100_000, max_deliver in -3i64..20) {
            let mut c = parse(MINIMAL).unwrap();
            c.delivery.max_in_flight = in_flight;
            c.delivery.max_buffered = buffered;
            c.delivery.max_batch = batch;
            c.consumer.ack_wait_ms = ack_wait;
            c.consumer.max_deliver = max_deliver;
            let problems = c.problems();
            proptest::prop_assert_eq!(problems.is_empty(),
                in_flight >= 1 && buffered >= in_flight && batch >= 1 && ack_wait >= 500
                && (max_deliver == -1 || max_deliver >= 1));
        }
    }
}
