//! The consumer-group config buckets: open or create, read with revision, CAS create
//! and update, delete, list, and watch one key (current value, then changes).

use async_nats::jetstream::kv::{self, Operation};
use bytes::Bytes;
use futures::StreamExt;

use super::{Cause, Nats, NatsError};

/// One group-config bucket.
#[derive(Debug, Clone)]
pub struct GroupStore {
    kv: kv::Store,
}

/// What happened to the watched key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvEvent {
    /// A value was written.
    Put {
        /// The value.
        value: Bytes,
        /// Its revision.
        revision: u64,
    },
    /// The key was deleted.
    Deleted,
    /// The key was purged.
    Purged,
}

/// A watch on one key.
pub struct KvWatch {
    inner: kv::Watch,
}

impl std::fmt::Debug for KvWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KvWatch")
    }
}

/// Why a compare-and-set write did not happen.
#[derive(Debug, thiserror::Error)]
pub enum KvWriteError {
    /// `create` found the key already there.
    #[error("the key already exists")]
    Exists,
    /// `update` found another revision: someone else wrote first.
    #[error("the key was changed concurrently (compare-and-set failed)")]
    Conflict,
    /// Anything else.
    #[error("the KV write failed")]
    Other(#[source] Cause),
}

pub(super) fn kv_err(
    step: &'static str,
    e: impl std::error::Error + Send + Sync + 'static,
) -> NatsError {
    NatsError::Kv {
        step,
        source: Box::new(e),
    }
}

/// Whether opening a bucket failed because its stream does not exist. async-nats
/// reports every failure to read the stream's info as `GetBucket` (a timeout, no
/// responders, a stream leader being elected after a node is lost): only the
/// server's "stream not found" means the bucket is missing; the rest is retried, not
/// taken for a group that was deleted (or a bucket to create).
fn bucket_not_found(e: &async_nats::jetstream::context::KeyValueError) -> bool {
    use async_nats::jetstream::ErrorCode;
    use async_nats::jetstream::context::{GetStreamError, GetStreamErrorKind, KeyValueErrorKind};
    e.kind() == KeyValueErrorKind::GetBucket
        && std::error::Error::source(e)
            .and_then(|s| s.downcast_ref::<GetStreamError>())
            .is_some_and(|s| {
                matches!(s.kind(), GetStreamErrorKind::JetStream(j)
                    if j.error_code() == ErrorCode::STREAM_NOT_FOUND)
            })
}

impl Nats {
    /// Opens a bucket; `None` when it does not exist.
    ///
    /// # Errors
    /// [`NatsError::Kv`] for anything but "not found".
    pub async fn group_store(&self, bucket: &str) -> Result<Option<GroupStore>, NatsError> {
        match self.js.get_key_value(bucket).await {
            Ok(kv) => Ok(Some(GroupStore { kv })),
            Err(e) if bucket_not_found(&e) => Ok(None),
            Err(e) => Err(kv_err("open the bucket", e)),
        }
    }

    /// Opens a bucket, creating it with the reference's settings when missing
    /// (file storage, history 1, `replicas` from the origin stream).
    ///
    /// # Errors
    /// [`NatsError::Kv`].
    pub async fn group_store_or_create(
        &self,
        bucket: &str,
        replicas: usize,
    ) -> Result<GroupStore, NatsError> {
        let config = kv::Config {
            bucket: bucket.to_string(),
            history: 1,
            num_replicas: replicas.max(1),
            storage: async_nats::jetstream::stream::StorageType::File,
            ..Default::default()
        };
        let kv = self.bucket_or_create(config).await?;
        Ok(GroupStore { kv })
    }

    /// Opens `config.bucket`, creating it with `config` when missing; a lost creation
    /// race opens what the other creator made.
    pub(super) async fn bucket_or_create(
        &self,
        config: kv::Config,
    ) -> Result<kv::Store, NatsError> {
        if let Some(s) = self.group_store(&config.bucket).await? {
            return Ok(s.kv);
        }
        let bucket = config.bucket.clone();
        match self.js.create_key_value(config).await {
            Ok(kv) => Ok(kv),
            Err(e) => self
                .group_store(&bucket)
                .await?
                .map(|s| s.kv)
                .ok_or_else(|| kv_err("create the bucket", e)),
        }
    }
}

/// How long a write that no server took is sent again.
const UNHEARD_FOR: std::time::Duration = std::time::Duration::from_secs(5);

/// `write`, sent again while no server took it ("no responders": the bucket's
/// subjects not yet known to the server this client is on, as just after the bucket
/// was made in a cluster), up to [`UNHEARD_FOR`]. Nothing was stored, so sending it
/// again stores it at most once.
async fn heard<T, E, F>(mut write: impl FnMut() -> F) -> Result<T, E>
where
    F: Future<Output = Result<T, E>>,
    E: std::error::Error + 'static,
{
    let until = tokio::time::Instant::now() + UNHEARD_FOR;
    loop {
        match write().await {
            Err(e) if unheard(&e) && tokio::time::Instant::now() < until => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            done => return done,
        }
    }
}

/// Whether `e` (or its cause) is a publish that no server took.
fn unheard(e: &(dyn std::error::Error + 'static)) -> bool {
    use async_nats::jetstream::context::{PublishError, PublishErrorKind};
    let mut at = Some(e);
    while let Some(e) = at {
        if e.downcast_ref::<PublishError>()
            .is_some_and(|p| p.kind() == PublishErrorKind::StreamNotFound)
        {
            return true;
        }
        at = e.source();
    }
    false
}

impl GroupStore {
    /// The value and revision; `None` when missing, deleted or purged.
    ///
    /// # Errors
    /// [`NatsError::Kv`].
    pub async fn get(&self, key: &str) -> Result<Option<(Bytes, u64)>, NatsError> {
        match self.kv.entry(key).await {
            Ok(Some(e)) if e.operation == Operation::Put => Ok(Some((e.value, e.revision))),
            Ok(_) => Ok(None),
            Err(e) => Err(kv_err("read the key", e)),
        }
    }

    /// Creates the key (compare-and-set on absence).
    ///
    /// # Errors
    /// [`KvWriteError::Exists`] when it is there.
    pub async fn create(&self, key: &str, value: Vec<u8>) -> Result<u64, KvWriteError> {
        let value = Bytes::from(value);
        heard(|| self.kv.create(key, value.clone()))
            .await
            .map_err(|e| match e.kind() {
                kv::CreateErrorKind::AlreadyExists => KvWriteError::Exists,
                _ => KvWriteError::Other(Box::new(e)),
            })
    }

    /// Replaces the value if the key is still at `revision`.
    ///
    /// # Errors
    /// [`KvWriteError::Conflict`] when someone else wrote first.
    pub async fn update(
        &self,
        key: &str,
        value: Vec<u8>,
        revision: u64,
    ) -> Result<u64, KvWriteError> {
        let value = Bytes::from(value);
        heard(|| self.kv.update(key, value.clone(), revision))
            .await
            .map_err(|e| match e.kind() {
                kv::UpdateErrorKind::WrongLastRevision => KvWriteError::Conflict,
                _ => KvWriteError::Other(Box::new(e)),
            })
    }

    /// Writes the key whatever is there (for jetrelay's own records; the group
    /// configs are only ever written with compare-and-set).
    ///
    /// # Errors
    /// [`NatsError::Kv`].
    pub async fn put(&self, key: &str, value: Vec<u8>) -> Result<u64, NatsError> {
        let value = Bytes::from(value);
        heard(|| self.kv.put(key, value.clone()))
            .await
            .map_err(|e| kv_err("write the key", e))
    }

    /// Deletes the key (a no-op when missing).
    ///
    /// # Errors
    /// [`NatsError::Kv`].
    pub async fn delete(&self, key: &str) -> Result<(), NatsError> {
        self.kv
            .delete(key)
            .await
            .map_err(|e| kv_err("delete the key", e))
    }

    /// Every live key.
    ///
    /// # Errors
    /// [`NatsError::Kv`].
    pub async fn keys(&self) -> Result<Vec<String>, NatsError> {
        let mut keys = self
            .kv
            .keys()
            .await
            .map_err(|e| kv_err("list the keys", e))?;
        let mut out = Vec::new();
        while let Some(k) = keys.next().await {
            out.push(k.map_err(|e| kv_err("list the keys", e))?);
        }
        Ok(out)
    }

    /// Watches `key`: its current value first (if any), then every change.
    ///
    /// # Errors
    /// [`NatsError::Kv`].
    pub async fn watch(&self, key: &str) -> Result<KvWatch, NatsError> {
        let inner = self
            .kv
            .watch_with_history(key)
            .await
            .map_err(|e| kv_err("watch the key", e))?;
        Ok(KvWatch { inner })
    }
}

impl KvWatch {
    /// The next event; `None` when the watch ended. Transient watcher errors (missed
    /// heartbeats; the watcher recreates itself) are logged and skipped.
    pub async fn next(&mut self) -> Option<KvEvent> {
        loop {
            match self.inner.next().await? {
                Ok(e) => {
                    return Some(match e.operation {
                        Operation::Put => KvEvent::Put {
                            value: e.value,
                            revision: e.revision,
                        },
                        Operation::Delete => KvEvent::Deleted,
                        Operation::Purge => KvEvent::Purged,
                    });
                }
                Err(e) => {
                    tracing::debug!(error = %e, "group config watcher error; it recovers by itself")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_nats::jetstream::context::{PublishError, PublishErrorKind};
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn create_error(kind: PublishErrorKind) -> kv::CreateError {
        kv::CreateError::from(kv::UpdateError::from(PublishError::new(kind)))
    }

    #[test]
    fn a_write_no_server_took_is_told_from_other_failures() {
        assert!(unheard(&create_error(PublishErrorKind::StreamNotFound)));
        assert!(!unheard(&create_error(PublishErrorKind::WrongLastSequence)));
        assert!(!unheard(&create_error(PublishErrorKind::Other)));
    }

    #[tokio::test]
    async fn a_write_no_server_took_is_sent_again_and_no_other() {
        let tries = AtomicUsize::new(0);
        let got = heard(|| async {
            match tries.fetch_add(1, Ordering::SeqCst) {
                0 | 1 => Err(create_error(PublishErrorKind::StreamNotFound)),
                n => Ok(n),
            }
        })
        .await;
        assert_eq!(got.unwrap(), 2, "sent three times");
        let tries = AtomicUsize::new(0);
        let got: Result<(), _> = heard(|| async {
            tries.fetch_add(1, Ordering::SeqCst);
            Err(create_error(PublishErrorKind::WrongLastSequence))
        })
        .await;
        assert!(got.is_err());
        assert_eq!(tries.load(Ordering::SeqCst), 1, "a refusal is final");
    }
}
