//! `jetrelay check`: the config checked, then the topology plan (a durable) or the
//! member's share of its group, as text, changing nothing.

use std::time::Duration;

use crate::config::{Config, OnMissing, Settings, SourceKind, SourceSettings};
use crate::group::admin::GroupAdmin;
use crate::nats::{Nats, NatsError};
use crate::outputs;
use crate::topology::TopologyRequest;
use crate::topology::{ConsumerPlan, StreamAction, Table};

/// What `check` prints and whether `run` could proceed.
#[derive(Debug)]
pub struct Report {
    /// The human-readable plan, one finding per line (tables follow their line).
    pub lines: Vec<String>,
    /// False when `run` would stop with an error.
    pub ok: bool,
}

/// The checks that need no server: the rules between keys ([`Settings`]) and the
/// app's side as `run` builds it (secret files, the TLS CA, the proxy). Passing, it
/// says so in one line (`config: ok …`), printed before anything connects.
///
/// # Errors
/// [`CheckError`] naming what is wrong.
pub fn offline(config: &Config) -> Result<Settings, CheckError> {
    let settings = Settings::from_config(config)?;
    let limits = crate::http::forward::AnswerLimits::from_settings(&settings);
    crate::http::forward::Forwarder::new(&config.http, 1, limits)?;
    Ok(settings)
}

/// The line that says the config passed [`offline`].
pub fn config_ok(config: &Config) -> String {
    format!(
        "config: ok (source.kind = {}, stream {})",
        config.source.kind.map_or("?", SourceKind::name),
        config.source.stream
    )
}

/// Connects (once, no retry) and reports what `run` would find.
///
/// # Errors
/// [`CheckError`] when the config does not parse, or the server cannot be reached
/// or is too old.
pub async fn check(config: &Config) -> Result<Report, CheckError> {
    let settings = offline(config)?;
    let mut lines = Vec::new();
    let nats = Nats::connect(&config.nats, false).await?;
    nats.check_server_version()?;
    let mut publishing = publishing(&nats, config, &settings).await;
    publishing.extend(dead_letters(&nats, &settings).await);
    let member = match &settings.source {
        SourceSettings::Durable(request) => {
            let mut report = report(&nats, request, settings.retry.on_missing).await;
            lines.append(&mut report.lines);
            lines.extend(publishing);
            return Ok(Report {
                lines,
                ok: report.ok,
            });
        }
        SourceSettings::Group(member) => member,
    };
    // A member's consumer is the group's business: report the group and this member's
    // share instead of a durable plan.
    let ok = match GroupAdmin::new(nats)
        .member_info(
            member.flavour,
            &member.stream,
            &member.group,
            &member.member,
        )
        .await
    {
        Ok(m) => {
            lines.push(format!(
                "group {}: member {} in membership {}, partitions {:?}, consumer {}, active {}, pinned {}",
                member.group, m.member, m.in_membership, m.partitions, m.consumer, m.active, m.pinned
            ));
            true
        }
        Err(e) => {
            lines.push(format!("group {}: {e}", member.group));
            false
        }
    };
    lines.extend(publishing);
    Ok(Report { lines, ok })
}

/// The stream that stores dead letters, and whether `jetrelay dlq` can read it.
async fn dead_letters(nats: &Nats, settings: &Settings) -> Vec<String> {
    let Some(subject) = &settings.dlq_subject else {
        return Vec::new();
    };
    match nats.capturing(subject).await {
        Ok(streams) => crate::redrive::findings(subject, &streams),
        Err(e) => vec![format!(
            "dlq {subject}: cannot read the streams: {}",
            crate::ops::telemetry::chain(&e)
        )],
    }
}

/// For each allowed publish subject: the streams that capture it, and what would go
/// wrong there (`crate::outputs::findings`).
async fn publishing(nats: &Nats, config: &Config, settings: &Settings) -> Vec<String> {
    let mut lines = Vec::new();
    let ack_wait = Duration::from_millis(config.consumer.ack_wait_ms);
    for pattern in &settings.publish.rules.allowed {
        match nats.capturing(pattern).await {
            Ok(streams) => lines.extend(outputs::findings(
                pattern,
                &streams,
                settings.publish.atomic,
                ack_wait,
                settings.policy.max_attempts,
            )),
            Err(e) => lines.push(format!(
                "publish {pattern}: cannot read the streams: {}",
                crate::ops::telemetry::chain(&e)
            )),
        }
    }
    lines
}

/// Why `check` could not report.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The config does not parse into settings.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// NATS cannot be reached, or is too old.
    #[error(transparent)]
    Nats(#[from] NatsError),
    /// The app's side cannot be set up (a secret file, the TLS CA, the proxy).
    #[error(transparent)]
    App(#[from] crate::http::forward::ForwardError),
}

/// Reads the topology and describes the plan; `ok` is false where `run` would stop
/// (a conflicting consumer, or something missing with `on_missing = "fail"`).
pub async fn report(nats: &Nats, req: &TopologyRequest, on_missing: OnMissing) -> Report {
    let waits = on_missing == OnMissing::Retry;
    let stream = &req.stream;
    let plan = match nats.plan(req).await {
        Ok(p) => p,
        Err(e) => {
            let (ok, what) = match (e.is_missing(), waits) {
                (true, true) => (true, "; run waits for it"),
                (true, false) => (false, "; run would stop (topology.on_missing = \"fail\")"),
                (false, _) => (false, ""),
            };
            return Report {
                lines: vec![format!("stream {stream}: {e}{what}")],
                ok,
            };
        }
    };
    let mut lines = vec![match &plan.stream.action {
        StreamAction::Keep => format!("stream {stream}: exists, no change"),
        StreamAction::Create(s) => {
            format!(
                "stream {stream}: would be created with subjects {:?}",
                s.subjects
            )
        }
        StreamAction::AddSubjects { added, .. } => {
            format!("stream {stream}: would get the subjects {added:?}")
        }
    }];
    if !plan.stream.untouched.is_empty() {
        lines.push(format!(
            "stream {stream}: differs from topology.managed_stream (never changed):\n{}",
            Table(&plan.stream.untouched)
        ));
    }
    let name = &req.consumer.name;
    let (line, ok) = match &plan.consumer {
        ConsumerPlan::Keep => (format!("consumer {name}: exists and matches"), true),
        ConsumerPlan::Create => (format!("consumer {name}: would be created"), true),
        ConsumerPlan::Missing if waits => (
            format!("consumer {name}: missing (topology.consumer = \"bind\"); run waits for it"),
            true,
        ),
        ConsumerPlan::Missing => (
            format!(
                "consumer {name}: missing (topology.consumer = \"bind\"); run would stop (topology.on_missing = \"fail\")"
            ),
            false,
        ),
        ConsumerPlan::Conflict(rows) => (
            format!(
                "consumer {name}: exists with a different configuration; run would stop:\n{}",
                Table(rows)
            ),
            false,
        ),
    };
    lines.push(line);
    Report { lines, ok }
}
