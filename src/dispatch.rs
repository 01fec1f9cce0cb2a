//! The core loop: pull → lanes → forward → decide → settle, with bounded concurrency,
//! in-progress keep-alives, in-place retries, dead-lettering, app health gating and
//! the drain on shutdown. The only module that sees both the NATS side (through
//! [`Source`], [`Settler`], [`DlqPublisher`]) and the HTTP side ([`Forwarder`]).
//!
//! Bounds: at most `max_in_flight` requests run, in one `JoinSet`; at most
//! `max_buffered` messages are held (queued, in flight or waiting for a retry),
//! because the source sizes its pulls by the held count and the consumer's
//! `max_ack_pending` equals `max_buffered`. Every held message is in `held`, its
//! lane in [`Lanes`], and its keep-alive in the one [`Timers`] heap.
//!
//! A message is settled only after its outcome is known; a per-message failure never
//! ends the loop.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::Ordering;
use crate::delivery::Delivery;
use crate::dlq::{self, DeadLetter};
use crate::forward::Forwarder;
use crate::health::{Health, State};
use crate::lanes::{LaneKey, Lanes};
use crate::metrics::{HttpClass, Metrics, SettleLabel};
use crate::nats::{DlqPublisher, NatsError, PullEvent, Settler};
use crate::policy::{Disposition, Outcome, Policy, TermReason, backoff};
use crate::shutdown::{Deadline, bounded};
use crate::source::Source;
use crate::timers::{Due, Timers};

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
    pub health: Health,
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
    /// Pinned sources: how long the app may be unhealthy before this instance steps
    /// down so that a healthy instance of the member takes over.
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

/// A failure that ends the process.
#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    /// The source refused for a reason retrying cannot fix.
    #[error("the message source failed: {0}")]
    Source(String),
}

/// One held message.
struct Entry {
    delivery: Arc<Delivery>,
    settler: Settler,
    lane: LaneKey,
    received: Instant,
    /// The attempt the next request makes (delivery count + in-place retries).
    attempt: u32,
    /// Set while it waits for an in-place retry.
    retry_at: Option<Instant>,
}

/// What a message task reports back.
enum Step {
    /// Settled (or given up at the grace deadline): the message is no longer held.
    Settled,
    /// Ordered lane: call the app again after the delay; the message stays held.
    RetryIn(Duration),
}

/// The loop's state: everything held, by id.
struct Book {
    held: HashMap<u64, Entry>,
    /// The stream sequences of what is held, to fold a redelivery of a held message.
    seqs: HashSet<u64>,
    lanes: Lanes<u64>,
    due: VecDeque<u64>,
    timers: Timers,
    tasks: JoinSet<(u64, Step)>,
    /// Which message each running task serves (to free its lane if it panics).
    running: HashMap<tokio::task::Id, u64>,
    next_id: u64,
}

impl Book {
    /// Stops holding a message.
    fn take(&mut self, id: u64) -> Option<Entry> {
        let e = self.held.remove(&id)?;
        self.seqs.remove(&e.delivery.stream_seq());
        Some(e)
    }
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
        let mut book = Book {
            held: HashMap::new(),
            seqs: HashSet::new(),
            lanes: Lanes::default(),
            due: VecDeque::new(),
            timers: Timers::default(),
            tasks: JoinSet::new(),
            running: HashMap::new(),
            next_id: 0,
        };
        let mut app_healthy = self.app_healthy.clone();
        let mut healthy = *app_healthy.borrow_and_update();
        let mut standing = Standing::default();
        // A group's assignment is changing: nothing new starts until all is settled.
        let mut quiescing = false;
        let mut end_reason: Option<String> = None;
        source.set_paused(!healthy);
        self.set_serving_state(healthy, &standing);
        // Without a health URL nobody ever sends: stop watching once the sender is gone.
        let mut health_watched = true;
        let mut draining = false;
        let grace = tokio::time::sleep(Duration::MAX / 4);
        tokio::pin!(grace);
        // Armed while the app is unhealthy and this instance is pinned.
        let handover = tokio::time::sleep(Duration::MAX / 4);
        tokio::pin!(handover);
        let mut handover_armed = false;
        let ended = loop {
            if quiescing && book.tasks.is_empty() && !draining {
                source.quiesced().await;
                quiescing = false;
            }
            if healthy && !draining && !quiescing {
                self.fill(&mut book);
            }
            let held = u32::try_from(book.held.len()).unwrap_or(u32::MAX);
            self.metrics.buffered.set(i64::from(held));
            self.metrics.in_flight.set(book.tasks.len() as i64);
            if draining && book.tasks.is_empty() {
                break end_reason.take().map_or(Ended::Shutdown, Ended::GroupEnded);
            }
            let next_timer = book.timers.next_deadline();
            tokio::select! {
                biased;
                // Shutdown only stops intake: in-flight requests are never cancelled here.
                () = shutdown.cancelled(), if !draining => {
                    draining = true;
                    let deadline = self.deadline.start();
                    self.health.set(State::Draining, "shutting down");
                    source.stop();
                    let released = bounded(deadline, "release queued messages", self.release_waiting(&mut book)).await;
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
                    break end_reason.take().map_or(Ended::Shutdown, Ended::GroupEnded);
                }
                Some(done) = book.tasks.join_next_with_id() => match done {
                    Ok((task, (id, step))) => {
                        book.running.remove(&task);
                        self.finished(&mut book, id, step, draining).await;
                    }
                    Err(e) => {
                        // Only a panic gets here (tasks are aborted only at the
                        // deadline, after which the loop ends): the message is left to
                        // JetStream's redelivery and must not block its lane.
                        tracing::error!(error = %e, "a message task failed; its message is redelivered after ack_wait");
                        if let Some(id) = book.running.remove(&e.id()) {
                            self.finished(&mut book, id, Step::Settled, draining).await;
                        }
                    }
                },
                () = sleep_until(next_timer) => self.timers_due(&mut book, draining).await,
                changed = app_healthy.changed(), if !draining && health_watched => {
                    if changed.is_ok() {
                        healthy = *app_healthy.borrow_and_update();
                        source.set_paused(!healthy);
                        self.set_serving_state(healthy, &standing);
                        handover_armed = !healthy && self.pinned_mode;
                        if handover_armed {
                            handover.as_mut().reset(Instant::now() + self.unhealthy_handover);
                        }
                    } else {
                        health_watched = false;
                    }
                }
                () = &mut handover, if handover_armed && !draining => {
                    handover_armed = false;
                    if source.step_down().await {
                        // What waits here would only wait: the next instance takes it.
                        self.release_waiting(&mut book).await;
                        tracing::warn!(
                            unhealthy_for_ms = self.unhealthy_handover.as_millis(),
                            "the app stayed unhealthy: stepping down so that another instance is served"
                        );
                        self.health.set_pinned(false);
                        self.set_serving_state(healthy, &standing);
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
                        self.health.set_pinned(pinned);
                        if !draining {
                            self.set_serving_state(healthy, &standing);
                        }
                    }
                    PullEvent::Assignment(partitions) => {
                        self.health.set_partitions(partitions.clone());
                        standing.waiting = None;
                        standing.unavailable = None;
                        standing.assignment = Some(partitions);
                        if !draining {
                            self.set_serving_state(healthy, &standing);
                        }
                    }
                    PullEvent::Waiting(reason) => {
                        self.health.set_partitions(Vec::new());
                        standing.waiting = Some(reason);
                        standing.assignment = None;
                        if !draining {
                            self.set_serving_state(healthy, &standing);
                        }
                    }
                    PullEvent::Unavailable(reason) => {
                        standing.unavailable = Some(reason);
                        if !draining {
                            self.set_serving_state(healthy, &standing);
                        }
                    }
                    PullEvent::Quiesce => {
                        if !draining {
                            quiescing = true;
                            let released = self.release_waiting(&mut book).await;
                            tracing::info!(in_flight = book.tasks.len(), released, "assignment changing: settling what is held");
                        }
                    }
                    PullEvent::Ended(reason) => {
                        if !draining {
                            tracing::info!(reason = %reason, "the group ended: draining");
                            draining = true;
                            end_reason = Some(reason);
                            self.health.set(State::Draining, "the group ended");
                            source.stop();
                            let deadline = self.deadline.or_from_now();
                            bounded(deadline, "release queued messages", self.release_waiting(&mut book)).await;
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
        };
        // Every step from here may talk to NATS, which may be gone: each is bounded by
        // what is left of the grace (a source lost or failed gets a grace of its own).
        let deadline = self.deadline.or_from_now();
        if self.pinned_mode && self.health.status().pinned {
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
        self.health.set_pinned(false);
        Ok(ended)
    }

    /// Consuming, standby (pinned mode, no pin), a group member's waiting states, or
    /// not ready (app unhealthy).
    fn set_serving_state(&self, app_healthy: bool, standing: &Standing) {
        if !app_healthy {
            self.health
                .set(State::NotReady, "the app is not healthy (http.health_url)");
        } else if let Some(why) = &standing.unavailable {
            self.health.set(State::NotReady, why.clone());
        } else if let Some(why) = &standing.waiting {
            self.health.set(State::WaitingForMembership, why.clone());
        } else if standing.assignment.as_ref().is_some_and(Vec::is_empty) {
            self.health.set(
                State::NoPartitions,
                "no partitions are assigned to this member",
            );
        } else if self.pinned_mode && !self.health.status().pinned {
            // Health says whether another instance holds the pin or nobody does.
            self.health.set(State::Standby, "");
        } else {
            self.health.set(State::Consuming, "");
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
        book.timers
            .schedule(now + self.progress_every, id, Due::Progress);
        book.held.insert(
            id,
            Entry {
                attempt: delivery.delivered(),
                delivery: Arc::new(delivery),
                settler,
                lane,
                received: now,
                retry_at: None,
            },
        );
    }

    /// Starts requests while slots are free: due retries first, then lanes.
    fn fill(self: &Arc<Self>, book: &mut Book) {
        while book.tasks.len() < self.max_in_flight {
            let id = match book.due.pop_front() {
                Some(id) => id,
                None => match book.lanes.pop() {
                    Some((_, id)) => id,
                    None => return,
                },
            };
            let Some(e) = book.held.get_mut(&id) else {
                continue;
            };
            e.retry_at = None;
            let (delivery, settler) = (Arc::clone(&e.delivery), e.settler.clone());
            let (attempt, received) = (e.attempt, e.received);
            let this = Arc::clone(self);
            let task = book.tasks.spawn(async move {
                let step = this.attempt(&delivery, &settler, attempt, received).await;
                (id, step)
            });
            book.running.insert(task.id(), id);
        }
    }

    async fn finished(&self, book: &mut Book, id: u64, step: Step, draining: bool) {
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
                    let settler = e.settler.clone();
                    let lane = e.lane.clone();
                    book.take(id);
                    book.lanes.done(&lane);
                    self.release(&settler, delay).await;
                } else {
                    let at = Instant::now() + delay;
                    e.retry_at = Some(at);
                    book.timers.schedule(at, id, Due::Retry);
                }
            }
        }
    }

    async fn timers_due(&self, book: &mut Book, draining: bool) {
        let now = Instant::now();
        while let Some((id, due)) = book.timers.pop_due(now) {
            let Some(e) = book.held.get(&id) else {
                continue; // settled since: lazy removal
            };
            match due {
                Due::Progress => {
                    match e.settler.progress().await {
                        Ok(true) => self.metrics.progress_sent.inc(),
                        Ok(false) => {} // the connection is down: nobody would hear it
                        Err(err) => self.settle_failed(&err),
                    }
                    book.timers
                        .schedule(now + self.progress_every, id, Due::Progress);
                }
                Due::Retry if e.retry_at.is_some() && !draining => book.due.push_back(id),
                Due::Retry => {}
            }
        }
    }

    /// Shutdown: queued messages are released at once, retries keep their delay.
    async fn release_waiting(&self, book: &mut Book) -> usize {
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

    /// One attempt: one request, one decision, then either one final action and one
    /// log line, or (ordered lanes) an in-place retry reported back.
    async fn attempt(
        &self,
        d: &Delivery,
        settler: &Settler,
        attempt: u32,
        received: Instant,
    ) -> Step {
        let (outcome, status, http_ms) = match &d.invalid {
            Some(why) => (Outcome::Invalid(why.clone()), None, None),
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
                (f.outcome, status, Some(f.elapsed.as_millis()))
            }
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
        let disposition = self.policy.decide(&outcome, attempt);
        let (label, result, delay, reason) = match disposition {
            Disposition::Ack => (SettleLabel::Ack, settler.ack().await, None, None),
            Disposition::Retry { delay } if self.ordering != Ordering::None => {
                tracing::warn!(
                    stream_seq = d.stream_seq(),
                    attempt,
                    status,
                    http_ms,
                    delay_ms = delay.as_millis(),
                    action = action.as_deref(),
                    "message will be retried in its lane"
                );
                return Step::RetryIn(delay);
            }
            Disposition::Retry { delay } => (
                SettleLabel::Nak,
                settler.nak(delay).await,
                Some(delay),
                None,
            ),
            Disposition::Term { reason } => {
                self.terminate(d, settler, attempt, status, &reason).await
            }
        };
        let elapsed = received.elapsed();
        self.metrics.message_duration.observe(elapsed.as_secs_f64());
        match &result {
            Ok(()) => self.metrics.settled(label),
            Err(e) if label == SettleLabel::Ack => {
                self.metrics.ack_failures.inc();
                tracing::warn!(error = %e, stream_seq = d.stream_seq(), "the ack was not confirmed: the message may be redelivered");
            }
            Err(e) => self.settle_failed(e),
        }
        let stream = d.meta.as_ref().map(|m| m.stream.as_str()).unwrap_or("");
        let delay_ms = delay.map(|d| d.as_millis());
        // One record per message, after its final action; never the payload.
        macro_rules! settled_event {
            ($level:expr, $message:literal) => {
                tracing::event!(
                    $level,
                    stream,
                    stream_seq = d.stream_seq(),
                    delivered = d.delivered(),
                    attempt,
                    partition = d.partition,
                    outcome = label.as_str(),
                    status,
                    http_ms,
                    duration_ms = elapsed.as_millis(),
                    settled = result.is_ok(),
                    action = action.as_deref(),
                    delay_ms,
                    reason = reason.as_deref(),
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
        Step::Settled
    }

    /// Dead-letters (when configured) then TERMs. When the dead-letter publish fails,
    /// the message is NAKed with backoff instead: nothing is lost.
    async fn terminate(
        &self,
        d: &Delivery,
        settler: &Settler,
        attempt: u32,
        status: Option<u16>,
        reason: &TermReason,
    ) -> (
        SettleLabel,
        Result<(), NatsError>,
        Option<Duration>,
        Option<String>,
    ) {
        let text = reason.to_string();
        let Some(dlq) = &self.dlq else {
            return (
                SettleLabel::Term,
                settler.term(&text).await,
                None,
                Some(text),
            );
        };
        let headers = dlq::headers(&DeadLetter {
            delivery: d,
            attempts: attempt,
            last_status: status,
            reason: &text,
            at: time::OffsetDateTime::now_utc(),
        });
        match dlq.publish(&headers, d.payload.clone()).await {
            Ok(()) => (
                SettleLabel::Dlq,
                settler.term(&text).await,
                None,
                Some(text),
            ),
            Err(e) => {
                self.metrics.dlq_failures.inc();
                let delay = backoff(self.policy.retry_initial, self.policy.retry_max, attempt);
                tracing::error!(error = %e, stream_seq = d.stream_seq(), "dead-letter publish failed; the message is retried instead");
                (
                    SettleLabel::Nak,
                    settler.nak(delay).await,
                    Some(delay),
                    Some(text),
                )
            }
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
