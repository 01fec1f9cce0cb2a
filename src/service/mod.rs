//! A service source (`kind = "service"`): NATS requests on its endpoints' subjects,
//! each POSTed to the app and answered with what the app said (`reply`). The runner
//! ([`Service::run`]) admits requests as the dispatcher admits deliveries, through
//! `crate::admission`: the app's health and reachability, the limit in force
//! (`max_in_flight` or adaptive), the rate limit and the process's budget. While the
//! app cannot take work the instance leaves the queue group (so that the requests go
//! to healthy instances) and replies 503 at once to what it still receives; it
//! rejoins when the app is back (after an unreachable app, as a probe: one request at
//! a time, after a backoff). A drain leaves the group, lets the requests in flight
//! finish and reply, and replies 503 to those that were still on their way.
//!
//! It sees NATS and the app only through the seams (`crate::seam::service`), so that
//! its tests run it against fakes in virtual time. None of the dispatcher's JetStream
//! machinery (book, lanes, keep-alives, dead letters) is here: a request is answered
//! once, or not at all.

pub mod reply;
#[cfg(test)]
mod tests;
pub mod wait;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::{Id, JoinError, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use self::reply::{Replied, Unavailable};
use self::wait::{WaitBound, Waiting};
use crate::admission::{AppGate, BudgetPermit, BudgetShare, Pacing, Reach, Sample};
use crate::app::headers::TraceHeaders;
use crate::ops::announce::ServiceStats;
use crate::ops::metrics::{SourceMetrics, class_name};
use crate::ops::readiness::{SourceReadiness, State};
use crate::ops::traces::Tracer;
use crate::pace::PaceSettings;
use crate::policy::Policy;
use crate::seam::Health;
use crate::seam::service::{Exchange, Question, Replier, Requests, ServiceRequest};
use crate::seam::time::{Alarm, Deadline};

/// A service, as the config names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceSpec {
    /// Its name (`$SRV.INFO.<name>`).
    pub name: String,
    /// Its version.
    pub version: String,
    /// The queue group its instances share.
    pub queue_group: String,
    /// Its endpoints, in the config's order.
    pub endpoints: Vec<ServiceEndpoint>,
    /// The longest answer handed on as a reply.
    pub max_reply_bytes: usize,
    /// The NATS connection's name (`nats.name`), which discovery shows.
    pub connection: String,
    /// How many requests (and bytes) may wait for a slot; past it they are shed.
    pub wait: WaitBound,
}

/// One endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceEndpoint {
    /// Its name.
    pub name: String,
    /// The subject it answers.
    pub subject: String,
}

/// What the runner takes that a reload may change.
#[derive(Debug)]
pub struct Served<E> {
    /// Where each endpoint's requests go, aligned with the spec's endpoints.
    pub endpoints: Vec<E>,
    /// The concurrency limit (fixed or adaptive) and the rate limit.
    pub pace: PaceSettings,
    /// Whether the app is healthy (always, without `http.health_url`).
    pub app_healthy: watch::Receiver<Health>,
    /// How long to stay out of the queue group after the app was unreachable
    /// (`Policy::unreachable_delay`).
    pub policy: Policy,
}

/// One service source's runner.
#[derive(Debug)]
pub struct Service<E> {
    /// The service.
    pub spec: ServiceSpec,
    /// What a reload may change.
    pub live: watch::Receiver<Arc<Served<E>>>,
    /// Collectors.
    pub metrics: SourceMetrics,
    /// Readiness.
    pub readiness: SourceReadiness,
    /// Records the SERVER span of each request and the CLIENT span of its POST.
    pub tracer: Tracer,
    /// Its part of the requests in flight across all sources.
    pub budget: BudgetShare,
    /// The shutdown's deadline, shared with the process.
    pub deadline: Deadline,
    /// Its endpoints' counts, for discovery.
    pub stats: ServiceStats,
}

/// Why the runner stopped for good.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The queue group could not be joined (the connection is closed for good).
    #[error("cannot subscribe the service's endpoints")]
    Join(#[source] crate::seam::service::JoinError),
}

/// What a request's task reports when it ends.
#[derive(Debug, Clone, Copy)]
struct TaskEnd {
    /// What its request to the app said of the app's capacity (none: not asked).
    sample: Option<Sample>,
    /// Whether it reached the app.
    reach: Reach,
}

/// The loop's state.
struct Serving<R: Requests, E> {
    requests: R,
    replier: R::Replier,
    live: watch::Receiver<Arc<Served<E>>>,
    health: watch::Receiver<Health>,
    /// Whether the health probe still sends.
    health_open: bool,
    /// Whether a reload may still send new settings.
    live_open: bool,
    gate: AppGate,
    pacing: Pacing,
    /// Tasks of requests the app was asked, and of replies sent without asking.
    tasks: JoinSet<TaskEnd>,
    /// The tasks that ask the app (the rest only reply).
    asking: Vec<Id>,
    /// Whether the queue group is joined.
    joined: bool,
    /// Whether requests may still come (joined, or left and not yet drained).
    open: bool,
    draining: bool,
    /// The end of the drain's grace.
    grace: Alarm,
    /// When the instance may rejoin as a probe after the app was unreachable.
    probe: Alarm,
    /// Rejoined as a probe: one request at a time until one reaches the app.
    probing: bool,
    /// A slot taken for the next request (budget and rate limit).
    armed: Option<BudgetPermit>,
    /// The budget held back a start: wake when a slot frees.
    budget_blocked: bool,
    /// The rate limit's wait.
    pace_alarm: Alarm,
    /// Requests taken while no slot was free, waiting for one.
    waiting: Waiting,
}

/// What a turn of the loop does next.
enum Turn {
    Go,
    Stop,
}

impl<E: Exchange> Service<E> {
    /// Runs until `shutdown`, then drains: leaves the queue group, lets what is in
    /// flight finish and reply (until the grace), replies 503 to what still comes.
    ///
    /// # Errors
    /// [`ServiceError`] when the queue group cannot be joined for good.
    pub async fn run<R: Requests>(
        self: &Arc<Self>,
        requests: R,
        shutdown: CancellationToken,
    ) -> Result<(), ServiceError> {
        let now = Arc::clone(&self.live.borrow());
        let health = now.app_healthy.clone();
        let first = *health.borrow();
        let mut run = Serving {
            replier: requests.replier(),
            requests,
            live: self.live.clone(),
            health,
            health_open: true,
            live_open: true,
            gate: AppGate::new(first),
            pacing: Pacing::new(now.pace),
            tasks: JoinSet::new(),
            asking: Vec::new(),
            joined: false,
            open: false,
            draining: false,
            grace: Alarm::default(),
            probe: Alarm::default(),
            probing: false,
            armed: None,
            budget_blocked: false,
            pace_alarm: Alarm::default(),
            waiting: Waiting::default(),
        };
        loop {
            self.follow_gate(&mut run).await?;
            if run.draining && run.tasks.is_empty() && !run.open {
                break;
            }
            self.start_waiting(&mut run);
            self.admit(&mut run);
            // Always taken: what cannot start waits in the bounded queue, or is shed.
            let take = run.open;
            let turn = tokio::select! {
                biased;
                () = shutdown.cancelled(), if !run.draining => {
                    self.begin_drain(&mut run).await;
                    Turn::Go
                }
                () = run.grace.ring(), if run.draining => Turn::Stop,
                Some(joined) = run.tasks.join_next_with_id() => {
                    self.joined(&mut run, joined);
                    Turn::Go
                }
                changed = run.health.changed(), if !run.draining && run.health_open => {
                    if changed.is_ok() {
                        run.gate.health = *run.health.borrow_and_update();
                    } else {
                        // Nobody sends any more (no health URL, or a reload replaced
                        // the probe: the new one comes with the new settings); what it
                        // last said holds.
                        run.health_open = false;
                    }
                    Turn::Go
                }
                changed = run.live.changed(), if !run.draining && run.live_open => {
                    run.live_open = changed.is_ok();
                    if changed.is_ok() {
                        let now = Arc::clone(&run.live.borrow_and_update());
                        run.pacing.reconfigure(now.pace);
                        run.health = now.app_healthy.clone();
                        run.health_open = true;
                        run.gate.health = *run.health.borrow_and_update();
                    }
                    Turn::Go
                }
                () = run.probe.ring() => {
                    run.probing = true;
                    Turn::Go
                }
                () = self.budget.freed(), if run.budget_blocked => Turn::Go,
                () = run.pace_alarm.ring() => Turn::Go,
                next = run.requests.next(), if take => {
                    match next {
                        Some(request) => self.take(&mut run, request),
                        None => run.open = false,
                    }
                    Turn::Go
                }
            };
            if matches!(turn, Turn::Stop) {
                break;
            }
        }
        self.close(&mut run).await;
        Ok(())
    }

    /// Joins or leaves the queue group as the gate says, and shows it.
    async fn follow_gate<R: Requests>(
        self: &Arc<Self>,
        run: &mut Serving<R, E>,
    ) -> Result<(), ServiceError> {
        let healthy = run.gate.health.is_healthy();
        let want = !run.draining && healthy && (run.gate.unreachable.is_none() || run.probing);
        if want && !run.joined {
            run.requests.join().await.map_err(ServiceError::Join)?;
            run.joined = true;
            run.open = true;
        } else if !want && run.joined {
            run.requests.leave().await;
            run.joined = false;
            run.armed = None;
            self.refuse_waiting(run);
        }
        if !run.draining {
            match run.gate.not_ready() {
                Some(why) => self
                    .readiness
                    .set(State::NotReady, format!("{why}: out of the queue group")),
                None => self.readiness.set(
                    State::Consuming,
                    format!(
                        "serving {} in queue group {}",
                        self.spec.name, self.spec.queue_group
                    ),
                ),
            }
            self.metrics.app_healthy(run.gate.serviceable());
        }
        Ok(())
    }

    /// Whether the next request may be taken now: a slot under the limit in force
    /// (one while probing an unreachable app), the budget's permit and the rate
    /// limit's token, taken ahead and kept for it.
    fn admit<R: Requests>(&self, run: &mut Serving<R, E>) -> bool {
        run.budget_blocked = false;
        run.pace_alarm.set(None);
        if !run.joined || run.draining {
            self.budget.set_waiting(false);
            return false;
        }
        let limit = if run.gate.unreachable.is_some() {
            1
        } else {
            run.pacing.limit()
        };
        self.budget.set_limit(limit);
        self.metrics.pace(limit, run.asking.len());
        self.readiness.set_concurrency_limit(limit);
        if run.armed.is_some() {
            return true;
        }
        if run.asking.len() >= limit {
            self.budget.set_waiting(false);
            return false;
        }
        let Some(permit) = self.budget.try_start() else {
            run.budget_blocked = true;
            return false;
        };
        if !run.pacing.may_start() {
            run.pace_alarm.set(run.pacing.wait);
            return false;
        }
        run.armed = Some(permit);
        true
    }

    /// Starts the waiting requests while slots are free.
    fn start_waiting<R: Requests>(self: &Arc<Self>, run: &mut Serving<R, E>) {
        while !run.waiting.is_empty() && self.admit(run) {
            let (Some((request, received)), Some(permit)) = (run.waiting.pop(), run.armed.take())
            else {
                break;
            };
            // Only a request with a reply subject waits.
            let Some(to) = request.reply.clone() else {
                continue;
            };
            self.start(run, request, to, received, permit);
        }
    }

    /// Replies 503 at once to every waiting request (the instance left the queue
    /// group, or drains).
    fn refuse_waiting<R: Requests>(self: &Arc<Self>, run: &mut Serving<R, E>) {
        while let Some((request, received)) = run.waiting.pop() {
            self.take_at(run, request, received);
        }
    }

    /// A request came: answered by the app when admitted, else 503 at once.
    fn take<R: Requests>(self: &Arc<Self>, run: &mut Serving<R, E>, request: ServiceRequest) {
        self.take_at(run, request, Instant::now());
    }

    /// A request received at `received`: started when a slot is taken for it and
    /// none waits before it; else it waits, within the bound; else it is shed. Out
    /// of the queue group or draining: 503 at once.
    fn take_at<R: Requests>(
        self: &Arc<Self>,
        run: &mut Serving<R, E>,
        request: ServiceRequest,
        received: Instant,
    ) {
        let Some(endpoint) = self.spec.endpoints.get(request.endpoint) else {
            return;
        };
        let Some(to) = request.reply.clone() else {
            // A publish, not a request: nobody waits for an answer, so nobody gets one.
            self.metrics
                .service_request(&endpoint.name, "no_reply", Duration::ZERO);
            return;
        };
        if let Some(why) = &request.malformed {
            let v = reply::malformed(why);
            self.refuse(run, request.endpoint, to, received, v);
            return;
        }
        if !run.joined || run.draining {
            let why = if run.draining {
                Unavailable::Draining
            } else if run.gate.health.is_healthy() {
                Unavailable::Unreachable
            } else {
                Unavailable::Unhealthy
            };
            self.refuse(run, request.endpoint, to, received, reply::unavailable(why));
            return;
        }
        if run.waiting.is_empty()
            && let Some(permit) = run.armed.take()
        {
            self.start(run, request, to, received, permit);
            return;
        }
        let i = request.endpoint;
        if !run.waiting.push(self.spec.wait, request, received) {
            self.refuse(run, i, to, received, reply::shed());
        }
    }

    /// Replies `v` without asking the app (the request itself is not kept).
    fn refuse<R: Requests>(
        self: &Arc<Self>,
        run: &mut Serving<R, E>,
        i: usize,
        to: String,
        received: Instant,
        v: Replied,
    ) {
        let Some(endpoint) = self.spec.endpoints.get(i) else {
            return;
        };
        let name = endpoint.name.clone();
        let replier = run.replier.clone();
        let me = Arc::clone(self);
        run.tasks.spawn(async move {
            replier.reply(to, v.reply.clone()).await;
            me.record(i, &name, &v, received.elapsed());
            TaskEnd {
                sample: None,
                reach: Reach::NotAsked,
            }
        });
    }

    /// Asks the app, with the slot taken for the request.
    fn start<R: Requests>(
        self: &Arc<Self>,
        run: &mut Serving<R, E>,
        request: ServiceRequest,
        to: String,
        received: Instant,
        permit: BudgetPermit,
    ) {
        let me = Arc::clone(self);
        let replier = run.replier.clone();
        let live = Arc::clone(&run.live.borrow());
        let task = run.tasks.spawn(async move {
            let _permit = permit;
            me.answer(&live, &replier, request, to, received).await
        });
        run.asking.push(task.id());
        run.pacing.started(task.id(), run.asking.len());
    }

    /// One request's work: the POST (its CLIENT span a child of the request's
    /// SERVER span), the reply, the counts.
    async fn answer(
        &self,
        live: &Served<E>,
        replier: &impl Replier,
        request: ServiceRequest,
        to: String,
        received: Instant,
    ) -> TaskEnd {
        let i = request.endpoint;
        let name = &self.spec.endpoints[i].name;
        let Some(target) = live.endpoints.get(i) else {
            return TaskEnd {
                sample: None,
                reach: Reach::NotAsked,
            };
        };
        let server = self.tracer.serve(&request.message, name);
        let client = server.as_ref().map(|s| self.tracer.request(s.context(), 1));
        let traceparent = client.as_ref().map(crate::ops::traces::Active::traceparent);
        let trace = traceparent.as_deref().map(|t| TraceHeaders {
            traceparent: t,
            tracestate: client
                .as_ref()
                .and_then(|c| c.context().tracestate.as_deref()),
        });
        let (f, answer) = target
            .exchange(Question {
                message: &request.message,
                endpoint: name,
                trace,
                max_body: self.spec.max_reply_bytes,
            })
            .await;
        if let Some(c) = client {
            self.tracer.end_request(c, &f);
        }
        let v = reply::of(&f, answer, class_name(f.class));
        self.metrics.request(f.class, f.elapsed, f.skipped_headers);
        self.metrics.trace_headers_dropped(&f.trace_dropped);
        replier.reply(to, v.reply.clone()).await;
        self.record(i, name, &v, received.elapsed());
        if let Some(s) = server {
            self.tracer.end_serve(s, v.error());
        }
        TaskEnd {
            sample: Some(Sample::of(&f)),
            reach: Reach::of(&f),
        }
    }

    fn record(&self, i: usize, name: &str, v: &Replied, took: Duration) {
        self.metrics.service_request(name, v.class, took);
        self.stats.record(i, took, v.error());
    }

    /// A task ended: the pacer learns its latency, the gate whether it reached the
    /// app (unreachable: out of the queue group until the probe's backoff).
    fn joined<R: Requests>(
        &self,
        run: &mut Serving<R, E>,
        joined: Result<(Id, TaskEnd), JoinError>,
    ) {
        let (id, done) = match joined {
            Ok((id, done)) => (id, Some(done)),
            Err(e) => (e.id(), None),
        };
        if let Some(at) = run.asking.iter().position(|t| *t == id) {
            run.asking.swap_remove(at);
            run.pacing.finished(id, done.and_then(|d| d.sample));
        }
        let Some(done) = done else {
            return;
        };
        let was_probing = run.probing;
        if matches!(done.reach, Reach::Reached) {
            run.probing = false;
            run.probe.set(None);
        }
        let changed = run.gate.reached(done.reach);
        let probe_failed = was_probing && matches!(done.reach, Reach::Unreachable(_));
        if (changed || probe_failed) && run.gate.unreachable.is_some() {
            run.probing = false;
            let delay = run
                .live
                .borrow()
                .policy
                .unreachable_delay(run.gate.streak());
            run.probe.set(Some(Instant::now() + delay));
        }
    }

    /// Shutdown or `/drain`: out of the queue group, nothing new is asked.
    async fn begin_drain<R: Requests>(self: &Arc<Self>, run: &mut Serving<R, E>) {
        run.draining = true;
        run.armed = None;
        run.grace.set(Some(self.deadline.start()));
        self.readiness.set(
            State::Draining,
            "draining: answering the requests in flight",
        );
        if run.joined {
            run.requests.leave().await;
            run.joined = false;
        }
        self.refuse_waiting(run);
        tracing::info!(in_flight = run.asking.len(), "service draining");
    }

    /// The end: out of the queue group; what is still running past the grace is
    /// aborted (its requester times out, as it would with any lost reply).
    async fn close<R: Requests>(&self, run: &mut Serving<R, E>) {
        if run.joined {
            run.requests.leave().await;
        }
        if !run.tasks.is_empty() {
            tracing::warn!(
                left = run.tasks.len(),
                "the grace ran out with requests unanswered"
            );
            run.tasks.shutdown().await;
        }
        self.budget.set_waiting(false);
    }
}
