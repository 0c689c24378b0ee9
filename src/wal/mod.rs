//! The write-ahead log (etcd's `wal` package, one log per resource kind).
//!
//! Files: [`record`] (the record format), [`frame`] (the one reader of framed records),
//! [`segment`] (segment files: naming, listing, torn tails), [`snapshot`] (the retained state at
//! one revision), [`recover`] (the newest snapshot and the revisions logged after it, back into
//! the store), [`backup`] (the whole store at one revision as one file: Raft snapshots, and
//! backups older mem_etcds saved).
//!
//! # Layout (of [`DataDir`])
//! ```text
//! <data-dir>/LOCK                      held while a server runs on the directory
//! <data-dir>/wal/<stream>/<seq>-<first>.wal
//! <data-dir>/snap/<revision>/<stream>.snap, leases.snap
//! ```
//! A stream is one partition's log (`+registry+pods+`, `_default`) or `_meta` (lease grants
//! and revocations, compactions). Record format: [`record`], read back by [`frame`]; files:
//! [`segment`].
//!
//! # Where it sits in the write path
//! The store applies a txn, encodes its changes as one record per partition touched (off any
//! shared lock, in the writer's thread), and completes the revision. The store's in-order
//! publisher then hands each revision's records to [`Wal::append`] in revision order, so every
//! stream is in revision order. A writer takes everything appended since its last batch (group
//! commit: no cap on batch size, so batches grow with load), writes each stream's bytes with
//! one `write(2)`, and in fsync mode `fdatasync`s every file touched. Only then does it tell
//! the store ([`DurableSink`]) that the batch's revisions are durable, and the store publishes
//! them to watchers and moves the read watermark. So in buffered and fsync mode no reader or
//! watcher sees a write before it reached the OS (buffered) or the disk (fsync).
//!
//! The writer is a dedicated thread in fsync mode (an fdatasync takes milliseconds). In
//! buffered mode it is a task on the server's runtime (`run_flusher`), which saves two context
//! switches a batch; the thread stays as its fallback when the write fails or must wait.
//!
//! # Failure
//! A failed write (ENOSPC, EIO, a short write) is cut back to the last record boundary and
//! retried until it succeeds; meanwhile [`Wal::check_writable`] makes new client writes fail,
//! reads keep being served at the last durable revision, and the writes caught in the failed
//! batch are acknowledged once it goes through. Nothing acknowledged is lost.

pub mod backup;
pub mod frame;
pub mod record;
pub mod recover;
pub mod segment;
pub mod snapshot;

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hashbrown::HashMap;
use parking_lot::{Condvar, Mutex};
use tokio::sync::Notify;

use self::record::{Framer, Record};
use self::segment::{META_STREAM, segment_file_name, stream_name};
use crate::data_dir::{DataDir, sync_dir};
use crate::metrics::{self, Histogram};

/// When a write counts as done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// No log: acknowledged once applied in memory; a restart starts empty.
    None,
    /// Acknowledged once written to the OS; fdatasync'd in the background every flush interval.
    Buffered,
    /// Acknowledged once the batch holding the write is fdatasync'd.
    Fsync,
}

/// WAL settings (from the command line).
#[derive(Clone, Debug)]
pub struct Options {
    pub dir: DataDir,
    pub mode: Mode,
    /// Keys starting with one of these are not logged (their revisions still are).
    pub exclude: Vec<Bytes>,
    /// Buffered mode: how often written data is fdatasync'd.
    pub flush_interval: Duration,
    /// A segment is closed and a new one started past this size.
    pub segment_bytes: u64,
    /// A snapshot is due once this many bytes (or the store's size, if larger) were logged
    /// since the last one.
    pub snapshot_bytes: u64,
    /// Truncate at a corrupt record instead of refusing to start.
    pub repair: bool,
    /// Fault injection for tests: a file whose content (`enospc`, `short`) makes writes fail.
    pub failpoint: Option<PathBuf>,
}

/// A recovery that cannot go on. Here, below `recover` and `snapshot`, since loading a
/// snapshot (which recovery does first) fails the same ways.
#[derive(Debug)]
pub enum RecoverError {
    Io(PathBuf, io::Error),
    /// A bad record before the end of a stream.
    Corrupt {
        path: PathBuf,
        offset: u64,
        reason: String,
    },
}

impl std::fmt::Display for RecoverError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecoverError::Io(p, e) => write!(f, "{}: {e}", p.display()),
            RecoverError::Corrupt { path, offset, reason } => write!(
                f,
                "corrupt WAL record in {} at offset {offset}: {reason}; start with --wal-repair \
                 to truncate the log there (dropping that record and everything after it in \
                 this stream)",
                path.display()
            ),
        }
    }
}

impl std::error::Error for RecoverError {}

/// Told when revisions became durable (the store, which then publishes them).
pub trait DurableSink: Send + Sync {
    /// Every revision up to `rev` is written (and synced, in fsync mode).
    fn durable(&self, rev: i64);
}

/// One revision's records, one per partition it wrote to, framed and ready to append, each
/// with the index of its partition's stream (found by the writer that built it, so that the
/// in-order publisher, which appends it, only copies bytes).
#[derive(Debug, Default)]
pub struct Entry {
    rev: i64,
    records: Vec<(usize, Vec<u8>)>,
}

/// Builds an [`Entry`] from a revision's changes, in sub-revision order.
#[derive(Debug)]
pub struct EntryBuilder<'a> {
    wal: &'a Wal,
    rev: i64,
    /// Per partition prefix: the op count and the encoded ops.
    parts: Vec<(Bytes, usize, Vec<u8>)>,
}

impl EntryBuilder<'_> {
    fn part(&mut self, prefix: &Bytes) -> &mut (Bytes, usize, Vec<u8>) {
        let i = match self.parts.iter().position(|p| p.0 == *prefix) {
            Some(i) => i,
            None => {
                self.parts.push((prefix.clone(), 0, Vec::new()));
                self.parts.len() - 1
            }
        };
        &mut self.parts[i]
    }

    /// Adds a change to `key` (in partition `prefix`). An excluded key still makes its
    /// partition part of the revision, so recovery sees the revision even if nothing else
    /// of it was logged.
    pub fn op(&mut self, prefix: &Bytes, op: &record::Op) {
        let key = match op {
            record::Op::Put { key, .. } | record::Op::Delete { key, .. } => key,
        };
        let excluded = self.wal.excluded(key);
        let p = self.part(prefix);
        if !excluded {
            p.1 += 1;
            record::put_op(&mut p.2, op);
        }
    }

    pub fn finish(self) -> Entry {
        let n = self.parts.len() as u32;
        let records = self
            .parts
            .into_iter()
            .map(|(prefix, ops, body)| {
                let mut out = Vec::with_capacity(body.len() + 32);
                let mut f = Framer::new(&mut out);
                record::begin_txn(f.body(), self.rev, n, ops);
                f.body().extend_from_slice(&body);
                f.finish();
                (self.wal.stream_index(&prefix), out)
            })
            .collect();
        Entry { rev: self.rev, records }
    }
}

/// Counters for logs, benchmarks and `/metrics`.
#[derive(Debug)]
pub struct Stats {
    pub batches: AtomicU64,
    pub revisions: AtomicU64,
    pub fsyncs: AtomicU64,
    pub bytes: AtomicU64,
    /// Bytes logged since the last snapshot.
    pub since_snapshot: AtomicU64,
    /// Every fdatasync of a batch (fsync mode) or of a file written since the last background
    /// sync (buffered mode).
    pub fsync_seconds: Histogram,
    /// Revisions per batch written: how much group commit gathers.
    pub batch_revisions: Histogram,
    /// The writes of each batch (every file it touches), without the sync.
    pub write_seconds: Histogram,
    /// Each batch from its first write until it is durable (written, and synced in fsync
    /// mode): what etcd's backend commit is to its writes.
    pub commit_seconds: Histogram,
    /// Snapshots written.
    pub snapshots: crate::metrics::SnapshotStats,
    /// The writer's time per batch, under the writer lock: the writes (and the sync in fsync
    /// mode), then the store told the batch is durable (its events published). One batch at
    /// a time, so every revision pays its share of it in series.
    pub writing: crate::metrics::Serial,
}

impl Default for Stats {
    fn default() -> Self {
        Self {
            batches: AtomicU64::new(0),
            revisions: AtomicU64::new(0),
            fsyncs: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            since_snapshot: AtomicU64::new(0),
            fsync_seconds: metrics::seconds(),
            batch_revisions: metrics::counts(),
            write_seconds: metrics::seconds(),
            commit_seconds: metrics::seconds(),
            snapshots: Default::default(),
            writing: Default::default(),
        }
    }
}

/// What the writer has not taken yet.
#[derive(Debug, Default)]
struct Pending {
    /// Per stream (index as in `streams`): bytes to append and the first revision (meta:
    /// sequence number) in them.
    bufs: Vec<(Vec<u8>, i64)>,
    /// Streams with bytes, in first-touched order.
    dirty: Vec<usize>,
    /// The newest revision appended.
    last_rev: i64,
    revisions: u64,
    /// Batch number the pending bytes will go out in; waiters compare it with `durable_gen`.
    batch: u64,
    /// Written buffers, cleared, for the next batches: a buffer grown afresh for every batch
    /// cost a page fault per 4 KiB written (8% of the CPU of a put).
    spare: Vec<Vec<u8>>,
}

/// Buffers up to this size are kept for reuse (larger ones came from a burst).
const SPARE_MAX_BYTES: usize = 1 << 20;
/// At most this many spare buffers (one per stream written in a batch, typically a few).
const SPARE_MAX_COUNT: usize = 64;

/// The log. Shared by the store (revisions), the lessor and compaction (meta records), and
/// its writer thread.
#[derive(Debug)]
pub struct Wal {
    opts: Options,
    /// Appenders fill it, the writer swaps it out. Appends come from the store's in-order
    /// publisher (one thread at a time) and from rare meta writes, so the lock is uncontended
    /// except against the writer's swap.
    pending: Mutex<Pending>,
    /// Wakes the writer thread when `pending` gets bytes it should write.
    wake: Condvar,
    /// The open segments. Whoever writes a batch holds it from taking the batch out of
    /// `pending` until the batch is durable, so batches reach the files, and the store, in
    /// order. In buffered mode that is usually the appender itself (see [`Wal::append`]);
    /// the writer thread takes over when the lock is busy, in fsync mode, and after a failure.
    writer: Mutex<WriterState>,
    /// Files written in buffered mode, for the background fdatasync.
    syncer: Syncer,
    /// Whether the buffered-mode flusher task runs (see [`Wal::run_flusher`]); without it
    /// (no runtime, fsync mode) the writer thread writes everything.
    flusher: AtomicBool,
    /// Set by the append that wakes the flusher, cleared when the flusher starts a round.
    flush_scheduled: AtomicBool,
    flush_wake: Notify,
    /// Stream index by partition prefix; stream 0 is `_meta`. Only grows; read by every writer
    /// as it builds its entry.
    streams: Mutex<(HashMap<Bytes, usize>, Vec<Bytes>)>,
    /// The last batch fully written (and synced in fsync mode).
    durable_gen: AtomicU64,
    durable_notify: Notify,
    /// For waiters on plain threads ([`Wal::wait_durable_blocking`]): the lock orders their
    /// check of `durable_gen` with the writer's notification, so no wake-up is lost.
    durable_lock: Mutex<()>,
    durable_cv: Condvar,
    /// Sequence number of the last meta record (continues across restarts).
    meta_seq: AtomicU64,
    /// Set while the writer cannot write; new client writes are refused.
    failed: AtomicBool,
    /// The newest revision the writer made durable.
    durable_rev: AtomicI64,
    stop: AtomicBool,
    sink: std::sync::OnceLock<Arc<dyn DurableSink>>,
    pub stats: Stats,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for dyn DurableSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DurableSink")
    }
}

impl Wal {
    /// A log over `opts.dir` continuing after recovery: `meta_seq` is the last meta sequence
    /// number recovered, `rev` the recovered revision. Call [`Wal::start`] to run the writer.
    pub fn new(opts: Options, meta_seq: u64, rev: i64) -> io::Result<Arc<Self>> {
        fs::create_dir_all(opts.dir.wal().join(META_STREAM))?;
        let p = Pending { bufs: vec![(Vec::new(), 0)], batch: 1, ..Default::default() };
        Ok(Arc::new(Self {
            pending: Mutex::new(p),
            wake: Condvar::new(),
            writer: Mutex::new(WriterState::default()),
            syncer: Syncer::default(),
            flusher: AtomicBool::new(false),
            flush_scheduled: AtomicBool::new(false),
            flush_wake: Notify::new(),
            streams: Mutex::new((HashMap::new(), vec![Bytes::new()])),
            durable_gen: AtomicU64::new(0),
            durable_notify: Notify::new(),
            durable_lock: Mutex::new(()),
            durable_cv: Condvar::new(),
            meta_seq: AtomicU64::new(meta_seq),
            failed: AtomicBool::new(false),
            durable_rev: AtomicI64::new(rev),
            stop: AtomicBool::new(false),
            sink: std::sync::OnceLock::new(),
            stats: Stats::default(),
            threads: Mutex::new(Vec::new()),
            opts,
        }))
    }

    /// Starts the writer (and, in buffered mode, the background syncer).
    pub fn start(self: &Arc<Self>, sink: Arc<dyn DurableSink>) {
        let _ = self.sink.set(sink);
        let me = self.clone();
        let mut threads = self.threads.lock();
        threads.push(
            std::thread::Builder::new()
                .name("wal-writer".into())
                .spawn(move || me.run_writer())
                .expect("spawn the WAL writer"),
        );
        if self.opts.mode == Mode::Buffered
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            self.flusher.store(true, Ordering::SeqCst);
            rt.spawn(self.clone().run_flusher());
        }
        if self.opts.mode == Mode::Buffered {
            let me = self.clone();
            threads.push(
                std::thread::Builder::new()
                    .name("wal-syncer".into())
                    .spawn(move || me.syncer.run(&me))
                    .expect("spawn the WAL syncer"),
            );
        }
    }

    pub fn mode(&self) -> Mode {
        self.opts.mode
    }

    pub fn options(&self) -> &Options {
        &self.opts
    }

    /// Whether `key` is not logged (`--wal-exclude-prefix`).
    pub fn excluded(&self, key: &[u8]) -> bool {
        self.opts.exclude.iter().any(|p| key.starts_with(p))
    }

    /// Starts an entry for revision `rev`.
    pub fn entry(&self, rev: i64) -> EntryBuilder<'_> {
        EntryBuilder { wal: self, rev, parts: Vec::new() }
    }

    /// Whether writes reach the disk; while they fail, client writes are refused.
    pub fn writable(&self) -> bool {
        !self.failed.load(Ordering::Relaxed)
    }

    fn stream_index(&self, prefix: &Bytes) -> usize {
        let mut s = self.streams.lock();
        if let Some(&i) = s.0.get(prefix) {
            return i;
        }
        // A copy: the caller's prefix may be a view into a whole request buffer.
        let prefix = Bytes::copy_from_slice(prefix);
        let i = s.1.len();
        s.1.push(prefix.clone());
        s.0.insert(prefix, i);
        i
    }

    /// Appends consecutive revisions' entries, in revision order. The store calls it from its
    /// in-order publisher; the revisions become visible through [`DurableSink::durable`].
    pub fn append(&self, entries: impl IntoIterator<Item = Entry>) {
        let mut g = self.pending.lock();
        for e in entries {
            for (i, bytes) in e.records {
                if g.bufs.len() <= i {
                    g.bufs.resize_with(i + 1, || (Vec::new(), 0));
                }
                if g.bufs[i].0.is_empty() {
                    g.bufs[i].1 = e.rev;
                    g.dirty.push(i);
                }
                g.bufs[i].0.extend_from_slice(&bytes);
            }
            g.last_rev = e.rev;
            g.revisions += 1;
        }
        drop(g);
        if self.flusher.load(Ordering::Relaxed) {
            // One wake-up per round of appends, however many revisions the round holds.
            if !self.flush_scheduled.swap(true, Ordering::AcqRel) {
                self.flush_wake.notify_one();
            }
            return;
        }
        self.wake.notify_one();
    }

    /// Buffered mode's writer, a task on the server's runtime. Woken by the first append of a
    /// round, it runs after the request tasks already queued on its worker (the runtime has
    /// no LIFO slot), so it finds their revisions all pending and writes them with one
    /// write(2) per stream. A write(2) into the page cache takes microseconds: cheaper than
    /// waking the writer thread and, from it, the waiting requests (two context switches a
    /// batch), and the requests it makes visible are mostly on its own worker. It never
    /// sleeps: when the writer lock is busy or a write fails, the writer thread takes over
    /// (and retries).
    async fn run_flusher(self: Arc<Self>) {
        loop {
            self.flush_wake.notified().await;
            // Cleared before taking the batch: an append after this point wakes another round.
            self.flush_scheduled.store(false, Ordering::Release);
            if self.stop.load(Ordering::SeqCst) {
                self.wake.notify_one();
                return;
            }
            let mut handed_over = true;
            if !self.failed.load(Ordering::Relaxed)
                && let Some(mut w) = self.writer.try_lock()
                && w.retry.is_none()
            {
                handed_over = false;
                while let Some(mut batch) = self.take_batch() {
                    let started = Instant::now();
                    match w.try_write(&self, &mut batch, &mut Vec::new()) {
                        Ok(()) => self.finish_batch(batch, started),
                        Err(e) => {
                            tracing::error!(error = %e, "wal: write failed; retrying in the writer");
                            self.failed.store(true, Ordering::SeqCst);
                            w.retry = Some(batch);
                            handed_over = true;
                            break;
                        }
                    }
                }
            }
            if handed_over {
                self.wake.notify_one();
            }
        }
    }

    /// Takes everything pending as the next batch (call with the writer lock held).
    fn take_batch(&self) -> Option<Batch> {
        let mut g = self.pending.lock();
        if g.dirty.is_empty() {
            return None;
        }
        let dirty = std::mem::take(&mut g.dirty);
        let bufs = dirty
            .into_iter()
            .map(|i| {
                let spare = g.spare.pop().unwrap_or_default();
                let (buf, first) = &mut g.bufs[i];
                (i, std::mem::replace(buf, spare), *first)
            })
            .collect();
        let batch = Batch {
            bufs,
            written: Vec::new(),
            last_rev: g.last_rev,
            revisions: g.revisions,
            number: g.batch,
        };
        g.revisions = 0;
        g.batch += 1;
        Some(batch)
    }

    /// Tells the store and the waiters that a written batch is durable, and counts the writer's
    /// pass over it, begun at `started`, as serial time (`Stats::writing`).
    fn finish_batch(&self, b: Batch, started: Instant) {
        if !b.written.is_empty() {
            let mut g = self.pending.lock();
            for mut buf in b.written {
                if buf.capacity() <= SPARE_MAX_BYTES && g.spare.len() < SPARE_MAX_COUNT {
                    buf.clear();
                    g.spare.push(buf);
                }
            }
        }
        self.stats.batches.fetch_add(1, Ordering::Relaxed);
        self.stats.revisions.fetch_add(b.revisions, Ordering::Relaxed);
        if b.revisions > 0 {
            self.stats.batch_revisions.observe(b.revisions as f64);
        }
        self.durable_gen.store(b.number, Ordering::SeqCst);
        if b.revisions > 0 {
            self.durable_rev.store(b.last_rev, Ordering::SeqCst);
            if let Some(s) = self.sink.get() {
                s.durable(b.last_rev);
            }
        }
        self.durable_notify.notify_waiters();
        // Blocking waiters are rare (compactions); the lock is uncontended, once per batch.
        let _g = self.durable_lock.lock();
        self.durable_cv.notify_all();
        self.stats.writing.record(started, b.revisions);
    }

    /// The writer thread: writes what appenders leave to it, retrying failures.
    fn run_writer(&self) {
        loop {
            {
                let mut g = self.pending.lock();
                while g.dirty.is_empty()
                    && !self.stop.load(Ordering::SeqCst)
                    && !self.failed.load(Ordering::SeqCst)
                {
                    self.wake.wait(&mut g);
                }
            }
            let mut w = self.writer.lock();
            if let Some(batch) = w.retry.take() {
                w.write_batch(self, batch);
            }
            match self.take_batch() {
                Some(batch) => w.write_batch(self, batch),
                None if self.stop.load(Ordering::SeqCst) => {
                    // Stopping: make everything written durable before the process exits.
                    for s in w.segments.iter().flatten() {
                        if let Err(e) = s.file.sync_data() {
                            tracing::error!(error = %e, "wal: final fdatasync failed");
                        }
                    }
                    return;
                }
                None => {}
            }
        }
    }

    /// Appends a meta record (lease grant or revoke, compaction); returns the batch to wait
    /// for with [`Wal::wait_durable`]. `make` gets the record's sequence number.
    pub fn append_meta(&self, make: impl FnOnce(u64) -> Record) -> u64 {
        let mut g = self.pending.lock();
        let seq = self.meta_seq.fetch_add(1, Ordering::SeqCst) + 1;
        let mut body = Vec::new();
        make(seq).encode(&mut body);
        if g.bufs[0].0.is_empty() {
            g.bufs[0].1 = seq as i64;
            g.dirty.push(0);
        }
        record::frame(&mut g.bufs[0].0, &body);
        let batch = g.batch;
        drop(g);
        self.wake.notify_one();
        batch
    }

    /// The last meta sequence number handed out.
    pub fn meta_seq(&self) -> u64 {
        self.meta_seq.load(Ordering::SeqCst)
    }

    /// The newest revision written (and synced, in fsync mode).
    pub fn durable_rev(&self) -> i64 {
        self.durable_rev.load(Ordering::SeqCst)
    }

    /// Waits until batch `batch` is written (and synced, in fsync mode).
    pub async fn wait_durable(&self, batch: u64) {
        loop {
            let n = self.durable_notify.notified();
            tokio::pin!(n);
            n.as_mut().enable();
            if self.durable_gen.load(Ordering::SeqCst) >= batch {
                return;
            }
            n.await;
        }
    }

    /// [`wait_durable`](Self::wait_durable) for a plain thread (not a runtime worker: the
    /// buffered-mode flusher may be a task on the runtime).
    pub fn wait_durable_blocking(&self, batch: u64) {
        let mut g = self.durable_lock.lock();
        while self.durable_gen.load(Ordering::SeqCst) < batch {
            self.durable_cv.wait(&mut g);
        }
    }

    /// Whether enough was logged since the last snapshot that one is due (`live` is the
    /// store's size: a snapshot costs about that much to write).
    pub fn snapshot_due(&self, live: u64) -> bool {
        self.stats.since_snapshot.load(Ordering::Relaxed) >= self.opts.snapshot_bytes.max(live)
    }

    /// Writes out everything appended and stops the writer (graceful shutdown).
    pub fn close(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.flusher.store(false, Ordering::SeqCst);
        self.flush_wake.notify_one();
        self.wake.notify_all();
        let threads = std::mem::take(&mut *self.threads.lock());
        for t in threads {
            t.thread().unpark();
            let _ = t.join();
        }
        let s = &self.stats;
        tracing::info!(
            batches = s.batches.load(Ordering::Relaxed),
            revisions = s.revisions.load(Ordering::Relaxed),
            fsyncs = s.fsyncs.load(Ordering::Relaxed),
            bytes = s.bytes.load(Ordering::Relaxed),
            "wal: closed"
        );
    }

    /// The fault to inject, if the failpoint file says so.
    fn failpoint(&self) -> Option<&'static str> {
        let path = self.opts.failpoint.as_ref()?;
        match fs::read_to_string(path).ok()?.trim() {
            "enospc" => Some("enospc"),
            "short" => Some("short"),
            _ => None,
        }
    }
}

/// Files written in buffered mode since the last background sync.
#[derive(Debug, Default)]
struct Syncer {
    dirty: Mutex<Vec<Arc<File>>>,
}

impl Syncer {
    fn mark(&self, f: &Arc<File>) {
        let mut d = self.dirty.lock();
        if !d.iter().any(|x| Arc::ptr_eq(x, f)) {
            d.push(f.clone());
        }
    }

    fn run(&self, wal: &Wal) {
        loop {
            let stop = wal.stop.load(Ordering::SeqCst);
            let files = std::mem::take(&mut *self.dirty.lock());
            for f in files {
                let started = Instant::now();
                if let Err(e) = f.sync_data() {
                    tracing::warn!(error = %e, "wal: background fdatasync failed");
                }
                wal.stats.fsync_seconds.observe(started.elapsed().as_secs_f64());
            }
            if stop {
                return;
            }
            // Parked rather than asleep: `Wal::close` unparks it for the final sync.
            std::thread::park_timeout(wal.opts.flush_interval);
        }
    }
}

/// The open segment of a stream.
#[derive(Debug)]
struct Segment {
    file: Arc<File>,
    /// Bytes in the file that are whole records (a failed write is cut back to this).
    len: u64,
    seq: u64,
}

/// A batch taken out of `pending`: per stream, its index, bytes and first revision.
#[derive(Debug)]
struct Batch {
    bufs: Vec<(usize, Vec<u8>, i64)>,
    /// The buffers of `bufs` already written (for `Pending::spare`).
    written: Vec<Vec<u8>>,
    last_rev: i64,
    revisions: u64,
    number: u64,
}

/// The writer's state (see `Wal::writer`).
#[derive(Debug, Default)]
struct WriterState {
    /// The open segment of each stream, by stream index.
    segments: Vec<Option<Segment>>,
    /// Last time a failure was logged (so a full disk logs once a second, not per retry).
    last_error_log: Option<Instant>,
    /// A batch an inline write failed on; the writer thread retries it before anything else.
    retry: Option<Batch>,
}

impl WriterState {
    /// Writes (and in fsync mode syncs) a batch, retrying until it succeeds.
    fn write_batch(&mut self, wal: &Wal, mut batch: Batch) {
        let mut failed = wal.failed.load(Ordering::SeqCst);
        let mut written = Vec::new();
        let started = Instant::now();
        loop {
            let result = self.try_write(wal, &mut batch, &mut written);
            match result {
                Ok(()) => {
                    wal.stats.commit_seconds.observe(started.elapsed().as_secs_f64());
                    break;
                }
                Err(e) => {
                    failed = true;
                    wal.failed.store(true, Ordering::SeqCst);
                    if self.last_error_log.is_none_or(|t| t.elapsed() > Duration::from_secs(1)) {
                        tracing::error!(
                            error = %e,
                            "wal: write failed; client writes are refused until it succeeds"
                        );
                        self.last_error_log = Some(Instant::now());
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
        if failed {
            wal.failed.store(false, Ordering::SeqCst);
            self.last_error_log = None;
            tracing::warn!("wal: writes succeed again; client writes are accepted");
        }
        wal.finish_batch(batch, started);
    }

    /// Writes the streams not yet written; `written` collects the files to sync.
    fn try_write(
        &mut self,
        wal: &Wal,
        batch: &mut Batch,
        written: &mut Vec<Arc<File>>,
    ) -> io::Result<()> {
        let fault = wal.failpoint();
        if fault == Some("enospc") {
            return Err(io::Error::from_raw_os_error(28));
        }
        let writing = Instant::now();
        while let Some((i, buf, first)) = batch.bufs.last() {
            let (i, first) = (*i, *first);
            let seg = self.segment_for(wal, i, first, buf.len() as u64)?;
            let result = if fault == Some("short") {
                (&*seg.file)
                    .write_all(&buf[..buf.len() / 2])
                    .and(Err(io::Error::from_raw_os_error(28)))
            } else {
                (&*seg.file).write_all(buf)
            };
            if let Err(e) = result {
                // Cut the partial record off so the retry appends at a record boundary.
                let _ = seg.file.set_len(seg.len);
                return Err(e);
            }
            seg.len += buf.len() as u64;
            let f = seg.file.clone();
            wal.stats.bytes.fetch_add(buf.len() as u64, Ordering::Relaxed);
            wal.stats.since_snapshot.fetch_add(buf.len() as u64, Ordering::Relaxed);
            if !written.iter().any(|x| Arc::ptr_eq(x, &f)) {
                written.push(f);
            }
            if let Some((_, b, _)) = batch.bufs.pop() {
                batch.written.push(b);
            }
        }
        wal.stats.write_seconds.observe(writing.elapsed().as_secs_f64());
        match wal.opts.mode {
            Mode::Fsync => {
                let started = Instant::now();
                sync_all(written)?;
                wal.stats.fsync_seconds.observe(started.elapsed().as_secs_f64());
                written.clear();
                wal.stats.fsyncs.fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                for f in written.drain(..) {
                    wal.syncer.mark(&f);
                }
            }
        }
        Ok(())
    }

    /// The segment stream `i` appends to, rotated first if `add` bytes would overflow it.
    fn segment_for(
        &mut self,
        wal: &Wal,
        i: usize,
        first: i64,
        add: u64,
    ) -> io::Result<&mut Segment> {
        if self.segments.len() <= i {
            self.segments.resize_with(i + 1, || None);
        }
        let full = self.segments[i].as_ref().is_some_and(|s| {
            s.len > record::FILE_HEADER_LEN && s.len + add > wal.opts.segment_bytes
        });
        if full {
            let old = self.segments[i].take().expect("checked");
            old.file.sync_data()?;
            self.segments[i] = Some(create(wal, i, old.seq + 1, first)?);
        } else if self.segments[i].is_none() {
            let seq = last_seq(wal, i)?.map_or(0, |s| s + 1);
            self.segments[i] = Some(create(wal, i, seq, first)?);
        }
        Ok(self.segments[i].as_mut().expect("just set"))
    }
}

fn stream_dir(wal: &Wal, i: usize) -> PathBuf {
    let name = if i == 0 { META_STREAM.to_string() } else { stream_name(&wal.streams.lock().1[i]) };
    wal.opts.dir.wal().join(name)
}

/// The newest existing segment's sequence number in stream `i` (after a restart, new
/// segments continue the numbering; old ones are never appended to).
fn last_seq(wal: &Wal, i: usize) -> io::Result<Option<u64>> {
    let dir = stream_dir(wal, i);
    if !dir.exists() {
        return Ok(None);
    }
    Ok(segment::list_segments(&dir)?.last().map(|s| s.seq))
}

fn create(wal: &Wal, i: usize, seq: u64, first: i64) -> io::Result<Segment> {
    let dir = stream_dir(wal, i);
    if !dir.exists() {
        fs::create_dir_all(&dir)?;
        sync_dir(dir.parent().expect("wal dir"))?;
    }
    let path = dir.join(segment_file_name(seq, first));
    let mut f = OpenOptions::new().create(true).append(true).open(&path)?;
    let header = record::file_header();
    if let Err(e) = f.write_all(&header).and_then(|_| f.sync_data()) {
        let _ = fs::remove_file(&path);
        return Err(e);
    }
    sync_dir(&dir)?;
    Ok(Segment { file: Arc::new(f), len: header.len() as u64, seq })
}

/// fdatasyncs every file, in parallel when there are several (a batch touching k partitions
/// then costs one fdatasync's latency, not k).
fn sync_all(files: &[Arc<File>]) -> io::Result<()> {
    match files {
        [] => Ok(()),
        [f] => f.sync_data(),
        [first, rest @ ..] => std::thread::scope(|s| {
            let others: Vec<_> = rest.iter().map(|f| s.spawn(move || f.sync_data())).collect();
            let mut result = first.sync_data();
            for h in others {
                let r = h.join().unwrap_or_else(|_| Err(io::Error::other("fdatasync panicked")));
                result = result.and(r);
            }
            result
        }),
    }
}

/// Takes the data directory's lock, so two servers never write the same log.
pub fn lock_dir(dir: &DataDir) -> io::Result<File> {
    fs::create_dir_all(dir.path())?;
    let f = OpenOptions::new().create(true).truncate(false).write(true).open(dir.lock_file())?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(fs::TryLockError::WouldBlock) => Err(io::Error::other(format!(
            "data dir {} is in use by another process",
            dir.display()
        ))),
        Err(fs::TryLockError::Error(e)) => Err(e),
    }
}
