//! The header contract of the request to the app, as a pure function: which message
//! headers pass through, which are dropped, and the metadata headers we add.
//!
//! Works on strings only; `http::forward` turns the result into HTTP types.

use std::borrow::Cow;

use time::format_description::well_known::Rfc3339;

use crate::message::Offered;
use crate::trace::context::{self, Dropped};
use serde::{Deserialize, Serialize};

/// `http.format`: how a message is laid out in its request.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RequestFormat {
    /// The payload as the body, metadata in `Nats-*` headers.
    #[default]
    Raw,
    /// CloudEvents binary content mode: `ce-*` headers added (batch requests ignore it).
    Cloudevents,
    /// CloudEvents structured content mode: the body is a JSON CloudEvent whose
    /// attributes are binary mode's (`app::cloudevent::structured`; batch requests
    /// ignore it).
    #[serde(rename = "cloudevents-structured")]
    CloudeventsStructured,
}

/// The media type of a CloudEvent in structured content mode (JSON).
pub const STRUCTURED_CLOUDEVENT: &str = "application/cloudevents+json";

/// Headers that describe one connection, not the message (RFC 9110 §7.6.1), plus the
/// ones the HTTP client computes itself.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
    "content-type",
];

/// Headers a publisher must never be able to set on the app's request: who the caller
/// is (an app behind an ingress may trust them) and jetrelay's own.
const NEVER: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "cookie",
    "forwarded",
    "x-real-ip",
];

/// Header name prefixes that are never passed: the server's `Nats-*` (the metadata
/// headers are jetrelay's to set), jetrelay's own, proxies' `X-Forwarded-*`, and
/// Standard Webhooks' `Webhook-*` (a signature is jetrelay's to make:
/// `crate::app::signing`).
const NEVER_PREFIXES: &[&str] = &["nats-", "jetrelay-", "x-forwarded-", "webhook-"];

/// The request header that names the message an idempotency key's marker records,
/// `<stream>:<sequence>` (or `unknown`), when a message is sent although its key has
/// a marker of another message. In a batch document, the message's header of the
/// same name.
pub const IDEMPOTENCY_CONFLICT: &str = "jetrelay-idempotency-conflict";

/// Whether a message header (lowercase name) is never passed to the app, whatever
/// `http.pass_headers` says.
pub fn never_passed(lower: &str) -> bool {
    NEVER.contains(&lower)
        || HOP_BY_HOP.contains(&lower)
        || NEVER_PREFIXES.iter().any(|p| lower.starts_with(p))
}

/// The W3C trace context: it passes whatever `http.pass_headers` says (bounded, see
/// [`passed`]), replaced by jetrelay's when it exports spans ([`TraceHeaders`]).
/// `baggage` is not trace context but the publisher's application data: it passes
/// only as any other header does.
const TRACE_CONTEXT: &[&str] = &["traceparent", "tracestate"];

/// The trace headers [`passed`] hands on itself, bounded, never as they came.
const TRACE_HEADERS: &[&str] = &["traceparent", "tracestate", "baggage"];

/// The trace context a request carries in place of the message's own, with export
/// on: the `traceparent` of jetrelay's span, and the `tracestate` it continues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceHeaders<'a> {
    /// `traceparent`.
    pub traceparent: &'a str,
    /// `tracestate`, when the context has one.
    pub tracestate: Option<&'a str>,
}

/// Which message headers pass through: every one that is not never passed, or with
/// `http.pass_headers` only those it lists (`X-*`: a prefix); the trace context
/// (`traceparent`, `tracestate`) always, `baggage` like any other header.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pass {
    /// Lowercase names, or prefixes (ending in `*`); `None`: all.
    only: Option<Vec<String>>,
}

impl Pass {
    /// From `http.pass_headers` (empty: every header that may pass).
    pub fn new(patterns: &[String]) -> Pass {
        Pass {
            only: (!patterns.is_empty())
                .then(|| patterns.iter().map(|p| p.to_ascii_lowercase()).collect()),
        }
    }

    /// Whether a message header (lowercase name) passes.
    pub fn admits(&self, lower: &str) -> bool {
        if TRACE_CONTEXT.contains(&lower) {
            return true;
        }
        if never_passed(lower) {
            return false;
        }
        self.only.as_ref().is_none_or(|only| {
            only.iter().any(|p| match p.strip_suffix('*') {
                Some(prefix) => lower.starts_with(prefix),
                None => p == lower,
            })
        })
    }
}

/// The request headers for one delivery.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Mapped<'a> {
    /// (name, value) pairs to send; names are valid tokens (the metadata names are
    /// static and lowercase), values valid field values, borrowed from the delivery
    /// where they are its own (one copy per request, into the HTTP types).
    pub headers: Vec<(Cow<'static, str>, Cow<'a, str>)>,
    /// Message headers that could not be sent because they are not valid HTTP.
    pub skipped_invalid: usize,
    /// The message's trace headers dropped as oversized or malformed.
    pub trace_dropped: Dropped,
}

/// Maps one message's headers and, for a delivery, its metadata to request headers;
/// `attempt` is sent as `Nats-Delivered` (deliveries plus in-place retries, so the app sees
/// every retry as one).
///
/// `Nats-*` message headers are never passed through: the server's own
/// (`Nats-Pin-Id`, `Nats-Stream-Source`, ...) mean nothing to the app, and the
/// publisher must not be able to forge the metadata headers set here; nor identity
/// headers (`Authorization`, `Cookie`, `X-Forwarded-*`, ...). `pass` may narrow it.
///
/// With [`RequestFormat::Cloudevents`] (and [`RequestFormat::CloudeventsStructured`],
/// whose envelope takes them) the request is a CloudEvent in binary content mode:
/// `ce-specversion`, `ce-id` (the `Nats-Msg-Id`, else `<stream>:<sequence>`),
/// `ce-source` (`/jetstream/<stream>`), `ce-type`, `ce-subject`, `ce-time`. A message
/// that is already a CloudEvent (its `ce-specversion` passes `pass`) keeps its own
/// `ce-*` headers that pass, and gets the required ones it lacks; another message's
/// `ce-*` headers are replaced.
pub fn map<'a>(
    d: Offered<'a>,
    attempt: u32,
    pass: &Pass,
    format: RequestFormat,
    trace: Option<TraceHeaders<'a>>,
) -> Mapped<'a> {
    // Room for what passes, the trace context and the metadata (at most 11 of those
    // outside CloudEvents): the list is not regrown per request.
    let mut out = Mapped {
        headers: Vec::with_capacity(d.message().headers.len() + 14),
        ..Mapped::default()
    };
    let p = passed(d, pass, trace, |name, value| {
        out.headers.push((Cow::Owned(name.to_string()), value));
    });
    out.skipped_invalid = p.skipped_invalid;
    out.trace_dropped = p.trace_dropped;
    let content_type = d
        .header("Content-Type")
        .filter(|v| is_valid_value(v) && !v.is_empty())
        .unwrap_or("application/octet-stream");
    let mut add = |n: &'static str, v: Cow<'a, str>| out.headers.push((Cow::Borrowed(n), v));
    add("content-type", content_type.into());
    add("nats-subject", d.subject().into());
    if let Some(m) = d.meta() {
        add("nats-stream", m.stream.as_str().into());
        add("nats-sequence", m.stream_seq.to_string().into());
        add(
            "nats-delivered",
            attempt.max(m.delivered).to_string().into(),
        );
        if let Ok(t) = m.published.to_offset(time::UtcOffset::UTC).format(&Rfc3339) {
            add("nats-published", t.into());
        }
    }
    if let Some(o) = d.origin() {
        add("nats-origin-stream", o.stream.as_str().into());
        add("nats-origin-sequence", o.sequence.to_string().into());
    }
    if let Some(p) = d.partition() {
        add("nats-partition", p.to_string().into());
    }
    if let Some(id) = d.header("Nats-Msg-Id").filter(|v| is_valid_value(v)) {
        add("nats-msg-id", id.into());
    }
    if format != RequestFormat::Raw {
        // Structured mode's attributes are binary mode's, moved into the body.
        cloudevent(d, pass, &mut out);
    }
    out
}

/// A message's id: its `Nats-Msg-Id` (a valid, non-empty header value), else
/// `<stream>:<sequence>` (the CloudEvents `ce-id` jetrelay writes, and the Standard Webhooks
/// `webhook-id`: `crate::app::signing`).
pub fn event_id(d: Offered<'_>) -> String {
    match d
        .header("Nats-Msg-Id")
        .filter(|v| is_valid_value(v) && !v.is_empty())
    {
        Some(id) => id.to_string(),
        None => format!(
            "{}:{}",
            d.meta().map_or("", |m| m.stream.as_str()),
            d.stream_seq()
        ),
    }
}

/// A `ce-*` header's attribute name (what follows `ce-`, in any case).
pub fn ce_name(name: &str) -> Option<&str> {
    (name.len() > 3 && name.is_char_boundary(3) && name[..3].eq_ignore_ascii_case("ce-"))
        .then(|| &name[3..])
}

/// The `ce-*` headers of a CloudEvent in binary content mode. A message that is a
/// CloudEvent already (its `ce-specversion` passes `http.pass_headers`) keeps the
/// `ce-*` headers of its own that pass; what it lacks of `ce-id`, `ce-source` and
/// `ce-type` jetrelay adds, so that what the app gets is always a valid CloudEvent.
/// Its `ce-source` is the publisher's claim, not checked. Any other message's `ce-*`
/// headers are replaced by jetrelay's.
fn cloudevent<'a>(d: Offered<'a>, pass: &Pass, out: &mut Mapped<'a>) {
    let is_ce = |n: &str| ce_name(n).is_some();
    let admitted = |n: &str| pass.admits(&n.to_ascii_lowercase());
    let own = d
        .message()
        .headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("ce-specversion") && admitted(n));
    out.headers.retain(|(n, _)| !is_ce(n));
    let meta = d.meta();
    let stream = meta.map_or("", |m| m.stream.as_str());
    let id = event_id(d);
    let source = format!("/jetstream/{stream}");
    let kind = "io.nats.jetstream.message";
    if own {
        // Already a CloudEvent: its own attributes that pass (valid ones), and the
        // required ones it lacks.
        let has = |name: &str| {
            d.message().headers.iter().any(|(n, v)| {
                n.eq_ignore_ascii_case(name) && admitted(n) && is_valid_value(v) && !v.is_empty()
            })
        };
        let (id_given, source_given, type_given) = (has("ce-id"), has("ce-source"), has("ce-type"));
        for (n, v) in d
            .message()
            .headers
            .iter()
            .filter(|(n, _)| is_ce(n) && admitted(n))
        {
            if is_valid_name(n) && is_valid_value(v) {
                out.headers.push((Cow::Owned(n.clone()), Cow::Borrowed(v)));
            }
        }
        let mut add = |n: &'static str, v: Cow<'a, str>| out.headers.push((Cow::Borrowed(n), v));
        if !id_given {
            add("ce-id", id.into());
        }
        if !source_given {
            add("ce-source", source.into());
        }
        if !type_given {
            add("ce-type", kind.into());
        }
        return;
    }
    let mut add = |n: &'static str, v: Cow<'a, str>| out.headers.push((Cow::Borrowed(n), v));
    add("ce-specversion", "1.0".into());
    add("ce-id", id.into());
    add("ce-source", source.into());
    add("ce-type", kind.into());
    add("ce-subject", d.subject().into());
    if let Some(t) = meta.and_then(|m| {
        m.published
            .to_offset(time::UtcOffset::UTC)
            .format(&Rfc3339)
            .ok()
    }) {
        add("ce-time", t.into());
    }
}

/// What [`passed`] left out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Passed {
    /// Message headers that are not valid HTTP.
    pub skipped_invalid: usize,
    /// Trace headers over the W3C limits or out of their syntax.
    pub trace_dropped: Dropped,
}

/// Hands every message header that passes through to the app to `each`, in order
/// (`Content-Type` aside: it is the request's own), then the trace headers: `trace`
/// in place of the message's `traceparent` and `tracestate` when given, else the
/// message's own as [`context::inbound`] bounds them (a `tracestate` only with a
/// valid `traceparent`), and its `baggage`, bounded, where `pass` admits it. A
/// trace header dropped as oversized or malformed is counted, whether or not it
/// would have passed; it is never sent, so that an app that refuses it never turns
/// it into a message's failure. A batch request carries the same headers per message.
pub fn passed<'a>(
    d: Offered<'a>,
    pass: &Pass,
    trace: Option<TraceHeaders<'a>>,
    mut each: impl FnMut(&'a str, Cow<'a, str>),
) -> Passed {
    let mut out = Passed::default();
    for (name, value) in &d.message().headers {
        let lower = name.to_ascii_lowercase();
        if !pass.admits(&lower) || TRACE_HEADERS.contains(&lower.as_str()) {
            continue;
        }
        if is_valid_name(name) && is_valid_value(value) {
            each(name, Cow::Borrowed(value));
        } else {
            out.skipped_invalid += 1;
        }
    }
    let own = context::inbound(
        d.message()
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str())),
    );
    out.trace_dropped = own.dropped;
    // Each value checked against its syntax (visible ASCII only), so valid HTTP.
    match trace {
        Some(t) => {
            each("traceparent", Cow::Borrowed(t.traceparent));
            if let Some(state) = t.tracestate {
                each("tracestate", Cow::Borrowed(state));
            }
        }
        None => {
            if let Some(parent) = own.traceparent.filter(|v| is_valid_value(v)) {
                each("traceparent", Cow::Borrowed(parent));
                if let Some(state) = own.tracestate {
                    each("tracestate", Cow::Owned(state));
                }
            }
        }
    }
    if let Some(baggage) = own.baggage.filter(|_| pass.admits("baggage")) {
        each("baggage", baggage);
    }
    out
}

/// An HTTP field name: a non-empty RFC 9110 token.
pub fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// An HTTP field value: visible characters, spaces and tabs (and obs-text), no
/// CR, LF, NUL or other controls, no leading or trailing white space.
pub fn is_valid_value(value: &str) -> bool {
    let b = value.as_bytes();
    let edge_ok = |c: Option<&u8>| c.is_none_or(|c| *c != b' ' && *c != b'\t');
    edge_ok(b.first())
        && edge_ok(b.last())
        && b.iter()
            .all(|&c| c == b'\t' || (0x20..0x7f).contains(&c) || c >= 0x80)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Delivery;

    /// Leaked: the mapped headers borrow from the delivery, and the tests build
    /// it inline.
    fn delivery(headers: &[(&str, &str)], partition: Option<u32>) -> Offered<'static> {
        delivery_from(headers, partition, None)
    }

    fn delivery_from(
        headers: &[(&str, &str)],
        partition: Option<u32>,
        origin: Option<crate::message::Origin>,
    ) -> Offered<'static> {
        let delivery: &'static Delivery = Box::leak(Box::new(Delivery {
            partition,
            origin,
            ..Delivery::orders_eu(42, headers, b"x")
        }));
        Offered::Delivery(delivery)
    }

    fn get<'a>(m: &'a Mapped, name: &str) -> Vec<&'a str> {
        m.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_ref())
            .collect()
    }

    #[test]
    fn metadata_headers() {
        let m = map(
            delivery(&[("Nats-Msg-Id", "abc")], Some(3)),
            2,
            &Pass::default(),
            RequestFormat::Raw,
            None,
        );
        assert_eq!(get(&m, "Nats-Subject"), ["orders.eu"]);
        assert_eq!(get(&m, "Nats-Stream"), ["ORDERS"]);
        assert_eq!(get(&m, "Nats-Sequence"), ["42"]);
        assert_eq!(get(&m, "Nats-Delivered"), ["2"]);
        assert_eq!(get(&m, "Nats-Partition"), ["3"]);
        assert_eq!(get(&m, "Nats-Published"), ["2023-11-14T22:13:20Z"]);
        assert_eq!(get(&m, "Nats-Msg-Id"), ["abc"]);
        assert_eq!(get(&m, "Content-Type"), ["application/octet-stream"]);
        assert!(get(&m, "Nats-Origin-Stream").is_empty());
        let origin = crate::message::Origin {
            stream: "ORIG".into(),
            sequence: 9,
        };
        let m = map(
            delivery_from(&[], None, Some(origin)),
            5,
            &Pass::default(),
            RequestFormat::Raw,
            None,
        );
        assert_eq!(get(&m, "Nats-Origin-Stream"), ["ORIG"]);
        assert_eq!(get(&m, "Nats-Delivered"), ["5"], "in-place retries count");
        assert_eq!(get(&m, "Nats-Origin-Sequence"), ["9"]);
        assert!(get(&m, "Nats-Partition").is_empty());
        assert!(get(&m, "Nats-Msg-Id").is_empty());
    }

    #[test]
    fn pass_through_drop_and_skip_table() {
        let m = map(
            delivery(
                &[
                    ("X-Trace", "t1"),
                    ("X-Multi", "a"),
                    ("X-Multi", "b"),
                    ("Content-Type", "application/json"),
                    ("Nats-Pin-Id", "pin"),
                    ("Nats-Stream-Source", "ORIG 2 > x"),
                    ("Nats-Sequence", "999"),
                    ("Connection", "close"),
                    ("Transfer-Encoding", "chunked"),
                    ("Bad Name", "v"),
                    ("X-Bad-Value", "a\r\nInjected: 1"),
                    ("X-Utf8", "café"),
                    ("Authorization", "Bearer forged"),
                    ("proxy-authorization", "Basic x"),
                    ("Cookie", "session=forged"),
                    ("Forwarded", "for=1.2.3.4"),
                    ("X-Forwarded-For", "1.2.3.4"),
                    ("X-Forwarded-Proto", "https"),
                    ("X-Real-Ip", "1.2.3.4"),
                    ("Jetrelay-Action", "ack"),
                ],
                None,
            ),
            1,
            &Pass::default(),
            RequestFormat::Raw,
            None,
        );
        assert_eq!(get(&m, "X-Trace"), ["t1"]);
        assert_eq!(get(&m, "X-Multi"), ["a", "b"]);
        assert_eq!(get(&m, "Content-Type"), ["application/json"]);
        assert_eq!(get(&m, "X-Utf8"), ["café"]);
        assert_eq!(
            get(&m, "Nats-Sequence"),
            ["42"],
            "the publisher cannot forge metadata"
        );
        for dropped in [
            "Nats-Pin-Id",
            "Nats-Stream-Source",
            "Connection",
            "Transfer-Encoding",
            "Injected",
            "Authorization",
            "Proxy-Authorization",
            "Cookie",
            "Forwarded",
            "X-Forwarded-For",
            "X-Forwarded-Proto",
            "X-Real-Ip",
            "Jetrelay-Action",
        ] {
            assert!(get(&m, dropped).is_empty(), "{dropped}");
        }
        assert_eq!(m.skipped_invalid, 2);
    }

    #[test]
    fn pass_headers_is_an_allowlist_that_never_lets_identity_through() {
        let pass = Pass::new(&[
            "X-Trace".into(),
            "x-tenant-*".into(),
            "Authorization".into(),
        ]);
        let m = map(
            delivery(
                &[
                    ("X-Trace", "t"),
                    ("X-Tenant-Id", "7"),
                    ("X-Tenant-Region", "eu"),
                    ("X-Other", "no"),
                    ("Authorization", "Bearer forged"),
                    ("Content-Type", "text/plain"),
                ],
                None,
            ),
            1,
            &pass,
            RequestFormat::Raw,
            None,
        );
        assert_eq!(get(&m, "X-Trace"), ["t"]);
        assert_eq!(get(&m, "X-Tenant-Id"), ["7"]);
        assert_eq!(get(&m, "X-Tenant-Region"), ["eu"]);
        assert!(get(&m, "X-Other").is_empty());
        assert!(
            get(&m, "Authorization").is_empty(),
            "never, even when listed"
        );
        assert_eq!(get(&m, "Content-Type"), ["text/plain"], "the request's own");
        assert!(
            !get(&m, "Nats-Sequence").is_empty(),
            "metadata is always sent"
        );
    }

    #[test]
    fn trace_headers_are_bounded_and_baggage_passes_only_where_pass_headers_lets_it() {
        const TP: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let big_state = vec!["k=v"; 15_397].join(",");
        let big_baggage = format!("k={}", "v".repeat(61_587));
        let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
        let (big_state, big_baggage) = (leak(big_state), leak(big_baggage));
        let only_x = Pass::new(&["X-Trace".into()]);
        let with_baggage = Pass::new(&["X-Trace".into(), "Baggage".into()]);
        let prefixed = Pass::new(&["bag*".into()]);
        let all = Pass::default();
        let export = TraceHeaders {
            traceparent: "00-0af7651916cd43dd8448eb211c80319c-0102030405060708-01",
            tracestate: Some("jr=1"),
        };
        // (headers, pass, export on, traceparent, tracestate, baggage, dropped)
        type Row<'a> = (
            Vec<(&'a str, &'a str)>,
            &'a Pass,
            bool,
            Option<&'a str>,
            Option<&'a str>,
            Option<&'a str>,
            Vec<(&'static str, &'static str)>,
        );
        let forged = vec![("traceparent", TP), ("baggage", "tenant=admin,role=root")];
        let huge = vec![
            ("traceparent", TP),
            ("tracestate", big_state),
            ("baggage", big_baggage),
            ("X-Trace", "t"),
        ];
        let table: Vec<Row> = vec![
            // pass_headers empty: baggage passes as it came.
            (
                forged.clone(),
                &all,
                false,
                Some(TP),
                None,
                Some("tenant=admin,role=root"),
                vec![],
            ),
            // pass_headers without baggage: the trace context passes, baggage not.
            (forged.clone(), &only_x, false, Some(TP), None, None, vec![]),
            (
                forged.clone(),
                &only_x,
                true,
                Some(export.traceparent),
                Some("jr=1"),
                None,
                vec![],
            ),
            (
                forged.clone(),
                &with_baggage,
                false,
                Some(TP),
                None,
                Some("tenant=admin,role=root"),
                vec![],
            ),
            (
                forged.clone(),
                &prefixed,
                true,
                Some(export.traceparent),
                Some("jr=1"),
                Some("tenant=admin,role=root"),
                vec![],
            ),
            // 61 KB of each: dropped and counted, whatever pass_headers and export say.
            (
                huge.clone(),
                &only_x,
                false,
                Some(TP),
                None,
                None,
                vec![("tracestate", "oversized"), ("baggage", "oversized")],
            ),
            (
                huge.clone(),
                &only_x,
                true,
                Some(export.traceparent),
                Some("jr=1"),
                None,
                vec![("tracestate", "oversized"), ("baggage", "oversized")],
            ),
            (
                huge.clone(),
                &all,
                false,
                Some(TP),
                None,
                None,
                vec![("tracestate", "oversized"), ("baggage", "oversized")],
            ),
            // Valid and small: unchanged; malformed: dropped, counted.
            (
                vec![
                    ("traceparent", TP),
                    ("tracestate", "a=1"),
                    ("baggage", "u=1"),
                ],
                &all,
                false,
                Some(TP),
                Some("a=1"),
                Some("u=1"),
                vec![],
            ),
            (
                vec![
                    ("traceparent", "junk"),
                    ("tracestate", "a=1"),
                    ("baggage", "u=1,,"),
                ],
                &all,
                false,
                None,
                None,
                None,
                vec![("traceparent", "malformed"), ("baggage", "malformed")],
            ),
            (
                vec![("tracestate", "A=1")],
                &all,
                false,
                None,
                None,
                None,
                vec![("tracestate", "malformed")],
            ),
        ];
        for (i, (headers, pass, on, parent, state, baggage, dropped)) in
            table.into_iter().enumerate()
        {
            let m = map(
                delivery(&headers, None),
                1,
                pass,
                RequestFormat::Raw,
                on.then_some(export),
            );
            assert_eq!(
                get(&m, "traceparent"),
                parent.into_iter().collect::<Vec<_>>(),
                "row {i}"
            );
            assert_eq!(
                get(&m, "tracestate"),
                state.into_iter().collect::<Vec<_>>(),
                "row {i}"
            );
            assert_eq!(
                get(&m, "baggage"),
                baggage.into_iter().collect::<Vec<_>>(),
                "row {i}"
            );
            let counted: Vec<_> = m
                .trace_dropped
                .counts()
                .map(|(h, r, n)| {
                    assert_eq!(n, 1);
                    (h.name(), r.name())
                })
                .collect();
            assert_eq!(counted, dropped, "row {i}");
            if pass == &only_x {
                assert_eq!(
                    get(&m, "X-Trace").len(),
                    usize::from(headers.iter().any(|(n, _)| *n == "X-Trace")),
                    "row {i}"
                );
            }
        }
    }

    #[test]
    fn cloudevents_binary_mode_table() {
        let ce_passing = |pass: &Pass, headers: &[(&str, &str)]| {
            map(
                delivery(headers, Some(3)),
                1,
                pass,
                RequestFormat::Cloudevents,
                None,
            )
        };
        let ce = |headers: &[(&str, &str)]| ce_passing(&Pass::default(), headers);
        // A message that says it is CloudEvent evt-1 of type `ty`.
        let event = |ty| {
            [
                ("ce-specversion", "1.0"),
                ("ce-id", "evt-1"),
                ("ce-type", ty),
            ]
        };
        let m = ce(&[("X-Trace", "t"), ("ce-type", "forged")]);
        for (name, want) in [
            ("ce-specversion", "1.0"),
            ("ce-id", "ORDERS:42"),
            ("ce-source", "/jetstream/ORDERS"),
            ("ce-type", "io.nats.jetstream.message"), // not the message's
            ("ce-subject", "orders.eu"),
            ("ce-time", "2023-11-14T22:13:20Z"),
            ("X-Trace", "t"),
            ("Nats-Sequence", "42"), // the metadata headers stay
        ] {
            assert_eq!(get(&m, name), [want], "{name}");
        }
        let m = ce(&[("Nats-Msg-Id", "order-7")]);
        assert_eq!(get(&m, "ce-id"), ["order-7"]);
        // Already a CloudEvent: its own attributes, unchanged.
        let m = ce(&[
            ("ce-specversion", "1.0"),
            ("ce-id", "evt-1"),
            ("ce-type", "com.example.order"),
            ("ce-source", "/shop"),
        ]);
        assert_eq!(get(&m, "ce-id"), ["evt-1"]);
        assert_eq!(get(&m, "ce-type"), ["com.example.order"]);
        assert_eq!(get(&m, "ce-source"), ["/shop"], "the publisher's claim");
        assert!(get(&m, "ce-subject").is_empty());
        // Claiming to be a CloudEvent without its required attributes: it gets them.
        let m = ce(&[("ce-specversion", "1.0"), ("ce-type", "com.example.order")]);
        assert_eq!(get(&m, "ce-id"), ["ORDERS:42"]);
        assert_eq!(get(&m, "ce-source"), ["/jetstream/ORDERS"]);
        assert_eq!(get(&m, "ce-type"), ["com.example.order"]);
        // http.pass_headers decides which of its own pass: with only X-* passing, the
        // message is not taken for a CloudEvent, and its ce-* headers are jetrelay's.
        let only_x = Pass::new(&["X-*".to_string()]);
        let m = ce_passing(&only_x, &event("forged"));
        assert_eq!(get(&m, "ce-id"), ["ORDERS:42"]);
        assert_eq!(get(&m, "ce-type"), ["io.nats.jetstream.message"]);
        // Passing ce-specversion and ce-type but not ce-id: the id is jetrelay's.
        let some = Pass::new(&["ce-specversion".to_string(), "ce-type".to_string()]);
        let m = ce_passing(&some, &event("com.example.order"));
        assert_eq!(get(&m, "ce-id"), ["ORDERS:42"]);
        assert_eq!(get(&m, "ce-type"), ["com.example.order"]);
        // Raw: nothing added.
        let raw = map(
            delivery(&[], None),
            1,
            &Pass::default(),
            RequestFormat::Raw,
            None,
        );
        assert!(get(&raw, "ce-id").is_empty());
    }

    #[test]
    fn names_and_values() {
        assert!(is_valid_name("X-Good_1"));
        for bad in ["", "a b", "a:b", "é", "a\n"] {
            assert!(!is_valid_name(bad), "{bad:?}");
        }
        assert!(is_valid_value(""));
        assert!(is_valid_value("a b\tc"));
        for bad in ["a\rb", "a\nb", "a\0", " lead", "trail "] {
            assert!(!is_valid_value(bad), "{bad:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn every_mapped_header_is_valid(name in "\\PC{0,12}", value in "\\PC{0,20}") {
            let m = map(delivery(&[(&name, &value)], None), 1, &Pass::default(), RequestFormat::Raw, None);
            for (n, v) in &m.headers {
                proptest::prop_assert!(is_valid_name(n) && is_valid_value(v));
            }
        }
    }
}
