//! The runner's side of pacing (`crate::pace`), on tokio's clock: the limit in force
//! for the starts, the rate limit's next start (a timer the runner sleeps on, one per
//! blocked wake-up, never one per message), one observation per finished request (in
//! flight at its start, its latency, what it says of the app's capacity: overload, or
//! the message's own failure), and the buffer the pull engine is told it may fill
//! under a lower limit. It does not count what runs: the runner says when a task
//! starts and ends.

use std::collections::HashMap;
use std::time::Duration;

use tokio::task::Id;
use tokio::time::Instant;

use crate::capacity::Held;
use crate::pace::{self, Observation, PaceSettings, Pacer, Signal};
use crate::policy::Outcome;
use crate::seam::{Forwarded, HttpClass};

/// What one request said: how long it took and what it says of the app's capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// From sending the request to its answer (or failure).
    pub latency: Duration,
    /// What it says of the app's capacity.
    pub signal: Signal,
    /// The message was offered before: a failure of it again is its own.
    pub retry: bool,
}

impl Sample {
    /// A request's answer: what its status says ([`Signal::of_status`]: 429, 503 and
    /// 504 are overload, any other failure the message's own, whatever
    /// `retry_statuses` does with it); a timeout is overload; a connection broken
    /// after it was made (or a 2xx batch answer that does not parse) is a failure; an
    /// app that cannot be reached says nothing of capacity. `attempt`: the message's
    /// (a batch's lowest); past the first, a failure is not counted as the app's.
    pub fn of(f: &Forwarded, attempt: u32) -> Sample {
        let signal = match (&f.outcome, f.class) {
            (Outcome::Unreachable, _) => Signal::Error,
            (_, HttpClass::Timeout) => Signal::Timeout,
            (Outcome::BadAnswer, _) | (_, HttpClass::Error) => Signal::Failure,
            (_, HttpClass::Status(s)) => Signal::of_status(s),
        };
        Sample {
            latency: f.elapsed,
            signal,
            retry: attempt > 1,
        }
    }
}

/// The pacer and what the runner keeps for it.
#[derive(Debug)]
pub struct Pacing {
    pacer: Pacer,
    /// The pacer's clock starts here.
    origin: Instant,
    /// Requests in flight when each running task started (itself included).
    in_flight_at_start: HashMap<Id, u32>,
    /// The rate limit's next start, while a start waits for it (the runner sleeps
    /// until then).
    pub wait: Option<Instant>,
}

impl Pacing {
    /// A pacer from these settings, its clock starting now.
    pub fn new(settings: PaceSettings) -> Pacing {
        Pacing {
            pacer: Pacer::new(settings, 0),
            origin: Instant::now(),
            in_flight_at_start: HashMap::new(),
            wait: None,
        }
    }

    fn ns(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.origin).as_nanos()).unwrap_or(u64::MAX)
    }

    /// The limit on requests in flight now.
    pub fn limit(&self) -> usize {
        self.pacer.limit() as usize
    }

    /// Whether a request may start now (a slot is free); when the rate limit says not
    /// yet, when it may.
    pub fn may_start(&mut self) -> bool {
        let now = Instant::now();
        match self.pacer.take_start(self.ns(now)) {
            Ok(()) => {
                self.wait = None;
                true
            }
            Err(at_ns) => {
                self.wait = Some(self.origin + Duration::from_nanos(at_ns));
                false
            }
        }
    }

    /// A task started with `in_flight` tasks running (itself included).
    pub fn started(&mut self, task: Id, in_flight: usize) {
        self.in_flight_at_start
            .insert(task, u32::try_from(in_flight).unwrap_or(u32::MAX));
    }

    /// A task ended, with what its request said (none: it made no request).
    pub fn finished(&mut self, task: Id, sample: Option<Sample>) {
        let in_flight = self.in_flight_at_start.remove(&task).unwrap_or(1);
        if let Some(s) = sample {
            let now = self.ns(Instant::now());
            self.pacer.observe(&Observation {
                finished_ns: now,
                latency_ns: u64::try_from(s.latency.as_nanos()).unwrap_or(u64::MAX),
                signal: s.signal,
                in_flight_at_start: in_flight,
                retry: s.retry,
            });
        }
    }

    /// A reload's settings: a lower limit lets what runs finish (nothing new starts
    /// until it is under), an adaptive limit keeps what it learned within the new
    /// bounds, the rate limit owes no old delay.
    pub fn reconfigure(&mut self, settings: PaceSettings) {
        let now = self.ns(Instant::now());
        let in_flight = u32::try_from(self.in_flight_at_start.len()).unwrap_or(u32::MAX);
        self.pacer.reconfigure(settings, now, in_flight);
        self.wait = None;
    }

    /// What the pull engine is told is held: under a lower limit the buffer shrinks
    /// in proportion (so a lower limit pulls less), as if the rest were held.
    pub fn held_for_pulls(&self, held: Held, max_buffered: usize) -> Held {
        let s = self.pacer.settings();
        let budget = pace::buffer_budget(max_buffered, self.limit(), s.max_in_flight as usize);
        let hidden = u32::try_from(max_buffered.saturating_sub(budget)).unwrap_or(u32::MAX);
        Held {
            messages: held.messages.saturating_add(hidden),
            bytes: held.bytes,
        }
    }
}
