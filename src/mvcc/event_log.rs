//! The history by revision: every committed revision's events, in order, until compaction.
//!
//! Watchers that start in the past, or fell behind, replay from here; a replay costs the
//! revisions replayed, never a scan of keys. Revisions are contiguous (every committed revision
//! wrote something), so revision r lives at index `r - first`.

use std::collections::VecDeque;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;

use parking_lot::RwLock;

use super::request::KeyValue;

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
    /// both hold it briefly.
    inner: RwLock<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Revision of `revs[0]`.
    first: i64,
    /// The compaction revision (0 before the first): watches may not start below it.
    compacted: i64,
    revs: VecDeque<RevisionEvents>,
}

impl EventLog {
    /// An empty log whose next revision is `next`.
    pub fn new(next: i64) -> Self {
        Self { inner: RwLock::new(Inner { first: next, compacted: 0, revs: VecDeque::new() }) }
    }

    pub fn append(&self, rev: i64, events: RevisionEvents) {
        let mut g = self.inner.write();
        debug_assert_eq!(rev, g.first + g.revs.len() as i64, "revisions are contiguous");
        g.revs.push_back(events);
    }

    /// Forgets revisions below `rev` (compaction at `rev` keeps `rev` itself: a watch may start
    /// at the compaction revision).
    pub fn compact(&self, rev: i64) {
        let mut g = self.inner.write();
        g.compacted = g.compacted.max(rev);
        while g.first < rev && !g.revs.is_empty() {
            g.revs.pop_front();
            g.first += 1;
        }
        if g.revs.is_empty() && g.first < rev {
            g.first = rev;
        }
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
