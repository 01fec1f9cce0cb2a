//! Admission: whether the app may be given work now, and how fast, for whatever runs
//! requests at it: the dispatcher (JetStream deliveries) today, a NATS request/reply
//! runner tomorrow. Both apply the same gating and pacing, so both live here, not in
//! the runner: the app's half of the gate (`app`: its health and whether it can be
//! reached), the pacing (`pacing`: the limit in force, the rate limit's wait, one
//! sample per finished request) and the process's budget across sources (`budget`:
//! requests in flight together, each source's weighted share, a permit per request).
//!
//! What belongs to one runner stays with it: a group member's standing, the
//! consumer's pause on the server, dead letters waiting (`dispatch`'s gate). Nothing
//! here talks to NATS or the app: the runner feeds in what its requests taught.

pub mod app;
pub mod budget;
pub mod pacing;

pub use app::{AppGate, Reach, Unreachable};
pub use budget::{Budget, BudgetPermit, BudgetShare};
pub use pacing::{Pacing, Sample};
