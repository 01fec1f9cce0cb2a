//! The drain before the app stops (`/drain`, `jetrelay drain`): in-flight requests
//! settle, held messages are released for another instance, nothing is lost, the
//! probes, metrics and the publish endpoint go on, a second drain waits on the first,
//! a reload starts nothing again, and a stop afterwards takes no grace; only the
//! bearer of `admin.token_file` (or loopback without one) may ask.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use crate::support::groups::*;
use crate::support::*;

const T: Duration = Duration::from_secs(30);

/// Asks `relay`'s admin port to drain (`POST`, or `GET` as a kubelet's hook does).
async fn drain(admin: &str, query: &str, post: bool, token: Option<&str>) -> (u16, Value) {
    let url = format!("http://{admin}/drain{query}");
    let mut req = if post {
        http().post(url)
    } else {
        http().get(url)
    };
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.unwrap();
    let code = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (
        code,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[tokio::test]
async fn a_drain_under_load_settles_what_is_in_flight_releases_the_rest_and_loses_nothing() {
    let slow = MockApp::start(|_, _| Reply::status(200).after(Duration::from_millis(1500))).await;
    let env = Env::start(&["s.>"]).await;
    let out = unique("OUT");
    create_stream(&env.js, &out, &["out.>"]).await;
    // ack_wait (60 s) outlasts the test: a message the drain did not release would
    // only come back after it, and the second instance below would time out.
    let extra = "[delivery]\nmax_in_flight = 4\nmax_buffered = 16\nshutdown_grace_ms = 30000\n\
                 [consumer]\nack_wait_ms = 60000\n\
                 [publish]\nlisten = \"127.0.0.1:0\"\nallowed_subjects = [\"out.>\"]\n";
    let relay = env.relay(&slow, extra).await;
    let admin = relay.admin.to_string();
    publish(&env.js, "s.x", 40).await;
    eventually("4 requests in flight, 16 held", T, || async {
        slow.arrivals() == 4 && relay.metric("jetrelay_messages_received_total").await >= 16.0
    })
    .await;

    // Two at once (a kubelet's GET and an operator's POST): one drain, one answer.
    let (a, b) = (admin.clone(), admin.clone());
    let first = tokio::spawn(async move { drain(&a, "?wait=10s", true, None).await });
    let second = tokio::spawn(async move { drain(&b, "?wait=1m", false, None).await });
    let (first, second) = (first.await.unwrap(), second.await.unwrap());
    let answered = Instant::now();
    let received = relay.metric("jetrelay_messages_received_total").await as u64;
    assert_eq!(first.0, 200, "{first:?}");
    assert_eq!(
        first.1,
        json!({"drained": true, "settled": 4, "released": received - 4})
    );
    assert_eq!(second, first, "the second drain waited on the first");
    assert_eq!(
        drain(&admin, "", true, None).await,
        first,
        "and a later one"
    );
    assert_eq!(
        slow.acked_seqs().len(),
        4,
        "the four in flight were answered"
    );

    // Drained: not ready, and says so per source; probes, metrics, publishing go on.
    let (code, ready) = relay.get("/ready").await;
    let ready: Value = serde_json::from_str(&ready).unwrap();
    assert_eq!((code, &ready["state"]), (503, &json!("drained")), "{ready}");
    assert_eq!(ready["sources"]["default"]["state"], "drained", "{ready}");
    assert_eq!(
        relay.get("/readyz").await,
        relay.get("/ready").await,
        "/readyz answers as /ready"
    );
    assert_eq!(relay.get("/healthz").await.0, 200);
    assert_eq!(relay.get("/livez").await, relay.get("/healthz").await);
    assert_eq!(relay.metric("jetrelay_ready").await, 0.0);
    let publish_url = format!("http://{}/v1/publish/out.a", relay.publish.unwrap());
    let resp = http()
        .post(publish_url)
        .header("Content-Type", "application/octet-stream")
        .body("after")
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.status().as_u16(),
        200,
        "the publish endpoint still publishes"
    );

    // Nothing is held or pulled any more: what comes now waits for another instance.
    publish(&env.js, "s.x", 5).await;
    eventually("no pull waiting, the new ones pending", T, || async {
        let i = consumer_info(&env.js, &env.stream, &env.durable).await;
        i.is_some_and(|i| i.num_pending == 29 && i.num_waiting == 0)
    })
    .await;
    assert_eq!(
        slow.arrivals(),
        4,
        "no request reached the app after the drain"
    );

    // Another instance takes everything else at once: nothing lost.
    let fast = MockApp::ok().await;
    let next = env.relay(&fast, extra).await;
    eventually("all 45 acked by one or the other", T, || async {
        let mut all = slow.acked_seqs();
        all.extend(fast.acked_seqs());
        all == (1..=45).collect()
    })
    .await;
    assert!(
        answered.elapsed() < Duration::from_secs(20),
        "released, not left to ack_wait"
    );

    // The stop after a drain takes no grace (30 s here).
    let stopping = Instant::now();
    relay.stop().await.unwrap();
    let took = stopping.elapsed();
    assert!(took < Duration::from_secs(3), "the stop took {took:?}");
    next.stop().await.unwrap();
}

#[tokio::test]
async fn a_rolling_restart_drains_the_pinned_instance_and_its_standby_serves_at_once() {
    let (nats, js, stream, _) = static_group(1, &["m1"]).await;
    let (app1, app2) = (
        MockApp::start(|_, _| Reply::status(200).after(Duration::from_millis(20))).await,
        MockApp::start(|_, _| Reply::status(200).after(Duration::from_millis(20))).await,
    );
    // The pin's priority timeout is ack_wait: 30 s, far longer than any wait below.
    let extra = "[consumer]\nack_wait_ms = 30000\n";
    let i1 = Relay::ready(member_config(
        &nats, &app1, "static", &stream, "cg", "m1", extra,
    ))
    .await;
    publish_keys(&js, "o", 1, 1).await;
    eventually("i1 pinned", T, || async { i1.health.status().pinned }).await;
    let i2 = Relay::ready(member_config(
        &nats, &app2, "static", &stream, "cg", "m1", extra,
    ))
    .await;

    // A publisher runs through the rollout: 4 keys, 60 messages each.
    let publisher = {
        let js = js.clone();
        tokio::spawn(async move {
            for _ in 0..60 {
                publish_keys(&js, "o", 4, 1).await;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    app1.wait_for("i1 serves", T, |r| r.len() >= 40).await;
    let (code, answer) = drain(&i1.admin.to_string(), "?wait=20s", false, None).await;
    let answered = Instant::now();
    assert_eq!(code, 200, "{answer}");
    assert!(!i1.health.status().pinned, "unpinned by the drain");
    app2.wait_for("the standby serves", T, |r| !r.is_empty())
        .await;
    let first = app2.requests().iter().map(|r| r.at).min().unwrap();
    let handover = first.saturating_duration_since(answered);
    assert!(
        handover < Duration::from_secs(1),
        "the standby served {handover:?} after the drain's answer"
    );
    let late = app1.requests().iter().filter(|r| r.at > answered).count();
    assert_eq!(
        late, 0,
        "no request reached the drained instance's app after"
    );
    i1.stop().await.unwrap();

    publisher.await.unwrap();
    eventually("all 241 delivered", T, || async {
        bodies(&[&app1, &app2]).len() == 241
    })
    .await;
    let refused: usize = [&app1, &app2]
        .iter()
        .map(|a| a.requests().iter().filter(|r| r.status != 200).count())
        .sum();
    assert_eq!(refused, 0, "no request refused or cut");
    // Each key's order holds across the handover: what the drained instance held
    // reaches the standby before what came after it.
    assert_key_order_across(&[&app1, &app2]);
    i2.stop().await.unwrap();
}

#[tokio::test]
async fn drain_is_refused_without_the_token_and_the_token_is_never_shown() {
    let app = MockApp::ok().await;
    let env = Env::start(&["s.>"]).await;
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("admin-token");
    let secret = "S3CR3T-DRAIN-TOKEN";
    std::fs::write(&token_file, format!("{secret}\n")).unwrap();
    let extra = format!(
        "[admin]\ntoken_file = {:?}\n",
        token_file.display().to_string()
    );
    let relay = env.relay(&app, &extra).await;
    let admin = relay.admin.to_string();

    // From loopback, but without (or with a wrong) token: refused, nothing changed.
    for token in [None, Some("wrong"), Some("S3CR3T-DRAIN-TOKE")] {
        let (code, why) = drain(&admin, "", true, token).await;
        assert_eq!(code, 403, "{token:?}: {why}");
        assert!(why.as_str().unwrap().contains("admin.token_file"), "{why}");
    }
    let (code, why) = drain(&admin, "?wait=soon", true, Some(secret)).await;
    assert_eq!(code, 400, "{why}");
    assert!(why.as_str().unwrap().contains("wait=\"soon\""), "{why}");
    assert_eq!(relay.get("/ready").await.0, 200, "not drained by a refusal");
    publish(&env.js, "s.x", 3).await;
    app.wait_for("3 delivered", T, |r| r.len() == 3).await;

    let (code, answer) = drain(&admin, "?wait=5s", false, Some(secret)).await;
    assert_eq!(code, 200, "{answer}");
    assert_eq!(answer["drained"], true);
    let (_, shown) = relay.get("/config").await;
    assert!(!shown.contains(secret), "{shown}");
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn a_reload_after_a_drain_starts_nothing_again() {
    let nats = NatsServer::start().await;
    let (_, js) = client(&nats).await;
    let (a, b) = (unique("A"), unique("B"));
    create_stream(&js, &a, &["a.>"]).await;
    create_stream(&js, &b, &["b.>"]).await;
    let app = MockApp::ok().await;
    let table = |name: &str, stream: &str| {
        format!(
            "[sources.{name}]\nstream = \"{stream}\"\nkind = \"durable\"\ndurable = \"{name}\"\n"
        )
    };
    let config = |tables: &str| {
        let base = format!(
            "[nats]\nservers = \"{}\"\n[http]\nurl = \"{}\"\n[admin]\nlisten = \"127.0.0.1:0\"\n[log]\nlevel = \"warn\"\n{tables}",
            nats.url(),
            app.url()
        );
        jetrelay::config::Config::from_figment(figment::Figment::from(
            <figment::providers::Toml as figment::providers::Format>::string(&base),
        ))
        .unwrap()
    };
    let relay = Relay::ready(config(&table("a", &a))).await;
    publish(&js, "a.x", 2).await;
    app.wait_for("2 delivered", T, |r| r.len() == 2).await;
    // Without a token file, from loopback, but as a web page would ask: refused.
    let url = format!("http://{}/drain", relay.admin);
    for (name, value) in [
        ("Origin", "http://evil.example"),
        ("Sec-Fetch-Site", "cross-site"),
        ("Host", "rebound.example:9090"),
    ] {
        let resp = http().get(&url).header(name, value).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 403, "{name}: {value}");
    }
    assert_eq!(
        relay.get("/ready").await.0,
        200,
        "not drained by a web page"
    );
    let (code, answer) = drain(&relay.admin.to_string(), "", true, None).await;
    assert_eq!(code, 200, "{answer}");

    // SIGHUP with a config that adds source b and changes a live key of a: refused.
    let more = format!(
        "{}[sources.a.delivery]\nmax_in_flight = 7\n{}",
        table("a", &a),
        table("b", &b)
    );
    relay.reloader.request(Ok(config(&more)));
    eventually("the reload refused", T, || async {
        relay
            .metric("jetrelay_config_reloads_total{result=\"refused\"}")
            .await
            == 1.0
    })
    .await;
    publish(&js, "a.x", 2).await;
    publish(&js, "b.x", 2).await;
    eventually("a pulls nothing", T, || async {
        consumer_info(&js, &a, "a")
            .await
            .is_some_and(|i| i.num_pending == 2 && i.num_waiting == 0)
    })
    .await;
    assert!(
        consumer_info(&js, &b, "b").await.is_none(),
        "b never started"
    );
    let status = relay.health.status();
    assert_eq!(status.sources.len(), 1, "{status:?}");
    assert_eq!(status.state.name(), "drained", "{status:?}");
    assert_eq!(app.requests().len(), 2, "nothing delivered after the drain");
    relay.stop().await.unwrap();
}

/// `jetrelay drain` with the config at `path` (and `env` over it).
async fn drain_command(
    path: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> std::process::Output {
    tokio::process::Command::new(crate::support::daemon::BIN)
        .arg("drain")
        .arg("--config")
        .arg(path)
        .args(args)
        .env_remove("JETRELAY_CONFIG")
        .envs(env.iter().copied())
        .output()
        .await
        .unwrap()
}

#[tokio::test]
async fn the_drain_command_drains_the_running_jetrelay_then_a_sigterm_exits_at_once() {
    let app = MockApp::ok().await;
    let env = Env::start(&["s.>"]).await;
    let dir = tempfile::tempdir().unwrap();
    let (token_file, wrong_file) = (dir.path().join("token"), dir.path().join("wrong"));
    let secret = "S3CR3T-CLI-TOKEN";
    std::fs::write(&token_file, secret).unwrap();
    std::fs::write(&wrong_file, "not-it").unwrap();
    let port = crate::support::app::free_port();
    let config = format!(
        "[nats]\nservers = \"{}\"\n[source]\nstream = \"{}\"\nkind = \"durable\"\ndurable = \"{}\"\n\
         [http]\nurl = \"{}\"\n[delivery]\nshutdown_grace_ms = 30000\n\
         [admin]\nlisten = \"127.0.0.1:{port}\"\ntoken_file = {:?}\n",
        env.nats.url(),
        env.stream,
        env.durable,
        app.url(),
        token_file.display().to_string(),
    );
    let mut daemon = crate::support::daemon::Daemon::start(&config).await;
    daemon
        .wait_ready_body("ready", T, |code, _| code == 200)
        .await;
    publish(&env.js, "s.x", 3).await;
    app.wait_for("3 delivered", T, |r| r.len() == 3).await;
    let path = daemon.config_path();

    // A wrong token (the environment over the file, as for every key): refused, 64.
    let wrong = wrong_file.display().to_string();
    let out = drain_command(&path, &[], &[("JETRELAY_ADMIN__TOKEN_FILE", &wrong)]).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(err.contains("403"), "{err}");
    let out = drain_command(&path, &["--wait", "soon"], &[]).await;
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--wait"));
    assert_eq!(daemon.ready().await.0, 200, "not drained by a refusal");

    let out = drain_command(&path, &["--wait", "5s"], &[]).await;
    let said: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert_eq!(said, json!({"drained": true, "settled": 0, "released": 0}));
    let (code, ready) = daemon.ready().await;
    assert_eq!((code, &ready["state"]), (503, &json!("drained")));

    // The token is in no log line, nor in what the command printed.
    let lines = serde_json::to_string(&daemon.lines()).unwrap();
    assert!(!lines.contains(secret));
    assert!(!String::from_utf8_lossy(&out.stderr).contains(secret));

    // SIGTERM after the drain: 0, without the 30 s grace.
    daemon.signal("TERM");
    let (code, took) = daemon.wait_exit(T).await;
    assert_eq!(code, Some(0), "{:#?}", daemon.lines());
    assert!(took < Duration::from_secs(3), "exit took {took:?}");

    // Nobody listens now: 69.
    let out = drain_command(&path, &[], &[]).await;
    assert_eq!(
        out.status.code(),
        Some(69),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The app container's preStop hook in a shipped manifest: its shell command (the
/// folded lines after `- >-`), and the pod's grace in seconds.
fn shipped_hook(path: &str) -> (String, u64) {
    let text = std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains("preStop:"))
        .unwrap_or_else(|| panic!("{path} has no preStop hook"));
    let start = at + lines[at..].iter().position(|l| l.trim() == "- >-").unwrap() + 1;
    let mut command = Vec::new();
    for line in &lines[start..] {
        command.push(line.trim());
        if line.trim().ends_with("fi") {
            break;
        }
    }
    let grace = lines
        .iter()
        .find_map(|l| l.trim().strip_prefix("terminationGracePeriodSeconds:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    (command.join(" "), grace)
}

#[tokio::test]
async fn the_shipped_prestop_hook_drains_a_running_jetrelay_within_the_pods_grace() {
    let (hook, grace) = shipped_hook("deploy/kubernetes/deployment.yaml");
    assert_eq!(
        shipped_hook("deploy/keda/elastic.yaml").0,
        hook,
        "the two manifests' hooks differ"
    );
    assert!(hook.contains("127.0.0.1:9090/drain?wait=20s"), "{hook}");
    // The drain's wait, the app's own stop after it and a margin fit in the grace.
    assert!(grace >= 20 + 15, "terminationGracePeriodSeconds {grace}");

    let app = MockApp::ok().await;
    let env = Env::start(&["s.>"]).await;
    let relay = env.relay(&app, "").await;
    publish(&env.js, "s.x", 2).await;
    app.wait_for("2 delivered", T, |r| r.len() == 2).await;
    // As the kubelet runs it inside the pod: on loopback, no token.
    let hook = hook.replace("127.0.0.1:9090", &relay.admin.to_string());
    let out = tokio::process::Command::new("/bin/sh")
        .args(["-c", &hook])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(said["drained"], true, "{said}");
    assert_eq!(relay.get("/ready").await.0, 503);
    // An image with wget and no curl (busybox): the same answer (a second drain).
    let bin = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink("/usr/bin/wget", bin.path().join("wget")).unwrap();
    let out = tokio::process::Command::new("/bin/sh")
        .args(["-c", &hook])
        .env("PATH", bin.path())
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(serde_json::from_slice::<Value>(&out.stdout).unwrap(), said);
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn a_drain_whose_wait_runs_out_answers_503_and_leaves_the_rest_to_redelivery() {
    let stuck = MockApp::start(|_, _| Reply::status(200).after(Duration::from_secs(20))).await;
    let env = Env::start(&["s.>"]).await;
    let extra = "[delivery]\nmax_in_flight = 2\nmax_buffered = 6\n";
    let relay = env.relay(&stuck, extra).await;
    publish(&env.js, "s.x", 10).await;
    eventually("2 in flight, 6 held", T, || async {
        stuck.arrivals() == 2 && relay.metric("jetrelay_messages_received_total").await >= 6.0
    })
    .await;
    let (code, answer) = drain(&relay.admin.to_string(), "?wait=500ms", true, None).await;
    assert_eq!(code, 503, "{answer}");
    let received = relay.metric("jetrelay_messages_received_total").await as u64;
    assert_eq!(
        answer,
        json!({"drained": false, "settled": 0, "released": received - 2})
    );
    let (code, ready) = relay.get("/ready").await;
    assert_eq!(code, 503);
    assert!(ready.contains("left for redelivery"), "{ready}");
    relay.stop().await.unwrap();
}

#[test]
fn a_missing_admin_token_file_is_a_config_error_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jetrelay.toml");
    std::fs::write(
        &path,
        "[source]\nstream = \"S\"\nkind = \"durable\"\ndurable = \"d\"\n[http]\nurl = \"http://127.0.0.1:1/x\"\n\
         [admin]\nlisten = \"127.0.0.1:0\"\ntoken_file = \"/nonexistent/admin-token\"\n",
    )
    .unwrap();
    for args in [&["run"][..], &["check", "--offline"][..]] {
        let out = std::process::Command::new(crate::support::daemon::BIN)
            .args(args)
            .arg("--config")
            .arg(&path)
            .env_remove("JETRELAY_CONFIG")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {err}");
        assert!(err.contains("admin.token_file"), "{args:?}: {err}");
        assert!(err.contains("/nonexistent/admin-token"), "{args:?}: {err}");
    }
    // The key itself is known: with a readable file the config is fine.
    let token = dir.path().join("admin-token");
    std::fs::write(&token, "t0k3n").unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replace("/nonexistent/admin-token", &token.display().to_string()),
    )
    .unwrap();
    let out = std::process::Command::new(crate::support::daemon::BIN)
        .args(["check", "--offline", "--config"])
        .arg(&path)
        .env_remove("JETRELAY_CONFIG")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!said.contains("t0k3n"), "{said}");
}
