//! The Raft log (openraft's `RaftLogStorage`): entries, the vote and the committed position, in
//! memory and, per `--wal-mode`, on disk. In a cluster this is the write-ahead log: a write is
//! logged once, here, as the client's request; the store applies it from the log and keeps no
//! WAL of its own, and snapshots (see `state_machine`) bound the log's length.
//!
//! # On disk
//! `<data-dir>/raft/log/<seq>-<first index>.log` (16 hex digits each), framed and checksummed
//! as the WAL's segments are (`wal::segment`), under their own magic. Records: an entry, the
//! vote, the committed log id, a truncation (entries after a log id are gone) and a purge
//! (entries up to a log id are gone). Each segment starts by restating the vote, the committed
//! log id and the purge point, so a segment whose entries are all purged can be deleted without
//! losing them.
//!
//! # In memory
//! openraft reads entries back to send them to followers and to apply them; a member that
//! keeps up only asks for the newest. The log is purged only once a snapshot covers it (see
//! `state_machine`: up to 256 MiB of log), so holding every entry until then would hold the
//! data about twice (the store holds it too). So with a disk an entry is held only until every
//! member has it and this one has applied it ([`LogStore::release`]), and never more than the
//! newest `keep_in_memory` (`--snapshot-count`, for a member that stays behind); for the others
//! the log keeps where their record is (a few tens of bytes each) and reads them back from their
//! segment when asked (a lagging follower, an apply far behind, a new leader's probe), without
//! holding the log's lock over the read.
//! Segments are deleted only once all their entries are purged, so such a read finds its file
//! unless a purge overtook it: then it returns what follows the purged part, as a read that
//! started after the purge would. With `--wal-mode none` there is nothing to read back from,
//! and every entry since the purge point is held.
//!
//! # When an append counts as written
//! `none`: at once (a restarted member has nothing; see `node` for how it rejoins). `buffered`:
//! once `write(2)` returned, fdatasync'd every `--wal-flush-interval` in the background.
//! `fsync`: once fdatasync'd, by a syncer thread that takes every append made since its last
//! sync (group commit). openraft counts a member's acknowledgement only then, so a write is
//! acknowledged once a majority holds it as its mode promises.

use std::collections::VecDeque;
use std::fmt::Debug;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::ops::{Bound, Range, RangeBounds};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use openraft::storage::{IOFlushed, RaftLogStorage};
use openraft::{EntryPayload, LogState, RaftLogReader};
use parking_lot::{Condvar, Mutex};
use prost::Message;

use super::rafthttp::codec;
use super::types::{CommittedLeaderId, Entry, LogId, Proposal, TypeConfig, Vote};
use crate::data_dir::sync_dir;
use crate::proto::memetcdpb as pb;
use crate::wal::Mode;
use crate::wal::frame::{Frame, Frames};
use crate::wal::record::{Decoder, FILE_HEADER_LEN, FRAME_LEN, Framer, put_bytes, put_uvarint};
use crate::wal::segment::{self, End};

/// First bytes of a Raft log segment.
const MAGIC: &[u8; 8] = b"MEMETCDR";
const VERSION: u32 = 1;

/// Entries held in memory by default: etcd's `--snapshot-count` default, about as many entries
/// as etcd's own in-memory Raft log holds between its snapshots.
pub const DEFAULT_KEEP_IN_MEMORY: u64 = 10_000;

/// Record types. Values are part of the format: never reuse one.
mod tag {
    pub const ENTRY: u8 = 1;
    pub const VOTE: u8 = 2;
    pub const COMMITTED: u8 = 3;
    pub const TRUNCATE: u8 = 4;
    pub const PURGE: u8 = 5;
    pub const BLANK: u8 = 0;
    pub const NORMAL: u8 = 1;
    pub const MEMBERSHIP: u8 = 2;
}

/// A decoded log record.
#[derive(Debug)]
enum Record {
    Entry(Entry),
    Vote(Vote),
    Committed(Option<LogId>),
    /// Entries after this log id (all, if none) are gone.
    Truncate(Option<LogId>),
    Purge(LogId),
}

fn put_log_id(out: &mut Vec<u8>, l: &Option<LogId>) {
    match l {
        None => out.push(0),
        Some(l) => {
            out.push(1);
            put_uvarint(out, l.leader_id.term);
            put_uvarint(out, l.index);
        }
    }
}

/// The body of an entry's record (`Record::Entry`), from a borrowed entry: appends encode
/// every entry they hold, and need not clone one to do so.
fn put_entry(b: &mut Vec<u8>, e: &Entry) {
    b.push(tag::ENTRY);
    put_uvarint(b, e.log_id.leader_id.term);
    put_uvarint(b, e.log_id.index);
    match &e.payload {
        EntryPayload::Blank => b.push(tag::BLANK),
        EntryPayload::Normal(p) => {
            b.push(tag::NORMAL);
            put_bytes(b, &p.0);
        }
        EntryPayload::Membership(m) => {
            b.push(tag::MEMBERSHIP);
            put_bytes(b, &codec::membership(m).encode_to_vec());
        }
    }
}

/// At least the bytes a record writes besides an entry's payload (frame, tags, varints):
/// with it a batch's buffer is sized once. Grown by doubling, a batch of 1 KiB entries was
/// copied about ten times over (1.5% of a leader's CPU in a put run).
const RECORD_OVERHEAD: usize = FRAME_LEN + 40;

/// A normal entry's payload bytes (0 for the others).
fn payload_len(e: &Entry) -> usize {
    match &e.payload {
        EntryPayload::Normal(p) => p.0.len(),
        EntryPayload::Blank | EntryPayload::Membership(_) => 0,
    }
}

impl Record {
    /// At least the bytes [`Record::encode`] writes (see [`RECORD_OVERHEAD`]).
    fn size_hint(&self) -> usize {
        RECORD_OVERHEAD + if let Record::Entry(e) = self { payload_len(e) } else { 0 }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let mut f = Framer::new(out);
        let b = f.body();
        match self {
            Record::Entry(e) => put_entry(b, e),
            Record::Vote(v) => {
                b.push(tag::VOTE);
                put_uvarint(b, v.leader_id.term);
                put_uvarint(b, v.leader_id.voted_for);
                b.push(u8::from(v.committed));
            }
            Record::Committed(l) => {
                b.push(tag::COMMITTED);
                put_log_id(b, l);
            }
            Record::Truncate(l) => {
                b.push(tag::TRUNCATE);
                put_log_id(b, l);
            }
            Record::Purge(l) => {
                b.push(tag::PURGE);
                put_log_id(b, &Some(*l));
            }
        }
        f.finish();
    }

    fn decode(body: &Bytes) -> Option<Record> {
        let mut r = Decoder::new(body, 1);
        let rec = match *body.first()? {
            tag::ENTRY => {
                let log_id = LogId::new(CommittedLeaderId::new(r.uvarint()?), r.uvarint()?);
                let payload = match r.byte()? {
                    tag::BLANK => EntryPayload::Blank,
                    tag::NORMAL => EntryPayload::Normal(Proposal(r.bytes()?)),
                    tag::MEMBERSHIP => {
                        let m = pb::Membership::decode(r.bytes()?).ok()?;
                        EntryPayload::Membership(codec::from_membership(&Some(m)).ok()?)
                    }
                    _ => return None,
                };
                Record::Entry(Entry { log_id, payload })
            }
            tag::VOTE => {
                let (term, node, committed) = (r.uvarint()?, r.uvarint()?, r.byte()? == 1);
                Record::Vote(if committed {
                    Vote::new_committed(term, node)
                } else {
                    Vote::new(term, node)
                })
            }
            tag::COMMITTED => Record::Committed(get_log_id(&mut r)?),
            tag::TRUNCATE => Record::Truncate(get_log_id(&mut r)?),
            tag::PURGE => Record::Purge(get_log_id(&mut r)??),
            _ => return None,
        };
        r.done().then_some(rec)
    }
}

fn get_log_id(r: &mut Decoder<'_>) -> Option<Option<LogId>> {
    Some(match r.byte()? {
        0 => None,
        _ => Some(LogId::new(CommittedLeaderId::new(r.uvarint()?), r.uvarint()?)),
    })
}

/// Where an entry's record is: enough to give its log id without the entry, and to read it
/// back. Kept for every entry, since an entry held now is dropped later.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Loc {
    term: u64,
    /// The segment (see [`Disk::paths`] for its file).
    seq: u64,
    /// Where the record's frame starts in the segment.
    offset: u64,
    /// The record's length, frame included.
    len: u32,
}

/// The log as openraft sees it. With a disk, only the newest entries are held (see the module
/// doc): the replication of followers that keep up, and the apply, ask for no others.
#[derive(Debug, Default)]
struct Mem {
    /// The newest purged log id: entries up to it are gone.
    purged: Option<LogId>,
    /// With a disk: where entry `purged.index + 1 + i` is, for each entry, consecutive (empty
    /// without a disk). What gives the log ids of the entries not held, and reads them back.
    locs: VecDeque<Loc>,
    /// The newest entries, consecutive, ending at the last one: all of them without a disk, at
    /// most `keep` with one (the others are *spilled*: only their `locs` are held).
    entries: VecDeque<Entry>,
    /// How many entries to hold, with a disk; `None` (no disk) holds all.
    keep: Option<usize>,
    vote: Option<Vote>,
    committed: Option<LogId>,
}

/// What [`Mem::range`] found: the locations of the spilled entries `start ..`, then the held
/// entries that follow them.
#[derive(Debug)]
struct Plan {
    start: u64,
    spilled: Vec<Loc>,
    held: Vec<Entry>,
}

impl Mem {
    /// The index the first entry has (or would have).
    fn first_index(&self) -> u64 {
        self.purged.map_or(0, |p| p.index + 1)
    }

    /// How many entries the log has from the purge point on.
    fn len(&self) -> usize {
        if self.keep.is_some() { self.locs.len() } else { self.entries.len() }
    }

    /// How many of them, from the first on, are not held.
    fn spilled(&self) -> usize {
        self.len() - self.entries.len()
    }

    fn last_log_id(&self) -> Option<LogId> {
        match self.entries.back() {
            Some(e) => Some(e.log_id),
            None => self
                .locs
                .back()
                .map(|l| log_id(l.term, self.first_index() + self.locs.len() as u64 - 1)),
        }
        .or(self.purged)
    }

    fn truncate_after(&mut self, after: Option<LogId>) {
        let n = after.map_or(0, |l| l.index + 1).saturating_sub(self.first_index()) as usize;
        let spilled = self.spilled();
        self.locs.truncate(n);
        self.entries.truncate(n.saturating_sub(spilled));
    }

    /// Whether an entry with `id` read or appended next belongs in the log, making room for
    /// it: an entry rewritten after a conflict ends the log before it.
    fn accept(&mut self, id: LogId) -> io::Result<bool> {
        if self.purged.is_some_and(|p| id.index <= p.index) {
            // Covered by a snapshot: replaying an older segment.
            return Ok(false);
        }
        let want = self.last_log_id().map_or(0, |l| l.index + 1);
        if id.index < want {
            // An entry rewritten after a conflict: what followed it is gone too.
            self.truncate_after(id.index.checked_sub(1).map(|i| self.log_id_at(i)));
        } else if id.index > want {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("raft log: entry {} after {want}: a hole in the log", id.index),
            ));
        }
        Ok(id.index >= self.first_index())
    }

    /// Appends `e`, whose record is at `loc` with a disk (`None` without), and drops the oldest
    /// held entry if more than `keep` are held: its record is written already.
    fn push(&mut self, e: Entry, loc: Option<Loc>) -> io::Result<()> {
        debug_assert_eq!(loc.is_some(), self.keep.is_some());
        if !self.accept(e.log_id)? {
            return Ok(());
        }
        self.locs.extend(loc);
        self.entries.push_back(e);
        if self.keep.is_some_and(|k| self.entries.len() > k) {
            self.entries.pop_front();
        }
        Ok(())
    }

    /// Stops holding the entries up to `upto` (their records stay where `locs` says), with a
    /// disk: nobody asks for them again unless a member falls behind.
    fn release(&mut self, upto: u64) {
        if self.keep.is_none() {
            return;
        }
        while self.entries.front().is_some_and(|e| e.log_id.index <= upto) {
            self.entries.pop_front();
        }
    }

    /// Appends an entry without holding it (replaying the segments, before any is held).
    fn push_spilled(&mut self, id: LogId, loc: Loc) -> io::Result<()> {
        debug_assert!(self.entries.is_empty() && self.keep.is_some());
        if self.accept(id)? {
            self.locs.push_back(loc);
        }
        Ok(())
    }

    /// The log id of entry `index`, at most the last one's.
    fn log_id_at(&self, index: u64) -> LogId {
        let Some(i) = index.checked_sub(self.first_index()) else {
            return self.purged.expect("an index below the first entry is purged");
        };
        match (i as usize).checked_sub(self.spilled()) {
            Some(h) => self.entries[h].log_id,
            None => log_id(self.locs[i as usize].term, index),
        }
    }

    fn purge(&mut self, upto: LogId) {
        let n = (upto.index + 1).saturating_sub(self.first_index()).min(self.len() as u64) as usize;
        let spilled = self.spilled();
        self.locs.drain(..n.min(self.locs.len()));
        self.entries.drain(..n.saturating_sub(spilled));
        self.purged = Some(upto);
    }

    /// The entries of `range` the log has: held ones cloned, spilled ones to read back (off
    /// the lock) from where their records are.
    fn range(&self, range: impl RangeBounds<u64>) -> Plan {
        let first = self.first_index();
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s + 1,
            Bound::Unbounded => first,
        }
        .max(first);
        let end = match range.end_bound() {
            Bound::Included(&e) => e + 1,
            Bound::Excluded(&e) => e,
            Bound::Unbounded => u64::MAX,
        }
        .min(first + self.len() as u64);
        let mut plan = Plan { start, spilled: Vec::new(), held: Vec::new() };
        if start >= end {
            return plan;
        }
        let held_from = first + self.spilled() as u64;
        if start < held_from {
            let to = end.min(held_from);
            plan.spilled =
                self.locs.range((start - first) as usize..(to - first) as usize).copied().collect();
        }
        let from = start.max(held_from);
        if from < end {
            plan.held = self
                .entries
                .range((from - held_from) as usize..(end - held_from) as usize)
                .cloned()
                .collect();
        }
        plan
    }
}

fn log_id(term: u64, index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(term), index)
}

/// Reads back entries `start ..`, one per `locs`, from their records: one read per run of them
/// in a segment. `paths` names the segments' files by seq (`None`: deleted). A segment found
/// gone must be one whose entries were all purged since `locs` were taken (`first_index`
/// tells where the log starts now); as segments go oldest first, the entries read before it
/// are purged too and are dropped, so what is returned ends the run and starts where the log
/// still had entries. Anything else that fails (a segment gone that should be there, a short
/// read, a record that is not the entry expected) is an error.
fn read_back(
    start: u64,
    locs: &[Loc],
    paths: impl FnOnce(&[u64]) -> Vec<Option<PathBuf>>,
    first_index: impl Fn() -> u64,
) -> io::Result<Vec<Entry>> {
    let mut runs: Vec<(u64, Range<usize>)> = Vec::new();
    for (i, l) in locs.iter().enumerate() {
        match runs.last_mut() {
            Some((seq, r)) if *seq == l.seq => r.end = i + 1,
            _ => runs.push((l.seq, i..i + 1)),
        }
    }
    let paths = paths(&runs.iter().map(|r| r.0).collect::<Vec<_>>());
    let mut out = Vec::with_capacity(locs.len());
    for ((seq, r), path) in runs.into_iter().zip(paths) {
        let first = start + r.start as u64;
        let read = match &path {
            Some(path) => read_run(path, first, &locs[r.clone()])?,
            None => None,
        };
        match read {
            Some(entries) => out.extend(entries),
            None => {
                let last = start + r.end as u64 - 1;
                let now = first_index();
                if last >= now {
                    return Err(io::Error::new(
                        io::ErrorKind::NotFound,
                        format!(
                            "raft log: segment {seq} (entries {first}..={last}) is gone, but the log starts at {now}"
                        ),
                    ));
                }
                out.clear();
            }
        }
    }
    Ok(out)
}

/// Reads entries `first ..`, one per `locs` (all in the segment at `path`, in order), with
/// one read from the first record to the end of the last; `None` if the file is gone.
fn read_run(path: &Path, first: u64, locs: &[Loc]) -> io::Result<Option<Vec<Entry>>> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let bad = |offset: u64, what: String| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("raft log {} at offset {offset}: {what}", path.display()),
        )
    };
    let (Some(a), Some(z)) = (locs.first(), locs.last()) else { return Ok(Some(Vec::new())) };
    let base = a.offset;
    let mut buf = vec![0; (z.offset + u64::from(z.len)).saturating_sub(base) as usize];
    file.read_exact_at(&mut buf, base).map_err(|e| {
        io::Error::new(e.kind(), format!("raft log {} at offset {base}: {e}", path.display()))
    })?;
    let mut out = Vec::with_capacity(locs.len());
    for (index, l) in (first..).zip(locs) {
        let at = l.offset.wrapping_sub(base) as usize;
        let rec = buf
            .get(at..at.saturating_add(l.len as usize))
            .ok_or_else(|| bad(l.offset, "past the run read".into()))?;
        // Each body gets its own buffer (as when the log is loaded): the store may keep slices
        // of an entry's payload, which must not pin the whole run.
        match Frames::new(rec, l.offset).next(Record::decode)? {
            Frame::Good(Record::Entry(e)) if e.log_id == log_id(l.term, index) => out.push(e),
            Frame::Good(Record::Entry(e)) => {
                let want = log_id(l.term, index);
                return Err(bad(l.offset, format!("expected entry {want}, found {}", e.log_id)));
            }
            Frame::Good(_) => {
                return Err(bad(l.offset, format!("expected entry {index}, found another record")));
            }
            Frame::Bad(b) => return Err(bad(l.offset, format!("entry {index}: {b}"))),
            Frame::Short | Frame::End => {
                return Err(bad(l.offset, format!("entry {index} cut short")));
            }
        }
    }
    Ok(Some(out))
}

/// The log's files and how writes reach them.
#[derive(Debug)]
struct Disk {
    dir: PathBuf,
    mode: Mode,
    segment_bytes: u64,
    /// The segment being written and what else the writer needs; appends come from openraft's
    /// log task one at a time, the syncer takes the lock only to sync, and reads of spilled
    /// entries only to find their segments' files.
    file: Mutex<Segment>,
    /// fsync mode: callbacks waiting for the next fdatasync, and whether the syncer should
    /// stop; buffered mode: whether anything was written since the last background sync.
    /// `wake` wakes the syncer: an fsync waiter, the first write since a sync, a stop.
    sync: Mutex<SyncQueue>,
    wake: Condvar,
}

#[derive(Debug)]
struct Segment {
    file: File,
    path: PathBuf,
    seq: u64,
    size: u64,
    /// Segments before this one, oldest first: (path, seq, first index it may hold).
    older: Vec<(PathBuf, u64, u64)>,
    first: u64,
}

#[derive(Default)]
struct SyncQueue {
    waiting: Vec<IOFlushed<TypeConfig>>,
    dirty: bool,
    stop: bool,
}

impl Debug for SyncQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyncQueue").field("waiting", &self.waiting.len()).finish()
    }
}

fn segment_name(seq: u64, first: u64) -> String {
    format!("{seq:016x}-{first:016x}.log")
}

fn file_header() -> [u8; FILE_HEADER_LEN as usize] {
    let mut h = [0u8; FILE_HEADER_LEN as usize];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h
}

/// A Raft log of `--wal-mode` in `dir` (`None` for mode none).
#[derive(Clone, Debug)]
pub struct LogStore {
    /// Shared by openraft's log task (writes) and the replication tasks and the apply (reads);
    /// held briefly: never across an await, nor while spilled entries are read back.
    mem: Arc<Mutex<Mem>>,
    disk: Option<Arc<Disk>>,
    /// Bytes of entries appended since start: what snapshots are scheduled by.
    appended: Arc<std::sync::atomic::AtomicU64>,
}

/// Options for the log's files.
#[derive(Clone, Debug)]
pub struct LogOptions {
    pub dir: PathBuf,
    pub mode: Mode,
    pub segment_bytes: u64,
    pub flush_interval: Duration,
    /// How many of the newest entries to hold in memory; older ones are read back from the
    /// segments when asked for.
    pub keep_in_memory: u64,
}

impl LogStore {
    /// An empty log kept in memory only.
    pub fn in_memory() -> Self {
        Self { mem: Arc::new(Mutex::new(Mem::default())), disk: None, appended: Default::default() }
    }

    /// Opens (or creates) the log in `opts.dir`, reading back what it holds; a torn last
    /// record is cut off, corruption elsewhere refuses to start.
    pub fn open(opts: &LogOptions) -> io::Result<Self> {
        if opts.mode == Mode::None {
            return Ok(Self::in_memory());
        }
        fs::create_dir_all(&opts.dir)?;
        let mut segs = list(&opts.dir)?;
        let keep = usize::try_from(opts.keep_in_memory).unwrap_or(usize::MAX);
        let mem = load(&opts.dir, &segs, true, keep)?;
        if segs.last().is_some_and(|s| !s.0.exists()) {
            segs.pop();
        }
        let next = mem.last_log_id().map_or(0, |l| l.index + 1);
        // Every segment found stays known: entries are read back from them, and they are
        // deleted once purged.
        let seq = segs.last().map_or(1, |s| s.1 + 1);
        let seg = new_segment(&opts.dir, seq, next, segs, &mem)?;
        let disk = Arc::new(Disk {
            dir: opts.dir.clone(),
            mode: opts.mode,
            segment_bytes: opts.segment_bytes.max(4096),
            file: Mutex::new(seg),
            sync: Mutex::new(SyncQueue::default()),
            wake: Condvar::new(),
        });
        let me = disk.clone();
        let interval = opts.flush_interval;
        std::thread::Builder::new()
            .name("raft-log-sync".into())
            .spawn(move || me.run_syncer(interval))?;
        Ok(Self { mem: Arc::new(Mutex::new(mem)), disk: Some(disk), appended: Default::default() })
    }

    /// Bytes of entries appended since start.
    pub fn appended_bytes(&self) -> u64 {
        self.appended.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Stops the syncer after a last sync (shutdown).
    pub fn close(&self) {
        if let Some(d) = &self.disk {
            d.sync.lock().stop = true;
            d.wake.notify_all();
            let _ = d.file.lock().file.sync_data();
        }
    }

    /// The vote and the last log id, for a member deciding at start whether it holds a
    /// cluster's state.
    pub fn is_pristine(&self) -> bool {
        let m = self.mem.lock();
        m.vote.is_none() && m.last_log_id().is_none()
    }

    /// Stops holding entries up to index `upto` in memory, which every member has and this
    /// one has applied (see `RaftNode`'s metrics watch): the store holds their data, so holding
    /// them too would keep the data twice until the next snapshot. A member that falls behind
    /// later gets them read back from the segments. Without a disk every entry stays held.
    pub fn release(&self, upto: u64) {
        if self.disk.is_some() {
            self.mem.lock().release(upto);
        }
    }

    /// Reads back the spilled entries `start ..` at `locs` (see [`read_back`]).
    fn read_spilled(&self, start: u64, locs: &[Loc]) -> io::Result<Vec<Entry>> {
        let d = self.disk.as_ref().expect("only a log with a disk spills entries");
        read_back(start, locs, |seqs| d.paths(seqs), || self.mem.lock().first_index())
    }

    /// How many entries are held in memory.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.mem.lock().entries.len()
    }

    /// Writes records; `sync` makes them durable before returning (votes), whatever the mode.
    fn write(&self, recs: &[Record], sync: bool) -> io::Result<()> {
        let Some(d) = &self.disk else { return Ok(()) };
        let mut buf = Vec::with_capacity(recs.iter().map(Record::size_hint).sum());
        for r in recs {
            r.encode(&mut buf);
        }
        let mut seg = d.file.lock();
        seg.file.write_all(&buf)?;
        seg.size += buf.len() as u64;
        if sync {
            seg.file.sync_data()?;
        } else if d.mode == Mode::Buffered {
            drop(seg);
            d.written();
        }
        Ok(())
    }

    /// Starts a new segment once the current one is full; called between appends.
    fn maybe_rotate(&self) -> io::Result<()> {
        let Some(d) = &self.disk else { return Ok(()) };
        let mut seg = d.file.lock();
        if seg.size < d.segment_bytes {
            return Ok(());
        }
        seg.file.sync_data()?;
        let mem = self.mem.lock();
        let next = mem.last_log_id().map_or(0, |l| l.index + 1);
        let mut older = std::mem::take(&mut seg.older);
        older.push((seg.path.clone(), seg.seq, seg.first));
        *seg = new_segment(&d.dir, seg.seq + 1, next, older, &mem)?;
        Ok(())
    }

    /// Deletes segments whose entries are all purged.
    fn delete_purged(&self, purged: u64) -> io::Result<()> {
        let Some(d) = &self.disk else { return Ok(()) };
        let mut seg = d.file.lock();
        let current_first = seg.first;
        let mut firsts: Vec<u64> = seg.older.iter().map(|o| o.2).collect();
        firsts.push(current_first);
        let mut keep = Vec::new();
        let mut deleted = false;
        for (i, (path, seq, first)) in std::mem::take(&mut seg.older).into_iter().enumerate() {
            // Entries of segment i are below the next segment's first index (a rewrite after a
            // conflict only lowers what later segments hold).
            if firsts[i + 1].saturating_sub(1) <= purged && (keep.is_empty()) {
                fs::remove_file(&path)?;
                deleted = true;
            } else {
                keep.push((path, seq, first));
            }
        }
        seg.older = keep;
        if deleted {
            sync_dir(&d.dir)?;
        }
        Ok(())
    }
}

/// The segments in `dir`, oldest first: (path, seq, first index).
fn list(dir: &Path) -> io::Result<Vec<(PathBuf, u64, u64)>> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name();
        let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".log")) else { continue };
        let Some((seq, first)) = stem.split_once('-') else { continue };
        if let (Ok(seq), Ok(first)) = (u64::from_str_radix(seq, 16), u64::from_str_radix(first, 16))
        {
            out.push((e.path(), seq, first));
        }
    }
    out.sort_by_key(|s| s.1);
    Ok(out)
}

/// Reads the log of segments `segs` (see [`list`]) in `dir`, holding its newest `keep`
/// entries. A torn last record ends it, and is cut off if `repair` (else the files are left as
/// they are); corruption elsewhere is an error.
fn load(dir: &Path, segs: &[(PathBuf, u64, u64)], repair: bool, keep: usize) -> io::Result<Mem> {
    /// A record as replayed: an entry by its log id and location only, so that no more than
    /// one segment's payloads are in memory at once.
    enum Replay {
        Entry(LogId, Loc),
        Other(Record),
    }
    let mut mem = Mem { keep: Some(keep), ..Mem::default() };
    let n = segs.len();
    let mut reads = Vec::with_capacity(n);
    for (i, (path, seq, _)) in segs.iter().enumerate() {
        let data = bytes::Bytes::from(fs::read(path)?);
        // Copied bodies: what the log keeps of a record must not keep the whole file.
        let read = segment::parse(&data, false, MAGIC, VERSION, Record::decode);
        match &read.end {
            End::Clean => {}
            End::Torn { offset, reason } if i + 1 == n => {
                if !repair {
                    tracing::warn!(file = %path.display(), offset, reason, "raft log: torn tail ignored");
                } else if *offset < FILE_HEADER_LEN {
                    tracing::warn!(file = %path.display(), offset, reason, "raft log: torn tail cut off");
                    // Cut short while being created: it holds nothing.
                    fs::remove_file(path)?;
                    sync_dir(dir)?;
                } else {
                    tracing::warn!(file = %path.display(), offset, reason, "raft log: torn tail cut off");
                    segment::truncate(path, *offset)?;
                }
            }
            End::Torn { offset, reason } | End::Corrupt { offset, reason, .. } => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("raft log {} at offset {offset}: {reason}", path.display()),
                ));
            }
        }
        let replay = read.records.into_iter().map(|(offset, rec)| match rec {
            Record::Entry(e) => {
                let at = offset as usize;
                let body = u32::from_le_bytes(data[at..at + 4].try_into().expect("4 bytes"));
                // A good record's body is at most `MAX_BODY`: its length fits.
                let len = body + FRAME_LEN as u32;
                let loc = Loc { term: e.log_id.leader_id.term, seq: *seq, offset, len };
                Replay::Entry(e.log_id, loc)
            }
            r => Replay::Other(r),
        });
        reads.push(replay.collect::<Vec<_>>());
    }
    // The purge point first: the segments of the entries before it may be deleted already,
    // and what remains starts past it.
    let purged = reads
        .iter()
        .flatten()
        .filter_map(|r| if let Replay::Other(Record::Purge(p)) = r { Some(*p) } else { None })
        .max();
    if let Some(p) = purged {
        mem.purge(p);
    }
    for rec in reads.into_iter().flatten() {
        match rec {
            Replay::Entry(id, loc) => mem.push_spilled(id, loc)?,
            Replay::Other(Record::Vote(v)) => mem.vote = Some(v),
            Replay::Other(Record::Committed(c)) => mem.committed = c,
            Replay::Other(Record::Truncate(after)) => mem.truncate_after(after),
            Replay::Other(Record::Entry(_) | Record::Purge(_)) => {}
        }
    }
    // The newest entries, read back: their segments were just read, so from the page cache.
    let from = mem.len() - mem.len().min(keep);
    let locs: Vec<Loc> = mem.locs.range(from..).copied().collect();
    let paths = |seqs: &[u64]| {
        let path = |seq| segs.iter().find(|s| s.1 == seq).map(|s| s.0.clone());
        seqs.iter().map(|&seq| path(seq)).collect()
    };
    // Nothing is purged meanwhile: a segment gone is an error.
    let entries = read_back(mem.first_index() + from as u64, &locs, paths, || 0)?;
    mem.entries = entries.into();
    Ok(mem)
}

/// What a member's log holds, as a restart would find it.
#[derive(Debug, Default)]
pub struct LocalLog {
    pub vote: Option<Vote>,
    /// The newest committed log id this member knew (openraft saves it before applying up to
    /// it, so nothing this member applied or answered is past it).
    pub committed: Option<LogId>,
    /// Entries after the purge point, in order.
    pub entries: Vec<Entry>,
}

/// Reads the log in `dir` without changing it (a member forced into a new cluster, whose log
/// is then replaced; see `restore`). A missing directory is an empty log.
pub fn read_local(dir: &Path) -> io::Result<LocalLog> {
    if !dir.exists() {
        return Ok(LocalLog::default());
    }
    let mem = load(dir, &list(dir)?, false, usize::MAX)?;
    Ok(LocalLog { vote: mem.vote, committed: mem.committed, entries: mem.entries.into() })
}

/// Creates segment `seq`, restating the vote, the purge point and the committed log id so
/// that older segments can go once purged.
fn new_segment(
    dir: &Path,
    seq: u64,
    first: u64,
    older: Vec<(PathBuf, u64, u64)>,
    mem: &Mem,
) -> io::Result<Segment> {
    let path = dir.join(segment_name(seq, first));
    let mut buf = file_header().to_vec();
    if let Some(v) = mem.vote {
        Record::Vote(v).encode(&mut buf);
    }
    if let Some(p) = mem.purged {
        Record::Purge(p).encode(&mut buf);
    }
    Record::Committed(mem.committed).encode(&mut buf);
    let mut file = OpenOptions::new().create_new(true).append(true).open(&path)?;
    file.write_all(&buf)?;
    file.sync_all()?;
    sync_dir(dir)?;
    Ok(Segment { file, path, seq, size: buf.len() as u64, older, first })
}

impl Disk {
    /// The files of segments `seqs` (`None`: deleted).
    fn paths(&self, seqs: &[u64]) -> Vec<Option<PathBuf>> {
        let seg = self.file.lock();
        let path = |seq| match seq == seg.seq {
            true => Some(seg.path.clone()),
            false => seg.older.iter().find(|o| o.1 == seq).map(|o| o.0.clone()),
        };
        seqs.iter().map(|&seq| path(seq)).collect()
    }

    /// Buffered mode: something was written that the syncer is to sync within its interval
    /// (it sleeps while nothing is, so an idle member's log costs no wake-ups).
    fn written(&self) {
        let mut q = self.sync.lock();
        if !q.dirty {
            q.dirty = true;
            drop(q);
            self.wake.notify_one();
        }
    }

    /// fsync mode: syncs whenever appends wait, then tells openraft they are durable (all
    /// appends made before the sync started are in it). Buffered mode: syncs what was
    /// written `interval` after the first write since the last sync (so the writes of that
    /// interval share one sync).
    fn run_syncer(&self, interval: Duration) {
        loop {
            let waiting = {
                let mut q = self.sync.lock();
                if self.mode == Mode::Fsync {
                    while q.waiting.is_empty() && !q.stop {
                        self.wake.wait(&mut q);
                    }
                } else {
                    while !q.dirty && q.waiting.is_empty() && !q.stop {
                        self.wake.wait(&mut q);
                    }
                    if !q.stop {
                        self.wake.wait_for(&mut q, interval);
                    }
                }
                if q.stop && q.waiting.is_empty() {
                    return;
                }
                q.dirty = false;
                std::mem::take(&mut q.waiting)
            };
            // The file lock is held only to clone the handle: appends go on while we sync.
            let file = self.file.lock().file.try_clone();
            let result = file.and_then(|f| f.sync_data());
            if let Err(e) = &result {
                tracing::error!(error = %e, "raft log: fdatasync failed");
            }
            for cb in waiting {
                cb.io_completed(
                    result
                        .as_ref()
                        .map(|_| ())
                        .map_err(|e| io::Error::new(e.kind(), e.to_string())),
                );
            }
        }
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        let Plan { start, spilled, held } = self.mem.lock().range(range);
        if spilled.is_empty() {
            return Ok(held);
        }
        // A read may wait for the disk: not on one of the runtime's workers.
        let me = self.clone();
        let mut out = tokio::task::spawn_blocking(move || me.read_spilled(start, &spilled))
            .await
            .map_err(io::Error::other)??;
        out.extend(held);
        Ok(out)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        Ok(self.mem.lock().vote)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, io::Error> {
        let m = self.mem.lock();
        Ok(LogState { last_purged_log_id: m.purged, last_log_id: m.last_log_id() })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        // Durable before returning, in every mode that has a disk: a vote forgotten in a crash
        // could be given twice in one term.
        self.write(&[Record::Vote(*vote)], true)?;
        self.mem.lock().vote = Some(*vote);
        Ok(())
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        // Not synced: it only lets a restarted member re-apply up to it at once; a lost one is
        // learned again from the leader.
        self.write(&[Record::Committed(committed)], false)?;
        self.mem.lock().committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        Ok(self.mem.lock().committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: IOFlushed<TypeConfig>,
    ) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        let bytes: usize = entries.iter().map(|e| payload_len(e) + 16).sum();
        self.appended.fetch_add(bytes as u64, std::sync::atomic::Ordering::Relaxed);
        if let Some(d) = &self.disk {
            // Sized once (see `RECORD_OVERHEAD`).
            let payloads: usize = entries.iter().map(payload_len).sum();
            let mut buf = Vec::with_capacity(payloads + entries.len() * RECORD_OVERHEAD);
            // Where each record starts in `buf`, and its length.
            let mut spans = Vec::with_capacity(entries.len());
            for e in &entries {
                let at = buf.len();
                let mut f = Framer::new(&mut buf);
                put_entry(f.body(), e);
                f.finish();
                let len = u32::try_from(buf.len() - at).map_err(|_| {
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "raft log: an entry of 4 GiB or more",
                    )
                })?;
                spans.push((at as u64, len));
            }
            let (seq, base) = {
                let mut seg = d.file.lock();
                seg.file.write_all(&buf)?;
                let base = seg.size;
                seg.size += buf.len() as u64;
                (seg.seq, base)
            };
            {
                let mut mem = self.mem.lock();
                for (e, (at, len)) in entries.into_iter().zip(spans) {
                    let term = e.log_id.leader_id.term;
                    mem.push(e, Some(Loc { term, seq, offset: base + at, len }))?;
                }
            }
            match d.mode {
                Mode::Fsync => {
                    d.sync.lock().waiting.push(callback);
                    d.wake.notify_one();
                }
                _ => {
                    d.written();
                    callback.io_completed(Ok(()));
                }
            }
            self.maybe_rotate()?;
            return Ok(());
        }
        let mut mem = self.mem.lock();
        for e in entries {
            mem.push(e, None)?;
        }
        drop(mem);
        callback.io_completed(Ok(()));
        Ok(())
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), io::Error> {
        self.write(&[Record::Truncate(last_log_id)], false)?;
        self.mem.lock().truncate_after(last_log_id);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        // Durable before segments go: restart must know where the log now starts.
        self.write(&[Record::Purge(log_id)], true)?;
        self.mem.lock().purge(log_id);
        // Once per snapshot: from here on a member behind this index needs the snapshot.
        tracing::info!(index = log_id.index, "raft log: purged");
        self.delete_purged(log_id.index)
    }
}

#[cfg(test)]
#[path = "log_store_tests.rs"]
mod tests;
