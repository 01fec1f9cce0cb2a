//! The dead-letter message as a pure function: the original payload unchanged, the
//! original headers that are safe to republish, and `Jetrelay-Dlq-*` metadata.
//!
//! Server-interpreted `Nats-*` headers of the original are not copied (a copied
//! `Nats-Expected-Last-Sequence` would make the publish fail, a copied `Nats-Msg-Id`
//! would be deduplicated against unrelated messages), nor any `Jetrelay-*` one: a
//! publisher cannot forge what a letter says of itself. The DLQ publish carries its own
//! `Nats-Msg-Id` of stream, consumer and sequence, so a repeated dead-lettering of the
//! same message by the same consumer (after a crash between PubAck and TERM) is
//! deduplicated by the DLQ stream, while another consumer's dead letter of the same
//! message is not.
//!
//! A letter that would not fit in one NATS message (headers and payload over the
//! server's `max_payload`) goes without its payload, saying so in
//! `Jetrelay-Dlq-Payload-Omitted: <bytes>`; when that is still too large (a header
//! block over JetStream's 64 KiB), without the original headers too
//! (`Jetrelay-Dlq-Headers-Omitted: <bytes>`), then with its reason shortened. The
//! original stays in its stream.

pub mod stored;

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::message::{Delivery, MAX_HEADER_BLOCK, header_block_len};

/// Why and how a message is dead-lettered.
#[derive(Debug, Clone)]
pub struct DeadLetter<'a> {
    /// The message.
    pub delivery: &'a Delivery,
    /// Attempts made (deliveries plus in-place retries).
    pub attempts: u32,
    /// The app's last HTTP status, if it answered.
    pub last_status: Option<u16>,
    /// The TERM reason.
    pub reason: &'a str,
    /// When.
    pub at: OffsetDateTime,
}

/// The `Jetrelay-Dlq-*` header names: written here, read back by `crate::dead_letter::stored`.
pub mod header {
    /// The subject as the publisher sent it (a group's partition token stripped).
    pub const SUBJECT: &str = "Jetrelay-Dlq-Subject";
    /// A group source's partition number.
    pub const PARTITION: &str = "Jetrelay-Dlq-Partition";
    /// The stream the message was consumed from.
    pub const STREAM: &str = "Jetrelay-Dlq-Stream";
    /// The consumer that dead-lettered it.
    pub const CONSUMER: &str = "Jetrelay-Dlq-Consumer";
    /// Its stream sequence.
    pub const SEQUENCE: &str = "Jetrelay-Dlq-Sequence";
    /// Attempts made.
    pub const DELIVERED: &str = "Jetrelay-Dlq-Delivered";
    /// The app's last status.
    pub const STATUS: &str = "Jetrelay-Dlq-Status";
    /// The TERM reason.
    pub const REASON: &str = "Jetrelay-Dlq-Reason";
    /// When it was dead-lettered.
    pub const TIME: &str = "Jetrelay-Dlq-Time";
    /// The original `Nats-Msg-Id`.
    pub const MSG_ID: &str = "Jetrelay-Dlq-Msg-Id";
    /// The payload was left out; its size.
    pub const PAYLOAD_OMITTED: &str = "Jetrelay-Dlq-Payload-Omitted";
    /// The original headers were left out too; the size of their block.
    pub const HEADERS_OMITTED: &str = "Jetrelay-Dlq-Headers-Omitted";
    /// Every header of a dead letter starts with this.
    pub const PREFIX: &str = "jetrelay-dlq-";
}

/// The id a letter is published with: `jetrelay-dlq:<stream>:<consumer>:<sequence>`.
pub fn letter_id(stream: &str, consumer: &str, sequence: u64) -> String {
    format!("jetrelay-dlq:{stream}:{consumer}:{sequence}")
}

/// Whether an original header is left out of its letter: the server's `Nats-*` (a
/// copied `Nats-Expected-*` would fail the publish, a copied `Nats-Msg-Id` be taken
/// for another message's) and every `Jetrelay-*` (a publisher cannot forge a
/// letter's metadata).
pub fn left_out(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.starts_with("nats-") || lower.starts_with("jetrelay-")
}

/// The original headers a letter keeps (those not [`left_out`]).
fn kept(d: &Delivery) -> Vec<(String, String)> {
    d.message
        .headers
        .iter()
        .filter(|(n, _)| !left_out(n))
        .cloned()
        .collect()
}

/// The headers of the DLQ message.
pub fn headers(dl: &DeadLetter<'_>) -> Vec<(String, String)> {
    let d = dl.delivery;
    let mut out = kept(d);
    let mut add = |n: &str, v: String| out.push((n.to_string(), v));
    // As published: a replay to it goes through a group's partition transform again.
    add(header::SUBJECT, d.app_subject.clone());
    if let Some(p) = d.partition {
        add(header::PARTITION, p.to_string());
    }
    if let Ok(m) = &d.meta {
        add(header::STREAM, m.stream.clone());
        add(header::CONSUMER, m.consumer.clone());
        add(header::SEQUENCE, m.stream_seq.to_string());
        add(
            "Nats-Msg-Id",
            letter_id(&m.stream, &m.consumer, m.stream_seq),
        );
    }
    add(header::DELIVERED, dl.attempts.to_string());
    if let Some(s) = dl.last_status {
        add(header::STATUS, s.to_string());
    }
    // One line: a reason never carries the app's body, but stay safe for headers.
    let reason: String = dl.reason.chars().filter(|c| !c.is_control()).collect();
    add(header::REASON, reason);
    if let Ok(t) = dl.at.to_offset(time::UtcOffset::UTC).format(&Rfc3339) {
        add(header::TIME, t);
    }
    if let Some(id) = d.header("Nats-Msg-Id") {
        add(header::MSG_ID, id.to_string());
    }
    out
}

/// The header that says the payload was left out, and how big it was.
pub const PAYLOAD_OMITTED: &str = header::PAYLOAD_OMITTED;

/// A shortened reason is at most this many bytes.
const SHORT_REASON: usize = 200;

/// What a letter goes without so that the DLQ takes it, in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Shed {
    /// The whole letter.
    Nothing,
    /// Without the payload (`Jetrelay-Dlq-Payload-Omitted`).
    Payload,
    /// Without the payload and the original headers (`Jetrelay-Dlq-Headers-Omitted`).
    Headers,
    /// That, and a shortened reason.
    Reason,
}

impl Shed {
    /// What a letter shed this far goes without, for a log line.
    pub fn without(self) -> &'static str {
        match self {
            Shed::Nothing => "nothing",
            Shed::Payload => "the payload",
            Shed::Headers => "the payload and the original headers",
            Shed::Reason => "the payload, the original headers and the full reason",
        }
    }

    /// The next thing to go without, when this was still too large.
    pub fn next(self) -> Option<Shed> {
        match self {
            Shed::Nothing => Some(Shed::Payload),
            Shed::Payload => Some(Shed::Headers),
            Shed::Headers => Some(Shed::Reason),
            Shed::Reason => None,
        }
    }
}

/// What is published to the DLQ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Letter {
    /// Its headers.
    pub headers: Vec<(String, String)>,
    /// Whether the original payload goes with it.
    pub with_payload: bool,
    /// What it goes without.
    pub shed: Shed,
}

/// The letter for `dl` that fits in `max_payload` (the server's limit for one
/// message) and in JetStream's 64 KiB header limit, going without at least `at_least`:
/// whole; else without its payload; else without the original headers too; else with
/// its reason shortened. `None` when not even that fits (what it says of the original
/// is itself too large).
pub fn letter(dl: &DeadLetter<'_>, max_payload: usize, at_least: Shed) -> Option<Letter> {
    let payload = dl.delivery.message.payload.len();
    let mut shed = Some(at_least);
    while let Some(level) = shed {
        let mut headers = headers(dl);
        if level >= Shed::Headers {
            let original = kept(dl.delivery);
            headers.retain(|h| !original.contains(h));
            headers.push((
                header::HEADERS_OMITTED.to_string(),
                header_block_len(&original).to_string(),
            ));
        }
        if level >= Shed::Reason {
            for (n, v) in &mut headers {
                if n == header::REASON && v.len() > SHORT_REASON {
                    let mut end = SHORT_REASON;
                    while !v.is_char_boundary(end) {
                        end -= 1;
                    }
                    v.truncate(end);
                    v.push('…');
                }
            }
        }
        let with_payload = level == Shed::Nothing;
        if !with_payload {
            headers.push((PAYLOAD_OMITTED.to_string(), payload.to_string()));
        }
        let block = header_block_len(&headers);
        let body = if with_payload { payload } else { 0 };
        if block <= MAX_HEADER_BLOCK && block.saturating_add(body) <= max_payload {
            return Some(Letter {
                headers,
                with_payload,
                shed: level,
            });
        }
        shed = level.next();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Message, Meta};
    use bytes::Bytes;

    #[test]
    fn dlq_headers_table() {
        let d = Delivery {
            message: Message {
                subject: "3.orders.eu".into(),
                headers: vec![
                    ("X-Trace".into(), "t".into()),
                    ("Nats-Msg-Id".into(), "orig".into()),
                    ("Nats-Expected-Last-Sequence".into(), "4".into()),
                    // A publisher's forgery of the letter's own metadata.
                    ("Jetrelay-Dlq-Subject".into(), "pay.refund.all".into()),
                    ("JETRELAY-DLQ-STREAM".into(), "PAY".into()),
                    ("Jetrelay-Other".into(), "x".into()),
                ],
                payload: Bytes::from_static(b"p"),
            },
            meta: Ok(Meta {
                stream: "ORDERS".into(),
                consumer: "w".into(),
                stream_seq: 42,
                consumer_seq: 9,
                delivered: 3,
                pending: 0,
                published: OffsetDateTime::UNIX_EPOCH,
            }),
            partition: Some(3),
            app_subject: "orders.eu".into(),
            origin: None,
            flaw: None,
        };
        let h = headers(&DeadLetter {
            delivery: &d,
            attempts: 5,
            last_status: Some(503),
            reason: "jetrelay: 5 attempts\r\nexhausted",
            at: OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap(),
        });
        let get = |n: &str| {
            h.iter()
                .filter(|(k, _)| k == n)
                .map(|(_, v)| v.as_str())
                .collect::<Vec<_>>()
        };
        assert_eq!(get("X-Trace"), ["t"]);
        assert_eq!(get("Nats-Msg-Id"), ["jetrelay-dlq:ORDERS:w:42"]);
        assert!(get("Nats-Expected-Last-Sequence").is_empty());
        assert_eq!(get("Jetrelay-Dlq-Subject"), ["orders.eu"], "as published");
        assert!(
            !h.iter()
                .any(|(n, v)| n == "JETRELAY-DLQ-STREAM" || n == "Jetrelay-Other" || v == "PAY"),
            "no Jetrelay-* header of the original: {h:?}"
        );
        assert_eq!(get("Jetrelay-Dlq-Partition"), ["3"]);
        assert_eq!(get("Jetrelay-Dlq-Stream"), ["ORDERS"]);
        assert_eq!(get("Jetrelay-Dlq-Sequence"), ["42"]);
        assert_eq!(get("Jetrelay-Dlq-Delivered"), ["5"]);
        assert_eq!(get("Jetrelay-Dlq-Status"), ["503"]);
        assert_eq!(
            get("Jetrelay-Dlq-Reason"),
            ["jetrelay: 5 attemptsexhausted"]
        );
        assert_eq!(get("Jetrelay-Dlq-Time"), ["2023-11-14T22:13:20Z"]);
        assert_eq!(get("Jetrelay-Dlq-Msg-Id"), ["orig"]);
    }

    #[test]
    fn a_letter_too_large_sheds_its_payload_then_the_headers_then_its_reason() {
        let d = |headers: Vec<(String, String)>, payload: usize| Delivery {
            message: Message {
                subject: "s".into(),
                headers,
                payload: Bytes::from(vec![7u8; payload]),
            },
            meta: Err("none".into()),
            partition: None,
            app_subject: "s".into(),
            origin: None,
            flaw: None,
        };
        let letter_of = |d: &Delivery, reason: &str, max: usize, at: Shed| {
            let dl = DeadLetter {
                delivery: d,
                attempts: 1,
                last_status: None,
                reason,
                at: OffsetDateTime::UNIX_EPOCH,
            };
            (letter(&dl, max, at), header_block_len(&headers(&dl)))
        };
        let get = |l: &Letter, n: &str| {
            l.headers
                .iter()
                .find(|(k, _)| k == n)
                .map(|(_, v)| v.clone())
        };
        // A payload too large for max_payload: without it.
        let small = d(vec![("X-A".into(), "b".into())], 1000);
        let (whole, block) = letter_of(&small, "r", 1 << 20, Shed::Nothing);
        let whole = whole.unwrap();
        assert!(whole.with_payload && whole.shed == Shed::Nothing);
        assert_eq!(get(&whole, PAYLOAD_OMITTED), None);
        let (fits, _) = letter_of(&small, "r", block + 1000, Shed::Nothing);
        assert!(fits.unwrap().with_payload, "exactly fits");
        let (over, _) = letter_of(&small, "r", block + 999, Shed::Nothing);
        let over = over.unwrap();
        assert_eq!((over.with_payload, over.shed), (false, Shed::Payload));
        assert_eq!(get(&over, PAYLOAD_OMITTED).as_deref(), Some("1000"));
        assert_eq!(get(&over, "X-A").as_deref(), Some("b"), "headers kept");
        // Headers over JetStream's 64 KiB: without them too, saying how large.
        let big = d(vec![("X-Big".into(), "h".repeat(70_000))], 10);
        let (l, _) = letter_of(&big, "r", 1 << 20, Shed::Nothing);
        let l = l.unwrap();
        assert_eq!(l.shed, Shed::Headers);
        assert_eq!(get(&l, "X-Big"), None);
        assert_eq!(
            get(&l, header::HEADERS_OMITTED).as_deref(),
            Some(
                header_block_len(&[("X-Big".into(), "h".repeat(70_000))])
                    .to_string()
                    .as_str()
            )
        );
        assert_eq!(get(&l, PAYLOAD_OMITTED).as_deref(), Some("10"));
        assert!(header_block_len(&l.headers) <= MAX_HEADER_BLOCK);
        // A stream that refused a letter for its size: the caller asks for more shed.
        let (l, _) = letter_of(&small, "r", 1 << 20, Shed::Headers);
        assert_eq!(l.unwrap().shed, Shed::Headers);
        // A long reason, shortened last.
        let reason = "x".repeat(5000);
        let (l, _) = letter_of(&small, &reason, 1200, Shed::Nothing);
        let l = l.unwrap();
        assert_eq!(l.shed, Shed::Reason);
        assert!(get(&l, header::REASON).unwrap().len() <= SHORT_REASON + 3);
        // Nothing fits at all.
        assert_eq!(letter_of(&small, "r", 10, Shed::Nothing).0, None);
        assert_eq!(
            header_block_len(&[("A".into(), "bc".into())]),
            "NATS/1.0\r\nA: bc\r\n\r\n".len()
        );
    }
}
