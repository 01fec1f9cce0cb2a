//! A source's requests to the app: their result classes and durations, the batches,
//! the answers' action overrides, and the app's health.

use std::time::Duration;

use prometheus::{Histogram, IntCounter, IntGauge};

use super::{LATENCY_BUCKETS, Registrar, SourceMetrics};
use crate::seam::HttpClass;
use crate::trace::context::Dropped;

/// The `class` labels of `jetrelay_http_requests_total`, in [`class_index`] order.
const HTTP_CLASSES: [&str; 6] = ["2xx", "3xx", "4xx", "5xx", "error", "timeout"];

/// The `action` labels of `jetrelay_action_overrides_total`.
const OVERRIDES: [&str; 5] = ["ack", "retry", "term", "dlq", "invalid"];

const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0];

/// The app: requests, answers, health.
#[derive(Debug, Clone)]
pub(super) struct AppCollectors {
    requests: [IntCounter; 6],
    duration: Histogram,
    headers_skipped: IntCounter,
    action_overrides: [IntCounter; 5],
    batch_messages: Histogram,
    batch_bad_answers: IntCounter,
    batch_unknown_ids: IntCounter,
    app_healthy: IntGauge,
}

impl AppCollectors {
    pub(super) fn new(r: &Registrar<'_>) -> Result<AppCollectors, prometheus::Error> {
        Ok(AppCollectors {
            requests: r.counters(
                "jetrelay_http_requests_total",
                "Requests to the app, by result class",
                "class",
                HTTP_CLASSES,
            )?,
            duration: r.histogram(
                "jetrelay_http_request_duration_seconds",
                "Duration of requests to the app",
                LATENCY_BUCKETS,
            )?,
            headers_skipped: r.counter(
                "jetrelay_headers_skipped_total",
                "Message headers not forwarded because they are not valid HTTP",
            )?,
            action_overrides: r.counters(
                "jetrelay_action_overrides_total",
                "Answers whose Jetrelay-Action header decided the action, by action",
                "action",
                OVERRIDES,
            )?,
            batch_messages: r.histogram(
                "jetrelay_batch_messages",
                "Messages per request (batch delivery)",
                BATCH_BUCKETS,
            )?,
            batch_bad_answers: r.counter(
                "jetrelay_batch_bad_answers_total",
                "Answers to a batch whose body did not parse (the whole batch was retried)",
            )?,
            batch_unknown_ids: r.counter(
                "jetrelay_batch_unknown_ids_total",
                "Result ids in answers to a batch that named no message of the batch (ignored)",
            )?,
            app_healthy: r.gauge(
                "jetrelay_app_healthy",
                "1 when the source's app is healthy: reachable (a request got through), and its health URL answers (when http.health_url is set)",
            )?,
        })
    }
}

impl SourceMetrics {
    /// A request to the app ended: its class, how long it took, and how many of the
    /// message's headers were not sent (not valid HTTP).
    pub fn request(&self, class: HttpClass, took: Duration, headers_skipped: usize) {
        self.app.requests[class_index(class)].inc();
        self.app.duration.observe(took.as_secs_f64());
        if headers_skipped > 0 {
            self.app.headers_skipped.inc_by(headers_skipped as u64);
        }
    }

    /// A request to the app left out a message's trace headers (the process's
    /// counter, which the publish endpoint shares).
    pub fn trace_headers_dropped(&self, dropped: &Dropped) {
        self.process.trace_headers_dropped(dropped);
    }

    /// A batch of `messages` was sent in one request.
    pub fn batch_sent(&self, messages: usize) {
        self.app.batch_messages.observe(messages as f64);
    }

    /// An answer to a batch named `n` ids of no message it carried.
    pub fn batch_unknown_ids(&self, n: usize) {
        self.app.batch_unknown_ids.inc_by(n as u64);
    }

    /// A `Jetrelay-Action` override (`invalid` for a value not understood).
    pub fn action_override(&self, action: &str) {
        if let Some(at) = OVERRIDES.iter().position(|a| *a == action) {
            self.app.action_overrides[at].inc();
        }
    }

    /// Whether the source's app is healthy (reachable, and its health URL answers).
    pub fn app_healthy(&self, healthy: bool) {
        self.app.app_healthy.set(i64::from(healthy));
    }
}

one_event! {
    /// An answer to a batch did not parse.
    batch_unparsable => app.batch_bad_answers;
}

/// The `class` label of an app's result.
pub fn class_name(class: HttpClass) -> &'static str {
    HTTP_CLASSES[class_index(class)]
}

/// The position of a class's label in `HTTP_CLASSES`.
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
