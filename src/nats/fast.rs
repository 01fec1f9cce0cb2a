//! Fast-ingest batch publish (ADR-50, nats-server 2.14+): many messages to one stream,
//! each stored on arrival (not atomic), paced by the server's flow-control acks.
//! async-nats 0.51 has no API for it. It does not decide *what* is published (that
//! is `crate::outputs` and `crate::dead_letter::stored`), and it never retries: a failed batch
//! says how many of its first messages are known stored, and the caller decides.
//!
//! The wire, as nats-server's `server/stream.go` (`getFastBatch`,
//! `processJetStreamFastBatchMsg`) and `server/jetstream_batching.go` implement it:
//!
//! - No batch headers. Each message's reply subject carries the protocol:
//!   `<inbox>.<flow>.fail.<batch seq>.<op>.$FI`, where `<inbox>` is a fresh
//!   `<prefix>.<nuid>` whose last token is the batch id (≤ 64 characters), `<flow>`
//!   the most messages per flow ack this client allows, `fail` the gap mode (a gap
//!   ends the batch), and `<op>` 0 start (sequence 1 only), 1 append, 2 commit
//!   (store this message and end), 3 commit without storing (never at sequence 1),
//!   4 ping (the highest sequence sent, not stored: the server answers with its
//!   latest flow ack, or reports the gap if the batch lost messages).
//! - The replies all go to `<inbox>.>`, subscribed before the first message. The
//!   first message is answered with `{"type":"ack","seq":0,"msgs":M}` (or an error
//!   PubAck); then `{"type":"ack","seq":N,"msgs":M}` whenever M more are persisted
//!   (messages 1..=N are stored, or were duplicates), `{"type":"gap",...}` and
//!   `{"type":"err","seq":N,"error":{...}}` (the batch then ends), and last a PubAck
//!   with `batch` and `count` (the messages it took) and `seq`, the stream sequence of
//!   the last message *this batch* stored: 0 when every one was a duplicate. A
//!   one-message batch gets a plain PubAck (`duplicate: true` for a duplicate).
//! - `Nats-Msg-Id` still deduplicates, per message and silently: the server skips a
//!   duplicate without saying so, so a batch can tell "nothing new" (`seq` 0) but not
//!   how many of a mixed batch were new.
//! - Publishing stalls while `last_ack + msgs × 2 ≤ sent` (two outstanding acks, the
//!   ADR's recommendation); a stall longer than a third of the patience sends a ping,
//!   one longer than the patience (`nats.request_timeout_ms`) fails the batch.
//!
//! The tests in `tests/it/fast.rs` pin each of these against the real server.

use std::time::Duration;

use async_nats::{HeaderMap, Message, Subscriber};
use bytes::Bytes;
use futures::{FutureExt, StreamExt};
use serde::Deserialize;
use tokio::time::Instant;

use super::Nats;
use super::outputs::{ApiError, PubAck, check_sizes, codes, header_map};
use crate::outputs::Output;

/// The most messages per flow-control ack this client allows (the `<flow>` token);
/// the server starts at it (or lower when other fast batches are open) and may lower
/// it later, never raise it.
pub const FAST_FLOW: u16 = 100;

/// Flow acks that may be outstanding before publishing stalls (ADR-50: 2 keeps the
/// server busy with the next run while the client waits for the previous one).
const MAX_OUTSTANDING_ACKS: u64 = 2;

/// What a fast batch stored, from its final PubAck.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FastCommitted {
    /// The stream that stored them.
    pub stream: String,
    /// The stream sequence of the last message this batch stored (0 when it stored
    /// none; for a one-message duplicate, the sequence stored before).
    pub seq: u64,
    /// How many messages the batch carried (all of them: each is stored, or was a
    /// duplicate).
    pub count: usize,
    /// Nothing new was stored: every message's `Nats-Msg-Id` was already in the
    /// stream's duplicate window. A batch that was partly stored before says `false`
    /// (the server does not report duplicates inside a batch).
    pub duplicate: bool,
    /// Flow-control acks received.
    pub acks: u64,
    /// How many times publishing paused to wait for an ack.
    pub stalls: u64,
}

/// A fast batch that failed: why, and how much of it is known stored.
#[derive(Debug, thiserror::Error)]
#[error("the fast batch stopped with {confirmed} message(s) confirmed stored")]
pub struct FastFailed {
    /// The batch's first `confirmed` messages are stored (or were duplicates): the
    /// server's flow acks say so in gap mode `fail`. Any later one may or may not be;
    /// sending them again with the same `Nats-Msg-Id` stores each at most once.
    pub confirmed: usize,
    /// Why.
    #[source]
    pub error: FastError,
}

/// Why a fast batch failed.
#[derive(Debug, thiserror::Error)]
pub enum FastError {
    /// Nothing answered: no stream captures the subject.
    #[error("no stream captures {0}")]
    NoStream(String),
    /// No reply within `nats.request_timeout_ms` (the first one, an ack during a
    /// stall, or the final PubAck).
    #[error("the server did not answer in time")]
    Timeout,
    /// The reply inbox could not be subscribed.
    #[error("cannot subscribe to the batch's reply inbox")]
    Subscribe(#[source] async_nats::SubscribeError),
    /// A message could not be sent (the connection is down).
    #[error("cannot publish")]
    Publish(#[source] async_nats::PublishError),
    /// The stream does not take fast-ingest batches (10205).
    #[error("the stream does not allow fast-ingest batches: set allow_batched on it")]
    NotEnabled,
    /// The server did not accept the reply subject's pattern (10206).
    #[error("the server refused the fast batch's reply subject pattern")]
    InvalidPattern,
    /// The batch id is invalid: over 64 characters (10207).
    #[error("the fast batch's id is invalid")]
    InvalidId,
    /// The server does not know the batch: it was idle too long, or ended (10208).
    #[error("the server does not know the fast batch (it was abandoned)")]
    UnknownId,
    /// Too many fast batches are open on the stream or the server (10211): later.
    #[error("too many fast batches in flight")]
    TooManyInFlight,
    /// A message is larger than the server or the stream takes.
    #[error("{0}")]
    TooLarge(String),
    /// The server lost messages of the batch: from `expected` up to `got` (gap mode
    /// `fail` ends the batch there).
    #[error("the server lost messages {expected}..{got} of the fast batch")]
    Gap {
        /// The batch sequence it expected next.
        expected: u64,
        /// The batch sequence that arrived instead.
        got: u64,
    },
    /// The stream refused a message (for message `at` of the batch, when known).
    #[error("the stream refused the publish: {description} (code {code}, error {err_code})")]
    Refused {
        /// The batch sequence of the refused message (0 when the server did not say).
        at: u64,
        /// The API status code.
        code: u16,
        /// The JetStream error code.
        err_code: u64,
        /// The server's words.
        description: String,
    },
    /// The batch ended before all of it was taken, and the server did not say why.
    #[error("the fast batch ended after {count} of {of} messages")]
    EndedEarly {
        /// The messages it took.
        count: usize,
        /// The messages in the batch.
        of: usize,
    },
    /// A reply that is none of the protocol's.
    #[error("the server's answer is not a fast-batch reply: {0}")]
    BadAnswer(String),
}

impl FastError {
    /// A short, closed label for logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            FastError::NoStream(_) => "no_stream",
            FastError::Timeout => "timeout",
            FastError::Subscribe(_) | FastError::Publish(_) => "unavailable",
            FastError::NotEnabled => "not_enabled",
            FastError::TooManyInFlight => "too_many_batches",
            FastError::TooLarge(_) => "too_large",
            FastError::Gap { .. } | FastError::UnknownId | FastError::EndedEarly { .. } => {
                "incomplete"
            }
            FastError::InvalidPattern
            | FastError::InvalidId
            | FastError::Refused { .. }
            | FastError::BadAnswer(_) => "rejected",
        }
    }
}

/// Publishes fast-ingest batches. Cheap to clone.
#[derive(Debug, Clone)]
pub struct FastPublisher {
    client: async_nats::Client,
    patience: Duration,
}

impl Nats {
    /// A publisher of fast-ingest batches.
    pub fn fast_ingest(&self) -> FastPublisher {
        FastPublisher {
            client: self.client.clone(),
            patience: self.patience,
        }
    }
}

/// One reply on the batch's inbox.
#[derive(Debug, PartialEq, Eq)]
enum Reply {
    /// Messages up to `seq` are persisted; an ack comes every `msgs` from now on.
    Ack { seq: u64, msgs: u64 },
    /// The server expected `last_seq` and got `seq`.
    Gap { last_seq: u64, seq: u64 },
    /// Message `seq` was refused.
    Err { seq: u64, error: ApiError },
    /// The batch is over: a PubAck, or an error in PubAck form.
    End(PubAck),
    /// Nobody captures the subject (a 503 status).
    NoResponders,
}

/// The flow-control frames, told apart by `type`.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum Frame {
    Ack {
        seq: u64,
        msgs: u64,
    },
    Gap {
        last_seq: u64,
        seq: u64,
    },
    Err {
        #[serde(default)]
        seq: u64,
        #[serde(default)]
        error: Option<ApiError>,
    },
}

/// Reads one reply: a status (503: no responders), a typed frame, or a PubAck.
fn read_reply(m: &Message) -> Result<Reply, FastError> {
    if let Some(status) = m.status {
        return match u16::from(status) {
            503 => Ok(Reply::NoResponders),
            code => Err(FastError::BadAnswer(format!(
                "status {code} {}",
                m.description.as_deref().unwrap_or_default()
            ))),
        };
    }
    let bad = |e: serde_json::Error| {
        FastError::BadAnswer(format!("{e}: {}", String::from_utf8_lossy(&m.payload)))
    };
    let value: serde_json::Value = serde_json::from_slice(&m.payload).map_err(bad)?;
    if value.get("type").is_some() {
        return Ok(match serde_json::from_value::<Frame>(value).map_err(bad)? {
            Frame::Ack { seq, msgs } => Reply::Ack { seq, msgs },
            Frame::Gap { last_seq, seq } => Reply::Gap { last_seq, seq },
            Frame::Err { seq, error } => Reply::Err {
                seq,
                error: error.unwrap_or_default(),
            },
        });
    }
    Ok(Reply::End(serde_json::from_value(value).map_err(bad)?))
}

/// An API error mapped to its variant.
fn api_error(e: ApiError, at: u64) -> FastError {
    match e.err_code {
        codes::FAST_NOT_ENABLED => FastError::NotEnabled,
        codes::INVALID_PATTERN => FastError::InvalidPattern,
        codes::INVALID_ID => FastError::InvalidId,
        codes::UNKNOWN_ID => FastError::UnknownId,
        codes::TOO_MANY_IN_FLIGHT => FastError::TooManyInFlight,
        codes::MESSAGE_TOO_LARGE | codes::HEADER_TOO_LARGE => FastError::TooLarge(e.description),
        _ => FastError::Refused {
            at,
            code: e.code,
            err_code: e.err_code,
            description: e.description,
        },
    }
}

/// The operations of the reply subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Start = 0,
    Append = 1,
    Commit = 2,
    Ping = 4,
}

/// One batch in progress: what was sent and what the server said.
struct Batch {
    /// `<prefix>.<batch id>`; the replies arrive under `<inbox>.>`.
    inbox: String,
    /// Messages in the batch.
    len: usize,
    /// The highest batch sequence sent.
    sent: u64,
    /// The highest batch sequence the server says is persisted.
    acked: u64,
    /// Messages per flow ack, as the server last said.
    flow: u64,
    acks: u64,
    stalls: u64,
    /// The first reply arrived (the batch exists on the server).
    started: bool,
    /// A gap or a refused message ended the batch: what to report if the PubAck
    /// says it took fewer than `len`.
    stopped: Option<FastError>,
    /// The final PubAck.
    end: Option<PubAck>,
}

impl Batch {
    /// A batch of `len` messages whose replies arrive under `<inbox>.>`, nothing sent.
    fn new(inbox: String, len: usize) -> Batch {
        Batch {
            inbox,
            len,
            sent: 0,
            acked: 0,
            flow: u64::from(FAST_FLOW),
            acks: 0,
            stalls: 0,
            started: false,
            stopped: None,
            end: None,
        }
    }

    fn reply(&self, seq: u64, op: Op) -> String {
        format!("{}.{FAST_FLOW}.fail.{seq}.{}.$FI", self.inbox, op as u8)
    }

    /// Takes one reply into the state.
    fn take(&mut self, reply: Reply, subject: &str) -> Result<(), FastError> {
        match reply {
            Reply::Ack { seq, msgs } => {
                self.started = true;
                self.acks += 1;
                // A later ack covers every earlier one, even one that was lost.
                self.acked = self.acked.max(seq);
                self.flow = msgs.max(1);
            }
            Reply::Gap { last_seq, seq } => {
                self.stopped.get_or_insert(FastError::Gap {
                    expected: last_seq,
                    got: seq,
                });
            }
            Reply::Err { seq, error } => {
                self.stopped.get_or_insert(api_error(error, seq));
            }
            Reply::End(ack) => self.end = Some(ack),
            Reply::NoResponders => return Err(FastError::NoStream(subject.to_string())),
        }
        Ok(())
    }

    /// Whether to wait for acks before sending more (ADR-50's rule).
    fn must_stall(&self) -> bool {
        self.acked + self.flow * MAX_OUTSTANDING_ACKS <= self.sent
    }

    /// The batch's first messages known stored.
    fn confirmed(&self) -> usize {
        usize::try_from(self.acked).map_or(self.len, |n| n.min(self.len))
    }

    fn failed(&self, error: FastError) -> FastFailed {
        FastFailed {
            confirmed: self.confirmed(),
            error,
        }
    }
}

impl FastPublisher {
    /// Publishes `outputs` in order as one fast-ingest batch (gap mode `fail`) to the
    /// stream that captures them; they must all go to one stream. An empty list
    /// publishes nothing.
    ///
    /// # Errors
    /// [`FastFailed`]: why, and how many of the first messages are stored.
    pub async fn publish(&self, outputs: &[Output]) -> Result<FastCommitted, FastFailed> {
        let no = |error| FastFailed {
            confirmed: 0,
            error,
        };
        let Some(last) = outputs.last() else {
            return Ok(FastCommitted {
                stream: String::new(),
                seq: 0,
                count: 0,
                duplicate: false,
                acks: 0,
                stalls: 0,
            });
        };
        check_sizes(&self.client, outputs).map_err(|why| no(FastError::TooLarge(why)))?;
        let inbox = self.client.new_inbox();
        let mut replies = self
            .client
            .subscribe(format!("{inbox}.>"))
            .await
            .map_err(|e| no(FastError::Subscribe(e)))?;
        let mut b = Batch::new(inbox, outputs.len());
        // Dropping `replies` on return unsubscribes: once a batch is over, the server
        // answers whatever is still arriving with errors nobody needs to read.
        for (seq, o) in (1u64..).zip(outputs) {
            let op = if seq == b.len as u64 {
                Op::Commit
            } else if seq == 1 {
                Op::Start
            } else {
                Op::Append
            };
            self.send(o, b.reply(seq, op))
                .await
                .map_err(|e| b.failed(e))?;
            b.sent = seq;
            if op == Op::Commit {
                break;
            }
            if seq == 1 {
                // The first reply says whether the stream takes the batch, and how
                // fast to go: nothing more is sent before it.
                self.wait(&mut replies, &mut b, &o.subject, |b| !b.started)
                    .await?;
            } else {
                // What has arrived, without waiting.
                while let Some(Some(m)) = replies.next().now_or_never() {
                    let reply = read_reply(&m).map_err(|e| b.failed(e))?;
                    b.take(reply, &o.subject).map_err(|e| b.failed(e))?;
                }
                if b.must_stall() && b.end.is_none() && b.stopped.is_none() {
                    b.stalls += 1;
                    self.wait(&mut replies, &mut b, &o.subject, Batch::must_stall)
                        .await?;
                }
            }
            if b.end.is_some() || b.stopped.is_some() {
                break;
            }
        }
        // The commit is sent, or the batch ended early: the PubAck closes it.
        self.wait(&mut replies, &mut b, &last.subject, |_| true)
            .await?;
        finish(b)
    }

    /// Reads replies while `waiting` holds and the batch has not ended, pinging
    /// after a third of the patience without one and failing after all of it.
    async fn wait(
        &self,
        replies: &mut Subscriber,
        b: &mut Batch,
        subject: &str,
        waiting: impl Fn(&Batch) -> bool,
    ) -> Result<(), FastFailed> {
        let deadline = Instant::now() + self.patience;
        let every = self.patience / 3;
        let mut ping = Instant::now() + every;
        while b.end.is_none() && waiting(b) {
            // Losing branches: `replies.next()` is cancel-safe (a message not taken
            // stays in the subscription's channel); the timers are re-armed.
            tokio::select! {
                biased;
                m = replies.next() => {
                    let Some(m) = m else {
                        return Err(b.failed(FastError::Timeout));
                    };
                    let reply = read_reply(&m).map_err(|e| b.failed(e))?;
                    b.take(reply, subject).map_err(|e| b.failed(e))?;
                }
                () = tokio::time::sleep_until(deadline) => {
                    return Err(b.failed(FastError::Timeout));
                }
                () = tokio::time::sleep_until(ping), if b.started => {
                    // Lost acks are sent again; a lost message shows as a gap.
                    let send = self.client.publish_with_reply(
                        subject.to_string(),
                        b.reply(b.sent, Op::Ping),
                        Bytes::new(),
                    );
                    match tokio::time::timeout(self.patience, send).await {
                        Ok(sent) => sent.map_err(|e| b.failed(FastError::Publish(e)))?,
                        Err(_) => return Err(b.failed(FastError::Timeout)),
                    }
                    ping = Instant::now() + every;
                }
            }
        }
        Ok(())
    }

    /// Sends one message of the batch with its protocol reply subject.
    async fn send(&self, o: &Output, reply: String) -> Result<(), FastError> {
        let send = self.client.publish_with_reply_and_headers(
            o.subject.clone(),
            reply,
            header_map(&o.headers, HeaderMap::new()),
            o.payload.clone(),
        );
        match tokio::time::timeout(self.patience, send).await {
            Ok(Err(e)) if e.kind() == async_nats::PublishErrorKind::MaxPayloadExceeded => {
                // Larger than check_sizes estimated (many headers): the message's
                // fault, not the connection's.
                Err(FastError::TooLarge(e.to_string()))
            }
            Ok(sent) => sent.map_err(FastError::Publish),
            Err(_) => Err(FastError::Timeout),
        }
    }
}

/// The result of a batch whose PubAck arrived.
fn finish(mut b: Batch) -> Result<FastCommitted, FastFailed> {
    let Some(ack) = b.end.take() else {
        // `wait` returns Ok only once the PubAck is in.
        return Err(b.failed(FastError::Timeout));
    };
    if let Some(e) = ack.error {
        let at = b.acked + 1;
        return Err(b.failed(api_error(e, at)));
    }
    let count = ack
        .count
        .map_or(b.len, |c| usize::try_from(c).unwrap_or(usize::MAX));
    if count < b.len {
        // The messages up to `count` were taken (stored or duplicates) before the
        // batch ended.
        b.acked = b.acked.max(count as u64);
        let error = b
            .stopped
            .take()
            .unwrap_or(FastError::EndedEarly { count, of: b.len });
        return Err(b.failed(error));
    }
    let (Some(stream), Some(seq)) = (ack.stream, ack.seq) else {
        return Err(b.failed(FastError::BadAnswer(
            "a PubAck without stream or seq".into(),
        )));
    };
    Ok(FastCommitted {
        stream,
        seq,
        count: b.len,
        duplicate: ack.duplicate || seq == 0,
        acks: b.acks,
        stalls: b.stalls,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(payload: &str) -> Message {
        Message {
            subject: "_INBOX.x.y".into(),
            reply: None,
            payload: Bytes::from(payload.to_string()),
            headers: None,
            status: None,
            description: None,
            length: payload.len(),
        }
    }

    #[test]
    fn replies_table() {
        let read = |s: &str| read_reply(&message(s));
        assert_eq!(
            read(r#"{"type":"ack","seq":200,"msgs":100}"#).unwrap(),
            Reply::Ack {
                seq: 200,
                msgs: 100
            }
        );
        assert_eq!(
            read(r#"{"type":"gap","last_seq":10,"seq":15}"#).unwrap(),
            Reply::Gap {
                last_seq: 10,
                seq: 15
            }
        );
        let Reply::Err { seq, error } = read(
            r#"{"type":"err","seq":7,"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 1"}}"#,
        )
        .unwrap() else {
            panic!("not an err frame");
        };
        assert_eq!((seq, error.err_code), (7, 10071));
        let Reply::End(ack) = read(r#"{"stream":"S","seq":0,"batch":"b","count":3}"#).unwrap()
        else {
            panic!("not a PubAck");
        };
        assert_eq!((ack.seq, ack.count), (Some(0), Some(3)));
        let Reply::End(ack) =
            read(r#"{"stream":"S","seq":4,"duplicate": true,"batch":"b","count":1}"#).unwrap()
        else {
            panic!("not a PubAck");
        };
        assert!(ack.duplicate);
        assert!(matches!(read("nope"), Err(FastError::BadAnswer(_))));
        assert!(matches!(
            read(r#"{"type":"what"}"#),
            Err(FastError::BadAnswer(_))
        ));
        let mut status = message("");
        status.status = Some(async_nats::StatusCode::NO_RESPONDERS);
        assert_eq!(read_reply(&status).unwrap(), Reply::NoResponders);
    }

    #[test]
    fn error_codes_table() {
        let e = |code: u64| {
            api_error(
                ApiError {
                    code: 400,
                    err_code: code,
                    description: "d".into(),
                },
                3,
            )
        };
        assert!(matches!(e(10205), FastError::NotEnabled));
        assert!(matches!(e(10206), FastError::InvalidPattern));
        assert!(matches!(e(10207), FastError::InvalidId));
        assert!(matches!(e(10208), FastError::UnknownId));
        assert!(matches!(e(10211), FastError::TooManyInFlight));
        assert!(matches!(e(10054), FastError::TooLarge(_)));
        assert!(matches!(
            e(10071),
            FastError::Refused {
                at: 3,
                err_code: 10071,
                ..
            }
        ));
        assert_eq!(e(10211).label(), "too_many_batches");
        assert_eq!(e(10205).label(), "not_enabled");
    }

    /// The PubAck of a batch of `count` in stream S, its last at `seq`.
    fn stored(seq: u64, count: u64) -> PubAck {
        PubAck {
            stream: Some("S".into()),
            seq: Some(seq),
            count: Some(count),
            ..PubAck::default()
        }
    }

    fn batch(len: usize) -> Batch {
        Batch::new("_INBOX.abc".into(), len)
    }

    #[test]
    fn the_reply_subject_carries_the_protocol() {
        let b = batch(3);
        assert_eq!(b.reply(1, Op::Start), "_INBOX.abc.100.fail.1.0.$FI");
        assert_eq!(b.reply(2, Op::Append), "_INBOX.abc.100.fail.2.1.$FI");
        assert_eq!(b.reply(3, Op::Commit), "_INBOX.abc.100.fail.3.2.$FI");
        assert_eq!(b.reply(3, Op::Ping), "_INBOX.abc.100.fail.3.4.$FI");
    }

    #[test]
    fn publishing_stalls_at_two_outstanding_acks_and_a_later_ack_covers_a_lost_one() {
        let mut b = batch(1000);
        b.take(Reply::Ack { seq: 0, msgs: 10 }, "s").unwrap();
        b.sent = 19;
        assert!(!b.must_stall());
        b.sent = 20;
        assert!(b.must_stall(), "0 + 10 × 2 ≤ 20");
        // The ack for 10 was lost; the one for 20 covers it.
        b.take(Reply::Ack { seq: 20, msgs: 10 }, "s").unwrap();
        assert!(!b.must_stall());
        assert_eq!(b.confirmed(), 20);
        // An ack arriving late never moves the confirmed point back.
        b.take(Reply::Ack { seq: 10, msgs: 5 }, "s").unwrap();
        assert_eq!((b.acked, b.flow), (20, 5));
        b.sent = 30;
        assert!(b.must_stall(), "the server slowed down: 20 + 5 × 2 ≤ 30");
        assert_eq!(b.acks, 3);
    }

    #[test]
    fn the_pubacks_count_tells_where_a_stopped_batch_ended() {
        let mut b = batch(10);
        b.acked = 2;
        b.take(
            Reply::Gap {
                last_seq: 5,
                seq: 7,
            },
            "s",
        )
        .unwrap();
        b.end = Some(stored(40, 4));
        let e = finish(b).unwrap_err();
        assert_eq!(e.confirmed, 4);
        assert!(matches!(
            e.error,
            FastError::Gap {
                expected: 5,
                got: 7
            }
        ));

        let mut b = batch(3);
        b.end = Some(stored(0, 3));
        let c = finish(b).unwrap();
        assert!(c.duplicate, "seq 0: the batch stored nothing new");
        assert_eq!(c.count, 3);

        let mut b = batch(3);
        b.acked = 1;
        b.end = Some(PubAck {
            error: Some(ApiError {
                code: 400,
                err_code: 10205,
                description: "batch publish is disabled".into(),
            }),
            ..PubAck::default()
        });
        let e = finish(b).unwrap_err();
        assert_eq!(e.confirmed, 1);
        assert!(matches!(e.error, FastError::NotEnabled));
    }
}
