//! `[http.oauth2]`: the OAuth2 client credentials grant (RFC 6749 §4.4). A token is
//! fetched from `token_url` (the client authenticated with HTTP Basic, §2.3.1) at
//! start (`AppClient::prefetch_token`), or by a request or probe when there is none, kept until 30 s before it expires, then fetched again; a
//! 401 from the app drops it (the request is sent once more with a new one). While
//! the token endpoint fails, the app is unreachable (no attempt spent) with
//! `/ready` saying how. The client secret is a [`SecretFile`] (read again when it
//! changes), and neither it nor a token is ever logged or in `Debug`.

use std::sync::PoisonError;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use tokio::time::Instant;

use crate::http::client::ClientError;
use crate::secret::SecretFile;

/// A token is fetched again this long before it expires.
pub const EARLY: Duration = Duration::from_secs(30);

/// How long a token without `expires_in` is kept.
pub const WITHOUT_EXPIRY: Duration = Duration::from_secs(300);

/// The most of a token endpoint's answer that is read.
const MAX_ANSWER: usize = 64 * 1024;

/// The longest token taken.
const MAX_TOKEN: usize = 16 * 1024;

/// How long a token request may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// `[http.oauth2]`, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuth2Settings {
    /// `token_url`.
    pub token_url: reqwest::Url,
    /// `client_id`.
    pub client_id: String,
    /// `client_secret_file`.
    pub client_secret_file: String,
    /// `scopes`, sent space-separated (none: no `scope`).
    pub scopes: Vec<String>,
    /// `audience` (empty: none).
    pub audience: String,
}

/// A token, as the endpoint answered it.
#[derive(PartialEq, Eq)]
pub struct Token {
    /// `access_token`.
    pub access_token: String,
    /// `expires_in`, when given.
    pub expires_in: Option<Duration>,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token")
            .field("expires_in", &self.expires_in)
            .finish_non_exhaustive()
    }
}

/// Why no token could be had: each is what `/ready` says after `app unreachable: `.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// The endpoint could not be reached (or timed out).
    #[error("oauth2 token endpoint unreachable")]
    Unreachable,
    /// It refused the client (400 or 401: a wrong id or secret, an unknown scope).
    #[error("oauth2 token endpoint refused the client")]
    Refused,
    /// It answered another status.
    #[error("oauth2 token endpoint failed")]
    Failed,
    /// Its answer is not a bearer token.
    #[error("oauth2 token endpoint answered no bearer token")]
    NotAToken,
}

impl TokenError {
    /// What `/ready` says after `app unreachable: `.
    pub fn kind(self) -> &'static str {
        match self {
            TokenError::Unreachable => "oauth2 token endpoint unreachable",
            TokenError::Refused => "oauth2 token endpoint refused the client",
            TokenError::Failed => "oauth2 token endpoint failed",
            TokenError::NotAToken => "oauth2 token endpoint answered no bearer token",
        }
    }
}

/// Reads a token endpoint's successful answer (RFC 6749 §5.1): `access_token` (a
/// valid header value of at most 16 KiB), `token_type` `Bearer` (in any case),
/// `expires_in` (seconds, a number or a numeric string) when given. Pure.
///
/// # Errors
/// [`TokenError::NotAToken`].
pub fn parse_token(body: &[u8]) -> Result<Token, TokenError> {
    #[derive(serde::Deserialize)]
    struct TokenAnswer {
        access_token: String,
        token_type: String,
        #[serde(default)]
        expires_in: Option<serde_json::Value>,
    }
    let a: TokenAnswer = serde_json::from_slice(body).map_err(|_| TokenError::NotAToken)?;
    let usable = !a.access_token.is_empty()
        && a.access_token.len() <= MAX_TOKEN
        && a.access_token.bytes().all(|b| b.is_ascii_graphic());
    if !usable || !a.token_type.eq_ignore_ascii_case("bearer") {
        return Err(TokenError::NotAToken);
    }
    let expires_in = match a.expires_in {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::Number(n)) => Some(n.as_u64().ok_or(TokenError::NotAToken)?),
        Some(serde_json::Value::String(s)) => Some(s.parse().map_err(|_| TokenError::NotAToken)?),
        Some(_) => return Err(TokenError::NotAToken),
    };
    Ok(Token {
        access_token: a.access_token,
        expires_in: expires_in.map(Duration::from_secs),
    })
}

/// How long a token that expires in `expires_in` is used: until [`EARLY`] before
/// it expires, half its life when that is shorter than twice [`EARLY`], and
/// [`WITHOUT_EXPIRY`] when the endpoint did not say. Pure.
pub fn keep_for(expires_in: Option<Duration>) -> Duration {
    match expires_in {
        None => WITHOUT_EXPIRY,
        Some(life) if life >= 2 * EARLY => life - EARLY,
        Some(life) => life / 2,
    }
}

/// The token in use and when it is fetched again (never in `Debug`).
struct HeldToken {
    token: Arc<str>,
    until: Instant,
}

/// Fetches and keeps the app's OAuth2 token.
pub struct TokenSource {
    settings: OAuth2Settings,
    secret: SecretFile,
    client: reqwest::Client,
    held: Mutex<Option<HeldToken>>,
    /// One fetch at a time: the others wait for its token.
    fetching: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSource")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl TokenSource {
    /// Reads the client secret; `client` asks the token endpoint.
    ///
    /// # Errors
    /// [`ClientError::SecretFile`].
    pub fn load(
        settings: &OAuth2Settings,
        client: reqwest::Client,
    ) -> Result<TokenSource, ClientError> {
        Ok(TokenSource {
            secret: SecretFile::load(
                "http.oauth2.client_secret_file",
                &settings.client_secret_file,
            )?,
            settings: settings.clone(),
            client,
            held: Mutex::new(None),
            fetching: tokio::sync::Mutex::new(()),
        })
    }

    /// The token held, when it is still to be used.
    fn held(&self) -> Option<Arc<str>> {
        // A poisoned lock: a panic elsewhere while replacing it; what is there is whole.
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.as_ref()
            .filter(|h| Instant::now() < h.until)
            .map(|h| Arc::clone(&h.token))
    }

    /// The token to send now: the one held, or a new one fetched.
    ///
    /// # Errors
    /// [`TokenError`]: why none could be had.
    pub async fn token(&self) -> Result<Arc<str>, TokenError> {
        if let Some(t) = self.held() {
            return Ok(t);
        }
        let _one = self.fetching.lock().await;
        if let Some(t) = self.held() {
            return Ok(t);
        }
        let token = self.fetch().await?;
        let fetched: Arc<str> = Arc::from(token.access_token.as_str());
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        *held = Some(HeldToken {
            token: Arc::clone(&fetched),
            until: Instant::now() + keep_for(token.expires_in),
        });
        Ok(fetched)
    }

    /// Drops `token` (the app refused it): the next [`TokenSource::token`] fetches
    /// a new one.
    pub fn refused(&self, token: &str) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if held.as_ref().is_some_and(|h| &*h.token == token) {
            *held = None;
        }
    }

    /// One token request.
    async fn fetch(&self) -> Result<Token, TokenError> {
        let s = &self.settings;
        let form = {
            let mut form = url::form_urlencoded::Serializer::new(String::new());
            form.append_pair("grant_type", "client_credentials");
            if !s.scopes.is_empty() {
                form.append_pair("scope", &s.scopes.join(" "));
            }
            if !s.audience.is_empty() {
                form.append_pair("audience", &s.audience);
            }
            form.finish()
        };
        let basic = basic_authorization(&s.client_id, &self.secret.value());
        let asked = self
            .client
            .post(s.token_url.clone())
            .header(AUTHORIZATION, basic)
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(reqwest::header::ACCEPT, "application/json")
            .body(form)
            .timeout(FETCH_TIMEOUT)
            .send()
            .await;
        let mut resp = asked.map_err(|e| {
            tracing::warn!(error = %crate::http::broke::Broke::of_reqwest(&e).cause, "the oauth2 token endpoint cannot be reached");
            TokenError::Unreachable
        })?;
        let status = resp.status().as_u16();
        let mut body = Vec::new();
        while body.len() < MAX_ANSWER {
            match resp.chunk().await {
                Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                Ok(None) => break,
                Err(_) => return Err(TokenError::Unreachable),
            }
        }
        match status {
            200..=299 => parse_token(&body).inspect_err(|_| {
                tracing::warn!("the oauth2 token endpoint's answer holds no bearer token");
            }),
            400 | 401 => {
                tracing::warn!(status, error = %oauth_error(&body), "the oauth2 token endpoint refused the client");
                Err(TokenError::Refused)
            }
            _ => {
                tracing::warn!(status, "the oauth2 token endpoint failed");
                Err(TokenError::Failed)
            }
        }
    }
}

/// `Basic <base64 of id:secret>`, each form-urlencoded first (RFC 6749 §2.3.1),
/// marked sensitive.
fn basic_authorization(id: &str, secret: &str) -> HeaderValue {
    let enc = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
    let pair = format!("{}:{}", enc(id), enc(secret));
    let text = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    );
    // Base64 and a fixed prefix: always a valid header value.
    let mut value = HeaderValue::from_str(&text).unwrap_or(HeaderValue::from_static("Basic"));
    value.set_sensitive(true);
    value
}

/// The `error` code of an error answer (RFC 6749 §5.2), printable and short, for the
/// log; never the rest of the body.
fn oauth_error(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Error {
        error: String,
    }
    serde_json::from_slice::<Error>(body)
        .map(|e| {
            crate::printable::printable(&e.error.chars().take(64).collect::<String>()).into_owned()
        })
        .unwrap_or_default()
}

/// `Authorization: Bearer <token>`, marked sensitive; `None` for a token that is no
/// header value (parse_token admits none such).
pub fn bearer(token: &str) -> Option<HeaderValue> {
    let mut v = HeaderValue::from_str(&format!("Bearer {token}")).ok()?;
    v.set_sensitive(true);
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_answers_table() {
        let ok = |t: &str, e: Option<u64>| {
            Ok(Token {
                access_token: t.into(),
                expires_in: e.map(Duration::from_secs),
            })
        };
        let cases: &[(&str, Result<Token, TokenError>)] = &[
            (
                r#"{"access_token":"t1","token_type":"Bearer","expires_in":3600}"#,
                ok("t1", Some(3600)),
            ),
            (
                r#"{"access_token":"t1","token_type":"bearer","expires_in":"60"}"#,
                ok("t1", Some(60)),
            ),
            (
                r#"{"access_token":"t1","token_type":"BEARER","scope":"a b"}"#,
                ok("t1", None),
            ),
            (
                r#"{"access_token":"t1","token_type":"Bearer","expires_in":null}"#,
                ok("t1", None),
            ),
            (
                r#"{"access_token":"t1","token_type":"mac"}"#,
                Err(TokenError::NotAToken),
            ),
            (
                r#"{"access_token":"","token_type":"Bearer"}"#,
                Err(TokenError::NotAToken),
            ),
            (
                r#"{"access_token":"a b","token_type":"Bearer"}"#,
                Err(TokenError::NotAToken),
            ),
            (
                r#"{"access_token":"t\n","token_type":"Bearer"}"#,
                Err(TokenError::NotAToken),
            ),
            (
                r#"{"access_token":"t1","token_type":"Bearer","expires_in":-1}"#,
                Err(TokenError::NotAToken),
            ),
            (
                r#"{"access_token":"t1","token_type":"Bearer","expires_in":"soon"}"#,
                Err(TokenError::NotAToken),
            ),
            (r#"{"token_type":"Bearer"}"#, Err(TokenError::NotAToken)),
            ("not json", Err(TokenError::NotAToken)),
        ];
        for (body, want) in cases {
            assert_eq!(&parse_token(body.as_bytes()), want, "{body}");
        }
        let long = format!(
            r#"{{"access_token":"{}","token_type":"Bearer"}}"#,
            "t".repeat(MAX_TOKEN + 1)
        );
        assert_eq!(parse_token(long.as_bytes()), Err(TokenError::NotAToken));
        let shown = format!("{:?}", parse_token(cases[0].0.as_bytes()));
        assert!(!shown.contains("t1"), "never the token: {shown}");
    }

    #[test]
    fn how_long_a_token_is_kept() {
        let s = Duration::from_secs;
        for (expires_in, kept) in [
            (Some(s(3600)), s(3570)),
            (Some(s(60)), s(30)),
            (Some(s(40)), s(20)),
            (Some(s(1)), Duration::from_millis(500)),
            (Some(s(0)), s(0)),
            (None, WITHOUT_EXPIRY),
        ] {
            assert_eq!(keep_for(expires_in), kept, "{expires_in:?}");
        }
    }

    #[test]
    fn the_client_is_authenticated_with_basic_its_parts_form_encoded() {
        let v = basic_authorization("my id", "p@ss:word");
        assert!(v.is_sensitive());
        let b64 = v.to_str().unwrap().strip_prefix("Basic ").unwrap();
        let pair = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        assert_eq!(pair, b"my+id:p%40ss%3Aword");
        assert_eq!(
            oauth_error(br#"{"error":"invalid_client","error_description":"x"}"#),
            "invalid_client"
        );
        assert_eq!(oauth_error(b"<html>"), "");
    }
}
