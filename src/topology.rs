//! Topology decisions as pure functions: what to do with the stream (check, create, add
//! subjects) and whether an existing consumer matches the one this daemon requires,
//! with the field / current / required table shown to operators.
//!
//! The NATS boundary reads the current state into these types and carries out the
//! plan; nothing here does I/O. No plan ever deletes or recreates a stream, or
//! changes its retention, storage, replicas or limits.

use std::fmt;

use crate::subject;
use serde::{Deserialize, Serialize};

/// `topology.on_missing`
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum OnMissing {
    /// Not ready; wait with backoff until the topology appears.
    #[default]
    Retry,
    /// Stop with an error.
    Fail,
}

/// `topology.stream`
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum StreamMode {
    /// The publisher owns the stream; it is only checked.
    #[default]
    External,
    /// This daemon owns the stream: it creates it and adds missing subjects.
    Managed,
}

/// `topology.consumer`
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ConsumerMode {
    /// Create the consumer when missing, then validate it.
    #[default]
    Ensure,
    /// Only read, validate and bind.
    Bind,
}

/// `topology.managed_stream.storage`
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Storage {
    /// On disk.
    File,
    /// In memory.
    Memory,
}

impl Storage {
    /// Its name in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            Storage::File => "file",
            Storage::Memory => "memory",
        }
    }
}

/// `topology.managed_stream.retention`
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Retention {
    /// Kept until a limit.
    Limits,
    /// Kept while a consumer has not acked it.
    Interest,
    /// Removed once acked.
    Workqueue,
}

/// `topology.managed_stream.discard`
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Discard {
    /// The oldest messages.
    Old,
    /// Refuse new messages.
    New,
}

/// Everything the topology step needs to know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopologyRequest {
    /// The stream name.
    pub stream: String,
    /// Who owns the stream.
    pub stream_mode: StreamMode,
    /// The stream config when managed.
    pub managed: Option<StreamSpec>,
    /// The consumer this daemon needs.
    pub consumer: ConsumerSpec,
    /// Who owns the consumer.
    pub consumer_mode: ConsumerMode,
}

/// A stream's configuration, as far as this daemon cares: one read from the server,
/// or one this daemon would create. `[topology.managed_stream]` is one without its
/// name (the source's stream names it; the config has no `name` key).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StreamSpec {
    /// The name.
    #[serde(skip)]
    pub name: String,
    /// Its subjects (missing ones are added to an existing managed stream).
    pub subjects: Vec<String>,
    /// File or memory.
    pub storage: Storage,
    /// Replicas (the config allows 1 to 5).
    pub replicas: u32,
    /// Limits, interest or work queue.
    pub retention: Retention,
    /// What a full stream discards.
    pub discard: Discard,
    /// Maximum age; 0 = unlimited.
    pub max_age_ms: u64,
    /// Maximum messages; -1 = unlimited.
    pub max_msgs: i64,
    /// Maximum bytes; -1 = unlimited.
    pub max_bytes: i64,
    /// The `Nats-Msg-Id` deduplication window.
    pub duplicate_window_ms: u64,
    /// It answers direct gets (`jetrelay dlq` reads a stream with them).
    pub allow_direct: bool,
    /// It takes atomic batches (what `[publish]` sends with `atomic = true`).
    pub allow_atomic: bool,
    /// It takes per-message TTLs (`Nats-TTL`); the server never turns it off again.
    pub allow_msg_ttl: bool,
    /// It takes fast-ingest batches (nats-server 2.14+): what `jetrelay dlq replay
    /// --fast` sends into this stream.
    pub allow_batched: bool,
}

/// The config's defaults: on file, one replica, no limits, a two-minute
/// deduplication window, no flag.
impl Default for StreamSpec {
    fn default() -> Self {
        Self {
            name: String::new(),
            subjects: Vec::new(),
            storage: Storage::File,
            replicas: 1,
            retention: Retention::Limits,
            discard: Discard::Old,
            max_age_ms: 0,
            max_msgs: -1,
            max_bytes: -1,
            duplicate_window_ms: 120_000,
            allow_direct: false,
            allow_atomic: false,
            allow_msg_ttl: false,
            allow_batched: false,
        }
    }
}

/// What was (or will be) done to the stream, for a log line: `kept`, `created`, or
/// `subjects added: a, b`.
impl std::fmt::Display for StreamAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StreamAction::Keep => f.write_str("kept"),
            StreamAction::Create(_) => f.write_str("created"),
            StreamAction::AddSubjects { added, .. } => {
                write!(f, "subjects added: {}", crate::printable::list(added, 8))
            }
        }
    }
}

/// What to do to the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamAction {
    /// Nothing: it exists and covers what the consumer needs.
    Keep,
    /// Create it from the managed config.
    Create(StreamSpec),
    /// Add subjects; `subjects` is the full new list (the old ones kept, in order).
    AddSubjects {
        /// Only the new ones.
        added: Vec<String>,
        /// The whole list to write.
        subjects: Vec<String>,
    },
}

/// The stream plan: an action plus the rows that differ but are left alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamPlan {
    /// The one additive change, if any.
    pub action: StreamAction,
    /// Managed settings that differ from the existing stream; never changed.
    pub untouched: Vec<Row>,
    /// The stream as it is, when it exists.
    pub current: Option<StreamSpec>,
}

impl StreamPlan {
    /// The stream as the plan leaves it: created, its subjects added, or as it is.
    pub fn after(&self) -> Option<StreamSpec> {
        match &self.action {
            StreamAction::Create(spec) => Some(spec.clone()),
            StreamAction::AddSubjects { subjects, .. } => {
                self.current.clone().map(|c| StreamSpec {
                    subjects: subjects.clone(),
                    ..c
                })
            }
            StreamAction::Keep => self.current.clone(),
        }
    }
}

/// Why the stream cannot be used as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamProblem {
    /// No such stream, and this daemon may not create it.
    #[error("stream {0} does not exist (topology.stream = \"external\": the publisher creates it)")]
    Missing(String),
    /// The stream's subjects do not cover the consumer's filters.
    #[error("stream {stream} subjects {subjects:?} do not cover the filter(s) {filters:?}")]
    Uncovered {
        /// The stream.
        stream: String,
        /// Its subjects.
        subjects: Vec<String>,
        /// The filters outside them.
        filters: Vec<String>,
    },
}

/// Plans the stream step.
///
/// # Errors
/// [`StreamProblem`] when the stream is missing in external mode or does not cover
/// the consumer's filters.
pub fn plan_stream(
    name: &str,
    mode: StreamMode,
    managed: Option<&StreamSpec>,
    existing: Option<&StreamSpec>,
    filters: &[String],
) -> Result<StreamPlan, StreamProblem> {
    let (action, subjects, untouched) = match (mode, managed, existing) {
        (StreamMode::Managed, Some(want), None) => (
            StreamAction::Create(want.clone()),
            want.subjects.clone(),
            Vec::new(),
        ),
        (StreamMode::Managed, Some(want), Some(have)) => {
            let added: Vec<String> = want
                .subjects
                .iter()
                .filter(|s| !have.subjects.iter().any(|h| subject::covers(h, s)))
                .cloned()
                .collect();
            let mut subjects = have.subjects.clone();
            subjects.extend(added.iter().cloned());
            let action = if added.is_empty() {
                StreamAction::Keep
            } else {
                StreamAction::AddSubjects {
                    added,
                    subjects: subjects.clone(),
                }
            };
            (action, subjects, stream_rows(have, want))
        }
        (_, _, Some(have)) => (StreamAction::Keep, have.subjects.clone(), Vec::new()),
        (_, _, None) => return Err(StreamProblem::Missing(name.to_string())),
    };
    // A stream without subjects (sourced or mirrored) is not checked for coverage.
    let uncovered: Vec<String> = filters
        .iter()
        .filter(|f| !subjects.is_empty() && !subjects.iter().any(|s| subject::covers(s, f)))
        .cloned()
        .collect();
    if !uncovered.is_empty() {
        return Err(StreamProblem::Uncovered {
            stream: name.to_string(),
            subjects,
            filters: uncovered,
        });
    }
    Ok(StreamPlan {
        action,
        untouched,
        current: existing.cloned(),
    })
}

fn stream_rows(have: &StreamSpec, want: &StreamSpec) -> Vec<Row> {
    let mut rows = diff(
        have,
        want,
        &[
            ("storage", |s| format!("{:?}", s.storage)),
            ("replicas", |s| s.replicas.to_string()),
            ("retention", |s| format!("{:?}", s.retention)),
            ("discard", |s| format!("{:?}", s.discard)),
            ("max_age_ms", |s| s.max_age_ms.to_string()),
            ("max_msgs", |s| s.max_msgs.to_string()),
            ("max_bytes", |s| s.max_bytes.to_string()),
            ("duplicate_window_ms", |s| s.duplicate_window_ms.to_string()),
        ],
    );
    // A flag the config asks for and the stream lacks; one the stream has beyond
    // the config harms nothing and is not shown.
    for (field, has, wants) in [
        ("allow_direct", have.allow_direct, want.allow_direct),
        ("allow_atomic", have.allow_atomic, want.allow_atomic),
        ("allow_msg_ttl", have.allow_msg_ttl, want.allow_msg_ttl),
        ("allow_batched", have.allow_batched, want.allow_batched),
    ] {
        if wants && !has {
            rows.push(Row {
                field,
                current: has.to_string(),
                required: wants.to_string(),
            });
        }
    }
    rows
}

/// A field's name and how a spec shows it in a row.
type Field<T> = (&'static str, fn(&T) -> String);

/// A row for each field where `current` and `required` show differently, in the
/// fields' order.
fn diff<T>(current: &T, required: &T, fields: &[Field<T>]) -> Vec<Row> {
    fields
        .iter()
        .filter_map(|&(field, show)| {
            let (current, required) = (show(current), show(required));
            (current != required).then_some(Row {
                field,
                current,
                required,
            })
        })
        .collect()
}

/// The pinned-client priority settings of a consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Priority {
    /// The priority group (`PCG` in consumer groups).
    pub group: String,
    /// `priority_timeout`.
    pub timeout_ms: u64,
}

/// A pull consumer's configuration, as far as this daemon cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerSpec {
    /// The name.
    pub name: String,
    /// Durable (`durable_name`) or named only (`name`, reaped when inactive).
    pub durable: bool,
    /// Its filters.
    pub filter_subjects: Vec<String>,
    /// `all`, `new`, `last`, `last_per_subject`, or what the server reports.
    pub deliver_policy: String,
    /// Explicit acks.
    pub ack_explicit: bool,
    /// The ack wait.
    pub ack_wait_ms: u64,
    /// -1 = unlimited.
    pub max_deliver: i64,
    /// Unacknowledged messages at most.
    pub max_ack_pending: i64,
    /// Server-side redelivery delays.
    pub backoff_ms: Vec<u64>,
    /// The ADR-42 priority group settings, for group member consumers.
    pub priority: Option<Priority>,
    /// 0 = never reaped.
    pub inactive_threshold_ms: u64,
    /// Whether it is a pull consumer (no deliver subject).
    pub pull: bool,
}

/// One differing field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The field name, as in the consumer or stream config.
    pub field: &'static str,
    /// What the server has.
    pub current: String,
    /// What this daemon needs.
    pub required: String,
}

/// The fields where `current` differs from `required`; empty means compatible.
pub fn compare_consumer(required: &ConsumerSpec, current: &ConsumerSpec) -> Vec<Row> {
    diff(
        current,
        required,
        &[
            ("pull", |c| c.pull.to_string()),
            ("durable", |c| c.durable.to_string()),
            ("inactive_threshold_ms", |c| {
                c.inactive_threshold_ms.to_string()
            }),
            ("filter_subjects", |c| {
                let mut v = c.filter_subjects.clone();
                v.sort();
                format!("{v:?}")
            }),
            ("deliver_policy", |c| c.deliver_policy.clone()),
            ("ack_policy", |c| {
                if c.ack_explicit {
                    "explicit"
                } else {
                    "not explicit"
                }
                .into()
            }),
            ("ack_wait_ms", |c| c.ack_wait_ms.to_string()),
            ("max_deliver", |c| c.max_deliver.to_string()),
            ("max_ack_pending", |c| c.max_ack_pending.to_string()),
            ("backoff_ms", |c| format!("{:?}", c.backoff_ms)),
            ("priority", |c| match &c.priority {
                None => "none".to_string(),
                Some(p) => format!("pinned_client group {} timeout {}ms", p.group, p.timeout_ms),
            }),
        ],
    )
}

/// What to do about the consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConsumerPlan {
    /// Create it (ensure mode, missing).
    Create,
    /// It exists and matches.
    Keep,
    /// Missing, and this daemon may not create it (bind mode).
    Missing,
    /// It exists and differs: never changed; startup stops.
    Conflict(Vec<Row>),
}

/// Plans the consumer step.
pub fn plan_consumer(
    mode: ConsumerMode,
    required: &ConsumerSpec,
    current: Option<&ConsumerSpec>,
) -> ConsumerPlan {
    match (current, mode) {
        (None, ConsumerMode::Ensure) => ConsumerPlan::Create,
        (None, ConsumerMode::Bind) => ConsumerPlan::Missing,
        (Some(cur), _) => {
            let rows = compare_consumer(required, cur);
            if rows.is_empty() {
                ConsumerPlan::Keep
            } else {
                ConsumerPlan::Conflict(rows)
            }
        }
    }
}

/// Rows as an aligned table with a header, for logs and `jetrelay check`.
#[derive(Debug)]
pub struct Table<'a>(pub &'a [Row]);

impl fmt::Display for Table<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A column is as wide as its widest cell, the header's included.
        let width = |cell: fn(&Row) -> usize, header: &str| {
            self.0.iter().map(cell).fold(header.len(), usize::max)
        };
        let w0 = width(|r| r.field.len(), "field");
        let w1 = width(|r| r.current.len(), "current");
        writeln!(f, "{:<w0$}  {:<w1$}  required", "field", "current")?;
        for r in self.0 {
            writeln!(f, "{:<w0$}  {:<w1$}  {}", r.field, r.current, r.required)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(subjects: &[&str]) -> StreamSpec {
        StreamSpec {
            name: "S".into(),
            subjects: subjects.iter().map(|s| s.to_string()).collect(),
            ..StreamSpec::default()
        }
    }

    fn f(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn managed_missing_stream_is_created_from_config() {
        let want = spec(&["a.>"]);
        let plan = plan_stream("S", StreamMode::Managed, Some(&want), None, &f(&["a.b"])).unwrap();
        assert_eq!(plan.action, StreamAction::Create(want));
    }

    #[test]
    fn managed_adds_only_missing_subjects_and_keeps_the_rest() {
        let mut have = spec(&["x.>", "a.b"]);
        have.retention = Retention::Workqueue;
        have.replicas = 3;
        let want = spec(&["a.b", "b.*", "x.y"]);
        let plan = plan_stream("S", StreamMode::Managed, Some(&want), Some(&have), &[]).unwrap();
        assert_eq!(
            plan.action,
            StreamAction::AddSubjects {
                added: f(&["b.*"]),
                subjects: f(&["x.>", "a.b", "b.*"])
            }
        );
        let fields: Vec<_> = plan.untouched.iter().map(|r| r.field).collect();
        assert_eq!(fields, ["replicas", "retention"]);
    }

    #[test]
    fn managed_with_everything_present_keeps_the_stream() {
        let have = spec(&["a.>"]);
        let plan = plan_stream(
            "S",
            StreamMode::Managed,
            Some(&spec(&["a.b"])),
            Some(&have),
            &[],
        )
        .unwrap();
        assert_eq!(plan.action, StreamAction::Keep);
    }

    #[test]
    fn external_streams_are_never_created_or_changed() {
        assert_eq!(
            plan_stream("S", StreamMode::External, None, None, &[]),
            Err(StreamProblem::Missing("S".into()))
        );
        let plan = plan_stream(
            "S",
            StreamMode::External,
            None,
            Some(&spec(&["a.*"])),
            &f(&["a.b"]),
        )
        .unwrap();
        assert_eq!(plan.action, StreamAction::Keep);
        assert!(plan.untouched.is_empty());
    }

    #[test]
    fn filters_outside_the_stream_are_reported() {
        let err = plan_stream(
            "S",
            StreamMode::External,
            None,
            Some(&spec(&["a.*"])),
            &f(&["a.b", "b.c"]),
        )
        .unwrap_err();
        assert!(matches!(err, StreamProblem::Uncovered { filters, .. } if filters == f(&["b.c"])));
        let err = plan_stream(
            "S",
            StreamMode::Managed,
            Some(&spec(&["a.*"])),
            None,
            &f(&["z"]),
        )
        .unwrap_err();
        assert!(matches!(err, StreamProblem::Uncovered { .. }));
        // A stream without subjects (sourced) is not checked.
        assert!(
            plan_stream(
                "S",
                StreamMode::External,
                None,
                Some(&spec(&[])),
                &f(&["z"])
            )
            .is_ok()
        );
    }

    fn consumer() -> ConsumerSpec {
        ConsumerSpec {
            name: "c".into(),
            durable: true,
            filter_subjects: f(&["a", "b"]),
            deliver_policy: "all".into(),
            ack_explicit: true,
            ack_wait_ms: 30_000,
            max_deliver: 10,
            max_ack_pending: 256,
            backoff_ms: vec![],
            priority: None,
            inactive_threshold_ms: 0,
            pull: true,
        }
    }

    #[test]
    fn consumer_plan_table() {
        let req = consumer();
        let mut other = consumer();
        other.max_deliver = 3;
        assert_eq!(
            plan_consumer(ConsumerMode::Ensure, &req, None),
            ConsumerPlan::Create
        );
        assert_eq!(
            plan_consumer(ConsumerMode::Bind, &req, None),
            ConsumerPlan::Missing
        );
        assert_eq!(
            plan_consumer(ConsumerMode::Bind, &req, Some(&req)),
            ConsumerPlan::Keep
        );
        assert!(matches!(
            plan_consumer(ConsumerMode::Ensure, &req, Some(&other)),
            ConsumerPlan::Conflict(rows) if rows.len() == 1 && rows[0].field == "max_deliver"
        ));
    }

    #[test]
    fn consumer_compare_table() {
        let req = consumer();
        let mut same = consumer();
        same.filter_subjects = f(&["b", "a"]);
        assert!(
            compare_consumer(&req, &same).is_empty(),
            "filter order does not matter"
        );

        let mut cur = consumer();
        cur.max_ack_pending = 1000;
        cur.ack_wait_ms = 5000;
        cur.priority = Some(Priority {
            group: "PCG".into(),
            timeout_ms: 5000,
        });
        let rows = compare_consumer(&req, &cur);
        let fields: Vec<_> = rows.iter().map(|r| r.field).collect();
        assert_eq!(fields, ["ack_wait_ms", "max_ack_pending", "priority"]);
        assert_eq!(rows[1].current, "1000");
        assert_eq!(rows[1].required, "256");
        let text = Table(&rows).to_string();
        assert!(text.starts_with("field"), "{text}");
        assert!(text.contains("max_ack_pending  1000"), "{text}");
    }
}
