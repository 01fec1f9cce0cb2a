//! The supervisor: builds everything from a [`Config`], then runs the phases
//! connect → topology (with a stop-aware retry) → consume, and the ordered shutdown
//! (readiness off, stop pulling, drain in-flight work, flush NATS, admin last).

pub mod shutdown;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::capacity::{Limits, PullTiming};
use crate::config::{Config, OnMissing, SourceKind};
use crate::daemon::shutdown::{Deadline, bounded};
use crate::dispatch::{Dispatch, DispatchError, Ended};
use crate::group::member::{GroupSettings, GroupSource, JoinError};
use crate::group::model::Flavour;
use crate::group::spec::Template;
use crate::http::forward::{ForwardError, Forwarder};
use crate::nats::{Nats, NatsError, PullerConfig, TopologyError, TopologyRequest};
use crate::ops::metrics::Metrics;
use crate::ops::readiness::{PinHolder, Readiness, State};
use crate::policy::{Policy, backoff};
use crate::topology::{ConsumerSpec, StreamSpec};

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
    /// Metrics registration failed.
    #[error("cannot register metrics")]
    Metrics(#[from] prometheus::Error),
    /// The HTTP client could not be built.
    #[error(transparent)]
    Forward(#[from] ForwardError),
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
    #[error("consumer group: {0}")]
    Group(String),
    /// The signal handlers could not be installed.
    #[error("cannot listen for signals")]
    Signals(#[source] std::io::Error),
}

impl DaemonError {
    /// Whether the error is the user's configuration (exit 64) rather than a runtime
    /// failure (exit 1).
    pub fn is_config(&self) -> bool {
        matches!(
            self,
            DaemonError::Forward(ForwardError::BearerToken { .. } | ForwardError::Header(_))
                | DaemonError::Nats(NatsError::Secret { .. } | NatsError::ServerAddress(_))
        )
    }
}

/// The built daemon, not yet running.
#[derive(Debug)]
pub struct Daemon {
    config: Config,
    metrics: Metrics,
    readiness: Readiness,
    admin: TcpListener,
    forwarder: Forwarder,
}

/// The consumer this daemon requires, from the config.
pub fn topology_request(config: &Config) -> TopologyRequest {
    let managed = config.topology.managed_stream.as_ref().map(|m| StreamSpec {
        name: config.source.stream.clone(),
        subjects: m.subjects.clone(),
        storage: m.storage,
        replicas: m.replicas,
        retention: m.retention,
        discard: m.discard,
        max_age_ms: m.max_age_ms,
        max_msgs: m.max_msgs,
        max_bytes: m.max_bytes,
        duplicate_window_ms: m.duplicate_window_ms,
    });
    let deliver_policy = serde_json::to_value(config.consumer.deliver_policy)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "all".into());
    TopologyRequest {
        stream: config.source.stream.clone(),
        stream_mode: config.topology.stream,
        managed,
        consumer: ConsumerSpec {
            name: config.source.durable.clone(),
            durable: true,
            filter_subjects: config.source.filter_subjects.clone(),
            deliver_policy,
            ack_explicit: true,
            ack_wait_ms: config.consumer.ack_wait_ms,
            max_deliver: config.consumer.max_deliver,
            max_ack_pending: i64::from(config.delivery.max_buffered),
            backoff_ms: config.consumer.backoff_ms.clone(),
            priority: None,
            inactive_threshold_ms: 0,
            pull: true,
        },
        consumer_mode: config.topology.consumer,
    }
}

impl Daemon {
    /// Builds the daemon: metrics, readiness, the admin listener and the HTTP client.
    /// Nothing touches NATS yet.
    ///
    /// # Errors
    /// [`DaemonError`].
    pub async fn build(config: Config) -> Result<Daemon, DaemonError> {
        if config.kind().is_group() && config.consumer.ack_wait_ms < 2000 {
            tracing::warn!(
                ack_wait_ms = config.consumer.ack_wait_ms,
                "consumer.ack_wait_ms below 2000 in a consumer group: pull expiry and pin timeout meet, and the pin may flap while idle"
            );
        }
        let metrics = Metrics::new()?;
        let member = config
            .kind()
            .is_group()
            .then(|| config.source.member.clone());
        let readiness = Readiness::new(member, metrics.clone());
        let admin = TcpListener::bind(&config.admin.listen)
            .await
            .map_err(|source| DaemonError::AdminBind {
                addr: config.admin.listen.clone(),
                source,
            })?;
        let forwarder = Forwarder::new(&config.http, config.delivery.max_in_flight as usize)?;
        Ok(Daemon {
            config,
            metrics,
            readiness,
            admin,
            forwarder,
        })
    }

    /// The bound admin address (useful with port 0).
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.local_addr().ok()
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
        let admin = tokio::spawn(crate::ops::endpoints::serve(
            self.admin,
            self.readiness.clone(),
            self.metrics.clone(),
            admin_stop.clone(),
        ));
        let deadline = Deadline::new(Duration::from_millis(
            self.config.delivery.shutdown_grace_ms,
        ));
        let supervisor = Supervisor {
            config: self.config,
            metrics: self.metrics,
            readiness: self.readiness.clone(),
            forwarder: self.forwarder,
            deadline: deadline.clone(),
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

/// How long after the shutdown deadline the supervisor is abandoned if a step did
/// not bound itself.
const BACKSTOP: Duration = Duration::from_millis(500);

struct Supervisor {
    config: Config,
    metrics: Metrics,
    readiness: Readiness,
    forwarder: Forwarder,
    deadline: Deadline,
}

impl Supervisor {
    async fn run(self, shutdown: &CancellationToken) -> Result<(), DaemonError> {
        let cfg = &self.config;
        self.readiness.set(State::NotReady, "starting");
        let nats = Nats::connect(&cfg.nats, true).await?;
        let mirror = self.mirror_connection(&nats);
        let result = self.consume(&nats, shutdown).await;
        mirror.abort();
        // Acks are fire-and-forget publishes: flush them, but never wait on a
        // connection that is down past the grace.
        if let Some(Err(e)) = bounded(self.deadline.or_from_now(), "flush NATS", nats.flush()).await
        {
            tracing::warn!(error = %e, "cannot flush NATS at shutdown");
        }
        result
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
        let cfg = &self.config;
        if !wait_connected(nats, shutdown).await? {
            return Ok(());
        }
        nats.check_server_version()?;
        let request = topology_request(cfg);
        let dispatch = Arc::new(Dispatch {
            forwarder: self.forwarder.clone(),
            policy: policy(cfg),
            metrics: self.metrics.clone(),
            readiness: self.readiness.clone(),
            max_in_flight: cfg.delivery.max_in_flight as usize,
            deadline: self.deadline.clone(),
            pinned_mode: cfg.kind().is_group(),
            ordering: cfg.ordering(),
            progress_every: crate::group::spec::ack_wait(cfg.consumer.ack_wait_ms) / 2,
            dlq: (!cfg.dlq.subject.is_empty()).then(|| nats.dlq(&cfg.dlq.subject)),
            app_healthy: crate::http::probe::watch(
                self.forwarder.clone(),
                &cfg.http,
                self.metrics.clone(),
            ),
            unhealthy_handover: Duration::from_millis(cfg.http.unhealthy_handover_ms),
        });
        loop {
            let ended = if cfg.kind().is_group() {
                let Some(source) = self.join_group(nats, shutdown).await? else {
                    return Ok(());
                };
                let (stream, consumer) = group_consumer_names(cfg);
                let gauges = self.consumer_gauges(nats, &stream, &consumer);
                let ended = dispatch.run(source, shutdown.clone()).await;
                gauges.abort();
                ended
            } else {
                if !self.bind_topology(nats, &request, shutdown).await? {
                    return Ok(());
                }
                let puller = nats.puller(self.puller_config(&request)).await?;
                let gauges = self.consumer_gauges(nats, &request.stream, &request.consumer.name);
                let ended = dispatch.run(puller, shutdown.clone()).await;
                gauges.abort();
                ended
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
        let cfg = &self.config;
        PullerConfig {
            stream: request.stream.clone(),
            consumer: request.consumer.name.clone(),
            group: None,
            limits: limits(cfg),
            timing: PullTiming::for_ack_wait(Duration::from_millis(cfg.consumer.ack_wait_ms)),
            confirmed_acks: cfg.delivery.ack == crate::config::AckMode::Confirmed,
            partitioned: false,
            origin_stream: None,
        }
    }

    /// Joins the consumer group, retrying while the group, its bucket or its stream is
    /// missing (when allowed) or NATS is unavailable. `Ok(None)` when shutdown came
    /// first.
    async fn join_group(
        &self,
        nats: &Nats,
        shutdown: &CancellationToken,
    ) -> Result<Option<GroupSource>, DaemonError> {
        let cfg = &self.config;
        let t = &cfg.topology;
        let settings = GroupSettings {
            flavour: if cfg.kind() == SourceKind::Static {
                Flavour::Static
            } else {
                Flavour::Elastic
            },
            stream: cfg.source.stream.clone(),
            group: cfg.source.group.clone(),
            member: cfg.source.member.clone(),
            template: Template {
                ack_wait_ms: cfg.consumer.ack_wait_ms,
                max_deliver: cfg.consumer.max_deliver,
                max_ack_pending: i64::from(cfg.delivery.max_buffered),
                backoff_ms: cfg.consumer.backoff_ms.clone(),
                deliver_policy: topology_request(cfg).consumer.deliver_policy,
            },
            limits: limits(cfg),
            // An elastic member's consumer is deleted when its partitions move: an ack
            // the server has not processed yet would be lost with it, and the message
            // handed to the next owner. Its acks are always confirmed.
            confirmed_acks: cfg.delivery.ack == crate::config::AckMode::Confirmed
                || cfg.kind() == SourceKind::Elastic,
        };
        let mut attempt = 0u32;
        loop {
            if shutdown.is_cancelled() {
                return Ok(None);
            }
            let retry = match GroupSource::join(nats, settings.clone()).await {
                Ok(source) => return Ok(Some(source)),
                Err(JoinError::Fatal(e)) => return Err(DaemonError::Group(e)),
                Err(e @ JoinError::NotFound(_)) if t.on_missing == OnMissing::Fail => {
                    return Err(DaemonError::Group(e.to_string()));
                }
                Err(e) => e,
            };
            attempt = attempt.saturating_add(1);
            self.readiness
                .set(State::NotReady, format!("consumer group: {retry}"));
            let delay = backoff(
                Duration::from_millis(t.retry_initial_ms),
                Duration::from_millis(t.retry_max_ms),
                attempt,
            );
            tokio::select! {
                () = shutdown.cancelled() => return Ok(None),
                () = tokio::time::sleep(delay) => {}
            }
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
        let t = &self.config.topology;
        let mut attempt = 0u32;
        loop {
            if shutdown.is_cancelled() {
                return Ok(false);
            }
            match nats.ensure(request).await {
                Ok(bound) => {
                    tracing::info!(
                        stream = %request.stream, consumer = %request.consumer.name,
                        created = bound.consumer_created, stream_action = ?bound.stream_action,
                        "topology ready"
                    );
                    return Ok(true);
                }
                Err(e)
                    if e.is_unavailable()
                        || (e.is_missing() && t.on_missing == OnMissing::Retry) =>
                {
                    attempt = attempt.saturating_add(1);
                    // Logged once per change by Readiness::set, not once per attempt.
                    self.readiness
                        .set(State::NotReady, format!("topology: {e}"));
                    let delay = backoff(
                        Duration::from_millis(t.retry_initial_ms),
                        Duration::from_millis(t.retry_max_ms),
                        attempt,
                    );
                    tokio::select! {
                        () = shutdown.cancelled() => return Ok(false),
                        () = tokio::time::sleep(delay) => {}
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Refreshes the consumer pending gauges (and, for a pinned consumer, who holds
    /// the pin) every few seconds.
    fn consumer_gauges(&self, nats: &Nats, stream: &str, consumer: &str) -> JoinHandle<()> {
        let (nats, metrics, readiness) =
            (nats.clone(), self.metrics.clone(), self.readiness.clone());
        let pinned_mode = self.config.kind().is_group();
        let (stream, consumer) = (stream.to_string(), consumer.to_string());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(5));
            loop {
                tick.tick().await;
                if let Some(c) = nats.consumer_counts(&stream, &consumer).await {
                    metrics
                        .consumer_pending
                        .set(i64::try_from(c.pending).unwrap_or(i64::MAX));
                    metrics
                        .consumer_ack_pending
                        .set(i64::try_from(c.ack_pending).unwrap_or(i64::MAX));
                    if pinned_mode {
                        readiness.set_pin_holder(if c.pinned {
                            PinHolder::Someone
                        } else {
                            PinHolder::Nobody
                        });
                    }
                }
            }
        })
    }
}

fn limits(cfg: &Config) -> Limits {
    Limits {
        max_batch: cfg.delivery.max_batch,
        max_buffered: cfg.delivery.max_buffered,
        max_bytes: cfg.delivery.max_buffered_bytes,
    }
}

/// The stream and name of a group member's consumer, for the gauges.
fn group_consumer_names(cfg: &Config) -> (String, String) {
    let s = &cfg.source;
    if cfg.kind() == SourceKind::Static {
        (
            s.stream.clone(),
            crate::group::static_consumer(&s.group, &s.member),
        )
    } else {
        (
            crate::group::elastic_stream(&s.stream, &s.group),
            s.member.clone(),
        )
    }
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

/// The retry policy from the config.
pub fn policy(cfg: &Config) -> Policy {
    Policy {
        retry: cfg.retry_statuses(),
        term: cfg.term_statuses(),
        retry_initial: Duration::from_millis(cfg.delivery.retry_initial_ms),
        retry_max: Duration::from_millis(cfg.delivery.retry_max_ms),
        retry_after_max: Duration::from_millis(cfg.delivery.retry_after_max_ms),
        max_attempts: u32::try_from(cfg.consumer.max_deliver)
            .ok()
            .filter(|n| *n > 0),
    }
}
