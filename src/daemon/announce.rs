//! The process answering NATS service discovery (`admin.announce`): its instance
//! (a NUID, the connection's name, the version, when it started) and, per request,
//! every source's readiness and counts as they are now (sources a reload added or
//! removed included).

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::nats::{Nats, NatsError};
use crate::ops::announce::{Announced, Instance, answer};
use crate::ops::metrics::Metrics;
use crate::ops::readiness::Readiness;

/// Starts answering on `nats` until `stop`.
///
/// # Errors
/// [`NatsError`] when the subscriptions cannot be made.
pub(super) async fn start(
    nats: &Nats,
    connection_name: &str,
    readiness: Readiness,
    metrics: Metrics,
    stop: CancellationToken,
) -> Result<JoinHandle<()>, NatsError> {
    let me = Instance {
        id: nats.instance_id(),
        name: connection_name.to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        started: time::OffsetDateTime::now_utc(),
    };
    let id = me.id.clone();
    nats.announce(
        &id,
        move |ask| {
            let status = readiness.status();
            let mut counts = metrics.source_counts();
            let views: Vec<Announced> = status
                .sources
                .into_iter()
                .map(|(name, status)| Announced {
                    consumes: status.facts.consumes.clone().unwrap_or_default(),
                    counts: counts.remove(&name).unwrap_or_default(),
                    name,
                    status,
                })
                .collect();
            serde_json::to_vec(&answer(ask, &me, &views)).unwrap_or_default()
        },
        stop,
    )
    .await
}
