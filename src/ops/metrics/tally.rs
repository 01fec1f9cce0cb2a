//! What the sources did, read back: the process's tally of settled, released and
//! abandoned messages (a drain's answer), and each source's counts as `$SRV.STATS`
//! reports them, read from the registry.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::Metrics;

/// What every source settled, released and abandoned since the start (a drain's
/// answer counts its part of them).
#[derive(Debug, Default)]
pub(super) struct Tally {
    pub(super) settled: AtomicU64,
    pub(super) released: AtomicU64,
    pub(super) abandoned: AtomicU64,
}

/// A reading of the process's tally (`Tally`): messages settled after a request,
/// released without one, and left unfinished when a drain's grace ran out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tallied {
    /// Settled after the app's answer (or its failure).
    pub settled: u64,
    /// Released (NAK without a decision).
    pub released: u64,
    /// Left unfinished when the grace ran out (redelivered after `ack_wait`).
    pub abandoned: u64,
}

impl Tallied {
    /// What happened between `before` and this reading.
    pub fn since(self, before: Tallied) -> Tallied {
        Tallied {
            settled: self.settled.saturating_sub(before.settled),
            released: self.released.saturating_sub(before.released),
            abandoned: self.abandoned.saturating_sub(before.abandoned),
        }
    }
}

/// A source's counts since the process started, as `$SRV.STATS` reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SourceCounts {
    /// Messages received from JetStream.
    pub received: u64,
    /// Acked.
    pub acked: u64,
    /// Naked (retried later, or released).
    pub retried: u64,
    /// Terminated.
    pub terminated: u64,
    /// Dead-lettered.
    pub dead_lettered: u64,
    /// Time from receipt to the final action, summed over `processed` messages.
    pub processing: Duration,
    /// Messages whose final action completed.
    pub processed: u64,
    /// Requests to the app in flight now.
    pub in_flight: u64,
}

impl Metrics {
    /// Every source's settled, released and abandoned messages so far.
    pub fn tally(&self) -> Tallied {
        Tallied {
            settled: self.tally.settled.load(Ordering::Acquire),
            released: self.tally.released.load(Ordering::Acquire),
            abandoned: self.tally.abandoned.load(Ordering::Acquire),
        }
    }

    /// Each source's counts, by source name, read from the registry (sources a
    /// reload added or removed included).
    pub fn source_counts(&self) -> BTreeMap<String, SourceCounts> {
        let mut out: BTreeMap<String, SourceCounts> = Default::default();
        for family in self.registry.gather() {
            for m in family.get_metric() {
                let label = |name: &str| {
                    m.get_label()
                        .iter()
                        .find(|l| l.name() == name)
                        .map(|l| l.value().to_string())
                };
                let Some(source) = label("source") else {
                    continue;
                };
                let c = out.entry(source).or_default();
                let counter = m.get_counter().get_value() as u64;
                match (family.name(), label("action").as_deref()) {
                    ("jetrelay_messages_received_total", _) => c.received = counter,
                    ("jetrelay_messages_settled_total", Some("ack")) => c.acked = counter,
                    ("jetrelay_messages_settled_total", Some("nak")) => c.retried = counter,
                    ("jetrelay_messages_settled_total", Some("term")) => c.terminated = counter,
                    ("jetrelay_messages_settled_total", Some("dlq")) => c.dead_lettered = counter,
                    ("jetrelay_message_duration_seconds", _) => {
                        let h = m.get_histogram();
                        c.processing = Duration::from_secs_f64(h.get_sample_sum().max(0.0));
                        c.processed = h.get_sample_count();
                    }
                    ("jetrelay_in_flight", _) => c.in_flight = m.get_gauge().get_value() as u64,
                    _ => {}
                }
            }
        }
        out
    }
}
