//! The built binary as a user runs it: a config file, `jetrelay run`, signals, its
//! JSON log lines on stderr and its admin endpoints.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::Instant;

pub const BIN: &str = env!("CARGO_BIN_EXE_jetrelay");

/// `jetrelay <args>` run to its end, without `JETRELAY_CONFIG` from the test's
/// environment: exit code, stdout, stderr.
pub async fn run_bin<I, A>(args: I) -> (Option<i32>, String, String)
where
    I: IntoIterator<Item = A>,
    A: AsRef<std::ffi::OsStr>,
{
    let out = Command::new(BIN)
        .args(args)
        .env_remove("JETRELAY_CONFIG")
        .output()
        .await
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub struct Daemon {
    child: Child,
    pub admin: String,
    lines: Arc<Mutex<Vec<serde_json::Value>>>,
    _dir: tempfile::TempDir,
}

impl Daemon {
    /// Writes `config` to a file and runs `jetrelay run --config` on it; waits until
    /// the admin address is logged.
    pub async fn start(config: &str) -> Daemon {
        Self::start_with_env(config, &[]).await
    }

    /// [`Daemon::start`] with extra environment variables.
    pub async fn start_with_env(config: &str, env: &[(&str, &str)]) -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jetrelay.toml");
        std::fs::write(&path, config).unwrap();
        Self::spawn(dir, &path, &[], env).await
    }

    /// `jetrelay run --config <path> --watch`, `path` in `dir` (kept while it runs).
    pub async fn start_watching(dir: tempfile::TempDir, path: &std::path::Path) -> Daemon {
        Self::spawn(dir, path, &["--watch"], &[]).await
    }

    async fn spawn(
        dir: tempfile::TempDir,
        path: &std::path::Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Daemon {
        let mut child = Command::new(BIN)
            .arg("run")
            .arg("--config")
            .arg(path)
            .args(args)
            .env_remove("JETRELAY_CONFIG")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let mut reader = BufReader::new(child.stderr.take().unwrap()).lines();
        let sink = lines.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = reader.next_line().await {
                let v = serde_json::from_str(&line)
                    .unwrap_or_else(|_| serde_json::json!({ "raw": line }));
                sink.lock().unwrap().push(v);
            }
        });
        let mut d = Daemon {
            child,
            admin: String::new(),
            lines,
            _dir: dir,
        };
        let line = d
            .wait_line("the start line", Duration::from_secs(20), |l| {
                l["message"] == "jetrelay starting"
            })
            .await;
        // Logged as `Some(127.0.0.1:port)`.
        let admin = line["admin"].as_str().unwrap();
        d.admin = admin
            .trim_start_matches("Some(")
            .trim_end_matches(')')
            .to_string();
        d
    }

    /// The config file it runs (rewrite it, then SIGHUP: a reload).
    pub fn config_path(&self) -> std::path::PathBuf {
        self._dir.path().join("jetrelay.toml")
    }

    /// Whether the process still runs.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn lines(&self) -> Vec<serde_json::Value> {
        self.lines.lock().unwrap().clone()
    }

    /// Waits for a log line matching `what`.
    pub async fn wait_line(
        &self,
        what: &str,
        timeout: Duration,
        matches: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(l) = self.lines().into_iter().find(&matches) {
                return l;
            }
            assert!(
                Instant::now() < deadline,
                "no log line for {what} in {timeout:?}:\n{:#?}",
                self.lines()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `/ready`: the status code and the JSON body.
    pub async fn ready(&self) -> (u16, serde_json::Value) {
        let resp = super::http()
            .get(format!("http://{}/ready", self.admin))
            .send()
            .await
            .unwrap();
        let code = resp.status().as_u16();
        (
            code,
            serde_json::from_str(&resp.text().await.unwrap()).unwrap(),
        )
    }

    /// Waits until `/ready`'s body matches.
    pub async fn wait_ready_body(
        &self,
        what: &str,
        timeout: Duration,
        matches: impl Fn(u16, &serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + timeout;
        loop {
            let (code, body) = self.ready().await;
            if matches(code, &body) {
                return body;
            }
            assert!(
                Instant::now() < deadline,
                "/ready never showed {what} in {timeout:?}; last: {code} {body}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The peak resident memory of the process so far (`VmHWM`), in bytes.
    pub fn peak_rss(&self) -> u64 {
        self.status_bytes("VmHWM:")
    }

    /// The resident memory of the process now (`VmRSS`), in bytes.
    pub fn rss(&self) -> u64 {
        self.status_bytes("VmRSS:")
    }

    fn status_bytes(&self, field: &str) -> u64 {
        let pid = self.child.id().expect("running");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap();
        kb * 1024
    }

    /// Sends a signal by name (`TERM`, `INT`, `KILL`).
    pub fn signal(&self, name: &str) {
        let pid = self.child.id().expect("running");
        let ok = std::process::Command::new("kill")
            .args([format!("-{name}"), pid.to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{name} {pid}");
    }

    /// Waits for the exit; its code and how long it took.
    pub async fn wait_exit(&mut self, timeout: Duration) -> (Option<i32>, Duration) {
        let started = Instant::now();
        let status = tokio::time::timeout(timeout, self.child.wait())
            .await
            .unwrap_or_else(|_| {
                panic!("still running after {timeout:?}; log:\n{:#?}", self.lines())
            })
            .unwrap();
        (status.code(), started.elapsed())
    }
}
