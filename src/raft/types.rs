//! The types Raft is instantiated with: what is proposed, how a member is known, and
//! openraft's generic types fixed to them.

use bytes::Bytes;

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
