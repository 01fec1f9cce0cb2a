//! Standard Webhooks signatures (<https://www.standardwebhooks.com>), as pure
//! functions: a request's `webhook-id` (a message's CloudEvents id,
//! `crate::app::headers::event_id`; a batch's, from its messages'), the `whsec_<base64>` secret read into a key, and
//! `webhook-signature`: `v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">`, one
//! per key, space-separated (two keys while a secret is rotated). `crate::http::signing`
//! keeps the keys current and adds the headers to each request.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

/// The request header naming what is signed: the same on every attempt.
pub const ID: &str = "webhook-id";
/// The request header holding when it was signed (unix seconds).
pub const TIMESTAMP: &str = "webhook-timestamp";
/// The request header holding the signatures.
pub const SIGNATURE: &str = "webhook-signature";

/// The shortest key the specification allows, in bytes.
pub const MIN_KEY: usize = 24;
/// The longest.
pub const MAX_KEY: usize = 64;

/// A batch's id: `batch_` and 128 bits of SHA-256 over its messages' ids in order,
/// so that the same batch sent again has the same id, and another batch (other
/// messages, or the same in another grouping) another.
pub fn batch_id<'a>(ids: impl IntoIterator<Item = &'a str>) -> String {
    let mut parts: Vec<&[u8]> = Vec::new();
    for id in ids {
        parts.push(id.as_bytes());
        // No id holds a line break (a valid header value), so the ids stay apart.
        parts.push(b"\n");
    }
    let hash = crate::digest::sha256(&parts);
    format!("batch_{}", crate::digest::hex(&hash[..16]))
}

/// A signing key, never shown.
#[derive(Clone, PartialEq, Eq)]
pub struct Key(Vec<u8>);

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key(<{} bytes>)", self.0.len())
    }
}

/// Why a secret is not a Standard Webhooks key. Never holds the secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WhsecError {
    /// Not base64 after its `whsec_` prefix.
    #[error("is not \"whsec_\" followed by a base64 key")]
    NotBase64,
    /// The key is too short or too long.
    #[error("holds a key of {0} bytes: the specification wants {MIN_KEY} to {MAX_KEY}")]
    Length(usize),
}

impl Key {
    /// Reads `whsec_<base64 key>` (the prefix may be left out, as the
    /// specification's libraries allow); blanks around it are ignored.
    ///
    /// # Errors
    /// [`WhsecError`].
    pub fn parse(secret: &str) -> Result<Key, WhsecError> {
        let text = secret.trim();
        let text = text.strip_prefix("whsec_").unwrap_or(text);
        let key = STANDARD
            .decode(text.as_bytes())
            .map_err(|_| WhsecError::NotBase64)?;
        if !(MIN_KEY..=MAX_KEY).contains(&key.len()) {
            return Err(WhsecError::Length(key.len()));
        }
        Ok(Key(key))
    }
}

/// `webhook-signature`'s value for `id`, `timestamp` (unix seconds) and `body`: one
/// `v1,<base64>` per key, space-separated, in the keys' order.
pub fn signature(keys: &[Key], id: &str, timestamp: u64, body: &[u8]) -> String {
    let ts = timestamp.to_string();
    let mut out = String::with_capacity(keys.len() * 48);
    for (i, key) in keys.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let mac = crate::digest::hmac_sha256_parts(
            &key.0,
            &[id.as_bytes(), b".", ts.as_bytes(), b".", body],
        );
        out.push_str("v1,");
        STANDARD.encode_string(mac, &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_specifications_example_signs_as_its_libraries_do() {
        // The example of the Standard Webhooks libraries' own tests (their README's
        // secret, id, timestamp and payload), and the signature they expect.
        let key = Key::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let sig = signature(
            &[key],
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1_614_265_330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn two_keys_sign_space_separated_in_order() {
        let a = Key(vec![1; 32]);
        let b = Key(vec![2; 32]);
        let both = signature(&[a.clone(), b.clone()], "i", 1, b"x");
        let (first, second) = both.split_once(' ').unwrap();
        assert_eq!(first, signature(&[a], "i", 1, b"x"));
        assert_eq!(second, signature(&[b], "i", 1, b"x"));
        assert_eq!(signature(&[], "i", 1, b"x"), "");
    }

    #[test]
    fn secrets_table() {
        let b64 = |n: usize| STANDARD.encode(vec![7u8; n]);
        let cases = [
            (format!("whsec_{}", b64(32)), Ok(32)),
            (format!(" whsec_{}\n", b64(24)), Ok(24)),
            (b64(64), Ok(64)),
            (format!("whsec_{}", b64(23)), Err(WhsecError::Length(23))),
            (format!("whsec_{}", b64(65)), Err(WhsecError::Length(65))),
            ("whsec_".to_string(), Err(WhsecError::Length(0))),
            ("whsec_not base64!".to_string(), Err(WhsecError::NotBase64)),
            ("whsec_AAAA=".to_string(), Err(WhsecError::NotBase64)),
        ];
        for (text, want) in cases {
            assert_eq!(Key::parse(&text).map(|k| k.0.len()), want, "{text:?}");
        }
        let shown = format!("{:?}", Key::parse(&b64(32)).unwrap());
        assert_eq!(shown, "Key(<32 bytes>)", "never the key");
    }

    #[test]
    fn a_batchs_id_is_its_messages_in_order() {
        let ab = batch_id(["a", "b"]);
        assert_eq!(ab, batch_id(["a", "b"]));
        assert_ne!(ab, batch_id(["b", "a"]));
        assert_ne!(ab, batch_id(["a"]));
        assert_ne!(batch_id(["ab"]), batch_id(["a", "b"]));
        assert!(ab.starts_with("batch_") && ab.len() == 6 + 32, "{ab}");
    }
}
