//! Batch delivery on the wire, as pure functions: the JSON document of a request that
//! carries many messages, and the app's per-message answer read back.
//!
//! ```json
//! {"messages": [{"id": "ORDERS:42", "stream": "ORDERS", "sequence": 42,
//!   "subject": "orders.eu.1", "delivered": 1, "published": "2026-11-30T19:00:00.123Z",
//!   "partition": 3, "msg_id": "a1", "origin_stream": "ORDERS", "origin_sequence": 40,
//!   "headers": {"Content-Type": ["application/json"]}, "data": "{\"total\": 10}"}]}
//! ```
//!
//! The answer: no body, or a JSON object without `results`: every message is acked;
//! `{"results": [{"id": "ORDERS:42", "action": "retry", "retry_after_ms": 5000}]}`: the
//! listed messages get their action, the others are acked. Anything else does not
//! parse, and the whole batch is retried.

use std::time::Duration;

use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use time::format_description::well_known::Rfc3339;

use crate::delivery::Delivery;
use crate::http::headers::Pass;
use crate::outputs::{self, Author, Output, Refusal};
use crate::policy::AppAction;

/// The id of a message in a batch: `<stream>:<sequence>`.
pub fn id(d: &Delivery) -> String {
    match &d.meta {
        Ok(m) => format!("{}:{}", m.stream, m.stream_seq),
        Err(_) => format!(":{}", d.stream_seq()),
    }
}

#[derive(Serialize)]
struct Item<'a> {
    id: String,
    #[serde(skip_serializing_if = "str::is_empty")]
    stream: &'a str,
    sequence: u64,
    subject: &'a str,
    delivered: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    published: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    partition: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    msg_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    origin_stream: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    origin_sequence: Option<u64>,
    headers: Map<String, Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data_base64: Option<String>,
}

/// The request body for `items` (each delivery with the attempt it is on), and how
/// many message headers were left out as invalid HTTP.
pub fn body(items: &[(&Delivery, u32)], pass: &Pass) -> (Vec<u8>, usize) {
    let mut skipped = 0;
    let messages: Vec<Item<'_>> = items
        .iter()
        .map(|(d, attempt)| {
            let mut headers = Map::new();
            let mut add = |name: &str, value: &str| {
                // Only arrays are inserted.
                if let Value::Array(values) = headers
                    .entry(name.to_string())
                    .or_insert_with(|| Value::Array(Vec::new()))
                {
                    values.push(Value::from(value));
                }
            };
            if let Some(ct) = d.header("Content-Type") {
                add("Content-Type", ct);
            }
            skipped += crate::http::headers::passed(d, pass, &mut add);
            let meta = d.meta.as_ref().ok();
            let (data, data_base64) = match std::str::from_utf8(&d.payload) {
                Ok(text) => (Some(text), None),
                Err(_) => (
                    None,
                    Some(base64::engine::general_purpose::STANDARD.encode(&d.payload)),
                ),
            };
            Item {
                id: id(d),
                stream: meta.map_or("", |m| m.stream.as_str()),
                sequence: d.stream_seq(),
                subject: &d.app_subject,
                delivered: (*attempt).max(d.delivered()),
                published: meta.and_then(|m| {
                    m.published
                        .to_offset(time::UtcOffset::UTC)
                        .format(&Rfc3339)
                        .ok()
                }),
                partition: d.partition,
                msg_id: d.header("Nats-Msg-Id"),
                origin_stream: d.origin.as_ref().map(|o| o.stream.as_str()),
                origin_sequence: d.origin.as_ref().map(|o| o.sequence),
                headers,
                data,
                data_base64,
            }
        })
        .collect();
    #[derive(Serialize)]
    struct Body<'a> {
        messages: Vec<Item<'a>>,
    }
    // Serialising strings, numbers and maps of strings cannot fail.
    let bytes = serde_json::to_vec(&Body { messages }).unwrap_or_default();
    (bytes, skipped)
}

/// What the app said about one message of the batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemResult {
    /// The message's id (`<stream>:<sequence>`).
    pub id: String,
    /// What to do with it.
    pub action: AppAction,
    /// When a retry should come, if the app said.
    pub retry_after: Option<Duration>,
    /// What it publishes (when acked), or why that cannot be.
    pub outputs: Option<Result<Vec<Output>, Refusal>>,
}

/// The app's answer to a batch, when it answered 2xx.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// No per-message results: every message is acked.
    AllAcked,
    /// Per-message results; the messages not listed are acked.
    Results(Vec<ItemResult>),
    /// The body does not parse: the whole batch is retried.
    Unparsable,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawItem {
    id: String,
    action: String,
    #[serde(default)]
    retry_after_ms: Option<u64>,
    #[serde(default)]
    publish: Option<Value>,
}

/// Reads a 2xx answer's body.
pub fn answer(body: &[u8]) -> Answer {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Answer::AllAcked;
    }
    let Ok(Value::Object(mut object)) = serde_json::from_slice::<Value>(body) else {
        return Answer::Unparsable;
    };
    let Some(results) = object.remove("results") else {
        return Answer::AllAcked;
    };
    let Ok(raw) = serde_json::from_value::<Vec<RawItem>>(results) else {
        return Answer::Unparsable;
    };
    let mut out = Vec::with_capacity(raw.len());
    for r in raw {
        let Some(action) = AppAction::parse(&r.action) else {
            return Answer::Unparsable;
        };
        out.push(ItemResult {
            id: r.id,
            action,
            retry_after: r.retry_after_ms.map(Duration::from_millis),
            outputs: r
                .publish
                .map(|list| outputs::parse_list(list, Author::Answer)),
        });
    }
    Answer::Results(out)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use time::OffsetDateTime;

    use super::*;
    use crate::delivery::{Meta, Origin};

    fn delivery(seq: u64, payload: &[u8], headers: &[(&str, &str)]) -> Delivery {
        Delivery {
            subject: "3.orders.eu".into(),
            meta: Ok(Meta {
                stream: "ORDERS".into(),
                consumer: "c".into(),
                stream_seq: seq,
                consumer_seq: seq,
                delivered: 1,
                pending: 0,
                published: OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap(),
            }),
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            payload: Bytes::copy_from_slice(payload),
            partition: Some(3),
            app_subject: "orders.eu".into(),
            origin: Some(Origin {
                stream: "SRC".into(),
                sequence: 40,
            }),
            invalid: None,
        }
    }

    #[test]
    fn the_request_document() {
        let a = delivery(
            42,
            br#"{"total": 10}"#,
            &[
                ("Content-Type", "application/json"),
                ("Nats-Msg-Id", "a1"),
                ("X-Trace", "7"),
                ("X-Trace", "8"),
                ("Authorization", "no"),
                ("Bad Name", "x"),
            ],
        );
        let b = delivery(43, &[0xff, 0x00], &[]);
        let (bytes, skipped) = body(&[(&a, 1), (&b, 3)], &Pass::default());
        assert_eq!(skipped, 1, "the invalid header name");
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        let first = &v["messages"][0];
        assert_eq!(first["id"], "ORDERS:42");
        assert_eq!(first["stream"], "ORDERS");
        assert_eq!(first["sequence"], 42);
        assert_eq!(first["subject"], "orders.eu");
        assert_eq!(first["delivered"], 1);
        assert_eq!(first["published"], "2023-11-14T22:13:20Z");
        assert_eq!(first["partition"], 3);
        assert_eq!(first["msg_id"], "a1");
        assert_eq!(first["origin_stream"], "SRC");
        assert_eq!(first["origin_sequence"], 40);
        assert_eq!(
            first["headers"],
            serde_json::json!({"Content-Type": ["application/json"], "X-Trace": ["7", "8"]}),
            "the passed-through headers: never a forged Authorization"
        );
        assert_eq!(first["data"], r#"{"total": 10}"#);
        assert!(first.get("data_base64").is_none());
        let second = &v["messages"][1];
        assert_eq!(second["delivered"], 3, "in-place retries count");
        assert_eq!(second["data_base64"], "/wA=");
        assert!(second.get("data").is_none());
        assert!(second.get("msg_id").is_none());
    }

    #[test]
    fn answers_table() {
        let retry = |id: &str, ms: Option<u64>| ItemResult {
            id: id.into(),
            action: AppAction::Retry,
            retry_after: ms.map(Duration::from_millis),
            outputs: None,
        };
        let cases: Vec<(&str, Answer)> = vec![
            ("", Answer::AllAcked),
            ("  \n", Answer::AllAcked),
            ("{}", Answer::AllAcked),
            (r#"{"ok": true}"#, Answer::AllAcked),
            (r#"{"results": []}"#, Answer::Results(vec![])),
            (
                r#"{"results": [{"id": "S:1", "action": "retry", "retry_after_ms": 5000}, {"id": "S:2", "action": "RETRY"}]}"#,
                Answer::Results(vec![retry("S:1", Some(5000)), retry("S:2", None)]),
            ),
            (
                r#"{"results": [{"id": "S:1", "action": "dlq"}]}"#,
                Answer::Results(vec![ItemResult {
                    id: "S:1".into(),
                    action: AppAction::Dlq,
                    retry_after: None,
                    outputs: None,
                }]),
            ),
            (
                r#"{"results": [{"id": "S:1", "action": "ack", "publish": [{"subject": "o.1", "data": "x"}]}]}"#,
                Answer::Results(vec![ItemResult {
                    id: "S:1".into(),
                    action: AppAction::Ack,
                    retry_after: None,
                    outputs: Some(Ok(vec![Output {
                        subject: "o.1".into(),
                        headers: vec![],
                        payload: "x".into(),
                    }])),
                }]),
            ),
            (
                r#"{"results": [{"id": "S:1", "action": "ack", "publish": 7}]}"#,
                Answer::Results(vec![ItemResult {
                    id: "S:1".into(),
                    action: AppAction::Ack,
                    retry_after: None,
                    outputs: Some(Err(Refusal::Malformed("\"publish\" is not a list".into()))),
                }]),
            ),
            ("ok", Answer::Unparsable),
            ("[1]", Answer::Unparsable),
            (r#"{"results": {"id": "S:1"}}"#, Answer::Unparsable),
            (
                r#"{"results": [{"id": "S:1", "action": "later"}]}"#,
                Answer::Unparsable,
            ),
            (r#"{"results": [{"id": "S:1"}]}"#, Answer::Unparsable),
            (
                r#"{"results": [{"id": "S:1", "action": "ack", "extra": 1}]}"#,
                Answer::Unparsable,
            ),
        ];
        for (text, want) in cases {
            assert_eq!(answer(text.as_bytes()), want, "{text}");
        }
    }
}
