//! The Cluster service: membership. A member alone lists itself, grows into a cluster on its
//! first MemberAdd or on an update of its own peer URLs (`server::grow`), and answers a removal
//! or a promotion as etcd's cluster of one does (it refuses them); a cluster member answers from
//! the Raft membership plus the names and client URLs members published, and carries out
//! changes on the leader (a follower forwards them), with etcd's checks and errors.

use std::sync::Arc;
use std::time::Duration;

use tonic::{Request, Response, Status};

use super::member::Member;
use crate::error::Error;
use crate::proto::etcdserverpb as pb;
use crate::raft::membership::{member_id, normalize_url};
use crate::raft::{Answer, Forwarded, RaftNode};

#[derive(Debug)]
pub struct ClusterService {
    shared: Arc<Member>,
}

impl ClusterService {
    pub fn new(shared: Arc<Member>) -> Self {
        Self { shared }
    }
}

/// Every member, as etcd lists them (by id).
pub fn members(s: &Member, raft: &RaftNode) -> Vec<pb::Member> {
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
pub fn member_list(s: &Member) -> Vec<pb::Member> {
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

/// Peer URLs as given, or etcd's error for a bad one.
fn parse_urls(urls: &[String]) -> Result<Vec<String>, Status> {
    // etcd's types.NewURLs refuses an empty list ("no valid URLs given"), answered as bad URLs.
    if urls.is_empty() {
        return Err(Status::invalid_argument("etcdserver: given member URLs are invalid"));
    }
    urls.iter()
        .map(|u| {
            normalize_url(u).ok_or_else(|| {
                Status::invalid_argument(format!("etcdserver: invalid peer URL {u:?}"))
            })
        })
        .collect()
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
/// caller and the peer URLs: see `on_leader!`), served through `server::forward`.
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

/// Runs a membership change on the leader: here, or forwarded (`RaftNode::at_leader`). The
/// caller, and the peer URLs of a change that has some (`urls`: the request's field), are
/// checked here first, as etcd's handler checks them before it proposes; the leader trusts them.
macro_rules! on_leader {
    ($self:ident, $req:ident, $kind:ident $(, $urls:ident)?) => {{
        let s = &$self.shared;
        if s.raft().is_some_and(|r| r.role().borrow().is_learner) {
            return Err(Error::LearnerRpc.into());
        }
        // Only root, checked by the member the client called, before anything else (etcd's
        // checkMembershipOperationPermission).
        super::auth::admin(s, &$req).await?;
        let Some(raft) = s.raft() else { return Err(Error::MemberChangeUnsupported.into()) };
        #[allow(unused_mut)]
        let mut r = $req.into_inner();
        $(r.$urls = parse_urls(&r.$urls)?;)?
        let Answer::$kind(mut resp) = raft.at_leader(Forwarded::$kind(r)).await? else {
            return Err(Error::Internal.into());
        };
        s.fill(&mut resp.header);
        Ok(Response::new(resp))
    }};
}

#[tonic::async_trait]
impl pb::cluster_server::Cluster for ClusterService {
    async fn member_add(
        &self,
        req: Request<pb::MemberAddRequest>,
    ) -> Result<Response<pb::MemberAddResponse>, Status> {
        // A member alone's first MemberAdd makes it a cluster of one, which then adds the
        // member as any cluster does. Growing cannot be undone, so the checks a cluster of one
        // would make of the caller and the URLs come first: a refused add changes nothing.
        if self.shared.raft().is_none() {
            super::auth::admin(&self.shared, &req).await?;
            let urls = parse_urls(&req.get_ref().peer_ur_ls)?;
            let own = &self.shared.config.initial_advertise_peer_urls;
            if own.iter().filter_map(|u| normalize_url(u)).any(|u| urls.contains(&u)) {
                return Err(Error::PeerUrlExists.into());
            }
            super::grow::grow(&self.shared).await?;
        }
        on_leader!(self, req, MemberAdd, peer_ur_ls)
    }

    async fn member_remove(
        &self,
        req: Request<pb::MemberRemoveRequest>,
    ) -> Result<Response<pb::MemberRemoveResponse>, Status> {
        if self.shared.raft().is_none() {
            super::auth::admin(&self.shared, &req).await?;
            return Err(alone_remove(&self.shared, req.get_ref().id).into());
        }
        on_leader!(self, req, MemberRemove)
    }

    async fn member_update(
        &self,
        req: Request<pb::MemberUpdateRequest>,
    ) -> Result<Response<pb::MemberUpdateResponse>, Status> {
        // A member alone whose own peer URLs change grows into a cluster of one first (as on
        // its first add), and the change then goes through Raft as in any cluster: the new
        // URLs are in the Raft membership, which MemberList answers from and a restart
        // resumes from. Without growing, the URLs would need a store of their own beside the
        // member's flags, and a second road for the membership a later growth founds the
        // cluster with. Growing cannot be undone, so everything a refusal depends on is
        // checked first: a refused update changes nothing.
        if self.shared.raft().is_none() {
            super::auth::admin(&self.shared, &req).await?;
            parse_urls(&req.get_ref().peer_ur_ls)?;
            if req.get_ref().id != self.shared.member_id {
                return Err(Error::MemberNotFound.into());
            }
            super::grow::grow(&self.shared).await?;
        }
        on_leader!(self, req, MemberUpdate, peer_ur_ls)
    }

    async fn member_list(
        &self,
        req: Request<pb::MemberListRequest>,
    ) -> Result<Response<pb::MemberListResponse>, Status> {
        let s = &self.shared;
        // etcd answers MemberList from the membership store, without a revision.
        let header = s.header_exact(0);
        // Caught up first, then anyone authenticated (etcd's order).
        if s.raft().is_some() && req.get_ref().linearizable {
            super::apply::linearizable(s).await?;
        }
        super::auth::authenticated(s, &req).await?;
        Ok(Response::new(pb::MemberListResponse { header, members: member_list(s) }))
    }

    async fn member_promote(
        &self,
        req: Request<pb::MemberPromoteRequest>,
    ) -> Result<Response<pb::MemberPromoteResponse>, Status> {
        if self.shared.raft().is_none() {
            super::auth::admin(&self.shared, &req).await?;
            return Err(alone_promote(&self.shared, req.get_ref().id).into());
        }
        on_leader!(self, req, MemberPromote)
    }
}
