//! The idempotency markers (`delivery.idempotency_bucket`) over a KV bucket with
//! per-key TTLs (nats-server 2.11+, `allow_msg_ttl`): a marker is an empty value
//! under `<scope>.<id>` (`crate::seam::markers::marker_key`) that the server removes
//! `idempotency_ttl_ms` after it was written. Writes are plain JetStream publishes
//! to `$KV.<bucket>.<key>` with `Nats-TTL`, all sent before any PubAck is awaited.

use std::time::Duration;

use async_nats::jetstream::kv::{self, Operation};

use super::{Nats, NatsError};
use crate::seam::markers::{MarkerFailure, Markers};

/// One source's markers.
#[derive(Debug, Clone)]
pub struct MarkerStore {
    kv: kv::Store,
    bucket: String,
    js: async_nats::jetstream::Context,
    /// `$KV.<bucket>.`
    prefix: String,
    /// The `Nats-TTL` value every marker carries (whole seconds).
    ttl: String,
}

impl Nats {
    /// Opens the markers' bucket, creating it with per-key TTLs when missing.
    ///
    /// # Errors
    /// [`NatsError::MarkersNoTtl`] when the bucket (found or made) does not take
    /// per-key TTLs (a server older than 2.11, or a bucket made without them);
    /// [`NatsError::Markers`] when it can be neither opened nor created.
    pub async fn marker_store(
        &self,
        bucket: &str,
        ttl: Duration,
    ) -> Result<MarkerStore, NatsError> {
        let kv = self
            .bucket_or_create(kv::Config {
                bucket: bucket.to_string(),
                history: 1,
                storage: async_nats::jetstream::stream::StorageType::File,
                // Per-key TTLs; the markers of expired keys go after a second.
                limit_markers: Some(Duration::from_secs(1)),
                ..Default::default()
            })
            .await
            .map_err(|e| match e {
                NatsError::Kv { source, .. } => NatsError::Markers {
                    bucket: bucket.to_string(),
                    step: "open it, nor create it (with per-key TTLs)",
                    source,
                },
                other => other,
            })?;
        let info = self
            .js
            .get_stream(format!("KV_{bucket}"))
            .await
            .map_err(|e| NatsError::Markers {
                bucket: bucket.to_string(),
                step: "read its stream",
                source: Box::new(e),
            })?;
        if !info.cached_info().config.allow_message_ttl {
            return Err(NatsError::MarkersNoTtl(bucket.to_string()));
        }
        Ok(MarkerStore {
            kv,
            bucket: bucket.to_string(),
            js: self.js.clone(),
            prefix: format!("$KV.{bucket}."),
            ttl: ttl.as_secs().max(1).to_string(),
        })
    }
}

impl MarkerFailure for NatsError {}

impl MarkerStore {
    fn failed(
        &self,
        step: &'static str,
        e: impl std::error::Error + Send + Sync + 'static,
    ) -> NatsError {
        NatsError::Markers {
            bucket: self.bucket.clone(),
            step,
            source: Box::new(e),
        }
    }
}

impl Markers for MarkerStore {
    type Error = NatsError;

    async fn marked(&self, key: &str) -> Result<bool, NatsError> {
        match self.kv.entry(key).await {
            Ok(Some(e)) => Ok(e.operation == Operation::Put),
            Ok(None) => Ok(false),
            Err(e) => Err(self.failed("read a marker", e)),
        }
    }

    async fn mark(&self, keys: &[String]) -> Result<(), NatsError> {
        let mut acks = Vec::with_capacity(keys.len());
        for key in keys {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert("Nats-TTL", self.ttl.as_str());
            let ack = self
                .js
                .publish_with_headers(format!("{}{key}", self.prefix), headers, "".into())
                .await
                .map_err(|e| self.failed("write a marker", e))?;
            acks.push(ack.into_future());
        }
        for r in futures::future::join_all(acks).await {
            r.map_err(|e| self.failed("write a marker", e))?;
        }
        Ok(())
    }
}
