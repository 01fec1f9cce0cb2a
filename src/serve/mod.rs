//! The HTTP servers jetrelay offers, the only module that names `axum` types: the
//! admin endpoints (`admin`: `/healthz`, `/ready`, `/metrics`) and the local publish
//! endpoint (`publish`: the app publishes without a NATS client).

pub mod admin;
pub mod publish;

use axum::Router;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Serves `router` on `listener` until `stop` is cancelled (requests in progress
/// finish).
async fn serve(
    listener: TcpListener,
    router: Router,
    stop: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(stop.cancelled_owned())
        .await
}
