//! Group config JSON (spec §4–§5): a typed view over the stored object, read
//! leniently (whatever Go accepts), written strictly, and rewritten preserving the
//! stored representation of every field we do not change (absent / `null` / `[]`,
//! unknown keys, key order) so that running Go and Python members never see a
//! spurious change.

use serde_json::{Map, Value, json};
use std::collections::HashSet;

use crate::subject;

/// The most partitions (N) a group may have, on write and on read.
pub const MAX_PARTITIONS: u32 = 100_000;
/// The most members a balanced membership may list.
pub const MAX_MEMBERS: usize = 100_000;
/// The most filters a group may have.
pub const MAX_FILTERS: usize = 1_000;

/// Static or elastic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavour {
    /// `static-consumer-groups`.
    Static,
    /// `elastic-consumer-groups`.
    Elastic,
}

impl Flavour {
    /// Its name, as `source.kind` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Flavour::Static => "static",
            Flavour::Elastic => "elastic",
        }
    }

    /// The KV bucket of this flavour's group configs.
    pub fn bucket(self) -> &'static str {
        match self {
            Flavour::Static => super::STATIC_BUCKET,
            Flavour::Elastic => super::ELASTIC_BUCKET,
        }
    }
}

/// An explicit assignment of partitions to a member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberMapping {
    /// The member.
    pub member: String,
    /// Its partitions, in the order given.
    pub partitions: Vec<u32>,
}

/// An elastic partitioning filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitioningFilter {
    /// The subject filter on the origin stream.
    pub filter: String,
    /// 1-based indexes of the `*` tokens that are hashed; empty = whole subject.
    pub wildcards: Vec<u32>,
}

/// A group config: the typed view plus the stored JSON object.
#[derive(Debug, Clone)]
pub struct GroupConfig {
    /// Static or elastic.
    pub flavour: Flavour,
    /// N, the number of partitions.
    pub max_members: u32,
    /// Static: the filters (empty = `>`).
    pub filters: Vec<String>,
    /// Elastic: the partitioning filters (empty = whole stream, whole subject).
    pub partitioning: Vec<PartitioningFilter>,
    /// Elastic: the group stream's `max_msgs` (≤ 0 = unlimited).
    pub max_buffered_msgs: i64,
    /// Elastic: the group stream's `max_bytes` (≤ 0 = unlimited).
    pub max_buffered_bytes: i64,
    /// Balanced membership.
    pub members: Vec<String>,
    /// Explicit assignment.
    pub member_mappings: Vec<MemberMapping>,
    raw: Map<String, Value>,
}

/// Why a stored config cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// Not JSON.
    #[error("the group config is not JSON")]
    Json(#[source] serde_json::Error),
    /// JSON, but not an object.
    #[error("the group config is not a JSON object")]
    NotAnObject,
    /// A field has a type Go would refuse.
    #[error("the group config field {key} {problem}")]
    Field {
        /// The key.
        key: &'static str,
        /// What is wrong.
        problem: &'static str,
    },
    /// The pre-multi-filter schema (top-level `filter`).
    #[error(
        "the group config uses the legacy single-filter schema: delete and re-create the group"
    )]
    Legacy,
}

/// An array field (absent or `null`: empty), each item read by `item`; `problem`
/// says what an item that does not read is not.
fn array<'a, T>(
    v: Option<&'a Value>,
    key: &'static str,
    item: impl Fn(&'a Value) -> Option<T>,
    problem: &'static str,
) -> Result<Vec<T>, ModelError> {
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| item(x).ok_or(ModelError::Field { key, problem }))
            .collect(),
        Some(_) => Err(ModelError::Field {
            key,
            problem: "must be an array",
        }),
    }
}

fn strings(v: Option<&Value>, key: &'static str) -> Result<Vec<String>, ModelError> {
    let string = |x: &Value| x.as_str().map(str::to_string);
    array(v, key, string, "must be an array of strings")
}

fn numbers(v: Option<&Value>, key: &'static str) -> Result<Vec<u32>, ModelError> {
    let number = |x: &Value| x.as_u64().and_then(|n| u32::try_from(n).ok());
    array(v, key, number, "must be an array of non-negative integers")
}

fn objects<'a>(
    v: Option<&'a Value>,
    key: &'static str,
) -> Result<Vec<&'a Map<String, Value>>, ModelError> {
    array(v, key, Value::as_object, "must be an array of objects")
}

fn int64(v: Option<&Value>, key: &'static str) -> Result<i64, ModelError> {
    match v {
        None | Some(Value::Null) => Ok(0),
        Some(x) => x.as_i64().ok_or(ModelError::Field {
            key,
            problem: "must be an integer",
        }),
    }
}

impl GroupConfig {
    /// Reads a stored config leniently: anything Go decodes is accepted.
    ///
    /// # Errors
    /// [`ModelError`] for what Go would also refuse, and for the legacy schema.
    pub fn parse(flavour: Flavour, bytes: &[u8]) -> Result<GroupConfig, ModelError> {
        let value: Value = serde_json::from_slice(bytes).map_err(ModelError::Json)?;
        let Value::Object(raw) = value else {
            return Err(ModelError::NotAnObject);
        };
        if raw.contains_key("filter") {
            return Err(ModelError::Legacy);
        }
        let max_members = match raw.get("max_members") {
            None | Some(Value::Null) => 0,
            Some(v) => v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or(ModelError::Field {
                    key: "max_members",
                    problem: "must be a non-negative integer",
                })?,
        };
        let member_mappings = objects(raw.get("member_mappings"), "member_mappings")?
            .into_iter()
            .map(|m| {
                Ok(MemberMapping {
                    member: m
                        .get("member")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    partitions: numbers(m.get("partitions"), "member_mappings.partitions")?,
                })
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        let mut config = GroupConfig {
            flavour,
            max_members,
            filters: Vec::new(),
            partitioning: Vec::new(),
            max_buffered_msgs: 0,
            max_buffered_bytes: 0,
            members: strings(raw.get("members"), "members")?,
            member_mappings,
            raw: Map::new(),
        };
        match flavour {
            Flavour::Static => config.filters = strings(raw.get("filters"), "filters")?,
            Flavour::Elastic => {
                config.partitioning =
                    objects(raw.get("partitioning_filters"), "partitioning_filters")?
                        .into_iter()
                        .map(|f| {
                            Ok(PartitioningFilter {
                                filter: f
                                    .get("filter")
                                    .and_then(Value::as_str)
                                    .unwrap_or_default()
                                    .to_string(),
                                wildcards: numbers(
                                    f.get("partitioning_wildcards"),
                                    "partitioning_filters.partitioning_wildcards",
                                )?,
                            })
                        })
                        .collect::<Result<Vec<_>, ModelError>>()?;
                config.filters = config
                    .partitioning
                    .iter()
                    .map(|f| f.filter.clone())
                    .collect();
                config.max_buffered_msgs = int64(raw.get("max_buffered_msg"), "max_buffered_msg")?;
                config.max_buffered_bytes =
                    int64(raw.get("max_buffered_bytes"), "max_buffered_bytes")?;
            }
        }
        config.raw = raw;
        Ok(config)
    }

    /// A new static config.
    pub fn new_static(
        max_members: u32,
        filters: Vec<String>,
        members: Vec<String>,
        mappings: Vec<MemberMapping>,
    ) -> GroupConfig {
        GroupConfig {
            flavour: Flavour::Static,
            max_members,
            filters,
            partitioning: Vec::new(),
            max_buffered_msgs: 0,
            max_buffered_bytes: 0,
            members,
            member_mappings: mappings,
            raw: Map::new(),
        }
    }

    /// A new elastic config (membership is added later).
    pub fn new_elastic(
        max_members: u32,
        partitioning: Vec<PartitioningFilter>,
        max_msgs: i64,
        max_bytes: i64,
    ) -> GroupConfig {
        GroupConfig {
            flavour: Flavour::Elastic,
            max_members,
            filters: partitioning.iter().map(|f| f.filter.clone()).collect(),
            partitioning,
            max_buffered_msgs: max_msgs,
            max_buffered_bytes: max_bytes,
            members: Vec::new(),
            member_mappings: Vec::new(),
            raw: Map::new(),
        }
    }

    /// The JSON to store: a new config in the reference's field order and omission
    /// rules (wildcards always an array), or, for a config read from the server, the
    /// stored object with only the membership replaced.
    pub fn to_json(&self) -> Vec<u8> {
        let mut obj = if self.raw.is_empty() {
            self.fresh()
        } else {
            self.raw.clone()
        };
        let mappings: Vec<Value> = self
            .member_mappings
            .iter()
            .map(|m| json!({"member": m.member, "partitions": m.partitions}))
            .collect();
        for (key, value) in [
            ("members", json!(self.members)),
            ("member_mappings", Value::Array(mappings)),
        ] {
            if value.as_array().is_some_and(Vec::is_empty) {
                obj.remove(key);
            } else {
                obj.insert(key.to_string(), value);
            }
        }
        // Serialising a Value cannot fail.
        serde_json::to_vec(&Value::Object(obj)).unwrap_or_default()
    }

    fn fresh(&self) -> Map<String, Value> {
        let mut obj = Map::new();
        obj.insert("max_members".into(), json!(self.max_members));
        match self.flavour {
            Flavour::Static => {
                if !self.filters.is_empty() {
                    obj.insert("filters".into(), json!(self.filters));
                }
            }
            Flavour::Elastic => {
                if !self.partitioning.is_empty() {
                    let filters: Vec<Value> = self
                        .partitioning
                        .iter()
                        .map(|f| json!({"filter": f.filter, "partitioning_wildcards": f.wildcards}))
                        .collect();
                    obj.insert("partitioning_filters".into(), Value::Array(filters));
                }
                if self.max_buffered_msgs != 0 {
                    obj.insert("max_buffered_msg".into(), json!(self.max_buffered_msgs));
                }
                if self.max_buffered_bytes != 0 {
                    obj.insert("max_buffered_bytes".into(), json!(self.max_buffered_bytes));
                }
            }
        }
        obj
    }

    /// Whether the immutable part (N, filters, buffers) means the same, comparing
    /// semantically (absent = `null` = `[]`; every non-positive buffer = unlimited).
    pub fn same_shape(&self, other: &GroupConfig) -> bool {
        let limit = |n: i64| if n <= 0 { -1 } else { n };
        self.flavour == other.flavour
            && self.max_members == other.max_members
            && self.filters == other.filters
            && self.partitioning == other.partitioning
            && limit(self.max_buffered_msgs) == limit(other.max_buffered_msgs)
            && limit(self.max_buffered_bytes) == limit(other.max_buffered_bytes)
    }

    /// The rules the reference checks (spec §5.1, §5.2); empty = valid. Running
    /// members apply only these (lenient on read).
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        let n = self.max_members;
        if n < 1 {
            p.push("the max number of members must be >= 1".to_string());
        }
        // The config comes from a bucket anyone with access may write: the limits of
        // what this implementation writes hold on read too, so that a hostile or
        // broken value costs bounded memory and time.
        if n > MAX_PARTITIONS {
            p.push(format!("max members must be at most {MAX_PARTITIONS}"));
        }
        if self.members.len() > MAX_MEMBERS {
            p.push(format!("at most {MAX_MEMBERS} members"));
        }
        if self.partitioning.len() > MAX_FILTERS || self.filters.len() > MAX_FILTERS {
            p.push(format!("at most {MAX_FILTERS} filters"));
        }
        if !p.is_empty() && n > MAX_PARTITIONS {
            // The checks below are linear in N: not with this N.
            return p;
        }
        if !self.members.is_empty() && !self.member_mappings.is_empty() {
            p.push("either members or member mappings must be provided, not both".into());
        }
        if !self.member_mappings.is_empty() {
            if self.member_mappings.len() > n as usize {
                p.push(
                    "the number of member mappings must be between 1 and the max number of members"
                        .into(),
                );
            }
            let mut names = HashSet::new();
            let mut seen = HashSet::new();
            for m in &self.member_mappings {
                if !names.insert(&m.member) {
                    p.push("member names must be unique".into());
                }
                for part in &m.partitions {
                    if *part >= n {
                        p.push("partition numbers must be between 0 and one less than the max number of members".into());
                    } else if !seen.insert(*part) {
                        p.push("partition numbers must be used only once".into());
                    }
                }
            }
            if seen.len() != n as usize {
                p.push("the number of unique partition numbers in the mappings must be equal to the max number of members".into());
            }
        }
        for f in &self.partitioning {
            if f.filter.is_empty() {
                p.push("partitioning filters must have a non-empty filter".into());
                continue;
            }
            let tokens: Vec<&str> = f.filter.split('.').collect();
            let stars = tokens.iter().filter(|t| **t == "*").count();
            if stars == 0 && tokens.last() != Some(&">") {
                p.push(
                    "partitioning filters must have at least one * wildcard or end with > wildcard"
                        .into(),
                );
            }
            if f.wildcards.len() > stars {
                p.push("the number of partitioning wildcards must not be larger than the total number of * wildcards in the filter".into());
            }
            let mut seen = HashSet::new();
            for w in &f.wildcards {
                if !seen.insert(*w) {
                    p.push("partitioning wildcard indexes must be unique".into());
                } else if *w < 1 || *w as usize > stars {
                    p.push("partitioning wildcard indexes must be between 1 and the number of * wildcards in the filter".into());
                }
            }
        }
        p.dedup();
        p
    }

    /// Reads a stored config and checks it: what a member or the admin commands may
    /// act on. A value that does not parse, or breaks a rule or a limit, is refused
    /// with every problem, and nothing is computed from it.
    ///
    /// # Errors
    /// The problems, one sentence each.
    pub fn read(flavour: Flavour, bytes: &[u8]) -> Result<GroupConfig, Vec<String>> {
        let config = GroupConfig::parse(flavour, bytes)
            .map_err(|e| vec![crate::ops::telemetry::chain(&e)])?;
        let problems = config.problems();
        if problems.is_empty() {
            Ok(config)
        } else {
            Err(problems)
        }
    }

    /// [`GroupConfig::problems`] plus what this implementation also requires of what
    /// it writes: names, subject syntax, no overlapping filters.
    pub fn strict_problems(&self) -> Vec<String> {
        let mut p = self.problems();
        let names = self
            .members
            .iter()
            .chain(self.member_mappings.iter().map(|m| &m.member));
        for name in names {
            if let Err(e) = member_name(name) {
                p.push(format!("member {name:?}: {e}"));
            }
        }
        for f in &self.filters {
            if let Err(e) = subject::validate_filter(f) {
                p.push(format!("filter {f:?}: {e}"));
            }
        }
        if let Some(e) = subject::first_overlap(&self.filters) {
            p.push(format!("filters must not overlap: {e}"));
        }
        if self.flavour == Flavour::Static
            && !self.member_mappings.is_empty()
            && self.filters.iter().any(|f| f != ">")
        {
            p.push("static groups with member mappings consume whole partitions: their filters are ignored, so give none".into());
        }
        p
    }
}

/// Member, group and stream names: `[A-Za-z0-9_=-]+`, at most 200 characters (they
/// become consumer and stream names, joined with a `-`).
///
/// # Errors
/// A sentence saying what is wrong.
pub fn member_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 200 {
        return Err("must be 1 to 200 characters".into());
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"_=-".contains(&b))
    {
        return Err("may only contain letters, digits, '_', '=' and '-'".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_e(s: &str) -> GroupConfig {
        GroupConfig::parse(Flavour::Elastic, s.as_bytes()).unwrap()
    }

    #[test]
    fn every_go_and_python_shape_is_read() {
        let cases = [
            r#"{"max_members":10,"partitioning_filters":null}"#,
            r#"{"max_members":10,"partitioning_filters":[]}"#,
            r#"{"max_members":10}"#,
            r#"{"max_members": 10, "max_buffered_msg": -1, "max_buffered_bytes": -1}"#,
        ];
        for c in cases {
            let g = parse_e(c);
            assert_eq!(g.max_members, 10, "{c}");
            assert!(g.partitioning.is_empty(), "{c}");
            assert!(g.problems().is_empty(), "{c}: {:?}", g.problems());
        }
        let g = parse_e(
            r#"{"max_members":4,"partitioning_filters":[{"filter":"foo.\u003e","partitioning_wildcards":null},{"filter":"bar.*","partitioning_wildcards":[1]}],"members":["m2","m1"]}"#,
        );
        assert_eq!(
            g.partitioning[0],
            PartitioningFilter {
                filter: "foo.>".into(),
                wildcards: vec![]
            }
        );
        assert_eq!(g.partitioning[1].wildcards, [1]);
        assert_eq!(g.members, ["m2", "m1"]);
        let s = GroupConfig::parse(
            Flavour::Static,
            br#"{"max_members":4,"member_mappings":[{"member":"m1","partitions":[0,1]},{"member":"m2","partitions":null}]}"#,
        )
        .unwrap();
        assert_eq!(s.member_mappings[1].partitions, Vec::<u32>::new());
    }

    #[test]
    fn what_go_refuses_is_refused() {
        let field =
            |key| move |e: &ModelError| matches!(e, ModelError::Field { key: k, .. } if *k == key);
        type Is<'a> = &'a dyn Fn(&ModelError) -> bool;
        let cases: [(&str, Is); 6] = [
            (r#"{"max_members":-1}"#, &field("max_members")),
            (r#"{"max_members":2.5}"#, &field("max_members")),
            (r#"{"max_members":2,"members":"m1"}"#, &field("members")),
            (r#"[1]"#, &|e| matches!(e, ModelError::NotAnObject)),
            (r#"not json"#, &|e| matches!(e, ModelError::Json(_))),
            (
                r#"{"max_members":2,"filter":"foo.*","partitioning_wildcards":[1]}"#,
                &|e| matches!(e, ModelError::Legacy),
            ),
        ];
        for (c, is) in cases {
            let err = GroupConfig::parse(Flavour::Elastic, c.as_bytes()).unwrap_err();
            assert!(is(&err), "{c}: {err:?}");
        }
    }

    /// Found by fuzzing (fuzz/corpus/stored_records/crash-7f7de4d4…): a number in
    /// a field jetrelay does not know, past what i64 and u64 hold, was read as a
    /// float one bit off (serde_json's fast path), so that every write-back changed
    /// it again. Read correctly rounded, as Go reads it, it is written back as read.
    #[test]
    fn an_unknown_fields_number_is_written_back_as_it_was_read() {
        for big in [
            "3".repeat(50),
            "1.0000000000000002e+39".into(),
            "9".repeat(400),
        ] {
            let stored = format!(r#"{{"max_members":1,"x_peer":{big}}}"#);
            let Ok(g) = GroupConfig::parse(Flavour::Static, stored.as_bytes()) else {
                continue;
            };
            let once = String::from_utf8(g.to_json()).unwrap();
            let again = GroupConfig::parse(Flavour::Static, once.as_bytes()).unwrap();
            assert_eq!(String::from_utf8(again.to_json()).unwrap(), once);
        }
    }

    #[test]
    fn a_rewrite_changes_only_the_membership_and_keeps_everything_else() {
        let stored = r#"{"max_members":4,"partitioning_filters":null,"x_future":{"a":1},"members":["m2","m1"]}"#;
        let mut g = parse_e(stored);
        g.members = vec!["m1".into(), "m2".into(), "m3".into()];
        let out: Value = serde_json::from_slice(&g.to_json()).unwrap();
        assert_eq!(
            out,
            serde_json::json!({"max_members":4,"partitioning_filters":null,"x_future":{"a":1},"members":["m1","m2","m3"]})
        );
        let keys: Vec<&String> = out.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            ["max_members", "partitioning_filters", "x_future", "members"],
            "key order kept"
        );
        g.members.clear();
        let out: Value = serde_json::from_slice(&g.to_json()).unwrap();
        assert!(out.get("members").is_none(), "empty membership is omitted");
        assert!(
            out.get("partitioning_filters").unwrap().is_null(),
            "null stays null"
        );
    }

    #[test]
    fn new_configs_are_written_in_the_reference_form() {
        let e = GroupConfig::new_elastic(
            2,
            vec![
                PartitioningFilter {
                    filter: "foo.*".into(),
                    wildcards: vec![1],
                },
                PartitioningFilter {
                    filter: "bar.>".into(),
                    wildcards: vec![],
                },
            ],
            -1,
            0,
        );
        assert_eq!(
            String::from_utf8(e.to_json()).unwrap(),
            r#"{"max_members":2,"partitioning_filters":[{"filter":"foo.*","partitioning_wildcards":[1]},{"filter":"bar.>","partitioning_wildcards":[]}],"max_buffered_msg":-1}"#
        );
        let s = GroupConfig::new_static(
            2,
            vec!["foo.*".into()],
            vec!["m1".into(), "m2".into()],
            vec![],
        );
        assert_eq!(
            String::from_utf8(s.to_json()).unwrap(),
            r#"{"max_members":2,"filters":["foo.*"],"members":["m1","m2"]}"#
        );
        let m = GroupConfig::new_static(
            2,
            vec![],
            vec![],
            vec![MemberMapping {
                member: "m1".into(),
                partitions: vec![0, 1],
            }],
        );
        assert_eq!(
            String::from_utf8(m.to_json()).unwrap(),
            r#"{"max_members":2,"member_mappings":[{"member":"m1","partitions":[0,1]}]}"#
        );
        let round = GroupConfig::parse(Flavour::Elastic, &e.to_json()).unwrap();
        assert!(round.same_shape(&e));
    }

    fn mapping(m: &str, p: &[u32]) -> MemberMapping {
        MemberMapping {
            member: m.into(),
            partitions: p.to_vec(),
        }
    }

    #[test]
    fn the_reference_validation_table() {
        let filter = vec![PartitioningFilter {
            filter: "foo.*".into(),
            wildcards: vec![1],
        }];
        let with = |n: u32, members: &[&str], maps: &[(&str, &[u32])]| {
            let mut g = GroupConfig::new_elastic(n, filter.clone(), 0, 0);
            g.members = members.iter().map(|m| m.to_string()).collect();
            g.member_mappings = maps.iter().map(|(m, p)| mapping(m, p)).collect();
            g.problems().is_empty()
        };
        assert!(with(2, &["m1", "m2"], &[]));
        assert!(!with(2, &["m1"], &[("m1", &[0, 1])]));
        assert!(with(2, &[], &[("m1", &[0, 1])]));
        assert!(!with(2, &[], &[("m1", &[1, 1])]));
        assert!(!with(2, &[], &[("m1", &[1])]));
        assert!(!with(2, &[], &[("m1", &[0, 1, 2])]));
        assert!(!with(2, &[], &[("m1", &[0, 2])]));
        assert!(!with(2, &[], &[("m1", &[0]), ("m1", &[1])]));
        assert!(!with(2, &[], &[("m1", &[0, 1]), ("m2", &[0, 1])]));
        assert!(!with(2, &[], &[("m1", &[2, 3])]));
        assert!(with(2, &[], &[("m1", &[0]), ("m2", &[1])]));
        assert!(!with(3, &[], &[("m1", &[0]), ("m2", &[1])]));
        assert!(!with(3, &[], &[("m1", &[0, 2]), ("m2", &[1, 2])]));
        assert!(with(3, &[], &[("m1", &[0, 2]), ("m2", &[1])]));
        assert!(!with(0, &[], &[]));
        let bad = |f: &str, w: &[u32]| {
            GroupConfig::new_elastic(
                2,
                vec![PartitioningFilter {
                    filter: f.into(),
                    wildcards: w.to_vec(),
                }],
                0,
                0,
            )
            .problems()
            .is_empty()
        };
        assert!(!bad("", &[]));
        assert!(!bad("foo.bar", &[]));
        assert!(bad("foo.>", &[]));
        assert!(!bad("foo.*", &[1, 2]));
        assert!(!bad("foo.*.*", &[1, 1]));
        assert!(!bad("foo.*", &[0]));
        assert!(bad("foo.*.*.>", &[2, 1]));
    }

    #[test]
    fn strict_writes_check_names_syntax_and_overlap() {
        let mut g = GroupConfig::new_static(
            2,
            vec!["a.*".into(), "a.b".into()],
            vec!["ok".into(), "bad name".into()],
            vec![],
        );
        let p = g.strict_problems();
        assert!(p.iter().any(|x| x.contains("overlap")), "{p:?}");
        assert!(p.iter().any(|x| x.contains("bad name")), "{p:?}");
        g.filters = vec!["a..b".into()];
        assert!(g.strict_problems().iter().any(|x| x.contains("a..b")));
        assert!(member_name("m-1_x=").is_ok());
        assert!(member_name("a.b").is_err());
    }
}
