//! What a reload (SIGHUP) may change: two configs compared key by key, each changed
//! key either live (applied to the running daemon) or not (the whole reload is
//! refused). Also the running config as the admin port shows it (`/config`), with
//! what could be a secret replaced by a fingerprint, so that `jetrelay check
//! --diff-running` can compare a file with what runs without seeing credentials.

use std::collections::BTreeMap;

use serde_json::Value;

use super::Config;

/// One key whose value differs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The dotted key (`delivery.max_in_flight`, `http.headers.X-Team`).
    pub key: String,
    /// The running value, as JSON text (`null`: not set).
    pub running: String,
    /// The new value.
    pub new: String,
    /// Whether it can change without a restart.
    pub live: bool,
}

impl Change {
    /// Why a key that is not live refuses the reload.
    pub fn why_not_live(&self) -> &'static str {
        let top = self.key.split('.').next().unwrap_or_default();
        match top {
            "delivery" => {
                "sizes the consumer (max_ack_pending) and the lanes: it changes with a restart"
            }
            "admin" | "publish" => "a listen address or a token is bound at start: restart",
            "source" | "topology" | "consumer" | "nats" => {
                "the connection, the consumer and its topology are set at start: restart"
            }
            _ => "read only at start: restart",
        }
    }
}

/// Whether `key` (dotted) may change live: everything in `[delivery]` except
/// `ordering` and `max_buffered`, everything in `[http]`, `publish.allowed_subjects`,
/// `publish.max_messages`, `publish.max_bytes`, `log.level`.
pub fn is_live(key: &str) -> bool {
    let (top, rest) = key.split_once('.').unwrap_or((key, ""));
    match top {
        "delivery" => !matches!(rest, "ordering" | "max_buffered"),
        "http" => true,
        "publish" => {
            rest == "max_messages" || rest == "max_bytes" || rest.starts_with("allowed_subjects")
        }
        "log" => rest == "level",
        _ => false,
    }
}

/// The config as dotted keys and JSON values, what could be a secret fingerprinted:
/// the values of `http.headers` (static headers may carry a token; credentials are
/// refused in server URLs, and every other secret is a file's path). Lists are one
/// key (`http.retry_statuses`).
pub fn flatten(c: &Config) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    // Serialising a tree of plain values cannot fail; an empty map is then shown.
    let tree = serde_json::to_value(c).unwrap_or(Value::Null);
    walk("", &tree, &mut out);
    for (k, v) in &mut out {
        if k.starts_with("http.headers.")
            && let Value::String(text) = v
        {
            *text = fingerprint(text);
        }
    }
    out
}

fn walk(prefix: &str, v: &Value, out: &mut BTreeMap<String, Value>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                // A map of names (headers, header files) is one key per name, and an
                // empty one is the key itself.
                if matches!(v, Value::Object(m) if m.is_empty()) {
                    out.insert(key, Value::Null);
                } else {
                    walk(&key, v, out);
                }
            }
        }
        other => {
            out.insert(prefix.to_string(), other.clone());
        }
    }
}

/// A stable fingerprint of a value that must not be shown (FNV-1a, 64 bits): two
/// configs with the same secret show the same text.
fn fingerprint(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("<redacted {h:016x}>")
}

/// The keys whose values differ between `running` and `new` (both flattened), in
/// key order.
pub fn diff(running: &BTreeMap<String, Value>, new: &BTreeMap<String, Value>) -> Vec<Change> {
    let mut keys: Vec<&String> = running.keys().chain(new.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter_map(|k| {
            let (a, b) = (running.get(k), new.get(k));
            (a != b).then(|| Change {
                key: k.clone(),
                running: a.map_or_else(|| "null".into(), Value::to_string),
                new: b.map_or_else(|| "null".into(), Value::to_string),
                live: is_live(k),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
        [nats]
        servers = "nats://127.0.0.1:4222"
        [source]
        stream = "S"
        kind = "durable"
        durable = "d"
        [http]
        url = "http://127.0.0.1:8080/m"
        headers = { X-Token = "t0ken" }
    "#;

    fn changes(extra: &str) -> Vec<(String, bool)> {
        let a = Config::from_toml(&[BASE]).unwrap();
        let b = Config::from_toml(&[BASE, extra]).unwrap();
        diff(&flatten(&a), &flatten(&b))
            .into_iter()
            .map(|c| (c.key, c.live))
            .collect()
    }

    #[test]
    fn live_keys_table() {
        for (key, live) in [
            ("delivery.max_in_flight", true),
            ("delivery.max_buffered_bytes", true),
            ("delivery.retry_initial_ms", true),
            ("delivery.concurrency", true),
            ("delivery.ordering", false),
            ("delivery.max_buffered", false),
            ("http.url", true),
            ("http.headers.X-Team", true),
            ("http.health_url", true),
            ("publish.allowed_subjects", true),
            ("publish.max_bytes", true),
            ("publish.max_messages", true),
            ("publish.listen", false),
            ("publish.token_file", false),
            ("publish.atomic", false),
            ("log.level", true),
            ("log.format", false),
            ("source.stream", false),
            ("nats.servers", false),
            ("consumer.ack_wait_ms", false),
            ("topology.consumer", false),
            ("admin.listen", false),
            ("dlq.subject", false),
            ("otel.endpoint", false),
        ] {
            assert_eq!(is_live(key), live, "{key}");
        }
    }

    #[test]
    fn the_diff_names_each_changed_key_and_whether_it_is_live() {
        assert_eq!(changes(""), []);
        assert_eq!(
            changes(
                "[delivery]\nmax_in_flight = 3\nordering = \"subject\"\n[log]\nlevel = \"debug\""
            ),
            [
                ("delivery.max_in_flight".to_string(), true),
                ("delivery.ordering".to_string(), false),
                ("log.level".to_string(), true),
            ]
        );
        assert_eq!(
            changes("[http]\nheaders = { X-Token = \"other\", X-Team = \"a\" }"),
            [
                ("http.headers.X-Team".to_string(), true),
                ("http.headers.X-Token".to_string(), true),
            ]
        );
        assert_eq!(
            changes("[http]\nretry_statuses = [\"503\"]"),
            [("http.retry_statuses".to_string(), true)]
        );
    }

    #[test]
    fn secrets_are_fingerprinted_never_shown() {
        let a = flatten(&Config::from_toml(&[BASE]).unwrap());
        let text = serde_json::to_string(&a).unwrap();
        assert!(!text.contains("t0ken"), "{text}");
        assert!(
            text.contains("\"http.headers.X-Token\":\"<redacted "),
            "{text}"
        );
        let b = flatten(&Config::from_toml(&[BASE]).unwrap());
        assert_eq!(a, b, "the same secret, the same fingerprint");
        let other = flatten(
            &Config::from_toml(&[BASE, "[http]\nheaders = { X-Token = \"t0ken2\" }"]).unwrap(),
        );
        assert_ne!(
            a.get("http.headers.X-Token"),
            other.get("http.headers.X-Token")
        );
    }
}
