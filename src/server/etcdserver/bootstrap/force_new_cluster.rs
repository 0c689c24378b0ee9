//! etcd's `--force-new-cluster`: a cluster member restarted with it on its data directory
//! becomes the only member of a new cluster (how an operator recovers a cluster that lost its
//! quorum for good). It keeps everything it had committed: every key with its revisions, the
//! leases, the auth state, the compaction; it keeps its member and cluster ids; the other
//! members are gone from its membership; then it serves alone, and members are added back with
//! `member add` and started with `--initial-cluster-state existing`.
//!
//! In order, before anything is served:
//!
//! 1. The member's committed state is rebuilt in its store from its Raft state
//!    ([`restore::replay_committed`]): the newest snapshot, then the log's entries up to the
//!    committed log id the log holds. openraft saves that id before it applies up to it, so it
//!    covers everything this member applied, hence everything it answered. Entries after it
//!    are dropped, as etcd drops the entries past its WAL's commit index: they may be a deposed
//!    leader's that no client was told succeeded. (A follower may hold entries the leader had
//!    committed but not told it about yet; etcd drops those the same way.)
//! 2. This member's name and client URLs stay in the machine's member list, the others' go.
//! 3. `<data-dir>/raft` is replaced, crash-safely, by a founding snapshot of that state and of
//!    a membership of this member alone (with the peer URLs its membership had), at the log
//!    position it had reached: the founding that growth and `snapshot restore` write
//!    ([`restore::write_member`]).
//! 4. Raft starts as after growth ([`RaftNode::start_founded`]): the store already holds the
//!    snapshot's state, the first vote is for the newest term this member knew, so its
//!    election takes a later term and Raft's index goes on from where it was. Leases get
//!    their full TTL again when it leads, as after any restart.
//!
//! Revisions go on from the last committed one. Started with the flag again later, the member
//! forces a new cluster again (dropping members added since), as etcd's does: the flag is for
//! one start.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::raft::membership::InitialMember;
use crate::raft::{NodeOptions, RaftNode, StateMachine, restore};
use crate::server::etcdserver::apply;
use crate::server::etcdserver::member::Member;

/// How long the new cluster of one may take to elect this member before it serves anyway.
const ELECTION_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Whether the flags ask for a new cluster and `opts`'s data directory holds a cluster
/// member's state (without one the flag does nothing, as in etcd).
pub fn applies(s: &Member, opts: &NodeOptions) -> bool {
    s.config.force_new_cluster && opts.mode != crate::wal::Mode::None && opts.dir.has_member()
}

/// Makes this member the only member of a new cluster from its committed state and starts its
/// Raft node (see the module docs).
pub async fn start(s: &Arc<Member>, mut opts: NodeOptions) -> Result<(), String> {
    let dir = opts.dir.clone();
    let applier = Arc::new(apply::Applier { shared: Arc::downgrade(s) });
    // Rebuilding a large store takes a while: off the runtime's other tasks.
    let replayed =
        tokio::task::block_in_place(|| restore::replay_committed(&dir, applier.as_ref()))
            .map_err(|e| format!("--force-new-cluster: {}: {e}", dir.display()))?;
    let me = s.member_id;
    let peer_urls = replayed
        .membership
        .get_node(&me)
        .map(|n| n.peer_urls.clone())
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| opts.peer_urls.clone());
    let removed: Vec<String> = replayed
        .membership
        .nodes()
        .filter(|(id, _)| **id != me)
        .map(|(id, _)| format!("{id:x}"))
        .collect();
    let at = replayed.applied.unwrap_or_else(restore::founding);
    tracing::warn!(
        cluster_id = format!("{:x}", s.cluster_id),
        local_member_id = format!("{me:x}"),
        commit_index = at.index,
        revision = s.store.current_revision(),
        discarded_uncommitted_entries = replayed.discarded,
        removed_members = ?removed,
        "forcing restart member: a new cluster of this member alone (--force-new-cluster)"
    );
    s.members.lock().retain(|id, _| *id == me);
    let job = applier.snapshot();
    let members = BTreeMap::from([(me, peer_urls.clone())]);
    let cluster_id = s.cluster_id;
    let raft_dir = dir.clone();
    tokio::task::spawn_blocking(move || {
        let mut job = Some(job);
        restore::replace_member(&raft_dir, me, cluster_id, &members, at, &mut |out| {
            job.take().expect("written once").write(out)
        })
    })
    .await
    .map_err(|e| format!("--force-new-cluster: writing the new cluster's state: {e}"))?
    .map_err(|e| format!("--force-new-cluster: {}: {e}", dir.display()))?;
    opts.initial = BTreeMap::from([(me, InitialMember { name: opts.name.clone(), peer_urls })]);
    opts.peer_urls = opts.initial[&me].peer_urls.clone();
    let node = RaftNode::start_founded(opts, applier, replayed.term).await?;
    // Served once it leads, as etcd's member serves once it has published itself through its
    // new cluster (its name is known already, so publishing would not wait here).
    if node.wait_leader(ELECTION_WAIT).await != Some(me) {
        tracing::warn!("--force-new-cluster: this member has not elected itself yet");
    }
    s.set_raft(node)
}
