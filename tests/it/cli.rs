//! The command-line tools as a shell runs them, against what they cannot trust:
//! `jetrelay ps` among forged discovery answers (oversized, too many, hostile text),
//! and every command that prints writing into a pipe its reader closed.

use futures::StreamExt;
use serde_json::json;

use crate::support::daemon::BIN;
use crate::support::{MockApp, NatsServer, Relay, unique};

/// `jetrelay <args>` (no config file): exit code, stdout, stderr.
async fn jetrelay(args: &[&str]) -> (Option<i32>, String, String) {
    let out = tokio::process::Command::new(BIN)
        .args(args)
        .env_remove("JETRELAY_CONFIG")
        .output()
        .await
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
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
