//! What this member knows of its cluster: Raft's status for Maintenance.Status and the
//! metrics, the membership, and its peers' progress (whether a learner is in sync, whether a
//! quorum reaches this member).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use super::{RaftNode, matched_in};
use crate::raft::types::TypeConfig;

/// A member's Raft status (Maintenance.Status's raft fields).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaftStatus {
    /// This member's id.
    pub id: u64,
    /// The index of the last entry in its log.
    pub last_index: u64,
    /// The index of the last entry it knows committed.
    pub commit: u64,
    pub applied_index: u64,
    pub term: u64,
    /// The member it voted for in this term (0: none).
    pub vote: u64,
    /// The leader it knows (0: none).
    pub leader: u64,
    pub is_learner: bool,
    /// Its role by etcd's raft's names: `StateLeader`, `StateCandidate`, `StateFollower` (a
    /// learner too).
    pub state: &'static str,
    /// On the leader: (member, index of the last entry it is known to hold) for every member,
    /// itself included (etcd's progress); elsewhere empty.
    pub progress: Vec<(u64, u64)>,
}

impl RaftNode {
    /// Whether learner `id` has replicated at least `fraction` of the leader's log (etcd
    /// promotes a learner only at 90%).
    pub fn learner_in_sync(&self, id: u64, fraction: f64) -> bool {
        let (leader_last, matched) =
            self.with_metrics(|m| (m.last_log_index.unwrap_or(0), matched_in(m, id)));
        matched as f64 >= leader_last as f64 * fraction && (matched > 0 || leader_last == 0)
    }

    /// Since when member `id` has answered every probe of this member ([`crate::raft::rafthttp::probing`];
    /// `None`: unreachable, or not probed yet; this member itself: always).
    pub fn active_since(&self, id: u64) -> Option<std::time::Instant> {
        if id == self.id {
            return Some(std::time::Instant::now() - Duration::from_secs(3600));
        }
        *self.peers.stats.of(id).active_since.lock()
    }

    /// Whether a quorum of voters reaches this member: waits until enough voters (this member
    /// counting for itself) have each sent it two probes or appends since it was called, until
    /// `deadline`. Every member probes every other once per heartbeat (a leader appends
    /// instead), and sends its next probe only once the last was answered
    /// ([`crate::raft::rafthttp::probing`]), so the second proves that the link carried a probe,
    /// its answer and another probe after this began (one probe alone could have been on its
    /// way before); a leader's appends stop a few requests after its follower's answers do. A
    /// member whose incoming peer traffic is cut
    /// still reaches the others with its own calls, and may still confirm a read index for a
    /// while (see `network`); etcd's member in that state cannot, as its messages travel on
    /// connections its peers dial. The health checks ask this first.
    pub async fn reached_by_quorum(&self, deadline: Instant) -> bool {
        let (voters, _) = self.membership();
        let probes = |id: u64| self.peers.stats.of(id).probes.load(Ordering::Relaxed);
        let before: BTreeMap<u64, u64> = voters.iter().map(|&id| (id, probes(id))).collect();
        loop {
            let reached =
                before.iter().filter(|&(&id, &n)| id == self.id || probes(id) >= n + 2).count();
            if reached > before.len() / 2 {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Members the leader heard from within `within` (empty on a follower).
    pub fn recently_heard(&self, within: Duration) -> BTreeSet<u64> {
        use openraft::Instant as _;
        self.with_metrics(|m| {
            m.heartbeat
                .as_ref()
                .map(|h| {
                    h.iter()
                        .filter(|(_, t)| t.as_ref().is_some_and(|t| t.elapsed() <= within))
                        .map(|(id, _)| *id)
                        .collect()
                })
                .unwrap_or_default()
        })
    }

    /// How far member `id` has replicated this leader's log (0 if unknown).
    pub(super) fn matched(&self, id: u64) -> u64 {
        self.with_metrics(|m| matched_in(m, id))
    }

    /// The membership this member knows: voters, learners and every node's peer URLs.
    pub fn membership(&self) -> (BTreeSet<u64>, BTreeMap<u64, Vec<String>>) {
        self.with_metrics(|m| {
            let m = m.membership_config.membership();
            let voters = m.voter_ids().collect();
            let nodes = m.nodes().map(|(id, n)| (*id, n.peer_urls.clone())).collect();
            (voters, nodes)
        })
    }

    /// Raft's status for Maintenance.Status and the metrics.
    pub fn status(&self) -> RaftStatus {
        self.with_metrics(|m| self.status_of(m))
    }

    fn status_of(&self, m: &openraft::RaftMetrics<TypeConfig>) -> RaftStatus {
        let last_index = m.last_log_index.unwrap_or(0);
        RaftStatus {
            id: self.id,
            last_index,
            commit: m.cluster_committed.map_or(0, |l| l.index),
            applied_index: m.last_applied.map_or(0, |l| l.index),
            term: m.current_term,
            vote: m.vote.leader_id.voted_for,
            leader: m.current_leader.unwrap_or(0),
            is_learner: !m.membership_config.membership().voter_ids().any(|v| v == self.id),
            state: match m.state {
                openraft::ServerState::Leader => "StateLeader",
                openraft::ServerState::Candidate => "StateCandidate",
                _ => "StateFollower",
            },
            progress: m.replication.as_ref().map_or_else(Vec::new, |r| {
                r.iter()
                    .map(|(&id, l)| {
                        let held =
                            if id == self.id { last_index } else { l.map_or(0, |l| l.index) };
                        (id, held)
                    })
                    .collect()
            }),
        }
    }
}
