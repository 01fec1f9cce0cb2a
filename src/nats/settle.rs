//! [`Settler`]: the acknowledgement handle of one delivered message.
//!
//! ACK, NAK with delay, TERM with a reason, and in-progress, on the message's reply
//! subject. With `delivery.ack = "confirmed"` the ACK waits for the server's answer.

use std::time::Duration;

use async_nats::{Client, Subject};
use bytes::Bytes;

use super::NatsError;

/// Settles one message. Cheap to clone (a client handle and a subject).
#[derive(Debug, Clone)]
pub struct Settler {
    client: Client,
    reply: Subject,
    confirmed: bool,
}

impl Settler {
    pub(super) fn new(client: Client, reply: Subject, confirmed: bool) -> Settler {
        Settler {
            client,
            reply,
            confirmed,
        }
    }

    /// `+ACK`; confirmed by the server when so configured.
    ///
    /// # Errors
    /// [`NatsError`] when the ack could not be sent or was not confirmed: the message
    /// may be redelivered.
    pub async fn ack(&self) -> Result<(), NatsError> {
        if self.confirmed {
            self.client
                .request(self.reply.clone(), Bytes::from_static(b"+ACK"))
                .await
                .map(drop)
                .map_err(NatsError::AckNotConfirmed)
        } else {
            self.send(Bytes::from_static(b"+ACK")).await
        }
    }

    /// `-NAK {"delay": <ns>}`: redeliver after `delay` (never an immediate NAK unless
    /// `delay` is zero, which only shutdown uses).
    ///
    /// # Errors
    /// [`NatsError::Publish`]; JetStream then redelivers after `ack_wait`.
    pub async fn nak(&self, delay: Duration) -> Result<(), NatsError> {
        self.send(nak_payload(delay)).await
    }

    /// `+TERM <reason>`: never redelivered.
    ///
    /// # Errors
    /// [`NatsError::Publish`].
    pub async fn term(&self, reason: &str) -> Result<(), NatsError> {
        self.send(term_payload(reason)).await
    }

    /// `+WPI`: resets the ack wait.
    ///
    /// # Errors
    /// [`NatsError::Publish`].
    pub async fn progress(&self) -> Result<(), NatsError> {
        self.send(Bytes::from_static(b"+WPI")).await
    }

    async fn send(&self, payload: Bytes) -> Result<(), NatsError> {
        self.client
            .publish(self.reply.clone(), payload)
            .await
            .map_err(NatsError::Publish)
    }
}

fn nak_payload(delay: Duration) -> Bytes {
    if delay.is_zero() {
        Bytes::from_static(b"-NAK")
    } else {
        // The server takes the delay in nanoseconds.
        Bytes::from(format!("-NAK {{\"delay\": {}}}", delay.as_nanos()))
    }
}

/// `+TERM <reason>` on one line, at most 256 bytes of reason.
fn term_payload(reason: &str) -> Bytes {
    let mut line: String = reason
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if line.len() > 256 {
        let mut cut = 256;
        while !line.is_char_boundary(cut) {
            cut -= 1;
        }
        line.truncate(cut);
    }
    let line = line.trim();
    if line.is_empty() {
        Bytes::from_static(b"+TERM")
    } else {
        Bytes::from(format!("+TERM {line}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nak_delay_is_sent_in_nanoseconds() {
        assert_eq!(
            nak_payload(Duration::from_millis(1500)),
            "-NAK {\"delay\": 1500000000}"
        );
        assert_eq!(
            nak_payload(Duration::from_millis(1)),
            "-NAK {\"delay\": 1000000}"
        );
        assert_eq!(nak_payload(Duration::ZERO), "-NAK");
    }

    #[test]
    fn term_reason_is_one_bounded_line() {
        assert_eq!(term_payload("app answered 400"), "+TERM app answered 400");
        assert_eq!(term_payload("a\r\nb"), "+TERM a  b");
        assert_eq!(term_payload(""), "+TERM");
        let long = "é".repeat(300);
        let p = term_payload(&long);
        assert!(p.len() <= "+TERM ".len() + 256);
        assert!(std::str::from_utf8(&p).is_ok());
    }
}
