//! `jetrelay group static|elastic …`: the admin commands, with orbit.go `cg`'s
//! argument shapes, printing tables or JSON. Parsing and printing only; the work is
//! in `group::manage`. Names read from the stored config are escaped for the terminal
//! (`crate::printable`), and at most 100 members are listed as text.

use clap::{Args, Subcommand};
use serde_json::json;

use crate::printable::printable;

use crate::group::manage::{AdminError, GroupAdmin, GroupReport, MemberReport};
use crate::group::model::{Flavour, GroupConfig, MemberMapping, PartitioningFilter};

/// `jetrelay group …`
#[derive(Debug, Subcommand)]
pub enum GroupCommand {
    /// Static groups: fixed membership, the stream partitions its subjects itself.
    #[command(subcommand)]
    Static(StaticCommand),
    /// Elastic groups: membership changes at run time; a work-queue stream per group.
    #[command(subcommand)]
    Elastic(ElasticCommand),
}

/// Static group commands.
#[derive(Debug, Subcommand)]
pub enum StaticCommand {
    /// Create a group.
    #[command(subcommand)]
    Create(StaticCreate),
    /// Show a group and its members.
    Info(StreamGroup),
    /// List the groups of a stream.
    #[command(alias = "list")]
    Ls(StreamOnly),
    /// Delete a group and exactly its member consumers.
    #[command(alias = "delete")]
    Rm(StreamGroup),
    /// Show one member.
    #[command(aliases = ["memberinfo", "minfo"])]
    MemberInfo(StreamGroupMember),
    /// Unpin a member so that another of its instances is served.
    #[command(aliases = ["stepdown", "sd"])]
    StepDown(StreamGroupMember),
}

/// `static create balanced|mapped`
#[derive(Debug, Subcommand)]
pub enum StaticCreate {
    /// Members share the partitions evenly.
    Balanced {
        /// The partitioned stream.
        stream: String,
        /// The group.
        group: String,
        /// The number of partitions.
        max_members: u32,
        /// The members.
        #[arg(required = true)]
        members: Vec<String>,
        /// A subject filter (without the partition token); repeatable.
        #[arg(long = "filter")]
        filters: Vec<String>,
    },
    /// Explicit member:partitions assignments.
    Mapped {
        /// The partitioned stream.
        stream: String,
        /// The group.
        group: String,
        /// The number of partitions.
        max_members: u32,
        /// `member:p1,p2,...`
        #[arg(required = true)]
        mappings: Vec<String>,
        /// A subject filter; repeatable.
        #[arg(long = "filter")]
        filters: Vec<String>,
    },
}

/// Elastic group commands.
#[derive(Debug, Subcommand)]
pub enum ElasticCommand {
    /// Create a group (and its work-queue stream).
    Create {
        /// The origin stream.
        stream: String,
        /// The group.
        group: String,
        /// The number of partitions.
        max_members: u32,
        /// A partitioning filter; repeatable. Without any: the whole stream.
        #[arg(long = "filter")]
        filters: Vec<String>,
        /// The 1-based `*` indexes hashed for the preceding --filter (e.g. 1,2); none =
        /// the whole subject.
        #[arg(long = "wildcards")]
        wildcards: Vec<String>,
        /// The group stream's message limit (0 = unlimited).
        #[arg(long, default_value_t = 0)]
        max_buffered_msgs: i64,
        /// The group stream's byte limit (0 = unlimited).
        #[arg(long, default_value_t = 0)]
        max_buffered_bytes: i64,
    },
    /// Show a group and its members.
    Info(StreamGroup),
    /// List the groups of a stream.
    #[command(alias = "list")]
    Ls(StreamOnly),
    /// Delete a group and its stream.
    #[command(alias = "delete")]
    Rm(StreamGroup),
    /// Add members.
    Add(StreamGroupMembers),
    /// Drop members.
    Drop(StreamGroupMembers),
    /// Replace the membership with explicit member:partitions assignments.
    #[command(aliases = ["cm", "createmapping"])]
    CreateMapping {
        /// The origin stream.
        stream: String,
        /// The group.
        group: String,
        /// `member:p1,p2,...`
        #[arg(required = true)]
        mappings: Vec<String>,
    },
    /// Remove the mappings (the group then has no members).
    #[command(aliases = ["dm", "deletemapping"])]
    DeleteMapping(StreamGroup),
    /// Show one member.
    #[command(aliases = ["memberinfo", "minfo"])]
    MemberInfo(StreamGroupMember),
    /// Unpin a member so that another of its instances is served.
    #[command(aliases = ["stepdown", "sd"])]
    StepDown(StreamGroupMember),
}

/// `<stream>`
#[derive(Debug, Args)]
pub struct StreamOnly {
    /// The stream.
    pub stream: String,
}

/// `<stream> <group>`
#[derive(Debug, Args)]
pub struct StreamGroup {
    /// The stream.
    pub stream: String,
    /// The group.
    pub group: String,
}

/// `<stream> <group> <member>`
#[derive(Debug, Args)]
pub struct StreamGroupMember {
    /// The stream.
    pub stream: String,
    /// The group.
    pub group: String,
    /// The member.
    pub member: String,
}

/// `<stream> <group> <member>...`
#[derive(Debug, Args)]
pub struct StreamGroupMembers {
    /// The stream.
    pub stream: String,
    /// The group.
    pub group: String,
    /// The members.
    #[arg(required = true)]
    pub members: Vec<String>,
}

/// Parses `member:p1,p2,...`.
///
/// # Errors
/// [`AdminError::Invalid`] naming the bad entry (never ignored, unlike the reference).
pub fn parse_mappings(entries: &[String]) -> Result<Vec<MemberMapping>, AdminError> {
    entries
        .iter()
        .map(|e| {
            let bad = || AdminError::Invalid(vec![format!("{e:?} is not member:p1,p2,...")]);
            let (member, parts) = e.split_once(':').ok_or_else(bad)?;
            let partitions = if parts.trim().is_empty() {
                Vec::new()
            } else {
                parts
                    .split(',')
                    .map(|p| p.trim().parse::<u32>().map_err(|_| bad()))
                    .collect::<Result<_, _>>()?
            };
            Ok(MemberMapping {
                member: member.to_string(),
                partitions,
            })
        })
        .collect()
}

/// Pairs each `--wildcards` with the `--filter` before it, from the raw arguments.
///
/// # Errors
/// [`AdminError::Invalid`] for `--wildcards` without a filter or bad indexes.
pub fn pair_filters(args: &[String]) -> Result<Vec<PartitioningFilter>, AdminError> {
    let mut out: Vec<PartitioningFilter> = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (a.as_str(), None),
        };
        let mut value = || inline.clone().or_else(|| it.next().cloned());
        match flag {
            "--filter" => {
                if let Some(f) = value() {
                    out.push(PartitioningFilter {
                        filter: f,
                        wildcards: Vec::new(),
                    });
                }
            }
            "--wildcards" => {
                let v = value().unwrap_or_default();
                let last = out.last_mut().ok_or_else(|| {
                    AdminError::Invalid(vec!["--wildcards must follow a --filter".into()])
                })?;
                last.wildcards = v
                    .split(',')
                    .filter(|s| !s.trim().is_empty())
                    .map(|s| {
                        s.trim().parse::<u32>().map_err(|_| {
                            AdminError::Invalid(vec![format!(
                                "--wildcards {v:?}: give indexes like 1,2"
                            )])
                        })
                    })
                    .collect::<Result<_, _>>()?;
            }
            _ => {}
        }
    }
    Ok(out)
}

/// How a command's answer is printed: text, or JSON with `--json`.
#[derive(Debug, Clone, Copy)]
struct Out {
    json: bool,
}

impl Out {
    fn done(self, what: String) -> String {
        if self.json {
            json!({"ok": true, "message": what}).to_string()
        } else {
            what
        }
    }

    fn members(self, c: &GroupConfig) -> String {
        if self.json {
            json!({"members": c.members}).to_string()
        } else {
            let shown: Vec<String> = c
                .members
                .iter()
                .take(SHOWN)
                .map(|m| printable(m).into_owned())
                .collect();
            format!("members: {}{}", shown.join(" "), more(c.members.len()))
        }
    }
}

/// What both flavours can be asked.
enum Common {
    Info(StreamGroup),
    Ls(StreamOnly),
    Rm(StreamGroup),
    MemberInfo(StreamGroupMember),
    StepDown(StreamGroupMember),
}

/// Runs a group command; returns what to print.
///
/// # Errors
/// [`AdminError`].
pub async fn run(
    admin: &GroupAdmin,
    cmd: GroupCommand,
    json: bool,
    raw_args: &[String],
) -> Result<String, AdminError> {
    let out = Out { json };
    match cmd {
        GroupCommand::Static(c) => run_static(admin, c, out).await,
        GroupCommand::Elastic(c) => run_elastic(admin, c, out, raw_args).await,
    }
}

async fn run_static(
    admin: &GroupAdmin,
    cmd: StaticCommand,
    out: Out,
) -> Result<String, AdminError> {
    use StaticCommand as S;
    let (group, stream, config) = match cmd {
        S::Create(StaticCreate::Balanced {
            stream,
            group,
            max_members,
            members,
            filters,
        }) => (
            group,
            stream,
            GroupConfig::new_static(max_members, filters, members, vec![]),
        ),
        S::Create(StaticCreate::Mapped {
            stream,
            group,
            max_members,
            mappings,
            filters,
        }) => {
            let mappings = parse_mappings(&mappings)?;
            (
                group,
                stream,
                GroupConfig::new_static(max_members, filters, vec![], mappings),
            )
        }
        S::Info(a) => return common(admin, Flavour::Static, Common::Info(a), out).await,
        S::Ls(a) => return common(admin, Flavour::Static, Common::Ls(a), out).await,
        S::Rm(a) => return common(admin, Flavour::Static, Common::Rm(a), out).await,
        S::MemberInfo(a) => {
            return common(admin, Flavour::Static, Common::MemberInfo(a), out).await;
        }
        S::StepDown(a) => return common(admin, Flavour::Static, Common::StepDown(a), out).await,
    };
    admin.create_static(&stream, &group, config).await?;
    Ok(out.done(format!("static group {group} created on stream {stream}")))
}

async fn run_elastic(
    admin: &GroupAdmin,
    cmd: ElasticCommand,
    out: Out,
    raw_args: &[String],
) -> Result<String, AdminError> {
    use ElasticCommand as E;
    Ok(match cmd {
        E::Create {
            stream,
            group,
            max_members,
            max_buffered_msgs,
            max_buffered_bytes,
            ..
        } => {
            let filters = pair_filters(raw_args)?;
            let config = GroupConfig::new_elastic(
                max_members,
                filters,
                max_buffered_msgs,
                max_buffered_bytes,
            );
            admin.create_elastic(&stream, &group, config).await?;
            out.done(format!("elastic group {group} created on stream {stream}"))
        }
        E::Add(a) => out.members(&admin.add(&a.stream, &a.group, &a.members).await?),
        E::Drop(a) => out.members(&admin.drop_members(&a.stream, &a.group, &a.members).await?),
        E::CreateMapping {
            stream,
            group,
            mappings,
        } => {
            admin
                .set_mappings(&stream, &group, parse_mappings(&mappings)?)
                .await?;
            out.done(format!("mappings set on elastic group {group}"))
        }
        E::DeleteMapping(a) => {
            admin.delete_mappings(&a.stream, &a.group).await?;
            out.done(format!("mappings deleted from elastic group {}", a.group))
        }
        E::Info(a) => common(admin, Flavour::Elastic, Common::Info(a), out).await?,
        E::Ls(a) => common(admin, Flavour::Elastic, Common::Ls(a), out).await?,
        E::Rm(a) => common(admin, Flavour::Elastic, Common::Rm(a), out).await?,
        E::MemberInfo(a) => common(admin, Flavour::Elastic, Common::MemberInfo(a), out).await?,
        E::StepDown(a) => common(admin, Flavour::Elastic, Common::StepDown(a), out).await?,
    })
}

async fn common(
    admin: &GroupAdmin,
    flavour: Flavour,
    cmd: Common,
    out: Out,
) -> Result<String, AdminError> {
    let kind = match flavour {
        Flavour::Static => "static",
        Flavour::Elastic => "elastic",
    };
    Ok(match cmd {
        Common::Info(a) => info(admin.info(flavour, &a.stream, &a.group).await?, out.json),
        Common::Ls(a) => list(admin.list(flavour, &a.stream).await?, out.json),
        Common::Rm(a) => {
            admin.remove(flavour, &a.stream, &a.group).await?;
            out.done(format!("{kind} group {} deleted", a.group))
        }
        Common::MemberInfo(a) => member(
            admin
                .member_info(flavour, &a.stream, &a.group, &a.member)
                .await?,
            out.json,
        ),
        Common::StepDown(a) => {
            admin
                .step_down(flavour, &a.stream, &a.group, &a.member)
                .await?;
            out.done(format!("member {} stepped down", a.member))
        }
    })
}

fn list(groups: Vec<String>, json: bool) -> String {
    if json {
        json!(groups).to_string()
    } else if groups.is_empty() {
        "no groups".into()
    } else {
        groups.join("\n")
    }
}

/// At most this many members are printed as text (`--json` gives every one).
const SHOWN: usize = 100;

/// What follows the first [`SHOWN`] of `total` members.
fn more(total: usize) -> String {
    match total.saturating_sub(SHOWN) {
        0 => String::new(),
        n => format!(" … and {n} more (--json lists every one)"),
    }
}

fn member(r: MemberReport, json: bool) -> String {
    if json {
        return serde_json::to_string(&r).unwrap_or_default();
    }
    format!(
        "member {}: in membership {}, partitions {:?}, consumer {}, active {}, pinned {}",
        printable(&r.member),
        r.in_membership,
        r.partitions,
        r.consumer,
        r.active,
        r.pinned
    )
}

/// The report as text: what the stored config says (member names and filters, which
/// anyone who may write the bucket wrote) escaped for a terminal as `jetrelay dlq`
/// does, and at most [`SHOWN`] members.
fn info(r: GroupReport, json: bool) -> String {
    if json {
        return serde_json::to_string(&r).unwrap_or_default();
    }
    let mut lines = vec![format!(
        "{} group {} on stream {}: {} partitions",
        r.flavour, r.group, r.stream, r.max_members
    )];
    if r.filters.is_empty() {
        lines.push("filters: none (whole stream, whole subject)".into());
    }
    for (i, f) in r.filters.iter().enumerate() {
        let f = printable(f);
        lines.push(match r.wildcards.get(i) {
            Some(w) if w.is_empty() => format!("filter: {f} (whole subject)"),
            Some(w) => format!("filter: {f} (wildcards {w:?})"),
            None => format!("filter: {f}"),
        });
    }
    lines.push(format!(
        "{:<20} {:<20} {:<9} {:<7} pinned",
        "member", "partitions", "consumer", "active"
    ));
    for m in r.member_reports.iter().take(SHOWN) {
        let parts = m
            .partitions
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",");
        lines.push(format!(
            "{:<20} {:<20} {:<9} {:<7} {}",
            printable(&m.member),
            parts,
            m.consumer,
            m.active,
            m.pinned
        ));
    }
    let more = more(r.member_reports.len());
    if !more.is_empty() {
        lines.push(more.trim_start().to_string());
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A command line's words, split at spaces.
    fn a(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn wildcards_pair_with_the_filter_before_them() {
        let f = pair_filters(&a(
            "x --filter foo.*.* --wildcards 1,2 --filter=bar.> --filter baz.* --wildcards=1",
        ))
        .unwrap();
        assert_eq!(
            f,
            vec![
                PartitioningFilter {
                    filter: "foo.*.*".into(),
                    wildcards: vec![1, 2]
                },
                PartitioningFilter {
                    filter: "bar.>".into(),
                    wildcards: vec![]
                },
                PartitioningFilter {
                    filter: "baz.*".into(),
                    wildcards: vec![1]
                },
            ]
        );
        assert!(pair_filters(&a("--wildcards 1")).is_err());
        assert!(pair_filters(&a("--filter a.* --wildcards x")).is_err());
    }

    #[test]
    fn mappings_parse_or_name_the_bad_entry() {
        assert_eq!(
            parse_mappings(&a("m1:0,1 m2:2 m3:")).unwrap(),
            vec![
                MemberMapping {
                    member: "m1".into(),
                    partitions: vec![0, 1]
                },
                MemberMapping {
                    member: "m2".into(),
                    partitions: vec![2]
                },
                MemberMapping {
                    member: "m3".into(),
                    partitions: vec![]
                },
            ]
        );
        let err = parse_mappings(&a("m1:0,x")).unwrap_err();
        assert!(err.to_string().contains("m1:0,x"));
        assert!(parse_mappings(&a("m1")).is_err());
    }

    fn report(members: Vec<String>) -> GroupReport {
        let member_reports = members
            .iter()
            .map(|m| MemberReport {
                member: m.clone(),
                in_membership: true,
                partitions: vec![1],
                consumer: false,
                active: false,
                pinned: false,
            })
            .collect();
        GroupReport {
            stream: "S".into(),
            group: "g".into(),
            flavour: "elastic",
            max_members: 4,
            filters: vec!["a.\u{1b}[2J.>".into()],
            wildcards: vec![vec![]],
            members,
            mappings: Vec::new(),
            member_reports,
        }
    }

    #[test]
    fn info_escapes_what_the_stored_config_says_and_shows_at_most_a_page_of_members() {
        let hostile = vec![
            "\u{1b}]0;owned\u{7}".to_string(),
            "abc\u{202E}fed".to_string(),
        ];
        let text = info(report(hostile), false);
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "{text:?}"
        );
        assert!(!text.contains('\u{202E}'), "{text:?}");
        assert!(
            text.contains("\\u{1b}]0;owned\\u{7}") && text.contains("abc\\u{202e}fed"),
            "{text}"
        );
        let many: Vec<String> = (0..60_000).map(|i| format!("m{i:05}")).collect();
        let text = info(report(many), false);
        assert_eq!(text.lines().count(), 3 + SHOWN + 1, "{}", &text[..200]);
        assert!(
            text.ends_with("… and 59900 more (--json lists every one)"),
            "{}",
            &text[text.len() - 100..]
        );
        let m = member(
            report(vec!["x\u{1b}[31m".into()]).member_reports.remove(0),
            false,
        );
        assert!(m.contains("x\\u{1b}[31m"), "{m}");
    }
}
