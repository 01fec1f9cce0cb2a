//! What the daemon knows about one delivered message, in our own types: the JetStream
//! metadata, the message headers as strings, the payload, and the partition.
//!
//! Built by the NATS boundary, read by the dispatcher, the header mapping and the log.

use bytes::Bytes;
use time::OffsetDateTime;

/// JetStream metadata of one delivery (from its ack subject).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    /// The stream the message was delivered from.
    pub stream: String,
    /// The consumer that delivered it.
    pub consumer: String,
    /// Stream sequence.
    pub stream_seq: u64,
    /// Consumer sequence.
    pub consumer_seq: u64,
    /// Delivery count, 1 on the first delivery.
    pub delivered: u32,
    /// Messages still pending for the consumer.
    pub pending: u64,
    /// Publish time.
    pub published: OffsetDateTime,
}

/// One message as the dispatcher sees it.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The message subject as stored.
    pub subject: String,
    /// Metadata, or why it could not be read (the message is then terminated).
    pub meta: Result<Meta, String>,
    /// Message headers (name, value), in order; names as sent.
    pub headers: Vec<(String, String)>,
    /// The payload, unchanged.
    pub payload: Bytes,
    /// The partition number, in group sources.
    pub partition: Option<u32>,
    /// The subject with the partition token stripped (= `subject` outside groups).
    pub app_subject: String,
    /// Where a sourced message came from (elastic groups: the origin stream and its
    /// sequence, from `Nats-Stream-Source`).
    pub origin: Option<Origin>,
    /// Why the message breaks what the transport promises; it is then terminated
    /// (dead-lettered first when a DLQ is configured), never sent.
    pub invalid: Option<Invalid>,
}

/// What makes a delivered message one that cannot be offered to the app.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invalid {
    /// The JetStream metadata (from the ack subject) does not parse.
    Metadata(String),
    /// A group message whose subject has no partition token.
    NoPartition(String),
    /// The header block could not be parsed (a header name that is not valid, a line
    /// without `:`, bytes that are not UTF-8): the lines that could be parsed are
    /// kept, the others are dropped.
    MalformedHeaders(String),
}

impl Invalid {
    /// Its name: the `reason` label of `jetrelay_invalid_messages_total` and the
    /// first word of the `+TERM` reason.
    pub fn name(&self) -> &'static str {
        match self {
            Invalid::Metadata(_) => "bad_metadata",
            Invalid::NoPartition(_) => "no_partition",
            Invalid::MalformedHeaders(_) => "malformed_headers",
        }
    }

    /// Every name, for the metric's closed label set.
    pub const NAMES: [&'static str; 3] = ["bad_metadata", "no_partition", "malformed_headers"];
}

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (Invalid::Metadata(why) | Invalid::NoPartition(why) | Invalid::MalformedHeaders(why)) =
            self;
        write!(f, "{}: {why}", self.name())
    }
}

/// The stream and sequence a sourced message was first stored under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The origin stream.
    pub stream: String,
    /// Its stream sequence there.
    pub sequence: u64,
}

impl Origin {
    /// Reads the `Nats-Stream-Source` header a sourcing stream stores with each
    /// message: `<index name> <sequence> <filter> <destination> <subject>`, where the
    /// index name is the origin stream's name, followed by `:<hash>` when the source
    /// has a filter or transforms (as an elastic group's has). `stream` is the origin
    /// expected (the group's `source.stream`); a header naming another one, or in
    /// another layout, gives `None`.
    pub fn from_stream_source(value: &str, stream: &str) -> Option<Origin> {
        let mut fields = value.split_ascii_whitespace();
        let index_name = fields.next()?;
        let sequence = fields.next()?.parse().ok()?;
        let named = index_name == stream
            || index_name
                .strip_prefix(stream)
                .is_some_and(|rest| rest.starts_with(':'));
        named.then(|| Origin {
            stream: stream.to_string(),
            sequence,
        })
    }
}

impl Delivery {
    /// How long ago it was published (its stream timestamp), at `now`; `None`
    /// without metadata. A publish time ahead of `now` (skewed clocks) is zero.
    pub fn age(&self, now: OffsetDateTime) -> Option<std::time::Duration> {
        let m = self.meta.as_ref().ok()?;
        Some(std::time::Duration::try_from(now - m.published).unwrap_or_default())
    }

    /// Delivery count, 1 when the metadata is unreadable.
    pub fn delivered(&self) -> u32 {
        self.meta.as_ref().map_or(1, |m| m.delivered)
    }

    /// Stream sequence, 0 when the metadata is unreadable.
    pub fn stream_seq(&self) -> u64 {
        self.meta.as_ref().map_or(0, |m| m.stream_seq)
    }

    /// The last value of a message header, case-insensitively.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .rev()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

impl Meta {
    /// Parses the JetStream ack subject that carries the metadata:
    /// `$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<nanos>.<pending>` (v1), or
    /// `$JS.ACK.<domain>.<account>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<nanos>.<pending>[.<token>]` (v2).
    ///
    /// # Errors
    /// A sentence saying what is wrong; the message is then terminated, never a crash.
    pub fn from_ack_subject(reply: &str) -> Result<Meta, String> {
        // The tokens on the stack (one per message: no allocation); a 13th means too many.
        let mut t = [""; 13];
        let mut len = 0;
        for (slot, token) in t.iter_mut().zip(reply.split('.')) {
            *slot = token;
            len += 1;
        }
        if len < 2 || t[0] != "$JS" || t[1] != "ACK" {
            return Err(format!(
                "reply subject {reply:?} is not a JetStream ack subject"
            ));
        }
        let fields = match len {
            9 => &t[2..9],
            11 | 12 => &t[4..11],
            _ => {
                let n = reply.split('.').count();
                return Err(format!("ack subject has {n} tokens, expected 9, 11 or 12"));
            }
        };
        let num = |i: usize, what: &str| -> Result<u64, String> {
            fields[i]
                .parse::<u64>()
                .map_err(|_| format!("ack subject {what} {:?} is not a number", fields[i]))
        };
        let nanos = num(5, "timestamp")?;
        Ok(Meta {
            stream: fields[0].to_string(),
            consumer: fields[1].to_string(),
            delivered: u32::try_from(num(2, "delivery count")?).unwrap_or(u32::MAX),
            stream_seq: num(3, "stream sequence")?,
            consumer_seq: num(4, "consumer sequence")?,
            published: OffsetDateTime::from_unix_timestamp_nanos(i128::from(nanos))
                .map_err(|_| "ack subject timestamp is out of range".to_string())?,
            pending: num(6, "pending count")?,
        })
    }
}

/// The size of the header block NATS sends for these headers: `NATS/1.0\r\n`, one
/// `name: value\r\n` line each, and a closing `\r\n`.
pub fn header_block_len(headers: &[(String, String)]) -> usize {
    let lines: usize = headers.iter().map(|(n, v)| n.len() + v.len() + 4).sum();
    "NATS/1.0\r\n".len() + lines + 2
}

/// JetStream refuses a message whose header block is over 64 KiB (error 10097),
/// whatever `max_payload` says.
pub const MAX_HEADER_BLOCK: usize = 65_535;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_source_table() {
        let origin = |s: &str, n| {
            Some(Origin {
                stream: s.to_string(),
                sequence: n,
            })
        };
        let cases = [
            (
                "ORDERS:Yk4VdG4x 42 e.* {{partition(2,1)}}.e.{{wildcard(1)}} e.k",
                origin("ORDERS", 42),
            ),
            ("ORDERS 7 > > e.k", origin("ORDERS", 7)),
            ("ORDERS 7", origin("ORDERS", 7)),
            ("ORDERS2:abc 7 > > x", None),
            ("OTHER:abc 7 > > x", None),
            ("ORDERS:abc seven > > x", None),
            ("ORDERS:abc", None),
            ("", None),
            ("$JS.ACK.ORDERS.c.1.42.7.1700000000000000000.5", None),
        ];
        for (value, want) in cases {
            assert_eq!(
                Origin::from_stream_source(value, "ORDERS"),
                want,
                "{value:?}"
            );
        }
    }

    #[test]
    fn ack_subject_table() {
        let v1 =
            Meta::from_ack_subject("$JS.ACK.ORDERS.worker.2.42.7.1700000000000000000.5").unwrap();
        assert_eq!(
            (
                v1.stream.as_str(),
                v1.consumer.as_str(),
                v1.delivered,
                v1.stream_seq,
                v1.consumer_seq,
                v1.pending
            ),
            ("ORDERS", "worker", 2, 42, 7, 5)
        );
        assert_eq!(v1.published.unix_timestamp(), 1_700_000_000);
        let v2 =
            Meta::from_ack_subject("$JS.ACK.hub.ACC.ORDERS.worker.1.3.4.1700000000000000000.0.tok")
                .unwrap();
        assert_eq!(
            (v2.stream.as_str(), v2.delivered, v2.stream_seq),
            ("ORDERS", 1, 3)
        );
        assert!(Meta::from_ack_subject("$JS.ACK.hub.ACC.S.c.1.3.4.1700000000000000000.0").is_ok());
        for bad in [
            "",
            "_INBOX.x",
            "$JS.ACK.S.c.1.2",
            "$JS.ACK.S.c.x.42.7.1700000000000000000.5",
            "$JS.ACK.S.c.1.42.7.notatime.5",
            "$JS.ACK.S.c.1.42.7.99999999999999999999.5",
            "$JS.ACK.hub.ACC.S.c.1.3.4.1700000000000000000.0.tok.more",
            "$JS.ACK.hub.ACC.S.c.1.3.4.1700000000000000000.0.tok.more.and.more",
        ] {
            assert!(Meta::from_ack_subject(bad).is_err(), "{bad}");
        }
        assert_eq!(
            Meta::from_ack_subject("$JS.ACK.a.b.c.d.e.f.g.h.i.j.k.l.m.n").unwrap_err(),
            "ack subject has 16 tokens, expected 9, 11 or 12"
        );
    }
}
