//! The consumer-group admin operations behind `jetrelay group static|elastic …`:
//! strict validation on every write, compare-and-set for every write (B5, B6), the
//! elastic stream created before its config entry so a failure leaves no orphan (B7),
//! semantic idempotency checks (B8), the static stream's partition count checked
//! (B9), member info per member (B3), and deletes that remove exactly the group's
//! consumers and tolerate what is already gone (B18, B19).

use serde::Serialize;

use crate::group::model::{Flavour, GroupConfig, MemberMapping, member_name};
use crate::group::{self as pcgc, assign, records, spec};
use crate::nats::{GroupStore, GroupStreamSpec, KvWriteError, Nats, NatsError};

/// Why an admin command failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The request breaks the rules (exit 64).
    #[error("invalid request: {}", .0.join("; "))]
    Invalid(Vec<String>),
    /// The group, stream or member does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The group exists with another configuration.
    #[error("{0}")]
    Exists(String),
    /// The stored config does not parse or breaks a rule or a limit: nothing is
    /// computed from it (it may have been written to cost memory or time).
    #[error("the stored group config is invalid: {}", .0.join("; "))]
    Stored(Vec<String>),
    /// The stored config does not parse.
    #[error("the stored group config cannot be read")]
    Unreadable(#[source] crate::group::model::ModelError),
    /// Another writer kept winning the compare-and-set.
    #[error("the group config kept changing concurrently; try again")]
    Contended,
    /// NATS failed.
    #[error(transparent)]
    Nats(#[from] NatsError),
    /// The group config could not be written.
    #[error("cannot write the group config")]
    Write(#[source] KvWriteError),
    /// The topology could not be read.
    #[error("cannot read the topology")]
    Topology(#[from] crate::nats::TopologyError),
}

/// What `info` and `member-info` report.
#[derive(Debug, Clone, Serialize)]
pub struct MemberReport {
    /// The member.
    pub member: String,
    /// Listed (or mapped) in the membership.
    pub in_membership: bool,
    /// Its partitions.
    pub partitions: Vec<u32>,
    /// Its consumer exists.
    pub consumer: bool,
    /// An instance is pulling (static: a pull is waiting; elastic: the consumer exists).
    pub active: bool,
    /// An instance holds the pin.
    pub pinned: bool,
}

/// What `info` reports.
#[derive(Debug, Clone, Serialize)]
pub struct GroupReport {
    /// The origin stream.
    pub stream: String,
    /// The group.
    pub group: String,
    /// `static` or `elastic`.
    pub flavour: &'static str,
    /// N.
    pub max_members: u32,
    /// The filters (static) or partitioning filters' subjects (elastic).
    pub filters: Vec<String>,
    /// Elastic: the wildcard indexes per filter.
    pub wildcards: Vec<Vec<u32>>,
    /// Members (balanced) in stored order.
    pub members: Vec<String>,
    /// Mappings.
    pub mappings: Vec<(String, Vec<u32>)>,
    /// Per member.
    pub member_reports: Vec<MemberReport>,
}

/// The admin handle.
#[derive(Debug, Clone)]
pub struct GroupAdmin {
    nats: Nats,
}

/// Why a group with member mappings refuses a change to its balanced members.
const MAPPED: &str = "the group uses member mappings: delete them first";

fn check_names(stream: &str, group: &str) -> Result<(), AdminError> {
    let mut p = Vec::new();
    for (what, n) in [("stream", stream), ("group", group)] {
        if let Err(e) = member_name(n) {
            p.push(format!("{what} {n:?}: {e}"));
        }
    }
    if p.is_empty() {
        Ok(())
    } else {
        Err(AdminError::Invalid(p))
    }
}

fn strict(c: &GroupConfig) -> Result<(), AdminError> {
    let p = c.strict_problems();
    if p.is_empty() {
        Ok(())
    } else {
        Err(AdminError::Invalid(p))
    }
}

/// Semantic membership equality: the same set of members, the same mappings.
fn same_membership(a: &GroupConfig, b: &GroupConfig) -> bool {
    let set = |m: &[String]| {
        let mut v = m.to_vec();
        v.sort();
        v.dedup();
        v
    };
    set(&a.members) == set(&b.members) && a.member_mappings == b.member_mappings
}

impl GroupAdmin {
    /// A handle on a connection.
    pub fn new(nats: Nats) -> GroupAdmin {
        GroupAdmin { nats }
    }

    async fn store(&self, f: Flavour) -> Result<Option<GroupStore>, AdminError> {
        Ok(self.nats.group_store(f.bucket()).await?)
    }

    async fn read(
        &self,
        f: Flavour,
        stream: &str,
        group: &str,
    ) -> Result<(GroupStore, GroupConfig, u64), AdminError> {
        let missing =
            || AdminError::NotFound(format!("group {group} does not exist on stream {stream}"));
        let store = self.store(f).await?.ok_or_else(missing)?;
        let (value, rev) = store
            .get(&pcgc::key(stream, group))
            .await?
            .ok_or_else(missing)?;
        let config = GroupConfig::parse(f, &value).map_err(AdminError::Unreadable)?;
        Ok((store, config, rev))
    }

    async fn create(
        &self,
        stream: &str,
        group: &str,
        config: &GroupConfig,
        replicas: u32,
    ) -> Result<(), AdminError> {
        let store = self
            .nats
            .group_store_or_create(config.flavour.bucket(), replicas as usize)
            .await?;
        let key = pcgc::key(stream, group);
        match store.create(&key, config.to_json()).await {
            Ok(_) => Ok(()),
            Err(KvWriteError::Exists) => {
                let (_, existing, _) = self.read(config.flavour, stream, group).await?;
                let same = existing.same_shape(config)
                    && (config.flavour == Flavour::Elastic || same_membership(&existing, config));
                if same {
                    Ok(())
                } else {
                    Err(AdminError::Exists(format!(
                        "group {group} already exists on stream {stream} with another configuration"
                    )))
                }
            }
            Err(e) => Err(AdminError::Write(e)),
        }
    }

    /// Creates a static group (idempotent for the same config).
    ///
    /// # Errors
    /// [`AdminError`].
    pub async fn create_static(
        &self,
        stream: &str,
        group: &str,
        config: GroupConfig,
    ) -> Result<(), AdminError> {
        check_names(stream, group)?;
        strict(&config)?;
        let origin = self
            .nats
            .stream_spec(stream)
            .await?
            .ok_or_else(|| AdminError::NotFound(format!("stream {stream} does not exist")))?;
        let transform = self.nats.stream_transform(stream).await?;
        match transform.as_deref().and_then(spec::partition_count) {
            Some(n) if n != config.max_members => {
                return Err(AdminError::Invalid(vec![format!(
                    "stream {stream} partitions its subjects into {n}, not {} (its subject transform must use max members)",
                    config.max_members
                )]));
            }
            Some(_) => {}
            None => tracing::warn!(
                stream,
                "the stream has no partitioning subject transform: its subjects must already start with the partition number"
            ),
        }
        self.create(stream, group, &config, origin.replicas).await
    }

    /// Creates an elastic group: its stream first, then its config entry (B7).
    ///
    /// # Errors
    /// [`AdminError`].
    pub async fn create_elastic(
        &self,
        stream: &str,
        group: &str,
        config: GroupConfig,
    ) -> Result<(), AdminError> {
        check_names(stream, group)?;
        strict(&config)?;
        let whole_subject = config.partitioning.is_empty()
            || config.partitioning.iter().any(|f| f.wildcards.is_empty());
        if whole_subject && !self.nats.server_at_least(2, 12) {
            return Err(AdminError::Invalid(vec![
                "whole-subject partitioning needs nats-server 2.12 or newer".into(),
            ]));
        }
        let origin = self
            .nats
            .stream_spec(stream)
            .await?
            .ok_or_else(|| AdminError::NotFound(format!("stream {stream} does not exist")))?;
        // An existing group with another shape is refused before anything is created.
        if let Ok((_, existing, _)) = self.read(Flavour::Elastic, stream, group).await
            && !existing.same_shape(&config)
        {
            return Err(AdminError::Exists(format!(
                "group {group} already exists on stream {stream} with another configuration"
            )));
        }
        self.nats
            .create_group_stream(&GroupStreamSpec {
                name: pcgc::elastic_stream(stream, group),
                origin: stream.to_string(),
                replicas: origin.replicas,
                storage: origin.storage,
                max_msgs: config.max_buffered_msgs,
                max_bytes: config.max_buffered_bytes,
                transforms: spec::transforms(&config.partitioning, config.max_members),
            })
            .await?;
        self.create(stream, group, &config, origin.replicas).await
    }

    /// Changes an elastic group's membership with compare-and-set, re-reading and
    /// re-applying on a concurrent write. Returns the new config.
    async fn change(
        &self,
        stream: &str,
        group: &str,
        apply: impl Fn(&mut GroupConfig) -> Result<(), AdminError>,
    ) -> Result<GroupConfig, AdminError> {
        self.change_if(stream, group, |c| apply(c).map(|()| true))
            .await
            .map(|(c, _)| c)
    }

    /// [`GroupAdmin::change`] where `apply` says whether it changed anything: when
    /// not, nothing is written (no new revision for the members to follow). Returns
    /// the config and whether it was written.
    async fn change_if(
        &self,
        stream: &str,
        group: &str,
        apply: impl Fn(&mut GroupConfig) -> Result<bool, AdminError>,
    ) -> Result<(GroupConfig, bool), AdminError> {
        for attempt in 0..10u64 {
            if attempt > 0 {
                // Writers that collided spread out before reading again.
                let jitter = fastrand::u64(0..20) + attempt * 5;
                tokio::time::sleep(std::time::Duration::from_millis(jitter)).await;
            }
            let (store, mut config, rev) = self.read(Flavour::Elastic, stream, group).await?;
            if !apply(&mut config)? {
                return Ok((config, false));
            }
            strict(&config)?;
            match store
                .update(&pcgc::key(stream, group), config.to_json(), rev)
                .await
            {
                Ok(_) => return Ok((config, true)),
                Err(KvWriteError::Conflict) => continue,
                Err(e) => return Err(AdminError::Write(e)),
            }
        }
        Err(AdminError::Contended)
    }

    /// Adds `member` to a balanced elastic membership unless it is there; whether it
    /// was written (compare-and-set, retried on a concurrent write).
    ///
    /// # Errors
    /// [`AdminError`].
    pub async fn add_member_if_absent(
        &self,
        stream: &str,
        group: &str,
        member: &str,
    ) -> Result<bool, AdminError> {
        let refused = "the group uses member mappings: a member cannot join it by itself";
        self.change_members(stream, group, refused, |members| {
            members.push(member.to_string());
        })
        .await
        .map(|(_, written)| written)
    }

    /// Removes `member` from a balanced elastic membership if it is there; whether it
    /// was written.
    ///
    /// # Errors
    /// [`AdminError`].
    pub async fn drop_member_if_present(
        &self,
        stream: &str,
        group: &str,
        member: &str,
    ) -> Result<bool, AdminError> {
        self.change_members(stream, group, MAPPED, |members| {
            members.retain(|m| m != member);
        })
        .await
        .map(|(_, written)| written)
    }

    /// The balanced members of an elastic group.
    ///
    /// # Errors
    /// [`AdminError`].
    pub async fn elastic_members(
        &self,
        stream: &str,
        group: &str,
    ) -> Result<Vec<String>, AdminError> {
        let (_, c, _) = self.read(Flavour::Elastic, stream, group).await?;
        Ok(c.members)
    }

    /// Edits a balanced membership, stored sorted and deduplicated (B4); nothing is
    /// written when the edit changes nothing. A group with member mappings refuses an
    /// edit that would change it (`refused` says why). The config, and whether it was
    /// written.
    async fn change_members(
        &self,
        stream: &str,
        group: &str,
        refused: &str,
        edit: impl Fn(&mut Vec<String>),
    ) -> Result<(GroupConfig, bool), AdminError> {
        self.change_if(stream, group, |c| {
            let mut members = c.members.clone();
            edit(&mut members);
            members.sort();
            members.dedup();
            if members == c.members {
                return Ok(false);
            }
            if !c.member_mappings.is_empty() {
                return Err(AdminError::Invalid(vec![refused.to_string()]));
            }
            c.members = members;
            Ok(true)
        })
        .await
    }

    /// Adds members.
    ///
    /// # Errors
    /// [`AdminError`].
    pub async fn add(
        &self,
        stream: &str,
        group: &str,
        names: &[String],
    ) -> Result<GroupConfig, AdminError> {
        self.change_members(stream, group, MAPPED, |members| {
            members.extend(names.iter().filter(|n| !n.is_empty()).cloned());
        })
        .await
        .map(|(c, _)| c)
    }

    /// Drops members.
    ///
    /// # Errors
    /// [`AdminError`].
    pub async fn drop_members(
        &self,
        stream: &str,
        group: &str,
        names: &[String],
    ) -> Result<GroupConfig, AdminError> {
        self.change_members(stream, group, MAPPED, |members| {
            members.retain(|m| !names.contains(m));
        })
        .await
        .map(|(c, _)| c)
    }

    /// Replaces the membership with explicit mappings.
    ///
    /// # Errors
    /// [`AdminError`].
    pub async fn set_mappings(
        &self,
        stream: &str,
        group: &str,
        mappings: Vec<MemberMapping>,
    ) -> Result<GroupConfig, AdminError> {
        if mappings.is_empty() {
            return Err(AdminError::Invalid(vec![
                "give at least one member:partitions mapping".into(),
            ]));
        }
        self.change(stream, group, |c| {
            c.members.clear();
            c.member_mappings = mappings.clone();
            Ok(())
        })
        .await
    }

    /// Removes the mappings (the group then has no members).
    ///
    /// # Errors
    /// [`AdminError`].
    pub async fn delete_mappings(
        &self,
        stream: &str,
        group: &str,
    ) -> Result<GroupConfig, AdminError> {
        self.change(stream, group, |c| {
            c.member_mappings.clear();
            Ok(())
        })
        .await
    }

    /// The groups of a stream.
    ///
    /// # Errors
    /// [`AdminError`].
    pub async fn list(&self, f: Flavour, stream: &str) -> Result<Vec<String>, AdminError> {
        let Some(store) = self.store(f).await? else {
            return Ok(Vec::new());
        };
        let mut groups: Vec<String> = store
            .keys()
            .await?
            .into_iter()
            .filter_map(|k| {
                k.split_once('.')
                    .filter(|(s, _)| *s == stream)
                    .map(|(_, g)| g.to_string())
            })
            .collect();
        groups.sort();
        Ok(groups)
    }

    fn consumer_of(f: Flavour, stream: &str, group: &str, member: &str) -> (String, String) {
        match f {
            Flavour::Static => (stream.to_string(), pcgc::static_consumer(group, member)),
            Flavour::Elastic => (pcgc::elastic_stream(stream, group), member.to_string()),
        }
    }

    /// The group's stored config.
    ///
    /// # Errors
    /// [`AdminError::NotFound`] when there is no such group; [`AdminError`].
    pub async fn config(
        &self,
        f: Flavour,
        stream: &str,
        group: &str,
    ) -> Result<GroupConfig, AdminError> {
        Ok(self.read(f, stream, group).await?.1)
    }

    /// Every member of the group (listed or mapped) with its consumer:
    /// `(member, consumer stream, consumer)`, in name order.
    ///
    /// # Errors
    /// [`AdminError`].
    pub async fn member_consumers(
        &self,
        f: Flavour,
        stream: &str,
        group: &str,
    ) -> Result<Vec<(String, String, String)>, AdminError> {
        let (_, c, _) = self.read(f, stream, group).await?;
        let mut names: Vec<String> = c.members.clone();
        names.extend(c.member_mappings.iter().map(|m| m.member.clone()));
        names.sort();
        names.dedup();
        Ok(names
            .into_iter()
            .map(|m| {
                let (s, consumer) = Self::consumer_of(f, stream, group, &m);
                (m, s, consumer)
            })
            .collect())
    }

    /// The group and each member's state.
    ///
    /// # Errors
    /// [`AdminError`].
    pub async fn info(
        &self,
        f: Flavour,
        stream: &str,
        group: &str,
    ) -> Result<GroupReport, AdminError> {
        let (_, c, _) = self.read(f, stream, group).await?;
        let problems = c.problems();
        if !problems.is_empty() {
            return Err(AdminError::Stored(problems));
        }
        let (consumer_stream, _) = Self::consumer_of(f, stream, group, "");
        let states = self
            .nats
            .consumer_states(&consumer_stream, pcgc::PRIORITY_GROUP)
            .await
            .unwrap_or_default();
        let mut names: Vec<String> = c.members.clone();
        names.extend(c.member_mappings.iter().map(|m| m.member.clone()));
        names.sort();
        names.dedup();
        // Once for all members, and the consumers by name: a membership of tens of
        // thousands is reported in one pass, not one pass over it per member.
        let mut partitions = assign::every_partition(c.max_members, &c.members, &c.member_mappings);
        let states: std::collections::HashMap<&str, &crate::nats::ConsumerState> =
            states.iter().map(|s| (s.name.as_str(), s)).collect();
        let member_reports = names
            .iter()
            .map(|m| {
                let (_, consumer) = Self::consumer_of(f, stream, group, m);
                let state = states.get(consumer.as_str());
                MemberReport {
                    member: m.clone(),
                    in_membership: true,
                    partitions: partitions.remove(m).unwrap_or_default(),
                    consumer: state.is_some(),
                    active: state.is_some_and(|s| f == Flavour::Elastic || s.num_waiting > 0),
                    pinned: state.is_some_and(|s| s.pinned.is_some()),
                }
            })
            .collect();
        Ok(GroupReport {
            stream: stream.to_string(),
            group: group.to_string(),
            flavour: match f {
                Flavour::Static => "static",
                Flavour::Elastic => "elastic",
            },
            max_members: c.max_members,
            filters: c.filters.clone(),
            wildcards: c.partitioning.iter().map(|p| p.wildcards.clone()).collect(),
            members: c.members.clone(),
            mappings: c
                .member_mappings
                .iter()
                .map(|m| (m.member.clone(), m.partitions.clone()))
                .collect(),
            member_reports,
        })
    }

    /// One member's state (B3: its own consumer, not any member's).
    ///
    /// # Errors
    /// [`AdminError`].
    pub async fn member_info(
        &self,
        f: Flavour,
        stream: &str,
        group: &str,
        member: &str,
    ) -> Result<MemberReport, AdminError> {
        let report = self.info(f, stream, group).await?;
        if let Some(r) = report
            .member_reports
            .into_iter()
            .find(|r| r.member == member)
        {
            return Ok(r);
        }
        let (consumer_stream, consumer) = Self::consumer_of(f, stream, group, member);
        let states = self
            .nats
            .consumer_states(&consumer_stream, pcgc::PRIORITY_GROUP)
            .await
            .unwrap_or_default();
        Ok(MemberReport {
            member: member.to_string(),
            in_membership: false,
            partitions: Vec::new(),
            consumer: states.iter().any(|s| s.name == consumer),
            active: false,
            pinned: false,
        })
    }

    /// Unpins the member's consumer so that another of its instances is served.
    ///
    /// # Errors
    /// [`AdminError`].
    pub async fn step_down(
        &self,
        f: Flavour,
        stream: &str,
        group: &str,
        member: &str,
    ) -> Result<(), AdminError> {
        let (consumer_stream, consumer) = Self::consumer_of(f, stream, group, member);
        Ok(self
            .nats
            .unpin(&consumer_stream, &consumer, pcgc::PRIORITY_GROUP)
            .await?)
    }

    /// Records a group-wide pause until `until` beside the group's config: members
    /// that create their consumer while it holds pause it first
    /// ([`crate::group::records`]).
    ///
    /// # Errors
    /// [`AdminError::NotFound`] without the group's bucket; [`AdminError::Nats`].
    pub async fn set_group_pause(
        &self,
        f: Flavour,
        stream: &str,
        group: &str,
        until: time::OffsetDateTime,
    ) -> Result<(), AdminError> {
        let (store, _, _) = self.read(f, stream, group).await?;
        store
            .put(
                &records::pause_key(stream, group),
                records::pause_value(until),
            )
            .await?;
        Ok(())
    }

    /// Removes the group-wide pause record (none is fine).
    ///
    /// # Errors
    /// [`AdminError::Nats`].
    pub async fn clear_group_pause(
        &self,
        f: Flavour,
        stream: &str,
        group: &str,
    ) -> Result<(), AdminError> {
        if let Some(store) = self.store(f).await? {
            store.delete(&records::pause_key(stream, group)).await?;
        }
        Ok(())
    }

    /// Records that jetrelay's auto-join added `member` to an elastic group (what
    /// makes it prunable).
    ///
    /// # Errors
    /// [`AdminError::Nats`]; [`AdminError::NotFound`] without the bucket.
    pub async fn mark_auto_joined(
        &self,
        stream: &str,
        group: &str,
        member: &str,
    ) -> Result<(), AdminError> {
        let store = self.store(Flavour::Elastic).await?.ok_or_else(|| {
            AdminError::NotFound(format!("group {group} does not exist on stream {stream}"))
        })?;
        store
            .put(&records::auto_key(stream, group, member), Vec::new())
            .await?;
        Ok(())
    }

    /// Whether jetrelay's auto-join added `member` (and it has not left since).
    ///
    /// # Errors
    /// [`AdminError::Nats`].
    pub async fn is_auto_joined(
        &self,
        stream: &str,
        group: &str,
        member: &str,
    ) -> Result<bool, AdminError> {
        let Some(store) = self.store(Flavour::Elastic).await? else {
            return Ok(false);
        };
        Ok(store
            .get(&records::auto_key(stream, group, member))
            .await?
            .is_some())
    }

    /// Forgets that `member` was auto-joined (it left, or was pruned).
    ///
    /// # Errors
    /// [`AdminError::Nats`].
    pub async fn unmark_auto_joined(
        &self,
        stream: &str,
        group: &str,
        member: &str,
    ) -> Result<(), AdminError> {
        if let Some(store) = self.store(Flavour::Elastic).await? {
            store
                .delete(&records::auto_key(stream, group, member))
                .await?;
        }
        Ok(())
    }

    /// Deletes a group: its config entry, then exactly its consumers (static) or its
    /// stream (elastic); what is already gone is fine.
    ///
    /// # Errors
    /// [`AdminError`].
    pub async fn remove(&self, f: Flavour, stream: &str, group: &str) -> Result<(), AdminError> {
        let config = self.read(f, stream, group).await.ok().map(|(_, c, _)| c);
        if let Some(store) = self.store(f).await? {
            store.delete(&pcgc::key(stream, group)).await?;
            // jetrelay's records of the group go with it: a group created again under
            // the name starts unpaused, with nobody marked as auto-joined.
            store.delete(&records::pause_key(stream, group)).await?;
            let auto = records::auto_key(stream, group, "");
            // Listing an emptied bucket may fail: nothing is left to delete then.
            for key in store.keys().await.unwrap_or_default() {
                if key.starts_with(&auto) {
                    store.delete(&key).await?;
                }
            }
        }
        match f {
            Flavour::Elastic => {
                self.nats
                    .delete_stream(&pcgc::elastic_stream(stream, group))
                    .await?
            }
            Flavour::Static => {
                if !self.nats.stream_exists(stream).await? {
                    return Ok(());
                }
                let mut members: Vec<String> = Vec::new();
                if let Some(c) = &config {
                    members.extend(c.members.iter().cloned());
                    members.extend(c.member_mappings.iter().map(|m| m.member.clone()));
                }
                let others = self.list(Flavour::Static, stream).await?;
                for state in self
                    .nats
                    .consumer_states(stream, pcgc::PRIORITY_GROUP)
                    .await?
                {
                    let Some(member) = state.name.strip_prefix(&format!("{group}-")) else {
                        continue;
                    };
                    // Exactly ours: a member of the config, or a leftover that no other
                    // group on this stream could own (B18: group "a" never deletes "a-b-m1").
                    let claimed_by_other = others.iter().any(|o| {
                        o != group
                            && state.name.starts_with(&format!("{o}-"))
                            && o.len() > group.len()
                    });
                    if members.iter().any(|m| m == member) || !claimed_by_other {
                        self.nats.delete_consumer(stream, &state.name).await?;
                    }
                }
            }
        }
        Ok(())
    }
}
