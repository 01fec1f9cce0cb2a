//! [`NatsError`]: the failures at the NATS boundary that are not about topology, and
//! [`TopologyError`]: why the topology is not usable (yet), shared by the topology's
//! I/O and the consumer pause. Each keeps its cause as its `source()`, never flattened
//! into text.

use crate::topology::{Row, StreamProblem};

/// The cause of a failure, kept whole: async-nats has a distinct error type per
/// operation, and the step that failed is named by the variant that holds it.
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

/// Why the topology is not usable (yet).
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    /// The stream is missing (external) or does not cover the filters.
    #[error(transparent)]
    Stream(#[from] StreamProblem),
    /// The consumer is missing and `topology.consumer = "bind"`.
    #[error("consumer {0} does not exist (topology.consumer = \"bind\": someone else creates it)")]
    ConsumerMissing(String),
    /// The consumer exists with another configuration; it is never changed.
    #[error(
        "consumer {name} exists with a different configuration (it is left unchanged):\n{table}"
    )]
    Conflict {
        /// The consumer.
        name: String,
        /// The differing fields.
        rows: Vec<Row>,
        /// The rendered table.
        table: String,
    },
    /// NATS or JetStream did not answer.
    #[error("JetStream is not available")]
    Unavailable(#[source] Cause),
    /// JetStream refused a request for a reason retrying cannot fix.
    #[error("JetStream refused to {step}")]
    Refused {
        /// What we tried.
        step: &'static str,
        /// What the server said.
        #[source]
        source: Cause,
    },
}

impl TopologyError {
    /// Whether the topology may still appear: retried with `on_missing = "retry"`.
    pub fn is_missing(&self) -> bool {
        matches!(
            self,
            TopologyError::Stream(StreamProblem::Missing(_)) | TopologyError::ConsumerMissing(_)
        )
    }

    /// Whether NATS itself is not reachable: always retried (not ready meanwhile).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, TopologyError::Unavailable(_))
    }
}

pub(super) fn refused(step: &'static str, e: impl Into<Cause>) -> TopologyError {
    TopologyError::Refused {
        step,
        source: e.into(),
    }
}

pub(super) fn unavailable(e: impl Into<Cause>) -> TopologyError {
    TopologyError::Unavailable(e.into())
}

/// Failures at the NATS boundary that are not about topology.
#[derive(Debug, thiserror::Error)]
pub enum NatsError {
    /// A credentials, key, token or password file could not be read.
    #[error("cannot read nats.{key} ({path})")]
    Secret {
        /// The config key.
        key: &'static str,
        /// The path.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A TLS file is missing or does not hold what it should.
    #[error("nats.{key} ({path}): {source}")]
    TlsFile {
        /// The config key.
        key: &'static str,
        /// The path.
        path: String,
        /// What is wrong.
        #[source]
        source: crate::tls::TlsFileError,
    },
    /// A server address did not parse (shown without its credentials).
    #[error("nats.servers: {0:?} is not a server address")]
    ServerAddress(String),
    /// The connection could not be set up.
    #[error("cannot connect to NATS at {servers}")]
    Connect {
        /// The servers tried (without their credentials).
        servers: String,
        /// Why.
        #[source]
        source: async_nats::ConnectError,
    },
    /// The server is older than 2.11 (no priority groups).
    #[error("nats-server {0} is too old: jetrelay needs 2.11 or newer")]
    ServerTooOld(String),
    /// Publishing (a pull, an ack) failed.
    #[error("cannot publish to NATS")]
    Publish(#[source] async_nats::PublishError),
    /// The connection is down and the client's buffer is full (or stayed full for
    /// `nats.request_timeout_ms`): nothing was sent.
    #[error("not sent: the NATS connection is down and its buffer is full")]
    NotSent,
    /// A confirmed ack got no confirmation.
    #[error("the server did not confirm the ack")]
    AckNotConfirmed(#[source] async_nats::RequestError),
    /// Subscribing to the pull inbox failed.
    #[error("cannot subscribe to the pull inbox")]
    Subscribe(#[source] async_nats::SubscribeError),
    /// The dead-letter publish was not stored.
    #[error("the dead-letter publish failed")]
    DeadLetter(#[source] async_nats::jetstream::context::PublishError),
    /// The dead letter is larger than the server or the DLQ stream takes.
    #[error("the dead letter is too large for the DLQ")]
    DeadLetterTooLarge(#[source] async_nats::jetstream::context::PublishError),
    /// The DLQ stream answered that the letter's id was stored already, and what is
    /// stored under it (and under the id tried next) is not this letter: someone
    /// published under jetrelay's id.
    #[error(
        "the dead letter's id {0} is taken in the DLQ stream by a message that is not this letter"
    )]
    DeadLetterIdTaken(String),
    /// Not even a letter without the payload, the original headers and a long reason
    /// fits in what the server takes (what it says of the original is too large).
    #[error("the dead letter does not fit in the DLQ, even without its payload and headers")]
    DeadLetterUnfit,
    /// The message stored under a duplicate dead letter's id could not be read back
    /// to check it.
    #[error("cannot read back the message stored under the dead letter's id")]
    DeadLetterUnchecked(#[source] Cause),
    /// A consumer-group config bucket operation failed.
    #[error("the consumer-group config store cannot {step}")]
    Kv {
        /// What we tried.
        step: &'static str,
        /// Why.
        #[source]
        source: Cause,
    },
    /// A stream or consumer operation of the group protocol failed.
    #[error("cannot {step}")]
    Group {
        /// What we tried.
        step: &'static str,
        /// What the server said.
        #[source]
        source: Cause,
    },
    /// The idempotency bucket cannot be opened or made, or a marker read or written.
    #[error("idempotency bucket {bucket}: cannot {step}")]
    Markers {
        /// The bucket.
        bucket: String,
        /// What we tried.
        step: &'static str,
        /// Why.
        #[source]
        source: Cause,
    },
    /// The idempotency bucket does not take per-key TTLs.
    #[error(
        "the idempotency bucket {0} does not take per-key TTLs: it needs nats-server 2.11 or newer and a bucket made with them (allow_msg_ttl; delete it to let jetrelay make it, or name another)"
    )]
    MarkersNoTtl(String),
    /// The elastic group's stream name is taken by a stream with another configuration.
    #[error("stream {0} exists with another configuration")]
    GroupStreamExists(String),
    /// The client gave up reconnecting (`nats.max_reconnects`).
    #[error("the NATS connection is closed: nats.max_reconnects reached")]
    Closed,
    /// Flushing at shutdown failed.
    #[error("cannot flush the NATS connection")]
    Flush(#[source] async_nats::client::FlushError),
}

impl NatsError {
    /// Whether the configuration is at fault (exit 64): a secret or TLS file, a server
    /// address.
    pub fn is_config(&self) -> bool {
        matches!(
            self,
            NatsError::Secret { .. } | NatsError::TlsFile { .. } | NatsError::ServerAddress(_)
        )
    }
}
