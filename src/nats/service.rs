//! A service source's requests on the wire ([`ServiceRequests`]): one queue
//! subscription per endpoint in the service's queue group, joined and left as the
//! app can take work (left by draining: the server sends no more, and what it sent
//! before still comes, to be answered); replies published with their headers
//! ([`ServiceReplier`]).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use async_nats::{HeaderMap, Subscriber};
use futures::{Stream, StreamExt};

use super::Nats;
use super::outputs::header_map;
use crate::message::Message;
use crate::seam::service::{JoinError, Replier, Requests, Response, ServiceRequest};

/// The endpoints' subscriptions of one service.
#[derive(Debug)]
pub struct ServiceRequests {
    client: async_nats::Client,
    /// Each endpoint's subject, by index.
    subjects: Vec<String>,
    queue_group: String,
    /// One per endpoint while joined, or while left and not yet drained.
    subs: Vec<Option<Subscriber>>,
    /// A former membership's subscriptions, left and still draining when the group
    /// was joined again, with the endpoint of each: what they still deliver is taken
    /// (and answered) until each ends.
    leftovers: Vec<(usize, Subscriber)>,
    /// Whether the queue group is joined.
    joined: bool,
    /// Where the next poll starts, so that no endpoint starves another.
    turn: usize,
}

/// Publishes replies. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ServiceReplier {
    client: async_nats::Client,
}

impl Nats {
    /// The requests of a service whose endpoints are on `subjects`, in `queue_group`
    /// (nothing is subscribed until [`Requests::join`]).
    pub fn service_requests(&self, subjects: Vec<String>, queue_group: &str) -> ServiceRequests {
        ServiceRequests {
            client: self.client.clone(),
            subjects,
            queue_group: queue_group.to_string(),
            subs: Vec::new(),
            leftovers: Vec::new(),
            joined: false,
            turn: 0,
        }
    }
}

impl ServiceRequests {
    /// Returns once the server has processed what this connection sent before: a
    /// message to an inbox of its own comes back after the server read everything
    /// before it (a flush only writes the socket). At most a few seconds.
    async fn round_trip(&self) -> Result<(), JoinError> {
        let inbox = self.client.new_inbox();
        let mut echo = self.client.subscribe(inbox.clone()).await?;
        self.client.publish(inbox, bytes::Bytes::new()).await?;
        let back = tokio::time::timeout(std::time::Duration::from_secs(5), echo.next()).await;
        if back.is_err() {
            tracing::debug!("the server did not echo within 5 s: joined without knowing");
        }
        Ok(())
    }

    /// The next message of any subscription, endpoints taken in turn; `None` when
    /// every subscription has ended.
    fn poll_any(&mut self, cx: &mut Context<'_>) -> Poll<Option<ServiceRequest>> {
        let mut open = false;
        let mut k = 0;
        while k < self.leftovers.len() {
            let (i, sub) = &mut self.leftovers[k];
            match Pin::new(sub).poll_next(cx) {
                Poll::Ready(Some(m)) => return Poll::Ready(Some(to_request(*i, m))),
                Poll::Ready(None) => {
                    self.leftovers.swap_remove(k);
                }
                Poll::Pending => {
                    open = true;
                    k += 1;
                }
            }
        }
        let n = self.subs.len();
        for k in 0..n {
            let i = (self.turn + k) % n;
            let Some(sub) = self.subs[i].as_mut() else {
                continue;
            };
            match Pin::new(sub).poll_next(cx) {
                Poll::Ready(Some(m)) => {
                    self.turn = i + 1;
                    return Poll::Ready(Some(to_request(i, m)));
                }
                Poll::Ready(None) => self.subs[i] = None,
                Poll::Pending => open = true,
            }
        }
        if open {
            Poll::Pending
        } else {
            self.subs.clear();
            Poll::Ready(None)
        }
    }
}

impl Requests for ServiceRequests {
    type Replier = ServiceReplier;

    fn replier(&self) -> ServiceReplier {
        ServiceReplier {
            client: self.client.clone(),
        }
    }

    async fn join(&mut self) -> Result<(), JoinError> {
        if self.joined {
            return Ok(());
        }
        // What a former membership still delivers is taken before the new one's: its
        // subscriptions (left, draining) are kept until they end, not dropped with
        // what they still hold.
        for (i, sub) in self.subs.drain(..).enumerate() {
            if let Some(sub) = sub {
                self.leftovers.push((i, sub));
            }
        }
        let mut subs = Vec::with_capacity(self.subjects.len());
        for subject in &self.subjects {
            let sub = self
                .client
                .queue_subscribe(subject.clone(), self.queue_group.clone())
                .await?;
            subs.push(Some(sub));
        }
        self.subs = subs;
        self.joined = true;
        // Joined once the server has the subscriptions: only then is the source shown
        // ready, and a request sent after that is served.
        self.round_trip().await?;
        Ok(())
    }

    async fn leave(&mut self) {
        if !self.joined {
            return;
        }
        self.joined = false;
        for sub in self.subs.iter_mut().flatten() {
            if let Err(e) = sub.drain().await {
                tracing::warn!(error = %e, "cannot leave the service's queue group");
            }
        }
    }

    fn next(&mut self) -> impl Future<Output = Option<ServiceRequest>> + Send {
        std::future::poll_fn(|cx| self.poll_any(cx))
    }
}

impl Replier for ServiceReplier {
    async fn reply(&self, to: String, reply: Response) -> bool {
        let sent = if reply.headers.is_empty() {
            self.client.publish(to, reply.body).await
        } else {
            let headers = header_map(&reply.headers, HeaderMap::new());
            self.client
                .publish_with_headers(to, headers, reply.body)
                .await
        };
        if let Err(e) = &sent {
            tracing::debug!(error = %e, "cannot send a reply");
        }
        sent.is_ok()
    }
}

/// A request as the runner takes it.
fn to_request(endpoint: usize, m: async_nats::Message) -> ServiceRequest {
    let mut headers = Vec::new();
    if let Some(h) = &m.headers {
        for (name, values) in h.iter() {
            for v in values {
                headers.push((name.to_string(), v.as_str().to_string()));
            }
        }
    }
    // Said as the client says it: "malformed headers: …" or "malformed subject: …".
    let malformed = super::malformed(&m)
        .and(m.description.as_deref())
        .map(Box::from);
    ServiceRequest {
        endpoint,
        malformed,
        message: Message {
            subject: m.subject.to_string(),
            headers,
            payload: m.payload,
        },
        reply: m.reply.map(|r| r.to_string()),
    }
}
