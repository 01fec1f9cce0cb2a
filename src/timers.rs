//! One timer structure for every held message: a min-heap of (deadline, id, kind).
//! The dispatcher schedules in-progress (`+WPI`) keep-alives and in-place retries
//! here and sleeps until the earliest one; there is no task or timer per message.
//! Entries of messages already settled are skipped when they come due (lazy removal),
//! so the heap holds at most a few entries per held message.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use tokio::time::Instant;

/// What comes due.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Due {
    /// Send `+WPI` for the message, then schedule the next one.
    Progress,
    /// Call the app again for the message (ordered lanes).
    Retry,
}

/// The heap.
#[derive(Debug, Default)]
pub struct Timers {
    heap: BinaryHeap<Reverse<(Instant, u64, Due)>>,
}

impl Timers {
    /// Schedules `due` for message `id` at `at`.
    pub fn schedule(&mut self, at: Instant, id: u64, due: Due) {
        self.heap.push(Reverse((at, id, due)));
    }

    /// The earliest deadline.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((at, _, _))| *at)
    }

    /// Takes one entry that is due at `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<(u64, Due)> {
        if self.next_deadline()? > now {
            return None;
        }
        self.heap.pop().map(|Reverse((_, id, due))| (id, due))
    }

    /// Entries in the heap (for the bound checks in tests).
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether nothing is scheduled.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn entries_come_due_in_deadline_order() {
        let t0 = Instant::now();
        let mut t = Timers::default();
        t.schedule(t0 + Duration::from_millis(30), 1, Due::Progress);
        t.schedule(t0 + Duration::from_millis(10), 2, Due::Retry);
        t.schedule(t0 + Duration::from_millis(20), 3, Due::Progress);
        assert_eq!(t.next_deadline(), Some(t0 + Duration::from_millis(10)));
        assert_eq!(t.pop_due(t0), None);
        let now = t0 + Duration::from_millis(25);
        assert_eq!(t.pop_due(now), Some((2, Due::Retry)));
        assert_eq!(t.pop_due(now), Some((3, Due::Progress)));
        assert_eq!(t.pop_due(now), None);
        assert_eq!(t.len(), 1);
    }
}
