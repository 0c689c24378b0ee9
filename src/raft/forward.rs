//! Requests only the leader can serve, which the member a client called forwards to it over the
//! peer service's one `Forward` call: proposals and read indexes, which Raft serves, and lease
//! renewals, TimeToLive and membership changes, which the server serves for it
//! ([`LeaderRequests`]). The road itself, one deadline and one retry policy for all of them, is
//! `RaftNode::forward`.

use std::future::Future;
use std::pin::Pin;

use crate::error::Error;

/// A forwarded request.
pub use crate::proto::memetcdpb::forward_request::Request as Forwarded;
/// Its answer: the member of the same name.
pub use crate::proto::memetcdpb::forward_response::Response as Answer;

/// What the leader answers for the server: the forwarded requests Raft does not serve itself
/// (lease renewals and TimeToLive, since the leader keeps the leases' deadlines; membership
/// changes, with etcd's checks). Registered on the node by the server as it starts it.
pub trait LeaderRequests: Send + Sync + std::fmt::Debug + 'static {
    /// Serves `request` on this member, which leads.
    fn serve(
        &self,
        request: Forwarded,
    ) -> Pin<Box<dyn Future<Output = Result<Answer, Error>> + Send + '_>>;
}

/// etcd's answers for a request that found no leader by its deadline, and for one whose call to
/// the leader failed otherwise (unless the leader answered one of etcd's errors).
pub(super) fn errors(request: &Forwarded) -> (Error, Error) {
    match request {
        // A proposal the leader may have received before it failed may still commit.
        Forwarded::Propose(_) => (Error::Timeout, Error::TimeoutLeaderFail),
        Forwarded::ReadIndex(_) => (Error::Timeout, Error::Timeout),
        // etcd's lease calls wait for a leader until their deadline, then answer "no leader"
        // (`waitLeader`); membership changes answer so too (etcd's would time out).
        _ => (Error::NoLeader, Error::Timeout),
    }
}
