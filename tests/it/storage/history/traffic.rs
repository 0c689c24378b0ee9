//! The traffic: requests as etcd's API carries them, connections that survive a restart, and
//! the clients and watchers whose every call and response the history records.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use pb::compare::{CompareResult, CompareTarget, TargetUnion};
use pb::request_op::Request as Rq;
use pb::response_op::Response as Rs;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tonic::transport::Channel;

use super::checker::WatchLog;
use super::model::{ErrKind, Op, Out, PREFIX, Req, Resp};
use crate::api::watch::{CreateExt, Ws, hrev, is_progress, on_prefix, prefix_end};
use crate::support::*;

/// Few keys, so creates, updates and deletes of different clients collide.
pub(super) const KEYS: usize = 10;
/// Small pages, so a list of ten keys takes several requests at a pinned revision.
const PAGE: i64 = 3;
pub(super) const CLIENTS: usize = 8;
/// Operations each client starts per run (a list counts once but sends several pages).
const OPS_PER_CLIENT: usize = 40;
/// The TTL of the leases clients grant, in seconds: etcd's minimum, so that runs of a few
/// seconds see leases expire.
pub(super) const LEASE_TTL: i64 = 2;
/// How long one request may take before its outcome counts as unknown.
const DEADLINE: Duration = Duration::from_secs(5);

pub(super) fn key_name(i: usize) -> Vec<u8> {
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
pub(super) async fn send(raw: &mut Raw, req: &Req, pad: usize) -> Option<Out> {
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

/// One life of the server (or of one cluster member): a restart makes a new one (a server
/// alone comes back on a new port, a member on its own).
#[derive(Clone, Debug)]
pub(super) struct Incarnation {
    pub(super) epoch: u64,
    pub(super) endpoint: String,
    /// A cluster member: besides being killed, it may fail to answer because it has no leader,
    /// is cut off from the others or paused, and a client then asks it again.
    pub(super) member: bool,
    /// The member was killed and is not back yet (set before the kill, cleared with the new
    /// epoch once it serves again).
    pub(super) down: bool,
}

/// Where clients and watchers find the current incarnation of their server or member (one
/// channel per member in a cluster). Only the fault injector changes it; everyone else waits on
/// it after losing a connection.
pub(super) type Dial = tokio::sync::watch::Receiver<Incarnation>;

/// How long a client waits for a killed server's replacement before it calls the failure
/// something else (and, in a watcher, a bug).
const REPLACEMENT: Duration = Duration::from_secs(30);

/// A connection to whichever incarnation is current.
pub(super) struct Conn {
    pub(super) raw: Raw,
    pub(super) epoch: u64,
    dial: Dial,
    /// The run injects faults: a request without an answer may mean the server was killed.
    pub(super) faults: bool,
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
    pub(super) async fn new(mut d: Dial, faults: bool) -> Conn {
        let (ch, epoch) = dial(&mut d).await;
        Conn { raw: Raw::new(ch), epoch, dial: d, faults }
    }

    /// After a request that got no answer: when the server it went to was killed, waits for the
    /// next incarnation and connects to it. A cluster member that is up (it failed for want of
    /// a leader, or was cut off or paused) is asked again after a moment on the same connection.
    pub(super) async fn recover(&mut self) {
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

/// How a client paces and reads.
#[derive(Clone, Copy, Debug)]
pub(super) struct Habits {
    /// The average pause between operations.
    pub(super) think: Duration,
    /// Half the single-key Gets are serializable (cluster runs).
    pub(super) serializable: bool,
    /// A share of the operations are grants, revocations and creates with a lease, so that
    /// revocations delete keys while other clients write (the Kubernetes mix has few).
    pub(super) lease_heavy: bool,
    /// Most operations are linearizable Gets, so that many wait for a read index at once on
    /// every member and share its rounds (`raft::read_index`) while writes go on.
    pub(super) read_heavy: bool,
}

/// One client's traffic: what a controller does through kube-apiserver's storage layer.
/// Clients start at least `OPS_PER_CLIENT` operations each, and go on until `stop` says so (in
/// fault runs, once the faults are over).
pub(super) async fn client(
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
pub(super) struct WatcherPlan {
    /// Drop the stream after this many event responses and resume on a new one from the last
    /// revision + 1.
    pub(super) resume_after: Option<usize>,
    /// Stop reading for this long after the third event response (with a one-response client
    /// buffer, so the server meets the back-pressure), then read on.
    pub(super) stall: Option<Duration>,
    /// The run kills the server: a stream that ends resumes on the next incarnation instead of
    /// failing the test.
    pub(super) faults: bool,
}

/// A watcher from `start` on the prefix with prev_kv, asking for progress now and then, until it
/// has everything up to the revision `end` sends.
pub(super) async fn watcher(
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
