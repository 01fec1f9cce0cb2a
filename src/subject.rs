//! NATS names and subjects as pure functions: syntax checks, wildcard coverage and
//! overlap, the partition token of group subjects, and the longest subject taken
//! ([`MAX_SUBJECT_LEN`]).
//!
//! No I/O and no outside crate types; the topology plan and the config use these.

/// Checks a stream, consumer, group or member name: non-empty, printable, and none of
/// `.`, `*`, `>`, whitespace, `/` or `\`.
///
/// # Errors
/// A sentence saying what is wrong.
pub fn validate_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if let Some(c) = name
        .chars()
        .find(|c| matches!(c, '.' | '*' | '>' | '/' | '\\') || c.is_whitespace() || c.is_control())
    {
        return Err(format!("{name:?} must not contain {c:?}"));
    }
    Ok(())
}

/// The longest subject jetrelay publishes to or filters on, in bytes. A publish's
/// control line (`HPUB <subject> <reply> <sizes>`) must fit in the server's
/// `max_control_line` (4096 bytes by default): a longer one makes the server close
/// the connection, every message in flight on it with it.
pub const MAX_SUBJECT_LEN: usize = 2048;

/// Checks a subject filter: at most [`MAX_SUBJECT_LEN`] bytes of dot-separated
/// non-empty tokens without whitespace, `*` only as a whole token, `>` only as the
/// whole last token.
///
/// # Errors
/// A sentence saying what is wrong.
pub fn validate_filter(subject: &str) -> Result<(), String> {
    if subject.is_empty() {
        return Err("must not be empty".into());
    }
    if subject.len() > MAX_SUBJECT_LEN {
        return Err(format!(
            "is {} bytes long: at most {MAX_SUBJECT_LEN} (the server drops a connection whose line is too long)",
            subject.len()
        ));
    }
    let tokens: Vec<&str> = subject.split('.').collect();
    for (i, t) in tokens.iter().enumerate() {
        if t.is_empty() {
            return Err("has an empty token".into());
        }
        if t.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err("must not contain whitespace".into());
        }
        if t.len() > 1 && (t.contains('*') || t.contains('>')) {
            return Err("wildcards must be whole tokens".into());
        }
        if *t == ">" && i + 1 != tokens.len() {
            return Err("'>' must be the last token".into());
        }
    }
    Ok(())
}

/// Checks a subject that is published to: a valid filter without wildcards.
///
/// # Errors
/// A sentence saying what is wrong.
pub fn validate_publish_subject(subject: &str) -> Result<(), String> {
    validate_filter(subject)?;
    if subject.split('.').any(|t| t == "*" || t == ">") {
        return Err("must not contain wildcards".into());
    }
    Ok(())
}

/// Whether every subject matched by `filter` is also matched by `pattern`.
pub fn covers(pattern: &str, filter: &str) -> bool {
    let p: Vec<&str> = pattern.split('.').collect();
    let f: Vec<&str> = filter.split('.').collect();
    for (i, pt) in p.iter().enumerate() {
        match *pt {
            ">" => return f.len() > i,
            _ if i >= f.len() => return false,
            "*" => {
                if f[i] == ">" {
                    return false;
                }
            }
            literal => {
                if f[i] != literal {
                    return false;
                }
            }
        }
    }
    p.len() == f.len()
}

/// Whether some subject is matched by both `a` and `b`.
pub fn overlaps(a: &str, b: &str) -> bool {
    let a: Vec<&str> = a.split('.').collect();
    let b: Vec<&str> = b.split('.').collect();
    for i in 0..a.len().max(b.len()) {
        match (a.get(i), b.get(i)) {
            (Some(&">"), Some(_)) | (Some(_), Some(&">")) => return true,
            (Some(x), Some(y)) => {
                if *x != "*" && *y != "*" && x != y {
                    return false;
                }
            }
            _ => return false,
        }
    }
    true
}

/// The first pair of overlapping filters, as a message, if any.
pub fn first_overlap(filters: &[String]) -> Option<String> {
    for (i, a) in filters.iter().enumerate() {
        for b in &filters[i + 1..] {
            if overlaps(a, b) {
                return Some(format!("{a:?} and {b:?} overlap"));
            }
        }
    }
    None
}

/// Splits a group subject `"<partition>.<rest>"` into the partition number and the
/// subject with the token stripped. `None` when the first token is not a number or
/// nothing follows it.
pub fn split_partition(subject: &str) -> Option<(u32, &str)> {
    let (first, rest) = subject.split_once('.')?;
    if rest.is_empty() || first.is_empty() || !first.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((first.parse().ok()?, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in ["ORDERS", "cg-1", "m_1"] {
            assert!(validate_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a.b", "a b", "a*", "a>", "a/b"] {
            assert!(validate_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn filters() {
        for ok in ["a", "a.b", "a.*", "a.>", "*.b", ">", "a.*.c"] {
            assert!(validate_filter(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a.", ".a", "a..b", "a.>.b", "a.b*", "a b", "a.>x"] {
            assert!(validate_filter(bad).is_err(), "{bad}");
        }
        assert!(validate_publish_subject("a.b").is_ok());
        assert!(validate_publish_subject("a.*").is_err());
        let longest = format!("a.{}", "x".repeat(MAX_SUBJECT_LEN - 2));
        assert!(validate_publish_subject(&longest).is_ok());
        let over = format!("{longest}x");
        assert!(
            validate_publish_subject(&over)
                .unwrap_err()
                .contains("at most 2048")
        );
    }

    #[test]
    fn coverage_table() {
        let covered = [
            ("orders.>", "orders.eu.*"),
            ("orders.*", "orders.eu"),
            ("orders.eu", "orders.eu"),
            (">", "anything.at.all"),
            ("*.b", "a.b"),
            ("*.b", "*.b"),
        ];
        for (p, f) in covered {
            assert!(covers(p, f), "{p} covers {f}");
        }
        let uncovered = [
            ("orders.>", "orders"),
            ("orders.*", "orders.>"),
            ("orders.*", "orders.eu.x"),
            ("orders.eu", "orders.*"),
            ("a.b", "a.b.c"),
        ];
        for (p, f) in uncovered {
            assert!(!covers(p, f), "{p} does not cover {f}");
        }
    }

    #[test]
    fn overlap_table() {
        let overlapping = [
            ("a.>", "a.b"),
            ("a.*", "a.b"),
            ("a.*.c", "a.b.*"),
            (">", "x"),
            ("a", "a"),
        ];
        for (a, b) in overlapping {
            assert!(overlaps(a, b) && overlaps(b, a), "{a} ~ {b}");
        }
        for (a, b) in [("a.*", "b.*"), ("a.b", "a.b.c")] {
            assert!(!overlaps(a, b) && !overlaps(b, a), "{a} !~ {b}");
        }
    }

    #[test]
    fn partition_token() {
        assert_eq!(split_partition("3.orders.eu"), Some((3, "orders.eu")));
        assert_eq!(split_partition("12.x"), Some((12, "x")));
        assert_eq!(split_partition("orders.eu"), None);
        assert_eq!(split_partition("3"), None);
        assert_eq!(split_partition("3."), None);
        assert_eq!(split_partition("-1.x"), None);
    }

    proptest::proptest! {
        #[test]
        fn a_filter_covers_itself_and_overlap_is_symmetric(
            a in "[a-c*]{1}(\\.[a-c*]){0,3}(\\.>)?", b in "[a-c*]{1}(\\.[a-c*]){0,3}(\\.>)?") {
            proptest::prop_assert!(covers(&a, &a));
            proptest::prop_assert_eq!(overlaps(&a, &b), overlaps(&b, &a));
            if covers(&a, &b) { proptest::prop_assert!(overlaps(&a, &b)); }
        }
    }
}
