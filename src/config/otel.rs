//! `[otel]`: where spans are exported (OTLP over HTTP or gRPC), how roots are
//! sampled, the resource's name, and the collector's headers.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Config, Problems};

/// `otel.protocol`
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub enum OtelProtocol {
    /// `POST <endpoint>/v1/traces`, protobuf bodies.
    #[default]
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
    /// The OTLP gRPC service.
    #[serde(rename = "grpc")]
    Grpc,
}

/// `[otel]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct OtelConfig {
    /// The collector's OTLP endpoint; empty = no spans exported (context still
    /// propagates).
    pub endpoint: String,
    /// `http/protobuf` or `grpc`.
    pub protocol: OtelProtocol,
    /// The share of messages without a parent that start a sampled trace.
    pub sample_ratio: f64,
    /// The resource's `service.name`.
    pub service_name: String,
    /// Headers to the collector.
    pub headers: BTreeMap<String, String>,
    /// Header values from files, read again when they change.
    pub header_files: BTreeMap<String, String>,
    /// The resource's attributes besides `service.name` and `service.instance.id`
    /// (`deployment.environment`, `k8s.pod.name`, …).
    pub resource_attributes: BTreeMap<String, String>,
    /// Export what `/metrics` shows over OTLP too.
    pub metrics: bool,
    /// Where metrics go, when not to `endpoint`.
    pub metrics_endpoint: String,
    /// How often metrics are exported.
    pub metrics_interval_ms: u64,
}

impl Default for OtelConfig {
    fn default() -> Self {
        Self {
            endpoint: String::new(),
            protocol: OtelProtocol::HttpProtobuf,
            sample_ratio: 1.0,
            service_name: "jetrelay".into(),
            headers: BTreeMap::new(),
            header_files: BTreeMap::new(),
            resource_attributes: BTreeMap::new(),
            metrics: false,
            metrics_endpoint: String::new(),
            metrics_interval_ms: 60_000,
        }
    }
}

impl Config {
    pub(super) fn check_otel(&self, p: &mut Problems) {
        let o = &self.otel;
        for (key, url) in [
            ("otel.endpoint", &o.endpoint),
            ("otel.metrics_endpoint", &o.metrics_endpoint),
        ] {
            if url.is_empty() {
                continue;
            }
            if super::nats::has_userinfo(url) {
                p.add(
                    key,
                    format!(
                        "{:?} carries credentials: put them in otel.headers or otel.header_files",
                        super::redact(url)
                    ),
                );
            } else if let Err(e) = super::http::check_http_url(url) {
                p.add(key, e);
            }
        }
        if o.metrics && o.endpoint.is_empty() && o.metrics_endpoint.is_empty() {
            p.add(
                "otel.metrics",
                "needs otel.endpoint or otel.metrics_endpoint (where the metrics go)",
            );
        }
        p.range(
            "otel.metrics_interval_ms",
            o.metrics_interval_ms,
            1000,
            super::HOUR,
        );
        if !(0.0..=1.0).contains(&o.sample_ratio) {
            p.add("otel.sample_ratio", "must be between 0 and 1");
        }
        if o.service_name.trim().is_empty() {
            p.add("otel.service_name", "must not be empty");
        }
        super::http::check_static_headers(p, "otel.headers", &o.headers);
        for name in o.resource_attributes.keys() {
            if name.trim().is_empty() {
                p.add("otel.resource_attributes", "an attribute without a name");
            } else if matches!(name.as_str(), "service.name" | "service.instance.id") {
                p.add(
                    format!("otel.resource_attributes.{name}"),
                    "is jetrelay's to set: service.name is otel.service_name, service.instance.id is nats.name",
                );
            }
        }
        for (name, path) in &o.header_files {
            let key = format!("otel.header_files.{name}");
            if !crate::app::headers::is_valid_name(name) {
                p.add(key, "is not a valid HTTP header name");
            } else if path.is_empty() {
                p.add(key, "needs a file path");
            } else if o.headers.keys().any(|n| n.eq_ignore_ascii_case(name)) {
                p.add(key, "is also set in otel.headers");
            }
        }
    }
}
