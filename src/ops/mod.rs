//! Operating the daemon: the admin endpoints (`endpoints`, the only module that names
//! `axum` types), readiness (`readiness`), the Prometheus collectors (`metrics`) and
//! logging (`telemetry`).

pub mod endpoints;
pub mod metrics;
pub mod readiness;
pub mod telemetry;
