//! The configuration tree, its layering (TOML file, then `JETRELAY_` environment
//! variables) and its validation; one file per table.
//!
//! Nothing else in the crate parses configuration. Every problem is reported with the
//! dotted key it concerns (`delivery.max_in_flight: must be at least 1`), and
//! validation collects all problems rather than stopping at the first.
//! Secrets are never read here: only their file paths are, so `Debug` cannot leak them.

mod budget;
mod consumer;
mod delivery;
mod http;
mod nats;
mod ops;
mod otel;
mod otel_env;
mod problems;
mod publish;
pub mod reload;
mod routes;
mod source;
mod sources;
mod topology;

/// Config text the tests of several modules share.
#[cfg(test)]
pub(crate) mod testing {
    /// `[sources.<name>]`, a durable of that name on stream `<NAME>`, then `extra`
    /// (its own tables, say).
    pub(crate) fn durable(name: &str, extra: &str) -> String {
        let stream = name.to_uppercase();
        format!(
            "[sources.{name}]\nstream = \"{stream}\"\nkind = \"durable\"\ndurable = \"{name}\"\n{extra}"
        )
    }
}

use std::collections::BTreeMap;
use std::path::Path;

use figment::Figment;
use figment::providers::{Env, Format, Toml};
use serde::{Deserialize, Serialize};

pub use self::budget::BudgetConfig;
pub use self::consumer::{ConsumerConfig, DeliverPolicy};
pub use self::delivery::{AckMode, Concurrency, DeliveryConfig};
pub use self::http::HttpConfig;
pub use self::nats::{NatsConfig, redact, split_servers};
pub use self::ops::{AdminConfig, DlqConfig, LogConfig};
pub use self::otel::{OtelConfig, OtelProtocol};
use self::problems::Problems;
pub use self::problems::{ConfigError, Problem};
pub use self::publish::{MAX_PUBLISH_BYTES, MAX_PUBLISH_MESSAGES, PublishConfig};
pub use self::routes::RouteConfig;
pub use self::source::{EndpointConfig, SourceConfig, SourceKind, SourceSpec};
pub use self::sources::{DEFAULT_SOURCE, SOURCE_TABLES, SourceView, valid_name};
pub use self::topology::TopologyConfig;
use crate::seam::Ordering;
pub use crate::topology::OnMissing;

/// The whole configuration, as the user wrote it (after defaults).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Connection to NATS.
    pub nats: NatsConfig,
    /// Where messages come from.
    pub source: SourceConfig,
    /// Who owns the stream and the consumer.
    pub topology: TopologyConfig,
    /// The template of the durable or member consumer.
    pub consumer: ConsumerConfig,
    /// Concurrency, ordering, retries and shutdown.
    pub delivery: DeliveryConfig,
    /// The local app.
    pub http: HttpConfig,
    /// What the app may publish through jetrelay.
    pub publish: PublishConfig,
    /// Dead-letter subject.
    pub dlq: DlqConfig,
    /// The admin endpoints.
    pub admin: AdminConfig,
    /// Logging.
    pub log: LogConfig,
    /// Tracing: spans exported to an OpenTelemetry collector.
    pub otel: OtelConfig,
    /// Requests in flight across all sources.
    pub budget: BudgetConfig,
    /// Several sources (`[sources.<name>]`), each over the tables above key by key
    /// (`Config::source_views`); empty: the one `[source]`.
    pub sources: BTreeMap<String, figment::value::Dict>,
}

/// The environment variable prefix.
pub const ENV_PREFIX: &str = "JETRELAY_";

/// An hour in milliseconds: the bound of timeouts and delays that are about one
/// connection or request.
const HOUR: u64 = 3_600_000;
/// A day in milliseconds: the bound of ack waits and retry delays (a NAK delay is
/// sent in nanoseconds; an unbounded one overflowed into an immediate redelivery).
const DAY: u64 = 86_400_000;

impl Config {
    /// Loads the layered configuration: the TOML file (when given), then the
    /// `JETRELAY_` environment, then validates it.
    ///
    /// # Errors
    /// [`ConfigError`] naming every bad key.
    pub fn load(file: Option<&Path>) -> Result<Config, ConfigError> {
        match Self::from_figment(layered(file)?) {
            // Nothing given at all: say so, rather than only which keys are missing.
            Err(ConfigError::Invalid(p))
                if file.is_none() && p.iter().any(|p| p.message.starts_with("is required")) =>
            {
                Err(ConfigError::NoFile(p))
            }
            other => other,
        }
    }

    /// Extracts and validates a config from TOML texts, each later one over the ones
    /// before (tests and tools; `load` reads the file and the environment).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming every bad key.
    pub fn from_toml(texts: &[&str]) -> Result<Config, ConfigError> {
        let figment = texts
            .iter()
            .fold(Figment::new(), |f, t| f.merge(Toml::string(t)));
        Config::from_figment(figment)
    }

    /// Extracts and validates a config from any figment.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming every bad key.
    pub fn from_figment(figment: Figment) -> Result<Config, ConfigError> {
        let config: Config = figment
            .extract()
            .map_err(|e| problems::extraction(&figment, e))?;
        let found = if config.sources.is_empty() {
            let mut p = Problems(config.problems());
            config.reserves_fit(1, &mut p);
            p.0
        } else {
            config.problems_of_sources(&figment)
        };
        if found.is_empty() {
            Ok(config)
        } else {
            Err(ConfigError::Invalid(problems::with_origins(
                &figment, found,
            )))
        }
    }

    /// The source kind for the rules that depend on it; a missing one is reported
    /// by `source.kind`'s own rule, and [`Settings`] refuses it.
    fn kind(&self) -> SourceKind {
        self.source.kind.unwrap_or(SourceKind::Durable)
    }

    /// The effective ordering: configured, else `partition` for groups and `none`
    /// for durable consumers.
    pub fn ordering(&self) -> Ordering {
        self.delivery.ordering.unwrap_or(if self.kind().is_group() {
            Ordering::Partition
        } else {
            Ordering::None
        })
    }

    /// With `[sources.*]`: what the process shares checked once, then each source's
    /// view, its problems keyed where they are to be fixed; `[source]` beside them is
    /// a problem of its own.
    fn problems_of_sources(&self, figment: &Figment) -> Vec<Problem> {
        let mut p = Problems::default();
        nats::nats_problems(&self.nats, &mut p);
        self.check_ops(&mut p);
        if figment.find_value("source").is_ok() {
            p.add(
                "source",
                "[source] and [sources.*] together: write the one source as [sources.<name>], or drop [sources.*]",
            );
            return p.0;
        }
        let set_at_top = |key: &str| figment.find_value(key).is_ok();
        match self.views(&set_at_top) {
            Ok(views) => self.check_shares(&views, &mut p),
            Err(mut found) => p.0.append(&mut found),
        }
        p.0
    }

    /// With a budget, the reserves must fit in it, and every source must have a slot
    /// of its own when all compete: without a reserve, a weight too small for the
    /// total would leave it only what others lend.
    fn check_shares(&self, views: &[SourceView], p: &mut Problems) {
        let total = self.budget.max_in_flight;
        if total == 0 || !self.reserves_fit(views.len(), p) {
            return;
        }
        let claims: Vec<crate::pace::budget::Claim> = views
            .iter()
            .map(|v| crate::pace::budget::Claim {
                weight: v.weight,
                in_flight: 0,
                limit: v.config.delivery.max_in_flight,
                waiting: true,
                reserve: self.budget.reserve,
            })
            .collect();
        let shares = crate::pace::budget::shares(total, &claims);
        for (v, share) in views.iter().zip(shares) {
            if share == 0 {
                p.add(
                    format!("sources.{}.weight", v.name),
                    format!(
                        "{} of {} weight in all leaves this source no slot of budget.max_in_flight = {total} when every source has work: raise its weight or the budget",
                        v.weight,
                        views.iter().map(|v| u64::from(v.weight)).sum::<u64>()
                    ),
                );
            }
        }
    }

    /// Every rule broken by this config, in key order of the file.
    pub fn problems(&self) -> Vec<Problem> {
        let mut p = Problems::default();
        nats::nats_problems(&self.nats, &mut p);
        self.check_source(&mut p);
        self.check_topology(&mut p);
        self.check_consumer(&mut p);
        self.check_delivery(&mut p);
        self.check_http(&mut p);
        self.check_publish(&mut p);
        self.check_ops(&mut p);
        self.check_otel(&mut p);
        p.0
    }
}

/// OpenTelemetry's own variables (below everything: `[otel]` wins), the file (when
/// given), then the `JETRELAY_` environment.
fn layered(file: Option<&Path>) -> Result<Figment, ConfigError> {
    let otel = otel_env::read(&|name| std::env::var(name).ok()).map_err(ConfigError::Invalid)?;
    let mut figment = otel.into_iter().fold(Figment::new(), Figment::merge);
    if let Some(path) = file {
        if !path.is_file() {
            return Err(ConfigError::MissingFile(path.to_path_buf()));
        }
        problems::check_syntax(path)?;
        figment = figment.merge(Toml::file_exact(path));
    }
    // JETRELAY_CONFIG names the file and JETRELAY_WATCH asks `run` to follow it:
    // neither is a key of the tree.
    let env = Env::prefixed(ENV_PREFIX).split("__").filter(|k| {
        !k.as_str().eq_ignore_ascii_case("config") && !k.as_str().eq_ignore_ascii_case("watch")
    });
    Ok(figment.merge(env))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::result_large_err)] // figment::Jail fixes the closure's error type.
    fn a_quoted_variable_with_a_non_ascii_character_before_an_escape_is_read() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("c.toml", MINIMAL)?;
            // The config fuzz target's find: figment 0.10.19 sliced this by a char
            // count and panicked (vendor/figment is patched).
            for (value, url) in [
                (
                    "\"http://127.0.0.1:8080/\u{e9}\\u0061\"",
                    "http://127.0.0.1:8080/\u{e9}a",
                ),
                (
                    "\"http://127.0.0.1:8080/a\\u00e9\"",
                    "http://127.0.0.1:8080/a\u{e9}",
                ),
                (
                    "http://127.0.0.1:8080/\u{e9}",
                    "http://127.0.0.1:8080/\u{e9}",
                ),
            ] {
                jail.set_env("JETRELAY_HTTP__URL", value);
                let c = Config::load(Some(Path::new("c.toml"))).unwrap();
                assert_eq!(c.http.url, url, "{value}");
            }
            Ok(())
        });
    }

    fn parse(toml: &str) -> Result<Config, ConfigError> {
        Config::from_figment(Figment::from(Toml::string(toml)))
    }

    /// One durable source and an app: the smallest valid config.
    pub(super) const MINIMAL: &str = r#"
        [source]
        stream = "ORDERS"
        kind = "durable"
        durable = "worker"
        [http]
        url = "http://127.0.0.1:8080/messages"
    "#;

    fn keys(err: ConfigError) -> Vec<String> {
        err.problems().iter().map(|p| p.key.clone()).collect()
    }

    #[test]
    fn a_broken_url_is_named_without_its_password() {
        for (key, value) in [
            ("url", "http://alice:hunter2@127.0.0.1:99999/m"),
            ("health_url", "http://alice:hunter2@127.0.0.1:99999/h"),
            ("health_url", "ftp://alice:hunter2@127.0.0.1/h"),
        ] {
            let text = format!("{MINIMAL}{key} = \"{value}\"\n")
                .replace("url = \"http://127.0.0.1:8080/messages\"\n", "");
            let text = if key == "url" {
                text
            } else {
                format!("{text}url = \"http://127.0.0.1:8080/m\"\n")
            };
            let err = parse(&text).unwrap_err().to_string();
            assert!(err.contains(&format!("http.{key}")), "{err}");
            assert!(err.contains("***@127.0.0.1"), "{err}");
            assert!(!err.contains("hunter2"), "{err}");
        }
    }

    #[test]
    fn minimal_config_gets_the_documented_defaults() {
        let c = parse(MINIMAL).unwrap();
        assert_eq!(c.delivery.max_in_flight, 32);
        assert_eq!(c.delivery.max_buffered, 256);
        assert_eq!(c.consumer.ack_wait_ms, 30_000);
        assert_eq!(c.ordering(), Ordering::None);
        assert_eq!(c.nats.servers, vec!["nats://127.0.0.1:4222"]);
        assert_eq!(c.admin.listen, "0.0.0.0:9090");
    }

    #[test]
    fn group_sources_default_to_partition_ordering() {
        let c = parse(
            r#"
            [source]
            stream = "S"
            kind = "static"
            group = "cg"
            member = "m1"
            [http]
            url = "http://127.0.0.1:1/x"
        "#,
        )
        .unwrap();
        assert_eq!(c.ordering(), Ordering::Partition);
    }

    #[test]
    fn empty_config_names_every_required_key() {
        let k = keys(parse("").unwrap_err());
        assert!(k.contains(&"source.stream".to_string()), "{k:?}");
        assert!(k.contains(&"source.kind".to_string()), "{k:?}");
        assert!(k.contains(&"http.url".to_string()), "{k:?}");
    }

    #[test]
    fn unknown_keys_and_sections_are_rejected_with_their_path() {
        let err = parse(&format!("{MINIMAL}\n[delivery]\nmax_inflight = 3\n")).unwrap_err();
        assert_eq!(keys(err), vec!["delivery.max_inflight"]);
        let err = parse(&format!("{MINIMAL}\n[extra]\nx = 1\n")).unwrap_err();
        assert!(err.to_string().contains("extra"), "{err}");
    }

    #[test]
    fn a_misspelt_key_names_the_closest_one_plainly() {
        let err = parse(&format!("{MINIMAL}\n[delivery]\nmax_inflight = 3\n")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid configuration:\n  delivery.max_inflight: unknown key; did you mean max_in_flight?"
        );
        let err = parse(&format!("{MINIMAL}\n[delivery]\ncolour = 3\n")).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("delivery.colour: unknown key (the keys of [delivery] are max_in_flight, max_buffered,"),
            "{text}"
        );
        assert!(!text.contains('`'), "{text}");
        let err = parse(&format!("{MINIMAL}\n[sorce]\nx = 1\n")).unwrap_err();
        assert!(
            err.to_string()
                .contains("sorce: unknown section; did you mean source?"),
            "{err}"
        );
        // `[sources]` is a section now: what is in it must be a source's table.
        let err = parse(&format!("{MINIMAL}\n[sources]\nx = 1\n")).unwrap_err();
        assert!(
            err.to_string().contains("sources.x: must be a map"),
            "{err}"
        );
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment::Jail fixes the closure's error type.
    fn a_mistake_in_the_environment_names_the_variable() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("c.toml", MINIMAL)?;
            jail.set_env("JETRELAY_DELIVERY__MAX_INFLIGHT", "3");
            let err = Config::load(Some(Path::new("c.toml"))).unwrap_err();
            assert_eq!(
                err.to_string(),
                "invalid configuration:\n  JETRELAY_DELIVERY__MAX_INFLIGHT (delivery.max_inflight): unknown key; did you mean JETRELAY_DELIVERY__MAX_IN_FLIGHT?"
            );
            jail.clear_env();
            jail.set_env("JETRELAY_DELIVERY__MAX_IN_FLIGHT", "0");
            let err = Config::load(Some(Path::new("c.toml"))).unwrap_err();
            assert!(
                err.to_string().contains(
                    "JETRELAY_DELIVERY__MAX_IN_FLIGHT (delivery.max_in_flight): must be at least 1"
                ),
                "{err}"
            );
            jail.set_env("JETRELAY_DELIVERY__MAX_IN_FLIGHT", "many");
            let err = Config::load(Some(Path::new("c.toml"))).unwrap_err();
            assert!(
                err.to_string()
                    .contains("JETRELAY_DELIVERY__MAX_IN_FLIGHT (delivery.max_in_flight): must be a whole number"),
                "{err}"
            );
            Ok(())
        });
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment::Jail fixes the closure's error type.
    fn no_file_at_all_says_that_no_file_was_given() {
        figment::Jail::expect_with(|jail| {
            jail.clear_env();
            let err = Config::load(None).unwrap_err();
            assert!(matches!(err, ConfigError::NoFile(_)), "{err}");
            assert!(
                err.to_string().starts_with(
                    "no config file was given (--config FILE, or JETRELAY_CONFIG=FILE)"
                ),
                "{err}"
            );
            // The environment alone may make a whole config.
            jail.set_env("JETRELAY_SOURCE__STREAM", "S");
            jail.set_env("JETRELAY_SOURCE__KIND", "durable");
            jail.set_env("JETRELAY_SOURCE__DURABLE", "d");
            jail.set_env("JETRELAY_HTTP__URL", "http://127.0.0.1:1/x");
            assert!(Config::load(None).is_ok());
            Ok(())
        });
    }

    #[test]
    fn wrong_types_name_the_key() {
        let err = parse(&format!(
            "{MINIMAL}\n[delivery]\nmax_in_flight = \"many\"\n"
        ))
        .unwrap_err();
        assert_eq!(keys(err), vec!["delivery.max_in_flight"]);
    }

    #[test]
    fn zero_in_flight_reads_as_the_documented_message() {
        let err = parse(&format!("{MINIMAL}\n[delivery]\nmax_in_flight = 0\n")).unwrap_err();
        assert!(
            err.to_string()
                .contains("delivery.max_in_flight: must be at least 1"),
            "{err}"
        );
    }

    #[test]
    fn rule_table() {
        // (extra toml, the key that must be reported)
        let cases: &[(&str, &str)] = &[
            (
                "[delivery]\nmax_buffered = 4\nmax_in_flight = 8",
                "delivery.max_buffered",
            ),
            ("[delivery]\nmax_batch = 0", "delivery.max_batch"),
            ("[delivery]\nmax_batch = 10001", "delivery.max_batch"),
            (
                "[delivery]\nmax_buffered = 4000000000",
                "delivery.max_buffered",
            ),
            (
                "[delivery]\nmax_in_flight = 20000\nmax_buffered = 30000",
                "delivery.max_in_flight",
            ),
            (
                "[delivery]\nretry_after_max_ms = 0",
                "delivery.retry_after_max_ms",
            ),
            (
                "[delivery]\nretry_after_max_ms = 500",
                "delivery.retry_after_max_ms",
            ),
            (
                "[delivery]\nretry_after_max_ms = 9223372036854775807",
                "delivery.retry_after_max_ms",
            ),
            (
                "[delivery]\nretry_max_ms = 86400001",
                "delivery.retry_max_ms",
            ),
            (
                "[delivery]\nshutdown_grace_ms = 3600001",
                "delivery.shutdown_grace_ms",
            ),
            (
                "[delivery]\nmax_buffered_bytes = 100",
                "delivery.max_buffered_bytes",
            ),
            (
                "[consumer]\nack_wait_ms = 9223372036854775807",
                "consumer.ack_wait_ms",
            ),
            ("[consumer]\nmax_deliver = 1000001", "consumer.max_deliver"),
            (
                "[consumer]\nbackoff_ms = [100, 86400001]\nmax_deliver = 5",
                "consumer.backoff_ms",
            ),
            ("[http]\ntimeout_ms = 3600001", "http.timeout_ms"),
            ("[http]\nhealth_threshold = 1001", "http.health_threshold"),
            (
                "[nats]\nrequest_timeout_ms = 3600001",
                "nats.request_timeout_ms",
            ),
            (
                "[topology]\nretry_max_ms = 3600001",
                "topology.retry_max_ms",
            ),
            (
                "[delivery]\nretry_max_ms = 10\nretry_initial_ms = 20",
                "delivery.retry_max_ms",
            ),
            ("[delivery]\nordering = \"partition\"", "delivery.ordering"),
            ("[consumer]\nmax_deliver = 0", "consumer.max_deliver"),
            ("[consumer]\nack_wait_ms = 10", "consumer.ack_wait_ms"),
            (
                "[consumer]\nbackoff_ms = [100, 200]\nmax_deliver = 2",
                "consumer.backoff_ms",
            ),
            ("[http]\nretry_statuses = [\"5xy\"]", "http.retry_statuses"),
            ("[http]\nterm_statuses = [\"2xx\"]", "http.term_statuses"),
            (
                "[http]\nheaders = { \"bad name\" = \"v\" }",
                "http.headers.bad name",
            ),
            ("[http]\nhealth_url = \"ftp://x\"", "http.health_url"),
            ("[http]\nhealth_threshold = 0", "http.health_threshold"),
            ("[dlq]\nsubject = \"dlq.*\"", "dlq.subject"),
            ("[admin]\nlisten = \"nowhere\"", "admin.listen"),
            ("[log]\nlevel = \"loud,,=x\"", "log.level"),
            ("[nats]\nservers = []", "nats.servers"),
            ("[nats]\nservers = [\"localhost:4222\"]", "nats.servers"),
            ("[nats]\nuser = \"u\"", "nats.password_file"),
            ("[nats]\ntoken_file = \"t\"\ncreds_file = \"c\"", "nats"),
            ("[nats]\ntls_cert_file = \"c\"", "nats.tls_key_file"),
            (
                "[topology]\nstream = \"managed\"",
                "topology.managed_stream",
            ),
            (
                "[topology.managed_stream]\nsubjects = [\"a\"]",
                "topology.managed_stream",
            ),
            (
                "[topology]\nstream = \"managed\"\n[topology.managed_stream]\nsubjects = []",
                "topology.managed_stream.subjects",
            ),
            (
                "[topology]\nstream = \"managed\"\n[topology.managed_stream]\nsubjects = [\"a\"]\nreplicas = 7",
                "topology.managed_stream.replicas",
            ),
            (
                "[topology]\nstream = \"managed\"\n[topology.managed_stream]\nsubjects = [\"a\"]\nmax_age_ms = 60000",
                "topology.managed_stream.duplicate_window_ms",
            ),
            (
                "[topology]\nstream = \"managed\"\n[topology.managed_stream]\nsubjects = [\"a\"]\nduplicate_window_ms = 9223372036854775807",
                "topology.managed_stream.duplicate_window_ms",
            ),
            (
                "[source]\nfilter_subjects = [\"a..b\"]",
                "source.filter_subjects",
            ),
            (
                "[source]\nfilter_subjects = [\"a.>\", \"a.b\"]",
                "source.filter_subjects",
            ),
            ("[source]\ngroup = \"g\"", "source.group"),
            (
                "[publish]\nallowed_subjects = [\"a.>.b\"]",
                "publish.allowed_subjects",
            ),
            ("[publish]\nmax_messages = 1001", "publish.max_messages"),
            (
                "[delivery]\nbatch_size = 10\nbatch_max_bytes = 2000000\nmax_buffered_bytes = 1000000",
                "delivery.batch_max_bytes",
            ),
            (
                "[http]\nproxy = \"http://alice:s3cret@proxy:3128\"",
                "http.proxy",
            ),
            (
                "[http]\nproxy_credentials_file = \"/run/proxy\"",
                "http.proxy_credentials_file",
            ),
            ("[http]\npass_headers = [\"Cookie\"]", "http.pass_headers"),
            ("[http]\npass_headers = [\"*\"]", "http.pass_headers"),
            ("[http]\npass_headers = [\"a b\"]", "http.pass_headers"),
            ("[publish]\nmax_messages = 0", "publish.max_messages"),
            ("[publish]\nmax_bytes = 0", "publish.max_bytes"),
            (
                "[publish]\nallowed_subjects = [\"a\"]\nlisten = \"here\"",
                "publish.listen",
            ),
            ("[publish]\nlisten = \"9091\"", "publish.listen"),
        ];
        for (extra, key) in cases {
            // Merge the case over the minimal config so only the case's key is wrong.
            let figment = Figment::from(Toml::string(MINIMAL)).merge(Toml::string(extra));
            let err = Config::from_figment(figment).expect_err(extra);
            let k = keys(err);
            assert!(
                k.iter().any(|k| k == key),
                "{extra:?}: expected {key}, got {k:?}"
            );
        }
    }

    #[test]
    fn a_proxy_with_credentials_in_its_url_is_refused_and_never_shown() {
        let figment = Figment::from(Toml::string(MINIMAL)).merge(Toml::string(
            "[http]\nproxy = \"http://alice:s3cret@proxy:3128\"\n",
        ));
        let err = Config::from_figment(figment).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("http://***@proxy:3128") && !text.contains("s3cret"),
            "{text}"
        );
    }

    #[test]
    fn the_publish_endpoint_binds_loopback_unless_told_otherwise() {
        let listen = |l: &str| {
            let c = PublishConfig {
                listen: l.into(),
                ..PublishConfig::default()
            };
            c.listen_addr().map(|a| a.to_string())
        };
        assert_eq!(listen(""), None);
        assert_eq!(listen("9091").as_deref(), Some("127.0.0.1:9091"));
        assert_eq!(listen(":9091").as_deref(), Some("127.0.0.1:9091"));
        assert_eq!(listen("0.0.0.0:9091").as_deref(), Some("0.0.0.0:9091"));
        assert_eq!(listen("[::1]:9091").as_deref(), Some("[::1]:9091"));
        assert_eq!(listen("nowhere"), None);
    }

    #[test]
    fn group_kinds_require_group_and_member_and_refuse_durable_keys() {
        let err = parse(
            r#"
            [source]
            stream = "S"
            kind = "elastic"
            durable = "d"
            filter_subjects = ["a"]
            [http]
            url = "http://127.0.0.1:1/x"
        "#,
        )
        .unwrap_err();
        let k = keys(err);
        for key in [
            "source.group",
            "source.member",
            "source.durable",
            "source.filter_subjects",
        ] {
            assert!(k.contains(&key.to_string()), "{key} in {k:?}");
        }
    }

    #[test]
    fn auto_join_is_for_elastic_members_with_a_timeout_in_range() {
        let member = |kind: &str, extra: &str| {
            Config::from_toml(&[&format!(
                "[source]\nstream = \"S\"\nkind = \"{kind}\"\ngroup = \"g\"\nmember = \"m\"\n{extra}\n[http]\nurl = \"http://127.0.0.1:1/x\""
            )])
        };
        let c = member("elastic", "auto_join = true").unwrap();
        assert!(c.source.auto_join);
        assert_eq!(c.source.member_timeout_ms, 30_000);
        let e = member("static", "auto_join = true").unwrap_err();
        assert_eq!(keys(e), ["source.auto_join"]);
        for bad in ["member_timeout_ms = 2999", "member_timeout_ms = 3600001"] {
            let e = member("elastic", &format!("auto_join = true\n{bad}")).unwrap_err();
            assert_eq!(keys(e), ["source.member_timeout_ms"], "{bad}");
        }
    }

    #[test]
    fn group_members_leave_the_stream_and_consumer_to_the_group() {
        let member = r#"
            [source]
            stream = "S"
            kind = "static"
            group = "g"
            member = "m"
            [http]
            url = "http://127.0.0.1:1/x"
        "#;
        assert!(parse(member).is_ok());
        let table = [
            (
                "[topology]\nstream = \"managed\"\n[topology.managed_stream]\nsubjects = [\"a\"]",
                "topology.stream",
            ),
            ("[topology]\nconsumer = \"bind\"", "topology.consumer"),
        ];
        for (extra, key) in table {
            for kind in ["static", "elastic"] {
                let figment = Figment::from(Toml::string(member))
                    .merge(Toml::string(&format!("[source]\nkind = \"{kind}\"")))
                    .merge(Toml::string(extra));
                let k = keys(Config::from_figment(figment).expect_err(extra));
                assert_eq!(k, vec![key.to_string()], "{kind}: {extra}");
            }
            // The same keys are fine for a durable.
            let figment = Figment::from(Toml::string(MINIMAL)).merge(Toml::string(extra));
            assert!(Config::from_figment(figment).is_ok(), "{extra}");
        }
    }

    #[test]
    fn servers_take_a_list_or_one_comma_separated_string() {
        let table = [
            ("servers = [\"nats://a:4222\"]", vec!["nats://a:4222"]),
            (
                "servers = \"nats://a:4222, nats://b:4222\"",
                vec!["nats://a:4222", "nats://b:4222"],
            ),
            ("servers = \"nats://a:4222\"", vec!["nats://a:4222"]),
        ];
        for (line, want) in table {
            let c = parse(&format!("{MINIMAL}\n[nats]\n{line}\n")).unwrap();
            assert_eq!(c.nats.servers, want, "{line}");
        }
        let err = parse(&format!("{MINIMAL}\n[nats]\nservers = \"\"\n")).unwrap_err();
        assert_eq!(keys(err), vec!["nats.servers"]);
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment::Jail fixes the closure's error type.
    fn the_nats_table_loads_alone_with_the_environment_over_it() {
        figment::Jail::expect_with(|jail| {
            // The rest of the file is not read (this [source] would be invalid).
            jail.create_file(
                "c.toml",
                "[nats]\nservers = [\"nats://a:4222\"]\ncreds_file = \"/x.creds\"\n[source]\nkind = \"static\"\n",
            )?;
            let n = NatsConfig::load(Some(Path::new("c.toml"))).map_err(|e| e.to_string())?;
            assert_eq!(n.servers, vec!["nats://a:4222"]);
            assert_eq!(n.creds_file, "/x.creds");
            jail.set_env("JETRELAY_NATS__SERVERS", "nats://b:4222,nats://c:4222");
            let n = NatsConfig::load(Some(Path::new("c.toml"))).map_err(|e| e.to_string())?;
            assert_eq!(n.servers, vec!["nats://b:4222", "nats://c:4222"]);
            assert_eq!(
                NatsConfig::load(None)
                    .map_err(|e| e.to_string())?
                    .servers
                    .len(),
                2
            );
            jail.set_env("JETRELAY_NATS__USER", "u");
            let err = NatsConfig::load(Some(Path::new("c.toml"))).unwrap_err();
            assert_eq!(keys(err), vec!["nats", "nats.password_file"]);
            jail.create_file("d.toml", "[nats]\nnope = 1\n")?;
            let err = NatsConfig::load(Some(Path::new("d.toml"))).unwrap_err();
            assert_eq!(keys(err), vec!["nats.nope"]);
            assert!(matches!(
                NatsConfig::load(Some(Path::new("missing.toml"))),
                Err(ConfigError::MissingFile(_))
            ));
            Ok(())
        });
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment::Jail fixes the closure's error type.
    fn environment_overrides_the_file_with_double_underscores() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("c.toml", MINIMAL)?;
            jail.set_env("JETRELAY_DELIVERY__MAX_IN_FLIGHT", "7");
            jail.set_env("JETRELAY_HTTP__URL", "http://127.0.0.1:9/app");
            jail.set_env("JETRELAY_NATS__SERVERS", "[\"nats://10.0.0.1:4222\"]");
            jail.set_env("JETRELAY_CONFIG", "c.toml");
            let c = Config::load(Some(Path::new("c.toml"))).map_err(|e| e.to_string())?;
            assert_eq!(c.delivery.max_in_flight, 7);
            assert_eq!(c.http.url, "http://127.0.0.1:9/app");
            assert_eq!(c.nats.servers, vec!["nats://10.0.0.1:4222"]);
            jail.set_env("JETRELAY_DELIVERY__NOPE", "1");
            let err = Config::load(Some(Path::new("c.toml"))).unwrap_err();
            assert_eq!(keys(err), vec!["delivery.nope"]);
            Ok(())
        });
    }

    #[test]
    fn a_missing_file_is_an_error_not_an_empty_config() {
        let err = Config::load(Some(Path::new("/nonexistent/jetrelay.toml"))).unwrap_err();
        assert!(matches!(err, ConfigError::MissingFile(_)));
    }

    #[test]
    fn every_shipped_config_file_loads() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                let figment = Figment::from(Toml::file_exact(&path));
                if let Err(e) = Config::from_figment(figment) {
                    panic!("{}: {e}", path.display());
                }
                seen += 1;
            }
        }
        assert!(seen >= 3, "expected a config per source kind, saw {seen}");
    }

    proptest::proptest! {
        #[test]
        fn validation_never_panics(in_flight in 0u32..100, buffered in 0u32..300, batch in 0u32..100,
                                   ack_wait in 0u64..100_000, max_deliver in -3i64..20) {
            let mut c = parse(MINIMAL).unwrap();
            c.delivery.max_in_flight = in_flight;
            c.delivery.max_buffered = buffered;
            c.delivery.max_batch = batch;
            c.consumer.ack_wait_ms = ack_wait;
            c.consumer.max_deliver = max_deliver;
            let problems = c.problems();
            proptest::prop_assert_eq!(problems.is_empty(),
                in_flight >= 1 && buffered >= in_flight && batch >= 1 && ack_wait >= 500
                && (max_deliver == -1 || max_deliver >= 1));
        }
    }
}
