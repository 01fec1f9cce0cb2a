//! Connecting: the [`Connection`] the wiring parsed from `[nats]`, secrets read from
//! their files, and the connection state published on a `watch` (with why the client
//! is not connected, when it is not).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_nats::{ClientError, ConnectOptions, Event, ServerAddr};
use tokio::sync::watch;

use super::NatsError;

/// What a connection takes: `[nats]`, parsed by `crate::daemon::settings`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection {
    /// The servers' URLs (checked by the config; credentials are never in them).
    pub servers: Vec<String>,
    /// The connection name the server shows.
    pub name: String,
    /// How the client authenticates.
    pub auth: Auth,
    /// TLS to the servers.
    pub tls: Tls,
    /// How long one connection attempt may take.
    pub connect_timeout: Duration,
    /// How long a request may take (and a send wait for room in the buffer).
    pub request_timeout: Duration,
    /// The first reconnect delay; it doubles up to `reconnect_delay_max`.
    pub reconnect_delay: Duration,
    /// The longest reconnect delay.
    pub reconnect_delay_max: Duration,
    /// Reconnect attempts before giving up; `None`: forever.
    pub max_reconnects: Option<usize>,
}

/// How the client authenticates (each secret a file, read when connecting).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    /// No credentials.
    None,
    /// A `.creds` file (JWT and NKey seed).
    Creds(String),
    /// A file holding an NKey seed.
    NkeySeed(String),
    /// A file holding a token.
    Token(String),
    /// A user, and the file holding its password.
    UserPassword {
        /// The user.
        user: String,
        /// The password's file.
        password_file: String,
    },
}

/// TLS to the servers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tls {
    /// The CA bundle that verifies the server.
    pub ca_file: Option<String>,
    /// The client certificate and its key (mutual TLS).
    pub client: Option<(String, String)>,
    /// Refuse a connection that is not TLS.
    pub required: bool,
    /// The handshake before the server's INFO.
    pub first: bool,
}

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
    pub async fn connect(cfg: &Connection, retry_initial: bool) -> Result<Nats, NatsError> {
        let (tx, rx) = watch::channel(ConnState::default());
        let tx = Arc::new(tx);
        let link = Link::default();
        let mut opts = auth(ConnectOptions::new(), &cfg.auth).await?;
        let (first, max) = (cfg.reconnect_delay, cfg.reconnect_delay_max);
        let events = Arc::clone(&tx);
        let events_link = link.clone();
        opts = opts
            .name(&cfg.name)
            .connection_timeout(cfg.connect_timeout)
            .request_timeout(Some(cfg.request_timeout))
            .max_reconnects(cfg.max_reconnects)
            .reconnect_delay_callback(move |attempts| {
                crate::policy::reconnect_delay(first, max, attempts)
            })
            .event_callback(move |event| {
                let (tx, link) = (Arc::clone(&events), events_link.clone());
                async move { on_event(event, &tx, &link) }
            });
        check_tls_files(&cfg.tls)?;
        opts = with_tls(opts, &cfg.tls);
        if retry_initial {
            opts = opts.retry_on_initial_connect();
        }
        let addrs = server_addrs(cfg)?;
        let client = opts
            .connect(addrs)
            .await
            .map_err(|source| NatsError::Connect {
                servers: cfg.servers.join(", "),
                source,
            })?;
        // Events can be dropped (the client sends them with try_send), so the state is
        // also reconciled with the client's own view once a second.
        tokio::spawn(reconcile(client.clone(), tx, link.clone()));
        let js = async_nats::jetstream::new(client.clone());
        Ok(Nats {
            client,
            js,
            state: rx,
            link,
            patience: cfg.request_timeout,
            batches: Arc::new(tokio::sync::Semaphore::new(
                crate::outputs::SERVER_BATCHES_IN_FLIGHT,
            )),
        })
    }

    /// What [`Nats::connect`] reads before it connects, without connecting: the
    /// credentials' files, the TLS files and the server addresses (`check --offline`).
    ///
    /// # Errors
    /// The [`NatsError`] that `connect` would fail with first.
    pub async fn check_offline(cfg: &Connection) -> Result<(), NatsError> {
        auth(ConnectOptions::new(), &cfg.auth).await?;
        check_tls_files(&cfg.tls)?;
        server_addrs(cfg)?;
        Ok(())
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

/// Follows one client event into the connection state.
fn on_event(event: Event, tx: &watch::Sender<ConnState>, link: &Link) {
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
        // A failed (re)connect attempt: the client's text names the kind
        // ("authorization violation", "IO error", "TLS error").
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

/// The TLS options.
fn with_tls(mut opts: ConnectOptions, tls: &Tls) -> ConnectOptions {
    if tls.required {
        opts = opts.require_tls(true);
    }
    if tls.first {
        opts = opts.tls_first();
    }
    if let Some(ca) = &tls.ca_file {
        opts = opts.add_root_certificates(PathBuf::from(ca));
    }
    if let Some((cert, key)) = &tls.client {
        opts = opts.add_client_certificate(PathBuf::from(cert), PathBuf::from(key));
    }
    opts
}

/// The TLS files, read and parsed before anything connects: a missing or broken one is
/// a configuration error naming its key, not a connection that retries forever.
fn check_tls_files(tls: &Tls) -> Result<(), NatsError> {
    use crate::tls::Pem;
    let (cert, key) = match &tls.client {
        Some((c, k)) => (Some(c), Some(k)),
        None => (None, None),
    };
    let files = [
        ("tls_ca_file", tls.ca_file.as_ref(), Pem::Certificates),
        ("tls_cert_file", cert, Pem::Certificates),
        ("tls_key_file", key, Pem::PrivateKey),
    ];
    for (key, path, kind) in files {
        if let Some(path) = path {
            crate::tls::read(path, kind).map_err(|source| NatsError::TlsFile {
                key,
                path: path.clone(),
                source,
            })?;
        }
    }
    Ok(())
}

/// The configured servers as addresses the client takes.
fn server_addrs(cfg: &Connection) -> Result<Vec<ServerAddr>, NatsError> {
    cfg.servers
        .iter()
        .map(|s| {
            s.parse::<ServerAddr>()
                .map_err(|_| NatsError::ServerAddress(s.clone()))
        })
        .collect()
}

async fn auth(opts: ConnectOptions, auth: &Auth) -> Result<ConnectOptions, NatsError> {
    let read = |key: &'static str, path: &str| {
        std::fs::read_to_string(path)
            .map(|s| s.trim().to_string())
            .map_err(|source| NatsError::Secret {
                key,
                path: path.to_string(),
                source,
            })
    };
    Ok(match auth {
        Auth::Creds(path) => {
            opts.credentials_file(path)
                .await
                .map_err(|source| NatsError::Secret {
                    key: "creds_file",
                    path: path.clone(),
                    source,
                })?
        }
        Auth::NkeySeed(path) => opts.nkey(read("nkey_seed_file", path)?),
        Auth::Token(path) => opts.token(read("token_file", path)?),
        Auth::UserPassword {
            user,
            password_file,
        } => opts.user_and_password(user.clone(), read("password_file", password_file)?),
        Auth::None => opts,
    })
}
