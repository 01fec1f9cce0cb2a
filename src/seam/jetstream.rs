//! The JetStream half of the seam: where deliveries come from ([`Source`], its
//! [`Event`]s, each delivery with its [`Settle`] handle), how they are ordered
//! ([`Ordering`]), and the consumer's pause on the server ([`ServerPause`]). The NATS
//! boundary and a group member implement it; the dispatcher runs against it.

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::capacity::Held;
use crate::message::Delivery;

/// `delivery.ordering`
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Ordering {
    /// One lane per partition number.
    Partition,
    /// One lane per subject (partition token stripped).
    Subject,
    /// No order: full concurrency.
    None,
}

/// What a source has to say. `T` is its settle handle.
#[derive(Debug)]
pub enum Event<T> {
    /// A message to dispatch, with the handle that settles it.
    Message(Box<Delivery>, T),
    /// This instance became pinned (`true`) or lost its pin (`false`).
    Pinned(bool),
    /// The consumer or JetStream is gone: go back to topology.
    ConsumerGone(String),
    /// The source failed for a reason retrying cannot fix.
    Fatal(Box<dyn std::error::Error + Send + Sync>),
    /// Group sources: this member's partitions (empty = in the membership but none
    /// assigned).
    Assignment(Vec<u32>),
    /// Group sources: not (yet) in the membership; waiting.
    Waiting(String),
    /// Group sources: the assignment changes; stop starting work, settle or release
    /// what is held, then call [`Source::quiesced`] (the consumer is recreated after).
    Quiesce,
    /// Group sources: the group was deleted; drain and stop cleanly.
    Ended(String),
    /// Group sources: not serving, for a reason that may pass (the member consumer
    /// cannot be created yet, the group config cannot be followed): not ready until
    /// the next `Assignment` or `Waiting`.
    Unavailable(String),
    /// Group sources: this many messages delivered to a consumer being replaced were
    /// never taken, and were released (NAK) by the source; for the metrics.
    Released {
        /// NAKs sent.
        naked: usize,
        /// NAKs that could not be sent (the messages come back after `ack_wait`).
        failed: usize,
    },
}

/// The settle handle of one delivered message: ACK, NAK with a delay, TERM with a
/// reason, and in-progress.
pub trait Settle: Clone + Send + Sync + 'static {
    /// Why a settle failed (JetStream then redelivers after `ack_wait`).
    type Error: Display + Send;

    /// `+ACK`.
    fn ack(&self) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// `+ACK`, waiting for the server's confirmation whatever `delivery.ack` says
    /// (the input of outputs just published).
    fn ack_confirmed(&self) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// `-NAK` with a delay (zero: at once).
    fn nak(&self, delay: Duration) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// `+TERM <reason>`.
    fn term(&self, reason: &str) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// `+WPI`; `Ok(false)` when skipped (nobody could hear it).
    fn progress(&self) -> impl Future<Output = Result<bool, Self::Error>> + Send;
}

/// A stream of deliveries sized by what the dispatcher holds.
pub trait Source: Send {
    /// The settle handle of its messages.
    type Settler: Settle;

    /// The next event; `held` is what the dispatcher holds (messages and payload
    /// bytes), for sizing pulls. Must be cancel-safe: the dispatcher polls it inside
    /// `select!`.
    fn next(&mut self, held: Held) -> impl Future<Output = Event<Self::Settler>> + Send;

    /// Stops asking for more messages (shutdown).
    fn stop(&mut self);

    /// Pauses or resumes asking for messages (the app is unhealthy or unreachable).
    fn set_paused(&mut self, paused: bool);

    /// A reload: pull by these sizes from now on, and settle what comes next with
    /// confirmed acks or not.
    fn reconfigure(&mut self, limits: crate::capacity::Limits, confirmed_acks: bool) {
        let _ = (limits, confirmed_acks);
    }

    /// The consumer was resumed on the server: ask for messages now (the server does
    /// not serve pulls that waited through a pause until a new one arrives).
    fn wake(&mut self) {}

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
    fn close(self) -> impl Future<Output = Vec<Self::Settler>> + Send;
}

/// Whether the consumer is paused on the server (`jetrelay pause`, consumer PAUSE),
/// as its info last said.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ServerPause {
    /// Not paused (or not known to be).
    #[default]
    Running,
    /// Paused until this time (the server resumes it then).
    Until(::time::OffsetDateTime),
}

impl ServerPause {
    /// A pause this far ahead or more is shown as lasting until resumed: `jetrelay
    /// pause` without `--for`/`--until` pauses for [`ServerPause::INDEFINITE`].
    pub const UNTIL_RESUMED_BEYOND: ::time::Duration = ::time::Duration::days(365 * 50);

    /// How long `jetrelay pause` pauses without `--for` or `--until`.
    pub const INDEFINITE: ::time::Duration = ::time::Duration::days(365 * 100);

    /// Whether work must not start.
    pub fn is_paused(self) -> bool {
        matches!(self, ServerPause::Until(_))
    }

    /// When it resumes, in words: `until resumed`, or `until <RFC 3339>`.
    pub fn until_text(self, now: ::time::OffsetDateTime) -> String {
        match self {
            ServerPause::Running => "not paused".into(),
            ServerPause::Until(t) if t - now >= Self::UNTIL_RESUMED_BEYOND => {
                "until resumed (jetrelay resume)".into()
            }
            ServerPause::Until(t) => {
                let at = t
                    .format(&::time::format_description::well_known::Rfc3339)
                    .unwrap_or_else(|_| t.to_string());
                format!("until {at}")
            }
        }
    }
}
