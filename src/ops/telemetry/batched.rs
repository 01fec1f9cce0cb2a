//! The daemon's log sink: whole lines gathered in memory and written to stderr by
//! one thread, a few writes a second instead of one per line.
//!
//! Every settled message writes a line; written straight to stderr, each one was a
//! `write(2)` on the delivery path (under 1 % of the daemon's CPU in the benchmark,
//! whose stderr is `/dev/null`; a pipe to a container runtime costs more). Here a
//! line is appended to a buffer and returned; the writer thread takes the buffer
//! when it has waited [`LINGER`] since its first line or holds [`HIGH`] bytes. Lines
//! are never lost or reordered: a full buffer ([`CAP`]) makes the next line wait
//! for room, as a full stderr pipe did before; a `WARN` or `ERROR` line and
//! [`flush`](Batched::flush) write out what is buffered at once, in order.

use std::io::Write;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tracing::{Level, Metadata};
use tracing_subscriber::fmt::MakeWriter;

/// How long a line may wait before it is written.
pub const LINGER: Duration = Duration::from_millis(20);

/// Bytes at which the writer does not wait for [`LINGER`].
pub const HIGH: usize = 64 * 1024;

/// Bytes at which a new line waits until the writer has taken the buffer.
pub const CAP: usize = 1024 * 1024;

/// The lines not yet taken by a write.
#[derive(Debug, Default)]
struct Pending {
    bytes: Vec<u8>,
    /// No more lines come; the writer thread ends once it has written the rest.
    closed: bool,
}

/// What the writer thread and every line's writer share.
struct LogQueue {
    pending: Mutex<Pending>,
    /// A first line in an empty buffer, [`HIGH`] reached, or closed.
    wake: Condvar,
    /// The writer took the buffer.
    room: Condvar,
    /// The destination and the buffer being written, held for the whole write so
    /// that two writes (the thread's, a flush's) keep their lines in order.
    out: Mutex<(Box<dyn Write + Send>, Vec<u8>)>,
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
    /// Appends one line (whole: the formatter writes each event at once).
    fn append(&self, line: &[u8]) {
        let mut pending = lock(&self.pending);
        while pending.bytes.len() >= CAP && !pending.closed {
            pending = self
                .room
                .wait(pending)
                .unwrap_or_else(PoisonError::into_inner);
        }
        let before = pending.bytes.len();
        pending.bytes.extend_from_slice(line);
        if before == 0 || (before < HIGH && pending.bytes.len() >= HIGH) {
            self.wake.notify_one();
        }
    }

    /// Writes out everything buffered so far.
    fn drain(&self) {
        let mut out = lock(&self.out);
        let (dest, spare) = &mut *out;
        {
            let mut pending = lock(&self.pending);
            std::mem::swap(&mut pending.bytes, spare);
        }
        self.room.notify_all();
        if !spare.is_empty() {
            // Where stderr is gone there is nowhere to say so; the lines are dropped
            // as the direct writer dropped them.
            dest.write_all(spare).ok();
            dest.flush().ok();
        }
        spare.clear();
    }

    /// The writer thread: waits for a first line, lets more gather for up to
    /// [`LINGER`] (or until [`HIGH`]), writes them; ends once closed and written.
    fn run(&self) {
        loop {
            let mut pending = lock(&self.pending);
            while pending.bytes.is_empty() && !pending.closed {
                pending = self
                    .wake
                    .wait(pending)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            let deadline = Instant::now() + LINGER;
            while pending.bytes.len() < HIGH && !pending.closed {
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
            let closed = pending.closed;
            drop(pending);
            self.drain();
            if closed {
                return;
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
    /// Starts the writer thread, writing to `dest`.
    ///
    /// # Errors
    /// The thread could not be started.
    pub fn start(dest: Box<dyn Write + Send>) -> std::io::Result<Batched> {
        let shared = Arc::new(LogQueue {
            pending: Mutex::default(),
            wake: Condvar::new(),
            room: Condvar::new(),
            out: Mutex::new((dest, Vec::new())),
        });
        let thread = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("jetrelay-log".into())
            .spawn(move || thread.run())?;
        Ok(Batched { shared })
    }

    /// Writes out every line appended so far, before returning.
    pub fn flush(&self) {
        self.shared.drain();
    }

    /// Writes out the rest and ends the writer thread; later lines are written at once.
    pub fn close(&self) {
        lock(&self.shared.pending).closed = true;
        self.shared.wake.notify_one();
        self.shared.room.notify_all();
        self.shared.drain();
    }
}

/// One event's writer: appends its line, and writes out the buffer after a
/// `WARN` or `ERROR` line (or any line once closed).
#[derive(Debug)]
pub struct Line<'a> {
    shared: &'a LogQueue,
    now: bool,
}

impl Write for Line<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.shared.append(buf);
        if self.now || lock(&self.shared.pending).closed {
            self.shared.drain();
        }
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
            now: false,
        }
    }

    fn make_writer_for(&'a self, meta: &Metadata<'_>) -> Line<'a> {
        Line {
            shared: &self.shared,
            now: *meta.level() <= Level::WARN,
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
        let sink = Batched::start(Box::new(kept.clone())).unwrap();
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
        sink.flush();
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
        let sink = Batched::start(Box::new(kept.clone())).unwrap();
        write(&sink, info(), "alone\n");
        let start = Instant::now();
        while kept.text().is_empty() {
            assert!(start.elapsed() < Duration::from_secs(5), "never written");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(kept.text(), "alone\n");
    }

    #[test]
    fn a_warning_writes_out_what_came_before_it_at_once() {
        let kept = Kept::default();
        let sink = Batched::start(Box::new(kept.clone())).unwrap();
        write(&sink, info(), "first\n");
        let warn = tracing::Metadata::new(
            "w",
            "t",
            Level::WARN,
            None,
            None,
            None,
            tracing::field::FieldSet::new(&[], info().callsite()),
            tracing::metadata::Kind::EVENT,
        );
        write(&sink, &warn, "warned\n");
        assert_eq!(kept.text(), "first\nwarned\n");
    }

    #[test]
    fn a_full_buffer_holds_the_next_line_until_written_and_loses_none() {
        /// A destination that blocks until let go.
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
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        let kept = Kept::default();
        let sink = Batched::start(Box::new(Held(Arc::clone(&gate), kept.clone()))).unwrap();
        let line = "x".repeat(1023) + "\n";
        let writer = {
            let (sink, line) = (sink.clone(), line.clone());
            std::thread::spawn(move || {
                for _ in 0..(3 * CAP / line.len()) {
                    write(&sink, info(), &line);
                }
            })
        };
        // The writer thread holds one buffer in its stuck write, the next fills to
        // CAP: the producer waits, and memory stays within two buffers.
        let start = Instant::now();
        while lock(&sink.shared.pending).bytes.len() < CAP {
            assert!(start.elapsed() < Duration::from_secs(10), "never filled");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(!writer.is_finished());
        assert!(lock(&sink.shared.pending).bytes.len() < CAP + line.len());
        *gate.0.lock().unwrap() = true;
        gate.1.notify_all();
        writer.join().unwrap();
        sink.close();
        assert_eq!(kept.text().len(), 3 * CAP / line.len() * line.len());
    }
}
