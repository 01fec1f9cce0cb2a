//! The app's client: one per app origin — its connection pool, TLS (a private CA, a
//! client certificate), proxy, credentials (static headers, the bearer token, secret
//! header files, an OAuth2 token) and signing keys — shared by every source and
//! route that sends there. What differs per source or
//! route (the URL, the format, the pass rules, the timeout, the answer limits) is a
//! cheap target (`crate::http::forward::TargetSettings`) beside it.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderMap, HeaderValue};

use crate::app::transport::HttpVersion;
use crate::http::answer::AppAnswer;
use crate::http::broke::Broke;
use crate::http::client::ClientError;
use crate::http::credentials::{CredentialFiles, Credentials};
use crate::http::h1::H1;
use crate::http::h2::H2c;
use crate::http::oauth2::{self, OAuth2Settings, TokenError, TokenSource};
use crate::http::signing::{Signer, SigningFiles};
use crate::tls::{ClientCert, ClientCertFiles};

/// `sent`, unless `deadline` comes first.
async fn within<T>(
    deadline: tokio::time::Instant,
    sent: impl Future<Output = Result<T, Broke>>,
) -> Result<T, Broke> {
    match tokio::time::timeout_at(deadline, sent).await {
        Ok(answer) => answer,
        Err(_) => Err(Broke::timed_out()),
    }
}

/// The most of a health probe's answer read so that its connection is kept.
const PROBE_BODY: usize = 64 * 1024;

/// What the app's client is built from: `http.tls_ca_file`, `http.proxy`, the
/// credentials, and the pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientSettings {
    /// `http.tls_ca_file`: a private CA, added to the system's roots.
    pub tls_ca_file: Option<String>,
    /// `http.tls_cert_file` and `http.tls_key_file`: the client certificate
    /// presented to an `https://` app that asks for one (mTLS).
    pub tls_client: Option<ClientCertFiles>,
    /// `http.proxy`: the only proxy the app's requests go through.
    pub proxy: Option<ProxySettings>,
    /// `http.headers`, `http.bearer_token_file`, `http.header_files`.
    pub credentials: CredentialFiles,
    /// `[http.signing]`: Standard Webhooks signatures on every request, when set.
    pub signing: Option<SigningFiles>,
    /// `[http.oauth2]`: a client credentials token on every request, when set.
    pub oauth2: Option<OAuth2Settings>,
    /// Idle connections kept per host (the sources' `delivery.max_in_flight`); an
    /// HTTP/2 app needs one, its requests multiplexed on it.
    pub pool: usize,
    /// `http.unix_socket`: every request and probe goes over it (TCP when `None`).
    pub unix_socket: Option<std::path::PathBuf>,
    /// `http.version`.
    pub version: HttpVersion,
    /// `http.max_concurrent_streams`: under h2c, the most requests on one connection
    /// (0: the app's limit alone).
    pub max_concurrent_streams: u32,
}

/// `http.proxy` and `http.proxy_credentials_file`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxySettings {
    /// The proxy (no credentials in it: the config refuses them).
    pub url: reqwest::Url,
    /// The file holding `user:password`, when the proxy wants them.
    pub credentials_file: Option<String>,
}

/// The pooled clients and the credentials every request to the app carries. Cheap to
/// clone: clones share the pool.
#[derive(Debug, Clone)]
pub struct AppClient {
    /// reqwest's pool: it builds every request's template (`Forwarder::new`), and
    /// carries the requests that `transport` leaves to it.
    pub(super) client: reqwest::Client,
    /// The client that carries the requests.
    transport: Transport,
    pub(super) credentials: Arc<Credentials>,
    /// `[http.signing]`'s signer, when set.
    pub(super) signer: Option<Arc<Signer>>,
    /// `[http.oauth2]`'s tokens, when set.
    oauth2: Option<Arc<TokenSource>>,
    /// `http.version`: under h2c a broken request asks whether the app speaks HTTP/2.
    pub(super) version: HttpVersion,
    /// `http.unix_socket`, where that is asked.
    pub(super) socket: Option<Arc<std::path::Path>>,
}

/// The client that carries the app's requests, one, chosen by `http.proxy` and
/// `http.version` (each dials `http.unix_socket` when it is set, TCP otherwise).
#[derive(Debug, Clone)]
enum Transport {
    /// Through `http.proxy`: reqwest's pool carries every request.
    Proxied,
    /// HTTP/1.1 (or `auto`) without a proxy: jetrelay's own pool (`crate::http::h1`)
    /// carries the requests to `http://` apps, reqwest's pool those to `https://` ones.
    H1(Arc<H1>),
    /// h2c without a proxy: its own connections (`crate::http::h2`) carry every
    /// request.
    H2c(Arc<H2c>),
}

impl AppClient {
    /// Builds the pooled client: the secret files are read and the CA checked here.
    ///
    /// # Errors
    /// [`ClientError`].
    pub fn new(cfg: &ClientSettings) -> Result<AppClient, ClientError> {
        let credentials = Arc::new(Credentials::load(&cfg.credentials)?);
        let signer = match &cfg.signing {
            Some(files) => Some(Arc::new(Signer::load(files)?)),
            None => None,
        };
        // Proxy environment variables (often set cluster-wide) never divert the app's
        // traffic, bearer token included: only `http.proxy` does.
        let ca_file = cfg.tls_ca_file.as_deref().unwrap_or("");
        let cert = match &cfg.tls_client {
            None => None,
            Some(files) => Some(Arc::new(ClientCert::load(files).map_err(
                |(key, source)| ClientError::TlsClientCert {
                    key,
                    path: match key {
                        "http.tls_key_file" => files.key_file.clone(),
                        _ => files.cert_file.clone(),
                    },
                    source,
                },
            )?)),
        };
        let mut builder =
            crate::http::client::builder_for(ca_file, cfg.version, cert).map_err(|source| {
                ClientError::TlsCa {
                    path: ca_file.to_string(),
                    source,
                }
            })?;
        if let Some(path) = &cfg.unix_socket {
            // The URL still gives the request's path and its Host header.
            builder = builder.unix_socket(path.as_path());
        }
        if let Some(p) = &cfg.proxy {
            let mut proxy = reqwest::Proxy::all(p.url.clone())
                .map_err(|e| ClientError::Proxy(p.url.to_string(), e))?;
            if let Some(file) = &p.credentials_file {
                let secret = crate::secret::SecretFile::load("http.proxy_credentials_file", file)?;
                let value = secret.value();
                let (user, password) = value.split_once(':').unwrap_or((&value, ""));
                proxy = proxy.basic_auth(user, password);
            }
            builder = builder.proxy(proxy);
        }
        let client = builder
            .pool_max_idle_per_host(cfg.pool)
            .pool_idle_timeout(Duration::from_secs(60))
            .tcp_nodelay(true)
            .build()
            .map_err(ClientError::Build)?;
        let oauth2 = match &cfg.oauth2 {
            None => None,
            Some(o) => {
                // The token endpoint is asked directly (no proxy), trusting what the
                // app's client trusts.
                let asks = crate::http::client::builder(ca_file)
                    .map_err(|source| ClientError::TlsCa {
                        path: ca_file.to_string(),
                        source,
                    })?
                    .build()
                    .map_err(ClientError::Build)?;
                Some(Arc::new(TokenSource::load(o, asks)?))
            }
        };
        let socket: Option<Arc<std::path::Path>> = cfg.unix_socket.as_deref().map(Arc::from);
        let transport = match (&cfg.proxy, cfg.version) {
            (Some(_), _) => Transport::Proxied,
            (None, HttpVersion::H2c) => Transport::H2c(Arc::new(H2c::new(
                socket.clone(),
                cfg.max_concurrent_streams,
            ))),
            (None, _) => Transport::H1(Arc::new(H1::new(socket.clone(), cfg.pool))),
        };
        Ok(AppClient {
            client,
            transport,
            credentials,
            signer,
            oauth2,
            version: cfg.version,
            socket,
        })
    }

    /// Sends `method` to `url` with `headers` and `body` (`None`: no body) and
    /// returns the answer once its head is there, all within `timeout` (which goes
    /// on covering the body's reading).
    ///
    /// # Errors
    /// [`Broke`]: why there is no answer.
    pub(crate) async fn send(
        &self,
        method: reqwest::Method,
        url: &reqwest::Url,
        headers: HeaderMap,
        body: Option<Bytes>,
        timeout: Duration,
    ) -> Result<AppAnswer, Broke> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut headers = headers;
        // What reqwest would add when it is missing: the same over every client.
        (headers.entry(ACCEPT)).or_insert(HeaderValue::from_static("*/*"));
        match &self.transport {
            Transport::H2c(h2c) => {
                let sent = h2c.exchange(method, url, headers, body);
                within(deadline, sent).await.map(AppAnswer::H2)
            }
            Transport::H1(h1) if url.scheme() == "http" => {
                let sent = h1.exchange(method, url, headers, body);
                within(deadline, sent).await.map(AppAnswer::H1)
            }
            Transport::H1(_) | Transport::Proxied => {
                // Built in place: the builder's `headers()` would copy the map entry
                // by entry.
                let mut request = reqwest::Request::new(method, url.clone());
                *request.headers_mut() = headers;
                *request.body_mut() = body.map(reqwest::Body::from);
                *request.timeout_mut() = Some(timeout);
                match self.client.execute(request).await {
                    Ok(r) => Ok(AppAnswer::Pooled(r)),
                    Err(e) => Err(Broke::of_reqwest(&e)),
                }
            }
        }
    }

    /// [`AppClient::send`] with `[http.oauth2]`'s token, when set: fetched first (no
    /// token: nothing is sent, [`Broke::token`]); a 401 answer drops it, and the
    /// request is sent once more with a new one, within what is left of `timeout`.
    ///
    /// # Errors
    /// [`Broke`]: why there is no answer.
    pub(crate) async fn send_authorized(
        &self,
        method: reqwest::Method,
        url: &reqwest::Url,
        mut headers: HeaderMap,
        body: Option<Bytes>,
        timeout: Duration,
    ) -> Result<AppAnswer, Broke> {
        let Some(tokens) = &self.oauth2 else {
            return self.send(method, url, headers, body, timeout).await;
        };
        let deadline = tokio::time::Instant::now() + timeout;
        let fetch = || async { tokens.token().await.map_err(|e| Broke::token(e.kind())) };
        let token = within(deadline, fetch()).await?;
        if let Some(v) = oauth2::bearer(&token) {
            headers.insert(AUTHORIZATION, v);
        }
        let again = (method.clone(), headers.clone(), body.clone());
        let answer = self.send(method, url, headers, body, timeout).await?;
        if answer.status() != 401 {
            return Ok(answer);
        }
        drop(answer);
        tokens.refused(&token);
        let token = within(deadline, fetch()).await?;
        let (method, mut headers, body) = again;
        if let Some(v) = oauth2::bearer(&token) {
            headers.insert(AUTHORIZATION, v);
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        self.send(method, url, headers, body, left).await
    }

    /// Asks `[http.oauth2]`'s token endpoint for a token once, within `timeout`
    /// (`jetrelay check`): `None` without `[http.oauth2]`. The token is not shown.
    pub async fn try_token(&self, timeout: Duration) -> Option<Result<(), TokenError>> {
        let tokens = self.oauth2.as_ref()?;
        Some(match tokio::time::timeout(timeout, tokens.token()).await {
            Ok(got) => got.map(drop),
            Err(_) => Err(TokenError::Unreachable),
        })
    }

    /// Fetches `[http.oauth2]`'s token now, when set, so that the first request
    /// does not wait for it (a failure is fetched again by that request).
    pub async fn prefetch_token(&self) {
        if let Some(tokens) = &self.oauth2 {
            // A failure is logged where it happens; the first request asks again.
            tokens.token().await.ok();
        }
    }

    /// Whether `url` (the app's health URL) answers 2xx within `timeout`, asked
    /// with the app's credentials. Without an OAuth2 token (its endpoint fails) the
    /// app is asked without one: the requests say why they are held, not the probe.
    pub async fn healthy(&self, url: &reqwest::Url, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        let headers = self.credentials.headers();
        let get = reqwest::Method::GET;
        let asked = match self
            .send_authorized(get.clone(), url, headers.clone(), None, timeout)
            .await
        {
            Err(broke) if broke.token.is_some() => {
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                self.send(get, url, headers, None, left).await
            }
            asked => asked,
        };
        let Ok(mut answer) = asked else {
            return false;
        };
        // The body read (bounded, in time) so that the connection is kept for the next.
        let mut read = 0;
        while read < PROBE_BODY {
            match tokio::time::timeout_at(deadline, answer.chunk()).await {
                Ok(Ok(Some(chunk))) => read += chunk.len(),
                _ => break,
            }
        }
        (200..300).contains(&answer.status())
    }
}
