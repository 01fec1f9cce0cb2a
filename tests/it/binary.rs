//! The built binary: exit codes, `--version`, `check`, and SIGTERM.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::app::free_port;
use crate::support::*;

const BIN: &str = env!("CARGO_BIN_EXE_jetrelay");

fn write_config(dir: &tempfile::TempDir, text: &str) -> std::path::PathBuf {
    let path = dir.path().join("jetrelay.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn version_prints_and_exits_zero() {
    let out = Command::new(BIN).arg("--version").output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains(env!("CARGO_PKG_VERSION")));
}

#[test]
fn a_bad_config_exits_64_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(
        &dir,
        "[source]\nstream = \"S\"\nkind = \"durable\"\ndurable = \"d\"\n[http]\nurl = \"http://127.0.0.1:1/x\"\n[delivery]\nmax_in_flight = 0\n",
    );
    let out = Command::new(BIN)
        .arg("run")
        .arg("--config")
        .arg(&path)
        .env_remove("JETRELAY_CONFIG")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("delivery.max_in_flight: must be at least 1"),
        "{err}"
    );

    let out = Command::new(BIN)
        .arg("check")
        .env("JETRELAY_CONFIG", &path)
        .env("JETRELAY_DELIVERY__MAX_IN_FLIGHT", "4")
        .env("JETRELAY_HTTP__NOPE", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("http.nope"));
}

#[test]
fn mistakes_are_explained_plainly() {
    let dir = tempfile::tempdir().unwrap();
    let minimal = "[source]\nstream = \"S\"\nkind = \"durable\"\ndurable = \"d\"\n[http]\nurl = \"http://127.0.0.1:1/x\"\n";
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let mut cmd = Command::new(BIN);
        cmd.args(args).env_remove("JETRELAY_CONFIG");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    // A misspelt key, in the file and in the environment.
    let path = write_config(&dir, &format!("{minimal}[delivery]\nmax_inflight = 3\n"));
    let path = path.to_str().unwrap().to_string();
    let (code, err) = run(&["check", "--config", &path], &[]);
    assert_eq!(code, Some(64));
    assert_eq!(
        err.trim(),
        "jetrelay: invalid configuration:\n  delivery.max_inflight: unknown key; did you mean max_in_flight?"
    );
    let path = write_config(&dir, minimal);
    let path = path.to_str().unwrap().to_string();
    let (code, err) = run(
        &["check", "--config", &path],
        &[("JETRELAY_DELIVERY__MAX_INFLIGHT", "3")],
    );
    assert_eq!(code, Some(64));
    assert!(
        err.contains("JETRELAY_DELIVERY__MAX_INFLIGHT (delivery.max_inflight): unknown key; did you mean JETRELAY_DELIVERY__MAX_IN_FLIGHT?"),
        "{err}"
    );
    // A bad ordering key, refused at load like any other value.
    let (code, err) = run(
        &["check", "--config", &path],
        &[("JETRELAY_DELIVERY__ORDERING", "token:0")],
    );
    assert_eq!(code, Some(64));
    assert!(
        err.contains("JETRELAY_DELIVERY__ORDERING (delivery.ordering): \"token:0\": N must be a whole number from 1 to 255"),
        "{err}"
    );
    // A TOML syntax error: the file, the line, the column.
    let bad = write_config(&dir, "[source]\nstream = \"S\"\n[http\n");
    let (code, err) = run(&["run", "--config", bad.to_str().unwrap()], &[]);
    assert_eq!(code, Some(64));
    assert!(
        err.contains(&format!(
            "{}, line 3, column 6: not valid TOML",
            bad.display()
        )),
        "{err}"
    );
    // No config at all.
    for cmd in ["check", "run"] {
        let (code, err) = run(&[cmd], &[]);
        assert_eq!(code, Some(64));
        assert!(
            err.starts_with(
                "jetrelay: no config file was given (--config FILE, or JETRELAY_CONFIG=FILE)"
            ),
            "{cmd}: {err}"
        );
    }
}

#[test]
fn usage_errors_exit_64() {
    let out = Command::new(BIN).arg("frobnicate").output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    let out = Command::new(BIN)
        .args(["run", "--config", "/nonexistent.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
}

fn config_text(nats: &NatsServer, app: &MockApp, stream: &str, durable: &str) -> String {
    format!(
        "[nats]\nservers = [\"{}\"]\n[source]\nstream = \"{stream}\"\nkind = \"durable\"\ndurable = \"{durable}\"\n\
         [topology]\nstream = \"managed\"\n[topology.managed_stream]\nsubjects = [\"bin.>\"]\n\
         [http]\nurl = \"{}\"\n[admin]\nlisten = \"127.0.0.1:0\"\n",
        nats.url(),
        app.url()
    )
}

#[tokio::test]
async fn check_prints_the_plan_and_changes_nothing() {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    let app = MockApp::ok().await;
    let (stream, durable) = (unique("S"), unique("d"));
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(&dir, &config_text(&nats, &app, &stream, &durable));
    let out = tokio::process::Command::new(BIN)
        .arg("check")
        .arg("--config")
        .arg(&path)
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("would be created"), "{text}");
    assert!(
        js.get_stream(&stream).await.is_err(),
        "check created the stream"
    );
}

#[tokio::test]
async fn check_shows_where_each_allowed_subject_publishes_and_what_could_go_wrong() {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    let app = MockApp::ok().await;
    let (stream, durable) = (unique("S"), unique("d"));
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "OUT".into(),
        subjects: vec!["out.>".into()],
        allow_atomic_publish: true,
        duplicate_window: Duration::from_secs(45),
        ..Default::default()
    })
    .await
    .unwrap();
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "PLAIN".into(),
        subjects: vec!["plain.>".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    let text = format!(
        "{}[consumer]\nack_wait_ms = 30000\nmax_deliver = 4\n\
         [publish]\nallowed_subjects = [\"out.>\", \"plain.x\", \"nowhere.>\"]\n\
         [dlq]\nsubject = \"plain.dlq\"\n",
        config_text(&nats, &app, &stream, &durable)
    );
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(&dir, &text);
    let out = tokio::process::Command::new(BIN)
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "warnings do not fail check: {text}");
    for want in [
        "publish out.>: stream OUT: atomic publish allowed, duplicate window 45s",
        "warning: publish out.>: stream OUT's duplicate window (45s) is shorter than an input's redelivery takes (the ack wait, or the longest backoff_ms, plus http.timeout_ms: 60s)",
        "Change: duplicate_window of at least 60s on stream OUT",
        "note: publish out.>: stream OUT is one replica on disk: nats-server stages every atomic batch to it on disk",
        "publish plain.x: stream PLAIN: atomic publish not allowed",
        "warning: publish plain.x: stream PLAIN does not take atomic batches, so every answer that publishes there is refused. Change: allow_atomic: true on stream PLAIN",
        "warning: publish nowhere.>: no stream captures it: publishing there fails (the input is retried). Change: create a stream with subjects [\"nowhere.>\"] and allow_atomic: true",
        "dlq plain.dlq: stream PLAIN: direct get not allowed",
        "warning: dlq plain.dlq: stream PLAIN does not answer direct gets, so `jetrelay dlq` cannot read it. Change: allow_direct: true on stream PLAIN",
    ] {
        assert!(text.contains(want), "{want:?} missing from:\n{text}");
    }
    // The report is for people: no log lines among it, on either stream.
    let err = String::from_utf8_lossy(&out.stderr);
    for line in text.lines().chain(err.lines()) {
        assert!(
            !line.trim_start().starts_with('{'),
            "a log line in check's output: {line}"
        );
    }
}

#[tokio::test]
async fn a_config_of_defaults_checks_without_a_warning() {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    let app = MockApp::ok().await;
    let (stream, durable) = (unique("S"), unique("d"));
    // The target stream as nats-server makes it by default (a two-minute duplicate
    // window), taking atomic batches, in memory.
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "OUT".into(),
        subjects: vec!["out.>".into()],
        allow_atomic_publish: true,
        storage: async_nats::jetstream::stream::StorageType::Memory,
        ..Default::default()
    })
    .await
    .unwrap();
    js.create_stream(async_nats::jetstream::stream::Config {
        name: stream.clone(),
        subjects: vec![format!("{stream}.>")],
        ..Default::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    for extra in ["", "[publish]\nallowed_subjects = [\"out.>\"]\n"] {
        let text = format!(
            "[nats]\nservers = [\"{}\"]\n[source]\nstream = \"{stream}\"\nkind = \"durable\"\ndurable = \"{durable}\"\n[http]\nurl = \"{}\"\n{extra}",
            nats.url(),
            app.url()
        );
        let path = write_config(&dir, &text);
        let out = tokio::process::Command::new(BIN)
            .args(["check", "--config"])
            .arg(&path)
            .output()
            .await
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stdout}{stderr}");
        assert!(!stdout.contains("warning"), "{extra}: {stdout}");
        assert!(stderr.is_empty(), "{extra}: {stderr}");
    }
}

#[tokio::test]
async fn sigterm_drains_and_exits_zero() {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    let app = MockApp::ok().await;
    let (stream, durable) = (unique("S"), unique("d"));
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(&dir, &config_text(&nats, &app, &stream, &durable));
    let mut child = tokio::process::Command::new(BIN)
        .arg("run")
        .arg("--config")
        .arg(&path)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    eventually("the stream exists", Duration::from_secs(20), || async {
        js.get_stream(&stream).await.is_ok()
    })
    .await;
    eventually("the consumer exists", Duration::from_secs(20), || async {
        consumer_info(&js, &stream, &durable).await.is_some()
    })
    .await;
    publish(&js, "bin.x", 5).await;
    app.wait_for("5 requests", Duration::from_secs(20), |r| r.len() == 5)
        .await;
    let pid = child.id().unwrap();
    Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(0));
    let mut stderr = String::new();
    use tokio::io::AsyncReadExt;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .await
        .unwrap();
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let delivered = lines
        .iter()
        .filter(|l| l["message"] == "message delivered")
        .count();
    assert_eq!(
        delivered, 5,
        "one JSON log line per settled message:\n{stderr}"
    );
    let one = lines
        .iter()
        .find(|l| l["message"] == "message delivered")
        .unwrap();
    for field in [
        "stream",
        "stream_seq",
        "delivered",
        "outcome",
        "status",
        "duration_ms",
    ] {
        assert!(!one[field].is_null(), "{field} missing in {one}");
    }
    assert!(!stderr.contains("m0"), "a payload was logged");
    assert!(
        lines
            .iter()
            .any(|l| l["message"] == "state changed" && l["state"] == "draining"),
        "{stderr}"
    );
}

async fn cli(url: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let server = ["--server", url];
    crate::support::daemon::run_bin(["group"].iter().chain(args).chain(&server)).await
}

#[tokio::test]
async fn the_group_cli_creates_changes_shows_and_deletes_groups() {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    let stream = unique("E");
    create_stream(&js, &stream, &["e.*.*"]).await;
    let url = nats.url();
    let (code, out, err) = cli(
        url,
        &[
            "elastic",
            "create",
            &stream,
            "eg",
            "4",
            "--filter",
            "e.*.*",
            "--wildcards",
            "2",
        ],
    )
    .await;
    assert_eq!(code, Some(0), "{out}{err}");
    let (code, out, _) = cli(url, &["elastic", "add", &stream, "eg", "b", "a", "a"]).await;
    assert_eq!(code, Some(0));
    assert_eq!(out.trim(), "members: a b", "stored sorted and deduplicated");
    let (code, out, _) = cli(url, &["--json", "elastic", "info", &stream, "eg"]).await;
    assert_eq!(code, Some(0));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["max_members"], 4);
    assert_eq!(v["wildcards"], serde_json::json!([[2]]));
    assert_eq!(
        v["member_reports"][0]["partitions"],
        serde_json::json!([0, 1])
    );
    let (_, out, _) = cli(url, &["elastic", "member-info", &stream, "eg", "b"]).await;
    assert!(out.contains("partitions [2, 3]"), "{out}");
    let (_, out, _) = cli(url, &["elastic", "ls", &stream]).await;
    assert_eq!(out.trim(), "eg");
    // The stored config as the other implementations read it.
    let kv = js.get_key_value("elastic-consumer-groups").await.unwrap();
    let stored: serde_json::Value =
        serde_json::from_slice(&kv.get(format!("{stream}.eg")).await.unwrap().unwrap()).unwrap();
    assert_eq!(
        stored,
        serde_json::json!({"max_members":4,"partitioning_filters":[{"filter":"e.*.*","partitioning_wildcards":[2]}],"members":["a","b"]})
    );
    let group_stream = js
        .get_stream(format!("{stream}-eg"))
        .await
        .unwrap()
        .cached_info()
        .clone();
    let source = &group_stream.config.sources.as_ref().unwrap()[0];
    assert_eq!(
        source.subject_transforms[0].destination,
        "{{Partition(4,2)}}.e.{{Wildcard(1)}}.{{Wildcard(2)}}"
    );

    // Invalid requests exit 64 and change nothing.
    let (code, _, err) = cli(
        url,
        &["elastic", "create-mapping", &stream, "eg", "a:0,1", "b:1"],
    )
    .await;
    assert_eq!(code, Some(64), "{err}");
    let (code, _, err) = cli(
        url,
        &[
            "static",
            "create",
            "balanced",
            &stream,
            "bad group",
            "2",
            "m1",
        ],
    )
    .await;
    assert_eq!(code, Some(64), "{err}");

    let (code, _, _) = cli(url, &["elastic", "rm", &stream, "eg"]).await;
    assert_eq!(code, Some(0));
    assert!(js.get_stream(format!("{stream}-eg")).await.is_err());
    let (code, _, _) = cli(url, &["elastic", "rm", &stream, "eg"]).await;
    assert_eq!(code, Some(0), "deleting again is fine");
}

#[tokio::test]
async fn the_group_cli_connects_with_the_nats_table_of_a_config_file() {
    let nats = NatsServer::start_with(&["--user", "admin", "--pass", "s3cret"]).await;
    let client =
        async_nats::ConnectOptions::with_user_and_password("admin".into(), "s3cret".into())
            .connect(nats.url())
            .await
            .unwrap();
    let js = async_nats::jetstream::new(client);
    let stream = unique("A");
    create_stream(&js, &stream, &["a.*"]).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("password"), "s3cret\n").unwrap();
    // Only [nats] is read: the rest of a member's config may be anything.
    let config = write_config(
        &dir,
        &format!(
            "[nats]\nservers = \"{}\"\nuser = \"admin\"\npassword_file = \"{}\"\n[source]\nkind = \"static\"\n",
            nats.url(),
            dir.path().join("password").display()
        ),
    );
    let create = [
        "group",
        "elastic",
        "create",
        &stream,
        "eg",
        "2",
        "--filter",
        "a.*",
        "--wildcards",
        "1",
    ];
    let run = |extra: &[&str]| {
        Command::new(BIN)
            .args(create)
            .args(extra)
            .env_remove("JETRELAY_CONFIG")
            .output()
            .unwrap()
    };
    let out = run(&["--server", nats.url()]);
    assert_eq!(out.status.code(), Some(1), "no credentials: refused");
    let out = run(&["--config", config.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let kv = js.get_key_value("elastic-consumer-groups").await.unwrap();
    assert!(kv.get(format!("{stream}.eg")).await.unwrap().is_some());
    // A bad [nats] table is a usage error naming the key.
    let bad = write_config(&dir, "[nats]\nuser = \"admin\"\n");
    let out = run(&["--config", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nats.password_file"));
}

#[tokio::test]
async fn the_group_cli_refuses_a_hostile_stored_config_quickly() {
    let (nats, js, stream, _) = crate::support::groups::static_group(2, &["m1"]).await;
    let kv = js.get_key_value("static-consumer-groups").await.unwrap();
    kv.put(
        format!("{stream}.cg"),
        r#"{"max_members":4294967295,"members":["m1"]}"#.into(),
    )
    .await
    .unwrap();
    let started = std::time::Instant::now();
    let (code, out, err) = cli(nats.url(), &["static", "info", &stream, "cg"]).await;
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        err.contains("the stored group config is invalid: max members must be at most 100000"),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    // Removing a broken group still works.
    let (code, _, err) = cli(nats.url(), &["static", "rm", &stream, "cg"]).await;
    assert_eq!(code, Some(0), "{err}");
}

#[tokio::test]
async fn check_fails_where_run_would_stop_on_a_missing_stream() {
    let nats = NatsServer::start().await;
    let app = MockApp::ok().await;
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[nats]\nservers = [\"{}\"]\n[source]\nstream = \"{}\"\nkind = \"durable\"\ndurable = \"d\"\n\
         [http]\nurl = \"{}\"\n",
        nats.url(),
        unique("NOPE"),
        app.url()
    );
    let retry = write_config(&dir, &text);
    let out = Command::new(BIN)
        .arg("check")
        .arg("--config")
        .arg(&retry)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(0),
        "on_missing = retry: run waits\n{said}"
    );
    assert!(said.contains("run waits for it"), "{said}");
    let fail = write_config(&dir, &format!("{text}[topology]\non_missing = \"fail\"\n"));
    let out = Command::new(BIN)
        .arg("check")
        .arg("--config")
        .arg(&fail)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(1),
        "on_missing = fail: run would stop\n{said}"
    );
    assert!(said.contains("run would stop"), "{said}");
}

#[test]
fn check_says_once_why_nats_cannot_be_reached() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(
        &dir,
        "[nats]\nservers = [\"nats://127.0.0.1:1\"]\n[source]\nstream = \"S\"\nkind = \"durable\"\n\
         durable = \"d\"\n[http]\nurl = \"http://127.0.0.1:1/x\"\n",
    );
    let out = Command::new(BIN)
        .arg("check")
        .arg("--config")
        .arg(&path)
        .env_remove("JETRELAY_CONFIG")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    // What needs no server was checked and says so, NATS or not.
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.starts_with("config: ok (source.kind = durable, stream S)"),
        "{said}"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err
        .lines()
        .find(|l| l.starts_with("jetrelay: "))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(line.contains("cannot connect to NATS"), "{line}");
    assert!(line.contains("jetrelay check --offline"), "{line}");
    assert_eq!(
        line.matches("Connection refused").count(),
        1,
        "each cause once: {line}"
    );
}

/// `check --offline` (CI, pre-commit hooks): the config, the environment and every
/// file it names, without NATS: 0 when valid, 64 naming the key when not.
#[test]
fn check_offline_validates_the_config_and_its_files_without_nats() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "t0k3n\n").unwrap();
    let config = |nats_token: &std::path::Path| {
        format!(
            "[nats]\nservers = [\"nats://127.0.0.1:1\"]\ntoken_file = \"{}\"\n\
             [source]\nstream = \"S\"\nkind = \"durable\"\ndurable = \"d\"\n\
             [http]\nurl = \"http://127.0.0.1:1/x\"\nbearer_token_file = \"{}\"\n",
            nats_token.display(),
            token.display()
        )
    };
    let check = |path: &std::path::Path, env: &[(&str, &str)]| {
        let mut cmd = Command::new(BIN);
        cmd.args(["check", "--offline", "--config"])
            .arg(path)
            .env_remove("JETRELAY_CONFIG");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // Nothing listens on port 1: valid is 0, and it says NATS was not contacted.
    let path = write_config(&dir, &config(&token));
    let (code, out, err) = check(&path, &[]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.starts_with("config: ok (source.kind = durable, stream S)"),
        "{out}"
    );
    assert!(out.contains("NATS was not contacted"), "{out}");
    // What it decides before the app, said.
    let (code, out, err) = check(&path, &[("JETRELAY_DELIVERY__MAX_AGE_MS", "120000")]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("\n  max age 2m: an older message is dead-lettered as too_old"),
        "{out}"
    );
    // Several sources: one line each, and each route where it goes (no password of
    // a URL shown).
    let two = "[nats]\nservers = [\"nats://127.0.0.1:1\"]\n[http]\nurl = \"http://u:s3cret@127.0.0.1:1/x\"\n\
         [sources.orders]\nstream = \"O\"\nkind = \"durable\"\ndurable = \"d\"\n\
         [[sources.orders.routes]]\nname = \"made\"\nsubjects = [\"o.*.created\"]\nheaders = { Tier = \"gold\" }\npath = \"/created\"\n\
         [[sources.orders.routes]]\nsubjects = [\"o.*.viewed\"]\naction = \"ack\"\n\
         [[sources.orders.routes]]\nwhen = 'body.type == \"ping\"'\naction = \"ack\"\n\
         [sources.pay]\nstream = \"P\"\nkind = \"elastic\"\ngroup = \"g\"\nmember = \"m1\"\n";
    let (code, out, err) = check(&write_config(&dir, two), &[]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.starts_with(
            "config: ok (2 sources)\n\
             source orders: source.kind = durable, stream O\n  \
             route made: o.*.created and Tier: gold -> POST http://***@127.0.0.1:1/created\n  \
             route 1: o.*.viewed -> ack without a request\n  \
             route 2: any subject when body.type == \"ping\" -> ack without a request\n\
             source pay: source.kind = elastic, stream P, group g, member m1\n"
        ),
        "{out}"
    );
    assert!(!out.contains("s3cret"), "{out}");
    // A `when` that does not compile: 64, naming the route (either form).
    let broken = two.replace("when = 'body.type == \"ping\"'", "when = 'body.type =='");
    let (code, out, err) = check(&write_config(&dir, &broken), &[]);
    assert_eq!(code, Some(64), "{out}{err}");
    assert!(
        err.contains("sources.orders.routes[2]: when: does not compile: 1:13: Syntax error"),
        "{err}"
    );
    let single = "[nats]\nservers = [\"nats://127.0.0.1:1\"]\n[http]\nurl = \"http://127.0.0.1:1/x\"\n\
         [source]\nstream = \"O\"\nkind = \"durable\"\ndurable = \"d\"\n\
         [[source.routes]]\nwhen = 'subject.nope('\npath = \"/x\"\n";
    let (code, out, err) = check(&write_config(&dir, single), &[]);
    assert_eq!(code, Some(64), "{out}{err}");
    assert!(
        err.contains("source.routes[0]: when: does not compile"),
        "{err}"
    );
    // A key only the process has, in a source's table (file or environment): 64,
    // naming it and where it belongs, never "ok" for a key nothing reads.
    let grace = two.replace(
        "[sources.pay]",
        "[sources.orders.delivery]\nshutdown_grace_ms = 99999\n[sources.pay]",
    );
    let (code, out, err) = check(&write_config(&dir, &grace), &[]);
    assert_eq!(code, Some(64), "{out}{err}");
    assert!(
        err.contains("sources.orders.delivery.shutdown_grace_ms: is the process's, not a source's: set it once at the top level, as delivery.shutdown_grace_ms"),
        "{err}"
    );
    let (code, out, err) = check(
        &write_config(&dir, two),
        &[("JETRELAY_SOURCES__PAY__PUBLISH__LISTEN", "127.0.0.1:9999")],
    );
    assert_eq!(code, Some(64), "{out}{err}");
    assert!(
        err.contains(
            "JETRELAY_SOURCES__PAY__PUBLISH__LISTEN (sources.pay.publish.listen): is the process's"
        ),
        "{err}"
    );
    // A file the NATS table names and nobody can read: 64, naming the key.
    let path = write_config(&dir, &config(&dir.path().join("missing")));
    let (code, out, err) = check(&path, &[]);
    assert_eq!(code, Some(64), "{out}{err}");
    assert!(err.contains("nats.token_file"), "{err}");
    // The environment counts: a bad value there is 64 as well.
    let path = write_config(&dir, &config(&token));
    let (code, _, err) = check(&path, &[("JETRELAY_DELIVERY__MAX_IN_FLIGHT", "0")]);
    assert_eq!(code, Some(64), "{err}");
    assert!(err.contains("delivery.max_in_flight"), "{err}");
    // A missing app secret file too.
    let (code, _, err) = check(
        &path,
        &[("JETRELAY_HTTP__BEARER_TOKEN_FILE", "/nonexistent/token")],
    );
    assert_eq!(code, Some(64), "{err}");
    assert!(err.contains("http.bearer_token_file"), "{err}");
}

/// The quick start's start-up as a user runs it (config/quickstart.toml, text logs,
/// then JSON ones), with a dead letter, a reload and a stop: every line reads as a
/// sentence with short fields, none is a `Debug` dump of an internal type.
#[tokio::test]
async fn the_quick_starts_log_lines_are_short_and_never_a_debug_dump() {
    let quickstart = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/quickstart.toml"
    ))
    .unwrap();
    for format in ["text", "json"] {
        let nats = NatsServer::start().await;
        let (_, js) = client(&nats).await;
        let app =
            MockApp::start(|r, _| Reply::status(if r.body == "bad" { 400 } else { 200 })).await;
        app.set_healthy(true);
        let app_addr = app.url().trim_end_matches("/messages").to_string();
        let text = format!("[nats]\nservers = [\"{}\"]\n{quickstart}", nats.url())
            .replace("http://127.0.0.1:8080", &app_addr)
            .replace("127.0.0.1:9090", "127.0.0.1:0")
            .replace("127.0.0.1:9091", "127.0.0.1:0")
            .replace("format = \"text\"", &format!("format = \"{format}\""));
        let dir = tempfile::tempdir().unwrap();
        let path = write_config(&dir, &text);
        let child = tokio::process::Command::new(BIN)
            .args(["run", "--config"])
            .arg(&path)
            .env_remove("JETRELAY_CONFIG")
            .stderr(Stdio::piped())
            .kill_on_drop(true) // a failed assertion leaves nothing running
            .spawn()
            .unwrap();
        eventually("the consumer exists", Duration::from_secs(20), || async {
            consumer_info(&js, "ORDERS", "orders-worker")
                .await
                .is_some()
        })
        .await;
        publish(&js, "orders.new", 3).await;
        js.publish("orders.new", "bad".into())
            .await
            .unwrap()
            .await
            .unwrap();
        app.wait_for("4 requests", Duration::from_secs(20), |r| r.len() == 4)
            .await;
        eventually("the dead letter", Duration::from_secs(20), || async {
            js.get_stream("DLQ")
                .await
                .is_ok_and(|s| s.cached_info().state.messages == 1)
        })
        .await;
        let pid = child.id().unwrap().to_string();
        Command::new("kill").args(["-HUP", &pid]).status().unwrap();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        let out = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.lines().count() >= 8, "{stderr}");
        for line in stderr.lines() {
            assert!(
                // 300, and the ~25 characters with which every line of a
                // source names it (`"source":"default"`, `source{source=default}:`).
                line.chars().count() <= 330,
                "{format}: a line of {} characters: {line}",
                line.chars().count()
            );
            assert!(!line.contains("{ "), "{format}: a Debug dump: {line}");
            assert!(!line.contains("Some("), "{format}: a Debug dump: {line}");
        }
    }
}

/// Reads a child's stderr only while told to, keeping what it read.
struct Pipe {
    reading: tokio::sync::watch::Sender<bool>,
    got: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Pipe {
    /// Holds `pipe` unread until [`Pipe::read`].
    fn unread(mut pipe: tokio::process::ChildStderr) -> Pipe {
        use tokio::io::AsyncReadExt;
        let (reading, mut told) = tokio::sync::watch::channel(false);
        let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = got.clone();
        let task = tokio::spawn(async move {
            let mut buf = vec![0; 64 * 1024];
            loop {
                if !*told.borrow_and_update() {
                    if told.changed().await.is_err() {
                        return;
                    }
                    continue;
                }
                tokio::select! {
                    n = pipe.read(&mut buf) => match n {
                        Ok(0) | Err(_) => return,
                        Ok(n) => sink.lock().unwrap().extend_from_slice(&buf[..n]),
                    },
                    _ = told.changed() => {}
                }
            }
        });
        Pipe { reading, got, task }
    }

    fn read(&self, on: bool) {
        self.reading.send_replace(on);
    }

    fn lines(&self) -> Vec<serde_json::Value> {
        String::from_utf8_lossy(&self.got.lock().unwrap())
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

async fn admin_get(admin: &str, path: &str) -> (u16, String) {
    let response = tokio::time::timeout(
        Duration::from_secs(2),
        http().get(format!("http://{admin}{path}")).send(),
    )
    .await
    .unwrap_or_else(|_| panic!("{path} did not answer within 2 s"))
    .unwrap();
    let code = response.status().as_u16();
    (code, response.text().await.unwrap())
}

fn dropped_lines(metrics: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("jetrelay_log_lines_dropped_total "))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

#[tokio::test]
async fn a_stderr_nobody_reads_holds_up_neither_delivery_nor_probes_nor_sigterm() {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    let app = MockApp::ok().await;
    let (stream, durable) = (unique("S"), unique("d"));
    let admin = format!("127.0.0.1:{}", free_port());
    let grace = Duration::from_secs(3);
    let text = config_text(&nats, &app, &stream, &durable).replace("127.0.0.1:0", &admin)
        + &format!(
            "[delivery]\nshutdown_grace_ms = {}\n[log]\nlevel = \"info\"\n",
            grace.as_millis()
        );
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(&dir, &text);
    let mut child = tokio::process::Command::new(BIN)
        .arg("run")
        .arg("--config")
        .arg(&path)
        .env_remove("JETRELAY_CONFIG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pipe = Pipe::unread(child.stderr.take().unwrap());
    eventually("the consumer exists", Duration::from_secs(20), || async {
        consumer_info(&js, &stream, &durable).await.is_some()
    })
    .await;
    // One INFO line (~250 bytes) per message: the pipe (64 KiB) and the buffer
    // (1 MiB) fill after ~4,500 of them; before the fix everything stopped there.
    let n = 6_000;
    publish(&js, "bin.x", n).await;
    eventually(
        "every message delivered",
        Duration::from_secs(120),
        || async { app.arrivals() >= n },
    )
    .await;
    assert_eq!(admin_get(&admin, "/healthz").await.0, 200);
    assert_eq!(admin_get(&admin, "/ready").await.0, 200);
    let dropped = dropped_lines(&admin_get(&admin, "/metrics").await.1);
    assert!(dropped > 0.0, "nothing dropped: the pipe never filled?");
    // Once stderr drains, one line says how many were dropped.
    pipe.read(true);
    eventually(
        "the dropped lines said",
        Duration::from_secs(20),
        || async {
            pipe.lines().iter().any(|l| {
                l["message"]
                    .as_str()
                    .unwrap_or("")
                    .contains("log lines were dropped")
            })
        },
    )
    .await;
    let said: f64 = pipe
        .lines()
        .iter()
        .filter(|l| {
            l["message"]
                .as_str()
                .unwrap_or("")
                .contains("log lines were dropped")
        })
        .map(|l| l["dropped"].as_f64().unwrap())
        .sum();
    assert_eq!(said, dropped, "the line counts what the metric counts");
    // Stuck again (more than the pipe holds), then SIGTERM: the last flush gives up
    // at the end of the grace.
    pipe.read(false);
    publish(&js, "bin.x", 1_000).await;
    eventually("the rest delivered", Duration::from_secs(60), || async {
        app.arrivals() >= n + 1_000
    })
    .await;
    assert_eq!(admin_get(&admin, "/ready").await.0, 200);
    let pid = child.id().unwrap();
    let asked = std::time::Instant::now();
    Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    let status = tokio::time::timeout(grace + Duration::from_secs(10), child.wait())
        .await
        .expect("SIGTERM did not end the process")
        .unwrap();
    let took = asked.elapsed();
    assert_eq!(status.code(), Some(0));
    assert!(took < grace + Duration::from_secs(2), "{took:?}");
    pipe.read(true);
    let Pipe { task, got, .. } = pipe;
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the pipe ends with the process")
        .unwrap();
    let rest = String::from_utf8_lossy(&got.lock().unwrap()).into_owned();
    assert!(
        !rest.contains("jetrelay stopped cleanly"),
        "stderr was not stuck at the end: the exit did not have to give up on it"
    );
}
