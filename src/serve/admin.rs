//! The admin endpoints on `admin.listen`: `/healthz`, `/ready`, `/metrics`. Served
//! until the very end of shutdown so that probes and scrapes see the drain.

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::ops::metrics::Metrics;
use crate::ops::readiness::Readiness;

#[derive(Clone)]
struct AdminState {
    readiness: Readiness,
    metrics: Metrics,
}

fn router(readiness: Readiness, metrics: Metrics) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics_text))
        .with_state(AdminState { readiness, metrics })
}

async fn ready(State(s): State<AdminState>) -> impl IntoResponse {
    let status = s.readiness.status();
    let code = if status.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, axum::Json(status))
}

async fn metrics_text(State(s): State<AdminState>) -> impl IntoResponse {
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
    readiness: Readiness,
    metrics: Metrics,
    connections: usize,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let limits = super::ServerBounds {
        connections,
        request: std::time::Duration::from_secs(10),
    };
    super::serve(listener, router(readiness, metrics), limits, stop).await
}
