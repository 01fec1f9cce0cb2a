//! `jetrelay check`: the topology plan as text, changing nothing.

use crate::nats::{Nats, TopologyRequest};
use crate::topology::{ConsumerPlan, StreamAction, Table};

/// What `check` prints and whether `run` could proceed.
#[derive(Debug)]
pub struct Report {
    /// The human-readable plan, one finding per line (tables follow their line).
    pub lines: Vec<String>,
    /// False when `run` would stop with an error.
    pub ok: bool,
}

/// Reads the topology and describes the plan.
pub async fn report(nats: &Nats, req: &TopologyRequest) -> Report {
    let stream = &req.stream;
    let plan = match nats.plan(req).await {
        Ok(p) => p,
        Err(e) => {
            return Report {
                lines: vec![format!("stream {stream}: {e}")],
                ok: e.is_missing(),
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
        ConsumerPlan::Missing => (
            format!("consumer {name}: missing (topology.consumer = \"bind\"); run waits for it"),
            true,
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
