//! Ordered lanes as a pure scheduler: messages of one lane run one at a time, in the
//! order they arrived (stream order); different lanes run in parallel. In `none`
//! mode every message is its own lane, so the scheduler is a plain FIFO.
//!
//! The dispatcher pushes message ids, asks for the next runnable one when it has a
//! free slot, and reports when a message is finished. No I/O, no clocks.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::message::Delivery;
use crate::seam::Ordering;

/// Which lane a message belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LaneKey {
    /// No ordering: runs as soon as a slot is free.
    Free,
    /// One lane per partition number.
    Partition(u32),
    /// One lane per subject (partition token stripped); shared, because the key is
    /// kept in several places per held message.
    Subject(Arc<str>),
}

impl LaneKey {
    /// The lane of a delivery under `mode`. A message without the key its mode needs
    /// (no partition token) runs unordered: it is terminated anyway.
    pub fn of(mode: Ordering, d: &Delivery) -> LaneKey {
        match mode {
            Ordering::None => LaneKey::Free,
            Ordering::Partition => d.partition.map_or(LaneKey::Free, LaneKey::Partition),
            Ordering::Subject => LaneKey::Subject(Arc::from(d.app_subject.as_str())),
        }
    }
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
        if key == LaneKey::Free {
            self.free.push_back(id);
            self.runnable += 1;
            return;
        }
        let busy = self.busy.contains_key(&key);
        let q = self.waiting.entry(key.clone()).or_default();
        q.push_back(id);
        if !busy {
            self.runnable += 1;
            if q.len() == 1 {
                self.ready.push_back(key);
            }
        }
    }

    /// Puts a message back at the front of its lane (its lane is busy: it runs again
    /// when the lane is done, before the ones that came after it).
    pub fn push_front(&mut self, key: LaneKey, id: T) {
        if key == LaneKey::Free {
            self.free.push_front(id);
            self.runnable += 1;
            return;
        }
        let busy = self.busy.contains_key(&key);
        let q = self.waiting.entry(key.clone()).or_default();
        q.push_front(id);
        if !busy {
            self.runnable += 1;
            if q.len() == 1 {
                self.ready.push_front(key);
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
