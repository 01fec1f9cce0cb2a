//! What `/metrics` shows, as OTLP metrics: every family of the registry, named after
//! OpenTelemetry's messaging conventions where one exists
//! (`messaging.client.consumed.messages`, `messaging.process.duration`) and
//! `jetrelay.<name>` otherwise (the Prometheus name without its `jetrelay_` prefix and
//! its `_total` or unit suffix). Counters are cumulative monotonic sums, gauges
//! gauges, histograms cumulative histograms; labels are attributes.

use prometheus::proto::{MetricFamily, MetricType};

use super::Metrics;
use crate::trace::encode::{HistogramPoint, Metric, MetricData, NumberPoint};

impl Metrics {
    /// Every metric `/metrics` shows, as OTLP exports it.
    pub fn otlp(&self) -> Vec<Metric> {
        self.gather().iter().filter_map(metric).collect()
    }
}

/// The OTLP name and unit of a Prometheus metric name.
fn otel_name(prometheus: &str) -> (String, &'static str) {
    match prometheus {
        "jetrelay_messages_received_total" => {
            ("messaging.client.consumed.messages".into(), "{message}")
        }
        "jetrelay_message_duration_seconds" => ("messaging.process.duration".into(), "s"),
        other => {
            // Every name is jetrelay's: the first word is the prefix.
            let bare = other.split_once('_').map_or(other, |(_, rest)| rest);
            let (bare, unit) = match bare.strip_suffix("_seconds") {
                Some(b) => (b, "s"),
                None => (bare.strip_suffix("_total").unwrap_or(bare), ""),
            };
            (format!("jetrelay.{bare}"), unit)
        }
    }
}

/// One family as an OTLP metric; `None` for a kind OTLP has no plain form of here.
fn metric(f: &MetricFamily) -> Option<Metric> {
    let (name, unit) = otel_name(f.name());
    let attributes = |m: &prometheus::proto::Metric| -> Vec<(String, String)> {
        m.get_label()
            .iter()
            .map(|l| (l.name().to_string(), l.value().to_string()))
            .collect()
    };
    let number = |value: fn(&prometheus::proto::Metric) -> f64| -> Vec<NumberPoint> {
        f.get_metric()
            .iter()
            .map(|m| NumberPoint {
                attributes: attributes(m),
                value: value(m),
            })
            .collect()
    };
    let data = match f.get_field_type() {
        MetricType::COUNTER => MetricData::Sum(number(|m| m.get_counter().get_value())),
        MetricType::GAUGE => MetricData::Gauge(number(|m| m.get_gauge().get_value())),
        MetricType::HISTOGRAM => MetricData::Histogram(
            f.get_metric()
                .iter()
                .map(|m| {
                    let h = m.get_histogram();
                    let (bounds, counts) = buckets(
                        h.get_bucket()
                            .iter()
                            .map(|b| (b.upper_bound(), b.cumulative_count())),
                        h.get_sample_count(),
                    );
                    HistogramPoint {
                        attributes: attributes(m),
                        count: h.get_sample_count(),
                        sum: h.get_sample_sum(),
                        bounds,
                        counts,
                    }
                })
                .collect(),
        ),
        MetricType::SUMMARY | MetricType::UNTYPED => return None,
    };
    Some(Metric {
        name,
        description: f.help().to_string(),
        unit: unit.to_string(),
        data,
    })
}

/// Prometheus's cumulative buckets (upper bound, values at or below it) as OTLP's
/// bounds and per-bucket counts, the last bucket above every bound (`total` in all).
fn buckets(cumulative: impl Iterator<Item = (f64, u64)>, total: u64) -> (Vec<f64>, Vec<u64>) {
    let (mut bounds, mut counts, mut below) = (Vec::new(), Vec::new(), 0u64);
    for (bound, at_or_below) in cumulative.filter(|(b, _)| b.is_finite()) {
        bounds.push(bound);
        counts.push(at_or_below.saturating_sub(below));
        below = below.max(at_or_below);
    }
    counts.push(total.saturating_sub(below));
    (bounds, counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_table() {
        for (prometheus, otel, unit) in [
            (
                "jetrelay_messages_received_total",
                "messaging.client.consumed.messages",
                "{message}",
            ),
            (
                "jetrelay_message_duration_seconds",
                "messaging.process.duration",
                "s",
            ),
            (
                "jetrelay_messages_settled_total",
                "jetrelay.messages_settled",
                "",
            ),
            (
                "jetrelay_http_request_duration_seconds",
                "jetrelay.http_request_duration",
                "s",
            ),
            ("jetrelay_in_flight", "jetrelay.in_flight", ""),
        ] {
            assert_eq!(
                otel_name(prometheus),
                (otel.to_string(), unit),
                "{prometheus}"
            );
        }
    }

    #[test]
    fn cumulative_buckets_become_counts_per_bucket() {
        let (bounds, counts) = buckets(
            [(0.1, 2), (1.0, 5), (10.0, 5), (f64::INFINITY, 9)].into_iter(),
            9,
        );
        assert_eq!(bounds, [0.1, 1.0, 10.0]);
        assert_eq!(counts, [2, 3, 0, 4]);
        assert_eq!(counts.iter().sum::<u64>(), 9);
    }

    #[test]
    fn every_family_is_exported_under_its_otel_name() {
        let m = Metrics::new().unwrap();
        let s = m.source("default").unwrap();
        s.received(false);
        let exported = m.otlp();
        let received = exported
            .iter()
            .find(|x| x.name == "messaging.client.consumed.messages")
            .expect("the received counter");
        let MetricData::Sum(points) = &received.data else {
            panic!("a counter is a sum: {received:?}");
        };
        assert!(
            points
                .iter()
                .any(|p| p.value == 1.0
                    && p.attributes.contains(&("source".into(), "default".into()))),
            "{points:?}"
        );
        assert!(
            exported
                .iter()
                .all(|x| x.name.starts_with("jetrelay.") || x.name.starts_with("messaging."))
        );
    }
}
