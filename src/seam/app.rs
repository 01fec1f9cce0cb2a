//! The transport-neutral half of the seam: where messages go. [`Forward`] offers a
//! message to the app ([`Offer`]: a JetStream delivery or a plain message, such as a
//! NATS request) and answers with what the app said ([`Forwarded`],
//! [`BatchForwarded`], [`NoAnswer`], [`HttpClass`]); [`Health`] is what the health
//! URL says. Nothing here is per delivery: no settle handle, no source.

use std::future::Future;
use std::time::Duration;

use crate::app::batch::Answer;
use crate::app::headers::TraceHeaders;
use crate::message::Offered;
use crate::outputs::{Output, Refusal};
use crate::policy::Outcome;

/// One message offered to the app: the message (a JetStream delivery, or a plain
/// message), its attempt (in-place retries counted), and the trace context its
/// request carries instead of the message's own (with span export on).
#[derive(Debug, Clone, Copy)]
pub struct Offer<'a> {
    /// The message, with its JetStream metadata when it is a delivery.
    pub offered: Offered<'a>,
    /// Deliveries plus in-place retries.
    pub attempt: u32,
    /// jetrelay's span's context, when it exports spans.
    pub trace: Option<TraceHeaders<'a>>,
    /// `<stream>:<sequence>` of the message its idempotency key's marker records,
    /// when that is another message (`unknown`: a marker jetrelay did not write):
    /// sent as `Jetrelay-Idempotency-Conflict`.
    pub conflict: Option<&'a str>,
}

/// Where messages go: one request to the app per call.
pub trait Forward: Send + Sync + 'static {
    /// Offers one message to the app, once.
    fn forward(&self, offer: Offer<'_>) -> impl Future<Output = Forwarded> + Send;

    /// Offers a batch in one request, once; `trace` is the request's own context
    /// (each message's is in the document).
    fn forward_batch(
        &self,
        offers: &[Offer<'_>],
        trace: Option<TraceHeaders<'_>>,
    ) -> impl Future<Output = BatchForwarded> + Send;
}

/// The result of one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forwarded {
    /// What happened, for the policy.
    pub outcome: Outcome,
    /// The metric class.
    pub class: HttpClass,
    /// Message headers not sent because they are not valid HTTP.
    pub skipped_headers: usize,
    /// Message trace headers not sent: over the W3C limits, or malformed.
    pub trace_dropped: crate::trace::context::Dropped,
    /// Time from sending to the answer (or failure).
    pub elapsed: Duration,
    /// A `Jetrelay-Action` value that was not understood (it is ignored).
    pub bad_action: bool,
    /// Why no answer came, when none did.
    pub failure: Option<NoAnswer>,
    /// A 2xx answer that publishes: its outputs, or why they cannot be.
    pub outputs: Option<Result<Vec<Output>, Refusal>>,
}

#[cfg(test)]
impl Forwarded {
    /// A fake's attempt: every header sent, none understood wrongly, nothing to
    /// publish; `failure` the kind of a request without an answer (no cause).
    pub(crate) fn fake(
        outcome: Outcome,
        class: HttpClass,
        elapsed: Duration,
        failure: Option<&'static str>,
    ) -> Forwarded {
        Forwarded {
            outcome,
            class,
            skipped_headers: 0,
            trace_dropped: Default::default(),
            elapsed,
            bad_action: false,
            failure: failure.map(|kind| NoAnswer {
                kind,
                cause: String::new(),
            }),
            outputs: None,
        }
    }
}

/// The result of one batch request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchForwarded {
    /// The request's own result (its status, or why there was none).
    pub forwarded: Forwarded,
    /// The per-message answer of a 2xx.
    pub answer: Option<Answer>,
}

/// Why a request got no answer: a short kind for logs, and the innermost cause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoAnswer {
    /// `connection refused`, `cannot connect`, `connection reset`, `connection
    /// closed`, `timeout`, `request failed`, ...
    pub kind: &'static str,
    /// The innermost error's text (never the app's body).
    pub cause: String,
}

/// What the health URL says of the app.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// No probe has answered yet: nothing is pulled until one does.
    Waiting,
    /// Healthy (always, without a health URL).
    Healthy,
    /// `http.health_threshold` probes in a row failed.
    Unhealthy,
}

impl Health {
    /// Its name for a log line.
    pub fn name(self) -> &'static str {
        match self {
            Health::Waiting => "waiting",
            Health::Healthy => "healthy",
            Health::Unhealthy => "unhealthy",
        }
    }

    /// Whether work may start.
    pub fn is_healthy(self) -> bool {
        self == Health::Healthy
    }
}

/// The HTTP result classes, as the `class` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpClass {
    /// A status, by its first digit (1 counts as 3xx: neither success nor failure).
    Status(u16),
    /// Connection refused, reset, or the request could not be sent.
    Error,
    /// No answer in time.
    Timeout,
}
