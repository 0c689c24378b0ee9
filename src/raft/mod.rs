//! Replication: a cluster of members on Raft (openraft), etcd's `etcdserver/raft` floor.
//!
//! A member started with other members in `--initial-cluster` runs a Raft node; a member alone
//! does not, and pays nothing for this module, until its first MemberAdd starts one on its own
//! state (`server::grow`). Raft sits above the store's write path:
//!
//! ```text
//! client request ─► (follower: forwarded to the leader) ─► Raft log: appended on a majority
//!   (written or fdatasync'd per --wal-mode) ─► committed ─► applied on every member, in log
//!   order, through the store's one write path ─► answered by the member the client called
//! ```
//!
//! What is replicated is the client's request (etcd's `InternalRaftRequest`), not its
//! outcome: every member evaluates it against the same state in the same order, so revisions
//! are assigned once, in log order, identically everywhere, and no member ever holds a write
//! that was not committed (nothing to undo when leadership changes). The Raft log is the write
//! -ahead log in a cluster ([`log_store`]); the store keeps no WAL of its own there, so nothing
//! is written twice, and snapshots of the store ([`state_machine`]) bound the log.
//!
//! Modules: [`node`] (the node: starting, proposing, reading, membership, and the one road to
//! the leader), [`forward`] (the requests only the leader can serve), [`log_store`],
//! [`state_machine`], [`network`] and [`peer`] (the peer transport's two sides), [`codec`]
//! (openraft's types on the wire), [`membership`] (flags and ids, as etcd derives them), [`tls`],
//! [`faults`] (network faults for tests), [`restore`] (founding a cluster from a backup).

pub mod codec;
pub mod corrupt;
pub mod faults;
pub mod forward;
pub mod log_store;
pub mod membership;
pub mod network;
pub mod node;
pub mod peer;
pub mod restore;
pub mod state_machine;
pub mod tls;

use bytes::Bytes;

pub use forward::{Answer, Forwarded, LeaderRequests};
pub use node::{NodeOptions, RaftNode, Role};
pub use state_machine::{KvHash, Machine, SnapshotJob};

/// A proposed request, opaque to Raft: an encoded `memetcdpb::Request`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proposal(pub Bytes);

impl std::fmt::Display for Proposal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "request of {} bytes", self.0.len())
    }
}

/// A member as Raft needs to know it: where its peers reach it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerNode {
    pub peer_urls: Vec<String>,
}

openraft::declare_raft_types!(
    /// mem_etcd's Raft types: 64-bit member ids as etcd's, one leader per term as in etcd's
    /// raft, requests and answers as bytes.
    pub TypeConfig:
        D = Proposal,
        R = Bytes,
        NodeId = u64,
        Node = PeerNode,
        Term = u64,
        LeaderId = openraft::vote::leader_id_std::LeaderId<u64, u64>,
);

pub type CommittedLeaderId = openraft::vote::leader_id_std::CommittedLeaderId<u64>;
pub type LogId = openraft::LogId<CommittedLeaderId>;
pub type Vote = openraft::Vote<openraft::vote::leader_id_std::LeaderId<u64, u64>>;
pub type Membership = openraft::Membership<u64, PeerNode>;
pub type StoredMembership = openraft::StoredMembership<CommittedLeaderId, u64, PeerNode>;
pub type Entry =
    openraft::Entry<CommittedLeaderId, openraft::EntryPayload<Proposal, u64, PeerNode>>;
pub type SnapshotMeta = openraft::SnapshotMeta<CommittedLeaderId, u64, PeerNode>;
pub type Snapshot =
    openraft::Snapshot<CommittedLeaderId, u64, PeerNode, state_machine::SnapshotFile>;
pub type Raft = openraft::Raft<TypeConfig, state_machine::StateMachine>;
