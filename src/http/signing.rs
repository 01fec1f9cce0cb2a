//! `[http.signing]`: the Standard Webhooks keys kept current, and the three headers
//! each request to the app gets (`crate::app::signing` makes them). The secret files
//! are read at startup (a missing, empty or unparsable one is a config error naming
//! its key) and read again when they change (`crate::secret::SecretFile`); a new
//! content that is not a key leaves the last keys in use, with a warning.

use std::sync::PoisonError;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use crate::app::signing::{self, Key};
use crate::http::client::ClientError;
use crate::secret::SecretFile;

/// `http.signing.secret_file` and `http.signing.previous_secret_file`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SigningFiles {
    /// The key signed with first.
    pub secret_file: String,
    /// A second key signed with too, while the app moves from it to the first.
    pub previous_secret_file: Option<String>,
}

/// The keys in use, and the file values they were read from (never in `Debug`).
struct SigningKeys {
    values: Vec<Arc<str>>,
    keys: Arc<[Key]>,
}

impl std::fmt::Debug for SigningKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKeys")
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

/// Signs each request to the app.
#[derive(Debug)]
pub struct Signer {
    files: Vec<SecretFile>,
    keys: Mutex<SigningKeys>,
}

impl Signer {
    /// Reads the secret files.
    ///
    /// # Errors
    /// [`ClientError::SecretFile`] for a file that cannot be read,
    /// [`ClientError::Signing`] for one that holds no key.
    pub fn load(from: &SigningFiles) -> Result<Signer, ClientError> {
        let mut files = vec![SecretFile::load(
            "http.signing.secret_file",
            &from.secret_file,
        )?];
        if let Some(previous) = &from.previous_secret_file {
            files.push(SecretFile::load(
                "http.signing.previous_secret_file",
                previous,
            )?);
        }
        let values: Vec<Arc<str>> = files.iter().map(SecretFile::value).collect();
        let mut keys = Vec::with_capacity(values.len());
        for (f, v) in files.iter().zip(&values) {
            keys.push(Key::parse(v).map_err(|source| ClientError::Signing {
                key: f.key().to_string(),
                source,
            })?);
        }
        Ok(Signer {
            files,
            keys: Mutex::new(SigningKeys {
                values,
                keys: keys.into(),
            }),
        })
    }

    /// The keys now: the files are read again when they changed.
    fn keys(&self) -> Arc<[Key]> {
        // A poisoned lock means a panic elsewhere while parsing; the keys in it are
        // still whole (they are replaced, never edited in place).
        let mut held = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        let values: Vec<Arc<str>> = self.files.iter().map(SecretFile::value).collect();
        if crate::secret::unchanged(&values, &held.values) {
            return Arc::clone(&held.keys);
        }
        let mut keys = held.keys.to_vec();
        for (i, (f, v)) in self.files.iter().zip(&values).enumerate() {
            match Key::parse(v) {
                Ok(k) => keys[i] = k,
                Err(e) => tracing::warn!(
                    key = %f.key(),
                    error = %e,
                    "a signing secret's new content is not a key: its last key stays in use"
                ),
            }
        }
        held.keys = keys.into();
        held.values = values;
        Arc::clone(&held.keys)
    }

    /// Adds `webhook-id` (`id`), `webhook-timestamp` (`now`) and `webhook-signature`
    /// (over `id`, the timestamp and `body`) to `headers`, replacing any there.
    pub fn sign(&self, headers: &mut HeaderMap, id: &str, body: &[u8], now: SystemTime) {
        let ts = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let sig = signing::signature(&self.keys(), id, ts, body);
        // An id is a valid header value (a message's `Nats-Msg-Id` is checked, the
        // others are made of visible ASCII), and a signature is base64; a value that
        // were not is left out, and the app refuses the request unsigned.
        let mut put = |name: &'static str, value: &str| {
            if let Ok(v) = HeaderValue::from_str(value) {
                headers.insert(HeaderName::from_static(name), v);
            }
        };
        put(signing::ID, id);
        put(signing::TIMESTAMP, &ts.to_string());
        put(signing::SIGNATURE, &sig);
    }

    /// Makes the next signature look at the files (tests).
    #[cfg(test)]
    fn expire(&self) {
        self.files.iter().for_each(SecretFile::expire);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;

    fn whsec(byte: u8) -> String {
        let key = base64::engine::general_purpose::STANDARD.encode([byte; 32]);
        format!("whsec_{key}\n")
    }

    #[test]
    fn signs_with_both_keys_and_follows_a_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let (current, previous) = (dir.path().join("new"), dir.path().join("old"));
        std::fs::write(&current, whsec(1)).unwrap();
        std::fs::write(&previous, whsec(2)).unwrap();
        let s = Signer::load(&SigningFiles {
            secret_file: current.display().to_string(),
            previous_secret_file: Some(previous.display().to_string()),
        })
        .unwrap();
        assert!(!format!("{s:?}").contains("whsec"), "never in Debug");
        let now = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        let mut h = HeaderMap::new();
        s.sign(&mut h, "ORDERS:7", b"{}", now);
        assert_eq!(h["webhook-id"], "ORDERS:7");
        assert_eq!(h["webhook-timestamp"], "1700000000");
        let both = h["webhook-signature"].to_str().unwrap().to_string();
        let keys = [whsec(1), whsec(2)].map(|k| Key::parse(&k).unwrap());
        assert_eq!(
            both,
            signing::signature(&keys, "ORDERS:7", 1_700_000_000, b"{}")
        );
        assert_eq!(both.split(' ').count(), 2);

        // Rotated: the new content is used; content that is no key keeps the last.
        std::fs::write(&current, whsec(3)).unwrap();
        std::fs::write(&previous, "not a key").unwrap();
        s.expire();
        s.sign(&mut h, "ORDERS:7", b"{}", now);
        let keys = [whsec(3), whsec(2)].map(|k| Key::parse(&k).unwrap());
        assert_eq!(
            h["webhook-signature"],
            signing::signature(&keys, "ORDERS:7", 1_700_000_000, b"{}").as_str()
        );
    }

    #[test]
    fn a_file_that_holds_no_key_names_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("bad");
        std::fs::write(&bad, "whsec_c2hvcnQ=").unwrap();
        let err = Signer::load(&SigningFiles {
            secret_file: bad.display().to_string(),
            previous_secret_file: None,
        })
        .unwrap_err();
        let cause = std::error::Error::source(&err).map(ToString::to_string);
        let shown = format!("{err}: {}", cause.unwrap_or_default());
        assert!(shown.contains("http.signing.secret_file"), "{shown}");
        assert!(shown.contains("5 bytes"), "{shown}");
        assert!(!shown.contains("c2hvcnQ"), "never the secret: {shown}");
        let err = Signer::load(&SigningFiles {
            secret_file: "/nonexistent/whsec".into(),
            previous_secret_file: None,
        })
        .unwrap_err();
        assert!(
            err.to_string().contains("http.signing.secret_file"),
            "{err}"
        );
    }
}
