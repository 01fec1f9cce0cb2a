//! Topology ownership: managed streams are created or extended, external ones never
//! touched, consumers ensured (also concurrently) or only bound, conflicts fatal, and
//! a daemon started before its stream becomes ready once the stream appears.

use std::time::Duration;

use async_nats::jetstream;
use jetrelay::daemon::DaemonError;
use jetrelay::daemon::settings::topology_request;
use jetrelay::nats::{Nats, TopologyError};
use jetrelay::source::error::SourceError;
use jetrelay::topology::StreamProblem;

use crate::support::*;

/// The topology error that stopped the one source (named `default`), which the
/// process's error names.
fn topology(err: &DaemonError) -> Option<&TopologyError> {
    match err {
        DaemonError::Source {
            name,
            error: SourceError::Topology(e),
        } if name == "default" => Some(e),
        _ => None,
    }
}

const T: Duration = Duration::from_secs(20);

fn managed(subjects: &str) -> String {
    format!(
        "[topology]\nstream = \"managed\"\n[topology.managed_stream]\nsubjects = {subjects}\nmax_msgs = 5000\n"
    )
}

#[tokio::test]
async fn a_managed_stream_is_created_from_config() {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    let app = MockApp::ok().await;
    let (stream, durable) = (unique("S"), unique("d"));
    let relay = Relay::start(durable_config(
        &nats,
        &app,
        &stream,
        &durable,
        &format!("{}allow_batched = true\n", managed("[\"m.>\"]")),
    ))
    .await;
    relay.wait_ready(T).await;
    let info = js.get_stream(&stream).await.unwrap().cached_info().clone();
    assert_eq!(info.config.subjects, ["m.>"]);
    assert_eq!(info.config.max_messages, 5000);
    assert!(
        info.config.allow_batch_publish,
        "`jetrelay dlq replay --fast` sends fast-ingest batches into it"
    );
    publish(&js, "m.1", 3).await;
    app.wait_for("3 requests", T, |r| r.len() == 3).await;
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn a_missing_subject_is_added_and_everything_else_stays() {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    let app = MockApp::ok().await;
    let (stream, durable) = (unique("S"), unique("d"));
    js.create_stream(jetstream::stream::Config {
        name: stream.clone(),
        subjects: vec!["old.>".into()],
        max_messages: 777,
        retention: jetstream::stream::RetentionPolicy::Limits,
        ..Default::default()
    })
    .await
    .unwrap();
    let relay = Relay::start(durable_config(
        &nats,
        &app,
        &stream,
        &durable,
        &managed("[\"new.>\", \"old.x\"]"),
    ))
    .await;
    relay.wait_ready(T).await;
    let info = js.get_stream(&stream).await.unwrap().cached_info().clone();
    assert_eq!(info.config.subjects, ["old.>", "new.>"]);
    assert_eq!(info.config.max_messages, 777, "limits are never changed");
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn an_external_stream_is_never_created() {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    let app = MockApp::ok().await;
    let (stream, durable) = (unique("S"), unique("d"));
    let cfg = durable_config(
        &nats,
        &app,
        &stream,
        &durable,
        "[topology]\non_missing = \"fail\"\n",
    );
    let relay = Relay::start(cfg).await;
    let err = relay.handle.await.unwrap().unwrap_err();
    assert!(
        matches!(
            topology(&err),
            Some(TopologyError::Stream(StreamProblem::Missing(s))) if *s == stream
        ),
        "{err}"
    );
    assert!(
        js.get_stream(&stream).await.is_err(),
        "the stream was created"
    );
}

#[tokio::test]
async fn an_external_stream_that_does_not_cover_the_filter_is_fatal_and_unchanged() {
    let app = MockApp::ok().await;
    let env = Env::start(&["a.>"]).await;
    let cfg = env.config(&app, "[source]\nfilter_subjects = [\"b.>\"]\n");
    let err = Relay::start(cfg).await.handle.await.unwrap().unwrap_err();
    assert!(
        matches!(topology(&err), Some(TopologyError::Stream(_))),
        "{err}"
    );
    let info = env
        .js
        .get_stream(&env.stream)
        .await
        .unwrap()
        .cached_info()
        .clone();
    assert_eq!(info.config.subjects, ["a.>"]);
    assert!(
        consumer_info(&env.js, &env.stream, &env.durable)
            .await
            .is_none()
    );
}

#[tokio::test]
async fn two_instances_ensuring_the_same_durable_at_once_both_succeed() {
    let app = MockApp::ok().await;
    let env = Env::start(&["c.>"]).await;
    let cfg = env.config(&app, "");
    let req = topology_request(&cfg);
    for _ in 0..5 {
        let (a, b) = (
            Nats::connect(&jetrelay::daemon::settings::connection(&cfg.nats), false)
                .await
                .unwrap(),
            Nats::connect(&jetrelay::daemon::settings::connection(&cfg.nats), false)
                .await
                .unwrap(),
        );
        let (ra, rb) = tokio::join!(a.ensure(&req), b.ensure(&req));
        ra.unwrap();
        rb.unwrap();
        let info = consumer_info(&env.js, &env.stream, &env.durable)
            .await
            .unwrap();
        assert_eq!(info.config.max_ack_pending, 256);
        env.js
            .get_stream(&env.stream)
            .await
            .unwrap()
            .delete_consumer(&env.durable)
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn bind_only_never_creates_the_consumer() {
    let app = MockApp::ok().await;
    let env = Env::start(&["c.>"]).await;
    let cfg = env.config(
        &app,
        "[topology]\nconsumer = \"bind\"\non_missing = \"fail\"\n",
    );
    let err = Relay::start(cfg).await.handle.await.unwrap().unwrap_err();
    assert!(
        matches!(topology(&err), Some(TopologyError::ConsumerMissing(_))),
        "{err}"
    );
    assert!(
        consumer_info(&env.js, &env.stream, &env.durable)
            .await
            .is_none()
    );
}

#[tokio::test]
async fn an_incompatible_consumer_stops_startup_and_is_left_alone() {
    let app = MockApp::ok().await;
    let env = Env::start(&["c.>"]).await;
    env.js
        .get_stream(&env.stream)
        .await
        .unwrap()
        .create_consumer(jetstream::consumer::pull::Config {
            durable_name: Some(env.durable.clone()),
            max_ack_pending: 1000,
            ..Default::default()
        })
        .await
        .unwrap();
    let err = Relay::start(env.config(&app, ""))
        .await
        .handle
        .await
        .unwrap()
        .unwrap_err();
    match topology(&err) {
        Some(TopologyError::Conflict { rows, table, .. }) => {
            assert!(rows.iter().any(|r| r.field == "max_ack_pending"
                && r.current == "1000"
                && r.required == "256"));
            assert!(table.contains("field"), "{table}");
        }
        _ => panic!("expected a conflict, got {err}"),
    }
    let info = consumer_info(&env.js, &env.stream, &env.durable)
        .await
        .unwrap();
    assert_eq!(
        info.config.max_ack_pending, 1000,
        "the consumer was changed"
    );
}

#[tokio::test]
async fn started_before_the_stream_exists_it_becomes_ready_when_it_appears() {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    let app = MockApp::ok().await;
    let (stream, durable) = (unique("S"), unique("d"));
    let cfg = durable_config(
        &nats,
        &app,
        &stream,
        &durable,
        "[topology]\nretry_initial_ms = 50\nretry_max_ms = 200\n",
    );
    let relay = Relay::start(cfg).await;
    eventually("waiting for the stream", T, || async {
        let s = relay.health.status();
        !s.ready && s.reason.contains("does not exist")
    })
    .await;
    let (code, body) = relay.get("/ready").await;
    assert_eq!(code, 503);
    assert!(body.contains("\"state\":\"not_ready\""), "{body}");
    create_stream(&js, &stream, &["late.>"]).await;
    relay.wait_ready(T).await;
    publish(&js, "late.x", 2).await;
    app.wait_for("2 requests", T, |r| r.len() == 2).await;
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn a_deleted_consumer_sends_the_daemon_back_to_topology_and_it_recovers() {
    let app = MockApp::ok().await;
    let env = Env::start(&["g.>"]).await;
    let cfg = env.config(&app, "[topology]\nretry_initial_ms = 50\n");
    let relay = Relay::ready(cfg).await;
    env.js
        .get_stream(&env.stream)
        .await
        .unwrap()
        .delete_consumer(&env.durable)
        .await
        .unwrap();
    // The daemon recreates it (ensure) and consumes what is published next.
    eventually("consumer recreated", T, || async {
        consumer_info(&env.js, &env.stream, &env.durable)
            .await
            .is_some()
    })
    .await;
    relay.wait_ready(T).await;
    publish(&env.js, "g.x", 3).await;
    app.wait_for("3 requests", T, |r| r.len() >= 3).await;
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn a_managed_dlq_stream_is_created_for_dead_letters_and_an_existing_one_left_alone() {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    let app = MockApp::start(|_, _| Reply::status(400)).await;
    let (stream, durable, dlq) = (unique("S"), unique("d"), unique("DLQ"));
    let extra = format!(
        "{}[dlq]\nsubject = \"{dlq}.letters\"\nstream = \"{dlq}\"\nmanage = true\n",
        managed("[\"dm.>\"]")
    );
    let relay = Relay::ready(durable_config(&nats, &app, &stream, &durable, &extra)).await;
    let info = js.get_stream(&dlq).await.unwrap().cached_info().clone();
    let c = &info.config;
    assert_eq!(c.subjects, [format!("{dlq}.letters")]);
    assert!(c.allow_direct, "jetrelay dlq reads it with direct gets");
    assert!(
        c.allow_batch_publish,
        "a --fast replay --to it takes batches"
    );
    assert_eq!(c.storage, jetstream::stream::StorageType::File);
    assert_eq!(c.max_age, Duration::from_secs(7 * 86_400));
    // Covers a letter's id past the ack wait of a TERM lost in a crash.
    assert_eq!(c.duplicate_window, Duration::from_secs(120));
    publish(&js, "dm.1", 2).await;
    eventually("two dead letters", T, || async {
        js.get_stream(&dlq)
            .await
            .is_ok_and(|s| s.cached_info().state.messages == 2)
    })
    .await;
    relay.stop().await.unwrap();

    // An existing DLQ stream that differs is left as it is (its missing subject
    // aside); check shows field / current / required.
    let other = unique("DLQ");
    js.create_stream(jetstream::stream::Config {
        name: other.clone(),
        subjects: vec![format!("{other}.old")],
        max_age: Duration::from_secs(3600),
        ..Default::default()
    })
    .await
    .unwrap();
    let extra = format!(
        "{}[dlq]\nsubject = \"{other}.letters\"\nstream = \"{other}\"\nmanage = true\n",
        managed("[\"dm.>\"]")
    );
    let config = durable_config(&nats, &app, &stream, &durable, &extra);
    let report = jetrelay::cli::check::check(&config).await.unwrap();
    let text = report.lines.join("\n");
    assert!(
        text.contains(&format!(
            "dlq stream {other}: would get the subjects [\"{other}.letters\"]"
        )),
        "{text}"
    );
    for row in ["max_age_ms", "3600000", "604800000", "allow_direct"] {
        assert!(text.contains(row), "{row} missing:\n{text}");
    }
    assert!(
        text.contains("does not answer direct gets, so `jetrelay dlq` cannot read it"),
        "{text}"
    );
    let relay = Relay::ready(config).await;
    let c = js
        .get_stream(&other)
        .await
        .unwrap()
        .cached_info()
        .config
        .clone();
    assert_eq!(
        c.subjects,
        [format!("{other}.old"), format!("{other}.letters")]
    );
    assert_eq!(c.max_age, Duration::from_secs(3600), "never changed");
    assert!(!c.allow_direct, "never changed");
    relay.stop().await.unwrap();
}
