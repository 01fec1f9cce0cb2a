//! `jetrelay check`: the config checked, then the topology plan (a durable) or the
//! member's share of its group, as text, changing nothing.

use crate::config::{Config, OnMissing, SourceKind};
use crate::group::admin::GroupAdmin;
use crate::group::model::Flavour;
use crate::nats::{Nats, NatsError, TopologyRequest};
use crate::topology::{ConsumerPlan, StreamAction, Table};

/// What `check` prints and whether `run` could proceed.
#[derive(Debug)]
pub struct Report {
    /// The human-readable plan, one finding per line (tables follow their line).
    pub lines: Vec<String>,
    /// False when `run` would stop with an error.
    pub ok: bool,
}

/// Connects (once, no retry) and reports what `run` would find.
///
/// # Errors
/// [`NatsError`] when the server cannot be reached or is too old.
pub async fn check(config: &Config) -> Result<Report, NatsError> {
    let request = crate::daemon::topology_request(config);
    let mut lines = vec![format!(
        "config: ok (source.kind = {:?}, stream {})",
        config.kind(),
        request.stream
    )];
    let nats = Nats::connect(&config.nats, false).await?;
    nats.check_server_version()?;
    if !config.kind().is_group() {
        let mut report = report(&nats, &request, config.topology.on_missing).await;
        lines.append(&mut report.lines);
        return Ok(Report {
            lines,
            ok: report.ok,
        });
    }
    // A member's consumer is the group's business: report the group and this member's
    // share instead of a durable plan.
    let flavour = if config.kind() == SourceKind::Static {
        Flavour::Static
    } else {
        Flavour::Elastic
    };
    let s = &config.source;
    let ok = match GroupAdmin::new(nats)
        .member_info(flavour, &s.stream, &s.group, &s.member)
        .await
    {
        Ok(m) => {
            lines.push(format!(
                "group {}: member {} in membership {}, partitions {:?}, consumer {}, active {}, pinned {}",
                s.group, m.member, m.in_membership, m.partitions, m.consumer, m.active, m.pinned
            ));
            true
        }
        Err(e) => {
            lines.push(format!("group {}: {e}", s.group));
            false
        }
    };
    Ok(Report { lines, ok })
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
