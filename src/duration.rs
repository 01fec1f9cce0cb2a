//! Durations as people type them on a command line or in a query: a number and a
//! unit, repeated (`500ms`, `25s`, `90m`, `1h30m`, `2d`), more than zero and at most
//! a bound; and the latest time a command takes ([`LATEST`]). The callers name the
//! flag or parameter in their own errors.

use std::time::Duration;

use time::OffsetDateTime;

/// The last instant nanoseconds since 1970 hold in 64 bits,
/// 2262-04-11T23:47:16.854775807Z: nats-server reads a time past it as another (a
/// replay's start time as the stream's beginning). An open-ended pause ends exactly
/// at it; a command takes no time after [`LATEST_TAKEN`].
pub const LATEST: OffsetDateTime =
    OffsetDateTime::UNIX_EPOCH.saturating_add(time::Duration::nanoseconds(i64::MAX));

/// The latest time a command takes, 2262-04-11T23:47:15Z: a whole second before
/// [`LATEST`], so that whatever is after it says "open-ended".
pub const LATEST_TAKEN: OffsetDateTime = OffsetDateTime::UNIX_EPOCH
    .saturating_add(time::Duration::seconds(i64::MAX / 1_000_000_000 - 1));

/// Whether `t` is too late for a command to take (after [`LATEST_TAKEN`]).
pub fn beyond_latest(t: OffsetDateTime) -> bool {
    t > LATEST_TAKEN
}

/// Why a time is too late ([`beyond_latest`]): the words after `what` (the flag and
/// its value).
pub fn too_late(what: &str) -> String {
    format!(
        "{what}: after 2262-04-11T23:47:15Z, the latest time jetrelay takes: nanoseconds since 1970 run out then, and nats-server would read a later time as another"
    )
}

/// Why a duration did not parse: the words a person reads after the flag's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadDuration(pub String);

/// Parses `text`, whose units are `ms`, `s`, `m`, `h`, and `d` when `days`; the sum
/// must be above zero and at most `max` (`too_long` says so otherwise).
///
/// # Errors
/// [`BadDuration`] naming what is wrong.
pub fn parse(
    text: &str,
    days: bool,
    max: Duration,
    too_long: &str,
) -> Result<Duration, BadDuration> {
    let bad = |why: &str| BadDuration(why.to_string());
    let mut total = Duration::ZERO;
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad("empty"));
    }
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return Err(bad("a number is missing"));
        }
        let (number, after) = rest.split_at(digits);
        let n: u32 = number.parse().map_err(|_| bad("the number is too large"))?;
        let unit_len = after.len()
            - after
                .trim_start_matches(|c: char| c.is_ascii_alphabetic())
                .len();
        let (unit, after) = after.split_at(unit_len);
        let one = match unit {
            "ms" => Duration::from_millis(1),
            "s" => Duration::from_secs(1),
            "m" => Duration::from_secs(60),
            "h" => Duration::from_secs(3600),
            "d" if days => Duration::from_secs(86_400),
            "" => return Err(bad("a unit is missing")),
            _ => return Err(bad(&format!("unknown unit {unit:?}"))),
        };
        total = one
            .checked_mul(n)
            .and_then(|d| total.checked_add(d))
            .filter(|d| *d <= max)
            .ok_or_else(|| bad(too_long))?;
        rest = after;
    }
    if total.is_zero() {
        return Err(bad("must be longer than zero"));
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::format_description::well_known::Rfc3339;

    #[test]
    fn the_latest_time_table() {
        assert_eq!(
            LATEST.format(&Rfc3339).unwrap(),
            "2262-04-11T23:47:16.854775807Z"
        );
        assert_eq!(
            LATEST_TAKEN.format(&Rfc3339).unwrap(),
            "2262-04-11T23:47:15Z"
        );
        for (text, beyond) in [
            ("2026-12-01T00:00:00Z", false),
            ("2262-04-11T00:00:00Z", false),
            ("2262-04-11T23:47:15Z", false),
            ("2262-04-11T23:47:15.000000001Z", true),
            ("2262-04-11T23:47:16Z", true),
            ("2262-04-12T00:00:00Z", true),
            ("9999-12-31T23:59:59Z", true),
        ] {
            if beyond_latest(OffsetDateTime::parse(text, &Rfc3339).unwrap()) {
                assert!(too_late("--x").contains(&LATEST_TAKEN.format(&Rfc3339).unwrap()));
            }
            let t = OffsetDateTime::parse(text, &Rfc3339).unwrap();
            assert_eq!(beyond_latest(t), beyond, "{text}");
        }
    }

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn durations_table() {
        for (text, days, want) in [
            ("500ms", false, Duration::from_millis(500)),
            ("25s", false, Duration::from_secs(25)),
            ("1m30s", false, Duration::from_secs(90)),
            (" 2h ", true, 2 * HOUR),
            ("1d", true, 24 * HOUR),
        ] {
            assert_eq!(
                parse(text, days, Duration::MAX, "too long"),
                Ok(want),
                "{text}"
            );
        }
        for (text, days, why) in [
            ("", false, "empty"),
            ("s", false, "a number is missing"),
            ("5", false, "a unit is missing"),
            ("5x", false, "unknown unit \"x\""),
            ("1d", false, "unknown unit \"d\""),
            ("0s", false, "must be longer than zero"),
            ("99999999999s", false, "the number is too large"),
            ("2h", false, "too long"),
        ] {
            let max = if text == "2h" { HOUR } else { Duration::MAX };
            assert_eq!(
                parse(text, days, max, "too long"),
                Err(BadDuration(why.into())),
                "{text}"
            );
        }
    }
}
