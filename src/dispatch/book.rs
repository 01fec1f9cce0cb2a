//! The dispatcher's book: every message it holds (queued, in flight, waiting for a
//! retry, or for its dead letter), by id, with its lane, its timers and the payload
//! bytes held. A message leaves the book with everything that points at it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;

use super::lanes::{LaneKey, Lanes};
use super::timers::{Due, Timers};
use crate::admission::{Reach, Sample};
use crate::capacity::Held;
use crate::message::Delivery;
use crate::ops::traces::Active;
use crate::policy::TermReason;

/// The app's permanent verdict on a message whose dead letter is still to be
/// published.
#[derive(Debug, Clone)]
pub(super) struct Verdict {
    pub(super) reason: TermReason,
    /// The app's last HTTP status, if it answered.
    pub(super) status: Option<u16>,
    /// Attempts made.
    pub(super) attempts: u32,
    /// Dead-letter publishes tried so far.
    pub(super) tries: u32,
}

/// One held message.
pub(super) struct HeldMessage<T> {
    pub(super) delivery: Arc<Delivery>,
    pub(super) settler: T,
    pub(super) lane: LaneKey,
    pub(super) received: Instant,
    /// The attempt the next request makes (delivery count + in-place retries).
    pub(super) attempt: u32,
    /// When its next `+WPI` is scheduled.
    pub(super) progress_at: Instant,
    /// Set while it waits for a retry (in place, or of its dead letter).
    pub(super) retry_at: Option<Instant>,
    /// Set when only its dead-lettering remains (the publish failed on its last
    /// delivery: a NAK would never be redelivered).
    pub(super) verdict: Option<Verdict>,
    /// Its delivery's span (with span export on), ended when it leaves the book.
    pub(super) span: Option<Active>,
}

/// What a message task reports back.
pub(super) enum Step {
    /// Settled (or given up at the grace deadline): the message is no longer held.
    Settled(Settlement),
    /// Ordered lane: call the app again after the delay (one more attempt); the
    /// message stays held.
    RetryIn(Duration),
    /// The app was unreachable: keep the message and offer it again when the app is
    /// back; no attempt is counted.
    Hold,
    /// Its last delivery, and the dead letter could not be published: keep it and try
    /// the dead letter again after the delay.
    DeadLetterIn(Duration, Verdict),
    /// Batch delivery, ordered lanes: an earlier message of its key in the batch was
    /// not acked, so it goes back to the front of its lane (no attempt counted).
    Requeue,
}

/// How a message that is no longer held ended, for its span: `ack`, `retry` (with
/// its delay), `term`, `dlq`, or `released` (handed back without a decision).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Settlement {
    pub(super) outcome: &'static str,
    pub(super) delay: Option<Duration>,
}

impl Settlement {
    /// Handed back without a decision (a release, the grace over).
    pub(super) const RELEASED: Settlement = Settlement {
        outcome: "released",
        delay: None,
    };
}

impl Step {
    /// Whether the message still occupies its lane after this step (its lane must not
    /// start a later message yet).
    pub(super) fn occupies_lane(&self) -> bool {
        matches!(self, Step::RetryIn(_) | Step::Hold | Step::DeadLetterIn(..))
    }
}

/// A task's report: what happened to each message it carried (one, or a batch).
pub(super) struct Done {
    pub(super) steps: Vec<(u64, Step)>,
    pub(super) reach: Reach,
    /// What the task's request said of the app's capacity (none: it made none).
    pub(super) sample: Option<Sample>,
}

/// What may start now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fill {
    /// Due retries first, then lanes, up to `max_in_flight`.
    All,
    /// The app is unreachable: one due retry at a time, as a probe.
    Probe,
}

/// The book.
pub(super) struct Book<T> {
    pub(super) held: HashMap<u64, HeldMessage<T>>,
    /// The stream sequences of what is held, to fold a redelivery of a held message.
    seqs: HashSet<u64>,
    /// Payload bytes held.
    bytes: u64,
    /// Held messages with a verdict: kept only for their dead letter.
    letters: usize,
    pub(super) lanes: Lanes<u64>,
    pub(super) due: VecDeque<u64>,
    pub(super) timers: Timers,
    pub(super) tasks: JoinSet<Done>,
    /// Which messages each running task serves (to free their lanes if it panics).
    pub(super) running: HashMap<tokio::task::Id, Vec<u64>>,
    next_id: u64,
}

/// What one task's steps leave in each lane they touched: whether a message still
/// occupies it, and what goes back to its front, in order.
#[derive(Debug, Default)]
pub(super) struct LaneReturns(Vec<(LaneKey, bool, Vec<u64>)>);

impl LaneReturns {
    /// A step of a message of `lane`: it still occupies it, or sends `requeue` back.
    pub(super) fn note(&mut self, lane: LaneKey, occupies: bool, requeue: Option<u64>) {
        match self.0.iter_mut().find(|(key, _, _)| *key == lane) {
            Some((_, occupied, back)) => {
                *occupied |= occupies;
                back.extend(requeue);
            }
            None => self.0.push((lane, occupies, requeue.into_iter().collect())),
        }
    }
}

impl<T> Book<T> {
    /// The lane of a held message.
    pub(super) fn lane_of(&self, id: u64) -> Option<LaneKey> {
        self.held.get(&id).map(|e| e.lane.clone())
    }

    /// A task's lanes after its steps: what it sends back goes to the front of its
    /// lane in its order, and a lane nothing occupies any more is free.
    pub(super) fn return_lanes(&mut self, returns: LaneReturns) {
        for (lane, occupied, back) in returns.0 {
            for id in back.into_iter().rev() {
                self.lanes.push_front(lane.clone(), id);
            }
            if !occupied {
                self.lanes.done(&lane);
            }
        }
    }

    /// Messages kept only for their dead letter (the DLQ did not store it yet).
    pub(super) fn letters_waiting(&self) -> usize {
        self.letters
    }

    /// Keeps a held message for its dead letter (the verdict replaces an earlier one).
    pub(super) fn keep_for_letter(&mut self, id: u64, verdict: Verdict) {
        if let Some(e) = self.held.get_mut(&id)
            && e.verdict.replace(verdict).is_none()
        {
            self.letters += 1;
        }
    }

    pub(super) fn new() -> Book<T> {
        Book {
            held: HashMap::new(),
            seqs: HashSet::new(),
            bytes: 0,
            letters: 0,
            lanes: Lanes::default(),
            due: VecDeque::new(),
            timers: Timers::default(),
            tasks: JoinSet::new(),
            running: HashMap::new(),
            next_id: 0,
        }
    }

    /// Takes a delivery in: queued in its lane, its first keep-alive scheduled.
    /// `None` when it is a redelivery of a message already held (JetStream settles by
    /// stream sequence, so the held copy settles it too).
    pub(super) fn hold(
        &mut self,
        delivery: Delivery,
        settler: T,
        lane: LaneKey,
        progress_at: Instant,
        span: Option<Active>,
    ) -> Option<u64> {
        let seq = delivery.stream_seq();
        if seq != 0 && !self.seqs.insert(seq) {
            return None;
        }
        let id = self.next_id;
        self.next_id += 1;
        self.lanes.push(lane.clone(), id);
        self.timers.schedule(progress_at, id, Due::Progress);
        self.bytes = self
            .bytes
            .saturating_add(delivery.message.payload.len() as u64);
        self.held.insert(
            id,
            HeldMessage {
                attempt: delivery.delivered(),
                delivery: Arc::new(delivery),
                settler,
                lane,
                received: Instant::now(),
                progress_at,
                retry_at: None,
                verdict: None,
                span,
            },
        );
        Some(id)
    }

    /// Stops holding a message; its timers go with it.
    pub(super) fn take(&mut self, id: u64) -> Option<HeldMessage<T>> {
        let e = self.held.remove(&id)?;
        self.seqs.remove(&e.delivery.stream_seq());
        self.bytes = self
            .bytes
            .saturating_sub(e.delivery.message.payload.len() as u64);
        if e.verdict.is_some() {
            self.letters -= 1;
        }
        self.timers.cancel(e.progress_at, id, Due::Progress);
        if let Some(at) = e.retry_at {
            self.timers.cancel(at, id, Due::Retry);
        }
        Some(e)
    }

    /// Schedules a held message's retry.
    pub(super) fn retry_at(&mut self, id: u64, at: Instant) {
        if let Some(e) = self.held.get_mut(&id) {
            if let Some(old) = e.retry_at.replace(at) {
                self.timers.cancel(old, id, Due::Retry);
            }
            self.timers.schedule(at, id, Due::Retry);
        }
    }

    /// The next message that may start under `mode` while `running` tasks run out
    /// of `max_in_flight`: a due retry first, then the lanes (never while probing).
    pub(super) fn next_startable(&mut self, mode: Fill, max_in_flight: usize) -> Option<u64> {
        let limit = match mode {
            Fill::All => max_in_flight,
            Fill::Probe => 1,
        };
        while self.tasks.len() < limit {
            let id = match self.due.pop_front() {
                Some(id) => id,
                None if mode == Fill::Probe => return None,
                None => self.lanes.pop()?.1,
            };
            if let Some(e) = self.held.get_mut(&id) {
                if let Some(at) = e.retry_at.take() {
                    self.timers.cancel(at, id, Due::Retry);
                }
                return Some(id);
            }
        }
        None
    }

    /// The next batch: due retries first, then runs of the lanes, at most `size`
    /// messages and `max_bytes` of payload (a larger message goes alone). Empty when
    /// nothing may start.
    pub(super) fn next_batch(&mut self, size: usize, max_bytes: u64) -> Vec<u64> {
        let mut ids = Vec::new();
        let mut bytes = 0u64;
        let payload = |held: &HashMap<u64, HeldMessage<T>>, id: &u64| {
            held.get(id)
                .map_or(0, |e| e.delivery.message.payload.len() as u64)
        };
        while ids.len() < size {
            let Some(&id) = self.due.front() else { break };
            let len = payload(&self.held, &id);
            if !ids.is_empty() && bytes + len > max_bytes {
                return ids;
            }
            self.due.pop_front();
            if let Some(e) = self.held.get_mut(&id) {
                if let Some(at) = e.retry_at.take() {
                    self.timers.cancel(at, id, Due::Retry);
                }
                bytes += len;
                ids.push(id);
            }
        }
        while ids.len() < size {
            let held = &self.held;
            let first = ids.is_empty();
            let mut taken = 0u64;
            let run = self.lanes.pop_run(size - ids.len(), |id| {
                let len = payload(held, id);
                let fits = (first && taken == 0) || bytes + taken + len <= max_bytes;
                if fits {
                    taken += len;
                }
                fits
            });
            let Some((_, run)) = run else { break };
            bytes += taken;
            ids.extend(run);
        }
        ids
    }

    /// How many messages could start now: due retries and runnable lanes.
    pub(super) fn startable(&self) -> usize {
        self.due.len() + self.lanes.runnable()
    }

    /// Whether anything may start under `mode` (probing: only a due retry).
    pub(super) fn startable_in(&self, mode: Fill) -> bool {
        match mode {
            Fill::All => self.startable() > 0,
            Fill::Probe => !self.due.is_empty(),
        }
    }

    pub(super) fn held(&self) -> Held {
        Held {
            messages: u32::try_from(self.held.len()).unwrap_or(u32::MAX),
            bytes: self.bytes,
        }
    }

    /// Entries in the timer set: at most a keep-alive and a retry per held message.
    #[cfg(test)]
    pub(super) fn timer_entries(&self) -> usize {
        self.timers.len()
    }
}
