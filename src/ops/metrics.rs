//! Every Prometheus collector, registered into a registry the caller owns (never the
//! global default). Metric names and label sets are defined here and only here.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

use crate::seam::HttpClass;

/// A gauge that is exposed only while its value is known: read from the server and
/// not yet outdated. Autoscalers then see no sample (and their own fallback) instead of
/// an old value that looks current.
#[derive(Debug, Clone)]
pub struct KnownGauge {
    gauge: IntGauge,
    known: Arc<AtomicBool>,
}

impl KnownGauge {
    fn new(name: &str, help: &str) -> Result<KnownGauge, prometheus::Error> {
        Ok(KnownGauge {
            gauge: IntGauge::new(name, help)?,
            known: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Sets the value (saturating), and exposes it.
    pub fn set(&self, value: u64) {
        self.gauge.set(i64::try_from(value).unwrap_or(i64::MAX));
        self.known.store(true, Ordering::Release);
    }

    /// Withdraws the value: the gauge is not exposed until the next `set`.
    pub fn forget(&self) {
        self.known.store(false, Ordering::Release);
    }

    /// The value, when known.
    pub fn get(&self) -> Option<i64> {
        self.known.load(Ordering::Acquire).then(|| self.gauge.get())
    }
}

impl Collector for KnownGauge {
    fn desc(&self) -> Vec<&Desc> {
        self.gauge.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        if self.get().is_some() {
            self.gauge.collect()
        } else {
            Vec::new()
        }
    }
}

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

/// All collectors.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Registry,
    /// `jetrelay_messages_received_total`.
    pub received: IntCounter,
    /// Per action, resolved once: a label lookup per message is measurable.
    settled: [IntCounter; 4],
    /// `jetrelay_redeliveries_total`.
    pub redeliveries: IntCounter,
    /// Per class (2xx, 3xx, 4xx, 5xx, error, timeout), resolved once.
    http_requests: [IntCounter; 6],
    /// `jetrelay_http_request_duration_seconds`.
    pub http_duration: Histogram,
    /// `jetrelay_message_duration_seconds`.
    pub message_duration: Histogram,
    /// `jetrelay_in_flight`.
    pub in_flight: IntGauge,
    /// `jetrelay_buffered`.
    pub buffered: IntGauge,
    /// `jetrelay_pinned`.
    pub pinned: IntGauge,
    /// `jetrelay_partitions_assigned`.
    pub partitions_assigned: IntGauge,
    /// `jetrelay_consumer_pending`: exposed only while consumer info is current.
    pub consumer_pending: KnownGauge,
    /// `jetrelay_consumer_ack_pending`: exposed only while consumer info is current.
    pub consumer_ack_pending: KnownGauge,
    /// `jetrelay_group_backlog`: elastic groups, messages in the group's work-queue
    /// stream; exposed only while current.
    pub group_backlog: KnownGauge,
    /// `jetrelay_nats_connected`.
    pub nats_connected: IntGauge,
    /// `jetrelay_ready`.
    pub ready: IntGauge,
    /// `jetrelay_headers_skipped_total`.
    pub headers_skipped: IntCounter,
    /// `jetrelay_settle_failures_total`.
    pub settle_failures: IntCounter,
    /// `jetrelay_ack_failures_total`.
    pub ack_failures: IntCounter,
    /// `jetrelay_retries_in_place_total`.
    pub retries_in_place: IntCounter,
    /// `jetrelay_progress_sent_total`.
    pub progress_sent: IntCounter,
    /// `jetrelay_dlq_failures_total`.
    pub dlq_failures: IntCounter,
    /// `jetrelay_dead_letters_waiting`: messages kept on their last delivery because
    /// the DLQ does not store their dead letter yet.
    pub dead_letters_waiting: IntGauge,
    action_overrides: IntCounterVec,
    /// Per reason (`crate::message::Invalid::NAMES`), resolved once.
    invalid: [IntCounter; 3],
    /// `jetrelay_app_healthy`.
    pub app_healthy: IntGauge,
    /// `jetrelay_batch_messages`: messages per request (batch delivery).
    pub batch_messages: Histogram,
    /// `jetrelay_batch_bad_answers_total`: batch answers that did not parse.
    pub batch_bad_answers: IntCounter,
    /// `jetrelay_batch_unknown_ids_total`: result ids that named no message.
    pub batch_unknown_ids: IntCounter,
    /// `jetrelay_published_total{via}`, resolved once: answer, endpoint.
    published: [IntCounter; 2],
    /// `jetrelay_publish_failures_total{reason}`, resolved once.
    publish_failures: [IntCounter; PUBLISH_FAILURES.len()],
}

/// Where the app's messages were published from, as the `via` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Via {
    /// In an answer to a message (the outbox).
    Answer,
    /// On the local publish endpoint.
    Endpoint,
}

/// The `reason` labels of `jetrelay_publish_failures_total`: the refusals of
/// `crate::outputs::Refusal::label` and the failures of
/// `crate::nats::OutputError::label`.
pub const PUBLISH_FAILURES: [&str; 9] = [
    "malformed",
    "not_allowed",
    "too_large",
    "no_stream",
    "timeout",
    "unavailable",
    "not_atomic",
    "too_many_batches",
    "rejected",
];

const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

impl Metrics {
    /// Creates and registers every collector in a fresh registry.
    ///
    /// # Errors
    /// A registration error (only possible with duplicate names, a programming error).
    pub fn new() -> Result<Metrics, prometheus::Error> {
        let registry = Registry::new();
        let counter = |name: &str, help: &str| -> Result<IntCounter, prometheus::Error> {
            let c = IntCounter::new(name, help)?;
            registry.register(Box::new(c.clone()))?;
            Ok(c)
        };
        let gauge = |name: &str, help: &str| -> Result<IntGauge, prometheus::Error> {
            let g = IntGauge::new(name, help)?;
            registry.register(Box::new(g.clone()))?;
            Ok(g)
        };
        let known = |name: &str, help: &str| -> Result<KnownGauge, prometheus::Error> {
            let g = KnownGauge::new(name, help)?;
            registry.register(Box::new(g.clone()))?;
            Ok(g)
        };
        let histogram = |name: &str, help: &str| -> Result<Histogram, prometheus::Error> {
            let h = Histogram::with_opts(
                HistogramOpts::new(name, help).buckets(LATENCY_BUCKETS.to_vec()),
            )?;
            registry.register(Box::new(h.clone()))?;
            Ok(h)
        };
        let settled = IntCounterVec::new(
            Opts::new(
                "jetrelay_messages_settled_total",
                "Messages settled, by action",
            ),
            &["action"],
        )?;
        registry.register(Box::new(settled.clone()))?;
        let http_requests = IntCounterVec::new(
            Opts::new(
                "jetrelay_http_requests_total",
                "Requests to the app, by result class",
            ),
            &["class"],
        )?;
        registry.register(Box::new(http_requests.clone()))?;
        let action_overrides = IntCounterVec::new(
            Opts::new(
                "jetrelay_action_overrides_total",
                "Answers whose Jetrelay-Action header decided the action, by action",
            ),
            &["action"],
        )?;
        registry.register(Box::new(action_overrides.clone()))?;
        let build_info = IntGaugeVec::new(
            Opts::new("jetrelay_build_info", "Build information"),
            &["version"],
        )?;
        registry.register(Box::new(build_info.clone()))?;
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        // Every label exists from the start, so dashboards see zeros, not gaps.
        let settled = [
            SettleLabel::Ack,
            SettleLabel::Nak,
            SettleLabel::Term,
            SettleLabel::Dlq,
        ]
        .map(|a| settled.with_label_values(&[a.as_str()]));
        for a in ["ack", "retry", "term", "dlq", "invalid"] {
            action_overrides.with_label_values(&[a]);
        }
        let invalid = IntCounterVec::new(
            Opts::new(
                "jetrelay_invalid_messages_total",
                "Messages that could not be offered to the app (terminated, dead-lettered first when a DLQ is set), by reason",
            ),
            &["reason"],
        )?;
        registry.register(Box::new(invalid.clone()))?;
        let invalid = crate::message::Invalid::NAMES.map(|r| invalid.with_label_values(&[r]));
        let http_requests = ["2xx", "3xx", "4xx", "5xx", "error", "timeout"]
            .map(|c| http_requests.with_label_values(&[c]));
        let published = IntCounterVec::new(
            Opts::new(
                "jetrelay_published_total",
                "Messages the app published through jetrelay and the stream stored, by where from",
            ),
            &["via"],
        )?;
        registry.register(Box::new(published.clone()))?;
        let published = ["answer", "endpoint"].map(|v| published.with_label_values(&[v]));
        let publish_failures = IntCounterVec::new(
            Opts::new(
                "jetrelay_publish_failures_total",
                "Publishes by the app that were refused or failed, by reason",
            ),
            &["reason"],
        )?;
        registry.register(Box::new(publish_failures.clone()))?;
        let publish_failures = PUBLISH_FAILURES.map(|r| publish_failures.with_label_values(&[r]));
        Ok(Metrics {
            received: counter(
                "jetrelay_messages_received_total",
                "Messages received from JetStream",
            )?,
            redeliveries: counter(
                "jetrelay_redeliveries_total",
                "Messages received with a delivery count above 1",
            )?,
            http_duration: histogram(
                "jetrelay_http_request_duration_seconds",
                "Duration of requests to the app",
            )?,
            message_duration: histogram(
                "jetrelay_message_duration_seconds",
                "Time from receipt to the completed final action",
            )?,
            in_flight: gauge("jetrelay_in_flight", "Requests to the app in flight")?,
            buffered: gauge("jetrelay_buffered", "Messages held (queued and in flight)")?,
            pinned: gauge("jetrelay_pinned", "1 when this instance holds the pin")?,
            partitions_assigned: gauge(
                "jetrelay_partitions_assigned",
                "Partitions assigned to this member",
            )?,
            consumer_pending: known(
                "jetrelay_consumer_pending",
                "Messages pending for the consumer (from the consumer leader's info; absent while it cannot be read)",
            )?,
            consumer_ack_pending: known(
                "jetrelay_consumer_ack_pending",
                "Messages delivered and not yet acknowledged (from the consumer leader's info; absent while it cannot be read)",
            )?,
            group_backlog: known(
                "jetrelay_group_backlog",
                "Elastic groups: messages in the group's work-queue stream, the whole group's backlog (absent while it cannot be read)",
            )?,
            nats_connected: gauge("jetrelay_nats_connected", "1 when connected to NATS")?,
            ready: gauge("jetrelay_ready", "1 when ready")?,
            headers_skipped: counter(
                "jetrelay_headers_skipped_total",
                "Message headers not forwarded because they are not valid HTTP",
            )?,
            settle_failures: counter(
                "jetrelay_settle_failures_total",
                "Acks, naks or terms that could not be sent (JetStream redelivers after ack_wait)",
            )?,
            ack_failures: counter(
                "jetrelay_ack_failures_total",
                "Confirmed acks that the server did not confirm (may be redelivered)",
            )?,
            retries_in_place: counter(
                "jetrelay_retries_in_place_total",
                "Retries kept in their ordered lane (the message stays held, in order)",
            )?,
            progress_sent: counter(
                "jetrelay_progress_sent_total",
                "In-progress (+WPI) keep-alives sent for held messages",
            )?,
            dlq_failures: counter(
                "jetrelay_dlq_failures_total",
                "Dead-letter publishes that failed (the message was retried instead)",
            )?,
            dead_letters_waiting: gauge(
                "jetrelay_dead_letters_waiting",
                "Messages kept on their last delivery because the DLQ does not store their dead letter yet (at most a quarter of delivery.max_buffered)",
            )?,
            app_healthy: gauge(
                "jetrelay_app_healthy",
                "1 when the app is healthy: reachable (a request got through), and its health URL answers (when http.health_url is set)",
            )?,
            batch_messages: {
                let h = Histogram::with_opts(
                    HistogramOpts::new(
                        "jetrelay_batch_messages",
                        "Messages per request (batch delivery)",
                    )
                    .buckets(vec![
                        1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0,
                    ]),
                )?;
                registry.register(Box::new(h.clone()))?;
                h
            },
            batch_bad_answers: counter(
                "jetrelay_batch_bad_answers_total",
                "Answers to a batch whose body did not parse (the whole batch was retried)",
            )?,
            batch_unknown_ids: counter(
                "jetrelay_batch_unknown_ids_total",
                "Result ids in answers to a batch that named no message of the batch (ignored)",
            )?,
            registry,
            settled,
            http_requests,
            action_overrides,
            invalid,
            published,
            publish_failures,
        })
    }

    /// Counts `n` messages the app published that were stored.
    pub fn published(&self, via: Via, n: u64) {
        self.published[via as usize].inc_by(n);
    }

    /// Counts one refused or failed publish; `reason` is one of [`PUBLISH_FAILURES`]
    /// (anything else counts as `rejected`).
    pub fn publish_failed(&self, reason: &str) {
        let at = PUBLISH_FAILURES
            .iter()
            .position(|r| *r == reason)
            .unwrap_or(PUBLISH_FAILURES.len() - 1);
        self.publish_failures[at].inc();
    }

    /// Counts one settled message.
    pub fn settled(&self, action: SettleLabel) {
        self.settled[action as usize].inc();
    }

    /// Counts `n` settled messages.
    pub fn settled_by(&self, action: SettleLabel, n: u64) {
        self.settled[action as usize].inc_by(n);
    }

    /// Counts one `Jetrelay-Action` override (`invalid` for a value not understood).
    pub fn action_override(&self, action: &str) {
        self.action_overrides.with_label_values(&[action]).inc();
    }

    /// Counts one message that could not be offered to the app.
    pub fn invalid(&self, why: &crate::message::Invalid) {
        let at = crate::message::Invalid::NAMES
            .iter()
            .position(|n| *n == why.name())
            .unwrap_or(0);
        self.invalid[at].inc();
    }

    /// Counts one request to the app.
    pub fn http_request(&self, class: HttpClass) {
        self.http_requests[class_index(class)].inc();
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        // Encoding into a Vec cannot fail for well-formed collectors.
        if TextEncoder::new()
            .encode(&self.registry.gather(), &mut buf)
            .is_err()
        {
            return String::new();
        }
        String::from_utf8(buf).unwrap_or_default()
    }
}

/// The position of a class's label in `["2xx", "3xx", "4xx", "5xx", "error", "timeout"]`.
fn class_index(class: HttpClass) -> usize {
    match class {
        HttpClass::Status(s) if (200..300).contains(&s) => 0,
        HttpClass::Status(s) if (400..500).contains(&s) => 2,
        HttpClass::Status(s) if s >= 500 => 3,
        HttpClass::Status(_) => 1,
        HttpClass::Error => 4,
        HttpClass::Timeout => 5,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gauge_not_known_is_not_exposed() {
        let m = Metrics::new().unwrap();
        assert!(!m.render().contains("jetrelay_consumer_pending"));
        m.consumer_pending.set(7);
        assert!(m.render().contains("jetrelay_consumer_pending 7"));
        m.consumer_pending.forget();
        assert!(
            !m.render().contains("jetrelay_consumer_pending"),
            "no stale value"
        );
        assert_eq!(m.consumer_pending.get(), None);
    }

    #[test]
    fn every_publish_failure_has_its_label() {
        use crate::outputs::Refusal;
        let refusals = [
            Refusal::Malformed(String::new()),
            Refusal::NotAllowed(String::new()),
            Refusal::TooMany { max: 1 },
        ];
        for r in refusals {
            assert!(PUBLISH_FAILURES.contains(&r.label()), "{}", r.label());
        }
    }

    #[test]
    fn every_documented_name_is_exposed() {
        let m = Metrics::new().unwrap();
        m.settled(SettleLabel::Term);
        m.consumer_pending.set(5);
        m.consumer_ack_pending.set(1);
        m.group_backlog.set(9);
        m.http_request(HttpClass::Status(503));
        m.http_request(HttpClass::Status(101));
        let text = m.render();
        for name in [
            "jetrelay_messages_received_total",
            "jetrelay_messages_settled_total{action=\"ack\"} 0",
            "jetrelay_messages_settled_total{action=\"term\"} 1",
            "jetrelay_redeliveries_total",
            "jetrelay_http_requests_total{class=\"5xx\"} 1",
            "jetrelay_http_requests_total{class=\"3xx\"} 1",
            "jetrelay_http_request_duration_seconds_bucket",
            "jetrelay_message_duration_seconds_bucket",
            "jetrelay_in_flight",
            "jetrelay_buffered",
            "jetrelay_pinned",
            "jetrelay_partitions_assigned",
            "jetrelay_consumer_pending 5",
            "jetrelay_consumer_ack_pending 1",
            "jetrelay_group_backlog 9",
            "jetrelay_nats_connected",
            "jetrelay_ready",
            "jetrelay_build_info{version=",
            "jetrelay_retries_in_place_total",
            "jetrelay_progress_sent_total",
            "jetrelay_dlq_failures_total",
            "jetrelay_dead_letters_waiting 0",
            "jetrelay_action_overrides_total{action=\"dlq\"} 0",
            "jetrelay_app_healthy",
            "jetrelay_invalid_messages_total{reason=\"malformed_headers\"} 0",
            "jetrelay_batch_messages_bucket",
            "jetrelay_batch_bad_answers_total",
            "jetrelay_batch_unknown_ids_total",
            "jetrelay_published_total{via=\"answer\"} 0",
            "jetrelay_published_total{via=\"endpoint\"} 0",
            "jetrelay_publish_failures_total{reason=\"not_allowed\"} 0",
            "jetrelay_publish_failures_total{reason=\"too_many_batches\"} 0",
        ] {
            assert!(text.contains(name), "{name} missing from\n{text}");
        }
    }
}
