//! Logging setup: JSON lines (or text) through `tracing-subscriber`, filtered by
//! `log.level`. Nothing else installs a subscriber.

use tracing_subscriber::EnvFilter;

use crate::config::{LogConfig, LogFormat};

/// Whether `level` is a valid filter (`info`, `jetrelay=debug,async_nats=warn`, ...).
pub fn is_valid_filter(level: &str) -> bool {
    !level.trim().is_empty() && EnvFilter::try_new(level).is_ok()
}

/// Installs the global subscriber; later calls are ignored (tests call it often).
pub fn init(cfg: &LogConfig) {
    let filter = EnvFilter::try_new(&cfg.level).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let result = match cfg.format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
        LogFormat::Text => builder.try_init(),
    };
    // An already-installed subscriber (tests) is fine.
    drop(result);
}
