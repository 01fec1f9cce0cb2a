//! The process edge: command line, config loading, logging, the runtime, signals and
//! exit codes (0 clean stop, 64 bad config or usage, 1 runtime failure). The only
//! place that reads argv or exits.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use jetrelay::app::{self, App, AppError};
use jetrelay::config::{Config, ConfigError, NatsConfig};
use jetrelay::group_admin::{AdminError, GroupAdmin};
use jetrelay::group_cli::{GroupCommand, GroupOptions};
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
    },
    /// Validate the config and print the topology plan; changes nothing.
    Check {
        /// The TOML config file (environment variables JETRELAY_* override it).
        #[arg(long, env = "JETRELAY_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Administer partitioned consumer groups (orbit.go / natsio-pcgroups compatible).
    Group {
        #[command(flatten)]
        options: GroupOptions,
        #[command(subcommand)]
        command: GroupCommand,
    },
}

const EX_USAGE: u8 = 64;

/// A second SIGTERM or SIGINT ended the process without the drain.
const EXIT_FORCED: u8 = 1;

#[allow(clippy::print_stderr, clippy::print_stdout)] // The process edge talks to the terminal.
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
    if let Command::Group { options, command } = cli.command {
        return group(options, command);
    }
    let (Command::Run { config } | Command::Check { config }) = &cli.command else {
        return ExitCode::from(EX_USAGE);
    };
    let config = match Config::load(config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("jetrelay: {e}");
            return ExitCode::from(EX_USAGE);
        }
    };
    jetrelay::telemetry::init(&config.log);
    let Some(runtime) = runtime(tokio::runtime::Builder::new_multi_thread()) else {
        return ExitCode::FAILURE;
    };
    let result = match cli.command {
        Command::Run { .. } => runtime.block_on(run(config)),
        Command::Check { .. } | Command::Group { .. } => runtime.block_on(check(config)),
    };
    // Tasks still waiting on the network (a reconnecting NATS client) must not hold
    // the exit: they are dropped, not awaited.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    match result {
        Ok(code) => code,
        Err(e) => {
            let chain = format!("{e:#}");
            tracing::error!(error = %chain, "jetrelay stopped");
            eprintln!("jetrelay: {chain}");
            let config_error = e
                .downcast_ref::<app::AppError>()
                .is_some_and(app::AppError::is_config)
                || e.downcast_ref::<ConfigError>().is_some();
            if config_error {
                ExitCode::from(EX_USAGE)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

async fn run(config: Config) -> anyhow::Result<ExitCode> {
    let app = App::build(config).await?;
    tracing::info!(version = env!("CARGO_PKG_VERSION"), admin = ?app.admin_addr(), "jetrelay starting");
    let shutdown = CancellationToken::new();
    let mut signals = jetrelay::shutdown::Signals::install().map_err(AppError::Signals)?;
    let trigger = shutdown.clone();
    tokio::spawn(async move {
        let first = signals.next().await;
        tracing::info!(signal = first, "shutdown requested");
        trigger.cancel();
        let second = signals.next().await;
        tracing::warn!(
            signal = second,
            "second signal: stopping at once; what was not settled is redelivered by JetStream after ack_wait"
        );
        std::process::exit(EXIT_FORCED.into());
    });
    app.run(shutdown).await?;
    tracing::info!("jetrelay stopped cleanly");
    Ok(ExitCode::SUCCESS)
}

#[allow(clippy::print_stdout)] // `check` reports to the terminal.
async fn check(config: Config) -> anyhow::Result<ExitCode> {
    let request = app::topology_request(&config);
    println!(
        "config: ok (source.kind = {:?}, stream {})",
        config.kind(),
        request.stream
    );
    let nats = jetrelay::nats::Nats::connect(&config.nats, false).await?;
    nats.check_server_version()?;
    if config.kind().is_group() {
        // A member's consumer is the group's business: report the group and this
        // member's share instead of a durable plan.
        let flavour = if config.kind() == jetrelay::config::SourceKind::Static {
            jetrelay::pcg::model::Flavour::Static
        } else {
            jetrelay::pcg::model::Flavour::Elastic
        };
        let s = &config.source;
        let admin = GroupAdmin::new(nats);
        return Ok(
            match admin
                .member_info(flavour, &s.stream, &s.group, &s.member)
                .await
            {
                Ok(m) => {
                    println!(
                        "group {}: member {} in membership {}, partitions {:?}, consumer {}, active {}, pinned {}",
                        s.group,
                        m.member,
                        m.in_membership,
                        m.partitions,
                        m.consumer,
                        m.active,
                        m.pinned
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    println!("group {}: {e}", s.group);
                    ExitCode::FAILURE
                }
            },
        );
    }
    let report = jetrelay::check::report(&nats, &request).await;
    for line in &report.lines {
        println!("{line}");
    }
    Ok(if report.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `jetrelay group …`: 0 done, 64 invalid request, 1 failure.
#[allow(clippy::print_stderr, clippy::print_stdout)] // The admin commands talk to the terminal.
fn group(options: GroupOptions, command: GroupCommand) -> ExitCode {
    jetrelay::telemetry::init(&jetrelay::config::LogConfig {
        format: jetrelay::config::LogFormat::Text,
        level: "warn".into(),
    });
    let mut cfg = match NatsConfig::load(options.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("jetrelay: {e}");
            return ExitCode::from(EX_USAGE);
        }
    };
    if let Some(server) = &options.server {
        cfg.servers = jetrelay::config::split_servers(server);
    }
    let raw: Vec<String> = std::env::args().collect();
    let Some(runtime) = runtime(tokio::runtime::Builder::new_current_thread()) else {
        return ExitCode::FAILURE;
    };
    let result = runtime.block_on(async {
        let nats = jetrelay::nats::Nats::connect(&cfg, false)
            .await
            .map_err(AdminError::Nats)?;
        jetrelay::group_cli::run(&GroupAdmin::new(nats), command, options.json, &raw).await
    });
    match result {
        Ok(text) => {
            println!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("jetrelay: {e}");
            if matches!(e, AdminError::Invalid(_)) {
                ExitCode::from(EX_USAGE)
            } else {
                ExitCode::FAILURE
            }
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
