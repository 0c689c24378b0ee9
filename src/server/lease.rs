//! The Lease service, and the expiry loop that revokes leases whose TTL ran out.

use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::time::{Duration, Instant};
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::{Shared, apply, auth};
use crate::auth::AuthInfo;
use crate::error::Error;
use crate::lease::Renewal;
use crate::proto::etcdserverpb as pb;
use crate::proto::memetcdpb::request::Request as Req;
use crate::proto::memetcdpb::response::Response as Resp;
use crate::raft::{Answer, Forwarded};
use crate::wal::record::Record;

/// The longest the expiry loop sleeps (etcd checks every 500 ms).
const EXPIRY_TICK: Duration = Duration::from_millis(500);
/// Leases revoked per pass before the loop lets other work run.
const EXPIRY_BATCH: usize = 1000;

#[derive(Debug)]
pub struct LeaseService {
    shared: Arc<Shared>,
}

impl LeaseService {
    pub fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }
}

/// Revokes leases on a member alone: the store deletes each lease's keys in one revision and
/// removes the lease in the same step (`Store::revoke_lease`), so from that revision on the
/// lease is gone for every other request and no key attached to it outlives it. Then, once
/// readers see the deletions, the revocations are logged; returns the header revision of the
/// last. Leases are handled together so that expiring thousands costs a few WAL batches, not
/// one per lease.
///
/// The header revision is the one the revocation took effect at, as etcd reads it while it
/// applies the revocation: the revision its keys went at, or, for a lease without keys, the
/// newest revision allocated when the lease went (see `Store::revoke_lease`). Never one read
/// later: other clients' writes meanwhile would raise it past the deletion (the history checker
/// saw a revocation answer 147 for keys deleted at 142).
async fn delete_keys(shared: &Shared, leases: Vec<i64>) -> i64 {
    let mut visible = 0;
    let mut rev = 0;
    let mut gone = Vec::with_capacity(leases.len());
    for id in leases {
        // None: gone already (nothing else revokes a lease marked revoking on a member alone).
        if let Some(applied) = shared.store.revoke_lease(id) {
            visible = visible.max(applied.visible_at);
            rev = applied.response;
            gone.push(id);
        }
    }
    shared.store.wait_visible(visible).await;
    // Logged after the keys' deletion: a crash in between leaves a lease without keys, which
    // expires again after restart, never keys without their lease.
    if let Some(w) = shared.store.wal() {
        let mut logged = None;
        for id in gone {
            logged = Some(w.append_meta(|seq| Record::LeaseRevoke { seq, id }));
        }
        if let Some(batch) = logged {
            w.wait_durable(batch).await;
        }
    }
    rev
}

/// Logs a lease grant and waits until it is durable (nothing to do without a WAL).
async fn log_grant(shared: &Shared, id: i64, ttl: i64) {
    if let Some(w) = shared.store.wal() {
        let batch = w.append_meta(|seq| Record::LeaseGrant { seq, id, ttl });
        w.wait_durable(batch).await;
    }
}

/// How long a renewal of an expiring lease waits for its revocation to finish.
const REVOCATION_WAIT: Duration = Duration::from_secs(10);

/// Renews a lease on this member (which holds the deadlines: a member alone, or a cluster's
/// leader) and returns the TTL; 0 for an unknown lease, and for an expiring one once its keys
/// are gone (etcd's renew waits for the revocation).
pub async fn renew(shared: &Shared, id: i64) -> i64 {
    promoted(shared);
    match shared.lessor.renew(id) {
        Ok(Renewal::Renewed(ttl)) => return ttl,
        Ok(Renewal::Expiring) => revoked(shared, id).await,
        Err(_) => {}
    }
    shared.store.wait_settled().await;
    0
}

/// Waits (a bounded time) until a lease being revoked is gone.
async fn revoked(shared: &Shared, id: i64) {
    let give_up = Instant::now() + REVOCATION_WAIT;
    while shared.lessor.contains(id) && Instant::now() < give_up {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Renews a lease where the deadlines are kept: here (a member alone), or at the cluster's
/// leader (`RaftNode::at_leader`).
async fn renew_anywhere(shared: &Shared, id: i64) -> Result<i64, Error> {
    let Some(raft) = shared.raft() else { return Ok(renew(shared, id).await) };
    match raft.at_leader(Forwarded::LeaseRenew(pb::LeaseKeepAliveRequest { id })).await? {
        Answer::LeaseRenew(r) => Ok(r.ttl),
        _ => Err(Error::Internal),
    }
}

/// Revokes expired leases until the server stops: each lease's keys go in one revision, and
/// watchers see DELETE events with prev_kv. In a cluster only the leader expires leases, by
/// proposing their revocation; it first gives every lease its full TTL (etcd's `Promote`), so
/// that no lease expires because of an election.
pub async fn expiry_loop(shared: Arc<Shared>) {
    loop {
        // A member alone that grew into a cluster expires leases as a cluster member.
        if let Some(raft) = shared.raft().cloned() {
            return cluster_expiry_loop(shared, raft).await;
        }
        let now = Instant::now();
        let wake =
            shared.lessor.next_deadline().map_or(now + EXPIRY_TICK, |d| d.min(now + EXPIRY_TICK));
        tokio::time::sleep_until(wake.max(now + Duration::from_millis(1))).await;
        let Some(_alone) = shared.alone_writes().await else { continue };
        loop {
            let expired = shared.lessor.expire(Instant::now(), EXPIRY_BATCH);
            let n = expired.len();
            if n > 0 {
                delete_keys(&shared, expired).await;
            }
            for (id, key) in shared.lessor.take_orphans() {
                let rev = shared.store.delete_orphans(id, vec![key]).visible_at;
                shared.store.wait_visible(rev).await;
            }
            if n < EXPIRY_BATCH {
                break;
            }
            tokio::task::yield_now().await;
        }
    }
}

/// In a cluster: once per term this member leads, before it renews or expires any lease,
/// every lease gets its full TTL from now (etcd's lessor `Promote`): followers never kept the
/// deadlines (renewals went to the leader), and no lease may expire because of an election.
pub fn promoted(shared: &Shared) {
    use std::sync::atomic::Ordering::SeqCst;
    let Some(raft) = shared.raft() else { return };
    let role = *raft.role().borrow();
    if !role.is_leader {
        return;
    }
    let last = shared.lease_term.load(SeqCst);
    if last != role.term
        && shared.lease_term.compare_exchange(last, role.term, SeqCst, SeqCst).is_ok()
    {
        shared.lessor.promote();
        tracing::info!(
            leases = shared.lessor.len(),
            term = role.term,
            "lease: this member leads; every lease renewed to its full TTL"
        );
    }
}

async fn cluster_expiry_loop(shared: Arc<Shared>, raft: Arc<crate::raft::RaftNode>) {
    let mut role = raft.role();
    loop {
        // Followers wait to lead.
        let _ = role.wait_for(|r| r.is_leader).await;
        promoted(&shared);
        while role.borrow().is_leader {
            let now = Instant::now();
            let wake = shared
                .lessor
                .next_deadline()
                .map_or(now + EXPIRY_TICK, |d| d.min(now + EXPIRY_TICK));
            tokio::select! {
                _ = tokio::time::sleep_until(wake.max(now + Duration::from_millis(1))) => {}
                _ = role.changed() => continue,
            }
            let expired = shared.lessor.expire(Instant::now(), EXPIRY_BATCH);
            let revokes = expired.into_iter().map(|id| {
                let shared = shared.clone();
                async move {
                    // As root, as etcd's expiry does (`WithRoot`).
                    let revoke = Req::LeaseRevoke(pb::LeaseRevokeRequest { id });
                    let r = apply::propose_as(&shared, revoke, Some(auth::root_header())).await;
                    if let Err(e) = r {
                        // Tried again shortly (or by the next leader).
                        tracing::debug!(lease = id, error = %e, "lease: expiry not proposed");
                        shared.lessor.retry_expiry(id, EXPIRY_TICK);
                    }
                }
            });
            futures_join_all(revokes).await;
        }
        shared.lessor.demote();
    }
}

/// Runs the futures concurrently and waits for all.
async fn futures_join_all<F: std::future::Future<Output = ()> + Send + 'static>(
    futs: impl Iterator<Item = F>,
) {
    let mut set = tokio::task::JoinSet::new();
    for f in futs {
        set.spawn(f);
    }
    while set.join_next().await.is_some() {}
}

/// LeaseTimeToLive from this member's lessor (a member alone, or the cluster's leader),
/// answered once readers see every write it may have seen (a key it lists, or the deletion of
/// the keys of a lease it finds gone).
pub async fn time_to_live(
    shared: &Shared,
    r: pb::LeaseTimeToLiveRequest,
) -> pb::LeaseTimeToLiveResponse {
    promoted(shared);
    let found = shared.lessor.time_to_live(r.id, r.keys);
    shared.store.wait_settled().await;
    let header = shared.header(0);
    match found {
        Some(t) => pb::LeaseTimeToLiveResponse {
            header,
            id: r.id,
            ttl: t.remaining,
            granted_ttl: t.granted_ttl,
            keys: t.keys,
        },
        // etcd answers an unknown lease with TTL -1 rather than an error.
        None => pb::LeaseTimeToLiveResponse { header, id: r.id, ttl: -1, ..Default::default() },
    }
}

type KeepAliveStream =
    Pin<Box<dyn Stream<Item = Result<pb::LeaseKeepAliveResponse, Status>> + Send>>;

/// Every key of these leases may be read by `who` (root may read all): etcd's checks of
/// TimeToLive with keys and of Leases.
fn check_reads(s: &Shared, who: &Option<AuthInfo>, leases: &[i64]) -> Result<(), Error> {
    if !s.auth.is_enabled() {
        return Ok(());
    }
    auth::require(s, who)?;
    if s.auth.check_admin(who.as_ref()).is_ok() {
        return Ok(());
    }
    for id in leases {
        for k in s.lessor.time_to_live(*id, true).iter().flat_map(|t| &t.keys) {
            s.auth.check_range(who.as_ref(), k, b"", false)?;
        }
    }
    Ok(())
}

/// etcd's `checkLeaseRenew`: a keep-alive needs write permission on the lease's keys.
fn check_renew(s: &Shared, who: &Option<AuthInfo>, id: i64) -> Result<(), Error> {
    if !s.auth.is_enabled() {
        return Ok(());
    }
    auth::require(s, who)?;
    if s.auth.check_admin(who.as_ref()).is_ok() {
        return Ok(());
    }
    for k in s.lessor.time_to_live(id, true).iter().flat_map(|t| &t.keys) {
        s.auth.check_range(who.as_ref(), k, b"", true)?;
    }
    Ok(())
}

#[tonic::async_trait]
impl pb::lease_server::Lease for LeaseService {
    async fn lease_grant(
        &self,
        req: Request<pb::LeaseGrantRequest>,
    ) -> Result<Response<pb::LeaseGrantResponse>, Status> {
        // Any authenticated user may grant (etcd's requireAuthInfo), before the proposal.
        let who = auth::authenticated(&self.shared, &req).await?;
        let r = req.into_inner();
        // A member alone stays one until the grant is logged (see `Shared::alone`).
        let _alone = self.shared.alone_writes().await;
        if self.shared.raft().is_some() {
            let s = &self.shared;
            if r.ttl > crate::lease::MAX_TTL {
                return Err(Error::LeaseTtlTooLarge.into());
            }
            apply::quota(s, super::alarm::lease_cost()).await?;
            let id = if r.id == 0 { s.lessor.fresh_id() } else { r.id };
            let grant = pb::LeaseGrantRequest { id, ttl: r.ttl };
            let h = auth::header(&who);
            let Resp::LeaseGrant(mut g) = apply::propose_as(s, Req::LeaseGrant(grant), h).await?
            else {
                return Err(Error::Internal.into());
            };
            s.fill(&mut g.header);
            return Ok(Response::new(g));
        }
        self.shared.alarms.check_space(&self.shared.store, super::alarm::lease_cost())?;
        if self.shared.store.wal().is_some_and(|w| !w.writable()) {
            return Err(crate::error::Error::WalUnavailable.into());
        }
        let (id, ttl) = self.shared.lessor.grant(r.id, r.ttl)?;
        // The revision the grant took effect at (etcd reads it as it applies the grant), not
        // one read after the WAL wait, which other clients' writes may have raised.
        let rev = self.shared.store.current_revision();
        log_grant(&self.shared, id, ttl).await;
        Ok(Response::new(pb::LeaseGrantResponse {
            header: self.shared.header(rev),
            id,
            ttl,
            error: String::new(),
        }))
    }

    async fn lease_revoke(
        &self,
        req: Request<pb::LeaseRevokeRequest>,
    ) -> Result<Response<pb::LeaseRevokeResponse>, Status> {
        // Someone, checked here; whether they may write the lease's keys, at apply.
        let who = auth::authenticated(&self.shared, &req).await?;
        let id = req.into_inner().id;
        let _alone = self.shared.alone_writes().await;
        if self.shared.raft().is_some() {
            let s = &self.shared;
            let r = pb::LeaseRevokeRequest { id };
            let h = auth::header(&who);
            let Resp::LeaseRevoke(mut r) = apply::propose_as(s, Req::LeaseRevoke(r), h).await?
            else {
                return Err(Error::Internal.into());
            };
            s.fill(&mut r.header);
            return Ok(Response::new(r));
        }
        let first = {
            let _gate = self.shared.auth.write_gate();
            auth::check_lease_revoke(&self.shared, who.as_ref(), id)?;
            self.shared.lessor.revoke_first(id)
        };
        if first != Ok(true) {
            // Gone, or its expiry got there first: answered once the lease is gone and readers
            // see its keys' deletion, so that no answer predates what that revocation did.
            if first.is_ok() {
                revoked(&self.shared, id).await;
            }
            self.shared.store.wait_settled().await;
            return Err(Error::LeaseNotFound.into());
        }
        let rev = delete_keys(&self.shared, vec![id]).await;
        Ok(Response::new(pb::LeaseRevokeResponse { header: self.shared.header(rev) }))
    }

    type LeaseKeepAliveStream = KeepAliveStream;

    async fn lease_keep_alive(
        &self,
        req: Request<Streaming<pb::LeaseKeepAliveRequest>>,
    ) -> Result<Response<Self::LeaseKeepAliveStream>, Status> {
        // Read once per stream; checked for each renewal while auth is enabled.
        let creds = auth::credentials(&self.shared, &req);
        let mut inbound = req.into_inner();
        let (tx, rx) = mpsc::channel(16);
        let shared = self.shared.clone();
        tokio::spawn(async move {
            loop {
                let r = match inbound.message().await {
                    Ok(Some(r)) => r,
                    Ok(None) => break,
                    // A request that does not decode or is over the receive limit fails the
                    // stream with its error, as etcd's does, so the client can tell its broken
                    // request from a server that ended the stream. After a reset nobody reads
                    // it; the send then fails harmlessly.
                    Err(status) => {
                        let _ = tx.send(Err(status)).await;
                        break;
                    }
                };
                if shared.auth.is_enabled() {
                    let who = auth::identify(&shared, &creds).await;
                    if let Err(e) = who.and_then(|w| check_renew(&shared, &w, r.id)) {
                        let _ = tx.send(Err(e.into())).await;
                        break;
                    }
                }
                // An unknown lease answers TTL 0, as in etcd; so does an expiring one, but only
                // once its keys are gone (etcd's renew waits for the revocation).
                let ttl = match renew_anywhere(&shared, r.id).await {
                    Ok(ttl) => ttl,
                    Err(e) => {
                        let _ = tx.send(Err(e.into())).await;
                        break;
                    }
                };
                let resp = pb::LeaseKeepAliveResponse { header: shared.header(0), id: r.id, ttl };
                if tx.send(Ok(resp)).await.is_err() {
                    break;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn lease_time_to_live(
        &self,
        req: Request<pb::LeaseTimeToLiveRequest>,
    ) -> Result<Response<pb::LeaseTimeToLiveResponse>, Status> {
        let who = auth::authenticated(&self.shared, &req).await?;
        let r = req.into_inner();
        if r.keys {
            check_reads(&self.shared, &who, &[r.id])?;
        }
        let Some(raft) = self.shared.raft() else {
            return Ok(Response::new(time_to_live(&self.shared, r).await));
        };
        // The leader keeps the deadlines.
        let Answer::LeaseTimeToLive(mut resp) =
            raft.at_leader(Forwarded::LeaseTimeToLive(r)).await?
        else {
            return Err(Error::Internal.into());
        };
        self.shared.fill(&mut resp.header);
        Ok(Response::new(resp))
    }

    async fn lease_leases(
        &self,
        req: Request<pb::LeaseLeasesRequest>,
    ) -> Result<Response<pb::LeaseLeasesResponse>, Status> {
        let who = auth::caller(&self.shared, &req).await?;
        let ids = self.shared.lessor.leases();
        // A lease left out is gone with its keys for every read after the answer.
        self.shared.store.wait_settled().await;
        check_reads(&self.shared, &who, &ids)?;
        let leases = ids.into_iter().map(|id| pb::LeaseStatus { id }).collect();
        Ok(Response::new(pb::LeaseLeasesResponse { header: self.shared.header(0), leases }))
    }
}
