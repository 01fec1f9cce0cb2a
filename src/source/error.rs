//! What ends a source for good: NATS failed, its topology cannot be used, its
//! consumer group cannot be joined, or its message source failed.

use crate::dispatch::DispatchError;
use crate::group::member::JoinError;
use crate::nats::{NatsError, TopologyError};

/// A failure that ends a source.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// NATS failed.
    #[error(transparent)]
    Nats(#[from] NatsError),
    /// The topology cannot be used.
    #[error(transparent)]
    Topology(#[from] TopologyError),
    /// The message source failed.
    #[error(transparent)]
    Dispatch(#[from] DispatchError),
    /// A service source's runner failed.
    #[error(transparent)]
    Service(#[from] crate::service::ServiceError),
    /// The consumer group cannot be joined.
    #[error("cannot join the consumer group")]
    Group(#[source] JoinError),
    /// Its live settings are not of its kind: a bug (a reload that changes a
    /// source's kind is refused).
    #[error("the source's live settings are not of its kind")]
    Kind,
}
