//! The admin endpoints on `admin.listen`: `/healthz`, `/ready`, `/metrics`,
//! `/livez` and `/readyz` (Kubernetes' names for the first two, answering the same),
//! `/config` (the running config as dotted keys, secrets fingerprinted: what
//! `jetrelay check --diff-running` compares a file with), and `/drain` (every source
//! stops and settles or releases what it holds; only for the bearer of
//! `admin.token_file`, or from loopback without one). Served until the very end of
//! shutdown so that probes and scrapes see the drain.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Extension, RawQuery, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::Peer;
use crate::ops::drain::{Caller, Drain, MAX_WAIT, may_drain, parse_wait};
use crate::ops::metrics::Metrics;
use crate::ops::readiness::Readiness;
use crate::secret::SecretFile;

/// What the admin endpoints show.
#[derive(Debug, Clone)]
pub struct Shown {
    /// `/ready`.
    pub readiness: Readiness,
    /// `/metrics`.
    pub metrics: Metrics,
    /// `/config`: the running config as JSON, as the last reload left it.
    pub config: watch::Receiver<String>,
    /// `/drain`: asks the daemon, waits for its outcome.
    pub drain: Drain,
    /// `admin.token_file`: the bearer token `/drain` requires, when one is set.
    pub token: Option<Arc<SecretFile>>,
    /// `/drain`'s wait when the request gives none (`delivery.shutdown_grace_ms`).
    pub default_wait: Duration,
}

/// How long a request other than `/drain` may take.
const REQUEST: Duration = Duration::from_secs(10);

fn router(shown: Shown) -> Router {
    let quick = Router::new()
        .route("/healthz", get(live))
        .route("/livez", get(live))
        .route("/ready", get(ready))
        .route("/readyz", get(ready))
        .route("/metrics", get(metrics_text))
        .route("/config", get(config_json))
        .layer(axum::middleware::from_fn(|req: Request, next: Next| {
            super::within(REQUEST, req, next)
        }));
    quick
        .route("/drain", get(drain).post(drain))
        .with_state(shown)
}

/// `/drain[?wait=25s]`: 403 unless [`may_drain`]; 400 for a `wait` that does not
/// parse; else asks the drain (or joins the one asked before) and answers its
/// outcome: 200 when drained, 503 when its wait ran out with work left.
async fn drain(
    State(s): State<Shown>,
    Extension(peer): Extension<Option<Peer>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let token = s.token.as_ref().map(|t| t.value());
    // A value that is not text is kept as one that matches nothing.
    let get =
        |name: header::HeaderName| headers.get(name).map(|v| v.to_str().unwrap_or("\u{fffd}"));
    let caller = Caller {
        authorization: get(header::AUTHORIZATION),
        loopback: peer.is_some_and(|Peer(addr)| addr.ip().is_loopback()),
        browser: headers.contains_key(header::ORIGIN)
            || get(header::HeaderName::from_static("sec-fetch-site"))
                .is_some_and(|s| s != "same-origin" && s != "none"),
        local_host: super::endpoint::local_host(get(header::HOST).unwrap_or("")),
    };
    if !may_drain(token.as_deref(), caller) {
        let why = if token.is_some() {
            "/drain requires Authorization: Bearer <token> (admin.token_file)\n"
        } else {
            "/drain is served to loopback only, never to a web page (set admin.token_file to drain from elsewhere)\n"
        };
        return (StatusCode::FORBIDDEN, why).into_response();
    }
    let wait = match wait_of(query.as_deref(), s.default_wait) {
        Ok(w) => w,
        Err(why) => return (StatusCode::BAD_REQUEST, format!("{why}\n")).into_response(),
    };
    if s.drain.ask(wait) {
        tracing::info!(
            wait_ms = wait.as_millis(),
            "drain requested: every source stops pulling"
        );
    }
    let outcome = s.drain.outcome().await;
    let code = if outcome.drained {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, axum::Json(outcome)).into_response()
}

/// The query's `wait` (or `default`); any other parameter is refused.
fn wait_of(query: Option<&str>, default: Duration) -> Result<Duration, String> {
    let mut wait = default.min(MAX_WAIT);
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("wait", value)) => wait = parse_wait(value)?,
            _ => {
                return Err(format!(
                    "{:?}: /drain takes only wait=<duration> (as in ?wait=25s)",
                    crate::printable::printable(pair)
                ));
            }
        }
    }
    Ok(wait)
}

async fn config_json(State(s): State<Shown>) -> impl IntoResponse {
    let text = s.config.borrow().clone();
    ([(header::CONTENT_TYPE, "application/json")], text)
}

/// `/healthz` and `/livez`: 200 while the process runs, whatever NATS and the app do.
async fn live() -> &'static str {
    "ok\n"
}

/// `/ready` and `/readyz`: 200 when every source is ready, else 503; the JSON says why.
async fn ready(State(s): State<Shown>) -> impl IntoResponse {
    let status = s.readiness.status();
    let code = if status.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, axum::Json(status))
}

async fn metrics_text(State(s): State<Shown>) -> impl IntoResponse {
    super::exposition(s.metrics.render())
}

/// Serves until `stop` is cancelled, with at most `connections` open at once
/// (probes and scrapes: a few at a time, each quick).
///
/// # Errors
/// The server's I/O error.
pub async fn serve(
    listener: TcpListener,
    shown: Shown,
    connections: usize,
    stop: CancellationToken,
) -> std::io::Result<()> {
    // `/drain` waits up to its `wait`; the other endpoints are bounded by REQUEST.
    let limits = super::ServerBounds {
        connections,
        request: MAX_WAIT + REQUEST,
    };
    super::serve(listener, router(shown), limits, stop).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_of_a_query_table() {
        let grace = Duration::from_secs(30);
        assert_eq!(wait_of(None, grace), Ok(grace));
        assert_eq!(wait_of(Some(""), grace), Ok(grace));
        assert_eq!(
            wait_of(Some("wait=20s"), grace),
            Ok(Duration::from_secs(20))
        );
        assert_eq!(
            wait_of(Some("wait=500ms"), grace),
            Ok(Duration::from_millis(500))
        );
        assert!(
            wait_of(Some("wait=soon"), grace)
                .unwrap_err()
                .contains("wait=")
        );
        assert!(wait_of(Some("wait="), grace).unwrap_err().contains("empty"));
        assert!(
            wait_of(Some("force=1"), grace)
                .unwrap_err()
                .contains("only wait")
        );
    }
}
