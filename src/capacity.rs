//! Capacity arithmetic of the pull engine, as pure functions: how many messages the
//! next pull may ask for, and how long pulls live.
//!
//! The invariant: a pull never asks for more than the free buffer room
//! (`max_buffered − held − already requested`); with no room and nothing outstanding,
//! one pull of 1 is kept open so that a pin stays alive (the server holds it back
//! because the consumer's `max_ack_pending` equals `max_buffered`).

use std::time::Duration;

/// Limits of the pull engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest single pull.
    pub max_batch: u32,
    /// Messages held at most (= the consumer's `max_ack_pending`).
    pub max_buffered: u32,
}

impl Limits {
    /// The size of the next pull, or `None` to wait for more room.
    ///
    /// `held` is what the daemon holds (queued + in flight); `requested` what
    /// outstanding pulls may still deliver.
    pub fn next_pull(self, held: u32, requested: u32) -> Option<u32> {
        let room = self
            .max_buffered
            .saturating_sub(held.saturating_add(requested));
        let batch = self.max_batch.max(1);
        if requested == 0 {
            // Nothing outstanding: ask for what fits, or keep one pull open for the pin.
            return Some(room.clamp(1, batch));
        }
        // Something is outstanding: top up only when a worthwhile batch fits, so that a
        // busy daemon does not send one pull per settled message.
        let worthwhile = (batch.min(self.max_buffered) / 2).max(1);
        (room >= worthwhile).then_some(room.min(batch))
    }
}

/// How long pulls live and how often the server must show it is alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PullTiming {
    /// Pull request expiry.
    pub expires: Duration,
    /// Idle heartbeat asked of the server.
    pub heartbeat: Duration,
}

impl PullTiming {
    /// Half the ack wait, between 1 s and 30 s: well inside a pinned consumer's
    /// `priority_timeout` (= ack wait in groups) so the pin is refreshed in time.
    /// Heartbeats at a quarter of that, between 250 ms and 5 s.
    pub fn for_ack_wait(ack_wait: Duration) -> PullTiming {
        let expires = (ack_wait / 2).clamp(Duration::from_secs(1), Duration::from_secs(30));
        let heartbeat = (expires / 4).clamp(Duration::from_millis(250), Duration::from_secs(5));
        PullTiming { expires, heartbeat }
    }

    /// Silence longer than this while a pull is outstanding means the pull is lost.
    pub fn missed_heartbeat_after(self) -> Duration {
        self.heartbeat * 2 + Duration::from_millis(500)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const L: Limits = Limits {
        max_batch: 64,
        max_buffered: 256,
    };

    #[test]
    fn pull_size_table() {
        let cases = [
            // held, requested, expected
            (0, 0, Some(64)),
            (250, 0, Some(6)),
            (256, 0, Some(1)),    // full: keep the pin alive
            (300, 0, Some(1)),    // over (acks in transit): still one pull
            (0, 64, Some(64)),    // room for another whole batch
            (100, 128, None),     // room 28 < 32: wait
            (100, 124, Some(32)), // room 32: worthwhile
            (256, 1, None),
        ];
        for (held, requested, want) in cases {
            assert_eq!(
                L.next_pull(held, requested),
                want,
                "held {held} requested {requested}"
            );
        }
        let tiny = Limits {
            max_batch: 64,
            max_buffered: 1,
        };
        assert_eq!(tiny.next_pull(0, 0), Some(1));
        assert_eq!(tiny.next_pull(1, 0), Some(1));
        assert_eq!(tiny.next_pull(0, 1), None);
    }

    #[test]
    fn timing_table() {
        let t = PullTiming::for_ack_wait(Duration::from_secs(30));
        assert_eq!(
            (t.expires, t.heartbeat),
            (Duration::from_secs(15), Duration::from_millis(3750))
        );
        let t = PullTiming::for_ack_wait(Duration::from_millis(500));
        assert_eq!(
            (t.expires, t.heartbeat),
            (Duration::from_secs(1), Duration::from_millis(250))
        );
        let t = PullTiming::for_ack_wait(Duration::from_secs(600));
        assert_eq!(
            (t.expires, t.heartbeat),
            (Duration::from_secs(30), Duration::from_secs(5))
        );
    }

    proptest! {
        #[test]
        fn a_pull_never_exceeds_the_free_room(batch in 1u32..200, buffered in 1u32..1000,
                                              held in 0u32..1200, requested in 0u32..1200) {
            let l = Limits { max_batch: batch, max_buffered: buffered };
            if let Some(n) = l.next_pull(held, requested) {
                prop_assert!(n >= 1 && n <= batch);
                if requested > 0 {
                    prop_assert!(held + requested + n <= buffered);
                } else if held < buffered {
                    prop_assert!(held + n <= buffered);
                } else {
                    prop_assert_eq!(n, 1);
                }
            } else {
                prop_assert!(requested > 0, "with nothing outstanding a pull is always sent");
            }
        }

        #[test]
        fn heartbeats_come_well_inside_the_expiry(ack_wait_ms in 500u64..3_600_000) {
            let t = PullTiming::for_ack_wait(Duration::from_millis(ack_wait_ms));
            prop_assert!(t.heartbeat * 2 <= t.expires);
        }
    }
}
