//! Partitioned consumer groups, wire-compatible with orbit.go `pcgroups` and
//! `natsio-pcgroups`. The pure half: config JSON (`model`: lenient read, strict write,
//! representation-preserving rewrite), validation, partition assignment (`assign`),
//! the elastic stream's transforms and the member consumer configs (`spec`). The
//! running half: one member's protocol behind the dispatcher's source seam (`member`)
//! and the administration behind `jetrelay group` (`manage`), and an elastic member
//! that joins, leaves and prunes the membership itself (`autojoin`); jetrelay's own
//! records beside a group's config (`records`: the group-wide pause, who auto-joined);
//! a group's lag for `jetrelay scaler` (`lag`);
//! `nats/` carries them to the server.

pub mod assign;
pub mod autojoin;
pub mod lag;
pub mod manage;
pub mod member;
pub mod model;
pub mod records;
pub mod spec;

/// The static groups' config bucket.
pub const STATIC_BUCKET: &str = "static-consumer-groups";
/// The elastic groups' config bucket.
pub const ELASTIC_BUCKET: &str = "elastic-consumer-groups";
/// The priority group every member consumer uses.
pub const PRIORITY_GROUP: &str = "PCG";

/// The KV key of a group: `<stream>.<group>`.
pub fn key(stream: &str, group: &str) -> String {
    format!("{stream}.{group}")
}

/// The static member consumer's durable name: `<group>-<member>`.
pub fn static_consumer(group: &str, member: &str) -> String {
    format!("{group}-{member}")
}

/// The elastic group's work-queue stream: `<stream>-<group>`.
pub fn elastic_stream(stream: &str, group: &str) -> String {
    format!("{stream}-{group}")
}
