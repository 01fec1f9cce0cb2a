//! The process's own collectors: the build, the connection to NATS, readiness,
//! config reloads, and what the telemetry dropped (spans, log lines, trace headers).

use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts};

use super::{Metrics, Registrar};
use crate::trace::context::{Dropped, Reason, TraceHeader};

/// The process: the build, the connection, readiness, reloads, what the telemetry
/// dropped.
#[derive(Debug, Clone)]
pub(super) struct ProcessCollectors {
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
    pub(super) fn new(r: &Registrar<'_>) -> Result<ProcessCollectors, prometheus::Error> {
        let build_info = r.register(IntGaugeVec::new(
            Opts::new("jetrelay_build_info", "Build information"),
            &["version"],
        )?)?;
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
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

impl Metrics {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dropped_log_lines_follow_the_loggers_count_and_never_fall() {
        let m = Metrics::new().unwrap();
        for (total, shown) in [(0, 0), (7, 7), (7, 7), (3, 7), (12, 12)] {
            m.log_lines_dropped(total);
            assert_eq!(m.process.log_lines_dropped.get(), shown, "{total}");
        }
    }
}
