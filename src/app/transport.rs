//! `http.version`: which HTTP the app is spoken to in — HTTP/1.1, HTTP/2 without
//! TLS by prior knowledge (h2c), or whichever a TLS handshake agrees on (ALPN).

use serde::{Deserialize, Serialize};

/// `http.version`.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum HttpVersion {
    /// HTTP/1.1 only (ALPN offers `http/1.1` for an `https://` app).
    #[default]
    Http1,
    /// HTTP/2 without TLS, by prior knowledge: over TCP or the Unix socket; never
    /// with an `https://` app.
    H2c,
    /// HTTP/2 when the TLS handshake agrees on it (ALPN `h2`, then `http/1.1`);
    /// HTTP/1.1 for an `http://` app.
    Auto,
}

impl HttpVersion {
    /// How the config writes it.
    pub fn name(self) -> &'static str {
        match self {
            HttpVersion::Http1 => "http1",
            HttpVersion::H2c => "h2c",
            HttpVersion::Auto => "auto",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::HttpVersion;

    #[test]
    fn names_are_what_the_config_reads() {
        for v in [HttpVersion::Http1, HttpVersion::H2c, HttpVersion::Auto] {
            let parsed: HttpVersion =
                serde_json::from_value(serde_json::Value::String(v.name().into())).unwrap();
            assert_eq!(parsed, v);
        }
    }
}
