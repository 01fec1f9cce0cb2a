//! Which consumers a command about a config's sources acts on (`pause`, `resume`,
//! `replay`): the sources chosen (every one, or `--source NAME`), the NATS connection
//! (the config's `[nats]`, `--server` over its servers), and each source's consumer,
//! or with `--all-members` every member consumer of its group.

use crate::config::{Config, ConfigError};
use crate::daemon::settings::Settings;
use crate::group::manage::{AdminError, GroupAdmin};
use crate::nats::{Nats, NatsError};
use crate::source::settings::{Binding, SourceSettings};

/// Why the consumers could not be named.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// The command line is wrong (exit 64).
    #[error("{0}")]
    Usage(String),
    /// The config is wrong (exit 64).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// NATS cannot be reached, or is too old (exit 1).
    #[error(transparent)]
    Nats(#[from] NatsError),
    /// The group's membership cannot be read (exit 1).
    #[error("cannot read the group's members")]
    Group(#[source] AdminError),
}

impl TargetError {
    /// Whether the user's command line or config is at fault (exit 64).
    pub fn is_usage(&self) -> bool {
        match self {
            TargetError::Usage(_) | TargetError::Config(_) => true,
            TargetError::Nats(e) => e.is_config(),
            TargetError::Group(_) => false,
        }
    }
}

/// One consumer: `(member, stream, consumer)` (the member in group sources).
pub type Target = (Option<String>, String, String);

/// Every source of the config, or `--source NAME` only.
///
/// # Errors
/// [`TargetError::Usage`] naming the sources the config has, for a name it has not.
pub fn chosen<'a>(
    settings: &'a Settings,
    source: Option<&str>,
) -> Result<Vec<&'a SourceSettings>, TargetError> {
    match source {
        None => Ok(settings.sources.iter().collect()),
        Some(name) => match settings.source(name) {
            Some(s) => Ok(vec![s]),
            None => {
                let names: Vec<&str> = settings.sources.iter().map(|s| s.name.as_str()).collect();
                Err(TargetError::Usage(format!(
                    "--source {name:?}: the config has no such source (it has {})",
                    crate::printable::list(&names, 16)
                )))
            }
        },
    }
}

/// Connects as the config says, to `--server`'s URLs when given.
///
/// # Errors
/// [`TargetError::Config`] for a bad `--server`; [`TargetError::Nats`].
pub async fn connect(
    config: &Config,
    settings: &Settings,
    server: Option<&str>,
) -> Result<Nats, TargetError> {
    let mut connection = settings.nats.clone();
    if let Some(server) = server {
        let mut cfg = config.nats.clone();
        cfg.servers = crate::config::split_servers(server);
        cfg.validate()?;
        connection = crate::daemon::settings::connection(&cfg);
    }
    Ok(Nats::connect(&connection, false).await?)
}

/// The consumers of `source`: its own, or with `all_members` every member's of its
/// group.
///
/// # Errors
/// [`TargetError::Usage`] for `--all-members` on a durable source;
/// [`TargetError::Group`] when the membership cannot be read.
pub async fn of(
    nats: &Nats,
    source: &SourceSettings,
    all_members: bool,
) -> Result<Vec<Target>, TargetError> {
    // A service consumes no stream: there is no consumer to act on.
    let Some(stream) = source.stream() else {
        return Ok(Vec::new());
    };
    match &stream.binding {
        Binding::Durable(r) if all_members => Err(TargetError::Usage(format!(
            "--all-members is for a group source; source.kind is durable (consumer {})",
            r.consumer.name
        ))),
        Binding::Durable(r) => Ok(vec![(None, r.stream.clone(), r.consumer.name.clone())]),
        Binding::Group(m) if all_members => Ok(GroupAdmin::new(nats.clone())
            .member_consumers(m.flavour, &m.stream, &m.group)
            .await
            .map_err(TargetError::Group)?
            .into_iter()
            .map(|(member, s, c)| (Some(member), s, c))
            .collect()),
        Binding::Group(m) => {
            let (s, c) = m.consumer();
            Ok(vec![(Some(m.member.clone()), s, c)])
        }
    }
}
