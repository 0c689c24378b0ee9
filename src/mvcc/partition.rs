//! One partition of the key space: the keys of one Kubernetes resource (or the default
//! partition for everything else), with a hash map for point lookups, an ordered index for
//! ranges and counts, and the per-key histories.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use hashbrown::{HashMap, HashSet};
use parking_lot::RwLock;

use super::index::OrderedIndex;
use super::key_index::{KeyHistory, KeyRecord, record_cost};
use super::request::KeyValue;
use crate::keyspace::KeyRange;
use crate::revision::Revision;

#[derive(Debug)]
pub struct Partition {
    /// Position in the partition table; locks are always taken in ascending id order, which is
    /// what keeps multi-partition txns free of deadlocks.
    pub id: usize,
    /// The resource prefix (`/registry/pods/`), empty for the default partition.
    pub prefix: Bytes,
    /// Writers take it exclusively for the whole of their compare-and-apply; readers share it.
    /// parking_lot's lock: short critical sections, never held across an `.await`.
    pub state: RwLock<PartitionState>,
    /// Bytes held by the partition's records, readable without the lock (Status, metrics).
    pub bytes: AtomicUsize,
}

impl Partition {
    pub fn new(id: usize, prefix: Bytes) -> Self {
        Self {
            id,
            prefix,
            state: RwLock::new(PartitionState::default()),
            bytes: AtomicUsize::new(0),
        }
    }
}

#[derive(Debug, Default)]
pub struct PartitionState {
    /// Key to slab slot: the point-lookup path (gets and single-key writes).
    map: HashMap<Bytes, u32>,
    /// The histories, addressed by slot so the map and the index share them.
    slab: Vec<KeyHistory>,
    /// Slots freed by compaction, reused before the slab grows.
    free: Vec<u32>,
    /// Keys in order with live counts: ranges and exact counts.
    index: OrderedIndex,
    /// (main revision, slot) of every create and delete not yet compacted away: the changes to
    /// undo when counting at a past revision, since the index counts at the newest one.
    liveness: VecDeque<(i64, u32)>,
    /// Slots whose history compaction may shrink; compaction visits only these.
    compact_queue: Vec<u32>,
    /// The revision this partition was compacted at; reads below it fail.
    pub compacted: i64,
    /// The newest revision applied here.
    pub last_applied: i64,
    /// Sum of record costs, mirrored into `Partition::bytes`.
    bytes: usize,
}

impl PartitionState {
    pub fn history(&self, key: &[u8]) -> Option<&KeyHistory> {
        self.map.get(key).map(|&s| &self.slab[s as usize])
    }

    /// Number of keys live at the newest applied revision.
    pub fn live_keys(&self) -> u64 {
        self.index.live_total()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Writes a new version of `key` at `rev`; returns the previous live version.
    pub fn put(
        &mut self,
        key: &Bytes,
        rev: Revision,
        value: Bytes,
        lease: i64,
    ) -> Option<KeyValue> {
        let (slot, fresh) = match self.map.get(&key[..]) {
            Some(&s) => (s, false),
            None => (self.new_slot(key.clone(), true), true),
        };
        let h = &self.slab[slot as usize];
        let prev = h.latest().map(|r| to_kv(&h.key, r));
        let (create_rev, version) = match &prev {
            Some(p) => (p.create_revision, p.version + 1),
            None => (rev.main, 1),
        };
        self.push_record(slot, KeyRecord { rev, create_rev, version, lease, value }, fresh);
        prev
    }

    /// Deletes a live key at `rev`; returns its last version.
    pub fn delete(&mut self, key: &[u8], rev: Revision) -> Option<KeyValue> {
        let slot = *self.map.get(key)?;
        let h = &self.slab[slot as usize];
        let prev = h.latest().map(|r| to_kv(&h.key, r))?;
        self.push_record(slot, KeyRecord::tombstone(rev), false);
        Some(prev)
    }

    /// Appends a version exactly as given (recovery: from a snapshot or the WAL). Versions of
    /// a key must come oldest first.
    pub fn restore(&mut self, key: &Bytes, rec: KeyRecord) {
        let (slot, fresh) = match self.map.get(&key[..]) {
            Some(&s) => (s, false),
            None => (self.new_slot(key.clone(), !rec.is_tombstone()), true),
        };
        self.push_record(slot, rec, fresh);
    }

    /// Puts the liveness log back in revision order after a snapshot was loaded key by key.
    pub fn sort_liveness(&mut self) {
        self.liveness.make_contiguous().sort_unstable();
    }

    /// Appends a record to a key's history and keeps the index, the liveness log, the
    /// compaction queue and the byte count in step. `fresh`: the key was just indexed with the
    /// record's liveness (one index search per new key instead of two).
    fn push_record(&mut self, slot: u32, rec: KeyRecord, fresh: bool) {
        let h = &mut self.slab[slot as usize];
        let was_live = h.is_live();
        let live = !rec.is_tombstone();
        let main = rec.rev.main;
        self.bytes += record_cost(&rec);
        h.push(rec);
        let queue = h.compactable() && !h.queued;
        if queue {
            h.queued = true;
        }
        if was_live != live {
            if !fresh {
                let key = h.key.clone();
                self.index.set_live(&key, live);
            }
            self.liveness.push_back((main, slot));
        }
        if queue {
            self.compact_queue.push(slot);
        }
        self.last_applied = self.last_applied.max(main);
    }

    /// A slot for a new key, indexed with the liveness its first record will give it.
    fn new_slot(&mut self, key: Bytes, live: bool) -> u32 {
        let h = KeyHistory::new(key.clone());
        let slot = match self.free.pop() {
            Some(s) => {
                self.slab[s as usize] = h;
                s
            }
            None => {
                self.slab.push(h);
                (self.slab.len() - 1) as u32
            }
        };
        self.bytes += key_cost(&key);
        self.map.insert(key.clone(), slot);
        self.index.insert(key, slot, live);
        slot
    }

    /// The live version of a single key as of `rev` (`i64::MAX` for the newest).
    pub fn get(&self, key: &[u8], rev: i64) -> Option<KeyValue> {
        let h = self.history(key)?;
        h.at(rev).map(|r| to_kv(&h.key, r))
    }

    /// Live keys in `range` as of `rev`: the index's count at the newest revision, corrected by
    /// undoing the creates and deletes after `rev` (found in the liveness log).
    pub fn count_at(&self, range: &KeyRange, rev: i64) -> u64 {
        if range.single {
            return self.get(&range.start, rev).is_some() as u64;
        }
        let mut n = self.index.count_live(range) as i64;
        if rev >= self.last_applied {
            return n as u64;
        }
        let mut seen = HashSet::new();
        for &(r, slot) in self.liveness.iter().rev() {
            if r <= rev {
                break;
            }
            if !seen.insert(slot) {
                continue;
            }
            let h = &self.slab[slot as usize];
            if range.contains(&h.key) {
                n += h.live_at(rev) as i64 - h.is_live() as i64;
            }
        }
        n as u64
    }

    /// Up to `limit` (0 = all) live versions in `range` as of `rev`, in key order.
    pub fn scan(&self, range: &KeyRange, rev: i64, limit: usize, out: &mut Vec<KeyValue>) {
        if range.single {
            out.extend(self.get(&range.start, rev));
            return;
        }
        let latest = rev >= self.last_applied;
        let target = if limit == 0 { usize::MAX } else { out.len().saturating_add(limit) };
        for e in self.index.iter_from(&range.start) {
            if out.len() >= target || !range.below_end(&e.key) {
                break;
            }
            if latest && !e.live {
                continue;
            }
            let h = &self.slab[e.slot as usize];
            if let Some(r) = h.at(rev) {
                out.push(to_kv(&h.key, r));
            }
        }
    }

    /// Whether any key in `range` is live at the newest revision.
    pub fn any_live(&self, range: &KeyRange) -> bool {
        if range.single {
            return self.history(&range.start).is_some_and(KeyHistory::is_live);
        }
        self.index.count_live(range) > 0
    }

    /// Live keys of `range` at the newest revision (for deletes).
    pub fn live_keys_in(&self, range: &KeyRange) -> Vec<Bytes> {
        if range.single {
            return self.any_live(range).then(|| range.start.clone()).into_iter().collect();
        }
        self.index
            .iter_from(&range.start)
            .take_while(|e| range.below_end(&e.key))
            .filter(|e| e.live)
            .map(|e| e.key.clone())
            .collect()
    }

    /// Compacts at `rev`: trims the histories that changed since the last compaction, removes
    /// keys whose history is gone, and forgets liveness changes no read can ask about any more.
    pub fn compact(&mut self, rev: i64) {
        let queue = std::mem::take(&mut self.compact_queue);
        for slot in queue {
            let h = &mut self.slab[slot as usize];
            self.bytes -= h.compact(rev);
            if h.is_empty() {
                let key = h.key.clone();
                self.bytes -= key_cost(&key);
                self.map.remove(&key[..]);
                self.index.remove(&key);
                self.slab[slot as usize] = KeyHistory::new(Bytes::new());
                self.free.push(slot);
            } else if h.compactable() {
                self.compact_queue.push(slot);
            } else {
                h.queued = false;
            }
        }
        while self.liveness.front().is_some_and(|&(r, _)| r <= rev) {
            self.liveness.pop_front();
        }
        self.compacted = self.compacted.max(rev);
    }

    /// Up to `limit` keys after `after` (from the first if `None`), in key order, with their
    /// retained records at or below `rev`: a snapshot reads a partition in such chunks so that
    /// writers wait for one chunk, never for the whole partition.
    pub fn chunk_at(
        &self,
        after: Option<&Bytes>,
        rev: i64,
        limit: usize,
    ) -> Vec<(Bytes, Vec<KeyRecord>)> {
        let start: &[u8] = after.map_or(b"", |k| &k[..]);
        let mut out = Vec::with_capacity(limit.min(4096));
        for e in self.index.iter_from(start) {
            if after.is_some_and(|a| e.key == *a) {
                continue;
            }
            if out.len() >= limit {
                break;
            }
            let h = &self.slab[e.slot as usize];
            let recs: Vec<KeyRecord> =
                h.records().iter().take_while(|r| r.rev.main <= rev).cloned().collect();
            if !recs.is_empty() {
                out.push((h.key.clone(), recs));
            }
        }
        out
    }

    /// Every retained record in key order (for Hash/HashKV).
    pub fn for_each_record(&self, mut f: impl FnMut(&[u8], &KeyRecord)) {
        self.for_each_history(|h| h.records().iter().for_each(|r| f(&h.key, r)));
    }

    /// Every key's history, in key order.
    pub fn for_each_history(&self, mut f: impl FnMut(&KeyHistory)) {
        for e in self.index.iter_from(b"") {
            f(&self.slab[e.slot as usize]);
        }
    }
}

/// Memory a key costs besides its records: its bytes, its hash map and index entries and its
/// history header (measured sizes of those structures, rounded up for allocator overhead).
fn key_cost(key: &Bytes) -> usize {
    key.len() + 160
}

/// The client-facing form of a record.
pub fn to_kv(key: &Bytes, r: &KeyRecord) -> KeyValue {
    KeyValue {
        key: key.clone(),
        create_revision: r.create_rev,
        mod_revision: r.rev.main,
        version: r.version,
        value: r.value.clone(),
        lease: r.lease,
    }
}

impl Partition {
    /// Publishes the state's byte count for lock-free readers.
    pub fn sync_bytes(&self, state: &PartitionState) {
        self.bytes.store(state.bytes(), Ordering::Relaxed);
    }
}
