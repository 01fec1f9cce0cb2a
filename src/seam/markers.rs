//! The idempotency markers' side of the seam: where the dispatcher asks whether a
//! delivery was processed before, and records that it was, before its ack
//! ([`Markers`]); what a marker's key is ([`marker_key`]), what it records
//! ([`Marked`]: the message's stream, sequence and digest) and what a marker found
//! says of a delivery ([`Seen`]), all pure. `crate::nats` implements the store over a
//! KV bucket; the dispatcher's tests fake it, so that "the marker before the ack" is
//! pinned in virtual time.

use std::future::Future;

use base64::Engine as _;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::message::Delivery;

/// `delivery.idempotency_key`: what identifies a message across deliveries.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum IdempotencyKey {
    /// The publisher's `Nats-Msg-Id`, else the stream and sequence.
    #[default]
    MsgId,
    /// The stream and sequence, always.
    Sequence,
}

/// A `Nats-Msg-Id` longer than this is not a key: the stream and sequence are.
pub const MAX_MSG_ID: usize = 256;

/// The marker key of a delivery: `<scope>.<id>`, both base64url (a KV key takes only
/// `[-/_=.A-Za-z0-9]`; a message id may hold anything), where the scope is the
/// source's consumer (its durable, or its group: a partition that moves to another
/// member keeps its markers) and the id is the `Nats-Msg-Id` (with
/// [`IdempotencyKey::MsgId`], when it is there, not empty and at most
/// [`MAX_MSG_ID`] bytes) or `<stream>:<sequence>`. `None` without metadata (an
/// invalid message is never offered).
pub fn marker_key(d: &Delivery, key: IdempotencyKey, scope: &str) -> Option<String> {
    let m = d.meta.as_ref().ok()?;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let msg_id = d
        .header("Nats-Msg-Id")
        .filter(|id| key == IdempotencyKey::MsgId && !id.is_empty() && id.len() <= MAX_MSG_ID);
    let id = match msg_id {
        Some(id) => format!("i{}", b64.encode(id)),
        None => format!("s{}", b64.encode(format!("{}:{}", m.stream, m.stream_seq))),
    };
    Some(format!("{}.{id}", b64.encode(scope)))
}

/// What a marker records: the message it marks, so that a delivery of another
/// message under the same key (a `Nats-Msg-Id` re-used after the duplicate window, a
/// value someone else wrote) is told from a redelivery of this one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marked {
    /// The stream it was delivered from.
    pub stream: String,
    /// Its stream sequence.
    pub sequence: u64,
    /// SHA-256 of its subject (as published: without a group's partition token) and
    /// payload, see [`digest`].
    pub digest: [u8; 32],
}

/// The first word of every marker value this version writes.
const V1: &str = "v1";

/// SHA-256 of `subject` and `payload`, framed so that no two pairs share an input:
/// the subject's length (8 bytes, little-endian), the subject, the payload. The
/// bucket is trusted (`docs/security.md`), so the digest guards against accidents
/// (an id re-used for another message), not against forgery; SHA-256 because it is
/// already in the build (`ring`, through rustls) and a collision is out of reach.
pub fn digest(subject: &str, payload: &[u8]) -> [u8; 32] {
    let len = (subject.len() as u64).to_le_bytes();
    crate::digest::sha256(&[&len, subject.as_bytes(), payload])
}

impl Marked {
    /// What `d`'s marker records; `None` without metadata (an invalid message is
    /// never offered, so never marked).
    pub fn of(d: &Delivery) -> Option<Marked> {
        let m = d.meta.as_ref().ok()?;
        Some(Marked {
            stream: m.stream.clone(),
            sequence: m.stream_seq,
            digest: digest(&d.app_subject, &d.message.payload),
        })
    }

    /// The marker's value: `v1 <stream> <sequence> <digest, 64 hex digits>` (a
    /// stream name holds no space).
    pub fn value(&self) -> String {
        let digest = crate::digest::hex(&self.digest);
        format!("{V1} {} {} {digest}", self.stream, self.sequence)
    }

    /// Reads a value [`Marked::value`] wrote; `None` for anything else (another
    /// version's, someone else's, any bytes).
    pub fn parse(value: &[u8]) -> Option<Marked> {
        let text = std::str::from_utf8(value).ok()?;
        let mut words = text.split(' ');
        let (Some(V1), Some(stream), Some(seq), Some(digest), None) = (
            words.next(),
            words.next(),
            words.next(),
            words.next(),
            words.next(),
        ) else {
            return None;
        };
        // A stream's name as nats-server takes it (visible ASCII here, so that it
        // can be a header's value), a decimal sequence, 64 hex digits.
        let name = |b: u8| b.is_ascii_graphic() && !b".*>/\\".contains(&b);
        if stream.is_empty()
            || !stream.bytes().all(name)
            || !seq.bytes().all(|b| b.is_ascii_digit())
        {
            return None;
        }
        Some(Marked {
            stream: stream.to_string(),
            sequence: seq.parse().ok()?,
            digest: crate::digest::unhex(digest)?,
        })
    }
}

/// What a delivery's key found in the bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// No marker: the message goes to the app.
    Fresh,
    /// A marker of this message (the same digest): processed before, acked without
    /// a request.
    Processed,
    /// A marker of another message: the message goes to the app with
    /// `Jetrelay-Idempotency-Conflict: <this>`, `<stream>:<sequence>` of the marked
    /// one, or `unknown` for a value jetrelay did not write.
    Conflict(String),
}

impl Seen {
    /// The marked message of a [`Seen::Conflict`].
    pub fn conflict(&self) -> Option<&str> {
        match self {
            Seen::Conflict(marked) => Some(marked),
            _ => None,
        }
    }
}

/// What `found` (the value under the delivery's key, `None`: no marker) says of the
/// delivery `d` (what its own marker would record).
///
/// Only a marker that records this message suppresses it. Anything that is not a v1
/// value naming its digest is a conflict, never a reason to skip the message: the
/// empty value versions before the digest wrote too (it proves nothing of what it
/// marks, and anyone who may write the bucket can write it), so that during an
/// upgrade a message such a marker covers is sent again, flagged `unknown`, for at
/// most `idempotency_ttl_ms`.
pub fn judge(found: Option<&[u8]>, d: &Marked) -> Seen {
    match found {
        None => Seen::Fresh,
        Some(value) => match Marked::parse(value) {
            Some(m) if m.digest == d.digest => Seen::Processed,
            Some(m) => Seen::Conflict(format!("{}:{}", m.stream, m.sequence)),
            None => Seen::Conflict("unknown".into()),
        },
    }
}

/// Why a marker could not be read or written.
pub trait MarkerFailure: std::error::Error + Send + Sync + 'static {}

/// Where the markers live, each awaiting the server.
pub trait Markers: Send + Sync + 'static {
    /// Why a marker could not be read or written.
    type Error: MarkerFailure;

    /// The value of the marker with this key (`None`: no marker).
    fn marked(&self, key: &str) -> impl Future<Output = Result<Option<Bytes>, Self::Error>> + Send;

    /// The values of the markers with these keys, one per key in order, read
    /// together (a store that can reads them in one request, or a few); the error is
    /// the first failure. By default one [`Markers::marked`] each, all at once.
    fn marked_many(
        &self,
        keys: &[String],
    ) -> impl Future<Output = Result<Vec<Option<Bytes>>, Self::Error>> + Send {
        async move {
            futures::future::join_all(keys.iter().map(|k| self.marked(k)))
                .await
                .into_iter()
                .collect()
        }
    }

    /// Writes each marker (its key and [`Marked::value`]), without a round trip each:
    /// every write is sent, then every acknowledgement awaited. `Ok` only when all
    /// were stored; the error is the first failure (the others may have been stored).
    fn mark(
        &self,
        markers: &[(String, String)],
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Message, Meta};

    fn delivery(headers: &[(&str, &str)]) -> Delivery {
        Delivery {
            message: Message {
                subject: "a".into(),
                headers: headers
                    .iter()
                    .map(|(n, v)| (n.to_string(), v.to_string()))
                    .collect(),
                payload: bytes::Bytes::new(),
            },
            meta: Ok(Meta {
                stream: "ORDERS".into(),
                consumer: "c".into(),
                stream_seq: 42,
                consumer_seq: 1,
                delivered: 1,
                pending: 0,
                published: time::OffsetDateTime::UNIX_EPOCH,
            }),
            partition: None,
            app_subject: "a".into(),
            origin: None,
            flaw: None,
        }
    }

    fn decoded(key: &str) -> (String, String) {
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let (scope, id) = key.split_once('.').unwrap();
        let text = |s: &str| String::from_utf8(b64.decode(s).unwrap()).unwrap();
        (text(scope), format!("{}{}", &id[..1], text(&id[1..])))
    }

    #[test]
    fn marker_keys_table() {
        let long = "x".repeat(MAX_MSG_ID + 1);
        type Case<'a> = (Vec<(&'a str, &'a str)>, IdempotencyKey, &'a str);
        let cases: Vec<Case<'_>> = vec![
            (vec![], IdempotencyKey::MsgId, "sORDERS:42"),
            (
                vec![("Nats-Msg-Id", "order 7/ä")],
                IdempotencyKey::MsgId,
                "iorder 7/ä",
            ),
            (vec![("nats-msg-id", "o-7")], IdempotencyKey::MsgId, "io-7"),
            (
                vec![("Nats-Msg-Id", "o-7")],
                IdempotencyKey::Sequence,
                "sORDERS:42",
            ),
            (
                vec![("Nats-Msg-Id", "")],
                IdempotencyKey::MsgId,
                "sORDERS:42",
            ),
            (
                vec![("Nats-Msg-Id", long.as_str())],
                IdempotencyKey::MsgId,
                "sORDERS:42",
            ),
        ];
        for (headers, mode, want) in cases {
            let key = marker_key(&delivery(&headers), mode, "orders.v1").unwrap();
            assert!(
                key.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)),
                "{key}"
            );
            assert_eq!(decoded(&key), ("orders.v1".to_string(), want.to_string()));
        }
        let mut bad = delivery(&[]);
        bad.meta = Err("no".into());
        assert_eq!(marker_key(&bad, IdempotencyKey::MsgId, "d"), None);
    }

    #[test]
    fn what_a_marker_says_of_a_delivery_table() {
        let own = Marked::of(&delivery(&[])).unwrap();
        let hex = |d: [u8; 32]| crate::digest::hex(&d);
        let other = hex([7; 32]);
        let conflict = |s: &str| Seen::Conflict(s.to_string());
        let unknown = conflict("unknown");
        let cases: Vec<(Option<Vec<u8>>, Seen)> = vec![
            (None, Seen::Fresh),
            // Written before markers recorded their message: it proves nothing.
            (Some(Vec::new()), unknown.clone()),
            (Some(own.value().into_bytes()), Seen::Processed),
            // The same message from elsewhere (a publisher re-sent it after the
            // duplicate window; another stream): the same digest.
            (
                Some(format!("v1 OTHER 3 {}", hex(own.digest)).into_bytes()),
                Seen::Processed,
            ),
            (
                Some(format!("v1 ORDERS 7 {other}").into_bytes()),
                conflict("ORDERS:7"),
            ),
            (
                Some(format!("v1 ORDERS 42 {other}").into_bytes()),
                conflict("ORDERS:42"),
            ),
            (Some(b"\xff\xfe".to_vec()), unknown.clone()),
            (Some(b" ".to_vec()), unknown.clone()),
            (Some(b"1".to_vec()), unknown.clone()),
            (
                Some(format!("v2 ORDERS 42 {}", hex(own.digest)).into_bytes()),
                unknown.clone(),
            ),
            (
                Some(format!("{}\n", own.value()).into_bytes()),
                unknown.clone(),
            ),
            (
                Some(format!("{} x", own.value()).into_bytes()),
                unknown.clone(),
            ),
            (
                Some(format!("v1 ORDERS -1 {other}").into_bytes()),
                unknown.clone(),
            ),
            (
                Some(format!("v1 ORDERS 99999999999999999999 {other}").into_bytes()),
                unknown.clone(),
            ),
            (
                Some(format!("v1 OR\x1bDERS 1 {other}").into_bytes()),
                unknown.clone(),
            ),
            (
                Some(format!("v1 A.B 1 {other}").into_bytes()),
                unknown.clone(),
            ),
            (
                Some(format!("v1 ORDERS 1 {}", &other[..63]).into_bytes()),
                unknown.clone(),
            ),
            (
                Some(format!("v1 ORDERS 1 {}g", &other[..63]).into_bytes()),
                unknown.clone(),
            ),
            (
                Some(format!("v1 ORDERS 1 {}é", &other[..62]).into_bytes()),
                unknown,
            ),
        ];
        for (found, want) in cases {
            assert_eq!(judge(found.as_deref(), &own), want, "{found:?}");
        }
        assert_eq!(
            own.value(),
            format!("v1 ORDERS 42 {}", hex(digest("a", b""))),
            "the value: version, stream, sequence, digest"
        );
    }

    #[test]
    fn the_digest_frames_the_subject() {
        assert_ne!(digest("ab", b"c"), digest("a", b"bc"));
        assert_ne!(digest("a", b""), digest("", b"a"));
        assert_eq!(digest("a", b"x"), digest("a", b"x"));
    }

    proptest::proptest! {
        #[test]
        fn any_marker_value_is_judged_without_a_panic_and_a_conflict_is_a_header_value(
            value in proptest::collection::vec(proptest::num::u8::ANY, 0..120),
            words in "v1 [ -~]{0,20} [0-9]{1,25} [0-9a-fA-F]{60,66}",
        ) {
            let own = Marked::of(&delivery(&[])).unwrap();
            for v in [value.as_slice(), words.as_bytes()] {
                if let Seen::Conflict(marked) = judge(Some(v), &own) {
                    proptest::prop_assert!(!marked.is_empty());
                    proptest::prop_assert!(marked.bytes().all(|b| b.is_ascii_graphic()), "{marked:?}");
                }
            }
        }

        #[test]
        fn a_value_reads_back_as_what_it_records(
            stream in "[A-Za-z0-9_-]{1,32}",
            sequence in proptest::num::u64::ANY,
            digest in proptest::array::uniform32(proptest::num::u8::ANY),
        ) {
            let m = Marked { stream, sequence, digest };
            proptest::prop_assert_eq!(Marked::parse(m.value().as_bytes()), Some(m));
        }
    }

    proptest::proptest! {
        #[test]
        fn a_key_is_a_valid_kv_key_and_ids_never_collide(a in ".{0,300}", b in ".{0,300}") {
            let k = |id: &str| marker_key(&delivery(&[("Nats-Msg-Id", id)]), IdempotencyKey::MsgId, "s").unwrap();
            let (ka, kb) = (k(&a), k(&b));
            proptest::prop_assert!(ka.bytes().all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(&c)));
            proptest::prop_assert!(ka.len() < 400);
            if a != b && !a.is_empty() && !b.is_empty() && a.len() <= MAX_MSG_ID && b.len() <= MAX_MSG_ID {
                proptest::prop_assert_ne!(ka, kb);
            }
        }
    }
}
