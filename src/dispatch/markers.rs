//! Processed once: a delivery whose idempotency marker records it (the same digest)
//! is acked without a request; one whose marker records another message goes to the
//! app with the marked one named (`Jetrelay-Idempotency-Conflict`), counted and
//! logged. A message the app processed gets its marker after its outputs are
//! committed and before its ack. A marker that cannot be read lets the message go to
//! the app (at least once, as without markers); one that cannot be written is tried
//! again for `min(ack_wait / 2, 5 s)`, then the message is acked anyway; while markers
//! cannot be written, readiness says why (naming the bucket) and each message tries
//! once. Failures are counted.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument as _;

use super::Dispatch;
use super::prefetch::Prefetch;
use crate::message::Delivery;
use crate::ops::telemetry::chain;
use crate::policy::backoff;
use crate::seam::Forward;
use crate::seam::markers::{IdempotencyKey, Marked, Markers, Seen, judge, marker_key};
use crate::seam::publish::Publish;

/// Processed-once markers: where they live, how a delivery's key is made, and how
/// long a marker write is tried before the message is acked without it.
#[derive(Debug)]
pub struct Marking<M> {
    /// Set while markers cannot be written (a message gave up on its marker, and none
    /// was stored since): each message then tries once. Starts `false`.
    pub down: std::sync::atomic::AtomicBool,
    /// The store (a KV bucket).
    pub store: M,
    /// The bucket's name, for readiness.
    pub bucket: String,
    /// `delivery.idempotency_key`.
    pub key: IdempotencyKey,
    /// Whose markers: the durable, or the group.
    pub scope: String,
    /// The consumer's `ack_wait`: a marker write is tried again for half of it, 5 s
    /// at most.
    pub patience: Duration,
    /// The markers read ahead, at receipt, for the attempts.
    prefetch: std::sync::Mutex<Prefetch>,
}

/// Markers read ahead and not taken yet, at most (what a message never took goes
/// after `ack_wait`, or sooner when newer keys need the room).
const READ_AHEAD_KEPT: usize = 4096;

impl<M> Marking<M> {
    /// Markers in `store` (bucket `bucket`), keyed by `key` under `scope`, written
    /// for at most half of `ack_wait` (5 s at most); up to date at first.
    pub fn new(
        store: M,
        bucket: String,
        key: IdempotencyKey,
        scope: String,
        ack_wait: Duration,
    ) -> Marking<M> {
        Marking {
            down: false.into(),
            store,
            bucket,
            key,
            scope,
            patience: ack_wait,
            prefetch: std::sync::Mutex::new(Prefetch::new(READ_AHEAD_KEPT, ack_wait)),
        }
    }
}

/// The first wait before a marker write is tried again; it doubles, up to a second.
const FIRST_WAIT: Duration = Duration::from_millis(50);

/// A failing marker write holds its message at most this long (or half `ack_wait`).
const HOLD_MAX: Duration = Duration::from_secs(5);

/// How long a failing marker write holds its message: half the consumer's
/// `ack_wait` (its keep-alive would be due), at most [`HOLD_MAX`].
pub(super) fn hold(ack_wait: Duration) -> Duration {
    (ack_wait / 2).min(HOLD_MAX)
}

impl<F: Forward, P: Publish, M: Markers> Dispatch<F, P, M> {
    /// The marker of `d` (its key and value), when markers are on and it has one.
    pub(super) fn marker_of(&self, d: &Delivery) -> Option<(String, String)> {
        let m = self.markers.as_ref()?;
        let key = marker_key(d, m.key, &m.scope)?;
        Some((key, Marked::of(d)?.value()))
    }

    /// The key under which `d`'s marker is read ahead: markers on, a valid message
    /// on its first delivery (a redelivery, what the markers are for, reads its
    /// marker at its attempt, as fresh as can be).
    pub(super) fn read_ahead_key(&self, d: &Delivery) -> Option<String> {
        let m = self.markers.as_ref()?;
        if d.is_invalid() || d.delivered() > 1 {
            return None;
        }
        marker_key(d, m.key, &m.scope)
    }

    /// Queues `key` to be read ahead, by the next [`Dispatch::read_ahead`].
    pub(super) fn queue_read_ahead(&self, key: String) {
        if let Some(m) = &self.markers {
            prefetch(m).queue(key, Instant::now());
        }
    }

    /// Reads what is queued ahead, unless a reader is at it: a task reads the keys
    /// in turns (one [`Markers::marked_many`] for all that were queued when a turn
    /// began) until none are left. Called before any attempt starts, so that an
    /// attempt that finds its key queued knows a reader has it.
    pub(super) fn read_ahead(self: &Arc<Self>) {
        let Some(m) = &self.markers else {
            return;
        };
        let Some(mut turn) = prefetch(m).start() else {
            return;
        };
        let this = Arc::clone(self);
        tokio::spawn(
            async move {
                let Some(m) = &this.markers else {
                    return;
                };
                loop {
                    let (keys, answers): (Vec<String>, Vec<_>) = turn.into_iter().unzip();
                    match m.store.marked_many(&keys).await {
                        Ok(found) => {
                            // An answer nobody waits for any more needs none.
                            for (tx, f) in answers.into_iter().zip(found) {
                                drop(tx.send(f));
                            }
                        }
                        // Unanswered: each attempt reads its own marker, and counts
                        // a failure as without read-ahead.
                        Err(e) => tracing::debug!(
                            error = %chain(&e),
                            keys = keys.len(),
                            "idempotency markers not read ahead"
                        ),
                    }
                    match prefetch(m).next_turn() {
                        Some(next) => turn = next,
                        None => return,
                    }
                }
            }
            .in_current_span(),
        );
    }

    /// What `d`'s marker says: none, this message's, or another's (an invalid
    /// message, never offered, reads none). Read ahead when it was, else now. A
    /// marker that cannot be read says none: the message goes to the app, at least
    /// once.
    pub(super) async fn seen_before(&self, d: &Delivery) -> Seen {
        let Some(m) = self.markers.as_ref().filter(|_| !d.is_invalid()) else {
            return Seen::Fresh;
        };
        let (Some(key), Some(own)) = (marker_key(d, m.key, &m.scope), Marked::of(d)) else {
            return Seen::Fresh;
        };
        let ahead = (d.delivered() <= 1)
            .then(|| prefetch(m).take(&key, Instant::now()))
            .flatten();
        if let Some(ahead) = ahead
            && let Ok(found) = ahead.await
        {
            return judge(found.as_deref(), &own);
        }
        match m.store.marked(&key).await {
            Ok(found) => judge(found.as_deref(), &own),
            Err(e) => {
                self.metrics.idempotency_failed();
                tracing::warn!(
                    error = %chain(&e),
                    stream_seq = d.stream_seq(),
                    "the idempotency marker cannot be read: the message is sent (it may have been processed before)"
                );
                Seen::Fresh
            }
        }
    }

    /// `d` is sent although its key has a marker of another message (`marked`):
    /// counted, and logged at WARN.
    pub(super) fn conflicting(&self, d: &Delivery, marked: &str) {
        self.metrics.idempotency_conflict();
        tracing::warn!(
            stream_seq = d.stream_seq(),
            marked = %crate::printable::printable(marked),
            "the idempotency key has a marker of another message (its Nats-Msg-Id re-used, or a marker jetrelay did not write): sent, with Jetrelay-Idempotency-Conflict"
        );
    }

    /// Writes `markers` (all sent, then every acknowledgement awaited), trying again
    /// for [`hold`] of `ack_wait` from the first try (once, while markers cannot be
    /// written); then gives up, counting each, and the caller acks anyway. What was
    /// read ahead under these keys is out of date once written (a later delivery
    /// under one of them reads it again), stored or not.
    pub(super) async fn mark_processed(&self, markers: Vec<(String, String)>) {
        let Some(m) = &self.markers else {
            return;
        };
        if markers.is_empty() {
            return;
        }
        self.write_markers(m, &markers).await;
        let mut p = prefetch(m);
        for (key, _) in &markers {
            p.forget(key);
        }
    }

    /// [`Dispatch::mark_processed`]'s writes and tries.
    async fn write_markers(&self, m: &Marking<M>, markers: &[(String, String)]) {
        let hold = hold(m.patience);
        let until = Instant::now() + hold;
        let down = m.down.load(Relaxed);
        let mut tries = 0u32;
        let why = loop {
            let why = match tokio::time::timeout_at(until, m.store.mark(markers)).await {
                Ok(Ok(())) => return self.markers_written(m),
                Ok(Err(e)) => chain(&e),
                Err(_) => format!("no answer within {} ms", hold.as_millis()),
            };
            tries = tries.saturating_add(1);
            let wait = backoff(FIRST_WAIT, Duration::from_secs(1), tries);
            if down || Instant::now() + wait >= until {
                break why;
            }
            tracing::warn!(error = %why, tries, "idempotency markers not written yet: trying again");
            tokio::time::sleep(wait).await;
        };
        for _ in markers {
            self.metrics.idempotency_failed();
        }
        if !m.down.swap(true, Relaxed) {
            self.readiness.set_markers_down(Some(format!(
                "idempotency markers cannot be written to bucket {} ({why}): messages are acked without them",
                m.bucket
            )));
        }
        tracing::error!(
            error = %why,
            messages = markers.len(),
            tries,
            "idempotency markers not written: acked without them (a redelivery would reach the app again)"
        );
    }

    /// A marker write was stored: markers can be written (again).
    fn markers_written(&self, m: &Marking<M>) {
        if m.down.swap(false, Relaxed) {
            tracing::info!("idempotency markers are written again");
            self.readiness.set_markers_down(None);
        }
    }
}

/// The read-ahead's state.
fn prefetch<M>(m: &Marking<M>) -> MutexGuard<'_, Prefetch> {
    m.prefetch.lock().unwrap_or_else(PoisonError::into_inner)
}
