//! A partition's ordered key index with live counts (etcd's `treeIndex`, plus counting).
//!
//! Keys are kept sorted in chunks of at most [`MAX_CHUNK`] entries; a Fenwick tree over the
//! chunks' live counts answers "how many live keys in `[a, b)`" in O(log n + chunk): this is what
//! makes a Range with `limit` and an exact `count` cost O(limit + log n) instead of a scan of the
//! rest of the range (paged LISTs ask for a count on every page). A chunked sorted vector rather
//! than a tree of nodes: scans are sequential in memory, and splitting a chunk only shifts a small
//! vector of chunk headers.

use std::cmp::Ordering;

use bytes::Bytes;

use crate::keyspace::KeyRange;

/// Largest chunk before it splits. A chunk's vector is allocated once with room for one more
/// entry than this (2 KiB, an allocator size class) and never grows.
const MAX_CHUNK: usize = 511;

/// Where the index finds the key of a slot: the partition's slab. The index keeps slots only
/// (4 bytes a key instead of a second copy of the key's `Bytes` header), and compares keys
/// through this.
pub trait Keys {
    fn key(&self, slot: u32) -> &[u8];
}

/// One key in the index: its slot in the partition's slab, and whether the key exists at the
/// partition's newest applied revision (the top bit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry(u32);

const LIVE: u32 = 1 << 31;

impl Entry {
    fn new(slot: u32, live: bool) -> Self {
        debug_assert!(slot < LIVE, "slots fit in 31 bits");
        Self(slot | if live { LIVE } else { 0 })
    }

    /// Where the key's history lives in the partition's slab.
    pub fn slot(self) -> u32 {
        self.0 & !LIVE
    }

    /// Whether the key exists at the partition's newest applied revision.
    pub fn live(self) -> bool {
        self.0 & LIVE != 0
    }

    fn set_live(&mut self, live: bool) {
        *self = Self::new(self.slot(), live);
    }
}

#[derive(Debug)]
struct Chunk {
    entries: Vec<Entry>,
    /// `heads[i]`: four bytes of entry i's key from `skip` on ([`head`]). A search compares
    /// these, side by side in memory, and reaches a key only when two heads are equal: each
    /// step of a search through the keys themselves is two cache misses (the slab's history,
    /// then the key's bytes), and creating a key took nine of them.
    ///
    /// Four bytes, not eight: the chunk's shared prefix is skipped, so four already tell
    /// neighbours apart (eight measured no faster), and eight would cost 4 more bytes per key.
    heads: Vec<u32>,
    live: u32,
    /// The key of `entries[0]`: the search for a key's chunk compares with it directly. A copy
    /// of its own: a key lives in its versions' buffers (`kv_buf::KvBuf`), which a view kept
    /// here would keep alive after compaction dropped them.
    first: Bytes,
    /// How many leading bytes every key of the chunk shares with `first` (at most; 0 is always
    /// true): Kubernetes keys of one resource and namespace share long prefixes, so the heads
    /// start after it. Set when a chunk splits (from its first and last keys), lowered when a
    /// key that shares less arrives.
    skip: usize,
}

/// Four bytes of `key` from `skip` on, zero-padded, as a big-endian number. Of two keys that
/// share their first `skip` bytes, the one with the smaller head sorts first; equal heads say
/// nothing (zero padding or a longer key).
fn head(key: &[u8], skip: usize) -> u32 {
    let mut b = [0u8; 4];
    let rest = key.get(skip..).unwrap_or_default();
    let n = rest.len().min(4);
    b[..n].copy_from_slice(&rest[..n]);
    u32::from_be_bytes(b)
}

fn shared_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl Chunk {
    fn new(first: &[u8]) -> Self {
        Self {
            entries: Vec::with_capacity(MAX_CHUNK + 1),
            heads: Vec::with_capacity(MAX_CHUNK + 1),
            live: 0,
            first: Bytes::copy_from_slice(first),
            skip: 0,
        }
    }

    /// Takes `skip` and rewrites every head for it.
    fn set_skip(&mut self, keys: &impl Keys, skip: usize) {
        self.skip = skip;
        self.heads.clear();
        self.heads.extend(self.entries.iter().map(|e| head(keys.key(e.slot()), skip)));
    }

    /// After a split: the chunk's keys share at least what its first and last share.
    fn widen_skip(&mut self, keys: &impl Keys) {
        let last = self.entries.last().map(|e| keys.key(e.slot()));
        let shared = last.map_or(0, |l| shared_prefix(&self.first, l));
        if shared > self.skip {
            self.set_skip(keys, shared);
        }
    }

    /// The position of the first entry whose key is above `key` (`inclusive`) or at or above
    /// it.
    fn position(&self, keys: &impl Keys, key: &[u8], inclusive: bool) -> usize {
        let prefix = &self.first[..self.skip];
        if key.get(..self.skip) != Some(prefix) {
            // Every key here starts with `prefix`; `key` does not.
            return if key < prefix { 0 } else { self.entries.len() };
        }
        let h = head(key, self.skip);
        let (mut lo, mut hi) = (0, self.entries.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            let ord = match self.heads[mid].cmp(&h) {
                Ordering::Equal => keys.key(self.entries[mid].slot())[..].cmp(key),
                o => o,
            };
            let before = if inclusive { ord != Ordering::Greater } else { ord == Ordering::Less };
            if before {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }
}

/// Sorted keys of one partition, with live counts.
#[derive(Debug, Default)]
pub struct OrderedIndex {
    /// Non-empty chunks in key order; chunk i's keys all sort before chunk i+1's.
    chunks: Vec<Chunk>,
    /// Fenwick (binary indexed) tree over `chunks[i].live`, 1-based.
    fenwick: Vec<u32>,
    len: usize,
}

impl OrderedIndex {
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of keys (live or not) in the index.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of live keys.
    pub fn live_total(&self) -> u64 {
        self.prefix_live(self.chunks.len())
    }

    /// Whether `key` sorts after every indexed key, so that it is certainly not indexed.
    pub fn after_last(&self, keys: &impl Keys, key: &[u8]) -> bool {
        let last = self.chunks.last().and_then(|c| c.entries.last());
        last.is_none_or(|e| keys.key(e.slot())[..] < *key)
    }

    /// Adds `key`, which is not yet in the index, at `slot`.
    pub fn insert(&mut self, keys: &impl Keys, key: &[u8], slot: u32, live: bool) {
        self.len += 1;
        let entry = Entry::new(slot, live);
        if self.chunks.is_empty() {
            let mut c = Chunk::new(key);
            c.entries.push(entry);
            c.heads.push(head(key, 0));
            c.live = live as u32;
            self.chunks.push(c);
            self.rebuild_fenwick();
            return;
        }
        // Keys that come in order (a snapshot's, sequential names) go at the end: one
        // comparison instead of two binary searches.
        let (ci, pos) = if self.after_last(keys, key) {
            let ci = self.chunks.len() - 1;
            (ci, self.chunks[ci].entries.len())
        } else {
            let ci = self.chunk_for(key);
            (ci, self.chunks[ci].position(keys, key, false))
        };
        let last = ci + 1 == self.chunks.len();
        let chunk = &mut self.chunks[ci];
        debug_assert!(
            chunk.entries.get(pos).is_none_or(|e| keys.key(e.slot()) != key),
            "duplicate"
        );
        if key.get(..chunk.skip) != Some(&chunk.first[..chunk.skip]) {
            // It shares less with the others than they do with each other.
            chunk.set_skip(keys, shared_prefix(key, &chunk.first));
        }
        if pos == 0 {
            chunk.first = Bytes::copy_from_slice(key);
        }
        let appended = pos == chunk.entries.len();
        chunk.entries.insert(pos, entry);
        chunk.heads.insert(pos, head(key, chunk.skip));
        chunk.live += live as u32;
        if chunk.entries.len() > MAX_CHUNK {
            // Keys appended in order (node names, sequential ids) leave full chunks behind;
            // anywhere else the chunk splits in halves.
            let at = if last && appended { MAX_CHUNK } else { chunk.entries.len() / 2 };
            let mut tail = Chunk::new(keys.key(chunk.entries[at].slot()));
            tail.entries.extend(chunk.entries.drain(at..));
            tail.heads.extend(chunk.heads.drain(at..));
            tail.skip = chunk.skip;
            tail.widen_skip(keys);
            chunk.widen_skip(keys);
            tail.live = tail.entries.iter().filter(|e| e.live()).count() as u32;
            chunk.live -= tail.live;
            self.chunks.insert(ci + 1, tail);
            self.rebuild_fenwick();
        } else if live {
            self.fenwick_add(ci, 1);
        }
    }

    /// Marks an indexed key live or dead.
    pub fn set_live(&mut self, keys: &impl Keys, key: &[u8], live: bool) {
        let Some((ci, pos)) = self.find(keys, key) else {
            debug_assert!(false, "set_live on a key that is not indexed");
            return;
        };
        let chunk = &mut self.chunks[ci];
        if chunk.entries[pos].live() == live {
            return;
        }
        chunk.entries[pos].set_live(live);
        if live {
            chunk.live += 1;
            self.fenwick_add(ci, 1);
        } else {
            chunk.live -= 1;
            self.fenwick_sub(ci, 1);
        }
    }

    /// Removes a key (after compaction dropped its whole history).
    pub fn remove(&mut self, keys: &impl Keys, key: &[u8]) {
        let Some((ci, pos)) = self.find(keys, key) else {
            return;
        };
        self.len -= 1;
        let chunk = &mut self.chunks[ci];
        let e = chunk.entries.remove(pos);
        chunk.heads.remove(pos);
        if chunk.entries.is_empty() {
            self.chunks.remove(ci);
            self.rebuild_fenwick();
            return;
        }
        if pos == 0 {
            chunk.first = Bytes::copy_from_slice(keys.key(chunk.entries[0].slot()));
        }
        if e.live() {
            chunk.live -= 1;
            self.fenwick_sub(ci, 1);
        }
    }

    /// Live keys inside `range`, at the newest applied revision.
    pub fn count_live(&self, keys: &impl Keys, range: &KeyRange) -> u64 {
        if range.is_empty() {
            return 0;
        }
        let (c1, p1) = self.lower_bound(keys, &range.start);
        let (c2, p2) = match (&range.end, range.single) {
            (_, true) => self.upper_bound_inclusive(keys, &range.start),
            (None, false) => (self.chunks.len(), 0),
            (Some(end), false) => self.lower_bound(keys, end),
        };
        if (c1, p1) >= (c2, p2) {
            return 0;
        }
        let live_in = |ci: usize, from: usize, to: usize| -> u64 {
            self.chunks[ci].entries[from..to].iter().filter(|e| e.live()).count() as u64
        };
        if c1 == c2 {
            return live_in(c1, p1, p2);
        }
        let head = live_in(c1, p1, self.chunks[c1].entries.len());
        let middle = self.prefix_live(c2) - self.prefix_live(c1 + 1);
        let tail = if c2 < self.chunks.len() { live_in(c2, 0, p2) } else { 0 };
        head + middle + tail
    }

    /// Entries from the first key at or above `key`, in key order.
    pub fn iter_from<'a, K: Keys>(
        &'a self,
        keys: &K,
        key: &[u8],
    ) -> impl Iterator<Item = Entry> + use<'a, K> {
        let (ci, pos) = self.lower_bound(keys, key);
        self.chunks.get(ci).into_iter().flat_map(move |c| c.entries[pos..].iter().copied()).chain(
            self.chunks
                .get(ci + 1..)
                .unwrap_or_default()
                .iter()
                .flat_map(|c| c.entries.iter().copied()),
        )
    }

    /// Entries of the keys in `range` (not a single key), in key order: bounded by position,
    /// so a scan compares no key but the two bounds.
    pub fn range<'a, K: Keys>(
        &'a self,
        keys: &K,
        range: &KeyRange,
    ) -> impl Iterator<Item = Entry> + use<'a, K> {
        let (c1, p1) = self.lower_bound(keys, &range.start);
        let (c2, p2) = match &range.end {
            None => (self.chunks.len(), 0),
            Some(end) => self.lower_bound(keys, end),
        };
        let (c2, p2) = if (c1, p1) < (c2, p2) { (c2, p2) } else { (c1, p1) };
        let last = c2.min(self.chunks.len().saturating_sub(1));
        self.chunks.get(c1..=last).unwrap_or_default().iter().zip(c1..).flat_map(move |(c, ci)| {
            let from = if ci == c1 { p1 } else { 0 };
            let to = if ci == c2 { p2 } else { c.entries.len() };
            c.entries[from..to].iter().copied()
        })
    }

    /// Every entry, in key order.
    pub fn iter(&self) -> impl Iterator<Item = Entry> + '_ {
        self.chunks.iter().flat_map(|c| c.entries.iter().copied())
    }

    /// The chunk a key belongs in: the last whose first key is at or below it.
    fn chunk_for(&self, key: &[u8]) -> usize {
        self.chunks.partition_point(|c| &c.first[..] <= key).saturating_sub(1)
    }

    fn find(&self, keys: &impl Keys, key: &[u8]) -> Option<(usize, usize)> {
        if self.chunks.is_empty() {
            return None;
        }
        let ci = self.chunk_for(key);
        let chunk = &self.chunks[ci];
        let pos = chunk.position(keys, key, false);
        let e = chunk.entries.get(pos)?;
        (keys.key(e.slot())[..] == *key).then_some((ci, pos))
    }

    /// Position (chunk, index) of the first entry at or above `key`, normalised so that the index
    /// is inside the chunk or the position is (chunks.len(), 0).
    fn lower_bound(&self, keys: &impl Keys, key: &[u8]) -> (usize, usize) {
        if self.chunks.is_empty() {
            return (0, 0);
        }
        let ci = self.chunk_for(key);
        let pos = self.chunks[ci].position(keys, key, false);
        self.normalise(ci, pos)
    }

    /// Position of the first entry above `key`.
    fn upper_bound_inclusive(&self, keys: &impl Keys, key: &[u8]) -> (usize, usize) {
        if self.chunks.is_empty() {
            return (0, 0);
        }
        let ci = self.chunk_for(key);
        let pos = self.chunks[ci].position(keys, key, true);
        self.normalise(ci, pos)
    }

    fn normalise(&self, ci: usize, pos: usize) -> (usize, usize) {
        if pos >= self.chunks[ci].entries.len() { (ci + 1, 0) } else { (ci, pos) }
    }

    /// Live keys in chunks `[0, n)`.
    fn prefix_live(&self, n: usize) -> u64 {
        let mut i = n;
        let mut sum = 0u64;
        while i > 0 {
            sum += self.fenwick[i] as u64;
            i &= i - 1;
        }
        sum
    }

    fn fenwick_add(&mut self, ci: usize, v: u32) {
        let mut i = ci + 1;
        while i < self.fenwick.len() {
            self.fenwick[i] += v;
            i += i & i.wrapping_neg();
        }
    }

    fn fenwick_sub(&mut self, ci: usize, v: u32) {
        let mut i = ci + 1;
        while i < self.fenwick.len() {
            self.fenwick[i] -= v;
            i += i & i.wrapping_neg();
        }
    }

    fn rebuild_fenwick(&mut self) {
        let n = self.chunks.len();
        self.fenwick.clear();
        self.fenwick.resize(n + 1, 0);
        for i in 1..=n {
            self.fenwick[i] += self.chunks[i - 1].live;
            let parent = i + (i & i.wrapping_neg());
            if parent <= n {
                let v = self.fenwick[i];
                self.fenwick[parent] += v;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn key(i: u32) -> Bytes {
        Bytes::from(format!("k{i:08}"))
    }

    /// Slot i holds key(i).
    struct Slab(Vec<Bytes>);

    impl Keys for Slab {
        fn key(&self, slot: u32) -> &[u8] {
            &self.0[slot as usize]
        }
    }

    #[test]
    fn counts_and_scans_match_a_btreemap_through_splits_and_removals() {
        let slab = Slab((0..20_000).map(key).collect());
        let mut idx = OrderedIndex::new();
        let mut model = BTreeMap::new();
        // A deterministic shuffle so chunks split in the middle, not only at the end.
        let mut x: u64 = 12345;
        for n in 0..5000u32 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let i = (x >> 33) as u32 % 20_000;
            let live = n % 3 != 0;
            if model.contains_key(&key(i)) {
                idx.set_live(&slab, &key(i), live);
            } else {
                idx.insert(&slab, &key(i), i, live);
            }
            model.insert(key(i), live);
            if n % 7 == 0 {
                let j = (x >> 13) as u32 % 20_000;
                if model.remove(&key(j)).is_some() {
                    idx.remove(&slab, &key(j));
                }
            }
        }
        assert_eq!(idx.len(), model.len());
        for (a, b) in [(0, 20_000), (100, 101), (5, 19_000), (7000, 6000), (12_345, 17_000)] {
            let r = KeyRange::from_request(&key(a), &key(b));
            let want = if a < b {
                model.range(key(a)..key(b)).filter(|(_, l)| **l).count() as u64
            } else {
                0
            };
            assert_eq!(idx.count_live(&slab, &r), want, "range {a}..{b}");
        }
        let all = KeyRange::from_request(b"\0", b"\0");
        assert_eq!(idx.count_live(&slab, &all), model.values().filter(|l| **l).count() as u64);
        assert_eq!(idx.live_total(), idx.count_live(&slab, &all));
        let scanned: Vec<_> = idx
            .iter_from(&slab, &key(3000))
            .map(|e| Bytes::copy_from_slice(slab.key(e.slot())))
            .collect();
        let want: Vec<_> = model.range(key(3000)..).map(|(k, _)| k.clone()).collect();
        assert_eq!(scanned, want);
        for (a, b) in
            [(0, 20_000), (100, 101), (100, 100), (5, 19_000), (7000, 6000), (19_990, 20_001)]
        {
            let r = KeyRange::from_request(&key(a), &key(b));
            let got: Vec<_> =
                idx.range(&slab, &r).map(|e| Bytes::copy_from_slice(slab.key(e.slot()))).collect();
            let want: Vec<_> = if a < b {
                model.range(key(a)..key(b)).map(|(k, _)| k.clone()).collect()
            } else {
                vec![]
            };
            assert_eq!(got, want, "range {a}..{b}");
        }
        let from: Vec<_> = idx
            .range(&slab, &KeyRange::from_request(&key(3000), b"\0"))
            .map(|e| Bytes::copy_from_slice(slab.key(e.slot())))
            .collect();
        assert_eq!(from, scanned);
        let live: Vec<_> =
            idx.iter().map(|e| (Bytes::copy_from_slice(slab.key(e.slot())), e.live())).collect();
        let want: Vec<_> = model.iter().map(|(k, l)| (k.clone(), *l)).collect();
        assert_eq!(live, want);
        let (k, live) = model.iter().next().map(|(k, l)| (k.clone(), *l)).unwrap();
        assert_eq!(idx.count_live(&slab, &KeyRange::single(k)), live as u64);
        for c in &idx.chunks {
            assert_eq!(c.first, slab.key(c.entries[0].slot()), "cached first keys");
            assert_eq!(c.entries.capacity(), MAX_CHUNK + 1, "chunks never reallocate");
            assert_eq!(c.heads.capacity(), MAX_CHUNK + 1, "nor do their heads");
        }
        check_heads(&idx, &slab);
    }

    /// Every chunk's heads are its keys' heads, and its keys share `skip` bytes with `first`.
    fn check_heads(idx: &OrderedIndex, slab: &Slab) {
        for c in &idx.chunks {
            assert_eq!(c.heads.len(), c.entries.len());
            for (e, h) in c.entries.iter().zip(&c.heads) {
                let k = slab.key(e.slot());
                assert_eq!(k[..c.skip], c.first[..c.skip], "shares the chunk's prefix");
                assert_eq!(*h, head(k, c.skip));
            }
        }
    }

    /// Keys that heads cannot tell apart (one a prefix of another, zero bytes where the padding
    /// is, long shared prefixes that differ only past four bytes) and keys that share less
    /// than their chunk's prefix: every search agrees with a BTreeMap's.
    #[test]
    fn searches_through_heads_match_a_btreemap_for_keys_heads_cannot_tell_apart() {
        let mut x: u64 = 99;
        let mut next = move || {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 33) as usize
        };
        let parts: [&[u8]; 8] =
            [b"/registry/pods/", b"default/", b"kube-system/", b"\0", b"\0\0", b"a", b"ab", b""];
        let mut made = Vec::new();
        for _ in 0..6000 {
            let mut k = Vec::new();
            for _ in 0..1 + next() % 4 {
                k.extend_from_slice(parts[next() % parts.len()]);
            }
            if next() % 2 == 0 {
                k.extend_from_slice(format!("{:x}", next() % 300).as_bytes());
            }
            if !k.is_empty() {
                made.push(Bytes::from(k));
            }
        }
        made.sort();
        made.dedup();
        // Slot i holds made[order[i]]: inserted in a shuffled order.
        let mut order: Vec<usize> = (0..made.len()).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, next() % (i + 1));
        }
        let slab = Slab(order.iter().map(|&i| made[i].clone()).collect());
        let mut idx = OrderedIndex::new();
        let mut model = BTreeMap::new();
        for (slot, k) in slab.0.iter().enumerate() {
            idx.insert(&slab, k, slot as u32, true);
            model.insert(k.clone(), slot as u32);
            if slot % 5 == 0 {
                let victim = slab.0[next() % (slot + 1)].clone();
                if model.remove(&victim).is_some() {
                    idx.remove(&slab, &victim);
                }
            }
        }
        check_heads(&idx, &slab);
        assert!(idx.chunks.len() > 4, "splits happened");
        assert!(idx.chunks.iter().any(|c| c.skip > 8), "some chunk skips a long prefix");
        let listed: Vec<_> =
            idx.iter().map(|e| Bytes::copy_from_slice(slab.key(e.slot()))).collect();
        assert_eq!(listed, model.keys().cloned().collect::<Vec<_>>());
        for probe in made.iter().chain([&Bytes::from_static(b"/registry/pods/default/\0\x01")]) {
            let found = idx.find(&slab, probe).map(|(c, p)| idx.chunks[c].entries[p].slot());
            assert_eq!(found, model.get(probe).copied(), "find {probe:?}");
            let from: Vec<_> = idx
                .iter_from(&slab, probe)
                .take(3)
                .map(|e| Bytes::copy_from_slice(slab.key(e.slot())))
                .collect();
            let want: Vec<_> =
                model.range(probe.clone()..).take(3).map(|(k, _)| k.clone()).collect();
            assert_eq!(from, want, "iter_from {probe:?}");
            let single = idx.count_live(&slab, &KeyRange::single(probe.clone()));
            assert_eq!(single, model.contains_key(probe) as u64, "count {probe:?}");
        }
    }

    /// A key that shares less with a chunk's keys than they share with each other, at either
    /// end of the chunk: the chunk's heads are rewritten for the shorter prefix.
    #[test]
    fn a_key_sharing_less_than_its_chunk_rewrites_the_heads() {
        let mut keys: Vec<Bytes> =
            (0..600).rev().map(|i| Bytes::from(format!("x/common/prefix/{i:03}"))).collect();
        keys.extend(
            [&b"x/c"[..], b"x/z", b"x/common/prefix/", b"x/common/prefix/599\0"]
                .map(Bytes::from_static),
        );
        let slab = Slab(keys.clone());
        let mut idx = OrderedIndex::new();
        for (slot, k) in keys.iter().enumerate().take(600) {
            idx.insert(&slab, k, slot as u32, true);
        }
        let skips: Vec<usize> = idx.chunks.iter().map(|c| c.skip).collect();
        assert!(skips.iter().all(|&s| s >= b"x/common/prefix/".len()), "{skips:?}");
        for (slot, k) in keys.iter().enumerate().skip(600) {
            idx.insert(&slab, k, slot as u32, true);
            check_heads(&idx, &slab);
        }
        assert_eq!(idx.chunks[0].skip, 3, "x/c shares 3 bytes with the first chunk's keys");
        assert_eq!(idx.chunks.last().unwrap().skip, 2, "x/z shares 2 with the last chunk's");
        let mut sorted = keys.clone();
        sorted.sort();
        let listed: Vec<_> =
            idx.iter().map(|e| Bytes::copy_from_slice(slab.key(e.slot()))).collect();
        assert_eq!(listed, sorted);
        for (slot, k) in keys.iter().enumerate() {
            assert_eq!(
                idx.find(&slab, k).map(|(c, p)| idx.chunks[c].entries[p].slot()),
                Some(slot as u32)
            );
        }
    }

    #[test]
    fn keys_appended_in_order_fill_their_chunks() {
        let slab = Slab((0..10_000).map(key).collect());
        let mut idx = OrderedIndex::new();
        for i in 0..10_000 {
            idx.insert(&slab, &key(i), i, true);
        }
        let full = idx.chunks.iter().filter(|c| c.entries.len() == MAX_CHUNK).count();
        assert_eq!(full, idx.chunks.len() - 1, "every chunk but the last is full");
        assert_eq!(idx.count_live(&slab, &KeyRange::from_request(&key(10), &key(9000))), 8990);
    }
}
