//! The floor: a KV service that answers Range and Put at once, touching no store, so that what a
//! request costs the serving stack alone (the listener, HTTP/2, tonic, the layers in front of
//! the routes, the runtime, the kernel's loopback TCP) can be measured apart from what mem_etcd
//! adds. `mem_etcd bench-floor` serves it in place of the member's KV on the member's own
//! stack; `mem_etcd bench-floor-tonic` on tonic's defaults, as a second anchor
//! (`benches/compare_etcd.sh floor`). Never served otherwise.

use tonic::{Request, Response, Status};

use crate::proto::etcdserverpb as pb;

/// Answers every Range with no keys and every Put with nothing, under one fixed header (what a
/// member's answers carry, so the responses have their real size).
#[derive(Debug, Clone)]
pub struct Floor {
    header: pb::ResponseHeader,
}

impl Floor {
    /// A floor whose answers carry `header`.
    pub fn new(header: pb::ResponseHeader) -> Self {
        Self { header }
    }
}

#[tonic::async_trait]
impl pb::kv_server::Kv for Floor {
    async fn range(
        &self,
        _req: Request<pb::RangeRequest>,
    ) -> Result<Response<pb::RangeResponse>, Status> {
        Ok(Response::new(pb::RangeResponse { header: Some(self.header), ..Default::default() }))
    }

    async fn put(
        &self,
        _req: Request<pb::PutRequest>,
    ) -> Result<Response<pb::PutResponse>, Status> {
        Ok(Response::new(pb::PutResponse { header: Some(self.header), prev_kv: None }))
    }

    async fn delete_range(
        &self,
        _req: Request<pb::DeleteRangeRequest>,
    ) -> Result<Response<pb::DeleteRangeResponse>, Status> {
        Err(Status::unimplemented("the floor serves Range and Put only"))
    }

    async fn txn(
        &self,
        _req: Request<pb::TxnRequest>,
    ) -> Result<Response<pb::TxnResponse>, Status> {
        Err(Status::unimplemented("the floor serves Range and Put only"))
    }

    async fn compact(
        &self,
        _req: Request<pb::CompactionRequest>,
    ) -> Result<Response<pb::CompactionResponse>, Status> {
        Err(Status::unimplemented("the floor serves Range and Put only"))
    }
}
