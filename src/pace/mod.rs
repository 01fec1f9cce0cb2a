//! How fast work may start at the app: the concurrency limit in force (fixed at
//! `max_in_flight`, or adaptive between `min_in_flight` and it: `adaptive`), the rate
//! limit on request starts (`bucket`), the process's budget across sources
//! (`budget`: who may start one more when they compete), and how much a limit lets
//! the pull engine buffer. Pure: the caller's monotonic nanoseconds come in; the
//! dispatcher owns the one [`Pacer`] and feeds it one [`Observation`] per finished
//! request.
//!
//! The limit belongs to the source, not to the app: each source's runner has its own
//! pacer, which learns the latency of that source's requests (its path, its messages,
//! its batch size), so that one source's slow endpoint never throttles another's fast
//! one on the same app. What the sources may send together is the process's budget,
//! above them.

pub mod adaptive;
pub mod bucket;
pub mod budget;

pub use adaptive::{Observation, Signal};

use adaptive::{Adaptive, Tuning};
use bucket::Bucket;

/// `[delivery]`'s pacing keys, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PaceSettings {
    /// `concurrency = "adaptive"`.
    pub adaptive: bool,
    /// `min_in_flight` (adaptive only).
    pub min_in_flight: u32,
    /// `max_in_flight`: the fixed limit, or the adaptive one's ceiling.
    pub max_in_flight: u32,
    /// `rate_limit_per_s`; 0 = no rate limit.
    pub rate_per_s: u32,
    /// `rate_limit_burst`; 0 = one second's worth.
    pub burst: u32,
}

/// The limit in force and the rate limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pacer {
    settings: PaceSettings,
    adaptive: Option<(Tuning, Adaptive)>,
    bucket: Option<Bucket>,
}

impl Pacer {
    /// At `now_ns`: an adaptive limit starts at `min_in_flight` (slow start), a
    /// bucket full.
    pub fn new(settings: PaceSettings, now_ns: u64) -> Pacer {
        let adaptive = settings.adaptive.then(|| {
            let t = Tuning::new(settings.min_in_flight, settings.max_in_flight);
            (t, Adaptive::new(&t, now_ns))
        });
        let bucket = (settings.rate_per_s > 0)
            .then(|| Bucket::new(settings.rate_per_s, settings.burst, now_ns));
        Pacer {
            settings,
            adaptive,
            bucket,
        }
    }

    /// What it was built from.
    pub fn settings(&self) -> PaceSettings {
        self.settings
    }

    /// Requests that may run at once now.
    pub fn limit(&self) -> u32 {
        self.adaptive
            .as_ref()
            .map_or(self.settings.max_in_flight, |(_, a)| a.limit)
    }

    /// One finished request (ignored with a fixed limit).
    pub fn observe(&mut self, o: &Observation) {
        if let Some((t, a)) = &mut self.adaptive {
            *a = adaptive::step(t, *a, o);
        }
    }

    /// Takes a start from the rate limit (ask only once a slot is free).
    ///
    /// # Errors
    /// When the next start may happen, in the caller's nanoseconds.
    pub fn take_start(&mut self, now_ns: u64) -> Result<(), u64> {
        self.bucket.as_mut().map_or(Ok(()), |b| b.take(now_ns))
    }

    /// New settings at run time: an adaptive limit keeps what it learnt (clamped into
    /// the new bounds), one turned on starts from `in_flight` in slow start; the
    /// bucket keeps its schedule under the new rate.
    pub fn reconfigure(&mut self, settings: PaceSettings, now_ns: u64, in_flight: u32) {
        let t = Tuning::new(settings.min_in_flight, settings.max_in_flight);
        self.adaptive = match (settings.adaptive, self.adaptive) {
            (false, _) => None,
            (true, Some((_, a))) => Some((t, a.rebound(&t))),
            (true, None) => Some((t, Adaptive::starting_at(&t, in_flight, now_ns))),
        };
        self.bucket = match (settings.rate_per_s, self.bucket) {
            (0, _) => None,
            (rate, Some(mut b)) => {
                b.reconfigure(rate, settings.burst, now_ns);
                Some(b)
            }
            (rate, None) => Some(Bucket::new(rate, settings.burst, now_ns)),
        };
        self.settings = settings;
    }
}

/// Messages the pull engine may hold under `limit` (of `max_in_flight`): the buffer
/// shrinks in proportion, never below the limit itself (plus one to keep a message
/// ready), never above `max_buffered`.
pub fn buffer_budget(max_buffered: usize, limit: usize, max_in_flight: usize) -> usize {
    if limit >= max_in_flight || max_in_flight == 0 {
        return max_buffered;
    }
    let scaled = (max_buffered * limit).div_ceil(max_in_flight);
    scaled.max(limit + 1).min(max_buffered)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(adaptive: bool, rate: u32) -> PaceSettings {
        PaceSettings {
            adaptive,
            min_in_flight: 2,
            max_in_flight: 32,
            rate_per_s: rate,
            burst: 0,
        }
    }

    #[test]
    fn fixed_is_max_in_flight_and_observations_change_nothing() {
        let mut p = Pacer::new(settings(false, 0), 0);
        p.observe(&Observation {
            finished_ns: 10,
            latency_ns: 1,
            signal: Signal::Overload,
            in_flight_at_start: 32,
            retry: false,
        });
        assert_eq!(p.limit(), 32);
        assert_eq!(p.take_start(0), Ok(()), "no rate limit: always");
    }

    #[test]
    fn adaptive_starts_at_the_floor_and_a_reload_keeps_or_starts_it() {
        let mut p = Pacer::new(settings(true, 0), 0);
        assert_eq!(p.limit(), 2);
        p.reconfigure(settings(false, 0), 5, 7);
        assert_eq!(p.limit(), 32, "fixed again");
        p.reconfigure(settings(true, 0), 5, 7);
        assert_eq!(p.limit(), 7, "from what is in flight");
        let narrow = PaceSettings {
            max_in_flight: 4,
            ..settings(true, 0)
        };
        p.reconfigure(narrow, 6, 7);
        assert_eq!(p.limit(), 4, "clamped into the new bounds");
    }

    #[test]
    fn the_rate_limit_is_taken_per_start_and_a_reload_turns_it_off() {
        let mut p = Pacer::new(settings(false, 2), 0);
        assert_eq!(p.take_start(0), Ok(()));
        assert_eq!(p.take_start(0), Ok(()));
        assert_eq!(p.take_start(0), Err(500_000_000));
        p.reconfigure(settings(false, 0), 0, 0);
        assert_eq!(p.take_start(0), Ok(()));
    }

    #[test]
    fn the_buffer_shrinks_with_the_limit() {
        for (max_buffered, limit, max_in_flight, want) in [
            (256, 32, 32, 256),
            (256, 8, 32, 64),
            (256, 1, 32, 8),
            (10, 1, 32, 2),
            (256, 31, 32, 248),
            (4, 3, 4, 4),
        ] {
            assert_eq!(
                buffer_budget(max_buffered, limit, max_in_flight),
                want,
                "{max_buffered} {limit} {max_in_flight}"
            );
        }
    }
}
