//! Every Prometheus collector, registered into a registry the caller owns (never the
//! global default), behind methods named for what happened (`received`, `settled`,
//! `request`, ...): no collector is reachable from outside, and no `prometheus` type
//! leaves this module. Metric names, help texts and label sets are defined here and
//! only here, each family in the group of collectors it belongs to.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

use crate::message::Invalid;
use crate::seam::HttpClass;
use crate::trace::context::{Dropped, Reason, TraceHeader};

/// The collectors could not be registered (only possible with duplicate names, a
/// programming error).
#[derive(Debug, thiserror::Error)]
#[error("cannot register the metrics")]
pub struct MetricsError(#[source] prometheus::Error);

impl From<prometheus::Error> for MetricsError {
    fn from(e: prometheus::Error) -> MetricsError {
        MetricsError(e)
    }
}

/// A gauge that is exposed only while its value is known: read from the server and
/// not yet outdated. Autoscalers then see no sample (and their own fallback) instead of
/// an old value that looks current.
#[derive(Debug, Clone)]
struct KnownGauge {
    gauge: IntGauge,
    known: Arc<AtomicBool>,
}

impl KnownGauge {
    fn new(opts: Opts) -> Result<KnownGauge, prometheus::Error> {
        Ok(KnownGauge {
            gauge: IntGauge::with_opts(opts)?,
            known: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Sets the value (saturating), and exposes it.
    fn set(&self, value: u64) {
        self.gauge.set(i64::try_from(value).unwrap_or(i64::MAX));
        self.known.store(true, Ordering::Release);
    }

    /// Withdraws the value: the gauge is not exposed until the next `set`.
    fn forget(&self) {
        self.known.store(false, Ordering::Release);
    }

    /// The value, when known.
    fn get(&self) -> Option<i64> {
        self.known.load(Ordering::Acquire).then(|| self.gauge.get())
    }
}

impl Collector for KnownGauge {
    fn desc(&self) -> Vec<&Desc> {
        self.gauge.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        if self.get().is_some() {
            self.gauge.collect()
        } else {
            Vec::new()
        }
    }
}

/// The settle actions, as the `action` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum SettleLabel {
    /// `+ACK`.
    Ack,
    /// `-NAK` (delayed, or released at shutdown).
    Nak,
    /// `+TERM`.
    Term,
    /// Published to the DLQ, then terminated.
    Dlq,
}

impl SettleLabel {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            SettleLabel::Ack => "ack",
            SettleLabel::Nak => "nak",
            SettleLabel::Term => "term",
            SettleLabel::Dlq => "dlq",
        }
    }
}

/// Where the app's messages were published from, as the `via` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Via {
    /// In an answer to a message.
    Answer,
    /// On the local publish endpoint.
    Endpoint,
}

/// The `reason` labels of `jetrelay_publish_failures_total`: the refusals of
/// `crate::outputs::Refusal::label` and the failures of the publisher's
/// `crate::seam::publish::OutputFailure::label`.
pub const PUBLISH_FAILURES: [&str; 9] = [
    "malformed",
    "not_allowed",
    "too_large",
    "no_stream",
    "timeout",
    "unavailable",
    "not_atomic",
    "too_many_batches",
    "rejected",
];

/// The `class` labels of `jetrelay_http_requests_total`, in [`class_index`] order.
const HTTP_CLASSES: [&str; 6] = ["2xx", "3xx", "4xx", "5xx", "error", "timeout"];

/// The `action` labels of `jetrelay_action_overrides_total`.
const OVERRIDES: [&str; 5] = ["ack", "retry", "term", "dlq", "invalid"];

const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// Message age: from milliseconds to a week.
const AGE_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 21600.0,
    86400.0, 604800.0,
];

/// When a message's age is taken, as the `stage` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum AgeStage {
    /// When jetrelay receives it.
    Received,
    /// When its action completes.
    Settled,
    /// When it is found expired (its `Nats-TTL` passed, or would before its retry).
    Expired,
}

const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0];

/// Registers collectors as they are made; a source's carry the `source` label.
struct Registrar<'a> {
    registry: &'a Registry,
    /// The source whose collectors these are (`None`: the process's).
    source: Option<&'a str>,
    /// What was registered for a source, to unregister when it is removed.
    kept: std::cell::RefCell<Vec<Box<dyn Collector>>>,
}

impl Registrar<'_> {
    fn register<C: Collector + Clone + 'static>(&self, c: C) -> Result<C, prometheus::Error> {
        self.registry.register(Box::new(c.clone()))?;
        if self.source.is_some() {
            self.kept.borrow_mut().push(Box::new(c.clone()));
        }
        Ok(c)
    }

    fn opts(&self, name: &str, help: &str) -> Opts {
        let opts = Opts::new(name, help);
        match self.source {
            Some(source) => opts.const_label("source", source),
            None => opts,
        }
    }

    fn histogram_opts(&self, name: &str, help: &str, buckets: &[f64]) -> HistogramOpts {
        let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
        match self.source {
            Some(source) => opts.const_label("source", source),
            None => opts,
        }
    }

    fn counter(&self, name: &str, help: &str) -> Result<IntCounter, prometheus::Error> {
        self.register(IntCounter::with_opts(self.opts(name, help))?)
    }

    fn gauge(&self, name: &str, help: &str) -> Result<IntGauge, prometheus::Error> {
        self.register(IntGauge::with_opts(self.opts(name, help))?)
    }

    fn ratio(&self, name: &str, help: &str) -> Result<prometheus::Gauge, prometheus::Error> {
        self.register(prometheus::Gauge::with_opts(self.opts(name, help))?)
    }

    fn known(&self, name: &str, help: &str) -> Result<KnownGauge, prometheus::Error> {
        self.register(KnownGauge::new(self.opts(name, help))?)
    }

    fn histogram(
        &self,
        name: &str,
        help: &str,
        buckets: &[f64],
    ) -> Result<Histogram, prometheus::Error> {
        self.register(Histogram::with_opts(
            self.histogram_opts(name, help, buckets),
        )?)
    }

    /// One counter per label value, resolved once (a label lookup per message is
    /// measurable), every value present from the start (dashboards see zeros, not
    /// gaps).
    fn histograms<const N: usize>(
        &self,
        name: &str,
        help: &str,
        label: &str,
        values: [&str; N],
        buckets: &[f64],
    ) -> Result<[Histogram; N], prometheus::Error> {
        let opts = self.histogram_opts(name, help, buckets);
        let vec = self.register(prometheus::HistogramVec::new(opts, &[label])?)?;
        Ok(values.map(|v| vec.with_label_values(&[v])))
    }

    fn counters<const N: usize>(
        &self,
        name: &str,
        help: &str,
        label: &str,
        values: [&str; N],
    ) -> Result<[IntCounter; N], prometheus::Error> {
        let vec = self.register(IntCounterVec::new(self.opts(name, help), &[label])?)?;
        Ok(values.map(|v| vec.with_label_values(&[v])))
    }
}

/// What happens to messages: received, settled, held.
#[derive(Debug, Clone)]
struct MessageCollectors {
    received: IntCounter,
    redeliveries: IntCounter,
    settled: [IntCounter; 4],
    message_duration: Histogram,
    in_flight: IntGauge,
    buffered: IntGauge,
    concurrency_limit: IntGauge,
    saturation: prometheus::Gauge,
    settle_failures: IntCounter,
    ack_failures: IntCounter,
    retries_in_place: IntCounter,
    progress_sent: IntCounter,
    invalid: [IntCounter; 4],
    age: [Histogram; 3],
}

impl MessageCollectors {
    fn new(r: &Registrar<'_>) -> Result<MessageCollectors, prometheus::Error> {
        Ok(MessageCollectors {
            received: r.counter(
                "jetrelay_messages_received_total",
                "Messages received from JetStream",
            )?,
            redeliveries: r.counter(
                "jetrelay_redeliveries_total",
                "Messages received with a delivery count above 1",
            )?,
            settled: r.counters(
                "jetrelay_messages_settled_total",
                "Messages settled, by action",
                "action",
                [
                    SettleLabel::Ack,
                    SettleLabel::Nak,
                    SettleLabel::Term,
                    SettleLabel::Dlq,
                ]
                .map(SettleLabel::as_str),
            )?,
            message_duration: r.histogram(
                "jetrelay_message_duration_seconds",
                "Time from receipt to the completed final action",
                LATENCY_BUCKETS,
            )?,
            in_flight: r.gauge("jetrelay_in_flight", "Requests to the app in flight")?,
            buffered: r.gauge("jetrelay_buffered", "Messages held (queued and in flight)")?,
            concurrency_limit: r.gauge(
                "jetrelay_concurrency_limit",
                "Requests to the app that may run at once now (max_in_flight, or the adaptive limit)",
            )?,
            saturation: r.ratio(
                "jetrelay_saturation",
                "Requests in flight divided by the concurrency limit (above 1 for a moment after the limit falls)",
            )?,
            settle_failures: r.counter(
                "jetrelay_settle_failures_total",
                "Acks, naks or terms that could not be sent (JetStream redelivers after ack_wait)",
            )?,
            ack_failures: r.counter(
                "jetrelay_ack_failures_total",
                "Confirmed acks that the server did not confirm (may be redelivered)",
            )?,
            retries_in_place: r.counter(
                "jetrelay_retries_in_place_total",
                "Retries kept in their ordered lane (the message stays held, in order)",
            )?,
            progress_sent: r.counter(
                "jetrelay_progress_sent_total",
                "In-progress (+WPI) keep-alives sent for held messages",
            )?,
            invalid: r.counters(
                "jetrelay_invalid_messages_total",
                "Messages that could not be offered to the app (terminated, dead-lettered first when a DLQ is set), by reason",
                "reason",
                Invalid::NAMES,
            )?,
            age: r.histograms(
                "jetrelay_message_age_seconds",
                "Now minus the message's publish time (its stream timestamp), when jetrelay receives it, when its action completes, and when it is found expired",
                "stage",
                ["received", "settled", "expired"],
                AGE_BUCKETS,
            )?,
        })
    }
}

/// The app: requests, answers, health.
#[derive(Debug, Clone)]
struct AppCollectors {
    requests: [IntCounter; 6],
    duration: Histogram,
    headers_skipped: IntCounter,
    action_overrides: [IntCounter; 5],
    batch_messages: Histogram,
    batch_bad_answers: IntCounter,
    batch_unknown_ids: IntCounter,
}

impl AppCollectors {
    fn new(r: &Registrar<'_>) -> Result<AppCollectors, prometheus::Error> {
        Ok(AppCollectors {
            requests: r.counters(
                "jetrelay_http_requests_total",
                "Requests to the app, by result class",
                "class",
                HTTP_CLASSES,
            )?,
            duration: r.histogram(
                "jetrelay_http_request_duration_seconds",
                "Duration of requests to the app",
                LATENCY_BUCKETS,
            )?,
            headers_skipped: r.counter(
                "jetrelay_headers_skipped_total",
                "Message headers not forwarded because they are not valid HTTP",
            )?,
            action_overrides: r.counters(
                "jetrelay_action_overrides_total",
                "Answers whose Jetrelay-Action header decided the action, by action",
                "action",
                OVERRIDES,
            )?,
            batch_messages: r.histogram(
                "jetrelay_batch_messages",
                "Messages per request (batch delivery)",
                BATCH_BUCKETS,
            )?,
            batch_bad_answers: r.counter(
                "jetrelay_batch_bad_answers_total",
                "Answers to a batch whose body did not parse (the whole batch was retried)",
            )?,
            batch_unknown_ids: r.counter(
                "jetrelay_batch_unknown_ids_total",
                "Result ids in answers to a batch that named no message of the batch (ignored)",
            )?,
        })
    }
}

/// A source's consumer as the server sees it, and the pin.
#[derive(Debug, Clone)]
struct ConsumerCollectors {
    pinned: IntGauge,
    partitions_assigned: IntGauge,
    consumer_pending: KnownGauge,
    consumer_ack_pending: KnownGauge,
    group_backlog: KnownGauge,
    paused: IntGauge,
    app_healthy: IntGauge,
}

impl ConsumerCollectors {
    fn new(r: &Registrar<'_>) -> Result<ConsumerCollectors, prometheus::Error> {
        Ok(ConsumerCollectors {
            pinned: r.gauge("jetrelay_pinned", "1 when this instance holds the pin")?,
            partitions_assigned: r.gauge(
                "jetrelay_partitions_assigned",
                "Partitions assigned to this member",
            )?,
            consumer_pending: r.known(
                "jetrelay_consumer_pending",
                "Messages pending for the consumer (from the consumer leader's info; absent while it cannot be read)",
            )?,
            consumer_ack_pending: r.known(
                "jetrelay_consumer_ack_pending",
                "Messages delivered and not yet acknowledged (from the consumer leader's info; absent while it cannot be read)",
            )?,
            group_backlog: r.known(
                "jetrelay_group_backlog",
                "Elastic groups: messages in the group's work-queue stream, the whole group's backlog (absent while it cannot be read)",
            )?,
            paused: r.gauge(
                "jetrelay_paused",
                "1 while the consumer is paused on the server (jetrelay pause)",
            )?,
            app_healthy: r.gauge(
                "jetrelay_app_healthy",
                "1 when the source's app is healthy: reachable (a request got through), and its health URL answers (when http.health_url is set)",
            )?,
        })
    }
}

/// Processed once: what the markers suppressed, what they could not record, the
/// markers of other messages found, and the messages that expired.
#[derive(Debug, Clone)]
struct OnceCollectors {
    duplicates: IntCounter,
    marker_failures: IntCounter,
    conflicts: IntCounter,
    expired: IntCounter,
}

impl OnceCollectors {
    fn new(r: &Registrar<'_>) -> Result<OnceCollectors, prometheus::Error> {
        Ok(OnceCollectors {
            duplicates: r.counter(
                "jetrelay_duplicates_suppressed_total",
                "Deliveries whose idempotency marker was found: acked without a request",
            )?,
            marker_failures: r.counter(
                "jetrelay_idempotency_failures_total",
                "Idempotency markers that could not be written within min(ack_wait / 2, 5 s), or read: the message was acked (or sent) anyway",
            )?,
            conflicts: r.counter(
                "jetrelay_idempotency_conflicts_total",
                "Requests of a message whose idempotency key has a marker of another message (its Nats-Msg-Id re-used, or a value jetrelay did not write): sent with Jetrelay-Idempotency-Conflict",
            )?,
            expired: r.counter(
                "jetrelay_expired_total",
                "Messages whose Nats-TTL passed before they could be sent, or would before their retry: dead-lettered (reason expired), never sent",
            )?,
        })
    }
}

/// A source's dead letters, and where its routes sent its messages.
#[derive(Debug, Clone)]
struct LetterCollectors {
    dlq_failures: IntCounter,
    dead_letters_waiting: IntGauge,
    /// By route (its name, or index) and target (`app` or `skip`): label values
    /// from the source's config, a closed set.
    routed: IntCounterVec,
}

impl LetterCollectors {
    fn new(r: &Registrar<'_>) -> Result<LetterCollectors, prometheus::Error> {
        Ok(LetterCollectors {
            dlq_failures: r.counter(
                "jetrelay_dlq_failures_total",
                "Dead-letter publishes that failed (the message was retried instead)",
            )?,
            dead_letters_waiting: r.gauge(
                "jetrelay_dead_letters_waiting",
                "Messages kept on their last delivery because the DLQ does not store their dead letter yet (at most a quarter of delivery.max_buffered)",
            )?,
            routed: r.register(IntCounterVec::new(
                r.opts(
                    "jetrelay_routed_total",
                    "Messages a route took, by route and target: app (its path or URL) or skip (settled by its action, never sent)",
                ),
                &["route", "target"],
            )?)?,
        })
    }
}

/// A service source's requests, by endpoint (label values from the source's config,
/// a closed set) and class: the app's (`2xx` … `timeout`), or jetrelay's own reply
/// (`unavailable`, `shed`, `too_large`), or `no_reply` (a request nobody waits for).
#[derive(Debug, Clone)]
struct ServiceCollectors {
    requests: IntCounterVec,
    duration: prometheus::HistogramVec,
}

/// The `class` labels of `jetrelay_requests_total` besides the app's.
pub const SERVICE_CLASSES: [&str; 4] = ["unavailable", "shed", "too_large", "no_reply"];

impl ServiceCollectors {
    fn new(r: &Registrar<'_>) -> Result<ServiceCollectors, prometheus::Error> {
        Ok(ServiceCollectors {
            requests: r.register(IntCounterVec::new(
                r.opts(
                    "jetrelay_requests_total",
                    "NATS requests a service source took, by endpoint and class: the app's answer (2xx, 3xx, 4xx, 5xx, error, timeout), or jetrelay's own reply (unavailable: the app unhealthy, unreachable or draining; shed: too many requests waiting; too_large: over max_reply_bytes), or no_reply (no reply subject)",
                ),
                &["endpoint", "class"],
            )?)?,
            duration: r.register(prometheus::HistogramVec::new(
                r.histogram_opts(
                    "jetrelay_request_duration_seconds",
                    "NATS requests a service source took, receipt to reply, by endpoint",
                    LATENCY_BUCKETS,
                ),
                &["endpoint"],
            )?)?,
        })
    }
}

/// The process: the connection, readiness, the app's health, reloads, what the
/// telemetry dropped.
#[derive(Debug, Clone)]
struct ProcessCollectors {
    nats_connected: IntGauge,
    ready: IntGauge,
    reloads: [IntCounter; 2],
    spans_dropped: IntCounter,
    log_lines_dropped: IntCounter,
    /// By `TraceHeader` then `Reason`, in `Dropped`'s order: the sources' requests
    /// and the publish endpoint's alike.
    trace_dropped: [[IntCounter; 2]; 3],
}

impl ProcessCollectors {
    fn new(r: &Registrar<'_>) -> Result<ProcessCollectors, prometheus::Error> {
        Ok(ProcessCollectors {
            nats_connected: r.gauge("jetrelay_nats_connected", "1 when connected to NATS")?,
            ready: r.gauge("jetrelay_ready", "1 when ready (every source is)")?,
            reloads: r.counters(
                "jetrelay_config_reloads_total",
                "Config reloads (SIGHUP): applied, or refused (the running config stays)",
                "result",
                ["applied", "refused"],
            )?,
            spans_dropped: r.counter(
                "jetrelay_otel_spans_dropped_total",
                "Spans not exported: the export queue was full, or the collector did not take them",
            )?,
            log_lines_dropped: r.counter(
                "jetrelay_log_lines_dropped_total",
                "Log lines dropped because stderr did not take them (a pipe nobody reads): logging never holds up delivery",
            )?,
            trace_dropped: {
                let vec = r.register(IntCounterVec::new(
                    r.opts(
                        "jetrelay_trace_headers_dropped_total",
                        "Message trace headers not sent to the app (nor carried to its outputs): over the W3C limits, or malformed; per request",
                    ),
                    &["header", "reason"],
                )?)?;
                TraceHeader::ALL.map(|h| Reason::ALL.map(|w| vec.with_label_values(&[h.name(), w.name()])))
            },
        })
    }
}

/// What jetrelay publishes: dead letters, and the app's outputs.
#[derive(Debug, Clone)]
struct PublishCollectors {
    published: [IntCounter; 2],
    failures: [IntCounter; PUBLISH_FAILURES.len()],
}

impl PublishCollectors {
    fn new(r: &Registrar<'_>) -> Result<PublishCollectors, prometheus::Error> {
        Ok(PublishCollectors {
            published: r.counters(
                "jetrelay_published_total",
                "Messages the app published through jetrelay and the stream stored, by where from",
                "via",
                ["answer", "endpoint"],
            )?,
            failures: r.counters(
                "jetrelay_publish_failures_total",
                "Publishes by the app that were refused or failed, by reason",
                "reason",
                PUBLISH_FAILURES,
            )?,
        })
    }
}

/// The process's collectors, and the registry every source's are added to. Cheap
/// to clone (every collector is shared).
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Registry,
    process: ProcessCollectors,
    publishing: PublishCollectors,
    /// Every source's settled, released and abandoned messages, not exported: what
    /// a drain did is the difference of two readings ([`Metrics::tally`]).
    tally: Arc<Tally>,
}

/// What every source settled, released and abandoned since the start (a drain's
/// answer counts its part of them).
#[derive(Debug, Default)]
struct Tally {
    settled: AtomicU64,
    released: AtomicU64,
    abandoned: AtomicU64,
}

/// A reading of the process's tally (`Tally`): messages settled after a request,
/// released without one, and left unfinished when a drain's grace ran out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tallied {
    /// Settled after the app's answer (or its failure).
    pub settled: u64,
    /// Released (NAK without a decision).
    pub released: u64,
    /// Left unfinished when the grace ran out (redelivered after `ack_wait`).
    pub abandoned: u64,
}

impl Tallied {
    /// What happened between `before` and this reading.
    pub fn since(self, before: Tallied) -> Tallied {
        Tallied {
            settled: self.settled.saturating_sub(before.settled),
            released: self.released.saturating_sub(before.released),
            abandoned: self.abandoned.saturating_sub(before.abandoned),
        }
    }
}

/// A source's counts since the process started, as `$SRV.STATS` reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SourceCounts {
    /// Messages received from JetStream.
    pub received: u64,
    /// Acked.
    pub acked: u64,
    /// Naked (retried later, or released).
    pub retried: u64,
    /// Terminated.
    pub terminated: u64,
    /// Dead-lettered.
    pub dead_lettered: u64,
    /// Time from receipt to the final action, summed over `processed` messages.
    pub processing: Duration,
    /// Messages whose final action completed.
    pub processed: u64,
    /// Requests to the app in flight now.
    pub in_flight: u64,
}

/// One source's collectors: every series about its messages, its requests to the
/// app, its consumer or group and its dead letters carries `source="<name>"`. Cheap
/// to clone.
#[derive(Debug, Clone)]
pub struct SourceMetrics {
    flow: MessageCollectors,
    app: AppCollectors,
    consumer: ConsumerCollectors,
    letters: LetterCollectors,
    once: OnceCollectors,
    service: ServiceCollectors,
    /// The process's, for what is not the source's own (the outputs published, the
    /// app's health).
    process: Metrics,
    /// Every collector registered for it, for [`Metrics::remove_source`].
    registered: Registered,
}

/// A source's registered collectors (shown in `Debug` by their count).
#[derive(Clone, Default)]
struct Registered(Arc<std::sync::Mutex<Vec<Box<dyn Collector>>>>);

impl std::fmt::Debug for Registered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.0.lock().map_or(0, |v| v.len());
        write!(f, "{n} collectors")
    }
}

/// A count as a gauge value (saturating).
fn gauge_value(n: impl TryInto<i64>) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}

impl Metrics {
    /// Creates and registers every collector in a fresh registry.
    ///
    /// # Errors
    /// [`MetricsError`] (a programming error: a duplicate name).
    pub fn new() -> Result<Metrics, MetricsError> {
        let registry = Registry::new();
        let r = Registrar {
            registry: &registry,
            source: None,
            kept: Default::default(),
        };
        let build_info = r.register(IntGaugeVec::new(
            Opts::new("jetrelay_build_info", "Build information"),
            &["version"],
        )?)?;
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        let (process, publishing) = (ProcessCollectors::new(&r)?, PublishCollectors::new(&r)?);
        Ok(Metrics {
            registry,
            process,
            publishing,
            tally: Arc::default(),
        })
    }

    /// Every source's settled, released and abandoned messages so far.
    pub fn tally(&self) -> Tallied {
        Tallied {
            settled: self.tally.settled.load(Ordering::Acquire),
            released: self.tally.released.load(Ordering::Acquire),
            abandoned: self.tally.abandoned.load(Ordering::Acquire),
        }
    }

    /// Registers the collectors of the source `name`, every series labelled
    /// `source="<name>"`.
    ///
    /// # Errors
    /// [`MetricsError`] when a source of that name was registered already.
    pub fn source(&self, name: &str) -> Result<SourceMetrics, MetricsError> {
        let r = Registrar {
            registry: &self.registry,
            source: Some(name),
            kept: Default::default(),
        };
        let built = (|| {
            Ok::<_, prometheus::Error>((
                MessageCollectors::new(&r)?,
                AppCollectors::new(&r)?,
                ConsumerCollectors::new(&r)?,
                LetterCollectors::new(&r)?,
                OnceCollectors::new(&r)?,
                ServiceCollectors::new(&r)?,
            ))
        })();
        let registered = Registered(Arc::new(std::sync::Mutex::new(r.kept.into_inner())));
        let (flow, app, consumer, letters, once, service) = match built {
            Ok(b) => b,
            Err(e) => {
                // Half registered: none of it stays (the name can be tried again).
                self.unregister(&registered);
                return Err(e.into());
            }
        };
        Ok(SourceMetrics {
            flow,
            app,
            consumer,
            letters,
            once,
            service,
            process: self.clone(),
            registered,
        })
    }

    /// Unregisters a source's collectors (a reload removed it): its series leave
    /// the exposition, and its name may be registered again.
    pub fn remove_source(&self, source: &SourceMetrics) {
        self.unregister(&source.registered);
    }

    fn unregister(&self, registered: &Registered) {
        let taken = match registered.0.lock() {
            Ok(mut kept) => std::mem::take(&mut *kept),
            Err(poisoned) => std::mem::take(&mut *poisoned.into_inner()),
        };
        for c in taken {
            // Only this module registers them: each is there once.
            self.registry.unregister(c).ok();
        }
    }

    /// `n` spans were not exported.
    pub fn spans_dropped(&self, n: u64) {
        self.process.spans_dropped.inc_by(n);
    }

    /// `total` log lines were dropped since the start (the logger's own count, read
    /// when the metrics are rendered).
    pub fn log_lines_dropped(&self, total: u64) {
        let counter = &self.process.log_lines_dropped;
        counter.inc_by(total.saturating_sub(counter.get()));
    }

    /// A request to the app left out a message's trace headers: over the W3C
    /// limits, or malformed.
    pub fn trace_headers_dropped(&self, dropped: &Dropped) {
        for (h, r, n) in dropped.counts() {
            let (hi, ri) = (
                TraceHeader::ALL.iter().position(|x| *x == h).unwrap_or(0),
                Reason::ALL.iter().position(|x| *x == r).unwrap_or(0),
            );
            self.process.trace_dropped[hi][ri].inc_by(u64::from(n));
        }
    }

    /// A config reload was applied (`true`) or refused.
    pub fn config_reload(&self, applied: bool) {
        self.process.reloads[usize::from(!applied)].inc();
    }

    /// Whether the connection to NATS is up.
    pub fn nats_connected(&self, connected: bool) {
        self.process.nats_connected.set(i64::from(connected));
    }

    /// Whether the daemon is ready.
    pub fn ready(&self, ready: bool) {
        self.process.ready.set(i64::from(ready));
    }

    /// `n` messages the app published were stored.
    pub fn published(&self, via: Via, n: u64) {
        self.publishing.published[via as usize].inc_by(n);
    }

    /// One refused or failed publish; `reason` is one of [`PUBLISH_FAILURES`]
    /// (anything else counts as `rejected`).
    pub fn publish_failed(&self, reason: &str) {
        let at = PUBLISH_FAILURES
            .iter()
            .position(|r| *r == reason)
            .unwrap_or(PUBLISH_FAILURES.len() - 1);
        self.publishing.failures[at].inc();
    }

    /// The value of one series in the exposition (`jetrelay_ready`,
    /// `jetrelay_messages_settled_total{action="ack"}`), when it is exposed: the sum
    /// of every series of that name whose labels include the ones given (so
    /// `jetrelay_messages_received_total` is every source's).
    #[cfg(test)]
    pub(crate) fn sample(&self, series: &str) -> Option<f64> {
        sum_of(&self.render(), series)
    }

    /// Each source's counts, by source name, read from the registry (sources a
    /// reload added or removed included).
    pub fn source_counts(&self) -> std::collections::BTreeMap<String, SourceCounts> {
        let mut out: std::collections::BTreeMap<String, SourceCounts> = Default::default();
        for family in self.registry.gather() {
            for m in family.get_metric() {
                let label = |name: &str| {
                    m.get_label()
                        .iter()
                        .find(|l| l.name() == name)
                        .map(|l| l.value().to_string())
                };
                let Some(source) = label("source") else {
                    continue;
                };
                let c = out.entry(source).or_default();
                let counter = m.get_counter().get_value() as u64;
                match (family.name(), label("action").as_deref()) {
                    ("jetrelay_messages_received_total", _) => c.received = counter,
                    ("jetrelay_messages_settled_total", Some("ack")) => c.acked = counter,
                    ("jetrelay_messages_settled_total", Some("nak")) => c.retried = counter,
                    ("jetrelay_messages_settled_total", Some("term")) => c.terminated = counter,
                    ("jetrelay_messages_settled_total", Some("dlq")) => c.dead_lettered = counter,
                    ("jetrelay_message_duration_seconds", _) => {
                        let h = m.get_histogram();
                        c.processing = Duration::from_secs_f64(h.get_sample_sum().max(0.0));
                        c.processed = h.get_sample_count();
                    }
                    ("jetrelay_in_flight", _) => c.in_flight = m.get_gauge().get_value() as u64,
                    _ => {}
                }
            }
        }
        out
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        self.log_lines_dropped(super::telemetry::lines_dropped());
        let mut buf = Vec::new();
        // Encoding into a Vec cannot fail for well-formed collectors.
        if TextEncoder::new()
            .encode(&self.registry.gather(), &mut buf)
            .is_err()
        {
            return String::new();
        }
        String::from_utf8(buf).unwrap_or_default()
    }
}

/// The sum of the samples in `text` (the exposition) of `series`: a name, with
/// labels (`name{a="x"}`) that each sample counted must have among its own.
/// `None` when no sample is there. The tests read `/metrics` with it, as the unit
/// tests read the registry.
pub fn sum_of(text: &str, series: &str) -> Option<f64> {
    let (name, wanted) = match series.split_once('{') {
        Some((n, rest)) => (n, rest.trim_end_matches('}')),
        None => (series, ""),
    };
    let wanted: Vec<&str> = wanted.split(',').filter(|l| !l.is_empty()).collect();
    let mut found = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((head, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let (n, labels) = match head.split_once('{') {
            Some((n, rest)) => (n, rest.trim_end_matches('}')),
            None => (head, ""),
        };
        let has: Vec<&str> = labels.split(',').collect();
        if n == name
            && wanted.iter().all(|w| has.contains(w))
            && let Ok(v) = value.parse::<f64>()
        {
            found = Some(found.unwrap_or(0.0) + v);
        }
    }
    found
}

impl SourceMetrics {
    /// The process's collectors.
    pub fn process(&self) -> &Metrics {
        &self.process
    }

    // === messages ===

    /// A message came from JetStream (`redelivered`: its delivery count is above 1).
    pub fn received(&self, redelivered: bool) {
        self.flow.received.inc();
        if redelivered {
            self.flow.redeliveries.inc();
        }
    }

    /// What is held now: messages (queued and in flight) and requests in flight.
    pub fn held(&self, messages: u32, requests: usize) {
        self.flow.buffered.set(i64::from(messages));
        self.flow.in_flight.set(gauge_value(requests));
    }

    /// The concurrency limit in force, and the requests in flight under it.
    pub fn pace(&self, limit: usize, in_flight: usize) {
        self.flow.concurrency_limit.set(gauge_value(limit));
        self.flow
            .saturation
            .set(in_flight as f64 / limit.max(1) as f64);
    }

    /// A message was settled with `action`, `since` after it was received.
    pub fn settled(&self, action: SettleLabel, since: Duration) {
        self.process.tally.settled.fetch_add(1, Ordering::AcqRel);
        self.flow.settled[action as usize].inc();
        self.flow.message_duration.observe(since.as_secs_f64());
    }

    /// `n` messages were released (NAK) without a decision: at shutdown, a quiesce.
    pub fn released(&self, n: u64) {
        self.process.tally.released.fetch_add(n, Ordering::AcqRel);
        self.flow.settled[SettleLabel::Nak as usize].inc_by(n);
    }

    /// `n` messages were left unfinished when the shutdown's (or a drain's) grace
    /// ran out: JetStream redelivers them after `ack_wait`.
    pub fn abandoned(&self, n: usize) {
        let n = u64::try_from(n).unwrap_or(u64::MAX);
        self.process.tally.abandoned.fetch_add(n, Ordering::AcqRel);
    }

    /// `n` acks, naks or terms could not be sent.
    pub fn settle_failed(&self, n: u64) {
        self.flow.settle_failures.inc_by(n);
    }

    /// A confirmed ack was not confirmed.
    pub fn ack_not_confirmed(&self) {
        self.flow.ack_failures.inc();
    }

    /// A retry stays in its ordered lane.
    pub fn retried_in_place(&self) {
        self.flow.retries_in_place.inc();
    }

    /// A `+WPI` was sent for a held message.
    pub fn progress_sent(&self) {
        self.flow.progress_sent.inc();
    }

    /// A message's age (now − its publish time) at `stage`.
    pub fn message_age(&self, stage: AgeStage, age: Duration) {
        self.flow.age[stage as usize].observe(age.as_secs_f64());
    }

    /// A message expired before it could be sent (or before its retry), `age` after
    /// its publish time.
    pub fn expired(&self, age: Option<Duration>) {
        self.once.expired.inc();
        if let Some(age) = age {
            self.message_age(AgeStage::Expired, age);
        }
    }

    /// A delivery's idempotency marker was found: acked without a request.
    pub fn duplicate_suppressed(&self) {
        self.once.duplicates.inc();
    }

    /// An idempotency marker could not be written (the message was acked anyway) or
    /// read (the message was sent).
    pub fn idempotency_failed(&self) {
        self.once.marker_failures.inc();
    }

    /// A message whose key has a marker of another message was sent to the app, with
    /// `Jetrelay-Idempotency-Conflict`.
    pub fn idempotency_conflict(&self) {
        self.once.conflicts.inc();
    }

    /// A message could not be offered to the app.
    pub fn invalid(&self, why: &Invalid) {
        let at = Invalid::NAMES
            .iter()
            .position(|n| *n == why.name())
            .unwrap_or(0);
        self.flow.invalid[at].inc();
    }

    // === the app ===

    /// A request to the app ended: its class, how long it took, and how many of the
    /// message's headers were not sent (not valid HTTP).
    pub fn request(&self, class: HttpClass, took: Duration, headers_skipped: usize) {
        self.app.requests[class_index(class)].inc();
        self.app.duration.observe(took.as_secs_f64());
        if headers_skipped > 0 {
            self.app.headers_skipped.inc_by(headers_skipped as u64);
        }
    }

    /// A request to the app left out a message's trace headers (the process's
    /// counter, which the publish endpoint shares).
    pub fn trace_headers_dropped(&self, dropped: &Dropped) {
        self.process.trace_headers_dropped(dropped);
    }

    /// A batch of `messages` was sent in one request.
    pub fn batch_sent(&self, messages: usize) {
        self.app.batch_messages.observe(messages as f64);
    }

    /// An answer to a batch did not parse.
    pub fn batch_unparsable(&self) {
        self.app.batch_bad_answers.inc();
    }

    /// An answer to a batch named `n` ids of no message it carried.
    pub fn batch_unknown_ids(&self, n: usize) {
        self.app.batch_unknown_ids.inc_by(n as u64);
    }

    /// A `Jetrelay-Action` override (`invalid` for a value not understood).
    pub fn action_override(&self, action: &str) {
        if let Some(at) = OVERRIDES.iter().position(|a| *a == action) {
            self.app.action_overrides[at].inc();
        }
    }

    /// Whether the source's app is healthy (reachable, and its health URL answers).
    pub fn app_healthy(&self, healthy: bool) {
        self.consumer.app_healthy.set(i64::from(healthy));
    }

    // === the source ===

    /// Whether the consumer is paused on the server.
    pub fn paused(&self, paused: bool) {
        self.consumer.paused.set(i64::from(paused));
    }

    /// Whether this instance holds the pin.
    pub fn pinned(&self, pinned: bool) {
        self.consumer.pinned.set(i64::from(pinned));
    }

    /// How many partitions this member has.
    pub fn partitions_assigned(&self, n: usize) {
        self.consumer.partitions_assigned.set(gauge_value(n));
    }

    /// The consumer's pending and ack-pending counts as the server says them, or
    /// `None`: not known now (the gauges are withdrawn, never left at an old value).
    pub fn consumer_counts(&self, counts: Option<(u64, u64)>) {
        let (p, a) = (
            &self.consumer.consumer_pending,
            &self.consumer.consumer_ack_pending,
        );
        match counts {
            Some((pending, ack_pending)) => {
                p.set(pending);
                a.set(ack_pending);
            }
            None => {
                p.forget();
                a.forget();
            }
        }
    }

    /// An elastic group's backlog (its work-queue stream's messages), or `None`.
    pub fn group_backlog(&self, backlog: Option<u64>) {
        match backlog {
            Some(n) => self.consumer.group_backlog.set(n),
            None => self.consumer.group_backlog.forget(),
        }
    }

    // === publishing ===

    /// A dead letter was not stored (the message is retried or kept instead).
    pub fn dead_letter_failed(&self) {
        self.letters.dlq_failures.inc();
    }

    /// A service source's endpoint took a request of `class` (an [`HttpClass`]'s
    /// label, or one of [`SERVICE_CLASSES`]) and replied after `took` (a reply
    /// sent counts as settled in the process's tally: a drain's answer counts it).
    pub fn service_request(&self, endpoint: &str, class: &str, took: Duration) {
        let s = &self.service;
        s.requests.with_label_values(&[endpoint, class]).inc();
        if class != "no_reply" {
            self.process.tally.settled.fetch_add(1, Ordering::AcqRel);
        }
        s.duration
            .with_label_values(&[endpoint])
            .observe(took.as_secs_f64());
    }

    /// A route took a message: to its target (`app`) or its action (`skip`).
    pub fn routed(&self, route: &str, target: &str) {
        self.letters
            .routed
            .with_label_values(&[route, target])
            .inc();
    }

    /// How many messages wait on their last delivery for their dead letter.
    pub fn dead_letters_waiting(&self, n: usize) {
        self.letters.dead_letters_waiting.set(gauge_value(n));
    }

    /// `n` messages the app published in answers were stored (the process's
    /// counter).
    pub fn published(&self, n: u64) {
        self.process.published(Via::Answer, n);
    }

    /// One refused or failed publish of an answer's outputs (the process's counter).
    pub fn publish_failed(&self, reason: &str) {
        self.process.publish_failed(reason);
    }

    /// Renders the whole registry (the process's and every source's).
    #[cfg(test)]
    pub(crate) fn render(&self) -> String {
        self.process.render()
    }

    /// A series' value, as [`Metrics::sample`].
    #[cfg(test)]
    pub(crate) fn sample(&self, series: &str) -> Option<f64> {
        self.process.sample(series)
    }
}

/// The `class` label of an app's result.
pub fn class_name(class: HttpClass) -> &'static str {
    HTTP_CLASSES[class_index(class)]
}

/// The position of a class's label in `HTTP_CLASSES`.
fn class_index(class: HttpClass) -> usize {
    match class {
        HttpClass::Status(s) if (200..300).contains(&s) => 0,
        HttpClass::Status(s) if (400..500).contains(&s) => 2,
        HttpClass::Status(s) if s >= 500 => 3,
        HttpClass::Status(_) => 1,
        HttpClass::Error => 4,
        HttpClass::Timeout => 5,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gauge_not_known_is_not_exposed() {
        let m = Metrics::new().unwrap().source("default").unwrap();
        assert!(!m.render().contains("jetrelay_consumer_pending"));
        m.consumer_counts(Some((7, 1)));
        assert!(
            m.render()
                .contains("jetrelay_consumer_pending{source=\"default\"} 7")
        );
        m.consumer_counts(None);
        assert!(
            !m.render().contains("jetrelay_consumer_pending"),
            "no stale value"
        );
        assert_eq!(m.consumer.consumer_pending.get(), None);
    }

    #[test]
    fn every_publish_failure_has_its_label() {
        use crate::outputs::Refusal;
        let refusals = [
            Refusal::Malformed(String::new()),
            Refusal::NotAllowed(String::new()),
            Refusal::TooMany { max: 1 },
            Refusal::TooManyHeaders { max: 1 },
        ];
        for r in refusals {
            assert!(PUBLISH_FAILURES.contains(&r.label()), "{}", r.label());
        }
    }

    #[test]
    fn the_dropped_log_lines_follow_the_loggers_count_and_never_fall() {
        let m = Metrics::new().unwrap();
        for (total, shown) in [(0, 0), (7, 7), (7, 7), (3, 7), (12, 12)] {
            m.log_lines_dropped(total);
            assert_eq!(m.process.log_lines_dropped.get(), shown, "{total}");
        }
    }

    #[test]
    fn every_documented_name_is_exposed() {
        let m = Metrics::new().unwrap().source("default").unwrap();
        m.settled(SettleLabel::Term, Duration::ZERO);
        m.consumer_counts(Some((5, 1)));
        m.group_backlog(Some(9));
        m.request(HttpClass::Status(503), Duration::ZERO, 0);
        m.request(HttpClass::Status(101), Duration::ZERO, 0);
        let mut dropped = Dropped::default();
        dropped.add(TraceHeader::Baggage, Reason::Oversized);
        dropped.add(TraceHeader::Baggage, Reason::Oversized);
        m.trace_headers_dropped(&dropped);
        let text = m.render();
        for name in [
            "jetrelay_messages_received_total",
            "jetrelay_messages_settled_total{action=\"ack\",source=\"default\"} 0",
            "jetrelay_messages_settled_total{action=\"term\",source=\"default\"} 1",
            "jetrelay_redeliveries_total",
            "jetrelay_http_requests_total{class=\"5xx\",source=\"default\"} 1",
            "jetrelay_http_requests_total{class=\"3xx\",source=\"default\"} 1",
            "jetrelay_http_request_duration_seconds_bucket",
            "jetrelay_message_duration_seconds_bucket",
            "jetrelay_in_flight",
            "jetrelay_buffered",
            "jetrelay_pinned",
            "jetrelay_partitions_assigned",
            "jetrelay_consumer_pending{source=\"default\"} 5",
            "jetrelay_consumer_ack_pending{source=\"default\"} 1",
            "jetrelay_group_backlog{source=\"default\"} 9",
            "jetrelay_paused{source=\"default\"} 0",
            "jetrelay_config_reloads_total{result=\"applied\"} 0",
            "jetrelay_config_reloads_total{result=\"refused\"} 0",
            "jetrelay_nats_connected",
            "jetrelay_ready",
            "jetrelay_build_info{version=",
            "jetrelay_retries_in_place_total",
            "jetrelay_progress_sent_total",
            "jetrelay_dlq_failures_total",
            "jetrelay_dead_letters_waiting{source=\"default\"} 0",
            "jetrelay_action_overrides_total{action=\"dlq\",source=\"default\"} 0",
            "jetrelay_app_healthy",
            "jetrelay_invalid_messages_total{reason=\"malformed_headers\",source=\"default\"} 0",
            "jetrelay_batch_messages_bucket",
            "jetrelay_batch_bad_answers_total",
            "jetrelay_batch_unknown_ids_total",
            "jetrelay_published_total{via=\"answer\"} 0",
            "jetrelay_published_total{via=\"endpoint\"} 0",
            "jetrelay_publish_failures_total{reason=\"not_allowed\"} 0",
            "jetrelay_log_lines_dropped_total 0",
            "jetrelay_publish_failures_total{reason=\"too_many_batches\"} 0",
            "jetrelay_trace_headers_dropped_total{header=\"baggage\",reason=\"oversized\"} 2",
            "jetrelay_trace_headers_dropped_total{header=\"tracestate\",reason=\"malformed\"} 0",
            "jetrelay_trace_headers_dropped_total{header=\"traceparent\",reason=\"oversized\"} 0",
            "jetrelay_duplicates_suppressed_total{source=\"default\"} 0",
            "jetrelay_idempotency_failures_total{source=\"default\"} 0",
            "jetrelay_idempotency_conflicts_total{source=\"default\"} 0",
            "jetrelay_expired_total{source=\"default\"} 0",
            "jetrelay_message_age_seconds_count{source=\"default\",stage=\"expired\"} 0",
        ] {
            assert!(text.contains(name), "{name} missing from\n{text}");
        }
    }

    #[test]
    fn each_source_counts_under_its_own_label_and_a_name_registers_once() {
        let process = Metrics::new().unwrap();
        let (a, b) = (
            process.source("orders").unwrap(),
            process.source("audit").unwrap(),
        );
        a.received(false);
        a.received(true);
        b.received(false);
        let text = process.render();
        for series in [
            "jetrelay_messages_received_total{source=\"orders\"} 2",
            "jetrelay_messages_received_total{source=\"audit\"} 1",
            "jetrelay_redeliveries_total{source=\"orders\"} 1",
            "jetrelay_redeliveries_total{source=\"audit\"} 0",
        ] {
            assert!(text.contains(series), "{series} missing from\n{text}");
        }
        assert_eq!(
            process.sample("jetrelay_messages_received_total"),
            Some(3.0)
        );
        assert!(process.source("orders").is_err(), "a second orders");
        // Removed, its series go, and the name may come back.
        process.remove_source(&a);
        let text = process.render();
        assert!(!text.contains("source=\"orders\""), "{text}");
        assert!(text.contains("source=\"audit\""), "{text}");
        let again = process.source("orders").unwrap();
        again.received(false);
        assert_eq!(
            process.sample("jetrelay_messages_received_total{source=\"orders\"}"),
            Some(1.0)
        );
    }
}
