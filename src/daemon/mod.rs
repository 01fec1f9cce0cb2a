//! The supervisor: builds everything from a [`Config`], then runs the phases
//! connect → topology (with a stop-aware retry) → consume, and the ordered shutdown
//! (readiness off, stop pulling, drain in-flight work, flush NATS, admin last). A
//! drain (`/drain`) is that shutdown of the sources alone, within its own wait: the
//! connection, the publish endpoint and the admin port stay up until the process
//! stops, which then takes no grace.

mod announce;
mod apps;
mod error;
mod fleet;
pub mod reload;
pub mod settings;
pub mod shutdown;
pub mod watching;

pub use self::error::DaemonError;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::admission::Budget;
use crate::config::{Config, ConfigError};
use crate::daemon::apps::{Apps, SourceApp};
use crate::daemon::reload::{Reloader, SourceChange};
use crate::daemon::settings::{MetricsExport, Settings};
use crate::http::collector::Collector;
use crate::nats::Nats;
use crate::ops::drain::{Drain, DrainOutcome};
use crate::ops::metrics::{Metrics, Tallied};
use crate::ops::readiness::Readiness;
use crate::ops::traces::Tracer;
use crate::outputs::Rules;
use crate::seam::time::{Deadline, bounded};
use crate::secret::SecretFile;
use crate::source::Runner;

/// The built daemon, not yet running.
#[derive(Debug)]
pub struct Daemon {
    settings: Settings,
    metrics: Metrics,
    readiness: Readiness,
    admin: TcpListener,
    /// The publish endpoint's listener and the token it requires, when it is on.
    publish: Option<(TcpListener, Option<Arc<SecretFile>>)>,
    /// The app's clients and probes, and each source's forwarder and health.
    app: (Apps, Vec<SourceApp>),
    /// The span recorder, and the collectors spans and metrics are exported to
    /// (with `[otel]` on).
    tracer: Tracer,
    exports: Exports,
    /// The config it runs, for reloads to compare with.
    config: Config,
    reloader: Reloader,
    reloads: mpsc::Receiver<Result<Config, ConfigError>>,
    /// The shutdown's deadline, started by the first signal or the first component
    /// that sees the shutdown begin.
    deadline: Deadline,
    /// The drain `/drain` asks for.
    drain: Drain,
    /// `admin.token_file`, read now: the token `/drain` requires.
    admin_token: Option<Arc<SecretFile>>,
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
        for source in &settings.sources {
            if let Some(stream) = source.stream()
                && source.pinned()
                && stream.ack_wait < Duration::from_secs(2)
            {
                tracing::warn!(
                    source = %source.name,
                    ack_wait_ms = stream.ack_wait.as_millis(),
                    "consumer.ack_wait_ms below 2000 in a consumer group: pull expiry and pin timeout meet, and the pin may flap while idle"
                );
            }
        }
        let metrics = Metrics::new()?;
        let readiness = Readiness::new(metrics.clone());
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
        let app = Apps::build(&settings.sources, &Apps::default())?;
        let admin_token = match &settings.admin_token_file {
            Some(path) => Some(Arc::new(SecretFile::load("admin.token_file", path)?)),
            None => None,
        };
        let (tracer, spans) = match &settings.tracing {
            Some(t) => (
                Tracer::new(t.settings.clone(), metrics.clone()),
                Some(Collector::new(&t.collector)?),
            ),
            None => (Tracer::off(), None),
        };
        let exports = Exports {
            spans,
            metrics: match &settings.metrics_export {
                Some(m) => Some((Collector::new(&m.collector)?, m.clone())),
                None => None,
            },
        };
        let (reloader, reloads) = reload::channel();
        Ok(Daemon {
            deadline: Deadline::new(settings.shutdown_grace),
            settings,
            metrics,
            readiness,
            admin,
            publish,
            app,
            tracer,
            exports,
            config,
            reloader,
            reloads,
            drain: Drain::default(),
            admin_token,
        })
    }

    /// The process's drain (what `/drain` asks).
    pub fn drain(&self) -> Drain {
        self.drain.clone()
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
            self.settings.max_in_flight(),
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

    /// What the admin endpoints show and take (`config`: the running config).
    fn admin_shown(&self, config: watch::Receiver<String>) -> crate::serve::admin::Shown {
        crate::serve::admin::Shown {
            readiness: self.readiness.clone(),
            metrics: self.metrics.clone(),
            config,
            drain: self.drain.clone(),
            token: self.admin_token.clone(),
            default_wait: self.settings.shutdown_grace,
        }
    }

    /// Runs until `shutdown` is cancelled (then drains and returns `Ok`) or a fatal
    /// error. Once cancelled it returns within `delivery.shutdown_grace_ms` (plus a
    /// moment), whatever NATS does: every step of the shutdown is bounded by the one
    /// [`Deadline`], and a step that is still running after it is abandoned.
    ///
    /// # Errors
    /// [`DaemonError`].
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), DaemonError> {
        let (admin_cap, publish_cap) = self.connection_caps();
        let (shown_tx, shown_rx) = watch::channel(reload::shown(&self.config));
        let shown = self.admin_shown(shown_rx);
        let deadline = self.deadline;
        let (changes_tx, changes) = mpsc::channel(64);
        let budget = Budget::new(self.settings.budget, self.settings.budget_reserve);
        let (reloads, runners) = Reloads::start(
            &self.settings,
            self.app,
            reload::Fleet {
                readiness: self.readiness.clone(),
                metrics: self.metrics.clone(),
                tracer: self.tracer.clone(),
                deadline: deadline.clone(),
                budget,
                changes: changes_tx,
                drain: self.drain.clone(),
            },
            self.config,
            self.reloads,
            shown_tx,
        )?;
        let admin_stop = CancellationToken::new();
        let admin = tokio::spawn(crate::serve::admin::serve(
            self.admin,
            shown,
            admin_cap,
            admin_stop.clone(),
        ));
        let export_stop = CancellationToken::new();
        let exporters = self
            .exports
            .start(&self.tracer, &self.metrics, &export_stop, &deadline);
        let supervisor = Supervisor {
            tracer: self.tracer,
            settings: self.settings,
            metrics: self.metrics,
            readiness: self.readiness.clone(),
            runners,
            changes,
            rules: reloads.rules.clone(),
            deadline: deadline.clone(),
            publish: self.publish,
            publish_cap,
            drain: self.drain,
        };
        let run = supervisor.run(&shutdown);
        tokio::pin!(run);
        // The backstop: the steps bound themselves; anything that still runs a moment
        // after the deadline (a NATS call this code forgot to bound) is abandoned. After
        // a drain the deadline is over already: the moment counts from the signal.
        let backstop = async {
            shutdown.cancelled().await;
            let at = deadline.start().max(tokio::time::Instant::now());
            tokio::time::sleep_until(at + BACKSTOP).await;
        };
        let result = tokio::select! {
            result = &mut run => result,
            () = backstop => {
                tracing::error!("the shutdown grace is over and a step still runs: stopping without it");
                Ok(())
            }
        };
        self.readiness.set_draining("stopped");
        reloads.stop().await;
        export_stop.cancel();
        // The exporters bound themselves by FLUSH; the margin is for their last send.
        let at = deadline
            .or_from_now()
            .min(tokio::time::Instant::now() + crate::ops::traces::FLUSH + BACKSTOP);
        for (what, task) in exporters {
            if bounded(at, what, task).await.is_none() {
                tracing::warn!(what, "not done within the grace");
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

/// Where spans and metrics are exported to, when they are.
#[derive(Debug)]
struct Exports {
    spans: Option<Collector>,
    metrics: Option<(Collector, MetricsExport)>,
}

impl Exports {
    /// The exporters' tasks: spans and metrics go out off the delivery path; at
    /// shutdown (`stop`) what is queued, and a last reading of the metrics, is sent
    /// within the grace, after the drain.
    fn start(
        self,
        tracer: &Tracer,
        metrics: &Metrics,
        stop: &CancellationToken,
        deadline: &Deadline,
    ) -> Vec<(&'static str, JoinHandle<()>)> {
        let mut tasks = Vec::new();
        if let Some(c) = self.spans {
            let d = deadline.clone();
            tasks.push((
                "export the last spans",
                tokio::spawn(crate::ops::traces::export(
                    tracer.clone(),
                    c,
                    stop.clone(),
                    move || d.get(),
                )),
            ));
        }
        if let Some((c, m)) = self.metrics {
            let d = deadline.clone();
            tasks.push((
                "export the last metrics",
                tokio::spawn(crate::ops::otlp_metrics::export(
                    metrics.clone(),
                    c,
                    m.resource,
                    m.every,
                    stop.clone(),
                    move || d.get(),
                )),
            ));
        }
        tasks
    }
}

/// What a reload changes (the dispatcher's live settings, the endpoint's rules),
/// and the task that applies reloads.
struct Reloads {
    rules: watch::Receiver<Rules>,
    task: JoinHandle<()>,
    stop: CancellationToken,
}

impl Reloads {
    /// What runs from no sources, as a reload makes it (the runners of every
    /// source, returned to start), then the task that applies reloads to it.
    ///
    /// # Errors
    /// [`DaemonError::Start`] when a source cannot be started.
    fn start(
        settings: &Settings,
        (apps, per_source): (Apps, Vec<SourceApp>),
        fleet: reload::Fleet,
        config: Config,
        requests: mpsc::Receiver<Result<Config, ConfigError>>,
        shown: watch::Sender<String>,
    ) -> Result<(Reloads, Vec<Runner>), DaemonError> {
        let (rules_tx, rules) = watch::channel(settings.publish.rules.clone());
        let mut running = reload::Running {
            config,
            settings: settings.clone(),
            apps,
            live: BTreeMap::new(),
            rules: rules_tx,
            shown,
            deadline: fleet.deadline.clone(),
            metrics: fleet.metrics.clone(),
            fleet,
        };
        let runners = running.boot(&per_source)?;
        let stop = CancellationToken::new();
        let task = tokio::spawn(reload::serve(running, requests, stop.clone()));
        Ok((Reloads { rules, task, stop }, runners))
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
    /// One per source.
    runners: Vec<Runner>,
    /// Sources a reload starts or removes.
    changes: mpsc::Receiver<SourceChange>,
    /// The publish rules, for the endpoint.
    rules: watch::Receiver<Rules>,
    deadline: Deadline,
    /// The publish endpoint's listener and token, when it is on.
    publish: Option<(TcpListener, Option<Arc<SecretFile>>)>,
    /// The publish endpoint's connection cap.
    publish_cap: usize,
    /// The drain `/drain` asks for.
    drain: Drain,
}

/// How long the publish endpoint's requests in progress may take to finish when the
/// process stops after a drain (its grace was the drain's).
const AFTER_DRAIN: Duration = Duration::from_millis(100);

impl Supervisor {
    async fn run(mut self, shutdown: &CancellationToken) -> Result<(), DaemonError> {
        let nats = Nats::connect(&self.settings.nats, true).await?;
        let mirror = self.mirror_connection(&nats);
        let announced = CancellationToken::new();
        if self.settings.announce
            && let Err(e) = announce::start(
                &nats,
                &self.settings.nats.name,
                self.readiness.clone(),
                self.metrics.clone(),
                announced.clone(),
            )
            .await
        {
            tracing::warn!(error = %e, "cannot answer NATS service discovery ($SRV): jetrelay ps will not list this instance");
        }
        let endpoint = self
            .publish
            .take()
            .map(|(l, token)| self.serve_publish(l, token, &nats));
        let runners = std::mem::take(&mut self.runners);
        // The sources stop at the shutdown, or before it at a drain.
        let sources_stop = shutdown.child_token();
        let started = self.stop_on_drain(&sources_stop);
        let result = fleet::consume(
            runners,
            &nats,
            &sources_stop,
            &mut self.changes,
            &self.readiness,
            &self.metrics,
        )
        .await
        .map_err(|failed| match failed {
            fleet::Failed::Source(name, error) => DaemonError::Source { name, error },
            fleet::Failed::Task(e) => DaemonError::SourceTask(e),
        });
        let drained = self.drain.is_asked();
        self.flush(&nats).await;
        self.finish_drain(started, result.is_ok()).await;
        if drained {
            // Probes, metrics and the publish endpoint go on until the process stops.
            shutdown.cancelled().await;
        }
        mirror.abort();
        announced.cancel();
        // The app may publish until its messages are drained.
        if let Some((stop, served)) = endpoint {
            stop.cancel();
            let deadline = if drained {
                tokio::time::Instant::now() + AFTER_DRAIN
            } else {
                self.deadline.or_from_now()
            };
            if let Some(Ok(Err(e))) = bounded(deadline, "stop the publish endpoint", served).await {
                tracing::warn!(error = %e, "the publish endpoint failed");
            }
        }
        if !drained {
            self.flush(&nats).await;
        }
        result
    }

    /// Acks are fire-and-forget publishes: flushes them, but never waits on a
    /// connection that is down past the grace.
    async fn flush(&self, nats: &Nats) {
        if let Some(Err(e)) = bounded(self.deadline.or_from_now(), "flush NATS", nats.flush()).await
        {
            tracing::warn!(error = %e, "cannot flush NATS at shutdown");
        }
    }

    /// Stops the sources (`stop`) when a drain is asked, their grace the drain's
    /// wait. The task returns the tally when the sources began to stop (a drain, or
    /// the shutdown).
    fn stop_on_drain(&self, stop: &CancellationToken) -> JoinHandle<Tallied> {
        let (drain, deadline, metrics) = (
            self.drain.clone(),
            self.deadline.clone(),
            self.metrics.clone(),
        );
        let stop = stop.clone();
        tokio::spawn(async move {
            tokio::select! {
                wait = drain.asked() => {
                    let before = metrics.tally();
                    deadline.start_within(wait);
                    stop.cancel();
                    before
                }
                () = stop.cancelled() => metrics.tally(),
            }
        })
    }

    /// Every source has ended (drained, or stopped): what they did since they began
    /// to stop is the drain's answer, to whoever asks `/drain` now or later. After a
    /// drain `/ready` says `drained`.
    async fn finish_drain(&self, started: JoinHandle<Tallied>, ok: bool) {
        started.abort();
        let before = started.await.unwrap_or_else(|_| self.metrics.tally());
        let did = self.metrics.tally().since(before);
        let outcome = DrainOutcome {
            drained: ok && did.abandoned == 0,
            settled: did.settled,
            released: did.released,
        };
        if self.drain.is_asked() {
            self.readiness.set_drained(if outcome.drained {
                "drained (/drain): only a restart resumes delivery"
            } else {
                "drained (/drain), some messages left for redelivery: only a restart resumes delivery"
            });
            tracing::info!(
                drained = outcome.drained,
                settled = outcome.settled,
                released = outcome.released,
                left = did.abandoned,
                "drained: nothing is pulled any more; probes, metrics and the publish endpoint go on until the process stops"
            );
        }
        self.drain.finish(outcome);
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
}
