//! App health gating: the probe loop on `http.health_url`, and the pure state machine
//! behind it (consecutive failed probes past a threshold make the app unhealthy; one
//! good probe makes it healthy again). The app starts unknown (= not healthy), so the
//! first pull waits for a good probe.

use std::time::Duration;

use tokio::sync::watch;

use crate::config::HttpConfig;
use crate::http::forward::Forwarder;
use crate::ops::metrics::Metrics;

/// Probes `http.health_url` and publishes whether the app is healthy; without a
/// health URL the app is always healthy and nothing is probed. The probe stops when
/// the receiver is dropped.
pub fn watch(forwarder: Forwarder, h: &HttpConfig, metrics: Metrics) -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(h.health_url.is_empty());
    metrics.app_healthy.set(i64::from(h.health_url.is_empty()));
    if h.health_url.is_empty() {
        return rx;
    }
    let interval = Duration::from_millis(h.health_interval_ms);
    let timeout = Duration::from_millis(h.health_timeout_ms);
    let mut tracker = HealthTracker::new(h.health_threshold);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if tx.is_closed() {
                return; // the dispatcher is gone
            }
            let ok = forwarder.healthy(timeout).await;
            if let Some(healthy) = tracker.observe(ok) {
                tracing::info!(healthy, "app health changed");
                metrics.app_healthy.set(i64::from(healthy));
                if tx.send(healthy).is_err() {
                    return; // the dispatcher is gone
                }
            }
        }
    });
    rx
}

/// The tracker.
#[derive(Debug, Clone)]
pub struct HealthTracker {
    threshold: u32,
    failures: u32,
    healthy: bool,
}

impl HealthTracker {
    /// `threshold` consecutive failures make the app unhealthy (at least 1).
    pub fn new(threshold: u32) -> HealthTracker {
        HealthTracker {
            threshold: threshold.max(1),
            failures: 0,
            healthy: false,
        }
    }

    /// Records one probe; returns the new state when it changed.
    pub fn observe(&mut self, ok: bool) -> Option<bool> {
        let was = self.healthy;
        if ok {
            self.failures = 0;
            self.healthy = true;
        } else {
            self.failures = self.failures.saturating_add(1);
            if self.failures >= self.threshold {
                self.healthy = false;
            }
        }
        (was != self.healthy).then_some(self.healthy)
    }

    /// The current state.
    #[cfg(test)]
    fn healthy(&self) -> bool {
        self.healthy
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transitions_table() {
        // (probes, expected transitions, final state) with threshold 3
        let cases: &[(&[bool], &[bool], bool)] = &[
            (&[], &[], false),
            (&[true], &[true], true),
            (&[false, false, false], &[], false),
            (&[true, false, false], &[true], true),
            (&[true, false, false, false], &[true, false], false),
            (&[true, false, false, true, false, false], &[true], true),
            (
                &[true, false, false, false, true],
                &[true, false, true],
                true,
            ),
        ];
        for (probes, transitions, last) in cases {
            let mut t = HealthTracker::new(3);
            let seen: Vec<bool> = probes.iter().filter_map(|ok| t.observe(*ok)).collect();
            assert_eq!(&seen, transitions, "{probes:?}");
            assert_eq!(t.healthy(), *last, "{probes:?}");
        }
    }
}
