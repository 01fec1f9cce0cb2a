//! `[nats]`: the servers, the credentials (file paths only), TLS and the reconnect
//! timings; and the `[nats]` table alone, for `jetrelay group`.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{ConfigError, HOUR, Problems, layered};

/// `[nats]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct NatsConfig {
    /// A list, or one string of comma-separated URLs (handy in environment variables).
    #[serde(deserialize_with = "one_or_many")]
    pub servers: Vec<String>,
    /// The connection name the server shows.
    pub name: String,
    /// A `.creds` file (JWT and NKey seed).
    pub creds_file: String,
    /// A file holding an NKey seed.
    pub nkey_seed_file: String,
    /// A file holding an auth token.
    pub token_file: String,
    /// The user, with `password_file`.
    pub user: String,
    /// A file holding the user's password.
    pub password_file: String,
    /// The CA bundle that verifies the server.
    pub tls_ca_file: String,
    /// The client certificate (mutual TLS), with `tls_key_file`.
    pub tls_cert_file: String,
    /// The client certificate's key.
    pub tls_key_file: String,
    /// Refuse a connection that is not TLS.
    pub tls_required: bool,
    /// The TLS handshake before the server's INFO (servers configured with
    /// `handshake_first`, 2.10.4+).
    pub tls_first: bool,
    /// How long one connection attempt may take.
    pub connect_timeout_ms: u64,
    /// How long a request (a JetStream API call, a confirmed ack) may take; also bounds a send waiting for room in the client's buffer.
    pub request_timeout_ms: u64,
    /// The first reconnect delay; it doubles up to `reconnect_delay_max_ms`.
    pub reconnect_delay_ms: u64,
    /// The longest reconnect delay.
    pub reconnect_delay_max_ms: u64,
    /// Reconnect attempts before giving up; 0 = forever.
    pub max_reconnects: u64,
}

impl Default for NatsConfig {
    fn default() -> Self {
        Self {
            servers: vec!["nats://127.0.0.1:4222".into()],
            name: "jetrelay".into(),
            creds_file: String::new(),
            nkey_seed_file: String::new(),
            token_file: String::new(),
            user: String::new(),
            password_file: String::new(),
            tls_ca_file: String::new(),
            tls_cert_file: String::new(),
            tls_key_file: String::new(),
            tls_required: false,
            tls_first: false,
            connect_timeout_ms: 5000,
            request_timeout_ms: 5000,
            reconnect_delay_ms: 250,
            reconnect_delay_max_ms: 8000,
            max_reconnects: 0,
        }
    }
}

/// Whether a URL carries credentials (`nats://user:pass@host`, `nats://token@host`).
pub(super) fn has_userinfo(url: &str) -> bool {
    userinfo_span(url).is_some()
}

/// Where a URL's userinfo is (between `://`, or the start, and the last `@` before
/// the path).
pub(super) fn userinfo_span(url: &str) -> Option<(usize, usize)> {
    let start = url.find("://").map_or(0, |i| i + 3);
    let rest = &url[start..];
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    let at = authority.rfind('@')?;
    Some((start, start + at))
}

/// A URL fit to show: its credentials, if any, replaced with `***`.
pub fn redact(url: &str) -> String {
    match userinfo_span(url) {
        Some((start, end)) => format!("{}***{}", &url[..start], &url[end..]),
        None => url.to_string(),
    }
}

/// Server URLs from one comma-separated string (`nats://a:4222, nats://b:4222`).
pub fn split_servers(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// A list of strings, or one string split at commas.
fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => split_servers(&s),
        OneOrMany::Many(v) => v,
    })
}

/// The rules of `[nats]`.
pub(super) fn nats_problems(n: &NatsConfig, p: &mut Problems) {
    if n.servers.is_empty() {
        p.add("nats.servers", "must name at least one server");
    }
    for s in &n.servers {
        let shown = redact(s);
        let ok = ["nats://", "tls://", "ws://", "wss://"]
            .iter()
            .any(|scheme| s.starts_with(scheme) && s.len() > scheme.len());
        if !ok {
            p.add(
                "nats.servers",
                format!("{shown:?} must be a URL like nats://host:4222"),
            );
        } else if has_userinfo(s) {
            p.add(
                "nats.servers",
                format!(
                    "{shown:?} carries credentials: put them in nats.user + nats.password_file (or token_file, creds_file), never in a server URL"
                ),
            );
        }
    }
    let auth = [
        !n.creds_file.is_empty(),
        !n.nkey_seed_file.is_empty(),
        !n.token_file.is_empty(),
        !n.user.is_empty(),
    ];
    if auth.iter().filter(|x| **x).count() > 1 {
        p.add(
            "nats",
            "set only one of creds_file, nkey_seed_file, token_file, user",
        );
    }
    if n.user.is_empty() != n.password_file.is_empty() {
        p.add("nats.password_file", "user and password_file go together");
    }
    if n.tls_cert_file.is_empty() != n.tls_key_file.is_empty() {
        p.add(
            "nats.tls_key_file",
            "tls_cert_file and tls_key_file go together",
        );
    }
    let delay = ("nats.reconnect_delay_ms", n.reconnect_delay_ms);
    let delay_max = ("nats.reconnect_delay_max_ms", n.reconnect_delay_max_ms);
    p.ranges(&[
        ("nats.connect_timeout_ms", n.connect_timeout_ms, 1, HOUR),
        ("nats.request_timeout_ms", n.request_timeout_ms, 1, HOUR),
        (delay.0, delay.1, 1, HOUR),
        (delay_max.0, delay_max.1, 1, HOUR),
        ("nats.max_reconnects", n.max_reconnects, 0, 1_000_000_000),
    ]);
    p.at_least(delay_max, delay, "");
}

impl NatsConfig {
    /// Only the `[nats]` table of the layered configuration (the file, then
    /// `JETRELAY_NATS__*`), validated: how `jetrelay group` connects like the daemon.
    /// The other tables are not read.
    ///
    /// # Errors
    /// [`ConfigError`] naming every bad `nats.*` key.
    pub fn load(file: Option<&Path>) -> Result<NatsConfig, ConfigError> {
        /// The tree with every table but `[nats]` ignored.
        #[derive(Deserialize)]
        struct OnlyNats {
            #[serde(default)]
            nats: NatsConfig,
        }
        let figment = layered(file)?;
        let nats = figment
            .extract::<OnlyNats>()
            .map_err(|e| super::problems::extraction(&figment, e))?
            .nats;
        nats.validate()?;
        Ok(nats)
    }

    /// The `[nats]` rules (again, after a command line changed the servers).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming every bad `nats.*` key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut p = Problems::default();
        nats_problems(self, &mut p);
        if p.0.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid(p.0))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_in_urls_are_found_and_never_shown() {
        let cases = [
            (
                "nats://alice:hunter2@host:4222",
                "nats://***@host:4222",
                true,
            ),
            ("nats://s3cret@host", "nats://***@host", true),
            ("tls://a:b@h1:4222/x@y", "tls://***@h1:4222/x@y", true),
            ("nats://host:4222", "nats://host:4222", false),
            ("nats://host/path@x", "nats://host/path@x", false),
            ("not a url", "not a url", false),
            ("alice:hunter2@x:4222", "***@x:4222", true),
        ];
        for (url, shown, creds) in cases {
            assert_eq!(redact(url), shown, "{url}");
            assert_eq!(has_userinfo(url), creds, "{url}");
        }
        let mut p = Problems::default();
        let cfg = NatsConfig {
            servers: vec![
                "nats://alice:hunter2@host:4222".into(),
                "alice:hunter2@x".into(),
            ],
            ..NatsConfig::default()
        };
        nats_problems(&cfg, &mut p);
        let text = format!("{:?}", p.0);
        assert_eq!(p.0.len(), 2, "{text}");
        assert!(text.contains("carries credentials"), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
    }
}
