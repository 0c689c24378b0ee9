//! The Forward service on the peer listener: client requests only the leader can answer,
//! sent by the member the client called (etcd's followers forward lease renewals to the
//! leader the same way). A member that does not lead answers "not the leader" and the caller
//! tries again with the new one.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::{Shared, cluster, lease};
use crate::error::Error;
use crate::proto::etcdserverpb as pb;
use crate::proto::memetcdpb as mpb;

#[derive(Debug)]
pub struct ForwardService {
    shared: Arc<Shared>,
}

impl ForwardService {
    pub fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    /// Admits a call from a member of this cluster, to this member while it leads.
    fn admit<T>(&self, req: &Request<T>) -> Result<(), Status> {
        let raft = self.shared.raft().ok_or(Error::Internal)?;
        raft.check_peer(req)?;
        if !raft.is_leader() {
            return Err(Error::NotLeader.into());
        }
        Ok(())
    }
}

#[tonic::async_trait]
impl mpb::forward_server::Forward for ForwardService {
    async fn lease_renew(
        &self,
        req: Request<pb::LeaseKeepAliveRequest>,
    ) -> Result<Response<mpb::RenewResponse>, Status> {
        self.admit(&req)?;
        let ttl = lease::renew(&self.shared, req.into_inner().id).await;
        Ok(Response::new(mpb::RenewResponse { ttl }))
    }

    async fn lease_time_to_live(
        &self,
        req: Request<pb::LeaseTimeToLiveRequest>,
    ) -> Result<Response<pb::LeaseTimeToLiveResponse>, Status> {
        self.admit(&req)?;
        Ok(Response::new(lease::time_to_live(&self.shared, req.into_inner()).await))
    }

    async fn member_add(
        &self,
        req: Request<pb::MemberAddRequest>,
    ) -> Result<Response<pb::MemberAddResponse>, Status> {
        self.admit(&req)?;
        cluster::member_add(&self.shared, req.into_inner()).await.map(Response::new)
    }

    async fn member_remove(
        &self,
        req: Request<pb::MemberRemoveRequest>,
    ) -> Result<Response<pb::MemberRemoveResponse>, Status> {
        self.admit(&req)?;
        cluster::member_remove(&self.shared, req.into_inner()).await.map(Response::new)
    }

    async fn member_update(
        &self,
        req: Request<pb::MemberUpdateRequest>,
    ) -> Result<Response<pb::MemberUpdateResponse>, Status> {
        self.admit(&req)?;
        cluster::member_update(&self.shared, req.into_inner()).await.map(Response::new)
    }

    async fn member_promote(
        &self,
        req: Request<pb::MemberPromoteRequest>,
    ) -> Result<Response<pb::MemberPromoteResponse>, Status> {
        self.admit(&req)?;
        cluster::member_promote(&self.shared, req.into_inner()).await.map(Response::new)
    }
}
