//! `[dlq]`, `[admin]` and `[log]`: where dead letters go, where the admin endpoints
//! listen, and how the daemon logs; their checks also run `[budget]`'s.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::{Config, Problems};
use crate::ops::telemetry::LogFormat;
use crate::subject;

/// `[dlq]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct DlqConfig {
    /// The dead-letter subject; empty = no DLQ (a stream must capture it).
    pub subject: String,
    /// The DLQ stream's name: what `check` verifies, and what `manage` creates.
    pub stream: String,
    /// Ensure `stream` exists, capturing `subject`, with direct gets and file storage.
    pub manage: bool,
    /// A managed DLQ stream keeps dead letters this long (7 days); 0 = forever.
    pub max_age_ms: u64,
}

impl Default for DlqConfig {
    fn default() -> Self {
        Self {
            subject: String::new(),
            stream: String::new(),
            manage: false,
            max_age_ms: 7 * super::DAY,
        }
    }
}

/// `[admin]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// Where `/healthz` (`/livez`), `/ready` (`/readyz`), `/metrics` and `/drain` listen.
    pub listen: String,
    /// Answer NATS service discovery (`$SRV`, ADR-32) as service `jetrelay`.
    pub announce: bool,
    /// The bearer token `/drain` requires (and nothing else); empty: `/drain` is
    /// served to loopback only.
    pub token_file: String,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            listen: "0.0.0.0:9090".into(),
            announce: true,
            token_file: String::new(),
        }
    }
}

/// `[log]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// JSON lines or text.
    pub format: LogFormat,
    /// A level or a filter directive (`info`, `jetrelay=debug,async_nats=warn`).
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            format: LogFormat::Json,
            level: "info".into(),
        }
    }
}

impl Config {
    pub(super) fn check_ops(&self, p: &mut Problems) {
        // `[budget]` is the process's, as `[admin]` and `[log]` are.
        self.check_budget(p);
        let d = &self.dlq;
        if !d.subject.is_empty()
            && let Err(e) = subject::validate_publish_subject(&d.subject)
        {
            p.add("dlq.subject", e);
        }
        if !d.stream.is_empty() {
            if let Err(e) = subject::validate_name(&d.stream) {
                p.add("dlq.stream", e);
            }
            if d.stream == self.source.stream {
                p.add(
                    "dlq.stream",
                    "must not be the source stream (its dead letters would be delivered again)",
                );
            }
            if d.subject.is_empty() {
                p.add("dlq.subject", "is required with dlq.stream");
            }
        }
        if d.manage && d.stream.is_empty() {
            p.add("dlq.stream", "is required with dlq.manage = true");
        }
        // Ten years: beyond, a duration overflows the server's nanoseconds.
        p.range("dlq.max_age_ms", d.max_age_ms, 0, 3650 * super::DAY);
        if d.max_age_ms > 0 && d.max_age_ms < 60_000 {
            p.add(
                "dlq.max_age_ms",
                "must be 0 (forever) or at least 60000: dead letters are kept to be looked at",
            );
        }
        match self.admin.listen.parse::<SocketAddr>() {
            Err(_) => p.add(
                "admin.listen",
                "must be an address and port, like 0.0.0.0:9090",
            ),
            Ok(admin) => {
                if let Some(publish) = self.publish.listen_addr()
                    && clash(admin, publish)
                {
                    p.add(
                        "publish.listen",
                        format!("{publish} is admin.listen's port ({admin}): give each its own"),
                    );
                }
            }
        }
        if !crate::ops::telemetry::is_valid_filter(&self.log.level) {
            p.add(
                "log.level",
                "must be a level (error, warn, info, debug, trace) or a filter directive",
            );
        }
    }
}

/// Whether two listeners cannot both bind: one port (not 0, which the system picks)
/// on one address, or where one listens on all addresses that cover the other's: all
/// IPv4 ones (`0.0.0.0`) an IPv4 address, all (`[::]`, dual-stack on Linux) any.
fn clash(a: SocketAddr, b: SocketAddr) -> bool {
    let covers = |x: std::net::IpAddr, y: std::net::IpAddr| {
        x == y || (x.is_unspecified() && (x.is_ipv6() || y.is_ipv4()))
    };
    a.port() != 0 && a.port() == b.port() && (covers(a.ip(), b.ip()) || covers(b.ip(), a.ip()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_listeners_clash_on_one_port_of_one_address_or_all() {
        let cases = [
            ("0.0.0.0:9090", "127.0.0.1:9090", true),
            ("127.0.0.1:9090", "127.0.0.1:9090", true),
            ("127.0.0.1:9090", "[::]:9090", true),
            ("0.0.0.0:9090", "[::1]:9090", false),
            ("0.0.0.0:9090", "[::]:9090", true),
            ("[::1]:9090", "[::1]:9090", true),
            ("127.0.0.1:9090", "127.0.0.2:9090", false),
            ("0.0.0.0:9090", "127.0.0.1:9091", false),
            ("127.0.0.1:0", "127.0.0.1:0", false),
        ];
        for (a, b, want) in cases {
            let (a, b): (SocketAddr, SocketAddr) = (a.parse().unwrap(), b.parse().unwrap());
            assert_eq!(clash(a, b), want, "{a} {b}");
            assert_eq!(clash(b, a), want, "{b} {a}");
        }
    }

    #[test]
    fn the_publish_endpoint_on_the_admin_port_is_refused() {
        let toml = r#"
            [nats]
            servers = "nats://127.0.0.1:4222"
            [http]
            url = "http://127.0.0.1:8080"
            [source]
            stream = "S"
            durable = "d"
            [publish]
            listen = "9090"
            allowed_subjects = ["out.>"]
        "#;
        use figment::providers::Format;
        let figment = figment::Figment::from(figment::providers::Toml::string(toml));
        let err = Config::from_figment(figment).unwrap_err().to_string();
        assert!(err.contains("publish.listen"), "{err}");
        assert!(err.contains("admin.listen's port"), "{err}");
    }
}
