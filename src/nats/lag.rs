//! What `jetrelay scaler` reads: a consumer's pending and ack pending (the consumer
//! info request, answered by the consumer's leader), the messages of a stream under
//! filters (the stream info request with `subjects_filter`, answered by the stream's
//! leader, its per-subject counts summed page by page), and an elastic group's
//! work-queue stream (its message count, and its consumers' ack pending from the
//! consumer list). JetStream API requests only: never the monitoring port, whose
//! figures a follower may serve stale.

use async_nats::jetstream::ErrorCode;
use async_nats::jetstream::context::{ConsumerInfoErrorKind, GetStreamErrorKind};
use futures::TryStreamExt as _;

use super::{Cause, Nats};

/// Why a figure could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LagError {
    /// The stream does not exist.
    #[error("stream {0} does not exist")]
    NoStream(String),
    /// The request failed or was refused.
    #[error("cannot read {what}")]
    Read {
        /// What was being read.
        what: String,
        /// Why.
        #[source]
        source: Cause,
    },
}

fn read_error(what: impl Into<String>, e: impl Into<Cause>) -> LagError {
    LagError::Read {
        what: what.into(),
        source: e.into(),
    }
}

/// An elastic group's work-queue stream as the scaler reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkQueue {
    /// Its messages: every one not yet acknowledged.
    pub messages: u64,
    /// Its consumers' ack pending, summed.
    pub ack_pending: u64,
    /// How many consumers it has.
    pub consumers: usize,
}

impl Nats {
    /// Consumer `name`'s pending and ack pending, from its info; `None` when the
    /// consumer does not exist.
    ///
    /// # Errors
    /// [`LagError::NoStream`]; [`LagError::Read`].
    pub async fn consumer_lag(
        &self,
        stream: &str,
        name: &str,
    ) -> Result<Option<(u64, u64)>, LagError> {
        let s = self
            .js
            .get_stream_no_info(stream)
            .await
            .map_err(|e| read_error(format!("stream {stream}"), e))?;
        match s.consumer_info(name).await {
            Ok(info) => Ok(Some((info.num_pending, info.num_ack_pending as u64))),
            Err(e) if e.kind() == ConsumerInfoErrorKind::NotFound => Ok(None),
            Err(e) if e.kind() == ConsumerInfoErrorKind::StreamNotFound => {
                Err(LagError::NoStream(stream.to_string()))
            }
            Err(e) => Err(read_error(format!("consumer {name} of stream {stream}"), e)),
        }
    }

    /// How many messages `stream` holds under `filters` (every message when there
    /// are none). The filters of one consumer do not overlap (the server refuses
    /// those that do), so their counts add up.
    ///
    /// # Errors
    /// [`LagError::NoStream`]; [`LagError::Read`].
    pub async fn messages_under(&self, stream: &str, filters: &[String]) -> Result<u64, LagError> {
        let s = match self.js.get_stream(stream).await {
            Ok(s) => s,
            Err(e) => return Err(stream_error(stream, e)),
        };
        if filters.is_empty() || filters.iter().any(|f| f == ">") {
            return Ok(s.cached_info().state.messages);
        }
        let mut total = 0u64;
        for filter in filters {
            let what = || format!("the subjects of stream {stream} under {filter}");
            let mut subjects = s
                .info_with_subjects(filter)
                .await
                .map_err(|e| read_error(what(), e))?;
            while let Some((_, n)) = subjects
                .try_next()
                .await
                .map_err(|e| read_error(what(), e))?
            {
                total = total.saturating_add(n as u64);
            }
        }
        Ok(total)
    }

    /// An elastic group's work-queue stream: its messages, and its consumers' ack
    /// pending (one consumer list, each entry from the consumer's leader).
    ///
    /// # Errors
    /// [`LagError::NoStream`]; [`LagError::Read`].
    pub async fn work_queue(&self, stream: &str) -> Result<WorkQueue, LagError> {
        let s = match self.js.get_stream(stream).await {
            Ok(s) => s,
            Err(e) => return Err(stream_error(stream, e)),
        };
        let messages = s.cached_info().state.messages;
        let (mut ack_pending, mut consumers) = (0u64, 0usize);
        let mut list = s.consumers();
        while let Some(info) = list
            .try_next()
            .await
            .map_err(|e| read_error(format!("the consumers of stream {stream}"), e))?
        {
            ack_pending = ack_pending.saturating_add(info.num_ack_pending as u64);
            consumers += 1;
        }
        Ok(WorkQueue {
            messages,
            ack_pending,
            consumers,
        })
    }
}

fn stream_error(stream: &str, e: async_nats::jetstream::context::GetStreamError) -> LagError {
    match e.kind() {
        GetStreamErrorKind::JetStream(js) if js.error_code() == ErrorCode::STREAM_NOT_FOUND => {
            LagError::NoStream(stream.to_string())
        }
        _ => read_error(format!("stream {stream}"), e),
    }
}
