//! Readiness: the daemon's state, why it is (not) ready, and the group facts shown by
//! `/ready`. Held in a `watch` so the admin endpoint and the metrics read one truth.
//!
//! The components report facts (what the supervisor or the dispatcher is doing, the
//! NATS connection, who holds a pinned consumer's pin); what `/ready` shows is derived
//! from them by one pure function, [`present`], so that it always says why: a lost
//! connection is `not_ready` with the connection's reason whatever the dispatcher was
//! doing, and an instance without the pin says whether another one holds it.
//! Transitions of what is shown are logged once each, here.

use std::sync::Arc;

use serde::Serialize;
use tokio::sync::watch;

use crate::ops::metrics::Metrics;

/// What the daemon is doing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Starting, or waiting for NATS, the topology or the app (see the reason).
    #[default]
    NotReady,
    /// Pulling and delivering.
    Consuming,
    /// A hot standby of a pinned member: another instance holds the pin.
    Standby,
    /// A pinned consumer that no instance holds the pin of (nothing was delivered
    /// yet): this instance pulls and is pinned by the next message.
    Idle,
    /// An elastic group member not yet in the membership.
    WaitingForMembership,
    /// A member with no partitions assigned.
    NoPartitions,
    /// The consumer is paused on the server (`jetrelay pause`): nothing new is
    /// delivered, held messages are kept alive until it resumes (the reason says when).
    Paused,
    /// Shutting down: settling what it holds.
    Draining,
}

impl State {
    /// Its name as `/ready` shows it.
    pub fn name(self) -> &'static str {
        match self {
            State::NotReady => "not_ready",
            State::Consuming => "consuming",
            State::Standby => "standby",
            State::Idle => "idle",
            State::WaitingForMembership => "waiting_for_membership",
            State::NoPartitions => "no_partitions",
            State::Paused => "paused",
            State::Draining => "draining",
        }
    }
}

/// Who holds the pin of a pinned consumer, as last read from the consumer's info.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PinHolder {
    /// Not read yet.
    #[default]
    Unknown,
    /// No instance holds it.
    Nobody,
    /// Some instance holds it (this one, or another).
    Someone,
}

/// What the components reported; `/ready` is derived from it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// What the supervisor or the dispatcher says it is doing.
    pub state: State,
    /// Why, in its words.
    pub reason: String,
    /// Why NATS is not connected; `None` while connected.
    pub nats_down: Option<String>,
    /// Whether this instance holds the pin.
    pub pinned: bool,
    /// Who holds the pin (pinned consumers).
    pub pin_holder: PinHolder,
}

/// The state and reason `/ready` shows for these facts. Draining wins (it is final);
/// then a NATS connection that is down; an instance that reports standby says
/// whether another instance holds the pin or nobody does.
pub fn present(f: &Facts) -> (State, String) {
    if f.state == State::Draining {
        return (State::Draining, f.reason.clone());
    }
    if let Some(why) = &f.nats_down {
        return (State::NotReady, why.clone());
    }
    if f.state == State::Standby && !f.pinned {
        return match f.pin_holder {
            PinHolder::Nobody => (
                State::Idle,
                "no instance of this member holds the pin (nothing was delivered yet); this \
                 instance pulls and takes the pin with the next message"
                    .into(),
            ),
            PinHolder::Someone => (State::Standby, "another instance holds the pin".into()),
            PinHolder::Unknown => (State::Standby, "this instance does not hold the pin".into()),
        };
    }
    (f.state, f.reason.clone())
}

/// Whether a shown state answers 200 on `/ready`.
pub fn is_ready(state: State) -> bool {
    matches!(
        state,
        State::Consuming
            | State::Standby
            | State::Idle
            | State::WaitingForMembership
            | State::NoPartitions
            | State::Paused
    )
}

/// The readiness body of `/ready`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Status {
    /// Whether `/ready` answers 200.
    pub ready: bool,
    /// What the daemon is doing.
    pub state: State,
    /// Why it is not ready (or what it waits for); empty when consuming.
    pub reason: String,
    /// The group member, in group sources.
    pub member: Option<String>,
    /// Whether this instance holds the pin.
    pub pinned: bool,
    /// This member's partitions, in group sources.
    pub partitions: Vec<u32>,
    /// Requests to the app that may run at once now (`max_in_flight`, or the
    /// adaptive limit); 0 before delivery starts.
    pub concurrency_limit: usize,
    /// What the state and reason are derived from.
    #[serde(skip)]
    pub facts: Facts,
}

/// The shared readiness handle.
#[derive(Debug, Clone)]
pub struct Readiness {
    tx: Arc<watch::Sender<Status>>,
    metrics: Metrics,
}

impl Readiness {
    /// Starts not ready, not connected.
    pub fn new(member: Option<String>, metrics: Metrics) -> Readiness {
        let facts = Facts {
            reason: "starting".into(),
            nats_down: Some("connecting to NATS".into()),
            ..Facts::default()
        };
        let (state, reason) = present(&facts);
        let (tx, _) = watch::channel(Status {
            ready: false,
            state,
            reason,
            member,
            pinned: false,
            partitions: Vec::new(),
            concurrency_limit: 0,
            facts,
        });
        Readiness {
            tx: Arc::new(tx),
            metrics,
        }
    }

    /// The current status.
    pub fn status(&self) -> Status {
        self.tx.borrow().clone()
    }

    /// A receiver that sees every change.
    pub fn subscribe(&self) -> watch::Receiver<Status> {
        self.tx.subscribe()
    }

    /// Sets what the daemon is doing and why. Draining is final.
    pub fn set(&self, state: State, reason: impl AsRef<str>) {
        let reason = reason.as_ref();
        self.update(|f| {
            if (f.state == State::Draining && state != State::Draining)
                || (f.state == state && f.reason == reason)
            {
                return false;
            }
            f.state = state;
            reason.clone_into(&mut f.reason);
            true
        });
    }

    /// Records the NATS connection: `None` when connected, else why not.
    pub fn set_nats_down(&self, why: Option<String>) {
        self.metrics.nats_connected(why.is_none());
        self.update(|f| {
            if f.nats_down == why {
                return false;
            }
            if f.nats_down.is_some() != why.is_some() {
                match &why {
                    None => tracing::info!("connected to NATS"),
                    Some(why) => tracing::warn!(reason = %why, "not connected to NATS"),
                }
            }
            f.nats_down = why;
            true
        });
    }

    /// Records who holds the pin of a pinned consumer.
    pub fn set_pin_holder(&self, holder: PinHolder) {
        self.update(|f| std::mem::replace(&mut f.pin_holder, holder) != holder);
    }

    /// Records this member's partitions.
    pub fn set_partitions(&self, partitions: Vec<u32>) {
        self.metrics.partitions_assigned(partitions.len());
        self.tx.send_if_modified(|s| {
            if s.partitions == partitions {
                return false;
            }
            tracing::info!(
                partitions = %crate::printable::list(&partitions, 32),
                "membership changed"
            );
            s.partitions = partitions;
            true
        });
    }

    /// Records the concurrency limit in force (shown, not a readiness fact).
    pub fn set_concurrency_limit(&self, limit: usize) {
        self.tx.send_if_modified(|s| {
            let changed = s.concurrency_limit != limit;
            s.concurrency_limit = limit;
            changed
        });
    }

    /// Records whether this instance holds the pin.
    pub fn set_pinned(&self, pinned: bool) {
        self.metrics.pinned(pinned);
        self.update(|f| {
            if f.pinned == pinned {
                return false;
            }
            tracing::info!(pinned, "pin changed");
            f.pinned = pinned;
            true
        });
    }

    /// Applies `change` (which says whether it changed anything) and derives what is
    /// shown.
    fn update(&self, change: impl FnOnce(&mut Facts) -> bool) {
        self.tx.send_if_modified(|s| {
            if !change(&mut s.facts) {
                return false;
            }
            let (state, reason) = present(&s.facts);
            if state != s.state || reason != s.reason {
                tracing::info!(state = state.name(), reason = %reason, "state changed");
            }
            s.state = state;
            s.reason = reason;
            s.ready = is_ready(state);
            s.pinned = s.facts.pinned;
            true
        });
        self.metrics.ready(self.tx.borrow().ready);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(state: State, nats_down: Option<&str>, pinned: bool, holder: PinHolder) -> Facts {
        Facts {
            state,
            reason: "what it said".into(),
            nats_down: nats_down.map(String::from),
            pinned,
            pin_holder: holder,
        }
    }

    #[test]
    fn what_ready_shows_table() {
        use PinHolder::*;
        use State::*;
        let said = "what it said";
        let lost = Some("NATS connection lost");
        let cases: &[(Facts, State, &str, bool)] = &[
            (
                facts(Consuming, None, false, Unknown),
                Consuming,
                said,
                true,
            ),
            (
                facts(Consuming, lost, false, Unknown),
                NotReady,
                "NATS connection lost",
                false,
            ),
            (facts(Draining, lost, false, Unknown), Draining, said, false),
            (facts(NotReady, None, false, Unknown), NotReady, said, false),
            (
                facts(Standby, None, false, Someone),
                Standby,
                "another instance holds the pin",
                true,
            ),
            (
                facts(Standby, None, false, Nobody),
                Idle,
                "no instance of this member holds the pin (nothing was delivered yet); this instance pulls and takes the pin with the next message",
                true,
            ),
            (
                facts(Standby, None, false, Unknown),
                Standby,
                "this instance does not hold the pin",
                true,
            ),
            (
                facts(
                    Standby,
                    Some("cannot connect to NATS: authorization violation"),
                    false,
                    Nobody,
                ),
                NotReady,
                "cannot connect to NATS: authorization violation",
                false,
            ),
            (
                facts(WaitingForMembership, None, false, Unknown),
                WaitingForMembership,
                said,
                true,
            ),
            (
                facts(NoPartitions, None, false, Unknown),
                NoPartitions,
                said,
                true,
            ),
        ];
        for (f, state, reason, ready) in cases {
            let (s, r) = present(f);
            assert_eq!(
                (s, r.as_str(), is_ready(s)),
                (*state, *reason, *ready),
                "{f:?}"
            );
        }
    }

    #[test]
    fn a_lost_connection_shows_why_and_the_state_comes_back_after() {
        let m = Metrics::new().unwrap();
        let h = Readiness::new(None, m.clone());
        assert_eq!(
            (h.status().state, h.status().reason.as_str()),
            (State::NotReady, "connecting to NATS")
        );
        h.set_nats_down(None);
        h.set(State::Consuming, "");
        assert!(h.status().ready);
        assert_eq!(m.sample("jetrelay_ready"), Some(1.0));
        h.set_nats_down(Some("NATS connection lost".into()));
        let s = h.status();
        assert_eq!(
            (s.ready, s.state, s.reason.as_str()),
            (false, State::NotReady, "NATS connection lost")
        );
        assert_eq!(
            (
                m.sample("jetrelay_ready"),
                m.sample("jetrelay_nats_connected")
            ),
            (Some(0.0), Some(0.0))
        );
        h.set_nats_down(None);
        assert_eq!(h.status().state, State::Consuming);
        assert_eq!(m.sample("jetrelay_ready"), Some(1.0));
    }

    #[test]
    fn draining_is_final_and_ready_metric_follows() {
        let m = Metrics::new().unwrap();
        let h = Readiness::new(None, m.clone());
        h.set_nats_down(None);
        h.set(State::Consuming, "");
        assert_eq!(m.sample("jetrelay_ready"), Some(1.0));
        h.set(State::Draining, "shutting down");
        h.set(State::Consuming, "");
        assert_eq!(h.status().state, State::Draining);
        assert_eq!(m.sample("jetrelay_ready"), Some(0.0));
    }
}
