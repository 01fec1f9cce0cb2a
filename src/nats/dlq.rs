//! Publishing to the dead-letter subject and awaiting the JetStream PubAck.

use async_nats::HeaderMap;
use bytes::Bytes;

use super::{Nats, NatsError};

/// Publishes dead letters to one subject.
#[derive(Debug, Clone)]
pub struct DlqPublisher {
    js: async_nats::jetstream::Context,
    subject: String,
}

impl Nats {
    /// A publisher for `subject`.
    pub fn dlq(&self, subject: &str) -> DlqPublisher {
        DlqPublisher {
            js: self.js.clone(),
            subject: subject.to_string(),
        }
    }
}

impl DlqPublisher {
    /// Publishes and waits for the stream's PubAck.
    ///
    /// # Errors
    /// [`NatsError::DeadLetter`] when no stream stored it (no stream captures the
    /// subject, a limit refused it, or no answer in time).
    pub async fn publish(
        &self,
        headers: &[(String, String)],
        payload: Bytes,
    ) -> Result<(), NatsError> {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            // Header names and values come from NATS headers already, so they are valid;
            // anything the client would reject is left out rather than panicking.
            if let (Ok(n), Ok(v)) = (
                name.parse::<async_nats::HeaderName>(),
                value.parse::<async_nats::HeaderValue>(),
            ) {
                map.append(n, v);
            }
        }
        let ack = self
            .js
            .publish_with_headers(self.subject.clone(), map, payload)
            .await
            .map_err(|e| NatsError::DeadLetter(e.to_string()))?;
        ack.await
            .map(drop)
            .map_err(|e| NatsError::DeadLetter(e.to_string()))
    }
}
