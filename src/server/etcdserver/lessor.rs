//! The member's side of leases (etcd's `EtcdServer` LeaseRenew and LeaseTimeToLive, and its
//! lessor's expiry loop): the deadlines are kept where leases are renewed and expired, on a
//! member alone or on its cluster's leader; other members forward renewals and TimeToLive there
//! (`RaftNode::at_leader`), as etcd's followers do.

use std::sync::Arc;

use tokio::time::{Duration, Instant};

use crate::error::Error;
use crate::lease::Renewal;
use crate::proto::etcdserverpb as pb;
use crate::raft::{Answer, Forwarded};
use crate::server::etcdserver::apply;
use crate::server::etcdserver::member::Member;
use crate::server::etcdserver::submit::{Expiry, submit};

/// The longest the expiry loop sleeps (etcd checks every 500 ms).
const EXPIRY_TICK: Duration = Duration::from_millis(500);

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
pub async fn renew_anywhere(shared: &Member, id: i64) -> Result<i64, Error> {
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

/// LeaseTimeToLive where the deadlines are kept: here, or at the cluster's leader.
pub async fn time_to_live_anywhere(
    shared: &Member,
    r: pb::LeaseTimeToLiveRequest,
) -> Result<pb::LeaseTimeToLiveResponse, Error> {
    let Some(raft) = shared.raft() else { return Ok(time_to_live(shared, r).await) };
    let Answer::LeaseTimeToLive(mut resp) = raft.at_leader(Forwarded::LeaseTimeToLive(r)).await?
    else {
        return Err(Error::Internal);
    };
    shared.fill(&mut resp.header);
    Ok(resp)
}
