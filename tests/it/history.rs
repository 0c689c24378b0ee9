//! History checking: concurrent clients send Kubernetes-shaped traffic to one server or to the
//! members of a cluster, every request and response is recorded with its timing, and the
//! history is then validated.
//!
//! * KV and lease operations must be linearizable against a model of etcd's MVCC store and
//!   lessor (a lease's expiry is an operation of unknown outcome, possible from its TTL after
//!   the grant on). The search is Wing & Gong's with Lowe's memoization (a set of linearized
//!   operations plus a model state is explored at most once). Revisions are global, so the
//!   history cannot be partitioned by key; runs are kept to a few thousand operations instead,
//!   with several seeds.
//! * Reads at a pinned revision are checked outside the search, exactly, against the state the
//!   linearization had at that revision.
//! * Watches started from a list's revision must deliver exactly the linearization's events
//!   (ordered, unique, atomic, reliable, with prev_kv and the create flag right), continue
//!   seamlessly when resumed from the last revision + 1, never report progress past an event they
//!   have not delivered, and refuse a compacted start revision with its compact_revision.
//!
//! * With faults, the same traffic runs while the server is killed with SIGKILL and restarted
//!   (fsync and buffered mode: a killed process loses nothing acknowledged in either, so the
//!   history must stay linearizable across the restarts, writes cut off by the crash counting as
//!   unknown), while its disk fails (writes refused with "WAL write failed" must never take
//!   effect), and while one watcher stalls with megabytes of padded values going by. Watchers
//!   resume on the restarted server from their last revision + 1.
//!
//! * Over a 3-member cluster (`cluster_history_*`), the same traffic runs with every client
//!   sticking to one member (round robin) and the watchers spread over the members, each
//!   reconnecting to its own member when that member is restarted, while the leader and a
//!   follower are killed with SIGKILL and restarted on their (buffered) data, the leader is cut
//!   off from the others by a partition (mem_etcd's peer failpoint) until they elect another,
//!   and the leader and a follower are paused (SIGSTOP) and resumed. A request that gets no
//!   answer or fails for want of a leader (`etcdserver: request timed out`, `no leader`,
//!   `leader changed`, an unavailable member) is a write of unknown outcome, or a read that
//!   constrains nothing; one that no watcher saw take effect is left out of the search (were
//!   the watches wrong, the linearization would come out a revision short). The linearizable
//!   operations must be linearizable as above; half the Gets are serializable and are checked
//!   after the search: each must be the linearization's
//!   state at its header's revision, a revision no older than any the client saw before from its
//!   member (read-your-writes and monotonic reads per member). Every watcher's streams must keep
//!   every watch guarantee, and the members must converge to one revision and one HashKV.
//!
//! Every run starts a fresh server (or cluster) of the suite's target
//! (`MEM_ETCD_TEST_TARGET=etcd` runs the same checks against a real etcd, which proves the
//! model; the one allowance it needs is named at [`check_watch_with`]); the fault runs on one
//! server are mem_etcd's own (they use its WAL failpoint), the cluster's run against etcd as
//! well, pausing members where mem_etcd's are cut off by a partition. The
//! default is a few seeds, a few seconds in a debug build;
//! `MEM_ETCD_HISTORY_SOAK=<seconds>` keeps running new seeds for that long, and
//! `MEM_ETCD_HISTORY_SEED=<n>` picks the first seed (each run prints its seed and what it
//! exercised); `MEM_ETCD_HISTORY_DUMP=<file>` writes a history the search refuses to
//! `<file>.seed<n>`, one operation a line in call order (times in ns from the start).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mvccpb::event::EventType;
use pb::compare::{CompareResult, CompareTarget, TargetUnion};
use pb::request_op::Request as Rq;
use pb::response_op::Response as Rs;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use tonic::transport::Channel;

use crate::cluster_harness::Cluster;
use crate::durability::set_failpoint;
use crate::support::*;
use crate::watch::{CreateExt, Ev, Ws, b, hrev, is_progress, on_prefix, prefix_end};

const PREFIX: &str = "/registry/pods/ns/";
/// Few keys, so creates, updates and deletes of different clients collide.
const KEYS: usize = 10;
/// Small pages, so a list of ten keys takes several requests at a pinned revision.
const PAGE: i64 = 3;
const CLIENTS: usize = 8;
/// Runs (seeds) in the default, CI-sized test: about a second in release, ten in debug.
const RUNS: u64 = 10;
/// Operations each client starts per run (a list counts once but sends several pages).
const OPS_PER_CLIENT: usize = 40;
/// The TTL of the leases clients grant, in seconds: etcd's minimum, so that runs of a few
/// seconds see leases expire.
const LEASE_TTL: i64 = 2;
/// A client's average pause between operations in the runs of several seconds.
const THINK: Duration = Duration::from_millis(10);
/// How long one request may take before its outcome counts as unknown.
const DEADLINE: Duration = Duration::from_secs(5);
/// Model states the search may visit before it gives up (and the test fails, saying so).
const SEARCH_BUDGET: usize = 2_000_000;

// ---------------------------------------------------------------------------------------------
// The model

/// What the model keeps of a key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Val {
    value: Vec<u8>,
    create: i64,
    modr: i64,
    version: i64,
    lease: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct State {
    kvs: BTreeMap<Vec<u8>, Val>,
    rev: i64,
    compacted: i64,
    /// Leases granted and not yet revoked or expired.
    leases: BTreeSet<i64>,
}

impl State {
    fn hash64(&self) -> u64 {
        let mut h = DefaultHasher::new();
        self.hash(&mut h);
        h.finish()
    }

    fn kv(&self, key: &[u8]) -> Option<Kv> {
        self.kvs.get(key).map(|v| Kv {
            key: key.to_vec(),
            value: v.value.clone(),
            create_revision: v.create,
            mod_revision: v.modr,
            version: v.version,
            lease: v.lease,
        })
    }

    /// A page of `[start, end of PREFIX)`: (kvs, count, more).
    fn page(&self, start: &[u8], limit: i64) -> (Vec<Kv>, i64, bool) {
        let end = prefix_end(PREFIX.as_bytes());
        let all: Vec<Kv> = self
            .kvs
            .range(start.to_vec()..end)
            .map(|(k, _)| self.kv(k).expect("listed key"))
            .collect();
        let count = all.len() as i64;
        let kvs: Vec<Kv> = all.into_iter().take(limit as usize).collect();
        let more = (kvs.len() as i64) < count;
        (kvs, count, more)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Req {
    /// Txn: create_revision == 0 ? put : range.
    Create {
        key: Vec<u8>,
        value: Vec<u8>,
    },
    /// Txn: mod_revision == seen ? put : range.
    Update {
        key: Vec<u8>,
        seen: i64,
        value: Vec<u8>,
    },
    /// Txn: mod_revision == seen ? delete : range.
    Delete {
        key: Vec<u8>,
        seen: i64,
    },
    /// A linearizable Range of one key.
    Get {
        key: Vec<u8>,
    },
    /// A serializable Range of one key (the member's own applied state): not part of the
    /// linearizability search, checked after it (see [`check_serializable_reads`]).
    SerialGet {
        key: Vec<u8>,
    },
    /// A Range from `start` to the end of the prefix; `rev` 0 is the current revision.
    List {
        start: Vec<u8>,
        rev: i64,
        limit: i64,
    },
    Compact {
        rev: i64,
    },
    /// Txn: create_revision == 0 ? put with the lease : range (as the apiserver creates an
    /// Event or a Lease object with a TTL).
    CreateWithLease {
        key: Vec<u8>,
        value: Vec<u8>,
        lease: i64,
    },
    /// LeaseGrant with the client's choice of id.
    Grant {
        id: i64,
    },
    /// LeaseRevoke: the lease and its keys go, the keys in one revision.
    Revoke {
        id: i64,
    },
    /// Not a request: the server expiring a lease, which it may do any time from the lease's
    /// TTL after its grant on (or not within the run). Added to the history for every grant,
    /// with an unknown outcome.
    Expire {
        id: i64,
    },
    /// Txn: every key's create_revision == 0 ? put them all : range each. Kubernetes writes
    /// one key per txn; this is here so watches see revisions with several events.
    CreateAll {
        keys: Vec<Vec<u8>>,
        value: Vec<u8>,
    },
}

impl Req {
    fn is_write(&self) -> bool {
        matches!(
            self,
            Req::Create { .. }
                | Req::Update { .. }
                | Req::Delete { .. }
                | Req::Compact { .. }
                | Req::CreateAll { .. }
                | Req::CreateWithLease { .. }
                | Req::Grant { .. }
                | Req::Revoke { .. }
                | Req::Expire { .. }
        )
    }

    /// The keys a txn writes, in its operations' order.
    fn keys(&self) -> Vec<Vec<u8>> {
        match self {
            Req::Create { key, .. }
            | Req::Update { key, .. }
            | Req::Delete { key, .. }
            | Req::CreateWithLease { key, .. } => vec![key.clone()],
            Req::CreateAll { keys, .. } => keys.clone(),
            _ => Vec::new(),
        }
    }
}

/// The fields of an answer the model predicts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Resp {
    rev: i64,
    succeeded: bool,
    kvs: Vec<Kv>,
    count: i64,
    more: bool,
    deleted: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ErrKind {
    Compacted,
    FutureRev,
    LeaseNotFound,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Out {
    Ok(Resp),
    Err(ErrKind),
    /// No answer (a timeout or a transport error): a write may or may not have taken effect.
    Unknown,
    /// Refused because the WAL could not be written (a full disk): the write never takes
    /// effect. Such operations are left out of the search; their values are unique, so one
    /// that took effect anyway shows as a value no operation wrote.
    Refused,
}

/// One recorded operation; times are nanoseconds since the run began.
#[derive(Clone, Debug)]
struct Op {
    client: usize,
    call: u64,
    /// `u64::MAX` when the outcome is unknown: the operation may take effect any time after
    /// its call, or never.
    ret: u64,
    req: Req,
    out: Out,
}

/// What etcd does with `req` in state `s`: the next state and the answer.
fn apply(s: &State, req: &Req) -> (State, Result<Resp, ErrKind>) {
    let mut n = s.clone();
    let failed = |key: &[u8]| {
        let kvs: Vec<Kv> = s.kv(key).into_iter().collect();
        Resp { rev: s.rev, count: kvs.len() as i64, kvs, ..Default::default() }
    };
    let put_leased = |n: &mut State, key: &[u8], value: &[u8], lease: i64| {
        n.rev += 1;
        let prev = s.kvs.get(key);
        n.kvs.insert(
            key.to_vec(),
            Val {
                value: value.to_vec(),
                create: prev.map_or(n.rev, |p| p.create),
                modr: n.rev,
                version: prev.map_or(1, |p| p.version + 1),
                lease,
            },
        );
        Resp { rev: n.rev, succeeded: true, ..Default::default() }
    };
    let put = |n: &mut State, key: &[u8], value: &[u8]| put_leased(n, key, value, 0);
    // A lease's end: it goes, and its keys with it, in one revision (none if it had no keys).
    let end_lease = |n: &mut State, id: i64| {
        n.leases.remove(&id);
        let before = n.kvs.len();
        n.kvs.retain(|_, v| v.lease != id);
        if n.kvs.len() < before {
            n.rev += 1;
        }
        Resp { rev: n.rev, ..Default::default() }
    };
    let r = match req {
        Req::Create { key, value } => {
            if s.kvs.contains_key(key) {
                Ok(failed(key))
            } else {
                Ok(put(&mut n, key, value))
            }
        }
        // The lease is checked only when the put is the branch taken, as etcd does.
        Req::CreateWithLease { key, value, lease } => {
            if s.kvs.contains_key(key) {
                Ok(failed(key))
            } else if !s.leases.contains(lease) {
                Err(ErrKind::LeaseNotFound)
            } else {
                Ok(put_leased(&mut n, key, value, *lease))
            }
        }
        // etcd reads a grant's header revision as it applies it: the revision it took effect at.
        Req::Grant { id } => {
            n.leases.insert(*id);
            Ok(Resp { rev: s.rev, ..Default::default() })
        }
        Req::Revoke { id } | Req::Expire { id } => {
            if s.leases.contains(id) {
                Ok(end_lease(&mut n, *id))
            } else {
                Err(ErrKind::LeaseNotFound)
            }
        }
        Req::Update { key, seen, value } => {
            if s.kvs.get(key).is_some_and(|v| v.modr == *seen) {
                Ok(put(&mut n, key, value))
            } else {
                Ok(failed(key))
            }
        }
        Req::Delete { key, seen } => {
            if s.kvs.get(key).is_some_and(|v| v.modr == *seen) {
                n.rev += 1;
                n.kvs.remove(key);
                Ok(Resp { rev: n.rev, succeeded: true, deleted: 1, ..Default::default() })
            } else {
                Ok(failed(key))
            }
        }
        Req::Get { key } | Req::SerialGet { key } => {
            let kvs: Vec<Kv> = s.kv(key).into_iter().collect();
            Ok(Resp { rev: s.rev, count: kvs.len() as i64, kvs, ..Default::default() })
        }
        Req::List { start, rev, limit } => {
            if *rev > s.rev {
                Err(ErrKind::FutureRev)
            } else if *rev > 0 && *rev < s.compacted {
                Err(ErrKind::Compacted)
            } else if *rev > 0 {
                // The data of a pinned read is checked against the state at `rev`, outside
                // the search (see check_pinned_reads); only the header is the current state's.
                Ok(Resp { rev: s.rev, ..Default::default() })
            } else {
                let (kvs, count, more) = s.page(start, *limit);
                Ok(Resp { rev: s.rev, kvs, count, more, ..Default::default() })
            }
        }
        Req::CreateAll { keys, value } => {
            if keys.iter().all(|k| !s.kvs.contains_key(k)) {
                n.rev += 1;
                for k in keys {
                    let v = Val {
                        value: value.clone(),
                        create: n.rev,
                        modr: n.rev,
                        version: 1,
                        lease: 0,
                    };
                    n.kvs.insert(k.clone(), v);
                }
                Ok(Resp { rev: n.rev, succeeded: true, ..Default::default() })
            } else {
                let kvs: Vec<Kv> = keys.iter().filter_map(|k| s.kv(k)).collect();
                Ok(Resp { rev: s.rev, count: kvs.len() as i64, kvs, ..Default::default() })
            }
        }
        Req::Compact { rev } => {
            if *rev <= s.compacted {
                Err(ErrKind::Compacted)
            } else if *rev > s.rev {
                Err(ErrKind::FutureRev)
            } else {
                n.compacted = *rev;
                Ok(Resp { rev: s.rev, ..Default::default() })
            }
        }
    };
    (n, r)
}

/// Can `op` take effect in state `s`? The state after it if so.
fn step(s: &State, op: &Op) -> Option<State> {
    let (n, want) = apply(s, &op.req);
    let ok = match (&op.out, &want) {
        (Out::Unknown, _) => true,
        (Out::Err(got), Err(w)) => got == w,
        (Out::Ok(got), Ok(w)) => match &op.req {
            Req::List { rev, .. } if *rev > 0 => got.rev == w.rev,
            // etcd reads the header revision of a compaction after applying it, so writes that
            // land meanwhile may be in it (etcdserver's Compact); it can never be older. A
            // revocation's is read as it is applied (its `newHeader`): exactly the revision
            // its keys went at, or the current one when it had none.
            Req::Compact { .. } => got.rev >= w.rev,
            _ => got == w,
        },
        _ => false,
    };
    ok.then_some(n)
}

/// What the watchers saw each revision change: (key, the value a put left, None for a delete),
/// in key order, for every revision the watchers agree on. Writes of unknown outcome, and
/// concurrent writes whose order no answer fixes, leave the search a choice between orders
/// that are equally linearizable; the watches saw which one the server took, so the search
/// takes only that one (else it may pick another, and the watch check then fails a correct
/// history). A revision the watchers disagree on constrains nothing: the watch checks report
/// the disagreement.
type Witness = BTreeMap<i64, Vec<Change>>;

/// A key a revision changed, and the value a put left (None: a delete).
type Change = (Vec<u8>, Option<Vec<u8>>);

fn witness(logs: &[Vec<WatchLog>]) -> Witness {
    let mut seen: BTreeMap<i64, BTreeSet<Change>> = BTreeMap::new();
    let mut torn: BTreeSet<i64> = BTreeSet::new();
    for log in logs.iter().flatten() {
        let mut by_stream: BTreeMap<i64, BTreeSet<Change>> = BTreeMap::new();
        for e in log.responses.iter().flat_map(|r| &r.events) {
            let ev = Ev::from(e);
            let change = (ev.kv.key.clone(), ev.put.then(|| ev.kv.value.clone()));
            by_stream.entry(ev.kv.mod_revision).or_default().insert(change);
        }
        for (rev, changes) in by_stream {
            match seen.get(&rev) {
                Some(other) if *other != changes => {
                    torn.insert(rev);
                }
                Some(_) => {}
                None => {
                    seen.insert(rev, changes);
                }
            }
        }
    }
    seen.into_iter()
        .filter(|(rev, _)| !torn.contains(rev))
        .map(|(rev, changes)| (rev, changes.into_iter().collect()))
        .collect()
}

/// Whether the write from `s` to `n` changed what the watchers saw change at its revision (or
/// they saw nothing of it).
fn as_witnessed(s: &State, n: &State, witness: &Witness) -> bool {
    let Some(seen) = witness.get(&n.rev) else { return true };
    let changed = s.kvs.keys().chain(n.kvs.keys()).filter(|k| s.kvs.get(*k) != n.kvs.get(*k));
    let changed: BTreeSet<Change> =
        changed.map(|k| (k.clone(), n.kvs.get(k).map(|v| v.value.clone()))).collect();
    changed.len() == seen.len() && changed.iter().zip(seen).all(|(a, b)| a == b)
}

/// A linearization: the order in which the operations took effect (unknown-outcome operations
/// that never took effect are left out).
#[derive(Debug)]
struct Linearization {
    order: Vec<usize>,
    /// Search states explored, to show how hard the history was.
    visited: usize,
}

/// Wing & Gong's search with memoization of (linearized set, state). Iterative, so a history of
/// a few hundred operations cannot overflow the stack.
fn linearize(ops: &[Op], init: &State, witness: &Witness) -> Result<Linearization, String> {
    let n = ops.len();
    let words = n.div_ceil(64).max(1);
    let required: Vec<usize> = (0..n).filter(|&i| ops[i].ret != u64::MAX).collect();
    // Candidates of a frame: every not-yet-linearized operation called before the earliest
    // return among the required ones still pending (none of those may come after it).
    // Compactions of unknown outcome and lease expiries come last: what they change (the
    // compacted revision, the leases) shows only much later, if at all (a lease may outlive its
    // TTL when the leader changes), so taking them early would send the search back over long
    // stretches; taken last, one comes in right when an answer needs it.
    let late = |i: usize| {
        ops[i].out == Out::Unknown && matches!(ops[i].req, Req::Compact { .. } | Req::Expire { .. })
    };
    let candidates = |done: &[u64]| -> Vec<usize> {
        let is_done = |i: usize| done[i / 64] >> (i % 64) & 1 == 1;
        let min_ret = required.iter().filter(|&&i| !is_done(i)).map(|&i| ops[i].ret).min();
        let min_ret = min_ret.unwrap_or(u64::MAX);
        let mut c: Vec<usize> = (0..n).filter(|&i| !is_done(i) && ops[i].call <= min_ret).collect();
        c.sort_by_key(|&i| late(i));
        c
    };
    // The expiry of each lease (see the loop).
    let expiry: HashMap<i64, usize> = (0..n)
        .filter_map(|i| match ops[i].req {
            Req::Expire { id } => Some((id, i)),
            _ => None,
        })
        .collect();
    let all_required = |done: &[u64]| required.iter().all(|&i| done[i / 64] >> (i % 64) & 1 == 1);

    struct Frame {
        done: Vec<u64>,
        state: State,
        cands: Vec<usize>,
        next: usize,
        /// How many operations the step into this frame linearized (one, or an expiry and the
        /// operation that found its lease gone; none for the first frame).
        took: usize,
    }
    let mut seen: HashSet<(Vec<u64>, u64)> = HashSet::new();
    let done0 = vec![0u64; words];
    let mut stack = vec![Frame {
        cands: candidates(&done0),
        done: done0,
        state: init.clone(),
        next: 0,
        took: 0,
    }];
    let mut order: Vec<usize> = Vec::new();
    let mut visited = 0usize;
    let mut deepest: Vec<usize> = Vec::new();
    while let Some(top) = stack.last_mut() {
        if all_required(&top.done) {
            return Ok(Linearization { order, visited });
        }
        if top.next == top.cands.len() {
            let took = top.took;
            stack.pop();
            order.truncate(order.len() - took);
            continue;
        }
        let i = top.cands[top.next];
        top.next += 1;
        let is_done = |done: &[u64], j: usize| done[j / 64] >> (j % 64) & 1 == 1;
        // The expiry of a lease without keys changes no revision and no key: only an answer
        // that the lease was not found can show it. It is taken only together with such an
        // answer, right before it (below); taken on its own, every pending one would double
        // the states of each stretch the search goes back over.
        if let Req::Expire { id } = ops[i].req
            && !top.state.kvs.values().any(|v| v.lease == id)
        {
            continue;
        }
        let (state, with) = match step(&top.state, &ops[i]) {
            Some(state) => (state, None),
            None => {
                let lease = match ops[i].req {
                    Req::CreateWithLease { lease, .. } => lease,
                    Req::Revoke { id } => id,
                    _ => continue,
                };
                let Some(&e) = expiry.get(&lease) else { continue };
                if is_done(&top.done, e) || !top.cands.contains(&e) {
                    continue;
                }
                let Some(mid) = step(&top.state, &ops[e]) else { continue };
                let Some(state) = step(&mid, &ops[i]) else { continue };
                (state, Some(e))
            }
        };
        // An unknown-outcome write that changes nothing here might as well not have happened
        // here; it stays a candidate for later, so skipping it loses no linearization and keeps
        // the operations cut off by a crash from multiplying the search.
        if ops[i].out == Out::Unknown && state == top.state {
            continue;
        }
        if state.rev != top.state.rev && !as_witnessed(&top.state, &state, witness) {
            continue;
        }
        let mut done = top.done.clone();
        done[i / 64] |= 1 << (i % 64);
        if let Some(e) = with {
            done[e / 64] |= 1 << (e % 64);
        }
        if !seen.insert((done.clone(), state.hash64())) {
            continue;
        }
        visited += 1;
        if visited > SEARCH_BUDGET {
            return Err(format!(
                "the search gave up after {SEARCH_BUDGET} states ({n} operations); shrink the history"
            ));
        }
        order.extend(with);
        order.push(i);
        if order.len() > deepest.len() {
            deepest = order.clone();
        }
        let took = 1 + usize::from(with.is_some());
        stack.push(Frame { cands: candidates(&done), done, state, next: 0, took });
    }
    // Explain with the longest prefix found: the state it reached and what could not follow.
    let mut s = init.clone();
    for &i in &deepest {
        s = step(&s, &ops[i]).expect("a prefix the search linearized replays");
    }
    let mut done = vec![0u64; words];
    for &i in &deepest {
        done[i / 64] |= 1 << (i % 64);
    }
    let stuck: Vec<String> = candidates(&done)
        .into_iter()
        .map(|i| {
            let model = match apply(&s, &ops[i].req).1 {
                Ok(r) => show_resp(&r),
                Err(e) => format!("{e:?}"),
            };
            format!(
                "  #{i} client {} {} -> {} (the model answers {model})",
                ops[i].client,
                show_req(&ops[i].req),
                show_out(&ops[i].out),
            )
        })
        .collect();
    Err(format!(
        "not linearizable: {} of {} operations linearized at best; then at revision {} (compacted {}) none of these fits:\n{}",
        deepest.len(),
        n,
        s.rev,
        s.compacted,
        stuck.join("\n")
    ))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `key=value@create/mod/version`, with the prefix left out.
fn show_kvs(kvs: &[Kv]) -> String {
    let one = |k: &Kv| {
        let key = text(&k.key);
        format!(
            "{}={}@{}/{}/v{}",
            key.strip_prefix(PREFIX).unwrap_or(&key),
            text(&k.value),
            k.create_revision,
            k.mod_revision,
            k.version
        )
    };
    kvs.iter().map(one).collect::<Vec<_>>().join(" ")
}

fn show_req(r: &Req) -> String {
    let short = |k: &[u8]| {
        let key = text(k);
        key.strip_prefix(PREFIX).unwrap_or(&key).to_string()
    };
    match r {
        Req::Create { key, value } => format!("create {}={}", short(key), text(value)),
        Req::Update { key, seen, value } => {
            format!("update {}={} if mod {seen}", short(key), text(value))
        }
        Req::Delete { key, seen } => format!("delete {} if mod {seen}", short(key)),
        Req::Get { key } => format!("get {}", short(key)),
        Req::SerialGet { key } => format!("serializable get {}", short(key)),
        Req::List { start, rev, limit } => {
            format!("list from {:?} at {rev} limit {limit}", short(start))
        }
        Req::Compact { rev } => format!("compact {rev}"),
        Req::CreateWithLease { key, value, lease } => {
            format!("create {}={} with lease {lease:x}", short(key), text(value))
        }
        Req::Grant { id } => format!("grant lease {id:x}"),
        Req::Revoke { id } => format!("revoke lease {id:x}"),
        Req::Expire { id } => format!("expiry of lease {id:x}"),
        Req::CreateAll { keys, value } => {
            let keys: Vec<String> = keys.iter().map(|k| short(k)).collect();
            format!("create {} = {}", keys.join(","), text(value))
        }
    }
}

fn show_resp(r: &Resp) -> String {
    format!(
        "rev {} succeeded {} deleted {} count {} more {} [{}]",
        r.rev,
        r.succeeded,
        r.deleted,
        r.count,
        r.more,
        show_kvs(&r.kvs)
    )
}

fn show_out(o: &Out) -> String {
    match o {
        Out::Ok(r) => show_resp(r),
        other => format!("{other:?}"),
    }
}

/// The states of a linearization by revision (the state right after the write that produced
/// each revision; `init` for revisions up to its own) and every event, in revision order.
fn replay(
    ops: &[Op],
    init: &State,
    lin: &Linearization,
) -> (BTreeMap<i64, State>, Vec<Ev>, BTreeMap<i64, u64>) {
    let mut states = BTreeMap::from([(init.rev, init.clone())]);
    let mut events = Vec::new();
    // When the write that produced each revision was sent.
    let mut born = BTreeMap::new();
    let mut s = init.clone();
    for &i in &lin.order {
        let n = step(&s, &ops[i]).expect("the linearization replays");
        // The revision's events: every key it changed, in key order (a txn's keys are
        // sorted, and etcd deletes a lease's keys in key order).
        let changed: BTreeSet<&Vec<u8>> =
            s.kvs.keys().chain(n.kvs.keys()).filter(|k| s.kvs.get(*k) != n.kvs.get(*k)).collect();
        assert_eq!(changed.is_empty(), n.rev == s.rev, "events without a revision: {:?}", ops[i]);
        for key in changed {
            let prev = s.kv(key);
            match n.kv(key) {
                Some(kv) => events.push(Ev { put: true, kv, prev }),
                None => events.push(Ev {
                    put: false,
                    kv: Kv {
                        key: key.clone(),
                        value: Vec::new(),
                        create_revision: 0,
                        mod_revision: n.rev,
                        version: 0,
                        lease: 0,
                    },
                    prev,
                }),
            }
        }
        if n.rev != s.rev {
            born.insert(n.rev, ops[i].call);
        }
        if n.rev != s.rev || n.compacted != s.compacted {
            states.insert(n.rev, n.clone());
        }
        s = n;
    }
    (states, events, born)
}

/// Every answered read at a pinned revision must be the page of the state at that revision.
fn check_pinned_reads(ops: &[Op], states: &BTreeMap<i64, State>) -> Result<(), String> {
    for (i, op) in ops.iter().enumerate() {
        let (Req::List { start, rev, limit }, Out::Ok(got)) = (&op.req, &op.out) else { continue };
        if *rev == 0 {
            continue;
        }
        let Some((_, at)) = states.range(..=*rev).next_back() else {
            return Err(format!("#{i}: a read at revision {rev}, before the history began"));
        };
        let (kvs, count, more) = at.page(start, *limit);
        if (&got.kvs, got.count, got.more) != (&kvs, count, more) {
            return Err(format!(
                "#{i} client {}: a list at revision {rev} from {}: expected count {count}, more {more}, [{}]; got count {}, more {}, [{}]",
                op.client,
                text(start),
                show_kvs(&kvs),
                got.count,
                got.more,
                show_kvs(&got.kvs)
            ));
        }
    }
    Ok(())
}

/// Every answered serializable read must be the state at the revision its header carries: a
/// revision the linearization produced, by a write sent before the read returned, and no older
/// than the newest revision its client saw in an earlier answer (a client sticks to one member,
/// which answers a write only once it applied it, so reads on it are monotonic and see the
/// client's own writes). Unlike a linearizable read it may be older than writes other clients
/// completed before it was sent (a member that lags, or one cut off from the others).
fn check_serializable_reads(
    ops: &[Op],
    states: &BTreeMap<i64, State>,
    born: &BTreeMap<i64, u64>,
) -> Result<(), String> {
    let mut order: Vec<usize> = (0..ops.len()).collect();
    order.sort_by_key(|&i| ops[i].call);
    // The newest revision each client has seen in an answer so far (a client is sequential,
    // so in call order every earlier operation of the client has returned).
    let mut saw: BTreeMap<usize, i64> = BTreeMap::new();
    for i in order {
        let op = &ops[i];
        let Out::Ok(got) = &op.out else { continue };
        if let Req::SerialGet { .. } = &op.req {
            let floor = saw.get(&op.client).copied().unwrap_or(0);
            let name = format!("#{i} client {}: a serializable {}", op.client, show_req(&op.req));
            if got.rev < floor {
                return Err(format!(
                    "{name} answered at revision {} after the client had seen revision {floor}: stale ({})",
                    got.rev,
                    show_resp(got)
                ));
            }
            let Some(at) = states.range(..=got.rev).next_back().map(|(_, s)| s) else {
                return Err(format!("{name} at revision {}, before the history began", got.rev));
            };
            if at.rev != got.rev {
                return Err(format!(
                    "{name} answered at revision {}, which no write in the linearization produced (the last before it is {})",
                    got.rev, at.rev
                ));
            }
            if let Some(&call) = born.get(&got.rev)
                && call > op.ret
            {
                return Err(format!(
                    "{name} answered at revision {} before the write that produced it was sent",
                    got.rev
                ));
            }
            let want = apply(at, &op.req).1.expect("a get always answers");
            if *got != want {
                return Err(format!(
                    "{name}: at revision {} expected {}, got {}",
                    got.rev,
                    show_resp(&want),
                    show_resp(got)
                ));
            }
        }
        if got.rev > 0 {
            let s = saw.entry(op.client).or_insert(got.rev);
            *s = (*s).max(got.rev);
        }
    }
    Ok(())
}

/// What a history that passed the KV checks yields for the watch checks.
#[derive(Debug)]
struct Checked {
    /// The state after each revision's write (and after each compaction).
    states: BTreeMap<i64, State>,
    /// Every event, in revision order.
    events: Vec<Ev>,
    /// The revision of every compaction that took effect (two in a row share a state), with
    /// when the first compaction to it was sent.
    compactions: BTreeMap<i64, u64>,
    /// Leases the linearization has the server expire.
    expired: usize,
    /// Search states explored, to show how hard the history was.
    visited: usize,
}

/// The whole KV check.
fn check_history(all: &[Op], init: &State, witness: &Witness) -> Result<Checked, String> {
    // Serializable reads are no part of the search; they are checked against its states.
    let ops: Vec<Op> =
        all.iter().filter(|o| !matches!(o.req, Req::SerialGet { .. })).cloned().collect();
    let ops = &ops[..];
    // Without a linearization the watches agree with, one without them: the answers are then
    // linearizable, and the watch checks name the events that contradict them.
    let lin = match linearize(ops, init, witness) {
        Ok(lin) => lin,
        Err(_) if !witness.is_empty() => linearize(ops, init, &Witness::new())?,
        Err(e) => return Err(e),
    };
    let (states, events, born) = replay(ops, init, &lin);
    check_pinned_reads(ops, &states)?;
    check_serializable_reads(all, &states, &born)?;
    let mut compactions = BTreeMap::from([(init.compacted, 0)]);
    for &i in &lin.order {
        if let (Req::Compact { rev }, Out::Ok(_) | Out::Unknown) = (&ops[i].req, &ops[i].out) {
            let call = compactions.entry(*rev).or_insert(ops[i].call);
            *call = (*call).min(ops[i].call);
        }
    }
    let expired = lin.order.iter().filter(|&&i| matches!(ops[i].req, Req::Expire { .. })).count();
    Ok(Checked { states, events, compactions, expired, visited: lin.visited })
}

/// What a run exercised, so a run that silently stopped exercising something shows.
fn summary(ops: &[Op], logs: &[Vec<WatchLog>], visited: usize) -> String {
    let count = |f: &dyn Fn(&Op) -> bool| ops.iter().filter(|o| f(o)).count();
    let ok = |o: &Op| matches!(&o.out, Out::Ok(r) if r.succeeded);
    let writes = count(&|o| !o.req.keys().is_empty() || matches!(o.req, Req::CreateAll { .. }));
    let multi = count(&|o| ok(o) && o.req.keys().len() > 1);
    let applied = count(&|o| ok(o) && !matches!(o.req, Req::Compact { .. }));
    let pinned = count(&|o| matches!(o.req, Req::List { rev, .. } if rev > 0));
    let compacted = count(&|o| o.out == Out::Err(ErrKind::Compacted));
    let compacts = count(&|o| matches!(o.req, Req::Compact { .. }) && matches!(o.out, Out::Ok(_)));
    let unknown = count(&|o| o.out == Out::Unknown && !matches!(o.req, Req::Expire { .. }));
    // The most operations in flight at once: how much the search had to reorder.
    let mut edges: Vec<(u64, i32)> = ops
        .iter()
        .filter(|o| !matches!(o.req, Req::Expire { .. }))
        .flat_map(|o| [(o.call, 1), (o.ret, -1)])
        .collect();
    edges.sort();
    let overlap = edges
        .iter()
        .scan(0, |n, e| {
            *n += e.1;
            Some(*n)
        })
        .max()
        .unwrap_or(0);
    let segments: usize = logs.iter().map(Vec::len).sum();
    let progress =
        logs.iter().flatten().flat_map(|l| &l.responses).filter(|r| is_progress(r)).count();
    format!(
        "{} ops ({writes} txns, {applied} applied, {multi} of them several keys; {pinned} pinned list pages; {compacts} compactions; {compacted} compacted refusals; {unknown} unknown), at most {overlap} in flight, {visited} search states; {} watchers, {segments} streams, {progress} progress responses",
        ops.len(),
        logs.len()
    )
}

// ---------------------------------------------------------------------------------------------
// Watch checks

/// One watch stream's responses for a watch created at `start`.
#[derive(Debug, Default)]
struct WatchLog {
    start: i64,
    responses: Vec<pb::WatchResponse>,
    /// When each response arrived, on the clock of the operations' times.
    received: Vec<u64>,
}

/// Checks the responses of `segments` (a watch and its resumptions, each from the previous
/// one's last revision + 1) against `events`, the history's events on the watched prefix, up to
/// revision `end`.
fn check_watch(segments: &[WatchLog], events: &[Ev], end: i64) -> Result<(), String> {
    check_watch_with(segments, events, end, &BTreeMap::new())
}

/// [`check_watch`], forgiving a missing prev_kv on an event at revision r that arrived after a
/// compaction at some C >= r was sent (`compactions`: revision -> when it was sent). A compaction
/// at C keeps each key's newest version at or below C, so it removes the previous version of
/// every event at or below C. etcd reads an event's prev_kv when it sends the event (at r - 1)
/// and leaves it out when that read fails because the revision was compacted meanwhile
/// (etcd-io/etcd#10681 is the case C = r: a watch reading the event back from history), and so
/// does mem_etcd. A watch reading history (a resumption) or a cluster member catching up after
/// a restart, with compactions in the entries it applies, meets it.
fn check_watch_with(
    segments: &[WatchLog],
    events: &[Ev],
    end: i64,
    compactions: &BTreeMap<i64, u64>,
) -> Result<(), String> {
    let first = segments.first().ok_or("no watch")?.start;
    // Each event delivered, with when it arrived.
    let mut got: Vec<(Ev, u64)> = Vec::new();
    let mut delivered = first - 1;
    for (n, seg) in segments.iter().enumerate() {
        if n > 0 && seg.start != delivered + 1 {
            return Err(format!(
                "segment {n} resumed at {}, expected {}",
                seg.start,
                delivered + 1
            ));
        }
        for (k, r) in seg.responses.iter().enumerate() {
            let at = seg.received.get(k).copied().unwrap_or(u64::MAX);
            if r.created || r.canceled {
                continue;
            }
            if is_progress(r) {
                // A bookmark: everything at or below its revision has been delivered already.
                if hrev(r) < delivered {
                    return Err(format!(
                        "segment {n}: progress at revision {} after events up to {delivered}",
                        hrev(r)
                    ));
                }
                delivered = delivered.max(hrev(r));
                continue;
            }
            let revs: Vec<i64> =
                r.events.iter().map(|e| e.kv.as_ref().map_or(0, |k| k.mod_revision)).collect();
            // Ordered and atomic: a response continues strictly after everything delivered
            // before it (a revision is never split across responses), in revision order.
            if revs.first().is_some_and(|&f| f <= delivered) || !revs.is_sorted() {
                return Err(format!(
                    "segment {n}: events at revisions {revs:?} after everything up to {delivered} was delivered or reported"
                ));
            }
            if revs.last().is_some_and(|&l| l > hrev(r)) {
                return Err(format!(
                    "segment {n}: events {revs:?} beyond the header's revision {}",
                    hrev(r)
                ));
            }
            for e in &r.events {
                let ev = Ev::from(e);
                let kv = e.kv.as_ref().expect("an event has a kv");
                let is_create =
                    e.r#type == EventType::Put as i32 && kv.create_revision == kv.mod_revision;
                if is_create != (ev.put && ev.kv.version == 1) {
                    return Err(format!("segment {n}: the create flag is wrong on {}", ev.brief()));
                }
                got.push((ev, at));
            }
            delivered = revs.last().copied().unwrap_or(delivered);
        }
    }
    // Reliable and unique, with prev_kv: exactly the history's events from the first start on.
    let want: Vec<Ev> = events
        .iter()
        .filter(|e| e.kv.mod_revision >= first && e.kv.mod_revision <= end)
        .cloned()
        .collect();
    // Was the previous version of an event at `rev` that arrived at `at` possibly compacted?
    let gone = |rev: i64, at: u64| compactions.range(rev..).any(|(_, &sent)| sent <= at);
    let got_upto: Vec<Ev> = got
        .iter()
        .filter(|(e, _)| e.kv.mod_revision <= end)
        .enumerate()
        .map(|(i, (e, at))| match want.get(i) {
            Some(w)
                if e.prev.is_none()
                    && gone(e.kv.mod_revision, *at)
                    && Ev { prev: None, ..w.clone() } == *e =>
            {
                w.clone()
            }
            _ => e.clone(),
        })
        .collect();
    if got_upto != want {
        // The first difference, with a little context on either side: histories are long.
        let at = want.iter().zip(&got_upto).take_while(|(w, g)| w == g).count();
        let window = |v: &[Ev]| {
            let from = at.saturating_sub(3);
            let shown: Vec<String> = v.iter().skip(from).take(8).map(|e| e.brief()).collect();
            format!("[{}{}]", if from > 0 { "…, " } else { "" }, shown.join(", "))
        };
        return Err(format!(
            "watch from {first}: {} events expected, {} delivered, the first {at} alike; from there expected {}, got {}",
            want.len(),
            got_upto.len(),
            window(&want),
            window(&got_upto)
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Requests

fn key_name(i: usize) -> Vec<u8> {
    format!("{PREFIX}pod-{i}").into_bytes()
}

fn cmp(key: &[u8], target: CompareTarget, union: TargetUnion) -> pb::Compare {
    pb::Compare {
        result: CompareResult::Equal as i32,
        target: target as i32,
        key: key.to_vec().into(),
        target_union: Some(union),
        ..Default::default()
    }
}

fn range_of(key: &[u8]) -> pb::RequestOp {
    pb::RequestOp {
        request: Some(Rq::RequestRange(pb::RangeRequest {
            key: key.to_vec().into(),
            ..Default::default()
        })),
    }
}

fn txn_of(req: &Req, pad: usize) -> pb::TxnRequest {
    if let Req::CreateAll { keys, value } = req {
        let value = padded(value, pad);
        let put = |k: &Vec<u8>| pb::RequestOp {
            request: Some(Rq::RequestPut(pb::PutRequest {
                key: k.to_vec().into(),
                value: value.to_vec().into(),
                ..Default::default()
            })),
        };
        return pb::TxnRequest {
            compare: keys
                .iter()
                .map(|k| cmp(k, CompareTarget::Create, TargetUnion::CreateRevision(0)))
                .collect(),
            success: keys.iter().map(put).collect(),
            failure: keys.iter().map(|k| range_of(k)).collect(),
        };
    }
    let (compare, success) = match req {
        Req::Create { key, value } => (
            cmp(key, CompareTarget::Create, TargetUnion::CreateRevision(0)),
            Rq::RequestPut(pb::PutRequest {
                key: key.to_vec().into(),
                value: padded(value, pad).into(),
                ..Default::default()
            }),
        ),
        Req::CreateWithLease { key, value, lease } => (
            cmp(key, CompareTarget::Create, TargetUnion::CreateRevision(0)),
            Rq::RequestPut(pb::PutRequest {
                key: key.to_vec().into(),
                value: padded(value, pad).into(),
                lease: *lease,
                ..Default::default()
            }),
        ),
        Req::Update { key, seen, value } => (
            cmp(key, CompareTarget::Mod, TargetUnion::ModRevision(*seen)),
            Rq::RequestPut(pb::PutRequest {
                key: key.to_vec().into(),
                value: padded(value, pad).into(),
                ..Default::default()
            }),
        ),
        Req::Delete { key, seen } => (
            cmp(key, CompareTarget::Mod, TargetUnion::ModRevision(*seen)),
            Rq::RequestDeleteRange(pb::DeleteRangeRequest {
                key: key.to_vec().into(),
                ..Default::default()
            }),
        ),
        other => unreachable!("not a txn: {other:?}"),
    };
    let key = req.keys().pop().expect("a txn of one key");
    pb::TxnRequest {
        compare: vec![compare],
        success: vec![pb::RequestOp { request: Some(success) }],
        failure: vec![range_of(&key)],
    }
}

/// What the checker keeps of a Range answer (a Get or a list page).
fn range_resp(r: pb::RangeResponse) -> Resp {
    Resp {
        rev: r.header.map_or(0, |h| h.revision),
        kvs: kvs_of(&r.kvs),
        count: r.count,
        more: r.more,
        ..Default::default()
    }
}

fn kvs_of(kvs: &[mvccpb::KeyValue]) -> Vec<Kv> {
    kvs.iter()
        .map(|kv| {
            let mut kv = Kv::from(kv);
            kv.value = unpad(&kv.value);
            kv
        })
        .collect()
}

/// The value sent for `tag`: the tag alone, or with `pad` bytes after it (`tag|pad|` and the tag
/// repeated), so that fault runs move real volume while the model keeps only the tag.
fn padded(tag: &[u8], pad: usize) -> Vec<u8> {
    if pad == 0 {
        return tag.to_vec();
    }
    let mut v = tag.to_vec();
    v.extend_from_slice(format!("|{pad}|").as_bytes());
    v.extend(tag.iter().cycle().take(pad));
    v
}

/// The tag of a value [`padded`] made. A value whose padding is not exactly what was sent (cut
/// short, or mixed with another value's) becomes `tag|CORRUPT`, which the model never predicts.
fn unpad(v: &[u8]) -> Vec<u8> {
    let Some(bar) = v.iter().position(|&c| c == b'|') else { return v.to_vec() };
    let tag = &v[..bar];
    let pad = std::str::from_utf8(&v[bar + 1..])
        .ok()
        .and_then(|rest| rest.split('|').next())
        .and_then(|n| n.parse::<usize>().ok());
    match pad {
        Some(pad) if padded(tag, pad) == v => tag.to_vec(),
        _ => [tag, b"|CORRUPT"].concat(),
    }
}

/// Sends `req` and records what came back. `None` for a read that failed without an answer
/// (it constrains nothing).
async fn send(raw: &mut Raw, req: &Req, pad: usize) -> Option<Out> {
    let header = |h: Option<pb::ResponseHeader>| h.map_or(0, |h| h.revision);
    let call = async {
        match req {
            Req::Create { .. }
            | Req::Update { .. }
            | Req::Delete { .. }
            | Req::CreateAll { .. }
            | Req::CreateWithLease { .. } => raw.kv.txn(txn_of(req, pad)).await.map(|r| {
                let r = r.into_inner();
                let mut out =
                    Resp { rev: header(r.header), succeeded: r.succeeded, ..Default::default() };
                for op in r.responses {
                    match op.response {
                        Some(Rs::ResponseRange(rr)) => {
                            out.kvs.extend(kvs_of(&rr.kvs));
                            out.count += rr.count;
                            out.more |= rr.more;
                        }
                        Some(Rs::ResponseDeleteRange(d)) => out.deleted = d.deleted,
                        _ => {}
                    }
                }
                out
            }),
            Req::Get { key } => raw
                .kv
                .range(pb::RangeRequest { key: key.to_vec().into(), ..Default::default() })
                .await
                .map(|r| range_resp(r.into_inner())),
            Req::SerialGet { key } => raw
                .kv
                .range(pb::RangeRequest {
                    key: key.to_vec().into(),
                    serializable: true,
                    ..Default::default()
                })
                .await
                .map(|r| range_resp(r.into_inner())),
            Req::List { start, rev, limit } => raw
                .kv
                .range(pb::RangeRequest {
                    key: start.to_vec().into(),
                    range_end: prefix_end(PREFIX.as_bytes()).into(),
                    limit: *limit,
                    revision: *rev,
                    ..Default::default()
                })
                .await
                .map(|r| range_resp(r.into_inner())),
            Req::Compact { rev } => raw
                .kv
                .compact(pb::CompactionRequest { revision: *rev, physical: false })
                .await
                .map(|r| Resp { rev: header(r.into_inner().header), ..Default::default() }),
            Req::Grant { id } => pb::lease_client::LeaseClient::new(raw.channel.clone())
                .lease_grant(pb::LeaseGrantRequest { id: *id, ttl: LEASE_TTL })
                .await
                .map(|r| Resp { rev: header(r.into_inner().header), ..Default::default() }),
            Req::Revoke { id } => pb::lease_client::LeaseClient::new(raw.channel.clone())
                .lease_revoke(pb::LeaseRevokeRequest { id: *id })
                .await
                .map(|r| Resp { rev: header(r.into_inner().header), ..Default::default() }),
            Req::Expire { .. } => unreachable!("the server expires leases by itself"),
        }
    };
    match tokio::time::timeout(DEADLINE, call).await {
        Ok(Ok(r)) => Some(Out::Ok(r)),
        Ok(Err(s)) if s.message().contains("required revision has been compacted") => {
            Some(Out::Err(ErrKind::Compacted))
        }
        Ok(Err(s)) if s.message().contains("required revision is a future revision") => {
            Some(Out::Err(ErrKind::FutureRev))
        }
        Ok(Err(s)) if s.message() == "etcdserver: requested lease not found" => {
            Some(Out::Err(ErrKind::LeaseNotFound))
        }
        Ok(Err(s))
            if s.code() == tonic::Code::Unavailable
                && s.message().starts_with("etcdserver: WAL write failed") =>
        {
            Some(Out::Refused)
        }
        _ if req.is_write() => Some(Out::Unknown),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// Connections that survive a restart

/// One life of the server (or of one cluster member): a restart makes a new one (a server
/// alone comes back on a new port, a member on its own).
#[derive(Clone, Debug)]
struct Incarnation {
    epoch: u64,
    endpoint: String,
    /// A cluster member: besides being killed, it may fail to answer because it has no leader,
    /// is cut off from the others or paused, and a client then asks it again.
    member: bool,
    /// The member was killed and is not back yet (set before the kill, cleared with the new
    /// epoch once it serves again).
    down: bool,
}

/// Where clients and watchers find the current incarnation of their server or member (one
/// channel per member in a cluster). Only the fault injector changes it; everyone else waits on
/// it after losing a connection.
type Dial = tokio::sync::watch::Receiver<Incarnation>;

/// How long a client waits for a killed server's replacement before it calls the failure
/// something else (and, in a watcher, a bug).
const REPLACEMENT: Duration = Duration::from_secs(30);

/// A connection to whichever incarnation is current.
struct Conn {
    raw: Raw,
    epoch: u64,
    dial: Dial,
    /// The run injects faults: a request without an answer may mean the server was killed.
    faults: bool,
}

/// Connects to the current incarnation, waiting through restarts (the server may be killed
/// again between the announcement and the dial). Returns it with its epoch.
async fn dial(d: &mut Dial) -> (Channel, u64) {
    let deadline = Instant::now() + REPLACEMENT;
    loop {
        let inc = d.borrow_and_update().clone();
        let connected =
            Channel::from_shared(inc.endpoint.clone()).expect("valid uri").connect().await;
        match connected {
            Ok(ch) => return (ch, inc.epoch),
            Err(e) => {
                assert!(Instant::now() < deadline, "dial {}: {e:?}", inc.endpoint);
                let _ = tokio::time::timeout(Duration::from_millis(200), d.changed()).await;
            }
        }
    }
}

impl Conn {
    async fn new(mut d: Dial, faults: bool) -> Conn {
        let (ch, epoch) = dial(&mut d).await;
        Conn { raw: Raw::new(ch), epoch, dial: d, faults }
    }

    /// After a request that got no answer: when the server it went to was killed, waits for the
    /// next incarnation and connects to it. A cluster member that is up (it failed for want of
    /// a leader, or was cut off or paused) is asked again after a moment on the same connection.
    async fn recover(&mut self) {
        if !self.faults {
            return;
        }
        let epoch = self.epoch;
        let (member, down, now) = {
            let i = self.dial.borrow();
            (i.member, i.down, i.epoch)
        };
        if member && !down && now == epoch {
            // As a client backs off: a write cut off this way is one more of unknown outcome,
            // and each of those widens the search.
            tokio::time::sleep(Duration::from_millis(500)).await;
            return;
        }
        let replaced = self.dial.wait_for(|i| i.epoch != epoch);
        if tokio::time::timeout(REPLACEMENT, replaced).await.is_ok() {
            let (ch, epoch) = dial(&mut self.dial).await;
            self.raw = Raw::new(ch);
            self.epoch = epoch;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Traffic

/// How a client paces and reads.
#[derive(Clone, Copy, Debug)]
struct Habits {
    /// The average pause between operations.
    think: Duration,
    /// Half the single-key Gets are serializable (cluster runs).
    serializable: bool,
    /// A share of the operations are grants, revocations and creates with a lease, so that
    /// revocations delete keys while other clients write (the Kubernetes mix has few).
    lease_heavy: bool,
    /// Most operations are linearizable Gets, so that many wait for a read index at once on
    /// every member and share its rounds (`raft::read_index`) while writes go on.
    read_heavy: bool,
}

/// One client's traffic: what a controller does through kube-apiserver's storage layer.
/// Clients start at least `OPS_PER_CLIENT` operations each, and go on until `stop` says so (in
/// fault runs, once the faults are over).
async fn client(
    id: usize,
    mut conn: Conn,
    seed: u64,
    t0: Instant,
    pad: usize,
    stop: tokio::sync::watch::Receiver<bool>,
    habits: Habits,
) -> Vec<Op> {
    let Habits { think, serializable, lease_heavy, read_heavy } = habits;
    let mut rng = SmallRng::seed_from_u64(seed ^ (id as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut ops = Vec::new();
    // The mod revision this client last saw per key, as an informer's cache would hold it.
    let mut seen: BTreeMap<Vec<u8>, i64> = BTreeMap::new();
    let mut list_revs: Vec<i64> = Vec::new();
    let mut serial = 0;
    // Leases this client was granted and believes alive.
    let mut leases: Vec<i64> = Vec::new();
    let record = async |conn: &mut Conn, ops: &mut Vec<Op>, req: Req| -> Option<Resp> {
        let call = t0.elapsed().as_nanos() as u64;
        let Some(out) = send(&mut conn.raw, &req, pad).await else {
            conn.recover().await;
            return None;
        };
        let ret = if out == Out::Unknown { u64::MAX } else { t0.elapsed().as_nanos() as u64 };
        let resp = match &out {
            Out::Ok(r) => Some(r.clone()),
            _ => None,
        };
        let unknown = out == Out::Unknown;
        ops.push(Op { client: id, call, ret, req, out });
        if unknown {
            conn.recover().await;
        }
        resp
    };
    for n in 0.. {
        if n >= OPS_PER_CLIENT && *stop.borrow() {
            break;
        }
        if !think.is_zero() {
            tokio::time::sleep(think.mul_f64(rng.random_range(0.0..2.0))).await;
        }
        let key = key_name(rng.random_range(0..KEYS));
        serial += 1;
        let value = format!("c{id}-{serial}").into_bytes();
        let roll = rng.random_range(0..100);
        let req = if read_heavy && rng.random_bool(0.6) {
            Req::Get { key: key.clone() }
        } else if lease_heavy && rng.random_bool(0.4) {
            let grant = Req::Grant { id: ((id as i64 + 1) << 32) | serial };
            match (leases.is_empty(), rng.random_range(0..100)) {
                (true, _) => grant,
                (false, 0..45) => {
                    let lease = leases[rng.random_range(0..leases.len())];
                    Req::CreateWithLease { key: key.clone(), value, lease }
                }
                (false, 45..75) => Req::Revoke { id: leases[rng.random_range(0..leases.len())] },
                (false, _) => grant,
            }
        } else if roll < 5 {
            // Sorted, so the events of the revision have one expected order.
            // Keys this client believes absent, so the create has a chance.
            let absent: Vec<Vec<u8>> =
                (0..KEYS).map(key_name).filter(|k| !seen.contains_key(k)).collect();
            let mut pick = || match absent.len() {
                0 => key_name(rng.random_range(0..KEYS)),
                n => absent[rng.random_range(0..n)].clone(),
            };
            let mut keys = vec![pick(), pick(), pick()];
            keys.sort();
            keys.dedup();
            Req::CreateAll { keys, value }
        } else if roll < 18 {
            if !leases.is_empty() && rng.random_bool(0.5) {
                let lease = leases[rng.random_range(0..leases.len())];
                Req::CreateWithLease { key: key.clone(), value, lease }
            } else {
                Req::Create { key: key.clone(), value }
            }
        } else if roll < 48 {
            // An unseen key gets a revision no key has, so the update fails and reads it.
            Req::Update {
                key: key.clone(),
                seen: seen.get(&key).copied().unwrap_or(1 << 40),
                value,
            }
        } else if roll < 60 {
            Req::Delete { key: key.clone(), seen: seen.get(&key).copied().unwrap_or(1 << 40) }
        } else if roll < 73 {
            if serializable && rng.random_bool(0.5) {
                Req::SerialGet { key: key.clone() }
            } else {
                Req::Get { key: key.clone() }
            }
        } else if roll < 93 {
            // A paged list: the first page at the current revision (or, sometimes, at an
            // earlier list's revision, which compaction may have removed), the rest pinned to
            // the first page's.
            let pinned =
                if rng.random_bool(0.3) { list_revs.last().copied().unwrap_or(0) } else { 0 };
            let mut start = PREFIX.as_bytes().to_vec();
            let mut rev = pinned;
            loop {
                let Some(r) = record(
                    &mut conn,
                    &mut ops,
                    Req::List { start: start.clone(), rev, limit: PAGE },
                )
                .await
                else {
                    break;
                };
                for kv in &r.kvs {
                    seen.insert(kv.key.clone(), kv.mod_revision);
                }
                if rev == 0 {
                    rev = r.rev;
                    list_revs.push(rev);
                }
                match r.kvs.last() {
                    Some(last) if r.more => {
                        start = last.key.clone();
                        start.push(0);
                    }
                    _ => break,
                }
            }
            continue;
        } else if roll < 95 || (roll < 97 && leases.is_empty()) {
            Req::Grant { id: ((id as i64 + 1) << 32) | serial }
        } else if roll < 97 {
            Req::Revoke { id: leases[rng.random_range(0..leases.len())] }
        } else {
            // Compact a little behind the newest revision this client knows of, as the
            // apiserver's compactor does.
            let newest = list_revs.last().copied().unwrap_or(1);
            Req::Compact { rev: (newest - rng.random_range(0..8)).max(1) }
        };
        let answer = record(&mut conn, &mut ops, req.clone()).await;
        let refused = ops.last().is_some_and(|o| o.out == Out::Err(ErrKind::LeaseNotFound));
        match &req {
            Req::Grant { id } if answer.is_some() => leases.push(*id),
            Req::Revoke { id } if answer.is_some() || refused => leases.retain(|l| l != id),
            Req::CreateWithLease { lease, .. } if refused => leases.retain(|l| l != lease),
            _ => {}
        }
        if let Some(r) = answer {
            match &req {
                Req::Create { .. }
                | Req::Update { .. }
                | Req::CreateAll { .. }
                | Req::CreateWithLease { .. }
                    if r.succeeded =>
                {
                    for key in req.keys() {
                        seen.insert(key, r.rev);
                    }
                }
                Req::Delete { key, .. } if r.succeeded => {
                    seen.remove(key);
                }
                _ => {
                    for kv in &r.kvs {
                        seen.insert(kv.key.clone(), kv.mod_revision);
                    }
                }
            }
        }
    }
    ops
}

/// How a watcher behaves besides watching.
#[derive(Clone, Copy, Debug, Default)]
struct WatcherPlan {
    /// Drop the stream after this many event responses and resume on a new one from the last
    /// revision + 1.
    resume_after: Option<usize>,
    /// Stop reading for this long after the third event response (with a one-response client
    /// buffer, so the server meets the back-pressure), then read on.
    stall: Option<Duration>,
    /// The run kills the server: a stream that ends resumes on the next incarnation instead of
    /// failing the test.
    faults: bool,
}

/// A watcher from `start` on the prefix with prev_kv, asking for progress now and then, until it
/// has everything up to the revision `end` sends.
async fn watcher(
    mut d: Dial,
    t0: Instant,
    start: i64,
    plan: WatcherPlan,
    mut end: tokio::sync::watch::Receiver<i64>,
) -> Vec<WatchLog> {
    let mut segments = Vec::new();
    let mut from = start;
    let mut resume_after = plan.resume_after;
    let mut stall = plan.stall;
    let deadline = Instant::now() + Duration::from_secs(90);
    'streams: loop {
        let (ch, epoch) = dial(&mut d).await;
        let mut ws = Ws::on(ch, if stall.is_some() { 1 } else { 64 });
        ws.create(on_prefix(PREFIX).since(from).prev().notify());
        let mut log = WatchLog { start: from, ..Default::default() };
        let mut delivered = from - 1;
        let mut event_responses = 0;
        loop {
            assert!(
                Instant::now() < deadline,
                "watcher from {start}: expected to catch up within 90 s"
            );
            let target = *end.borrow_and_update();
            if target > 0 && delivered >= target {
                segments.push(log);
                break 'streams;
            }
            match ws.next_within(Duration::from_millis(20)).await {
                Ok(Some(mut r)) => {
                    for e in &mut r.events {
                        for kv in e.kv.iter_mut().chain(e.prev_kv.iter_mut()) {
                            kv.value = unpad(&kv.value).into();
                        }
                    }
                    if let Some(l) = r.events.last().and_then(|e| e.kv.as_ref()) {
                        delivered = l.mod_revision;
                        event_responses += 1;
                    } else if is_progress(&r) {
                        delivered = delivered.max(hrev(&r));
                    }
                    if log.responses.len() % 7 == 6 {
                        ws.try_progress();
                    }
                    let canceled = r.canceled;
                    log.responses.push(r);
                    log.received.push(t0.elapsed().as_nanos() as u64);
                    if canceled {
                        segments.push(log);
                        break 'streams;
                    }
                    if event_responses >= 3
                        && let Some(pause) = stall.take()
                    {
                        tokio::time::sleep(pause).await;
                    }
                    if resume_after.is_some_and(|n| event_responses >= n) {
                        resume_after = None;
                        from = delivered + 1;
                        segments.push(log);
                        continue 'streams;
                    }
                }
                // Bookmarks are asked for when the stream is quiet and while events flow, so
                // both a synced and a busy stream get them checked.
                Ok(None) => ws.try_progress(),
                Err(e) if plan.faults => {
                    // The server was killed: go on from the next revision on its successor,
                    // which must have every event this stream could have delivered.
                    let replaced = d.wait_for(|i| i.epoch != epoch);
                    assert!(
                        tokio::time::timeout(REPLACEMENT, replaced).await.is_ok(),
                        "watcher from {start}: the stream ended ({e:?}) and no restart followed"
                    );
                    from = delivered + 1;
                    segments.push(log);
                    continue 'streams;
                }
                Err(e) => panic!(
                    "watcher from {start}: expected the stream to stay open, it ended: {e:?}"
                ),
            }
        }
    }
    segments
}

/// The faults a run injects while its traffic goes on.
#[derive(Clone, Copy, Debug)]
struct Faults {
    /// The server's WAL mode flags.
    mode: &'static [&'static str],
    /// Kill the server with SIGKILL now and then and restart it on its data dir.
    kill: bool,
    /// Make the disk fail now and then (`--wal-failpoint`: `enospc` or `short`).
    disk: Option<&'static str>,
    /// Bytes of padding per value, so that a stalled watcher falls megabytes behind.
    pad: usize,
    /// The traffic runs at least this long, so leases (of `LEASE_TTL`) expire meanwhile.
    at_least: Duration,
}

/// What a fault-injecting run restarts its server with.
struct Host {
    dir: DataDir,
    failpoint: std::path::PathBuf,
    args: Vec<String>,
}

/// Faults injected per run.
const FAULTS_PER_RUN: usize = 3;

/// Injects `FAULTS_PER_RUN` of `f`'s faults, a few hundred milliseconds apart while the traffic
/// runs, then lets the traffic go on a little and `stop`s it. Returns the server then current,
/// the incarnation sender (the watchers wait on it until they are done) and how many kills and
/// full disks there were.
async fn inject(
    f: Faults,
    host: Arc<Host>,
    mut s: Server,
    incarnation: tokio::sync::watch::Sender<Incarnation>,
    stop: tokio::sync::watch::Sender<bool>,
    seed: u64,
) -> (Server, tokio::sync::watch::Sender<Incarnation>, usize, usize) {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0xfa17);
    let args: Vec<&str> = host.args.iter().map(String::as_str).collect();
    let (mut kills, mut fulls) = (0, 0);
    let until = Instant::now() + f.at_least;
    let faults = if f.kill || f.disk.is_some() { FAULTS_PER_RUN } else { 0 };
    for n in 0..faults {
        tokio::time::sleep(Duration::from_millis(rng.random_range(50..250))).await;
        let kill = match (f.kill, f.disk) {
            (true, Some(_)) => n % 2 == 1,
            (kill, _) => kill,
        };
        if kill {
            let _ = s.kill9();
            s = host.dir.start(&args).await;
            kills += 1;
            incarnation.send_modify(|i| {
                i.epoch += 1;
                i.endpoint = s.endpoint();
            });
        } else if let Some(fault) = f.disk {
            set_failpoint(&host.failpoint, fault);
            tokio::time::sleep(Duration::from_millis(rng.random_range(100..600))).await;
            set_failpoint(&host.failpoint, "");
            fulls += 1;
        }
    }
    // Traffic after the last fault too: the restarted server (or the disk that works again)
    // must take writes and serve reads that see everything before.
    tokio::time::sleep(Duration::from_millis(150)).await;
    tokio::time::sleep_until(until.into()).await;
    stop.send_replace(true);
    (s, incarnation, kills, fulls)
}

/// One run: a fresh server, `CLIENTS` clients and five watchers (three from the start, one
/// resuming twice; one from an older revision that compaction may have removed, started while
/// the traffic runs; one that stalls in fault runs); `faults` injected meanwhile; then every
/// check.
async fn run(seed: u64, faults: Option<Faults>) -> String {
    run_mix(seed, faults, false).await
}

/// [`run`], with the lease-heavy mix of operations or Kubernetes'.
async fn run_mix(seed: u64, faults: Option<Faults>, lease_heavy: bool) -> String {
    // Periodic progress notifications too, not only answers to requests, while the runs last.
    let progress = ["--watch-progress-notify-interval", "100ms"];
    let (first, host) = match faults {
        None => {
            let Some(s) = Server::start(target(), &progress).await else {
                return "skipped".into();
            };
            (s, None)
        }
        Some(f) => {
            let dir = DataDir::new();
            let failpoint = dir.aside("failpoint");
            set_failpoint(&failpoint, "");
            let mut args: Vec<String> = progress.iter().map(|a| a.to_string()).collect();
            args.extend(f.mode.iter().map(|a| a.to_string()));
            args.extend(["--wal-failpoint".to_string(), failpoint.display().to_string()]);
            let s = dir.start(&args.iter().map(String::as_str).collect::<Vec<_>>()).await;
            (s, Some(Arc::new(Host { dir, failpoint, args })))
        }
    };
    let pad = faults.map_or(0, |f| f.pad);
    let (incarnation, d) = tokio::sync::watch::channel(Incarnation {
        epoch: 0,
        endpoint: first.endpoint(),
        member: false,
        down: false,
    });
    let mut raw = first.raw_clients().await;
    // The store starts empty; its revision 1 is the model's initial state.
    let r0 = raw
        .kv
        .range(pb::RangeRequest { key: b(PREFIX), ..Default::default() })
        .await
        .expect("initial range");
    drop(raw);
    let init =
        State { rev: r0.into_inner().header.expect("header").revision, ..Default::default() };
    let (end_tx, end_rx) = tokio::sync::watch::channel(0i64);
    // The clock of every recorded time: operations' calls and returns, watch responses'
    // arrivals.
    let t0 = Instant::now();
    let faulty = faults.is_some();
    let plain = WatcherPlan { faults: faulty, ..Default::default() };
    let mut plans = vec![
        plain,
        WatcherPlan { resume_after: Some(5), ..plain },
        WatcherPlan { resume_after: Some(2), ..plain },
    ];
    if faulty {
        plans.push(WatcherPlan { stall: Some(Duration::from_millis(1500)), ..plain });
    }
    let mut watchers: Vec<_> = plans
        .into_iter()
        .map(|plan| tokio::spawn(watcher(d.clone(), t0, init.rev + 1, plan, end_rx.clone())))
        .collect();
    watchers.push(older_watcher(d.clone(), faulty, seed, t0, init.rev, end_rx.clone()));
    // Without faults the clients stop after their `OPS_PER_CLIENT`; with them, once the
    // injector is done.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(!faulty);
    let injector = match (faults, host.clone()) {
        (Some(f), Some(host)) => tokio::spawn(inject(f, host, first, incarnation, stop_tx, seed)),
        _ => tokio::spawn(async move { (first, incarnation, 0, 0) }),
    };
    let mut tasks = Vec::new();
    for id in 0..CLIENTS {
        let conn = Conn::new(d.clone(), faulty).await;
        // Runs of several seconds pace their clients, so that their histories stay a size the
        // search checks in seconds.
        let think = if faulty { THINK } else { Duration::ZERO };
        let habits = Habits { think, serializable: false, lease_heavy, read_heavy: false };
        tasks.push(tokio::spawn(client(id, conn, seed, t0, pad, stop_rx.clone(), habits)));
    }
    let mut ops = Vec::new();
    for t in tasks {
        ops.extend(t.await.expect("a client task panicked"));
    }
    let (s, _incarnation, kills, fulls) = injector.await.expect("the fault injector panicked");
    // The final state, read as one more operation of the history: the linearization must end
    // in exactly it (writes cut off by a crash included or not, as the server kept them).
    let mut raw = s.raw_clients().await;
    let last = Req::List { start: PREFIX.as_bytes().to_vec(), rev: 0, limit: KEYS as i64 + 1 };
    let call = t0.elapsed().as_nanos() as u64;
    let out = send(&mut raw, &last, 0).await.expect("final list");
    let ret = t0.elapsed().as_nanos() as u64;
    let Out::Ok(r) = &out else { panic!("seed {seed}: the final list: {out:?}") };
    let end = r.rev;
    ops.push(Op { client: CLIENTS, call, ret, req: last, out });
    end_tx.send(end).expect("the watchers listen");
    let mut logs = Vec::new();
    for w in watchers {
        logs.push(w.await.expect("a watcher panicked"));
    }
    let Verdict { ops, refused, unseen, expired, visited } =
        verify(seed, ops, &init, &logs, end, kills > 0, s.channel().await.expect("connect")).await;
    drop(s);
    let mut out = summary(&ops, &logs, visited);
    out += &lease_summary(&ops, expired);
    if faulty {
        let bytes = pad * ops.iter().filter(|o| o.req.is_write()).count();
        out += &format!(
            "; faults: {kills} kills, {fulls} full disks, {refused} writes refused, {unseen} of unknown outcome no watch saw; {} MiB of values sent",
            bytes >> 20
        );
    }
    out
}

/// A watcher from an older revision, started while compactions run (after a seeded delay, from
/// a seeded revision between the first and the newest): it must deliver everything from there
/// or be refused with the compaction that removed its start.
fn older_watcher(
    d: Dial,
    faulty: bool,
    seed: u64,
    t0: Instant,
    init_rev: i64,
    end_rx: tokio::sync::watch::Receiver<i64>,
) -> tokio::task::JoinHandle<Vec<WatchLog>> {
    let mut d = d;
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x01d);
    let delay = Duration::from_millis(rng.random_range(100..600));
    let plain = WatcherPlan { faults: faulty, ..Default::default() };
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        let newest = loop {
            let mut conn = Conn::new(d.clone(), faulty).await;
            if let Some(Out::Ok(r)) = send(&mut conn.raw, &Req::Get { key: key_name(0) }, 0).await {
                break r.rev;
            }
            conn.recover().await;
        };
        let start = rng.random_range(init_rev + 1..=newest.max(init_rev + 1));
        d.mark_changed();
        watcher(d, t0, start, plain, end_rx).await
    })
}

/// What [`verify`] found.
struct Verdict {
    /// The history as checked: refused writes left out, lease expiries added, in call order.
    ops: Vec<Op>,
    /// Writes refused because the WAL failed.
    refused: usize,
    /// Writes of unknown outcome no watcher saw take effect, left out of the search.
    unseen: usize,
    /// Leases the linearization has the server expire.
    expired: usize,
    /// Search states explored.
    visited: usize,
}

/// Every check of a run, once its traffic is over: the history (`ops`, ending with a final
/// linearizable list at revision `end`) against the model, then each watcher's streams
/// (`logs`) against the linearization's events, then a watch from before the last compaction
/// opened on `refusing` (a connection to a server that has applied everything up to `end`).
/// Panics, naming the seed, on the first violation. `unknown_allowed`: the run had faults
/// that explain requests without an answer.
async fn verify(
    seed: u64,
    mut ops: Vec<Op>,
    init: &State,
    logs: &[Vec<WatchLog>],
    end: i64,
    unknown_allowed: bool,
    refusing: Channel,
) -> Verdict {
    let refused = ops.iter().filter(|o| o.out == Out::Refused).count();
    ops.retain(|o| o.out != Out::Refused);
    // A grant without an answer whose lease no other operation names (its client never uses
    // it) is unobservable, and so is that lease's expiry: both are left out, or every such
    // grant would multiply the search's states by three.
    let named: HashSet<i64> = ops
        .iter()
        .filter_map(|o| match o.req {
            Req::CreateWithLease { lease, .. } => Some(lease),
            Req::Revoke { id } => Some(id),
            _ => None,
        })
        .collect();
    ops.retain(|o| {
        !(o.out == Out::Unknown && matches!(o.req, Req::Grant { id } if !named.contains(&id)))
    });
    // A write of unknown outcome that no watcher saw take effect did not, up to the end of the
    // history: every watcher from the start must deliver every event (its value is unique, and a
    // delete shows as a delete of its key after the version it names). Left out, it no longer
    // widens the search; should a watch have missed a write that took effect, the linearization
    // comes out a revision short and the check fails all the same.
    let mut values: HashSet<Vec<u8>> = HashSet::new();
    let mut deletes: HashSet<(Vec<u8>, Option<i64>)> = HashSet::new();
    for r in logs.iter().flatten().flat_map(|l| &l.responses) {
        for e in &r.events {
            let ev = Ev::from(e);
            if ev.put {
                values.insert(ev.kv.value.clone());
            } else {
                deletes.insert((ev.kv.key.clone(), ev.prev.as_ref().map(|p| p.mod_revision)));
            }
        }
    }
    let before = ops.len();
    ops.retain(|o| {
        o.out != Out::Unknown
            || match &o.req {
                Req::Create { value, .. }
                | Req::Update { value, .. }
                | Req::CreateAll { value, .. }
                | Req::CreateWithLease { value, .. } => values.contains(value),
                Req::Delete { key, seen } => {
                    deletes.contains(&(key.clone(), Some(*seen)))
                        || deletes.contains(&(key.clone(), None))
                }
                _ => true,
            }
    });
    let unseen = before - ops.len();
    // Every lease that may exist may expire, no sooner than its TTL after the grant was sent.
    let expiries: Vec<Op> = ops
        .iter()
        .filter(|o| matches!(o.out, Out::Ok(_) | Out::Unknown))
        .filter_map(|o| match o.req {
            Req::Grant { id } => Some(Op {
                client: CLIENTS + 1,
                call: o.call + Duration::from_secs(LEASE_TTL as u64).as_nanos() as u64,
                ret: u64::MAX,
                req: Req::Expire { id },
                out: Out::Unknown,
            }),
            _ => None,
        })
        .collect();
    ops.extend(expiries);
    ops.sort_by_key(|o| o.call);
    if !unknown_allowed {
        let unknown = ops
            .iter()
            .filter(|o| o.out == Out::Unknown && !matches!(o.req, Req::Expire { .. }))
            .count();
        assert_eq!(
            unknown, 0,
            "seed {seed}: requests without an answer, and no fault to explain them"
        );
    }
    let Checked { states, events, mut compactions, expired, visited } =
        check_history(&ops, init, &witness(logs)).unwrap_or_else(|e| {
            let mut unknown: BTreeMap<String, usize> = BTreeMap::new();
            for o in ops.iter().filter(|o| o.out == Out::Unknown) {
                let kind = show_req(&o.req);
                *unknown.entry(kind.split(' ').next().unwrap_or("").to_string()).or_default() += 1;
            }
            // The whole history, for analysing a failure (`MEM_ETCD_HISTORY_DUMP=<file>`).
            if let Ok(path) = std::env::var("MEM_ETCD_HISTORY_DUMP") {
                let lines: Vec<String> = ops
                    .iter()
                    .enumerate()
                    .map(|(i, o)| {
                        let (req, out) = (show_req(&o.req), show_out(&o.out));
                        format!("#{i} client {} [{}..{}] {req} -> {out}", o.client, o.call, o.ret)
                    })
                    .collect();
                let path = format!("{path}.seed{seed}");
                std::fs::write(&path, lines.join("\n")).expect("write the history dump");
            }
            panic!("seed {seed}: {e}\n(of unknown outcome: {unknown:?})")
        });
    // A compaction cut off by a crash may have taken effect without the search needing it
    // (nothing else observed it), yet a watch can see it: its revision counts for the watch
    // checks too.
    for o in &ops {
        if let (Req::Compact { rev }, Out::Unknown) = (&o.req, &o.out) {
            let call = compactions.entry(*rev).or_insert(o.call);
            *call = (*call).min(o.call);
        }
    }
    let final_state = states.values().next_back().expect("a state");
    assert_eq!(
        final_state.rev, end,
        "seed {seed}: expected the linearization to end at the server's revision"
    );
    // Where watcher `n` ran and how its streams went, for a failure's message.
    let streams = |segments: &[WatchLog]| {
        let starts: Vec<String> = segments
            .iter()
            .map(|l| {
                let member = l.responses.first().and_then(|r| r.header.as_ref());
                format!("{}@{:x}", l.start, member.map_or(0, |h| h.member_id))
            })
            .collect();
        format!(
            " (streams from revision@member {}; compactions {:?})",
            starts.join(" "),
            compactions.keys().collect::<Vec<_>>()
        )
    };
    for (n, segments) in logs.iter().enumerate() {
        let canceled = segments.last().and_then(|l| l.responses.last()).filter(|r| r.canceled);
        if let Some(c) = canceled {
            // A start compaction had removed (a resumption racing a compaction, or the watch
            // from an older revision): etcd's answer is a cancel naming a compaction that
            // took place and covers that start.
            let seg = segments.last().expect("a segment");
            assert!(
                c.compact_revision > seg.start && compactions.contains_key(&c.compact_revision),
                "seed {seed} watcher {n}: expected a cancel only for a compacted start, got compact_revision {} for start {} (compactions: {:?})",
                c.compact_revision,
                seg.start,
                compactions.keys().collect::<Vec<_>>()
            );
            let done = &segments[..segments.len() - 1];
            let upto = seg.start - 1;
            if !done.is_empty() {
                check_watch_with(done, &events, upto, &compactions).unwrap_or_else(|e| {
                    panic!("seed {seed} watcher {n}{}: {e}", streams(segments))
                });
            }
            continue;
        }
        check_watch_with(segments, &events, end, &compactions)
            .unwrap_or_else(|e| panic!("seed {seed} watcher {n}{}: {e}", streams(segments)));
    }
    // A watch from before the compaction must be refused with the compaction's revision.
    if final_state.compacted > init.rev + 1 {
        let mut ws = Ws::on(refusing, 64);
        ws.create(on_prefix(PREFIX).since(init.rev + 1));
        let r = loop {
            let r = ws.next().await;
            if r.canceled {
                break r;
            }
            assert!(
                r.created && r.events.is_empty(),
                "seed {seed}: expected a refusal of a compacted start, got {r:?}"
            );
        };
        assert_eq!(
            r.compact_revision,
            final_state.compacted,
            "seed {seed}: expected a watch from {} to be canceled with the compaction revision",
            init.rev + 1
        );
    }
    Verdict { ops, refused, unseen, expired, visited }
}

/// The lease part of a run's summary line.
fn lease_summary(ops: &[Op], expired: usize) -> String {
    let leased = |f: &dyn Fn(&Op) -> bool| ops.iter().filter(|o| f(o)).count();
    format!(
        "; leases: {} granted, {} revoked, {} expired, {} keys created with one, {} refused as not found",
        leased(&|o| matches!(o.req, Req::Grant { .. }) && matches!(o.out, Out::Ok(_))),
        leased(&|o| matches!(o.req, Req::Revoke { .. }) && matches!(o.out, Out::Ok(_))),
        expired,
        leased(&|o| matches!(o.req, Req::CreateWithLease { .. })
            && matches!(&o.out, Out::Ok(r) if r.succeeded)),
        leased(&|o| o.out == Out::Err(ErrKind::LeaseNotFound)),
    )
}

/// Runs `RUNS`-sized batches of seeds (or, with `MEM_ETCD_HISTORY_SOAK=<seconds>`, new seeds
/// until that long has passed), each a fresh [`run`].
async fn seeds(name: &str, runs: u64, faults: Option<Faults>) {
    seeds_with(name, runs, |seed| run(seed, faults)).await;
}

/// [`seeds`] of any kind of run: `runs` seeds from `MEM_ETCD_HISTORY_SEED` (default 1), or new
/// ones until `MEM_ETCD_HISTORY_SOAK` seconds have passed; each run's summary is printed.
async fn seeds_with<F, R>(name: &str, runs: u64, run: F)
where
    F: Fn(u64) -> R,
    R: std::future::Future<Output = String>,
{
    let soak = std::env::var("MEM_ETCD_HISTORY_SOAK").ok().and_then(|v| v.parse::<u64>().ok());
    let until = Instant::now() + Duration::from_secs(soak.unwrap_or(0));
    let base: u64 =
        std::env::var("MEM_ETCD_HISTORY_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    let mut seed = base;
    loop {
        let t = Instant::now();
        let summary = run(seed).await;
        eprintln!("{name} seed {seed}: {summary}, in {:?}", t.elapsed());
        seed += 1;
        if seed - base >= runs && Instant::now() >= until {
            break;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn history_is_linearizable_and_watches_keep_their_guarantees() {
    seeds("history", RUNS, None).await;
}

/// Revocations and grants among writes of other clients, on one server: a revocation's header
/// must be the revision its keys went at (or the current one when it had none), a grant's the
/// revision it took effect at, never a later one that writes of other clients raised meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn history_holds_with_lease_heavy_traffic() {
    seeds_with("history lease-heavy", RUNS, |seed| run_mix(seed, None, true)).await;
}

/// How long a fault run's traffic lasts at least: long enough for leases granted early to
/// expire (their TTL restarts with every restart).
const FAULT_RUN: Duration = Duration::from_secs(4);

/// Leases expire while the traffic runs, with no other fault: their keys' deletion must be one
/// revision each, seen by every watcher, and puts with an expired lease refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn history_holds_while_leases_expire() {
    let f = Faults { mode: &["--fsync"], kill: false, disk: None, pad: 0, at_least: FAULT_RUN };
    seeds("history lease expiry", FAULT_RUNS / 2, Some(f)).await;
}

/// Values padded to this size in fault runs: enough that the stalled watcher falls megabytes
/// behind, few enough that a run stays a few seconds.
const FAULT_PAD: usize = 16 << 10;

/// The fault runs: each checks the same properties over a history in which the server was killed
/// and restarted (every acknowledged write must survive and no revision may be handed out
/// twice), or the disk failed (refused writes never take effect; held ones are acknowledged once
/// it works again), while one watcher stalls.
const FAULT_RUNS: u64 = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn history_holds_across_kill9_restarts_in_fsync_mode() {
    let f =
        Faults { mode: &["--fsync"], kill: true, disk: None, pad: FAULT_PAD, at_least: FAULT_RUN };
    seeds("history kill9 fsync", FAULT_RUNS, Some(f)).await;
}

/// Buffered mode's loss window is an OS crash's (see the README's durability table); a killed
/// process loses nothing acknowledged, so the same history must hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn history_holds_across_kill9_restarts_in_buffered_mode() {
    let f = Faults {
        mode: &["--wal-mode", "buffered"],
        kill: true,
        disk: None,
        pad: FAULT_PAD,
        at_least: FAULT_RUN,
    };
    seeds("history kill9 buffered", FAULT_RUNS, Some(f)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn history_holds_while_the_disk_fills_up() {
    let enospc = Faults {
        mode: &["--fsync"],
        kill: true,
        disk: Some("enospc"),
        pad: FAULT_PAD,
        at_least: FAULT_RUN,
    };
    seeds("history enospc fsync", FAULT_RUNS / 2, Some(enospc)).await;
    let short = Faults {
        mode: &["--wal-mode", "buffered"],
        kill: true,
        disk: Some("short"),
        pad: FAULT_PAD,
        at_least: FAULT_RUN,
    };
    seeds("history short-write buffered", FAULT_RUNS / 2, Some(short)).await;
}

// ---------------------------------------------------------------------------------------------
// The same traffic over a cluster

/// Members of the clusters the cluster runs start.
const MEMBERS: usize = 3;

/// A cluster run's clients pause longer between operations: a run lasts as long as its faults
/// (restarts, elections), and its history must stay a size the search checks in seconds.
const CLUSTER_THINK: Duration = Duration::from_millis(20);

/// Values padded to this size in cluster fault runs: three members apply every write, so less
/// than a server alone gets, with a watcher stalling all the same.
const CLUSTER_PAD: usize = 4 << 10;

/// A fault injected into a cluster while its traffic runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MemberFault {
    /// `kill -9` of the leader, restarted on its data 0.3-1.5 s later.
    KillLeader,
    /// `kill -9` of a follower, restarted on its data 0.3-1.5 s later.
    KillFollower,
    /// The leader cut off from the others (mem_etcd's peer failpoint) until they elected another
    /// and for 1.5-3 s in all, then healed.
    PartitionLeader,
    /// The leader paused (SIGSTOP) until the others elected another and for 1.5-3 s in all,
    /// then resumed.
    PauseLeader,
    /// A follower paused for 1.5-3 s, then resumed.
    PauseFollower,
}

/// What a cluster run injects.
#[derive(Clone, Copy, Debug)]
struct ClusterFaults {
    /// In this order, a few hundred milliseconds apart, each over before the next.
    faults: &'static [MemberFault],
    /// Bytes of padding per value.
    pad: usize,
    /// The traffic runs at least this long.
    at_least: Duration,
}

/// What [`inject_cluster`] did: each fault as text, with when it began and when it was over
/// (undone, and every member agreeing on a leader again).
type Injected = Vec<(String, Instant, Instant)>;

/// Injects `f.faults` into `c` while the traffic runs, announcing each member's restarts on its
/// `incarnations` channel, then lets the traffic go on a little and `stop`s it. Returns the
/// cluster, the senders (the watchers wait on them until they are done) and what was done.
async fn inject_cluster(
    mut c: Cluster,
    f: ClusterFaults,
    incarnations: Vec<tokio::sync::watch::Sender<Incarnation>>,
    stop: tokio::sync::watch::Sender<bool>,
    seed: u64,
) -> (Cluster, Vec<tokio::sync::watch::Sender<Incarnation>>, Injected) {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0xc105);
    let until = Instant::now() + f.at_least;
    let mut done = Vec::new();
    let mut injected = Vec::new();
    // Member ids, read while every member answers (a paused one answers nothing).
    let mut ids = Vec::new();
    for i in 0..MEMBERS {
        ids.push(c.member_id(i).await);
    }
    for &fault in f.faults {
        tokio::time::sleep(Duration::from_millis(rng.random_range(200..800))).await;
        // No member is paused or cut off here: every one answers Status.
        let leader = c.leader().await;
        let follower = (leader + rng.random_range(1..MEMBERS)) % MEMBERS;
        let t = Instant::now();
        let how_long = Duration::from_millis(rng.random_range(1500..3000));
        match fault {
            MemberFault::KillLeader | MemberFault::KillFollower => {
                let (i, role) = match fault {
                    MemberFault::KillLeader => (leader, "leader"),
                    _ => (follower, "follower"),
                };
                incarnations[i].send_modify(|inc| inc.down = true);
                let _ = c.kill9(i);
                tokio::time::sleep(Duration::from_millis(rng.random_range(300..1500))).await;
                c.restart(i).await;
                incarnations[i].send_modify(|inc| {
                    inc.down = false;
                    inc.epoch += 1;
                });
                done.push(format!(
                    "kill -9 of the {role} m{i}, serving again {:.1?} later",
                    t.elapsed()
                ));
            }
            MemberFault::PartitionLeader => {
                assert_eq!(c.kind, Kind::MemEtcd, "only mem_etcd has the peer failpoint");
                c.partition(leader).await;
                let after = replaced(&c, leader, &ids).await;
                tokio::time::sleep(how_long.saturating_sub(t.elapsed())).await;
                c.heal().await;
                done.push(format!(
                    "the leader m{leader} cut off for {:.1?} (replaced after {after:.1?})",
                    t.elapsed()
                ));
            }
            MemberFault::PauseLeader => {
                c.signal(leader, "STOP");
                let after = replaced(&c, leader, &ids).await;
                tokio::time::sleep(how_long.saturating_sub(t.elapsed())).await;
                c.signal(leader, "CONT");
                done.push(format!(
                    "the leader m{leader} paused for {:.1?} (replaced after {after:.1?})",
                    t.elapsed()
                ));
            }
            MemberFault::PauseFollower => {
                c.signal(follower, "STOP");
                tokio::time::sleep(how_long).await;
                c.signal(follower, "CONT");
                done.push(format!("the follower m{follower} paused for {:.1?}", t.elapsed()));
            }
        }
        // Who leads once the fault is over (every member answers again).
        let after = c.leader().await;
        let what = done.pop().expect("a fault");
        injected.push((format!("{what} (then m{after} led)"), t, Instant::now()));
    }
    // Traffic after the last fault too: the cluster must take writes and serve reads that see
    // everything before.
    tokio::time::sleep(Duration::from_millis(300)).await;
    tokio::time::sleep_until(until.into()).await;
    stop.send_replace(true);
    (c, incarnations, injected)
}

/// Waits until the members other than `gone` (paused or cut off: it is not asked) have elected
/// another leader, at most 15 s (the majority must go on); returns how long that took.
async fn replaced(c: &Cluster, gone: usize, ids: &[u64]) -> Duration {
    let t = Instant::now();
    let what = format!("a leader but m{gone} ({:x}) among the others", ids[gone]);
    wait_until(&what, Duration::from_secs(15), || async {
        for j in (0..MEMBERS).filter(|&j| j != gone) {
            let Some(server) = c.members[j].server.as_ref() else { continue };
            let Ok(mut raw) = server.raw().await else { continue };
            let status = raw.maint.status(pb::StatusRequest {});
            if let Ok(Ok(st)) = tokio::time::timeout(Duration::from_millis(500), status).await
                && let st = st.into_inner()
                && st.leader != 0
                && st.leader != ids[gone]
            {
                return true;
            }
        }
        false
    })
    .await;
    t.elapsed()
}

/// One cluster run: a fresh cluster of `MEMBERS` members of the suite's target, `CLIENTS`
/// clients spread round robin over the members (each sticking to its member, half its Gets
/// serializable), seven watchers spread over them (from the start, resuming, and in fault runs
/// one that stalls) and one from an older revision; `faults` injected meanwhile; then every check,
/// each watcher's against its own member's streams.
/// `read_heavy`: the clients mostly read, linearizably (see [`Habits`]).
async fn cluster_run(seed: u64, faults: ClusterFaults, read_heavy: bool) -> String {
    let kind = target();
    // Periodic progress notifications as in the runs on one server; the WAL flag is mem_etcd's
    // (the harness gives etcd none of those).
    let flags = ["--watch-progress-notify-interval=100ms", "--wal-mode=buffered"];
    let Some(c) = Cluster::start(kind, MEMBERS, &flags).await else {
        return "skipped".into();
    };
    let faulty = !faults.faults.is_empty();
    let (senders, dials): (Vec<_>, Vec<_>) = (0..MEMBERS)
        .map(|i| {
            tokio::sync::watch::channel(Incarnation {
                epoch: 0,
                endpoint: c.endpoint(i),
                member: true,
                down: false,
            })
        })
        .unzip();
    let mut raw = c.raw(0).await;
    let r0 = raw
        .kv
        .range(pb::RangeRequest { key: b(PREFIX), ..Default::default() })
        .await
        .expect("initial range");
    drop(raw);
    let init =
        State { rev: r0.into_inner().header.expect("header").revision, ..Default::default() };
    let (end_tx, end_rx) = tokio::sync::watch::channel(0i64);
    let t0 = Instant::now();
    let plain = WatcherPlan { faults: faulty, ..Default::default() };
    let mut plans = vec![
        plain,
        WatcherPlan { resume_after: Some(5), ..plain },
        WatcherPlan { resume_after: Some(2), ..plain },
        plain,
        WatcherPlan { resume_after: Some(5), ..plain },
        WatcherPlan { resume_after: Some(2), ..plain },
    ];
    if faulty {
        plans.push(WatcherPlan { stall: Some(Duration::from_millis(1500)), ..plain });
    }
    let on = |n: usize| (n + seed as usize) % MEMBERS;
    let mut members = Vec::new();
    let mut watchers = Vec::new();
    for (n, plan) in plans.into_iter().enumerate() {
        members.push(on(n));
        let d = dials[on(n)].clone();
        watchers.push(tokio::spawn(watcher(d, t0, init.rev + 1, plan, end_rx.clone())));
    }
    members.push(on(1));
    let d = dials[on(1)].clone();
    watchers.push(older_watcher(d, faulty, seed, t0, init.rev, end_rx.clone()));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(!faulty);
    let injector = tokio::spawn(inject_cluster(c, faults, senders, stop_tx, seed));
    let mut tasks = Vec::new();
    for id in 0..CLIENTS {
        let conn = Conn::new(dials[id % MEMBERS].clone(), faulty).await;
        let think = if faulty { CLUSTER_THINK } else { Duration::ZERO };
        let habits = Habits { think, serializable: !read_heavy, lease_heavy: false, read_heavy };
        let stop = stop_rx.clone();
        tasks.push(tokio::spawn(client(id, conn, seed, t0, faults.pad, stop, habits)));
    }
    let mut ops = Vec::new();
    for t in tasks {
        ops.extend(t.await.expect("a client task panicked"));
    }
    let (c, _senders, done) = injector.await.expect("the fault injector panicked");
    // The final state, read (linearizably) on one member as one more operation of the
    // history; a member may still be settling after the last fault, so a failed read is tried
    // again.
    let m = seed as usize % MEMBERS;
    let mut raw = c.raw(m).await;
    let last = Req::List { start: PREFIX.as_bytes().to_vec(), rev: 0, limit: KEYS as i64 + 1 };
    let mut tries = 0;
    let (call, out, ret) = loop {
        let call = t0.elapsed().as_nanos() as u64;
        let out = send(&mut raw, &last, 0).await;
        let ret = t0.elapsed().as_nanos() as u64;
        match out {
            Some(out @ Out::Ok(_)) => break (call, out, ret),
            other => {
                tries += 1;
                assert!(tries < 20, "seed {seed}: the final list on m{m}: {other:?}");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    };
    let Out::Ok(r) = &out else { unreachable!() };
    let end = r.rev;
    ops.push(Op { client: CLIENTS, call, ret, req: last, out });
    end_tx.send(end).expect("the watchers listen");
    let mut logs = Vec::new();
    for w in watchers {
        logs.push(w.await.expect("a watcher panicked"));
    }
    // Availability: for each fault, the longest stretch from its start to its end in which
    // the cluster acknowledged no write.
    let at = |t: Instant| t.saturating_duration_since(t0);
    let acked: Vec<Duration> = ops
        .iter()
        .filter(|o| o.req.is_write() && matches!(o.out, Out::Ok(_)))
        .map(|o| Duration::from_nanos(o.ret))
        .collect();
    let done: Vec<String> = done
        .into_iter()
        .map(|(what, from, to)| {
            let outage = longest_unacknowledged(acked.iter().copied(), at(from), at(to));
            assert!(
                outage < CLUSTER_OUTAGE,
                "seed {seed}: no write acknowledged for {outage:?} during: {what}"
            );
            format!("{what}, no write acknowledged for at most {:.2} s", outage.as_secs_f64())
        })
        .collect();
    let serial = ops.iter().filter(|o| matches!(o.req, Req::SerialGet { .. })).count();
    let ch = raw.channel.clone();
    let Verdict { ops, unseen, expired, visited, .. } =
        verify(seed, ops, &init, &logs, end, faulty, ch).await;
    // Every member ends with the same revision and the same data.
    let converged = c.converged().await;
    assert!(converged >= end, "seed {seed}: the members converged at {converged}, before {end}");
    drop(c);
    let mut out = summary(&ops, &logs, visited);
    let per_member: Vec<usize> =
        (0..MEMBERS).map(|i| members.iter().filter(|&&m| m == i).count()).collect();
    out += &format!(
        "; {kind:?} x{MEMBERS}, watchers per member {per_member:?}, {serial} serializable gets"
    );
    out += &lease_summary(&ops, expired);
    if faulty {
        let bytes = faults.pad * ops.iter().filter(|o| o.req.is_write()).count();
        out += &format!(
            "; faults: {}; {unseen} writes of unknown outcome no watch saw; {} MiB of values sent",
            done.join(", "),
            bytes >> 20
        );
    }
    out
}

/// What no fault of a cluster run may leave without an acknowledged write: the fault runs'
/// faults last up to 3 s, a leader's death takes up to two election timeouts to notice and
/// replace, and a write caught in it is retried. etcd's request timeout (7 s), which a request
/// held by a call to a leader that is gone would wait, is above it.
const CLUSTER_OUTAGE: Duration = Duration::from_secs(6);

/// Runs of the cluster tests without faults.
const CLUSTER_RUNS: u64 = 3;
/// Runs of each cluster fault test.
const CLUSTER_FAULT_RUNS: u64 = 2;

/// Clients on every member, serializable reads among their linearizable ones, watches on every
/// member: against etcd too (`MEM_ETCD_TEST_TARGET=etcd`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_history_holds_without_faults() {
    let f = ClusterFaults { faults: &[], pad: 0, at_least: Duration::ZERO };
    seeds_with("cluster history", CLUSTER_RUNS, |seed| cluster_run(seed, f, false)).await;
}

/// Clients on every member mostly reading linearizably while others write: reads that arrive
/// together share one read index round, on the leader and on followers (one forwarded request
/// per round), and each must still see every write acknowledged before it began. Against etcd
/// too.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_history_holds_when_reads_share_read_index_rounds() {
    let f = ClusterFaults { faults: &[], pad: 0, at_least: Duration::ZERO };
    seeds_with("cluster history read-heavy", CLUSTER_RUNS, |seed| cluster_run(seed, f, true)).await;
}

/// The leader, a follower, then the leader again killed with SIGKILL and restarted on their
/// (buffered) data: nothing acknowledged is lost, requests cut off count as unknown, and the
/// clients and watchers of each killed member go on with it once it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_history_holds_while_members_are_killed() {
    let f = ClusterFaults {
        faults: &[MemberFault::KillLeader, MemberFault::KillFollower, MemberFault::KillLeader],
        pad: CLUSTER_PAD,
        at_least: FAULT_RUN,
    };
    seeds_with("cluster history kill9", CLUSTER_FAULT_RUNS, |seed| cluster_run(seed, f, false))
        .await;
}

/// The leader cut off by a partition (its serializable reads go stale, never backwards), then
/// the leader and a follower paused past an election timeout. etcd has no peer failpoint: its
/// runs pause only.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_history_holds_across_partitions_and_pauses() {
    use MemberFault::*;
    let faults: &'static [MemberFault] = if target() == Kind::Etcd {
        say(
            "\ncluster history: etcd has no peer failpoint, so its runs pause members but cut none off\n",
        );
        &[PauseLeader, PauseFollower]
    } else {
        &[PartitionLeader, PauseLeader, PauseFollower]
    };
    let f = ClusterFaults { faults, pad: CLUSTER_PAD, at_least: FAULT_RUN };
    seeds_with("cluster history partition+pause", CLUSTER_FAULT_RUNS, |seed| {
        cluster_run(seed, f, false)
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// The checker's own tests

fn k(i: usize) -> Vec<u8> {
    key_name(i)
}

fn op(client: usize, call: u64, ret: u64, req: Req, out: Out) -> Op {
    Op { client, call, ret, req, out }
}

fn ok(rev: i64, succeeded: bool) -> Out {
    Out::Ok(Resp { rev, succeeded, ..Default::default() })
}

fn got(rev: i64, kvs: Vec<Kv>) -> Out {
    Out::Ok(Resp { rev, count: kvs.len() as i64, kvs, ..Default::default() })
}

fn kv_at(i: usize, value: &str, create: i64, modr: i64, version: i64) -> Kv {
    Kv {
        key: k(i),
        value: value.into(),
        create_revision: create,
        mod_revision: modr,
        version,
        lease: 0,
    }
}

fn init1() -> State {
    State { rev: 1, ..Default::default() }
}

#[test]
fn checker_accepts_concurrent_writes_in_either_order() {
    // Two overlapping creates of different keys: the one that returned revision 3 came second,
    // whatever their call order; a read overlapping both may see either state.
    let ops = vec![
        op(0, 0, 10, Req::Create { key: k(0), value: b"a".to_vec() }, ok(3, true)),
        op(1, 1, 9, Req::Create { key: k(1), value: b"b".to_vec() }, ok(2, true)),
        op(2, 2, 8, Req::Get { key: k(0) }, got(2, vec![])),
        op(2, 11, 12, Req::Get { key: k(1) }, got(3, vec![kv_at(1, "b", 2, 2, 1)])),
        op(3, 13, 14, Req::Update { key: k(0), seen: 3, value: b"c".to_vec() }, ok(4, true)),
        op(
            3,
            15,
            16,
            Req::Delete { key: k(1), seen: 2 },
            Out::Ok(Resp { rev: 5, succeeded: true, deleted: 1, ..Default::default() }),
        ),
        op(
            4,
            17,
            18,
            Req::List { start: PREFIX.into(), rev: 0, limit: 1 },
            Out::Ok(Resp {
                rev: 5,
                kvs: vec![kv_at(0, "c", 3, 4, 2)],
                count: 1,
                ..Default::default()
            }),
        ),
        op(
            4,
            19,
            20,
            Req::List { start: PREFIX.into(), rev: 3, limit: 1 },
            Out::Ok(Resp {
                rev: 5,
                kvs: vec![kv_at(0, "a", 3, 3, 1)],
                count: 2,
                more: true,
                ..Default::default()
            }),
        ),
    ];
    let Checked { states, events, .. } =
        check_history(&ops, &init1(), &Witness::new()).expect("a linearizable history");
    assert_eq!(
        states.keys().copied().collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 5],
        "expected a state per revision"
    );
    assert_eq!(events.len(), 4, "expected one event per write");
}

#[test]
fn checker_accepts_an_unknown_write_either_way() {
    let lost = op(0, 0, u64::MAX, Req::Create { key: k(0), value: b"a".to_vec() }, Out::Unknown);
    let applied = vec![
        lost.clone(),
        op(1, 5, 6, Req::Get { key: k(0) }, got(2, vec![kv_at(0, "a", 2, 2, 1)])),
    ];
    check_history(&applied, &init1(), &Witness::new()).expect("an unknown write that took effect");
    let not_applied = vec![lost, op(1, 5, 6, Req::Get { key: k(0) }, got(1, vec![]))];
    check_history(&not_applied, &init1(), &Witness::new()).expect("an unknown write that did not");
}

#[test]
fn checker_takes_the_order_the_watches_saw() {
    // Two creates of unknown outcome (a crash cut both off), then a read that saw both: either
    // order is linearizable, and the watches saw the second-called one first.
    let ops = vec![
        op(0, 0, u64::MAX, Req::Create { key: k(0), value: b"a".to_vec() }, Out::Unknown),
        op(1, 1, u64::MAX, Req::Create { key: k(1), value: b"b".to_vec() }, Out::Unknown),
        op(2, 5, 6, Req::Get { key: k(2) }, got(3, vec![])),
    ];
    let first = |w: &Witness| {
        let Checked { events, .. } = check_history(&ops, &init1(), w).expect("linearizable");
        events.iter().map(|e| (e.kv.key.clone(), e.kv.mod_revision)).collect::<Vec<_>>()
    };
    assert_eq!(first(&Witness::new()), [(k(0), 2), (k(1), 3)], "the search's first order");
    let seen = Witness::from([
        (2, vec![(k(1), Some(b"b".to_vec()))]),
        (3, vec![(k(0), Some(b"a".to_vec()))]),
    ]);
    assert_eq!(first(&seen), [(k(1), 2), (k(0), 3)], "the order the watches saw");
    // Watches that contradict every linearization leave the search to the answers: the
    // watch checks then name the events.
    let impossible = Witness::from([(2, vec![(k(2), None)])]);
    assert_eq!(first(&impossible), [(k(0), 2), (k(1), 3)]);
}

#[test]
fn checker_rejects_a_stale_read() {
    let ops = vec![
        op(0, 0, 1, Req::Create { key: k(0), value: b"a".to_vec() }, ok(2, true)),
        op(1, 2, 3, Req::Get { key: k(0) }, got(1, vec![])),
    ];
    let e = check_history(&ops, &init1(), &Witness::new())
        .expect_err("a read after a completed write saw the old state");
    assert!(e.contains("not linearizable"), "expected a linearizability failure, got {e}");
}

#[test]
fn checker_rejects_two_writes_with_one_revision() {
    let ops = vec![
        op(0, 0, 5, Req::Create { key: k(0), value: b"a".to_vec() }, ok(2, true)),
        op(1, 0, 5, Req::Create { key: k(1), value: b"b".to_vec() }, ok(2, true)),
    ];
    check_history(&ops, &init1(), &Witness::new())
        .expect_err("two writes cannot both produce revision 2");
}

#[test]
fn checker_rejects_a_revision_going_backwards() {
    let ops = vec![
        op(0, 0, 1, Req::Create { key: k(0), value: b"a".to_vec() }, ok(2, true)),
        op(0, 2, 3, Req::Create { key: k(1), value: b"b".to_vec() }, ok(3, true)),
        op(1, 4, 5, Req::Get { key: k(2) }, got(2, vec![])),
    ];
    check_history(&ops, &init1(), &Witness::new())
        .expect_err("a read after revision 3 reported revision 2");
}

#[test]
fn checker_rejects_a_stale_serializable_read() {
    let create = op(0, 0, 1, Req::Create { key: k(0), value: b"a".to_vec() }, ok(2, true));
    let update = op(1, 2, 3, Req::Update { key: k(0), seen: 2, value: b"b".to_vec() }, ok(3, true));
    let serial = |client: usize, out: Out| op(client, 4, 5, Req::SerialGet { key: k(0) }, out);
    // Another client's member may lag: revision 2 is stale but was the state then, and is fine.
    let lagging = serial(2, got(2, vec![kv_at(0, "a", 2, 2, 1)]));
    check_history(&[create.clone(), update.clone(), lagging], &init1(), &Witness::new())
        .expect("a serializable read of an older state by a client that saw nothing newer");
    // The client that wrote revision 3 must see it on its member.
    let stale = serial(1, got(2, vec![kv_at(0, "a", 2, 2, 1)]));
    let e = check_history(&[create.clone(), update.clone(), stale], &init1(), &Witness::new())
        .expect_err("a serializable read older than the client's own write");
    assert!(e.contains("stale"), "expected a stale serializable read named, got {e}");
    // The right revision, the wrong data.
    let wrong = serial(2, got(3, vec![kv_at(0, "a", 2, 2, 1)]));
    let e = check_history(&[create.clone(), update.clone(), wrong], &init1(), &Witness::new())
        .expect_err("a serializable read of a state that never was");
    assert!(e.contains("expected"), "expected the state at revision 3 named, got {e}");
    // A revision no write produced.
    let future = serial(2, got(4, vec![kv_at(0, "b", 2, 3, 2)]));
    check_history(&[create, update, future], &init1(), &Witness::new())
        .expect_err("a serializable read at a revision that does not exist");
}

#[test]
fn checker_takes_a_lease_expiry_only_when_due() {
    let ttl = Duration::from_secs(LEASE_TTL as u64).as_nanos() as u64;
    let grant = op(0, 0, 1, Req::Grant { id: 7 }, ok(1, false));
    let expiry = op(9, ttl, u64::MAX, Req::Expire { id: 7 }, Out::Unknown);
    let create = |call: u64, out: Out| {
        op(
            1,
            call,
            call + 1,
            Req::CreateWithLease { key: k(0), value: b"a".to_vec(), lease: 7 },
            out,
        )
    };
    // Before the TTL the lease exists; after it, it may or may not.
    check_history(
        &[grant.clone(), expiry.clone(), create(5, ok(2, true))],
        &init1(),
        &Witness::new(),
    )
    .expect("a create with a live lease");
    check_history(
        &[grant.clone(), expiry.clone(), create(ttl + 5, Out::Err(ErrKind::LeaseNotFound))],
        &init1(),
        &Witness::new(),
    )
    .expect("a create with a lease that expired");
    check_history(
        &[grant.clone(), expiry.clone(), create(ttl + 5, ok(2, true))],
        &init1(),
        &Witness::new(),
    )
    .expect("a lease that outlived its TTL (a leader change renews it)");
    check_history(
        &[grant, expiry, create(5, Out::Err(ErrKind::LeaseNotFound))],
        &init1(),
        &Witness::new(),
    )
    .expect_err("a lease gone before its TTL");
}

#[test]
fn checker_rejects_a_revocation_header_past_its_deletion() {
    let grant = op(0, 0, 1, Req::Grant { id: 7 }, ok(1, false));
    let leased = Req::CreateWithLease { key: k(0), value: b"a".to_vec(), lease: 7 };
    let create = op(0, 2, 3, leased, ok(2, true));
    // The revocation deletes k0 at 3 while another client's create, at 4, overlaps it.
    let revoke = |rev| op(0, 4, 10, Req::Revoke { id: 7 }, ok(rev, false));
    let other = op(1, 5, 6, Req::Create { key: k(1), value: b"b".to_vec() }, ok(4, true));
    check_history(
        &[grant.clone(), create.clone(), revoke(3), other.clone()],
        &init1(),
        &Witness::new(),
    )
    .expect("the revocation's header is its deletion's revision");
    check_history(&[grant.clone(), create, revoke(4), other.clone()], &init1(), &Witness::new())
        .expect_err("a revocation's header raised by a write after its deletion");
    // Without keys it changes no revision: its header is the state's, as etcd reads it.
    let empty = |rev| op(0, 4, 10, Req::Revoke { id: 7 }, ok(rev, false));
    let other = op(1, 5, 6, Req::Create { key: k(1), value: b"b".to_vec() }, ok(2, true));
    check_history(&[grant.clone(), empty(1), other.clone()], &init1(), &Witness::new())
        .expect("a revocation without keys before the create");
    check_history(&[grant.clone(), empty(2), other.clone()], &init1(), &Witness::new())
        .expect("a revocation without keys after the create");
    check_history(&[grant, empty(3), other], &init1(), &Witness::new())
        .expect_err("a revocation without keys at a revision nothing made");
}

#[test]
fn checker_rejects_a_grant_header_past_its_effect() {
    let grant = |rev| op(0, 0, 10, Req::Grant { id: 7 }, ok(rev, false));
    let create = |call, rev| {
        op(1, call, call + 1, Req::Create { key: k(1), value: b"b".to_vec() }, ok(rev, true))
    };
    let leased = Req::CreateWithLease { key: k(0), value: b"a".to_vec(), lease: 7 };
    // A create at 2 during the grant, then one with the lease at 3 (so the grant came first).
    let uses = op(2, 11, 12, leased, ok(3, true));
    check_history(&[grant(1), create(2, 2), uses.clone()], &init1(), &Witness::new())
        .expect("a grant before the create");
    check_history(&[grant(2), create(2, 2), uses.clone()], &init1(), &Witness::new())
        .expect("a grant after the create");
    check_history(&[grant(3), create(2, 2), uses], &init1(), &Witness::new())
        .expect_err("a grant's header at a revision only a later write made");
}

#[test]
fn watch_checker_forgives_a_missing_prev_kv_only_after_a_compaction() {
    let put = |v: &str, modr: i64, version: i64, prev: Option<Kv>| Ev {
        put: true,
        kv: kv_at(0, v, 2, modr, version),
        prev,
    };
    let events = vec![put("a", 2, 1, None), put("b", 3, 2, Some(kv_at(0, "a", 2, 2, 1)))];
    let resp = |rev: i64, e: &Ev| pb::WatchResponse {
        header: Some(pb::ResponseHeader { revision: rev, ..Default::default() }),
        events: vec![mvccpb::Event {
            r#type: EventType::Put as i32,
            kv: Some(mvcc_kv(&e.kv)),
            prev_kv: e.prev.as_ref().map(mvcc_kv),
        }],
        ..Default::default()
    };
    let without_prev = put("b", 3, 2, None);
    // The second event arrives at time 20 without its prev_kv.
    let log = vec![WatchLog {
        start: 2,
        responses: vec![resp(2, &events[0]), resp(3, &without_prev)],
        received: vec![10, 20],
    }];
    // A compaction at 4 >= 3 sent at 15 may have removed it before the event was sent.
    check_watch_with(&log, &events, 3, &BTreeMap::from([(4, 15)]))
        .expect("a prev_kv a compaction removed first");
    // One sent at 25 came too late; one at 2 keeps the version.
    check_watch_with(&log, &events, 3, &BTreeMap::from([(4, 25)]))
        .expect_err("a prev_kv missing before the compaction was sent");
    check_watch_with(&log, &events, 3, &BTreeMap::from([(2, 5)]))
        .expect_err("a prev_kv a compaction below the event keeps");
}

#[test]
fn checker_rejects_a_wrong_pinned_read_and_a_missed_compaction() {
    let create = op(0, 0, 1, Req::Create { key: k(0), value: b"a".to_vec() }, ok(2, true));
    let update = op(0, 2, 3, Req::Update { key: k(0), seen: 2, value: b"b".to_vec() }, ok(3, true));
    // At revision 2 the key still had its first value.
    let wrong = op(
        1,
        4,
        5,
        Req::List { start: PREFIX.into(), rev: 2, limit: 5 },
        got(3, vec![kv_at(0, "b", 2, 3, 2)]),
    );
    let e = check_history(&[create.clone(), update.clone(), wrong], &init1(), &Witness::new())
        .expect_err("a pinned read of the wrong state");
    assert!(e.contains("at revision 2"), "expected the pinned read named, got {e}");
    let compact = op(2, 6, 7, Req::Compact { rev: 3 }, ok(3, false));
    let served = op(
        1,
        8,
        9,
        Req::List { start: PREFIX.into(), rev: 2, limit: 5 },
        got(3, vec![kv_at(0, "a", 2, 2, 1)]),
    );
    check_history(
        &[create.clone(), update.clone(), compact.clone(), served],
        &init1(),
        &Witness::new(),
    )
    .expect_err("a read below the compaction after it completed");
    let refused = op(
        1,
        8,
        9,
        Req::List { start: PREFIX.into(), rev: 2, limit: 5 },
        Out::Err(ErrKind::Compacted),
    );
    check_history(&[create, update, compact, refused], &init1(), &Witness::new())
        .expect("a refused read below the compaction");
}

#[test]
fn watch_checker_rejects_gaps_duplicates_and_wrong_progress() {
    let put = |i: usize, v: &str, create: i64, modr: i64, version: i64, prev: Option<Kv>| Ev {
        put: true,
        kv: kv_at(i, v, create, modr, version),
        prev,
    };
    let events = vec![
        put(0, "a", 2, 2, 1, None),
        put(1, "b", 3, 3, 1, None),
        put(0, "c", 2, 4, 2, Some(kv_at(0, "a", 2, 2, 1))),
    ];
    let to_pb = |e: &Ev| mvccpb::Event {
        r#type: if e.put { EventType::Put as i32 } else { EventType::Delete as i32 },
        kv: Some(mvcc_kv(&e.kv)),
        prev_kv: e.prev.as_ref().map(mvcc_kv),
    };
    let resp = |rev: i64, evs: &[&Ev]| pb::WatchResponse {
        header: Some(pb::ResponseHeader { revision: rev, ..Default::default() }),
        events: evs.iter().map(|e| to_pb(e)).collect(),
        ..Default::default()
    };
    let log = |start: i64, responses: Vec<pb::WatchResponse>| WatchLog {
        start,
        received: vec![0; responses.len()],
        responses,
    };
    let all = vec![log(2, vec![resp(2, &[&events[0]]), resp(4, &[&events[1], &events[2]])])];
    check_watch(&all, &events, 4).expect("every event once, in order");
    let resumed = vec![
        log(2, vec![resp(3, &[&events[0], &events[1]])]),
        log(4, vec![resp(4, &[&events[2]])]),
    ];
    check_watch(&resumed, &events, 4).expect("a seamless resumption");
    let gap = vec![log(2, vec![resp(2, &[&events[0]]), resp(4, &[&events[2]])])];
    check_watch(&gap, &events, 4).expect_err("a missed event");
    let dup = vec![log(
        2,
        vec![resp(3, &[&events[0], &events[1]]), resp(3, &[&events[1]]), resp(4, &[&events[2]])],
    )];
    check_watch(&dup, &events, 4).expect_err("a duplicated event");
    let early_progress = vec![log(
        2,
        vec![resp(3, &[]), resp(3, &[&events[0], &events[1]]), resp(4, &[&events[2]])],
    )];
    check_watch(&early_progress, &events, 4).expect_err("progress past undelivered events");
    let mut no_prev = events.clone();
    no_prev[2].prev = None;
    let wrong_prev = vec![log(2, vec![resp(4, &[&no_prev[0], &no_prev[1], &no_prev[2]])])];
    check_watch(&wrong_prev, &events, 4).expect_err("a missing prev_kv");
    // One txn wrote two keys at revision 3: its events must arrive in one response.
    let txn =
        vec![put(0, "a", 2, 2, 1, None), put(1, "b", 3, 3, 1, None), put(2, "d", 3, 3, 1, None)];
    let whole = vec![log(2, vec![resp(2, &[&txn[0]]), resp(3, &[&txn[1], &txn[2]])])];
    check_watch(&whole, &txn, 3).expect("a revision delivered whole");
    let split = vec![log(2, vec![resp(3, &[&txn[0], &txn[1]]), resp(3, &[&txn[2]])])];
    check_watch(&split, &txn, 3).expect_err("a revision split across responses");
    // A second version whose create revision equals its mod revision claims to be a create.
    let mut bad_create = events.clone();
    bad_create[2].kv.create_revision = 4;
    let bad = vec![log(2, vec![resp(4, &[&bad_create[0], &bad_create[1], &bad_create[2]])])];
    check_watch(&bad, &events, 4).expect_err("a create flag on an update");
}

fn mvcc_kv(k: &Kv) -> mvccpb::KeyValue {
    mvccpb::KeyValue {
        key: k.key.clone().into(),
        value: k.value.clone().into(),
        create_revision: k.create_revision,
        mod_revision: k.mod_revision,
        version: k.version,
        lease: k.lease,
    }
}
