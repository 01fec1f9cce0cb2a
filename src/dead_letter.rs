//! The dead-letter message as a pure function: the original payload unchanged, the
//! original headers that are safe to republish, and `Jetrelay-Dlq-*` metadata.
//!
//! Server-interpreted `Nats-*` headers of the original are not copied (a copied
//! `Nats-Expected-Last-Sequence` would make the publish fail, a copied `Nats-Msg-Id`
//! would be deduplicated against unrelated messages). The DLQ publish carries its own
//! `Nats-Msg-Id` of stream, consumer and sequence, so a repeated dead-lettering of the
//! same message by the same consumer (after a crash between PubAck and TERM) is
//! deduplicated by the DLQ stream, while another consumer's dead letter of the same
//! message is not.
//!
//! A letter that would not fit in one NATS message (headers and payload over the
//! server's `max_payload`) goes without its payload, saying so in
//! `Jetrelay-Dlq-Payload-Omitted: <bytes>`; the original stays in its stream.

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::delivery::Delivery;

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

/// The `Jetrelay-Dlq-*` header names: written here, read back by `crate::redrive`.
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
    /// Every header of a dead letter starts with this.
    pub const PREFIX: &str = "jetrelay-dlq-";
}

/// The headers of the DLQ message.
pub fn headers(dl: &DeadLetter<'_>) -> Vec<(String, String)> {
    let d = dl.delivery;
    let mut out: Vec<(String, String)> = d
        .headers
        .iter()
        .filter(|(n, _)| !n.to_ascii_lowercase().starts_with("nats-"))
        .cloned()
        .collect();
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
            format!("jetrelay-dlq:{}:{}:{}", m.stream, m.consumer, m.stream_seq),
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

/// What is published to the DLQ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Letter {
    /// Its headers.
    pub headers: Vec<(String, String)>,
    /// Whether the original payload goes with it.
    pub with_payload: bool,
}

/// The letter for `dl`, with its payload when headers and payload fit in
/// `max_payload` (the server's limit for one message), without it otherwise.
pub fn letter(dl: &DeadLetter<'_>, max_payload: usize) -> Letter {
    let mut headers = headers(dl);
    let payload = dl.delivery.payload.len();
    if header_block_len(&headers).saturating_add(payload) <= max_payload {
        return Letter {
            headers,
            with_payload: true,
        };
    }
    headers.push((PAYLOAD_OMITTED.to_string(), payload.to_string()));
    Letter {
        headers,
        with_payload: false,
    }
}

/// The size of the header block NATS sends for these headers: `NATS/1.0\r\n`, one
/// `name: value\r\n` line each, and a closing `\r\n`.
pub fn header_block_len(headers: &[(String, String)]) -> usize {
    let lines: usize = headers.iter().map(|(n, v)| n.len() + v.len() + 4).sum();
    "NATS/1.0\r\n".len() + lines + 2
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delivery::Meta;
    use bytes::Bytes;

    #[test]
    fn dlq_headers_table() {
        let d = Delivery {
            subject: "3.orders.eu".into(),
            meta: Ok(Meta {
                stream: "ORDERS".into(),
                consumer: "w".into(),
                stream_seq: 42,
                consumer_seq: 9,
                delivered: 3,
                pending: 0,
                published: OffsetDateTime::UNIX_EPOCH,
            }),
            headers: vec![
                ("X-Trace".into(), "t".into()),
                ("Nats-Msg-Id".into(), "orig".into()),
                ("Nats-Expected-Last-Sequence".into(), "4".into()),
            ],
            payload: Bytes::from_static(b"p"),
            partition: Some(3),
            app_subject: "orders.eu".into(),
            origin: None,
            invalid: None,
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
    fn a_letter_too_large_goes_without_its_payload() {
        let d = Delivery {
            subject: "s".into(),
            meta: Err("none".into()),
            headers: vec![("X-A".into(), "b".into())],
            payload: Bytes::from(vec![7u8; 1000]),
            partition: None,
            app_subject: "s".into(),
            origin: None,
            invalid: None,
        };
        let dl = DeadLetter {
            delivery: &d,
            attempts: 1,
            last_status: None,
            reason: "r",
            at: OffsetDateTime::UNIX_EPOCH,
        };
        let exact = header_block_len(&headers(&dl)) + 1000;
        let fits = letter(&dl, exact);
        assert!(fits.with_payload);
        assert!(!fits.headers.iter().any(|(n, _)| n == PAYLOAD_OMITTED));
        let over = letter(&dl, exact - 1);
        assert!(!over.with_payload);
        assert_eq!(
            over.headers.last(),
            Some(&(PAYLOAD_OMITTED.to_string(), "1000".to_string()))
        );
        assert_eq!(
            header_block_len(&[("A".into(), "bc".into())]),
            "NATS/1.0\r\nA: bc\r\n\r\n".len()
        );
    }
}
