//! The fuzz targets' entry functions: each takes the bytes libFuzzer made and feeds
//! them to one family of jetrelay's parsers of bytes others write, asserting what
//! must hold beyond "no panic" (a round trip, a bound). The targets in
//! `fuzz/fuzz_targets/` call these, and so does `tests/fuzz_corpora.rs` (which
//! includes this file by path) for every file of `fuzz/corpus/<target>/`, so that
//! CI replays the corpora on stable without cargo-fuzz. Only crates the main crate
//! already has are used here.

use std::time::{Duration, SystemTime};

use bytes::Bytes;

use jetrelay::app::batch::{self, AnswerBounds};
use jetrelay::config::Config;
use jetrelay::daemon::settings::Settings;
use jetrelay::dead_letter::stored::{self, Selection, Stored};
use jetrelay::group::model::{Flavour, GroupConfig};
use jetrelay::group::records;
use jetrelay::message::{Meta, Origin, Ttl};
use jetrelay::outputs::{self, Author, Output, Refusal};
use jetrelay::policy::{AppAction, StatusSet, parse_retry_after};
use jetrelay::printable::{printable, printable_lines};
use jetrelay::seam::Ordering;
use jetrelay::subject;
use jetrelay::trace::context as trace;

pub mod headers;

/// A target's entry function.
pub type Entry = fn(&[u8]);

/// Every target: its name (its `[[bin]]` in `fuzz/Cargo.toml` and its corpus folder)
/// and its entry function.
pub const TARGETS: &[(&str, Entry)] = &[
    ("nats_headers", headers::nats_headers),
    ("app_answers", app_answers),
    ("trace_context", trace_context),
    ("config", config),
    ("header_values", header_values),
    ("stored_records", stored_records),
    ("token_answers", token_answers),
    ("cloudevents", cloudevents),
    ("route_when", route_when),
];

/// A message as the targets write it: the first line its subject, then `name: value`
/// lines up to an empty line (a line without `:` is a name with an empty value),
/// then the payload. Lines end with `\n`; the text is read as UTF-8, lossily.
#[derive(Debug, Default)]
pub struct Framed {
    /// The first line.
    pub subject: String,
    /// The header lines.
    pub headers: Vec<(String, String)>,
    /// What follows the empty line, as it came.
    pub payload: Vec<u8>,
}

impl Framed {
    /// Splits `data` as described on the type.
    pub fn read(data: &[u8]) -> Framed {
        let (head, payload) = match find(data, b"\n\n") {
            Some(at) => (&data[..at], data[at + 2..].to_vec()),
            None => (data, Vec::new()),
        };
        let text = String::from_utf8_lossy(head);
        let mut lines = text.split('\n');
        let subject = lines.next().unwrap_or_default().to_string();
        let headers = lines
            .map(|l| match l.split_once(':') {
                Some((n, v)) => (n.to_string(), v.trim_start_matches(' ').to_string()),
                None => (l.to_string(), String::new()),
            })
            .collect();
        Framed {
            subject,
            headers,
            payload,
        }
    }
}

fn find(data: &[u8], needle: &[u8]) -> Option<usize> {
    data.windows(needle.len()).position(|w| w == needle)
}

/// The first byte (a choice among the parsers of one target), and the rest.
fn choice(data: &[u8]) -> (u8, &[u8]) {
    match data.split_first() {
        Some((c, rest)) => (*c, rest),
        None => (0, data),
    }
}

// === app_answers ===

/// The app's answers: a single answer's `{"publish": [...]}` document (and the
/// publish endpoint's), a batch answer document, and the publish endpoint's raw
/// request (`POST /v1/publish/<subject>`). The first byte picks which, and the
/// bounds; the rest is the body (for the raw request: a [`Framed`] message).
pub fn app_answers(data: &[u8]) {
    let (c, body) = choice(data);
    let max = usize::from(c >> 3);
    match c % 4 {
        0 | 1 => {
            let author = if c % 4 == 0 {
                Author::Answer
            } else {
                Author::Endpoint
            };
            if let Ok(list) = outputs::parse(body, author, max) {
                check_outputs(&list, max, author);
            }
        }
        2 => {
            let bounds = AnswerBounds {
                results: max,
                outputs: usize::from(c >> 6),
            };
            if let batch::Answer::Results(results) = batch::answer(body, bounds) {
                assert!(
                    results.len() <= bounds.results,
                    "more results than messages"
                );
                for r in &results {
                    if let Some(Ok(list)) = &r.outputs {
                        check_outputs(list, bounds.outputs, Author::Answer);
                    }
                }
            }
        }
        _ => {
            let m = Framed::read(body);
            let named: Vec<(&str, &str)> = m
                .headers
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_str()))
                .collect();
            if let Ok(o) = outputs::from_request(&m.subject, &named, Bytes::from(m.payload)) {
                check_outputs(&[o], 1, Author::Endpoint);
            }
        }
    }
}

/// What every list of outputs that parsed must be: within its bound, each subject
/// one that may be published to, each header one line; and the same list again when
/// written back as a document.
fn check_outputs(list: &[Output], max: usize, author: Author) {
    assert!(
        list.len() <= max,
        "{} outputs over the bound {max}",
        list.len()
    );
    for o in list {
        assert!(
            subject::validate_publish_subject(&o.subject).is_ok(),
            "{:?}",
            o.subject
        );
        assert!(
            o.headers.len() <= outputs::MAX_HEADERS,
            "too many header values"
        );
        for (n, v) in &o.headers {
            assert!(!n.is_empty() && n.bytes().all(|b| b.is_ascii_graphic() && b != b':'));
            assert!(!v.contains(['\r', '\n']), "header {n:?} has a line break");
        }
    }
    let again = outputs::parse(&document(list), author, max);
    match again {
        Ok(again) => assert_eq!(sorted(list), sorted(&again), "not the same outputs again"),
        Err(Refusal::Malformed(why)) => panic!("outputs written back do not parse: {why}"),
        Err(e) => panic!("outputs written back refused: {e:?}"),
    }
}

/// The outputs as a `{"publish": [...]}` document, each header's values in a list.
fn document(list: &[Output]) -> Vec<u8> {
    use base64::Engine;
    let messages: Vec<serde_json::Value> = list
        .iter()
        .map(|o| {
            let mut headers = serde_json::Map::new();
            for (n, v) in &o.headers {
                let values = headers
                    .entry(n.clone())
                    .or_insert_with(|| serde_json::Value::Array(Vec::new()));
                if let serde_json::Value::Array(a) = values {
                    a.push(serde_json::Value::String(v.clone()));
                }
            }
            serde_json::json!({
                "subject": o.subject,
                "headers": headers,
                "data_base64": base64::engine::general_purpose::STANDARD.encode(&o.payload),
            })
        })
        .collect();
    serde_json::to_vec(&serde_json::json!({ "publish": messages })).unwrap_or_default()
}

/// An output with its headers in order, to compare lists whatever the headers' order.
type Compared = (String, Vec<(String, String)>, Bytes);

fn sorted(list: &[Output]) -> Vec<Compared> {
    list.iter()
        .map(|o| {
            let mut h = o.headers.clone();
            h.sort();
            (o.subject.clone(), h, o.payload.clone())
        })
        .collect()
}

// === trace_context ===

/// Trace context headers (`traceparent`, `tracestate`, `baggage`) as a message
/// brings them: a [`Framed`] message's headers. What is kept is within the W3C
/// limits, and a `traceparent` read is written back as it was read.
pub fn trace_context(data: &[u8]) {
    let m = Framed::read(data);
    let pairs = m.headers.iter().map(|(n, v)| (n.as_str(), v.as_str()));
    let inbound = trace::inbound(pairs);
    if let Some(state) = &inbound.tracestate {
        assert!(
            state.len() <= trace::MAX_TRACESTATE,
            "tracestate of {} bytes",
            state.len()
        );
        assert!(state.split(',').count() <= trace::MAX_TRACESTATE_MEMBERS);
    }
    if let Some(b) = &inbound.baggage {
        assert!(
            b.len() <= trace::MAX_BAGGAGE,
            "baggage of {} bytes",
            b.len()
        );
    }
    if let Some(ctx) = inbound.context() {
        let written = ctx.traceparent();
        let back = trace::parse_traceparent(&written);
        assert_eq!(
            back,
            Some((ctx.trace_id, ctx.span_id, ctx.flags)),
            "{written}"
        );
        let child = ctx.child([7; 8]);
        assert!(trace::parse_traceparent(&child.traceparent()).is_some());
    }
    let direct = trace::from_headers(&m.headers);
    if let Some(ctx) = direct {
        assert!(trace::parse_traceparent(&ctx.traceparent()).is_some());
    }
    // Each header value alone, as a traceparent and as a tracestate.
    for (_, v) in &m.headers {
        if let Some((t, s, _)) = trace::parse_traceparent(v) {
            assert!(t != [0; 16] && s != [0; 8]);
        }
        if let Some(state) = trace::parse_tracestate([v.as_str()]) {
            assert!(state.len() <= trace::MAX_TRACESTATE);
            // What was kept is valid itself, and kept whole.
            assert_eq!(
                trace::parse_tracestate([state.as_str()]).as_deref(),
                Some(state.as_str())
            );
        }
    }
}

// === config ===

/// The config file and the environment, `JETRELAY_` and OpenTelemetry's `OTEL_*`
/// variables, read as `jetrelay run` reads them (`Config::load`, then
/// `Settings::from_config`), in a figment `Jail` (its own directory and
/// environment). The bytes up to the first NUL are the file; after it, `KEY=VALUE`
/// lines (a key given the prefix `JETRELAY_` unless it starts with `OTEL_`). An
/// error says something, and never the values of the OTLP headers (tokens).
pub fn config(data: &[u8]) {
    let read = config_read(data);
    if let Some(Err(shown)) = read {
        assert!(!shown.is_empty(), "an error that says nothing");
        let at = data.iter().position(|b| *b == 0);
        let file = String::from_utf8_lossy(at.map_or(data, |at| &data[..at]));
        let vars = env_vars(at.map_or(&[][..], |at| &data[at + 1..]));
        // A token-like value (12 or more letters and digits, a digit among them) that
        // the input says nowhere else: an error that shows it showed the header.
        let token_like = |v: &str| {
            v.len() >= 12
                && v.bytes().all(|b| b.is_ascii_alphanumeric())
                && v.bytes().any(|b| b.is_ascii_digit())
                && !file.contains(v)
                && !vars.iter().any(|(k, _)| k.contains(v))
        };
        for (k, v) in &vars {
            if !k.starts_with("OTEL_") || !k.ends_with("_HEADERS") {
                continue;
            }
            for (_, value) in v.split(',').filter_map(|p| p.split_once('=')) {
                let value = value.trim();
                assert!(
                    !token_like(value) || !shown.contains(value),
                    "{k}'s value shown: {shown}"
                );
            }
        }
    }
}

/// What [`config`] reads: `None` when the jail could not be made, else the settings'
/// error as printed (`Ok` when they were made).
pub fn config_read(data: &[u8]) -> Option<Result<(), String>> {
    let (file, env) = match data.iter().position(|b| *b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    let vars = env_vars(env);
    let mut shown = None;
    // The closure's own errors (a file it could not write) are the jail's; what the
    // config says is carried out in `shown`. figment fixes the closure's error type.
    #[allow(clippy::result_large_err)]
    let jailed = figment::Jail::try_with(|jail| {
        let path = jail.directory().join("jetrelay.toml");
        std::fs::write(&path, file).map_err(|e| e.to_string())?;
        for (k, v) in &vars {
            // OpenTelemetry's own variables as they are named; the rest as ours.
            if k.starts_with("OTEL_") {
                jail.set_env(k, v);
            } else {
                jail.set_env(format!("JETRELAY_{k}"), v);
            }
        }
        shown = Some(
            Config::load(Some(&path))
                .and_then(|c| Settings::from_config(&c))
                .map(|_| ())
                .map_err(|e| e.to_string()),
        );
        Ok(())
    });
    jailed.ok().and(shown)
}

/// `KEY=VALUE` lines that the environment can hold (a key with no `=` and no NUL,
/// not empty), at most 16.
fn env_vars(env: &[u8]) -> Vec<(String, String)> {
    String::from_utf8_lossy(env)
        .split('\n')
        .filter_map(|l| l.split_once('='))
        .filter(|(k, v)| !k.is_empty() && !k.contains(['\0', '=']) && !v.contains('\0'))
        .take(16)
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

// === header_values ===

/// The small values others write: the app's `Retry-After` and `Jetrelay-Action`, a
/// message's `Nats-TTL`, `Nats-Stream-Source` and `$JS.ACK` reply subject, durations
/// as people type them (`/drain?wait=`, `pause --for`), `--seq` and `--since` of
/// `jetrelay dlq`, `delivery.ordering`, status patterns, `group` member mappings,
/// the admin port's `Authorization`, and text made printable. The first byte picks
/// which; the rest is the value (UTF-8, lossily).
pub fn header_values(data: &[u8]) {
    let (c, rest) = choice(data);
    let text = String::from_utf8_lossy(rest);
    let v = text.as_ref();
    match c % 14 {
        0 => {
            let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_780_000_000);
            let _ = parse_retry_after(v, now);
        }
        1 => {
            if let Some(a) = AppAction::parse(v) {
                assert_eq!(AppAction::parse(a.name()), Some(a));
            }
        }
        2 => {
            if let Some(Ttl::After(d)) = Ttl::parse(v) {
                assert!(d >= Duration::from_secs(1));
            }
        }
        3 => {
            if let Ok(m) = Meta::from_ack_subject(v) {
                let back = format!(
                    "$JS.ACK.{}.{}.{}.{}.{}.{}.{}",
                    m.stream,
                    m.consumer,
                    m.delivered,
                    m.stream_seq,
                    m.consumer_seq,
                    m.published.unix_timestamp_nanos(),
                    m.pending
                );
                // The delivery count saturates at u32::MAX; the rest reads back.
                if m.delivered < u32::MAX && !m.stream.contains('.') && !m.consumer.contains('.') {
                    assert_eq!(Meta::from_ack_subject(&back), Ok(m), "{back}");
                }
            }
        }
        4 => {
            let (stream, value) = v.split_once('\n').unwrap_or(("ORDERS", v));
            if let Some(o) = Origin::from_stream_source(value, stream) {
                assert_eq!(o.stream, stream);
            }
        }
        5 => durations(v),
        6 => {
            if let Ok((a, b)) = stored::parse_seqs(v) {
                assert!(a <= b, "--seq {v:?} read as {a}-{b}");
            }
        }
        7 => {
            let now = time::OffsetDateTime::from_unix_timestamp(1_780_000_000)
                .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
            std::hint::black_box(stored::parse_since(v, now)).ok();
        }
        8 => {
            if let Ok(o) = Ordering::parse(v) {
                std::hint::black_box(format!("{o:?}"));
            }
        }
        9 => {
            let patterns: Vec<&str> = v.split(',').collect();
            if let Ok(set) = StatusSet::parse(&patterns) {
                for s in [100, 200, 404, 500, 599] {
                    let _ = set.contains(s);
                }
            }
        }
        10 => {
            let entries: Vec<String> = v.split('\n').map(str::to_string).collect();
            std::hint::black_box(jetrelay::cli::group::parse_mappings(&entries)).ok();
        }
        11 => {
            let caller = jetrelay::ops::drain::Caller {
                authorization: Some(v),
                loopback: c & 16 != 0,
                browser: c & 32 != 0,
                local_host: c & 64 != 0,
            };
            let granted = jetrelay::ops::drain::may_drain(Some("s3cret"), caller);
            if granted {
                assert!(v.contains("s3cret"), "{v:?} granted without the token");
            }
        }
        12 => {
            // A `[http.signing]` secret: a key within the specification's bounds, and
            // a signature of one `v1,<base64 of 32 bytes>`.
            if let Ok(key) = jetrelay::app::signing::Key::parse(v) {
                let sig = jetrelay::app::signing::signature(&[key], "id", 1, rest);
                assert!(sig.starts_with("v1,") && sig.len() == 3 + 44, "{sig}");
            }
        }
        _ => {
            for shown in [printable(v), printable_lines(v)] {
                assert!(
                    !shown
                        .chars()
                        .any(|ch| ch.is_control() && ch != '\n' && ch != '\t'),
                    "{shown:?} still has a control character"
                );
            }
            assert!(!printable(v).contains('\n'));
        }
    }
}

fn durations(v: &str) {
    if let Ok(d) = jetrelay::ops::drain::parse_wait(v) {
        assert!(
            d > Duration::ZERO && d <= jetrelay::ops::drain::MAX_WAIT,
            "{d:?}"
        );
    }
    if let Ok(d) = jetrelay::cli::pause::parse_duration("--for", v) {
        assert!(d.is_positive(), "{d:?}");
    }
    let max = Duration::from_secs(7 * 86_400);
    if let Ok(d) = jetrelay::duration::parse(v, true, max, "too long") {
        assert!(d > Duration::ZERO && d <= max, "{d:?}");
    }
}

// === stored_records ===

/// What jetrelay reads back from streams and buckets others may write: a dead letter
/// (a [`Framed`] message: its first line the DLQ subject), a group's config in the
/// pcgroups KV buckets (static and elastic), jetrelay's group-wide pause record,
/// and the discovery replies `jetrelay ps` reads; and a letter jetrelay writes for
/// any message, read back. The first byte picks which.
pub fn stored_records(data: &[u8]) {
    let (c, rest) = choice(data);
    match c % 5 {
        0 => dead_letter(rest, c),
        4 => letter_written_back(rest, c),
        1 => {
            let flavour = if c & 4 == 0 {
                Flavour::Static
            } else {
                Flavour::Elastic
            };
            if let Ok(g) = GroupConfig::parse(flavour, rest) {
                config_written_back(flavour, &g);
            }
        }
        2 => {
            if let Ok(t) = records::read_pause(rest) {
                let back = records::pause_value(t);
                assert_eq!(records::read_pause(&back), Ok(t));
            }
        }
        _ => discovery(rest),
    }
}

/// A letter jetrelay writes for a [`Framed`] message (a text after its payload's
/// first NUL is the reason), read back: it verifies, and says what was written.
fn letter_written_back(rest: &[u8], c: u8) {
    use jetrelay::dead_letter::{self, DeadLetter, Shed};
    use jetrelay::message::{Delivery, Message};
    let m = Framed::read(rest);
    let (payload, reason) = match m.payload.iter().position(|b| *b == 0) {
        Some(at) => (
            m.payload[..at].to_vec(),
            String::from_utf8_lossy(&m.payload[at + 1..]).into_owned(),
        ),
        None => (m.payload.clone(), "max_deliver".to_string()),
    };
    let meta = Meta::from_ack_subject("$JS.ACK.ORDERS.worker.3.42.42.1780000000000000000.0");
    let delivery = Delivery {
        message: Message {
            subject: m.subject.clone(),
            headers: m.headers,
            payload: Bytes::from(payload),
        },
        meta,
        partition: (c & 8 != 0).then_some(u32::from(c >> 4)),
        app_subject: m.subject,
        origin: None,
        flaw: None,
    };
    let dl = DeadLetter {
        delivery: &delivery,
        attempts: 3,
        last_status: (c & 16 != 0).then_some(500),
        reason: &reason,
        at: time::OffsetDateTime::from_unix_timestamp(1_780_000_000)
            .unwrap_or(time::OffsetDateTime::UNIX_EPOCH),
    };
    let max_payload = if c & 32 != 0 { 1024 } else { 1 << 20 };
    let Some(letter) = dead_letter::letter(&dl, max_payload, Shed::Nothing) else {
        return;
    };
    let stored = Stored {
        seq: 7,
        subject: "DLQ.orders".to_string(),
        time: "2026-12-06T11:00:00Z".to_string(),
        headers: letter.headers,
        payload: if letter.with_payload {
            delivery.message.payload.clone()
        } else {
            Bytes::new()
        },
    };
    if let Err(why) = stored::verify(&stored) {
        panic!("a letter jetrelay wrote does not verify: {why}");
    }
    let e = stored::entry(&stored);
    assert_eq!(e.stream.as_deref(), Some("ORDERS"));
    assert_eq!(e.consumer.as_deref(), Some("worker"));
    assert_eq!(e.sequence, Some(42));
    assert_eq!(e.subject, delivery.app_subject);
    assert_eq!(e.partition, delivery.partition);
    assert_eq!(e.status, dl.last_status);
    assert_eq!(e.delivered, Some(3));
    if letter.shed == Shed::Nothing {
        assert_eq!(e.bytes, delivery.message.payload.len());
    }
}

/// A group config written back reads back as the same config (its shape, its
/// membership), and from the second write on as the same bytes: the first may
/// differ in form only (a stored object left empty is written as a new config).
fn config_written_back(flavour: Flavour, g: &GroupConfig) {
    let json = g.to_json();
    let again = match GroupConfig::parse(flavour, &json) {
        Ok(again) => again,
        Err(e) => panic!("a config written back does not parse: {e}"),
    };
    assert!(again.same_shape(g), "not the same shape again");
    assert_eq!(again.members, g.members);
    assert_eq!(again.member_mappings, g.member_mappings);
    let twice = again.to_json();
    match GroupConfig::parse(flavour, &twice) {
        Ok(third) => assert_eq!(third.to_json(), twice, "not the same bytes again"),
        Err(e) => panic!("a config written back twice does not parse: {e}"),
    }
}

fn dead_letter(rest: &[u8], c: u8) {
    let m = Framed::read(rest);
    let stored = Stored {
        seq: u64::from(c),
        subject: m.subject,
        time: "2026-12-06T11:00:00.123456789Z".to_string(),
        headers: m.headers,
        payload: Bytes::from(m.payload),
    };
    let is = stored::is_letter(&stored);
    let verified = stored::verify(&stored);
    let e = stored::entry(&stored);
    assert_eq!(e.bytes, stored.payload.len());
    assert!(serde_json::to_string(&e).is_ok());
    assert!(
        Selection::default().matches(&e),
        "selecting nothing in particular selects all"
    );
    if let Ok(out) = stored::replay(&stored, "DLQ", None) {
        assert!(
            verified.is_ok() && is,
            "replayed a letter that does not verify"
        );
        assert!(subject::validate_publish_subject(&out.subject).is_ok());
        assert!(!out.subject.starts_with('$'));
    }
}

/// Replies as `jetrelay ps` reads them: one answer a line, INFO answers, taken within
/// its bounds; every string it prints escaped.
fn discovery(rest: &[u8]) {
    let mut infos = jetrelay::cli::ps::Infos::default();
    for answer in rest.split(|b| *b == b'\n') {
        infos.take(answer);
    }
    let none = std::collections::BTreeMap::new();
    let rows = jetrelay::cli::ps::rows(&infos, &none, &none, Duration::from_secs(1));
    let table = jetrelay::cli::ps::table(&rows);
    assert!(!table.is_empty());
    assert!(
        !table.chars().any(|c| c.is_control() && c != '\n'),
        "a control character reached the table"
    );
}

// === token_answers ===

/// An OAuth2 token endpoint's answer (`[http.oauth2]`): a token read is one the app's
/// `Authorization` can carry, within its bound, and kept no longer than it lives.
pub fn token_answers(data: &[u8]) {
    use jetrelay::http::oauth2::{WITHOUT_EXPIRY, bearer, keep_for, parse_token};
    if let Ok(token) = parse_token(data) {
        assert!(!token.access_token.is_empty() && token.access_token.len() <= 16 * 1024);
        assert!(bearer(&token.access_token).is_some(), "not a header value");
        let kept = keep_for(token.expires_in);
        assert!(kept <= token.expires_in.unwrap_or(WITHOUT_EXPIRY));
    }
}

// === cloudevents ===

/// CloudEvents in structured mode (`http.unwrap_cloudevents`, `http.format =
/// "cloudevents-structured"`). First byte even: the rest is a publisher's envelope,
/// read back: what it gives is sendable (header names and values valid HTTP, the
/// body no longer than the envelope). Odd: the rest is a [`Framed`] message, sent
/// as a structured event and read back: its payload, unchanged.
pub fn cloudevents(data: &[u8]) {
    use jetrelay::app::cloudevent;
    use jetrelay::app::headers::{self, Pass, RequestFormat};
    use jetrelay::message::{Message, Offered};
    let Some((&c, rest)) = data.split_first() else {
        return;
    };
    if c % 2 == 0 {
        if let Ok(u) = cloudevent::unwrap(rest) {
            assert!(u.payload.len() <= rest.len());
            for (n, v) in &u.headers {
                assert!(
                    headers::is_valid_name(n) && headers::is_valid_value(v),
                    "{n:?}: {v:?}"
                );
            }
        }
        return;
    }
    let m = Framed::read(rest);
    let message = Message {
        subject: m.subject,
        headers: m.headers,
        payload: Bytes::from(m.payload),
    };
    let offered = Offered::Message(&message);
    let mut mapped = headers::map(
        offered,
        1,
        &Pass::default(),
        RequestFormat::CloudeventsStructured,
        None,
    );
    let body = cloudevent::structured(offered, &mut mapped);
    let back = cloudevent::unwrap(&body);
    match back {
        // JSON goes as `data`, the whitespace around it aside.
        Ok(u) => assert!(
            u.payload == message.payload[..]
                || (cloudevent::is_json(&message.payload)
                    && u.payload == message.payload.trim_ascii()),
            "{:?}",
            message.payload
        ),
        // A message's own attributes (binary mode keeps them) may be what is not valid.
        Err(e) => assert!(
            message
                .headers
                .iter()
                .any(|(n, _)| n.to_ascii_lowercase().starts_with("ce-")),
            "{e}"
        ),
    }
}

/// A route's `when` (CEL): the first line is the expression, compiled as the config
/// loader does; the rest a [`Framed`] message it is evaluated against (its payload
/// the body, as JSON when it is). Compiling answers (an error says something);
/// evaluating answers, twice the same, and reads the body once at most.
pub fn route_when(data: &[u8]) {
    use jetrelay::route::{Vars, When};
    let (first, rest) = match data.iter().position(|b| *b == b'\n') {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    let expr = String::from_utf8_lossy(first);
    let when = match When::compile(&expr) {
        Ok(w) => w,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    let m = Framed::read(rest);
    let mut vars = Vars::new(&m.subject, &m.headers, &m.payload);
    let once = when.holds(&mut vars);
    assert_eq!(when.holds(&mut vars), once);
    assert!(when.uses_body() || !vars.body_read());
}
