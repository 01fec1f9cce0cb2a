//! What decides whether work starts, and what readiness says about it: the app's
//! health (`http.health_url`), whether the app can be reached at all, and where a
//! group member stands. Pure: the dispatcher feeds it what it learns and shows what
//! [`Gate::shown`] says.

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

/// The app cannot be reached: how many times in a row, and how the last try failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Unreachable {
    pub(super) streak: u32,
    pub(super) kind: &'static str,
}

/// Whether a task's request reached the app.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reach {
    /// A connection was made (an answer, a timeout, a reset): the app is there.
    Reached,
    /// No connection could be made.
    Unreachable(&'static str),
    /// No request was made (an invalid message, a dead letter).
    NotAsked,
}

/// The gate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Gate {
    /// The health URL's verdict (always healthy without one).
    pub(super) health: Health,
    /// Set while the app cannot be reached.
    pub(super) unreachable: Option<Unreachable>,
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
            health,
            unreachable: None,
            standing: Standing::default(),
            letters_waiting: 0,
            paused: None,
        }
    }

    /// Whether the app can take work: healthy and reachable.
    pub(super) fn serviceable(&self) -> bool {
        self.health.is_healthy() && self.unreachable.is_none()
    }

    /// Records what a request taught about the app. Returns whether what is shown
    /// changes.
    pub(super) fn reached(&mut self, reach: Reach) -> bool {
        match (reach, &mut self.unreachable) {
            (Reach::Reached, Some(_)) => {
                self.unreachable = None;
                tracing::info!("the app is reachable again: resuming delivery");
                true
            }
            (Reach::Unreachable(kind), Some(u)) => {
                u.streak = u.streak.saturating_add(1);
                std::mem::replace(&mut u.kind, kind) != kind
            }
            (Reach::Unreachable(kind), None) => {
                tracing::warn!(
                    error = kind,
                    "the app is unreachable: pausing, holding what is held (kept alive), offering it again with backoff"
                );
                self.unreachable = Some(Unreachable { streak: 1, kind });
                true
            }
            (Reach::Reached | Reach::NotAsked, None) | (Reach::NotAsked, Some(_)) => false,
        }
    }

    /// How many times in a row the app could not be reached (1 when it could).
    pub(super) fn streak(&self) -> u32 {
        self.unreachable.as_ref().map_or(1, |u| u.streak)
    }

    /// What readiness shows: not ready while the app is unhealthy or unreachable or
    /// the member unavailable; a member's waiting states; standby for a pinned
    /// consumer without the pin (readiness tells standby from idle); else consuming.
    pub(super) fn shown(&self, pinned_mode: bool, pinned: bool) -> (State, String) {
        let s = &self.standing;
        if self.health == Health::Waiting {
            (
                State::NotReady,
                "waiting for the first health probe (http.health_url)".into(),
            )
        } else if self.health == Health::Unhealthy {
            (
                State::NotReady,
                "the app is not healthy (http.health_url)".into(),
            )
        } else if let Some(u) = &self.unreachable {
            (State::NotReady, format!("app unreachable: {}", u.kind))
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

    fn gate(healthy: bool, unreachable: bool, standing: Standing) -> Gate {
        Gate {
            health: if healthy {
                Health::Healthy
            } else {
                Health::Unhealthy
            },
            unreachable: unreachable.then_some(Unreachable {
                streak: 2,
                kind: "connection refused",
            }),
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

    #[test]
    fn reachability_table() {
        let mut g = gate(true, false, Standing::default());
        assert!(!g.reached(Reach::Reached), "reachable stays reachable");
        assert!(!g.reached(Reach::NotAsked));
        assert!(g.reached(Reach::Unreachable("connection refused")));
        assert_eq!((g.streak(), g.serviceable()), (1, false));
        assert!(!g.reached(Reach::Unreachable("connection refused")));
        assert!(!g.reached(Reach::NotAsked), "a dead letter proves nothing");
        assert!(
            g.reached(Reach::Unreachable("cannot connect")),
            "the reason shown changes"
        );
        assert_eq!(g.streak(), 3);
        assert!(g.reached(Reach::Reached));
        assert_eq!((g.streak(), g.serviceable()), (1, true));
    }
}
