//! Publishing to the dead-letter subject and awaiting the JetStream PubAck.

use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::ErrorCode;
use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use bytes::Bytes;

use super::{Nats, NatsError};

/// Publishes dead letters to one subject.
#[derive(Debug, Clone)]
pub struct DlqPublisher {
    client: async_nats::Client,
    js: async_nats::jetstream::Context,
    subject: String,
    patience: Duration,
}

impl Nats {
    /// A publisher for `subject`.
    pub fn dlq(&self, subject: &str) -> DlqPublisher {
        DlqPublisher {
            client: self.client.clone(),
            js: self.js.clone(),
            subject: subject.to_string(),
            patience: self.patience,
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
/// read (NATS headers, crate::outputs, crate::redrive); anything the client would
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

impl DlqPublisher {
    /// The largest message (headers and payload) the server takes.
    pub fn max_payload(&self) -> usize {
        max_payload(&self.client)
    }

    /// Publishes and waits for the stream's PubAck, for at most the request timeout.
    ///
    /// # Errors
    /// [`NatsError::DeadLetterTooLarge`] when the server or the DLQ stream refuses it
    /// for its size; [`NatsError::DeadLetter`] when no stream stored it (no stream
    /// captures the subject, a limit refused it, no answer in time);
    /// [`NatsError::NotSent`] when nothing could be sent in time.
    pub async fn publish(
        &self,
        headers: &[(String, String)],
        payload: Bytes,
    ) -> Result<(), NatsError> {
        let map = header_map(headers, HeaderMap::new());
        let publish = async {
            let ack = self
                .js
                .publish_with_headers(self.subject.clone(), map, payload)
                .await
                .map_err(refused)?;
            ack.await.map(drop).map_err(refused)
        };
        match tokio::time::timeout(self.patience, publish).await {
            Ok(stored) => stored,
            Err(_) => Err(NatsError::NotSent),
        }
    }
}

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
