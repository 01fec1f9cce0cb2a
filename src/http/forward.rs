//! The forward seam over HTTP: the app's client and its requests.
//!
//! Builds exactly one POST per attempt from an offered message
//! ([`Offered`]: a JetStream delivery or a plain message;
//! body = payload unchanged, or its structured CloudEvent, headers from `crate::app::headers`), sends it through a keep-alive pool with
//! `http.timeout_ms`, and turns the answer into a policy [`Outcome`]. The response
//! body is read (bounded) and discarded, so the connection goes back to the pool; it
//! is never logged. A 2xx answer of type `application/vnd.jetrelay.publish+json` is
//! kept (up to a bound from `publish.max_bytes`) and read as the outputs to publish.
//! [`Forwarder::forward_batch`] sends a batch's document and reads its per-message
//! answer; [`Forwarder::exchange`] keeps the whole answer, bounded, for a caller that
//! hands it on (a service source's reply).

use std::borrow::Cow;
use std::future::Future;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use std::sync::Arc;

use reqwest::header::{CONTENT_TYPE, HOST, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use tokio::time::Instant;

use crate::app::answer::KeptAnswer;
use crate::app::headers::{Pass, RequestFormat, TraceHeaders};
use crate::app::signing;
use crate::app::transport::HttpVersion;
use crate::http::answer::AppAnswer;
use crate::http::app::AppClient;
use crate::http::broke::Broke;
use crate::http::client::ClientError;
use crate::http::dial::host_header;
use crate::http::h2c::{NOT_HTTP2, Spoken, speaks_h2};

use crate::message::Offered;
use crate::outputs::{self, Author, Refusal};
use crate::policy::{AppAction, Outcome, parse_retry_after};
use crate::seam::HttpClass;
use crate::seam::service::{Exchange, Question};
use crate::seam::{BatchForwarded, Forward, Forwarded, NoAnswer, Offer};
use crate::trace::context::Dropped;

/// The response header by which the app overrides the status mapping.
pub const ACTION_HEADER: &str = "jetrelay-action";

/// At most this much of a response body is read before the connection is dropped.
const MAX_BODY_DRAIN: usize = 64 * 1024;

/// The longest an h2c app is asked whether it speaks HTTP/2 after a broken request.
const H2C_ASK: Duration = Duration::from_secs(2);

/// What one result of a batch answer takes besides its outputs (its id, action and
/// retry delay, with room to spare).
const RESULT_BYTES: usize = 1024;

/// The most of a batch answer ever read, outputs included.
const MAX_BATCH_ANSWER_WITH_OUTPUTS: usize = 256 * 1024 * 1024;

/// What answers may carry besides their status: outputs to publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnswerLimits {
    /// `publish.max_bytes`: an answer's outputs, decoded.
    pub publish_bytes: u64,
    /// `publish.max_messages`: an answer's outputs, counted.
    pub publish_messages: usize,
}

impl AnswerLimits {
    /// How much of a publishing answer is read: the outputs' bytes in JSON, with
    /// base64 and escapes (at most twice the bytes), plus the document's own.
    fn publish_answer(self) -> usize {
        usize::try_from(self.publish_bytes)
            .unwrap_or(usize::MAX)
            .saturating_mul(2)
            .saturating_add(64 * 1024)
    }

    /// How much of the answer to a batch of `messages` is read: what that many
    /// results can carry (each its id, action and outputs), never what the largest
    /// batch could.
    fn batch_answer(self, messages: usize) -> usize {
        self.publish_answer()
            .saturating_add(RESULT_BYTES)
            .saturating_mul(messages)
            .saturating_add(64 * 1024)
            .min(MAX_BATCH_ANSWER_WITH_OUTPUTS)
    }
}

/// What one source (or route) sends to the app through a shared [`AppClient`]:
/// `http.url`, `http.timeout_ms`, `http.pass_headers`, `http.format`, and what answers
/// may carry. Cheap: a reload that changes only these keeps the client's connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetSettings {
    /// `http.url`.
    pub url: reqwest::Url,
    /// `http.timeout_ms`.
    pub timeout: Duration,
    /// `http.pass_headers`.
    pub pass: Pass,
    /// `http.format`.
    pub format: RequestFormat,
    /// What answers may carry.
    pub limits: AnswerLimits,
}

/// The request header that says how many messages a batch carries.
pub const BATCH_SIZE_HEADER: &str = "jetrelay-batch-size";

/// Sends deliveries to the app: a shared client, and this source's target.
#[derive(Debug, Clone)]
pub struct Forwarder {
    client: AppClient,
    target: Arc<Target>,
}

/// A target, made once.
#[derive(Debug)]
struct Target {
    /// `http.url` without a user:password (that became `implied`'s Authorization).
    url: reqwest::Url,
    /// Headers every request has unless the app's credentials set them: the Basic
    /// authorization of a user:password in `http.url`, and `Host` as the client would
    /// write it (made once here, not per request).
    implied: HeaderMap,
    timeout: Duration,
    limits: AnswerLimits,
    pass: Pass,
    format: RequestFormat,
}

impl Forwarder {
    /// A forwarder to `target` through `client` (whose pool it shares).
    ///
    /// # Errors
    /// [`ClientError::Build`] when the URL cannot make a request.
    pub fn new(client: &AppClient, target: &TargetSettings) -> Result<Forwarder, ClientError> {
        // What reqwest's builder derives from the URL (a user:password becomes Basic
        // authorization), once: each request is then built in place.
        let template = client
            .client
            .post(target.url.clone())
            .build()
            .map_err(ClientError::Build)?;
        let url = template.url().clone();
        let mut implied = template.headers().clone();
        if let Some(host) = host_header(&url) {
            implied.insert(HOST, host);
        }
        Ok(Forwarder {
            client: client.clone(),
            target: Arc::new(Target {
                url,
                implied,
                timeout: target.timeout,
                limits: target.limits,
                pass: target.pass.clone(),
                format: target.format,
            }),
        })
    }

    /// The client it sends through.
    pub fn client(&self) -> &AppClient {
        &self.client
    }

    /// Offers one message to the app, once.
    pub async fn forward(&self, offer: Offer<'_>) -> Forwarded {
        let d = offer.offered;
        let mut mapped = crate::app::headers::map(
            d,
            offer.attempt,
            &self.target.pass,
            self.target.format,
            offer.trace,
        );
        let body = match self.target.format {
            RequestFormat::CloudeventsStructured => {
                Bytes::from(crate::app::cloudevent::structured(d, &mut mapped))
            }
            RequestFormat::Raw | RequestFormat::Cloudevents => d.message().payload.clone(),
        };
        let mut headers = HeaderMap::with_capacity(mapped.headers.len() + 4);
        let mut skipped = mapped.skipped_invalid;
        for (name, value) in &mapped.headers {
            // headers::map only returns valid names and values; a mismatch between
            // its rules and the http crate's is counted, never a crash.
            let name = match name {
                // Static names are lowercase tokens (`http::headers`), so from_static holds.
                Cow::Borrowed(n) => Ok(HeaderName::from_static(n)),
                Cow::Owned(n) => HeaderName::from_bytes(n.as_bytes()),
            };
            match (name, HeaderValue::from_bytes(value.as_bytes())) {
                (Ok(n), Ok(v)) => {
                    headers.append(n, v);
                }
                _ => skipped += 1,
            }
        }
        // Visible ASCII (`seam::markers::Marked::parse`), so a valid value.
        if let Some(marked) = offer.conflict
            && let Ok(v) = HeaderValue::from_str(marked)
        {
            headers.append(crate::app::headers::IDEMPOTENCY_CONFLICT, v);
        }
        let publish = self.target.limits.publish_answer();
        let signed = self.signs().then(|| crate::app::headers::event_id(d));
        let (mut f, body, _) = self
            .post(headers, body, MAX_BODY_DRAIN, publish, false, signed)
            .await;
        f.skipped_headers = skipped;
        f.trace_dropped = mapped.trace_dropped;
        f.outputs = match body {
            Kept::Publish(body) => Some(outputs::parse(
                &body,
                Author::Answer,
                self.target.limits.publish_messages,
            )),
            Kept::PublishTooLarge(read) => Some(Err(Refusal::TooLarge {
                bytes: read as u64,
                max: publish as u64,
            })),
            Kept::Other(_) | Kept::OtherTooLarge(_) => None,
        };
        f
    }

    /// Offers a batch of deliveries to the app in one request, once: the JSON
    /// document of `app::batch`, and its answer read back; `trace` is the request's
    /// own context.
    pub async fn forward_batch(
        &self,
        offers: &[Offer<'_>],
        trace: Option<TraceHeaders<'_>>,
    ) -> BatchForwarded {
        let items: Vec<_> = offers
            .iter()
            .map(|o| (o.offered, o.attempt, o.trace, o.conflict))
            .collect();
        let (body, skipped) = crate::app::batch::body(&items, &self.target.pass);
        let mut headers = HeaderMap::with_capacity(6);
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(BATCH_SIZE_HEADER, HeaderValue::from(items.len()));
        if let Some(t) = trace {
            let mut add = |name: &'static str, value: &str| {
                if let Ok(v) = HeaderValue::from_str(value) {
                    headers.insert(name, v);
                }
            };
            add("traceparent", t.traceparent);
            if let Some(state) = t.tracestate {
                add("tracestate", state);
            }
        }
        let keep = self.target.limits.batch_answer(items.len());
        let signed = self.signs().then(|| {
            let ids: Vec<String> = offers
                .iter()
                .map(|o| crate::app::headers::event_id(o.offered))
                .collect();
            signing::batch_id(ids.iter().map(String::as_str))
        });
        let (mut forwarded, body, _) = self
            .post(headers, body.into(), keep, keep, false, signed)
            .await;
        forwarded.skipped_headers = skipped.skipped_invalid;
        forwarded.trace_dropped = skipped.trace_dropped;
        let bounds = crate::app::batch::AnswerBounds {
            results: items.len(),
            outputs: self.target.limits.publish_messages,
        };
        let answer = match (&forwarded.outcome, body) {
            (Outcome::Answered { status, .. }, Kept::Publish(body) | Kept::Other(body))
                if (200..300).contains(status) =>
            {
                Some(crate::app::batch::answer(&body, bounds))
            }
            (Outcome::Answered { status, .. }, Kept::PublishTooLarge(read))
                if (200..300).contains(status) =>
            {
                Some(crate::app::batch::Answer::Unparsable(format!(
                    "the answer is over the {keep} bytes {} messages can carry ({read} read)",
                    items.len()
                )))
            }
            _ => None,
        };
        BatchForwarded { forwarded, answer }
    }

    /// One request whose answer the caller keeps (a NATS request's reply): `headers`
    /// (a name or value that is not valid HTTP is skipped and counted) and `body`
    /// POSTed to the target; the answer's status, its headers and its body up to
    /// `max_body` bytes (a longer body is drained, bounded, and said to be over).
    /// `None` when no answer came (then `Forwarded` says why).
    pub async fn exchange(
        &self,
        headers: &[(String, String)],
        body: Bytes,
        max_body: usize,
    ) -> (Forwarded, Option<KeptAnswer>) {
        let mut map = HeaderMap::with_capacity(headers.len() + 4);
        let mut skipped = 0;
        for (name, value) in headers {
            match (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_bytes(value.as_bytes()),
            ) {
                (Ok(n), Ok(v)) => {
                    map.append(n, v);
                }
                _ => skipped += 1,
            }
        }
        // A request has no id of its own: each gets a random one.
        let signed = self.signs().then(|| {
            let random: [u8; 16] = crate::digest::random().unwrap_or_default();
            format!("msg_{}", crate::digest::hex(&random))
        });
        let (mut forwarded, kept, answer_headers) =
            self.post(map, body, max_body, max_body, true, signed).await;
        forwarded.skipped_headers = skipped;
        let Outcome::Answered { status, .. } = forwarded.outcome else {
            return (forwarded, None);
        };
        let (body, over) = match kept {
            Kept::Publish(b) | Kept::Other(b) => (Bytes::from(b), None),
            Kept::PublishTooLarge(read) | Kept::OtherTooLarge(read) => (Bytes::new(), Some(read)),
        };
        let answer = KeptAnswer {
            status,
            headers: answer_headers,
            body,
            over,
        };
        (forwarded, Some(answer))
    }

    /// Whether requests are signed (`[http.signing]`).
    fn signs(&self) -> bool {
        self.client.signer.is_some()
    }

    /// Adds who sends to `headers`: the app's credentials, what the URL implies, and
    /// (with `signed`, a `webhook-id`, and a signer) the signature of `body`, now.
    fn identify(&self, headers: &mut HeaderMap, body: &[u8], signed: Option<&str>) {
        for (n, v) in self.client.credentials.shared().iter() {
            headers.insert(n.clone(), v.clone());
        }
        for (name, value) in &self.target.implied {
            headers.entry(name).or_insert_with(|| value.clone());
        }
        if let (Some(signer), Some(id)) = (&self.client.signer, signed) {
            signer.sign(headers, id, body, SystemTime::now());
        }
    }

    /// One POST with `headers` (the app's credentials added) and `body`; the answer
    /// and up to `keep` bytes of its body (`keep_publish` for a 2xx that publishes;
    /// the rest is drained, bounded, so that the connection goes back to the pool).
    /// With `signed` (a `webhook-id`) and a signer, signed now.
    async fn post(
        &self,
        mut headers: HeaderMap,
        body: Bytes,
        keep: usize,
        keep_publish: usize,
        head: bool,
        signed: Option<String>,
    ) -> (Forwarded, Kept, Vec<(String, String)>) {
        self.identify(&mut headers, &body, signed.as_deref());
        let start = Instant::now();
        let result = self
            .client
            .send_authorized(
                reqwest::Method::POST,
                &self.target.url,
                headers,
                Some(body),
                self.target.timeout,
            )
            .await;
        let mut kept = Vec::new();
        let mut answer_headers = Vec::new();
        let mut publishes = false;
        let mut too_large = None;
        let (outcome, class, bad_action, failure) = match result {
            Ok(mut resp) => {
                let status = resp.status();
                if head {
                    answer_headers = resp
                        .headers()
                        .iter()
                        .filter_map(|(n, v)| {
                            Some((n.as_str().to_string(), v.to_str().ok()?.to_string()))
                        })
                        .collect();
                }
                let said = Said::read(&resp);
                publishes = (200..300).contains(&status) && said.publishes;
                let keep = if publishes { keep_publish } else { keep };
                match read_body(&mut resp, keep, start + self.target.timeout).await {
                    Ok((body, over)) => {
                        (kept, too_large) = (body, over);
                        (
                            Outcome::Answered {
                                status,
                                retry_after: said.retry_after,
                                action: said.action,
                            },
                            HttpClass::Status(status),
                            said.bad_action,
                            None,
                        )
                    }
                    Err((outcome, class, failure)) => {
                        publishes = false;
                        (outcome, class, false, Some(failure))
                    }
                }
            }
            Err(e) => {
                let (mut outcome, class, mut failure) = no_answer(&e);
                if outcome == Outcome::TransportError && self.client.version == HttpVersion::H2c {
                    // An app that answers only HTTP/1 breaks every h2c request: it is
                    // not there for us (held, no attempt spent), not the message's doing.
                    let within = self.target.timeout.min(H2C_ASK);
                    let socket = self.client.socket.as_deref();
                    if speaks_h2(socket, &self.target.url, within).await == Spoken::NotHttp2 {
                        outcome = Outcome::Unreachable;
                        failure.kind = NOT_HTTP2;
                    }
                }
                (outcome, class, false, Some(failure))
            }
        };
        let forwarded = Forwarded {
            outcome,
            class,
            skipped_headers: 0,
            trace_dropped: Dropped::default(),
            elapsed: start.elapsed(),
            bad_action,
            failure,
            outputs: None,
        };
        let body = match (publishes, too_large) {
            (true, None) => Kept::Publish(kept),
            (true, Some(read)) => Kept::PublishTooLarge(read),
            (false, Some(read)) if head => Kept::OtherTooLarge(read),
            (false, _) => Kept::Other(kept),
        };
        (forwarded, body, answer_headers)
    }
}

impl Forward for Forwarder {
    fn forward(&self, offer: Offer<'_>) -> impl Future<Output = Forwarded> + Send {
        Forwarder::forward(self, offer)
    }

    fn forward_batch(
        &self,
        offers: &[Offer<'_>],
        trace: Option<TraceHeaders<'_>>,
    ) -> impl Future<Output = BatchForwarded> + Send {
        Forwarder::forward_batch(self, offers, trace)
    }
}

impl Exchange for Forwarder {
    fn exchange(
        &self,
        q: Question<'_>,
    ) -> impl Future<Output = (Forwarded, Option<KeptAnswer>)> + Send {
        // The request's headers as a message's are mapped, with the endpoint's name.
        let mapped = crate::app::headers::map(
            Offered::Message(q.message),
            1,
            &self.target.pass,
            self.target.format,
            q.trace,
        );
        let mut headers: Vec<(String, String)> = Vec::with_capacity(mapped.headers.len() + 1);
        headers.extend(
            mapped
                .headers
                .into_iter()
                .map(|(n, v)| (n.into_owned(), v.into_owned())),
        );
        headers.push((ENDPOINT_HEADER.to_string(), q.endpoint.to_string()));
        let (skipped, dropped) = (mapped.skipped_invalid, mapped.trace_dropped);
        let payload = q.message.payload.clone();
        async move {
            let (mut f, answer) = Forwarder::exchange(self, &headers, payload, q.max_body).await;
            f.skipped_headers += skipped;
            f.trace_dropped = dropped;
            (f, answer)
        }
    }
}

/// The request header that names a service request's endpoint.
pub const ENDPOINT_HEADER: &str = "nats-service-endpoint";

/// What was kept of an answer's body.
enum Kept {
    /// A 2xx that publishes, whole.
    Publish(Vec<u8>),
    /// A 2xx that publishes, over the bound (this much was read).
    PublishTooLarge(usize),
    /// Anything else, up to the bound.
    Other(Vec<u8>),
    /// Anything else, over the bound (this much was read), when the caller keeps
    /// the answer ([`Forwarder::exchange`]).
    OtherTooLarge(usize),
}

/// Whether a `Content-Type` is the publishing answer's (parameters ignored).
fn is_publish_type(value: &str) -> bool {
    value
        .split(';')
        .next()
        .is_some_and(|t| t.trim().eq_ignore_ascii_case(outputs::CONTENT_TYPE))
}

/// An answer whose body broke off (shorter than its `Content-Length`, the connection
/// reset): a transport failure, retried, never taken as the status it began with.
fn cut_off(e: &Broke) -> (Outcome, HttpClass, NoAnswer) {
    let cause = e.cause.clone();
    if e.timeout {
        // The request's timeout covers its answer's body too.
        return (
            Outcome::Timeout,
            HttpClass::Timeout,
            NoAnswer {
                kind: "timeout",
                cause,
            },
        );
    }
    (
        Outcome::TransportError,
        HttpClass::Error,
        NoAnswer {
            kind: "answer cut off",
            cause,
        },
    )
}

/// What an answer's headers say besides its status.
struct Said {
    retry_after: Option<Duration>,
    action: Option<AppAction>,
    /// A `Jetrelay-Action` that was not understood.
    bad_action: bool,
    /// Its body is a document that publishes.
    publishes: bool,
}

impl Said {
    fn read(resp: &AppAnswer) -> Said {
        let h = resp.headers();
        let retry_after = h
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, SystemTime::now()));
        let raw_action = h.get(ACTION_HEADER).map(|v| v.to_str().unwrap_or(""));
        let action = raw_action.and_then(AppAction::parse);
        Said {
            retry_after,
            action,
            bad_action: raw_action.is_some() && action.is_none(),
            publishes: h
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(is_publish_type),
        }
    }
}

/// Reads an answer's body by `deadline`: up to `keep` bytes kept, the rest drained
/// (bounded, so that the connection goes back to the pool) and how much was read
/// when it was more than `keep`. An answer that did not arrive whole (shorter than
/// its `Content-Length`, a reset, a timeout) is no answer.
async fn read_body(
    resp: &mut AppAnswer,
    keep: usize,
    deadline: Instant,
) -> Result<(Vec<u8>, Option<usize>), (Outcome, HttpClass, NoAnswer)> {
    let mut kept = Vec::new();
    let mut too_large = None;
    // The whole answer at once when it says how large it is (growing the buffer by
    // doubling would hold up to twice the answer).
    if let Some(len) = resp.content_length() {
        kept.reserve_exact(usize::try_from(len).unwrap_or(usize::MAX).min(keep));
    }
    let mut read = 0;
    while read < keep.max(MAX_BODY_DRAIN) {
        match tokio::time::timeout_at(deadline, resp.chunk()).await {
            Ok(Ok(Some(chunk))) => {
                read += chunk.len();
                if kept.len() + chunk.len() <= keep {
                    kept.extend_from_slice(&chunk);
                } else {
                    too_large = Some(read);
                }
            }
            Ok(Ok(None)) => break,
            Ok(Err(e)) => return Err(cut_off(&e)),
            Err(_) => {
                return Err((
                    Outcome::Timeout,
                    HttpClass::Timeout,
                    NoAnswer {
                        kind: "timeout",
                        cause: "the answer's body did not arrive in time".into(),
                    },
                ));
            }
        }
    }
    Ok((kept, too_large))
}

/// Classifies a request that got no answer. A connection that could not be made
/// means the app is not there ([`Outcome::Unreachable`]); a connection that broke
/// before the answer may be the message's doing (an app that crashes on it), so it
/// counts as an attempt ([`Outcome::TransportError`]).
fn no_answer(e: &Broke) -> (Outcome, HttpClass, NoAnswer) {
    use std::io::ErrorKind;
    let io = e.io;
    let cause = e.cause.clone();
    let failure = |kind| NoAnswer {
        kind,
        cause: cause.clone(),
    };
    if let Some(kind) = e.token {
        return (Outcome::Unreachable, HttpClass::Error, failure(kind));
    }
    if e.timeout {
        return (Outcome::Timeout, HttpClass::Timeout, failure("timeout"));
    }
    if e.connect || e.handshake {
        let kind = match io {
            _ if e.handshake => "tls handshake failed",
            Some(ErrorKind::ConnectionRefused) => "connection refused",
            // A Unix socket that is not there (yet).
            Some(ErrorKind::NotFound) => "no socket",
            _ => "cannot connect",
        };
        return (Outcome::Unreachable, HttpClass::Error, failure(kind));
    }
    let kind = match io {
        Some(ErrorKind::ConnectionReset) => "connection reset",
        Some(ErrorKind::ConnectionAborted) => "connection aborted",
        Some(ErrorKind::BrokenPipe) => "broken pipe",
        Some(ErrorKind::UnexpectedEof) => "connection closed",
        _ if e.body => "request body",
        _ => "request failed",
    };
    (Outcome::TransportError, HttpClass::Error, failure(kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::http::app::{ClientSettings, ProxySettings};
    use crate::http::credentials::CredentialFiles;

    /// What a request that got no answer means, whichever client sent it: a
    /// connection never made is the app not being there (no attempt spent); one
    /// that broke after it was made may be the message's doing.
    #[test]
    fn a_request_without_an_answer_is_classified_by_what_broke() {
        use std::io::ErrorKind as K;
        let b = |connect, io, body, handshake| Broke {
            timeout: false,
            connect,
            handshake,
            io,
            body,
            token: None,
            cause: "c".into(),
        };
        let check = |broke: Broke, outcome: Outcome, kind: &str| {
            let (o, class, failure) = no_answer(&broke);
            let timeout = outcome == Outcome::Timeout;
            assert_eq!((o, failure.kind), (outcome, kind), "{broke:?}");
            assert_eq!(class == HttpClass::Timeout, timeout, "{broke:?}");
        };
        // What breaks while connecting: the app is unreachable.
        for (broke, kind) in [
            (
                b(true, Some(K::ConnectionRefused), false, false),
                "connection refused",
            ),
            (b(true, Some(K::NotFound), false, false), "no socket"),
            (b(true, None, false, true), "tls handshake failed"),
            // Refused once it seemed done (TLS 1.3: a client certificate).
            (
                b(false, Some(K::InvalidData), false, true),
                "tls handshake failed",
            ),
            (b(true, Some(K::Other), false, false), "cannot connect"),
            (
                Broke::token("oauth2 token endpoint failed"),
                "oauth2 token endpoint failed",
            ),
        ] {
            check(broke, Outcome::Unreachable, kind);
        }
        // What breaks once connected: a transport error.
        for (broke, kind) in [
            (
                b(false, Some(K::ConnectionReset), false, false),
                "connection reset",
            ),
            (
                b(false, Some(K::UnexpectedEof), false, false),
                "connection closed",
            ),
            (b(false, Some(K::BrokenPipe), true, false), "broken pipe"),
            (b(false, None, true, false), "request body"),
            (b(false, None, false, false), "request failed"),
        ] {
            check(broke, Outcome::TransportError, kind);
        }
        check(Broke::timed_out(), Outcome::Timeout, "timeout");
        // A body that broke off is never the status it began with.
        let (o, _, f) = cut_off(&b(false, Some(K::ConnectionReset), false, false));
        assert_eq!(
            (o, f.kind, f.cause.as_str()),
            (Outcome::TransportError, "answer cut off", "c")
        );
        assert_eq!(cut_off(&Broke::timed_out()).0, Outcome::Timeout);
    }

    /// The app's client and a target at `url`.
    fn app(url: &str, proxy: &str) -> (ClientSettings, TargetSettings) {
        let client = ClientSettings {
            tls_ca_file: None,
            tls_client: None,
            proxy: (!proxy.is_empty()).then(|| ProxySettings {
                url: proxy.parse().unwrap(),
                credentials_file: None,
            }),
            credentials: CredentialFiles::default(),
            signing: None,
            oauth2: None,
            pool: 4,
            unix_socket: None,
            version: Default::default(),
            max_concurrent_streams: 0,
        };
        let target = TargetSettings {
            url: url.parse().unwrap(),
            timeout: Duration::from_secs(2),
            pass: Pass::new(&[]),
            format: RequestFormat::Raw,
            limits: AnswerLimits {
                publish_bytes: 1024,
                publish_messages: 10,
            },
        };
        (client, target)
    }

    fn forwarder((client, target): &(ClientSettings, TargetSettings)) -> Forwarder {
        Forwarder::new(&AppClient::new(client).unwrap(), target).unwrap()
    }

    /// A plain message on `orders` (no JetStream metadata), with `headers` and a `{}`
    /// body.
    fn orders(headers: &[(&str, &str)]) -> crate::message::Message {
        crate::message::Message {
            subject: "orders".into(),
            headers: headers
                .iter()
                .map(|(n, v)| ((*n).to_string(), (*v).to_string()))
                .collect(),
            payload: bytes::Bytes::from_static(b"{}"),
        }
    }

    /// `m` offered for the first time, without a trace context.
    fn first(m: &crate::message::Message) -> Offer<'_> {
        Offer {
            offered: m.into(),
            attempt: 1,
            trace: None,
            conflict: None,
        }
    }

    /// What the redirecting app saw of each request: its path and its header lines
    /// (names lowercased).
    type Seen = Arc<std::sync::Mutex<Vec<(String, Vec<(String, String)>)>>>;

    fn paths(seen: &Seen) -> Vec<String> {
        seen.lock()
            .unwrap()
            .iter()
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// The values of header `name` in each request seen.
    fn lines(seen: &Seen, name: &str) -> Vec<Vec<String>> {
        let seen = seen.lock().unwrap();
        let values = |h: &[(String, String)]| {
            h.iter()
                .filter(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
                .collect()
        };
        seen.iter().map(|(_, h)| values(h)).collect()
    }

    /// An app that answers a request with a redirect to `/elsewhere`, and one to
    /// `/elsewhere` with 200; it keeps the path and headers of every request.
    async fn redirecting_app() -> (String, Seen) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/messages", listener.local_addr().unwrap());
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let kept = Arc::clone(&kept);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    let mut have = 0;
                    loop {
                        let Ok(n) = conn.read(&mut buf[have..]).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        have += n;
                        let text = String::from_utf8_lossy(&buf[..have]).to_string();
                        // Small requests: the whole of one fits in the buffer.
                        let Some(end) = text.find("\r\n\r\n") else {
                            continue;
                        };
                        let length: usize = text[..end]
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse().unwrap())
                            })
                            .unwrap_or(0);
                        if have < end + 4 + length {
                            continue;
                        }
                        let path = text.split(' ').nth(1).unwrap_or("").to_string();
                        let headers = text[..end]
                            .lines()
                            .filter_map(|l| {
                                let (n, v) = l.split_once(':')?;
                                Some((n.to_ascii_lowercase(), v.trim().to_string()))
                            })
                            .collect();
                        kept.lock().unwrap().push((path.clone(), headers));
                        have = 0;
                        let answer = if path == "/elsewhere" {
                            "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"
                        } else {
                            "HTTP/1.1 307 Temporary Redirect\r\nlocation: /elsewhere\r\ncontent-length: 0\r\n\r\n"
                        };
                        if conn.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (url, seen)
    }

    /// The app's redirect is its answer, never followed: a status like any other
    /// (the vendored reqwest skips the redirect layer's parsing of the first
    /// request only; a redirect still reaches the policy, which refuses it).
    #[tokio::test]
    async fn a_redirect_is_answered_not_followed() {
        let (url, seen) = redirecting_app().await;
        let f = forwarder(&app(&url, ""));
        let d = orders(&[("X-Trace", "1")]);
        for _ in 0..3 {
            let answer = f.forward(first(&d)).await;
            assert!(
                matches!(answer.outcome, Outcome::Answered { status: 307, .. }),
                "{:?}",
                answer.outcome
            );
        }
        assert_eq!(paths(&seen), vec!["/messages"; 3]);
    }

    /// Each request names the app's `host:port` once in `Host`, as the HTTP client
    /// would (the forwarder sets it once, instead of the client per request), and the
    /// port only when it is not the scheme's default.
    #[tokio::test]
    async fn each_request_names_the_apps_host_and_port_once() {
        let (url, seen) = redirecting_app().await;
        let f = forwarder(&app(&url, ""));
        let d = orders(&[("Host", "elsewhere.example")]);
        let offer = first(&d);
        f.forward(offer).await;
        let authority = url
            .trim_start_matches("http://")
            .trim_end_matches("/messages");
        assert_eq!(paths(&seen), ["/messages"]);
        assert_eq!(lines(&seen, "host"), [[authority]]);
        let host =
            |u: &str| host_header(&u.parse().unwrap()).map(|v| v.to_str().unwrap().to_string());
        assert_eq!(host("http://app:80/m").as_deref(), Some("app"));
        assert_eq!(host("https://app:443/m").as_deref(), Some("app"));
        assert_eq!(host("https://app:8443/m").as_deref(), Some("app:8443"));
        assert_eq!(host("http://[::1]:8080/m").as_deref(), Some("[::1]:8080"));
        assert_eq!(host("http://[::1]/m").as_deref(), Some("[::1]"));
    }

    /// What the app's URL and credentials imply is sent once and as reqwest's builder
    /// made it: a user:password in `http.url` is Basic authorization (never in the
    /// request line), unless the credentials name an Authorization of their own; a
    /// `Host` in `http.headers` is sent instead of the URL's.
    #[tokio::test]
    async fn the_urls_user_and_the_configured_host_are_sent_as_the_builder_sent_them() {
        let (url, seen) = redirecting_app().await;
        let with_user = url.replace("http://", "http://user:pw@");
        let d = orders(&[]);
        let offer = first(&d);
        forwarder(&app(&with_user, "")).forward(offer).await;
        let mut configured = app(&with_user, "");
        configured.0.credentials.headers = [
            ("Host".to_string(), "app.internal".to_string()),
            ("Authorization".to_string(), "Bearer t".to_string()),
        ]
        .into();
        forwarder(&configured).forward(offer).await;
        let authority = url
            .trim_start_matches("http://")
            .trim_end_matches("/messages");
        assert_eq!(paths(&seen), ["/messages", "/messages"]);
        // base64("user:pw")
        assert_eq!(
            lines(&seen, "authorization"),
            [["Basic dXNlcjpwdw=="], ["Bearer t"]]
        );
        assert_eq!(lines(&seen, "host"), [[authority], ["app.internal"]]);
    }

    /// A client that follows redirects still does, and its answer names where it
    /// ended (the vendored reqwest parses the answer's URI only after a redirect).
    #[tokio::test]
    async fn a_client_that_follows_redirects_ends_where_it_was_sent() {
        let (url, seen) = redirecting_app().await;
        let client = crate::http::client::builder("")
            .unwrap()
            .redirect(reqwest::redirect::Policy::limited(3))
            .build()
            .unwrap();
        let answer = client.post(&url).body("{}").send().await.unwrap();
        assert_eq!(answer.status(), 200);
        assert_eq!(answer.url().path(), "/elsewhere");
        let direct = client
            .post(url.replace("/messages", "/elsewhere"))
            .send()
            .await
            .unwrap();
        assert_eq!(direct.url().path(), "/elsewhere");
        assert_eq!(paths(&seen), vec!["/messages", "/elsewhere", "/elsewhere"]);
    }

    /// No process-wide crypto provider is installed in this test binary (as in the
    /// release binary: `http::client`'s test shows it), so the clients built here are
    /// built the way production builds them.
    #[tokio::test]
    async fn every_client_jetrelay_builds_works_without_a_default_provider() {
        // The examples' and the tests' client.
        let plain = crate::http::client::plain().unwrap();
        let refused = plain.get("https://127.0.0.1:1/").send().await;
        assert!(refused.unwrap_err().is_connect());
        // The daemon's: plain http and https apps, a proxy, a health URL.
        for (url, proxy) in [
            ("http://127.0.0.1:1/messages", ""),
            ("https://127.0.0.1:1/messages", ""),
            ("https://127.0.0.1:1/messages", "http://127.0.0.1:1"),
        ] {
            let f = forwarder(&app(url, proxy));
            let health = url.parse().unwrap();
            assert!(
                !f.client().healthy(&health, Duration::from_secs(2)).await,
                "{url}"
            );
        }
    }

    /// An app that answers every request with `answer`, once its head has arrived.
    async fn answering_app(answer: &'static str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/rpc/create", listener.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    let mut have = 0;
                    while !String::from_utf8_lossy(&buf[..have]).contains("\r\n\r\n") {
                        match conn.read(&mut buf[have..]).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => have += n,
                        }
                    }
                    conn.write_all(answer.as_bytes()).await.ok();
                });
            }
        });
        url
    }

    #[tokio::test]
    async fn an_exchange_keeps_the_answers_status_headers_and_body_within_its_bound() {
        let url = answering_app(
            "HTTP/1.1 201 Created\r\ncontent-type: text/plain\r\nx-a: 1\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello",
        )
        .await;
        let f = forwarder(&app(&url, ""));
        let headers = [
            ("nats-subject".to_string(), "orders.create".to_string()),
            ("bad\nname".to_string(), "x".to_string()),
        ];
        let (done, answer) = f.exchange(&headers, Bytes::from_static(b"{}"), 5).await;
        let answer = answer.expect("an answer");
        assert_eq!((answer.status, answer.over), (201, None));
        assert_eq!(&answer.body[..], b"hello");
        assert_eq!(answer.header("content-type"), Some("text/plain"));
        assert_eq!(answer.header("x-a"), Some("1"));
        assert_eq!(done.skipped_headers, 1, "the header that is not HTTP");
        assert_eq!(done.class, HttpClass::Status(201));
        // Over the bound: nothing of the body is handed on as if it were whole.
        let (_, answer) = f.exchange(&[], Bytes::new(), 4).await;
        let answer = answer.expect("an answer");
        assert_eq!((answer.status, answer.over), (201, Some(5)));
        assert!(answer.body.is_empty());
    }

    #[tokio::test]
    async fn an_exchange_with_an_app_that_is_not_there_keeps_no_answer() {
        let f = forwarder(&app("http://127.0.0.1:1/rpc", ""));
        let (done, answer) = f.exchange(&[], Bytes::new(), 1024).await;
        assert_eq!(answer, None);
        assert_eq!(done.outcome, Outcome::Unreachable);
    }

    /// A socket that is not there, or one left behind by an app that is gone (the file
    /// stays, nothing listens), under each version: unreachable, as a refused port is.
    #[tokio::test]
    async fn a_missing_or_refusing_socket_is_an_unreachable_app() {
        let dir = tempfile::tempdir().unwrap();
        let stale = dir.path().join("stale.sock");
        drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
        let cases = [
            (dir.path().join("missing.sock"), "no socket"),
            (stale, "connection refused"),
        ];
        for (path, kind) in cases {
            for version in [HttpVersion::Http1, HttpVersion::H2c] {
                let (mut client, target) = app("http://app.local/messages", "");
                client.unix_socket = Some(path.clone());
                client.version = version;
                let m = orders(&[]);
                let done = forwarder(&(client, target)).forward(first(&m)).await;
                assert_eq!(done.outcome, Outcome::Unreachable, "{path:?} {version:?}");
                assert_eq!(done.failure.map(|f| f.kind), Some(kind), "{version:?}");
            }
        }
    }
}
