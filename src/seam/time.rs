//! The clocks the dispatcher and the boundaries share: the shutdown's [`Deadline`]
//! (started once, bounding every step after it, so that no step waits on NATS or
//! anything else past `delivery.shutdown_grace_ms`), [`bounded`] to run one such step,
//! [`sleep_until`] for an optional deadline in a `select!`, and [`Alarm`] for one that
//! a loop sets again every turn.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::time::Instant;

/// The end of the shutdown grace. The first component that sees the shutdown begin
/// starts the clock (`start`); every later step (the drain, the unpin, releasing what
/// is left, the final flush) is bounded by the same instant. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Deadline {
    /// The grace in nanoseconds (a reload may change it until the clock starts).
    grace_ns: Arc<AtomicU64>,
    at: Arc<OnceLock<Instant>>,
}

impl Deadline {
    /// A clock that will run for `grace` once started.
    pub fn new(grace: Duration) -> Deadline {
        Deadline {
            grace_ns: Arc::new(AtomicU64::new(nanos(grace))),
            at: Arc::new(OnceLock::new()),
        }
    }

    /// A reload's grace: it bounds a shutdown that starts later (one that started
    /// keeps its deadline).
    pub fn set_grace(&self, grace: Duration) {
        self.grace_ns.store(nanos(grace), Ordering::Relaxed);
    }

    fn grace(&self) -> Duration {
        Duration::from_nanos(self.grace_ns.load(Ordering::Relaxed))
    }

    /// Starts the clock (only the first call does) and returns the deadline.
    pub fn start(&self) -> Instant {
        *self.at.get_or_init(|| Instant::now() + self.grace())
    }

    /// Starts the clock with `grace` instead of the configured one (a drain's
    /// `wait`); only the first start counts. Returns the deadline.
    pub fn start_within(&self, grace: Duration) -> Instant {
        *self.at.get_or_init(|| Instant::now() + grace)
    }

    /// The deadline, once started.
    pub fn get(&self) -> Option<Instant> {
        self.at.get().copied()
    }

    /// The deadline if started, else `grace` from now (a drain that is not a process
    /// shutdown, such as a deleted group, still gets its grace).
    pub fn or_from_now(&self) -> Instant {
        self.get().unwrap_or_else(|| Instant::now() + self.grace())
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Runs one shutdown step until `deadline`; `None` (and a warning naming the step)
/// when the grace ran out first. What the step would have settled is redelivered by
/// JetStream after `ack_wait`.
pub async fn bounded<F: Future>(deadline: Instant, step: &'static str, f: F) -> Option<F::Output> {
    match tokio::time::timeout_at(deadline, f).await {
        Ok(out) => Some(out),
        Err(_) => {
            tracing::warn!(
                step,
                "shutdown grace is over: step abandoned (JetStream redelivers what it would have settled)"
            );
            None
        }
    }
}

/// A loop's timer that outlives its turns: re-armed only when its instant changes.
///
/// A fresh `sleep_until` in each turn's `select!` registers a timer in the runtime's
/// wheel when the turn waits and removes it when another arm wins: twice per message
/// in a loop that turns once per message (~3 % of the daemon's CPU at full load).
/// An `Alarm` keeps one timer and moves it only when the instant moves.
#[derive(Debug, Default)]
pub struct Alarm {
    /// Made at the first instant (a timer needs the runtime).
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    /// What it rings at; `None`: never.
    at: Option<Instant>,
}

impl Alarm {
    /// Sets the instant to ring at (`None`: never); unchanged, nothing is done.
    pub fn set(&mut self, at: Option<Instant>) {
        if at == self.at {
            return;
        }
        self.at = at;
        if let Some(at) = at {
            match &mut self.sleep {
                Some(sleep) => sleep.as_mut().reset(at),
                None => self.sleep = Some(Box::pin(tokio::time::sleep_until(at))),
            }
        }
    }

    /// Rings at the instant set (at once if it has passed), then is unset; never
    /// while unset. Cancel-safe: dropped before it rings, it stays set.
    pub async fn ring(&mut self) {
        match (self.at, &mut self.sleep) {
            (Some(_), Some(sleep)) => {
                sleep.as_mut().await;
                self.at = None;
            }
            _ => std::future::pending().await,
        }
    }
}

/// Sleeps until `at`; forever when there is nothing to wait for.
pub async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn an_alarm_rings_at_its_latest_instant_once_and_never_while_unset() {
        let start = Instant::now();
        let mut alarm = Alarm::default();
        // Unset: never.
        assert!(
            tokio::time::timeout(Duration::from_secs(60), alarm.ring())
                .await
                .is_err()
        );
        alarm.set(Some(start + Duration::from_secs(120)));
        // A turn that loses keeps it set.
        assert!(
            tokio::time::timeout(Duration::from_secs(1), alarm.ring())
                .await
                .is_err()
        );
        // Moved earlier, it rings then.
        alarm.set(Some(start + Duration::from_secs(70)));
        alarm.ring().await;
        assert_eq!(Instant::now(), start + Duration::from_secs(70));
        // Rung: unset until set again.
        assert!(
            tokio::time::timeout(Duration::from_secs(60), alarm.ring())
                .await
                .is_err()
        );
        // Set to an instant that has passed: at once.
        alarm.set(Some(start));
        let before = Instant::now();
        alarm.ring().await;
        assert_eq!(Instant::now(), before);
        // Set to the same instant again after ringing: rings again.
        alarm.set(Some(start));
        alarm.ring().await;
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_start_fixes_the_deadline() {
        let d = Deadline::new(Duration::from_secs(5));
        assert_eq!(d.get(), None);
        let first = d.start();
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(d.clone().start(), first, "clones share the clock");
        assert_eq!(d.or_from_now(), first);
    }

    #[tokio::test(start_paused = true)]
    async fn a_step_is_abandoned_at_the_deadline() {
        let deadline = Instant::now() + Duration::from_secs(1);
        let never = std::future::pending::<()>();
        let started = Instant::now();
        assert_eq!(bounded(deadline, "wait", never).await, None);
        assert_eq!(started.elapsed(), Duration::from_secs(1));
        assert_eq!(bounded(deadline, "ready", async { 7 }).await, Some(7));
    }
}
