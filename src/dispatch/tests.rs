//! The dispatcher against fakes of its seams, in virtual time
//! (`tokio::time::pause`): a source fed by the test, settle handles that record what
//! they were told, an app answering from a script after a virtual delay, and a
//! publisher whose PubAcks come from a script after a virtual delay, recorded in the
//! same log as the settles (so that "the PubAck before the TERM" and "the outputs
//! before the ack" are read off one timeline).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::book::Book;
use super::lanes::LaneKey;
use super::{Dispatch, Ended, OutputRules};
use crate::app::batch::{Answer, ItemResult};
use crate::app::headers::TraceHeaders;
use crate::capacity::Held;
use crate::message::{Delivery, Message, Meta, Offered};
use crate::ops::metrics::Metrics;
use crate::ops::readiness::{Readiness, SourceReadiness, State};
use crate::ops::traces::Tracer;
use crate::outputs::{Output, Rules};
use crate::policy::{Outcome, Policy, StatusSet};
use crate::seam::Ordering;
use crate::seam::publish::{Committed, LetterFailure, OutputFailure, Publish};
use crate::seam::time::Deadline;
use crate::seam::{
    BatchForwarded, Event, Forward, Forwarded, Health, HttpClass, NoAnswer, Offer, ServerPause,
    Settle, Source,
};

// === the fakes ===

/// What a settle handle was told, when, for which stream sequence.
#[derive(Debug, Clone, PartialEq)]
enum Told {
    Ack,
    /// An ack that waits for the server's confirmation (after outputs).
    AckConfirmed,
    Nak(Duration),
    /// A NAK that waits for the server's confirmation (a handover's last release).
    NakConfirmed(Duration),
    Term,
    Progress,
    /// The dead letter's PubAck.
    Letter,
    /// A dead-letter publish that failed.
    LetterFailed,
    /// The outputs' PubAck.
    Published,
    /// An outputs publish that failed.
    PublishFailed,
    /// The source (logged as sequence 0): the consumer frozen on the server for a
    /// handover, the pin given up, the consumer thawed.
    Frozen,
    SteppedDown,
    Thawed,
    /// Its idempotency marker was stored.
    Marked,
    /// A marker write that failed.
    MarkFailed,
}

type Log = Arc<Mutex<Vec<(u64, Told, Instant)>>>;

#[derive(Debug, Clone)]
struct FakeSettler {
    seq: u64,
    log: Log,
}

impl FakeSettler {
    fn tell(&self, t: Told) {
        self.log.lock().unwrap().push((self.seq, t, Instant::now()));
    }
}

impl Settle for FakeSettler {
    type Error = String;

    async fn ack(&self) -> Result<(), String> {
        self.tell(Told::Ack);
        Ok(())
    }

    async fn ack_confirmed(&self) -> Result<(), String> {
        self.tell(Told::AckConfirmed);
        Ok(())
    }

    async fn nak(&self, delay: Duration) -> Result<(), String> {
        self.tell(Told::Nak(delay));
        Ok(())
    }

    async fn nak_confirmed(&self, delay: Duration) -> Result<(), String> {
        self.tell(Told::NakConfirmed(delay));
        Ok(())
    }

    async fn term(&self, _reason: &str) -> Result<(), String> {
        self.tell(Told::Term);
        Ok(())
    }

    async fn progress(&self) -> Result<bool, String> {
        self.tell(Told::Progress);
        Ok(true)
    }
}

/// What the dispatcher did to the source.
#[derive(Debug, Default)]
struct SourceSide {
    held: Vec<Held>,
    paused: Vec<bool>,
    stopped: bool,
    quiesced_at: Vec<Instant>,
    closed: bool,
    woken: usize,
    /// The `max_batch` of each reconfiguration.
    reconfigured: Vec<u32>,
}

struct FakeSource {
    events: mpsc::UnboundedReceiver<Event<FakeSettler>>,
    side: Arc<Mutex<SourceSide>>,
    /// A pinned member's instance: it freezes, steps down and thaws (told to `log`).
    pinned: bool,
    log: Log,
}

impl FakeSource {
    fn tell(&self, t: Told) {
        self.log.lock().unwrap().push((0, t, Instant::now()));
    }
}

impl Source for FakeSource {
    type Settler = FakeSettler;

    async fn next(&mut self, held: Held) -> Event<FakeSettler> {
        self.side.lock().unwrap().held.push(held);
        match self.events.recv().await {
            Some(ev) => ev,
            None => std::future::pending().await,
        }
    }

    fn stop(&mut self) {
        self.side.lock().unwrap().stopped = true;
    }

    fn set_paused(&mut self, paused: bool) {
        self.side.lock().unwrap().paused.push(paused);
    }

    fn wake(&mut self) {
        self.side.lock().unwrap().woken += 1;
    }

    fn reconfigure(&mut self, limits: crate::capacity::Limits, _confirmed_acks: bool) {
        self.side
            .lock()
            .unwrap()
            .reconfigured
            .push(limits.max_batch);
    }

    async fn step_down(&mut self) -> bool {
        if self.pinned {
            self.tell(Told::SteppedDown);
        }
        std::mem::take(&mut self.pinned)
    }

    async fn freeze(&mut self, _bound: Duration) -> bool {
        if self.pinned {
            self.tell(Told::Frozen);
        }
        self.pinned
    }

    async fn thaw(&mut self) {
        self.tell(Told::Thawed);
    }

    async fn quiesced(&mut self) {
        self.side.lock().unwrap().quiesced_at.push(Instant::now());
    }

    async fn close(self) -> Vec<FakeSettler> {
        self.side.lock().unwrap().closed = true;
        Vec::new()
    }
}

/// A publish failure: `transient` ones may pass, the others are a refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
enum FakeFailure {
    #[error("unavailable")]
    Transient,
    #[error("too large")]
    TooLarge,
}

impl LetterFailure for FakeFailure {
    fn is_too_large(&self) -> bool {
        *self == FakeFailure::TooLarge
    }
}

impl OutputFailure for FakeFailure {
    fn label(&self) -> &'static str {
        match self {
            FakeFailure::Transient => "unavailable",
            FakeFailure::TooLarge => "too_large",
        }
    }
    fn is_permanent(&self) -> bool {
        *self == FakeFailure::TooLarge
    }
    fn is_too_large(&self) -> bool {
        *self == FakeFailure::TooLarge
    }
    fn retry_may_help(&self) -> bool {
        *self == FakeFailure::Transient
    }
}

/// Whether the `n`-th publish (from 1) for an input's stream sequence is stored, and
/// after how long its PubAck comes.
type PublishScript = Box<dyn Fn(u64, u32) -> (Result<(), FakeFailure>, Duration) + Send + Sync>;

struct FakePublisher {
    log: Log,
    letters: PublishScript,
    outputs: PublishScript,
    tries: Mutex<HashMap<(bool, u64), u32>>,
    /// The outputs of every stored publish, in PubAck order.
    stored: Arc<Mutex<Vec<Output>>>,
}

impl FakePublisher {
    /// The `n`-th try for `seq` (of letters or of outputs).
    fn next_try(&self, letter: bool, seq: u64) -> u32 {
        let mut tries = self.tries.lock().unwrap();
        let n = tries.entry((letter, seq)).or_insert(0);
        *n += 1;
        *n
    }
}

/// The input's stream sequence an output id (`jetrelay:<stream>:<consumer>:<seq>:<i>`)
/// or a letter (`Jetrelay-Dlq-Sequence`) names.
fn input_seq(headers: &[(String, String)]) -> u64 {
    headers
        .iter()
        .find_map(|(n, v)| {
            if n.eq_ignore_ascii_case(crate::dead_letter::header::SEQUENCE) {
                v.parse().ok()
            } else if n.eq_ignore_ascii_case(crate::outputs::MSG_ID) {
                v.rsplit(':').nth(1)?.parse().ok()
            } else {
                None
            }
        })
        .expect("an input sequence")
}

impl Publish for FakePublisher {
    type LetterError = FakeFailure;
    type OutputError = FakeFailure;

    fn max_payload(&self) -> usize {
        1024 * 1024
    }

    async fn dead_letter(
        &self,
        _subject: &str,
        headers: &[(String, String)],
        _payload: Bytes,
    ) -> Result<(), FakeFailure> {
        let seq = input_seq(headers);
        let (result, delay) = (self.letters)(seq, self.next_try(true, seq));
        tokio::time::sleep(delay).await;
        let told = if result.is_ok() {
            Told::Letter
        } else {
            Told::LetterFailed
        };
        self.log.lock().unwrap().push((seq, told, Instant::now()));
        result
    }

    async fn outputs(&self, outputs: &[Output], _atomic: bool) -> Result<Committed, FakeFailure> {
        let seq = input_seq(&outputs[0].headers);
        let (result, delay) = (self.outputs)(seq, self.next_try(false, seq));
        tokio::time::sleep(delay).await;
        let told = if result.is_ok() {
            self.stored.lock().unwrap().extend_from_slice(outputs);
            Told::Published
        } else {
            Told::PublishFailed
        };
        self.log.lock().unwrap().push((seq, told, Instant::now()));
        result.map(|()| Committed {
            stream: "OUT".into(),
            seq,
            count: outputs.len(),
            duplicate: false,
        })
    }
}

/// The markers: values by key, whose writes fail while `failing` is above 0 (each
/// failed write takes one off) and take `delay` each.
struct FakeMarkers {
    log: Log,
    keys: Markings,
    failing: Arc<Mutex<u32>>,
    /// Writes that failed or stored, as the sets of keys handed over.
    writes: Arc<Mutex<Vec<usize>>>,
    delay: Duration,
    /// Reads, as the number of keys each read together.
    reads: Arc<Mutex<Vec<usize>>>,
}

/// The markers stored: each key's value.
type Markings = Arc<Mutex<std::collections::HashMap<String, String>>>;

/// The stream sequence a marker key (`<scope>.s<base64 "S:<seq>">`) names; 0 for a
/// message id's.
fn seq_of_marker(key: &str) -> u64 {
    use base64::Engine as _;
    let id = key.split_once('.').unwrap().1;
    match id.strip_prefix('s') {
        Some(b) => {
            let text = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(b)
                .unwrap();
            String::from_utf8(text)
                .unwrap()
                .rsplit(':')
                .next()
                .unwrap()
                .parse()
                .unwrap()
        }
        None => 0,
    }
}

#[derive(Debug, thiserror::Error)]
#[error("the marker store is unavailable")]
struct MarkerDown;

impl crate::seam::markers::MarkerFailure for MarkerDown {}

impl crate::seam::markers::Markers for FakeMarkers {
    type Error = MarkerDown;

    async fn marked(&self, key: &str) -> Result<Option<Bytes>, MarkerDown> {
        tokio::time::sleep(self.delay).await;
        self.reads.lock().unwrap().push(1);
        Ok(self.keys.lock().unwrap().get(key).cloned().map(Bytes::from))
    }

    async fn marked_many(&self, keys: &[String]) -> Result<Vec<Option<Bytes>>, MarkerDown> {
        tokio::time::sleep(self.delay).await;
        self.reads.lock().unwrap().push(keys.len());
        let stored = self.keys.lock().unwrap();
        Ok(keys
            .iter()
            .map(|k| stored.get(k).cloned().map(Bytes::from))
            .collect())
    }

    async fn mark(&self, keys: &[(String, String)]) -> Result<(), MarkerDown> {
        tokio::time::sleep(self.delay).await;
        self.writes.lock().unwrap().push(keys.len());
        let failed = {
            let mut f = self.failing.lock().unwrap();
            let failed = *f > 0;
            *f = f.saturating_sub(1);
            failed
        };
        let told = if failed {
            Told::MarkFailed
        } else {
            Told::Marked
        };
        for (k, _) in keys {
            self.log
                .lock()
                .unwrap()
                .push((seq_of_marker(k), told.clone(), Instant::now()));
        }
        if failed {
            return Err(MarkerDown);
        }
        self.keys.lock().unwrap().extend(keys.iter().cloned());
        Ok(())
    }
}

/// Every publish stored, its PubAck after `d`.
fn stored_after(d: Duration) -> PublishScript {
    Box::new(move |_, _| (Ok(()), d))
}

/// One output of the input `seq`, for an answer that publishes.
fn output_of(seq: u64) -> Output {
    Output {
        subject: format!("out.{seq}"),
        headers: Vec::new(),
        payload: Bytes::from(seq.to_string()),
    }
}

/// One request the app saw.
#[derive(Debug, Clone)]
struct Seen {
    seq: u64,
    subject: String,
    attempt: u32,
    /// What the request said of its key's marker of another message.
    conflict: Option<String>,
    start: Instant,
    end: Instant,
}

/// The app's answer: what happened, after how long.
type Script = Box<dyn Fn(u64, u32, Instant) -> (Outcome, Duration) + Send + Sync>;

/// The app's answer to a batch (sequence and attempt of each message, in order): the
/// request's outcome, the per-message answer of a 2xx, after how long.
type BatchScript = Box<dyn Fn(&[(u64, u32)]) -> (Outcome, Option<Answer>, Duration) + Send + Sync>;

/// The rig's routes, each an action (a route to a target of its own needs an app of
/// its own, which the rig has not).
fn skip_routes<F>(routes: &[crate::route::Route<()>]) -> Vec<crate::route::Route<F>> {
    routes
        .iter()
        .map(|r| {
            r.try_map(|()| Err(()))
                .expect("the rig's routes are actions")
        })
        .collect()
}

struct FakeApp {
    script: Script,
    batch_script: Option<BatchScript>,
    /// A 2xx answer publishes one output (`out.<seq>`).
    publishes: bool,
    seen: Arc<Mutex<Vec<Seen>>>,
    batches: Arc<Mutex<Vec<Vec<u64>>>>,
    in_flight: Arc<Mutex<(usize, usize)>>,
    /// The `traceparent` each request carried instead of the message's own.
    traceparents: Arc<Mutex<Vec<Option<String>>>>,
}

impl Forward for FakeApp {
    async fn forward(&self, offer: Offer<'_>) -> Forwarded {
        let (d, attempt) = (offer.offered, offer.attempt);
        self.traceparents
            .lock()
            .unwrap()
            .push(offer.trace.map(|t| t.traceparent.to_string()));
        let start = Instant::now();
        {
            let mut f = self.in_flight.lock().unwrap();
            f.0 += 1;
            f.1 = f.1.max(f.0);
        }
        let (outcome, delay) = (self.script)(d.stream_seq(), attempt, start);
        tokio::time::sleep(delay).await;
        self.in_flight.lock().unwrap().0 -= 1;
        self.seen.lock().unwrap().push(Seen {
            seq: d.stream_seq(),
            subject: d.subject().to_string(),
            attempt,
            conflict: offer.conflict.map(str::to_string),
            start,
            end: Instant::now(),
        });
        let mut f = forwarded(outcome, delay);
        if self.publishes && matches!(f.class, HttpClass::Status(200..=299)) {
            f.outputs = Some(Ok(vec![output_of(d.stream_seq())]));
        }
        f
    }

    async fn forward_batch(
        &self,
        offers: &[Offer<'_>],
        trace: Option<TraceHeaders<'_>>,
    ) -> BatchForwarded {
        self.traceparents
            .lock()
            .unwrap()
            .push(trace.map(|t| t.traceparent.to_string()));
        let items: Vec<(Offered<'_>, u32, Option<&str>)> = offers
            .iter()
            .map(|o| (o.offered, o.attempt, o.conflict))
            .collect();
        let start = Instant::now();
        let carried: Vec<(u64, u32)> = items.iter().map(|(d, a, _)| (d.stream_seq(), *a)).collect();
        self.batches
            .lock()
            .unwrap()
            .push(carried.iter().map(|(s, _)| *s).collect());
        let script = self.batch_script.as_ref().expect("a batch script");
        let (outcome, answer, delay) = script(&carried);
        tokio::time::sleep(delay).await;
        for (d, attempt, conflict) in &items {
            self.seen.lock().unwrap().push(Seen {
                seq: d.stream_seq(),
                subject: d.subject().to_string(),
                attempt: *attempt,
                conflict: conflict.map(str::to_string),
                start,
                end: Instant::now(),
            });
        }
        BatchForwarded {
            forwarded: forwarded(outcome, delay),
            answer,
        }
    }
}

fn forwarded(outcome: Outcome, delay: Duration) -> Forwarded {
    let (class, failure) = match &outcome {
        Outcome::Answered { status, .. } => (HttpClass::Status(*status), None),
        Outcome::Unreachable => (
            HttpClass::Error,
            Some(NoAnswer {
                kind: "connection refused",
                cause: "refused".into(),
            }),
        ),
        _ => (HttpClass::Error, None),
    };
    Forwarded {
        outcome,
        class,
        skipped_headers: 0,
        trace_dropped: Default::default(),
        elapsed: delay,
        bad_action: false,
        failure,
        outputs: None,
    }
}

fn status(s: u16) -> Outcome {
    Outcome::Answered {
        status: s,
        retry_after: None,
        action: None,
    }
}

fn delivery(seq: u64, subject: &str) -> Delivery {
    Delivery {
        message: Message {
            subject: subject.into(),
            headers: Vec::new(),
            payload: Bytes::from(vec![0u8; 10]),
        },
        meta: Ok(Meta {
            stream: "S".into(),
            consumer: "c".into(),
            stream_seq: seq,
            consumer_seq: seq,
            delivered: 1,
            pending: 0,
            published: time::OffsetDateTime::UNIX_EPOCH,
        }),
        partition: None,
        app_subject: subject.into(),
        origin: None,
        flaw: None,
    }
}

/// A dispatcher, its fakes and the handles to drive and watch them.
struct Rig {
    /// The idempotency markers stored.
    marker_keys: Markings,
    /// Each marker write: how many keys it carried.
    marker_writes: Arc<Mutex<Vec<usize>>>,
    /// How many marker writes fail from now on.
    marker_failing: Arc<Mutex<u32>>,
    /// Each marker read: how many keys it carried.
    marker_reads: Arc<Mutex<Vec<usize>>>,
    batches: Arc<Mutex<Vec<Vec<u64>>>>,
    events: mpsc::UnboundedSender<Event<FakeSettler>>,
    log: Log,
    stored: Arc<Mutex<Vec<Output>>>,
    traceparents: Arc<Mutex<Vec<Option<String>>>>,
    side: Arc<Mutex<SourceSide>>,
    seen: Arc<Mutex<Vec<Seen>>>,
    in_flight: Arc<Mutex<(usize, usize)>>,
    healthy: watch::Sender<Health>,
    pause: watch::Sender<ServerPause>,
    /// What a reload sends the dispatcher.
    live: watch::Sender<Arc<super::Live<FakeApp>>>,
    readiness: SourceReadiness,
    metrics: crate::ops::metrics::SourceMetrics,
    shutdown: CancellationToken,
    run: tokio::task::JoinHandle<Result<Ended, super::DispatchError>>,
}

struct Knobs {
    batch: Option<crate::dispatch::Batching>,
    max_in_flight: usize,
    /// Adaptive concurrency (`min_in_flight` 1) and the rate limit (0: none).
    adaptive: bool,
    rate_per_s: u32,
    /// `retry_statuses` (`["5xx"]`; every other 4xx terminates).
    retry: &'static [&'static str],
    /// `consumer.max_deliver` (5).
    max_attempts: Option<u32>,
    ordering: Ordering,
    progress_every: Duration,
    grace: Duration,
    healthy: bool,
    /// Dead letters go to `dlq` (`dlq.subject` set).
    dead_letters: bool,
    /// The app's answers publish one output each (`publish.allowed_subjects = ["out.>"]`).
    publishes: bool,
    letters: Option<PublishScript>,
    outputs: Option<PublishScript>,
    tracer: Tracer,
    /// The source's routes: actions only (the rig has one app).
    routes: Vec<crate::route::Route<()>>,
    /// `delivery.max_age_ms`.
    max_age: Option<Duration>,
    /// Its share of a budget other rigs share (`None`: a budget that is off).
    budget: Option<crate::admission::BudgetShare>,
    /// A pinned member's instance (the source says it is pinned at the start).
    pinned: bool,
    /// Idempotency markers on: the keys already marked, and how many writes fail.
    markers: Option<(Vec<(String, String)>, u32)>,
}

impl Default for Knobs {
    fn default() -> Knobs {
        Knobs {
            batch: None,
            max_in_flight: 4,
            adaptive: false,
            rate_per_s: 0,
            retry: &["5xx"],
            max_attempts: Some(5),
            ordering: Ordering::None,
            progress_every: Duration::from_secs(15),
            grace: Duration::from_secs(20),
            healthy: true,
            dead_letters: false,
            publishes: false,
            letters: None,
            outputs: None,
            tracer: Tracer::off(),
            routes: Vec::new(),
            max_age: None,
            budget: None,
            pinned: false,
            markers: None,
        }
    }
}

impl Knobs {
    /// The defaults, with at most `max_in_flight` requests.
    fn in_flight(max_in_flight: usize) -> Knobs {
        Knobs {
            max_in_flight,
            ..Knobs::default()
        }
    }
}

fn rig(knobs: Knobs, script: Script) -> Rig {
    rig_with(knobs, script, None)
}

fn batch_rig(knobs: Knobs, batch_script: BatchScript) -> Rig {
    rig_with(
        knobs,
        Box::new(|_, _, _| (status(200), MS)),
        Some(batch_script),
    )
}

fn rig_with(knobs: Knobs, script: Script, batch_script: Option<BatchScript>) -> Rig {
    let metrics = Metrics::new().unwrap();
    let process = Readiness::new(metrics.clone());
    process.set_nats_down(None);
    let metrics = metrics.source("default").unwrap();
    let readiness = process.source("default", None, metrics.clone());
    let (healthy, app_healthy) = watch::channel(if knobs.healthy {
        Health::Healthy
    } else {
        Health::Unhealthy
    });
    let (pause, server_pause) = watch::channel(ServerPause::Running);
    let (seen, in_flight, batches) = (Arc::default(), Arc::default(), Arc::default());
    let log: Log = Arc::default();
    let stored: Arc<Mutex<Vec<Output>>> = Arc::default();
    let traceparents: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
    let live = super::Live {
        forwarder: FakeApp {
            script,
            batch_script,
            publishes: knobs.publishes,
            seen: Arc::clone(&seen),
            batches: Arc::clone(&batches),
            in_flight: Arc::clone(&in_flight),
            traceparents: Arc::clone(&traceparents),
        },
        policy: Policy {
            retry: StatusSet::parse(knobs.retry).unwrap(),
            term: StatusSet::parse(&["4xx"]).unwrap(),
            retry_initial: Duration::from_secs(1),
            retry_max: Duration::from_secs(60),
            retry_after_max: Duration::from_secs(60),
            max_attempts: knobs.max_attempts,
        },
        pace: crate::pace::PaceSettings {
            adaptive: knobs.adaptive,
            min_in_flight: 1,
            max_in_flight: knobs.max_in_flight as u32,
            rate_per_s: knobs.rate_per_s,
            burst: 0,
        },
        batch: knobs.batch,
        outputs: knobs.publishes.then(|| OutputRules {
            rules: Rules {
                allowed: vec!["out.>".into()],
                max_messages: 100,
                max_bytes: 1024 * 1024,
            },
            atomic: true,
        }),
        unhealthy_handover: Duration::from_secs(30),
        app_healthy,
        limits: crate::capacity::Limits {
            max_batch: 64,
            max_buffered: 256,
            max_bytes: 64 << 20,
        },
        confirmed_acks: false,
        routes: skip_routes(&knobs.routes),
        max_age: knobs.max_age,
        unwrap_cloudevents: false,
    };
    let (live_tx, live) = watch::channel(Arc::new(live));
    let marker_keys: Markings = Arc::default();
    let marker_writes: Arc<Mutex<Vec<usize>>> = Arc::default();
    let marker_failing: Arc<Mutex<u32>> = Arc::default();
    let marker_reads: Arc<Mutex<Vec<usize>>> = Arc::default();
    let markers = knobs.markers.clone().map(|(keys, failing)| {
        marker_keys.lock().unwrap().extend(keys);
        super::Marking::new(
            FakeMarkers {
                log: Arc::clone(&log),
                keys: Arc::clone(&marker_keys),
                failing: {
                    *marker_failing.lock().unwrap() = failing;
                    Arc::clone(&marker_failing)
                },
                writes: Arc::clone(&marker_writes),
                delay: MS,
                reads: Arc::clone(&marker_reads),
            },
            "marks".into(),
            crate::seam::markers::IdempotencyKey::MsgId,
            "d".into(),
            Duration::from_secs(30),
        )
    });
    let dispatch = Arc::new(Dispatch {
        live,
        markers,
        publisher: FakePublisher {
            log: Arc::clone(&log),
            letters: knobs.letters.unwrap_or_else(|| stored_after(MS)),
            outputs: knobs.outputs.unwrap_or_else(|| stored_after(MS)),
            tries: Mutex::default(),
            stored: Arc::clone(&stored),
        },
        metrics: metrics.clone(),
        readiness: readiness.clone(),
        budget: knobs
            .budget
            .clone()
            .unwrap_or_else(|| crate::admission::Budget::off().member("default", 1)),
        max_buffered: 256,
        pinned_mode: knobs.pinned,
        ordering: knobs.ordering,
        progress_every: knobs.progress_every,
        dead_letters: knobs.dead_letters.then(|| "dlq".to_string()),
        server_pause,
        deadline: Deadline::new(knobs.grace),
        letters_waiting_max: 4,
        tracer: knobs.tracer.clone(),
    });
    let (events, rx) = mpsc::unbounded_channel();
    let side: Arc<Mutex<SourceSide>> = Arc::default();
    let source = FakeSource {
        events: rx,
        side: Arc::clone(&side),
        pinned: knobs.pinned,
        log: Arc::clone(&log),
    };
    if knobs.pinned {
        events.send(Event::Pinned(true)).unwrap();
    }
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    let run = tokio::spawn(async move { dispatch.run(source, token).await });
    Rig {
        marker_keys,
        marker_writes,
        marker_failing,
        marker_reads,
        metrics,
        batches,
        events,
        log,
        stored,
        traceparents,
        side,
        seen,
        in_flight,
        healthy,
        pause,
        live: live_tx,
        readiness,
        shutdown,
        run,
    }
}

impl Rig {
    fn send(&self, seq: u64, subject: &str) {
        self.send_delivered(seq, subject, 1);
    }

    /// Sends a message on its `delivered`-th delivery.
    fn send_delivered(&self, seq: u64, subject: &str, delivered: u32) {
        self.send_full(seq, subject, delivered, Vec::new());
    }

    /// Sends a message with `headers`.
    fn send_full(&self, seq: u64, subject: &str, delivered: u32, headers: Vec<(String, String)>) {
        let settler = FakeSettler {
            seq,
            log: Arc::clone(&self.log),
        };
        let mut d = delivery(seq, subject);
        if let Ok(m) = &mut d.meta {
            m.delivered = delivered;
        }
        d.message.headers = headers;
        self.events
            .send(Event::Message(Box::new(d), settler))
            .unwrap();
    }

    /// What was told for `seq`, in order, without the keep-alives.
    fn settled(&self, seq: u64) -> Vec<Told> {
        self.told(seq)
            .into_iter()
            .filter(|t| *t != Told::Progress)
            .collect()
    }

    /// The input sequences of the stored outputs, in PubAck order.
    fn stored_inputs(&self) -> Vec<u64> {
        self.stored
            .lock()
            .unwrap()
            .iter()
            .map(|o| o.subject.trim_start_matches("out.").parse().unwrap())
            .collect()
    }

    fn told(&self, seq: u64) -> Vec<Told> {
        let log = self.log.lock().unwrap();
        log.iter()
            .filter(|(s, _, _)| *s == seq)
            .map(|(_, t, _)| t.clone())
            .collect()
    }

    fn told_at(&self, seq: u64, what: &Told) -> Vec<Instant> {
        let log = self.log.lock().unwrap();
        log.iter()
            .filter(|(s, t, _)| *s == seq && t == what)
            .map(|(_, _, at)| *at)
            .collect()
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// A reload: the app answers by `script` and `change` edits the rest.
    fn reload(&self, script: Script, change: impl FnOnce(&mut super::Live<FakeApp>)) {
        let old = Arc::clone(&self.live.borrow());
        let mut live = super::Live {
            forwarder: FakeApp {
                script,
                batch_script: None,
                publishes: old.forwarder.publishes,
                seen: Arc::clone(&self.seen),
                batches: Arc::clone(&self.batches),
                in_flight: Arc::clone(&self.in_flight),
                traceparents: Arc::clone(&self.traceparents),
            },
            policy: old.policy.clone(),
            pace: old.pace,
            batch: old.batch,
            outputs: old.outputs.clone(),
            unhealthy_handover: old.unhealthy_handover,
            app_healthy: old.app_healthy.clone(),
            limits: old.limits,
            confirmed_acks: old.confirmed_acks,
            routes: Vec::new(),
            max_age: old.max_age,
            unwrap_cloudevents: old.unwrap_cloudevents,
        };
        change(&mut live);
        self.live.send_replace(Arc::new(live));
    }

    async fn stop(self) -> Ended {
        self.shutdown.cancel();
        self.run.await.unwrap().unwrap()
    }
}

/// Lets virtual time run for `d` (every timer due in it fires, in order).
async fn wait(d: Duration) {
    tokio::time::sleep(d).await;
}

const MS: Duration = Duration::from_millis(1);
const S: Duration = Duration::from_secs(1);

fn ok_after(d: Duration) -> Script {
    Box::new(move |_, _, _| (status(200), d))
}

// === the tests ===

#[tokio::test(start_paused = true)]
async fn at_most_max_in_flight_requests_and_the_source_sees_what_is_held() {
    let r = rig(Knobs::in_flight(3), ok_after(100 * MS));
    for seq in 1..=10 {
        r.send(seq, "a");
    }
    wait(S).await;
    assert_eq!(r.seen().len(), 10);
    assert_eq!(
        r.in_flight.lock().unwrap().1,
        3,
        "at most max_in_flight at once"
    );
    for seq in 1..=10 {
        assert_eq!(r.told(seq), [Told::Ack]);
    }
    let held = r.side.lock().unwrap().held.clone();
    assert_eq!(held.iter().map(|h| h.messages).max(), Some(10));
    assert_eq!(
        held.last(),
        Some(&Held {
            messages: 0,
            bytes: 0
        }),
        "nothing held once all is settled"
    );
    assert_eq!(r.stop().await, Ended::Shutdown);
}

#[tokio::test(start_paused = true)]
async fn a_retry_in_place_keeps_its_lane_in_order_and_other_lanes_flow() {
    let r = rig(
        Knobs {
            ordering: Ordering::Subject,
            ..Knobs::default()
        },
        // a1 fails once; every answer takes 10 ms.
        Box::new(|seq, attempt, _| {
            let s = if seq == 1 && attempt == 1 { 503 } else { 200 };
            (status(s), 10 * MS)
        }),
    );
    r.send(1, "a");
    r.send(2, "a");
    r.send(3, "b");
    wait(5 * S).await;
    let seen = r.seen();
    let order: Vec<(u64, u32)> = seen.iter().map(|s| (s.seq, s.attempt)).collect();
    assert_eq!(order, [(1, 1), (3, 1), (1, 2), (2, 1)]);
    let a1_retry = seen.iter().find(|s| s.seq == 1 && s.attempt == 2).unwrap();
    assert!(
        a1_retry.start - seen[0].end >= S,
        "the retry waits its backoff"
    );
    let b1 = seen.iter().find(|s| s.seq == 3).unwrap();
    assert!(b1.start < a1_retry.start, "the other lane did not wait");
    let a2 = seen.iter().find(|s| s.seq == 2).unwrap();
    assert!(a2.start >= a1_retry.end, "a2 only after a1 succeeded");
    assert!(seen.iter().all(|s| s.subject == "a" || s.seq == 3));
    assert_eq!(r.told(1), [Told::Ack], "retried in place: never NAKed");
    r.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_slow_message_gets_keep_alives_until_it_is_settled_and_none_after() {
    let r = rig(
        Knobs {
            progress_every: 10 * S,
            ..Knobs::default()
        },
        ok_after(35 * S),
    );
    let start = Instant::now();
    r.send(1, "a");
    wait(60 * S).await;
    let at: Vec<Duration> = r
        .told_at(1, &Told::Progress)
        .iter()
        .map(|t| *t - start)
        .collect();
    assert_eq!(at, [10 * S, 20 * S, 30 * S]);
    assert_eq!(r.told_at(1, &Told::Ack).len(), 1);
    r.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_drain_finishes_in_flight_work_and_releases_what_waits() {
    let mut r = rig(Knobs::in_flight(1), ok_after(5 * S));
    for seq in 1..=3 {
        r.send(seq, "a");
    }
    wait(S).await;
    let stopped = Instant::now();
    r.shutdown.cancel();
    wait(MS).await;
    assert_eq!(r.readiness.status().state, State::Draining);
    assert_eq!(
        r.told(2),
        [Told::Nak(Duration::ZERO)],
        "queued: released at once"
    );
    assert_eq!(r.told(3), [Told::Nak(Duration::ZERO)]);
    assert!(
        r.told(1).is_empty(),
        "in flight: not settled before its answer"
    );
    assert_eq!((&mut r.run).await.unwrap().unwrap(), Ended::Shutdown);
    assert_eq!(r.told(1), [Told::Ack], "in flight: finished and acked");
    assert!(Instant::now() - stopped >= 4 * S);
    let side = r.side.lock().unwrap();
    assert!(side.stopped && side.closed);
}

/// A pinned instance's drain: once the work in flight is done, what waits goes back
/// in stream order on a frozen consumer, the pin is given up, and the last release
/// goes after the thaw (it is what makes the server serve the standby).
#[tokio::test(start_paused = true)]
async fn a_pinned_drain_releases_in_order_on_a_frozen_consumer_and_thaws_after_the_unpin() {
    let mut r = rig(
        Knobs {
            max_in_flight: 1,
            ordering: Ordering::Subject,
            pinned: true,
            ..Knobs::default()
        },
        ok_after(5 * S),
    );
    for seq in 1..=5 {
        r.send(seq, "a");
    }
    wait(S).await;
    assert!(r.readiness.status().pinned);
    r.shutdown.cancel();
    wait(MS).await;
    assert_eq!(
        r.told(2),
        [],
        "nothing goes back while the one in flight runs"
    );
    // Delivered by a pull sent before the stop: the newest, it goes back last.
    r.send(6, "a");
    assert_eq!((&mut r.run).await.unwrap().unwrap(), Ended::Shutdown);
    let log: Vec<(u64, Told)> = r
        .log
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, t, _)| *t != Told::Progress)
        .map(|(seq, t, _)| (*seq, t.clone()))
        .collect();
    let nak = Told::Nak(Duration::ZERO);
    assert_eq!(
        log,
        [
            (1, Told::Ack),
            (0, Told::Frozen),
            (2, nak.clone()),
            (3, nak.clone()),
            (4, nak.clone()),
            // Confirmed: the server takes acks apart from the unpin and the thaw, so
            // the pin moves once every release is back in its redelivery queue.
            (5, Told::NakConfirmed(Duration::ZERO)),
            (0, Told::SteppedDown),
            (0, Told::Thawed),
            (6, nak),
        ]
    );
}

/// A drain while a key's first message waits for its retry (1 s backoff): the key's
/// later messages go back no sooner than it, so that the next instance gets them
/// after it; another key's go back at once.
#[tokio::test(start_paused = true)]
async fn a_drain_releases_a_keys_later_messages_no_sooner_than_its_retry() {
    let mut r = rig(
        Knobs {
            ordering: Ordering::Subject,
            ..Knobs::default()
        },
        Box::new(|seq, _, _| (status(if seq == 1 { 503 } else { 200 }), 10 * MS)),
    );
    r.send(1, "a");
    r.send(2, "a");
    r.send(3, "a");
    wait(300 * MS).await;
    r.send(4, "b");
    r.send(5, "b");
    wait(50 * MS).await;
    // 4 and 5 were answered; a drain comes while 1 backs off for 660 ms more.
    r.shutdown.cancel();
    assert_eq!((&mut r.run).await.unwrap().unwrap(), Ended::Shutdown);
    let delay = |seq| match r.told(seq).as_slice() {
        [Told::Nak(d)] => *d,
        other => panic!("{seq}: {other:?}"),
    };
    let retry = delay(1);
    assert!(
        retry > 600 * MS && retry <= 660 * MS,
        "the rest of its backoff: {retry:?}"
    );
    assert_eq!(delay(2), retry, "behind it in its lane: no sooner");
    assert_eq!(delay(3), retry);
    assert_eq!(r.told(4), [Told::Ack]);
    assert_eq!(r.told(5), [Told::Ack]);
}

/// Not pinned (a plain durable, or a standby): nothing is frozen, everything waiting
/// is released at once.
#[tokio::test(start_paused = true)]
async fn a_drain_that_is_not_pinned_freezes_nothing() {
    let mut r = rig(
        Knobs {
            max_in_flight: 1,
            ordering: Ordering::Subject,
            ..Knobs::default()
        },
        ok_after(5 * S),
    );
    for seq in 1..=3 {
        r.send(seq, "a");
    }
    wait(S).await;
    r.shutdown.cancel();
    assert_eq!((&mut r.run).await.unwrap().unwrap(), Ended::Shutdown);
    let told: Vec<Told> = r
        .log
        .lock()
        .unwrap()
        .iter()
        .map(|(_, t, _)| t.clone())
        .collect();
    assert!(
        !told
            .iter()
            .any(|t| matches!(t, Told::Frozen | Told::Thawed | Told::SteppedDown)),
        "{told:?}"
    );
    assert_eq!(r.told(3), [Told::Nak(Duration::ZERO)]);
}

#[tokio::test(start_paused = true)]
async fn at_the_end_of_the_grace_unfinished_work_is_left_unsettled() {
    let mut r = rig(
        Knobs {
            grace: 10 * S,
            ..Knobs::default()
        },
        ok_after(100 * S),
    );
    r.send(1, "a");
    wait(S).await;
    let stopped = Instant::now();
    r.shutdown.cancel();
    assert_eq!((&mut r.run).await.unwrap().unwrap(), Ended::Shutdown);
    assert_eq!(Instant::now() - stopped, 10 * S);
    assert!(
        !r.told(1).contains(&Told::Ack),
        "never acked without an answer"
    );
}

#[tokio::test(start_paused = true)]
async fn a_quiesce_releases_what_waits_and_reports_back_after_the_in_flight_work() {
    let r = rig(Knobs::in_flight(1), ok_after(3 * S));
    for seq in 1..=3 {
        r.send(seq, "a");
    }
    wait(S).await;
    let asked = Instant::now();
    r.events.send(Event::Quiesce).unwrap();
    wait(MS).await;
    assert_eq!(r.told(2), [Told::Nak(Duration::ZERO)]);
    assert_eq!(r.told(3), [Told::Nak(Duration::ZERO)]);
    // A message delivered while quiescing is moved on too.
    r.send(4, "a");
    wait(5 * S).await;
    assert_eq!(r.told(4), [Told::Nak(Duration::ZERO)]);
    assert_eq!(r.told(1), [Told::Ack]);
    let quiesced = r.side.lock().unwrap().quiesced_at.clone();
    assert_eq!(quiesced.len(), 1);
    assert_eq!(
        quiesced[0] - asked,
        2 * S,
        "right after the in-flight one settled"
    );
    // Then work flows again.
    r.send(5, "a");
    wait(5 * S).await;
    assert_eq!(r.told(5), [Told::Ack]);
    r.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_unhealthy_app_gets_nothing_and_the_source_is_paused_until_it_is_healthy() {
    let r = rig(
        Knobs {
            healthy: false,
            ..Knobs::default()
        },
        ok_after(10 * MS),
    );
    r.send(1, "a");
    wait(20 * S).await;
    assert!(r.seen().is_empty(), "nothing starts while unhealthy");
    assert_eq!(r.readiness.status().state, State::NotReady);
    assert_eq!(r.side.lock().unwrap().paused.first(), Some(&true));
    assert_eq!(r.told(1), [Told::Progress], "held, kept alive");
    r.healthy.send(Health::Healthy).unwrap();
    wait(S).await;
    assert_eq!(r.told(1).last(), Some(&Told::Ack));
    assert_eq!(r.side.lock().unwrap().paused.last(), Some(&false));
    assert_eq!(r.readiness.status().state, State::Consuming);
    r.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_pause_on_the_server_starts_nothing_keeps_what_is_held_alive_and_resumes_in_order() {
    let r = rig(
        Knobs {
            ordering: Ordering::Subject,
            progress_every: 5 * S,
            ..Knobs::default()
        },
        ok_after(10 * MS),
    );
    // One in flight when the pause comes: it finishes and is acked.
    r.send(1, "a");
    wait(MS).await;
    let until = time::OffsetDateTime::now_utc() + time::Duration::hours(1);
    r.pause.send(ServerPause::Until(until)).unwrap();
    wait(MS).await;
    for seq in 2..=4 {
        r.send(seq, "a");
    }
    wait(20 * S).await;
    assert_eq!(r.told(1), [Told::Ack], "the request in flight finished");
    assert_eq!(r.seen().len(), 1, "nothing new started while paused");
    let status = r.readiness.status();
    assert_eq!((status.state, status.ready), (State::Paused, true));
    assert!(
        status.reason.starts_with("paused on the server until 20"),
        "{}",
        status.reason
    );
    assert!(
        r.side.lock().unwrap().paused.iter().all(|p| !p),
        "pulling goes on (the pin is kept)"
    );
    for seq in 2..=4 {
        assert!(
            r.told(seq).iter().filter(|t| **t == Told::Progress).count() >= 3,
            "held and kept alive: {:?}",
            r.told(seq)
        );
        assert!(!r.told(seq).contains(&Told::Nak(Duration::ZERO)));
    }
    r.pause.send(ServerPause::Running).unwrap();
    wait(S).await;
    assert_eq!(r.side.lock().unwrap().woken, 1, "the source is woken once");
    let order: Vec<u64> = r.seen().iter().map(|s| s.seq).collect();
    assert_eq!(order, [1, 2, 3, 4], "delivered in order after the resume");
    for seq in 2..=4 {
        assert_eq!(r.told(seq).last(), Some(&Told::Ack));
    }
    assert_eq!(r.readiness.status().state, State::Consuming);
    r.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_reload_lowers_the_limit_letting_the_excess_finish_and_changes_the_app_and_the_source() {
    let r = rig(Knobs::in_flight(4), ok_after(S));
    for seq in 1..=12 {
        r.send(seq, "a");
    }
    wait(10 * MS).await;
    assert_eq!(r.in_flight.lock().unwrap().0, 4);
    // The new config: one at a time, a slower app that fails with 503 once each.
    r.reload(
        Box::new(|_, attempt, _| (status(if attempt == 1 { 503 } else { 200 }), 2 * S)),
        |l| {
            l.pace.max_in_flight = 1;
            l.policy.retry_initial = 3 * S;
            l.limits.max_batch = 7;
        },
    );
    wait(500 * MS).await;
    assert_eq!(
        r.in_flight.lock().unwrap().0,
        4,
        "what runs is never cancelled by a reload"
    );
    wait(600 * MS).await;
    for seq in 1..=4 {
        assert_eq!(
            r.told(seq),
            [Told::Ack],
            "the first four finished as they started"
        );
    }
    wait(60 * S).await;
    let seen = r.seen();
    assert_eq!(r.in_flight.lock().unwrap().1, 4);
    // Each later message: a 503 from the new app, retried after the new delay.
    for seq in 5..=12 {
        assert_eq!(r.settled(seq), [Told::Nak(3 * S)], "seq {seq}");
    }
    let later: Vec<&Seen> = seen.iter().filter(|s| s.seq > 4).collect();
    assert_eq!(later.len(), 8);
    assert!(
        later.windows(2).all(|w| w[1].start >= w[0].end),
        "one at a time after the reload"
    );
    assert!(
        r.side.lock().unwrap().reconfigured.contains(&7),
        "the source pulls by the new sizes"
    );
    r.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_unreachable_app_is_probed_one_message_at_a_time_and_costs_no_attempt() {
    let t0 = Instant::now();
    let back = t0 + 30 * S;
    let r = rig(
        Knobs::default(),
        Box::new(move |_, _, now| {
            if now < back {
                (Outcome::Unreachable, MS)
            } else {
                (status(200), MS)
            }
        }),
    );
    for seq in 1..=5 {
        r.send(seq, "a");
    }
    wait(10 * S).await;
    let status_now = r.readiness.status();
    assert_eq!(
        (status_now.state, status_now.reason.as_str()),
        (State::NotReady, "app unreachable: connection refused")
    );
    assert_eq!(r.side.lock().unwrap().paused.last(), Some(&true));
    wait(40 * S).await;
    let seen = r.seen();
    assert!(seen.iter().all(|s| s.attempt == 1), "no attempt counted");
    // While unreachable, after the first refusals (all five at once): one probe at
    // a time.
    let probes: Vec<&Seen> = seen
        .iter()
        .filter(|s| s.start > t0 + 2 * MS && s.start < back)
        .collect();
    assert!(
        probes.len() >= 5,
        "probed again and again: {}",
        probes.len()
    );
    for pair in probes.windows(2) {
        assert!(pair[1].start >= pair[0].end, "probes do not overlap");
    }
    for seq in 1..=5 {
        let told = r.told(seq);
        assert_eq!(told.last(), Some(&Told::Ack), "{seq}: {told:?}");
        assert!(!told.contains(&Told::Term) && !told.iter().any(|t| matches!(t, Told::Nak(_))));
    }
    assert_eq!(r.readiness.status().state, State::Consuming);
    assert_eq!(r.side.lock().unwrap().paused.last(), Some(&false));
    r.stop().await;
}

#[test]
fn the_timers_hold_at_most_a_keep_alive_and_a_retry_per_held_message() {
    // A model run over the book: holds, retries, verdicts and settles in any order;
    // the timer set never outgrows what is held, and the count of letters waiting is
    // the count of held messages with a verdict.
    let mut runner = proptest::test_runner::TestRunner::default();
    let ops = proptest::collection::vec((0u8..4, 0u64..20), 1..300);
    runner
        .run(&ops, |ops| {
            let t0 = Instant::now();
            let mut book: Book<()> = Book::new();
            let mut ids: HashMap<u64, u64> = HashMap::new();
            for (i, (op, key)) in ops.into_iter().enumerate() {
                let at = t0 + Duration::from_millis(i as u64);
                match op {
                    0 => {
                        if let Some(id) =
                            book.hold(delivery(key + 1, "a"), (), LaneKey::Free, at, None)
                        {
                            ids.insert(key, id);
                        }
                    }
                    1 => {
                        if let Some(id) = ids.get(&key) {
                            book.retry_at(*id, at);
                        }
                    }
                    2 => {
                        if let Some(id) = ids.get(&key) {
                            book.keep_for_letter(*id, verdict());
                        }
                    }
                    _ => {
                        if let Some(id) = ids.remove(&key) {
                            book.take(id);
                        }
                    }
                }
                proptest::prop_assert!(book.timer_entries() <= 2 * book.held.len());
                let with_verdict = book.held.values().filter(|e| e.verdict.is_some());
                proptest::prop_assert_eq!(book.letters_waiting(), with_verdict.count());
            }
            for (_, id) in ids {
                book.take(id);
            }
            proptest::prop_assert_eq!(book.timer_entries(), 0);
            proptest::prop_assert_eq!(book.letters_waiting(), 0);
            proptest::prop_assert_eq!(book.held(), Held::default());
            Ok(())
        })
        .unwrap();
}

fn verdict() -> crate::dispatch::book::Verdict {
    crate::dispatch::book::Verdict {
        reason: crate::policy::TermReason::Status(400),
        status: Some(400),
        attempts: 1,
        tries: 0,
    }
}

// === batch delivery ===

fn batching(size: usize, max_bytes: u64, wait: Duration) -> Option<crate::dispatch::Batching> {
    Some(crate::dispatch::Batching {
        size,
        max_bytes,
        wait,
    })
}

fn all_acked() -> BatchScript {
    Box::new(|_| (status(200), Some(Answer::AllAcked), 10 * MS))
}

impl Rig {
    fn batches(&self) -> Vec<Vec<u64>> {
        self.batches.lock().unwrap().clone()
    }

    fn send_sized(&self, seq: u64, subject: &str, bytes: usize) {
        let settler = FakeSettler {
            seq,
            log: Arc::clone(&self.log),
        };
        let mut d = delivery(seq, subject);
        d.message.payload = Bytes::from(vec![b'x'; bytes]);
        self.events
            .send(Event::Message(Box::new(d), settler))
            .unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn batches_take_what_is_ready_up_to_their_size_and_bytes() {
    let r = batch_rig(
        Knobs {
            max_in_flight: 1,
            batch: batching(4, 100, Duration::ZERO),
            ..Knobs::default()
        },
        all_acked(),
    );
    // 30 bytes each: three fit in 100, a fourth does not; 150 bytes goes alone.
    for seq in 1..=5 {
        r.send_sized(seq, "a", 30);
    }
    r.send_sized(6, "a", 150);
    r.send_sized(7, "a", 30);
    wait(S).await;
    assert_eq!(r.batches(), [vec![1, 2, 3], vec![4, 5], vec![6], vec![7]]);
    for seq in 1..=7 {
        assert_eq!(r.told(seq), [Told::Ack], "{seq}");
    }
    r.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_partial_batch_waits_at_most_batch_wait_and_not_at_all_without_it() {
    let r = batch_rig(
        Knobs {
            batch: batching(10, 1 << 20, 20 * MS),
            ..Knobs::default()
        },
        all_acked(),
    );
    let t0 = Instant::now();
    r.send(1, "a");
    r.send(2, "a");
    wait(10 * MS).await;
    r.send(3, "a");
    wait(S).await;
    assert_eq!(r.batches(), [vec![1, 2, 3]], "one batch, after the wait");
    let sent = r.seen()[0].start - t0;
    assert!(sent >= 20 * MS && sent < 30 * MS, "{sent:?}");
    r.stop().await;

    let r = batch_rig(
        Knobs {
            batch: batching(10, 1 << 20, Duration::ZERO),
            ..Knobs::default()
        },
        all_acked(),
    );
    let t0 = Instant::now();
    r.send(1, "a");
    wait(S).await;
    assert_eq!(r.seen()[0].start, t0, "no wait: sent at once");
    r.stop().await;
}

/// A batch app that asks for seq 1 to be retried the first time it carries it, and
/// acks everything else.
fn retry_seq_1_once() -> BatchScript {
    Box::new(|carried| {
        let answer = if carried[0] == (1, 1) {
            Answer::Results(vec![ItemResult {
                id: "S:1".into(),
                action: crate::policy::AppAction::Retry,
                retry_after: None,
                outputs: None,
            }])
        } else {
            Answer::AllAcked
        };
        (status(200), Some(answer), 10 * MS)
    })
}

#[tokio::test(start_paused = true)]
async fn a_key_retried_in_a_batch_holds_back_its_later_messages_which_come_again_after_it() {
    let r = batch_rig(
        Knobs {
            ordering: Ordering::Subject,
            max_in_flight: 1,
            batch: batching(10, 1 << 20, Duration::ZERO),
            ..Knobs::default()
        },
        // The first time: seq 1 (key a) is retried, the rest (2, 3 of a; 4 of b)
        // would be acked; after that, everything is acked.
        retry_seq_1_once(),
    );
    r.send(1, "a");
    r.send(2, "a");
    r.send(3, "a");
    r.send(4, "b");
    wait(5 * S).await;
    assert_eq!(r.batches(), [vec![1, 2, 3, 4], vec![1], vec![2, 3]]);
    assert_eq!(r.told(4), [Told::Ack], "the other key flows");
    assert_eq!(r.told(1), [Told::Ack], "retried in place, then acked");
    let acked_at = |seq| r.told_at(seq, &Told::Ack)[0];
    assert!(acked_at(1) < acked_at(2) && acked_at(2) <= acked_at(3));
    let attempts: Vec<(u64, u32)> = r.seen().iter().map(|s| (s.seq, s.attempt)).collect();
    assert!(
        attempts.contains(&(1, 2)),
        "the retry is an attempt: {attempts:?}"
    );
    assert_eq!(
        attempts.iter().filter(|(s, _)| *s == 2).collect::<Vec<_>>(),
        [&(2, 1), &(2, 1)],
        "held back, not failed: no attempt counted"
    );
    r.stop().await;
}

#[tokio::test(start_paused = true)]
async fn under_header_ordering_a_batch_holds_back_a_keys_later_messages_whatever_their_subjects() {
    let r = batch_rig(
        Knobs {
            ordering: Ordering::parse("header:X-Key").unwrap(),
            max_in_flight: 1,
            batch: batching(10, 1 << 20, Duration::ZERO),
            ..Knobs::default()
        },
        // The first time: seq 1 (key a) is retried, the rest would be acked.
        retry_seq_1_once(),
    );
    // Key a on three subjects (the header's name in any case), key b on a's subject.
    let key = |name: &str, v: &str| vec![(name.to_string(), v.to_string())];
    r.send_full(1, "s.1", 1, key("X-Key", "a"));
    r.send_full(2, "s.2", 1, key("x-key", "a"));
    r.send_full(3, "s.3", 1, key("X-KEY", "a"));
    r.send_full(4, "s.1", 1, key("X-Key", "b"));
    wait(5 * S).await;
    assert_eq!(r.batches(), [vec![1, 2, 3, 4], vec![1], vec![2, 3]]);
    assert_eq!(r.told(4), [Told::Ack], "the other key flows");
    let acked_at = |seq| r.told_at(seq, &Told::Ack)[0];
    assert!(acked_at(1) < acked_at(2) && acked_at(2) <= acked_at(3));
    r.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_failed_batch_gives_every_message_what_it_would_get_alone() {
    let r = batch_rig(
        Knobs {
            batch: batching(10, 1 << 20, Duration::ZERO),
            ..Knobs::default()
        },
        Box::new(|carried| {
            if carried[0].1 == 1 {
                (status(503), None, MS)
            } else {
                (status(200), Some(Answer::Unparsable("x".into())), MS)
            }
        }),
    );
    r.send(1, "a");
    r.send(2, "a");
    wait(10 * MS).await;
    // Unordered: each NAKed with its own backoff (the first retry delay).
    assert_eq!(r.told(1), [Told::Nak(S)]);
    assert_eq!(r.told(2), [Told::Nak(S)]);
    r.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_drain_settles_a_batch_in_flight_like_a_single_request() {
    let mut r = batch_rig(
        Knobs {
            max_in_flight: 1,
            batch: batching(2, 1 << 20, Duration::ZERO),
            ..Knobs::default()
        },
        Box::new(|_| (status(200), Some(Answer::AllAcked), 3 * S)),
    );
    for seq in 1..=3 {
        r.send(seq, "a");
    }
    wait(S).await;
    r.shutdown.cancel();
    wait(MS).await;
    assert_eq!(r.told(3), [Told::Nak(Duration::ZERO)], "queued: released");
    assert!(
        r.told(1).is_empty() && r.told(2).is_empty(),
        "in flight: waiting"
    );
    assert_eq!((&mut r.run).await.unwrap().unwrap(), Ended::Shutdown);
    assert_eq!(r.told(1), [Told::Ack]);
    assert_eq!(r.told(2), [Told::Ack]);
}

// === the publish seam: dead letters and outputs ===

/// The app refuses every message for good (a 4xx).
fn refuses() -> Script {
    Box::new(|_, _, _| (status(400), MS))
}

#[tokio::test(start_paused = true)]
async fn a_dead_letters_pubacks_comes_before_the_term() {
    let r = rig(
        Knobs {
            dead_letters: true,
            letters: Some(stored_after(50 * MS)),
            ..Knobs::default()
        },
        refuses(),
    );
    r.send(1, "a");
    wait(S).await;
    assert_eq!(r.settled(1), [Told::Letter, Told::Term]);
    let letter = r.told_at(1, &Told::Letter)[0];
    let term = r.told_at(1, &Told::Term)[0];
    assert!(letter <= term, "the TERM waited for the PubAck");
    r.stop().await;

    // Without a DLQ: terminated at once, no letter.
    let r = rig(Knobs::default(), refuses());
    r.send(1, "a");
    wait(S).await;
    assert_eq!(r.settled(1), [Told::Term]);
    r.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_dead_letter_that_fails_before_the_last_delivery_naks_the_message_instead() {
    let r = rig(
        Knobs {
            dead_letters: true,
            letters: Some(Box::new(|_, _| (Err(FakeFailure::Transient), MS))),
            ..Knobs::default()
        },
        refuses(),
    );
    r.send(1, "a");
    wait(S).await;
    // Not terminated: JetStream redelivers it, and the letter is tried again then.
    assert_eq!(r.settled(1), [Told::LetterFailed, Told::Nak(S)]);
    r.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_dead_letter_that_fails_on_the_last_delivery_keeps_the_message_and_is_tried_again() {
    let r = rig(
        Knobs {
            dead_letters: true,
            // Stored on the third try.
            letters: Some(Box::new(|_, n| {
                (
                    if n < 3 {
                        Err(FakeFailure::Transient)
                    } else {
                        Ok(())
                    },
                    MS,
                )
            })),
            progress_every: 5 * S,
            ..Knobs::default()
        },
        refuses(),
    );
    // The fifth delivery of five: a NAK would never come back.
    r.send_delivered(1, "a", 5);
    wait(60 * S).await;
    assert_eq!(
        r.settled(1),
        [
            Told::LetterFailed,
            Told::LetterFailed,
            Told::Letter,
            Told::Term
        ],
        "kept (no NAK, no TERM) until the letter was stored"
    );
    assert_eq!(
        r.seen().len(),
        1,
        "the app was asked once: only the letter is retried"
    );
    // Kept alive while it waited (the backoff is 1 s, then 2 s).
    let term = r.told_at(1, &Told::Term)[0];
    assert!(
        r.told_at(1, &Told::Progress).iter().all(|p| *p < term),
        "no keep-alive after the TERM"
    );
    r.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_letter_the_dlq_refuses_for_its_size_sheds_and_goes_again_at_once() {
    let r = rig(
        Knobs {
            dead_letters: true,
            letters: Some(Box::new(|_, n| {
                (
                    if n == 1 {
                        Err(FakeFailure::TooLarge)
                    } else {
                        Ok(())
                    },
                    MS,
                )
            })),
            ..Knobs::default()
        },
        refuses(),
    );
    r.send(1, "a");
    wait(S).await;
    assert_eq!(r.settled(1), [Told::LetterFailed, Told::Letter, Told::Term]);
    r.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_outputs_pubacks_come_before_the_inputs_confirmed_ack() {
    let r = rig(
        Knobs {
            publishes: true,
            outputs: Some(stored_after(50 * MS)),
            ..Knobs::default()
        },
        ok_after(MS),
    );
    r.send(1, "a");
    wait(S).await;
    assert_eq!(r.settled(1), [Told::Published, Told::AckConfirmed]);
    let published = r.told_at(1, &Told::Published)[0];
    let acked = r.told_at(1, &Told::AckConfirmed)[0];
    assert!(published <= acked, "the ack waited for the PubAck");
    assert_eq!(r.stored_inputs(), [1]);
    let stored = r.stored.lock().unwrap().clone();
    let id = stored[0]
        .headers
        .iter()
        .find(|(n, _)| n == crate::outputs::MSG_ID)
        .map(|(_, v)| v.clone());
    assert_eq!(
        id.as_deref(),
        Some("jetrelay:S:c:1:0"),
        "the id names the input"
    );
    r.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_failed_output_publish_retries_the_input_and_acks_it_once_stored() {
    for ordering in [Ordering::None, Ordering::Subject] {
        let r = rig(
            Knobs {
                publishes: true,
                ordering,
                outputs: Some(Box::new(|_, n| {
                    (
                        if n == 1 {
                            Err(FakeFailure::Transient)
                        } else {
                            Ok(())
                        },
                        MS,
                    )
                })),
                ..Knobs::default()
            },
            ok_after(MS),
        );
        r.send(1, "a");
        wait(5 * S).await;
        match ordering {
            // Unordered: a delayed NAK; JetStream redelivers (not in this fake).
            Ordering::None => assert_eq!(r.settled(1), [Told::PublishFailed, Told::Nak(S)]),
            // Ordered: retried in its lane, asked again, stored, then acked.
            _ => {
                assert_eq!(
                    r.settled(1),
                    [Told::PublishFailed, Told::Published, Told::AckConfirmed]
                );
                assert_eq!(r.seen().len(), 2, "the app was asked again");
            }
        }
        r.stop().await;
    }
}

#[tokio::test(start_paused = true)]
async fn outputs_that_can_never_be_stored_fail_the_input_for_good() {
    let r = rig(
        Knobs {
            publishes: true,
            dead_letters: true,
            outputs: Some(Box::new(|_, _| (Err(FakeFailure::TooLarge), MS))),
            ..Knobs::default()
        },
        ok_after(MS),
    );
    r.send(1, "a");
    wait(S).await;
    assert_eq!(
        r.settled(1),
        [Told::PublishFailed, Told::Letter, Told::Term],
        "dead-lettered, never acked"
    );
    r.stop().await;
}

#[tokio::test(start_paused = true)]
async fn ordered_modes_commit_a_keys_outputs_in_input_order() {
    // Earlier inputs take longer to store: only the order kept by the dispatcher can
    // make a key's outputs arrive in input order.
    let slower_first: fn() -> PublishScript =
        || Box::new(|seq, _| (Ok(()), Duration::from_millis(100 - seq * 10)));
    // One message a request: a lane runs one at a time.
    let r = rig(
        Knobs {
            publishes: true,
            ordering: Ordering::Subject,
            max_in_flight: 4,
            outputs: Some(slower_first()),
            ..Knobs::default()
        },
        ok_after(MS),
    );
    for seq in 1..=4 {
        r.send(seq, "a");
    }
    wait(S).await;
    assert_eq!(r.stored_inputs(), [1, 2, 3, 4]);
    r.stop().await;

    // In a batch: a key's commits in batch order, the keys at once.
    let r = batch_rig(
        Knobs {
            publishes: true,
            ordering: Ordering::Subject,
            batch: batching(10, 1 << 20, Duration::ZERO),
            outputs: Some(slower_first()),
            ..Knobs::default()
        },
        Box::new(|carried| {
            let results = carried
                .iter()
                .map(|(seq, _)| ItemResult {
                    id: format!("S:{seq}"),
                    action: crate::policy::AppAction::Ack,
                    retry_after: None,
                    outputs: Some(Ok(vec![output_of(*seq)])),
                })
                .collect();
            (status(200), Some(Answer::Results(results)), MS)
        }),
    );
    for (seq, key) in [(1, "a"), (2, "b"), (3, "a"), (4, "b"), (5, "a")] {
        r.send(seq, key);
    }
    wait(S).await;
    let order = r.stored_inputs();
    let of =
        |keys: &[u64]| -> Vec<u64> { order.iter().copied().filter(|s| keys.contains(s)).collect() };
    assert_eq!(of(&[1, 3, 5]), [1, 3, 5], "key a in input order: {order:?}");
    assert_eq!(of(&[2, 4]), [2, 4], "key b in input order: {order:?}");
    assert_ne!(
        order,
        [1, 2, 3, 4, 5],
        "the keys committed at once, not one after the other"
    );
    for seq in 1..=5 {
        assert_eq!(
            r.settled(seq),
            [Told::Published, Told::AckConfirmed],
            "{seq}"
        );
    }
    r.stop().await;

    // A key whose commit failed commits nothing after it in that batch.
    let r = batch_rig(
        Knobs {
            publishes: true,
            ordering: Ordering::Subject,
            max_in_flight: 1,
            batch: batching(10, 1 << 20, Duration::ZERO),
            outputs: Some(Box::new(|seq, n| {
                (
                    if seq == 1 && n == 1 {
                        Err(FakeFailure::Transient)
                    } else {
                        Ok(())
                    },
                    MS,
                )
            })),
            ..Knobs::default()
        },
        Box::new(|carried| {
            let results = carried
                .iter()
                .map(|(seq, _)| ItemResult {
                    id: format!("S:{seq}"),
                    action: crate::policy::AppAction::Ack,
                    retry_after: None,
                    outputs: Some(Ok(vec![output_of(*seq)])),
                })
                .collect();
            (status(200), Some(Answer::Results(results)), MS)
        }),
    );
    r.send(1, "a");
    r.send(2, "a");
    wait(10 * S).await;
    assert_eq!(r.stored_inputs(), [1, 2], "2 was not stored before 1");
    let again: Vec<u64> = r.batches().into_iter().skip(1).flatten().collect();
    assert_eq!(again, [1, 2], "both came again, in order");
    r.stop().await;
}

// --- tracing ---

const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

fn span_id_of(traceparent: &str) -> &str {
    traceparent.split('-').nth(2).unwrap()
}

/// Whether a `traceparent`'s flags have the sampled bit.
fn sampled(traceparent: &str) -> bool {
    let flags = traceparent.rsplit('-').next().unwrap();
    u8::from_str_radix(flags, 16).unwrap() & 1 == 1
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[tokio::test(start_paused = true)]
async fn with_export_on_each_attempt_is_a_client_span_under_the_delivery_and_the_outputs_continue_it()
 {
    let (tracer, _) = crate::ops::traces::tests::tracer(0.0);
    let r = rig(
        Knobs {
            publishes: true,
            // Retries in place: both attempts belong to one delivery.
            ordering: Ordering::Subject,
            tracer: tracer.clone(),
            ..Knobs::default()
        },
        Box::new(|_, attempt, _| (status(if attempt == 1 { 503 } else { 200 }), MS)),
    );
    let headers = vec![
        ("traceparent".to_string(), PARENT.to_string()),
        ("tracestate".to_string(), "vendor=opaque".to_string()),
    ];
    r.send_full(1, "a", 1, headers);
    wait(5 * S).await;
    assert_eq!(r.settled(1), [Told::Published, Told::AckConfirmed]);
    let spans = tracer.take_queued();
    let of = |k: crate::trace::span::SpanKind| spans.iter().filter(move |s| s.kind == k);
    let consumer: Vec<_> = of(crate::trace::span::SpanKind::Consumer).collect();
    let clients: Vec<_> = of(crate::trace::span::SpanKind::Client).collect();
    let producers: Vec<_> = of(crate::trace::span::SpanKind::Producer).collect();
    assert_eq!((consumer.len(), clients.len(), producers.len()), (1, 2, 1));
    let c = consumer[0];
    assert_eq!(hex(&c.context.trace_id), "0af7651916cd43dd8448eb211c80319c");
    assert_eq!(
        c.parent.map(|p| hex(&p)).as_deref(),
        Some("b7ad6b7169203331")
    );
    assert!(c.parent_remote, "the parent is the publisher's");
    assert_eq!(&*c.name, "process a");
    assert!(c.attributes.contains(&("jetrelay.outcome", "ack".into())));
    for client in &clients {
        assert_eq!(
            client.parent,
            Some(c.context.span_id),
            "each attempt under the delivery"
        );
        assert_eq!(client.context.tracestate.as_deref(), Some("vendor=opaque"));
    }
    assert!(clients[0].error.is_some(), "the 503 is an error status");
    assert!(clients[1].error.is_none());
    // The app got each attempt's own span, in the publisher's trace.
    let sent: Vec<String> = r
        .traceparents
        .lock()
        .unwrap()
        .iter()
        .flatten()
        .cloned()
        .collect();
    assert_eq!(sent.len(), 2);
    for (tp, client) in sent.iter().zip(&clients) {
        assert!(
            tp.starts_with("00-0af7651916cd43dd8448eb211c80319c-"),
            "{tp}"
        );
        assert!(sampled(tp), "sampled: {tp}");
        assert_eq!(span_id_of(tp), hex(&client.context.span_id));
    }
    // The output carries the PRODUCER span's context, a child of the delivery.
    let p = producers[0];
    assert_eq!(p.parent, Some(c.context.span_id));
    let stored = r.stored.lock().unwrap().clone();
    let tp = stored[0]
        .headers
        .iter()
        .find(|(n, _)| n == "traceparent")
        .map(|(_, v)| v.clone());
    assert_eq!(
        tp.as_deref().map(span_id_of),
        Some(hex(&p.context.span_id).as_str())
    );
    r.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_unsampled_parent_exports_nothing_and_a_message_without_one_is_a_root_by_ratio() {
    for ratio in [0.0, 1.0] {
        let (tracer, _) = crate::ops::traces::tests::tracer(ratio);
        let r = rig(
            Knobs {
                tracer: tracer.clone(),
                ..Knobs::default()
            },
            ok_after(MS),
        );
        let unsampled = PARENT.replace("-01", "-00");
        r.send_full(1, "a", 1, vec![("traceparent".into(), unsampled.clone())]);
        r.send(2, "b");
        wait(S).await;
        let sent: Vec<Option<String>> = r.traceparents.lock().unwrap().clone();
        let to_1 = sent
            .iter()
            .flatten()
            .find(|t| t.contains("0af7651916cd43dd"))
            .unwrap();
        assert!(!sampled(to_1), "unsampled stays unsampled: {to_1}");
        let spans = tracer.take_queued();
        assert!(
            spans
                .iter()
                .all(|s| hex(&s.context.trace_id) != "0af7651916cd43dd8448eb211c80319c"),
            "nothing of an unsampled trace is exported"
        );
        // The message without a context: a root, exported only when the ratio says so.
        let to_2 = sent
            .iter()
            .flatten()
            .find(|t| !t.contains("0af7651916cd43dd"))
            .unwrap();
        assert_eq!(sampled(to_2), ratio == 1.0, "{to_2}");
        let roots = spans.iter().filter(|s| s.parent.is_none()).count();
        assert_eq!(roots, if ratio == 1.0 { 1 } else { 0 });
        r.stop().await;
    }
}

#[tokio::test(start_paused = true)]
async fn with_export_off_the_trace_headers_pass_unchanged() {
    let r = rig(Knobs::default(), ok_after(MS));
    r.send_full(1, "a", 1, vec![("traceparent".into(), PARENT.into())]);
    wait(S).await;
    assert_eq!(
        *r.traceparents.lock().unwrap(),
        [None],
        "no replacement: the message's own passes"
    );
    r.stop().await;
}

// --- pacing ---

/// An app of `workers` (changeable) that each take `service`, first come first
/// served, answering 503 at once when `queue` requests already wait: the fake's
/// answer delay is when its worker finishes.
fn workers_app(
    workers: Arc<std::sync::atomic::AtomicUsize>,
    service: Duration,
    queue: usize,
) -> Script {
    let free: Arc<Mutex<Vec<Instant>>> = Arc::default();
    Box::new(move |_, _, now| {
        let w = workers.load(std::sync::atomic::Ordering::SeqCst);
        let mut free = free.lock().unwrap();
        free.resize(w, now);
        free.sort();
        let per = service.as_nanos();
        let jobs: u128 = free
            .iter()
            .map(|&at| at.saturating_duration_since(now).as_nanos().div_ceil(per))
            .sum();
        let busy = free.iter().filter(|&&at| at > now).count() as u128;
        if free[0] > now && jobs - busy >= queue as u128 {
            return (status(503), Duration::from_micros(100));
        }
        let start = free[0].max(now);
        free[0] = start + service;
        (status(200), free[0] - now)
    })
}

#[tokio::test(start_paused = true)]
async fn the_adaptive_limit_finds_the_apps_workers_and_follows_them_down() {
    let workers = Arc::new(std::sync::atomic::AtomicUsize::new(8));
    let r = rig(
        Knobs {
            max_in_flight: 64,
            adaptive: true,
            ..Knobs::default()
        },
        workers_app(Arc::clone(&workers), 10 * MS, 24),
    );
    // Enough for 15 s at 800 a second, then 400.
    for seq in 1..=12_000 {
        r.send(seq, "a");
    }
    wait(10 * S).await;
    let limit = r.readiness.status().concurrency_limit;
    // Near the 8 workers: at least them, and less than one queued request each (a
    // mean latency under the floor plus the 3 ms slack puts the limit near 12.5).
    assert!(
        (7..=13).contains(&limit),
        "settled near the 8 workers: {limit}"
    );
    workers.store(4, std::sync::atomic::Ordering::SeqCst);
    wait(5 * S).await;
    let limit = r.readiness.status().concurrency_limit;
    assert!((3..=7).contains(&limit), "followed the 4 workers: {limit}");
    wait(30 * S).await;
    let seen = r.seen();
    let refused = r
        .log
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, t, _)| matches!(t, Told::Nak(_)))
        .count();
    assert!(
        refused * 100 <= seen.len(),
        "503s stay rare: {refused} of {} requests",
        seen.len()
    );
    for seq in 1..=12_000 {
        assert!(r.settled(seq).contains(&Told::Ack), "{seq} delivered");
    }
    r.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_adaptive_limit_keeps_each_keys_order_under_subject_ordering() {
    let workers = Arc::new(std::sync::atomic::AtomicUsize::new(8));
    let r = rig(
        Knobs {
            max_in_flight: 64,
            adaptive: true,
            ordering: Ordering::Subject,
            ..Knobs::default()
        },
        workers_app(workers, 10 * MS, 24),
    );
    // 4 keys, fewer than the workers: without lanes the limit would grow past them
    // and a key's messages would overlap.
    for seq in 1..=2_000 {
        r.send(seq, &format!("k{}", seq % 4));
    }
    wait(10 * S).await;
    let limit = r.readiness.status().concurrency_limit;
    assert!((1..=64).contains(&limit), "within its bounds: {limit}");
    // One request of a key at a time, in stream order.
    let mut seen = r.seen();
    seen.sort_by_key(|s| s.start);
    let mut last: HashMap<String, (u64, Instant)> = HashMap::new();
    for s in &seen {
        if let Some((seq, end)) = last.insert(s.subject.clone(), (s.seq, s.end)) {
            assert!(
                seq <= s.seq && end <= s.start,
                "{}: {} ran beside or before {seq}",
                s.subject,
                s.seq
            );
        }
    }
    assert_eq!(seen.len(), 2_000, "no 503s: at most 4 requests at once");
    for seq in 1..=2_000 {
        assert_eq!(r.settled(seq), [Told::Ack], "{seq} delivered once");
    }
    r.stop().await;
}

#[tokio::test(start_paused = true)]
async fn in_batch_delivery_the_adaptive_limit_counts_requests() {
    // An app of 2 workers, 10 ms a request whatever it carries, 503 beyond a queue
    // of 4 requests.
    let app = workers_app(Arc::new(std::sync::atomic::AtomicUsize::new(2)), 10 * MS, 4);
    let r = batch_rig(
        Knobs {
            max_in_flight: 64,
            adaptive: true,
            batch: batching(4, 1 << 20, Duration::ZERO),
            ..Knobs::default()
        },
        Box::new(move |_| {
            let (outcome, after) = app(0, 1, Instant::now());
            let answer = matches!(outcome, Outcome::Answered { status: 200, .. })
                .then_some(Answer::AllAcked);
            (outcome, answer, after)
        }),
    );
    for seq in 1..=2_000 {
        r.send(seq, "a");
    }
    wait(5 * S).await;
    // Near the 2 workers in requests: counted in messages (four a request) it would
    // hold 8 or more and the app's queue would overflow.
    let limit = r.readiness.status().concurrency_limit;
    assert!((2..=4).contains(&limit), "near the 2 workers: {limit}");
    wait(10 * S).await;
    let batches = r.batches();
    let full = batches.iter().filter(|b| b.len() == 4).count();
    assert!(
        full * 10 >= batches.len() * 9,
        "batches stay full: {full} of {}",
        batches.len()
    );
    let refused = batches.len() - 500;
    assert!(refused * 100 <= batches.len(), "503s stay rare: {refused}");
    for seq in 1..=2_000 {
        assert!(r.settled(seq).contains(&Told::Ack), "{seq} delivered");
    }
    r.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_fixed_limit_floods_the_same_app_with_503s() {
    // The oracle beside the test above: what adaptive saves the app from.
    let workers = Arc::new(std::sync::atomic::AtomicUsize::new(8));
    let r = rig(Knobs::in_flight(64), workers_app(workers, 10 * MS, 24));
    for seq in 1..=500 {
        r.send(seq, "a");
    }
    wait(S).await;
    let refused = r
        .log
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, t, _)| matches!(t, Told::Nak(_)))
        .count();
    assert!(
        refused >= 30,
        "64 in flight against 8 workers and a queue of 24: {refused}"
    );
    r.stop().await;
}

/// jetrelay's default `retry_statuses`.
const RETRIED: &[&str] = &["408", "409", "425", "429", "5xx", "404"];

/// 200 messages a second offered for 30 s to an app that takes 40 ms and has room
/// for all of them, but answers `status` (in 2 ms) to every `every`-th message: the
/// other messages acked by the end.
async fn good_delivered(adaptive: bool, code: u16, every: u64) -> usize {
    let r = rig(
        Knobs {
            max_in_flight: 32,
            adaptive,
            retry: RETRIED,
            ..Knobs::default()
        },
        Box::new(move |seq, _, _| {
            if seq % every == 0 {
                (status(code), 2 * MS)
            } else {
                (status(200), 40 * MS)
            }
        }),
    );
    let sent = 6_000;
    for seq in 1..=sent {
        r.send(seq, "a");
        wait(5 * MS).await;
    }
    let good = (1..=sent)
        .filter(|seq| seq % every != 0 && r.settled(*seq).contains(&Told::Ack))
        .count();
    r.stop().await;
    good
}

#[tokio::test(start_paused = true)]
async fn a_few_rejected_messages_do_not_hold_the_adaptive_limit_down() {
    // 404s and 500s are retry statuses here (as by default): they were taken for
    // overload, and the limit sat at 1 (25 of the 200 messages a second).
    for (code, every) in [(404, 100), (404, 33), (500, 100), (500, 33)] {
        let fixed = good_delivered(false, code, every).await;
        let adaptive = good_delivered(true, code, every).await;
        assert!(
            adaptive * 10 >= fixed * 9,
            "{code} to 1 in {every}: adaptive delivered {adaptive}, fixed {fixed}"
        );
    }
}

/// 200 messages a second offered for 120 s to an app that takes 40 ms and has room
/// for all of them, but answers 500 (in 2 ms) on every attempt to every 33rd message
/// (3 %, poison), each NAKed delivery redelivered 1 s later, its count one up (as
/// JetStream does under `retry_max_ms = 1000` and a `max_deliver` of 1000): the good
/// messages acked by the end, and the limit then.
async fn good_beside_poison(adaptive: bool) -> (usize, usize) {
    let r = rig(
        Knobs {
            max_in_flight: 32,
            adaptive,
            retry: RETRIED,
            max_attempts: Some(1000),
            ..Knobs::default()
        },
        Box::new(move |seq, _, _| {
            if seq % 33 == 0 {
                (status(500), 2 * MS)
            } else {
                (status(200), 40 * MS)
            }
        }),
    );
    let sent = 24_000;
    let mut read = 0;
    let mut deliveries: HashMap<u64, u32> = HashMap::new();
    let mut due = std::collections::VecDeque::new();
    for seq in 1..=sent {
        r.send(seq, "a");
        wait(5 * MS).await;
        {
            let log = r.log.lock().unwrap();
            for (s, told, at) in &log[read..] {
                if matches!(told, Told::Nak(_)) {
                    due.push_back((*at + S, *s));
                }
            }
            read = log.len();
        }
        let now = Instant::now();
        while let Some(&(at, s)) = due.front()
            && at <= now
        {
            due.pop_front();
            let n = deliveries.entry(s).or_insert(1);
            *n += 1;
            r.send_delivered(s, "a", *n);
        }
    }
    let good = {
        let log = r.log.lock().unwrap();
        log.iter()
            .filter(|(s, t, _)| s % 33 != 0 && *t == Told::Ack)
            .count()
    };
    let limit = r.readiness.status().concurrency_limit;
    r.stop().await;
    (good, limit)
}

#[tokio::test(start_paused = true)]
async fn poison_messages_redelivered_for_ever_do_not_hold_the_adaptive_limit_down() {
    // Their retries were counted: as the poison piled up they were most of each
    // window, and the limit fell to 1 after about 40 s (21,289 good against 23,265).
    let (fixed, _) = good_beside_poison(false).await;
    let (adaptive, limit) = good_beside_poison(true).await;
    assert!(
        adaptive * 10 >= fixed * 9,
        "adaptive delivered {adaptive}, fixed {fixed}"
    );
    // 200 a second of 40 ms need 8 in flight.
    assert!(limit >= 8, "the limit at the end: {limit}");
}

/// 1,000 messages a second for 10 s to an app that takes 5 ms (the limit reaches
/// `max` while slow start leaves a backlog), then every request takes 5 s: the limit
/// before the jump, then 0.5 s after each of three round trips.
async fn limits_after_a_jump(max: usize) -> Vec<usize> {
    let latency = Arc::new(std::sync::atomic::AtomicU64::new(5));
    let ms = Arc::clone(&latency);
    let r = rig(
        Knobs {
            max_in_flight: max,
            adaptive: true,
            ..Knobs::default()
        },
        Box::new(move |_, _, _| {
            let d = ms.load(std::sync::atomic::Ordering::SeqCst);
            (status(200), Duration::from_millis(d))
        }),
    );
    let mut seq = 0;
    for _ in 0..10_000 {
        seq += 1;
        r.send(seq, "a");
        wait(MS).await;
    }
    let mut limits = vec![r.readiness.status().concurrency_limit];
    latency.store(5_000, std::sync::atomic::Ordering::SeqCst);
    // A backlog keeps the limit used.
    for _ in 0..500 {
        seq += 1;
        r.send(seq, "a");
    }
    wait(500 * MS).await;
    for _ in 1..=3 {
        wait(5 * S).await;
        limits.push(r.readiness.status().concurrency_limit);
    }
    r.stop().await;
    limits
}

#[tokio::test(start_paused = true)]
async fn the_adaptive_limit_follows_a_thousandfold_latency_jump_within_round_trips() {
    // Seen before: at 4 for 20 s (a window of 16 answers at 4 in flight), and from
    // 64 one cut per two round trips (the transition after a cut was ignored).
    for max in [4, 64] {
        let limits = limits_after_a_jump(max).await;
        assert_eq!(limits[0], max, "the limit was used");
        for k in 1..=3 {
            assert!(
                limits[k] <= (max >> k).max(1),
                "halved each round trip from {max}: {limits:?}"
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn the_rate_limit_spaces_starts_and_waiting_messages_stay_alive() {
    let r = rig(
        Knobs {
            max_in_flight: 16,
            rate_per_s: 10,
            progress_every: S,
            ..Knobs::default()
        },
        ok_after(MS),
    );
    for seq in 1..=30 {
        r.send(seq, "a");
    }
    wait(S / 2).await;
    let first = r.seen().len();
    assert!(
        (14..=15).contains(&first),
        "the burst (one second's worth), then ten a second: {first}"
    );
    wait(S).await;
    assert_eq!(r.seen().len(), first + 10, "ten a second");
    assert!(
        r.told(30).contains(&Told::Progress),
        "the last one is kept alive while it waits"
    );
    wait(2 * S).await;
    assert_eq!(r.seen().len(), 30);
    for seq in 1..=30 {
        assert_eq!(r.settled(seq), [Told::Ack], "no attempt spent waiting");
    }
    r.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_skip_route_settles_without_a_request_and_counts_per_route() {
    use crate::route::{Route, Skip, To};
    let route = |name: &str, subject: &str, skip: Skip| Route {
        name: name.into(),
        subjects: vec![subject.into()],
        headers: Vec::new(),
        when: None,
        to: To::Skip(skip),
    };
    let r = rig(
        Knobs {
            dead_letters: true,
            routes: vec![
                route("noise", "noise.>", Skip::Ack),
                route("bad", "bad.*", Skip::Dlq),
            ],
            ..Knobs::default()
        },
        ok_after(MS),
    );
    r.send(1, "noise.a.b");
    r.send(2, "bad.x");
    r.send(3, "orders.x");
    wait(S).await;
    let seen: Vec<u64> = r.seen().iter().map(|s| s.seq).collect();
    assert_eq!(
        seen,
        [3],
        "only the message no skip route took reached the app"
    );
    assert_eq!(r.settled(1), [Told::Ack]);
    assert_eq!(r.settled(2), [Told::Letter, Told::Term]);
    assert_eq!(r.settled(3), [Told::Ack]);
    let m = &r.metrics;
    for (series, n) in [
        (
            "jetrelay_routed_total{route=\"noise\",source=\"default\",target=\"skip\"}",
            1.0,
        ),
        (
            "jetrelay_routed_total{route=\"bad\",source=\"default\",target=\"skip\"}",
            1.0,
        ),
        ("jetrelay_messages_settled_total{action=\"ack\"}", 2.0),
        ("jetrelay_http_requests_total", 1.0),
    ] {
        assert_eq!(m.sample(series), Some(n), "{series}");
    }
    r.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_source_whose_app_hangs_cannot_take_the_budget_from_another() {
    use crate::admission::Budget;
    let budget = Budget::new(8, 0);
    // "slow": every request takes 2 s (an app path that hangs until its timeout);
    // "fine": 10 ms. Equal weights: 4 slots each when both have work.
    let slow = rig(
        Knobs {
            max_in_flight: 8,
            budget: Some(budget.member("slow", 1)),
            ..Knobs::default()
        },
        ok_after(2 * S),
    );
    for seq in 1..=1000 {
        slow.send(seq, "s");
    }
    wait(S).await;
    assert_eq!(
        budget.in_flight(),
        8,
        "alone, slow borrows the whole budget"
    );
    let fine = rig(
        Knobs {
            max_in_flight: 8,
            budget: Some(budget.member("fine", 1)),
            ..Knobs::default()
        },
        ok_after(10 * MS),
    );
    for seq in 1..=400 {
        fine.send(seq, "f");
    }
    // Slow's first requests end at 2 s: from then on fine keeps its 4 slots (even
    // between its own requests, when a waiting slow could take them), 400 requests a
    // second, while slow is held to 4.
    for _ in 0..30 {
        wait(100 * MS).await;
        assert!(budget.in_flight() <= 8, "never past the total");
    }
    let acked = (1..=400)
        .filter(|seq| fine.told(*seq) == [Told::Ack])
        .count();
    assert_eq!(acked, 400, "fine got its share as slow's slots turned over");
    let slow_acked = (1..=1000)
        .filter(|seq| slow.told(*seq) == [Told::Ack])
        .count();
    assert!(
        slow_acked <= 16,
        "slow was held to its share meanwhile: {slow_acked}"
    );
    slow.stop().await;
    fine.stop().await;
}

/// A message published `ago` before now (the wall clock: expiry is against it) with
/// `Nats-TTL: <ttl>`.
fn with_ttl(seq: u64, ttl: &str, ago: Duration) -> Delivery {
    let mut d = delivery(seq, "a");
    if let Ok(m) = &mut d.meta {
        m.published = time::OffsetDateTime::now_utc() - ago;
    }
    d.message.headers = vec![("Nats-TTL".into(), ttl.into())];
    d
}

impl Rig {
    fn send_delivery(&self, d: Delivery) {
        let settler = FakeSettler {
            seq: d.stream_seq(),
            log: Arc::clone(&self.log),
        };
        self.events
            .send(Event::Message(Box::new(d), settler))
            .unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn an_expired_message_is_dead_lettered_without_a_request_alone_and_in_a_batch() {
    for batch in [None, batching(10, 1 << 20, Duration::ZERO)] {
        let knobs = || Knobs {
            dead_letters: true,
            batch,
            ..Knobs::default()
        };
        let r = match batch {
            None => rig(knobs(), ok_after(MS)),
            Some(_) => batch_rig(knobs(), all_acked()),
        };
        r.send_delivery(with_ttl(1, "5s", 10 * S));
        r.send_delivery(with_ttl(2, "1h", 10 * S));
        r.send_delivery(with_ttl(3, "never", 10 * S));
        r.send_delivery(with_ttl(4, "5", 10 * S));
        wait(S).await;
        let mut seen: Vec<u64> = r.seen().iter().map(|s| s.seq).collect();
        seen.sort_unstable();
        assert_eq!(seen, [2, 3], "{batch:?}: the expired ones were not sent");
        for seq in [1, 4] {
            assert_eq!(r.settled(seq), [Told::Letter, Told::Term], "{batch:?}");
        }
        for seq in [2, 3] {
            assert_eq!(r.settled(seq), [Told::Ack], "{batch:?}");
        }
        assert_eq!(r.metrics.sample("jetrelay_expired_total"), Some(2.0));
        assert_eq!(
            r.metrics
                .sample("jetrelay_message_age_seconds_count{stage=\"expired\"}"),
            Some(2.0)
        );
        r.stop().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_message_older_than_max_age_is_dead_lettered_as_too_old_alone_and_in_a_batch() {
    for batch in [None, batching(10, 1 << 20, Duration::ZERO)] {
        let knobs = || Knobs {
            dead_letters: true,
            batch,
            max_age: Some(60 * S),
            ..Knobs::default()
        };
        let r = match batch {
            None => rig(knobs(), ok_after(MS)),
            Some(_) => batch_rig(knobs(), all_acked()),
        };
        // Published 2 minutes and 10 seconds ago (a Nats-TTL of a day does not save it).
        r.send_delivery(with_ttl(1, "1d", 120 * S));
        r.send_delivery(with_ttl(2, "1d", 10 * S));
        wait(S).await;
        let seen: Vec<u64> = r.seen().iter().map(|s| s.seq).collect();
        assert_eq!(seen, [2], "{batch:?}: the old one was not sent");
        assert_eq!(r.settled(1), [Told::Letter, Told::Term], "{batch:?}");
        assert_eq!(r.settled(2), [Told::Ack], "{batch:?}");
        assert_eq!(
            r.metrics
                .sample("jetrelay_expired_total{reason=\"max_age\"}"),
            Some(1.0)
        );
        assert_eq!(
            r.metrics.sample("jetrelay_expired_total{reason=\"ttl\"}"),
            Some(0.0)
        );
        r.stop().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_retry_that_would_come_after_the_expiry_is_no_retry() {
    let busy = |after: u64| -> Script {
        Box::new(move |_, _, _| {
            (
                Outcome::Answered {
                    status: 503,
                    retry_after: Some(Duration::from_secs(after)),
                    action: None,
                },
                MS,
            )
        })
    };
    for ordering in [Ordering::None, Ordering::Subject] {
        // Retry-After 30 s, 60 s left: retried (a NAK, or in its lane).
        let r = rig(
            Knobs {
                ordering,
                ..Knobs::default()
            },
            busy(30),
        );
        r.send_delivery(with_ttl(1, "70s", 10 * S));
        wait(S).await;
        if ordering == Ordering::None {
            assert_eq!(r.settled(1), [Told::Nak(30 * S)]);
        } else {
            assert_eq!(r.settled(1), [], "kept in its lane for the retry");
        }
        assert_eq!(r.metrics.sample("jetrelay_expired_total"), Some(0.0));
        r.stop().await;

        // Retry-After 30 s, 20 s left: terminated as expired after the one request.
        let r = rig(
            Knobs {
                ordering,
                ..Knobs::default()
            },
            busy(30),
        );
        r.send_delivery(with_ttl(1, "30s", 10 * S));
        wait(S).await;
        assert_eq!(r.seen().len(), 1);
        assert_eq!(r.settled(1), [Told::Term], "{ordering:?}");
        assert_eq!(r.metrics.sample("jetrelay_expired_total"), Some(1.0));
        r.stop().await;
    }
}

/// The marker key of the test delivery `seq` (scope `d`, no message id).
fn key_of(seq: u64) -> String {
    crate::seam::markers::marker_key(
        &delivery(seq, "a"),
        crate::seam::markers::IdempotencyKey::MsgId,
        "d",
    )
    .unwrap()
}

/// The marker of the test delivery `seq`: its key and what it records.
fn mark_of(seq: u64) -> (String, String) {
    let d = delivery(seq, "a");
    (
        key_of(seq),
        crate::seam::markers::Marked::of(&d).unwrap().value(),
    )
}

#[tokio::test(start_paused = true)]
async fn a_processed_message_is_marked_after_its_outputs_and_before_its_ack_and_a_marked_one_is_not_sent()
 {
    let r = rig(
        Knobs {
            markers: Some((vec![mark_of(2)], 0)),
            publishes: true,
            ..Knobs::default()
        },
        ok_after(MS),
    );
    r.send(1, "a");
    r.send(2, "a");
    r.send_delivered(3, "a", 2);
    wait(S).await;
    let seen: Vec<u64> = r.seen().iter().map(|s| s.seq).collect();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(!seen.contains(&2), "the marked one was not sent: {seen:?}");
    for seq in [1, 3] {
        assert_eq!(
            r.settled(seq),
            [Told::Published, Told::Marked, Told::AckConfirmed],
            "{seq}: outputs, marker, ack"
        );
    }
    assert_eq!(r.settled(2), [Told::Ack], "acked without a request");
    assert_eq!(
        r.marker_keys.lock().unwrap().get(&key_of(1)),
        Some(&mark_of(1).1)
    );
    let m = &r.metrics;
    assert_eq!(m.sample("jetrelay_duplicates_suppressed_total"), Some(1.0));
    assert_eq!(m.sample("jetrelay_idempotency_failures_total"), Some(0.0));
    r.stop().await;

    // A redelivery of 1 now finds its marker.
    let r = rig(
        Knobs {
            markers: Some((vec![mark_of(1)], 0)),
            ..Knobs::default()
        },
        ok_after(MS),
    );
    r.send_delivered(1, "a", 2);
    wait(S).await;
    assert!(r.seen().is_empty());
    assert_eq!(r.settled(1), [Told::Ack]);
    r.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_marker_that_cannot_be_written_is_tried_again_for_half_ack_wait_5_s_at_most_then_acked_anyway()
 {
    // Two failed writes: the third stores it, then the ack.
    let r = rig(
        Knobs {
            markers: Some((Vec::new(), 2)),
            ..Knobs::default()
        },
        ok_after(MS),
    );
    r.send(1, "a");
    wait(S).await;
    assert_eq!(
        r.settled(1),
        [Told::MarkFailed, Told::MarkFailed, Told::Marked, Told::Ack]
    );
    assert_eq!(
        r.metrics.sample("jetrelay_idempotency_failures_total"),
        Some(0.0)
    );
    r.stop().await;

    // Never written: acked anyway after min(ack_wait / 2, 5 s) (ack_wait is 30 s
    // here), counted.
    let r = rig(
        Knobs {
            markers: Some((Vec::new(), u32::MAX)),
            ..Knobs::default()
        },
        ok_after(MS),
    );
    let start = Instant::now();
    r.send(1, "a");
    wait(40 * S).await;
    let told = r.settled(1);
    assert_eq!(told.last(), Some(&Told::Ack), "{told:?}");
    assert!(
        told[..told.len() - 1]
            .iter()
            .all(|t| *t == Told::MarkFailed)
    );
    let acked = r.told_at(1, &Told::Ack)[0];
    assert!(
        acked - start <= 5 * S + 100 * MS,
        "held at most 5 s: {:?}",
        acked - start
    );
    assert_eq!(
        r.metrics.sample("jetrelay_idempotency_failures_total"),
        Some(1.0)
    );
    r.stop().await;
}

#[test]
fn a_failing_marker_write_holds_its_message_half_ack_wait_and_5_s_at_most() {
    for (ack_wait, held) in [(30 * S, 5 * S), (10 * S, 5 * S), (4 * S, 2 * S), (S, S / 2)] {
        assert_eq!(super::markers::hold(ack_wait), held, "{ack_wait:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn while_markers_cannot_be_written_readiness_names_the_bucket_and_each_message_tries_once() {
    let r = rig(
        Knobs {
            markers: Some((Vec::new(), u32::MAX)),
            ..Knobs::default()
        },
        ok_after(MS),
    );
    r.send(1, "a");
    wait(10 * S).await;
    let reason = r.readiness.status().shown.reason;
    assert!(
        reason.starts_with("idempotency markers cannot be written to bucket marks ("),
        "{reason}"
    );
    assert!(
        r.readiness.status().ready,
        "messages are acked: still ready"
    );
    // Down: the next message tries once, and is acked at once.
    let start = Instant::now();
    r.send(2, "a");
    wait(S).await;
    assert_eq!(r.settled(2), [Told::MarkFailed, Told::Ack]);
    assert!(r.told_at(2, &Told::Ack)[0] - start < 10 * MS);
    // Writes work again: the next marker is stored, readiness says nothing of it.
    *r.marker_failing.lock().unwrap() = 0;
    r.send(3, "a");
    wait(S).await;
    assert_eq!(r.settled(3), [Told::Marked, Told::Ack]);
    assert_eq!(r.readiness.status().reason, "");
    assert_eq!(
        r.metrics.sample("jetrelay_idempotency_failures_total"),
        Some(2.0)
    );
    r.stop().await;
}

/// A marker of another message under the key of the test delivery `seq`.
fn foreign_mark_of(seq: u64) -> (String, String) {
    let other = crate::seam::markers::Marked {
        stream: "S".into(),
        sequence: 9,
        digest: [0; 32],
    };
    (key_of(seq), other.value())
}

#[tokio::test(start_paused = true)]
async fn a_marker_of_another_message_does_not_suppress_the_request_names_it_alone_or_in_a_batch() {
    let r = rig(
        Knobs {
            markers: Some((vec![foreign_mark_of(2), mark_of(3)], 0)),
            ..Knobs::default()
        },
        ok_after(MS),
    );
    for seq in 1..=3 {
        r.send(seq, "a");
    }
    wait(S).await;
    let seen: Vec<(u64, Option<String>)> = r
        .seen()
        .iter()
        .map(|s| (s.seq, s.conflict.clone()))
        .collect();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(seen.contains(&(1, None)), "{seen:?}");
    assert!(seen.contains(&(2, Some("S:9".into()))), "{seen:?}");
    assert_eq!(r.settled(2), [Told::Marked, Told::Ack]);
    assert_eq!(
        r.marker_keys.lock().unwrap().get(&key_of(2)),
        Some(&mark_of(2).1),
        "the marker records the message the app answered"
    );
    let m = &r.metrics;
    assert_eq!(m.sample("jetrelay_idempotency_conflicts_total"), Some(1.0));
    assert_eq!(m.sample("jetrelay_duplicates_suppressed_total"), Some(1.0));
    r.stop().await;

    let r = batch_rig(
        Knobs {
            batch: batching(10, 1 << 20, Duration::ZERO),
            markers: Some((vec![foreign_mark_of(2), mark_of(3)], 0)),
            ..Knobs::default()
        },
        all_acked(),
    );
    for seq in 1..=4 {
        r.send(seq, "a");
    }
    wait(S).await;
    let mut seen: Vec<(u64, Option<String>)> = r
        .seen()
        .iter()
        .map(|s| (s.seq, s.conflict.clone()))
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [(1, None), (2, Some("S:9".into())), (4, None)],
        "3 left out, 2 sent naming the marked one"
    );
    assert_eq!(
        r.metrics.sample("jetrelay_idempotency_conflicts_total"),
        Some(1.0)
    );
    r.stop().await;
}

#[tokio::test(start_paused = true)]
async fn in_a_batch_each_message_is_marked_in_one_write_and_a_marked_one_is_left_out() {
    let r = batch_rig(
        Knobs {
            batch: batching(10, 1 << 20, Duration::ZERO),
            markers: Some((vec![mark_of(2)], 0)),
            ..Knobs::default()
        },
        all_acked(),
    );
    for seq in 1..=4 {
        r.send(seq, "a");
    }
    wait(S).await;
    let carried: Vec<u64> = r.batches.lock().unwrap().concat();
    assert!(!carried.contains(&2), "{carried:?}");
    assert_eq!(carried.len(), 3, "{carried:?}");
    for seq in [1, 3, 4] {
        assert_eq!(r.settled(seq), [Told::Marked, Told::Ack], "{seq}");
    }
    assert_eq!(r.settled(2), [Told::Ack]);
    let writes = r.marker_writes.lock().unwrap().clone();
    assert_eq!(writes.iter().sum::<usize>(), 3);
    assert!(
        writes.len() <= r.batches.lock().unwrap().len(),
        "one write per batch: {writes:?}"
    );
    r.stop().await;
}

#[tokio::test(start_paused = true)]
async fn under_ordering_a_marked_message_is_acked_in_its_keys_turn() {
    // 1 is answered 503 once (retried in its lane a second later); 2, marked, waits
    // for it; 3 comes after both.
    let r = rig(
        Knobs {
            ordering: Ordering::Subject,
            markers: Some((vec![mark_of(2)], 0)),
            ..Knobs::default()
        },
        Box::new(|seq, attempt, _| {
            if seq == 1 && attempt == 1 {
                (status(503), MS)
            } else {
                (status(200), MS)
            }
        }),
    );
    for seq in 1..=3 {
        r.send(seq, "a");
    }
    wait(5 * S).await;
    let at = |seq| r.told_at(seq, &Told::Ack)[0];
    assert!(at(1) <= at(2) && at(2) <= at(3), "in stream order");
    assert!(at(2) - at(1) < S);
    let seen: Vec<u64> = r.seen().iter().map(|s| s.seq).collect();
    assert_eq!(seen, [1, 1, 3]);
    r.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_pulls_markers_are_read_together_ahead_of_the_attempts() {
    let r = rig(
        Knobs {
            max_in_flight: 2,
            markers: Some((vec![mark_of(5)], 0)),
            ..Knobs::default()
        },
        ok_after(MS),
    );
    for seq in 1..=40 {
        r.send(seq, "a");
    }
    wait(S).await;
    let seen: Vec<u64> = r.seen().iter().map(|s| s.seq).collect();
    assert_eq!(seen.len(), 39, "{seen:?}");
    assert!(!seen.contains(&5), "the marked one was not sent: {seen:?}");
    assert_eq!(r.settled(5), [Told::Ack]);
    let reads = r.marker_reads.lock().unwrap().clone();
    assert_eq!(
        reads.iter().sum::<usize>(),
        40,
        "each key read once: {reads:?}"
    );
    assert!(
        reads.len() <= 2,
        "a pull's keys read together, not one by one: {reads:?}"
    );
    r.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_msg_id_twice_in_one_pull_reaches_the_app_once_and_a_redelivery_reads_again() {
    // One request at a time: the second of two deliveries under one Nats-Msg-Id (the
    // same payload) starts after the first's marker, read ahead before it was there.
    let r = rig(
        Knobs {
            max_in_flight: 1,
            markers: Some((Vec::new(), 0)),
            ..Knobs::default()
        },
        ok_after(MS),
    );
    let id = vec![("Nats-Msg-Id".to_string(), "order-7".to_string())];
    r.send_full(1, "a", 1, id.clone());
    r.send_full(2, "a", 1, id.clone());
    r.send(3, "a");
    wait(S).await;
    let seen: Vec<u64> = r.seen().iter().map(|s| s.seq).collect();
    assert_eq!(seen, [1, 3]);
    assert_eq!(r.settled(2), [Told::Ack], "processed before: acked unseen");
    r.stop().await;

    // A redelivery reads its marker at its attempt, even with one read ahead: here
    // the marker is written after the pull (by the member that had it before).
    let r = rig(
        Knobs {
            max_in_flight: 1,
            markers: Some((Vec::new(), 0)),
            ..Knobs::default()
        },
        Box::new(|_, _, _| (status(200), 100 * MS)),
    );
    r.send(1, "a");
    r.send_delivered(2, "a", 2);
    wait(10 * MS).await;
    r.marker_keys.lock().unwrap().extend([mark_of(2)]);
    wait(S).await;
    let seen: Vec<u64> = r.seen().iter().map(|s| s.seq).collect();
    assert_eq!(seen, [1]);
    assert_eq!(r.settled(2), [Told::Ack]);
    r.stop().await;
}
