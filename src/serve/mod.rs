//! The HTTP servers jetrelay offers, the only module that names `axum` and `hyper`
//! types: the admin endpoints (`admin`: `/healthz` and `/livez`, `/ready` and `/readyz`,
//! `/metrics`), the local publish endpoint (`endpoint`: the app publishes without a
//! NATS client), and `jetrelay scaler`'s (`scaler`: each source's lag, for KEDA).
//!
//! Both run on one hardened HTTP/1.1 loop: a request's headers must arrive within
//! [`HEADER_TIMEOUT`] and the whole request be handled within a bound (a half-sent
//! request cannot hold a connection); the number of open connections is bounded, by
//! the process's open-files limit too, and when it is reached a new connection pushes
//! out the oldest one that is not handling a request (so a flood of slow connections
//! never keeps a probe out); a stop lets requests in progress finish for at most
//! [`DRAIN`].

pub mod admin;
pub mod endpoint;
pub mod scaler;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

/// How long a client may take to send a request's headers.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// How long requests in progress may run after a stop.
pub const DRAIN: Duration = Duration::from_secs(2);

/// What one server allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerBounds {
    /// Open connections at most.
    pub connections: usize,
    /// How long one request (its body included) may take to be handled.
    pub request: Duration,
}

/// The address a request's connection came from (a request extension).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer(pub std::net::SocketAddr);

/// One open connection, oldest first in [`Open`].
struct Conn {
    task: tokio::task::Id,
    abort: tokio::task::AbortHandle,
    /// Set while a request of it is being handled (its headers came whole).
    busy: Arc<AtomicBool>,
}

/// The open connections, in the order they were accepted.
#[derive(Default)]
struct Open(std::collections::VecDeque<Conn>);

impl Open {
    /// Frees room for one more: the oldest connection that is not handling a request
    /// (one trickling its headers, or idle between requests) is closed. A flood of
    /// slow connections so never keeps a quick request (a probe) out: each new one
    /// pushes out the oldest of the flood. `false` when every connection is busy.
    fn evict_one(&mut self) -> bool {
        match self.0.iter().position(|c| !c.busy.load(Ordering::Acquire)) {
            Some(i) => {
                if let Some(c) = self.0.remove(i) {
                    c.abort.abort();
                }
                true
            }
            None => false,
        }
    }

    fn forget(&mut self, task: tokio::task::Id) {
        self.0.retain(|c| c.task != task);
    }
}

/// Says that a connection cannot be accepted (out of file descriptors and the like)
/// at most once in [`ACCEPT_WARN_EVERY`], with how many times it happened since.
#[derive(Default)]
struct AcceptWarnings {
    last: Option<Instant>,
    since: u64,
}

/// How often "cannot accept a connection" is logged at most.
const ACCEPT_WARN_EVERY: Duration = Duration::from_secs(10);

impl AcceptWarnings {
    /// Records a failed accept; logs it when none was logged for a while (returns
    /// whether it did).
    fn failed(&mut self, e: &std::io::Error) -> bool {
        self.since += 1;
        if self.last.is_some_and(|t| t.elapsed() < ACCEPT_WARN_EVERY) {
            return false;
        }
        tracing::warn!(error = %e, times = self.since, "cannot accept a connection");
        self.last = Some(Instant::now());
        self.since = 0;
        true
    }
}

/// Serves `router` on `listener` until `stop` is cancelled.
async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ServerBounds,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let bounded = router.layer(axum::middleware::from_fn(
        move |req: Request, next: Next| within(limits.request, req, next),
    ));
    let mut connections = JoinSet::new();
    let mut open = Open::default();
    let mut warnings = AcceptWarnings::default();
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        // Reap finished connections as we go, so the set stays small.
        while let Some(done) = connections.try_join_next_with_id() {
            match done {
                Ok((task, ())) => open.forget(task),
                Err(e) => open.forget(e.id()),
            }
        }
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors and the like: pause rather than spin.
                warnings.failed(&e);
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if open.0.len() >= limits.connections && !open.evict_one() {
            tracing::debug!(
                max = limits.connections,
                "too many open connections, all handling requests: one closed"
            );
            drop(stream);
            continue;
        }
        // Busy from a request's whole headers to its response: a connection that is
        // not may be pushed out by a newer one.
        let busy = Arc::new(AtomicBool::new(false));
        let (starts, ends) = (Arc::clone(&busy), Arc::clone(&busy));
        let service = TowerToHyperService::new(
            bounded
                .clone()
                .map_request(move |mut r: hyper::Request<hyper::body::Incoming>| {
                    starts.store(true, Ordering::Release);
                    r.extensions_mut().insert(Some(Peer(peer)));
                    r.map(axum::body::Body::new)
                })
                .map_response(move |r| {
                    ends.store(false, Ordering::Release);
                    r
                })
                .map_err(|e: Infallible| match e {}),
        );
        let stop = stop.clone();
        let abort = connections.spawn(async move {
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
        });
        open.0.push_back(Conn {
            task: abort.id(),
            abort,
            busy,
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

/// The soft limit on open files of this process (`None` where it cannot be read).
pub fn open_files_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// How many connections the admin and the publish endpoints may hold: what they want
/// (64 and 256), but within the process's open-files limit, after what the rest
/// needs (the app's `max_in_flight` connections, NATS, files: 64 more); a quarter of
/// the rest for the admin port, a half for the endpoint, at least 4 each.
pub fn connection_caps(open_files: Option<u64>, max_in_flight: usize) -> (usize, usize) {
    const ADMIN: usize = 64;
    const PUBLISH: usize = 256;
    let Some(limit) = open_files else {
        return (ADMIN, PUBLISH);
    };
    let rest = usize::try_from(limit)
        .unwrap_or(usize::MAX)
        .saturating_sub(max_in_flight.saturating_add(64));
    ((rest / 4).clamp(4, ADMIN), (rest / 2).clamp(4, PUBLISH))
}

/// A Prometheus text exposition as the answer to a scrape.
fn exposition(text: String) -> impl IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
}

/// Runs the request within `limit`; 408 when it takes longer (a body sent too slowly
/// included: it is read inside the handler).
async fn within(limit: Duration, req: Request, next: Next) -> Response {
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(resp) => resp,
        Err(_) => (StatusCode::REQUEST_TIMEOUT, "request took too long\n").into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_caps_follow_the_open_files_limit() {
        // (open files, max_in_flight, admin, publish)
        let cases = [
            (None, 32, 64, 256),
            (Some(1_048_576), 32, 64, 256),
            (Some(1024), 32, 64, 256),
            (Some(1024), 512, 64, 224),
            (Some(128), 32, 8, 16),
            (Some(64), 32, 4, 4),
            (Some(16), 32, 4, 4),
        ];
        for (files, in_flight, admin, publish) in cases {
            assert_eq!(
                connection_caps(files, in_flight),
                (admin, publish),
                "{files:?} {in_flight}"
            );
        }
        assert!(open_files_limit().is_some_and(|n| n > 0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_accept_is_logged_once_in_ten_seconds() {
        let mut w = AcceptWarnings::default();
        let e = std::io::Error::from_raw_os_error(24); // EMFILE
        let logged: Vec<bool> = (0..200).map(|_| w.failed(&e)).collect();
        assert_eq!(logged.iter().filter(|l| **l).count(), 1);
        tokio::time::advance(ACCEPT_WARN_EVERY).await;
        assert!(w.failed(&e), "again after ten seconds");
    }
}
