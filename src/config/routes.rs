//! A source's routes (`routes` of `[source]` or `[sources.<name>]`, one
//! `[[….routes]]` table each): the first whose match holds decides where a message
//! goes, and a message none matches goes to `http.url`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Config, Problems, SourceKind};
use crate::policy::Skip;

/// One route: its match, and its target or action.
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
    /// A CEL expression over `subject`, `headers` and `body` that must be true;
    /// empty: none.
    pub when: String,
    /// Replaces the path of the source's `http.url`.
    pub path: String,
    /// A URL of its own instead of the source's.
    pub url: String,
    /// Instead of a target: `ack`, `term` or `dlq`.
    pub action: Option<Skip>,
}

impl Config {
    /// The source's routes: each one's own rules, no two of one name, none on a
    /// service (its endpoints are its routes).
    pub(super) fn check_routes(&self, p: &mut Problems) {
        let routes = &self.source.routes;
        if !routes.is_empty() && self.source.kind == Some(SourceKind::Service) {
            p.add(
                "source.routes",
                "a service's requests go by its endpoints (each with its path), not routes",
            );
        }
        for (i, r) in routes.iter().enumerate() {
            for why in route_problems(r, self) {
                p.add(format!("source.routes[{i}]"), why);
            }
        }
        let mut names: Vec<&str> = routes.iter().map(|r| r.name.as_str()).collect();
        names.retain(|n| !n.is_empty());
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            p.add("source.routes", format!("two routes are named {:?}", w[0]));
        }
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
    if r.subjects.is_empty() && r.headers.is_empty() && r.when.is_empty() {
        p.push(
            "an empty match (no subjects, headers or when) would take every message: a message no route matches goes to http.url"
                .to_string(),
        );
    }
    if !r.when.is_empty()
        && let Err(e) = crate::route::When::compile(&r.when)
    {
        p.push(format!("when: {e}"));
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
