//! What the app publishes through jetrelay, as pure functions: the `{"publish": [...]}`
//! document (in an answer, or on the local publish endpoint), the rules it must meet
//! (`publish.allowed_subjects`, `max_messages`, `max_bytes`), and the deterministic
//! message ids that make an answer's outputs exactly-once.
//!
//! An answer's outputs carry `Nats-Msg-Id: jetrelay:<stream>:<consumer>:<sequence>:<i>`:
//! a redelivered input re-sends the same ids, and the target stream (within its
//! `duplicate_window`) stores them once. So an answer may not set `Nats-*` headers
//! itself; the local endpoint may set `Nats-Msg-Id` (its own deduplication), nothing
//! else of the server's, and no id under jetrelay's own prefixes.

use std::time::Duration;

use bytes::Bytes;

use crate::subject;

pub(crate) mod document;

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

    /// Its size on the wire: the payload and the header block as NATS sends it.
    pub fn wire_size(&self) -> usize {
        let block = if self.headers.is_empty() {
            0
        } else {
            crate::message::header_block_len(&self.headers)
        };
        self.payload.len() + block
    }

    /// Its `Nats-Msg-Id`, when it has one.
    pub fn msg_id(&self) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(MSG_ID))
            .map(|(_, v)| v.as_str())
    }
}

/// The most header values one message to publish may carry (each value of a
/// header counts): a document is read into its messages, each header value its own
/// allocations, so their number is what its memory follows; counted while it is read.
pub const MAX_HEADERS: usize = 100;

/// The message id header.
pub const MSG_ID: &str = "Nats-Msg-Id";

/// The content type of an answer that publishes.
pub const CONTENT_TYPE: &str = "application/vnd.jetrelay.publish+json";

/// Why outputs are refused: a permanent failure of the input (or a 4xx on the
/// endpoint), never a publish.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The document does not parse or does not have the documented shape, or a raw
    /// publish names a subject that cannot be published to.
    #[error("malformed publish: {0}")]
    Malformed(String),
    /// A subject is not in `publish.allowed_subjects` (or publishing is off).
    #[error("{0}")]
    NotAllowed(String),
    /// More messages than `publish.max_messages`.
    #[error("more than {max} messages to publish (publish.max_messages is {max})")]
    TooMany {
        /// The limit.
        max: usize,
    },
    /// A message with more header values than [`MAX_HEADERS`].
    #[error("a message to publish has more than {max} header values")]
    TooManyHeaders {
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
            Refusal::TooMany { .. } | Refusal::TooManyHeaders { .. } | Refusal::TooLarge { .. } => {
                "too_large"
            }
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

/// Parses a `{"publish": [...]}` document (an answer's, or the endpoint's), at most
/// `max_messages` messages: read straight into outputs, with no JSON tree (an
/// answer of N bytes costs about N more), and refused as soon as it has one too
/// many.
///
/// # Errors
/// [`Refusal::Malformed`] saying what is wrong (JSON, shape, a subject, a
/// header); [`Refusal::TooMany`].
pub fn parse(body: &[u8], author: Author, max_messages: usize) -> Result<Vec<Output>, Refusal> {
    let seed = document::Seed(document::Document {
        list: document::List {
            author,
            max: max_messages,
        },
    });
    document::read(body, seed).map_err(|e| Refusal::Malformed(format!("not JSON: {e}")))?
}

/// A header an output may carry: a valid HTTP-like name, a one-line value, and no
/// server header but the endpoint's own `Nats-Msg-Id`.
pub(crate) fn check_header(name: &str, values: &[String], author: Author) -> Result<(), String> {
    let valid_name = !name.is_empty() && name.bytes().all(|b| b.is_ascii_graphic() && b != b':');
    if !valid_name {
        return Err(format!("header name {name:?} is not valid"));
    }
    if values.iter().any(|v| v.contains(['\r', '\n'])) {
        return Err(format!("header {name:?} has a line break"));
    }
    let server = name.len() >= 5 && name[..5].eq_ignore_ascii_case("nats-");
    let own_id = author == Author::Endpoint && name.eq_ignore_ascii_case(MSG_ID);
    if own_id && let Some(taken) = values.iter().find(|v| is_own_id(v)) {
        return Err(format!(
            "Nats-Msg-Id {taken:?}: ids under {} are jetrelay's own",
            OWN_ID_PREFIXES.join(", ")
        ));
    }
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

/// The request header prefix that makes a message header on the endpoint's raw
/// publish: `Nats-Header-X-Trace: 7` → `X-Trace: 7`.
pub const HEADER_PREFIX: &str = "nats-header-";

/// The message of a raw publish on the endpoint (`POST /v1/publish/<subject>`): the
/// body as its payload, `Nats-Msg-Id` as its id, `Nats-Header-<name>` request
/// headers as its headers; other request headers are not the message's.
///
/// # Errors
/// [`Refusal::Malformed`] for a subject that cannot be published to, or a header the
/// message may not carry; [`Refusal::TooManyHeaders`] past [`MAX_HEADERS`] values.
pub fn from_request(
    subject: &str,
    request_headers: &[(&str, &str)],
    body: Bytes,
) -> Result<Output, Refusal> {
    subject::validate_publish_subject(subject)
        .map_err(|e| Refusal::Malformed(format!("subject {subject:?} {e}")))?;
    let mut headers = Vec::new();
    for (name, value) in request_headers {
        let own = if name.eq_ignore_ascii_case(MSG_ID) {
            MSG_ID.to_string()
        } else if name.len() > HEADER_PREFIX.len()
            && name.is_char_boundary(HEADER_PREFIX.len())
            && name[..HEADER_PREFIX.len()].eq_ignore_ascii_case(HEADER_PREFIX)
        {
            // HTTP loses the case of header names: the rest goes in canonical form.
            canonical(&name[HEADER_PREFIX.len()..])
        } else {
            continue;
        };
        check_header(&own, &[(*value).to_string()], Author::Endpoint)
            .map_err(Refusal::Malformed)?;
        // The bound of a document's message holds here too (the HTTP server's own
        // cap on request headers is not this room's to rely on).
        if headers.len() == MAX_HEADERS {
            return Err(Refusal::TooManyHeaders { max: MAX_HEADERS });
        }
        headers.push((own, (*value).to_string()));
    }
    Ok(Output {
        subject: subject.to_string(),
        headers,
        payload: body,
    })
}

/// A header name in canonical form: each dash-separated part capitalised
/// (`x-trace` → `X-Trace`).
pub fn canonical(name: &str) -> String {
    name.split('-')
        .map(|part| {
            let mut chars = part.chars();
            match chars.next() {
                Some(first) => {
                    first.to_ascii_uppercase().to_string() + &chars.as_str().to_ascii_lowercase()
                }
                None => String::new(),
            }
        })
        .collect::<Vec<_>>()
        .join("-")
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

/// The message id of an answer's `i`-th output:
/// `jetrelay:<stream>:<consumer>:<sequence>:<i>`. The consumer is in it: two
/// consumers of one stream publishing into one stream must never take each other's
/// outputs for redeliveries of their own.
pub fn answer_id(stream: &str, consumer: &str, sequence: u64, i: usize) -> String {
    format!("jetrelay:{stream}:{consumer}:{sequence}:{i}")
}

/// Gives an answer's outputs their ids (the input's stream, consumer and sequence).
pub fn identify(outputs: &mut [Output], stream: &str, consumer: &str, sequence: u64) {
    for (i, o) in outputs.iter_mut().enumerate() {
        o.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(MSG_ID));
        o.headers
            .push((MSG_ID.to_string(), answer_id(stream, consumer, sequence, i)));
    }
}

/// Gives each output that has no `traceparent` of its own the trace context to
/// continue (`tracestate` and `baggage` with it, where it has none): an output the
/// app gave its own context keeps it.
pub fn carry_trace(
    outputs: &mut [Output],
    traceparent: &str,
    tracestate: Option<&str>,
    baggage: Option<&str>,
) {
    let has = |o: &Output, name: &str| o.headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    for o in outputs.iter_mut().filter(|o| !has(o, "traceparent")) {
        o.headers.push(("traceparent".into(), traceparent.into()));
        if let Some(state) = tracestate
            && !has(o, "tracestate")
        {
            o.headers.push(("tracestate".into(), state.into()));
        }
        if let Some(b) = baggage
            && !has(o, "baggage")
        {
            o.headers.push(("baggage".into(), b.into()));
        }
    }
}

/// The message id prefixes that are jetrelay's own: an answer's outputs
/// (`jetrelay:`), dead letters (`jetrelay-dlq:`) and replays (`jetrelay-replay:`). A
/// caller of the publish endpoint may not use them: an id taken beforehand would
/// make jetrelay take its own output, letter or replay for stored.
pub const OWN_ID_PREFIXES: [&str; 3] = ["jetrelay:", "jetrelay-dlq:", "jetrelay-replay:"];

/// Whether `id` is under one of jetrelay's own prefixes (case-insensitive).
pub fn is_own_id(id: &str) -> bool {
    OWN_ID_PREFIXES.iter().any(|p| {
        id.len() >= p.len() && id.is_char_boundary(p.len()) && id[..p.len()].eq_ignore_ascii_case(p)
    })
}

/// Whether a target stream's duplicate window keeps the outputs' ids long enough:
/// an input whose ack was lost (a crash right after its outputs were stored) comes
/// again after its redelivery delay, and the app answers it within its timeout;
/// `needed` is that time ([`crate::daemon::settings::Publishing::window_needed`]).
pub fn window_covers(window: Duration, needed: Duration) -> bool {
    window >= needed
}

/// A stream that captures a subject, and what publishing to it takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capture {
    /// Its name.
    pub stream: String,
    /// `allow_atomic`: it takes atomic batches.
    pub atomic: bool,
    /// `allow_direct`: it answers direct gets.
    pub direct: bool,
    /// Its `duplicate_window`.
    pub duplicate_window: Duration,
    /// One replica on disk: nats-server (2.12–2.15) stages each atomic batch to such a
    /// stream in a file store of its own, about 7 ms of server CPU a batch
    /// (`bench/results/outbox-*.md`, the publishing benchmark's earlier runs); memory and replicated streams stage in memory.
    pub staged_on_disk: bool,
    /// `allow_batched`: it takes fast-ingest batches (nats-server 2.14+).
    pub batched: bool,
    /// Not there yet: `run` creates it (a managed stream).
    pub planned: bool,
}

impl Capture {
    /// The capture of a stream as `run` will leave it (created, or its subjects
    /// added).
    pub fn planned(spec: &crate::topology::StreamSpec) -> Capture {
        Capture {
            stream: spec.name.clone(),
            atomic: spec.allow_atomic,
            direct: spec.allow_direct,
            duplicate_window: Duration::from_millis(spec.duplicate_window_ms),
            staged_on_disk: spec.replicas == 1 && spec.storage == crate::topology::Storage::File,
            batched: spec.allow_batched,
            planned: true,
        }
    }

    /// `stream S`, or `stream S (to be created)`.
    pub fn named(&self) -> String {
        if self.planned {
            format!("stream {} (to be created)", self.stream)
        } else {
            format!("stream {}", self.stream)
        }
    }
}

/// nats-server's default bound on atomic batches in flight per stream; one over it is
/// refused (10210, `too_many_batches`). The publisher keeps at most this many open.
pub const SERVER_BATCHES_IN_FLIGHT: usize = 50;

/// What publishing takes of the streams it goes to (for `jetrelay check`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Needs {
    /// `publish.atomic`: the stream must take atomic batches.
    pub atomic: bool,
    /// How long the duplicate window must keep the outputs' ids
    /// ([`window_covers`]).
    pub window: Duration,
    /// The source streams `run` manages, whose subjects could take the pattern.
    pub managed: Vec<ManagedStream>,
}

/// A source's managed stream, and where its settings are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagedStream {
    /// The stream.
    pub stream: String,
    /// The key of its table: `topology.managed_stream` for `[source]`,
    /// `sources.<name>.topology.managed_stream` for one of several sources.
    pub key: String,
}

impl Needs {
    /// The key of the table that makes stream `stream` (`topology.managed_stream`
    /// when no source names it).
    fn table_of(&self, stream: &str) -> &str {
        self.managed
            .iter()
            .find(|m| m.stream == stream)
            .map_or("topology.managed_stream", |m| m.key.as_str())
    }
}

/// What `jetrelay check` says about one allowed subject pattern: the streams that
/// capture it (now, or once `run` created them), whether they take what
/// `publish.atomic` sends, and whether their duplicate window outlasts a redelivery.
/// Each line starting with `warning:` is something `run` would not stop for but the
/// user should fix, and says the change that fixes it; `note:` is what is slow.
pub fn findings(pattern: &str, streams: &[Capture], needs: &Needs) -> Vec<String> {
    let atomic = needs.atomic;
    if streams.is_empty() {
        let mut fix = format!(
            "create a stream with subjects [\"{pattern}\"]{}",
            if atomic {
                " and allow_atomic: true"
            } else {
                ""
            }
        );
        for m in &needs.managed {
            fix.push_str(&format!(
                ", or add \"{pattern}\" to {}.subjects (stream {})",
                m.key, m.stream
            ));
        }
        return vec![format!(
            "warning: publish {pattern}: no stream captures it: publishing there fails (the input is retried). Change: {fix}"
        )];
    }
    let mut lines = Vec::new();
    if streams.len() > 1 && atomic {
        let names: Vec<&str> = streams.iter().map(|s| s.stream.as_str()).collect();
        lines.push(format!(
            "warning: publish {pattern}: captured by {} streams ({}); an answer publishing to two of them in one atomic batch fails. Change: let one stream capture it",
            names.len(),
            names.join(", ")
        ));
    }
    for s in streams {
        let name = s.named();
        lines.push(format!(
            "publish {pattern}: {name}: atomic publish {}, duplicate window {}",
            if s.atomic { "allowed" } else { "not allowed" },
            seconds(s.duplicate_window)
        ));
        if atomic && !s.atomic {
            let how = if s.planned {
                format!("{}.allow_atomic = true", needs.table_of(&s.stream))
            } else {
                format!(
                    "allow_atomic: true on stream {} (jetrelay never changes a stream that exists)",
                    s.stream
                )
            };
            lines.push(format!(
                "warning: publish {pattern}: {name} does not take atomic batches, so every answer that publishes there is refused. Change: {how}, or publish.atomic = false"
            ));
        }
        if atomic && s.atomic && s.staged_on_disk {
            lines.push(format!(
                "note: publish {pattern}: {name} is one replica on disk: nats-server stages every atomic batch to it on disk (about 7 ms of server CPU each: ~100 answers/s at most). A memory or replicated stream is faster, or publish.atomic = false"
            ));
        }
        if !window_covers(s.duplicate_window, needs.window) {
            lines.push(format!(
                "warning: publish {pattern}: {name}'s duplicate window ({}) is shorter than an input's redelivery takes (the ack wait, or the longest backoff_ms, plus http.timeout_ms: {}): the outputs of an input whose ack was lost in a crash would be stored twice. Change: duplicate_window of at least {} on stream {}",
                seconds(s.duplicate_window),
                seconds(needs.window),
                seconds(needs.window),
                s.stream
            ));
        }
    }
    lines
}

fn seconds(d: Duration) -> String {
    format!("{}s", d.as_secs_f64())
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
        let ok = |body: &str| parse(body.as_bytes(), Author::Answer, 10).unwrap();
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

        let bad = |body: &str, author| match parse(body.as_bytes(), author, 10) {
            Err(Refusal::Malformed(why)) => why,
            other => panic!("{body}: {other:?}"),
        };
        let long = format!(
            r#"{{"publish": [{{"subject": "a.{}"}}]}}"#,
            "x".repeat(3000)
        );
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
            (long.as_str(), "at most 2048"),
        ] {
            let got = bad(body, Author::Answer);
            assert!(got.contains(why), "{body}: {got}");
        }
        // The endpoint may set its own message id, and no other server header.
        let out = parse(
            br#"{"publish": [{"subject": "a", "headers": {"Nats-Msg-Id": "k1"}}]}"#,
            Author::Endpoint,
            10,
        )
        .unwrap();
        assert_eq!(out[0].msg_id(), Some("k1"));
        let why = bad(
            r#"{"publish": [{"subject": "a", "headers": {"Nats-Expected-Stream": "S"}}]}"#,
            Author::Endpoint,
        );
        assert!(why.contains("only Nats-Msg-Id"), "{why}");
    }

    #[test]
    fn header_values_are_counted_as_they_are_read() {
        let doc = |headers: String| {
            format!(r#"{{"publish": [{{"subject": "a", "headers": {headers}}}]}}"#)
        };
        let list = |n: usize| format!(r#"{{"X-Name": [{}]}}"#, vec!["\"\""; n].join(","));
        let names = |n: usize| {
            let each: Vec<String> = (0..n).map(|i| format!(r#""X-{i}": "v""#)).collect();
            format!("{{{}}}", each.join(","))
        };
        let read = |text: String| parse(text.as_bytes(), Author::Endpoint, 10);
        let out = read(doc(list(MAX_HEADERS))).unwrap();
        assert_eq!(out[0].headers.len(), MAX_HEADERS);
        assert_eq!(
            read(doc(names(MAX_HEADERS))).unwrap()[0].headers.len(),
            MAX_HEADERS
        );
        let too_many = Err(Refusal::TooManyHeaders { max: MAX_HEADERS });
        assert_eq!(read(doc(list(MAX_HEADERS + 1))), too_many);
        assert_eq!(read(doc(names(MAX_HEADERS + 1))), too_many);
        // The audit's document: 719,030 empty strings in 2.1 MB.
        let audit = doc(list(719_030));
        assert!(audit.len() > 2_100_000, "{}", audit.len());
        assert_eq!(read(audit), too_many);
        assert_eq!(too_many.clone().unwrap_err().label(), "too_large");
        // Split over names, and over two "headers" keys: one count per message.
        let split = format!(
            r#"{{"publish": [{{"subject": "a", "headers": {}, "headers": {}}}]}}"#,
            list(60),
            list(60)
        );
        assert_eq!(read(split), too_many);
        // What is wrong first stays what is said.
        let bad_then_many = doc(format!(
            r#"{{"X": [1], "Y": [{}]}}"#,
            vec!["\"\""; 200].join(",")
        ));
        assert!(
            matches!(read(bad_then_many), Err(Refusal::Malformed(why)) if why.contains("values are strings"))
        );
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
            Refusal::TooMany { max: 3 }
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
    fn raw_publish_requests_table() {
        let o = from_request(
            "orders.shipped",
            &[
                ("content-type", "text/plain"),
                ("Nats-Msg-Id", "k-1"),
                ("nats-header-x-trace", "7"),
                ("Nats-Header-Content-Type", "application/json"),
                ("authorization", "Bearer secret"),
            ],
            Bytes::from_static(b"hi"),
        )
        .unwrap();
        assert_eq!(o.subject, "orders.shipped");
        assert_eq!(o.payload.as_ref(), b"hi");
        assert_eq!(
            o.headers,
            [
                ("Nats-Msg-Id", "k-1"),
                ("X-Trace", "7"),
                ("Content-Type", "application/json")
            ]
            .map(|(n, v)| (n.to_string(), v.to_string())),
            "only the id and Nats-Header-* become message headers"
        );
        let bad = |subject: &str, headers: &[(&str, &str)]| {
            from_request(subject, headers, Bytes::new()).unwrap_err()
        };
        assert!(matches!(bad("a.*", &[]), Refusal::Malformed(_)));
        assert!(matches!(bad("", &[]), Refusal::Malformed(_)));
        let server = bad("a", &[("Nats-Header-Nats-Expected-Stream", "S")]);
        assert!(server.to_string().contains("only Nats-Msg-Id"), "{server}");
        assert_eq!(canonical("x-TRACE-id"), "X-Trace-Id");
        assert_eq!(canonical("etag"), "Etag");
        assert!(
            from_request("a", &[("Nats-Header-", "x")], Bytes::new())
                .unwrap()
                .headers
                .is_empty()
        );
    }

    /// Found by fuzzing (fuzz/corpus/app_answers/crash-bad71dbd…): a raw publish
    /// kept every `Nats-Header-*` and `Nats-Msg-Id` it was given, past the
    /// [`MAX_HEADERS`] a document's message may carry.
    #[test]
    fn a_raw_publish_carries_at_most_max_headers_values() {
        let names: Vec<String> = (0..=MAX_HEADERS)
            .map(|i| format!("Nats-Header-X-{i}"))
            .collect();
        let headers = |n: usize| -> Vec<(&str, &str)> {
            names[..n].iter().map(|h| (h.as_str(), "v")).collect()
        };
        let o = from_request("a", &headers(MAX_HEADERS), Bytes::new()).unwrap();
        assert_eq!(o.headers.len(), MAX_HEADERS);
        assert_eq!(
            from_request("a", &headers(MAX_HEADERS + 1), Bytes::new()),
            Err(Refusal::TooManyHeaders { max: MAX_HEADERS })
        );
        let ids = vec![("Nats-Msg-Id", "k"); MAX_HEADERS + 1];
        assert_eq!(
            from_request("a", &ids, Bytes::new()),
            Err(Refusal::TooManyHeaders { max: MAX_HEADERS })
        );
    }

    #[test]
    fn answer_ids_are_deterministic_and_replace_any_other() {
        let mut outs = vec![output("a", ""), output("b", "")];
        outs[1]
            .headers
            .push(("nats-msg-id".into(), "theirs".into()));
        identify(&mut outs, "ORDERS", "worker", 42);
        assert_eq!(outs[0].msg_id(), Some("jetrelay:ORDERS:worker:42:0"));
        assert_eq!(outs[1].msg_id(), Some("jetrelay:ORDERS:worker:42:1"));
        assert_eq!(outs[1].headers.len(), 1);
        identify(&mut outs, "ORDERS", "worker", 42);
        assert_eq!(
            outs[1].msg_id(),
            Some("jetrelay:ORDERS:worker:42:1"),
            "idempotent"
        );
    }

    #[test]
    fn check_findings_table() {
        let s = Duration::from_secs;
        let capture = |name: &str, atomic, window| Capture {
            stream: name.into(),
            atomic,
            direct: false,
            duplicate_window: s(window),
            staged_on_disk: false,
            batched: false,
            planned: false,
        };
        let warnings = |lines: Vec<String>| -> Vec<String> {
            lines
                .into_iter()
                .filter(|l| l.starts_with("warning:"))
                .collect()
        };
        let needs = |atomic| Needs {
            atomic,
            window: s(60),
            managed: Vec::new(),
        };
        // (streams, atomic, the warnings' telltale words)
        type Case = (Vec<Capture>, bool, Vec<&'static str>);
        let cases: Vec<Case> = vec![
            (vec![capture("OUT", true, 120)], true, vec![]),
            (vec![capture("OUT", true, 60)], true, vec![]),
            (
                vec![],
                true,
                vec![
                    "no stream captures it: publishing there fails (the input is retried). Change: create a stream with subjects [\"out.>\"] and allow_atomic: true",
                ],
            ),
            (
                vec![capture("OUT", false, 120)],
                true,
                vec!["Change: allow_atomic: true on stream OUT"],
            ),
            (vec![capture("OUT", false, 120)], false, vec![]),
            (
                vec![capture("OUT", true, 59)],
                true,
                vec![
                    "duplicate window (59s) is shorter",
                    "Change: duplicate_window of at least 60s on stream OUT",
                ],
            ),
            (
                vec![capture("A", true, 120), capture("B", true, 120)],
                true,
                vec!["2 streams (A, B)"],
            ),
        ];
        for (streams, atomic, want) in cases {
            let got = warnings(findings("out.>", &streams, &needs(atomic)));
            // One warning a case at most; its telltale words.
            assert_eq!(got.len(), usize::from(!want.is_empty()), "{got:?}");
            for word in &want {
                assert!(got.iter().any(|l| l.contains(word)), "{got:?} lacks {word}");
            }
        }
        let lines = findings("out.>", &[capture("OUT", true, 120)], &needs(true));
        assert_eq!(
            lines,
            ["publish out.>: stream OUT: atomic publish allowed, duplicate window 120s"]
        );
        // A stream run creates, and the managed stream that could take the pattern.
        let planned = Capture {
            planned: true,
            ..capture("ORDERS", false, 120)
        };
        let got = warnings(findings("out.>", &[planned], &needs(true)));
        assert!(
            got[0].contains("stream ORDERS (to be created) does not take atomic batches")
                && got[0].contains("Change: topology.managed_stream.allow_atomic = true"),
            "{got:?}"
        );
        let managed = Needs {
            managed: vec![ManagedStream {
                stream: "ORDERS".into(),
                key: "topology.managed_stream".into(),
            }],
            ..needs(true)
        };
        let got = warnings(findings("out.>", &[], &managed));
        assert!(
            got[0]
                .ends_with("or add \"out.>\" to topology.managed_stream.subjects (stream ORDERS)"),
            "{got:?}"
        );
        // Of several sources, each managed stream is named by its source's table.
        let two = Needs {
            managed: ["orders", "audit"]
                .map(|n| ManagedStream {
                    stream: n.to_uppercase(),
                    key: format!("sources.{n}.topology.managed_stream"),
                })
                .to_vec(),
            ..needs(true)
        };
        let planned_audit = Capture {
            planned: true,
            ..capture("AUDIT", false, 120)
        };
        let got = warnings(findings("out.>", &[planned_audit], &two));
        assert!(
            got[0].contains("Change: sources.audit.topology.managed_stream.allow_atomic = true,"),
            "{got:?}"
        );
        let got = warnings(findings("out.>", &[], &two));
        assert!(
            got[0].ends_with(
                "or add \"out.>\" to sources.orders.topology.managed_stream.subjects (stream ORDERS), or add \"out.>\" to sources.audit.topology.managed_stream.subjects (stream AUDIT)"
            ),
            "{got:?}"
        );
        // What nats-server makes slow, for atomic batches only.
        let on_disk = Capture {
            staged_on_disk: true,
            ..capture("OUT", true, 120)
        };
        // A note, not a warning: it is slow, not wrong.
        let notes = |lines: Vec<String>| -> Vec<String> {
            lines
                .into_iter()
                .filter(|l| l.starts_with("note:"))
                .collect()
        };
        let lines = findings("out.>", std::slice::from_ref(&on_disk), &needs(true));
        assert!(warnings(lines.clone()).is_empty(), "{lines:?}");
        let got = notes(lines);
        assert!(
            got.len() == 1 && got[0].contains("one replica on disk"),
            "{got:?}"
        );
        assert!(notes(findings("out.>", &[on_disk], &needs(false))).is_empty());
    }

    #[test]
    fn windows_table() {
        let s = Duration::from_secs;
        assert!(window_covers(s(120), s(60)));
        assert!(window_covers(s(60), s(60)));
        assert!(!window_covers(s(59), s(60)));
    }
}
