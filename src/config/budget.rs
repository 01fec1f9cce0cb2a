//! `[budget]`: the requests in flight across all sources together (0 = off: each
//! source's own `max_in_flight` only). Each source keeps `reserve` of them, never
//! lent, so that a source whose requests hang cannot hold another's first; when the
//! sources together want more, each one with work waiting gets at least its reserve
//! plus its weighted share (a source's `weight`) of the rest, and a share nobody uses
//! is lent to the others (`crate::pace::budget`).

use serde::{Deserialize, Serialize};

use super::{Config, Problems};

/// The most `budget.max_in_flight` may be: the bound of `delivery.max_in_flight`.
const MAX_IN_FLIGHT: u64 = 10_000;

/// `[budget]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct BudgetConfig {
    /// Requests in flight across all sources; 0 = off (each source's own limit only).
    pub max_in_flight: u32,
    /// Of those, the requests kept for each source whether or not it has work, never
    /// lent (within its own limit); 0: every slot may be lent.
    pub reserve: u32,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        BudgetConfig {
            max_in_flight: 0,
            reserve: 1,
        }
    }
}

impl Config {
    pub(super) fn check_budget(&self, p: &mut Problems) {
        let b = &self.budget;
        p.ranges(&[
            (
                "budget.max_in_flight",
                u64::from(b.max_in_flight),
                0,
                MAX_IN_FLIGHT,
            ),
            ("budget.reserve", u64::from(b.reserve), 0, MAX_IN_FLIGHT),
        ]);
    }

    /// With a budget, the sources' reserves must fit in it: `reserve × sources ≤
    /// max_in_flight`.
    pub(super) fn reserves_fit(&self, sources: usize, p: &mut Problems) -> bool {
        let b = &self.budget;
        let want = u64::from(b.reserve) * sources as u64;
        if b.max_in_flight == 0 || want <= u64::from(b.max_in_flight) {
            return true;
        }
        p.add(
            "budget.reserve",
            format!(
                "{} for each of {sources} sources is {want}, more than budget.max_in_flight = {}: lower the reserve (0: none) or raise the budget",
                b.reserve, b.max_in_flight
            ),
        );
        false
    }
}

#[cfg(test)]
mod tests {
    use super::super::ConfigError;
    use super::*;
    use crate::config::tests::MINIMAL;

    fn keys(extra: &str) -> Result<Config, Vec<String>> {
        Config::from_toml(&[MINIMAL, extra])
            .map_err(|e: ConfigError| e.problems().iter().map(|p| p.key.clone()).collect())
    }

    #[test]
    fn off_unless_set_and_bounded_like_a_sources_limit() {
        assert_eq!(keys("").unwrap().budget.max_in_flight, 0);
        assert_eq!(keys("").unwrap().budget.reserve, 1, "one kept by default");
        let c = keys("[budget]\nmax_in_flight = 4\nreserve = 4").unwrap();
        assert_eq!(c.budget.reserve, 4);
        assert_eq!(
            keys("[budget]\nmax_in_flight = 4\nreserve = 5").unwrap_err(),
            ["budget.reserve"],
            "one source's reserve past the total"
        );
        assert!(
            keys("[budget]\nreserve = 5").is_ok(),
            "no budget: nothing kept"
        );
        assert_eq!(
            keys("[budget]\nreserve = 10001").unwrap_err(),
            ["budget.reserve"]
        );
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
