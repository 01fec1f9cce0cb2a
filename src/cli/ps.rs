//! `jetrelay ps`: every jetrelay on the account that answers NATS service discovery
//! within a second (`admin.announce`), one row per instance and source: its name (the
//! connection's: the pod's), the source, state, pinned, requests in flight against
//! the limit, messages a second (received, between two STATS a second apart) and
//! paused; `--json` prints the rows as JSON.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::nats::{Nats, NatsError};
use crate::ops::announce::Ask;

/// How long each discovery request collects answers.
const WAIT: Duration = Duration::from_secs(1);

/// One instance's source.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PsRow {
    /// The instance: its connection's name, else its id.
    pub instance: String,
    /// Its id.
    pub id: String,
    /// jetrelay's version.
    pub version: String,
    /// The source.
    pub source: String,
    /// What it consumes: `stream > consumer`.
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

/// Asks, waits, and prints.
///
/// # Errors
/// [`NatsError`] when the requests cannot be sent.
pub async fn run(nats: &Nats, json: bool) -> Result<String, NatsError> {
    let started = tokio::time::Instant::now();
    let (infos, first) = tokio::join!(
        nats.discover(Ask::Info, WAIT),
        nats.discover(Ask::Stats, WAIT)
    );
    let (infos, first) = (infos?, first?);
    let second = nats.discover(Ask::Stats, WAIT).await?;
    let elapsed = started.elapsed().saturating_sub(WAIT).max(WAIT);
    let rows = rows(
        &parse(&infos),
        &received(&parse(&first)),
        &received(&parse(&second)),
        elapsed,
    );
    Ok(if json {
        serde_json::to_string(&rows).unwrap_or_default()
    } else {
        table(&rows)
    })
}

fn parse(answers: &[bytes::Bytes]) -> Vec<Value> {
    answers
        .iter()
        .filter_map(|b| serde_json::from_slice(b).ok())
        .collect()
}

/// `(id, source)` → messages received, from STATS answers.
fn received(stats: &[Value]) -> BTreeMap<(String, String), (u64, u64)> {
    let mut out = BTreeMap::new();
    for s in stats {
        let id = s["id"].as_str().unwrap_or_default().to_string();
        for e in s["endpoints"].as_array().into_iter().flatten() {
            let source = e["name"].as_str().unwrap_or_default().to_string();
            let d = &e["data"];
            out.insert(
                (id.clone(), source),
                (
                    d["received"].as_u64().unwrap_or(0),
                    d["in_flight"].as_u64().unwrap_or(0),
                ),
            );
        }
    }
    out
}

/// The rows, from INFO answers and two rounds of STATS `elapsed` apart.
pub fn rows(
    infos: &[Value],
    first: &BTreeMap<(String, String), (u64, u64)>,
    second: &BTreeMap<(String, String), (u64, u64)>,
    elapsed: Duration,
) -> Vec<PsRow> {
    let mut rows = Vec::new();
    for info in infos {
        if info["type"] != "io.nats.micro.v1.info_response" || info["name"] != "jetrelay" {
            continue;
        }
        let id = info["id"].as_str().unwrap_or_default().to_string();
        let name = info["metadata"]["connection"].as_str().unwrap_or_default();
        let instance = if name.is_empty() {
            id.clone()
        } else {
            name.to_string()
        };
        for e in info["endpoints"].as_array().into_iter().flatten() {
            let m = &e["metadata"];
            let text = |k: &str| m[k].as_str().unwrap_or_default().to_string();
            let source = e["name"].as_str().unwrap_or_default().to_string();
            let key = (id.clone(), source.clone());
            let now = second.get(&key).or_else(|| first.get(&key));
            let rate = match (first.get(&key), second.get(&key)) {
                (Some((a, _)), Some((b, _))) => b.saturating_sub(*a) as f64 / elapsed.as_secs_f64(),
                _ => 0.0,
            };
            rows.push(PsRow {
                instance: instance.clone(),
                id: id.clone(),
                version: info["version"].as_str().unwrap_or_default().to_string(),
                consumes: format!("{} > {}", text("stream"), text("consumer")),
                state: text("state"),
                pinned: text("pinned") == "true",
                in_flight: now.map_or(0, |(_, f)| *f),
                limit: text("concurrency_limit").parse().unwrap_or(0),
                rate,
                paused: text("paused") == "true",
                source,
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

    #[test]
    fn rows_join_info_and_two_stats_into_a_rate() {
        let info = json!({
            "type": "io.nats.micro.v1.info_response", "name": "jetrelay", "id": "A",
            "version": "0.1.0", "metadata": {"connection": "pod-a"},
            "endpoints": [{"name": "orders", "metadata": {
                "stream": "ORDERS", "consumer": "w", "state": "consuming",
                "pinned": "true", "paused": "false", "concurrency_limit": "32"}}]
        });
        let other = json!({"type": "io.nats.micro.v1.info_response", "name": "other", "id": "B"});
        let key = ("A".to_string(), "orders".to_string());
        let first = BTreeMap::from([(key.clone(), (100, 3))]);
        let second = BTreeMap::from([(key, (300, 5))]);
        let rows = rows(&[info, other], &first, &second, Duration::from_secs(2));
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
    }
}
