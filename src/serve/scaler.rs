//! `jetrelay scaler`'s endpoints, for KEDA's `metrics-api` trigger: `/v1/lag` (every
//! source's lag and their sum: 200 only when every source was read, else 503 with
//! why, so that KEDA keeps the replicas it has rather than scale on a partial sum),
//! `/v1/lag?source=NAME` (one source: 404 for a name the config does not have or a
//! service source, which has no lag), `/metrics` (`jetrelay_scaler_lag{source}`, as
//! each read left it), `/livez` and `/readyz` (ready while connected to NATS; while
//! not, `/v1/lag` is 503 at once, without waiting for a request to time out).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::StreamExt as _;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::ops::lag::{Known, Lags, report};
use crate::ops::metrics::ScalerMetrics;

/// Sources read at once for `/v1/lag`.
const READS_AT_ONCE: usize = 32;

/// How long a request may take (a source's read is bounded by the NATS request
/// timeout; many sources are read some at once).
const REQUEST: Duration = Duration::from_secs(30);

/// What the endpoints show.
#[derive(Debug, Clone)]
pub struct ScalerShown {
    /// The sources' lag.
    pub lags: Arc<dyn Lags>,
    /// `/metrics`.
    pub metrics: ScalerMetrics,
}

/// The query's `source` (none: every source); any other parameter is refused.
fn source_of(query: Option<&str>) -> Result<Option<&str>, String> {
    let mut source = None;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("source", name)) if !name.is_empty() => source = Some(name),
            _ => {
                return Err(format!(
                    "{:?}: /v1/lag takes only source=<name>",
                    crate::printable::printable(pair)
                ));
            }
        }
    }
    Ok(source)
}

fn json(code: StatusCode, value: &impl serde::Serialize) -> Response {
    (code, axum::Json(value)).into_response()
}

fn error(code: StatusCode, why: String) -> Response {
    json(code, &serde_json::json!({ "error": why }))
}

/// One source's read, the gauge set from it.
async fn read_one(s: &ScalerShown, name: &str) -> Result<crate::ops::lag::SourceLag, String> {
    let read = s.lags.read(name).await;
    s.metrics.lag(name, read.as_ref().ok().map(|l| l.lag));
    read
}

async fn lag(State(s): State<ScalerShown>, RawQuery(query): RawQuery) -> Response {
    let source = match source_of(query.as_deref()) {
        Ok(source) => source,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    // Not connected: no read could answer before KEDA's own timeout.
    let not_ready = || {
        s.lags
            .not_ready()
            .map(|why| error(StatusCode::SERVICE_UNAVAILABLE, why))
    };
    if let Some(name) = source {
        return match s.lags.known(name) {
            Known::Lagging if let Some(answer) = not_ready() => answer,
            Known::Lagging => match read_one(&s, name).await {
                Ok(l) => json(StatusCode::OK, &l),
                Err(why) => error(StatusCode::SERVICE_UNAVAILABLE, format!("{name}: {why}")),
            },
            Known::Service => error(
                StatusCode::NOT_FOUND,
                format!("source {name:?} is a service: it consumes no stream and has no lag"),
            ),
            Known::Unknown => error(
                StatusCode::NOT_FOUND,
                format!(
                    "the config has no source {:?} (it has {})",
                    crate::printable::printable(name),
                    crate::printable::list(s.lags.names(), 16)
                ),
            ),
        };
    }
    if let Some(answer) = not_ready() {
        return answer;
    }
    let names = s.lags.names().to_vec();
    let read: BTreeMap<String, _> = futures::stream::iter(names)
        .map(|name| {
            let s = s.clone();
            async move {
                let read = read_one(&s, &name).await;
                (name, read)
            }
        })
        .buffer_unordered(READS_AT_ONCE)
        .collect()
        .await;
    match report(read) {
        Ok(r) => json(StatusCode::OK, &r),
        Err(unread) => json(StatusCode::SERVICE_UNAVAILABLE, &unread),
    }
}

async fn ready(State(s): State<ScalerShown>) -> Response {
    match s.lags.not_ready() {
        None => (StatusCode::OK, "ok\n").into_response(),
        Some(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response(),
    }
}

async fn metrics_text(State(s): State<ScalerShown>) -> impl IntoResponse {
    super::exposition(s.metrics.render())
}

fn router(shown: ScalerShown) -> Router {
    Router::new()
        .route("/v1/lag", get(lag))
        .route("/metrics", get(metrics_text))
        .route("/livez", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .with_state(shown)
}

/// Serves until `stop` is cancelled, with at most `connections` open at once.
///
/// # Errors
/// The server's I/O error.
pub async fn serve(
    listener: TcpListener,
    shown: ScalerShown,
    connections: usize,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let limits = super::ServerBounds {
        connections,
        request: REQUEST,
    };
    super::serve(listener, router(shown), limits, stop).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_source_of_a_query_table() {
        assert_eq!(source_of(None), Ok(None));
        assert_eq!(source_of(Some("")), Ok(None));
        assert_eq!(source_of(Some("source=orders")), Ok(Some("orders")));
        for refused in ["source=", "src=orders", "source", "source=a&x=1"] {
            assert!(source_of(Some(refused)).is_err(), "{refused}");
        }
    }
}
