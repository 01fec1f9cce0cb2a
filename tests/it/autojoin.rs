//! Elastic groups that scale themselves (`source.auto_join`): members that join and
//! leave the membership themselves with a publisher running, two joining at the same
//! instant, a killed member pruned after its timeout, a hand-added member never
//! pruned (a forged liveness marker included), a member cut off past its timeout
//! pruned on a cluster and back again, one that cannot write its liveness record
//! pruned and silent until it can (and taking no work from two beats into its
//! silence, before the prune), two instances of one member stopping cleanly.

use std::collections::BTreeSet;
use std::time::Duration;

use jetrelay::ops::readiness::State;

use crate::support::app::Reply;
use crate::support::daemon::Daemon;
use crate::support::groups::*;
use crate::support::*;

const T: Duration = Duration::from_secs(30);
const AUTO: &str = "[source]\nauto_join = true\nmember_timeout_ms = 3000\n";

async fn members(admin: &jetrelay::group::manage::GroupAdmin, stream: &str) -> BTreeSet<String> {
    admin
        .elastic_members(stream, "eg")
        .await
        .unwrap()
        .into_iter()
        .collect()
}

/// The membership, or nothing while it cannot be read (a stream leader being elected
/// after a node is lost).
async fn members_now(
    admin: &jetrelay::group::manage::GroupAdmin,
    stream: &str,
) -> Option<BTreeSet<String>> {
    admin
        .elastic_members(stream, "eg")
        .await
        .ok()
        .map(|m| m.into_iter().collect())
}

/// A connection to `urls` (comma-separated) and an R3 stream on `e.*` made through it
/// (retried while the cluster elects its meta leader).
async fn r3_stream(urls: &str) -> (async_nats::jetstream::Context, String) {
    use async_nats::jetstream;
    let addrs: Vec<async_nats::ServerAddr> = urls.split(',').map(|u| u.parse().unwrap()).collect();
    let js = jetstream::new(async_nats::connect(addrs).await.unwrap());
    let stream = unique("E");
    eventually("an R3 stream", T, || async {
        js.create_stream(jetstream::stream::Config {
            name: stream.clone(),
            subjects: vec!["e.*".into()],
            num_replicas: 3,
            ..Default::default()
        })
        .await
        .is_ok()
    })
    .await;
    (js, stream)
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

/// Waits until the elastic group's work-queue stream has taken in `total` messages
/// from `stream`. After a node of the cluster dies the server re-creates its sourcing
/// consumer on its own retry schedule (backing off under load), which is the server's
/// delay, not ours: the delivery waits that follow then measure only jetrelay.
async fn sourced(js: &async_nats::jetstream::Context, stream: &str, total: u64) {
    let group_stream = format!("{stream}-eg");
    eventually(
        "the group's stream sourced what was published",
        Duration::from_secs(120),
        || async {
            let mut s = match js.get_stream(&group_stream).await {
                Ok(s) => s,
                Err(_) => return false,
            };
            s.info().await.is_ok_and(|i| i.state.last_sequence >= total)
        },
    )
    .await;
}

#[tokio::test]
async fn members_join_and_leave_by_themselves_with_a_publisher_running_losing_nothing() {
    let (nats, js, stream, admin) = elastic_group(4, &[]).await;
    let (app_a, app_b) = (MockApp::ok().await, MockApp::ok().await);
    let ra = Relay::ready(member_config(
        &nats, &app_a, "elastic", &stream, "eg", "a", AUTO,
    ))
    .await;
    eventually("a joined and owns every partition", T, || async {
        ra.health.status().partitions == [0, 1, 2, 3]
    })
    .await;
    assert_eq!(members(&admin, &stream).await, set(&["a"]));
    let publisher = {
        let js = js.clone();
        tokio::spawn(async move {
            for _ in 0..30 {
                publish_keys(&js, "e", 8, 1).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    eventually("a delivers", T, || async { !app_a.requests().is_empty() }).await;
    let rb = Relay::ready(member_config(
        &nats, &app_b, "elastic", &stream, "eg", "b", AUTO,
    ))
    .await;
    eventually("b joined and took half", T, || async {
        rb.health.status().partitions.len() == 2 && ra.health.status().partitions.len() == 2
    })
    .await;
    assert_eq!(members(&admin, &stream).await, set(&["a", "b"]));
    // The publisher may be done by now: b's keys come again.
    publish_keys(&js, "e", 8, 2).await;
    eventually("b is served", T, || async { !app_b.requests().is_empty() }).await;
    // b stops cleanly: it drains, leaves, and a takes its partitions back.
    rb.stop().await.unwrap();
    assert_eq!(
        members(&admin, &stream).await,
        set(&["a"]),
        "b left before it exited"
    );
    eventually("a owns everything again", T, || async {
        ra.health.status().partitions == [0, 1, 2, 3]
    })
    .await;
    publisher.await.unwrap();
    eventually("all 256 delivered", T, || async {
        bodies(&[&app_a, &app_b]).len() == 256
    })
    .await;
    assert_key_order(&app_a);
    assert_key_order(&app_b);
    let delivered = app_a.requests().len() + app_b.requests().len();
    assert_eq!(
        delivered, 256,
        "a clean join and leave deliver nothing twice"
    );
    ra.stop().await.unwrap();
    assert!(members(&admin, &stream).await.is_empty(), "a left too");
}

#[tokio::test]
async fn a_joining_member_is_served_at_once_not_an_ack_wait_later() {
    // A long ack wait: the members' self-correcting tick is that far apart. The new
    // member's first try finds the partitions still held by the old consumer; it must
    // try again within moments, not on the next tick.
    let slow_tick = format!("{AUTO}[consumer]\nack_wait_ms = 20000\n");
    let (nats, js, stream, _admin) = elastic_group(4, &[]).await;
    // a settles what it holds (half a second each) before its consumer goes.
    let app = MockApp::start(|_, _| Reply::status(200).after(Duration::from_millis(500))).await;
    let app_b = MockApp::ok().await;
    let ra = Relay::ready(member_config(
        &nats, &app, "elastic", &stream, "eg", "a", &slow_tick,
    ))
    .await;
    publish_keys(&js, "e", 8, 5).await;
    eventually("a delivers", T, || async { !app.requests().is_empty() }).await;
    let rb = Relay::ready(member_config(
        &nats, &app_b, "elastic", &stream, "eg", "b", &slow_tick,
    ))
    .await;
    let joined = tokio::time::Instant::now();
    eventually("b is served within 5 s", Duration::from_secs(5), || async {
        !app_b.requests().is_empty()
    })
    .await;
    assert!(joined.elapsed() < Duration::from_secs(5));
    eventually("all 40", T, || async {
        bodies(&[&app, &app_b]).len() == 40
    })
    .await;
    ra.stop().await.unwrap();
    rb.stop().await.unwrap();
}

#[tokio::test]
async fn two_members_joining_at_the_same_instant_both_get_in() {
    let (nats, _js, stream, admin) = elastic_group(4, &[]).await;
    let app = MockApp::ok().await;
    let (ra, rb) = tokio::join!(
        Relay::start(member_config(
            &nats, &app, "elastic", &stream, "eg", "a", AUTO
        )),
        Relay::start(member_config(
            &nats, &app, "elastic", &stream, "eg", "b", AUTO
        )),
    );
    eventually("both are members", T, || async {
        members(&admin, &stream).await == set(&["a", "b"])
    })
    .await;
    eventually("each has two partitions", T, || async {
        ra.health.status().partitions.len() == 2 && rb.health.status().partitions.len() == 2
    })
    .await;
    ra.stop().await.unwrap();
    rb.stop().await.unwrap();
}

#[tokio::test]
async fn a_killed_member_is_pruned_after_its_timeout_and_a_hand_added_one_never() {
    let (nats, js, stream, admin) = elastic_group(4, &["hand"]).await;
    let (app_a, app_b) = (MockApp::ok().await, MockApp::ok().await);
    let ra = Relay::ready(member_config(
        &nats, &app_a, "elastic", &stream, "eg", "a", AUTO,
    ))
    .await;
    let text = format!(
        "[nats]\nservers = \"{}\"\n[source]\nstream = \"{stream}\"\nkind = \"elastic\"\ngroup = \"eg\"\nmember = \"b\"\n\
         auto_join = true\nmember_timeout_ms = 3000\n[consumer]\nack_wait_ms = 2000\n\
         [http]\nurl = \"{}\"\n[admin]\nlisten = \"127.0.0.1:0\"\n",
        nats.url(),
        app_b.url()
    );
    let mut b = Daemon::start(&text).await;
    eventually("b joined", T, || async {
        members(&admin, &stream).await == set(&["a", "b", "hand"])
    })
    .await;
    b.signal("KILL");
    b.wait_exit(Duration::from_secs(10)).await;
    let killed = tokio::time::Instant::now();
    eventually("b is pruned", T, || async {
        members(&admin, &stream).await == set(&["a", "hand"])
    })
    .await;
    let after = killed.elapsed();
    assert!(
        after >= Duration::from_secs(2),
        "pruned before its timeout: {after:?}"
    );
    // The record's TTL (3 s) and then the next beat of a (every second).
    assert!(after <= Duration::from_secs(8), "pruned late: {after:?}");
    // b's partitions come back to a and hand; what was published meanwhile arrives.
    eventually("a has its share", T, || async {
        ra.health.status().partitions.len() == 2
    })
    .await;
    // The hand-added member is silent (nothing runs it) and stays.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(members(&admin, &stream).await, set(&["a", "hand"]));
    // Eight keys cover all four partitions: a is served in each of its own, b's old
    // ones among them (b's consumer no longer covers them).
    publish_keys(&js, "e", 8, 2).await;
    let owned: BTreeSet<String> = ra
        .health
        .status()
        .partitions
        .iter()
        .map(u32::to_string)
        .collect();
    eventually("a is served in every partition it owns", T, || async {
        let served: BTreeSet<String> = app_a
            .requests()
            .iter()
            .filter_map(|r| r.header("nats-partition").map(str::to_string))
            .collect();
        served == owned
    })
    .await;
    assert_eq!(ra.health.status().state, State::Consuming);
    ra.stop().await.unwrap();
}

#[tokio::test]
async fn eight_concurrent_joins_and_leaves_never_lose_each_others_change() {
    let (nats, _js, stream, admin) = elastic_group(8, &["hand"]).await;
    let names: Vec<String> = (0..8).map(|i| format!("m{i}")).collect();
    // Each on its own connection, as separate pods would be.
    let mut admins = Vec::new();
    for _ in &names {
        admins.push(admin_at(nats.url()).await);
    }
    let joins = names
        .iter()
        .zip(&admins)
        .map(|(n, a)| a.add_member_if_absent(&stream, "eg", n));
    for r in futures::future::join_all(joins).await {
        assert!(r.unwrap(), "each join wrote once");
    }
    let mut want: BTreeSet<String> = names.iter().cloned().collect();
    want.insert("hand".into());
    assert_eq!(members(&admin, &stream).await, want);
    let leaves = names
        .iter()
        .zip(&admins)
        .map(|(n, a)| a.drop_member_if_present(&stream, "eg", n));
    for r in futures::future::join_all(leaves).await {
        assert!(r.unwrap());
    }
    assert_eq!(members(&admin, &stream).await, set(&["hand"]));
    // Again: nothing to write.
    assert!(
        !admin
            .drop_member_if_present(&stream, "eg", "m0")
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn a_python_member_follows_an_auto_joined_member_and_keeps_consuming_its_share() {
    use crate::support::peer::{PeerMember, peer};
    let (nats, js, stream, admin) = elastic_group(2, &["py"]).await;
    let py = PeerMember::start(
        nats.url(),
        &["elastic", &stream, "eg", "py", "2000", "64", "10"],
    )
    .await;
    publish_keys(&js, "e", 6, 2).await;
    eventually("python got 12", T, || async { py.bodies().len() == 12 }).await;
    // jetrelay joins by itself: Python reads the membership it wrote.
    let app = MockApp::ok().await;
    let rj = Relay::ready(member_config(
        &nats, &app, "elastic", &stream, "eg", "rs", AUTO,
    ))
    .await;
    eventually("jetrelay got a partition", T, || async {
        rj.health.status().partitions.len() == 1
    })
    .await;
    let cfg: serde_json::Value =
        serde_json::from_str(&peer(nats.url(), &["config", "elastic", &stream, "eg"]).await)
            .unwrap();
    assert_eq!(
        cfg,
        serde_json::json!({"max_members": 2, "members": ["py", "rs"]})
    );
    publish_keys(&js, "e", 6, 4).await;
    eventually("36 delivered between them", T, || async {
        let mut all: BTreeSet<String> = py.bodies().into_iter().collect();
        all.extend(bodies(&[&app]));
        all.len() == 36
    })
    .await;
    assert!(!app.requests().is_empty(), "jetrelay was served");
    // jetrelay leaves: Python takes every partition back and goes on.
    rj.stop().await.unwrap();
    assert_eq!(members(&admin, &stream).await, set(&["py"]));
    publish_keys(&js, "e", 6, 2).await;
    eventually("python consumes everything again", T, || async {
        let mut all: BTreeSet<String> = py.bodies().into_iter().collect();
        all.extend(bodies(&[&app]));
        all.len() == 48
    })
    .await;
    assert_key_order(&app);
    py.kill().await;
}

#[tokio::test]
async fn on_a_three_node_cluster_members_join_and_leave_under_load_losing_nothing() {
    let cluster = Cluster::start().await;
    let urls = cluster.urls();
    let (js, stream) = r3_stream(&urls).await;
    let admin = admin_at(&urls).await;
    create_elastic_eg(&admin, &stream, 6).await;
    let apps = [
        MockApp::ok().await,
        MockApp::ok().await,
        MockApp::ok().await,
    ];
    let config = |i: usize| {
        member_config_at(
            &urls,
            &apps[i],
            "elastic",
            &stream,
            "eg",
            &format!("m{i}"),
            AUTO,
        )
    };
    let r0 = Relay::ready(config(0)).await;
    let r1 = Relay::ready(config(1)).await;
    eventually("two members share six partitions", T, || async {
        r0.health.status().partitions.len() == 3 && r1.health.status().partitions.len() == 3
    })
    .await;
    let publisher = {
        let js = js.clone();
        tokio::spawn(async move {
            for _ in 0..40 {
                publish_keys(&js, "e", 12, 1).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    eventually("deliveries under way", T, || async {
        bodies(&[&apps[0], &apps[1]]).len() >= 60
    })
    .await;
    let r2 = Relay::ready(config(2)).await;
    eventually("the third joined: two partitions each", T, || async {
        [&r0, &r1, &r2]
            .iter()
            .all(|r| r.health.status().partitions.len() == 2)
    })
    .await;
    r1.stop().await.unwrap();
    eventually("m1 left: three each for m0 and m2", T, || async {
        r0.health.status().partitions.len() == 3 && r2.health.status().partitions.len() == 3
    })
    .await;
    assert_eq!(members(&admin, &stream).await, set(&["m0", "m2"]));
    publisher.await.unwrap();
    let all = [&apps[0], &apps[1], &apps[2]];
    eventually("all 480 delivered", T, || async {
        bodies(&all).len() == 480
    })
    .await;
    for app in all {
        assert_key_order(app);
    }
    let deliveries: usize = all.iter().map(|a| a.requests().len()).sum();
    assert_eq!(
        deliveries, 480,
        "a clean join and leave deliver nothing twice"
    );
    r0.stop().await.unwrap();
    r2.stop().await.unwrap();
}

#[tokio::test]
async fn a_member_cut_off_past_its_timeout_is_pruned_on_a_cluster_and_joins_again_when_back() {
    let mut cluster = Cluster::start_with(&["--no_advertise"]).await;
    // a and the publisher talk to n1 and n2, b only to n3: killing n3 cuts b off and
    // leaves a, the publisher and the R3 assets (stream, group store, liveness) running.
    let n3 = cluster.nodes[2].url().to_string();
    let a_urls = format!("{},{}", cluster.nodes[0].url(), cluster.nodes[1].url());
    let (js, stream) = r3_stream(&a_urls).await;
    let admin = admin_at(&a_urls).await;
    create_elastic_eg(&admin, &stream, 4).await;
    let (app_a, app_b) = (MockApp::ok().await, MockApp::ok().await);
    let ra = Relay::ready(member_config_at(
        &a_urls, &app_a, "elastic", &stream, "eg", "a", AUTO,
    ))
    .await;
    let rb = Relay::ready(member_config_at(
        &n3, &app_b, "elastic", &stream, "eg", "b", AUTO,
    ))
    .await;
    eventually("two members, two partitions each", T, || async {
        ra.health.status().partitions.len() == 2 && rb.health.status().partitions.len() == 2
    })
    .await;
    publish_keys(&js, "e", 8, 2).await;
    eventually("both served, 16 delivered", T, || async {
        bodies(&[&app_a, &app_b]).len() == 16
    })
    .await;
    assert!(!app_b.requests().is_empty(), "b had its share");

    // b is cut off from NATS: it stops, and a prunes it once its record expires.
    cluster.node("n3").kill();
    let cut = tokio::time::Instant::now();
    eventually("b is pruned", T, || async {
        members_now(&admin, &stream).await == Some(set(&["a"]))
    })
    .await;
    let after = cut.elapsed();
    assert!(
        after >= Duration::from_secs(2),
        "pruned before its timeout: {after:?}"
    );
    eventually("a owns every partition", T, || async {
        ra.health.status().partitions == [0, 1, 2, 3]
    })
    .await;
    let served_b = app_b.requests().len();
    publish_keys(&js, "e", 8, 2).await;
    sourced(&js, &stream, 32).await;
    eventually(
        "a delivers what was published while b was away",
        T,
        || async { bodies(&[&app_a, &app_b]).len() == 32 },
    )
    .await;
    assert_eq!(app_b.requests().len(), served_b, "b was cut off");

    // n3 is back: b finds itself out of the membership, joins again and is served.
    cluster.node("n3").start_again().await;
    eventually("b joined again", Duration::from_secs(60), || async {
        members_now(&admin, &stream).await == Some(set(&["a", "b"]))
    })
    .await;
    eventually(
        "b owns two partitions again",
        Duration::from_secs(60),
        || async {
            rb.health.status().partitions.len() == 2 && ra.health.status().partitions.len() == 2
        },
    )
    .await;
    // Ready once its liveness record is written again (the fence down), which may
    // come a moment after the membership shows it back.
    eventually("b consuming", T, || async {
        rb.health.status().state == State::Consuming
    })
    .await;
    publish_keys(&js, "e", 8, 2).await;
    sourced(&js, &stream, 48).await;
    eventually("b is served again, 48 delivered", T, || async {
        bodies(&[&app_a, &app_b]).len() == 48 && app_b.requests().len() > served_b
    })
    .await;
    assert_key_order(&app_a);
    assert_key_order(&app_b);
    ra.stop().await.unwrap();
    rb.stop().await.unwrap();
}

#[tokio::test]
async fn a_forged_auto_join_marker_never_gets_a_hand_added_member_pruned() {
    let (nats, js, stream, admin) = elastic_group(4, &["hand"]).await;
    let app = MockApp::ok().await;
    let ra = Relay::ready(member_config(
        &nats, &app, "elastic", &stream, "eg", "a", AUTO,
    ))
    .await;
    assert_eq!(members(&admin, &stream).await, set(&["a", "hand"]));
    // One forged marker: "hand" looks auto-joined and silent to the liveness bucket.
    let live = js.get_key_value("jetrelay-members").await.unwrap();
    let forged = format!("{stream}.eg.auto.hand");
    live.put(&forged, "".into()).await.unwrap();
    eventually("a's beats looked at the forged marker", T, || async {
        live.get(&forged).await.unwrap().is_none()
    })
    .await;
    assert_eq!(
        members(&admin, &stream).await,
        set(&["a", "hand"]),
        "a member added by hand stays, whatever the liveness bucket says"
    );
    // a itself was added by its auto-join: its record beside the config says so.
    let configs = js.get_key_value("elastic-consumer-groups").await.unwrap();
    assert!(
        configs
            .get(&format!("jetrelay/auto.{stream}.eg.a"))
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        configs
            .get(&format!("jetrelay/auto.{stream}.eg.hand"))
            .await
            .unwrap()
            .is_none()
    );
    ra.stop().await.unwrap();
    assert_eq!(members(&admin, &stream).await, set(&["hand"]));
}

#[tokio::test]
async fn two_instances_of_one_member_a_clean_stop_leaves_the_name_and_the_consumer_to_the_other() {
    let (nats, js, stream, admin) = elastic_group(4, &[]).await;
    let (app1, app2) = (MockApp::ok().await, MockApp::ok().await);
    let configs = js.get_key_value("elastic-consumer-groups").await.unwrap();
    let key = format!("{stream}.eg");
    let r1 = Relay::ready(member_config(
        &nats, &app1, "elastic", &stream, "eg", "a", AUTO,
    ))
    .await;
    let r2 = Relay::ready(member_config(
        &nats, &app2, "elastic", &stream, "eg", "a", AUTO,
    ))
    .await;
    eventually("both instances run member a", T, || async {
        r1.health.status().partitions.len() == 4 && r2.health.status().partitions.len() == 4
    })
    .await;
    publish_keys(&js, "e", 8, 2).await;
    eventually("16 delivered", T, || async {
        bodies(&[&app1, &app2]).len() == 16
    })
    .await;
    let revision = configs.entry(&key).await.unwrap().unwrap().revision;
    let consumer_stream = jetrelay::group::elastic_stream(&stream, "eg");
    let created = consumer_info(&js, &consumer_stream, "a")
        .await
        .unwrap()
        .created;
    // The instance that added the name stops cleanly while the other pulls.
    r1.stop().await.unwrap();
    assert_eq!(
        configs.entry(&key).await.unwrap().unwrap().revision,
        revision,
        "the membership was not written: the name never left"
    );
    let after = consumer_info(&js, &consumer_stream, "a").await;
    assert_eq!(
        after.map(|i| i.created),
        Some(created),
        "the consumer under the other instance stays"
    );
    publish_keys(&js, "e", 8, 2).await;
    eventually("the other instance delivers the rest", T, || async {
        bodies(&[&app1, &app2]).len() == 32
    })
    .await;
    // The other instance did not add the name: its clean stop leaves it too.
    r2.stop().await.unwrap();
    assert_eq!(
        configs.entry(&key).await.unwrap().unwrap().revision,
        revision
    );
    assert_eq!(members(&admin, &stream).await, set(&["a"]));
}

/// The server's config: every connection without credentials is `admin` (allowed
/// everything); `b` may not write its liveness record when `deny_b`.
fn auth_conf(deny_b: bool) -> String {
    let deny = if deny_b {
        r#", permissions: { publish: { deny: ["$KV.jetrelay-members.*.eg.live.b"] } }"#
    } else {
        ""
    };
    format!(
        "no_auth_user: admin\nauthorization {{ users: [\n  {{user: admin, password: admin}}\n  {{user: b, password: bpass{deny}}}\n] }}\n"
    )
}

/// A server with [`auth_conf`], an `e.*` stream and its elastic group `eg` of 4
/// partitions.
struct WithAuth {
    dir: tempfile::TempDir,
    nats: NatsServer,
    js: async_nats::jetstream::Context,
    stream: String,
    admin: jetrelay::group::manage::GroupAdmin,
}

impl WithAuth {
    async fn start() -> WithAuth {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("nats.conf");
        std::fs::write(&conf, auth_conf(false)).unwrap();
        std::fs::write(dir.path().join("b.pass"), "bpass").unwrap();
        let nats = NatsServer::start_with(&["-c", conf.to_str().unwrap()]).await;
        let (_, js) = client(&nats).await;
        let stream = unique("E");
        create_stream(&js, &stream, &["e.*"]).await;
        let admin = admin(&nats).await;
        create_elastic_eg(&admin, &stream, 4).await;
        WithAuth {
            dir,
            nats,
            js,
            stream,
            admin,
        }
    }

    /// Member b's extra config (auto-join, as user b), with `extra` after it.
    fn as_b(&self, extra: &str) -> String {
        format!(
            "{AUTO}[nats]\nuser = \"b\"\npassword_file = \"{}\"\n{extra}",
            self.dir.path().join("b.pass").display()
        )
    }

    /// Whether b may write its liveness record, from now on (a server reload).
    fn deny_b(&self, deny: bool) {
        std::fs::write(self.dir.path().join("nats.conf"), auth_conf(deny)).unwrap();
        self.nats.reload();
    }
}

#[tokio::test]
async fn a_member_that_cannot_write_its_liveness_record_stops_pulling_once_pruned_and_joins_again_when_it_can()
 {
    let w = WithAuth::start().await;
    let (nats, js, stream, admin) = (&w.nats, &w.js, &w.stream, &w.admin);
    let (app_a, app_b) = (MockApp::ok().await, MockApp::ok().await);
    let ra = Relay::ready(member_config(
        nats, &app_a, "elastic", stream, "eg", "a", AUTO,
    ))
    .await;
    let as_b = w.as_b("");
    let rb = Relay::ready(member_config(
        nats, &app_b, "elastic", stream, "eg", "b", &as_b,
    ))
    .await;
    eventually("two members, two partitions each", T, || async {
        ra.health.status().partitions.len() == 2 && rb.health.status().partitions.len() == 2
    })
    .await;
    publish_keys(js, "e", 8, 2).await;
    eventually("both served, 16 delivered", T, || async {
        bodies(&[&app_a, &app_b]).len() == 16
    })
    .await;
    assert!(!app_b.requests().is_empty(), "b had its share");

    // b may no longer write its liveness record: a prunes it once the record expires.
    w.deny_b(true);
    eventually("b is pruned", T, || async {
        members(admin, stream).await == set(&["a"])
    })
    .await;
    eventually("a owns every partition", T, || async {
        ra.health.status().partitions == [0, 1, 2, 3]
    })
    .await;
    eventually("b knows it is out", T, || async {
        rb.health.status().partitions.is_empty()
    })
    .await;
    let served_b = app_b.requests().len();
    for _ in 0..5 {
        publish_keys(js, "e", 8, 2).await;
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    eventually(
        "a delivers what was published after b was pruned",
        T,
        || async { bodies(&[&app_a, &app_b]).len() == 96 },
    )
    .await;
    assert_eq!(
        app_b.requests().len(),
        served_b,
        "b pulls nothing once pruned"
    );
    assert_eq!(
        app_a.requests().len() + app_b.requests().len(),
        96,
        "nothing delivered twice"
    );

    // b may write again: it joins again and is served.
    w.deny_b(false);
    eventually("b joined again", T, || async {
        members(admin, stream).await == set(&["a", "b"])
    })
    .await;
    eventually("b owns two partitions again", T, || async {
        rb.health.status().partitions.len() == 2 && ra.health.status().partitions.len() == 2
    })
    .await;
    publish_keys(js, "e", 8, 2).await;
    eventually("b is served again", T, || async {
        bodies(&[&app_a, &app_b]).len() == 112 && app_b.requests().len() > served_b
    })
    .await;
    assert_key_order(&app_a);
    assert_key_order(&app_b);
    ra.stop().await.unwrap();
    rb.stop().await.unwrap();
}

#[tokio::test]
async fn a_member_whose_liveness_writes_fail_stops_taking_work_before_the_others_prune_it() {
    let w = WithAuth::start().await;
    let (nats, js, stream, admin) = (&w.nats, &w.js, &w.stream, &w.admin);
    // b's app is slow, so that b always holds more than it has started: what a member
    // pruned while working would go on delivering.
    let app_a = MockApp::ok().await;
    let app_b = MockApp::start(|_, _| Reply::status(200).after(Duration::from_millis(50))).await;
    let ra = Relay::ready(member_config(
        nats, &app_a, "elastic", stream, "eg", "a", AUTO,
    ))
    .await;
    let as_b = w.as_b("[delivery]\nmax_in_flight = 2\n");
    let rb = Relay::ready(member_config(
        nats, &app_b, "elastic", stream, "eg", "b", &as_b,
    ))
    .await;
    eventually("two members, two partitions each", T, || async {
        ra.health.status().partitions.len() == 2 && rb.health.status().partitions.len() == 2
    })
    .await;
    // A publisher runs through what follows: 8 keys, 10 messages a key a second.
    let publisher = {
        let js = js.clone();
        tokio::spawn(async move {
            for _ in 0..100 {
                publish_keys(&js, "e", 8, 1).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    eventually("b is served", T, || async { app_b.requests().len() >= 5 }).await;
    // b may no longer write its liveness record.
    w.deny_b(true);
    eventually("b says it takes no work", T, || async {
        let s = rb.health.status();
        s.reason.contains("liveness record cannot be written")
    })
    .await;
    let fenced_at = app_b.requests().len();
    eventually("b is pruned", T, || async {
        members(admin, stream).await == set(&["a"])
    })
    .await;
    let pruned_at = app_b.requests().len();
    eventually("a owns every partition", T, || async {
        ra.health.status().partitions == [0, 1, 2, 3]
    })
    .await;
    publisher.await.unwrap();
    eventually("a delivers the rest", T, || async {
        bodies(&[&app_a, &app_b]).len() == 800
    })
    .await;
    // What b had started before the fence may end after it; nothing starts after the
    // prune (before, b delivered what it held, a pinned batch's worth, meanwhile
    // the partitions were a's).
    assert_eq!(
        app_b.requests().len(),
        pruned_at,
        "b started nothing once pruned (fenced at {fenced_at})"
    );
    assert!(
        pruned_at <= fenced_at + 2,
        "{fenced_at} at the fence, {pruned_at} at the prune"
    );
    assert_key_order(&app_a);
    // b may write again: it takes work again.
    w.deny_b(false);
    eventually("b owns two partitions again", T, || async {
        rb.health.status().partitions.len() == 2 && ra.health.status().partitions.len() == 2
    })
    .await;
    publish_keys(js, "e", 8, 2).await;
    eventually("b is served again", T, || async {
        app_b.requests().len() > pruned_at
    })
    .await;
    ra.stop().await.unwrap();
    rb.stop().await.unwrap();
}

#[tokio::test]
async fn a_member_whose_consumer_is_deleted_as_it_is_pruned_starts_nothing_more_of_what_it_holds() {
    let (nats, js, stream, admin) = elastic_group(2, &["a", "b"]).await;
    let app_a = MockApp::ok().await;
    let app_b = MockApp::start(|_, _| Reply::status(200).after(Duration::from_millis(400))).await;
    let one = "[delivery]\nmax_in_flight = 1\n";
    let ra = Relay::ready(member_config(
        &nats, &app_a, "elastic", &stream, "eg", "a", one,
    ))
    .await;
    let rb = Relay::ready(member_config(
        &nats, &app_b, "elastic", &stream, "eg", "b", one,
    ))
    .await;
    eventually("one partition each", T, || async {
        ra.health.status().partitions.len() == 1 && rb.health.status().partitions.len() == 1
    })
    .await;
    publish_keys(&js, "e", 8, 5).await;
    eventually("b is working through what it holds", T, || async {
        app_b.requests().len() >= 2
    })
    .await;
    // As a pruner does, its consumer first: b holds messages of a consumer that is gone.
    let consumer_stream = jetrelay::group::elastic_stream(&stream, "eg");
    js.get_stream(&consumer_stream)
        .await
        .unwrap()
        .delete_consumer("b")
        .await
        .unwrap();
    let at_delete = app_b.requests().len();
    admin
        .drop_members(&stream, "eg", &["b".to_string()])
        .await
        .unwrap();
    eventually("a delivers everything", T, || async {
        bodies(&[&app_a, &app_b]).len() == 40
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        app_b.requests().len() <= at_delete + 1,
        "b started what it held after its consumer was gone: {} then {}",
        at_delete,
        app_b.requests().len()
    );
    ra.stop().await.unwrap();
    rb.stop().await.unwrap();
}
