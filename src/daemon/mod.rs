//! The supervisor: builds everything from a [`Config`], then runs the phases
//! connect → topology (with a stop-aware retry) → consume, and the ordered shutdown
//! (readiness off, stop pulling, drain in-flight work, flush NATS, admin last).

pub mod reload;
pub mod settings;
pub mod shutdown;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, ConfigError, OnMissing};
use crate::daemon::reload::Reloader;
use crate::daemon::settings::{DeadLetters, Settings, SourceSettings};
use crate::dispatch::{Dispatch, DispatchError, Ended, Live};
use crate::group::autojoin::AutoJoin;
use crate::group::member::{GroupSource, JoinError};
use crate::group::spec::Member;
use crate::http::client::ClientError;
use crate::http::collector::Collector;
use crate::http::forward::Forwarder;
use crate::nats::{Nats, NatsError, PullerConfig, TopologyError};
use crate::ops::metrics::Metrics;
use crate::ops::readiness::{PinHolder, Readiness, State};
use crate::ops::telemetry::chain;
use crate::ops::traces::Tracer;
use crate::outputs::Rules;
use crate::policy::backoff;
use crate::seam::ServerPause;
use crate::seam::time::{Deadline, bounded};
use crate::secret::SecretFile;
use crate::topology::TopologyRequest;

/// A failure that ends the daemon.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The admin listener could not be bound.
    #[error("cannot listen on admin.listen {addr}")]
    AdminBind {
        /// The address.
        addr: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The publish endpoint's listener could not be bound.
    #[error("cannot listen on publish.listen {addr}")]
    PublishBind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Metrics registration failed.
    #[error("cannot register metrics")]
    Metrics(#[from] crate::ops::metrics::MetricsError),
    /// The app's HTTP client could not be built.
    #[error(transparent)]
    App(#[from] ClientError),
    /// NATS failed.
    #[error(transparent)]
    Nats(#[from] NatsError),
    /// The topology cannot be used.
    #[error(transparent)]
    Topology(#[from] TopologyError),
    /// The message source failed.
    #[error(transparent)]
    Dispatch(#[from] DispatchError),
    /// The consumer group cannot be joined.
    #[error("cannot join the consumer group")]
    Group(#[source] JoinError),
    /// The config does not parse into settings.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The signal handlers could not be installed.
    #[error("cannot listen for signals")]
    Signals(#[source] std::io::Error),
    /// A secret file cannot be used.
    #[error(transparent)]
    Secret(#[from] crate::secret::SecretError),
}

impl DaemonError {
    /// Whether the error is the user's configuration (exit 64) rather than a runtime
    /// failure (exit 1).
    pub fn is_config(&self) -> bool {
        match self {
            DaemonError::Nats(e) => e.is_config(),
            other => matches!(
                other,
                DaemonError::App(
                    ClientError::SecretFile(_)
                        | ClientError::Header(_)
                        | ClientError::Proxy(..)
                        | ClientError::TlsCa { .. }
                ) | DaemonError::Config(_)
                    | DaemonError::Secret(_)
            ),
        }
    }
}

/// The built daemon, not yet running.
#[derive(Debug)]
pub struct Daemon {
    settings: Settings,
    metrics: Metrics,
    readiness: Readiness,
    admin: TcpListener,
    /// The publish endpoint's listener and the token it requires, when it is on.
    publish: Option<(TcpListener, Option<Arc<SecretFile>>)>,
    forwarder: Forwarder,
    /// The span recorder, and the collector it exports to (with `[otel]` on).
    tracer: Tracer,
    collector: Option<Collector>,
    /// The config it runs, for reloads to compare with.
    config: Config,
    reloader: Reloader,
    reloads: mpsc::Receiver<Result<Config, ConfigError>>,
    /// The shutdown's deadline, started by the first signal or the first component
    /// that sees the shutdown begin.
    deadline: Deadline,
}

/// The publish endpoint's token file (`publish.token_file`), read now: a missing or
/// empty one is a config error.
///
/// # Errors
/// [`DaemonError::Secret`].
pub fn publish_token(settings: &Settings) -> Result<Option<Arc<SecretFile>>, DaemonError> {
    match &settings.publish.token_file {
        Some(path) => Ok(Some(Arc::new(SecretFile::load(
            "publish.token_file",
            path,
        )?))),
        None => Ok(None),
    }
}

impl Daemon {
    /// Builds the daemon: metrics, readiness, the admin listener and the HTTP client.
    /// Nothing touches NATS yet.
    ///
    /// # Errors
    /// [`DaemonError`].
    pub async fn build(config: Config) -> Result<Daemon, DaemonError> {
        let settings = Settings::from_config(&config)?;
        if settings.pinned() && config.consumer.ack_wait_ms < 2000 {
            tracing::warn!(
                ack_wait_ms = config.consumer.ack_wait_ms,
                "consumer.ack_wait_ms below 2000 in a consumer group: pull expiry and pin timeout meet, and the pin may flap while idle"
            );
        }
        let metrics = Metrics::new()?;
        let member = match &settings.source {
            SourceSettings::Group(m) => Some(m.member.clone()),
            SourceSettings::Durable(_) => None,
        };
        let readiness = Readiness::new(member, metrics.clone());
        let admin = TcpListener::bind(&config.admin.listen)
            .await
            .map_err(|source| DaemonError::AdminBind {
                addr: config.admin.listen.clone(),
                source,
            })?;
        let publish = match settings.publish.listen {
            Some(addr) => Some((
                TcpListener::bind(addr)
                    .await
                    .map_err(|source| DaemonError::PublishBind { addr, source })?,
                publish_token(&settings)?,
            )),
            None => None,
        };
        let forwarder = Forwarder::new(&settings.app)?;
        let (tracer, collector) = match &settings.tracing {
            Some(t) => (
                Tracer::new(t.settings.clone(), metrics.clone()),
                Some(Collector::new(&t.collector)?),
            ),
            None => (Tracer::off(), None),
        };
        let (reloader, reloads) = reload::channel();
        Ok(Daemon {
            deadline: Deadline::new(settings.shutdown_grace),
            settings,
            metrics,
            readiness,
            admin,
            publish,
            forwarder,
            tracer,
            collector,
            config,
            reloader,
            reloads,
        })
    }

    /// The shutdown's deadline: the process edge starts it at the first signal and
    /// bounds its last log flush by it.
    pub fn deadline(&self) -> Deadline {
        self.deadline.clone()
    }

    /// The bound admin address (useful with port 0).
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.local_addr().ok()
    }

    /// The bound publish endpoint's address, when it is on.
    pub fn publish_addr(&self) -> Option<SocketAddr> {
        self.publish.as_ref().and_then(|(l, _)| l.local_addr().ok())
    }

    /// The admin port's and the publish endpoint's connection caps, within the
    /// process's open-files limit.
    fn connection_caps(&self) -> (usize, usize) {
        crate::serve::connection_caps(
            crate::serve::open_files_limit(),
            self.settings.max_in_flight,
        )
    }

    /// The handle that asks the running daemon to reload (SIGHUP).
    pub fn reloader(&self) -> Reloader {
        self.reloader.clone()
    }

    /// The readiness handle.
    pub fn readiness(&self) -> Readiness {
        self.readiness.clone()
    }

    /// The metrics.
    pub fn metrics(&self) -> Metrics {
        self.metrics.clone()
    }

    /// Runs until `shutdown` is cancelled (then drains and returns `Ok`) or a fatal
    /// error. Once cancelled it returns within `delivery.shutdown_grace_ms` (plus a
    /// moment), whatever NATS does: every step of the shutdown is bounded by the one
    /// [`Deadline`], and a step that is still running after it is abandoned.
    ///
    /// # Errors
    /// [`DaemonError`].
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), DaemonError> {
        let admin_stop = CancellationToken::new();
        let (admin_cap, publish_cap) = self.connection_caps();
        let (shown_tx, shown_rx) = watch::channel(reload::shown(&self.config));
        let admin = tokio::spawn(crate::serve::admin::serve(
            self.admin,
            crate::serve::admin::Shown {
                readiness: self.readiness.clone(),
                metrics: self.metrics.clone(),
                config: shown_rx,
            },
            admin_cap,
            admin_stop.clone(),
        ));
        let deadline = self.deadline;
        let reloads = Reloads::start(
            &self.settings,
            &self.forwarder,
            &self.metrics,
            &deadline,
            self.config,
            self.reloads,
            shown_tx,
        );
        // Spans go out off the delivery path; at shutdown what is queued is sent
        // within the grace, after the drain.
        let export_stop = CancellationToken::new();
        let exporter = self.collector.map(|c| {
            let d = deadline.clone();
            tokio::spawn(crate::ops::traces::export(
                self.tracer.clone(),
                c,
                export_stop.clone(),
                move || d.get(),
            ))
        });
        let supervisor = Supervisor {
            tracer: self.tracer,
            settings: self.settings,
            metrics: self.metrics,
            readiness: self.readiness.clone(),
            live: reloads.live.clone(),
            rules: reloads.rules.clone(),
            deadline: deadline.clone(),
            publish: self.publish,
            publish_cap,
        };
        let run = supervisor.run(&shutdown);
        tokio::pin!(run);
        // The backstop: the steps bound themselves; anything that still runs a moment
        // after the deadline (a NATS call this code forgot to bound) is abandoned.
        let backstop = async {
            shutdown.cancelled().await;
            tokio::time::sleep_until(deadline.start() + BACKSTOP).await;
        };
        let result = tokio::select! {
            result = &mut run => result,
            () = backstop => {
                tracing::error!("the shutdown grace is over and a step still runs: stopping without it");
                Ok(())
            }
        };
        self.readiness.set(State::Draining, "stopped");
        reloads.stop().await;
        if let Some(task) = exporter {
            export_stop.cancel();
            // The exporter bounds itself by FLUSH; the margin is for its last send.
            let at = deadline
                .or_from_now()
                .min(tokio::time::Instant::now() + crate::ops::traces::FLUSH + BACKSTOP);
            if bounded(at, "export the last spans", task).await.is_none() {
                tracing::warn!("the last spans were not exported within the grace");
            }
        }
        // The admin endpoints stay up until everything else is done.
        admin_stop.cancel();
        match admin.await {
            Ok(Err(e)) => tracing::warn!(error = %e, "admin server failed"),
            Err(e) => tracing::warn!(error = %e, "admin server task failed"),
            Ok(Ok(())) => {}
        }
        result
    }
}

/// What a reload changes (the dispatcher's live settings, the endpoint's rules),
/// and the task that applies reloads.
struct Reloads {
    live: watch::Receiver<Arc<Live<Forwarder>>>,
    rules: watch::Receiver<Rules>,
    task: JoinHandle<()>,
    stop: CancellationToken,
}

impl Reloads {
    fn start(
        settings: &Settings,
        forwarder: &Forwarder,
        metrics: &Metrics,
        deadline: &Deadline,
        config: Config,
        requests: mpsc::Receiver<Result<Config, ConfigError>>,
        shown: watch::Sender<String>,
    ) -> Reloads {
        let app_healthy = crate::http::probe::watch(
            forwarder.clone(),
            settings.health.clone(),
            metrics.clone(),
            None,
        );
        let (live_tx, live) = watch::channel(Arc::new(reload::live_of(
            settings,
            forwarder.clone(),
            app_healthy,
        )));
        let (rules_tx, rules) = watch::channel(settings.publish.rules.clone());
        let stop = CancellationToken::new();
        let task = tokio::spawn(reload::serve(
            reload::Running {
                config,
                live: live_tx,
                rules: rules_tx,
                shown,
                deadline: deadline.clone(),
                metrics: metrics.clone(),
            },
            requests,
            stop.clone(),
        ));
        Reloads {
            live,
            rules,
            task,
            stop,
        }
    }

    async fn stop(self) {
        self.stop.cancel();
        self.task.await.ok();
    }
}

/// How long after the shutdown deadline the supervisor is abandoned if a step did
/// not bound itself.
const BACKSTOP: Duration = Duration::from_millis(500);

struct Supervisor {
    tracer: Tracer,
    settings: Settings,
    metrics: Metrics,
    readiness: Readiness,
    /// What a reload may change, for the dispatcher.
    live: watch::Receiver<Arc<Live<Forwarder>>>,
    /// The publish rules, for the endpoint.
    rules: watch::Receiver<Rules>,
    deadline: Deadline,
    /// The publish endpoint's listener and token, when it is on.
    publish: Option<(TcpListener, Option<Arc<SecretFile>>)>,
    /// The publish endpoint's connection cap.
    publish_cap: usize,
}

impl Supervisor {
    async fn run(mut self, shutdown: &CancellationToken) -> Result<(), DaemonError> {
        self.readiness.set(State::NotReady, "starting");
        let nats = Nats::connect(&self.settings.nats, true).await?;
        let mirror = self.mirror_connection(&nats);
        let endpoint = self
            .publish
            .take()
            .map(|(l, token)| self.serve_publish(l, token, &nats));
        let result = self.consume(&nats, shutdown).await;
        mirror.abort();
        // The app may publish until its messages are drained.
        if let Some((stop, served)) = endpoint {
            stop.cancel();
            let deadline = self.deadline.or_from_now();
            if let Some(Ok(Err(e))) = bounded(deadline, "stop the publish endpoint", served).await {
                tracing::warn!(error = %e, "the publish endpoint failed");
            }
        }
        // Acks are fire-and-forget publishes: flush them, but never wait on a
        // connection that is down past the grace.
        if let Some(Err(e)) = bounded(self.deadline.or_from_now(), "flush NATS", nats.flush()).await
        {
            tracing::warn!(error = %e, "cannot flush NATS at shutdown");
        }
        result
    }

    /// Serves the publish endpoint on `listener` until the returned token is
    /// cancelled; a publish while NATS is down answers 503.
    fn serve_publish(
        &self,
        listener: TcpListener,
        token: Option<Arc<SecretFile>>,
        nats: &Nats,
    ) -> (CancellationToken, JoinHandle<std::io::Result<()>>) {
        let p = &self.settings.publish;
        let endpoint = crate::serve::endpoint::Endpoint {
            publisher: nats.publisher(),
            rules: self.rules.clone(),
            atomic: p.atomic,
            metrics: self.metrics.clone(),
            token,
            tracer: self.tracer.clone(),
        };
        if let Ok(addr) = listener.local_addr() {
            tracing::info!(listen = %addr, "publish endpoint listening");
        }
        let stop = CancellationToken::new();
        let served = tokio::spawn(crate::serve::endpoint::serve(
            listener,
            endpoint,
            self.publish_cap,
            stop.clone(),
        ));
        (stop, served)
    }

    /// Mirrors the connection state into readiness and metrics.
    fn mirror_connection(&self, nats: &Nats) -> JoinHandle<()> {
        let mut state = nats.state();
        let readiness = self.readiness.clone();
        tokio::spawn(async move {
            loop {
                let why = state.borrow_and_update().reason();
                readiness.set_nats_down(why);
                if state.changed().await.is_err() {
                    return;
                }
            }
        })
    }

    async fn consume(&self, nats: &Nats, shutdown: &CancellationToken) -> Result<(), DaemonError> {
        let set = &self.settings;
        if !wait_connected(nats, shutdown).await? {
            return Ok(());
        }
        nats.check_server_version()?;
        if let Some(dlq) = &set.dead_letters
            && let Some(spec) = &dlq.managed
            && !self.ensure_dlq_stream(nats, dlq, spec, shutdown).await?
        {
            return Ok(());
        }
        // The consumer's pause on the server, as the gauge task last read it.
        let (pause_tx, server_pause) = watch::channel(ServerPause::Running);
        let pause_tx = Arc::new(pause_tx);
        let dispatch = Arc::new(Dispatch {
            live: self.live.clone(),
            metrics: self.metrics.clone(),
            readiness: self.readiness.clone(),
            max_buffered: set.limits.max_buffered as usize,
            deadline: self.deadline.clone(),
            pinned_mode: set.pinned(),
            ordering: set.ordering,
            progress_every: set.progress_every,
            publisher: nats.publisher(),
            dead_letters: set.dead_letters.as_ref().map(|d| d.subject.clone()),
            server_pause,
            letters_waiting_max: set.letters_waiting_max(),
            tracer: self.tracer.clone(),
        });
        // Kept across rejoins: it knows whether this process added the member.
        let mut joined: Option<AutoJoin> = None;
        loop {
            let ended = match &set.source {
                SourceSettings::Group(member) => {
                    let auto = match member.auto_join {
                        Some(timeout) => {
                            let kept = joined.take();
                            match self
                                .auto_join(nats, member, timeout, kept, shutdown)
                                .await?
                            {
                                Some(a) => Some(a),
                                None => return Ok(()),
                            }
                        }
                        None => None,
                    };
                    joined.clone_from(&auto);
                    let beats = auto.as_ref().map(heartbeats);
                    let Some(source) = self.join_group(nats, member, shutdown).await? else {
                        drop(beats);
                        self.leave(auto.as_ref()).await;
                        return Ok(());
                    };
                    let (stream, consumer) = member.consumer();
                    let gauges = self.consumer_gauges(nats, &stream, &consumer, &pause_tx);
                    let ended = dispatch.run(source, shutdown.clone()).await;
                    drop(gauges);
                    drop(beats);
                    // Drained: out of the membership before the process ends.
                    if matches!(ended, Ok(Ended::Shutdown | Ended::GroupEnded(_))) {
                        self.leave(auto.as_ref()).await;
                    }
                    ended
                }
                SourceSettings::Durable(request) => {
                    if !self.bind_topology(nats, request, shutdown).await? {
                        return Ok(());
                    }
                    let puller = nats.puller(self.puller_config(request)).await?;
                    let gauges = self.consumer_gauges(
                        nats,
                        &request.stream,
                        &request.consumer.name,
                        &pause_tx,
                    );
                    let ended = dispatch.run(puller, shutdown.clone()).await;
                    drop(gauges);
                    ended
                }
            };
            match ended? {
                Ended::Shutdown => return Ok(()),
                Ended::GroupEnded(reason) => {
                    tracing::info!(reason = %reason, "the consumer group ended; stopping");
                    return Ok(());
                }
                Ended::SourceLost(reason) => {
                    tracing::warn!(reason = %reason, "the consumer went away; checking the topology again");
                    self.readiness
                        .set(State::NotReady, format!("consumer lost: {reason}"));
                }
            }
        }
    }

    fn puller_config(&self, request: &TopologyRequest) -> PullerConfig {
        let set = &self.settings;
        PullerConfig {
            stream: request.stream.clone(),
            consumer: request.consumer.name.clone(),
            group: None,
            limits: set.limits,
            timing: set.timing,
            confirmed_acks: set.confirmed_acks,
            partitioned: false,
            origin_stream: None,
        }
    }

    /// Joins the consumer group, retrying while the group, its bucket or its stream is
    /// missing (when allowed), its config cannot be followed, or NATS is unavailable.
    /// `Ok(None)` when shutdown came first.
    async fn join_group(
        &self,
        nats: &Nats,
        member: &Member,
        shutdown: &CancellationToken,
    ) -> Result<Option<GroupSource>, DaemonError> {
        let on_missing = self.settings.retry.on_missing;
        self.until_ready(shutdown, "consumer group", || async {
            match GroupSource::join(nats, member.clone()).await {
                Ok(source) => Ok(source),
                Err(e) if e.is_fatal() => Err(Try::Fail(DaemonError::Group(e))),
                Err(e @ JoinError::NotFound(_)) if on_missing == OnMissing::Fail => {
                    Err(Try::Fail(DaemonError::Group(e)))
                }
                Err(e) => Err(Try::Again(chain(&e))),
            }
        })
        .await
    }

    /// An auto-joining member (`source.auto_join`) adds itself to the membership,
    /// retrying while NATS or the group is not there (not ready meanwhile); `kept`:
    /// the one of a previous join, which knows whether this process added it.
    /// `Ok(None)` when shutdown came first.
    async fn auto_join(
        &self,
        nats: &Nats,
        member: &Member,
        timeout: Duration,
        kept: Option<AutoJoin>,
        shutdown: &CancellationToken,
    ) -> Result<Option<AutoJoin>, DaemonError> {
        self.until_ready(shutdown, "joining the membership", || async {
            let a = match &kept {
                Some(a) => a.clone(),
                None => AutoJoin::open(nats, member, timeout)
                    .await
                    .map_err(|e| Try::Again(chain(&e)))?,
            };
            a.join().await.map_err(|e| Try::Again(chain(&e)))?;
            Ok(a)
        })
        .await
    }

    /// After the drain: an auto-joined member leaves the membership, within what is
    /// left of the grace.
    async fn leave(&self, auto: Option<&AutoJoin>) {
        if let Some(a) = auto {
            let deadline = self.deadline.or_from_now();
            bounded(deadline, "leave the membership", a.leave()).await;
        }
    }

    /// Checks and binds the topology, retrying while it is missing (when allowed) or
    /// NATS is unavailable. `Ok(false)` when shutdown came first.
    async fn bind_topology(
        &self,
        nats: &Nats,
        request: &TopologyRequest,
        shutdown: &CancellationToken,
    ) -> Result<bool, DaemonError> {
        let on_missing = self.settings.retry.on_missing;
        let bound = self
            .until_ready(shutdown, "topology", || async {
                match nats.ensure(request).await {
                    Ok(bound) => Ok(bound),
                    Err(e)
                        if e.is_unavailable()
                            || (e.is_missing() && on_missing == OnMissing::Retry) =>
                    {
                        Err(Try::Again(chain(&e)))
                    }
                    Err(e) => Err(Try::Fail(e.into())),
                }
            })
            .await?;
        if let Some(bound) = &bound {
            tracing::info!(
                stream = %request.stream, consumer = %request.consumer.name,
                created = bound.consumer_created, stream_action = %bound.stream_action,
                "topology ready"
            );
        }
        Ok(bound.is_some())
    }

    /// Ensures the managed DLQ stream (`dlq.manage`) before anything is consumed, so
    /// that the first dead letter has somewhere to go; waits while NATS is
    /// unavailable. `Ok(false)` when shutdown came first.
    async fn ensure_dlq_stream(
        &self,
        nats: &Nats,
        dlq: &DeadLetters,
        spec: &crate::topology::StreamSpec,
        shutdown: &CancellationToken,
    ) -> Result<bool, DaemonError> {
        let source = &dlq.replicas_of;
        let done = self
            .until_ready(shutdown, "dead-letter stream", || async {
                match nats.ensure_owned(spec, source).await {
                    Ok(action) => Ok(action),
                    Err(e) if e.is_unavailable() => Err(Try::Again(chain(&e))),
                    Err(e) => Err(Try::Fail(e.into())),
                }
            })
            .await?;
        if let Some(action) = &done {
            tracing::info!(stream = %spec.name, action = %action, "dead-letter stream ready");
        }
        Ok(done.is_some())
    }

    /// Runs `step` until it succeeds (`Some`), fails for good, or shutdown comes
    /// (`None`). Between tries the daemon is not ready, saying why (logged once per
    /// change by `Readiness::set`, not once per try), and waits the topology backoff;
    /// the wait ends at once on shutdown.
    async fn until_ready<T, F, Fut>(
        &self,
        shutdown: &CancellationToken,
        what: &str,
        mut step: F,
    ) -> Result<Option<T>, DaemonError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Try>>,
    {
        let retry = self.settings.retry;
        let mut attempt = 0u32;
        loop {
            if shutdown.is_cancelled() {
                return Ok(None);
            }
            let why = match step().await {
                Ok(done) => return Ok(Some(done)),
                Err(Try::Fail(e)) => return Err(e),
                Err(Try::Again(why)) => why,
            };
            attempt = attempt.saturating_add(1);
            self.readiness
                .set(State::NotReady, format!("{what}: {why}"));
            let delay = backoff(retry.initial, retry.max, attempt);
            tokio::select! {
                () = shutdown.cancelled() => return Ok(None),
                () = tokio::time::sleep(delay) => {}
            }
        }
    }

    /// Refreshes, every second, the consumer pending gauges, an elastic group's
    /// backlog, whether the consumer is paused on the server (into `pause`, which the
    /// dispatcher watches) and, for a pinned consumer, who holds the pin.
    fn consumer_gauges(
        &self,
        nats: &Nats,
        stream: &str,
        consumer: &str,
        pause: &Arc<watch::Sender<ServerPause>>,
    ) -> GaugeTask {
        let (nats, metrics, readiness) =
            (nats.clone(), self.metrics.clone(), self.readiness.clone());
        let pinned_mode = self.settings.pinned();
        let work_queue = matches!(
            &self.settings.source,
            SourceSettings::Group(m) if m.flavour == crate::group::model::Flavour::Elastic
        );
        let (stream, consumer) = (stream.to_string(), consumer.to_string());
        // Every second: a pause (`jetrelay pause`) must be seen within a second or
        // two, and a standby must not go on saying that nobody holds the pin (an idle
        // member) after another instance took it.
        let every = Duration::from_secs(1);
        let pause = Arc::clone(pause);
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                // Consumer info is answered by the consumer's leader: current, not a
                // follower's lagging view. When it cannot be read the gauges are
                // withdrawn rather than left at a value that looks current.
                if work_queue {
                    metrics.group_backlog(nats.stream_messages(&stream).await);
                }
                let counts = nats.consumer_counts(&stream, &consumer).await;
                metrics.consumer_counts(counts.as_ref().map(|c| (c.pending, c.ack_pending)));
                // Unreadable: the last pause seen stays (it is the server's to end).
                let Some(c) = counts else {
                    continue;
                };
                pause.send_if_modified(|p| std::mem::replace(p, c.pause) != c.pause);
                if pinned_mode {
                    readiness.set_pin_holder(if c.pinned {
                        PinHolder::Someone
                    } else {
                        PinHolder::Nobody
                    });
                }
            }
        });
        GaugeTask {
            task,
            metrics: self.metrics.clone(),
        }
    }
}

/// An auto-joined member's heartbeats (and pruning), every third of the timeout,
/// until dropped.
fn heartbeats(auto: &AutoJoin) -> AbortOnDrop {
    let auto = auto.clone();
    AbortOnDrop(tokio::spawn(async move {
        let mut failing = false;
        let mut tick = tokio::time::interval(auto.every());
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            match auto.beat().await {
                Ok(()) if failing => {
                    failing = false;
                    tracing::info!("the liveness record is written again");
                }
                Ok(()) => {}
                Err(e) if !failing => {
                    failing = true;
                    tracing::warn!(error = %chain(&e), "cannot write the liveness record: silent past source.member_timeout_ms, this member is pruned by the others (and joins again once back)");
                }
                Err(_) => {}
            }
        }
    }))
}

/// A task aborted when this is dropped.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The task that refreshes the consumer gauges. Dropped when its consumer's run
/// ends: the task stops and the gauges are withdrawn, so nothing reads an old value
/// while the supervisor binds or joins again.
struct GaugeTask {
    task: JoinHandle<()>,
    metrics: Metrics,
}

impl Drop for GaugeTask {
    fn drop(&mut self) {
        self.task.abort();
        self.metrics.consumer_counts(None);
        self.metrics.group_backlog(None);
    }
}

/// One try of a step the daemon waits for.
enum Try {
    /// Not yet, for this reason: try again after the backoff.
    Again(String),
    /// Never: the daemon stops.
    Fail(DaemonError),
}

/// Waits until NATS is connected; `false` when shutdown came first.
///
/// # Errors
/// [`NatsError::Closed`] when the client gave up reconnecting.
async fn wait_connected(nats: &Nats, shutdown: &CancellationToken) -> Result<bool, NatsError> {
    let mut state = nats.state();
    loop {
        {
            let s = state.borrow_and_update();
            if s.connected {
                return Ok(true);
            }
            if s.closed {
                return Err(NatsError::Closed);
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return Ok(false),
            changed = state.changed() => if changed.is_err() { return Ok(false) },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_consumer_gauges_are_withdrawn_when_their_task_ends() {
        let metrics = Metrics::new().unwrap();
        metrics.consumer_counts(Some((5, 2)));
        metrics.group_backlog(Some(9));
        let task = GaugeTask {
            task: tokio::spawn(std::future::pending()),
            metrics: metrics.clone(),
        };
        assert!(metrics.render().contains("jetrelay_consumer_pending 5"));
        drop(task);
        let text = metrics.render();
        for name in [
            "jetrelay_consumer_pending",
            "jetrelay_consumer_ack_pending",
            "jetrelay_group_backlog",
        ] {
            assert!(!text.contains(name), "{name} left at an old value:\n{text}");
        }
    }
}
