//! The message source seam: what the dispatcher pulls from. A plain durable consumer
//! is one [`Puller`]; consumer-group sources wrap pullers whose consumer changes with
//! the membership, behind the same trait.

use std::future::Future;

pub use crate::capacity::Held;
use crate::nats::{PullEvent, Puller, Settler};

/// A stream of deliveries sized by what the dispatcher holds.
pub trait Source: Send {
    /// The next event; `held` is what the dispatcher holds (messages and payload
    /// bytes), for sizing pulls. Must be cancel-safe: the dispatcher polls it inside
    /// `select!`.
    fn next(&mut self, held: Held) -> impl Future<Output = PullEvent> + Send;

    /// Stops asking for more messages (shutdown).
    fn stop(&mut self);

    /// Pauses or resumes asking for messages (the app is unhealthy).
    fn set_paused(&mut self, paused: bool);

    /// Gives up being served (a pinned member's instance unpins) so that a healthy
    /// instance takes over; pulling stays paused. Returns whether anything was given up.
    fn step_down(&mut self) -> impl Future<Output = bool> + Send;

    /// Everything held was settled or released after a `Quiesce`: the source may now
    /// replace its consumer.
    fn quiesced(&mut self) -> impl Future<Output = ()> + Send {
        std::future::ready(())
    }

    /// Releases the source; returns the settlers of messages that were delivered but
    /// never taken, for the caller to release.
    fn close(self) -> impl Future<Output = Vec<Settler>> + Send;
}

impl Source for Puller {
    fn next(&mut self, held: Held) -> impl Future<Output = PullEvent> + Send {
        Puller::next(self, held)
    }

    fn stop(&mut self) {
        Puller::stop(self);
    }

    fn set_paused(&mut self, paused: bool) {
        Puller::set_paused(self, paused);
    }

    fn step_down(&mut self) -> impl Future<Output = bool> + Send {
        Puller::step_down(self)
    }

    fn close(self) -> impl Future<Output = Vec<Settler>> + Send {
        Puller::close(self)
    }
}
