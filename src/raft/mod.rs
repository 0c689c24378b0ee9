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
//! Files, in two rooms and beside them:
//! - [`node`]: the node, one concern a file (its state and accessors in `node/mod.rs`;
//!   starting, founding or joining a cluster; proposals and read barriers, the one road to the
//!   leader; membership changes and leader transfer; leader and role; Raft status);
//! - [`rafthttp`] (etcd's name for it): between members: the peer transport's client and
//!   server sides, openraft's types on the wire, peer TLS, which peers are reachable, network
//!   faults for tests;
//! - what goes to the leader: [`forward`] (the requests only the leader serves), [`batch`]
//!   (proposals in batches), [`read_index`] (one quorum confirmation for every read waiting);
//! - storage: [`log_store`] (the Raft log), [`state_machine`] (what it is applied to, and
//!   snapshots), [`restore`] (founding a cluster from a state held outside Raft);
//! - [`corrupt`] (comparing members' hashes), [`membership`] (`--initial-cluster` and ids, as
//!   etcd derives them), [`types`] (the types openraft is instantiated with).
//!
//! `node` and `rafthttp` call each other, as etcd's `raft` and `rafthttp` do: the node sends
//! through the transport, and the transport's server side hands what arrives to the node.

pub mod batch;
pub mod corrupt;
pub mod forward;
pub mod log_store;
pub mod membership;
pub mod node;
pub mod rafthttp;
pub mod read_index;
pub mod restore;
pub mod state_machine;
pub mod types;

pub use forward::{Answer, Forwarded, LeaderRequests};
pub use node::status::RaftStatus;
pub use node::{NodeOptions, Raft, RaftNode, Role};
pub use state_machine::{KvHash, Snapshot, SnapshotJob, StateMachine};

pub use types::{
    CommittedLeaderId, Entry, LogId, Membership, PeerNode, Proposal, SnapshotMeta,
    StoredMembership, TypeConfig, Vote,
};
