//! `jetrelay scaler`'s own metric: each source's lag as it last read it, in a
//! registry of its own (the scaler runs no source, so none of the daemon's series).

use prometheus::{IntGaugeVec, Opts, Registry};

use super::{MetricsError, encode, gauge_value};

/// The scaler's collectors.
#[derive(Debug, Clone)]
pub struct ScalerMetrics {
    registry: Registry,
    lag: IntGaugeVec,
}

impl ScalerMetrics {
    /// A registry with `jetrelay_scaler_lag`.
    ///
    /// # Errors
    /// [`MetricsError`] (a programming error only).
    pub fn new() -> Result<ScalerMetrics, MetricsError> {
        let registry = Registry::new();
        let lag = IntGaugeVec::new(
            Opts::new(
                "jetrelay_scaler_lag",
                "A source's lag (pending + ack pending) as /v1/lag last read it from the JetStream API; absent while it cannot be read",
            ),
            &["source"],
        )?;
        registry.register(Box::new(lag.clone()))?;
        Ok(ScalerMetrics { registry, lag })
    }

    /// What `source`'s read came to: its lag, or none (the series withdrawn, so
    /// that an old figure does not look current).
    pub fn lag(&self, source: &str, lag: Option<u64>) {
        match lag {
            Some(n) => self.lag.with_label_values(&[source]).set(gauge_value(n)),
            None => {
                // Absent already is fine.
                self.lag.remove_label_values(&[source]).ok();
            }
        }
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        encode(&self.registry.gather())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_unread_has_no_sample() {
        let m = ScalerMetrics::new().unwrap();
        m.lag("a", Some(12));
        m.lag("b", Some(3));
        m.lag("b", None);
        let text = m.render();
        assert_eq!(
            super::super::sum_of(&text, "jetrelay_scaler_lag{source=\"a\"}"),
            Some(12.0)
        );
        assert_eq!(
            super::super::sum_of(&text, "jetrelay_scaler_lag{source=\"b\"}"),
            None
        );
    }
}
