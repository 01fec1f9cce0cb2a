//! Ordered lanes as a pure scheduler: messages of one lane run one at a time, in the
//! order they arrived (stream order); different lanes run in parallel. In `none`
//! mode every message is its own lane, so the scheduler is a plain FIFO.
//!
//! A message's lane is its ordering key ([`LaneKey::of`], pure): the partition, the
//! subject, a subject token (`token:N`) or a header's value (`header:NAME`). A key
//! value longer than [`MAX_KEY_LEN`] bytes is keyed on a hash of it, so that a huge
//! header value never becomes a huge key.
//!
//! The dispatcher pushes message ids, asks for the next runnable one when it has a
//! free slot, and reports when a message is finished. No I/O, no clocks.

use std::collections::{HashMap, VecDeque};
use std::hash::{DefaultHasher, Hasher};
use std::num::NonZeroU8;
use std::sync::Arc;

use crate::message::Delivery;
use crate::seam::Ordering;

/// The longest key value (a `token:N` token, a `header:NAME` value) a lane is keyed
/// on as it is. A longer one is keyed on a 64-bit hash of it ([`LaneKey::Hashed`]):
/// a key is held once per held message and once per lane, and a header value may be
/// as long as a message. Two values whose hashes collide share a lane: their
/// messages wait for each other, but none runs out of order.
pub const MAX_KEY_LEN: usize = 256;

/// Which lane a message belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LaneKey {
    /// No ordering: runs as soon as a slot is free.
    Free,
    /// One lane per partition number.
    Partition(u32),
    /// One lane per subject (partition token stripped); shared, because the key is
    /// kept in several places per held message. Also the key of a message the
    /// `token:N` or `header:NAME` key is missing from.
    Subject(Arc<str>),
    /// One lane per value of a `token:N` or `header:NAME` key of at most
    /// [`MAX_KEY_LEN`] bytes.
    Value(Arc<str>),
    /// One lane per longer value, by its hash (SipHash with fixed keys: the same
    /// value gets the same lane for the life of the process).
    Hashed(u64),
}

impl LaneKey {
    /// The lane of a delivery under `mode`. A message without the key its mode needs
    /// (no partition token) runs unordered: it is terminated anyway. Under `token:N`
    /// a subject with fewer than N tokens, and under `header:NAME` a message without
    /// the header or with an empty value, is keyed on its subject, as under
    /// `subject`. Tokens count on the subject with the partition token stripped, as
    /// `subject` keys on; a header repeated counts by its last value, its name
    /// matched case-insensitively.
    pub fn of(mode: Ordering, d: &Delivery) -> LaneKey {
        let subject = || LaneKey::Subject(Arc::from(d.app_subject.as_str()));
        match mode {
            Ordering::None => LaneKey::Free,
            Ordering::Partition => d.partition.map_or(LaneKey::Free, LaneKey::Partition),
            Ordering::Subject => subject(),
            Ordering::Token(n) => token(&d.app_subject, n).map_or_else(subject, LaneKey::value),
            Ordering::Header(name) => d
                .header(name.as_str())
                .filter(|v| !v.is_empty())
                .map_or_else(subject, LaneKey::value),
        }
    }

    /// A key value, bounded: as it is up to [`MAX_KEY_LEN`] bytes, else its hash.
    fn value(v: &str) -> LaneKey {
        if v.len() <= MAX_KEY_LEN {
            LaneKey::Value(Arc::from(v))
        } else {
            let mut h = DefaultHasher::new();
            h.write(v.as_bytes());
            LaneKey::Hashed(h.finish())
        }
    }
}

/// The subject's `n`-th token, counted from 1; `None` when it has fewer.
fn token(subject: &str, n: NonZeroU8) -> Option<&str> {
    subject
        .split('.')
        .nth(usize::from(n.get()) - 1)
        .filter(|t| !t.is_empty())
}

/// The scheduler. `T` is the message id.
#[derive(Debug)]
pub struct Lanes<T> {
    free: VecDeque<T>,
    waiting: HashMap<LaneKey, VecDeque<T>>,
    /// Lanes with a message in flight (or waiting for an in-place retry).
    busy: HashMap<LaneKey, ()>,
    /// Lanes that are not busy and have waiting messages, oldest first.
    ready: VecDeque<LaneKey>,
    /// Messages that could start now: the free ones and those of lanes not busy.
    runnable: usize,
}

/// Which end of a queue a message goes to.
#[derive(Debug, Clone, Copy)]
enum End {
    /// After the others: a new message.
    Back,
    /// Before them: a message put back.
    Front,
}

impl End {
    fn put<U>(self, q: &mut VecDeque<U>, x: U) {
        match self {
            End::Back => q.push_back(x),
            End::Front => q.push_front(x),
        }
    }
}

impl<T> Default for Lanes<T> {
    fn default() -> Self {
        Lanes {
            free: VecDeque::new(),
            waiting: HashMap::new(),
            busy: HashMap::new(),
            ready: VecDeque::new(),
            runnable: 0,
        }
    }
}

impl<T> Lanes<T> {
    /// Adds a message at the back of its lane.
    pub fn push(&mut self, key: LaneKey, id: T) {
        self.put(key, id, End::Back);
    }

    /// Puts a message back at the front of its lane (its lane is busy: it runs again
    /// when the lane is done, before the ones that came after it).
    pub fn push_front(&mut self, key: LaneKey, id: T) {
        self.put(key, id, End::Front);
    }

    /// Puts `id` in its lane, and its lane among the ready ones when it was idle,
    /// both at `end`.
    fn put(&mut self, key: LaneKey, id: T, end: End) {
        if key == LaneKey::Free {
            end.put(&mut self.free, id);
            self.runnable += 1;
            return;
        }
        let busy = self.busy.contains_key(&key);
        let q = self.waiting.entry(key.clone()).or_default();
        end.put(q, id);
        if !busy {
            self.runnable += 1;
            if q.len() == 1 {
                end.put(&mut self.ready, key);
            }
        }
    }

    /// The next runnable message; its lane becomes busy until [`Lanes::done`].
    pub fn pop(&mut self) -> Option<(LaneKey, T)> {
        self.pop_run(1, |_| true)
            .and_then(|(key, mut run)| run.pop().map(|id| (key, id)))
    }

    /// The next runnable messages of one lane, in order: at most `max`, while `fits`
    /// accepts them (a batch takes what is ready: several messages of one key, in
    /// stream order). The lane becomes busy until [`Lanes::done`]. `None` when
    /// nothing is runnable, or the next message does not fit.
    pub fn pop_run(
        &mut self,
        max: usize,
        mut fits: impl FnMut(&T) -> bool,
    ) -> Option<(LaneKey, Vec<T>)> {
        // Ordered lanes first (they may have waited behind a busy head), then free ones.
        if let Some(key) = self.ready.front().cloned() {
            let q = self.waiting.get_mut(&key)?;
            let mut run = Vec::new();
            while run.len() < max && q.front().is_some_and(&mut fits) {
                run.extend(q.pop_front());
            }
            if run.is_empty() {
                return None;
            }
            self.ready.pop_front();
            self.runnable -= run.len() + q.len();
            if q.is_empty() {
                self.waiting.remove(&key);
            }
            self.busy.insert(key.clone(), ());
            return Some((key, run));
        }
        let mut run = Vec::new();
        while run.len() < max && self.free.front().is_some_and(&mut fits) {
            run.extend(self.free.pop_front());
        }
        self.runnable -= run.len();
        (!run.is_empty()).then_some((LaneKey::Free, run))
    }

    /// The lane's running message(s) are finished: its next one may run.
    pub fn done(&mut self, key: &LaneKey) {
        if *key == LaneKey::Free || self.busy.remove(key).is_none() {
            return;
        }
        if let Some(q) = self.waiting.get(key) {
            self.runnable += q.len();
            self.ready.push_back(key.clone());
        }
    }

    /// Messages that could start now.
    pub fn runnable(&self) -> usize {
        self.runnable
    }

    /// Takes every waiting message (shutdown), leaving the lanes empty.
    pub fn drain(&mut self) -> Vec<T> {
        let mut out: Vec<T> = self.free.drain(..).collect();
        for (_, q) in self.waiting.drain() {
            out.extend(q);
        }
        self.ready.clear();
        self.runnable = 0;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;
    use proptest::prelude::*;

    fn k(s: &str) -> LaneKey {
        LaneKey::Subject(s.into())
    }

    #[test]
    fn one_message_per_lane_runs_at_a_time_in_order() {
        let mut l = Lanes::default();
        l.push(k("a"), 1);
        l.push(k("a"), 2);
        l.push(k("b"), 3);
        assert_eq!(l.pop(), Some((k("a"), 1)));
        assert_eq!(l.pop(), Some((k("b"), 3)));
        assert_eq!(l.pop(), None, "a is busy");
        l.done(&k("a"));
        assert_eq!(l.pop(), Some((k("a"), 2)));
        assert_eq!(l.runnable(), 0);
    }

    #[test]
    fn free_messages_run_without_waiting() {
        let mut l = Lanes::default();
        for i in 0..3 {
            l.push(LaneKey::Free, i);
        }
        assert_eq!(l.pop(), Some((LaneKey::Free, 0)));
        assert_eq!(l.pop(), Some((LaneKey::Free, 1)));
        l.done(&LaneKey::Free);
        assert_eq!(l.pop(), Some((LaneKey::Free, 2)));
    }

    #[test]
    fn a_message_arriving_for_a_busy_lane_waits_for_done() {
        let mut l = Lanes::default();
        l.push(LaneKey::Partition(1), 1);
        assert!(l.pop().is_some());
        l.push(LaneKey::Partition(1), 2);
        assert_eq!(l.pop(), None);
        l.done(&LaneKey::Partition(1));
        assert_eq!(l.pop(), Some((LaneKey::Partition(1), 2)));
    }

    #[test]
    fn drain_empties_everything() {
        let mut l = Lanes::default();
        l.push(k("a"), 1);
        l.push(k("a"), 2);
        l.push(LaneKey::Free, 3);
        assert!(l.pop().is_some());
        let mut left = l.drain();
        left.sort();
        assert_eq!(left, [2, 3]);
        assert_eq!(l.runnable(), 0);
        assert_eq!(l.pop(), None);
    }

    #[test]
    fn a_run_takes_one_lanes_ready_messages_in_order_and_requeued_ones_come_first() {
        let mut l = Lanes::default();
        for (key, id) in [("a", 1), ("a", 2), ("b", 3), ("a", 4)] {
            l.push(k(key), id);
        }
        assert_eq!(l.runnable(), 4);
        assert_eq!(l.pop_run(10, |_| true), Some((k("a"), vec![1, 2, 4])));
        assert_eq!(l.runnable(), 1);
        l.push(k("a"), 5);
        assert_eq!(l.runnable(), 1, "a is busy");
        // 2 and 4 are put back (a retry of 1 holds the lane), then the lane is done.
        l.push_front(k("a"), 4);
        l.push_front(k("a"), 2);
        assert_eq!(l.pop_run(10, |_| true), Some((k("b"), vec![3])));
        l.done(&k("a"));
        assert_eq!(l.runnable(), 3);
        assert_eq!(l.pop_run(2, |_| true), Some((k("a"), vec![2, 4])));
        l.done(&k("a"));
        // A message that does not fit stays.
        assert_eq!(l.pop_run(10, |id| *id != 5), None);
        assert_eq!(l.pop(), Some((k("a"), 5)));
    }

    // === the key of a delivery ===

    /// A delivery of `subject` (a group's when `partition` is set: its subject then
    /// carries the partition token) with these headers.
    fn delivery(subject: &str, partition: Option<u32>, headers: &[(&str, &str)]) -> Delivery {
        Delivery {
            message: Message {
                subject: partition.map_or(subject.to_string(), |p| format!("{p}.{subject}")),
                headers: headers
                    .iter()
                    .map(|(n, v)| (n.to_string(), v.to_string()))
                    .collect(),
                payload: bytes::Bytes::new(),
            },
            meta: Err("not needed".into()),
            partition,
            app_subject: subject.to_string(),
            origin: None,
            flaw: None,
        }
    }

    fn mode(text: &str) -> Ordering {
        Ordering::parse(text).unwrap()
    }

    fn value(v: &str) -> LaneKey {
        LaneKey::Value(v.into())
    }

    #[test]
    fn each_mode_keys_a_delivery_on_its_key_and_on_the_subject_when_that_is_missing() {
        let long = "v".repeat(MAX_KEY_LEN);
        let longer = "v".repeat(MAX_KEY_LEN + 1);
        let plain = delivery("orders.eu.1", None, &[]);
        let grouped = delivery("orders.eu.1", Some(3), &[]);
        let keyed = |headers: &[(&str, &str)]| delivery("orders.eu.1", None, headers);
        for (text, d, expected) in [
            ("none", &plain, LaneKey::Free),
            ("partition", &plain, LaneKey::Free),
            ("partition", &grouped, LaneKey::Partition(3)),
            ("subject", &plain, k("orders.eu.1")),
            ("subject", &grouped, k("orders.eu.1")),
            ("token:1", &plain, value("orders")),
            ("token:2", &plain, value("eu")),
            ("token:3", &plain, value("1")),
            // Fewer tokens: the whole subject.
            ("token:4", &plain, k("orders.eu.1")),
            ("token:255", &plain, k("orders.eu.1")),
            // The partition token is not counted.
            ("token:1", &grouped, value("orders")),
            ("token:4", &grouped, k("orders.eu.1")),
            ("header:X-Key", &keyed(&[("X-Key", "k1")]), value("k1")),
            // Names match case-insensitively, both ways.
            ("header:X-Key", &keyed(&[("x-key", "k1")]), value("k1")),
            ("header:x-key", &keyed(&[("X-KEY", "k1")]), value("k1")),
            // A repeated header counts by its last value.
            (
                "header:X-Key",
                &keyed(&[("X-Key", "k1"), ("X-Key", "k2")]),
                value("k2"),
            ),
            // Absent or empty: the subject.
            (
                "header:X-Key",
                &keyed(&[("X-Other", "k1")]),
                k("orders.eu.1"),
            ),
            ("header:X-Key", &keyed(&[("X-Key", "")]), k("orders.eu.1")),
            ("header:X-Key", &plain, k("orders.eu.1")),
            // Up to the bound as it is.
            ("header:X-Key", &keyed(&[("X-Key", &long)]), value(&long)),
        ] {
            assert_eq!(LaneKey::of(mode(text), d), expected, "{text} {d:?}");
        }
        // Past the bound: a hash, the same for the same value, another for another.
        let hashed = |v: &str| LaneKey::of(mode("header:X-Key"), &keyed(&[("X-Key", v)]));
        assert!(matches!(hashed(&longer), LaneKey::Hashed(_)));
        assert_eq!(hashed(&longer), hashed(&longer.clone()));
        assert_ne!(hashed(&longer), hashed(&format!("{longer}w")));
        assert_ne!(hashed(&longer), hashed(&long));
    }

    #[test]
    fn messages_of_different_keys_run_at_once_and_those_of_one_key_wait() {
        let m = mode("header:X-Key");
        let of =
            |subject: &str, key: &str| LaneKey::of(m, &delivery(subject, None, &[("X-Key", key)]));
        let mut l = Lanes::default();
        // One subject, two keys; one key over two subjects.
        l.push(of("s.1", "a"), 1);
        l.push(of("s.1", "b"), 2);
        l.push(of("s.2", "a"), 3);
        assert_eq!(l.pop(), Some((value("a"), 1)));
        assert_eq!(l.pop(), Some((value("b"), 2)), "another key runs beside it");
        assert_eq!(l.pop(), None, "key a is busy, whatever the subject");
        l.done(&value("a"));
        assert_eq!(l.pop(), Some((value("a"), 3)));
    }

    /// A delivery for the property tests: a subject of 1 to 3 tokens from a small
    /// set, maybe grouped, maybe with the key header (its name in any case).
    fn arb_delivery() -> impl Strategy<Value = Delivery> {
        let subject =
            proptest::collection::vec(prop_oneof!["a", "b", "c"], 1..4).prop_map(|t| t.join("."));
        let value = prop_oneof![
            Just(String::new()),
            "[kK][0-3]",
            "[x]{250,260}",
            "[xy]{300}",
        ];
        let name = prop_oneof!["x-key", "X-Key", "X-KEY"];
        (
            subject,
            proptest::option::of(0u32..3),
            proptest::option::of((name, value)),
        )
            .prop_map(|(subject, partition, header)| {
                let headers: Vec<(String, String)> = header.into_iter().collect();
                let headers: Vec<(&str, &str)> = headers
                    .iter()
                    .map(|(n, v)| (n.as_str(), v.as_str()))
                    .collect();
                delivery(&subject, partition, &headers)
            })
    }

    /// The key a delivery has under `mode`, as the documentation says it, unbounded.
    fn said_key(mode: Ordering, d: &Delivery) -> String {
        let subject = format!("subject {}", d.app_subject);
        match mode {
            Ordering::Token(n) => d
                .app_subject
                .split('.')
                .nth(usize::from(n.get()) - 1)
                .map_or(subject, |t| format!("value {t}")),
            Ordering::Header(_) => d
                .header("x-key")
                .filter(|v| !v.is_empty())
                .map_or(subject, |v| format!("value {v}")),
            _ => unreachable!("only the value modes"),
        }
    }

    fn arb_value_mode() -> impl Strategy<Value = Ordering> {
        prop_oneof![
            (1u8..5).prop_map(|n| mode(&format!("token:{n}"))),
            Just(mode("header:X-Key")),
        ]
    }

    proptest! {
        /// Same key, same lane; another key, another lane (but for a hash
        /// collision); a key never longer than the bound.
        #[test]
        fn a_lane_is_its_key_bounded(m in arb_value_mode(), a in arb_delivery(), b in arb_delivery()) {
            let (ka, kb) = (LaneKey::of(m, &a), LaneKey::of(m, &b));
            prop_assert_eq!(said_key(m, &a) == said_key(m, &b), ka == kb, "{:?} {:?}", ka, kb);
            if let LaneKey::Value(v) = &ka {
                prop_assert!(v.len() <= MAX_KEY_LEN);
            }
        }

        /// Deliveries keyed by a value mode through the lanes, taken in runs (batches)
        /// and finished in any order: within a key, messages start in stream order and
        /// never two runs of it at once.
        #[test]
        fn each_keys_order_holds_through_runs(
            m in arb_value_mode(),
            deliveries in proptest::collection::vec(arb_delivery(), 1..40),
            ops in proptest::collection::vec((0u8..2, 1usize..4), 1..200),
        ) {
            let said: Vec<String> = deliveries.iter().map(|d| said_key(m, d)).collect();
            let mut l = Lanes::default();
            for (id, d) in deliveries.iter().enumerate() {
                l.push(LaneKey::of(m, d), id);
            }
            let mut running: Vec<(LaneKey, Vec<usize>)> = Vec::new();
            let mut started: Vec<usize> = Vec::new();
            for (op, n) in ops {
                if op == 0 {
                    if let Some((key, run)) = l.pop_run(n, |_| true) {
                        for id in &run {
                            prop_assert!(
                                !running.iter().flat_map(|(_, r)| r).any(|o| said[*o] == said[*id]),
                                "two runs of {} at once", said[*id]
                            );
                        }
                        started.extend(&run);
                        running.push((key, run));
                    }
                } else if !running.is_empty() {
                    let (key, _) = running.remove(n % running.len());
                    l.done(&key);
                }
            }
            for key in said.iter().collect::<std::collections::HashSet<_>>() {
                let of_key: Vec<usize> = started.iter().copied().filter(|id| said[*id] == *key).collect();
                prop_assert!(of_key.windows(2).all(|w| w[0] < w[1]), "{} out of order: {:?}", key, of_key);
            }
        }
    }

    proptest! {
        /// The runnable count is what could start, whatever happens.
        #[test]
        fn runnable_counts_what_could_start(ops in proptest::collection::vec((0u8..5, 0u32..4), 1..200)) {
            let mut l: Lanes<u32> = Lanes::default();
            let mut next = 0;
            let mut running: Vec<LaneKey> = Vec::new();
            for (op, lane) in ops {
                let key = if lane == 3 { LaneKey::Free } else { LaneKey::Partition(lane) };
                match op {
                    0 => { l.push(key, next); next += 1; }
                    1 => if let Some((key, run)) = l.pop_run(3, |_| true) {
                        if key != LaneKey::Free { running.push(key); }
                        prop_assert!(!run.is_empty());
                    },
                    2 => if !running.is_empty() {
                        let key = running.remove(lane as usize % running.len());
                        l.done(&key);
                    },
                    3 => { l.push_front(key, next); next += 1; }
                    _ => { l.pop(); }
                }
                let brute = l.free.len() + l.waiting.iter()
                    .filter(|(key, _)| !l.busy.contains_key(key))
                    .map(|(_, q)| q.len()).sum::<usize>();
                prop_assert_eq!(l.runnable(), brute);
            }
        }

        /// A model run: random pushes, pops and completions; per lane, ids come out in
        /// push order and never two at once.
        #[test]
        fn lanes_keep_order_and_exclusivity(ops in proptest::collection::vec((0u8..3, 0u32..4), 1..200)) {
            let mut l = Lanes::default();
            let mut next = 0u32;
            let mut running: Vec<(LaneKey, u32)> = Vec::new();
            let mut last_started: HashMap<LaneKey, u32> = HashMap::new();
            for (op, lane) in ops {
                match op {
                    0 => { l.push(LaneKey::Partition(lane), next); next += 1; }
                    1 => if let Some((key, id)) = l.pop() {
                        prop_assert!(!running.iter().any(|(k, _)| *k == key), "two at once in {key:?}");
                        if let Some(prev) = last_started.insert(key.clone(), id) { prop_assert!(id > prev); }
                        running.push((key, id));
                    },
                    _ => if !running.is_empty() {
                        let (key, _) = running.remove(lane as usize % running.len());
                        l.done(&key);
                    },
                }
            }
        }
    }
}
