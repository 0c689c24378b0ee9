//! The history of one key: every version since the last compaction, oldest first.
//!
//! etcd keeps a key's revisions in "generations" (create .. delete) and the values in bbolt; here
//! both live together because the whole store is in memory. A delete is a tombstone record, and
//! a later put starts a new generation (version 1, create revision = that put).

use bytes::Bytes;

use super::kv_buf::KvBuf;
use super::request::KeyValue;
use crate::revision::Revision;
use crate::wal::record::Version;

/// One version of a key: 56 bytes, its key and value in a buffer of their own ([`KvBuf`]). A
/// tombstone has `version == 0`, and shares the buffer of the version it deleted (its key is
/// that one's; its value reads as empty), so a delete allocates nothing.
#[derive(Clone, Debug)]
pub struct KeyRecord {
    /// When this version was written.
    pub rev: Revision,
    /// The main revision that created the key's current generation (0 for a tombstone).
    pub create_rev: i64,
    /// Number of puts in this generation (0 for a tombstone).
    pub version: i64,
    /// The lease the key is attached to (0 for none).
    pub lease: i64,
    /// The key, and the value of this version (or, for a tombstone, of the one it deleted).
    pub data: KvBuf,
}

/// Equal as clients would see them: a tombstone's buffer may or may not hold the value it
/// deleted (a delete's does, one replayed for a key not yet seen does not).
impl PartialEq for KeyRecord {
    fn eq(&self, other: &Self) -> bool {
        (self.rev, self.create_rev, self.version, self.lease)
            == (other.rev, other.create_rev, other.version, other.lease)
            && self.key() == other.key()
            && self.value() == other.value()
    }
}

impl Eq for KeyRecord {}

impl KeyRecord {
    pub fn is_tombstone(&self) -> bool {
        self.version == 0
    }

    /// A tombstone written at `rev` over the version whose buffer is `data`.
    pub fn tombstone(rev: Revision, data: KvBuf) -> Self {
        Self { rev, create_rev: 0, version: 0, lease: 0, data }
    }

    pub fn key(&self) -> &[u8] {
        self.data.key()
    }

    pub fn value(&self) -> &[u8] {
        if self.is_tombstone() { b"" } else { self.data.value() }
    }

    /// The client-facing form: views of the buffer (one small allocation, the views' owner).
    /// A tombstone gives what etcd's DELETE event carries: its key and mod revision.
    pub fn to_kv(&self) -> KeyValue {
        let (key, value) = self.data.to_bytes();
        KeyValue {
            key,
            create_revision: self.create_rev,
            mod_revision: self.rev.main,
            version: self.version,
            value: if self.is_tombstone() { Bytes::new() } else { value },
            lease: self.lease,
        }
    }

    /// A logged version of `key` as the partition keeps it (WAL replay, backup restore), its
    /// key and value copied out of the log record or snapshot they were read from: a view
    /// would keep that whole buffer alive as long as the version lives.
    pub fn from_version(key: &[u8], v: &Version) -> Self {
        KeyRecord {
            rev: Revision::new(v.main, v.sub),
            create_rev: v.create_rev,
            version: v.version,
            lease: v.lease,
            data: KvBuf::new(key, if v.version == 0 { b"" } else { &v.value }),
        }
    }

    /// The version as the log and backups write it.
    pub fn to_version(&self) -> Version {
        let (_, value) = self.data.to_bytes();
        Version {
            main: self.rev.main,
            sub: self.rev.sub,
            create_rev: self.create_rev,
            version: self.version,
            lease: self.lease,
            value: if self.is_tombstone() { Bytes::new() } else { value },
        }
    }
}

/// All retained versions of a key, ascending by revision: 56 bytes with its one version (the
/// common case after a compaction), or plus a vector of them. The key is its records' (each
/// version's buffer holds it): a history never outlives its last record.
#[derive(Debug)]
pub struct KeyHistory {
    records: Records,
}

#[derive(Debug)]
enum Records {
    /// A single version, inline: no allocation of its own.
    One(KeyRecord),
    /// None, or two and more.
    Many(Vec<KeyRecord>),
}

impl KeyHistory {
    /// A key with its first version.
    pub fn new(first: KeyRecord) -> Self {
        Self { records: Records::One(first) }
    }

    /// What a freed slot holds: no records, no allocation.
    pub fn vacant() -> Self {
        Self { records: Records::Many(Vec::new()) }
    }

    /// The key (empty for a vacant slot).
    pub fn key(&self) -> &[u8] {
        self.last().map_or(b"", KeyRecord::key)
    }

    /// The newest record, tombstones included.
    pub fn last(&self) -> Option<&KeyRecord> {
        self.records().last()
    }

    /// The live version at the newest revision, if the key exists there.
    pub fn latest(&self) -> Option<&KeyRecord> {
        self.last().filter(|r| !r.is_tombstone())
    }

    /// The live version as of main revision `rev`.
    pub fn at(&self, rev: i64) -> Option<&KeyRecord> {
        // Reads are usually at or near the newest revision: search from the end.
        self.records().iter().rev().find(|r| r.rev.main <= rev).filter(|r| !r.is_tombstone())
    }

    /// Whether the key exists as of `rev`.
    pub fn live_at(&self, rev: i64) -> bool {
        self.at(rev).is_some()
    }

    pub fn is_live(&self) -> bool {
        self.latest().is_some()
    }

    /// Appends a newer version. Revisions must increase.
    pub fn push(&mut self, record: KeyRecord) {
        debug_assert!(self.last().is_none_or(|r| r.rev < record.rev));
        match &mut self.records {
            Records::Many(v) if v.is_empty() => self.records = Records::One(record),
            Records::Many(v) => {
                let len = v.len();
                if len == v.capacity() {
                    // Grow by half rather than double: a history kept until compaction wastes
                    // a third of its records at most, instead of half (2, 3, 4, 6, 9, 13, ...).
                    v.reserve_exact((len / 2).max(1));
                }
                v.push(record);
            }
            Records::One(_) => {
                let Records::One(first) =
                    std::mem::replace(&mut self.records, Records::Many(vec![]))
                else {
                    unreachable!("matched above")
                };
                self.records = Records::Many(vec![first, record]);
            }
        }
    }

    /// Position of the record written at main revision `main` (a key has at most one).
    pub fn position(&self, main: i64) -> Option<usize> {
        self.records().binary_search_by(|r| r.rev.main.cmp(&main)).ok()
    }

    /// Every retained record, oldest first.
    pub fn records(&self) -> &[KeyRecord] {
        match &self.records {
            Records::One(r) => std::slice::from_ref(r),
            Records::Many(v) => v,
        }
    }

    /// Whether a compaction at some later revision could drop anything. A partition queues a
    /// key for compaction exactly while this holds.
    pub fn compactable(&self) -> bool {
        let recs = self.records();
        recs.len() > 1 || recs.last().is_some_and(KeyRecord::is_tombstone)
    }

    /// Compacts at revision `rev`: takes out every version superseded at or before `rev`, and
    /// the newest version at or before `rev` too when it is a tombstone, into `dropped`.
    /// Returns the bytes they hold. The caller drops them after releasing its partition's
    /// lock: freeing a million values is most of a compaction's work, and writers would wait
    /// for it.
    pub fn compact(&mut self, rev: i64, dropped: &mut Vec<KeyRecord>) -> usize {
        let recs = self.records();
        let drop_to = first_kept(recs, rev);
        if drop_to == 0 {
            return 0;
        }
        let freed = recs[..drop_to].iter().map(record_cost).sum();
        let mut v = match std::mem::replace(&mut self.records, Records::Many(vec![])) {
            Records::Many(v) => v,
            // A single version that goes is a tombstone: nothing is left.
            Records::One(r) => {
                dropped.push(r);
                return freed;
            }
        };
        dropped.extend(v.drain(..drop_to));
        self.records = match v.len() {
            // The single version left goes back inline.
            1 => Records::One(v.pop().expect("one left")),
            // A key written often between compactions and then left alone would otherwise keep
            // room for all those versions.
            n if v.capacity() > 2 * n => {
                v.shrink_to_fit();
                Records::Many(v)
            }
            _ => Records::Many(v),
        };
        freed
    }

    pub fn is_empty(&self) -> bool {
        self.records().is_empty()
    }
}

/// The memory a record holds, for `dbSize` and the quota: value bytes plus the record itself.
pub fn record_cost(r: &KeyRecord) -> usize {
    r.value().len() + std::mem::size_of::<KeyRecord>()
}

/// The index of the first of `records` (one key's, oldest first) that a compaction at `rev`
/// keeps: every version superseded at or before `rev` goes, and the newest one at or before
/// `rev` too when it is a tombstone. Also what a backup or HashKV reads of a history whose
/// compaction a pin holds off.
pub fn first_kept(records: &[KeyRecord], rev: i64) -> usize {
    match records.iter().rposition(|r| r.rev.main <= rev) {
        Some(keep) if records[keep].is_tombstone() => keep + 1,
        Some(keep) => keep,
        None => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tombstone(main: i64) -> KeyRecord {
        KeyRecord::tombstone(Revision::new(main, 0), KvBuf::new(b"k", b"deleted"))
    }

    fn put(main: i64, create: i64, version: i64, v: &'static str) -> KeyRecord {
        KeyRecord {
            rev: Revision::new(main, 0),
            create_rev: create,
            version,
            lease: 0,
            data: KvBuf::new(b"k", v.as_bytes()),
        }
    }

    #[test]
    fn reads_pick_the_newest_version_at_or_below_the_revision() {
        let mut h = KeyHistory::vacant();
        h.push(put(2, 2, 1, "a"));
        h.push(put(4, 2, 2, "b"));
        h.push(tombstone(6));
        h.push(put(8, 8, 1, "c"));
        assert!(h.at(1).is_none());
        assert_eq!(h.at(3).unwrap().value(), b"a");
        assert_eq!(h.at(5).unwrap().value(), b"b");
        assert!(h.at(6).is_none() && h.at(7).is_none());
        assert_eq!(h.at(9).unwrap().version, 1);
    }

    #[test]
    fn compaction_keeps_the_newest_live_version_at_or_below_it() {
        let mut h = KeyHistory::vacant();
        h.push(put(2, 2, 1, "a"));
        h.push(put(4, 2, 2, "b"));
        let mut dropped = vec![];
        h.compact(5, &mut dropped);
        assert_eq!(h.records().len(), 1);
        assert_eq!(h.at(5).unwrap().value(), b"b");
        h.push(tombstone(6));
        h.compact(6, &mut dropped);
        assert!(h.is_empty(), "a delete at or below the compaction revision removes the key");
        let revs: Vec<i64> = dropped.iter().map(|r| r.rev.main).collect();
        assert_eq!(revs, [2, 4, 6], "the caller gets every version dropped, to free later");
    }

    #[test]
    fn one_version_is_inline_and_more_grow_by_half_until_compaction() {
        assert!(
            std::mem::size_of::<KeyHistory>() == 56,
            "the single version shares the vector's room"
        );
        let mut h = KeyHistory::vacant();
        let cap = |h: &KeyHistory| match &h.records {
            Records::One(_) => 1,
            Records::Many(v) => v.capacity(),
        };
        let caps: Vec<usize> = (1..=10)
            .map(|i| {
                h.push(put(i, 1, i, "v"));
                cap(&h)
            })
            .collect();
        assert_eq!(caps, [1, 2, 3, 4, 6, 6, 9, 9, 9, 13]);
        assert_eq!(h.position(7), Some(6));
        h.compact(10, &mut vec![]);
        assert!(matches!(h.records, Records::One(_)), "back inline");
        h.push(put(11, 1, 11, "w"));
        h.push(put(12, 1, 12, "x"));
        h.compact(11, &mut vec![]);
        assert_eq!(h.records().len(), 2);
        h.compact(12, &mut vec![]);
        assert!(matches!(h.records, Records::One(_)));
        assert_eq!(h.at(12).unwrap().value(), b"x");
        h.push(tombstone(13));
        h.push(put(14, 14, 1, "y"));
        h.push(put(15, 14, 2, "z"));
        h.compact(13, &mut vec![]);
        assert_eq!(h.records().len(), 2);
        h.compact(15, &mut vec![]);
        assert_eq!(h.records().len(), 1);
        h.push(tombstone(16));
        h.compact(16, &mut vec![]);
        assert!(h.is_empty() && !h.compactable());
        h.push(put(17, 17, 1, "again"));
        assert_eq!(h.latest().unwrap().value(), b"again");
    }

    #[test]
    fn compaction_below_every_record_keeps_everything() {
        let mut h = KeyHistory::vacant();
        h.push(put(5, 5, 1, "a"));
        assert_eq!(h.compact(3, &mut vec![]), 0);
        assert_eq!(h.records().len(), 1);
    }
}
