//! An answer's outputs: a message the app acked with outputs is acked only after they
//! are stored. The outputs are checked against `[publish]`, given their ids
//! (`jetrelay:<stream>:<consumer>:<sequence>:<i>`), published (one atomic batch, or one by one),
//! and then the input is acked, confirmed. A redelivered input re-sends the same ids
//! and learns that they were stored already, so the outputs are stored once within
//! the target stream's duplicate window.

use super::Dispatch;
use crate::message::Delivery;
use crate::ops::telemetry::chain;
use crate::outputs::{self, Output, Refusal, Rules};
use crate::policy::{Disposition, TermReason};
use crate::seam::Forward;
use crate::seam::markers::Markers;
use crate::seam::publish::{OutputFailure, Publish};
use crate::trace::context::{self, SpanContext};

/// What an answer's outputs must meet, and how they are published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputRules {
    /// `publish.allowed_subjects`, `max_messages`, `max_bytes`.
    pub rules: Rules,
    /// `publish.atomic`.
    pub atomic: bool,
}

/// What becomes of a message the app acked with outputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Commit {
    /// Stored (or nothing to store): ack; confirmed when something was published.
    Ack {
        /// Wait for the server's confirmation of the ack.
        confirmed: bool,
    },
    /// Not stored: this instead (a retry, or a permanent failure).
    Instead(Disposition),
}

impl<F: Forward, P: Publish, M: Markers> Dispatch<F, P, M> {
    /// Publishes the outputs of a message the app acked on its `attempt`-th try.
    pub(super) async fn commit(
        &self,
        d: &Delivery,
        outputs: Result<Vec<Output>, Refusal>,
        attempt: u32,
        trace: Option<&SpanContext>,
    ) -> Commit {
        let no_rules = Rules {
            allowed: Vec::new(),
            max_messages: 0,
            max_bytes: 0,
        };
        let live = self.live();
        let rules = live.outputs.as_ref().map_or(&no_rules, |o| &o.rules);
        let mut outputs = match outputs.and_then(|o| rules.check(&o).map(|()| o)) {
            Ok(o) if o.is_empty() => return Commit::Ack { confirmed: false },
            Ok(o) => o,
            Err(refusal) => return self.refused(d, refusal.label(), refusal.to_string()),
        };
        let Some(publishing) = &live.outputs else {
            // An empty rule set refuses every subject: not reached.
            return self.refused(d, "not_allowed", "publishing is off".into());
        };
        let (stream, consumer) = d
            .meta
            .as_ref()
            .map_or(("", ""), |m| (m.stream.as_str(), m.consumer.as_str()));
        outputs::identify(&mut outputs, stream, consumer, d.stream_seq());
        // The outputs continue the trace: under a PRODUCER span of the delivery's
        // (export on), else the input's own context.
        let span = trace.map(|t| {
            let subjects: Vec<&str> = outputs.iter().map(|o| o.subject.as_str()).collect();
            self.tracer.publish(t, &subjects)
        });
        // The input's trace headers as bounded for the app: an oversized or
        // malformed one is not carried either (counted with the request).
        let own = context::inbound(
            d.message
                .headers
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_str())),
        );
        match &span {
            Some(s) => {
                let tp = s.traceparent();
                let state = s.context().tracestate.as_deref();
                outputs::carry_trace(&mut outputs, &tp, state, own.baggage.as_deref());
            }
            None => {
                if let Some(tp) = own.traceparent {
                    outputs::carry_trace(
                        &mut outputs,
                        tp,
                        own.tracestate.as_deref(),
                        own.baggage.as_deref(),
                    );
                }
            }
        }
        let published = self.publisher.outputs(&outputs, publishing.atomic).await;
        if let Some(s) = span {
            let error = published.as_ref().err().map(|e| chain(e));
            self.tracer.end(s, error);
        }
        match published {
            Ok(c) => {
                if c.duplicate {
                    tracing::info!(
                        stream_seq = d.stream_seq(),
                        outputs = c.count,
                        "the outputs were stored before (a redelivery): not stored again"
                    );
                } else {
                    self.metrics.published(c.count as u64);
                }
                Commit::Ack { confirmed: true }
            }
            Err(e) if e.is_permanent() => self.refused(d, e.label(), e.to_string()),
            Err(e) => self.publish_failed(d, &e, attempt),
        }
    }

    /// A permanent failure: dead letter (when configured), then TERM.
    fn refused(&self, d: &Delivery, label: &'static str, why: String) -> Commit {
        self.metrics.publish_failed(label);
        tracing::error!(
            stream_seq = d.stream_seq(),
            reason = label,
            error = %why,
            "the app's outputs cannot be published: the input fails for good"
        );
        Commit::Instead(Disposition::Term {
            reason: TermReason::PublishRefused(why),
        })
    }

    /// A failure that may pass: the input is retried, nothing acked.
    fn publish_failed(&self, d: &Delivery, e: &P::OutputError, attempt: u32) -> Commit {
        self.metrics.publish_failed(e.label());
        tracing::warn!(
            stream_seq = d.stream_seq(),
            reason = e.label(),
            error = %chain(e),
            "the app's outputs were not stored: the input is retried"
        );
        Commit::Instead(self.live().policy.publish_failed(attempt, e.label()))
    }
}
