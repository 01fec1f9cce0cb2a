//! What ends the daemon: a listener it cannot bind, a client or secret it cannot
//! build or read, the config, NATS, or a source that failed for good (named); and
//! which of them are the user's configuration (exit 64) rather than a runtime
//! failure (exit 1).

use std::net::SocketAddr;

use crate::config::ConfigError;
use crate::daemon::reload::StartError;
use crate::http::client::ClientError;
use crate::nats::NatsError;
use crate::source::error::SourceError;

/// A failure that ends the daemon.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The admin listener could not be bound.
    #[error("cannot listen on admin.listen {addr}")]
    AdminBind {
        /// The address.
        addr: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The publish endpoint's listener could not be bound.
    #[error("cannot listen on publish.listen {addr}")]
    PublishBind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Metrics registration failed.
    #[error("cannot register metrics")]
    Metrics(#[from] crate::ops::metrics::MetricsError),
    /// The app's HTTP client could not be built.
    #[error(transparent)]
    App(#[from] ClientError),
    /// NATS failed.
    #[error(transparent)]
    Nats(#[from] NatsError),
    /// A source failed for good (the process ends with the first, once none runs).
    #[error("source {name}")]
    Source {
        /// Its name.
        name: String,
        /// Why.
        #[source]
        error: SourceError,
    },
    /// A source could not be started.
    #[error(transparent)]
    Start(#[from] StartError),
    /// The config does not parse into settings.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The signal handlers could not be installed.
    #[error("cannot listen for signals")]
    Signals(#[source] std::io::Error),
    /// A secret file cannot be used.
    #[error(transparent)]
    Secret(#[from] crate::secret::SecretError),
    /// A source's task panicked.
    #[error("a source's task failed")]
    SourceTask(#[source] tokio::task::JoinError),
}

impl DaemonError {
    /// Whether the error is the user's configuration (exit 64) rather than a runtime
    /// failure (exit 1).
    pub fn is_config(&self) -> bool {
        match self {
            DaemonError::Nats(e)
            | DaemonError::Source {
                error: SourceError::Nats(e),
                ..
            } => e.is_config(),
            DaemonError::Start(StartError::App(e)) => is_config_client(e),
            DaemonError::App(e) => is_config_client(e),
            other => matches!(other, DaemonError::Config(_) | DaemonError::Secret(_)),
        }
    }
}

/// Whether the app's client could not be built because of the config's files or
/// values.
fn is_config_client(e: &ClientError) -> bool {
    matches!(
        e,
        ClientError::SecretFile(_)
            | ClientError::Signing { .. }
            | ClientError::Header(_)
            | ClientError::Proxy(..)
            | ClientError::TlsCa { .. }
            | ClientError::TlsClientCert { .. }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_error_names_the_source_and_keeps_its_kind() {
        let e = DaemonError::Source {
            name: "orders".into(),
            error: SourceError::Nats(NatsError::Closed),
        };
        assert_eq!(
            crate::ops::telemetry::chain(&e),
            format!("source orders: {}", NatsError::Closed)
        );
        assert!(!e.is_config());
    }
}
