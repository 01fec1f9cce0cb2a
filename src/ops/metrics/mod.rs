//! Every Prometheus collector, registered into a registry the caller owns (never the
//! global default), behind methods named for what happened (`received`, `settled`,
//! `request`, ...): no collector is reachable from outside, and no `prometheus` type
//! leaves this module. Metric names, help texts and label sets are defined here and
//! only here, each family in the file of the group of collectors it belongs to: a
//! source's messages (`messages`), its requests to the app (`app`), its consumer
//! (`consumer`), processed once (`once`), its dead letters and routes (`letters`), a
//! service source's requests (`service`); the process's own (`process`), what the app
//! publishes (`publish`), and what the sources did, read back (`tally`); the
//! scaler's own (`scaler`, a registry of its own). This file
//! holds the registry: how collectors are registered, a source's added and removed,
//! and the exposition rendered.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
    TextEncoder,
};

/// Methods of [`SourceMetrics`] that each count one event on one counter: each
/// method's doc and name, then its group of collectors and the counter.
macro_rules! one_event {
    ($($(#[$doc:meta])* $name:ident => $group:ident.$counter:ident;)+) => {
        impl SourceMetrics {
            $(
                $(#[$doc])*
                pub fn $name(&self) {
                    self.$group.$counter.inc();
                }
            )+
        }
    };
}

mod app;
mod consumer;
mod letters;
mod messages;
mod once;
pub use self::once::ExpiredBy;
mod otlp;
mod process;
mod publish;
mod scaler;
mod service;
mod tally;

pub use self::app::class_name;
pub use self::messages::{AgeStage, SettleLabel};
pub use self::publish::{PUBLISH_FAILURES, Via};
pub use self::scaler::ScalerMetrics;
pub use self::service::SERVICE_CLASSES;
pub use self::tally::{SourceCounts, Tallied};

use self::app::AppCollectors;
use self::consumer::ConsumerCollectors;
use self::letters::LetterCollectors;
use self::messages::MessageCollectors;
use self::once::OnceCollectors;
use self::process::ProcessCollectors;
use self::publish::PublishCollectors;
use self::service::ServiceCollectors;
use self::tally::Tally;

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

const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

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

    /// One histogram per label value, as [`Registrar::counters`].
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

    /// One counter per label value, resolved once (a label lookup per message is
    /// measurable), every value present from the start (dashboards see zeros, not
    /// gaps).
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
    /// trace headers dropped, the tally).
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
        let (process, publishing) = (ProcessCollectors::new(&r)?, PublishCollectors::new(&r)?);
        Ok(Metrics {
            registry,
            process,
            publishing,
            tally: Arc::default(),
        })
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

    /// The value of one series in the exposition (`jetrelay_ready`,
    /// `jetrelay_messages_settled_total{action="ack"}`), when it is exposed: the sum
    /// of every series of that name whose labels include the ones given (so
    /// `jetrelay_messages_received_total` is every source's).
    #[cfg(test)]
    pub(crate) fn sample(&self, series: &str) -> Option<f64> {
        sum_of(&self.render(), series)
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        encode(&self.gather())
    }

    /// Every family as it is now, what the log dropped counted first: what
    /// `/metrics` shows and OTLP exports.
    fn gather(&self) -> Vec<MetricFamily> {
        self.log_lines_dropped(super::telemetry::lines_dropped());
        self.registry.gather()
    }
}

/// The text exposition of `families` (a registry's).
fn encode(families: &[MetricFamily]) -> String {
    let mut buf = Vec::new();
    // Encoding into a Vec cannot fail for well-formed collectors.
    if TextEncoder::new().encode(families, &mut buf).is_err() {
        return String::new();
    }
    String::from_utf8(buf).unwrap_or_default()
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::seam::HttpClass;
    use crate::trace::context::{Dropped, Reason, TraceHeader};

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
            "jetrelay_expired_total{reason=\"max_age\",source=\"default\"} 0",
            "jetrelay_expired_total{reason=\"ttl\",source=\"default\"} 0",
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
