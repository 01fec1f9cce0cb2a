//! A secret kept in a file: read when it is loaded (a missing or empty file is a
//! configuration error naming its key), and read again when the file changes (looked
//! at once a second at most), so that a rotated token or key is used without a
//! restart; while the file cannot be read, its last value stays in use. The value is
//! never logged and never in `Debug`.

use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

/// How often the file is looked at, at most.
pub const CHECK_EVERY: Duration = Duration::from_secs(1);

/// Why a secret file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// It cannot be read.
    #[error("{key} ({path}): cannot read it")]
    Read {
        /// The config key.
        key: String,
        /// The path.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// It holds nothing but white space.
    #[error("{key} ({path}): it is empty")]
    Empty {
        /// The config key.
        key: String,
        /// The path.
        path: String,
    },
}

/// A file's modification time and size (`None`: cannot be seen).
type Stamp = Option<(SystemTime, u64)>;

struct Current {
    value: Arc<str>,
    stamp: Stamp,
    checked: Instant,
}

/// A secret read from a file, and read again when the file changes.
pub struct SecretFile {
    key: String,
    path: PathBuf,
    state: Mutex<Current>,
}

impl fmt::Debug for SecretFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretFile")
            .field("key", &self.key)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SecretFile {
    /// Reads the file at `path`, the value of config key `key` (its content,
    /// trimmed).
    ///
    /// # Errors
    /// [`SecretError`] when it cannot be read or is empty.
    pub fn load(
        key: impl Into<String>,
        path: impl Into<PathBuf>,
    ) -> Result<SecretFile, SecretError> {
        let (key, path) = (key.into(), path.into());
        let value = read(&key, &path)?;
        Ok(SecretFile {
            state: Mutex::new(Current {
                value,
                stamp: stamp(&path),
                checked: Instant::now(),
            }),
            key,
            path,
        })
    }

    /// The config key it is the value of.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The value now: the file is read again when it changed.
    pub fn value(&self) -> Arc<str> {
        // A poisoned lock means a panic elsewhere while reading; the value in it is
        // still whole (it is replaced, never edited in place).
        let mut state = match self.state.lock() {
            Ok(s) => s,
            Err(poisoned) => poisoned.into_inner(),
        };
        if state.checked.elapsed() < CHECK_EVERY {
            return Arc::clone(&state.value);
        }
        state.checked = Instant::now();
        let now = stamp(&self.path);
        if now == state.stamp {
            return Arc::clone(&state.value);
        }
        state.stamp = now;
        match read(&self.key, &self.path) {
            Ok(v) => {
                tracing::info!(key = %self.key, "a secret file changed: its value is read again");
                state.value = v;
            }
            Err(e) => {
                // Read again when it changes (reappears) next.
                tracing::warn!(error = %e, "a secret file cannot be read again: its last value stays in use");
            }
        }
        Arc::clone(&state.value)
    }

    /// Makes the next [`SecretFile::value`] look at the file (tests).
    #[cfg(test)]
    pub(crate) fn expire(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.checked -= CHECK_EVERY;
        }
    }
}

fn stamp(path: &PathBuf) -> Stamp {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

fn read(key: &str, path: &PathBuf) -> Result<Arc<str>, SecretError> {
    let text = std::fs::read_to_string(path).map_err(|source| SecretError::Read {
        key: key.to_string(),
        path: path.display().to_string(),
        source,
    })?;
    let text = text.trim();
    if text.is_empty() {
        return Err(SecretError::Empty {
            key: key.to_string(),
            path: path.display().to_string(),
        });
    }
    Ok(Arc::from(text))
}

/// The token of an `Authorization: Bearer <token>` value: the scheme in any case
/// (RFC 7235: auth schemes are case-insensitive), one or more spaces, the token
/// with surrounding blanks trimmed; `None` for another scheme or no token.
pub fn bearer_token(authorization: &str) -> Option<&str> {
    let (scheme, token) = authorization.trim_start().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Whether two secrets are equal, in time that does not depend on where they differ.
pub fn same(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for (x, y) in a.iter().zip(b) {
        diff |= usize::from(x ^ y);
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bearer_tokens_scheme_in_any_case() {
        let cases = [
            ("Bearer t0k", Some("t0k")),
            ("bearer t0k", Some("t0k")),
            ("BEARER t0k", Some("t0k")),
            ("bEaReR   t0k ", Some("t0k")),
            ("Bearer ", None),
            ("Bearer", None),
            ("Basic t0k", None),
            ("Bearert0k", None),
            ("t0k", None),
            ("", None),
        ];
        for (value, want) in cases {
            assert_eq!(bearer_token(value), want, "{value:?}");
        }
    }

    #[test]
    fn read_at_load_again_when_it_changes_and_kept_while_unreadable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "v1\n").unwrap();
        let s = SecretFile::load("publish.token_file", &path).unwrap();
        assert_eq!(&*s.value(), "v1");
        assert!(!format!("{s:?}").contains("v1"), "never in Debug");
        std::fs::write(&path, "v2-longer").unwrap();
        s.expire();
        assert_eq!(&*s.value(), "v2-longer");
        std::fs::remove_file(&path).unwrap();
        s.expire();
        assert_eq!(&*s.value(), "v2-longer", "the last value stays");
        let err = SecretFile::load("k", dir.path().join("none")).unwrap_err();
        assert!(err.to_string().starts_with("k ("), "{err}");
        std::fs::write(&path, " \n").unwrap();
        let err = SecretFile::load("k", &path).unwrap_err();
        assert!(err.to_string().ends_with("it is empty"), "{err}");
    }

    #[test]
    fn comparison_table() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"ab"));
        assert!(!same(b"", b"a"));
        assert!(same(b"", b""));
    }
}
