//! Logging setup: JSON lines ([`json_lines`]) or text through `tracing-subscriber`,
//! filtered by `log.level`, to stderr: the daemon's through [`batched`], a command's
//! straight. Nothing else installs a subscriber.

pub mod batched;
pub mod json_lines;

use std::io::Write;
use std::time::{Duration, Instant};

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

use serde::{Deserialize, Serialize};

/// `log.format`
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    #[default]
    /// One JSON object per line.
    Json,
    /// Human-readable text.
    Text,
}

/// Whether `level` is a valid filter (`info`, `jetrelay=debug,async_nats=warn`, ...).
pub fn is_valid_filter(level: &str) -> bool {
    !level.trim().is_empty() && EnvFilter::try_new(level).is_ok()
}

/// An error and its causes on one line, `outer: inner: innermost`, for log fields
/// and readiness reasons (the errors keep their causes as `source()`).
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let next = c.to_string();
        // A wrapper that repeats its cause's text adds nothing.
        if !text.ends_with(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        cause = c.source();
    }
    text
}

/// Changes the installed subscriber's filter (a reload's `log.level`).
type SetFilter = Box<dyn Fn(EnvFilter) -> Result<(), String> + Send + Sync>;

/// The installed subscriber's filter handle, once installed.
static FILTER: std::sync::OnceLock<SetFilter> = std::sync::OnceLock::new();

/// The daemon's lines, gathered ([`init_daemon`]), for [`flush`].
static BATCHED: std::sync::OnceLock<batched::Batched> = std::sync::OnceLock::new();

/// Where the installed subscriber writes its lines.
#[derive(Debug, Clone)]
enum Sink {
    /// Straight to stderr, a write per line (a command a person runs).
    Stderr,
    /// Through the batched writer (the daemon).
    Batched(batched::Batched),
}

/// One event's writer of a [`Sink`].
#[derive(Debug)]
enum SinkWriter<'a> {
    Stderr(std::io::Stderr),
    Batched(batched::Line<'a>),
}

impl Write for SinkWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            SinkWriter::Stderr(w) => w.write(buf),
            SinkWriter::Batched(w) => w.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            SinkWriter::Stderr(w) => w.flush(),
            SinkWriter::Batched(w) => w.flush(),
        }
    }
}

impl<'a> MakeWriter<'a> for Sink {
    type Writer = SinkWriter<'a>;

    fn make_writer(&'a self) -> SinkWriter<'a> {
        match self {
            Sink::Stderr => SinkWriter::Stderr(std::io::stderr()),
            Sink::Batched(b) => SinkWriter::Batched(b.make_writer()),
        }
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> SinkWriter<'a> {
        match self {
            Sink::Stderr => SinkWriter::Stderr(std::io::stderr()),
            Sink::Batched(b) => SinkWriter::Batched(b.make_writer_for(meta)),
        }
    }
}

/// Installs the global subscriber, writing each line straight to stderr; later
/// calls are ignored (tests call it often).
pub fn init(format: LogFormat, level: &str) {
    install(format, level, Sink::Stderr);
}

/// Installs the daemon's subscriber: its lines (one per settled message) are
/// gathered and written a few times a second by a thread of their own
/// ([`batched`]), the only thread that waits on stderr: a `WARN` or `ERROR` line,
/// [`flush_until`] and a panic hand theirs over at once, and when stderr does not
/// take them lines are dropped and counted ([`lines_dropped`]), never waited for.
/// Falls back to [`init`]'s direct writes when the thread cannot start.
pub fn init_daemon(format: LogFormat, level: &str) {
    let notice: batched::Notice = Box::new(|dropped| {
        tracing::warn!(
            dropped,
            "{dropped} log lines were dropped: stderr did not take them (jetrelay_log_lines_dropped_total)"
        );
    });
    let Ok(sink) = batched::Batched::start(Box::new(std::io::stderr()), notice) else {
        return init(format, level);
    };
    if BATCHED.set(sink.clone()).is_err() {
        // Installed already (tests): the first sink stays.
        return;
    }
    std::panic::set_hook(Box::new(|info| panicked(&info.to_string())));
    install(format, level, Sink::Batched(sink));
}

/// How long a panic waits for stderr to take its message.
const PANIC_FLUSH: Duration = Duration::from_secs(1);

/// The panic hook of the daemon: the message the default hook prints (with the
/// backtrace `RUST_BACKTRACE` asks for), handed to the writer thread after the
/// lines before it and waited for [`PANIC_FLUSH`] at most; the default hook would
/// write to stderr itself, and wait as long as stderr does.
fn panicked(info: &str) {
    let Some(sink) = BATCHED.get() else {
        return;
    };
    let thread = std::thread::current();
    let name = thread.name().unwrap_or("<unnamed>");
    let mut text = format!("thread '{name}' {info}\n");
    let trace = std::backtrace::Backtrace::capture();
    if trace.status() == std::backtrace::BacktraceStatus::Captured {
        text.push_str(&format!("stack backtrace:\n{trace}\n"));
    }
    sink.urgent(text.as_bytes());
    sink.flush_until(Instant::now() + PANIC_FLUSH);
}

/// Has the daemon's writer write out the lines gathered so far and waits until it
/// has or until `deadline`; whether it has (always for direct writes).
pub fn flush_until(deadline: Instant) -> bool {
    BATCHED.get().is_none_or(|sink| sink.flush_until(deadline))
}

/// [`flush_until`] `wait` from now.
pub fn flush_within(wait: Duration) -> bool {
    flush_until(Instant::now() + wait)
}

/// The daemon's log lines dropped so far because stderr did not take them.
pub fn lines_dropped() -> u64 {
    BATCHED.get().map_or(0, batched::Batched::dropped)
}

/// Installs the global subscriber writing to `sink`.
fn install(format: LogFormat, level: &str, sink: Sink) {
    let filter = EnvFilter::try_new(level).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_writer(sink)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    // The two formats are builders of different types; both keep their filter
    // handle the same way.
    macro_rules! install {
        ($builder:expr) => {{
            let builder = $builder.with_env_filter(filter).with_filter_reloading();
            let handle = builder.reload_handle();
            builder.try_init().map(|()| {
                let set: SetFilter = Box::new(move |f| handle.reload(f).map_err(|e| e.to_string()));
                FILTER.set(set).ok();
            })
        }};
    }
    let result = match format {
        LogFormat::Json => install!(
            builder
                .fmt_fields(json_lines::JsonFields)
                .event_format(json_lines::JsonLines)
        ),
        LogFormat::Text => install!(builder.fmt_fields(text_fields())),
    };
    // An already-installed subscriber (tests) is fine.
    drop(result);
}

/// Sets `log.level` on the running subscriber (a reload).
///
/// # Errors
/// The filter does not parse (the config refuses such a level first), or no
/// subscriber of this module's is installed.
pub fn set_level(level: &str) -> Result<(), String> {
    let filter = EnvFilter::try_new(level).map_err(|e| e.to_string())?;
    match FILTER.get() {
        Some(set) => set(filter),
        None => Err("no log subscriber installed".into()),
    }
}

/// The text format's fields, `name=value` with every control character escaped: a
/// value can carry what a publisher or the app wrote (a subject, a reason), and
/// must not drive the terminal or forge a log line.
fn text_fields() -> impl for<'w> tracing_subscriber::fmt::FormatFields<'w> + 'static {
    use tracing_subscriber::field::MakeExt;
    tracing_subscriber::fmt::format::debug_fn(|w, field, value| {
        let text = format!("{value:?}");
        let shown = crate::printable::printable(&text);
        if field.name() == "message" {
            write!(w, "{shown}")
        } else {
            write!(w, "{field}={shown}")
        }
    })
    .delimited(" ")
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_chain_reads_outer_to_inner_once() {
        #[derive(Debug, thiserror::Error)]
        #[error("JetStream is not available")]
        struct Outer(#[source] std::io::Error);
        let e = Outer(std::io::Error::other("timed out"));
        assert_eq!(super::chain(&e), "JetStream is not available: timed out");
        let plain = std::io::Error::other("alone");
        assert_eq!(super::chain(&plain), "alone");
    }

    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::json_lines::JsonLines;

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl Write for Buffer {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn lines(emit: impl FnOnce()) -> Vec<serde_json::Value> {
        let buf = Buffer::default();
        let out = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || out.clone())
            .with_max_level(tracing::Level::TRACE)
            .fmt_fields(super::json_lines::JsonFields)
            .event_format(JsonLines)
            .finish();
        tracing::subscriber::with_default(subscriber, emit);
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert!(text.ends_with('\n'), "{text}");
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }

    #[test]
    fn a_sources_lines_carry_its_name_and_no_other_line_does() {
        let seen = lines(|| {
            tracing::info!("before");
            let span = tracing::info_span!("source", source = %"orders\n\"x\"");
            span.in_scope(|| tracing::warn!(reason = "r", "inside"));
            tracing::info!("after");
        });
        assert_eq!(seen.len(), 3);
        assert_eq!(seen[1]["source"], "orders\n\"x\"", "{seen:?}");
        assert_eq!(seen[1]["reason"], "r");
        assert_eq!(seen[1]["message"], "inside");
        assert!(seen[0].get("source").is_none() && seen[2].get("source").is_none());
    }

    #[test]
    fn the_text_format_escapes_control_characters_in_every_field() {
        let buf = Buffer::default();
        let out = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || out.clone())
            .with_ansi(false)
            .fmt_fields(super::text_fields())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(
                subject = %"orders\n2026-12-01T00:00:00Z ERROR forged",
                reason = %"\u{1b}[2Jwiped",
                quoted = "a\tb",
                "message \u{7} delivered"
            );
        });
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}'),
            "{text:?}"
        );
        assert!(text.contains("subject=orders\\n2026"), "{text}");
        assert!(text.contains("reason=\\u{1b}[2Jwiped"), "{text}");
        assert!(text.contains("message \\u{7} delivered"), "{text}");
    }

    #[test]
    fn each_event_is_one_json_object_with_typed_fields_in_order() {
        let got = lines(|| {
            let status: Option<u16> = Some(200);
            let none: Option<u16> = None;
            tracing::info!(
                stream = "ORDERS",
                stream_seq = 42_u64,
                delta = -3_i64,
                settled = true,
                ratio = 0.5,
                inf = f64::INFINITY,
                status,
                none,
                why = %"a \"quoted\"\nline",
                dbg = ?vec![1, 2],
                "message delivered"
            );
            tracing::warn!(target: "other", "second");
        });
        assert_eq!(got.len(), 2);
        let first = got[0].as_object().unwrap();
        let keys: Vec<&str> = first.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "timestamp",
                "level",
                "message",
                "stream",
                "stream_seq",
                "delta",
                "settled",
                "ratio",
                "inf",
                "status",
                "why",
                "dbg",
                "target"
            ]
        );
        assert_eq!(first["level"], "INFO");
        assert_eq!(first["message"], "message delivered");
        assert_eq!(first["stream"], "ORDERS");
        assert_eq!(first["stream_seq"], 42);
        assert_eq!(first["delta"], -3);
        assert_eq!(first["settled"], true);
        assert_eq!(first["ratio"], 0.5);
        assert_eq!(first["inf"], "inf");
        assert_eq!(first["status"], 200);
        assert_eq!(first["why"], "a \"quoted\"\nline");
        assert_eq!(first["dbg"], "[1, 2]");
        assert_eq!(first["target"], module_path!());
        let ts = first["timestamp"].as_str().unwrap();
        let shape: String = ts
            .chars()
            .map(|c| if c.is_ascii_digit() { '9' } else { c })
            .collect();
        assert_eq!(shape, "9999-99-99T99:99:99.999999Z");
        assert_eq!(got[1]["level"], "WARN");
        assert_eq!(got[1]["target"], "other");
    }
}
