//! The road to the leader: proposals (batched, forwarded from a follower), the requests only
//! the leader serves ([`crate::raft::forward`]), and linearizable read barriers (read index rounds
//! shared by every read waiting, [`crate::raft::read_index`]).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use openraft::error::{ClientWriteError, RaftError};
use openraft::{ReadPolicy, ServerState};
use tokio::time::Instant;
use tokio_stream::StreamExt;

use super::{RaftNode, Result};
use crate::error::Error;
use crate::proto::memetcdpb as pb;
use crate::raft::forward::{Answer, Forwarded, LeaderRequests, LeaderStream};
use crate::raft::types::Proposal;

impl RaftNode {
    /// Proposes an encoded request and returns the log index it was applied at and the
    /// encoded answer. The request goes to the leader in the next batch of this member's
    /// proposals ([`crate::raft::batch`]), and the answer comes back once this member has applied it
    /// too (so a client reading from this member next sees its write). A failure never hides
    /// a commit: an answer is success only once committed.
    pub async fn propose(&self, request: Bytes) -> Result<(u64, Bytes)> {
        self.proposals_pending.fetch_add(1, Ordering::Relaxed);
        let r = self.propose_inner(request).await;
        self.proposals_pending.fetch_sub(1, Ordering::Relaxed);
        if r.is_err() {
            self.proposals_failed.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    async fn propose_inner(&self, request: Bytes) -> Result<(u64, Bytes)> {
        let deadline = Instant::now() + self.request_timeout();
        loop {
            let answer = tokio::time::timeout_at(deadline, self.proposals.propose(request.clone()))
                .await
                .unwrap_or(Err(Error::Timeout));
            match answer {
                Ok((index, response)) => {
                    tokio::time::timeout_at(deadline, self.wait_applied(index))
                        .await
                        .map_err(|_| Error::Timeout)?;
                    return Ok((index, response));
                }
                // Not appended: a leader that lost its leadership as the batch came, while
                // others of the batch were appended (a whole batch refused is sent again by
                // `at_leader`). Safe to send again, to whoever leads now.
                Err(Error::NotLeader) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(Error::NotLeader) => return Err(Error::Timeout),
                Err(e) => return Err(e),
            }
        }
    }

    /// One batch of this member's proposals, through the one road to the leader: the answers,
    /// one per request, in order.
    pub(super) async fn forward_proposals(
        &self,
        requests: Vec<Bytes>,
    ) -> Result<Vec<crate::raft::batch::Answer>> {
        let answer = self.at_leader(Forwarded::Propose(pb::Proposals { requests })).await?;
        let Answer::Propose(proposed) = answer else { return Err(Error::Internal) };
        Ok(proposed
            .answers
            .into_iter()
            .map(|a| match a.error {
                Some(code) => Err(Error::from_code(code).unwrap_or(Error::Internal)),
                None => Ok((a.index, a.response)),
            })
            .collect())
    }

    /// Registers the server's side of the forwarded requests (see [`LeaderRequests`]); once.
    pub fn serve_leader_requests(&self, serve: Arc<dyn LeaderRequests>) {
        let _ = self.leader_requests.set(serve);
    }

    /// The one road to the leader, for every request only the leader can serve: runs
    /// `request` on this member if it leads, else forwards it to the leader, within the request
    /// timeout (etcd's). Without a leader the request waits for one, as etcd's do, and fails by
    /// the deadline as etcd's do (see [`crate::raft::forward::errors`]; "etcdserver: no leader" for a
    /// proposal is for clients that asked to require one). A request that was not delivered
    /// (the leader does not lead, or could not be reached at all) is sent again to whoever
    /// leads; any other failure of a call to the leader is answered with the leader's error if
    /// it is one of etcd's, else as `errors` says. A call whose leader another member replaced
    /// meanwhile ends at once: sent again to the new leader if repeating it changes nothing
    /// ([`crate::raft::forward::resendable`]), else answered as a failed call (a proposal, which
    /// may still commit, is never sent twice). A proposal the leader answered is answered
    /// here once this member has applied it too, as etcd's followers answer from their own
    /// apply (so a client reading from this member next sees its write).
    pub async fn at_leader(&self, request: Forwarded) -> Result<Answer> {
        let deadline = Instant::now() + self.request_timeout();
        let (no_leader, failed) = crate::raft::forward::errors(&request);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let leader = match self.leader() {
                Some(l) => l,
                None => match self.wait_leader(left).await {
                    Some(l) => l,
                    None => return Err(no_leader),
                },
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout);
            }
            if leader == self.id {
                match tokio::time::timeout(left, self.serve_forwarded(request.clone())).await {
                    Err(_) => return Err(Error::Timeout),
                    Ok(Err(Error::NotLeader)) => {
                        // Not appended: safe to send again, to whoever leads now.
                        self.wait_role_change(leader, deadline).await;
                        continue;
                    }
                    Ok(r) => return r,
                }
            }
            let Some(stream) = self.leader_stream(leader) else {
                return Err(Error::NoLeader);
            };
            // A call to a leader that another member has replaced ends at once, as etcd's
            // follower stops forwarding to a leader it lost: a request that changes nothing
            // twice goes to the new leader, any other ends as a proposal caught in a leader's
            // failure does in etcd (it may still commit). No request waits behind it.
            let answered = tokio::select! {
                answered = stream.call(request.clone(), left) => answered,
                () = self.replaced(leader) => {
                    if crate::raft::forward::resendable(&request) {
                        continue;
                    }
                    return Err(failed);
                }
            };
            match answered {
                Ok(v) => return Ok(v),
                Err(s)
                    if Error::from_message(s.message()) == Some(Error::NotLeader)
                        || not_delivered(&s) =>
                {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    self.wait_role_change(leader, deadline).await;
                }
                Err(s) if s.code() == tonic::Code::DeadlineExceeded => {
                    return Err(Error::from_message(s.message()).unwrap_or(Error::Timeout));
                }
                Err(s) => return Err(Error::from_message(s.message()).unwrap_or(failed)),
            }
        }
    }

    /// The stream to `leader`, opened if this member has none to it that still works.
    fn leader_stream(&self, leader: u64) -> Option<Arc<LeaderStream>> {
        let urls = self.peer_urls_of(leader)?;
        let mut g = self.leader_stream.lock();
        if let Some((id, u, s)) = g.as_ref()
            && *id == leader
            && *u == urls
            && !s.ended()
        {
            return Some(s.clone());
        }
        let stream = Arc::new(LeaderStream::open(self.peers.clone(), urls.clone()));
        *g = Some((leader, urls, stream.clone()));
        Some(stream)
    }

    /// Serves a request a follower forwarded. Its read index joins this leader's own shared
    /// round (see [`crate::raft::read_index`]): one quorum confirmation then serves this member's
    /// reads and every follower's waiting at that moment, where each follower's call used to
    /// cost one of its own. The round starts after the call arrived, as a round of its own
    /// would; the round itself confirms through [`RaftNode::serve_forwarded`].
    pub async fn serve_peer_forward(&self, request: Forwarded) -> Result<Answer> {
        match request {
            Forwarded::ReadIndex(_) if self.is_leader() => {
                Ok(Answer::ReadIndex(pb::ReadIndexResponse { index: self.read_index().await? }))
            }
            other => self.serve_forwarded(other).await,
        }
    }

    /// Serves a forwarded request on this member, which must lead (`NotLeader`: it does not,
    /// and did nothing): the request of a follower, or of this member's own client.
    pub async fn serve_forwarded(&self, request: Forwarded) -> Result<Answer> {
        match request {
            Forwarded::Propose(p) => Ok(Answer::Propose(self.propose_local(p.requests).await?)),
            Forwarded::ReadIndex(_) => {
                let index = self.read_index_local().await?;
                Ok(Answer::ReadIndex(pb::ReadIndexResponse { index }))
            }
            other => {
                if !self.leads_confirmed().await {
                    return Err(Error::NotLeader);
                }
                let Some(server) = self.leader_requests.get() else {
                    tracing::error!("raft: a forwarded request before the server registered");
                    return Err(Error::Internal);
                };
                server.serve(other).await
            }
        }
    }

    /// Whether this member leads by the role's rule (a quorum heard from within an election
    /// timeout, so that a deposed leader renews no lease). One that Raft has just elected
    /// waits for its first quorum's answers, at most an election timeout, rather than turning
    /// a request away: the followers already forward to it, and one turned away would wait
    /// for another leader.
    async fn leads_confirmed(&self) -> bool {
        if self.is_leader() {
            return true;
        }
        if self.with_metrics(|m| m.state) != ServerState::Leader {
            return false;
        }
        let mut rx = self.role.clone();
        let confirmed = tokio::time::timeout(self.opts.election, rx.wait_for(|r| r.is_leader));
        matches!(confirmed.await, Ok(Ok(_)))
    }

    /// Waits (until `deadline`, or a little) for the leader to be someone other than `old`.
    async fn wait_role_change(&self, old: u64, deadline: Instant) {
        let until = deadline.min(Instant::now() + self.opts.election);
        let _ = tokio::time::timeout_at(until, self.replaced(old)).await;
    }

    /// Resolves once this member knows another leader than `old` (itself, maybe); never if the
    /// node stops first.
    async fn replaced(&self, old: u64) {
        let mut rx = self.role.clone();
        if rx.wait_for(|r| r.leader.is_some_and(|l| l != old)).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Proposes a batch on this member, which must lead, as one message to Raft, and answers
    /// each request once applied. `NotLeader` (for the whole batch, or for one request): not
    /// appended.
    async fn propose_local(&self, requests: Vec<Bytes>) -> Result<pb::Proposed> {
        let n = requests.len();
        let failed = |e: Error| pb::ProposeResponse { error: Some(e.code()), ..Default::default() };
        let mut results =
            match self.raft.client_write_many(requests.into_iter().map(Proposal)).await {
                Ok(s) => s,
                Err(_) => return Err(Error::Stopped),
            };
        let mut answers = Vec::with_capacity(n);
        while let Some(r) = results.next().await {
            answers.push(match r {
                Ok(Ok(w)) => {
                    pb::ProposeResponse { index: w.log_id.index, response: w.response, error: None }
                }
                Ok(Err(ClientWriteError::ForwardToLeader(_))) => failed(Error::NotLeader),
                Ok(Err(ClientWriteError::LogEntryDiscarded(_))) => failed(Error::TimeoutLeaderFail),
                Ok(Err(e)) => {
                    tracing::error!(error = %e, "raft: proposal failed");
                    failed(Error::Internal)
                }
                // Raft stopped: what it did with the rest is unknown.
                Err(_) => break,
            });
        }
        answers.resize_with(n, || failed(Error::TimeoutLeaderFail));
        if answers.iter().all(|a| a.error == Some(Error::NotLeader.code())) {
            return Err(Error::NotLeader);
        }
        Ok(pb::Proposed { answers })
    }

    /// The index a linearizable read must wait for: the next shared round's
    /// ([`crate::raft::read_index`]), within the request timeout.
    pub async fn read_index(&self) -> Result<u64> {
        tokio::time::timeout(self.request_timeout(), self.reads.read_index())
            .await
            .unwrap_or(Err(Error::Timeout))
    }

    /// One read index, confirmed with a quorum by the leader: a shared round's.
    pub(super) async fn confirm_read_index(&self) -> Result<u64> {
        match self.at_leader(Forwarded::ReadIndex(pb::Empty {})).await? {
            Answer::ReadIndex(r) => Ok(r.index),
            _ => Err(Error::Internal),
        }
    }

    /// On the leader: the read index, once a quorum confirmed this member still leads.
    pub async fn read_index_local(&self) -> Result<u64> {
        match self.raft.get_read_linearizer(ReadPolicy::ReadIndex).await {
            Ok(l) => Ok(l.read_log_id().index()),
            Err(RaftError::APIError(openraft::error::LinearizableReadError::ForwardToLeader(
                _,
            ))) => Err(Error::NotLeader),
            Err(RaftError::APIError(_)) => Err(Error::Timeout),
            Err(RaftError::Fatal(_)) => Err(Error::Stopped),
        }
    }

    /// A linearizable read barrier: once it returns, this member's applied state holds every
    /// write acknowledged before it was called.
    pub async fn linearizable(&self) -> Result<()> {
        let index = self.read_index().await?;
        let deadline = Instant::now() + self.request_timeout();
        tokio::time::timeout_at(deadline, self.wait_applied(index))
            .await
            .map_err(|_| Error::Timeout)
    }
}

/// Whether a call to the leader was certainly not delivered (it never left this member, see
/// `forward::NOT_SENT`): safe to send again, a proposal too.
fn not_delivered(s: &tonic::Status) -> bool {
    s.code() == tonic::Code::Unavailable && s.message() == crate::raft::forward::NOT_SENT
}
