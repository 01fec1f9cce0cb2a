//! Capacity arithmetic of the pull engine, as pure functions: what the next pull may
//! ask for (messages and bytes), and how long pulls live.
//!
//! The invariants: a pull never asks for more than the free room, in messages
//! (`max_buffered − held − already requested`) and in bytes (`max_buffered_bytes −
//! held bytes − bytes already requested`), so the held payload stays within
//! `max_buffered_bytes` (one message larger than the whole room, which the server
//! refuses to a pull that asks for less, is then taken alone when nothing else is
//! held, so that it can never be stuck). With no room and nothing
//! outstanding, one pull is kept open so that a pin stays alive: when the messages
//! are full the server holds it back (the consumer's `max_ack_pending` equals
//! `max_buffered`); when the bytes are full it asks for one byte, which the server
//! cannot fill, so it delivers nothing and only refreshes the pin.

use std::time::Duration;

/// Limits of the pull engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest single pull.
    pub max_batch: u32,
    /// Messages held at most (= the consumer's `max_ack_pending`).
    pub max_buffered: u32,
    /// Payload bytes held at most.
    pub max_bytes: u64,
}

/// An amount of messages and their bytes: what the dispatcher holds, or what
/// outstanding pulls may still deliver.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Held {
    /// Messages.
    pub messages: u32,
    /// Bytes.
    pub bytes: u64,
}

/// What to do about pulling now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextPull {
    /// Send a pull for at most `batch` messages and `max_bytes` bytes.
    Pull {
        /// Messages.
        batch: u32,
        /// Bytes (as the server counts them: subject, reply, headers and payload).
        max_bytes: u64,
    },
    /// No room in bytes for the next message: nothing can be pulled, but a pinned
    /// consumer's pin needs a pull now and then (one that cannot be filled).
    KeepAlive,
    /// Enough is outstanding: wait.
    Wait,
}

/// The pull that keeps a pin alive without delivering: the server counts a message
/// as at least its subject and reply, so one byte is never enough.
pub const KEEP_ALIVE_BYTES: u64 = 1;

impl Limits {
    /// The next pull. `held` is what the dispatcher holds (queued + in flight);
    /// `outstanding` what outstanding pulls may still deliver; `max_message` the
    /// largest message the server may send (its `max_payload` plus room for subject,
    /// reply and headers); `refused` the byte room at which the server last refused
    /// the next message as too large (409), while messages are still held.
    pub fn next_pull(
        self,
        held: Held,
        outstanding: Held,
        max_message: u64,
        refused: Option<u64>,
    ) -> NextPull {
        let room = self
            .max_buffered
            .saturating_sub(held.messages.saturating_add(outstanding.messages));
        let room_bytes = self
            .max_bytes
            .saturating_sub(held.bytes.saturating_add(outstanding.bytes));
        let batch = self.max_batch.max(1);
        if outstanding.messages == 0 {
            if held.messages == 0 {
                if refused.is_some() {
                    // Nothing held and the next message is larger than the whole room:
                    // it goes alone, so that it is never stuck.
                    return NextPull::Pull {
                        batch: 1,
                        max_bytes: room_bytes.max(max_message),
                    };
                }
                let batch = room.clamp(1, batch);
                return NextPull::Pull {
                    batch,
                    max_bytes: share(room_bytes, room, batch, max_message, refused).max(1),
                };
            }
            if room == 0 {
                // Full in messages: the server holds this pull (max_ack_pending).
                return NextPull::Pull {
                    batch: 1,
                    max_bytes: room_bytes.max(KEEP_ALIVE_BYTES),
                };
            }
            if room_bytes == 0 || refused.is_some_and(|r| room_bytes <= r) {
                return NextPull::KeepAlive;
            }
            let batch = room.min(batch);
            return NextPull::Pull {
                batch,
                max_bytes: share(room_bytes, room, batch, max_message, refused),
            };
        }
        // Something is outstanding: top up only when a worthwhile batch fits, so that a
        // busy daemon does not send one pull per settled message, and only when the
        // largest message would fit, so that no pull is a sliver the server fills
        // with one message and then refuses by size.
        let worthwhile = (batch.min(self.max_buffered) / 2).max(1);
        if room >= worthwhile
            && room_bytes >= max_message.min(self.max_bytes).max(1)
            && refused.is_none_or(|r| room_bytes > r)
        {
            let batch = room.min(batch);
            NextPull::Pull {
                batch,
                max_bytes: share(room_bytes, room, batch, max_message, refused),
            }
        } else {
            NextPull::Wait
        }
    }
}

/// A pull's share of the free bytes: in proportion to the messages it asks for among
/// those there is room for (`batch` of `room`), so that one pull does not claim every
/// free byte and leave the next a sliver. A sliver is filled with one message and then
/// refused by size, and nats-server answers that refusal by moving a redelivered
/// message it had taken for the pull to the back of its redelivery queue: the next
/// instance after a handover would see a key's messages out of order. Never less than
/// the largest message when the room allows it; all of it after the server refused
/// the next message as too large (that message needs the room).
fn share(room_bytes: u64, room: u32, batch: u32, max_message: u64, refused: Option<u64>) -> u64 {
    if room == 0 || refused.is_some() {
        return room_bytes;
    }
    let proportional = u128::from(room_bytes) * u128::from(batch) / u128::from(room);
    // At most `room_bytes`: batch ≤ room.
    let proportional = u64::try_from(proportional).unwrap_or(room_bytes);
    proportional.max(max_message).min(room_bytes)
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

    const MIB: u64 = 1 << 20;
    const L: Limits = Limits {
        max_batch: 64,
        max_buffered: 256,
        max_bytes: 64 * MIB,
    };

    fn n(messages: u32) -> Held {
        Held { messages, bytes: 0 }
    }

    fn pull(batch: u32, max_bytes: u64) -> NextPull {
        NextPull::Pull { batch, max_bytes }
    }

    #[test]
    fn pull_size_table() {
        let cases = [
            // held, requested, expected
            (0, 0, pull(64, 16 * MIB)), // a quarter of the room: a quarter of the bytes
            (250, 0, pull(6, 64 * MIB)),
            (256, 0, pull(1, 64 * MIB)),     // full: keep the pin alive
            (300, 0, pull(1, 64 * MIB)),     // over (acks in transit): still one pull
            (0, 64, pull(64, 64 * MIB / 3)), // room for another whole batch
            (100, 128, NextPull::Wait),      // room 28 < 32: wait
            (100, 124, pull(32, 64 * MIB)),  // room 32: worthwhile
            (256, 1, NextPull::Wait),
        ];
        for (held, requested, want) in cases {
            assert_eq!(
                L.next_pull(n(held), n(requested), MIB, None),
                want,
                "held {held} requested {requested}"
            );
        }
        let tiny = Limits {
            max_batch: 64,
            max_buffered: 1,
            max_bytes: MIB,
        };
        assert_eq!(tiny.next_pull(n(0), n(0), MIB, None), pull(1, MIB));
        assert_eq!(tiny.next_pull(n(1), n(0), MIB, None), pull(1, MIB));
        assert_eq!(tiny.next_pull(n(0), n(1), MIB, None), NextPull::Wait);
    }

    #[test]
    fn byte_table() {
        let held = |messages, mib: u64| Held {
            messages,
            bytes: mib * MIB,
        };
        let cases = [
            // held, outstanding, refused, expected
            (held(0, 0), held(0, 0), None, pull(64, 16 * MIB)),
            (held(10, 60), held(0, 0), None, pull(64, 4 * MIB * 64 / 246)),
            (held(10, 63), held(0, 0), None, pull(64, MIB)), // never under the largest message
            (held(10, 64), held(0, 0), None, NextPull::KeepAlive), // bytes full
            (held(10, 70), held(0, 0), None, NextPull::KeepAlive), // over
            // The server refused the next message at 4 MiB of room: until more is free,
            // pulling again would only be refused again.
            (held(10, 60), held(0, 0), Some(4 * MIB), NextPull::KeepAlive),
            (held(10, 59), held(0, 0), Some(4 * MIB), pull(64, 5 * MIB)), // all: it needs it
            (held(10, 34), held(64, 30), None, NextPull::Wait),           // no bytes left to ask
            (
                held(10, 20),
                held(32, 30),
                None,
                pull(64, 14 * MIB * 64 / 214),
            ),
            // A sliver of bytes left: no top-up the largest message would not fit.
            (
                Held {
                    messages: 10,
                    bytes: 33 * MIB + MIB / 2,
                },
                held(32, 30),
                None,
                NextPull::Wait,
            ),
            (held(10, 20), held(32, 30), Some(20 * MIB), NextPull::Wait),
            // Nothing held: a message bigger than the whole room goes alone.
            (held(0, 0), held(0, 0), Some(64 * MIB), pull(1, 64 * MIB)),
        ];
        for (h, out, refused, want) in cases {
            assert_eq!(
                L.next_pull(h, out, MIB, refused),
                want,
                "{h:?} {out:?} {refused:?}"
            );
        }
        let small = Limits {
            max_bytes: 1000,
            ..L
        };
        assert_eq!(small.next_pull(n(0), n(0), 8 * MIB, None), pull(64, 1000));
        assert_eq!(
            small.next_pull(n(0), n(0), 8 * MIB, Some(1000)),
            pull(1, 8 * MIB),
            "refused with nothing held: the largest message goes alone"
        );
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
                                              max_bytes in 1u64..10_000, max_message in 1u64..5_000,
                                              held in 0u32..1200, held_bytes in 0u64..12_000,
                                              requested in 0u32..1200, requested_bytes in 0u64..12_000,
                                              refused in proptest::option::of(0u64..12_000)) {
            let l = Limits { max_batch: batch, max_buffered: buffered, max_bytes };
            let h = Held { messages: held, bytes: if held == 0 { 0 } else { held_bytes } };
            let out = Held { messages: requested, bytes: if requested == 0 { 0 } else { requested_bytes } };
            match l.next_pull(h, out, max_message, refused) {
                NextPull::Pull { batch: b, max_bytes: mb } => {
                    prop_assert!(b >= 1 && b <= batch);
                    prop_assert!(mb >= 1);
                    if requested > 0 {
                        prop_assert!(held + requested + b <= buffered);
                        prop_assert!(h.bytes + out.bytes + mb <= max_bytes);
                        prop_assert!(mb >= max_message.min(max_bytes), "a top-up is never a sliver");
                    } else if held == 0 && refused.is_some() {
                        prop_assert_eq!(b, 1);
                        prop_assert!(mb <= max_bytes.max(max_message));
                    } else if held == 0 {
                        prop_assert!(mb <= max_bytes && b <= buffered.max(1));
                    } else if held < buffered {
                        prop_assert!(held + b <= buffered);
                        prop_assert!(h.bytes + mb <= max_bytes);
                    } else {
                        prop_assert_eq!(b, 1);
                    }
                }
                NextPull::KeepAlive => prop_assert!(requested == 0 && held > 0),
                NextPull::Wait => prop_assert!(requested > 0, "with nothing outstanding a pull is always decided"),
            }
        }

        #[test]
        fn heartbeats_come_well_inside_the_expiry(ack_wait_ms in 500u64..3_600_000) {
            let t = PullTiming::for_ack_wait(Duration::from_millis(ack_wait_ms));
            prop_assert!(t.heartbeat * 2 <= t.expires);
        }
    }
}
