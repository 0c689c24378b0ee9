//! One partition of the key space: the keys of one Kubernetes resource (or the default
//! partition for everything else), with a hash map for point lookups, an ordered index for
//! ranges and counts, and the per-key histories.
//!
//! # Memory
//! A key's bytes live in its versions' buffers (`KvBuf`: key and value in one allocation), its
//! history in the slab (56 bytes with a single version inline); the hash map and the ordered
//! index hold only its 4-byte slot in the slab and reach the key through it. Each further
//! version: its record (56 bytes, in a vector grown by half), its buffer, and a 12-byte entry
//! in the change log, from which the event log reads a revision's events back (see
//! `EventLog::track`); a create or delete, 4 bytes more in the liveness log. Until the next
//! compaction: a key written once holds 16 bytes of logs. Logs and the slab grow in fixed-size
//! chunks: no power-of-two slack, and no copy of a whole structure under the lock as it grows.

use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use hashbrown::{DefaultHashBuilder, HashSet, HashTable};
use parking_lot::RwLock;

use super::event::{Event, EventKind};
use super::index::{Keys, OrderedIndex};
use super::key_index::{KeyHistory, KeyRecord, first_kept, record_cost};
use super::kv_buf::KvBuf;
use super::request::KeyValue;
use crate::keyspace::KeyRange;
use crate::metrics::Serial;
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
    /// How long writes (and transactions) held `state` exclusively, and how many: one
    /// resource's writes pass it one at a time. Compaction's and restore's holds are not in it.
    pub writing: Serial,
}

impl Partition {
    pub fn new(id: usize, prefix: Bytes) -> Self {
        Self {
            id,
            prefix,
            state: RwLock::new(PartitionState::default()),
            bytes: AtomicUsize::new(0),
            writing: Serial::default(),
        }
    }
}

/// A record written to the partition at main revision `main` to the key in `slot` (a key gets
/// at most one record per revision). 12 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(C, packed(4))]
struct Change {
    main: i64,
    slot: u32,
}

/// A put or delete as a writer applied it under the partition's lock: the record written (a
/// delete's tombstone) and the live version before it. Made into an [`Event`], whose views
/// allocate, once the lock is released.
#[derive(Debug)]
pub struct Written {
    pub rec: KeyRecord,
    pub prev: Option<KeyRecord>,
}

impl Written {
    pub fn to_event(&self) -> Event {
        event_of(&self.rec, self.prev.as_ref())
    }
}

/// The event of record `rec` (a put's version or a delete's tombstone) over the live version
/// `prev` it replaced: as a writer makes it, and as a read of past revisions rebuilds it.
fn event_of(rec: &KeyRecord, prev: Option<&KeyRecord>) -> Event {
    let kind = if rec.is_tombstone() { EventKind::Delete } else { EventKind::Put };
    Event::new(kind, rec.to_kv(), prev.map(KeyRecord::to_kv))
}

/// What a compaction took out of a partition under its lock, freed after the lock is
/// released (see [`KeyHistory::compact`]). Reused from chunk to chunk, so that after the first
/// chunk collecting costs no allocation under the lock either.
#[derive(Debug, Default)]
pub struct Dropped {
    versions: Vec<KeyRecord>,
}

impl Dropped {
    /// Frees what was collected, keeping the room for the next chunk.
    pub fn free(&mut self) {
        self.versions.clear();
    }
}

#[derive(Debug, Default)]
pub struct PartitionState {
    /// Slots by key hash: the point-lookup path (gets and single-key writes). The keys are
    /// compared in the slab. Each entry keeps 32 bits of its key's hash beside the slot, so
    /// that growing the table rehashes from the table alone: rehashing from the keys visits
    /// every key's history and bytes (two cache misses a key), which at a few million keys
    /// held the partition's write lock for most of a second.
    map: HashTable<(u32, u32)>,
    hasher: DefaultHashBuilder,
    /// The histories, addressed by slot so the map and the index share them.
    slab: Slab,
    /// Slots freed by compaction, reused before the slab grows.
    free: Vec<u32>,
    /// Keys in order with live counts: ranges and exact counts.
    index: OrderedIndex,
    /// Every create and delete not yet compacted away: the changes to undo when counting at a
    /// past revision, since the index counts at the newest one. A log of its own, not a flag
    /// in `changes`: a count at a past revision (every page of a paged list after the first)
    /// walks back to it, and in a resource of hot keys (node Leases) `changes` holds every
    /// update too. Each entry is the change's position in `changes` ([`ChunkedLog::at`]): 4
    /// bytes a create, where a copy of the change took 12.
    liveness: ChunkedLog<u32>,
    /// Every record not yet compacted away, in revision order: the revisions' events.
    changes: ChunkedLog<Change>,
    /// Slots whose history compaction may shrink; compaction visits only these. A slot is in it
    /// exactly while its history is `compactable()`.
    compact_queue: Vec<u32>,
    /// The revision this partition was compacted at; reads below it fail.
    pub compacted: i64,
    /// The revision of the newest compaction of a prefix over this partition's alone (a
    /// tenant's, `Store::compact_prefix`), 0 if none: reads below it fail too. Such a
    /// compaction frees what a compaction at the revision before frees, so `compacted` stays
    /// below it and the floor's own events stay readable.
    pub floor: i64,
    /// The newest revision applied here.
    pub last_applied: i64,
    /// Sum of record costs, mirrored into `Partition::bytes`.
    bytes: usize,
}

impl PartitionState {
    /// The 32 bits of `key`'s hash the map keeps.
    fn hash32(&self, key: &[u8]) -> u32 {
        let h = self.hasher.hash_one(key);
        (h ^ (h >> 32)) as u32
    }

    fn slot_of(&self, key: &[u8]) -> Option<u32> {
        let (slab, h) = (&self.slab, self.hash32(key));
        let found = self.map.find(table_hash(h), |&(s, sh)| sh == h && slab.get(s).key() == key);
        found.map(|&(s, _)| s)
    }

    pub fn history(&self, key: &[u8]) -> Option<&KeyHistory> {
        self.slot_of(key).map(|s| self.slab.get(s))
    }

    /// Number of keys live at the newest applied revision.
    pub fn live_keys(&self) -> u64 {
        self.index.live_total()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The live version of `key` now, as stored: what a put that keeps the value or the
    /// lease (`ignore_value`, `ignore_lease`) takes them from.
    pub fn latest(&self, key: &[u8]) -> Option<&KeyRecord> {
        self.history(key)?.latest()
    }

    /// Writes a new version at `rev` whose key and value are `data`'s. Returns the version
    /// written and the previous live one as records, not views: a writer holding the
    /// partition's lock pays a reference count for each, not an allocation.
    pub fn put(&mut self, data: KvBuf, rev: Revision, lease: i64) -> Written {
        let slot = self.slot_of(data.key());
        let prev = slot.and_then(|s| self.slab.get(s).latest().cloned());
        let (create_rev, version) = match &prev {
            Some(p) => (p.create_rev, p.version + 1),
            None => (rev.main, 1),
        };
        let rec = KeyRecord { rev, create_rev, version, lease, data };
        let written = rec.clone();
        match slot {
            Some(slot) => self.push_record(slot, rec),
            None => _ = self.insert_key(rec),
        }
        Written { rec: written, prev }
    }

    /// Deletes a live key at `rev`: the tombstone written and the key's last version.
    pub fn delete(&mut self, key: &[u8], rev: Revision) -> Option<Written> {
        let slot = self.slot_of(key)?;
        let live = self.slab.get(slot).latest()?.clone();
        let tombstone = KeyRecord::tombstone(rev, live.data.clone());
        self.push_record(slot, tombstone.clone());
        Some(Written { rec: tombstone, prev: Some(live) })
    }

    /// Appends a version exactly as given (recovery: from a snapshot or the WAL). Versions of
    /// a key must come oldest first; a tombstone shares the buffer of the version it follows,
    /// as a delete's does.
    pub fn restore(&mut self, rec: KeyRecord) {
        // A snapshot's keys come in order, each once: a key after the last one indexed is
        // new, with no lookup.
        let key = rec.key();
        let slot = if self.index.after_last(&self.slab, key) { None } else { self.slot_of(key) };
        match slot {
            Some(slot) => {
                let rec = match self.slab.get(slot).last() {
                    Some(last) if rec.is_tombstone() => {
                        KeyRecord { data: last.data.clone(), ..rec }
                    }
                    _ => rec,
                };
                self.push_record(slot, rec);
            }
            None => _ = self.insert_key(rec),
        }
    }

    /// Puts the liveness and change logs back in revision order after a snapshot was loaded
    /// key by key: the change log sorted, and the liveness log's positions found anew in it
    /// (both in order, so one walk).
    pub fn sort_logs(&mut self) {
        let mut flips: Vec<Change> = self.liveness.iter_rev().map(|&p| self.flip(p)).collect();
        flips.sort_unstable();
        self.changes.sort();
        self.liveness = ChunkedLog::default();
        let mut i = 0;
        for c in flips {
            while *self.changes.get(i) < c {
                i += 1;
            }
            debug_assert!(*self.changes.get(i) == c, "a create or delete that is no change");
            self.liveness.push_back(self.changes.position(i));
        }
    }

    /// The change a liveness entry stands for.
    fn flip(&self, position: u32) -> Change {
        *self.changes.at(position)
    }

    /// Appends a record to an indexed key's history and keeps the index, the liveness and
    /// change logs, the compaction queue and the byte count in step.
    fn push_record(&mut self, slot: u32, rec: KeyRecord) {
        let h = self.slab.get_mut(slot);
        let was_live = h.is_live();
        let was_compactable = h.compactable();
        let live = !rec.is_tombstone();
        let main = rec.rev.main;
        self.bytes += record_cost(&rec);
        h.push(rec);
        if !was_compactable && h.compactable() {
            self.compact_queue.push(slot);
        }
        if was_live != live {
            self.index.set_live(&self.slab, self.slab.get(slot).key(), live);
        }
        self.logged(slot, main, was_live != live);
    }

    /// A new key with its first record: a slot, the hash map and the index (with the
    /// liveness the record gives it: one index search, not two), the logs.
    fn insert_key(&mut self, rec: KeyRecord) -> u32 {
        let (live, main) = (!rec.is_tombstone(), rec.rev.main);
        self.bytes += key_cost(rec.key()) + record_cost(&rec);
        let h = KeyHistory::new(rec);
        let slot = match self.free.pop() {
            Some(s) => {
                *self.slab.get_mut(s) = h;
                s
            }
            None => self.slab.push(h),
        };
        let key = self.slab.get(slot).key();
        let h = self.hash32(key);
        self.map.insert_unique(table_hash(h), (slot, h), |&(_, h)| table_hash(h));
        self.index.insert(&self.slab, self.slab.get(slot).key(), slot, live);
        if self.slab.get(slot).compactable() {
            self.compact_queue.push(slot);
        }
        self.logged(slot, main, live);
        slot
    }

    /// The logs' entries for a record written to `slot` at `main`; `flips`: the record
    /// created or deleted the key.
    fn logged(&mut self, slot: u32, main: i64, flips: bool) {
        if flips {
            self.liveness.push_back(self.changes.position(self.changes.len()));
        }
        self.changes.push_back(Change { main, slot });
        self.last_applied = self.last_applied.max(main);
    }

    /// The live version of a single key as of `rev` (`i64::MAX` for the newest).
    pub fn get(&self, key: &[u8], rev: i64) -> Option<KeyValue> {
        self.history(key)?.at(rev).map(KeyRecord::to_kv)
    }

    /// Live keys in `range` as of `rev`: the index's count at the newest revision, corrected by
    /// undoing the creates and deletes after `rev` (found in the liveness log).
    pub fn count_at(&self, range: &KeyRange, rev: i64) -> u64 {
        if range.single {
            return self.get(&range.start, rev).is_some() as u64;
        }
        let mut n = self.index.count_live(&self.slab, range) as i64;
        if rev >= self.last_applied {
            return n as u64;
        }
        let mut seen = HashSet::new();
        for &p in self.liveness.iter_rev() {
            let Change { main: r, slot } = self.flip(p);
            if r <= rev {
                break;
            }
            if !seen.insert(slot) {
                continue;
            }
            let h = self.slab.get(slot);
            if range.contains(h.key()) {
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
        for e in self.index.range(&self.slab, range) {
            if out.len() >= target {
                break;
            }
            if latest && !e.live() {
                continue;
            }
            let h = self.slab.get(e.slot());
            if let Some(r) = h.at(rev) {
                out.push(r.to_kv());
            }
        }
    }

    /// Whether any key in `range` is live at the newest revision.
    pub fn any_live(&self, range: &KeyRange) -> bool {
        if range.single {
            return self.history(&range.start).is_some_and(KeyHistory::is_live);
        }
        self.index.count_live(&self.slab, range) > 0
    }

    /// Live keys of `range` at the newest revision (for deletes).
    pub fn live_keys_in(&self, range: &KeyRange) -> Vec<Bytes> {
        if range.single {
            return self.any_live(range).then(|| range.start.clone()).into_iter().collect();
        }
        self.index
            .range(&self.slab, range)
            .filter(|e| e.live())
            .filter_map(|e| self.slab.get(e.slot()).last().map(|r| r.data.key_bytes()))
            .collect()
    }

    /// Compacts at `rev` in one go (recovery, where nobody waits for the lock): trims the
    /// histories that changed since the last compaction, removes keys whose history is gone,
    /// and forgets liveness changes no read can ask about any more and the changes of
    /// revisions up to `rev` (the event log keeps revision `rev`'s events itself: compaction
    /// may drop a delete at exactly `rev`).
    pub fn compact(&mut self, rev: i64) {
        let queue = self.take_compact_queue();
        self.compact_slots(rev, &queue, &mut Dropped::default());
        while !self.finish_compact(rev, usize::MAX) {}
    }

    /// The first step of a compaction done a chunk at a time, so that writers wait for one
    /// chunk and not for the whole partition (a million keys take a second): the slots whose
    /// histories it may shrink. The caller passes all of them to [`Self::compact_slots`], then
    /// calls [`Self::finish_compact`] until it is done, taking the lock for each call.
    /// Between calls, writes only add records above `rev`, and a slot they make compactable
    /// again is queued anew, so every chunk finds what it would have found in one pass.
    pub fn take_compact_queue(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.compact_queue)
    }

    /// Compacts the histories of `slots` at `rev` (see [`Self::take_compact_queue`]), moving
    /// what goes into `dropped` for the caller to free once it has released the lock.
    pub fn compact_slots(&mut self, rev: i64, slots: &[u32], dropped: &mut Dropped) {
        for &slot in slots {
            let recs = self.slab.get(slot).records();
            if !recs.is_empty() && first_kept(recs, rev) == recs.len() {
                // Nothing stays: out of the index and the map while the slab still holds the
                // key they compare, then the records go.
                let key = self.slab.get(slot).key();
                self.bytes -= key_cost(key);
                let h = table_hash(self.hash32(key));
                self.index.remove(&self.slab, self.slab.get(slot).key());
                if let Ok(e) = self.map.find_entry(h, |&(s, _)| s == slot) {
                    e.remove();
                }
                let h = self.slab.get_mut(slot);
                self.bytes -= h.compact(rev, &mut dropped.versions);
                debug_assert!(h.is_empty());
                self.free.push(slot);
                continue;
            }
            let h = self.slab.get_mut(slot);
            self.bytes -= h.compact(rev, &mut dropped.versions);
            if h.compactable() {
                self.compact_queue.push(slot);
            }
        }
    }

    /// Forgets at most `budget` log entries at or below `rev`; true once none is left, and
    /// the partition then counts as compacted at `rev`.
    pub fn finish_compact(&mut self, rev: i64, budget: usize) -> bool {
        let mut left = budget;
        // The liveness log first: its entries point into the change log.
        while left > 0 && self.liveness.front().is_some_and(|&p| { self.flip(p).main } <= rev) {
            self.liveness.pop_front();
            left -= 1;
        }
        while left > 0 && self.changes.front().is_some_and(|c| { c.main } <= rev) {
            self.changes.pop_front();
            left -= 1;
        }
        if left == 0 {
            return false;
        }
        self.compacted = self.compacted.max(rev);
        true
    }

    /// The events of revisions `from..=to` written here, as watchers get them (the new version,
    /// or a delete, with the version before as `prev_kv`), in revision order, appended to
    /// `out`. Stops early, between two revisions, once the events gathered hold `max_bytes` of
    /// keys and values. Returns the newest revision whose events here are all in `out`.
    pub fn events(
        &self,
        from: i64,
        to: i64,
        max_bytes: usize,
        out: &mut Vec<(Revision, Event)>,
    ) -> i64 {
        let mut bytes = 0;
        let mut current = None;
        let mut i = self.changes.partition_point(|c| { c.main } < from);
        while i < self.changes.len() {
            let Change { main, slot } = *self.changes.get(i);
            if main > to {
                break;
            }
            if current != Some(main) {
                if bytes >= max_bytes {
                    return main - 1;
                }
                current = Some(main);
            }
            i += 1;
            let h = self.slab.get(slot);
            let Some(at) = h.position(main) else {
                debug_assert!(false, "no record of revision {main} in slot {slot}");
                continue;
            };
            let recs = h.records();
            let r = &recs[at];
            let prev = at.checked_sub(1).map(|j| &recs[j]).filter(|p| !p.is_tombstone());
            bytes += r.key().len() + r.value().len();
            out.push((r.rev, event_of(r, prev)));
        }
        to
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
        for e in self.index.iter_from(&self.slab, start) {
            let h = self.slab.get(e.slot());
            if after.is_some_and(|a| h.key() == &a[..]) {
                continue;
            }
            if out.len() >= limit {
                break;
            }
            let recs: Vec<KeyRecord> =
                h.records().iter().take_while(|r| r.rev.main <= rev).cloned().collect();
            if !recs.is_empty() {
                out.push((Bytes::copy_from_slice(h.key()), recs));
            }
        }
        out
    }

    /// Every retained record in key order (for Hash/HashKV).
    pub fn for_each_record(&self, mut f: impl FnMut(&[u8], &KeyRecord)) {
        self.for_each_history(|h| h.records().iter().for_each(|r| f(r.key(), r)));
    }

    /// Every key's history, in key order.
    pub fn for_each_history(&self, mut f: impl FnMut(&KeyHistory)) {
        for e in self.index.iter() {
            f(self.slab.get(e.slot()));
        }
    }

    /// The number of slots: [`Self::for_each_slot_history`] walks `0..slots()` a range at a
    /// time. Slots added later hold only records written later.
    pub fn slots(&self) -> u32 {
        self.slab.len as u32
    }

    /// The histories in slots `range`, in slot order (freed slots have no records), for walks
    /// of the whole history that take the lock a range at a time.
    pub fn for_each_slot_history(
        &self,
        range: std::ops::Range<u32>,
        mut f: impl FnMut(&KeyHistory),
    ) {
        for slot in range.start..range.end.min(self.slots()) {
            f(self.slab.get(slot));
        }
    }
}

/// The map's hash of a key whose kept hash bits are `h`: spread over 64 bits, since the table
/// picks a bucket by the low bits and tells keys apart by the top ones.
fn table_hash(h: u32) -> u64 {
    u64::from(h).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// Memory a key costs besides its records: its bytes, its hash map and index entries and its
/// history header (measured sizes of those structures, rounded up for allocator overhead).
fn key_cost(key: &[u8]) -> usize {
    key.len() + 100
}

impl Partition {
    /// Publishes the state's byte count for lock-free readers.
    pub fn sync_bytes(&self, state: &PartitionState) {
        self.bytes.store(state.bytes(), Ordering::Relaxed);
    }
}

/// Slots per slab segment.
const SEGMENT: usize = 1 << 12;

/// The histories by slot, in segments of [`SEGMENT`]: a new segment is allocated as the slab
/// grows, nothing is ever moved.
#[derive(Debug, Default)]
struct Slab {
    segments: Vec<Vec<KeyHistory>>,
    len: usize,
}

impl Slab {
    fn get(&self, slot: u32) -> &KeyHistory {
        let s = slot as usize;
        &self.segments[s / SEGMENT][s % SEGMENT]
    }

    fn get_mut(&mut self, slot: u32) -> &mut KeyHistory {
        let s = slot as usize;
        &mut self.segments[s / SEGMENT][s % SEGMENT]
    }

    /// Adds a history at the next slot.
    fn push(&mut self, h: KeyHistory) -> u32 {
        let slot = u32::try_from(self.len).ok().filter(|&s| s < 1 << 31);
        let slot = slot.expect("a partition holds fewer than 2^31 keys");
        let fresh = self.segments.is_empty();
        if let Some(new) = push_chunk(self.segments.last_mut(), fresh, SEGMENT, h) {
            self.segments.push(new);
        }
        self.len += 1;
        slot
    }
}

impl Keys for Slab {
    fn key(&self, slot: u32) -> &[u8] {
        self.get(slot).key()
    }
}

/// Pushes `item` onto `last`, the last of a list of chunks of capacity `full`, if it has room;
/// otherwise returns a new chunk holding it, for the caller to append. A list's only chunk
/// (`first`) grows by doubling, so that small partitions stay small; every chunk but the last
/// holds exactly `full` items.
fn push_chunk<T>(last: Option<&mut Vec<T>>, first: bool, full: usize, item: T) -> Option<Vec<T>> {
    match last {
        Some(c) if c.len() < full => {
            if c.len() == c.capacity() {
                c.reserve_exact(c.capacity().clamp(4, full - c.len()));
            }
            c.push(item);
            None
        }
        _ => {
            let mut c = Vec::with_capacity(if first { 4 } else { full });
            c.push(item);
            Some(c)
        }
    }
}

/// Entries per change-log chunk (64 KiB of changes).
const LOG_CHUNK: usize = 1 << 12;

/// A FIFO log in fixed-size chunks: appended at the back, trimmed at the front by compaction.
#[derive(Debug)]
struct ChunkedLog<T> {
    chunks: VecDeque<Vec<T>>,
    /// Items of `chunks[0]` already popped.
    head: usize,
    len: usize,
    /// Items ever popped: an item's place counted from the log's first push, which popping
    /// does not move ([`Self::position`]).
    popped: u64,
}

impl<T> Default for ChunkedLog<T> {
    fn default() -> Self {
        Self { chunks: VecDeque::new(), head: 0, len: 0, popped: 0 }
    }
}

impl<T: Copy + Ord> ChunkedLog<T> {
    fn len(&self) -> usize {
        self.len
    }

    fn push_back(&mut self, item: T) {
        let first = self.chunks.is_empty();
        if let Some(new) = push_chunk(self.chunks.back_mut(), first, LOG_CHUNK, item) {
            self.chunks.push_back(new);
        }
        self.len += 1;
    }

    fn front(&self) -> Option<&T> {
        self.chunks.front().map(|c| &c[self.head])
    }

    fn pop_front(&mut self) {
        if self.len == 0 {
            return;
        }
        self.len -= 1;
        self.popped += 1;
        self.head += 1;
        if self.head == self.chunks[0].len() {
            self.chunks.pop_front();
            self.head = 0;
        }
    }

    /// The item at position `i` from the front.
    fn get(&self, i: usize) -> &T {
        let i = i + self.head;
        &self.chunks[i / LOG_CHUNK][i % LOG_CHUNK]
    }

    /// A lasting name for the item `i` from the front (or, for `len()`, the next one pushed):
    /// its place counted from the first push, in 32 bits. [`Self::at`] finds it while the
    /// log holds fewer than 2^32 items (a partition's change log that long would take 48 GiB).
    fn position(&self, i: usize) -> u32 {
        debug_assert!(self.len < 1 << 32, "positions are told apart modulo 2^32");
        (self.popped + i as u64) as u32
    }

    /// The item named by `position`, which must still be in the log.
    fn at(&self, position: u32) -> &T {
        let i = position.wrapping_sub(self.popped as u32) as usize;
        debug_assert!(i < self.len, "position {position} is not in the log");
        self.get(i)
    }

    /// The first position whose item fails `pred` (the items must be partitioned by it).
    fn partition_point(&self, pred: impl Fn(&T) -> bool) -> usize {
        let (mut lo, mut hi) = (0, self.len);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if pred(self.get(mid)) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Newest first.
    fn iter_rev(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().rev().flat_map(|c| c.iter().rev()).take(self.len)
    }

    fn sort(&mut self) {
        let mut all: Vec<T> = Vec::with_capacity(self.len);
        all.extend(self.chunks.iter().flatten().skip(self.head));
        all.sort_unstable();
        *self = Self::default();
        for x in all {
            self.push_back(x);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A partition loaded key by key (a snapshot's order: every key's versions, then the next
    /// key's) and then sorted counts and replays every past revision as the partition that
    /// applied the same writes in revision order, before and after compactions: the liveness
    /// log's positions into the change log are found anew by the sort.
    #[test]
    fn a_partition_loaded_key_by_key_counts_and_replays_as_one_written_in_order() {
        let mut written = PartitionState::default();
        let mut rev = 0;
        // Keys created, updated, deleted and created again, interleaved over revisions.
        for round in 0..6u64 {
            for k in 0..40u64 {
                let key = format!("k{:02}", (k * 7 + round) % 40);
                rev += 1;
                let r = Revision::new(rev, 0);
                if (k + round) % 5 == 0 {
                    if written.delete(key.as_bytes(), r).is_none() {
                        written.put(KvBuf::new(key.as_bytes(), b"v"), r, 0);
                    }
                } else {
                    written.put(KvBuf::new(key.as_bytes(), format!("v{rev}").as_bytes()), r, 0);
                }
            }
        }
        let mut loaded = PartitionState::default();
        let mut keys: Vec<Vec<u8>> = (0..40u64).map(|k| format!("k{k:02}").into_bytes()).collect();
        keys.reverse(); // not even in key order: the slab's order differs from the index's
        for key in &keys {
            for rec in written.history(key).map(KeyHistory::records).unwrap_or_default() {
                loaded.restore(rec.clone());
            }
        }
        loaded.sort_logs();
        let ranges = [
            KeyRange::from_request(b"k", b"l"),
            KeyRange::from_request(b"k05", b"k17"),
            KeyRange::from_request(b"k3", b"\0"),
        ];
        let same = |a: &PartitionState, b: &PartitionState, from: i64| {
            for at in from..=rev {
                for r in &ranges {
                    assert_eq!(a.count_at(r, at), b.count_at(r, at), "count at {at}");
                }
            }
            let (mut ea, mut eb) = (Vec::new(), Vec::new());
            a.events(from + 1, rev, usize::MAX, &mut ea);
            b.events(from + 1, rev, usize::MAX, &mut eb);
            assert_eq!(ea, eb, "events after {from}");
            assert_eq!(ea.len() as i64, rev - from, "one event a revision");
        };
        same(&written, &loaded, 0);
        for at in [37, 120, 200] {
            written.compact(at);
            loaded.compact(at);
            same(&written, &loaded, at);
        }
    }

    #[test]
    fn chunked_log_is_a_fifo_with_positions() {
        let mut log = ChunkedLog::default();
        let mut model = VecDeque::new();
        for i in 0..3 * LOG_CHUNK as u64 + 7 {
            log.push_back(i);
            model.push_back(i);
            if i % 3 == 0 {
                log.pop_front();
                model.pop_front();
            }
        }
        assert_eq!(log.len(), model.len());
        assert_eq!(log.front(), model.front());
        for i in [0, 1, LOG_CHUNK - 1, LOG_CHUNK, model.len() - 1] {
            assert_eq!(log.get(i), &model[i]);
        }
        let rev: Vec<u64> = log.iter_rev().copied().collect();
        assert_eq!(rev, model.iter().rev().copied().collect::<Vec<_>>());
        let x = model[model.len() / 2];
        assert_eq!(log.partition_point(|&v| v < x), model.len() / 2);
        while log.len() > 0 {
            log.pop_front();
        }
        assert!(log.chunks.is_empty() && log.front().is_none());
        // Positions outlive pops, and wrap at 2^32 without losing their item.
        log.popped = u32::MAX as u64 - 2;
        for i in 0..6 {
            log.push_back(100 + i);
        }
        let names: Vec<u32> = (0..6).map(|i| log.position(i)).collect();
        assert_eq!(names[3], 0, "the fourth item is past the wrap");
        log.pop_front();
        log.pop_front();
        for (i, &p) in names.iter().enumerate().skip(2) {
            assert_eq!(*log.at(p), 100 + i as u64);
        }
        while log.len() > 0 {
            log.pop_front();
        }
        log.push_back(5);
        log.push_back(1);
        log.sort();
        assert_eq!((log.get(0), log.get(1)), (&1, &5));
    }
}
