//! The KV service: Range, Put, DeleteRange, Txn, Compact.

use std::sync::Arc;

use prost::Message;
use tonic::{Request, Response, Status};

use super::{Shared, alarm, convert};
use crate::proto::etcdserverpb as pb;

#[derive(Debug)]
pub struct KvService {
    shared: Arc<Shared>,
}

impl KvService {
    pub fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }
}

#[tonic::async_trait]
impl pb::kv_server::Kv for KvService {
    async fn range(
        &self,
        req: Request<pb::RangeRequest>,
    ) -> Result<Response<pb::RangeResponse>, Status> {
        let r = convert::range_request(req.into_inner())?;
        let mut resp = convert::range_response(self.shared.store.range(&r)?);
        self.shared.fill(&mut resp.header);
        Ok(Response::new(resp))
    }

    async fn put(&self, req: Request<pb::PutRequest>) -> Result<Response<pb::PutResponse>, Status> {
        let req = req.into_inner();
        self.shared.alarms.check_space(&self.shared.store, alarm::put_cost(&req))?;
        let size = req.encoded_len();
        let applied = self.shared.store.put(convert::put_request(req), size)?;
        self.shared.store.wait_visible(applied.visible_at).await;
        let mut resp = convert::put_response(applied.response);
        self.shared.fill(&mut resp.header);
        Ok(Response::new(resp))
    }

    async fn delete_range(
        &self,
        req: Request<pb::DeleteRangeRequest>,
    ) -> Result<Response<pb::DeleteRangeResponse>, Status> {
        let req = req.into_inner();
        let size = req.encoded_len();
        let applied = self.shared.store.delete_range(convert::delete_request(req), size)?;
        self.shared.store.wait_visible(applied.visible_at).await;
        let mut resp = convert::delete_response(applied.response);
        self.shared.fill(&mut resp.header);
        Ok(Response::new(resp))
    }

    async fn txn(&self, req: Request<pb::TxnRequest>) -> Result<Response<pb::TxnResponse>, Status> {
        let req = req.into_inner();
        self.shared.alarms.check_space(&self.shared.store, alarm::txn_cost(&req))?;
        let size = req.encoded_len();
        let applied = self.shared.store.txn(convert::txn_request(req)?, size)?;
        self.shared.store.wait_visible(applied.visible_at).await;
        let mut resp = convert::txn_response(applied.response);
        self.shared.fill(&mut resp.header);
        Ok(Response::new(resp))
    }

    async fn compact(
        &self,
        req: Request<pb::CompactionRequest>,
    ) -> Result<Response<pb::CompactionResponse>, Status> {
        let rev = req.into_inner().revision;
        // Off the runtime's threads: a compaction waits for a snapshot being streamed (it holds
        // the compaction lock) and for the WAL, and walks every partition.
        let shared = self.shared.clone();
        let c = tokio::task::spawn_blocking(move || shared.store.compact(rev))
            .await
            .map_err(|e| Status::internal(format!("compaction task failed: {e}")))??;
        Ok(Response::new(pb::CompactionResponse { header: self.shared.header(c.revision) }))
    }
}
