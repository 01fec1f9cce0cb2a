//! `jetrelay pause` and `jetrelay resume`: the source's consumer (or, with
//! `--all-members`, every member consumer of its group) paused or resumed on the
//! server (consumer PAUSE, nats-server 2.11+). Every instance consuming a paused
//! consumer stops receiving at once; the pause is the consumer's, so restarts of
//! jetrelay and of the server keep it.

use serde::Serialize;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::config::{Config, ConfigError};
use crate::daemon::settings::{Settings, SourceSettings};
use crate::group::manage::{AdminError, GroupAdmin};
use crate::nats::{Nats, NatsError, TopologyError};
use crate::ops::telemetry::chain;
use crate::seam::ServerPause;

/// What the command was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Pause until this time.
    Pause(OffsetDateTime),
    /// Resume.
    Resume,
}

/// Why the command could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum PauseError {
    /// The command line is wrong (exit 64).
    #[error("{0}")]
    Usage(String),
    /// The config is wrong (exit 64).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// NATS cannot be reached, or is too old (exit 1).
    #[error(transparent)]
    Nats(#[from] NatsError),
    /// The group's membership cannot be read (exit 1).
    #[error("cannot read the group's members")]
    Group(#[source] AdminError),
}

impl PauseError {
    /// Whether the user's command line or config is at fault (exit 64).
    pub fn is_usage(&self) -> bool {
        match self {
            PauseError::Usage(_) | PauseError::Config(_) => true,
            PauseError::Nats(e) => e.is_config(),
            PauseError::Group(_) => false,
        }
    }
}

/// One consumer's result.
#[derive(Debug, Clone, Serialize)]
pub struct ConsumerResult {
    /// The group member, in group sources.
    pub member: Option<String>,
    /// The consumer's stream.
    pub stream: String,
    /// The consumer.
    pub consumer: String,
    /// Whether it is paused now (after the command).
    pub paused: bool,
    /// Until when, RFC 3339 (paused ones).
    pub until: Option<String>,
    /// Why the command failed for it.
    pub error: Option<String>,
}

/// What the command did: the text to print, and whether any consumer failed.
#[derive(Debug)]
pub struct PauseReport {
    /// Lines for a person, or JSON.
    pub text: String,
    /// Some consumer was not paused (or resumed): exit 1.
    pub failed: bool,
}

/// `--for` or `--until` (neither: until resumed) as the time the pause ends.
///
/// # Errors
/// [`PauseError::Usage`] for a duration or time that does not parse, or is not in the
/// future.
pub fn until(
    duration: Option<&str>,
    at: Option<&str>,
    now: OffsetDateTime,
) -> Result<OffsetDateTime, PauseError> {
    let t = match (duration, at) {
        (Some(_), Some(_)) => {
            return Err(PauseError::Usage("give --for or --until, not both".into()));
        }
        (Some(d), None) => now + parse_duration(d)?,
        (None, Some(t)) => OffsetDateTime::parse(t, &Rfc3339).map_err(|e| {
            PauseError::Usage(format!(
                "--until {t:?}: not an RFC 3339 time (2026-12-01T18:30:00Z): {e}"
            ))
        })?,
        (None, None) => now + ServerPause::INDEFINITE,
    };
    if t <= now {
        return Err(PauseError::Usage(format!(
            "the pause would end in the past ({}); to end a pause, use jetrelay resume",
            rfc3339(t)
        )));
    }
    Ok(t)
}

/// A duration such as `30m`, `90s`, `1h30m`, `2d` or `500ms`.
///
/// # Errors
/// [`PauseError::Usage`] naming what does not parse.
pub fn parse_duration(text: &str) -> Result<time::Duration, PauseError> {
    let bad = |why: &str| {
        PauseError::Usage(format!(
            "--for {text:?}: {why} (a number and a unit: ms, s, m, h, d; as in 30m or 1h30m)"
        ))
    };
    let mut total = time::Duration::ZERO;
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
        let n: i64 = number.parse().map_err(|_| bad("the number is too large"))?;
        let unit_len = after.len()
            - after
                .trim_start_matches(|c: char| c.is_ascii_alphabetic())
                .len();
        let (unit, after) = after.split_at(unit_len);
        let one = match unit {
            "ms" => time::Duration::MILLISECOND,
            "s" => time::Duration::SECOND,
            "m" => time::Duration::MINUTE,
            "h" => time::Duration::HOUR,
            "d" => time::Duration::DAY,
            "" => return Err(bad("a unit is missing")),
            _ => return Err(bad(&format!("unknown unit {unit:?}"))),
        };
        total = one
            .checked_mul(i32::try_from(n).map_err(|_| bad("the number is too large"))?)
            .and_then(|d| total.checked_add(d))
            .ok_or_else(|| bad("too long"))?;
        rest = after;
    }
    if total.is_zero() {
        return Err(bad("must be longer than zero"));
    }
    Ok(total)
}

fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_else(|_| t.to_string())
}

/// The consumers the command is about: `(member, stream, consumer)`.
async fn targets(
    nats: &Nats,
    source: &SourceSettings,
    all_members: bool,
) -> Result<Vec<(Option<String>, String, String)>, PauseError> {
    match source {
        SourceSettings::Durable(r) if all_members => Err(PauseError::Usage(format!(
            "--all-members is for a group source; source.kind is durable (consumer {})",
            r.consumer.name
        ))),
        SourceSettings::Durable(r) => Ok(vec![(None, r.stream.clone(), r.consumer.name.clone())]),
        SourceSettings::Group(m) if all_members => Ok(GroupAdmin::new(nats.clone())
            .member_consumers(m.flavour, &m.stream, &m.group)
            .await
            .map_err(PauseError::Group)?
            .into_iter()
            .map(|(member, s, c)| (Some(member), s, c))
            .collect()),
        SourceSettings::Group(m) => {
            let (s, c) = m.consumer();
            Ok(vec![(Some(m.member.clone()), s, c)])
        }
    }
}

/// Pauses or resumes what `config`'s source consumes.
///
/// # Errors
/// [`PauseError`] when nothing could be tried; a consumer that fails is reported in
/// [`PauseReport`].
pub async fn run(
    config: &Config,
    server: Option<&str>,
    request: Request,
    all_members: bool,
    json: bool,
) -> Result<PauseReport, PauseError> {
    let settings = Settings::from_config(config)?;
    let mut connection = settings.nats.clone();
    if let Some(server) = server {
        let mut cfg = config.nats.clone();
        cfg.servers = crate::config::split_servers(server);
        cfg.validate()?;
        connection = crate::daemon::settings::connection(&cfg);
    }
    let nats = Nats::connect(&connection, false).await?;
    // Consumer pause came with 2.11; older servers time out on it.
    nats.check_server_version()?;
    let mut outcomes = Vec::new();
    for (member, stream, consumer) in targets(&nats, &settings.source, all_members).await? {
        let answer = match &request {
            Request::Pause(t) => nats.pause_consumer(&stream, &consumer, *t).await,
            Request::Resume => nats.resume_consumer(&stream, &consumer).await,
        };
        let (paused, until, error) = match answer {
            Ok(a) => (a.paused, a.until.map(rfc3339), None),
            Err(e @ TopologyError::ConsumerMissing(_)) => (
                false,
                None,
                Some(format!(
                    "{} (a member consumer exists once the member has partitions and runs)",
                    chain(&e)
                )),
            ),
            Err(e) => (false, None, Some(chain(&e))),
        };
        outcomes.push(ConsumerResult {
            member,
            stream,
            consumer,
            paused,
            until,
            error,
        });
    }
    let failed = outcomes.iter().any(|o| o.error.is_some());
    let text = if json {
        serde_json::json!({
            "action": match request { Request::Pause(_) => "pause", Request::Resume => "resume" },
            "consumers": outcomes,
        })
        .to_string()
    } else {
        outcomes
            .iter()
            .map(|o| human(o, &request))
            .collect::<Vec<_>>()
            .join("\n")
    };
    Ok(PauseReport { text, failed })
}

fn human(o: &ConsumerResult, request: &Request) -> String {
    let who = match &o.member {
        Some(m) => format!("{} > {} (member {m})", o.stream, o.consumer),
        None => format!("{} > {}", o.stream, o.consumer),
    };
    if let Some(e) = &o.error {
        return format!("FAILED {who}: {e}");
    }
    match (request, &o.until) {
        (Request::Pause(t), Some(_)) => format!(
            "paused {who} {}",
            ServerPause::Until(*t).until_text(OffsetDateTime::now_utc())
        ),
        (Request::Pause(_), None) => format!("FAILED {who}: the server did not pause it"),
        (Request::Resume, _) if o.paused => format!("FAILED {who}: still paused"),
        (Request::Resume, _) => format!("resumed {who}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_table() {
        let ok = [
            ("30m", time::Duration::minutes(30)),
            ("90s", time::Duration::seconds(90)),
            ("1h30m", time::Duration::minutes(90)),
            ("2d", time::Duration::days(2)),
            ("500ms", time::Duration::milliseconds(500)),
            (" 1h ", time::Duration::hours(1)),
        ];
        for (text, want) in ok {
            assert_eq!(parse_duration(text).unwrap(), want, "{text}");
        }
        for bad in [
            "",
            "30",
            "m",
            "10x",
            "0s",
            "1h30",
            "-5m",
            "99999999999999999999s",
        ] {
            let e = parse_duration(bad).unwrap_err();
            assert!(e.is_usage(), "{bad}: {e}");
            assert!(e.to_string().contains("--for"), "{bad}: {e}");
        }
    }

    #[test]
    fn until_table() {
        let now = OffsetDateTime::parse("2026-12-01T12:00:00Z", &Rfc3339).unwrap();
        assert_eq!(
            until(Some("30m"), None, now).unwrap(),
            now + time::Duration::minutes(30)
        );
        assert!(
            until(None, Some("2026-12-01T13:00:00+01:00"), now).is_err(),
            "13:00 in +01:00 is 12:00Z, now: not in the future"
        );
        assert_eq!(
            until(None, Some("2026-12-01T18:30:00Z"), now).unwrap(),
            now + time::Duration::minutes(390)
        );
        let forever = until(None, None, now).unwrap();
        assert_eq!(
            ServerPause::Until(forever).until_text(now),
            "until resumed (jetrelay resume)"
        );
        for (d, t) in [
            (Some("1m"), Some("2026-12-01T18:30:00Z")),
            (None, Some("tomorrow")),
            (None, Some("2026-12-01T11:00:00Z")),
        ] {
            assert!(until(d, t, now).unwrap_err().is_usage(), "{d:?} {t:?}");
        }
    }
}
