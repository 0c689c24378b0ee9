//! Applying requests from the Raft log (etcd's `etcdserver/apply`): a cluster member's state
//! machine ([`Applier`], which Raft drives), and the road of a request into the log
//! ([`propose`]).
//!
//! Every change of state enters through `etcdserver::submit`. On a cluster member it is proposed
//! here, and every member applies it from the log through the store's write path, in log
//! order, so that every member holds the same revisions, histories and events; on a member
//! alone `etcdserver::submit` applies it in place through the same write path (the parallel one),
//! sharing the pieces below that do not depend on the log: the permission checks
//! (`etcdserver::apply::auth`), [`revoke`] and [`alarm`].

pub(crate) mod auth;

use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::{Arc, Weak};

use bytes::Bytes;
use prost::Message;

use crate::auth::AuthInfo;
use crate::error::{Error, Result};
use crate::metrics::ApplyOp;
use crate::proto::etcdserverpb as pb;
use crate::proto::memetcdpb as mpb;
use crate::raft::{SnapshotJob, StateMachine};

use crate::server::etcdserver::convert;
use crate::server::etcdserver::member::Member;

use mpb::request::Request as Req;
use mpb::response::Response as Resp;

// Requests from the log: applied without this member's limits (`--max-request-bytes`,
// `--max-txn-ops`), which the proposing member checked and which may differ between members.

fn put(s: &Member, req: pb::PutRequest) -> Result<pb::PutResponse> {
    let bytes = (req.key.len() + req.value.len()) as u64;
    let applied = s.store.put_logged(convert::put_request(req))?;
    s.metrics.put_bytes.fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
    Ok(convert::put_response(applied.response))
}

fn delete_range(s: &Member, req: pb::DeleteRangeRequest) -> Result<pb::DeleteRangeResponse> {
    let a = s.store.delete_range_logged(convert::delete_request(req))?;
    Ok(convert::delete_response(a.response))
}

fn txn(s: &Member, req: pb::TxnRequest) -> Result<pb::TxnResponse> {
    Ok(convert::txn_response(s.store.txn_logged(convert::txn_request(req)?)?.response))
}

/// Leases revoked with their keys ([`revoke`]).
#[derive(Debug, Default)]
pub struct Revoked {
    /// The leases that were there to revoke.
    pub gone: Vec<i64>,
    /// The header revision of the last: the revision it took effect at (etcd reads it while it
    /// applies the revocation), its keys' deletion or, for a lease without keys, the newest
    /// revision allocated as it went (see `Store::revoke_lease`). Never one read later: other
    /// clients' writes meanwhile would raise it past the deletion (the history checker saw a
    /// revocation answer 147 for keys deleted at 142).
    pub revision: i64,
    /// Readers must see this revision before anyone is told.
    pub visible_at: i64,
}

/// Revokes leases, the one revocation of a lease (a client's or an expiry, from the log or on
/// a member alone): the store deletes each lease's keys in one revision and removes the lease
/// in the same step (`Store::revoke_lease`), so from that revision on the lease is gone for
/// every other request and no key attached to it outlives it. A lease that is not there is
/// left out of [`Revoked::gone`].
pub fn revoke(s: &Member, leases: Vec<i64>) -> Revoked {
    let mut r = Revoked { gone: Vec::with_capacity(leases.len()), ..Default::default() };
    for id in leases {
        if let Some(applied) = s.store.revoke_lease(id) {
            r.visible_at = r.visible_at.max(applied.visible_at);
            r.revision = applied.response;
            r.gone.push(id);
        }
    }
    s.metrics.leases_revoked.fetch_add(r.gone.len() as u64, std::sync::atomic::Ordering::Relaxed);
    r
}

/// An alarm request: activate and deactivate change state, get reads it.
pub fn alarm(s: &Member, r: &pb::AlarmRequest) -> pb::AlarmResponse {
    let alarms = &s.alarms;
    let list = match pb::alarm_request::AlarmAction::try_from(r.action) {
        Ok(pb::alarm_request::AlarmAction::Get) => alarms.get(r.alarm),
        Ok(pb::alarm_request::AlarmAction::Activate) => {
            alarms.activate(r.member_id, r.alarm).into_iter().collect()
        }
        Ok(pb::alarm_request::AlarmAction::Deactivate) => {
            alarms.deactivate(r.member_id, r.alarm).into_iter().collect()
        }
        // etcd answers an unknown action with an empty list.
        Err(_) => Vec::new(),
    };
    let alarms =
        list.into_iter().map(|(member_id, alarm)| pb::AlarmMember { member_id, alarm }).collect();
    pb::AlarmResponse { header: s.header(0), alarms }
}

/// A response header holding only a revision: the member answering the client fills in the
/// rest (its ids, the term).
pub fn nested(revision: i64) -> Option<pb::ResponseHeader> {
    Some(pb::ResponseHeader { revision, ..Default::default() })
}

/// The proposal header for `who` (absent while auth is disabled or for no credentials).
pub fn header(who: &Option<AuthInfo>) -> Option<mpb::AuthHeader> {
    who.as_ref().map(|w| mpb::AuthHeader { username: w.username.clone(), revision: w.revision })
}

/// Who a request from the log comes from.
fn from_header(h: &Option<mpb::AuthHeader>) -> Option<AuthInfo> {
    h.as_ref().map(|h| AuthInfo { username: h.username.clone(), revision: h.revision })
}

/// The identity of a member's own changes (lease expiry: etcd's `WithRoot`).
pub fn root() -> Option<AuthInfo> {
    Some(AuthInfo { username: crate::auth::store::ROOT.into(), revision: u64::MAX })
}

/// Applies one request from the Raft log, sent by `who` (`header`).
/// Applies `req` from the log, timed as etcd times its applies (`etcd_server_apply_duration_seconds`).
fn apply(s: &Arc<Member>, req: Req, header: Option<mpb::AuthHeader>) -> Result<Resp> {
    let op = match &req {
        Req::Put(_) => Some(ApplyOp::Put),
        Req::DeleteRange(_) => Some(ApplyOp::DeleteRange),
        Req::Txn(_) => Some(ApplyOp::Txn),
        Req::Compaction(_) | Req::TenantCompaction(_) => Some(ApplyOp::Compaction),
        Req::LeaseGrant(_) => Some(ApplyOp::LeaseGrant),
        Req::LeaseRevoke(_) => Some(ApplyOp::LeaseRevoke),
        Req::Alarm(_) => Some(ApplyOp::Alarm),
        Req::MemberAttributes(_) | Req::Auth(_) => None,
    };
    let started = std::time::Instant::now();
    let r = apply_request(s, req, header);
    if let Some(op) = op {
        // etcd counts a read of a compacted revision inside a Txn as a success.
        let success = matches!(r, Ok(_) | Err(Error::Compacted));
        s.metrics.applied(op, success, started.elapsed());
    }
    r
}

/// Walks the compactions just set (their hash, their freeing: every partition) on a thread of
/// their own, as etcd's apply leaves its compaction to a scheduled job: done in the apply
/// loop, the walk of a store of millions of keys held every later entry, so every write, for
/// as long as it took (seconds). Also called once the member serves, for the compaction a
/// restart finished.
pub(in crate::server) fn walk_compactions(s: &Arc<Member>) {
    let s = s.clone();
    drop(crate::server::etcdserver::blocking::on_thread_of_its_own("compaction", move || {
        let started = std::time::Instant::now();
        // None left: an earlier walk took this one too, and timed it.
        if s.store.walk_compactions() > 0 {
            s.metrics.compacted(started.elapsed());
        }
    }));
}

fn apply_request(s: &Arc<Member>, req: Req, header: Option<mpb::AuthHeader>) -> Result<Resp> {
    // A write that adds data is refused on every member alike while NOSPACE is raised (etcd's
    // capped applier), every write while CORRUPT is (its corrupt applier): the alarms
    // themselves went through the log.
    let capped = s.alarms.nospace_raised();
    // Permissions are checked here, against the auth state every member holds at this point
    // of the log (etcd's authApplierV3); one atomic load while auth is disabled.
    let auth = s.auth.is_enabled();
    let who = from_header(&header);
    if !matches!(req, Req::Put(_) | Req::DeleteRange(_) | Req::Txn(_)) {
        // The others read the published revision (a compaction's bound, a grant's header):
        // everything applied before them is published first (see `Store::hold_publishing`).
        s.store.publish_held();
    }
    Ok(match req {
        Req::Put(p) => {
            if auth {
                auth::check_put(s, who.as_ref(), &p)?;
            }
            s.alarms.check_corrupt()?;
            if capped && crate::server::etcdserver::alarm::put_cost(&p) > 0 {
                return Err(Error::NoSpace);
            }
            Resp::Put(put(s, p)?)
        }
        Req::DeleteRange(d) => {
            if auth {
                auth::check_delete(s, who.as_ref(), &d)?;
            }
            s.alarms.check_corrupt()?;
            Resp::DeleteRange(delete_range(s, d)?)
        }
        Req::Txn(t) => {
            if auth {
                auth::check_txn(s, who.as_ref(), &t)?;
            }
            s.alarms.check_corrupt()?;
            if capped && crate::server::etcdserver::alarm::txn_cost(&t) > 0 {
                return Err(Error::NoSpace);
            }
            Resp::Txn(txn(s, t)?)
        }
        Req::Compaction(c) => {
            s.alarms.check_corrupt()?;
            let done = s.store.set_compaction(c.revision)?;
            walk_compactions(s);
            Resp::Compaction(pb::CompactionResponse { header: nested(done.revision) })
        }
        Req::TenantCompaction(c) => {
            // In log order, against the replicated auth state (not this member's --tenant
            // flags), so that every member decides alike.
            let end = crate::keyspace::prefix_end(&c.prefix).unwrap_or_default();
            if !s.auth.owns_only(who.as_ref(), &c.prefix, &end) {
                return Err(Error::PermissionDenied);
            }
            s.alarms.check_corrupt()?;
            let done = s.store.set_prefix_compaction(&c.prefix, c.revision)?;
            walk_compactions(s);
            Resp::Compaction(pb::CompactionResponse { header: nested(done.revision) })
        }
        Req::LeaseGrant(g) => {
            s.alarms.check_corrupt()?;
            if capped {
                return Err(Error::NoSpace);
            }
            // Every member keeps the lease; only the leader expires it, after giving every
            // lease its full TTL when it took over.
            let (id, ttl) = s.lessor.grant(g.id, g.ttl)?;
            Resp::LeaseGrant(pb::LeaseGrantResponse {
                header: nested(s.store.current_revision()),
                id,
                ttl,
                error: String::new(),
            })
        }
        Req::LeaseRevoke(r) => {
            auth::check_lease_revoke(s, who.as_ref(), r.id)?;
            s.alarms.check_corrupt()?;
            let revoked = revoke(s, vec![r.id]);
            if revoked.gone.is_empty() {
                return Err(Error::LeaseNotFound);
            }
            Resp::LeaseRevoke(pb::LeaseRevokeResponse { header: nested(revoked.revision) })
        }
        Req::Alarm(a) => Resp::Alarm(alarm(s, &a)),
        Req::MemberAttributes(m) => {
            s.members.lock().insert(m.member_id, m);
            Resp::Done(mpb::Empty {})
        }
        Req::Auth(a) => {
            let op = convert::auth_op(a).ok_or(Error::Internal)?;
            Resp::Auth(s.auth.apply(&who.unwrap_or_default(), op)?)
        }
    })
}

/// Encodes an answer for the member that proposed the request.
fn encode(r: Result<Resp>) -> Bytes {
    let response = Some(match r {
        Ok(r) => r,
        Err(e) => Resp::Error(e.code()),
    });
    mpb::Response { response }.encode_to_vec().into()
}

/// Proposes `req` to the cluster and returns its answer, once applied on this member.
pub async fn propose(s: &Member, req: Req) -> Result<Resp> {
    propose_as(s, req, None).await
}

/// [`propose`] on behalf of a user (`header`: who, while auth is enabled).
pub async fn propose_as(s: &Member, req: Req, header: Option<mpb::AuthHeader>) -> Result<Resp> {
    let raft = s.raft().expect("proposals are made in a cluster");
    // A learner's clients may not write; the learner itself publishes its name (etcd's learners
    // do, through the leader).
    if raft.role().borrow().is_learner && !matches!(req, Req::MemberAttributes(_)) {
        return Err(Error::LearnerRpc);
    }
    let bytes: Bytes = mpb::Request { request: Some(req), header }.encode_to_vec().into();
    let (_, answer) = raft.propose(bytes).await?;
    match mpb::Response::decode(answer).map_err(|_| Error::Internal)?.response {
        Some(Resp::Error(code)) => Err(Error::from_code(code).unwrap_or(Error::Internal)),
        Some(r) => Ok(r),
        None => Err(Error::Internal),
    }
}

/// The state machine of a cluster member: requests from the Raft log go to the functions
/// above.
#[derive(Debug)]
pub struct Applier {
    /// The services' shared state (weak: it owns the Raft node, which owns this).
    pub shared: Weak<Member>,
}

impl StateMachine for Applier {
    fn apply(&self, request: &[u8], answer: bool) -> Bytes {
        let Some(s) = self.shared.upgrade() else { return encode(Err(Error::Stopped)) };
        let r = match mpb::Request::decode(request) {
            Ok(mpb::Request { request: Some(req), header }) => apply(&s, req, header),
            // Every member refuses it alike: nothing changes.
            _ => Err(Error::Internal),
        };
        if answer { encode(r) } else { Bytes::new() }
    }

    fn batch_started(&self) {
        if let Some(s) = self.shared.upgrade() {
            s.store.hold_publishing();
        }
    }

    fn batch_applied(&self) {
        if let Some(s) = self.shared.upgrade() {
            s.store.stop_holding();
        }
    }

    fn hash_kv(&self, rev: i64) -> crate::error::Result<crate::raft::KvHash> {
        let Some(s) = self.shared.upgrade() else { return Err(Error::Stopped) };
        // A walk of the whole history, which also waits for a compaction in progress.
        let (hash, hash_revision, compact_revision, floors) =
            crate::server::etcdserver::blocking::off_the_runtime(|| s.store.hash_kv_floors(rev))?;
        let revision = s.store.current_revision();
        Ok(crate::raft::KvHash { hash, hash_revision, compact_revision, revision, floors })
    }

    fn snapshot(&self) -> Box<dyn SnapshotJob> {
        let s = self.shared.upgrade().expect("snapshots are taken while the server runs");
        let state = mpb::MachineState {
            alarms: s
                .alarms
                .get(pb::AlarmType::None as i32)
                .into_iter()
                .map(|(member_id, alarm)| pb::AlarmMember { member_id, alarm })
                .collect(),
            members: s.members.lock().values().cloned().collect(),
            auth: Some(crate::auth::codec::to_proto(&s.auth.export())),
        };
        Box::new(Snapshot {
            pin: Some(s.store.pin_history()),
            rev: s.store.current_revision(),
            leases: s.lessor.snapshot(),
            state,
            shared: s,
        })
    }

    fn install(&self, path: &Path, offset: u64) -> io::Result<()> {
        let s = self.shared.upgrade().ok_or_else(|| io::Error::other("server stopped"))?;
        use std::sync::atomic::Ordering::Relaxed;
        s.metrics.snapshot_installing.store(1, Relaxed);
        let r = install(&s, path, offset);
        s.metrics.snapshot_installing.store(0, Relaxed);
        r
    }
}

/// Replaces the state with the snapshot at `offset` in `path` (see `StateMachine::install`).
fn install(s: &Member, path: &Path, offset: u64) -> io::Result<()> {
    let mut f = std::fs::File::open(path)?;
    std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(offset))?;
    let mut len = [0u8; 4];
    f.read_exact(&mut len)?;
    let mut state = vec![0u8; u32::from_le_bytes(len) as usize];
    f.read_exact(&mut state)?;
    let state = mpb::MachineState::decode(&state[..])
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    let summary = s
        .store
        .install_backup(path, offset + 4 + state.encoded_len() as u64)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.0))?;
    s.lessor.reset(&summary.leases);
    s.store.attach_recovered_leases();
    let alarms: Vec<(u64, i32)> = state.alarms.iter().map(|a| (a.member_id, a.alarm)).collect();
    s.alarms.replace(&alarms);
    *s.members.lock() = state.members.into_iter().map(|m| (m.member_id, m)).collect();
    // The machine state's auth state is the cluster's. The backup carries one of its own
    // only in a founding snapshot restored from a mem_etcd backup (`etcdutl::snapshot`), which
    // puts the same into the machine state.
    s.auth.restore(state.auth.map(crate::auth::codec::from_proto).unwrap_or_default());
    s.hub.jump(summary.rev);
    tracing::info!(
        revision = summary.rev,
        keys = s.store.live_keys(),
        "store: replaced by a snapshot"
    );
    Ok(())
}

/// A snapshot's state, fixed between two applies; the pin keeps the history at its revision
/// readable until it is written.
struct Snapshot {
    pin: Option<crate::mvcc::HistoryPin>,
    rev: i64,
    leases: Vec<(i64, i64)>,
    state: mpb::MachineState,
    shared: Arc<Member>,
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        // Not written (the build was dropped): the pin still goes back.
        if let Some(pin) = self.pin.take() {
            self.shared.store.unpin_history(pin);
        }
    }
}

impl SnapshotJob for Snapshot {
    fn write(mut self: Box<Self>, out: &mut dyn Write) -> io::Result<()> {
        let started = std::time::Instant::now();
        let state = self.state.encode_to_vec();
        let stats = &self.shared.metrics.snapshots;
        stats.marshal_seconds.observe(started.elapsed().as_secs_f64());
        out.write_all(&(state.len() as u32).to_le_bytes())?;
        out.write_all(&state)?;
        let pin = self.pin.take().expect("written once");
        let leases = std::mem::take(&mut self.leases);
        let backup = self.shared.store.backup_at(self.rev, leases, pin);
        let mut failed = None;
        backup.write(&mut |piece| match out.write_all(&piece) {
            Ok(()) => true,
            Err(e) => {
                failed = Some(e);
                false
            }
        });
        if failed.is_none() {
            stats.save_seconds.observe(started.elapsed().as_secs_f64());
        }
        failed.map_or(Ok(()), Err)
    }
}

/// In a cluster: waits until this member has applied every write acknowledged before the call
/// (a linearizable read). A learner serves only serializable reads, as in etcd.
pub async fn linearizable(s: &Member) -> Result<()> {
    let Some(raft) = s.raft() else { return Ok(()) };
    if raft.role().borrow().is_learner {
        return Err(Error::LearnerRpc);
    }
    raft.linearizable().await
}
