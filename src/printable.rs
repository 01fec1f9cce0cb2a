//! Text fit for a terminal: what a publisher wrote (a subject, a header, a reason)
//! is shown with its control characters and the bidirectional formatting characters
//! (which make text display in another order than it is) escaped, so that it can
//! neither drive the terminal nor disguise itself. `jetrelay dlq`'s output and the
//! text log format go through here. Also [`list`]: a list bounded for one log line
//! (`a, b, c (+N more)`).

use std::borrow::Cow;

/// What a terminal must not be handed raw.
fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}')
}

fn escape(text: &str, keep: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !text.chars().any(|c| hidden(c) && !keep(c)) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(
        text.chars()
            .map(|c| {
                if hidden(c) && !keep(c) {
                    c.escape_default().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect(),
    )
}

/// `text` with every hidden character escaped.
pub fn printable(text: &str) -> Cow<'_, str> {
    escape(text, |_| false)
}

/// As [`printable`], keeping line breaks and tabs (a payload's own layout).
pub fn printable_lines(text: &str) -> Cow<'_, str> {
    escape(text, |c| c == '\n' || c == '\t')
}

/// A list for a log line: its items joined by `, `, at most `max` of them, then how
/// many more there are (a member's 1,000 partitions must not make a line of 5 KB).
pub fn list<T: std::fmt::Display>(items: &[T], max: usize) -> String {
    let mut out = items
        .iter()
        .take(max)
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > max {
        out.push_str(&format!(" (+{} more)", items.len() - max));
    }
    if items.is_empty() {
        out.push_str("none");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_is_bounded_and_says_how_many_it_left_out() {
        let cases: [(&[u32], &str); 4] = [
            (&[], "none"),
            (&[1], "1"),
            (&[1, 2, 3], "1, 2, 3"),
            (&[1, 2, 3, 4, 5], "1, 2, 3 (+2 more)"),
        ];
        for (items, shown) in cases {
            assert_eq!(list(items, 3), shown, "{items:?}");
        }
    }

    #[test]
    fn hidden_characters_table() {
        let cases = [
            ("plain", "plain"),
            ("a\nb", "a\\nb"),
            ("\u{1b}[31mred", "\\u{1b}[31mred"),
            ("x\u{202E}cba", "x\\u{202e}cba"),
            ("tab\there", "tab\\there"),
        ];
        for (text, shown) in cases {
            assert_eq!(printable(text), shown, "{text:?}");
        }
        assert_eq!(printable_lines("a\nb\tc\u{7}"), "a\nb\tc\\u{7}");
        assert!(matches!(printable("plain"), Cow::Borrowed(_)));
    }
}
