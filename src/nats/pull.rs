//! The pull engine: our own pull requests on one wildcard inbox, so that they work on
//! `pinned_client` consumers (async-nats refuses `fetch()`/`batch()` there, and its
//! `messages()` stream pre-buffers beyond our capacity).
//!
//! Each pull gets its own reply subject `<inbox>.<id>`, so status answers (408, 409,
//! 423) are matched to the pull they end; delivered messages are counted against the
//! oldest outstanding pull (the server serves a client's waiting pulls in order).
//! Pull sizes come from `crate::capacity`: never more than the free buffer room, and
//! one pull kept outstanding even with a full buffer, carrying the pin id so the pin
//! stays alive. Pulls are re-issued after a reconnect (the server forgets them) and
//! when the server's idle heartbeats stop.
//!
//! A pull the server refuses for the next message's size (409 "Message Size Exceeds
//! MaxBytes") is not repeated until there is more room; while the buffer is full in
//! bytes, the keep-alive is a one-byte pull, sent at most every half expiry, which the
//! server cannot fill. The pin is learned from a message's `Nats-Pin-Id` and forgotten
//! on 423. 409 "Consumer Deleted" and 503 (no responders) report the consumer gone
//! (the source binds or joins again); 400 and "Exceeded MaxRequest…" are fatal; any
//! other 409 (a leader change, a server shutting down) just ends its pull.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;

use async_nats::{Client, Message, Subscriber};
use futures::StreamExt;
use serde::Serialize;
use tokio::sync::watch;
use tokio::time::Instant;

use super::settle::SettleContext;
use super::{ConnState, Nats, NatsError, Settler};
use crate::capacity::{Held, KEEP_ALIVE_BYTES, Limits, NextPull, PullTiming};
use crate::message::{self, Delivery, Flaw, Meta, Origin};
use crate::seam::time::Alarm;
use crate::seam::{Event, Source};
use crate::subject::split_partition;

/// At most this many pulls outstanding at once (the server's default `max_waiting`
/// is 512; we never need many).
const MAX_OUTSTANDING: usize = 16;

/// What the engine pulls from and how.
#[derive(Debug, Clone)]
pub struct PullerConfig {
    /// The stream.
    pub stream: String,
    /// The durable or member consumer.
    pub consumer: String,
    /// The priority group of a pinned consumer (`None` for plain consumers).
    pub group: Option<String>,
    /// Capacity limits.
    pub limits: Limits,
    /// Pull expiry and heartbeat.
    pub timing: PullTiming,
    /// Whether acks wait for the server.
    pub confirmed_acks: bool,
    /// Whether subjects carry a partition token (group sources).
    pub partitioned: bool,
    /// The stream the consumer's stream sources from (elastic groups), whose
    /// sequence `Nats-Stream-Source` carries.
    pub origin_stream: Option<String>,
}

/// What the engine has to say: the dispatcher's events, with this boundary's settle
/// handle.
pub type PullEvent = Event<Settler>;

#[derive(Debug)]
struct Pull {
    id: u64,
    remaining: u32,
    /// Bytes the server may still send on it (as it counts them).
    bytes_left: u64,
    deadline: Instant,
    /// A pull that cannot be filled (one byte), sent only to keep the pin alive.
    keep_alive: bool,
}

/// The pull request body (ADR-42 fields included); durations in nanoseconds.
#[derive(Serialize)]
struct PullRequest<'a> {
    batch: u32,
    max_bytes: u64,
    expires: u128,
    idle_heartbeat: u128,
    #[serde(skip_serializing_if = "Option::is_none")]
    group: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
}

/// The pull engine of one consumer. Owned by one task; [`Puller::next`] is
/// cancel-safe: state changes only after an await completes (a pull is recorded,
/// and a wake taken, once its request is sent; a dropped send sent nothing).
#[derive(Debug)]
pub struct Puller {
    client: Client,
    context: Arc<SettleContext>,
    /// The connection's JetStream calls (pause, resume, unpin).
    nats: Nats,
    cfg: PullerConfig,
    sub: Subscriber,
    prefix: String,
    api_subject: String,
    pin: Option<String>,
    pulls: VecDeque<Pull>,
    next_id: u64,
    last_heard: Instant,
    conn: watch::Receiver<ConnState>,
    generation: u64,
    stopped: bool,
    paused: bool,
    pending: Option<PullEvent>,
    /// When the oldest pull expires.
    alarm: Alarm,
    /// The largest message the server may send (its `max_payload`, plus subject and
    /// reply).
    max_message: u64,
    /// The byte room at which the server last refused the next message as too large
    /// (409): no pull with less room is sent until less is held.
    refused: Option<u64>,
    /// When the last keep-alive pull was sent (they go at most every half expiry).
    keep_alive_sent: Option<Instant>,
    /// Bytes are full and the next keep-alive pull may go then: wake for it.
    keep_alive_wake: Option<Instant>,
    /// Send a pull on the next turn whatever is outstanding ([`Puller::wake`]).
    wake: bool,
    /// This instance paused the consumer on the server for a handover
    /// ([`Puller::freeze`]) and must resume it.
    frozen: bool,
}

/// Room for a message's subject and reply subject beyond the server's `max_payload`
/// (which counts headers and payload).
const SUBJECTS_ROOM: u64 = 4096;

impl Nats {
    /// Starts a pull engine on `cfg.consumer`.
    ///
    /// # Errors
    /// [`NatsError::Subscribe`].
    pub async fn puller(&self, cfg: PullerConfig) -> Result<Puller, NatsError> {
        let (prefix, sub) = pull_inbox(&self.client).await?;
        let mut conn = self.state();
        let generation = conn.borrow_and_update().generation;
        Ok(Puller {
            client: self.client.clone(),
            context: self.settle_context(cfg.confirmed_acks),
            nats: self.clone(),
            api_subject: format!("$JS.API.CONSUMER.MSG.NEXT.{}.{}", cfg.stream, cfg.consumer),
            cfg,
            sub,
            prefix,
            pin: None,
            pulls: VecDeque::new(),
            next_id: 0,
            last_heard: Instant::now(),
            conn,
            generation,
            stopped: false,
            paused: false,
            pending: None,
            alarm: Alarm::default(),
            max_message: self.client.server_info().max_payload as u64 + SUBJECTS_ROOM,
            refused: None,
            keep_alive_sent: None,
            keep_alive_wake: None,
            wake: false,
            frozen: false,
        })
    }
}

impl Puller {
    /// What outstanding pulls may still deliver (keep-alive pulls deliver nothing).
    pub fn requested(&self) -> Held {
        self.pulls
            .iter()
            .filter(|p| !p.keep_alive)
            .fold(Held::default(), |acc, p| Held {
                messages: acc.messages.saturating_add(p.remaining),
                bytes: acc.bytes.saturating_add(p.bytes_left),
            })
    }

    /// Whether this instance holds the pin of a pinned consumer.
    pub fn pinned(&self) -> bool {
        self.pin.is_some()
    }

    /// The next event; `held` is what the dispatcher holds now, for sizing pulls.
    pub async fn next(&mut self, held: Held) -> PullEvent {
        loop {
            if let Some(ev) = self.pending.take() {
                return ev;
            }
            self.top_up(held).await;
            self.alarm.set(self.next_wake());
            // Losing branches: `changed()`, `sub.next()` and the alarm are cancel-safe;
            // the alarm is set again on the next turn.
            tokio::select! {
                biased;
                changed = self.conn.changed() => {
                    if changed.is_err() {
                        return PullEvent::Fatal("the NATS connection is gone".into());
                    }
                    let s = self.conn.borrow_and_update().clone();
                    if s.closed {
                        return PullEvent::Fatal(NatsError::Closed.into());
                    }
                    if s.generation != self.generation || !s.connected {
                        // The server forgot our pulls with the old connection.
                        self.generation = s.generation;
                        self.pulls.clear();
                    }
                }
                msg = self.sub.next() => match msg {
                    None => return PullEvent::Fatal("the pull inbox subscription closed".into()),
                    Some(m) => if let Some(ev) = self.handle(m) { return ev },
                },
                () = self.alarm.ring() => self.expire(),
            }
        }
    }

    /// Stops sending pulls (shutdown, step-down); outstanding ones run out.
    pub fn stop(&mut self) {
        self.stopped = true;
    }

    /// Pauses or resumes pulling (app health gating); outstanding pulls run out.
    pub fn set_paused(&mut self, paused: bool) {
        self.paused = paused;
    }

    /// A reload: pulls are sized by `limits` from now on, and what comes next is
    /// settled with confirmed acks or not (what was delivered keeps its handle).
    pub fn reconfigure(&mut self, limits: crate::capacity::Limits, confirmed_acks: bool) {
        self.cfg.limits = limits;
        if confirmed_acks != self.cfg.confirmed_acks {
            self.cfg.confirmed_acks = confirmed_acks;
            self.context = self.context.with_confirmed(confirmed_acks);
        }
    }

    /// The consumer was resumed on the server: the next turn sends a pull even when
    /// the outstanding ones already ask for all the room (the server serves pulls
    /// that waited through the pause only once a new one arrives).
    pub fn wake(&mut self) {
        self.wake = true;
    }

    /// Gives the pin away so that another instance of the member is served: stops
    /// pulling, retires every outstanding pull (a fresh inbox: the server drops pulls
    /// nobody listens to, so none of them can win the pin back), releases what they
    /// already delivered, then asks the server to unpin. Returns whether it held the
    /// pin.
    pub async fn step_down(&mut self) -> bool {
        self.paused = true;
        let Some(group) = self.cfg.group.clone() else {
            return false;
        };
        if self.pin.take().is_none() {
            return false;
        }
        if let Err(e) = self.retire_pulls().await {
            tracing::warn!(error = %e, "cannot retire the outstanding pulls before unpinning");
        }
        let unpinned = self
            .nats
            .unpin(&self.cfg.stream, &self.cfg.consumer, &group)
            .await;
        if let Err(e) = unpinned {
            tracing::warn!(error = %e, "cannot unpin; the pin lapses after priority_timeout");
        }
        true
    }

    /// A pinned instance about to hand over: pauses the consumer on the server until
    /// [`Puller::thaw`] (at most `bound`), so that what it releases meanwhile stays in
    /// the redelivery queue in the order released (see [`Source::freeze`]). Leaves a
    /// consumer that is paused already (`jetrelay pause`) as it is. Returns whether it
    /// paused it.
    pub async fn freeze(&mut self, bound: std::time::Duration) -> bool {
        if self.cfg.group.is_none() || self.pin.is_none() || self.frozen {
            return false;
        }
        let (stream, name) = (&self.cfg.stream, &self.cfg.consumer);
        let paused = async {
            if self.nats.consumer_pause(stream, name).await?.is_paused() {
                return Ok(false);
            }
            let until = time::OffsetDateTime::now_utc()
                + time::Duration::try_from(bound).unwrap_or(time::Duration::SECOND);
            Ok::<_, super::TopologyError>(
                self.nats.pause_consumer(stream, name, until).await?.paused,
            )
        };
        match paused.await {
            Ok(frozen) => self.frozen = frozen,
            Err(e) => {
                tracing::warn!(error = %e, "cannot pause the consumer for the handover: the next instance may see what this one releases out of order");
            }
        }
        self.frozen
    }

    /// Resumes the consumer [`Puller::freeze`] paused.
    pub async fn thaw(&mut self) {
        if !std::mem::take(&mut self.frozen) {
            return;
        }
        let resumed = self
            .nats
            .resume_consumer(&self.cfg.stream, &self.cfg.consumer)
            .await;
        if let Err(e) = resumed {
            tracing::warn!(error = %e, "cannot resume the consumer after the handover: the server resumes it when the pause it was given ends");
        }
    }

    /// Moves to a fresh inbox: outstanding pulls lose their listener and die on the
    /// server; messages already delivered to the old inbox are released (NAK).
    async fn retire_pulls(&mut self) -> Result<(), NatsError> {
        for settler in self.retire().await? {
            if let Err(e) = settler.nak(std::time::Duration::ZERO).await {
                tracing::warn!(error = %e, "cannot release a message");
            }
        }
        Ok(())
    }

    /// Moves to a fresh inbox, so that the outstanding pulls lose their listener and
    /// die on the server; returns the settlers of the messages delivered to the old
    /// one (every one the server sent before it dropped the pulls).
    ///
    /// # Errors
    /// [`NatsError::Subscribe`] when the fresh inbox cannot be made.
    pub async fn retire(&mut self) -> Result<Vec<Settler>, NatsError> {
        let (prefix, fresh) = pull_inbox(&self.client).await?;
        let old = std::mem::replace(&mut self.sub, fresh);
        self.prefix = prefix;
        self.pulls.clear();
        Ok(leftovers(&self.context, old).await)
    }

    /// Unsubscribes and returns the settlers of messages that were already delivered
    /// to the inbox but not yet taken, so that the caller can release them.
    pub async fn close(self) -> Vec<Settler> {
        leftovers(&self.context, self.sub).await
    }

    async fn top_up(&mut self, held: Held) {
        self.keep_alive_wake = None;
        if self.stopped || self.paused || !self.conn.borrow().connected {
            return;
        }
        // A wake (after a pause on the server) needs one new pull to arrive there,
        // whatever is outstanding: one message more than the room, at most.
        // Taken back only once that pull is sent (a cancelled send sent nothing).
        let mut wake = self.wake;
        // A standby (a pinned consumer's instance without the pin) keeps one pull
        // open: the server gives the pin to one request, and requests without its id
        // are never served, so a second one would only sit there; worse, while it is
        // the only one left the server takes a redelivered message for it and, unable
        // to send it, moves that message to the back of its redelivery queue.
        let standby = self.cfg.group.is_some() && self.pin.is_none();
        loop {
            let next = if standby && !self.pulls.is_empty() {
                NextPull::Wait
            } else if self.pulls.len() < MAX_OUTSTANDING {
                self.cfg
                    .limits
                    .next_pull(held, self.requested(), self.max_message, self.refused)
            } else {
                NextPull::Wait
            };
            let next = match next {
                NextPull::Wait | NextPull::KeepAlive if wake => NextPull::Pull {
                    batch: 1,
                    max_bytes: self.max_message,
                },
                other => other,
            };
            wake = false;
            let now = Instant::now();
            let (batch, max_bytes, keep_alive) = match next {
                NextPull::Wait => return,
                NextPull::KeepAlive => {
                    // Only a pin needs keeping; one such pull at a time, and at most
                    // every half expiry (the server answers it at once when a message
                    // is waiting).
                    if self.cfg.group.is_none() || self.pulls.iter().any(|p| p.keep_alive) {
                        return;
                    }
                    let allowed = self
                        .keep_alive_sent
                        .map(|at| at + self.cfg.timing.expires / 2);
                    if let Some(at) = allowed.filter(|at| now < *at) {
                        self.keep_alive_wake = Some(at);
                        return;
                    }
                    (1, KEEP_ALIVE_BYTES, true)
                }
                NextPull::Pull { batch, max_bytes } => (batch, max_bytes, false),
            };
            if self.pulls.is_empty() {
                self.last_heard = now;
            }
            self.next_id += 1;
            let id = self.next_id;
            let body = PullRequest {
                batch,
                max_bytes,
                expires: self.cfg.timing.expires.as_nanos(),
                idle_heartbeat: self.cfg.timing.heartbeat.as_nanos(),
                group: self.cfg.group.as_deref(),
                id: self.pin.as_deref(),
            };
            let Ok(body) = serde_json::to_vec(&body) else {
                return; // Serialising a struct of numbers and strings cannot fail.
            };
            let reply = format!("{}.{id}", self.prefix);
            if let Err(e) = self
                .client
                .publish_with_reply(self.api_subject.clone(), reply, body.into())
                .await
            {
                tracing::warn!(error = %e, "cannot send a pull request");
                return;
            }
            // Recorded once sent, never before: `next` is cancelled (a `select!`
            // another branch wins, batch delivery's `now_or_never`) while the send
            // waits for room in the client's queue, and a cancelled send sent
            // nothing. A pull recorded before it took the room of one the server
            // never got: no pull went out until the missed heartbeat, seconds
            // later. The messages it brings are counted against it: they are read
            // by this task, after this returns.
            self.wake = false;
            self.pulls.push_back(Pull {
                id,
                remaining: batch,
                bytes_left: max_bytes,
                deadline: now + self.cfg.timing.expires + self.cfg.timing.heartbeat,
                keep_alive,
            });
            if keep_alive {
                self.keep_alive_sent = Some(now);
                return;
            }
        }
    }

    fn next_wake(&self) -> Option<Instant> {
        let pulls = self
            .pulls
            .iter()
            .map(|p| p.deadline)
            .min()
            .map(|first| first.min(self.last_heard + self.cfg.timing.missed_heartbeat_after()));
        match (pulls, self.keep_alive_wake) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn expire(&mut self) {
        let now = Instant::now();
        self.pulls.retain(|p| p.deadline > now);
        if !self.pulls.is_empty()
            && now.duration_since(self.last_heard) >= self.cfg.timing.missed_heartbeat_after()
        {
            tracing::warn!(
                outstanding = self.pulls.len(),
                "no heartbeat from the server: pulling again"
            );
            self.pulls.clear();
            self.last_heard = now;
        }
    }

    /// Ends the pull a status answered; returns it.
    fn end_pull(&mut self, subject: &str) -> Option<Pull> {
        let id = subject
            .strip_prefix(self.prefix.as_str())
            .and_then(|s| s.strip_prefix('.'))
            .and_then(|s| s.parse::<u64>().ok())?;
        let at = self.pulls.iter().position(|p| p.id == id)?;
        self.pulls.remove(at)
    }

    fn handle(&mut self, m: Message) -> Option<PullEvent> {
        self.last_heard = Instant::now();
        let Some(status) = m.status else {
            return self.message(m);
        };
        let description = m.description.as_deref().unwrap_or_default();
        match u16::from(status) {
            100 => None,
            404 | 408 => {
                self.end_pull(&m.subject);
                None
            }
            409 if description.eq_ignore_ascii_case("message size exceeds maxbytes") => {
                // The next message needs more room than the pull had; a keep-alive is
                // meant to be refused.
                if let Some(p) = self.end_pull(&m.subject).filter(|p| !p.keep_alive) {
                    self.refused = Some(p.bytes_left);
                }
                None
            }
            409 => {
                if description.eq_ignore_ascii_case("consumer deleted") {
                    Some(PullEvent::ConsumerGone("the consumer was deleted".into()))
                } else if description.starts_with("Exceeded MaxRequest")
                    || description.contains("push based")
                {
                    Some(PullEvent::Fatal(
                        format!("pull refused: {description}").into(),
                    ))
                } else {
                    // Leadership change, server shutdown, max waiting: pull again.
                    tracing::debug!(description, "pull ended by the server");
                    self.end_pull(&m.subject);
                    None
                }
            }
            423 => {
                self.end_pull(&m.subject);
                self.pin.take().map(|_| PullEvent::Pinned(false))
            }
            503 => Some(PullEvent::ConsumerGone(
                "no responders: JetStream or the consumer is not available".into(),
            )),
            400 => Some(PullEvent::Fatal(
                format!("pull refused: {description}").into(),
            )),
            other => {
                tracing::warn!(status = other, description, "unexpected pull status");
                self.end_pull(&m.subject);
                None
            }
        }
    }

    fn message(&mut self, m: Message) -> Option<PullEvent> {
        // Messages come in stream order: the one the server refused is through.
        self.refused = None;
        // Counted against the oldest pull that can deliver.
        if let Some(at) = self.pulls.iter().position(|p| !p.keep_alive) {
            let p = &mut self.pulls[at];
            p.remaining = p.remaining.saturating_sub(1);
            p.bytes_left = p.bytes_left.saturating_sub(m.length as u64);
            if p.remaining == 0 || p.bytes_left == 0 {
                self.pulls.remove(at);
            }
        }
        let newly_pinned = self.cfg.group.is_some() && {
            let pin = m
                .headers
                .as_ref()
                .and_then(|h| h.get_last("Nats-Pin-Id"))
                .map(|v| v.as_str().to_string());
            pin.is_some_and(|pin| self.pin.replace(pin).is_none())
        };
        let Some(reply) = m.reply.clone() else {
            tracing::warn!(subject = %m.subject, "a pulled message has no reply subject; it cannot be settled");
            return None;
        };
        let settler = Settler::new(Arc::clone(&self.context), reply);
        let message = PullEvent::Message(Box::new(to_delivery(m, &self.cfg)), settler);
        if newly_pinned {
            // Pinned first, then the message it brought.
            self.pending = Some(message);
            Some(PullEvent::Pinned(true))
        } else {
            Some(message)
        }
    }
}

/// A fresh pull inbox: its prefix, and the one wildcard subscription every pull's
/// reply subject (`<prefix>.<id>`) falls under.
async fn pull_inbox(client: &Client) -> Result<(String, Subscriber), NatsError> {
    let prefix = client.new_inbox();
    let sub = client
        .subscribe(format!("{prefix}.*"))
        .await
        .map_err(NatsError::Subscribe)?;
    Ok((prefix, sub))
}

/// Unsubscribes a pull inbox and returns the settlers of the messages it had already
/// received: after unsubscribe the subscription yields what it buffered, then ends.
async fn leftovers(context: &Arc<SettleContext>, mut sub: Subscriber) -> Vec<Settler> {
    // Drained, not merely unsubscribed: the subscription stays until the server
    // answered a PING sent after the UNSUB, so a message it sent before dropping the
    // pulls still arrives here and is released, instead of being thrown away by the
    // client and coming back only after the ack wait (out of order, to the next
    // instance).
    if let Err(e) = sub.drain().await {
        tracing::warn!(error = %e, "cannot unsubscribe the pull inbox");
    }
    let mut left = Vec::new();
    let deadline = Instant::now() + std::time::Duration::from_secs(2);
    while let Ok(Some(m)) = tokio::time::timeout_at(deadline, sub.next()).await {
        if let (None, Some(reply)) = (m.status, m.reply) {
            left.push(Settler::new(Arc::clone(context), reply));
        }
    }
    left
}

fn to_delivery(m: Message, cfg: &PullerConfig) -> Delivery {
    let subject = m.subject.to_string();
    let meta = m.reply.as_ref().map_or_else(
        || Err("no reply subject".to_string()),
        |r| Meta::from_ack_subject(r.as_str()),
    );
    let mut headers = Vec::new();
    if let Some(h) = &m.headers {
        for (name, values) in h.iter() {
            for v in values {
                headers.push((name.to_string(), v.as_str().to_string()));
            }
        }
    }
    let origin = cfg.origin_stream.as_deref().and_then(|stream| {
        let source = m.headers.as_ref()?.get_last("Nats-Stream-Source")?;
        Origin::from_stream_source(source.as_str(), stream)
    });
    let (partition, app_subject, mut flaw) = if cfg.partitioned {
        match split_partition(&subject) {
            Some((p, rest)) => (Some(p), rest.to_string(), None),
            None => (
                None,
                subject.clone(),
                Some(Flaw::NoPartition(format!(
                    "subject {subject:?} has no partition token"
                ))),
            ),
        }
    } else {
        (None, subject.clone(), None)
    };
    // The client delivers a message whose header block does not parse with the lines
    // that did, or whose subject is not UTF-8 with those bytes replaced, and says so
    // in the description (vendor/README.md). Unreadable
    // metadata is not copied here: `meta` says it, once.
    if let Some(malformed) = super::malformed(&m) {
        flaw.get_or_insert(malformed);
    }
    Delivery {
        message: message::Message {
            subject,
            headers,
            payload: m.payload,
        },
        meta,
        partition,
        app_subject,
        origin,
        flaw,
    }
}

impl Source for Puller {
    type Settler = Settler;

    fn next(&mut self, held: Held) -> impl Future<Output = PullEvent> + Send {
        Puller::next(self, held)
    }

    fn stop(&mut self) {
        Puller::stop(self);
    }

    fn set_paused(&mut self, paused: bool) {
        Puller::set_paused(self, paused);
    }

    fn wake(&mut self) {
        Puller::wake(self);
    }

    fn reconfigure(&mut self, limits: crate::capacity::Limits, confirmed_acks: bool) {
        Puller::reconfigure(self, limits, confirmed_acks);
    }

    async fn retire(&mut self) -> Vec<Settler> {
        match Puller::retire(self).await {
            Ok(left) => left,
            Err(e) => {
                tracing::warn!(error = %e, "cannot retire the outstanding pulls");
                Vec::new()
            }
        }
    }

    fn freeze(&mut self, bound: std::time::Duration) -> impl Future<Output = bool> + Send {
        Puller::freeze(self, bound)
    }

    fn thaw(&mut self) -> impl Future<Output = ()> + Send {
        Puller::thaw(self)
    }

    fn step_down(&mut self) -> impl Future<Output = bool> + Send {
        Puller::step_down(self)
    }

    fn close(self) -> impl Future<Output = Vec<Settler>> + Send {
        Puller::close(self)
    }
}
