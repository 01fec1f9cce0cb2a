//! What a group needs from the server, as pure functions: the elastic stream's
//! subject transforms (spec §6.6) and the member consumer configs (§7.3, §8.2), built
//! exactly as the reference builds them so that Go, Python and jetrelay instances of
//! one member create identical consumers.

use std::time::Duration;

use super::model::{Flavour, PartitioningFilter};
use crate::capacity::Limits;
use crate::topology::{ConsumerSpec, Priority};

/// The transform destination of one partitioning filter: the i-th `*` becomes
/// `{{Wildcard(i)}}`, prefixed by `{{Partition(N,w…)}}.` (or `{{Partition(N)}}.`
/// for the whole subject).
pub fn transform_destination(filter: &str, wildcards: &[u32], max_members: u32) -> String {
    let mut i = 0;
    let body: Vec<String> = filter
        .split('.')
        .map(|t| {
            if t == "*" {
                i += 1;
                format!("{{{{Wildcard({i})}}}}")
            } else {
                t.to_string()
            }
        })
        .collect();
    let args: String = wildcards.iter().map(|w| format!(",{w}")).collect();
    format!("{{{{Partition({max_members}{args})}}}}.{}", body.join("."))
}

/// The (source, destination) transforms of an elastic group's stream.
pub fn transforms(filters: &[PartitioningFilter], max_members: u32) -> Vec<(String, String)> {
    if filters.is_empty() {
        return vec![(">".into(), transform_destination(">", &[], max_members))];
    }
    filters
        .iter()
        .map(|f| {
            (
                f.filter.clone(),
                transform_destination(&f.filter, &f.wildcards, max_members),
            )
        })
        .collect()
}

/// The N of a `{{partition(N,…)}}` transform destination (any capitalisation).
pub fn partition_count(destination: &str) -> Option<u32> {
    let lower = destination.to_ascii_lowercase();
    let start = lower.find("{{partition(")? + "{{partition(".len();
    let rest = &lower[start..];
    let end = rest.find([',', ')'])?;
    rest[..end].trim().parse().ok()
}

/// The ack wait a group uses: the template's, or 5 s when it is not positive.
pub fn ack_wait(template_ms: u64) -> Duration {
    if template_ms == 0 {
        Duration::from_secs(5)
    } else {
        Duration::from_millis(template_ms)
    }
}

/// The pin timeout: `max(ack_wait, 1 s)`.
pub fn priority_timeout(ack_wait: Duration) -> Duration {
    ack_wait.max(Duration::from_secs(1))
}

/// The template parts a member consumer copies from jetrelay's config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    /// `consumer.ack_wait_ms`.
    pub ack_wait_ms: u64,
    /// `consumer.max_deliver`.
    pub max_deliver: i64,
    /// `delivery.max_buffered`.
    pub max_ack_pending: i64,
    /// `consumer.backoff_ms`.
    pub backoff_ms: Vec<u64>,
    /// `consumer.deliver_policy` (static only; elastic is always `all`).
    pub deliver_policy: String,
}

/// A static member's consumer: durable `<group>-<member>` on the origin stream.
pub fn static_consumer(
    group: &str,
    member: &str,
    filters: Vec<String>,
    t: &Template,
) -> ConsumerSpec {
    member_consumer(
        super::static_consumer(group, member),
        true,
        filters,
        t,
        t.deliver_policy.clone(),
        0,
    )
}

/// An elastic member's consumer: named `<member>` (not durable) on the group stream,
/// reaped after one ack wait of inactivity, always delivering from the start.
pub fn elastic_consumer(member: &str, filters: Vec<String>, t: &Template) -> ConsumerSpec {
    let inactive = u64::try_from(ack_wait(t.ack_wait_ms).as_millis()).unwrap_or(u64::MAX);
    member_consumer(
        member.to_string(),
        false,
        filters,
        t,
        "all".into(),
        inactive,
    )
}

fn member_consumer(
    name: String,
    durable: bool,
    filters: Vec<String>,
    t: &Template,
    deliver_policy: String,
    inactive_threshold_ms: u64,
) -> ConsumerSpec {
    let wait = ack_wait(t.ack_wait_ms);
    ConsumerSpec {
        name,
        durable,
        filter_subjects: filters,
        deliver_policy,
        ack_explicit: true,
        ack_wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
        max_deliver: t.max_deliver,
        max_ack_pending: t.max_ack_pending,
        backoff_ms: t.backoff_ms.clone(),
        priority: Some(Priority {
            group: super::PRIORITY_GROUP.into(),
            timeout_ms: u64::try_from(priority_timeout(wait).as_millis()).unwrap_or(u64::MAX),
        }),
        inactive_threshold_ms,
        pull: true,
    }
}

/// What a member of a group needs to know to join it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Static or elastic.
    pub flavour: Flavour,
    /// The origin stream (`source.stream`).
    pub stream: String,
    /// The group.
    pub group: String,
    /// This member.
    pub member: String,
    /// The member consumer template.
    pub template: Template,
    /// Capacity limits (`max_buffered` = the template's `max_ack_pending`).
    pub limits: Limits,
    /// Confirmed acks.
    pub confirmed_acks: bool,
    /// Elastic with `source.auto_join`: the member joins and leaves the membership
    /// itself, and is pruned by the others when silent this long.
    pub auto_join: Option<std::time::Duration>,
}

impl Member {
    /// The stream and name of this member's consumer.
    pub fn consumer(&self) -> (String, String) {
        match self.flavour {
            Flavour::Static => (
                self.stream.clone(),
                super::static_consumer(&self.group, &self.member),
            ),
            Flavour::Elastic => (
                super::elastic_stream(&self.stream, &self.group),
                self.member.clone(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transform_table() {
        let cases = [
            (
                "foo.*.*.>",
                vec![1, 2],
                4,
                "{{Partition(4,1,2)}}.foo.{{Wildcard(1)}}.{{Wildcard(2)}}.>",
            ),
            (
                "foo.*",
                vec![1],
                10,
                "{{Partition(10,1)}}.foo.{{Wildcard(1)}}",
            ),
            ("foo.*", vec![], 4, "{{Partition(4)}}.foo.{{Wildcard(1)}}"),
            ("deep.>", vec![], 2, "{{Partition(2)}}.deep.>"),
            (">", vec![], 3, "{{Partition(3)}}.>"),
        ];
        for (f, w, n, want) in cases {
            assert_eq!(transform_destination(f, &w, n), want);
        }
        assert_eq!(
            transforms(&[], 5),
            [(">".to_string(), "{{Partition(5)}}.>".to_string())]
        );
    }

    #[test]
    fn partition_count_table() {
        assert_eq!(
            partition_count("{{partition(10,1)}}.foo.{{wildcard(1)}}"),
            Some(10)
        );
        assert_eq!(partition_count("{{Partition(4)}}.>"), Some(4));
        assert_eq!(partition_count("{{ partition( 3 ,2)}}.x"), None);
        assert_eq!(partition_count("foo.{{wildcard(1)}}"), None);
    }

    #[test]
    fn member_consumers_follow_the_reference() {
        let t = Template {
            ack_wait_ms: 0,
            max_deliver: -1,
            max_ack_pending: 64,
            backoff_ms: vec![],
            deliver_policy: "new".into(),
        };
        let s = static_consumer("cg", "m1", vec!["0.>".into()], &t);
        assert_eq!(
            (s.name.as_str(), s.durable, s.ack_wait_ms),
            ("cg-m1", true, 5000)
        );
        assert_eq!(
            s.priority,
            Some(Priority {
                group: "PCG".into(),
                timeout_ms: 5000
            })
        );
        assert_eq!(s.inactive_threshold_ms, 0);
        assert_eq!(s.deliver_policy, "new");
        let e = elastic_consumer(
            "m1",
            vec!["0.>".into()],
            &Template {
                ack_wait_ms: 500,
                ..t
            },
        );
        assert_eq!(
            (e.name.as_str(), e.durable, e.deliver_policy.as_str()),
            ("m1", false, "all")
        );
        assert_eq!(e.inactive_threshold_ms, 500);
        assert_eq!(
            e.priority.unwrap().timeout_ms,
            1000,
            "pin timeout at least 1 s"
        );
    }
}
