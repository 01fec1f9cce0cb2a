//! How a source waits for what it needs before it consumes — NATS, its dead-letter
//! stream, its topology, its group and membership — retrying with the topology
//! backoff, not ready meanwhile (saying why), and ending at once on shutdown.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::group::autojoin::AutoJoin;
use crate::group::member::{GroupSource, JoinError};
use crate::group::spec::Member;
use crate::nats::{Nats, NatsError};
use crate::ops::readiness::{SourceReadiness, State};
use crate::ops::telemetry::chain;
use crate::policy::backoff;
use crate::seam::time::{Deadline, bounded};
use crate::source::error::SourceError;
use crate::source::settings::{DeadLetters, Retry};
use crate::topology::{OnMissing, TopologyRequest};

/// What the waits of one source need.
#[derive(Debug, Clone)]
pub(super) struct Waits {
    /// Where it says why it is not ready.
    pub(super) readiness: SourceReadiness,
    /// Whether and how long to wait for what is missing.
    pub(super) retry: Retry,
    /// The shutdown's deadline (leaving the membership is bounded by it).
    pub(super) deadline: Deadline,
}

impl Waits {
    /// Joins the consumer group, retrying while the group, its bucket or its stream is
    /// missing (when allowed), its config cannot be followed, or NATS is unavailable.
    /// `Ok(None)` when shutdown came first.
    pub(super) async fn join_group(
        &self,
        nats: &Nats,
        member: &Member,
        shutdown: &CancellationToken,
    ) -> Result<Option<GroupSource>, SourceError> {
        let on_missing = self.retry.on_missing;
        self.until_ready(shutdown, "consumer group", || async {
            match GroupSource::join(nats, member.clone()).await {
                Ok(source) => Ok(source),
                Err(e) if e.is_fatal() => Err(Try::Fail(SourceError::Group(e))),
                Err(e @ JoinError::NotFound(_)) if on_missing == OnMissing::Fail => {
                    Err(Try::Fail(SourceError::Group(e)))
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
    pub(super) async fn auto_join(
        &self,
        nats: &Nats,
        member: &Member,
        timeout: Duration,
        kept: Option<AutoJoin>,
        shutdown: &CancellationToken,
    ) -> Result<Option<AutoJoin>, SourceError> {
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
    pub(super) async fn leave(&self, auto: Option<&AutoJoin>) {
        if let Some(a) = auto {
            let deadline = self.deadline.or_from_now();
            bounded(deadline, "leave the membership", a.leave()).await;
        }
    }

    /// Checks and binds the topology, retrying while it is missing (when allowed) or
    /// NATS is unavailable. `Ok(false)` when shutdown came first.
    pub(super) async fn bind_topology(
        &self,
        nats: &Nats,
        request: &TopologyRequest,
        shutdown: &CancellationToken,
    ) -> Result<bool, SourceError> {
        let on_missing = self.retry.on_missing;
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
    pub(super) async fn ensure_dlq_stream(
        &self,
        nats: &Nats,
        dlq: &DeadLetters,
        spec: &crate::topology::StreamSpec,
        shutdown: &CancellationToken,
    ) -> Result<bool, SourceError> {
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
    pub(super) async fn until_ready<T, F, Fut>(
        &self,
        shutdown: &CancellationToken,
        what: &str,
        mut step: F,
    ) -> Result<Option<T>, SourceError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Try>>,
    {
        let retry = self.retry;
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
}

/// One try of a step the daemon waits for.
pub(super) enum Try {
    /// Not yet, for this reason: try again after the backoff.
    Again(String),
    /// Never: the daemon stops.
    Fail(SourceError),
}

/// Waits until NATS is connected; `false` when shutdown came first.
///
/// # Errors
/// [`NatsError::Closed`] when the client gave up reconnecting.
pub(super) async fn wait_connected(
    nats: &Nats,
    shutdown: &CancellationToken,
) -> Result<bool, NatsError> {
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
