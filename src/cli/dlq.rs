//! `jetrelay dlq ls|show|replay|purge`: browse dead letters and replay them. The DLQ
//! stream is read in pages with batch direct get (no consumer, its state untouched);
//! replays are published with their own ids (`crate::dead_letter::stored`), in pages of at most
//! 1000, as atomic batches where the target stream takes them, one by one otherwise;
//! with `--fast`, as fast-ingest batches where the target allows them (`allow_batched`).

use std::collections::HashMap;
// Writing to a String cannot fail: `write!(…).ok()` drops an `Ok(())`.
use std::fmt::Write as _;

use base64::Engine;
use clap::{Args, Subcommand};
use serde_json::{Value, json};
use time::OffsetDateTime;

use crate::dead_letter::stored::{self, Entry, Selection, Stored};
use crate::nats::{
    DirectError, FastFailed, Listed, Nats, NatsError, OutputError, OutputPublisher, PageRequest,
    TopologyError,
};
use crate::outputs::{Capture, Output};

/// Messages per page read, and per replay batch (the server's atomic batch limit).
pub const PAGE: usize = 1000;

/// Bytes per page read, at most (the server stops after the message that crosses it).
const PAGE_BYTES: usize = 8 * 1024 * 1024;

/// `jetrelay dlq …`
#[derive(Debug, Subcommand)]
pub enum DlqCommand {
    /// List dead letters: DLQ sequence, time, original stream, sequence and subject,
    /// status, reason.
    Ls {
        /// The DLQ stream.
        stream: String,
        /// Which ones.
        #[command(flatten)]
        select: SelectArgs,
        /// At most this many.
        #[arg(long)]
        limit: Option<usize>,
    },
    /// Show one dead letter: what it says, its headers and its payload.
    Show {
        /// The DLQ stream.
        stream: String,
        /// Its sequence in the DLQ stream.
        seq: u64,
    },
    /// Republish dead letters to their original subject (or `--to`), once: a re-run
    /// within the target stream's duplicate window stores nothing twice.
    Replay {
        /// The DLQ stream.
        stream: String,
        /// Which ones.
        #[command(flatten)]
        select: SelectArgs,
        /// Publish here instead of each letter's original subject.
        #[arg(long)]
        to: Option<String>,
        /// Select and print, change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Delete each dead letter once its replay is stored.
        #[arg(long)]
        delete: bool,
        /// Publish each page as one fast-ingest batch per target stream (nats-server
        /// 2.14+, the stream needs allow_batched): much faster, not atomic (each
        /// letter is stored as it arrives; a re-run still stores none twice). A
        /// target stream without allow_batched gets its letters as without --fast
        /// (atomic batches where it allows them, one by one otherwise), and the
        /// summary names it. A fast batch cannot tell which of its letters were
        /// stored before: a page that was partly replayed counts as replayed.
        #[arg(long)]
        fast: bool,
    },
    /// Delete dead letters (marked deleted, not overwritten on disk: the stream's
    /// files keep the bytes until the server compacts them). Without --yes, says how
    /// many it would delete (reading the selection first).
    Purge {
        /// The DLQ stream.
        stream: String,
        /// Which ones.
        #[command(flatten)]
        select: SelectArgs,
        /// Yes, delete them.
        #[arg(long)]
        yes: bool,
    },
}

/// The selection every listing command takes.
#[derive(Debug, Clone, Default, Args)]
pub struct SelectArgs {
    /// DLQ sequences: `A`, `A-B` or `A-`.
    #[arg(long)]
    pub seq: Option<String>,
    /// Stored since: a duration back (`90s`, `30m`, `2h`, `7d`) or an RFC 3339 time.
    #[arg(long)]
    pub since: Option<String>,
    /// The original subject matches this pattern (wildcards allowed).
    #[arg(long)]
    pub subject: Option<String>,
    /// The app's last status.
    #[arg(long)]
    pub status: Option<u16>,
    /// The consumer that dead-lettered it (`Jetrelay-Dlq-Consumer`). A replay to the
    /// original subject reaches every consumer of that stream: with several, select
    /// one and replay with `--to`.
    #[arg(long)]
    pub consumer: Option<String>,
}

impl SelectArgs {
    fn selection(&self, now: OffsetDateTime) -> Result<Selection, DlqError> {
        if let Some(s) = &self.subject {
            crate::subject::validate_filter(s)
                .map_err(|e| DlqError::Usage(format!("--subject {s:?} {e}")))?;
        }
        Ok(Selection {
            seqs: self
                .seq
                .as_deref()
                .map(stored::parse_seqs)
                .transpose()
                .map_err(DlqError::Usage)?,
            since: self
                .since
                .as_deref()
                .map(|t| stored::parse_since(t, now))
                .transpose()
                .map_err(DlqError::Usage)?,
            subject: self.subject.clone(),
            status: self.status,
            consumer: self.consumer.clone(),
        })
    }
}

/// Why a dlq command failed.
#[derive(Debug, thiserror::Error)]
pub enum DlqError {
    /// A bad argument (exit 64).
    #[error("{0}")]
    Usage(String),
    /// No such stream.
    #[error("stream {0} does not exist")]
    NoStream(String),
    /// No such dead letter.
    #[error("stream {stream} has no message {seq}")]
    NoLetter {
        /// The stream.
        stream: String,
        /// The sequence.
        seq: u64,
    },
    /// The DLQ stream cannot be read.
    #[error(transparent)]
    Direct(#[from] DirectError),
    /// NATS cannot be reached.
    #[error(transparent)]
    Nats(#[from] NatsError),
    /// A stream cannot be read or changed.
    #[error(transparent)]
    Topology(#[from] TopologyError),
}

/// What a command printed, and whether anything failed (exit 1).
#[derive(Debug)]
pub struct Printout {
    /// The text or JSON to print.
    pub text: String,
    /// Some dead letter could not be replayed or deleted.
    pub failed: bool,
}

/// Runs a dlq command.
///
/// # Errors
/// [`DlqError`].
pub async fn run(nats: &Nats, cmd: DlqCommand, json: bool) -> Result<Printout, DlqError> {
    let now = OffsetDateTime::now_utc();
    match cmd {
        DlqCommand::Ls {
            stream,
            select,
            limit,
        } => ls(nats, &stream, &select.selection(now)?, limit, json).await,
        DlqCommand::Show { stream, seq } => show(nats, &stream, seq, json).await,
        DlqCommand::Replay {
            stream,
            select,
            to,
            dry_run,
            delete,
            fast,
        } => {
            if let Some(to) = &to {
                crate::subject::validate_publish_subject(to)
                    .map_err(|e| DlqError::Usage(format!("--to {to:?} {e}")))?;
            }
            let sel = select.selection(now)?;
            let r = Replayer {
                nats,
                stream: &stream,
                to: to.as_deref(),
                delete,
                dry_run,
                fast,
                targets: HashMap::new(),
                streams: None,
                summary: Summary {
                    fast,
                    ..Summary::default()
                },
            };
            Ok(r.run(&sel).await?.done(json, dry_run))
        }
        DlqCommand::Purge {
            stream,
            select,
            yes,
        } => purge(nats, &stream, &select.selection(now)?, yes, json).await,
    }
}

/// `dlq ls`: the selected letters, at most `limit`.
async fn ls(
    nats: &Nats,
    stream: &str,
    sel: &Selection,
    limit: Option<usize>,
    json: bool,
) -> Result<Printout, DlqError> {
    let mut entries = Vec::new();
    let limit = limit.unwrap_or(usize::MAX);
    let mut pages = Pages::open(nats, stream, sel).await?;
    while entries.len() < limit
        && let Some(page) = pages.next().await?
    {
        entries.extend(
            page.iter()
                .map(stored::entry)
                .filter(|e| sel.matches(e))
                .take(limit - entries.len()),
        );
    }
    Ok(Printout {
        text: if json {
            serde_json::to_string(&entries).unwrap_or_default()
        } else {
            table(&entries)
        },
        failed: false,
    })
}

/// `dlq purge`: deletes what is verifiably a letter; without `yes`, only says how
/// many it would delete.
async fn purge(
    nats: &Nats,
    stream: &str,
    sel: &Selection,
    yes: bool,
    json: bool,
) -> Result<Printout, DlqError> {
    if !yes {
        // Say what it would delete, and change nothing.
        let mut selected = 0;
        let mut pages = Pages::open(nats, stream, sel).await?;
        while let Some(page) = pages.next().await? {
            selected += page
                .iter()
                .filter(|m| stored::is_letter(m) && sel.matches(&stored::entry(m)))
                .count();
        }
        return Err(DlqError::Usage(format!(
            "{selected} dead letter(s) selected; purge deletes them for good: add --yes"
        )));
    }
    let mut summary = Summary {
        purge: true,
        ..Summary::default()
    };
    let mut pages = Pages::open(nats, stream, sel).await?;
    while let Some(page) = pages.next().await? {
        let mut seqs = Vec::new();
        for m in page.iter().filter(|m| sel.matches(&stored::entry(m))) {
            summary.selected += 1;
            match stored::verify(m) {
                Ok(()) => seqs.push(m.seq),
                Err(why) => summary.fail(m.seq, stored::not_a_letter(stream, &why)),
            }
        }
        for (seq, result) in seqs.iter().zip(nats.delete_messages(stream, &seqs).await?) {
            match result {
                Ok(()) => summary.deleted += 1,
                Err(why) => summary.fail(*seq, why),
            }
        }
    }
    Ok(summary.done(json, false))
}

/// The DLQ stream's pages, from the selection's first sequence (or time) up to the
/// last sequence when the command started.
struct Pages<'a> {
    nats: &'a Nats,
    stream: &'a str,
    next: PageRequest,
    /// The last sequence to read.
    up_to: u64,
    done: bool,
}

impl<'a> Pages<'a> {
    async fn open(nats: &'a Nats, stream: &'a str, sel: &Selection) -> Result<Pages<'a>, DlqError> {
        let Some(tail) = nats.last_sequence(stream).await? else {
            return Err(DlqError::NoStream(stream.to_string()));
        };
        // Said even when it holds nothing: an empty answer would look like no letters.
        if !tail.direct {
            return Err(DirectError::NotEnabled(stream.to_string()).into());
        }
        let last = tail.last_sequence;
        let up_to = sel.last_seq().map_or(last, |b| b.min(last));
        Ok(Pages {
            nats,
            stream,
            next: PageRequest {
                seq: sel.first_seq(),
                batch: PAGE,
                max_bytes: Some(PAGE_BYTES),
                next_by_subj: None,
                start_time: sel.start_time(),
                up_to_seq: Some(up_to),
                multi_last: None,
            },
            up_to,
            done: last == 0 || sel.first_seq() > up_to,
        })
    }

    async fn next(&mut self) -> Result<Option<Vec<Stored>>, DlqError> {
        if self.done {
            return Ok(None);
        }
        let page = self.nats.direct_page(self.stream, &self.next).await?;
        // The server's `pending` counts past `up_to_seq`: the range's end stops it.
        match page.last_seq {
            Some(last) if page.pending > 0 && !page.messages.is_empty() && last < self.up_to => {
                self.next.seq = last + 1;
                self.next.start_time = None;
            }
            _ => self.done = true,
        }
        if page.messages.is_empty() {
            return Ok(None);
        }
        Ok(Some(page.messages))
    }
}

/// What a replay or a purge did.
#[derive(Debug, Default)]
struct Summary {
    selected: usize,
    replayed: usize,
    already: usize,
    deleted: usize,
    /// (DLQ sequence, why), in order.
    failures: Vec<(u64, String)>,
    /// Dry run: (DLQ sequence, where it would go).
    planned: Vec<(u64, String)>,
    /// `--fast` was asked for.
    fast: bool,
    /// A purge: nothing is replayed.
    purge: bool,
    /// `--fast`: target streams without `allow_batched`, and how many letters went
    /// to each without it.
    not_fast: Vec<(String, usize)>,
}

impl Summary {
    fn fail(&mut self, seq: u64, why: String) {
        self.failures.push((seq, why));
    }

    /// `letters` for `stream` went without `--fast`.
    fn not_fast(&mut self, stream: &str, letters: usize) {
        match self.not_fast.iter_mut().find(|(s, _)| s == stream) {
            Some((_, n)) => *n += letters,
            None => self.not_fast.push((stream.to_string(), letters)),
        }
    }

    fn done(self, json: bool, dry_run: bool) -> Printout {
        let failed = !self.failures.is_empty();
        let text = if json {
            json!({
                "selected": self.selected,
                "replayed": self.replayed,
                "already_replayed": self.already,
                "deleted": self.deleted,
                "failed": self.failures.len(),
                "failures": self.failures.iter().map(|(seq, why)| json!({"seq": seq, "error": why})).collect::<Vec<_>>(),
                "dry_run": dry_run,
                "planned": self.planned.iter().map(|(seq, to)| json!({"seq": seq, "subject": to})).collect::<Vec<_>>(),
                "fast": self.fast,
                "not_fast": self.not_fast.iter().map(|(stream, n)| json!({"stream": stream, "letters": n})).collect::<Vec<_>>(),
            })
            .to_string()
        } else {
            let mut out = String::new();
            for (seq, to) in &self.planned {
                writeln!(out, "{seq} -> {to}").ok();
            }
            for (seq, why) in self.failures.iter().take(50) {
                writeln!(out, "failed: {seq}: {why}").ok();
            }
            if self.failures.len() > 50 {
                writeln!(out, "failed: … and {} more", self.failures.len() - 50).ok();
            }
            for (stream, n) in &self.not_fast {
                writeln!(
                    out,
                    "not fast: stream {stream} does not allow fast ingest (allow_batched is off): its {n} letter(s) went without --fast"
                )
                .ok();
            }
            if self.purge {
                write!(
                    out,
                    "selected {}, deleted {}, failed {}",
                    self.selected,
                    self.deleted,
                    self.failures.len()
                )
                .ok();
            } else {
                write!(
                    out,
                    "selected {}, replayed {}, already replayed {}, deleted {}, failed {}",
                    self.selected,
                    self.replayed,
                    self.already,
                    self.deleted,
                    self.failures.len()
                )
                .ok();
            }
            if dry_run {
                out.push_str(" (dry run: nothing changed)");
            }
            out
        };
        Printout { text, failed }
    }
}

/// Replays pages of dead letters.
struct Replayer<'a> {
    nats: &'a Nats,
    stream: &'a str,
    to: Option<&'a str>,
    delete: bool,
    dry_run: bool,
    /// `--fast`: fast-ingest batches where the target allows them.
    fast: bool,
    /// Target subject → the stream that captures it (`None`: no stream does).
    targets: HashMap<String, Option<Capture>>,
    /// Every stream's subjects, capture and sources, listed at the first lookup.
    streams: Option<Vec<Listed>>,
    summary: Summary,
}

impl Replayer<'_> {
    /// Replays every selected letter, page by page; the summary.
    async fn run(mut self, sel: &Selection) -> Result<Summary, DlqError> {
        let mut pages = Pages::open(self.nats, self.stream, sel).await?;
        while let Some(page) = pages.next().await? {
            let chosen: Vec<Stored> = page
                .into_iter()
                .filter(|m| sel.matches(&stored::entry(m)))
                .collect();
            self.page(chosen).await?;
        }
        Ok(self.summary)
    }

    /// Replays one page: grouped by target stream, each group as one fast-ingest
    /// batch (`--fast`, where the stream allows it) or one atomic batch where the
    /// stream takes it, else one by one; then deletes what is stored.
    async fn page(&mut self, letters: Vec<Stored>) -> Result<(), DlqError> {
        self.summary.selected += letters.len();
        // (target stream, the letters' sequences and messages), in page order.
        let mut groups: Vec<(Capture, Vec<(u64, Output)>)> = Vec::new();
        for m in &letters {
            let output = match stored::replay(m, self.stream, self.to) {
                Ok(o) => o,
                Err(why) => {
                    self.summary.fail(m.seq, why);
                    continue;
                }
            };
            let Some(target) = self.target(&output.subject).await? else {
                self.summary
                    .fail(m.seq, format!("no stream captures {}", output.subject));
                continue;
            };
            // Back where it came from, unless told otherwise: a letter's subject
            // must be stored by its own stream (or the stream it sources from, an
            // elastic group's).
            if self.to.is_none()
                && let Err(why) = self.comes_from(m, &target).await?
            {
                self.summary.fail(m.seq, why);
                continue;
            }
            if self.dry_run {
                self.summary.planned.push((
                    m.seq,
                    format!("{} (stream {})", output.subject, target.stream),
                ));
                continue;
            }
            match groups.iter_mut().find(|(c, _)| c.stream == target.stream) {
                Some((_, members)) => members.push((m.seq, output)),
                None => groups.push((target, vec![(m.seq, output)])),
            }
        }
        let publisher = self.nats.outputs();
        let mut stored = Vec::new();
        for (target, members) in groups {
            if self.fast {
                if target.batched {
                    self.fast_batch(&publisher, members, &mut stored).await;
                    continue;
                }
                self.summary.not_fast(&target.stream, members.len());
            }
            let outputs: Vec<Output> = members.iter().map(|(_, o)| o.clone()).collect();
            let whole = if target.atomic && outputs.len() > 1 {
                publisher.publish(&outputs, true).await
            } else {
                Err(OutputError::NotAtomic)
            };
            match whole {
                Ok(c) if !c.duplicate => {
                    self.summary.replayed += members.len();
                    stored.extend(members.iter().map(|(seq, _)| *seq));
                }
                // Some were replayed before (the batch was refused whole), or the
                // stream takes no batches, or the batch failed: one by one tells
                // which.
                _ => self.one_by_one(&publisher, members, &mut stored).await,
            }
        }
        if self.delete && !stored.is_empty() {
            let results = self.nats.delete_messages(self.stream, &stored).await?;
            for (seq, result) in stored.iter().zip(results) {
                match result {
                    Ok(()) => self.summary.deleted += 1,
                    Err(why) => self
                        .summary
                        .fail(*seq, format!("replayed, but not deleted: {why}")),
                }
            }
        }
        Ok(())
    }

    /// Replays `members` as one fast-ingest batch. Those after the part the server
    /// confirmed go one by one when it fails: their ids make a second send of one
    /// that was stored after all a duplicate, and one by one says which fail.
    async fn fast_batch(
        &mut self,
        publisher: &OutputPublisher,
        mut members: Vec<(u64, Output)>,
        stored: &mut Vec<u64>,
    ) {
        let outputs: Vec<Output> = members.iter().map(|(_, o)| o.clone()).collect();
        match self.nats.fast_ingest().publish(&outputs).await {
            Ok(c) => {
                if c.duplicate {
                    self.summary.already += members.len();
                } else {
                    self.summary.replayed += members.len();
                }
                stored.extend(members.iter().map(|(seq, _)| *seq));
            }
            Err(FastFailed { confirmed, error }) => {
                tracing::warn!(
                    confirmed,
                    reason = error.label(),
                    "Fast batch failed, the rest goes one by one"
                );
                let rest = members.split_off(confirmed.min(members.len()));
                self.summary.replayed += members.len();
                stored.extend(members.iter().map(|(seq, _)| *seq));
                self.one_by_one(publisher, rest, stored).await;
            }
        }
    }

    /// Replays `members` one by one, each awaiting its PubAck.
    async fn one_by_one(
        &mut self,
        publisher: &OutputPublisher,
        members: Vec<(u64, Output)>,
        stored: &mut Vec<u64>,
    ) {
        for (seq, output) in members {
            match publisher
                .publish(std::slice::from_ref(&output), false)
                .await
            {
                Ok(c) => {
                    if c.duplicate {
                        self.summary.already += 1;
                    } else {
                        self.summary.replayed += 1;
                    }
                    stored.push(seq);
                }
                Err(e) => self.summary.fail(seq, crate::ops::telemetry::chain(&e)),
            }
        }
    }

    /// Whether replaying `m` to its own subject goes back to the stream it was
    /// consumed from: `target` is that stream, or one that stream sources from.
    async fn comes_from(
        &mut self,
        m: &Stored,
        target: &Capture,
    ) -> Result<Result<(), String>, DlqError> {
        let origin = stored::entry(m).stream.unwrap_or_default();
        if origin == target.stream {
            return Ok(Ok(()));
        }
        if self.streams.is_none() {
            self.streams = Some(self.nats.stream_captures().await?);
        }
        let sourced = self
            .streams
            .iter()
            .flatten()
            .find(|l| l.capture.stream == origin)
            .is_some_and(|l| l.sources.contains(&target.stream));
        Ok(if sourced {
            Ok(())
        } else {
            Err(format!(
                "its subject {} is stored by stream {}, not by {origin}, the stream it was consumed from: not replayed (--to replays it elsewhere)",
                stored::entry(m).subject,
                target.stream
            ))
        })
    }

    /// The stream that captures `subject`: the streams are listed once, then each
    /// subject is matched here (a replay over many subjects would otherwise cost two
    /// requests per subject).
    async fn target(&mut self, subject: &str) -> Result<Option<Capture>, DlqError> {
        if let Some(t) = self.targets.get(subject) {
            return Ok(t.clone());
        }
        if self.streams.is_none() {
            self.streams = Some(self.nats.stream_captures().await?);
        }
        let mut found = self.streams.iter().flatten().find_map(|l| {
            l.subjects
                .iter()
                .any(|p| crate::subject::covers(p, subject))
                .then(|| l.capture.clone())
        });
        if found.is_none() {
            // The list leaves out streams the cluster cannot reach now: ask the
            // server about this subject before saying nothing captures it.
            found = self.nats.capturing(subject).await?.into_iter().next();
        }
        self.targets.insert(subject.to_string(), found.clone());
        Ok(found)
    }
}

/// `dlq show`.
async fn show(nats: &Nats, stream: &str, seq: u64, json: bool) -> Result<Printout, DlqError> {
    let page = nats
        .direct_page(
            stream,
            &PageRequest {
                seq,
                batch: 1,
                ..PageRequest::default()
            },
        )
        .await?;
    let Some(m) = page.messages.into_iter().find(|m| m.seq == seq) else {
        return Err(DlqError::NoLetter {
            stream: stream.to_string(),
            seq,
        });
    };
    let e = stored::entry(&m);
    let text = match std::str::from_utf8(&m.payload) {
        Ok(t) => (Some(t.to_string()), None),
        Err(_) => (
            None,
            Some(base64::engine::general_purpose::STANDARD.encode(&m.payload)),
        ),
    };
    let out = if json {
        let mut v = serde_json::to_value(&e).unwrap_or(Value::Null);
        v["headers"] = json!(m.headers);
        match text {
            (Some(t), _) => v["data"] = json!(t),
            (_, b) => v["data_base64"] = json!(b),
        }
        v.to_string()
    } else {
        let mut out = table(std::slice::from_ref(&e));
        out.push_str("\n\nheaders:\n");
        for (n, v) in &m.headers {
            writeln!(out, "  {}: {}", printable(n), printable(v)).ok();
        }
        match text {
            (Some(t), _) => {
                write!(
                    out,
                    "payload ({} bytes):\n{}",
                    m.payload.len(),
                    printable_lines(&t)
                )
                .ok();
            }
            (_, Some(b)) => {
                write!(out, "payload ({} bytes, base64):\n{b}", m.payload.len()).ok();
            }
            _ => {}
        }
        out
    };
    Ok(Printout {
        text: out,
        failed: false,
    })
}

/// `text` for a terminal (`crate::printable`).
fn printable(text: &str) -> String {
    crate::printable::printable(text).into_owned()
}

/// As [`printable`], keeping line breaks and tabs (a payload's own layout).
fn printable_lines(text: &str) -> String {
    crate::printable::printable_lines(text).into_owned()
}

/// The `ls` table.
fn table(entries: &[Entry]) -> String {
    let rows: Vec<[String; 8]> = entries
        .iter()
        .map(|e| {
            [
                e.dlq_seq.to_string(),
                e.time.clone(),
                e.stream.as_deref().map_or_else(|| "-".into(), printable),
                e.sequence.map_or_else(|| "-".into(), |n| n.to_string()),
                e.consumer.as_deref().map_or_else(|| "-".into(), printable),
                printable(&e.subject),
                e.status.map_or_else(|| "-".into(), |n| n.to_string()),
                printable(&e.reason),
            ]
        })
        .collect();
    let head = [
        "SEQ",
        "TIME",
        "STREAM",
        "STREAM SEQ",
        "CONSUMER",
        "SUBJECT",
        "STATUS",
        "REASON",
    ];
    let mut widths = head.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut l = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                l.push_str(cell);
            } else {
                write!(l, "{cell:<w$}  ").ok();
            }
        }
        l
    };
    let mut out = line(head.to_vec());
    for row in &rows {
        out.push('\n');
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    if rows.is_empty() {
        out.push_str("\n(no dead letters selected)");
    }
    out
}
