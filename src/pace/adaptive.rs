//! The adaptive concurrency limit as one pure function: `step(cfg, state, observation)
//! -> state`, one call per finished HTTP request, O(1), no allocation, no clock (the
//! caller's monotonic nanoseconds come with each observation).
//!
//! The limit grows while the app's latency stays near a floor it keeps measuring, and
//! falls only on what says "too much": latency above that floor, overload answers
//! (429, 503, 504) and timeouts. A message's own failure (404, 409, 500, 502, any
//! other answer outside 2xx, a broken connection) is neither a latency sample nor a
//! cut: it lowers the limit only when such failures are more than half of a window's
//! fresh answers (an app that fails most of what it gets is overloaded, whatever each
//! answer says). A message offered before that fails again is not counted at all:
//! poison messages retried for ever pile up, and their retries alone would soon be
//! most of the answers. Retrying a status is the policy's business
//! (`retry_statuses`), not this one's: a steady few per cent of rejected messages,
//! retried or not, keep the limit where it is. What keeps it from oscillating between
//! the floor and twice the optimum, as plain AIMD does:
//!
//! - evidence counts only when it was gathered under the limit in force: an overload
//!   answer to a request started before the last change, or a latency sample from the
//!   round trip right after it, is ignored (at most one cut per round trip);
//! - decisions are made per window of samples (a mean against a threshold that carries
//!   the floor's own spread), not per sample, and a level that was fine must be
//!   congested twice in a row before it is cut;
//! - a latency cut is proportional (the further above the floor, the deeper), from
//!   what was really in flight, never below `min`;
//! - a limit found congested right after a raise becomes a ceiling that is re-tried
//!   only after a hold that doubles with each failed re-try (8 → 64 windows);
//! - the floor is re-measured every 5 s with one window at half the limit, and re-based
//!   when cuts stop lowering the latency (the app got slower: not our queue);
//! - no growth unless the limit was used (≥ 80 % of it in flight);
//! - a latency jump is followed within a round trip: two answers in a row more than
//!   ten times over the threshold (and over 100 ms) cut like a timeout (halving)
//!   without waiting for the window to fill, so a 1000× jump halves the limit once
//!   per round trip (from 4 to 1 in two of them). One slow answer among fast ones is
//!   a tail, not a jump.

/// What one finished request says about the app's capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// A 2xx: a latency sample.
    Ok,
    /// The app (or a proxy in front of it) says it has too much: 429, 503, 504.
    Overload,
    /// The request timed out.
    Timeout,
    /// The message's own failure: any other answer (404, 409, 500, 502, 3xx, ...) or
    /// a connection that broke after it was made. Not a latency sample (a fast 404
    /// says nothing of the time the work takes) and no cut on its own; more than half
    /// of a window's answers failing is a cut, the failures of retries not counted.
    Failure,
    /// The app could not be reached: a health matter, not a capacity signal.
    Error,
}

impl Signal {
    /// What an HTTP status says. Overload is what says "too much" whoever sends it:
    /// 429 (too many requests), 503 (unavailable: a full queue, a load shedder) and
    /// 504 (a proxy in front of the app gave up waiting for it: a timeout). A 502 is
    /// the message's own: a proxy's "the app broke the connection or answered
    /// garbage" follows a crash on one message as often as load, and a window of
    /// them still cuts. Whether a status is retried does not enter into it.
    pub fn of_status(status: u16) -> Signal {
        match status {
            200..=299 => Signal::Ok,
            429 | 503 | 504 => Signal::Overload,
            _ => Signal::Failure,
        }
    }
}

/// One finished request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observation {
    /// When the answer came, in the caller's monotonic nanoseconds.
    pub finished_ns: u64,
    /// How long the request took.
    pub latency_ns: u64,
    /// What it said.
    pub signal: Signal,
    /// Requests in flight right after this one started (itself included).
    pub in_flight_at_start: u32,
    /// The message was offered before (its attempt past the first): a failure of it
    /// again is its own, whatever share of the answers its retries make.
    pub retry: bool,
}

/// The bounds and the fixed constants of the controller.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tuning {
    /// `delivery.min_in_flight`.
    pub min: u32,
    /// `delivery.max_in_flight`.
    pub max: u32,
    /// Congested: a window's mean above `floor·(1 + tolerance) + slack + noise`.
    tolerance: f64,
    /// An absolute excess never taken for queueing: 3 ms. Against an app that answers
    /// in well under a millisecond, a busy host's own scheduling moves latency by
    /// that much: the latency grows with what is in flight although nothing waits in
    /// the app (Little's law on a CPU-bound host), and throughput still gains from
    /// the concurrency. Against the fast sink of bench/adaptive a 0.25 ms slack held
    /// the limit to 0.63× of a fixed 64's throughput, 1 ms to 0.84–0.93× (its limit
    /// near 28), 3 ms to 0.98–1.00× (near 58). Against a 10 ms worker-pool app it admits
    /// less than one queued request per worker (the limit settles near 1.5 W instead
    /// of 1.1 W, p99 one service time above the floor, no 503s); overload answers
    /// and timeouts still cut at once whatever the latency.
    slack_ns: u64,
    /// The noise allowance, `z·floor_sd/√n`.
    noise_z: f64,
    /// A mean above `threshold·severe` cuts without waiting for confirmation.
    severe: f64,
    /// The cut on an overload answer.
    overload_factor: f64,
    /// The cut on a timeout.
    timeout_factor: f64,
    /// A latency cut is `clamp(target/mean, this, 1)`.
    deepest_cut: f64,
    /// A latency jump: an answer above `threshold·spike` and `spike_min_ns`; two in
    /// a row cut by `timeout_factor` at once. Ten times: under the window's cap
    /// (twice the threshold) a single sample cannot tell a jump from a tail, and an
    /// answer an order of magnitude over is as good as timed out.
    spike: f64,
    /// 100 ms: a busy host stalls every request in flight for tens of milliseconds at
    /// times, ten times a fast app's threshold; that is no jump in the app.
    spike_min_ns: u64,
    /// Samples per window: `clamp(limit, window_min, window_max)`.
    window_min: u32,
    window_max: u32,
    /// Samples of a floor probe's window, at least.
    probe_window: u32,
    /// The first floor probe after slow start, then every `probe_every_ns`.
    first_probe_ns: u64,
    probe_every_ns: u64,
    /// Windows to wait before re-trying a ceiling; doubles per failed re-try up to max.
    hold_base: u32,
    hold_max: u32,
    /// Congested windows at `min` before the floor is re-based.
    rebase_at_min: u32,
}

const MS: u64 = 1_000_000;

impl Tuning {
    /// The controller for `[min, max]` (`min` at least 1, `max` at least `min`).
    pub fn new(min: u32, max: u32) -> Tuning {
        let min = min.max(1);
        Tuning {
            min,
            max: max.max(min),
            tolerance: 0.06,
            slack_ns: 3 * MS,
            noise_z: 3.0,
            severe: 1.25,
            overload_factor: 0.75,
            timeout_factor: 0.5,
            deepest_cut: 0.5,
            spike: 10.0,
            spike_min_ns: 100 * MS,
            window_min: 16,
            window_max: 64,
            probe_window: 32,
            first_probe_ns: 1_000 * MS,
            probe_every_ns: 5_000 * MS,
            hold_base: 8,
            hold_max: 64,
            rebase_at_min: 5,
        }
    }
}

/// Where the controller is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Doubling per good window, until the first congestion or `max`.
    SlowStart,
    /// +1 per good window, cuts on congestion.
    Steady,
    /// One window at half the limit, re-measuring the floor; then back to `resume`.
    Probe {
        /// The limit to go back to.
        resume: u32,
    },
}

const NONE: u64 = u64::MAX;

/// The controller's whole state (`Copy`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Adaptive {
    /// The limit in force, always within `[min, max]`.
    pub limit: u32,
    /// Where it is.
    pub phase: Phase,
    /// Latency evidence: requests started at or after this instant.
    epoch_ns: u64,
    /// Overload evidence: requests started at or after the last change.
    changed_ns: u64,
    /// The window in progress tests a limit just raised.
    raised: bool,
    /// The previous window was congested at a level that had been fine.
    pending: bool,
    /// The window: samples, their sum and sum of squares (clamped at `cap_ns`), the
    /// failures beside them, and the most in flight at any of their starts.
    n: u32,
    failures: u32,
    sum: f64,
    squares: f64,
    most_in_flight: u32,
    cap_ns: u64,
    /// Latency spikes in a row, under the limit in force.
    spikes: u32,
    /// The no-queue latency and its spread (`NONE` until measured).
    pub floor_ns: u64,
    floor_sd_ns: f64,
    next_probe_ns: u64,
    /// The lowest raised-to limit found congested, and the windows left before it is
    /// re-tried.
    ceiling: u32,
    hold_left: u32,
    hold_len: u32,
    congested_at_min: u32,
    /// The mean that caused the last latency cut (0: none), where the series of cuts
    /// began, and how many cuts in a row did not lower the latency.
    cut_mean: f64,
    cut_from: u32,
    flat_cuts: u32,
}

impl Adaptive {
    /// A fresh controller at `min`, in slow start.
    pub fn new(t: &Tuning, now_ns: u64) -> Adaptive {
        Adaptive::starting_at(t, t.min, now_ns)
    }

    /// A fresh controller at `limit` (clamped), in slow start: what a reload that
    /// turns adaptive on starts from.
    pub fn starting_at(t: &Tuning, limit: u32, now_ns: u64) -> Adaptive {
        Adaptive {
            limit: limit.clamp(t.min, t.max),
            phase: Phase::SlowStart,
            epoch_ns: now_ns,
            changed_ns: now_ns,
            raised: false,
            pending: false,
            n: 0,
            failures: 0,
            sum: 0.0,
            squares: 0.0,
            most_in_flight: 0,
            cap_ns: NONE,
            spikes: 0,
            floor_ns: NONE,
            floor_sd_ns: 0.0,
            next_probe_ns: NONE,
            ceiling: u32::MAX,
            hold_left: 0,
            hold_len: t.hold_base,
            congested_at_min: 0,
            cut_mean: 0.0,
            cut_from: 0,
            flat_cuts: 0,
        }
    }

    /// The same state under new bounds (a reload): the limit clamped into them.
    pub fn rebound(mut self, t: &Tuning) -> Adaptive {
        self.limit = self.limit.clamp(t.min, t.max);
        if let Phase::Probe { resume } = self.phase {
            self.phase = Phase::Probe {
                resume: resume.clamp(t.min, t.max),
            };
        }
        self
    }

    /// The most a window of `n` answers with no queue in the app averages: the floor
    /// with its tolerance and noise.
    fn unqueued(&self, t: &Tuning, n: u32) -> f64 {
        self.floor_ns as f64 * (1.0 + t.tolerance)
            + t.noise_z * self.floor_sd_ns / f64::from(n.max(1)).sqrt()
    }

    /// Congested above this: [`Adaptive::unqueued`] plus the slack.
    fn threshold(&self, t: &Tuning, n: u32) -> f64 {
        self.unqueued(t, n) + t.slack_ns as f64
    }

    /// A latency an order of magnitude over the threshold (never before the floor is
    /// known).
    fn is_spike(&self, t: &Tuning, latency_ns: u64) -> bool {
        self.floor_ns != NONE
            && latency_ns > t.spike_min_ns
            && latency_ns as f64 > t.spike * self.threshold(t, t.window_min)
    }

    fn reset_window(&mut self, t: &Tuning) {
        self.n = 0;
        self.failures = 0;
        self.sum = 0.0;
        self.squares = 0.0;
        self.most_in_flight = 0;
        self.cap_ns = if self.floor_ns == NONE {
            NONE
        } else {
            (2.0 * self.threshold(t, t.window_min)) as u64
        };
    }

    fn set_limit(&mut self, t: &Tuning, new: u32, now_ns: u64) {
        let new = new.clamp(t.min, t.max);
        self.raised = new > self.limit;
        self.spikes = 0;
        if new != self.limit {
            self.limit = new;
            self.changed_ns = now_ns;
            // The first round trip after a change mixes the old limit and the new.
            let transition = if self.floor_ns == NONE {
                0
            } else {
                self.floor_ns
            };
            self.epoch_ns = now_ns.saturating_add(transition);
        }
        self.reset_window(t);
    }

    /// `at` was congested right after a raise: hold below it; a failed re-try of the
    /// same ceiling doubles the hold.
    fn note_ceiling(&mut self, t: &Tuning, at: u32) {
        self.hold_len = if at >= self.ceiling {
            (self.hold_len * 2).min(t.hold_max)
        } else {
            t.hold_base
        };
        self.ceiling = at;
        self.hold_left = self.hold_len;
    }

    fn forget_ceiling(&mut self, t: &Tuning) {
        self.ceiling = u32::MAX;
        self.hold_len = t.hold_base;
        self.hold_left = 0;
    }

    fn rebase(&mut self, mean: f64, sd: f64) {
        self.floor_ns = mean as u64;
        self.floor_sd_ns = sd;
    }
}

/// A cut by `factor` that always moves by at least one, never below `min`.
fn shrink(t: &Tuning, from: u32, factor: f64) -> u32 {
    let x = (f64::from(from) * factor).floor() as u32;
    x.min(from.saturating_sub(1)).max(t.min)
}

/// The controller's next state after `o`.
pub fn step(t: &Tuning, mut s: Adaptive, o: &Observation) -> Adaptive {
    let now = o.finished_ns;
    let start = o.finished_ns.saturating_sub(o.latency_ns);
    match o.signal {
        Signal::Error => return s,
        // A message that failed before and fails again is its own problem: counted,
        // its retries would be most of a window once enough such messages cycle
        // (their retries grow as they pile up, the fresh traffic shrinks with each
        // cut), and a steady few per cent would drive the limit to `min`.
        Signal::Failure if o.retry => return s,
        // Sent under an older limit: says nothing of this one.
        _ if start < s.changed_ns => return s,
        Signal::Overload => return overloaded(t, s, now, t.overload_factor),
        Signal::Timeout => return overloaded(t, s, now, t.timeout_factor),
        // A jump shows in the round trip right after a change already: no mix of the
        // old limit and the new makes an answer ten times over the threshold.
        Signal::Ok if s.is_spike(t, o.latency_ns) => {
            s.spikes += 1;
            if s.spikes >= 2 && s.limit > t.min {
                return overloaded(t, s, now, t.timeout_factor);
            }
        }
        Signal::Ok => s.spikes = 0,
        // Neither a latency sample nor a spike, nor the end of a run of spikes.
        Signal::Failure => {}
    }
    // The first round trip after a change mixes the old limit and the new.
    if start < s.epoch_ns {
        return s;
    }
    s.most_in_flight = s.most_in_flight.max(o.in_flight_at_start);
    if o.signal == Signal::Failure {
        s.failures += 1;
    } else {
        let latency = o.latency_ns.min(s.cap_ns) as f64;
        s.n += 1;
        s.sum += latency;
        s.squares += latency * latency;
    }
    let window = s.limit.clamp(t.window_min, t.window_max);
    let need = match s.phase {
        Phase::Probe { .. } => t.probe_window.max(window),
        _ => window,
    };
    if s.n + s.failures < need {
        return s;
    }
    window_closed(t, s, now)
}

/// Evidence of overload under the limit in force (an overload answer, a timeout, a
/// latency jump, a window that mostly failed): cut by `factor` at once (from the
/// limit a probe interrupts), remember the ceiling, one cut per round trip.
fn overloaded(t: &Tuning, mut s: Adaptive, now: u64, factor: f64) -> Adaptive {
    let base = match s.phase {
        Phase::Probe { resume } => resume,
        _ => s.limit,
    };
    s.phase = Phase::Steady;
    s.pending = false;
    s.congested_at_min = 0;
    if s.next_probe_ns == NONE {
        s.next_probe_ns = now.saturating_add(t.first_probe_ns);
    }
    s.note_ceiling(t, base);
    let new = shrink(t, base, factor);
    s.set_limit(t, new, now);
    // Even at `min` (no change): the next cut needs a request started after this one.
    s.changed_ns = now;
    s.epoch_ns = s.epoch_ns.max(now);
    s
}

fn window_closed(t: &Tuning, mut s: Adaptive, now: u64) -> Adaptive {
    if s.failures > s.n {
        // More than half of the window failed: whatever each answer said, an app that
        // fails most of what it gets is overloaded (and a cut costs nothing more).
        return overloaded(t, s, now, t.overload_factor);
    }
    // At least half the window are samples (the window is at least `window_min`).
    let n = f64::from(s.n);
    let mean = s.sum / n;
    let sd = (s.squares / n - mean * mean).max(0.0).sqrt();
    if let Phase::Probe { resume } = s.phase {
        s.phase = Phase::Steady;
        s.pending = false;
        if s.floor_ns == NONE || mean <= s.threshold(t, s.n) {
            // Only a window with no queue in it moves the floor: within the tolerance
            // and the noise, not the slack. At half a limit the slack let rise above
            // twice the app's workers the probe still queues, and taking that for the
            // floor would raise the threshold, the limit and the next probe with it.
            if s.floor_ns == NONE {
                s.rebase(mean, sd);
            } else if mean <= s.unqueued(t, s.n) {
                s.floor_ns = ((s.floor_ns as f64 + mean) / 2.0) as u64;
                s.floor_sd_ns = (s.floor_sd_ns + sd) / 2.0;
            }
            s.set_limit(t, resume, now);
            return s;
        }
        // Congested even at half the limit: not a floor; decide as on any window.
    }
    if s.floor_ns == NONE || mean < 0.9 * s.floor_ns as f64 {
        // The first measurement, or the app got clearly faster.
        s.rebase(mean, sd);
    }
    let threshold = s.threshold(t, s.n);
    let congested = mean > threshold;
    let severe = mean > threshold * t.severe;
    let used = s.most_in_flight * 5 >= s.limit * 4;
    let mut new = s.limit;
    let previous_cut = std::mem::replace(&mut s.cut_mean, 0.0);
    if congested && (s.raised || s.pending || severe || s.phase == Phase::SlowStart) {
        match cut(t, &mut s, mean, sd, previous_cut, now) {
            Some(limit) => new = limit,
            None => return s,
        }
    } else if congested {
        // A level that was fine: a second congested window in a row cuts.
        s.pending = true;
        s.flat_cuts = 0;
    } else {
        new = grow(t, &mut s, used, now);
    }
    // The floor, re-measured: one window at half the limit (not in slow start, not
    // while a congestion awaits confirmation).
    if s.phase == Phase::Steady && !s.pending && now >= s.next_probe_ns {
        s.next_probe_ns = now.saturating_add(t.probe_every_ns);
        if new > t.min {
            s.phase = Phase::Probe { resume: new };
            new = (new / 2).max(t.min);
        }
    }
    if new != s.limit {
        s.set_limit(t, new, now);
    } else {
        s.raised = false;
        s.reset_window(t);
    }
    s
}

/// A congested window that cuts: the new limit, or `None` when the controller went
/// back to slow start on a re-based floor (the app got slower, not our queue).
fn cut(
    t: &Tuning,
    s: &mut Adaptive,
    mean: f64,
    sd: f64,
    previous_cut: f64,
    now: u64,
) -> Option<u32> {
    s.pending = false;
    if previous_cut > 0.0 && mean >= 0.9 * previous_cut {
        s.flat_cuts += 1;
    } else {
        s.flat_cuts = 0;
        s.cut_from = s.limit;
    }
    if s.flat_cuts >= 2 && s.limit * 4 <= s.cut_from {
        s.rebase(mean, sd);
        s.forget_ceiling(t);
        s.flat_cuts = 0;
        s.congested_at_min = 0;
        s.phase = Phase::SlowStart;
        s.raised = false;
        s.reset_window(t);
        return None;
    }
    let mut new = s.limit;
    if s.limit <= t.min {
        s.congested_at_min += 1;
        if s.congested_at_min >= t.rebase_at_min {
            // At the lowest concurrency our own queueing is not the cause.
            s.rebase(mean, sd);
            s.congested_at_min = 0;
        }
    } else {
        if s.raised || s.phase == Phase::SlowStart {
            let at = s.limit;
            s.note_ceiling(t, at);
        } else {
            // The capacity moved: the old ceiling means nothing now.
            s.forget_ceiling(t);
        }
        let target = s.floor_ns as f64 * (1.0 + t.tolerance / 2.0) + t.slack_ns as f64 / 2.0;
        let factor = (target / mean).clamp(t.deepest_cut, 1.0);
        new = shrink(t, s.limit.min(s.most_in_flight.max(t.min)), factor);
        s.cut_mean = mean;
    }
    if s.phase == Phase::SlowStart {
        s.phase = Phase::Steady;
        s.next_probe_ns = now.saturating_add(t.first_probe_ns);
    }
    Some(new)
}

/// A window that was not congested: +1 (doubling in slow start) when the limit was
/// used, held below a ceiling until its hold runs out.
fn grow(t: &Tuning, s: &mut Adaptive, used: bool, now: u64) -> u32 {
    s.flat_cuts = 0;
    s.pending = false;
    s.congested_at_min = 0;
    if s.limit >= s.ceiling {
        s.forget_ceiling(t);
    }
    let mut new = s.limit;
    if used && s.limit < t.max {
        let want = match s.phase {
            Phase::SlowStart => s.limit.saturating_mul(2).min(t.max),
            _ => s.limit + 1,
        };
        new = if want < s.ceiling {
            want
        } else if s.hold_left > 0 {
            s.hold_left -= 1;
            s.ceiling.saturating_sub(1).max(s.limit)
        } else {
            s.ceiling.min(t.max)
        };
    }
    if s.phase == Phase::SlowStart && new >= t.max {
        s.phase = Phase::Steady;
        s.next_probe_ns = now.saturating_add(t.first_probe_ns);
    }
    new
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const US: u64 = 1_000;

    fn obs(t: u64, latency: u64, signal: Signal, in_flight: u32) -> Observation {
        Observation {
            finished_ns: t,
            latency_ns: latency,
            signal,
            in_flight_at_start: in_flight,
            retry: false,
        }
    }

    /// A closed loop's tuning, clock and dice, for [`Run::drive`].
    struct Run {
        t: Tuning,
        now: u64,
        rng: fastrand::Rng,
    }

    impl Run {
        /// Limits of 1 to `max`, at time 0, the dice seeded with `seed`.
        fn new(max: u32, seed: u64) -> Run {
            Run {
                t: Tuning::new(1, max),
                now: 0,
                rng: fastrand::Rng::with_seed(seed),
            }
        }

        /// A closed loop against an app of `workers` whose latency is `service` up to
        /// `workers` in flight and grows with the queue beyond (Little's law): the
        /// limit after each observation.
        fn drive(
            &mut self,
            mut s: Adaptive,
            n: usize,
            workers: u32,
            service: u64,
        ) -> (Adaptive, Vec<u32>) {
            let t = &self.t;
            let mut limits = Vec::with_capacity(n);
            for _ in 0..n {
                let l = s.limit;
                let latency = if l <= workers {
                    service
                } else {
                    service * u64::from(l) / u64::from(workers)
                };
                self.now += latency / u64::from(l) + self.rng.u64(0..1000);
                s = step(t, s, &obs(self.now, latency, Signal::Ok, l));
                assert!((t.min..=t.max).contains(&s.limit), "{} outside", s.limit);
                limits.push(s.limit);
            }
            (s, limits)
        }

        /// [`Run::drive`] from a new controller.
        fn start(&mut self, n: usize, workers: u32, service: u64) -> (Adaptive, Vec<u32>) {
            self.drive(Adaptive::new(&self.t, 0), n, workers, service)
        }
    }

    /// Where the limit settles against [`Run::drive`]'s app: the most in flight whose
    /// latency stays under the threshold, `W·(1 + tolerance + slack/service)`.
    fn equilibrium(t: &Tuning, workers: u32, service: u64) -> u32 {
        let slack = t.tolerance + t.slack_ns as f64 / service as f64;
        (f64::from(workers) * (1.0 + slack)).floor() as u32
    }

    fn warmed(t: &Tuning) -> (Adaptive, u64) {
        let mut s = Adaptive::new(t, 0);
        let mut now = 0;
        for _ in 0..16 {
            now += 10 * MS;
            s = step(t, s, &obs(now, 10 * MS, Signal::Ok, 1));
        }
        (s, now)
    }

    #[test]
    fn the_first_window_sets_the_floor_and_slow_start_doubles() {
        let t = Tuning::new(1, 64);
        let (s, _) = warmed(&t);
        assert_eq!(
            (s.limit, s.floor_ns, s.phase),
            (2, 10 * MS, Phase::SlowStart)
        );
    }

    #[test]
    fn overload_cuts_once_per_round_trip_and_only_under_the_limit_in_force() {
        let t = Tuning::new(1, 64);
        let (s, now) = warmed(&t);
        // Started before the last change (now − 30 ms): said nothing of the limit of 2.
        let stale = step(&t, s, &obs(now + MS, 30 * MS, Signal::Overload, 2));
        assert_eq!(stale.limit, 2);
        // Started under it: ×0.75, at least −1.
        let cut = step(&t, s, &obs(now + 25 * MS, MS, Signal::Overload, 2));
        assert_eq!(cut.limit, 1);
        // A second 503 from a request started before the cut: no second cut.
        let mut big = Adaptive::starting_at(&t, 40, 0);
        big = step(&t, big, &obs(100 * MS, MS, Signal::Overload, 40));
        assert_eq!(big.limit, 30);
        let again = step(&t, big, &obs(101 * MS, 5 * MS, Signal::Overload, 40));
        assert_eq!(again.limit, 30, "started before the cut");
        let later = step(&t, big, &obs(120 * MS, 5 * MS, Signal::Overload, 30));
        assert_eq!(later.limit, 22);
        // A timeout halves.
        let timed_out = step(&t, big, &obs(120 * MS, 5 * MS, Signal::Timeout, 30));
        assert_eq!(timed_out.limit, 15);
    }

    #[test]
    fn errors_say_nothing_and_an_unused_limit_does_not_grow() {
        let t = Tuning::new(1, 64);
        let (s, now) = warmed(&t);
        assert_eq!(step(&t, s, &obs(now + 25 * MS, MS, Signal::Error, 2)), s);
        let mut idle = s;
        for i in 0..16 {
            idle = step(
                &t,
                idle,
                &obs(now + 20 * MS + i * 5 * MS, 10 * MS, Signal::Ok, 1),
            );
        }
        assert_eq!(idle.limit, 2, "one in flight of two: no evidence for more");
    }

    #[test]
    fn what_a_status_says() {
        for (statuses, signal) in [
            (&[200, 204][..], Signal::Ok),
            (&[429, 503, 504], Signal::Overload),
            (&[404, 409, 400, 408, 500, 502, 304], Signal::Failure),
        ] {
            for &status in statuses {
                assert_eq!(Signal::of_status(status), signal, "{status}");
            }
        }
    }

    /// At `limit` (steady, floor 10 ms, the limit used), `n` observations a
    /// millisecond apart after `now`, `fail(i)` choosing the failures: the state after.
    fn feed(
        t: &Tuning,
        mut s: Adaptive,
        now: &mut u64,
        n: u32,
        fail: impl Fn(u32) -> bool,
    ) -> Adaptive {
        for i in 0..n {
            *now += MS;
            let signal = if fail(i) { Signal::Failure } else { Signal::Ok };
            let latency = if fail(i) { 100 * US } else { 10 * MS };
            s = step(t, s, &obs(*now, latency, signal, s.limit));
        }
        s
    }

    fn steady_at(t: &Tuning, limit: u32) -> (Adaptive, u64) {
        let (mut s, mut now) = warmed(t);
        s.phase = Phase::Steady;
        s.next_probe_ns = NONE;
        s.set_limit(t, limit, now);
        now += 20 * MS;
        (s, now)
    }

    #[test]
    fn a_window_mostly_failed_cuts_and_a_minority_does_not() {
        let t = Tuning::new(1, 64);
        // A window at 32 is 32 answers.
        for (failed, limit) in [(0, 33), (1, 33), (16, 33), (17, 24), (32, 24)] {
            let (s, mut now) = steady_at(&t, 32);
            let s = feed(&t, s, &mut now, 32, |i| i < failed);
            assert_eq!(s.limit, limit, "{failed} of 32 failed");
            assert_eq!(s.floor_ns, 10 * MS, "fast failures are not the floor");
        }
    }

    #[test]
    fn overload_timeouts_and_a_latency_jump_cut_but_a_tail_does_not() {
        let t = Tuning::new(1, 64);
        let (s, now) = steady_at(&t, 32);
        let at = |s: Adaptive, dt: u64, latency: u64, signal: Signal| {
            step(&t, s, &obs(now + dt, latency, signal, 32))
        };
        assert_eq!(at(s, MS, MS, Signal::Overload).limit, 24);
        assert_eq!(at(s, MS, MS, Signal::Timeout).limit, 16);
        // The threshold is 13.6 ms (floor 10 ms); ten times over it, twice in a row.
        let slow = 200 * MS;
        let one = at(s, slow, slow, Signal::Ok);
        assert_eq!(one.limit, 32, "one slow answer is a tail");
        assert_eq!(at(one, slow + 1, slow, Signal::Ok).limit, 16, "two: a jump");
        let failed = at(one, slow + 1, MS, Signal::Failure);
        assert_eq!(
            at(failed, slow + 2, slow, Signal::Ok).limit,
            16,
            "a failure is neutral"
        );
        let fast = at(one, slow + 1, 10 * MS, Signal::Ok);
        assert_eq!(
            at(fast, slow + 2, slow, Signal::Ok).limit,
            32,
            "a fast answer ends the run"
        );
        assert_eq!(
            at(one, slow + 1, 130 * MS, Signal::Ok).limit,
            32,
            "under ten times"
        );
        // Slow failures are no jump either.
        let f = at(s, slow, slow, Signal::Failure);
        assert_eq!(at(f, slow + 1, slow, Signal::Failure).limit, 32);
    }

    #[test]
    fn a_stalled_host_is_no_latency_jump() {
        let t = Tuning::new(1, 64);
        let mut s = Adaptive::starting_at(&t, 32, 0);
        let mut now = 0;
        for _ in 0..32 {
            now += 100 * US;
            s = step(&t, s, &obs(now, 500 * US, Signal::Ok, 32));
        }
        assert_eq!((s.limit, s.floor_ns), (64, 500 * US));
        // 50 ms is a hundred times the floor and over ten times the threshold (3.5
        // ms), under 100 ms: every request in flight held up by the host.
        for i in 0..8 {
            s = step(&t, s, &obs(now + 50 * MS + i, 50 * MS, Signal::Ok, 64));
        }
        assert_eq!(s.limit, 64);
    }

    #[test]
    fn a_thousandfold_latency_jump_halves_the_limit_each_round_trip() {
        let t = Tuning::new(1, 64);
        for (from, trips) in [(4, 2), (8, 3), (64, 6)] {
            let (mut s, mut now) = steady_at(&t, from);
            // A closed loop: the limit's worth starts at once, each answer 5 s later
            // (the floor was 10 ms).
            let mut k = 0;
            while s.limit > t.min {
                k += 1;
                let started = now;
                for i in 0..u64::from(s.limit) {
                    now = started + 5_000 * MS + i * US;
                    s = step(&t, s, &obs(now, now - started, Signal::Ok, s.limit));
                }
                assert!(
                    k <= trips,
                    "from {from}: still {} after {k} round trips",
                    s.limit
                );
            }
            assert_eq!(k, trips, "from {from}");
        }
    }

    #[test]
    fn a_severe_window_cuts_at_once_and_proportionally() {
        let mut r = Run::new(64, 1);
        let (s, _) = r.start(20_000, 8, 10 * MS);
        assert!(
            (8..=equilibrium(&r.t, 8, 10 * MS)).contains(&s.limit),
            "settled at the 8 workers: {}",
            s.limit
        );
        // The app loses half its workers: latency doubles at 8 in flight.
        let (_, limits) = r.drive(s, 200, 4, 10 * MS);
        let first_drop = limits.iter().position(|&l| l <= 5).expect("it drops");
        assert!(
            first_drop <= 80,
            "within one window and the transition: {first_drop}"
        );
    }

    #[test]
    fn a_probe_re_measures_the_floor_and_goes_back() {
        let mut r = Run::new(32, 2);
        // An app that is never the limit: the limit reaches 32 and probes at 16.
        let (_, limits) = r.start(20_000, 1000, 5 * MS);
        let tail = &limits[5_000..];
        assert!(tail.contains(&16), "a probe at half the limit");
        assert!(
            tail.iter().all(|&l| l == 32 || l == 16),
            "back to the limit after each probe"
        );
    }

    #[test]
    fn a_slower_app_re_bases_the_floor_instead_of_cutting_to_the_bottom() {
        let mut r = Run::new(64, 3);
        let (s, _) = r.start(20_000, 8, 10 * MS);
        // Every request now takes twice as long, whatever the concurrency.
        let (_, limits) = r.drive(s, 20_000, 8, 20 * MS);
        let tail = &limits[10_000..];
        let low = tail.iter().filter(|&&l| l < 4).count();
        assert!(
            low * 100 <= tail.len(),
            "it regrows to the 8 workers ({low} low)"
        );
    }

    #[test]
    fn converges_near_the_workers_for_many_apps() {
        let mut r = Run::new(256, 4);
        for case in 0..40 {
            let workers = r.rng.u32(2..=40);
            let service = r.rng.u64(500 * US..=50 * MS);
            r.now = 0;
            let (_, limits) = r.start(40_000, workers, service);
            let tail = &limits[20_000..];
            let high = equilibrium(&r.t, workers, service) + 1;
            // Outside: above where it settles, or below the workers but above where a
            // floor probe (half the limit) takes it.
            let outside = tail
                .iter()
                .filter(|&&l| l > high.max(workers + 1) || (l + 1 < workers && l > high / 2 + 1))
                .count();
            assert!(
                outside * 100 <= tail.len() * 2,
                "case {case}: W={workers} service={service} ns: {outside} of {} outside",
                tail.len()
            );
        }
    }

    #[test]
    fn a_step_down_in_capacity_is_followed_within_a_bounded_number_of_observations() {
        let mut r = Run::new(256, 5);
        for case in 0..40 {
            let workers = r.rng.u32(4..=60);
            let fewer = (workers / r.rng.u32(2..=4)).max(1);
            let service = r.rng.u64(MS..=50 * MS);
            r.now = 0;
            let (s, _) = r.start(30_000, workers, service);
            let before = s.limit;
            let (_, limits) = r.drive(s, 5_000, fewer, service);
            // Below the old limit and at (or under) where the fewer workers hold it.
            let target = before.min((fewer * 2).max(equilibrium(&r.t, fewer, service) + 1));
            let k = limits.iter().position(|&l| l < target);
            // A cut at most halves and takes a window (at most `window_max` answers)
            // plus the round trip after the change: six windows cover the three cuts
            // from the highest limit here (~130, where the slack lets a fast app's
            // 60 workers take it) to under a quarter of it.
            let bound = 6 * r.t.window_max as usize;
            assert!(
                k.is_some_and(|k| k <= bound),
                "case {case}: W {workers} -> {fewer}: {before} not left within {bound} ({k:?})"
            );
        }
    }

    /// A closed loop at the limit in force (`adaptive`: the controller's; else fixed at
    /// `t.max`) against an app of `workers` taking `service` a request (longer with a
    /// queue, as [`Run::drive`]'s), with a backlog of fresh messages of which every 33rd
    /// (3 %) is poison: answered 500 at once on every attempt and retried 1 s later,
    /// for ever (`max_deliver` 1000; retries start before fresh messages, as the
    /// dispatcher's do). For `secs` seconds: the good messages answered, and the
    /// limit at each second.
    fn poison_run(
        t: &Tuning,
        adaptive: bool,
        workers: u32,
        service: u64,
        secs: u64,
    ) -> (u64, Vec<u32>) {
        use std::cmp::Reverse;
        use std::collections::{BinaryHeap, VecDeque};
        let end = secs * 1_000 * MS;
        let mut s = Adaptive::new(t, 0);
        // (finish, start, poison, attempt, in flight at its start)
        let mut running = BinaryHeap::new();
        let mut retries: VecDeque<(u64, u32)> = VecDeque::new();
        let (mut now, mut fresh, mut good) = (0u64, 0u64, 0u64);
        let mut limits = Vec::new();
        while now < end {
            let limit = if adaptive { s.limit } else { t.max };
            while running.len() < limit as usize {
                let (poison, attempt) = match retries.front() {
                    Some(&(due, attempt)) if due <= now => {
                        retries.pop_front();
                        (true, attempt + 1)
                    }
                    _ => {
                        fresh += 1;
                        (fresh % 33 == 0, 1)
                    }
                };
                let n = running.len() as u32 + 1;
                let latency = if poison {
                    100 * US
                } else {
                    service * u64::from(n.max(workers)) / u64::from(workers)
                };
                running.push(Reverse((now + latency, now, poison, attempt, n)));
            }
            let Some(Reverse((finish, start, poison, attempt, n))) = running.pop() else {
                break;
            };
            if finish / (1_000 * MS) > now / (1_000 * MS) {
                limits.push(limit);
            }
            now = finish;
            if poison {
                retries.push_back((now + 1_000 * MS, attempt));
            } else if now <= end {
                good += 1;
            }
            let signal = if poison { Signal::Failure } else { Signal::Ok };
            let o = Observation {
                retry: attempt > 1,
                ..obs(now, finish - start, signal, n)
            };
            s = step(t, s, &o);
        }
        (good, limits)
    }

    #[test]
    fn poison_messages_retried_for_ever_leave_the_limit_where_a_fixed_one_is() {
        let t = Tuning::new(1, 32);
        for (workers, service) in [(32, 40 * MS), (16, 10 * MS), (32, 5 * MS)] {
            let (fixed, _) = poison_run(&t, false, workers, service, 60);
            let (adaptive, limits) = poison_run(&t, true, workers, service, 60);
            assert!(
                adaptive * 10 >= fixed * 9,
                "W {workers}, {service} ns: {adaptive} good against {fixed} fixed; limit each second {limits:?}"
            );
            let late = &limits[40..];
            let low = late.iter().filter(|&&l| l * 2 < workers).count();
            assert!(
                low * 5 <= late.len(),
                "W {workers}: the last 20 s mostly at or over half the workers: {late:?}"
            );
        }
    }

    /// Overload still cuts while retries pile up: the same run where every fresh
    /// message fails too (the app fails most of what it gets) ends low.
    #[test]
    fn fresh_failures_still_cut_among_retries() {
        let t = Tuning::new(1, 32);
        let (mut s, mut now) = steady_at(&t, 32);
        // 64 answers: retries of poison failing, fresh ones mostly failing.
        for i in 0..64u32 {
            now += MS;
            let retry = i % 2 == 0;
            let signal = if retry || i % 8 != 1 {
                Signal::Failure
            } else {
                Signal::Ok
            };
            let o = Observation {
                retry,
                ..obs(now, 10 * MS, signal, s.limit)
            };
            s = step(&t, s, &o);
        }
        assert!(s.limit < 32, "most fresh answers failed: {}", s.limit);
        // The same retries beside fresh answers that succeed: no cut.
        let (mut s, mut now) = steady_at(&t, 32);
        for i in 0..64u32 {
            now += MS;
            let retry = i % 4 != 0;
            let signal = if retry { Signal::Failure } else { Signal::Ok };
            let o = Observation {
                retry,
                ..obs(now, if retry { 100 * US } else { 10 * MS }, signal, s.limit)
            };
            s = step(&t, s, &o);
        }
        assert_eq!(s.limit, 32, "three retries failing to one fresh success");
        // An overload answer to a retry cuts as any other.
        let (s, now) = steady_at(&t, 32);
        let o = Observation {
            retry: true,
            ..obs(now + MS, MS, Signal::Overload, 32)
        };
        assert_eq!(step(&t, s, &o).limit, 24);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// 1 to 3 % of the answers fail (fast or slow, spread at random): the limit
        /// goes to max and stays, as without them (a probe halves it for a window).
        #[test]
        fn a_steady_share_of_failures_never_lowers_the_limit(
            max in 2u32..128,
            latency in MS..50 * MS,
            percent in 1u32..=3,
            failed_latency in 0u64..1000,
            seed: u64,
        ) {
            let t = Tuning::new(1, max);
            let mut rng = fastrand::Rng::with_seed(seed);
            let mut s = Adaptive::new(&t, 0);
            let mut now = 0;
            let mut low = 0;
            for i in 0..20_000u32 {
                now += latency / u64::from(s.limit) + 1;
                let o = if rng.u32(0..100) < percent {
                    obs(now, latency * failed_latency / 100, Signal::Failure, s.limit)
                } else {
                    obs(now, latency, Signal::Ok, s.limit)
                };
                s = step(&t, s, &o);
                if i >= 10_000 && s.limit != max {
                    prop_assert_eq!(s.limit, (max / 2).max(1), "only a probe");
                    low += 1;
                }
            }
            prop_assert!(low <= 2_000, "probes are short: {} of 10000", low);
        }

        #[test]
        fn the_limit_never_leaves_its_bounds(
            min in 1u32..8,
            span in 0u32..300,
            stream in proptest::collection::vec((0u64..5 * MS, 0u8..4, 0u8..10, 0u32..600), 1..2000),
        ) {
            let t = Tuning::new(min, min + span);
            let mut s = Adaptive::new(&t, 0);
            let mut now = 0u64;
            for (gap, kind, outcome, in_flight) in stream {
                now += gap;
                let latency = match kind {
                    0 => gap / 50,
                    1 => MS + gap * 4,
                    2 => now,
                    _ => 100 * MS + gap * 300,
                }
                .min(now);
                let signal = match outcome {
                    0 => Signal::Overload,
                    1 => Signal::Timeout,
                    2 => Signal::Error,
                    3 | 4 => Signal::Failure,
                    _ => Signal::Ok,
                };
                s = step(&t, s, &obs(now, latency, signal, in_flight));
                prop_assert!((t.min..=t.max).contains(&s.limit));
            }
        }

        #[test]
        fn a_steady_latency_goes_to_max_and_stays(max in 2u32..256, latency in 100 * US..100 * MS) {
            let t = Tuning::new(1, max);
            let mut s = Adaptive::new(&t, 0);
            let mut now = 0;
            for i in 0..30_000u32 {
                now += latency / u64::from(s.limit) + 1;
                s = step(&t, s, &obs(now, latency, Signal::Ok, s.limit));
                if i >= 10_000 {
                    prop_assert!(s.limit == max || s.limit == (max / 2).max(1), "{}", s.limit);
                }
            }
        }
    }
}
