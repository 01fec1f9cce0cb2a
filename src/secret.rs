//! A secret kept in a file: read when it is loaded (a missing or empty file is a
//! configuration error naming its key), and read again when the file changes (looked
//! at once a second at most), so that a rotated token or key is used without a
//! restart; while the file cannot be read, its last value stays in use. The value is
//! never logged and never in `Debug`. Also how a secret is shown when it must be
//! compared but not seen ([`Salt::fingerprint`]: salted and slow, so that what
//! `/config` shows cannot be turned back into a weak password).

use std::fmt;
use std::path::PathBuf;
use std::sync::PoisonError;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::digest;

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
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
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

/// PBKDF2 rounds of a fingerprint: about 20 ms of one core for the few secrets of a
/// config (computed at start, at a reload and by `check --diff-running`, never per
/// request), a guess as dear as that to whoever reads `/config`.
const FINGERPRINT_ROUNDS: u32 = 50_000;

/// The salt of the fingerprints one process shows: random when the process starts,
/// so that the same secret fingerprints alike within it (a reload's diff, `/config`)
/// and differently in any other, and no table of guesses serves two of them. Each
/// fingerprint carries its salt, so that `check --diff-running` fingerprints the
/// file's secrets as the running process did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Salt([u8; 16]);

impl Salt {
    /// A salt from the system's random source.
    pub fn random() -> Salt {
        Salt(crate::digest::random().unwrap_or_else(|| {
            // No random source: the clock and the process id still make the salt
            // this process's own.
            let now = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default();
            (now.as_nanos() ^ u128::from(std::process::id())).to_le_bytes()
        }))
    }

    /// One salt for the tests of what flattens a config.
    #[cfg(test)]
    pub const FIXED_FOR_TESTS: Salt = Salt([7; 16]);

    /// This process's salt: made once, at its first use.
    pub fn of_process() -> Salt {
        static SALT: std::sync::OnceLock<Salt> = std::sync::OnceLock::new();
        *SALT.get_or_init(Salt::random)
    }

    /// The salt a fingerprint was made with (`<redacted pbkdf2:<salt>:<hash>>`), if
    /// `shown` holds one.
    pub fn of_shown(shown: &str) -> Option<Salt> {
        let hex = shown.split("<redacted pbkdf2:").nth(1)?.get(..32)?;
        digest::unhex(hex).map(Salt)
    }

    /// How `secret` is shown: PBKDF2-HMAC-SHA256 with this salt, 64 bits of it, the
    /// salt beside it. The same secret shows the same text under one salt; a changed
    /// one, other text.
    pub fn fingerprint(&self, secret: &str) -> String {
        let mut hash = [0u8; 8];
        digest::pbkdf2(&self.0, secret.as_bytes(), FINGERPRINT_ROUNDS, &mut hash);
        format!(
            "<redacted pbkdf2:{}:{}>",
            digest::hex(&self.0),
            digest::hex(&hash)
        )
    }
}

/// The token of an `Authorization: Bearer <token>` value: the scheme in any case
/// (RFC 7235: auth schemes are case-insensitive), one or more spaces, the token
/// with surrounding blanks trimmed; `None` for another scheme or no token.
pub fn bearer_token(authorization: &str) -> Option<&str> {
    let (scheme, token) = authorization.trim_start().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Whether the secret files' values `now` are those a value was made from (`then`,
/// both in the files' order): the same `Arc`s, for [`SecretFile::value`] hands out a
/// new one only when the file's content changed.
pub fn unchanged(now: &[Arc<str>], then: &[Arc<str>]) -> bool {
    now.len() == then.len() && now.iter().zip(then).all(|(a, b)| Arc::ptr_eq(a, b))
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
    fn a_fingerprint_is_salted_slow_and_stable_under_its_salt() {
        let (a, b) = (Salt::random(), Salt::random());
        assert_ne!(a, b);
        let fp = a.fingerprint("hunter2");
        assert_eq!(
            fp,
            a.fingerprint("hunter2"),
            "the same secret, the same text"
        );
        assert_ne!(fp, a.fingerprint("hunter3"), "a changed secret, other text");
        assert_ne!(fp, b.fingerprint("hunter2"), "another process, other text");
        assert_eq!(Salt::of_shown(&fp), Some(a));
        assert_eq!(Salt::of_shown(&format!("https://u:{fp}@h/")), Some(a));
        assert_eq!(Salt::of_shown("<redacted 0123>"), None);
        // Not any fast hash of the secret: FNV-1a (what was shown before), SHA-256
        // and HMAC-SHA256 keyed by the salt, in any 64 bits of them.
        let shown_hash = fp.rsplit(':').next().unwrap().trim_end_matches('>');
        let mut fnv: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in b"hunter2" {
            fnv ^= u64::from(*byte);
            fnv = fnv.wrapping_mul(0x0100_0000_01b3);
        }
        let sha = digest::hex(&digest::sha256(&[b"hunter2"]));
        let mac = digest::hex(&digest::hmac_sha256(&a.0, b"hunter2"));
        for fast in [format!("{fnv:016x}"), sha, mac] {
            assert!(!fast.contains(shown_hash), "{fast} holds {shown_hash}");
        }
    }

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
