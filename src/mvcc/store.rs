//! The MVCC store: partitions, the revision clock, and the one write path.
//!
//! One file of about 1,800 lines on purpose: the steps below and the reads at the watermark
//! are one protocol, whose correctness argument (lock order, allocation under the locks,
//! in-order completion and publication) has to be read in one place; the pieces that stand on
//! their own live beside it (`partition`, `key_index`, `index`, `event_log`, `persist`).
//!
//! # The write path
//! Every write (Put, DeleteRange, Txn, and later lease expiry) goes through [`Store::txn`]:
//! 1. **validate** the request's shape (no store access);
//! 2. copy each put's key and value into the buffer its version will keep, then **lock** the
//!    partitions it touches, exclusively, in ascending partition id;
//! 3. **evaluate** compares and per-op checks against the newest applied state of those
//!    partitions; errors stop here, before a revision is taken;
//! 4. **allocate** the next main revision (only if the chosen branch writes) and **apply** the
//!    ops with consecutive sub-revisions;
//! 5. unlock, make the revision's events from the records written, encode its **WAL** records
//!    (one per partition written), and **complete** the revision: once every lower revision is
//!    complete too, the in-order publisher hands it to the WAL, and once the WAL has written it
//!    (and synced it, in fsync mode) it is **published** to the event log and the watchers and
//!    the read watermark moves past it. Only then do readers see the write. Without a WAL,
//!    publication follows completion directly.
//!
//! The caller acknowledges the client once the watermark reaches the returned revision.
//!
//! # Why this is linearizable without a global lock
//! Two writes that touch a common partition are ordered by its lock, and a writer allocates
//! while holding all its locks, so revision order agrees with lock order. Writes to disjoint
//! partitions run in parallel and may apply out of revision order, which readers cannot see
//! because they read at the watermark. A txn that writes nothing answers after the watermark
//! passes the newest revision allocated when it evaluated, so it never reports state a later
//! read could miss.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use bytes::Bytes;
use hashbrown::HashMap;
use parking_lot::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::event::{Event, EventKind, RevisionEvents};
use super::event_log::{CommitObserver, EventLog};
use super::key_index::KeyRecord;
use super::kv_buf::KvBuf;
use super::partition::{Dropped, Partition, PartitionState, Written};
use super::request::*;
use super::validate;
use crate::backend::schema::{VersionView, key_bucket_crc};
use crate::error::{Error, Result};
use crate::keyspace::{KeyRange, Keyspace};
use crate::metrics::Serial;
use crate::revision::{Revision, RevisionClock};
use crate::wal::{self, Wal};

/// Store settings.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// kube-apiserver's `--etcd-prefix`, or one per kube-apiserver sharing the store; keys
    /// below each are partitioned by resource.
    pub registry_prefix: Vec<String>,
    /// Every top-level segment of a key partitions its resources as a registry prefix does
    /// (tenants declared at run time: `keyspace::Keyspace`).
    pub top_level_prefixes: bool,
    /// etcd's `--max-txn-ops`.
    pub max_txn_ops: usize,
    /// etcd's `--max-request-bytes`: the largest write, as encoded on the wire.
    pub max_request_bytes: usize,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            registry_prefix: vec!["/registry".into()],
            top_level_prefixes: false,
            max_txn_ops: 128,
            max_request_bytes: 1_572_864,
        }
    }
}

/// What the store needs of the lessor: whether a lease exists, and which keys are attached to
/// it (so a revoked lease knows what to delete). Called with partition locks held, so it must
/// not call back into the store (except through the decision it is handed by `remove_if`).
///
/// A key's attachment changes only under its partition's lock: a write attaches the key it puts
/// when it checks the lease (`reserve`, before its revision is allocated), and a revocation
/// removes a lease only while it holds the lock of every attached key's partition. So a write
/// that found the lease has either finished before the revocation's revision, or was refused.
pub trait LeaseIndex: Send + Sync + std::fmt::Debug {
    fn exists(&self, id: i64) -> bool;
    /// Attaches `key` to lease `id` if the lease exists, in one step with the check; false if
    /// it does not.
    fn reserve(&self, id: i64, key: &[u8]) -> bool;
    /// Attaches recovered keys to lease `id` (which may be gone: then they are deleted as
    /// orphans). Called for different leases from several threads at once.
    fn attach_recovered(&self, id: i64, keys: Vec<Bytes>);
    fn detach(&self, id: i64, key: &Bytes);
    /// The keys attached to lease `id`; `None` if there is no such lease.
    fn keys(&self, id: i64) -> Option<Vec<Bytes>>;
    /// Removes lease `id` if `decide`, called with its keys under the lessor's lock (nothing
    /// attaches or detaches meanwhile), says so. `None` if there is no such lease, else whether
    /// it was removed, and its keys.
    fn remove_if(
        &self,
        id: i64,
        decide: &mut dyn FnMut(&[Bytes]) -> bool,
    ) -> Option<(bool, Vec<Bytes>)>;
}

/// A write's response and the revision the client must not be answered before.
#[derive(Debug)]
pub struct Applied<T> {
    pub response: T,
    /// Wait until the watermark reaches this ([`Store::wait_visible`]) before replying.
    pub visible_at: i64,
}

/// A member alone's write that was not applied: its error, or the request itself, handed back
/// untouched because the member no longer applies writes directly (it is becoming a cluster
/// member, see [`Store::close_direct`]); the caller proposes it to Raft instead.
#[derive(Debug)]
pub enum Refused<R> {
    Error(Error),
    Closed(R),
}

impl<R> Refused<R> {
    /// The same refusal, with the handed-back request turned into another type.
    fn map<S>(self, f: impl FnOnce(R) -> S) -> Refused<S> {
        match self {
            Refused::Error(e) => Refused::Error(e),
            Refused::Closed(r) => Refused::Closed(f(r)),
        }
    }
}

impl<R> From<Error> for Refused<R> {
    fn from(e: Error) -> Self {
        Refused::Error(e)
    }
}

/// A write that cannot be handed back (from a cluster's log, or internal): only its error.
fn logged<T, R>(r: std::result::Result<T, Refused<R>>) -> Result<T> {
    r.map_err(|r| match r {
        Refused::Error(e) => e,
        Refused::Closed(_) => unreachable!("only direct writes are handed back"),
    })
}

/// A compaction done (and durable): the header revision to answer with.
#[derive(Debug)]
pub struct Compacted {
    pub revision: i64,
}

/// Compactions and the pins on history (see [`HistoryPin`]).
#[derive(Debug, Default)]
pub(super) struct CompactionState {
    /// Backups and snapshots open: while there is one, a compaction takes effect for readers at
    /// once but frees nothing.
    pins: usize,
    /// The newest compaction whose freeing waits for the pins to go.
    deferred: Option<i64>,
    /// The compactions of prefixes whose freeing waits for the pins to go.
    deferred_prefixes: Vec<(Bytes, i64)>,
    /// Compactions set (readers already refused below them) whose walks have not run yet, in
    /// the order they were set: see [`Store::set_compaction`].
    unwalked: std::collections::VecDeque<Unwalked>,
}

/// A compaction set but not walked yet: its hash and its freeing are still to come.
#[derive(Debug)]
struct Unwalked {
    /// The prefix compacted on its own ([`Store::compact_prefix`]); `None`: the whole store.
    prefix: Option<Bytes>,
    /// The prefixes compacted on their own when it was set: its hash reflects those, on every
    /// member alike, whatever was set between it and its walk.
    floors: Vec<(Bytes, i64)>,
    rev: i64,
    /// The compaction revision before it: its hash covers the history from there.
    before: i64,
    started: std::time::Instant,
}

/// A pin on the store's history: while it lives, compactions free nothing (they still take
/// effect for readers), so a backup or snapshot fixed at one revision can read every version
/// it needs however long it takes, and a compaction never waits for it. Returned to
/// [`Store::unpin_history`], which frees what compactions deferred.
#[derive(Debug)]
#[must_use = "a pin holds off compaction until it is returned"]
pub struct HistoryPin {
    /// The compaction revision when the pin was taken (-1 before the first).
    pub compacted: i64,
}

/// The partition table. Partitions are created on first use and never removed, so an
/// `Arc<Partition>` handed out stays the partition of its prefix forever.
#[derive(Debug)]
pub(super) struct Table {
    by_prefix: HashMap<Bytes, Arc<Partition>>,
    /// Resource partitions ordered by prefix: their key intervals are disjoint, so walking them
    /// in this order yields keys in order.
    sorted: Vec<Arc<Partition>>,
    /// Every partition, by id; id 0 is the default partition.
    pub(super) all: Vec<Arc<Partition>>,
    /// The prefixes compacted on their own ([`Store::compact_prefix`]: a tenant's history),
    /// each with its revision, in prefix order. A partition created under one starts with it
    /// as its floor.
    pub(super) floors: Vec<(Bytes, i64)>,
}

/// The floor `floors` give a partition of prefix `prefix` (or a key): the revision of the
/// newest compaction of a prefix it lies under; 0 if none.
pub(super) fn floor_of(floors: &[(Bytes, i64)], prefix: &[u8]) -> i64 {
    if prefix.is_empty() {
        return 0;
    }
    floors.iter().filter(|(p, _)| prefix.starts_with(p)).map(|&(_, r)| r).max().unwrap_or(0)
}

/// A completed revision on its way out: its events, and its WAL records if there is a WAL.
#[derive(Debug)]
pub(super) struct Payload {
    events: RevisionEvents,
    entry: Option<wal::Entry>,
}

/// Where completed revisions go, in revision order: the WAL (if any), then the event log and
/// the watchers, then the read watermark. Shared with the WAL writer, which publishes the
/// revisions it made durable.
#[derive(Debug)]
pub(super) struct Commit {
    /// Revision allocation, in-order hand-off and the read watermark.
    pub(super) clock: RevisionClock<Payload>,
    /// Every committed revision's events until compaction; shared with the watch hub.
    pub(super) events: Arc<EventLog>,
    /// Told about each committed revision before readers see it (the watch hub). Set once at
    /// start-up.
    observer: std::sync::OnceLock<Arc<dyn CommitObserver>>,
    /// The log, when writes are logged. Set once, after recovery.
    pub(super) wal: std::sync::OnceLock<Arc<Wal>>,
    /// Revisions handed to the WAL and not yet durable, oldest first. Pushed by the in-order
    /// publisher, popped by the WAL writer; both in revision order.
    awaiting: Mutex<std::collections::VecDeque<(i64, RevisionEvents)>>,
    /// Revisions completed while a cluster member applies a batch of Raft entries, published
    /// together when the batch ends ([`Store::hold_publishing`]). Locked by the in-order
    /// publisher and by the applier; deliveries happen under it, so held revisions never
    /// reach watchers after later ones.
    held: Mutex<Held>,
}

/// See [`Commit::held`].
#[derive(Debug, Default)]
struct Held {
    on: bool,
    revisions: Vec<(i64, RevisionEvents)>,
}

impl Commit {
    pub(super) fn new(current: i64, events: EventLog) -> Self {
        Self {
            clock: RevisionClock::new(current),
            events: Arc::new(events),
            observer: std::sync::OnceLock::new(),
            wal: std::sync::OnceLock::new(),
            awaiting: Mutex::new(Default::default()),
            held: Mutex::new(Held::default()),
        }
    }

    /// The in-order publisher's callback: hands the batch to the WAL (visible later), or
    /// publishes it now when there is no WAL.
    fn publish(&self, batch: &mut [(i64, Payload)]) -> bool {
        if let Some(w) = self.wal.get() {
            self.awaiting.lock().extend(batch.iter().map(|(r, p)| (*r, p.events.clone())));
            w.append(batch.iter_mut().filter_map(|(_, p)| p.entry.take()));
            return false;
        }
        let mut held = self.held.lock();
        if held.on {
            held.revisions.extend(batch.iter().map(|(r, p)| (*r, p.events.clone())));
            return false;
        }
        let out: Vec<(i64, RevisionEvents)> =
            batch.iter().map(|(r, p)| (*r, p.events.clone())).collect();
        self.deliver(&out);
        true
    }

    /// Publishes the revisions `held` holds (under its lock, so that later revisions cannot
    /// overtake them).
    fn release(&self, held: &mut Held) {
        if let Some(&(last, _)) = held.revisions.last() {
            self.deliver(&held.revisions);
            held.revisions.clear();
            self.clock.advance(last);
        }
    }

    /// Event log first, then the observer.
    fn deliver(&self, batch: &[(i64, RevisionEvents)]) {
        self.events.publish(batch);
        if let Some(o) = self.observer.get() {
            o.on_commit(batch);
        }
    }
}

impl wal::DurableSink for Commit {
    fn durable(&self, rev: i64) {
        let mut out = Vec::new();
        {
            let mut q = self.awaiting.lock();
            while q.front().is_some_and(|(r, _)| *r <= rev) {
                out.push(q.pop_front().expect("checked"));
            }
        }
        if !out.is_empty() {
            self.deliver(&out);
        }
        self.clock.advance(rev);
    }
}

/// One partition's figures for `/metrics`.
#[derive(Debug)]
pub struct PartitionStats {
    /// The resource prefix, empty for the default partition.
    pub prefix: Bytes,
    /// Live keys.
    pub keys: u64,
    /// Bytes of keys, values and index.
    pub bytes: usize,
    /// Seconds its writers held its lock, and how many held it (`Partition::writing`).
    pub lock_seconds: f64,
    pub locks: u64,
}

#[derive(Debug)]
pub struct Store {
    keyspace: Keyspace,
    /// Completed revisions' way out (WAL, event log, watchers, watermark).
    pub(super) commit: Arc<Commit>,
    /// The data directory's lock, held while the store lives.
    pub(super) _dir_lock: Option<std::fs::File>,
    /// The lessor, once set (without one no lease exists).
    pub(super) leases: std::sync::OnceLock<Arc<dyn LeaseIndex>>,
    /// Read-locked briefly to find partitions, and held across a txn that has range ops so that
    /// no partition can appear inside a range it has already locked; write-locked only to add
    /// a partition.
    pub(super) table: RwLock<Table>,
    /// The logical compaction revision (etcd's `compactMainRev`, -1 before the first). Reads
    /// below it fail; each partition also records the revision it physically compacted at.
    pub(super) compact_rev: AtomicI64,
    /// Serialises the setting of compactions, counts the readers of history at a fixed
    /// revision (backups, snapshots) that hold off compaction's freeing of that history (see
    /// [`HistoryPin`]), and queues the compactions to walk. Held briefly only: a cluster
    /// member's apply loop takes it, and must never wait for a walk of the store.
    pub(super) compaction: Mutex<CompactionState>,
    /// Held by the walks over every partition that must not interleave with a compaction's
    /// freeing: a compaction's hash and freeing, HashKV. Taken before `compaction`, never
    /// while holding it.
    walks: Mutex<()>,
    /// The newest compaction revision walked (hashed, and freed or left to the pins): what a
    /// physical Compaction's answer waits for.
    walked: tokio::sync::watch::Sender<i64>,
    max_txn_ops: usize,
    max_request_bytes: usize,
    /// What the store was made with (a snapshot installed into it is built with the same).
    pub(super) config: StoreConfig,
    /// Set once a member alone stops applying client writes directly ([`Store::close_direct`]):
    /// read by every direct write, relaxed, under its partition locks (which order it with the
    /// closing sweep); the only cost growth adds to a member alone's write path.
    direct_closed: std::sync::atomic::AtomicBool,
}

impl Store {
    pub fn new(config: StoreConfig) -> Self {
        Self::with_commit(config, Commit::new(1, EventLog::new(2)))
    }

    pub(super) fn with_commit(config: StoreConfig, commit: Commit) -> Self {
        let default = Arc::new(Partition::new(0, Bytes::new()));
        commit.events.track(default.clone());
        Self {
            keyspace: Keyspace::new(&config.registry_prefix, config.top_level_prefixes),
            commit: Arc::new(commit),
            _dir_lock: None,
            leases: std::sync::OnceLock::new(),
            table: RwLock::new(Table {
                by_prefix: HashMap::new(),
                sorted: Vec::new(),
                all: vec![default],
                floors: Vec::new(),
            }),
            compact_rev: AtomicI64::new(-1),
            compaction: Mutex::new(CompactionState::default()),
            walks: Mutex::new(()),
            walked: tokio::sync::watch::channel(-1).0,
            max_txn_ops: config.max_txn_ops,
            max_request_bytes: config.max_request_bytes,
            config,
            direct_closed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Holds back the publishing of revisions completed from now on (their events, and readers'
    /// view of them) until [`Store::stop_holding`]. A cluster member applies the Raft log
    /// sequentially, one revision at a time: published one by one, each revision would wake
    /// every watch stream it matches and cost it a write of its own, where a member alone's
    /// concurrent writers complete revisions in groups. Held over a batch of entries, the
    /// batch's revisions reach watchers together. Only for a store with no WAL of its own,
    /// whose one writer (the apply loop) holds it: a write waiting to see its own revision
    /// would wait for the release.
    pub fn hold_publishing(&self) {
        self.commit.held.lock().on = true;
    }

    /// Publishes what [`Store::hold_publishing`] held back so far, and stops holding.
    pub fn stop_holding(&self) {
        let mut held = self.commit.held.lock();
        held.on = false;
        self.commit.release(&mut held);
    }

    /// Publishes what [`Store::hold_publishing`] held back so far (a request about to read the
    /// published revision), holding on if it was.
    pub fn publish_held(&self) {
        self.commit.release(&mut self.commit.held.lock());
    }

    /// Registers the one observer of committed revisions (the watch hub).
    pub fn set_observer(&self, observer: Arc<dyn CommitObserver>) {
        self.commit.observer.set(observer).expect("the commit observer is set once");
    }

    /// How keys map to partitions.
    pub fn keyspace(&self) -> &Keyspace {
        &self.keyspace
    }

    /// The event log (history by revision).
    pub fn event_log(&self) -> &Arc<EventLog> {
        &self.commit.events
    }

    /// The WAL, if writes are logged.
    pub fn wal(&self) -> Option<&Arc<Wal>> {
        self.commit.wal.get()
    }

    /// Refuses client writes while the WAL cannot write.
    fn check_writable(&self) -> Result<()> {
        match self.wal() {
            Some(w) if !w.writable() => Err(Error::WalUnavailable),
            _ => Ok(()),
        }
    }

    /// The revision readers see: every write at or below it is applied.
    pub fn current_revision(&self) -> i64 {
        self.commit.clock.committed()
    }

    /// The compaction revision (0 before the first compaction).
    pub fn compact_revision(&self) -> i64 {
        self.compact_rev.load(Ordering::SeqCst).max(0)
    }

    /// Stops applying a member alone's client writes directly (they are handed back as
    /// [`Refused::Closed`] from now on) and returns the newest revision allocated: once the
    /// watermark reaches it, nothing more changes through the direct path. The flag is set
    /// first, then every partition's lock is taken once: a writer holding one finishes first
    /// (its revision is allocated by then), and one taking it later sees the flag. A partition
    /// created after the table was read is created after the flag was set, so its writers
    /// see it too.
    pub fn close_direct(&self) -> i64 {
        self.direct_closed.store(true, Ordering::SeqCst);
        let parts = self.table.read().all.clone();
        for p in parts {
            drop(p.state.write());
        }
        self.commit.clock.allocated()
    }

    /// Undoes [`Store::close_direct`] (growing failed before anything changed).
    pub fn reopen_direct(&self) {
        self.direct_closed.store(false, Ordering::SeqCst);
    }

    /// Waits until a write's effects are visible to every reader.
    pub async fn wait_visible(&self, rev: i64) {
        self.commit.clock.wait_committed(rev).await
    }

    /// Blocking [`wait_visible`](Self::wait_visible), for callers outside the runtime.
    pub fn wait_visible_blocking(&self, rev: i64) {
        self.commit.clock.wait_committed_blocking(rev)
    }

    /// An estimate of the memory the store holds: keys, values and their indexes, plus what
    /// etcd reports for its empty database (never zero, which clients divide by).
    pub fn size_bytes(&self) -> usize {
        let data: usize =
            self.table.read().all.iter().map(|p| p.bytes.load(Ordering::Relaxed)).sum();
        data + EMPTY_BYTES
    }

    /// Registers the lessor (once, at start-up).
    pub fn set_lease_index(&self, leases: Arc<dyn LeaseIndex>) {
        self.leases.set(leases).expect("the lessor is set once");
    }

    /// Whether lease `id` exists.
    fn lease_exists(&self, id: i64) -> bool {
        self.leases.get().is_some_and(|l| l.exists(id))
    }

    /// Attaches `key` to lease `id` if it exists (see [`LeaseIndex`]): a write checking the lease
    /// it puts a key with, under that key's partition lock.
    fn lease_reserve(&self, id: i64, key: &[u8]) -> bool {
        self.leases.get().is_some_and(|l| l.reserve(id, key))
    }

    /// `key` left lease `old` for lease `new` (attached when the write checked it): detaches it.
    fn detach_moved(&self, key: &Bytes, old: i64, new: i64) {
        if old != 0
            && old != new
            && let Some(l) = self.leases.get()
        {
            l.detach(old, key);
        }
    }

    /// The newest revision handed to a writer, applied or not.
    pub fn allocated_revision(&self) -> i64 {
        self.commit.clock.allocated()
    }

    /// Waits until readers see every revision allocated so far. An answer that something is
    /// gone (a lease) waits for this after finding it gone: whatever removed it allocated its
    /// revision first, so no read after the answer finds what went with it.
    pub async fn wait_settled(&self) {
        self.wait_visible(self.allocated_revision()).await
    }

    /// Revokes lease `id` (etcd's lessor `Revoke`): deletes every key attached to it in one
    /// revision and removes it from the lessor in one step with that revision's allocation, with
    /// the lock of every key's partition held. No write can attach a key to it in between (see
    /// [`LeaseIndex`]), so nothing outlives it, and a write or lease request that finds it gone
    /// reads the allocated revision after the deletion's. `None` if there is no such lease.
    ///
    /// The response is the header revision: the deletion's, or for a lease without keys the
    /// newest revision allocated as it went, to be answered once readers see it. Not the one
    /// readers saw then: the lessor shows a write's detaching of the lease's last key as soon as
    /// the write applies, before readers see its revision, and a revocation that found no keys
    /// because of it must not answer a revision before it (the history checker saw a revocation
    /// answer 14 having found no keys because an update at 15 detached the only one).
    pub fn revoke_lease(&self, id: i64) -> Option<Applied<i64>> {
        let leases = self.leases.get()?;
        let mut keys = leases.keys(id)?;
        let mut parts: Vec<Arc<Partition>> = Vec::new();
        loop {
            for k in &keys {
                let p = self.partition_for_key(k);
                if !parts.iter().any(|q| q.id == p.id) {
                    parts.push(p);
                }
            }
            parts.sort_by_key(|p| p.id);
            let ctx = TxnCtx::lock(self, &parts, Vec::new());
            let (mut rev, mut allocated) = (0, 0);
            let (removed, all) = leases.remove_if(id, &mut |keys| {
                // A key attached since we looked may be in a partition we do not hold: look
                // again with it.
                if !keys.iter().all(|k| ctx.holds(k)) {
                    return false;
                }
                // Writes allocate before they apply (and detach keys): every write this lease's
                // keys reflect has a revision at or below this.
                allocated = self.commit.clock.allocated();
                if keys.iter().any(|k| ctx.latest(k).is_some_and(|kv| kv.lease == id)) {
                    rev = self.commit.clock.allocate();
                }
                true
            })?;
            if !removed {
                drop(ctx);
                keys = all;
                continue;
            }
            if rev == 0 {
                return Some(Applied { response: allocated, visible_at: allocated });
            }
            let mut all = all;
            all.sort();
            let ops = all.into_iter().map(|key| RequestOp::DeleteLeased { key, lease: id });
            let t = TxnRequest { compare: vec![], success: ops.collect(), failure: vec![] };
            let a = self.apply_planned(ctx, None, &t, vec![true], rev, rev - 1);
            return Some(Applied { response: a.response.revision, visible_at: a.visible_at });
        }
    }

    /// Deletes, in one revision, every key of `keys` still attached to `lease`: recovered keys
    /// whose lease is gone (see [`LeaseIndex::attach`]). Returns the header revision.
    pub fn delete_orphans(&self, lease: i64, mut keys: Vec<Bytes>) -> Applied<i64> {
        keys.sort();
        keys.dedup();
        let ops = keys.into_iter().map(|key| RequestOp::DeleteLeased { key, lease }).collect();
        let t = TxnRequest { compare: vec![], success: ops, failure: vec![] };
        let a = logged(self.txn_unchecked(t, false))
            .expect("an internal delete cannot fail its checks");
        Applied { response: a.response.revision, visible_at: a.visible_at }
    }

    /// Live keys at the newest applied revision, across partitions.
    pub fn live_keys(&self) -> u64 {
        let parts = self.table.read().all.clone();
        parts.iter().map(|p| p.state.read().live_keys()).sum()
    }

    /// Per partition: its resource prefix (empty for the default partition), live keys, bytes
    /// held and its writers' time under its lock, in partition order (for metrics).
    pub fn partition_stats(&self) -> Vec<PartitionStats> {
        let parts = self.table.read().all.clone();
        parts
            .iter()
            .map(|p| PartitionStats {
                prefix: p.prefix.clone(),
                keys: p.state.read().live_keys(),
                bytes: p.bytes.load(Ordering::Relaxed),
                lock_seconds: p.writing.seconds(),
                locks: p.writing.count(),
            })
            .collect()
    }

    /// Bytes held by the resource partitions under `prefix` whose own prefix `owned` accepts
    /// (a tenant's: `etcdserver::tenant`). The partitions under one prefix sit side by side in
    /// the ordered table.
    pub fn bytes_under(&self, prefix: &[u8], owned: impl Fn(&[u8]) -> bool) -> usize {
        let t = self.table.read();
        let first = t.sorted.partition_point(|p| p.prefix[..] < *prefix);
        t.sorted[first..]
            .iter()
            .take_while(|p| p.prefix.starts_with(prefix))
            .filter(|p| owned(&p.prefix))
            .map(|p| p.bytes.load(Ordering::Relaxed))
            .sum()
    }

    /// The serial sections every write passes on its way out, one thread at a time: the
    /// in-order publisher, and the WAL's writer if there is a WAL (see `metrics::Serial`).
    pub fn serial_sections(&self) -> [(&'static str, Option<&Serial>); 2] {
        [
            ("publisher", Some(&self.commit.clock.publishing)),
            ("wal_writer", self.commit.wal.get().map(|w| &w.stats.writing)),
        ]
    }

    /// Number of partitions (the default one included).
    pub fn partition_count(&self) -> usize {
        self.table.read().all.len()
    }

    // ----- partitions -----

    /// The prefix of the partition `key` belongs to (empty for the default partition): a view
    /// into the key itself, so the WAL encoder needs neither the partition table nor a copy.
    fn partition_prefix(&self, key: &Bytes) -> Bytes {
        match self.keyspace.partition_of(key) {
            None => Bytes::new(),
            Some(prefix) => key.slice_ref(prefix),
        }
    }

    /// The partition `key` belongs to, created if it does not exist yet.
    pub(super) fn partition_for_key(&self, key: &[u8]) -> Arc<Partition> {
        let Some(prefix) = self.keyspace.partition_of(key) else {
            return self.table.read().all[0].clone();
        };
        if let Some(p) = self.table.read().by_prefix.get(prefix) {
            return p.clone();
        }
        let mut t = self.table.write();
        if let Some(p) = t.by_prefix.get(prefix) {
            return p.clone();
        }
        let p = Arc::new(Partition::new(t.all.len(), Bytes::copy_from_slice(prefix)));
        // Nothing below a floor over it may be read, here as in its elder siblings.
        p.state.write().floor = floor_of(&t.floors, prefix);
        t.by_prefix.insert(p.prefix.clone(), p.clone());
        let at = t.sorted.partition_point(|q| q.prefix < p.prefix);
        t.sorted.insert(at, p.clone());
        t.all.push(p.clone());
        // Before anything is written to it: the event log reads every revision's events back
        // from the partitions.
        self.commit.events.track(p.clone());
        p
    }

    /// The partitions a range can have keys in: the default partition first (unless the range
    /// lies inside one resource prefix), then resource partitions in key order.
    fn partitions_for_range(&self, t: &Table, range: &KeyRange) -> Vec<Arc<Partition>> {
        let mut out = Vec::new();
        if range.is_empty() {
            return out;
        }
        if range.single {
            match self.keyspace.partition_of(&range.start) {
                None => out.push(t.all[0].clone()),
                Some(prefix) => out.extend(t.by_prefix.get(prefix).cloned()),
            }
            return out;
        }
        let inside_one = t.sorted.iter().any(|p| {
            range.start.starts_with(&p.prefix)
                && match (&range.end, crate::keyspace::prefix_end(&p.prefix)) {
                    (Some(e), Some(pe)) => e[..] <= pe[..],
                    _ => false,
                }
        });
        if !inside_one {
            out.push(t.all[0].clone());
        }
        let first = t.sorted.partition_point(|p| {
            crate::keyspace::prefix_end(&p.prefix).is_some_and(|pe| pe[..] <= range.start[..])
        });
        for p in &t.sorted[first..] {
            if !range.below_end(&p.prefix) {
                break;
            }
            if range.meets_prefix(&p.prefix) {
                out.push(p.clone());
            }
        }
        out
    }

    // ----- reads -----

    /// A Range outside a txn: served at the watermark, so it sees every acknowledged write.
    pub fn range(&self, req: &RangeRequest) -> Result<RangeResponse> {
        validate::check_range_key(&req.key)?;
        loop {
            match self.range_at_watermark(req) {
                // A read at the current revision is never refused as compacted (etcd's holds
                // the store's read lock, which its compaction waits for). Here a compaction
                // can finish between reading the watermark and the partitions: it compacted
                // to a revision that was committed, so the read is served again at a newer
                // watermark, which is at or above it.
                Err(Error::Compacted) if req.revision == 0 => continue,
                r => return r,
            }
        }
    }

    fn range_at_watermark(&self, req: &RangeRequest) -> Result<RangeResponse> {
        let current = self.commit.clock.committed();
        self.check_read_revision(req.revision, current)?;
        let rev = if req.revision > 0 { req.revision } else { current };
        let range = KeyRange::from_request(&req.key, &req.range_end);
        // The watermark was read first: a partition holding any write at or below it already
        // exists now.
        let parts = self.partitions_for_range(&self.table.read(), &range);
        let fetch = fetch_limit(req);
        let mut defaults = Vec::new();
        let mut ordered = Vec::new();
        let mut count = 0u64;
        for p in &parts {
            let st = p.state.read();
            if st.compacted > rev || st.floor > rev {
                return Err(Error::Compacted);
            }
            count += st.count_at(&range, rev);
            if req.count_only {
                continue;
            }
            if p.id == 0 {
                st.scan(&range, rev, fetch, &mut defaults);
            } else if fetch == 0 || ordered.len() < fetch {
                let want = if fetch == 0 { 0 } else { fetch - ordered.len() };
                st.scan(&range, rev, want, &mut ordered);
            }
        }
        let kvs = merge_sorted(defaults, ordered, fetch);
        Ok(finish_range(req, kvs, count, current))
    }

    fn check_read_revision(&self, rev: i64, current: i64) -> Result<()> {
        if rev > current {
            return Err(Error::FutureRev);
        }
        if rev > 0 && rev < self.compact_rev.load(Ordering::SeqCst) {
            return Err(Error::Compacted);
        }
        Ok(())
    }

    // ----- writes -----

    /// Refuses a write whose encoding is over `--max-request-bytes`. etcd measures the request
    /// wrapped for its raft log, which adds a small header; `size` is the bare request's
    /// encoded length.
    fn check_size(&self, size: usize) -> Result<()> {
        // A request header (~14 bytes), the field tag and the length varint.
        let varint = (usize::BITS - size.max(1).leading_zeros()).div_ceil(7) as usize;
        if size + 15 + varint > self.max_request_bytes {
            return Err(Error::RequestTooLarge);
        }
        Ok(())
    }

    /// The checks a Put gets before it is applied, for a cluster to run before proposing it
    /// (so that a request refused for its shape never enters the Raft log).
    pub fn check_put(&self, req: &PutRequest, size: usize) -> Result<()> {
        validate::check_put(req)?;
        self.check_size(size)
    }

    /// [`check_put`](Self::check_put) for a DeleteRange.
    pub fn check_delete_range(&self, req: &DeleteRangeRequest, size: usize) -> Result<()> {
        validate::check_range_key(&req.key)?;
        self.check_size(size)
    }

    /// [`check_put`](Self::check_put) for a Txn.
    pub fn check_txn(&self, req: &TxnRequest, size: usize) -> Result<()> {
        validate::check_txn(req, self.max_txn_ops)?;
        if !req.is_read_only() {
            self.check_size(size)?;
        }
        Ok(())
    }

    /// Put, as a one-op txn. `size` is the request's encoded length.
    pub fn put(
        &self,
        req: PutRequest,
        size: usize,
    ) -> std::result::Result<Applied<PutResponse>, Refused<PutRequest>> {
        validate::check_put(&req)?;
        self.check_size(size)?;
        self.check_writable()?;
        self.put_checked(req, true)
    }

    /// A Put from a cluster's log: the proposing member checked it against its limits
    /// (`--max-request-bytes`), which may differ between members; applying must not, or the
    /// members would diverge. Only the request's shape is checked, as everywhere.
    pub fn put_logged(&self, req: PutRequest) -> Result<Applied<PutResponse>> {
        validate::check_put(&req)?;
        logged(self.put_checked(req, false))
    }

    fn put_checked(
        &self,
        req: PutRequest,
        direct: bool,
    ) -> std::result::Result<Applied<PutResponse>, Refused<PutRequest>> {
        // A plain Put checks its lease before anything else (a Put inside a txn checks
        // `ignore_value` first, as etcd does).
        if req.lease != 0 && !self.lease_exists(req.lease) {
            return Err(Error::LeaseNotFound.into());
        }
        let (a, revision) = self.one_op(RequestOp::Put(req), direct).map_err(|r| {
            r.map(|op| match op {
                RequestOp::Put(p) => p,
                _ => unreachable!("the put handed back"),
            })
        })?;
        let ResponseOp::Put(mut response) = a.response else {
            unreachable!("a put txn answers with a put")
        };
        response.revision = revision;
        Ok(Applied { response, visible_at: a.visible_at })
    }

    /// One Put or DeleteRange as a txn of that one op: the op's answer and the txn's header
    /// revision, or the op handed back.
    fn one_op(
        &self,
        op: RequestOp,
        direct: bool,
    ) -> std::result::Result<(Applied<ResponseOp>, i64), Refused<RequestOp>> {
        let t = TxnRequest { compare: vec![], success: vec![op], failure: vec![] };
        let a = self
            .txn_unchecked(t, direct)
            .map_err(|r| r.map(|mut t| t.success.pop().expect("the op handed back")))?;
        let revision = a.response.revision;
        let op = a.response.responses.into_iter().next().expect("a one-op txn answers once");
        Ok((Applied { response: op, visible_at: a.visible_at }, revision))
    }

    /// DeleteRange, as a one-op txn.
    pub fn delete_range(
        &self,
        req: DeleteRangeRequest,
        size: usize,
    ) -> std::result::Result<Applied<DeleteRangeResponse>, Refused<DeleteRangeRequest>> {
        validate::check_range_key(&req.key)?;
        self.check_size(size)?;
        self.check_writable()?;
        self.delete_range_checked(req, true)
    }

    /// [`put_logged`](Self::put_logged) for a DeleteRange.
    pub fn delete_range_logged(
        &self,
        req: DeleteRangeRequest,
    ) -> Result<Applied<DeleteRangeResponse>> {
        validate::check_range_key(&req.key)?;
        logged(self.delete_range_checked(req, false))
    }

    fn delete_range_checked(
        &self,
        req: DeleteRangeRequest,
        direct: bool,
    ) -> std::result::Result<Applied<DeleteRangeResponse>, Refused<DeleteRangeRequest>> {
        let (a, revision) = self.one_op(RequestOp::DeleteRange(req), direct).map_err(|r| {
            r.map(|op| match op {
                RequestOp::DeleteRange(d) => d,
                _ => unreachable!("the delete handed back"),
            })
        })?;
        let ResponseOp::DeleteRange(mut response) = a.response else {
            unreachable!("a delete txn answers with a delete")
        };
        response.revision = revision;
        Ok(Applied { response, visible_at: a.visible_at })
    }

    /// A Txn: the write path described in the module docs. `size` is the request's encoded
    /// length (read-only txns are not size-checked, as in etcd, where they skip the log).
    pub fn txn(
        &self,
        req: TxnRequest,
        size: usize,
    ) -> std::result::Result<Applied<TxnResponse>, Refused<TxnRequest>> {
        validate::check_txn(&req, self.max_txn_ops)?;
        if !req.is_read_only() {
            self.check_size(size)?;
        }
        // A read-only txn waits for every write it could have seen to be durable: refused
        // while the WAL is failing rather than left waiting.
        self.check_writable()?;
        self.txn_unchecked(req, true)
    }

    /// [`put_logged`](Self::put_logged) for a Txn (no `--max-txn-ops`, no size limit).
    pub fn txn_logged(&self, req: TxnRequest) -> Result<Applied<TxnResponse>> {
        validate::check_txn(&req, i64::MAX as usize)?;
        logged(self.txn_unchecked(req, false))
    }

    /// The write path. `direct`: a member alone's client write, refused (handed back) once
    /// [`Store::close_direct`] ran; a write from a cluster's log or the store's own (lease
    /// revocation, which its caller orders with growth) is not.
    fn txn_unchecked(
        &self,
        req: TxnRequest,
        direct: bool,
    ) -> std::result::Result<Applied<TxnResponse>, Refused<TxnRequest>> {
        // Partitions of single keys are created up front (even for reads: a partition that
        // appeared after we locked could hold a write ordered before ours).
        let mut points: Vec<Arc<Partition>> = Vec::new();
        let mut ranges: Vec<KeyRange> = Vec::new();
        visit_keys(&req, &mut |key, end| {
            if end.is_empty() {
                let p = self.partition_for_key(key);
                if !points.iter().any(|q| q.id == p.id) {
                    points.push(p);
                }
            } else {
                ranges.push(KeyRange::from_request(key, end));
            }
        });
        // Held across the txn when it has ranges: see `Store::table`.
        let table_guard = (!ranges.is_empty()).then(|| self.table.read());
        let mut parts = points;
        if let Some(t) = &table_guard {
            for r in &ranges {
                for p in self.partitions_for_range(t, r) {
                    if !parts.iter().any(|q| q.id == p.id) {
                        parts.push(p);
                    }
                }
            }
        }
        parts.sort_by_key(|p| p.id);
        // Every put's key and value copied into the buffer its version keeps, before the locks:
        // the allocation and the copy stay out of the section a resource's writers pass one at
        // a time. (A put of an untaken branch copies for nothing; kube-apiserver's txns put on
        // one branch only.)
        let mut bufs = Vec::new();
        visit_puts(&req, &mut |p| {
            if !p.ignore_value {
                bufs.push((std::ptr::from_ref(p), KvBuf::new(&p.key, &p.value)));
            }
        });
        let mut path = Vec::with_capacity(1);
        let ctx = TxnCtx::lock(self, &parts, bufs);

        // Evaluate: compares decide the path, per-op checks may fail the whole txn.
        let current = self.commit.clock.allocated();
        let writes = match ctx.plan(&req, &mut path, current) {
            Ok(w) => w,
            Err(e) => {
                ctx.release(&req);
                return Err(e.into());
            }
        };
        // Under the partition locks: the closing sweep took each of them after setting the
        // flag, so a write that reaches this point after the sweep sees it.
        if writes && direct && self.direct_closed.load(Ordering::Relaxed) {
            ctx.release(&req);
            drop(ctx);
            drop(table_guard);
            return Err(Refused::Closed(req));
        }
        let rev = if writes { self.commit.clock.allocate() } else { 0 };
        Ok(self.apply_planned(ctx, table_guard, &req, path, rev, current))
    }

    /// Applies a planned write (`rev`: its allocated revision, 0 if it writes nothing; `current`:
    /// the allocated revision it was planned at), then unlocks and completes the revision.
    fn apply_planned(
        &self,
        mut ctx: TxnCtx<'_>,
        table_guard: Option<parking_lot::RwLockReadGuard<'_, Table>>,
        req: &TxnRequest,
        path: Vec<bool>,
        rev: i64,
        current: i64,
    ) -> Applied<TxnResponse> {
        let writes = rev != 0;
        let base = if writes { rev - 1 } else { current };
        // Completes the revision even if applying panics, so one bad request cannot wedge
        // every reader behind the watermark.
        let written = std::mem::take(&mut ctx.written);
        let mut completion = writes.then(|| Completion { store: self, rev, written });
        let mut sub = 0;
        let mut path_iter = path.into_iter();
        let mut scratch = Vec::new();
        let written = completion.as_mut().map_or(&mut scratch, |c| &mut c.written);
        let mut response = ctx.exec(req, &mut path_iter, rev, base, &mut sub, written);
        response.revision = if sub > 0 { base + 1 } else { base };
        for (p, g) in ctx.parts.iter().zip(&ctx.guards) {
            p.sync_bytes(g);
        }
        drop(ctx);
        drop(table_guard);
        drop(completion);
        Applied { visible_at: response.revision, response }
    }

    /// Compacts history at `rev` (etcd's `Compact`): reads below it fail from now on, and every
    /// version superseded at or before it is freed.
    ///
    /// The compaction is logged and made durable *before* it takes effect, as etcd applies one
    /// only once Raft committed it: a compaction that readers or watchers saw (a "compacted"
    /// answer, a watch canceled with its revision) must not vanish in a crash, or a client
    /// would read history it was told is gone. Blocks until the log has it, so call it from a
    /// blocking thread; compactions are serialised, so a later one waits for this one.
    pub fn compact(&self, rev: i64) -> Result<Compacted> {
        let c = self.set_compaction(rev)?;
        self.walk_compactions();
        Ok(c)
    }

    /// The part of a compaction at `rev` that readers see, at once: reads and watches below
    /// `rev` are refused from now on (etcd's `compactMainRev`), and the WAL has it. What
    /// remains, the walks of every partition (the compaction hash, the freeing of what `rev`
    /// no longer keeps), is queued for [`Store::walk_compactions`]: a cluster member's apply
    /// loop sets a compaction and walks it elsewhere, as etcd's apply schedules its compaction,
    /// so that no later write waits for a walk of the whole store. Until walked, the store
    /// serves the compacted state as it does while a backup pins the history.
    pub fn set_compaction(&self, rev: i64) -> Result<Compacted> {
        let started = std::time::Instant::now();
        let mut state = self.compaction.lock();
        let before = self.compact_rev.load(Ordering::SeqCst);
        if rev <= before {
            return Err(Error::Compacted);
        }
        if rev > self.commit.clock.committed() {
            return Err(Error::FutureRev);
        }
        if let Some(w) = self.wal() {
            let batch = w.append_meta(|seq| wal::record::Record::Compact { seq, rev });
            w.wait_durable_blocking(batch);
        }
        self.compact_rev.store(rev, Ordering::SeqCst);
        self.commit.events.compact(rev);
        let floors = self.floors();
        state.unwalked.push_back(Unwalked { prefix: None, rev, before, started, floors });
        drop(state);
        Ok(Compacted { revision: self.commit.clock.committed() })
    }

    /// Walks the compactions set and not walked yet, in order (see [`Store::set_compaction`]):
    /// each one's hash, then its freeing (left to the last pin on the history if there is one).
    /// Returns once none is left, with how many it walked; a caller that finds another walking
    /// waits for it (and may then find none left).
    pub fn walk_compactions(&self) -> usize {
        let _walks = self.walks.lock();
        let mut walked = 0;
        loop {
            let Some(c) = self.compaction.lock().unwalked.pop_front() else { return walked };
            if let Some(prefix) = &c.prefix {
                self.walk_prefix_compaction(prefix, c.rev, c.started);
                walked += 1;
                continue;
            }
            // etcd's compaction hashes what it walks, from the previous compaction revision up
            // to this one: the store's HashKV at `rev` before compacting (the value etcd's
            // HashKV then answers at `rev`). Nothing at or below `rev` changed since it was
            // set: writes add revisions above it, and only this walk frees.
            let (hash, ..) = self.hash_walk(c.rev, c.before, &c.floors);
            let free = {
                let mut state = self.compaction.lock();
                if state.pins > 0 {
                    state.deferred = Some(c.rev);
                }
                state.pins == 0
            };
            // A pin taken from here on holds history at this compaction or a later one, all of
            // which this freeing keeps.
            if free {
                self.free_compacted(c.rev);
            }
            self.log_compaction_finished(c.rev, hash, c.started);
            self.mark_walked(c.rev);
            walked += 1;
        }
    }

    /// Leaves the walk of the compaction a restored store finished (its hash; what it frees
    /// was dropped already) to [`Store::walk_compactions`].
    pub(super) fn restored_compaction(&mut self, rev: i64, started: std::time::Instant) {
        let floors = self.table.get_mut().floors.clone();
        let walk = Unwalked { prefix: None, rev, before: rev, started, floors };
        self.compaction.get_mut().unwalked.push_back(walk);
    }

    /// Records that compactions up to `rev` need no more walking (never moves back).
    pub(super) fn mark_walked(&self, rev: i64) {
        self.walked.send_if_modified(|w| {
            let newer = rev > *w;
            *w = (*w).max(rev);
            newer
        });
    }

    /// Forgets the compactions a snapshot just installed already holds (at or below
    /// `compacted`): it has none of their history to walk. The caller holds `compaction`.
    pub(super) fn installed_compaction(&self, state: &mut CompactionState, compacted: i64) {
        state.unwalked.retain(|c| c.rev > compacted);
        self.mark_walked(compacted);
    }

    /// Waits until the compaction at `rev` (or a later one) has been walked: what etcd's
    /// physical Compaction waits for.
    pub async fn wait_walked(&self, rev: i64) {
        let _ = self.walked.subscribe().wait_for(|&w| w >= rev).await;
    }

    /// etcd's "finished scheduled compaction" line, which operators and etcd's tests wait for:
    /// the compaction revision, how long it took, and the hash of the history it compacted.
    /// mem_etcd's store has no free pages: its size and size in use are the same.
    pub(super) fn log_compaction_finished(&self, rev: i64, hash: u32, started: std::time::Instant) {
        let size = self.size_bytes() as u64;
        let human = crate::humanize::bytes(size);
        tracing::info!(
            "compact-revision" = rev,
            took = %crate::duration::go_format(started.elapsed()),
            hash,
            "current-db-size-bytes" = size,
            "current-db-size" = %human,
            "current-db-size-in-use-bytes" = size,
            "current-db-size-in-use" = %human,
            "finished scheduled compaction"
        );
    }

    /// Frees every version compaction at `rev` no longer keeps, a chunk of keys per write lock
    /// (see `PartitionState::take_compact_queue`): a write waits for one chunk at most, not
    /// for a whole partition, and the chunk's versions are freed after the lock is released.
    /// Each lock is released fairly, so a waiting writer goes first.
    fn free_compacted(&self, rev: i64) {
        let parts = self.table.read().all.clone();
        Self::free_partitions(&parts, rev);
    }

    /// [`Self::free_compacted`] over `parts` only.
    fn free_partitions(parts: &[Arc<Partition>], rev: i64) {
        let mut dropped = Dropped::default();
        for p in parts {
            let queue = p.state.write().take_compact_queue();
            for chunk in queue.chunks(COMPACTION_CHUNK) {
                let mut st = p.state.write();
                st.compact_slots(rev, chunk, &mut dropped);
                p.sync_bytes(&st);
                RwLockWriteGuard::unlock_fair(st);
                dropped.free();
            }
            loop {
                let mut st = p.state.write();
                let done = st.finish_compact(rev, COMPACTION_CHUNK * 16);
                RwLockWriteGuard::unlock_fair(st);
                if done {
                    break;
                }
            }
        }
    }

    /// The prefixes compacted on their own, with their revisions, in prefix order.
    pub fn floors(&self) -> Vec<(Bytes, i64)> {
        self.table.read().floors.clone()
    }

    /// Compacts the history of the keys under `prefix` alone at `rev` (a tenant's
    /// kube-apiserver compacting its own keys: `etcdserver::tenant`). Reads of its partitions
    /// below `rev` fail from now on, watches over it cannot start below it, and what a
    /// compaction at the revision before would free there is freed: `rev`'s own events stay, for
    /// a watch that starts at `rev`. The rest of the store keeps its history; keys under
    /// `prefix` outside its resources, in the default partition, keep theirs too (until the
    /// store's compaction). Logged and durable before it takes effect, as [`Store::compact`];
    /// blocks until the log has it and the walk is done, so call it from a blocking thread.
    pub fn compact_prefix(&self, prefix: &Bytes, rev: i64) -> Result<Compacted> {
        let c = self.set_prefix_compaction(prefix, rev)?;
        self.walk_compactions();
        Ok(c)
    }

    /// The part of [`Store::compact_prefix`] readers see at once (see [`Store::set_compaction`]);
    /// the freeing is left to [`Store::walk_compactions`].
    pub fn set_prefix_compaction(&self, prefix: &Bytes, rev: i64) -> Result<Compacted> {
        let started = std::time::Instant::now();
        let mut state = self.compaction.lock();
        let global = self.compact_rev.load(Ordering::SeqCst);
        let before = global.max(floor_of(&self.table.read().floors, prefix));
        if rev <= before {
            return Err(Error::Compacted);
        }
        if rev > self.commit.clock.committed() {
            return Err(Error::FutureRev);
        }
        if let Some(w) = self.wal() {
            let prefix = prefix.clone();
            let batch =
                w.append_meta(|seq| wal::record::Record::CompactPrefix { seq, prefix, rev });
            w.wait_durable_blocking(batch);
        }
        {
            let mut t = self.table.write();
            match t.floors.iter_mut().find(|(p, _)| p == prefix) {
                Some(f) => f.1 = rev,
                None => {
                    t.floors.push((prefix.clone(), rev));
                    t.floors.sort();
                }
            }
            for p in t.sorted.iter().filter(|p| p.prefix.starts_with(prefix)) {
                let mut st = p.state.write();
                st.floor = st.floor.max(rev);
            }
        }
        self.commit.events.set_floor(prefix, rev);
        let walk =
            Unwalked { prefix: Some(prefix.clone()), rev, before, started, floors: Vec::new() };
        state.unwalked.push_back(walk);
        drop(state);
        Ok(Compacted { revision: self.commit.clock.committed() })
    }

    /// The walk of a prefix's compaction at `rev` (the caller holds `walks`): frees what a
    /// compaction at the revision before frees in the partitions under `prefix`, or leaves it
    /// to the last pin on the history.
    fn walk_prefix_compaction(&self, prefix: &Bytes, rev: i64, started: std::time::Instant) {
        let free = {
            let mut state = self.compaction.lock();
            if state.pins > 0 {
                state.deferred_prefixes.push((prefix.clone(), rev));
            }
            state.pins == 0
        };
        if free {
            self.free_prefix(prefix, rev);
        }
        tracing::info!(
            prefix = %String::from_utf8_lossy(prefix),
            "compact-revision" = rev,
            took = %crate::duration::go_format(started.elapsed()),
            "finished scheduled compaction of a prefix"
        );
    }

    /// Frees what a compaction of `prefix` at `rev` no longer keeps.
    fn free_prefix(&self, prefix: &[u8], rev: i64) {
        let parts: Vec<_> = {
            let t = self.table.read();
            t.sorted.iter().filter(|p| p.prefix.starts_with(prefix)).cloned().collect()
        };
        Self::free_partitions(&parts, rev - 1);
    }

    /// Pins the history (see [`HistoryPin`]).
    pub fn pin_history(&self) -> HistoryPin {
        let mut state = self.compaction.lock();
        state.pins += 1;
        HistoryPin { compacted: self.compact_rev.load(Ordering::SeqCst) }
    }

    /// Returns a pin; the last one out frees what compactions deferred.
    pub fn unpin_history(&self, pin: HistoryPin) {
        let _ = pin;
        let (deferred, prefixes) = {
            let mut state = self.compaction.lock();
            state.pins -= 1;
            if state.pins == 0 {
                (state.deferred.take(), std::mem::take(&mut state.deferred_prefixes))
            } else {
                (None, Vec::new())
            }
        };
        if deferred.is_some() || !prefixes.is_empty() {
            // A pin taken meanwhile holds history at these compactions or later, which this
            // keeps.
            let _walks = self.walks.lock();
            if let Some(rev) = deferred {
                self.free_compacted(rev);
            }
            for (prefix, rev) in prefixes {
                self.free_prefix(&prefix, rev);
            }
        }
    }

    /// etcd's HashKV: a CRC-32C of "key" and then, in revision order, the versions at or below
    /// `rev` (0 = current) that etcd hashes, as its `key` bucket holds them (revision, then
    /// `mvccpb.KeyValue`), so the value equals etcd's for the same history, empty or not.
    /// Returns (hash, hash revision, compact revision).
    pub fn hash_kv(&self, rev: i64) -> Result<(u32, i64, i64)> {
        self.hash_kv_floors(rev).map(|(hash, rev, compacted, _)| (hash, rev, compacted))
    }

    /// [`Store::hash_kv`], and a digest of the prefixes compacted on their own that the hash
    /// reflects (0 if none): the corruption checks compare two members' hashes only if these
    /// agree, as only if their compaction revisions do.
    pub fn hash_kv_floors(&self, rev: i64) -> Result<(u32, i64, i64, u64)> {
        // No freeing meanwhile: the walk below takes each partition's lock a chunk at a time,
        // and a compaction freeing between two chunks would change what it hashes.
        let _walks = self.walks.lock();
        let current = self.commit.clock.committed();
        self.check_read_revision(rev, current)?;
        let rev = if rev > 0 { rev } else { current };
        let floors = self.floors();
        let (hash, rev, compacted) =
            self.hash_walk(rev, self.compact_rev.load(Ordering::SeqCst), &floors);
        let mut digest = 0u32;
        for (prefix, at) in &floors {
            digest = crc32c::crc32c_append(digest, prefix);
            digest = crc32c::crc32c_append(digest, &at.to_le_bytes());
        }
        let digest = if floors.is_empty() { 0 } else { u64::from(digest) | 1 << 32 };
        Ok((hash, rev, compacted, digest))
    }

    /// The walk of [`Self::hash_kv`] at `rev`, for the history compacted at `compacted` (the
    /// caller holds `walks`). Reports `compacted` as the compact revision, not the store's
    /// current one: a compaction set during the walk must not pair a newer compact revision
    /// with this hash (the corruption checks compare hashes of equal compact revisions).
    fn hash_walk(&self, rev: i64, compacted: i64, floors: &[(Bytes, i64)]) -> (u32, i64, i64) {
        let t = self.table.read();
        let parts: Vec<_> =
            std::iter::once(t.all[0].clone()).chain(t.sorted.iter().cloned()).collect();
        drop(t);
        // The store keeps versions by key, etcd's bucket by revision: each version's CRC and
        // length are taken a partition at a time (under its read lock only), then combined in
        // revision order, which is the CRC of the bytes in that order.
        let mut pieces: Vec<(Revision, u32, usize, bool)> = Vec::new();
        // What etcd hashes: every version above the compaction revision; of those at or below
        // it (what compaction kept: each key's newest there unless a delete), only the ones
        // that are their key's live version at `rev`, unless no key is live at `rev` (etcd's
        // "keep" set at `rev`, and its rule that an empty set skips nothing).
        let mut any_live = false;
        let mut scratch = Vec::new();
        // One chunk's pieces, gathered under the lock and moved to `pieces` after it: `pieces`
        // grows to millions of entries by doubling, and a doubling under the lock (hundreds of
        // MB copied into freshly faulted pages) held every writer of the partition 180 ms at
        // 5M objects.
        let mut chunk = Vec::new();
        for p in parts {
            // A chunk of slots per read lock, so writers to the partition wait for one chunk,
            // not for the whole walk. Slots added meanwhile hold only revisions above `rev`.
            // A partition under a prefix compacted on its own is hashed as compacted at the
            // revision before its floor, what it keeps, whether freed yet or not.
            let slots = p.state.read().slots();
            let compacted = compacted.max(floor_of(floors, &p.prefix) - 1);
            for start in (0..slots).step_by(COMPACTION_CHUNK) {
                let st = p.state.read();
                st.for_each_slot_history(
                    start..start.saturating_add(COMPACTION_CHUNK as u32),
                    |h| {
                        let records = h.records();
                        let at_rev = records.iter().rposition(|r| r.rev.main <= rev);
                        let live = at_rev.filter(|&i| !records[i].is_tombstone());
                        any_live |= live.is_some();
                        let kept = super::key_index::first_kept(records, compacted);
                        for (i, r) in records.iter().enumerate().skip(kept) {
                            if r.rev.main > rev {
                                break;
                            }
                            let v = VersionView {
                                main: r.rev.main,
                                sub: r.rev.sub,
                                create_rev: r.create_rev,
                                version: r.version,
                                lease: r.lease,
                                value: r.value(),
                            };
                            let (crc, len) = key_bucket_crc(h.key(), &v, &mut scratch);
                            let old_not_live = r.rev.main <= compacted && live != Some(i);
                            chunk.push((r.rev, crc, len, old_not_live));
                        }
                    },
                );
                RwLockReadGuard::unlock_fair(st);
                pieces.append(&mut chunk);
            }
        }
        if any_live {
            pieces.retain(|&(_, _, _, old_not_live)| !old_not_live);
        }
        pieces.sort_unstable_by_key(|&(r, ..)| r);
        let mut join = super::crc_combine::Combiner::new();
        let crc = pieces
            .iter()
            .fold(crc32c::crc32c(b"key"), |crc, &(_, c, len, _)| join.append(crc, c, len));
        // etcd reports -1 before the first compaction.
        (crc, rev, compacted)
    }
}

/// The size etcd reports for an empty store (its database file: five 4 KiB pages). The store's
/// fixed structures (the revision clock's rings, half a MiB) are left out, so that a small
/// `--quota-backend-bytes` takes the same first writes as etcd's.
pub const EMPTY_BYTES: usize = 20_480;

/// Keys a compaction (or its hash walk) handles per partition lock: about a millisecond of
/// work, so a write never waits long behind one.
const COMPACTION_CHUNK: usize = 1024;

/// Completes an allocated revision, with the events applied so far, when dropped.
struct Completion<'a> {
    store: &'a Store,
    rev: i64,
    /// The revision's changes as records, made into events here, after the partition locks
    /// are released (the events' views allocate).
    written: Vec<Written>,
}

impl Drop for Completion<'_> {
    fn drop(&mut self) {
        let events: RevisionEvents = self.written.iter().map(Written::to_event).collect();
        // Encoded here, by the writer, so that encoding runs in parallel across writers and the
        // in-order publisher only copies bytes.
        let entry = self.store.commit.wal.get().map(|w| {
            let mut b = w.entry(self.rev);
            for (sub, e) in events.iter().enumerate() {
                let prefix = self.store.partition_prefix(&e.kv.key);
                b.op(&prefix, &to_wal_op(sub as i64, e));
            }
            b.finish()
        });
        let commit = &self.store.commit;
        commit.events.reclaim();
        commit.clock.complete(self.rev, Payload { events, entry }, |batch| commit.publish(batch));
    }
}

/// An event as the WAL logs it (`sub` is its position in the revision).
fn to_wal_op(sub: i64, e: &Event) -> wal::record::Op {
    match e.kind {
        EventKind::Put => wal::record::Op::Put {
            sub,
            key: e.kv.key.clone(),
            value: e.kv.value.clone(),
            lease: e.kv.lease,
            create_rev: e.kv.create_revision,
            version: e.kv.version,
        },
        EventKind::Delete => wal::record::Op::Delete { sub, key: e.kv.key.clone() },
    }
}

/// Calls `f` for every put of a txn, recursively, both branches.
fn visit_puts<'r>(t: &'r TxnRequest, f: &mut impl FnMut(&'r PutRequest)) {
    for op in t.success.iter().chain(&t.failure) {
        match op {
            RequestOp::Put(p) => f(p),
            RequestOp::Txn(t) => visit_puts(t, f),
            _ => {}
        }
    }
}

/// Calls `f(key, range_end)` for every key a txn compares, reads or writes, recursively.
fn visit_keys(t: &TxnRequest, f: &mut impl FnMut(&Bytes, &Bytes)) {
    for c in &t.compare {
        f(&c.key, &c.range_end);
    }
    for op in t.success.iter().chain(&t.failure) {
        match op {
            RequestOp::Range(r) => f(&r.key, &r.range_end),
            RequestOp::Put(p) => f(&p.key, &Bytes::new()),
            RequestOp::DeleteRange(d) => f(&d.key, &d.range_end),
            RequestOp::Txn(t) => visit_keys(t, f),
            RequestOp::DeleteLeased { key, .. } => f(key, &Bytes::new()),
            RequestOp::Empty => {}
        }
    }
}

/// A txn's locked partitions.
struct TxnCtx<'a> {
    store: &'a Store,
    parts: &'a [Arc<Partition>],
    /// Exclusive guards, in the same order as `parts` (ascending id).
    guards: Vec<RwLockWriteGuard<'a, PartitionState>>,
    default: Option<usize>,
    /// The puts' buffers, made before the locks were taken, by the put they belong to
    /// (compared by address: a txn has a few puts).
    bufs: Vec<(*const PutRequest, KvBuf)>,
    /// Room for the changes, allocated before the locks too.
    written: Vec<Written>,
    /// When the guards were taken: each partition counts how long its writers hold it.
    locked: std::time::Instant,
}

impl<'a> TxnCtx<'a> {
    /// Takes the write locks of `parts` (sorted by id, as every writer takes them).
    fn lock(
        store: &'a Store,
        parts: &'a [Arc<Partition>],
        bufs: Vec<(*const PutRequest, KvBuf)>,
    ) -> Self {
        let written = Vec::with_capacity(bufs.len().max(1));
        let guards: Vec<_> = parts.iter().map(|p| p.state.write()).collect();
        let default = parts.iter().position(|p| p.id == 0);
        Self { store, parts, guards, default, bufs, written, locked: std::time::Instant::now() }
    }
}

impl Drop for TxnCtx<'_> {
    /// Runs before the guards are dropped: the time counted is the time held.
    fn drop(&mut self) {
        for p in self.parts {
            p.writing.record(self.locked, 1);
        }
    }
}

impl TxnCtx<'_> {
    /// Index of the locked partition holding `key`.
    fn part_of(&self, key: &[u8]) -> usize {
        if self.parts.len() == 1 {
            // Every key a txn touches has its partition locked: with one, it is that one.
            return 0;
        }
        let i = match self.store.keyspace.partition_of(key) {
            None => self.default,
            Some(prefix) => self.parts.iter().position(|p| &p.prefix[..] == prefix),
        };
        i.expect("every key a txn touches has its partition locked")
    }

    /// Locked partitions a range can have keys in.
    fn parts_of(&self, range: &KeyRange) -> Vec<usize> {
        if range.single {
            return vec![self.part_of(&range.start)];
        }
        (0..self.parts.len())
            .filter(|&i| self.parts[i].id == 0 || range.meets_prefix(&self.parts[i].prefix))
            .collect()
    }

    /// Whether the partition holding `key` is locked.
    fn holds(&self, key: &[u8]) -> bool {
        match self.store.keyspace.partition_of(key) {
            None => self.default.is_some(),
            Some(prefix) => self.parts.iter().any(|p| &p.prefix[..] == prefix),
        }
    }

    /// Undoes what `plan` attached for a write that is not applied: every key a put of `t`
    /// would attach that is not attached to that lease by its live version. Keys change lease
    /// only under their partition's lock, which is held, so this is exact.
    fn release(&self, t: &TxnRequest) {
        let Some(l) = self.store.leases.get() else { return };
        for op in t.success.iter().chain(&t.failure) {
            match op {
                RequestOp::Put(p)
                    if p.lease != 0 && self.latest(&p.key).is_none_or(|kv| kv.lease != p.lease) =>
                {
                    l.detach(p.lease, &p.key);
                }
                RequestOp::Txn(t) => self.release(t),
                _ => {}
            }
        }
    }

    fn latest(&self, key: &[u8]) -> Option<&KeyRecord> {
        self.guards[self.part_of(key)].latest(key)
    }

    /// Live versions in `range` as of `rev` (i64::MAX = newest), in key order, and their count.
    fn read(&self, range: &KeyRange, rev: i64, limit: usize, count: bool) -> (Vec<KeyValue>, u64) {
        let mut kvs = Vec::new();
        let mut n = 0;
        for i in self.parts_of(range) {
            let st = &self.guards[i];
            if count {
                n += st.count_at(range, rev);
            }
            st.scan(range, rev, limit, &mut kvs);
        }
        kvs.sort_by(|a, b| a.key.cmp(&b.key));
        if limit > 0 {
            kvs.truncate(limit);
        }
        (kvs, n)
    }

    fn compares_hold(&self, cmps: &[Compare]) -> bool {
        cmps.iter().all(|c| {
            if c.range_end.is_empty() {
                // One key (kube-apiserver's every update): compared on the record itself, with
                // no copy of the key and no views, under the lock.
                return match self.latest(&c.key) {
                    Some(r) => compare_record(c, r),
                    None => {
                        !matches!(c.target, CompareTarget::Value(_))
                            && compare_kv(c, &KeyValue::default())
                    }
                };
            }
            let range = KeyRange::from_request(&c.key, &c.range_end);
            let (kvs, _) = self.read(&range, i64::MAX, 0, false);
            if kvs.is_empty() {
                // A missing key compares as all zeroes, except that a value compare fails.
                return !matches!(c.target, CompareTarget::Value(_))
                    && compare_kv(c, &KeyValue::default());
            }
            kvs.iter().all(|kv| compare_kv(c, kv))
        })
    }

    /// Decides the path through the txn (one bool per txn, depth first, as etcd's
    /// `compareToPath`), checks the ops that will run, and says whether anything is written.
    fn plan(&self, t: &TxnRequest, path: &mut Vec<bool>, current: i64) -> Result<bool> {
        let ok = self.compares_hold(&t.compare);
        path.push(ok);
        let mut writes = false;
        for op in if ok { &t.success } else { &t.failure } {
            match op {
                RequestOp::Range(r) => {
                    if r.revision > current {
                        return Err(Error::FutureRev);
                    }
                    // etcd's txn check compares any non-zero revision, negative ones included,
                    // with the compaction revision (-1 before the first compaction).
                    if r.revision != 0 && r.revision < self.store.compact_rev.load(Ordering::SeqCst)
                    {
                        return Err(Error::Compacted);
                    }
                }
                RequestOp::Put(p) => {
                    if (p.ignore_value || p.ignore_lease) && self.latest(&p.key).is_none() {
                        return Err(Error::KeyNotFound);
                    }
                    // Attached now, in one step with the check: a revocation then waits for this
                    // partition's lock (undone by `release` if the write fails).
                    if p.lease != 0 && !self.store.lease_reserve(p.lease, &p.key) {
                        return Err(Error::LeaseNotFound);
                    }
                    writes = true;
                }
                RequestOp::DeleteRange(d) => {
                    let range = KeyRange::from_request(&d.key, &d.range_end);
                    writes |=
                        self.parts_of(&range).into_iter().any(|i| self.guards[i].any_live(&range));
                }
                RequestOp::Txn(t) => writes |= self.plan(t, path, current)?,
                RequestOp::Empty => return Err(Error::KeyNotFound),
                RequestOp::DeleteLeased { key, lease } => {
                    writes |= self.latest(key).is_some_and(|kv| kv.lease == *lease);
                }
            }
        }
        Ok(writes)
    }

    /// Deletes one live key of locked partition `i` at the next sub-revision: the tombstone, the
    /// lease detach and the DELETE event. Returns the key's last version.
    fn delete_key(
        &mut self,
        i: usize,
        key: &Bytes,
        rev: i64,
        sub: &mut i64,
        written: &mut Vec<Written>,
    ) -> Option<KeyRecord> {
        let w = self.guards[i].delete(key, Revision::new(rev, *sub))?;
        *sub += 1;
        let prev = w.prev.clone();
        self.store.detach_moved(key, prev.as_ref().map_or(0, |p| p.lease), 0);
        written.push(w);
        prev
    }

    /// Applies the planned path. `rev` is the txn's main revision (0 if it writes nothing),
    /// `base` the revision before it, `sub` the next sub-revision.
    fn exec(
        &mut self,
        t: &TxnRequest,
        path: &mut std::vec::IntoIter<bool>,
        rev: i64,
        base: i64,
        sub: &mut i64,
        written: &mut Vec<Written>,
    ) -> TxnResponse {
        let ok = path.next().expect("planned path covers every executed txn");
        let ops = if ok { &t.success } else { &t.failure };
        let mut responses = Vec::with_capacity(ops.len());
        for op in ops {
            let resp = match op {
                RequestOp::Range(r) => {
                    let header = if *sub > 0 { base + 1 } else { base };
                    let range = KeyRange::from_request(&r.key, &r.range_end);
                    let at = if r.revision > 0 { r.revision } else { i64::MAX };
                    let fetch = if r.count_only { 0 } else { fetch_limit(r) };
                    let (kvs, n) = if r.count_only {
                        (Vec::new(), self.read(&range, at, 0, true).1)
                    } else {
                        self.read(&range, at, fetch, true)
                    };
                    ResponseOp::Range(finish_range(r, kvs, n, header))
                }
                RequestOp::Put(p) => {
                    let i = self.part_of(&p.key);
                    let st = &mut self.guards[i];
                    // The request's key and value are views into the gRPC decode buffer (8 KiB
                    // or more). A version lives until compaction, so keeping the view would pin
                    // that whole buffer per version: both were copied into one buffer of the
                    // exact size before the locks (`bufs`). An ignored value stays the previous
                    // version's buffer, key and all.
                    let prev = || st.latest(&p.key).expect("checked in plan");
                    let lease = if p.ignore_lease { prev().lease } else { p.lease };
                    let data = if p.ignore_value {
                        prev().data.clone()
                    } else {
                        let made = self.bufs.iter().position(|(q, _)| std::ptr::eq(*q, p));
                        match made {
                            Some(j) => self.bufs.swap_remove(j).1,
                            None => KvBuf::new(&p.key, &p.value),
                        }
                    };
                    let w = st.put(data, Revision::new(rev, *sub), lease);
                    *sub += 1;
                    // Attached to `lease` already, in `plan`.
                    self.store.detach_moved(&p.key, w.prev.as_ref().map_or(0, |p| p.lease), lease);
                    let prev_kv =
                        if p.prev_kv { w.prev.as_ref().map(KeyRecord::to_kv) } else { None };
                    written.push(w);
                    ResponseOp::Put(PutResponse { revision: base + 1, prev_kv })
                }
                RequestOp::DeleteRange(d) => {
                    let range = KeyRange::from_request(&d.key, &d.range_end);
                    let mut keys: Vec<(usize, Bytes)> = Vec::new();
                    for i in self.parts_of(&range) {
                        keys.extend(
                            self.guards[i].live_keys_in(&range).into_iter().map(|k| (i, k)),
                        );
                    }
                    keys.sort_by(|a, b| a.1.cmp(&b.1));
                    let mut prev_kvs = Vec::new();
                    for (i, k) in &keys {
                        let prev = self.delete_key(*i, k, rev, sub, written);
                        if d.prev_kv {
                            prev_kvs.extend(prev.as_ref().map(KeyRecord::to_kv));
                        }
                    }
                    ResponseOp::DeleteRange(DeleteRangeResponse {
                        revision: if *sub > 0 { base + 1 } else { base },
                        deleted: keys.len() as i64,
                        prev_kvs,
                    })
                }
                RequestOp::Txn(nested) => {
                    let mut r = self.exec(nested, path, rev, base, sub, written);
                    // etcd fills only the outermost txn header.
                    r.revision = 0;
                    ResponseOp::Txn(r)
                }
                RequestOp::Empty => unreachable!("refused in plan"),
                RequestOp::DeleteLeased { key, lease } => {
                    let i = self.part_of(key);
                    let live = self.guards[i].latest(key);
                    let mut deleted = 0;
                    if live.is_some_and(|r| r.lease == *lease) {
                        self.delete_key(i, key, rev, sub, written);
                        deleted = 1;
                    }
                    ResponseOp::DeleteRange(DeleteRangeResponse {
                        revision: if *sub > 0 { base + 1 } else { base },
                        deleted,
                        prev_kvs: vec![],
                    })
                }
            };
            responses.push(resp);
        }
        TxnResponse { revision: 0, succeeded: ok, responses }
    }
}

fn compare_kv(c: &Compare, kv: &KeyValue) -> bool {
    let ord = match &c.target {
        CompareTarget::Value(v) => kv.value[..].cmp(&v[..]),
        CompareTarget::Create(n) => kv.create_revision.cmp(n),
        CompareTarget::Mod(n) => kv.mod_revision.cmp(n),
        CompareTarget::Version(n) => kv.version.cmp(n),
        CompareTarget::Lease(n) => kv.lease.cmp(n),
        CompareTarget::Unknown => std::cmp::Ordering::Equal,
    };
    compared(c, ord)
}

/// [`compare_kv`] on a live version as stored.
fn compare_record(c: &Compare, r: &KeyRecord) -> bool {
    let ord = match &c.target {
        CompareTarget::Value(v) => r.value().cmp(&v[..]),
        CompareTarget::Create(n) => r.create_rev.cmp(n),
        CompareTarget::Mod(n) => r.rev.main.cmp(n),
        CompareTarget::Version(n) => r.version.cmp(n),
        CompareTarget::Lease(n) => r.lease.cmp(n),
        CompareTarget::Unknown => std::cmp::Ordering::Equal,
    };
    compared(c, ord)
}

/// Whether a compare holds, given how the key's field orders against its operand.
fn compared(c: &Compare, ord: std::cmp::Ordering) -> bool {
    match c.result {
        CompareResult::Equal => ord.is_eq(),
        CompareResult::NotEqual => ord.is_ne(),
        CompareResult::Greater => ord.is_gt(),
        CompareResult::Less => ord.is_lt(),
        CompareResult::Unknown => true,
    }
}

/// How many versions a range must fetch: all of them when it sorts or filters afterwards,
/// otherwise one more than the limit (to know whether there is more).
fn fetch_limit(r: &RangeRequest) -> usize {
    let filters = r.min_mod_revision != 0
        || r.max_mod_revision != 0
        || r.min_create_revision != 0
        || r.max_create_revision != 0;
    if r.sort_order != SortOrder::None || filters || r.limit <= 0 {
        0
    } else {
        r.limit as usize + 1
    }
}

/// Merges two key-sorted lists, keeping at most `limit` (0 = all).
fn merge_sorted(a: Vec<KeyValue>, b: Vec<KeyValue>, limit: usize) -> Vec<KeyValue> {
    if a.is_empty() || b.is_empty() {
        let mut v = if a.is_empty() { b } else { a };
        if limit > 0 {
            v.truncate(limit);
        }
        return v;
    }
    let cap = if limit > 0 { limit.min(a.len() + b.len()) } else { a.len() + b.len() };
    let mut out = Vec::with_capacity(cap);
    let (mut a, mut b) = (a.into_iter().peekable(), b.into_iter().peekable());
    while out.len() < cap {
        let take_a = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => x.key <= y.key,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        out.extend(if take_a { a.next() } else { b.next() });
    }
    out
}

/// etcd's post-processing of a range (`executeRange`): revision filters, sorting, the limit and
/// `more`, keys-only.
fn finish_range(
    r: &RangeRequest,
    mut kvs: Vec<KeyValue>,
    count: u64,
    header: i64,
) -> RangeResponse {
    if r.count_only {
        kvs.clear();
    }
    if r.max_mod_revision != 0 {
        kvs.retain(|kv| kv.mod_revision <= r.max_mod_revision);
    }
    if r.min_mod_revision != 0 {
        kvs.retain(|kv| kv.mod_revision >= r.min_mod_revision);
    }
    if r.max_create_revision != 0 {
        kvs.retain(|kv| kv.create_revision <= r.max_create_revision);
    }
    if r.min_create_revision != 0 {
        kvs.retain(|kv| kv.create_revision >= r.min_create_revision);
    }
    let order = match (r.sort_target, r.sort_order) {
        (SortTarget::Key, SortOrder::Ascend) => SortOrder::None,
        (t, SortOrder::None) if t != SortTarget::Key => SortOrder::Ascend,
        (_, o) => o,
    };
    if order != SortOrder::None {
        // A stable sort with the comparison reversed for DESCEND: equal elements keep key order
        // either way, which is what etcd's sort (insertion sort for small inputs) yields too.
        let cmp = |a: &KeyValue, b: &KeyValue| match r.sort_target {
            SortTarget::Key => a.key.cmp(&b.key),
            SortTarget::Version => a.version.cmp(&b.version),
            SortTarget::Create => a.create_revision.cmp(&b.create_revision),
            SortTarget::Mod => a.mod_revision.cmp(&b.mod_revision),
            SortTarget::Value => a.value.cmp(&b.value),
        };
        if order == SortOrder::Descend {
            kvs.sort_by(|a, b| cmp(b, a));
        } else {
            kvs.sort_by(cmp);
        }
    }
    let mut more = false;
    if r.limit > 0 && kvs.len() > r.limit as usize {
        kvs.truncate(r.limit as usize);
        more = true;
    }
    if r.keys_only {
        for kv in &mut kvs {
            kv.value = Bytes::new();
        }
    }
    RangeResponse { revision: header, kvs, more, count: count as i64 }
}
