//! The service runner against fakes of its seams, in virtual time
//! (`tokio::time::pause`): requests the test sends, a queue group whose joins and
//! leaves are recorded, an app answering from a script after a virtual delay, and
//! replies recorded with the instant they were sent.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;

use super::reply::{ERROR_CODE_HEADER, ERROR_HEADER};
use super::{Served, Service, ServiceEndpoint, ServiceSpec};
use crate::admission::Budget;
use crate::app::answer::KeptAnswer;
use crate::message::Message;
use crate::ops::announce::ServiceStats;
use crate::ops::metrics::Metrics;
use crate::ops::readiness::{Readiness, SourceReadiness, State};
use crate::ops::traces::Tracer;
use crate::pace::PaceSettings;
use crate::policy::{Outcome, Policy};
use crate::seam::service::{
    Exchange, JoinError, Question, Replier, Requests, Response, ServiceRequest,
};
use crate::seam::time::Deadline;
use crate::seam::{Forwarded, Health, HttpClass};

const MS: Duration = Duration::from_millis(1);

// === the fakes ===

/// The queue group and what is on its way to this instance.
#[derive(Debug, Default)]
struct Group {
    joined: bool,
    joins: usize,
    leaves: usize,
    /// Sent to this instance, not yet taken.
    queue: VecDeque<ServiceRequest>,
}

#[derive(Clone, Default)]
struct Wire {
    group: Arc<Mutex<Group>>,
    wake: Arc<Notify>,
    replies: Arc<Mutex<Vec<(String, Response, Instant)>>>,
}

impl Wire {
    /// A request on endpoint `i` with reply subject `to` (none: a publish): delivered
    /// only while joined, as a queue group does; returns whether it was.
    fn send(&self, i: usize, payload: &str, to: Option<&str>) -> bool {
        let mut g = self.group.lock().unwrap();
        if !g.joined {
            return false;
        }
        g.queue.push_back(request(i, payload, to));
        drop(g);
        self.wake.notify_one();
        true
    }

    /// Sends requests `r.<i>` for each `i` of `ids` to endpoint 0, each taken (the
    /// instance is in the group).
    fn send_each(&self, ids: std::ops::Range<usize>) {
        for i in ids {
            assert!(self.send(0, "x", Some(&format!("r.{i}"))), "r.{i}");
        }
    }

    /// Puts a request on its way whatever the membership (sent just before a leave).
    fn in_transit(&self, i: usize, payload: &str, to: &str) {
        self.group
            .lock()
            .unwrap()
            .queue
            .push_back(request(i, payload, Some(to)));
        self.wake.notify_one();
    }

    fn replies(&self) -> Vec<(String, Response, Instant)> {
        self.replies.lock().unwrap().clone()
    }

    fn reply_to(&self, to: &str) -> Option<Response> {
        self.replies()
            .into_iter()
            .find(|(t, _, _)| t == to)
            .map(|(_, r, _)| r)
    }

    fn joined(&self) -> (bool, usize, usize) {
        let g = self.group.lock().unwrap();
        (g.joined, g.joins, g.leaves)
    }
}

fn request(i: usize, payload: &str, to: Option<&str>) -> ServiceRequest {
    ServiceRequest {
        malformed: None,
        endpoint: i,
        message: Message {
            subject: format!("svc.{i}"),
            headers: vec![("Content-Type".into(), "text/plain".into())],
            payload: Bytes::from(payload.to_string()),
        },
        reply: to.map(str::to_string),
    }
}

struct FakeRequests(Wire);

impl Requests for FakeRequests {
    type Replier = Wire;

    fn replier(&self) -> Wire {
        self.0.clone()
    }

    async fn join(&mut self) -> Result<(), JoinError> {
        let mut g = self.0.group.lock().unwrap();
        g.joined = true;
        g.joins += 1;
        Ok(())
    }

    async fn leave(&mut self) {
        let mut g = self.0.group.lock().unwrap();
        g.joined = false;
        g.leaves += 1;
    }

    async fn next(&mut self) -> Option<ServiceRequest> {
        loop {
            {
                let mut g = self.0.group.lock().unwrap();
                if let Some(r) = g.queue.pop_front() {
                    return Some(r);
                }
                if !g.joined {
                    return None;
                }
            }
            self.0.wake.notified().await;
        }
    }
}

impl Replier for Wire {
    async fn reply(&self, to: String, reply: Response) -> bool {
        self.replies
            .lock()
            .unwrap()
            .push((to, reply, Instant::now()));
        true
    }
}

/// What the app does with a request: answer a status and body (a body over the bound
/// is "over"), time out, or not be there; after a delay.
#[derive(Debug, Clone)]
enum Does {
    Answer(u16, &'static str),
    Timeout,
    Refused,
}

type Script = Arc<dyn Fn(&str) -> (Does, Duration) + Send + Sync>;

#[derive(Clone)]
struct FakeApp {
    script: Script,
    in_flight: Arc<Mutex<(usize, usize)>>,
    asked: Arc<Mutex<Vec<(String, String)>>>,
}

impl Exchange for FakeApp {
    async fn exchange(&self, q: Question<'_>) -> (Forwarded, Option<KeptAnswer>) {
        let payload = String::from_utf8_lossy(&q.message.payload).to_string();
        let (does, delay) = (self.script)(&payload);
        {
            let mut n = self.in_flight.lock().unwrap();
            n.0 += 1;
            n.1 = n.1.max(n.0);
        }
        self.asked
            .lock()
            .unwrap()
            .push((q.endpoint.to_string(), payload));
        sleep(delay).await;
        self.in_flight.lock().unwrap().0 -= 1;
        let f = |outcome, class, failure| Forwarded::fake(outcome, class, delay, failure);
        match does {
            Does::Answer(status, body) => {
                let over = (body.len() > q.max_body).then_some(body.len());
                let answer = KeptAnswer {
                    status,
                    headers: vec![("content-type".into(), "application/json".into())],
                    body: if over.is_some() {
                        Bytes::new()
                    } else {
                        Bytes::from_static(body.as_bytes())
                    },
                    over,
                };
                let outcome = Outcome::Answered {
                    status,
                    retry_after: None,
                    action: None,
                };
                (f(outcome, HttpClass::Status(status), None), Some(answer))
            }
            Does::Timeout => (
                f(Outcome::Timeout, HttpClass::Timeout, Some("timeout")),
                None,
            ),
            Does::Refused => (
                f(
                    Outcome::Unreachable,
                    HttpClass::Error,
                    Some("connection refused"),
                ),
                None,
            ),
        }
    }
}

// === the rig ===

struct Rig {
    wire: Wire,
    app: FakeApp,
    health: watch::Sender<Health>,
    readiness: SourceReadiness,
    stats: ServiceStats,
    metrics: Metrics,
    shutdown: CancellationToken,
    run: JoinHandle<()>,
}

impl Rig {
    /// Asserts that `n` requests to `endpoint` were counted in `class`.
    fn assert_requests(&self, class: &str, endpoint: &str, n: u64) {
        let text = self.metrics.render();
        let line = format!(
            "jetrelay_requests_total{{class=\"{class}\",endpoint=\"{endpoint}\",source=\"rpc\"}} {n}"
        );
        assert!(text.contains(&line), "{line}\n{text}");
    }
}

/// A runner started (settled) without a rate limit.
async fn rig(max_in_flight: u32, healthy: Health, script: Script) -> Rig {
    rig_with(max_in_flight, 0, healthy, script).await
}

/// A runner started, and settled: it has joined the group (when healthy) and waits
/// for requests.
async fn rig_with(max_in_flight: u32, rate_per_s: u32, healthy: Health, script: Script) -> Rig {
    let metrics = Metrics::new().unwrap();
    let process = Readiness::new(metrics.clone());
    process.set_nats_down(None);
    let source = metrics.source("rpc").unwrap();
    let readiness = process.source("rpc", None, source.clone());
    let (health, app_healthy) = watch::channel(healthy);
    let app = FakeApp {
        script,
        in_flight: Arc::default(),
        asked: Arc::default(),
    };
    let served = Served {
        endpoints: vec![app.clone(), app.clone()],
        pace: PaceSettings {
            adaptive: false,
            min_in_flight: 1,
            max_in_flight,
            rate_per_s,
            burst: 1,
        },
        app_healthy,
        policy: Policy::for_tests(),
    };
    let (_keep, live) = watch::channel(Arc::new(served));
    std::mem::forget(_keep);
    let stats = ServiceStats::new(2);
    let service = Arc::new(Service {
        spec: ServiceSpec {
            name: "orders".into(),
            version: "1.0.0".into(),
            queue_group: "q".into(),
            endpoints: vec![
                ServiceEndpoint {
                    name: "create".into(),
                    subject: "svc.0".into(),
                },
                ServiceEndpoint {
                    name: "cancel".into(),
                    subject: "svc.1".into(),
                },
            ],
            max_reply_bytes: 16,
            connection: "pod-a".into(),
            wait: super::wait::WaitBound {
                requests: 4,
                bytes: 1000,
            },
        },
        live,
        metrics: source,
        readiness: readiness.clone(),
        tracer: Tracer::off(),
        budget: Budget::off().member("rpc", 1),
        deadline: Deadline::new(Duration::from_secs(5)),
        stats: stats.clone(),
    });
    let wire = Wire::default();
    let shutdown = CancellationToken::new();
    let requests = FakeRequests(wire.clone());
    let stop = shutdown.clone();
    let run = tokio::spawn(async move {
        service.run(requests, stop).await.unwrap();
    });
    settle().await;
    Rig {
        wire,
        app,
        health,
        readiness,
        stats,
        metrics,
        shutdown,
        run,
    }
}

fn answering(status: u16, body: &'static str, delay: Duration) -> Script {
    Arc::new(move |_| (Does::Answer(status, body), delay))
}

fn header<'a>(r: &'a Response, name: &str) -> Option<&'a str> {
    r.headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// Lets the runner turn until nothing is left to do at this instant.
async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

// === the tests ===

#[tokio::test(start_paused = true)]
async fn each_request_gets_the_apps_answer_and_an_error_status_the_error_headers() {
    let script: Script = Arc::new(|p| match p {
        "missing" => (Does::Answer(404, "no such order"), MS),
        "boom" => (Does::Answer(500, "{}"), MS),
        _ => (Does::Answer(200, "{\"ok\":true}"), MS),
    });
    let r = rig(4, Health::Healthy, script).await;
    assert_eq!(
        r.wire.joined(),
        (true, 1, 0),
        "joined at once: the app is healthy"
    );
    assert_eq!(r.readiness.status().state, State::Consuming);
    assert!(r.wire.send(0, "new", Some("r.1")));
    assert!(r.wire.send(1, "missing", Some("r.2")));
    assert!(r.wire.send(0, "boom", Some("r.3")));
    sleep(10 * MS).await;
    let ok = r.wire.reply_to("r.1").unwrap();
    assert_eq!(&ok.body[..], b"{\"ok\":true}");
    assert_eq!(header(&ok, "Content-Type"), Some("application/json"));
    assert_eq!(header(&ok, ERROR_HEADER), None);
    let missing = r.wire.reply_to("r.2").unwrap();
    assert_eq!(&missing.body[..], b"no such order");
    assert_eq!(header(&missing, ERROR_CODE_HEADER), Some("404"));
    assert_eq!(header(&missing, ERROR_HEADER), Some("Not Found"));
    let boom = r.wire.reply_to("r.3").unwrap();
    assert_eq!(header(&boom, ERROR_CODE_HEADER), Some("500"));
    let asked = r.app.asked.lock().unwrap().clone();
    assert_eq!(
        asked[1],
        ("cancel".to_string(), "missing".to_string()),
        "by endpoint"
    );
    let stats = r.stats.snapshot();
    assert_eq!((stats[0].requests, stats[0].errors), (2, 1));
    assert_eq!((stats[1].requests, stats[1].errors), (1, 1));
    assert_eq!(stats[1].last_error, "404:Not Found");
    r.assert_requests("4xx", "cancel", 1);
}

#[tokio::test(start_paused = true)]
async fn no_more_than_max_in_flight_ask_the_app_at_once() {
    let r = rig(2, Health::Healthy, answering(200, "ok", 100 * MS)).await;
    let start = Instant::now();
    r.wire.send_each(0..6);
    sleep(1000 * MS).await;
    let replies = r.wire.replies();
    assert_eq!(replies.len(), 6, "every request answered");
    assert_eq!(
        r.app.in_flight.lock().unwrap().1,
        2,
        "never more than 2 at once"
    );
    let last = replies.iter().map(|(_, _, at)| *at).max().unwrap();
    assert_eq!(last - start, 300 * MS, "three rounds of two");
}

#[tokio::test(start_paused = true)]
async fn the_rate_limit_spaces_the_requests() {
    let r = rig_with(8, 10, Health::Healthy, answering(200, "ok", MS)).await;
    let start = Instant::now();
    r.wire.send_each(0..3);
    sleep(1000 * MS).await;
    let at: Vec<Duration> = r
        .wire
        .replies()
        .iter()
        .map(|(_, _, at)| *at - start)
        .collect();
    assert_eq!(
        at,
        vec![MS, 101 * MS, 201 * MS],
        "10 per second, a burst of 1"
    );
}

#[tokio::test(start_paused = true)]
async fn a_timeout_replies_504_and_an_answer_over_max_reply_bytes_502() {
    let script: Script = Arc::new(|p| match p {
        "slow" => (Does::Timeout, 30 * MS),
        _ => (
            Does::Answer(200, "a body far longer than sixteen bytes"),
            MS,
        ),
    });
    let r = rig(4, Health::Healthy, script).await;
    r.wire.send(0, "slow", Some("r.slow"));
    r.wire.send(0, "big", Some("r.big"));
    sleep(100 * MS).await;
    let slow = r.wire.reply_to("r.slow").unwrap();
    assert_eq!(header(&slow, ERROR_CODE_HEADER), Some("504"));
    assert!(slow.body.is_empty());
    let big = r.wire.reply_to("r.big").unwrap();
    assert_eq!(header(&big, ERROR_CODE_HEADER), Some("502"));
    assert!(big.body.is_empty(), "never a cut body");
    let text = r.metrics.render();
    assert!(text.contains("class=\"too_large\""), "{text}");
    assert!(text.contains("class=\"timeout\""), "{text}");
}

#[tokio::test(start_paused = true)]
async fn an_unhealthy_app_takes_the_instance_out_of_the_queue_group_and_what_still_comes_gets_503_at_once()
 {
    let r = rig(4, Health::Waiting, answering(200, "ok", MS)).await;
    assert_eq!(r.wire.joined(), (false, 0, 0), "not before the first probe");
    assert_eq!(r.readiness.status().state, State::NotReady);
    r.health.send(Health::Healthy).unwrap();
    settle().await;
    assert_eq!(r.wire.joined(), (true, 1, 0));
    r.health.send(Health::Unhealthy).unwrap();
    // Sent to this instance just before it left.
    r.wire.in_transit(0, "x", "r.late");
    settle().await;
    assert_eq!(r.wire.joined(), (false, 1, 1), "left the group");
    let late = r.wire.reply_to("r.late").expect("answered at once");
    assert_eq!(header(&late, ERROR_CODE_HEADER), Some("503"));
    assert_eq!(header(&late, ERROR_HEADER), Some("the app is not healthy"));
    assert!(
        r.app.asked.lock().unwrap().is_empty(),
        "the app was not asked"
    );
    assert!(
        !r.wire.send(0, "x", Some("r.elsewhere")),
        "others take the requests"
    );
    assert!(
        r.readiness
            .status()
            .reason
            .contains("out of the queue group")
    );
    r.health.send(Health::Healthy).unwrap();
    settle().await;
    assert_eq!(r.wire.joined(), (true, 2, 1), "back when the app is");
    assert!(r.wire.send(0, "x", Some("r.back")));
    sleep(10 * MS).await;
    assert_eq!(&r.wire.reply_to("r.back").unwrap().body[..], b"ok");
}

#[tokio::test(start_paused = true)]
async fn an_unreachable_app_replies_503_leaves_and_rejoins_as_a_probe_after_a_backoff() {
    let up = Arc::new(Mutex::new(false));
    let seen = Arc::clone(&up);
    let script: Script = Arc::new(move |_| {
        if *seen.lock().unwrap() {
            (Does::Answer(200, "ok"), MS)
        } else {
            (Does::Refused, MS)
        }
    });
    let r = rig(4, Health::Healthy, script).await;
    r.wire.send(0, "x", Some("r.1"));
    sleep(2 * MS).await;
    let first = r.wire.reply_to("r.1").unwrap();
    assert_eq!(header(&first, ERROR_CODE_HEADER), Some("503"));
    assert_eq!(r.wire.joined(), (false, 1, 1), "out until the backoff");
    assert!(r.readiness.status().reason.contains("app unreachable"));
    // The first backoff (retry_initial, 100 ms): back as a probe, still refused.
    sleep(100 * MS).await;
    assert_eq!(r.wire.joined(), (true, 2, 1));
    r.wire.send(0, "x", Some("r.2"));
    sleep(2 * MS).await;
    assert_eq!(r.wire.joined(), (false, 2, 2), "refused again: out again");
    // The app is back: the next probe gets through and the instance stays.
    *up.lock().unwrap() = true;
    sleep(200 * MS).await;
    assert_eq!(r.wire.joined(), (true, 3, 2));
    r.wire.send(0, "x", Some("r.3"));
    sleep(2 * MS).await;
    assert_eq!(&r.wire.reply_to("r.3").unwrap().body[..], b"ok");
    assert_eq!(r.wire.joined(), (true, 3, 2), "stays in the group");
    assert_eq!(r.readiness.status().state, State::Consuming);
}

#[tokio::test(start_paused = true)]
async fn a_drain_leaves_the_group_and_answers_every_request_in_flight() {
    let r = rig(4, Health::Healthy, answering(200, "done", 1000 * MS)).await;
    r.wire.send(0, "a", Some("r.a"));
    r.wire.send(1, "b", Some("r.b"));
    sleep(10 * MS).await;
    r.shutdown.cancel();
    // One was already on its way when the instance left.
    r.wire.in_transit(0, "c", "r.c");
    settle().await;
    assert!(!r.wire.joined().0, "no more requests");
    assert_eq!(r.readiness.status().state, State::Draining);
    let c = r.wire.reply_to("r.c").expect("answered at once");
    assert_eq!(header(&c, ERROR_HEADER), Some("the service is draining"));
    assert!(r.wire.reply_to("r.a").is_none(), "still in flight");
    r.run.await.unwrap();
    let start_to_end = r.wire.replies();
    assert_eq!(&r.wire.reply_to("r.a").unwrap().body[..], b"done");
    assert_eq!(&r.wire.reply_to("r.b").unwrap().body[..], b"done");
    assert_eq!(start_to_end.len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_request_without_a_reply_subject_is_counted_and_never_posted() {
    let r = rig(4, Health::Healthy, answering(200, "ok", MS)).await;
    r.wire.send(0, "x", None);
    sleep(10 * MS).await;
    assert!(r.wire.replies().is_empty());
    assert!(r.app.asked.lock().unwrap().is_empty());
    r.assert_requests("no_reply", "create", 1);
}

#[tokio::test(start_paused = true)]
async fn past_the_wait_bound_in_requests_or_bytes_a_request_is_shed_with_503_at_once() {
    // One slot; at most 4 requests (1000 bytes) wait.
    let r = rig(1, Health::Healthy, answering(200, "ok", 100 * MS)).await;
    r.wire.send_each(0..7);
    let big = "y".repeat(2000);
    assert!(r.wire.send(1, &big, Some("r.big")));
    settle().await;
    assert!(
        r.wire.group.lock().unwrap().queue.is_empty(),
        "every request taken off the subscription at once"
    );
    let mut shed: Vec<String> = r.wire.replies().into_iter().map(|(t, _, _)| t).collect();
    shed.sort();
    assert_eq!(shed, ["r.5", "r.6", "r.big"], "one asks, four wait");
    for to in &shed {
        let v = r.wire.reply_to(to).unwrap();
        assert_eq!(header(&v, ERROR_CODE_HEADER), Some("503"));
        assert_eq!(header(&v, ERROR_HEADER), Some("too many requests waiting"));
    }
    sleep(1000 * MS).await;
    assert_eq!(r.wire.replies().len(), 8, "nothing lost");
    for i in 0..5 {
        let v = r.wire.reply_to(&format!("r.{i}")).unwrap();
        assert_eq!(&v.body[..], b"ok", "r.{i} waited and was served");
    }
    let asked: Vec<String> = r
        .app
        .asked
        .lock()
        .unwrap()
        .iter()
        .map(|(_, p)| p.clone())
        .collect();
    assert_eq!(asked.len(), 5, "in order, one at a time");
    r.assert_requests("shed", "create", 2);
    r.assert_requests("shed", "cancel", 1);
}

#[tokio::test(start_paused = true)]
async fn what_waits_gets_503_at_once_when_the_instance_leaves_or_drains() {
    let r = rig(1, Health::Healthy, answering(200, "ok", 1000 * MS)).await;
    r.wire.send_each(0..3);
    settle().await;
    r.health.send(Health::Unhealthy).unwrap();
    settle().await;
    for to in ["r.1", "r.2"] {
        let v = r.wire.reply_to(to).expect("answered at once");
        assert_eq!(header(&v, ERROR_HEADER), Some("the app is not healthy"));
    }
    r.health.send(Health::Healthy).unwrap();
    settle().await;
    r.wire.send_each(3..5);
    settle().await;
    r.shutdown.cancel();
    settle().await;
    for to in ["r.3", "r.4"] {
        let v = r.wire.reply_to(to).expect("answered at once");
        assert_eq!(header(&v, ERROR_HEADER), Some("the service is draining"));
    }
    assert!(r.wire.reply_to("r.0").is_none(), "still in flight");
    r.run.await.unwrap();
    assert_eq!(&r.wire.reply_to("r.0").unwrap().body[..], b"ok");
    assert_eq!(r.wire.replies().len(), 5);
}

#[tokio::test(start_paused = true)]
async fn a_drain_counts_the_requests_it_answered_as_settled() {
    let r = rig(1, Health::Healthy, answering(200, "ok", 1000 * MS)).await;
    r.wire.send(0, "x", Some("r.0"));
    r.wire.send(0, "x", Some("r.1"));
    r.wire.send(0, "x", None);
    settle().await;
    let before = r.metrics.tally();
    r.shutdown.cancel();
    r.run.await.unwrap();
    assert_eq!(r.wire.replies().len(), 2, "one served, one refused");
    assert_eq!(
        r.metrics.tally().since(before).settled,
        2,
        "r.0 served and r.1 (waiting) refused during the drain; the publish not counted"
    );
}
