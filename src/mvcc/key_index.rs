//! The history of one key: every version since the last compaction, oldest first.
//!
//! etcd keeps a key's revisions in "generations" (create .. delete) and the values in bbolt; here
//! both live together because the whole store is in memory. A delete is a tombstone record, and
//! a later put starts a new generation (version 1, create revision = that put).

use bytes::Bytes;

use crate::revision::Revision;

/// One version of a key. A tombstone has `version == 0`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyRecord {
    /// When this version was written.
    pub rev: Revision,
    /// The main revision that created the key's current generation (0 for a tombstone).
    pub create_rev: i64,
    /// Number of puts in this generation (0 for a tombstone).
    pub version: i64,
    /// The lease the key is attached to (0 for none).
    pub lease: i64,
    pub value: Bytes,
}

impl KeyRecord {
    pub fn is_tombstone(&self) -> bool {
        self.version == 0
    }

    /// A tombstone written at `rev`.
    pub fn tombstone(rev: Revision) -> Self {
        Self { rev, create_rev: 0, version: 0, lease: 0, value: Bytes::new() }
    }
}

/// All retained versions of a key, ascending by revision.
#[derive(Debug)]
pub struct KeyHistory {
    pub key: Bytes,
    records: Vec<KeyRecord>,
    /// Set while the key sits in its partition's compaction queue, so it is queued once.
    pub queued: bool,
}

impl KeyHistory {
    pub fn new(key: Bytes) -> Self {
        Self { key, records: Vec::with_capacity(1), queued: false }
    }

    /// The newest record, tombstones included.
    pub fn last(&self) -> Option<&KeyRecord> {
        self.records.last()
    }

    /// The live version at the newest revision, if the key exists there.
    pub fn latest(&self) -> Option<&KeyRecord> {
        self.records.last().filter(|r| !r.is_tombstone())
    }

    /// The live version as of main revision `rev`.
    pub fn at(&self, rev: i64) -> Option<&KeyRecord> {
        // Reads are usually at or near the newest revision: search from the end.
        self.records.iter().rev().find(|r| r.rev.main <= rev).filter(|r| !r.is_tombstone())
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
        debug_assert!(self.records.last().is_none_or(|r| r.rev < record.rev));
        self.records.push(record);
    }

    /// Every retained record, oldest first.
    pub fn records(&self) -> &[KeyRecord] {
        &self.records
    }

    /// Whether a compaction at some later revision could drop anything.
    pub fn compactable(&self) -> bool {
        self.records.len() > 1 || self.records.last().is_some_and(KeyRecord::is_tombstone)
    }

    /// Compacts at revision `rev`: drops every version superseded at or before `rev`, and the
    /// newest version at or before `rev` too when it is a tombstone. Returns the bytes freed.
    pub fn compact(&mut self, rev: i64) -> usize {
        let Some(keep) = self.records.iter().rposition(|r| r.rev.main <= rev) else {
            return 0;
        };
        let drop_to = if self.records[keep].is_tombstone() { keep + 1 } else { keep };
        let freed = self.records[..drop_to].iter().map(record_cost).sum();
        self.records.drain(..drop_to);
        freed
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

/// The memory a record holds, for `dbSize` and the quota: value bytes plus the record itself.
pub fn record_cost(r: &KeyRecord) -> usize {
    r.value.len() + std::mem::size_of::<KeyRecord>()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(main: i64, create: i64, version: i64, v: &'static str) -> KeyRecord {
        KeyRecord {
            rev: Revision::new(main, 0),
            create_rev: create,
            version,
            lease: 0,
            value: Bytes::from_static(v.as_bytes()),
        }
    }

    #[test]
    fn reads_pick_the_newest_version_at_or_below_the_revision() {
        let mut h = KeyHistory::new(Bytes::from_static(b"k"));
        h.push(put(2, 2, 1, "a"));
        h.push(put(4, 2, 2, "b"));
        h.push(KeyRecord::tombstone(Revision::new(6, 0)));
        h.push(put(8, 8, 1, "c"));
        assert!(h.at(1).is_none());
        assert_eq!(h.at(3).unwrap().value, "a");
        assert_eq!(h.at(5).unwrap().value, "b");
        assert!(h.at(6).is_none() && h.at(7).is_none());
        assert_eq!(h.at(9).unwrap().version, 1);
    }

    #[test]
    fn compaction_keeps_the_newest_live_version_at_or_below_it() {
        let mut h = KeyHistory::new(Bytes::from_static(b"k"));
        h.push(put(2, 2, 1, "a"));
        h.push(put(4, 2, 2, "b"));
        h.compact(5);
        assert_eq!(h.records().len(), 1);
        assert_eq!(h.at(5).unwrap().value, "b");
        h.push(KeyRecord::tombstone(Revision::new(6, 0)));
        h.compact(6);
        assert!(h.is_empty(), "a delete at or below the compaction revision removes the key");
    }

    #[test]
    fn compaction_below_every_record_keeps_everything() {
        let mut h = KeyHistory::new(Bytes::from_static(b"k"));
        h.push(put(5, 5, 1, "a"));
        assert_eq!(h.compact(3), 0);
        assert_eq!(h.records().len(), 1);
    }
}
