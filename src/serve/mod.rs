//! The HTTP servers jetrelay offers, the only module that names `axum` and `hyper`
//! types: the admin endpoints (`admin`: `/healthz`, `/ready`, `/metrics`) and the local
//! publish endpoint (`publish`: the app publishes without a NATS client).
//!
//! Both run on one hardened HTTP/1.1 loop: a request's headers must arrive within
//! [`HEADER_TIMEOUT`] and the whole request be handled within a bound (a half-sent
//! request cannot hold a connection), the number of open connections is bounded (one
//! over the bound is closed at once), and a stop lets requests in progress finish for
//! at most [`DRAIN`].

pub mod admin;
pub mod publish;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

/// How long a client may take to send a request's headers.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// How long requests in progress may run after a stop.
pub const DRAIN: Duration = Duration::from_secs(2);

/// What one server allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Open connections at most.
    pub connections: usize,
    /// How long one request (its body included) may take to be handled.
    pub request: Duration,
}

/// Serves `router` on `listener` until `stop` is cancelled.
async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let bounded = router.layer(axum::middleware::from_fn(
        move |req: Request, next: Next| within(limits.request, req, next),
    ));
    let permits = Arc::new(Semaphore::new(limits.connections));
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        // Reap finished connections as we go, so the set stays small.
        while connections.try_join_next().is_some() {}
        let (stream, _) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors and the like: pause rather than spin.
                tracing::warn!(error = %e, "cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            tracing::debug!(
                max = limits.connections,
                "too many open connections: one closed"
            );
            drop(stream);
            continue;
        };
        let service = TowerToHyperService::new(
            bounded
                .clone()
                .map_request(|r: hyper::Request<hyper::body::Incoming>| {
                    r.map(axum::body::Body::new)
                })
                .map_err(|e: Infallible| match e {}),
        );
        let stop = stop.clone();
        connections.spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT);
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            let finished = tokio::select! {
                r = conn.as_mut() => r,
                () = stop.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = finished {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            drop(permit);
        });
    }
    // Requests in progress finish, for a moment at most.
    let drained = tokio::time::timeout(DRAIN, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        connections.abort_all();
    }
    Ok(())
}

/// Runs the request within `limit`; 408 when it takes longer (a body sent too slowly
/// included: it is read inside the handler).
async fn within(limit: Duration, req: Request, next: Next) -> Response {
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(resp) => resp,
        Err(_) => (StatusCode::REQUEST_TIMEOUT, "request took too long\n").into_response(),
    }
}
