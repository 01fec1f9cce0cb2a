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

use std::borrow::Cow;
use std::time::Duration;

use base64::Engine;
use std::fmt;

use serde::Serialize;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use time::format_description::well_known::Rfc3339;

use crate::app::headers::{Pass, Passed, TraceHeaders};
use crate::message::Offered;
use crate::outputs::{self, Author, Output, Refusal};
use crate::policy::AppAction;

/// The id of a message in a batch: `<stream>:<sequence>` (`:0` without metadata).
pub fn id(d: Offered<'_>) -> String {
    match d.meta() {
        Some(m) => format!("{}:{}", m.stream, m.stream_seq),
        None => format!(":{}", d.stream_seq()),
    }
}

#[derive(Serialize)]
struct BatchMessage<'a> {
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

/// One message of a batch request: the message, the attempt it is on, its trace
/// context, and the message its idempotency key's marker records when that is
/// another one.
pub type BatchOffer<'a> = (Offered<'a>, u32, Option<TraceHeaders<'a>>, Option<&'a str>);

/// The request body for `items`, and what of their headers was left out (invalid
/// HTTP; trace headers over their limits).
pub fn body(items: &[BatchOffer<'_>], pass: &Pass) -> (Vec<u8>, Passed) {
    let mut skipped = Passed::default();
    let messages: Vec<BatchMessage<'_>> = items
        .iter()
        .map(|&(d, attempt, trace, conflict)| {
            let mut headers = Map::new();
            let mut add = |name: &str, value: Cow<'_, str>| {
                // Only arrays are inserted.
                if let Value::Array(values) = headers
                    .entry(name.to_string())
                    .or_insert_with(|| Value::Array(Vec::new()))
                {
                    values.push(Value::String(value.into_owned()));
                }
            };
            if let Some(ct) = d.header("Content-Type") {
                add("Content-Type", Cow::Borrowed(ct));
            }
            let p = crate::app::headers::passed(d, pass, trace, &mut add);
            if let Some(marked) = conflict {
                add("Jetrelay-Idempotency-Conflict", Cow::Borrowed(marked));
            }
            skipped.skipped_invalid += p.skipped_invalid;
            skipped.trace_dropped.merge(p.trace_dropped);
            let meta = d.meta();
            let payload = &d.message().payload;
            let (data, data_base64) = match std::str::from_utf8(payload) {
                Ok(text) => (Some(text), None),
                Err(_) => (
                    None,
                    Some(base64::engine::general_purpose::STANDARD.encode(payload)),
                ),
            };
            BatchMessage {
                id: id(d),
                stream: meta.map_or("", |m| m.stream.as_str()),
                sequence: d.stream_seq(),
                subject: d.subject(),
                delivered: attempt.max(d.delivered()),
                published: meta.and_then(|m| {
                    m.published
                        .to_offset(time::UtcOffset::UTC)
                        .format(&Rfc3339)
                        .ok()
                }),
                partition: d.partition(),
                msg_id: d.header("Nats-Msg-Id"),
                origin_stream: d.origin().map(|o| o.stream.as_str()),
                origin_sequence: d.origin().map(|o| o.sequence),
                headers,
                data,
                data_base64,
            }
        })
        .collect();
    #[derive(Serialize)]
    struct Body<'a> {
        messages: Vec<BatchMessage<'a>>,
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
    /// The body does not parse (or is not a batch answer): the whole batch is
    /// retried. Why, for the log.
    Unparsable(String),
}

/// How much a batch answer may say: at most `results` results (the batch's size),
/// and at most `outputs` messages to publish per result (`publish.max_messages`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnswerBounds {
    /// Results at most.
    pub results: usize,
    /// Outputs per result at most.
    pub outputs: usize,
}

/// Reads a 2xx answer's body, straight into results (no JSON tree: an answer of N
/// bytes costs about N more), reading no more than `bounds` allow.
pub fn answer(body: &[u8], bounds: AnswerBounds) -> Answer {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Answer::AllAcked;
    }
    match outputs::document::read(body, Top(bounds)) {
        Ok(answer) => answer,
        Err(e) => Answer::Unparsable(format!("not a batch answer: {e}")),
    }
}

/// The answer's object: `results`, any other key skipped, and the single-message
/// form `{"publish": [...]}` refused (its outputs would belong to no message).
struct Top(AnswerBounds);

impl<'de> DeserializeSeed<'de> for Top {
    type Value = Answer;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Answer, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Top {
    type Value = Answer;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Answer, A::Error> {
        let mut results = None;
        let mut top_outputs = false;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "results" if results.is_none() => {
                    results = Some(map.next_value_seed(Results(self.0))?);
                }
                "results" => return Err(de::Error::custom("\"results\" twice")),
                "publish" => {
                    map.next_value::<IgnoredAny>()?;
                    top_outputs = true;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        if top_outputs {
            return Ok(Answer::Unparsable(
                "the answer to a batch has a \"publish\" list of its own: in batch delivery each result carries its message's outputs (results[].publish)".into(),
            ));
        }
        Ok(results.map_or(Answer::AllAcked, Answer::Results))
    }
}

/// The `results` list, at most `bounds.results` long.
struct Results(AnswerBounds);

impl<'de> DeserializeSeed<'de> for Results {
    type Value = Vec<ItemResult>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Results {
    type Value = Vec<ItemResult>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of results")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        while let Some(item) = seq.next_element_seed(Result_(self.0))? {
            if out.len() == self.0.results {
                return Err(de::Error::custom(format!(
                    "more results than the batch's {} messages",
                    self.0.results
                )));
            }
            out.push(item);
        }
        Ok(out)
    }
}

/// One result: `id`, `action`, `retry_after_ms`, `publish`; nothing else.
struct Result_(AnswerBounds);

impl<'de> DeserializeSeed<'de> for Result_ {
    type Value = ItemResult;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<ItemResult, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Result_ {
    type Value = ItemResult;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a result")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ItemResult, A::Error> {
        let (mut id, mut action, mut retry_after, mut outputs) = (None, None, None, None);
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "id" => id = Some(map.next_value::<String>()?),
                "action" => {
                    let text = map.next_value::<String>()?;
                    let parsed = AppAction::parse(&text)
                        .ok_or_else(|| de::Error::custom(format!("unknown action {text:?}")))?;
                    action = Some(parsed);
                }
                "retry_after_ms" => {
                    retry_after = map.next_value::<Option<u64>>()?.map(Duration::from_millis);
                }
                "publish" => {
                    outputs = Some(map.next_value_seed(outputs::document::Seed(
                        outputs::document::List {
                            author: Author::Answer,
                            max: self.0.outputs,
                        },
                    ))?);
                }
                other => return Err(de::Error::custom(format!("unknown field {other:?}"))),
            }
        }
        Ok(ItemResult {
            id: id.ok_or_else(|| de::Error::missing_field("id"))?,
            action: action.ok_or_else(|| de::Error::missing_field("action"))?,
            retry_after,
            outputs,
        })
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::message::{Delivery, Origin};

    fn delivery(seq: u64, payload: &[u8], headers: &[(&str, &str)]) -> Delivery {
        Delivery {
            origin: Some(Origin {
                stream: "SRC".into(),
                sequence: 40,
            }),
            ..Delivery::orders_eu(seq, headers, payload)
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
        let (bytes, skipped) = body(
            &[
                ((&a).into(), 1, None, None),
                ((&b).into(), 3, None, Some("ORDERS:7")),
            ],
            &Pass::default(),
        );
        assert_eq!(skipped.skipped_invalid, 1, "the invalid header name");
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
        assert_eq!(
            second["headers"],
            serde_json::json!({"Jetrelay-Idempotency-Conflict": ["ORDERS:7"]}),
            "the message its key's marker records"
        );
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
        ];
        let bounds = AnswerBounds {
            results: 3,
            outputs: 2,
        };
        for (text, want) in cases {
            assert_eq!(answer(text.as_bytes(), bounds), want, "{text}");
        }
        // (answer, why it does not parse)
        let unparsable = [
            ("ok", "not a batch answer"),
            ("[1]", "expected a JSON object"),
            (
                r#"{"results": {"id": "S:1"}}"#,
                "expected a list of results",
            ),
            (
                r#"{"results": [{"id": "S:1", "action": "later"}]}"#,
                "unknown action \"later\"",
            ),
            (r#"{"results": [{"id": "S:1"}]}"#, "missing field `action`"),
            (
                r#"{"results": [{"id": "S:1", "action": "ack", "extra": 1}]}"#,
                "unknown field \"extra\"",
            ),
            // Stops after the batch's size.
            (
                r#"{"results": [{"id": "1", "action": "ack"}, {"id": "2", "action": "ack"}, {"id": "3", "action": "ack"}, {"id": "4", "action": "ack"}]}"#,
                "more results than the batch's 3 messages",
            ),
            // The single-message form: its outputs would belong to no message.
            (
                r#"{"publish": [{"subject": "o.1", "data": "x"}]}"#,
                "each result carries its message's outputs",
            ),
        ];
        for (text, why) in unparsable {
            match answer(text.as_bytes(), bounds) {
                Answer::Unparsable(got) => assert!(got.contains(why), "{text}: {got}"),
                other => panic!("{text}: {other:?}"),
            }
        }
        // Outputs over publish.max_messages are that result's refusal, not the
        // answer's.
        let three = r#"{"results": [{"id": "S:1", "action": "ack", "publish": [{"subject": "a"}, {"subject": "b"}, {"subject": "c"}]}, {"id": "S:2", "action": "retry"}]}"#;
        let Answer::Results(r) = answer(three.as_bytes(), bounds) else {
            panic!("{three}");
        };
        assert_eq!(r[0].outputs, Some(Err(Refusal::TooMany { max: 2 })));
        assert_eq!(r[1].action, AppAction::Retry);
    }
}
