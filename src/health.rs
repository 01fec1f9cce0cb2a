//! Readiness: the daemon's state, why it is (not) ready, and the group facts shown by
//! `/ready`. Held in a `watch` so the admin endpoint and the metrics read one truth.
//! Transitions are logged once each, here.

use std::sync::Arc;

use serde::Serialize;
use tokio::sync::watch;

use crate::metrics::Metrics;

/// What the daemon is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Starting, or waiting for NATS or the topology (see the reason).
    NotReady,
    /// Pulling and delivering.
    Consuming,
    /// A hot standby of a pinned member: ready, not served.
    Standby,
    /// An elastic group member not yet in the membership.
    WaitingForMembership,
    /// A member with no partitions assigned.
    NoPartitions,
    /// Shutting down: settling what it holds.
    Draining,
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
    /// Whether NATS is connected.
    #[serde(skip)]
    pub nats_connected: bool,
}

impl Status {
    fn recompute(&mut self) {
        self.ready = self.nats_connected
            && matches!(
                self.state,
                State::Consuming
                    | State::Standby
                    | State::WaitingForMembership
                    | State::NoPartitions
            );
    }
}

/// The shared readiness handle.
#[derive(Debug, Clone)]
pub struct Health {
    tx: Arc<watch::Sender<Status>>,
    metrics: Metrics,
}

impl Health {
    /// Starts not ready.
    pub fn new(member: Option<String>, metrics: Metrics) -> Health {
        let (tx, _) = watch::channel(Status {
            ready: false,
            state: State::NotReady,
            reason: "starting".into(),
            member,
            pinned: false,
            partitions: Vec::new(),
            nats_connected: false,
        });
        Health {
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

    /// Sets the state and reason; logs the transition once. Draining is final.
    pub fn set(&self, state: State, reason: impl Into<String>) {
        let reason = reason.into();
        self.update(|s| {
            if s.state == State::Draining && state != State::Draining {
                return;
            }
            if s.state != state || s.reason != reason {
                tracing::info!(state = ?state, reason = %reason, "state changed");
            }
            s.state = state;
            s.reason = reason;
        });
    }

    /// Records whether NATS is connected.
    pub fn set_connected(&self, connected: bool) {
        self.update(|s| {
            if s.nats_connected != connected {
                if connected {
                    tracing::info!("connected to NATS");
                } else {
                    tracing::warn!("disconnected from NATS");
                }
            }
            s.nats_connected = connected;
        });
        self.metrics.nats_connected.set(i64::from(connected));
    }

    /// Records this member's partitions.
    pub fn set_partitions(&self, partitions: Vec<u32>) {
        self.metrics
            .partitions_assigned
            .set(partitions.len() as i64);
        self.update(|s| {
            if s.partitions != partitions {
                tracing::info!(partitions = ?partitions, "membership changed");
            }
            s.partitions = partitions;
        });
    }

    /// Records whether this instance holds the pin.
    pub fn set_pinned(&self, pinned: bool) {
        self.update(|s| {
            if s.pinned != pinned {
                tracing::info!(pinned, "pin changed");
            }
            s.pinned = pinned;
        });
        self.metrics.pinned.set(i64::from(pinned));
    }

    fn update(&self, f: impl FnOnce(&mut Status)) {
        self.tx.send_modify(|s| {
            f(s);
            s.recompute();
        });
        self.metrics.ready.set(i64::from(self.tx.borrow().ready));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_table() {
        let cases = [
            (State::NotReady, true, false),
            (State::Consuming, true, true),
            (State::Consuming, false, false),
            (State::Standby, true, true),
            (State::WaitingForMembership, true, true),
            (State::NoPartitions, true, true),
            (State::Draining, true, false),
        ];
        for (state, connected, ready) in cases {
            let h = Health::new(None, Metrics::new().unwrap());
            h.set_connected(connected);
            h.set(state, "");
            assert_eq!(h.status().ready, ready, "{state:?} connected={connected}");
        }
    }

    #[test]
    fn draining_is_final_and_ready_metric_follows() {
        let m = Metrics::new().unwrap();
        let h = Health::new(None, m.clone());
        h.set_connected(true);
        h.set(State::Consuming, "");
        assert_eq!(m.ready.get(), 1);
        h.set(State::Draining, "shutting down");
        h.set(State::Consuming, "");
        assert_eq!(h.status().state, State::Draining);
        assert_eq!(m.ready.get(), 0);
    }
}
