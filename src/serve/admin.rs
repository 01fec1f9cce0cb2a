//! The admin endpoints on `admin.listen`: `/healthz`, `/ready`, `/metrics`, and
//! `/config` (the running config as dotted keys, secrets fingerprinted: what
//! `jetrelay check --diff-running` compares a file with). Served until the very end
//! of shutdown so that probes and scrapes see the drain.

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::ops::metrics::Metrics;
use crate::ops::readiness::Readiness;

/// What the admin endpoints show.
#[derive(Debug, Clone)]
pub struct Shown {
    /// `/ready`.
    pub readiness: Readiness,
    /// `/metrics`.
    pub metrics: Metrics,
    /// `/config`: the running config as JSON, as the last reload left it.
    pub config: watch::Receiver<String>,
}

fn router(shown: Shown) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics_text))
        .route("/config", get(config_json))
        .with_state(shown)
}

async fn config_json(State(s): State<Shown>) -> impl IntoResponse {
    let text = s.config.borrow().clone();
    ([(header::CONTENT_TYPE, "application/json")], text)
}

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
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        s.metrics.render(),
    )
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
    let limits = super::ServerBounds {
        connections,
        request: std::time::Duration::from_secs(10),
    };
    super::serve(listener, router(shown), limits, stop).await
}
