//! The Cluster service: one member, this one. Membership cannot change.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::Shared;
use crate::error::Error;
use crate::proto::etcdserverpb as pb;

#[derive(Debug)]
pub struct ClusterService {
    shared: Arc<Shared>,
}

impl ClusterService {
    pub fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }
}

#[tonic::async_trait]
impl pb::cluster_server::Cluster for ClusterService {
    async fn member_add(
        &self,
        _: Request<pb::MemberAddRequest>,
    ) -> Result<Response<pb::MemberAddResponse>, Status> {
        Err(Error::MemberChangeUnsupported.into())
    }

    async fn member_remove(
        &self,
        _: Request<pb::MemberRemoveRequest>,
    ) -> Result<Response<pb::MemberRemoveResponse>, Status> {
        Err(Error::MemberChangeUnsupported.into())
    }

    async fn member_update(
        &self,
        _: Request<pb::MemberUpdateRequest>,
    ) -> Result<Response<pb::MemberUpdateResponse>, Status> {
        Err(Error::MemberChangeUnsupported.into())
    }

    async fn member_list(
        &self,
        _: Request<pb::MemberListRequest>,
    ) -> Result<Response<pb::MemberListResponse>, Status> {
        let s = &self.shared;
        let me = pb::Member {
            id: s.member_id,
            name: s.config.name.clone(),
            peer_ur_ls: s.config.initial_advertise_peer_urls.clone(),
            client_ur_ls: s.config.advertised_client_urls(),
            is_learner: false,
        };
        // etcd answers MemberList from the membership store, without a revision.
        let header = s.header_exact(0);
        Ok(Response::new(pb::MemberListResponse { header, members: vec![me] }))
    }

    async fn member_promote(
        &self,
        _: Request<pb::MemberPromoteRequest>,
    ) -> Result<Response<pb::MemberPromoteResponse>, Status> {
        Err(Error::MemberChangeUnsupported.into())
    }
}
