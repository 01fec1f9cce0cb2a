//! Processed once: the duplicates the idempotency markers suppressed, the markers
//! that could not be written or read, the conflicts, and the messages that expired.

use std::time::Duration;

use prometheus::IntCounter;

use super::{AgeStage, Registrar, SourceMetrics};

/// Processed once: what the markers suppressed, what they could not record, the
/// markers of other messages found, and the messages that expired.
#[derive(Debug, Clone)]
pub(super) struct OnceCollectors {
    duplicates: IntCounter,
    marker_failures: IntCounter,
    conflicts: IntCounter,
    /// By reason: `ttl` (its `Nats-TTL`), `max_age` (`delivery.max_age_ms`).
    expired: [IntCounter; 2],
}

/// Why a message expired before it was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpiredBy {
    /// Its `Nats-TTL` passed (or would before its retry).
    Ttl,
    /// It was older than `delivery.max_age_ms`.
    MaxAge,
}

impl OnceCollectors {
    pub(super) fn new(r: &Registrar<'_>) -> Result<OnceCollectors, prometheus::Error> {
        Ok(OnceCollectors {
            duplicates: r.counter(
                "jetrelay_duplicates_suppressed_total",
                "Deliveries whose idempotency marker was found: acked without a request",
            )?,
            marker_failures: r.counter(
                "jetrelay_idempotency_failures_total",
                "Idempotency markers that could not be written within min(ack_wait / 2, 5 s), or read: the message was acked (or sent) anyway",
            )?,
            conflicts: r.counter(
                "jetrelay_idempotency_conflicts_total",
                "Requests of a message whose idempotency key has a marker of another message (its Nats-Msg-Id re-used, or a value jetrelay did not write): sent with Jetrelay-Idempotency-Conflict",
            )?,
            expired: r.counters(
                "jetrelay_expired_total",
                "Messages never sent because they expired: their Nats-TTL passed before they could be sent, or would before their retry (reason ttl: dead-lettered as expired), or they were older than delivery.max_age_ms (reason max_age: dead-lettered as too_old)",
                "reason",
                ["ttl", "max_age"],
            )?,
        })
    }
}

impl SourceMetrics {
    /// A message expired (`by`) before it could be sent (or before its retry), `age`
    /// after its publish time.
    pub fn expired(&self, by: ExpiredBy, age: Option<Duration>) {
        self.once.expired[by as usize].inc();
        if let Some(age) = age {
            self.message_age(AgeStage::Expired, age);
        }
    }
}

one_event! {
    /// A delivery's idempotency marker was found: acked without a request.
    duplicate_suppressed => once.duplicates;
    /// An idempotency marker could not be written (the message was acked anyway) or
    /// read (the message was sent).
    idempotency_failed => once.marker_failures;
    /// A message whose key has a marker of another message was sent to the app, with
    /// `Jetrelay-Idempotency-Conflict`.
    idempotency_conflict => once.conflicts;
}
