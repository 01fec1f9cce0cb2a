//! Dead letters read back, as pure functions: what each says (from its
//! `Jetrelay-Dlq-*` headers), which ones a `jetrelay dlq` command selects, and the
//! message that replays one.
//!
//! A replay goes to the subject as the publisher sent it (a group's partition
//! transform applies again) with the payload and the original headers, and the id
//! `jetrelay-replay:<dlq-stream>:<dlq-seq>`: a re-run within the target stream's
//! duplicate window stores nothing twice.

use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::dead_letter::header;
use crate::outputs::{Capture, MSG_ID, Output};
use crate::subject;

/// One stored message of a stream, as direct get returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// Its stream sequence.
    pub seq: u64,
    /// The subject it was stored on.
    pub subject: String,
    /// When it was stored (RFC 3339, as the server wrote it).
    pub time: String,
    /// Its headers.
    pub headers: Vec<(String, String)>,
    /// Its payload.
    pub payload: Bytes,
}

impl Stored {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// What a dead letter says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Entry {
    /// Its sequence in the DLQ stream.
    pub dlq_seq: u64,
    /// When it was stored in the DLQ.
    pub time: String,
    /// The stream the message was consumed from.
    pub stream: Option<String>,
    /// Its sequence there.
    pub sequence: Option<u64>,
    /// The subject as the publisher sent it (the DLQ subject for a foreign letter).
    pub subject: String,
    /// A group source's partition.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition: Option<u32>,
    /// The consumer that dead-lettered it.
    pub consumer: Option<String>,
    /// Attempts made.
    pub delivered: Option<u32>,
    /// The app's last status.
    pub status: Option<u16>,
    /// Why.
    pub reason: String,
    /// The original `Nats-Msg-Id`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub msg_id: Option<String>,
    /// The payload was left out (it was too large); its size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload_omitted: Option<u64>,
    /// The payload's size in the letter.
    pub bytes: usize,
}

/// Whether `m` is verifiably a dead letter jetrelay wrote ([`verify`]). Anything
/// else in the stream (a source stream named by mistake, a message someone
/// published to the DLQ subject) is never replayed or purged.
pub fn is_letter(m: &Stored) -> bool {
    verify(m).is_ok()
}

/// Checks that `m` is a letter as jetrelay writes them: each `Jetrelay-Dlq-*` header
/// once, the original's stream, consumer, sequence, subject and the reason all
/// there, and the message id jetrelay gives a letter of that original
/// (`jetrelay-dlq:<stream>:<consumer>:<sequence>`, or that and `:<n>` when the id was
/// taken).
///
/// # Errors
/// What does not hold.
pub fn verify(m: &Stored) -> Result<(), String> {
    let mut seen = std::collections::HashSet::new();
    for (name, _) in &m.headers {
        let lower = name.to_ascii_lowercase();
        if lower.starts_with(header::PREFIX) && !seen.insert(lower) {
            return Err(format!("its {name} header is there twice"));
        }
    }
    let required = |n: &str| m.header(n).ok_or_else(|| format!("it has no {n} header"));
    let (stream, consumer) = (required(header::STREAM)?, required(header::CONSUMER)?);
    let sequence: u64 = required(header::SEQUENCE)?
        .trim()
        .parse()
        .map_err(|_| format!("its {} is not a number", header::SEQUENCE))?;
    required(header::SUBJECT)?;
    required(header::REASON)?;
    let id = m.header(MSG_ID).unwrap_or("");
    let own = crate::dead_letter::letter_id(stream, consumer, sequence);
    let renamed = id
        .strip_prefix(own.as_str())
        .and_then(|rest| rest.strip_prefix(':'))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    if id != own && !renamed {
        return Err(format!("its Nats-Msg-Id is not {own}"));
    }
    Ok(())
}

/// Why a message that is not a dead letter is left alone.
pub fn not_a_letter(dlq_stream: &str, why: &str) -> String {
    format!(
        "not a dead letter jetrelay wrote ({why}): left as it is; is {dlq_stream} the DLQ stream?"
    )
}

/// Reads a stored dead letter. What a message that is not verifiably one says of
/// itself is not shown as a letter's metadata: its own subject, and why it is not a
/// letter, are.
pub fn entry(m: &Stored) -> Entry {
    if let Err(why) = verify(m) {
        return Entry {
            dlq_seq: m.seq,
            time: m.time.clone(),
            stream: None,
            sequence: None,
            subject: m.subject.clone(),
            partition: None,
            consumer: None,
            delivered: None,
            status: None,
            reason: format!("not a dead letter jetrelay wrote: {why}"),
            msg_id: None,
            payload_omitted: None,
            bytes: m.payload.len(),
        };
    }
    let text = |n: &str| m.header(n).map(str::to_string);
    let number = |n: &str| m.header(n).and_then(|v| v.trim().parse::<u64>().ok());
    Entry {
        dlq_seq: m.seq,
        time: m.time.clone(),
        stream: text(header::STREAM),
        sequence: number(header::SEQUENCE),
        subject: text(header::SUBJECT).unwrap_or_else(|| m.subject.clone()),
        partition: number(header::PARTITION).and_then(|n| u32::try_from(n).ok()),
        consumer: text(header::CONSUMER),
        delivered: number(header::DELIVERED).and_then(|n| u32::try_from(n).ok()),
        status: number(header::STATUS).and_then(|n| u16::try_from(n).ok()),
        reason: text(header::REASON).unwrap_or_default(),
        msg_id: text(header::MSG_ID),
        payload_omitted: number(header::PAYLOAD_OMITTED),
        bytes: m.payload.len(),
    }
}

/// Which dead letters a command takes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// DLQ sequences, both ends included.
    pub seqs: Option<(u64, u64)>,
    /// Stored at or after.
    pub since: Option<OffsetDateTime>,
    /// The original subject matches this pattern.
    pub subject: Option<String>,
    /// The app's last status.
    pub status: Option<u16>,
    /// The consumer that dead-lettered it.
    pub consumer: Option<String>,
}

impl Selection {
    /// Whether `e` is selected. Sequences and time are also asked of the server
    /// (`first_seq`, `start_time`); they are checked here again all the same.
    pub fn matches(&self, e: &Entry) -> bool {
        let in_range = self.seqs.is_none_or(|(a, b)| (a..=b).contains(&e.dlq_seq));
        let recent = self
            .since
            .is_none_or(|since| OffsetDateTime::parse(&e.time, &Rfc3339).is_ok_and(|t| t >= since));
        let subject = self
            .subject
            .as_deref()
            .is_none_or(|p| subject::covers(p, &e.subject));
        let status = self.status.is_none_or(|s| e.status == Some(s));
        let consumer = self
            .consumer
            .as_deref()
            .is_none_or(|c| e.consumer.as_deref() == Some(c));
        in_range && recent && subject && status && consumer
    }

    /// The first DLQ sequence to read.
    pub fn first_seq(&self) -> u64 {
        self.seqs.map_or(1, |(a, _)| a.max(1))
    }

    /// The last DLQ sequence to read, if bounded.
    pub fn last_seq(&self) -> Option<u64> {
        self.seqs.map(|(_, b)| b)
    }

    /// The start time for the server, RFC 3339.
    pub fn start_time(&self) -> Option<String> {
        self.since.and_then(|t| t.format(&Rfc3339).ok())
    }
}

/// Reads `--seq A` or `--seq A-B`.
///
/// # Errors
/// A sentence saying what is wrong.
pub fn parse_seqs(text: &str) -> Result<(u64, u64), String> {
    let number = |t: &str| {
        t.trim()
            .parse::<u64>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("--seq {text:?}: sequences are numbers from 1"))
    };
    match text.split_once('-') {
        None => number(text).map(|n| (n, n)),
        Some((a, "")) => number(a).map(|a| (a, u64::MAX)),
        Some((a, b)) => {
            let (a, b) = (number(a)?, number(b)?);
            if a > b {
                return Err(format!("--seq {text:?}: the range is backwards"));
            }
            Ok((a, b))
        }
    }
}

/// Reads `--since`: a duration back from `now` (`90s`, `30m`, `2h`, `7d`) or an RFC
/// 3339 time, not after [`crate::duration::LATEST_TAKEN`].
///
/// # Errors
/// A sentence saying what is wrong.
pub fn parse_since(text: &str, now: OffsetDateTime) -> Result<OffsetDateTime, String> {
    if let Ok(t) = OffsetDateTime::parse(text, &Rfc3339) {
        if crate::duration::beyond_latest(t) {
            return Err(crate::duration::too_late(&format!("--since {text:?}")));
        }
        return Ok(t);
    }
    let (number, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let n: u64 = number
        .parse()
        .map_err(|_| format!("--since {text:?}: a duration like 2h or 30m, or an RFC 3339 time"))?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => {
            return Err(format!(
                "--since {text:?}: the unit is s, m, h or d (or give an RFC 3339 time)"
            ));
        }
    };
    let back = Duration::from_secs(n.saturating_mul(seconds));
    now.checked_sub(
        back.try_into()
            .map_err(|_| format!("--since {text:?}: too far back"))?,
    )
    .ok_or_else(|| format!("--since {text:?}: too far back"))
}

/// The id of a replay: `jetrelay-replay:<dlq-stream>:<dlq-seq>`.
pub fn replay_id(dlq_stream: &str, dlq_seq: u64) -> String {
    format!("jetrelay-replay:{dlq_stream}:{dlq_seq}")
}

/// The reason of a letter whose subject was not UTF-8 (`message::Invalid`'s name).
const MALFORMED_SUBJECT: &str = "malformed_subject: ";

/// The message that replays `m` to its original subject or to `to`; `Err` (why) when
/// it cannot be replayed (its payload was left out of the letter, or its subject was
/// not UTF-8 and only `--to` can say where it goes).
///
/// # Errors
/// A sentence saying why.
pub fn replay(m: &Stored, dlq_stream: &str, to: Option<&str>) -> Result<Output, String> {
    verify(m).map_err(|why| not_a_letter(dlq_stream, &why))?;
    let e = entry(m);
    if to.is_none() && e.reason.contains(MALFORMED_SUBJECT) {
        return Err(format!(
            "its subject {:?} held bytes that are not UTF-8 (shown as U+FFFD), which the letter cannot keep: not replayed (--to replays it elsewhere)",
            e.subject
        ));
    }
    let subject = to.unwrap_or(&e.subject);
    if let Err(why) = subject::validate_publish_subject(subject) {
        return Err(format!("its subject {subject:?} {why}: not replayed"));
    }
    if subject.starts_with('$') {
        return Err(format!(
            "its subject {subject:?} is a system subject: not replayed"
        ));
    }
    if let Some(size) = e.payload_omitted {
        let at = match (&e.stream, e.sequence) {
            (Some(s), Some(n)) => format!(" (the original is in {s} at {n})"),
            _ => String::new(),
        };
        return Err(format!(
            "the letter has no payload: it was {size} bytes, too large for the DLQ{at}"
        ));
    }
    let mut headers: Vec<(String, String)> = m
        .headers
        .iter()
        .filter(|(n, _)| !crate::dead_letter::left_out(n))
        .cloned()
        .collect();
    headers.push((MSG_ID.to_string(), replay_id(dlq_stream, m.seq)));
    Ok(Output {
        subject: subject.to_string(),
        headers,
        payload: m.payload.clone(),
    })
}

/// What `jetrelay check` says about the dead-letter subject: the streams that store
/// it (now, or once `run` created the managed one) and whether `jetrelay dlq` can
/// read them; `named` is `dlq.stream`. Each `warning:` line says the change that
/// fixes it.
pub fn findings(subject: &str, streams: &[Capture], named: Option<&str>) -> Vec<String> {
    if streams.is_empty() {
        let manage = match named {
            Some(name) => format!("dlq.manage = true (jetrelay creates {name})"),
            None => "dlq.stream = \"DLQ\" and dlq.manage = true (jetrelay creates it)".into(),
        };
        return vec![format!(
            "warning: dlq {subject}: no stream captures it: dead letters cannot be stored (the messages are retried instead). Change: {manage}, or create a stream with subjects [\"{subject}\"] and allow_direct: true"
        )];
    }
    let mut lines = Vec::new();
    for s in streams {
        let name = s.named();
        lines.push(format!(
            "dlq {subject}: {name}: direct get {}",
            if s.direct { "allowed" } else { "not allowed" }
        ));
        if !s.direct {
            lines.push(format!(
                "warning: dlq {subject}: {name} does not answer direct gets, so `jetrelay dlq` cannot read it. Change: allow_direct: true on stream {}",
                s.stream
            ));
        }
    }
    if let Some(named) = named
        && !streams.iter().any(|s| s.stream == named)
    {
        let stored: Vec<&str> = streams.iter().map(|s| s.stream.as_str()).collect();
        lines.push(format!(
            "warning: dlq {subject}: dlq.stream is {named}, but the dead letters are stored by {}. Change: dlq.stream = \"{}\"",
            stored.join(", "),
            stored[0]
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn letter(seq: u64, extra: &[(&str, &str)]) -> Stored {
        let headers: Vec<(String, String)> = [
            ("X-Trace", "t"),
            ("Nats-Msg-Id", "jetrelay-dlq:ORDERS:w:42"),
            ("Jetrelay-Dlq-Subject", "orders.eu"),
            ("Jetrelay-Dlq-Partition", "3"),
            ("Jetrelay-Dlq-Stream", "ORDERS"),
            ("Jetrelay-Dlq-Consumer", "w"),
            ("Jetrelay-Dlq-Sequence", "42"),
            ("Jetrelay-Dlq-Delivered", "5"),
            ("Jetrelay-Dlq-Status", "503"),
            (
                "Jetrelay-Dlq-Reason",
                "jetrelay: 5 attempts exhausted, last: app answered 503",
            ),
            ("Jetrelay-Dlq-Msg-Id", "orig"),
        ]
        .iter()
        .chain(extra)
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
        Stored {
            seq,
            subject: "dlq.ORDERS".into(),
            time: "2026-11-30T10:00:00Z".into(),
            headers,
            payload: Bytes::from_static(b"{\"n\":1}"),
        }
    }

    #[test]
    fn check_findings_table() {
        let capture = |direct| Capture {
            stream: "DLQ".into(),
            atomic: false,
            direct,
            duplicate_window: Duration::from_secs(120),
            staged_on_disk: false,
            batched: false,
            planned: false,
        };
        assert_eq!(
            findings("dlq.x", &[capture(true)], Some("DLQ")),
            ["dlq dlq.x: stream DLQ: direct get allowed"]
        );
        let lines = findings("dlq.x", &[capture(false)], None);
        assert!(
            lines[1].starts_with("warning:")
                && lines[1].ends_with("Change: allow_direct: true on stream DLQ"),
            "{lines:?}"
        );
        let none = findings("dlq.x", &[], None);
        assert!(
            none[0].contains("no stream captures")
                && none[0].contains("Change: dlq.stream = \"DLQ\" and dlq.manage = true"),
            "{none:?}"
        );
        let named = findings("dlq.x", &[], Some("LETTERS"));
        assert!(
            named[0].contains("Change: dlq.manage = true (jetrelay creates LETTERS)"),
            "{named:?}"
        );
        let elsewhere = findings("dlq.x", &[capture(true)], Some("LETTERS"));
        assert!(
            elsewhere[1].ends_with("stored by DLQ. Change: dlq.stream = \"DLQ\""),
            "{elsewhere:?}"
        );
        let planned = Capture {
            planned: true,
            ..capture(true)
        };
        assert_eq!(
            findings("dlq.x", &[planned], Some("DLQ")),
            ["dlq dlq.x: stream DLQ (to be created): direct get allowed"]
        );
    }

    #[test]
    fn a_letter_reads_back() {
        let e = entry(&letter(7, &[]));
        assert_eq!(
            e,
            Entry {
                dlq_seq: 7,
                time: "2026-11-30T10:00:00Z".into(),
                stream: Some("ORDERS".into()),
                sequence: Some(42),
                subject: "orders.eu".into(),
                partition: Some(3),
                consumer: Some("w".into()),
                delivered: Some(5),
                status: Some(503),
                reason: "jetrelay: 5 attempts exhausted, last: app answered 503".into(),
                msg_id: Some("orig".into()),
                payload_omitted: None,
                bytes: 7,
            }
        );
        // A foreign message in the DLQ stream still reads, by its own subject.
        let bare = Stored {
            headers: vec![],
            ..letter(8, &[])
        };
        let e = entry(&bare);
        assert_eq!(
            (e.subject.as_str(), e.stream, e.status),
            ("dlq.ORDERS", None, None)
        );
    }

    #[test]
    fn selections_table() {
        let at = |t: &str| OffsetDateTime::parse(t, &Rfc3339).unwrap();
        let e = entry(&letter(7, &[]));
        /// A selection of one criterion.
        fn only(set: impl FnOnce(&mut Selection)) -> Selection {
            let mut s = Selection::default();
            set(&mut s);
            s
        }
        let cases = [
            (Selection::default(), true),
            (only(|s| s.seqs = Some((7, 7))), true),
            (only(|s| s.seqs = Some((8, 9))), false),
            (only(|s| s.since = Some(at("2026-11-30T09:00:00Z"))), true),
            (only(|s| s.since = Some(at("2026-11-30T11:00:00Z"))), false),
            (only(|s| s.subject = Some("orders.*".into())), true),
            (only(|s| s.subject = Some("orders.us".into())), false),
            (only(|s| s.status = Some(503)), true),
            (only(|s| s.status = Some(400)), false),
            (only(|s| s.consumer = Some("w".into())), true),
            (only(|s| s.consumer = Some("w2".into())), false),
        ];
        for (s, want) in cases {
            assert_eq!(s.matches(&e), want, "{s:?}");
        }
        let s = Selection {
            seqs: Some((0, 9)),
            ..Default::default()
        };
        assert_eq!((s.first_seq(), s.last_seq()), (1, Some(9)));
    }

    #[test]
    fn arguments_table() {
        assert_eq!(parse_seqs("5"), Ok((5, 5)));
        assert_eq!(parse_seqs("5-9"), Ok((5, 9)));
        assert_eq!(parse_seqs("5-"), Ok((5, u64::MAX)));
        for bad in ["", "0", "a", "9-5", "-3", "1-x"] {
            assert!(parse_seqs(bad).is_err(), "{bad}");
        }
        let now = OffsetDateTime::parse("2026-11-30T12:00:00Z", &Rfc3339).unwrap();
        let since = |t| parse_since(t, now).map(|t| t.format(&Rfc3339).unwrap());
        assert_eq!(since("2h").unwrap(), "2026-11-30T10:00:00Z");
        assert_eq!(since("90s").unwrap(), "2026-11-30T11:58:30Z");
        assert_eq!(since("1d").unwrap(), "2026-11-29T12:00:00Z");
        assert_eq!(
            since("2026-11-01T00:00:00Z").unwrap(),
            "2026-11-01T00:00:00Z"
        );
        for bad in ["", "2", "2w", "h", "yesterday"] {
            assert!(parse_since(bad, now).is_err(), "{bad}");
        }
        // Past what nanoseconds since 1970 hold: refused, as every command does.
        for late in ["2262-04-12T00:00:00Z", "9999-12-31T23:59:59Z"] {
            let e = parse_since(late, now).unwrap_err();
            assert!(e.contains("after 2262-04-11T23:47:15Z"), "{late}: {e}");
        }
    }

    #[test]
    fn a_replay_is_the_original_message_with_its_own_id() {
        let o = replay(&letter(7, &[]), "DLQ", None).unwrap();
        assert_eq!(
            o.subject, "orders.eu",
            "as published: the partition transform applies"
        );
        assert_eq!(o.payload.as_ref(), b"{\"n\":1}");
        assert_eq!(
            o.headers,
            [("X-Trace", "t"), ("Nats-Msg-Id", "jetrelay-replay:DLQ:7")]
                .map(|(n, v)| (n.to_string(), v.to_string()))
        );
        assert_eq!(
            replay(&letter(7, &[]), "DLQ", Some("retry.x"))
                .unwrap()
                .subject,
            "retry.x"
        );
        // A subject that was not UTF-8: the letter holds it with U+FFFD, not its bytes.
        let mut bad = letter(10, &[]);
        for (n, v) in &mut bad.headers {
            match n.as_str() {
                "Jetrelay-Dlq-Subject" => *v = "orders.caf\u{fffd}".into(),
                "Jetrelay-Dlq-Reason" => {
                    *v = "jetrelay: malformed_subject: not valid UTF-8".into();
                }
                _ => {}
            }
        }
        let why = replay(&bad, "DLQ", None).unwrap_err();
        assert!(why.contains("not UTF-8") && why.contains("--to"), "{why}");
        assert_eq!(
            replay(&bad, "DLQ", Some("retry.x")).unwrap().subject,
            "retry.x"
        );
        let omitted = letter(9, &[("Jetrelay-Dlq-Payload-Omitted", "2000000")]);
        let why = replay(&omitted, "DLQ", None).unwrap_err();
        assert!(why.contains("ORDERS at 42"), "{why}");
        // A message jetrelay did not dead-letter (a source stream named by mistake).
        let foreign = Stored {
            headers: vec![("X-Trace".into(), "t".into())],
            ..letter(8, &[])
        };
        assert!(!is_letter(&foreign) && is_letter(&letter(8, &[])));
        let why = replay(&foreign, "ORDERS", None).unwrap_err();
        assert!(
            why.contains("not a dead letter") && why.contains("ORDERS"),
            "{why}"
        );
    }

    #[test]
    fn only_what_is_verifiably_a_letter_is_one() {
        let without = |name: &str| {
            let mut m = letter(3, &[]);
            m.headers.retain(|(n, _)| n != name);
            m
        };
        let with_id = |id: &str| {
            let mut m = letter(3, &[]);
            for (n, v) in &mut m.headers {
                if n == "Nats-Msg-Id" {
                    *v = id.to_string();
                }
            }
            m
        };
        // (the message, what is wrong with it; None: a letter)
        let cases: Vec<(Stored, Option<&str>)> = vec![
            (letter(3, &[]), None),
            (with_id("jetrelay-dlq:ORDERS:w:42:17"), None),
            (
                letter(3, &[("Jetrelay-Dlq-Reason", "x")]),
                Some("Jetrelay-Dlq-Reason header is there twice"),
            ),
            (
                letter(3, &[("jetrelay-dlq-subject", "pay.refund.all")]),
                Some("there twice"),
            ),
            (
                without("Jetrelay-Dlq-Reason"),
                Some("no Jetrelay-Dlq-Reason"),
            ),
            (
                without("Jetrelay-Dlq-Stream"),
                Some("no Jetrelay-Dlq-Stream"),
            ),
            (
                without("Nats-Msg-Id"),
                Some("Nats-Msg-Id is not jetrelay-dlq:ORDERS:w:42"),
            ),
            (
                with_id("jetrelay-dlq:PAY:w:42"),
                Some("is not jetrelay-dlq:ORDERS:w:42"),
            ),
            (with_id("jetrelay-dlq:ORDERS:w:42:"), Some("is not")),
            (with_id("jetrelay-dlq:ORDERS:w:42:x"), Some("is not")),
        ];
        for (m, want) in cases {
            match (verify(&m), want) {
                (Ok(()), None) => {}
                (Err(why), Some(w)) => {
                    assert!(why.contains(w), "{why} lacks {w}");
                    assert!(!is_letter(&m));
                    // Shown for what it is, not as a letter's metadata.
                    let e = entry(&m);
                    assert!(e.stream.is_none() && e.reason.starts_with("not a dead letter"));
                }
                (got, want) => panic!("{:?}: {got:?}, want {want:?}", m.headers),
            }
        }
        // A replay goes only to a subject that can be published to.
        for (subject, why) in [
            ("pay.*", "wildcards"),
            ("pay.>", "wildcards"),
            ("$JS.API.STREAM.DELETE.ORDERS", "system subject"),
        ] {
            let mut m = letter(5, &[]);
            for (n, v) in &mut m.headers {
                if n == "Jetrelay-Dlq-Subject" {
                    *v = subject.to_string();
                }
            }
            let got = replay(&m, "DLQ", None).unwrap_err();
            assert!(
                got.contains("not replayed") && got.contains(why),
                "{subject}: {got}"
            );
        }
    }
}
