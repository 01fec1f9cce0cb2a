//! NATS service discovery (ADR-32) on the wire: answering it (every instance
//! subscribes to `$SRV.<VERB>`, `$SRV.<VERB>.<service>` and `$SRV.<VERB>.<service>.<id>`,
//! as `jetrelay` and as each service source's own service,
//! for PING, INFO and STATS, with no queue group, so that every one answers), and
//! asking it (one request, each answer that comes within a wait handed on as it comes).

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{Nats, NatsError};
use crate::ops::announce::{Ask, SERVICE};

impl Nats {
    /// A new id for this instance (a NUID, as ADR-32 services use).
    pub fn instance_id(&self) -> String {
        let inbox = self.client.new_inbox();
        inbox.rsplit('.').next().unwrap_or(&inbox).to_string()
    }

    /// Answers discovery as instance `id` of `jetrelay` until `stop`: `answer`
    /// builds each reply.
    ///
    /// # Errors
    /// [`NatsError::Subscribe`] when a subscription cannot be made.
    pub async fn announce(
        &self,
        id: &str,
        answer: impl Fn(Ask) -> Vec<u8> + Send + 'static,
        stop: CancellationToken,
    ) -> Result<JoinHandle<()>, NatsError> {
        self.announce_as(SERVICE, id, answer, stop).await
    }

    /// Answers discovery as instance `id` of `service` (a service source's own
    /// name, or `jetrelay`) until `stop`.
    ///
    /// # Errors
    /// [`NatsError::Subscribe`] when a subscription cannot be made.
    pub async fn announce_as(
        &self,
        service: &str,
        id: &str,
        answer: impl Fn(Ask) -> Vec<u8> + Send + 'static,
        stop: CancellationToken,
    ) -> Result<JoinHandle<()>, NatsError> {
        let mut subs = Vec::new();
        for (ask, verb) in Ask::ALL {
            for subject in [
                format!("$SRV.{verb}"),
                format!("$SRV.{verb}.{service}"),
                format!("$SRV.{verb}.{service}.{id}"),
            ] {
                let sub = self
                    .client
                    .subscribe(subject)
                    .await
                    .map_err(NatsError::Subscribe)?;
                subs.push(sub.map(move |m| (ask, m)).boxed());
            }
        }
        let client = self.client.clone();
        let mut all = futures::stream::select_all(subs);
        Ok(tokio::spawn(async move {
            loop {
                let (ask, request) = tokio::select! {
                    () = stop.cancelled() => return,
                    next = all.next() => match next {
                        Some(n) => n,
                        None => return,
                    },
                };
                let Some(reply) = request.reply else {
                    continue;
                };
                if let Err(e) = client.publish(reply, Bytes::from(answer(ask))).await {
                    tracing::debug!(error = %e, "cannot answer a discovery request");
                }
            }
        }))
    }

    /// Asks every instance of the service (`$SRV.<VERB>.jetrelay`) and hands each
    /// answer that comes within `wait` to `each` as it comes; nothing is kept here,
    /// so that what anyone on the account answers is held no longer than `each`
    /// wants it.
    ///
    /// # Errors
    /// [`NatsError::Subscribe`] or [`NatsError::Publish`].
    pub async fn discover(
        &self,
        ask: Ask,
        wait: Duration,
        mut each: impl FnMut(&[u8]),
    ) -> Result<(), NatsError> {
        let verb = Ask::ALL
            .iter()
            .find(|(a, _)| *a == ask)
            .map_or("PING", |(_, v)| *v);
        let inbox = self.client.new_inbox();
        let mut sub = self
            .client
            .subscribe(inbox.clone())
            .await
            .map_err(NatsError::Subscribe)?;
        self.client
            .publish_with_reply(format!("$SRV.{verb}.{SERVICE}"), inbox, Bytes::new())
            .await
            .map_err(NatsError::Publish)?;
        let until = tokio::time::Instant::now() + wait;
        while let Ok(Some(m)) = tokio::time::timeout_at(until, sub.next()).await {
            each(&m.payload);
        }
        Ok(())
    }
}
