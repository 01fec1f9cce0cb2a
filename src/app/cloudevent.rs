//! CloudEvents in structured content mode (the JSON event format), both ways:
//! the envelope jetrelay writes for `http.format = "cloudevents-structured"`
//! ([`structured`]: binary mode's attributes moved into the body, with `data` when
//! the payload is JSON, else `data_base64`), and the envelope a publisher wrote,
//! read back for `http.unwrap_cloudevents` ([`unwrap`]: its data as the body, its
//! attributes as `ce-*` headers, binary mode). Pure. [`unwrap`] reads bytes others
//! write: bounded by the payload it is given (at most [`MAX_ATTRIBUTES`]
//! attributes, serde_json's nesting limit), an error for anything that is not a
//! valid CloudEvent, never a panic.

use std::borrow::Cow;

use base64::Engine as _;
use serde_json::value::RawValue;

use super::headers::{Mapped, STRUCTURED_CLOUDEVENT, ce_name, is_valid_value};
use crate::message::{Message, Offered};

/// The most attributes an envelope read back may have (each becomes a header).
pub const MAX_ATTRIBUTES: usize = 64;

/// Whether `payload` is a JSON text (UTF-8, one value, nothing after it).
pub fn is_json(payload: &[u8]) -> bool {
    std::str::from_utf8(payload).is_ok() && serde_json::from_slice::<&RawValue>(payload).is_ok()
}

/// Whether a media type (a `Content-Type` value, parameters aside) is JSON:
/// `application/json` or a `+json` suffix.
fn is_json_type(media: &str) -> bool {
    let essence = media.split(';').next().unwrap_or_default().trim();
    essence.eq_ignore_ascii_case("application/json")
        || essence.len() > 5
            && essence.is_char_boundary(essence.len() - 5)
            && essence[essence.len() - 5..].eq_ignore_ascii_case("+json")
}

/// Whether a `Content-Type` value says a structured CloudEvent.
pub fn is_structured(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or_default().trim();
    essence.eq_ignore_ascii_case(STRUCTURED_CLOUDEVENT)
}

/// The body of a request in structured content mode, and its headers made so: the
/// `ce-*` headers `mapped` carries (binary mode's attributes, `headers::map`) move
/// into the envelope, with `datacontenttype` (the message's `Content-Type`, else
/// `application/json` for a JSON payload) and `data` (the payload as it is, when it
/// is JSON and its type does not say otherwise) or `data_base64`; the request's `Content-Type` becomes
/// `application/cloudevents+json`.
pub fn structured(d: Offered<'_>, mapped: &mut Mapped<'_>) -> Vec<u8> {
    let payload = &d.message().payload;
    let given = d.header("Content-Type").filter(|v| !v.trim().is_empty());
    // JSON goes as `data` unless its type says otherwise (a reader would take a
    // string of another type as its text).
    let json = given.is_none_or(is_json_type) && is_json(payload);
    let mut attributes = serde_json::Map::new();
    mapped.headers.retain(|(name, value)| {
        let Some(attribute) = ce_name(name).map(str::to_ascii_lowercase) else {
            return true;
        };
        // The data and its type are the payload's, never a header's claim.
        if !matches!(
            attribute.as_str(),
            "data" | "data_base64" | "datacontenttype"
        ) {
            attributes.insert(attribute, value.as_ref().into());
        }
        false
    });
    // The envelope is the JSON format of CloudEvents 1.0, whatever version a
    // publisher's own `ce-*` headers are (0.3's `schemaurl` is 1.0's `dataschema`;
    // its `datacontentencoding` is what `data_base64` says): an envelope claiming
    // another version would be refused by its readers, jetrelay's unwrapping too.
    attributes.insert("specversion".into(), "1.0".into());
    if let Some(schema) = attributes.remove("schemaurl") {
        attributes.entry("dataschema").or_insert(schema);
    }
    attributes.remove("datacontentencoding");
    let data_type = given
        .map(str::to_string)
        .or_else(|| json.then(|| "application/json".to_string()));
    if let Some(t) = data_type {
        attributes.insert("datacontenttype".into(), t.into());
    }
    for (name, value) in &mut mapped.headers {
        if name.eq_ignore_ascii_case("content-type") {
            *value = Cow::Borrowed(STRUCTURED_CLOUDEVENT);
        }
    }
    if !json {
        let encoded = base64::engine::general_purpose::STANDARD.encode(payload);
        attributes.insert("data_base64".into(), encoded.into());
    }
    // A map of strings always serializes.
    let mut out = serde_json::to_vec(&attributes).unwrap_or_else(|_| b"{}".to_vec());
    if json {
        // The payload itself (whitespace around it aside) as `data`: `{…}` becomes
        // `{…,"data":<payload>}`.
        out.pop();
        if !attributes.is_empty() {
            out.push(b',');
        }
        out.extend_from_slice(b"\"data\":");
        out.extend_from_slice(payload.trim_ascii());
        out.push(b'}');
    }
    out
}

/// Why an envelope is not a valid CloudEvent (the dead letter's reason says it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    /// Not a JSON object.
    #[error("not a JSON object: {0}")]
    NotAnObject(String),
    /// A required attribute is missing, empty or not a string.
    #[error("{0} is missing, empty or not a string")]
    Required(&'static str),
    /// `specversion` is not `1.0`.
    #[error("specversion {0:?} is not \"1.0\"")]
    Version(String),
    /// Both `data` and `data_base64`.
    #[error("data and data_base64 together")]
    BothData,
    /// `data_base64` is not a base64 string.
    #[error("data_base64 is not base64")]
    Base64,
    /// An attribute name outside `[a-z0-9]`.
    #[error("attribute {0:?}: a name is lowercase letters and digits")]
    Name(String),
    /// An attribute whose value is not a string, a number or a boolean.
    #[error("attribute {0:?}: a value is a string, a number or a boolean")]
    Value(String),
    /// More attributes than [`MAX_ATTRIBUTES`].
    #[error("more than {MAX_ATTRIBUTES} attributes")]
    TooMany,
}

/// What a structured CloudEvent carries, read back: its data as the body, its
/// attributes as `ce-*` headers (`datacontenttype` as `Content-Type`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unwrapped {
    /// The data's bytes: `data_base64` decoded, a string's text when
    /// `datacontenttype` is not JSON, else `data` as it was written (JSON).
    pub payload: Vec<u8>,
    /// `("ce-<name>", value)` per attribute (values percent-encoded as the HTTP
    /// binding says), then `("Content-Type", datacontenttype)` when there is a type
    /// that is a valid header value.
    pub headers: Vec<(String, String)>,
}

/// The envelope in `payload`, read back (see [`Unwrapped`]).
///
/// # Errors
/// [`Malformed`] when it is not a valid CloudEvent 1.0 in the JSON format.
pub fn unwrap(payload: &[u8]) -> Result<Unwrapped, Malformed> {
    let fields: Vec<(String, &RawValue)> = serde_json::from_slice::<Object<'_>>(payload)
        .map_err(|e| Malformed::NotAnObject(e.to_string()))?
        .0;
    if fields.len() > MAX_ATTRIBUTES + 2 {
        return Err(Malformed::TooMany);
    }
    let field = |name: &str| fields.iter().rev().find(|(n, _)| n == name).map(|f| f.1);
    let required = |name: &'static str| match field(name).map(text) {
        Some(Some(s)) if !s.is_empty() => Ok(s),
        _ => Err(Malformed::Required(name)),
    };
    let version = required("specversion")?;
    if version != "1.0" {
        return Err(Malformed::Version(version));
    }
    for name in ["id", "source", "type"] {
        required(name)?;
    }
    let data = field("data").filter(|v| v.get() != "null");
    let base64 = field("data_base64").filter(|v| v.get() != "null");
    let data_type = match field("datacontenttype").filter(|v| v.get() != "null") {
        Some(v) => Some(text(v).ok_or(Malformed::Value("datacontenttype".into()))?),
        None => None,
    };
    let payload = match (data, base64) {
        (Some(_), Some(_)) => return Err(Malformed::BothData),
        (None, Some(b)) => {
            let b = text(b).ok_or(Malformed::Base64)?;
            base64::engine::general_purpose::STANDARD
                .decode(b.trim())
                .map_err(|_| Malformed::Base64)?
        }
        (Some(d), None) => match (text(d), &data_type) {
            // A string of a type that is not JSON is its text (the JSON format, 3.1).
            (Some(s), Some(t)) if !is_json_type(t) => s.into_bytes(),
            _ => d.get().as_bytes().to_vec(),
        },
        (None, None) => Vec::new(),
    };
    let mut headers = Vec::with_capacity(fields.len());
    for (name, value) in &fields {
        if matches!(name.as_str(), "data" | "data_base64" | "datacontenttype") {
            continue;
        }
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        {
            return Err(Malformed::Name(name.clone()));
        }
        let Some(v) = scalar(value).map_err(|()| Malformed::Value(name.clone()))? else {
            continue;
        };
        headers.retain(|(n, _): &(String, String)| n[3..] != **name);
        headers.push((format!("ce-{name}"), percent_encoded(&v)));
    }
    // The data's type is the request's own header, as it was written (one that is
    // not a valid header value is left out: the app gets octet-stream).
    if let Some(t) = data_type.or_else(|| data.map(|_| "application/json".to_string()))
        && is_valid_value(&t)
        && !t.is_empty()
    {
        headers.push(("Content-Type".into(), t));
    }
    Ok(Unwrapped { payload, headers })
}

/// `message` as the app is to get it when it is a structured CloudEvent and
/// `http.unwrap_cloudevents` is on: `None` when its `Content-Type` is not
/// `application/cloudevents+json` (it goes as it is); else its data, its headers but
/// `Content-Type` and its own `ce-*` (the envelope's attributes instead).
///
/// # Errors
/// [`Malformed`] when its envelope is not a valid CloudEvent.
pub fn unwrapped(message: &Message) -> Result<Option<Message>, Malformed> {
    let content_type = message
        .headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-type"));
    if !content_type.is_some_and(|(_, v)| is_structured(v)) {
        return Ok(None);
    }
    let u = unwrap(&message.payload)?;
    let mut headers: Vec<(String, String)> = message
        .headers
        .iter()
        .filter(|(n, _)| !n.eq_ignore_ascii_case("content-type") && ce_name(n).is_none())
        .cloned()
        .collect();
    headers.extend(u.headers);
    Ok(Some(Message {
        subject: message.subject.clone(),
        headers,
        payload: u.payload.into(),
    }))
}

/// A JSON object's members in order, their values unparsed (duplicates kept; the
/// last one counts).
struct Object<'a>(Vec<(String, &'a RawValue)>);

impl<'de: 'a, 'a> serde::Deserialize<'de> for Object<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> serde::de::Visitor<'de> for Members {
            type Value = Object<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(entry) = m.next_entry::<String, &'de RawValue>()? {
                    if out.len() > MAX_ATTRIBUTES + 2 {
                        return Err(serde::de::Error::custom("too many attributes"));
                    }
                    out.push(entry);
                }
                Ok(Object(out))
            }
        }
        d.deserialize_map(Members)
    }
}

/// A JSON string's text (`None`: not a string).
fn text(v: &RawValue) -> Option<String> {
    serde_json::from_str::<String>(v.get()).ok()
}

/// An attribute's value as text: a string as it is, a number or a boolean as
/// written; `Ok(None)` for `null` (absent); `Err` for an object or array.
fn scalar(v: &RawValue) -> Result<Option<String>, ()> {
    let raw = v.get();
    match raw.as_bytes().first() {
        Some(b'"') => text(v).map(Some).ok_or(()),
        Some(b'{' | b'[') | None => Err(()),
        _ if raw == "null" => Ok(None),
        _ => Ok(Some(raw.to_string())),
    }
}

/// A header value as the CloudEvents HTTP binding writes it (3.1.3.2): printable
/// ASCII but `"` and `%` as it is, every other byte of its UTF-8 as `%XX` (and a
/// space at either end, which a header value cannot keep).
fn percent_encoded(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    let last = v.len().saturating_sub(1);
    for (i, b) in v.bytes().enumerate() {
        let edge_space = b == b' ' && (i == 0 || i == last);
        if (0x20..0x7f).contains(&b) && b != b'"' && b != b'%' && !edge_space {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        }
    }
    out
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::headers::{Pass, RequestFormat, map};
    use crate::message::Delivery;

    /// The envelope of order 42 of `ORDERS` with `headers` and `payload`, and the
    /// request's headers.
    fn envelope(
        headers: &[(&str, &str)],
        payload: &[u8],
    ) -> (serde_json::Value, Vec<(String, String)>) {
        let d = Delivery::orders_eu(42, headers, payload);
        let offered = Offered::Delivery(&d);
        let mut mapped = map(
            offered,
            1,
            &Pass::default(),
            RequestFormat::CloudeventsStructured,
            None,
        );
        let body = structured(offered, &mut mapped);
        let headers = (mapped.headers.iter())
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        (serde_json::from_slice(&body).unwrap(), headers)
    }

    #[test]
    fn structured_mode_table() {
        // JSON: `data` as it is, binary mode's attributes beside it.
        let (e, headers) = envelope(&[], br#"{"n": 1}"#);
        assert_eq!(
            e,
            serde_json::json!({
                "specversion": "1.0", "id": "ORDERS:42", "source": "/jetstream/ORDERS",
                "type": "io.nats.jetstream.message", "subject": "orders.eu",
                "time": "2023-11-14T22:13:20Z", "datacontenttype": "application/json",
                "data": {"n": 1}
            })
        );
        let ct: Vec<_> = headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("content-type"))
            .collect();
        assert_eq!(ct.len(), 1);
        assert_eq!(ct[0].1, STRUCTURED_CLOUDEVENT);
        assert!(
            headers.iter().all(|(n, _)| ce_name(n).is_none()),
            "{headers:?}"
        );
        assert!(
            headers
                .iter()
                .any(|(n, v)| n == "nats-sequence" && v == "42")
        );
        // Not JSON: `data_base64`, its type kept.
        let (e, _) = envelope(
            &[("Content-Type", "text/plain"), ("Nats-Msg-Id", "m-1")],
            b"hi \xff",
        );
        assert_eq!(e["data_base64"], "aGkg/w==");
        assert_eq!(e["datacontenttype"], "text/plain");
        assert_eq!(e["id"], "m-1");
        assert!(e.get("data").is_none());
        // JSON-looking text of another type is not JSON data.
        let (e, _) = envelope(&[("Content-Type", "text/plain")], b"\"hi\"");
        assert_eq!(e["data_base64"], "ImhpIg==");
        // No payload, no type: base64 of nothing.
        let (e, _) = envelope(&[], b"");
        assert_eq!(e["data_base64"], "");
        assert!(e.get("datacontenttype").is_none());
        // Already a CloudEvent (binary mode): its own attributes, as binary mode keeps them.
        let (e, _) = envelope(
            &[
                ("ce-specversion", "1.0"),
                ("ce-id", "evt-1"),
                ("ce-Type", "com.example"),
                ("ce-tenant", "t1"),
                ("Content-Type", "application/vnd.x+json"),
            ],
            b"[1,2]",
        );
        assert_eq!(e["id"], "evt-1");
        assert_eq!(e["type"], "com.example");
        assert_eq!(e["tenant"], "t1");
        assert_eq!(e["source"], "/jetstream/ORDERS");
        assert_eq!(e["data"], serde_json::json!([1, 2]));
        assert_eq!(e["datacontenttype"], "application/vnd.x+json");
        // A CloudEvents 0.3 event in binary mode becomes a 1.0 envelope, which its
        // readers (jetrelay's unwrapping too) take.
        let (e, _) = envelope(
            &[
                ("ce-specversion", "0.3"),
                ("ce-id", "evt-3"),
                ("ce-schemaurl", "https://example.com/s"),
                ("ce-datacontentencoding", "base64"),
            ],
            b"{}",
        );
        assert_eq!(e["specversion"], "1.0");
        assert_eq!(e["dataschema"], "https://example.com/s");
        assert!(e.get("schemaurl").is_none() && e.get("datacontentencoding").is_none());
        assert!(unwrap(serde_json::to_vec(&e).unwrap().as_slice()).is_ok());
    }

    fn h<'a>(u: &'a Unwrapped, name: &str) -> Option<&'a str> {
        u.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn unwrap_reads_json_data_text_base64_and_extensions() {
        let base = r#""specversion":"1.0","id":"e1","source":"/s","type":"t""#;
        let u = unwrap(
            format!(
                r#"{{{base},"data":{{"a": [1, 2.50]}},"tenant":"x y","n":3,"ok":true,"gone":null}}"#
            )
            .as_bytes(),
        )
        .unwrap();
        assert_eq!(u.payload, br#"{"a": [1, 2.50]}"#, "data as it was written");
        assert_eq!(h(&u, "ce-id"), Some("e1"));
        assert_eq!(h(&u, "ce-specversion"), Some("1.0"));
        assert_eq!(h(&u, "ce-tenant"), Some("x y"));
        assert_eq!(h(&u, "ce-n"), Some("3"));
        assert_eq!(h(&u, "ce-ok"), Some("true"));
        assert_eq!(h(&u, "ce-gone"), None);
        assert_eq!(h(&u, "Content-Type"), Some("application/json"));
        // A string of a type that is not JSON is its text; of a JSON type, JSON.
        let u = unwrap(
            format!(r#"{{{base},"datacontenttype":"text/plain","data":"h\u00e9"}}"#).as_bytes(),
        )
        .unwrap();
        assert_eq!(u.payload, "hé".as_bytes());
        assert_eq!(h(&u, "Content-Type"), Some("text/plain"));
        assert_eq!(h(&u, "ce-datacontenttype"), None);
        let u = unwrap(
            format!(r#"{{{base},"datacontenttype":"application/json","data":"x"}}"#).as_bytes(),
        )
        .unwrap();
        assert_eq!(u.payload, b"\"x\"");
        // The type as written (quotes and all), or left out when not a header value.
        let typed = |t: &str| {
            let env = format!(
                r#"{{{base},"datacontenttype":{},"data":1}}"#,
                serde_json::json!(t)
            );
            unwrap(env.as_bytes()).unwrap()
        };
        let u = typed("text/plain; charset=\"utf-8\"");
        assert_eq!(h(&u, "Content-Type"), Some("text/plain; charset=\"utf-8\""));
        assert_eq!(h(&typed("a\nb"), "Content-Type"), None);
        // data_base64: its bytes.
        let u = unwrap(format!(r#"{{{base},"data_base64":"aGkg/w=="}}"#).as_bytes()).unwrap();
        assert_eq!(u.payload, b"hi \xff");
        assert_eq!(h(&u, "Content-Type"), None);
        // No data: no body. Values not fit for a header are percent-encoded.
        let u =
            unwrap(format!(r#"{{{base},"subject":" caf\u00e9 \"100%\"\n"}}"#).as_bytes()).unwrap();
        assert!(u.payload.is_empty());
        assert_eq!(h(&u, "ce-subject"), Some("%20caf%C3%A9 %22100%25%22%0A"));
        assert!(
            u.headers
                .iter()
                .all(|(_, v)| super::super::headers::is_valid_value(v))
        );
    }

    #[test]
    fn a_dapr_envelope_unwraps() {
        let dapr = br#"{"data":{"orderId":7},"datacontenttype":"application/json","id":"5929aaac-a5e2-4ca1-859c-edfe73f11565","pubsubname":"orderpubsub","source":"checkout","specversion":"1.0","time":"2026-12-06T17:00:00Z","topic":"orders","traceid":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","tracestate":"","type":"com.dapr.event.sent"}"#;
        let u = unwrap(dapr).unwrap();
        assert_eq!(u.payload, br#"{"orderId":7}"#);
        for (n, v) in [
            ("ce-id", "5929aaac-a5e2-4ca1-859c-edfe73f11565"),
            ("ce-source", "checkout"),
            ("ce-type", "com.dapr.event.sent"),
            ("ce-topic", "orders"),
            ("ce-pubsubname", "orderpubsub"),
            (
                "ce-traceparent",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            ),
            ("ce-tracestate", ""),
            ("ce-time", "2026-12-06T17:00:00Z"),
            ("Content-Type", "application/json"),
        ] {
            assert_eq!(h(&u, n), Some(v), "{n}");
        }
    }

    #[test]
    fn malformed_envelopes_table() {
        let base = r#""specversion":"1.0","id":"e1","source":"/s","type":"t""#;
        let cases: &[(String, Malformed)] = &[
            ("[1]".into(), Malformed::NotAnObject(String::new())),
            ("{".into(), Malformed::NotAnObject(String::new())),
            (
                r#"{"id":"e1","source":"/s","type":"t"}"#.into(),
                Malformed::Required("specversion"),
            ),
            (
                r#"{"specversion":"0.3","id":"e1","source":"/s","type":"t"}"#.into(),
                Malformed::Version("0.3".into()),
            ),
            (
                r#"{"specversion":"1.0","id":"","source":"/s","type":"t"}"#.into(),
                Malformed::Required("id"),
            ),
            (
                r#"{"specversion":"1.0","id":"e1","source":"/s","type":7}"#.into(),
                Malformed::Required("type"),
            ),
            (
                format!(r#"{{{base},"data":1,"data_base64":"AA=="}}"#),
                Malformed::BothData,
            ),
            (
                format!(r#"{{{base},"data_base64":"not base64!"}}"#),
                Malformed::Base64,
            ),
            (format!(r#"{{{base},"data_base64":3}}"#), Malformed::Base64),
            (
                format!(r#"{{{base},"Tenant":"x"}}"#),
                Malformed::Name("Tenant".into()),
            ),
            (
                format!(r#"{{{base},"x":{{"a":1}}}}"#),
                Malformed::Value("x".into()),
            ),
            (
                format!(r#"{{{base},"datacontenttype":1}}"#),
                Malformed::Value("datacontenttype".into()),
            ),
        ];
        for (input, want) in cases {
            let got = unwrap(input.as_bytes()).unwrap_err();
            match (want, &got) {
                (Malformed::NotAnObject(_), Malformed::NotAnObject(_)) => {}
                _ => assert_eq!(&got, want, "{input}"),
            }
        }
        let many: String = (0..=MAX_ATTRIBUTES)
            .map(|i| format!(r#","a{i}":1"#))
            .collect();
        assert!(unwrap(format!("{{{base}{many}}}").as_bytes()).is_err());
    }

    #[test]
    fn only_a_structured_content_type_is_unwrapped() {
        let m = |ct: &str, payload: &str| Message {
            subject: "s".into(),
            headers: vec![
                ("content-type".into(), ct.into()),
                ("ce-id".into(), "old".into()),
                ("X-A".into(), "1".into()),
            ],
            payload: payload.as_bytes().to_vec().into(),
        };
        let env = r#"{"specversion":"1.0","id":"e1","source":"/s","type":"t","data":"x","datacontenttype":"text/plain"}"#;
        assert!(matches!(unwrapped(&m("application/json", env)), Ok(None)));
        let u = unwrapped(&m("Application/CloudEvents+JSON; charset=utf-8", env))
            .unwrap()
            .unwrap();
        assert_eq!(&u.payload[..], b"x");
        assert_eq!(
            u.headers,
            [
                ("X-A", "1"),
                ("ce-specversion", "1.0"),
                ("ce-id", "e1"),
                ("ce-source", "/s"),
                ("ce-type", "t"),
                ("Content-Type", "text/plain")
            ]
            .map(|(n, v)| (n.to_string(), v.to_string()))
        );
        assert!(unwrapped(&m("application/cloudevents+json", "nope")).is_err());
    }

    proptest::proptest! {
        /// Whatever the bytes, unwrapping answers (never a panic), and what it
        /// gives is sendable: attribute headers valid, the body no longer than the
        /// payload (base64 decodes shorter).
        #[test]
        fn unwrap_never_panics(bytes in proptest::collection::vec(proptest::arbitrary::any::<u8>(), 0..512)) {
            if let Ok(u) = unwrap(&bytes) {
                proptest::prop_assert!(u.payload.len() <= bytes.len());
                for (n, v) in &u.headers {
                    proptest::prop_assert!(super::super::headers::is_valid_name(n) && super::super::headers::is_valid_value(v));
                }
            }
        }

        /// A structured envelope of any payload reads back as that payload.
        #[test]
        fn structured_then_unwrapped_is_the_payload(
            payload in proptest::collection::vec(proptest::arbitrary::any::<u8>(), 0..256),
            json in proptest::arbitrary::any::<bool>(),
        ) {
            let payload = if json { serde_json::to_vec(&String::from_utf8_lossy(&payload)).unwrap() } else { payload };
            let d = Delivery::orders_eu(1, &[], &payload);
            let offered = Offered::Delivery(&d);
            let mut mapped = map(offered, 1, &Pass::default(), RequestFormat::CloudeventsStructured, None);
            let body = structured(offered, &mut mapped);
            let u = unwrap(&body).unwrap();
            proptest::prop_assert_eq!(u.payload, payload);
        }
    }
}
