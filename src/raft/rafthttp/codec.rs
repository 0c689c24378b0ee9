//! openraft's types to and from the peer protocol's messages (`proto/memetcd/raftpb.proto`).
//!
//! Decoding checks what the types require (a log id, a vote) and reports a missing field as a
//! [`Malformed`] error instead of inventing a default, so a peer speaking another version is
//! refused rather than misread.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use openraft::EntryPayload;
use openraft::raft::{
    AppendEntriesRequest, StreamAppendError, StreamAppendResult, TransferLeaderRequest,
    VoteRequest, VoteResponse,
};

use crate::proto::memetcdpb as pb;
use crate::raft::types::{
    CommittedLeaderId, Entry, LogId, Membership, PeerNode, Proposal, SnapshotMeta,
    StoredMembership, TypeConfig, Vote,
};

/// A message from a peer lacked a field its type requires.
#[derive(Debug)]
pub struct Malformed(pub &'static str);

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed peer message: no {}", self.0)
    }
}

impl std::error::Error for Malformed {}

impl From<Malformed> for tonic::Status {
    fn from(m: Malformed) -> Self {
        tonic::Status::invalid_argument(m.to_string())
    }
}

type Result<T> = std::result::Result<T, Malformed>;

pub fn log_id(l: &LogId) -> pb::LogId {
    pb::LogId { term: l.leader_id.term, index: l.index }
}

pub fn opt_log_id(l: &Option<LogId>) -> Option<pb::LogId> {
    l.as_ref().map(log_id)
}

pub fn from_log_id(l: &pb::LogId) -> LogId {
    LogId::new(CommittedLeaderId::new(l.term), l.index)
}

pub fn from_opt_log_id(l: &Option<pb::LogId>) -> Option<LogId> {
    l.as_ref().map(from_log_id)
}

pub fn vote(v: &Vote) -> pb::Vote {
    pb::Vote { term: v.leader_id.term, node_id: v.leader_id.voted_for, committed: v.committed }
}

pub fn from_vote(v: &Option<pb::Vote>) -> Result<Vote> {
    let v = v.as_ref().ok_or(Malformed("vote"))?;
    Ok(if v.committed {
        Vote::new_committed(v.term, v.node_id)
    } else {
        Vote::new(v.term, v.node_id)
    })
}

pub fn membership(m: &Membership) -> pb::Membership {
    pb::Membership {
        configs: m
            .get_joint_config()
            .iter()
            .map(|c| pb::VoterSet { ids: c.iter().copied().collect() })
            .collect(),
        nodes: m
            .nodes()
            .map(|(id, n)| pb::Node { id: *id, peer_urls: n.peer_urls.clone() })
            .collect(),
    }
}

pub fn from_membership(m: &Option<pb::Membership>) -> Result<Membership> {
    let m = m.as_ref().ok_or(Malformed("membership"))?;
    let configs: Vec<BTreeSet<u64>> =
        m.configs.iter().map(|c| c.ids.iter().copied().collect()).collect();
    let nodes: BTreeMap<u64, PeerNode> =
        m.nodes.iter().map(|n| (n.id, PeerNode { peer_urls: n.peer_urls.clone() })).collect();
    Membership::new(configs, nodes).map_err(|_| Malformed("consistent membership"))
}

pub fn entry(e: &Entry) -> pb::Entry {
    let payload = match &e.payload {
        EntryPayload::Blank => pb::entry::Payload::Blank(true),
        EntryPayload::Normal(p) => pb::entry::Payload::Normal(p.0.clone()),
        EntryPayload::Membership(m) => pb::entry::Payload::Membership(membership(m)),
    };
    pb::Entry { log_id: Some(log_id(&e.log_id)), payload: Some(payload) }
}

pub fn from_entry(e: pb::Entry) -> Result<Entry> {
    let log_id = from_log_id(e.log_id.as_ref().ok_or(Malformed("entry log id"))?);
    let payload = match e.payload.ok_or(Malformed("entry payload"))? {
        pb::entry::Payload::Blank(_) => EntryPayload::Blank,
        // Copied out of the received message: the log keeps entries long after the message
        // is gone, and a view would pin its whole buffer.
        pb::entry::Payload::Normal(b) => EntryPayload::Normal(Proposal(Bytes::copy_from_slice(&b))),
        pb::entry::Payload::Membership(m) => EntryPayload::Membership(from_membership(&Some(m))?),
    };
    Ok(Entry { log_id, payload })
}

pub fn append_request(r: &AppendEntriesRequest<TypeConfig>) -> pb::AppendRequest {
    pb::AppendRequest {
        vote: Some(vote(&r.vote)),
        prev_log_id: opt_log_id(&r.prev_log_id),
        entries: r.entries.iter().map(entry).collect(),
        leader_commit: opt_log_id(&r.leader_commit),
    }
}

pub fn from_append_request(r: pb::AppendRequest) -> Result<AppendEntriesRequest<TypeConfig>> {
    Ok(AppendEntriesRequest {
        vote: from_vote(&r.vote)?,
        prev_log_id: from_opt_log_id(&r.prev_log_id),
        entries: r.entries.into_iter().map(from_entry).collect::<Result<_>>()?,
        leader_commit: from_opt_log_id(&r.leader_commit),
    })
}

pub fn append_result(r: &StreamAppendResult<TypeConfig>) -> pb::AppendResponse {
    use pb::append_response::Result as R;
    let (result, log_id) = match r {
        Ok(matched) => (R::Matched(true), opt_log_id(matched)),
        Err(StreamAppendError::Conflict(at)) => (R::Conflict(true), Some(log_id(at))),
        Err(StreamAppendError::HigherVote(v)) => (R::HigherVote(vote(v)), None),
    };
    pb::AppendResponse { result: Some(result), log_id }
}

pub fn from_append_result(r: pb::AppendResponse) -> Result<StreamAppendResult<TypeConfig>> {
    use pb::append_response::Result as R;
    Ok(match r.result.ok_or(Malformed("append result"))? {
        R::Matched(_) => Ok(from_opt_log_id(&r.log_id)),
        R::Conflict(_) => Err(StreamAppendError::Conflict(from_log_id(
            r.log_id.as_ref().ok_or(Malformed("append conflict log id"))?,
        ))),
        R::HigherVote(v) => Err(StreamAppendError::HigherVote(from_vote(&Some(v))?)),
    })
}

pub fn vote_request(r: &VoteRequest<TypeConfig>) -> pb::VoteRequest {
    pb::VoteRequest {
        vote: Some(vote(&r.vote)),
        last_log_id: opt_log_id(&r.last_log_id),
        leadership_transfer: r.leadership_transfer,
    }
}

pub fn from_vote_request(r: pb::VoteRequest) -> Result<VoteRequest<TypeConfig>> {
    let mut out = VoteRequest::new(from_vote(&r.vote)?, from_opt_log_id(&r.last_log_id));
    out.leadership_transfer = r.leadership_transfer;
    Ok(out)
}

pub fn vote_response(r: &VoteResponse<TypeConfig>) -> pb::VoteResponse {
    pb::VoteResponse {
        vote: Some(vote(&r.vote)),
        granted: r.vote_granted,
        last_log_id: opt_log_id(&r.last_log_id),
    }
}

pub fn from_vote_response(r: pb::VoteResponse) -> Result<VoteResponse<TypeConfig>> {
    Ok(VoteResponse::new(from_vote(&r.vote)?, from_opt_log_id(&r.last_log_id), r.granted))
}

pub fn snapshot_meta(m: &SnapshotMeta) -> pb::SnapshotMeta {
    pb::SnapshotMeta {
        last_log_id: opt_log_id(&m.last_log_id),
        membership_log_id: opt_log_id(m.last_membership.log_id()),
        membership: Some(membership(m.last_membership.membership())),
    }
}

pub fn from_snapshot_meta(m: &Option<pb::SnapshotMeta>) -> Result<SnapshotMeta> {
    let m = m.as_ref().ok_or(Malformed("snapshot meta"))?;
    Ok(SnapshotMeta {
        last_log_id: from_opt_log_id(&m.last_log_id),
        last_membership: StoredMembership::new(
            from_opt_log_id(&m.membership_log_id),
            from_membership(&m.membership)?,
        ),
    })
}

pub fn transfer_leader(r: &TransferLeaderRequest<TypeConfig>) -> pb::TransferLeaderRequest {
    pb::TransferLeaderRequest {
        from_leader: Some(vote(r.from_leader())),
        to: *r.to_node_id(),
        last_log_id: r.last_log_id().map(log_id),
    }
}

pub fn from_transfer_leader(
    r: pb::TransferLeaderRequest,
) -> Result<TransferLeaderRequest<TypeConfig>> {
    Ok(TransferLeaderRequest::new(
        from_vote(&r.from_leader)?,
        r.to,
        from_opt_log_id(&r.last_log_id),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_and_memberships_round_trip() {
        let m = Membership::new(
            vec![BTreeSet::from([1, 2]), BTreeSet::from([2, 3])],
            BTreeMap::from([
                (1, PeerNode { peer_urls: vec!["http://a:2380".into()] }),
                (2, PeerNode { peer_urls: vec!["http://b:2380".into()] }),
                (3, PeerNode { peer_urls: vec!["http://c:2380".into()] }),
                (4, PeerNode { peer_urls: vec!["http://d:2380".into()] }),
            ]),
        )
        .unwrap();
        let entries = [
            Entry {
                log_id: LogId::new(CommittedLeaderId::new(3), 7),
                payload: EntryPayload::Blank,
            },
            Entry {
                log_id: LogId::new(CommittedLeaderId::new(3), 8),
                payload: EntryPayload::Normal(Proposal(bytes::Bytes::from_static(b"req"))),
            },
            Entry {
                log_id: LogId::new(CommittedLeaderId::new(4), 9),
                payload: EntryPayload::Membership(m),
            },
        ];
        for e in entries {
            assert_eq!(from_entry(entry(&e)).unwrap(), e);
        }
        let v = Vote::new_committed(5, 2);
        assert_eq!(from_vote(&Some(vote(&v))).unwrap(), v);
        assert!(from_entry(pb::Entry::default()).is_err(), "no log id: refused, not defaulted");
    }

    #[test]
    fn a_decoded_entry_does_not_pin_the_message_it_came_in() {
        let message = bytes::Bytes::from(vec![7u8; 64 << 10]);
        let e = pb::Entry {
            log_id: Some(pb::LogId { term: 1, index: 1 }),
            payload: Some(pb::entry::Payload::Normal(message.slice(100..200))),
        };
        let EntryPayload::Normal(p) = from_entry(e).unwrap().payload else { panic!() };
        let inside = message.as_ptr_range().contains(&p.0.as_ptr());
        assert!(!inside, "the entry is a view into the 64 KiB message");
    }
}
