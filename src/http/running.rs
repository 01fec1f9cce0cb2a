//! Talks to another jetrelay's admin endpoint: the running config that `jetrelay
//! check --diff-running` compares a file with (`GET /config`, JSON), and the drain
//! `jetrelay drain` asks for (`POST /drain`).

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

/// What a jetrelay's admin port answered: its status and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminAnswer {
    /// The HTTP status.
    pub status: u16,
    /// The body, as text.
    pub body: String,
}

/// `POST url` (a local admin port: no TLS), with `Authorization: Bearer <bearer>`
/// when given, waiting `timeout` at most; whatever status it answers.
///
/// # Errors
/// [`RunningError::Get`] when no answer came.
pub async fn post(
    url: &str,
    bearer: Option<&str>,
    timeout: Duration,
) -> Result<AdminAnswer, RunningError> {
    let fail = |source: Box<dyn std::error::Error + Send + Sync>| RunningError::Get {
        url: url.to_string(),
        source,
    };
    let client = super::client::builder("")?
        .timeout(timeout)
        .build()
        .map_err(|e| fail(e.into()))?;
    let mut request = client.post(url);
    if let Some(token) = bearer {
        request = request.bearer_auth(token);
    }
    let resp = request.send().await.map_err(|e| fail(e.into()))?;
    let status = resp.status().as_u16();
    let body = resp.text().await.map_err(|e| fail(e.into()))?;
    Ok(AdminAnswer { status, body })
}
