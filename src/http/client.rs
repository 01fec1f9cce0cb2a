//! How every HTTP client of jetrelay's is built, in one place: reqwest is compiled
//! without a default TLS crypto provider, so a client built any other way panics on
//! its first use ("No rustls crypto provider is configured"). Here each client gets
//! its TLS config explicitly (`crate::tls::client_config`: ring, the system's roots,
//! plus a private CA when given), no proxy from the environment and no redirects.
//! The daemon's app client, the examples and the test harness all start here.

use crate::tls::{TlsFileError, client_config};

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
        .redirect(reqwest::redirect::Policy::none()))
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
