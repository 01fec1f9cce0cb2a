//! Topology I/O: reads streams and consumers into `crate::topology` types, and carries
//! out the additive plan (create a managed stream, add its missing subjects, create a
//! missing consumer). Never deletes or recreates a stream, never changes an existing
//! consumer.

use std::time::Duration;

use async_nats::jetstream::consumer::{self, AckPolicy, DeliverPolicy, PriorityPolicy, pull};
use async_nats::jetstream::context::{CreateStreamErrorKind, GetStreamErrorKind};
use async_nats::jetstream::stream::{
    self, ConsumerCreateStrictErrorKind, ConsumerErrorKind, DiscardPolicy, RetentionPolicy,
    StorageType,
};
use async_nats::jetstream::{ErrorCode, context::ConsumerInfoErrorKind};

use super::Nats;
use super::error::{TopologyError, refused, unavailable};
use crate::outputs::Capture;
use crate::topology::{
    ConsumerPlan, ConsumerSpec, Priority, Row, StreamAction, StreamPlan, StreamSpec, Table,
    TopologyRequest, plan_consumer, plan_stream,
};
use crate::topology::{Discard, Retention, Storage};

/// The topology, checked and bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bound {
    /// What was done to the stream.
    pub stream_action: StreamAction,
    /// Whether the consumer was created by this call.
    pub consumer_created: bool,
}

/// The plan, read-only (for `jetrelay check` and the startup log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The stream step.
    pub stream: StreamPlan,
    /// The consumer step.
    pub consumer: ConsumerPlan,
}

impl Nats {
    /// Reads the current topology and plans the steps, changing nothing.
    ///
    /// # Errors
    /// [`TopologyError`].
    pub async fn plan(&self, req: &TopologyRequest) -> Result<Plan, TopologyError> {
        let existing = self.read_stream(&req.stream).await?;
        let stream = plan_stream(
            &req.stream,
            req.stream_mode,
            req.managed.as_ref(),
            existing.as_ref(),
            &req.consumer.filter_subjects,
        )?;
        // A stream that does not exist yet has no consumer either.
        let current = if existing.is_some() {
            self.read_consumer(&req.stream, &req.consumer.name).await?
        } else {
            None
        };
        let consumer = plan_consumer(req.consumer_mode, &req.consumer, current.as_ref());
        Ok(Plan { stream, consumer })
    }

    /// Carries out the plan: the stream step, then the consumer step, then reads the
    /// consumer back and validates it.
    ///
    /// # Errors
    /// [`TopologyError`].
    pub async fn ensure(&self, req: &TopologyRequest) -> Result<Bound, TopologyError> {
        let plan = self.plan(req).await?;
        self.apply(&req.stream, &plan.stream).await?;
        let created = match plan.consumer {
            ConsumerPlan::Keep => false,
            ConsumerPlan::Missing => {
                return Err(TopologyError::ConsumerMissing(req.consumer.name.clone()));
            }
            ConsumerPlan::Conflict(rows) => return Err(conflict(&req.consumer.name, rows)),
            ConsumerPlan::Create => {
                let c = &req.consumer;
                let filters = crate::printable::list(&c.filter_subjects, 8);
                if c.backoff_ms.is_empty() && c.priority.is_none() {
                    tracing::info!(
                        consumer = %c.name, filters = %filters, deliver_policy = %c.deliver_policy,
                        ack_wait_ms = c.ack_wait_ms, max_deliver = c.max_deliver,
                        max_ack_pending = c.max_ack_pending, "creating the consumer"
                    );
                } else {
                    tracing::info!(
                        consumer = %c.name, filters = %filters, deliver_policy = %c.deliver_policy,
                        ack_wait_ms = c.ack_wait_ms, max_deliver = c.max_deliver,
                        max_ack_pending = c.max_ack_pending,
                        backoff_ms = %crate::printable::list(&c.backoff_ms, 8),
                        priority_group = c.priority.as_ref().map_or("none", |p| p.group.as_str()),
                        "creating the consumer"
                    );
                }
                self.create_consumer(&req.stream, &req.consumer).await?
            }
        };
        // Read back: what the server stored must be what we need.
        let stored = self
            .read_consumer(&req.stream, &req.consumer.name)
            .await?
            .ok_or_else(|| TopologyError::ConsumerMissing(req.consumer.name.clone()))?;
        let rows = crate::topology::compare_consumer(&req.consumer, &stored);
        if !rows.is_empty() {
            return Err(conflict(&req.consumer.name, rows));
        }
        Ok(Bound {
            stream_action: plan.stream.action,
            consumer_created: created,
        })
    }

    /// Plans a stream this daemon owns besides the source (the managed DLQ stream),
    /// changing nothing. A stream to be created takes the replicas of `like` (the
    /// source stream) when that exists.
    ///
    /// # Errors
    /// [`TopologyError`].
    pub async fn plan_owned(
        &self,
        spec: &StreamSpec,
        like: &str,
    ) -> Result<StreamPlan, TopologyError> {
        let existing = self.read_stream(&spec.name).await?;
        let mut plan = plan_stream(
            &spec.name,
            crate::topology::StreamMode::Managed,
            Some(spec),
            existing.as_ref(),
            &[],
        )?;
        if let StreamAction::Create(new) = &mut plan.action
            && let Some(source) = self.read_stream(like).await?
        {
            new.replicas = source.replicas;
        }
        Ok(plan)
    }

    /// Ensures a stream this daemon owns besides the source ([`Nats::plan_owned`]):
    /// created when missing, its missing subjects added; nothing else is changed.
    ///
    /// # Errors
    /// [`TopologyError`].
    pub async fn ensure_owned(
        &self,
        spec: &StreamSpec,
        like: &str,
    ) -> Result<StreamAction, TopologyError> {
        let plan = self.plan_owned(spec, like).await?;
        self.apply(&spec.name, &plan).await?;
        Ok(plan.action)
    }

    /// Carries out a stream plan: logs what differs and is left alone, then creates
    /// the stream or adds its missing subjects.
    async fn apply(&self, name: &str, plan: &StreamPlan) -> Result<(), TopologyError> {
        for row in &plan.untouched {
            tracing::warn!(
                stream = %name, field = row.field, current = %row.current, configured = %row.required,
                "managed stream differs from its config; jetrelay never changes this setting"
            );
        }
        match &plan.action {
            StreamAction::Keep => Ok(()),
            StreamAction::Create(spec) => {
                tracing::info!(stream = %spec.name, subjects = %crate::printable::list(&spec.subjects, 8), storage = spec.storage.as_str(), replicas = spec.replicas, "creating the managed stream");
                self.create_stream(spec).await
            }
            StreamAction::AddSubjects { added, subjects } => {
                tracing::info!(stream = %name, added = %crate::printable::list(added, 8), "adding subjects to the managed stream");
                self.set_subjects(name, subjects).await
            }
        }
    }

    /// A handle on a stream, without reading its info.
    pub(super) async fn stream_handle(
        &self,
        name: &str,
    ) -> Result<async_nats::jetstream::stream::Stream<()>, TopologyError> {
        self.js
            .get_stream_no_info(name)
            .await
            .map_err(|e| refused("read the stream", e))
    }

    async fn read_stream(&self, name: &str) -> Result<Option<StreamSpec>, TopologyError> {
        Ok(self
            .stream_info(name)
            .await?
            .map(|info| from_stream_config(&info.config)))
    }

    /// A stream's info (config and state, one request); `None` when there is no such
    /// stream.
    pub(super) async fn stream_info(
        &self,
        name: &str,
    ) -> Result<Option<async_nats::jetstream::stream::Info>, TopologyError> {
        match self.js.get_stream(name).await {
            Ok(s) => Ok(Some(s.cached_info().clone())),
            Err(e) => match e.kind() {
                GetStreamErrorKind::JetStream(js)
                    if js.error_code() == ErrorCode::STREAM_NOT_FOUND =>
                {
                    Ok(None)
                }
                GetStreamErrorKind::Request => Err(unavailable(e)),
                _ => Err(refused("read the stream", e)),
            },
        }
    }

    async fn read_consumer(
        &self,
        stream: &str,
        name: &str,
    ) -> Result<Option<ConsumerSpec>, TopologyError> {
        let s = self.stream_handle(stream).await?;
        match s.consumer_info(name).await {
            Ok(info) => Ok(Some(from_consumer_config(name, &info.config))),
            Err(e) => match e.kind() {
                ConsumerInfoErrorKind::NotFound | ConsumerInfoErrorKind::StreamNotFound => Ok(None),
                ConsumerInfoErrorKind::TimedOut
                | ConsumerInfoErrorKind::NoResponders
                | ConsumerInfoErrorKind::Offline
                | ConsumerInfoErrorKind::Request => Err(unavailable(e)),
                _ => Err(refused("read the consumer", e)),
            },
        }
    }

    async fn create_stream(&self, spec: &StreamSpec) -> Result<(), TopologyError> {
        match self.js.create_stream(to_stream_config(spec)).await {
            Ok(_) => Ok(()),
            Err(e) => match e.kind() {
                // Another instance created it first: the next plan sees it.
                CreateStreamErrorKind::JetStream(js)
                    if js.error_code() == ErrorCode::STREAM_NAME_EXIST =>
                {
                    Ok(())
                }
                CreateStreamErrorKind::TimedOut | CreateStreamErrorKind::JetStreamUnavailable => {
                    Err(unavailable(e))
                }
                _ => Err(refused("create the stream", e)),
            },
        }
    }

    async fn set_subjects(&self, name: &str, subjects: &[String]) -> Result<(), TopologyError> {
        // Start from the server's own config so that every other setting is kept.
        let stream = self
            .js
            .get_stream(name)
            .await
            .map_err(|e| refused("read the stream", e))?;
        let mut config = stream.cached_info().config.clone();
        config.subjects = subjects.to_vec();
        self.js
            .update_stream(config)
            .await
            .map(drop)
            .map_err(|e| refused("add subjects to the stream", e))
    }

    /// Creates the consumer with action "create"; an identical existing one is fine,
    /// a different one is a conflict (reported after the read-back).
    async fn create_consumer(
        &self,
        stream: &str,
        spec: &ConsumerSpec,
    ) -> Result<bool, TopologyError> {
        match self.create_strict(stream, spec, false).await? {
            Created::New => Ok(true),
            Created::Exists | Created::Overlap => Ok(false),
        }
    }

    /// Creates a consumer with action "create" (never an update). `overlap_ok`: a
    /// work-queue stream refusing it for another consumer's overlapping filters (10100)
    /// is an outcome, not an error.
    async fn create_strict(
        &self,
        stream: &str,
        spec: &ConsumerSpec,
        overlap_ok: bool,
    ) -> Result<Created, TopologyError> {
        let s = self.stream_handle(stream).await?;
        match s.create_consumer_strict(to_consumer_config(spec)).await {
            Ok(_) => Ok(Created::New),
            Err(e) => match e.kind() {
                // Another instance won the race; the read-back compares.
                ConsumerCreateStrictErrorKind::AlreadyExists => Ok(Created::Exists),
                ConsumerCreateStrictErrorKind::JetStream(js)
                    if overlap_ok
                        && js.error_code() == ErrorCode::CONSUMER_WQ_CONSUMER_NOT_UNIQUE =>
                {
                    Ok(Created::Overlap)
                }
                ConsumerCreateStrictErrorKind::TimedOut
                | ConsumerCreateStrictErrorKind::Request => Err(unavailable(e)),
                _ => Err(refused("create the consumer", e)),
            },
        }
    }
}

/// What a strict create came to.
enum Created {
    New,
    Exists,
    Overlap,
}

fn conflict(name: &str, rows: Vec<Row>) -> TopologyError {
    TopologyError::Conflict {
        name: name.to_string(),
        table: Table(&rows).to_string(),
        rows,
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn from_stream_config(c: &stream::Config) -> StreamSpec {
    StreamSpec {
        name: c.name.clone(),
        subjects: c.subjects.clone(),
        storage: match c.storage {
            StorageType::Memory => Storage::Memory,
            StorageType::File => Storage::File,
        },
        replicas: u32::try_from(c.num_replicas.max(1)).unwrap_or(u32::MAX),
        retention: match c.retention {
            RetentionPolicy::Limits => Retention::Limits,
            RetentionPolicy::Interest => Retention::Interest,
            RetentionPolicy::WorkQueue => Retention::Workqueue,
        },
        discard: match c.discard {
            DiscardPolicy::Old => Discard::Old,
            DiscardPolicy::New => Discard::New,
        },
        max_age_ms: ms(c.max_age),
        max_msgs: c.max_messages,
        max_bytes: c.max_bytes,
        duplicate_window_ms: ms(c.duplicate_window),
        allow_direct: c.allow_direct,
        allow_atomic: c.allow_atomic_publish,
        allow_msg_ttl: c.allow_message_ttl,
        allow_batched: c.allow_batch_publish,
    }
}

fn to_stream_config(s: &StreamSpec) -> stream::Config {
    stream::Config {
        name: s.name.clone(),
        subjects: s.subjects.clone(),
        storage: match s.storage {
            Storage::File => StorageType::File,
            Storage::Memory => StorageType::Memory,
        },
        num_replicas: s.replicas as usize,
        retention: match s.retention {
            Retention::Limits => RetentionPolicy::Limits,
            Retention::Interest => RetentionPolicy::Interest,
            Retention::Workqueue => RetentionPolicy::WorkQueue,
        },
        discard: match s.discard {
            Discard::Old => DiscardPolicy::Old,
            Discard::New => DiscardPolicy::New,
        },
        max_age: Duration::from_millis(s.max_age_ms),
        max_messages: s.max_msgs,
        max_bytes: s.max_bytes,
        duplicate_window: Duration::from_millis(s.duplicate_window_ms),
        allow_direct: s.allow_direct,
        allow_atomic_publish: s.allow_atomic,
        allow_message_ttl: s.allow_msg_ttl,
        allow_batch_publish: s.allow_batched,
        ..Default::default()
    }
}

fn deliver_policy_name(p: &DeliverPolicy) -> String {
    match p {
        DeliverPolicy::All => "all".into(),
        DeliverPolicy::New => "new".into(),
        DeliverPolicy::Last => "last".into(),
        DeliverPolicy::LastPerSubject => "last_per_subject".into(),
        DeliverPolicy::ByStartSequence { start_sequence } => {
            format!("by_start_sequence({start_sequence})")
        }
        DeliverPolicy::ByStartTime { .. } => "by_start_time".into(),
    }
}

fn from_consumer_config(name: &str, c: &consumer::Config) -> ConsumerSpec {
    let filter_subjects = if c.filter_subjects.is_empty() && !c.filter_subject.is_empty() {
        vec![c.filter_subject.clone()]
    } else {
        c.filter_subjects.clone()
    };
    ConsumerSpec {
        name: name.to_string(),
        durable: c.durable_name.is_some(),
        filter_subjects,
        deliver_policy: deliver_policy_name(&c.deliver_policy),
        ack_explicit: matches!(c.ack_policy, AckPolicy::Explicit),
        ack_wait_ms: ms(c.ack_wait),
        max_deliver: if c.max_deliver <= 0 {
            -1
        } else {
            c.max_deliver
        },
        max_ack_pending: c.max_ack_pending,
        backoff_ms: c.backoff.iter().map(|d| ms(*d)).collect(),
        priority: match c.priority_policy {
            PriorityPolicy::PinnedClient => Some(Priority {
                group: c.priority_groups.first().cloned().unwrap_or_default(),
                timeout_ms: ms(c.priority_timeout),
            }),
            _ => None,
        },
        inactive_threshold_ms: ms(c.inactive_threshold),
        pull: c.deliver_subject.is_none(),
    }
}

fn to_consumer_config(s: &ConsumerSpec) -> pull::Config {
    let (priority_policy, priority_groups, priority_timeout) = match &s.priority {
        Some(p) => (
            PriorityPolicy::PinnedClient,
            vec![p.group.clone()],
            Duration::from_millis(p.timeout_ms),
        ),
        None => (PriorityPolicy::None, Vec::new(), Duration::ZERO),
    };
    pull::Config {
        durable_name: s.durable.then(|| s.name.clone()),
        name: Some(s.name.clone()),
        inactive_threshold: Duration::from_millis(s.inactive_threshold_ms),
        filter_subjects: s.filter_subjects.clone(),
        deliver_policy: match s.deliver_policy.as_str() {
            "new" => DeliverPolicy::New,
            "last" => DeliverPolicy::Last,
            "last_per_subject" => DeliverPolicy::LastPerSubject,
            _ => DeliverPolicy::All,
        },
        ack_policy: AckPolicy::Explicit,
        ack_wait: Duration::from_millis(s.ack_wait_ms),
        max_deliver: s.max_deliver,
        max_ack_pending: s.max_ack_pending,
        backoff: s
            .backoff_ms
            .iter()
            .map(|m| Duration::from_millis(*m))
            .collect(),
        priority_policy,
        priority_groups,
        priority_timeout,
        ..Default::default()
    }
}

/// One stream of the stream list ([`Nats::stream_captures`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// Its subjects (none for a stream that only sources or mirrors).
    pub subjects: Vec<String>,
    /// What publishing to it takes.
    pub capture: Capture,
    /// The streams it sources from (or mirrors).
    pub sources: Vec<String>,
}

/// Where a stream ends, and whether it can be read with direct gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tail {
    /// Its last sequence (0 when it never held a message).
    pub last_sequence: u64,
    /// `allow_direct`.
    pub direct: bool,
}

/// What the consumer's info says, for the gauges and readiness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerCounts {
    /// Messages not yet delivered.
    pub pending: u64,
    /// Messages delivered and not yet acknowledged.
    pub ack_pending: u64,
    /// Whether some client holds the pin of one of its priority groups.
    pub pinned: bool,
    /// Whether it is paused on the server, and until when.
    pub pause: crate::seam::ServerPause,
}

/// One replica on disk ([`Capture::staged_on_disk`]).
fn staged_on_disk(c: &async_nats::jetstream::stream::Config) -> bool {
    c.storage == async_nats::jetstream::stream::StorageType::File && c.num_replicas <= 1
}

/// Message deletes in flight at once ([`Nats::delete_messages`]).
const DELETES_IN_FLIGHT: usize = 64;

impl Nats {
    /// How many messages a stream holds; `None` when it cannot be read now.
    pub async fn stream_messages(&self, stream: &str) -> Option<u64> {
        // `get_stream` reads the stream's info once: its state is current.
        let s = self.js.get_stream(stream).await.ok()?;
        Some(s.cached_info().state.messages)
    }

    /// How many replicas a stream has; `None` when it cannot be read now.
    pub async fn stream_replicas(&self, stream: &str) -> Option<usize> {
        let s = self.js.get_stream(stream).await.ok()?;
        Some(s.cached_info().config.num_replicas)
    }

    /// The consumer's pending and ack-pending counts and pin, for the gauges and
    /// readiness; `None` when the info cannot be read now.
    pub async fn consumer_counts(&self, stream: &str, name: &str) -> Option<ConsumerCounts> {
        let s = self.js.get_stream_no_info(stream).await.ok()?;
        let info = s.consumer_info(name).await.ok()?;
        Some(ConsumerCounts {
            pending: info.num_pending,
            ack_pending: info.num_ack_pending as u64,
            pinned: info
                .priority_groups
                .iter()
                .any(|g| g.pinned_client_id.is_some()),
            pause: super::pause::pause_of(&info),
        })
    }
}

/// What creating a group member consumer came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupConsumer {
    /// Created, or already there with exactly this config.
    Ready,
    /// There with another config (old filters, another template).
    Conflict(Vec<Row>),
    /// A work-queue stream refused it: another member's consumer still holds one of
    /// these partitions (10100). Normal while members converge.
    Overlap,
}

impl Nats {
    /// Creates a group member consumer with action "create" and checks what the
    /// server has.
    ///
    /// # Errors
    /// [`TopologyError`] for anything but the outcomes of [`GroupConsumer`].
    pub async fn create_group_consumer(
        &self,
        stream: &str,
        spec: &ConsumerSpec,
    ) -> Result<GroupConsumer, TopologyError> {
        match self.create_strict(stream, spec, true).await? {
            Created::New => return Ok(GroupConsumer::Ready),
            Created::Overlap => return Ok(GroupConsumer::Overlap),
            Created::Exists => {}
        }
        let current = self
            .read_consumer(stream, &spec.name)
            .await?
            .ok_or_else(|| TopologyError::ConsumerMissing(spec.name.clone()))?;
        let rows = crate::topology::compare_consumer(spec, &current);
        Ok(if rows.is_empty() {
            GroupConsumer::Ready
        } else {
            GroupConsumer::Conflict(rows)
        })
    }

    /// Deletes a consumer; a missing one is fine.
    ///
    /// # Errors
    /// [`TopologyError`].
    pub async fn delete_consumer(&self, stream: &str, name: &str) -> Result<(), TopologyError> {
        let s = self.stream_handle(stream).await?;
        match s.delete_consumer(name).await {
            Ok(_) => Ok(()),
            Err(e) => match e.kind() {
                ConsumerErrorKind::JetStream(js)
                    if js.error_code() == ErrorCode::CONSUMER_NOT_FOUND =>
                {
                    Ok(())
                }
                _ => Err(refused("delete the consumer", e)),
            },
        }
    }

    /// Whether the stream exists.
    ///
    /// # Errors
    /// [`TopologyError`] when it cannot be read.
    pub async fn stream_exists(&self, name: &str) -> Result<bool, TopologyError> {
        Ok(self.read_stream(name).await?.is_some())
    }

    /// The stream's config as the topology types see it, if it exists.
    ///
    /// # Errors
    /// [`TopologyError`] when it cannot be read.
    pub async fn stream_spec(&self, name: &str) -> Result<Option<StreamSpec>, TopologyError> {
        self.read_stream(name).await
    }

    /// The streams whose subjects overlap `subject` (a pattern), and what publishing
    /// to them takes.
    ///
    /// # Errors
    /// [`TopologyError`] when they cannot be listed or read.
    pub async fn capturing(&self, subject: &str) -> Result<Vec<Capture>, TopologyError> {
        #[derive(serde::Deserialize)]
        struct Names {
            #[serde(default)]
            streams: Option<Vec<String>>,
        }
        let names: async_nats::jetstream::response::Response<Names> = self
            .js
            .request("STREAM.NAMES", &serde_json::json!({ "subject": subject }))
            .await
            .map_err(unavailable)?;
        let names = match names {
            async_nats::jetstream::response::Response::Ok(n) => n.streams.unwrap_or_default(),
            async_nats::jetstream::response::Response::Err { error } => {
                return Err(refused("list the streams", error));
            }
        };
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            match self.js.get_stream(&name).await {
                Ok(s) => {
                    let c = &s.cached_info().config;
                    out.push(Capture {
                        stream: name,
                        atomic: c.allow_atomic_publish,
                        direct: c.allow_direct,
                        duplicate_window: c.duplicate_window,
                        staged_on_disk: staged_on_disk(c),
                        batched: c.allow_batch_publish,
                        planned: false,
                    });
                }
                Err(e) if e.kind() == GetStreamErrorKind::Request => return Err(unavailable(e)),
                Err(e) => return Err(refused("read the stream", e)),
            }
        }
        Ok(out)
    }

    /// Every stream with its subjects, what publishing to it takes and the streams it
    /// sources from, listed once (pages of the stream list): for callers that look up
    /// many subjects.
    ///
    /// # Errors
    /// [`TopologyError`] when they cannot be listed.
    pub async fn stream_captures(&self) -> Result<Vec<Listed>, TopologyError> {
        use futures::TryStreamExt;
        let infos: Vec<async_nats::jetstream::stream::Info> =
            self.js.streams().try_collect().await.map_err(unavailable)?;
        Ok(infos
            .into_iter()
            .map(|i| {
                let c = i.config;
                let capture = Capture {
                    staged_on_disk: staged_on_disk(&c),
                    batched: c.allow_batch_publish,
                    stream: c.name,
                    atomic: c.allow_atomic_publish,
                    direct: c.allow_direct,
                    duplicate_window: c.duplicate_window,
                    planned: false,
                };
                let sources = c
                    .sources
                    .iter()
                    .flatten()
                    .chain(c.mirror.iter())
                    .map(|s| s.name.clone())
                    .collect();
                Listed {
                    subjects: c.subjects,
                    capture,
                    sources,
                }
            })
            .collect())
    }

    /// A stream's last sequence and whether it answers direct gets; `None` when
    /// there is no such stream.
    ///
    /// # Errors
    /// [`TopologyError`] when it cannot be read.
    pub async fn last_sequence(&self, stream: &str) -> Result<Option<Tail>, TopologyError> {
        Ok(self.stream_info(stream).await?.map(|info| Tail {
            last_sequence: info.state.last_sequence,
            direct: info.config.allow_direct,
        }))
    }

    /// Deletes messages of a stream, 64 at a time; each sequence's
    /// result, in order (a message already gone counts as deleted). Deleted, not
    /// overwritten on disk (`no_erase`): async-nats's `delete_message` erases, which
    /// costs the server a write per message (3 ms each, against 0.07 ms).
    ///
    /// # Errors
    /// [`TopologyError`] when the stream cannot be read.
    pub async fn delete_messages(
        &self,
        stream: &str,
        seqs: &[u64],
    ) -> Result<Vec<Result<(), String>>, TopologyError> {
        use futures::StreamExt;
        #[derive(serde::Deserialize)]
        struct Deleted {
            #[serde(default)]
            success: bool,
        }
        // A missing stream is an error of the whole call, as it was.
        self.stream_handle(stream).await?;
        let subject = format!("STREAM.MSG.DELETE.{stream}");
        let one = |seq: u64| {
            let subject = subject.clone();
            async move {
                let answer: Result<async_nats::jetstream::response::Response<Deleted>, _> = self
                    .js
                    .request(
                        subject,
                        &serde_json::json!({ "seq": seq, "no_erase": true }),
                    )
                    .await;
                match answer {
                    Ok(async_nats::jetstream::response::Response::Ok(d)) if d.success => Ok(()),
                    Ok(async_nats::jetstream::response::Response::Ok(_)) => {
                        Err(format!("the server did not delete message {seq}"))
                    }
                    // Gone already (another run deleted it first): deleted.
                    Ok(async_nats::jetstream::response::Response::Err { error })
                        if error.error_code() == ErrorCode::NO_MESSAGE_FOUND
                            || (error.error_code() == ErrorCode::STREAM_MESSAGE_DELETE_FAILED
                                && error.to_string().contains("no message found")) =>
                    {
                        Ok(())
                    }
                    Ok(async_nats::jetstream::response::Response::Err { error }) => {
                        Err(error.to_string())
                    }
                    Err(e) => Err(crate::ops::telemetry::chain(&e)),
                }
            }
        };
        Ok(futures::stream::iter(seqs.iter().copied())
            .map(one)
            .buffered(DELETES_IN_FLIGHT)
            .collect()
            .await)
    }
}
