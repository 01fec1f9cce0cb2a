//! Run-time control as an operator uses it: `jetrelay pause` and `jetrelay resume`
//! (the built binary, a config file) against running daemons, restarts of the daemon
//! and of the server, a group-wide pause, an elastic rebalance while paused; SIGHUP
//! reloads that apply, refuse and fail validation, and `check --diff-running`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::app::Reply;
use crate::support::daemon::Daemon;
use crate::support::groups::{elastic_group, static_group};
use crate::support::{Env, MockApp, NatsServer, Relay, consumer_info, eventually, publish};

/// A config file in a directory that lives as long as the value.
struct ConfigFile {
    dir: tempfile::TempDir,
    text: String,
}

impl ConfigFile {
    fn new(text: String) -> ConfigFile {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("jetrelay.toml"), &text).unwrap();
        ConfigFile { dir, text }
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join("jetrelay.toml")
    }

    fn config(&self) -> jetrelay::config::Config {
        jetrelay::config::Config::from_toml(&[&self.text]).unwrap()
    }
}

fn durable_text(nats: &NatsServer, app: &MockApp, stream: &str, durable: &str) -> String {
    format!(
        "[nats]\nservers = \"{}\"\n[source]\nstream = \"{stream}\"\nkind = \"durable\"\ndurable = \"{durable}\"\n\
         [consumer]\nack_wait_ms = 4000\n[delivery]\nordering = \"subject\"\n[topology]\nretry_initial_ms = 50\nretry_max_ms = 200\n\
         [http]\nurl = \"{}\"\n[admin]\nlisten = \"127.0.0.1:0\"\n[log]\nlevel = \"warn\"\n",
        nats.url(),
        app.url()
    )
}

fn member_text(
    nats: &NatsServer,
    app: &MockApp,
    kind: &str,
    stream: &str,
    group: &str,
    member: &str,
) -> String {
    format!(
        "[nats]\nservers = \"{}\"\n[source]\nstream = \"{stream}\"\nkind = \"{kind}\"\ngroup = \"{group}\"\nmember = \"{member}\"\n\
         [consumer]\nack_wait_ms = 2000\n[topology]\nretry_initial_ms = 50\nretry_max_ms = 200\n\
         [http]\nurl = \"{}\"\n[admin]\nlisten = \"127.0.0.1:0\"\n[log]\nlevel = \"warn\"\n",
        nats.url(),
        app.url()
    )
}

/// A config file and a ready relay for each of `members` of static group `cg`.
async fn static_members(
    nats: &NatsServer,
    app: &MockApp,
    stream: &str,
    members: &[&str],
) -> (Vec<ConfigFile>, Vec<Relay>) {
    let files: Vec<ConfigFile> = members
        .iter()
        .map(|m| ConfigFile::new(member_text(nats, app, "static", stream, "cg", m)))
        .collect();
    let mut relays = Vec::new();
    for f in &files {
        relays.push(Relay::ready(f.config()).await);
    }
    (files, relays)
}

/// `jetrelay <args> --config <file>`: exit code, stdout, stderr.
async fn jetrelay(config: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let config = config.as_os_str();
    let args = args.iter().map(std::ffi::OsStr::new);
    crate::support::daemon::run_bin(args.chain([std::ffi::OsStr::new("--config"), config])).await
}

async fn ok(config: &Path, args: &[&str]) -> String {
    let (code, out, err) = jetrelay(config, args).await;
    assert_eq!(code, Some(0), "jetrelay {args:?}: {out}{err}");
    out
}

async fn state(relay: &Relay) -> (u16, serde_json::Value) {
    let (code, body) = relay.get("/ready").await;
    (code, serde_json::from_str(&body).unwrap())
}

async fn wait_state(relay: &Relay, want: &str) -> serde_json::Value {
    eventually(
        &format!("/ready says {want}"),
        Duration::from_secs(5),
        || async { state(relay).await.1["state"] == want },
    )
    .await;
    let (code, body) = state(relay).await;
    assert_eq!(code, 200, "{want} is ready: {body}");
    body
}

/// Nothing reaches the app for a while (the pause holds).
async fn nothing_more(app: &MockApp, for_: Duration) {
    let before = app.requests().len();
    tokio::time::sleep(for_).await;
    assert_eq!(app.requests().len(), before, "delivered while paused");
}

/// Every published sequence reached the app exactly once, in stream order.
fn once_each_in_order(app: &MockApp, n: usize) {
    let seqs: Vec<u64> = app.requests().iter().map(|r| r.seq()).collect();
    assert_eq!(seqs.len(), n, "each message once: {seqs:?}");
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "in order: {seqs:?}");
}

#[tokio::test]
async fn pause_and_resume_through_the_cli_with_a_publisher_running() {
    let env = Env::start(&["p.>"]).await;
    let app = MockApp::ok().await;
    let file = ConfigFile::new(durable_text(&env.nats, &app, &env.stream, &env.durable));
    let relay = Relay::ready(file.config()).await;
    let js = env.js.clone();
    let publisher = tokio::spawn(async move {
        for i in 0..200 {
            js.publish("p.one", format!("m{i}").into())
                .await
                .unwrap()
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    app.wait_for("some deliveries", Duration::from_secs(10), |r| {
        r.len() >= 20
    })
    .await;
    let out = ok(&file.path(), &["pause"]).await;
    assert!(
        out.contains(&format!("paused {} > {}", env.stream, env.durable))
            && out.contains("until resumed"),
        "{out}"
    );
    let body = wait_state(&relay, "paused").await;
    assert!(
        body["reason"]
            .as_str()
            .unwrap()
            .contains("until resumed (jetrelay resume)"),
        "{body}"
    );
    assert_eq!(relay.metric("jetrelay_paused").await, 1.0);
    // What was in flight finishes; then nothing comes while the publisher goes on.
    tokio::time::sleep(Duration::from_millis(300)).await;
    nothing_more(&app, Duration::from_secs(2)).await;
    let paused_at = app.requests().len();
    assert!(paused_at < 200, "the pause came too late to show anything");
    publisher.await.unwrap();
    let out = ok(&file.path(), &["resume", "--json"]).await;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["action"], "resume");
    assert_eq!(v["consumers"][0]["paused"], false, "{v}");
    app.wait_for("all 200", Duration::from_secs(10), |r| r.len() >= 200)
        .await;
    wait_state(&relay, "consuming").await;
    once_each_in_order(&app, 200);
    assert_eq!(relay.metric("jetrelay_redeliveries_total").await, 0.0);
    assert_eq!(relay.metric("jetrelay_paused").await, 0.0);
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn a_pause_survives_a_restart_of_jetrelay_and_of_the_server() {
    let mut env = Env::start(&["p.>"]).await;
    let app = MockApp::ok().await;
    let file = ConfigFile::new(durable_text(&env.nats, &app, &env.stream, &env.durable));
    let relay = Relay::ready(file.config()).await;
    publish(&env.js, "p.a", 5).await;
    app.wait_for("the first five", Duration::from_secs(10), |r| r.len() == 5)
        .await;
    let out = ok(&file.path(), &["pause", "--for", "10m", "--json"]).await;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["consumers"][0]["paused"], true, "{v}");
    assert!(v["consumers"][0]["until"].as_str().is_some(), "{v}");
    wait_state(&relay, "paused").await;
    relay.stop().await.unwrap();

    // jetrelay restarts: still paused, nothing delivered.
    let relay = Relay::start(file.config()).await;
    let body = wait_state(&relay, "paused").await;
    assert!(
        body["reason"]
            .as_str()
            .unwrap()
            .starts_with("paused on the server until 20"),
        "{body}"
    );
    publish(&env.js, "p.a", 5).await;
    nothing_more(&app, Duration::from_secs(2)).await;

    // The server restarts (same store): still paused.
    env.nats.restart().await;
    let (_, js) = crate::support::client(&env.nats).await;
    eventually("the consumer is back", Duration::from_secs(20), || async {
        consumer_info(&js, &env.stream, &env.durable)
            .await
            .is_some()
    })
    .await;
    let info = consumer_info(&js, &env.stream, &env.durable).await.unwrap();
    assert!(info.paused, "the pause is the consumer's: {info:?}");
    wait_state(&relay, "paused").await;
    nothing_more(&app, Duration::from_secs(2)).await;

    ok(&file.path(), &["resume"]).await;
    app.wait_for("all ten", Duration::from_secs(15), |r| r.len() >= 10)
        .await;
    wait_state(&relay, "consuming").await;
    once_each_in_order(&app, 10);
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn all_members_pauses_and_resumes_a_whole_static_group() {
    let (nats, js, stream, _admin) = static_group(2, &["m1", "m2"]).await;
    let app = MockApp::ok().await;
    let (files, relays) = static_members(&nats, &app, &stream, &["m1", "m2"]).await;
    let out = ok(&files[0].path(), &["pause", "--all-members", "--json"]).await;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let paused: BTreeSet<&str> = v["consumers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["paused"] == true)
        .map(|c| c["member"].as_str().unwrap())
        .collect();
    assert_eq!(paused, BTreeSet::from(["m1", "m2"]), "{v}");
    for r in &relays {
        wait_state(r, "paused").await;
    }
    crate::support::groups::publish_keys(&js, "o", 4, 5).await;
    nothing_more(&app, Duration::from_secs(2)).await;
    ok(&files[1].path(), &["resume", "--all-members"]).await;
    app.wait_for("all twenty", Duration::from_secs(15), |r| r.len() >= 20)
        .await;
    for r in relays {
        wait_state(&r, "consuming").await;
        r.stop().await.unwrap();
    }
    assert_eq!(app.requests().len(), 20, "each message once");
}

#[tokio::test]
async fn an_elastic_members_replaced_consumer_stays_paused() {
    let (nats, js, stream, admin) = elastic_group(4, &["m1"]).await;
    let app = MockApp::ok().await;
    let file = ConfigFile::new(member_text(&nats, &app, "elastic", &stream, "eg", "m1"));
    let relay = Relay::ready(file.config()).await;
    let consumer_stream = jetrelay::group::elastic_stream(&stream, "eg");
    ok(&file.path(), &["pause"]).await;
    wait_state(&relay, "paused").await;
    let before = consumer_info(&js, &consumer_stream, "m1").await.unwrap();
    // A second member: m1's partitions change and its consumer is replaced.
    admin.add(&stream, "eg", &["m2".to_string()]).await.unwrap();
    eventually(
        "m1's consumer is replaced",
        Duration::from_secs(20),
        || async {
            consumer_info(&js, &consumer_stream, "m1")
                .await
                .is_some_and(|i| i.created != before.created)
        },
    )
    .await;
    let after = consumer_info(&js, &consumer_stream, "m1").await.unwrap();
    assert!(
        after.paused,
        "the replacement is paused: {:?}",
        after.config
    );
    assert_eq!(after.config.pause_until, before.config.pause_until);
    wait_state(&relay, "paused").await;
    crate::support::groups::publish_keys(&js, "e", 4, 3).await;
    nothing_more(&app, Duration::from_secs(2)).await;
    ok(&file.path(), &["resume"]).await;
    // m1's partitions (two of the four keys) come; m2 runs nowhere.
    app.wait_for("m1's messages", Duration::from_secs(15), |r| r.len() >= 6)
        .await;
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn pause_refuses_bad_usage_and_names_what_is_wrong() {
    let env = Env::start(&["p.>"]).await;
    let app = MockApp::ok().await;
    let file = ConfigFile::new(durable_text(&env.nats, &app, &env.stream, &env.durable));
    for (args, says) in [
        (vec!["pause", "--for", "soon"], "--for \"soon\""),
        (
            vec!["pause", "--until", "2020-01-01T00:00:00Z"],
            "in the past",
        ),
        (
            vec!["pause", "--all-members"],
            "--all-members is for a group source",
        ),
        // Past what nanoseconds since 1970 hold: refused, never a panic (exit 101).
        (
            vec!["pause", "--for", "2147483647d"],
            "--for \"2147483647d\"",
        ),
        (
            vec!["pause", "--until", "9999-12-31T23:00:00-05:00"],
            "after 2262-04-11T23:47:15Z",
        ),
        (
            vec!["pause", "--until", "9999-12-31T23:59:59Z"],
            "after 2262-04-11T23:47:15Z",
        ),
    ] {
        let (code, out, err) = jetrelay(&file.path(), &args).await;
        assert_eq!(code, Some(64), "{args:?}: {out}{err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    // No consumer yet (no daemon ran): a failure, not a usage error.
    let (code, out, err) = jetrelay(&file.path(), &["pause"]).await;
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        out.contains("FAILED") && out.contains(&env.durable),
        "{out}"
    );
    // Said with the config's topology.consumer (the default, ensure), not bind.
    assert!(
        out.contains("topology.consumer = \"ensure\"") && !out.contains("bind"),
        "{out}"
    );
}

/// The consumer's ack floor (stream sequence) once it reaches `want`.
async fn acked_to(env: &Env, want: u64) {
    eventually(
        &format!("acked up to {want}"),
        Duration::from_secs(10),
        || async {
            consumer_info(&env.js, &env.stream, &env.durable)
                .await
                .is_some_and(|i| i.ack_floor.stream_sequence == want)
        },
    )
    .await;
}

/// The stream sequences of the app's requests after the first `skip`.
fn seqs_after(app: &MockApp, skip: usize) -> Vec<u64> {
    app.requests().iter().skip(skip).map(|r| r.seq()).collect()
}

#[tokio::test]
async fn replay_delivers_again_in_place_from_a_sequence_or_a_time_and_a_dry_run_changes_nothing() {
    let env = Env::start(&["p.>"]).await;
    let app = MockApp::ok().await;
    let file = ConfigFile::new(durable_text(&env.nats, &app, &env.stream, &env.durable));
    let relay = Relay::ready(file.config()).await;
    publish(&env.js, "p.a", 10).await;
    app.wait_for("the first ten", Duration::from_secs(10), |r| r.len() == 10)
        .await;
    acked_to(&env, 10).await;
    let who = format!("{} > {}", env.stream, env.durable);

    // A dry run counts and changes nothing.
    let out = ok(&file.path(), &["replay", "--seq", "4", "--dry-run"]).await;
    assert_eq!(
        out.trim(),
        format!("would replay {who}: 7 messages from stream seq 4 (>: 7)"),
    );
    nothing_more(&app, Duration::from_millis(500)).await;
    acked_to(&env, 10).await;

    // From a sequence: 4..=10 again, in order, to the running relay; same consumer.
    let out = ok(&file.path(), &["replay", "--seq", "4"]).await;
    assert_eq!(
        out.trim(),
        format!("replayed {who}: 7 messages from stream seq 4 (>: 7) are delivered again"),
    );
    app.wait_for("4..=10 again", Duration::from_secs(10), |r| r.len() == 17)
        .await;
    assert_eq!(seqs_after(&app, 10), (4..=10).collect::<Vec<u64>>());
    // A new delivery to the server: its count starts again.
    let counts: Vec<String> = app.requests()[10..]
        .iter()
        .map(|r| r.header("nats-delivered").unwrap_or("?").to_string())
        .collect();
    assert!(counts.iter().all(|c| c == "1"), "{counts:?}");
    acked_to(&env, 10).await;

    // From a time: what was published after it.
    let mid = time::OffsetDateTime::now_utc();
    publish(&env.js, "p.b", 5).await;
    app.wait_for("11..=15", Duration::from_secs(10), |r| r.len() == 22)
        .await;
    acked_to(&env, 15).await;
    let since = mid
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let out = ok(&file.path(), &["replay", "--since", &since]).await;
    assert!(
        out.contains("5 messages from stream seq 11 (>: 5)"),
        "{out}"
    );
    app.wait_for("11..=15 again", Duration::from_secs(10), |r| r.len() == 27)
        .await;
    assert_eq!(seqs_after(&app, 22), (11..=15).collect::<Vec<u64>>());
    // A duration back reaches the same point: everything from 1 (the stream lost
    // nothing).
    let out = ok(&file.path(), &["replay", "--since", "1h", "--dry-run"]).await;
    assert!(
        out.contains("15 messages from stream seq 1 (>: 15)"),
        "{out}"
    );
    let info = consumer_info(&env.js, &env.stream, &env.durable)
        .await
        .unwrap();
    assert_eq!(info.name, env.durable, "the same consumer, moved back");
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn replay_refuses_what_it_cannot_give_or_would_skip_and_changes_nothing() {
    let env = Env::start(&["p.>"]).await;
    let app = MockApp::ok().await;
    let file = ConfigFile::new(durable_text(&env.nats, &app, &env.stream, &env.durable));
    let relay = Relay::ready(file.config()).await;
    publish(&env.js, "p.a", 6).await;
    app.wait_for("six", Duration::from_secs(10), |r| r.len() == 6)
        .await;
    acked_to(&env, 6).await;
    relay.stop().await.unwrap();
    // Not delivered yet: 7..=9. A point past the ack floor would skip them.
    publish(&env.js, "p.a", 3).await;
    let (code, out, err) = jetrelay(&file.path(), &["replay", "--seq", "9"]).await;
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        out.contains("REFUSED") && out.contains("past the consumer's ack floor"),
        "{out}"
    );
    assert!(out.contains("nothing was changed"), "{out}");
    // What came before the stream's first message is gone.
    env.js
        .get_stream(&env.stream)
        .await
        .unwrap()
        .purge()
        .sequence(4)
        .await
        .unwrap();
    let (code, out, _) = jetrelay(&file.path(), &["replay", "--seq", "2"]).await;
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("before the stream's first message (seq 4 at "),
        "{out}"
    );
    let info = consumer_info(&env.js, &env.stream, &env.durable)
        .await
        .unwrap();
    assert_eq!(info.ack_floor.stream_sequence, 6, "nothing changed");
    // 7..=9 are still to come: pending, or one delivered to the stopped relay's pull
    // that the server still held (then unacked until its ack wait).
    assert_eq!(
        info.num_pending + info.num_ack_pending as u64,
        3,
        "nothing changed"
    );
    // A work-queue stream keeps nothing acked.
    let wq = crate::support::unique("W");
    env.js
        .create_stream(async_nats::jetstream::stream::Config {
            name: wq.clone(),
            subjects: vec!["w.>".into()],
            retention: async_nats::jetstream::stream::RetentionPolicy::WorkQueue,
            ..Default::default()
        })
        .await
        .unwrap();
    let wq_file = ConfigFile::new(durable_text(&env.nats, &app, &wq, "wq"));
    let relay = Relay::ready(wq_file.config()).await;
    relay.stop().await.unwrap();
    let (code, out, _) = jetrelay(&wq_file.path(), &["replay", "--seq", "1"]).await;
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("work-queue stream"), "{out}");
    // A server without the consumer reset (2.12).
    let old = NatsServer::start_2_12().await;
    let old_js = async_nats::jetstream::new(async_nats::connect(old.url()).await.unwrap());
    crate::support::create_stream(&old_js, "OLD", &["o.>"]).await;
    let old_file = ConfigFile::new(durable_text(&old, &app, "OLD", "old"));
    let relay = Relay::ready(old_file.config()).await;
    relay.stop().await.unwrap();
    let (code, out, _) = jetrelay(&old_file.path(), &["replay", "--since", "1h"]).await;
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("the consumer reset needs 2.14 or later")
            && out.contains("nothing was changed"),
        "{out}"
    );
    // Usage: 64, naming what is wrong.
    for (args, why) in [
        (vec!["replay"], "say from where"),
        (vec!["replay", "--since", "yesterday"], "neither a duration"),
        (
            vec!["replay", "--seq", "3", "--source", "nope"],
            "no such source",
        ),
        (
            vec!["replay", "--seq", "3", "--all-members"],
            "--all-members is for a group source",
        ),
    ] {
        let (code, out, err) = jetrelay(&file.path(), &args).await;
        assert_eq!(code, Some(64), "{args:?}: {out}{err}");
        assert!(err.contains(why), "{args:?}: {err}");
    }
}

#[tokio::test]
async fn replay_all_members_moves_back_every_member_of_a_static_group_and_refuses_an_elastic_one() {
    let (nats, js, stream, _admin) = static_group(2, &["m1", "m2"]).await;
    let app = MockApp::ok().await;
    let (files, relays) = static_members(&nats, &app, &stream, &["m1", "m2"]).await;
    crate::support::groups::publish_keys(&js, "o", 4, 5).await;
    app.wait_for("all twenty", Duration::from_secs(15), |r| r.len() == 20)
        .await;
    for m in ["m1", "m2"] {
        let name = jetrelay::group::static_consumer("cg", m);
        eventually(
            &format!("{m} acked all"),
            Duration::from_secs(10),
            || async {
                consumer_info(&js, &stream, &name)
                    .await
                    .is_some_and(|i| i.num_ack_pending == 0 && i.num_pending == 0)
            },
        )
        .await;
    }
    // This member only: its share comes again, the other's not.
    let out = ok(&files[0].path(), &["replay", "--seq", "1"]).await;
    assert!(
        out.starts_with("replayed ") && out.contains("(member m1)"),
        "{out}"
    );
    assert!(!out.contains("member m2"), "{out}");
    let (_, share) = out.trim().split_once(": ").unwrap();
    let mine: usize = share.split(' ').next().unwrap().parse().unwrap();
    assert!(mine > 0 && mine < 20, "{out}");
    app.wait_for("m1's share again", Duration::from_secs(15), |r| {
        r.len() == 20 + mine
    })
    .await;
    // Every member: all twenty again.
    let out = ok(&files[1].path(), &["replay", "--seq", "1", "--all-members"]).await;
    assert!(
        out.contains("(member m1)") && out.contains("(member m2)"),
        "{out}"
    );
    app.wait_for("all twenty again", Duration::from_secs(15), |r| {
        r.len() == 40 + mine
    })
    .await;
    for r in relays {
        r.stop().await.unwrap();
    }
    // An elastic member consumes a work-queue stream: nothing acked is left.
    let (nats, _js, stream, _admin) = elastic_group(2, &["e1"]).await;
    let file = ConfigFile::new(member_text(&nats, &app, "elastic", &stream, "eg", "e1"));
    let relay = Relay::ready(file.config()).await;
    let (code, out, _) = jetrelay(&file.path(), &["replay", "--seq", "1"]).await;
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("work-queue stream") && out.contains("nothing was changed"),
        "{out}"
    );
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn ps_lists_every_instance_that_announces_itself_and_srv_answers_as_adr32_says() {
    let env = Env::start(&["p.>"]).await;
    let app = MockApp::ok().await;
    let named = |durable: &str, pod: &str, announce: bool| {
        durable_text(&env.nats, &app, &env.stream, durable)
            .replacen("[nats]\n", &format!("[nats]\nname = \"{pod}\"\n"), 1)
            .replacen("[admin]\n", &format!("[admin]\nannounce = {announce}\n"), 1)
    };
    // Three instances of two configs (two share durable `da`), and one that does
    // not announce itself.
    let files = [
        ConfigFile::new(named("da", "pod-a", true)),
        ConfigFile::new(named("db", "pod-b", true)),
        ConfigFile::new(named("dc", "pod-c", false)),
    ];
    let mut relays = Vec::new();
    for f in [&files[0], &files[0], &files[1], &files[2]] {
        relays.push(Relay::ready(f.config()).await);
    }
    publish(&env.js, "p.a", 5).await;
    app.wait_for("five to each durable", Duration::from_secs(10), |r| {
        r.len() == 15
    })
    .await;
    let out = ok(&files[0].path(), &["ps"]).await;
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("INSTANCE ") && lines[0].contains("  SOURCE  "),
        "{out}"
    );
    assert_eq!(
        lines.len(),
        4,
        "a header and the three that announce: {out}"
    );
    // Two instances share the name pod-a: each shows its id.
    assert_ne!(
        lines[1].split(' ').next(),
        lines[2].split(' ').next(),
        "{out}"
    );
    assert!(
        lines[1].starts_with("pod-a")
            && lines[2].starts_with("pod-a")
            && lines[3].starts_with("pod-b"),
        "{out}"
    );
    assert!(
        lines[1..3]
            .iter()
            .all(|l| l.contains(&format!("{} > da", env.stream))),
        "{out}"
    );
    let out = ok(&files[2].path(), &["ps", "--json"]).await;
    let rows: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(rows.len(), 3, "{out}");
    assert_ne!(
        rows[0]["id"], rows[1]["id"],
        "two instances of one config: {out}"
    );
    assert_eq!(rows[2]["instance"], "pod-b");
    assert_eq!(rows[2]["source"], "default");
    assert_eq!(rows[2]["state"], "consuming");
    assert!(rows[2]["limit"].as_u64().unwrap() > 0, "{out}");
    // Any ADR-32 client sees the same: PING, INFO and STATS of service jetrelay.
    let client = async_nats::connect(env.nats.url()).await.unwrap();
    for (verb, kind) in [("PING", "ping"), ("INFO", "info"), ("STATS", "stats")] {
        let inbox = client.new_inbox();
        let mut sub = client.subscribe(inbox.clone()).await.unwrap();
        client
            .publish_with_reply(format!("$SRV.{verb}.jetrelay"), inbox, "".into())
            .await
            .unwrap();
        let mut answers = Vec::new();
        while let Ok(Some(m)) = tokio::time::timeout(
            Duration::from_millis(500),
            futures::StreamExt::next(&mut sub),
        )
        .await
        {
            answers.push(String::from_utf8(m.payload.to_vec()).unwrap());
        }
        assert_eq!(answers.len(), 3, "{verb}: {answers:?}");
        for a in &answers {
            let v: serde_json::Value = serde_json::from_str(a).unwrap();
            assert_eq!(
                v["type"],
                format!("io.nats.micro.v1.{kind}_response"),
                "{a}"
            );
            assert_eq!(v["name"], "jetrelay", "{a}");
            assert!(
                !a.contains(&app.url()) && !a.contains("127.0.0.1"),
                "no address: {a}"
            );
        }
        if verb == "STATS" {
            // The two instances of `da` share its five; `db` acked its own five.
            let acked: u64 = answers
                .iter()
                .map(|a| serde_json::from_str::<serde_json::Value>(a).unwrap())
                .map(|v| v["endpoints"][0]["data"]["acked"].as_u64().unwrap())
                .sum();
            assert_eq!(acked, 10, "{answers:?}");
        }
    }
    for r in relays {
        r.stop().await.unwrap();
    }
}

#[tokio::test]
async fn a_pause_until_the_latest_time_taken_is_held_and_ready_shows_that_time() {
    let env = Env::start(&["p.>"]).await;
    let app = MockApp::ok().await;
    let file = ConfigFile::new(durable_text(&env.nats, &app, &env.stream, &env.durable));
    let relay = Relay::ready(file.config()).await;
    let out = ok(&file.path(), &["pause", "--until", "2262-04-11T23:47:15Z"]).await;
    assert!(out.contains("until 2262-04-11T23:47:15Z"), "{out}");
    assert!(!out.contains("until resumed"), "{out}");
    let info = consumer_info(&env.js, &env.stream, &env.durable)
        .await
        .unwrap();
    assert!(info.paused, "the server holds it");
    assert_eq!(
        info.config.pause_until.map(|t| t.year()),
        Some(2262),
        "{:?}",
        info.config.pause_until
    );
    // /ready names the time asked for, however far: not "until resumed".
    let body = wait_state(&relay, "paused").await;
    assert!(
        body["reason"]
            .as_str()
            .unwrap()
            .contains("until 2262-04-11T23:47:15Z"),
        "{body}"
    );
    // 2100 is past the 50 years that were once read as "until resumed".
    let out = ok(&file.path(), &["pause", "--until", "2100-01-01T00:00:00Z"]).await;
    assert!(out.contains("until 2100-01-01T00:00:00Z"), "{out}");
    eventually("/ready says 2100", Duration::from_secs(5), || async {
        state(&relay).await.1["reason"]
            .as_str()
            .is_some_and(|r| r.contains("until 2100-01-01T00:00:00Z"))
    })
    .await;
    ok(&file.path(), &["resume"]).await;
    publish(&env.js, "p.one", 3).await;
    app.wait_for("three", Duration::from_secs(10), |r| r.len() >= 3)
        .await;
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn a_replay_from_past_2262_or_from_the_future_is_refused_and_replays_nothing() {
    let env = Env::start(&["p.>"]).await;
    let app = MockApp::ok().await;
    let file = ConfigFile::new(durable_text(&env.nats, &app, &env.stream, &env.durable));
    let relay = Relay::ready(file.config()).await;
    publish(&env.js, "p.a", 30).await;
    app.wait_for("thirty", Duration::from_secs(10), |r| r.len() == 30)
        .await;
    acked_to(&env, 30).await;
    let soon = (time::OffsetDateTime::now_utc() + time::Duration::hours(1))
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    for (since, says) in [
        ("9999-12-31T23:59:59Z", "after 2262-04-11T23:47:15Z"),
        ("2262-04-12T00:00:00Z", "after 2262-04-11T23:47:15Z"),
        (soon.as_str(), "in the future: nothing would be replayed"),
    ] {
        for dry in [false, true] {
            let mut args = vec!["replay", "--since", since];
            if dry {
                args.push("--dry-run");
            }
            let (code, out, err) = jetrelay(&file.path(), &args).await;
            assert_eq!(code, Some(64), "{args:?}: {out}{err}");
            assert!(err.contains(says), "{args:?}: {err}");
        }
    }
    nothing_more(&app, Duration::from_millis(500)).await;
    assert_eq!(app.requests().len(), 30, "nothing replayed");
    acked_to(&env, 30).await;
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn a_group_pause_holds_for_a_member_that_auto_joins_while_it_holds() {
    let (nats, js, stream, admin) = elastic_group(4, &[]).await;
    let app = MockApp::ok().await;
    let auto = |m: &str| {
        member_text(&nats, &app, "elastic", &stream, "eg", m).replace(
            &format!("member = \"{m}\"\n"),
            &format!("member = \"{m}\"\nauto_join = true\nmember_timeout_ms = 3000\n"),
        )
    };
    let fa = ConfigFile::new(auto("a"));
    let ra = Relay::ready(fa.config()).await;
    let out = ok(&fa.path(), &["pause", "--all-members"]).await;
    wait_state(&ra, "paused").await;
    // Published during the pause: 40 messages over every partition.
    crate::support::groups::publish_keys(&js, "e", 8, 5).await;
    // A scale-up: b joins by itself while the group is paused.
    let fb = ConfigFile::new(auto("b"));
    let rb = Relay::ready(fb.config()).await;
    eventually(
        "b joined and took half",
        Duration::from_secs(20),
        || async {
            rb.health.status().partitions.len() == 2 && ra.health.status().partitions.len() == 2
        },
    )
    .await;
    let consumer_stream = jetrelay::group::elastic_stream(&stream, "eg");
    // b's consumer comes once a has given its two partitions away.
    eventually("b's consumer exists", Duration::from_secs(20), || async {
        consumer_info(&js, &consumer_stream, "b").await.is_some()
    })
    .await;
    // Paused before its first pull: created, then paused (restore_pause) before b
    // pulls, so the consumer can be seen for a moment before its pause; that nothing
    // was delivered is what the app's requests below show.
    eventually("b's consumer paused", Duration::from_secs(5), || async {
        consumer_info(&js, &consumer_stream, "b")
            .await
            .is_some_and(|i| i.paused)
    })
    .await;
    wait_state(&rb, "paused").await;
    nothing_more(&app, Duration::from_secs(3)).await;
    assert!(app.requests().is_empty(), "nothing while paused");
    let members = admin.elastic_members(&stream, "eg").await.unwrap();
    assert_eq!(members, ["a", "b"]);
    assert!(out.contains("the group is paused"), "{out}");
    // The resume lists b too, and lifts the record.
    let out = ok(&fb.path(), &["resume", "--all-members", "--json"]).await;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let resumed: BTreeSet<&str> = v["consumers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["paused"] == false && c["error"].is_null())
        .map(|c| c["member"].as_str().unwrap())
        .collect();
    assert_eq!(resumed, BTreeSet::from(["a", "b"]), "{v}");
    app.wait_for("all 40", Duration::from_secs(20), |r| r.len() >= 40)
        .await;
    wait_state(&ra, "consuming").await;
    wait_state(&rb, "consuming").await;
    // A member that joins after the resume is not paused.
    let fc = ConfigFile::new(auto("c"));
    let rc = Relay::ready(fc.config()).await;
    eventually("c has its consumer", Duration::from_secs(20), || async {
        consumer_info(&js, &consumer_stream, "c").await.is_some()
    })
    .await;
    let c = consumer_info(&js, &consumer_stream, "c").await.unwrap();
    assert!(!c.paused, "c joined after the resume");
    eventually(
        "c pulls (idle: nothing for it yet)",
        Duration::from_secs(20),
        || async { state(&rc).await.1["state"] == "idle" },
    )
    .await;
    let seqs: BTreeSet<u64> = app.requests().iter().map(|r| r.seq()).collect();
    assert_eq!(seqs.len(), 40, "each message once");
    assert_eq!(app.requests().len(), 40, "each message once");
    for r in [ra, rb, rc] {
        r.stop().await.unwrap();
    }
}

// === SIGHUP: reload ===

fn reload_text(env: &Env, app: &MockApp, delivery: &str, http: &str) -> String {
    format!(
        "[nats]\nservers = \"{}\"\n[source]\nstream = \"{}\"\nkind = \"durable\"\ndurable = \"{}\"\n\
         [delivery]\nordering = \"none\"\n{delivery}\n[http]\nurl = \"{}\"\n{http}\n[admin]\nlisten = \"127.0.0.1:0\"\n",
        env.nats.url(),
        env.stream,
        env.durable,
        app.url()
    )
}

/// Rewrites the daemon's config file and sends SIGHUP; waits for the verdict line
/// (logged after the SIGHUP) and returns the lines logged since.
async fn reload(d: &Daemon, text: &str, verdict: &str) -> Vec<serde_json::Value> {
    let before = d.lines().len();
    std::fs::write(d.config_path(), text).unwrap();
    d.signal("HUP");
    let is_verdict = |l: &serde_json::Value| {
        l["message"]
            .as_str()
            .is_some_and(|m| m.starts_with(verdict))
    };
    eventually(
        &format!("{verdict} after the SIGHUP"),
        Duration::from_secs(10),
        || async { d.lines().iter().skip(before).any(is_verdict) },
    )
    .await;
    d.lines().into_iter().skip(before).collect()
}

/// The first of `lines` whose message starts with `message`.
fn line<'a>(lines: &'a [serde_json::Value], message: &str) -> &'a serde_json::Value {
    lines
        .iter()
        .find(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.starts_with(message))
        })
        .unwrap_or_else(|| panic!("no line {message:?} in {lines:#?}"))
}

async fn admin_metric(d: &Daemon, sample: &str) -> f64 {
    let text = crate::support::http()
        .get(format!("http://{}/metrics", d.admin))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    crate::support::sum_of(&text, sample)
}

#[tokio::test]
async fn sighup_applies_live_keys_under_load_losing_and_repeating_nothing() {
    let env = Env::start(&["p.>"]).await;
    let app = MockApp::start(|_, _| Reply::status(200).after(Duration::from_millis(20))).await;
    let first = reload_text(&env, &app, "max_in_flight = 8", "");
    let mut d = Daemon::start(&first).await;
    d.wait_ready_body("ready", Duration::from_secs(20), |c, _| c == 200)
        .await;
    let js = env.js.clone();
    let publisher = tokio::spawn(async move { publish(&js, "p.a", 400).await });
    app.wait_for("deliveries under way", Duration::from_secs(10), |r| {
        r.len() >= 50
    })
    .await;
    let lines = reload(
        &d,
        &reload_text(
            &env,
            &app,
            "max_in_flight = 2\nretry_initial_ms = 500",
            "headers = { X-Reloaded = \"yes\" }\ntimeout_ms = 9000\n[log]\nlevel = \"warn\"",
        ),
        "config reloaded",
    )
    .await;
    let changed = line(&lines, "config reloaded")["changed"].as_str().unwrap();
    for key in [
        "delivery.max_in_flight",
        "delivery.retry_initial_ms",
        "http.headers.X-Reloaded",
        "http.timeout_ms",
    ] {
        assert!(changed.contains(key), "{key} not in {changed}");
    }
    let body = d
        .wait_ready_body("the new limit", Duration::from_secs(5), |_, b| {
            b["concurrency_limit"] == 2
        })
        .await;
    assert_eq!(body["state"], "consuming");
    publisher.await.unwrap();
    app.wait_for("all 400", Duration::from_secs(30), |r| r.len() >= 400)
        .await;
    let requests = app.requests();
    assert_eq!(app.acked_seqs().len(), 400, "every message");
    assert_eq!(requests.len(), 400, "none twice");
    assert!(
        requests.last().unwrap().header("x-reloaded") == Some("yes"),
        "the new client sends the new header"
    );
    assert!(requests[0].header("x-reloaded").is_none());
    assert_eq!(
        admin_metric(&d, "jetrelay_config_reloads_total{result=\"applied\"}").await,
        1.0
    );
    assert_eq!(admin_metric(&d, "jetrelay_redeliveries_total").await, 0.0);
    assert!(d.running(), "SIGHUP never ends the process");
    d.signal("TERM");
    assert_eq!(d.wait_exit(Duration::from_secs(20)).await.0, Some(0));
    assert!(
        !d.lines()
            .iter()
            .any(|l| l["message"] == "shutdown requested"),
        "log.level = warn is in force: no INFO line after the reload"
    );
}

/// `http.max_concurrent_streams` is an `[http]` key like the others: a reload builds
/// the h2c client anew with it, and the next requests spread over connections.
#[tokio::test]
async fn sighup_spreads_h2c_requests_once_max_concurrent_streams_is_set() {
    let env = Env::start(&["p.>"]).await;
    let app = MockApp::start_h2c(|_, _| Reply::status(200).after(Duration::from_millis(40))).await;
    let h2c = "version = \"h2c\"";
    let mut d = Daemon::start(&reload_text(&env, &app, "max_in_flight = 16", h2c)).await;
    d.wait_ready_body("ready", Duration::from_secs(20), |c, _| c == 200)
        .await;
    publish(&env.js, "p.a", 64).await;
    app.wait_for("the first 64", Duration::from_secs(20), |r| r.len() >= 64)
        .await;
    assert_eq!(app.connections(), 1, "one connection up to the app's limit");
    let spread = format!("{h2c}\nmax_concurrent_streams = 4");
    let lines = reload(
        &d,
        &reload_text(&env, &app, "max_in_flight = 16", &spread),
        "config reloaded",
    )
    .await;
    let changed = line(&lines, "config reloaded")["changed"].as_str().unwrap();
    assert!(changed.contains("http.max_concurrent_streams"), "{changed}");
    publish(&env.js, "p.a", 64).await;
    app.wait_for("all 128", Duration::from_secs(20), |r| r.len() >= 128)
        .await;
    assert_eq!(app.acked_seqs().len(), 128, "every message, once");
    assert_eq!(app.requests().len(), 128);
    assert!(
        app.connections() > 4,
        "the old client's connection, and the new client's 16 in flight on connections of 4: {} in all",
        app.connections()
    );
    d.signal("TERM");
    assert_eq!(d.wait_exit(Duration::from_secs(20)).await.0, Some(0));
}

#[tokio::test]
async fn sighup_refuses_keys_that_cannot_change_live_and_configs_that_do_not_validate() {
    let env = Env::start(&["p.>"]).await;
    let app = MockApp::ok().await;
    let first = reload_text(&env, &app, "max_in_flight = 8", "");
    let mut d = Daemon::start(&first).await;
    d.wait_ready_body("ready", Duration::from_secs(20), |c, _| c == 200)
        .await;
    // A key that is not live, with a live one: the whole reload is refused.
    let moved = first
        .replace(
            &format!("durable = \"{}\"", env.durable),
            "durable = \"other\"",
        )
        .replace("max_in_flight = 8", "max_in_flight = 3");
    let file = ConfigFile::new(moved.clone());
    let url = format!("http://{}/config", d.admin);
    let (code, out, err) = jetrelay(&file.path(), &["check", "--diff-running", &url]).await;
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        out.contains("delivery.max_in_flight: 8 -> 3 (live)")
            && out.contains("source.durable:")
            && out.contains("NOT LIVE")
            && out.contains("would be refused"),
        "{out}"
    );
    let lines = reload(
        &d,
        &moved,
        "config reload refused: the running config stays",
    )
    .await;
    let key = line(&lines, "config reload refused: this key");
    assert_eq!(key["key"], "source.durable", "{key}");
    assert!(key["why"].as_str().unwrap().contains("restart"), "{key}");
    // A config that does not validate.
    let bad = first.replace("max_in_flight = 8", "max_in_flight = 0");
    let verdict = "config reload refused: the new config does not validate";
    let lines = reload(&d, &bad, verdict).await;
    let why = line(&lines, verdict);
    assert!(
        why["error"]
            .as_str()
            .unwrap()
            .contains("delivery.max_in_flight"),
        "{why}"
    );
    assert_eq!(
        admin_metric(&d, "jetrelay_config_reloads_total{result=\"refused\"}").await,
        2.0
    );
    let (_, ready) = d.ready().await;
    assert_eq!(
        ready["concurrency_limit"], 8,
        "the running config stays: {ready}"
    );
    // Still consuming from its own durable.
    publish(&env.js, "p.a", 5).await;
    app.wait_for("five", Duration::from_secs(10), |r| r.len() >= 5)
        .await;
    // The file as it runs: nothing to change.
    let same = ConfigFile::new(first.clone());
    let (code, out, _) = jetrelay(&same.path(), &["check", "--diff-running", &url]).await;
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("the same"), "{out}");
    assert!(d.running(), "SIGHUP never ends the process");
    d.signal("TERM");
    assert_eq!(d.wait_exit(Duration::from_secs(20)).await.0, Some(0));
}

// === secrets ===

#[tokio::test]
async fn no_secret_of_the_config_shows_on_the_admin_port_in_check_or_in_the_log() {
    const MARK: &str = "S3CR3T-MARKER";
    let env = Env::start(&["p.>"]).await;
    let app = MockApp::ok().await;
    app.set_healthy(true);
    let collector = crate::support::collector::FakeCollector::start(
        crate::support::collector::Wire::HttpProtobuf,
    )
    .await;
    // An OAuth2 client secret and the tokens issued for it.
    let dir = tempfile::tempdir().unwrap();
    let client_secret = dir.path().join("client-secret");
    std::fs::write(&client_secret, format!("{MARK}-client\n")).unwrap();
    let tokens = crate::identity::TokenEndpoint::start("relay", &format!("{MARK}-client")).await;
    tokens.set_prefix(&format!("{MARK}-token-"));
    let oauth2 = format!(
        "[http.oauth2]\ntoken_url = \"{}\"\nclient_id = \"relay\"\nclient_secret_file = \"{}\"\n",
        tokens.url,
        client_secret.display()
    );
    let with_user =
        |url: &str, user: &str| url.replacen("://", &format!("://{user}:{MARK}-{user}@"), 1);
    let text = |authorization: &str| {
        let http = format!(
            "health_url = \"{}\"\nheaders = {{ X-Token = \"{MARK}-header\" }}",
            with_user(&app.health_url(), "probe")
        );
        reload_text(&env, &app, "max_in_flight = 8", &http).replace(
            &format!("url = \"{}\"", app.url()),
            &format!("url = \"{}\"", with_user(&app.url(), "alice")),
        ) + &collector.otel(&format!(
            "headers = {{ Authorization = \"{authorization}\" }}"
        )) + &oauth2
    };
    let first = text(&format!("Bearer {MARK}-otel"));
    let mut d = Daemon::start(&first).await;
    d.wait_ready_body("ready", Duration::from_secs(20), |c, _| c == 200)
        .await;
    publish(&env.js, "p.a", 3).await;
    app.wait_for("three", Duration::from_secs(10), |r| r.len() >= 3)
        .await;
    assert!(!tokens.issued().is_empty(), "a token was fetched");
    // The admin port.
    let get = |path: &str| {
        let url = format!("http://{}{path}", d.admin);
        async move {
            crate::support::http()
                .get(url)
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        }
    };
    let shown = get("/config").await;
    for key in [
        "\"http.headers.X-Token\":\"<redacted ",
        "\"otel.headers.Authorization\":\"<redacted ",
        "\"http.url\":\"http://alice:<redacted ",
        "\"http.health_url\":\"http://probe:<redacted ",
    ] {
        assert!(shown.contains(key), "{key} not in {shown}");
    }
    for path in ["/config", "/ready", "/metrics"] {
        let body = get(path).await;
        assert!(!body.contains(MARK), "{path}: {body}");
    }
    // `check`, of the config, of a broken one, and against the running one.
    let file = ConfigFile::new(first.clone());
    let (code, out, err) = jetrelay(&file.path(), &["check"]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(!out.contains(MARK) && !err.contains(MARK), "{out}{err}");
    let broken = first.replace(&app.url()[7..], "127.0.0.1:99999/x");
    assert!(
        broken.contains(&format!("{MARK}-alice@127.0.0.1:99999")),
        "{broken}"
    );
    let broken_file = ConfigFile::new(broken.clone());
    let (code, out, err) = jetrelay(&broken_file.path(), &["check"]).await;
    assert_eq!(code, Some(64), "{out}{err}");
    assert!(err.contains("http.url"), "{err}");
    assert!(!out.contains(MARK) && !err.contains(MARK), "{out}{err}");
    let changed = text(&format!("Bearer {MARK}-new"));
    let changed_file = ConfigFile::new(changed.clone());
    let url = format!("http://{}/config", d.admin);
    let (code, out, err) = jetrelay(&changed_file.path(), &["check", "--diff-running", &url]).await;
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        out.contains("otel.headers.Authorization: \"<redacted "),
        "a change still shows: {out}"
    );
    // The unchanged secrets fingerprint as the running process's do (its salt).
    assert!(out.contains(": 1 key(s) differ"), "{out}");
    assert!(!out.contains(MARK) && !err.contains(MARK), "{out}{err}");
    // The reload log: a refused change of the collector's token, a broken URL.
    let lines = reload(
        &d,
        &changed,
        "config reload refused: the running config stays",
    )
    .await;
    let key = line(&lines, "config reload refused: this key");
    assert_eq!(key["key"], "otel.headers.Authorization", "{key}");
    assert_ne!(key["running"], key["new"], "a change still shows: {key}");
    let verdict = "config reload refused: the new config does not validate";
    let lines = reload(&d, &broken, verdict).await;
    assert!(
        line(&lines, verdict)["error"]
            .as_str()
            .unwrap()
            .contains("http.url"),
        "{lines:#?}"
    );
    d.signal("TERM");
    assert_eq!(d.wait_exit(Duration::from_secs(20)).await.0, Some(0));
    let log = serde_json::to_string(&d.lines()).unwrap();
    assert!(!log.contains(MARK), "{log}");
}

/// `run --watch` on a config mounted as Kubernetes mounts a ConfigMap: the file is a
/// link through `..data`, and the kubelet's update is a new timestamped directory
/// with `..data` renamed onto it. The swap reloads once; a swap to a config that does
/// not validate is refused and the running config stays.
#[tokio::test]
async fn watch_reloads_a_configmap_directory_swapped_as_the_kubelet_does() {
    use std::os::unix::fs::symlink;
    let env = Env::start(&["w.>"]).await;
    let app = MockApp::ok().await;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let swap = |n: u32, text: &str| {
        let version = format!("..2026_12_06_{n}");
        std::fs::create_dir(root.join(&version)).unwrap();
        std::fs::write(root.join(&version).join("jetrelay.toml"), text).unwrap();
        symlink(&version, root.join("..data_tmp")).unwrap();
        std::fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
    };
    swap(1, &reload_text(&env, &app, "max_in_flight = 8", ""));
    let path = root.join("jetrelay.toml");
    symlink("..data/jetrelay.toml", &path).unwrap();
    let mut d = Daemon::start_watching(dir, &path).await;
    d.wait_ready_body("ready", Duration::from_secs(20), |c, _| c == 200)
        .await;
    let running = |d: &Daemon| {
        let url = format!("http://{}/config", d.admin);
        async move {
            let resp = crate::support::http().get(url).send().await.unwrap();
            let shown: serde_json::Value =
                serde_json::from_str(&resp.text().await.unwrap()).unwrap();
            shown["delivery.max_in_flight"].clone()
        }
    };
    assert_eq!(running(&d).await, 8);
    let verdicts = |d: &Daemon| -> Vec<String> {
        d.lines()
            .iter()
            .filter_map(|l| l["message"].as_str())
            .filter(|m| m.starts_with("config reload"))
            .map(String::from)
            .collect()
    };
    swap(2, &reload_text(&env, &app, "max_in_flight = 4", ""));
    d.wait_line("the reload", Duration::from_secs(10), |l| {
        l["message"] == "config reloaded"
    })
    .await;
    assert_eq!(running(&d).await, 4);
    swap(3, &reload_text(&env, &app, "max_in_flight = 0", ""));
    d.wait_line("the refusal", Duration::from_secs(10), |l| {
        l["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("config reload refused"))
    })
    .await;
    assert_eq!(running(&d).await, 4, "the running config stays");
    assert_eq!(
        verdicts(&d)[0],
        "config reloaded",
        "one reload for one swap, then the refusal"
    );
    assert_eq!(
        verdicts(&d)
            .iter()
            .filter(|m| *m == "config reloaded")
            .count(),
        1,
        "{:?}",
        verdicts(&d)
    );
    assert!(d.running());
}
