//! A service source's life (`kind = "service"`): answer discovery as its own service
//! (`$SRV.PING|INFO|STATS.<service>`), and run the service runner over the endpoints'
//! queue subscriptions, its settings following the source's reloads. No stream, no
//! consumer, no dead letters.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::Runner;
use super::error::SourceError;
use super::live::{SourceLive, follow};
use super::settings::ServiceSettings;
use crate::nats::Nats;
use crate::ops::announce::{Instance, ServiceAbout, ServiceStats, service_answer};
use crate::ops::readiness::Consumes;
use crate::service::{Service, ServiceSpec};

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
        service: &ServiceSettings,
        shutdown: &CancellationToken,
    ) -> Result<(), SourceError> {
        let spec = &service.spec;
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
        let Some((settings, following)) = follow(&self.live, SourceLive::service) else {
            return Err(SourceError::Kind);
        };
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
        drop(following);
        announcing.abort();
        ended.map_err(SourceError::Service)
    }
}
