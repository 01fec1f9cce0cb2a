//! `jetrelay drain`: what a kubelet's `preStop` `exec` hook runs in the jetrelay's
//! container — asks the local jetrelay's admin port (`admin.listen` of the config,
//! with the `JETRELAY_*` variables over it) to drain (`POST /drain`, with the bearer
//! token of `admin.token_file` when set) and says what it answered.

use std::time::Duration;

use crate::config::Config;
use crate::http::running::{AdminAnswer, RunningError};
use crate::ops::drain::parse_wait;
use crate::secret::{SecretError, SecretFile};

/// Why the drain could not be asked.
#[derive(Debug, thiserror::Error)]
pub enum DrainError {
    /// The command line is wrong (exit 64).
    #[error("--wait: {0}")]
    Usage(String),
    /// `admin.token_file` cannot be read (exit 64).
    #[error(transparent)]
    Secret(#[from] SecretError),
    /// The admin port did not answer (exit 69).
    #[error(transparent)]
    Unreachable(#[from] RunningError),
    /// The admin port refused the request (exit 64: the token or the address).
    #[error("the admin port refused the drain ({status}): {why}")]
    Refused {
        /// Its status.
        status: u16,
        /// Its words.
        why: String,
    },
    /// The admin port answered something else (exit 1).
    #[error("the admin port answered {status}: {why}")]
    Failed {
        /// Its status.
        status: u16,
        /// Its words.
        why: String,
    },
}

/// The drain's answer: its JSON, and whether everything was drained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drained {
    /// The admin port's JSON answer.
    pub text: String,
    /// Everything held was settled or released within the wait.
    pub drained: bool,
}

/// The `/drain` URL of `config`'s admin port, with `wait` when given.
pub fn url(config: &Config, wait: Option<Duration>) -> String {
    let base = crate::cli::running::admin_base(config);
    match wait {
        Some(w) => format!("{base}/drain?wait={}ms", w.as_millis()),
        None => format!("{base}/drain"),
    }
}

/// What an answer of the admin port means.
///
/// # Errors
/// [`DrainError::Refused`] (403, 400), [`DrainError::Failed`] (anything else but
/// 200 and 503).
pub fn judge(answer: AdminAnswer) -> Result<Drained, DrainError> {
    let why = crate::printable::printable(answer.body.trim()).into_owned();
    match answer.status {
        200 | 503 => Ok(Drained {
            text: answer.body.trim().to_string(),
            drained: answer.status == 200,
        }),
        status @ (400 | 403) => Err(DrainError::Refused { status, why }),
        status => Err(DrainError::Failed { status, why }),
    }
}

/// Asks the jetrelay `config` describes to drain, waiting `wait` at most
/// (`delivery.shutdown_grace_ms` when not given).
///
/// # Errors
/// [`DrainError`].
pub async fn run(config: &Config, wait: Option<&str>) -> Result<Drained, DrainError> {
    let wait = wait
        .map(parse_wait)
        .transpose()
        .map_err(DrainError::Usage)?;
    let token = match config.admin.token_file.as_str() {
        "" => None,
        path => Some(SecretFile::load("admin.token_file", path)?.value()),
    };
    let waits = wait.unwrap_or(Duration::from_millis(config.delivery.shutdown_grace_ms));
    // The answer comes when the drain is done, within its wait: a margin for the rest.
    let timeout = waits.saturating_add(Duration::from_secs(10));
    let answer = crate::http::running::post(&url(config, wait), token.as_deref(), timeout).await?;
    judge(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drain_url_table() {
        let mut c = Config::default();
        c.admin.listen = "0.0.0.0:9191".into();
        assert_eq!(url(&c, None), "http://127.0.0.1:9191/drain");
        assert_eq!(
            url(&c, Some(Duration::from_secs(25))),
            "http://127.0.0.1:9191/drain?wait=25000ms"
        );
    }

    #[test]
    fn answers_table() {
        let a = |status: u16, body: &str| AdminAnswer {
            status,
            body: body.into(),
        };
        let ok = judge(a(200, "{\"drained\":true}\n")).unwrap();
        assert!(ok.drained);
        assert_eq!(ok.text, "{\"drained\":true}");
        assert!(!judge(a(503, "{\"drained\":false}")).unwrap().drained);
        assert!(matches!(
            judge(a(403, "no")),
            Err(DrainError::Refused { status: 403, .. })
        ));
        assert!(matches!(
            judge(a(400, "wait")),
            Err(DrainError::Refused { status: 400, .. })
        ));
        assert!(matches!(
            judge(a(404, "")),
            Err(DrainError::Failed { status: 404, .. })
        ));
    }
}
