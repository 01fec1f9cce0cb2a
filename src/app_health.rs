//! App health gating as a pure state machine: consecutive failed probes past a
//! threshold make the app unhealthy; one good probe makes it healthy again. The app
//! starts unknown (= not healthy), so the first pull waits for a good probe.

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
    pub fn healthy(&self) -> bool {
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
