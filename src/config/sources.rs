//! `[sources.<name>]`: several sources in one process. Each table holds every key of
//! `[source]`, plus `weight`, `routes` and the tables `[sources.<name>.consumer]`,
//! `.delivery`, `.http`, `.topology`, `.dlq` and `.publish`, each over the top-level
//! table of its name key by key. A source is then read as a whole config of its own
//! (its view: the top-level tables with its own keys over them), so every rule and
//! every default of the single form holds for each source unchanged. The single
//! `[source]` form is one source named `default`; both forms together are an error.

use std::collections::BTreeMap;

use figment::Figment;
use figment::providers::Serialized;
use figment::value::{Dict, Value};
use serde::{Deserialize, Serialize};

use super::{Config, Problem};
use crate::policy::Skip;

/// The name of the one source of a config written with `[source]`.
pub const DEFAULT_SOURCE: &str = "default";

/// The tables a source may override key by key.
pub const SOURCE_TABLES: [&str; 6] = ["consumer", "delivery", "http", "topology", "dlq", "publish"];

/// A source's keys besides those of `[source]` and its tables.
const OWN_KEYS: [&str; 2] = ["weight", "routes"];

/// `weight`'s bound: a share of the budget is `weight / Σ weights`.
const MAX_WEIGHT: u64 = 1000;

/// `[[sources.<name>.routes]]`: the first route whose match holds decides where a
/// message goes.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct RouteConfig {
    /// The route's name in metrics and logs (its index when empty).
    pub name: String,
    /// NATS subject patterns, against the subject (the partition token stripped);
    /// empty: any subject.
    pub subjects: Vec<String>,
    /// Header equality: every header listed must have the value given.
    pub headers: BTreeMap<String, String>,
    /// Replaces the path of the source's `http.url`.
    pub path: String,
    /// A URL of its own instead of the source's.
    pub url: String,
    /// Instead of a target: `ack`, `term` or `dlq`.
    pub action: Option<Skip>,
}

/// One source as it runs: its name, the whole config as if it were the only source,
/// its weight and its routes.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceView {
    /// Its name (`default` for `[source]`).
    pub name: String,
    /// The top-level tables with the source's keys over them.
    pub config: Config,
    /// Its share of the budget when sources compete.
    pub weight: u32,
    /// Its routes, first match first.
    pub routes: Vec<RouteConfig>,
}

/// Whether `name` may name a source: `[a-z0-9_-]{1,32}`.
pub fn valid_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

impl Config {
    /// The sources this config runs: each `[sources.<name>]` over the top-level
    /// tables, in name order, or the single `[source]` as `default`.
    ///
    /// # Errors
    /// Every problem of every source, keyed `sources.<name>.…` where the source's
    /// table is to blame.
    pub fn source_views(&self) -> Result<Vec<SourceView>, Vec<Problem>> {
        self.views(&|_| false)
    }

    /// As [`Config::source_views`]; `set_at_top(key)`: whether the top-level tables
    /// set `key` (then a problem with it is the top-level key's, not each source's).
    pub(super) fn views(
        &self,
        set_at_top: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<SourceView>, Vec<Problem>> {
        if self.sources.is_empty() {
            return Ok(vec![SourceView {
                name: DEFAULT_SOURCE.to_string(),
                config: self.clone(),
                weight: 1,
                routes: Vec::new(),
            }]);
        }
        let mut problems = Vec::new();
        let mut views = Vec::new();
        for (name, table) in &self.sources {
            match self.view(name, table, set_at_top) {
                Ok(v) => views.push(v),
                Err(mut p) => problems.append(&mut p),
            }
        }
        dedupe(&mut problems);
        if problems.is_empty() {
            Ok(views)
        } else {
            Err(problems)
        }
    }

    /// The source `name`'s view.
    fn view(
        &self,
        name: &str,
        table: &Dict,
        set_at_top: &dyn Fn(&str) -> bool,
    ) -> Result<SourceView, Vec<Problem>> {
        let at = |key: &str| format!("sources.{name}.{key}");
        if !valid_name(name) {
            return Err(vec![Problem::new(
                format!("sources.{name}"),
                "a source's name is 1 to 32 of a-z, 0-9, _ and -",
            )]);
        }
        let mut own = Dict::new();
        let mut over = Dict::new();
        for (key, value) in table {
            if SOURCE_TABLES.contains(&key.as_str()) {
                over.insert(key.clone(), value.clone());
            } else if !OWN_KEYS.contains(&key.as_str()) {
                own.insert(key.clone(), value.clone());
            }
        }
        over.insert("source".into(), Value::from(own));
        let mut top = self.clone();
        top.sources.clear();
        let figment = Figment::from(Serialized::defaults(&top)).merge(Serialized::defaults(&over));
        let config: Config = figment.extract().map_err(|e| {
            super::problems::extraction(&figment, e)
                .problems()
                .iter()
                .map(|p| blame(name, table, set_at_top, p))
                .collect::<Vec<_>>()
        })?;
        let mut problems: Vec<Problem> = config
            .problems()
            .iter()
            .map(|p| blame(name, table, set_at_top, p))
            .collect();
        let weight = match table.get("weight") {
            None => 1,
            Some(v) => match v.deserialize::<u64>() {
                Ok(w) if (1..=MAX_WEIGHT).contains(&w) => u32::try_from(w).unwrap_or(1),
                _ => {
                    problems.push(Problem::new(
                        at("weight"),
                        format!("must be a whole number from 1 to {MAX_WEIGHT}"),
                    ));
                    1
                }
            },
        };
        let routes = match table.get("routes") {
            None => Vec::new(),
            Some(v) => v.deserialize::<Vec<RouteConfig>>().unwrap_or_else(|e| {
                problems.push(Problem::new(at("routes"), e.to_string()));
                Vec::new()
            }),
        };
        if !routes.is_empty() && config.source.kind == Some(super::SourceKind::Service) {
            problems.push(Problem::new(
                at("routes"),
                "a service's requests go by its endpoints (each with its path), not routes",
            ));
        }
        for (i, r) in routes.iter().enumerate() {
            for why in route_problems(r, &config) {
                problems.push(Problem::new(at(&format!("routes[{i}]")), why));
            }
        }
        let mut names: Vec<&str> = routes.iter().map(|r| r.name.as_str()).collect();
        names.retain(|n| !n.is_empty());
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            problems.push(Problem::new(
                at("routes"),
                format!("two routes are named {:?}", w[0]),
            ));
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(SourceView {
            name: name.to_string(),
            config,
            weight,
            routes,
        })
    }
}

/// What is wrong with a route of a source whose view is `c`.
fn route_problems(r: &RouteConfig, c: &Config) -> Vec<String> {
    let mut p = Vec::new();
    let targets = usize::from(!r.path.is_empty()) + usize::from(!r.url.is_empty());
    match (targets, r.action) {
        (0, None) => p.push("needs a target (path or url) or an action".to_string()),
        (2, _) => p.push("path and url together: give one".to_string()),
        (1, Some(a)) => p.push(format!(
            "action = {:?} beside a target: a route either sends or settles",
            a.name()
        )),
        _ => {}
    }
    if r.subjects.is_empty() && r.headers.is_empty() {
        p.push(
            "an empty match (no subjects, no headers) would take every message: a message no route matches goes to http.url"
                .to_string(),
        );
    }
    for s in &r.subjects {
        if let Err(e) = crate::subject::validate_filter(s) {
            p.push(format!("subjects: {s:?}: {e}"));
        }
    }
    for name in r.headers.keys() {
        let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        if name.is_empty() || !name.bytes().all(token) {
            p.push(format!("headers: {name:?} is not a header name"));
        }
    }
    if !r.path.is_empty() && !r.path.starts_with('/') {
        p.push(format!("path {:?} must start with /", r.path));
    }
    if !r.url.is_empty() {
        match url::Url::parse(&r.url) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.password().is_none() => {}
            Ok(_) => p.push(format!(
                "url {:?}: an http(s) URL without a password",
                super::redact(&r.url)
            )),
            Err(e) => p.push(format!("url {:?}: {e}", super::redact(&r.url))),
        }
    }
    if c.delivery.batch_size > 1 {
        p.push(
            "routes with delivery.batch_size > 1 are not supported yet (a batch goes to one target): use routes without batches"
                .to_string(),
        );
    }
    p
}

/// The key a problem of source `name`'s view is reported under: `source.x` is
/// `sources.<name>.x`; a key of one of its tables is the source's when its table sets
/// it, or when it is required and set nowhere (the source's to set, or the top
/// level's for every source); else the top-level key's (a value it inherits, or a
/// default that breaks a rule with one).
fn blame(name: &str, table: &Dict, set_at_top: &dyn Fn(&str) -> bool, p: &Problem) -> Problem {
    let key = match p.key.split_once('.') {
        Some(("source", rest)) => format!("sources.{name}.{rest}"),
        Some((t, rest)) if SOURCE_TABLES.contains(&t) => {
            let in_table = table
                .get(t)
                .and_then(|v| v.as_dict())
                .is_some_and(|d| d.contains_key(rest.split('.').next().unwrap_or(rest)));
            let required = !set_at_top(&p.key) && p.message.starts_with("is required");
            if in_table || required {
                format!("sources.{name}.{}", p.key)
            } else {
                p.key.clone()
            }
        }
        _ => p.key.clone(),
    };
    Problem {
        key,
        message: p.message.clone(),
        env: p.env.clone(),
    }
}

/// Drops repeated problems (a top-level key every source inherits is said once).
fn dedupe(problems: &mut Vec<Problem>) {
    let mut seen = std::collections::BTreeSet::new();
    problems.retain(|p| seen.insert((p.key.clone(), p.message.clone())));
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &str = r#"
        [http]
        url = "http://127.0.0.1:8080/messages"
        timeout_ms = 5000
        [delivery]
        max_in_flight = 8

        [sources.orders]
        stream = "ORDERS"
        kind = "durable"
        durable = "orders-worker"
        weight = 3
        [sources.orders.delivery]
        ordering = "subject"
        [sources.orders.http]
        url = "http://127.0.0.1:8080/orders"

        [sources.audit]
        stream = "AUDIT"
        kind = "static"
        group = "g"
        member = "m1"
        [[sources.audit.routes]]
        subjects = ["audit.noise.>"]
        action = "ack"
    "#;

    #[test]
    fn each_source_is_the_top_level_with_its_own_keys_over_it() {
        let c = Config::from_toml(&[TWO]).unwrap();
        let views = c.source_views().unwrap();
        let names: Vec<&str> = views.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["audit", "orders"]);
        let (audit, orders) = (&views[0], &views[1]);
        assert_eq!(orders.config.source.stream, "ORDERS");
        assert_eq!(orders.config.http.url, "http://127.0.0.1:8080/orders");
        assert_eq!(orders.config.http.timeout_ms, 5000, "inherited key by key");
        assert_eq!(orders.config.delivery.max_in_flight, 8, "inherited");
        assert_eq!(orders.config.ordering(), crate::seam::Ordering::Subject);
        assert_eq!(orders.weight, 3);
        assert_eq!(audit.config.http.url, "http://127.0.0.1:8080/messages");
        assert_eq!(audit.config.ordering(), crate::seam::Ordering::Partition);
        assert_eq!(audit.weight, 1);
        assert_eq!(audit.routes[0].action, Some(Skip::Ack));
        assert_eq!(audit.routes[0].subjects, ["audit.noise.>"]);
    }

    #[test]
    fn the_transport_is_per_source_and_inherited_key_by_key() {
        use crate::app::transport::HttpVersion;
        let c = Config::from_toml(&[r#"
            [http]
            url = "http://app/messages"
            version = "h2c"
            [sources.a]
            stream = "A"
            kind = "durable"
            durable = "a"
            [sources.a.http]
            unix_socket = "/run/app/app.sock"
            [sources.b]
            stream = "B"
            kind = "durable"
            durable = "b"
            [sources.b.http]
            version = "http1"
        "#])
        .unwrap();
        let views = c.source_views().unwrap();
        let (a, b) = (&views[0].config.http, &views[1].config.http);
        assert_eq!(
            (a.unix_socket.as_str(), a.version),
            ("/run/app/app.sock", HttpVersion::H2c)
        );
        assert_eq!(
            (b.unix_socket.as_str(), b.version),
            ("", HttpVersion::Http1)
        );
        assert_eq!(b.url, "http://app/messages", "inherited beside its own key");
    }

    #[test]
    fn the_single_form_is_one_source_named_default() {
        let c = Config::from_toml(&[
            "[source]\nstream = \"S\"\nkind = \"durable\"\ndurable = \"d\"\n\
             [http]\nurl = \"http://127.0.0.1:1/x\"\n",
        ])
        .unwrap();
        let views = c.source_views().unwrap();
        assert_eq!(views.len(), 1);
        assert_eq!(views[0].name, "default");
        assert_eq!(views[0].config, c);
    }

    #[test]
    fn a_sources_problems_name_the_source() {
        let keys = |text: &str| -> Vec<String> {
            Config::from_toml(&[text])
                .unwrap_err()
                .problems()
                .iter()
                .map(|p| p.key.clone())
                .collect()
        };
        // Its own bad key, a table key of its own, a required key set nowhere.
        let k = keys(
            "[sources.a]\nstream = \"S\"\nkind = \"durable\"\n\
             [sources.a.delivery]\nmax_in_flight = 0\n",
        );
        assert!(k.contains(&"sources.a.durable".into()), "{k:?}");
        assert!(
            k.contains(&"sources.a.delivery.max_in_flight".into()),
            "{k:?}"
        );
        assert!(k.contains(&"sources.a.http.url".into()), "{k:?}");
        // A bad top-level key every source inherits is said once, as itself.
        let k = keys(
            "[http]\nurl = \"http://127.0.0.1:1/x\"\n[delivery]\nmax_in_flight = 0\n\
             [sources.a]\nstream = \"S\"\nkind = \"durable\"\ndurable = \"a\"\n\
             [sources.b]\nstream = \"S\"\nkind = \"durable\"\ndurable = \"b\"\n",
        );
        assert!(k.contains(&"delivery.max_in_flight".into()), "{k:?}");
        assert!(!k.iter().any(|k| k.starts_with("sources.")), "{k:?}");
        let mut unique = k.clone();
        unique.dedup();
        assert_eq!(unique, k, "said once");
        // Names, weights, routes and unknown keys.
        let k = keys(
            "[http]\nurl = \"http://127.0.0.1:1/x\"\n\
             [sources.Bad]\nstream = \"S\"\nkind = \"durable\"\ndurable = \"a\"\n\
             [sources.w]\nstream = \"S\"\nkind = \"durable\"\ndurable = \"w\"\nweight = 0\n\
             [sources.u]\nstream = \"S\"\nkind = \"durable\"\ndurable = \"u\"\ncolour = 1\n\
             [[sources.r.routes]]\nsubject = \"x\"\n",
        );
        for key in [
            "sources.Bad",
            "sources.w.weight",
            "sources.u.colour",
            "sources.r.routes",
        ] {
            assert!(k.contains(&key.to_string()), "{key} not in {k:?}");
        }
    }

    #[test]
    fn both_forms_together_are_an_error() {
        let err = Config::from_toml(&[&format!(
            "[source]\nstream = \"S\"\nkind = \"durable\"\ndurable = \"d\"\n{TWO}"
        )])
        .unwrap_err();
        let keys: Vec<&str> = err.problems().iter().map(|p| p.key.as_str()).collect();
        assert_eq!(keys, ["source"], "{err}");
    }

    #[test]
    fn names_table() {
        for (name, ok) in [
            ("orders", true),
            ("a-b_9", true),
            ("", false),
            ("Orders", false),
            ("a.b", false),
            (&"x".repeat(33), false),
            (&"x".repeat(32), true),
        ] {
            assert_eq!(valid_name(name), ok, "{name:?}");
        }
    }

    #[test]
    fn a_weight_that_leaves_a_source_no_slot_of_the_budget_is_refused() {
        let with = |budget: u32, reserve: u32| {
            format!(
                "[http]\nurl = \"http://127.0.0.1:1/x\"\n[budget]\nmax_in_flight = {budget}\nreserve = {reserve}\n\
                 [sources.big]\nstream = \"S\"\nkind = \"durable\"\ndurable = \"b\"\nweight = 100\n\
                 [sources.small]\nstream = \"S\"\nkind = \"durable\"\ndurable = \"s\"\n"
            )
        };
        let text = |budget: u32| with(budget, 0);
        let err = Config::from_toml(&[&text(10)]).unwrap_err();
        let keys: Vec<&str> = err.problems().iter().map(|p| p.key.as_str()).collect();
        assert_eq!(keys, ["sources.small.weight"], "{err}");
        assert!(Config::from_toml(&[&text(101)]).is_ok());
        assert!(
            Config::from_toml(&[&text(0)]).is_ok(),
            "no budget, no shares"
        );
        assert!(
            Config::from_toml(&[&with(10, 1)]).is_ok(),
            "a reserve is a slot of its own"
        );
        let err = Config::from_toml(&[&with(10, 6)]).unwrap_err();
        let keys: Vec<&str> = err.problems().iter().map(|p| p.key.as_str()).collect();
        assert_eq!(keys, ["budget.reserve"], "6 × 2 sources > 10: {err}");
        assert!(
            err.to_string().contains("6 for each of 2 sources is 12"),
            "{err}"
        );
        assert!(Config::from_toml(&[&with(12, 6)]).is_ok());
    }
}
