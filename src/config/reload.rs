//! What a reload (SIGHUP) may change: two configs compared key by key, each changed
//! key either live (applied to the running daemon) or not (the whole reload is
//! refused). Also the running config as the admin port shows it (`/config`), with
//! what could be a secret replaced by a fingerprint, so that `jetrelay check
//! --diff-running` can compare a file with what runs, and the reload log name what
//! changed, without seeing credentials.

use std::collections::BTreeMap;

use serde_json::Value;

use super::Config;
use crate::secret::Salt;

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
/// `ordering`, `max_buffered` and the markers' (`idempotency_*`: the bucket is opened
/// when the source starts), everything in `[http]`, `publish.allowed_subjects`,
/// `publish.max_messages`, `publish.max_bytes`, `log.level`, `budget.max_in_flight`
/// (a lower total lets what runs finish: `admission::Budget::set_total`) and
/// `budget.reserve`.
pub fn is_live(key: &str) -> bool {
    let (top, rest) = key.split_once('.').unwrap_or((key, ""));
    match top {
        // A source's table key is live as the top-level one is; its own keys (the
        // stream, the consumer, its weight, its routes) are not, nor is adding or
        // removing a source.
        "sources" => match rest.split_once('.').and_then(|(_, k)| k.split_once('.')) {
            Some((table, _)) if crate::config::SOURCE_TABLES.contains(&table) => {
                is_live(rest.split_once('.').map_or("", |(_, k)| k))
            }
            _ => false,
        },
        "delivery" => !matches!(
            rest,
            "ordering"
                | "max_buffered"
                | "idempotency_bucket"
                | "idempotency_ttl_ms"
                | "idempotency_key"
        ),
        "budget" => rest == "max_in_flight" || rest == "reserve",
        "http" => true,
        "publish" => {
            rest == "max_messages" || rest == "max_bytes" || rest.starts_with("allowed_subjects")
        }
        "log" => rest == "level",
        _ => false,
    }
}

/// The config as dotted keys and JSON values, what could be a secret fingerprinted
/// with `salt` ([`Salt::fingerprint`]): every header value from the config (`http.headers`,
/// `otel.headers`: static headers may carry a token) and the userinfo of every URL
/// (`http.url` and `http.health_url` may carry a `user:password`; the other URLs
/// refuse one, and every other secret is a file's path). Lists are one key
/// (`http.retry_statuses`).
pub fn flatten(c: &Config, salt: Salt) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    // Serialising a tree of plain values cannot fail; an empty map is then shown.
    let tree = serde_json::to_value(c).unwrap_or(Value::Null);
    walk("", &tree, &mut out);
    for (k, v) in &mut out {
        hide(k, v, salt);
    }
    out
}

/// The salt of the fingerprints in a flattened config (its first), if it shows any.
pub fn salt_of(shown: &BTreeMap<String, Value>) -> Option<Salt> {
    shown.values().find_map(|v| match v {
        Value::String(text) => Salt::of_shown(text),
        Value::Array(items) => items.iter().find_map(|i| Salt::of_shown(i.as_str()?)),
        _ => None,
    })
}

/// The config's maps of header values: each value is fingerprinted whole.
const HEADER_MAPS: [&str; 2] = ["http.headers.", "otel.headers."];

/// A key as its table's: `sources.<name>.http.headers.X` is `http.headers.X`.
fn of_tables(key: &str) -> &str {
    match key.strip_prefix("sources.").and_then(|k| k.split_once('.')) {
        Some((_, rest)) => rest,
        None => key,
    }
}

/// Fingerprints what could be a secret in the value of `key`: a header value whole,
/// a URL's userinfo (in a list too: `nats.servers`).
fn hide(key: &str, v: &mut Value, salt: Salt) {
    match v {
        Value::String(text) if HEADER_MAPS.iter().any(|m| of_tables(key).starts_with(m)) => {
            *text = salt.fingerprint(text);
        }
        Value::String(text) => *text = shown_url(text, salt),
        Value::Array(items) => {
            for item in items {
                if let Value::String(text) = item {
                    *text = shown_url(text, salt);
                }
            }
        }
        _ => {}
    }
}

/// A URL (any text with `://`) with its userinfo's password fingerprinted, the user
/// kept (`http://alice:<redacted …>@host/`); a userinfo without a password is the
/// credential itself (`https://token@host`) and is fingerprinted whole. Other text
/// is returned as it is.
pub fn shown_url(text: &str, salt: Salt) -> String {
    if !text.contains("://") {
        return text.to_string();
    }
    let Some((start, end)) = super::nats::userinfo_span(text) else {
        return text.to_string();
    };
    let userinfo = &text[start..end];
    let hidden = match userinfo.split_once(':') {
        Some((user, password)) => format!("{user}:{}", salt.fingerprint(password)),
        None => salt.fingerprint(userinfo),
    };
    format!("{}{hidden}{}", &text[..start], &text[end..])
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

    /// One salt, as within one process.
    const SALT: Salt = Salt::FIXED_FOR_TESTS;

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
        diff(&flatten(&a, SALT), &flatten(&b, SALT))
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
            ("delivery.idempotency_bucket", false),
            ("delivery.idempotency_key", false),
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
            ("budget.max_in_flight", true),
            ("budget.reserve", true),
            ("source.stream", false),
            ("nats.servers", false),
            ("consumer.ack_wait_ms", false),
            ("topology.consumer", false),
            ("admin.listen", false),
            ("dlq.subject", false),
            ("otel.endpoint", false),
            ("sources.orders.delivery.max_in_flight", true),
            ("sources.orders.delivery.ordering", false),
            ("sources.orders.http.url", true),
            ("sources.orders.stream", false),
            ("sources.orders.weight", false),
            ("sources.orders.routes", false),
            ("sources.orders", false),
        ] {
            assert_eq!(is_live(key), live, "{key}");
        }
    }

    #[test]
    fn a_sources_header_values_are_fingerprinted_as_the_top_levels_are() {
        let c = Config::from_toml(&["[http]\nurl = \"http://127.0.0.1:1/x\"\n\
             [sources.a]\nstream = \"S\"\nkind = \"durable\"\ndurable = \"a\"\n\
             [sources.a.http]\nheaders = { X-Token = \"s3cret-value\" }\n"])
        .unwrap();
        let shown = serde_json::to_string(&flatten(&c, SALT)).unwrap();
        assert!(!shown.contains("s3cret-value"), "{shown}");
        assert!(
            shown.contains("\"sources.a.http.headers.X-Token\":\"<redacted "),
            "{shown}"
        );
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
        let a = flatten(&Config::from_toml(&[BASE]).unwrap(), SALT);
        let text = serde_json::to_string(&a).unwrap();
        assert!(!text.contains("t0ken"), "{text}");
        assert!(
            text.contains("\"http.headers.X-Token\":\"<redacted "),
            "{text}"
        );
        let b = flatten(&Config::from_toml(&[BASE]).unwrap(), SALT);
        assert_eq!(a, b, "the same secret, the same fingerprint");
        let other = flatten(
            &Config::from_toml(&[BASE, "[http]\nheaders = { X-Token = \"t0ken2\" }"]).unwrap(),
            SALT,
        );
        assert_ne!(
            a.get("http.headers.X-Token"),
            other.get("http.headers.X-Token")
        );
    }

    #[test]
    fn a_urls_password_is_fingerprinted_its_user_and_place_kept() {
        let fp = SALT.fingerprint("hunter2");
        for (url, shown) in [
            (
                "http://alice:hunter2@app:8080/m?x=1",
                format!("http://alice:{fp}@app:8080/m?x=1"),
            ),
            (
                "https://hunter2@app/m",
                format!("https://{}@app/m", SALT.fingerprint("hunter2")),
            ),
            ("http://app:8080/m@x", "http://app:8080/m@x".to_string()),
            ("http://app:8080/m", "http://app:8080/m".to_string()),
            ("ops@example.com", "ops@example.com".to_string()),
            ("", String::new()),
        ] {
            assert_eq!(shown_url(url, SALT), shown, "{url}");
        }
    }

    #[test]
    fn every_header_value_and_url_password_is_fingerprinted_and_a_change_still_shows() {
        let secret = "S3CR3T-MARKER";
        let with = |marker: &str| {
            Config::from_toml(&[
                BASE,
                &format!(
                    "[http]\nurl = \"http://alice:{marker}@127.0.0.1:8080/m\"\n\
                     health_url = \"http://bob:{marker}@127.0.0.1:8080/h\"\n\
                     headers = {{ X-Token = \"{marker}\" }}\n\
                     [otel]\nendpoint = \"http://127.0.0.1:4318\"\n\
                     headers = {{ Authorization = \"Bearer {marker}\" }}\n"
                ),
            ])
            .unwrap()
        };
        let shown = flatten(&with(secret), SALT);
        let text = serde_json::to_string(&shown).unwrap();
        assert!(!text.contains(secret), "{text}");
        assert!(text.contains("http://alice:<redacted "), "{text}");
        assert!(text.contains("http://bob:<redacted "), "{text}");
        let changes = diff(&shown, &flatten(&with("other"), SALT));
        let keys: Vec<&str> = changes.iter().map(|c| c.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "http.headers.X-Token",
                "http.health_url",
                "http.url",
                "otel.headers.Authorization"
            ]
        );
        for c in &changes {
            assert!(
                !c.running.contains(secret) && !c.new.contains("other"),
                "{c:?}"
            );
        }
    }
}
