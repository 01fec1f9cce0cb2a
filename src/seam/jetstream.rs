//! The JetStream half of the seam: where deliveries come from ([`Source`], its
//! [`Event`]s, each delivery with its [`Settle`] handle), how they are ordered
//! ([`Ordering`]), and the consumer's pause on the server ([`ServerPause`]). The NATS
//! boundary and a group member implement it; the dispatcher runs against it.

use std::fmt::Display;
use std::future::Future;
use std::num::NonZeroU8;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::capacity::Held;
use crate::message::Delivery;

/// `delivery.ordering`: which messages keep their relative order (one lane per key,
/// one message of a lane at a time, in stream order). Written as one string,
/// `"partition"`, `"subject"`, `"none"`, `"token:N"` or `"header:NAME"`, read by
/// [`Ordering::parse`], so that a bad one is refused when the config is loaded.
/// `Copy`, as the settings that carry it are copied out field by field: the
/// header's name is kept inline ([`KeyHeader`]).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(try_from = "String", into = "String")]
pub enum Ordering {
    /// One lane per partition number.
    Partition,
    /// One lane per subject (partition token stripped).
    Subject,
    /// One lane per value of the subject's N-th token (1-based, of the subject with
    /// the partition token stripped, as `Subject` keys on); a subject with fewer
    /// tokens is keyed on whole, as under `Subject`.
    Token(NonZeroU8),
    /// One lane per value of this message header (its last value, the name matched
    /// case-insensitively); a message without it, or with an empty value, is keyed
    /// on its subject, as under `Subject`.
    Header(KeyHeader),
    /// No order: full concurrency.
    None,
}

/// Why a `delivery.ordering` value is refused; its text is what the config error
/// says after the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadOrdering {
    /// None of the forms.
    Unknown(String),
    /// `token:N` whose N is not a whole number from 1 to 255.
    Token(String),
    /// `header:NAME` whose NAME is empty, not an HTTP field name, or longer than
    /// [`KeyHeader::MAX_LEN`] bytes.
    Header(String),
}

impl std::fmt::Display for BadOrdering {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadOrdering::Unknown(v) => write!(
                f,
                "{v:?} is not one of \"partition\", \"subject\", \"none\", \"token:N\", \"header:NAME\""
            ),
            BadOrdering::Token(v) => write!(
                f,
                "{v:?}: N must be a whole number from 1 to 255 (the subject's N-th token, counted from 1)"
            ),
            BadOrdering::Header(v) => write!(
                f,
                "{v:?}: NAME must be a header name (letters, digits and !#$%&'*+-.^_`|~) of at most {} bytes",
                KeyHeader::MAX_LEN
            ),
        }
    }
}

impl std::error::Error for BadOrdering {}

impl Ordering {
    /// Reads a `delivery.ordering` value: the three words, `token:N` (N from 1 to
    /// 255) or `header:NAME` (an HTTP field name). Nothing is trimmed or folded.
    ///
    /// # Errors
    /// [`BadOrdering`], saying which form is wrong.
    pub fn parse(text: &str) -> Result<Ordering, BadOrdering> {
        match text {
            "partition" => return Ok(Ordering::Partition),
            "subject" => return Ok(Ordering::Subject),
            "none" => return Ok(Ordering::None),
            _ => {}
        }
        if let Some(n) = text.strip_prefix("token:") {
            // Digits only: `u8::from_str` would take a leading `+`.
            return n
                .bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| n.parse::<NonZeroU8>().ok())
                .flatten()
                .map(Ordering::Token)
                .ok_or_else(|| BadOrdering::Token(text.to_string()));
        }
        if let Some(name) = text.strip_prefix("header:") {
            return KeyHeader::new(name)
                .map(Ordering::Header)
                .ok_or_else(|| BadOrdering::Header(text.to_string()));
        }
        Err(BadOrdering::Unknown(text.to_string()))
    }
}

impl std::fmt::Display for Ordering {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ordering::Partition => f.write_str("partition"),
            Ordering::Subject => f.write_str("subject"),
            Ordering::Token(n) => write!(f, "token:{n}"),
            Ordering::Header(name) => write!(f, "header:{}", name.as_str()),
            Ordering::None => f.write_str("none"),
        }
    }
}

impl TryFrom<String> for Ordering {
    type Error = BadOrdering;

    fn try_from(text: String) -> Result<Ordering, BadOrdering> {
        Ordering::parse(&text)
    }
}

impl From<Ordering> for String {
    fn from(o: Ordering) -> String {
        o.to_string()
    }
}

/// The header `header:NAME` orders by: an HTTP field name (an RFC 9110 token, as
/// every header name the config takes) of at most [`KeyHeader::MAX_LEN`] bytes,
/// kept inline so that [`Ordering`] stays `Copy`. Matched case-insensitively, as
/// message headers are everywhere else; kept as written (the config shows it so).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct KeyHeader {
    len: u8,
    bytes: [u8; KeyHeader::MAX_LEN],
}

impl KeyHeader {
    /// The longest name taken, in bytes.
    pub const MAX_LEN: usize = 64;

    /// `None` when `name` is empty, not an HTTP field name, or too long.
    pub fn new(name: &str) -> Option<KeyHeader> {
        let len = u8::try_from(name.len())
            .ok()
            .filter(|n| usize::from(*n) <= Self::MAX_LEN)?;
        if !crate::app::headers::is_valid_name(name) {
            return None;
        }
        let mut bytes = [0; Self::MAX_LEN];
        bytes[..name.len()].copy_from_slice(name.as_bytes());
        Some(KeyHeader { len, bytes })
    }

    /// The name, as written.
    pub fn as_str(&self) -> &str {
        // Only ASCII is ever stored (`new` takes field names only): the fallback is
        // never taken.
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or_default()
    }
}

impl std::fmt::Debug for KeyHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

/// What a source has to say. `T` is its settle handle.
#[derive(Debug)]
pub enum Event<T> {
    /// A message to dispatch, with the handle that settles it.
    Message(Box<Delivery>, T),
    /// This instance became pinned (`true`) or lost its pin (`false`).
    Pinned(bool),
    /// The consumer or JetStream is gone: go back to topology.
    ConsumerGone(String),
    /// The source failed for a reason retrying cannot fix.
    Fatal(Box<dyn std::error::Error + Send + Sync>),
    /// Group sources: this member's partitions (empty = in the membership but none
    /// assigned).
    Assignment(Vec<u32>),
    /// Group sources: not (yet) in the membership; waiting.
    Waiting(String),
    /// Group sources: the assignment changes; stop starting work, settle or release
    /// what is held, then call [`Source::quiesced`] (the consumer is recreated after).
    Quiesce,
    /// Group sources: the group was deleted; drain and stop cleanly.
    Ended(String),
    /// Group sources: not serving, for a reason that may pass (the member consumer
    /// cannot be created yet, the group config cannot be followed): not ready until
    /// the next `Assignment` or `Waiting`.
    Unavailable(String),
    /// Group sources: this many messages delivered to a consumer being replaced were
    /// never taken, and were released (NAK) by the source; for the metrics.
    Released {
        /// NAKs sent.
        naked: usize,
        /// NAKs that could not be sent (the messages come back after `ack_wait`).
        failed: usize,
    },
}

/// The settle handle of one delivered message: ACK, NAK with a delay, TERM with a
/// reason, and in-progress.
pub trait Settle: Clone + Send + Sync + 'static {
    /// Why a settle failed (JetStream then redelivers after `ack_wait`).
    type Error: Display + Send;

    /// `+ACK`.
    fn ack(&self) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// `+ACK`, waiting for the server's confirmation whatever `delivery.ack` says
    /// (the input of outputs just published).
    fn ack_confirmed(&self) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// `-NAK` with a delay (zero: at once).
    fn nak(&self, delay: Duration) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// `-NAK` with a delay, waiting for the server's confirmation: the server takes a
    /// consumer's acks in the order they came, so once it answers, every settle sent
    /// before this one on the connection has been taken too (a handover's barrier
    /// before it gives up the pin).
    fn nak_confirmed(
        &self,
        delay: Duration,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// `+TERM <reason>`.
    fn term(&self, reason: &str) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// `+WPI`; `Ok(false)` when skipped (nobody could hear it).
    fn progress(&self) -> impl Future<Output = Result<bool, Self::Error>> + Send;
}

/// A stream of deliveries sized by what the dispatcher holds.
pub trait Source: Send {
    /// The settle handle of its messages.
    type Settler: Settle;

    /// The next event; `held` is what the dispatcher holds (messages and payload
    /// bytes), for sizing pulls. Must be cancel-safe: the dispatcher polls it inside
    /// `select!`.
    fn next(&mut self, held: Held) -> impl Future<Output = Event<Self::Settler>> + Send;

    /// Stops asking for more messages (shutdown).
    fn stop(&mut self);

    /// Pauses or resumes asking for messages (the app is unhealthy or unreachable).
    fn set_paused(&mut self, paused: bool);

    /// A reload: pull by these sizes from now on, and settle what comes next with
    /// confirmed acks or not.
    fn reconfigure(&mut self, limits: crate::capacity::Limits, confirmed_acks: bool) {
        let _ = (limits, confirmed_acks);
    }

    /// The consumer was resumed on the server: ask for messages now (the server does
    /// not serve pulls that waited through a pause until a new one arrives).
    fn wake(&mut self) {}

    /// Ends every request for messages still open on the server, so that nothing more
    /// is delivered to this instance (a drain, before what it holds is released: a
    /// released message must not come back to it). Returns the settlers of messages
    /// that were delivered meanwhile, for the caller to release after what it holds.
    fn retire(&mut self) -> impl Future<Output = Vec<Self::Settler>> + Send {
        std::future::ready(Vec::new())
    }

    /// Gives up being served (a pinned member's instance unpins) so that a healthy
    /// instance takes over; pulling stays paused. Returns whether anything was given up.
    fn step_down(&mut self) -> impl Future<Output = bool> + Send;

    /// A pinned instance is about to release what it holds and hand over: keeps the
    /// server from delivering anything of this consumer (for at most `bound`) until
    /// [`Source::thaw`]. nats-server moves a released message to the back of its
    /// redelivery queue whenever it wakes with no request it may serve (this
    /// instance's are retired, a standby's wait for the pin), so without this the
    /// next instance would be served what this one held out of stream order. Returns
    /// whether it froze the consumer (then `thaw` must follow); a source that is not
    /// pinned, or a consumer already paused, is left as it is.
    fn freeze(&mut self, bound: Duration) -> impl Future<Output = bool> + Send {
        let _ = bound;
        std::future::ready(false)
    }

    /// Ends a [`Source::freeze`]: the consumer delivers again. The server does not
    /// look for work on a resume, so the caller sends one release after it.
    fn thaw(&mut self) -> impl Future<Output = ()> + Send {
        std::future::ready(())
    }

    /// Everything held was settled or released after a `Quiesce`: the source may now
    /// replace its consumer.
    fn quiesced(&mut self) -> impl Future<Output = ()> + Send {
        std::future::ready(())
    }

    /// Releases the source; returns the settlers of messages that were delivered but
    /// never taken, for the caller to release.
    fn close(self) -> impl Future<Output = Vec<Self::Settler>> + Send;
}

/// Whether the consumer is paused on the server (`jetrelay pause`, consumer PAUSE),
/// as its info last said.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ServerPause {
    /// Not paused (or not known to be).
    #[default]
    Running,
    /// Paused until this time (the server resumes it then).
    Until(::time::OffsetDateTime),
}

impl ServerPause {
    /// When `jetrelay pause` without `--for`/`--until` ends: [`crate::duration::LATEST`],
    /// later than any time a command takes, so that a pause to any time asked for is
    /// shown as that time and only this one as lasting until resumed.
    pub const UNTIL_RESUMED: ::time::OffsetDateTime = crate::duration::LATEST;

    /// Whether work must not start.
    pub fn is_paused(self) -> bool {
        matches!(self, ServerPause::Until(_))
    }

    /// When it resumes, in words: `until resumed` (at [`ServerPause::UNTIL_RESUMED`]),
    /// or `until <RFC 3339>`, however far.
    pub fn until_text(self) -> String {
        match self {
            ServerPause::Running => "not paused".into(),
            ServerPause::Until(t) if crate::duration::beyond_latest(t) => {
                "until resumed (jetrelay resume)".into()
            }
            ServerPause::Until(t) => {
                let at = t
                    .format(&::time::format_description::well_known::Rfc3339)
                    .unwrap_or_else(|_| t.to_string());
                format!("until {at}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn token(n: u8) -> Ordering {
        Ordering::Token(NonZeroU8::new(n).unwrap())
    }

    fn header(name: &str) -> Ordering {
        Ordering::Header(KeyHeader::new(name).unwrap())
    }

    #[test]
    fn a_pause_is_shown_until_its_time_however_far_and_only_the_open_ended_one_until_resumed() {
        use ::time::format_description::well_known::Rfc3339;
        let at = |t: &str| ServerPause::Until(::time::OffsetDateTime::parse(t, &Rfc3339).unwrap());
        for (pause, shown) in [
            (ServerPause::Running, "not paused"),
            (at("2026-12-01T18:30:00Z"), "until 2026-12-01T18:30:00Z"),
            (at("2100-01-01T00:00:00Z"), "until 2100-01-01T00:00:00Z"),
            (at("2262-04-11T23:47:15Z"), "until 2262-04-11T23:47:15Z"),
            (
                ServerPause::Until(ServerPause::UNTIL_RESUMED),
                "until resumed (jetrelay resume)",
            ),
        ] {
            assert_eq!(pause.until_text(), shown);
        }
    }

    #[test]
    fn the_forms_parse_and_bad_ones_say_which_form_is_wrong() {
        let long = format!("header:{}", "x".repeat(KeyHeader::MAX_LEN));
        let too_long = format!("header:{}", "x".repeat(KeyHeader::MAX_LEN + 1));
        let bad = |f: fn(String) -> BadOrdering, t: &str| Err(f(t.to_string()));
        for (text, expected) in [
            ("partition", Ok(Ordering::Partition)),
            ("subject", Ok(Ordering::Subject)),
            ("none", Ok(Ordering::None)),
            ("token:1", Ok(token(1))),
            ("token:2", Ok(token(2))),
            ("token:255", Ok(token(255))),
            ("header:X-Key", Ok(header("X-Key"))),
            ("header:x_tenant.id", Ok(header("x_tenant.id"))),
            (long.as_str(), Ok(header(&"x".repeat(KeyHeader::MAX_LEN)))),
            ("token:0", bad(BadOrdering::Token, "token:0")),
            ("token:x", bad(BadOrdering::Token, "token:x")),
            ("token:", bad(BadOrdering::Token, "token:")),
            ("token:+2", bad(BadOrdering::Token, "token:+2")),
            ("token:-1", bad(BadOrdering::Token, "token:-1")),
            ("token: 2", bad(BadOrdering::Token, "token: 2")),
            ("token:256", bad(BadOrdering::Token, "token:256")),
            ("header:", bad(BadOrdering::Header, "header:")),
            ("header:X Key", bad(BadOrdering::Header, "header:X Key")),
            ("header:X-Key:", bad(BadOrdering::Header, "header:X-Key:")),
            ("header:Ключ", bad(BadOrdering::Header, "header:Ключ")),
            (too_long.as_str(), bad(BadOrdering::Header, &too_long)),
            ("", bad(BadOrdering::Unknown, "")),
            ("Subject", bad(BadOrdering::Unknown, "Subject")),
            ("key", bad(BadOrdering::Unknown, "key")),
            ("tokens:2", bad(BadOrdering::Unknown, "tokens:2")),
            ("Header:X-Key", bad(BadOrdering::Unknown, "Header:X-Key")),
        ] {
            assert_eq!(Ordering::parse(text), expected, "{text:?}");
        }
    }

    #[test]
    fn a_refusal_names_the_value_and_what_is_expected() {
        let says = |t: &str| Ordering::parse(t).unwrap_err().to_string();
        assert_eq!(
            says("token:0"),
            "\"token:0\": N must be a whole number from 1 to 255 (the subject's N-th token, counted from 1)"
        );
        assert!(
            says("header:").contains("at most 64 bytes"),
            "{}",
            says("header:")
        );
        assert!(
            says("key").contains("\"token:N\", \"header:NAME\""),
            "{}",
            says("key")
        );
    }

    #[test]
    fn the_config_reads_and_writes_it_as_a_string() {
        #[derive(Debug, Serialize, Deserialize, PartialEq)]
        struct T {
            o: Ordering,
        }
        for text in ["\"none\"", "\"token:3\"", "\"header:X-Key\""] {
            let json = format!("{{\"o\":{text}}}");
            let t: T = serde_json::from_str(&json).unwrap();
            assert_eq!(serde_json::to_string(&t).unwrap(), json);
        }
        let err = serde_json::from_str::<T>("{\"o\":\"token:0\"}").unwrap_err();
        assert!(err.to_string().contains("N must be"), "{err}");
    }

    proptest! {
        /// What is written reads back the same; whatever is read never panics, and
        /// what is taken writes back as it was read.
        #[test]
        fn written_values_read_back(n in 1u8.., name in "[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}") {
            for o in [Ordering::Partition, Ordering::Subject, Ordering::None, token(n), header(&name)] {
                prop_assert_eq!(Ordering::parse(&o.to_string()), Ok(o));
            }
        }

        #[test]
        fn any_text_is_read_or_refused(text in "(token:|header:)?\\PC{0,80}") {
            if let Ok(o) = Ordering::parse(&text) {
                prop_assert_eq!(o.to_string(), text);
            }
        }
    }
}
