//! [`Settler`]: the acknowledgement handle of one delivered message.
//!
//! ACK, NAK with delay, TERM with a reason, and in-progress, on the message's reply
//! subject. With `delivery.ack = "confirmed"` the ACK waits for the server's answer.
//!
//! No send ever waits on a dead connection: while the client reconnects it does not
//! read its command buffer, so a send would block until the reconnect (forever, if
//! the server is gone). While disconnected a settle is queued only if the buffer has
//! room (the client sends it after the reconnect) and fails at once otherwise, and a
//! keep-alive is skipped (the server cannot hear it, and it would crowd out acks).
//! While connected a send waits at most `nats.request_timeout_ms` for room.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_nats::{Client, Subject};
use bytes::Bytes;

use super::NatsError;
use super::connect::{Link, Nats};
use crate::seam::Settle;

/// What every settler of one consumer shares.
#[derive(Debug)]
pub(super) struct SettleContext {
    client: Client,
    link: Link,
    patience: Duration,
    confirmed: bool,
}

impl Nats {
    /// The shared part of the settlers of one consumer.
    pub(super) fn settle_context(&self, confirmed: bool) -> Arc<SettleContext> {
        Arc::new(SettleContext {
            client: self.client.clone(),
            link: self.link.clone(),
            patience: self.patience,
            confirmed,
        })
    }
}

impl SettleContext {
    /// The same connection, acks confirmed or not.
    pub(super) fn with_confirmed(&self, confirmed: bool) -> Arc<SettleContext> {
        Arc::new(SettleContext {
            client: self.client.clone(),
            link: self.link.clone(),
            patience: self.patience,
            confirmed,
        })
    }
}

/// Settles one message. Cheap to clone (a shared handle and a subject).
#[derive(Debug, Clone)]
pub struct Settler {
    out: Arc<SettleContext>,
    reply: Subject,
}

impl Settler {
    pub(super) fn new(out: Arc<SettleContext>, reply: Subject) -> Settler {
        Settler { out, reply }
    }

    /// `+ACK`; confirmed by the server when so configured.
    ///
    /// # Errors
    /// [`NatsError`] when the ack could not be sent or was not confirmed: the message
    /// may be redelivered.
    pub async fn ack(&self) -> Result<(), NatsError> {
        if self.out.confirmed {
            self.ack_confirmed().await
        } else {
            self.send(Bytes::from_static(b"+ACK")).await
        }
    }

    /// `+ACK`, confirmed by the server whatever `delivery.ack` says.
    ///
    /// # Errors
    /// [`NatsError`] when the ack was not confirmed: the message may be redelivered.
    pub async fn ack_confirmed(&self) -> Result<(), NatsError> {
        self.confirmed(Bytes::from_static(b"+ACK")).await
    }

    /// `payload` to the ack subject as a request, the server's answer awaited.
    async fn confirmed(&self, payload: Bytes) -> Result<(), NatsError> {
        let request = self.out.client.request(self.reply.clone(), payload);
        match tokio::time::timeout(self.out.patience, request).await {
            Ok(answer) => answer.map(drop).map_err(NatsError::AckNotConfirmed),
            Err(_) => Err(NatsError::NotSent),
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

    /// `-NAK`, as [`Settler::nak`], sent as a request: the server answers once it
    /// has taken it (and, its acks being taken in order, every settle sent before).
    ///
    /// # Errors
    /// [`NatsError::AckNotConfirmed`], [`NatsError::NotSent`] when no answer came in
    /// time: the NAK may or may not have been taken.
    pub async fn nak_confirmed(&self, delay: Duration) -> Result<(), NatsError> {
        self.confirmed(nak_payload(delay)).await
    }

    /// `+TERM <reason>`: never redelivered.
    ///
    /// # Errors
    /// [`NatsError::Publish`].
    pub async fn term(&self, reason: &str) -> Result<(), NatsError> {
        self.send(term_payload(reason)).await
    }

    /// `+WPI`: resets the ack wait. `Ok(false)` when skipped because the connection
    /// is down.
    ///
    /// # Errors
    /// [`NatsError::Publish`], [`NatsError::NotSent`].
    pub async fn progress(&self) -> Result<bool, NatsError> {
        if !self.out.link.up() {
            return Ok(false);
        }
        self.send(Bytes::from_static(b"+WPI")).await.map(|()| true)
    }

    async fn send(&self, payload: Bytes) -> Result<(), NatsError> {
        // Down: only if the buffer has room now (a zero timeout still polls once).
        let patience = if self.out.link.up() {
            self.out.patience
        } else {
            Duration::ZERO
        };
        let publish = self.out.client.publish(self.reply.clone(), payload);
        match tokio::time::timeout(patience, publish).await {
            Ok(sent) => sent.map_err(NatsError::Publish),
            Err(_) => Err(NatsError::NotSent),
        }
    }
}

impl Settle for Settler {
    type Error = NatsError;

    fn ack(&self) -> impl Future<Output = Result<(), NatsError>> + Send {
        Settler::ack(self)
    }

    fn ack_confirmed(&self) -> impl Future<Output = Result<(), NatsError>> + Send {
        Settler::ack_confirmed(self)
    }

    fn nak(&self, delay: Duration) -> impl Future<Output = Result<(), NatsError>> + Send {
        Settler::nak(self, delay)
    }

    fn nak_confirmed(&self, delay: Duration) -> impl Future<Output = Result<(), NatsError>> + Send {
        Settler::nak_confirmed(self, delay)
    }

    fn term(&self, reason: &str) -> impl Future<Output = Result<(), NatsError>> + Send {
        Settler::term(self, reason)
    }

    fn progress(&self) -> impl Future<Output = Result<bool, NatsError>> + Send {
        Settler::progress(self)
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
