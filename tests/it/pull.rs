//! The pull engine on a `pinned_client` priority-group consumer: exactly one instance
//! is served, the pin survives a full buffer, and a pin taken away is noticed (423).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::consumer::{AckPolicy, PriorityPolicy, pull};
use jetrelay::app::headers::{Pass, RequestFormat};
use jetrelay::capacity::{Limits, PullTiming};
use jetrelay::config::NatsConfig;
use jetrelay::dispatch::Dispatch;
use jetrelay::http::app::{AppClient, ClientSettings};
use jetrelay::http::credentials::CredentialFiles;
use jetrelay::http::forward::{AnswerLimits, Forwarder, TargetSettings};
use jetrelay::nats::{Nats, Publisher, PullEvent, Puller, PullerConfig, Settler};
use jetrelay::ops::metrics::Metrics;
use jetrelay::ops::readiness::{Readiness, SourceReadiness, State};
use jetrelay::policy::{Policy, StatusSet};
use jetrelay::seam::Ordering;
use tokio_util::sync::CancellationToken;

use crate::support::*;

const T: Duration = Duration::from_secs(20);

async fn pinned_consumer(js: &async_nats::jetstream::Context, stream: &str, name: &str) {
    pinned_consumer_with_timeout(js, stream, name, Duration::from_secs(1)).await;
}

async fn pinned_consumer_with_timeout(
    js: &async_nats::jetstream::Context,
    stream: &str,
    name: &str,
    priority_timeout: Duration,
) {
    js.get_stream(stream)
        .await
        .unwrap()
        .create_consumer(pull::Config {
            durable_name: Some(name.to_string()),
            ack_policy: AckPolicy::Explicit,
            max_ack_pending: 2,
            priority_policy: PriorityPolicy::PinnedClient,
            priority_groups: vec!["PCG".into()],
            priority_timeout,
            ..Default::default()
        })
        .await
        .unwrap();
}

async fn connect(nats: &NatsServer) -> Nats {
    let cfg = NatsConfig {
        servers: vec![nats.url().to_string()],
        ..Default::default()
    };
    Nats::connect(&jetrelay::daemon::settings::connection(&cfg), false)
        .await
        .unwrap()
}

async fn puller(nats: &NatsServer, stream: &str, consumer: &str) -> Puller {
    connect(nats)
        .await
        .puller(PullerConfig {
            stream: stream.to_string(),
            consumer: consumer.to_string(),
            group: Some("PCG".into()),
            limits: Limits {
                max_batch: 2,
                max_buffered: 2,
                max_bytes: 1 << 20,
            },
            // Pulls expire well inside the 1 s pin timeout, so the pin is refreshed.
            timing: PullTiming {
                expires: Duration::from_millis(400),
                heartbeat: Duration::from_millis(100),
            },
            confirmed_acks: false,
            partitioned: false,
            origin_stream: None,
        })
        .await
        .unwrap()
}

/// `n` small messages held.
fn count(n: u32) -> jetrelay::capacity::Held {
    jetrelay::capacity::Held {
        messages: n,
        bytes: u64::from(n),
    }
}

/// Polls `p` with `held` for `d`, collecting events.
async fn poll_for(p: &mut Puller, held: u32, d: Duration) -> Vec<PullEvent> {
    let mut events = Vec::new();
    let deadline = tokio::time::Instant::now() + d;
    let held = count(held);
    while let Ok(ev) = tokio::time::timeout_at(deadline, p.next(held)).await {
        events.push(ev);
    }
    events
}

/// Polls until `n` messages arrived; returns their settlers and the other events.
async fn take_messages(p: &mut Puller, mut held: u32, n: usize) -> (Vec<Settler>, Vec<PullEvent>) {
    let (mut settlers, mut others) = (Vec::new(), Vec::new());
    while settlers.len() < n {
        match tokio::time::timeout(T, p.next(count(held)))
            .await
            .expect("messages")
        {
            PullEvent::Message(_, s) => {
                settlers.push(s);
                held += 1;
            }
            other => others.push(other),
        }
    }
    (settlers, others)
}

fn messages(events: &[PullEvent]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, PullEvent::Message(..)))
        .count()
}

#[tokio::test]
async fn one_instance_is_served_and_keeps_the_pin_through_a_full_buffer() {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    let (stream, consumer) = (unique("S"), unique("c"));
    create_stream(&js, &stream, &["p.>"]).await;
    pinned_consumer(&js, &stream, &consumer).await;
    publish(&js, "p.x", 4).await;

    let mut a = puller(&nats, &stream, &consumer).await;
    let (held, events) = take_messages(&mut a, 0, 2).await;
    assert!(a.pinned(), "the first puller got the pin");
    assert!(
        matches!(events[..], [PullEvent::Pinned(true)]),
        "{events:?}"
    );

    // B pulls as a standby while A holds a full buffer for 3 pin timeouts.
    let mut b = puller(&nats, &stream, &consumer).await;
    let stop = CancellationToken::new();
    let b_events = Arc::new(Mutex::new(Vec::new()));
    let b_task = {
        let (stop, b_events) = (stop.clone(), b_events.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = stop.cancelled() => return b,
                    ev = b.next(count(0)) => b_events.lock().unwrap().push(ev),
                }
            }
        })
    };
    let a_events = poll_for(&mut a, 2, Duration::from_secs(3)).await;
    assert_eq!(messages(&a_events), 0, "a full buffer gets nothing");
    assert!(a.pinned(), "the pin survived 3 pin timeouts of saturation");
    assert_eq!(
        messages(&b_events.lock().unwrap()),
        0,
        "the standby was never served"
    );

    // A frees its buffer: the rest comes to A, under the same pin.
    for s in held {
        s.ack().await.unwrap();
    }
    let (rest, events) = take_messages(&mut a, 0, 2).await;
    assert_eq!(rest.len(), 2);
    assert!(
        !events.iter().any(|e| matches!(e, PullEvent::Pinned(false))),
        "{events:?}"
    );
    stop.cancel();
    let b = b_task.await.unwrap();
    assert!(!b.pinned());
    assert_eq!(messages(&b_events.lock().unwrap()), 0);
}

#[tokio::test]
async fn a_standby_takes_over_when_the_pinned_instance_stops_and_is_unpinned() {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    let (stream, consumer) = (unique("S"), unique("c"));
    create_stream(&js, &stream, &["p.>"]).await;
    pinned_consumer(&js, &stream, &consumer).await;
    publish(&js, "p.x", 1).await;
    let mut a = puller(&nats, &stream, &consumer).await;
    let (held, _) = take_messages(&mut a, 0, 1).await;
    held[0].ack().await.unwrap();
    let mut b = puller(&nats, &stream, &consumer).await;

    // A steps down: it stops pulling, closes, and the pin is released.
    a.stop();
    drop(a.close().await);
    js.get_stream(&stream)
        .await
        .unwrap()
        .unpin_consumer(&consumer, "PCG")
        .await
        .unwrap();
    publish(&js, "p.x", 2).await;
    let (got, events) = take_messages(&mut b, 0, 2).await;
    assert_eq!(got.len(), 2);
    assert!(b.pinned());
    assert!(
        events.iter().any(|e| matches!(e, PullEvent::Pinned(true))),
        "{events:?}"
    );
}

#[tokio::test]
async fn a_pin_taken_away_is_noticed_and_regained() {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    let (stream, consumer) = (unique("S"), unique("c"));
    create_stream(&js, &stream, &["p.>"]).await;
    pinned_consumer(&js, &stream, &consumer).await;
    publish(&js, "p.x", 1).await;
    let mut a = puller(&nats, &stream, &consumer).await;
    let (held, _) = take_messages(&mut a, 0, 1).await;
    held[0].ack().await.unwrap();
    js.get_stream(&stream)
        .await
        .unwrap()
        .unpin_consumer(&consumer, "PCG")
        .await
        .unwrap();
    publish(&js, "p.x", 1).await;
    // The stale pin id gets a 423: the pin is dropped, then a new one is won.
    let (got, events) = take_messages(&mut a, 0, 1).await;
    assert_eq!(got.len(), 1);
    let pins: Vec<bool> = events
        .iter()
        .filter_map(|e| match e {
            PullEvent::Pinned(p) => Some(*p),
            _ => None,
        })
        .collect();
    assert_eq!(pins, [false, true], "{events:?}");
}

/// A dispatcher for one instance of a pinned member, delivering to `app`, whose app
/// health the test controls.
async fn instance(
    nats: &NatsServer,
    app: &MockApp,
    healthy: tokio::sync::watch::Receiver<jetrelay::seam::Health>,
) -> (
    Arc<Dispatch<Forwarder, Publisher, jetrelay::nats::MarkerStore>>,
    SourceReadiness,
) {
    if std::env::var_os("TEST_LOG").is_some() {
        jetrelay::ops::telemetry::init(jetrelay::ops::telemetry::LogFormat::Text, "jetrelay=debug");
    }
    let metrics = Metrics::new().unwrap();
    let process = Readiness::new(metrics.clone());
    // No supervisor mirrors the connection here: the puller's client is connected.
    process.set_nats_down(None);
    let metrics = metrics.source("default").unwrap();
    let health = process.source("default", Some("m1".into()), metrics.clone());
    let client = AppClient::new(&ClientSettings {
        tls_ca_file: None,
        tls_client: None,
        proxy: None,
        credentials: CredentialFiles::default(),
        signing: None,
        oauth2: None,
        pool: 4,
        unix_socket: None,
        version: Default::default(),
        max_concurrent_streams: 0,
    })
    .unwrap();
    let http = TargetSettings {
        url: app.url().parse().unwrap(),
        timeout: Duration::from_secs(5),
        pass: Pass::new(&[]),
        format: RequestFormat::Raw,
        limits: AnswerLimits {
            publish_bytes: 1024,
            publish_messages: 10,
        },
    };
    let live = jetrelay::dispatch::Live {
        forwarder: Forwarder::new(&client, &http).unwrap(),
        policy: Policy {
            retry: StatusSet::parse(&["5xx"]).unwrap(),
            term: StatusSet::parse(&["4xx"]).unwrap(),
            retry_initial: Duration::from_millis(100),
            retry_max: Duration::from_secs(1),
            retry_after_max: Duration::from_secs(1),
            max_attempts: None,
        },
        pace: jetrelay::pace::PaceSettings {
            adaptive: false,
            min_in_flight: 1,
            max_in_flight: 2,
            rate_per_s: 0,
            burst: 0,
        },
        batch: None,
        outputs: None,
        unhealthy_handover: Duration::from_millis(300),
        app_healthy: healthy,
        limits: jetrelay::capacity::Limits {
            max_batch: 8,
            max_buffered: 8,
            max_bytes: 1 << 20,
        },
        confirmed_acks: false,
        routes: Vec::new(),
        max_age: None,
        unwrap_cloudevents: false,
    };
    let (_live_tx, live) = tokio::sync::watch::channel(std::sync::Arc::new(live));
    let dispatch = Dispatch {
        live,
        publisher: connect(nats).await.publisher(),
        markers: None,
        metrics,
        readiness: health.clone(),
        budget: jetrelay::admission::Budget::off().member("default", 1),
        max_buffered: 8,
        deadline: jetrelay::seam::time::Deadline::new(Duration::from_secs(5)),
        letters_waiting_max: 4,
        tracer: jetrelay::ops::traces::Tracer::off(),
        pinned_mode: true,
        ordering: Ordering::None,
        progress_every: Duration::from_secs(10),
        dead_letters: None,
        server_pause: tokio::sync::watch::channel(jetrelay::seam::ServerPause::Running).1,
    };
    (Arc::new(dispatch), health)
}

#[tokio::test]
async fn an_instance_whose_app_stays_unhealthy_steps_down_and_a_standby_is_served() {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    let (stream, consumer) = (unique("S"), unique("c"));
    create_stream(&js, &stream, &["p.>"]).await;
    // A long pin timeout: only the step-down can move the pin within the test.
    pinned_consumer_with_timeout(&js, &stream, &consumer, Duration::from_secs(60)).await;
    let (app_a, app_b) = (MockApp::ok().await, MockApp::ok().await);
    let (health_a_tx, health_a_rx) = tokio::sync::watch::channel(jetrelay::seam::Health::Healthy);
    let (_health_b_tx, health_b_rx) = tokio::sync::watch::channel(jetrelay::seam::Health::Healthy);
    let stop = CancellationToken::new();

    let (a, status_a) = instance(&nats, &app_a, health_a_rx).await;
    let puller_a = puller(&nats, &stream, &consumer).await;
    let run_a = tokio::spawn({
        let stop = stop.clone();
        async move { a.run(puller_a, stop).await }
    });
    publish(&js, "p.x", 1).await;
    app_a.wait_for("A is served", T, |r| r.len() == 1).await;
    eventually("A pinned and consuming", T, || async {
        let s = status_a.status();
        s.pinned && s.state == State::Consuming
    })
    .await;

    let (b, status_b) = instance(&nats, &app_b, health_b_rx).await;
    let puller_b = puller(&nats, &stream, &consumer).await;
    let run_b = tokio::spawn({
        let stop = stop.clone();
        async move { b.run(puller_b, stop).await }
    });
    eventually("B is a standby", T, || async {
        status_b.status().state == State::Standby
    })
    .await;

    health_a_tx.send(jetrelay::seam::Health::Unhealthy).unwrap();
    eventually("A stepped down", T, || async { !status_a.status().pinned }).await;
    publish(&js, "p.x", 3).await;
    app_b.wait_for("B is served", T, |r| r.len() == 3).await;
    eventually("B pinned", T, || async { status_b.status().pinned }).await;
    assert_eq!(app_a.arrivals(), 1, "A got nothing after stepping down");
    assert_eq!(status_a.status().state, State::NotReady);

    stop.cancel();
    run_a.await.unwrap().unwrap();
    run_b.await.unwrap().unwrap();
}

/// What a handover's barrier relies on: the server answers a NAK sent as a request
/// (it takes a consumer's acks from a queue of their own, in the order they came, and
/// answers once it has taken it), and what was NAK'd comes back at the next pull, in
/// stream order.
#[tokio::test]
async fn a_confirmed_nak_is_answered_and_the_released_come_back_in_order() {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    let (stream, consumer) = (unique("S"), unique("c"));
    create_stream(&js, &stream, &["p.>"]).await;
    pinned_consumer(&js, &stream, &consumer).await;
    publish(&js, "p.x", 2).await;
    let mut a = puller(&nats, &stream, &consumer).await;
    let (held, _) = take_messages(&mut a, 0, 2).await;
    held[0].nak(Duration::ZERO).await.unwrap();
    held[1]
        .nak_confirmed(Duration::ZERO)
        .await
        .expect("the server answers a NAK sent as a request");
    let mut again = Vec::new();
    while again.len() < 2 {
        if let PullEvent::Message(d, _) = tokio::time::timeout(T, a.next(count(0))).await.unwrap() {
            again.push((d.stream_seq(), d.delivered()));
        }
    }
    assert_eq!(again, [(1, 2), (2, 2)]);
}

/// `next` is cancelled while its pull request waits for room in the client's queue
/// (the dispatcher's `select!`, batch delivery's `now_or_never`): the pull was never
/// sent, so it takes no room, and the next `next` pulls at once. It used to be
/// recorded before it was sent: it took all the room, and nothing was pulled until
/// the heartbeat it never got was missed (here 10.5 s; batch delivery in
/// `bench/markers` stalled seconds at a time).
#[tokio::test]
async fn a_pull_whose_send_is_cancelled_takes_no_room() {
    use futures::FutureExt as _;
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    let stream = unique("C");
    create_stream(&js, &stream, &["c.>"]).await;
    js.get_stream(&stream)
        .await
        .unwrap()
        .create_consumer(pull::Config {
            durable_name: Some("c".into()),
            ack_policy: AckPolicy::Explicit,
            ..Default::default()
        })
        .await
        .unwrap();
    publish(&js, "c.a", 10).await;
    let n = connect(&nats).await;
    // Connected as the puller sees it: else it sends nothing yet.
    n.state()
        .wait_for(|s| s.connected)
        .await
        .expect("the connection's state");
    let mut p = n
        .puller(PullerConfig {
            stream: stream.clone(),
            consumer: "c".into(),
            group: None,
            limits: Limits {
                max_batch: 10,
                max_buffered: 10,
                max_bytes: 1 << 20,
            },
            timing: PullTiming {
                expires: Duration::from_secs(30),
                heartbeat: Duration::from_secs(5),
            },
            confirmed_acks: false,
            partitioned: false,
            origin_stream: None,
        })
        .await
        .unwrap();
    // This task's cooperative budget spent on a channel of its own: every send that
    // polls it now is pending, the pull request's too, as with a full queue.
    let (tx, _rx) = tokio::sync::mpsc::channel::<()>(10_000);
    let mut spent = false;
    for _ in 0..10_000 {
        if tx.send(()).now_or_never().is_none() {
            spent = true;
            break;
        }
    }
    assert!(spent, "the budget was never spent");
    assert!(
        p.next(count(0)).now_or_never().is_none(),
        "the pull's send was pending"
    );
    assert_eq!(p.requested().messages, 0, "an unsent pull takes no room");
    let taken = tokio::time::timeout(Duration::from_secs(3), take_messages(&mut p, 0, 10)).await;
    assert!(
        taken.is_ok(),
        "pulled again at once, not after the missed heartbeat"
    );
}
