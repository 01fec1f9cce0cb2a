//! One message's work, run as a task: one offer to the app, one decision, then one
//! final action (ack, delayed nak, dead letter then term) and one log line; or a retry
//! in place, a hold (the app is unreachable), or a dead letter to try again, reported
//! back to the loop.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::book::{Settlement, Step, Verdict};
use super::fates::{self, Fate};
use super::lanes::LaneKey;
use super::outputs::Commit;
use super::{Dispatch, Live};
use crate::admission::{Reach, Sample};
use crate::app::headers::TraceHeaders;
use crate::app::{self, batch::Answer};
use crate::dead_letter::{self, DeadLetter, Shed};
use crate::message::{Delivery, Invalid};
use crate::ops::metrics::{ExpiredBy, SettleLabel};
use crate::ops::telemetry::chain;
use crate::ops::traces::Active;
use crate::policy::{self, Disposition, Outcome, TermReason, backoff};
use crate::route::To;
use crate::seam::Ordering;
use crate::seam::markers::{Markers, Seen};
use crate::seam::publish::{LetterFailure, Publish};
use crate::seam::{Forward, Forwarded, HttpClass, NoAnswer, Offer, Settle};
use crate::trace::context::SpanContext;

/// What one attempt learned, for the log line.
pub(super) struct Record<'a> {
    /// The delivery's span, with span export on.
    trace: Option<&'a SpanContext>,
    attempt: u32,
    status: Option<u16>,
    http_ms: Option<u128>,
    action: Option<&'static str>,
    failure: Option<&'a NoAnswer>,
    received: Instant,
}

impl<F: Forward, P: Publish, M: Markers> Dispatch<F, P, M> {
    /// Whether `d` is past `delivery.max_age_ms` now (by its publish time).
    fn too_old(&self, d: &Delivery, live: &Live<F>) -> bool {
        let published = d.meta.as_ref().ok().map(|m| SystemTime::from(m.published));
        policy::is_too_old(published, live.max_age, SystemTime::now())
    }

    /// One attempt: one request, one decision, then either one final action and one
    /// log line, or a retry in place, or a hold, reported back.
    pub(super) async fn attempt<T: Settle>(
        &self,
        d: &Delivery,
        settler: &T,
        attempt: u32,
        received: Instant,
        trace: Option<&SpanContext>,
    ) -> (Step, Reach, Option<Sample>) {
        // One attempt runs under one config: a reload meanwhile applies to the next.
        let live = self.live();
        let mut sample = None;
        let (route, to) = destination(&live, d);
        // With `http.unwrap_cloudevents`, a structured CloudEvent goes as its data
        // (a malformed one is invalid).
        let unwrapped =
            unwrap_cloudevent(d, live.unwrap_cloudevents && matches!(to, To::Target(_)));
        let invalid = d.invalid().or_else(|| unwrapped.as_ref().err().cloned());
        let expires = d.expires_at();
        let seen = match to {
            To::Skip(_) => Seen::Fresh,
            To::Target(_) => self.seen_before(d).await,
        };
        let (outcome, status, http_ms, failure, published) = match (invalid, to) {
            (Some(why), _) => {
                self.metrics.invalid(&why);
                (Outcome::Invalid(why), None, None, None, None)
            }
            (None, _) if seen == Seen::Processed => (Outcome::Duplicate, None, None, None, None),
            (None, _) if policy::is_expired(expires, SystemTime::now()) => {
                (Outcome::Expired, None, None, None, None)
            }
            (None, _) if self.too_old(d, &live) => (Outcome::TooOld, None, None, None, None),
            (None, To::Skip(skip)) => {
                let name = route.unwrap_or_default();
                self.metrics.routed(name, "skip");
                (
                    Outcome::Routed(skip, name.to_string()),
                    None,
                    None,
                    None,
                    None,
                )
            }
            (None, To::Target(forwarder)) => {
                if let Some(name) = route {
                    self.metrics.routed(name, "app");
                }
                let offered = unwrapped.as_ref().ok().and_then(Option::as_ref);
                let f =
                    (self.request(forwarder, offered.unwrap_or(d), attempt, trace, &seen)).await;
                sample = Some(Sample::of(&f, attempt));
                let status = match f.class {
                    HttpClass::Status(s) => Some(s),
                    _ => None,
                };
                let elapsed = Some(f.elapsed.as_millis());
                (f.outcome, status, elapsed, f.failure, f.outputs)
            }
        };
        let reach = reach(&outcome, failure.as_ref());
        let action = match &outcome {
            Outcome::Answered {
                action: Some(a), ..
            } => {
                self.metrics.action_override(a.name());
                Some(a.name())
            }
            _ => None,
        };
        let record = Record {
            trace,
            attempt,
            status,
            http_ms,
            action,
            failure: failure.as_ref(),
            received,
        };
        let mut disposition = live.policy.decide(&outcome, attempt);
        let mut confirmed = false;
        if let (Disposition::Ack, Some(published)) = (&disposition, published) {
            match self.commit(d, published, attempt, trace).await {
                Commit::Ack { confirmed: c } => confirmed = c,
                Commit::Instead(instead) => disposition = instead,
            }
        }
        let disposition = policy::within_life(disposition, expires, SystemTime::now());
        self.marked_or_duplicate(d, &outcome, &disposition).await;
        let step = self
            .settle_decided(d, settler, disposition, status, &record, confirmed)
            .await;
        (step, reach, sample)
    }

    /// One request of `d` to `forwarder`, in its span, counted; `seen` is what its
    /// marker said (a marker of another message is named in the request).
    async fn request(
        &self,
        forwarder: &F,
        d: &Delivery,
        attempt: u32,
        trace: Option<&SpanContext>,
        seen: &Seen,
    ) -> Forwarded {
        let conflict = seen.conflict();
        let span = trace.map(|t| self.tracer.request(t, attempt));
        let traceparent = span.as_ref().map(Active::traceparent);
        if let Some(marked) = conflict {
            self.conflicting(d, marked);
        }
        let offer = Offer {
            offered: d.into(),
            attempt,
            conflict,
            trace: traceparent.as_deref().map(|tp| TraceHeaders {
                traceparent: tp,
                tracestate: trace.and_then(|t| t.tracestate.as_deref()),
            }),
        };
        let f = forwarder.forward(offer).await;
        if let Some(span) = span {
            self.tracer.end_request(span, &f);
        }
        self.metrics.request(f.class, f.elapsed, f.skipped_headers);
        self.metrics.trace_headers_dropped(&f.trace_dropped);
        if f.bad_action {
            self.metrics.action_override("invalid");
            tracing::warn!(
                stream_seq = d.stream_seq(),
                "ignoring an unknown Jetrelay-Action value"
            );
        }
        f
    }

    /// A duplicate is counted; a message the app processed (answered, and to be
    /// acked) gets its marker, after its outputs and before its ack.
    async fn marked_or_duplicate(
        &self,
        d: &Delivery,
        outcome: &Outcome,
        disposition: &Disposition,
    ) {
        match (outcome, disposition) {
            (Outcome::Duplicate, _) => {
                self.metrics.duplicate_suppressed();
                tracing::info!(
                    stream_seq = d.stream_seq(),
                    delivered = d.delivered(),
                    "processed before (its idempotency marker exists): acked without a request"
                );
            }
            (Outcome::Answered { .. }, Disposition::Ack) => {
                self.mark_processed(self.marker_of(d).into_iter().collect())
                    .await;
            }
            _ => {}
        }
    }

    /// Carries out one message's disposition: ack (`confirmed`: waiting for the
    /// server, after outputs were published), retry (in its lane, or a delayed NAK),
    /// hold, or dead letter then term; one log line when it is settled.
    async fn settle_decided<T: Settle>(
        &self,
        d: &Delivery,
        settler: &T,
        disposition: Disposition,
        status: Option<u16>,
        record: &Record<'_>,
        confirmed: bool,
    ) -> Step {
        match disposition {
            Disposition::Ack => {
                let result = if confirmed {
                    settler.ack_confirmed().await
                } else {
                    settler.ack().await
                };
                self.record(d, record, SettleLabel::Ack, &result, None, None)
            }
            Disposition::Retry { delay } if self.ordering != Ordering::None => {
                tracing::warn!(
                    stream_seq = d.stream_seq(),
                    attempt = record.attempt,
                    status,
                    http_ms = record.http_ms,
                    delay_ms = delay.as_millis(),
                    action = record.action,
                    error = record.failure.map(|f| f.kind),
                    "message will be retried in its lane"
                );
                Step::RetryIn(delay)
            }
            Disposition::Retry { delay } => {
                let result = settler.nak(delay).await;
                self.record(d, record, SettleLabel::Nak, &result, Some(delay), None)
            }
            Disposition::Hold => {
                tracing::debug!(
                    stream_seq = d.stream_seq(),
                    error = record.failure.map(|f| f.kind),
                    cause = record.failure.map(|f| f.cause.as_str()),
                    "the app is unreachable: message kept"
                );
                Step::Hold
            }
            Disposition::Term { reason } => {
                let expired = match reason {
                    TermReason::Expired => Some((
                        ExpiredBy::Ttl,
                        "the message's Nats-TTL passed (or would before its retry): dead-lettered as expired, not sent",
                    )),
                    TermReason::TooOld => Some((
                        ExpiredBy::MaxAge,
                        "the message is older than delivery.max_age_ms: dead-lettered as too_old, not sent",
                    )),
                    _ => None,
                };
                if let Some((by, why)) = expired {
                    self.metrics
                        .expired(by, d.age(time::OffsetDateTime::now_utc()));
                    tracing::warn!(
                        stream_seq = d.stream_seq(),
                        attempt = record.attempt,
                        "{why}"
                    );
                }
                let verdict = Verdict {
                    reason,
                    status,
                    attempts: record.attempt,
                    tries: 0,
                };
                self.terminate(d, settler, verdict, record).await
            }
        }
    }

    /// A held dead letter's retry: no request to the app, only the dead-lettering.
    pub(super) async fn dead_letter_again<T: Settle>(
        &self,
        d: &Delivery,
        settler: &T,
        verdict: Verdict,
        received: Instant,
        trace: Option<&SpanContext>,
    ) -> Step {
        let record = Record {
            trace,
            attempt: verdict.attempts,
            status: verdict.status,
            http_ms: None,
            action: None,
            failure: None,
            received,
        };
        self.terminate(d, settler, verdict, &record).await
    }

    /// Dead-letters (when configured) then TERMs. When the dead-letter publish fails,
    /// the message is NAKed with backoff; on its last delivery (a NAK would never be
    /// redelivered) it is kept and the dead letter tried again: nothing is lost.
    async fn terminate<T: Settle>(
        &self,
        d: &Delivery,
        settler: &T,
        verdict: Verdict,
        record: &Record<'_>,
    ) -> Step {
        let text = verdict.reason.to_string();
        let Some(subject) = &self.dead_letters else {
            let result = settler.term(&text).await;
            return self.record(d, record, SettleLabel::Term, &result, None, Some(&text));
        };
        let letter = DeadLetter {
            delivery: d,
            attempts: verdict.attempts,
            last_status: verdict.status,
            reason: &text,
            at: time::OffsetDateTime::now_utc(),
        };
        let traceparent = record.trace.map(SpanContext::traceparent);
        let published =
            publish_dead_letter(&self.publisher, subject, &letter, traceparent.as_deref()).await;
        match published {
            Ok(()) => {
                let result = settler.term(&text).await;
                self.record(d, record, SettleLabel::Dlq, &result, None, Some(&text))
            }
            Err(e) => {
                self.metrics.dead_letter_failed();
                let tries = verdict.tries.saturating_add(1);
                let policy = &self.live().policy;
                if policy.is_last_delivery(d.delivered()) {
                    let delay = backoff(policy.retry_initial, policy.retry_max, tries);
                    tracing::error!(
                        error = %chain(&e), stream_seq = d.stream_seq(), tries, retry_in_ms = delay.as_millis(),
                        "dead-letter publish failed on the message's last delivery: kept, and tried again"
                    );
                    return Step::DeadLetterIn(delay, Verdict { tries, ..verdict });
                }
                let delay = backoff(policy.retry_initial, policy.retry_max, verdict.attempts);
                tracing::error!(error = %chain(&e), stream_seq = d.stream_seq(), "dead-letter publish failed; the message is retried instead");
                let result = settler.nak(delay).await;
                self.record(
                    d,
                    record,
                    SettleLabel::Nak,
                    &result,
                    Some(delay),
                    Some(&text),
                )
            }
        }
    }

    /// The metrics and the one log line of a settled message; never the payload.
    fn record<E: std::fmt::Display>(
        &self,
        d: &Delivery,
        r: &Record<'_>,
        label: SettleLabel,
        result: &Result<(), E>,
        delay: Option<Duration>,
        reason: Option<&str>,
    ) -> Step {
        let elapsed = r.received.elapsed();
        match result {
            Ok(()) => self.metrics.settled(label, elapsed),
            Err(e) if label == SettleLabel::Ack => {
                self.metrics.ack_not_confirmed();
                tracing::warn!(error = %e, stream_seq = d.stream_seq(), "the ack was not confirmed: the message may be redelivered");
            }
            Err(e) => self.settle_failed(e),
        }
        let stream = d.meta.as_ref().map(|m| m.stream.as_str()).unwrap_or("");
        let delay_ms = delay.map(|d| d.as_millis());
        macro_rules! settled_event {
            ($level:expr, $message:literal) => {
                tracing::event!(
                    $level,
                    stream,
                    stream_seq = d.stream_seq(),
                    delivered = d.delivered(),
                    attempt = r.attempt,
                    partition = d.partition,
                    outcome = label.as_str(),
                    status = r.status,
                    http_ms = r.http_ms,
                    duration_ms = elapsed.as_millis(),
                    settled = result.is_ok(),
                    action = r.action,
                    delay_ms,
                    reason,
                    error = r.failure.map(|f| f.kind),
                    $message
                )
            };
        }
        match label {
            // Gone for good: nothing holds it any more.
            SettleLabel::Term => settled_event!(tracing::Level::ERROR, "message terminated"),
            // Kept in the DLQ: the app's verdict (a 4xx), not a failure of jetrelay's.
            SettleLabel::Dlq => settled_event!(tracing::Level::WARN, "message terminated"),
            SettleLabel::Nak => settled_event!(tracing::Level::WARN, "message will be retried"),
            SettleLabel::Ack => settled_event!(tracing::Level::INFO, "message delivered"),
        }
        Step::Settled(Settlement {
            outcome: match label {
                SettleLabel::Ack => "ack",
                SettleLabel::Nak => "retry",
                SettleLabel::Term => "term",
                SettleLabel::Dlq => "dlq",
            },
            delay,
        })
    }
}

/// Why a dead letter was not stored.
#[derive(Debug, thiserror::Error)]
enum NotStored<E: std::error::Error + 'static> {
    /// Not even a letter without the payload, the original headers and a long reason
    /// fits in what the server takes.
    #[error("the dead letter does not fit in the DLQ, even without its payload and headers")]
    Unfit,
    /// The publish failed.
    #[error("the dead-letter publish failed")]
    Failed(#[source] E),
}

/// Publishes one dead letter: whole when it fits, else shedding what it must
/// (`dead_letter::letter`); a DLQ stream that refuses it for its size (it takes less
/// than the server) makes it shed the next thing.
async fn publish_dead_letter<P: Publish>(
    publisher: &P,
    subject: &str,
    letter: &DeadLetter<'_>,
    traceparent: Option<&str>,
) -> Result<(), NotStored<P::LetterError>> {
    let mut shed = Some(Shed::Nothing);
    let mut last = NotStored::Unfit;
    while let Some(at_least) = shed {
        let Some(mut l) = dead_letter::letter(letter, publisher.max_payload(), at_least) else {
            break;
        };
        // The letter continues the delivery's trace, so that a replay does too.
        if let Some(tp) = traceparent {
            l.headers
                .retain(|(n, _)| !n.eq_ignore_ascii_case("traceparent"));
            l.headers.push(("traceparent".into(), tp.to_string()));
        }
        if l.shed > Shed::Nothing {
            tracing::warn!(
                stream_seq = letter.delivery.stream_seq(),
                bytes = letter.delivery.message.payload.len(),
                without = l.shed.without(),
                "the dead letter is too large: published without what does not fit (the original stays in its stream)"
            );
        }
        let payload = if l.with_payload {
            letter.delivery.message.payload.clone()
        } else {
            bytes::Bytes::new()
        };
        match publisher.dead_letter(subject, &l.headers, payload).await {
            Err(e) if e.is_too_large() => {
                last = NotStored::Failed(e);
                shed = l.shed.next();
            }
            other => return other.map_err(NotStored::Failed),
        }
    }
    Err(last)
}

/// One message of a batch task.
pub(super) struct BatchItem<T> {
    pub(super) id: u64,
    /// The delivery's span's context, with span export on.
    pub(super) trace: Option<SpanContext>,
    pub(super) delivery: Arc<Delivery>,
    pub(super) settler: T,
    pub(super) lane: LaneKey,
    pub(super) attempt: u32,
    pub(super) received: Instant,
    pub(super) verdict: Option<Verdict>,
    /// The message its key's marker records, when that is another one (read with
    /// the batch's markers).
    pub(super) conflict: Option<String>,
}

/// What the app said to one batch request, per message.
struct BatchAnswer {
    /// The request's own result.
    forwarded: Forwarded,
    /// Whether the app was reached.
    reach: Reach,
    /// What each message's answer means.
    outcomes: Vec<Outcome>,
    /// What each message's answer publishes, when anything.
    outputs: Vec<Option<fates::Published>>,
}

impl<F: Forward, P: Publish, M: Markers> Dispatch<F, P, M> {
    /// One batch: one request for the messages it can carry (a message that only
    /// waits for its dead letter, or cannot be offered at all, is settled on its own),
    /// then each message's fate from the answer, settled one by one with one log line
    /// each.
    pub(super) async fn attempt_batch<T: Settle>(
        &self,
        items: Vec<BatchItem<T>>,
    ) -> (Vec<(u64, Step)>, Reach, Option<Sample>) {
        let (mut steps, send) = self.settle_unsendable(items).await;
        if send.is_empty() {
            return (steps, Reach::NotAsked, None);
        }
        let mut answer = self.offer_batch(&send).await;
        let live = self.live();
        let first = send.iter().map(|i| i.attempt).min().unwrap_or(1);
        let sample = Some(Sample::of(&answer.forwarded, first));
        let lanes: Vec<&LaneKey> = send.iter().map(|i| &i.lane).collect();
        let ordered = self.ordering != Ordering::None;
        let mut dispositions: Vec<Disposition> = send
            .iter()
            .zip(&answer.outcomes)
            .map(|(i, o)| live.policy.decide(o, i.attempt))
            .collect();
        let confirmed = self
            .commit_batch(&send, &lanes, &mut dispositions, &mut answer.outputs)
            .await;
        let now = SystemTime::now();
        let dispositions = send
            .iter()
            .zip(dispositions)
            .map(|(i, d)| policy::within_life(d, i.delivery.expires_at(), now))
            .collect();
        let fates = fates::fates(dispositions, &lanes, ordered);
        let processed: Vec<(String, String)> = send
            .iter()
            .zip(&answer.outcomes)
            .zip(&fates)
            .filter(|((_, o), f)| {
                matches!(o, Outcome::Answered { .. }) && **f == Fate::Decided(Disposition::Ack)
            })
            .filter_map(|((i, _), _)| self.marker_of(&i.delivery))
            .collect();
        self.mark_processed(processed).await;
        let f = &answer.forwarded;
        let status = match f.class {
            HttpClass::Status(s) => Some(s),
            _ => None,
        };
        for (((item, outcome), fate), confirm) in
            send.iter().zip(&answer.outcomes).zip(fates).zip(confirmed)
        {
            let action = match outcome {
                Outcome::Answered {
                    action: Some(a), ..
                } => Some(a.name()),
                _ => None,
            };
            let record = Record {
                trace: item.trace.as_ref(),
                attempt: item.attempt,
                status,
                http_ms: Some(f.elapsed.as_millis()),
                action,
                failure: f.failure.as_ref(),
                received: item.received,
            };
            let step = match fate {
                Fate::HeldBack => Step::Requeue,
                Fate::Decided(d) => {
                    self.settle_decided(&item.delivery, &item.settler, d, status, &record, confirm)
                        .await
                }
            };
            steps.push((item.id, step));
        }
        (steps, answer.reach, sample)
    }

    /// Settles what a batch cannot carry: a message that only waits for its dead
    /// letter, and one that cannot be offered at all. Returns their steps and the rest.
    async fn settle_unsendable<T: Settle>(
        &self,
        items: Vec<BatchItem<T>>,
    ) -> (Vec<(u64, Step)>, Vec<BatchItem<T>>) {
        let mut steps = Vec::with_capacity(items.len());
        let mut send = Vec::with_capacity(items.len());
        // The markers of the whole batch read at once.
        let seen = futures::future::join_all(items.iter().map(|i| async {
            if i.verdict.is_none() {
                self.seen_before(&i.delivery).await
            } else {
                Seen::Fresh
            }
        }))
        .await;
        for (mut item, seen) in items.into_iter().zip(seen) {
            if let Seen::Conflict(marked) = seen {
                item.conflict = Some(marked);
            } else if seen == Seen::Processed {
                let step = self
                    .settle_duplicate(&item.delivery, &item.settler, item.attempt, item.received)
                    .await;
                steps.push((item.id, step));
                continue;
            }
            match item.verdict.clone() {
                Some(v) => {
                    let step = self.dead_letter_again(
                        &item.delivery,
                        &item.settler,
                        v,
                        item.received,
                        item.trace.as_ref(),
                    );
                    steps.push((item.id, step.await));
                }
                None if item.delivery.is_invalid()
                    || policy::is_expired(item.delivery.expires_at(), SystemTime::now())
                    || self.too_old(&item.delivery, &self.live()) =>
                {
                    let (step, _, _) = self
                        .attempt(
                            &item.delivery,
                            &item.settler,
                            item.attempt,
                            item.received,
                            item.trace.as_ref(),
                        )
                        .await;
                    steps.push((item.id, step));
                }
                None => send.push(item),
            }
        }
        (steps, send)
    }

    /// A message of a batch whose marker exists: acked without a request.
    async fn settle_duplicate<T: Settle>(
        &self,
        d: &Delivery,
        settler: &T,
        attempt: u32,
        received: Instant,
    ) -> Step {
        self.marked_or_duplicate(d, &Outcome::Duplicate, &Disposition::Ack)
            .await;
        let record = Record {
            trace: None,
            attempt,
            status: None,
            http_ms: None,
            action: None,
            failure: None,
            received,
        };
        self.settle_decided(d, settler, Disposition::Ack, None, &record, false)
            .await
    }

    /// The one request, and what its answer says of each message.
    async fn offer_batch<T: Settle>(&self, send: &[BatchItem<T>]) -> BatchAnswer {
        for i in send {
            if let Some(marked) = &i.conflict {
                self.conflicting(&i.delivery, marked);
            }
        }
        // Each message's own context in the document: its delivery's span.
        let parents: Vec<Option<String>> = send
            .iter()
            .map(|i| i.trace.as_ref().map(SpanContext::traceparent))
            .collect();
        let offered: Vec<Offer<'_>> = send
            .iter()
            .zip(&parents)
            .map(|(i, parent)| Offer {
                offered: i.delivery.as_ref().into(),
                attempt: i.attempt,
                conflict: i.conflict.as_deref(),
                trace: i
                    .trace
                    .as_ref()
                    .zip(parent.as_deref())
                    .map(|(t, tp)| TraceHeaders {
                        traceparent: tp,
                        tracestate: t.tracestate.as_deref(),
                    }),
            })
            .collect();
        let contexts: Vec<&SpanContext> = send.iter().filter_map(|i| i.trace.as_ref()).collect();
        let span = (!contexts.is_empty()).then(|| self.tracer.batch(&contexts));
        let request_parent = span.as_ref().map(Active::traceparent);
        let request_trace = request_parent.as_deref().map(|tp| TraceHeaders {
            traceparent: tp,
            tracestate: None,
        });
        let bf = self
            .live()
            .forwarder
            .forward_batch(&offered, request_trace)
            .await;
        if let Some(mut span) = span {
            span.set("messaging.batch.message_count", send.len() as u64);
            self.tracer.end_request(span, &bf.forwarded);
        }
        let f = &bf.forwarded;
        self.metrics.request(f.class, f.elapsed, f.skipped_headers);
        self.metrics.trace_headers_dropped(&f.trace_dropped);
        self.metrics.batch_sent(send.len());
        let reach = Reach::of(f);
        if let Some(Answer::Unparsable(why)) = &bf.answer {
            self.metrics.batch_unparsable();
            tracing::warn!(
                messages = send.len(),
                error = %why,
                "the app's answer to a batch does not parse: the whole batch is retried"
            );
        }
        let ids: Vec<String> = send
            .iter()
            .map(|i| app::batch::id(i.delivery.as_ref().into()))
            .collect();
        let (outcomes, unknown) = fates::outcomes(&f.outcome, bf.answer.as_ref(), &ids);
        if unknown > 0 {
            self.metrics.batch_unknown_ids(unknown);
            tracing::warn!(
                unknown,
                "the app's answer to a batch names messages it did not carry: ignored"
            );
        }
        let outputs = fates::outputs(bf.answer.as_ref(), &ids);
        BatchAnswer {
            forwarded: bf.forwarded,
            reach,
            outcomes,
            outputs,
        }
    }

    /// Publishes the outputs of the messages that will be acked: per key in batch
    /// order, the keys (and every message of an unordered batch) at once. A key whose
    /// commit failed commits nothing after it (its later messages are held back by
    /// the fates); a failed commit changes its message's disposition. Returns, per
    /// message, whether its ack must be confirmed.
    async fn commit_batch<T: Settle>(
        &self,
        send: &[BatchItem<T>],
        lanes: &[&LaneKey],
        dispositions: &mut [Disposition],
        outputs: &mut [Option<fates::Published>],
    ) -> Vec<bool> {
        let ordered = self.ordering != Ordering::None;
        let acked = fates::fates(dispositions.to_vec(), lanes, ordered);
        let commits: Vec<bool> = acked
            .iter()
            .zip(outputs.iter())
            .map(|(fate, o)| *fate == Fate::Decided(Disposition::Ack) && o.is_some())
            .collect();
        let groups: Vec<Vec<(usize, fates::Published)>> =
            fates::commit_groups(&commits, lanes, ordered)
                .into_iter()
                .map(|g| {
                    g.into_iter()
                        .filter_map(|i| Some((i, outputs[i].take()?)))
                        .collect()
                })
                .collect();
        let done = futures::future::join_all(groups.into_iter().map(|group| async move {
            let mut done = Vec::with_capacity(group.len());
            for (i, published) in group {
                let item = &send[i];
                let commit = self
                    .commit(&item.delivery, published, item.attempt, item.trace.as_ref())
                    .await;
                let failed = matches!(commit, Commit::Instead(_));
                done.push((i, commit));
                if failed {
                    break;
                }
            }
            done
        }))
        .await;
        let mut confirmed = vec![false; send.len()];
        for (i, commit) in done.into_iter().flatten() {
            match commit {
                Commit::Ack { confirmed: c } => confirmed[i] = c,
                Commit::Instead(d) => dispositions[i] = d,
            }
        }
        confirmed
    }
}

/// Where `d` goes: the first route it matches (its name, and its target or
/// action), else the source's target.
fn destination<'a, F>(live: &'a Live<F>, d: &Delivery) -> (Option<&'a str>, To<&'a F>) {
    let (subject, headers) = (&d.app_subject, &d.message.headers);
    match crate::route::pick(&live.routes, subject, headers, &d.message.payload) {
        Some((_, r)) => (Some(r.name.as_str()), r.to.as_ref()),
        None => (None, To::Target(&live.forwarder)),
    }
}

/// `d` as the app is to get it with `http.unwrap_cloudevents` (`on`): its
/// structured CloudEvent's data and attributes (`None`: not one, or off: it goes as
/// it is).
fn unwrap_cloudevent(d: &Delivery, on: bool) -> Result<Option<Delivery>, Invalid> {
    if !on {
        return Ok(None);
    }
    match crate::app::cloudevent::unwrapped(&d.message) {
        Ok(m) => Ok(m.map(|m| d.with_message(m))),
        Err(why) => Err(Invalid::MalformedCloudevent(why.to_string())),
    }
}

/// Whether an attempt that ended in `outcome` reached the app (`failure`: why not).
fn reach(outcome: &Outcome, failure: Option<&NoAnswer>) -> Reach {
    match (outcome, failure) {
        (
            Outcome::Invalid(_)
            | Outcome::Routed(..)
            | Outcome::Expired
            | Outcome::TooOld
            | Outcome::Duplicate,
            _,
        ) => Reach::NotAsked,
        (Outcome::Unreachable, Some(f)) => Reach::Unreachable(f.kind),
        (Outcome::Unreachable, None) => Reach::Unreachable("cannot connect"),
        _ => Reach::Reached,
    }
}
