//! The publish side of the seam: where the dispatcher sends a dead letter before a
//! TERM, and an answer's outputs before the input's ack; the publish endpoint sends
//! its outputs the same way. `crate::nats` implements it; the dispatcher's tests fake
//! it, so that "the PubAck before the TERM" and "the outputs before the ack" are
//! pinned in virtual time.

use std::future::Future;

use bytes::Bytes;

use crate::outputs::Output;

/// What the stream said when it stored outputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// The stream that stored them (empty when a refused duplicate batch did not say).
    pub stream: String,
    /// The stream sequence of the last one (0 when not known: a duplicate batch).
    pub seq: u64,
    /// How many messages were published.
    pub count: usize,
    /// Every one was already stored (within the duplicate window): nothing new.
    pub duplicate: bool,
}

/// Why a dead letter was not stored, as the dispatcher tells failures apart.
pub trait LetterFailure: std::error::Error + Send + Sync + 'static {
    /// The DLQ refused the letter for its size (it takes less than the server): the
    /// letter sheds its next part and is tried again.
    fn is_too_large(&self) -> bool;
}

/// Why outputs were not (all) stored, as the dispatcher and the endpoint tell
/// failures apart.
pub trait OutputFailure: std::error::Error + Send + Sync + 'static {
    /// The `reason` label of `jetrelay_publish_failures_total`.
    fn label(&self) -> &'static str;

    /// Whether trying again can never help (the same outputs would be refused again):
    /// the input fails for good.
    fn is_permanent(&self) -> bool;

    /// A message is larger than the server or the stream takes.
    fn is_too_large(&self) -> bool;

    /// Whether the same publish, tried again as it is, may succeed (NATS was
    /// unavailable, slow or busy); a refusal that stays until someone changes the
    /// stream or the request is not.
    fn retry_may_help(&self) -> bool;
}

/// Where jetrelay's own publishes go, each awaiting the stream's PubAck.
pub trait Publish: Send + Sync + 'static {
    /// Why a dead letter was not stored.
    type LetterError: LetterFailure;
    /// Why outputs were not stored.
    type OutputError: OutputFailure;

    /// The largest message (headers and payload) the server takes.
    fn max_payload(&self) -> usize;

    /// Publishes one dead letter to `subject` and awaits its PubAck; a duplicate
    /// PubAck counts only when what is stored under the id is this letter.
    fn dead_letter(
        &self,
        subject: &str,
        headers: &[(String, String)],
        payload: Bytes,
    ) -> impl Future<Output = Result<(), Self::LetterError>> + Send;

    /// Publishes outputs that already carry their ids: several as one atomic batch
    /// when `atomic`, else one by one.
    fn outputs(
        &self,
        outputs: &[Output],
        atomic: bool,
    ) -> impl Future<Output = Result<Committed, Self::OutputError>> + Send;
}
