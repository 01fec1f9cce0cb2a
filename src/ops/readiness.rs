//! Readiness: the daemon's state, why it is (not) ready, and the group facts shown by
//! `/ready`. Held in a `watch` so the admin endpoint and the metrics read one truth.
//!
//! The components report facts (what the supervisor or the dispatcher is doing, the
//! NATS connection, who holds a pinned consumer's pin); what `/ready` shows is derived
//! from them by one pure function, [`present`], so that it always says why: a lost
//! connection is `not_ready` with the connection's reason whatever the dispatcher was
//! doing, and an instance without the pin says whether another one holds it.
//! Transitions of what is shown are logged once each, here.
//!
//! Each source reports through its own [`SourceReadiness`]; the connection is the
//! process's, and the process's status is the [`summary`] of its sources'. `drained`
//! is final: set after a drain, it stays until the process stops.

use std::sync::Arc;

use serde::Serialize;
use tokio::sync::watch;

use crate::ops::metrics::{Metrics, SourceMetrics};

/// What the daemon is doing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Starting, or waiting for NATS, the topology or the app (see the reason).
    #[default]
    NotReady,
    /// Pulling and delivering.
    Consuming,
    /// A hot standby of a pinned member: another instance holds the pin.
    Standby,
    /// A pinned consumer that no instance holds the pin of (nothing was delivered
    /// yet): this instance pulls and is pinned by the next message.
    Idle,
    /// An elastic group member not yet in the membership.
    WaitingForMembership,
    /// A member with no partitions assigned.
    NoPartitions,
    /// The consumer is paused on the server (`jetrelay pause`): nothing new is
    /// delivered, held messages are kept alive until it resumes (the reason says when).
    Paused,
    /// Shutting down: settling what it holds.
    Draining,
    /// Drained (`/drain`): nothing is pulled or held any more, and only a restart
    /// resumes delivery; probes, metrics and the publish endpoint still answer.
    Drained,
}

impl State {
    /// Its name as `/ready` shows it.
    pub fn name(self) -> &'static str {
        match self {
            State::NotReady => "not_ready",
            State::Consuming => "consuming",
            State::Standby => "standby",
            State::Idle => "idle",
            State::WaitingForMembership => "waiting_for_membership",
            State::NoPartitions => "no_partitions",
            State::Paused => "paused",
            State::Draining => "draining",
            State::Drained => "drained",
        }
    }
}

/// Who holds the pin of a pinned consumer, as last read from the consumer's info.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PinHolder {
    /// Not read yet.
    #[default]
    Unknown,
    /// No instance holds it.
    Nobody,
    /// Some instance holds it (this one, or another).
    Someone,
}

/// What the components reported; `/ready` is derived from it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// What the supervisor or the dispatcher says it is doing.
    pub state: State,
    /// Why, in its words.
    pub reason: String,
    /// Why NATS is not connected; `None` while connected.
    pub nats_down: Option<String>,
    /// Whether this instance holds the pin.
    pub pinned: bool,
    /// Who holds the pin (pinned consumers).
    pub pin_holder: PinHolder,
    /// What the source consumes (for discovery; never in `/ready`).
    pub consumes: Option<Consumes>,
    /// Why the idempotency markers cannot be written (naming the bucket); `None`
    /// while they are. Messages are acked without them, so a ready source stays
    /// ready and says so in its reason.
    pub markers_down: Option<String>,
}

/// What a source consumes, as its config says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Consumes {
    /// The stream it reads (an elastic member: the group's work-queue stream).
    pub stream: String,
    /// Its consumer.
    pub consumer: String,
    /// The group, in group sources.
    pub group: Option<String>,
}

/// The state and reason `/ready` shows for these facts. Drained and draining win
/// (they are final); then a NATS connection that is down; an instance that reports standby says
/// whether another instance holds the pin or nobody does. A ready state's reason
/// ends with why markers cannot be written, when they cannot.
pub fn present(f: &Facts) -> (State, String) {
    let (state, reason) = shown(f);
    match &f.markers_down {
        Some(why) if is_ready(state) && reason.is_empty() => (state, why.clone()),
        Some(why) if is_ready(state) => (state, format!("{reason}; {why}")),
        _ => (state, reason),
    }
}

/// The state and reason for `f`, the markers aside.
fn shown(f: &Facts) -> (State, String) {
    if matches!(f.state, State::Draining | State::Drained) {
        return (f.state, f.reason.clone());
    }
    if let Some(why) = &f.nats_down {
        return (State::NotReady, why.clone());
    }
    if f.state == State::Standby && !f.pinned {
        return match f.pin_holder {
            PinHolder::Nobody => (
                State::Idle,
                "no instance of this member holds the pin (nothing was delivered yet); this \
                 instance pulls and takes the pin with the next message"
                    .into(),
            ),
            PinHolder::Someone => (State::Standby, "another instance holds the pin".into()),
            PinHolder::Unknown => (State::Standby, "this instance does not hold the pin".into()),
        };
    }
    (f.state, f.reason.clone())
}

/// Whether a shown state answers 200 on `/ready`.
pub fn is_ready(state: State) -> bool {
    matches!(
        state,
        State::Consuming
            | State::Standby
            | State::Idle
            | State::WaitingForMembership
            | State::NoPartitions
            | State::Paused
    )
}

/// The sources as a JSON object keyed by name.
fn by_name<S: serde::Serializer>(
    sources: &[(String, SourceStatus)],
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut map = s.serialize_map(Some(sources.len()))?;
    for (name, status) in sources {
        map.serialize_entry(name, status)?;
    }
    map.end()
}

/// What `/ready` shows of a source, or of the process (then a projection of its
/// sources').
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Readout {
    /// Whether it is ready (`/ready` answers 200 when the process is).
    pub ready: bool,
    /// What it is doing.
    pub state: State,
    /// Why it is not ready (or what it waits for); empty when consuming. The
    /// process's names the first source that is not ready, of several.
    pub reason: String,
    /// The group member, in a group source (the process: of a single one).
    pub member: Option<String>,
    /// Whether this instance holds the pin (the process: of a single source).
    pub pinned: bool,
    /// The member's partitions, in a group source (the process: of a single one).
    pub partitions: Vec<u32>,
    /// Requests to the app that may run at once now (`max_in_flight`, or the
    /// adaptive limit; the process: all sources together); 0 before delivery starts.
    pub concurrency_limit: usize,
    /// Whether the consumer is paused on the server (`jetrelay pause`; the process:
    /// every source's).
    pub paused: bool,
}

/// One source's status: what `/ready` shows of it, and the facts it is derived from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SourceStatus {
    /// What is shown.
    #[serde(flatten)]
    pub shown: Readout,
    /// What the state and reason are derived from.
    #[serde(skip)]
    pub facts: Facts,
}

/// The process's status: what `/ready` shows of it (derived from its sources' by
/// [`summary`]: a single source's is the process's, as `/ready` showed it before
/// there were several), the NATS connection, and each source's own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Status {
    /// What is shown.
    #[serde(flatten)]
    pub shown: Readout,
    /// Why NATS is not connected (every source's connection); `None` while it is.
    #[serde(skip)]
    pub nats_down: Option<String>,
    /// Each source's own, by name, in the order they were added; `/ready` shows
    /// them as `"sources": {"<name>": {...}}`.
    #[serde(serialize_with = "by_name", skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<(String, SourceStatus)>,
}

impl std::ops::Deref for SourceStatus {
    type Target = Readout;
    fn deref(&self) -> &Readout {
        &self.shown
    }
}

impl std::ops::Deref for Status {
    type Target = Readout;
    fn deref(&self) -> &Readout {
        &self.shown
    }
}

impl SourceStatus {
    /// A source's status before it reports anything: starting, not connected.
    fn starting(member: Option<String>, nats_down: Option<String>) -> SourceStatus {
        let mut s = SourceStatus {
            shown: Readout {
                ready: false,
                state: State::NotReady,
                reason: String::new(),
                member,
                pinned: false,
                partitions: Vec::new(),
                concurrency_limit: 0,
                paused: false,
            },
            facts: Facts {
                reason: "starting".into(),
                nats_down,
                ..Facts::default()
            },
        };
        s.present();
        s
    }

    /// Derives what is shown from the facts. Returns whether the shown state or
    /// reason changed.
    fn present(&mut self) -> bool {
        let (state, reason) = present(&self.facts);
        let s = &mut self.shown;
        let changed = state != s.state || reason != s.reason;
        s.state = state;
        s.reason = reason;
        s.ready = is_ready(state);
        s.pinned = self.facts.pinned;
        s.paused = state == State::Paused;
        changed
    }
}

/// The process's status from its sources': a single source's is the process's; of
/// several, the process is ready only when every source is, and shows the first
/// source that is not (its reason prefixed with its name); with none it is not ready.
pub fn summary(sources: Vec<(String, SourceStatus)>, nats_down: Option<String>) -> Status {
    let shown = match sources.as_slice() {
        [] => {
            let mut none = SourceStatus::starting(None, nats_down.clone());
            none.facts.reason = "no source is configured".into();
            none.present();
            none.shown
        }
        [(_, only)] => only.shown.clone(),
        many => {
            let blocking = many.iter().find(|(_, s)| !s.ready);
            let (state, reason) = match blocking {
                Some((name, s)) => (s.state, format!("source {name}: {}", s.reason)),
                None => (many[0].1.state, many[0].1.reason.clone()),
            };
            Readout {
                ready: blocking.is_none(),
                state,
                reason,
                member: None,
                pinned: false,
                partitions: Vec::new(),
                concurrency_limit: many.iter().map(|(_, s)| s.concurrency_limit).sum(),
                paused: many.iter().all(|(_, s)| s.paused),
            }
        }
    };
    Status {
        shown,
        nats_down,
        sources,
    }
}

/// The process's readiness: what every source reports, and the NATS connection they
/// share. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Readiness {
    tx: Arc<watch::Sender<Status>>,
    metrics: Metrics,
}

/// One source's readiness: the facts its supervisor and dispatcher report. Cheap to
/// clone.
#[derive(Debug, Clone)]
pub struct SourceReadiness {
    tx: Arc<watch::Sender<Status>>,
    /// Its name in [`Status::sources`].
    name: Arc<str>,
    metrics: SourceMetrics,
}

impl Readiness {
    /// Starts not ready, not connected, without sources.
    pub fn new(metrics: Metrics) -> Readiness {
        let status = summary(Vec::new(), Some("connecting to NATS".to_string()));
        let (tx, _) = watch::channel(status);
        Readiness {
            tx: Arc::new(tx),
            metrics,
        }
    }

    /// Adds a source (`member`: the group member it is, in a group; `metrics`: its
    /// collectors) and returns its handle. It starts not ready.
    pub fn source(
        &self,
        name: &str,
        member: Option<String>,
        metrics: SourceMetrics,
    ) -> SourceReadiness {
        self.tx.send_modify(|s| {
            let own = SourceStatus::starting(member, s.nats_down.clone());
            s.sources.retain(|(n, _)| n != name);
            s.sources.push((name.to_string(), own));
            s.resummarize();
        });
        self.metrics.ready(self.tx.borrow().ready);
        SourceReadiness {
            tx: Arc::clone(&self.tx),
            name: name.into(),
            metrics,
        }
    }

    /// Removes a source that has ended (a reload removed it): `/ready` no longer
    /// waits for it.
    pub fn remove(&self, name: &str) {
        self.tx.send_if_modified(|s| {
            let before = s.sources.len();
            s.sources.retain(|(n, _)| n != name);
            let changed = s.sources.len() != before;
            if changed {
                s.resummarize();
            }
            changed
        });
        self.metrics.ready(self.tx.borrow().ready);
    }

    /// The current status.
    pub fn status(&self) -> Status {
        self.tx.borrow().clone()
    }

    /// A receiver that sees every change.
    pub fn subscribe(&self) -> watch::Receiver<Status> {
        self.tx.subscribe()
    }

    /// Every source drains (final): the process is stopping. A drained one stays
    /// drained.
    pub fn set_draining(&self, reason: &str) {
        self.set_final(State::Draining, reason);
    }

    /// Every source is drained (`/drain`, final): nothing resumes delivery but a
    /// restart.
    pub fn set_drained(&self, reason: &str) {
        self.set_final(State::Drained, reason);
    }

    /// Every source is in `state` (draining, then drained), never back.
    fn set_final(&self, state: State, reason: &str) {
        self.tx.send_if_modified(|s| {
            let mut changed = false;
            for (name, own) in &mut s.sources {
                if own.facts.state == state || own.facts.state == State::Drained {
                    continue;
                }
                own.facts.state = state;
                reason.clone_into(&mut own.facts.reason);
                if own.present() {
                    log_state(name, own);
                }
                changed = true;
            }
            if changed {
                s.resummarize();
            }
            changed
        });
        self.metrics.ready(self.tx.borrow().ready);
    }

    /// Records the NATS connection, which every source shares: `None` when
    /// connected, else why not.
    pub fn set_nats_down(&self, why: Option<String>) {
        self.metrics.nats_connected(why.is_none());
        self.tx.send_if_modified(|s| {
            if s.nats_down == why {
                return false;
            }
            if s.nats_down.is_some() != why.is_some() {
                match &why {
                    None => tracing::info!("connected to NATS"),
                    Some(why) => tracing::warn!(reason = %why, "not connected to NATS"),
                }
            }
            s.nats_down.clone_from(&why);
            for (name, own) in &mut s.sources {
                own.facts.nats_down.clone_from(&why);
                if own.present() {
                    log_state(name, own);
                }
            }
            s.resummarize();
            true
        });
        self.metrics.ready(self.tx.borrow().ready);
    }
}

impl Status {
    /// The process's fields again from its sources', keeping the sources and the
    /// connection.
    fn resummarize(&mut self) {
        let sources = std::mem::take(&mut self.sources);
        *self = summary(sources, self.nats_down.take());
    }
}

/// Logs a source's shown state after it changed.
fn log_state(source: &str, s: &SourceStatus) {
    tracing::info!(source, state = s.state.name(), reason = %s.reason, "state changed");
}

impl SourceReadiness {
    /// This source's current status (once removed, as it was before it started).
    pub fn status(&self) -> SourceStatus {
        let s = self.tx.borrow();
        s.sources
            .iter()
            .find(|(n, _)| **n == *self.name)
            .map_or_else(
                || SourceStatus::starting(None, s.nats_down.clone()),
                |(_, own)| own.clone(),
            )
    }

    /// Sets what the source is doing and why. Draining is final, and drained too
    /// (only [`Readiness::set_drained`] sets it).
    pub fn set(&self, state: State, reason: impl AsRef<str>) {
        let reason = reason.as_ref();
        self.update(|f| {
            if f.state == State::Drained
                || state == State::Drained
                || (f.state == State::Draining && state != State::Draining)
                || (f.state == state && f.reason == reason)
            {
                return false;
            }
            f.state = state;
            reason.clone_into(&mut f.reason);
            true
        });
    }

    /// Records why the idempotency markers cannot be written (`None`: they are
    /// again).
    pub fn set_markers_down(&self, why: Option<String>) {
        self.update(|f| {
            if f.markers_down == why {
                return false;
            }
            f.markers_down = why;
            true
        });
    }

    /// Records who holds the pin of a pinned consumer.
    pub fn set_pin_holder(&self, holder: PinHolder) {
        self.update(|f| std::mem::replace(&mut f.pin_holder, holder) != holder);
    }

    /// Records this member's partitions.
    pub fn set_partitions(&self, partitions: Vec<u32>) {
        self.metrics.partitions_assigned(partitions.len());
        self.modify(|own| {
            if own.shown.partitions == partitions {
                return false;
            }
            tracing::info!(
                partitions = %crate::printable::list(&partitions, 32),
                "membership changed"
            );
            own.shown.partitions = partitions;
            true
        });
    }

    /// Records the concurrency limit in force (shown, not a readiness fact).
    pub fn set_concurrency_limit(&self, limit: usize) {
        self.modify(|own| std::mem::replace(&mut own.shown.concurrency_limit, limit) != limit);
    }

    /// Records what the source consumes (for discovery).
    pub fn set_consumes(&self, consumes: Consumes) {
        self.update(|f| {
            let changed = f.consumes.as_ref() != Some(&consumes);
            f.consumes = Some(consumes);
            changed
        });
    }

    /// Records whether this instance holds the pin.
    pub fn set_pinned(&self, pinned: bool) {
        self.metrics.pinned(pinned);
        self.update(|f| {
            if f.pinned == pinned {
                return false;
            }
            tracing::info!(pinned, "pin changed");
            f.pinned = pinned;
            true
        });
    }

    /// Applies `change` (which says whether it changed anything) to this source's
    /// status and derives the process's again.
    fn modify(&self, change: impl FnOnce(&mut SourceStatus) -> bool) {
        self.tx.send_if_modified(|s| {
            let Some((_, own)) = s.sources.iter_mut().find(|(n, _)| **n == *self.name) else {
                return false;
            };
            if !change(own) {
                return false;
            }
            s.resummarize();
            true
        });
    }

    /// Applies `change` to this source's facts (it says whether it changed
    /// anything) and derives what is shown.
    fn update(&self, change: impl FnOnce(&mut Facts) -> bool) {
        self.modify(|own| {
            if !change(&mut own.facts) {
                return false;
            }
            if own.present() {
                tracing::info!(state = own.state.name(), reason = %own.reason, "state changed");
            }
            true
        });
        self.metrics.process().ready(self.tx.borrow().ready);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(state: State, nats_down: Option<&str>, pinned: bool, holder: PinHolder) -> Facts {
        Facts {
            state,
            reason: "what it said".into(),
            nats_down: nats_down.map(String::from),
            pinned,
            pin_holder: holder,
            consumes: None,
            markers_down: None,
        }
    }

    #[test]
    fn what_ready_shows_table() {
        use PinHolder::*;
        use State::*;
        let said = "what it said";
        let lost = Some("NATS connection lost");
        let down = "idempotency bucket m: cannot write a marker";
        let marks_down = |f: Facts| Facts {
            markers_down: Some(down.into()),
            ..f
        };
        let cases: &[(Facts, State, &str, bool)] = &[
            (
                facts(Consuming, None, false, Unknown),
                Consuming,
                said,
                true,
            ),
            (
                facts(Consuming, lost, false, Unknown),
                NotReady,
                "NATS connection lost",
                false,
            ),
            (facts(Draining, lost, false, Unknown), Draining, said, false),
            (facts(NotReady, None, false, Unknown), NotReady, said, false),
            (
                facts(Standby, None, false, Someone),
                Standby,
                "another instance holds the pin",
                true,
            ),
            (
                facts(Standby, None, false, Nobody),
                Idle,
                "no instance of this member holds the pin (nothing was delivered yet); this instance pulls and takes the pin with the next message",
                true,
            ),
            (
                facts(Standby, None, false, Unknown),
                Standby,
                "this instance does not hold the pin",
                true,
            ),
            (
                facts(
                    Standby,
                    Some("cannot connect to NATS: authorization violation"),
                    false,
                    Nobody,
                ),
                NotReady,
                "cannot connect to NATS: authorization violation",
                false,
            ),
            (
                facts(WaitingForMembership, None, false, Unknown),
                WaitingForMembership,
                said,
                true,
            ),
            (
                facts(NoPartitions, None, false, Unknown),
                NoPartitions,
                said,
                true,
            ),
            (
                Facts {
                    reason: String::new(),
                    markers_down: Some(down.into()),
                    ..facts(Consuming, None, false, Unknown)
                },
                Consuming,
                down,
                true,
            ),
            (
                marks_down(facts(Paused, None, false, Unknown)),
                Paused,
                "what it said; idempotency bucket m: cannot write a marker",
                true,
            ),
            (
                marks_down(facts(Consuming, lost, false, Unknown)),
                NotReady,
                "NATS connection lost",
                false,
            ),
            (
                marks_down(facts(Draining, None, false, Unknown)),
                Draining,
                said,
                false,
            ),
        ];
        for (f, state, reason, ready) in cases {
            let (s, r) = present(f);
            assert_eq!(
                (s, r.as_str(), is_ready(s)),
                (*state, *reason, *ready),
                "{f:?}"
            );
        }
    }

    #[test]
    fn a_lost_connection_shows_why_and_the_state_comes_back_after() {
        let m = Metrics::new().unwrap();
        let process = Readiness::new(m.clone());
        let h = process.source("default", None, m.source("default").unwrap());
        assert_eq!(
            (h.status().state, h.status().reason.as_str()),
            (State::NotReady, "connecting to NATS")
        );
        process.set_nats_down(None);
        h.set(State::Consuming, "");
        assert!(h.status().ready);
        assert_eq!(m.sample("jetrelay_ready"), Some(1.0));
        process.set_nats_down(Some("NATS connection lost".into()));
        let s = h.status();
        assert_eq!(
            (s.ready, s.state, s.reason.as_str()),
            (false, State::NotReady, "NATS connection lost")
        );
        assert_eq!(
            (
                m.sample("jetrelay_ready"),
                m.sample("jetrelay_nats_connected")
            ),
            (Some(0.0), Some(0.0))
        );
        process.set_nats_down(None);
        assert_eq!(h.status().state, State::Consuming);
        assert_eq!(m.sample("jetrelay_ready"), Some(1.0));
    }

    #[test]
    fn draining_is_final_and_ready_metric_follows() {
        let m = Metrics::new().unwrap();
        let process = Readiness::new(m.clone());
        let h = process.source("default", None, m.source("default").unwrap());
        process.set_nats_down(None);
        h.set(State::Consuming, "");
        assert_eq!(m.sample("jetrelay_ready"), Some(1.0));
        h.set(State::Draining, "shutting down");
        h.set(State::Consuming, "");
        assert_eq!(h.status().state, State::Draining);
        assert_eq!(m.sample("jetrelay_ready"), Some(0.0));
    }

    #[test]
    fn the_process_is_ready_only_when_every_source_is_and_says_which_is_not() {
        let m = Metrics::new().unwrap();
        let process = Readiness::new(m.clone());
        process.set_nats_down(None);
        assert_eq!(
            (process.status().ready, process.status().reason.as_str()),
            (false, "no source is configured")
        );
        let (a, b) = (
            process.source("a", None, m.source("a").unwrap()),
            process.source("b", Some("m".into()), m.source("b").unwrap()),
        );
        a.set(State::Consuming, "");
        b.set(State::NotReady, "topology: stream S not found");
        let s = process.status();
        assert_eq!(
            (s.ready, s.state, s.reason.as_str()),
            (
                false,
                State::NotReady,
                "source b: topology: stream S not found"
            )
        );
        assert_eq!(m.sample("jetrelay_ready"), Some(0.0));
        assert!(a.status().ready && !b.status().ready);
        assert_eq!(b.status().member.as_deref(), Some("m"));
        b.set(State::Consuming, "");
        a.set_concurrency_limit(3);
        b.set_concurrency_limit(4);
        let s = process.status();
        assert!(s.ready, "{s:?}");
        assert_eq!(s.concurrency_limit, 7);
        assert_eq!(m.sample("jetrelay_ready"), Some(1.0));
        // The connection is every source's.
        process.set_nats_down(Some("NATS connection lost".into()));
        for one in [&a, &b] {
            assert_eq!(one.status().reason, "NATS connection lost");
        }
        process.set_nats_down(None);
        process.set_draining("stopped");
        assert!(
            [&a, &b]
                .iter()
                .all(|one| one.status().state == State::Draining)
        );
        assert_eq!(process.status().state, State::Draining);
    }

    #[test]
    fn a_single_sources_status_is_the_processs() {
        let m = Metrics::new().unwrap();
        let process = Readiness::new(m.clone());
        let only = process.source("default", Some("m1".into()), m.source("default").unwrap());
        process.set_nats_down(None);
        only.set(State::Standby, "");
        only.set_partitions(vec![1, 2]);
        let (shown, own) = (process.status(), only.status());
        assert_eq!(shown.shown, own.shown);
        assert_eq!(shown.partitions, vec![1, 2]);
        assert_eq!(shown.sources, [("default".to_string(), own)]);
    }
}
