//! `[source]`: the stream and where messages come from (a durable, or a member of a
//! static or elastic group), or the NATS service whose requests the app answers
//! (`kind = "service"`: its name, version, queue group and endpoints).

use serde::{Deserialize, Serialize};

use super::{Config, Problems, RouteConfig};
use crate::app::headers::RequestFormat;
use crate::subject;

/// `weight`'s bound: a share of the budget is `weight / Σ weights`.
const MAX_WEIGHT: u64 = 1000;

/// `source.kind`
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SourceKind {
    /// A plain durable pull consumer.
    Durable,
    /// A member of a static partitioned consumer group.
    Static,
    /// A member of an elastic partitioned consumer group.
    Elastic,
    /// A NATS service (ADR-32): requests on its endpoints' subjects, answered by the app.
    Service,
}

impl SourceKind {
    /// The name as the config writes it.
    pub fn name(self) -> &'static str {
        match self {
            SourceKind::Durable => "durable",
            SourceKind::Static => "static",
            SourceKind::Elastic => "elastic",
            SourceKind::Service => "service",
        }
    }

    /// Whether messages carry a partition token.
    pub fn is_group(self) -> bool {
        matches!(self, SourceKind::Static | SourceKind::Elastic)
    }
}

/// `[source]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SourceConfig {
    /// The stream messages come from (a group's origin stream).
    pub stream: String,
    /// Durable, static group member or elastic group member.
    pub kind: Option<SourceKind>,
    /// The consumer group (group kinds).
    pub group: String,
    /// This member (group kinds).
    pub member: String,
    /// The durable consumer's name (`durable`).
    pub durable: String,
    /// The durable consumer's filters (`durable`).
    pub filter_subjects: Vec<String>,
    /// Elastic: join the membership on start, leave it on a clean stop, keep a
    /// liveness record meanwhile.
    pub auto_join: bool,
    /// Elastic with `auto_join`: an auto-joined member silent this long is removed
    /// by the others.
    pub member_timeout_ms: u64,
    /// `service`: the service's name (`$SRV.INFO.<service>`).
    pub service: String,
    /// `service`: its version (semantic: `1.0.0`).
    pub version: String,
    /// `service`: the queue group its instances share.
    pub queue_group: String,
    /// `service`: its endpoints.
    pub endpoints: Vec<EndpointConfig>,
    /// `service`: the longest answer handed on as a reply; a longer one replies 502.
    pub max_reply_bytes: u64,
    /// Its share of `[budget]` when sources compete (1 to 1000).
    pub weight: u64,
    /// Its routes, first match first (`[[source.routes]]`).
    pub routes: Vec<RouteConfig>,
}

/// A source's own keys by kind, as its rules checked them: each kind holds only
/// its keys (`SourceConfig` is the table as written, where a key of another kind
/// is named and refused).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceSpec {
    /// A plain durable pull consumer.
    Durable {
        /// The stream.
        stream: String,
        /// The consumer's name.
        durable: String,
        /// Its filters.
        filter_subjects: Vec<String>,
    },
    /// A member of a static group.
    Static {
        /// The group's origin stream.
        stream: String,
        /// The group.
        group: String,
        /// This member.
        member: String,
    },
    /// A member of an elastic group.
    Elastic {
        /// The group's origin stream.
        stream: String,
        /// The group.
        group: String,
        /// This member.
        member: String,
        /// With `auto_join`: how long a silent member is kept (ms).
        auto_join_timeout_ms: Option<u64>,
    },
    /// A NATS service.
    Service {
        /// Its name.
        service: String,
        /// Its version.
        version: String,
        /// Its queue group.
        queue_group: String,
        /// Its endpoints, in order.
        endpoints: Vec<EndpointConfig>,
        /// The longest answer handed on as a reply.
        max_reply_bytes: u64,
    },
}

/// One endpoint of a service: requests on `subject` are POSTed to `path`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct EndpointConfig {
    /// Its name (`endpoint` label, `Nats-Service-Endpoint`).
    pub name: String,
    /// The subject it answers (wildcards allowed).
    pub subject: String,
    /// Replaces the path of the source's `http.url`.
    pub path: String,
}

/// `source.max_reply_bytes`' upper bound (a NATS server's largest `max_payload`).
pub(super) const MAX_REPLY_BYTES: u64 = 64 << 20;

impl Default for SourceConfig {
    fn default() -> Self {
        SourceConfig {
            stream: String::new(),
            kind: None,
            group: String::new(),
            member: String::new(),
            durable: String::new(),
            filter_subjects: Vec::new(),
            auto_join: false,
            member_timeout_ms: 30_000,
            service: String::new(),
            version: "0.0.0".into(),
            queue_group: "q".into(),
            endpoints: Vec::new(),
            max_reply_bytes: 1 << 20,
            weight: 1,
            routes: Vec::new(),
        }
    }
}

impl SourceConfig {
    /// Its keys by kind; `None` without a kind (which its rule refuses).
    pub fn spec(&self) -> Option<SourceSpec> {
        let s = self.clone();
        Some(match self.kind? {
            SourceKind::Durable => SourceSpec::Durable {
                stream: s.stream,
                durable: s.durable,
                filter_subjects: s.filter_subjects,
            },
            SourceKind::Static => SourceSpec::Static {
                stream: s.stream,
                group: s.group,
                member: s.member,
            },
            SourceKind::Elastic => SourceSpec::Elastic {
                stream: s.stream,
                group: s.group,
                member: s.member,
                auto_join_timeout_ms: s.auto_join.then_some(s.member_timeout_ms),
            },
            SourceKind::Service => SourceSpec::Service {
                service: s.service,
                version: s.version,
                queue_group: s.queue_group,
                endpoints: s.endpoints,
                max_reply_bytes: s.max_reply_bytes,
            },
        })
    }

    /// Its share of the budget when sources compete: `weight`, else 1.
    pub fn weight(&self) -> u32 {
        u32::try_from(self.weight).unwrap_or(1)
    }
}

impl Config {
    pub(super) fn check_source(&self, p: &mut Problems) {
        let s = &self.source;
        if !(1..=MAX_WEIGHT).contains(&s.weight) {
            p.add(
                "source.weight",
                format!("must be a whole number from 1 to {MAX_WEIGHT}"),
            );
        }
        self.check_routes(p);
        // At least a few heartbeats (every third of it) before a member is pruned.
        p.range(
            "source.member_timeout_ms",
            s.member_timeout_ms,
            3000,
            super::HOUR,
        );
        if s.auto_join && s.kind != Some(SourceKind::Elastic) {
            p.add(
                "source.auto_join",
                "is only for source.kind = \"elastic\" (a static group's membership is fixed)",
            );
        }
        if s.kind == Some(SourceKind::Service) {
            self.check_service(p);
            return;
        }
        self.check_not_service(p);
        if s.stream.is_empty() {
            p.add("source.stream", "is required");
        } else if let Err(e) = subject::validate_name(&s.stream) {
            p.add("source.stream", e);
        }
        let Some(kind) = s.kind else {
            p.add(
                "source.kind",
                "is required: \"durable\", \"static\", \"elastic\" or \"service\"",
            );
            return;
        };
        match kind {
            SourceKind::Durable => {
                required_name(p, "durable", &s.durable);
                for key in [("source.group", &s.group), ("source.member", &s.member)] {
                    if !key.1.is_empty() {
                        p.add(key.0, "is only for group sources (static, elastic)");
                    }
                }
                for f in &s.filter_subjects {
                    if let Err(e) = subject::validate_filter(f) {
                        p.add("source.filter_subjects", format!("{f:?}: {e}"));
                    }
                }
                if let Some(e) = subject::first_overlap(&s.filter_subjects) {
                    p.add("source.filter_subjects", e);
                }
            }
            SourceKind::Service => {}
            SourceKind::Static | SourceKind::Elastic => {
                for (key, v) in [("source.group", &s.group), ("source.member", &s.member)] {
                    if v.is_empty() {
                        p.add(key, "is required for group sources");
                    } else if let Err(e) = subject::validate_name(v) {
                        p.add(key, e);
                    }
                }
                if !s.durable.is_empty() {
                    p.add("source.durable", "is only for source.kind = \"durable\"");
                }
                if !s.filter_subjects.is_empty() {
                    p.add(
                        "source.filter_subjects",
                        "is only for source.kind = \"durable\": a group's filters are in its config",
                    );
                }
            }
        }
    }

    /// The keys of a service source, refused on another kind.
    fn check_not_service(&self, p: &mut Problems) {
        let s = &self.source;
        if !s.service.is_empty() || !s.endpoints.is_empty() {
            let key = if s.service.is_empty() {
                "source.endpoints"
            } else {
                "source.service"
            };
            p.add(key, "is only for source.kind = \"service\"");
        }
    }

    /// A service source: its name, version, queue group and endpoints; none of a
    /// consumer's keys.
    fn check_service(&self, p: &mut Problems) {
        let s = &self.source;
        required_name(p, "service", &s.service);
        if !is_semver(&s.version) {
            p.add(
                "source.version",
                format!("{:?} is not a semantic version (1.0.0)", s.version),
            );
        }
        if let Err(e) = subject::validate_name(&s.queue_group) {
            p.add("source.queue_group", e);
        }
        p.range(
            "source.max_reply_bytes",
            s.max_reply_bytes,
            1,
            MAX_REPLY_BYTES,
        );
        for (key, v) in [
            ("source.stream", s.stream.is_empty()),
            ("source.durable", s.durable.is_empty()),
            ("source.group", s.group.is_empty()),
            ("source.member", s.member.is_empty()),
            ("source.filter_subjects", s.filter_subjects.is_empty()),
        ] {
            if !v {
                p.add(
                    key,
                    "is not for source.kind = \"service\" (it consumes no stream)",
                );
            }
        }
        if self.delivery.batch_size > 1 {
            p.add(
                "delivery.batch_size",
                "is 1 for source.kind = \"service\": each request gets its own reply",
            );
        }
        if self.http.format == RequestFormat::CloudeventsStructured {
            p.add(
                "http.format",
                "\"cloudevents-structured\" is not for source.kind = \"service\": a request goes as it came (\"cloudevents\" adds binary mode's headers)",
            );
        }
        if self.http.unwrap_cloudevents {
            p.add(
                "http.unwrap_cloudevents",
                "is not for source.kind = \"service\": a request goes as it came",
            );
        }
        if self.delivery.max_age_ms > 0 {
            p.add(
                "delivery.max_age_ms",
                "is not for source.kind = \"service\": a request has no publish time (its requester's timeout bounds it)",
            );
        }
        if s.endpoints.is_empty() {
            p.add("source.endpoints", "a service needs at least one endpoint");
        }
        for (i, e) in s.endpoints.iter().enumerate() {
            for why in endpoint_problems(e) {
                p.add(format!("source.endpoints[{i}]"), why);
            }
        }
        let mut names: Vec<&str> = s.endpoints.iter().map(|e| e.name.as_str()).collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            p.add(
                "source.endpoints",
                format!("two endpoints are named {:?}", w[0]),
            );
        }
        let subjects: Vec<String> = s.endpoints.iter().map(|e| e.subject.clone()).collect();
        if let Some(e) = subject::first_overlap(&subjects) {
            p.add("source.endpoints", e);
        }
    }
}

/// What is wrong with one endpoint.
fn endpoint_problems(e: &EndpointConfig) -> Vec<String> {
    let mut p = Vec::new();
    if e.name.is_empty() {
        p.push("needs a name".to_string());
    } else if let Err(why) = subject::validate_name(&e.name) {
        p.push(format!("name {:?}: {why}", e.name));
    }
    if e.subject.is_empty() {
        p.push("needs a subject".to_string());
    } else if let Err(why) = subject::validate_filter(&e.subject) {
        p.push(format!("subject {:?}: {why}", e.subject));
    }
    if !e.path.is_empty() && !e.path.starts_with('/') {
        p.push(format!("path {:?} must start with /", e.path));
    }
    p
}

/// Whether `v` is `MAJOR.MINOR.PATCH` (with an optional `-pre` or `+build`), as
/// ADR-32 asks of a service's version.
fn is_semver(v: &str) -> bool {
    let core = v.split(['-', '+']).next().unwrap_or("");
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// `source.<kind>`, the name a source of that kind requires, present and a valid
/// NATS name.
fn required_name(p: &mut Problems, kind: &str, value: &str) {
    let key = format!("source.{kind}");
    if value.is_empty() {
        p.add(key, format!("is required when source.kind = {kind:?}"));
    } else if let Err(e) = subject::validate_name(value) {
        p.add(key, e);
    }
}

#[cfg(test)]
mod tests {
    use figment::Figment;
    use figment::providers::{Format, Toml};

    use super::*;

    /// The keys of the problems of `[source]` = `source` (with an app URL).
    fn problems(source: &str) -> Vec<String> {
        let toml = format!("[source]\n{source}\n[http]\nurl = \"http://127.0.0.1:1/x\"\n");
        match Config::from_figment(Figment::from(Toml::string(&toml))) {
            Ok(_) => Vec::new(),
            Err(e) => e.problems().iter().map(|p| p.to_string()).collect(),
        }
    }

    #[test]
    fn a_service_source_table() {
        let good = "kind = \"service\"\nservice = \"orders\"\nendpoints = [{ name = \"create\", subject = \"orders.create\", path = \"/c\" }]";
        assert_eq!(problems(good), Vec::<String>::new());
        let cases = [
            (
                "kind = \"service\"\nendpoints = [{ name = \"a\", subject = \"a\" }]",
                "source.service",
            ),
            ("kind = \"service\"\nservice = \"s\"", "source.endpoints"),
            (&format!("{good}\nstream = \"S\""), "source.stream"),
            (&format!("{good}\nversion = \"1.0\""), "source.version"),
            (
                &format!("{good}\nmax_reply_bytes = 0"),
                "source.max_reply_bytes",
            ),
            (
                "kind = \"service\"\nservice = \"s\"\nendpoints = [{ name = \"a\", subject = \"x.*\" }, { name = \"a\", subject = \"x.y\" }]",
                "two endpoints are named",
            ),
            (
                "kind = \"service\"\nservice = \"s\"\nendpoints = [{ name = \"a\", subject = \"x.*\" }, { name = \"b\", subject = \"x.y\" }]",
                "source.endpoints",
            ),
            (
                "kind = \"service\"\nservice = \"s\"\nendpoints = [{ name = \"a\", subject = \"x\", path = \"rel\" }]",
                "source.endpoints[0]",
            ),
            (
                "kind = \"durable\"\nstream = \"S\"\ndurable = \"d\"\nservice = \"s\"",
                "only for source.kind = \"service\"",
            ),
        ];
        for (source, expect) in cases {
            let found = problems(source);
            assert!(
                found.iter().any(|p| p.contains(expect)),
                "{source:?}: {found:?}"
            );
        }
    }

    #[test]
    fn versions_are_semantic() {
        for (v, ok) in [
            ("1.0.0", true),
            ("0.0.0", true),
            ("1.2.3-rc.1", true),
            ("1.2", false),
            ("", false),
            ("v1.0.0", false),
            ("1.a.0", false),
        ] {
            assert_eq!(is_semver(v), ok, "{v}");
        }
    }
}
