//! The publish seam over NATS ([`Publisher`]): dead letters (`dead_letters`) and the
//! app's outputs (`outputs`), each awaiting the stream's PubAck.

use bytes::Bytes;

use super::dead_letters::DeadLetterPublisher;
use super::outputs::{OutputError, OutputPublisher, max_payload};
use super::{Nats, NatsError};
use crate::outputs::Output;
use crate::seam::publish::{Committed, LetterFailure, Publish};

/// What the dispatcher and the publish endpoint publish with. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Publisher {
    client: async_nats::Client,
    letters: DeadLetterPublisher,
    outputs: OutputPublisher,
}

impl Nats {
    /// The publisher of dead letters and outputs.
    pub fn publisher(&self) -> Publisher {
        Publisher {
            client: self.client.clone(),
            letters: self.dead_letter_publisher(),
            outputs: self.outputs(),
        }
    }
}

impl LetterFailure for NatsError {
    fn is_too_large(&self) -> bool {
        matches!(self, NatsError::DeadLetterTooLarge(_))
    }
}

impl Publish for Publisher {
    type LetterError = NatsError;
    type OutputError = OutputError;

    fn max_payload(&self) -> usize {
        max_payload(&self.client)
    }

    async fn dead_letter(
        &self,
        subject: &str,
        headers: &[(String, String)],
        payload: Bytes,
    ) -> Result<(), NatsError> {
        self.letters.publish(subject, headers, payload).await
    }

    async fn outputs(&self, outputs: &[Output], atomic: bool) -> Result<Committed, OutputError> {
        self.outputs.publish(outputs, atomic).await
    }
}
