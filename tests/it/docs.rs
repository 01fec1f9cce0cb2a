//! The documentation checked against the code: every config key the loader takes is
//! in the reference page (`docs/reference.md`) with its default, and no key that it
//! does not take; every metric the code names is in the reference's metrics table,
//! and back; a line of an example config (`config/*.toml`) that says it holds the
//! default does; the README stays within its length.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Format, Toml};
use jetrelay::config::Config;

/// A key no table has, to make the loader list the keys a table takes.
const PROBE: &str = "zz_not_a_key";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The keys the table at `path` takes, as the loader's strict parsing names them when
/// it refuses an unknown one; `None` when `path` is no table of fields (a value, a
/// map of names, an enum).
fn table_keys(path: &[String]) -> Option<Vec<&'static str>> {
    let toml = if path.is_empty() {
        format!("{PROBE} = 1\n")
    } else {
        format!("[{}]\n{PROBE} = 1\n", path.join("."))
    };
    let Err(errors) = Figment::from(Toml::string(&toml)).extract::<Config>() else {
        return None;
    };
    errors.into_iter().find_map(|e| match e.kind {
        figment::error::Kind::UnknownField(field, expected) if field == PROBE => {
            Some(expected.to_vec())
        }
        _ => None,
    })
}

/// Every key the loader takes, dotted (`delivery.max_in_flight`), tables walked down.
fn loader_keys() -> BTreeSet<String> {
    fn walk(path: &mut Vec<String>, out: &mut BTreeSet<String>) {
        let keys = table_keys(path).unwrap_or_else(|| panic!("{path:?} is not a table"));
        for key in keys {
            path.push(key.to_string());
            if table_keys(path).is_some() {
                walk(path, out);
            } else {
                out.insert(path.join("."));
            }
            path.pop();
        }
    }
    let mut out = BTreeSet::new();
    walk(&mut Vec::new(), &mut out);
    out
}

/// The rows of the tables in the section `## heading` of the reference page: the
/// first cell's backquoted names, and the cells.
fn reference_rows(heading: &str) -> Vec<(Vec<String>, Vec<String>)> {
    let text = read(&repo().join("docs/reference.md"));
    let start = text
        .find(&format!("\n## {heading}\n"))
        .unwrap_or_else(|| panic!("docs/reference.md has no section {heading:?}"));
    let section = &text[start + 1..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    let mut rows = Vec::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<String> = line
            .trim_matches('|')
            .split(" | ")
            .map(|c| c.trim().to_string())
            .collect();
        let names = cells[0]
            .split('`')
            .skip(1)
            .step_by(2)
            .map(|n| n.split('{').next().unwrap_or(n).to_string())
            .collect();
        rows.push((names, cells));
    }
    assert!(!rows.is_empty(), "no rows read from {heading:?}");
    rows
}

fn differences(what: &str, code: &BTreeSet<String>, docs: &BTreeSet<String>) -> Vec<String> {
    let mut out = Vec::new();
    for k in code.difference(docs) {
        out.push(format!(
            "{what} {k} is in the code, not in docs/reference.md"
        ));
    }
    for k in docs.difference(code) {
        out.push(format!(
            "{what} {k} is in docs/reference.md, not in the code"
        ));
    }
    out
}

#[test]
fn the_key_walk_finds_tables_values_and_nested_tables() {
    let keys = loader_keys();
    for k in [
        "nats.servers",
        "delivery.max_in_flight",
        "topology.managed_stream.subjects",
        "http.headers",
    ] {
        assert!(keys.contains(k), "{k} not found: {keys:?}");
    }
    assert!(
        !keys.contains("topology.managed_stream"),
        "a table taken for a value"
    );
    assert!(keys.len() > 90, "only {} keys", keys.len());
}

#[test]
fn every_config_key_the_loader_takes_is_in_the_reference_and_no_other() {
    let docs: BTreeSet<String> = reference_rows("Configuration")
        .into_iter()
        .flat_map(|(names, _)| names.into_iter().take(1))
        .collect();
    let problems = differences("config key", &loader_keys(), &docs);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The default column: a TOML value is the default an empty config has; `—` an empty
/// one; `required …` and cells naming several defaults are not compared.
#[test]
fn the_reference_shows_each_keys_default() {
    let mut config = Config::default();
    config.topology.managed_stream = Some(Default::default());
    let defaults = jetrelay::config::reload::flatten(&config, jetrelay::secret::Salt::of_process());
    let mut wrong = Vec::new();
    let mut compared = 0;
    for (names, cells) in reference_rows("Configuration") {
        let (key, cell) = (&names[0], cells[1].as_str());
        if cell.starts_with("required") || cell.contains(" (") {
            continue;
        }
        let actual = defaults
            .get(key)
            .unwrap_or_else(|| panic!("{key}: not in the flattened default config"));
        let empty = matches!(actual, serde_json::Value::Null)
            || actual.as_str() == Some("")
            || actual.as_array().is_some_and(Vec::is_empty);
        let ok = match cell {
            "—" => empty,
            "`{}`" => matches!(actual, serde_json::Value::Null),
            _ => {
                let literal = cell.trim_matches('`');
                let doc: serde_json::Value = Figment::from(Toml::string(&format!("v = {literal}")))
                    .extract_inner("v")
                    .unwrap_or_else(|e| panic!("{key}: the default {cell} is no TOML value: {e}"));
                doc == *actual
            }
        };
        compared += 1;
        if !ok {
            wrong.push(format!(
                "{key}: the reference says {cell}, the default is {actual}"
            ));
        }
    }
    assert!(compared > 80, "only {compared} defaults compared");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Every `"jetrelay_…"` name in the source (histogram series suffixes dropped) is a
/// row of the reference's metrics table, and every row names one of them.
#[test]
fn every_metric_the_code_names_is_in_the_reference_and_no_other() {
    fn scan(dir: &Path, out: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                scan(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = read(&path);
                for (i, _) in text.match_indices("\"jetrelay_") {
                    let name: String = text[i + 1..]
                        .chars()
                        .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                        .collect();
                    let name = ["_bucket", "_sum", "_count"]
                        .iter()
                        .find_map(|s| name.strip_suffix(s))
                        .map_or(name.clone(), str::to_string);
                    out.insert(name);
                }
            }
        }
    }
    let mut code = BTreeSet::new();
    scan(&repo().join("src"), &mut code);
    assert!(code.len() > 30, "only {} metric names in src/", code.len());
    let docs: BTreeSet<String> = reference_rows("Metrics")
        .into_iter()
        .flat_map(|(names, _)| names.into_iter().take(1))
        .collect();
    let problems = differences("metric", &code, &docs);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Which key lines of an example config claim to hold the default: those marked
/// `(default)`, and in a file that says every key is shown with its default except
/// those marked "example", every key line not marked so (nor "required").
fn claimed_defaults(text: &str) -> Vec<usize> {
    let all_but_examples = text.contains("except those marked \"example\"");
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_start();
        if line.starts_with('#') || line.starts_with('[') || !line.contains('=') {
            continue;
        }
        let comment = line.split_once(" #").map_or("", |(_, c)| c);
        if comment.contains("(default)")
            || (all_but_examples && !comment.contains("example") && !comment.contains("required"))
        {
            out.push(i);
        }
    }
    out
}

/// A config with its ordering made explicit (a missing one means the kind's
/// default: writing that default out changes nothing).
fn effective(mut c: Config) -> Config {
    c.delivery.ordering = Some(c.ordering());
    c
}

#[test]
fn a_line_an_example_config_marks_as_the_default_holds_the_default() {
    let mut checked = BTreeMap::new();
    for entry in std::fs::read_dir(repo().join("config")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let text = read(&path);
        assert!(
            text.contains("(default)") || text.contains("except those marked \"example\""),
            "{name} does not say which of its lines hold the default"
        );
        let whole =
            effective(Config::from_toml(&[&text]).unwrap_or_else(|e| panic!("{name}: {e}")));
        let lines: Vec<&str> = text.lines().collect();
        let claimed = claimed_defaults(&text);
        for &i in &claimed {
            let without = without_line(&lines, i);
            let config = Config::from_toml(&[&without]).unwrap_or_else(|e| {
                panic!(
                    "{name}:{}: without `{}` it does not load: {e}",
                    i + 1,
                    lines[i]
                )
            });
            assert_eq!(
                effective(config),
                whole,
                "{name}:{}: `{}` is marked as the default but changes the config",
                i + 1,
                lines[i]
            );
        }
        checked.insert(name, claimed.len());
    }
    assert!(checked.len() >= 5, "the example configs: {checked:?}");
    assert!(checked["durable.toml"] > 80, "durable.toml: {checked:?}");
}

/// The text of `lines` without line `i`.
fn without_line(lines: &[&str], i: usize) -> String {
    lines
        .iter()
        .enumerate()
        .filter(|(j, _)| *j != i)
        .map(|(_, l)| format!("{l}\n"))
        .collect()
}

#[test]
fn a_line_marked_default_that_is_not_is_found() {
    let text = "[source]\nstream = \"S\"   # example\nkind = \"durable\"  # example\ndurable = \"d\"  # example\n\
                [http]\nurl = \"http://a\"  # example\ntimeout_ms = 30000  # (default)\n\
                [delivery]\nmax_in_flight = 8  # (default)\n";
    let claimed = claimed_defaults(text);
    assert_eq!(claimed, [6, 8]);
    let lines: Vec<&str> = text.lines().collect();
    let whole = effective(Config::from_toml(&[text]).unwrap());
    let changes: Vec<usize> = claimed
        .into_iter()
        .filter(|&i| effective(Config::from_toml(&[&without_line(&lines, i)]).unwrap()) != whole)
        .collect();
    assert_eq!(changes, [8], "max_in_flight = 8 is not the default");
}

/// Every TOML block of the README is a config that loads: what a reader copies works.
#[test]
fn every_config_the_readme_shows_loads() {
    let text = read(&repo().join("README.md"));
    let mut blocks = 0;
    let mut rest = text.as_str();
    while let Some(start) = rest.find("```toml\n") {
        let body = &rest[start + 8..];
        let end = body.find("```").expect("a closed block");
        Config::from_toml(&[&body[..end]])
            .unwrap_or_else(|e| panic!("a README config does not load: {e}\n{}", &body[..end]));
        blocks += 1;
        rest = &body[end..];
    }
    assert!(blocks >= 1, "no TOML block in the README");
}

/// The README is a front page, not a manual: at most 2,500 words (as `wc -w` counts
/// them); the detail belongs in `docs/`.
#[test]
fn the_readme_stays_within_2500_words() {
    let words = read(&repo().join("README.md")).split_whitespace().count();
    assert!(
        words <= 2500,
        "README.md has {words} words, over 2,500: move the detail to docs/"
    );
}
