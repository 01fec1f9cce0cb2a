//! `[http]`: the app's URL and timeout, extra headers and the bearer token file, the
//! health probe, which statuses retry or terminate, the transport (a Unix socket,
//! HTTP/2), and how jetrelay proves itself to the app (`[http.signing]`,
//! `[http.oauth2]`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Config, DAY, HOUR, Problems};
use crate::app::headers::RequestFormat;
use crate::app::transport::HttpVersion;
use crate::policy::StatusSet;

/// `[http]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// Where messages are POSTed.
    pub url: String,
    /// How long one request may take.
    pub timeout_ms: u64,
    /// Static headers added to every request.
    pub headers: BTreeMap<String, String>,
    /// A file holding a token sent as `Authorization: Bearer <token>` (read again
    /// when it changes).
    pub bearer_token_file: String,
    /// Secret header values from files (`{ "X-Api-Key" = "/run/secrets/key" }`), read
    /// again when they change.
    pub header_files: BTreeMap<String, String>,
    /// The app's health URL (GET, 2xx = healthy); empty = no gating.
    pub health_url: String,
    /// How often the health URL is probed.
    pub health_interval_ms: u64,
    /// How long a probe may take.
    pub health_timeout_ms: u64,
    /// Consecutive failed probes that make the app unhealthy.
    pub health_threshold: u32,
    /// Group sources: how long the app may be unhealthy before this instance steps
    /// down so that a healthy instance of the member takes over.
    pub unhealthy_handover_ms: u64,
    /// Statuses that retry (`"503"` or `"5xx"`).
    pub retry_statuses: Vec<String>,
    /// Statuses that terminate (dead-lettered first when a DLQ is set).
    pub term_statuses: Vec<String>,
    /// `"raw"`, `"cloudevents"` (binary content mode) or `"cloudevents-structured"`.
    pub format: RequestFormat,
    /// A message whose `Content-Type` is `application/cloudevents+json` goes to the
    /// app as its data, its attributes as `ce-*` headers (binary mode); a malformed
    /// envelope is dead-lettered as `malformed_cloudevent`.
    pub unwrap_cloudevents: bool,
    /// A CA bundle that verifies an `https://` app (the system's roots otherwise).
    pub tls_ca_file: String,
    /// The client certificate presented to an `https://` app that asks for one
    /// (mTLS), read again when it changes.
    pub tls_cert_file: String,
    /// Its private key, read again when it changes.
    pub tls_key_file: String,
    /// An explicit proxy for the app's requests (proxy environment variables are
    /// ignored); empty = none. Never with credentials in it.
    pub proxy: String,
    /// A file holding the proxy's `user:password` (basic authentication).
    pub proxy_credentials_file: String,
    /// If set, only these message headers pass through (`X-*`: a prefix); identity
    /// headers never do.
    pub pass_headers: Vec<String>,
    /// A Unix socket every request and health probe goes over (the URL then gives
    /// only the path and the `Host` header); empty = TCP.
    pub unix_socket: String,
    /// `"http1"`, `"h2c"` (HTTP/2 without TLS, prior knowledge) or `"auto"` (h2 via
    /// ALPN for https, HTTP/1.1 otherwise).
    pub version: HttpVersion,
    /// Under h2c, the most requests on one HTTP/2 connection: past it (or past the
    /// app's own `SETTINGS_MAX_CONCURRENT_STREAMS`) another connection is opened.
    /// 0 = the app's limit alone.
    pub max_concurrent_streams: u32,
    /// `[http.signing]`: Standard Webhooks signatures on every request.
    pub signing: SigningConfig,
    /// `[http.oauth2]`: an OAuth2 client credentials token on every request.
    pub oauth2: OAuth2Config,
}

/// `[http.oauth2]`: the OAuth2 client credentials grant (RFC 6749 §4.4); off while
/// `token_url` is empty.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct OAuth2Config {
    /// Where tokens are asked for.
    pub token_url: String,
    /// The client's id.
    pub client_id: String,
    /// A file holding the client's secret, read again when it changes.
    pub client_secret_file: String,
    /// The scopes asked for (sent space-separated).
    pub scopes: Vec<String>,
    /// The audience asked for (empty: none).
    pub audience: String,
}

/// `[http.signing]`: the Standard Webhooks secrets (`whsec_<base64 key>`), each read
/// again when its file changes.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct SigningConfig {
    /// The secret every request is signed with; empty = no signatures.
    pub secret_file: String,
    /// A second secret every request is signed with too, while the app moves from
    /// it to `secret_file` (a rotation); empty = none.
    pub previous_secret_file: String,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            url: String::new(),
            timeout_ms: 30_000,
            headers: BTreeMap::new(),
            bearer_token_file: String::new(),
            header_files: BTreeMap::new(),
            health_url: String::new(),
            health_interval_ms: 2000,
            health_timeout_ms: 1000,
            health_threshold: 3,
            unhealthy_handover_ms: 30_000,
            retry_statuses: ["408", "409", "425", "429", "5xx", "404"]
                .map(String::from)
                .to_vec(),
            term_statuses: vec!["4xx".into()],
            pass_headers: Vec::new(),
            proxy: String::new(),
            proxy_credentials_file: String::new(),
            tls_ca_file: String::new(),
            tls_cert_file: String::new(),
            tls_key_file: String::new(),
            format: RequestFormat::Raw,
            unwrap_cloudevents: false,
            unix_socket: String::new(),
            version: HttpVersion::Http1,
            max_concurrent_streams: 0,
            signing: SigningConfig::default(),
            oauth2: OAuth2Config::default(),
        }
    }
}

impl Config {
    pub(super) fn check_http(&self, p: &mut Problems) {
        let h = &self.http;
        if h.url.is_empty() {
            p.add("http.url", "is required");
        } else if let Err(e) = check_http_url(&h.url) {
            p.add("http.url", e);
        }
        if !h.health_url.is_empty()
            && let Err(e) = check_http_url(&h.health_url)
        {
            p.add("http.health_url", e);
        }
        if super::nats::has_userinfo(&h.proxy) {
            p.add(
                "http.proxy",
                format!(
                    "{:?} carries credentials: put user:password in http.proxy_credentials_file instead",
                    super::redact(&h.proxy)
                ),
            );
        } else if !h.proxy.is_empty()
            && let Err(e) = check_http_url(&h.proxy)
        {
            p.add("http.proxy", e);
        }
        if !h.proxy_credentials_file.is_empty() && h.proxy.is_empty() {
            p.add(
                "http.proxy_credentials_file",
                "is for http.proxy: set it too",
            );
        }
        p.ranges(&[
            ("http.timeout_ms", h.timeout_ms, 1, HOUR),
            ("http.health_interval_ms", h.health_interval_ms, 10, HOUR),
            ("http.health_timeout_ms", h.health_timeout_ms, 1, HOUR),
            (
                "http.health_threshold",
                u64::from(h.health_threshold),
                1,
                1000,
            ),
            (
                "http.unhealthy_handover_ms",
                h.unhealthy_handover_ms,
                1,
                DAY,
            ),
        ]);
        self.check_http_headers(p);
        self.check_transport(p);
        self.check_oauth2(p);
        if !h.signing.previous_secret_file.is_empty() && h.signing.secret_file.is_empty() {
            p.add(
                "http.signing.previous_secret_file",
                "is signed with beside http.signing.secret_file: set that too",
            );
        }
        if h.unwrap_cloudevents && h.format == RequestFormat::CloudeventsStructured {
            p.add(
                "http.unwrap_cloudevents",
                "with http.format = \"cloudevents-structured\" each event would be wrapped again: use \"raw\" or \"cloudevents\"",
            );
        }
        if h.unwrap_cloudevents && self.delivery.batch_size > 1 {
            p.add(
                "http.unwrap_cloudevents",
                "is not supported with delivery.batch_size > 1 yet (a batch carries each payload as it came)",
            );
        }
        let retry = StatusSet::parse(&h.retry_statuses);
        let term = StatusSet::parse(&h.term_statuses);
        for (key, set) in [
            ("http.retry_statuses", &retry),
            ("http.term_statuses", &term),
        ] {
            match set {
                Err(e) => p.add(key, e.to_string()),
                Ok(s) if s.contains(200) => p.add(key, "cannot contain 2xx statuses: 2xx is ack"),
                Ok(_) => {}
            }
        }
    }

    /// `http.unix_socket`, `http.version` and the client certificate: a socket is an
    /// absolute path that fits a socket address, without a proxy; h2c carries no
    /// TLS; a client certificate comes with its key, for an `https://` app.
    fn check_transport(&self, p: &mut Problems) {
        let h = &self.http;
        let https = [&h.url, &h.health_url].iter().any(|u| {
            u.get(..8)
                .is_some_and(|s| s.eq_ignore_ascii_case("https://"))
        });
        if !h.unix_socket.is_empty() {
            if !std::path::Path::new(&h.unix_socket).is_absolute() {
                p.add(
                    "http.unix_socket",
                    format!("{:?} must be an absolute path", h.unix_socket),
                );
            } else if h.unix_socket.len() > MAX_SOCKET_PATH {
                p.add(
                    "http.unix_socket",
                    format!(
                        "{:?} is longer than the {MAX_SOCKET_PATH} bytes a socket's path can have",
                        h.unix_socket
                    ),
                );
            }
            if !h.proxy.is_empty() {
                p.add(
                    "http.unix_socket",
                    "and http.proxy cannot both be set: requests over the socket go to the app directly",
                );
            }
        }
        match (h.tls_cert_file.is_empty(), h.tls_key_file.is_empty()) {
            (false, true) => p.add("http.tls_key_file", "is needed with http.tls_cert_file"),
            (true, false) => p.add("http.tls_cert_file", "is needed with http.tls_key_file"),
            (false, false) if !https => p.add(
                "http.tls_cert_file",
                "is presented to an https:// app: http.url is not one",
            ),
            _ => {}
        }
        if h.max_concurrent_streams > 0 && h.version != HttpVersion::H2c {
            p.add(
                "http.max_concurrent_streams",
                "spreads HTTP/2 streams over connections: it needs version = \"h2c\"",
            );
        }
        if h.version == HttpVersion::H2c && https {
            p.add(
                "http.version",
                "\"h2c\" is HTTP/2 without TLS: for an https:// app use \"auto\" (h2 agreed by ALPN)",
            );
        }
    }

    /// `[http.oauth2]`: all of it or none; its token is the request's only
    /// `Authorization`.
    fn check_oauth2(&self, p: &mut Problems) {
        let h = &self.http;
        let o = &h.oauth2;
        if *o == OAuth2Config::default() {
            return;
        }
        if o.token_url.is_empty() {
            p.add("http.oauth2.token_url", "is required with [http.oauth2]");
        } else if let Err(e) = check_http_url(&o.token_url) {
            p.add("http.oauth2.token_url", e);
        } else if super::nats::has_userinfo(&o.token_url) {
            p.add(
                "http.oauth2.token_url",
                "carries credentials: the client's are client_id and client_secret_file",
            );
        }
        for (key, value) in [
            ("http.oauth2.client_id", &o.client_id),
            ("http.oauth2.client_secret_file", &o.client_secret_file),
        ] {
            if value.is_empty() {
                p.add(key, "is required with [http.oauth2]");
            }
        }
        let authorization = |n: &String| n.eq_ignore_ascii_case("authorization");
        if !h.bearer_token_file.is_empty()
            || h.headers.keys().any(authorization)
            || h.header_files.keys().any(authorization)
        {
            p.add(
                "http.oauth2",
                "sets Authorization, as http.bearer_token_file (or an Authorization header) does: keep one",
            );
        }
    }

    /// `http.headers`, `http.pass_headers`, `http.header_files`.
    fn check_http_headers(&self, p: &mut Problems) {
        let h = &self.http;
        check_static_headers(p, "http.headers", &h.headers);
        for pattern in &h.pass_headers {
            let name = pattern.strip_suffix('*').unwrap_or(pattern);
            let lower = name.to_ascii_lowercase();
            if name.is_empty() || !crate::app::headers::is_valid_name(name) {
                p.add(
                    "http.pass_headers",
                    format!("{pattern:?} is not a header name (or a prefix ending in *)"),
                );
            } else if pattern.ends_with('*') && lower.len() < 2 {
                p.add(
                    "http.pass_headers",
                    format!("{pattern:?} is too wide: name a prefix"),
                );
            } else if !pattern.ends_with('*') && crate::app::headers::never_passed(&lower) {
                p.add(
                    "http.pass_headers",
                    format!("{pattern:?} is never passed (identity, hop-by-hop, Nats-* and Jetrelay-* headers)"),
                );
            }
        }
        for (name, path) in &h.header_files {
            let key = format!("http.header_files.{name}");
            if !crate::app::headers::is_valid_name(name) {
                p.add(key, "is not a valid HTTP header name");
            } else if path.is_empty() {
                p.add(key, "needs a file path");
            } else if h.headers.keys().any(|n| n.eq_ignore_ascii_case(name))
                || (name.eq_ignore_ascii_case("authorization") && !h.bearer_token_file.is_empty())
            {
                p.add(
                    key,
                    "is also set elsewhere (http.headers or http.bearer_token_file)",
                );
            }
        }
    }
}

/// The longest path a Unix socket's address holds (`sun_path` is 108 bytes, one of
/// them the terminating NUL).
const MAX_SOCKET_PATH: usize = 107;

/// Static headers (`<key>.<name> = value`): each a valid HTTP name and value.
pub(super) fn check_static_headers(
    p: &mut Problems,
    key: &str,
    headers: &BTreeMap<String, String>,
) {
    for (name, value) in headers {
        if !crate::app::headers::is_valid_name(name) {
            p.add(format!("{key}.{name}"), "is not a valid HTTP header name");
        } else if !crate::app::headers::is_valid_value(value) {
            p.add(format!("{key}.{name}"), "is not a valid HTTP header value");
        }
    }
}

pub(super) fn check_http_url(url: &str) -> Result<(), String> {
    // A user:password in the URL is never echoed.
    let shown = super::redact(url);
    let parsed = url::Url::parse(url).map_err(|e| format!("{shown:?} is not a URL: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
        return Err(format!(
            "{shown:?} must be an http:// or https:// URL with a host"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "[source]\nstream = \"S\"\nkind = \"durable\"\ndurable = \"d\"\n[http]\n";

    /// The keys of the problems of `[http]` written as `http`, none when it loads.
    fn problems(http: &str) -> Vec<(String, String)> {
        match Config::from_toml(&[&format!("{BASE}{http}")]) {
            Ok(_) => Vec::new(),
            Err(e) => (e.problems().iter())
                .map(|p| (p.key.clone(), p.to_string()))
                .collect(),
        }
    }

    /// `[http]` `http` has no problem (`None`), or one under `key` that says `says`.
    fn expect_problems(http: &str, want: Option<(&str, &str)>) {
        let got = problems(http);
        match want {
            None => assert!(got.is_empty(), "{http}: {got:?}"),
            Some((key, says)) => assert!(
                got.iter().any(|(k, m)| k == key && m.contains(says)),
                "{http}: {got:?}"
            ),
        }
    }

    #[test]
    fn cloudevents_keys_table() {
        let url = "url = \"http://app/m\"\n";
        let cases: &[(&str, Option<(&str, &str)>)] = &[
            ("format = \"cloudevents-structured\"\n", None),
            (
                "unwrap_cloudevents = true\nformat = \"cloudevents\"\n",
                None,
            ),
            (
                "unwrap_cloudevents = true\nformat = \"cloudevents-structured\"\n",
                Some(("http.unwrap_cloudevents", "wrapped again")),
            ),
            (
                "unwrap_cloudevents = true\n[delivery]\nbatch_size = 10\n",
                Some(("http.unwrap_cloudevents", "batch_size")),
            ),
        ];
        for (extra, want) in cases {
            expect_problems(&format!("{url}{extra}"), *want);
        }
        // A service source takes neither.
        let service = "[source]\nkind = \"service\"\nservice = \"s\"\nendpoints = [{ name = \"a\", subject = \"a\" }]\n[http]\nurl = \"http://app/m\"\n";
        for (extra, key) in [
            ("format = \"cloudevents-structured\"\n", "http.format"),
            ("unwrap_cloudevents = true\n", "http.unwrap_cloudevents"),
        ] {
            let e = Config::from_toml(&[&format!("{service}{extra}")]).unwrap_err();
            assert!(e.problems().iter().any(|p| p.key == key), "{e}");
        }
    }

    #[test]
    fn transports_table() {
        let long = format!("/{}", "s".repeat(MAX_SOCKET_PATH));
        let cases: &[(&str, Option<(&str, &str)>)] = &[
            ("url = \"http://app/m\"\n", None),
            (
                "url = \"http://app/m\"\nunix_socket = \"/run/app/app.sock\"\n",
                None,
            ),
            (
                "url = \"http://app/m\"\nunix_socket = \"/run/a.sock\"\nversion = \"h2c\"\n",
                None,
            ),
            ("url = \"https://app/m\"\nversion = \"auto\"\n", None),
            ("url = \"http://app/m\"\nversion = \"auto\"\n", None),
            (
                "url = \"http://app/m\"\nunix_socket = \"run/app.sock\"\n",
                Some(("http.unix_socket", "absolute path")),
            ),
            (
                "url = \"https://app/m\"\nunix_socket = \"/run/app.sock\"\n",
                None,
            ),
            (
                "url = \"https://app/m\"\ntls_cert_file = \"/c.pem\"\ntls_key_file = \"/k.pem\"\n",
                None,
            ),
            (
                "url = \"https://app/m\"\ntls_cert_file = \"/c.pem\"\n",
                Some(("http.tls_key_file", "with http.tls_cert_file")),
            ),
            (
                "url = \"https://app/m\"\ntls_key_file = \"/k.pem\"\n",
                Some(("http.tls_cert_file", "with http.tls_key_file")),
            ),
            (
                "url = \"http://app/m\"\ntls_cert_file = \"/c.pem\"\ntls_key_file = \"/k.pem\"\n",
                Some(("http.tls_cert_file", "https:// app")),
            ),
            (
                "url = \"http://app/m\"\nunix_socket = \"/run/a.sock\"\nproxy = \"http://p:3128\"\n",
                Some(("http.unix_socket", "http.proxy")),
            ),
            (
                "url = \"https://app/m\"\nversion = \"h2c\"\n",
                Some(("http.version", "use \"auto\"")),
            ),
            (
                "url = \"http://app/m\"\nversion = \"h2c\"\nmax_concurrent_streams = 16\n",
                None,
            ),
            (
                "url = \"http://app/m\"\nmax_concurrent_streams = 16\n",
                Some(("http.max_concurrent_streams", "needs version = \"h2c\"")),
            ),
            (
                "url = \"https://app/m\"\nversion = \"auto\"\nmax_concurrent_streams = 16\n",
                Some(("http.max_concurrent_streams", "needs version = \"h2c\"")),
            ),
        ];
        for (http, want) in cases {
            expect_problems(http, *want);
        }
        let got = problems(&format!(
            "url = \"http://app/m\"\nunix_socket = \"{long}\"\n"
        ));
        assert!(
            got.iter()
                .any(|(k, m)| k == "http.unix_socket" && m.contains("bytes")),
            "{got:?}"
        );
        let got = problems("url = \"http://app/m\"\nversion = \"h3\"\n");
        assert!(got.iter().any(|(k, _)| k == "http.version"), "{got:?}");
    }

    #[test]
    fn the_defaults_are_tcp_and_http1() {
        let h = HttpConfig::default();
        assert_eq!(
            (h.unix_socket.as_str(), h.version),
            ("", HttpVersion::Http1)
        );
    }
}
