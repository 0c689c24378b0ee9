//! The Lease service, and the expiry loop that revokes leases whose TTL ran out.

use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::time::{Duration, Instant};
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::member::Member;
use super::submit::{Expiry, submit};
use super::{apply, auth};
use crate::auth::AuthInfo;
use crate::error::Error;
use crate::lease::Renewal;
use crate::proto::etcdserverpb as pb;
use crate::raft::{Answer, Forwarded};

/// The longest the expiry loop sleeps (etcd checks every 500 ms).
const EXPIRY_TICK: Duration = Duration::from_millis(500);

#[derive(Debug)]
pub struct LeaseService {
    shared: Arc<Member>,
}

impl LeaseService {
    pub fn new(shared: Arc<Member>) -> Self {
        Self { shared }
    }
}

/// Renews a lease on this member (which holds the deadlines: a member alone, or a cluster's
/// leader) and returns the TTL; 0 for an unknown lease, and for an expiring one once its keys
/// are gone (etcd's renew waits for the revocation).
pub async fn renew(shared: &Member, id: i64) -> i64 {
    promoted(shared);
    match shared.lessor.renew(id) {
        Ok(Renewal::Renewed(ttl)) => return ttl,
        Ok(Renewal::Expiring) => shared.lessor.wait_gone(id).await,
        Err(_) => {}
    }
    shared.store.wait_settled().await;
    0
}

/// Renews a lease where the deadlines are kept: here (a member alone), or at the cluster's
/// leader (`RaftNode::at_leader`).
async fn renew_anywhere(shared: &Member, id: i64) -> Result<i64, Error> {
    let Some(raft) = shared.raft() else { return Ok(renew(shared, id).await) };
    match raft.at_leader(Forwarded::LeaseRenew(pb::LeaseKeepAliveRequest { id })).await? {
        Answer::LeaseRenew(r) => Ok(r.ttl),
        _ => Err(Error::Internal),
    }
}

/// Revokes expired leases until the server stops ([`Expiry`]). In a cluster only the leader
/// expires leases; it first gives every lease its full TTL (etcd's `Promote`), so that no
/// lease expires because of an election, and a member that stops leading forgets which
/// leases it had started to expire.
pub async fn expiry_loop(shared: Arc<Member>) {
    // This member's role, once it is a cluster member (from the start, or once it has grown).
    let mut role = None;
    loop {
        if role.is_none() {
            role = shared.raft().map(|r| r.role());
        }
        if let Some(role) = role.as_mut() {
            if !role.borrow_and_update().is_leader {
                shared.lessor.demote();
                // Followers wait to lead (the node stopped: nothing more to expire).
                if role.wait_for(|r| r.is_leader).await.is_err() {
                    return;
                }
            }
            promoted(&shared);
        }
        let now = Instant::now();
        let wake =
            shared.lessor.next_deadline().map_or(now + EXPIRY_TICK, |d| d.min(now + EXPIRY_TICK));
        let sleep = tokio::time::sleep_until(wake.max(now + Duration::from_millis(1)));
        match role.as_mut() {
            Some(role) => tokio::select! {
                _ = sleep => {}
                changed = role.changed() => match changed {
                    Ok(()) => continue,
                    Err(_) => return,
                },
            },
            None => sleep.await,
        }
        let expiry = Expiry { retry_after: EXPIRY_TICK };
        let _ = submit(&shared, &apply::root(), expiry).await;
    }
}

/// In a cluster: once per term this member leads, before it renews or expires any lease,
/// every lease gets its full TTL from now (etcd's lessor `Promote`): followers never kept the
/// deadlines (renewals went to the leader), and no lease may expire because of an election.
pub fn promoted(shared: &Member) {
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

/// LeaseTimeToLive from this member's lessor (a member alone, or the cluster's leader),
/// answered once readers see every write it may have seen (a key it lists, or the deletion of
/// the keys of a lease it finds gone).
pub async fn time_to_live(
    shared: &Member,
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
fn check_reads(s: &Member, who: &Option<AuthInfo>, leases: &[i64]) -> Result<(), Error> {
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
fn check_renew(s: &Member, who: &Option<AuthInfo>, id: i64) -> Result<(), Error> {
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
        // Any authenticated user may grant (etcd's requireAuthInfo), before the change.
        let who = auth::authenticated(&self.shared, &req).await?;
        let mut g = submit(&self.shared, &who, req.into_inner()).await?;
        self.shared.fill(&mut g.header);
        Ok(Response::new(g))
    }

    async fn lease_revoke(
        &self,
        req: Request<pb::LeaseRevokeRequest>,
    ) -> Result<Response<pb::LeaseRevokeResponse>, Status> {
        // Someone, checked here; whether they may write the lease's keys, where it is applied.
        let who = auth::authenticated(&self.shared, &req).await?;
        let mut r = submit(&self.shared, &who, req.into_inner()).await?;
        self.shared.fill(&mut r.header);
        Ok(Response::new(r))
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
