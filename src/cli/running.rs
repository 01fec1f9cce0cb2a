//! `jetrelay check --diff-running`: what a reload (SIGHUP) of this config would change
//! in the jetrelay that runs, read from its admin port (`/config`), key by key, and
//! whether the reload would be applied or refused; where a config's admin port is
//! (`admin_base`, which `jetrelay drain` asks too).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::cli::check::{CheckError, Report};
use crate::config::Config;
use crate::config::reload::{diff, flatten, salt_of};
use crate::secret::Salt;

/// The running config's URL: `url` when given, else the admin port of `config`
/// (`admin.listen`, a wildcard address asked on loopback).
pub fn url_for(config: &Config, url: Option<&str>) -> String {
    if let Some(u) = url.filter(|u| !u.is_empty()) {
        return u.to_string();
    }
    format!("{}/config", admin_base(config))
}

/// The admin port of `config` as a base URL (`http://host:port`): `admin.listen`, a
/// wildcard address asked on loopback.
pub fn admin_base(config: &Config) -> String {
    let listen = &config.admin.listen;
    let (host, port) = listen.rsplit_once(':').unwrap_or((listen.as_str(), "9090"));
    let host = match host {
        "" | "0.0.0.0" => "127.0.0.1",
        "[::]" => "[::1]",
        h => h,
    };
    format!("http://{host}:{port}")
}

/// Compares `config` with the running one at `url`.
///
/// # Errors
/// [`CheckError::Running`] when it cannot be read or is not a config.
pub async fn diff_running(config: &Config, url: &str) -> Result<Report, CheckError> {
    let text = crate::http::running::get_text(url).await?;
    let running: BTreeMap<String, Value> =
        serde_json::from_str(&text).map_err(|e| CheckError::NotAConfig(format!("{url}: {e}")))?;
    // The file's secrets fingerprinted as the running process fingerprints its own.
    let salt = salt_of(&running).unwrap_or_else(Salt::random);
    let changes = diff(&running, &flatten(config, salt));
    let mut lines = Vec::new();
    if changes.is_empty() {
        lines.push(format!(
            "running config at {url}: the same; a reload changes nothing"
        ));
        return Ok(Report { lines, ok: true });
    }
    lines.push(format!(
        "running config at {url}: {} key(s) differ",
        changes.len()
    ));
    for c in &changes {
        let how = if c.live {
            "live".to_string()
        } else {
            format!("NOT LIVE: {}", c.why_not_live())
        };
        lines.push(format!("  {}: {} -> {} ({how})", c.key, c.running, c.new));
    }
    let ok = changes.iter().all(|c| c.live);
    lines.push(if ok {
        "a reload (SIGHUP) would apply these".into()
    } else {
        "a reload (SIGHUP) would be refused, the running config kept: restart to change the keys not live".into()
    });
    Ok(Report { lines, ok })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_admin_url_table() {
        let c = |listen: &str| {
            let mut c = Config::default();
            c.admin.listen = listen.into();
            c
        };
        for (listen, want) in [
            ("0.0.0.0:9090", "http://127.0.0.1:9090/config"),
            ("127.0.0.1:9191", "http://127.0.0.1:9191/config"),
            ("[::]:9090", "http://[::1]:9090/config"),
            (":9090", "http://127.0.0.1:9090/config"),
        ] {
            assert_eq!(url_for(&c(listen), None), want, "{listen}");
        }
        assert_eq!(
            url_for(&c("0.0.0.0:1"), Some("http://x:2/config")),
            "http://x:2/config"
        );
    }
}
