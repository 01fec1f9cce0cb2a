//! Durations as people type them on a command line or in a query: a number and a
//! unit, repeated (`500ms`, `25s`, `90m`, `1h30m`, `2d`), more than zero and at most
//! a bound. The callers name the flag or parameter in their own errors.

use std::time::Duration;

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
