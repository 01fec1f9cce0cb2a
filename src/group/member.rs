//! One member of a partitioned consumer group (static or elastic), behind the
//! [`Source`] seam: reads and watches the group config, computes this member's
//! partitions, creates the member consumer and pulls from it with the pinned pull
//! engine, and follows the group's life.
//!
//! A stored config this member cannot follow (one that does not parse or breaks a
//! limit, any change of a static group's layout, a change of an elastic group's
//! shape) suspends it: pulling stops and the source is unavailable, saying why, until
//! a config it can follow is back; the consumer is kept (the reference deletes a
//! static member's consumer on any change, and a restart then replays the whole
//! stream). A deleted or purged group ends the member cleanly; a static member then
//! deletes its consumer, as the reference does. A join that fails for a reason
//! retrying may fix (JetStream unavailable during a leader election) is tried again
//! on a fixed-rate tick (`ack_wait` + 0.5 s), which also reads the config again in
//! case the watch missed a change; the source is unavailable meanwhile.
//!
//! Elastic (§8.3–8.4), fixing the reference's B4, B15, B16 and B24: only a change of
//! this member's own filters moves anything; a consumer that vanished is rejoined
//! (noticed by the pull engine, or by the tick's check) once what it delivered is
//! settled or released; before the consumer is deleted and recreated, pulling stops
//! and the dispatcher settles or releases everything held (`Quiesce`); only the
//! pinned instance deletes, the others back off 400–500 ms without blocking. An elastic
//! member's acks are always confirmed: an ack the server had not processed when the
//! consumer is deleted would be lost with it.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{Instant, Interval};

use crate::capacity::Held;
use crate::capacity::PullTiming;
use crate::group::model::{Flavour, GroupConfig};
use crate::group::spec::{self, Member};
use crate::group::{self as pcgc, assign, records};
use crate::nats::{
    GroupConsumer, GroupStore, KvEvent, KvWatch, Nats, NatsError, PullEvent, Puller, PullerConfig,
    Settler, TopologyError,
};
use crate::ops::telemetry::chain;
use crate::seam::time::sleep_until;
use crate::seam::{ServerPause, Source};
use crate::topology::Table;

/// Why a member cannot start (yet).
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// The group, its bucket or its stream does not exist (yet).
    #[error("{0}")]
    NotFound(String),
    /// The group store or the pull inbox is not available.
    #[error("JetStream is not available")]
    Unavailable(#[source] NatsError),
    /// The stored group config does not parse or breaks a rule: waits for a valid one.
    #[error("{0}")]
    Invalid(String),
    /// The member cannot join this group as configured (not in a static group's
    /// membership, a member consumer with another configuration).
    #[error("{0}")]
    Refused(String),
    /// Reading or creating the topology failed.
    #[error(transparent)]
    Topology(#[from] TopologyError),
}

impl JoinError {
    /// Whether retrying cannot fix it.
    pub fn is_fatal(&self) -> bool {
        match self {
            JoinError::Refused(_) => true,
            JoinError::Topology(e) => !e.is_unavailable(),
            JoinError::NotFound(_) | JoinError::Unavailable(_) | JoinError::Invalid(_) => false,
        }
    }
}

/// A running member.
#[derive(Debug)]
pub struct GroupSource {
    nats: Nats,
    s: Member,
    consumer_stream: String,
    watch: KvWatch,
    /// The config's bucket and key, read again on every tick: a watch that went quiet
    /// (its push consumer lost on a cluster under load) must not leave the member on
    /// an old membership.
    store: GroupStore,
    key: String,
    config: GroupConfig,
    revision: u64,
    puller: Option<Puller>,
    /// The filters of the consumer this instance pulls from (empty = none).
    filters: Vec<String>,
    pending: VecDeque<PullEvent>,
    tick: Interval,
    /// Elastic: a join waits until then (the non-pinned back-off).
    join_at: Option<Instant>,
    quiescing: bool,
    stopped: bool,
    paused: bool,
    ended: bool,
    /// Set while the stored config cannot be followed (it does not parse, breaks a
    /// rule, or changed in a way this member cannot follow): why. Pulling stops and
    /// the member is not ready until a config it can follow appears.
    suspended: Option<String>,
    /// Elastic: joins in a row that found the partitions still held by another
    /// member's consumer (the back-off before the next try).
    overlaps: u32,
    /// Elastic: the pause on the server of the member consumer this instance deleted
    /// to replace it (`jetrelay pause`), put on its replacement once created.
    carried_pause: Option<time::OffsetDateTime>,
    /// An auto-joined member's fence (`source/gauges.rs`'s heartbeats): true while its
    /// liveness record has gone unwritten so long that the others may have pruned it.
    fence: Option<watch::Receiver<bool>>,
    /// Whether the fence is up: nothing is pulled or joined, what is held is released.
    fenced: bool,
}

impl GroupSource {
    /// Reads the group, checks it, and joins when this member has partitions.
    ///
    /// # Errors
    /// [`JoinError`]: `NotFound`/`Unavailable` may be retried.
    pub async fn join(nats: &Nats, s: Member) -> Result<GroupSource, JoinError> {
        let key = pcgc::key(&s.stream, &s.group);
        let consumer_stream = match s.flavour {
            Flavour::Static => s.stream.clone(),
            Flavour::Elastic => pcgc::elastic_stream(&s.stream, &s.group),
        };
        if !nats.stream_exists(&consumer_stream).await? {
            return Err(JoinError::NotFound(format!(
                "stream {consumer_stream} does not exist"
            )));
        }
        let not_found = || {
            JoinError::NotFound(format!(
                "group {} does not exist on stream {}",
                s.group, s.stream
            ))
        };
        let store: GroupStore = nats
            .group_store(s.flavour.bucket())
            .await
            .map_err(JoinError::Unavailable)?
            .ok_or_else(not_found)?;
        let (value, revision) = store
            .get(&key)
            .await
            .map_err(JoinError::Unavailable)?
            .ok_or_else(not_found)?;
        let config = read_config(s.flavour, value)
            .await
            .map_err(JoinError::Invalid)?;
        let in_membership =
            assign::in_membership(&config.members, &config.member_mappings, &s.member);
        if s.flavour == Flavour::Static && !in_membership {
            return Err(JoinError::Refused(format!(
                "member {} is not in the membership of static group {}",
                s.member, s.group
            )));
        }
        let watch = store.watch(&key).await.map_err(JoinError::Unavailable)?;
        let wait = spec::ack_wait(s.template.ack_wait_ms);
        let mut tick = tokio::time::interval_at(
            Instant::now() + wait + Duration::from_millis(500),
            wait + Duration::from_millis(500),
        );
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut source = GroupSource {
            nats: nats.clone(),
            consumer_stream,
            watch,
            store,
            key,
            config,
            revision,
            puller: None,
            filters: Vec::new(),
            pending: VecDeque::new(),
            tick,
            join_at: None,
            overlaps: 0,
            carried_pause: None,
            fence: None,
            fenced: false,
            quiescing: false,
            stopped: false,
            paused: false,
            ended: false,
            suspended: None,
            s,
        };
        source.announce();
        source.try_join().await?;
        Ok(source)
    }

    fn partitions(&self) -> Vec<u32> {
        assign::partitions(
            self.config.max_members,
            &self.config.members,
            &self.config.member_mappings,
            &self.s.member,
        )
    }

    fn wanted_filters(&self) -> Vec<String> {
        assign::filters(
            &self.partitions(),
            &self.config.filters,
            self.config.members.is_empty(),
        )
    }

    /// Tells the dispatcher where this member stands.
    fn announce(&mut self) {
        if assign::in_membership(
            &self.config.members,
            &self.config.member_mappings,
            &self.s.member,
        ) {
            self.pending
                .push_back(PullEvent::Assignment(self.partitions()));
        } else {
            self.pending.push_back(PullEvent::Waiting(format!(
                "member {} is not in the membership of group {}",
                self.s.member, self.s.group
            )));
        }
        if self.fenced {
            // What the membership says is not what this member does while fenced.
            self.pending
                .push_back(PullEvent::Unavailable(self.fence_reason()));
        }
    }

    fn consumer_spec(&self, filters: Vec<String>) -> crate::topology::ConsumerSpec {
        match self.s.flavour {
            Flavour::Static => {
                spec::static_consumer(&self.s.group, &self.s.member, filters, &self.s.template)
            }
            Flavour::Elastic => spec::elastic_consumer(&self.s.member, filters, &self.s.template),
        }
    }

    /// Creates the member consumer (if this member has partitions) and starts pulling.
    async fn try_join(&mut self) -> Result<(), JoinError> {
        let filters = self.wanted_filters();
        if filters.is_empty() || self.puller.is_some() {
            return Ok(());
        }
        let spec = self.consumer_spec(filters.clone());
        let mut outcome = self
            .nats
            .create_group_consumer(&self.consumer_stream, &spec)
            .await?;
        if let (GroupConsumer::Conflict(_), Flavour::Elastic) = (&outcome, self.s.flavour) {
            // Old filters or another template: the reference deletes and creates once.
            self.carry_pause(&spec.name).await;
            self.nats
                .delete_consumer(&self.consumer_stream, &spec.name)
                .await?;
            outcome = self
                .nats
                .create_group_consumer(&self.consumer_stream, &spec)
                .await?;
        }
        match outcome {
            GroupConsumer::Ready => self.overlaps = 0,
            GroupConsumer::Overlap => {
                // The member giving them away replaces its consumer once it has
                // settled what it holds: try again soon (100 ms, doubling to 2 s), not
                // only on the next tick (an ack wait away), so that the partitions
                // that move pause as little as possible.
                // The next tick comes that soon (then at its own pace again).
                self.overlaps = self.overlaps.saturating_add(1);
                let delay = Duration::from_millis(100)
                    .saturating_mul(1 << self.overlaps.min(5).saturating_sub(1))
                    .min(Duration::from_secs(2));
                self.tick.reset_at(Instant::now() + delay);
                tracing::debug!(member = %self.s.member, retry_ms = delay.as_millis(), "partitions still held by another member's consumer; retrying");
                return Ok(());
            }
            GroupConsumer::Conflict(rows) => {
                let hint = if rows.iter().any(|r| r.field == "priority") {
                    " (a consumer from before the PCG priority group rename? delete it)"
                } else {
                    ""
                };
                return Err(JoinError::Refused(format!(
                    "member consumer {} exists with a different configuration{hint}:\n{}",
                    spec.name,
                    Table(&rows)
                )));
            }
        }
        self.restore_pause(&spec.name).await?;
        let wait = spec::ack_wait(self.s.template.ack_wait_ms);
        let mut puller = self
            .nats
            .puller(PullerConfig {
                stream: self.consumer_stream.clone(),
                consumer: spec.name.clone(),
                group: Some(pcgc::PRIORITY_GROUP.into()),
                limits: self.s.limits,
                timing: PullTiming::for_ack_wait(wait),
                confirmed_acks: self.s.confirmed_acks,
                partitioned: true,
                origin_stream: (self.s.flavour == Flavour::Elastic).then(|| self.s.stream.clone()),
            })
            .await
            .map_err(JoinError::Unavailable)?;
        puller.set_paused(self.paused || self.suspended.is_some());
        if self.stopped {
            puller.stop();
        }
        tracing::info!(member = %self.s.member, consumer = %spec.name, filters = %crate::printable::list(&filters, 8), "joined the group");
        self.filters = filters;
        self.puller = Some(puller);
        // Clears a previous `Unavailable` in the dispatcher's readiness.
        self.pending
            .push_back(PullEvent::Assignment(self.partitions()));
        Ok(())
    }

    /// Before the member consumer `name` is deleted to be replaced: remembers its
    /// pause on the server, for [`GroupSource::restore_pause`].
    async fn carry_pause(&mut self, name: &str) {
        match self.nats.consumer_pause(&self.consumer_stream, name).await {
            Ok(ServerPause::Until(until)) => self.carried_pause = Some(until),
            Ok(ServerPause::Running) | Err(TopologyError::ConsumerMissing(_)) => {}
            Err(e) => tracing::warn!(
                error = %chain(&e),
                consumer = name,
                "cannot read whether the member consumer is paused before replacing it; a pause on it would not carry over"
            ),
        }
    }

    /// Before the first pull from member consumer `name`: the pause its predecessor
    /// had (a replacement, [`GroupSource::carry_pause`]) and the group-wide pause
    /// (`jetrelay pause --all-members`, recorded beside the group's config), whichever
    /// ends later, so that a member that joins or restarts while its group is paused
    /// receives nothing. Fails the join (retried) when the group-wide pause cannot be
    /// read or put on the consumer.
    async fn restore_pause(&mut self, name: &str) -> Result<(), JoinError> {
        let group = group_pause(&self.store, &self.s.stream, &self.s.group).await?;
        let carried = self.carried_pause;
        let Some(until) = carried.max(group) else {
            return Ok(());
        };
        match self
            .nats
            .pause_consumer(&self.consumer_stream, name, until)
            .await
        {
            Ok(_) if group >= carried => tracing::info!(
                consumer = name,
                "the group is paused (jetrelay pause --all-members): the member consumer is paused before its first pull"
            ),
            Ok(_) => tracing::info!(
                consumer = name,
                "the member consumer's pause carried over to its replacement"
            ),
            Err(e) if group.is_some() => return Err(e.into()),
            Err(e) => tracing::error!(
                error = %chain(&e),
                consumer = name,
                "cannot pause the member consumer's replacement as its predecessor was: it is not paused"
            ),
        }
        self.carried_pause = None;
        // `jetrelay resume --all-members` removes the record, then resumes the members
        // it lists: one that read the record before and paused after would stay paused.
        if group.is_some()
            && group_pause(&self.store, &self.s.stream, &self.s.group)
                .await?
                .is_none()
        {
            let again = match carried {
                Some(t) => {
                    self.nats
                        .pause_consumer(&self.consumer_stream, name, t)
                        .await
                }
                None => self.nats.resume_consumer(&self.consumer_stream, name).await,
            };
            again?;
        }
        Ok(())
    }

    /// Follows the fence of this member's heartbeats (an auto-joined member).
    pub fn fence_with(&mut self, fence: watch::Receiver<bool>) {
        self.fence = Some(fence);
    }

    /// The fence went up (the liveness record unwritten so long that the others may
    /// prune this member at any moment, and give its partitions to another): pulling
    /// stops, what is held but not started is released, nothing joins, and the member
    /// is not ready. Down again (a beat was written, which also puts the member back
    /// in the membership): it follows the membership as before.
    async fn on_fence(&mut self, up: bool) {
        if up == self.fenced {
            return;
        }
        self.fenced = up;
        if up {
            tracing::warn!(member = %self.s.member, group = %self.s.group, "the liveness record has not been written for two beats: this member stops taking work before the others prune it");
            self.pending
                .push_back(PullEvent::Unavailable(self.fence_reason()));
            if let Some(p) = self.puller.as_mut() {
                p.stop();
                if !self.quiescing {
                    self.quiescing = true;
                    self.pending.push_back(PullEvent::Quiesce);
                }
            }
        } else {
            tracing::info!(member = %self.s.member, "the liveness record is written again: this member takes work again");
            self.announce();
            if self.puller.is_none() && !self.quiescing {
                self.join_or_log().await;
            }
        }
    }

    fn fence_reason(&self) -> String {
        format!(
            "member {}'s liveness record cannot be written: not taking work (the others prune it after source.member_timeout_ms)",
            self.s.member
        )
    }

    /// A join that failed for a reason retrying may fix waits for the next tick; the
    /// member is not ready meanwhile. None while the fence is up.
    async fn join_or_log(&mut self) {
        if self.fenced {
            return;
        }
        match self.try_join().await {
            Ok(()) => {}
            Err(e) if e.is_fatal() => self.pending.push_back(PullEvent::Fatal(e.into())),
            Err(e) => {
                // Logged once per change, as the readiness reason; not per attempt.
                tracing::debug!(error = %e, "cannot join the group now; retrying on the next tick");
                self.pending.push_back(PullEvent::Unavailable(format!(
                    "the member consumer cannot be created: {e}"
                )));
            }
        }
    }

    async fn on_kv(&mut self, ev: Option<KvEvent>) {
        let ev = match ev {
            None => {
                self.pending
                    .push_back(PullEvent::Fatal("the group config watcher closed".into()));
                return;
            }
            Some(ev) => ev,
        };
        let (value, revision) = match ev {
            KvEvent::Deleted | KvEvent::Purged => {
                self.finish(PullEvent::Ended(format!(
                    "group {} was deleted",
                    self.s.group
                )))
                .await;
                return;
            }
            KvEvent::Put { value, revision } => (value, revision),
        };
        if revision <= self.revision {
            return; // the current value, seen at join
        }
        // The revision is taken only once the config is read: this runs inside the
        // dispatcher's select (`next` must be cancel-safe), and a poll dropped while a
        // large config is read would otherwise lose the change for good. Dropped
        // here, the next tick reads the config again and follows it.
        let new = match read_config(self.s.flavour, value).await {
            Ok(c) => c,
            Err(e) => {
                self.revision = revision;
                self.suspend(e);
                return;
            }
        };
        self.revision = revision;
        match self.s.flavour {
            Flavour::Static => {
                let same = new.same_shape(&self.config)
                    && new.members == self.config.members
                    && new.member_mappings == self.config.member_mappings;
                if same {
                    self.resume();
                } else {
                    // The reference deletes the member consumer here, and a restart
                    // then replays the whole stream to the app. The consumer is kept.
                    self.suspend(format!(
                        "the configuration of static group {} changed (revision {revision}); a static group's layout is fixed: this member keeps its consumer and stops pulling until the original configuration is back (to change the layout: stop the members, `jetrelay group static rm`, create the group again, start the members)",
                        self.s.group
                    ));
                }
            }
            Flavour::Elastic => {
                if !new.same_shape(&self.config) {
                    self.suspend(format!(
                        "bad change in the configuration of elastic group {} (revision {revision}): only the membership may change; not pulling until a configuration of the same shape is back",
                        self.s.group
                    ));
                    return;
                }
                self.resume();
                self.config = new;
                let wanted = self.wanted_filters();
                self.announce();
                if self.puller.is_some() && wanted == self.filters {
                    return; // this member's partitions did not move (B4)
                }
                if self.puller.is_some() {
                    // Stop pulling and let the dispatcher settle what it holds (B16).
                    if let Some(p) = self.puller.as_mut() {
                        p.stop();
                    }
                    self.quiescing = true;
                    self.pending.push_back(PullEvent::Quiesce);
                } else if !self.quiescing {
                    // (While quiescing, the join comes after `quiesced`.)
                    self.join_or_log().await;
                }
            }
        }
    }

    /// The stored config read again (the tick): a revision the watch did not bring is
    /// followed as if it had.
    async fn read_config_again(&mut self) {
        match self.store.get(&self.key).await {
            Ok(Some((value, revision))) if revision > self.revision => {
                tracing::info!(
                    revision,
                    "the group config changed without the watch saying so: following it"
                );
                self.on_kv(Some(KvEvent::Put { value, revision })).await;
            }
            // Deleted: the watch says so (the group ends); unreadable: next tick.
            Ok(_) | Err(_) => {}
        }
    }

    /// Stops pulling and reports why (not ready), until [`GroupSource::resume`].
    fn suspend(&mut self, why: String) {
        if self.suspended.as_deref() != Some(why.as_str()) {
            tracing::warn!(group = %self.s.group, reason = %why, "the group config cannot be followed: not pulling");
        }
        self.suspended = Some(why.clone());
        self.apply_pause();
        self.pending.push_back(PullEvent::Unavailable(why));
    }

    /// A config this member can follow is back: pulling resumes.
    fn resume(&mut self) {
        if self.suspended.take().is_some() {
            tracing::info!(group = %self.s.group, "the group config can be followed again");
            self.apply_pause();
            self.announce();
        }
    }

    fn apply_pause(&mut self) {
        let paused = self.paused || self.suspended.is_some();
        if let Some(p) = self.puller.as_mut() {
            p.set_paused(paused);
        }
    }

    /// Deletes this member's consumer `name`; a failure is logged, not returned.
    async fn delete_or_warn(&mut self, name: &str) {
        if let Err(e) = self.nats.delete_consumer(&self.consumer_stream, name).await {
            tracing::warn!(error = %e, "cannot delete the member consumer");
        }
    }

    /// Ends the member: stops pulling and, for static groups, deletes its consumer
    /// (as the reference does on deletion and on any change).
    async fn finish(&mut self, ev: PullEvent) {
        self.ended = true;
        if let Some(p) = self.puller.as_mut() {
            p.stop();
        }
        if self.s.flavour == Flavour::Static && !self.filters.is_empty() {
            let name = pcgc::static_consumer(&self.s.group, &self.s.member);
            self.delete_or_warn(&name).await;
        }
        self.pending.push_back(ev);
    }

    /// NAKs messages that were delivered but never taken, and reports the count to
    /// the dispatcher (which keeps the metrics).
    async fn release(&mut self, settlers: Vec<Settler>) {
        if settlers.is_empty() {
            return;
        }
        let (mut naked, mut failed) = (0, 0);
        for s in settlers {
            match s.nak(Duration::ZERO).await {
                Ok(()) => naked += 1,
                Err(e) => {
                    failed += 1;
                    tracing::warn!(error = %e, "cannot release a message; it comes back after ack_wait");
                }
            }
        }
        self.pending
            .push_back(PullEvent::Released { naked, failed });
    }

    async fn drop_puller(&mut self) -> bool {
        let pinned = self.puller.as_ref().is_some_and(Puller::pinned);
        if let Some(p) = self.puller.take() {
            let left = p.close().await;
            self.release(left).await;
        }
        self.filters.clear();
        pinned
    }
}

/// The group-wide pause of `stream`'s `group`, while it holds.
async fn group_pause(
    store: &GroupStore,
    stream: &str,
    group: &str,
) -> Result<Option<time::OffsetDateTime>, JoinError> {
    let key = records::pause_key(stream, group);
    let Some((value, _)) = store.get(&key).await.map_err(JoinError::Unavailable)? else {
        return Ok(None);
    };
    match records::read_pause(&value) {
        Ok(until) if until > time::OffsetDateTime::now_utc() => Ok(Some(until)),
        Ok(_) => Ok(None),
        Err(why) => {
            tracing::warn!(key, reason = %why, "ignoring an unreadable group-wide pause record");
            Ok(None)
        }
    }
}

/// Reads and checks a stored config off the runtime's threads: it is input anyone
/// with access to the bucket may write, and can be large.
async fn read_config(flavour: Flavour, value: bytes::Bytes) -> Result<GroupConfig, String> {
    tokio::task::spawn_blocking(move || GroupConfig::read(flavour, &value))
        .await
        .map_err(|e| format!("cannot read the group config: {e}"))?
        .map_err(|problems| format!("the group config is invalid: {}", problems.join("; ")))
}

impl Source for GroupSource {
    type Settler = Settler;

    async fn next(&mut self, held: Held) -> PullEvent {
        loop {
            if let Some(ev) = self.pending.pop_front() {
                return ev;
            }
            let elastic = self.s.flavour == Flavour::Elastic && !self.ended;
            // Losing branches: the watch and the puller are cancel-safe; the tick and
            // the back-off sleep are re-polled next time.
            tokio::select! {
                ev = self.watch.next(), if !self.ended => self.on_kv(ev).await,
                // Cancel-safe: `changed` marks nothing seen until it returns.
                up = async {
                    let Some(f) = self.fence.as_mut() else {
                        return std::future::pending().await;
                    };
                    if f.changed().await.is_err() {
                        // The heartbeats ended (the turn is ending): nothing more.
                        return std::future::pending().await;
                    }
                    *f.borrow_and_update()
                }, if !self.ended => self.on_fence(up).await,
                ev = async {
                    match self.puller.as_mut() {
                        Some(p) => p.next(held).await,
                        None => std::future::pending().await,
                    }
                } => match ev {
                    PullEvent::ConsumerGone(reason) => {
                        // Deleted underneath us (another instance, an admin, the
                        // reaper): never a zombie (B15).
                        tracing::warn!(reason = %reason, member = %self.s.member, "the member consumer went away");
                        // The pin goes with the consumer: said before anything is
                        // awaited, because the dispatcher may drop this poll while the
                        // pull inbox closes (a request finishing wins its select), and
                        // a pin never unsaid stays on `/ready` beside the instance
                        // that is pinned next.
                        if self.puller.as_ref().is_some_and(Puller::pinned) {
                            self.pending.push_back(PullEvent::Pinned(false));
                        }
                        self.drop_puller().await;
                        if self.s.flavour == Flavour::Static && !self.ended {
                            self.join_or_log().await;
                        } else if !self.ended && !self.stopped && !self.quiescing {
                            // What the dispatcher holds came from the consumer that is
                            // gone (pruned, or deleted by hand): its acks go nowhere and
                            // the partitions' next owner receives it again. Nothing more
                            // of it starts; what is queued is released; the member joins
                            // again after the back-off if it still has partitions.
                            self.quiescing = true;
                            self.pending.push_back(PullEvent::Quiesce);
                        }
                    }
                    PullEvent::Pinned(false) if self.stopped => {}
                    other => return other,
                },
                // Elastic members re-check their consumer on every tick; any member
                // without one (a failed join) retries on it.
                _ = self.tick.tick(), if !self.ended && !self.quiescing && self.join_at.is_none() => {
                    self.read_config_again().await;
                    if self.puller.is_none() && !self.stopped && self.suspended.is_none() && !self.quiescing {
                        self.join_or_log().await;
                    }
                }
                () = sleep_until(self.join_at), if elastic => {
                    self.join_at = None;
                    if !self.stopped {
                        self.join_or_log().await;
                    }
                }
            }
        }
    }

    fn stop(&mut self) {
        self.stopped = true;
        if let Some(p) = self.puller.as_mut() {
            p.stop();
        }
    }

    fn set_paused(&mut self, paused: bool) {
        self.paused = paused;
        self.apply_pause();
    }

    fn wake(&mut self) {
        if let Some(p) = self.puller.as_mut() {
            p.wake();
        }
    }

    fn reconfigure(&mut self, limits: crate::capacity::Limits, confirmed_acks: bool) {
        // An elastic member's acks are always confirmed (its consumer may be deleted).
        let confirmed = confirmed_acks || self.s.flavour == Flavour::Elastic;
        self.s.limits = limits;
        self.s.confirmed_acks = confirmed;
        if let Some(p) = self.puller.as_mut() {
            p.reconfigure(limits, confirmed);
        }
    }

    async fn retire(&mut self) -> Vec<Settler> {
        match self.puller.as_mut() {
            Some(p) => Source::retire(p).await,
            None => Vec::new(),
        }
    }

    async fn freeze(&mut self, bound: std::time::Duration) -> bool {
        match self.puller.as_mut() {
            Some(p) => p.freeze(bound).await,
            None => false,
        }
    }

    async fn thaw(&mut self) {
        if let Some(p) = self.puller.as_mut() {
            p.thaw().await;
        }
    }

    async fn step_down(&mut self) -> bool {
        match self.puller.as_mut() {
            Some(p) => p.step_down().await,
            None => false,
        }
    }

    async fn quiesced(&mut self) {
        self.quiescing = false;
        let pinned = self.drop_puller().await;
        if pinned {
            // The pinned instance recreates the consumer with the new filters, from the
            // stream's first unacknowledged message.
            let name = self.s.member.clone();
            self.carry_pause(&name).await;
            self.delete_or_warn(&name).await;
            self.join_or_log().await;
        } else {
            // Let the pinned instance go first (non-blocking back-off).
            let jitter = u64::from(rand_jitter());
            self.join_at = Some(Instant::now() + Duration::from_millis(400 + jitter));
        }
    }

    async fn close(mut self) -> Vec<Settler> {
        match self.puller.take() {
            Some(p) => p.close().await,
            None => Vec::new(),
        }
    }
}

/// 0–99 ms from the clock's low bits: enough spread between instances, no RNG needed.
fn rand_jitter() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_micros() % 100)
}
