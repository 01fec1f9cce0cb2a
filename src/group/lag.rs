//! A group's lag, for `jetrelay scaler`: a static group's is the sum over its members'
//! consumers on the origin stream (a member whose consumer does not exist yet counts
//! the messages under its partitions' filters); an elastic group's is its work-queue
//! stream's messages, every one not yet acknowledged, whatever members there are.

use crate::group::manage::{AdminError, GroupAdmin};
use crate::group::model::Flavour;
use crate::group::{self as pcgc, assign};
use crate::nats::{LagError, Nats};
use crate::ops::lag::{Consumer, SourceLag};

/// Why a group's lag could not be read.
#[derive(Debug, thiserror::Error)]
pub enum GroupLagError {
    /// Its config could not be read (or there is no such group).
    #[error(transparent)]
    Config(#[from] AdminError),
    /// A figure could not be read.
    #[error(transparent)]
    Read(#[from] LagError),
}

/// The lag of group `group` of `flavour` on origin stream `stream`.
///
/// # Errors
/// [`GroupLagError`].
pub async fn lag(
    nats: &Nats,
    flavour: Flavour,
    stream: &str,
    group: &str,
) -> Result<SourceLag, GroupLagError> {
    if flavour == Flavour::Elastic {
        // Not even the config is needed: the work-queue stream is the backlog.
        let wq = nats
            .work_queue(&pcgc::elastic_stream(stream, group))
            .await?;
        return Ok(SourceLag::elastic(
            wq.messages,
            wq.ack_pending,
            wq.consumers,
        ));
    }
    let c = GroupAdmin::new(nats.clone())
        .config(flavour, stream, group)
        .await?;
    let mapped = c.members.is_empty();
    let mut owners: Vec<(String, Vec<u32>)> =
        assign::every_partition(c.max_members, &c.members, &c.member_mappings)
            .into_iter()
            .filter(|(_, partitions)| !partitions.is_empty())
            .collect();
    owners.sort();
    let mut consumers = Vec::with_capacity(owners.len());
    for (member, partitions) in owners {
        let name = pcgc::static_consumer(group, &member);
        consumers.push(match nats.consumer_lag(stream, &name).await? {
            Some((pending, ack_pending)) => Consumer::Read {
                pending,
                ack_pending,
            },
            None => Consumer::Missing {
                under_filters: nats
                    .messages_under(stream, &assign::filters(&partitions, &c.filters, mapped))
                    .await?,
            },
        });
    }
    Ok(SourceLag::of(&consumers))
}
