//! The store and its WAL: opening a store from its data directory (recovery), and writing
//! snapshots of it.
//!
//! Recovery applies versions exactly as logged (create revision, version, sub-revision and
//! lease included) straight into the partitions, then rebuilds what is derived from them: the
//! event log (which reads every retained version since the compaction revision back from the
//! partitions as an event, its predecessor the event's `prev_kv`), the compaction state and the
//! read watermark.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::event_log::EventLog;
use super::key_index::KeyRecord;
use super::kv_buf::KvBuf;
use super::store::{Commit, Store, StoreConfig};
use crate::revision::Revision;
use crate::wal::record::{Op, Version};
use crate::wal::recover::{Recovered, Replay};
use crate::wal::snapshot::{SnapshotWriter, on_each_core};
use crate::wal::{self, Mode, Wal};

/// Why a store could not be opened.
pub type OpenError = Box<dyn std::error::Error + Send + Sync>;

impl Store {
    /// Opens the store of `opts.dir`: recovers it and starts its WAL. Without a WAL (mode
    /// none) the store starts empty. Returns what recovery found besides keys (leases).
    pub fn open(config: StoreConfig, opts: wal::Options) -> Result<(Store, Recovered), OpenError> {
        if opts.mode == Mode::None {
            return Ok((
                Store::new(config),
                Recovered { rev: 1, compacted: -1, ..Default::default() },
            ));
        }
        if opts.dir.is_etcd() {
            return Err(format!(
                "{} holds an etcd member's data, which only a member alone imports \
                 (`server::etcdserver::bootstrap::etcd_data_dir`)",
                opts.dir.display()
            )
            .into());
        }
        let lock = wal::lock_dir(&opts.dir)?;
        let started = std::time::Instant::now();
        let mut store = Store::new(config.clone());
        let rec = {
            let ctx = Restore { store: &store };
            wal::recover::recover(&opts.dir, opts.repair, &ctx)?
        };
        store.finish_restore(rec.rev, rec.compacted, &rec.floors);
        tracing::info!(
            revision = rec.rev,
            keys = store.live_keys(),
            seconds = format!("{:.3}", started.elapsed().as_secs_f64()),
            "store: opened (log replayed, event history rebuilt)"
        );
        let wal = Wal::new(opts, rec.meta_seq, rec.rev)?;
        wal.stats.since_snapshot.store(rec.bytes, Ordering::Relaxed);
        store.commit.wal.set(wal.clone()).expect("a new store has no WAL");
        wal.start(store.commit.clone());
        store._dir_lock = Some(lock);
        Ok((store, rec))
    }

    /// Makes the recovered partitions a consistent store at revision `rev`: liveness and
    /// change logs in order, an event log reading the revisions since the compaction back from
    /// them, compaction applied (the store's at `compacted`, and each prefix's of `floors`), the
    /// clock at `rev`.
    pub(super) fn finish_restore(&mut self, rev: i64, compacted: i64, floors: &[(Bytes, i64)]) {
        let started = std::time::Instant::now();
        let parts = self.table.read().all.clone();
        // A big store's partitions take seconds each to put in order, and to compact below.
        on_each_core(&parts, |p| p.state.write().sort_logs());
        let log = EventLog::new(compacted.max(2).min(rev + 1));
        for p in &parts {
            log.track(p.clone());
        }
        log.published_through(rev);
        if compacted > 0 {
            log.compact(compacted);
        }
        for (prefix, floor) in floors {
            log.set_floor(prefix, *floor);
        }
        self.commit = Arc::new(Commit::new(rev, log));
        self.compact_rev.store(compacted, Ordering::SeqCst);
        self.table.get_mut().floors = floors.to_vec();
        on_each_core(&parts, |p| {
            let floor = super::store::floor_of(floors, &p.prefix);
            let mut st = p.state.write();
            if compacted > 0 {
                st.compact(compacted);
            }
            if floor > 0 {
                st.floor = floor;
                st.compact(floor - 1);
            }
            p.sync_bytes(&st);
        });
        // The replayed log holds the versions the compaction dropped; dropping them again
        // here finishes the compaction on the restored store, as etcd finishes at start a
        // compaction its log scheduled (etcd logs this only for one a crash interrupted).
        // The history below the compaction is gone: the hash is the restored store's. Its
        // walk is left to `walk_compactions`, after the store serves, as etcd schedules the
        // compaction it finishes: at 10M objects it took seconds of the restart.
        if compacted > 0 {
            self.restored_compaction(compacted, started);
        }
    }

    /// Tells the lessor which recovered keys are attached to which lease (call once the lessor
    /// holds the recovered leases). Keys whose lease is gone become orphans the lessor deletes.
    ///
    /// On every core: at 10M objects (5M Events on 60 leases) attaching on one thread took
    /// 5 s of a restart. The keys are gathered by slot ranges, then each lease's set is built
    /// on its own, the largest first.
    pub fn attach_recovered_leases(&self) {
        let Some(l) = self.leases.get() else { return };
        let parts = self.table.read().all.clone();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
        let mut ranges = Vec::new();
        for p in &parts {
            let slots = p.state.read().slots();
            let step = slots.div_ceil(cores * 4).max(1);
            ranges
                .extend((0..slots).step_by(step as usize).map(|s| (p, s..s.saturating_add(step))));
        }
        let found = on_each_core(&ranges, |(p, range)| {
            let mut by_lease: hashbrown::HashMap<i64, Vec<Bytes>> = Default::default();
            p.state.read().for_each_slot_history(range.clone(), |h| {
                if let Some(r) = h.latest().filter(|r| r.lease != 0) {
                    // A copy: the record's key views its version's allocation, value and all.
                    by_lease.entry(r.lease).or_default().push(Bytes::copy_from_slice(h.key()));
                }
            });
            by_lease
        });
        let mut by_lease: hashbrown::HashMap<i64, Vec<Bytes>> = Default::default();
        for found in found {
            for (id, mut keys) in found {
                by_lease.entry(id).or_default().append(&mut keys);
            }
        }
        let mut leases: Vec<_> = by_lease.into_iter().collect();
        leases.sort_unstable_by_key(|(_, keys)| std::cmp::Reverse(keys.len()));
        let leases: Vec<_> =
            leases.into_iter().map(|lk| parking_lot::Mutex::new(Some(lk))).collect();
        on_each_core(&leases, |lk| {
            let (id, keys) = lk.lock().take().expect("each lease is attached once");
            l.attach_recovered(id, keys);
        });
    }

    /// Writes a snapshot of the durable state and deletes the WAL segments it covers.
    /// `leases` lists the leases (id, TTL); it is called after the snapshot's meta position is
    /// fixed, so that every lease change after it is replayed from the log.
    pub fn snapshot(&self, leases: impl FnOnce() -> Vec<(i64, i64)>) -> std::io::Result<()> {
        let Some(wal) = self.wal() else { return Ok(()) };
        let pin = self.pin_history();
        let result = self.write_snapshot(wal, leases);
        self.unpin_history(pin);
        result
    }

    /// Called with the history pinned.
    fn write_snapshot(
        &self,
        wal: &Arc<Wal>,
        leases: impl FnOnce() -> Vec<(i64, i64)>,
    ) -> std::io::Result<()> {
        wal.stats.since_snapshot.store(0, Ordering::Relaxed);
        let rev = self.commit.clock.committed();
        // Together, under the lock compactions hold from logging to taking effect: every
        // compaction logged at or below `meta_seq` (which recovery then skips) is in the
        // snapshot's compaction revision or its floors. The pinned history holds whatever a
        // compaction meanwhile would free: the snapshot still has it, and recovery drops it.
        let (meta_seq, compacted, floors) = {
            let _c = self.compaction.lock();
            let floors: Vec<_> = self.floors().into_iter().filter(|f| f.1 <= rev).collect();
            (wal.meta_seq(), self.compact_rev.load(Ordering::SeqCst).min(rev), floors)
        };
        let leases = leases();
        let w = SnapshotWriter::new(&wal.options().dir, rev, compacted, meta_seq)?;
        let parts = self.table.read().all.clone();
        for p in parts {
            let mut out = w.partition(&p.prefix)?;
            let mut after: Option<Bytes> = None;
            loop {
                let chunk = p.state.read().chunk_at(after.as_ref(), rev, 1024);
                let Some(last) = chunk.last() else { break };
                after = Some(last.0.clone());
                for (key, recs) in chunk {
                    if wal.excluded(&key) {
                        continue;
                    }
                    out.key(key, recs.iter().map(KeyRecord::to_version).collect())?;
                }
            }
            out.finish()?;
        }
        w.leases(&leases, &floors)?;
        w.commit(wal)
    }
}

/// Recovery's view of the store being rebuilt.
struct Restore<'a> {
    store: &'a Store,
}

impl Replay for Restore<'_> {
    fn snapshot_key(&self, _prefix: &Bytes, key: Bytes, versions: Vec<Version>) {
        let p = self.store.partition_for_key(&key);
        let mut st = p.state.write();
        for v in versions {
            st.restore(KeyRecord::from_version(&key, &v));
        }
    }

    fn txn(&self, _prefix: &Bytes, rev: i64, ops: Vec<Op>) {
        for op in ops {
            let (key, rec) = match op {
                Op::Put { sub, key, value, lease, create_rev, version } => {
                    let v = Version { main: rev, sub, create_rev, version, lease, value };
                    let rec = KeyRecord::from_version(&key, &v);
                    (key, rec)
                }
                Op::Delete { sub, key } => {
                    let rec = KeyRecord::tombstone(Revision::new(rev, sub), KvBuf::new(&key, b""));
                    (key, rec)
                }
            };
            self.store.partition_for_key(&key).state.write().restore(rec);
        }
    }
}
