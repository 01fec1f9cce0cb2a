//! The command-line tools as a shell runs them, against what they cannot trust:
//! `jetrelay ps` among forged discovery answers (oversized, too many, hostile text),
//! every command that prints writing into a pipe its reader closed, and `check`'s
//! hints in a config of several sources.

use std::time::Duration;

use futures::StreamExt;
use serde_json::json;

use crate::support::daemon::BIN;
use crate::support::groups::static_group;
use crate::support::{MockApp, NatsServer, Relay, create_stream, publish, unique};

/// `jetrelay <args>` (no config file): exit code, stdout, stderr.
async fn jetrelay(args: &[&str]) -> (Option<i32>, String, String) {
    crate::support::daemon::run_bin(args).await
}

/// What a terminal must not be handed raw: control characters (but the line
/// breaks) and the bidirectional formatting characters.
fn hidden(c: char) -> bool {
    (c.is_control() && c != '\n')
        || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}')
}

const HOSTILE: &str = "\u{1b}]0;owned\u{7}\u{1b}[2J\u{202e}evil\u{2066}\u{200f}";

/// An INFO answer of service `jetrelay`, instance `id`, one source.
fn info(id: &str, connection: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "type": "io.nats.micro.v1.info_response", "name": "jetrelay", "id": id,
        "version": HOSTILE, "metadata": {"connection": connection},
        "endpoints": [{"name": HOSTILE, "subject": "S", "metadata": {
            "stream": HOSTILE, "consumer": "c", "state": HOSTILE,
            "pinned": "false", "paused": "false", "concurrency_limit": "8"}}]
    }))
    .unwrap()
}

/// Answers every `$SRV.INFO.jetrelay` with `answers`, and every
/// `$SRV.STATS.jetrelay` with `stats`, as anyone on the account may.
async fn forge(nats: &NatsServer, answers: Vec<Vec<u8>>, stats: Vec<Vec<u8>>) {
    let client = async_nats::connect(nats.url()).await.unwrap();
    for (subject, replies) in [
        ("$SRV.INFO.jetrelay", answers),
        ("$SRV.STATS.jetrelay", stats),
    ] {
        let mut sub = client.subscribe(subject).await.unwrap();
        let client = client.clone();
        tokio::spawn(async move {
            while let Some(m) = sub.next().await {
                let Some(reply) = m.reply else { continue };
                for r in &replies {
                    client
                        .publish(reply.clone(), r.clone().into())
                        .await
                        .unwrap();
                }
                client.flush().await.unwrap();
            }
        });
    }
    client.flush().await.unwrap();
}

#[tokio::test]
async fn ps_reads_at_most_1000_instances_and_64_kib_a_reply_counts_the_rest_and_escapes_every_string()
 {
    let nats = NatsServer::start().await;
    // Two answers of 1,000 KiB and 100 KiB, one that is not JSON, then 1,005 instances
    // whose every string is hostile.
    let mut answers = vec![
        info("BIG1", &"x".repeat(1000 << 10)),
        info("BIG2", &"y".repeat(100 << 10)),
        b"\x1b[2Jnot json".to_vec(),
    ];
    answers.extend((0..1005).map(|i| info(&format!("{HOSTILE}{i}"), HOSTILE)));
    let stats = vec![vec![b'{'; 1000 << 10]];
    forge(&nats, answers, stats).await;

    let (code, out, err) = jetrelay(&["ps", "--server", nats.url()]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(err, "", "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("INSTANCE"), "{}", lines[0]);
    assert_eq!(
        lines.len(),
        1 + 1000 + 1,
        "header, 1,000 rows, the last line"
    );
    assert_eq!(
        lines[1001],
        "8 replies ignored: 2 larger than 64 KiB, 5 past the first 1,000 instances, 1 not a jetrelay's answer, or an instance's id again"
    );
    assert!(!out.chars().any(hidden), "raw control or bidi characters");
    assert!(
        lines[1].contains(r"\u{1b}]0;owned\u{7}\u{1b}[2J\u{202e}evil\u{2066}\u{200f}"),
        "escaped as group info does: {}",
        lines[1]
    );
    assert!(out.len() < 2 << 20, "{} bytes", out.len());

    // --json: stdout stays a JSON array; what was left out goes to stderr.
    let (code, out, err) = jetrelay(&["ps", "--server", nats.url(), "--json"]).await;
    assert_eq!(code, Some(0), "{err}");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(rows.len(), 1000);
    assert!(!out.chars().any(hidden));
    assert!(
        err.contains("8 replies ignored: 2 larger than 64 KiB"),
        "{err}"
    );
    assert!(!err.chars().any(hidden), "{err}");
}

#[tokio::test]
async fn ps_tells_instances_of_one_name_apart_and_shows_a_service_source_as_its_service() {
    let nats = NatsServer::start().await;
    let app = MockApp::ok().await;
    let svc = unique("svc").to_lowercase();
    // Two instances with the default nats.name ("jetrelay"), one service source each.
    let text = format!(
        "[nats]\nservers = \"{}\"\n[http]\nurl = \"{}\"\n[admin]\nlisten = \"127.0.0.1:0\"\n[log]\nlevel = \"warn\"\n\
         [sources.rpc]\nkind = \"service\"\nservice = \"{svc}\"\nversion = \"1.0.0\"\nqueue_group = \"q\"\n\
         endpoints = [{{ name = \"create\", subject = \"{svc}.create\" }}]\n",
        nats.url(),
        app.url()
    );
    let config = || jetrelay::config::Config::from_toml(&[&text]).unwrap();
    let relays = [Relay::ready(config()).await, Relay::ready(config()).await];
    let (code, out, err) = jetrelay(&["ps", "--server", nats.url(), "--json"]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(rows.len(), 2, "{out}");
    for r in &rows {
        let id = r["id"].as_str().unwrap();
        assert_eq!(r["instance"], format!("jetrelay/{id}"), "{out}");
        assert_eq!(r["source"], "rpc", "{out}");
        assert_eq!(r["consumes"], format!("service {svc}"), "{out}");
    }
    assert_ne!(rows[0]["instance"], rows[1]["instance"], "{out}");
    for r in relays {
        r.stop().await.unwrap();
    }
}

/// `jetrelay <args>` with stdout a pipe whose reader has gone, as after `| head -1`:
/// exit code and stderr.
async fn into_closed_pipe(args: &[&str]) -> (Option<i32>, String) {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = tokio::process::Command::new(BIN)
        .args(args)
        .env_remove("JETRELAY_CONFIG")
        .env("RUST_BACKTRACE", "1")
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
        .wait_with_output()
        .await
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn every_command_that_prints_ends_quietly_with_0_when_its_reader_has_gone() {
    let (nats, js, group_stream, _admin) = static_group(2, &["m1"]).await;
    let stream = unique("P");
    create_stream(&js, &stream, &["p.>"]).await;
    publish(&js, "p.a", 3).await;
    let letters = unique("DLQ");
    js.create_stream(async_nats::jetstream::stream::Config {
        name: letters.clone(),
        subjects: vec!["dlq.>".into()],
        allow_direct: true,
        ..Default::default()
    })
    .await
    .unwrap();
    publish(&js, "dlq.x", 2).await;
    let app = MockApp::ok().await;
    let text = |admin: &str| {
        format!(
            "[nats]\nservers = \"{}\"\n[source]\nstream = \"{stream}\"\nkind = \"durable\"\ndurable = \"d\"\n\
             [http]\nurl = \"{}\"\n[admin]\nlisten = \"{admin}\"\n[log]\nlevel = \"warn\"\n",
            nats.url(),
            app.url()
        )
    };
    let relay =
        Relay::ready(jetrelay::config::Config::from_toml(&[&text("127.0.0.1:0")]).unwrap()).await;
    app.wait_for("three", Duration::from_secs(10), |r| r.len() == 3)
        .await;
    // The running relay's admin port, for drain and --diff-running.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("jetrelay.toml");
    std::fs::write(&file, text(&relay.admin.to_string())).unwrap();
    let (f, url) = (file.to_str().unwrap(), nats.url());
    let running = format!("http://{}/config", relay.admin);
    let commands: Vec<Vec<&str>> = vec![
        vec!["--help"],
        vec!["--version"],
        vec!["ps", "--help"],
        vec!["ps", "--server", url],
        vec!["ps", "--server", url, "--json"],
        vec!["check", "--config", f],
        vec!["check", "--offline", "--config", f],
        vec!["check", "--config", f, "--diff-running", &running],
        vec!["group", "static", "ls", &group_stream, "--server", url],
        vec![
            "group",
            "static",
            "info",
            &group_stream,
            "cg",
            "--server",
            url,
        ],
        vec!["dlq", "ls", &letters, "--server", url],
        vec!["replay", "--seq", "1", "--dry-run", "--config", f],
        vec!["pause", "--config", f],
        vec!["resume", "--config", f],
        vec!["drain", "--config", f, "--wait", "5s"],
    ];
    for args in &commands {
        let (code, err) = into_closed_pipe(args).await;
        assert_eq!((code, err.as_str()), (Some(0), ""), "{args:?}");
        // And each does print: the same command into a pipe that is read (--diff-running
        // says 1: the file's admin.listen is not the running one's port 0).
        if args[0] != "drain" {
            let (code, out, err) = jetrelay(args).await;
            assert!(
                matches!(code, Some(0 | 1)) && !out.is_empty(),
                "{args:?}: {code:?} {out}{err}"
            );
        }
    }
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn check_names_the_sources_own_managed_stream_keys_in_its_publish_hints() {
    let nats = NatsServer::start().await;
    let (a, b) = (unique("A"), unique("B"));
    let source = |name: &str, stream: &str, subjects: &str| {
        format!(
            "[sources.{name}]\nstream = \"{stream}\"\nkind = \"durable\"\ndurable = \"{name}\"\n\
             [sources.{name}.topology]\nstream = \"managed\"\n\
             [sources.{name}.topology.managed_stream]\nsubjects = [{subjects}]\n"
        )
    };
    let text = format!(
        "[nats]\nservers = \"{}\"\n[http]\nurl = \"http://127.0.0.1:1\"\n\
         [publish]\nallowed_subjects = [\"out.b.>\", \"out.none.>\"]\n{}{}",
        nats.url(),
        source("a", &a, "\"in.a.>\""),
        source("b", &b, "\"in.b.>\", \"out.b.>\""),
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("jetrelay.toml");
    std::fs::write(&file, text).unwrap();
    let (code, out, err) = jetrelay(&["check", "--config", file.to_str().unwrap()]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    // B's stream, to be created, takes out.b.> but no atomic batch: the fix is in
    // source b's table, not the top-level one (which several sources do not read).
    assert!(
        out.contains("Change: sources.b.topology.managed_stream.allow_atomic = true, or publish.atomic = false"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "or add \"out.none.>\" to sources.a.topology.managed_stream.subjects (stream {a}), or add \"out.none.>\" to sources.b.topology.managed_stream.subjects (stream {b})"
        )),
        "{out}"
    );
    assert!(!out.contains(" topology.managed_stream."), "{out}");
}
