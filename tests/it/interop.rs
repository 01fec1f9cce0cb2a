//! Interop with natsio-pcgroups (Python): groups created or driven by the other
//! implementation work with jetrelay and back, and one member can be served by a
//! Python instance and a jetrelay instance together.

use std::time::Duration;

use jetrelay::ops::readiness::State;

use crate::support::groups::*;
use crate::support::peer::{PeerMember, peer};
use crate::support::*;

const T: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_static_group_created_by_python_is_consumed_by_jetrelay_members() {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    let stream = unique("S");
    partitioned_stream(&js, &stream, "o", 2).await;
    assert_eq!(
        peer(
            nats.url(),
            &["create-static", &stream, "pycg", "2", "m1", "m2"]
        )
        .await,
        "ok"
    );
    let (app1, app2) = (MockApp::ok().await, MockApp::ok().await);
    let r1 = Relay::ready(member_config(
        &nats, &app1, "static", &stream, "pycg", "m1", "",
    ))
    .await;
    let r2 = Relay::ready(member_config(
        &nats, &app2, "static", &stream, "pycg", "m2", "",
    ))
    .await;
    assert_eq!(r1.health.status().partitions, [0]);
    assert_eq!(r2.health.status().partitions, [1]);
    publish_keys(&js, "o", 10, 3).await;
    eventually("all 30", T, || async {
        bodies(&[&app1, &app2]).len() == 30
    })
    .await;
    assert_key_order(&app1);
    assert_key_order(&app2);
    r1.stop().await.unwrap();
    r2.stop().await.unwrap();
}

#[tokio::test]
async fn an_elastic_group_created_by_jetrelay_is_read_and_consumed_by_python_and_python_membership_changes_are_followed()
 {
    let (nats, js, stream, admin) = elastic_group(2, &[]).await;
    admin.add(&stream, "eg", &["py".into()]).await.unwrap();
    let cfg: serde_json::Value =
        serde_json::from_str(&peer(nats.url(), &["config", "elastic", &stream, "eg"]).await)
            .unwrap();
    assert_eq!(
        cfg,
        serde_json::json!({"max_members": 2, "members": ["py"]})
    );

    // A Python member consumes the jetrelay-created group.
    let py = PeerMember::start(
        nats.url(),
        &["elastic", &stream, "eg", "py", "2000", "64", "10"],
    )
    .await;
    publish_keys(&js, "e", 6, 2).await;
    eventually("python got 12", T, || async { py.bodies().len() == 12 }).await;

    // A jetrelay member waits, then follows membership changes made from Python.
    let app = MockApp::ok().await;
    let rj = Relay::ready(member_config(
        &nats, &app, "elastic", &stream, "eg", "rs", "",
    ))
    .await;
    assert_eq!(rj.health.status().state, State::WaitingForMembership);
    let members = peer(nats.url(), &["add", &stream, "eg", "rs"]).await;
    assert!(members.contains("rs"), "{members}");
    eventually("jetrelay got a partition", T, || async {
        rj.health.status().partitions.len() == 1
    })
    .await;
    publish_keys(&js, "e", 6, 4).await;
    eventually("36 delivered between them", T, || async {
        let mut all: std::collections::BTreeSet<String> = py.bodies().into_iter().collect();
        all.extend(bodies(&[&app]));
        all.len() == 36
    })
    .await;
    assert!(!app.requests().is_empty(), "jetrelay was served");
    peer(nats.url(), &["drop", &stream, "eg", "rs"]).await;
    eventually("jetrelay waits again", T, || async {
        rj.health.status().state == State::WaitingForMembership
    })
    .await;
    assert_key_order(&app);
    py.kill().await;
    rj.stop().await.unwrap();
}

#[tokio::test]
async fn one_member_served_by_a_python_and_a_jetrelay_instance_fails_over_both_ways() {
    let (nats, js, stream, _) = static_group(1, &["m1"]).await;
    // The same template on both sides: ack_wait 2 s, max_ack_pending 256, max_deliver 10.
    let py = PeerMember::start(
        nats.url(),
        &["static", &stream, "cg", "m1", "2000", "256", "10"],
    )
    .await;
    publish_keys(&js, "o", 1, 1).await;
    eventually("python pinned and served", T, || async {
        py.bodies().len() == 1
    })
    .await;
    let app = MockApp::ok().await;
    let rj = Relay::ready(member_config(
        &nats, &app, "static", &stream, "cg", "m1", "",
    ))
    .await;
    assert_eq!(
        rj.health.status().state,
        State::Standby,
        "same consumer config: it joined as a standby"
    );
    publish_keys(&js, "o", 1, 3).await;
    eventually("python served 4", T, || async { py.bodies().len() == 4 }).await;
    assert!(app.requests().is_empty(), "exactly one instance is served");

    py.kill().await;
    publish_keys(&js, "o", 1, 2).await;
    eventually("jetrelay took over", Duration::from_secs(15), || async {
        bodies(&[&app]).len() == 2
    })
    .await;
    assert!(rj.health.status().pinned);

    // And back: a new Python instance becomes the standby; a clean jetrelay stop
    // unpins and the Python instance serves.
    let py2 = PeerMember::start(
        nats.url(),
        &["static", &stream, "cg", "m1", "2000", "256", "10"],
    )
    .await;
    rj.stop().await.unwrap();
    publish_keys(&js, "o", 1, 2).await;
    eventually("python serves again", Duration::from_secs(15), || async {
        py2.bodies().len() == 2
    })
    .await;
    py2.kill().await;
}
