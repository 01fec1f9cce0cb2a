//! The command-line tools besides the daemon: `jetrelay check` (the topology plan,
//! changing nothing), `jetrelay group …` (consumer-group administration) and
//! `jetrelay dlq …` (dead letters: browse, replay, purge), `jetrelay pause` and
//! `jetrelay resume` (the consumer paused on the server), `jetrelay replay` (the
//! consumer moved back in place), `jetrelay ps` (every instance, from NATS service
//! discovery), `jetrelay drain` (the local jetrelay drained before the app stops),
//! `jetrelay scaler` (each source's lag from the JetStream API, for KEDA).

pub mod check;
pub mod consumers;
pub mod dlq;
pub mod drain;
pub mod group;
pub mod pause;
pub mod ps;
pub mod replay;
pub mod running;
pub mod scaler;

use clap::Args;

/// How the admin commands (`group`, `dlq`) connect, and how they print.
#[derive(Debug, Args)]
pub struct ConnectOptions {
    /// NATS server URL(s), comma-separated; overrides `nats.servers`.
    #[arg(long, global = true)]
    pub server: Option<String>,
    /// A jetrelay config file: its `[nats]` table (credentials, TLS, servers) is
    /// used, with the `JETRELAY_NATS__*` variables over it, as the daemon does.
    #[arg(long, global = true, env = "JETRELAY_CONFIG")]
    pub config: Option<std::path::PathBuf>,
    /// Print JSON instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
}
