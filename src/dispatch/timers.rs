//! One timer structure for every held message: an ordered set of (deadline, id,
//! kind). The dispatcher schedules in-progress (`+WPI`) keep-alives and in-place
//! retries here and sleeps until the earliest one; there is no task or timer per
//! message. A settled message's entries are cancelled with it, so the set holds at
//! most one keep-alive and one retry per held message.

use std::collections::BTreeSet;

use tokio::time::Instant;

/// What comes due.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Due {
    /// Send `+WPI` for the message, then schedule the next one.
    Progress,
    /// Call the app again for the message (ordered lanes, an unreachable app), or try
    /// its dead letter again.
    Retry,
}

/// The deadlines.
#[derive(Debug, Default)]
pub struct Timers {
    set: BTreeSet<(Instant, u64, Due)>,
}

impl Timers {
    /// Schedules `due` for message `id` at `at`.
    pub fn schedule(&mut self, at: Instant, id: u64, due: Due) {
        self.set.insert((at, id, due));
    }

    /// Removes what [`Timers::schedule`] added with the same arguments.
    pub fn cancel(&mut self, at: Instant, id: u64, due: Due) {
        self.set.remove(&(at, id, due));
    }

    /// The earliest deadline.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.set.first().map(|(at, _, _)| *at)
    }

    /// Takes one entry that is due at `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<(u64, Due)> {
        if self.next_deadline()? > now {
            return None;
        }
        self.set.pop_first().map(|(_, id, due)| (id, due))
    }

    /// Entries scheduled.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.set.len()
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

    #[test]
    fn cancelled_entries_are_gone() {
        let t0 = Instant::now();
        let mut t = Timers::default();
        t.schedule(t0, 1, Due::Progress);
        t.schedule(t0, 1, Due::Retry);
        t.schedule(t0, 2, Due::Progress);
        t.cancel(t0, 1, Due::Progress);
        t.cancel(t0, 1, Due::Retry);
        t.cancel(t0, 9, Due::Retry); // absent: nothing happens
        assert_eq!(t.len(), 1);
        assert_eq!(t.pop_due(t0), Some((2, Due::Progress)));
        assert_eq!(t.next_deadline(), None);
    }
}
