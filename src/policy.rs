//! Pure decisions about one message: the app's answer (or its absence) and the
//! delivery count become one [`Disposition`]. Also the retry backoff and the parsing of
//! `Retry-After` and `Jetrelay-Action`.
//!
//! The rules ([`Policy::decide`]): a 2xx acks; an exact status in `retry_statuses` or
//! `term_statuses` wins over a class (`5xx`) in the other list, and a status in
//! neither retries. A retry (a retry status, a broken connection, a timeout, an answer
//! that does not parse) waits the exponential backoff on the attempt, or the app's
//! `Retry-After` capped at `retry_after_max_ms`, never less than `retry_initial_ms`;
//! an attempt at `max_deliver` terminates instead ([`TermReason::MaxDeliver`], naming
//! the last failure). `Jetrelay-Action` overrides the status. A message that cannot be
//! offered ([`TermReason::Invalid`]), a route's `term` or `dlq`, and an expired
//! message ([`is_expired`]; a retry past the expiry, [`within_life`]) terminate
//! without a request. An unreachable app holds the message ([`Disposition::Hold`]):
//! no attempt is counted, and it is offered again after [`Policy::unreachable_delay`].
//! An answer whose outputs could not be published retries as a failed request
//! ([`Policy::publish_failed`]). How a disposition is carried out (a delayed NAK, or a
//! retry in place in an ordered lane) is the dispatcher's.
//!
//! No I/O, no clocks (the caller passes `now`), no outside crate types.

use std::fmt;
use std::time::{Duration, SystemTime};

use crate::message::Invalid;
use serde::{Deserialize, Serialize};

/// A set of HTTP statuses written as `"503"` or `"5xx"`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatusSet {
    exact: Vec<u16>,
    classes: Vec<u16>,
}

/// A status pattern that is neither `NNN` (100–599) nor `Nxx` (1–5).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a status like \"503\" or \"5xx\"")]
pub struct BadStatusPattern(pub String);

impl StatusSet {
    /// Parses patterns.
    ///
    /// # Errors
    /// The first pattern that is not a status or a class.
    pub fn parse<S: AsRef<str>>(patterns: &[S]) -> Result<StatusSet, BadStatusPattern> {
        let mut set = StatusSet::default();
        for p in patterns {
            let p = p.as_ref();
            let bad = || BadStatusPattern(p.to_string());
            let b = p.as_bytes();
            if b.len() != 3 || !(b'1'..=b'5').contains(&b[0]) {
                return Err(bad());
            }
            if p[1..].eq_ignore_ascii_case("xx") {
                set.classes.push(u16::from(b[0] - b'0'));
            } else if b[1..].iter().all(u8::is_ascii_digit) {
                set.exact.push(p.parse().map_err(|_| bad())?);
            } else {
                return Err(bad());
            }
        }
        Ok(set)
    }

    /// Whether the status is in the set, exactly or by class.
    pub fn contains(&self, status: u16) -> bool {
        self.contains_exact(status) || self.classes.contains(&(status / 100))
    }

    fn contains_exact(&self, status: u16) -> bool {
        self.exact.contains(&status)
    }
}

/// What a route (`crate::route`) does instead of a request.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Skip {
    /// Acked, never sent.
    Ack,
    /// Terminated (dead-lettered first when a DLQ is set, as `Jetrelay-Action: term`
    /// is), never sent.
    Term,
    /// Dead-lettered (when a DLQ is set), then terminated, never sent.
    Dlq,
}

impl Skip {
    /// Its name, as the config spells it.
    pub fn name(self) -> &'static str {
        match self {
            Skip::Ack => "ack",
            Skip::Term => "term",
            Skip::Dlq => "dlq",
        }
    }
}

/// What the app asked for with `Jetrelay-Action`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppAction {
    /// Acknowledge, whatever the status.
    Ack,
    /// Retry with backoff.
    Retry,
    /// Terminate.
    Term,
    /// Dead-letter now, skipping retries.
    Dlq,
}

impl AppAction {
    /// Its name, as the header spells it (and the metric label).
    pub fn name(self) -> &'static str {
        match self {
            AppAction::Ack => "ack",
            AppAction::Retry => "retry",
            AppAction::Term => "term",
            AppAction::Dlq => "dlq",
        }
    }

    /// Parses the header value, case-insensitively; `None` for anything else.
    pub fn parse(value: &str) -> Option<AppAction> {
        match value.trim().to_ascii_lowercase().as_str() {
            "ack" => Some(AppAction::Ack),
            "retry" => Some(AppAction::Retry),
            "term" => Some(AppAction::Term),
            "dlq" => Some(AppAction::Dlq),
            _ => None,
        }
    }
}

/// What happened when the message was offered to the app.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The app answered.
    Answered {
        /// The HTTP status.
        status: u16,
        /// `Retry-After`, already turned into a delay.
        retry_after: Option<Duration>,
        /// A valid `Jetrelay-Action`.
        action: Option<AppAction>,
    },
    /// The app is not there: the connection could not be made (refused, or no route).
    /// Not the message's fault: no attempt is counted.
    Unreachable,
    /// No answer on a connection that was made (reset, closed before the answer), or
    /// the request could not be sent.
    TransportError,
    /// No answer within `http.timeout_ms`.
    Timeout,
    /// A 2xx whose body, a batch answer, does not parse: the batch is retried.
    BadAnswer,
    /// The message broke what the transport promises (bad metadata, no partition
    /// token, malformed headers); it is never sent.
    Invalid(Invalid),
    /// A route settles the message without a request: its action, and its name.
    Routed(Skip, String),
    /// Its `Nats-TTL` had passed when it was about to be sent: never sent.
    Expired,
    /// It was older than `delivery.max_age_ms` when it was about to be sent: never
    /// sent.
    TooOld,
    /// Its idempotency marker exists: it was processed before, and is acked without
    /// a request.
    Duplicate,
}

/// Why a message is terminated; the text goes into `+TERM <reason>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TermReason {
    /// The app answered a term status.
    Status(u16),
    /// The app said `Jetrelay-Action: term` or `dlq`.
    AppAction(AppAction),
    /// A retry would exceed `consumer.max_deliver`.
    MaxDeliver {
        /// The attempts made.
        attempts: u32,
        /// What the last one ran into.
        last: LastFailure,
    },
    /// The message failed validation.
    Invalid(Invalid),
    /// The app's answer publishes what cannot be published (a subject not allowed,
    /// too many or too large messages, a malformed document): retrying cannot help.
    PublishRefused(String),
    /// A route's `term` or `dlq`: the route's name.
    Routed(Skip, String),
    /// Its `Nats-TTL` passed before it could be sent, or would before its retry.
    Expired,
    /// It was older than `delivery.max_age_ms` when it was about to be sent.
    TooOld,
}

impl fmt::Display for TermReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TermReason::Status(s) => write!(f, "jetrelay: app answered {s}"),
            TermReason::AppAction(a) => write!(f, "jetrelay: app asked for {}", a.name()),
            TermReason::MaxDeliver { attempts, last } => {
                write!(f, "jetrelay: {attempts} attempts exhausted, last: {last}")
            }
            TermReason::Invalid(why) => write!(f, "jetrelay: {why}"),
            TermReason::PublishRefused(why) => write!(f, "jetrelay: publish_refused: {why}"),
            TermReason::Routed(skip, route) => {
                write!(f, "jetrelay: route {route} says {}", skip.name())
            }
            TermReason::Expired => f.write_str("jetrelay: expired"),
            TermReason::TooOld => f.write_str("jetrelay: too_old"),
        }
    }
}

/// What the last try of a message ran into, when it was one to retry: a dead letter
/// that says only "attempts exhausted" would send the operator to the wrong place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LastFailure {
    /// The app answered this (retry) status.
    Status(u16),
    /// The app asked for a retry (`Jetrelay-Action: retry`).
    AppRetry,
    /// No answer on a connection that was made.
    Transport,
    /// No answer within `http.timeout_ms`.
    Timeout,
    /// The app answered, but its outputs could not be published (the reason label).
    Publish(&'static str),
    /// The app answered 2xx, but its batch answer did not parse.
    BadAnswer,
}

impl fmt::Display for LastFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LastFailure::Status(s) => write!(f, "app answered {s}"),
            LastFailure::AppRetry => f.write_str("app asked for retry"),
            LastFailure::Transport => f.write_str("no answer (connection closed)"),
            LastFailure::Timeout => f.write_str("no answer in time"),
            LastFailure::Publish(why) => write!(f, "outputs not published ({why})"),
            LastFailure::BadAnswer => f.write_str("the answer did not parse"),
        }
    }
}

/// The one final action for a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disposition {
    /// `+ACK`.
    Ack,
    /// Try again after `delay` (a delayed NAK, or an in-place retry in ordered lanes).
    Retry {
        /// How long to wait; never zero.
        delay: Duration,
    },
    /// Permanent failure: dead-letter when a DLQ is configured, then `+TERM <reason>`.
    Term {
        /// Why.
        reason: TermReason,
    },
    /// The app is unreachable: keep the message (alive with `+WPI`) and offer it again
    /// when the app is back, without counting an attempt.
    Hold,
}

/// The rules that turn outcomes into dispositions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Statuses that retry.
    pub retry: StatusSet,
    /// Statuses that terminate.
    pub term: StatusSet,
    /// First retry delay.
    pub retry_initial: Duration,
    /// Largest backoff delay.
    pub retry_max: Duration,
    /// Cap for the app's `Retry-After`.
    pub retry_after_max: Duration,
    /// `consumer.max_deliver`; `None` = unlimited.
    pub max_attempts: Option<u32>,
}

/// The shortest delay a NAK ever carries: a NAK without delay is never a retry (the
/// policy's own floor is `retry_initial`; this one guards the remainder of a retry
/// handed back at shutdown).
pub const MIN_RETRY_DELAY: Duration = Duration::from_millis(1);

impl Policy {
    /// Decides what to do with a message after its `attempt`-th try (1-based, counted
    /// across redeliveries).
    pub fn decide(&self, outcome: &Outcome, attempt: u32) -> Disposition {
        let (retry_after, last) = match outcome {
            Outcome::Invalid(why) => {
                return Disposition::Term {
                    reason: TermReason::Invalid(why.clone()),
                };
            }
            Outcome::Routed(Skip::Ack, _) | Outcome::Duplicate => return Disposition::Ack,
            Outcome::Routed(skip, route) => {
                return Disposition::Term {
                    reason: TermReason::Routed(*skip, route.clone()),
                };
            }
            Outcome::Expired => {
                return Disposition::Term {
                    reason: TermReason::Expired,
                };
            }
            Outcome::TooOld => {
                return Disposition::Term {
                    reason: TermReason::TooOld,
                };
            }
            Outcome::Unreachable => return Disposition::Hold,
            Outcome::TransportError => (None, LastFailure::Transport),
            Outcome::Timeout => (None, LastFailure::Timeout),
            Outcome::BadAnswer => (None, LastFailure::BadAnswer),
            Outcome::Answered {
                status,
                retry_after,
                action,
            } => {
                match action.map_or_else(|| self.classify(*status), Class::from) {
                    Class::Ack => return Disposition::Ack,
                    Class::Term(reason) => {
                        return Disposition::Term {
                            reason: reason.unwrap_or(TermReason::Status(*status)),
                        };
                    }
                    Class::Retry => {}
                }
                let last = if *action == Some(AppAction::Retry) {
                    LastFailure::AppRetry
                } else {
                    LastFailure::Status(*status)
                };
                (*retry_after, last)
            }
        };
        self.retry(retry_after, attempt, last)
    }

    /// The app acked, but its outputs could not be published (NATS unavailable, no
    /// stream, too many batches in flight): retried like a failed request, on the
    /// same attempts. `why` is the failure's label.
    pub fn publish_failed(&self, attempt: u32, why: &'static str) -> Disposition {
        self.retry(None, attempt, LastFailure::Publish(why))
    }

    /// A retry after `retry_after` (else the backoff), unless the attempts are spent.
    fn retry(&self, retry_after: Option<Duration>, attempt: u32, last: LastFailure) -> Disposition {
        if self.max_attempts.is_some_and(|max| attempt >= max) {
            return Disposition::Term {
                reason: TermReason::MaxDeliver {
                    attempts: attempt,
                    last,
                },
            };
        }
        let delay = match retry_after {
            Some(d) => d.min(self.retry_after_max),
            None => backoff(self.retry_initial, self.retry_max, attempt),
        };
        // Never sooner than the first retry delay: `Retry-After: 0` (or a date in the
        // past) would otherwise spend every attempt in a few milliseconds.
        Disposition::Retry {
            delay: delay.max(self.retry_initial).max(MIN_RETRY_DELAY),
        }
    }

    /// Exact statuses win over classes; 2xx is always ack; a status in no list retries,
    /// because retrying loses nothing while `max_deliver` bounds it.
    fn classify(&self, status: u16) -> Class {
        if (200..300).contains(&status) {
            Class::Ack
        } else if self.retry.contains_exact(status) {
            Class::Retry
        } else if self.term.contains_exact(status) {
            Class::Term(None)
        } else if self.retry.contains(status) {
            Class::Retry
        } else if self.term.contains(status) {
            Class::Term(None)
        } else {
            Class::Retry
        }
    }
}

enum Class {
    Ack,
    Retry,
    Term(Option<TermReason>),
}

impl From<AppAction> for Class {
    fn from(a: AppAction) -> Class {
        match a {
            AppAction::Ack => Class::Ack,
            AppAction::Retry => Class::Retry,
            AppAction::Term | AppAction::Dlq => Class::Term(Some(TermReason::AppAction(a))),
        }
    }
}

/// The longest wait between two offers while the app is unreachable: when it comes
/// back, delivery resumes within this.
pub const UNREACHABLE_MAX_DELAY: Duration = Duration::from_secs(5);

impl Policy {
    /// How long to wait before offering a message again after the app was found
    /// unreachable `streak` times in a row: the retry backoff, capped at
    /// [`UNREACHABLE_MAX_DELAY`] (and never above `retry_max`).
    pub fn unreachable_delay(&self, streak: u32) -> Duration {
        let cap = self.retry_max.min(UNREACHABLE_MAX_DELAY);
        backoff(self.retry_initial.min(cap), cap, streak)
    }

    /// Whether a NAK on this delivery would never be redelivered: JetStream counts
    /// deliveries, and stops at `max_deliver`.
    pub fn is_last_delivery(&self, delivered: u32) -> bool {
        self.max_attempts.is_some_and(|max| delivered >= max)
    }
}

/// Whether a message that expires at `expires` (`None`: never) has expired at `now`:
/// it is then not sent, neither first nor again.
pub fn is_expired(expires: Option<SystemTime>, now: SystemTime) -> bool {
    expires.is_some_and(|at| now >= at)
}

/// Whether a message published at `published` is past `max_age` at `now` (`None`:
/// no limit, or no publish time to judge by).
pub fn is_too_old(
    published: Option<SystemTime>,
    max_age: Option<Duration>,
    now: SystemTime,
) -> bool {
    match (published, max_age) {
        (Some(at), Some(max)) => now.duration_since(at).is_ok_and(|age| age > max),
        _ => false,
    }
}

/// A retry that would come after the message expires (at `expires`, seen at `now`)
/// is no retry: the message is terminated as expired instead. Every other
/// disposition stands.
pub fn within_life(
    disposition: Disposition,
    expires: Option<SystemTime>,
    now: SystemTime,
) -> Disposition {
    match (&disposition, expires) {
        (Disposition::Retry { delay }, Some(at))
            if now.checked_add(*delay).is_none_or(|due| due > at) =>
        {
            Disposition::Term {
                reason: TermReason::Expired,
            }
        }
        _ => disposition,
    }
}

/// `initial × 2^(attempt−1)`, capped at `max`; attempt 0 counts as 1.
pub fn backoff(initial: Duration, max: Duration, attempt: u32) -> Duration {
    let shift = attempt.saturating_sub(1).min(31);
    initial
        .checked_mul(1u32 << shift)
        .map_or(max, |d| d.min(max))
}

/// The delay before NATS connection attempt number `attempts` (the client counts
/// from 1, and asks before every attempt, the first one included): none for the
/// first attempt, then `first × 2^(attempts−2)` capped at `max`.
pub fn reconnect_delay(first: Duration, max: Duration, attempts: usize) -> Duration {
    if attempts <= 1 {
        Duration::ZERO
    } else {
        backoff(first, max, u32::try_from(attempts - 1).unwrap_or(u32::MAX))
    }
}

/// Parses `Retry-After`: delay-seconds or an HTTP date (a date in the past is zero).
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
impl Policy {
    /// The policy the runners' tests take: 5xx retried from 100 ms up to a minute,
    /// 4xx terminal, no attempt limit.
    pub(crate) fn for_tests() -> Policy {
        Policy {
            retry: StatusSet::parse(&["5xx"]).unwrap(),
            term: StatusSet::parse(&["4xx"]).unwrap(),
            retry_initial: Duration::from_millis(100),
            retry_max: Duration::from_secs(60),
            retry_after_max: Duration::from_secs(60),
            max_attempts: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        Policy {
            retry: StatusSet::parse(&["408", "409", "425", "429", "5xx", "404"]).unwrap(),
            term: StatusSet::parse(&["4xx"]).unwrap(),
            retry_initial: Duration::from_millis(1000),
            retry_max: Duration::from_millis(60_000),
            retry_after_max: Duration::from_millis(300_000),
            max_attempts: Some(10),
        }
    }

    fn answered(status: u16) -> Outcome {
        Outcome::Answered {
            status,
            retry_after: None,
            action: None,
        }
    }

    fn retry(ms: u64) -> Disposition {
        Disposition::Retry {
            delay: Duration::from_millis(ms),
        }
    }

    fn term(reason: TermReason) -> Disposition {
        Disposition::Term { reason }
    }

    fn exhausted(attempts: u32, last: LastFailure) -> Disposition {
        term(TermReason::MaxDeliver { attempts, last })
    }

    #[test]
    fn status_to_action_table() {
        let p = policy();
        let with = |status, retry_after: Option<u64>, action| Outcome::Answered {
            status,
            retry_after: retry_after.map(Duration::from_secs),
            action,
        };
        let cases: Vec<(Outcome, u32, Disposition)> = vec![
            (answered(200), 1, Disposition::Ack),
            (answered(204), 9, Disposition::Ack),
            (answered(299), 1, Disposition::Ack),
            (answered(503), 1, retry(1000)),
            (answered(500), 2, retry(2000)),
            (answered(502), 3, retry(4000)),
            (answered(429), 7, retry(60_000)),
            (answered(404), 1, retry(1000)),
            (answered(408), 1, retry(1000)),
            (answered(400), 1, term(TermReason::Status(400))),
            (answered(422), 1, term(TermReason::Status(422))),
            (answered(301), 1, retry(1000)),
            (Outcome::TransportError, 1, retry(1000)),
            (Outcome::Unreachable, 1, Disposition::Hold),
            (Outcome::Unreachable, 10, Disposition::Hold),
            (Outcome::Unreachable, 1000, Disposition::Hold),
            (Outcome::Timeout, 2, retry(2000)),
            (answered(503), 10, exhausted(10, LastFailure::Status(503))),
            (Outcome::Timeout, 11, exhausted(11, LastFailure::Timeout)),
            (
                Outcome::BadAnswer,
                10,
                exhausted(10, LastFailure::BadAnswer),
            ),
            (
                Outcome::TransportError,
                10,
                exhausted(10, LastFailure::Transport),
            ),
            (
                with(200, None, Some(AppAction::Retry)),
                10,
                exhausted(10, LastFailure::AppRetry),
            ),
            (with(503, Some(5), None), 1, retry(5000)),
            (with(503, Some(0), None), 1, retry(1000)),
            (with(503, Some(0), None), 4, retry(1000)),
            (with(429, Some(100_000), None), 1, retry(300_000)),
            (with(400, Some(5), None), 1, term(TermReason::Status(400))),
            (with(500, None, Some(AppAction::Ack)), 1, Disposition::Ack),
            (with(200, None, Some(AppAction::Retry)), 2, retry(2000)),
            (with(200, Some(3), Some(AppAction::Retry)), 2, retry(3000)),
            (
                with(200, None, Some(AppAction::Term)),
                1,
                term(TermReason::AppAction(AppAction::Term)),
            ),
            (
                with(503, None, Some(AppAction::Dlq)),
                1,
                term(TermReason::AppAction(AppAction::Dlq)),
            ),
            (
                Outcome::Invalid(Invalid::NoPartition("x".into())),
                1,
                term(TermReason::Invalid(Invalid::NoPartition("x".into()))),
            ),
            (
                Outcome::Routed(Skip::Ack, "noise".into()),
                9,
                Disposition::Ack,
            ),
            (
                Outcome::Routed(Skip::Dlq, "bad".into()),
                1,
                term(TermReason::Routed(Skip::Dlq, "bad".into())),
            ),
            (
                Outcome::Routed(Skip::Term, "0".into()),
                1,
                term(TermReason::Routed(Skip::Term, "0".into())),
            ),
        ];
        for (outcome, attempt, want) in cases {
            assert_eq!(
                p.decide(&outcome, attempt),
                want,
                "{outcome:?} attempt {attempt}"
            );
        }
    }

    #[test]
    fn unreachable_delays_and_the_last_delivery() {
        let p = policy();
        let ms = |streak| p.unreachable_delay(streak).as_millis();
        assert_eq!(
            [ms(1), ms(2), ms(3), ms(4), ms(100)],
            [1000, 2000, 4000, 5000, 5000]
        );
        let mut short = policy();
        short.retry_max = Duration::from_millis(300);
        assert_eq!(short.unreachable_delay(9), Duration::from_millis(300));
        assert!(!p.is_last_delivery(9) && p.is_last_delivery(10) && p.is_last_delivery(11));
        short.max_attempts = None;
        assert!(!short.is_last_delivery(u32::MAX));
    }

    #[test]
    fn exact_statuses_win_over_classes() {
        let mut p = policy();
        p.retry = StatusSet::parse(&["4xx"]).unwrap();
        p.term = StatusSet::parse(&["429"]).unwrap();
        assert_eq!(p.decide(&answered(429), 1), term(TermReason::Status(429)));
        assert_eq!(p.decide(&answered(400), 1), retry(1000));
    }

    #[test]
    fn unlimited_attempts_never_terminate_retries() {
        let mut p = policy();
        p.max_attempts = None;
        assert_eq!(p.decide(&answered(503), 1000), retry(60_000));
    }

    #[test]
    fn status_patterns() {
        assert!(StatusSet::parse(&["5xx", "404", "4XX"]).is_ok());
        for bad in ["600", "5x", "abc", "20", "6xx", "0xx", "5x1"] {
            assert!(StatusSet::parse(&[bad]).is_err(), "{bad}");
        }
        let s = StatusSet::parse(&["5xx", "404"]).unwrap();
        assert!(s.contains(503) && s.contains(404) && !s.contains(400));
    }

    #[test]
    fn retry_after_seconds_and_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(
            parse_retry_after("120", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
        let later = httpdate::fmt_http_date(now + Duration::from_secs(30));
        assert_eq!(
            parse_retry_after(&later, now),
            Some(Duration::from_secs(30))
        );
        let earlier = httpdate::fmt_http_date(now - Duration::from_secs(30));
        assert_eq!(parse_retry_after(&earlier, now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-5", now), None);
    }

    #[test]
    fn reconnect_delay_table() {
        let (f, m) = (Duration::from_millis(250), Duration::from_millis(8000));
        let cases = [
            (0, 0),
            (1, 0),
            (2, 250),
            (3, 500),
            (4, 1000),
            (7, 8000),
            (100, 8000),
        ];
        for (attempts, ms) in cases {
            assert_eq!(
                reconnect_delay(f, m, attempts),
                Duration::from_millis(ms),
                "attempt {attempts}"
            );
        }
    }

    #[test]
    fn app_actions() {
        assert_eq!(AppAction::parse(" DLQ "), Some(AppAction::Dlq));
        assert_eq!(AppAction::parse("ack"), Some(AppAction::Ack));
        assert_eq!(AppAction::parse("nope"), None);
    }

    #[test]
    fn term_reasons_read_well() {
        assert_eq!(
            TermReason::Status(400).to_string(),
            "jetrelay: app answered 400"
        );
        assert_eq!(
            TermReason::AppAction(AppAction::Dlq).to_string(),
            "jetrelay: app asked for dlq"
        );
        assert_eq!(
            TermReason::Invalid(Invalid::MalformedHeaders("invalid header name".into()))
                .to_string(),
            "jetrelay: malformed_headers: invalid header name"
        );
        assert_eq!(
            TermReason::PublishRefused("subject \"x\" is not allowed".into()).to_string(),
            "jetrelay: publish_refused: subject \"x\" is not allowed"
        );
    }

    #[test]
    fn a_failed_publish_retries_on_the_same_attempts() {
        let p = policy();
        assert_eq!(p.publish_failed(1, "timeout"), retry(1000));
        assert_eq!(p.publish_failed(3, "timeout"), retry(4000));
        let last = p.publish_failed(10, "not_atomic");
        assert_eq!(last, exhausted(10, LastFailure::Publish("not_atomic")));
        let Disposition::Term { reason } = last else {
            unreachable!()
        };
        assert_eq!(
            reason.to_string(),
            "jetrelay: 10 attempts exhausted, last: outputs not published (not_atomic)"
        );
    }

    #[test]
    fn expiry_table() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let s = Duration::from_secs;
        let expired = term(TermReason::Expired);
        // (expires after t0, now after t0, disposition) → disposition
        let cases: Vec<(Option<u64>, u64, Disposition, Disposition)> = vec![
            (None, 100, retry(5000), retry(5000)),
            (Some(60), 0, retry(5000), retry(5000)),
            (Some(60), 55, retry(5000), retry(5000)),
            (Some(60), 55, retry(5001), expired.clone()),
            (Some(60), 59, retry(60_000), expired.clone()),
            (Some(60), 61, retry(1000), expired.clone()),
            (Some(60), 61, Disposition::Ack, Disposition::Ack),
            (Some(60), 61, Disposition::Hold, Disposition::Hold),
            (
                Some(60),
                61,
                term(TermReason::Status(400)),
                term(TermReason::Status(400)),
            ),
        ];
        for (expires, now, given, want) in cases {
            let expires = expires.map(|e| t0 + s(e));
            assert_eq!(
                within_life(given.clone(), expires, t0 + s(now)),
                want,
                "{expires:?} {now} {given:?}"
            );
        }
        assert!(!is_expired(None, t0));
        assert!(!is_expired(Some(t0 + s(1)), t0));
        assert!(is_expired(Some(t0), t0));
        assert!(is_expired(Some(t0), t0 + s(1)));
        assert_eq!(policy().decide(&Outcome::Expired, 1), expired);
        assert_eq!(policy().decide(&Outcome::Duplicate, 9), Disposition::Ack);
        assert_eq!(TermReason::Expired.to_string(), "jetrelay: expired");
        // delivery.max_age_ms: past it (not at it), only with a limit and a time.
        let max = Some(s(60));
        assert!(!is_too_old(Some(t0), max, t0 + s(60)));
        assert!(is_too_old(Some(t0), max, t0 + s(61)));
        assert!(!is_too_old(Some(t0), None, t0 + s(3600)));
        assert!(!is_too_old(None, max, t0 + s(3600)));
        assert!(
            !is_too_old(Some(t0 + s(5)), max, t0),
            "a clock behind is no age"
        );
        assert_eq!(
            policy().decide(&Outcome::TooOld, 1),
            Disposition::Term {
                reason: TermReason::TooOld
            }
        );
        assert_eq!(TermReason::TooOld.to_string(), "jetrelay: too_old");
    }

    proptest::proptest! {
        #[test]
        fn backoff_is_monotonic_and_capped(initial in 1u64..10_000, max in 1u64..1_000_000, a in 0u32..200) {
            let (i, m) = (Duration::from_millis(initial), Duration::from_millis(max));
            let d = backoff(i, m, a);
            proptest::prop_assert!(d <= m);
            proptest::prop_assert!(backoff(i, m, a + 1) >= d);
        }

        #[test]
        fn a_retry_is_never_immediate(status in 100u16..600, attempt in 1u32..20, ra in proptest::option::of(0u64..10)) {
            let p = policy();
            let o = Outcome::Answered { status, retry_after: ra.map(Duration::from_secs), action: None };
            if let Disposition::Retry { delay } = p.decide(&o, attempt) {
                proptest::prop_assert!(delay >= p.retry_initial);
            }
        }

        #[test]
        fn no_retry_ends_after_the_expiry(ttl in 0u64..100_000, now in 0u64..200_000, delay in 1u64..200_000) {
            let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
            let at = t0 + Duration::from_millis(ttl);
            let now = t0 + Duration::from_millis(now);
            match within_life(retry(delay), Some(at), now) {
                Disposition::Retry { delay } => proptest::prop_assert!(now + delay <= at),
                d => proptest::prop_assert_eq!(d, term(TermReason::Expired)),
            }
        }
    }
}
