//! The sources running: one task per source, each in its span; a reload's changes
//! start sources and drain removed ones; a source that fails stops alone, and the
//! process's run ends when no source runs.

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::daemon::reload::SourceChange;
use crate::nats::Nats;
use crate::ops::metrics::{Metrics, SourceMetrics};
use crate::ops::readiness::{Readiness, State};
use crate::ops::telemetry::chain;
use crate::source::Runner;
use crate::source::error::SourceError;

/// Why a source ended for good.
#[derive(Debug)]
pub(super) enum Failed {
    /// The source of this name failed.
    Source(String, SourceError),
    /// Its task panicked.
    Task(tokio::task::JoinError),
}

/// Runs every source, each in its own task and span, until all have ended. A
/// source that fails for good (a topology conflict, a group it cannot join) ends
/// alone: it says so in its readiness, which stays not ready, and the others run
/// on; the process ends with the first failure once no source runs (unless it
/// was asked to stop). A reload's changes start sources and drain removed ones.
pub(super) async fn consume(
    runners: Vec<Runner>,
    nats: &Nats,
    shutdown: &CancellationToken,
    changes: &mut mpsc::Receiver<SourceChange>,
    readiness: &Readiness,
    metrics: &Metrics,
) -> Result<(), Failed> {
    let mut fleet = SourceTasks::default();
    for runner in runners {
        fleet.start(runner, nats, shutdown);
    }
    let mut first = None;
    loop {
        tokio::select! {
            ended = fleet.tasks.join_next(), if !fleet.tasks.is_empty() => {
                let Some(ended) = ended else { continue };
                if let Some(failed) = fleet.ended(ended, readiness, metrics) {
                    first.get_or_insert(failed);
                }
            }
            change = changes.recv(), if !shutdown.is_cancelled() => match change {
                Some(SourceChange::Add(runner)) => fleet.start(*runner, nats, shutdown),
                Some(SourceChange::Remove(name)) => fleet.stop(&name),
                None => {}
            },
        }
        // No source runs: a reload adds a source only beside running ones (its Add
        // comes before any Remove), so nothing more can start.
        if fleet.tasks.is_empty() {
            break;
        }
    }
    // Asked to stop: what failed before was said (its log line, its readiness),
    // and the others drained; the stop itself went as asked.
    match first {
        Some(e) if !shutdown.is_cancelled() => Err(e),
        _ => Ok(()),
    }
}

/// The sources running: their tasks, and how to stop each.
#[derive(Default)]
struct SourceTasks {
    tasks: tokio::task::JoinSet<(String, SourceMetrics, Result<(), SourceError>)>,
    /// Each running source's own stop (a child of the process's shutdown).
    stops: std::collections::HashMap<String, CancellationToken>,
    /// Sources a reload removed, draining now.
    removed: std::collections::HashSet<String>,
}

impl SourceTasks {
    /// Starts a source in its own task and span.
    fn start(&mut self, runner: Runner, nats: &Nats, shutdown: &CancellationToken) {
        let name = runner.settings.name.clone();
        let (readiness, metrics) = (runner.readiness.clone(), runner.metrics.clone());
        let stop = shutdown.child_token();
        self.stops.insert(name.clone(), stop.clone());
        self.removed.remove(&name);
        let span = tracing::info_span!("source", source = %name);
        let run = runner.run(nats.clone(), stop);
        self.tasks.spawn(
            async move {
                let ended = run.await;
                if let Err(e) = &ended {
                    let why = chain(e);
                    tracing::error!(error = %why, "the source stopped: it cannot run until it is fixed (the other sources go on)");
                    readiness.set(State::NotReady, format!("stopped: {why}"));
                }
                (name, metrics, ended)
            }
            .instrument(span),
        );
    }

    /// Drains a source a reload removed: it stops pulling, finishes and settles what
    /// it holds, and ends.
    fn stop(&mut self, name: &str) {
        if let Some(stop) = self.stops.get(name) {
            tracing::info!(source = name, "source removed by a reload: draining it");
            self.removed.insert(name.to_string());
            stop.cancel();
        }
    }

    /// A source's task ended: a removed one leaves readiness and the metrics; a
    /// failure is returned.
    fn ended(
        &mut self,
        ended: Result<(String, SourceMetrics, Result<(), SourceError>), tokio::task::JoinError>,
        readiness: &Readiness,
        metrics: &Metrics,
    ) -> Option<Failed> {
        let (name, own, result) = match ended {
            Ok(done) => done,
            Err(e) => return Some(Failed::Task(e)),
        };
        self.stops.remove(&name);
        if self.removed.remove(&name) {
            readiness.remove(&name);
            metrics.remove_source(&own);
            tracing::info!(source = %name, "source removed: drained");
            return None;
        }
        result.err().map(|e| Failed::Source(name, e))
    }
}
