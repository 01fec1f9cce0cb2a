//! Stream and consumer operations of the group admin commands: the elastic group's
//! work-queue stream, consumer listing with pin state, unpin, stream deletion.

use async_nats::jetstream::ErrorCode;
use async_nats::jetstream::context::{CreateStreamErrorKind, DeleteStreamErrorKind};
use async_nats::jetstream::stream::{
    self, DiscardPolicy, RetentionPolicy, Source, StorageType, SubjectTransform,
};
use futures::StreamExt;

use super::{Cause, Nats, NatsError};
use crate::topology::Storage;

/// A consumer as the admin commands report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerState {
    /// Its name.
    pub name: String,
    /// Pull requests waiting (an instance is pulling).
    pub num_waiting: usize,
    /// The pinned client id of its priority group, if any.
    pub pinned: Option<String>,
}

impl ConsumerState {
    /// What a consumer's info says of it, for the priority group `group`.
    fn of(info: &async_nats::jetstream::consumer::Info, group: &str) -> ConsumerState {
        ConsumerState {
            name: info.name.clone(),
            num_waiting: info.num_waiting,
            pinned: info
                .priority_groups
                .iter()
                .find(|g| g.group == group)
                .and_then(|g| g.pinned_client_id.clone()),
        }
    }
}

/// The elastic group's stream.
#[derive(Debug, Clone)]
pub struct GroupStreamSpec {
    /// `<stream>-<group>`.
    pub name: String,
    /// The origin stream.
    pub origin: String,
    /// From the origin.
    pub replicas: u32,
    /// From the origin.
    pub storage: Storage,
    /// ≤ 0 = unlimited.
    pub max_msgs: i64,
    /// ≤ 0 = unlimited.
    pub max_bytes: i64,
    /// (source filter, destination) pairs.
    pub transforms: Vec<(String, String)>,
}

fn group_err(step: &'static str, e: impl Into<Cause>) -> NatsError {
    NatsError::Group {
        step,
        source: e.into(),
    }
}

impl Nats {
    /// Whether the server is at least `major.minor`.
    pub fn server_at_least(&self, major: i64, minor: i64) -> bool {
        self.client.is_server_compatible(major, minor, 0)
    }

    /// Creates the elastic group's work-queue stream (idempotent for an identical
    /// config; a different existing one is an error).
    ///
    /// # Errors
    /// [`NatsError::Group`].
    pub async fn create_group_stream(&self, g: &GroupStreamSpec) -> Result<(), NatsError> {
        let unlimited = |n: i64| if n <= 0 { -1 } else { n };
        let config = stream::Config {
            name: g.name.clone(),
            retention: RetentionPolicy::WorkQueue,
            discard: DiscardPolicy::New,
            num_replicas: g.replicas as usize,
            storage: match g.storage {
                Storage::File => StorageType::File,
                Storage::Memory => StorageType::Memory,
            },
            max_messages: unlimited(g.max_msgs),
            max_bytes: unlimited(g.max_bytes),
            allow_direct: true,
            sources: Some(vec![Source {
                name: g.origin.clone(),
                subject_transforms: g
                    .transforms
                    .iter()
                    .map(|(src, dest)| SubjectTransform {
                        source: src.clone(),
                        destination: dest.clone(),
                    })
                    .collect(),
                ..Default::default()
            }]),
            ..Default::default()
        };
        match self.js.create_stream(config).await {
            Ok(_) => Ok(()),
            Err(e) => match e.kind() {
                CreateStreamErrorKind::JetStream(js)
                    if js.error_code() == ErrorCode::STREAM_NAME_EXIST =>
                {
                    Err(NatsError::GroupStreamExists(g.name.clone()))
                }
                _ => Err(group_err("create the group stream", e)),
            },
        }
    }

    /// Deletes a stream; a missing one is fine.
    ///
    /// # Errors
    /// [`NatsError::Group`].
    pub async fn delete_stream(&self, name: &str) -> Result<(), NatsError> {
        match self.js.delete_stream(name).await {
            Ok(_) => Ok(()),
            Err(e) => match e.kind() {
                DeleteStreamErrorKind::JetStream(js)
                    if js.error_code() == ErrorCode::STREAM_NOT_FOUND =>
                {
                    Ok(())
                }
                _ => Err(group_err("delete the stream", e)),
            },
        }
    }

    /// The destination of a stream's subject transform, if it has one.
    ///
    /// # Errors
    /// [`NatsError::Group`] when the stream cannot be read.
    pub async fn stream_transform(&self, name: &str) -> Result<Option<String>, NatsError> {
        let s = self
            .js
            .get_stream(name)
            .await
            .map_err(|e| group_err("read the stream", e))?;
        Ok(s.cached_info()
            .config
            .subject_transform
            .as_ref()
            .map(|t| t.destination.clone()))
    }

    /// Every consumer of a stream with its waiting pulls and the pin of its priority
    /// group `group`.
    ///
    /// # Errors
    /// [`NatsError::Group`].
    pub async fn consumer_states(
        &self,
        stream: &str,
        group: &str,
    ) -> Result<Vec<ConsumerState>, NatsError> {
        let s = self.group_stream(stream).await?;
        let mut list = s.consumers();
        let mut out = Vec::new();
        while let Some(info) = list.next().await {
            let info = info.map_err(|e| group_err("list consumers", e))?;
            out.push(ConsumerState::of(&info, group));
        }
        Ok(out)
    }

    /// One consumer's waiting pulls and pin (as [`Nats::consumer_states`]); `None`
    /// when it does not exist. The server counts only pulls whose reply subject
    /// still has a listener: the pulls of an inbox that was closed are not counted.
    ///
    /// # Errors
    /// [`NatsError::Group`].
    pub async fn consumer_state(
        &self,
        stream: &str,
        consumer: &str,
        group: &str,
    ) -> Result<Option<ConsumerState>, NatsError> {
        use async_nats::jetstream::context::ConsumerInfoErrorKind;
        let s = self.group_stream(stream).await?;
        match s.consumer_info(consumer).await {
            Ok(info) => Ok(Some(ConsumerState::of(&info, group))),
            Err(e) if e.kind() == ConsumerInfoErrorKind::NotFound => Ok(None),
            Err(e) => Err(group_err("read the consumer", e)),
        }
    }

    /// Stream `name`'s handle (no info read), for a group's step.
    async fn group_stream(
        &self,
        name: &str,
    ) -> Result<async_nats::jetstream::stream::Stream<()>, NatsError> {
        self.js
            .get_stream_no_info(name)
            .await
            .map_err(|e| group_err("read the stream", e))
    }

    /// Unpins a member consumer so that another instance is served.
    ///
    /// # Errors
    /// [`NatsError::Group`].
    pub async fn unpin(&self, stream: &str, consumer: &str, group: &str) -> Result<(), NatsError> {
        let s = self.group_stream(stream).await?;
        s.unpin_consumer(consumer, group)
            .await
            .map_err(|e| group_err("unpin", e))
    }
}
