//! The dispatcher: pull → lanes → forward → decide → (publish) → settle, with bounded
//! concurrency, in-progress keep-alives, in-place retries, dead-lettering, app health
//! gating, the unreachable app, and the drain on shutdown. The only module that sees
//! both sides, through the seams of `crate::seam`: [`Source`] and [`Settle`] on the
//! NATS side, [`Forward`] on the app's, and [`Publish`] for dead letters and outputs.
//!
//! - `book`: every held message, its lane, its timers and the bytes held.
//! - `gate`: whether work may start, and what readiness says about it (pure); the
//!   app's half of it and the pacing are `crate::admission`'s, shared with other runners.
//! - `attempt`: one message's (or one batch's) work, run as a task.
//! - `fates`: what a batch answer means for each message, and the held-back rule (pure).
//! - `outputs`: an answer's outputs published before the input's ack.
//! - `handover`: a pinned instance hands what it holds to the next one in stream order.
//! - `markers`: a processed message's idempotency marker written before its ack, and
//!   a delivery whose marker exists acked without a request; `prefetch`: the markers
//!   of what a pull brings read together ahead of the attempts (pure bookkeeping).
//! - `lanes`, `timers`: the ordered-lane scheduler and the one timer set (pure).
//! - `watched`: a `watch` the loop follows until its sender is gone.
//! - this file: the loop, which routes what happens to the part it concerns.
//!
//! Bounds: at most `max_in_flight` requests run, in one `JoinSet`; at most
//! `max_buffered` messages (and `max_buffered_bytes` of payload) are held, because the
//! source sizes its pulls by what is held and the consumer's `max_ack_pending` equals
//! `max_buffered`. A message is settled only after its outcome is known; a
//! per-message failure never ends the loop; nothing is given up that JetStream would
//! not deliver again.

mod attempt;
mod book;
mod ends;
mod fates;
mod gate;
mod handover;
pub mod lanes;
mod markers;
mod outputs;
mod prefetch;
#[cfg(test)]
mod tests;
pub mod timers;
mod watched;

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use self::attempt::BatchItem;
use self::book::{Book, Done, Fill, Settlement, Step};
pub use self::ends::{DispatchError, Ended};
use self::gate::Gate;
use self::lanes::LaneKey;
pub use self::markers::Marking;
pub use self::outputs::OutputRules;
use self::watched::Watched;
use crate::admission::{BudgetPermit, BudgetShare, Pacing, Reach};
use crate::capacity::Limits;
use crate::message::Delivery;
use crate::ops::metrics::{AgeStage, SourceMetrics};
use crate::ops::readiness::{SourceReadiness, State};
use crate::ops::traces::Tracer;
use crate::pace::PaceSettings;
use crate::policy::Policy;
use crate::route::Route;
use crate::seam::Ordering;
use crate::seam::markers::Markers;
use crate::seam::publish::Publish;
use crate::seam::time::{Alarm, Deadline, bounded};
use crate::seam::{Event, Forward, Health, ServerPause, Settle, Source};

/// How long a consumer frozen for a handover stays paused at most (the handover
/// itself takes a few round trips; the server resumes it if this process is killed
/// meanwhile).
const FREEZE_BOUND: Duration = Duration::from_secs(5);

/// Batch delivery: many messages per request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batching {
    /// Messages per request at most.
    pub size: usize,
    /// Payload bytes per request at most (a larger message goes alone).
    pub max_bytes: u64,
    /// How long a partial batch may wait for more.
    pub wait: Duration,
}

/// What the dispatcher needs, shared with every message task. `F` is where messages
/// go (the app's HTTP client), `P` where dead letters and outputs are published (NATS),
/// `M` where the idempotency markers live (a KV bucket); fakes of all in tests.
#[derive(Debug)]
pub struct Dispatch<F, P, M> {
    /// What a reload may change ([`Live`]), swapped whole.
    pub live: watch::Receiver<Arc<Live<F>>>,
    /// Dead letters and outputs.
    pub publisher: P,
    /// Processed-once markers (`None`: off).
    pub markers: Option<Marking<M>>,
    /// Collectors.
    pub metrics: SourceMetrics,
    /// Readiness.
    pub readiness: SourceReadiness,
    /// Messages held at most (`delivery.max_buffered`): under a lower adaptive limit
    /// the pull engine is told to fill less of it.
    pub max_buffered: usize,
    /// Whether the source is a pinned consumer (standby until pinned).
    pub pinned_mode: bool,
    /// Lanes: `partition`, `subject`, `token:N`, `header:NAME` or `none`.
    pub ordering: Ordering,
    /// How often a held message gets `+WPI` (half the ack wait).
    pub progress_every: Duration,
    /// Where permanent failures go before their TERM (`dlq.subject`; `None`: they are
    /// terminated without a dead letter).
    pub dead_letters: Option<String>,
    /// Whether the consumer is paused on the server, as its info last said.
    pub server_pause: watch::Receiver<ServerPause>,
    /// The end of the shutdown grace, shared with the supervisor: started when the
    /// shutdown is seen; bounds the drain and every NATS step after it.
    pub deadline: Deadline,
    /// Records the spans of deliveries, requests and publishes (export off: nothing).
    pub tracer: Tracer,
    /// This source's part of the requests in flight across all sources (`[budget]`;
    /// off, it only counts).
    pub budget: BudgetShare,
    /// At most this many messages are kept on their last delivery while the DLQ does
    /// not store their dead letters; one more is terminated without one (it stays in
    /// its stream), so that letters that cannot be stored never stall the consumer.
    pub letters_waiting_max: usize,
}

/// What readiness says of a pause (`None`: not paused).
fn paused_reason(pause: ServerPause) -> Option<String> {
    pause
        .is_paused()
        .then(|| format!("paused on the server {}", pause.until_text()))
}

/// What the dispatcher takes that a reload (SIGHUP) may change. The loop follows a
/// new one at once (the limits, the app's health); a message's work takes the one in
/// force when its step runs, and a request already sent finishes as it started.
#[derive(Debug)]
pub struct Live<F> {
    /// The app.
    pub forwarder: F,
    /// Outcome → disposition.
    pub policy: Policy,
    /// The concurrency limit (fixed or adaptive) and the rate limit.
    pub pace: PaceSettings,
    /// Batch delivery (many messages per request), or one message per request.
    pub batch: Option<Batching>,
    /// The rules the outputs of the app's answers must meet (`None`: publishing is
    /// off, and an answer that publishes is refused).
    pub outputs: Option<OutputRules>,
    /// Pinned sources: how long the app may be unhealthy (or unreachable) before this
    /// instance steps down so that a healthy instance of the member takes over.
    pub unhealthy_handover: Duration,
    /// Whether the app is healthy (always true without `http.health_url`).
    pub app_healthy: watch::Receiver<Health>,
    /// What the source pulls at most (`max_batch`, `max_buffered_bytes`), and whether
    /// acks wait for the server.
    pub limits: Limits,
    /// Whether acks wait for the server's confirmation (`delivery.ack`).
    pub confirmed_acks: bool,
    /// The source's routes, first match first, each with what sends to its target
    /// (a message none matches goes to `forwarder`).
    pub routes: Vec<Route<F>>,
    /// `delivery.max_age_ms`: older when about to be sent, it is dead-lettered as
    /// `too_old` (`None`: no limit).
    pub max_age: Option<Duration>,
    /// `http.unwrap_cloudevents`: a structured CloudEvent goes to the app as its data,
    /// its attributes as `ce-*` headers (a malformed one is dead-lettered).
    pub unwrap_cloudevents: bool,
}

/// The loop's state besides the book and the gate.
struct Run<S: Source, F> {
    source: S,
    book: Book<S::Settler>,
    gate: Gate,
    /// The app's health (without a health URL nobody ever sends).
    app_healthy: Watched<Health>,
    /// The consumer's pause on the server.
    server_pause: Watched<ServerPause>,
    /// What a reload changes.
    live: Watched<Arc<Live<F>>>,
    /// Shutting down (or the group ended): nothing new starts; what is held settles.
    draining: bool,
    /// A group's assignment is changing: nothing new starts until all is settled.
    quiescing: bool,
    end_reason: Option<String>,
    /// The end of the drain's grace (set when the drain begins).
    grace: Alarm,
    /// Set while the app cannot take work and this instance is pinned.
    handover: Alarm,
    /// A pinned instance's drain: what it gives back as it hands over, when the run
    /// ends.
    deferred: Option<handover::Deferred<S::Settler>>,
    /// The next timer, batch hold-back or pacing wait.
    alarm: Alarm,
    /// Batch delivery: since when a partial batch waits for more.
    batch_since: Option<Instant>,
    /// The limit in force and the rate limit.
    pacing: Pacing,
    /// The budget held back work that could start: wake when a slot frees.
    budget_blocked: bool,
}

/// What an event asks of the loop.
enum Flow {
    Go,
    /// Readiness, pulling and the handover follow the gate.
    Refresh,
    Stop(Ended),
    Fail(DispatchError),
}

impl<F: Forward, P: Publish, M: Markers> Dispatch<F, P, M> {
    /// The settings in force now.
    pub(crate) fn live(&self) -> Arc<Live<F>> {
        Arc::clone(&self.live.borrow())
    }

    /// Runs until shutdown (then drains) or until the source ends.
    ///
    /// # Errors
    /// [`DispatchError`] when the source fails fatally.
    pub async fn run<S: Source>(
        self: &Arc<Self>,
        source: S,
        shutdown: CancellationToken,
    ) -> Result<Ended, DispatchError> {
        let mut run = self.start(source);
        let ended = loop {
            if let Some(ended) = self.turn(&mut run).await {
                break ended;
            }
            let was_serviceable = run.gate.app.serviceable();
            let next_timer = earliest(
                earliest(run.book.timers.next_deadline(), self.batch_due(&run)),
                run.pacing.wait,
            );
            run.alarm.set(next_timer);
            let held = run
                .pacing
                .held_for_pulls(run.book.held(), self.max_buffered);
            // Every arm is cancel-safe: the losing ones are polled again next turn.
            let flow = tokio::select! {
                biased;
                // Shutdown only stops intake: in-flight requests are never cancelled here.
                () = shutdown.cancelled(), if !run.draining => {
                    self.begin_drain(&mut run, self.deadline.start(), "shutting down", None).await;
                    Flow::Go
                }
                () = run.grace.ring(), if run.draining => {
                    self.grace_over(&mut run).await;
                    Flow::Stop(run.end_reason.take().map_or(Ended::Shutdown, Ended::GroupEnded))
                }
                Some(joined) = run.book.tasks.join_next_with_id() => self.joined(&mut run, joined).await,
                () = run.alarm.ring() => {
                    self.timers_due(&mut run.book, run.draining).await;
                    Flow::Go
                }
                health = run.app_healthy.next(), if !run.draining => {
                    run.gate.app.health = health;
                    Flow::Refresh
                }
                pause = run.server_pause.next(), if !run.draining => self.paused(&mut run, pause),
                now = run.live.next(), if !run.draining => self.reloaded(&mut run, &now),
                () = run.handover.ring(), if !run.draining => self.step_down(&mut run).await,
                () = self.budget.freed(), if run.budget_blocked => Flow::Go,
                ev = run.source.next(held) => {
                    let flow = self.event(&mut run, ev).await;
                    self.take_ready(&mut run, flow).await
                }
            };
            match flow {
                Flow::Go => {}
                Flow::Refresh => self.refresh(&mut run, was_serviceable),
                Flow::Stop(ended) => break ended,
                Flow::Fail(e) => return Err(e),
            }
        };
        let deferred = run.deferred.map(handover::Deferred::into_releases);
        self.close(run.source, deferred.unwrap_or_default()).await;
        Ok(ended)
    }

    /// The loop's state at its start: the gate from the app's health and the
    /// server's pause as they are now, pulling paused while work cannot start.
    fn start<S: Source>(&self, source: S) -> Run<S, F> {
        let (live, now) = Watched::new(self.live.clone());
        let (app_healthy, health) = Watched::new(now.app_healthy.clone());
        let (server_pause, pause) = Watched::new(self.server_pause.clone());
        let mut gate = Gate::new(health);
        gate.paused = paused_reason(pause);
        let mut run = Run {
            source,
            book: Book::new(),
            gate,
            app_healthy,
            server_pause,
            live,
            draining: false,
            quiescing: false,
            end_reason: None,
            grace: Alarm::default(),
            handover: Alarm::default(),
            deferred: None,
            alarm: Alarm::default(),
            batch_since: None,
            pacing: Pacing::new(now.pace),
            budget_blocked: false,
        };
        run.source.set_paused(!run.gate.app.serviceable());
        self.metrics.paused(run.gate.paused.is_some());
        self.show(&run.gate);
        run
    }

    /// A message task ended: its steps are applied; a task that panicked leaves its
    /// messages to JetStream's redelivery.
    async fn joined<S: Source>(
        self: &Arc<Self>,
        run: &mut Run<S, F>,
        joined: Result<(tokio::task::Id, Done), tokio::task::JoinError>,
    ) -> Flow {
        match joined {
            Ok((task, done)) => {
                run.book.running.remove(&task);
                run.pacing.finished(task, done.sample);
                self.done(run, done).await
            }
            Err(e) => {
                // Only a panic gets here (tasks are aborted only at the deadline,
                // after which the loop ends): the message is left to JetStream's
                // redelivery and must not block its lane.
                tracing::error!(error = %e, "a message task failed; its message is redelivered after ack_wait");
                run.pacing.finished(e.id(), None);
                if let Some(ids) = run.book.running.remove(&e.id()) {
                    let steps = ids
                        .into_iter()
                        .map(|id| (id, Step::Settled(Settlement::RELEASED)))
                        .collect();
                    let done = Done {
                        steps,
                        reach: Reach::NotAsked,
                        sample: None,
                    };
                    self.done(run, done).await;
                }
                Flow::Go
            }
        }
    }

    /// Between two events: a quiesce completes, work starts, the gauges follow, and
    /// a drain that has nothing left ends the loop.
    async fn turn<S: Source>(self: &Arc<Self>, run: &mut Run<S, F>) -> Option<Ended> {
        if run.quiescing && run.book.tasks.is_empty() && !run.draining {
            run.source.quiesced().await;
            run.quiescing = false;
        }
        run.budget_blocked = false;
        // Before any attempt starts: the markers of what came meanwhile are read.
        self.read_ahead();
        let mut filled = false;
        if run.draining {
            // Only dead letters still to publish remain held.
            run.budget_blocked = self.fill(&mut run.book, &mut run.pacing, Fill::All, true);
            filled = true;
        } else if run.gate.app.health.is_healthy() && !run.quiescing && run.gate.paused.is_none() {
            let mode = if run.gate.app.unreachable.is_some() {
                Fill::Probe
            } else {
                Fill::All
            };
            // A partial batch goes when it has waited `batch_wait` (at once with none).
            if self.live().batch.is_some() && run.book.startable() > 0 {
                run.batch_since.get_or_insert_with(Instant::now);
            }
            let partial = self.batch_due(run).is_none_or(|due| Instant::now() >= due);
            run.budget_blocked = self.fill(&mut run.book, &mut run.pacing, mode, partial);
            filled = true;
            if run.book.startable() == 0 {
                run.batch_since = None;
            }
        }
        if !filled {
            // Held back by its gate (unhealthy, paused, quiescing): no share is kept
            // for it while it cannot use one.
            self.budget.set_waiting(false);
        }
        let held = run.book.held();
        let limit = run.pacing.limit();
        self.metrics.held(held.messages, run.book.tasks.len());
        self.metrics.pace(limit, run.book.tasks.len());
        self.readiness.set_concurrency_limit(limit);
        (run.draining && run.book.tasks.is_empty() && run.book.letters_waiting() == 0).then(|| {
            run.end_reason
                .take()
                .map_or(Ended::Shutdown, Ended::GroupEnded)
        })
    }

    /// Pulling, readiness and the handover follow whether the app can take work.
    fn refresh<S: Source>(&self, run: &mut Run<S, F>, was_serviceable: bool) {
        if run.draining {
            return;
        }
        let serviceable = run.gate.app.serviceable();
        if serviceable != was_serviceable {
            run.source.set_paused(!serviceable);
            let handover = !serviceable && self.pinned_mode;
            run.handover
                .set(handover.then(|| Instant::now() + self.live().unhealthy_handover));
        }
        self.show(&run.gate);
    }

    /// A reload: the limits in force change now (a lower one lets what runs finish),
    /// the source pulls by the new sizes, and the gate follows the new health probe.
    fn reloaded<S: Source>(&self, run: &mut Run<S, F>, live: &Live<F>) -> Flow {
        run.pacing.reconfigure(live.pace);
        run.source.reconfigure(live.limits, live.confirmed_acks);
        let (app_healthy, health) = Watched::new(live.app_healthy.clone());
        run.app_healthy = app_healthy;
        run.gate.app.health = health;
        Flow::Refresh
    }

    /// The consumer was paused or resumed on the server. Pulling goes on (a pinned
    /// consumer keeps its pin, an elastic member's consumer stays active) but nothing
    /// starts; what is held is kept alive by its progress timer. On the resume the
    /// source is woken: the server does not serve the pulls that waited through the
    /// pause until a new one comes.
    fn paused<S: Source>(&self, run: &mut Run<S, F>, pause: ServerPause) -> Flow {
        let reason = paused_reason(pause);
        if reason == run.gate.paused {
            return Flow::Go;
        }
        let was_paused = run.gate.paused.is_some();
        match &reason {
            // Deliberate (jetrelay pause): information, not a warning.
            Some(why) => tracing::info!(
                held = run.book.held().messages,
                in_flight = run.book.tasks.len(),
                "{why}: nothing new is delivered, what is held is kept alive"
            ),
            None => tracing::info!("the consumer was resumed on the server: delivering again"),
        }
        run.gate.paused = reason;
        self.metrics.paused(run.gate.paused.is_some());
        if was_paused && run.gate.paused.is_none() {
            run.source.wake();
        }
        Flow::Refresh
    }

    /// Readiness from the gate (a pinned consumer without the pin shows standby).
    fn show(&self, gate: &Gate) {
        let pinned = self.readiness.status().pinned;
        let (state, reason) = gate.shown(self.pinned_mode, pinned);
        // Healthy is what the probe says *and* reachable: an app whose port is closed
        // is not healthy, probe or no probe. Set before readiness, so that whoever
        // sees the new state also sees the gauge.
        self.metrics.app_healthy(gate.app.serviceable());
        self.readiness.set(state, reason);
    }

    /// Stops intake: readiness says why, the source stops, what waits is released,
    /// and in-flight work gets until `deadline`.
    async fn begin_drain<S: Source>(
        &self,
        run: &mut Run<S, F>,
        deadline: Instant,
        why: &'static str,
        end_reason: Option<String>,
    ) {
        run.draining = true;
        run.end_reason = end_reason;
        self.readiness.set(State::Draining, why);
        run.source.stop();
        // The pulls still open on the server end first: a message released while one
        // of them is open comes straight back here (a pinned instance is still the
        // one served), to be released again behind newer ones, which the next
        // instance would then see first. Then what is held goes back in stream order,
        // and what the pulls brought meanwhile (newer still) after it: at once, or,
        // for a pinned instance (whose messages nobody else may take before it
        // unpins), as it hands over when the run ends (`close`).
        let left = bounded(deadline, "retire the pulls", run.source.retire())
            .await
            .unwrap_or_default();
        let releases = self.handover_releases(run, left);
        let released = releases.len();
        if self.pinned_mode && self.readiness.status().pinned {
            run.deferred = Some(handover::Deferred::new(releases));
        } else {
            bounded(deadline, "release queued messages", async {
                for (settler, delay) in &releases {
                    self.release(settler, *delay).await;
                }
            })
            .await;
        }
        tracing::info!(in_flight = run.book.tasks.len(), released, "draining");
        run.grace.set(Some(deadline));
    }

    /// The grace is over: what still runs is abandoned (JetStream redelivers it).
    async fn grace_over<S: Source>(&self, run: &mut Run<S, F>) {
        let book = &mut run.book;
        self.metrics.abandoned(book.held.len());
        tracing::warn!(
            unfinished = book.tasks.len(),
            "shutdown grace is over: unfinished messages are left for redelivery after ack_wait"
        );
        book.tasks.abort_all();
        while book.tasks.join_next().await.is_some() {}
        for e in book.held.values().filter(|e| e.verdict.is_some()) {
            tracing::error!(
                stream_seq = e.delivery.stream_seq(),
                subject = %e.delivery.message.subject,
                "shutdown with a dead letter still unpublished: the message is on its last delivery and stays in its stream, not redelivered to this consumer"
            );
        }
    }

    /// The app stayed unhealthy or unreachable: this instance steps down so that
    /// another instance of the member is served.
    async fn step_down<S: Source>(&self, run: &mut Run<S, F>) -> Flow {
        if !self.readiness.status().pinned {
            return Flow::Go;
        }
        // What waits here would only wait: the next instance takes it, in order.
        let left = run.source.retire().await;
        let releases = self.handover_releases(run, left);
        let frozen = self
            .begin_handover(&mut run.source, releases, FREEZE_BOUND)
            .await;
        if !self.finish_handover(&mut run.source, frozen, true).await {
            return Flow::Go;
        }
        tracing::warn!(
            unhealthy_for_ms = self.live().unhealthy_handover.as_millis(),
            "the app stayed unhealthy or unreachable: stepping down so that another instance is served"
        );
        self.readiness.set_pinned(false);
        Flow::Refresh
    }

    /// Batch delivery: after one event, takes what the source has ready at once (a
    /// pull's worth of messages), so that a batch is filled with it rather than sent
    /// with the first message alone. The source's `next` is cancel-safe, so a poll that
    /// finds nothing ready loses nothing.
    async fn take_ready<S: Source>(&self, run: &mut Run<S, F>, mut flow: Flow) -> Flow {
        let Some(b) = self.live().batch else {
            return flow;
        };
        for _ in 0..b.size {
            if !matches!(flow, Flow::Go | Flow::Refresh) {
                break;
            }
            let held = run.book.held();
            let Some(ev) = run.source.next(held).now_or_never() else {
                break;
            };
            flow = match (flow, self.event(run, ev).await) {
                (Flow::Refresh, Flow::Go) => Flow::Refresh,
                (_, next) => next,
            };
        }
        flow
    }

    /// A source event.
    async fn event<S: Source>(&self, run: &mut Run<S, F>, ev: Event<S::Settler>) -> Flow {
        let standing = &mut run.gate.standing;
        match ev {
            Event::Message(delivery, settler) => {
                self.metrics.received(delivery.delivered() > 1);
                if let Some(age) = delivery.age(time::OffsetDateTime::now_utc()) {
                    self.metrics.message_age(AgeStage::Received, age);
                }
                if let Some(d) = run.deferred.as_mut() {
                    // Delivered by a pull sent before the stop: it goes with the handover.
                    d.arrived(settler);
                } else if run.draining || run.quiescing {
                    // Delivered by a pull sent before the stop: move it on.
                    self.release(&settler, Duration::ZERO).await;
                } else {
                    self.hold(&mut run.book, *delivery, settler);
                }
                Flow::Go
            }
            Event::Pinned(pinned) => {
                self.readiness.set_pinned(pinned);
                Flow::Refresh
            }
            Event::Assignment(partitions) => {
                self.readiness.set_partitions(partitions.clone());
                standing.waiting = None;
                standing.unavailable = None;
                standing.assignment = Some(partitions);
                Flow::Refresh
            }
            Event::Waiting(reason) => {
                self.readiness.set_partitions(Vec::new());
                standing.waiting = Some(reason);
                standing.unavailable = None;
                standing.assignment = None;
                Flow::Refresh
            }
            Event::Unavailable(reason) => {
                standing.unavailable = Some(reason);
                Flow::Refresh
            }
            Event::Quiesce => {
                if !run.draining {
                    run.quiescing = true;
                    let released = self.release_waiting(&mut run.book, false).await;
                    tracing::info!(
                        in_flight = run.book.tasks.len(),
                        released,
                        "assignment changing: settling what is held"
                    );
                }
                Flow::Go
            }
            Event::Ended(reason) => {
                if !run.draining {
                    tracing::info!(reason = %reason, "the group ended: draining");
                    let deadline = self.deadline.or_from_now();
                    self.begin_drain(run, deadline, "the group ended", Some(reason))
                        .await;
                }
                Flow::Go
            }
            Event::Released { naked, failed } => {
                self.metrics.released(naked as u64);
                self.metrics.settle_failed(failed as u64);
                Flow::Go
            }
            Event::ConsumerGone(reason) => {
                run.source.stop();
                // The consumer is gone: what is held cannot be settled any more; the
                // in-flight requests finish (their settle fails, and is counted).
                run.book.lanes.drain();
                run.book.due.clear();
                while run.book.tasks.join_next().await.is_some() {}
                Flow::Stop(Ended::SourceLost(reason))
            }
            Event::Fatal(reason) => {
                run.source.stop();
                while run.book.tasks.join_next().await.is_some() {}
                Flow::Fail(DispatchError::Source(reason))
            }
        }
    }

    /// The end of a run: a pinned instance hands over, the source closes, what it
    /// had delivered but nobody took is released. Every step may talk to NATS, which
    /// may be gone: each is bounded by what is left of the grace.
    async fn close<S: Source>(&self, mut source: S, deferred: Vec<(S::Settler, Duration)>) {
        let deadline = self.deadline.or_from_now();
        // Hand over at once: a standby instance of the member is served next, without
        // waiting for the pin timeout, from the oldest message this one held.
        let pinned = self.pinned_mode && self.readiness.status().pinned;
        let handover = async {
            let frozen = self
                .begin_handover(&mut source, deferred, FREEZE_BOUND)
                .await;
            self.finish_handover(&mut source, frozen, pinned).await
        };
        if bounded(deadline, "hand over", handover).await == Some(true) {
            tracing::info!("unpinned: a standby instance takes over");
        }
        if let Some(left) = bounded(deadline, "close the pull inbox", source.close()).await {
            bounded(deadline, "release undelivered messages", async {
                for settler in left {
                    self.release(&settler, Duration::ZERO).await;
                }
            })
            .await;
        }
        self.metrics.held(0, 0);
        self.readiness.set_pinned(false);
    }

    fn hold<T: Settle>(&self, book: &mut Book<T>, delivery: Delivery, settler: T) {
        let lane = LaneKey::of(self.ordering, &delivery);
        let (seq, delivered) = (delivery.stream_seq(), delivery.delivered());
        let progress_at = Instant::now() + self.progress_every;
        let span = self.tracer.delivery(&delivery);
        let key = self.read_ahead_key(&delivery);
        if book
            .hold(delivery, settler, lane, progress_at, span)
            .is_some()
        {
            if let Some(key) = key {
                self.queue_read_ahead(key);
            }
        } else {
            // JetStream redelivered a message this loop still holds (its keep-alive
            // was lost, e.g. across a reconnect). Acks and keep-alives name the stream
            // sequence, so the held copy settles it; sending it again would only
            // duplicate the request. This delivery's settler is dropped.
            tracing::info!(
                stream_seq = seq,
                delivered,
                "a redelivery of a message still held is folded into it"
            );
        }
    }

    /// When a partial batch that waits for more goes anyway; `None` when nothing waits
    /// (or batches do not wait).
    fn batch_due<S: Source>(&self, run: &Run<S, F>) -> Option<Instant> {
        let b = self.live().batch?;
        if b.wait.is_zero() {
            return None;
        }
        run.batch_since.map(|since| since + b.wait)
    }

    /// Starts what may start under the limit in force and the rate limit: due
    /// retries first, then lanes; one message per task, or batches of them
    /// (`partial`: a batch that is not full may go). What waits for a slot or a start
    /// stays held (kept alive), with no attempt counted. Returns whether the budget
    /// (`[budget]`, shared with the other sources) held back what could start: the
    /// source then waits for a slot to free.
    fn fill<T: Settle>(
        self: &Arc<Self>,
        book: &mut Book<T>,
        pacing: &mut Pacing,
        mode: Fill,
        partial: bool,
    ) -> bool {
        let limit = match mode {
            Fill::All => pacing.limit(),
            Fill::Probe => 1,
        };
        self.budget.set_limit(limit);
        let blocked = self.start_some(book, pacing, mode, partial, limit);
        // Waiting for the budget, or with work held back by its own limit: its share
        // is kept for it (a share above its own limit is lent anyway), so that a
        // neighbour cannot take the slots its finishing requests free.
        let backlog = book.tasks.len() >= limit && book.startable() > 0;
        self.budget.set_waiting(blocked || backlog);
        blocked
    }

    /// [`Dispatch::fill`]'s starts; returns whether the budget refused one.
    fn start_some<T: Settle>(
        self: &Arc<Self>,
        book: &mut Book<T>,
        pacing: &mut Pacing,
        mode: Fill,
        partial: bool,
        limit: usize,
    ) -> bool {
        let Some(b) = self.live().batch else {
            while book.tasks.len() < limit && book.startable_in(mode) {
                // The budget first: a refused permit costs nothing, a rate-limit
                // token would be spent.
                let Some(permit) = self.budget.try_start() else {
                    return true;
                };
                if !pacing.may_start() {
                    return false;
                }
                let Some(id) = book.next_startable(mode, limit) else {
                    return false;
                };
                self.spawn(book, pacing, vec![id], permit);
            }
            return false;
        };
        while book.tasks.len() < limit
            && book.startable() > 0
            && (partial || book.startable() >= b.size)
        {
            let Some(permit) = self.budget.try_start() else {
                return true;
            };
            if !pacing.may_start() {
                return false;
            }
            let ids = book.next_batch(b.size, b.max_bytes);
            if ids.is_empty() {
                return false;
            }
            self.spawn(book, pacing, ids, permit);
        }
        false
    }

    /// Spawns one task for `ids`: one attempt, or a batch.
    fn spawn<T: Settle>(
        self: &Arc<Self>,
        book: &mut Book<T>,
        pacing: &mut Pacing,
        ids: Vec<u64>,
        permit: BudgetPermit,
    ) {
        let items: Vec<BatchItem<T>> = ids
            .iter()
            .filter_map(|&id| {
                let e = book.held.get(&id)?;
                Some(BatchItem {
                    id,
                    trace: e.span.as_ref().map(|s| s.context().clone()),
                    delivery: Arc::clone(&e.delivery),
                    settler: e.settler.clone(),
                    lane: e.lane.clone(),
                    attempt: e.attempt,
                    received: e.received,
                    verdict: e.verdict.clone(),
                    conflict: None,
                })
            })
            .collect();
        if items.is_empty() {
            return;
        }
        let this = Arc::clone(self);
        let batched = self.live().batch.is_some();
        // Boxed: the attempt's state machine is ~5.5 KB (the HTTP request, outputs and
        // dead letter inline). Unboxed, the task cell holds it and tokio moves it on
        // spawn and again when the output is taken, several memcpys of its size per
        // message (7 % of a forwarding profile); boxed, it is written once and the
        // cell holds a pointer.
        // In the source's span: its lines name the source.
        let task = book.tasks.spawn(Box::pin(
            async move {
                // The budget's slot, held for the whole task (returned on its end,
                // panic or abort).
                let _permit = permit;
                if batched {
                    let (steps, reach, sample) = this.attempt_batch(items).await;
                    return Done {
                        steps,
                        reach,
                        sample,
                    };
                }
                let mut steps = Vec::with_capacity(1);
                let mut reach = Reach::NotAsked;
                let mut sample = None;
                for i in items {
                    let trace = i.trace.as_ref();
                    let step = match i.verdict {
                        Some(v) => {
                            this.dead_letter_again(&i.delivery, &i.settler, v, i.received, trace)
                                .await
                        }
                        None => {
                            let (step, r, s) = this
                                .attempt(&i.delivery, &i.settler, i.attempt, i.received, trace)
                                .await;
                            reach = r;
                            sample = s;
                            step
                        }
                    };
                    steps.push((i.id, step));
                }
                Done {
                    steps,
                    reach,
                    sample,
                }
            }
            .in_current_span(),
        ));
        pacing.started(task.id(), book.tasks.len());
        book.running.insert(task.id(), ids);
    }
}

/// The earlier of two optional instants.
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
