//! A source's dead letters (the publishes that failed, the messages waiting for
//! theirs) and where its routes sent its messages.

use prometheus::{IntCounter, IntCounterVec, IntGauge};

use super::{Registrar, SourceMetrics, gauge_value};

/// A source's dead letters, and where its routes sent its messages.
#[derive(Debug, Clone)]
pub(super) struct LetterCollectors {
    dlq_failures: IntCounter,
    dead_letters_waiting: IntGauge,
    /// By route (its name, or index) and target (`app` or `skip`): label values
    /// from the source's config, a closed set.
    routed: IntCounterVec,
}

impl LetterCollectors {
    pub(super) fn new(r: &Registrar<'_>) -> Result<LetterCollectors, prometheus::Error> {
        Ok(LetterCollectors {
            dlq_failures: r.counter(
                "jetrelay_dlq_failures_total",
                "Dead-letter publishes that failed (the message was retried instead)",
            )?,
            dead_letters_waiting: r.gauge(
                "jetrelay_dead_letters_waiting",
                "Messages kept on their last delivery because the DLQ does not store their dead letter yet (at most a quarter of delivery.max_buffered)",
            )?,
            routed: r.register(IntCounterVec::new(
                r.opts(
                    "jetrelay_routed_total",
                    "Messages a route took, by route and target: app (its path or URL) or skip (settled by its action, never sent)",
                ),
                &["route", "target"],
            )?)?,
        })
    }
}

impl SourceMetrics {
    /// A route took a message: to its target (`app`) or its action (`skip`).
    pub fn routed(&self, route: &str, target: &str) {
        self.letters
            .routed
            .with_label_values(&[route, target])
            .inc();
    }

    /// How many messages wait on their last delivery for their dead letter.
    pub fn dead_letters_waiting(&self, n: usize) {
        self.letters.dead_letters_waiting.set(gauge_value(n));
    }
}

one_event! {
    /// A dead letter was not stored (the message is retried or kept instead).
    dead_letter_failed => letters.dlq_failures;
}
