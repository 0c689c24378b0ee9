//! The node's watch of openraft's metrics: leader, term and role (etcd's CheckQuorum rules for
//! when a member counts as having no leader), releasing log entries held in memory, and
//! finding out that this member, or a peer, was removed from the cluster.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use openraft::ServerState;
use openraft::async_runtime::WatchReceiver;
use tokio::sync::watch;
use tokio::time::Instant;

use super::{RaftNode, Role};
use crate::proto::memetcdpb as pb;
use crate::raft::types::TypeConfig;

impl RaftNode {
    /// Follows openraft's metrics: leader, term and role changes.
    pub(super) async fn watch_metrics(self: Arc<Self>, tx: watch::Sender<Role>) {
        use openraft::Instant as _;
        let mut rx = self.raft.metrics();
        let mut last_leader = None;
        // etcd's CheckQuorum: a leader that has not heard from a quorum within the election
        // timeout, and a follower that has not heard from its leader as long, count as having
        // no leader (etcd's would have stepped down, or started a pre-vote), so `has_leader`,
        // `/health`, `/livez`, `/readyz` and leader-requiring watches say so. openraft itself
        // already refuses writes then.
        let lease = self.opts.election;
        // Whether this member was ever in the applied membership, and since when it has had no
        // leader: how it finds out it was removed (see `check_removed`).
        let mut was_member = false;
        let mut leaderless_since: Option<Instant> = None;
        // The members of the membership last seen applied, to find who left it.
        let mut applied_nodes: Option<BTreeSet<u64>> = None;
        // The membership as last seen (its log id, and whether it was applied), so the sets
        // below are built when it changes, not on every change of openraft's metrics (the
        // leader's change with every acknowledgement).
        let mut seen_config = None;
        let mut membership = MembershipSeen::default();
        // Without a leader (or a lease to run out) the watch looks again every heartbeat: a
        // member that lost its leader asks its peers whether it was removed.
        let every = self.opts.heartbeat.max(Duration::from_millis(50));
        // The log's entries up to here are no longer held in memory (see `held_upto`).
        let mut released = 0;
        loop {
            let (role, upto, config_changed, lease_left) = {
                let m = rx.borrow_and_update();
                let is_leader = m.state == ServerState::Leader;
                // How long the lease has left: nothing changes the role before then but a
                // change of the metrics, which wakes the watch anyway. An idle member would
                // otherwise look every heartbeat (ten wake-ups a second for nothing).
                // A leader alone holds no lease: it has no quorum to hear from.
                let since = if !is_leader {
                    Some(self.since_leader_heard())
                } else if m.membership_config.membership().voter_ids().count() > 1 {
                    Some(m.last_quorum_acked.as_ref().map(|t| t.elapsed()))
                } else {
                    None
                };
                let cut_off = since.is_some_and(|s| s.is_none_or(|d| d > lease));
                let lease_left = since.flatten().map(|d| lease.saturating_sub(d));
                let role = Role {
                    leader: if cut_off { None } else { m.current_leader },
                    term: m.current_term,
                    is_leader: is_leader && !cut_off,
                    is_learner: m.state == ServerState::Learner
                        && m.membership_config.membership().get_node(&m.id).is_some(),
                };
                let config = &m.membership_config;
                let applied =
                    config.log_id().as_ref().is_some_and(|l| Some(l) <= m.last_applied.as_ref());
                let key = (*config.log_id(), applied);
                let config_changed = seen_config.as_ref() != Some(&key);
                if config_changed {
                    membership = MembershipSeen {
                        nodes: config.membership().nodes().map(|(id, _)| *id).collect(),
                        named: config.membership().get_node(&m.id).is_some(),
                        applied,
                    };
                    seen_config = Some(key);
                }
                (role, held_upto(&m), config_changed, lease_left)
            };
            // After the metrics borrow ends: openraft waits for it to publish, and the log's
            // lock may be busy with an append.
            if upto > released {
                self.log.release(upto);
                released = upto;
            }
            self.term.store(role.term, Ordering::Relaxed);
            if config_changed {
                self.note_removed_members(&membership, &mut applied_nodes);
            }
            self.check_removed(
                role.leader.is_some(),
                &membership,
                &mut was_member,
                &mut leaderless_since,
            );
            if role.leader != last_leader {
                if role.leader.is_some() {
                    self.leader_changes.fetch_add(1, Ordering::Relaxed);
                }
                tracing::info!(
                    leader = role.leader.map(|l| format!("{l:x}")),
                    term = role.term,
                    "raft: leader changed"
                );
                last_leader = role.leader;
            }
            tx.send_if_modified(|r| {
                let changed = *r != role;
                *r = role;
                changed
            });
            let wait = match (role.leader, lease_left) {
                // Just past the lease's end, so that it has ended when the watch looks.
                (Some(_), Some(left)) => left + Duration::from_millis(1),
                _ => every,
            };
            tokio::select! {
                changed = rx.changed() => if changed.is_err() {
                    return;
                },
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Records the members that left the applied membership since `last` was seen (etcd's
    /// removed members: only an applied removal counts, as one that is not committed yet may
    /// be undone by the next leader).
    fn note_removed_members(&self, now: &MembershipSeen, last: &mut Option<BTreeSet<u64>>) {
        if !now.applied {
            return;
        }
        if let Some(before) = last.as_ref() {
            let gone: Vec<u64> =
                before.difference(&now.nodes).copied().filter(|id| *id != self.id).collect();
            if !gone.is_empty() {
                self.removed_members.lock().extend(gone);
            }
        }
        *last = Some(now.nodes.clone());
    }

    /// Whether member `id` was seen leaving this cluster (see [`Self::note_removed_members`]).
    pub fn is_member_removed(&self, id: u64) -> bool {
        self.removed_members.lock().contains(&id)
    }

    /// Finds out whether this member was removed from the cluster: its applied membership no
    /// longer names it, or (when it missed its removal: the leader stops replicating to a
    /// member as it removes it) a member of the cluster that has a leader no longer knows it.
    fn check_removed(
        &self,
        has_leader: bool,
        membership: &MembershipSeen,
        was_member: &mut bool,
        leaderless_since: &mut Option<Instant>,
    ) {
        if self.removed.borrow().is_some() {
            return;
        }
        if membership.named {
            *was_member = true;
        } else if *was_member && membership.applied {
            tracing::warn!(
                member = format!("{:x}", self.id),
                "raft: this member was removed from the cluster"
            );
            // etcd's member stops a second after applying its own removal.
            self.removed.send_replace(Some(Duration::from_secs(1)));
            return;
        }
        if !*was_member || has_leader {
            *leaderless_since = None;
            return;
        }
        let since = *leaderless_since.get_or_insert_with(Instant::now);
        // Asked at most once per election timeout, once the leader has been gone a while.
        if since.elapsed() < self.opts.election * 3 {
            return;
        }
        *leaderless_since = Some(Instant::now());
        let peers: Vec<(u64, Vec<String>)> = self.with_metrics(|m| {
            m.membership_config
                .membership()
                .nodes()
                .filter(|(id, _)| **id != self.id)
                .map(|(id, n)| (*id, n.peer_urls.clone()))
                .collect()
        });
        let node = self.removed.clone();
        let (client, me, cluster) = (self.peers.clone(), self.id, self.cluster_id);
        let urls = self.opts.peer_urls.clone();
        tokio::spawn(async move {
            for (id, peer_urls) in peers {
                let Some(mut c) = client.raft_client(id, &peer_urls) else { continue };
                let mut req = tonic::Request::new(pb::ProbeRequest { peer_urls: urls.clone() });
                req.set_timeout(Duration::from_millis(500));
                if let Ok(r) = c.probe(req).await {
                    let r = r.into_inner();
                    if r.cluster_id == cluster && r.initialized && r.leader != 0 && !r.knows_you {
                        tracing::warn!(
                            member = format!("{me:x}"),
                            by = format!("{id:x}"),
                            "raft: this member is no longer in the cluster"
                        );
                        node.send_replace(Some(Duration::ZERO));
                        return;
                    }
                }
            }
        });
    }

    /// Resolves once this member was removed from the cluster: a second after it applied its
    /// own removal, at once when a peer refused it as removed (as etcd's member stops).
    pub async fn removed(&self) {
        let mut rx = self.removed.subscribe();
        let delay = rx.wait_for(|r| r.is_some()).await.map(|r| r.unwrap_or_default());
        // The sender lives as long as this node: no error while it runs.
        tokio::time::sleep(delay.unwrap_or_default()).await;
    }

    /// Called by the peer service for every append from a leader.
    pub fn heard_from_leader(&self) {
        let ms = self.started.elapsed().as_millis() as u64;
        self.leader_heard_ms.store(ms.max(1), Ordering::Relaxed);
    }

    /// How long ago the leader last sent this member anything (`None`: never).
    fn since_leader_heard(&self) -> Option<Duration> {
        let at = self.leader_heard_ms.load(Ordering::Relaxed);
        (at != 0).then(|| self.started.elapsed().saturating_sub(Duration::from_millis(at)))
    }
}

/// What the node's metrics watch takes from the membership openraft reports.
#[derive(Debug, Default)]
struct MembershipSeen {
    /// Its members.
    nodes: BTreeSet<u64>,
    /// Whether it names this member.
    named: bool,
    /// Whether this member applied it.
    applied: bool,
}

/// Up to which index the log need not hold its entries in memory: this member applied them
/// and, on a leader, every member it replicates to has them. Only a member that falls behind
/// later asks for them again, and gets them read back from the log's files.
fn held_upto(m: &openraft::RaftMetrics<TypeConfig>) -> u64 {
    let applied = m.last_applied.map_or(0, |l| l.index);
    match &m.replication {
        Some(r) => r.values().map(|l| l.map_or(0, |l| l.index)).fold(applied, u64::min),
        None => applied,
    }
}
