//! What one source takes from the config, parsed (`crate::daemon::settings` builds it):
//! where its messages come from, how much it holds and pulls, how it retries, paces,
//! orders and batches, where its dead letters go and what its answers may publish.
//! Two sources differ only in these values; what the process shares (NATS, the
//! admin port, tracing, the publish endpoint) is not here.

use std::time::Duration;

use crate::capacity::{Limits, PullTiming};
use crate::dispatch::{Batching, OutputRules};
use crate::group::spec::Member;
use crate::http::app::ClientSettings;
use crate::http::forward::TargetSettings;
use crate::http::probe::HealthProbe;
use crate::ops::traces::SourceTrace;
use crate::pace::PaceSettings;
use crate::policy::Policy;
use crate::route::Route;
use crate::seam::Ordering;
use crate::service::ServiceSpec;
use crate::topology::{OnMissing, StreamSpec, TopologyRequest};

/// Where a stream source's messages come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Binding {
    /// A durable consumer: the topology it requires.
    Durable(TopologyRequest),
    /// A member of a static or elastic group.
    Group(Member),
}

/// What a source is, with what only that kind takes.
#[derive(Debug, Clone, PartialEq)]
pub enum KindSettings {
    /// A consumer of a stream (a durable, or a group member).
    Stream(Box<StreamSettings>),
    /// A NATS service whose requests the app answers (`kind = "service"`).
    Service(ServiceSettings),
}

/// A service source: its spec, and where each endpoint's requests go.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceSettings {
    /// The service as discovery shows it, and its endpoints' subjects.
    pub spec: ServiceSpec,
    /// Each endpoint's target (the source's `http.url` with the endpoint's path):
    /// one per `spec.endpoints`, in its order (both are made from one list).
    pub targets: Vec<TargetSettings>,
}

/// How a missing topology (or group) is waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    /// Wait for it, or stop.
    pub on_missing: OnMissing,
    /// The first wait.
    pub initial: Duration,
    /// The longest wait.
    pub max: Duration,
}

/// `[dlq]`, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetters {
    /// Where dead letters are published.
    pub subject: String,
    /// The stream that stores them, when named (`dlq.stream`).
    pub stream: Option<String>,
    /// The stream a managed DLQ stream takes its replicas from: the one consumed.
    pub replicas_of: String,
    /// The stream jetrelay ensures (`dlq.manage`); its replicas are the source
    /// stream's, read when it is created.
    pub managed: Option<StreamSpec>,
}

/// Everything one source takes from the config.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceSettings {
    /// Its name: `default` for a config's `[source]`.
    pub name: String,
    /// What its spans say of it (its name, consumer and app).
    pub trace: SourceTrace,
    /// Where its messages (or requests) go: the app's URL, the format, the timeout.
    pub target: TargetSettings,
    /// The client it sends through (shared with every source whose client settings
    /// are the same); `pool` is this source's `max_in_flight`.
    pub client: ClientSettings,
    /// The app's health URL and its timing, when it has one.
    pub health: Option<HealthProbe>,
    /// Outcome → disposition.
    pub policy: Policy,
    /// Concurrent requests to the app (adaptive: at most).
    pub max_in_flight: usize,
    /// The concurrency limit (fixed or adaptive) and the rate limit.
    pub pace: PaceSettings,
    /// Its share of `[budget]` when sources compete (`weight`).
    pub weight: u32,
    /// What it is, with what only its kind takes.
    pub kind: KindSettings,
}

/// What a stream source (a durable or a group member) takes besides what every
/// source does.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamSettings {
    /// Where its messages come from.
    pub binding: Binding,
    /// Waiting for a missing topology.
    pub retry: Retry,
    /// Pull sizes and the bytes held.
    pub limits: Limits,
    /// `consumer.ack_wait_ms`.
    pub ack_wait: Duration,
    /// Pull expiry and heartbeats.
    pub timing: PullTiming,
    /// How often a held message gets `+WPI`: half the ack wait.
    pub progress_every: Duration,
    /// Lanes.
    pub ordering: Ordering,
    /// Whether acks wait for the server.
    pub confirmed_acks: bool,
    /// How long the app may be unhealthy or unreachable before a pinned instance
    /// steps down.
    pub unhealthy_handover: Duration,
    /// Where permanent failures go before their TERM (`[dlq]`).
    pub dead_letters: Option<DeadLetters>,
    /// Batch delivery (`delivery.batch_size` > 1), else one message per request.
    pub batch: Option<Batching>,
    /// What the app's answers may publish (`None`: publishing is off).
    pub outputs: Option<OutputRules>,
    /// Its routes, first match first, each with its target; a message none matches
    /// goes to the source's target.
    pub routes: Vec<Route<TargetSettings>>,
    /// Processed-once markers (`delivery.idempotency_bucket`; `None`: off).
    pub idempotency: Option<Idempotency>,
    /// `delivery.max_age_ms` (`None`: no limit).
    pub max_age: Option<Duration>,
    /// `http.unwrap_cloudevents`.
    pub unwrap_cloudevents: bool,
}

/// Processed-once markers: where, for how long, keyed how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Idempotency {
    /// The KV bucket (created when missing).
    pub bucket: String,
    /// How long a marker lives.
    pub ttl: Duration,
    /// What identifies a message.
    pub key: crate::seam::markers::IdempotencyKey,
    /// Whose markers these are: the durable, or the group (a partition that moves
    /// to another member keeps its markers).
    pub scope: String,
}

impl SourceSettings {
    /// Its stream settings, when it consumes a stream.
    pub fn stream(&self) -> Option<&StreamSettings> {
        match &self.kind {
            KindSettings::Stream(s) => Some(s),
            KindSettings::Service(_) => None,
        }
    }

    /// Whether the source is a pinned group member.
    pub fn pinned(&self) -> bool {
        self.stream()
            .is_some_and(|s| matches!(s.binding, Binding::Group(_)))
    }

    /// The group member it is, in a group.
    pub fn member(&self) -> Option<String> {
        match &self.stream()?.binding {
            Binding::Group(m) => Some(m.member.clone()),
            Binding::Durable(_) => None,
        }
    }
}

impl StreamSettings {
    /// How many messages may be kept on their last delivery for a dead letter the
    /// DLQ does not store yet: a quarter of what is held (at least one), so that the
    /// rest of `max_ack_pending` keeps the consumer flowing.
    pub fn letters_waiting_max(&self) -> usize {
        (self.limits.max_buffered as usize / 4).max(1)
    }
}

/// The duplicate window of a managed DLQ stream: the letter ids
/// (`jetrelay-dlq:<stream>:<consumer>:<sequence>`) must still be known when a
/// message whose TERM was lost comes again, an ack wait later; at least two
/// minutes (nats-server's default), at most the stream's `max_age`.
pub fn dlq_duplicate_window(ack_wait: Duration, max_age: Duration) -> Duration {
    let window = ack_wait.saturating_mul(2).max(Duration::from_secs(120));
    if max_age.is_zero() {
        window
    } else {
        window.min(max_age)
    }
}
