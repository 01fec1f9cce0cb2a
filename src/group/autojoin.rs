//! Self-managed membership of an elastic group (`source.auto_join`): the member adds
//! itself to the stored membership when it starts, beats a liveness record while it
//! runs (a key with a TTL the server enforces), prunes auto-joined members whose
//! record expired, joins again when it finds itself pruned, and leaves on a clean
//! stop. Every membership change is a compare-and-set of the stored config
//! (`GroupAdmin`), retried on a concurrent write, in orbit.go's format: its members
//! and tools see ordinary membership changes.
//!
//! Who may be pruned: a member that jetrelay's auto-join added, as recorded beside the
//! group's config when it added it ([`crate::group::records::auto_key`]); the
//! `auto.<member>` keys of the liveness bucket only say whom to look at, so a forged
//! one prunes nobody, and members added by hand are never pruned. What a clean stop
//! removes: only what this process added (a name that was in the membership when it
//! joined stays), and nothing while another instance of the member still pulls from
//! its consumer.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::group::manage::{AdminError, GroupAdmin};
use crate::group::spec::Member;
use crate::nats::{LivenessStore, Nats, NatsError};
use crate::ops::telemetry::chain;

/// Why the membership could not be changed now (retried).
#[derive(Debug, thiserror::Error)]
pub enum MembershipError {
    /// The liveness bucket failed.
    #[error(transparent)]
    Nats(#[from] NatsError),
    /// The stored config could not be changed.
    #[error(transparent)]
    Admin(#[from] AdminError),
}

/// One auto-joining member.
#[derive(Debug, Clone)]
pub struct AutoJoin {
    admin: GroupAdmin,
    nats: Nats,
    live: LivenessStore,
    stream: String,
    group: String,
    member: String,
    timeout: Duration,
    /// This process added the member to the membership (at its start, or again after
    /// it was pruned): only then may its clean stop take it out.
    added: Arc<AtomicBool>,
}

/// The liveness bucket's replicas: the origin stream's, at most three.
async fn replicas(nats: &Nats, stream: &str) -> usize {
    nats.stream_replicas(stream).await.unwrap_or(1).clamp(1, 3)
}

impl AutoJoin {
    /// Opens the liveness bucket for `m` (an elastic member with `auto_join`).
    ///
    /// # Errors
    /// [`MembershipError::Nats`].
    pub async fn open(
        nats: &Nats,
        m: &Member,
        timeout: Duration,
    ) -> Result<AutoJoin, MembershipError> {
        let live = nats.liveness_store(replicas(nats, &m.stream).await).await?;
        Ok(AutoJoin {
            admin: GroupAdmin::new(nats.clone()),
            nats: nats.clone(),
            live,
            stream: m.stream.clone(),
            group: m.group.clone(),
            member: m.member.clone(),
            timeout,
            added: Arc::new(AtomicBool::new(false)),
        })
    }

    fn key(&self, kind: &str, member: &str) -> String {
        format!("{}.{}.{kind}.{member}", self.stream, self.group)
    }

    /// How often the liveness record is written: a third of the timeout, so two
    /// beats may be lost before the member is pruned.
    pub fn every(&self) -> Duration {
        self.timeout / 3
    }

    /// Whether a member whose liveness record was last written `silent_for` ago must
    /// stop taking work ([`fenced`]).
    pub fn is_fenced(&self, silent_for: Duration) -> bool {
        fenced(silent_for, self.timeout)
    }

    /// Beats, marks this member as auto-joined, and adds it to the membership unless
    /// it is there. Returns whether the membership was written. When this process adds
    /// it, it records so beside the group's config (what makes the member prunable);
    /// a name found in the membership is not this process's to remove.
    ///
    /// # Errors
    /// [`MembershipError`] (retried by the caller).
    pub async fn join(&self) -> Result<bool, MembershipError> {
        self.live
            .beat(&self.key("live", &self.member), self.timeout)
            .await?;
        self.live.mark(&self.key("auto", &self.member)).await?;
        let added = self
            .admin
            .add_member_if_absent(&self.stream, &self.group, &self.member)
            .await?;
        if added {
            self.added.store(true, Ordering::Relaxed);
            tracing::info!(member = %self.member, group = %self.group, "joined the group's membership (source.auto_join)");
        }
        if self.added.load(Ordering::Relaxed) {
            // Again on every beat: a write that failed once is made up for.
            self.admin
                .mark_auto_joined(&self.stream, &self.group, &self.member)
                .await?;
        }
        Ok(added)
    }

    /// One beat: the liveness record, this member back in the membership if it was
    /// pruned (it was cut off, and is back), and silent auto-joined members pruned.
    ///
    /// # Errors
    /// [`MembershipError`] (logged by the caller, tried again next beat).
    pub async fn beat(&self) -> Result<(), MembershipError> {
        if self.join().await? {
            tracing::warn!(member = %self.member, "this member was not in the membership (pruned while silent?): it joined again");
        }
        self.prune().await
    }

    /// Removes from the membership each auto-joined member whose liveness record
    /// expired (silent for the timeout), then its marker. A compare-and-set that finds
    /// it already gone writes nothing: each is removed once.
    async fn prune(&self) -> Result<(), MembershipError> {
        let members = self
            .admin
            .elastic_members(&self.stream, &self.group)
            .await?;
        let prefix = self.key("auto", "");
        for key in self.live.keys(&prefix).await? {
            let Some(member) = key.strip_prefix(&prefix) else {
                continue;
            };
            if member == self.member || self.live.exists(&self.key("live", member)).await? {
                continue;
            }
            // Only a member jetrelay's auto-join added (recorded beside the group's
            // config); a marker in this bucket alone proves nothing.
            let proven = members.iter().any(|m| m == member)
                && self
                    .admin
                    .is_auto_joined(&self.stream, &self.group, member)
                    .await?;
            if proven {
                let removed = self
                    .admin
                    .drop_member_if_present(&self.stream, &self.group, member)
                    .await?;
                if removed {
                    tracing::warn!(
                        pruned = member,
                        silent_for_ms = self.timeout.as_millis(),
                        "an auto-joined member was silent past source.member_timeout_ms: removed from the membership, its partitions move to the others"
                    );
                    // Its consumer still covers its partitions (a work-queue stream
                    // refuses an overlapping one) until the server reaps it, which a
                    // lost node can put off for long: deleted, as a clean leave does.
                    // What it held unacknowledged is redelivered to the new owners.
                    self.delete_consumer(member).await;
                }
                self.admin
                    .unmark_auto_joined(&self.stream, &self.group, member)
                    .await?;
            }
            self.live.delete(&key).await?;
        }
        Ok(())
    }

    /// A clean stop, after the drain (this instance's pulls are gone): out of the
    /// membership (its partitions move to the others), its consumer deleted (so that
    /// the new owners' consumers do not overlap it), its records gone. Only when this
    /// process added the member, and no other instance of it still pulls from its
    /// consumer (the server counts the waiting pulls that still have a listener, as
    /// the reference's "active member" does): otherwise all of it is left to the
    /// instance that goes on, or to the others' pruning.
    pub async fn leave(&self) {
        if !self.added.load(Ordering::Relaxed) {
            tracing::info!(member = %self.member, "this process did not add the member to the membership (it was there when it joined): it stays, with its consumer");
            return;
        }
        let stream = crate::group::elastic_stream(&self.stream, &self.group);
        match self
            .nats
            .consumer_state(&stream, &self.member, crate::group::PRIORITY_GROUP)
            .await
        {
            Ok(Some(s)) if s.num_waiting > 0 => {
                tracing::info!(member = %self.member, waiting_pulls = s.num_waiting, "another instance of this member is pulling: the member stays in the membership, with its consumer");
                return;
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %chain(&e), "cannot tell whether another instance of this member is pulling: the member stays (the others prune it after source.member_timeout_ms)");
                return;
            }
        }
        match self
            .admin
            .drop_member_if_present(&self.stream, &self.group, &self.member)
            .await
        {
            Ok(_) => {
                tracing::info!(member = %self.member, "left the group's membership: its partitions move to the others")
            }
            Err(e) => {
                tracing::warn!(error = %chain(&e), "cannot leave the membership; the others prune this member after source.member_timeout_ms")
            }
        }
        self.delete_consumer(&self.member).await;
        if let Err(e) = self
            .admin
            .unmark_auto_joined(&self.stream, &self.group, &self.member)
            .await
        {
            tracing::warn!(error = %chain(&e), "cannot delete the auto-join record");
        }
        for kind in ["auto", "live"] {
            if let Err(e) = self.live.delete(&self.key(kind, &self.member)).await {
                tracing::warn!(error = %chain(&e), "cannot delete a liveness record; it expires");
            }
        }
    }

    /// Deletes a member's consumer (not found is fine), so that the new owners'
    /// consumers do not overlap it.
    async fn delete_consumer(&self, member: &str) {
        let stream = crate::group::elastic_stream(&self.stream, &self.group);
        if let Err(e) = self.nats.delete_consumer(&stream, member).await {
            tracing::warn!(member, error = %chain(&e), "cannot delete the member consumer; the server removes it once inactive");
        }
    }
}

/// Whether a member silent for `silent_for` (no liveness write taken) must stop taking
/// work: once its next beat, a third of `timeout` away, could come after the others
/// prune it (at `timeout`), its partitions may already be another's. Stopping two
/// beats in keeps one member per partition even before the prune is seen.
pub fn fenced(silent_for: Duration, timeout: Duration) -> bool {
    silent_for.saturating_add(timeout / 3) >= timeout
}

#[cfg(test)]
mod fence_tests {
    use super::*;

    #[test]
    fn a_member_stops_two_beats_into_its_silence() {
        let t = Duration::from_secs(3);
        let ms = Duration::from_millis;
        for (silent, want) in [
            (ms(0), false),
            (ms(1000), false),
            (ms(1999), false),
            (ms(2000), true),
            (ms(3000), true),
            (Duration::MAX, true),
        ] {
            assert_eq!(fenced(silent, t), want, "{silent:?}");
        }
    }
}
