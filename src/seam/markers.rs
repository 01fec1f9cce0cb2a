//! The idempotency markers' side of the seam: where the dispatcher asks whether a
//! delivery was processed before, and records that it was, before its ack
//! ([`Markers`]); and what a marker's key is ([`marker_key`], pure). `crate::nats`
//! implements the store over a KV bucket; the dispatcher's tests fake it, so that
//! "the marker before the ack" is pinned in virtual time.

use std::future::Future;

use base64::Engine as _;
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

/// Why a marker could not be read or written.
pub trait MarkerFailure: std::error::Error + Send + Sync + 'static {}

/// Where the markers live, each awaiting the server.
pub trait Markers: Send + Sync + 'static {
    /// Why a marker could not be read or written.
    type Error: MarkerFailure;

    /// Whether a marker with this key exists (the message was processed).
    fn marked(&self, key: &str) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// Writes a marker for each key, without a round trip each: every write is sent,
    /// then every acknowledgement awaited. `Ok` only when all were stored; the
    /// error is the first failure (the others may have been stored).
    fn mark(&self, keys: &[String]) -> impl Future<Output = Result<(), Self::Error>> + Send;
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
