//! `[topology]`: who owns the stream and the consumer, what to do while they are
//! missing, and the complete config of a managed stream.

use serde::{Deserialize, Serialize};

use super::{Config, DAY, HOUR, Problems};
use crate::subject;
use crate::topology::{ConsumerMode, OnMissing, StreamMode, StreamSpec};

/// `[topology]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TopologyConfig {
    /// Who owns the stream.
    pub stream: StreamMode,
    /// Who owns the consumer.
    pub consumer: ConsumerMode,
    /// Wait for a missing stream or consumer, or stop.
    pub on_missing: OnMissing,
    /// The first wait for a missing topology.
    pub retry_initial_ms: u64,
    /// The longest wait.
    pub retry_max_ms: u64,
    /// The complete config of a managed stream (`[topology.managed_stream]`), named
    /// by the source's stream.
    pub managed_stream: Option<StreamSpec>,
}

impl Default for TopologyConfig {
    fn default() -> Self {
        Self {
            stream: StreamMode::External,
            consumer: ConsumerMode::Ensure,
            on_missing: OnMissing::Retry,
            retry_initial_ms: 500,
            retry_max_ms: 30_000,
            managed_stream: None,
        }
    }
}

impl Config {
    pub(super) fn check_topology(&self, p: &mut Problems) {
        let t = &self.topology;
        if self.kind().is_group() {
            // The group owns its topology: the static stream is the publisher's, the
            // elastic one is made by `jetrelay group elastic create`, and member
            // consumers are created and replaced by the group protocol.
            if t.stream == StreamMode::Managed {
                p.add(
                    "topology.stream",
                    "must be \"external\" for a group member: the group's stream is created with the group",
                );
            }
            if t.consumer == ConsumerMode::Bind {
                p.add(
                    "topology.consumer",
                    "must be \"ensure\" for a group member: the group protocol owns member consumers",
                );
            }
        }
        let initial = ("topology.retry_initial_ms", t.retry_initial_ms);
        let max = ("topology.retry_max_ms", t.retry_max_ms);
        p.ranges(&[(initial.0, initial.1, 1, HOUR), (max.0, max.1, 1, HOUR)]);
        p.at_least(max, initial, "");
        match (t.stream, &t.managed_stream) {
            (StreamMode::Managed, None) => p.add(
                "topology.managed_stream",
                "is required when topology.stream = \"managed\"",
            ),
            (StreamMode::External, Some(_)) => p.add(
                "topology.managed_stream",
                "is only for topology.stream = \"managed\"",
            ),
            (StreamMode::Managed, Some(m)) => {
                if m.subjects.is_empty() {
                    p.add(
                        "topology.managed_stream.subjects",
                        "must name at least one subject",
                    );
                }
                for s in &m.subjects {
                    if let Err(e) = subject::validate_filter(s) {
                        p.add("topology.managed_stream.subjects", format!("{s:?}: {e}"));
                    }
                }
                if !(1..=5).contains(&m.replicas) {
                    p.add(
                        "topology.managed_stream.replicas",
                        "must be between 1 and 5",
                    );
                }
                if m.max_msgs < -1 || m.max_msgs == 0 {
                    p.add(
                        "topology.managed_stream.max_msgs",
                        "must be -1 (unlimited) or positive",
                    );
                }
                if m.max_bytes < -1 || m.max_bytes == 0 {
                    p.add(
                        "topology.managed_stream.max_bytes",
                        "must be -1 (unlimited) or positive",
                    );
                }
                p.ranges(&[
                    // Ten years: beyond, a duration overflows the server's nanoseconds.
                    (
                        "topology.managed_stream.max_age_ms",
                        m.max_age_ms,
                        0,
                        3650 * DAY,
                    ),
                    (
                        "topology.managed_stream.duplicate_window_ms",
                        m.duplicate_window_ms,
                        0,
                        30 * DAY,
                    ),
                ]);
                if m.max_age_ms > 0 {
                    p.at_most(
                        (
                            "topology.managed_stream.duplicate_window_ms",
                            m.duplicate_window_ms,
                        ),
                        ("max_age_ms", m.max_age_ms),
                        "the server refuses a longer window",
                    );
                }
            }
            (StreamMode::External, None) => {}
        }
    }
}
