//! Routes: where a source's message goes, decided by the first route whose match
//! holds — its subject (the partition token stripped) against NATS patterns, and
//! header equality — to the route's own target (a path or URL of the app), or to an
//! action instead of a request (`ack`, `term`, `dlq`). A message no route matches
//! goes to the source's target. Pure: the dispatcher asks [`pick`] for each attempt.

pub use crate::policy::Skip;

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
            to: match &self.to {
                To::Target(t) => To::Target(f(t)?),
                To::Skip(s) => To::Skip(*s),
            },
        })
    }

    /// Whether a message with `subject` and `headers` is this route's.
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

/// The first route `subject` and `headers` match, with its index; `None`: the
/// source's own target.
pub fn pick<'a, T>(
    routes: &'a [Route<T>],
    subject: &str,
    headers: &[(String, String)],
) -> Option<(usize, &'a Route<T>)> {
    routes
        .iter()
        .enumerate()
        .find(|(_, r)| r.matches(subject, headers))
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
            let got = pick(&routes, subject, &h(headers)).map(|(_, r)| r.name.as_str());
            assert_eq!(got, *want, "{subject} {headers:?}");
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
            proptest::prop_assert_eq!(pick(&routes, &subject, &[]).map(|(i, _)| i), first);
        }
    }
}
