//! What a pinned instance holds goes to the next instance in stream order: on a drain
//! (once the requests in flight are done) or when the app stays unhealthy, the
//! consumer is frozen on the server, what waits here is released (oldest first, then
//! what the retired pulls brought), the pin is given up, and the consumer is thawed,
//! all within a few round trips. nats-server moves a released message to the
//! back of its redelivery queue whenever it wakes while none of the waiting requests
//! may be served (this instance's are retired, a standby's wait for the pin), which
//! would hand the next instance a key's later messages before its earlier ones; a
//! frozen consumer does not look, and a resume does not wake it, so the last release
//! is kept back and sent after the thaw.

use std::time::Duration;

use super::book::{Book, Settlement};
use super::lanes::LaneKey;
use super::{Dispatch, Run};
use crate::seam::markers::Markers;
use crate::seam::publish::Publish;
use crate::seam::{Forward, Settle, Source};

/// A handover begun on a frozen consumer: the release kept back for after the thaw.
pub(super) struct Frozen<T> {
    poke: T,
}

/// What a pinned instance's drain gives back when it hands over, in stream order key
/// by key: what its requests in flight handed back (they are older than what waited
/// behind them), then what waited and what the retired pulls brought, then what
/// arrived after. Off (`None` in the run) for everything else: that goes back at once.
pub(super) struct Deferred<T> {
    returned: Vec<(T, Duration)>,
    waiting: Vec<(T, Duration)>,
}

impl<T> Deferred<T> {
    /// A drain that defers `waiting` (in order).
    pub(super) fn new(waiting: Vec<(T, Duration)>) -> Deferred<T> {
        Deferred {
            returned: Vec::new(),
            waiting,
        }
    }

    /// A request in flight handed its message back (a retry, an unreachable app).
    pub(super) fn returned(&mut self, settler: T, delay: Duration) {
        self.returned.push((settler, delay));
    }

    /// A message a pull had delivered arrived after the drain began (the newest).
    pub(super) fn arrived(&mut self, settler: T) {
        self.waiting.push((settler, Duration::ZERO));
    }

    /// Everything, in the order it goes back.
    pub(super) fn into_releases(self) -> Vec<(T, Duration)> {
        let mut all = self.returned;
        all.extend(self.waiting);
        all
    }
}

/// Which of `releases` (in the order they go) is kept back for after the thaw: the
/// last one released at once (one with a delay does not wake the server when it is
/// sent). `None`: nothing would wake it, so there is no reason to freeze.
fn poke_at<T>(releases: &[(T, Duration)]) -> Option<usize> {
    releases.iter().rposition(|(_, delay)| delay.is_zero())
}

/// The delays released messages go back with, in their order, so that none comes
/// back before an earlier one of its lane: each waits at least as long as the longest
/// wait before it in its lane (a message queued behind a retry's backoff waits for
/// it). Unordered messages (`LaneKey::Free`) keep their own.
fn lane_ordered(releases: &[(LaneKey, Duration)]) -> Vec<Duration> {
    let mut longest: std::collections::HashMap<&LaneKey, Duration> =
        std::collections::HashMap::new();
    releases
        .iter()
        .map(|(lane, delay)| {
            if *lane == LaneKey::Free {
                return *delay;
            }
            let wait = longest.entry(lane).or_default();
            *wait = (*wait).max(*delay);
            *wait
        })
        .collect()
}

impl<F: Forward, P: Publish, M: Markers> Dispatch<F, P, M> {
    /// Takes what waits out of the book (queued, or waiting for a retry) in the order
    /// it arrived, with the delay each is released with: none for one never offered,
    /// the rest of its backoff for a retry, and in an ordered mode at least the wait of
    /// an earlier message of its lane ([`lane_ordered`]). With `keep_verdicts`,
    /// messages whose dead letter is still to be published stay (a NAK on their last
    /// delivery would lose them).
    pub(super) fn take_waiting<T: Settle>(
        &self,
        book: &mut Book<T>,
        keep_verdicts: bool,
    ) -> Vec<(T, Duration)> {
        let now = tokio::time::Instant::now();
        let mut waiting: Vec<u64> = book.lanes.drain();
        waiting.extend(book.due.drain(..));
        waiting.extend(
            book.held
                .iter()
                .filter(|(_, e)| e.retry_at.is_some())
                .map(|(id, _)| *id),
        );
        waiting.sort_unstable();
        waiting.dedup();
        let mut taken = Vec::with_capacity(waiting.len());
        let mut lanes = Vec::with_capacity(waiting.len());
        for id in waiting {
            if let Some(e) = book.held.get(&id)
                && keep_verdicts
                && e.verdict.is_some()
            {
                // Kept: one that was due (its timer already popped) is due again.
                if e.retry_at.is_none() {
                    book.due.push_back(id);
                }
                continue;
            }
            if let Some(e) = book.take(id) {
                let delay = e.retry_at.map_or(Duration::ZERO, |at| {
                    at.saturating_duration_since(now)
                        .max(crate::policy::MIN_RETRY_DELAY)
                });
                let settler = e.settler.clone();
                lanes.push((e.lane.clone(), delay));
                self.finish(e, Settlement::RELEASED);
                taken.push(settler);
            }
        }
        taken.into_iter().zip(lane_ordered(&lanes)).collect()
    }

    /// Releases what waits at once; retries keep their remaining delay.
    pub(super) async fn release_waiting<T: Settle>(
        &self,
        book: &mut Book<T>,
        keep_verdicts: bool,
    ) -> usize {
        let releases = self.take_waiting(book, keep_verdicts);
        for (settler, delay) in &releases {
            self.release(settler, *delay).await;
        }
        releases.len()
    }

    /// What a handover releases, in the order it goes back: what waits here (taken
    /// out of the book), then `left` (what the retired pulls brought, newer still).
    pub(super) fn handover_releases<S: Source>(
        &self,
        run: &mut Run<S, F>,
        left: Vec<S::Settler>,
    ) -> Vec<(S::Settler, Duration)> {
        let mut releases = self.take_waiting(&mut run.book, true);
        releases.extend(left.into_iter().map(|s| (s, Duration::ZERO)));
        releases
    }

    /// The first half of a handover: `releases` go back to the server in their order.
    /// A pinned instance freezes the consumer first (for at most `bound`), keeps the
    /// last release sent at once back for [`Dispatch::finish_handover`], and waits for
    /// the server to confirm the last one it sends.
    pub(super) async fn begin_handover<S: Source>(
        &self,
        source: &mut S,
        mut releases: Vec<(S::Settler, Duration)>,
        bound: Duration,
    ) -> Option<Frozen<S::Settler>> {
        let pinned = self.pinned_mode && self.readiness.status().pinned;
        let frozen = match poke_at(&releases) {
            Some(at) if pinned && source.freeze(bound).await => {
                let (poke, _) = releases.remove(at);
                Some(Frozen { poke })
            }
            _ => None,
        };
        // The server takes a consumer's acks from a queue of their own, apart from
        // the API requests that unpin and thaw it: the last release is confirmed, so
        // that the pin moves only once every release is back in the redelivery queue
        // (else the next instance could be served a key's later messages first).
        let last = releases.pop();
        for (settler, delay) in &releases {
            self.release(settler, *delay).await;
        }
        if let Some((settler, delay)) = last {
            if pinned {
                self.release_confirmed(&settler, delay).await;
            } else {
                self.release(&settler, delay).await;
            }
        }
        frozen
    }

    /// The second half: gives up the pin (with `step_down`), thaws the consumer and
    /// sends the release kept back, which makes the server serve the next instance,
    /// from the oldest released message on. Returns whether the pin was given up.
    pub(super) async fn finish_handover<S: Source>(
        &self,
        source: &mut S,
        frozen: Option<Frozen<S::Settler>>,
        step_down: bool,
    ) -> bool {
        let stepped = step_down && source.step_down().await;
        if let Some(Frozen { poke }) = frozen {
            source.thaw().await;
            self.release(&poke, Duration::ZERO).await;
        }
        stepped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_release_waits_at_least_as_long_as_an_earlier_one_of_its_lane() {
        let k = |s: &str| LaneKey::Subject(std::sync::Arc::from(s));
        // (each release's lane and own delay in ms, the delays it goes back with)
        type Case<'a> = (&'a [(LaneKey, u64)], &'a [u64]);
        let cases: &[Case] = &[
            (&[], &[]),
            // A retry backing off for 300 ms and the key's later messages queued behind
            // it: they wait as long, and come back after it.
            (&[(k("a"), 300), (k("a"), 0), (k("a"), 0)], &[300, 300, 300]),
            // Other keys go at once; a later, longer retry of the key sets the bar higher.
            (
                &[
                    (k("a"), 300),
                    (k("b"), 0),
                    (k("a"), 500),
                    (k("a"), 0),
                    (k("b"), 20),
                ],
                &[300, 0, 500, 500, 20],
            ),
            // An earlier message with no wait does not hold a later retry back.
            (&[(k("a"), 0), (k("a"), 300)], &[0, 300]),
            // Unordered: each keeps its own.
            (&[(LaneKey::Free, 300), (LaneKey::Free, 0)], &[300, 0]),
        ];
        for (releases, want) in cases {
            let releases: Vec<(LaneKey, Duration)> = releases
                .iter()
                .map(|(l, d)| (l.clone(), Duration::from_millis(*d)))
                .collect();
            let want: Vec<Duration> = want.iter().map(|d| Duration::from_millis(*d)).collect();
            assert_eq!(lane_ordered(&releases), want, "{releases:?}");
        }
    }

    #[test]
    fn the_poke_is_the_last_release_sent_at_once() {
        let cases: &[(&[Duration], Option<usize>)] = &[
            (&[], None),
            (&[Duration::ZERO], Some(0)),
            (&[Duration::ZERO, Duration::ZERO, Duration::ZERO], Some(2)),
            (&[Duration::ZERO, MS, Duration::ZERO, 5 * MS], Some(2)),
            (&[MS, 2 * MS], None),
        ];
        for (delays, want) in cases {
            let releases: Vec<((), Duration)> = delays.iter().map(|d| ((), *d)).collect();
            assert_eq!(poke_at(&releases), *want, "{delays:?}");
        }
    }
}
