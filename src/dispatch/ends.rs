//! How things end: what a message's task reports back (each message's step, each
//! lane it ran), how a held message leaves the book (settled, released, its dead
//! letter given up), the timers that come due (keep-alives, in-place retries); and
//! how the loop itself ends ([`Ended`], [`DispatchError`]).

use std::time::Duration;

use tokio::time::Instant;

use super::book::{Book, Done, HeldMessage, LaneReturns, Settlement, Step, Verdict};
use super::timers::Due;
use super::{Dispatch, Flow, Run};
use crate::ops::metrics::{AgeStage, SettleLabel};
use crate::seam::markers::Markers;
use crate::seam::publish::Publish;
use crate::seam::{Forward, Settle, Source};

/// Why the loop ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// Shutdown was requested and the drain is complete.
    Shutdown,
    /// The consumer went away; go back to topology.
    SourceLost(String),
    /// The consumer group was deleted: drained, and the member stops cleanly.
    GroupEnded(String),
}

/// A failure that ends the process.
#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    /// The source refused for a reason retrying cannot fix.
    #[error("the message source failed")]
    Source(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl<F: Forward, P: Publish, M: Markers> Dispatch<F, P, M> {
    /// A task reported back: each message's step, then each lane it ran: a lane none
    /// of its messages still occupies is done, after what goes back to its front.
    pub(super) async fn done<S: Source>(&self, run: &mut Run<S, F>, done: Done) -> Flow {
        let refresh = run.gate.app.reached(done.reach);
        let now = Instant::now();
        let mut lanes = LaneReturns::default();
        for (id, step) in done.steps {
            let book = &mut run.book;
            let Some(lane) = book.lane_of(id) else {
                continue;
            };
            let mut occupies = step.occupies_lane();
            let mut requeue = None;
            match step {
                Step::Settled(s) => {
                    if let Some(e) = book.take(id) {
                        self.finish(e, s);
                    }
                }
                Step::RetryIn(delay) => {
                    self.metrics.retried_in_place();
                    if let Some(e) = book.held.get_mut(&id) {
                        e.attempt = e.attempt.saturating_add(1);
                    }
                    if run.draining {
                        // Shutting down: hand the retry to JetStream with the same delay.
                        self.give_back(book, run.deferred.as_mut(), id, delay).await;
                        occupies = false;
                    } else {
                        book.retry_at(id, now + delay);
                    }
                }
                Step::Hold => {
                    if run.draining {
                        // Another instance may reach its app: move it on at once.
                        self.give_back(book, run.deferred.as_mut(), id, Duration::ZERO)
                            .await;
                        occupies = false;
                    } else {
                        let delay = self.live().policy.unreachable_delay(run.gate.app.streak());
                        book.retry_at(id, now + delay);
                    }
                }
                Step::DeadLetterIn(delay, verdict) => {
                    let waits = book.held.get(&id).is_some_and(|e| e.verdict.is_some());
                    if !waits && book.letters_waiting() >= self.letters_waiting_max {
                        // As many wait already: this one would take one more of the
                        // consumer's max_ack_pending, and enough would stall it.
                        self.abandon_letter(book, id, &verdict).await;
                        occupies = false;
                    } else {
                        // Kept even while draining: its last delivery, a NAK would
                        // lose it.
                        book.keep_for_letter(id, verdict);
                        book.retry_at(id, now + delay);
                    }
                }
                Step::Requeue => {
                    if run.draining {
                        self.give_back(book, run.deferred.as_mut(), id, Duration::ZERO)
                            .await;
                    } else {
                        requeue = Some(id);
                    }
                }
            }
            lanes.note(lane, occupies, requeue);
        }
        run.book.return_lanes(lanes);
        let waiting = run.book.letters_waiting();
        let letters_changed = run.gate.letters_waiting != waiting;
        if letters_changed {
            run.gate.letters_waiting = waiting;
            self.metrics.dead_letters_waiting(waiting);
        }
        if refresh || letters_changed {
            Flow::Refresh
        } else {
            Flow::Go
        }
    }

    /// Terminates, without its dead letter, a message whose letter the DLQ does not
    /// store while [`Dispatch::letters_waiting_max`] others wait already. It is not
    /// erased: it stays in its stream under its sequence (the log line says where).
    pub(super) async fn abandon_letter<T: Settle>(
        &self,
        book: &mut Book<T>,
        id: u64,
        verdict: &Verdict,
    ) {
        let Some(mut e) = book.take(id) else {
            return;
        };
        let reason = verdict.reason.to_string();
        let result = e.settler.term(&reason).await;
        self.end_span(
            &mut e,
            Settlement {
                outcome: "term",
                delay: None,
            },
        );
        match &result {
            Ok(()) => self
                .metrics
                .settled(SettleLabel::Term, e.received.elapsed()),
            Err(err) => self.settle_failed(err),
        }
        let d = &e.delivery;
        tracing::error!(
            stream = d.meta.as_ref().map(|m| m.stream.as_str()).unwrap_or(""),
            stream_seq = d.stream_seq(),
            waiting = self.letters_waiting_max,
            reason = %reason,
            "message terminated without its dead letter: the DLQ does not store it and as many others wait already (it stays in its stream under its sequence)"
        );
    }

    /// Releases one held message (NAK with `delay`); its lane is the caller's.
    /// A message leaves the book to go back to JetStream: now, or with a pinned
    /// instance's handover when its drain defers what it gives back.
    pub(super) async fn give_back<T: Settle>(
        &self,
        book: &mut Book<T>,
        deferred: Option<&mut super::handover::Deferred<T>>,
        id: u64,
        delay: Duration,
    ) {
        match deferred {
            Some(d) => {
                if let Some(e) = book.take(id) {
                    d.returned(e.settler.clone(), delay);
                    self.finish(e, Settlement::RELEASED);
                }
            }
            None => self.release_held(book, id, delay).await,
        }
    }

    pub(super) async fn release_held<T: Settle>(
        &self,
        book: &mut Book<T>,
        id: u64,
        delay: Duration,
    ) {
        if let Some(e) = book.take(id) {
            self.release(&e.settler, delay).await;
            self.finish(e, Settlement::RELEASED);
        }
    }

    /// A message leaves the book: its span ends with how it ended, and its age is
    /// taken (when its action completed).
    pub(super) fn finish<T>(&self, mut e: HeldMessage<T>, s: Settlement) {
        if s != Settlement::RELEASED
            && let Some(age) = e.delivery.age(time::OffsetDateTime::now_utc())
        {
            self.metrics.message_age(AgeStage::Settled, age);
        }
        self.end_span(&mut e, s);
    }

    pub(super) fn end_span<T>(&self, e: &mut HeldMessage<T>, s: Settlement) {
        if let Some(span) = e.span.take() {
            self.tracer.end_delivery(span, s.outcome, s.delay);
        }
    }

    pub(super) async fn timers_due<T: Settle>(&self, book: &mut Book<T>, draining: bool) {
        let now = Instant::now();
        while let Some((id, due)) = book.timers.pop_due(now) {
            let Some(e) = book.held.get_mut(&id) else {
                continue;
            };
            match due {
                Due::Progress => {
                    let settler = e.settler.clone();
                    e.progress_at = now + self.progress_every;
                    book.timers.schedule(e.progress_at, id, Due::Progress);
                    match settler.progress().await {
                        Ok(true) => self.metrics.progress_sent(),
                        Ok(false) => {} // the connection is down: nobody would hear it
                        Err(err) => self.settle_failed(&err),
                    }
                }
                Due::Retry => {
                    // Popped: it is no longer in the set.
                    if e.retry_at.take().is_some() && (!draining || e.verdict.is_some()) {
                        book.due.push_back(id);
                    }
                }
            }
        }
    }

    /// NAK: without delay for a message never offered to the app (it moves on at
    /// once), with the remaining backoff for one waiting for a retry.
    pub(super) async fn release<T: Settle>(&self, settler: &T, delay: Duration) {
        match settler.nak(delay).await {
            Ok(()) => self.metrics.released(1),
            Err(e) => self.settle_failed(&e),
        }
    }

    /// [`Dispatch::release`], waiting for the server to have taken it, and every
    /// release sent before it; when that cannot be known (no answer in time) it says
    /// what the handover risks.
    pub(super) async fn release_confirmed<T: Settle>(&self, settler: &T, delay: Duration) {
        match settler.nak_confirmed(delay).await {
            Ok(()) => self.metrics.released(1),
            Err(e) => {
                tracing::warn!(error = %e, "a handover's last release was not confirmed: the next instance may get a key's later messages first");
                self.metrics.settle_failed(1);
            }
        }
    }

    pub(super) fn settle_failed(&self, e: &impl std::fmt::Display) {
        self.metrics.settle_failed(1);
        tracing::warn!(error = %e, "cannot settle a message; JetStream redelivers it after ack_wait");
    }
}
