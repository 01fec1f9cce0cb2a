//! The JSON log line: one object per event, written straight into the line buffer.
//!
//! `{"timestamp":"2026-11-30T02:13:12.123456Z","level":"INFO",<fields in order>,"target":"…"}`
//! — the shape of `tracing-subscriber`'s flattened JSON, which it replaces because
//! every settled message writes one line: that formatter goes through `serde_json`
//! and `fmt` for each field and took ~7% of the daemon's CPU at full load. Numbers
//! and booleans are JSON numbers and booleans; everything else is an escaped string.
//! The fields of the spans an event is in come after its own (the daemon's one span
//! is a source's: `"source":"orders"` on every line that source writes), formatted
//! once when the span is made ([`JsonFields`]), not per line.

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_log::NormalizeEvent;
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// The event formatter for `log.format = "json"`.
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        // Events bridged from the `log` crate carry their real target in fields.
        let normalized = event.normalized_metadata();
        let meta = normalized.as_ref().unwrap_or_else(|| event.metadata());
        let now = time::OffsetDateTime::now_utc();
        writer.write_str("{\"timestamp\":\"")?;
        writer.write_str(rfc3339_micros(now).as_str())?;
        writer.write_str("\",\"level\":\"")?;
        writer.write_str(level_name(*meta.level()))?;
        writer.write_char('"')?;
        let mut fields = Fields {
            w: &mut writer,
            result: Ok(()),
        };
        event.record(&mut fields);
        fields.result?;
        // Each span's fields as `JsonFields` wrote them: `,"name":value` entries.
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                if let Some(f) = span.extensions().get::<FormattedFields<N>>() {
                    writer.write_str(f.fields.as_str())?;
                }
            }
        }
        writer.write_str(",\"target\":")?;
        write_string(&mut writer, meta.target())?;
        writer.write_str("}\n")
    }
}

/// The span field formatter for `log.format = "json"`: a span's fields as the
/// `,"name":value` entries [`JsonLines`] appends to each of its events' lines.
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonFields;

impl<'w> FormatFields<'w> for JsonFields {
    fn format_fields<R: RecordFields>(&self, mut writer: Writer<'w>, fields: R) -> fmt::Result {
        let mut entries = Fields {
            w: &mut writer,
            result: Ok(()),
        };
        fields.record(&mut entries);
        entries.result
    }
}

fn level_name(level: Level) -> &'static str {
    match level {
        Level::TRACE => "TRACE",
        Level::DEBUG => "DEBUG",
        Level::INFO => "INFO",
        Level::WARN => "WARN",
        Level::ERROR => "ERROR",
    }
}

/// Writes each field as `,"name":value`; the first error is kept.
struct Fields<'a, 'w> {
    w: &'a mut Writer<'w>,
    result: fmt::Result,
}

impl Fields<'_, '_> {
    fn entry(&mut self, field: &Field, value: impl FnOnce(&mut Writer<'_>) -> fmt::Result) {
        // `log` bridge metadata, already used for the target.
        if self.result.is_err() || field.name().starts_with("log.") {
            return;
        }
        self.result = (|| {
            self.w.write_char(',')?;
            write_string(self.w, field.name())?;
            self.w.write_char(':')?;
            value(self.w)
        })();
    }
}

impl Visit for Fields<'_, '_> {
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.entry(field, |w| write_u64(w, value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.entry(field, |w| {
            if value < 0 {
                w.write_char('-')?;
            }
            write_u64(w, value.unsigned_abs())
        });
    }

    fn record_u128(&mut self, field: &Field, value: u128) {
        // Durations in ms (`as_millis`) are u128 and always fit.
        match u64::try_from(value) {
            Ok(v) => self.entry(field, |w| write_u64(w, v)),
            Err(_) => self.entry(field, |w| write!(w, "{value}")),
        }
    }

    fn record_i128(&mut self, field: &Field, value: i128) {
        self.entry(field, |w| write!(w, "{value}"));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.entry(field, |w| w.write_str(if value { "true" } else { "false" }));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        // JSON has no NaN or infinities: those become strings.
        if value.is_finite() {
            self.entry(field, |w| write!(w, "{value}"));
        } else {
            self.entry(field, |w| write!(w, "\"{value}\""));
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.entry(field, |w| write_string(w, value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.entry(field, |w| {
            w.write_char('"')?;
            write!(Escaped(&mut *w), "{value:?}")?;
            w.write_char('"')
        });
    }
}

/// A number's decimal digits, without `fmt`'s machinery (a settled message's line
/// has nine of them).
fn write_u64(w: &mut impl fmt::Write, mut v: u64) -> fmt::Result {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        // `v % 10` is below 10, so the cast cannot truncate.
        digits[at] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    // Only ASCII digits were written.
    w.write_str(std::str::from_utf8(&digits[at..]).unwrap_or("0"))
}

/// A JSON string literal.
fn write_string(w: &mut impl fmt::Write, s: &str) -> fmt::Result {
    w.write_char('"')?;
    Escaped(&mut *w).write_str(s)?;
    w.write_char('"')
}

/// Escapes what passes through for the inside of a JSON string: quote, backslash
/// and control characters; everything else (UTF-8 included) is copied in runs.
struct Escaped<W>(W);

impl<W: fmt::Write> fmt::Write for Escaped<W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut run = 0;
        for (i, b) in s.bytes().enumerate() {
            let escape = match b {
                b'"' => "\\\"",
                b'\\' => "\\\\",
                b'\n' => "\\n",
                b'\r' => "\\r",
                b'\t' => "\\t",
                0..=0x1f | 0x7f => "",
                _ => continue,
            };
            // `i` is at an ASCII byte, so both slices end on char boundaries.
            self.0.write_str(&s[run..i])?;
            if escape.is_empty() {
                write!(self.0, "\\u{b:04x}")?;
            } else {
                self.0.write_str(escape)?;
            }
            run = i + 1;
        }
        self.0.write_str(&s[run..])
    }
}

/// `YYYY-MM-DDTHH:MM:SS.ffffffZ`, always 27 bytes (years 0–9999).
struct Timestamp([u8; 27]);

impl Timestamp {
    /// The text.
    fn as_str(&self) -> &str {
        // Only ASCII digits and separators are ever written (rfc3339_micros).
        std::str::from_utf8(&self.0).unwrap_or("")
    }
}

/// Formats a UTC time as RFC 3339 with microseconds.
fn rfc3339_micros(t: time::OffsetDateTime) -> Timestamp {
    let t = t.to_offset(time::UtcOffset::UTC);
    let mut out = *b"0000-00-00T00:00:00.000000Z";
    let mut put = |at: usize, width: usize, mut v: u32| {
        for i in (at..at + width).rev() {
            // `v % 10` is below 10, so the cast cannot truncate.
            out[i] = b'0' + (v % 10) as u8;
            v /= 10;
        }
    };
    put(0, 4, u32::try_from(t.year().clamp(0, 9999)).unwrap_or(0));
    put(5, 2, u32::from(u8::from(t.month())));
    put(8, 2, u32::from(t.day()));
    put(11, 2, u32::from(t.hour()));
    put(14, 2, u32::from(t.minute()));
    put(17, 2, u32::from(t.second()));
    put(20, 6, t.microsecond());
    Timestamp(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(unix_nanos: i128) -> String {
        let t = time::OffsetDateTime::from_unix_timestamp_nanos(unix_nanos).unwrap();
        rfc3339_micros(t).as_str().to_string()
    }

    #[test]
    fn timestamps_are_rfc3339_utc_with_microseconds() {
        let table = [
            (0, "1970-01-01T00:00:00.000000Z"),
            (1_709_164_800_000_000_000, "2024-02-29T00:00:00.000000Z"),
            (951_868_800_000_001_000, "2000-03-01T00:00:00.000001Z"),
            (1_796_000_884_999_999_999, "2026-11-30T01:08:04.999999Z"),
            (253_402_300_799_000_000_000, "9999-12-31T23:59:59.000000Z"),
        ];
        for (nanos, want) in table {
            assert_eq!(at(nanos), want, "{nanos}");
        }
        let offset = time::OffsetDateTime::from_unix_timestamp(0)
            .unwrap()
            .to_offset(time::UtcOffset::from_hms(2, 0, 0).unwrap());
        assert_eq!(
            rfc3339_micros(offset).as_str(),
            "1970-01-01T00:00:00.000000Z"
        );
    }

    #[test]
    fn integers_are_written_as_fmt_writes_them() {
        let table = [0, 1, 9, 10, 99, 100, 1_234_567_890, u64::MAX - 1, u64::MAX];
        for v in table {
            let mut out = String::new();
            write_u64(&mut out, v).unwrap();
            assert_eq!(out, v.to_string());
        }
    }

    proptest::proptest! {
        #[test]
        fn any_integer_is_written_as_fmt_writes_it(v: u64) {
            let mut out = String::new();
            write_u64(&mut out, v).unwrap();
            proptest::prop_assert_eq!(out, v.to_string());
        }
    }

    #[test]
    fn strings_are_escaped_for_json() {
        let table = [
            ("plain", "\"plain\""),
            ("a\"b\\c", "\"a\\\"b\\\\c\""),
            ("line\nnext\r\t", "\"line\\nnext\\r\\t\""),
            ("\u{1}\u{1f}\u{7f}", "\"\\u0001\\u001f\\u007f\""),
            ("ünï \u{1F980}", "\"ünï \u{1F980}\""),
            ("", "\"\""),
        ];
        for (input, want) in table {
            let mut out = String::new();
            write_string(&mut out, input).unwrap();
            assert_eq!(out, want);
            let back: String = serde_json::from_str(&out).unwrap();
            assert_eq!(back, input);
        }
    }
}
