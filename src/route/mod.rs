//! Routes: where a source's message goes, decided by the first route whose match
//! holds — its subject (the partition token stripped) against NATS patterns,
//! header equality, and its `when` (a CEL expression, [`when`]), all of them — to
//! the route's own target (a path or URL of the app), or to an action instead of a
//! request (`ack`, `term`, `dlq`). A message no route matches goes to the source's
//! target. Pure: the dispatcher asks [`pick`] for each attempt.

pub mod when;

pub use crate::policy::Skip;
pub use when::{Vars, When, WhenError};

/// Where a route sends what it matches: `T` is its target (the settings of one, or
/// what sends to it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum To<T> {
    /// The route's own target (a path or URL of the app).
    Target(T),
    /// No request: this action.
    Skip(Skip),
}

/// One route, with its target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route<T> {
    /// Its name in metrics and logs: as configured, else its index.
    pub name: String,
    /// Subject patterns (NATS wildcards); empty: any subject.
    pub subjects: Vec<String>,
    /// Headers that must have these values (names compared without case); empty:
    /// any headers.
    pub headers: Vec<(String, String)>,
    /// A CEL expression that must be `true`; `None`: no condition.
    pub when: Option<When>,
    /// Where what it matches goes.
    pub to: To<T>,
}

impl<T> To<T> {
    /// The same, its target borrowed.
    pub fn as_ref(&self) -> To<&T> {
        match self {
            To::Target(t) => To::Target(t),
            To::Skip(s) => To::Skip(*s),
        }
    }
}

impl<T> Route<T> {
    /// The same route with its target made by `f` (settings into what sends).
    ///
    /// # Errors
    /// `f`'s.
    pub fn try_map<U, E>(&self, f: impl FnOnce(&T) -> Result<U, E>) -> Result<Route<U>, E> {
        Ok(Route {
            name: self.name.clone(),
            subjects: self.subjects.clone(),
            headers: self.headers.clone(),
            when: self.when.clone(),
            to: match &self.to {
                To::Target(t) => To::Target(f(t)?),
                To::Skip(s) => To::Skip(*s),
            },
        })
    }

    /// Whether the message `facts` describes (its `subject` and `headers` given
    /// again) is this route's: subjects and headers first, then `when`.
    pub fn takes(&self, subject: &str, headers: &[(String, String)], facts: &mut Vars<'_>) -> bool {
        self.matches(subject, headers) && self.when.as_ref().is_none_or(|w| w.holds(facts))
    }

    /// Whether a message with `subject` and `headers` matches this route's subjects
    /// and headers (its `when` aside).
    pub fn matches(&self, subject: &str, headers: &[(String, String)]) -> bool {
        let subject_ok = self.subjects.is_empty()
            || self
                .subjects
                .iter()
                .any(|p| crate::subject::covers(p, subject));
        subject_ok
            && self.headers.iter().all(|(name, value)| {
                headers
                    .iter()
                    .any(|(n, v)| n.eq_ignore_ascii_case(name) && v == value)
            })
    }
}

/// The first route a message with `subject`, `headers` and `payload` matches, with
/// its index; `None`: the source's own target. The payload is read (as JSON) at
/// most once, and only when a route whose subjects and headers match has a `when`
/// that names `body`.
pub fn pick<'a, T>(
    routes: &'a [Route<T>],
    subject: &str,
    headers: &[(String, String)],
    payload: &[u8],
) -> Option<(usize, &'a Route<T>)> {
    let mut facts = Vars::new(subject, headers, payload).reading(members(routes));
    routes
        .iter()
        .enumerate()
        .find(|(_, r)| r.takes(subject, headers, &mut facts))
}

/// The body's top-level members the routes' `when`s read (`None`: one may read
/// any of it).
fn members<T>(routes: &[Route<T>]) -> Option<Vec<&str>> {
    let mut out = Vec::new();
    for w in (routes.iter().filter_map(|r| r.when.as_ref())).filter(|w| w.uses_body()) {
        out.extend(w.members()?.iter().map(String::as_str));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(name: &str, subjects: &[&str], headers: &[(&str, &str)], to: To<()>) -> Route<()> {
        Route {
            name: name.into(),
            subjects: subjects.iter().map(|s| s.to_string()).collect(),
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            when: None,
            to,
        }
    }

    fn h(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_first_match_wins_table() {
        let routes = [
            route("created", &["orders.*.created"], &[], To::Target(())),
            route("v2", &[], &[("Type", "v2")], To::Target(())),
            route("noise", &["orders.noise.>"], &[], To::Skip(Skip::Ack)),
            route(
                "both",
                &["audit.>"],
                &[("X-Kind", "a")],
                To::Skip(Skip::Dlq),
            ),
        ];
        type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], Option<&'a str>);
        let cases: &[Case<'_>] = &[
            ("orders.1.created", &[], Some("created")),
            ("orders.1.created", &[("type", "v2")], Some("created")),
            ("orders.1.updated", &[("type", "v2")], Some("v2")),
            ("orders.1.updated", &[("Type", "V2")], None),
            ("orders.noise.a.b", &[], Some("noise")),
            ("orders.noise", &[], None),
            ("audit.x", &[("x-kind", "a")], Some("both")),
            ("audit.x", &[("x-kind", "b")], None),
            ("audit.x", &[], None),
            ("other", &[("Type", "v1"), ("Type", "v2")], Some("v2")),
        ];
        for (subject, headers, want) in cases {
            let got = pick(&routes, subject, &h(headers), b"").map(|(_, r)| r.name.as_str());
            assert_eq!(got, *want, "{subject} {headers:?}");
        }
    }

    #[test]
    fn when_is_one_more_condition_and_all_must_hold() {
        let when = |r: Route<()>, expr: &str| Route {
            when: Some(When::compile(expr).unwrap()),
            ..r
        };
        let routes = [
            when(
                route(
                    "created",
                    &["orders.>"],
                    &[("Tenant", "prod")],
                    To::Target(()),
                ),
                r#"body.type == "order.created""#,
            ),
            when(
                route("ping", &[], &[], To::Skip(Skip::Ack)),
                r#"body.type == "ping""#,
            ),
            when(
                route("eu", &["orders.eu"], &[], To::Target(())),
                r#"headers["X-Ver"] == "2""#,
            ),
        ];
        type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str, Option<&'a str>);
        let cases: &[Case<'_>] = &[
            (
                "orders.eu",
                &[("Tenant", "prod")],
                r#"{"type": "order.created"}"#,
                Some("created"),
            ),
            (
                "orders.eu",
                &[("Tenant", "test")],
                r#"{"type": "order.created"}"#,
                None,
            ),
            (
                "audit.x",
                &[("Tenant", "prod")],
                r#"{"type": "order.created"}"#,
                None,
            ),
            ("audit.x", &[], r#"{"type": "ping"}"#, Some("ping")),
            (
                "orders.eu",
                &[("Tenant", "prod")],
                r#"{"type": "ping"}"#,
                Some("ping"),
            ),
            ("orders.eu", &[("X-Ver", "2")], "not json", Some("eu")),
            ("orders.eu", &[], "not json", None),
        ];
        for (subject, headers, body, want) in cases {
            let got =
                pick(&routes, subject, &h(headers), body.as_bytes()).map(|(_, r)| r.name.as_str());
            assert_eq!(got, *want, "{subject} {headers:?} {body}");
        }
    }

    proptest::proptest! {
        /// Whatever matches, what is picked is the first route that matches.
        #[test]
        fn the_pick_is_the_first_that_matches(
            tokens in proptest::collection::vec("[ab]", 1..4),
            picks in proptest::collection::vec(0usize..6, 0..6),
        ) {
            let patterns = ["a", "a.>", "*.b", "b.*", ">", "a.b"];
            let routes: Vec<Route<()>> = picks
                .iter()
                .enumerate()
                .map(|(i, p)| route(&i.to_string(), &[patterns[*p]], &[], To::Target(())))
                .collect();
            let subject = tokens.join(".");
            let first = routes.iter().position(|r| r.matches(&subject, &[]));
            proptest::prop_assert_eq!(pick(&routes, &subject, &[], b"").map(|(i, _)| i), first);
        }
    }
}
