//! The liveness bucket of auto-joined elastic members (`source.auto_join`): per-key
//! TTLs that nats-server enforces (2.11+, `allow_msg_ttl`), so a member that stops
//! beating disappears from it by the server's clock, whatever happened to it. Keys:
//! `<stream>.<group>.live.<member>` (a heartbeat, with a TTL) and
//! `<stream>.<group>.auto.<member>` (no TTL: the member joined itself, so the others
//! may prune it; members added by hand have none).

use std::time::Duration;

use async_nats::jetstream::kv::{self, Operation};
use futures::StreamExt;

use super::kv::kv_err;
use super::{Nats, NatsError};

/// The bucket.
pub const LIVENESS_BUCKET: &str = "jetrelay-members";

/// The liveness bucket.
#[derive(Debug, Clone)]
pub struct LivenessStore {
    kv: kv::Store,
    js: async_nats::jetstream::Context,
}

impl Nats {
    /// Opens the liveness bucket, creating it (per-key TTLs on, `replicas`) when
    /// missing.
    ///
    /// # Errors
    /// [`NatsError::Kv`].
    pub async fn liveness_store(&self, replicas: usize) -> Result<LivenessStore, NatsError> {
        let kv = self
            .bucket_or_create(kv::Config {
                bucket: LIVENESS_BUCKET.to_string(),
                history: 1,
                num_replicas: replicas.max(1),
                storage: async_nats::jetstream::stream::StorageType::File,
                // Per-key TTLs; the markers of expired keys go after a second.
                limit_markers: Some(Duration::from_secs(1)),
                ..Default::default()
            })
            .await?;
        Ok(LivenessStore {
            kv,
            js: self.js.clone(),
        })
    }
}

impl LivenessStore {
    /// Writes `key` with a TTL (the server removes it `ttl` after the last write),
    /// and waits for the server to store it.
    ///
    /// # Errors
    /// [`NatsError::Kv`].
    pub async fn beat(&self, key: &str, ttl: Duration) -> Result<(), NatsError> {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-TTL", format!("{}s", ttl.as_secs().max(1)).as_str());
        self.js
            .publish_with_headers(format!("$KV.{LIVENESS_BUCKET}.{key}"), headers, "".into())
            .await
            .map_err(|e| kv_err("write a heartbeat", e))?
            .await
            .map_err(|e| kv_err("write a heartbeat", e))?;
        Ok(())
    }

    /// Writes `key` without a TTL.
    ///
    /// # Errors
    /// [`NatsError::Kv`].
    pub async fn mark(&self, key: &str) -> Result<(), NatsError> {
        self.kv
            .put(key, "".into())
            .await
            .map_err(|e| kv_err("write a marker", e))?;
        Ok(())
    }

    /// Whether `key` is there (written, not deleted, not expired).
    ///
    /// # Errors
    /// [`NatsError::Kv`].
    pub async fn exists(&self, key: &str) -> Result<bool, NatsError> {
        match self.kv.entry(key).await {
            Ok(Some(e)) => Ok(e.operation == Operation::Put),
            Ok(None) => Ok(false),
            Err(e) => Err(kv_err("read a key", e)),
        }
    }

    /// The keys that start with `prefix`.
    ///
    /// # Errors
    /// [`NatsError::Kv`].
    pub async fn keys(&self, prefix: &str) -> Result<Vec<String>, NatsError> {
        let mut keys = match self.kv.keys().await {
            Ok(k) => k,
            // An empty bucket has no keys to list.
            Err(e) if e.to_string().contains("no keys") => return Ok(Vec::new()),
            Err(e) => return Err(kv_err("list the keys", e)),
        };
        let mut out = Vec::new();
        while let Some(k) = keys.next().await {
            let k = k.map_err(|e| kv_err("list the keys", e))?;
            if k.starts_with(prefix) {
                out.push(k);
            }
        }
        Ok(out)
    }

    /// Deletes `key`.
    ///
    /// # Errors
    /// [`NatsError::Kv`].
    pub async fn delete(&self, key: &str) -> Result<(), NatsError> {
        self.kv
            .delete(key)
            .await
            .map_err(|e| kv_err("delete a key", e))
    }
}
