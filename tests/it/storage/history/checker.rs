//! The checker: the linearizability search (Wing & Gong's, with Lowe's memoization, taking the
//! order the watches saw), the reads checked outside it, and every watch guarantee.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use mvccpb::event::EventType;

use super::model::{ErrKind, Op, Out, PREFIX, Req, Resp, State, apply, step};
use crate::api::watch::{Ev, hrev, is_progress};
use crate::support::*;

/// Model states the search may visit before it gives up (and the test fails, saying so).
const SEARCH_BUDGET: usize = 2_000_000;

/// What the watchers saw each revision change: (key, the value a put left, None for a delete),
/// in key order, for every revision the watchers agree on. Writes of unknown outcome, and
/// concurrent writes whose order no answer fixes, leave the search a choice between orders
/// that are equally linearizable; the watches saw which one the server took, so the search
/// takes only that one (else it may pick another, and the watch check then fails a correct
/// history). A revision the watchers disagree on constrains nothing: the watch checks report
/// the disagreement.
pub(super) type Witness = BTreeMap<i64, Vec<Change>>;

/// A key a revision changed, and the value a put left (None: a delete).
type Change = (Vec<u8>, Option<Vec<u8>>);

pub(super) fn witness(logs: &[Vec<WatchLog>]) -> Witness {
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

pub(super) fn show_req(r: &Req) -> String {
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

pub(super) fn show_out(o: &Out) -> String {
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
pub(super) struct Checked {
    /// The state after each revision's write (and after each compaction).
    pub(super) states: BTreeMap<i64, State>,
    /// Every event, in revision order.
    pub(super) events: Vec<Ev>,
    /// The revision of every compaction that took effect (two in a row share a state), with
    /// when the first compaction to it was sent.
    pub(super) compactions: BTreeMap<i64, u64>,
    /// Leases the linearization has the server expire.
    pub(super) expired: usize,
    /// Search states explored, to show how hard the history was.
    pub(super) visited: usize,
}

/// The whole KV check.
pub(super) fn check_history(
    all: &[Op],
    init: &State,
    witness: &Witness,
) -> Result<Checked, String> {
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
pub(super) fn summary(ops: &[Op], logs: &[Vec<WatchLog>], visited: usize) -> String {
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

/// One watch stream's responses for a watch created at `start`.
#[derive(Debug, Default)]
pub(super) struct WatchLog {
    pub(super) start: i64,
    pub(super) responses: Vec<pb::WatchResponse>,
    /// When each response arrived, on the clock of the operations' times.
    pub(super) received: Vec<u64>,
}

/// Checks the responses of `segments` (a watch and its resumptions, each from the previous
/// one's last revision + 1) against `events`, the history's events on the watched prefix, up to
/// revision `end`.
pub(super) fn check_watch(segments: &[WatchLog], events: &[Ev], end: i64) -> Result<(), String> {
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
pub(super) fn check_watch_with(
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
