//! The core loop: pull → forward → decide → settle, with bounded concurrency, and the
//! drain on shutdown. The only module that sees both the NATS side (through
//! [`Source`] and [`Settler`]) and the HTTP side (through [`Forwarder`]).
//!
//! Bounds: at most `max_in_flight` requests run, in one `JoinSet`; at most
//! `max_buffered` messages are held (queued + in flight), because the source sizes its
//! pulls by `held` and the consumer's `max_ack_pending` equals `max_buffered`. The
//! queue is a `VecDeque` bounded by that. A message is settled only after its
//! outcome is known; a per-message failure never ends the loop.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::delivery::Delivery;
use crate::forward::Forwarder;
use crate::health::{Health, State};
use crate::metrics::{HttpClass, Metrics, SettleLabel};
use crate::nats::{NatsError, PullEvent, Settler};
use crate::policy::{Disposition, Outcome, Policy};
use crate::source::Source;

/// What the dispatcher needs, shared with every message task.
#[derive(Debug)]
pub struct Dispatch {
    /// The app.
    pub forwarder: Forwarder,
    /// Outcome → disposition.
    pub policy: Policy,
    /// Collectors.
    pub metrics: Metrics,
    /// Readiness.
    pub health: Health,
    /// Concurrent requests at most.
    pub max_in_flight: usize,
    /// How long in-flight requests may take to finish at shutdown.
    pub shutdown_grace: Duration,
    /// Whether the source is a pinned consumer (standby until pinned).
    pub pinned_mode: bool,
}

/// Why the loop ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// Shutdown was requested and the drain is complete.
    Shutdown,
    /// The consumer went away; go back to topology.
    SourceLost(String),
}

/// A failure that ends the process.
#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    /// The source refused for a reason retrying cannot fix.
    #[error("the message source failed: {0}")]
    Source(String),
}

struct Held {
    delivery: Box<Delivery>,
    settler: Settler,
    received: Instant,
}

impl Dispatch {
    /// Runs until shutdown (then drains) or until the source ends.
    ///
    /// # Errors
    /// [`DispatchError`] when the source fails fatally.
    pub async fn run<S: Source>(
        self: &Arc<Self>,
        mut source: S,
        shutdown: CancellationToken,
    ) -> Result<Ended, DispatchError> {
        let mut tasks: JoinSet<()> = JoinSet::new();
        let mut queue: VecDeque<Held> = VecDeque::new();
        let mut draining = false;
        let grace = tokio::time::sleep(Duration::MAX / 4);
        tokio::pin!(grace);
        self.health.set(
            if self.pinned_mode {
                State::Standby
            } else {
                State::Consuming
            },
            if self.pinned_mode {
                "waiting for the pin"
            } else {
                ""
            },
        );
        let ended = loop {
            let held = u32::try_from(queue.len() + tasks.len()).unwrap_or(u32::MAX);
            self.metrics.buffered.set(i64::from(held));
            self.metrics.in_flight.set(tasks.len() as i64);
            if draining && tasks.is_empty() {
                break Ended::Shutdown;
            }
            tokio::select! {
                biased;
                // Shutdown only stops intake: in-flight requests are never cancelled here.
                () = shutdown.cancelled(), if !draining => {
                    draining = true;
                    self.health.set(State::Draining, "shutting down");
                    source.stop();
                    let released = queue.len();
                    for h in queue.drain(..) {
                        self.release(h.settler).await;
                    }
                    tracing::info!(in_flight = tasks.len(), released, "draining");
                    grace.as_mut().reset(Instant::now() + self.shutdown_grace);
                }
                () = &mut grace, if draining => {
                    tracing::warn!(
                        unfinished = tasks.len(),
                        "shutdown grace is over: unfinished messages are left for redelivery after ack_wait"
                    );
                    tasks.abort_all();
                    while tasks.join_next().await.is_some() {}
                    break Ended::Shutdown;
                }
                Some(done) = tasks.join_next() => {
                    if let Err(e) = done
                        && e.is_panic() {
                            tracing::error!(error = %e, "a message task panicked; the message is redelivered after ack_wait");
                        }
                    if let Some(next) = queue.pop_front() {
                        self.spawn(&mut tasks, next);
                    }
                }
                ev = source.next(held) => match ev {
                    PullEvent::Message(delivery, settler) => {
                        self.metrics.received.inc();
                        if delivery.delivered() > 1 {
                            self.metrics.redeliveries.inc();
                        }
                        if draining {
                            // Delivered by a pull sent before the shutdown: move it on.
                            self.release(settler).await;
                            continue;
                        }
                        let h = Held { delivery, settler, received: Instant::now() };
                        if tasks.len() < self.max_in_flight {
                            self.spawn(&mut tasks, h);
                        } else {
                            queue.push_back(h);
                        }
                    }
                    PullEvent::Pinned(pinned) => {
                        self.health.set_pinned(pinned);
                        if !draining && self.pinned_mode {
                            if pinned {
                                self.health.set(State::Consuming, "");
                            } else {
                                self.health.set(State::Standby, "another instance holds the pin");
                            }
                        }
                    }
                    PullEvent::ConsumerGone(reason) => {
                        source.stop();
                        // The consumer is gone: queued messages cannot be settled; the
                        // in-flight ones finish (their settle may fail, and is counted).
                        queue.clear();
                        while tasks.join_next().await.is_some() {}
                        break Ended::SourceLost(reason);
                    }
                    PullEvent::Fatal(reason) => {
                        source.stop();
                        queue.clear();
                        while tasks.join_next().await.is_some() {}
                        return Err(DispatchError::Source(reason));
                    }
                },
            }
        };
        for settler in source.close().await {
            self.release(settler).await;
        }
        self.metrics.buffered.set(0);
        self.metrics.in_flight.set(0);
        self.health.set_pinned(false);
        Ok(ended)
    }

    fn spawn(self: &Arc<Self>, tasks: &mut JoinSet<()>, h: Held) {
        let this = Arc::clone(self);
        tasks.spawn(async move { this.deliver(h).await });
    }

    /// NAK without delay: a message that was never offered to the app moves on at once.
    async fn release(&self, settler: Settler) {
        match settler.nak(Duration::ZERO).await {
            Ok(()) => self.metrics.settled(SettleLabel::Nak),
            Err(e) => self.settle_failed(&e),
        }
    }

    fn settle_failed(&self, e: &NatsError) {
        self.metrics.settle_failures.inc();
        tracing::warn!(error = %e, "cannot settle a message; JetStream redelivers it after ack_wait");
    }

    /// One message: one attempt, one decision, one final action, one log line.
    async fn deliver(&self, h: Held) {
        let d = &h.delivery;
        let (outcome, status, http_ms) = match &d.invalid {
            Some(why) => (Outcome::Invalid(why.clone()), None, None),
            None => {
                let f = self.forwarder.forward(d).await;
                self.metrics.http_request(f.class);
                self.metrics.http_duration.observe(f.elapsed.as_secs_f64());
                if f.skipped_headers > 0 {
                    self.metrics
                        .headers_skipped
                        .inc_by(f.skipped_headers as u64);
                }
                if f.bad_action {
                    tracing::warn!(
                        stream_seq = d.stream_seq(),
                        "ignoring an unknown Jetrelay-Action value"
                    );
                }
                let status = match f.class {
                    HttpClass::Status(s) => Some(s),
                    _ => None,
                };
                (f.outcome, status, Some(f.elapsed.as_millis()))
            }
        };
        let disposition = self.policy.decide(&outcome, d.delivered());
        let (label, result, delay, reason) = match &disposition {
            Disposition::Ack => (SettleLabel::Ack, h.settler.ack().await, None, None),
            Disposition::Retry { delay } => (
                SettleLabel::Nak,
                h.settler.nak(*delay).await,
                Some(delay.as_millis()),
                None,
            ),
            Disposition::Term { reason } => {
                let text = reason.to_string();
                let r = h.settler.term(&text).await;
                (SettleLabel::Term, r, None, Some(text))
            }
        };
        let elapsed = h.received.elapsed();
        self.metrics.message_duration.observe(elapsed.as_secs_f64());
        match &result {
            Ok(()) => self.metrics.settled(label),
            Err(e) => {
                if label == SettleLabel::Ack {
                    self.metrics.ack_failures.inc();
                }
                self.settle_failed(e);
            }
        }
        let stream = d.meta.as_ref().map(|m| m.stream.as_str()).unwrap_or("");
        // One record per message, after its final action; never the payload.
        macro_rules! settled_event {
            ($level:expr, $message:literal $(, $extra:ident = $value:expr)*) => {
                tracing::event!(
                    $level,
                    stream, stream_seq = d.stream_seq(), delivered = d.delivered(),
                    partition = d.partition, outcome = label.as_str(), status, http_ms,
                    duration_ms = elapsed.as_millis(), settled = result.is_ok()
                    $(, $extra = $value)*, $message
                )
            };
        }
        match label {
            SettleLabel::Term | SettleLabel::Dlq => {
                settled_event!(tracing::Level::ERROR, "message terminated", reason = reason);
            }
            SettleLabel::Nak => {
                settled_event!(
                    tracing::Level::WARN,
                    "message will be retried",
                    delay_ms = delay
                );
            }
            SettleLabel::Ack => settled_event!(tracing::Level::INFO, "message delivered"),
        }
    }
}
