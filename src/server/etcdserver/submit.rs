//! Changes of state, through one entry point, [`submit`] (etcd's `EtcdServer` Put, DeleteRange,
//! Txn, Compact, LeaseGrant, LeaseRevoke, Alarm and Auth calls of `v3_server.go`). A handler
//! checks the request and who sent it, submits it, and fills the answer's header; it never
//! sees whether its member is alone or in a cluster, as etcd's `v3rpc` handlers never see Raft.
//! The server's own changes (lease expiry, auto-compaction, a member publishing its name) go
//! through it too.
//!
//! Each change has two roads ([`Change`]), side by side below:
//! - **A member alone** applies it in place, through the store's parallel write path: nothing
//!   is encoded, the permission checks (`etcdserver::apply::auth`) run just before the write under
//!   the auth state's write gate, and what the store does not log itself (lease grants and
//!   revocations, the auth state) is logged here before the answer.
//! - **A cluster member** checks what must hold before a request enters the log (its shape, its
//!   size against this member's limits, the space quota), proposes it (`etcdserver::apply`), and
//!   answers once this member has applied it from the log, where the permission checks run.
//!   A read-only Txn is served without the log after a read barrier, as etcd serves it.
//!
//! Both roads give the same typed answer, with at most the revision in its header.
//!
//! A member alone that grows into a cluster (`etcdserver::grow`) stops applying changes in place:
//! the store hands KV writes back ([`Refused::Closed`]), and the other changes do not start
//! while it grows ([`Member::alone_writes`]) and are handed back too. [`submit`] waits until
//! the member has grown and sends them through the log: the one place of that retry.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use prost::Message;
use tokio::time::{Duration, Instant};

use crate::auth::{AuthInfo, Op};
use crate::error::{Error, Result};
use crate::metrics::ApplyOp;
use crate::mvcc::Refused;
use crate::proto::etcdserverpb as pb;
use crate::proto::memetcdpb as mpb;
use crate::server::etcdserver::alarm;
use crate::server::etcdserver::apply;

use crate::server::etcdserver::convert;
use crate::server::etcdserver::member::Member;
use crate::wal::record::Record;

use mpb::request::Request as Req;
use mpb::response::Response as Resp;

/// A change of state a handler submits, with its two roads.
pub trait Change: Sized + Send {
    /// What the change answers; its header holds at most the revision (the handler fills in
    /// the rest).
    type Answer: Send;

    /// On a member alone: applied in place, or handed back untouched while the member grows
    /// into a cluster.
    fn alone(
        self,
        s: &Arc<Member>,
        who: &Option<AuthInfo>,
    ) -> impl Future<Output = Outcome<Self>> + Send;

    /// On a cluster member: through the Raft log.
    fn in_cluster(
        self,
        s: &Arc<Member>,
        who: &Option<AuthInfo>,
    ) -> impl Future<Output = Result<Self::Answer>> + Send;
}

/// A member alone's answer, or its change handed back.
pub type Outcome<C> = std::result::Result<<C as Change>::Answer, Refused<C>>;

/// Makes `change` on behalf of `who` (checked by the caller for what needs no state: the
/// permission checks that read the state run where the change is applied) and returns its
/// answer.
pub async fn submit<C: Change>(
    s: &Arc<Member>,
    who: &Option<AuthInfo>,
    change: C,
) -> Result<C::Answer> {
    let mut change = change;
    loop {
        if s.raft().is_some() {
            return change.in_cluster(s, who).await;
        }
        change = match change.alone(s, who).await {
            Ok(answer) => return Ok(answer),
            Err(Refused::Error(e)) => return Err(e),
            // The member is growing into a cluster: once it has, through the log (or in place
            // again, if growing failed).
            Err(Refused::Closed(back)) => back,
        };
        s.growth_settled().await;
    }
}

/// Proposes `req` as `who` and returns its answer, once this member has applied it.
async fn proposed<A: FromResponse>(s: &Member, who: &Option<AuthInfo>, req: Req) -> Result<A> {
    A::from_response(apply::propose_as(s, req, apply::header(who)).await?).ok_or(Error::Internal)
}

/// An answer in the form the log's apply gives it.
trait FromResponse: Sized {
    fn from_response(r: Resp) -> Option<Self>;
}

macro_rules! from_response {
    ($($t:ty => $v:ident),*) => {$(
        impl FromResponse for $t {
            fn from_response(r: Resp) -> Option<Self> {
                match r {
                    Resp::$v(a) => Some(a),
                    _ => None,
                }
            }
        }
    )*};
}

from_response!(
    pb::PutResponse => Put,
    pb::DeleteRangeResponse => DeleteRange,
    pb::TxnResponse => Txn,
    pb::CompactionResponse => Compaction,
    pb::LeaseGrantResponse => LeaseGrant,
    pb::LeaseRevokeResponse => LeaseRevoke,
    pb::AlarmResponse => Alarm,
    String => Auth,
    mpb::Empty => Done
);

/// In a cluster: the quota check before a write that adds `cost` bytes is proposed. Going
/// over the quota proposes the NOSPACE alarm, so that every member raises it (etcd's quota
/// applier does the same).
async fn quota(s: &Member, cost: usize) -> Result<()> {
    // The alarm itself is checked when the write is applied (every member alike, in log order):
    // this member's view of it may lag behind a disarm that came first in the log.
    if s.alarms.exceeds_quota(&s.store, cost) {
        let raise = pb::AlarmRequest {
            action: pb::alarm_request::AlarmAction::Activate as i32,
            member_id: s.member_id,
            alarm: pb::AlarmType::Nospace as i32,
        };
        tracing::warn!(size_bytes = s.store.size_bytes(), "alarm: NOSPACE raised for the cluster");
        apply::propose(s, Req::Alarm(raise)).await?;
        return Err(Error::NoSpace);
    }
    Ok(())
}

/// A member alone's write refused: "lease not found" is answered once readers see every
/// revision allocated by then, as the revocation that removed the lease allocated the revision
/// its keys went at first (so no read after the answer finds a key of the lease).
async fn refused(s: &Member, e: Error) -> Error {
    if e == Error::LeaseNotFound {
        s.store.wait_settled().await;
    }
    e
}

// ----- keys -----

impl Change for pb::PutRequest {
    type Answer = pb::PutResponse;

    async fn alone(self, s: &Arc<Member>, who: &Option<AuthInfo>) -> Outcome<Self> {
        s.alarms.check_corrupt()?;
        s.alarms.check_space(&s.store, alarm::put_cost(&self))?;
        s.tenants.check_put(&s.auth, &s.store, &self)?;
        let size = self.encoded_len();
        let put_bytes = (self.key.len() + self.value.len()) as u64;
        let applied = {
            let gate = s.auth.write_gate();
            if gate.is_some() {
                apply::auth::check_put(s, who.as_ref(), &self)?;
            }
            let started = std::time::Instant::now();
            let applied = s.store.put(convert::put_request(self), size);
            applied_in_place(s, ApplyOp::Put, &applied, started);
            if applied.is_ok() {
                s.metrics.put_bytes.fetch_add(put_bytes, Ordering::Relaxed);
            }
            applied
        };
        match applied {
            Ok(a) => {
                s.store.wait_visible(a.visible_at).await;
                Ok(convert::put_response(a.response))
            }
            Err(Refused::Error(e)) => Err(refused(s, e).await.into()),
            Err(Refused::Closed(r)) => Err(Refused::Closed(convert::put_back(r))),
        }
    }

    async fn in_cluster(self, s: &Arc<Member>, who: &Option<AuthInfo>) -> Result<Self::Answer> {
        s.store.check_put(&convert::put_request(self.clone()), self.encoded_len())?;
        s.tenants.check_put(&s.auth, &s.store, &self)?;
        quota(s, alarm::put_cost(&self)).await?;
        proposed(s, who, Req::Put(self)).await
    }
}

impl Change for pb::DeleteRangeRequest {
    type Answer = pb::DeleteRangeResponse;

    async fn alone(self, s: &Arc<Member>, who: &Option<AuthInfo>) -> Outcome<Self> {
        s.alarms.check_corrupt()?;
        let size = self.encoded_len();
        let applied = {
            let gate = s.auth.write_gate();
            if gate.is_some() {
                apply::auth::check_delete(s, who.as_ref(), &self)?;
            }
            let started = std::time::Instant::now();
            let applied = s.store.delete_range(convert::delete_request(self), size);
            applied_in_place(s, ApplyOp::DeleteRange, &applied, started);
            applied
        };
        match applied {
            Ok(a) => {
                s.store.wait_visible(a.visible_at).await;
                Ok(convert::delete_response(a.response))
            }
            Err(Refused::Error(e)) => Err(e.into()),
            Err(Refused::Closed(r)) => Err(Refused::Closed(convert::delete_back(r))),
        }
    }

    async fn in_cluster(self, s: &Arc<Member>, who: &Option<AuthInfo>) -> Result<Self::Answer> {
        let d = convert::delete_request(self.clone());
        s.store.check_delete_range(&d, self.encoded_len())?;
        proposed(s, who, Req::DeleteRange(self)).await
    }
}

impl Change for pb::TxnRequest {
    type Answer = pb::TxnResponse;

    async fn alone(self, s: &Arc<Member>, who: &Option<AuthInfo>) -> Outcome<Self> {
        s.alarms.check_corrupt()?;
        s.alarms.check_space(&s.store, alarm::txn_cost(&self))?;
        s.tenants.check_txn(&s.auth, &s.store, &self)?;
        let size = self.encoded_len();
        let applied = {
            let gate = s.auth.write_gate();
            if gate.is_some() {
                apply::auth::check_txn(s, who.as_ref(), &self)?;
            }
            let started = std::time::Instant::now();
            let applied = s.store.txn(convert::txn_request(self)?, size);
            applied_in_place(s, ApplyOp::Txn, &applied, started);
            applied
        };
        match applied {
            Ok(a) => {
                s.store.wait_visible(a.visible_at).await;
                Ok(convert::txn_response(a.response))
            }
            Err(Refused::Error(e)) => Err(refused(s, e).await.into()),
            Err(Refused::Closed(t)) => Err(Refused::Closed(convert::txn_back(t))),
        }
    }

    /// A read-only Txn is served here after a read barrier (unless all its ranges are
    /// serializable), as etcd serves it without the log; one that may write is proposed.
    async fn in_cluster(self, s: &Arc<Member>, who: &Option<AuthInfo>) -> Result<Self::Answer> {
        let t = convert::txn_request(self.clone())?;
        let size = self.encoded_len();
        s.store.check_txn(&t, size)?;
        if t.is_read_only() {
            if !t.is_serializable() {
                apply::linearizable(s).await?;
            }
            if s.auth.is_enabled() {
                apply::auth::check_txn(s, who.as_ref(), &self)?;
            }
            // Read-only: never handed back (only writes are).
            let applied = s.store.txn(t, size).map_err(|r| match r {
                Refused::Error(e) => e,
                Refused::Closed(_) => Error::Internal,
            })?;
            s.store.wait_visible(applied.visible_at).await;
            return Ok(convert::txn_response(applied.response));
        }
        s.tenants.check_txn(&s.auth, &s.store, &self)?;
        quota(s, alarm::txn_cost(&self)).await?;
        proposed(s, who, Req::Txn(self)).await
    }
}

impl Change for pb::CompactionRequest {
    type Answer = pb::CompactionResponse;

    async fn alone(self, s: &Arc<Member>, _who: &Option<AuthInfo>) -> Outcome<Self> {
        s.alarms.check_corrupt()?;
        // A member alone stays one until the compaction is logged (see `Member::alone`).
        let Some(_alone) = s.alone_writes().await else { return Err(Refused::Closed(self)) };
        let rev = self.revision;
        Ok(compacted_alone(s.clone(), move |store| store.compact(rev)).await?)
    }

    async fn in_cluster(self, s: &Arc<Member>, who: &Option<AuthInfo>) -> Result<Self::Answer> {
        let (rev, physical) = (self.revision, self.physical);
        let answer = proposed(s, who, Req::Compaction(self)).await?;
        // The apply set the compaction and left its walks to a thread (`apply`); a physical
        // compaction's answer waits for them, on this member, as etcd's does.
        if physical {
            s.store.wait_walked(rev).await;
        }
        Ok(answer)
    }
}

/// A member alone's compaction, `compact` (the store's, or a tenant's prefix's), off the
/// runtime's threads: it waits for the WAL and walks partitions.
async fn compacted_alone(
    s: Arc<Member>,
    compact: impl FnOnce(&crate::mvcc::Store) -> Result<crate::mvcc::Compacted> + Send + 'static,
) -> Result<pb::CompactionResponse> {
    let c = crate::server::etcdserver::blocking::on_thread_of_its_own("compaction", move || {
        let started = std::time::Instant::now();
        let c = compact(&s.store);
        let took = started.elapsed();
        s.metrics.applied(ApplyOp::Compaction, c.is_ok(), took);
        if c.is_ok() {
            s.metrics.compacted(took);
        }
        c
    })
    .await
    .map_err(|_| {
        tracing::error!("compaction thread failed");
        Error::Internal
    })??;
    Ok(pb::CompactionResponse { header: apply::nested(c.revision) })
}

/// A Compact from a tenant's user (`etcdserver::tenant`): compacts the tenant's prefix alone.
#[derive(Debug)]
pub struct TenantCompaction {
    /// The tenant's prefix, with its trailing slash.
    pub prefix: bytes::Bytes,
    pub request: pb::CompactionRequest,
}

impl Change for TenantCompaction {
    type Answer = pb::CompactionResponse;

    async fn alone(self, s: &Arc<Member>, _who: &Option<AuthInfo>) -> Outcome<Self> {
        s.alarms.check_corrupt()?;
        let Some(_alone) = s.alone_writes().await else { return Err(Refused::Closed(self)) };
        let (rev, prefix) = (self.request.revision, self.prefix);
        Ok(compacted_alone(s.clone(), move |store| store.compact_prefix(&prefix, rev)).await?)
    }

    async fn in_cluster(self, s: &Arc<Member>, who: &Option<AuthInfo>) -> Result<Self::Answer> {
        let req = mpb::TenantCompaction { prefix: self.prefix, revision: self.request.revision };
        proposed(s, who, Req::TenantCompaction(req)).await
    }
}

// ----- leases -----

impl Change for pb::LeaseGrantRequest {
    type Answer = pb::LeaseGrantResponse;

    async fn alone(self, s: &Arc<Member>, _who: &Option<AuthInfo>) -> Outcome<Self> {
        s.alarms.check_corrupt()?;
        // A member alone stays one until the grant is logged (see `Member::alone`).
        let Some(_alone) = s.alone_writes().await else { return Err(Refused::Closed(self)) };
        s.alarms.check_space(&s.store, alarm::lease_cost())?;
        if s.store.wal().is_some_and(|w| !w.writable()) {
            return Err(Error::WalUnavailable.into());
        }
        let started = std::time::Instant::now();
        let granted = s.lessor.grant(self.id, self.ttl);
        s.metrics.applied(ApplyOp::LeaseGrant, granted.is_ok(), started.elapsed());
        let (id, ttl) = granted?;
        // The revision the grant took effect at (etcd reads it as it applies the grant), not
        // one read after the WAL wait, which other clients' writes may have raised.
        let rev = s.store.current_revision();
        if let Some(w) = s.store.wal() {
            let batch = w.append_meta(|seq| Record::LeaseGrant { seq, id, ttl });
            w.wait_durable(batch).await;
        }
        Ok(pb::LeaseGrantResponse { header: apply::nested(rev), id, ttl, error: String::new() })
    }

    async fn in_cluster(self, s: &Arc<Member>, who: &Option<AuthInfo>) -> Result<Self::Answer> {
        if self.ttl > crate::lease::MAX_TTL {
            return Err(Error::LeaseTtlTooLarge);
        }
        quota(s, alarm::lease_cost()).await?;
        // Every member grants the same id: chosen here, before the proposal.
        let id = if self.id == 0 { s.lessor.fresh_id() } else { self.id };
        let grant = pb::LeaseGrantRequest { id, ttl: self.ttl };
        proposed(s, who, Req::LeaseGrant(grant)).await
    }
}

impl Change for pb::LeaseRevokeRequest {
    type Answer = pb::LeaseRevokeResponse;

    async fn alone(self, s: &Arc<Member>, who: &Option<AuthInfo>) -> Outcome<Self> {
        s.alarms.check_corrupt()?;
        let Some(_alone) = s.alone_writes().await else { return Err(Refused::Closed(self)) };
        let id = self.id;
        let first = {
            let _gate = s.auth.write_gate();
            apply::auth::check_lease_revoke(s, who.as_ref(), id)?;
            s.lessor.revoke_first(id)
        };
        if first != Ok(true) {
            // Gone, or its expiry got there first: answered once the lease is gone and readers
            // see its keys' deletion, so that no answer predates what that revocation did.
            if first.is_ok() {
                s.lessor.wait_gone(id).await;
            }
            s.store.wait_settled().await;
            return Err(Error::LeaseNotFound.into());
        }
        let rev = revoke_logged(s, vec![id]).await;
        Ok(pb::LeaseRevokeResponse { header: apply::nested(rev) })
    }

    async fn in_cluster(self, s: &Arc<Member>, who: &Option<AuthInfo>) -> Result<Self::Answer> {
        proposed(s, who, Req::LeaseRevoke(self)).await
    }
}

/// A member alone's revocation of leases it marked revoking ([`apply::revoke`]), answered once
/// readers see the deletions and its WAL has the revocations; returns the header revision of
/// the last. Leases are handled together so that expiring thousands costs a few WAL batches,
/// not one per lease.
async fn revoke_logged(s: &Member, leases: Vec<i64>) -> i64 {
    // A lease left out is gone already (nothing else revokes a lease marked revoking on a
    // member alone).
    let started = std::time::Instant::now();
    let revoked = apply::revoke(s, leases);
    s.metrics.applied(ApplyOp::LeaseRevoke, !revoked.gone.is_empty(), started.elapsed());
    s.store.wait_visible(revoked.visible_at).await;
    // Logged after the keys' deletion: a crash in between leaves a lease without keys, which
    // expires again after restart, never keys without their lease.
    if let Some(w) = s.store.wal() {
        let mut logged = None;
        for id in revoked.gone {
            logged = Some(w.append_meta(|seq| Record::LeaseRevoke { seq, id }));
        }
        if let Some(batch) = logged {
            w.wait_durable(batch).await;
        }
    }
    revoked.revision
}

/// A member alone's apply of a KV write in place, timed as etcd times its applies (a write
/// handed back to go through the log is applied there, and timed there).
fn applied_in_place<A, C>(
    s: &Member,
    op: ApplyOp,
    r: &std::result::Result<A, Refused<C>>,
    started: std::time::Instant,
) {
    let success = match r {
        Ok(_) | Err(Refused::Error(Error::Compacted)) => true,
        Err(Refused::Error(_)) => false,
        Err(Refused::Closed(_)) => return,
    };
    s.metrics.applied(op, success, started.elapsed());
}

/// Leases revoked per batch of an expiry, before the next batch.
const EXPIRY_BATCH: usize = 1000;

/// The revocation of every lease whose TTL ran out by now (the expiry loop's,
/// `etcdserver::lessor`), submitted as root, as etcd's expiry does (`WithRoot`). Each lease's keys
/// go in one revision, and watchers see DELETE events with prev_kv. In a cluster only the leader
/// expires leases, by proposing their revocations.
#[derive(Debug)]
pub struct Expiry {
    /// A lease whose revocation could not be proposed (no quorum for a moment) is expired again
    /// after this (or by the next leader).
    pub retry_after: Duration,
}

impl Change for Expiry {
    type Answer = ();

    async fn alone(self, s: &Arc<Member>, _who: &Option<AuthInfo>) -> Outcome<Self> {
        let Some(_alone) = s.alone_writes().await else { return Err(Refused::Closed(self)) };
        loop {
            let expired = s.lessor.expire(Instant::now(), EXPIRY_BATCH);
            let n = expired.len();
            if n > 0 {
                revoke_logged(s, expired).await;
            }
            // Recovered keys whose lease was gone (see `LeaseIndex::attach`).
            for (id, key) in s.lessor.take_orphans() {
                let rev = s.store.delete_orphans(id, vec![key]).visible_at;
                s.store.wait_visible(rev).await;
            }
            if n < EXPIRY_BATCH {
                return Ok(());
            }
            tokio::task::yield_now().await;
        }
    }

    async fn in_cluster(self, s: &Arc<Member>, who: &Option<AuthInfo>) -> Result<()> {
        while s.raft().is_some_and(|r| r.is_leader()) {
            let expired = s.lessor.expire(Instant::now(), EXPIRY_BATCH);
            let n = expired.len();
            let mut revocations = tokio::task::JoinSet::new();
            for id in expired {
                let (s, who, retry) = (s.clone(), who.clone(), self.retry_after);
                revocations.spawn(async move {
                    let revoke = Req::LeaseRevoke(pb::LeaseRevokeRequest { id });
                    let r: Result<pb::LeaseRevokeResponse> = proposed(&s, &who, revoke).await;
                    if let Err(e) = r {
                        tracing::debug!(lease = id, error = %e, "lease: expiry not proposed");
                        s.lessor.retry_expiry(id, retry);
                    }
                });
            }
            while revocations.join_next().await.is_some() {}
            if n < EXPIRY_BATCH {
                break;
            }
        }
        Ok(())
    }
}

// ----- alarms, members, auth -----

impl Change for pb::AlarmRequest {
    type Answer = pb::AlarmResponse;

    async fn alone(self, s: &Arc<Member>, _who: &Option<AuthInfo>) -> Outcome<Self> {
        let Some(_alone) = s.alone_writes().await else { return Err(Refused::Closed(self)) };
        let started = std::time::Instant::now();
        let answer = apply::alarm(s, &self);
        s.metrics.applied(ApplyOp::Alarm, true, started.elapsed());
        Ok(answer)
    }

    /// Alarms are the cluster's: raised, cleared and listed through the log, as etcd does it,
    /// so that every member answers the same.
    async fn in_cluster(self, s: &Arc<Member>, who: &Option<AuthInfo>) -> Result<Self::Answer> {
        proposed(s, who, Req::Alarm(self)).await
    }
}

/// A member's name and client URLs (etcd's `publish`), which MemberList shows.
impl Change for mpb::MemberAttributes {
    type Answer = mpb::Empty;

    async fn alone(self, s: &Arc<Member>, _who: &Option<AuthInfo>) -> Outcome<Self> {
        s.members.lock().insert(self.member_id, self);
        Ok(mpb::Empty {})
    }

    async fn in_cluster(self, s: &Arc<Member>, who: &Option<AuthInfo>) -> Result<Self::Answer> {
        proposed(s, who, Req::MemberAttributes(self)).await
    }
}

/// A change of auth state (passwords already hashed, by the member the client called);
/// answers Authenticate's token.
impl Change for mpb::AuthRequest {
    type Answer = String;

    /// Applied, then written to the auth file before the answer.
    async fn alone(self, s: &Arc<Member>, who: &Option<AuthInfo>) -> Outcome<Self> {
        // A member alone stays one until the change is written (see `Member::alone`).
        let Some(_alone) = s.alone_writes().await else { return Err(Refused::Closed(self)) };
        let op = convert::auth_op(self).ok_or(Error::Internal)?;
        // Tokens are not persisted (they go with a restart, as in etcd): nothing to write.
        let persists = !matches!(op, Op::Authenticate { .. });
        // One change at a time: the file is written in the order the changes were applied.
        let _g = s.auth_changes.lock().await;
        let caller = who.clone().unwrap_or_default();
        let path = auth_file(s).filter(|_| persists);
        // The state before, to go back to if the change cannot be written: a change answered
        // with an error must not stay in force (changes are rare; the copy is cheap).
        let before = path.as_ref().map(|_| s.auth.export());
        let token = s.auth.apply(&caller, op)?;
        if let (Some(path), Some(before)) = (path, before) {
            let state = s.auth.export();
            let written = tokio::task::block_in_place(|| crate::auth::file::save(&path, &state));
            if let Err(e) = written {
                tracing::error!(error = %e, path = %path.display(), "auth: the auth file could not be written; the change is undone");
                s.auth.undo(before);
                return Err(Error::WalUnavailable.into());
            }
        }
        Ok(token)
    }

    async fn in_cluster(self, s: &Arc<Member>, who: &Option<AuthInfo>) -> Result<Self::Answer> {
        proposed(s, who, Req::Auth(self)).await
    }
}

/// The auth file of a member alone that keeps its state (`crate::auth::file`).
pub fn auth_file(s: &Member) -> Option<PathBuf> {
    let o = s.config.wal_options();
    (o.mode != crate::wal::Mode::None).then(|| o.dir.auth_file())
}
