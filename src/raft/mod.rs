//! Replication: a cluster of members on Raft (openraft), etcd's `etcdserver/raft` floor.
//!
//! A member started with other members in `--initial-cluster` runs a Raft node; a member alone
//! does not, and pays nothing for this module, until its first MemberAdd starts one on its own
//! state (`etcdserver::grow`). Raft sits above the store's write path:
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
//! Files:
//! - the node, one concern a file: [`node`] (its state and accessors), [`start`] (starting,
//!   founding or joining a cluster), [`to_leader`] (proposals and read barriers: the one road
//!   to the leader), [`conf_change`] (membership changes, leader transfer), [`role_watch`]
//!   (leader and role; finding out about removals), [`status`] (Raft status, peers' progress);
//! - what goes to the leader: [`forward`] (the requests only the leader serves), [`batch`]
//!   (proposals in batches), [`read_index`] (one quorum confirmation for every read waiting);
//! - storage: [`log_store`] (the Raft log), [`state_machine`] (what it is applied to, and
//!   snapshots), [`restore`] (founding a cluster from a state held outside Raft);
//! - between members: [`network`] and [`peer`] (the peer transport's client and server sides),
//!   [`codec`] (openraft's types on the wire), [`tls`], [`probing`] (which peers are
//!   reachable), [`corrupt`] (comparing members' hashes), [`faults`] (network faults, tests);
//! - [`membership`] (`--initial-cluster` and ids, as etcd derives them), [`types`] (the types
//!   openraft is instantiated with).

pub mod batch;
pub mod codec;
pub mod conf_change;
pub mod corrupt;
pub mod faults;
pub mod forward;
pub mod log_store;
pub mod membership;
pub mod network;
pub mod node;
pub mod peer;
pub mod probing;
pub mod read_index;
pub mod restore;
pub mod role_watch;
pub mod start;
pub mod state_machine;
pub mod status;
pub mod tls;
pub mod to_leader;
pub mod types;

pub use forward::{Answer, Forwarded, LeaderRequests};
pub use node::{NodeOptions, Raft, RaftNode, Role};
pub use state_machine::{KvHash, Snapshot, SnapshotJob, StateMachine};
pub use status::RaftStatus;

pub use types::{
    CommittedLeaderId, Entry, LogId, Membership, PeerNode, Proposal, SnapshotMeta,
    StoredMembership, TypeConfig, Vote,
};
