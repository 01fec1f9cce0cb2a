//! The NATS boundary: the only module that names `async_nats` types. async-nats itself
//! is vendored with fixes (`vendor/async-nats`, `vendor/README.md`).
//!
//! - `connect`: connection options from `[nats]`, and the connection state as a
//!   `watch` of [`ConnState`] (the client's own reconnect is used; there is no second
//!   reconnect loop here).
//! - `streams`: reads streams and consumers into the pure types of
//!   `crate::topology`, and carries out the additive plan.
//! - `groups`: the consumer-group streams, member consumer states and unpin.
//! - `kv`: the group config buckets (compare-and-set writes, watch).
//! - `lag`: what `jetrelay scaler` reads: consumer info, a stream's messages under
//!   filters, an elastic group's work-queue stream.
//! - `liveness`: auto-joined members' heartbeats (per-key TTLs) and markers.
//! - `markers`: the idempotency markers ([`MarkerStore`], per-key TTLs), behind
//!   `crate::seam::markers`.
//! - `pull`: the pull engine ([`Puller`]): own pull requests with `group` and pin `id`,
//!   sized by `crate::capacity`, on one wildcard inbox.
//! - `settle`: [`Settler`], the one handle that acks, naks, terms or sends progress.
//! - `dead_letters`: dead letters published, their PubAck awaited and checked.
//! - `direct`: batch direct get, pages of a stream without a consumer.
//! - `pause`: consumer pause on the server (2.11+): pause, resume, read.
//! - `outputs`: the app's outputs, one by one or as one atomic batch (ADR-50).
//! - `publisher`: [`Publisher`], both behind the publish seam (`crate::seam::publish`).
//! - `fast`: fast-ingest batches (ADR-50, 2.14+): not atomic, paced by flow acks.
//! - `service`: a service source's requests (queue subscriptions per endpoint,
//!   joined and left) and replies.
//! - `error`: [`NatsError`], the failures at this boundary that are not topology.

mod connect;
mod dead_letters;
mod direct;
mod discovery;
mod error;
mod fast;
mod groups;
mod kv;
mod lag;
mod liveness;
mod markers;
mod outputs;
mod pause;
mod publisher;
mod pull;
mod replay;
mod service;
mod settle;
mod streams;

pub use connect::{Auth, ConnState, Connection, Nats, Tls};
pub use direct::{DirectError, Page, PageRequest};
pub use error::{Cause, NatsError, TopologyError};
pub use fast::{FAST_FLOW, FastCommitted, FastError, FastFailed, FastPublisher};
pub use groups::{ConsumerState, GroupStreamSpec};
pub use kv::{GroupStore, KvEvent, KvWatch, KvWriteError};
pub use lag::{LagError, WorkQueue};
pub use liveness::{LIVENESS_BUCKET, LivenessStore};
pub use markers::{MarkerBucket, MarkerStore};
pub use outputs::{OutputError, OutputPublisher};
pub use pause::PauseAnswer;
pub use publisher::Publisher;
pub use pull::{PullEvent, Puller, PullerConfig};
pub use replay::ReplayFacts;
pub use service::{ServiceReplier, ServiceRequests};
pub use settle::Settler;
pub use streams::{Bound, ConsumerCounts, GroupConsumer, Listed, Tail};

/// What the (patched) client says was wrong with a message it could not take as it
/// is (vendor/README.md): its header block (delivered with the lines that parsed), or
/// a subject that is not UTF-8 (delivered with those bytes replaced by U+FFFD).
fn malformed(m: &async_nats::Message) -> Option<crate::message::Flaw> {
    use crate::message::Flaw;
    let d = m.description.as_deref()?;
    if let Some(why) = d.strip_prefix("malformed headers: ") {
        return Some(Flaw::MalformedHeaders(why.to_string()));
    }
    d.strip_prefix("malformed subject: ")
        .map(|why| Flaw::MalformedSubject(why.to_string()))
}
