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
    Ok(builder("")?.build()?)
}

/// Why a plain client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The TLS roots.
    #[error("cannot set up TLS")]
    Tls(#[from] TlsFileError),
    /// reqwest refused.
    #[error("cannot build the HTTP client")]
    Build(#[from] reqwest::Error),
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::config::HttpConfig;
    use crate::http::forward::{AnswerLimits, Forwarder};

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

    #[tokio::test]
    async fn every_client_jetrelay_builds_works_without_a_default_provider() {
        // The examples' and the tests' client.
        let plain = super::plain().unwrap();
        let refused = plain.get("https://127.0.0.1:1/").send().await;
        assert!(refused.unwrap_err().is_connect());
        // The daemon's: plain http and https apps, a proxy, a health URL.
        let limits = AnswerLimits {
            publish_bytes: 1024,
            publish_messages: 10,
        };
        for (url, proxy) in [
            ("http://127.0.0.1:1/messages", ""),
            ("https://127.0.0.1:1/messages", ""),
            ("https://127.0.0.1:1/messages", "http://127.0.0.1:1"),
        ] {
            let cfg = HttpConfig {
                url: url.into(),
                health_url: url.into(),
                proxy: proxy.into(),
                ..HttpConfig::default()
            };
            let f = Forwarder::new(&cfg, 4, limits).unwrap();
            assert!(!f.healthy(Duration::from_secs(2)).await, "{url}");
        }
    }
}
