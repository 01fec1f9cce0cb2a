//! Reload (SIGHUP): the config file and the environment read again, compared with
//! what runs key by key (`crate::config::reload`), and either applied whole — the
//! dispatcher's [`Live`] settings, the publish endpoint's rules, the shutdown grace,
//! the log level — or refused whole, the running config kept and every key that
//! cannot change live named with why. In-flight and held messages are never dropped,
//! failed or redelivered by it: the dispatcher takes the new settings for what
//! starts next, and a request already sent finishes as it started. After a drain
//! (`/drain`) every reload is refused: only a restart resumes delivery.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::admission::Budget;
use crate::config::reload::{Change, diff, flatten};
use crate::config::{Config, ConfigError};
use crate::daemon::apps::{Apps, SourceApp};
use crate::daemon::settings::Settings;
use crate::dispatch::Live;
use crate::http::client::ClientError;
use crate::http::forward::{Forwarder, TargetSettings};
use crate::ops::drain::Drain;
use crate::ops::metrics::Metrics;
use crate::ops::readiness::Readiness;
use crate::ops::telemetry::chain;
use crate::ops::traces::Tracer;
use crate::outputs::Rules;
use crate::seam::time::Deadline;
use crate::secret::Salt;
use crate::service::Served;
use crate::source::Runner;
use crate::source::live::SourceLive;
use crate::source::settings::{KindSettings, SourceSettings};

/// Asks the running daemon to reload: what SIGHUP does. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Reloader {
    tx: mpsc::Sender<Result<Config, ConfigError>>,
}

impl Reloader {
    /// Hands a freshly loaded config (or why it did not load) to the daemon. A
    /// reload while two wait is dropped, with a warning: the last one waiting reads
    /// the same file.
    pub fn request(&self, loaded: Result<Config, ConfigError>) {
        if self.tx.try_send(loaded).is_err() {
            tracing::warn!("a reload is already waiting to be applied: this one adds nothing");
        }
    }
}

/// The channel a [`Reloader`] sends on, and its receiving end.
pub(super) fn channel() -> (Reloader, mpsc::Receiver<Result<Config, ConfigError>>) {
    let (tx, rx) = mpsc::channel(2);
    (Reloader { tx }, rx)
}

/// A source's live settings, by kind, from its settings, with what it sends
/// through: its target, and each of its routes' (or endpoints') targets.
///
/// # Errors
/// [`ClientError`] when a target cannot be built.
pub(super) fn live_of(source: &SourceSettings, app: &SourceApp) -> Result<SourceLive, ClientError> {
    let forward = |t: &TargetSettings| Forwarder::new(&app.client, t);
    Ok(match &source.kind {
        KindSettings::Stream(stream) => SourceLive::Stream(Arc::new(Live {
            forwarder: app.forwarder.clone(),
            policy: source.policy.clone(),
            pace: source.pace,
            batch: stream.batch,
            outputs: stream.outputs.clone(),
            unhealthy_handover: stream.unhealthy_handover,
            app_healthy: app.app_healthy.clone(),
            limits: stream.limits,
            confirmed_acks: stream.confirmed_acks,
            routes: (stream.routes.iter())
                .map(|r| r.try_map(forward))
                .collect::<Result<_, _>>()?,
            max_age: stream.max_age,
            unwrap_cloudevents: stream.unwrap_cloudevents,
        })),
        KindSettings::Service(service) => SourceLive::Service(Arc::new(Served {
            endpoints: service
                .targets
                .iter()
                .map(forward)
                .collect::<Result<_, _>>()?,
            pace: source.pace,
            app_healthy: app.app_healthy.clone(),
            policy: source.policy.clone(),
        })),
    })
}

/// What runs, and the handles a reload changes it through.
#[derive(Debug)]
pub(super) struct Running {
    pub(super) config: Config,
    /// The config's settings, parsed: what a reload's are compared with.
    pub(super) settings: Settings,
    /// The app's clients and probes in use.
    pub(super) apps: Apps,
    /// Each running source's live settings, by name.
    pub(super) live: BTreeMap<String, watch::Sender<SourceLive>>,
    pub(super) rules: watch::Sender<Rules>,
    /// The running config as `/config` shows it (JSON, secrets fingerprinted).
    pub(super) shown: watch::Sender<String>,
    pub(super) deadline: Deadline,
    pub(super) metrics: Metrics,
    /// Starting and stopping sources.
    pub(super) fleet: Fleet,
}

/// What `/config` shows of a config.
pub(super) fn shown(config: &Config) -> String {
    serde_json::to_string(&flatten(config, Salt::of_process())).unwrap_or_else(|_| "{}".into())
}

impl Running {
    /// Applies `loaded` when every changed key may change live and it parses into
    /// settings; else refuses it whole. Returns whether it was applied.
    pub(super) fn reload(&mut self, loaded: Result<Config, ConfigError>) -> bool {
        let applied = match self.try_reload(loaded) {
            Ok(changes) => {
                let keys: Vec<&str> = changes.iter().map(|c| c.key.as_str()).collect();
                tracing::info!(changed = %crate::printable::list(&keys, 16), "config reloaded");
                // Last, so that the line above is seen whatever the new level.
                if keys.contains(&"log.level")
                    && let Err(e) = crate::ops::telemetry::set_level(&self.config.log.level)
                {
                    tracing::warn!(error = %e, "log.level cannot be changed");
                }
                true
            }
            Err(Refused::Drained) => {
                tracing::error!(
                    "config reload refused: this jetrelay was drained (/drain); only a restart resumes delivery"
                );
                false
            }
            Err(Refused::Invalid(why)) => {
                tracing::error!(error = %why, "config reload refused: the new config does not validate; the running config stays");
                false
            }
            Err(Refused::NotLive(changes)) => {
                for c in &changes {
                    tracing::error!(
                        key = %c.key,
                        running = %c.running,
                        new = %c.new,
                        why = c.why_not_live(),
                        "config reload refused: this key cannot change without a restart"
                    );
                }
                let keys: Vec<&str> = changes.iter().map(|c| c.key.as_str()).collect();
                tracing::error!(keys = %crate::printable::list(&keys, 16), "config reload refused: the running config stays");
                false
            }
        };
        self.metrics.config_reload(applied);
        applied
    }

    fn try_reload(&mut self, loaded: Result<Config, ConfigError>) -> Result<Vec<Change>, Refused> {
        if self.fleet.drain.is_asked() {
            return Err(Refused::Drained);
        }
        let new = loaded.map_err(|e| Refused::Invalid(chain(&e)))?;
        let salt = Salt::of_process();
        let running: BTreeMap<String, Value> = flatten(&self.config, salt);
        let changes = diff(&running, &flatten(&new, salt));
        // A source added or removed whole is the fleet's to start or drain.
        let (old_names, new_names) = (self.config.sources.keys(), new.sources.keys());
        let moved: Vec<&String> = old_names
            .filter(|n| !new.sources.contains_key(*n))
            .chain(new_names.filter(|n| !self.config.sources.contains_key(*n)))
            .collect();
        let whole = |key: &str| {
            moved.iter().any(|n| {
                key.strip_prefix("sources.")
                    .and_then(|k| k.strip_prefix(n.as_str()))
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
            })
        };
        let fixed: Vec<Change> = (changes.iter())
            .filter(|c| !c.live && !whole(&c.key))
            .cloned()
            .collect();
        if !fixed.is_empty() {
            return Err(Refused::NotLive(fixed));
        }
        if changes.is_empty() {
            return Ok(changes);
        }
        let settings = Settings::from_config(&new).map_err(|e| Refused::Invalid(chain(&e)))?;
        let (apps, per_source) =
            Apps::build(&settings.sources, &self.apps).map_err(|e| Refused::Invalid(chain(&e)))?;
        let (started, stopped) = self
            .apply(&settings, &per_source)
            .map_err(|e| Refused::Invalid(chain(&e)))?;
        // Adds first: the source loop ends when no source runs.
        for runner in started {
            self.fleet.change(SourceChange::Add(Box::new(runner)));
        }
        for name in stopped {
            self.fleet.change(SourceChange::Remove(name));
        }
        self.rules.send_replace(settings.publish.rules.clone());
        self.fleet.budget.set_total(settings.budget);
        self.fleet.budget.set_reserve(settings.budget_reserve);
        self.deadline.set_grace(settings.shutdown_grace);
        self.shown.send_replace(shown(&new));
        self.config = new;
        self.settings = settings;
        self.apps = apps;
        Ok(changes)
    }
}

impl Running {
    /// What runs from no sources (the daemon's start): the runners of every source
    /// of `settings`, built as a reload builds the sources it adds.
    ///
    /// # Errors
    /// [`StartError`] when a source's targets or collectors cannot be made.
    pub(super) fn boot(&mut self, per_source: &[SourceApp]) -> Result<Vec<Runner>, StartError> {
        let settings = self.settings.clone();
        // Nothing ran: nothing is stopped.
        Ok(self.apply(&settings, per_source)?.0)
    }

    /// Makes `settings` (with `per_source`, its sources' apps in its order) what
    /// runs: a source whose settings, client or probe changed gets its new live
    /// settings; one not running yet gets a runner, and one no longer there is
    /// named (both returned: the caller starts and drains them). Everything is made
    /// before anything is sent, so that a failure changes nothing.
    ///
    /// # Errors
    /// [`StartError`] when a source's targets or collectors cannot be made.
    fn apply(
        &mut self,
        settings: &Settings,
        per_source: &[SourceApp],
    ) -> Result<(Vec<Runner>, Vec<String>), StartError> {
        let mut sends = Vec::new();
        let mut live = BTreeMap::new();
        let mut started = Vec::new();
        for (source, app) in settings.sources.iter().zip(per_source) {
            let now = live_of(source, app)?;
            match self.live.get(&source.name) {
                Some(tx) => {
                    // A source whose settings, client and probe are as they were keeps
                    // its live settings: its dispatcher sees nothing.
                    if app.rebuilt || self.settings.source(&source.name) != Some(source) {
                        sends.push((tx.clone(), now));
                    }
                    live.insert(source.name.clone(), tx.clone());
                }
                None => {
                    let (tx, rx) = watch::channel(now);
                    match self.fleet.runner(source, rx) {
                        Ok(runner) => started.push(runner),
                        Err(e) => {
                            for r in &started {
                                self.fleet.forget(r);
                            }
                            return Err(e.into());
                        }
                    }
                    live.insert(source.name.clone(), tx);
                }
            }
        }
        // What is left of the running sources was removed.
        let running = std::mem::replace(&mut self.live, live);
        for (tx, now) in sends {
            tx.send_replace(now);
        }
        let stopped = (running.into_keys())
            .filter(|name| !self.live.contains_key(name))
            .collect();
        Ok((started, stopped))
    }
}

/// Why a source could not be started or changed.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A target could not be built.
    #[error(transparent)]
    App(#[from] ClientError),
    /// Its collectors could not be registered.
    #[error(transparent)]
    Metrics(#[from] crate::ops::metrics::MetricsError),
}

/// A change a reload makes to the set of running sources.
#[derive(Debug)]
pub(super) enum SourceChange {
    /// Start this source.
    Add(Box<Runner>),
    /// Drain this source and end it.
    Remove(String),
}

/// What a reload needs to start a source and to hand it (or a removal) to the
/// daemon's source loop.
#[derive(Debug)]
pub(super) struct Fleet {
    pub(super) readiness: Readiness,
    pub(super) metrics: Metrics,
    pub(super) tracer: Tracer,
    /// The shutdown's deadline, which a source started now shares.
    pub(super) deadline: Deadline,
    /// Requests in flight across all sources: a source started now takes a share.
    pub(super) budget: Budget,
    pub(super) changes: mpsc::Sender<SourceChange>,
    /// The process's drain: once asked, no reload starts or changes anything.
    pub(super) drain: Drain,
}

impl Fleet {
    /// A runner for a source a reload adds: its collectors registered and its
    /// readiness added (not ready until it runs).
    fn runner(
        &self,
        source: &SourceSettings,
        live: watch::Receiver<SourceLive>,
    ) -> Result<Runner, crate::ops::metrics::MetricsError> {
        let metrics = self.metrics.source(&source.name)?;
        Ok(Runner {
            settings: source.clone(),
            readiness: self
                .readiness
                .source(&source.name, source.member(), metrics.clone()),
            metrics,
            live,
            tracer: self.tracer.for_source(source.trace.clone()),
            deadline: self.deadline.clone(),
            budget: self.budget.member(&source.name, source.weight),
        })
    }

    /// Undoes [`Fleet::runner`] for a runner that will not run.
    fn forget(&self, runner: &Runner) {
        self.readiness.remove(&runner.settings.name);
        self.metrics.remove_source(&runner.metrics);
    }

    /// Hands a change to the source loop; a loop that is gone (the process stops)
    /// takes none.
    fn change(&self, change: SourceChange) {
        if let Err(e) = self.changes.try_send(change) {
            tracing::error!(error = %e, "a source change could not be handed on: it takes effect at the next restart");
        }
    }
}

/// Why a reload was refused.
enum Refused {
    /// The process was drained: nothing starts again but by a restart.
    Drained,
    /// It does not load or parse: why.
    Invalid(String),
    /// These keys changed and cannot change live.
    NotLive(Vec<Change>),
}

/// Applies reloads as they come until `stop`.
pub(super) async fn serve(
    mut running: Running,
    mut requests: mpsc::Receiver<Result<Config, ConfigError>>,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            next = requests.recv() => match next {
                Some(loaded) => { running.reload(loaded); }
                None => return,
            },
        }
    }
}
