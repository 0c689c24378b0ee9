//! Backups of the store: the state at one revision, every key's history since the compaction
//! and the leases. A Raft snapshot writes one in the `wal::backup` format (without the auth
//! state, which the machine state beside it carries; a caller may add it, as bytes: the store
//! knows nothing of auth), and [`Store::install_backup`] reads that format back.
//! Maintenance.Snapshot takes its versions and leases instead (`Backup::versions`) and streams
//! them as etcd's bbolt snapshot.db (`backend::schema`).
//!
//! A backup reads the partitions in chunks, as a WAL snapshot does, so writers wait for one
//! chunk at a time, never for the whole dump; it reads only versions at or below its revision,
//! so concurrent writes (all above it) cannot tear it. Compaction is what could: it frees the
//! versions a backup has not read yet. So a backup pins the history (`HistoryPin`) from the
//! moment its revision is fixed until it is dropped: a compaction meanwhile takes effect for
//! readers at once, without waiting, and frees nothing until the last pin goes.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::key_index::{KeyRecord, first_kept};
use super::partition::Partition;
use super::store::{HistoryPin, Store};
use crate::wal::backup::{BackupError, Encoder, Item, SHA_LEN, Summary, read_at};
use crate::wal::record::Version;
use std::path::Path;

/// Keys read per partition lock.
const CHUNK_KEYS: usize = 1024;
/// About how many bytes [`Backup::write`] hands out at a time.
const PIECE_BYTES: usize = 256 << 10;

/// What [`Backup::walk`] hands out: a partition (its prefix), then its keys with their records
/// at or below the backup's revision.
enum Walk<'a> {
    Partition(&'a Bytes),
    Key(Bytes, Vec<KeyRecord>),
}

/// A backup of the store fixed at one revision. It pins the history (see `HistoryPin`):
/// compactions meanwhile free nothing, and do not wait for it.
pub struct Backup<'a> {
    store: &'a Store,
    pin: Option<HistoryPin>,
    rev: i64,
    compacted: i64,
    leases: Vec<(i64, i64)>,
    /// The prefixes compacted on their own by then, and their revisions.
    floors: Vec<(Bytes, i64)>,
    /// See [`Backup::with_auth`].
    auth: Option<Bytes>,
    parts: Vec<Arc<Partition>>,
}

impl std::fmt::Debug for Backup<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backup")
            .field("rev", &self.rev)
            .field("compacted", &self.compacted)
            .finish()
    }
}

impl Store {
    /// Fixes a backup at the current revision. `leases` lists the leases (id, granted TTL).
    pub fn backup(&self, leases: impl FnOnce() -> Vec<(i64, i64)>) -> Backup<'_> {
        let pin = self.pin_history();
        let rev = self.commit.clock.committed();
        self.backup_at(rev, leases(), pin)
    }
}

impl Drop for Backup<'_> {
    fn drop(&mut self) {
        if let Some(pin) = self.pin.take() {
            self.store.unpin_history(pin);
        }
    }
}

impl Store {
    /// A backup of revision `rev` (at or above the compaction when `pin` was taken), taken
    /// later: a Raft snapshot fixes its revision and pins the history between two applies, and
    /// writes it while applying goes on. The backup returns the pin when dropped.
    pub fn backup_at(&self, rev: i64, leases: Vec<(i64, i64)>, pin: HistoryPin) -> Backup<'_> {
        let compacted = pin.compacted;
        // A partition created after `rev` holds no version at or below it: an empty group. A
        // prefix compacted above `rev` was not compacted at `rev` (and the pin keeps what it
        // would free).
        let parts = self.table.read().all.clone();
        let floors = self.floors().into_iter().filter(|f| f.1 <= rev).collect();
        Backup { store: self, pin: Some(pin), rev, compacted, leases, floors, auth: None, parts }
    }

    /// Replaces everything the store holds with the backup in `path` (starting `offset` bytes
    /// in): keys with their histories since its compaction, the compaction, the revision. The
    /// store must not be written meanwhile (a cluster installs a snapshot between two applies);
    /// readers see the old state, then the new one. Returns what the backup holds besides keys
    /// (its leases, for the lessor). Nothing changes if the backup cannot be read.
    pub fn install_backup(&self, path: &Path, offset: u64) -> Result<Summary, BackupError> {
        let mut fresh = Store::new(self.config.clone());
        let summary = read_at(path, offset, false, &mut |item| {
            if let Item::Key(key, versions) = item {
                let p = fresh.partition_for_key(&key);
                let mut st = p.state.write();
                for v in versions {
                    st.restore(KeyRecord::from_version(&key, &v));
                }
            }
            Ok(())
        })?;
        fresh.finish_restore(summary.rev, summary.compacted, &summary.floors);
        let mut compaction = self.compaction.lock();
        std::mem::swap(&mut *self.table.write(), &mut *fresh.table.write());
        self.compact_rev.store(summary.compacted, Ordering::SeqCst);
        // A compaction set before the install and not walked yet is in the backup already; a
        // physical Compaction's answer waiting for its walk goes on.
        self.installed_compaction(&mut compaction, summary.compacted);
        self.commit.events.replace_with(&fresh.commit.events);
        self.commit.clock.reset(summary.rev);
        Ok(summary)
    }
}

impl Backup<'_> {
    /// Makes the backup carry the auth state `state` (encoded by `auth::codec`). A Raft
    /// snapshot does without: its machine state carries the auth state already.
    pub fn with_auth(mut self, state: Bytes) -> Self {
        self.auth = Some(state);
        self
    }

    /// The revision whose state the backup holds.
    pub fn revision(&self) -> i64 {
        self.rev
    }

    /// The backup's size without its trailing sha256 (what etcd reports as the snapshot's
    /// size), found by encoding it once without keeping the bytes.
    pub fn size(&self) -> u64 {
        let mut e = self.encoder();
        self.encode(&mut e, &mut |e| {
            e.discard();
            true
        });
        e.len() - SHA_LEN as u64
    }

    /// Hands the backup's bytes to `out` in pieces of about 256 KiB, the sha256 in the last.
    /// Stops early, returning false, if `out` returns false (the receiver is gone).
    pub fn write(&self, out: &mut dyn FnMut(Vec<u8>) -> bool) -> bool {
        let mut e = self.encoder();
        self.encode(&mut e, &mut |e| out(e.take()))
    }

    /// The compaction revision the backup holds (-1 if none).
    pub fn compacted(&self) -> i64 {
        self.compacted
    }

    /// The leases (id, granted TTL).
    pub fn leases(&self) -> &[(i64, i64)] {
        &self.leases
    }

    /// Every version the backup holds with its key, in revision order (etcd's `key` bucket's
    /// order), as etcd's compaction leaves them (versions a pinned history still holds below
    /// the compaction are left out). The values are shared with the store, not copied.
    pub fn versions(&self) -> Vec<(Bytes, Version)> {
        let mut out = Vec::new();
        let mut compacted = self.compacted;
        self.walk(&mut |item| {
            if let Walk::Partition(prefix) = item {
                // A prefix compacted on its own keeps its history from the revision before.
                compacted = self.compacted.max(super::store::floor_of(&self.floors, prefix) - 1);
            }
            if let Walk::Key(key, recs) = item {
                let kept = first_kept(&recs, compacted);
                out.extend(recs.iter().skip(kept).map(|r| (key.clone(), r.to_version())));
            }
            true
        });
        out.sort_unstable_by_key(|(_, v)| (v.main, v.sub));
        out
    }

    /// Hands every partition and then each of its keys (in key order) to `visit`, a chunk of
    /// keys per partition lock. Keys the WAL excludes are left out: the server would not
    /// recover them after a restart either, and restored they would come back stale after the
    /// restored server's next restart, since their later changes are not logged. Stops early,
    /// returning false, if `visit` does.
    fn walk(&self, visit: &mut dyn FnMut(Walk) -> bool) -> bool {
        let wal = self.store.wal();
        for p in &self.parts {
            if !visit(Walk::Partition(&p.prefix)) {
                return false;
            }
            let mut after = None;
            loop {
                let chunk = p.state.read().chunk_at(after.as_ref(), self.rev, CHUNK_KEYS);
                let Some(last) = chunk.last() else { break };
                after = Some(last.0.clone());
                for (k, recs) in chunk {
                    if wal.is_some_and(|w| w.excluded(&k)) {
                        continue;
                    }
                    if !visit(Walk::Key(k, recs)) {
                        return false;
                    }
                }
            }
        }
        true
    }

    fn encoder(&self) -> Encoder {
        Encoder::new(self.rev, self.compacted, self.auth.clone())
    }

    fn encode(&self, e: &mut Encoder, flush: &mut dyn FnMut(&mut Encoder) -> bool) -> bool {
        let done = self.walk(&mut |item| match item {
            Walk::Partition(prefix) => {
                e.partition(prefix);
                true
            }
            Walk::Key(key, recs) => {
                e.key(key, recs.iter().map(KeyRecord::to_version).collect());
                e.buffered() < PIECE_BYTES || flush(e)
            }
        });
        if !done {
            return false;
        }
        for &(id, ttl) in &self.leases {
            e.lease(id, ttl);
        }
        for (prefix, rev) in &self.floors {
            e.floor(prefix, *rev);
        }
        e.end();
        flush(e)
    }
}
