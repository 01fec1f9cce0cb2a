//! `[dlq]`, `[admin]` and `[log]`: where dead letters go, where the admin endpoints
//! listen, and how the daemon logs.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::{Config, Problems};
use crate::subject;

/// `[dlq]`
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct DlqConfig {
    /// The dead-letter subject; empty = no DLQ (a stream must capture it).
    pub subject: String,
}

/// `[admin]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// Where `/healthz`, `/ready` and `/metrics` listen.
    pub listen: String,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            listen: "0.0.0.0:9090".into(),
        }
    }
}

/// `log.format`
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    #[default]
    /// One JSON object per line.
    Json,
    /// Human-readable text.
    Text,
}

/// `[log]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// JSON lines or text.
    pub format: LogFormat,
    /// A level or a filter directive (`info`, `jetrelay=debug,async_nats=warn`).
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            format: LogFormat::Json,
            level: "info".into(),
        }
    }
}

impl Config {
    pub(super) fn check_ops(&self, p: &mut Problems) {
        if !self.dlq.subject.is_empty()
            && let Err(e) = subject::validate_publish_subject(&self.dlq.subject)
        {
            p.add("dlq.subject", e);
        }
        if self.admin.listen.parse::<SocketAddr>().is_err() {
            p.add(
                "admin.listen",
                "must be an address and port, like 0.0.0.0:9090",
            );
        }
        if !crate::ops::telemetry::is_valid_filter(&self.log.level) {
            p.add(
                "log.level",
                "must be a level (error, warn, info, debug, trace) or a filter directive",
            );
        }
    }
}
