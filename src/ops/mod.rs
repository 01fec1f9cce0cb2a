//! Operating the daemon: readiness (`readiness`), the drain before the app stops
//! (`drain`), what `jetrelay scaler` answers (`lag`), the Prometheus collectors
//! (`metrics`, the only module that names `prometheus` types) and logging
//! (`telemetry`). Their endpoints are served by `crate::serve`.

pub mod announce;
pub mod drain;
pub mod lag;
pub mod metrics;
pub mod otlp_metrics;
pub mod readiness;
pub mod telemetry;
pub mod traces;
