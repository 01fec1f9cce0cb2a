//! The shipped operations files checked against the daemon: every `jetrelay_*` metric
//! (and label value) that the Grafana dashboard, the Prometheus alert rules and the
//! KEDA triggers (deploy/keda/, when there) query is exposed by a running daemon, and
//! the TOML in the Kubernetes ConfigMap passes the checks `jetrelay check` makes before
//! it connects.
//!
//! There is no YAML parser among the dependencies: the few YAML shapes read here
//! (a rule's `expr`, a ConfigMap's and a Secret's entries) are read by hand, and each
//! reader checks that it found what it expected rather than silently nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use figment::Figment;
use figment::providers::{Format, Toml};

use crate::support::groups::*;
use crate::support::*;

const T: Duration = Duration::from_secs(30);

/// Labels the scrape adds (Kubernetes service discovery, a PodMonitor, or a plain
/// static config): a query may match or group on them, the daemon never exposes them.
const TARGET_LABELS: &[&str] = &[
    "job",
    "instance",
    "namespace",
    "pod",
    "container",
    "endpoint",
    "service",
    "node",
];

fn repo_file(path: &str) -> String {
    let full = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

// ---------------------------------------------------------------------------------
// The exposition: families (from HELP/TYPE lines and samples) and their label values.

#[derive(Debug, Default)]
struct Exposition {
    /// Family name → type (`untyped` when only samples named it).
    families: BTreeMap<String, String>,
    /// Family name → label name → values seen.
    labels: BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
}

impl Exposition {
    fn parse(text: &str) -> Exposition {
        let mut e = Exposition::default();
        for line in text.lines() {
            let line = line.trim();
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut parts = rest.split_whitespace();
                if let (Some(name), Some(kind)) = (parts.next(), parts.next()) {
                    e.families.insert(name.to_string(), kind.to_string());
                }
            } else if let Some(rest) = line.strip_prefix("# HELP ") {
                if let Some(name) = rest.split_whitespace().next() {
                    e.families
                        .entry(name.to_string())
                        .or_insert_with(|| "untyped".into());
                }
            } else if !line.is_empty() && !line.starts_with('#') {
                let end = line.find(['{', ' ']).unwrap_or(line.len());
                let family = e.family_of(&line[..end]);
                e.families
                    .entry(family.clone())
                    .or_insert_with(|| "untyped".into());
                let entry = e.labels.entry(family).or_default();
                if let Some(open) = line[end..].strip_prefix('{') {
                    let matchers = parse_matchers(open).unwrap_or_else(|why| {
                        panic!("exposition line {line:?} does not parse: {why}")
                    });
                    for m in matchers.0 {
                        entry.entry(m.label).or_default().insert(m.value);
                    }
                }
            }
        }
        e
    }

    /// The family a sample or queried name belongs to: a histogram's (or summary's)
    /// `_bucket`, `_sum` and `_count` series belong to it.
    fn family_of(&self, name: &str) -> String {
        for suffix in ["_bucket", "_sum", "_count"] {
            if let Some(base) = name.strip_suffix(suffix)
                && matches!(
                    self.families.get(base).map(String::as_str),
                    Some("histogram" | "summary")
                )
            {
                return base.to_string();
            }
        }
        name.to_string()
    }

    /// Whether the family has the label at all.
    fn has_label(&self, family: &str, label: &str) -> bool {
        self.labels
            .get(family)
            .is_some_and(|l| l.contains_key(label))
    }

    fn label_values(&self, family: &str, label: &str) -> BTreeSet<String> {
        self.labels
            .get(family)
            .and_then(|l| l.get(label))
            .cloned()
            .unwrap_or_default()
    }
}

// ---------------------------------------------------------------------------------
// A rough PromQL reader: metric names, their matchers, and grouping labels.

#[derive(Debug, Clone, PartialEq, Eq)]
struct Matcher {
    label: String,
    op: String,
    value: String,
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Query {
    /// Each `jetrelay_*` name with the matchers written right after it.
    metrics: Vec<(String, Vec<Matcher>)>,
    /// Labels in `by (…)`, `without (…)`, `on (…)`, `ignoring (…)`, `group_left (…)`,
    /// `group_right (…)`.
    grouping: BTreeSet<String>,
    /// Labels a `label_replace` writes.
    made: BTreeSet<String>,
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// Reads a quoted string starting at `s[0]` (`"`, `'` or `` ` ``); returns its value
/// and the bytes consumed.
fn quoted(s: &str) -> Result<(String, usize), String> {
    let mut chars = s.char_indices();
    let Some((_, quote)) = chars.next() else {
        return Err("expected a string".into());
    };
    if !matches!(quote, '"' | '\'' | '`') {
        return Err(format!("expected a string at {s:?}"));
    }
    let mut value = String::new();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' if quote != '`' => {
                if let Some((_, e)) = chars.next() {
                    value.push(e);
                }
            }
            c if c == quote => return Ok((value, i + c.len_utf8())),
            c => value.push(c),
        }
    }
    Err(format!("unterminated string in {s:?}"))
}

/// Parses `label op "value", …}` (the text after `{`); returns the matchers and the
/// bytes consumed up to and including `}`.
fn parse_matchers(s: &str) -> Result<(Vec<Matcher>, usize), String> {
    let mut out = Vec::new();
    let mut at = 0;
    loop {
        at += s[at..].len() - s[at..].trim_start().len();
        if s[at..].starts_with('}') {
            return Ok((out, at + 1));
        }
        let label: String = s[at..].chars().take_while(|c| is_ident(*c)).collect();
        if label.is_empty() {
            return Err(format!("expected a label name at {:?}", &s[at..]));
        }
        at += label.len();
        at += s[at..].len() - s[at..].trim_start().len();
        let op = ["=~", "!~", "!=", "="]
            .into_iter()
            .find(|op| s[at..].starts_with(op))
            .ok_or_else(|| format!("expected a match operator at {:?}", &s[at..]))?;
        at += op.len();
        at += s[at..].len() - s[at..].trim_start().len();
        let (value, used) = quoted(&s[at..])?;
        at += used;
        out.push(Matcher {
            label,
            op: op.to_string(),
            value,
        });
        at += s[at..].len() - s[at..].trim_start().len();
        if let Some(rest) = s[at..].strip_prefix(',') {
            at = s.len() - rest.len();
        } else if !s[at..].starts_with('}') {
            return Err(format!("expected , or }} at {:?}", &s[at..]));
        }
    }
}

/// The label names in `( a, b )` at the start of `s`, and the bytes consumed.
fn parse_label_list(s: &str) -> Result<(Vec<String>, usize), String> {
    let close = s
        .find(')')
        .ok_or_else(|| format!("unclosed label list {s:?}"))?;
    let labels = s[1..close]
        .split(',')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    Ok((labels, close + 1))
}

/// The label `label_replace(v, "dst", …)` writes, given the text after its `(`.
fn label_replace_target(s: &str) -> Result<String, String> {
    let mut depth = 0i32;
    let mut at = 0;
    while at < s.len() {
        let c = s[at..].chars().next().unwrap_or(' ');
        match c {
            '"' | '\'' | '`' => {
                at += quoted(&s[at..])?.1;
                continue;
            }
            '(' | '{' | '[' => depth += 1,
            ')' | '}' | ']' => depth -= 1,
            ',' if depth == 0 => {
                let rest = s[at + 1..].trim_start();
                return Ok(quoted(rest)?.0);
            }
            _ => {}
        }
        at += c.len_utf8();
    }
    Err(format!("label_replace without a target label: {s:?}"))
}

fn parse_query(expr: &str) -> Result<Query, String> {
    let mut q = Query::default();
    let mut at = 0;
    while at < expr.len() {
        let rest = &expr[at..];
        let c = rest.chars().next().unwrap_or(' ');
        if matches!(c, '"' | '\'' | '`') {
            at += quoted(rest)?.1;
            continue;
        }
        if c == '#' {
            // A PromQL comment runs to the end of the line.
            at += rest.find('\n').unwrap_or(rest.len());
            continue;
        }
        if c == '{' {
            // Matchers without a metric name before them (`{__name__=…}`): never a
            // jetrelay name here, but skip their strings.
            at += 1 + parse_matchers(&rest[1..])?.1;
            continue;
        }
        if !(c.is_ascii_alphabetic() || c == '_' || c == ':') {
            at += c.len_utf8();
            continue;
        }
        let ident: String = rest.chars().take_while(|c| is_ident(*c)).collect();
        at += ident.len();
        let after = expr[at..].trim_start();
        let gap = expr[at..].len() - after.len();
        if ident.starts_with("jetrelay_") {
            let mut matchers = Vec::new();
            if let Some(inner) = after.strip_prefix('{') {
                let (m, used) = parse_matchers(inner)?;
                matchers = m;
                at += gap + 1 + used;
            }
            q.metrics.push((ident, matchers));
        } else if matches!(
            ident.as_str(),
            "by" | "without" | "on" | "ignoring" | "group_left" | "group_right"
        ) && after.starts_with('(')
        {
            let (labels, used) = parse_label_list(after)?;
            q.grouping.extend(labels);
            at += gap + used;
        } else if ident == "label_replace" && after.starts_with('(') {
            q.made.insert(label_replace_target(&after[1..])?);
        }
    }
    Ok(q)
}

/// Whether a regex matcher's value is a plain alternation (`a|b|c`) whose parts can
/// be checked one by one.
fn plain_alternatives(value: &str) -> Option<Vec<&str>> {
    let parts: Vec<&str> = value.split('|').collect();
    parts
        .iter()
        .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .then_some(parts)
}

/// What each `(where, expr)` asks for that the exposition does not have: a metric
/// name, a label, a label value. Empty when everything is exposed.
fn unexposed(exprs: &[(String, String)], exposition: &Exposition) -> Vec<String> {
    let mut problems = Vec::new();
    for (place, expr) in exprs {
        let q = match parse_query(expr) {
            Ok(q) => q,
            Err(why) => {
                problems.push(format!("{place}: cannot read {expr:?}: {why}"));
                continue;
            }
        };
        let mut families = BTreeSet::new();
        for (name, matchers) in &q.metrics {
            let family = exposition.family_of(name);
            if !exposition.families.contains_key(&family) {
                problems.push(format!("{place}: metric {name} is not exposed"));
                continue;
            }
            families.insert(family.clone());
            for m in matchers {
                if TARGET_LABELS.contains(&m.label.as_str()) || m.label == "le" {
                    continue;
                }
                if !exposition.has_label(&family, &m.label) {
                    problems.push(format!(
                        "{place}: {name} has no label {:?} (in {expr:?})",
                        m.label
                    ));
                    continue;
                }
                if m.value.contains('$') || !(m.op == "=" || m.op == "=~") {
                    continue;
                }
                let wanted = if m.op == "=" {
                    vec![m.value.as_str()]
                } else if let Some(parts) = plain_alternatives(&m.value) {
                    parts
                } else {
                    continue;
                };
                let have = exposition.label_values(&family, &m.label);
                for v in wanted {
                    if !have.contains(v) {
                        problems.push(format!(
                            "{place}: {name}{{{}={v:?}}} is never exposed (values: {have:?})",
                            m.label
                        ));
                    }
                }
            }
        }
        for label in &q.grouping {
            let known = TARGET_LABELS.contains(&label.as_str())
                || label == "le"
                || q.made.contains(label)
                || families.iter().any(|f| exposition.has_label(f, label));
            if !known {
                problems.push(format!(
                    "{place}: groups or joins on label {label:?}, which none of {families:?} has"
                ));
            }
        }
    }
    problems
}

// ---------------------------------------------------------------------------------
// The dashboard and the rule file.

fn dashboard() -> serde_json::Value {
    let text = repo_file("deploy/grafana/jetrelay.json");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("jetrelay.json is not JSON: {e}"))
}

/// Every panel, rows' nested panels included.
fn panels(dashboard: &serde_json::Value) -> Vec<&serde_json::Value> {
    fn walk<'a>(list: &'a serde_json::Value, out: &mut Vec<&'a serde_json::Value>) {
        for p in list.as_array().into_iter().flatten() {
            out.push(p);
            walk(&p["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out
}

/// Every query of the dashboard: the panels' target exprs and the template
/// variables' queries, each with where it is.
fn dashboard_exprs(dashboard: &serde_json::Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in panels(dashboard) {
        for t in p["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = t["expr"].as_str() {
                out.push((
                    format!("panel {:?}", p["title"].as_str().unwrap_or("?")),
                    expr.to_string(),
                ));
            }
        }
    }
    for v in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let query = v["query"]["query"].as_str().or(v["query"].as_str());
        if v["type"] == "query"
            && let Some(q) = query
        {
            out.push((
                format!("variable {:?}", v["name"].as_str().unwrap_or("?")),
                q.to_string(),
            ));
        }
    }
    out
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

/// A YAML scalar's value, given the text after `key:` on its line and the lines
/// after it: a block scalar (`|`, `>`, with chomping), a quoted or a plain scalar
/// (continuation lines are those indented deeper than the key). Returns the value
/// and how many following lines it took.
fn yaml_scalar(rest: &str, key_indent: usize, following: &[&str]) -> (String, usize) {
    let rest = rest.trim();
    let taken = following
        .iter()
        .take_while(|l| l.trim().is_empty() || indent(l) > key_indent)
        .count();
    // Trailing blank lines belong to what follows, not to this value.
    let taken = following[..taken]
        .iter()
        .rposition(|l| !l.trim().is_empty())
        .map_or(0, |i| i + 1);
    let lines = &following[..taken];
    if rest.starts_with('|') || rest.starts_with('>') {
        let strip = lines
            .iter()
            .filter(|l| !l.trim().is_empty())
            .map(|l| indent(l))
            .min()
            .unwrap_or(0);
        let body: Vec<&str> = lines.iter().map(|l| l.get(strip..).unwrap_or("")).collect();
        let mut value = body.join(if rest.starts_with('>') { " " } else { "\n" });
        if !rest.contains('-') {
            value.push('\n');
        }
        return (value, taken);
    }
    let mut value = rest.to_string();
    for l in lines {
        value.push(' ');
        value.push_str(l.trim());
    }
    if value.starts_with('"') {
        if let Ok((v, _)) = quoted(&value) {
            return (v, taken);
        }
    } else if let Some(inner) = value.strip_prefix('\'') {
        return (
            inner.strip_suffix('\'').unwrap_or(inner).replace("''", "'"),
            taken,
        );
    } else if let Some(cut) = value.find(" #") {
        value.truncate(cut);
    }
    (value.trim().to_string(), taken)
}

/// The entries of the mapping under `parent:` (the first such key), in order.
fn yaml_entries(text: &str, parent: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.trim_end() == format!("{}{parent}:", " ".repeat(indent(l))))
        .unwrap_or_else(|| panic!("no {parent}: mapping"));
    let parent_indent = indent(lines[start]);
    let mut out = Vec::new();
    let mut i = start + 1;
    let mut child_indent = None;
    while i < lines.len() {
        let line = lines[i];
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            i += 1;
            continue;
        }
        if indent(line) <= parent_indent {
            break;
        }
        let at = *child_indent.get_or_insert(indent(line));
        assert_eq!(indent(line), at, "unexpected indentation: {line:?}");
        let (key, rest) = line
            .trim()
            .split_once(':')
            .unwrap_or_else(|| panic!("not a key: {line:?}"));
        let (value, taken) = yaml_scalar(rest, at, &lines[i + 1..]);
        out.push((key.trim().to_string(), value));
        i += 1 + taken;
    }
    out
}

/// Every rule's `expr` in a Prometheus rule file, with its alert or record name.
fn rule_exprs(text: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut name = String::from("?");
    let mut rules = 0;
    for (i, line) in lines.iter().enumerate() {
        let item = line.trim_start().trim_start_matches("- ").trim_start();
        if let Some(n) = item
            .strip_prefix("alert:")
            .or_else(|| item.strip_prefix("record:"))
        {
            name = n.trim().to_string();
            rules += 1;
        } else if let Some(rest) = item.strip_prefix("expr:") {
            let key_indent = line.len() - item.len();
            let (expr, _) = yaml_scalar(rest, key_indent, &lines[i + 1..]);
            out.push((format!("rule {name}"), expr));
        }
    }
    assert!(rules > 0, "no rules found");
    assert_eq!(
        out.len(),
        rules,
        "a rule without an expr (or a misread one)"
    );
    out
}

/// The rules of a rule file, each as its lines (from `- alert:` to the next rule).
fn rule_blocks(text: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        let item = line.trim_start();
        if let Some(n) = item
            .strip_prefix("- alert:")
            .or_else(|| item.strip_prefix("- record:"))
        {
            out.push((n.trim().to_string(), String::new()));
        } else if item.starts_with("- name:") {
            continue;
        }
        if let Some((_, block)) = out.last_mut() {
            block.push_str(line);
            block.push('\n');
        }
    }
    out
}

/// The Prometheus queries of the KEDA triggers in deploy/keda/ (none when it is not
/// there), each with its file.
fn autoscaler_queries() -> Vec<(String, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/keda");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries {
        let path = entry.unwrap().path();
        if !path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let item = line.trim_start();
            if let Some(rest) = item.strip_prefix("query:") {
                let (query, _) = yaml_scalar(rest, line.len() - item.len(), &lines[i + 1..]);
                out.push((path.display().to_string(), query));
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------
// The tests.

/// Scrapes a running elastic group member once every gauge that is exposed only while
/// known (consumer pending and ack pending, the group's backlog) is there.
async fn full_exposition() -> Exposition {
    let (nats, _js, stream, _admin) = elastic_group(2, &["a"]).await;
    let app = MockApp::start(|_, _| Reply::status(200)).await;
    let relay = Relay::ready(member_config(
        &nats, &app, "elastic", &stream, "eg", "a", "",
    ))
    .await;
    let deadline = tokio::time::Instant::now() + T;
    let exposition = loop {
        let e = Exposition::parse(&relay.get("/metrics").await.1);
        let known = [
            "jetrelay_consumer_pending",
            "jetrelay_consumer_ack_pending",
            "jetrelay_group_backlog",
        ];
        if known.iter().all(|n| e.families.contains_key(*n)) {
            break e;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the known gauges never appeared: {:?}",
            e.families.keys().collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    relay.stop().await.unwrap();
    exposition
}

#[tokio::test]
async fn the_dashboard_and_the_alert_rules_query_only_what_the_daemon_exposes() {
    let exposition = full_exposition().await;
    let mut exprs = dashboard_exprs(&dashboard());
    let dashboard_count = exprs.len();
    assert!(dashboard_count >= 20, "only {dashboard_count} queries");
    exprs.extend(rule_exprs(&repo_file("deploy/prometheus/alerts.yaml")));
    exprs.extend(autoscaler_queries());
    // Everything read is a jetrelay query (a misread expr would name nothing).
    let used: BTreeSet<String> = exprs
        .iter()
        .flat_map(|(_, e)| parse_query(e).unwrap().metrics)
        .map(|(n, _)| exposition.family_of(&n))
        .collect();
    for (place, expr) in &exprs {
        assert!(
            expr.contains("jetrelay_"),
            "{place} queries no jetrelay metric: {expr:?}"
        );
    }
    let problems = unexposed(&exprs, &exposition);
    assert!(
        problems.is_empty(),
        "queried but not exposed:\n  {}\nexposed: {:?}",
        problems.join("\n  "),
        exposition.families.keys().collect::<Vec<_>>()
    );
    // The dashboard shows what the issue asks for (a dropped panel fails here).
    for family in [
        "jetrelay_messages_settled_total",
        "jetrelay_http_requests_total",
        "jetrelay_http_request_duration_seconds",
        "jetrelay_in_flight",
        "jetrelay_buffered",
        "jetrelay_consumer_pending",
        "jetrelay_consumer_ack_pending",
        "jetrelay_group_backlog",
        "jetrelay_pinned",
        "jetrelay_partitions_assigned",
        "jetrelay_ready",
        "jetrelay_settle_failures_total",
        "jetrelay_batch_messages",
        "jetrelay_published_total",
        "jetrelay_publish_failures_total",
    ] {
        assert!(used.contains(family), "nothing shows {family}");
    }
}

#[test]
fn the_checker_names_what_is_not_exposed() {
    let exposition = Exposition::parse(
        "# HELP jetrelay_x_seconds d\n# TYPE jetrelay_x_seconds histogram\n\
         jetrelay_x_seconds_bucket{le=\"0.5\"} 1\njetrelay_x_seconds_sum 1\n\
         jetrelay_x_seconds_count 1\n\
         # HELP jetrelay_settled_total s\n# TYPE jetrelay_settled_total counter\n\
         jetrelay_settled_total{action=\"ack\"} 0\njetrelay_settled_total{action=\"dlq\"} 0\n\
         # HELP jetrelay_known k\n# TYPE jetrelay_known gauge\n",
    );
    let ok = |e: &str| unexposed(&[("t".into(), e.into())], &exposition);
    let fine = [
        "histogram_quantile(0.99, sum by (le) (rate(jetrelay_x_seconds_bucket{pod=~\"$pod\"}[5m])))",
        "rate(jetrelay_x_seconds_sum[5m]) / rate(jetrelay_x_seconds_count[5m])",
        "sum by (action) (rate(jetrelay_settled_total{action=~\"ack|dlq\"}[5m]))",
        "jetrelay_known", // HELP/TYPE alone count as exposed
        "max by (namespace, deployment) (label_replace(jetrelay_known{pod=\"}\"}, \"deployment\", \"$1\", \"pod\", \"(.+)-x\"))",
    ];
    for e in fine {
        assert_eq!(ok(e), Vec::<String>::new(), "{e}");
    }
    let bad = [
        (
            "sum(rate(jetrelay_bogus_total[5m]))",
            "jetrelay_bogus_total",
        ),
        (
            "rate(jetrelay_x_seconds_total[5m])",
            "jetrelay_x_seconds_total",
        ),
        ("jetrelay_settled_total{action=\"dlqs\"}", "dlqs"),
        ("jetrelay_settled_total{action=~\"ack|nack\"}", "nack"),
        ("jetrelay_settled_total{acton=\"ack\"}", "acton"),
        ("sum by (acton) (jetrelay_settled_total)", "acton"),
        ("sum(jetrelay_settled_total{action=\"ack\"", "cannot read"),
    ];
    for (e, named) in bad {
        let problems = ok(e);
        assert!(
            problems.iter().any(|p| p.contains(named)),
            "{e}: {problems:?} should name {named}"
        );
    }
}

#[test]
fn the_dashboard_is_json_with_panels_on_a_datasource_variable_and_pod_variables() {
    let d = dashboard();
    let vars: Vec<&str> = d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    for v in ["datasource", "namespace", "pod"] {
        assert!(vars.contains(&v), "no {v} variable: {vars:?}");
    }
    let ds = d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "datasource")
        .unwrap();
    assert_eq!(ds["type"], "datasource");
    assert_eq!(ds["query"], "prometheus");
    let all = panels(&d);
    let shown: Vec<_> = all.iter().filter(|p| p["type"] != "row").collect();
    assert!(shown.len() >= 20, "only {} panels", shown.len());
    let mut ids = BTreeSet::new();
    for p in &all {
        assert!(
            ids.insert(p["id"].as_u64().unwrap()),
            "duplicate id {}",
            p["id"]
        );
        for k in ["h", "w", "x", "y"] {
            assert!(p["gridPos"][k].is_u64(), "{}: gridPos.{k}", p["title"]);
        }
    }
    for p in shown {
        assert_eq!(
            p["datasource"]["uid"], "${datasource}",
            "{} does not use the datasource variable",
            p["title"]
        );
        let targets = p["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{} has no query", p["title"]);
        for t in targets {
            let expr = t["expr"].as_str().unwrap();
            assert!(
                expr.contains("pod=~\"$pod\"") && expr.contains("namespace=~\"$namespace\""),
                "{}: {expr} ignores the namespace/pod selection",
                p["title"]
            );
        }
    }
}

#[test]
fn every_alert_has_a_summary_a_description_a_runbook_and_a_severity() {
    let text = repo_file("deploy/prometheus/alerts.yaml");
    let rules = rule_blocks(&text);
    assert!(rules.len() >= 8, "only {} rules", rules.len());
    for (name, block) in &rules {
        for key in ["expr:", "severity:", "summary:", "description:", "runbook:"] {
            assert!(block.contains(key), "{name} has no {key}\n{block}");
        }
        let runbook = yaml_entries(block, "annotations")
            .into_iter()
            .find(|(k, _)| k == "runbook")
            .unwrap()
            .1;
        assert!(
            runbook.lines().filter(|l| !l.trim().is_empty()).count() >= 3,
            "{name}: the runbook has fewer than 3 steps: {runbook:?}"
        );
    }
    // What the issue asks to be alerted on.
    for wanted in [
        "jetrelay_ready",
        "jetrelay_consumer_pending",
        "jetrelay_group_backlog",
        "action=\"dlq\"",
        "jetrelay_settle_failures_total",
        "jetrelay_ack_failures_total",
        "jetrelay_pinned",
        "jetrelay_app_healthy",
        "jetrelay_nats_connected",
        "jetrelay_message_age_seconds_bucket",
    ] {
        assert!(
            rule_exprs(&text).iter().any(|(_, e)| e.contains(wanted)),
            "no rule on {wanted}"
        );
    }
}

#[test]
fn the_yaml_readers_read_block_quoted_and_plain_scalars() {
    let text = "data:\n  a: |\n    x = 1\n\n    y = \"2\"\n  b: plain value # note\n  \
                c: 'it''s'\n  d: \"q\\\"d\"\n  e: >-\n    one\n    two\nnext: 1\n";
    assert_eq!(
        yaml_entries(text, "data"),
        [
            ("a".to_string(), "x = 1\n\ny = \"2\"\n".to_string()),
            ("b".into(), "plain value".into()),
            ("c".into(), "it's".into()),
            ("d".into(), "q\"d".into()),
            ("e".into(), "one two".into()),
        ]
    );
    let rules = "groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: up == 0\n        \
                 for: 1m\n      - alert: B\n        expr: |\n          a\n          and b\n        \
                 labels: {}\n      - record: c\n        expr: \"x{a=\\\"b\\\"}\"\n";
    assert_eq!(
        rule_exprs(rules),
        [
            ("rule A".to_string(), "up == 0".to_string()),
            ("rule B".into(), "a\nand b\n".into()),
            ("rule c".into(), "x{a=\"b\"}".into()),
        ]
    );
}

/// jetrelay's config: the ConfigMap mounted as a directory (not a file by subPath, which
/// Kubernetes never updates), and the file in it named by JETRELAY_CONFIG (which `run`
/// and a command run in the container with kubectl exec read).
const CONFIG_MOUNT: &str = "- { name: config, mountPath: /etc/jetrelay/config, readOnly: true }";
const CONFIG_ENV: &str =
    "- name: JETRELAY_CONFIG\n              value: /etc/jetrelay/config/jetrelay.toml\n";

/// The ConfigMap's jetrelay.toml, with the Secret's files where the Deployment mounts
/// them and the Deployment's `JETRELAY_*` variables, passes what `jetrelay check` checks
/// before it connects: the config's rules (`Config::load`), the parsed settings, and
/// the app's side as `run` builds it (secret files read, URL, TLS, proxy).
#[test]
fn the_configmaps_config_passes_jetrelay_checks_offline_checks() {
    const SECRETS: &str = "/etc/jetrelay/secrets/";
    let deployment = repo_file("deploy/kubernetes/deployment.yaml");
    for wiring in [
        CONFIG_MOUNT,
        "mountPath: /etc/jetrelay/secrets,",
        CONFIG_ENV,
    ] {
        assert!(
            deployment.contains(wiring),
            "deployment.yaml no longer has {wiring:?}: update this test"
        );
    }
    let toml = yaml_entries(&repo_file("deploy/kubernetes/configmap.yaml"), "data")
        .into_iter()
        .find(|(k, _)| k == "jetrelay.toml")
        .expect("no jetrelay.toml in the ConfigMap")
        .1;
    assert!(toml.contains("[source]"), "misread: {toml:?}");

    // The Secret's keys become files in the mounted directory.
    let secrets = yaml_entries(&repo_file("deploy/kubernetes/secret.yaml"), "stringData");
    assert!(!secrets.is_empty(), "the Secret has no stringData");
    let dir = tempfile::tempdir().unwrap();
    for (key, value) in &secrets {
        std::fs::write(dir.path().join(key), value).unwrap();
    }
    for (i, _) in toml.match_indices(SECRETS) {
        let name: String = toml[i + SECRETS.len()..]
            .chars()
            .take_while(|c| *c != '"' && *c != '\'')
            .collect();
        assert!(
            secrets.iter().any(|(k, _)| *k == name),
            "the config reads {SECRETS}{name}, which the Secret does not hold"
        );
    }
    let toml = toml.replace(SECRETS, &format!("{}/", dir.path().display()));

    // The Deployment's JETRELAY_* variables, as the loader's environment layer reads
    // them (JETRELAY_A__B is a.b); a fieldRef gets a pod's name.
    let lines: Vec<&str> = deployment.lines().collect();
    let mut env = String::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(var) = line.trim().strip_prefix("- name: JETRELAY_") else {
            continue;
        };
        if var.eq_ignore_ascii_case("config") {
            continue;
        }
        let value = lines
            .get(i + 1)
            .and_then(|l| l.trim().strip_prefix("value:"))
            .map_or("orders-worker-6d4f9b7c8d-x2x7q".to_string(), |v| {
                v.trim().trim_matches('"').to_string()
            });
        let path: Vec<String> = var.split("__").map(str::to_lowercase).collect();
        let (key, table) = path.split_last().unwrap();
        let literal = if value.parse::<i64>().is_ok() || value == "true" || value == "false" {
            value
        } else {
            format!("{value:?}")
        };
        env.push_str(&format!("[{}]\n{key} = {literal}\n", table.join(".")));
    }
    assert!(
        !env.is_empty(),
        "no JETRELAY_ variables read from the Deployment"
    );

    let config = jetrelay::config::Config::from_figment(
        Figment::from(Toml::string(&toml)).merge(Toml::string(&env)),
    )
    .unwrap_or_else(|e| panic!("the ConfigMap's config does not load: {e}\n{toml}{env}"));
    // `jetrelay check`'s offline steps: the rules between keys, the app's side.
    jetrelay::cli::check::offline(&config)
        .unwrap_or_else(|e| panic!("jetrelay check would refuse the ConfigMap's config: {e}"));
    if env.contains("[nats]\nname = ") {
        assert_eq!(
            config.nats.name, "orders-worker-6d4f9b7c8d-x2x7q",
            "the Deployment's JETRELAY_NATS__NAME was not applied"
        );
    }
    // The loader is strict (a misspelt key is refused), so loading above means every
    // key of the ConfigMap is one jetrelay knows.
    let misspelt = toml.replace("[delivery]", "[delivery]\nmax_inflight = 32");
    assert!(
        jetrelay::config::Config::from_figment(Figment::from(Toml::string(&misspelt))).is_err(),
        "an unknown key accepted"
    );
}

#[test]
fn every_example_config_passes_the_checks_and_the_reference_shows_every_section() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("toml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        jetrelay::config::Config::from_toml(&[&text])
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        seen += 1;
    }
    assert!(seen >= 5, "the example configs: {seen}");
    // config/durable.toml shows every key with its default: each section at least.
    let reference = repo_file("config/durable.toml");
    for section in [
        "[nats]",
        "[source]",
        "[topology]",
        "[consumer]",
        "[delivery]",
        "[http]",
        "[publish]",
        "[dlq]",
        "[admin]",
        "[log]",
        "[otel]",
        "[budget]",
    ] {
        assert!(
            reference.lines().any(|l| l.starts_with(section)),
            "config/durable.toml lacks {section}"
        );
    }
}

/// deploy/kubernetes/unix-socket.yaml: its config passes `check`'s offline steps
/// with the Secret's files, its socket is in an emptyDir both containers mount, and
/// the app has no port.
#[test]
fn the_unix_socket_example_shares_a_socket_not_a_port_and_passes_the_checks() {
    const SECRETS: &str = "/etc/jetrelay/secrets/";
    let text = repo_file("deploy/kubernetes/unix-socket.yaml");
    let toml = yaml_entries(&text, "data")
        .into_iter()
        .find(|(k, _)| k == "jetrelay.toml")
        .expect("no jetrelay.toml in the ConfigMap")
        .1;
    let dir = tempfile::tempdir().unwrap();
    for (key, value) in yaml_entries(&repo_file("deploy/kubernetes/secret.yaml"), "stringData") {
        std::fs::write(dir.path().join(key), value).unwrap();
    }
    let toml = toml.replace(SECRETS, &format!("{}/", dir.path().display()));
    let config = jetrelay::config::Config::from_toml(&[&toml])
        .unwrap_or_else(|e| panic!("the example's config does not load: {e}\n{toml}"));
    jetrelay::cli::check::offline(&config)
        .unwrap_or_else(|e| panic!("jetrelay check would refuse the example's config: {e}"));
    let socket = std::path::Path::new(&config.http.unix_socket);
    let shared = socket.parent().unwrap().display().to_string();
    assert_eq!(shared, "/run/app");
    let mounts = text
        .matches(&format!("{{ name: app-socket, mountPath: {shared} }}"))
        .count();
    assert_eq!(
        mounts, 2,
        "jetrelay and the app mount the socket's directory"
    );
    assert!(
        text.contains("- name: app-socket\n          emptyDir:"),
        "an emptyDir"
    );
    let app = &text[text.find("      containers:").unwrap()..text.find("      volumes:").unwrap()];
    assert!(
        !app.contains("containerPort"),
        "the app opens no port: {app}"
    );
}

/// The manifests with pods, each with the one jetrelay container.
const POD_MANIFESTS: &[&str] = &[
    "deploy/kubernetes/deployment.yaml",
    "deploy/kubernetes/unix-socket.yaml",
    "deploy/keda/elastic.yaml",
];

/// Every pod manifest probes jetrelay by Kubernetes' names (`/livez` for startup and
/// liveness, `/readyz` for readiness) and mounts its ConfigMap as a directory, the
/// config it runs with inside it, watched (`run --watch`): a `subPath` mount is never
/// updated when the ConfigMap changes, a directory's files are.
#[test]
fn the_pods_probe_livez_and_readyz_and_mount_the_config_as_a_directory() {
    for path in POD_MANIFESTS {
        let text = repo_file(path);
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        assert!(
            !lines
                .iter()
                .any(|l| !l.starts_with('#') && l.contains("subPath")),
            "{path}: a subPath mount"
        );
        for (probe, want) in [
            ("startupProbe:", "/livez"),
            ("livenessProbe:", "/livez"),
            ("readinessProbe:", "/readyz"),
        ] {
            // jetrelay's probe of that kind: the first whose httpGet (the next line that
            // is not a comment) is on port metrics.
            let got = lines
                .iter()
                .enumerate()
                .filter(|(_, l)| **l == probe)
                .find_map(|(i, _)| {
                    let next = lines[i + 1..].iter().find(|l| !l.starts_with('#'))?;
                    next.strip_prefix("httpGet: { path: ")?
                        .strip_suffix(", port: metrics }")
                });
            assert_eq!(got, Some(want), "{path}: jetrelay's {probe}");
        }
        assert!(
            text.contains(CONFIG_MOUNT)
                && text.contains(CONFIG_ENV)
                && !text.contains("--config")
                && text.contains(r#"args: ["run", "--watch"]"#),
            "{path}: the ConfigMap mounted as /etc/jetrelay/config, the config read from it \
             (JETRELAY_CONFIG, for `run` and for a command run with kubectl exec) and \
             reloaded when the kubelet swaps it (--watch)"
        );
    }
}

/// Runs `scripts/check-deploy --pod-security` on the files: its success and output.
fn pod_security_check(files: &[PathBuf]) -> (bool, String) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new(root.join("scripts/check-deploy"))
        .arg("--pod-security")
        .args(files)
        .output()
        .unwrap_or_else(|e| panic!("scripts/check-deploy: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// checkov's failures in its compact output: (check id, resource).
fn checkov_failures(output: &str) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    let mut check = String::new();
    for line in output.lines() {
        if let Some(rest) = line.strip_prefix("Check: ") {
            check = rest.split(':').next().unwrap_or("").to_string();
        } else if let Some(resource) = line.trim().strip_prefix("FAILED for resource: ") {
            out.insert((check.clone(), resource.to_string()));
        }
    }
    out
}

/// scripts/check-deploy's Pod Security checks, its own rule for the "restricted"
/// profile and checkov's Kubernetes checks: the shipped pods pass; a pod that breaks
/// the profile in one way fails, named by both (checkov where it has a check for it: it
/// has none for a hostPath volume, which "restricted" forbids); pods in a bare Pod and
/// in a CronJob are checked as a Deployment's are.
#[test]
fn the_pod_security_check_passes_the_shipped_pods_and_fails_each_violation() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut shipped: Vec<PathBuf> = POD_MANIFESTS.iter().map(|p| root.join(p)).collect();
    shipped.push(root.join("deploy/kubernetes/networkpolicy.yaml"));
    let (ok, output) = pod_security_check(&shipped);
    assert!(ok, "the shipped manifests fail:\n{output}");
    assert!(
        output.contains(
            "pod-security: 3 pod(s) checked against the restricted profile, 0 violation(s)"
        ) && output.contains("Failed checks: 0"),
        "{output}"
    );

    let deployment = repo_file("deploy/kubernetes/deployment.yaml");
    // (case, the edit to deployment.yaml, what our rule says, checkov's check)
    let cases: &[(&str, &str, &str, &str, Option<&str>)] = &[
        (
            "seccomp",
            "        seccompProfile: { type: RuntimeDefault }\n",
            "",
            "container app: securityContext.seccompProfile.type: must be RuntimeDefault or Localhost",
            Some("CKV_K8S_31"),
        ),
        (
            "escalation",
            "            allowPrivilegeEscalation: false\n            capabilities: { drop: [\"ALL\"] }\n          volumeMounts:\n            - { name: tmp",
            "            allowPrivilegeEscalation: true\n            capabilities: { drop: [\"ALL\"] }\n          volumeMounts:\n            - { name: tmp",
            "container app: securityContext.allowPrivilegeEscalation: must be false",
            Some("CKV_K8S_20"),
        ),
        (
            "root",
            "            runAsUser: 10001\n",
            "            runAsUser: 0\n",
            "container app: securityContext.runAsUser: must not be 0 (root)",
            Some("CKV_K8S_40"),
        ),
        (
            "capabilities",
            "            capabilities: { drop: [\"ALL\"] }\n          volumeMounts:\n            - { name: tmp",
            "            capabilities: { drop: [\"NET_RAW\"] }\n          volumeMounts:\n            - { name: tmp",
            "container app: securityContext.capabilities.drop: must include ALL",
            Some("CKV_K8S_37"),
        ),
        (
            "hostpath",
            "        - name: tmp\n          emptyDir: { sizeLimit: 64Mi }\n",
            "        - name: tmp\n          hostPath: { path: /tmp }\n",
            "volume tmp: type hostPath",
            None,
        ),
        (
            "jetrelay-escalation",
            "            runAsGroup: 65532\n            readOnlyRootFilesystem: true\n            allowPrivilegeEscalation: false\n",
            "            runAsGroup: 65532\n            readOnlyRootFilesystem: true\n",
            "initContainer jetrelay: securityContext.allowPrivilegeEscalation: must be false",
            Some("CKV_K8S_20"),
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    let mut files = vec![root.join("deploy/kubernetes/networkpolicy.yaml")];
    let mut write = |name: &str, text: &str| {
        let path = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&path, text).unwrap();
        files.push(path);
    };
    let rename = |case: &str| {
        deployment.replacen(
            "metadata:\n  name: orders-worker\n",
            &format!("metadata:\n  name: orders-worker-{case}\n"),
            1,
        )
    };
    write("control", &rename("control"));
    for (case, from, to, _, _) in cases {
        let text = rename(case);
        assert_eq!(
            text.matches(from).count(),
            1,
            "{case}: {from:?} in deployment.yaml"
        );
        write(case, &text.replacen(from, to, 1));
    }
    // A bare Pod and a CronJob's pod: only the pod-level seccompProfile missing.
    write(
        "pod",
        "apiVersion: v1\nkind: Pod\nmetadata: { name: p }\nspec:\n  securityContext: { runAsNonRoot: true }\n  \
         containers:\n    - name: c\n      image: x:1\n      securityContext:\n        \
         allowPrivilegeEscalation: false\n        capabilities: { drop: [ALL] }\n",
    );
    write(
        "cronjob",
        "apiVersion: batch/v1\nkind: CronJob\nmetadata: { name: cj }\nspec:\n  schedule: \"@daily\"\n  \
         jobTemplate:\n    spec:\n      template:\n        spec:\n          restartPolicy: Never\n          \
         securityContext: { runAsNonRoot: true }\n          containers:\n            - name: c\n              \
         image: x:1\n              securityContext:\n                allowPrivilegeEscalation: false\n                \
         capabilities: { drop: [ALL] }\n",
    );
    let (ok, output) = pod_security_check(&files);
    assert!(!ok, "the violations passed:\n{output}");
    let ours: Vec<&str> = output.lines().filter(|l| l.contains(".yaml: ")).collect();
    let failed = checkov_failures(&output);
    for (case, _, _, says, check) in cases {
        let file = format!("{case}.yaml: Deployment orders-worker-{case}: spec.template.spec: ");
        assert!(
            ours.iter().any(|l| l.contains(&file) && l.contains(says)),
            "{case}: our rule does not say {says:?}:\n{output}"
        );
        if let Some(check) = check {
            let resource = format!("Deployment.default.orders-worker-{case}");
            assert!(
                failed.contains(&(check.to_string(), resource)),
                "{case}: checkov does not fail {check}: {failed:?}\n{output}"
            );
        }
    }
    for (file, name, where_) in [
        ("pod.yaml", "Pod p", "spec"),
        (
            "cronjob.yaml",
            "CronJob cj",
            "spec.jobTemplate.spec.template.spec",
        ),
    ] {
        let want = format!(
            "{file}: {name}: {where_}: container c: securityContext.seccompProfile.type: must be"
        );
        assert!(ours.iter().any(|l| l.contains(&want)), "{want}:\n{output}");
    }
    assert!(
        !ours.iter().any(|l| l.contains("control.yaml"))
            && !failed
                .iter()
                .any(|(_, r)| r.ends_with("orders-worker-control")),
        "the unchanged Deployment failed:\n{output}"
    );
}

/// The objects `kubectl kustomize DIR` renders, as (kind, name).
fn rendered_objects(dir: &str) -> BTreeSet<(String, String)> {
    let out = std::process::Command::new("kubectl")
        .args(["kustomize", dir])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("kubectl is on PATH (scripts/check-deploy needs it too)");
    assert!(
        out.status.success(),
        "kubectl kustomize {dir}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    text.split("\n---\n")
        .filter_map(|doc| {
            let field = |prefix: &str| {
                doc.lines()
                    .find_map(|l| l.strip_prefix(prefix))
                    .map(str::to_string)
            };
            Some((field("kind: ")?, field("  name: ")?))
        })
        .collect()
}

/// The `kubectl` commands of docs/deploying.md (check-readme runs only the render:
/// the others need a cluster) name what `kubectl apply -k` of the directory they name
/// creates (the Deployment, container, Service, ScaledObject, ConfigMap), and each
/// `jetrelay` command they run in the pod is one the binary takes (its arguments
/// parse: the same line with `--help` exits 0).
#[test]
fn the_kubectl_commands_of_deploying_md_name_what_the_manifests_have() {
    let doc = repo_file("docs/deploying.md");
    let deployment = repo_file("deploy/kubernetes/deployment.yaml");
    let all = rendered_objects("deploy");
    let pods = rendered_objects("deploy/kubernetes");
    assert!(
        pods.is_subset(&all),
        "deploy applies all that deploy/kubernetes does"
    );
    for kind in [
        "ScaledObject",
        "Service",
        "NetworkPolicy",
        "ConfigMap",
        "Secret",
    ] {
        assert!(
            all.iter().any(|(k, _)| k == kind),
            "deploy has no {kind}: {all:?}"
        );
    }
    let commands: Vec<&str> = doc.lines().filter(|l| l.starts_with("kubectl ")).collect();
    assert!(commands.len() >= 11, "{commands:?}");
    let has = |kind: &str, name: &str| all.contains(&(kind.to_string(), name.to_string()));
    let mut ran = 0;
    for line in commands {
        let words: Vec<&str> = line.split_whitespace().collect();
        if matches!(words[1], "apply" | "kustomize") {
            let dir = words.iter().find(|w| w.starts_with("deploy")).unwrap();
            assert!(
                matches!(*dir, "deploy" | "deploy/kubernetes"),
                "{line}: not a kustomization this test renders"
            );
            continue;
        }
        for w in &words[1..] {
            let named = [
                ("deploy/", "Deployment"),
                ("deployment/", "Deployment"),
                ("service/", "Service"),
            ]
            .iter()
            .find_map(|(prefix, kind)| w.strip_prefix(prefix).map(|name| (*kind, name)));
            if let Some((kind, name)) = named {
                assert!(has(kind, name), "{line}: no {kind} {name}");
            }
        }
        if words[1] == "get" {
            let kind = match words[2] {
                "scaledobject" => "ScaledObject",
                other => panic!("{line}: a kind this test does not know: {other}"),
            };
            assert!(has(kind, words[3]), "{line}: no {kind} {}", words[3]);
        }
        if let Some(i) = words.iter().position(|w| *w == "-c") {
            assert!(
                deployment.contains(&format!("        - name: {}\n", words[i + 1])),
                "{line}: no container {}",
                words[i + 1]
            );
        }
        if let Some(i) = words.iter().position(|w| *w == "--") {
            assert_eq!(words[i + 1], "jetrelay", "{line}");
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_jetrelay"))
                .args(&words[i + 2..])
                .arg("--help")
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{line}: jetrelay does not take these arguments: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            ran += 1;
        }
    }
    assert!(ran >= 6, "{ran} jetrelay commands");
    // The walk's scaler answers for the source its URL names, on the Service's port.
    let so = repo_file("deploy/keda/scaledobject-scaler.yaml");
    assert!(so.contains("url: \"http://jetrelay-scaler.default:9095/v1/lag?source=default\""));
    assert!(doc.contains("kubectl port-forward service/jetrelay-scaler 9095:9095"));
    assert!(doc.contains("curl -s 'localhost:9095/v1/lag?source=default'"));
}

/// deploy/kubernetes/networkpolicy.yaml selects the Deployment's pods and admits one
/// port, the admin port of the ConfigMap's config (`admin.listen`), from the
/// monitoring namespace only: the app's port and the publish endpoint reach no other
/// pod. Out: the port of the config's NATS servers in their namespace, and DNS.
#[test]
fn the_network_policy_admits_only_the_admin_port_and_reaches_only_nats_and_dns() {
    let policy = repo_file("deploy/kubernetes/networkpolicy.yaml");
    let deployment = repo_file("deploy/kubernetes/deployment.yaml");
    let toml = yaml_entries(&repo_file("deploy/kubernetes/configmap.yaml"), "data")
        .into_iter()
        .find(|(k, _)| k == "jetrelay.toml")
        .expect("no jetrelay.toml in the ConfigMap")
        .1;
    let config = jetrelay::config::Config::from_toml(&[&toml]).unwrap();
    let admin_port = config.admin.listen.rsplit_once(':').unwrap().1.to_string();
    // nats://nats.nats.svc:4222: the Service nats in the namespace nats, port 4222.
    let server = config.nats.servers[0].strip_prefix("nats://").unwrap();
    let (host, nats_port) = server.rsplit_once(':').unwrap();
    let nats_namespace = host.split('.').nth(1).unwrap();

    assert!(
        policy.contains("  podSelector:\n    matchLabels: { app: orders-worker }\n")
            && deployment.contains("      labels: { app: orders-worker }\n"),
        "the policy selects the Deployment's pods"
    );
    assert!(policy.contains("policyTypes: [Ingress, Egress]"));
    let (ingress, egress) = policy
        .split_once("\n  egress:\n")
        .expect("an egress section after the ingress one");
    let ports = |s: &str| -> Vec<String> {
        s.lines()
            .filter_map(|l| l.trim().strip_prefix("- { port: "))
            .map(|r| r.split(',').next().unwrap().to_string())
            .collect()
    };
    assert_eq!(ports(ingress), [admin_port.as_str()], "ingress ports");
    assert_eq!(
        ingress.matches("namespaceSelector:").count(),
        1,
        "one source: {ingress}"
    );
    assert!(ingress.contains("matchLabels: { kubernetes.io/metadata.name: monitoring }"));
    assert_eq!(ports(egress), [nats_port, "53", "53"], "egress ports");
    assert!(egress.contains(&format!(
        "matchLabels: {{ kubernetes.io/metadata.name: {nats_namespace} }}"
    )));
    assert!(egress.contains("matchLabels: { k8s-app: kube-dns }"));
    // The app's port is not the admin port (else the policy would open it).
    assert!(deployment.contains("- { name: http, containerPort: 8080 }") && admin_port != "8080");
}
