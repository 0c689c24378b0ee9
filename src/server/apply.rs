//! Applying requests to the store (etcd's `etcdserver/apply`): the one place a request becomes
//! a change of state.
//!
//! A member alone applies requests straight from its handlers, through the store's write path.
//! In a cluster the handlers propose the request to Raft instead ([`propose`]), and every
//! member applies it from the log through the same write path ([`Applier`], the state machine
//! Raft drives), in log order, so that every member holds the same revisions, histories and
//! events.

use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::{Arc, Weak};

use bytes::Bytes;
use prost::Message;

use super::{Shared, auth, convert};
use crate::error::{Error, Result};
use crate::proto::etcdserverpb as pb;
use crate::proto::memetcdpb as mpb;
use crate::raft::{Machine, SnapshotJob};

use mpb::request::Request as Req;
use mpb::response::Response as Resp;

// Requests from the log: applied without this member's limits (`--max-request-bytes`,
// `--max-txn-ops`), which the proposing member checked and which may differ between members.

fn put(s: &Shared, req: pb::PutRequest) -> Result<pb::PutResponse> {
    Ok(convert::put_response(s.store.put_logged(convert::put_request(req))?.response))
}

fn delete_range(s: &Shared, req: pb::DeleteRangeRequest) -> Result<pb::DeleteRangeResponse> {
    let a = s.store.delete_range_logged(convert::delete_request(req))?;
    Ok(convert::delete_response(a.response))
}

fn txn(s: &Shared, req: pb::TxnRequest) -> Result<pb::TxnResponse> {
    Ok(convert::txn_response(s.store.txn_logged(convert::txn_request(req)?)?.response))
}

/// Revokes a lease and deletes its keys at once (the one road a member alone takes too).
/// Returns the header revision.
fn revoke(s: &Shared, id: i64) -> Result<i64> {
    s.store.revoke_lease(id).ok_or(Error::LeaseNotFound)?;
    Ok(s.store.current_revision())
}

/// An alarm request: activate and deactivate change state, get reads it.
pub fn alarm(s: &Shared, r: &pb::AlarmRequest) -> pb::AlarmResponse {
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
fn nested(revision: i64) -> Option<pb::ResponseHeader> {
    Some(pb::ResponseHeader { revision, ..Default::default() })
}

/// Applies one request from the Raft log, sent by `who` (`header`).
fn apply(s: &Shared, req: Req, header: Option<mpb::AuthHeader>) -> Result<Resp> {
    // A write that adds data is refused on every member alike while NOSPACE is raised (etcd's
    // capped applier), every write while CORRUPT is (its corrupt applier): the alarms
    // themselves went through the log.
    let capped = s.alarms.nospace_raised();
    // Permissions are checked here, against the auth state every member holds at this point
    // of the log (etcd's authApplierV3); one atomic load while auth is disabled.
    let auth = s.auth.is_enabled();
    let who = auth::from_header(&header);
    Ok(match req {
        Req::Put(p) => {
            if auth {
                auth::check_put(s, who.as_ref(), &p)?;
            }
            s.alarms.check_corrupt()?;
            if capped && super::alarm::put_cost(&p) > 0 {
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
            if capped && super::alarm::txn_cost(&t) > 0 {
                return Err(Error::NoSpace);
            }
            Resp::Txn(txn(s, t)?)
        }
        Req::Compaction(c) => {
            s.alarms.check_corrupt()?;
            // It walks every partition: off the runtime's other tasks.
            let done = tokio::task::block_in_place(|| s.store.compact(c.revision))?;
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
            Resp::LeaseRevoke(pb::LeaseRevokeResponse { header: nested(revoke(s, r.id)?) })
        }
        Req::Alarm(a) => Resp::Alarm(alarm(s, &a)),
        Req::MemberAttributes(m) => {
            s.members.lock().insert(m.member_id, m);
            Resp::Done(mpb::Empty {})
        }
        Req::Auth(a) => {
            let op = auth::to_op(a).ok_or(Error::Internal)?;
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
pub async fn propose(s: &Shared, req: Req) -> Result<Resp> {
    propose_as(s, req, None).await
}

/// [`propose`] on behalf of a user (`header`: who, while auth is enabled).
pub async fn propose_as(s: &Shared, req: Req, header: Option<mpb::AuthHeader>) -> Result<Resp> {
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
    pub shared: Weak<Shared>,
}

impl Machine for Applier {
    fn apply(&self, request: &[u8]) -> Bytes {
        let Some(s) = self.shared.upgrade() else { return encode(Err(Error::Stopped)) };
        let r = match mpb::Request::decode(request) {
            Ok(mpb::Request { request: Some(req), header }) => apply(&s, req, header),
            // Every member refuses it alike: nothing changes.
            _ => Err(Error::Internal),
        };
        encode(r)
    }

    fn hash_kv(&self, rev: i64) -> crate::error::Result<crate::raft::KvHash> {
        let Some(s) = self.shared.upgrade() else { return Err(Error::Stopped) };
        let (hash, hash_revision, compact_revision) = s.store.hash_kv(rev)?;
        let revision = s.store.current_revision();
        Ok(crate::raft::KvHash { hash, hash_revision, compact_revision, revision })
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
        // only in a founding snapshot restored from a mem_etcd backup (`snapshot_cmd`), which
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
}

/// A snapshot's state, fixed between two applies; the pin keeps the history at its revision
/// readable until it is written.
struct Snapshot {
    pin: Option<crate::mvcc::HistoryPin>,
    rev: i64,
    leases: Vec<(i64, i64)>,
    state: mpb::MachineState,
    shared: Arc<Shared>,
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
        let state = self.state.encode_to_vec();
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
        failed.map_or(Ok(()), Err)
    }
}

/// In a cluster: waits until this member has applied every write acknowledged before the call
/// (a linearizable read). A learner serves only serializable reads, as in etcd.
pub async fn linearizable(s: &Shared) -> Result<()> {
    let Some(raft) = s.raft() else { return Ok(()) };
    if raft.role().borrow().is_learner {
        return Err(Error::LearnerRpc);
    }
    raft.linearizable().await
}

/// In a cluster: the quota check before a write that adds `cost` bytes is proposed. Going
/// over the quota proposes the NOSPACE alarm, so that every member raises it (etcd's quota
/// applier does the same).
pub async fn quota(s: &Shared, cost: usize) -> Result<()> {
    // The alarm itself is checked when the write is applied (every member alike, in log order):
    // this member's view of it may lag behind a disarm that came first in the log.
    if s.alarms.exceeds_quota(&s.store, cost) {
        let raise = pb::AlarmRequest {
            action: pb::alarm_request::AlarmAction::Activate as i32,
            member_id: s.member_id,
            alarm: pb::AlarmType::Nospace as i32,
        };
        tracing::warn!(size_bytes = s.store.size_bytes(), "alarm: NOSPACE raised for the cluster");
        propose(s, Req::Alarm(raise)).await?;
        return Err(Error::NoSpace);
    }
    Ok(())
}
