//! The daemon's log sink: whole lines gathered in memory and written to stderr by
//! one thread, a few writes a second instead of one per line; nothing but that
//! thread ever waits on stderr.
//!
//! Every settled message writes a line; written straight to stderr, each one was a
//! `write(2)` on the delivery path (under 1 % of the daemon's CPU in the benchmark,
//! whose stderr is `/dev/null`; a pipe to a container runtime costs more). Here a
//! line is appended to a buffer and returned; the writer thread takes the buffer
//! when it has waited [`LINGER`] since its first line or holds [`HIGH`] bytes, and
//! at once for a `WARN` or `ERROR` line or a [`flush`](Batched::flush_until). Lines
//! are written whole and in order.
//!
//! **A stuck stderr** (a pipe nobody reads) blocks only the writer thread. The lines
//! that come meanwhile fill the buffer up to [`CAP`] (`WARN` and `ERROR` lines up to
//! [`URGENT_ROOM`] more); past it each line is dropped and counted
//! ([`Batched::dropped`], `jetrelay_log_lines_dropped_total`), so delivery, the
//! probes and the signals go on. Once stderr takes what the writer holds, one line
//! says how many were dropped. A flush waits for the writer only until its
//! deadline: the shutdown's final flush ends with the grace, and a panic's within a
//! second. Lost to a stuck pipe: every line logged after the buffer filled (the
//! count and the line say how many), and at exit what was still waiting: up to
//! [`CAP`] and the writer's own buffer, ~4,300 `INFO` lines of ~260 bytes.
//!
//! **SIGKILL** loses what is buffered and not yet written while stderr keeps up:
//! the lines of the last [`LINGER`] (20 ms), never more than [`HIGH`] (64 KiB, ~250
//! `INFO` lines). Measured with `kill -9` while delivering (one `INFO` line per
//! settled message, stderr a file): the audit's release build lost 40–58 lines; a
//! debug build, 3 runs, lost 0–3 lines of the messages the server had acked (at
//! most 23–32 of those the app had answered, requests in flight included).

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tracing::{Level, Metadata};
use tracing_subscriber::fmt::MakeWriter;

/// How long a line may wait before it is written.
pub const LINGER: Duration = Duration::from_millis(20);

/// Bytes at which the writer does not wait for [`LINGER`].
pub const HIGH: usize = 64 * 1024;

/// Bytes buffered past which a new line is dropped (and counted) instead of kept.
pub const CAP: usize = 1024 * 1024;

/// The room past [`CAP`] kept for `WARN` and `ERROR` lines and a panic's message.
pub const URGENT_ROOM: usize = 64 * 1024;

/// The lines not yet taken by a write, and how far the writer got.
#[derive(Debug, Default)]
struct Pending {
    bytes: Vec<u8>,
    /// A `WARN` or `ERROR` line or a flush waits: the writer does not linger.
    urgent: bool,
    /// Buffers taken by the writer so far.
    taken: u64,
    /// Buffers written out so far (`written == taken`: nothing in a write).
    written: u64,
    /// Lines dropped since the last line that said so.
    dropped: u64,
}

/// Says that `n` lines were dropped (a line through the subscriber, on the writer
/// thread, once stderr took what was held).
pub type Notice = Box<dyn Fn(u64) + Send + Sync>;

/// What the writer thread and every line's writer share.
struct LogQueue {
    pending: Mutex<Pending>,
    /// A first line in an empty buffer, [`HIGH`] reached, or something urgent.
    wake: Condvar,
    /// A write ended (`written` moved).
    done: Condvar,
    /// Lines dropped since the start.
    dropped_total: AtomicU64,
    /// [`LINGER`] (longer in tests).
    linger: Duration,
}

impl std::fmt::Debug for LogQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogQueue").finish_non_exhaustive()
    }
}

/// A poisoned lock only means another thread panicked mid-line: the buffer is
/// still bytes, and logging goes on.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl LogQueue {
    /// Appends one line (whole: the formatter writes each event at once), or drops
    /// and counts it when the buffer is full; never waits for the writer.
    fn append(&self, line: &[u8], urgent: bool) {
        let room = if urgent { CAP + URGENT_ROOM } else { CAP };
        let mut pending = lock(&self.pending);
        let before = pending.bytes.len();
        if before + line.len() > room {
            pending.dropped += 1;
            self.dropped_total.fetch_add(1, Ordering::Relaxed);
            return;
        }
        pending.bytes.extend_from_slice(line);
        let was_urgent = pending.urgent;
        pending.urgent |= urgent;
        if before == 0 || (urgent && !was_urgent) || (before < HIGH && pending.bytes.len() >= HIGH)
        {
            self.wake.notify_one();
        }
    }

    /// Waits until every line appended before the call is written, or `deadline`;
    /// whether they were.
    fn flush_until(&self, deadline: Instant) -> bool {
        let mut pending = lock(&self.pending);
        let target = if pending.bytes.is_empty() {
            pending.taken
        } else {
            pending.urgent = true;
            self.wake.notify_one();
            pending.taken + 1
        };
        while pending.written < target {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            pending = self
                .done
                .wait_timeout(pending, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        true
    }

    /// Waits for a first line, lets more gather for up to [`LINGER`] (unless
    /// [`HIGH`] or urgent), and takes them: swapped into `spare`.
    fn take(&self, spare: &mut Vec<u8>) {
        let mut pending = lock(&self.pending);
        while pending.bytes.is_empty() {
            pending = self
                .wake
                .wait(pending)
                .unwrap_or_else(PoisonError::into_inner);
        }
        let deadline = Instant::now() + self.linger;
        while pending.bytes.len() < HIGH && !pending.urgent {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            pending = self
                .wake
                .wait_timeout(pending, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        pending.urgent = false;
        pending.taken += 1;
        std::mem::swap(&mut pending.bytes, spare);
    }

    /// The writer thread, the only one that writes to `dest`: takes what is
    /// buffered, writes it (as long as `dest` makes it wait), then says how many
    /// lines were dropped meanwhile.
    fn run(&self, mut dest: Box<dyn Write + Send>, notice: &Notice) {
        let mut spare = Vec::new();
        loop {
            self.take(&mut spare);
            // Where stderr is gone there is nowhere to say so; the lines are dropped
            // as the direct writer dropped them.
            dest.write_all(&spare).ok();
            dest.flush().ok();
            spare.clear();
            // A spike's buffer is not kept.
            spare.shrink_to(HIGH);
            let dropped = {
                let mut pending = lock(&self.pending);
                pending.written = pending.taken;
                std::mem::take(&mut pending.dropped)
            };
            self.done.notify_all();
            if dropped > 0 {
                notice(dropped);
            }
        }
    }
}

/// The sink: a [`MakeWriter`] for the fmt layer, and the handle that flushes it.
#[derive(Debug, Clone)]
pub struct Batched {
    shared: Arc<LogQueue>,
}

impl Batched {
    /// Starts the writer thread, writing to `dest`; `notice` says how many lines
    /// were dropped, each time stderr took what was held after some were.
    ///
    /// # Errors
    /// The thread could not be started.
    pub fn start(dest: Box<dyn Write + Send>, notice: Notice) -> std::io::Result<Batched> {
        Batched::lingering(dest, notice, LINGER)
    }

    fn lingering(
        dest: Box<dyn Write + Send>,
        notice: Notice,
        linger: Duration,
    ) -> std::io::Result<Batched> {
        let shared = Arc::new(LogQueue {
            pending: Mutex::default(),
            wake: Condvar::new(),
            done: Condvar::new(),
            dropped_total: AtomicU64::new(0),
            linger,
        });
        let thread = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("jetrelay-log".into())
            .spawn(move || thread.run(dest, &notice))?;
        Ok(Batched { shared })
    }

    /// Has the writer write out every line appended so far, and waits until it has
    /// or until `deadline`; whether it has (false: stderr did not take them in time).
    pub fn flush_until(&self, deadline: Instant) -> bool {
        self.shared.flush_until(deadline)
    }

    /// Appends `text` as an urgent line (a panic's message), or drops it when full.
    pub fn urgent(&self, text: &[u8]) {
        self.shared.append(text, true);
    }

    /// Lines dropped since the start because the buffer was full.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped_total.load(Ordering::Relaxed)
    }
}

/// One event's writer: appends its line; a `WARN` or `ERROR` line is urgent.
#[derive(Debug)]
pub struct Line<'a> {
    shared: &'a LogQueue,
    urgent: bool,
}

impl Write for Line<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.shared.append(buf, self.urgent);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Batched {
    type Writer = Line<'a>;

    fn make_writer(&'a self) -> Line<'a> {
        Line {
            shared: &self.shared,
            urgent: false,
        }
    }

    fn make_writer_for(&'a self, meta: &Metadata<'_>) -> Line<'a> {
        Line {
            shared: &self.shared,
            urgent: *meta.level() <= Level::WARN,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A destination that keeps what is written, and counts the writes.
    #[derive(Clone, Default)]
    struct Kept(Arc<Mutex<(Vec<u8>, usize)>>);

    impl Write for Kept {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            let mut k = self.0.lock().unwrap();
            k.0.extend_from_slice(b);
            k.1 += 1;
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Kept {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().0.clone()).unwrap()
        }
        fn writes(&self) -> usize {
            self.0.lock().unwrap().1
        }
    }

    fn info() -> &'static Metadata<'static> {
        struct Cs;
        impl tracing::Callsite for Cs {
            fn set_interest(&self, _: tracing::subscriber::Interest) {}
            fn metadata(&self) -> &Metadata<'_> {
                &META
            }
        }
        static META: Metadata<'static> = tracing::metadata! {
            name: "info",
            target: "t",
            level: Level::INFO,
            fields: &[],
            callsite: &Cs,
            kind: tracing::metadata::Kind::EVENT,
        };
        &META
    }

    fn write(sink: &Batched, meta: &Metadata<'_>, line: &str) {
        sink.make_writer_for(meta)
            .write_all(line.as_bytes())
            .unwrap();
    }

    #[test]
    fn lines_from_many_threads_arrive_whole_in_few_writes() {
        let kept = Kept::default();
        let sink = Batched::start(Box::new(kept.clone()), Box::new(|_| {})).unwrap();
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let sink = sink.clone();
                std::thread::spawn(move || {
                    for i in 0..5_000 {
                        write(&sink, info(), &format!("thread {t} line {i}\n"));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(sink.flush_until(Instant::now() + Duration::from_secs(10)));
        let text = kept.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 20_000);
        for t in 0..4 {
            let own: Vec<usize> = lines
                .iter()
                .filter_map(|l| l.strip_prefix(&format!("thread {t} line ")))
                .map(|n| n.parse().unwrap())
                .collect();
            assert_eq!(own, (0..5_000).collect::<Vec<_>>(), "thread {t} in order");
        }
        // One write per line would be 20,000.
        assert!(kept.writes() < 2_000, "{} writes", kept.writes());
    }

    #[test]
    fn a_line_is_written_within_the_linger_without_a_flush() {
        let kept = Kept::default();
        let sink = Batched::start(Box::new(kept.clone()), Box::new(|_| {})).unwrap();
        write(&sink, info(), "alone\n");
        let start = Instant::now();
        while kept.text().is_empty() {
            assert!(start.elapsed() < Duration::from_secs(5), "never written");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(kept.text(), "alone\n");
    }

    fn warn() -> Metadata<'static> {
        tracing::Metadata::new(
            "w",
            "t",
            Level::WARN,
            None,
            None,
            None,
            tracing::field::FieldSet::new(&[], info().callsite()),
            tracing::metadata::Kind::EVENT,
        )
    }

    #[test]
    fn a_warning_is_written_without_the_linger_and_after_what_came_before_it() {
        let kept = Kept::default();
        // A linger no test outlives: only the warning's urgency writes the lines.
        let hour = Duration::from_secs(3600);
        let sink = Batched::lingering(Box::new(kept.clone()), Box::new(|_| {}), hour).unwrap();
        write(&sink, info(), "first\n");
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(kept.text(), "", "an INFO line lingers");
        write(&sink, &warn(), "warned\n");
        let start = Instant::now();
        while kept.text() != "first\nwarned\n" {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{:?}",
                kept.text()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// A destination that blocks until let go, as a pipe nobody reads.
    struct Held(Arc<(Mutex<bool>, Condvar)>, Kept);

    impl Write for Held {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            let (m, c) = &*self.0;
            let mut go = m.lock().unwrap();
            while !*go {
                go = c.wait(go).unwrap();
            }
            self.1.write(b)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_stuck_destination_drops_and_counts_lines_never_blocking_and_says_so_once_it_drains() {
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        let kept = Kept::default();
        let said = Arc::new(Mutex::new(Vec::new()));
        let notice: Notice = {
            let said = Arc::clone(&said);
            Box::new(move |n| said.lock().unwrap().push(n))
        };
        let sink = Batched::start(Box::new(Held(Arc::clone(&gate), kept.clone())), notice).unwrap();
        let line = "x".repeat(1023) + "\n";
        let lines = 3 * CAP / line.len();
        // Three buffers' worth from four threads: none waits for the stuck writer.
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (sink, line) = (sink.clone(), line.clone());
                std::thread::spawn(move || {
                    for _ in 0..lines / 4 {
                        write(&sink, info(), &line);
                    }
                })
            })
            .collect();
        let start = Instant::now();
        for t in threads {
            while !t.is_finished() {
                assert!(start.elapsed() < Duration::from_secs(10), "a line waited");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        // The writer holds at most one buffer in its stuck write, the next is full.
        let buffered = lock(&sink.shared.pending).bytes.len();
        assert!(buffered <= CAP, "{buffered}");
        let dropped = sink.dropped();
        assert!(
            dropped >= (lines - 2 * CAP / line.len()) as u64,
            "{dropped}"
        );
        // A warning still has room; a flush gives up at its deadline.
        write(&sink, &warn(), "warned\n");
        let asked = Instant::now();
        assert!(!sink.flush_until(Instant::now() + Duration::from_millis(50)));
        assert!(asked.elapsed() < Duration::from_secs(2));
        assert!(said.lock().unwrap().is_empty());
        // Let go: everything kept is written, in order, and the count said once.
        *gate.0.lock().unwrap() = true;
        gate.1.notify_all();
        assert!(sink.flush_until(Instant::now() + Duration::from_secs(10)));
        let start = Instant::now();
        while said.lock().unwrap().is_empty() {
            assert!(start.elapsed() < Duration::from_secs(10), "never said");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(*said.lock().unwrap(), [dropped]);
        let text = kept.text();
        assert!(text.ends_with("warned\n"), "the warning last");
        assert_eq!(
            text.len(),
            (lines / 4 * 4 - usize::try_from(dropped).unwrap()) * line.len() + "warned\n".len()
        );
        assert_eq!(sink.dropped(), dropped, "nothing dropped once it drains");
    }

    #[test]
    fn a_flush_waits_for_what_came_before_it_to_be_written() {
        let kept = Kept::default();
        let sink = Batched::start(Box::new(kept.clone()), Box::new(|_| {})).unwrap();
        assert!(sink.flush_until(Instant::now()), "nothing to write");
        write(&sink, info(), "one\n");
        assert!(sink.flush_until(Instant::now() + Duration::from_secs(10)));
        assert_eq!(kept.text(), "one\n");
    }
}
