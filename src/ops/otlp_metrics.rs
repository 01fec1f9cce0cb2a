//! Metrics over OTLP (`otel.metrics`, `OTEL_METRICS_EXPORTER=otlp`): every
//! `otel.metrics_interval_ms`, what `/metrics` shows is read and sent as one
//! `ExportMetricsServiceRequest`, cumulative since the process started; at shutdown
//! one last reading goes out within the grace. A collector that fails is said in the
//! log (at most once a minute) and the next reading goes on: nothing waits on it.

use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::ops::metrics::Metrics;
use crate::ops::traces::{EXPORT_TIMEOUT, Exporter, FLUSH, now_ns};
use crate::trace::encode::{Resource, metrics_request};

/// Exports `metrics` to `exporter` every `every` until `stop`, then once more before
/// `deadline` (the shutdown's, when set).
pub async fn export<E: Exporter>(
    metrics: Metrics,
    exporter: E,
    resource: Resource,
    every: Duration,
    stop: CancellationToken,
    deadline: impl Fn() -> Option<Instant>,
) {
    let since = now_ns();
    let mut warned: Option<Instant> = None;
    loop {
        let stopping = tokio::select! {
            () = stop.cancelled() => true,
            () = tokio::time::sleep(every) => false,
        };
        let mut body = vec![0; exporter.prefix()];
        metrics_request(&resource, &metrics.otlp(), (since, now_ns()), &mut body);
        exporter.frame(&mut body);
        let now = Instant::now();
        let bound = if stopping {
            deadline().map_or(now + FLUSH, |at| at.min(now + FLUSH))
        } else {
            now + EXPORT_TIMEOUT
        };
        let why = match tokio::time::timeout_at(bound, exporter.send(Bytes::from(body))).await {
            Ok(Ok(())) => None,
            Ok(Err(why)) => Some(why),
            Err(_) => Some("the collector did not answer in time".to_string()),
        };
        if let Some(why) = why
            && warned.is_none_or(|at| at.elapsed() >= Duration::from_secs(60))
        {
            warned = Some(Instant::now());
            tracing::warn!(error = %why, "metrics were not exported (the next reading goes on)");
        }
        if stopping {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Clone, Default)]
    struct Kept(Arc<Mutex<Vec<Bytes>>>);

    impl Exporter for Kept {
        async fn send(&self, body: Bytes) -> Result<(), String> {
            self.0.lock().unwrap().push(body);
            Ok(())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_reading_goes_out_every_interval_and_once_more_at_the_stop() {
        let metrics = Metrics::new().unwrap();
        let kept = Kept::default();
        let stop = CancellationToken::new();
        let resource = Resource {
            service_name: "s".into(),
            instance_id: "i".into(),
            attributes: Vec::new(),
        };
        let task = tokio::spawn(export(
            metrics,
            kept.clone(),
            resource,
            Duration::from_secs(10),
            stop.clone(),
            || None,
        ));
        tokio::time::sleep(Duration::from_secs(25)).await;
        assert_eq!(kept.0.lock().unwrap().len(), 2, "at 10 s and 20 s");
        stop.cancel();
        task.await.unwrap();
        let sent = kept.0.lock().unwrap();
        assert_eq!(sent.len(), 3, "and the last at the stop");
        assert!(sent.iter().all(|b| !b.is_empty()));
    }
}
