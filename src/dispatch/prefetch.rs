//! Markers read ahead: the keys of what a pull brings are read together (one
//! [`Markers::marked_many`](crate::seam::markers::Markers::marked_many) per turn) while
//! the messages wait for a slot, so that an attempt finds its marker already read
//! instead of a round trip of its own. [`Prefetch`] is the bookkeeping, pure: which
//! keys wait to be read, which are being read or were, and when an answer is too old
//! to be used.
//!
//! An answer is taken once: a second delivery under the same key (a `Nats-Msg-Id`
//! sent twice in one pull, a redelivery) reads its marker at its attempt, as without
//! read-ahead, and so does a key this process wrote a marker for meanwhile
//! ([`Prefetch::forget`]). An answer older than the bound (the consumer's `ack_wait`)
//! is not used, and at most [`Prefetch::new`]'s `capacity` answers are kept: what a
//! message never took (it was released, routed elsewhere, or left with a handover)
//! goes after one bound, or sooner when newer keys need the room.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// What a read-ahead found under a key (`None`: no marker).
pub(super) type Found = Option<Bytes>;

/// Where a read-ahead's answer goes; dropped unanswered when the read failed (the
/// attempt then reads on its own, and counts a failure as without read-ahead).
pub(super) type Answer = oneshot::Sender<Found>;

/// One key read ahead, or to be.
#[derive(Debug)]
struct ReadAhead {
    /// Which insertion this is (a key taken and queued again is a new one).
    generation: u64,
    /// When it was queued.
    at: Instant,
    answer: oneshot::Receiver<Found>,
}

/// The read-ahead's state (one per source).
#[derive(Debug)]
pub(super) struct Prefetch {
    entries: HashMap<String, ReadAhead>,
    /// Keys in the order queued, with their generation, for expiry.
    order: VecDeque<(String, u64, Instant)>,
    /// Keys not handed to a reader yet.
    queued: Vec<(String, Answer)>,
    /// A reader is at it: it takes what is queued when its turn ends.
    reading: bool,
    generation: u64,
    capacity: usize,
    max_age: Duration,
}

impl Prefetch {
    /// At most `capacity` keys kept, none used after `max_age`.
    pub(super) fn new(capacity: usize, max_age: Duration) -> Prefetch {
        Prefetch {
            entries: HashMap::new(),
            order: VecDeque::new(),
            queued: Vec::new(),
            reading: false,
            generation: 0,
            capacity: capacity.max(1),
            max_age,
        }
    }

    /// Queues `key` to be read ahead, unless it is already (another delivery under
    /// the same key: the first one takes the answer). Drops what is too old, and the
    /// oldest keys beyond the capacity.
    pub(super) fn queue(&mut self, key: String, now: Instant) {
        self.expire(now);
        if self.entries.contains_key(&key) {
            return;
        }
        while self.entries.len() >= self.capacity {
            let Some((old, generation, _)) = self.order.pop_front() else {
                break;
            };
            self.drop_entry(&old, generation);
        }
        self.generation += 1;
        let (tx, rx) = oneshot::channel();
        self.entries.insert(
            key.clone(),
            ReadAhead {
                generation: self.generation,
                at: now,
                answer: rx,
            },
        );
        self.order.push_back((key.clone(), self.generation, now));
        self.queued.push((key, tx));
    }

    /// The keys a new reader is to read, when some are queued and no reader is at it
    /// (the reader then takes its next turns with [`Prefetch::next_turn`]).
    pub(super) fn start(&mut self) -> Option<Vec<(String, Answer)>> {
        if self.reading || self.queued.is_empty() {
            return None;
        }
        self.reading = true;
        Some(std::mem::take(&mut self.queued))
    }

    /// A reader's next turn: what was queued meanwhile; `None` ends the reader.
    pub(super) fn next_turn(&mut self) -> Option<Vec<(String, Answer)>> {
        if self.queued.is_empty() {
            self.reading = false;
            return None;
        }
        Some(std::mem::take(&mut self.queued))
    }

    /// The answer read ahead for `key`, taken (a later delivery reads its own): `None`
    /// when there is none, or it is older than the bound.
    pub(super) fn take(&mut self, key: &str, now: Instant) -> Option<oneshot::Receiver<Found>> {
        let e = self.entries.remove(key)?;
        (now.saturating_duration_since(e.at) <= self.max_age).then_some(e.answer)
    }

    /// A marker was written for `key` here: what was read before is out of date.
    pub(super) fn forget(&mut self, key: &str) {
        self.entries.remove(key);
    }

    /// Keys kept (read, being read, or queued).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    fn expire(&mut self, now: Instant) {
        while let Some((key, generation, at)) = self.order.front() {
            if now.saturating_duration_since(*at) <= self.max_age {
                break;
            }
            let (key, generation) = (key.clone(), *generation);
            self.order.pop_front();
            self.drop_entry(&key, generation);
        }
        // Taken and forgotten keys leave their place in the order behind: keep it
        // within twice the capacity.
        if self.order.len() > 2 * self.capacity {
            let entries = &self.entries;
            self.order
                .retain(|(k, g, _)| entries.get(k).is_some_and(|e| e.generation == *g));
        }
    }

    fn drop_entry(&mut self, key: &str, generation: u64) {
        if self
            .entries
            .get(key)
            .is_some_and(|e| e.generation == generation)
        {
            self.entries.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn keys(turn: &[(String, Answer)]) -> Vec<&str> {
        turn.iter().map(|(k, _)| k.as_str()).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_pulls_keys_are_read_in_turns_and_each_answer_is_taken_once() {
        let mut p = Prefetch::new(100, 30 * S);
        let now = Instant::now();
        for k in ["a", "b", "a", "c"] {
            p.queue(k.to_string(), now);
        }
        let first = p.start().unwrap();
        assert_eq!(
            keys(&first),
            ["a", "b", "c"],
            "a key queued twice is read once"
        );
        assert!(p.start().is_none(), "one reader at a time");
        p.queue("d".to_string(), now);
        let mut second = p.next_turn().unwrap();
        assert_eq!(keys(&second), ["d"], "queued during a turn: the next one");
        assert!(p.next_turn().is_none(), "nothing queued: the reader ends");
        p.queue("e".to_string(), now);
        assert_eq!(keys(&p.start().unwrap()), ["e"], "and a new one starts");

        for (k, tx) in first {
            tx.send((k == "b").then(|| Bytes::from("v"))).unwrap();
        }
        assert_eq!(p.take("a", now).unwrap().await.unwrap(), None);
        assert_eq!(
            p.take("b", now).unwrap().await.unwrap(),
            Some(Bytes::from("v"))
        );
        assert!(p.take("a", now).is_none(), "taken once");
        // A read that failed drops its answers: the attempt reads on its own.
        second.clear();
        assert!(p.take("d", now).unwrap().await.is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn a_marker_written_here_and_an_old_answer_are_not_used() {
        let mut p = Prefetch::new(100, 30 * S);
        let now = Instant::now();
        p.queue("a".into(), now);
        p.queue("b".into(), now);
        p.forget("a");
        assert!(p.take("a", now).is_none());
        assert!(p.take("b", now + 31 * S).is_none(), "older than ack_wait");
        p.queue("c".into(), now);
        p.queue("d".into(), now + 31 * S);
        assert_eq!(p.len(), 1, "c expired when d came");
    }

    #[tokio::test(start_paused = true)]
    async fn at_most_capacity_keys_are_kept_the_oldest_go_first() {
        let mut p = Prefetch::new(3, 30 * S);
        let now = Instant::now();
        for i in 0..10 {
            p.queue(format!("k{i}"), now);
            if i % 2 == 0 {
                // Taken keys leave the order behind; it stays bounded.
                p.take(&format!("k{i}"), now);
            }
        }
        assert!(p.len() <= 3);
        assert!(p.order.len() <= 6 + 1);
        assert!(p.take("k9", now).is_some());
        assert!(p.take("k1", now).is_none(), "the oldest went");
    }
}
