//! A TCP proxy between a client and nats-server that passes everything, except the
//! client's `+ACK`s while told to drop them: acks lost on the way, as a flaky network
//! loses them, while the rest of the connection (pulls, publishes, PubAcks) goes on.
//! The soak (`bench/src/bin/soak.rs`) includes this file as well.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub(crate) struct AckDropper {
    url: String,
    dropping: Arc<AtomicBool>,
    dropped: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl AckDropper {
    /// Listens on loopback and forwards each connection to `upstream` (`nats://h:p`).
    pub(crate) async fn start(upstream: &str) -> std::io::Result<AckDropper> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("nats://{}", listener.local_addr()?);
        let upstream = upstream.trim_start_matches("nats://").to_string();
        let (dropping, dropped) = (Arc::new(AtomicBool::new(false)), Arc::default());
        let (d, n) = (Arc::clone(&dropping), Arc::clone(&dropped));
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                tokio::spawn(pipe(client, server, Arc::clone(&d), Arc::clone(&n)));
            }
        });
        Ok(AckDropper {
            url,
            dropping,
            dropped,
            task,
        })
    }

    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// From now on, drop (or pass) the client's `+ACK`s.
    pub(crate) fn drop_acks(&self, on: bool) {
        self.dropping.store(on, Ordering::SeqCst);
    }

    /// The acks dropped so far.
    pub(crate) fn dropped(&self) -> usize {
        self.dropped.load(Ordering::SeqCst)
    }
}

impl Drop for AckDropper {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn pipe(
    client: TcpStream,
    server: TcpStream,
    dropping: Arc<AtomicBool>,
    dropped: Arc<AtomicUsize>,
) {
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let down = tokio::spawn(async move {
        // The connection ends either way: how is of no interest to the tests.
        tokio::io::copy(&mut sr, &mut cw).await.ok();
    });
    let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut chunk = vec![0u8; 64 * 1024];
    'read: loop {
        let n = match cr.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        let mut out = Vec::with_capacity(buf.len());
        let mut at = 0;
        while let Some(end) = find_crlf(&buf[at..]) {
            let line = &buf[at..at + end];
            let op_end = at + end + 2;
            let (is_pub, fields) = op_fields(line);
            if !is_pub {
                out.extend_from_slice(&buf[at..op_end]);
                at = op_end;
                continue;
            }
            // PUB <subject> [reply] <size> / HPUB <subject> [reply] <hdr> <size>
            let size: usize = fields.last().and_then(|s| s.parse().ok()).unwrap_or(0);
            let whole = op_end + size + 2;
            if buf.len() < whole {
                break;
            }
            let subject = fields.get(1).copied().unwrap_or("");
            let payload = &buf[op_end..op_end + size];
            let ack = subject.starts_with("$JS.ACK.") && payload.starts_with(b"+ACK");
            if ack && dropping.load(Ordering::SeqCst) {
                dropped.fetch_add(1, Ordering::SeqCst);
            } else {
                out.extend_from_slice(&buf[at..whole]);
            }
            at = whole;
        }
        buf.drain(..at);
        if sw.write_all(&out).await.is_err() {
            break 'read;
        }
    }
    down.abort();
}

fn find_crlf(b: &[u8]) -> Option<usize> {
    b.windows(2).position(|w| w == b"\r\n")
}

/// Whether the line is a `PUB`/`HPUB`, and its fields.
fn op_fields(line: &[u8]) -> (bool, Vec<&str>) {
    let text = std::str::from_utf8(line).unwrap_or("");
    let fields: Vec<&str> = text.split_ascii_whitespace().collect();
    let op = fields.first().map(|f| f.to_ascii_uppercase());
    (matches!(op.as_deref(), Some("PUB" | "HPUB")), fields)
}
