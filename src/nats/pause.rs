//! Consumer pause on the server (nats-server 2.11+, `$JS.API.CONSUMER.PAUSE`):
//! pause a consumer until a time, resume it, and read whether it is paused. The pause
//! lives in the consumer's config on the server, so every instance consuming it stops
//! at once and the pause survives restarts; only this API changes it (a consumer
//! create or update ignores `pause_until`).

use async_nats::jetstream::ErrorCode;
use async_nats::jetstream::context::ConsumerInfoErrorKind;
use async_nats::jetstream::stream::ConsumerErrorKind;
use time::OffsetDateTime;

use super::Nats;
use super::error::{TopologyError, refused};
use crate::seam::ServerPause;

/// What the server answered to a pause or a resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PauseAnswer {
    /// Whether the consumer is paused now.
    pub paused: bool,
    /// Until when (when paused).
    pub until: Option<OffsetDateTime>,
}

impl Nats {
    /// Pauses consumer `name` of `stream` until `until` (in the past: resumes it).
    ///
    /// # Errors
    /// [`TopologyError::ConsumerMissing`]; [`TopologyError::Refused`] or
    /// [`TopologyError::Unavailable`] when the server refuses or does not answer.
    pub async fn pause_consumer(
        &self,
        stream: &str,
        name: &str,
        until: OffsetDateTime,
    ) -> Result<PauseAnswer, TopologyError> {
        let s = self.stream_handle(stream).await?;
        let answer = s
            .pause_consumer(name, until)
            .await
            .map_err(|e| pause_error(name, "pause the consumer", e))?;
        Ok(PauseAnswer {
            paused: answer.paused,
            until: answer.paused.then_some(answer.pause_until),
        })
    }

    /// Resumes consumer `name` of `stream` (a consumer that is not paused stays so).
    ///
    /// # Errors
    /// As [`Nats::pause_consumer`].
    pub async fn resume_consumer(
        &self,
        stream: &str,
        name: &str,
    ) -> Result<PauseAnswer, TopologyError> {
        let s = self.stream_handle(stream).await?;
        let answer = s
            .resume_consumer(name)
            .await
            .map_err(|e| pause_error(name, "resume the consumer", e))?;
        Ok(PauseAnswer {
            paused: answer.paused,
            until: None,
        })
    }

    /// Whether consumer `name` of `stream` is paused, from its info (its leader's).
    ///
    /// # Errors
    /// [`TopologyError::ConsumerMissing`]; [`TopologyError::Refused`] otherwise.
    pub async fn consumer_pause(
        &self,
        stream: &str,
        name: &str,
    ) -> Result<ServerPause, TopologyError> {
        let s = self.stream_handle(stream).await?;
        s.consumer_info(name)
            .await
            .map(|info| pause_of(&info))
            .map_err(|e| consumer_info_error(name, e))
    }
}

/// Why consumer `name`'s info could not be read: it is missing, JetStream did not
/// answer, or it refused.
pub(super) fn consumer_info_error(
    name: &str,
    e: async_nats::jetstream::context::ConsumerInfoError,
) -> TopologyError {
    match e.kind() {
        ConsumerInfoErrorKind::NotFound | ConsumerInfoErrorKind::StreamNotFound => {
            TopologyError::ConsumerMissing(name.to_string())
        }
        ConsumerInfoErrorKind::TimedOut
        | ConsumerInfoErrorKind::NoResponders
        | ConsumerInfoErrorKind::Offline
        | ConsumerInfoErrorKind::Request => TopologyError::Unavailable(e.into()),
        _ => refused("read the consumer", e),
    }
}

/// What a consumer's info says of its pause.
pub(super) fn pause_of(info: &async_nats::jetstream::consumer::Info) -> ServerPause {
    match (info.paused, info.config.pause_until) {
        (true, Some(until)) => ServerPause::Until(until),
        (true, None) => ServerPause::Until(
            info.pause_remaining
                .and_then(|d| time::Duration::try_from(d).ok())
                .and_then(|d| OffsetDateTime::now_utc().checked_add(d))
                .unwrap_or(ServerPause::UNTIL_RESUMED),
        ),
        (false, _) => ServerPause::Running,
    }
}

fn pause_error(
    name: &str,
    step: &'static str,
    e: async_nats::jetstream::stream::ConsumerError,
) -> TopologyError {
    match e.kind() {
        ConsumerErrorKind::JetStream(js) if js.error_code() == ErrorCode::CONSUMER_NOT_FOUND => {
            TopologyError::ConsumerMissing(name.to_string())
        }
        ConsumerErrorKind::TimedOut | ConsumerErrorKind::Request => {
            TopologyError::Unavailable(e.into())
        }
        _ => refused(step, e),
    }
}
