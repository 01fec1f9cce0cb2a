//! What the app publishes through jetrelay, as pure functions: the `{"publish": [...]}`
//! document (in an answer, or on the local publish endpoint), the rules it must meet
//! (`publish.allowed_subjects`, `max_messages`, `max_bytes`), and the deterministic
//! message ids that make an answer's outputs exactly-once.
//!
//! An answer's outputs carry `Nats-Msg-Id: jetrelay:<stream>:<sequence>:<i>`: a
//! redelivered input re-sends the same ids, and the target stream (within its
//! `duplicate_window`) stores them once. So an answer may not set `Nats-*` headers
//! itself; the local endpoint may set `Nats-Msg-Id` (its own deduplication), nothing
//! else of the server's.

use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use serde_json::Value;

use crate::subject;

/// One message to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// Where to.
    pub subject: String,
    /// Its headers, `Nats-Msg-Id` included when it has one.
    pub headers: Vec<(String, String)>,
    /// Its payload.
    pub payload: Bytes,
}

impl Output {
    /// The bytes it counts against `publish.max_bytes`: payload and headers.
    pub fn size(&self) -> u64 {
        let headers: usize = self.headers.iter().map(|(n, v)| n.len() + v.len()).sum();
        (self.payload.len() + headers) as u64
    }

    /// Its `Nats-Msg-Id`, if it has one.
    pub fn msg_id(&self) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(MSG_ID))
            .map(|(_, v)| v.as_str())
    }
}

/// The message id header.
pub const MSG_ID: &str = "Nats-Msg-Id";

/// The content type of an answer that publishes.
pub const CONTENT_TYPE: &str = "application/vnd.jetrelay.publish+json";

/// Why outputs are refused: a permanent failure of the input (or a 4xx on the
/// endpoint), never a publish.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The document does not parse or does not have the documented shape.
    #[error("the publish document is malformed: {0}")]
    Malformed(String),
    /// A subject is not in `publish.allowed_subjects` (or publishing is off).
    #[error("{0}")]
    NotAllowed(String),
    /// More messages than `publish.max_messages`.
    #[error("{count} messages to publish, publish.max_messages is {max}")]
    TooMany {
        /// How many.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// More bytes than `publish.max_bytes`.
    #[error("{bytes} bytes to publish, publish.max_bytes is {max}")]
    TooLarge {
        /// How many.
        bytes: u64,
        /// The limit.
        max: u64,
    },
}

impl Refusal {
    /// The `reason` label of `jetrelay_publish_failures_total`.
    pub fn label(&self) -> &'static str {
        match self {
            Refusal::Malformed(_) => "malformed",
            Refusal::NotAllowed(_) => "not_allowed",
            Refusal::TooMany { .. } | Refusal::TooLarge { .. } => "too_large",
        }
    }
}

/// Who wrote the document: it decides which `Nats-*` headers it may set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Author {
    /// The app's answer to a message: jetrelay sets the message ids.
    Answer,
    /// The local endpoint: the app may set `Nats-Msg-Id`.
    Endpoint,
}

/// Reads a `{"publish": [...]}` document.
///
/// # Errors
/// [`Refusal::Malformed`] naming what is wrong.
pub fn parse(body: &[u8], author: Author) -> Result<Vec<Output>, Refusal> {
    let doc: Value =
        serde_json::from_slice(body).map_err(|e| Refusal::Malformed(format!("not JSON: {e}")))?;
    let Value::Object(mut doc) = doc else {
        return Err(Refusal::Malformed("not a JSON object".into()));
    };
    let list = doc
        .remove("publish")
        .ok_or_else(|| Refusal::Malformed("no \"publish\" list".into()))?;
    if let Some(other) = doc.keys().next() {
        return Err(Refusal::Malformed(format!("unknown field {other:?}")));
    }
    parse_list(list, author)
}

/// Reads a `publish` list (of a document, or of a batch result item).
///
/// # Errors
/// [`Refusal::Malformed`] naming the item and what is wrong.
pub fn parse_list(list: Value, author: Author) -> Result<Vec<Output>, Refusal> {
    let Value::Array(items) = list else {
        return Err(Refusal::Malformed("\"publish\" is not a list".into()));
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            parse_item(item, author).map_err(|why| Refusal::Malformed(format!("item {i}: {why}")))
        })
        .collect()
}

fn parse_item(item: Value, author: Author) -> Result<Output, String> {
    let Value::Object(fields) = item else {
        return Err("not an object".into());
    };
    let (mut subject, mut headers, mut payload) = (None, Vec::new(), None);
    for (key, value) in fields {
        match (key.as_str(), value) {
            ("subject", Value::String(s)) => {
                subject::validate_publish_subject(&s).map_err(|e| format!("subject {s:?} {e}"))?;
                subject = Some(s);
            }
            ("headers", Value::Object(map)) => {
                for (name, value) in map {
                    let values = match value {
                        Value::String(v) => vec![v],
                        Value::Array(vs) => vs
                            .into_iter()
                            .map(|v| match v {
                                Value::String(v) => Ok(v),
                                _ => Err(format!("header {name:?}: values are strings")),
                            })
                            .collect::<Result<_, _>>()?,
                        _ => return Err(format!("header {name:?}: values are strings")),
                    };
                    check_header(&name, &values, author)?;
                    headers.extend(values.into_iter().map(|v| (name.clone(), v)));
                }
            }
            ("data", Value::String(s)) if payload.is_none() => payload = Some(Bytes::from(s)),
            ("data_base64", Value::String(s)) if payload.is_none() => {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(s.as_bytes())
                    .map_err(|e| format!("data_base64 is not base64: {e}"))?;
                payload = Some(Bytes::from(bytes));
            }
            ("data" | "data_base64", Value::String(_)) => {
                return Err("has both data and data_base64".into());
            }
            (k @ ("subject" | "headers" | "data" | "data_base64"), _) => {
                return Err(format!("{k} has the wrong type"));
            }
            (other, _) => return Err(format!("unknown field {other:?}")),
        }
    }
    Ok(Output {
        subject: subject.ok_or("has no subject")?,
        headers,
        payload: payload.unwrap_or_default(),
    })
}

/// A header an output may carry: a valid HTTP-like name, a one-line value, and no
/// server header but the endpoint's own `Nats-Msg-Id`.
fn check_header(name: &str, values: &[String], author: Author) -> Result<(), String> {
    let valid_name = !name.is_empty() && name.bytes().all(|b| b.is_ascii_graphic() && b != b':');
    if !valid_name {
        return Err(format!("header name {name:?} is not valid"));
    }
    if values.iter().any(|v| v.contains(['\r', '\n'])) {
        return Err(format!("header {name:?} has a line break"));
    }
    let server = name.len() >= 5 && name[..5].eq_ignore_ascii_case("nats-");
    let own_id = author == Author::Endpoint && name.eq_ignore_ascii_case(MSG_ID);
    if server && !own_id {
        return Err(format!(
            "header {name:?}: Nats-* headers are the server's{}",
            match author {
                Author::Answer => " (jetrelay sets the message ids of an answer's outputs)",
                Author::Endpoint => " (only Nats-Msg-Id may be set)",
            }
        ));
    }
    Ok(())
}

/// `publish.allowed_subjects`, `max_messages` and `max_bytes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rules {
    /// Subject patterns the app may publish to; empty = publishing is off.
    pub allowed: Vec<String>,
    /// At most this many messages per answer or request.
    pub max_messages: usize,
    /// At most this many bytes (payloads and headers) per answer or request.
    pub max_bytes: u64,
}

impl Rules {
    /// Whether the app may publish at all.
    pub fn enabled(&self) -> bool {
        !self.allowed.is_empty()
    }

    /// Whether `subject` is allowed.
    pub fn allows(&self, subject: &str) -> bool {
        self.allowed.iter().any(|p| subject::covers(p, subject))
    }

    /// Checks outputs against the rules.
    ///
    /// # Errors
    /// The first rule broken.
    pub fn check(&self, outputs: &[Output]) -> Result<(), Refusal> {
        if outputs.len() > self.max_messages {
            return Err(Refusal::TooMany {
                count: outputs.len(),
                max: self.max_messages,
            });
        }
        let bytes: u64 = outputs.iter().map(Output::size).sum();
        if bytes > self.max_bytes {
            return Err(Refusal::TooLarge {
                bytes,
                max: self.max_bytes,
            });
        }
        self.check_subjects(outputs.iter().map(|o| o.subject.as_str()))
    }

    /// Checks subjects only (the endpoint checks its path's subject before reading
    /// the body).
    ///
    /// # Errors
    /// [`Refusal::NotAllowed`] for the first subject not allowed.
    pub fn check_subjects<'a>(
        &self,
        mut subjects: impl Iterator<Item = &'a str>,
    ) -> Result<(), Refusal> {
        if !self.enabled() {
            return Err(Refusal::NotAllowed(
                "publishing is off (publish.allowed_subjects is empty)".into(),
            ));
        }
        match subjects.find(|s| !self.allows(s)) {
            Some(s) => Err(Refusal::NotAllowed(format!(
                "subject {s:?} is not in publish.allowed_subjects"
            ))),
            None => Ok(()),
        }
    }
}

/// The message id of an answer's `i`-th output: `jetrelay:<stream>:<sequence>:<i>`.
pub fn answer_id(stream: &str, sequence: u64, i: usize) -> String {
    format!("jetrelay:{stream}:{sequence}:{i}")
}

/// Gives an answer's outputs their ids (the input's stream and sequence).
pub fn identify(outputs: &mut [Output], stream: &str, sequence: u64) {
    for (i, o) in outputs.iter_mut().enumerate() {
        o.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(MSG_ID));
        o.headers
            .push((MSG_ID.to_string(), answer_id(stream, sequence, i)));
    }
}

/// Whether a stream's `duplicate_window` outlasts every redelivery of an input: the
/// last one can come `ack_wait × max_deliver` after the first (`None`: unlimited
/// deliveries, which no window covers). A redelivery after the window could publish
/// the same outputs twice.
pub fn window_covers(window: Duration, ack_wait: Duration, max_deliver: Option<u32>) -> bool {
    max_deliver.is_some_and(|n| window >= ack_wait.saturating_mul(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(allowed: &[&str]) -> Rules {
        Rules {
            allowed: allowed.iter().map(|s| s.to_string()).collect(),
            max_messages: 3,
            max_bytes: 100,
        }
    }

    #[test]
    fn documents_table() {
        let ok = |body: &str| parse(body.as_bytes(), Author::Answer).unwrap();
        let out = ok(r#"{"publish": [
            {"subject": "a.b", "headers": {"X": "1", "Y": ["2", "3"]}, "data": "hi"},
            {"subject": "c", "data_base64": "//4="},
            {"subject": "d"}
        ]}"#);
        assert_eq!(out.len(), 3);
        assert_eq!(out[0].subject, "a.b");
        assert_eq!(
            out[0].headers,
            [("X", "1"), ("Y", "2"), ("Y", "3")].map(|(n, v)| (n.to_string(), v.to_string()))
        );
        assert_eq!(out[0].payload.as_ref(), b"hi");
        assert_eq!(out[1].payload.as_ref(), [0xff, 0xfe]);
        assert!(out[2].payload.is_empty());
        assert_eq!(ok(r#"{"publish": []}"#), []);

        let bad = |body: &str, author| match parse(body.as_bytes(), author) {
            Err(Refusal::Malformed(why)) => why,
            other => panic!("{body}: {other:?}"),
        };
        for (body, why) in [
            ("nope", "not JSON"),
            ("[]", "not a JSON object"),
            ("{}", "no \"publish\""),
            (r#"{"publish": [], "x": 1}"#, "unknown field"),
            (r#"{"publish": {}}"#, "not a list"),
            (r#"{"publish": [1]}"#, "item 0: not an object"),
            (r#"{"publish": [{"data": "x"}]}"#, "has no subject"),
            (r#"{"publish": [{"subject": "a.*"}]}"#, "wildcards"),
            (r#"{"publish": [{"subject": "a..b"}]}"#, "empty token"),
            (r#"{"publish": [{"subject": 3}]}"#, "wrong type"),
            (
                r#"{"publish": [{"subject": "a", "data": "x", "data_base64": "eA=="}]}"#,
                "both",
            ),
            (
                r#"{"publish": [{"subject": "a", "data_base64": "!!"}]}"#,
                "not base64",
            ),
            (
                r#"{"publish": [{"subject": "a", "headers": {"X": 1}}]}"#,
                "strings",
            ),
            (
                r#"{"publish": [{"subject": "a", "headers": {"X Y": "1"}}]}"#,
                "not valid",
            ),
            (
                r#"{"publish": [{"subject": "a", "headers": {"X": "1\n2"}}]}"#,
                "line break",
            ),
            (
                r#"{"publish": [{"subject": "a", "headers": {"Nats-Msg-Id": "1"}}]}"#,
                "jetrelay sets",
            ),
            (
                r#"{"publish": [{"subject": "a", "extra": 1}]}"#,
                "unknown field",
            ),
        ] {
            let got = bad(body, Author::Answer);
            assert!(got.contains(why), "{body}: {got}");
        }
        // The endpoint may set its own message id, and no other server header.
        let out = parse(
            br#"{"publish": [{"subject": "a", "headers": {"Nats-Msg-Id": "k1"}}]}"#,
            Author::Endpoint,
        )
        .unwrap();
        assert_eq!(out[0].msg_id(), Some("k1"));
        let why = bad(
            r#"{"publish": [{"subject": "a", "headers": {"Nats-Expected-Stream": "S"}}]}"#,
            Author::Endpoint,
        );
        assert!(why.contains("only Nats-Msg-Id"), "{why}");
    }

    fn output(subject: &str, payload: &str) -> Output {
        Output {
            subject: subject.into(),
            headers: Vec::new(),
            payload: Bytes::from(payload.to_string()),
        }
    }

    #[test]
    fn rules_table() {
        let r = rules(&["orders.>", "audit"]);
        assert_eq!(
            r.check(&[output("orders.a.b", "x"), output("audit", "")]),
            Ok(())
        );
        assert_eq!(r.check(&[]), Ok(()));
        let refused = |r: &Rules, outs: &[Output]| r.check(outs).unwrap_err();
        assert_eq!(
            refused(&r, &[output("orders", "x")]).label(),
            "not_allowed",
            "orders.> does not cover orders"
        );
        assert_eq!(
            refused(
                &r,
                &[
                    output("a", ""),
                    output("a", ""),
                    output("a", ""),
                    output("a", "")
                ]
            ),
            Refusal::TooMany { count: 4, max: 3 }
        );
        let big = "x".repeat(101);
        assert_eq!(
            refused(&r, &[output("audit", &big)]),
            Refusal::TooLarge {
                bytes: 101,
                max: 100
            }
        );
        // Headers count against the bytes too.
        let mut o = output("audit", &"x".repeat(90));
        o.headers.push(("Header".into(), "12345".into()));
        assert_eq!(refused(&r, &[o]).label(), "too_large");
        let off = refused(&rules(&[]), &[output("audit", "")]);
        assert!(off.to_string().contains("publishing is off"), "{off}");
        assert!(!rules(&[]).enabled());
    }

    #[test]
    fn answer_ids_are_deterministic_and_replace_any_other() {
        let mut outs = vec![output("a", ""), output("b", "")];
        outs[1]
            .headers
            .push(("nats-msg-id".into(), "theirs".into()));
        identify(&mut outs, "ORDERS", 42);
        assert_eq!(outs[0].msg_id(), Some("jetrelay:ORDERS:42:0"));
        assert_eq!(outs[1].msg_id(), Some("jetrelay:ORDERS:42:1"));
        assert_eq!(outs[1].headers.len(), 1);
        identify(&mut outs, "ORDERS", 42);
        assert_eq!(outs[1].msg_id(), Some("jetrelay:ORDERS:42:1"), "idempotent");
    }

    #[test]
    fn windows_table() {
        let s = Duration::from_secs;
        assert!(window_covers(s(120), s(30), Some(4)));
        assert!(!window_covers(s(120), s(30), Some(5)));
        assert!(!window_covers(s(3600), s(1), None), "unlimited deliveries");
    }
}
