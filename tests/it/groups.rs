//! Partitioned consumer groups end to end: static and elastic members, membership
//! changes followed live, pinned failover between instances of one member.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use jetrelay::group::manage::AdminError;
use jetrelay::group::model::{GroupConfig, PartitioningFilter};
use jetrelay::nats::NatsError;
use jetrelay::ops::readiness::State;

use crate::support::groups::*;
use crate::support::*;

const T: Duration = Duration::from_secs(30);

#[tokio::test]
async fn static_members_share_the_partitions_in_order_and_stop_when_the_group_is_deleted() {
    let (nats, js, stream, admin) = static_group(2, &["m1", "m2"]).await;
    let (app1, app2) = (MockApp::ok().await, MockApp::ok().await);
    let r1 = Relay::ready(member_config(
        &nats, &app1, "static", &stream, "cg", "m1", "",
    ))
    .await;
    let r2 = Relay::ready(member_config(
        &nats, &app2, "static", &stream, "cg", "m2", "",
    ))
    .await;
    publish_keys(&js, "o", 10, 4).await;
    eventually("all 40 delivered", T, || async {
        bodies(&[&app1, &app2]).len() == 40
    })
    .await;
    for (app, p) in [(&app1, "0"), (&app2, "1")] {
        assert!(!app.requests().is_empty());
        assert!(
            app.requests()
                .iter()
                .all(|r| r.header("nats-partition") == Some(p)),
            "partition {p} only"
        );
        assert!(
            app.requests()
                .iter()
                .all(|r| r.header("nats-subject").unwrap().starts_with("o.")),
            "token stripped"
        );
        assert_key_order(app);
    }
    let (_, body) = r1.get("/ready").await;
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["state"], "consuming");
    assert_eq!(v["member"], "m1");
    assert_eq!(v["partitions"], serde_json::json!([0]));
    assert_eq!(v["pinned"], true);
    assert_eq!(r1.metric("jetrelay_partitions_assigned").await, 1.0);
    assert_eq!(r1.metric("jetrelay_pinned").await, 1.0);

    admin
        .remove(jetrelay::group::model::Flavour::Static, &stream, "cg")
        .await
        .unwrap();
    for r in [r1, r2] {
        tokio::time::timeout(T, r.handle)
            .await
            .expect("the member stops")
            .unwrap()
            .unwrap();
    }
    let consumers = js
        .get_stream(&stream)
        .await
        .unwrap()
        .consumer_names()
        .count()
        .await;
    assert_eq!(consumers, 0);
}

#[tokio::test]
async fn a_changed_or_hostile_static_config_keeps_the_consumer_and_says_why_until_it_is_back() {
    let (nats, js, stream, _) = static_group(1, &["m1", "m2"]).await;
    let app = MockApp::ok().await;
    // m2 is in the membership but N = 1 caps it out.
    let r2 = Relay::ready(member_config(
        &nats, &app, "static", &stream, "cg", "m2", "",
    ))
    .await;
    assert_eq!(r2.health.status().state, State::NoPartitions);
    let r1 = Relay::ready(member_config(
        &nats, &app, "static", &stream, "cg", "m1", "",
    ))
    .await;
    publish_keys(&js, "o", 3, 1).await;
    eventually("3 delivered", T, || async { bodies(&[&app]).len() == 3 }).await;

    let kv = js.get_key_value("static-consumer-groups").await.unwrap();
    let key = format!("{stream}.cg");
    let original = kv.get(&key).await.unwrap().unwrap();
    let not_ready_because = |r: &Relay, why: &'static str| {
        let mut status = r.health.subscribe();
        async move {
            tokio::time::timeout(T, status.wait_for(|s| !s.ready && s.reason.contains(why)))
                .await
                .unwrap_or_else(|_| panic!("not ready because {why}"))
                .unwrap()
                .clone()
        }
    };
    // Another membership, then a value that does not parse, then one a hostile writer
    // made to cost a 16 GiB allocation: each time not ready, with the reason.
    let hostile: [(&str, &'static str); 3] = [
        (r#"{"max_members":1,"members":["m1"]}"#, "changed"),
        ("not json", "the group config is invalid"),
        (
            r#"{"max_members":4294967295,"members":["m1"]}"#,
            "max members must be at most 100000",
        ),
    ];
    for (value, why) in hostile {
        kv.put(&key, value.into()).await.unwrap();
        for r in [&r1, &r2] {
            let s = not_ready_because(r, why).await;
            assert_eq!(s.state, State::NotReady, "{value}");
        }
        let consumers: Vec<String> = js
            .get_stream(&stream)
            .await
            .unwrap()
            .consumer_names()
            .try_collect()
            .await
            .unwrap();
        assert_eq!(
            consumers,
            ["cg-m1".to_string()],
            "the member consumer is kept"
        );
    }
    // 100 000 members: read, refused as a change, and the daemon stays responsive.
    let crowd: Vec<String> = (0..100_000).map(|i| format!("m{i}")).collect();
    let value = serde_json::json!({"max_members": 1, "members": crowd}).to_string();
    kv.put(&key, value.into()).await.unwrap();
    not_ready_because(&r1, "changed").await;
    publish_keys(&js, "o", 3, 1).await;

    // The original is back: consumption resumes where it stopped.
    kv.put(&key, original).await.unwrap();
    r1.wait_ready(T).await;
    eventually("the next 3 delivered", T, || async {
        bodies(&[&app]).len() == 6
    })
    .await;
    assert_eq!(app.requests().len(), 6, "nothing replayed");
    r2.wait_ready(T).await;
    assert_eq!(r2.health.status().state, State::NoPartitions);

    // A member started on a hostile config waits, not ready, for a valid one.
    kv.put(
        &key,
        r#"{"max_members":4294967295,"members":["m1"]}"#.into(),
    )
    .await
    .unwrap();
    let r3 = Relay::start(member_config(
        &nats, &app, "static", &stream, "cg", "m2", "",
    ))
    .await;
    not_ready_because(&r3, "max members must be at most 100000").await;
    let started = tokio::time::Instant::now();
    r1.stop().await.unwrap();
    r2.stop().await.unwrap();
    r3.stop().await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn elastic_members_follow_membership_changes_live_and_lose_nothing() {
    let (nats, js, stream, admin) = elastic_group(4, &[]).await;
    let (app_a, app_b) = (MockApp::ok().await, MockApp::ok().await);
    let ra = Relay::ready(member_config(
        &nats, &app_a, "elastic", &stream, "eg", "a", "",
    ))
    .await;
    assert_eq!(ra.health.status().state, State::WaitingForMembership);

    admin.add(&stream, "eg", &["a".into()]).await.unwrap();
    eventually("a consumes", T, || async {
        ra.health.status().state == State::Consuming || ra.health.status().partitions.len() == 4
    })
    .await;
    publish_keys(&js, "e", 8, 3).await;
    eventually("a got the first 24", T, || async {
        bodies(&[&app_a]).len() == 24
    })
    .await;

    let rb = Relay::ready(member_config(
        &nats, &app_b, "elastic", &stream, "eg", "b", "",
    ))
    .await;
    admin.add(&stream, "eg", &["b".into()]).await.unwrap();
    eventually("b has partitions", T, || async {
        rb.health.status().partitions == [2, 3]
    })
    .await;
    eventually("a gave two away", T, || async {
        ra.health.status().partitions == [0, 1]
    })
    .await;
    publish_keys(&js, "e", 8, 3).await;
    eventually("48 delivered", T, || async {
        bodies(&[&app_a, &app_b]).len() == 48
    })
    .await;
    eventually("b is served", T, || async { !app_b.requests().is_empty() }).await;

    admin
        .drop_members(&stream, "eg", &["a".into()])
        .await
        .unwrap();
    eventually("b owns everything", T, || async {
        rb.health.status().partitions == [0, 1, 2, 3]
    })
    .await;
    eventually("a waits", T, || async {
        ra.health.status().state == State::WaitingForMembership
    })
    .await;
    publish_keys(&js, "e", 8, 2).await;
    eventually("64 delivered", T, || async {
        bodies(&[&app_a, &app_b]).len() == 64
    })
    .await;
    assert_key_order(&app_a);
    assert_key_order(&app_b);

    // The consumer vanishes underneath b: it rejoins by itself (B15).
    let group_stream = format!("{stream}-eg");
    js.get_stream(&group_stream)
        .await
        .unwrap()
        .delete_consumer("b")
        .await
        .unwrap();
    eventually("b's consumer is back", T, || async {
        consumer_info(&js, &group_stream, "b").await.is_some()
    })
    .await;
    publish_keys(&js, "e", 8, 1).await;
    eventually("72 delivered", T, || async {
        bodies(&[&app_a, &app_b]).len() == 72
    })
    .await;
    ra.stop().await.unwrap();
    rb.stop().await.unwrap();
}

#[tokio::test]
async fn pinned_failover_between_instances_of_one_member() {
    let (nats, js, stream, _) = static_group(1, &["m1"]).await;
    let (app1, app2, app3) = (
        MockApp::ok().await,
        MockApp::ok().await,
        MockApp::ok().await,
    );
    let i1 = Relay::ready(member_config(
        &nats, &app1, "static", &stream, "cg", "m1", "",
    ))
    .await;
    publish_keys(&js, "o", 1, 1).await;
    eventually("i1 pinned", T, || async { i1.health.status().pinned }).await;
    let i2 = Relay::ready(member_config(
        &nats, &app2, "static", &stream, "cg", "m1", "",
    ))
    .await;
    let i3 = Relay::ready(member_config(
        &nats, &app3, "static", &stream, "cg", "m1", "",
    ))
    .await;
    assert_eq!(i2.health.status().state, State::Standby);
    publish_keys(&js, "o", 1, 5).await;
    eventually("6 delivered", T, || async { bodies(&[&app1]).len() == 6 }).await;
    assert!(
        app2.requests().is_empty() && app3.requests().is_empty(),
        "exactly one instance is served"
    );

    // SIGTERM-like stop: it settles, unpins, and a standby serves within about a second.
    i1.stop().await.unwrap();
    let stopped = tokio::time::Instant::now();
    publish_keys(&js, "o", 1, 1).await;
    eventually("a standby serves", T, || async {
        bodies(&[&app2, &app3]).len() == 1
    })
    .await;
    let handover = stopped.elapsed();
    assert!(
        handover < Duration::from_millis(1500),
        "handover after a clean stop took {handover:?}"
    );

    // Kill-like: the serving instance vanishes without cleanup; the other takes over
    // after about the pin timeout (ack_wait 2 s) plus a pull expiry.
    let (serving, other, other_app) = if i2.health.status().pinned {
        (i2, i3, &app3)
    } else {
        (i3, i2, &app2)
    };
    serving.handle.abort();
    drop(serving);
    publish_keys(&js, "o", 1, 1).await;
    eventually(
        "the last standby serves",
        Duration::from_secs(15),
        || async { !other_app.requests().is_empty() },
    )
    .await;
    assert!(other.health.status().pinned);
    other.stop().await.unwrap();
}

#[tokio::test]
async fn an_elastic_member_whose_partitions_did_not_move_keeps_its_consumer() {
    let (nats, js, stream, admin) = elastic_group(2, &[]).await;
    admin
        .add(&stream, "eg", &["a".into(), "b".into()])
        .await
        .unwrap();
    let app = MockApp::ok().await;
    let ra = Relay::ready(member_config(
        &nats, &app, "elastic", &stream, "eg", "a", "",
    ))
    .await;
    let group_stream = format!("{stream}-eg");
    eventually("a's consumer", T, || async {
        consumer_info(&js, &group_stream, "a").await.is_some()
    })
    .await;
    // Served, so pinned: a pinned instance is the one that would recreate.
    publish_keys(&js, "e", 4, 2).await;
    eventually("a consumes and is pinned", T, || async {
        !app.requests().is_empty() && ra.health.status().pinned
    })
    .await;
    let created = consumer_info(&js, &group_stream, "a")
        .await
        .unwrap()
        .created;
    // "c" sorts after a and b and N = 2 caps it out: a's partitions do not move (B4).
    admin.add(&stream, "eg", &["c".into()]).await.unwrap();
    admin
        .drop_members(&stream, "eg", &["c".into()])
        .await
        .unwrap();
    let before = app.requests().len();
    publish_keys(&js, "e", 4, 2).await;
    eventually("a still consumes", T, || async {
        app.requests().len() > before
    })
    .await;
    assert_eq!(
        consumer_info(&js, &group_stream, "a")
            .await
            .unwrap()
            .created,
        created,
        "the consumer was recreated"
    );
    ra.stop().await.unwrap();
}

#[tokio::test]
async fn a_purged_static_group_ends_its_members_cleanly() {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    let stream = unique("S");
    partitioned_stream(&js, &stream, "o", 1).await;
    admin(&nats)
        .await
        .create_static(
            &stream,
            "cg",
            GroupConfig::new_static(1, vec![], vec!["m1".into()], vec![]),
        )
        .await
        .unwrap();
    let app = MockApp::ok().await;
    let r = Relay::ready(member_config(
        &nats, &app, "static", &stream, "cg", "m1", "",
    ))
    .await;
    js.get_key_value("static-consumer-groups")
        .await
        .unwrap()
        .purge(format!("{stream}.cg"))
        .await
        .unwrap();
    tokio::time::timeout(T, r.handle)
        .await
        .expect("the member stops")
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn deleting_a_static_group_removes_exactly_its_consumers() {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    let stream = unique("S");
    partitioned_stream(&js, &stream, "o", 1).await;
    let admin = admin(&nats).await;
    for group in ["a", "a-b"] {
        admin
            .create_static(
                &stream,
                group,
                GroupConfig::new_static(1, vec![], vec!["m1".into()], vec![]),
            )
            .await
            .unwrap();
    }
    let app = MockApp::ok().await;
    let ra = Relay::ready(member_config(&nats, &app, "static", &stream, "a", "m1", "")).await;
    let rab = Relay::ready(member_config(
        &nats, &app, "static", &stream, "a-b", "m1", "",
    ))
    .await;
    admin
        .remove(jetrelay::group::model::Flavour::Static, &stream, "a")
        .await
        .unwrap();
    tokio::time::timeout(T, ra.handle)
        .await
        .expect("a's member stops")
        .unwrap()
        .unwrap();
    assert!(
        consumer_info(&js, &stream, "a-b-m1").await.is_some(),
        "group a-b kept its consumer (B18)"
    );
    assert!(consumer_info(&js, &stream, "a-m1").await.is_none());
    assert!(!rab.handle.is_finished());
    rab.stop().await.unwrap();
}

#[tokio::test]
async fn a_failed_elastic_create_leaves_no_config_behind() {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    let stream = unique("E");
    create_stream(&js, &stream, &["e.*"]).await;
    // Something else already uses the group stream's name.
    create_stream(&js, &format!("{stream}-eg"), &["other.>"]).await;
    let filters = vec![PartitioningFilter {
        filter: "e.*".into(),
        wildcards: vec![1],
    }];
    let err = admin(&nats)
        .await
        .create_elastic(&stream, "eg", GroupConfig::new_elastic(2, filters, -1, -1))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, AdminError::Nats(NatsError::GroupStreamExists(name)) if *name == format!("{stream}-eg")),
        "{err:?}"
    );
    let kv = js.get_key_value("elastic-consumer-groups").await;
    let entry = match kv {
        Ok(kv) => kv.get(format!("{stream}.eg")).await.unwrap(),
        Err(_) => None,
    };
    assert!(entry.is_none(), "no orphan config entry (B7)");
}

#[tokio::test]
async fn a_partition_move_settles_in_flight_work_before_the_consumer_is_replaced() {
    let (nats, js, stream, admin) = elastic_group(2, &[]).await;
    admin.add(&stream, "eg", &["a".into()]).await.unwrap();
    // a's app is slow: its requests are in flight when the partitions move.
    let app_a = MockApp::start(|_, _| Reply::status(200).after(Duration::from_millis(800))).await;
    let app_b = MockApp::ok().await;
    let ra = Relay::ready(member_config(
        &nats, &app_a, "elastic", &stream, "eg", "a", "",
    ))
    .await;
    let rb = Relay::ready(member_config(
        &nats, &app_b, "elastic", &stream, "eg", "b", "",
    ))
    .await;
    eventually("a consumes", T, || async {
        ra.health.status().partitions == [0, 1]
    })
    .await;
    publish_keys(&js, "e", 8, 2).await;
    eventually("requests in flight at a", T, || async {
        app_a.arrivals() >= 2
    })
    .await;
    admin.add(&stream, "eg", &["b".into()]).await.unwrap();
    eventually("all 16 answered", T, || async {
        bodies(&[&app_a, &app_b]).len() == 16
    })
    .await;
    eventually("everything acked", T, || async {
        consumer_info(&js, &format!("{stream}-eg"), "a")
            .await
            .is_none_or(|i| i.num_ack_pending == 0)
            && consumer_info(&js, &format!("{stream}-eg"), "b")
                .await
                .is_none_or(|i| i.num_ack_pending == 0)
    })
    .await;
    // Nothing that a's app answered was handed to anyone again: its in-flight
    // requests finished and were acked before its consumer was replaced (B16).
    let answered: Vec<String> = [&app_a, &app_b]
        .iter()
        .flat_map(|a| a.requests())
        .filter(|r| r.status == 200)
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .collect();
    let unique_count = answered
        .iter()
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    assert_eq!(
        answered.len(),
        unique_count,
        "a message was processed twice: {answered:?}"
    );
    assert_eq!(ra.metric("jetrelay_ack_failures_total").await, 0.0);
    ra.stop().await.unwrap();
    rb.stop().await.unwrap();
}

#[tokio::test]
async fn a_static_group_whose_size_differs_from_the_streams_partitions_is_refused() {
    // B9: the stream's transform partitions into 4; a group of 8 would leave half of
    // its partitions empty and its members idle.
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    let stream = unique("S");
    partitioned_stream(&js, &stream, "o", 4).await;
    let admin = admin(&nats).await;
    let members = vec!["m1".to_string(), "m2".to_string()];
    let err = admin
        .create_static(
            &stream,
            "cg",
            GroupConfig::new_static(8, vec![], members.clone(), vec![]),
        )
        .await
        .unwrap_err();
    assert!(matches!(&err, AdminError::Invalid(_)), "{err:?}");
    assert!(
        err.to_string()
            .contains("partitions its subjects into 4, not 8"),
        "{err}"
    );
    // Nothing was written.
    let kv = js.get_key_value("static-consumer-groups").await;
    if let Ok(kv) = kv {
        assert!(kv.get(format!("{stream}.cg")).await.unwrap().is_none());
    }
    admin
        .create_static(
            &stream,
            "cg",
            GroupConfig::new_static(4, vec![], members, vec![]),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn concurrent_membership_changes_from_several_admins_all_land() {
    // X13: eight administrators add one member each at the same time; the
    // compare-and-set loop re-reads and re-applies, so no write is lost.
    let (nats, js, stream, _) = elastic_group(16, &[]).await;
    let mut admins = Vec::new();
    for _ in 0..8 {
        admins.push(admin(&nats).await);
    }
    let adds = admins.iter().enumerate().map(|(i, a)| {
        let stream = stream.clone();
        async move { a.add(&stream, "eg", &[format!("w{i}")]).await }
    });
    for r in futures::future::join_all(adds).await {
        r.unwrap();
    }
    let kv = js.get_key_value("elastic-consumer-groups").await.unwrap();
    let stored: serde_json::Value =
        serde_json::from_slice(&kv.get(format!("{stream}.eg")).await.unwrap().unwrap()).unwrap();
    let want: Vec<String> = (0..8).map(|i| format!("w{i}")).collect();
    assert_eq!(stored["members"], serde_json::json!(want));

    // Concurrent creates of one group with different sizes: exactly one wins, the
    // others are told it exists, and the stored config is the winner's, whole.
    let creates = admins.iter().enumerate().map(|(i, a)| {
        let stream = stream.clone();
        async move {
            let filters = vec![PartitioningFilter {
                filter: "e.*".into(),
                wildcards: vec![1],
            }];
            let n = 2 + i as u32;
            (
                n,
                a.create_elastic(
                    &stream,
                    "race",
                    GroupConfig::new_elastic(n, filters, -1, -1),
                )
                .await,
            )
        }
    });
    let results = futures::future::join_all(creates).await;
    let winners: Vec<u32> = results
        .iter()
        .filter(|(_, r)| r.is_ok())
        .map(|(n, _)| *n)
        .collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    let stored: serde_json::Value =
        serde_json::from_slice(&kv.get(format!("{stream}.race")).await.unwrap().unwrap()).unwrap();
    assert_eq!(stored["max_members"], winners[0]);
    // And the group's stream partitions by the winner's size.
    let info = js
        .get_stream(format!("{stream}-race"))
        .await
        .unwrap()
        .cached_info()
        .clone();
    let dest = &info.config.sources.as_ref().unwrap()[0].subject_transforms[0].destination;
    assert!(
        dest.contains(&format!("Partition({},", winners[0])),
        "{dest}"
    );
}

#[tokio::test]
async fn an_elastic_member_tells_the_app_the_origin_stream_and_sequence() {
    let (nats, js, stream, _admin) = elastic_group(2, &["a"]).await;
    let app = MockApp::ok().await;
    let relay = Relay::ready(member_config(
        &nats, &app, "elastic", &stream, "eg", "a", "",
    ))
    .await;
    // Messages outside the group's filter first, so that the origin sequences differ
    // from the work-queue stream's.
    let mut config = js
        .get_stream(&stream)
        .await
        .unwrap()
        .cached_info()
        .config
        .clone();
    config.subjects.push("z.*".into());
    js.update_stream(config).await.unwrap();
    publish(&js, "z.y", 3).await;
    let mut origin_seq = std::collections::HashMap::new();
    for i in 0..5 {
        let ack = js
            .publish(format!("e.k{i}"), format!("o{i}").into())
            .await
            .unwrap()
            .await
            .unwrap();
        origin_seq.insert(format!("o{i}"), ack.sequence);
    }
    app.wait_for("5 requests", T, |r| r.len() == 5).await;
    for r in app.requests() {
        let body = String::from_utf8_lossy(&r.body).into_owned();
        assert_eq!(
            r.header("nats-stream"),
            Some(format!("{stream}-eg").as_str())
        );
        assert_eq!(
            r.header("nats-origin-stream"),
            Some(stream.as_str()),
            "{body}"
        );
        assert_eq!(
            r.header("nats-origin-sequence"),
            Some(origin_seq[&body].to_string().as_str()),
            "{body}"
        );
        assert!(r.header("nats-stream-source").is_none());
    }
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn a_group_store_that_cannot_be_reached_is_unavailable_not_missing() {
    // A server without JetStream answers no stream info at all: a failure to ask, as
    // a stream leader being elected is, must not be read as "the group is deleted".
    let plain = NatsServer::start_with(&["-js=false"]).await;
    let cfg = jetrelay::config::NatsConfig {
        servers: vec![plain.url().to_string()],
        request_timeout_ms: 500,
        ..Default::default()
    };
    let nats = jetrelay::nats::Nats::connect(&jetrelay::daemon::settings::connection(&cfg), false)
        .await
        .unwrap();
    let open = nats.group_store("elastic-group-configs").await;
    assert!(open.is_err(), "unreachable taken for missing: {open:?}");
    // On a JetStream server, a bucket that is not there is missing.
    let js_server = NatsServer::start().await;
    let nats = jetrelay::nats::Nats::connect(
        &jetrelay::daemon::settings::connection(&jetrelay::config::NatsConfig {
            servers: vec![js_server.url().to_string()],
            ..Default::default()
        }),
        false,
    )
    .await
    .unwrap();
    assert!(nats.group_store("no-such-bucket").await.unwrap().is_none());
}
