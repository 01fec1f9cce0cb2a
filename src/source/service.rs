//! A service source's life (`kind = "service"`): answer discovery as its own service
//! (`$SRV.PING|INFO|STATS.<service>`), and run the service runner over the endpoints'
//! queue subscriptions, its settings following the source's reloads. No stream, no
//! consumer, no dead letters.

use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::Runner;
use super::error::SourceError;
use crate::dispatch::Live;
use crate::http::forward::Forwarder;
use crate::nats::Nats;
use crate::ops::announce::{Instance, ServiceAbout, ServiceStats, service_answer};
use crate::ops::readiness::Consumes;
use crate::service::{Served, Service, ServiceSpec};

impl Runner {
    /// What a service source shows discovery of `jetrelay` it "consumes": its
    /// service's name, no stream.
    pub(super) fn serves(spec: &ServiceSpec) -> Consumes {
        Consumes {
            stream: String::new(),
            consumer: spec.name.clone(),
            group: None,
        }
    }

    /// Runs a service source until `shutdown`, then drains it.
    ///
    /// # Errors
    /// [`SourceError`] when its subscriptions cannot be made.
    pub(super) async fn serve(
        &self,
        nats: &Nats,
        spec: &ServiceSpec,
        shutdown: &CancellationToken,
    ) -> Result<(), SourceError> {
        let stats = ServiceStats::new(spec.endpoints.len());
        let about = ServiceAbout {
            instance: Instance {
                id: nats.instance_id(),
                name: spec.connection.clone(),
                version: env!("CARGO_PKG_VERSION").to_string(),
                started: time::OffsetDateTime::now_utc(),
            },
            service: spec.name.clone(),
            version: spec.version.clone(),
            source: self.settings.name.clone(),
            queue_group: spec.queue_group.clone(),
            endpoints: spec
                .endpoints
                .iter()
                .map(|e| (e.name.clone(), e.subject.clone()))
                .collect(),
        };
        let id = about.instance.id.clone();
        let counts = stats.clone();
        let stop = CancellationToken::new();
        let _stop = stop.clone().drop_guard();
        let announcing = nats
            .announce_as(
                &spec.name,
                &id,
                move |ask| {
                    serde_json::to_vec(&service_answer(ask, &about, &counts.snapshot()))
                        .unwrap_or_default()
                },
                stop,
            )
            .await?;
        let (tx, settings) = watch::channel(Arc::new(served(&self.live.borrow())));
        let mut live = self.live.clone();
        let follow = tokio::spawn(async move {
            while live.changed().await.is_ok() {
                let now = served(&live.borrow_and_update());
                if tx.send(Arc::new(now)).is_err() {
                    return;
                }
            }
        });
        let service = Arc::new(Service {
            spec: spec.clone(),
            live: settings,
            metrics: self.metrics.clone(),
            readiness: self.readiness.clone(),
            tracer: self.tracer.clone(),
            budget: self.budget.clone(),
            deadline: self.deadline.clone(),
            stats,
        });
        let subjects = spec.endpoints.iter().map(|e| e.subject.clone()).collect();
        let requests = nats.service_requests(subjects, &spec.queue_group);
        let ended = service.run(requests, shutdown.clone()).await;
        follow.abort();
        announcing.abort();
        ended.map_err(SourceError::Service)
    }
}

/// What the service runner takes of the source's live settings: each endpoint's
/// forwarder (the routes' targets, one per endpoint), the pace, the health probe, the
/// policy's unreachable backoff.
fn served(live: &Live<Forwarder>) -> Served<Forwarder> {
    Served {
        endpoints: live
            .route_forwarders
            .iter()
            .map(|f| f.clone().unwrap_or_else(|| live.forwarder.clone()))
            .collect(),
        pace: live.pace,
        app_healthy: live.app_healthy.clone(),
        policy: live.policy.clone(),
    }
}
