//! The Python interop peer (`tests/interop/peer.py` on natsio-pcgroups), run from the
//! tools venv that `scripts/setup` makes.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The tools venv's Python (`INTEROP_PYTHON` overrides).
pub fn python() -> PathBuf {
    if let Ok(p) = std::env::var("INTEROP_PYTHON") {
        return PathBuf::from(p);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".tools/venv/bin/python")
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/interop/peer.py")
}

/// Runs one peer command and returns its last output line.
pub async fn peer(url: &str, args: &[&str]) -> String {
    let out = Command::new(python())
        .arg(script())
        .arg(url)
        .args(args)
        .output()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "cannot run the Python peer ({}): {e}; run scripts/setup",
                python().display()
            )
        });
    assert!(
        out.status.success(),
        "peer {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string()
}

/// A Python member instance consuming; collects what its handler saw.
pub struct PeerMember {
    child: Child,
    pub seen: Arc<Mutex<Vec<serde_json::Value>>>,
}

impl PeerMember {
    /// Starts `consume` and waits until it has joined.
    pub async fn start(url: &str, args: &[&str]) -> PeerMember {
        let mut child = Command::new(python())
            .arg(script())
            .arg(url)
            .arg("consume")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("the Python peer starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let ready = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("the Python member joins")
            .unwrap();
        assert_eq!(ready.as_deref(), Some("ready"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Ok(v) = serde_json::from_str(&line) {
                    sink.lock().unwrap().push(v);
                }
            }
        });
        PeerMember { child, seen }
    }

    pub fn bodies(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|v| v["body"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// SIGKILL: no cleanup, like a crashed pod.
    pub async fn kill(mut self) {
        self.child.kill().await.ok();
    }
}

/// A Python handler from the docs (a page of `docs/`), run as written there, on a free
/// loopback port.
pub struct ReadmeApp {
    _child: Child,
    _dir: tempfile::TempDir,
    pub port: u16,
}

impl ReadmeApp {
    /// Runs the first Python block after the heading `section` of `page` (a path from
    /// the repository's root) and waits until it listens.
    pub async fn start(page: &str, section: &str) -> ReadmeApp {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(page);
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let after = text
            .split_once(section)
            .unwrap_or_else(|| panic!("{page} has no {section:?}"))
            .1;
        let code = after
            .split_once("```python\n")
            .expect("with a Python handler")
            .1
            .split_once("```")
            .unwrap()
            .0;
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("app.py");
        std::fs::write(&script, code).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(python())
            .arg(&script)
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("python from the tools venv (scripts/setup)");
        super::eventually("the handler listens", Duration::from_secs(20), || async {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
        })
        .await;
        ReadmeApp {
            _child: child,
            _dir: dir,
            port,
        }
    }
}
