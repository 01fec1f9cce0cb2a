//! The app's client: one per app origin — its connection pool, TLS (a private CA),
//! proxy and credentials (static headers, the bearer token, secret header files) —
//! shared by every source and route that sends there. What differs per source or
//! route (the URL, the format, the pass rules, the timeout, the answer limits) is a
//! cheap target (`crate::http::forward::TargetSettings`) beside it.

use std::sync::Arc;
use std::time::Duration;

use crate::app::transport::HttpVersion;
use crate::http::client::ClientError;
use crate::http::credentials::{CredentialFiles, Credentials};

/// What the app's client is built from: `http.tls_ca_file`, `http.proxy`, the
/// credentials, and the pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientSettings {
    /// `http.tls_ca_file`: a private CA, added to the system's roots.
    pub tls_ca_file: Option<String>,
    /// `http.proxy`: the only proxy the app's requests go through.
    pub proxy: Option<ProxySettings>,
    /// `http.headers`, `http.bearer_token_file`, `http.header_files`.
    pub credentials: CredentialFiles,
    /// Idle connections kept per host (the sources' `delivery.max_in_flight`); an
    /// HTTP/2 app needs one, its requests multiplexed on it.
    pub pool: usize,
    /// `http.unix_socket`: every request and probe goes over it (TCP when `None`).
    pub unix_socket: Option<std::path::PathBuf>,
    /// `http.version`.
    pub version: HttpVersion,
}

/// `http.proxy` and `http.proxy_credentials_file`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxySettings {
    /// The proxy (no credentials in it: the config refuses them).
    pub url: reqwest::Url,
    /// The file holding `user:password`, when the proxy wants them.
    pub credentials_file: Option<String>,
}

/// The pooled client and the credentials every request to the app carries. Cheap to
/// clone: clones share the pool.
#[derive(Debug, Clone)]
pub struct AppClient {
    pub(super) client: reqwest::Client,
    pub(super) credentials: Arc<Credentials>,
    /// `http.version`: under h2c a broken request asks whether the app speaks HTTP/2.
    pub(super) version: HttpVersion,
    /// `http.unix_socket`, where that is asked.
    pub(super) socket: Option<Arc<std::path::Path>>,
}

impl AppClient {
    /// Builds the pooled client: the secret files are read and the CA checked here.
    ///
    /// # Errors
    /// [`ClientError`].
    pub fn new(cfg: &ClientSettings) -> Result<AppClient, ClientError> {
        let credentials = Arc::new(Credentials::load(&cfg.credentials)?);
        // Proxy environment variables (often set cluster-wide) never divert the app's
        // traffic, bearer token included: only `http.proxy` does.
        let ca_file = cfg.tls_ca_file.as_deref().unwrap_or("");
        let mut builder =
            crate::http::client::builder_for(ca_file, cfg.version).map_err(|source| {
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
        Ok(AppClient {
            client,
            credentials,
            version: cfg.version,
            socket: cfg.unix_socket.as_deref().map(Arc::from),
        })
    }

    /// Whether `url` (the app's health URL) answers 2xx within `timeout`, asked
    /// with the app's credentials.
    pub async fn healthy(&self, url: &reqwest::Url, timeout: Duration) -> bool {
        let probe = self
            .client
            .get(url.clone())
            .headers(self.credentials.headers())
            .timeout(timeout);
        match probe.send().await {
            Ok(r) => r.status().is_success(),
            Err(_) => false,
        }
    }
}
