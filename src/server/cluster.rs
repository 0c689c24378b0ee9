//! The Cluster service: membership. A member alone lists itself, grows into a cluster on its
//! first MemberAdd (`server::grow`) and refuses other changes ("not capable"); a cluster member answers from the Raft membership plus the names and client URLs
//! members published, and carries out changes on the leader (a follower forwards them), with
//! etcd's checks and errors.

use std::sync::Arc;
use std::time::Duration;

use tonic::{Request, Response, Status};

use super::Shared;
use crate::error::Error;
use crate::proto::etcdserverpb as pb;
use crate::raft::RaftNode;
use crate::raft::membership::{member_id, normalize_url};

#[derive(Debug)]
pub struct ClusterService {
    shared: Arc<Shared>,
}

impl ClusterService {
    pub fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }
}

/// Every member, as etcd lists them (by id).
pub fn members(s: &Shared, raft: &RaftNode) -> Vec<pb::Member> {
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

/// Peer URLs as given, or etcd's error for a bad one.
fn parse_urls(urls: &[String]) -> Result<Vec<String>, Status> {
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
fn started(s: &Shared, id: u64) -> bool {
    s.members.lock().get(&id).is_some_and(|m| !m.name.is_empty())
}

/// Whether `id` has been connected since at least `HEALTH_INTERVAL` ago.
fn connected_long_enough(raft: &RaftNode, id: u64) -> bool {
    raft.active_since(id).is_some_and(|t| t.elapsed() >= HEALTH_INTERVAL)
}

/// Enough started voters for a quorum of `voters` plus `extra` (etcd's `IsReadyTo...` checks).
fn enough_started(s: &Shared, voters: &[u64], extra: usize) -> bool {
    let n = voters.len() + extra;
    let up = voters.iter().filter(|v| started(s, **v)).count() + extra;
    up > n / 2
}

/// The leader's side of the membership changes.
pub async fn member_add(
    s: &Shared,
    r: pb::MemberAddRequest,
) -> Result<pb::MemberAddResponse, Status> {
    let raft = s.raft().ok_or(Error::MemberChangeUnsupported)?;
    let urls = parse_urls(&r.peer_ur_ls)?;
    if urls_taken(raft, &urls, 0) {
        return Err(Error::PeerUrlExists.into());
    }
    let (voters, nodes) = raft.membership();
    let voters: Vec<u64> = voters.into_iter().collect();
    if r.is_learner && nodes.keys().filter(|id| !voters.contains(id)).count() >= 1 {
        return Err(Error::TooManyLearners.into());
    }
    // etcd's strict reconfiguration checks: a voter that has not started counts against the
    // quorum at once, so enough members must be up; and every voter must have been reachable
    // for a while.
    if !r.is_learner && !enough_started(s, &voters, 1) {
        return Err(Error::NotEnoughStartedMembers.into());
    }
    if !voters.iter().all(|v| connected_long_enough(raft, *v)) {
        return Err(Error::UnhealthyCluster.into());
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
    s: &Shared,
    r: pb::MemberRemoveRequest,
) -> Result<pb::MemberRemoveResponse, Status> {
    let raft = s.raft().ok_or(Error::MemberChangeUnsupported)?;
    let (voters, nodes) = raft.membership();
    if !nodes.contains_key(&r.id) {
        return Err(Error::MemberNotFound.into());
    }
    if voters.contains(&r.id) {
        // etcd's checks: the members left must make a quorum of the smaller cluster, counting
        // the started ones and, unless the member going is down anyway, the connected ones.
        let rest: Vec<u64> = voters.iter().copied().filter(|v| *v != r.id).collect();
        if !enough_started(s, &rest, 0) {
            return Err(Error::NotEnoughStartedMembers.into());
        }
        let down = r.id != raft.id && raft.active_since(r.id).is_none();
        let active = voters.iter().filter(|v| connected_long_enough(raft, **v)).count();
        if !down && active.saturating_sub(1) < 1 + (voters.len() - 1) / 2 {
            return Err(Error::UnhealthyCluster.into());
        }
    }
    raft.remove_member(r.id).await?;
    Ok(pb::MemberRemoveResponse { header: s.header(0), members: members(s, raft) })
}

pub async fn member_update(
    s: &Shared,
    r: pb::MemberUpdateRequest,
) -> Result<pb::MemberUpdateResponse, Status> {
    let raft = s.raft().ok_or(Error::MemberChangeUnsupported)?;
    let urls = parse_urls(&r.peer_ur_ls)?;
    if !raft.membership().1.contains_key(&r.id) {
        return Err(Error::MemberNotFound.into());
    }
    if urls_taken(raft, &urls, r.id) {
        return Err(Error::PeerUrlExists.into());
    }
    raft.update_member(r.id, urls).await?;
    Ok(pb::MemberUpdateResponse { header: s.header(0), members: members(s, raft) })
}

pub async fn member_promote(
    s: &Shared,
    r: pb::MemberPromoteRequest,
) -> Result<pb::MemberPromoteResponse, Status> {
    let raft = s.raft().ok_or(Error::MemberChangeUnsupported)?;
    let (voters, nodes) = raft.membership();
    if !nodes.contains_key(&r.id) {
        return Err(Error::MemberNotFound.into());
    }
    if voters.contains(&r.id) {
        return Err(Error::MemberNotLearner.into());
    }
    // etcd promotes a learner only once it has 90% of the leader's log, and if the voters
    // then still make a quorum of started members.
    if !raft.learner_in_sync(r.id, 0.9) {
        return Err(Error::LearnerNotReady.into());
    }
    let voters: Vec<u64> = voters.into_iter().collect();
    if !enough_started(s, &voters, 1) {
        return Err(Error::NotEnoughStartedMembers.into());
    }
    raft.promote_member(r.id).await?;
    Ok(pb::MemberPromoteResponse { header: s.header(0), members: members(s, raft) })
}

/// The leader's Forward client, or why there is none.
fn leader_forward(raft: &RaftNode) -> Result<crate::raft::network::ForwardClient, Status> {
    let leader = raft.leader().ok_or(Error::NoLeader)?;
    Ok(raft.forward_client(leader).ok_or(Error::NoLeader)?)
}

/// A forwarded call's error as the client should see it.
pub fn forwarded_error(s: Status) -> Status {
    match Error::from_message(s.message()) {
        Some(Error::NotLeader) => Error::LeaderChanged.into(),
        Some(e) => e.into(),
        None if s.code() == tonic::Code::DeadlineExceeded => Error::Timeout.into(),
        None => s,
    }
}

/// Runs a membership change on the leader: here, or forwarded.
macro_rules! on_leader {
    ($self:ident, $req:ident, $local:ident, $rpc:ident) => {{
        let s = &$self.shared;
        if s.raft().is_some_and(|r| r.role().borrow().is_learner) {
            return Err(Error::LearnerRpc.into());
        }
        // Only root, checked by the member the client called, before anything else (etcd's
        // checkMembershipOperationPermission): the leader trusts a forwarded change.
        super::auth::admin(s, &$req).await?;
        let Some(raft) = s.raft() else { return Err(Error::MemberChangeUnsupported.into()) };
        let r = $req.into_inner();
        let mut resp = if raft.is_leader() {
            $local(s, r).await?
        } else {
            let mut c = leader_forward(raft)?;
            c.$rpc(r).await.map_err(forwarded_error)?.into_inner()
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
        // member as any cluster does.
        if self.shared.raft().is_none() {
            super::grow::grow(&self.shared).await?;
        }
        on_leader!(self, req, member_add, member_add)
    }

    async fn member_remove(
        &self,
        req: Request<pb::MemberRemoveRequest>,
    ) -> Result<Response<pb::MemberRemoveResponse>, Status> {
        on_leader!(self, req, member_remove, member_remove)
    }

    async fn member_update(
        &self,
        req: Request<pb::MemberUpdateRequest>,
    ) -> Result<Response<pb::MemberUpdateResponse>, Status> {
        on_leader!(self, req, member_update, member_update)
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
        if let Some(raft) = s.raft() {
            return Ok(Response::new(pb::MemberListResponse { header, members: members(s, raft) }));
        }
        let me = pb::Member {
            id: s.member_id,
            name: s.config.name.clone(),
            peer_ur_ls: s.config.initial_advertise_peer_urls.clone(),
            client_ur_ls: s.config.advertised_client_urls(),
            is_learner: false,
        };
        Ok(Response::new(pb::MemberListResponse { header, members: vec![me] }))
    }

    async fn member_promote(
        &self,
        req: Request<pb::MemberPromoteRequest>,
    ) -> Result<Response<pb::MemberPromoteResponse>, Status> {
        on_leader!(self, req, member_promote, member_promote)
    }
}
