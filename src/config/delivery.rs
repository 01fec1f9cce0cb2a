//! `[delivery]`: concurrency (fixed or adaptive, and a rate limit), bounds, ordering,
//! retries, acks and the shutdown grace.

use serde::{Deserialize, Serialize};

use super::source::SourceKind;
use super::{Config, DAY, HOUR, Problems};
use crate::seam::Ordering;
use crate::seam::markers::IdempotencyKey;

/// `delivery.ack`
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum AckMode {
    /// Publish the ack and move on.
    #[default]
    Fire,
    /// Wait for the server's confirmation.
    Confirmed,
}

/// `delivery.concurrency`
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Concurrency {
    /// `max_in_flight` requests at most.
    #[default]
    Fixed,
    /// A limit between `min_in_flight` and `max_in_flight` that follows the app.
    Adaptive,
}

/// `[delivery]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct DeliveryConfig {
    /// Concurrent requests to the app (adaptive: the ceiling).
    pub max_in_flight: u32,
    /// Messages held at most (= the consumer's `max_ack_pending`).
    pub max_buffered: u32,
    /// The largest single pull.
    pub max_batch: u32,
    /// `None` = the default for the source kind (see [`Config::ordering`]).
    pub ordering: Option<Ordering>,
    /// The first retry delay; it doubles per attempt. No retry comes sooner.
    pub retry_initial_ms: u64,
    /// The longest retry delay.
    pub retry_max_ms: u64,
    /// The cap on the app's `Retry-After`.
    pub retry_after_max_ms: u64,
    /// Fire-and-forget or confirmed acks.
    pub ack: AckMode,
    /// How long the drain may take; also bounds every NATS step of the shutdown.
    pub shutdown_grace_ms: u64,
    /// Payload bytes held at most; pulls ask for no more (`max_bytes`).
    pub max_buffered_bytes: u64,
    /// Messages per request; 1 = one message per request (the default).
    pub batch_size: u32,
    /// Payload bytes per batch request (a larger message goes alone).
    pub batch_max_bytes: u64,
    /// How long a partial batch may wait for more; 0 = send what is ready.
    pub batch_wait_ms: u64,
    /// Fixed at `max_in_flight`, or adaptive.
    pub concurrency: Concurrency,
    /// Adaptive: the floor of the limit.
    pub min_in_flight: u32,
    /// Request starts per second at most; 0 = no limit.
    pub rate_limit_per_s: u32,
    /// Starts at once after idle time; 0 = one second's worth.
    pub rate_limit_burst: u32,
    /// The NATS KV bucket of "processed" markers; empty = off.
    pub idempotency_bucket: String,
    /// How long a marker lives (whole seconds on the server).
    pub idempotency_ttl_ms: u64,
    /// What identifies a message: its `Nats-Msg-Id` (else stream and sequence), or
    /// its stream and sequence.
    pub idempotency_key: IdempotencyKey,
    /// A message older than this (by its publish time) when it is about to be sent
    /// is dead-lettered as `too_old` instead; 0 = no limit.
    pub max_age_ms: u64,
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        Self {
            max_in_flight: 32,
            concurrency: Concurrency::Fixed,
            min_in_flight: 1,
            rate_limit_per_s: 0,
            rate_limit_burst: 0,
            max_buffered: 256,
            max_batch: 64,
            ordering: None,
            retry_initial_ms: 1000,
            retry_max_ms: 60_000,
            retry_after_max_ms: 300_000,
            ack: AckMode::Fire,
            shutdown_grace_ms: 20_000,
            max_buffered_bytes: 64 * 1024 * 1024,
            batch_size: 1,
            batch_max_bytes: 1024 * 1024,
            batch_wait_ms: 0,
            idempotency_bucket: String::new(),
            idempotency_ttl_ms: DAY,
            idempotency_key: IdempotencyKey::MsgId,
            max_age_ms: 0,
        }
    }
}

impl Config {
    /// `delivery.min_in_flight` and the rate limit.
    fn check_pace(&self, p: &mut Problems) {
        let d = &self.delivery;
        let wide = u64::from;
        p.ranges(&[
            ("delivery.min_in_flight", wide(d.min_in_flight), 1, 10_000),
            (
                "delivery.rate_limit_per_s",
                wide(d.rate_limit_per_s),
                0,
                1_000_000,
            ),
            (
                "delivery.rate_limit_burst",
                wide(d.rate_limit_burst),
                0,
                1_000_000,
            ),
        ]);
        p.at_most(
            ("delivery.min_in_flight", wide(d.min_in_flight)),
            ("delivery.max_in_flight", wide(d.max_in_flight)),
            "",
        );
        if d.rate_limit_burst > 0 && d.rate_limit_per_s == 0 {
            p.add(
                "delivery.rate_limit_burst",
                "needs delivery.rate_limit_per_s (0 = no rate limit)",
            );
        }
    }

    /// The markers' bucket name (a KV bucket's: letters, digits, `-`, `_`) and how
    /// long a marker lives (at least a second: the server counts TTLs in seconds).
    fn check_idempotency(&self, p: &mut Problems) {
        let d = &self.delivery;
        if d.idempotency_bucket.is_empty() {
            return;
        }
        let valid = d.idempotency_bucket.len() <= 64
            && d.idempotency_bucket
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !valid {
            p.add(
                "delivery.idempotency_bucket",
                "must be a KV bucket name: letters, digits, '-' and '_', at most 64",
            );
        }
        p.range(
            "delivery.idempotency_ttl_ms",
            d.idempotency_ttl_ms,
            1000,
            365 * DAY,
        );
    }

    pub(super) fn check_delivery(&self, p: &mut Problems) {
        let d = &self.delivery;
        let wide = u64::from;
        p.ranges(&[
            // Up to a year: a backlog older than that is a retention question, not this.
            ("delivery.max_age_ms", d.max_age_ms, 0, 365 * DAY),
            ("delivery.max_in_flight", wide(d.max_in_flight), 1, 10_000),
            ("delivery.max_buffered", wide(d.max_buffered), 1, 100_000),
            ("delivery.max_batch", wide(d.max_batch), 1, 10_000),
            ("delivery.retry_initial_ms", d.retry_initial_ms, 1, DAY),
            ("delivery.retry_max_ms", d.retry_max_ms, 1, DAY),
            ("delivery.retry_after_max_ms", d.retry_after_max_ms, 1, DAY),
            ("delivery.shutdown_grace_ms", d.shutdown_grace_ms, 0, HOUR),
            (
                "delivery.max_buffered_bytes",
                d.max_buffered_bytes,
                1024,
                64 << 30,
            ),
            ("delivery.batch_size", wide(d.batch_size), 1, 1000),
            ("delivery.batch_max_bytes", d.batch_max_bytes, 1, 64 << 20),
            ("delivery.batch_wait_ms", d.batch_wait_ms, 0, 60_000),
        ]);
        self.check_pace(p);
        self.check_idempotency(p);
        let buffered = ("delivery.max_buffered", wide(d.max_buffered));
        p.at_least(
            buffered,
            ("delivery.max_in_flight", wide(d.max_in_flight)),
            "",
        );
        p.at_least(buffered, ("delivery.batch_size", wide(d.batch_size)), "");
        let initial = ("delivery.retry_initial_ms", d.retry_initial_ms);
        p.at_least(
            ("delivery.retry_after_max_ms", d.retry_after_max_ms),
            initial,
            "no retry comes sooner than that",
        );
        p.at_least(("delivery.retry_max_ms", d.retry_max_ms), initial, "");
        if d.batch_size > 1 {
            p.at_most(
                ("delivery.batch_max_bytes", d.batch_max_bytes),
                ("delivery.max_buffered_bytes", d.max_buffered_bytes),
                "a batch is made of held messages",
            );
        }
        if d.ordering == Some(Ordering::Partition) && self.source.kind == Some(SourceKind::Durable)
        {
            p.add(
                "delivery.ordering",
                "\"partition\" needs a group source; use \"subject\" or \"none\" with a durable",
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::tests::MINIMAL;
    use std::path::Path;

    use super::*;
    use crate::config::ConfigError;
    use crate::seam::jetstream::BadOrdering;

    fn with_ordering(value: &str) -> Result<Config, ConfigError> {
        Config::from_toml(&[MINIMAL, &format!("[delivery]\nordering = {value:?}\n")])
    }

    #[test]
    fn every_ordering_is_read_at_load_and_a_bad_one_is_a_problem_of_its_key() {
        for text in ["subject", "none", "token:1", "token:2", "header:X-Key"] {
            let c = with_ordering(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(Ordering::parse(text).map(Some), Ok(c.delivery.ordering));
            assert_eq!(c.ordering().to_string(), text);
        }
        for (text, why) in [
            ("token:0", BadOrdering::Token("token:0".into())),
            ("token:x", BadOrdering::Token("token:x".into())),
            ("header:", BadOrdering::Header("header:".into())),
            ("header:X Key", BadOrdering::Header("header:X Key".into())),
            ("key", BadOrdering::Unknown("key".into())),
        ] {
            let err = with_ordering(text).unwrap_err();
            let found: Vec<(&str, &str)> = err
                .problems()
                .iter()
                .map(|p| (p.key.as_str(), p.message.as_str()))
                .collect();
            assert_eq!(found, [("delivery.ordering", why.to_string().as_str())]);
        }
    }

    #[test]
    fn the_markers_bucket_and_ttl_are_checked_at_load() {
        let with = |text: &str| Config::from_toml(&[MINIMAL, &format!("[delivery]\n{text}\n")]);
        let c =
            with("idempotency_bucket = \"relay-marks_1\"\nidempotency_key = \"sequence\"").unwrap();
        assert_eq!(c.delivery.idempotency_key, IdempotencyKey::Sequence);
        assert_eq!(c.delivery.idempotency_ttl_ms, DAY);
        for (text, key) in [
            (
                "idempotency_bucket = \"a.b\"",
                "delivery.idempotency_bucket",
            ),
            (
                "idempotency_bucket = \"a b\"",
                "delivery.idempotency_bucket",
            ),
            (
                "idempotency_bucket = \"m\"\nidempotency_ttl_ms = 999",
                "delivery.idempotency_ttl_ms",
            ),
        ] {
            let err = with(text).unwrap_err();
            let keys: Vec<&str> = err.problems().iter().map(|p| p.key.as_str()).collect();
            assert_eq!(keys, [key], "{text}");
        }
        assert!(with("idempotency_key = \"hash\"").is_err());
        // Off, the TTL is not read.
        assert!(with("idempotency_ttl_ms = 5").is_ok());
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment::Jail fixes the closure's error type.
    fn an_ordering_from_the_environment_is_read_and_refused_alike() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("c.toml", MINIMAL)?;
            jail.set_env("JETRELAY_DELIVERY__ORDERING", "header:x-tenant");
            let c = Config::load(Some(Path::new("c.toml"))).unwrap();
            assert_eq!(c.ordering(), Ordering::parse("header:x-tenant").unwrap());
            jail.set_env("JETRELAY_DELIVERY__ORDERING", "token:0");
            let err = Config::load(Some(Path::new("c.toml"))).unwrap_err();
            let p = &err.problems()[0];
            assert_eq!(p.key, "delivery.ordering");
            assert_eq!(p.env.as_deref(), Some("JETRELAY_DELIVERY__ORDERING"));
            Ok(())
        });
    }
}
