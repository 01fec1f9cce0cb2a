//! Publishing dead letters: the JetStream PubAck awaited, and a duplicate PubAck
//! checked against what is stored under the letter's id.

use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::ErrorCode;
use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use async_nats::jetstream::publish::PublishAck;
use bytes::Bytes;

use super::outputs::header_map;
use super::{Cause, Nats, NatsError};

/// Publishes dead letters.
#[derive(Debug, Clone)]
pub(super) struct DeadLetterPublisher {
    js: async_nats::jetstream::Context,
    patience: Duration,
}

impl Nats {
    /// A dead-letter publisher.
    pub(super) fn dead_letter_publisher(&self) -> DeadLetterPublisher {
        DeadLetterPublisher {
            js: self.js.clone(),
            patience: self.patience,
        }
    }
}

impl DeadLetterPublisher {
    /// Publishes and waits for the stream's PubAck, for at most the request timeout.
    ///
    /// # Errors
    /// [`NatsError::DeadLetterTooLarge`] when the server or the DLQ stream refuses it
    /// for its size; [`NatsError::DeadLetter`] when no stream stored it (no stream
    /// captures the subject, a limit refused it, no answer in time);
    /// [`NatsError::NotSent`] when nothing could be sent in time.
    ///
    /// A duplicate PubAck is not taken on trust: the letter stored before under the
    /// same id (its TERM lost in a crash) is read back, and a message that is not this
    /// letter (someone published under jetrelay's id first) makes the letter go under
    /// another id, `<id>:<sequence of the squatter>`; [`NatsError::DeadLetterIdTaken`]
    /// when that one is taken too.
    pub(super) async fn publish(
        &self,
        subject: &str,
        headers: &[(String, String)],
        payload: Bytes,
    ) -> Result<(), NatsError> {
        let ack = self.publish_once(subject, headers, payload.clone()).await?;
        if !ack.duplicate || self.is_this_letter(&ack, headers, &payload).await? {
            return Ok(());
        }
        let id = headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("Nats-Msg-Id"))
            .map_or("", |(_, v)| v.as_str());
        let other = format!("{id}:{}", ack.sequence);
        tracing::error!(
            id, stream = %ack.stream, squatter_seq = ack.sequence, instead = %other,
            "a message that is not this dead letter is stored under its id: the letter goes under another id"
        );
        let renamed: Vec<(String, String)> = headers
            .iter()
            .map(|(n, v)| {
                if n.eq_ignore_ascii_case("Nats-Msg-Id") {
                    (n.clone(), other.clone())
                } else {
                    (n.clone(), v.clone())
                }
            })
            .collect();
        let again = self
            .publish_once(subject, &renamed, payload.clone())
            .await?;
        if !again.duplicate || self.is_this_letter(&again, &renamed, &payload).await? {
            Ok(())
        } else {
            Err(NatsError::DeadLetterIdTaken(other))
        }
    }

    /// One publish, its PubAck awaited for at most the request timeout.
    async fn publish_once(
        &self,
        subject: &str,
        headers: &[(String, String)],
        payload: Bytes,
    ) -> Result<PublishAck, NatsError> {
        let map = header_map(headers, HeaderMap::new());
        let publish = async {
            let ack = self
                .js
                .publish_with_headers(subject.to_string(), map, payload)
                .await
                .map_err(refused)?;
            ack.await.map_err(refused)
        };
        match tokio::time::timeout(self.patience, publish).await {
            Ok(stored) => stored,
            Err(_) => Err(NatsError::NotSent),
        }
    }

    /// Whether what the stream holds at the duplicate PubAck's sequence is this
    /// letter: the same original (its stream, consumer, sequence and subject headers)
    /// and the same payload. Its time and reason may differ (a second try).
    async fn is_this_letter(
        &self,
        ack: &PublishAck,
        headers: &[(String, String)],
        payload: &Bytes,
    ) -> Result<bool, NatsError> {
        let read = async {
            let stream = self.js.get_stream_no_info(&ack.stream).await?;
            Ok::<_, Cause>(stream.get_raw_message(ack.sequence).await?)
        };
        let stored = match tokio::time::timeout(self.patience, read).await {
            Ok(Ok(m)) => m,
            Ok(Err(e)) => return Err(NatsError::DeadLetterUnchecked(e)),
            Err(e) => return Err(NatsError::DeadLetterUnchecked(Box::new(e))),
        };
        let same = IDENTITY.iter().all(|name| {
            let ours: Vec<&str> = headers
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
                .collect();
            let theirs: Vec<&str> = stored.headers.get_all(*name).map(|v| v.as_str()).collect();
            ours == theirs
        });
        Ok(same && stored.payload == *payload)
    }
}

/// The headers that say which original a letter is of.
const IDENTITY: [&str; 4] = [
    crate::dead_letter::header::STREAM,
    crate::dead_letter::header::CONSUMER,
    crate::dead_letter::header::SEQUENCE,
    crate::dead_letter::header::SUBJECT,
];

/// Tells a letter refused for its size from other failures.
fn refused(e: PublishError) -> NatsError {
    let too_large = e.kind() == PublishErrorKind::MaxPayloadExceeded
        || std::error::Error::source(&e)
            .and_then(|s| s.downcast_ref::<async_nats::jetstream::Error>())
            .is_some_and(|je| {
                [
                    ErrorCode::STREAM_MESSAGE_EXCEEDS_MAXIMUM,
                    ErrorCode::STREAM_HEADER_EXCEEDS_MAXIMUM,
                ]
                .contains(&je.error_code())
            });
    if too_large {
        NatsError::DeadLetterTooLarge(e)
    } else {
        NatsError::DeadLetter(e)
    }
}
