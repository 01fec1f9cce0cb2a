//! What `jetrelay replay` reads and does on the server: a consumer moved back in place
//! with the consumer reset (ADR-60, nats-server 2.14+), and first the facts that
//! decide whether it may be (the stream's retention and bounds, the consumer's
//! filters, deliver policy and ack floor), the first message at or after a time, and
//! how many messages of a filter lie from a sequence on (read from a short-lived
//! consumer's pending count, which the server computes from its index).

use std::time::Duration;

use async_nats::jetstream::ErrorCode;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, pull};
use async_nats::jetstream::response::Response;
use async_nats::jetstream::stream::{ConsumerResetErrorKind, RetentionPolicy};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::Nats;
use super::error::{TopologyError, refused, unavailable};
use crate::topology::Retention;

/// A stream's and a consumer's facts that decide a replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayFacts {
    /// The stream's retention.
    pub retention: Retention,
    /// Its first message's sequence (with no message: the next one's).
    pub first_seq: u64,
    /// Its first message's time, when it has one.
    pub first_time: Option<OffsetDateTime>,
    /// Its last message's sequence (0: none yet).
    pub last_seq: u64,
    /// The consumer's filters (empty: every subject of the stream).
    pub filters: Vec<String>,
    /// Its deliver policy, as the server spells it (`all`, `by_start_sequence`, ...).
    pub deliver_policy: String,
    /// The stream sequence below which everything is acked.
    pub ack_floor: u64,
}

#[derive(Serialize)]
struct MsgGetRequest {
    start_time: String,
}

#[derive(Deserialize)]
struct MsgGetAnswer {
    message: StoredMessage,
}

#[derive(Deserialize)]
struct StoredMessage {
    seq: u64,
}

/// `MSG.GET` found no message at or after the time.
const NO_MESSAGE: u64 = 10037;

impl Nats {
    /// Whether the server has the consumer reset (2.14+).
    pub fn can_reset_consumers(&self) -> bool {
        self.client.is_server_compatible(2, 14, 0)
    }

    /// The connected server's version, as it says it.
    pub fn server_version(&self) -> String {
        self.client.server_info().version
    }

    /// What decides a replay of consumer `name` of `stream`; `None` when the stream
    /// does not exist.
    ///
    /// # Errors
    /// [`TopologyError::ConsumerMissing`]; [`TopologyError::Refused`] or
    /// [`TopologyError::Unavailable`] otherwise.
    pub async fn replay_facts(
        &self,
        stream: &str,
        name: &str,
    ) -> Result<Option<ReplayFacts>, TopologyError> {
        let Some(info) = self.stream_info(stream).await? else {
            return Ok(None);
        };
        let consumer = self
            .stream_handle(stream)
            .await?
            .consumer_info(name)
            .await
            .map_err(|e| super::pause::consumer_info_error(name, e))?;
        let c = &consumer.config;
        let mut filters = c.filter_subjects.clone();
        if !c.filter_subject.is_empty() {
            filters.push(c.filter_subject.clone());
        }
        let s = &info.state;
        Ok(Some(ReplayFacts {
            retention: match info.config.retention {
                RetentionPolicy::Limits => Retention::Limits,
                RetentionPolicy::Interest => Retention::Interest,
                RetentionPolicy::WorkQueue => Retention::Workqueue,
            },
            first_seq: s.first_sequence,
            first_time: (s.messages > 0).then_some(s.first_timestamp),
            last_seq: s.last_sequence,
            filters,
            deliver_policy: deliver_policy_name(c.deliver_policy).to_string(),
            ack_floor: consumer.ack_floor.stream_sequence,
        }))
    }

    /// The sequence of `stream`'s first message at or after `at`; `None` when there
    /// is none (every message is older).
    ///
    /// # Errors
    /// [`TopologyError::Refused`] or [`TopologyError::Unavailable`].
    pub async fn first_seq_at(
        &self,
        stream: &str,
        at: OffsetDateTime,
    ) -> Result<Option<u64>, TopologyError> {
        let start_time = at
            .format(&time::format_description::well_known::Rfc3339)
            .map_err(|e| refused("name the time", e))?;
        let answer: Response<MsgGetAnswer> = self
            .js
            .request(
                format!("STREAM.MSG.GET.{stream}"),
                &MsgGetRequest { start_time },
            )
            .await
            .map_err(unavailable)?;
        match answer {
            Response::Ok(a) => Ok(Some(a.message.seq)),
            Response::Err { error } if error.error_code().0 == NO_MESSAGE => Ok(None),
            Response::Err { error } => Err(refused("find the first message at the time", error)),
        }
    }

    /// How many messages of `stream` matching `filter` (empty: any) lie at `from` or
    /// after: the pending count of a consumer made for the question and deleted
    /// after (it expires by itself if the delete is lost).
    ///
    /// # Errors
    /// [`TopologyError::Refused`] or [`TopologyError::Unavailable`].
    pub async fn count_from(
        &self,
        stream: &str,
        filter: &str,
        from: u64,
    ) -> Result<u64, TopologyError> {
        let s = self.stream_handle(stream).await?;
        let consumer = s
            .create_consumer(pull::Config {
                deliver_policy: DeliverPolicy::ByStartSequence {
                    start_sequence: from.max(1),
                },
                ack_policy: AckPolicy::None,
                filter_subject: filter.to_string(),
                inactive_threshold: Duration::from_secs(10),
                memory_storage: true,
                num_replicas: 1,
                ..Default::default()
            })
            .await
            .map_err(|e| refused("count the messages (a short-lived consumer)", e))?;
        let info = consumer.cached_info();
        let (name, pending) = (info.name.clone(), info.num_pending);
        // Best effort: its inactive threshold removes it anyway.
        if let Err(e) = s.delete_consumer(&name).await {
            tracing::debug!(error = %e, consumer = %name, "the counting consumer is left to expire");
        }
        Ok(pending)
    }

    /// Moves consumer `name` of `stream` back so that the next message it delivers
    /// is `seq` or later (its pending and redelivered messages are cleared). Returns
    /// its pending count after.
    ///
    /// # Errors
    /// [`TopologyError::ConsumerMissing`]; [`TopologyError::Refused`] with the
    /// server's reason; [`TopologyError::Unavailable`].
    pub async fn reset_consumer(
        &self,
        stream: &str,
        name: &str,
        seq: u64,
    ) -> Result<u64, TopologyError> {
        let s = self.stream_handle(stream).await?;
        match s.reset_consumer(name, Some(seq)).await {
            Ok(answer) => Ok(answer.info.num_pending),
            Err(e) => Err(match e.kind() {
                ConsumerResetErrorKind::NotFound => {
                    TopologyError::ConsumerMissing(name.to_string())
                }
                ConsumerResetErrorKind::JetStream(js)
                    if js.error_code() == ErrorCode::CONSUMER_NOT_FOUND =>
                {
                    TopologyError::ConsumerMissing(name.to_string())
                }
                ConsumerResetErrorKind::TimedOut | ConsumerResetErrorKind::Request => {
                    unavailable(e)
                }
                _ => refused("reset the consumer", e),
            }),
        }
    }
}

/// A deliver policy as the server's JSON spells it.
fn deliver_policy_name(p: DeliverPolicy) -> &'static str {
    match p {
        DeliverPolicy::All => "all",
        DeliverPolicy::Last => "last",
        DeliverPolicy::New => "new",
        DeliverPolicy::ByStartSequence { .. } => "by_start_sequence",
        DeliverPolicy::ByStartTime { .. } => "by_start_time",
        DeliverPolicy::LastPerSubject => "last_per_subject",
    }
}
