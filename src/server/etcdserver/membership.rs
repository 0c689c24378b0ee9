//! Membership (etcd's `api/membership` and `EtcdServer`'s member calls): the cluster's members
//! as MemberList answers them, and changes of them with etcd's checks and errors. A member alone
//! lists itself, grows into a cluster on its first MemberAdd or on an update of its own peer
//! URLs (`grow`), and refuses a removal or a promotion as etcd's cluster of one does; a cluster
//! member carries out changes on the leader (a follower forwards them: `RaftNode::at_leader`,
//! served there through `forward`).

use std::sync::Arc;
use std::time::Duration;

use crate::error::Error;
use crate::proto::etcdserverpb as pb;
use crate::raft::membership::{member_id, normalize_url};
use crate::raft::{Answer, Forwarded, RaftNode};
use crate::server::etcdserver::grow::{self, GrowError};
use crate::server::etcdserver::member::Member;

/// Every member, as etcd lists them (by id).
fn members(s: &Member, raft: &RaftNode) -> Vec<pb::Member> {
    let (voters, nodes) = raft.membership();
    let attrs = s.members.lock();
    nodes
        .into_iter()
        .map(|(id, peer_urls)| {
            let a = attrs.get(&id);
            pb::Member {
                id,
                // Empty until the member has started and published itself, as in etcd.
                name: a.map(|a| a.name.clone()).unwrap_or_default(),
                peer_ur_ls: peer_urls,
                client_ur_ls: a.map(|a| a.client_urls.clone()).unwrap_or_default(),
                is_learner: !voters.contains(&id),
            }
        })
        .collect()
}

/// Every member, as MemberList answers (a member alone lists itself).
pub fn list(s: &Member) -> Vec<pb::Member> {
    if let Some(raft) = s.raft() {
        return members(s, raft);
    }
    vec![pb::Member {
        id: s.member_id,
        name: s.config.name.clone(),
        peer_ur_ls: s.config.initial_advertise_peer_urls.clone(),
        client_ur_ls: s.config.advertised_client_urls(),
        is_learner: false,
    }]
}

/// Whether another member already has one of `urls`.
fn urls_taken(raft: &RaftNode, urls: &[String], except: u64) -> bool {
    raft.membership().1.iter().any(|(id, u)| *id != except && u.iter().any(|x| urls.contains(x)))
}

/// etcd's "health interval": a membership change needs peers connected at least this long.
const HEALTH_INTERVAL: Duration = Duration::from_secs(5);

/// Whether member `id` has published its name (etcd's `IsStarted`).
fn started(s: &Member, id: u64) -> bool {
    s.members.lock().get(&id).is_some_and(|m| !m.name.is_empty())
}

/// How many of `voters` this member has been connected to for the health interval, itself
/// included (etcd's `numConnectedSince`).
fn connected(raft: &RaftNode, voters: &[u64]) -> usize {
    voters
        .iter()
        .filter(|v| {
            **v == raft.id || raft.active_since(**v).is_some_and(|t| t.elapsed() >= HEALTH_INTERVAL)
        })
        .count()
}

/// etcd's `IsReadyToAddVotingMember`: the started voters make a quorum of the cluster with the
/// new member, which has not started (one started member may always add a second).
fn ready_to_add_voter(s: &Member, voters: &[u64]) -> bool {
    let members = voters.len() + 1;
    let up = voters.iter().filter(|v| started(s, **v)).count();
    (up == 1 && members == 2) || up > members / 2
}

/// etcd's `IsReadyToRemoveVotingMember`: the started voters left make a quorum of the rest.
fn ready_to_remove_voter(s: &Member, voters: &[u64], id: u64) -> bool {
    let rest: Vec<&u64> = voters.iter().filter(|v| **v != id).collect();
    let up = rest.iter().filter(|v| started(s, ***v)).count();
    up > rest.len() / 2
}

/// etcd's `IsReadyToPromoteMember`: with the learner counted as a started voter, the started
/// voters make a quorum.
fn ready_to_promote(s: &Member, voters: &[u64]) -> bool {
    let members = voters.len() + 1;
    let up = voters.iter().filter(|v| started(s, **v)).count() + 1;
    up > members / 2
}

/// etcd's `mayAddMember`, the checks `--strict-reconfig-check=false` turns off.
fn may_add(s: &Member, raft: &RaftNode, voters: &[u64], learner: bool) -> Result<(), Error> {
    if !s.config.strict_reconfig_check {
        return Ok(());
    }
    if !learner && !ready_to_add_voter(s, voters) {
        return Err(Error::NotEnoughStartedMembers);
    }
    // The new member counts as down: this member must have been connected to a quorum of the
    // larger cluster (a member alone may always grow).
    let members = voters.len() + 1;
    if voters.len() > 1 && connected(raft, voters) < members / 2 + 1 {
        return Err(Error::UnhealthyCluster);
    }
    Ok(())
}

/// etcd's `mayRemoveMember`, the checks `--strict-reconfig-check=false` turns off.
fn may_remove(s: &Member, raft: &RaftNode, voters: &[u64], id: u64) -> Result<(), Error> {
    // A learner's removal never costs the quorum.
    if !s.config.strict_reconfig_check || !voters.contains(&id) {
        return Ok(());
    }
    if !ready_to_remove_voter(s, voters, id) {
        return Err(Error::NotEnoughStartedMembers);
    }
    // A member that is down is not part of the active quorum: safe to remove.
    if id != raft.id && raft.active_since(id).is_none() {
        return Ok(());
    }
    if connected(raft, voters).saturating_sub(1) < 1 + (voters.len() - 1) / 2 {
        return Err(Error::UnhealthyCluster);
    }
    Ok(())
}

/// The leader's side of the membership changes (the member the client called checked the
/// caller and the peer URLs: see [`on_leader`]), served through `forward`.
pub async fn member_add(
    s: &Member,
    r: pb::MemberAddRequest,
) -> Result<pb::MemberAddResponse, Error> {
    let raft = s.raft().ok_or(Error::MemberChangeUnsupported)?;
    let urls = r.peer_ur_ls;
    let (voters, nodes) = raft.membership();
    let voters: Vec<u64> = voters.into_iter().collect();
    // Before the change's own checks, as etcd orders them.
    may_add(s, raft, &voters, r.is_learner)?;
    if urls_taken(raft, &urls, 0) {
        return Err(Error::PeerUrlExists);
    }
    if r.is_learner && nodes.keys().filter(|id| !voters.contains(id)).count() >= 1 {
        return Err(Error::TooManyLearners);
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let id = member_id(&urls, "", Some(now));
    raft.add_member(id, urls.clone(), r.is_learner).await?;
    let member = pb::Member {
        id,
        name: String::new(),
        peer_ur_ls: urls,
        client_ur_ls: Vec::new(),
        is_learner: r.is_learner,
    };
    Ok(pb::MemberAddResponse {
        header: s.header(0),
        member: Some(member),
        members: members(s, raft),
    })
}

pub async fn member_remove(
    s: &Member,
    r: pb::MemberRemoveRequest,
) -> Result<pb::MemberRemoveResponse, Error> {
    let raft = s.raft().ok_or(Error::MemberChangeUnsupported)?;
    let (voters, nodes) = raft.membership();
    if !nodes.contains_key(&r.id) {
        return Err(Error::MemberNotFound);
    }
    let voters: Vec<u64> = voters.into_iter().collect();
    // The last voter is never removed, whatever `--strict-reconfig-check` says: etcd without
    // the check applies the removal and panics ("removed all voters"), at every start after
    // that too. mem_etcd refuses it as the check does.
    if voters == [r.id] {
        return Err(Error::NotEnoughStartedMembers);
    }
    may_remove(s, raft, &voters, r.id)?;
    raft.remove_member(r.id).await?;
    Ok(pb::MemberRemoveResponse { header: s.header(0), members: members(s, raft) })
}

pub async fn member_update(
    s: &Member,
    r: pb::MemberUpdateRequest,
) -> Result<pb::MemberUpdateResponse, Error> {
    let raft = s.raft().ok_or(Error::MemberChangeUnsupported)?;
    let urls = r.peer_ur_ls;
    if !raft.membership().1.contains_key(&r.id) {
        return Err(Error::MemberNotFound);
    }
    if urls_taken(raft, &urls, r.id) {
        return Err(Error::PeerUrlExists);
    }
    raft.update_member(r.id, urls).await?;
    Ok(pb::MemberUpdateResponse { header: s.header(0), members: members(s, raft) })
}

pub async fn member_promote(
    s: &Member,
    r: pb::MemberPromoteRequest,
) -> Result<pb::MemberPromoteResponse, Error> {
    let raft = s.raft().ok_or(Error::MemberChangeUnsupported)?;
    let (voters, nodes) = raft.membership();
    if !nodes.contains_key(&r.id) {
        return Err(Error::MemberNotFound);
    }
    if voters.contains(&r.id) {
        return Err(Error::MemberNotLearner);
    }
    // etcd promotes a learner only once it has 90% of the leader's log, and if the voters
    // then still make a quorum of started members.
    if !raft.learner_in_sync(r.id, 0.9) {
        return Err(Error::LearnerNotReady);
    }
    let voters: Vec<u64> = voters.into_iter().collect();
    if s.config.strict_reconfig_check && !ready_to_promote(s, &voters) {
        return Err(Error::NotEnoughStartedMembers);
    }
    raft.promote_member(r.id).await?;
    s.metrics.learner_promotions.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(pb::MemberPromoteResponse { header: s.header(0), members: members(s, raft) })
}

/// A member alone's answer to the removal of member `id`: etcd's cluster of one refuses it
/// (the member is not there, or it is the last voter: see `member_remove`). Nothing to grow for.
fn alone_remove(s: &Member, id: u64) -> Error {
    if id == s.member_id { Error::NotEnoughStartedMembers } else { Error::MemberNotFound }
}

/// A member alone's answer to the promotion of member `id`: it is the one member, a voter.
fn alone_promote(s: &Member, id: u64) -> Error {
    if id == s.member_id { Error::MemberNotLearner } else { Error::MemberNotFound }
}

/// Why a membership change a client asked for failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangeError {
    /// One of etcd's errors.
    Etcd(Error),
    /// A member alone could not grow into the cluster the change needs.
    Grow(GrowError),
}

impl From<Error> for ChangeError {
    fn from(e: Error) -> Self {
        ChangeError::Etcd(e)
    }
}

impl From<GrowError> for ChangeError {
    fn from(e: GrowError) -> Self {
        ChangeError::Grow(e)
    }
}

/// Runs a membership change on the leader: here, or forwarded (`RaftNode::at_leader`). The
/// member the client called has checked the caller and the peer URLs, as etcd's handler does
/// before it proposes; the leader trusts them.
async fn on_leader(s: &Member, change: Forwarded) -> Result<Answer, Error> {
    let raft = s.raft().ok_or(Error::MemberChangeUnsupported)?;
    raft.at_leader(change).await
}

/// Whether this member is a learner: it refuses membership changes (etcd's interceptor).
pub fn refuse_learner(s: &Member) -> Result<(), Error> {
    match s.raft() {
        Some(r) if r.role().borrow().is_learner => Err(Error::LearnerRpc),
        _ => Ok(()),
    }
}

/// MemberAdd, its peer URLs checked. A member alone's first add makes it a cluster of one,
/// which then adds the member as any cluster does. Growing cannot be undone, so the checks a
/// cluster of one would make of the URLs come first: a refused add changes nothing.
pub async fn add(
    s: &Arc<Member>,
    r: pb::MemberAddRequest,
) -> Result<pb::MemberAddResponse, ChangeError> {
    if s.raft().is_none() {
        let own = &s.config.initial_advertise_peer_urls;
        if own.iter().filter_map(|u| normalize_url(u)).any(|u| r.peer_ur_ls.contains(&u)) {
            return Err(Error::PeerUrlExists.into());
        }
        grow::grow(s).await?;
    }
    let Answer::MemberAdd(mut resp) = on_leader(s, Forwarded::MemberAdd(r)).await? else {
        return Err(Error::Internal.into());
    };
    s.fill(&mut resp.header);
    Ok(resp)
}

/// MemberRemove.
pub async fn remove(
    s: &Member,
    r: pb::MemberRemoveRequest,
) -> Result<pb::MemberRemoveResponse, Error> {
    if s.raft().is_none() {
        return Err(alone_remove(s, r.id));
    }
    let Answer::MemberRemove(mut resp) = on_leader(s, Forwarded::MemberRemove(r)).await? else {
        return Err(Error::Internal);
    };
    s.fill(&mut resp.header);
    Ok(resp)
}

/// MemberUpdate, its peer URLs checked. A member alone whose own peer URLs change grows into
/// a cluster of one first (as on its first add), and the change then goes through Raft as in
/// any cluster: the new URLs are in the Raft membership, which MemberList answers from and a
/// restart resumes from. Without growing, the URLs would need a store of their own beside the
/// member's flags, and a second road for the membership a later growth founds the cluster
/// with. Growing cannot be undone, so everything a refusal depends on is checked first.
pub async fn update(
    s: &Arc<Member>,
    r: pb::MemberUpdateRequest,
) -> Result<pb::MemberUpdateResponse, ChangeError> {
    if s.raft().is_none() {
        if r.id != s.member_id {
            return Err(Error::MemberNotFound.into());
        }
        grow::grow(s).await?;
    }
    let Answer::MemberUpdate(mut resp) = on_leader(s, Forwarded::MemberUpdate(r)).await? else {
        return Err(Error::Internal.into());
    };
    s.fill(&mut resp.header);
    Ok(resp)
}

/// MemberPromote.
pub async fn promote(
    s: &Member,
    r: pb::MemberPromoteRequest,
) -> Result<pb::MemberPromoteResponse, Error> {
    if s.raft().is_none() {
        return Err(alone_promote(s, r.id));
    }
    let Answer::MemberPromote(mut resp) = on_leader(s, Forwarded::MemberPromote(r)).await? else {
        return Err(Error::Internal);
    };
    s.fill(&mut resp.header);
    Ok(resp)
}

/// MoveLeader (etcd's `EtcdServer.MoveLeader`): only the leader hands over, to a voter.
pub async fn move_leader(s: &Member, target: u64) -> Result<(), Error> {
    let Some(raft) = s.raft() else {
        // A member alone leads and has nobody to hand over to.
        return if target == s.member_id { Ok(()) } else { Err(Error::BadLeaderTransferee) };
    };
    if !raft.is_leader() {
        return Err(Error::NotLeaderMoveLeader);
    }
    if !raft.membership().0.contains(&target) {
        return Err(Error::BadLeaderTransferee);
    }
    if target != raft.id {
        raft.transfer_leader(target).await?;
    }
    Ok(())
}
