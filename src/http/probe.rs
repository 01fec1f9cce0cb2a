//! App health gating: the probe loop on `http.health_url`, and the pure state machine
//! behind it (consecutive failed probes past a threshold make the app unhealthy; one
//! good probe makes it healthy again). The app starts waiting for its first probe
//! (not healthy yet), so the first pull waits for a good one.

use std::time::Duration;

use tokio::sync::watch;

use crate::http::app::AppClient;
use crate::seam::Health;

/// `http.health_url` and its timing, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthProbe {
    /// `http.health_url`.
    pub url: reqwest::Url,
    /// `http.health_interval_ms`.
    pub interval: Duration,
    /// `http.health_timeout_ms`.
    pub timeout: Duration,
    /// `http.health_threshold`: failed probes in a row that make the app unhealthy.
    pub threshold: u32,
}

/// Probes the health URL and publishes whether the app is healthy; without one the
/// app is always healthy and nothing is probed. The probe stops when the receiver is
/// dropped. It starts from `seed` (a reload's new probe from what the old one said),
/// else waiting for its first answer.
pub fn watch(
    client: AppClient,
    probe: Option<HealthProbe>,
    seed: Option<Health>,
) -> watch::Receiver<Health> {
    let first = match (&probe, seed) {
        (None, _) => Health::Healthy,
        (Some(_), Some(seed)) => seed,
        (Some(_), None) => Health::Waiting,
    };
    let (tx, rx) = watch::channel(first);
    let Some(probe) = probe else {
        return rx;
    };
    let (interval, timeout) = (probe.interval, probe.timeout);
    let mut tracker = HealthTracker::new(probe.threshold);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if tx.is_closed() {
                return; // the dispatcher is gone
            }
            let ok = client.healthy(&probe.url, timeout).await;
            if let Some(health) = tracker.observe(ok) {
                tracing::info!(health = health.name(), "app health changed");
                if tx.send(health).is_err() {
                    return; // the dispatcher is gone
                }
            }
        }
    });
    rx
}

/// The tracker: waiting until the first probe answers or `threshold` fail in a row;
/// then `threshold` consecutive failures make the app unhealthy and one good probe
/// makes it healthy again.
#[derive(Debug, Clone)]
pub struct HealthTracker {
    threshold: u32,
    failures: u32,
    health: Health,
}

impl HealthTracker {
    /// `threshold` consecutive failures make the app unhealthy (at least 1).
    pub fn new(threshold: u32) -> HealthTracker {
        HealthTracker {
            threshold: threshold.max(1),
            failures: 0,
            health: Health::Waiting,
        }
    }

    /// Records one probe; returns the new state when it changed.
    pub fn observe(&mut self, ok: bool) -> Option<Health> {
        let was = self.health;
        if ok {
            self.failures = 0;
            self.health = Health::Healthy;
        } else {
            self.failures = self.failures.saturating_add(1);
            if self.failures >= self.threshold {
                self.health = Health::Unhealthy;
            }
        }
        (was != self.health).then_some(self.health)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transitions_table() {
        use Health::{Healthy as H, Unhealthy as U, Waiting as W};
        // (probes, expected transitions, final state) with threshold 3
        let cases: &[(&[bool], &[Health], Health)] = &[
            (&[], &[], W),
            (&[true], &[H], H),
            (&[false, false], &[], W),
            (&[false, false, false], &[U], U),
            (&[false, false, false, true], &[U, H], H),
            (&[true, false, false], &[H], H),
            (&[true, false, false, false], &[H, U], U),
            (&[true, false, false, true, false, false], &[H], H),
            (&[true, false, false, false, true], &[H, U, H], H),
        ];
        for (probes, transitions, last) in cases {
            let mut t = HealthTracker::new(3);
            let seen: Vec<Health> = probes.iter().filter_map(|ok| t.observe(*ok)).collect();
            assert_eq!(&seen, transitions, "{probes:?}");
            assert_eq!(t.health, *last, "{probes:?}");
        }
    }
}
