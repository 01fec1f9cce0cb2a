//! The local publish endpoint on `publish.listen`: the app publishes without a NATS
//! client.
//!
//! - `POST /v1/publish/<subject>`: the raw body, `Nats-Msg-Id` and
//!   `Nats-Header-<name>` request headers → 200 `{"stream", "seq", "duplicate"}`.
//! - `POST /v1/publish`: the JSON `{"publish": [...]}` → one atomic batch (or one by
//!   one with `publish.atomic = false`) → 200 `{"stream", "seq", "count"}` (and
//!   `"duplicate": true` when the batch carried an id already stored: then nothing of
//!   it was stored by this request).
//!
//! 400 malformed, 403 subject not allowed, 413 too large, 409 refused in a way a
//! retry cannot fix (the stream takes no atomic batches, no stream captures the
//! subject, a wrong expected sequence), 503 only when a retry may succeed (NATS
//! unavailable, a timeout; nothing stored in an atomic batch); every error is
//! `{"error": "..."}`. Every publish awaits its PubAck; at most [`MAX_CONCURRENT`]
//! publishes run at once, the others wait; and the bodies being read and parsed at
//! once hold at most [`BODY_BUDGET`] bytes between them, so that many large
//! requests at once cost that much, not their sum (an allocator keeps what a spike
//! took for a while).

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio_util::sync::CancellationToken;

use crate::ops::metrics::{Metrics, Via};
use crate::ops::telemetry::chain;
use crate::ops::traces::Tracer;
use crate::outputs::{self, Author, Output, Refusal, Rules};
use crate::seam::publish::{Committed, OutputFailure, Publish};
use crate::secret::{self, SecretFile};
use crate::trace::context;

/// Publishes in progress at once, at most.
pub const MAX_CONCURRENT: usize = 64;

/// The bytes of request bodies held at once, at most: each request reserves its
/// `Content-Length` (its bound when it has none; the whole budget when that is more)
/// before its body is read, and keeps it until its body is let go. Others wait.
pub const BODY_BUDGET: usize = 8 << 20;

/// The budget is counted in KiB: a semaphore counts in `u32`.
const BUDGET_UNIT: usize = 1024;

/// What the endpoint publishes with: `P` is the publisher (NATS).
#[derive(Debug, Clone)]
pub struct Endpoint<P> {
    /// The publisher.
    pub publisher: P,
    /// `publish.allowed_subjects`, `max_messages`, `max_bytes`, as last reloaded.
    pub rules: watch::Receiver<Rules>,
    /// `publish.atomic`.
    pub atomic: bool,
    /// Collectors.
    pub metrics: Metrics,
    /// `publish.token_file`: every request must carry `Authorization: Bearer <it>`.
    pub token: Option<Arc<SecretFile>>,
    /// Records the PRODUCER span of a request that carries a `traceparent`.
    pub tracer: Tracer,
}

/// What a request publishes: its body as one message, or a document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Raw,
    Document,
}

/// The endpoint serves the app next to it, never a browser: a page anyone's browser
/// loads could otherwise POST to it (a cross-site request needs no permission when it
/// looks like a form: `text/plain`, a form encoding, no body type), and a DNS name
/// rebound to 127.0.0.1 would reach it with the page's own host name. So, before
/// anything is read: the token when `publish.token_file` sets one (401); a request
/// a browser says is cross-site (`Origin`, `Sec-Fetch-Site`) is refused (403), and
/// without a token so is one to a host name that is not an address or `localhost`
/// (403) or one whose body is not of a type a form cannot send (415); an encoded
/// body is not decoded (400).
fn guard(headers: &HeaderMap, token: Option<&str>, kind: Kind) -> Result<(), (StatusCode, String)> {
    let get = |name| headers.get(name).map(|v| v.to_str().unwrap_or("\u{fffd}"));
    if let Some(token) = token {
        let given = get(header::AUTHORIZATION.as_str())
            .and_then(secret::bearer_token)
            .unwrap_or("");
        if !secret::same(given.as_bytes(), token.as_bytes()) {
            return Err((
                StatusCode::UNAUTHORIZED,
                "Authorization: Bearer <token> is required (publish.token_file)".into(),
            ));
        }
    }
    let cross_site = get("sec-fetch-site").is_some_and(|s| s != "same-origin" && s != "none");
    if get(header::ORIGIN.as_str()).is_some() || cross_site {
        return Err((
            StatusCode::FORBIDDEN,
            "a browser's request (Origin, Sec-Fetch-Site) is refused: the endpoint serves the app next to it".into(),
        ));
    }
    if let Some(encoding) = get(header::CONTENT_ENCODING.as_str())
        && !encoding.trim().eq_ignore_ascii_case("identity")
    {
        return Err((
            StatusCode::BAD_REQUEST,
            format!("Content-Encoding {encoding:?}: bodies are taken as they are, never decoded"),
        ));
    }
    if token.is_some() {
        return Ok(());
    }
    let host = get(header::HOST.as_str()).unwrap_or("");
    if !local_host(host) {
        return Err((
            StatusCode::FORBIDDEN,
            format!(
                "Host {host:?} is a name: without publish.token_file only an address or localhost is served (a rebound DNS name could reach it from a browser)"
            ),
        ));
    }
    let media = get(header::CONTENT_TYPE.as_str())
        .and_then(|v| v.split(';').next())
        .map(|t| t.trim().to_ascii_lowercase())
        .unwrap_or_default();
    let json = media == "application/json"
        || (media.starts_with("application/") && media.ends_with("+json"));
    let fits = match kind {
        Kind::Raw => json || media == "application/octet-stream",
        Kind::Document => json,
    };
    if !fits {
        let wanted = match kind {
            Kind::Raw => "application/octet-stream or application/json",
            Kind::Document => "application/json",
        };
        return Err((
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!(
                "Content-Type {media:?}: send {wanted} (a browser's form cannot), or set publish.token_file"
            ),
        ));
    }
    Ok(())
}

/// Whether a `Host` is an IP address or `localhost` (with or without a port).
pub(super) fn local_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        // [v6]:port
        return rest
            .split(']')
            .next()
            .is_some_and(|a| a.parse::<std::net::Ipv6Addr>().is_ok());
    } else {
        host.rsplit_once(':').map_or(host, |(h, port)| {
            if port.bytes().all(|b| b.is_ascii_digit()) {
                h
            } else {
                host
            }
        })
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok()
}

struct Shared<P> {
    endpoint: Arc<Endpoint<P>>,
    permits: Arc<Semaphore>,
    /// [`BODY_BUDGET`], in [`BUDGET_UNIT`]s.
    bodies: Arc<Semaphore>,
}

impl<P> Clone for Shared<P> {
    fn clone(&self) -> Self {
        Shared {
            endpoint: Arc::clone(&self.endpoint),
            permits: Arc::clone(&self.permits),
            bodies: Arc::clone(&self.bodies),
        }
    }
}

/// Why a publish request failed, for its status.
#[derive(Debug)]
enum Failure<E> {
    Refused(Refusal),
    Failed(E),
}

/// The status of a failed publish request.
fn status<E: OutputFailure>(f: &Failure<E>) -> StatusCode {
    match f {
        Failure::Refused(Refusal::Malformed(_)) => StatusCode::BAD_REQUEST,
        Failure::Refused(Refusal::NotAllowed(_)) => StatusCode::FORBIDDEN,
        Failure::Refused(
            Refusal::TooMany { .. } | Refusal::TooManyHeaders { .. } | Refusal::TooLarge { .. },
        ) => StatusCode::PAYLOAD_TOO_LARGE,
        Failure::Failed(e) if e.is_too_large() => StatusCode::PAYLOAD_TOO_LARGE,
        // 503 only when the same request may succeed later; a client that retries on
        // 503 must not retry a refusal forever.
        Failure::Failed(e) if e.retry_may_help() => StatusCode::SERVICE_UNAVAILABLE,
        Failure::Failed(_) => StatusCode::CONFLICT,
    }
}

impl<E: OutputFailure> Failure<E> {
    fn label(&self) -> &'static str {
        match self {
            Failure::Refused(r) => r.label(),
            Failure::Failed(e) => e.label(),
        }
    }
}

impl<E: OutputFailure> IntoResponse for Failure<E> {
    fn into_response(self) -> Response {
        let text = match &self {
            Failure::Refused(r) => r.to_string(),
            Failure::Failed(e) => chain(e),
        };
        error(status(&self), &text)
    }
}

fn router<P: Publish>(endpoint: Endpoint<P>) -> Router {
    let shared = Shared {
        endpoint: Arc::new(endpoint),
        permits: Arc::new(Semaphore::new(MAX_CONCURRENT)),
        bodies: Arc::new(Semaphore::new(BODY_BUDGET / BUDGET_UNIT)),
    };
    // The bodies are bounded by the rules in force when each is read (a reload may
    // change them), not by the layer's fixed limit.
    Router::new()
        .route(
            "/v1/publish/{subject}",
            post(one::<P>)
                .layer(DefaultBodyLimit::disable())
                .fallback(not_post),
        )
        .route(
            "/v1/publish",
            post(many::<P>)
                .layer(DefaultBodyLimit::disable())
                .fallback(not_post),
        )
        .fallback(no_such_path)
        .with_state(shared)
}

/// Reads a body of at most `max` bytes; a larger one is refused (413) once more than
/// `max` bytes came, without reading the rest. A `Content-Length` within `max`
/// sizes the buffer once (growing it by doubling would hold up to twice the body,
/// and a copy of it while it grows).
async fn read_body<E>(
    budget: &Arc<Semaphore>,
    headers: &HeaderMap,
    body: Body,
    max: usize,
) -> Result<(Bytes, OwnedSemaphorePermit), Failure<E>> {
    use futures::StreamExt as _;
    let length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let declared = length.filter(|n| *n <= max).unwrap_or(0);
    let reserved = length
        .unwrap_or(max)
        .min(max)
        .min(BODY_BUDGET)
        .div_ceil(BUDGET_UNIT)
        .max(1);
    // Never closed, and never asked for more than it holds: acquiring only waits.
    let permit = Arc::clone(budget)
        .acquire_many_owned(u32::try_from(reserved).unwrap_or(u32::MAX))
        .await
        .map_err(|_| Failure::Refused(Refusal::Malformed("the endpoint is closing".into())))?;
    let mut stream = body.into_data_stream();
    let mut read = Vec::with_capacity(declared);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk
            .map_err(|e| Failure::Refused(Refusal::Malformed(format!("the request body: {e}"))))?;
        if read.len().saturating_add(chunk.len()) > max {
            return Err(Failure::Refused(Refusal::TooLarge {
                bytes: u64::try_from(read.len().saturating_add(chunk.len())).unwrap_or(u64::MAX),
                max: u64::try_from(max).unwrap_or(u64::MAX),
            }));
        }
        read.extend_from_slice(&chunk);
    }
    Ok((Bytes::from(read), permit))
}

/// Every answer is JSON with an `error`, the routing ones too.
fn error(status: StatusCode, text: &str) -> Response {
    (status, axum::Json(json!({ "error": text }))).into_response()
}

async fn not_post() -> Response {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        "only POST: POST /v1/publish/<subject> (raw) or POST /v1/publish (a document)",
    )
}

async fn no_such_path() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "no such endpoint: POST /v1/publish/<subject> (raw) or POST /v1/publish (a document)",
    )
}

/// `POST /v1/publish/<subject>`.
async fn one<P: Publish>(
    State(s): State<Shared<P>>,
    Path(subject): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, Failure<P::OutputError>> {
    if let Err((status, why)) = guard(&headers, s.token().as_deref(), Kind::Raw) {
        return Ok(error(status, &why));
    }
    // The raw body is the message: at most max_bytes.
    let max = usize::try_from(s.rules().max_bytes).unwrap_or(usize::MAX);
    let (body, _reserved) = read_body(&s.bodies, &headers, body, max).await?;
    // The message's own headers must be sent as they are: a value that is not
    // visible ASCII is refused, never dropped.
    let mut named: Vec<(&str, &str)> = Vec::with_capacity(headers.len());
    for (n, v) in &headers {
        let own = n.as_str().eq_ignore_ascii_case(outputs::MSG_ID)
            || n.as_str().starts_with(outputs::HEADER_PREFIX);
        match v.to_str() {
            Ok(text) => named.push((n.as_str(), text)),
            Err(_) if own => {
                return Err(Failure::Refused(Refusal::Malformed(format!(
                    "header {n}: its value is not visible ASCII"
                ))));
            }
            Err(_) => {}
        }
    }
    let output = outputs::from_request(&subject, &named, body).map_err(Failure::Refused);
    let c = s.publish(output.map(|o| vec![o]), &headers).await?;
    Ok(axum::Json(json!({
        "stream": c.stream,
        "seq": c.seq,
        "duplicate": c.duplicate,
    }))
    .into_response())
}

/// `POST /v1/publish`.
async fn many<P: Publish>(
    State(s): State<Shared<P>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, Failure<P::OutputError>> {
    if let Err((status, why)) = guard(&headers, s.token().as_deref(), Kind::Document) {
        return Ok(error(status, &why));
    }
    let rules = s.rules();
    // A document carries max_bytes in JSON (base64 and escapes at most double it),
    // plus its own fields.
    let limit = usize::try_from(rules.max_bytes)
        .unwrap_or(usize::MAX)
        .saturating_mul(2)
        .saturating_add(64 * 1024);
    let (body, reserved) = read_body(&s.bodies, &headers, body, limit).await?;
    let max = rules.max_messages;
    let list = outputs::parse(&body, Author::Endpoint, max).map_err(Failure::Refused);
    // The outputs own their payloads: the text and its reservation go now.
    drop(body);
    drop(reserved);
    let c = s.publish(list, &headers).await?;
    let mut answer = json!({ "stream": c.stream, "seq": c.seq, "count": c.count });
    if c.duplicate {
        answer["duplicate"] = json!(true);
        answer["stream"] = json!(null);
        answer["seq"] = json!(null);
    }
    Ok(axum::Json(answer).into_response())
}

impl<P: Publish> Shared<P> {
    /// The rules in force now.
    fn rules(&self) -> Rules {
        self.endpoint.rules.borrow().clone()
    }

    /// The token requests must carry, now (read again when its file changed).
    fn token(&self) -> Option<Arc<str>> {
        self.endpoint.token.as_ref().map(|t| t.value())
    }

    /// Checks the rules, publishes, counts. A request that carries a `traceparent`
    /// is continued: its messages carry a PRODUCER span's context (export on), or
    /// the request's own (export off), unless they carry their own.
    async fn publish(
        &self,
        outputs: Result<Vec<Output>, Failure<P::OutputError>>,
        headers: &HeaderMap,
    ) -> Result<Committed, Failure<P::OutputError>> {
        let e = &self.endpoint;
        // The request's trace headers, bounded as a message's are for the app: an
        // oversized or malformed one is not carried (and counted).
        let trace_headers: Vec<(&str, &str)> = headers
            .iter()
            .filter(|(n, _)| matches!(n.as_str(), "traceparent" | "tracestate" | "baggage"))
            .filter_map(|(n, v)| Some((n.as_str(), v.to_str().ok()?)))
            .collect();
        let own = context::inbound(trace_headers.iter().copied());
        e.metrics.trace_headers_dropped(&own.dropped);
        let mut span = None;
        let result = async {
            let mut outputs = outputs?;
            self.rules().check(&outputs).map_err(Failure::Refused)?;
            if let Some(tp) = own.traceparent {
                match own.context().filter(|_| e.tracer.is_on()) {
                    Some(parent) => {
                        let subjects: Vec<&str> =
                            outputs.iter().map(|o| o.subject.as_str()).collect();
                        let s = e.tracer.publish_for(&parent, &subjects);
                        outputs::carry_trace(
                            &mut outputs,
                            &s.traceparent(),
                            s.context().tracestate.as_deref(),
                            own.baggage.as_deref(),
                        );
                        span = Some(s);
                    }
                    None => outputs::carry_trace(
                        &mut outputs,
                        tp,
                        own.tracestate.as_deref(),
                        own.baggage.as_deref(),
                    ),
                }
            }
            // The semaphore is never closed, so acquiring only waits.
            let _permit = self.permits.acquire().await;
            e.publisher
                .outputs(&outputs, e.atomic)
                .await
                .map_err(Failure::Failed)
        }
        .await;
        if let Some(s) = span {
            let error = result.as_ref().err().map(|f| f.label().to_string());
            e.tracer.end(s, error);
        }
        match &result {
            Ok(c) if !c.duplicate => e.metrics.published(Via::Endpoint, c.count as u64),
            Ok(_) => {}
            Err(f) => {
                e.metrics.publish_failed(f.label());
                tracing::warn!(
                    reason = f.label(),
                    status = status(f).as_u16(),
                    "a publish on the endpoint failed"
                );
            }
        }
        result
    }
}

/// Serves until `stop` is cancelled, with at most `connections` open at once.
///
/// # Errors
/// The server's I/O error.
pub async fn serve<P: Publish>(
    listener: TcpListener,
    endpoint: Endpoint<P>,
    connections: usize,
    stop: CancellationToken,
) -> std::io::Result<()> {
    // A publish awaits its PubAck (at most the request timeout, per batch message
    // request): a minute covers a slow body and a full batch.
    let limits = super::ServerBounds {
        connections,
        request: std::time::Duration::from_secs(60),
    };
    super::serve(listener, router(endpoint), limits, stop).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A publish failure as the publisher classifies it.
    #[derive(Debug, thiserror::Error)]
    #[error("failed")]
    struct Fails {
        too_large: bool,
        retry_may_help: bool,
    }

    impl OutputFailure for Fails {
        fn label(&self) -> &'static str {
            "rejected"
        }
        fn is_permanent(&self) -> bool {
            self.too_large
        }
        fn is_too_large(&self) -> bool {
            self.too_large
        }
        fn retry_may_help(&self) -> bool {
            self.retry_may_help
        }
    }

    #[test]
    fn statuses_table() {
        let failed = |too_large, retry_may_help| {
            Failure::Failed(Fails {
                too_large,
                retry_may_help,
            })
        };
        let cases = [
            (Failure::Refused(Refusal::Malformed(String::new())), 400),
            (Failure::Refused(Refusal::NotAllowed(String::new())), 403),
            (Failure::Refused(Refusal::TooMany { max: 1 }), 413),
            (
                Failure::Refused(Refusal::TooLarge { bytes: 2, max: 1 }),
                413,
            ),
            (failed(true, false), 413),
            (failed(false, true), 503),
            (failed(false, false), 409),
        ];
        for (f, want) in cases {
            assert_eq!(status(&f).as_u16(), want, "{f:?}");
        }
    }
}
