//! Outbound identity: how jetrelay proves itself to the app. Standard Webhooks
//! signatures (`[http.signing]`), verified by the specification's own Python library;
//! a projected ServiceAccount token swapped as the kubelet swaps it; the app's client
//! certificate (mTLS).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use crate::support::app::{Recorded, free_port};
use crate::support::*;

const T: Duration = Duration::from_secs(20);

/// A `whsec_` secret of 32 bytes of `byte`.
fn whsec(byte: u8) -> String {
    format!("whsec_{}\n", STANDARD.encode([byte; 32]))
}

/// Whether one of `signatures` (`v1,<base64>` space-separated) is the HMAC-SHA256 of
/// `<id>.<timestamp>.<body>` under `secret`: the specification's algorithm, written
/// here apart from jetrelay's.
fn signed_by(secret: &str, r: &Recorded) -> bool {
    let key = STANDARD
        .decode(secret.trim().trim_start_matches("whsec_"))
        .unwrap();
    let (Some(id), Some(ts), Some(sigs)) = (
        r.header("webhook-id"),
        r.header("webhook-timestamp"),
        r.header("webhook-signature"),
    ) else {
        return false;
    };
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &key);
    let mut content = format!("{id}.{ts}.").into_bytes();
    content.extend_from_slice(&r.body);
    let want = format!("v1,{}", STANDARD.encode(ring::hmac::sign(&key, &content)));
    sigs.split(' ').any(|s| s == want)
}

/// The requests verified by the Standard Webhooks Python library
/// (`standardwebhooks.Webhook(secret).verify`), for each secret: how many verify.
fn verified_by_the_library(secrets: &[&str], requests: &[Recorded]) -> Vec<usize> {
    let script = r#"
import base64, json, sys
from standardwebhooks import Webhook
data = json.load(sys.stdin)
out = []
for secret in data["secrets"]:
    ok = 0
    for r in data["requests"]:
        try:
            Webhook(secret).verify(base64.b64decode(r["body"]), r["headers"], json_parse=False)
            ok += 1
        except Exception:
            pass
    out.append(ok)
print(json.dumps(out))
"#;
    let requests: Vec<serde_json::Value> = requests
        .iter()
        .map(|r| {
            let headers: serde_json::Map<String, serde_json::Value> =
                ["id", "timestamp", "signature"]
                    .iter()
                    .filter_map(|n| {
                        let name = format!("webhook-{n}");
                        Some((name.clone(), r.header(&name)?.into()))
                    })
                    .collect();
            serde_json::json!({"body": STANDARD.encode(&r.body), "headers": headers})
        })
        .collect();
    let input = serde_json::json!({"secrets": secrets, "requests": requests}).to_string();
    let mut child = std::process::Command::new(crate::support::peer::python())
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python from the tools venv (scripts/setup)");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "standardwebhooks (scripts/setup installs it): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test]
async fn every_request_single_and_batch_is_signed_as_the_standard_webhooks_library_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let current = write(dir.path(), "current", &whsec(1));
    let previous = write(dir.path(), "previous", &whsec(2));
    let signing = format!(
        "[http.signing]\nsecret_file = \"{}\"\nprevious_secret_file = \"{}\"\n",
        current.display(),
        previous.display()
    );
    // One message a request: one with a Nats-Msg-Id, one without.
    let app = MockApp::ok().await;
    let env = Env::start(&["sig.>"]).await;
    let relay = env.relay(&app, &signing).await;
    publish_with(&env.js, "sig.a", "{\"n\":1}", &[("Nats-Msg-Id", "order-1")]).await;
    // A publisher's own signature never reaches the app.
    publish_with(
        &env.js,
        "sig.b",
        "{\"n\":2}",
        &[("Webhook-Signature", "v1,forged")],
    )
    .await;
    app.wait_for("two", T, |r| r.len() >= 2).await;
    relay.stop().await.unwrap();
    let single = app.requests();
    assert_eq!(single[0].header("webhook-id"), Some("order-1"));
    let by_seq = format!("{}:2", env.stream);
    assert_eq!(single[1].header("webhook-id"), Some(by_seq.as_str()));
    for r in &single {
        assert_eq!(r.header("webhook-signature").unwrap().split(' ').count(), 2);
        assert!(!r.header("webhook-signature").unwrap().contains("forged"));
    }

    // A batch: one request, one id for its messages.
    let batch_app = MockApp::ok().await;
    let batch_env = Env::start(&["sigb.>"]).await;
    publish(&batch_env.js, "sigb.x", 3).await;
    let extra = format!("{signing}[delivery]\nbatch_size = 10\nbatch_wait_ms = 300\n");
    let relay = batch_env.relay(&batch_app, &extra).await;
    eventually("the batch acked", T, || {
        consumer_drained(&batch_env.js, &batch_env.stream, &batch_env.durable)
    })
    .await;
    relay.stop().await.unwrap();
    let batches = batch_app.requests();
    assert!(
        batches
            .iter()
            .all(|r| r.header("webhook-id").unwrap().starts_with("batch_")),
        "{:?}",
        batches
            .iter()
            .map(|r| r.header("webhook-id"))
            .collect::<Vec<_>>()
    );

    let all: Vec<Recorded> = single.into_iter().chain(batches).collect();
    let n = all.len();
    for r in &all {
        assert!(signed_by(&whsec(1), r) && signed_by(&whsec(2), r));
        let ts: u64 = r.header("webhook-timestamp").unwrap().parse().unwrap();
        let now = time::OffsetDateTime::now_utc().unix_timestamp() as u64;
        assert!(now.abs_diff(ts) < 60, "{ts} is now, in seconds");
    }
    assert_eq!(
        verified_by_the_library(&[&whsec(1), &whsec(2), &whsec(3)], &all),
        [n, n, 0],
        "each key verifies every request; another key none"
    );
}

#[tokio::test]
async fn a_rotated_signing_secret_is_used_without_a_restart_and_nothing_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let current = write(dir.path(), "current", &whsec(1));
    // The app takes only what the current secret signed; anything else is retried.
    let accepted = Arc::new(Mutex::new(whsec(1)));
    let key = accepted.clone();
    let app = MockApp::start(move |r, _| {
        let ok = signed_by(&key.lock().unwrap(), r);
        Reply::status(if ok { 200 } else { 503 })
    })
    .await;
    let env = Env::start(&["rot.>"]).await;
    let extra = format!(
        "[http.signing]\nsecret_file = \"{}\"\n[delivery]\nretry_initial_ms = 100\nretry_max_ms = 200\n",
        current.display()
    );
    let relay = env.relay(&app, &extra).await;
    publish(&env.js, "rot.a", 20).await;
    // The rotation, while messages flow.
    std::fs::write(&current, whsec(9)).unwrap();
    *accepted.lock().unwrap() = whsec(9);
    publish(&env.js, "rot.b", 20).await;
    eventually("all acked with the new secret", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    assert_eq!(
        relay.settled("ack").await,
        40.0,
        "nothing was terminated for a stale signature"
    );
    assert!(signed_by(
        &whsec(9),
        &app.requests().into_iter().last().unwrap()
    ));
    relay.stop().await.unwrap();
}

/// A projected volume as the kubelet writes it: each version of its files in a
/// directory of its own, `..data` a symlink to the current one, swapped by renaming
/// a new link over it; the files themselves are links through `..data`.
struct ProjectedVolume {
    root: PathBuf,
    version: u32,
}

impl ProjectedVolume {
    fn new(root: &Path, token: &str) -> ProjectedVolume {
        let mut v = ProjectedVolume {
            root: root.to_path_buf(),
            version: 0,
        };
        v.swap(token);
        std::os::unix::fs::symlink("..data/token", root.join("token")).unwrap();
        v
    }

    /// Writes `token` into a new version and points `..data` at it at once.
    fn swap(&mut self, token: &str) {
        use std::os::unix::fs::symlink;
        self.version += 1;
        let version = format!("..2026_12_06_{}", self.version);
        std::fs::create_dir(self.root.join(&version)).unwrap();
        std::fs::write(self.root.join(&version).join("token"), token).unwrap();
        symlink(&version, self.root.join("..data_tmp")).unwrap();
        std::fs::rename(self.root.join("..data_tmp"), self.root.join("..data")).unwrap();
        if self.version > 1 {
            // The kubelet removes the old version after the swap.
            let old = format!("..2026_12_06_{}", self.version - 1);
            std::fs::remove_dir_all(self.root.join(old)).unwrap();
        }
    }

    fn token(&self) -> PathBuf {
        self.root.join("token")
    }
}

#[tokio::test]
async fn a_projected_service_account_token_swapped_as_the_kubelet_does_is_sent_from_then_on() {
    let dir = tempfile::tempdir().unwrap();
    // Tokens of one length (as a ServiceAccount token's JWT nearly always is).
    let mut volume = ProjectedVolume::new(dir.path(), "eyJ.token-one.sig");
    let accepted = Arc::new(Mutex::new("Bearer eyJ.token-one.sig".to_string()));
    let current = accepted.clone();
    let app = MockApp::start(move |r, _| {
        let ok = r.header("authorization") == Some(current.lock().unwrap().as_str());
        Reply::status(if ok { 200 } else { 401 })
    })
    .await;
    let env = Env::start(&["sa.>"]).await;
    // A 401 is retried here, as an app that checks tokens would have it while a
    // rotation settles (by default a 4xx ends the message).
    let extra = format!(
        "[http]\nbearer_token_file = \"{}\"\nretry_statuses = [\"401\", \"5xx\"]\n\
         [delivery]\nretry_initial_ms = 100\nretry_max_ms = 200\n",
        volume.token().display()
    );
    let relay = env.relay(&app, &extra).await;
    publish(&env.js, "sa.a", 10).await;
    app.wait_for("token one accepted", T, |r| {
        r.iter().any(|r| r.status == 200)
    })
    .await;
    for n in ["two", "six"] {
        let token = format!("eyJ.token-{n}.sig");
        volume.swap(&token);
        *accepted.lock().unwrap() = format!("Bearer {token}");
        publish(&env.js, "sa.b", 10).await;
        eventually("all acked with the swapped token", T, || {
            consumer_drained(&env.js, &env.stream, &env.durable)
        })
        .await;
        let last = app.requests().into_iter().last().unwrap();
        assert_eq!(
            last.header("authorization"),
            Some(format!("Bearer {token}").as_str())
        );
    }
    assert_eq!(
        relay.settled("ack").await,
        30.0,
        "nothing was lost or ended over a rotation"
    );
    relay.stop().await.unwrap();
}

/// An app that requires a client certificate its CA signed (mTLS), over TCP or a Unix
/// socket: it records the certificate each request came with, and answers 200 with
/// `Connection: close`, so that every request is a new handshake.
struct MtlsApp {
    url: String,
    /// Each request's client certificate (its DER), in order.
    seen: Arc<Mutex<Vec<Vec<u8>>>>,
    /// Handshakes refused (no certificate, or one the CA did not sign).
    refused: Arc<std::sync::atomic::AtomicUsize>,
}

impl MtlsApp {
    fn acceptor(c: &crate::support::certs::Certs) -> tokio_rustls::TlsAcceptor {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for ca in CertificateDer::pem_file_iter(&c.ca).unwrap() {
            roots.add(ca.unwrap()).unwrap();
        }
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .build()
        .unwrap();
        let chain = CertificateDer::pem_file_iter(&c.server_cert)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let key = PrivateKeyDer::from_pem_file(&c.server_key).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)
            .unwrap();
        tokio_rustls::TlsAcceptor::from(Arc::new(config))
    }

    /// On a loopback port (`socket`: `None`), or on the Unix socket `socket`.
    async fn start(c: &crate::support::certs::Certs, socket: Option<&Path>) -> MtlsApp {
        let acceptor = Self::acceptor(c);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let refused = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (s, r) = (seen.clone(), refused.clone());
        let url = match socket {
            Some(path) => {
                let listener = tokio::net::UnixListener::bind(path).unwrap();
                tokio::spawn(async move {
                    while let Ok((io, _)) = listener.accept().await {
                        tokio::spawn(Self::serve(acceptor.clone(), io, s.clone(), r.clone()));
                    }
                });
                "https://localhost/messages".to_string()
            }
            None => {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                let addr = listener.local_addr().unwrap();
                tokio::spawn(async move {
                    while let Ok((io, _)) = listener.accept().await {
                        tokio::spawn(Self::serve(acceptor.clone(), io, s.clone(), r.clone()));
                    }
                });
                format!("https://127.0.0.1:{}/messages", addr.port())
            }
        };
        MtlsApp { url, seen, refused }
    }

    async fn serve<I>(
        acceptor: tokio_rustls::TlsAcceptor,
        io: I,
        seen: Arc<Mutex<Vec<Vec<u8>>>>,
        refused: Arc<std::sync::atomic::AtomicUsize>,
    ) where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let Ok(tls) = acceptor.accept(io).await else {
            refused.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            return;
        };
        let cert = tls.get_ref().1.peer_certificates().unwrap()[0].to_vec();
        let service =
            hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let (seen, cert) = (seen.clone(), cert.clone());
                async move {
                    use http_body_util::BodyExt;
                    req.into_body().collect().await?;
                    seen.lock().unwrap().push(cert);
                    let resp = hyper::Response::builder()
                        .header("connection", "close")
                        .body(http_body_util::Full::new(bytes::Bytes::new()))
                        .unwrap();
                    Ok::<_, hyper::Error>(resp)
                }
            });
        let io = hyper_util::rt::TokioIo::new(tls);
        hyper::server::conn::http1::Builder::new()
            .serve_connection(io, service)
            .await
            .ok();
    }

    fn seen(&self) -> Vec<Vec<u8>> {
        self.seen.lock().unwrap().clone()
    }
}

/// The DER of the first certificate of a PEM file.
fn der(pem: &Path) -> Vec<u8> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_file_iter(pem)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .to_vec()
}

#[tokio::test]
async fn an_app_that_requires_a_client_certificate_gets_it_over_tcp_and_a_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    let c = crate::support::certs::certs(dir.path());
    let socket = dir.path().join("app.sock");
    for app in [
        MtlsApp::start(&c, None).await,
        MtlsApp::start(&c, Some(&socket)).await,
    ] {
        let env = Env::start(&["mtls.>"]).await;
        let over = if app.url.contains("localhost") {
            format!("unix_socket = \"{}\"\n", socket.display())
        } else {
            String::new()
        };
        let extra = format!(
            "[http]\n{over}tls_ca_file = \"{}\"\ntls_cert_file = \"{}\"\ntls_key_file = \"{}\"\n",
            c.ca.display(),
            c.client_cert.display(),
            c.client_key.display()
        );
        let cfg = durable_config_for(env.nats.url(), &app.url, &env.stream, &env.durable, &extra);
        let relay = Relay::ready(cfg).await;
        publish(&env.js, "mtls.a", 3).await;
        eventually("acked over mTLS", T, || {
            consumer_drained(&env.js, &env.stream, &env.durable)
        })
        .await;
        assert_eq!(app.seen(), vec![der(&c.client_cert); 3], "{}", app.url);
        relay.stop().await.unwrap();

        // Without the certificate the app refuses the handshake: nothing is lost or
        // ended, and /ready says why.
        let extra = format!("[http]\n{over}tls_ca_file = \"{}\"\n", c.ca.display());
        let cfg = durable_config_for(env.nats.url(), &app.url, &env.stream, &env.durable, &extra);
        let relay = Relay::start(cfg).await;
        publish(&env.js, "mtls.b", 1).await;
        let mut status = relay.health.subscribe();
        let shown = tokio::time::timeout(
            T,
            status.wait_for(|s| s.reason.contains("tls handshake failed")),
        )
        .await
        .unwrap_or_else(|_| panic!("not ready, saying why: {:?}", relay.health.status()))
        .unwrap()
        .clone();
        assert!(!shown.ready, "{shown:?}");
        assert!(app.refused.load(std::sync::atomic::Ordering::SeqCst) > 0);
        assert_eq!(app.seen().len(), 3);
        assert_eq!(relay.settled("term").await, 0.0);
        relay.stop().await.unwrap();
    }
}

#[tokio::test]
async fn a_rotated_client_certificate_is_presented_without_a_restart_and_nothing_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let c = crate::support::certs::certs(dir.path());
    let (next_cert, next_key) = crate::support::certs::another_client(dir.path(), "client-next");
    // The files the relay reads, as cert-manager's Secret mounts them.
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::copy(&c.client_cert, &cert).unwrap();
    std::fs::copy(&c.client_key, &key).unwrap();
    let app = MtlsApp::start(&c, None).await;
    let env = Env::start(&["rotm.>"]).await;
    let extra = format!(
        "[http]\ntls_ca_file = \"{}\"\ntls_cert_file = \"{}\"\ntls_key_file = \"{}\"\n\
         [delivery]\nmax_in_flight = 4\nretry_initial_ms = 100\nretry_max_ms = 200\n",
        c.ca.display(),
        cert.display(),
        key.display()
    );
    let cfg = durable_config_for(env.nats.url(), &app.url, &env.stream, &env.durable, &extra);
    let relay = Relay::ready(cfg).await;
    // Load: one message after another until told to stop.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let (js, stop) = (env.js.clone(), stop.clone());
        tokio::spawn(async move {
            let mut sent = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                publish(&js, "rotm.a", 1).await;
                sent += 1;
            }
            sent
        })
    };
    eventually("some delivered with the first certificate", T, || async {
        app.seen().len() >= 20
    })
    .await;
    // The rotation, under load, one file after the other (not atomically).
    std::fs::copy(&next_cert, &cert).unwrap();
    std::fs::copy(&next_key, &key).unwrap();
    let next = der(&next_cert);
    eventually("the new certificate presented", T, || async {
        app.seen()
            .iter()
            .rev()
            .take(10)
            .filter(|d| **d == next)
            .count()
            == 10
    })
    .await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let sent = load.await.unwrap();
    eventually("all acked", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    assert_eq!(
        relay.settled("ack").await,
        f64::from(sent),
        "nothing lost or ended over the rotation"
    );
    let seen = app.seen();
    assert_eq!(seen[0], der(&c.client_cert));
    assert_eq!(
        seen.last(),
        Some(&der(&next_cert)),
        "the new one from then on"
    );
    relay.stop().await.unwrap();
}

/// An OAuth2 token endpoint (client credentials) the test runs: it checks the
/// client's Basic authentication and the grant, and issues `tok-<n>`.
pub struct TokenEndpoint {
    pub url: String,
    state: Arc<TokenState>,
}

#[derive(Default)]
struct TokenState {
    /// The secret it takes now.
    secret: Mutex<String>,
    /// `expires_in` of the tokens it issues.
    expires_in: std::sync::atomic::AtomicU64,
    /// Answer 503 to everything.
    failing: std::sync::atomic::AtomicBool,
    /// What tokens begin with.
    prefix: Mutex<String>,
    /// Tokens issued, in order.
    issued: Mutex<Vec<String>>,
    /// Each request's form, as pairs.
    forms: Mutex<Vec<Vec<(String, String)>>>,
}

impl TokenEndpoint {
    pub async fn start(client_id: &str, secret: &str) -> TokenEndpoint {
        let state = Arc::new(TokenState::default());
        *state.secret.lock().unwrap() = secret.to_string();
        *state.prefix.lock().unwrap() = "tok-".into();
        state
            .expires_in
            .store(3600, std::sync::atomic::Ordering::SeqCst);
        let (s, id) = (state.clone(), client_id.to_string());
        let router = axum::Router::new().route(
            "/token",
            axum::routing::post(move |headers: axum::http::HeaderMap, body: bytes::Bytes| {
                let (s, id) = (s.clone(), id.clone());
                async move { s.answer(&id, &headers, &body) }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/token", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, router).await });
        TokenEndpoint { url, state }
    }

    pub fn issued(&self) -> Vec<String> {
        self.state.issued.lock().unwrap().clone()
    }

    /// Tokens begin with `prefix` from now on.
    pub fn set_prefix(&self, prefix: &str) {
        *self.state.prefix.lock().unwrap() = prefix.to_string();
    }

    fn set_failing(&self, failing: bool) {
        self.state
            .failing
            .store(failing, std::sync::atomic::Ordering::SeqCst);
    }

    fn set_secret(&self, secret: &str) {
        *self.state.secret.lock().unwrap() = secret.to_string();
    }

    fn set_expires_in(&self, seconds: u64) {
        self.state
            .expires_in
            .store(seconds, std::sync::atomic::Ordering::SeqCst);
    }
}

impl TokenState {
    fn answer(
        &self,
        id: &str,
        headers: &axum::http::HeaderMap,
        body: &[u8],
    ) -> (axum::http::StatusCode, String) {
        use axum::http::StatusCode;
        if self.failing.load(std::sync::atomic::Ordering::SeqCst) {
            return (StatusCode::SERVICE_UNAVAILABLE, String::new());
        }
        let form: Vec<(String, String)> = url::form_urlencoded::parse(body).into_owned().collect();
        self.forms.lock().unwrap().push(form.clone());
        let want = format!(
            "Basic {}",
            STANDARD.encode(format!("{id}:{}", self.secret.lock().unwrap()))
        );
        let given = headers.get("authorization").and_then(|v| v.to_str().ok());
        if given != Some(want.as_str()) {
            return (
                StatusCode::UNAUTHORIZED,
                r#"{"error":"invalid_client"}"#.into(),
            );
        }
        if !form.contains(&("grant_type".into(), "client_credentials".into())) {
            return (
                StatusCode::BAD_REQUEST,
                r#"{"error":"unsupported_grant_type"}"#.into(),
            );
        }
        let mut issued = self.issued.lock().unwrap();
        let token = format!("{}{}", self.prefix.lock().unwrap(), issued.len() + 1);
        issued.push(token.clone());
        let expires_in = self.expires_in.load(std::sync::atomic::Ordering::SeqCst);
        let answer = serde_json::json!({
            "access_token": token, "token_type": "Bearer", "expires_in": expires_in,
        });
        (StatusCode::OK, answer.to_string())
    }
}

#[tokio::test]
async fn an_oauth2_token_is_cached_refreshed_before_it_expires_and_once_after_a_401() {
    let dir = tempfile::tempdir().unwrap();
    let secret = write(dir.path(), "client-secret", "s3cret-1\n");
    let endpoint = TokenEndpoint::start("relay", "s3cret-1").await;
    // The app takes every token the endpoint issued, until the test revokes one.
    let revoked = Arc::new(Mutex::new(std::collections::HashSet::<String>::new()));
    let app = {
        let (endpoint_state, revoked) = (endpoint.state.clone(), revoked.clone());
        MockApp::start(move |r, _| {
            let token = r
                .header("authorization")
                .and_then(|a| a.strip_prefix("Bearer "));
            let ok = token.is_some_and(|t| {
                endpoint_state.issued.lock().unwrap().iter().any(|i| i == t)
                    && !revoked.lock().unwrap().contains(t)
            });
            Reply::status(if ok { 200 } else { 401 })
        })
        .await
    };
    let env = Env::start(&["oa.>"]).await;
    let extra = format!(
        "[http.oauth2]\ntoken_url = \"{}\"\nclient_id = \"relay\"\nclient_secret_file = \"{}\"\n\
         scopes = [\"orders.write\", \"orders.read\"]\naudience = \"https://app.example\"\n",
        endpoint.url,
        secret.display()
    );
    let relay = env.relay(&app, &extra).await;
    eventually("a token fetched at start", T, || async {
        endpoint.issued() == ["tok-1"]
    })
    .await;
    publish(&env.js, "oa.a", 5).await;
    eventually("five acked", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    assert_eq!(endpoint.issued(), ["tok-1"], "fetched once, then kept");
    let form = endpoint.state.forms.lock().unwrap()[0].clone();
    for pair in [
        ("grant_type", "client_credentials"),
        ("scope", "orders.write orders.read"),
        ("audience", "https://app.example"),
    ] {
        assert!(form.contains(&(pair.0.into(), pair.1.into())), "{form:?}");
    }

    // The app refuses the token (revoked): a new one is fetched once and the
    // request sent again with it; nothing is retried or ended.
    revoked.lock().unwrap().insert("tok-1".into());
    publish(&env.js, "oa.b", 1).await;
    eventually("acked with a new token", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    assert_eq!(endpoint.issued(), ["tok-1", "tok-2"]);
    let last = app.requests().into_iter().last().unwrap();
    assert_eq!(last.header("authorization"), Some("Bearer tok-2"));
    assert_eq!(last.status, 200);

    // Short-lived tokens are fetched again before they expire, not after a 401.
    endpoint.set_expires_in(2);
    revoked.lock().unwrap().insert("tok-2".into());
    let refused = |app: &MockApp| app.requests().iter().filter(|r| r.status == 401).count();
    publish(&env.js, "oa.c", 1).await;
    eventually("tok-3 issued", T, || async { endpoint.issued().len() == 3 }).await;
    let refused_before = refused(&app);
    eventually("fetched again before expiry", T, || async {
        publish(&env.js, "oa.d", 1).await;
        endpoint.issued().len() >= 5
    })
    .await;
    eventually("all acked", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    assert_eq!(refused(&app), refused_before, "no 401 for an expired token");
    assert_eq!(relay.settled("term").await, 0.0);
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn a_failing_token_endpoint_holds_messages_as_the_app_unreachable_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let secret = write(dir.path(), "client-secret", "s3cret-1\n");
    let endpoint = TokenEndpoint::start("relay", "s3cret-1").await;
    endpoint.set_failing(true);
    let app = MockApp::ok().await;
    // The app is healthy (its probe needs no token): the requests say why they wait.
    app.set_healthy(true);
    let env = Env::start(&["oaf.>"]).await;
    let extra = format!(
        "[http]\nhealth_url = \"{}\"\nhealth_interval_ms = 50\n\
         [http.oauth2]\ntoken_url = \"{}\"\nclient_id = \"relay\"\nclient_secret_file = \"{}\"\n\
         [delivery]\nretry_initial_ms = 100\nretry_max_ms = 200\n",
        app.health_url(),
        endpoint.url,
        secret.display()
    );
    let relay = Relay::start(env.config(&app, &extra)).await;
    publish(&env.js, "oaf.a", 2).await;
    let says = |reason: &'static str| {
        let mut status = relay.health.subscribe();
        async move {
            tokio::time::timeout(
                T,
                status.wait_for(|s| !s.ready && s.reason.contains(reason)),
            )
            .await
            .unwrap_or_else(|_| panic!("/ready says {reason}"))
            .unwrap()
            .clone()
        }
    };
    says("app unreachable: oauth2 token endpoint failed").await;
    // The client secret rotated at the endpoint before the file: refused, saying so.
    endpoint.set_failing(false);
    endpoint.set_secret("s3cret-2");
    says("app unreachable: oauth2 token endpoint refused the client").await;
    assert_eq!(app.arrivals(), 0, "nothing sent without a token");
    // The file follows: the next fetch uses it, and everything is delivered.
    std::fs::write(&secret, "s3cret-2\n").unwrap();
    eventually("all acked", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    assert_eq!(app.arrivals(), 2);
    relay.stop().await.unwrap();

    // An endpoint that is not there at all.
    let down = format!("http://127.0.0.1:{}/token", free_port());
    let extra = extra.replace(&endpoint.url, &down);
    let relay = Relay::start(env.config(&app, &extra)).await;
    publish(&env.js, "oaf.b", 1).await;
    let mut status = relay.health.subscribe();
    tokio::time::timeout(
        T,
        status.wait_for(|s| s.reason.contains("oauth2 token endpoint unreachable")),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(app.arrivals(), 2);
    assert_eq!(relay.settled("term").await, 0.0, "no attempt spent");
    relay.stop().await.unwrap();
}

/// `jetrelay check` asks the token endpoint once: a token fetched is a line; a client
/// it refuses is not ok (run would hold every message); one not there is a warning.
/// The token and the secret are never shown.
#[tokio::test]
async fn check_asks_the_token_endpoint_and_says_what_run_would_meet() {
    let dir = tempfile::tempdir().unwrap();
    let secret = write(dir.path(), "client-secret", "s3cret-1\n");
    let endpoint = TokenEndpoint::start("relay", "s3cret-1").await;
    let app = MockApp::ok().await;
    let env = Env::start(&["ock.>"]).await;
    let extra = |url: &str| {
        format!(
            "[http.oauth2]\ntoken_url = \"{url}\"\nclient_id = \"relay\"\nclient_secret_file = \"{}\"\n",
            secret.display()
        )
    };
    let check = |url: String| {
        let config = env.config(&app, &extra(&url));
        async move {
            let report = jetrelay::cli::check::check(&config).await.unwrap();
            let line = (report.lines.iter())
                .find(|l| l.starts_with("app oauth2: "))
                .unwrap_or_else(|| panic!("no oauth2 line in {:?}", report.lines))
                .clone();
            let all = report.lines.join("\n");
            assert!(!all.contains("tok-") && !all.contains("s3cret"), "{all}");
            (report.ok, line)
        }
    };
    let (ok, line) = check(endpoint.url.clone()).await;
    assert!(ok, "{line}");
    assert_eq!(line, "app oauth2: a token was fetched");
    assert_eq!(endpoint.issued().len(), 1);
    endpoint.set_secret("s3cret-2");
    let (ok, line) = check(endpoint.url.clone()).await;
    assert!(!ok, "{line}");
    assert!(
        line.contains("error: oauth2 token endpoint refused the client"),
        "{line}"
    );
    let (ok, line) = check(format!("http://127.0.0.1:{}/token", free_port())).await;
    assert!(ok, "{line}");
    assert!(
        line.contains("warning: oauth2 token endpoint unreachable"),
        "{line}"
    );
}
