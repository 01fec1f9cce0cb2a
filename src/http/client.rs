//! How every HTTP client of jetrelay's is built, in one place: reqwest is compiled
//! without a default TLS crypto provider, so a client built any other way panics on
//! its first use ("No rustls crypto provider is configured"). Here each client gets
//! its TLS config explicitly (`crate::tls::client_config`: ring, the system's roots,
//! plus a private CA when given), no proxy from the environment and no redirects.
//! The daemon's app client, the examples and the test harness all start here.

use crate::app::transport::HttpVersion;
use std::sync::Arc;

use crate::tls::{ClientCert, TlsFileError, app_client_config, client_config};

/// A client builder with jetrelay's TLS (the system's roots, plus the certificates
/// of `ca_file` when it is not empty), proxies from the environment ignored and
/// redirects off; the caller adds its pool, timeouts and proxy.
///
/// # Errors
/// [`TlsFileError`] when `ca_file` cannot be used, or no root certificate is there
/// to verify a server with.
pub fn builder(ca_file: &str) -> Result<reqwest::ClientBuilder, TlsFileError> {
    Ok(reqwest::Client::builder()
        .no_proxy()
        .tls_backend_preconfigured(client_config(ca_file)?)
        .redirect(reqwest::redirect::Policy::none())
        // reqwest's retries are for HTTP/2 (a GOAWAY, a refused stream), which this
        // client does not speak (ALPN offers http/1.1); left on, every request is
        // cloned, headers included, in case it must be sent again.
        .retry(reqwest::retry::never().max_retries_per_request(0)))
}

/// A builder for the app's requests in `version` (`http.version`): HTTP/1.1 only
/// (ALPN `http/1.1`); h2c by prior knowledge; or ALPN `h2`, `http/1.1` for `https://`
/// and HTTP/1.1 for `http://`; presenting `cert` to an app that asks for a client
/// certificate. Otherwise as [`builder`].
///
/// # Errors
/// As [`builder`].
pub fn builder_for(
    ca_file: &str,
    version: HttpVersion,
    cert: Option<Arc<ClientCert>>,
) -> Result<reqwest::ClientBuilder, TlsFileError> {
    let tls = app_client_config(ca_file, version == HttpVersion::Auto, cert)?;
    let b = reqwest::Client::builder()
        .no_proxy()
        .tls_backend_preconfigured(tls)
        .redirect(reqwest::redirect::Policy::none())
        // Off for HTTP/2 too: a stream the app refused or a GOAWAY is an attempt
        // like any other broken request, and nothing is cloned in case it is resent.
        .retry(reqwest::retry::never().max_retries_per_request(0));
    Ok(match version {
        HttpVersion::Http1 => b.http1_only(),
        // The config refuses h2c with an https:// URL, so TLS's ALPN is never asked.
        HttpVersion::H2c => b.http2_prior_knowledge(),
        HttpVersion::Auto => b,
    })
}

/// A builder for HTTP/2 only (the collector's gRPC): `prior_knowledge` for an
/// `http://` endpoint (h2c), ALPN `h2` for `https://`.
///
/// # Errors
/// [`TlsFileError`] when no root certificate is there.
pub fn builder_h2(prior_knowledge: bool) -> Result<reqwest::ClientBuilder, TlsFileError> {
    let b = reqwest::Client::builder()
        .no_proxy()
        .tls_backend_preconfigured(crate::tls::client_config_h2()?)
        .redirect(reqwest::redirect::Policy::none());
    Ok(if prior_knowledge {
        b.http2_prior_knowledge()
    } else {
        b
    })
}

/// Reads an answer to its end and returns its trailers (gRPC's status is there).
///
/// # Errors
/// The body broke off.
pub async fn trailers(
    resp: reqwest::Response,
) -> Result<Option<reqwest::header::HeaderMap>, reqwest::Error> {
    use http_body_util::BodyExt;
    let mut body = reqwest::Body::from(resp);
    while let Some(frame) = body.frame().await {
        if let Ok(t) = frame?.into_trailers() {
            return Ok(Some(t));
        }
    }
    Ok(None)
}

/// A plain client (for examples, tools and tests): [`builder`] with nothing added.
///
/// # Errors
/// [`TlsFileError`], as [`builder`]; or the client cannot be built.
pub fn plain() -> Result<reqwest::Client, ClientError> {
    builder("")
        .map_err(|source| ClientError::TlsCa {
            path: String::new(),
            source,
        })?
        .build()
        .map_err(ClientError::Build)
}

/// Why an HTTP client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// A secret file (the bearer token, a header value, the proxy's credentials)
    /// cannot be used.
    #[error(transparent)]
    SecretFile(#[from] crate::secret::SecretError),
    /// A signing secret file holds no Standard Webhooks key.
    #[error("{key}: not a Standard Webhooks secret")]
    Signing {
        /// The config key.
        key: String,
        /// What is wrong (never the secret).
        #[source]
        source: crate::app::signing::WhsecError,
    },
    /// A configured header or the token is not valid HTTP.
    #[error("http.headers.{0}: not a valid header")]
    Header(String),
    /// `http.tls_ca_file` cannot be used (or the system has no roots).
    #[error("http.tls_ca_file ({path})")]
    TlsCa {
        /// The path.
        path: String,
        /// What is wrong.
        #[source]
        source: TlsFileError,
    },
    /// `http.tls_cert_file` or `http.tls_key_file` cannot be used.
    #[error("{key} ({path})")]
    TlsClientCert {
        /// The config key.
        key: &'static str,
        /// The path.
        path: String,
        /// What is wrong.
        #[source]
        source: TlsFileError,
    },
    /// The proxy URL was refused.
    #[error("http.proxy {0:?} is not a proxy URL")]
    Proxy(String, #[source] reqwest::Error),
    /// reqwest refused.
    #[error("cannot build the HTTP client")]
    Build(#[source] reqwest::Error),
}

#[cfg(test)]
mod tests {
    /// This test binary, like the release binary, has no process-wide crypto
    /// provider: a client built the default way panics here, so the clients below
    /// are built the way production builds them.
    #[test]
    fn no_default_crypto_provider_is_installed() {
        let default = std::panic::catch_unwind(reqwest::Client::new);
        assert!(
            default.is_err(),
            "a crypto provider was installed process-wide: this test no longer shows anything"
        );
    }
}
