//! Membership changes on the leader (etcd's configuration changes: add, promote, remove,
//! update a member, re-admit one that lost its state) and leadership transfer, answered in
//! etcd's terms and at etcd's point.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use openraft::error::{ClientWriteError, RaftError};
use openraft::type_config::alias::StoredMembershipOf;
use openraft::{ChangeMembers, EntryPayload, Membership, Precondition};
use tokio::time::Instant;

use super::{RaftNode, Result, matched_in};
use crate::error::Error;
use crate::raft::types::{PeerNode, TypeConfig};

impl RaftNode {
    /// On the leader: a member that came back without its state (`--wal-mode none`) holds
    /// the log again before it votes. It stays a voter meanwhile, as openraft's own recipe for
    /// a follower whose data was removed has it (no membership change): it votes in no election
    /// until this call returns (its own rule), and its acknowledgements are true ones, each
    /// implying the whole log before it. Demoting it instead made it refuse its clients' writes
    /// ("rpc not supported for learner") for a while after every start of a member without
    /// state, a founding member that was merely late included, since a member without state
    /// cannot tell the two apart.
    pub async fn readmit_member(&self, id: u64) -> Result<()> {
        // The member's log went back to nothing: openraft must accept that from it once,
        // rather than resending from where it was before (forever).
        let _ = self.raft.trigger().allow_next_revert(&id, true).await;
        // The target is an entry written after the member asked: one it can only have
        // acknowledged in this life, so holding it means holding everything before it, every
        // entry it acknowledged before it lost its state included. (The leader's last entry
        // would not do: the leader may still count the acknowledgements of the member's
        // previous life.) A membership entry that changes nothing is such an entry.
        let deadline = Instant::now() + self.request_timeout();
        let observed = self.shown(deadline, 0).await?;
        let guard =
            Precondition::LastMembershipLogId { last_membership_log_id: *observed.log_id() };
        let same = observed.membership().clone();
        let written =
            bounded(deadline, self.raft.append_membership(same, EntryPayload::Blank, [guard]))
                .await?;
        let target = written.log_id.index;
        let deadline = Instant::now() + Duration::from_secs(600);
        while self.matched(id) < target {
            if Instant::now() > deadline {
                return Err(Error::Timeout);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// etcd's `TransferLeadership` as it stops: a leader with other voters hands over to the
    /// one it has been connected to longest and waits (at most a request timeout) until that
    /// one leads, so the others go on one term later rather than after an election.
    pub async fn hand_over(&self) {
        if !self.is_leader() {
            return;
        }
        let (voters, _) = self.membership();
        let to = voters
            .iter()
            .filter(|v| **v != self.id)
            .filter_map(|v| self.active_since(*v).map(|t| (t, *v)))
            .min()
            .map(|(_, v)| v);
        let Some(to) = to else {
            tracing::info!("raft: skipped leadership transfer: no other voter is connected");
            return;
        };
        tracing::info!(to = format!("{to:x}"), "raft: leadership transfer starting");
        match self.transfer_leader(to).await {
            Ok(()) => tracing::info!(to = format!("{to:x}"), "raft: leadership transfer finished"),
            Err(e) => tracing::warn!(error = %e, "raft: leadership transfer failed"),
        }
    }

    /// Adds a member (on the leader). A voter counts toward the quorum at once, as in etcd:
    /// a cluster of one adds its second member at once, and waits for it for everything
    /// after (see [`Self::change_voters`]).
    pub async fn add_member(&self, id: u64, peer_urls: Vec<String>, learner: bool) -> Result<()> {
        let deadline = Instant::now() + self.request_timeout();
        let add = self.raft.add_learner(id, PeerNode { peer_urls }, false);
        let added = bounded(deadline, add).await?;
        if learner {
            return self.shown(deadline, added.log_id.index).await.map(drop);
        }
        // Built on the learner's entry (else the new voter is not among the nodes).
        self.change_voters(deadline, added.log_id.index, |voters, _| {
            voters.insert(id);
        })
        .await
    }

    /// Promotes a learner to voter (on the leader).
    pub async fn promote_member(&self, id: u64) -> Result<()> {
        let deadline = Instant::now() + self.request_timeout();
        self.change_voters(deadline, 0, |voters, _| {
            voters.insert(id);
        })
        .await
    }

    /// Removes a member (on the leader).
    pub async fn remove_member(&self, id: u64) -> Result<()> {
        let deadline = Instant::now() + self.request_timeout();
        if self.membership().0.contains(&id) {
            return self
                .change_voters(deadline, 0, |voters, nodes| {
                    voters.remove(&id);
                    nodes.remove(&id);
                })
                .await;
        }
        let change = ChangeMembers::RemoveNodes(BTreeSet::from([id]));
        let removed = bounded(deadline, self.raft.change_membership(change, false)).await?;
        self.shown(deadline, removed.log_id.index).await.map(drop)
    }

    /// Changes a member's peer URLs (on the leader). The voters stay: one entry, as any
    /// change that moves no voter.
    pub async fn update_member(&self, id: u64, peer_urls: Vec<String>) -> Result<()> {
        let deadline = Instant::now() + self.request_timeout();
        let nodes = BTreeMap::from([(id, PeerNode { peer_urls })]);
        let change = ChangeMembers::SetNodes(nodes);
        let updated = bounded(deadline, self.raft.change_membership(change, false)).await?;
        self.shown(deadline, updated.log_id.index).await.map(drop)
    }

    /// The membership in openraft's metrics once they show the membership entry at `index` or
    /// a later one. openraft answers for a membership entry before it may publish the metrics
    /// that show it, and every answer to a change lists the members from those metrics: read
    /// earlier, the list a client gets back misses the change it was told succeeded.
    async fn shown(&self, deadline: Instant, index: u64) -> Result<StoredMembershipOf<TypeConfig>> {
        let mut metrics = self.raft.metrics();
        loop {
            let m = metrics.borrow_watched().membership_config.clone();
            if m.log_id().as_ref().map_or(0, |l| l.index) >= index {
                return Ok(m.as_ref().clone());
            }
            match tokio::time::timeout_at(deadline, metrics.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err(Error::Stopped),
                Err(_) => return Err(Error::Timeout),
            }
        }
    }

    /// Changes the voters by one, as etcd's configuration changes do, and answers at etcd's
    /// point, by `deadline` ("request timed out", as etcd's proposals).
    ///
    /// etcd commits a configuration change with a quorum of the configuration before it: a
    /// cluster of one adds a second voter at once, though the new member has not started.
    /// openraft commits a configuration with a quorum of the configuration itself, which there
    /// is the new member too. So the change goes in as one entry (the single-server change, no
    /// joint configuration whose flattening would be left to this call), runs to its end
    /// whatever happens to this call, and is answered once a quorum of the previous voters
    /// holds it: from then on every leader to come has it (a candidate without it cannot win
    /// a quorum of the previous voters), which is what etcd's commit promises. openraft
    /// commits it as soon as the new configuration's quorum answers.
    ///
    /// The change is computed from the membership in openraft's metrics, once they show the
    /// membership entry at `after` or a later one: openraft answers for an entry (the learner
    /// `add_member` just added) before it may publish the metrics that show it.
    async fn change_voters(
        &self,
        deadline: Instant,
        after: u64,
        change: impl FnOnce(&mut BTreeSet<u64>, &mut BTreeMap<u64, PeerNode>),
    ) -> Result<()> {
        let observed = self.shown(deadline, after).await?;
        let mut metrics = self.raft.metrics();
        let old: BTreeSet<u64> = observed.membership().voter_ids().collect();
        let mut voters = old.clone();
        let mut nodes: BTreeMap<u64, PeerNode> =
            observed.membership().nodes().map(|(id, n)| (*id, n.clone())).collect();
        change(&mut voters, &mut nodes);
        let proposed = Membership::new(vec![voters.clone()], nodes).map_err(|e| {
            tracing::error!(error = %e, "raft: membership to propose is not valid");
            Error::Internal
        })?;
        // Proposed only on the membership the change was computed from.
        let guard =
            Precondition::LastMembershipLogId { last_membership_log_id: *observed.log_id() };
        let raft = self.raft.clone();
        let mut appended = tokio::spawn(async move {
            raft.append_membership(proposed, EntryPayload::Blank, [guard]).await
        });
        loop {
            tokio::select! {
                done = &mut appended => {
                    let appended = match done {
                        Ok(r) => r.map_err(write_error)?,
                        Err(_) => return Err(Error::Stopped),
                    };
                    return self.shown(deadline, appended.log_id.index).await.map(drop);
                }
                _ = tokio::time::sleep_until(deadline) => return Err(Error::Timeout),
                _ = metrics.changed() => {}
            }
            let m = metrics.borrow_watched().clone();
            let current = &m.membership_config;
            if current.membership().voter_ids().collect::<BTreeSet<_>>() != voters {
                continue;
            }
            let Some(at) = current.log_id().as_ref().map(|l| l.index) else { continue };
            let holding = old.iter().filter(|v| matched_in(&m, **v) >= at).count();
            if holding > old.len() / 2 {
                return Ok(());
            }
        }
    }

    /// Hands leadership to `to` (on the leader) and waits until it leads.
    pub async fn transfer_leader(&self, to: u64) -> Result<()> {
        self.raft.trigger().transfer_leader(to).await.map_err(|_| Error::Stopped)?;
        let mut rx = self.role.clone();
        let wait = rx.wait_for(|r| r.leader == Some(to));
        match tokio::time::timeout(self.request_timeout(), wait).await {
            Ok(Ok(_)) => Ok(()),
            _ => Err(Error::Timeout),
        }
    }
}

/// A membership change's outcome by `deadline`, in etcd's terms.
async fn bounded<T>(
    deadline: Instant,
    change: impl std::future::Future<
        Output = std::result::Result<T, RaftError<TypeConfig, ClientWriteError<TypeConfig>>>,
    >,
) -> Result<T> {
    match tokio::time::timeout_at(deadline, change).await {
        Ok(r) => r.map_err(write_error),
        Err(_) => Err(Error::Timeout),
    }
}

/// A membership change's error, in etcd's terms.
fn write_error(e: RaftError<TypeConfig, ClientWriteError<TypeConfig>>) -> Error {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(_)) => Error::NotLeader,
        RaftError::APIError(ClientWriteError::LogEntryDiscarded(_)) => Error::TimeoutLeaderFail,
        RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => {
            tracing::warn!(error = %e, "raft: membership change refused");
            Error::UnhealthyCluster
        }
        RaftError::APIError(e) => {
            tracing::error!(error = %e, "raft: membership change failed");
            Error::Internal
        }
        RaftError::Fatal(_) => Error::Stopped,
    }
}
