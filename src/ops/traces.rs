//! Recording spans: the trace decision for each delivery (continue the message's
//! context, or a root sampled by ratio), the spans made on the delivery path, and the
//! bounded queue they wait in for the exporter. Nothing here waits on the collector:
//! a full queue drops the span and counts it (`jetrelay_otel_spans_dropped_total`),
//! and the exporter ([`export`]) sends batches off the delivery path, one at a time,
//! counting what it could not send.
//!
//! With export off ([`Tracer::off`]) nothing is recorded and no id is drawn: trace
//! headers pass through unchanged.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::PoisonError;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::message::{Delivery, Message};
use crate::ops::metrics::Metrics;
use crate::seam::{Forwarded, HttpClass};
use crate::trace::context::{self, SpanContext};
use crate::trace::encode::{self, Resource};
use crate::trace::span::{Span, SpanKind, SpanLink, Value};

/// Spans queued at most.
pub const MAX_QUEUED: usize = 4096;
/// Bytes of queued spans at most (a batch span with a thousand links is ~100 KB).
pub const MAX_QUEUED_BYTES: usize = 8 << 20;
/// Spans per export at most: ~85 KB of OTLP. A 512-span body (~170 KB) is past the
/// size from which the allocator gives a buffer pages of its own: measured at 3–4 MiB
/// more peak RSS under load (bench/results/1796167494.md against 1796169691.md).
pub const BATCH: usize = 256;
/// How long a span may wait for a fuller batch.
pub const BATCH_DELAY: Duration = Duration::from_secs(1);

/// What tracing takes: `[otel]`, parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceSettings {
    /// The share of messages without a context that start a sampled trace.
    pub sample_ratio: f64,
    /// The resource the spans are exported with.
    pub resource: Resource,
}

/// The app's address, for the request spans (`url.full` has no credentials).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppTarget {
    /// `url.full`.
    pub url: String,
    /// `server.address`.
    pub host: String,
    /// `server.port`.
    pub port: u16,
}

/// Records spans. Cheap to clone; [`Tracer::off`] records nothing. The process's
/// (the publish endpoint's spans) names no source; a source's
/// ([`Tracer::for_source`]) names the source on its spans, with its consumer and app.
#[derive(Debug, Clone, Default)]
pub struct Tracer(Option<Arc<Inner>>, Option<Arc<SourceTrace>>);

/// What a source's spans say of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceTrace {
    /// `jetrelay.source`.
    pub name: String,
    /// `messaging.consumer.group.name`: the durable, or `<group>/<member>`.
    pub consumer_group: String,
    /// The app, as its request spans name it.
    pub app: AppTarget,
}

#[derive(Debug)]
struct Inner {
    settings: TraceSettings,
    queue: Mutex<Queue>,
    /// Woken when a batch is full, and at shutdown.
    wake: Notify,
    metrics: Metrics,
}

#[derive(Debug, Default)]
struct Queue {
    spans: VecDeque<Span>,
    bytes: usize,
}

/// Now, in Unix nanoseconds.
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn draw() -> u64 {
    fastrand::u64(..)
}

/// A span begun at receipt of `m`: a child of its context (bounded as for the app: an
/// oversized or malformed tracestate is not continued), or a root sampled by ratio
/// (without a tracestate) when it has none. An unsampled span only carries its
/// context: nothing else is allocated.
fn begin(inner: &Inner, m: &Message, kind: SpanKind, subject: &str) -> Active {
    let parent =
        context::inbound(m.headers.iter().map(|(n, v)| (n.as_str(), v.as_str()))).context();
    let mut ctx =
        context::continue_or_root(parent.as_ref(), inner.settings.sample_ratio, &mut draw);
    if parent.is_none() {
        ctx.tracestate = None;
    }
    let sampled = ctx.sampled();
    Active {
        parent: parent.as_ref().map(|p| p.span_id),
        parent_remote: parent.is_some(),
        context: ctx,
        kind,
        name: if sampled {
            format!("process {subject}").into_boxed_str()
        } else {
            Box::default()
        },
        start_ns: now_ns(),
        attributes: Vec::new(),
        links: Vec::new(),
    }
}

/// A span being made: its context, where it hangs, what it started with.
#[derive(Debug, Clone)]
pub struct Active {
    context: SpanContext,
    parent: Option<[u8; 8]>,
    parent_remote: bool,
    kind: SpanKind,
    name: Box<str>,
    start_ns: u64,
    attributes: Vec<(&'static str, Value)>,
    links: Vec<SpanLink>,
}

impl Active {
    /// Its context (what a child or a message it publishes continues).
    pub fn context(&self) -> &SpanContext {
        &self.context
    }

    /// Its `traceparent`.
    pub fn traceparent(&self) -> String {
        self.context.traceparent()
    }

    /// Adds an attribute.
    pub fn set(&mut self, key: &'static str, value: impl Into<Value>) {
        self.attributes.push((key, value.into()));
    }
}

impl Tracer {
    /// No export: nothing is recorded, trace headers pass as they came (bounded).
    pub fn off() -> Tracer {
        Tracer(None, None)
    }

    /// Records spans for export.
    pub fn new(settings: TraceSettings, metrics: Metrics) -> Tracer {
        Tracer(
            Some(Arc::new(Inner {
                settings,
                queue: Mutex::new(Queue::default()),
                wake: Notify::new(),
                metrics,
            })),
            None,
        )
    }

    /// Whether spans are exported.
    pub fn is_on(&self) -> bool {
        self.0.is_some()
    }

    /// This tracer for one source: its spans name it, its consumer and its app.
    pub fn for_source(&self, source: SourceTrace) -> Tracer {
        Tracer(self.0.clone(), Some(Arc::new(source)))
    }

    /// The CONSUMER span of one delivery, begun at receipt: a child of the message's
    /// context, or a root (sampled by ratio) when it has none. `None` with export off.
    pub fn delivery(&self, d: &Delivery) -> Option<Active> {
        let inner = self.0.as_ref()?;
        let mut a = begin(inner, &d.message, SpanKind::Consumer, &d.app_subject);
        let sampled = a.context.sampled();
        if !sampled {
            return Some(a);
        }
        a.attributes.reserve_exact(12);
        a.set("messaging.system", "nats");
        a.set("messaging.operation.name", "process");
        a.set("messaging.operation.type", "process");
        a.set("messaging.destination.name", d.app_subject.clone());
        if let Some(source) = &self.1 {
            a.set(
                "messaging.consumer.group.name",
                source.consumer_group.clone(),
            );
            a.set("jetrelay.source", source.name.clone());
        }
        if let Some(id) = d.header("Nats-Msg-Id") {
            a.set("messaging.message.id", id.to_string());
        }
        a.set("messaging.message.delivery_count", d.delivered());
        if let Ok(m) = &d.meta {
            a.set("jetrelay.stream", m.stream.clone());
            a.set("jetrelay.stream_sequence", m.stream_seq);
        }
        if let Some(p) = d.partition {
            a.set("jetrelay.partition", p);
            a.set("messaging.destination.partition.id", p.to_string());
        }
        Some(a)
    }

    /// The SERVER span of one NATS request to a service source's `endpoint`, begun at
    /// receipt: a child of the request's `traceparent`, or a root (sampled by ratio)
    /// when it has none. `None` with export off.
    pub fn serve(&self, m: &Message, endpoint: &str) -> Option<Active> {
        let inner = self.0.as_ref()?;
        let mut a = begin(inner, m, SpanKind::Server, &m.subject);
        let sampled = a.context.sampled();
        if sampled {
            a.set("messaging.system", "nats");
            a.set("messaging.operation.name", "process");
            a.set("messaging.operation.type", "process");
            a.set("messaging.destination.name", m.subject.clone());
            a.set("jetrelay.endpoint", endpoint.to_string());
            if let Some(source) = &self.1 {
                a.set("jetrelay.source", source.name.clone());
            }
        }
        Some(a)
    }

    /// Ends a served request's span with the reply's error, if it said one.
    pub fn end_serve(&self, mut span: Active, error: Option<(u16, &str)>) {
        if !span.context.sampled() {
            return;
        }
        let error = error.map(|(code, reason)| {
            span.set("error.type", code.to_string());
            format!("{code}: {reason}")
        });
        self.end(span, error);
    }

    /// The CLIENT span of one request to the app, a child of the delivery's span;
    /// `attempt` above 1 is a resend.
    pub fn request(&self, parent: &SpanContext, attempt: u32) -> Active {
        let mut a = self.child(parent, SpanKind::Client, "POST".into());
        if a.context.sampled() {
            self.http_attributes(&mut a);
            if attempt > 1 {
                a.set("http.request.resend_count", attempt - 1);
            }
        }
        a
    }

    /// Ends a request's span with what the request got: a status (an error status
    /// from 400 on), or why there was none.
    pub fn end_request(&self, mut span: Active, f: &Forwarded) {
        if !span.context.sampled() {
            return;
        }
        let error = match (f.class, &f.failure) {
            (HttpClass::Status(s), _) => {
                span.set("http.response.status_code", u32::from(s));
                (s >= 400).then(|| {
                    span.set("error.type", s.to_string());
                    format!("the app answered {s}")
                })
            }
            (_, Some(why)) => {
                span.set("error.type", why.kind);
                Some(why.kind.to_string())
            }
            (HttpClass::Timeout, None) => {
                span.set("error.type", "timeout");
                Some("timeout".into())
            }
            (HttpClass::Error, None) => {
                span.set("error.type", "request failed");
                Some("request failed".into())
            }
        };
        self.end(span, error);
    }

    /// Ends a delivery's span with how it ended (`ack`, `retry` with its delay,
    /// `term`, `dlq`, `released`).
    pub fn end_delivery(&self, mut span: Active, outcome: &'static str, delay: Option<Duration>) {
        if !span.context.sampled() {
            return;
        }
        span.set("jetrelay.outcome", outcome);
        if let Some(d) = delay {
            span.set(
                "jetrelay.retry_delay_ms",
                u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
            );
        }
        let error =
            matches!(outcome, "term" | "dlq").then(|| format!("the message ended: {outcome}"));
        self.end(span, error);
    }

    /// The PRODUCER span of publishing `subjects` (one message or a batch) as a
    /// child of `parent`.
    pub fn publish(&self, parent: &SpanContext, subjects: &[&str]) -> Active {
        let first = subjects.first().copied().unwrap_or("");
        let one_subject = subjects.iter().all(|s| *s == first);
        let name = if one_subject {
            format!("publish {first}")
        } else {
            "publish".to_string()
        };
        let mut a = self.child(parent, SpanKind::Producer, name);
        if a.context.sampled() {
            a.set("messaging.system", "nats");
            a.set("messaging.operation.name", "publish");
            a.set("messaging.operation.type", "send");
            if one_subject {
                a.set("messaging.destination.name", first.to_string());
            }
            if subjects.len() > 1 {
                a.set("messaging.batch.message_count", subjects.len() as u64);
            }
        }
        a
    }

    /// A child span of `parent` (a CLIENT request, a PRODUCER publish).
    pub fn child(&self, parent: &SpanContext, kind: SpanKind, name: String) -> Active {
        Active {
            context: parent.child(context::span_id(&mut draw)),
            parent: Some(parent.span_id),
            parent_remote: false,
            kind,
            name: name.into_boxed_str(),
            start_ns: now_ns(),
            attributes: Vec::new(),
            links: Vec::new(),
        }
    }

    /// [`Tracer::publish`] for a caller whose context is `parent` (another
    /// process's, given on the request).
    pub fn publish_for(&self, parent: &SpanContext, subjects: &[&str]) -> Active {
        let mut a = self.publish(parent, subjects);
        a.parent_remote = true;
        a
    }

    /// A batch request's CLIENT span: a root, linked to each message's span;
    /// sampled when any of them is.
    pub fn batch(&self, messages: &[&SpanContext]) -> Active {
        let sampled = messages.iter().any(|c| c.sampled());
        let context = SpanContext {
            trace_id: context::trace_id(&mut draw),
            span_id: context::span_id(&mut draw),
            flags: context::RANDOM | if sampled { context::SAMPLED } else { 0 },
            tracestate: None,
        };
        let links = if sampled {
            messages
                .iter()
                .map(|c| SpanLink {
                    context: (*c).clone(),
                    attributes: Vec::new(),
                })
                .collect()
        } else {
            Vec::new()
        };
        let mut a = Active {
            context,
            parent: None,
            parent_remote: false,
            kind: SpanKind::Client,
            name: "POST".into(),
            start_ns: now_ns(),
            attributes: Vec::new(),
            links,
        };
        if sampled {
            self.http_attributes(&mut a);
        }
        a
    }

    /// What a request span says of the app.
    fn http_attributes(&self, a: &mut Active) {
        a.set("http.request.method", "POST");
        // Only a source's tracer sends to an app: the process's has none to name.
        if let (Some(_), Some(source)) = (&self.0, &self.1) {
            let app = &source.app;
            a.set("url.full", app.url.clone());
            a.set("server.address", app.host.clone());
            a.set("server.port", u32::from(app.port));
        }
    }

    /// Ends `span` now, with an error status when `error` says why; queued for
    /// export when sampled, dropped (and counted) when the queue is full.
    pub fn end(&self, span: Active, error: Option<String>) {
        let Some(inner) = &self.0 else {
            return;
        };
        if !span.context.sampled() {
            return;
        }
        let s = Span {
            context: span.context,
            parent: span.parent,
            parent_remote: span.parent_remote,
            kind: span.kind,
            name: span.name,
            start_ns: span.start_ns,
            end_ns: now_ns().max(span.start_ns),
            attributes: span.attributes,
            links: span.links,
            error: error.map(String::into_boxed_str),
        };
        inner.push(s);
    }

    /// Takes every queued span (tests look at what would be exported).
    #[cfg(test)]
    pub(crate) fn take_queued(&self) -> Vec<Span> {
        self.0
            .as_ref()
            .map_or_else(Vec::new, |i| i.take(usize::MAX))
    }

    /// Counts spans the exporter could not send.
    fn dropped(&self, n: usize) {
        if let Some(inner) = &self.0 {
            inner.metrics.spans_dropped(n as u64);
        }
    }

    /// Up to [`BATCH`] queued spans: at once when a batch is full, else after
    /// [`BATCH_DELAY`] (or when `stop` completes).
    async fn next_batch(&self, stop: impl Future<Output = ()>) -> Vec<Span> {
        let Some(inner) = &self.0 else {
            return Vec::new();
        };
        if inner.len() < BATCH {
            let wake = inner.wake.notified();
            tokio::select! {
                () = wake => {}
                () = tokio::time::sleep(BATCH_DELAY) => {}
                () = stop => {}
            }
        }
        inner.take(BATCH)
    }
}

impl Inner {
    fn len(&self) -> usize {
        self.lock().spans.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        // A poisoned lock means a panic elsewhere while pushing; the queue is still
        // whole (each push or take is one call).
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn push(&self, span: Span) {
        let size = span.size();
        let full = {
            let mut q = self.lock();
            if q.spans.len() >= MAX_QUEUED || q.bytes + size > MAX_QUEUED_BYTES {
                None
            } else {
                q.bytes += size;
                q.spans.push_back(span);
                Some(q.spans.len() >= BATCH)
            }
        };
        match full {
            None => self.metrics.spans_dropped(1),
            Some(true) => self.wake.notify_one(),
            Some(false) => {}
        }
    }

    fn take(&self, max: usize) -> Vec<Span> {
        let mut q = self.lock();
        let n = q.spans.len().min(max);
        let taken: Vec<Span> = q.spans.drain(..n).collect();
        q.bytes -= taken.iter().map(Span::size).sum::<usize>().min(q.bytes);
        taken
    }
}

/// Where encoded batches go (the collector, over HTTP or gRPC); faked in tests.
pub trait Exporter: Send + Sync + 'static {
    /// Bytes the transport frames each request with, left at the start of the body
    /// (gRPC's 5-byte message prefix; none for plain HTTP).
    fn prefix(&self) -> usize {
        0
    }

    /// Fills in the framing: `body` is the [`Exporter::prefix`] bytes, then the
    /// encoded request.
    fn frame(&self, body: &mut [u8]) {
        let _ = body;
    }

    /// Sends one framed `ExportTraceServiceRequest`; `Err` says why it was not taken.
    fn send(&self, body: Bytes) -> impl Future<Output = Result<(), String>> + Send;
}

/// The export body's buffer, reused from one export to the next: a batch encodes
/// to ~100 KB, and a fresh buffer per export (some 150 a second at 20,000 messages a
/// second, every one sampled) left megabytes freed but not yet returned by the
/// allocator, the most of jetrelay's peak RSS with tracing on.
#[derive(Default)]
struct ExportBuffer(Vec<u8>);

impl ExportBuffer {
    /// `batch` encoded and framed for `exporter`, as the bytes to send.
    fn encode(&mut self, exporter: &impl Exporter, resource: &Resource, batch: &[Span]) -> Bytes {
        let mut buf = std::mem::take(&mut self.0);
        buf.clear();
        buf.resize(exporter.prefix(), 0);
        encode::export_request(resource, batch, &mut buf);
        exporter.frame(&mut buf);
        Bytes::from(buf)
    }

    /// Takes the buffer back once the exporter let go of `sent` (the request was
    /// written, or dropped); when something still holds it, the next export
    /// allocates anew.
    fn reclaim(&mut self, sent: Bytes) {
        if let Ok(buf) = sent.try_into_mut() {
            self.0 = Vec::from(buf);
        }
    }
}

/// How long one export may take.
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the last spans may take to go out after `stop` (less when the
/// shutdown grace ends sooner): a stalled collector never holds a stop up longer.
pub const FLUSH: Duration = Duration::from_secs(5);

/// Sends the queued spans until `stop`, then what is left until `deadline` or for
/// [`FLUSH`], whichever ends first: one export at a time, each bounded by
/// [`EXPORT_TIMEOUT`]; the spans of a failed one, and those left at the end, are
/// counted as dropped (one warning a minute says why).
pub async fn export<E: Exporter>(
    tracer: Tracer,
    exporter: E,
    stop: tokio_util::sync::CancellationToken,
    deadline: impl Fn() -> Option<Instant>,
) {
    let Some(inner) = tracer.0.clone() else {
        return;
    };
    let mut body = ExportBuffer::default();
    let mut warned: Option<Instant> = None;
    // Set when `stop` is seen: the last spans go out until then.
    let mut flush_until: Option<Instant> = None;
    loop {
        let stopping = stop.is_cancelled();
        if stopping && flush_until.is_none() {
            let most = Instant::now() + FLUSH;
            flush_until = Some(deadline().map_or(most, |at| at.min(most)));
        }
        let batch = if stopping {
            inner.take(BATCH)
        } else {
            tracer.next_batch(stop.cancelled()).await
        };
        if batch.is_empty() {
            if stopping {
                return;
            }
            continue;
        }
        let bytes = body.encode(&exporter, &inner.settings.resource, &batch);
        let bound = match flush_until {
            Some(at) => at.min(Instant::now() + EXPORT_TIMEOUT),
            None => Instant::now() + EXPORT_TIMEOUT,
        };
        let sent = tokio::time::timeout_at(bound, exporter.send(bytes.clone())).await;
        body.reclaim(bytes);
        let failed = match sent {
            Ok(Ok(())) => None,
            Ok(Err(why)) => Some(why),
            Err(_) => Some("the collector did not answer in time".to_string()),
        };
        if let Some(why) = failed {
            tracer.dropped(batch.len());
            if warned.is_none_or(|at| at.elapsed() >= Duration::from_secs(60)) {
                warned = Some(Instant::now());
                tracing::warn!(spans = batch.len(), error = %why, "spans not exported: dropped (counted in jetrelay_otel_spans_dropped_total)");
            }
        }
        if flush_until.is_some_and(|at| Instant::now() >= at) {
            let left = inner.take(usize::MAX).len();
            tracer.dropped(left);
            return;
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A tracer for tests, exporting nowhere; its spans stay queued.
    pub(crate) fn tracer(ratio: f64) -> (Tracer, Metrics) {
        let metrics = Metrics::new().unwrap();
        let t = Tracer::new(
            TraceSettings {
                sample_ratio: ratio,
                resource: Resource {
                    service_name: "jetrelay".into(),
                    instance_id: "i".into(),
                    attributes: vec![("deployment.environment".into(), "test".into())],
                },
            },
            metrics.clone(),
        )
        .for_source(SourceTrace {
            name: "default".into(),
            consumer_group: "g".into(),
            app: AppTarget {
                url: "http://127.0.0.1:8080/messages".into(),
                host: "127.0.0.1".into(),
                port: 8080,
            },
        });
        (t, metrics)
    }

    fn span(t: &Tracer) -> Active {
        let root = SpanContext {
            trace_id: [1; 16],
            span_id: [2; 8],
            flags: context::SAMPLED,
            tracestate: None,
        };
        t.child(&root, SpanKind::Client, "POST".into())
    }

    #[test]
    fn a_full_queue_drops_and_counts_and_never_blocks() {
        let (t, m) = tracer(1.0);
        for _ in 0..MAX_QUEUED + 10 {
            t.end(span(&t), None);
        }
        assert_eq!(m.sample("jetrelay_otel_spans_dropped_total"), Some(10.0));
        let inner = t.0.as_ref().unwrap();
        assert_eq!(inner.len(), MAX_QUEUED);
        assert_eq!(inner.take(BATCH).len(), BATCH);
        assert_eq!(inner.len(), MAX_QUEUED - BATCH);
    }

    #[test]
    fn unsampled_spans_are_not_queued_and_off_records_nothing() {
        let (t, _) = tracer(1.0);
        let parent = SpanContext {
            trace_id: [1; 16],
            span_id: [2; 8],
            flags: 0,
            tracestate: None,
        };
        t.end(t.child(&parent, SpanKind::Client, "POST".into()), None);
        assert_eq!(t.0.as_ref().unwrap().len(), 0);
        let off = Tracer::off();
        assert!(!off.is_on());
    }

    struct Fake {
        sent: Arc<Mutex<Vec<usize>>>,
        fail: bool,
        stall: bool,
    }

    impl Exporter for Fake {
        async fn send(&self, body: Bytes) -> Result<(), String> {
            if self.stall {
                std::future::pending::<()>().await;
            }
            self.sent.lock().unwrap().push(body.len());
            if self.fail {
                Err("refused".into())
            } else {
                Ok(())
            }
        }
    }

    /// An exporter that frames with a 3-byte prefix of its own.
    struct Framed;

    impl Exporter for Framed {
        fn prefix(&self) -> usize {
            3
        }
        fn frame(&self, body: &mut [u8]) {
            body[..3].copy_from_slice(b"hdr");
        }
        async fn send(&self, _: Bytes) -> Result<(), String> {
            Ok(())
        }
    }

    #[test]
    fn the_export_buffer_is_framed_and_reused_once_the_exporter_lets_go() {
        let resource = Resource {
            service_name: "s".into(),
            instance_id: "i".into(),
            attributes: Vec::new(),
        };
        let mut buf = ExportBuffer::default();
        let first = buf.encode(&Framed, &resource, &[]);
        assert!(first.starts_with(b"hdr") && first.len() > 3, "framed");
        let at = first.as_ptr();
        buf.reclaim(first.clone());
        assert_eq!(
            buf.0.capacity(),
            0,
            "still held by the exporter: not taken back"
        );
        buf.reclaim(first);
        assert!(buf.0.capacity() > 3, "let go: taken back");
        let second = buf.encode(&Framed, &resource, &[]);
        assert_eq!(
            second.as_ptr(),
            at,
            "the next export writes into the same buffer"
        );
        assert!(second.starts_with(b"hdr"));
    }

    #[tokio::test(start_paused = true)]
    async fn the_exporter_sends_batches_and_counts_what_fails_or_hangs() {
        for (fail, stall) in [(false, false), (true, false), (false, true)] {
            let (t, m) = tracer(1.0);
            let sent = Arc::new(Mutex::new(Vec::new()));
            let stop = tokio_util::sync::CancellationToken::new();
            let run = tokio::spawn(export(
                t.clone(),
                Fake {
                    sent: Arc::clone(&sent),
                    fail,
                    stall,
                },
                stop.clone(),
                || None,
            ));
            for _ in 0..BATCH + 3 {
                t.end(span(&t), None);
            }
            tokio::time::sleep(EXPORT_TIMEOUT * 3).await;
            stop.cancel();
            run.await.unwrap();
            let dropped = m.sample("jetrelay_otel_spans_dropped_total").unwrap();
            match (fail, stall) {
                (false, false) => {
                    assert_eq!(sent.lock().unwrap().len(), 2, "a full batch, then the rest");
                    assert_eq!(dropped, 0.0);
                }
                _ => assert_eq!(dropped, (BATCH + 3) as f64, "fail={fail} stall={stall}"),
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_collector_holds_a_stop_up_for_flush_at_most() {
        let (t, m) = tracer(1.0);
        let stop = tokio_util::sync::CancellationToken::new();
        let run = tokio::spawn(export(
            t.clone(),
            Fake {
                sent: Arc::default(),
                fail: false,
                stall: true,
            },
            stop.clone(),
            // A grace far longer than the flush.
            || Some(Instant::now() + Duration::from_secs(600)),
        ));
        for _ in 0..10 {
            t.end(span(&t), None);
        }
        stop.cancel();
        let stopped = Instant::now();
        run.await.unwrap();
        assert_eq!(
            stopped.elapsed(),
            FLUSH,
            "the flush is bounded, not the grace"
        );
        assert_eq!(m.sample("jetrelay_otel_spans_dropped_total"), Some(10.0));
    }
}
