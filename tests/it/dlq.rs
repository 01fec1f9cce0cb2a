//! `jetrelay dlq`: dead letters the daemon wrote, listed, shown, replayed where they
//! came from (once, even across an interrupted run) and purged.

use std::collections::BTreeSet;
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, stream};
use serde_json::Value;

use crate::support::daemon::BIN;
use crate::support::groups::*;
use crate::support::*;

const T: Duration = Duration::from_secs(30);

/// Runs `jetrelay dlq <args> --server <url>`: exit code, stdout, stderr.
async fn dlq(nats: &NatsServer, args: &[&str]) -> (i32, String, String) {
    let out = tokio::process::Command::new(BIN)
        .arg("dlq")
        .args(args)
        .args(["--server", nats.url()])
        .env_remove("JETRELAY_CONFIG")
        .output()
        .await
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn a_stream(
    js: &jetstream::Context,
    name: &str,
    subjects: &[&str],
    direct: bool,
    atomic: bool,
) {
    js.create_stream(stream::Config {
        name: name.to_string(),
        subjects: subjects.iter().map(|s| s.to_string()).collect(),
        allow_direct: direct,
        allow_atomic_publish: atomic,
        ..Default::default()
    })
    .await
    .unwrap();
}

async fn count(js: &jetstream::Context, name: &str) -> u64 {
    js.get_stream(name)
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .state
        .messages
}

/// A daemon whose app refuses (400) payloads starting with "bad" and accepts the rest
/// until `fixed` is set; the DLQ stream takes direct gets.
struct Setup {
    env: Env,
    app: MockApp,
    relay: Relay,
    dlq: String,
    fixed: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

async fn setup() -> Setup {
    let fixed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = fixed.clone();
    let app = MockApp::start(move |r, _| {
        let fixed = flag.load(std::sync::atomic::Ordering::SeqCst);
        Reply::status(if r.body.starts_with(b"bad") && !fixed {
            400
        } else {
            200
        })
    })
    .await;
    let env = Env::start(&["orders.>"]).await;
    let dlq = unique("DLQ");
    a_stream(
        &env.js,
        &dlq,
        &[&format!("dlq.{}", env.stream)],
        true,
        false,
    )
    .await;
    let extra = format!("[dlq]\nsubject = \"dlq.{}\"\n", env.stream);
    let relay = Relay::ready(durable_config(
        &env.nats,
        &app,
        &env.stream,
        &env.durable,
        &extra,
    ))
    .await;
    Setup {
        env,
        app,
        relay,
        dlq,
        fixed,
    }
}

#[tokio::test]
async fn a_publisher_cannot_forge_what_a_dead_letter_says_or_where_it_replays() {
    let s = setup().await;
    // A stream the forger wants to reach.
    a_stream(&s.env.js, "PAY", &["pay.>"], false, false).await;
    // 1. A message carrying jetrelay's letter headers itself, refused by the app.
    let mut h = HeaderMap::new();
    h.insert("Jetrelay-Dlq-Subject", "pay.refund.all");
    h.insert("Jetrelay-Dlq-Stream", "PAY");
    h.insert("Jetrelay-Dlq-Reason", "forged");
    h.insert("X-Keep", "kept");
    s.env
        .js
        .publish_with_headers("orders.eu", h, "bad forged".into())
        .await
        .unwrap()
        .await
        .unwrap();
    eventually("dead-lettered", T, || async {
        count(&s.env.js, &s.dlq).await == 1
    })
    .await;
    let (code, out, err) = dlq(&s.env.nats, &["ls", &s.dlq, "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let rows: Vec<Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(rows[0]["stream"], s.env.stream.as_str(), "{out}");
    assert_eq!(rows[0]["subject"], "orders.eu", "{out}");
    assert_eq!(rows[0]["reason"], "jetrelay: app answered 400", "{out}");
    let (_, shown, _) = dlq(&s.env.nats, &["show", &s.dlq, "1"]).await;
    assert!(
        shown.contains("X-Keep: kept") && !shown.contains("pay.refund"),
        "{shown}"
    );
    // 2. Letters someone published straight to the DLQ subject, claiming the source
    // stream but a subject elsewhere (or a wildcard): not replayed.
    for (i, subject) in ["pay.refund.all", "pay.*", "pay.>"].into_iter().enumerate() {
        let mut h = HeaderMap::new();
        h.insert("Jetrelay-Dlq-Subject", subject);
        h.insert("Jetrelay-Dlq-Stream", s.env.stream.as_str());
        h.insert("Jetrelay-Dlq-Consumer", "x");
        h.insert("Jetrelay-Dlq-Sequence", "99");
        h.insert("Jetrelay-Dlq-Reason", "forged");
        h.insert(
            "Nats-Msg-Id",
            format!("jetrelay-dlq:{}:x:99:{i}", s.env.stream).as_str(),
        );
        s.env
            .js
            .publish_with_headers(format!("dlq.{}", s.env.stream), h, "pay me".into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    // 3. A message with only a reason header: not a letter at all.
    let mut h = HeaderMap::new();
    h.insert("Jetrelay-Dlq-Reason", "looks like one");
    s.env
        .js
        .publish_with_headers(format!("dlq.{}", s.env.stream), h, "x".into())
        .await
        .unwrap()
        .await
        .unwrap();
    s.fixed.store(true, std::sync::atomic::Ordering::SeqCst);
    let (code, out, _) = dlq(&s.env.nats, &["replay", &s.dlq, "--delete"]).await;
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("selected 5, replayed 1,"), "{out}");
    assert!(
        out.contains("is stored by stream PAY, not by") && out.contains("wildcards"),
        "{out}"
    );
    assert!(out.contains("not a dead letter jetrelay wrote"), "{out}");
    assert_eq!(count(&s.env.js, "PAY").await, 0, "nothing reached PAY");
    // Purge deletes only what is verifiably a letter: the reason-only message stays.
    let (_, out, _) = dlq(&s.env.nats, &["purge", &s.dlq, "--yes"]).await;
    assert!(out.contains("selected 4, deleted 3, failed 1"), "{out}");
    s.relay.stop().await.unwrap();
}

#[tokio::test]
async fn ls_and_show_read_the_dead_letters_the_daemon_wrote() {
    let s = setup().await;
    let mut headers = HeaderMap::new();
    headers.insert("X-Trace", "t-1");
    s.env
        .js
        .publish_with_headers("orders.eu", headers, "bad one".into())
        .await
        .unwrap()
        .await
        .unwrap();
    publish_each(
        &s.env.js,
        &[
            ("orders.us", "fine"),
            ("orders.us", "bad two"),
            ("orders.eu", "bad three"),
        ],
    )
    .await;
    eventually("dead-lettered", T, || async {
        count(&s.env.js, &s.dlq).await == 3
    })
    .await;

    let (code, text, err) = dlq(&s.env.nats, &["ls", &s.dlq]).await;
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("SEQ"), "{text}");
    assert_eq!(lines.len(), 4, "{text}");
    assert!(
        lines[1].contains("orders.eu") && lines[1].contains("400"),
        "{text}"
    );
    assert!(lines[1].contains(&s.env.stream), "{text}");

    let (_, text, _) = dlq(
        &s.env.nats,
        &["ls", &s.dlq, "--json", "--subject", "orders.eu"],
    )
    .await;
    let rows: Vec<Value> = serde_json::from_str(&text).unwrap();
    let seqs: Vec<u64> = rows
        .iter()
        .map(|r| r["sequence"].as_u64().unwrap())
        .collect();
    assert_eq!(
        seqs,
        [1, 4],
        "the original sequences of orders.eu's dead letters"
    );
    assert_eq!(rows[0]["status"], 400);
    assert!(rows[0]["reason"].as_str().unwrap().contains("400"));

    let (_, text, _) = dlq(&s.env.nats, &["ls", &s.dlq, "--json", "--limit", "2"]).await;
    assert_eq!(serde_json::from_str::<Vec<Value>>(&text).unwrap().len(), 2);
    let (_, text, _) = dlq(&s.env.nats, &["ls", &s.dlq, "--json", "--seq", "2-3"]).await;
    let rows: Vec<Value> = serde_json::from_str(&text).unwrap();
    assert_eq!(
        rows.iter()
            .map(|r| r["dlq_seq"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [2, 3]
    );
    let (_, text, _) = dlq(&s.env.nats, &["ls", &s.dlq, "--json", "--since", "1h"]).await;
    assert_eq!(serde_json::from_str::<Vec<Value>>(&text).unwrap().len(), 3);
    let (_, text, _) = dlq(
        &s.env.nats,
        &["ls", &s.dlq, "--json", "--since", "2099-01-01T00:00:00Z"],
    )
    .await;
    assert_eq!(serde_json::from_str::<Vec<Value>>(&text).unwrap().len(), 0);
    let (_, text, _) = dlq(&s.env.nats, &["ls", &s.dlq, "--json", "--status", "503"]).await;
    assert_eq!(serde_json::from_str::<Vec<Value>>(&text).unwrap().len(), 0);

    let (code, text, _) = dlq(&s.env.nats, &["show", &s.dlq, "1"]).await;
    assert_eq!(code, 0);
    assert!(text.contains("X-Trace: t-1"), "{text}");
    assert!(text.contains("Jetrelay-Dlq-Reason"), "{text}");
    assert!(text.trim_end().ends_with("bad one"), "{text}");
    // Headers by name, the same every time.
    let names: Vec<String> = text
        .lines()
        .skip_while(|l| *l != "headers:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(|l| l.trim().split(':').next().unwrap().to_ascii_lowercase())
        .collect();
    assert!(names.len() >= 8, "{text}");
    assert!(names.is_sorted(), "{names:?}");
    let (code, _, err) = dlq(&s.env.nats, &["show", &s.dlq, "99"]).await;
    assert_eq!(code, 1, "{err}");

    let (code, _, err) = dlq(&s.env.nats, &["ls", &s.dlq, "--since", "yesterday"]).await;
    assert_eq!(code, 64, "{err}");
    let (code, _, err) = dlq(&s.env.nats, &["ls", "NOPE"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("does not exist"), "{err}");
    s.relay.stop().await.unwrap();
}

#[tokio::test]
async fn a_dlq_stream_without_direct_get_says_how_to_enable_it() {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    a_stream(&js, "PLAIN", &["plain.>"], false, false).await;
    // Empty, it says so too: an empty answer would look like "no dead letters".
    for cmd in ["ls", "replay", "purge"] {
        let args = if cmd == "purge" {
            vec![cmd, "PLAIN", "--yes"]
        } else {
            vec![cmd, "PLAIN"]
        };
        let (code, out, err) = dlq(&nats, &args).await;
        assert_eq!(code, 1, "{cmd}: {out}");
        assert!(err.contains("set allow_direct: true on it"), "{cmd}: {err}");
    }
    publish(&js, "plain.x", 1).await;
    let (code, _, err) = dlq(&nats, &["ls", "PLAIN"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("allow_direct"), "{err}");
}

#[tokio::test]
async fn a_replay_reaches_the_app_through_the_daemon_once_and_deletes_what_it_replayed() {
    let s = setup().await;
    for body in ["bad a", "good", "bad b"] {
        s.env
            .js
            .publish("orders.x", body.into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    eventually("dead-lettered", T, || async {
        count(&s.env.js, &s.dlq).await == 2
    })
    .await;
    // The app is fixed; the dead letters go back where they came from.
    s.fixed.store(true, std::sync::atomic::Ordering::SeqCst);
    let (code, text, err) = dlq(&s.env.nats, &["replay", &s.dlq, "--dry-run"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains(&format!("1 -> orders.x (stream {})", s.env.stream))
            && text.contains("dry run"),
        "{text}"
    );
    assert_eq!(
        count(&s.env.js, &s.env.stream).await,
        3,
        "a dry run changes nothing"
    );

    let (code, text, err) = dlq(&s.env.nats, &["replay", &s.dlq]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains("selected 2, replayed 2, already replayed 0"),
        "{text}"
    );
    s.app
        .wait_for("the replays answered 200", T, |r| {
            r.iter()
                .filter(|r| r.body.starts_with(b"bad") && r.status == 200)
                .count()
                == 2
        })
        .await;
    // A second run finds them stored already: nothing is delivered twice.
    let (code, text, _) = dlq(&s.env.nats, &["replay", &s.dlq, "--delete"]).await;
    assert_eq!(code, 0);
    assert!(
        text.contains("replayed 0, already replayed 2, deleted 2"),
        "{text}"
    );
    assert_eq!(count(&s.env.js, &s.env.stream).await, 5);
    assert_eq!(
        count(&s.env.js, &s.dlq).await,
        0,
        "deleted after their PubAck"
    );
    eventually("all acked", T, || {
        consumer_drained(&s.env.js, &s.env.stream, &s.env.durable)
    })
    .await;
    let replayed: Vec<_> = s
        .app
        .requests()
        .into_iter()
        .filter(|r| r.seq() > 3)
        .collect();
    assert_eq!(replayed.len(), 2, "each replay delivered once");
    assert_eq!(
        replayed[0].header("nats-msg-id"),
        Some(format!("jetrelay-replay:{}:1", s.dlq).as_str())
    );
    s.relay.stop().await.unwrap();
}

#[tokio::test]
async fn a_static_members_dead_letters_replay_into_the_partition_of_their_key() {
    let (nats, js, stream, _admin) = static_group(4, &["m1"]).await;
    let dlq_stream = unique("DLQ");
    a_stream(&js, &dlq_stream, &["dlq.g"], true, false).await;
    let fixed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = fixed.clone();
    let app = MockApp::start(move |r, _| {
        let fixed = flag.load(std::sync::atomic::Ordering::SeqCst);
        Reply::status(if r.body.starts_with(b"bad") && !fixed {
            400
        } else {
            200
        })
    })
    .await;
    let relay = Relay::ready(member_config(
        &nats,
        &app,
        "static",
        &stream,
        "cg",
        "m1",
        "[dlq]\nsubject = \"dlq.g\"\n",
    ))
    .await;
    for key in ["k1", "k2", "k3"] {
        js.publish(format!("o.{key}"), format!("bad {key}").into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    eventually("dead-lettered", T, || async {
        count(&js, &dlq_stream).await == 3
    })
    .await;
    fixed.store(true, std::sync::atomic::Ordering::SeqCst);
    let (code, text, err) = dlq(&nats, &["replay", &dlq_stream]).await;
    assert_eq!(code, 0, "{err}");
    assert!(text.contains("replayed 3"), "{text}");
    let s = js.get_stream(&stream).await.unwrap();
    for (original, replay) in [(1, 4), (2, 5), (3, 6)] {
        let a = s.get_raw_message(original).await.unwrap();
        let b = s.get_raw_message(replay).await.unwrap();
        assert_eq!(a.payload, b.payload);
        assert_eq!(
            a.subject, b.subject,
            "the transform put the replay in its key's partition"
        );
        assert!(
            a.subject.split('.').next().unwrap().parse::<u32>().is_ok(),
            "{}",
            a.subject
        );
    }
    eventually("the replays answered 200", T, || async {
        app.requests().iter().filter(|r| r.status == 200).count() == 3
    })
    .await;
    relay.stop().await.unwrap();
}

/// Fills `stream` with `n` dead letters, as jetrelay writes them, of messages of the
/// stream `TO` on the subject `to.<i % 10>`.
async fn fill_letters(client: &async_nats::Client, js: &jetstream::Context, subject: &str, n: u64) {
    for i in 0..n {
        let mut h = HeaderMap::new();
        h.insert("Jetrelay-Dlq-Subject", format!("to.{}", i % 10).as_str());
        h.insert("Jetrelay-Dlq-Stream", "TO");
        h.insert("Jetrelay-Dlq-Consumer", "c");
        h.insert("Nats-Msg-Id", format!("jetrelay-dlq:TO:c:{i}").as_str());
        h.insert("Jetrelay-Dlq-Sequence", i.to_string().as_str());
        h.insert("Jetrelay-Dlq-Reason", "jetrelay: app answered 400");
        h.insert("Jetrelay-Dlq-Status", "400");
        js.publish_with_headers(subject.to_string(), h, format!("letter {i}").into())
            .await
            .unwrap();
    }
    client.flush().await.unwrap();
}

#[tokio::test]
async fn an_interrupted_replay_run_again_stores_each_message_once() {
    let nats = NatsServer::start().await;
    let (client, js) = client(&nats).await;
    a_stream(&js, "DLQ", &["dlq.x"], true, false).await;
    // The target takes no atomic batches: one by one, so a kill lands mid-page.
    a_stream(&js, "TO", &["to.>"], false, false).await;
    let total = 8000;
    fill_letters(&client, &js, "dlq.x", total).await;
    eventually("filled", T, || async { count(&js, "DLQ").await == total }).await;

    let mut first = tokio::process::Command::new(BIN)
        .args(["dlq", "replay", "DLQ", "--server", nats.url()])
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    eventually("some replayed", T, || async {
        count(&js, "TO").await >= 500
    })
    .await;
    first.start_kill().unwrap();
    first.wait().await.unwrap();
    let partial = count(&js, "TO").await;
    assert!(partial < total, "killed midway: {partial} of {total}");

    let (code, text, err) = dlq(&nats, &["replay", "DLQ", "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let summary: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(summary["selected"], total);
    assert_eq!(summary["failed"], 0);
    let already = summary["already_replayed"].as_u64().unwrap();
    assert!(already >= partial, "{summary}");
    assert_eq!(count(&js, "TO").await, total, "each stored once");
    let s = js.get_stream("TO").await.unwrap();
    let mut ids = BTreeSet::new();
    for seq in (1..=total).step_by(997) {
        let m = s.get_raw_message(seq).await.unwrap();
        ids.insert(m.headers.get("Nats-Msg-Id").unwrap().as_str().to_string());
    }
    assert!(
        ids.iter().all(|id| id.starts_with("jetrelay-replay:DLQ:")),
        "{ids:?}"
    );
}

#[tokio::test]
async fn replays_to_a_stream_that_takes_batches_go_in_atomic_pages() {
    let nats = NatsServer::start().await;
    let (client, js) = client(&nats).await;
    a_stream(&js, "DLQ", &["dlq.x"], true, false).await;
    a_stream(&js, "TO", &["to.>", "elsewhere"], false, true).await;
    fill_letters(&client, &js, "dlq.x", 2500).await;
    eventually("filled", T, || async { count(&js, "DLQ").await == 2500 }).await;
    let (code, text, err) = dlq(&nats, &["replay", "DLQ", "--seq", "1-1200"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(text.contains("selected 1200, replayed 1200"), "{text}");
    // Pages of at most 1000, each one batch: consecutive sequences, one batch id.
    let s = js.get_stream("TO").await.unwrap();
    let batch = |seq| {
        let s = s.clone();
        async move {
            let m = s.get_raw_message(seq).await.unwrap();
            m.headers
                .get("Nats-Batch-Id")
                .map(|v| v.as_str().to_string())
        }
    };
    assert!(batch(1).await.is_some());
    assert_eq!(batch(1).await, batch(1000).await);
    assert_ne!(batch(1000).await, batch(1001).await);
    // --to sends them elsewhere; the rest again: only the new ones are stored.
    let (code, text, _) = dlq(
        &nats,
        &["replay", "DLQ", "--seq", "2500", "--to", "elsewhere"],
    )
    .await;
    assert_eq!(code, 0);
    assert!(text.contains("replayed 1"), "{text}");
    // The id is the dead letter's, wherever it went: 2500 was replayed already.
    let (_, text, _) = dlq(&nats, &["replay", "DLQ"]).await;
    assert!(
        text.contains("selected 2500, replayed 1299, already replayed 1201"),
        "{text}"
    );
    assert_eq!(count(&js, "TO").await, 2500);
}

#[tokio::test]
async fn two_replays_with_delete_at_once_store_each_letter_once_and_both_succeed() {
    let nats = NatsServer::start().await;
    let (client, js) = client(&nats).await;
    a_stream(&js, "DLQ", &["dlq.x"], true, false).await;
    a_stream(&js, "TO", &["to.>"], false, true).await;
    let total = 3000;
    fill_letters(&client, &js, "dlq.x", total).await;
    eventually("filled", T, || async { count(&js, "DLQ").await == total }).await;
    let run = || dlq(&nats, &["replay", "DLQ", "--delete"]);
    let (a, b) = tokio::join!(run(), run());
    let number = |out: &str, after: &str| -> u64 {
        let at = out.find(after).unwrap() + after.len();
        out[at..]
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let mut replayed = 0;
    for (code, out, err) in [&a, &b] {
        assert_eq!(*code, 0, "{out}\n{err}");
        assert!(out.contains("failed 0"), "{out}");
        replayed += number(out, ", replayed ");
    }
    // What one stored first, the other reports as already replayed.
    assert_eq!(replayed, total, "{}\n{}", a.1, b.1);
    assert_eq!(count(&js, "TO").await, total, "each stored once");
    assert_eq!(count(&js, "DLQ").await, 0, "all deleted");
}

#[tokio::test]
async fn purge_deletes_only_what_is_selected_and_only_with_yes() {
    let nats = NatsServer::start().await;
    let (client, js) = client(&nats).await;
    a_stream(&js, "DLQ", &["dlq.x"], true, false).await;
    fill_letters(&client, &js, "dlq.x", 10).await;
    eventually("filled", T, || async { count(&js, "DLQ").await == 10 }).await;
    let (code, _, err) = dlq(&nats, &["purge", "DLQ", "--seq", "3-5"]).await;
    assert_eq!(code, 64, "{err}");
    assert!(
        err.contains("3 dead letter(s) selected") && err.contains("--yes"),
        "{err}"
    );
    assert_eq!(count(&js, "DLQ").await, 10);
    let (code, text, _) = dlq(&nats, &["purge", "DLQ", "--seq", "3-5", "--yes"]).await;
    assert_eq!(code, 0);
    assert!(
        text.contains("selected 3") && text.contains("deleted 3"),
        "{text}"
    );
    let (_, text, _) = dlq(&nats, &["ls", "DLQ", "--json"]).await;
    let left: Vec<u64> = serde_json::from_str::<Vec<Value>>(&text)
        .unwrap()
        .iter()
        .map(|r| r["dlq_seq"].as_u64().unwrap())
        .collect();
    assert_eq!(left, [1, 2, 6, 7, 8, 9, 10]);
}

/// Collects the reply subjects of the first `n` messages published to `subject`.
async fn replies_of(
    client: &async_nats::Client,
    subject: &str,
    n: usize,
) -> tokio::task::JoinHandle<Vec<String>> {
    use futures::StreamExt;
    let mut sub = client.subscribe(subject.to_string()).await.unwrap();
    crate::fast::subscribed(client).await;
    tokio::spawn(async move {
        let mut replies = Vec::new();
        while replies.len() < n {
            match tokio::time::timeout(T, sub.next()).await {
                Ok(Some(m)) => replies.push(m.reply.map(|r| r.to_string()).unwrap_or_default()),
                _ => break,
            }
        }
        replies
    })
}

/// The payload and `Nats-Msg-Id` stored at `seq`.
async fn stored_at(js: &jetstream::Context, stream: &str, seq: u64) -> (String, String) {
    let m = js
        .get_stream(stream)
        .await
        .unwrap()
        .get_raw_message(seq)
        .await
        .unwrap();
    (
        String::from_utf8_lossy(&m.payload).into_owned(),
        m.headers.get("Nats-Msg-Id").unwrap().as_str().to_string(),
    )
}

#[tokio::test]
async fn a_fast_replay_stores_five_thousand_letters_once_in_fast_batches() {
    let nats = NatsServer::start().await;
    let (client, js) = client(&nats).await;
    a_stream(&js, "DLQ", &["dlq.x"], true, false).await;
    crate::fast::batched_stream(&client, "TO", &["to.>"], true, serde_json::json!({})).await;
    let total = 5000;
    fill_letters(&client, &js, "dlq.x", total).await;
    eventually("filled", T, || async { count(&js, "DLQ").await == total }).await;

    let watch = replies_of(&client, "to.>", total as usize).await;
    let (code, text, err) = dlq(&nats, &["replay", "DLQ", "--fast", "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let summary: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(summary["selected"], total, "{summary}");
    assert_eq!(summary["replayed"], total, "{summary}");
    assert_eq!(summary["already_replayed"], 0, "{summary}");
    assert_eq!(summary["failed"], 0, "{summary}");
    assert_eq!(summary["fast"], true, "{summary}");
    assert_eq!(summary["not_fast"], serde_json::json!([]), "{summary}");
    assert_eq!(count(&js, "TO").await, total);
    // In DLQ order, each with its replay id.
    for seq in [1, 2, 2500, total] {
        assert_eq!(
            stored_at(&js, "TO", seq).await,
            (
                format!("letter {}", seq - 1),
                format!("jetrelay-replay:DLQ:{seq}")
            )
        );
    }
    // Every letter went in a fast batch: the protocol is in the reply subject.
    let replies = watch.await.unwrap();
    assert_eq!(replies.len(), total as usize);
    assert!(
        replies
            .iter()
            .all(|r| r.ends_with(".$FI") && r.contains(".fail.")),
        "{:?}",
        replies.iter().find(|r| !r.ends_with(".$FI"))
    );

    // Run again: every page is a batch of duplicates, nothing is stored twice.
    let (code, text, err) = dlq(&nats, &["replay", "DLQ", "--fast", "--delete"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains("selected 5000, replayed 0, already replayed 5000, deleted 5000, failed 0"),
        "{text}"
    );
    assert_eq!(count(&js, "TO").await, total);
    assert_eq!(count(&js, "DLQ").await, 0, "deleted after their PubAck");
}

#[tokio::test]
async fn a_fast_replay_to_a_stream_without_allow_batched_replays_without_it_and_says_so() {
    let nats = NatsServer::start().await;
    let (client, js) = client(&nats).await;
    a_stream(&js, "DLQ", &["dlq.x"], true, false).await;
    a_stream(&js, "TO", &["to.>"], false, true).await;
    fill_letters(&client, &js, "dlq.x", 30).await;
    eventually("filled", T, || async { count(&js, "DLQ").await == 30 }).await;
    let (code, text, err) = dlq(&nats, &["replay", "DLQ", "--fast"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains("not fast: stream TO does not allow fast ingest (allow_batched is off)")
            && text.contains("30 letter(s)"),
        "{text}"
    );
    assert!(text.contains("selected 30, replayed 30"), "{text}");
    // Without --fast it went as an atomic batch (the stream allows those).
    let (_, id) = stored_at(&js, "TO", 1).await;
    assert_eq!(id, "jetrelay-replay:DLQ:1");
    let m = js
        .get_stream("TO")
        .await
        .unwrap()
        .get_raw_message(1)
        .await
        .unwrap();
    assert!(m.headers.get("Nats-Batch-Id").is_some());
    let (code, text, _) = dlq(&nats, &["replay", "DLQ", "--fast", "--json"]).await;
    assert_eq!(code, 0);
    let summary: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(summary["already_replayed"], 30, "{summary}");
    assert_eq!(
        summary["not_fast"],
        serde_json::json!([{"stream": "TO", "letters": 30}])
    );
    assert_eq!(count(&js, "TO").await, 30);
}

#[tokio::test]
async fn an_interrupted_fast_replay_run_again_stores_each_message_once() {
    let nats = NatsServer::start().await;
    let (client, js) = client(&nats).await;
    a_stream(&js, "DLQ", &["dlq.x"], true, false).await;
    crate::fast::batched_stream(&client, "TO", &["to.>"], true, serde_json::json!({})).await;
    let total = 20_000;
    fill_letters(&client, &js, "dlq.x", total).await;
    eventually("filled", T, || async { count(&js, "DLQ").await == total }).await;

    let mut first = tokio::process::Command::new(BIN)
        .args(["dlq", "replay", "DLQ", "--fast", "--server", nats.url()])
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // Fast ingest is quick: look often, and kill as soon as some are stored.
    let deadline = tokio::time::Instant::now() + T;
    while count(&js, "TO").await < 1000 {
        assert!(tokio::time::Instant::now() < deadline, "nothing replayed");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    first.start_kill().unwrap();
    first.wait().await.unwrap();
    let partial = count(&js, "TO").await;
    assert!(partial < total, "killed midway: {partial} of {total}");

    let (code, text, err) = dlq(&nats, &["replay", "DLQ", "--fast", "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let summary: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(summary["selected"], total, "{summary}");
    assert_eq!(summary["failed"], 0, "{summary}");
    let already = summary["already_replayed"].as_u64().unwrap();
    let replayed = summary["replayed"].as_u64().unwrap();
    assert_eq!(already + replayed, total, "{summary}");
    // Whole pages stored before the kill are told apart; the page cut by the kill
    // counts as replayed (a fast batch does not report its duplicates).
    assert!(already + 1000 > partial, "{summary} after {partial}");
    assert_eq!(count(&js, "TO").await, total, "each stored once");
    let handle = crate::fast::connect_with(&nats, 5000).await;
    let ids: BTreeSet<String> = crate::fast::stored(&handle, "TO")
        .await
        .into_iter()
        .filter_map(|m| {
            m.headers
                .into_iter()
                .find(|(n, _)| n == "Nats-Msg-Id")
                .map(|(_, v)| v)
        })
        .collect();
    assert_eq!(ids.len(), total as usize, "no id stored twice");
    assert!(
        ids.iter().all(|id| id.starts_with("jetrelay-replay:DLQ:")),
        "{ids:?}"
    );
}

#[tokio::test]
async fn the_dlq_commands_guard_against_the_wrong_stream_the_wrong_consumer_and_hostile_bytes() {
    let s = setup().await;
    // A hostile publisher: escape sequences in a header and in the payload.
    let mut headers = HeaderMap::new();
    headers.insert("X-Evil", "a\u{1b}[2Jb");
    headers.insert("X-Bidi", "txt.\u{202e}exe");
    s.env
        .js
        .publish_with_headers(
            "orders.eu",
            headers,
            "bad \u{1b}]0;pwned\u{7}\nline two".into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    eventually("dead-lettered", T, || async {
        count(&s.env.js, &s.dlq).await == 1
    })
    .await;

    // What reaches the terminal is escaped; the payload keeps its line breaks.
    let (code, text, err) = dlq(&s.env.nats, &["show", &s.dlq, "1"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{7}'),
        "{text:?}"
    );
    assert!(text.contains("X-Evil: a\\u{1b}[2Jb"), "{text}");
    assert!(text.contains("X-Bidi: txt.\\u{202e}exe"), "{text}");
    assert!(
        text.contains("bad \\u{1b}]0;pwned\\u{7}\nline two"),
        "{text}"
    );
    // The consumer is a column, and a filter.
    let (_, text, _) = dlq(&s.env.nats, &["ls", &s.dlq]).await;
    assert!(
        text.lines().next().unwrap().contains("CONSUMER") && text.contains(&s.env.durable),
        "{text}"
    );
    let (_, text, _) = dlq(&s.env.nats, &["ls", &s.dlq, "--consumer", "nobody"]).await;
    assert!(text.contains("(no dead letters selected)"), "{text}");
    let (_, text, _) = dlq(
        &s.env.nats,
        &["ls", &s.dlq, "--json", "--consumer", &s.env.durable],
    )
    .await;
    assert_eq!(serde_json::from_str::<Vec<Value>>(&text).unwrap().len(), 1);

    // A dry run resolves where each letter would be stored, and says when nowhere.
    let (code, text, _) = dlq(
        &s.env.nats,
        &["replay", &s.dlq, "--dry-run", "--to", "nowhere.x"],
    )
    .await;
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("failed: 1: no stream captures nowhere.x"),
        "{text}"
    );

    // The source stream named by mistake (it answers direct gets too): nothing is
    // replayed or deleted from it.
    let mut config = s
        .env
        .js
        .get_stream(&s.env.stream)
        .await
        .unwrap()
        .cached_info()
        .config
        .clone();
    config.allow_direct = true;
    s.env.js.update_stream(config).await.unwrap();
    let before = count(&s.env.js, &s.env.stream).await;
    let (code, text, _) = dlq(&s.env.nats, &["replay", &s.env.stream, "--delete"]).await;
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("not a dead letter")
            && text.contains("replayed 0")
            && text.contains("deleted 0"),
        "{text}"
    );
    let (code, text, _) = dlq(&s.env.nats, &["purge", &s.env.stream, "--yes"]).await;
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("not a dead letter") && text.contains("deleted 0"),
        "{text}"
    );
    assert_eq!(count(&s.env.js, &s.env.stream).await, before);
    s.relay.stop().await.unwrap();
}

/// `delivery.max_age_ms` is checked at every attempt: a message the app asked to
/// retry comes back older than the limit and is dead-lettered as `too_old`, sent once
/// only; one published within the limit that the app takes is acked.
#[tokio::test]
async fn a_retry_past_max_age_is_dead_lettered_as_too_old_and_not_sent_again() {
    let app = MockApp::start(|r, _| {
        if r.body[..] == b"busy"[..] {
            Reply::status(503)
        } else {
            Reply::status(200)
        }
    })
    .await;
    let env = Env::start(&["age.>"]).await;
    let dlq_stream = unique("DLQ");
    create_stream(&env.js, &dlq_stream, &[&format!("dlq.{}", env.stream)]).await;
    // The retry comes 1.5 s after the first attempt: past the limit of 1 s.
    let extra = format!(
        "[dlq]\nsubject = \"dlq.{}\"\n[delivery]\nordering = \"none\"\nmax_age_ms = 1000\n\
         retry_initial_ms = 1500\n",
        env.stream
    );
    let relay = env.relay(&app, &extra).await;
    publish_with(&env.js, "age.a", "busy", &[]).await;
    publish_with(&env.js, "age.b", "fine", &[]).await;
    eventually("all settled", Duration::from_secs(20), || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    let bodies: Vec<Vec<u8>> = app.requests().iter().map(|r| r.body.to_vec()).collect();
    assert_eq!(
        bodies.iter().filter(|b| b[..] == b"busy"[..]).count(),
        1,
        "sent once: the retry was too old"
    );
    let mut dlq = env.js.get_stream(&dlq_stream).await.unwrap();
    assert_eq!(dlq.info().await.unwrap().state.messages, 1);
    let letter = dlq.get_raw_message(1).await.unwrap();
    assert_eq!(&letter.payload[..], b"busy");
    assert_eq!(
        letter
            .headers
            .get("Jetrelay-Dlq-Reason")
            .map(|v| v.as_str()),
        Some("jetrelay: too_old")
    );
    assert_eq!(
        relay
            .metric("jetrelay_expired_total{reason=\"max_age\"}")
            .await,
        1.0
    );
}
