//! The process edge: command line, config loading, logging, the runtime, signals and
//! exit codes (0 clean stop, 64 bad config or usage, 1 runtime failure; `drain`: 69
//! when the admin port does not answer). The only place that reads argv or exits.
//! mimalloc is the global allocator, built without transparent huge pages (peak RSS).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use jetrelay::cli::ConnectOptions;
use jetrelay::cli::check::CheckError;
use jetrelay::cli::dlq::{DlqCommand, DlqError};
use jetrelay::cli::group::GroupCommand;
use jetrelay::cli::pause::Request;
use jetrelay::config::{Config, ConfigError, NatsConfig};
use jetrelay::daemon::shutdown::{Hangup, Signals};
use jetrelay::daemon::{Daemon, DaemonError};
use jetrelay::group::manage::{AdminError, GroupAdmin};
use tokio_util::sync::CancellationToken;

/// mimalloc instead of the system allocator: per message the daemon makes a few dozen
/// small, short-lived allocations across the worker threads, where glibc spends ~20%
/// more CPU (bench/). Built with `no_thp`, so that its arenas are not backed by
/// transparent huge pages: that kept peak RSS at ~19 MiB instead of ~33 MiB.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Consume NATS JetStream and deliver each message to a local app over HTTP.
#[derive(Debug, Parser)]
#[command(name = "jetrelay", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the daemon.
    Run {
        /// The TOML config file (environment variables JETRELAY_* override it).
        #[arg(long, env = "JETRELAY_CONFIG")]
        config: Option<PathBuf>,
        /// Reload (as SIGHUP does) when the config file or a file it names changes,
        /// including a Kubernetes ConfigMap or Secret mounted as a directory.
        #[arg(long, env = "JETRELAY_WATCH", requires = "config")]
        watch: bool,
    },
    /// Validate the config and print the topology plan; changes nothing.
    Check {
        /// The TOML config file (environment variables JETRELAY_* override it).
        #[arg(long, env = "JETRELAY_CONFIG")]
        config: Option<PathBuf>,
        /// Instead of the plan: what a reload (SIGHUP) of this config would change in
        /// the jetrelay that runs, read from its admin port (admin.listen, or URL).
        #[arg(long, value_name = "URL", num_args = 0..=1, default_missing_value = "")]
        diff_running: Option<String>,
        /// Without NATS: the config, the environment and every file it names (for CI
        /// and pre-commit hooks); 0 when valid, 64 when not.
        #[arg(long, conflicts_with = "diff_running")]
        offline: bool,
    },
    /// Administer partitioned consumer groups (orbit.go / natsio-pcgroups compatible).
    Group {
        #[command(flatten)]
        options: ConnectOptions,
        #[command(subcommand)]
        command: GroupCommand,
    },
    /// Dead letters: browse them, replay them where they came from, purge them.
    Dlq {
        #[command(flatten)]
        options: ConnectOptions,
        #[command(subcommand)]
        command: DlqCommand,
    },
    /// Every jetrelay on the account that answers NATS service discovery within a
    /// second: one row per instance and source.
    Ps {
        #[command(flatten)]
        options: ConnectOptions,
    },
    /// Pause the source's consumer on the server: every instance stops receiving
    /// (held messages are kept alive), restarts included, until it resumes.
    Pause {
        #[command(flatten)]
        target: PauseTarget,
        /// How long: 30m, 2h, 1h30m, 1d (the server resumes it then).
        #[arg(long = "for", value_name = "DURATION", conflicts_with = "until")]
        duration: Option<String>,
        /// Until this RFC 3339 time (2026-12-01T18:30:00Z).
        #[arg(long, value_name = "TIME")]
        until: Option<String>,
    },
    /// Resume the source's consumer paused by `jetrelay pause`.
    Resume {
        #[command(flatten)]
        target: PauseTarget,
    },
    /// Deliver again, in place, everything from a time or a stream sequence on: the
    /// source's consumer is moved back on the server (nats-server 2.14+), not deleted
    /// or renamed.
    Replay {
        #[command(flatten)]
        consumers: Consumers,
        /// From this long ago (2h, 90m, 1d) or this RFC 3339 time (2026-12-01T14:00:00Z).
        #[arg(long, value_name = "DURATION|TIME", conflicts_with = "seq")]
        since: Option<String>,
        /// From this stream sequence.
        #[arg(long, value_name = "N")]
        seq: Option<u64>,
        /// Print how many messages would come again; change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Drain the jetrelay running with this config (its admin port's /drain), as a
    /// preStop exec hook: it stops pulling, settles what is in flight, releases what
    /// it holds. 0 drained, 1 not within the wait, 69 admin port unreachable.
    Drain {
        /// The TOML config file of the running jetrelay (`admin.listen`,
        /// `admin.token_file`; environment variables JETRELAY_* override it).
        #[arg(long, env = "JETRELAY_CONFIG")]
        config: Option<PathBuf>,
        /// How long the in-flight requests may take: 25s, 500ms, 2m
        /// (`delivery.shutdown_grace_ms` when omitted).
        #[arg(long, value_name = "DURATION")]
        wait: Option<String>,
    },
    /// Serve each source's lag from the JetStream API for KEDA's metrics-api trigger
    /// (/v1/lag, /metrics, /livez, /readyz): one per namespace, no jetrelay needed.
    Scaler {
        /// The sidecars' TOML config file (its sources and `[nats]`; environment
        /// variables JETRELAY_* override it).
        #[arg(long, env = "JETRELAY_CONFIG")]
        config: Option<PathBuf>,
        /// The address to serve on.
        #[arg(long, value_name = "ADDR", default_value = jetrelay::cli::scaler::LISTEN)]
        listen: String,
    },
}

/// Which consumers `pause`, `resume` and `replay` act on.
#[derive(Debug, clap::Args)]
struct Consumers {
    /// The TOML config file of the jetrelay whose consumer it is (its `[source]` and
    /// `[nats]`; environment variables JETRELAY_* override it).
    #[arg(long, env = "JETRELAY_CONFIG")]
    config: Option<PathBuf>,
    /// NATS server URL(s), comma-separated; overrides `nats.servers`.
    #[arg(long)]
    server: Option<String>,
    /// Only this source (`[sources.<name>]`); every source of the config when omitted.
    #[arg(long, value_name = "NAME")]
    source: Option<String>,
    /// Every member's consumer of the source's group, not only this member's.
    #[arg(long)]
    all_members: bool,
}

/// Which consumers `pause` and `resume` act on, and how they print.
#[derive(Debug, clap::Args)]
struct PauseTarget {
    #[command(flatten)]
    consumers: Consumers,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

const EX_USAGE: u8 = 64;

/// `jetrelay drain`: the admin port did not answer.
const EX_UNAVAILABLE: u8 = 69;

/// A second SIGTERM or SIGINT ended the process without the drain.
const EXIT_FORCED: u8 = 1;

/// How long the exit waits for stderr to take the daemon's last lines (after the
/// shutdown's own flush, bounded by its grace), and the second signal's line.
const AT_EXIT: std::time::Duration = std::time::Duration::from_millis(100);

/// How long a failed daemon waits for stderr to take why it failed.
const AT_FAILURE: std::time::Duration = std::time::Duration::from_secs(1);

#[allow(clippy::print_stderr)] // The process edge talks to the terminal.
fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let usage = e.use_stderr();
            // Nothing more can be done when stderr itself is gone.
            e.print().ok();
            return if usage {
                ExitCode::from(EX_USAGE)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match cli.command {
        Command::Group { options, command } => group(options, command),
        Command::Dlq { options, command } => dlq(options, command),
        Command::Ps { options } => {
            let json = options.json;
            admin(&options, |nats| async move {
                let listing = jetrelay::cli::ps::run(&nats, json)
                    .await
                    .map_err(|e| (jetrelay::ops::telemetry::chain(&e), false))?;
                // With --json, stdout stays JSON: what was left out goes to stderr.
                if let Some(line) = listing.ignored {
                    eprintln!("jetrelay: {line}");
                }
                Ok((listing.text, false))
            })
        }
        Command::Run { config, watch } => {
            let file = config.clone();
            with_config(config.as_deref(), Logs::Daemon, move |c| {
                run(c, file, watch)
            })
        }
        Command::Check {
            config,
            diff_running: None,
            offline: false,
        } => with_config(config.as_deref(), Logs::Terminal, check),
        Command::Check {
            config,
            offline: true,
            ..
        } => with_config(config.as_deref(), Logs::Terminal, check_offline),
        Command::Check {
            config,
            diff_running: Some(url),
            ..
        } => with_config(config.as_deref(), Logs::Terminal, move |c| {
            diff_running(c, url)
        }),
        Command::Pause {
            target,
            duration,
            until,
        } => {
            match jetrelay::cli::pause::request(
                duration.as_deref(),
                until.as_deref(),
                time::OffsetDateTime::now_utc(),
            ) {
                Ok(r) => pause(target, r),
                Err(e) => {
                    eprintln!("jetrelay: {e}");
                    ExitCode::from(EX_USAGE)
                }
            }
        }
        Command::Resume { target } => pause(target, Request::Resume),
        Command::Replay {
            consumers: c,
            since,
            seq,
            dry_run,
        } => replay(c.config.as_deref(), |now| {
            Ok(jetrelay::cli::replay::ReplayRequest {
                point: jetrelay::cli::replay::point(since.as_deref(), seq, now)?,
                source: c.source.as_deref(),
                all_members: c.all_members,
                dry_run,
                server: c.server.as_deref(),
            })
        }),
        Command::Drain { config, wait } => drain(config.as_deref(), wait.as_deref()),
        Command::Scaler { config, listen } => {
            with_config(config.as_deref(), Logs::Daemon, move |c| scaler(c, listen))
        }
    }
}

/// Where a command's logs go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Logs {
    /// The daemon: `[log]` as configured (JSON lines for a collector, by default).
    Daemon,
    /// A command a person reads (`check`): jetrelay's warnings as text, nothing of
    /// the NATS client's own, which would be JSON lines among the report.
    Terminal,
}

/// Loads the config, starts logging and the runtime, runs `job` on it, and maps its
/// result to the exit code.
#[allow(clippy::print_stderr)] // The process edge talks to the terminal.
fn with_config<F, Fut>(file: Option<&Path>, logs: Logs, job: F) -> ExitCode
where
    F: FnOnce(Config) -> Fut,
    Fut: Future<Output = anyhow::Result<ExitCode>> + Send + 'static,
{
    let config = match Config::load(file) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("jetrelay: {e}");
            return ExitCode::from(EX_USAGE);
        }
    };
    match logs {
        Logs::Daemon => jetrelay::ops::telemetry::init_daemon(config.log.format, &config.log.level),
        Logs::Terminal => jetrelay::ops::telemetry::init(
            jetrelay::ops::telemetry::LogFormat::Text,
            "warn,async_nats=off",
        ),
    }
    let Some(runtime) = runtime(tokio::runtime::Builder::new_multi_thread()) else {
        return ExitCode::FAILURE;
    };
    // Spawned, so that the daemon's loops run on the runtime's workers: the tasks they
    // spawn then start on the same worker, not through the runtime's shared queue and
    // a wake-up of a parked worker per message.
    let result = runtime.block_on(async move {
        tokio::spawn(job(config))
            .await
            .unwrap_or_else(|e| Err(anyhow::anyhow!("the daemon's task failed: {e}")))
    });
    // Tasks still waiting on the network (a reconnecting NATS client) must not hold
    // the exit: they are dropped, not awaited.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    // The daemon's last lines before anything of the process edge's own; a stderr
    // that does not take them does not hold the exit.
    let mut drained = jetrelay::ops::telemetry::flush_within(AT_EXIT);
    match result {
        Ok(code) => code,
        Err(e) => {
            // Each cause once: async-nats repeats its cause in its own text.
            let chain = jetrelay::ops::telemetry::chain(e.as_ref());
            if logs == Logs::Daemon {
                tracing::error!(error = %chain, "jetrelay stopped");
                drained = jetrelay::ops::telemetry::flush_within(AT_FAILURE);
            }
            // Written by this thread, so only where stderr takes what it is given.
            if drained {
                eprintln!("jetrelay: {chain}");
            }
            let config_error = e
                .downcast_ref::<DaemonError>()
                .is_some_and(DaemonError::is_config)
                || e.downcast_ref::<jetrelay::cli::scaler::ScalerError>()
                    .is_some_and(jetrelay::cli::scaler::ScalerError::is_usage)
                || e.downcast_ref::<ConfigError>().is_some()
                || match e.downcast_ref::<CheckError>() {
                    Some(CheckError::Config(_)) => true,
                    Some(CheckError::Nats(n)) => n.is_config(),
                    Some(CheckError::App(_) | CheckError::Secret(_)) => true,
                    Some(
                        CheckError::Running(_)
                        | CheckError::NotAConfig(_)
                        | CheckError::Unreachable(_),
                    )
                    | None => false,
                };
            if config_error {
                ExitCode::from(EX_USAGE)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

async fn run(config: Config, file: Option<PathBuf>, watch: bool) -> anyhow::Result<ExitCode> {
    // First: a SIGHUP must never take the default action (ending the process).
    let mut signals = Signals::install().map_err(DaemonError::Signals)?;
    let mut hangup = Hangup::install().map_err(DaemonError::Signals)?;
    let watched = (watch.then_some(file.as_ref()).flatten()).map(|f| (f.clone(), config.clone()));
    let daemon = Daemon::build(config).await?;
    let deadline = daemon.deadline();
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        admin = %daemon.admin_addr().map_or_else(|| "off".to_string(), |a| a.to_string()),
        "jetrelay starting"
    );
    let shutdown = CancellationToken::new();
    let trigger = shutdown.clone();
    let reloader = daemon.reloader();
    let grace = deadline.clone();
    tokio::spawn(async move {
        let mut asked = 0;
        loop {
            tokio::select! {
                signal = signals.next() => {
                    asked += 1;
                    if asked == 1 {
                        // The grace runs from the signal, the last log flush included.
                        grace.start();
                        tracing::info!(signal, "shutdown requested");
                        trigger.cancel();
                    } else {
                        tracing::warn!(
                            signal,
                            "second signal: stopping at once; what was not settled is redelivered by JetStream after ack_wait"
                        );
                        jetrelay::ops::telemetry::flush_within(AT_EXIT);
                        std::process::exit(EXIT_FORCED.into());
                    }
                }
                () = hangup.next() => {
                    tracing::info!(
                        file = %file.as_deref().map_or_else(|| "none".into(), |f| f.display().to_string()),
                        "SIGHUP: reading the config again"
                    );
                    reloader.request(Config::load(file.as_deref()));
                }
            }
        }
    });
    if let Some((file, config)) = watched {
        let (reloader, stop) = (daemon.reloader(), shutdown.clone());
        tokio::spawn(async move {
            jetrelay::daemon::watching::watch(file, &config, reloader, stop).await;
        });
    }
    daemon.run(shutdown).await?;
    tracing::info!("jetrelay stopped cleanly");
    // The last lines, while the grace lasts: a stderr nobody reads does not hold
    // the exit past it.
    let until = deadline.or_from_now().into_std();
    tokio::task::block_in_place(|| jetrelay::ops::telemetry::flush_until(until));
    Ok(ExitCode::SUCCESS)
}

/// `jetrelay scaler`: serves until SIGTERM or SIGINT (0); 64 for a bad config or an
/// address it cannot listen on.
async fn scaler(config: Config, listen: String) -> anyhow::Result<ExitCode> {
    use jetrelay::cli::scaler::ScalerError;
    let mut signals = Signals::install().map_err(DaemonError::Signals)?;
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .map_err(|source| ScalerError::Serve {
            listen: listen.clone(),
            source,
        })?;
    let stop = CancellationToken::new();
    let trigger = stop.clone();
    tokio::spawn(async move {
        let signal = signals.next().await;
        tracing::info!(signal, "jetrelay scaler stopping");
        trigger.cancel();
    });
    jetrelay::cli::scaler::run(&config, listener, stop).await?;
    Ok(ExitCode::SUCCESS)
}

/// `jetrelay check`: 0 when `run` could proceed, 1 when it would stop.
async fn check(config: Config) -> anyhow::Result<ExitCode> {
    // What needs no server first: a config that is fine says so even when NATS is
    // not there.
    let settings = jetrelay::cli::check::offline(&config)?;
    if let Err(code) = out(&jetrelay::cli::check::config_ok(&settings)) {
        return Ok(code);
    }
    let report = jetrelay::cli::check::check(&config).await?;
    Ok(reported(&report))
}

/// `jetrelay check --offline`: 0 when the config and its files are fine; a problem
/// is a config error (64).
async fn check_offline(config: Config) -> anyhow::Result<ExitCode> {
    let text = jetrelay::cli::check::without_nats(&config).await?;
    Ok(out(&text).err().unwrap_or(ExitCode::SUCCESS))
}

/// `jetrelay check --diff-running`: 0 when a reload would apply (or change nothing),
/// 1 when it would be refused or the running config cannot be read.
async fn diff_running(config: Config, url: String) -> anyhow::Result<ExitCode> {
    let url = jetrelay::cli::running::url_for(&config, Some(&url));
    let report = jetrelay::cli::running::diff_running(&config, &url).await?;
    Ok(reported(&report))
}

/// A check's lines on stdout; 0 when it found nothing that stops, else 1.
fn reported(report: &jetrelay::cli::check::Report) -> ExitCode {
    for line in &report.lines {
        if let Err(code) = out(line) {
            return code;
        }
    }
    if report.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `jetrelay group …`: 0 done, 64 invalid request, 1 failure.
fn group(options: ConnectOptions, command: GroupCommand) -> ExitCode {
    let raw: Vec<String> = std::env::args().collect();
    let json = options.json;
    admin(&options, |nats| async move {
        match jetrelay::cli::group::run(&GroupAdmin::new(nats), command, json, &raw).await {
            Ok(text) => Ok((text, false)),
            Err(e) => {
                let usage = matches!(e, AdminError::Invalid(_));
                Err((e.to_string(), usage))
            }
        }
    })
}

/// `jetrelay dlq …`: 0 done, 64 usage, 1 a failure (some dead letter not replayed or
/// deleted included).
fn dlq(options: ConnectOptions, command: DlqCommand) -> ExitCode {
    let json = options.json;
    admin(&options, |nats| async move {
        match jetrelay::cli::dlq::run(&nats, command, json).await {
            Ok(done) => Ok((done.text, done.failed)),
            Err(e) => {
                let usage = matches!(e, DlqError::Usage(_));
                let chain = jetrelay::ops::telemetry::chain(&e);
                Err((chain, usage))
            }
        }
    })
}

/// `jetrelay pause|resume`: 0 done, 64 usage or config, 1 a consumer not paused
/// (resumed) or NATS failing.
fn pause(target: PauseTarget, request: Request) -> ExitCode {
    let c = target.consumers;
    on_config(c.config.as_deref(), move |config| async move {
        let done = jetrelay::cli::pause::run(
            &config,
            c.server.as_deref(),
            request,
            c.source.as_deref(),
            c.all_members,
            target.json,
        )
        .await?;
        Ok((done.text, done.failed))
    })
}

/// `jetrelay replay`: 0 done (or counted), 64 usage or config, 1 refused (nothing
/// changed) or NATS failing.
fn replay<'a>(
    file: Option<&std::path::Path>,
    request: impl FnOnce(
        time::OffsetDateTime,
    ) -> Result<
        jetrelay::cli::replay::ReplayRequest<'a>,
        jetrelay::cli::consumers::TargetError,
    >,
) -> ExitCode {
    on_config(file, move |config| async move {
        let request = request(time::OffsetDateTime::now_utc())?;
        let done = jetrelay::cli::replay::run(&config, &request).await?;
        Ok((done.text, done.failed))
    })
}

/// Runs a command about the consumers of the config in `file`: `job` answers
/// `Ok((text, failed))` (exit 1 when failed), or why it could not run (64 for the
/// user's command line or config, else 1).
fn on_config<F, Fut>(file: Option<&std::path::Path>, job: F) -> ExitCode
where
    F: FnOnce(Config) -> Fut,
    Fut: Future<Output = Result<(String, bool), jetrelay::cli::consumers::TargetError>>,
{
    jetrelay::ops::telemetry::init(
        jetrelay::ops::telemetry::LogFormat::Text,
        "warn,async_nats=off",
    );
    config_command(file, job, |e| {
        if e.is_usage() {
            ExitCode::from(EX_USAGE)
        } else {
            ExitCode::FAILURE
        }
    })
}

/// `jetrelay drain`: 0 drained, 1 not within the wait (or another answer), 64 usage,
/// config or a refused token, 69 the admin port does not answer.
fn drain(file: Option<&Path>, wait: Option<&str>) -> ExitCode {
    use jetrelay::cli::drain::DrainError;
    config_command(
        file,
        |config| async move {
            let done = jetrelay::cli::drain::run(&config, wait).await?;
            Ok((done.text, !done.drained))
        },
        |e| match e {
            DrainError::Usage(_) | DrainError::Secret(_) | DrainError::Refused { .. } => {
                ExitCode::from(EX_USAGE)
            }
            DrainError::Unreachable(_) => ExitCode::from(EX_UNAVAILABLE),
            DrainError::Failed { .. } => ExitCode::FAILURE,
        },
    )
}

/// Runs a command on the config in `file` (64 when it does not load): `job` answers
/// `Ok((text, failed))` (the text printed, exit 1 when failed), or why it could not
/// run (printed, the exit code `code`'s).
#[allow(clippy::print_stderr)] // The admin commands talk to the terminal.
fn config_command<F, Fut, E>(
    file: Option<&Path>,
    job: F,
    code: impl FnOnce(&E) -> ExitCode,
) -> ExitCode
where
    F: FnOnce(Config) -> Fut,
    Fut: Future<Output = Result<(String, bool), E>>,
    E: std::error::Error + 'static,
{
    let config = match Config::load(file) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("jetrelay: {e}");
            return ExitCode::from(EX_USAGE);
        }
    };
    let Some(runtime) = runtime(tokio::runtime::Builder::new_current_thread()) else {
        return ExitCode::FAILURE;
    };
    match runtime.block_on(job(config)) {
        Ok((text, failed)) => finished(&text, failed),
        Err(e) => {
            eprintln!("jetrelay: {}", jetrelay::ops::telemetry::chain(&e));
            code(&e)
        }
    }
}

/// Runs an admin command on a NATS connection made from `options`: `job` answers
/// `Ok((text, failed))` or `Err((message, usage))`.
#[allow(clippy::print_stderr)] // The admin commands talk to the terminal.
fn admin<F, Fut>(options: &ConnectOptions, job: F) -> ExitCode
where
    F: FnOnce(jetrelay::nats::Nats) -> Fut,
    Fut: Future<Output = Result<(String, bool), (String, bool)>>,
{
    jetrelay::ops::telemetry::init(
        jetrelay::ops::telemetry::LogFormat::Text,
        "warn,async_nats=off",
    );
    let mut cfg = match NatsConfig::load(options.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("jetrelay: {e}");
            return ExitCode::from(EX_USAGE);
        }
    };
    if let Some(server) = &options.server {
        cfg.servers = jetrelay::config::split_servers(server);
        if let Err(e) = cfg.validate() {
            eprintln!("jetrelay: {e}");
            return ExitCode::from(EX_USAGE);
        }
    }
    let Some(runtime) = runtime(tokio::runtime::Builder::new_current_thread()) else {
        return ExitCode::FAILURE;
    };
    let result = runtime.block_on(async {
        match jetrelay::nats::Nats::connect(&jetrelay::daemon::settings::connection(&cfg), false)
            .await
        {
            Ok(nats) => job(nats).await,
            Err(e) => Err((jetrelay::ops::telemetry::chain(&e), e.is_config())),
        }
    });
    match result {
        Ok((text, failed)) => finished(&text, failed),
        Err((message, usage)) => {
            eprintln!("jetrelay: {message}");
            if usage {
                ExitCode::from(EX_USAGE)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// A command's text printed, and its exit: 1 when it `failed`, else 0 (or what [`out`]
/// says).
fn finished(text: &str, failed: bool) -> ExitCode {
    if let Err(code) = out(text) {
        return code;
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Writes `text` and a line break to stdout, the one way a command prints. `Err` is
/// the exit when stdout does not take it: a reader that went away (a closed pipe:
/// `jetrelay ps | head -1`) ends the command quietly with 0, as ripgrep and fd do;
/// another failure (a full disk) says so and is 1.
#[allow(clippy::print_stderr)] // The process edge talks to the terminal.
fn out(text: &str) -> Result<(), ExitCode> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match writeln!(stdout, "{text}").and_then(|()| stdout.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(ExitCode::SUCCESS),
        Err(e) => {
            eprintln!("jetrelay: cannot write the output: {e}");
            Err(ExitCode::FAILURE)
        }
    }
}

/// Builds a runtime, reporting a failure on stderr.
#[allow(clippy::print_stderr)] // The process edge talks to the terminal.
fn runtime(mut builder: tokio::runtime::Builder) -> Option<tokio::runtime::Runtime> {
    builder
        .enable_all()
        .build()
        .map_err(|e| eprintln!("jetrelay: cannot start the runtime: {e}"))
        .ok()
}
