//! One source's life, whole: wait for NATS, ensure its dead-letter stream, bind its
//! topology or join its group (waiting and retrying, not ready meanwhile), run its
//! dispatcher with the tasks beside it (consumer gauges, heartbeats), and go back to
//! binding when its consumer is lost. The daemon runs one of these per source, each
//! in its own task and span; a source knows nothing of the others.

pub mod error;
mod gauges;
pub mod live;
mod service;
pub mod settings;
mod wait;

use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use self::error::SourceError;
use self::gauges::{Gauges, heartbeats};
use self::live::{Following, SourceLive, follow};
use self::settings::{Binding, KindSettings, SourceSettings, StreamSettings};
use self::wait::{Waits, wait_connected};
use crate::admission::BudgetShare;
use crate::dispatch::{Dispatch, DispatchError, Ended, Marking};
use crate::group::autojoin::AutoJoin;
use crate::group::model::Flavour;
use crate::group::spec::Member;
use crate::http::forward::Forwarder;
use crate::nats::{MarkerStore, Nats, Publisher, PullerConfig};
use crate::ops::metrics::SourceMetrics;
use crate::ops::readiness::{Consumes, SourceReadiness, State};
use crate::ops::traces::Tracer;
use crate::seam::time::Deadline;
use crate::seam::{ServerPause, Source};
use crate::topology::TopologyRequest;

/// What one source runs with.
#[derive(Debug)]
pub struct Runner {
    /// Its settings.
    pub settings: SourceSettings,
    /// Its readiness.
    pub readiness: SourceReadiness,
    /// Collectors.
    pub metrics: SourceMetrics,
    /// What a reload may change, for its dispatcher or service runner.
    pub live: watch::Receiver<SourceLive>,
    /// Records spans.
    pub tracer: Tracer,
    /// The shutdown's deadline, shared with the process.
    pub deadline: Deadline,
    /// Its part of the requests in flight across all sources.
    pub budget: BudgetShare,
}

/// How one run of the dispatcher over a bound consumer ended.
type Turn = Option<Result<Ended, DispatchError>>;

/// The source's dispatcher, as the runner builds it.
type Dispatcher = Arc<Dispatch<Forwarder, Publisher, MarkerStore>>;

/// What each turn of a source's loop works with.
#[derive(Clone, Copy)]
struct Turning<'a> {
    waits: &'a Waits,
    nats: &'a Nats,
    dispatch: &'a Dispatcher,
    /// Where the gauge task says whether the consumer is paused on the server.
    pause: &'a Arc<watch::Sender<ServerPause>>,
    shutdown: &'a CancellationToken,
}

impl Runner {
    /// What it consumes, for discovery.
    fn consumes(&self) -> Consumes {
        let stream = match &self.settings.kind {
            KindSettings::Stream(stream) => stream,
            KindSettings::Service(service) => return Runner::serves(&service.spec),
        };
        match &stream.binding {
            Binding::Durable(r) => Consumes {
                stream: r.stream.clone(),
                consumer: r.consumer.name.clone(),
                group: None,
            },
            Binding::Group(m) => {
                let (stream, consumer) = m.consumer();
                Consumes {
                    stream,
                    consumer,
                    group: Some(m.group.clone()),
                }
            }
        }
    }

    /// Runs the source until `shutdown` (drained) or its group ends (`Ok`), or until
    /// it fails for good.
    ///
    /// # Errors
    /// [`SourceError`].
    pub async fn run(self, nats: Nats, shutdown: CancellationToken) -> Result<(), SourceError> {
        let nats = &nats;
        let shutdown = &shutdown;
        self.readiness.set_consumes(self.consumes());
        if !wait_connected(nats, shutdown).await? {
            return Ok(());
        }
        nats.check_server_version()?;
        let stream = match &self.settings.kind {
            KindSettings::Service(service) => return self.serve(nats, service, shutdown).await,
            KindSettings::Stream(stream) => stream,
        };
        let waits = self.waits(stream);
        if let Some(dlq) = &stream.dead_letters
            && let Some(spec) = &dlq.managed
            && !waits.ensure_dlq_stream(nats, dlq, spec, shutdown).await?
        {
            return Ok(());
        }
        // The consumer's pause on the server, as the gauge task last read it.
        let (pause_tx, server_pause) = watch::channel(ServerPause::Running);
        let pause = Arc::new(pause_tx);
        let markers = match &stream.idempotency {
            Some(i) => {
                let store = nats.marker_store(&i.bucket, i.ttl).await?;
                tracing::info!(bucket = %i.bucket, "idempotency bucket ready");
                Some(Marking::new(
                    store,
                    i.bucket.clone(),
                    i.key,
                    i.scope.clone(),
                    stream.ack_wait,
                ))
            }
            None => None,
        };
        let Some((dispatch, _following)) = self.dispatcher(stream, nats, server_pause, markers)
        else {
            return Err(SourceError::Kind);
        };
        // Kept across rejoins: it knows whether this process added the member.
        let mut joined: Option<AutoJoin> = None;
        let at = Turning {
            waits: &waits,
            nats,
            dispatch: &dispatch,
            pause: &pause,
            shutdown,
        };
        loop {
            let turn = match &stream.binding {
                Binding::Group(member) => self.group_turn(&at, member, &mut joined).await?,
                Binding::Durable(request) => self.durable_turn(&at, stream, request).await?,
            };
            let Some(ended) = turn else {
                return Ok(());
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

    fn waits(&self, stream: &StreamSettings) -> Waits {
        Waits {
            readiness: self.readiness.clone(),
            retry: stream.retry,
            deadline: self.deadline.clone(),
        }
    }

    fn gauges(&self) -> Gauges {
        Gauges {
            metrics: self.metrics.clone(),
            readiness: self.readiness.clone(),
            pinned: self.settings.pinned(),
            work_queue: matches!(
                self.settings.stream().map(|s| &s.binding),
                Some(Binding::Group(m)) if m.flavour == Flavour::Elastic
            ),
        }
    }

    /// The dispatcher, kept across binds and joins, and the task that hands it the
    /// source's reloads; `None` when the live settings are not a stream's.
    fn dispatcher(
        &self,
        set: &StreamSettings,
        nats: &Nats,
        server_pause: watch::Receiver<ServerPause>,
        markers: Option<Marking<MarkerStore>>,
    ) -> Option<(Dispatcher, Following)> {
        let (live, following) = follow(&self.live, SourceLive::stream)?;
        let dispatch = Arc::new(Dispatch {
            live,
            metrics: self.metrics.clone(),
            readiness: self.readiness.clone(),
            max_buffered: set.limits.max_buffered as usize,
            deadline: self.deadline.clone(),
            pinned_mode: self.settings.pinned(),
            ordering: set.ordering,
            progress_every: set.progress_every,
            publisher: nats.publisher(),
            markers,
            dead_letters: set.dead_letters.as_ref().map(|d| d.subject.clone()),
            server_pause,
            letters_waiting_max: set.letters_waiting_max(),
            tracer: self.tracer.clone(),
            budget: self.budget.clone(),
        });
        Some((dispatch, following))
    }

    /// A group member: (auto-)joins, runs the dispatcher over the member's pinned
    /// consumer, and leaves the membership once drained. `Ok(None)` when shutdown
    /// came first.
    async fn group_turn(
        &self,
        at: &Turning<'_>,
        member: &Member,
        joined: &mut Option<AutoJoin>,
    ) -> Result<Turn, SourceError> {
        let auto = match member.auto_join {
            Some(timeout) => {
                let kept = joined.take();
                match at
                    .waits
                    .auto_join(at.nats, member, timeout, kept, at.shutdown)
                    .await?
                {
                    Some(a) => Some(a),
                    None => return Ok(None),
                }
            }
            None => None,
        };
        joined.clone_from(&auto);
        let (beats, fence) = auto.as_ref().map(heartbeats).unzip();
        let Some(mut source) = at.waits.join_group(at.nats, member, at.shutdown).await? else {
            drop(beats);
            at.waits.leave(auto.as_ref()).await;
            return Ok(None);
        };
        if let Some(fence) = fence {
            source.fence_with(fence);
        }
        let (stream, consumer) = member.consumer();
        let ended = self.run_bound(at, source, &stream, &consumer).await;
        drop(beats);
        // Drained: out of the membership before the process ends.
        if matches!(ended, Ok(Ended::Shutdown | Ended::GroupEnded(_))) {
            at.waits.leave(auto.as_ref()).await;
        }
        Ok(Some(ended))
    }

    /// A durable: binds the topology and runs the dispatcher over its puller.
    /// `Ok(None)` when shutdown came first.
    async fn durable_turn(
        &self,
        at: &Turning<'_>,
        stream: &StreamSettings,
        request: &TopologyRequest,
    ) -> Result<Turn, SourceError> {
        if !at
            .waits
            .bind_topology(at.nats, request, at.shutdown)
            .await?
        {
            return Ok(None);
        }
        let puller = at.nats.puller(puller_config(stream, request)).await?;
        let ended = self
            .run_bound(at, puller, &request.stream, &request.consumer.name)
            .await;
        Ok(Some(ended))
    }

    /// Runs the dispatcher over a bound consumer, the task that reads its info
    /// beside it (stopped, its gauges withdrawn, when the run ends).
    async fn run_bound<S: Source>(
        &self,
        at: &Turning<'_>,
        source: S,
        stream: &str,
        consumer: &str,
    ) -> Result<Ended, DispatchError> {
        let gauges = self
            .gauges()
            .consumer_gauges(at.nats, stream, consumer, at.pause);
        let ended = at.dispatch.run(source, at.shutdown.clone()).await;
        drop(gauges);
        ended
    }
}

/// A durable's puller.
fn puller_config(set: &StreamSettings, request: &TopologyRequest) -> PullerConfig {
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
