//! The rate limit (`delivery.rate_limit_per_s`, `rate_limit_burst`) as a token bucket
//! in its GCRA form: the whole state is the theoretical arrival time of the next
//! start. A start is allowed when `now ≥ tat − τ` (τ = (burst − 1) spacings); taking
//! one moves `tat` a spacing past `max(tat, now)`, so idle time refills up to `burst`
//! starts and never more. Pure: the caller's monotonic nanoseconds come in.

/// The bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    spacing_ns: u64,
    tolerance_ns: u64,
    tat_ns: u64,
}

impl Bucket {
    /// `rate_per_s` starts a second (at least 1), `burst` at once (0: one second's
    /// worth); full at `now_ns`.
    pub fn new(rate_per_s: u32, burst: u32, now_ns: u64) -> Bucket {
        let rate = u64::from(rate_per_s.max(1));
        let burst = u64::from(if burst == 0 { rate_per_s } else { burst }.max(1));
        let spacing_ns = (1_000_000_000 / rate).max(1);
        Bucket {
            spacing_ns,
            tolerance_ns: (burst - 1).saturating_mul(spacing_ns),
            tat_ns: now_ns,
        }
    }

    /// The earliest instant the next start may happen (`now_ns` when one may now).
    pub fn next_start(&self, now_ns: u64) -> u64 {
        now_ns.max(self.tat_ns.saturating_sub(self.tolerance_ns))
    }

    /// Takes one start at `now_ns`, or says when one may be taken.
    ///
    /// # Errors
    /// The instant of the next start, when none may start now.
    pub fn take(&mut self, now_ns: u64) -> Result<(), u64> {
        let at = self.next_start(now_ns);
        if at > now_ns {
            return Err(at);
        }
        self.tat_ns = self.tat_ns.max(now_ns).saturating_add(self.spacing_ns);
        Ok(())
    }

    /// The same schedule under a new rate (a reload): never owing more than one
    /// spacing of the new rate, never handing out more than the new burst.
    pub fn reconfigure(&mut self, rate_per_s: u32, burst: u32, now_ns: u64) {
        let fresh = Bucket::new(rate_per_s, burst, now_ns);
        let tat = self
            .tat_ns
            .min(now_ns.saturating_add(fresh.spacing_ns))
            .max(now_ns.saturating_sub(fresh.tolerance_ns));
        *self = Bucket {
            tat_ns: tat,
            ..fresh
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: u64 = 1_000_000_000;

    /// Greedy starts over `[from, to)`: each as soon as it is allowed.
    fn greedy(b: &mut Bucket, from: u64, to: u64) -> u64 {
        let (mut now, mut n) = (from, 0);
        while now < to {
            match b.take(now) {
                Ok(()) => n += 1,
                Err(at) => now = at,
            }
        }
        n
    }

    #[test]
    fn a_full_bucket_gives_its_burst_then_the_rate() {
        let mut b = Bucket::new(100, 10, 0);
        for _ in 0..10 {
            assert_eq!(b.take(0), Ok(()));
        }
        assert_eq!(b.take(0), Err(S / 100), "the eleventh waits one spacing");
        assert_eq!(greedy(&mut b, S / 100, 10 * S), 999, "then 100 a second");
    }

    #[test]
    fn burst_zero_is_one_seconds_worth_and_idle_time_refills_no_more() {
        let mut b = Bucket::new(50, 0, 0);
        assert_eq!(greedy(&mut b, 0, 1), 50);
        // An hour idle: the same burst, not an hour's worth.
        assert_eq!(greedy(&mut b, 3600 * S, 3600 * S + 1), 50);
    }

    #[test]
    fn a_reload_owes_no_old_delay_and_gives_no_more_than_the_new_burst() {
        let mut b = Bucket::new(1, 1, 0);
        assert_eq!(b.take(0), Ok(()));
        assert_eq!(b.take(0), Err(S));
        b.reconfigure(1000, 1, 0);
        assert_eq!(b.next_start(0), S / 1000, "one spacing of the new rate");
        let mut b = Bucket::new(1000, 1000, 0);
        b.reconfigure(10, 2, 0);
        assert_eq!(greedy(&mut b, 0, 1), 2, "the new burst");
    }

    proptest! {
        #[test]
        fn starts_in_any_window_never_exceed_burst_plus_rate(
            rate in 1u32..5000, burst in 0u32..200, from in 0u64..10 * S, len in 1u64..3 * S,
        ) {
            let mut b = Bucket::new(rate, burst, 0);
            let n = greedy(&mut b, from, from + len);
            let burst = u64::from(if burst == 0 { rate } else { burst });
            let spacing = (S / u64::from(rate)).max(1);
            prop_assert!(n <= burst + len / spacing + 1, "{n} starts");
        }
    }
}
