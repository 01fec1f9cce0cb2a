//! Connecting: options from `[nats]`, secrets read from their files, and the
//! connection state published on a `watch` (with why the client is not connected,
//! when it is not).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_nats::{ClientError, ConnectOptions, Event, ServerAddr};
use tokio::sync::watch;

use super::NatsError;
use crate::config::NatsConfig;

/// The connection as the rest of the daemon sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnState {
    /// Whether the client is connected now.
    pub connected: bool,
    /// Bumped on every (re)connect: pulls issued before it are gone with the old
    /// connection and must be sent again.
    pub generation: u64,
    /// Why the last connection attempt failed (e.g. "authorization violation"),
    /// cleared by a successful connect.
    pub last_error: Option<String>,
    /// The client gave up (`nats.max_reconnects` reached): it never connects again.
    pub closed: bool,
}

impl ConnState {
    /// Why the daemon is not connected, for readiness; `None` when connected.
    pub fn reason(&self) -> Option<String> {
        if self.connected {
            return None;
        }
        let why = self.last_error.as_deref();
        Some(match (self.closed, self.generation, why) {
            (true, _, _) => {
                "NATS connection closed: nats.max_reconnects reached, not reconnecting".into()
            }
            (false, 0, None) => "connecting to NATS".into(),
            (false, 0, Some(e)) => format!("cannot connect to NATS: {e}"),
            (false, _, None) => "NATS connection lost".into(),
            (false, _, Some(e)) => format!("NATS connection lost (reconnecting: {e})"),
        })
    }
}

/// A connected client, its JetStream context and the connection state.
#[derive(Debug, Clone)]
pub struct Nats {
    pub(super) client: async_nats::Client,
    pub(super) js: async_nats::jetstream::Context,
    state: watch::Receiver<ConnState>,
    /// `state.connected` without a lock, for the per-message settle path.
    pub(super) link: Link,
    /// How long a send may wait for room in the client's buffer while connected.
    pub(super) patience: Duration,
    /// Atomic batches this connection may have open at once: the server refuses one
    /// over its bound (`crate::outputs::SERVER_BATCHES_IN_FLIGHT` per stream), so
    /// more wait here instead of failing and being retried.
    pub(super) batches: Arc<tokio::sync::Semaphore>,
}

/// Whether the connection is up, shared with every [`super::Settler`].
#[derive(Debug, Clone, Default)]
pub(super) struct Link(Arc<AtomicBool>);

impl Link {
    pub(super) fn up(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    fn set(&self, up: bool) {
        self.0.store(up, Ordering::Relaxed);
    }
}

impl Nats {
    /// Connects; with `retry_initial`, returns at once and keeps trying in the
    /// background (the daemon stays up and not ready while NATS is down).
    ///
    /// # Errors
    /// [`NatsError`] for unreadable secrets, bad addresses, or (without
    /// `retry_initial`) a failed first connection.
    pub async fn connect(cfg: &NatsConfig, retry_initial: bool) -> Result<Nats, NatsError> {
        let (tx, rx) = watch::channel(ConnState::default());
        let tx = Arc::new(tx);
        let link = Link::default();
        let mut opts = auth(ConnectOptions::new(), cfg).await?;
        let (first, max) = (
            Duration::from_millis(cfg.reconnect_delay_ms),
            Duration::from_millis(cfg.reconnect_delay_max_ms),
        );
        let events = Arc::clone(&tx);
        let events_link = link.clone();
        opts = opts
            .name(&cfg.name)
            .connection_timeout(Duration::from_millis(cfg.connect_timeout_ms))
            .request_timeout(Some(Duration::from_millis(cfg.request_timeout_ms)))
            .max_reconnects((cfg.max_reconnects > 0).then_some(cfg.max_reconnects as usize))
            .reconnect_delay_callback(move |attempts| {
                crate::policy::reconnect_delay(first, max, attempts)
            })
            .event_callback(move |event| {
                let (tx, link) = (Arc::clone(&events), events_link.clone());
                async move {
                    match event {
                        Event::Connected => {
                            link.set(true);
                            tx.send_modify(|s| {
                                s.connected = true;
                                s.generation += 1;
                                s.last_error = None;
                            });
                        }
                        Event::Disconnected | Event::Closed => {
                            link.set(false);
                            tx.send_modify(|s| s.connected = false);
                        }
                        Event::ClientError(ClientError::MaxReconnects) => {
                            link.set(false);
                            tx.send_modify(|s| {
                                s.connected = false;
                                s.closed = true;
                            });
                        }
                        // A failed (re)connect attempt: the client's text names the
                        // kind ("authorization violation", "IO error", "TLS error").
                        Event::ClientError(ClientError::Other(why)) => {
                            tx.send_if_modified(|s| {
                                let changed = s.last_error.as_deref() != Some(why.as_str());
                                s.last_error = Some(why);
                                changed
                            });
                        }
                        Event::ServerError(e) => {
                            tracing::warn!(error = %e, "the NATS server reports an error");
                            tx.send_modify(|s| s.last_error = Some(e.to_string()));
                        }
                        Event::SlowConsumer(sid) => {
                            tracing::warn!(sid, "nats client reports a slow consumer");
                        }
                        other => tracing::debug!(event = %other, "nats event"),
                    }
                }
            });
        check_tls_files(cfg)?;
        if cfg.tls_required {
            opts = opts.require_tls(true);
        }
        if cfg.tls_first {
            opts = opts.tls_first();
        }
        if !cfg.tls_ca_file.is_empty() {
            opts = opts.add_root_certificates(PathBuf::from(&cfg.tls_ca_file));
        }
        if !cfg.tls_cert_file.is_empty() {
            opts = opts.add_client_certificate(
                PathBuf::from(&cfg.tls_cert_file),
                PathBuf::from(&cfg.tls_key_file),
            );
        }
        if retry_initial {
            opts = opts.retry_on_initial_connect();
        }
        let addrs = cfg
            .servers
            .iter()
            .map(|s| {
                s.parse::<ServerAddr>()
                    .map_err(|_| NatsError::ServerAddress(crate::config::redact(s)))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let client = opts.connect(addrs).await.map_err(NatsError::Connect)?;
        // Events can be dropped (the client sends them with try_send), so the state is
        // also reconciled with the client's own view once a second.
        tokio::spawn(reconcile(client.clone(), tx, link.clone()));
        let js = async_nats::jetstream::new(client.clone());
        Ok(Nats {
            client,
            js,
            state: rx,
            link,
            patience: Duration::from_millis(cfg.request_timeout_ms),
            batches: Arc::new(tokio::sync::Semaphore::new(
                crate::outputs::SERVER_BATCHES_IN_FLIGHT,
            )),
        })
    }

    /// The connection state, kept current.
    pub fn state(&self) -> watch::Receiver<ConnState> {
        self.state.clone()
    }

    /// Checks the server version once connected (priority groups need 2.11).
    ///
    /// # Errors
    /// [`NatsError::ServerTooOld`].
    pub fn check_server_version(&self) -> Result<(), NatsError> {
        if self.client.is_server_compatible(2, 11, 0) {
            Ok(())
        } else {
            Err(NatsError::ServerTooOld(self.client.server_info().version))
        }
    }

    /// Flushes what is buffered (acks are fire-and-forget publishes). While the
    /// connection is down this waits for the reconnect: bound it.
    ///
    /// # Errors
    /// [`NatsError::Flush`].
    pub async fn flush(&self) -> Result<(), NatsError> {
        self.client.flush().await.map_err(NatsError::Flush)
    }
}

async fn reconcile(client: async_nats::Client, tx: Arc<watch::Sender<ConnState>>, link: Link) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if tx.is_closed() {
            return;
        }
        let connected = client.connection_state() == async_nats::connection::State::Connected;
        link.set(connected);
        tx.send_if_modified(|s| {
            if s.connected == connected {
                return false;
            }
            if connected {
                // A Connected event was dropped: count the reconnect here.
                s.generation += 1;
                s.last_error = None;
            }
            s.connected = connected;
            true
        });
    }
}

/// The TLS files, read and parsed before anything connects: a missing or broken one is
/// a configuration error naming its key, not a connection that retries forever.
fn check_tls_files(cfg: &NatsConfig) -> Result<(), NatsError> {
    use crate::tls::Pem;
    let files = [
        ("tls_ca_file", &cfg.tls_ca_file, Pem::Certificates),
        ("tls_cert_file", &cfg.tls_cert_file, Pem::Certificates),
        ("tls_key_file", &cfg.tls_key_file, Pem::PrivateKey),
    ];
    for (key, path, kind) in files {
        if !path.is_empty() {
            crate::tls::read(path, kind).map_err(|source| NatsError::TlsFile {
                key,
                path: path.clone(),
                source,
            })?;
        }
    }
    Ok(())
}

async fn auth(opts: ConnectOptions, cfg: &NatsConfig) -> Result<ConnectOptions, NatsError> {
    let read = |key: &'static str, path: &str| {
        std::fs::read_to_string(path)
            .map(|s| s.trim().to_string())
            .map_err(|source| NatsError::Secret {
                key,
                path: path.to_string(),
                source,
            })
    };
    Ok(if !cfg.creds_file.is_empty() {
        opts.credentials_file(&cfg.creds_file)
            .await
            .map_err(|source| NatsError::Secret {
                key: "creds_file",
                path: cfg.creds_file.clone(),
                source,
            })?
    } else if !cfg.nkey_seed_file.is_empty() {
        opts.nkey(read("nkey_seed_file", &cfg.nkey_seed_file)?)
    } else if !cfg.token_file.is_empty() {
        opts.token(read("token_file", &cfg.token_file)?)
    } else if !cfg.user.is_empty() {
        opts.user_and_password(cfg.user.clone(), read("password_file", &cfg.password_file)?)
    } else {
        opts
    })
}
