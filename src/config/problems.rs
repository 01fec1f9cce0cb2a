//! What is wrong with a configuration, said for people: every problem names its key
//! (and the environment variable, when the value came from one); a misspelt key
//! names the closest valid one; a TOML file that does not parse names the file, the
//! line and the column; no config at all says that no file was given.

use std::fmt;
use std::path::{Path, PathBuf};

use figment::Figment;
use figment::error::Kind;

use super::ENV_PREFIX;

/// One problem with one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The dotted key, e.g. `delivery.max_in_flight`.
    pub key: String,
    /// What is wrong with it.
    pub message: String,
    /// The environment variable the value came from (`JETRELAY_DELIVERY__…`), when
    /// it came from one.
    pub env: Option<String>,
}

impl Problem {
    /// A problem with `key`.
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Problem {
        Problem {
            key: key.into(),
            message: message.into(),
            env: None,
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.env {
            Some(var) => write!(f, "{var} ({}): {}", self.key, self.message),
            None => write!(f, "{}: {}", self.key, self.message),
        }
    }
}

/// Why a configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file named on the command line does not exist.
    #[error("config file {0} does not exist")]
    MissingFile(PathBuf),
    /// The file is not valid TOML.
    #[error("{file}, line {line}, column {column}: not valid TOML: {message}\n{snippet}")]
    Syntax {
        /// The file.
        file: PathBuf,
        /// 1-based.
        line: usize,
        /// 1-based, in characters.
        column: usize,
        /// What the parser says.
        message: String,
        /// The line, with a caret under the column.
        snippet: String,
    },
    /// No file was given, and the environment alone does not make a config.
    #[error(
        "no config file was given (--config FILE, or JETRELAY_CONFIG=FILE), and the JETRELAY_* environment alone is not a config:\n{}",
        list(.0)
    )]
    NoFile(Vec<Problem>),
    /// The file or environment could not be read into the config tree, or values break
    /// the rules; every problem is listed.
    #[error("invalid configuration:\n{}", list(.0))]
    Invalid(Vec<Problem>),
}

impl ConfigError {
    /// The problems, for tests and callers that want the keys.
    pub fn problems(&self) -> &[Problem] {
        match self {
            ConfigError::MissingFile(_) | ConfigError::Syntax { .. } => &[],
            ConfigError::Invalid(p) | ConfigError::NoFile(p) => p,
        }
    }
}

fn list(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| format!("  {p}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The problems found so far.
#[derive(Debug, Default)]
pub(super) struct Problems(pub(super) Vec<Problem>);

impl Problems {
    pub(super) fn add(&mut self, key: impl Into<String>, message: impl Into<String>) {
        self.0.push(Problem::new(key, message));
    }

    /// Between `min` and `max`, both included.
    pub(super) fn range(&mut self, key: &str, value: u64, min: u64, max: u64) {
        if value < min {
            self.add(key, format!("must be at least {min}"));
        } else if value > max {
            self.add(key, format!("must be at most {max}"));
        }
    }

    /// Each `(key, value, min, max)` of `rows` between its `min` and `max`.
    pub(super) fn ranges(&mut self, rows: &[(&str, u64, u64, u64)]) {
        for &(key, value, min, max) in rows {
            self.range(key, value, min, max);
        }
    }

    /// `key` (at `value`) at least `floor_key` (at `floor`): "must be at least
    /// `floor_key`", then `why` when it is not empty.
    pub(super) fn at_least(&mut self, key: (&str, u64), floor: (&str, u64), why: &str) {
        self.bounded(key, floor, std::cmp::Ordering::Less, "at least", why);
    }

    /// `key` (at `value`) at most `ceiling_key` (at `ceiling`): "must be at most
    /// `ceiling_key`", then `why` when it is not empty.
    pub(super) fn at_most(&mut self, key: (&str, u64), ceiling: (&str, u64), why: &str) {
        self.bounded(key, ceiling, std::cmp::Ordering::Greater, "at most", why);
    }

    fn bounded(
        &mut self,
        (key, value): (&str, u64),
        (bound_key, bound): (&str, u64),
        wrong: std::cmp::Ordering,
        rule: &str,
        why: &str,
    ) {
        if value.cmp(&bound) == wrong {
            let why = if why.is_empty() {
                String::new()
            } else {
                format!(" ({why})")
            };
            self.add(key, format!("must be {rule} {bound_key}{why}"));
        }
    }
}

/// Checks that `path` holds valid TOML, before figment reads it: a syntax error
/// names the file, the line and the column, with the line shown.
///
/// # Errors
/// [`ConfigError::Syntax`], or [`ConfigError::MissingFile`] when it cannot be read.
pub(super) fn check_syntax(path: &Path) -> Result<(), ConfigError> {
    let text =
        std::fs::read_to_string(path).map_err(|_| ConfigError::MissingFile(path.to_path_buf()))?;
    let Err(e) = text.parse::<toml::Table>() else {
        return Ok(());
    };
    let at = e.span().map_or(0, |s| s.start).min(text.len());
    let before = text.get(..at).unwrap_or("");
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before.get(line_start..).map_or(0, |s| s.chars().count()) + 1;
    let shown = text.lines().nth(line - 1).unwrap_or("");
    let number = line.to_string();
    let snippet = format!(
        "  {number} | {shown}\n  {} | {}^",
        " ".repeat(number.len()),
        " ".repeat(column - 1)
    );
    Err(ConfigError::Syntax {
        file: path.to_path_buf(),
        line,
        column,
        message: e.message().trim().replace('\n', "; "),
        snippet,
    })
}

/// The problems of a figment that did not extract, said plainly.
pub(super) fn extraction(figment: &Figment, e: figment::Error) -> ConfigError {
    let problems = e
        .into_iter()
        .map(|e| {
            let path: Vec<String> = e.path.clone();
            let key = if path.is_empty() {
                "config".to_string()
            } else {
                path.join(".")
            };
            let from_env = e
                .metadata
                .as_ref()
                .is_some_and(|m| m.name.contains("environment"));
            let message = match &e.kind {
                Kind::UnknownField(field, expected) => unknown(field, expected, &path, from_env),
                Kind::InvalidType(actual, expected) => {
                    format!("must be {}, not {actual}", plain(expected))
                }
                Kind::UnknownVariant(v, expected) => {
                    format!("{v:?} is not one of {}", quoted(expected))
                }
                other => other.to_string(),
            };
            Problem {
                key,
                message,
                env: from_env.then(|| env_var(&path)),
            }
        })
        .collect();
    ConfigError::Invalid(with_origins(figment, problems))
}

/// Names the environment variable of each problem whose value came from one.
pub(super) fn with_origins(figment: &Figment, mut problems: Vec<Problem>) -> Vec<Problem> {
    for p in &mut problems {
        let Some(m) = figment.find_metadata(&p.key).filter(|_| p.env.is_none()) else {
            continue;
        };
        if let Some(var) = super::otel_env::origin(&m.name) {
            p.env = Some(var.to_string());
        } else if m.name.contains("environment") {
            p.env = Some(env_var(&p.key.split('.').collect::<Vec<_>>()));
        }
    }
    problems
}

/// The environment variable of a dotted key: `JETRELAY_DELIVERY__MAX_IN_FLIGHT`.
fn env_var<S: AsRef<str>>(path: &[S]) -> String {
    let keys: Vec<String> = path
        .iter()
        .map(|k| k.as_ref().to_ascii_uppercase())
        .collect();
    format!("{ENV_PREFIX}{}", keys.join("__"))
}

/// An unknown key, with the closest valid one when there is one close enough.
fn unknown(field: &str, expected: &[&str], path: &[String], from_env: bool) -> String {
    let what = if path.len() <= 1 { "section" } else { "key" };
    let Some(best) = closest(field, expected) else {
        let table = match path.len() {
            0 | 1 => "the sections are".to_string(),
            n => format!("the keys of [{}] are", path[..n - 1].join(".")),
        };
        return format!("unknown {what} ({table} {})", expected.join(", "));
    };
    let suggestion = if from_env {
        let mut p: Vec<&str> = path.iter().map(String::as_str).collect();
        p.pop();
        p.push(best);
        env_var(&p)
    } else {
        best.to_string()
    };
    format!("unknown {what}; did you mean {suggestion}?")
}

/// The valid name closest to `word`, when it is close enough to be what was meant:
/// at most two edits, or the same letters without their underscores and case.
fn closest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let squash = |s: &str| -> String {
        s.chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .map(|c| c.to_ascii_lowercase())
            .collect()
    };
    let w = squash(word);
    candidates
        .iter()
        .map(|c| {
            let d = if squash(c) == w {
                0
            } else {
                edits(&word.to_ascii_lowercase(), c)
            };
            (d, *c)
        })
        .filter(|(d, c)| *d <= 2.min(c.len() / 2).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Edit distance (insertions, deletions, substitutions, adjacent transpositions).
fn edits(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = v;
        }
    }
    d[a.len()][b.len()]
}

/// serde's name of a type, in words.
fn plain(expected: &str) -> String {
    let e = expected.trim();
    match e {
        "u8" | "u16" | "u32" | "u64" | "usize" => "a whole number, 0 or more".into(),
        "i8" | "i16" | "i32" | "i64" | "isize" => "a whole number".into(),
        "a boolean" | "bool" => "true or false".into(),
        "a string" => "a string (in quotes)".into(),
        _ => e.to_string(),
    }
}

fn quoted(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("\"{n}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_closest_key_is_suggested_only_when_it_is_close() {
        let keys = ["max_in_flight", "max_buffered", "max_batch", "ordering"];
        let cases = [
            ("max_inflight", Some("max_in_flight")),
            ("maxinflight", Some("max_in_flight")),
            ("MAX_IN_FLIGHT", Some("max_in_flight")),
            ("max_bufered", Some("max_buffered")),
            ("ordreing", Some("ordering")),
            ("max_batches", Some("max_batch")),
            ("colour", None),
            ("x", None),
        ];
        for (word, want) in cases {
            assert_eq!(closest(word, &keys), want, "{word}");
        }
        assert_eq!(edits("ab", "ba"), 1);
        assert_eq!(edits("", "abc"), 3);
    }

    #[test]
    fn an_ordered_pair_says_which_way_and_why_only_when_out_of_order() {
        let said = |check: fn(&mut Problems)| {
            let mut p = Problems::default();
            check(&mut p);
            p.0.iter().map(ToString::to_string).collect::<Vec<_>>()
        };
        assert_eq!(
            said(|p| p.at_most(("a", 3), ("b", 2), "why")),
            ["a: must be at most b (why)"]
        );
        assert_eq!(
            said(|p| p.at_least(("a", 1), ("b", 2), "")),
            ["a: must be at least b"]
        );
        for equal_or_in_order in [
            said(|p| p.at_most(("a", 2), ("b", 2), "")),
            said(|p| p.at_most(("a", 1), ("b", 2), "")),
            said(|p| p.at_least(("a", 2), ("b", 2), "")),
            said(|p| p.at_least(("a", 3), ("b", 2), "")),
        ] {
            assert!(equal_or_in_order.is_empty(), "{equal_or_in_order:?}");
        }
    }

    #[test]
    fn a_syntax_error_names_the_file_the_line_and_the_column() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.toml");
        std::fs::write(&path, "[source]\nstream = \"S\"\n[http\nurl = 1\n").unwrap();
        let err = check_syntax(&path).unwrap_err();
        let ConfigError::Syntax { line, column, .. } = &err else {
            panic!("{err}");
        };
        assert_eq!((*line, *column), (3, 6), "{err}");
        let text = err.to_string();
        assert!(
            text.starts_with(&format!(
                "{}, line 3, column 6: not valid TOML",
                path.display()
            )),
            "{text}"
        );
        assert!(text.contains("3 | [http\n"), "{text}");
        std::fs::write(&path, "[source]\nstream = \"S\"\n").unwrap();
        assert!(check_syntax(&path).is_ok());
    }
}
