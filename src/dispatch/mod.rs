//! The core loop: pull → lanes → forward → decide → settle, with bounded concurrency,
//! in-progress keep-alives, in-place retries, dead-lettering, app health gating, the
//! unreachable app, and the drain on shutdown. The only module that sees both the
//! NATS side (through [`Source`], [`Settler`], [`DlqPublisher`]) and the HTTP side
//! ([`Forwarder`]).
//!
//! Bounds: at most `max_in_flight` requests run, in one `JoinSet`; at most
//! `max_buffered` messages (and `max_buffered_bytes` of payload) are held (queued, in
//! flight or waiting for a retry), because the source sizes its pulls by what is held
//! and the consumer's `max_ack_pending` equals `max_buffered`. Every held message is
//! in `held`, its lane in [`Lanes`], and its keep-alive (and retry, if any) in the one
//! [`Timers`] heap, removed when it is settled.
//!
//! A message is settled only after its outcome is known; a per-message failure never
//! ends the loop. Nothing is given up that JetStream would not deliver again: an app
//! that is unreachable costs no attempts (the messages wait, kept alive), and a dead
//! letter that cannot be published on a message's last delivery is kept and retried.

pub mod lanes;
pub mod source;
pub mod timers;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::Ordering;
use crate::daemon::shutdown::{Deadline, bounded};
use crate::dead_letter::{self, DeadLetter};
use crate::delivery::Delivery;
use crate::dispatch::lanes::{LaneKey, Lanes};
use crate::dispatch::source::{Held, Source};
use crate::dispatch::timers::{Due, Timers};
use crate::http::forward::{Forwarder, NoAnswer};
use crate::nats::{DlqPublisher, NatsError, PullEvent, Settler};
use crate::ops::metrics::{HttpClass, Metrics, SettleLabel};
use crate::ops::readiness::{Readiness, State};
use crate::policy::{Disposition, Outcome, Policy, TermReason, backoff};

/// What the dispatcher needs, shared with every message task.
#[derive(Debug)]
pub struct Dispatch {
    /// The app.
    pub forwarder: Forwarder,
    /// Outcome → disposition.
    pub policy: Policy,
    /// Collectors.
    pub metrics: Metrics,
    /// Readiness.
    pub readiness: Readiness,
    /// Concurrent requests at most.
    pub max_in_flight: usize,
    /// Whether the source is a pinned consumer (standby until pinned).
    pub pinned_mode: bool,
    /// Lanes: `partition`, `subject` or `none`.
    pub ordering: Ordering,
    /// How often a held message gets `+WPI` (half the ack wait).
    pub progress_every: Duration,
    /// Where permanent failures go before their TERM.
    pub dlq: Option<DlqPublisher>,
    /// Whether the app is healthy (always true without `http.health_url`).
    pub app_healthy: watch::Receiver<bool>,
    /// Pinned sources: how long the app may be unhealthy (or unreachable) before this
    /// instance steps down so that a healthy instance of the member takes over.
    pub unhealthy_handover: Duration,
    /// The end of the shutdown grace, shared with the supervisor: started when the
    /// shutdown is seen; bounds the drain and every NATS step after it.
    pub deadline: Deadline,
}

/// Why the loop ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// Shutdown was requested and the drain is complete.
    Shutdown,
    /// The consumer went away; go back to topology.
    SourceLost(String),
    /// The consumer group was deleted: drained, and the member stops cleanly.
    GroupEnded(String),
}

/// Where a group member stands, for readiness.
#[derive(Debug, Default)]
struct Standing {
    /// Not in the membership (elastic): why.
    waiting: Option<String>,
    /// The assigned partitions, once known.
    assignment: Option<Vec<u32>>,
    /// The member consumer cannot be created yet: why.
    unavailable: Option<String>,
}

/// What decides whether work starts, and what readiness says about the app.
#[derive(Debug, Default)]
struct Gate {
    /// The health URL's verdict (always true without one).
    healthy: bool,
    /// Set while the app cannot be reached: since when, how many times in a row, and
    /// how the last attempt failed.
    unreachable: Option<Unreachable>,
    standing: Standing,
}

#[derive(Debug)]
struct Unreachable {
    streak: u32,
    kind: &'static str,
}

impl Gate {
    /// Whether the app can take work: healthy and reachable.
    fn serviceable(&self) -> bool {
        self.healthy && self.unreachable.is_none()
    }
}

/// A failure that ends the process.
#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    /// The source refused for a reason retrying cannot fix.
    #[error("the message source failed: {0}")]
    Source(String),
}

/// The app's permanent verdict on a message whose dead letter is still to be
/// published.
#[derive(Debug, Clone)]
struct Verdict {
    reason: TermReason,
    /// The app's last HTTP status, if it answered.
    status: Option<u16>,
    /// Attempts made.
    attempts: u32,
    /// Dead-letter publishes tried so far.
    tries: u32,
}

/// One held message.
struct Entry {
    delivery: Arc<Delivery>,
    settler: Settler,
    lane: LaneKey,
    received: Instant,
    /// The attempt the next request makes (delivery count + in-place retries).
    attempt: u32,
    /// When its next `+WPI` is scheduled.
    progress_at: Instant,
    /// Set while it waits for an in-place retry.
    retry_at: Option<Instant>,
    /// Set when only its dead-lettering remains (the publish failed on its last
    /// delivery: a NAK would never be redelivered).
    verdict: Option<Verdict>,
}

/// What a message task reports back.
enum Step {
    /// Settled (or given up at the grace deadline): the message is no longer held.
    Settled,
    /// Ordered lane: call the app again after the delay (one more attempt); the
    /// message stays held.
    RetryIn(Duration),
    /// The app was unreachable: keep the message and offer it again when the app is
    /// back; no attempt is counted.
    Hold,
    /// Its last delivery, and the dead letter could not be published: keep it and try
    /// the dead letter again after the delay.
    DeadLetterIn(Duration, Verdict),
}

/// Whether a task's request reached the app.
enum Reach {
    /// A connection was made (an answer, a timeout, a reset): the app is there.
    Reached,
    /// No connection could be made.
    Unreachable(&'static str),
    /// No request was made (an invalid message, a dead letter).
    NotAsked,
}

/// A task's report.
struct Done {
    id: u64,
    step: Step,
    reach: Reach,
}

/// The loop's state: everything held, by id.
struct Book {
    held: HashMap<u64, Entry>,
    /// The stream sequences of what is held, to fold a redelivery of a held message.
    seqs: HashSet<u64>,
    /// Payload bytes held.
    bytes: u64,
    lanes: Lanes<u64>,
    due: VecDeque<u64>,
    timers: Timers,
    tasks: JoinSet<Done>,
    /// Which message each running task serves (to free its lane if it panics).
    running: HashMap<tokio::task::Id, u64>,
    next_id: u64,
}

impl Book {
    fn new() -> Book {
        Book {
            held: HashMap::new(),
            seqs: HashSet::new(),
            bytes: 0,
            lanes: Lanes::default(),
            due: VecDeque::new(),
            timers: Timers::default(),
            tasks: JoinSet::new(),
            running: HashMap::new(),
            next_id: 0,
        }
    }

    /// Stops holding a message; its timers go with it.
    fn take(&mut self, id: u64) -> Option<Entry> {
        let e = self.held.remove(&id)?;
        self.seqs.remove(&e.delivery.stream_seq());
        self.bytes = self.bytes.saturating_sub(e.delivery.payload.len() as u64);
        self.timers.cancel(e.progress_at, id, Due::Progress);
        if let Some(at) = e.retry_at {
            self.timers.cancel(at, id, Due::Retry);
        }
        Some(e)
    }

    /// Schedules a held message's retry.
    fn retry_at(&mut self, id: u64, at: Instant) {
        if let Some(e) = self.held.get_mut(&id) {
            if let Some(old) = e.retry_at.replace(at) {
                self.timers.cancel(old, id, Due::Retry);
            }
            self.timers.schedule(at, id, Due::Retry);
        }
    }

    fn held(&self) -> Held {
        Held {
            messages: u32::try_from(self.held.len()).unwrap_or(u32::MAX),
            bytes: self.bytes,
        }
    }

    /// Messages whose dead letter is still to be published.
    fn verdicts(&self) -> usize {
        self.held.values().filter(|e| e.verdict.is_some()).count()
    }
}

/// Which held messages may start now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fill {
    /// Due retries first, then lanes, up to `max_in_flight`.
    All,
    /// The app is unreachable: one due retry at a time, as a probe.
    Probe,
}

impl Dispatch {
    /// Runs until shutdown (then drains) or until the source ends.
    ///
    /// # Errors
    /// [`DispatchError`] when the source fails fatally.
    pub async fn run<S: Source>(
        self: &Arc<Self>,
        mut source: S,
        shutdown: CancellationToken,
    ) -> Result<Ended, DispatchError> {
        let mut book = Book::new();
        let mut app_healthy = self.app_healthy.clone();
        let mut gate = Gate {
            healthy: *app_healthy.borrow_and_update(),
            ..Gate::default()
        };
        // A group's assignment is changing: nothing new starts until all is settled.
        let mut quiescing = false;
        let mut end_reason: Option<String> = None;
        source.set_paused(!gate.serviceable());
        self.set_serving_state(&gate);
        // Without a health URL nobody ever sends: stop watching once the sender is gone.
        let mut health_watched = true;
        let mut draining = false;
        let grace = tokio::time::sleep(Duration::MAX / 4);
        tokio::pin!(grace);
        // Armed while the app cannot take work and this instance is pinned.
        let handover = tokio::time::sleep(Duration::MAX / 4);
        tokio::pin!(handover);
        let mut handover_armed = false;
        let ended = loop {
            if quiescing && book.tasks.is_empty() && !draining {
                source.quiesced().await;
                quiescing = false;
            }
            if draining {
                // Only dead letters still to publish remain held.
                self.fill(&mut book, Fill::All);
            } else if gate.healthy && !quiescing {
                let mode = if gate.unreachable.is_some() {
                    Fill::Probe
                } else {
                    Fill::All
                };
                self.fill(&mut book, mode);
            }
            let held = book.held();
            self.metrics.buffered.set(i64::from(held.messages));
            self.metrics.in_flight.set(book.tasks.len() as i64);
            if draining && book.tasks.is_empty() && book.verdicts() == 0 {
                break end_reason.take().map_or(Ended::Shutdown, Ended::GroupEnded);
            }
            let next_timer = book.timers.next_deadline();
            let was_serviceable = gate.serviceable();
            // Set by the arms that change what readiness says.
            let mut refresh = false;
            tokio::select! {
                biased;
                // Shutdown only stops intake: in-flight requests are never cancelled here.
                () = shutdown.cancelled(), if !draining => {
                    draining = true;
                    let deadline = self.deadline.start();
                    self.readiness.set(State::Draining, "shutting down");
                    source.stop();
                    let released = bounded(deadline, "release queued messages", self.release_waiting(&mut book, true)).await;
                    tracing::info!(in_flight = book.tasks.len(), released, "draining");
                    grace.as_mut().reset(deadline);
                }
                () = &mut grace, if draining => {
                    tracing::warn!(
                        unfinished = book.tasks.len(),
                        "shutdown grace is over: unfinished messages are left for redelivery after ack_wait"
                    );
                    book.tasks.abort_all();
                    while book.tasks.join_next().await.is_some() {}
                    self.report_unpublished_dead_letters(&book);
                    break end_reason.take().map_or(Ended::Shutdown, Ended::GroupEnded);
                }
                Some(done) = book.tasks.join_next_with_id() => match done {
                    Ok((task, done)) => {
                        book.running.remove(&task);
                        refresh = self.reached(&mut gate, &done.reach);
                        self.finished(&mut book, &gate, done.id, done.step, draining).await;
                    }
                    Err(e) => {
                        // Only a panic gets here (tasks are aborted only at the
                        // deadline, after which the loop ends): the message is left to
                        // JetStream's redelivery and must not block its lane.
                        tracing::error!(error = %e, "a message task failed; its message is redelivered after ack_wait");
                        if let Some(id) = book.running.remove(&e.id()) {
                            self.finished(&mut book, &gate, id, Step::Settled, draining).await;
                        }
                    }
                },
                () = sleep_until(next_timer) => self.timers_due(&mut book, draining).await,
                changed = app_healthy.changed(), if !draining && health_watched => {
                    if changed.is_ok() {
                        gate.healthy = *app_healthy.borrow_and_update();
                        refresh = true;
                    } else {
                        health_watched = false;
                    }
                }
                () = &mut handover, if handover_armed && !draining => {
                    handover_armed = false;
                    if source.step_down().await {
                        // What waits here would only wait: the next instance takes it.
                        self.release_waiting(&mut book, true).await;
                        tracing::warn!(
                            unhealthy_for_ms = self.unhealthy_handover.as_millis(),
                            "the app stayed unhealthy or unreachable: stepping down so that another instance is served"
                        );
                        self.readiness.set_pinned(false);
                        refresh = true;
                    }
                }
                ev = source.next(held) => match ev {
                    PullEvent::Message(delivery, settler) => {
                        self.metrics.received.inc();
                        if delivery.delivered() > 1 {
                            self.metrics.redeliveries.inc();
                        }
                        if draining || quiescing {
                            // Delivered by a pull sent before the stop: move it on.
                            self.release(&settler, Duration::ZERO).await;
                        } else {
                            self.hold(&mut book, *delivery, settler);
                        }
                    }
                    PullEvent::Pinned(pinned) => {
                        self.readiness.set_pinned(pinned);
                        refresh = true;
                    }
                    PullEvent::Assignment(partitions) => {
                        self.readiness.set_partitions(partitions.clone());
                        gate.standing.waiting = None;
                        gate.standing.unavailable = None;
                        gate.standing.assignment = Some(partitions);
                        refresh = true;
                    }
                    PullEvent::Waiting(reason) => {
                        self.readiness.set_partitions(Vec::new());
                        gate.standing.waiting = Some(reason);
                        gate.standing.unavailable = None;
                        gate.standing.assignment = None;
                        refresh = true;
                    }
                    PullEvent::Unavailable(reason) => {
                        gate.standing.unavailable = Some(reason);
                        refresh = true;
                    }
                    PullEvent::Quiesce => {
                        if !draining {
                            quiescing = true;
                            let released = self.release_waiting(&mut book, false).await;
                            tracing::info!(in_flight = book.tasks.len(), released, "assignment changing: settling what is held");
                        }
                    }
                    PullEvent::Ended(reason) => {
                        if !draining {
                            tracing::info!(reason = %reason, "the group ended: draining");
                            draining = true;
                            end_reason = Some(reason);
                            self.readiness.set(State::Draining, "the group ended");
                            source.stop();
                            let deadline = self.deadline.or_from_now();
                            bounded(deadline, "release queued messages", self.release_waiting(&mut book, true)).await;
                            grace.as_mut().reset(deadline);
                        }
                    }
                    PullEvent::Released { naked, failed } => {
                        self.metrics.settled_by(SettleLabel::Nak, naked as u64);
                        self.metrics.settle_failures.inc_by(failed as u64);
                    }
                    PullEvent::ConsumerGone(reason) => {
                        source.stop();
                        // The consumer is gone: what is held cannot be settled any more;
                        // the in-flight requests finish (their settle fails, and is counted).
                        book.lanes.drain();
                        book.due.clear();
                        while book.tasks.join_next().await.is_some() {}
                        break Ended::SourceLost(reason);
                    }
                    PullEvent::Fatal(reason) => {
                        source.stop();
                        while book.tasks.join_next().await.is_some() {}
                        return Err(DispatchError::Source(reason));
                    }
                },
            }
            if refresh && !draining {
                // Pulling, readiness and the handover follow whether the app can take
                // work.
                let serviceable = gate.serviceable();
                if serviceable != was_serviceable {
                    source.set_paused(!serviceable);
                    handover_armed = !serviceable && self.pinned_mode;
                    if handover_armed {
                        handover
                            .as_mut()
                            .reset(Instant::now() + self.unhealthy_handover);
                    }
                }
                self.set_serving_state(&gate);
            }
        };
        // Every step from here may talk to NATS, which may be gone: each is bounded by
        // what is left of the grace (a source lost or failed gets a grace of its own).
        let deadline = self.deadline.or_from_now();
        if self.pinned_mode && self.readiness.status().pinned {
            // Hand over at once: a standby instance of the member is served next,
            // without waiting for the pin timeout.
            if bounded(deadline, "unpin", source.step_down()).await == Some(true) {
                tracing::info!("unpinned: a standby instance takes over");
            }
        }
        if let Some(left) = bounded(deadline, "close the pull inbox", source.close()).await {
            bounded(deadline, "release undelivered messages", async {
                for settler in left {
                    self.release(&settler, Duration::ZERO).await;
                }
            })
            .await;
        }
        self.metrics.buffered.set(0);
        self.metrics.in_flight.set(0);
        self.readiness.set_pinned(false);
        Ok(ended)
    }

    /// Records what a request taught about the app: reached, or not there. Returns
    /// whether readiness changes.
    fn reached(&self, gate: &mut Gate, reach: &Reach) -> bool {
        match (reach, &mut gate.unreachable) {
            (Reach::Reached, Some(_)) => {
                gate.unreachable = None;
                tracing::info!("the app is reachable again: resuming delivery");
                true
            }
            (Reach::Unreachable(kind), Some(u)) => {
                u.streak = u.streak.saturating_add(1);
                std::mem::replace(&mut u.kind, kind) != *kind
            }
            (Reach::Unreachable(kind), None) => {
                tracing::warn!(
                    error = kind,
                    "the app is unreachable: pausing, holding what is held (kept alive), offering it again with backoff"
                );
                gate.unreachable = Some(Unreachable { streak: 1, kind });
                true
            }
            _ => false,
        }
    }

    /// Consuming, standby (pinned mode, no pin), a group member's waiting states, or
    /// not ready (app unhealthy or unreachable).
    fn set_serving_state(&self, gate: &Gate) {
        let standing = &gate.standing;
        if !gate.healthy {
            self.readiness
                .set(State::NotReady, "the app is not healthy (http.health_url)");
        } else if let Some(u) = &gate.unreachable {
            self.readiness
                .set(State::NotReady, format!("app unreachable: {}", u.kind));
        } else if let Some(why) = &standing.unavailable {
            self.readiness.set(State::NotReady, why);
        } else if let Some(why) = &standing.waiting {
            self.readiness.set(State::WaitingForMembership, why);
        } else if standing.assignment.as_ref().is_some_and(Vec::is_empty) {
            self.readiness.set(
                State::NoPartitions,
                "no partitions are assigned to this member",
            );
        } else if self.pinned_mode && !self.readiness.status().pinned {
            // Readiness says whether another instance holds the pin or nobody does.
            self.readiness.set(State::Standby, "");
        } else {
            self.readiness.set(State::Consuming, "");
        }
    }

    fn hold(&self, book: &mut Book, delivery: Delivery, settler: Settler) {
        let seq = delivery.stream_seq();
        if seq != 0 && !book.seqs.insert(seq) {
            // JetStream redelivered a message this loop still holds (its keep-alive
            // was lost, e.g. across a reconnect). Acks and keep-alives name the stream
            // sequence, so the held copy settles it; sending it again would only
            // duplicate the request. This delivery's settler is dropped.
            tracing::info!(
                stream_seq = seq,
                delivered = delivery.delivered(),
                "a redelivery of a message still held is folded into it"
            );
            return;
        }
        let id = book.next_id;
        book.next_id += 1;
        let now = Instant::now();
        let lane = LaneKey::of(self.ordering, &delivery);
        book.lanes.push(lane.clone(), id);
        let progress_at = now + self.progress_every;
        book.timers.schedule(progress_at, id, Due::Progress);
        book.bytes = book.bytes.saturating_add(delivery.payload.len() as u64);
        book.held.insert(
            id,
            Entry {
                attempt: delivery.delivered(),
                delivery: Arc::new(delivery),
                settler,
                lane,
                received: now,
                progress_at,
                retry_at: None,
                verdict: None,
            },
        );
    }

    /// Starts what may start: due retries first, then lanes.
    fn fill(self: &Arc<Self>, book: &mut Book, mode: Fill) {
        let limit = match mode {
            Fill::All => self.max_in_flight,
            Fill::Probe => 1,
        };
        while book.tasks.len() < limit {
            let id = match book.due.pop_front() {
                Some(id) => id,
                None if mode == Fill::Probe => return,
                None => match book.lanes.pop() {
                    Some((_, id)) => id,
                    None => return,
                },
            };
            let Some(e) = book.held.get_mut(&id) else {
                continue;
            };
            if let Some(at) = e.retry_at.take() {
                book.timers.cancel(at, id, Due::Retry);
            }
            let (delivery, settler) = (Arc::clone(&e.delivery), e.settler.clone());
            let (attempt, received, verdict) = (e.attempt, e.received, e.verdict.clone());
            let this = Arc::clone(self);
            let task = book.tasks.spawn(async move {
                match verdict {
                    Some(v) => Done {
                        id,
                        step: this.terminate(&delivery, &settler, v, received).await,
                        reach: Reach::NotAsked,
                    },
                    None => {
                        this.attempt(id, &delivery, &settler, attempt, received)
                            .await
                    }
                }
            });
            book.running.insert(task.id(), id);
        }
    }

    async fn finished(&self, book: &mut Book, gate: &Gate, id: u64, step: Step, draining: bool) {
        let now = Instant::now();
        match step {
            Step::Settled => {
                if let Some(e) = book.take(id) {
                    book.lanes.done(&e.lane);
                }
            }
            Step::RetryIn(delay) => {
                self.metrics.retries_in_place.inc();
                let Some(e) = book.held.get_mut(&id) else {
                    return;
                };
                e.attempt = e.attempt.saturating_add(1);
                if draining {
                    // Shutting down: hand the retry to JetStream with the same delay.
                    self.release_one(book, id, delay).await;
                } else {
                    book.retry_at(id, now + delay);
                }
            }
            Step::Hold => {
                if draining {
                    // Another instance may reach its app: move it on at once.
                    self.release_one(book, id, Duration::ZERO).await;
                } else {
                    let streak = gate.unreachable.as_ref().map_or(1, |u| u.streak);
                    book.retry_at(id, now + self.policy.unreachable_delay(streak));
                }
            }
            Step::DeadLetterIn(delay, verdict) => {
                // Kept even while draining: its last delivery, a NAK would lose it.
                if let Some(e) = book.held.get_mut(&id) {
                    e.verdict = Some(verdict);
                    book.retry_at(id, now + delay);
                }
            }
        }
    }

    /// Releases one held message (NAK with `delay`) and frees its lane.
    async fn release_one(&self, book: &mut Book, id: u64, delay: Duration) {
        if let Some(e) = book.take(id) {
            book.lanes.done(&e.lane);
            self.release(&e.settler, delay).await;
        }
    }

    async fn timers_due(&self, book: &mut Book, draining: bool) {
        let now = Instant::now();
        while let Some((id, due)) = book.timers.pop_due(now) {
            let Some(e) = book.held.get_mut(&id) else {
                continue;
            };
            match due {
                Due::Progress => {
                    let settler = e.settler.clone();
                    e.progress_at = now + self.progress_every;
                    book.timers.schedule(e.progress_at, id, Due::Progress);
                    match settler.progress().await {
                        Ok(true) => self.metrics.progress_sent.inc(),
                        Ok(false) => {} // the connection is down: nobody would hear it
                        Err(err) => self.settle_failed(&err),
                    }
                }
                Due::Retry => {
                    // Popped: it is no longer in the heap.
                    if e.retry_at.take().is_some() && (!draining || e.verdict.is_some()) {
                        book.due.push_back(id);
                    }
                }
            }
        }
    }

    /// Releases what waits (queued, or waiting for a retry) at once; retries keep
    /// their remaining delay. With `keep_verdicts`, messages whose dead letter is
    /// still to be published stay (a NAK on their last delivery would lose them).
    async fn release_waiting(&self, book: &mut Book, keep_verdicts: bool) -> usize {
        let mut released = 0;
        let now = Instant::now();
        let mut waiting: Vec<u64> = book.lanes.drain();
        waiting.extend(book.due.drain(..));
        waiting.extend(
            book.held
                .iter()
                .filter(|(_, e)| e.retry_at.is_some())
                .map(|(id, _)| *id),
        );
        waiting.sort_unstable();
        waiting.dedup();
        for id in waiting {
            if let Some(e) = book.held.get(&id)
                && keep_verdicts
                && e.verdict.is_some()
            {
                // Kept: one that was due (its timer already popped) is due again.
                if e.retry_at.is_none() {
                    book.due.push_back(id);
                }
                continue;
            }
            if let Some(e) = book.take(id) {
                let delay = e.retry_at.map_or(Duration::ZERO, |at| {
                    at.saturating_duration_since(now)
                        .max(crate::policy::MIN_RETRY_DELAY)
                });
                self.release(&e.settler, delay).await;
                released += 1;
            }
        }
        released
    }

    /// NAK: without delay for a message never offered to the app (it moves on at
    /// once), with the remaining backoff for one waiting for a retry.
    async fn release(&self, settler: &Settler, delay: Duration) {
        match settler.nak(delay).await {
            Ok(()) => self.metrics.settled(SettleLabel::Nak),
            Err(e) => self.settle_failed(&e),
        }
    }

    fn settle_failed(&self, e: &NatsError) {
        self.metrics.settle_failures.inc();
        tracing::warn!(error = %e, "cannot settle a message; JetStream redelivers it after ack_wait");
    }

    /// Dead letters still held when the grace ran out: on their last delivery, so
    /// JetStream will not deliver them again. Said loudly, with where they are.
    fn report_unpublished_dead_letters(&self, book: &Book) {
        for e in book.held.values().filter(|e| e.verdict.is_some()) {
            tracing::error!(
                stream_seq = e.delivery.stream_seq(),
                subject = %e.delivery.subject,
                "shutdown with a dead letter still unpublished: the message is on its last delivery and stays in its stream, not redelivered to this consumer"
            );
        }
    }

    /// One attempt: one request, one decision, then either one final action and one
    /// log line, or a retry in place, or a hold, reported back.
    async fn attempt(
        &self,
        id: u64,
        d: &Delivery,
        settler: &Settler,
        attempt: u32,
        received: Instant,
    ) -> Done {
        let (outcome, status, http_ms, failure) = match &d.invalid {
            Some(why) => {
                self.metrics.invalid(why);
                (Outcome::Invalid(why.clone()), None, None, None)
            }
            None => {
                let f = self.forwarder.forward(d, attempt).await;
                self.metrics.http_request(f.class);
                self.metrics.http_duration.observe(f.elapsed.as_secs_f64());
                if f.skipped_headers > 0 {
                    self.metrics
                        .headers_skipped
                        .inc_by(f.skipped_headers as u64);
                }
                if f.bad_action {
                    self.metrics.action_override("invalid");
                    tracing::warn!(
                        stream_seq = d.stream_seq(),
                        "ignoring an unknown Jetrelay-Action value"
                    );
                }
                let status = match f.class {
                    HttpClass::Status(s) => Some(s),
                    _ => None,
                };
                (f.outcome, status, Some(f.elapsed.as_millis()), f.failure)
            }
        };
        let reach = match (&outcome, &failure) {
            (Outcome::Invalid(_), _) => Reach::NotAsked,
            (Outcome::Unreachable, Some(f)) => Reach::Unreachable(f.kind),
            (Outcome::Unreachable, None) => Reach::Unreachable("cannot connect"),
            _ => Reach::Reached,
        };
        let action = match &outcome {
            Outcome::Answered {
                action: Some(a), ..
            } => {
                let name = format!("{a:?}").to_lowercase();
                self.metrics.action_override(&name);
                Some(name)
            }
            _ => None,
        };
        let record = Record {
            attempt,
            status,
            http_ms,
            action: action.as_deref(),
            failure: failure.as_ref(),
            received,
        };
        let step = match self.policy.decide(&outcome, attempt) {
            Disposition::Ack => {
                let result = settler.ack().await;
                self.record(d, &record, SettleLabel::Ack, &result, None, None);
                Step::Settled
            }
            Disposition::Retry { delay } if self.ordering != Ordering::None => {
                tracing::warn!(
                    stream_seq = d.stream_seq(),
                    attempt,
                    status,
                    http_ms,
                    delay_ms = delay.as_millis(),
                    action = action.as_deref(),
                    error = failure.as_ref().map(|f| f.kind),
                    "message will be retried in its lane"
                );
                Step::RetryIn(delay)
            }
            Disposition::Retry { delay } => {
                let result = settler.nak(delay).await;
                self.record(d, &record, SettleLabel::Nak, &result, Some(delay), None);
                Step::Settled
            }
            Disposition::Hold => {
                tracing::debug!(
                    stream_seq = d.stream_seq(),
                    error = failure.as_ref().map(|f| f.kind),
                    cause = failure.as_ref().map(|f| f.cause.as_str()),
                    "the app is unreachable: message kept"
                );
                Step::Hold
            }
            Disposition::Term { reason } => {
                let verdict = Verdict {
                    reason,
                    status,
                    attempts: attempt,
                    tries: 0,
                };
                self.terminate_recorded(d, settler, verdict, &record).await
            }
        };
        Done { id, step, reach }
    }

    /// A held dead letter's retry: no request to the app, only the dead-lettering.
    async fn terminate(
        &self,
        d: &Delivery,
        settler: &Settler,
        verdict: Verdict,
        received: Instant,
    ) -> Step {
        let record = Record {
            attempt: verdict.attempts,
            status: verdict.status,
            http_ms: None,
            action: None,
            failure: None,
            received,
        };
        self.terminate_recorded(d, settler, verdict, &record).await
    }

    /// Dead-letters (when configured) then TERMs. When the dead-letter publish fails,
    /// the message is NAKed with backoff; on its last delivery (a NAK would never be
    /// redelivered) it is kept and the dead letter tried again: nothing is lost.
    async fn terminate_recorded(
        &self,
        d: &Delivery,
        settler: &Settler,
        verdict: Verdict,
        record: &Record<'_>,
    ) -> Step {
        let text = verdict.reason.to_string();
        let Some(dlq) = &self.dlq else {
            let result = settler.term(&text).await;
            self.record(d, record, SettleLabel::Term, &result, None, Some(&text));
            return Step::Settled;
        };
        let letter = DeadLetter {
            delivery: d,
            attempts: verdict.attempts,
            last_status: verdict.status,
            reason: &text,
            at: time::OffsetDateTime::now_utc(),
        };
        let mut published = self
            .publish_dead_letter(dlq, &letter, dlq.max_payload())
            .await;
        if let Err(NatsError::DeadLetterTooLarge(_)) = published {
            // The DLQ stream takes less than the server: go without the payload.
            published = self.publish_dead_letter(dlq, &letter, 0).await;
        }
        match published {
            Ok(()) => {
                let result = settler.term(&text).await;
                self.record(d, record, SettleLabel::Dlq, &result, None, Some(&text));
                Step::Settled
            }
            Err(e) => {
                self.metrics.dlq_failures.inc();
                let tries = verdict.tries.saturating_add(1);
                if self.policy.is_last_delivery(d.delivered()) {
                    let delay = backoff(self.policy.retry_initial, self.policy.retry_max, tries);
                    tracing::error!(
                        error = %e, stream_seq = d.stream_seq(), tries, retry_in_ms = delay.as_millis(),
                        "dead-letter publish failed on the message's last delivery: kept, and tried again"
                    );
                    return Step::DeadLetterIn(delay, Verdict { tries, ..verdict });
                }
                let delay = backoff(
                    self.policy.retry_initial,
                    self.policy.retry_max,
                    verdict.attempts,
                );
                tracing::error!(error = %e, stream_seq = d.stream_seq(), "dead-letter publish failed; the message is retried instead");
                let result = settler.nak(delay).await;
                self.record(
                    d,
                    record,
                    SettleLabel::Nak,
                    &result,
                    Some(delay),
                    Some(&text),
                );
                Step::Settled
            }
        }
    }

    /// Publishes one dead letter, with its payload when it fits in `max_payload`.
    async fn publish_dead_letter(
        &self,
        dlq: &DlqPublisher,
        letter: &DeadLetter<'_>,
        max_payload: usize,
    ) -> Result<(), NatsError> {
        let l = dead_letter::letter(letter, max_payload);
        let payload = if l.with_payload {
            letter.delivery.payload.clone()
        } else {
            tracing::warn!(
                stream_seq = letter.delivery.stream_seq(),
                bytes = letter.delivery.payload.len(),
                "the dead letter is too large: published without its payload (the original stays in its stream)"
            );
            bytes::Bytes::new()
        };
        dlq.publish(&l.headers, payload).await
    }

    /// The metrics and the one log line of a settled message; never the payload.
    fn record(
        &self,
        d: &Delivery,
        r: &Record<'_>,
        label: SettleLabel,
        result: &Result<(), NatsError>,
        delay: Option<Duration>,
        reason: Option<&str>,
    ) {
        let elapsed = r.received.elapsed();
        self.metrics.message_duration.observe(elapsed.as_secs_f64());
        match result {
            Ok(()) => self.metrics.settled(label),
            Err(e) if label == SettleLabel::Ack => {
                self.metrics.ack_failures.inc();
                tracing::warn!(error = %e, stream_seq = d.stream_seq(), "the ack was not confirmed: the message may be redelivered");
            }
            Err(e) => self.settle_failed(e),
        }
        let stream = d.meta.as_ref().map(|m| m.stream.as_str()).unwrap_or("");
        let delay_ms = delay.map(|d| d.as_millis());
        macro_rules! settled_event {
            ($level:expr, $message:literal) => {
                tracing::event!(
                    $level,
                    stream,
                    stream_seq = d.stream_seq(),
                    delivered = d.delivered(),
                    attempt = r.attempt,
                    partition = d.partition,
                    outcome = label.as_str(),
                    status = r.status,
                    http_ms = r.http_ms,
                    duration_ms = elapsed.as_millis(),
                    settled = result.is_ok(),
                    action = r.action,
                    delay_ms,
                    reason,
                    error = r.failure.map(|f| f.kind),
                    $message
                )
            };
        }
        match label {
            SettleLabel::Term | SettleLabel::Dlq => {
                settled_event!(tracing::Level::ERROR, "message terminated");
            }
            SettleLabel::Nak => settled_event!(tracing::Level::WARN, "message will be retried"),
            SettleLabel::Ack => settled_event!(tracing::Level::INFO, "message delivered"),
        }
    }
}

/// What one attempt learned, for the log line.
struct Record<'a> {
    attempt: u32,
    status: Option<u16>,
    http_ms: Option<u128>,
    action: Option<&'a str>,
    failure: Option<&'a NoAnswer>,
    received: Instant,
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
