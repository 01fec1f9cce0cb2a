//! What happens to a source's messages: received, held, settled (by action), how old
//! they are at each stage, and the ones that could not be offered to the app.

use std::sync::atomic::Ordering;
use std::time::Duration;

use prometheus::{Histogram, IntCounter, IntGauge};

use super::{LATENCY_BUCKETS, Registrar, SourceMetrics, gauge_value};
use crate::message::Invalid;

/// The settle actions, as the `action` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum SettleLabel {
    /// `+ACK`.
    Ack,
    /// `-NAK` (delayed, or released at shutdown).
    Nak,
    /// `+TERM`.
    Term,
    /// Published to the DLQ, then terminated.
    Dlq,
}

impl SettleLabel {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            SettleLabel::Ack => "ack",
            SettleLabel::Nak => "nak",
            SettleLabel::Term => "term",
            SettleLabel::Dlq => "dlq",
        }
    }
}

/// Message age: from milliseconds to a week.
const AGE_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 21600.0,
    86400.0, 604800.0,
];

/// When a message's age is taken, as the `stage` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum AgeStage {
    /// When jetrelay receives it.
    Received,
    /// When its action completes.
    Settled,
    /// When it is found expired (its `Nats-TTL` passed, or would before its retry).
    Expired,
}

/// What happens to messages: received, settled, held.
#[derive(Debug, Clone)]
pub(super) struct MessageCollectors {
    received: IntCounter,
    redeliveries: IntCounter,
    settled: [IntCounter; 4],
    message_duration: Histogram,
    in_flight: IntGauge,
    buffered: IntGauge,
    concurrency_limit: IntGauge,
    saturation: prometheus::Gauge,
    settle_failures: IntCounter,
    ack_failures: IntCounter,
    retries_in_place: IntCounter,
    progress_sent: IntCounter,
    invalid: [IntCounter; 5],
    age: [Histogram; 3],
}

impl MessageCollectors {
    pub(super) fn new(r: &Registrar<'_>) -> Result<MessageCollectors, prometheus::Error> {
        Ok(MessageCollectors {
            received: r.counter(
                "jetrelay_messages_received_total",
                "Messages received from JetStream",
            )?,
            redeliveries: r.counter(
                "jetrelay_redeliveries_total",
                "Messages received with a delivery count above 1",
            )?,
            settled: r.counters(
                "jetrelay_messages_settled_total",
                "Messages settled, by action",
                "action",
                [
                    SettleLabel::Ack,
                    SettleLabel::Nak,
                    SettleLabel::Term,
                    SettleLabel::Dlq,
                ]
                .map(SettleLabel::as_str),
            )?,
            message_duration: r.histogram(
                "jetrelay_message_duration_seconds",
                "Time from receipt to the completed final action",
                LATENCY_BUCKETS,
            )?,
            in_flight: r.gauge("jetrelay_in_flight", "Requests to the app in flight")?,
            buffered: r.gauge("jetrelay_buffered", "Messages held (queued and in flight)")?,
            concurrency_limit: r.gauge(
                "jetrelay_concurrency_limit",
                "Requests to the app that may run at once now (max_in_flight, or the adaptive limit)",
            )?,
            saturation: r.ratio(
                "jetrelay_saturation",
                "Requests in flight divided by the concurrency limit (above 1 for a moment after the limit falls)",
            )?,
            settle_failures: r.counter(
                "jetrelay_settle_failures_total",
                "Acks, naks or terms that could not be sent (JetStream redelivers after ack_wait)",
            )?,
            ack_failures: r.counter(
                "jetrelay_ack_failures_total",
                "Confirmed acks that the server did not confirm (may be redelivered)",
            )?,
            retries_in_place: r.counter(
                "jetrelay_retries_in_place_total",
                "Retries kept in their ordered lane (the message stays held, in order)",
            )?,
            progress_sent: r.counter(
                "jetrelay_progress_sent_total",
                "In-progress (+WPI) keep-alives sent for held messages",
            )?,
            invalid: r.counters(
                "jetrelay_invalid_messages_total",
                "Messages that could not be offered to the app (terminated, dead-lettered first when a DLQ is set), by reason",
                "reason",
                Invalid::NAMES,
            )?,
            age: r.histograms(
                "jetrelay_message_age_seconds",
                "Now minus the message's publish time (its stream timestamp), when jetrelay receives it, when its action completes, and when it is found expired",
                "stage",
                ["received", "settled", "expired"],
                AGE_BUCKETS,
            )?,
        })
    }
}

impl SourceMetrics {
    /// A message came from JetStream (`redelivered`: its delivery count is above 1).
    pub fn received(&self, redelivered: bool) {
        self.flow.received.inc();
        if redelivered {
            self.flow.redeliveries.inc();
        }
    }

    /// What is held now: messages (queued and in flight) and requests in flight.
    pub fn held(&self, messages: u32, requests: usize) {
        self.flow.buffered.set(i64::from(messages));
        self.flow.in_flight.set(gauge_value(requests));
    }

    /// The concurrency limit in force, and the requests in flight under it.
    pub fn pace(&self, limit: usize, in_flight: usize) {
        self.flow.concurrency_limit.set(gauge_value(limit));
        self.flow
            .saturation
            .set(in_flight as f64 / limit.max(1) as f64);
    }

    /// A message was settled with `action`, `since` after it was received.
    pub fn settled(&self, action: SettleLabel, since: Duration) {
        self.process.tally.settled.fetch_add(1, Ordering::AcqRel);
        self.flow.settled[action as usize].inc();
        self.flow.message_duration.observe(since.as_secs_f64());
    }

    /// `n` messages were released (NAK) without a decision: at shutdown, a quiesce.
    pub fn released(&self, n: u64) {
        self.process.tally.released.fetch_add(n, Ordering::AcqRel);
        self.flow.settled[SettleLabel::Nak as usize].inc_by(n);
    }

    /// `n` messages were left unfinished when the shutdown's (or a drain's) grace
    /// ran out: JetStream redelivers them after `ack_wait`.
    pub fn abandoned(&self, n: usize) {
        let n = u64::try_from(n).unwrap_or(u64::MAX);
        self.process.tally.abandoned.fetch_add(n, Ordering::AcqRel);
    }

    /// `n` acks, naks or terms could not be sent.
    pub fn settle_failed(&self, n: u64) {
        self.flow.settle_failures.inc_by(n);
    }

    /// A message's age (now − its publish time) at `stage`.
    pub fn message_age(&self, stage: AgeStage, age: Duration) {
        self.flow.age[stage as usize].observe(age.as_secs_f64());
    }

    /// A message could not be offered to the app.
    pub fn invalid(&self, why: &Invalid) {
        let at = Invalid::NAMES
            .iter()
            .position(|n| *n == why.name())
            .unwrap_or(0);
        self.flow.invalid[at].inc();
    }
}

one_event! {
    /// A confirmed ack was not confirmed.
    ack_not_confirmed => flow.ack_failures;
    /// A retry stays in its ordered lane.
    retried_in_place => flow.retries_in_place;
    /// A `+WPI` was sent for a held message.
    progress_sent => flow.progress_sent;
}
