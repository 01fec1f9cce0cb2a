//! Publishing the app's outputs and awaiting their PubAck: one message, several one
//! by one, or several as one atomic batch (ADR-50, nats-server 2.12+), which
//! async-nats 0.51 has no API for.
//!
//! The atomic batch on the wire: every message carries `Nats-Batch-Id` (one id per
//! batch) and `Nats-Batch-Sequence` (1..n); the last one also `Nats-Batch-Commit: 1`.
//! The first message is a request (the server answers with an empty ack, or an
//! error), the middle ones are plain publishes, and the commit is a request whose
//! answer is the PubAck of the last message with `batch` and `count`. The server
//! stores all of them or none. A batch that carries a `Nats-Msg-Id` already in the
//! stream's duplicate window is refused whole (10201): for deterministic ids, that
//! means the batch was committed before, and is reported as a duplicate commit. A
//! connection keeps at most [`crate::outputs::SERVER_BATCHES_IN_FLIGHT`] batches open
//! at once (nats-server's default bound per stream); the others wait.

use std::time::Duration;

use async_nats::{HeaderMap, RequestErrorKind};
use bytes::Bytes;
use serde::Deserialize;

use super::Nats;
use crate::outputs::Output;
use crate::seam::publish::{Committed, OutputFailure};

/// Why outputs were not (all) stored.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// Nothing answered: no stream captures the subject.
    #[error("no stream captures {0}")]
    NoStream(String),
    /// No answer within `nats.request_timeout_ms`.
    #[error("the server did not answer in time")]
    Timeout,
    /// The request could not be made (the connection is down).
    #[error("cannot publish")]
    Request(#[source] async_nats::RequestError),
    /// A plain publish of a batch's middle could not be sent.
    #[error("cannot publish")]
    Publish(#[source] async_nats::PublishError),
    /// The stream does not take atomic batches (10174).
    #[error(
        "the stream does not allow atomic publish: set allow_atomic on it, or publish.atomic = false"
    )]
    NotAtomic,
    /// Too many batches are open on the stream or the server (10210): later.
    #[error("too many atomic batches in flight on the stream")]
    TooManyBatches,
    /// A message is larger than the server or the stream takes.
    #[error("{0}")]
    TooLarge(String),
    /// The stream refused them for another reason.
    #[error("the stream refused the publish: {description} (code {code}, error {err_code})")]
    Refused {
        /// The API status code.
        code: u16,
        /// The JetStream error code.
        err_code: u64,
        /// The server's words.
        description: String,
    },
    /// The answer was not a PubAck.
    #[error("the server's answer is not a PubAck: {0}")]
    BadAnswer(String),
}

impl OutputFailure for OutputError {
    fn label(&self) -> &'static str {
        match self {
            OutputError::NoStream(_) => "no_stream",
            OutputError::Timeout => "timeout",
            OutputError::Request(_) | OutputError::Publish(_) => "unavailable",
            OutputError::NotAtomic => "not_atomic",
            OutputError::TooManyBatches => "too_many_batches",
            OutputError::TooLarge(_) => "too_large",
            OutputError::Refused { .. } | OutputError::BadAnswer(_) => "rejected",
        }
    }

    fn is_permanent(&self) -> bool {
        self.is_too_large()
    }

    fn is_too_large(&self) -> bool {
        matches!(self, OutputError::TooLarge(_))
    }

    // A stream's refusal (it takes no atomic batches, no stream captures the subject,
    // a wrong expected sequence) stays until someone changes the stream or the request.
    fn retry_may_help(&self) -> bool {
        match self {
            OutputError::Timeout
            | OutputError::Request(_)
            | OutputError::Publish(_)
            | OutputError::TooManyBatches => true,
            // JetStream itself unavailable (a leader election): later.
            OutputError::Refused { code, .. } => *code == 503,
            OutputError::NoStream(_)
            | OutputError::NotAtomic
            | OutputError::TooLarge(_)
            | OutputError::BadAnswer(_) => false,
        }
    }
}

/// JetStream's error codes that a publish (one by one, atomic, or fast) tells apart.
pub(super) mod codes {
    pub(crate) const MESSAGE_TOO_LARGE: u64 = 10054;
    pub(crate) const HEADER_TOO_LARGE: u64 = 10097;
    /// The stream does not take atomic batches.
    pub(crate) const ATOMIC_NOT_ENABLED: u64 = 10174;
    pub(crate) const BATCH_TOO_LARGE: u64 = 10199;
    pub(crate) const DUPLICATE: u64 = 10201;
    /// The stream does not take fast-ingest batches.
    pub(crate) const FAST_NOT_ENABLED: u64 = 10205;
    pub(crate) const INVALID_PATTERN: u64 = 10206;
    pub(crate) const INVALID_ID: u64 = 10207;
    pub(crate) const UNKNOWN_ID: u64 = 10208;
    pub(crate) const TOO_MANY_BATCHES: u64 = 10210;
    pub(crate) const TOO_MANY_IN_FLIGHT: u64 = 10211;
}

/// Publishes outputs. Cheap to clone.
#[derive(Debug, Clone)]
pub struct OutputPublisher {
    client: async_nats::Client,
    patience: Duration,
    batches: std::sync::Arc<tokio::sync::Semaphore>,
}

impl Nats {
    /// A publisher of the app's outputs.
    pub fn outputs(&self) -> OutputPublisher {
        OutputPublisher {
            client: self.client.clone(),
            patience: self.patience,
            batches: self.batches.clone(),
        }
    }
}

/// What a server takes when it has not said (its default).
const DEFAULT_MAX_PAYLOAD: usize = 1024 * 1024;

/// The largest message (headers and payload) the server takes.
pub(super) fn max_payload(client: &async_nats::Client) -> usize {
    match client.server_info().max_payload {
        0 => DEFAULT_MAX_PAYLOAD,
        n => n,
    }
}

/// `own` headers appended to `map`. Names and values were checked where they were
/// read (NATS headers, crate::outputs, crate::dead_letter::stored); anything the client would
/// still reject is left out rather than panicking.
pub(super) fn header_map(own: &[(String, String)], mut map: HeaderMap) -> HeaderMap {
    for (name, value) in own {
        if let (Ok(n), Ok(v)) = (
            name.parse::<async_nats::HeaderName>(),
            value.parse::<async_nats::HeaderValue>(),
        ) {
            map.append(n, v);
        }
    }
    map
}

/// A PubAck, or an API error in its place (atomic and fast-ingest batches too).
#[derive(Debug, Default, PartialEq, Eq, Deserialize)]
pub(super) struct PubAck {
    #[serde(default)]
    pub(super) stream: Option<String>,
    #[serde(default)]
    pub(super) seq: Option<u64>,
    #[serde(default)]
    pub(super) duplicate: bool,
    #[serde(default)]
    pub(super) count: Option<u64>,
    #[serde(default)]
    pub(super) error: Option<ApiError>,
}

/// An API error as the server writes it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub(super) struct ApiError {
    #[serde(default)]
    pub(super) code: u16,
    #[serde(default)]
    pub(super) err_code: u64,
    #[serde(default)]
    pub(super) description: String,
}

/// Refuses `outputs` when the server would refuse one of them for its size, before
/// anything is sent: why the first that is too large is.
pub(super) fn check_sizes(client: &async_nats::Client, outputs: &[Output]) -> Result<(), String> {
    let max = max_payload(client);
    // Its size on the wire, and the batch headers, which add well under 200 bytes.
    match outputs.iter().find(|o| o.wire_size() + 200 > max) {
        Some(o) => Err(format!(
            "a message to {} of {} bytes is over the server's max_payload ({max})",
            o.subject,
            o.wire_size()
        )),
        None => Ok(()),
    }
}

impl OutputPublisher {
    /// Publishes `outputs` in order: as one atomic batch when `atomic` and there is
    /// more than one, else one by one (each awaiting its PubAck). An empty list
    /// publishes nothing.
    ///
    /// # Errors
    /// [`OutputError`]; in an atomic batch nothing was stored, one by one the ones
    /// before the failure were.
    pub async fn publish(
        &self,
        outputs: &[Output],
        atomic: bool,
    ) -> Result<Committed, OutputError> {
        check_sizes(&self.client, outputs).map_err(OutputError::TooLarge)?;
        if atomic && outputs.len() > 1 {
            return self.atomic(outputs).await;
        }
        let mut committed = Committed {
            stream: String::new(),
            seq: 0,
            count: 0,
            duplicate: true,
        };
        for o in outputs {
            let answer = self.request(o, HeaderMap::new()).await?;
            let (stream, seq) = stored(&answer)?;
            committed = Committed {
                stream,
                seq,
                count: committed.count + 1,
                duplicate: committed.duplicate && answer.duplicate,
            };
        }
        committed.duplicate &= committed.count > 0;
        Ok(committed)
    }

    /// One atomic batch of two or more messages.
    async fn atomic(&self, outputs: &[Output]) -> Result<Committed, OutputError> {
        // At most the server's bound open at once (over all streams: a bound per
        // stream would need the target known before publishing). The semaphore is
        // never closed, so acquiring only waits.
        let _open = self.batches.acquire().await;
        let inbox = self.client.new_inbox();
        // The inbox's last token is a fresh NUID: 22 characters, within the 64 allowed.
        let id = inbox.rsplit('.').next().unwrap_or(&inbox).to_string();
        let last = outputs.len() - 1;
        for (i, o) in outputs.iter().enumerate() {
            let mut batch = HeaderMap::new();
            batch.insert("Nats-Batch-Id", id.as_str());
            batch.insert("Nats-Batch-Sequence", (i + 1).to_string().as_str());
            if i == last {
                batch.insert("Nats-Batch-Commit", "1");
                let answer = self.request(o, batch).await;
                return match answer {
                    Ok(a) => {
                        let (stream, seq) = stored(&a)?;
                        let count = a.count.map_or(outputs.len(), |c| c as usize);
                        Ok(Committed {
                            stream,
                            seq,
                            count,
                            duplicate: false,
                        })
                    }
                    Err(OutputError::Refused { err_code, .. }) if err_code == codes::DUPLICATE => {
                        Ok(Committed {
                            stream: String::new(),
                            seq: 0,
                            count: outputs.len(),
                            duplicate: true,
                        })
                    }
                    Err(e) => Err(e),
                };
            }
            if i == 0 {
                // The first message is acked (empty) or refused, before the rest goes.
                match self.request(o, batch).await {
                    Ok(_) => {}
                    Err(OutputError::Refused { err_code, .. }) if err_code == codes::DUPLICATE => {
                        return Ok(Committed {
                            stream: String::new(),
                            seq: 0,
                            count: outputs.len(),
                            duplicate: true,
                        });
                    }
                    Err(e) => return Err(e),
                }
            } else {
                let send = self.client.publish_with_headers(
                    o.subject.clone(),
                    header_map(&o.headers, batch),
                    o.payload.clone(),
                );
                match tokio::time::timeout(self.patience, send).await {
                    Ok(sent) => sent.map_err(OutputError::Publish)?,
                    Err(_) => return Err(OutputError::Timeout),
                }
            }
        }
        // `outputs` has at least two messages, so the loop returned at the last one.
        Err(OutputError::BadAnswer("empty batch".into()))
    }

    /// One request; the answer read as a PubAck (or an empty ack), errors mapped.
    async fn request(&self, o: &Output, extra: HeaderMap) -> Result<PubAck, OutputError> {
        let request = self.client.request_with_headers(
            o.subject.clone(),
            header_map(&o.headers, extra),
            o.payload.clone(),
        );
        let message = match tokio::time::timeout(self.patience, request).await {
            Err(_) => return Err(OutputError::Timeout),
            Ok(Err(e)) => {
                return Err(match e.kind() {
                    RequestErrorKind::NoResponders => OutputError::NoStream(o.subject.clone()),
                    RequestErrorKind::TimedOut => OutputError::Timeout,
                    _ => OutputError::Request(e),
                });
            }
            Ok(Ok(m)) => m,
        };
        read_answer(&message.payload)
    }
}

/// An answer's body: empty (the ack of a batch's first message), a PubAck, or an
/// API error mapped to its variant.
fn read_answer(payload: &Bytes) -> Result<PubAck, OutputError> {
    if payload.is_empty() {
        return Ok(PubAck::default());
    }
    let answer: PubAck = serde_json::from_slice(payload).map_err(|e| {
        OutputError::BadAnswer(format!("{e}: {}", String::from_utf8_lossy(payload)))
    })?;
    match answer.error {
        None => Ok(answer),
        Some(e) => Err(match e.err_code {
            codes::ATOMIC_NOT_ENABLED => OutputError::NotAtomic,
            codes::TOO_MANY_BATCHES => OutputError::TooManyBatches,
            codes::MESSAGE_TOO_LARGE | codes::HEADER_TOO_LARGE | codes::BATCH_TOO_LARGE => {
                OutputError::TooLarge(e.description)
            }
            _ => OutputError::Refused {
                code: e.code,
                err_code: e.err_code,
                description: e.description,
            },
        }),
    }
}

/// The stream and sequence of a PubAck.
fn stored(a: &PubAck) -> Result<(String, u64), OutputError> {
    match (&a.stream, a.seq) {
        (Some(stream), Some(seq)) => Ok((stream.clone(), seq)),
        _ => Err(OutputError::BadAnswer("no stream or sequence".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_table() {
        let refused = |code| OutputError::Refused {
            code,
            err_code: 10071,
            description: "wrong last sequence: 3".into(),
        };
        // (failure, label, permanent, a retry may help)
        let cases = [
            (
                OutputError::TooLarge(String::new()),
                "too_large",
                true,
                false,
            ),
            (
                OutputError::NoStream(String::new()),
                "no_stream",
                false,
                false,
            ),
            (OutputError::Timeout, "timeout", false, true),
            (OutputError::NotAtomic, "not_atomic", false, false),
            (OutputError::TooManyBatches, "too_many_batches", false, true),
            (refused(400), "rejected", false, false),
            // JetStream itself unavailable (a leader election).
            (refused(503), "rejected", false, true),
            (
                OutputError::BadAnswer(String::new()),
                "rejected",
                false,
                false,
            ),
        ];
        for (e, label, permanent, retry) in cases {
            assert_eq!(
                (e.label(), e.is_permanent(), e.retry_may_help()),
                (label, permanent, retry),
                "{e:?}"
            );
            assert!(crate::ops::metrics::PUBLISH_FAILURES.contains(&label));
        }
        assert!(crate::ops::metrics::PUBLISH_FAILURES.contains(&"unavailable"));
    }

    #[test]
    fn answers_table() {
        let read = |s: &str| read_answer(&Bytes::from(s.to_string()));
        assert!(read("").is_ok(), "the first message's empty ack");
        let a = read(r#"{"stream":"S","seq":7,"batch":"b","count":3}"#).unwrap();
        assert_eq!(
            (a.stream.as_deref(), a.seq, a.count),
            (Some("S"), Some(7), Some(3))
        );
        let err = |s: &str| read(s).err().unwrap();
        let api = |code: u64| {
            format!(r#"{{"error":{{"code":400,"err_code":{code},"description":"d"}}}}"#)
        };
        assert!(matches!(err(&api(10174)), OutputError::NotAtomic));
        assert!(matches!(err(&api(10210)), OutputError::TooManyBatches));
        assert!(matches!(err(&api(10054)), OutputError::TooLarge(_)));
        assert!(matches!(
            err(&api(10201)),
            OutputError::Refused {
                err_code: 10201,
                ..
            }
        ));
        assert!(err(&api(10201)).to_string().contains("10201"));
        assert!(matches!(err("nope"), OutputError::BadAnswer(_)));
        assert_eq!(err(&api(10210)).label(), "too_many_batches");
        assert!(err(&api(10054)).is_permanent());
        assert!(!err(&api(10174)).is_permanent());
    }
}
