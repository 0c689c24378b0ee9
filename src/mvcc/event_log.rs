//! The history by revision: every committed revision's events, in order, until compaction.
//!
//! Watchers that start in the past, or fell behind, replay from here; a replay costs the
//! revisions replayed, never a scan of keys. Revisions are contiguous (every committed revision
//! wrote something).
//!
//! The log keeps nothing per revision. Each partition logs which record each of its changes
//! wrote (12 bytes a change), and a read rebuilds the events of the revisions it returns from
//! the histories, where every version since the compaction is kept anyway. Keeping the events
//! themselves cost about 300 bytes per event besides the key and value: a third of the memory
//! of a Lease update. Only the compaction revision's own events are kept whole, since
//! compaction may drop a delete written at exactly that revision.
//!
//! The newest [`RECENT`] revisions are kept as published, besides: watchers that fell a little
//! behind (many at once, when a burst of writes outruns their streams) read those instead of
//! each rebuilding its own copy, and share the events, and their encoding, with the live path.
//! Watchers further behind share the blocks of revisions rebuilt last (see [`REBUILT`]), as
//! etcd's unsynced watchers share one read of its backend.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};

use super::event::{Event, RevisionEvents};
use super::partition::Partition;
use crate::keyspace::KeyRange;
use crate::revision::Revision;

#[derive(Debug)]
pub struct EventLog {
    /// Advanced by the publisher (one batch at a time, in revision order), read by catch-up and
    /// compaction; each holds it briefly. Never held while a partition lock is taken, so a read
    /// never waits for a writer's compare-and-apply.
    inner: RwLock<Inner>,
    /// The last blocks of revisions rebuilt from the partitions, newest last, at most
    /// [`REBUILT`] of them and [`REBUILT_BYTES`] of keys and values. Watchers that fell behind
    /// together ask for the same revisions one after another; 1,000 watchers each rebuilding
    /// its own copy of them cost more than delivering the events. A lock of its own, held only
    /// to look one up or to add one, so that a rebuild never waits for the publisher.
    rebuilt: Mutex<Blocks>,
    /// Revisions that left the recent ones, whose events the next writer frees
    /// ([`EventLog::reclaim`]): freeing them (their views' owners, most of them long out of
    /// the cache) was half of what the WAL writer spent per revision, in a section one thread
    /// passes at a time. A lock of its own: the publisher moves revisions in, a writer takes
    /// them all out; at most a batch of revisions waits here.
    expired: Mutex<Vec<(i64, RevisionEvents)>>,
    /// Whether `expired` holds anything: a writer reads it before taking the lock.
    has_expired: AtomicBool,
}

/// The blocks of rebuilt revisions kept for other readers.
#[derive(Debug)]
struct Blocks {
    /// Each block, with the bytes of keys and values its events hold.
    kept: VecDeque<(Rebuilt, usize)>,
    /// The bytes of all of them.
    bytes: usize,
    /// [`REBUILT`], but for tests of the reads rebuilt from the partitions.
    max: usize,
}

impl Blocks {
    fn new(max: usize) -> Self {
        Self { kept: VecDeque::new(), bytes: 0, max }
    }

    /// The block of `history` that holds revision `rev`, if one is kept.
    fn find(&self, history: u64, rev: i64) -> Option<Arc<[(i64, RevisionEvents)]>> {
        let ((_, r), _) = self
            .kept
            .iter()
            .find(|((h, r), _)| *h == history && r[0].0 <= rev && rev <= r[r.len() - 1].0)?;
        Some(r.clone())
    }

    /// Keeps `block`, which holds `bytes` (see [`event_bytes`]), forgetting the oldest ones
    /// beyond the bounds.
    fn keep(&mut self, block: Rebuilt, bytes: usize) {
        // Watchers that fell behind together rebuild the same block at the same time: one copy
        // is kept (a shorter one, cut at the newest revision then, does not count).
        let (history, revs) = &block;
        if self
            .kept
            .iter()
            .any(|((h, r), _)| h == history && r[0].0 == revs[0].0 && r.len() >= revs.len())
        {
            return;
        }
        self.kept.push_back((block, bytes));
        self.bytes += bytes;
        while self.kept.len() > self.max || (self.bytes > REBUILT_BYTES && self.kept.len() > 1) {
            let (_, b) = self.kept.pop_front().expect("not empty");
            self.bytes -= b;
        }
    }
}

/// The bytes of keys and values of a revision's events, as a read counts them against its
/// budget.
fn revision_bytes(events: &[Event]) -> usize {
    events.iter().map(|e| e.kv.key.len() + e.kv.value.len()).sum()
}

/// The bytes of keys and values an event holds (its own and its previous version's).
fn event_bytes(e: &Event) -> usize {
    let prev = e.prev_kv.as_ref().map_or(0, |p| p.key.len() + p.value.len());
    e.kv.key.len() + e.kv.value.len() + prev
}

/// A block of consecutive revisions as a rebuild returned them (never empty), and the history
/// they are of (`Inner::id`: a snapshot installed swaps in another).
type Rebuilt = (u64, Arc<[(i64, RevisionEvents)]>);

/// Tells histories apart (see [`Rebuilt`]).
static HISTORIES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The blocks of rebuilt revisions shared: with [`BLOCK`], the 65,536 revisions before the
/// recent ones. Watchers that fell behind read at different revisions, scattered over their
/// lag: 64 blocks, against the 40,000 revisions of a burst that 1,000 watchers fell behind,
/// found a third of them.
const REBUILT: usize = 256;

/// At most this much key and value in the shared blocks: most of it the store holds anyway,
/// but a block keeps versions compaction would free.
const REBUILT_BYTES: usize = 64 << 20;

/// Revisions per shared block (blocks start at revisions 1, 257, 513, ...).
pub(crate) const BLOCK: i64 = 256;

#[derive(Debug)]
struct Inner {
    /// This history's own number, from [`HISTORIES`].
    id: u64,
    /// The oldest revision held.
    first: i64,
    /// The newest revision published: every change at or below it is applied in its partition.
    last: i64,
    /// The compaction revision (0 before the first): watches may not start below it.
    compacted: i64,
    /// Every partition of the store, tracked as it is created and before it is written to, so
    /// that a read sees every partition a revision up to `last` wrote.
    partitions: Vec<Arc<Partition>>,
    /// The events of revision `compacted`, which the partitions' compaction may drop.
    at_compaction: Option<RevisionEvents>,
    /// The prefixes compacted on their own (`Store::compact_prefix`) and their revisions: a
    /// watch over one may not start below its revision.
    floors: Vec<(Bytes, i64)>,
    /// The newest revisions published, consecutive, at most `recent_max`.
    recent: VecDeque<(i64, RevisionEvents)>,
    /// [`RECENT`], but for tests of the reads rebuilt from the partitions.
    recent_max: usize,
}

/// The newest revisions kept as published (a few hundred KiB of events at most, whose keys and
/// values the store shares).
pub const RECENT: usize = 8192;

/// A read overtaken by a compaction of the partitions it was reading: try again.
struct Overtaken;

impl EventLog {
    /// An empty log whose next revision is `next`.
    pub fn new(next: i64) -> Self {
        Self {
            inner: RwLock::new(Inner {
                id: HISTORIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                first: next,
                last: next - 1,
                compacted: 0,
                partitions: Vec::new(),
                at_compaction: None,
                floors: Vec::new(),
                recent: VecDeque::new(),
                recent_max: RECENT,
            }),
            rebuilt: Mutex::new(Blocks::new(REBUILT)),
            expired: Mutex::new(Vec::new()),
            has_expired: AtomicBool::new(false),
        }
    }

    /// Reads events back from `partition` too (tracking it twice is tracking it once). Call it
    /// when the partition is created, before anything is written to it.
    pub fn track(&self, partition: Arc<Partition>) {
        let mut g = self.inner.write();
        if !g.partitions.iter().any(|p| Arc::ptr_eq(p, &partition)) {
            g.partitions.push(partition);
        }
    }

    /// Every revision up to `rev` is applied in the partitions and may be read (the publisher,
    /// in revision order; recovery, once the partitions are rebuilt).
    pub fn published_through(&self, rev: i64) {
        let mut g = self.inner.write();
        g.last = g.last.max(rev);
    }

    /// Publishes a batch of consecutive revisions, the next ones (the publisher, in revision
    /// order): as [`published_through`](Self::published_through), keeping their events among
    /// the recent ones.
    pub fn publish(&self, batch: &[(i64, RevisionEvents)]) {
        let Some(&(last, _)) = batch.last() else { return };
        let mut g = self.inner.write();
        if g.recent.back().is_some_and(|(r, _)| *r + 1 != batch[0].0) {
            g.recent.clear();
        }
        let skip = batch.len().saturating_sub(g.recent_max);
        g.recent.extend(batch[skip..].iter().cloned());
        let over = g.recent.len().saturating_sub(g.recent_max);
        if over > 0 {
            self.expired.lock().extend(g.recent.drain(..over));
            self.has_expired.store(true, Ordering::Release);
        }
        g.last = g.last.max(last);
    }

    /// Frees the events of revisions that left the recent ones (see [`EventLog::expired`]).
    /// Writers call it, in parallel, outside every lock but this log's own for a moment.
    pub fn reclaim(&self) {
        if !self.has_expired.load(Ordering::Acquire) {
            return;
        }
        let gone = {
            let mut ex = self.expired.lock();
            self.has_expired.store(false, Ordering::Release);
            std::mem::take(&mut *ex)
        };
        drop(gone);
    }

    /// Keeps at most `recent` revisions as published and `rebuilt` blocks of rebuilt ones
    /// from now on (tests: 0 and 0 rebuild every read from the partitions).
    #[cfg(test)]
    pub(crate) fn keep(&self, recent: usize, rebuilt: usize) {
        let mut g = self.inner.write();
        g.recent_max = recent;
        g.recent.clear();
        *self.rebuilt.lock() = Blocks::new(rebuilt);
    }

    /// Forgets revisions below `rev` (compaction at `rev` keeps `rev` itself: a watch may start
    /// at the compaction revision). Call it before the partitions compact: it keeps revision
    /// `rev`'s events, which they may drop.
    pub fn compact(&self, rev: i64) {
        let parts = self.inner.read().partitions.clone();
        let mut evs = Vec::new();
        for p in &parts {
            p.state.read().events(rev, rev, usize::MAX, &mut evs);
        }
        evs.sort_unstable_by_key(|(r, _)| *r);
        let kept: RevisionEvents = evs.into_iter().map(|(_, e)| e).collect();
        let mut g = self.inner.write();
        if rev <= g.compacted {
            return;
        }
        g.compacted = rev;
        g.first = g.first.max(rev);
        g.at_compaction = Some(kept);
    }

    /// Records that the history under `prefix` was compacted at `rev` on its own: before the
    /// partitions under it free anything.
    pub fn set_floor(&self, prefix: &Bytes, rev: i64) {
        let mut g = self.inner.write();
        match g.floors.iter_mut().find(|(p, _)| p == prefix) {
            Some(f) => f.1 = f.1.max(rev),
            None => g.floors.push((prefix.clone(), rev)),
        }
    }

    /// The revision a watch over `range` may not start below for the prefixes it meets that
    /// were compacted on their own (0 if none). The events it is handed below that revision
    /// may lack theirs: a watcher reads it after each read of the log, and is compacted if
    /// it started below.
    pub fn floor_for(&self, range: &KeyRange) -> i64 {
        let g = self.inner.read();
        g.floors.iter().filter(|(p, _)| range.meets_prefix(p)).map(|&(_, r)| r).max().unwrap_or(0)
    }

    /// Up to `max_revs` revisions from `from`, stopping before `to` is passed or when about
    /// `max_bytes` of values were gathered (always at least one revision if any is available;
    /// fewer if a compaction overtakes the read, which the caller's next read reports).
    /// `Err(compaction revision)` when `from` was compacted away.
    pub fn read(
        &self,
        from: i64,
        to: i64,
        max_revs: usize,
        max_bytes: usize,
    ) -> Result<Vec<(i64, RevisionEvents)>, i64> {
        let mut out = self.read_part(from, to, max_revs, max_bytes)?;
        let mut bytes: usize = out.iter().map(|(_, evs)| revision_bytes(evs)).sum();
        // A part ends where a shared block ends: read on into the next one.
        while let Some(&(last, _)) = out.last()
            && out.len() < max_revs
            && bytes < max_bytes
            && last < to
        {
            match self.read_part(last + 1, to, max_revs - out.len(), max_bytes - bytes) {
                Ok(more) if !more.is_empty() => {
                    bytes += more.iter().map(|(_, evs)| revision_bytes(evs)).sum::<usize>();
                    out.extend(more);
                }
                _ => break,
            }
        }
        Ok(out)
    }

    /// As [`read`](Self::read), but ending where a shared block ends.
    fn read_part(
        &self,
        from: i64,
        to: i64,
        max_revs: usize,
        max_bytes: usize,
    ) -> Result<Vec<(i64, RevisionEvents)>, i64> {
        loop {
            let g = self.inner.read();
            if from < g.compacted {
                return Err(g.compacted);
            }
            let start = from.max(g.first);
            let revs = i64::try_from(max_revs).unwrap_or(i64::MAX);
            let end = to.min(g.last).min(start.saturating_add(revs).saturating_sub(1));
            if let Some(&(first_recent, _)) = g.recent.front()
                && first_recent <= start
            {
                let skip = (start - first_recent) as usize;
                return Ok(Self::gather(g.recent.iter().skip(skip), end, max_bytes));
            }
            if start > end {
                return Ok(Vec::new());
            }
            // One look at the shared blocks (the events of a revision never change: a block
            // rebuilt before a compaction still holds the compaction revision's events, as
            // `kept` does).
            let (sharing, shared) = {
                let blocks = self.rebuilt.lock();
                (blocks.max > 0, blocks.find(g.id, start))
            };
            if let Some(r) = shared {
                let skip = (start - r[0].0) as usize;
                return Ok(Self::gather(r.iter().skip(skip), end, max_bytes));
            }
            // Shared blocks are cut on a fixed grid, whatever revision the reader that rebuilt
            // one started at, so that readers scattered over a block all find it.
            let (from_rev, to_rev, budget) = if sharing {
                let grid = start - (start - 1).rem_euclid(BLOCK);
                (grid.max(g.first), (grid + BLOCK - 1).min(g.last), usize::MAX)
            } else {
                (start, end, max_bytes)
            };
            let kept = g.at_compaction.clone().filter(|_| from_rev == g.compacted);
            let parts = g.partitions.clone();
            let history = g.id;
            drop(g);
            let Ok(out) = Self::rebuild(&parts, from_rev, to_rev, kept, budget) else { continue };
            if !sharing {
                return Ok(out);
            }
            let block: Arc<[(i64, RevisionEvents)]> = out.into();
            let skip = (start - from_rev) as usize;
            let revs = Self::gather(block.iter().skip(skip), end, max_bytes);
            let bytes = block.iter().flat_map(|(_, evs)| evs.iter()).map(event_bytes).sum();
            self.rebuilt.lock().keep((history, block), bytes);
            return Ok(revs);
        }
    }

    /// Revisions up to `end` of `revs` (consecutive, from the one asked for), as
    /// [`read`](Self::read) returns them.
    fn gather<'a>(
        revs: impl Iterator<Item = &'a (i64, RevisionEvents)>,
        end: i64,
        max_bytes: usize,
    ) -> Vec<(i64, RevisionEvents)> {
        let mut out = Vec::new();
        let mut bytes = 0;
        for (rev, events) in revs.take_while(|(r, _)| *r <= end) {
            if bytes >= max_bytes && !out.is_empty() {
                break;
            }
            bytes += revision_bytes(events);
            out.push((*rev, events.clone()));
        }
        out
    }

    /// Revisions `start..=end` rebuilt from the partitions (`kept`: revision `start`'s events,
    /// kept by compaction), as [`read`](Self::read) returns them.
    fn rebuild(
        parts: &[Arc<Partition>],
        start: i64,
        end: i64,
        kept: Option<RevisionEvents>,
        max_bytes: usize,
    ) -> Result<Vec<(i64, RevisionEvents)>, Overtaken> {
        if start > end {
            return Ok(Vec::new());
        }
        let from = if kept.is_some() { start + 1 } else { start };
        let mut evs: Vec<(Revision, Event)> = Vec::new();
        let mut cut = end;
        for p in parts {
            let st = p.state.read();
            let mut from = from;
            if st.compacted >= from {
                if st.floor <= st.compacted {
                    // Compacted since this read began: what it asks for may be gone, or may
                    // now be the compaction revision's kept events.
                    return Err(Overtaken);
                }
                // Under a prefix compacted on its own: its events from the floor on are all
                // here, and no watcher over it reads below the floor (`floor_for`).
                from = st.compacted + 1;
            }
            cut = cut.min(st.events(from, cut, max_bytes, &mut evs));
        }
        evs.sort_unstable_by_key(|(r, _)| *r);
        let mut evs = evs.into_iter().peekable();
        let mut out = Vec::new();
        let mut bytes = 0;
        for rev in start..=cut {
            if bytes >= max_bytes && !out.is_empty() {
                break;
            }
            let events: RevisionEvents = match &kept {
                Some(k) if rev == start => k.clone(),
                _ => {
                    let mut v = Vec::new();
                    while let Some((_, e)) = evs.next_if(|(r, _)| r.main == rev) {
                        v.push(e);
                    }
                    v.into()
                }
            };
            bytes += revision_bytes(&events);
            out.push((rev, events));
        }
        Ok(out)
    }

    /// Takes over `other`'s history (a snapshot installed into the store): the watch hub keeps
    /// reading from this log.
    pub fn replace_with(&self, other: &EventLog) {
        std::mem::swap(&mut *self.inner.write(), &mut *other.inner.write());
    }

    /// The compaction revision (0 before the first compaction).
    pub fn compacted(&self) -> i64 {
        self.inner.read().compacted
    }

    /// The oldest revision still held.
    pub fn first(&self) -> i64 {
        self.inner.read().first
    }
}

/// Told about every committed revision, in order (the watch hub implements it).
pub trait CommitObserver: Send + Sync + std::fmt::Debug {
    /// Called once per batch of consecutive revisions, after they entered the event log and
    /// before readers can see them.
    fn on_commit(&self, batch: &[(i64, RevisionEvents)]);
}
