//! The app's half of the gate: its health (`http.health_url`) and whether it can be
//! reached at all. Work starts only while it is healthy and reachable; while it is
//! unreachable, the runner offers one request at a time as a probe, holding the rest
//! with a backoff that grows with the streak. Pure: the runner feeds it the probe's
//! verdict and what each request taught ([`Reach`]); what else keeps work from
//! starting (a member's standing, a pause) is the runner's.

use crate::policy::Outcome;
use crate::seam::{Forwarded, Health};

/// The app cannot be reached: how many times in a row, and how the last try failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreachable {
    /// Requests in a row that could not connect.
    pub streak: u32,
    /// How the last one failed (`connection refused`, `cannot connect`, ...).
    pub kind: &'static str,
}

/// Whether a task's request reached the app.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// A connection was made (an answer, a timeout, a reset): the app is there.
    Reached,
    /// No connection could be made.
    Unreachable(&'static str),
    /// No request was made (an invalid message, a dead letter).
    NotAsked,
}

impl Reach {
    /// What a request's result says: unreachable (with how it failed) when no
    /// connection could be made, reached otherwise.
    pub fn of(f: &Forwarded) -> Reach {
        match (&f.outcome, &f.failure) {
            (Outcome::Unreachable, failure) => {
                Reach::Unreachable(failure.as_ref().map_or("cannot connect", |x| x.kind))
            }
            _ => Reach::Reached,
        }
    }
}

/// The app as the gate sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppGate {
    /// The health URL's verdict (always healthy without one).
    pub health: Health,
    /// Set while the app cannot be reached.
    pub unreachable: Option<Unreachable>,
}

impl AppGate {
    /// An app in this health, reachable.
    pub fn new(health: Health) -> AppGate {
        AppGate {
            health,
            unreachable: None,
        }
    }

    /// Whether the app can take work: healthy and reachable.
    pub fn serviceable(&self) -> bool {
        self.health.is_healthy() && self.unreachable.is_none()
    }

    /// Records what a request taught about the app. Returns whether what is shown
    /// changes.
    pub fn reached(&mut self, reach: Reach) -> bool {
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
    pub fn streak(&self) -> u32 {
        self.unreachable.as_ref().map_or(1, |u| u.streak)
    }

    /// Why readiness must say not ready because of the app, if it must: no health
    /// probe has answered yet, the app is not healthy, or it cannot be reached (in
    /// this order).
    pub fn not_ready(&self) -> Option<String> {
        if self.health == Health::Waiting {
            Some("waiting for the first health probe (http.health_url)".into())
        } else if self.health == Health::Unhealthy {
            Some("the app is not healthy (http.health_url)".into())
        } else {
            self.unreachable
                .as_ref()
                .map(|u| format!("app unreachable: {}", u.kind))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reachability_table() {
        let mut g = AppGate::new(Health::Healthy);
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
