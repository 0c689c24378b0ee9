//! History checking: concurrent clients send Kubernetes-shaped traffic to one server, every
//! request and response is recorded with its timing, and the history is then validated.
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
//! Every run starts a fresh server of the suite's target (`MEM_ETCD_TEST_TARGET=etcd` runs the
//! same checks against a real etcd, which proves the model; the one allowance it needs is named at
//! [`check_watch_with`]); the fault runs are mem_etcd's own (they use its WAL failpoint). The
//! default is a few seeds, a few seconds in a debug build;
//! `MEM_ETCD_HISTORY_SOAK=<seconds>` keeps running new seeds for that long, and
//! `MEM_ETCD_HISTORY_SEED=<n>` picks the first seed (each run prints its seed and what it
//! exercised).

use std::collections::{BTreeMap, BTreeSet, HashSet};
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
        Req::Grant { id } => {
            n.leases.insert(*id);
            Ok(Resp::default())
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
        Req::Get { key } => {
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
            // etcd reads the header revision of a compaction or a revocation after applying
            // it, so writes that land meanwhile may be in it (etcdserver's Compact and
            // LeaseRevoke); it can never be older.
            Req::Compact { .. } | Req::Revoke { .. } => got.rev >= w.rev,
            _ => got == w,
        },
        _ => false,
    };
    ok.then_some(n)
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
fn linearize(ops: &[Op], init: &State) -> Result<Linearization, String> {
    let n = ops.len();
    let words = n.div_ceil(64).max(1);
    let required: Vec<usize> = (0..n).filter(|&i| ops[i].ret != u64::MAX).collect();
    // Candidates of a frame: every not-yet-linearized operation called before the earliest
    // return among the required ones still pending (none of those may come after it).
    let candidates = |done: &[u64]| -> Vec<usize> {
        let is_done = |i: usize| done[i / 64] >> (i % 64) & 1 == 1;
        let min_ret = required.iter().filter(|&&i| !is_done(i)).map(|&i| ops[i].ret).min();
        let min_ret = min_ret.unwrap_or(u64::MAX);
        (0..n).filter(|&i| !is_done(i) && ops[i].call <= min_ret).collect()
    };
    let all_required = |done: &[u64]| required.iter().all(|&i| done[i / 64] >> (i % 64) & 1 == 1);

    struct Frame {
        done: Vec<u64>,
        state: State,
        cands: Vec<usize>,
        next: usize,
    }
    let mut seen: HashSet<(Vec<u64>, u64)> = HashSet::new();
    let done0 = vec![0u64; words];
    let mut stack =
        vec![Frame { cands: candidates(&done0), done: done0, state: init.clone(), next: 0 }];
    let mut order: Vec<usize> = Vec::new();
    let mut visited = 0usize;
    let mut deepest: Vec<usize> = Vec::new();
    while let Some(top) = stack.last_mut() {
        if all_required(&top.done) {
            return Ok(Linearization { order, visited });
        }
        if top.next == top.cands.len() {
            stack.pop();
            order.pop();
            continue;
        }
        let i = top.cands[top.next];
        top.next += 1;
        let Some(state) = step(&top.state, &ops[i]) else { continue };
        // An unknown-outcome write that changes nothing here might as well not have happened
        // here; it stays a candidate for later, so skipping it loses no linearization and keeps
        // the operations cut off by a crash from multiplying the search.
        if ops[i].out == Out::Unknown && state == top.state {
            continue;
        }
        let mut done = top.done.clone();
        done[i / 64] |= 1 << (i % 64);
        if !seen.insert((done.clone(), state.hash64())) {
            continue;
        }
        visited += 1;
        if visited > SEARCH_BUDGET {
            return Err(format!(
                "the search gave up after {SEARCH_BUDGET} states ({n} operations); shrink the history"
            ));
        }
        order.push(i);
        if order.len() > deepest.len() {
            deepest = order.clone();
        }
        stack.push(Frame { cands: candidates(&done), done, state, next: 0 });
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
fn replay(ops: &[Op], init: &State, lin: &Linearization) -> (BTreeMap<i64, State>, Vec<Ev>) {
    let mut states = BTreeMap::from([(init.rev, init.clone())]);
    let mut events = Vec::new();
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
        if n.rev != s.rev || n.compacted != s.compacted {
            states.insert(n.rev, n.clone());
        }
        s = n;
    }
    (states, events)
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

/// What a history that passed the KV checks yields for the watch checks.
#[derive(Debug)]
struct Checked {
    /// The state after each revision's write (and after each compaction).
    states: BTreeMap<i64, State>,
    /// Every event, in revision order.
    events: Vec<Ev>,
    /// The revision of every compaction that took effect (two in a row share a state).
    compactions: BTreeSet<i64>,
    /// Leases the linearization has the server expire.
    expired: usize,
    /// Search states explored, to show how hard the history was.
    visited: usize,
}

/// The whole KV check.
fn check_history(ops: &[Op], init: &State) -> Result<Checked, String> {
    let lin = linearize(ops, init)?;
    let (states, events) = replay(ops, init, &lin);
    check_pinned_reads(ops, &states)?;
    let compactions = lin
        .order
        .iter()
        .filter_map(|&i| match (&ops[i].req, &ops[i].out) {
            (Req::Compact { rev }, Out::Ok(_) | Out::Unknown) => Some(*rev),
            _ => None,
        })
        .chain([init.compacted])
        .collect();
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
}

/// Checks the responses of `segments` (a watch and its resumptions, each from the previous
/// one's last revision + 1) against `events`, the history's events on the watched prefix, up to
/// revision `end`.
fn check_watch(segments: &[WatchLog], events: &[Ev], end: i64) -> Result<(), String> {
    check_watch_with(segments, events, end, &BTreeSet::new())
}

/// [`check_watch`], forgiving a missing prev_kv on an event at one of the `compactions`'
/// revisions. A compaction at C keeps each key's newest version at or below C, which is the
/// previous version of any later event, but an event *at* C superseded its previous version, so
/// compaction removes it; a watch that reads the event back from history (one starting at
/// exactly C, as a resumption after a restart may) then has no prev_kv to give. etcd leaves it
/// out (etcd-io/etcd#10681), and so does mem_etcd.
fn check_watch_with(
    segments: &[WatchLog],
    events: &[Ev],
    end: i64,
    compactions: &BTreeSet<i64>,
) -> Result<(), String> {
    let first = segments.first().ok_or("no watch")?.start;
    let mut got: Vec<Ev> = Vec::new();
    let mut delivered = first - 1;
    for (n, seg) in segments.iter().enumerate() {
        if n > 0 && seg.start != delivered + 1 {
            return Err(format!(
                "segment {n} resumed at {}, expected {}",
                seg.start,
                delivered + 1
            ));
        }
        for r in &seg.responses {
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
                got.push(ev);
            }
            delivered = revs.last().copied().unwrap_or(delivered);
        }
    }
    // Reliable and unique, with prev_kv: exactly the history's events from the first start on.
    let forgive = |e: &Ev| {
        let mut e = e.clone();
        if compactions.contains(&e.kv.mod_revision) {
            e.prev = None;
        }
        e
    };
    let want: Vec<Ev> = events
        .iter()
        .filter(|e| e.kv.mod_revision >= first && e.kv.mod_revision <= end)
        .map(forgive)
        .collect();
    let got_upto: Vec<Ev> = got.iter().filter(|e| e.kv.mod_revision <= end).map(forgive).collect();
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
                .map(|_| Resp::default()),
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

/// One life of the server: a restart makes a new one (on a new port).
#[derive(Clone, Debug)]
struct Incarnation {
    epoch: u64,
    endpoint: String,
}

/// Where clients and watchers find the current incarnation. Only the fault injector changes it;
/// everyone else waits on it after losing a connection.
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
    /// next incarnation and connects to it.
    async fn recover(&mut self) {
        if !self.faults {
            return;
        }
        let epoch = self.epoch;
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
    think: Duration,
) -> Vec<Op> {
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
        let req = if roll < 5 {
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
            Req::Get { key: key.clone() }
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
        let mut log = WatchLog { start: from, responses: Vec::new() };
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
    let (incarnation, d) =
        tokio::sync::watch::channel(Incarnation { epoch: 0, endpoint: first.endpoint() });
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
        .map(|plan| tokio::spawn(watcher(d.clone(), init.rev + 1, plan, end_rx.clone())))
        .collect();
    // A watch from an older revision, started while compactions run: it must deliver everything
    // from there or be refused with the compaction that removed its start.
    {
        let (mut d, end_rx) = (d.clone(), end_rx.clone());
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x01d);
        let delay = Duration::from_millis(rng.random_range(100..600));
        watchers.push(tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let newest = loop {
                let mut conn = Conn::new(d.clone(), faulty).await;
                if let Some(Out::Ok(r)) =
                    send(&mut conn.raw, &Req::Get { key: key_name(0) }, 0).await
                {
                    break r.rev;
                }
                conn.recover().await;
            };
            let start = rng.random_range(init.rev + 1..=newest.max(init.rev + 1));
            d.mark_changed();
            watcher(d, start, plain, end_rx).await
        }));
    }
    // Without faults the clients stop after their `OPS_PER_CLIENT`; with them, once the
    // injector is done.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(!faulty);
    let injector = match (faults, host.clone()) {
        (Some(f), Some(host)) => tokio::spawn(inject(f, host, first, incarnation, stop_tx, seed)),
        _ => tokio::spawn(async move { (first, incarnation, 0, 0) }),
    };
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for id in 0..CLIENTS {
        let conn = Conn::new(d.clone(), faulty).await;
        // Runs of several seconds pace their clients, so that their histories stay a size the
        // search checks in seconds.
        let think = if faulty { THINK } else { Duration::ZERO };
        tasks.push(tokio::spawn(client(id, conn, seed, t0, pad, stop_rx.clone(), think)));
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
    let refused = ops.iter().filter(|o| o.out == Out::Refused).count();
    ops.retain(|o| o.out != Out::Refused);
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
    if kills == 0 {
        let unknown = ops
            .iter()
            .filter(|o| o.out == Out::Unknown && !matches!(o.req, Req::Expire { .. }))
            .count();
        assert_eq!(
            unknown, 0,
            "seed {seed}: requests without an answer, and no crash to explain them"
        );
    }
    let Checked { states, events, mut compactions, expired, visited } =
        check_history(&ops, &init).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    // A compaction cut off by a crash may have taken effect without the search needing it
    // (nothing else observed it), yet a watch can see it: its revision counts for the watch
    // checks too.
    compactions.extend(ops.iter().filter_map(|o| match (&o.req, &o.out) {
        (Req::Compact { rev }, Out::Unknown) => Some(*rev),
        _ => None,
    }));
    let final_state = states.values().next_back().expect("a state");
    assert_eq!(
        final_state.rev, end,
        "seed {seed}: expected the linearization to end at the server's revision"
    );
    for (n, segments) in logs.iter().enumerate() {
        let canceled = segments.last().and_then(|l| l.responses.last()).filter(|r| r.canceled);
        if let Some(c) = canceled {
            // A start compaction had removed (a resumption racing a compaction, or the watch
            // from an older revision): etcd's answer is a cancel naming a compaction that
            // took place and covers that start.
            let seg = segments.last().expect("a segment");
            assert!(
                c.compact_revision > seg.start && compactions.contains(&c.compact_revision),
                "seed {seed} watcher {n}: expected a cancel only for a compacted start, got compact_revision {} for start {} (compactions: {:?})",
                c.compact_revision,
                seg.start,
                compactions
            );
            let done = &segments[..segments.len() - 1];
            let upto = seg.start - 1;
            if !done.is_empty() {
                check_watch_with(done, &events, upto, &compactions)
                    .unwrap_or_else(|e| panic!("seed {seed} watcher {n}: {e}"));
            }
            continue;
        }
        check_watch_with(segments, &events, end, &compactions)
            .unwrap_or_else(|e| panic!("seed {seed} watcher {n}: {e}"));
    }
    // A watch from before the compaction must be refused with the compaction's revision.
    if final_state.compacted > init.rev + 1 {
        let mut ws = Ws::open(&s).await;
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
    drop(s);
    let mut out = summary(&ops, &logs, visited);
    let leased = |f: &dyn Fn(&Op) -> bool| ops.iter().filter(|o| f(o)).count();
    out += &format!(
        "; leases: {} granted, {} revoked, {} expired, {} keys created with one, {} refused as not found",
        leased(&|o| matches!(o.req, Req::Grant { .. }) && matches!(o.out, Out::Ok(_))),
        leased(&|o| matches!(o.req, Req::Revoke { .. }) && matches!(o.out, Out::Ok(_))),
        expired,
        leased(&|o| matches!(o.req, Req::CreateWithLease { .. })
            && matches!(&o.out, Out::Ok(r) if r.succeeded)),
        leased(&|o| o.out == Out::Err(ErrKind::LeaseNotFound)),
    );
    if faulty {
        let bytes = pad * ops.iter().filter(|o| o.req.is_write()).count();
        out += &format!(
            "; faults: {kills} kills, {fulls} full disks, {refused} writes refused; {} MiB of values sent",
            bytes >> 20
        );
    }
    out
}

/// Runs `RUNS`-sized batches of seeds (or, with `MEM_ETCD_HISTORY_SOAK=<seconds>`, new seeds
/// until that long has passed), each a fresh [`run`].
async fn seeds(name: &str, runs: u64, faults: Option<Faults>) {
    let soak = std::env::var("MEM_ETCD_HISTORY_SOAK").ok().and_then(|v| v.parse::<u64>().ok());
    let until = Instant::now() + Duration::from_secs(soak.unwrap_or(0));
    let base: u64 =
        std::env::var("MEM_ETCD_HISTORY_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    let mut seed = base;
    loop {
        let t = Instant::now();
        let summary = run(seed, faults).await;
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
        check_history(&ops, &init1()).expect("a linearizable history");
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
    check_history(&applied, &init1()).expect("an unknown write that took effect");
    let not_applied = vec![lost, op(1, 5, 6, Req::Get { key: k(0) }, got(1, vec![]))];
    check_history(&not_applied, &init1()).expect("an unknown write that did not");
}

#[test]
fn checker_rejects_a_stale_read() {
    let ops = vec![
        op(0, 0, 1, Req::Create { key: k(0), value: b"a".to_vec() }, ok(2, true)),
        op(1, 2, 3, Req::Get { key: k(0) }, got(1, vec![])),
    ];
    let e = check_history(&ops, &init1())
        .expect_err("a read after a completed write saw the old state");
    assert!(e.contains("not linearizable"), "expected a linearizability failure, got {e}");
}

#[test]
fn checker_rejects_two_writes_with_one_revision() {
    let ops = vec![
        op(0, 0, 5, Req::Create { key: k(0), value: b"a".to_vec() }, ok(2, true)),
        op(1, 0, 5, Req::Create { key: k(1), value: b"b".to_vec() }, ok(2, true)),
    ];
    check_history(&ops, &init1()).expect_err("two writes cannot both produce revision 2");
}

#[test]
fn checker_rejects_a_revision_going_backwards() {
    let ops = vec![
        op(0, 0, 1, Req::Create { key: k(0), value: b"a".to_vec() }, ok(2, true)),
        op(0, 2, 3, Req::Create { key: k(1), value: b"b".to_vec() }, ok(3, true)),
        op(1, 4, 5, Req::Get { key: k(2) }, got(2, vec![])),
    ];
    check_history(&ops, &init1()).expect_err("a read after revision 3 reported revision 2");
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
    let e = check_history(&[create.clone(), update.clone(), wrong], &init1())
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
    check_history(&[create.clone(), update.clone(), compact.clone(), served], &init1())
        .expect_err("a read below the compaction after it completed");
    let refused = op(
        1,
        8,
        9,
        Req::List { start: PREFIX.into(), rev: 2, limit: 5 },
        Out::Err(ErrKind::Compacted),
    );
    check_history(&[create, update, compact, refused], &init1())
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
    let log = |start: i64, responses: Vec<pb::WatchResponse>| WatchLog { start, responses };
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
