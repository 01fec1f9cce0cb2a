//! Text fit for a terminal: what a publisher wrote (a subject, a header, a reason)
//! is shown with its control characters and the bidirectional formatting characters
//! (which make text display in another order than it is) escaped, so that it can
//! neither drive the terminal nor disguise itself. `jetrelay dlq`'s output and the
//! text log format go through here.

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

#[cfg(test)]
mod tests {
    use super::*;

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
