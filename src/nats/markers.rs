//! The idempotency markers (`delivery.idempotency_bucket`) over a KV bucket with
//! per-key TTLs (nats-server 2.11+, `allow_msg_ttl`): a marker is the value
//! `crate::seam::markers::Marked::value` (the message it marks) under `<scope>.<id>`
//! (`crate::seam::markers::marker_key`) that the server removes
//! `idempotency_ttl_ms` after it was written. Writes are plain JetStream publishes
//! to `$KV.<bucket>.<key>` with `Nats-TTL`, all sent before any PubAck is awaited; a
//! write that finds no bucket (deleted at run time) fails, and has a task make it
//! again as at startup, for the dispatcher's next try.
//! Reads are coalesced ([`Coalesce`]): a lone read goes out at once, and the reads
//! asked for while it is on the wire (a pull's messages, back to back, or a batch's)
//! share the next request, one batched direct get (`multi_last`) for all of them.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use async_nats::jetstream::kv::{self, Operation};
use bytes::Bytes;
use tokio::sync::oneshot;

use super::direct::{DirectError, PageRequest};
use super::{Cause, Nats, NatsError};
use crate::seam::markers::{MarkerFailure, Markers};

/// Subjects per batched direct get (the server takes at most 1024 matches).
const MULTI_LAST: usize = 256;

/// A read's shared failure: every read of one request gets it.
type Shared = Arc<dyn std::error::Error + Send + Sync>;

/// A marker as read: its value, `None` when there is none.
type Found = Option<Bytes>;

/// A queued read: its key and where its answer goes.
type Waiting = (String, oneshot::Sender<Result<Found, Shared>>);

/// Reads in turns: whoever takes the turn reads every key queued so far in one
/// request; a key queued while a request is on the wire waits for the next turn.
/// No read waits for a timer: a lone one goes out at once.
#[derive(Debug, Default)]
struct Coalesce {
    queue: Mutex<Vec<Waiting>>,
    turn: tokio::sync::Mutex<()>,
    /// Requests sent.
    requests: AtomicU64,
}

/// Why a read got no answer: the request that carried it was dropped.
#[derive(Debug, thiserror::Error)]
#[error("the read was abandoned before its answer")]
struct Abandoned;

impl Coalesce {
    /// `key`'s marker, read with every key queued meanwhile by `read` (which
    /// answers one [`Found`] per key, in order).
    async fn ask<R, Fut>(&self, key: &str, read: R) -> Result<Found, Shared>
    where
        R: FnOnce(Vec<String>) -> Fut,
        Fut: Future<Output = Result<Vec<Found>, Cause>>,
    {
        let (tx, rx) = oneshot::channel();
        let queue = || self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        queue().push((key.to_string(), tx));
        {
            let _turn = self.turn.lock().await;
            let waiting = std::mem::take(&mut *queue());
            if !waiting.is_empty() {
                let (keys, answers): (Vec<_>, Vec<_>) = waiting.into_iter().unzip();
                self.requests.fetch_add(1, Ordering::Relaxed);
                match read(keys).await {
                    Ok(found) => {
                        // A reader that went away needs no answer.
                        for (tx, f) in answers.into_iter().zip(found) {
                            drop(tx.send(Ok(f)));
                        }
                    }
                    Err(e) => {
                        let e: Shared = Arc::from(e);
                        for tx in answers {
                            drop(tx.send(Err(Arc::clone(&e))));
                        }
                    }
                }
            }
        }
        rx.await.unwrap_or_else(|_| Err(Arc::new(Abandoned)))
    }
}

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
    /// For batched direct gets.
    nats: Nats,
    /// `KV_<bucket>`
    stream: String,
    reads: Arc<Coalesce>,
    /// Whether the bucket is being made again, and when that last failed.
    remaking: Arc<Mutex<Remaking>>,
}

/// The bucket made again, by a task of its own that no write waits for.
#[derive(Debug, Default)]
struct Remaking {
    /// A task is at it.
    running: bool,
    /// When the last attempt failed.
    failed: Option<tokio::time::Instant>,
}

/// After a failed attempt to make the bucket again, the next waits this long.
const REMAKE_EVERY: Duration = Duration::from_secs(1);

/// The markers' bucket as jetrelay makes it: one marker a key, file storage,
/// per-key TTLs.
fn bucket_config(bucket: &str) -> kv::Config {
    kv::Config {
        bucket: bucket.to_string(),
        history: 1,
        storage: async_nats::jetstream::stream::StorageType::File,
        // Per-key TTLs; the markers of expired keys go after a second.
        limit_markers: Some(Duration::from_secs(1)),
        ..Default::default()
    }
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
            .bucket_or_create(bucket_config(bucket))
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
            nats: self.clone(),
            stream: format!("KV_{bucket}"),
            reads: Arc::default(),
            remaking: Arc::default(),
        })
    }
}

/// The markers' bucket as `jetrelay check` finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MarkerBucket {
    /// Not there: `run` creates it (R1, file storage, per-key TTLs).
    Missing,
    /// There, with per-key TTLs.
    Ready {
        /// Its stream's replicas.
        replicas: usize,
        /// The markers it holds (the server's own markers of expired keys included).
        markers: u64,
    },
    /// There, without per-key TTLs: `run` refuses it.
    NoTtl,
}

impl Nats {
    /// What the markers' bucket `bucket` is, changing nothing.
    ///
    /// # Errors
    /// [`NatsError::Markers`] when its stream cannot be read.
    pub async fn marker_bucket(&self, bucket: &str) -> Result<MarkerBucket, NatsError> {
        use async_nats::jetstream::ErrorCode;
        use async_nats::jetstream::context::GetStreamErrorKind;
        match self.js.get_stream(format!("KV_{bucket}")).await {
            Ok(s) => {
                let info = s.cached_info();
                Ok(if info.config.allow_message_ttl {
                    MarkerBucket::Ready {
                        replicas: info.config.num_replicas,
                        markers: info.state.messages,
                    }
                } else {
                    MarkerBucket::NoTtl
                })
            }
            Err(e)
                if matches!(e.kind(), GetStreamErrorKind::JetStream(js)
                    if js.error_code() == ErrorCode::STREAM_NOT_FOUND) =>
            {
                Ok(MarkerBucket::Missing)
            }
            Err(e) => Err(NatsError::Markers {
                bucket: bucket.to_string(),
                step: "read its stream",
                source: Box::new(e),
            }),
        }
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

impl MarkerStore {
    /// The read requests sent so far (each carries every read queued meanwhile).
    pub fn read_requests(&self) -> u64 {
        self.reads.requests.load(Ordering::Relaxed)
    }

    /// The markers of `keys`: one batched direct get per [`MULTI_LAST`] keys, or one
    /// read each where the bucket does not answer direct gets.
    async fn read_all(&self, keys: Vec<String>) -> Result<Vec<Found>, Cause> {
        let subject = |k: &String| format!("{}{k}", self.prefix);
        let mut found = HashMap::new();
        for chunk in keys.chunks(MULTI_LAST) {
            let req = PageRequest {
                batch: chunk.len(),
                multi_last: Some(chunk.iter().map(subject).collect()),
                ..PageRequest::default()
            };
            match self.nats.direct_page(&self.stream, &req).await {
                // A delete, a purge or the server's marker of an expired key is no
                // marker.
                Ok(page) => found.extend(
                    page.messages
                        .into_iter()
                        .filter(|m| {
                            !m.headers.iter().any(|(n, _)| {
                                n.eq_ignore_ascii_case("KV-Operation")
                                    || n.eq_ignore_ascii_case("Nats-Marker-Reason")
                            })
                        })
                        .map(|m| (m.subject, m.payload)),
                ),
                Err(DirectError::NotEnabled(_)) => return self.read_each(&keys).await,
                Err(e) => return Err(Box::new(e)),
            }
        }
        Ok(keys.iter().map(|k| found.remove(&subject(k))).collect())
    }

    /// The markers of `keys`, one KV read each.
    async fn read_each(&self, keys: &[String]) -> Result<Vec<Found>, Cause> {
        let entries = futures::future::join_all(keys.iter().map(|k| self.kv.entry(k))).await;
        entries
            .into_iter()
            .map(|e| match e {
                Ok(Some(e)) => Ok((e.operation == Operation::Put).then_some(e.value)),
                Ok(None) => Ok(None),
                Err(e) => Err(Box::new(e) as Cause),
            })
            .collect()
    }
}

impl Markers for MarkerStore {
    type Error = NatsError;

    async fn marked(&self, key: &str) -> Result<Found, NatsError> {
        self.reads
            .ask(key, |keys| self.read_all(keys))
            .await
            .map_err(|e| self.failed("read a marker", e))
    }

    async fn marked_many(&self, keys: &[String]) -> Result<Vec<Found>, NatsError> {
        self.read_all(keys.to_vec())
            .await
            .map_err(|e| self.failed("read markers", Shared::from(e)))
    }

    async fn mark(&self, markers: &[(String, String)]) -> Result<(), NatsError> {
        let written = self.write(markers).await;
        if let Err(e) = &written
            && e.kind() == PublishErrorKind::StreamNotFound
        {
            self.remake_soon();
        }
        written.map_err(|e| self.failed("write a marker", e))
    }
}

impl MarkerStore {
    /// Every marker published, then every PubAck awaited.
    async fn write(&self, markers: &[(String, String)]) -> Result<(), PublishError> {
        let mut acks = Vec::with_capacity(markers.len());
        for (key, value) in markers {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert("Nats-TTL", self.ttl.as_str());
            let ack = self
                .js
                .publish_with_headers(
                    format!("{}{key}", self.prefix),
                    headers,
                    Bytes::copy_from_slice(value.as_bytes()),
                )
                .await?;
            acks.push(ack.into_future());
        }
        for r in futures::future::join_all(acks).await {
            r?;
        }
        Ok(())
    }

    /// A write found no bucket (deleted at run time): a task makes it again as at
    /// startup, unless one is at it or the last attempt failed within
    /// [`REMAKE_EVERY`]. The write fails meanwhile; the dispatcher tries again.
    fn remake_soon(&self) {
        {
            let mut r = self.remaking.lock().unwrap_or_else(PoisonError::into_inner);
            if r.running || r.failed.is_some_and(|at| at.elapsed() < REMAKE_EVERY) {
                return;
            }
            r.running = true;
        }
        let store = self.clone();
        tokio::spawn(async move {
            let made = store.remake().await;
            let mut r = store
                .remaking
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            r.running = false;
            r.failed = match made {
                Ok(()) => None,
                Err(e) => {
                    tracing::warn!(error = %crate::ops::telemetry::chain(&e), "the idempotency bucket cannot be made again");
                    Some(tokio::time::Instant::now())
                }
            };
        });
    }

    /// Makes the bucket as at startup, when it is missing.
    ///
    /// # Errors
    /// [`NatsError::Markers`] when it can be neither read nor made.
    async fn remake(&self) -> Result<(), NatsError> {
        if self.nats.marker_bucket(&self.bucket).await? != MarkerBucket::Missing {
            return Ok(());
        }
        tracing::warn!(bucket = %self.bucket, "the idempotency bucket is gone: making it again");
        match self
            .nats
            .bucket_or_create(bucket_config(&self.bucket))
            .await
        {
            Ok(_) => {
                tracing::info!(bucket = %self.bucket, "the idempotency bucket was made again");
                Ok(())
            }
            Err(NatsError::Kv { source, .. }) => Err(NatsError::Markers {
                bucket: self.bucket.clone(),
                step: "make it again (it was deleted)",
                source,
            }),
            Err(other) => Err(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    type Read = std::pin::Pin<Box<dyn Future<Output = Result<Vec<Found>, Cause>> + Send>>;

    /// A read of the keys that start with `m`, taking a millisecond, that records the
    /// keys of each request.
    fn reader(log: &Arc<Mutex<Vec<Vec<String>>>>, fail: bool) -> impl FnOnce(Vec<String>) -> Read {
        let log = Arc::clone(log);
        move |keys| {
            Box::pin(async move {
                tokio::time::sleep(MS).await;
                log.lock().unwrap().push(keys.clone());
                if fail {
                    return Err("down".into());
                }
                Ok(keys
                    .iter()
                    .map(|k| k.starts_with('m').then(|| Bytes::from(k.clone())))
                    .collect())
            })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_lone_read_goes_out_at_once_and_reads_asked_meanwhile_share_the_next_request() {
        let c = Coalesce::default();
        let log = Arc::default();
        let start = tokio::time::Instant::now();
        assert_eq!(
            c.ask("m1", reader(&log, false)).await.unwrap(),
            Some(Bytes::from("m1"))
        );
        assert_eq!(start.elapsed(), MS, "no wait but the read itself");
        assert_eq!(*log.lock().unwrap(), [vec!["m1".to_string()]]);

        // 100 at once (a batch, or a pull's messages back to back): the first goes
        // alone, the other 99 in the second request, each answered its own.
        log.lock().unwrap().clear();
        let keys: Vec<String> = (0..100)
            .map(|i| format!("{}{i}", if i % 3 == 0 { 'm' } else { 'x' }))
            .collect();
        let answers =
            futures::future::join_all(keys.iter().map(|k| c.ask(k, reader(&log, false)))).await;
        for (k, a) in keys.iter().zip(answers) {
            assert_eq!(
                a.unwrap(),
                k.starts_with('m').then(|| Bytes::from(k.clone())),
                "{k}"
            );
        }
        let sizes: Vec<usize> = log.lock().unwrap().iter().map(Vec::len).collect();
        assert_eq!(sizes, [1, 99]);
        assert_eq!(c.requests.load(Ordering::Relaxed), 3);
        assert_eq!(start.elapsed(), 3 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_request_fails_every_read_it_carried_and_the_next_turn_reads_again() {
        let c = Coalesce::default();
        let log = Arc::default();
        let answers =
            futures::future::join_all(["m1", "m2", "m3"].map(|k| c.ask(k, reader(&log, true))))
                .await;
        assert!(
            answers
                .iter()
                .all(|a| a.as_ref().unwrap_err().to_string() == "down")
        );
        assert!(c.ask("m4", reader(&log, false)).await.unwrap().is_some());
        let sizes: Vec<usize> = log.lock().unwrap().iter().map(Vec::len).collect();
        assert_eq!(sizes, [1, 2, 1]);
    }
}
