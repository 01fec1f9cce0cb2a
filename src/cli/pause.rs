//! `jetrelay pause` and `jetrelay resume`: the source's consumer (or, with
//! `--all-members`, every member consumer of its group) paused or resumed on the
//! server (consumer PAUSE, nats-server 2.11+). Every instance consuming a paused
//! consumer stops receiving at once; the pause is the consumer's, so restarts of
//! jetrelay and of the server keep it.

use serde::Serialize;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::consumers::{self, TargetError};
use crate::config::Config;
use crate::daemon::settings::Settings;
use crate::group::manage::GroupAdmin;
use crate::nats::{Nats, TopologyError};
use crate::ops::telemetry::chain;
use crate::seam::ServerPause;
use crate::source::settings::{Binding, SourceSettings};
use crate::topology::ConsumerMode;

/// What the command was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Pause until this time; `open_ended` when neither `--for` nor `--until` was
    /// given (until resumed).
    Pause {
        /// When the server resumes it.
        until: OffsetDateTime,
        /// Until resumed.
        open_ended: bool,
    },
    /// Resume.
    Resume,
}

/// Why the command could not run at all: as for every command about a config's
/// consumers.
pub type PauseError = TargetError;

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
    /// What to know about it that is no failure (a member that has not run yet).
    pub note: Option<String>,
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

/// Why a time is too late for any command ([`crate::duration::too_late`]), named with
/// `what` (the flag and its value).
pub fn too_late(what: &str) -> TargetError {
    TargetError::Usage(crate::duration::too_late(what))
}

/// `--for` or `--until` (neither: until resumed, [`ServerPause::UNTIL_RESUMED`]) as
/// the pause asked for.
///
/// # Errors
/// [`PauseError::Usage`] for a duration or time that does not parse, is not in the
/// future, or is too late for a command ([`too_late`]).
pub fn request(
    duration: Option<&str>,
    at: Option<&str>,
    now: OffsetDateTime,
) -> Result<Request, PauseError> {
    let t = match (duration, at) {
        (Some(_), Some(_)) => {
            return Err(PauseError::Usage("give --for or --until, not both".into()));
        }
        (Some(d), None) => now
            .checked_add(parse_duration("--for", d)?)
            .filter(|t| !crate::duration::beyond_latest(*t))
            .ok_or_else(|| too_late(&format!("--for {d:?}")))?,
        (None, Some(t)) => OffsetDateTime::parse(t, &Rfc3339)
            .map_err(|e| {
                PauseError::Usage(format!(
                    "--until {t:?}: not an RFC 3339 time (2026-12-01T18:30:00Z): {e}"
                ))
            })?
            .checked_to_offset(time::UtcOffset::UTC)
            .filter(|t| !crate::duration::beyond_latest(*t))
            .ok_or_else(|| too_late(&format!("--until {t:?}")))?,
        (None, None) => ServerPause::UNTIL_RESUMED,
    };
    if t <= now {
        return Err(PauseError::Usage(format!(
            "the pause would end in the past ({}); to end a pause, use jetrelay resume",
            rfc3339(t)
        )));
    }
    Ok(Request::Pause {
        until: t,
        open_ended: duration.is_none() && at.is_none(),
    })
}

/// A duration such as `30m`, `90s`, `1h30m`, `2d` or `500ms`, given as `flag`.
///
/// # Errors
/// [`PauseError::Usage`] naming the flag and what does not parse.
pub fn parse_duration(flag: &str, text: &str) -> Result<time::Duration, PauseError> {
    crate::duration::parse(text, true, std::time::Duration::MAX, "too long")
        .and_then(|d| {
            time::Duration::try_from(d).map_err(|_| crate::duration::BadDuration("too long".into()))
        })
        .map_err(|e| {
            PauseError::Usage(format!(
                "{flag} {text:?}: {} (a number and a unit: ms, s, m, h, d; as in 30m or 1h30m)",
                e.0
            ))
        })
}

fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_else(|_| t.to_string())
}

/// With `--all-members`: the group-wide pause recorded (before the members' consumers
/// are paused, so that a member joining meanwhile finds it) or removed (before they
/// are resumed).
async fn group_wide(
    nats: &Nats,
    source: &SourceSettings,
    request: &Request,
) -> Result<(), PauseError> {
    let Some(Binding::Group(m)) = source.stream().map(|s| &s.binding) else {
        return Ok(());
    };
    let admin = GroupAdmin::new(nats.clone());
    match request {
        Request::Pause { until, .. } => {
            admin
                .set_group_pause(m.flavour, &m.stream, &m.group, *until)
                .await
        }
        Request::Resume => {
            admin
                .clear_group_pause(m.flavour, &m.stream, &m.group)
                .await
        }
    }
    .map_err(PauseError::Group)
}

/// Why consumer `name` cannot be paused or resumed: it does not exist, said with the
/// config's `topology.consumer`. A member consumer that does not exist yet is no
/// failure under a group-wide pause: the member pauses it before its first pull.
fn missing(name: &str, mode: ConsumerMode, member: bool, group_wide: bool) -> String {
    let mode = match mode {
        ConsumerMode::Ensure => "ensure",
        ConsumerMode::Bind => "bind",
    };
    match (member, group_wide, mode) {
        (true, true, _) => format!(
            "member consumer {name} does not exist yet (topology.consumer = \"{mode}\"; the member creates it when it has partitions and runs): the group-wide pause holds it from its first pull"
        ),
        (true, false, _) => format!(
            "member consumer {name} does not exist (topology.consumer = \"{mode}\"; a member consumer exists once the member has partitions and runs)"
        ),
        (false, _, "bind") => format!(
            "consumer {name} does not exist (topology.consumer = \"bind\": someone else creates it)"
        ),
        (false, _, _) => format!(
            "consumer {name} does not exist (topology.consumer = \"{mode}\": jetrelay run creates it when it starts)"
        ),
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
    source: Option<&str>,
    all_members: bool,
    json: bool,
) -> Result<PauseReport, PauseError> {
    let settings = Settings::from_config(config)?;
    let chosen = consumers::chosen(&settings, source)?;
    let nats = consumers::connect(config, &settings, server).await?;
    // Consumer pause came with 2.11; older servers time out on it.
    nats.check_server_version()?;
    let mut targets = Vec::new();
    let several = chosen.len() > 1;
    for source in chosen {
        // Of several sources, --all-members is for the groups among them.
        let members = all_members && (source.pinned() || !several);
        if members {
            group_wide(&nats, source, &request).await?;
        }
        targets.extend(consumers::of(&nats, source, members).await?);
    }
    let mode = config.topology.consumer;
    let mut outcomes = Vec::new();
    for (member, stream, consumer) in targets {
        let answer = match &request {
            Request::Pause { until, .. } => nats.pause_consumer(&stream, &consumer, *until).await,
            Request::Resume => nats.resume_consumer(&stream, &consumer).await,
        };
        let (paused, until, note, error) = match answer {
            Ok(a) => (a.paused, a.until.map(rfc3339), None, None),
            Err(TopologyError::ConsumerMissing(_)) if all_members => {
                let why = missing(&consumer, mode, true, true);
                (false, None, Some(why), None)
            }
            Err(TopologyError::ConsumerMissing(_)) => {
                let why = missing(&consumer, mode, member.is_some(), false);
                (false, None, None, Some(why))
            }
            Err(e) => (false, None, None, Some(chain(&e))),
        };
        outcomes.push(ConsumerResult {
            member,
            stream,
            consumer,
            paused,
            until,
            note,
            error,
        });
    }
    let failed = outcomes.iter().any(|o| o.error.is_some());
    let text = if json {
        serde_json::json!({
            "action": match request { Request::Pause { .. } => "pause", Request::Resume => "resume" },
            "group_wide": all_members,
            "consumers": outcomes,
        })
        .to_string()
    } else {
        let mut lines: Vec<String> = outcomes.iter().map(|o| human(o, &request)).collect();
        if all_members {
            lines.push(match request {
                Request::Pause { .. } => "the group is paused: members that join or restart are paused before their first pull, until jetrelay resume --all-members".into(),
                Request::Resume => "the group-wide pause is lifted".into(),
            });
        }
        lines.join("\n")
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
    if let Some(n) = &o.note {
        return format!("not running {who}: {n}");
    }
    match (request, &o.until) {
        (
            Request::Pause {
                open_ended: true, ..
            },
            Some(_),
        ) => {
            format!("paused {who} until resumed (jetrelay resume)")
        }
        (Request::Pause { .. }, Some(at)) => format!("paused {who} until {at}"),
        (Request::Pause { .. }, None) => format!("FAILED {who}: the server did not pause it"),
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
            assert_eq!(parse_duration("--for", text).unwrap(), want, "{text}");
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
            let e = parse_duration("--for", bad).unwrap_err();
            assert!(e.is_usage(), "{bad}: {e}");
            assert!(e.to_string().contains("--for"), "{bad}: {e}");
        }
    }

    fn until(
        d: Option<&str>,
        t: Option<&str>,
        now: OffsetDateTime,
    ) -> Result<OffsetDateTime, PauseError> {
        match request(d, t, now)? {
            Request::Pause { until, .. } => Ok(until),
            Request::Resume => unreachable!(),
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
        assert_eq!(
            request(None, None, now).unwrap(),
            Request::Pause {
                until: ServerPause::UNTIL_RESUMED,
                open_ended: true
            }
        );
        assert_eq!(
            until(None, Some("2262-04-11T23:47:15Z"), now).unwrap(),
            crate::duration::LATEST_TAKEN
        );
        for (d, t) in [
            (Some("1m"), Some("2026-12-01T18:30:00Z")),
            (None, Some("tomorrow")),
            (None, Some("2026-12-01T11:00:00Z")),
            (None, Some("10000-01-01T00:00:00Z")),
            (None, Some("9999-12-31T23:00:00-05:00")),
            (None, Some("9999-12-31T23:59:59Z")),
            (None, Some("2262-04-11T23:47:16Z")),
            (None, Some("2262-04-12T00:00:00Z")),
        ] {
            assert!(until(d, t, now).unwrap_err().is_usage(), "{d:?} {t:?}");
        }
    }

    #[test]
    fn a_pause_past_2262_is_a_usage_error_naming_the_flag_never_a_panic() {
        let now = OffsetDateTime::parse("2026-12-01T12:00:00Z", &Rfc3339).unwrap();
        for d in [
            "2147483647d",
            "2147483647h",
            "2920000d",
            "1d2147483647d",
            "86000d",
        ] {
            let e = request(Some(d), None, now).unwrap_err();
            assert!(e.is_usage(), "{d}: {e}");
            let text = e.to_string();
            assert!(
                text.contains("--for") && text.contains("2262-04-11T23:47:15Z"),
                "{d}: {text}"
            );
        }
        for t in ["9999-12-31T23:59:59Z", "9999-12-31T23:00:00-05:00"] {
            let e = request(None, Some(t), now).unwrap_err();
            assert!(e.to_string().contains("--until"), "{e}");
            assert!(e.to_string().contains("2262-04-11"), "{e}");
        }
        // 85,000 days from 2026 end in 2259: taken.
        assert!(request(Some("85000d"), None, now).is_ok());
        // The open-ended pause ends later than any time taken, from any time.
        let late = OffsetDateTime::parse("2262-01-01T00:00:00Z", &Rfc3339).unwrap();
        assert_eq!(
            request(None, None, late).unwrap(),
            Request::Pause {
                until: ServerPause::UNTIL_RESUMED,
                open_ended: true
            }
        );
        assert!(crate::duration::beyond_latest(ServerPause::UNTIL_RESUMED));
    }

    fn result(until: Option<&str>) -> ConsumerResult {
        ConsumerResult {
            member: None,
            stream: "S".into(),
            consumer: "C".into(),
            paused: until.is_some(),
            until: until.map(str::to_string),
            note: None,
            error: None,
        }
    }

    #[test]
    fn a_pause_to_a_stated_time_is_reported_as_that_time_however_far() {
        // A stated time, and the open-ended pause (what the server says it ends).
        for (open_ended, until, says) in [
            (false, "2262-04-11T23:47:15Z", "until 2262-04-11T23:47:15Z"),
            (
                true,
                "2262-04-11T23:47:16.854775807Z",
                "until resumed (jetrelay resume)",
            ),
        ] {
            let request = Request::Pause {
                until: crate::duration::LATEST_TAKEN,
                open_ended,
            };
            assert_eq!(
                human(&result(Some(until)), &request),
                format!("paused S > C {says}")
            );
        }
    }

    #[test]
    fn a_missing_consumer_is_explained_with_the_configs_topology_consumer() {
        for (mode, says) in [
            (ConsumerMode::Ensure, "topology.consumer = \"ensure\""),
            (ConsumerMode::Bind, "topology.consumer = \"bind\""),
        ] {
            for member in [false, true] {
                for group_wide in [false, true] {
                    let text = missing("C", mode, member, group_wide);
                    assert!(text.contains(says), "{text}");
                    assert!(text.contains("C does not exist"), "{text}");
                }
            }
        }
    }
}
