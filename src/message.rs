//! Messages in our own types: a plain NATS message ([`Message`]: subject, headers as
//! strings, payload; what any subscriber receives, a request as well as a JetStream
//! delivery), and one JetStream delivery ([`Delivery`]: the message, its metadata
//! parsed once from the ack subject, the partition, the origin, and what else breaks
//! what the transport promises; its expiry, [`Delivery::expires_at`], from its
//! `Nats-TTL` as nats-server counts it). [`Offered`] is either, as the app is offered
//! it.
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

/// A NATS message as a subscriber receives it, whatever it is: nothing here says it
/// was delivered by JetStream.
#[derive(Debug, Clone)]
pub struct Message {
    /// The subject (for a delivery: as stored).
    pub subject: String,
    /// Headers (name, value), in order; names as sent.
    pub headers: Vec<(String, String)>,
    /// The payload, unchanged.
    pub payload: Bytes,
}

/// One JetStream delivery as the dispatcher sees it: the message, and what JetStream
/// says of it.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The message.
    pub message: Message,
    /// The metadata, parsed once from the ack subject, or why it could not be read:
    /// the message is then invalid ([`Invalid::Metadata`]).
    pub meta: Result<Meta, String>,
    /// The partition number, in group sources.
    pub partition: Option<u32>,
    /// The subject with the partition token stripped (= the message's subject outside
    /// groups).
    pub app_subject: String,
    /// Where a sourced message came from (elastic groups: the origin stream and its
    /// sequence, from `Nats-Stream-Source`).
    pub origin: Option<Origin>,
    /// What else breaks what the transport promises (the metadata aside: `meta` says
    /// that); see [`Delivery::invalid`].
    pub flaw: Option<Flaw>,
}

/// What makes a delivery invalid besides its metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Flaw {
    /// A group message whose subject has no partition token.
    NoPartition(String),
    /// The header block could not be parsed: the lines that could be parsed are kept.
    MalformedHeaders(String),
    /// The subject is not UTF-8 (the server forwards any bytes): delivered with those
    /// bytes replaced by U+FFFD.
    MalformedSubject(String),
}

/// What makes a delivered message one that cannot be offered to the app: the
/// metric's label and the `+TERM` reason, built by [`Delivery::invalid`].
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
    /// The subject is not UTF-8: what was delivered has those bytes replaced.
    MalformedSubject(String),
    /// With `http.unwrap_cloudevents`: its `Content-Type` says a structured
    /// CloudEvent, and its payload is not a valid one.
    MalformedCloudevent(String),
}

impl Invalid {
    /// Its name: the `reason` label of `jetrelay_invalid_messages_total` and the
    /// first word of the `+TERM` reason.
    pub fn name(&self) -> &'static str {
        match self {
            Invalid::Metadata(_) => "bad_metadata",
            Invalid::NoPartition(_) => "no_partition",
            Invalid::MalformedHeaders(_) => "malformed_headers",
            Invalid::MalformedSubject(_) => "malformed_subject",
            Invalid::MalformedCloudevent(_) => "malformed_cloudevent",
        }
    }

    /// Every name, for the metric's closed label set.
    pub const NAMES: [&'static str; 5] = [
        "bad_metadata",
        "no_partition",
        "malformed_headers",
        "malformed_subject",
        "malformed_cloudevent",
    ];
}

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (Invalid::Metadata(why)
        | Invalid::NoPartition(why)
        | Invalid::MalformedHeaders(why)
        | Invalid::MalformedSubject(why)
        | Invalid::MalformedCloudevent(why)) = self;
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

impl Message {
    /// The last value of a header, case-insensitively.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .rev()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

impl Delivery {
    /// Why the message cannot be offered to the app, if it cannot; it is then
    /// terminated (dead-lettered first when a DLQ is configured), never sent. One
    /// reason: a missing partition token first, then the metadata, then the headers.
    pub fn invalid(&self) -> Option<Invalid> {
        match (&self.flaw, &self.meta) {
            (Some(Flaw::NoPartition(why)), _) => Some(Invalid::NoPartition(why.clone())),
            (_, Err(why)) => Some(Invalid::Metadata(why.clone())),
            (Some(Flaw::MalformedHeaders(why)), Ok(_)) => {
                Some(Invalid::MalformedHeaders(why.clone()))
            }
            (Some(Flaw::MalformedSubject(why)), Ok(_)) => {
                Some(Invalid::MalformedSubject(why.clone()))
            }
            (None, Ok(_)) => None,
        }
    }

    /// The same delivery carrying `message` instead (what the app is given in its
    /// place: a structured CloudEvent's data).
    pub fn with_message(&self, message: Message) -> Delivery {
        Delivery {
            message,
            meta: self.meta.clone(),
            partition: self.partition,
            app_subject: self.app_subject.clone(),
            origin: self.origin.clone(),
            flaw: self.flaw.clone(),
        }
    }

    /// Whether [`Delivery::invalid`] has a reason (without building it).
    pub fn is_invalid(&self) -> bool {
        self.flaw.is_some() || self.meta.is_err()
    }

    /// How long ago it was published (its stream timestamp), at `now`; `None`
    /// without metadata. A publish time ahead of `now` (skewed clocks) is zero.
    pub fn age(&self, now: OffsetDateTime) -> Option<std::time::Duration> {
        let m = self.meta.as_ref().ok()?;
        Some(std::time::Duration::try_from(now - m.published).unwrap_or_default())
    }

    /// When the message expires, by its `Nats-TTL` ([`Ttl::parse`]) counted from its
    /// publish time, as nats-server expires it; `None` without a TTL (or metadata), or
    /// with `never`.
    pub fn expires_at(&self) -> Option<std::time::SystemTime> {
        let m = self.meta.as_ref().ok()?;
        match Ttl::parse(self.header(TTL_HEADER)?)? {
            Ttl::Never => None,
            Ttl::After(ttl) => std::time::SystemTime::from(m.published).checked_add(ttl),
        }
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
        self.message.header(name)
    }
}

/// A message's own lifetime, its `Nats-TTL` header (ADR-43) as nats-server reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ttl {
    /// `never` (any case): the message never expires.
    Never,
    /// Whole seconds after its publish time.
    After(std::time::Duration),
}

/// The header nats-server reads a message's TTL from.
pub const TTL_HEADER: &str = "Nats-TTL";

impl Ttl {
    /// Reads a `Nats-TTL` value as nats-server does (`parseMessageTTL`): `never` in any
    /// case; else a Go duration (`90s`, `1h30m`, `1.5m`) of at least one second,
    /// truncated to whole seconds; else a plain number of seconds. `None` for what the
    /// server refuses (and treats as no TTL when it expires messages): a duration
    /// under a second, a negative or malformed value, and `0` (no TTL of its own).
    pub fn parse(value: &str) -> Option<Ttl> {
        if value.eq_ignore_ascii_case("never") {
            return Some(Ttl::Never);
        }
        let secs = match go_duration_nanos(value) {
            Some(n) if n < 1_000_000_000 => return None,
            Some(n) => n / 1_000_000_000,
            None if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                value.parse::<i64>().ok()?
            }
            None => return None,
        };
        let secs = u64::try_from(secs).ok().filter(|s| *s > 0)?;
        Some(Ttl::After(std::time::Duration::from_secs(secs)))
    }
}

/// Go's `time.ParseDuration` in nanoseconds: an optional sign, then one or more
/// `<number><unit>` (`ns`, `us`, `µs`, `μs`, `ms`, `s`, `m`, `h`; the number may
/// have a fraction), or a lone `0`; `None` on anything else or an overflow.
fn go_duration_nanos(value: &str) -> Option<i64> {
    let (negative, mut rest) = match value.as_bytes().first() {
        Some(b'-') => (true, &value[1..]),
        Some(b'+') => (false, &value[1..]),
        _ => (false, value),
    };
    if rest == "0" {
        return Some(0);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let whole_end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (whole, after) = rest.split_at(whole_end);
        let (frac, after) = match after.strip_prefix('.') {
            Some(a) => {
                let end = a.find(|c: char| !c.is_ascii_digit()).unwrap_or(a.len());
                a.split_at(end)
            }
            None => ("", after),
        };
        if whole.is_empty() && frac.is_empty() {
            return None;
        }
        let unit_end = after
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_end);
        let scale: u128 = match unit {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return None,
        };
        let mut n: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().ok()?
        };
        n = n.checked_mul(scale)?;
        // The fraction, digit by digit, as Go does (what is below a nanosecond is
        // dropped).
        let mut place = scale;
        for d in frac.bytes() {
            place /= 10;
            n += u128::from(d - b'0') * place;
        }
        total = total.checked_add(n)?;
        if total > i64::MAX as u128 {
            return None;
        }
        rest = next;
    }
    let total = i64::try_from(total).ok()?;
    Some(if negative { -total } else { total })
}

/// What the app is offered: a JetStream delivery, or a plain message (a NATS
/// request: no metadata, no partition, no origin). The HTTP boundary reads either
/// through these methods, so it forwards a message that is not a delivery as well.
#[derive(Debug, Clone, Copy)]
pub enum Offered<'a> {
    /// A JetStream delivery.
    Delivery(&'a Delivery),
    /// A message without JetStream metadata.
    Message(&'a Message),
}

impl<'a> Offered<'a> {
    /// The message.
    pub fn message(self) -> &'a Message {
        match self {
            Offered::Delivery(d) => &d.message,
            Offered::Message(m) => m,
        }
    }

    /// The subject the app is told (a group's partition token stripped).
    pub fn subject(self) -> &'a str {
        match self {
            Offered::Delivery(d) => &d.app_subject,
            Offered::Message(m) => &m.subject,
        }
    }

    /// The JetStream metadata, when it is a delivery whose metadata could be read.
    pub fn meta(self) -> Option<&'a Meta> {
        match self {
            Offered::Delivery(d) => d.meta.as_ref().ok(),
            Offered::Message(_) => None,
        }
    }

    /// The partition number, in group sources.
    pub fn partition(self) -> Option<u32> {
        match self {
            Offered::Delivery(d) => d.partition,
            Offered::Message(_) => None,
        }
    }

    /// Where a sourced message came from.
    pub fn origin(self) -> Option<&'a Origin> {
        match self {
            Offered::Delivery(d) => d.origin.as_ref(),
            Offered::Message(_) => None,
        }
    }

    /// Delivery count, 1 without metadata.
    pub fn delivered(self) -> u32 {
        self.meta().map_or(1, |m| m.delivered)
    }

    /// Stream sequence, 0 without metadata.
    pub fn stream_seq(self) -> u64 {
        self.meta().map_or(0, |m| m.stream_seq)
    }

    /// The last value of a message header, case-insensitively.
    pub fn header(self, name: &str) -> Option<&'a str> {
        self.message().header(name)
    }
}

impl<'a> From<&'a Delivery> for Offered<'a> {
    fn from(d: &'a Delivery) -> Offered<'a> {
        Offered::Delivery(d)
    }
}

impl<'a> From<&'a Message> for Offered<'a> {
    fn from(m: &'a Message) -> Offered<'a> {
        Offered::Message(m)
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
impl Delivery {
    /// For the app's wire tests: message `seq` of stream ORDERS (consumer c's 7th,
    /// its first delivery), published 2023-11-14T22:13:20Z on `3.orders.eu` and
    /// handed to the app as `orders.eu` of partition 3, with `headers` and
    /// `payload`; no origin.
    pub(crate) fn orders_eu(seq: u64, headers: &[(&str, &str)], payload: &[u8]) -> Delivery {
        Delivery {
            message: Message {
                subject: "3.orders.eu".into(),
                headers: headers
                    .iter()
                    .map(|(n, v)| (n.to_string(), v.to_string()))
                    .collect(),
                payload: Bytes::copy_from_slice(payload),
            },
            meta: Ok(Meta {
                stream: "ORDERS".into(),
                consumer: "c".into(),
                stream_seq: seq,
                consumer_seq: 7,
                delivered: 1,
                pending: 0,
                published: OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap(),
            }),
            partition: Some(3),
            app_subject: "orders.eu".into(),
            origin: None,
            flaw: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_is_read_as_nats_server_reads_it() {
        let s = |n| Some(Ttl::After(std::time::Duration::from_secs(n)));
        let cases = [
            ("never", Some(Ttl::Never)),
            ("NEVER", Some(Ttl::Never)),
            ("5", s(5)),
            ("+3s", s(3)),
            ("9223372036854775807", s(9_223_372_036_854_775_807)),
            // Units, and fractions of them; what is under a second is cut off.
            ("90s", s(90)),
            ("1h30m", s(5400)),
            ("1.5m", s(90)),
            (".5m", s(30)),
            ("1.s", s(1)),
            ("1500ms", s(1)),
            ("2999ms", s(2)),
            ("1s500ms", s(1)),
            // Microseconds, in each of their spellings.
            ("1000000us", s(1)),
            ("1000000\u{b5}s", s(1)),
            ("1000000\u{3bc}s", s(1)),
        ];
        for (value, want) in cases {
            assert_eq!(Ttl::parse(value), want, "{value:?}");
        }
        // No TTL: none under a second, none negative, nothing malformed, nothing past
        // the nanoseconds an i64 holds.
        let too_large = ["99999999999999999999h", "9223372036854775808"];
        for value in [
            "0", "0s", "999ms", "-5s", "-5", "", " 5", "5 ", "5x", "s", ".s", "forever",
        ]
        .into_iter()
        .chain(too_large)
        {
            assert_eq!(Ttl::parse(value), None, "{value:?}");
        }
    }

    #[test]
    fn a_delivery_expires_its_ttl_after_its_publish_time() {
        let published = OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap();
        let d = |ttl: Option<&str>| Delivery {
            message: Message {
                subject: "a".into(),
                headers: ttl
                    .map(|t| vec![("nats-ttl".to_string(), t.to_string())])
                    .unwrap_or_default(),
                payload: Bytes::new(),
            },
            meta: Ok(Meta {
                stream: "S".into(),
                consumer: "c".into(),
                stream_seq: 1,
                consumer_seq: 1,
                delivered: 1,
                pending: 0,
                published,
            }),
            partition: None,
            app_subject: "a".into(),
            origin: None,
            flaw: None,
        };
        let at = std::time::SystemTime::from(published);
        assert_eq!(
            d(Some("30s")).expires_at(),
            Some(at + std::time::Duration::from_secs(30))
        );
        assert_eq!(d(Some("never")).expires_at(), None);
        assert_eq!(d(Some("bogus")).expires_at(), None);
        assert_eq!(d(None).expires_at(), None);
    }

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
    fn a_delivery_is_invalid_for_one_reason_in_order() {
        let meta = Meta::from_ack_subject("$JS.ACK.S.c.1.42.7.1700000000000000000.5");
        let d = |meta: Result<Meta, String>, flaw: Option<Flaw>| Delivery {
            message: Message {
                subject: "s".into(),
                headers: Vec::new(),
                payload: Bytes::new(),
            },
            meta,
            partition: None,
            app_subject: "s".into(),
            origin: None,
            flaw,
        };
        let no_partition = || Some(Flaw::NoPartition("p".into()));
        let malformed = || Some(Flaw::MalformedHeaders("h".into()));
        let cases = [
            (d(meta.clone(), None), None),
            (
                d(Err("m".into()), None),
                Some(Invalid::Metadata("m".into())),
            ),
            (
                d(Err("m".into()), no_partition()),
                Some(Invalid::NoPartition("p".into())),
            ),
            (
                d(Err("m".into()), malformed()),
                Some(Invalid::Metadata("m".into())),
            ),
            (
                d(meta.clone(), malformed()),
                Some(Invalid::MalformedHeaders("h".into())),
            ),
            (
                d(meta, no_partition()),
                Some(Invalid::NoPartition("p".into())),
            ),
        ];
        for (d, want) in cases {
            assert_eq!(d.is_invalid(), want.is_some(), "{d:?}");
            assert_eq!(d.invalid(), want, "{d:?}");
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
