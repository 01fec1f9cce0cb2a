//! Spans as an OTLP `ExportTraceServiceRequest` in protobuf wire format, written
//! straight from the records (field numbers from opentelemetry-proto's
//! `trace/v1/trace.proto` and `collector/trace/v1/trace_service.proto`). The test
//! harness decodes it with the official generated types.

use super::context::SpanContext;
use super::span::{Span, SpanKind, SpanLink, Value};

/// Who exports: the resource's attributes and the instrumentation scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    /// `service.name`.
    pub service_name: String,
    /// `service.instance.id`.
    pub instance_id: String,
    /// Its other attributes (`otel.resource_attributes`, `OTEL_RESOURCE_ATTRIBUTES`).
    pub attributes: Vec<(String, String)>,
}

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const FIXED32: u8 = 5;

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn tag(out: &mut Vec<u8>, field: u32, wire: u8) {
    varint(out, u64::from(field << 3 | u32::from(wire)));
}

fn bytes(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    tag(out, field, LEN);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn fixed64(out: &mut Vec<u8>, field: u32, v: u64) {
    tag(out, field, FIXED64);
    out.extend_from_slice(&v.to_le_bytes());
}

fn fixed32(out: &mut Vec<u8>, field: u32, v: u32) {
    tag(out, field, FIXED32);
    out.extend_from_slice(&v.to_le_bytes());
}

/// A nested message: written in place after room for its length, which is then
/// filled in (and the body moved back when the length takes fewer bytes).
fn nested(out: &mut Vec<u8>, field: u32, body: impl FnOnce(&mut Vec<u8>)) {
    tag(out, field, LEN);
    let at = out.len();
    out.extend_from_slice(&[0; 5]);
    body(out);
    let len = out.len() - at - 5;
    let mut prefix = Vec::with_capacity(5);
    varint(&mut prefix, len as u64);
    out.splice(at..at + 5, prefix);
}

fn key_value(out: &mut Vec<u8>, field: u32, key: &str, value: &Value) {
    nested(out, field, |kv| {
        bytes(kv, 1, key.as_bytes());
        nested(kv, 2, |any| match value {
            Value::Str(s) => bytes(any, 1, s.as_bytes()),
            Value::Text(s) => bytes(any, 1, s.as_bytes()),
            Value::Int(n) => {
                tag(any, 3, VARINT);
                // int64 is encoded as its two's complement, in ten bytes when negative.
                varint(any, *n as u64);
            }
        });
    });
}

/// A span's or a link's first three fields: trace id, span id, tracestate.
fn ids(o: &mut Vec<u8>, c: &SpanContext) {
    bytes(o, 1, &c.trace_id);
    bytes(o, 2, &c.span_id);
    if let Some(state) = &c.tracestate {
        bytes(o, 3, state.as_bytes());
    }
}

fn link(out: &mut Vec<u8>, l: &SpanLink) {
    nested(out, 13, |o| {
        ids(o, &l.context);
        for (k, v) in &l.attributes {
            key_value(o, 4, k, v);
        }
        // The W3C flags, and "is_remote is known, and true".
        fixed32(o, 6, u32::from(l.context.flags) | 0x300);
    });
}

fn span(out: &mut Vec<u8>, s: &Span) {
    nested(out, 2, |o| {
        ids(o, &s.context);
        if let Some(parent) = &s.parent {
            bytes(o, 4, parent);
        }
        bytes(o, 5, s.name.as_bytes());
        tag(o, 6, VARINT);
        varint(o, s.kind as u64);
        fixed64(o, 7, s.start_ns);
        fixed64(o, 8, s.end_ns);
        for (k, v) in &s.attributes {
            key_value(o, 9, k, v);
        }
        for l in &s.links {
            link(o, l);
        }
        if let Some(message) = &s.error {
            nested(o, 15, |st| {
                bytes(st, 2, message.as_bytes());
                tag(st, 3, VARINT);
                varint(st, 2); // STATUS_CODE_ERROR
            });
        }
        // The W3C flags; 0x100: whether the parent is remote is known, 0x200: it is.
        let remote = match (s.parent, s.parent_remote) {
            (Some(_), true) => 0x300,
            (Some(_), false) => 0x100,
            (None, _) => 0,
        };
        fixed32(o, 16, u32::from(s.context.flags) | remote);
    });
}

/// Appends `spans` as one `ExportTraceServiceRequest` to `out` (after whatever framing
/// the caller put there).
pub fn export_request(resource: &Resource, spans: &[Span], out: &mut Vec<u8>) {
    resource_and_scope(out, resource, |ss| {
        for s in spans {
            span(ss, s);
        }
    });
}

/// The request's one `ResourceSpans` (or `ResourceMetrics`: the same fields): the
/// resource, then one scope (jetrelay's) whose items `items` writes.
fn resource_and_scope(out: &mut Vec<u8>, resource: &Resource, items: impl FnOnce(&mut Vec<u8>)) {
    nested(out, 1, |rs| {
        nested(rs, 1, |r| {
            key_value(
                r,
                1,
                "service.name",
                &Value::Text(resource.service_name.as_str().into()),
            );
            key_value(
                r,
                1,
                "service.instance.id",
                &Value::Text(resource.instance_id.as_str().into()),
            );
            key_value(r, 1, "telemetry.sdk.language", &Value::Str("rust"));
            for (k, v) in &resource.attributes {
                key_value(r, 1, k, &Value::Text(v.as_str().into()));
            }
        });
        nested(rs, 2, |ss| {
            nested(ss, 1, |scope| {
                bytes(scope, 1, b"jetrelay");
                bytes(scope, 2, env!("CARGO_PKG_VERSION").as_bytes());
            });
            items(ss);
        });
    });
}

/// One metric as OTLP exports it (`metrics/v1/metrics.proto`).
#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    /// Its name (`messaging.client.consumed.messages`, `jetrelay.…`).
    pub name: String,
    /// What it counts or measures.
    pub description: String,
    /// Its unit (`s`, `By`, `{message}`), or empty.
    pub unit: String,
    /// Its points.
    pub data: MetricData,
}

/// A metric's points, by kind.
#[derive(Debug, Clone, PartialEq)]
pub enum MetricData {
    /// A cumulative sum (monotonic: a counter).
    Sum(Vec<NumberPoint>),
    /// A value now.
    Gauge(Vec<NumberPoint>),
    /// A cumulative histogram.
    Histogram(Vec<HistogramPoint>),
}

/// One point of a sum or a gauge.
#[derive(Debug, Clone, PartialEq)]
pub struct NumberPoint {
    /// Its labels.
    pub attributes: Vec<(String, String)>,
    /// Its value.
    pub value: f64,
}

/// One point of a histogram.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramPoint {
    /// Its labels.
    pub attributes: Vec<(String, String)>,
    /// How many values.
    pub count: u64,
    /// Their sum.
    pub sum: f64,
    /// The buckets' upper bounds, ascending.
    pub bounds: Vec<f64>,
    /// How many values fell in each bucket (not cumulative): one more than the
    /// bounds, the last above every bound.
    pub counts: Vec<u64>,
}

/// Appends `metrics` as one `ExportMetricsServiceRequest` to `out`: cumulative since
/// `start_ns`, read at `now_ns`.
pub fn metrics_request(
    resource: &Resource,
    metrics: &[Metric],
    (start_ns, now_ns): (u64, u64),
    out: &mut Vec<u8>,
) {
    const CUMULATIVE: u64 = 2;
    let times = |p: &mut Vec<u8>| {
        fixed64(p, 2, start_ns);
        fixed64(p, 3, now_ns);
    };
    let attributes = |p: &mut Vec<u8>, field: u32, a: &[(String, String)]| {
        for (k, v) in a {
            key_value(p, field, k, &Value::Text(v.as_str().into()));
        }
    };
    let number = |m: &mut Vec<u8>, point: &NumberPoint| {
        nested(m, 1, |p| {
            times(p);
            fixed64(p, 4, point.value.to_bits());
            attributes(p, 7, &point.attributes);
        });
    };
    resource_and_scope(out, resource, |ss| {
        for metric in metrics {
            nested(ss, 2, |m| {
                bytes(m, 1, metric.name.as_bytes());
                bytes(m, 2, metric.description.as_bytes());
                if !metric.unit.is_empty() {
                    bytes(m, 3, metric.unit.as_bytes());
                }
                match &metric.data {
                    MetricData::Gauge(points) => nested(m, 5, |g| {
                        points.iter().for_each(|p| number(g, p));
                    }),
                    MetricData::Sum(points) => nested(m, 7, |sum| {
                        points.iter().for_each(|p| number(sum, p));
                        tag(sum, 2, VARINT);
                        varint(sum, CUMULATIVE);
                        tag(sum, 3, VARINT);
                        varint(sum, 1);
                    }),
                    MetricData::Histogram(points) => nested(m, 9, |h| {
                        for point in points {
                            nested(h, 1, |p| {
                                times(p);
                                fixed64(p, 4, point.count);
                                fixed64(p, 5, point.sum.to_bits());
                                // Packed: the bytes of every value after one length.
                                let counts: Vec<u8> =
                                    point.counts.iter().flat_map(|c| c.to_le_bytes()).collect();
                                bytes(p, 6, &counts);
                                let bounds: Vec<u8> = (point.bounds.iter())
                                    .flat_map(|b| b.to_bits().to_le_bytes())
                                    .collect();
                                bytes(p, 7, &bounds);
                                attributes(p, 9, &point.attributes);
                            });
                        }
                        tag(h, 2, VARINT);
                        varint(h, CUMULATIVE);
                    }),
                }
            });
        }
    });
}

/// The OTLP span kind's name (for logs and tests).
pub fn kind_name(k: SpanKind) -> &'static str {
    match k {
        SpanKind::Server => "server",
        SpanKind::Client => "client",
        SpanKind::Producer => "producer",
        SpanKind::Consumer => "consumer",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_lengths_are_protobufs() {
        let mut v = Vec::new();
        varint(&mut v, 300);
        assert_eq!(v, [0xac, 0x02]);
        let mut v = Vec::new();
        nested(&mut v, 1, |b| b.extend_from_slice(&[7; 200]));
        // tag 0x0a, length 200 as two bytes, then the body.
        assert_eq!(&v[..3], &[0x0a, 0xc8, 0x01]);
        assert_eq!(v.len(), 203);
        let mut v = Vec::new();
        key_value(&mut v, 9, "n", &Value::Int(-1));
        // A negative int64 takes ten bytes.
        assert_eq!(v.len(), 2 + 3 + 2 + 1 + 10);
    }
}
