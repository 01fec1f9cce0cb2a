//! A source's consumer as the server sees it (pending, ack-pending, paused, an
//! elastic group's backlog), the pin and the partitions assigned.

use prometheus::IntGauge;

use super::{KnownGauge, Registrar, SourceMetrics, gauge_value};

/// A source's consumer as the server sees it, and the pin.
#[derive(Debug, Clone)]
pub(super) struct ConsumerCollectors {
    pinned: IntGauge,
    partitions_assigned: IntGauge,
    consumer_pending: KnownGauge,
    consumer_ack_pending: KnownGauge,
    group_backlog: KnownGauge,
    paused: IntGauge,
}

impl ConsumerCollectors {
    pub(super) fn new(r: &Registrar<'_>) -> Result<ConsumerCollectors, prometheus::Error> {
        Ok(ConsumerCollectors {
            pinned: r.gauge("jetrelay_pinned", "1 when this instance holds the pin")?,
            partitions_assigned: r.gauge(
                "jetrelay_partitions_assigned",
                "Partitions assigned to this member",
            )?,
            consumer_pending: r.known(
                "jetrelay_consumer_pending",
                "Messages pending for the consumer (from the consumer leader's info; absent while it cannot be read)",
            )?,
            consumer_ack_pending: r.known(
                "jetrelay_consumer_ack_pending",
                "Messages delivered and not yet acknowledged (from the consumer leader's info; absent while it cannot be read)",
            )?,
            group_backlog: r.known(
                "jetrelay_group_backlog",
                "Elastic groups: messages in the group's work-queue stream, the whole group's backlog (absent while it cannot be read)",
            )?,
            paused: r.gauge(
                "jetrelay_paused",
                "1 while the consumer is paused on the server (jetrelay pause)",
            )?,
        })
    }
}

impl SourceMetrics {
    /// Whether the consumer is paused on the server.
    pub fn paused(&self, paused: bool) {
        self.consumer.paused.set(i64::from(paused));
    }

    /// Whether this instance holds the pin.
    pub fn pinned(&self, pinned: bool) {
        self.consumer.pinned.set(i64::from(pinned));
    }

    /// How many partitions this member has.
    pub fn partitions_assigned(&self, n: usize) {
        self.consumer.partitions_assigned.set(gauge_value(n));
    }

    /// The consumer's pending and ack-pending counts as the server says them, or
    /// `None`: not known now (the gauges are withdrawn, never left at an old value).
    pub fn consumer_counts(&self, counts: Option<(u64, u64)>) {
        let (p, a) = (
            &self.consumer.consumer_pending,
            &self.consumer.consumer_ack_pending,
        );
        match counts {
            Some((pending, ack_pending)) => {
                p.set(pending);
                a.set(ack_pending);
            }
            None => {
                p.forget();
                a.forget();
            }
        }
    }

    /// An elastic group's backlog (its work-queue stream's messages), or `None`.
    pub fn group_backlog(&self, backlog: Option<u64>) {
        match backlog {
            Some(n) => self.consumer.group_backlog.set(n),
            None => self.consumer.group_backlog.forget(),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::metrics::Metrics;

    #[test]
    fn a_gauge_not_known_is_not_exposed() {
        let m = Metrics::new().unwrap().source("default").unwrap();
        assert!(!m.render().contains("jetrelay_consumer_pending"));
        m.consumer_counts(Some((7, 1)));
        assert!(
            m.render()
                .contains("jetrelay_consumer_pending{source=\"default\"} 7")
        );
        m.consumer_counts(None);
        assert!(
            !m.render().contains("jetrelay_consumer_pending"),
            "no stale value"
        );
        assert_eq!(m.consumer.consumer_pending.get(), None);
    }
}
