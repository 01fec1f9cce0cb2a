//! `jetrelay ps`: every jetrelay on the account that answers NATS service discovery
//! within a second (`admin.announce`), one row per instance and source: its name (the
//! connection's: the pod's; with the instance's id when several share it), the
//! source, what it consumes (`stream > consumer`, or `service <name>`), state,
//! pinned, requests in flight against the limit, messages a second (received, between
//! two STATS a second apart) and paused; `--json` prints the rows as JSON.
//!
//! Anyone who may subscribe on the account can answer, so what is read is bounded:
//! at most [`MAX_INSTANCES`] instances and [`MAX_REPLY`] bytes a reply, each string
//! at most [`MAX_TEXT`] characters, escaped for a terminal (`crate::printable`), and
//! at most [`MAX_ROWS`] rows; what is past that is counted in a last line
//! ([`Ignored`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::nats::{Nats, NatsError};
use crate::ops::announce::{Ask, SERVICE};

/// How long each discovery request collects answers.
const WAIT: Duration = Duration::from_secs(1);

/// The most instances read (INFO answers); the rest are counted.
pub const MAX_INSTANCES: usize = 1000;

/// The largest answer read (64 KiB); a larger one is counted, never parsed.
pub const MAX_REPLY: usize = 64 * 1024;

/// The most rows (instance and source) shown; the rest are counted.
pub const MAX_ROWS: usize = 10_000;

/// The most characters of a string from an answer shown (then `…`).
pub const MAX_TEXT: usize = 128;

/// `(id, source)` → `(received, in flight)`, from STATS answers.
pub type Counts = BTreeMap<(String, String), (u64, u64)>;

/// One instance's source.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PsRow {
    /// The instance: its connection's name (with its id when several instances
    /// share the name), else its id.
    pub instance: String,
    /// Its id.
    pub id: String,
    /// jetrelay's version.
    pub version: String,
    /// The source.
    pub source: String,
    /// What it consumes: `stream > consumer`, or `service <name>`.
    pub consumes: String,
    /// Its state, as `/ready` says it.
    pub state: String,
    /// Whether this instance holds the pin.
    pub pinned: bool,
    /// Requests to the app in flight.
    pub in_flight: u64,
    /// The concurrency limit.
    pub limit: u64,
    /// Messages received a second, over the last second or so.
    pub rate: f64,
    /// Whether the consumer is paused on the server.
    pub paused: bool,
}

/// What was not read of the answers, by why.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ignored {
    /// Answers larger than [`MAX_REPLY`].
    pub too_large: usize,
    /// Answers after [`MAX_INSTANCES`] instances.
    pub past_max: usize,
    /// Answers that are not a jetrelay's INFO (not JSON, another service, another
    /// type), or repeat an instance's id.
    pub not_jetrelay: usize,
    /// Sources past [`MAX_ROWS`] rows.
    pub rows: usize,
}

impl Ignored {
    /// The last line: how many answers (and sources) were not shown, and why;
    /// `None` when nothing was left out.
    pub fn line(&self) -> Option<String> {
        let replies = self.too_large + self.past_max + self.not_jetrelay;
        let mut why = Vec::new();
        for (n, what) in [
            (
                self.too_large,
                format!("larger than {} KiB", MAX_REPLY / 1024),
            ),
            (
                self.past_max,
                format!("past the first {} instances", thousands(MAX_INSTANCES)),
            ),
            (
                self.not_jetrelay,
                "not a jetrelay's answer, or an instance's id again".to_string(),
            ),
        ] {
            if n > 0 {
                why.push(format!("{n} {what}"));
            }
        }
        let noun = if replies == 1 { "reply" } else { "replies" };
        let mut line =
            (replies > 0).then(|| format!("{replies} {noun} ignored: {}", why.join(", ")));
        if self.rows > 0 {
            let rows = format!(
                "{} sources not shown: past {} rows",
                self.rows,
                thousands(MAX_ROWS)
            );
            line = Some(match line {
                Some(l) => format!("{l}; {rows}"),
                None => rows,
            });
        }
        line
    }
}

fn thousands(n: usize) -> String {
    if n >= 1000 {
        format!("{},{:03}", n / 1000, n % 1000)
    } else {
        n.to_string()
    }
}

/// A string of an answer as shown: at most [`MAX_TEXT`] characters (then `…`), its
/// control and bidirectional characters escaped; "" when it is not a string.
fn text(v: &Value) -> String {
    let s = v.as_str().unwrap_or_default();
    let mut cut: String = s.chars().take(MAX_TEXT).collect();
    if cut.len() < s.len() {
        cut.push('…');
    }
    crate::printable::printable(&cut).into_owned()
}

/// One instance, as its INFO answer says it.
#[derive(Debug, Clone, PartialEq)]
struct Answered {
    id: String,
    name: String,
    version: String,
    sources: Vec<AnsweredSource>,
}

/// One source of an instance.
#[derive(Debug, Clone, PartialEq)]
struct AnsweredSource {
    name: String,
    consumes: String,
    state: String,
    pinned: bool,
    paused: bool,
    limit: u64,
}

/// The INFO answers read so far, bounded.
#[derive(Debug, Default)]
pub struct Infos {
    instances: Vec<Answered>,
    ids: BTreeSet<String>,
    rows: usize,
    /// What was not read.
    pub ignored: Ignored,
}

impl Infos {
    /// Reads one answer, or counts why not.
    pub fn take(&mut self, answer: &[u8]) {
        if answer.len() > MAX_REPLY {
            self.ignored.too_large += 1;
            return;
        }
        if self.instances.len() >= MAX_INSTANCES {
            self.ignored.past_max += 1;
            return;
        }
        let Ok(info) = serde_json::from_slice::<Value>(answer) else {
            self.ignored.not_jetrelay += 1;
            return;
        };
        let id = text(&info["id"]);
        if info["type"] != "io.nats.micro.v1.info_response"
            || info["name"] != SERVICE
            || !self.ids.insert(id.clone())
        {
            self.ignored.not_jetrelay += 1;
            return;
        }
        let mut sources = Vec::new();
        for e in info["endpoints"].as_array().into_iter().flatten() {
            if self.rows >= MAX_ROWS {
                self.ignored.rows += 1;
                continue;
            }
            self.rows += 1;
            let m = &e["metadata"];
            let (stream, consumer) = (text(&m["stream"]), text(&m["consumer"]));
            sources.push(AnsweredSource {
                name: text(&e["name"]),
                // A service source consumes no stream: its service's name.
                consumes: if stream.is_empty() {
                    format!("service {consumer}")
                } else {
                    format!("{stream} > {consumer}")
                },
                state: text(&m["state"]),
                pinned: m["pinned"] == "true",
                paused: m["paused"] == "true",
                limit: m["concurrency_limit"]
                    .as_str()
                    .and_then(|l| l.parse().ok())
                    .unwrap_or(0),
            });
        }
        self.instances.push(Answered {
            id,
            name: text(&info["metadata"]["connection"]),
            version: text(&info["version"]),
            sources,
        });
    }
}

/// The STATS answers read so far, bounded as [`Infos`] (what is past the bounds is
/// not counted again: it only leaves a rate at 0).
#[derive(Debug, Default)]
pub struct Stats {
    /// `(id, source)` → `(received, in flight)`.
    pub counts: Counts,
    answers: usize,
}

impl Stats {
    /// Reads one answer, or leaves it.
    pub fn take(&mut self, answer: &[u8]) {
        if answer.len() > MAX_REPLY || self.answers >= MAX_INSTANCES {
            return;
        }
        let Ok(s) = serde_json::from_slice::<Value>(answer) else {
            return;
        };
        if s["name"] != SERVICE {
            return;
        }
        self.answers += 1;
        let id = text(&s["id"]);
        for e in s["endpoints"].as_array().into_iter().flatten() {
            if self.counts.len() >= MAX_ROWS {
                return;
            }
            let d = &e["data"];
            self.counts.insert(
                (id.clone(), text(&e["name"])),
                (
                    d["received"].as_u64().unwrap_or(0),
                    d["in_flight"].as_u64().unwrap_or(0),
                ),
            );
        }
    }
}

/// What `ps` prints: the table (or JSON), and the line of what was left out.
#[derive(Debug)]
pub struct Listing {
    /// The table, or the rows as JSON.
    pub text: String,
    /// What was not read ([`Ignored::line`]): the table's last line; with `--json`,
    /// for stderr, so that stdout stays JSON.
    pub ignored: Option<String>,
}

/// Asks, waits, and prints.
///
/// # Errors
/// [`NatsError`] when the requests cannot be sent.
pub async fn run(nats: &Nats, json: bool) -> Result<Listing, NatsError> {
    let started = tokio::time::Instant::now();
    let (mut infos, mut first, mut second) = (Infos::default(), Stats::default(), Stats::default());
    let (a, b) = tokio::join!(
        nats.discover(Ask::Info, WAIT, |r| infos.take(r)),
        nats.discover(Ask::Stats, WAIT, |r| first.take(r))
    );
    a?;
    b?;
    nats.discover(Ask::Stats, WAIT, |r| second.take(r)).await?;
    let elapsed = started.elapsed().saturating_sub(WAIT).max(WAIT);
    let rows = rows(&infos, &first.counts, &second.counts, elapsed);
    let ignored = infos.ignored.line();
    Ok(if json {
        Listing {
            text: serde_json::to_string(&rows).unwrap_or_default(),
            ignored,
        }
    } else {
        let mut text = table(&rows);
        if let Some(line) = ignored {
            text.push('\n');
            text.push_str(&line);
        }
        Listing {
            text,
            ignored: None,
        }
    })
}

/// The rows, from INFO answers and two rounds of STATS `elapsed` apart.
pub fn rows(infos: &Infos, first: &Counts, second: &Counts, elapsed: Duration) -> Vec<PsRow> {
    let mut named: BTreeMap<&str, usize> = BTreeMap::new();
    for i in &infos.instances {
        *named.entry(i.name.as_str()).or_default() += 1;
    }
    let mut rows = Vec::new();
    for info in &infos.instances {
        let instance = match named.get(info.name.as_str()) {
            _ if info.name.is_empty() => info.id.clone(),
            Some(1) => info.name.clone(),
            _ => format!("{}/{}", info.name, info.id),
        };
        for s in &info.sources {
            let key = (info.id.clone(), s.name.clone());
            let now = second.get(&key).or_else(|| first.get(&key));
            let rate = match (first.get(&key), second.get(&key)) {
                (Some((a, _)), Some((b, _))) => b.saturating_sub(*a) as f64 / elapsed.as_secs_f64(),
                _ => 0.0,
            };
            rows.push(PsRow {
                instance: instance.clone(),
                id: info.id.clone(),
                version: info.version.clone(),
                source: s.name.clone(),
                consumes: s.consumes.clone(),
                state: s.state.clone(),
                pinned: s.pinned,
                in_flight: now.map_or(0, |(_, f)| *f),
                limit: s.limit,
                rate,
                paused: s.paused,
            });
        }
    }
    rows.sort_by(|a, b| (&a.instance, &a.source).cmp(&(&b.instance, &b.source)));
    rows
}

/// The rows as an aligned table (a line that says so when nobody answered).
pub fn table(rows: &[PsRow]) -> String {
    if rows.is_empty() {
        return "no jetrelay answered within a second (is admin.announce on, and is this the account they run on?)".into();
    }
    let head = [
        "INSTANCE",
        "SOURCE",
        "CONSUMES",
        "STATE",
        "PINNED",
        "IN FLIGHT",
        "MSG/S",
        "PAUSED",
    ];
    let cells: Vec<[String; 8]> = rows
        .iter()
        .map(|r| {
            [
                r.instance.clone(),
                r.source.clone(),
                r.consumes.clone(),
                r.state.clone(),
                yes(r.pinned),
                format!("{}/{}", r.in_flight, r.limit),
                format!("{:.1}", r.rate),
                yes(r.paused),
            ]
        })
        .collect();
    let mut widths = head.map(str::len);
    for c in &cells {
        for (w, cell) in widths.iter_mut().zip(c) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |c: &[String]| {
        c.iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    let mut out = vec![line(&head.map(String::from))];
    out.extend(cells.iter().map(|c| line(c)));
    out.join("\n")
}

fn yes(b: bool) -> String {
    if b { "yes" } else { "no" }.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn info(id: &str, name: &str, endpoints: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "type": "io.nats.micro.v1.info_response", "name": "jetrelay", "id": id,
            "version": "0.1.0", "metadata": {"connection": name}, "endpoints": endpoints
        }))
        .unwrap()
    }

    fn orders() -> Value {
        json!([{"name": "orders", "metadata": {
            "stream": "ORDERS", "consumer": "w", "state": "consuming",
            "pinned": "true", "paused": "false", "concurrency_limit": "32"}}])
    }

    #[test]
    fn rows_join_info_and_two_stats_into_a_rate() {
        let mut infos = Infos::default();
        infos.take(&info("A", "pod-a", orders()));
        infos.take(br#"{"type": "io.nats.micro.v1.info_response", "name": "other", "id": "B"}"#);
        let key = ("A".to_string(), "orders".to_string());
        let first = BTreeMap::from([(key.clone(), (100, 3))]);
        let second = BTreeMap::from([(key, (300, 5))]);
        let rows = rows(&infos, &first, &second, Duration::from_secs(2));
        assert_eq!(rows.len(), 1, "only jetrelay's answers");
        let r = &rows[0];
        assert_eq!(
            (r.instance.as_str(), r.source.as_str()),
            ("pod-a", "orders")
        );
        assert_eq!(r.consumes, "ORDERS > w");
        assert!(r.pinned && !r.paused);
        assert_eq!((r.in_flight, r.limit), (5, 32));
        assert!((r.rate - 100.0).abs() < 1e-9);
        let t = table(&rows);
        assert!(t.starts_with("INSTANCE  SOURCE  CONSUMES"), "{t}");
        assert!(t.lines().nth(1).unwrap().contains("5/32"), "{t}");
        assert!(table(&[]).starts_with("no jetrelay answered"));
        assert_eq!(
            infos.ignored.line().as_deref(),
            Some("1 reply ignored: 1 not a jetrelay's answer, or an instance's id again")
        );
    }

    #[test]
    fn instances_that_share_a_name_show_their_ids_and_a_service_source_its_service() {
        let mut infos = Infos::default();
        let service = json!([{"name": "quotes", "metadata": {
            "stream": "", "consumer": "quotes", "state": "consuming"}}]);
        infos.take(&info("A", "jetrelay", orders()));
        infos.take(&info("B", "jetrelay", service));
        infos.take(&info("C", "pod-c", orders()));
        infos.take(&info("D", "", orders()));
        let none = Counts::new();
        let shown: Vec<(String, String)> = rows(&infos, &none, &none, WAIT)
            .into_iter()
            .map(|r| (r.instance, r.consumes))
            .collect();
        let want = [
            ("D", "ORDERS > w"),
            ("jetrelay/A", "ORDERS > w"),
            ("jetrelay/B", "service quotes"),
            ("pod-c", "ORDERS > w"),
        ];
        assert_eq!(shown, want.map(|(a, b)| (a.to_string(), b.to_string())));
        assert_eq!(infos.ignored.line(), None);
    }

    #[test]
    fn what_is_read_is_bounded_and_what_is_not_is_counted() {
        let mut infos = Infos::default();
        let big = info("X", &"x".repeat(MAX_REPLY), orders());
        infos.take(&big);
        infos.take(b"not json");
        infos.take(&info("A", "pod-a", orders()));
        infos.take(&info("A", "pod-a", orders()));
        for i in 1..MAX_INSTANCES + 5 {
            infos.take(&info(&format!("I{i}"), "p", orders()));
        }
        assert_eq!(infos.instances.len(), MAX_INSTANCES);
        assert_eq!(
            infos.ignored,
            Ignored {
                too_large: 1,
                past_max: 5,
                not_jetrelay: 2,
                rows: 0
            }
        );
        assert_eq!(
            infos.ignored.line().unwrap(),
            "8 replies ignored: 1 larger than 64 KiB, 5 past the first 1,000 instances, 2 not a jetrelay's answer, or an instance's id again"
        );
        // Rows: at most MAX_ROWS, from answers each within MAX_REPLY.
        let mut infos = Infos::default();
        let many: Vec<Value> = (0..2_000)
            .map(|i| json!({"name": format!("s{i}"), "metadata": {}}))
            .collect();
        for i in 0..6 {
            infos.take(&info(&format!("I{i}"), "p", Value::from(many.clone())));
        }
        assert_eq!(infos.rows, MAX_ROWS);
        assert_eq!(infos.ignored.rows, 2_000);
        assert_eq!(
            infos.ignored.line().unwrap(),
            "2000 sources not shown: past 10,000 rows"
        );
        // STATS are bounded alike.
        let mut stats = Stats::default();
        stats.take(&big);
        assert!(stats.counts.is_empty());
    }

    /// What a terminal must not be handed raw (as `crate::printable` says).
    fn hidden(c: char) -> bool {
        (c.is_control() && c != '\n')
            || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}')
    }

    #[test]
    fn every_string_of_an_answer_is_escaped_and_cut() {
        let raw = "\u{1b}[2J\u{202e}evil\u{2066}\u{200f}";
        let escaped = r"\u{1b}[2J\u{202e}evil\u{2066}\u{200f}";
        let endpoints = json!([{"name": raw, "metadata": {
            "stream": raw, "consumer": raw, "state": raw}}]);
        let answer = serde_json::to_vec(&json!({
            "type": "io.nats.micro.v1.info_response", "name": "jetrelay", "id": raw,
            "version": raw, "metadata": {"connection": "x".repeat(1000)}, "endpoints": endpoints
        }))
        .unwrap();
        let mut infos = Infos::default();
        infos.take(&answer);
        let rows = rows(&infos, &Counts::new(), &Counts::new(), WAIT);
        let r = &rows[0];
        for field in [&r.id, &r.version, &r.source, &r.state] {
            assert_eq!(field, escaped);
        }
        assert_eq!(r.consumes, format!("{escaped} > {escaped}"));
        assert_eq!(r.instance, format!("{}…", "x".repeat(MAX_TEXT)));
        let shown = format!("{}{}", table(&rows), serde_json::to_string(&rows).unwrap());
        assert!(!shown.chars().any(hidden), "{shown}");
    }
}
