//! The vocabulary the dispatcher and the boundaries share, and nothing else, in two
//! halves: `jetstream`, per delivery (where deliveries come from: [`Source`], each
//! delivery with a [`Settle`] handle, as [`Event`]s; how they are ordered,
//! [`Ordering`]; the consumer's pause on the server), and `app`, transport-neutral
//! (where messages go: [`Forward`], answered as [`Forwarded`]; the app's [`Health`]),
//! so that a runner of NATS requests, which are not deliveries, forwards through the
//! same seam. Besides: where jetrelay's own publishes go (`publish`: dead letters and
//! outputs), where the idempotency markers live (`markers`), NATS requests and their replies (`service`), and the shared clocks (`time`: the shutdown deadline). The NATS boundary
//! implements the sources, the settle handles and the publisher, the HTTP boundary
//! the forwarder; the dispatcher runs against the traits, and its tests against fakes
//! of all of them.

pub mod app;
pub mod jetstream;
pub mod markers;
pub mod publish;
pub mod service;
pub mod time;

pub use app::{BatchForwarded, Forward, Forwarded, Health, HttpClass, NoAnswer, Offer};
pub use jetstream::{Event, Ordering, ServerPause, Settle, Source};
