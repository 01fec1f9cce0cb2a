//! TLS to NATS: mutual TLS, the handshake-first mode, and TLS files that are config
//! (a missing or broken one is refused at startup, naming its key). The certificates
//! are made for each test with `openssl`.

use std::path::Path;
use std::time::Duration;

use crate::support::certs::certs;
use crate::support::daemon::{BIN, Daemon};
use crate::support::*;

const T: Duration = Duration::from_secs(20);

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A durable config for `servers` with `[nats]` lines added.
fn config(
    nats: &NatsServer,
    app: &MockApp,
    stream: &str,
    durable: &str,
    nats_extra: &str,
) -> String {
    format!(
        "[nats]\nservers = \"{}\"\nreconnect_delay_ms = 50\nreconnect_delay_max_ms = 200\n{nats_extra}\
         [source]\nstream = \"{stream}\"\nkind = \"durable\"\ndurable = \"{durable}\"\n\
         [http]\nurl = \"{}\"\n[admin]\nlisten = \"127.0.0.1:0\"\n",
        nats.url(),
        app.url()
    )
}

#[tokio::test]
async fn mutual_tls_connects_with_the_client_certificate_and_not_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let c = certs(dir.path());
    let nats = NatsServer::start_with(&[
        "--tls",
        "--tlscert",
        path(&c.server_cert),
        "--tlskey",
        path(&c.server_key),
        "--tlsverify",
        "--tlscacert",
        path(&c.ca),
    ])
    .await;
    let app = MockApp::ok().await;
    let tls = format!(
        "tls_ca_file = \"{}\"\ntls_cert_file = \"{}\"\ntls_key_file = \"{}\"\ntls_required = true\n",
        path(&c.ca),
        path(&c.client_cert),
        path(&c.client_key)
    );
    // The stream is made by the daemon (managed), so the test needs no TLS client.
    let managed =
        "[topology]\nstream = \"managed\"\n[topology.managed_stream]\nsubjects = [\"tls.>\"]\n";
    let d = Daemon::start(&format!(
        "{}{managed}",
        config(&nats, &app, "TLS", "d", &tls)
    ))
    .await;
    d.wait_ready_body("ready over mTLS", T, |code, _| code == 200)
        .await;

    let no_cert = format!("tls_ca_file = \"{}\"\ntls_required = true\n", path(&c.ca));
    let refused = Daemon::start(&format!(
        "{}{managed}",
        config(&nats, &app, "TLS", "d2", &no_cert)
    ))
    .await;
    let body = refused
        .wait_ready_body("not ready without a client certificate", T, |code, b| {
            code == 503 && b["reason"].as_str().is_some_and(|r| r.contains("NATS"))
        })
        .await;
    assert_eq!(body["ready"], false, "{body}");
}

#[tokio::test]
async fn handshake_first_servers_need_tls_first() {
    let dir = tempfile::tempdir().unwrap();
    let c = certs(dir.path());
    let conf = dir.path().join("server.conf");
    std::fs::write(
        &conf,
        format!(
            "tls {{\n  cert_file: \"{}\"\n  key_file: \"{}\"\n  handshake_first: true\n}}\n",
            path(&c.server_cert),
            path(&c.server_key)
        ),
    )
    .unwrap();
    let nats = NatsServer::start_with(&["-c", path(&conf)]).await;
    let app = MockApp::ok().await;
    let managed =
        "[topology]\nstream = \"managed\"\n[topology.managed_stream]\nsubjects = [\"hf.>\"]\n";
    let first = format!("tls_ca_file = \"{}\"\ntls_first = true\n", path(&c.ca));
    let d = Daemon::start(&format!(
        "{}{managed}",
        config(&nats, &app, "HF", "d", &first)
    ))
    .await;
    d.wait_ready_body("ready with tls_first", T, |code, _| code == 200)
        .await;

    let late = format!("tls_ca_file = \"{}\"\n", path(&c.ca));
    let refused = Daemon::start(&format!(
        "{}{managed}",
        config(&nats, &app, "HF", "d2", &late)
    ))
    .await;
    refused
        .wait_ready_body("not ready without tls_first", T, |code, b| {
            code == 503 && b["state"] == "not_ready"
        })
        .await;
}

/// Runs `jetrelay <command> --config <file>`; the exit code and stderr.
async fn exit_of(command: &str, config: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("jetrelay.toml");
    std::fs::write(&file, config).unwrap();
    let out = tokio::time::timeout(
        T,
        tokio::process::Command::new(BIN)
            .args([command, "--config"])
            .arg(&file)
            .env_remove("JETRELAY_CONFIG")
            .output(),
    )
    .await
    .expect("it ends instead of retrying forever")
    .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn a_missing_or_broken_tls_file_is_a_config_error_naming_its_key() {
    let nats = NatsServer::start().await;
    let app = MockApp::ok().await;
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.pem");
    std::fs::write(
        &junk,
        "-----BEGIN CERTIFICATE-----\nAAECAwQF\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let cases = [
        (
            "tls_ca_file = \"/nonexistent/ca.pem\"\n".to_string(),
            "nats.tls_ca_file",
        ),
        (
            format!("tls_ca_file = \"{}\"\n", path(&junk)),
            "nats.tls_ca_file",
        ),
        (
            format!(
                "tls_cert_file = \"{}\"\ntls_key_file = \"{}\"\n",
                path(&junk),
                path(&junk)
            ),
            "nats.tls_cert_file",
        ),
    ];
    let mut texts: Vec<(String, &str)> = cases
        .into_iter()
        .map(|(tls, key)| (config(&nats, &app, "S", "d", &tls), key))
        .collect();
    // The app's CA, too: check builds the app's side as run does.
    texts.push((
        config(&nats, &app, "S", "d", "").replace(
            "[http]\n",
            "[http]\ntls_ca_file = \"/nonexistent/app-ca.pem\"\n",
        ),
        "http.tls_ca_file",
    ));
    // The app's client certificate, the signing secret and the OAuth2 client secret.
    let c = crate::support::certs::certs(dir.path());
    let short = dir.path().join("whsec");
    std::fs::write(&short, "whsec_c2hvcnQ=\n").unwrap();
    let https = |http: &str| {
        config(&nats, &app, "S", "d", "")
            .replace(&app.url(), &app.url().replace("http://", "https://"))
            .replace("[http]\n", &format!("[http]\n{http}"))
    };
    for (http, key) in [
        (
            format!("tls_cert_file = \"{}\"\ntls_key_file = \"{}\"\n", path(&junk), path(&c.client_key)),
            "http.tls_cert_file",
        ),
        (
            format!(
                "tls_cert_file = \"{}\"\ntls_key_file = \"{}\"\n",
                path(&c.client_cert),
                path(&c.server_key)
            ),
            "http.tls_key_file",
        ),
        (
            format!("signing = {{ secret_file = \"{}\" }}\n", path(&short)),
            "http.signing.secret_file",
        ),
        (
            "oauth2 = { token_url = \"https://idp/token\", client_id = \"r\", client_secret_file = \"/nonexistent/s\" }\n"
                .to_string(),
            "http.oauth2.client_secret_file",
        ),
    ] {
        texts.push((https(&http), key));
    }
    for (text, key) in texts {
        let tls = &text;
        for command in ["run", "check"] {
            let (code, err) = exit_of(command, &text).await;
            assert_eq!(code, Some(64), "{command} with {tls}: {err}");
            assert!(err.contains(key), "{command}: {err}");
            assert!(!err.contains("c2hvcnQ"), "never the secret: {err}");
        }
    }
}

#[tokio::test]
async fn credentials_in_a_server_url_are_refused_and_never_shown() {
    let app = MockApp::ok().await;
    let config = format!(
        "[nats]\nservers = \"nats://alice:hunter2@127.0.0.1:4222\"\n[source]\nstream = \"S\"\nkind = \"durable\"\n\
         durable = \"d\"\n[http]\nurl = \"{}\"\n",
        app.url()
    );
    for command in ["run", "check"] {
        let (code, err) = exit_of(command, &config).await;
        assert_eq!(code, Some(64), "{err}");
        assert!(err.contains("nats.user"), "{err}");
        assert!(!err.contains("hunter2"), "the password was shown: {err}");
    }
    let out = tokio::process::Command::new(BIN)
        .args([
            "dlq",
            "ls",
            "DLQ",
            "--server",
            "nats://alice:hunter2@127.0.0.1:1",
        ])
        .env_remove("JETRELAY_CONFIG")
        .output()
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
}
