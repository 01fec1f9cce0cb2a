//! The layout's rules, checked on the tree as it stands (rust-analyzer's tidy test):
//! every file opens with its `//!` purpose line; a room of `src/` imports only rooms
//! of the rows below its own in `ARCHITECTURE.md`'s layer table, and every room is
//! in it; an outside crate is named only in the rooms its table gives it; no function
//! outside tests is over 100 lines; no two types share a name; no two files of one
//! room import each other; the dev-dependencies add
//! no feature to a dependency (so `cargo build` and `cargo test` share one build). Each
//! rule is also run on a small tree that breaks it, so that a rule that can no longer
//! fail is noticed.

#![allow(clippy::unwrap_used, clippy::expect_used)] // A test: a panic is the failure report.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Longest function allowed outside tests, in lines.
const MAX_FN_LINES: usize = 100;

/// A source file: its path under the crate root and its text.
struct File {
    path: String,
    text: String,
}

/// Every `.rs` file under `dirs` (relative to the crate root).
fn files(root: &Path, dirs: &[&str]) -> Vec<File> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let mut paths = Vec::new();
    for d in dirs {
        walk(&root.join(d), &mut paths);
    }
    paths.sort();
    paths
        .into_iter()
        .map(|p| File {
            path: p
                .strip_prefix(root)
                .unwrap_or(&p)
                .to_string_lossy()
                .into_owned(),
            text: std::fs::read_to_string(&p).unwrap_or_default(),
        })
        .collect()
}

/// The code of a line: without its comment and its string and char literals (so that
/// a path in a doc comment or a brace in a string counts for nothing).
fn code(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => break,
            '"' => {
                while let Some(s) = chars.next() {
                    match s {
                        '\\' => {
                            chars.next();
                        }
                        '"' => break,
                        _ => {}
                    }
                }
                out.push_str("\"\"");
            }
            // A char literal ('{', '\''), not a lifetime ('a).
            '\'' => {
                let rest: String = chars.clone().take(3).collect();
                let literal = rest.starts_with('\\') || rest.chars().nth(1) == Some('\'');
                if literal {
                    if chars.next() == Some('\\') {
                        chars.next();
                    }
                    chars.next();
                    out.push_str("''");
                } else {
                    out.push(c);
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// The room of a file of `src/`: `nats/` for `src/nats/pull.rs`, `policy.rs` for
/// `src/policy.rs`.
fn room(path: &str) -> String {
    let rel = path.strip_prefix("src/").unwrap_or(path);
    match rel.split_once('/') {
        Some((dir, _)) => format!("{dir}/"),
        None => rel.to_string(),
    }
}

/// The rooms a file names through `crate::<room>`, with the first line of each.
fn imports(f: &File, rooms: &BTreeMap<String, usize>) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    for (n, line) in f.text.lines().enumerate() {
        let code = code(line);
        let mut rest = code.as_str();
        while let Some(at) = rest.find("crate::") {
            let name: String = rest[at + 7..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            rest = &rest[at + 7..];
            let target = [format!("{name}/"), format!("{name}.rs")]
                .into_iter()
                .find(|r| rooms.contains_key(r));
            if let Some(t) = target {
                out.push((t, n + 1));
            }
        }
    }
    out
}

/// The backticked names of a markdown table's column `col`, row by row, from the
/// table right after the line holding `marker`.
fn table(doc: &str, marker: &str, col: usize) -> Vec<Vec<String>> {
    let Some(at) = doc.find(marker) else {
        return Vec::new();
    };
    doc[at..]
        .lines()
        .skip(1)
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .filter(|l| !l.starts_with("| ---"))
        .skip(1) // the header
        .map(|l| {
            let cell = l.split('|').nth(col + 1).unwrap_or("");
            cell.split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect()
        })
        .collect()
}

/// The layer table: room → row, the bottom row 1.
fn layers(doc: &str) -> BTreeMap<String, usize> {
    let rows = table(doc, "<!-- tidy: layers", 1);
    let n = rows.len();
    rows.into_iter()
        .enumerate()
        .flat_map(|(i, rooms)| rooms.into_iter().map(move |r| (r, n - i)))
        .collect()
}

/// The crates table: outside crate → the rooms (or files) that may name it.
fn crate_rooms(doc: &str) -> BTreeMap<String, Vec<String>> {
    let crates = table(doc, "<!-- tidy: crates", 0);
    let rooms = table(doc, "<!-- tidy: crates", 1);
    crates
        .into_iter()
        .zip(rooms)
        .flat_map(|(cs, rs)| cs.into_iter().map(move |c| (c, rs.clone())))
        .collect()
}

fn check_purpose_lines(files: &[File]) -> Vec<String> {
    files
        .iter()
        .filter(|f| !f.text.starts_with("//!"))
        .map(|f| format!("{}: the first line is not its //! purpose line", f.path))
        .collect()
}

fn check_layers(files: &[File], rows: &BTreeMap<String, usize>) -> Vec<String> {
    let mut problems = Vec::new();
    // The crate root only lists the rooms.
    let rooms = files
        .iter()
        .filter(|f| f.path.starts_with("src/") && f.path != "src/lib.rs");
    for f in rooms {
        let from = room(&f.path);
        let Some(&row) = rows.get(&from) else {
            problems.push(format!(
                "{}: room {from} is not in ARCHITECTURE.md's layer table",
                f.path
            ));
            continue;
        };
        for (to, line) in imports(f, rows) {
            let to_row = rows[&to];
            if to != from && to_row >= row {
                let how = if to_row == row { "sideways" } else { "up" };
                problems.push(format!(
                    "{}:{line}: {from} (row {row}) imports {to} (row {to_row}): {how} the layer table",
                    f.path
                ));
            }
        }
    }
    problems
}

/// The never table: room → the rooms it may not import, though below it.
fn nevers(doc: &str) -> BTreeMap<String, Vec<String>> {
    let rooms = table(doc, "<!-- tidy: never", 0);
    let never = table(doc, "<!-- tidy: never", 1);
    rooms
        .into_iter()
        .zip(never)
        .flat_map(|(rs, ns)| rs.into_iter().map(move |r| (r, ns.clone())))
        .collect()
}

fn check_nevers(
    files: &[File],
    rows: &BTreeMap<String, usize>,
    never: &BTreeMap<String, Vec<String>>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for f in files.iter().filter(|f| f.path.starts_with("src/")) {
        let from = room(&f.path);
        let Some(forbidden) = never.get(&from) else {
            continue;
        };
        for (to, line) in imports(f, rows) {
            if forbidden.contains(&to) {
                problems.push(format!(
                    "{}:{line}: {from} imports {to}, which the never table forbids",
                    f.path
                ));
            }
        }
    }
    problems
}

fn check_crates(files: &[File], crates: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    let mut problems = Vec::new();
    for f in files.iter().filter(|f| f.path.starts_with("src/")) {
        let rel = f.path.strip_prefix("src/").unwrap_or(&f.path);
        for (name, allowed) in crates {
            let inside = allowed
                .iter()
                .any(|r| rel == r || (r.ends_with('/') && rel.starts_with(r.as_str())));
            if inside {
                continue;
            }
            let pattern = format!("{name}::");
            for (n, line) in f.text.lines().enumerate() {
                let code = code(line);
                let named = code.match_indices(&pattern).any(|(at, _)| {
                    at == 0
                        || !code[..at]
                            .chars()
                            .next_back()
                            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
                });
                if named {
                    problems.push(format!(
                        "{}:{}: names {name}, which only {} may",
                        f.path,
                        n + 1,
                        allowed.join(", ")
                    ));
                }
            }
        }
    }
    problems
}

/// The lines of a file that are not test code, with their numbers (from 0): reading
/// stops at an inline `#[cfg(test)] mod … {` (a module of tests closes a file); a
/// `#[cfg(test)] mod tests;` (its tests in a file of their own) and any other
/// `#[cfg(test)]` item are skipped, and the lines after them read.
fn outside_tests(text: &str) -> Vec<(usize, &str)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if !lines[i].trim_start().starts_with("#[cfg(test)]") {
            out.push((i, lines[i]));
            i += 1;
            continue;
        }
        // The item the attribute is on: its first line, then to its end.
        let Some(first) = (i + 1..lines.len()).find(|&j| !lines[j].trim().is_empty()) else {
            break;
        };
        let head = code(lines[first]);
        let head = head.trim_start();
        if head.starts_with("mod ") && head.contains('{') {
            break;
        }
        let mut depth = 0i64;
        let mut end = first;
        for (j, l) in lines.iter().enumerate().skip(first) {
            let l = code(l);
            depth += l.matches('{').count() as i64 - l.matches('}').count() as i64;
            end = j;
            if depth <= 0 && (l.contains('}') || l.trim_end().ends_with(';')) {
                break;
            }
        }
        i = end + 1;
    }
    out
}

/// Two files of one room that import each other (`super::b` in `a.rs`, `super::a` in
/// `b.rs`, or through `crate::<room>::`): one of them owns what both need, or a third
/// file does. A room's `mod.rs` re-exports its files and is left out.
fn check_circles(files: &[File]) -> Vec<String> {
    // (room, file stem) → the sibling stems it names, with the line of the first.
    let mut names: BTreeMap<(String, String), BTreeMap<String, usize>> = BTreeMap::new();
    for f in files.iter().filter(|f| f.path.starts_with("src/")) {
        let rel = f.path.strip_prefix("src/").unwrap_or(&f.path);
        let Some((dir, file)) = rel.split_once('/') else {
            continue;
        };
        let Some(stem) = file.strip_suffix(".rs") else {
            continue;
        };
        if stem == "mod" || stem.contains('/') {
            continue;
        }
        let entry = names
            .entry((dir.to_string(), stem.to_string()))
            .or_default();
        for (n, line) in outside_tests(&f.text) {
            let code = code(line);
            for prefix in ["super::".to_string(), format!("crate::{dir}::")] {
                let mut rest = code.as_str();
                while let Some(at) = rest.find(&prefix) {
                    rest = &rest[at + prefix.len()..];
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    if rest[name.len()..].starts_with("::") && name != stem {
                        entry.entry(name).or_insert(n + 1);
                    }
                }
            }
        }
    }
    let mut problems = Vec::new();
    for ((room, a), named) in &names {
        for (b, line) in named {
            if a < b
                && let Some(back) = names.get(&(room.clone(), b.clone())).and_then(|m| m.get(a))
            {
                problems.push(format!(
                    "src/{room}/{a}.rs:{line} imports {b}, and src/{room}/{b}.rs:{back} imports {a}: an import circle inside {room}/ (move what both need to one of them, or to a third file)"
                ));
            }
        }
    }
    problems
}

fn check_function_lengths(files: &[File]) -> Vec<String> {
    let mut problems = Vec::new();
    for f in files.iter().filter(|f| f.path.starts_with("src/")) {
        if f.path.ends_with("/tests.rs") {
            continue;
        }
        let (numbers, lines): (Vec<usize>, Vec<String>) = outside_tests(&f.text)
            .into_iter()
            .map(|(n, l)| (n, code(l)))
            .unzip();
        let mut i = 0;
        while i < lines.len() {
            let Some(name) = fn_name(&lines[i]) else {
                i += 1;
                continue;
            };
            let (mut depth, mut opened, mut end) = (0i64, false, i);
            for (j, l) in lines.iter().enumerate().skip(i) {
                depth += l.matches('{').count() as i64 - l.matches('}').count() as i64;
                opened |= l.contains('{');
                end = j;
                if (opened && depth <= 0) || (!opened && l.trim_end().ends_with(';')) {
                    break;
                }
            }
            let n = end - i + 1;
            if n > MAX_FN_LINES {
                problems.push(format!(
                    "{}:{}: fn {name} is {n} lines (at most {MAX_FN_LINES}): split it where its parts meet",
                    f.path,
                    numbers[i] + 1
                ));
            }
            i += 1;
        }
    }
    problems
}

fn check_type_names(files: &[File]) -> Vec<String> {
    let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for f in files.iter().filter(|f| f.path.starts_with("src/")) {
        if f.path.ends_with("/tests.rs") {
            continue;
        }
        for (n, line) in outside_tests(&f.text) {
            let code = code(line);
            let mut words = code.split_whitespace();
            while let Some(w) = words.next() {
                if w == "struct" || w == "enum" || w == "trait" {
                    if let Some(name) = words.next() {
                        let name: String = name
                            .chars()
                            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                            .collect();
                        if name.starts_with(|c: char| c.is_ascii_uppercase()) {
                            seen.entry(name)
                                .or_default()
                                .push(format!("{}:{}", f.path, n + 1));
                        }
                    }
                    break;
                }
                if !(w.starts_with("pub") || w.starts_with("#[")) {
                    break;
                }
            }
        }
    }
    seen.into_iter()
        .filter(|(_, at)| at.len() > 1)
        .map(|(name, at)| format!("{name} names {} types: {}", at.len(), at.join(", ")))
        .collect()
}

/// The name of the function a line starts, if it starts one.
fn fn_name(line: &str) -> Option<&str> {
    let mut words = line.split_whitespace().peekable();
    while let Some(w) = words.peek() {
        if w.starts_with("pub") || *w == "async" || *w == "const" || *w == "unsafe" {
            words.next();
        } else {
            break;
        }
    }
    if words.next()? != "fn" {
        return None;
    }
    let name = words.next()?;
    Some(name.split(['(', '<']).next().unwrap_or(name))
}

/// `cargo tree`'s packages and their features, one `name vX.Y.Z [f,g]` a line, as
/// `cargo build` resolves them (`edges` "normal,build") or `cargo test` does (with "dev").
fn resolved(edges: &str) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args([
            "tree",
            "--frozen",
            "--prefix",
            "none",
            "-f",
            "{p} [{f}]",
            "-e",
            edges,
        ])
        .arg("--manifest-path")
        .arg(root().join("Cargo.toml"))
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree -e {edges}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("cargo tree prints UTF-8")
}

/// Each package `cargo build` builds (`build`: `resolved("normal,build")`) that
/// `cargo test` (`test`) builds with other features: it, and every crate above it
/// (jetrelay too), would be compiled twice, once for `scripts/demo` and once for
/// `scripts/test`.
fn check_one_build(build: &str, test: &str) -> Vec<String> {
    fn packages(tree: &str) -> BTreeMap<String, String> {
        tree.lines()
            .filter_map(|l| {
                let l = l.trim_end().trim_end_matches(" (*)");
                let (package, features) = l.rsplit_once(" [")?;
                let package = package.trim_end_matches(" (proc-macro)");
                Some((
                    package.to_string(),
                    features.trim_end_matches(']').to_string(),
                ))
            })
            .collect()
    }
    let test = packages(test);
    packages(build)
        .into_iter()
        .filter_map(|(package, features)| match test.get(&package) {
            Some(t) if *t == features => None,
            t => Some(format!(
                "{package}: [{features}] in `cargo build`, [{}] in `cargo test`: ask for the tests' features in [dependencies]",
                t.map_or("not built", String::as_str)
            )),
        })
        .collect()
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn architecture() -> String {
    std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md")
}

fn assert_none(what: &str, problems: Vec<String>) {
    assert!(problems.is_empty(), "{what}:\n  {}", problems.join("\n  "));
}

#[test]
fn every_file_opens_with_its_purpose_line() {
    let all = files(&root(), &["src", "tests", "bench/src", "examples"]);
    assert!(all.len() > 50, "the tree was not read: {} files", all.len());
    assert_none("purpose lines", check_purpose_lines(&all));
}

#[test]
fn imports_run_down_the_layer_table_and_every_room_is_in_it() {
    let rows = layers(&architecture());
    assert!(
        rows.len() > 10,
        "no layer table in ARCHITECTURE.md: {rows:?}"
    );
    let src = files(&root(), &["src"]);
    assert_none("layers", check_layers(&src, &rows));
    let never = nevers(&architecture());
    assert!(never.contains_key("config/"), "no never table: {never:?}");
    assert_none("never", check_nevers(&src, &rows, &never));
    // Every room of the table is in the tree (a room that moved is moved there too).
    for r in rows.keys() {
        assert!(
            root().join("src").join(r).exists(),
            "the table names {r}, not in src/"
        );
    }
}

#[test]
fn outside_crates_are_named_only_in_their_rooms() {
    let crates = crate_rooms(&architecture());
    assert!(
        crates.contains_key("async_nats"),
        "no crates table: {crates:?}"
    );
    assert_none(
        "outside crates",
        check_crates(&files(&root(), &["src"]), &crates),
    );
}

#[test]
fn no_function_outside_tests_is_over_a_hundred_lines() {
    assert_none(
        "function lengths",
        check_function_lengths(&files(&root(), &["src"])),
    );
}

#[test]
fn no_two_files_of_a_room_import_each_other() {
    assert_none("import circles", check_circles(&files(&root(), &["src"])));
}

#[test]
fn no_two_types_share_a_name() {
    assert_none("type names", check_type_names(&files(&root(), &["src"])));
}

// === the rules on trees that break them ===

#[test]
fn dev_dependencies_add_no_feature_to_a_dependency() {
    let build = resolved("normal,build");
    assert!(
        build.lines().count() > 100,
        "the tree was not read: {build}"
    );
    assert_none(
        "one build for scripts/demo and scripts/test",
        check_one_build(&build, &resolved("normal,build,dev")),
    );
}

impl File {
    fn clone_as(&self, path: &str) -> File {
        file(path, &self.text)
    }
}

fn file(path: &str, text: &str) -> File {
    File {
        path: path.into(),
        text: text.into(),
    }
}

const DOC: &str = "\
<!-- tidy: layers -->
| row | rooms | what |
| --- | --- | --- |
| 3 | `daemon/` | top |
| 2 | `nats/`, `http/` | boundaries |
| 1 | `policy.rs` | core |

<!-- tidy: never -->
| room | never | why |
| --- | --- | --- |
| `daemon/` | `http/` | a test |

<!-- tidy: crates -->
| crate | rooms |
| --- | --- |
| `async_nats` | `nats/` |
";

#[test]
fn each_rule_fails_on_a_tree_that_breaks_it() {
    let rows = layers(DOC);
    assert_eq!(rows["daemon/"], 3);
    assert_eq!(rows["http/"], 2);
    assert_eq!(rows["policy.rs"], 1);
    let tree = [
        file("src/policy.rs", "//! Core.\nuse crate::nats::Nats;\n"),
        file(
            "src/http/forward.rs",
            "//! App.\nuse crate::nats::Nats;\nuse crate::policy::P;\n",
        ),
        file(
            "src/nats/mod.rs",
            "//! NATS.\n// crate::daemon in a comment\nlet s = \"crate::daemon\";\nuse async_nats::Client;\n",
        ),
        file(
            "src/daemon/mod.rs",
            "//! Top.\nuse crate::nats::Nats;\nuse async_nats::Client;\n",
        ),
        file("src/extra.rs", "no purpose line\n"),
    ];
    let layers = check_layers(&tree, &rows);
    assert!(
        layers
            .iter()
            .any(|p| p.starts_with("src/policy.rs:2") && p.contains("up")),
        "{layers:?}"
    );
    assert!(
        layers
            .iter()
            .any(|p| p.starts_with("src/http/forward.rs:2") && p.contains("sideways")),
        "{layers:?}"
    );
    assert!(
        layers.iter().any(|p| p.contains("extra.rs is not in")),
        "{layers:?}"
    );
    assert_eq!(
        layers.len(),
        3,
        "comments, strings and downward imports count for nothing: {layers:?}"
    );
    let never = check_nevers(&tree, &rows, &nevers(DOC));
    assert!(never.is_empty(), "{never:?}");
    let daemon_http = [file(
        "src/daemon/mod.rs",
        "//! Top.\nuse crate::http::forward;\n",
    )];
    let never = check_nevers(&daemon_http, &rows, &nevers(DOC));
    assert_eq!(never.len(), 1, "{never:?}");
    assert!(never[0].contains("never table forbids"), "{never:?}");
    let crates = check_crates(&tree, &crate_rooms(DOC));
    assert_eq!(crates.len(), 1, "{crates:?}");
    assert!(
        crates[0].starts_with("src/daemon/mod.rs:3: names async_nats"),
        "{crates:?}"
    );
    assert_eq!(check_purpose_lines(&tree).len(), 1);
    let twice = [
        file(
            "src/a.rs",
            "//! A.\npub struct Limits {}\n#[cfg(test)]\nstruct Fake;\n",
        ),
        file(
            "src/b.rs",
            "//! B.\npub(crate) enum Limits { X }\nstruct Fake;\n",
        ),
    ];
    let names = check_type_names(&twice);
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(names[0].starts_with("Limits names 2 types"), "{names:?}");
    let long = format!(
        "//! Long.\npub(crate) async fn long() {{\n{}}}\nfn short() {{ let c = '{{'; }}\n#[cfg(test)]\nfn in_tests() {{\n{}}}\n",
        "    step();\n".repeat(MAX_FN_LINES),
        "    step();\n".repeat(MAX_FN_LINES),
    );
    let lengths = check_function_lengths(&[file("src/policy.rs", &long)]);
    assert_eq!(lengths.len(), 1, "{lengths:?}");
    assert!(lengths[0].contains("fn long is 102 lines"), "{lengths:?}");
    // A module whose tests are in a file of their own (`mod tests;`) is read to its
    // end: what follows the declaration is not test code.
    let after = format!(
        "//! Long.\n#[cfg(test)]\nmod tests;\n\npub struct After;\nfn long() {{\n{}}}\n#[cfg(test)]\nmod more {{\nfn in_tests() {{\n{}}}\n}}\n",
        "    step();\n".repeat(MAX_FN_LINES),
        "    step();\n".repeat(MAX_FN_LINES),
    );
    let tree = [file("src/dispatch/mod.rs", &after)];
    let lengths = check_function_lengths(&tree);
    assert_eq!(lengths.len(), 1, "{lengths:?}");
    assert!(
        lengths[0].starts_with("src/dispatch/mod.rs:6: fn long is 102 lines"),
        "{lengths:?}"
    );
    let names = check_type_names(&[tree[0].clone_as("src/a.rs"), tree[0].clone_as("src/b.rs")]);
    assert!(names[0].starts_with("After names 2 types"), "{names:?}");
    // Two files of one room that import each other; a third that only imports, the
    // room's mod.rs and another room's file of the same name are no circle.
    let circle = [
        file(
            "src/nats/pause.rs",
            "//! P.\nuse super::streams::refused;\nuse super::Nats;\n",
        ),
        file(
            "src/nats/streams.rs",
            "//! S.\nfn f() { crate::nats::pause::pause_of(); }\n",
        ),
        file("src/nats/pull.rs", "//! U.\nuse super::streams::x;\n"),
        file("src/nats/mod.rs", "//! M.\nuse self::pull::x;\n"),
        file("src/http/pause.rs", "//! H.\nuse super::streams::y;\n"),
    ];
    let circles = check_circles(&circle);
    assert_eq!(circles.len(), 1, "{circles:?}");
    assert!(
        circles[0].starts_with(
            "src/nats/pause.rs:2 imports streams, and src/nats/streams.rs:2 imports pause"
        ),
        "{circles:?}"
    );
    let build = "jetrelay v0.1.0 (/src) []\ntokio v1.54.1 [net,rt]\nbytes v1.12.2 [std]\nbytes v1.12.2 [std] (*)\nserde_derive v1.0.229 (proc-macro) [default]\n";
    let test = "jetrelay v0.1.0 (/src) []\ntokio v1.54.1 [net,process,rt]\nbytes v1.12.2 [std]\nproptest v1.12.0 [std]\nserde_derive v1.0.229 (proc-macro) [default]\n";
    let twice = check_one_build(build, test);
    assert_eq!(twice.len(), 1, "{twice:?}");
    assert!(
        twice[0].starts_with("tokio v1.54.1: [net,rt] in `cargo build`, [net,process,rt]"),
        "{twice:?}"
    );
}
