//! The request/reply half of the seam, for a source of kind `service`: where NATS
//! requests come from ([`Requests`]: the next request of any endpoint, joining and
//! leaving the queue group), where replies go ([`Replier`]), and the app's side of
//! one request ([`Exchange`]: one POST whose answer is kept to be replied with). The
//! NATS boundary implements the first two, the HTTP boundary the third; the service
//! runner runs against the traits, and its tests against fakes.

use std::future::Future;

use bytes::Bytes;

use crate::app::answer::KeptAnswer;
use crate::app::headers::TraceHeaders;
use crate::message::Message;
use crate::seam::Forwarded;

/// One request as the runner receives it.
#[derive(Debug, Clone)]
pub struct ServiceRequest {
    /// Which endpoint's subscription it came on (the index in the service's list).
    pub endpoint: usize,
    /// The request: its subject, headers and payload.
    pub message: Message,
    /// Where the reply goes (`None`: a plain publish, nobody waits for an answer).
    pub reply: Option<String>,
    /// What was wrong with its header block, when the client could not take it as
    /// it is (a bad name, a line without `:`, a CR or LF alone): the request is
    /// answered 400 without asking the app.
    pub malformed: Option<Box<str>>,
}

/// A reply: headers and a body.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Response {
    /// Its headers, in order.
    pub headers: Vec<(String, String)>,
    /// Its body.
    pub body: Bytes,
}

/// Why the queue group could not be joined.
pub type JoinError = Box<dyn std::error::Error + Send + Sync>;

/// Where a service's requests come from: the subscriptions of its endpoints in its
/// queue group.
pub trait Requests: Send + 'static {
    /// Where replies are sent.
    type Replier: Replier;

    /// The reply handle, for the requests' tasks.
    fn replier(&self) -> Self::Replier;

    /// Subscribes every endpoint in the queue group (nothing when it is joined).
    fn join(&mut self) -> impl Future<Output = Result<(), JoinError>> + Send;

    /// Leaves the queue group: the server sends no more, and what was already sent to
    /// this instance still comes from [`Requests::next`], then `None`.
    fn leave(&mut self) -> impl Future<Output = ()> + Send;

    /// The next request; `None` once the instance has left and what was sent before
    /// has been taken (or when it never joined). Cancel-safe.
    fn next(&mut self) -> impl Future<Output = Option<ServiceRequest>> + Send;
}

/// Sends replies.
pub trait Replier: Clone + Send + Sync + 'static {
    /// Sends `reply` to `to`; false when it could not be sent (the connection is
    /// down: the requester times out, as it would with any lost reply).
    fn reply(&self, to: String, reply: Response) -> impl Future<Output = bool> + Send;
}

/// One request as the app is asked it.
#[derive(Debug, Clone, Copy)]
pub struct Question<'a> {
    /// The request.
    pub message: &'a Message,
    /// The endpoint's name (`Nats-Service-ServiceEndpoint`).
    pub endpoint: &'a str,
    /// jetrelay's span's context, when it exports spans.
    pub trace: Option<TraceHeaders<'a>>,
    /// The longest body kept (`max_reply_bytes`).
    pub max_body: usize,
}

/// The app's side of one request: one POST, its answer kept.
pub trait Exchange: Send + Sync + 'static {
    /// Asks the app once: the answer (status, headers, a body up to
    /// `question.max_body`), or `None` with `Forwarded` saying why none came.
    fn exchange(
        &self,
        question: Question<'_>,
    ) -> impl Future<Output = (Forwarded, Option<KeptAnswer>)> + Send;
}
