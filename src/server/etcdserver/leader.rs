//! What a service that needs a leader knows of it (etcd's `monitorLeader`): kube-apiserver's
//! watches ask for one (`WithRequireLeader`), and a member without a leader refuses them, or
//! ends them once it has been without one for an election timeout, so that the client moves to
//! a member that has one. A member alone always leads itself: it has no monitor.

use std::time::Duration;

use tokio::sync::watch;

use crate::raft::Role;
use crate::server::etcdserver::member::Member;

/// One stream's view of its member's leader.
#[derive(Debug)]
pub struct LeaderMonitor {
    /// The member's Raft role (who leads, as this member last heard).
    role: watch::Receiver<Role>,
    /// How long the member may be without a leader before the stream ends: an election
    /// timeout, the time a new leader normally takes to appear.
    grace: Duration,
}

impl LeaderMonitor {
    /// A monitor for a cluster member; `None` for a member alone (it leads itself).
    pub fn of(s: &Member) -> Option<LeaderMonitor> {
        s.raft().map(|r| LeaderMonitor { role: r.role(), grace: r.election_timeout() })
    }

    /// Whether a leader is known now.
    pub fn has_leader(&self) -> bool {
        self.role.borrow().leader.is_some()
    }

    /// Resolves once the member has been without a leader for the grace period (checked once
    /// per period, as etcd does); never if the member stops.
    pub async fn lost(&mut self) {
        loop {
            if self.role.wait_for(|r| r.leader.is_none()).await.is_err() {
                return std::future::pending().await;
            }
            tokio::time::sleep(self.grace).await;
            if self.role.borrow().leader.is_none() {
                return;
            }
        }
    }
}
