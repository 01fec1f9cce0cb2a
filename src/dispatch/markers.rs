//! Processed once: a delivery whose idempotency marker exists is acked without a
//! request; a message the app processed gets its marker after its outputs are
//! committed and before its ack. A marker that cannot be read lets the message go to
//! the app (at least once, as without markers); one that cannot be written is tried
//! again within `ack_wait`, then the message is acked anyway. Both are counted.

use std::time::Duration;

use tokio::time::Instant;

use super::Dispatch;
use crate::message::Delivery;
use crate::ops::telemetry::chain;
use crate::policy::backoff;
use crate::seam::Forward;
use crate::seam::markers::{Markers, marker_key};
use crate::seam::publish::Publish;

/// The first wait before a marker write is tried again; it doubles, up to a second.
const FIRST_WAIT: Duration = Duration::from_millis(50);

impl<F: Forward, P: Publish, M: Markers> Dispatch<F, P, M> {
    /// The marker key of `d`, when markers are on and it has one.
    pub(super) fn marker_of(&self, d: &Delivery) -> Option<String> {
        let m = self.markers.as_ref()?;
        marker_key(d, m.key, &m.scope)
    }

    /// Whether `d` was processed before (its marker exists). A marker that cannot be
    /// read says no: the message goes to the app, at least once.
    pub(super) async fn processed_before(&self, d: &Delivery) -> bool {
        let (Some(m), Some(key)) = (&self.markers, self.marker_of(d)) else {
            return false;
        };
        match m.store.marked(&key).await {
            Ok(found) => found,
            Err(e) => {
                self.metrics.idempotency_failed();
                tracing::warn!(
                    error = %chain(&e),
                    stream_seq = d.stream_seq(),
                    "the idempotency marker cannot be read: the message is sent (it may have been processed before)"
                );
                false
            }
        }
    }

    /// Writes the markers of `keys` (all sent, then every acknowledgement awaited),
    /// trying again until `ack_wait` from the first try would run out; then gives up,
    /// counting each, and the caller acks anyway.
    pub(super) async fn mark_processed(&self, keys: Vec<String>) {
        let Some(m) = &self.markers else {
            return;
        };
        if keys.is_empty() {
            return;
        }
        let started = Instant::now();
        let mut tries = 0u32;
        loop {
            let Err(e) = m.store.mark(&keys).await else {
                return;
            };
            tries = tries.saturating_add(1);
            let wait = backoff(FIRST_WAIT, Duration::from_secs(1), tries);
            if started.elapsed() + wait >= m.patience {
                for _ in &keys {
                    self.metrics.idempotency_failed();
                }
                tracing::error!(
                    error = %chain(&e),
                    messages = keys.len(),
                    tries,
                    "idempotency markers not written within ack_wait: acked without them (a redelivery would reach the app again)"
                );
                return;
            }
            tracing::warn!(error = %chain(&e), tries, "idempotency markers not written yet: trying again");
            tokio::time::sleep(wait).await;
        }
    }
}
