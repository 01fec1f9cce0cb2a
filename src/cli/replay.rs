//! `jetrelay replay`: a source's consumer moved back in place with the server's
//! consumer reset (nats-server 2.14+), so that everything from a time or a stream
//! sequence on is delivered again to whoever consumes it now — no consumer deleted or
//! renamed. Every consumer is checked before any is changed ([`decide`]): a replay
//! that cannot give what was asked (a work-queue or interest stream, a point before
//! the stream's first message, a consumer whose deliver policy the reset refuses) or
//! that would skip messages not yet acked (a point past its ack floor) changes
//! nothing. `--dry-run` prints the counts and changes nothing.

use serde::Serialize;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::consumers::{self, Target, TargetError};
use crate::config::Config;
use crate::daemon::settings::Settings;
use crate::nats::{Nats, ReplayFacts, TopologyError};
use crate::ops::telemetry::chain;
use crate::topology::Retention;

/// From where to deliver again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    /// The first message at or after this time.
    Since(OffsetDateTime),
    /// This stream sequence.
    Seq(u64),
}

/// What the command was asked.
#[derive(Debug, Clone)]
pub struct ReplayRequest<'a> {
    /// From where.
    pub point: Point,
    /// Only this source.
    pub source: Option<&'a str>,
    /// Every member of a group source.
    pub all_members: bool,
    /// Count, change nothing.
    pub dry_run: bool,
    /// `--server`.
    pub server: Option<&'a str>,
}

/// `--since` (a duration back from `now`, or an RFC 3339 time) or `--seq`.
///
/// # Errors
/// [`TargetError::Usage`] naming what does not parse, for both or neither, and for a
/// time in the future or too late for any command
/// ([`crate::duration::beyond_latest`]).
pub fn point(
    since: Option<&str>,
    seq: Option<u64>,
    now: OffsetDateTime,
) -> Result<Point, TargetError> {
    match (since, seq) {
        (Some(_), Some(_)) => Err(TargetError::Usage("give --since or --seq, not both".into())),
        (None, None) => Err(TargetError::Usage(
            "say from where: --since 2h (or an RFC 3339 time) or --seq N".into(),
        )),
        (None, Some(0)) => Err(TargetError::Usage(
            "--seq 0: stream sequences start at 1".into(),
        )),
        (None, Some(n)) => Ok(Point::Seq(n)),
        (Some(text), None) => {
            if let Ok(t) = OffsetDateTime::parse(text, &Rfc3339) {
                if crate::duration::beyond_latest(t) {
                    return Err(super::pause::too_late(&format!("--since {text:?}")));
                }
                if t > now {
                    return Err(TargetError::Usage(format!(
                        "--since {text:?}: in the future: nothing would be replayed"
                    )));
                }
                return Ok(Point::Since(t));
            }
            let back = super::pause::parse_duration("--since", text).map_err(|_| {
                TargetError::Usage(format!(
                    "--since {text:?}: neither a duration (2h, 90m, 1h30m) nor an RFC 3339 time (2026-12-01T14:00:00Z)"
                ))
            })?;
            now.checked_sub(back)
                .map(Point::Since)
                .ok_or_else(|| TargetError::Usage(format!("--since {text:?}: too far back")))
        }
    }
}

/// Whether consumer `consumer` may be moved back to stream sequence `seq` (found
/// from the point asked), and if not why: the message a person reads.
///
/// `seq` past the stream's last message means nothing is at or after the point.
pub fn decide(facts: &ReplayFacts, consumer: &str, point: Point, seq: u64) -> Result<u64, String> {
    match facts.retention {
        Retention::Limits => {}
        Retention::Workqueue => {
            return Err("its stream is a work-queue stream: a message is removed once acked, so nothing acked can come again".into());
        }
        Retention::Interest => {
            return Err("its stream keeps messages by interest: a message is removed once every consumer acked it, so nothing acked can come again".into());
        }
    }
    if !matches!(
        facts.deliver_policy.as_str(),
        "all" | "by_start_sequence" | "by_start_time"
    ) {
        return Err(format!(
            "consumer {consumer} delivers {:?}: the server resets only consumers that deliver all, by_start_sequence or by_start_time",
            facts.deliver_policy
        ));
    }
    let first = match facts.first_time {
        Some(t) => format!("seq {} at {}", facts.first_seq, rfc3339(t)),
        None => format!("none yet; the next is seq {}", facts.first_seq),
    };
    let before_first = match point {
        Point::Seq(n) => n < facts.first_seq,
        Point::Since(t) => facts.first_time.is_none_or(|first| t < first) && facts.first_seq > 1,
    };
    if before_first {
        return Err(format!(
            "that is before the stream's first message ({first}): what came before it is gone, so the replay could not give what was asked"
        ));
    }
    let next = facts.ack_floor.saturating_add(1);
    if seq > next {
        return Err(format!(
            "that is past the consumer's ack floor (everything up to seq {} is acked, not what follows): moving it there would skip messages not yet acked; replay only goes back",
            facts.ack_floor
        ));
    }
    Ok(seq)
}

/// One consumer's result.
#[derive(Debug, Clone, Serialize)]
pub struct Replayed {
    /// The group member, in group sources.
    pub member: Option<String>,
    /// The consumer's stream.
    pub stream: String,
    /// The consumer.
    pub consumer: String,
    /// The stream sequence it delivers from again.
    pub from_seq: Option<u64>,
    /// Messages at or after it, per filter (`>`: the whole stream).
    pub counts: Vec<(String, u64)>,
    /// Why it was refused or failed.
    pub error: Option<String>,
}

/// What the command did: the text to print, and whether anything was refused.
#[derive(Debug)]
pub struct ReplayReport {
    /// Lines for a person.
    pub text: String,
    /// Refused or failed: exit 1.
    pub failed: bool,
}

/// Why the command could not run at all.
pub type ReplayError = TargetError;

/// Replays what `config`'s sources consume.
///
/// # Errors
/// [`TargetError`] when nothing could be tried; a refused consumer is reported in
/// [`ReplayReport`] (and then none is changed).
pub async fn run(
    config: &Config,
    request: &ReplayRequest<'_>,
) -> Result<ReplayReport, ReplayError> {
    let settings = Settings::from_config(config)?;
    let chosen = consumers::chosen(&settings, request.source)?;
    let nats = consumers::connect(config, &settings, request.server).await?;
    let several = chosen.len() > 1;
    let mut targets = Vec::new();
    for source in chosen {
        // Of several sources, --all-members is for the groups among them.
        let members = request.all_members && (source.pinned() || !several);
        targets.extend(consumers::of(&nats, source, members).await?);
    }
    if !nats.can_reset_consumers() {
        return Ok(refused_all(
            targets,
            &format!(
                "the server is nats-server {}: the consumer reset needs 2.14 or later",
                nats.server_version()
            ),
        ));
    }
    // Every consumer checked and counted before any is changed.
    let mut planned = Vec::new();
    for target in targets {
        planned.push(plan(&nats, target, request.point).await);
    }
    let refused = planned.iter().any(|p| p.error.is_some());
    if !refused && !request.dry_run {
        for p in &mut planned {
            if let Some(seq) = p.from_seq
                && let Err(e) = nats.reset_consumer(&p.stream, &p.consumer, seq).await
            {
                p.error = Some(chain(&e));
            }
        }
    }
    let failed = planned.iter().any(|p| p.error.is_some());
    let mut lines: Vec<String> = planned
        .iter()
        .map(|p| human(p, request.dry_run, refused))
        .collect();
    if refused {
        lines.push("nothing was changed".into());
    }
    Ok(ReplayReport {
        text: lines.join("\n"),
        failed,
    })
}

fn refused_all(targets: Vec<Target>, why: &str) -> ReplayReport {
    let mut lines: Vec<String> = targets
        .into_iter()
        .map(|(member, stream, consumer)| {
            format!(
                "REFUSED {}: {why}",
                who(member.as_deref(), &stream, &consumer)
            )
        })
        .collect();
    lines.push("nothing was changed".into());
    ReplayReport {
        text: lines.join("\n"),
        failed: true,
    }
}

/// One consumer: its facts, the sequence the point is, the decision and the counts.
async fn plan(nats: &Nats, (member, stream, consumer): Target, point: Point) -> Replayed {
    let mut out = Replayed {
        member,
        stream,
        consumer,
        from_seq: None,
        counts: Vec::new(),
        error: None,
    };
    match plan_one(nats, &out.stream, &out.consumer, point).await {
        Ok((seq, counts)) => {
            out.from_seq = Some(seq);
            out.counts = counts;
        }
        Err(why) => out.error = Some(why),
    }
    out
}

async fn plan_one(
    nats: &Nats,
    stream: &str,
    consumer: &str,
    point: Point,
) -> Result<(u64, Vec<(String, u64)>), String> {
    let facts = match nats.replay_facts(stream, consumer).await {
        Ok(Some(f)) => f,
        Ok(None) => return Err(format!("stream {stream} does not exist")),
        Err(TopologyError::ConsumerMissing(_)) => {
            return Err(format!(
                "consumer {consumer} does not exist (jetrelay run creates it when it starts)"
            ));
        }
        Err(e) => return Err(chain(&e)),
    };
    let seq = match point {
        Point::Seq(n) => n,
        Point::Since(t) => nats
            .first_seq_at(stream, t)
            .await
            .map_err(|e| chain(&e))?
            .unwrap_or(facts.last_seq.saturating_add(1)),
    };
    let seq = decide(&facts, consumer, point, seq)?;
    let filters = if facts.filters.is_empty() {
        vec![String::new()]
    } else {
        facts.filters.clone()
    };
    let mut counts = Vec::new();
    for f in filters {
        let n = nats
            .count_from(stream, &f, seq)
            .await
            .map_err(|e| chain(&e))?;
        counts.push((if f.is_empty() { ">".into() } else { f }, n));
    }
    Ok((seq, counts))
}

fn who(member: Option<&str>, stream: &str, consumer: &str) -> String {
    match member {
        Some(m) => format!("{stream} > {consumer} (member {m})"),
        None => format!("{stream} > {consumer}"),
    }
}

fn human(p: &Replayed, dry_run: bool, refused: bool) -> String {
    let who = who(p.member.as_deref(), &p.stream, &p.consumer);
    if let Some(e) = &p.error {
        return format!("REFUSED {who}: {e}");
    }
    let total: u64 = p.counts.iter().map(|(_, n)| n).sum();
    let per: Vec<String> = p.counts.iter().map(|(f, n)| format!("{f}: {n}")).collect();
    let seq = p.from_seq.unwrap_or_default();
    let what = format!(
        "{total} messages from stream seq {seq} ({})",
        per.join(", ")
    );
    match (dry_run, refused) {
        (true, _) => format!("would replay {who}: {what}"),
        (false, true) => format!("not replayed {who}: {what}"),
        (false, false) => format!("replayed {who}: {what} are delivered again"),
    }
}

fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_else(|_| t.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> ReplayFacts {
        ReplayFacts {
            retention: Retention::Limits,
            first_seq: 10,
            first_time: Some(OffsetDateTime::from_unix_timestamp(1_000).unwrap()),
            last_seq: 100,
            filters: vec![],
            deliver_policy: "all".into(),
            ack_floor: 80,
        }
    }

    fn at(s: i64) -> Point {
        Point::Since(OffsetDateTime::from_unix_timestamp(s).unwrap())
    }

    #[test]
    fn decisions_table() {
        let wq = ReplayFacts {
            retention: Retention::Workqueue,
            ..facts()
        };
        let interest = ReplayFacts {
            retention: Retention::Interest,
            ..facts()
        };
        let new = ReplayFacts {
            deliver_policy: "new".into(),
            ..facts()
        };
        let fresh = ReplayFacts {
            first_seq: 1,
            ..facts()
        };
        let cases: &[(&ReplayFacts, Point, u64, Result<u64, &str>)] = &[
            (&facts(), Point::Seq(10), 10, Ok(10)),
            (&facts(), Point::Seq(50), 50, Ok(50)),
            // The next not acked: nothing skipped.
            (&facts(), Point::Seq(81), 81, Ok(81)),
            (
                &facts(),
                Point::Seq(82),
                82,
                Err("past the consumer's ack floor"),
            ),
            (
                &facts(),
                Point::Seq(9),
                9,
                Err("before the stream's first message"),
            ),
            (
                &facts(),
                at(999),
                10,
                Err("before the stream's first message"),
            ),
            (&facts(), at(1_000), 10, Ok(10)),
            (&facts(), at(5_000), 60, Ok(60)),
            // Nothing at or after the time: the next message, past the ack floor.
            (
                &facts(),
                at(9_000),
                101,
                Err("past the consumer's ack floor"),
            ),
            // A stream that never lost a message: any time before is everything.
            (&fresh, at(5), 1, Ok(1)),
            (&wq, Point::Seq(50), 50, Err("work-queue stream")),
            (&interest, Point::Seq(50), 50, Err("by interest")),
            (&new, Point::Seq(50), 50, Err("delivers \"new\"")),
        ];
        for (f, point, seq, want) in cases {
            let got = decide(f, "c", *point, *seq);
            match (want, &got) {
                (Ok(w), Ok(g)) => assert_eq!(w, g, "{point:?}"),
                (Err(w), Err(g)) => assert!(g.contains(w), "{point:?}: {g}"),
                _ => panic!("{point:?}: want {want:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn points_table() {
        let now = OffsetDateTime::from_unix_timestamp(10_000).unwrap();
        assert_eq!(point(None, Some(5), now).unwrap(), Point::Seq(5));
        assert_eq!(point(Some("2h"), None, now).unwrap(), at(10_000 - 7_200));
        assert_eq!(
            point(Some("1970-01-01T01:00:00Z"), None, now).unwrap(),
            at(3_600)
        );
        for (since, seq, why) in [
            (Some("2h"), Some(3), "not both"),
            (None, None, "from where"),
            (None, Some(0), "start at 1"),
            (Some("yesterday"), None, "neither a duration"),
            (Some("1970-01-01T02:46:41Z"), None, "in the future"),
            (Some("2100-01-01T00:00:00Z"), None, "in the future"),
            (
                Some("2262-04-12T00:00:00Z"),
                None,
                "after 2262-04-11T23:47:15Z",
            ),
            (
                Some("9999-12-31T23:59:59Z"),
                None,
                "after 2262-04-11T23:47:15Z",
            ),
        ] {
            let e = point(since, seq, now).unwrap_err().to_string();
            assert!(e.contains(why), "{since:?} {seq:?}: {e}");
        }
    }
}
