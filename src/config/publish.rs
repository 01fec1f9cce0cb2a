//! `[publish]`: what the app may publish through jetrelay, in its answers and on the
//! local publish endpoint.

use std::net::{Ipv4Addr, SocketAddr};

use serde::{Deserialize, Serialize};

use super::{Config, Problems};
use crate::subject;

/// `[publish]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PublishConfig {
    /// Subject patterns (wildcards allowed) the app may publish to; empty = off.
    pub allowed_subjects: Vec<String>,
    /// An answer's (or a request's) messages commit as one atomic batch.
    pub atomic: bool,
    /// At most this many messages per answer or publish request (up to 1000).
    pub max_messages: u32,
    /// At most this many bytes (payloads and headers) per answer or publish request.
    pub max_bytes: u64,
    /// The local publish endpoint: `host:port`, or a port alone for loopback; empty =
    /// off.
    pub listen: String,
    /// A file holding the token the endpoint requires (`Authorization: Bearer
    /// <token>`); read again when it changes; empty = no token.
    pub token_file: String,
}

impl Default for PublishConfig {
    fn default() -> Self {
        Self {
            allowed_subjects: Vec::new(),
            atomic: true,
            max_messages: 100,
            max_bytes: 1024 * 1024,
            listen: String::new(),
            token_file: String::new(),
        }
    }
}

/// The largest atomic batch the server takes.
pub const MAX_PUBLISH_MESSAGES: u64 = 1000;

/// The most bytes one answer or request may publish.
pub const MAX_PUBLISH_BYTES: u64 = 64 * 1024 * 1024;

impl PublishConfig {
    /// Where the endpoint listens: `None` when off or not an address (a problem
    /// reported by the config's rules). A port alone binds loopback.
    pub fn listen_addr(&self) -> Option<SocketAddr> {
        let listen = self.listen.trim();
        if listen.is_empty() {
            return None;
        }
        if let Ok(port) = listen.trim_start_matches(':').parse::<u16>() {
            return Some(SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
        }
        listen.parse().ok()
    }
}

impl Config {
    pub(super) fn check_publish(&self, p: &mut Problems) {
        let c = &self.publish;
        for s in &c.allowed_subjects {
            if let Err(e) = subject::validate_filter(s) {
                p.add("publish.allowed_subjects", format!("{s:?} {e}"));
            }
        }
        p.range(
            "publish.max_messages",
            u64::from(c.max_messages),
            1,
            MAX_PUBLISH_MESSAGES,
        );
        p.range("publish.max_bytes", c.max_bytes, 1, MAX_PUBLISH_BYTES);
        if !c.listen.trim().is_empty() {
            if c.listen_addr().is_none() {
                p.add(
                    "publish.listen",
                    "must be an address and port, like 127.0.0.1:9091, or a port (loopback)",
                );
            }
            if c.allowed_subjects.is_empty() {
                p.add(
                    "publish.listen",
                    "the endpoint needs publish.allowed_subjects (nothing may be published)",
                );
            }
        } else if !c.token_file.is_empty() {
            p.add(
                "publish.token_file",
                "is for the endpoint: set publish.listen too",
            );
        }
    }
}
