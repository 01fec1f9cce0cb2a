//! jetrelay: a sidecar that consumes NATS JetStream and delivers each message to a
//! local app over HTTP, mapping the app's answer to ack, delayed nak, term or
//! in-progress. See `ARCHITECTURE.md` for the code map.

pub mod admin;
pub mod app;
pub mod app_health;
pub mod capacity;
pub mod check;
pub mod config;
pub mod delivery;
pub mod dispatch;
pub mod dlq;
pub mod forward;
pub mod group;
pub mod group_admin;
pub mod group_cli;
pub mod headers;
pub mod health;
pub mod lanes;
pub mod metrics;
pub mod nats;
pub mod pcg;
pub mod policy;
pub mod shutdown;
pub mod source;
pub mod subject;
pub mod telemetry;
pub mod timers;
pub mod topology;
