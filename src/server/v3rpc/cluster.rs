//! The Cluster service: checks the caller and the peer URLs of a request, then asks the member
//! (`etcdserver::membership`), which lists, adds, removes, updates and promotes members.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::proto::etcdserverpb as pb;
use crate::raft::membership::normalize_url;
use crate::server::etcdserver::member::Member;
use crate::server::etcdserver::membership;

#[derive(Debug)]
pub struct ClusterService {
    shared: Arc<Member>,
}

impl ClusterService {
    pub fn new(shared: Arc<Member>) -> Self {
        Self { shared }
    }
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

/// Checks the caller of a membership change: a learner refuses it, then only root may make it,
/// checked by the member the client called before anything else (etcd's
/// `checkMembershipOperationPermission`).
async fn admin<T>(s: &Member, req: &Request<T>) -> Result<(), Status> {
    membership::refuse_learner(s)?;
    crate::server::v3rpc::auth::admin(s, req).await?;
    Ok(())
}

#[tonic::async_trait]
impl pb::cluster_server::Cluster for ClusterService {
    async fn member_add(
        &self,
        req: Request<pb::MemberAddRequest>,
    ) -> Result<Response<pb::MemberAddResponse>, Status> {
        admin(&self.shared, &req).await?;
        let mut r = req.into_inner();
        r.peer_ur_ls = parse_urls(&r.peer_ur_ls)?;
        Ok(Response::new(membership::add(&self.shared, r).await?))
    }

    async fn member_remove(
        &self,
        req: Request<pb::MemberRemoveRequest>,
    ) -> Result<Response<pb::MemberRemoveResponse>, Status> {
        admin(&self.shared, &req).await?;
        Ok(Response::new(membership::remove(&self.shared, req.into_inner()).await?))
    }

    async fn member_update(
        &self,
        req: Request<pb::MemberUpdateRequest>,
    ) -> Result<Response<pb::MemberUpdateResponse>, Status> {
        admin(&self.shared, &req).await?;
        let mut r = req.into_inner();
        r.peer_ur_ls = parse_urls(&r.peer_ur_ls)?;
        Ok(Response::new(membership::update(&self.shared, r).await?))
    }

    async fn member_list(
        &self,
        req: Request<pb::MemberListRequest>,
    ) -> Result<Response<pb::MemberListResponse>, Status> {
        let s = &self.shared;
        // etcd answers MemberList from the membership store, without a revision.
        let header = s.header_exact(0);
        // Caught up first (nothing to catch up with on a member alone), then anyone
        // authenticated (etcd's order).
        if req.get_ref().linearizable {
            crate::server::etcdserver::apply::linearizable(s).await?;
        }
        crate::server::v3rpc::auth::authenticated(s, &req).await?;
        Ok(Response::new(pb::MemberListResponse { header, members: membership::list(s) }))
    }

    async fn member_promote(
        &self,
        req: Request<pb::MemberPromoteRequest>,
    ) -> Result<Response<pb::MemberPromoteResponse>, Status> {
        admin(&self.shared, &req).await?;
        Ok(Response::new(membership::promote(&self.shared, req.into_inner()).await?))
    }
}
