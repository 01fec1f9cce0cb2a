//! What decides whether work starts, and what readiness says about it: the app's
//! half (its health and whether it can be reached: `crate::admission::app`, shared
//! with any other runner), and the dispatcher's own: where a group member stands,
//! the consumer's pause on the server, dead letters waiting. Pure: the dispatcher
//! feeds it what it learns and shows what [`Gate::shown`] says.

use crate::admission::AppGate;
use crate::ops::readiness::State;
use crate::seam::Health;

/// Where a group member stands.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Standing {
    /// Not in the membership (elastic): why.
    pub(super) waiting: Option<String>,
    /// The assigned partitions, once known.
    pub(super) assignment: Option<Vec<u32>>,
    /// Not serving for a reason that may pass: why.
    pub(super) unavailable: Option<String>,
}

/// The gate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Gate {
    /// The app's health and reachability.
    pub(super) app: AppGate,
    pub(super) standing: Standing,
    /// Messages kept only for their dead letter, which the DLQ does not store yet.
    pub(super) letters_waiting: usize,
    /// The consumer is paused on the server: why, and until when (nothing starts).
    pub(super) paused: Option<String>,
}

impl Gate {
    /// A gate for an app in this health, reachable, of a member that stands nowhere yet.
    pub(super) fn new(health: Health) -> Gate {
        Gate {
            app: AppGate::new(health),
            standing: Standing::default(),
            letters_waiting: 0,
            paused: None,
        }
    }

    /// What readiness shows: not ready while the app is unhealthy or unreachable or
    /// the member unavailable; a member's waiting states; standby for a pinned
    /// consumer without the pin (readiness tells standby from idle); else consuming.
    pub(super) fn shown(&self, pinned_mode: bool, pinned: bool) -> (State, String) {
        let s = &self.standing;
        if let Some(why) = self.app.not_ready() {
            (State::NotReady, why)
        } else if let Some(why) = &s.unavailable {
            (State::NotReady, why.clone())
        } else if let Some(why) = &self.paused {
            (State::Paused, why.clone())
        } else if let Some(why) = &s.waiting {
            (State::WaitingForMembership, why.clone())
        } else if s.assignment.as_ref().is_some_and(Vec::is_empty) {
            (
                State::NoPartitions,
                "no partitions are assigned to this member".into(),
            )
        } else if pinned_mode && !pinned {
            (State::Standby, String::new())
        } else if self.letters_waiting > 0 {
            // Still consuming (and ready): what waits is bounded, the rest flows.
            (
                State::Consuming,
                format!(
                    "{} message(s) wait for their dead letter: the DLQ does not store it yet",
                    self.letters_waiting
                ),
            )
        } else {
            (State::Consuming, String::new())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::Unreachable;

    fn gate(healthy: bool, unreachable: bool, standing: Standing) -> Gate {
        Gate {
            app: AppGate {
                health: if healthy {
                    Health::Healthy
                } else {
                    Health::Unhealthy
                },
                unreachable: unreachable.then_some(Unreachable {
                    streak: 2,
                    kind: "connection refused",
                }),
            },
            standing,
            letters_waiting: 0,
            paused: None,
        }
    }

    #[test]
    fn what_is_shown_table() {
        let none = Standing::default();
        let waiting = Standing {
            waiting: Some("not a member".into()),
            ..Standing::default()
        };
        let no_partitions = Standing {
            assignment: Some(vec![]),
            ..Standing::default()
        };
        let unavailable = Standing {
            unavailable: Some("config changed".into()),
            assignment: Some(vec![1]),
            ..Standing::default()
        };
        let cases = [
            (
                gate(true, false, none.clone()),
                false,
                false,
                State::Consuming,
                "",
            ),
            (
                gate(true, false, none.clone()),
                true,
                true,
                State::Consuming,
                "",
            ),
            (
                gate(true, false, none.clone()),
                true,
                false,
                State::Standby,
                "",
            ),
            (
                gate(false, true, none.clone()),
                false,
                false,
                State::NotReady,
                "the app is not healthy (http.health_url)",
            ),
            (
                gate(true, true, waiting.clone()),
                false,
                false,
                State::NotReady,
                "app unreachable: connection refused",
            ),
            (
                gate(true, false, waiting),
                true,
                false,
                State::WaitingForMembership,
                "not a member",
            ),
            (
                gate(true, false, no_partitions),
                true,
                false,
                State::NoPartitions,
                "no partitions are assigned to this member",
            ),
            (
                gate(true, false, unavailable),
                true,
                true,
                State::NotReady,
                "config changed",
            ),
        ];
        let waiting_for_a_probe = Gate::new(Health::Waiting);
        let letters = Gate {
            letters_waiting: 3,
            ..Gate::new(Health::Healthy)
        };
        let paused = |healthy, standing| Gate {
            paused: Some("paused on the server until resumed".into()),
            ..gate(healthy, false, standing)
        };
        let cases: Vec<_> = cases
            .into_iter()
            .chain([
                // Paused is shown on every instance, standby or not, but an app that
                // is not healthy still says so.
                (
                    paused(true, Standing::default()),
                    true,
                    false,
                    State::Paused,
                    "paused on the server until resumed",
                ),
                (
                    paused(true, Standing::default()),
                    false,
                    false,
                    State::Paused,
                    "paused on the server until resumed",
                ),
                (
                    paused(false, Standing::default()),
                    false,
                    false,
                    State::NotReady,
                    "the app is not healthy (http.health_url)",
                ),
                (
                    waiting_for_a_probe,
                    false,
                    false,
                    State::NotReady,
                    "waiting for the first health probe (http.health_url)",
                ),
                (
                    letters,
                    false,
                    false,
                    State::Consuming,
                    "3 message(s) wait for their dead letter: the DLQ does not store it yet",
                ),
            ])
            .collect();
        for (g, pinned_mode, pinned, state, reason) in cases {
            assert_eq!(
                g.shown(pinned_mode, pinned),
                (state, reason.to_string()),
                "{g:?} pinned_mode={pinned_mode} pinned={pinned}"
            );
        }
    }
}
