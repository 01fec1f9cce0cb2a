//! What `jetrelay scaler` answers on `/v1/lag`, as pure functions: a source's lag
//! from the figures read on the server (a consumer's counts, or the messages under
//! its filters when it does not exist yet; an elastic group's work-queue stream),
//! and the whole answer, which is an error as soon as one source could not be read
//! (KEDA then keeps the replicas it has). The reading is `crate::cli::scaler`'s, the
//! serving `crate::serve::scaler`'s; [`Lags`] is what one hands the other.

use std::collections::BTreeMap;

use futures::future::BoxFuture;
use serde::Serialize;

/// Whether a source's consumer (every member's, for a group) exists on the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Presence {
    /// It exists: its figures are its own.
    Present,
    /// It does not (yet): the figures are the stream's messages under its filters.
    Missing,
}

/// One source's lag: `lag` = `pending` + `ack_pending`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SourceLag {
    /// What KEDA scales on.
    pub lag: u64,
    /// Messages not yet delivered.
    pub pending: u64,
    /// Messages delivered and not yet acknowledged.
    pub ack_pending: u64,
    /// Whether the consumer exists.
    pub consumer: Presence,
}

/// One consumer as read on the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Consumer {
    /// Its info (from its leader): pending and ack pending.
    Read {
        /// `num_pending`.
        pending: u64,
        /// `num_ack_pending`.
        ack_pending: u64,
    },
    /// It does not exist: the stream's messages under its filters.
    Missing {
        /// What it would have pending once created.
        under_filters: u64,
    },
}

impl SourceLag {
    /// A durable's lag (one consumer), or a static group's (the sum over its members'
    /// consumers: `Missing` when any of them is).
    pub fn of(consumers: &[Consumer]) -> SourceLag {
        let (mut pending, mut ack_pending, mut consumer) = (0u64, 0u64, Presence::Present);
        for c in consumers {
            match *c {
                Consumer::Read {
                    pending: p,
                    ack_pending: a,
                } => {
                    pending = pending.saturating_add(p);
                    ack_pending = ack_pending.saturating_add(a);
                }
                Consumer::Missing { under_filters } => {
                    pending = pending.saturating_add(under_filters);
                    consumer = Presence::Missing;
                }
            }
        }
        SourceLag {
            lag: pending.saturating_add(ack_pending),
            pending,
            ack_pending,
            consumer,
        }
    }

    /// An elastic group's lag: the messages of its work-queue stream, which keeps a
    /// message until it is acknowledged, so that they are the whole backlog, the
    /// delivered and unacknowledged among them (the member consumers' `ack_pending`,
    /// summed) included. `members` is how many member consumers exist (none: scaled
    /// to zero, `Missing`).
    pub fn elastic(stream_messages: u64, ack_pending: u64, members: usize) -> SourceLag {
        let ack_pending = ack_pending.min(stream_messages);
        SourceLag {
            lag: stream_messages,
            pending: stream_messages - ack_pending,
            ack_pending,
            consumer: if members == 0 {
                Presence::Missing
            } else {
                Presence::Present
            },
        }
    }
}

/// `/v1/lag`: every source's lag and their sum.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LagReport {
    /// The sum over the sources.
    pub lag: u64,
    /// By source name.
    pub sources: BTreeMap<String, SourceLag>,
}

/// `/v1/lag` when a source could not be read: why, by source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unread {
    /// One line: how many sources failed, and the first.
    pub error: String,
    /// Why each source failed, by name.
    pub errors: BTreeMap<String, String>,
}

/// The answer from every source's read: the report when every source was read,
/// else what failed (a partial sum would look like a lag that went down).
///
/// # Errors
/// [`Unread`] when any source failed.
pub fn report(read: BTreeMap<String, Result<SourceLag, String>>) -> Result<LagReport, Unread> {
    let total = read.len();
    let mut sources = BTreeMap::new();
    let mut errors = BTreeMap::new();
    for (name, r) in read {
        match r {
            Ok(lag) => {
                sources.insert(name, lag);
            }
            Err(why) => {
                errors.insert(name, why);
            }
        }
    }
    if let Some((name, why)) = errors.iter().next() {
        return Err(Unread {
            error: format!(
                "{} of {total} source(s) could not be read; {name}: {why}",
                errors.len()
            ),
            errors,
        });
    }
    Ok(LagReport {
        lag: sources
            .values()
            .fold(0u64, |sum, s| sum.saturating_add(s.lag)),
        sources,
    })
}

/// What a source name in `?source=` is to the scaler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Known {
    /// A source with a lag.
    Lagging,
    /// A service source: it consumes no stream and has no lag (left out).
    Service,
    /// No source of the config.
    Unknown,
}

/// The sources' lag, read on demand: what the scaler's server is given.
pub trait Lags: std::fmt::Debug + Send + Sync + 'static {
    /// The names of the sources with a lag (service sources left out), in order.
    fn names(&self) -> &[String];
    /// What `name` is.
    fn known(&self, name: &str) -> Known;
    /// One source's lag (or why it cannot be read now, one line).
    fn read<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<SourceLag, String>>;
    /// Why the scaler is not ready (not connected to NATS); `None` when it is.
    fn not_ready(&self) -> Option<String>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(pending: u64, ack_pending: u64) -> Consumer {
        Consumer::Read {
            pending,
            ack_pending,
        }
    }

    fn lag(lag: u64, pending: u64, ack_pending: u64, consumer: Presence) -> SourceLag {
        SourceLag {
            lag,
            pending,
            ack_pending,
            consumer,
        }
    }

    #[test]
    fn the_lag_of_consumers_table() {
        use Presence::{Missing, Present};
        let missing = |n| Consumer::Missing { under_filters: n };
        let cases = [
            // A durable.
            (vec![read(7, 3)], lag(10, 7, 3, Present)),
            (vec![read(0, 0)], lag(0, 0, 0, Present)),
            // A durable not created yet: the messages under its filters.
            (vec![missing(42)], lag(42, 42, 0, Missing)),
            // A static group: the sum over its members.
            (vec![read(5, 1), read(2, 2)], lag(10, 7, 3, Present)),
            (vec![read(5, 1), missing(4)], lag(10, 9, 1, Missing)),
            // A group whose membership is empty.
            (vec![], lag(0, 0, 0, Present)),
            // Saturating, never wrapping.
            (
                vec![read(u64::MAX, 1), read(1, 0)],
                lag(u64::MAX, u64::MAX, 1, Present),
            ),
        ];
        for (consumers, want) in cases {
            assert_eq!(SourceLag::of(&consumers), want, "{consumers:?}");
        }
    }

    #[test]
    fn the_lag_of_an_elastic_group_table() {
        use Presence::{Missing, Present};
        // (stream messages, members' ack pending, member consumers, want)
        let cases = [
            (10, 3, 2, lag(10, 7, 3, Present)),
            (10, 0, 0, lag(10, 10, 0, Missing)),
            (0, 0, 1, lag(0, 0, 0, Present)),
            // Read a moment apart: an ack pending above the messages is cut to them.
            (2, 5, 1, lag(2, 0, 2, Present)),
        ];
        for (messages, ack, members, want) in cases {
            assert_eq!(
                SourceLag::elastic(messages, ack, members),
                want,
                "{messages} {ack} {members}"
            );
        }
    }

    #[test]
    fn the_report_is_the_sum_or_what_failed() {
        let one = lag(4, 3, 1, Presence::Present);
        let two = lag(6, 6, 0, Presence::Missing);
        let r = report(BTreeMap::from([
            ("a".to_string(), Ok(one)),
            ("b".to_string(), Ok(two)),
        ]))
        .unwrap();
        assert_eq!(r.lag, 10);
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            serde_json::json!({"lag": 10, "sources": {
                "a": {"lag": 4, "pending": 3, "ack_pending": 1, "consumer": "present"},
                "b": {"lag": 6, "pending": 6, "ack_pending": 0, "consumer": "missing"},
            }})
        );
        let failed = report(BTreeMap::from([
            ("a".to_string(), Ok(one)),
            ("b".to_string(), Err("timed out".to_string())),
        ]))
        .unwrap_err();
        assert_eq!(
            failed.error,
            "1 of 2 source(s) could not be read; b: timed out"
        );
        assert_eq!(failed.errors.len(), 1);
        let none = report(BTreeMap::new()).unwrap();
        assert_eq!((none.lag, none.sources.len()), (0, 0));
    }
}
