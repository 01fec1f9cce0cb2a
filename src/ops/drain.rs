//! The drain before the app stops (`/drain`): the request's `wait` read
//! ([`parse_wait`]), who may ask ([`may_drain`]), the answer ([`DrainOutcome`]), and the
//! [`Drain`] handle the admin port asks through and the daemon answers through. One
//! drain per process: a second request waits on the first and gets its answer.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;

/// What a drain did: `drained` when everything held was settled or released within
/// its wait; `settled` requests finished and settled, `released` held messages
/// handed back to JetStream (for another instance) during it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DrainOutcome {
    /// Nothing was left when the wait ran out.
    pub drained: bool,
    /// Messages whose requests finished and were settled (ack, retry, term, dlq).
    pub settled: u64,
    /// Messages released (NAK without a decision) for another instance.
    pub released: u64,
}

/// The longest `wait` a drain takes: a kubelet's hook is bounded by the pod's
/// grace anyway, and a longer wait would only hold an admin connection.
pub const MAX_WAIT: Duration = Duration::from_secs(3600);

/// `?wait=` of `/drain`: a number and a unit (`500ms`, `25s`, `2m`, `1m30s`), more
/// than zero and at most [`MAX_WAIT`].
///
/// # Errors
/// What is wrong with it, naming `wait`.
pub fn parse_wait(text: &str) -> Result<Duration, String> {
    crate::duration::parse(text, false, MAX_WAIT, "longer than an hour").map_err(|e| {
        format!(
            "wait={:?}: {} (a number and a unit: ms, s, m, h; as in 25s or 1m30s)",
            crate::printable::printable(text),
            e.0
        )
    })
}

/// Who asks `/drain`, as its request says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller<'a> {
    /// The `Authorization` header as it came.
    pub authorization: Option<&'a str>,
    /// The connection comes from a loopback address.
    pub loopback: bool,
    /// A browser says the request is cross-site (`Origin`, `Sec-Fetch-Site`).
    pub browser: bool,
    /// `Host` is an address or `localhost` (not a name a page could rebind).
    pub local_host: bool,
}

/// Whether a caller may drain: with `admin.token_file` set (`token`), only one
/// that presents `Authorization: Bearer <token>` (compared in constant time),
/// from anywhere; without it, only a caller from loopback that is no web page (a
/// page a browser on the same host loads could otherwise send a GET there, or reach
/// it through a DNS name rebound to 127.0.0.1).
pub fn may_drain(token: Option<&str>, caller: Caller<'_>) -> bool {
    match token {
        Some(token) => caller
            .authorization
            .and_then(crate::secret::bearer_token)
            .is_some_and(|given| crate::secret::same(given.as_bytes(), token.as_bytes())),
        None => caller.loopback && !caller.browser && caller.local_host,
    }
}

/// The process's one drain: asked once (the first request's wait counts), done
/// once. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Drain {
    asked: Arc<watch::Sender<Option<Duration>>>,
    done: Arc<watch::Sender<Option<DrainOutcome>>>,
}

impl Default for Drain {
    fn default() -> Self {
        Drain {
            asked: Arc::new(watch::channel(None).0),
            done: Arc::new(watch::channel(None).0),
        }
    }
}

impl Drain {
    /// Asks for the drain with `wait`; `false` when it was asked before (the first
    /// wait stands).
    pub fn ask(&self, wait: Duration) -> bool {
        self.asked.send_if_modified(|asked| {
            if asked.is_some() {
                return false;
            }
            *asked = Some(wait);
            true
        })
    }

    /// Whether the drain was asked (nothing resumes delivery then).
    pub fn is_asked(&self) -> bool {
        self.asked.borrow().is_some()
    }

    /// Completes when the drain is asked, with its wait (cancel-safe).
    pub async fn asked(&self) -> Duration {
        let mut rx = self.asked.subscribe();
        let asked = rx.wait_for(Option::is_some).await.map(|w| *w);
        match asked {
            Ok(wait) => wait.unwrap_or_default(),
            // The sender lives in `self`: it cannot close while this waits.
            Err(_) => std::future::pending().await,
        }
    }

    /// Records what the drain did; only the first outcome counts.
    pub fn finish(&self, outcome: DrainOutcome) {
        self.done.send_if_modified(|done| {
            if done.is_some() {
                return false;
            }
            *done = Some(outcome);
            true
        });
    }

    /// Completes when the drain is done, with its outcome (cancel-safe).
    pub async fn outcome(&self) -> DrainOutcome {
        let mut rx = self.done.subscribe();
        let done = rx.wait_for(Option::is_some).await.map(|d| *d);
        match done {
            Ok(done) => done.unwrap_or(DrainOutcome {
                drained: false,
                settled: 0,
                released: 0,
            }),
            // The sender lives in `self`: it cannot close while this waits.
            Err(_) => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn wait_table() {
        let ok = [
            ("25s", Duration::from_secs(25)),
            ("500ms", Duration::from_millis(500)),
            ("2m", Duration::from_secs(120)),
            ("1m30s", Duration::from_secs(90)),
            (" 1h ", Duration::from_secs(3600)),
        ];
        for (text, want) in ok {
            assert_eq!(parse_wait(text), Ok(want), "{text}");
        }
        for bad in [
            "",
            "25",
            "s",
            "10x",
            "0s",
            "1m30",
            "-5s",
            "2h",
            "1d",
            "4294967296s",
            "25 s",
        ] {
            let e = parse_wait(bad).unwrap_err();
            assert!(e.starts_with("wait="), "{bad}: {e}");
        }
        let e = parse_wait("\u{1b}[31m").unwrap_err();
        assert!(!e.contains('\u{1b}'), "escaped: {e}");
    }

    proptest! {
        #[test]
        fn any_wait_text_parses_or_says_why_and_stays_bounded(text in ".{0,24}") {
            match parse_wait(&text) {
                Ok(d) => prop_assert!(d > Duration::ZERO && d <= MAX_WAIT),
                Err(e) => prop_assert!(e.starts_with("wait=")),
            }
        }
    }

    #[test]
    fn who_may_drain_table() {
        let plain = |authorization, loopback| Caller {
            authorization,
            loopback,
            browser: false,
            local_host: true,
        };
        // (token file, Authorization, from loopback, allowed)
        let cases = [
            (None, None, true, true),
            (None, None, false, false),
            (None, Some("Bearer x"), false, false),
            (Some("s3cret"), None, true, false),
            (Some("s3cret"), None, false, false),
            (Some("s3cret"), Some("Bearer s3cret"), false, true),
            (Some("s3cret"), Some("Bearer s3cret"), true, true),
            (Some("s3cret"), Some("bearer s3cret"), false, true),
            (Some("s3cret"), Some("BEARER  s3cret"), false, true),
            (Some("s3cret"), Some("Bearer s3cre"), true, false),
            (Some("s3cret"), Some("Bearer s3cretX"), true, false),
            (Some("s3cret"), Some("Basic s3cret"), true, false),
            (Some("s3cret"), Some("s3cret"), true, false),
            (Some("s3cret"), Some("Bearer "), true, false),
        ];
        for (token, auth, loopback, want) in cases {
            assert_eq!(
                may_drain(token, plain(auth, loopback)),
                want,
                "{token:?} {auth:?} {loopback}"
            );
        }
        // A web page on the same host: refused without a token, whatever it sends.
        let page = Caller {
            browser: true,
            ..plain(None, true)
        };
        assert!(!may_drain(None, page));
        let rebound = Caller {
            local_host: false,
            ..plain(None, true)
        };
        assert!(!may_drain(None, rebound));
        // With the token, where it comes from does not matter.
        let far = Caller {
            browser: true,
            local_host: false,
            ..plain(Some("Bearer s3cret"), false)
        };
        assert!(may_drain(Some("s3cret"), far));
    }

    #[tokio::test]
    async fn the_first_wait_stands_and_every_asker_gets_the_one_outcome() {
        let d = Drain::default();
        assert!(!d.is_asked());
        assert!(d.ask(Duration::from_secs(3)));
        assert!(!d.ask(Duration::from_secs(9)), "asked before");
        assert_eq!(d.asked().await, Duration::from_secs(3));
        let (a, b) = (d.clone(), d.clone());
        let first = tokio::spawn(async move { a.outcome().await });
        let second = tokio::spawn(async move { b.outcome().await });
        let o = DrainOutcome {
            drained: true,
            settled: 4,
            released: 7,
        };
        d.finish(o);
        d.finish(DrainOutcome {
            drained: false,
            settled: 0,
            released: 0,
        });
        assert_eq!(first.await.unwrap(), o);
        assert_eq!(second.await.unwrap(), o);
        assert_eq!(d.outcome().await, o, "and one who asks later");
    }
}
