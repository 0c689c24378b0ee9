//! The history by revision: every committed revision's events, in order, until compaction.
//!
//! Watchers that start in the past, or fell behind, replay from here; a replay costs the
//! revisions replayed, never a scan of keys. Revisions are contiguous (every committed revision
//! wrote something).
//!
//! Two ways to hold them. By default the log keeps every revision's events itself (revision r
//! at index `r - first`): about 300 bytes per event besides the key and value they share with
//! the histories. Once the store hands it its partitions ([`EventLog::track`]), the log keeps
//! nothing per revision: a partition logs which record each of its changes wrote (12 bytes),
//! and a read rebuilds the events of the revisions it returns from the histories, where every
//! version since the compaction is kept anyway. Only the compaction revision's own events are
//! kept whole, since compaction may drop a delete written at exactly that revision.

use std::collections::VecDeque;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;

use parking_lot::RwLock;

use super::partition::Partition;
use super::request::KeyValue;
use crate::revision::Revision;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    Put,
    Delete,
}

/// One change, as watchers see it (etcd's `mvccpb.Event`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub kind: EventKind,
    /// For a put the new version; for a delete only `key` and `mod_revision` are set.
    pub kv: KeyValue,
    /// The version before this change; `None` for a create.
    pub prev_kv: Option<KeyValue>,
    /// The event's encoding for watchers, made by the first stream that sends it and reused by
    /// every other.
    pub wire: WireCache,
}

impl Event {
    pub fn new(kind: EventKind, kv: KeyValue, prev_kv: Option<KeyValue>) -> Self {
        Self { kind, kv, prev_kv, wire: WireCache::default() }
    }
}

/// Encoded forms of an event, without and with its previous version. Opaque bytes to the store:
/// the server fills them in its wire format.
#[derive(Clone, Debug, Default)]
pub struct WireCache {
    pub plain: OnceLock<Bytes>,
    pub with_prev: OnceLock<Bytes>,
}

/// A cache never makes two events differ.
impl PartialEq for WireCache {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for WireCache {}

/// The events of one revision, shared by the log and every watcher that gets them.
pub type RevisionEvents = Arc<[Event]>;

#[derive(Debug)]
pub struct EventLog {
    /// Appended by the publisher (one thread at a time, in revision order), read by catch-up;
    /// both hold it briefly. Never held while a partition lock is taken.
    inner: RwLock<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The oldest revision held.
    first: i64,
    /// The newest revision appended.
    last: i64,
    /// The compaction revision (0 before the first): watches may not start below it.
    compacted: i64,
    /// Every revision's events from `first`, when no partitions are tracked.
    revs: VecDeque<RevisionEvents>,
    /// The partitions events are read back from; empty: the log keeps them itself (`revs`).
    partitions: Vec<Arc<Partition>>,
    /// With tracked partitions: the events of revision `compacted`.
    at_compaction: Option<RevisionEvents>,
}

impl EventLog {
    /// An empty log whose next revision is `next`.
    pub fn new(next: i64) -> Self {
        Self {
            inner: RwLock::new(Inner {
                first: next,
                last: next - 1,
                compacted: 0,
                revs: VecDeque::new(),
                partitions: Vec::new(),
                at_compaction: None,
            }),
        }
    }

    /// Reads events back from `partition` instead of keeping them (tracking it twice is
    /// tracking it once). The store tracks every partition it has from the start, each as it is
    /// created (before it is written to), or none: a log that tracks partitions answers only
    /// with their events. The first is tracked before any revision is appended.
    pub fn track(&self, partition: Arc<Partition>) {
        let mut g = self.inner.write();
        let fresh = g.last < g.first;
        assert!(fresh || !g.partitions.is_empty(), "tracking starts before the first revision");
        if !g.partitions.iter().any(|p| Arc::ptr_eq(p, &partition)) {
            g.partitions.push(partition);
        }
    }

    pub fn append(&self, rev: i64, events: RevisionEvents) {
        let mut g = self.inner.write();
        debug_assert_eq!(rev, g.last + 1, "revisions are contiguous");
        g.last = rev;
        if g.partitions.is_empty() {
            g.revs.push_back(events);
        }
    }

    /// With tracked partitions: every revision up to `rev` is in them (recovery rebuilt
    /// them), as if appended.
    pub fn appended_through(&self, rev: i64) {
        let mut g = self.inner.write();
        assert!(!g.partitions.is_empty(), "only a log that tracks partitions skips revisions");
        g.last = g.last.max(rev);
    }

    /// Forgets revisions below `rev` (compaction at `rev` keeps `rev` itself: a watch may start
    /// at the compaction revision). With tracked partitions, call it before the partitions
    /// compact: it keeps revision `rev`'s events, which they may drop.
    pub fn compact(&self, rev: i64) {
        let parts = self.inner.read().partitions.clone();
        let kept = (!parts.is_empty()).then(|| {
            let mut evs = Vec::new();
            for p in &parts {
                p.state.read().events(rev, rev, usize::MAX, &mut evs);
            }
            evs.sort_unstable_by_key(|(r, _)| *r);
            evs.into_iter().map(|(_, e)| e).collect::<RevisionEvents>()
        });
        let mut g = self.inner.write();
        if rev <= g.compacted {
            return;
        }
        g.compacted = rev;
        while g.first < rev && !g.revs.is_empty() {
            g.revs.pop_front();
            g.first += 1;
        }
        // (With tracked partitions `revs` is always empty.)
        if g.revs.is_empty() && g.first < rev {
            g.first = rev;
        }
        g.at_compaction = kept;
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
        let g = self.inner.read();
        if from < g.compacted {
            return Err(g.compacted);
        }
        if !g.partitions.is_empty() {
            let start = from.max(g.first);
            let revs = i64::try_from(max_revs).unwrap_or(i64::MAX);
            let end = to.min(g.last).min(start.saturating_add(revs).saturating_sub(1));
            let kept = g.at_compaction.clone().filter(|_| start == g.compacted);
            let parts = g.partitions.clone();
            drop(g);
            return self.rebuild(&parts, start, end, kept, max_bytes);
        }
        let mut out = Vec::new();
        let mut bytes = 0;
        let start = (from - g.first).max(0) as usize;
        for (i, evs) in g.revs.iter().enumerate().skip(start) {
            let rev = g.first + i as i64;
            if rev > to || out.len() >= max_revs || (bytes >= max_bytes && !out.is_empty()) {
                break;
            }
            bytes += evs.iter().map(|e| e.kv.key.len() + e.kv.value.len()).sum::<usize>();
            out.push((rev, evs.clone()));
        }
        Ok(out)
    }

    /// Revisions `start..=end` rebuilt from the partitions (`kept`: revision `start`'s events,
    /// kept by compaction), as [`read`](Self::read) returns them.
    fn rebuild(
        &self,
        parts: &[Arc<Partition>],
        start: i64,
        end: i64,
        kept: Option<RevisionEvents>,
        max_bytes: usize,
    ) -> Result<Vec<(i64, RevisionEvents)>, i64> {
        if start > end {
            return Ok(Vec::new());
        }
        let from = if kept.is_some() { start + 1 } else { start };
        let mut evs: Vec<(Revision, Event)> = Vec::new();
        let mut cut = end;
        for p in parts {
            let st = p.state.read();
            if st.compacted >= from {
                // Compacted since this read began: what it asks for is gone.
                drop(st);
                return Err(self.compacted());
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
