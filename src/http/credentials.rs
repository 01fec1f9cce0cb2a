//! The app's credentials: the static `http.headers`, `Authorization: Bearer <token>`
//! from `http.bearer_token_file` and secret header values from `http.header_files`.
//! Files are read at startup (a missing one is a config error) and read again when
//! they change (checked at most once a second), so a rotated token or key is used
//! without a restart; while a file cannot be read its last value stays in use. Sent on
//! every request to the app and on health probes.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};
use tokio::time::Instant;

use super::forward::ForwardError;

/// How often the files are looked at, at most.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// One header whose value lives in a file.
#[derive(Debug)]
struct FileHeader {
    name: HeaderName,
    /// The config key, for messages.
    key: String,
    path: PathBuf,
    /// Put before the file's content (`Bearer `).
    prefix: &'static str,
}

/// What a file looked like when it was last read.
type Stamp = Option<(SystemTime, u64)>;

#[derive(Debug)]
struct Cached {
    headers: HeaderMap,
    checked: Instant,
    stamps: Vec<Stamp>,
}

/// The credentials sent to the app.
#[derive(Debug)]
pub struct Credentials {
    files: Vec<FileHeader>,
    cached: Mutex<Cached>,
    fixed: HeaderMap,
}

impl Credentials {
    /// Reads `http.headers`, `http.bearer_token_file` and `http.header_files`.
    ///
    /// # Errors
    /// [`ForwardError::Header`] for a name or value that is not valid HTTP,
    /// [`ForwardError::SecretFile`] for a file that cannot be read.
    pub fn load(
        headers: &BTreeMap<String, String>,
        bearer_token_file: &str,
        header_files: &BTreeMap<String, String>,
    ) -> Result<Credentials, ForwardError> {
        let mut fixed = HeaderMap::new();
        for (name, value) in headers {
            let n = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| ForwardError::Header(name.clone()))?;
            let v = HeaderValue::from_str(value).map_err(|_| ForwardError::Header(name.clone()))?;
            fixed.insert(n, v);
        }
        let mut files = Vec::new();
        if !bearer_token_file.is_empty() {
            files.push(FileHeader {
                name: AUTHORIZATION,
                key: "http.bearer_token_file".into(),
                path: bearer_token_file.into(),
                prefix: "Bearer ",
            });
        }
        for (name, path) in header_files {
            files.push(FileHeader {
                name: HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| ForwardError::Header(name.clone()))?,
                key: format!("http.header_files.{name}"),
                path: path.into(),
                prefix: "",
            });
        }
        let mut headers = fixed.clone();
        let mut stamps = Vec::with_capacity(files.len());
        for f in &files {
            let value = read(f).map_err(|(why, source)| ForwardError::SecretFile {
                key: f.key.clone(),
                path: f.path.display().to_string(),
                why,
                source,
            })?;
            headers.insert(f.name.clone(), value);
            stamps.push(stamp(f));
        }
        Ok(Credentials {
            files,
            cached: Mutex::new(Cached {
                headers,
                checked: Instant::now(),
                stamps,
            }),
            fixed,
        })
    }

    /// The headers to send now: the files are read again when they changed.
    pub fn headers(&self) -> HeaderMap {
        // A poisoned lock means a panic elsewhere while reading files; the cached
        // headers are still whole (they are replaced, never edited in place).
        let mut cached = match self.cached.lock() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        };
        if self.files.is_empty() || cached.checked.elapsed() < CHECK_EVERY {
            return cached.headers.clone();
        }
        cached.checked = Instant::now();
        let now: Vec<Stamp> = self.files.iter().map(stamp).collect();
        if now == cached.stamps {
            return cached.headers.clone();
        }
        let mut headers = self.fixed.clone();
        for f in &self.files {
            match read(f) {
                Ok(v) => {
                    headers.insert(f.name.clone(), v);
                }
                Err((why, _)) => {
                    // Read again when it changes (reappears) next.
                    tracing::warn!(key = %f.key, path = %f.path.display(), why, "a secret file cannot be read again: its last value stays in use");
                    if let Some(old) = cached.headers.get(&f.name) {
                        headers.insert(f.name.clone(), old.clone());
                    }
                }
            }
        }
        tracing::info!("a secret file changed: its value is read again");
        cached.stamps = now;
        cached.headers = headers.clone();
        headers
    }
}

/// A file's modification time and size (`None`: cannot be seen).
fn stamp(f: &FileHeader) -> Stamp {
    let m = std::fs::metadata(&f.path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// The header value a file holds (trimmed, marked sensitive).
fn read(f: &FileHeader) -> Result<HeaderValue, (&'static str, Option<std::io::Error>)> {
    let text = std::fs::read_to_string(&f.path).map_err(|e| ("cannot read it", Some(e)))?;
    let text = text.trim();
    if text.is_empty() {
        return Err(("it is empty", None));
    }
    let mut v = HeaderValue::from_str(&format!("{}{text}", f.prefix))
        .map_err(|_| ("its content is not a valid header value", None))?;
    v.set_sensitive(true);
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_read_at_start_and_again_when_they_change() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        let key = dir.path().join("key");
        std::fs::write(&token, "v1\n").unwrap();
        std::fs::write(&key, "k1").unwrap();
        let fixed = BTreeMap::from([("X-Source".to_string(), "jetrelay".to_string())]);
        let files = BTreeMap::from([("X-Api-Key".to_string(), key.display().to_string())]);
        let c = Credentials::load(&fixed, token.to_str().unwrap(), &files).unwrap();
        let h = c.headers();
        assert_eq!(h["authorization"], "Bearer v1");
        assert!(h["authorization"].is_sensitive());
        assert_eq!(h["x-api-key"], "k1");
        assert_eq!(h["x-source"], "jetrelay");

        std::fs::write(&token, "v2-longer\n").unwrap();
        c.cached.lock().unwrap().checked -= CHECK_EVERY;
        assert_eq!(c.headers()["authorization"], "Bearer v2-longer");
        // Gone (mid-rotation): the last value stays.
        std::fs::remove_file(&key).unwrap();
        c.cached.lock().unwrap().checked -= CHECK_EVERY;
        assert_eq!(c.headers()["x-api-key"], "k1");
    }

    #[test]
    fn a_missing_or_empty_file_at_start_names_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "\n").unwrap();
        let none = BTreeMap::new();
        let err = Credentials::load(&none, "/nonexistent/token", &none).unwrap_err();
        assert!(err.to_string().contains("http.bearer_token_file"), "{err}");
        let files = BTreeMap::from([("X-Key".to_string(), empty.display().to_string())]);
        let err = Credentials::load(&none, "", &files).unwrap_err();
        assert!(err.to_string().contains("http.header_files.X-Key"), "{err}");
        assert!(err.to_string().contains("empty"), "{err}");
    }
}
