//! `jetrelay scaler --config FILE [--listen 0.0.0.0:9095]`: one small server per
//! namespace for KEDA's `metrics-api` trigger, scale to zero included. It reads the
//! sidecars' config, connects with its `[nats]`, and reads each source's lag from the
//! JetStream API when asked (`crate::serve::scaler` serves it): a durable's consumer
//! info, a static group's members' (`crate::group::lag`), an elastic group's
//! work-queue stream; a consumer that does not exist yet counts the stream's
//! messages under its filters. A source's read is kept for [`FRESH`], one read at a
//! time per source, so that many pollers cost NATS one request per source a second.
//! Service sources have no lag and are left out.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::net::TcpListener;
use tokio::sync::Mutex;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, ConfigError};
use crate::daemon::settings::Settings;
use crate::group::model::Flavour;
use crate::nats::{Nats, NatsError};
use crate::ops::lag::{Consumer, Known, Lags, SourceLag};
use crate::ops::metrics::{MetricsError, ScalerMetrics};
use crate::source::settings::Binding;

/// How long a source's read answers again without asking NATS.
pub const FRESH: Duration = Duration::from_secs(1);

/// `--listen`'s default.
pub const LISTEN: &str = "0.0.0.0:9095";

/// Why the scaler cannot run.
#[derive(Debug, thiserror::Error)]
pub enum ScalerError {
    /// The config is wrong (exit 64).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The NATS settings cannot be used (unreadable credentials, a bad address).
    #[error(transparent)]
    Nats(#[from] NatsError),
    /// The metrics cannot be registered.
    #[error(transparent)]
    Metrics(#[from] MetricsError),
    /// The listener failed.
    #[error("cannot serve on {listen}")]
    Serve {
        /// The address.
        listen: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl ScalerError {
    /// Whether the user's config or command line is at fault (exit 64).
    pub fn is_usage(&self) -> bool {
        match self {
            ScalerError::Config(_) | ScalerError::Serve { .. } => true,
            ScalerError::Nats(e) => e.is_config(),
            ScalerError::Metrics(_) => false,
        }
    }
}

/// Where one source's lag is read.
#[derive(Debug, Clone, PartialEq, Eq)]
enum LagTarget {
    /// A durable consumer, and its filters (for when it does not exist yet).
    Durable {
        stream: String,
        consumer: String,
        filters: Vec<String>,
    },
    /// A group on an origin stream.
    Group {
        flavour: Flavour,
        stream: String,
        group: String,
    },
}

/// A source's last read and when it was made.
type Kept = Arc<Mutex<Option<(Instant, Result<SourceLag, String>)>>>;

/// The sources of a config, read on demand.
#[derive(Debug)]
pub struct Scaler {
    nats: Nats,
    names: Vec<String>,
    targets: HashMap<String, (LagTarget, Kept)>,
    services: Vec<String>,
}

impl Scaler {
    /// The sources of `settings`, read over `nats`.
    pub fn new(nats: Nats, settings: &Settings) -> Scaler {
        let (mut names, mut targets, mut services) = (Vec::new(), HashMap::new(), Vec::new());
        for s in &settings.sources {
            let Some(stream) = s.stream() else {
                services.push(s.name.clone());
                continue;
            };
            let target = match &stream.binding {
                Binding::Durable(r) => LagTarget::Durable {
                    stream: r.stream.clone(),
                    consumer: r.consumer.name.clone(),
                    filters: r.consumer.filter_subjects.clone(),
                },
                Binding::Group(m) => LagTarget::Group {
                    flavour: m.flavour,
                    stream: m.stream.clone(),
                    group: m.group.clone(),
                },
            };
            names.push(s.name.clone());
            targets.insert(s.name.clone(), (target, Kept::default()));
        }
        Scaler {
            nats,
            names,
            targets,
            services,
        }
    }

    /// One source's lag, read now.
    async fn read_now(&self, target: &LagTarget) -> Result<SourceLag, String> {
        let chain = |e: &(dyn std::error::Error + 'static)| crate::ops::telemetry::chain(e);
        match target {
            LagTarget::Durable {
                stream,
                consumer,
                filters,
            } => {
                let read = match self.nats.consumer_lag(stream, consumer).await {
                    Ok(Some((pending, ack_pending))) => Consumer::Read {
                        pending,
                        ack_pending,
                    },
                    Ok(None) => Consumer::Missing {
                        under_filters: self
                            .nats
                            .messages_under(stream, filters)
                            .await
                            .map_err(|e| chain(&e))?,
                    },
                    Err(e) => return Err(chain(&e)),
                };
                Ok(SourceLag::of(&[read]))
            }
            LagTarget::Group {
                flavour,
                stream,
                group,
            } => crate::group::lag::lag(&self.nats, *flavour, stream, group)
                .await
                .map_err(|e| chain(&e)),
        }
    }
}

impl Lags for Scaler {
    fn names(&self) -> &[String] {
        &self.names
    }

    fn known(&self, name: &str) -> Known {
        if self.targets.contains_key(name) {
            Known::Lagging
        } else if self.services.iter().any(|s| s == name) {
            Known::Service
        } else {
            Known::Unknown
        }
    }

    fn read<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<SourceLag, String>> {
        Box::pin(async move {
            let Some((target, kept)) = self.targets.get(name) else {
                return Err(format!("no source {name}"));
            };
            // One read at a time per source: those that wait take its answer.
            let mut kept = kept.lock().await;
            if let Some((at, read)) = kept.as_ref()
                && at.elapsed() < FRESH
            {
                return read.clone();
            }
            let read = self.read_now(target).await;
            *kept = Some((Instant::now(), read.clone()));
            read
        })
    }

    fn not_ready(&self) -> Option<String> {
        self.nats.state().borrow().reason()
    }
}

/// Serves the lag of `config`'s sources on `listener` until `stop` is cancelled.
/// NATS is connected in the background: not ready until it is.
///
/// # Errors
/// [`ScalerError`].
pub async fn run(
    config: &Config,
    listener: TcpListener,
    stop: CancellationToken,
) -> Result<(), ScalerError> {
    let settings = Settings::from_config(config)?;
    let nats = Nats::connect(&settings.nats, true).await?;
    let scaler = Scaler::new(nats, &settings);
    let listen = listener
        .local_addr()
        .map_or_else(|_| "?".to_string(), |a| a.to_string());
    tracing::info!(
        listen = %listen,
        sources = scaler.names.len(),
        services_left_out = scaler.services.len(),
        "jetrelay scaler serving /v1/lag"
    );
    let shown = crate::serve::scaler::ScalerShown {
        lags: Arc::new(scaler),
        metrics: ScalerMetrics::new()?,
    };
    let (_, connections) = crate::serve::connection_caps(crate::serve::open_files_limit(), 0);
    crate::serve::scaler::serve(listener, shown, connections, stop)
        .await
        .map_err(|source| ScalerError::Serve { listen, source })
}
