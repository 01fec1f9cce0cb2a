//! The example apps in other languages (`examples/app.js` on node:http, `examples/app.go`
//! on net/http) against jetrelay, run as a user runs them: each message printed, a 200
//! acked, the "bad" one dead-lettered (400, or `term` in a batch), the "flaky" one
//! retried after its `Retry-After` (503, or `retry` in a batch); with `WEBHOOK_SECRET`,
//! each (and `examples/app.py`) refuses what jetrelay did not sign. Node is required;
//! the Go example is skipped, with a line saying so, where no Go toolchain is
//! installed.

use std::ffi::OsStr;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::support::*;

const T: Duration = Duration::from_secs(30);
const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// An example app on a free loopback port, the lines it prints collected.
struct Example {
    _child: Child,
    port: u16,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Example {
    /// Runs `program args` with `PORT` set and waits until it listens.
    async fn start(program: impl AsRef<OsStr>, args: &[&str]) -> Example {
        Example::start_with(program, args, &[]).await
    }

    /// [`Example::start`] with `env` set too.
    async fn start_with(
        program: impl AsRef<OsStr>,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Example {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = Command::new(program)
            .args(args)
            .current_dir(ROOT)
            .env("PORT", port.to_string())
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let mut reader = BufReader::new(child.stdout.take().unwrap()).lines();
        let sink = lines.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = reader.next_line().await {
                sink.lock().unwrap().push(line);
            }
        });
        eventually("the example listens", T, || async {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
        })
        .await;
        Example {
            _child: child,
            port,
            lines,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/messages", self.port)
    }

    fn printed(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }
}

/// The Go example built into `dir`; `None`, saying so, where `go` is not installed
/// (outside CI).
#[allow(clippy::print_stderr)] // The skip is said where the test's output goes.
async fn go_example(dir: &Path) -> Option<PathBuf> {
    let bin = dir.join("app");
    let out = Command::new("go")
        .args(["build", "-o"])
        .arg(&bin)
        .arg("examples/app.go")
        .current_dir(ROOT)
        .output()
        .await;
    match out {
        Err(e) if e.kind() == ErrorKind::NotFound => {
            // CI installs Go (scripts/setup): there, a missing toolchain is a failure,
            // not a test that passes without running.
            assert!(
                std::env::var_os("CI").is_none(),
                "CI is set and `go` is not on PATH: scripts/setup installs it (golang-go)"
            );
            eprintln!(
                "skipped: no Go toolchain (`go` is not on PATH): examples/app.go not built or run"
            );
            None
        }
        Err(e) => panic!("go build: {e}"),
        Ok(out) => {
            assert!(
                out.status.success(),
                "go build examples/app.go: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            Some(bin)
        }
    }
}

/// What `examples/app.py` does, asked of `app`: one message per request, then the
/// batch form.
async fn answers_as_documented(app: &Example) {
    // The 503 tells jetrelay when to come back.
    let resp = http()
        .post(app.url())
        .header("Nats-Subject", "o.0")
        .header("Nats-Sequence", "1")
        .header("Nats-Delivered", "1")
        .body("flaky")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 503);
    assert_eq!(resp.headers()["retry-after"], "1");

    delivers(app, "", ["200", "400", "503", "200"]).await;
    let batch = "[delivery]\nbatch_size = 10\nbatch_wait_ms = 300\n";
    delivers(app, batch, ["ack", "term", "retry", "ack"]).await;
}

/// Three orders through jetrelay (with `extra` TOML) to `app`, a dead-letter queue
/// configured: the app prints each with its outcome (`outcomes`: the good one, the bad
/// one, the flaky one's first and second delivery), the good and the flaky one are
/// acked, the bad one is dead-lettered.
async fn delivers(app: &Example, extra: &str, outcomes: [&str; 4]) {
    let env = Env::start(&["o.>"]).await;
    let dlq_stream = unique("DLQ");
    create_stream(&env.js, &dlq_stream, &[&format!("dlq.{}", env.stream)]).await;
    publish_each(
        &env.js,
        &[
            ("o.1", "order 1"),
            ("o.2", "a bad order"),
            ("o.3", "order 3 (flaky)"),
        ],
    )
    .await;
    let before = app.printed().len();
    let extra = format!("[dlq]\nsubject = \"dlq.{}\"\n{extra}", env.stream);
    let cfg = durable_config_for(
        env.nats.url(),
        &app.url(),
        &env.stream,
        &env.durable,
        &extra,
    );
    let relay = Relay::ready(cfg).await;
    eventually("all settled", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    let want = [
        format!(
            "app <- o.1 seq=1 delivered=1 body='order 1' -> {}",
            outcomes[0]
        ),
        format!(
            "app <- o.2 seq=2 delivered=1 body='a bad order' -> {}",
            outcomes[1]
        ),
        format!(
            "app <- o.3 seq=3 delivered=1 body='order 3 (flaky)' -> {}",
            outcomes[2]
        ),
        format!(
            "app <- o.3 seq=3 delivered=2 body='order 3 (flaky)' -> {}",
            outcomes[3]
        ),
    ];
    eventually("the app printed each delivery", T, || async {
        app.printed().len() >= before + want.len()
    })
    .await;
    let mut printed = app.printed()[before..].to_vec();
    printed.sort();
    assert_eq!(printed, want, "{extra}");
    let dlq = env.js.get_stream(&dlq_stream).await.unwrap();
    assert_eq!(dlq.cached_info().state.messages, 1, "the bad order");
    assert_eq!(
        dlq.get_raw_message(1).await.unwrap().payload,
        &b"a bad order"[..]
    );
    let m = |s: &'static str| relay.metric(s);
    assert_eq!(
        m("jetrelay_messages_settled_total{action=\"ack\"}").await,
        2.0
    );
    assert_eq!(
        m("jetrelay_messages_settled_total{action=\"nak\"}").await,
        1.0
    );
    assert_eq!(
        m("jetrelay_messages_settled_total{action=\"dlq\"}").await,
        1.0
    );
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn the_node_example_answers_as_the_python_one() {
    let node = Command::new("node").arg("--version").output().await;
    if let Err(e) = &node {
        panic!(
            "node: {e}: the Node example (examples/app.js) needs Node.js 16 or later on PATH (scripts/setup installs it, as root, from the system's packages)"
        );
    }
    let app = Example::start("node", &["examples/app.js"]).await;
    answers_as_documented(&app).await;
}

#[tokio::test]
async fn the_go_example_answers_as_the_python_one() {
    let dir = tempfile::tempdir().unwrap();
    let Some(bin) = go_example(dir.path()).await else {
        return;
    };
    let app = Example::start(&bin, &[]).await;
    answers_as_documented(&app).await;
}

/// What `[http.signing]` signs with, and what the examples are given as
/// `WEBHOOK_SECRET`.
const WHSEC: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// With `WEBHOOK_SECRET`, `app` refuses an unsigned request (401) and takes what
/// jetrelay signs as it takes anything else (with `batches`, in the batch form too).
async fn verifies_signatures(app: &Example, batches: bool) {
    let resp = http()
        .post(app.url())
        .header("Nats-Subject", "o.0")
        .header("webhook-id", "x")
        .header("webhook-timestamp", "1")
        .header("webhook-signature", "v1,AAAA")
        .body("order")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("whsec");
    std::fs::write(&secret, WHSEC).unwrap();
    let signing = format!("[http.signing]\nsecret_file = \"{}\"\n", secret.display());
    delivers(app, &signing, ["200", "400", "503", "200"]).await;
    if batches {
        let batch = format!("{signing}[delivery]\nbatch_size = 10\nbatch_wait_ms = 300\n");
        delivers(app, &batch, ["ack", "term", "retry", "ack"]).await;
    }
}

#[tokio::test]
async fn the_examples_verify_standard_webhooks_signatures() {
    let env = [("WEBHOOK_SECRET", WHSEC)];
    // The tools venv's Python, which has the specification's `standardwebhooks`.
    let python = crate::support::peer::python();
    let py = Example::start_with(&python, &["examples/app.py"], &env).await;
    verifies_signatures(&py, false).await;
    let node = Example::start_with("node", &["examples/app.js"], &env).await;
    verifies_signatures(&node, true).await;
    let dir = tempfile::tempdir().unwrap();
    if let Some(bin) = go_example(dir.path()).await {
        let go = Example::start_with(&bin, &[], &env).await;
        verifies_signatures(&go, true).await;
    }
}
