//! `run --watch`: the config file and every file it names (secrets, TLS files,
//! header files) are looked at every second, by what they hold; a change, once it
//! has held still for one look, is reloaded as SIGHUP is. Reading through the path
//! follows a Kubernetes ConfigMap or Secret mounted as a directory, whose files the
//! kubelet swaps at once by renaming a symlink (`..data`): the next look reads the
//! new files, all of them. A file that cannot be read counts as its own state
//! (missing), so its coming back is a change too.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::daemon::reload::Reloader;

/// How often the files are looked at.
pub const EVERY: Duration = Duration::from_secs(1);

/// The most of a file that is read to tell whether it changed (a config or a secret
/// is far smaller; past it, the size and modification time say).
const READ_AT_MOST: u64 = 1 << 20;

/// What each watched file holds now: its digest, or why it has none.
pub type Looks = BTreeMap<PathBuf, String>;

/// The files `config` (read from `file`) names: `file` itself, then every secret,
/// TLS and header file of the process and of each source.
pub fn named(file: &Path, config: &Config) -> Vec<PathBuf> {
    let mut files = vec![file.to_path_buf()];
    let n = &config.nats;
    let mut push = |p: &str| {
        if !p.is_empty() {
            files.push(PathBuf::from(p));
        }
    };
    for p in [
        &n.creds_file,
        &n.nkey_seed_file,
        &n.token_file,
        &n.password_file,
        &n.tls_ca_file,
        &n.tls_cert_file,
        &n.tls_key_file,
        &config.admin.token_file,
        &config.publish.token_file,
    ] {
        push(p);
    }
    config.otel.header_files.values().for_each(|p| push(p));
    for view in config.source_views().unwrap_or_default() {
        let h = &view.config.http;
        for p in [
            &h.bearer_token_file,
            &h.tls_ca_file,
            &h.proxy_credentials_file,
            &h.tls_cert_file,
            &h.tls_key_file,
            &h.signing.secret_file,
            &h.signing.previous_secret_file,
            &h.oauth2.client_secret_file,
        ] {
            push(p);
        }
        h.header_files.values().for_each(|p| push(p));
    }
    files.sort();
    files.dedup();
    files
}

/// What `paths` hold now.
pub fn look(paths: &[PathBuf]) -> Looks {
    paths.iter().map(|p| (p.clone(), state(p))).collect()
}

/// One file's state: the digest of what it holds (through every symlink), its size
/// and time when it is large, or why it cannot be read.
fn state(path: &Path) -> String {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) => return format!("unreadable: {}", e.kind()),
    };
    if meta.len() > READ_AT_MOST {
        let at = meta
            .modified()
            .ok()
            .map(|t| format!("{t:?}"))
            .unwrap_or_default();
        return format!("large: {} bytes, modified {at}", meta.len());
    }
    match std::fs::read(path) {
        Ok(bytes) => crate::digest::hex(&crate::digest::sha256(&[&bytes])),
        Err(e) => format!("unreadable: {}", e.kind()),
    }
}

/// What the watch does after a look, given the looks before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Nothing changed since the reload (or the start).
    Nothing,
    /// It changed: wait one look more for it to hold still.
    Settling,
    /// It changed and held still: reload.
    Reload,
}

/// The decision after looking: `applied` is what the last reload (or the start)
/// saw, `last` the look before this one, `now` this one. Pure.
pub fn next(applied: &Looks, last: &Looks, now: &Looks) -> Next {
    if now == applied {
        Next::Nothing
    } else if now == last {
        Next::Reload
    } else {
        Next::Settling
    }
}

/// Watches `file` (and what the config it holds names) until `stop`, asking
/// `reloader` to reload on every change that held still.
pub async fn watch(file: PathBuf, config: &Config, reloader: Reloader, stop: CancellationToken) {
    let mut paths = named(&file, config);
    let mut applied = look(&paths);
    let mut last = applied.clone();
    tracing::info!(
        files = paths.len(),
        "watching the config and the files it names"
    );
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(EVERY) => {}
        }
        let now = look(&paths);
        match next(&applied, &last, &now) {
            Next::Nothing | Next::Settling => last = now,
            Next::Reload => {
                let changed: Vec<String> = (now.iter())
                    .filter(|(p, s)| applied.get(*p) != Some(*s))
                    .map(|(p, _)| p.display().to_string())
                    .collect();
                tracing::info!(
                    changed = %crate::printable::list(&changed, 8),
                    "a watched file changed: reading the config again"
                );
                let loaded = Config::load(Some(&file));
                if let Ok(c) = &loaded {
                    // The new config may name other files: they are watched from now.
                    paths = named(&file, c);
                }
                reloader.request(loaded);
                applied = look(&paths);
                last = applied.clone();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn looks(states: &[(&str, &str)]) -> Looks {
        states
            .iter()
            .map(|(p, s)| (PathBuf::from(p), s.to_string()))
            .collect()
    }

    #[test]
    fn a_change_reloads_once_it_held_still_for_a_look() {
        let a = looks(&[("c.toml", "1")]);
        let b = looks(&[("c.toml", "2")]);
        let c = looks(&[("c.toml", "3")]);
        assert_eq!(next(&a, &a, &a), Next::Nothing);
        assert_eq!(next(&a, &a, &b), Next::Settling, "seen once");
        assert_eq!(next(&a, &b, &b), Next::Reload, "held still");
        assert_eq!(next(&a, &b, &c), Next::Settling, "still moving");
        assert_eq!(next(&a, &b, &a), Next::Nothing, "back as it was");
    }

    #[test]
    fn a_symlink_swap_is_seen_through_the_path_and_a_missing_file_is_a_state() {
        let dir = tempfile::tempdir().unwrap();
        let (one, two) = (dir.path().join("..2026_1"), dir.path().join("..2026_2"));
        for (d, text) in [(&one, "a = 1"), (&two, "a = 2")] {
            std::fs::create_dir(d).unwrap();
            std::fs::write(d.join("c.toml"), text).unwrap();
        }
        let data = dir.path().join("..data");
        std::os::unix::fs::symlink(&one, &data).unwrap();
        let file = dir.path().join("c.toml");
        std::os::unix::fs::symlink("..data/c.toml", &file).unwrap();
        let before = look(std::slice::from_ref(&file));
        // The kubelet's swap: a new link renamed over `..data`.
        let tmp = dir.path().join("..data_tmp");
        std::os::unix::fs::symlink(&two, &tmp).unwrap();
        std::fs::rename(&tmp, &data).unwrap();
        let after = look(std::slice::from_ref(&file));
        assert_ne!(before, after);
        std::fs::remove_file(&data).unwrap();
        let gone = look(std::slice::from_ref(&file));
        assert!(gone[&file].starts_with("unreadable"), "{gone:?}");
    }

    /// Every key docs/reference.md documents that names a file (`*_file`, and the
    /// maps `*_files`) is watched, set at the top level and, for `http.*`, in a
    /// source's table: a new key of a file fails here until [`named`] looks at it
    /// (and, when it needs other keys to be valid, [`with_what_it_needs`] sets them).
    #[test]
    fn every_file_key_of_the_reference_is_watched() {
        let reference = include_str!("../../docs/reference.md");
        let keys: std::collections::BTreeSet<&str> = reference
            .lines()
            .filter_map(|l| l.strip_prefix("| `")?.split('`').next())
            .filter(|k| k.ends_with("_file") || k.ends_with("_files"))
            .collect();
        assert!(keys.len() >= 19, "{keys:?}");
        for key in keys {
            let value = |dir: &str| {
                if key.ends_with("_files") {
                    format!("{{ X = \"{dir}{key}\" }}")
                } else {
                    format!("\"{dir}{key}\"")
                }
            };
            // Source a sets its own of an `http.*` key, b inherits the top level's.
            let mut text = format!("{key} = {}\n", value("/w/"));
            if key.starts_with("http.") {
                text.push_str(&format!("sources.a.{key} = {}\n", value("/w/a/")));
            }
            let text = with_what_it_needs(key, &text);
            let c = Config::from_toml(&[&text]).unwrap_or_else(|e| panic!("{key}: {e}\n{text}"));
            let files = named(Path::new("/c.toml"), &c);
            assert!(
                files.contains(&PathBuf::from(format!("/w/{key}"))),
                "{key} not watched: {files:?}"
            );
            assert!(
                !key.starts_with("http.") || files.contains(&PathBuf::from(format!("/w/a/{key}"))),
                "sources.a.{key} not watched: {files:?}"
            );
        }
    }

    /// `text` (dotted keys setting `key`), with two durable sources and what `key`
    /// needs beside it to make a config that loads.
    fn with_what_it_needs(key: &str, text: &str) -> String {
        let needs = match key {
            "http.tls_cert_file" | "http.tls_key_file" => {
                "http.url = \"https://app/x\"\nhttp.tls_cert_file = \"/c\"\nhttp.tls_key_file = \"/k\"\n"
            }
            "http.proxy_credentials_file" => "http.proxy = \"http://proxy:3128\"\n",
            "http.signing.previous_secret_file" => "http.signing.secret_file = \"/s\"\n",
            "http.oauth2.client_secret_file" => {
                "http.oauth2.token_url = \"https://idp/token\"\nhttp.oauth2.client_id = \"c\"\n"
            }
            "nats.tls_cert_file" | "nats.tls_key_file" => {
                "nats.tls_cert_file = \"/c\"\nnats.tls_key_file = \"/k\"\n"
            }
            "nats.password_file" => "nats.user = \"u\"\n",
            "publish.token_file" => {
                "publish.listen = \"127.0.0.1:9091\"\npublish.allowed_subjects = [\"o.>\"]\n"
            }
            _ => "",
        };
        // The key's own line wins over what `needs` sets of it: TOML takes a key once.
        let needs: String = needs
            .lines()
            .filter(|l| !l.starts_with(&format!("{key} ")))
            .map(|l| format!("{l}\n"))
            .collect();
        let url = if needs.contains("http.url") {
            ""
        } else {
            "http.url = \"http://app/x\"\n"
        };
        format!(
            "{url}{needs}{text}\
             sources.a.stream = \"A\"\nsources.a.kind = \"durable\"\nsources.a.durable = \"a\"\n\
             sources.b.stream = \"B\"\nsources.b.kind = \"durable\"\nsources.b.durable = \"b\"\n"
        )
    }

    #[test]
    fn every_file_the_config_names_is_watched() {
        use crate::config::testing::durable;
        let c = Config::from_toml(&[
            r#"
            [nats]
            token_file = "/s/nats-token"
            [admin]
            token_file = "/s/admin"
            [otel]
            header_files = { Authorization = "/s/otel" }
            [http]
            url = "http://127.0.0.1:1/x"
            tls_ca_file = "/s/ca.pem"
        "#,
            &durable(
                "a",
                "[sources.a.http]\nbearer_token_file = \"/s/a-token\"\n",
            ),
            &durable("b", ""),
        ])
        .unwrap();
        let files = named(Path::new("/etc/jetrelay/c.toml"), &c);
        let shown: Vec<&str> = files.iter().filter_map(|p| p.to_str()).collect();
        assert_eq!(
            shown,
            [
                "/etc/jetrelay/c.toml",
                "/s/a-token",
                "/s/admin",
                "/s/ca.pem",
                "/s/nats-token",
                "/s/otel"
            ]
        );
    }
}
