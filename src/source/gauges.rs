//! What runs beside a source's dispatcher: the task that reads its consumer's info
//! every second (the pending gauges, an elastic group's backlog, a pause on the
//! server, who holds the pin) and an auto-joined member's heartbeats. Each stops
//! when its handle is dropped.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::group::autojoin::AutoJoin;
use crate::nats::Nats;
use crate::ops::metrics::SourceMetrics;
use crate::ops::readiness::{PinHolder, SourceReadiness};
use crate::ops::telemetry::chain;
use crate::seam::ServerPause;

/// What the consumer's info is read for.
#[derive(Debug, Clone)]
pub(super) struct Gauges {
    pub(super) metrics: SourceMetrics,
    pub(super) readiness: SourceReadiness,
    /// A pinned consumer: who holds the pin is recorded.
    pub(super) pinned: bool,
    /// An elastic group's work-queue stream: its size is the group's backlog.
    pub(super) work_queue: bool,
}

impl Gauges {
    /// Refreshes, every second, the consumer pending gauges, an elastic group's
    /// backlog, whether the consumer is paused on the server (into `pause`, which the
    /// dispatcher watches) and, for a pinned consumer, who holds the pin.
    pub(super) fn consumer_gauges(
        &self,
        nats: &Nats,
        stream: &str,
        consumer: &str,
        pause: &Arc<watch::Sender<ServerPause>>,
    ) -> GaugeTask {
        let (nats, metrics, readiness) =
            (nats.clone(), self.metrics.clone(), self.readiness.clone());
        let (pinned_mode, work_queue) = (self.pinned, self.work_queue);
        let (stream, consumer) = (stream.to_string(), consumer.to_string());
        // Every second: a pause (`jetrelay pause`) must be seen within a second or
        // two, and a standby must not go on saying that nobody holds the pin (an idle
        // member) after another instance took it.
        let every = Duration::from_secs(1);
        let pause = Arc::clone(pause);
        let task = tokio::spawn(
            async move {
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
            }
            .in_current_span(),
        );
        GaugeTask {
            task,
            metrics: self.metrics.clone(),
        }
    }
}

/// An auto-joined member's heartbeats (and pruning), every third of the timeout,
/// until dropped; and whether the member must stop taking work (true once its
/// liveness record has gone unwritten long enough that the others may prune it
/// before its next beat: `group::autojoin::fenced`). A beat that takes longer than
/// the interval counts as failed, so that a hung write cannot hold the fence open.
pub(super) fn heartbeats(auto: &AutoJoin) -> (AbortOnDrop, watch::Receiver<bool>) {
    let auto = auto.clone();
    let (fence_tx, fence_rx) = watch::channel(false);
    let task = tokio::spawn(
        async move {
            let mut last_ok = tokio::time::Instant::now();
            let mut failing = false;
            let mut tick = tokio::time::interval(auto.every());
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                let why = match tokio::time::timeout(auto.every(), auto.beat()).await {
                    Ok(Ok(())) => None,
                    Ok(Err(e)) => Some(chain(&e)),
                    Err(_) => Some("the write did not complete within a beat".to_string()),
                };
                match why {
                    None => {
                        if std::mem::take(&mut failing) {
                            tracing::info!("the liveness record is written again");
                        }
                        last_ok = tokio::time::Instant::now();
                    }
                    Some(why) if !failing => {
                        failing = true;
                        tracing::warn!(error = %why, "cannot write the liveness record: silent past source.member_timeout_ms, this member is pruned by the others (and joins again once back); it stops taking work two beats in");
                    }
                    Some(_) => {}
                }
                let fenced = auto.is_fenced(last_ok.elapsed());
                fence_tx.send_if_modified(|f| std::mem::replace(f, fenced) != fenced);
            }
        }
        .in_current_span(),
    );
    (AbortOnDrop(task), fence_rx)
}

/// A task aborted when this is dropped.
pub(super) struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The task that refreshes the consumer gauges. Dropped when its consumer's run
/// ends: the task stops and the gauges are withdrawn, so nothing reads an old value
/// while the supervisor binds or joins again.
pub(super) struct GaugeTask {
    task: JoinHandle<()>,
    metrics: SourceMetrics,
}

impl Drop for GaugeTask {
    fn drop(&mut self) {
        self.task.abort();
        self.metrics.consumer_counts(None);
        self.metrics.group_backlog(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_consumer_gauges_are_withdrawn_when_their_task_ends() {
        let metrics = crate::ops::metrics::Metrics::new()
            .unwrap()
            .source("default")
            .unwrap();
        metrics.consumer_counts(Some((5, 2)));
        metrics.group_backlog(Some(9));
        let task = GaugeTask {
            task: tokio::spawn(std::future::pending()),
            metrics: metrics.clone(),
        };
        assert_eq!(metrics.sample("jetrelay_consumer_pending"), Some(5.0));
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
