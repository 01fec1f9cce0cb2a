//! The dispatcher against fakes of its three seams, in virtual time
//! (`tokio::time::pause`): a source fed by the test, settle handles that record what
//! they were told, and an app answering from a script after a virtual delay.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::book::Book;
use super::lanes::LaneKey;
use super::seam::{BatchForwarded, Event, Forward, Forwarded, Held, NoAnswer, Settle, Source};
use super::{Dispatch, Ended};
use crate::config::Ordering;
use crate::daemon::shutdown::Deadline;
use crate::delivery::{Delivery, Meta};
use crate::http::batch::{Answer, ItemResult};
use crate::http::probe::Health;
use crate::ops::metrics::{HttpClass, Metrics};
use crate::ops::readiness::{Readiness, State};
use crate::policy::{Outcome, Policy, StatusSet};

// === the fakes ===

/// What a settle handle was told, when, for which stream sequence.
#[derive(Debug, Clone, PartialEq)]
enum Told {
    Ack,
    Nak(Duration),
    Term,
    Progress,
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
        self.tell(Told::Ack);
        Ok(())
    }

    async fn nak(&self, delay: Duration) -> Result<(), String> {
        self.tell(Told::Nak(delay));
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
}

struct FakeSource {
    events: mpsc::UnboundedReceiver<Event<FakeSettler>>,
    side: Arc<Mutex<SourceSide>>,
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

    async fn step_down(&mut self) -> bool {
        false
    }

    async fn quiesced(&mut self) {
        self.side.lock().unwrap().quiesced_at.push(Instant::now());
    }

    async fn close(self) -> Vec<FakeSettler> {
        self.side.lock().unwrap().closed = true;
        Vec::new()
    }
}

/// One request the app saw.
#[derive(Debug, Clone)]
struct Seen {
    seq: u64,
    subject: String,
    attempt: u32,
    start: Instant,
    end: Instant,
}

/// The app's answer: what happened, after how long.
type Script = Box<dyn Fn(u64, u32, Instant) -> (Outcome, Duration) + Send + Sync>;

/// The app's answer to a batch (sequence and attempt of each message, in order): the
/// request's outcome, the per-message answer of a 2xx, after how long.
type BatchScript = Box<dyn Fn(&[(u64, u32)]) -> (Outcome, Option<Answer>, Duration) + Send + Sync>;

struct FakeApp {
    script: Script,
    batch_script: Option<BatchScript>,
    seen: Arc<Mutex<Vec<Seen>>>,
    batches: Arc<Mutex<Vec<Vec<u64>>>>,
    in_flight: Arc<Mutex<(usize, usize)>>,
}

impl Forward for FakeApp {
    async fn forward(&self, d: &Delivery, attempt: u32) -> Forwarded {
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
            subject: d.app_subject.clone(),
            attempt,
            start,
            end: Instant::now(),
        });
        forwarded(outcome, delay)
    }

    async fn forward_batch(&self, items: &[(&Delivery, u32)]) -> BatchForwarded {
        let start = Instant::now();
        let carried: Vec<(u64, u32)> = items.iter().map(|(d, a)| (d.stream_seq(), *a)).collect();
        self.batches
            .lock()
            .unwrap()
            .push(carried.iter().map(|(s, _)| *s).collect());
        let script = self.batch_script.as_ref().expect("a batch script");
        let (outcome, answer, delay) = script(&carried);
        tokio::time::sleep(delay).await;
        for (d, attempt) in items {
            self.seen.lock().unwrap().push(Seen {
                seq: d.stream_seq(),
                subject: d.app_subject.clone(),
                attempt: *attempt,
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
        subject: subject.into(),
        meta: Ok(Meta {
            stream: "S".into(),
            consumer: "c".into(),
            stream_seq: seq,
            consumer_seq: seq,
            delivered: 1,
            pending: 0,
            published: time::OffsetDateTime::UNIX_EPOCH,
        }),
        headers: Vec::new(),
        payload: Bytes::from(vec![0u8; 10]),
        partition: None,
        app_subject: subject.into(),
        origin: None,
        invalid: None,
    }
}

/// A dispatcher, its fakes and the handles to drive and watch them.
struct Rig {
    batches: Arc<Mutex<Vec<Vec<u64>>>>,
    events: mpsc::UnboundedSender<Event<FakeSettler>>,
    log: Log,
    side: Arc<Mutex<SourceSide>>,
    seen: Arc<Mutex<Vec<Seen>>>,
    in_flight: Arc<Mutex<(usize, usize)>>,
    healthy: watch::Sender<Health>,
    readiness: Readiness,
    shutdown: CancellationToken,
    run: tokio::task::JoinHandle<Result<Ended, super::DispatchError>>,
}

struct Knobs {
    batch: Option<crate::config::Batching>,
    max_in_flight: usize,
    ordering: Ordering,
    progress_every: Duration,
    grace: Duration,
    healthy: bool,
}

impl Default for Knobs {
    fn default() -> Knobs {
        Knobs {
            batch: None,
            max_in_flight: 4,
            ordering: Ordering::None,
            progress_every: Duration::from_secs(15),
            grace: Duration::from_secs(20),
            healthy: true,
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
    let readiness = Readiness::new(None, metrics.clone());
    readiness.set_nats_down(None);
    let (healthy, app_healthy) = watch::channel(if knobs.healthy {
        Health::Healthy
    } else {
        Health::Unhealthy
    });
    let (seen, in_flight, batches) = (Arc::default(), Arc::default(), Arc::default());
    let dispatch = Arc::new(Dispatch {
        forwarder: FakeApp {
            script,
            batch_script,
            seen: Arc::clone(&seen),
            batches: Arc::clone(&batches),
            in_flight: Arc::clone(&in_flight),
        },
        policy: Policy {
            retry: StatusSet::parse(&["5xx"]).unwrap(),
            term: StatusSet::parse(&["4xx"]).unwrap(),
            retry_initial: Duration::from_secs(1),
            retry_max: Duration::from_secs(60),
            retry_after_max: Duration::from_secs(60),
            max_attempts: Some(5),
        },
        metrics,
        readiness: readiness.clone(),
        max_in_flight: knobs.max_in_flight,
        pinned_mode: false,
        ordering: knobs.ordering,
        progress_every: knobs.progress_every,
        dlq: None,
        app_healthy,
        unhealthy_handover: Duration::from_secs(30),
        deadline: Deadline::new(knobs.grace),
        batch: knobs.batch,
        outbox: None,
        letters_waiting_max: 4,
    });
    let (events, rx) = mpsc::unbounded_channel();
    let side: Arc<Mutex<SourceSide>> = Arc::default();
    let source = FakeSource {
        events: rx,
        side: Arc::clone(&side),
    };
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    let run = tokio::spawn(async move { dispatch.run(source, token).await });
    Rig {
        batches,
        events,
        log: Arc::default(),
        side,
        seen,
        in_flight,
        healthy,
        readiness,
        shutdown,
        run,
    }
}

impl Rig {
    fn send(&self, seq: u64, subject: &str) {
        let settler = FakeSettler {
            seq,
            log: Arc::clone(&self.log),
        };
        self.events
            .send(Event::Message(Box::new(delivery(seq, subject)), settler))
            .unwrap();
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
    let r = rig(
        Knobs {
            max_in_flight: 3,
            ..Knobs::default()
        },
        ok_after(100 * MS),
    );
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
    let mut r = rig(
        Knobs {
            max_in_flight: 1,
            ..Knobs::default()
        },
        ok_after(5 * S),
    );
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
    let r = rig(
        Knobs {
            max_in_flight: 1,
            ..Knobs::default()
        },
        ok_after(3 * S),
    );
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
    // A model run over the book: holds, retries and settles in any order; the timer
    // set never outgrows what is held.
    let mut runner = proptest::test_runner::TestRunner::default();
    let ops = proptest::collection::vec((0u8..3, 0u64..20), 1..300);
    runner
        .run(&ops, |ops| {
            let t0 = Instant::now();
            let mut book: Book<()> = Book::new();
            let mut ids: HashMap<u64, u64> = HashMap::new();
            for (i, (op, key)) in ops.into_iter().enumerate() {
                let at = t0 + Duration::from_millis(i as u64);
                match op {
                    0 => {
                        if let Some(id) = book.hold(delivery(key + 1, "a"), (), LaneKey::Free, at) {
                            ids.insert(key, id);
                        }
                    }
                    1 => {
                        if let Some(id) = ids.get(&key) {
                            book.retry_at(*id, at);
                        }
                    }
                    _ => {
                        if let Some(id) = ids.remove(&key) {
                            book.take(id);
                        }
                    }
                }
                proptest::prop_assert!(book.timer_entries() <= 2 * book.held.len());
            }
            for (_, id) in ids {
                book.take(id);
            }
            proptest::prop_assert_eq!(book.timer_entries(), 0);
            proptest::prop_assert_eq!(book.held(), Held::default());
            Ok(())
        })
        .unwrap();
}

// === batch delivery ===

fn batching(size: usize, max_bytes: u64, wait: Duration) -> Option<crate::config::Batching> {
    Some(crate::config::Batching {
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
        d.payload = Bytes::from(vec![b'x'; bytes]);
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
        }),
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
