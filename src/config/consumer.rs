//! `[consumer]`: the template of the durable or member consumer.

use serde::{Deserialize, Serialize};

use super::{Config, DAY, Problems};

/// `consumer.deliver_policy`
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum DeliverPolicy {
    #[default]
    /// Every message in the stream.
    All,
    /// Only messages stored after the consumer was created.
    New,
    /// The last message, then new ones.
    Last,
    /// The last message of each subject, then new ones.
    LastPerSubject,
}

impl DeliverPolicy {
    /// Its name, as the config and the server spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            DeliverPolicy::All => "all",
            DeliverPolicy::New => "new",
            DeliverPolicy::Last => "last",
            DeliverPolicy::LastPerSubject => "last_per_subject",
        }
    }
}

/// `[consumer]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ConsumerConfig {
    /// How long the server waits for a settle before redelivering (kept alive with `+WPI` while held).
    pub ack_wait_ms: u64,
    /// -1 = unlimited.
    pub max_deliver: i64,
    /// Where a new consumer starts.
    pub deliver_policy: DeliverPolicy,
    /// Server-side redelivery delays after `ack_wait` runs out.
    pub backoff_ms: Vec<u64>,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        Self {
            ack_wait_ms: 30_000,
            max_deliver: 10,
            deliver_policy: DeliverPolicy::All,
            backoff_ms: Vec::new(),
        }
    }
}

impl Config {
    pub(super) fn check_consumer(&self, p: &mut Problems) {
        let c = &self.consumer;
        p.range("consumer.ack_wait_ms", c.ack_wait_ms, 500, DAY);
        if c.max_deliver == 0 || c.max_deliver < -1 || c.max_deliver > 1_000_000 {
            p.add(
                "consumer.max_deliver",
                "must be -1 (unlimited) or between 1 and 1000000",
            );
        }
        if !c.backoff_ms.is_empty() {
            if c.backoff_ms.iter().any(|d| !(1..=DAY).contains(d)) {
                p.add(
                    "consumer.backoff_ms",
                    format!("every delay must be between 1 and {DAY}"),
                );
            }
            if c.backoff_ms.len() > 100 {
                p.add("consumer.backoff_ms", "at most 100 delays");
            }
            let len = i64::try_from(c.backoff_ms.len()).unwrap_or(i64::MAX);
            if c.max_deliver != -1 && c.max_deliver <= len {
                p.add(
                    "consumer.backoff_ms",
                    "needs consumer.max_deliver greater than its length (or -1)",
                );
            }
        }
    }
}
