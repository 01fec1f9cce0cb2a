//! The app's credentials: the static `http.headers`, `Authorization: Bearer <token>`
//! from `http.bearer_token_file` and secret header values from `http.header_files`.
//! Files are read at startup (a missing one is a config error) and read again when
//! they change (checked at most once a second), so a rotated token or key is used
//! without a restart; while a file cannot be read its last value stays in use. Sent on
//! every request to the app and on health probes.

use std::collections::BTreeMap;
use std::sync::PoisonError;
use std::sync::{Arc, Mutex};

use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};

use super::client::ClientError;
use crate::secret::SecretFile;

/// One header whose value lives in a file.
#[derive(Debug)]
struct FileHeader {
    name: HeaderName,
    secret: SecretFile,
    /// Put before the file's content (`Bearer `).
    prefix: &'static str,
}

/// The headers last built, and the file values they were built from (never in
/// `Debug`: the values are secrets).
struct Cached {
    /// Shared, so that each request takes a reference, not a copy.
    headers: Arc<HeaderMap>,
    values: Vec<Arc<str>>,
}

impl std::fmt::Debug for Cached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The headers' file values are marked sensitive: their Debug hides them.
        f.debug_struct("Cached")
            .field("headers", &self.headers)
            .finish_non_exhaustive()
    }
}

/// Where the app's credentials come from: `http.headers`, `http.bearer_token_file`,
/// `http.header_files`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CredentialFiles {
    /// Fixed headers, by name.
    pub headers: BTreeMap<String, String>,
    /// The file holding the bearer token.
    pub bearer_token_file: Option<String>,
    /// Header values from files, by header name.
    pub header_files: BTreeMap<String, String>,
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
    /// [`ClientError::Header`] for a name or value that is not valid HTTP,
    /// [`ClientError::SecretFile`] for a file that cannot be read.
    pub fn load(from: &CredentialFiles) -> Result<Credentials, ClientError> {
        let mut fixed = HeaderMap::new();
        for (name, value) in &from.headers {
            let n = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| ClientError::Header(name.clone()))?;
            let v = HeaderValue::from_str(value).map_err(|_| ClientError::Header(name.clone()))?;
            fixed.insert(n, v);
        }
        let mut files = Vec::new();
        if let Some(file) = &from.bearer_token_file {
            files.push(FileHeader {
                name: AUTHORIZATION,
                secret: SecretFile::load("http.bearer_token_file", file)?,
                prefix: "Bearer ",
            });
        }
        for (name, path) in &from.header_files {
            files.push(FileHeader {
                name: HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| ClientError::Header(name.clone()))?,
                secret: SecretFile::load(format!("http.header_files.{name}"), path)?,
                prefix: "",
            });
        }
        let values: Vec<Arc<str>> = files.iter().map(|f| f.secret.value()).collect();
        let built = build(&fixed, &files, &values, None)
            .map_err(|f| ClientError::Header(files[f].secret.key().to_string()))?;
        Ok(Credentials {
            files,
            cached: Mutex::new(Cached {
                headers: Arc::new(built),
                values,
            }),
            fixed,
        })
    }

    /// The headers to send now, as a map of the caller's own.
    pub fn headers(&self) -> HeaderMap {
        (*self.shared()).clone()
    }

    /// The headers to send now, shared (a request's hot path: no copy, no
    /// allocation): the files are read again when they changed.
    pub fn shared(&self) -> Arc<HeaderMap> {
        // A poisoned lock means a panic elsewhere while building; the cached headers
        // are still whole (they are replaced, never edited in place).
        let mut cached = self.cached.lock().unwrap_or_else(PoisonError::into_inner);
        let values: Vec<Arc<str>> = self.files.iter().map(|f| f.secret.value()).collect();
        if crate::secret::unchanged(&values, &cached.values) {
            return Arc::clone(&cached.headers);
        }
        match build(&self.fixed, &self.files, &values, Some(&cached.headers)) {
            Ok(headers) => {
                cached.headers = Arc::new(headers);
                cached.values = values;
            }
            Err(f) => tracing::warn!(
                key = %self.files[f].secret.key(),
                "a secret file's new content is not a valid header value: its last value stays in use"
            ),
        }
        Arc::clone(&cached.headers)
    }
}

/// The headers from the fixed ones and the files' values (marked sensitive); `Err`
/// is the index of a file whose value is not a valid header value. With `last`, such
/// a file keeps its value in it.
fn build(
    fixed: &HeaderMap,
    files: &[FileHeader],
    values: &[Arc<str>],
    last: Option<&HeaderMap>,
) -> Result<HeaderMap, usize> {
    let mut headers = fixed.clone();
    for (i, (f, v)) in files.iter().zip(values).enumerate() {
        match HeaderValue::from_str(&format!("{}{v}", f.prefix)) {
            Ok(mut value) => {
                value.set_sensitive(true);
                headers.insert(f.name.clone(), value);
            }
            Err(_) => match last.and_then(|l| l.get(&f.name)) {
                Some(old) => {
                    headers.insert(f.name.clone(), old.clone());
                }
                None => return Err(i),
            },
        }
    }
    Ok(headers)
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
        let c = Credentials::load(&CredentialFiles {
            headers: fixed,
            bearer_token_file: Some(token.display().to_string()),
            header_files: files,
        })
        .unwrap();
        let h = c.headers();
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("\"v1\"") && !shown.contains("\"k1\""),
            "{shown}"
        );
        assert_eq!(h["authorization"], "Bearer v1");
        assert!(h["authorization"].is_sensitive());
        assert_eq!(h["x-api-key"], "k1");
        assert_eq!(h["x-source"], "jetrelay");

        std::fs::write(&token, "v2-longer\n").unwrap();
        c.files.iter().for_each(|f| f.secret.expire());
        assert_eq!(c.headers()["authorization"], "Bearer v2-longer");
        // Gone (mid-rotation): the last value stays.
        std::fs::remove_file(&key).unwrap();
        c.files.iter().for_each(|f| f.secret.expire());
        assert_eq!(c.headers()["x-api-key"], "k1");
    }

    #[test]
    fn a_missing_or_empty_file_at_start_names_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "\n").unwrap();
        let err = Credentials::load(&CredentialFiles {
            bearer_token_file: Some("/nonexistent/token".into()),
            ..CredentialFiles::default()
        })
        .unwrap_err();
        assert!(err.to_string().contains("http.bearer_token_file"), "{err}");
        let files = BTreeMap::from([("X-Key".to_string(), empty.display().to_string())]);
        let err = Credentials::load(&CredentialFiles {
            header_files: files,
            ..CredentialFiles::default()
        })
        .unwrap_err();
        assert!(err.to_string().contains("http.header_files.X-Key"), "{err}");
        assert!(err.to_string().contains("empty"), "{err}");
    }
}
