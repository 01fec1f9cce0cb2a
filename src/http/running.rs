//! Reads another jetrelay's admin endpoint: the running config that `jetrelay check
//! --diff-running` compares a file with (`GET /config`, JSON).

use std::time::Duration;

/// Why the running config could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RunningError {
    /// The client could not be built.
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsFileError),
    /// No answer, or not 200.
    #[error("cannot read the running config at {url}")]
    Get {
        /// The URL asked.
        url: String,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// `GET url` (a local admin port: no TLS, five seconds at most), its body.
///
/// # Errors
/// [`RunningError`].
pub async fn get_text(url: &str) -> Result<String, RunningError> {
    let fail = |source: Box<dyn std::error::Error + Send + Sync>| RunningError::Get {
        url: url.to_string(),
        source,
    };
    let client = super::client::builder("")?
        .timeout(Duration::from_secs(5))
        .build()
        .map_err(|e| fail(e.into()))?;
    let resp = client.get(url).send().await.map_err(|e| fail(e.into()))?;
    let status = resp.status();
    if !status.is_success() {
        return Err(fail(format!("the admin port answered {status}").into()));
    }
    resp.text().await.map_err(|e| fail(e.into()))
}
