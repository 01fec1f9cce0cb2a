//! `[budget]`: the requests in flight across all sources together (0 = off: each
//! source's own `max_in_flight` only). When the sources together want more, each one
//! with work waiting gets at least its weighted share (a source's `weight`), and a
//! share nobody uses is lent to the others (`crate::pace::budget`).

use serde::{Deserialize, Serialize};

use super::{Config, Problems};

/// The most `budget.max_in_flight` may be: the bound of `delivery.max_in_flight`.
const MAX_IN_FLIGHT: u64 = 10_000;

/// `[budget]`
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct BudgetConfig {
    /// Requests in flight across all sources; 0 = off (each source's own limit only).
    pub max_in_flight: u32,
}

impl Config {
    pub(super) fn check_budget(&self, p: &mut Problems) {
        p.range(
            "budget.max_in_flight",
            u64::from(self.budget.max_in_flight),
            0,
            MAX_IN_FLIGHT,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::ConfigError;
    use super::*;

    const MINIMAL: &str = r#"
        [source]
        stream = "ORDERS"
        kind = "durable"
        durable = "worker"
        [http]
        url = "http://127.0.0.1:8080/messages"
    "#;

    fn keys(extra: &str) -> Result<Config, Vec<String>> {
        Config::from_toml(&[MINIMAL, extra])
            .map_err(|e: ConfigError| e.problems().iter().map(|p| p.key.clone()).collect())
    }

    #[test]
    fn off_unless_set_and_bounded_like_a_sources_limit() {
        assert_eq!(keys("").unwrap().budget.max_in_flight, 0);
        for n in [0, 1, 64, 10_000] {
            let c = keys(&format!("[budget]\nmax_in_flight = {n}")).unwrap();
            assert_eq!(c.budget.max_in_flight, n);
        }
        for bad in [
            "max_in_flight = 10001",
            "max_in_flight = -1",
            "max_in_flight = \"many\"",
            "max_inflight = 3",
        ] {
            let k = keys(&format!("[budget]\n{bad}")).unwrap_err();
            assert_eq!(k.len(), 1, "{bad}: {k:?}");
            assert!(k[0].starts_with("budget.max_in"), "{bad}: {k:?}");
        }
    }
}
