//! A fake OpenTelemetry collector: takes OTLP trace and metrics exports over
//! `http/protobuf` (`POST /v1/traces`, `/v1/metrics`) or `grpc` (`TraceService/Export`,
//! `MetricsService/Export` over HTTP/2, prior knowledge), decodes them with the official protobuf types and keeps what came.
//! It can be told to refuse (503 / `UNAVAILABLE`), to stall (never answer), or to go
//! down (the listener and every connection closed: connections are refused).

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::Metric;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use tokio_util::sync::CancellationToken;

/// The wire the collector speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    HttpProtobuf,
    Grpc,
}

impl Wire {
    pub fn name(self) -> &'static str {
        match self {
            Wire::HttpProtobuf => "http/protobuf",
            Wire::Grpc => "grpc",
        }
    }
}

const ACCEPT: u8 = 0;
const REFUSE: u8 = 1;
const STALL: u8 = 2;

/// One export as it came.
#[derive(Debug, Clone)]
pub struct Export {
    /// The request's headers (lowercase names).
    pub headers: HashMap<String, String>,
    /// The resource's attributes, as text.
    pub resource: HashMap<String, String>,
    pub spans: Vec<Span>,
    /// A metrics export's metrics (a trace export has none).
    pub metrics: Vec<Metric>,
}

pub struct FakeCollector {
    pub addr: SocketAddr,
    wire: Wire,
    mode: Arc<AtomicU8>,
    got: Arc<Mutex<Vec<Export>>>,
    down: CancellationToken,
}

impl FakeCollector {
    pub async fn start(wire: Wire) -> FakeCollector {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (mode, got, down) = (
            Arc::new(AtomicU8::new(ACCEPT)),
            Arc::default(),
            CancellationToken::new(),
        );
        let c = FakeCollector {
            addr,
            wire,
            mode,
            got,
            down,
        };
        let (mode, got, down) = (c.mode.clone(), c.got.clone(), c.down.clone());
        tokio::spawn(async move {
            loop {
                let stream = tokio::select! {
                    () = down.cancelled() => return,
                    accepted = listener.accept() => match accepted {
                        Ok((s, _)) => s,
                        Err(_) => continue,
                    },
                };
                let io = hyper_util::rt::TokioIo::new(stream);
                let (mode, got, down) = (mode.clone(), got.clone(), down.clone());
                let service = hyper::service::service_fn(move |req| {
                    let (mode, got) = (mode.clone(), got.clone());
                    async move { Ok::<_, Infallible>(answer(wire, req, &mode, &got).await) }
                });
                tokio::spawn(async move {
                    match wire {
                        Wire::HttpProtobuf => {
                            let conn = hyper::server::conn::http1::Builder::new()
                                .serve_connection(io, service);
                            tokio::select! { () = down.cancelled() => {}, _ = conn => {} }
                        }
                        Wire::Grpc => {
                            let conn = hyper::server::conn::http2::Builder::new(
                                hyper_util::rt::TokioExecutor::new(),
                            )
                            .serve_connection(io, service);
                            tokio::select! { () = down.cancelled() => {}, _ = conn => {} }
                        }
                    }
                });
            }
        });
        c
    }

    /// The `[otel]` section that exports here, with `extra` keys.
    pub fn otel(&self, extra: &str) -> String {
        format!(
            "[otel]\nendpoint = \"http://{}\"\nprotocol = \"{}\"\n{extra}\n",
            self.addr,
            self.wire.name()
        )
    }

    pub fn exports(&self) -> Vec<Export> {
        self.got.lock().unwrap().clone()
    }

    pub fn spans(&self) -> Vec<Span> {
        self.exports().into_iter().flat_map(|e| e.spans).collect()
    }

    /// Answers 503 (`UNAVAILABLE` over gRPC) from now on.
    pub fn refuse(&self) {
        self.mode.store(REFUSE, Ordering::SeqCst);
    }

    /// Never answers from now on.
    pub fn stall(&self) {
        self.mode.store(STALL, Ordering::SeqCst);
    }

    /// Closes the listener and every connection: nothing answers on its port.
    pub fn down(&self) {
        self.down.cancel();
    }
}

type Body = BoxBody<Bytes, Infallible>;

async fn answer(
    wire: Wire,
    req: Request<Incoming>,
    mode: &AtomicU8,
    got: &Mutex<Vec<Export>>,
) -> Response<Body> {
    let path = req.uri().path().to_string();
    let is_metrics = matches!(
        path.as_str(),
        "/v1/metrics" | "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"
    );
    let path_ok = match wire {
        Wire::HttpProtobuf => path == "/v1/traces" || path == "/v1/metrics",
        Wire::Grpc => {
            path == "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
                || path == "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"
        }
    };
    let headers: HashMap<String, String> = req
        .headers()
        .iter()
        .map(|(n, v)| (n.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    let body = req.into_body().collect().await.map(|b| b.to_bytes());
    match mode.load(Ordering::SeqCst) {
        STALL => std::future::pending::<()>().await,
        REFUSE => return refused(wire),
        _ => {}
    }
    let Ok(body) = body else {
        return status(400);
    };
    if !path_ok {
        return status(404);
    }
    let message = match wire {
        Wire::HttpProtobuf => &body[..],
        Wire::Grpc => {
            assert_eq!(
                headers.get("content-type").map(String::as_str),
                Some("application/grpc")
            );
            assert_eq!(body[0], 0, "not compressed");
            let len = u32::from_be_bytes(body[1..5].try_into().unwrap()) as usize;
            assert_eq!(body.len(), 5 + len, "one length-prefixed message");
            &body[5..]
        }
    };
    let resource_of = |r: Option<opentelemetry_proto::tonic::resource::v1::Resource>| {
        r.map(|r| {
            r.attributes
                .iter()
                .map(|kv| (kv.key.clone(), text(kv)))
                .collect()
        })
        .unwrap_or_default()
    };
    if is_metrics {
        let decoded =
            ExportMetricsServiceRequest::decode(message).expect("a valid OTLP metrics export");
        for rm in decoded.resource_metrics {
            got.lock().unwrap().push(Export {
                headers: headers.clone(),
                resource: resource_of(rm.resource),
                spans: Vec::new(),
                metrics: rm
                    .scope_metrics
                    .into_iter()
                    .flat_map(|s| s.metrics)
                    .collect(),
            });
        }
    } else {
        let decoded = ExportTraceServiceRequest::decode(message).expect("a valid OTLP export");
        for rs in decoded.resource_spans {
            got.lock().unwrap().push(Export {
                headers: headers.clone(),
                resource: resource_of(rs.resource),
                spans: rs.scope_spans.into_iter().flat_map(|s| s.spans).collect(),
                metrics: Vec::new(),
            });
        }
    }
    match wire {
        Wire::HttpProtobuf => Response::builder()
            .header("content-type", "application/x-protobuf")
            .body(Full::new(Bytes::new()).boxed())
            .unwrap(),
        Wire::Grpc => grpc(0, Bytes::from_static(&[0, 0, 0, 0, 0])),
    }
}

fn status(s: u16) -> Response<Body> {
    Response::builder()
        .status(s)
        .body(Full::new(Bytes::new()).boxed())
        .unwrap()
}

fn refused(wire: Wire) -> Response<Body> {
    match wire {
        Wire::HttpProtobuf => status(503),
        Wire::Grpc => grpc(14, Bytes::new()),
    }
}

/// A gRPC answer: `data`, then the trailers with `grpc-status: code`.
fn grpc(code: u32, data: Bytes) -> Response<Body> {
    let mut trailers = hyper::HeaderMap::new();
    trailers.insert("grpc-status", code.to_string().parse().unwrap());
    let frames = vec![
        Ok::<_, Infallible>(Frame::data(data)),
        Ok(Frame::trailers(trailers)),
    ];
    Response::builder()
        .header("content-type", "application/grpc")
        .body(StreamBody::new(futures::stream::iter(frames)).boxed())
        .unwrap()
}

/// An attribute's value as text (integers in decimal).
pub fn text(kv: &KeyValue) -> String {
    match kv.value.as_ref().and_then(|v: &AnyValue| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

/// A span's attribute, as text.
pub fn attr(span: &Span, key: &str) -> Option<String> {
    span.attributes.iter().find(|kv| kv.key == key).map(text)
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
