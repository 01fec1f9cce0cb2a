//! `[source]`: the stream and where messages come from (a durable, or a member of a
//! static or elastic group).

use serde::{Deserialize, Serialize};

use super::{Config, Problems};
use crate::subject;

/// `source.kind`
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SourceKind {
    /// A plain durable pull consumer.
    Durable,
    /// A member of a static partitioned consumer group.
    Static,
    /// A member of an elastic partitioned consumer group.
    Elastic,
}

impl SourceKind {
    /// The name as the config writes it.
    pub fn name(self) -> &'static str {
        match self {
            SourceKind::Durable => "durable",
            SourceKind::Static => "static",
            SourceKind::Elastic => "elastic",
        }
    }

    /// Whether messages carry a partition token.
    pub fn is_group(self) -> bool {
        !matches!(self, SourceKind::Durable)
    }
}

/// `[source]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SourceConfig {
    /// The stream messages come from (a group's origin stream).
    pub stream: String,
    /// Durable, static group member or elastic group member.
    pub kind: Option<SourceKind>,
    /// The consumer group (group kinds).
    pub group: String,
    /// This member (group kinds).
    pub member: String,
    /// The durable consumer's name (`durable`).
    pub durable: String,
    /// The durable consumer's filters (`durable`).
    pub filter_subjects: Vec<String>,
    /// Elastic: join the membership on start, leave it on a clean stop, keep a
    /// liveness record meanwhile.
    pub auto_join: bool,
    /// Elastic with `auto_join`: an auto-joined member silent this long is removed
    /// by the others.
    pub member_timeout_ms: u64,
}

impl Default for SourceConfig {
    fn default() -> Self {
        SourceConfig {
            stream: String::new(),
            kind: None,
            group: String::new(),
            member: String::new(),
            durable: String::new(),
            filter_subjects: Vec::new(),
            auto_join: false,
            member_timeout_ms: 30_000,
        }
    }
}

impl Config {
    pub(super) fn check_source(&self, p: &mut Problems) {
        let s = &self.source;
        // At least a few heartbeats (every third of it) before a member is pruned.
        p.range(
            "source.member_timeout_ms",
            s.member_timeout_ms,
            3000,
            super::HOUR,
        );
        if s.auto_join && s.kind != Some(SourceKind::Elastic) {
            p.add(
                "source.auto_join",
                "is only for source.kind = \"elastic\" (a static group's membership is fixed)",
            );
        }
        if s.stream.is_empty() {
            p.add("source.stream", "is required");
        } else if let Err(e) = subject::validate_name(&s.stream) {
            p.add("source.stream", e);
        }
        let Some(kind) = s.kind else {
            p.add(
                "source.kind",
                "is required: \"durable\", \"static\" or \"elastic\"",
            );
            return;
        };
        match kind {
            SourceKind::Durable => {
                if s.durable.is_empty() {
                    p.add(
                        "source.durable",
                        "is required when source.kind = \"durable\"",
                    );
                } else if let Err(e) = subject::validate_name(&s.durable) {
                    p.add("source.durable", e);
                }
                for key in [("source.group", &s.group), ("source.member", &s.member)] {
                    if !key.1.is_empty() {
                        p.add(key.0, "is only for group sources (static, elastic)");
                    }
                }
                for f in &s.filter_subjects {
                    if let Err(e) = subject::validate_filter(f) {
                        p.add("source.filter_subjects", format!("{f:?}: {e}"));
                    }
                }
                if let Some(e) = subject::first_overlap(&s.filter_subjects) {
                    p.add("source.filter_subjects", e);
                }
            }
            SourceKind::Static | SourceKind::Elastic => {
                for (key, v) in [("source.group", &s.group), ("source.member", &s.member)] {
                    if v.is_empty() {
                        p.add(key, "is required for group sources");
                    } else if let Err(e) = subject::validate_name(v) {
                        p.add(key, e);
                    }
                }
                if !s.durable.is_empty() {
                    p.add("source.durable", "is only for source.kind = \"durable\"");
                }
                if !s.filter_subjects.is_empty() {
                    p.add(
                        "source.filter_subjects",
                        "is only for source.kind = \"durable\": a group's filters are in its config",
                    );
                }
            }
        }
    }
}
