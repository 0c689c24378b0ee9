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

use std::collections::VecDeque;
use std::sync::Arc;

use parking_lot::RwLock;

use super::event::{Event, RevisionEvents};
use super::partition::Partition;
use crate::revision::Revision;

#[derive(Debug)]
pub struct EventLog {
    /// Advanced by the publisher (one batch at a time, in revision order), read by catch-up and
    /// compaction; each holds it briefly. Never held while a partition lock is taken, so a read
    /// never waits for a writer's compare-and-apply.
    inner: RwLock<Inner>,
}

#[derive(Debug)]
struct Inner {
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
                first: next,
                last: next - 1,
                compacted: 0,
                partitions: Vec::new(),
                at_compaction: None,
                recent: VecDeque::new(),
                recent_max: RECENT,
            }),
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
        g.recent.drain(..over);
        g.last = g.last.max(last);
    }

    /// Keeps at most `n` recent revisions as published from now on (tests: 0 rebuilds every
    /// read from the partitions).
    #[cfg(test)]
    pub(crate) fn keep_recent(&self, n: usize) {
        let mut g = self.inner.write();
        g.recent_max = n;
        g.recent.clear();
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

    /// Up to `max_revs` revisions from `from`, stopping before `to` is passed or when about
    /// `max_bytes` of values were gathered (always at least one revision if any is available).
    /// `Err(compaction revision)` when `from` was compacted away.
    pub fn read(
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
                return Ok(Self::recent(&g.recent, start, end, max_bytes));
            }
            let kept = g.at_compaction.clone().filter(|_| start == g.compacted);
            let parts = g.partitions.clone();
            drop(g);
            if let Ok(out) = Self::rebuild(&parts, start, end, kept, max_bytes) {
                return Ok(out);
            }
        }
    }

    /// Revisions `start..=end` of the recent ones, which hold `start`, as
    /// [`read`](Self::read) returns them.
    fn recent(
        recent: &VecDeque<(i64, RevisionEvents)>,
        start: i64,
        end: i64,
        max_bytes: usize,
    ) -> Vec<(i64, RevisionEvents)> {
        let skip = (start - recent[0].0) as usize;
        let mut out = Vec::new();
        let mut bytes = 0;
        for (rev, events) in recent.iter().skip(skip).take_while(|(r, _)| *r <= end) {
            if bytes >= max_bytes && !out.is_empty() {
                break;
            }
            bytes += events.iter().map(|e| e.kv.key.len() + e.kv.value.len()).sum::<usize>();
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
            if st.compacted >= from {
                // Compacted since this read began: what it asks for may be gone, or may now be
                // the compaction revision's kept events.
                return Err(Overtaken);
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
            bytes += events.iter().map(|e| e.kv.key.len() + e.kv.value.len()).sum::<usize>();
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
