//! `[sources.<name>]`: several sources in one process. Each table holds every key of
//! `[source]`, plus `weight`, `routes` and the tables `[sources.<name>.consumer]`,
//! `.delivery`, `.http`, `.topology`, `.dlq` and `.publish`, each over the top-level
//! table of its name key by key. A source is then read as a whole config of its own
//! (its view: the top-level tables with its own keys over them), so every rule and
//! every default of the single form holds for each source unchanged. The single
//! `[source]` form is one source named `default`; both forms together are an error.

use super::{Config, Problem, RouteConfig};
use figment::Figment;
use figment::providers::Serialized;
use figment::value::{Dict, Value};

/// The name of the one source of a config written with `[source]`.
pub const DEFAULT_SOURCE: &str = "default";

/// The tables a source may override key by key.
pub const SOURCE_TABLES: [&str; 6] = ["consumer", "delivery", "http", "topology", "dlq", "publish"];

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
            // `[source]` is `sources.default` whose tables are the top level's: its
            // rules are the config's own (`Config::problems`, checked at load).
            return Ok(vec![SourceView::of(DEFAULT_SOURCE, self.clone())]);
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

    /// The source `name`'s view: its own keys as `[source]`, its tables over the
    /// top level's key by key, then every rule of the config.
    fn view(
        &self,
        name: &str,
        table: &Dict,
        set_at_top: &dyn Fn(&str) -> bool,
    ) -> Result<SourceView, Vec<Problem>> {
        if !valid_name(name) {
            return Err(vec![Problem::new(
                format!("sources.{name}"),
                "a source's name is 1 to 32 of a-z, 0-9, _ and -",
            )]);
        }
        let mut problems = Vec::new();
        let mut own = Dict::new();
        let mut over = Dict::new();
        for (key, value) in table {
            if PROCESS_TABLES.contains(&key.as_str()) {
                problems.push(Problem::new(
                    format!("sources.{name}.{key}"),
                    format!("[{key}] is the process's, not a source's: set it once at the top level, as [{key}]"),
                ));
            } else if SOURCE_TABLES.contains(&key.as_str()) {
                over.insert(key.clone(), per_source(name, key, value, &mut problems));
            } else {
                own.insert(key.clone(), value.clone());
            }
        }
        over.insert("source".into(), Value::from(own));
        let mut top = self.clone();
        top.sources.clear();
        let figment = Figment::from(Serialized::defaults(&top)).merge(Serialized::defaults(&over));
        let blamed = |found: &[Problem]| -> Vec<Problem> {
            found
                .iter()
                .map(|p| blame(name, table, set_at_top, p))
                .collect()
        };
        let config: Config = figment
            .extract()
            .map_err(|e| blamed(super::problems::extraction(&figment, e).problems()))?;
        problems.append(&mut blamed(&config.problems()));
        if problems.is_empty() {
            Ok(SourceView::of(name, config))
        } else {
            Err(problems)
        }
    }
}

impl SourceView {
    /// The source `name` whose view of the config is `config`.
    fn of(name: &str, config: Config) -> SourceView {
        SourceView {
            name: name.to_string(),
            weight: config.source.weight(),
            routes: config.source.routes.clone(),
            config,
        }
    }
}

/// The tables only the process has: a source's table may not hold them.
const PROCESS_TABLES: [&str; 5] = ["nats", "admin", "log", "otel", "budget"];

/// The keys of a source's tables that only the process has: one drain's grace, one
/// publish endpoint.
const PROCESS_KEYS: [(&str, &str); 3] = [
    ("delivery", "shutdown_grace_ms"),
    ("publish", "listen"),
    ("publish", "token_file"),
];

/// Source `name`'s table `table` (`value`) without the keys only the process has,
/// each of which is a problem naming where it belongs.
fn per_source(name: &str, table: &str, value: &Value, problems: &mut Vec<Problem>) -> Value {
    let Some(dict) = value.as_dict() else {
        // Not a table: extraction names it.
        return value.clone();
    };
    let mut kept = dict.clone();
    for (t, key) in PROCESS_KEYS {
        if t == table && kept.remove(key).is_some() {
            problems.push(Problem::new(
                format!("sources.{name}.{table}.{key}"),
                format!("is the process's, not a source's: set it once at the top level, as {table}.{key}"),
            ));
        }
    }
    Value::from(kept)
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
    use crate::policy::Skip;

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
        use crate::config::testing::durable;
        let c = Config::from_toml(&[
            "[http]\nurl = \"http://app/messages\"\nversion = \"h2c\"\n",
            &durable(
                "a",
                "[sources.a.http]\nunix_socket = \"/run/app/app.sock\"\n",
            ),
            &durable("b", "[sources.b.http]\nversion = \"http1\"\n"),
        ])
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
    fn the_outbound_identity_is_per_source_and_inherited_key_by_key() {
        let c = Config::from_toml(&[r#"
            [http]
            url = "https://app/messages"
            tls_cert_file = "/tls/tls.crt"
            tls_key_file = "/tls/tls.key"
            [http.signing]
            secret_file = "/s/whsec"
            [http.oauth2]
            token_url = "https://idp/token"
            client_id = "relay"
            client_secret_file = "/s/client"
            [sources.a]
            stream = "A"
            kind = "durable"
            durable = "a"
            [sources.a.http.signing]
            previous_secret_file = "/s/whsec-old"
            [sources.a.http.oauth2]
            scopes = ["a.write"]
            [sources.b]
            stream = "B"
            kind = "durable"
            durable = "b"
            [sources.b.http]
            tls_cert_file = "/tls/b.crt"
            tls_key_file = "/tls/b.key"
        "#])
        .unwrap();
        let views = c.source_views().unwrap();
        let (a, b) = (&views[0].config.http, &views[1].config.http);
        assert_eq!(
            (
                a.signing.secret_file.as_str(),
                a.signing.previous_secret_file.as_str()
            ),
            ("/s/whsec", "/s/whsec-old")
        );
        assert_eq!(
            (a.oauth2.client_id.as_str(), a.oauth2.scopes.as_slice()),
            ("relay", &["a.write".to_string()][..])
        );
        assert_eq!(a.tls_cert_file, "/tls/tls.crt");
        assert_eq!(b.tls_cert_file, "/tls/b.crt");
        assert_eq!(b.signing.previous_secret_file, "", "inherited");
        assert!(b.oauth2.scopes.is_empty());
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
            "sources.r.routes.0.subject",
        ] {
            assert!(k.contains(&key.to_string()), "{key} not in {k:?}");
        }
    }

    #[test]
    fn a_key_only_the_process_has_is_refused_in_a_source_naming_where_it_belongs() {
        let base = "[http]\nurl = \"http://127.0.0.1:1/x\"\n\
                    [sources.a]\nstream = \"S\"\nkind = \"durable\"\ndurable = \"a\"\n";
        for (extra, key, belongs) in [
            (
                "[sources.a.delivery]\nshutdown_grace_ms = 99999\nmax_in_flight = 4\n",
                "sources.a.delivery.shutdown_grace_ms",
                "as delivery.shutdown_grace_ms",
            ),
            (
                "[sources.a.publish]\nlisten = \"127.0.0.1:9999\"\n",
                "sources.a.publish.listen",
                "as publish.listen",
            ),
            (
                "[sources.a.publish]\ntoken_file = \"/t\"\n",
                "sources.a.publish.token_file",
                "as publish.token_file",
            ),
            (
                "[sources.a.nats]\nname = \"x\"\n",
                "sources.a.nats",
                "as [nats]",
            ),
            (
                "[sources.a.admin]\nlisten = \"x\"\n",
                "sources.a.admin",
                "as [admin]",
            ),
            (
                "[sources.a.log]\nlevel = \"debug\"\n",
                "sources.a.log",
                "as [log]",
            ),
            (
                "[sources.a.otel]\nendpoint = \"x\"\n",
                "sources.a.otel",
                "as [otel]",
            ),
            (
                "[sources.a.budget]\nmax_in_flight = 3\n",
                "sources.a.budget",
                "as [budget]",
            ),
        ] {
            let err = Config::from_toml(&[&format!("{base}{extra}")]).unwrap_err();
            let found: Vec<String> = err.problems().iter().map(|p| p.to_string()).collect();
            assert_eq!(found.len(), 1, "{extra}: {found:?}");
            assert!(found[0].starts_with(&format!("{key}: ")), "{found:?}");
            assert!(
                found[0].contains("is the process's, not a source's"),
                "{found:?}"
            );
            assert!(found[0].contains(belongs), "{found:?}");
        }
        // The same keys at the top level are the process's, as before.
        let ok = format!(
            "{base}[delivery]\nshutdown_grace_ms = 9999\n[publish]\nlisten = \"127.0.0.1:0\"\nallowed_subjects = [\"out.>\"]\n"
        );
        Config::from_toml(&[&ok]).unwrap();
    }

    #[test]
    fn the_single_form_may_route_and_weigh_as_sources_default() {
        let text = "[http]\nurl = \"http://127.0.0.1:1/x\"\n\
                    [source]\nstream = \"S\"\nkind = \"durable\"\ndurable = \"d\"\nweight = 7\n\
                    [[source.routes]]\nsubjects = [\"noise.>\"]\naction = \"ack\"\n\
                    [[source.routes]]\nname = \"orders\"\nsubjects = [\"orders.>\"]\npath = \"/orders\"\n";
        let views = Config::from_toml(&[text]).unwrap().source_views().unwrap();
        let [one] = views.as_slice() else {
            panic!("{views:?}")
        };
        assert_eq!((one.name.as_str(), one.weight), ("default", 7));
        assert_eq!(one.routes.len(), 2);
        assert_eq!(one.routes[0].action, Some(Skip::Ack));
        assert_eq!(one.routes[1].path, "/orders");
        // Its routes' and weight's problems are keyed as written.
        let err = Config::from_toml(&[&text
            .replace("weight = 7", "weight = 0")
            .replace("path = \"/orders\"", "path = \"orders\"")])
        .unwrap_err();
        let keys: Vec<&str> = err.problems().iter().map(|p| p.key.as_str()).collect();
        assert_eq!(keys, ["source.weight", "source.routes[1]"], "{err}");
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
