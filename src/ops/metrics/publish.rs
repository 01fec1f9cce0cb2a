//! What the app publishes through jetrelay, in answers or on the local publish
//! endpoint: the messages stored, and the publishes refused or failed, by reason.

use prometheus::IntCounter;

use super::{Metrics, Registrar, SourceMetrics};

/// Where the app's messages were published from, as the `via` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Via {
    /// In an answer to a message.
    Answer,
    /// On the local publish endpoint.
    Endpoint,
}

/// The `reason` labels of `jetrelay_publish_failures_total`: the refusals of
/// `crate::outputs::Refusal::label` and the failures of the publisher's
/// `crate::seam::publish::OutputFailure::label`.
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

/// What jetrelay publishes: dead letters, and the app's outputs.
#[derive(Debug, Clone)]
pub(super) struct PublishCollectors {
    published: [IntCounter; 2],
    failures: [IntCounter; PUBLISH_FAILURES.len()],
}

impl PublishCollectors {
    pub(super) fn new(r: &Registrar<'_>) -> Result<PublishCollectors, prometheus::Error> {
        Ok(PublishCollectors {
            published: r.counters(
                "jetrelay_published_total",
                "Messages the app published through jetrelay and the stream stored, by where from",
                "via",
                ["answer", "endpoint"],
            )?,
            failures: r.counters(
                "jetrelay_publish_failures_total",
                "Publishes by the app that were refused or failed, by reason",
                "reason",
                PUBLISH_FAILURES,
            )?,
        })
    }
}

impl Metrics {
    /// `n` messages the app published were stored.
    pub fn published(&self, via: Via, n: u64) {
        self.publishing.published[via as usize].inc_by(n);
    }

    /// One refused or failed publish; `reason` is one of [`PUBLISH_FAILURES`]
    /// (anything else counts as `rejected`).
    pub fn publish_failed(&self, reason: &str) {
        let at = PUBLISH_FAILURES
            .iter()
            .position(|r| *r == reason)
            .unwrap_or(PUBLISH_FAILURES.len() - 1);
        self.publishing.failures[at].inc();
    }
}

impl SourceMetrics {
    /// `n` messages the app published in answers were stored (the process's
    /// counter).
    pub fn published(&self, n: u64) {
        self.process.published(Via::Answer, n);
    }

    /// One refused or failed publish of an answer's outputs (the process's counter).
    pub fn publish_failed(&self, reason: &str) {
        self.process.publish_failed(reason);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_publish_failure_has_its_label() {
        use crate::outputs::Refusal;
        let refusals = [
            Refusal::Malformed(String::new()),
            Refusal::NotAllowed(String::new()),
            Refusal::TooMany { max: 1 },
            Refusal::TooManyHeaders { max: 1 },
        ];
        for r in refusals {
            assert!(PUBLISH_FAILURES.contains(&r.label()), "{}", r.label());
        }
    }
}
