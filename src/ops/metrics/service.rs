//! A service source's NATS requests, by endpoint and class, and how long each took
//! to its reply.

use std::sync::atomic::Ordering;
use std::time::Duration;

use prometheus::{HistogramVec, IntCounterVec};

use super::{LATENCY_BUCKETS, Registrar, SourceMetrics};

/// A service source's requests, by endpoint (label values from the source's config,
/// a closed set) and class: the app's (`2xx` … `timeout`), or jetrelay's own reply
/// (`unavailable`, `shed`, `too_large`), or `no_reply` (a request nobody waits for).
#[derive(Debug, Clone)]
pub(super) struct ServiceCollectors {
    requests: IntCounterVec,
    duration: HistogramVec,
}

/// The `class` labels of `jetrelay_requests_total` besides the app's.
pub const SERVICE_CLASSES: [&str; 4] = ["unavailable", "shed", "too_large", "no_reply"];

impl ServiceCollectors {
    pub(super) fn new(r: &Registrar<'_>) -> Result<ServiceCollectors, prometheus::Error> {
        Ok(ServiceCollectors {
            requests: r.register(IntCounterVec::new(
                r.opts(
                    "jetrelay_requests_total",
                    "NATS requests a service source took, by endpoint and class: the app's answer (2xx, 3xx, 4xx, 5xx, error, timeout), or jetrelay's own reply (unavailable: the app unhealthy, unreachable or draining; shed: too many requests waiting; too_large: over max_reply_bytes), or no_reply (no reply subject)",
                ),
                &["endpoint", "class"],
            )?)?,
            duration: r.register(HistogramVec::new(
                r.histogram_opts(
                    "jetrelay_request_duration_seconds",
                    "NATS requests a service source took, receipt to reply, by endpoint",
                    LATENCY_BUCKETS,
                ),
                &["endpoint"],
            )?)?,
        })
    }
}

impl SourceMetrics {
    /// A service source's endpoint took a request of `class` (an
    /// [`HttpClass`](crate::seam::HttpClass)'s label, or one of [`SERVICE_CLASSES`])
    /// and replied after `took` (a reply sent counts as settled in the process's
    /// tally: a drain's answer counts it).
    pub fn service_request(&self, endpoint: &str, class: &str, took: Duration) {
        let s = &self.service;
        s.requests.with_label_values(&[endpoint, class]).inc();
        if class != "no_reply" {
            self.process.tally.settled.fetch_add(1, Ordering::AcqRel);
        }
        s.duration
            .with_label_values(&[endpoint])
            .observe(took.as_secs_f64());
    }
}
