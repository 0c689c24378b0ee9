//! The watch hub: watcher registry, live fan-out, catch-up and progress.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use bytes::Bytes;
use hashbrown::HashMap;
use parking_lot::Mutex;
use tokio::sync::{Notify, mpsc};

use super::interval::IntervalSet;
use crate::keyspace::{KeyRange, Keyspace, prefix_end};
use crate::mvcc::{CommitObserver, Event, EventKind, EventLog, RevisionEvents};

/// Revisions a synced watcher may have queued and unsent before it is moved off the live path
/// (etcd uses 128 responses per stream).
const MAX_PENDING: usize = 256;
/// Catch-up reads at most this much history per step, so one watcher replaying a long history
/// does not keep its stream from serving the others.
const CATCH_UP_REVS: usize = 1000;
const CATCH_UP_BYTES: usize = 1 << 20;

/// etcd's `clientv3.InvalidWatchID`.
pub const INVALID_WATCH_ID: i64 = -1;

/// What a stream sends to its client, in order.
#[derive(Debug)]
pub enum Message {
    /// Answer to a create. `watch_id == -1` with `canceled` for a refused create.
    /// `done` counts the message off the watch's queue once taken.
    Created {
        watch_id: i64,
        revision: i64,
        canceled: bool,
        cancel_reason: String,
        done: Option<Arc<AtomicUsize>>,
    },
    /// One revision's matching events for a watch (`revision` is the header revision).
    Events {
        watch_id: i64,
        revision: i64,
        events: RevisionEvents,
        picks: Picks,
        opts: WatchOptions,
        done: Arc<AtomicUsize>,
    },
    /// The watch is gone: canceled by the client, or compacted (`compact_revision != 0`).
    Canceled { watch_id: i64, revision: i64, compact_revision: i64 },
    /// Progress: every event up to `revision` was sent (`watch_id == -1`: for all watches).
    Progress { watch_id: i64, revision: i64 },
}

/// Which events of a revision a watch gets: sharing the revision's events instead of copying
/// them is what lets one encoding serve every watcher.
#[derive(Clone, Debug)]
pub enum Picks {
    All,
    Only(Vec<u32>),
}

impl Picks {
    pub fn iter<'a>(&'a self, events: &'a [Event]) -> impl Iterator<Item = &'a Event> + 'a {
        let (all, only) = match self {
            Picks::All => (Some(events.iter()), None),
            Picks::Only(ix) => (None, Some(ix.iter().map(|&i| &events[i as usize]))),
        };
        all.into_iter().flatten().chain(only.into_iter().flatten())
    }
}

/// A create request, already decoded.
#[derive(Clone, Debug, Default)]
pub struct CreateRequest {
    pub key: Bytes,
    pub range_end: Bytes,
    pub start_revision: i64,
    pub watch_id: i64,
    pub progress_notify: bool,
    pub prev_kv: bool,
    pub fragment: bool,
    pub no_put: bool,
    pub no_delete: bool,
}

/// Per-watch options the stream task needs when encoding.
#[derive(Clone, Copy, Debug, Default)]
pub struct WatchOptions {
    pub prev_kv: bool,
    pub fragment: bool,
}

#[derive(Debug)]
struct Watcher {
    range: KeyRange,
    no_put: bool,
    no_delete: bool,
    opts: WatchOptions,
    progress_notify: bool,
    start_rev: i64,
    /// Live delivery (true) or replaying history from `next_rev` (false).
    synced: bool,
    /// While unsynced: the next revision to replay.
    next_rev: i64,
    /// Messages for this watch queued on the stream and not yet sent.
    pending: Arc<AtomicUsize>,
    /// Whether events went out since the last progress tick (then no periodic progress).
    events_since_tick: bool,
    /// The history this watch needs was compacted: it got the compacted cancel and delivers
    /// nothing more, but its id stays taken until the client cancels it, as in etcd (until
    /// then progress requests on the stream go unanswered, also as in etcd).
    compacted: bool,
}

#[derive(Debug)]
struct Stream {
    tx: mpsc::UnboundedSender<Message>,
    watchers: HashMap<i64, Watcher>,
    next_id: i64,
    /// Wakes the stream task when one of its watchers needs catching up.
    wake: Arc<Notify>,
}

type WatchKey = (u64, i64);

/// Which watchers a key can match: exact keys by hash; ranges by an interval index, one per
/// resource for ranges inside it and one for ranges that span resources. Matching a key costs
/// O(log W + matches).
#[derive(Debug, Default)]
struct Index {
    keys: HashMap<Bytes, Vec<WatchKey>>,
    resources: HashMap<Bytes, IntervalSet<WatchKey>>,
    wide: IntervalSet<WatchKey>,
}

#[derive(Debug)]
enum Slot {
    Key(Bytes),
    Resource(Bytes),
    Wide,
}

impl Index {
    fn slot(ks: &Keyspace, range: &KeyRange) -> Slot {
        if range.single {
            return Slot::Key(range.start.clone());
        }
        if let Some(p) = ks.resource_prefix(&range.start) {
            let inside = match (&range.end, prefix_end(p)) {
                (Some(e), Some(pe)) => e[..] <= pe[..],
                _ => false,
            };
            if inside {
                return Slot::Resource(Bytes::copy_from_slice(p));
            }
        }
        Slot::Wide
    }

    fn insert(&mut self, ks: &Keyspace, range: &KeyRange, wk: WatchKey) {
        let (start, end) = (range.start.clone(), range.end.clone());
        match Self::slot(ks, range) {
            Slot::Key(k) => self.keys.entry(k).or_default().push(wk),
            Slot::Resource(p) => self.resources.entry(p).or_default().insert(start, end, wk),
            Slot::Wide => self.wide.insert(start, end, wk),
        }
    }

    fn remove(&mut self, ks: &Keyspace, range: &KeyRange, wk: WatchKey) {
        match Self::slot(ks, range) {
            Slot::Key(k) => {
                if let Some(list) = self.keys.get_mut(&k) {
                    list.retain(|x| *x != wk);
                    if list.is_empty() {
                        self.keys.remove(&k);
                    }
                }
            }
            Slot::Resource(p) => {
                if let Some(set) = self.resources.get_mut(&p) {
                    set.remove(wk);
                    if set.is_empty() {
                        self.resources.remove(&p);
                    }
                }
            }
            Slot::Wide => self.wide.remove(wk),
        }
    }

    /// Calls `f` for every watch whose range contains `key` (each once).
    fn matching(&self, ks: &Keyspace, key: &[u8], f: &mut impl FnMut(WatchKey)) {
        for &wk in self.keys.get(key).into_iter().flatten() {
            f(wk);
        }
        if let Some(set) = ks.partition_of(key).and_then(|p| self.resources.get(p)) {
            set.stab(key, f);
        }
        self.wide.stab(key, f);
    }
}

#[derive(Debug)]
struct State {
    /// The newest revision fanned out to synced watchers.
    published: i64,
    streams: HashMap<u64, Stream>,
    index: Index,
}

/// Every watcher of every stream.
#[derive(Debug)]
pub struct WatchHub {
    keyspace: Keyspace,
    log: Arc<EventLog>,
    /// One lock for registration, fan-out and the synced/unsynced switch: taking both paths'
    /// decisions under it is what makes delivery exactly-once. Held by the publisher once per
    /// batch of revisions, and by streams for creates, cancels and progress.
    state: Mutex<State>,
    next_stream: AtomicU64,
}

/// The outcome of one catch-up step.
#[derive(Debug)]
pub enum CatchUp {
    /// No watcher of the stream needs it now.
    Idle,
    /// Events to send for `watch_id` (possibly none when nothing matched); call again.
    Events {
        watch_id: i64,
        revision: i64,
        events: Vec<(RevisionEvents, Picks)>,
        opts: WatchOptions,
    },
    /// The history the watcher needs is compacted: it delivers nothing more (its id stays
    /// taken until the client cancels it).
    Compacted { watch_id: i64, revision: i64, compact_revision: i64 },
}

impl WatchHub {
    /// A hub whose newest published revision is `current`.
    pub fn new(keyspace: Keyspace, log: Arc<EventLog>, current: i64) -> Self {
        Self {
            keyspace,
            log,
            state: Mutex::new(State {
                published: current,
                streams: HashMap::new(),
                index: Index::default(),
            }),
            next_stream: AtomicU64::new(1),
        }
    }

    /// Opens a stream: its id, the receiver of its messages and its catch-up wake-up.
    pub fn open_stream(&self) -> (u64, mpsc::UnboundedReceiver<Message>, Arc<Notify>) {
        let id = self.next_stream.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        let wake = Arc::new(Notify::new());
        let stream = Stream { tx, watchers: HashMap::new(), next_id: 0, wake: wake.clone() };
        self.state.lock().streams.insert(id, stream);
        (id, rx, wake)
    }

    /// Drops a stream and all its watchers.
    pub fn close_stream(&self, sid: u64) {
        let mut st = self.state.lock();
        let State { streams, index, .. } = &mut *st;
        if let Some(s) = streams.remove(&sid) {
            for (wid, w) in s.watchers {
                index.remove(&self.keyspace, &w.range, (sid, wid));
            }
        }
    }

    /// Number of watchers across all streams.
    pub fn watcher_count(&self) -> usize {
        self.state.lock().streams.values().map(|s| s.watchers.len()).sum()
    }

    /// Streams, watchers, and the watchers replaying history rather than getting events live
    /// (etcd's "slow" unsynced watchers), for metrics.
    pub fn counts(&self) -> (usize, usize, usize) {
        let st = self.state.lock();
        let watchers = st.streams.values().flat_map(|s| s.watchers.values());
        let (all, slow) =
            watchers.fold((0, 0), |(a, s), w| (a + 1, s + usize::from(!w.synced && !w.compacted)));
        (st.streams.len(), all, slow)
    }

    /// The key each watcher's range starts at, for counting watchers by where they look.
    pub fn watched_starts(&self) -> Vec<Bytes> {
        let st = self.state.lock();
        st.streams
            .values()
            .flat_map(|s| s.watchers.values())
            .map(|w| w.range.start.clone())
            .collect()
    }

    /// Creates a watch; the answer (and anything after it) arrives on the stream's channel.
    pub fn create(&self, sid: u64, req: CreateRequest) {
        let mut st = self.state.lock();
        let published = st.published;
        let State { streams, index, .. } = &mut *st;
        let Some(s) = streams.get_mut(&sid) else { return };
        let refuse = |s: &Stream, reason: &str| {
            let _ = s.tx.send(Message::Created {
                watch_id: INVALID_WATCH_ID,
                revision: published,
                canceled: true,
                cancel_reason: reason.to_string(),
                done: None,
            });
        };
        if req.start_revision < 0 {
            return refuse(s, "etcdserver: mvcc: required revision has been compacted");
        }
        // An empty key watches "\0" (and with range_end "\0", every key), as in etcd.
        let key = if req.key.is_empty() { Bytes::from_static(b"\0") } else { req.key };
        let range = KeyRange::from_request(&key, &req.range_end);
        if range.is_empty() {
            return refuse(s, "mvcc: watcher range is empty");
        }
        let wid = if req.watch_id == 0 {
            while s.watchers.contains_key(&s.next_id) {
                s.next_id += 1;
            }
            s.next_id += 1;
            s.next_id - 1
        } else if s.watchers.contains_key(&req.watch_id) {
            return refuse(s, "mvcc: duplicate watch ID provided on the WatchStream");
        } else {
            req.watch_id
        };
        let pending = Arc::new(AtomicUsize::new(1));
        let _ = s.tx.send(Message::Created {
            watch_id: wid,
            revision: published,
            canceled: false,
            cancel_reason: String::new(),
            done: Some(pending.clone()),
        });
        let start = req.start_revision;
        // The store's compaction, or a later one of a prefix the watch meets (a tenant's).
        let compacted = self.log.compacted().max(self.log.floor_for(&range));
        let too_old = start > 0 && start < compacted;
        let (synced, start_rev) = match start {
            0 => (true, published + 1),
            s if s > published => (true, s),
            s => (false, s),
        };
        let w = Watcher {
            range,
            no_put: req.no_put,
            no_delete: req.no_delete,
            opts: WatchOptions { prev_kv: req.prev_kv, fragment: req.fragment },
            progress_notify: req.progress_notify,
            start_rev,
            synced,
            next_rev: start_rev,
            pending,
            events_since_tick: false,
            compacted: too_old,
        };
        if too_old {
            // etcd's compacted cancel carries a header without a revision.
            let _ = s.tx.send(Message::Canceled {
                watch_id: wid,
                revision: 0,
                compact_revision: compacted,
            });
            s.watchers.insert(wid, w);
            return;
        }
        index.insert(&self.keyspace, &w.range, (sid, wid));
        s.watchers.insert(wid, w);
        if !synced {
            s.wake.notify_one();
        }
    }

    /// Cancels a watch; unknown ids get no answer, as in etcd.
    pub fn cancel(&self, sid: u64, wid: i64) {
        let mut st = self.state.lock();
        let published = st.published;
        let State { streams, index, .. } = &mut *st;
        let Some(s) = streams.get_mut(&sid) else { return };
        if let Some(w) = s.watchers.remove(&wid) {
            index.remove(&self.keyspace, &w.range, (sid, wid));
            let _ = s.tx.send(Message::Canceled {
                watch_id: wid,
                revision: published,
                compact_revision: 0,
            });
        }
    }

    /// A client's WatchProgressRequest: answered with the published revision, ordered after
    /// every event up to it, if every watch of the stream is synced; otherwise dropped (the
    /// client asks again).
    pub fn request_progress(&self, sid: u64) {
        let st = self.state.lock();
        let Some(s) = st.streams.get(&sid) else { return };
        if s.watchers.is_empty() {
            return;
        }
        if s.watchers.values().all(|w| w.synced && progress_allowed(st.published, w)) {
            let _ =
                s.tx.send(Message::Progress { watch_id: INVALID_WATCH_ID, revision: st.published });
        }
    }

    /// The periodic progress tick: each watch that asked for progress and got no events since
    /// the last tick learns the published revision.
    pub fn tick(&self, sid: u64) {
        let mut st = self.state.lock();
        let published = st.published;
        let Some(s) = st.streams.get_mut(&sid) else { return };
        for (&wid, w) in s.watchers.iter_mut() {
            if w.progress_notify
                && !w.events_since_tick
                && w.synced
                && progress_allowed(published, w)
            {
                let _ = s.tx.send(Message::Progress { watch_id: wid, revision: published });
            }
            w.events_since_tick = false;
        }
    }

    /// The store jumped to revision `rev` (a snapshot replaced its state): every live watcher
    /// replays what it has not seen from the event log, as a slow watcher does, or gets the
    /// compacted cancel if that history is gone.
    pub fn jump(&self, rev: i64) {
        let mut st = self.state.lock();
        let from = st.published + 1;
        st.published = st.published.max(rev);
        for s in st.streams.values_mut() {
            let mut wake = false;
            for w in s.watchers.values_mut() {
                if w.synced {
                    w.synced = false;
                    w.next_rev = from.max(w.start_rev);
                    wake = true;
                }
            }
            if wake {
                s.wake.notify_one();
            }
        }
    }

    /// One catch-up step for some unsynced watcher of the stream whose queue has drained.
    pub fn catch_up(&self, sid: u64) -> CatchUp {
        let (wid, from, target, range, no_put, no_delete, opts) =
            {
                let st = self.state.lock();
                let Some(s) = st.streams.get(&sid) else { return CatchUp::Idle };
                let Some((&wid, w)) = s.watchers.iter().find(|(_, w)| {
                    !w.synced && !w.compacted && w.pending.load(Ordering::SeqCst) == 0
                }) else {
                    return CatchUp::Idle;
                };
                (wid, w.next_rev, st.published, w.range.clone(), w.no_put, w.no_delete, w.opts)
            };
        let read = self.log.read(from.max(1), target, CATCH_UP_REVS, CATCH_UP_BYTES);
        // After the read: a prefix compacted during it may have left its events out, and then
        // its floor is set by now.
        let floor = self.log.floor_for(&range);
        let read = if from < floor { Err(floor) } else { read };
        let mut st = self.state.lock();
        let published = st.published;
        let State { streams, index, .. } = &mut *st;
        let Some(s) = streams.get_mut(&sid) else { return CatchUp::Idle };
        let Some(w) = s.watchers.get_mut(&wid) else { return CatchUp::Idle };
        if w.synced || w.compacted || w.next_rev != from {
            return CatchUp::Idle;
        }
        let revs = match read {
            Ok(revs) => revs,
            Err(compact_revision) => {
                index.remove(&self.keyspace, &w.range, (sid, wid));
                w.compacted = true;
                return CatchUp::Compacted { watch_id: wid, revision: 0, compact_revision };
            }
        };
        let last = revs.last().map_or(target, |(r, _)| *r);
        let mut events = Vec::new();
        for (_, evs) in revs {
            let ix: Vec<u32> = (0..evs.len() as u32)
                .filter(|&i| matches(&range, no_put, no_delete, &evs[i as usize]))
                .collect();
            if ix.len() == evs.len() {
                events.push((evs, Picks::All));
            } else if !ix.is_empty() {
                events.push((evs, Picks::Only(ix)));
            }
        }
        w.next_rev = last + 1;
        if w.next_rev > published {
            w.synced = true;
        } else {
            s.wake.notify_one();
        }
        if !events.is_empty() {
            w.events_since_tick = true;
        }
        CatchUp::Events { watch_id: wid, revision: target, events, opts }
    }
}

/// The progress rule: never report a revision below `start - 1`, which would make a client
/// resume before its start (etcd 3.6.2 and later refuse that too), while still answering a
/// watch that starts right after the current revision (Kubernetes 1.31 to 1.33 wait for it).
fn progress_allowed(published: i64, w: &Watcher) -> bool {
    published >= w.start_rev - 1
}

fn matches(range: &KeyRange, no_put: bool, no_delete: bool, e: &Event) -> bool {
    range.contains(&e.kv.key)
        && match e.kind {
            EventKind::Put => !no_put,
            EventKind::Delete => !no_delete,
        }
}

impl CommitObserver for WatchHub {
    fn on_commit(&self, batch: &[(i64, RevisionEvents)]) {
        let mut st = self.state.lock();
        let State { streams, index, published } = &mut *st;
        // Matches of one revision, per watch, in event order; `at` finds a watch's entry when a
        // revision has several events (a watch is listed once per key, so a single-event
        // revision needs no lookup).
        let mut hits: Vec<(WatchKey, Picks)> = Vec::new();
        let mut at: HashMap<WatchKey, usize> = HashMap::new();
        let mut matched: Vec<WatchKey> = Vec::new();
        for (rev, evs) in batch {
            let rev = *rev;
            hits.clear();
            at.clear();
            let several = evs.len() > 1;
            for (i, e) in evs.iter().enumerate() {
                matched.clear();
                index.matching(&self.keyspace, &e.kv.key, &mut |wk| matched.push(wk));
                for &wk in &matched {
                    let Some(w) = streams.get(&wk.0).and_then(|s| s.watchers.get(&wk.1)) else {
                        continue;
                    };
                    if !w.synced
                        || rev < w.start_rev
                        || !matches(&w.range, w.no_put, w.no_delete, e)
                    {
                        continue;
                    }
                    if !several {
                        hits.push((wk, Picks::All));
                        continue;
                    }
                    match at.get(&wk) {
                        Some(&h) => {
                            if let Picks::Only(ix) = &mut hits[h].1 {
                                ix.push(i as u32);
                            }
                        }
                        None => {
                            at.insert(wk, hits.len());
                            hits.push((wk, Picks::Only(vec![i as u32])));
                        }
                    }
                }
            }
            for (wk, mut picks) in hits.drain(..) {
                if matches!(&picks, Picks::Only(ix) if ix.len() == evs.len()) {
                    picks = Picks::All;
                }
                let s = streams.get_mut(&wk.0).expect("matched stream exists");
                let w = s.watchers.get_mut(&wk.1).expect("matched watcher exists");
                if w.pending.load(Ordering::SeqCst) >= MAX_PENDING {
                    // The client is not keeping up: replay from this revision later instead of
                    // queueing without bound (and without ever blocking this writer).
                    w.synced = false;
                    w.next_rev = rev;
                    s.wake.notify_one();
                    continue;
                }
                w.pending.fetch_add(1, Ordering::SeqCst);
                w.events_since_tick = true;
                let msg = Message::Events {
                    watch_id: wk.1,
                    revision: rev,
                    events: evs.clone(),
                    picks,
                    opts: w.opts,
                    done: w.pending.clone(),
                };
                let _ = s.tx.send(msg);
            }
            *published = rev;
        }
    }
}
