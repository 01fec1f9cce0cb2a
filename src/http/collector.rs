//! The OpenTelemetry collector, as the span and metric exporters see it: one POST per
//! batch of spans (or per reading of the metrics), `http/protobuf` (`POST
//! <endpoint>/v1/traces`, `/v1/metrics`) or `grpc` (the unary `TraceService/Export`,
//! `MetricsService/Export` over HTTP/2: prior knowledge for `http://`, ALPN `h2` for
//! `https://`), with the collector's headers (and header files, read again when
//! they change). Bounded: no retry here (the exporter counts a failed batch as
//! dropped and goes on), every request within its timeout.

use bytes::Bytes;
use std::time::Duration;

use reqwest::header::{CONTENT_TYPE, HeaderValue};

use crate::http::client::ClientError;
use crate::http::credentials::{CredentialFiles, Credentials};
use crate::ops::traces::Exporter;

/// `otel.protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP/HTTP with protobuf bodies.
    HttpProtobuf,
    /// OTLP/gRPC.
    Grpc,
}

/// What is exported: spans or metrics (each its own path or gRPC service).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exported {
    /// `ExportTraceServiceRequest`s.
    Traces,
    /// `ExportMetricsServiceRequest`s.
    Metrics,
}

/// What the collector client takes: `[otel]`, parsed.
#[derive(Debug, Clone)]
pub struct CollectorSettings {
    /// What it exports.
    pub signal: Exported,
    /// `otel.endpoint` (or `otel.metrics_endpoint`): the collector's base URL.
    pub endpoint: reqwest::Url,
    /// `otel.protocol`.
    pub protocol: Protocol,
    /// `otel.headers`, `otel.header_files`.
    pub credentials: CredentialFiles,
}

/// Sends span batches to the collector.
#[derive(Debug)]
pub struct Collector {
    client: reqwest::Client,
    url: reqwest::Url,
    protocol: Protocol,
    credentials: Credentials,
}

/// How long one export request may take.
const TIMEOUT: Duration = Duration::from_secs(10);

impl Collector {
    /// Builds the client (its own pool: the app's is never shared with it).
    ///
    /// # Errors
    /// [`ClientError`] for a header that is not valid, or a header file that cannot
    /// be read.
    pub fn new(s: &CollectorSettings) -> Result<Collector, ClientError> {
        let credentials = Credentials::load(&s.credentials)?;
        let mut url = s.endpoint.clone();
        let (http_path, service) = match s.signal {
            Exported::Traces => (
                "v1/traces",
                "opentelemetry.proto.collector.trace.v1.TraceService/Export",
            ),
            Exported::Metrics => (
                "v1/metrics",
                "opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
            ),
        };
        let builder = match s.protocol {
            Protocol::HttpProtobuf => {
                let path = format!("{}/{http_path}", url.path().trim_end_matches('/'));
                url.set_path(&path);
                crate::http::client::builder("")
            }
            Protocol::Grpc => {
                let path = format!("{}/{service}", url.path().trim_end_matches('/'));
                url.set_path(&path);
                crate::http::client::builder_h2(url.scheme() == "http")
            }
        }
        .map_err(|source| ClientError::TlsCa {
            path: String::new(),
            source,
        })?;
        let client = builder
            .timeout(TIMEOUT)
            .pool_max_idle_per_host(1)
            .build()
            .map_err(ClientError::Build)?;
        Ok(Collector {
            client,
            url,
            protocol: s.protocol,
            credentials,
        })
    }

    async fn post(&self, body: Bytes) -> Result<(), String> {
        let mut headers = self.credentials.headers();
        match self.protocol {
            Protocol::HttpProtobuf => {
                headers.insert(
                    CONTENT_TYPE,
                    HeaderValue::from_static("application/x-protobuf"),
                );
            }
            Protocol::Grpc => {
                headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
                headers.insert("te", HeaderValue::from_static("trailers"));
                headers.insert("grpc-timeout", HeaderValue::from_static("10S"));
            }
        }
        let resp = self
            .client
            .post(self.url.clone())
            .headers(headers)
            .body(body)
            .send()
            .await
            .map_err(|e| {
                format!(
                    "cannot reach the collector: {}",
                    crate::ops::telemetry::chain(&e)
                )
            })?;
        let status = resp.status();
        if !status.is_success() {
            return Err(format!("the collector answered {}", status.as_u16()));
        }
        if self.protocol == Protocol::HttpProtobuf {
            return Ok(());
        }
        // gRPC: the status is in the trailers (or, Trailers-Only, in the headers).
        if let Some(code) = grpc_status(resp.headers()) {
            return grpc_result(code);
        }
        let trailers = crate::http::client::trailers(resp)
            .await
            .map_err(|e| format!("the collector's answer broke off: {e}"))?;
        match trailers.as_ref().and_then(grpc_status) {
            Some(code) => grpc_result(code),
            None => Err("the collector's answer carries no grpc-status".into()),
        }
    }
}

fn grpc_status(h: &reqwest::header::HeaderMap) -> Option<u32> {
    h.get("grpc-status")?.to_str().ok()?.trim().parse().ok()
}

fn grpc_result(code: u32) -> Result<(), String> {
    if code == 0 {
        Ok(())
    } else {
        Err(format!("the collector answered grpc-status {code}"))
    }
}

/// gRPC frames a message with a compressed flag and its length (big-endian u32).
const GRPC_PREFIX: usize = 5;

impl Exporter for Collector {
    fn prefix(&self) -> usize {
        match self.protocol {
            Protocol::HttpProtobuf => 0,
            Protocol::Grpc => GRPC_PREFIX,
        }
    }

    fn frame(&self, body: &mut [u8]) {
        if self.protocol == Protocol::Grpc && body.len() >= GRPC_PREFIX {
            // One length-prefixed message, not compressed.
            let len = u32::try_from(body.len() - GRPC_PREFIX).unwrap_or(u32::MAX);
            body[0] = 0;
            body[1..GRPC_PREFIX].copy_from_slice(&len.to_be_bytes());
        }
    }

    fn send(&self, body: Bytes) -> impl std::future::Future<Output = Result<(), String>> + Send {
        self.post(body)
    }
}
