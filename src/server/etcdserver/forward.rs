//! The server's side of the requests a member forwards to its cluster's leader: the leader
//! serves lease renewals and TimeToLive here (it keeps the leases' deadlines; etcd's followers
//! forward renewals to the leader the same way) and membership changes. The road to the leader,
//! with its one deadline and retry policy, and the peer call it takes are Raft's
//! (`RaftNode::at_leader`, `raft::forward`); Raft serves proposals and read indexes itself.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};

use crate::error::Error;
use crate::proto::memetcdpb as mpb;
use crate::raft::{Answer, Forwarded};
use crate::server::etcdserver::lessor;
use crate::server::etcdserver::member::Member;
use crate::server::etcdserver::membership;

/// What the leader answers for the server (registered on the Raft node).
#[derive(Debug)]
struct Leader {
    /// The services' shared state (weak: it owns the Raft node, which owns this).
    shared: Weak<Member>,
}

impl crate::raft::LeaderRequests for Leader {
    fn serve(
        &self,
        request: Forwarded,
    ) -> Pin<Box<dyn Future<Output = Result<Answer, Error>> + Send + '_>> {
        Box::pin(async move {
            let s = self.shared.upgrade().ok_or(Error::Stopped)?;
            Ok(match request {
                Forwarded::LeaseRenew(r) => {
                    Answer::LeaseRenew(mpb::RenewResponse { ttl: lessor::renew(&s, r.id).await })
                }
                Forwarded::LeaseTimeToLive(r) => {
                    Answer::LeaseTimeToLive(lessor::time_to_live(&s, r).await)
                }
                Forwarded::MemberAdd(r) => Answer::MemberAdd(membership::member_add(&s, r).await?),
                Forwarded::MemberRemove(r) => {
                    Answer::MemberRemove(membership::member_remove(&s, r).await?)
                }
                Forwarded::MemberUpdate(r) => {
                    Answer::MemberUpdate(membership::member_update(&s, r).await?)
                }
                Forwarded::MemberPromote(r) => {
                    Answer::MemberPromote(membership::member_promote(&s, r).await?)
                }
                // Raft's own.
                Forwarded::Propose(_) | Forwarded::ReadIndex(_) => return Err(Error::Internal),
            })
        })
    }
}

/// What serves the forwarded requests this member answers as its cluster's leader.
pub fn leader_requests(shared: &Arc<Member>) -> Arc<dyn crate::raft::LeaderRequests> {
    Arc::new(Leader { shared: Arc::downgrade(shared) })
}
