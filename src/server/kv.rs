//! The KV service: Range, Put, DeleteRange, Txn, Compact.

use std::sync::Arc;

use prost::Message;
use tonic::{Request, Response, Status};

use super::apply::{self, propose};
use super::{Shared, alarm, auth, convert};
use crate::auth::AuthInfo;
use crate::error::Error;
use crate::mvcc::Refused;
use crate::proto::etcdserverpb as pb;
use crate::proto::memetcdpb::request::Request as Req;
use crate::proto::memetcdpb::response::Response as Resp;

#[derive(Debug)]
pub struct KvService {
    shared: Arc<Shared>,
}

impl KvService {
    pub fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }
}

impl KvService {
    /// A Txn in a cluster: a read-only one is served here after a read barrier (unless all its
    /// ranges are serializable), as etcd serves it without the log; one that may write is
    /// proposed.
    async fn txn_in_cluster(
        &self,
        req: pb::TxnRequest,
        who: Option<AuthInfo>,
    ) -> Result<pb::TxnResponse, Status> {
        let s = &self.shared;
        let t = convert::txn_request(req.clone())?;
        let size = req.encoded_len();
        s.store.check_txn(&t, size)?;
        if t.is_read_only() {
            if !t.is_serializable() {
                apply::linearizable(s).await?;
            }
            if s.auth.is_enabled() {
                auth::check_txn(s, who.as_ref(), &req)?;
            }
            // Read-only: never handed back (only writes are).
            let applied = s.store.txn(t, size).map_err(|r| match r {
                Refused::Error(e) => e,
                Refused::Closed(_) => Error::Internal,
            })?;
            s.store.wait_visible(applied.visible_at).await;
            let mut resp = convert::txn_response(applied.response);
            s.fill(&mut resp.header);
            return Ok(resp);
        }
        apply::quota(s, alarm::txn_cost(&req)).await?;
        let Resp::Txn(mut r) = apply::propose_as(s, Req::Txn(req), auth::header(&who)).await?
        else {
            return Err(Error::Internal.into());
        };
        s.fill(&mut r.header);
        Ok(r)
    }
}

/// A member alone's write refused: "lease not found" is answered once readers see every
/// revision allocated by then, as the revocation that removed the lease allocated the revision
/// its keys went at first (so no read after the answer finds a key of the lease).
async fn refused(s: &Shared, e: Error) -> Status {
    if e == Error::LeaseNotFound {
        s.store.wait_settled().await;
    }
    e.into()
}

#[tonic::async_trait]
impl pb::kv_server::Kv for KvService {
    async fn range(
        &self,
        req: Request<pb::RangeRequest>,
    ) -> Result<Response<pb::RangeResponse>, Status> {
        if self.shared.raft().is_some() && !req.get_ref().serializable {
            apply::linearizable(&self.shared).await?;
        }
        // Who, and whether they may, once caught up and before reading (etcd's doSerialize).
        let who = auth::caller(&self.shared, &req).await?;
        let req = req.into_inner();
        if self.shared.auth.is_enabled() {
            self.shared.auth.check_range(who.as_ref(), &req.key, &req.range_end, false)?;
        }
        let r = convert::range_request(req)?;
        let mut resp = convert::range_response(self.shared.store.range(&r)?);
        // The auth state changed while reading: the answer may hold what the caller may no
        // longer read (etcd's doSerialize checks the same).
        if who.as_ref().is_some_and(|w| w.revision != self.shared.auth.revision()) {
            return Err(Error::AuthOldRevision.into());
        }
        self.shared.fill(&mut resp.header);
        Ok(Response::new(resp))
    }

    async fn put(&self, req: Request<pb::PutRequest>) -> Result<Response<pb::PutResponse>, Status> {
        let who = auth::caller(&self.shared, &req).await?;
        let mut req = req.into_inner();
        loop {
            if self.shared.raft().is_some() {
                let s = &self.shared;
                s.store.check_put(&convert::put_request(req.clone()), req.encoded_len())?;
                apply::quota(s, alarm::put_cost(&req)).await?;
                let h = auth::header(&who);
                let Resp::Put(mut r) = apply::propose_as(s, Req::Put(req), h).await? else {
                    return Err(Error::Internal.into());
                };
                s.fill(&mut r.header);
                return Ok(Response::new(r));
            }
            self.shared.alarms.check_space(&self.shared.store, alarm::put_cost(&req))?;
            let size = req.encoded_len();
            let applied = {
                let gate = self.shared.auth.write_gate();
                if gate.is_some() {
                    auth::check_put(&self.shared, who.as_ref(), &req)?;
                }
                self.shared.store.put(convert::put_request(req), size)
            };
            let applied = match applied {
                Ok(a) => a,
                Err(Refused::Error(e)) => return Err(refused(&self.shared, e).await),
                // The member is growing into a cluster: once it has, through Raft.
                Err(Refused::Closed(r)) => {
                    req = convert::put_back(r);
                    self.shared.growth_settled().await;
                    continue;
                }
            };
            self.shared.store.wait_visible(applied.visible_at).await;
            let mut resp = convert::put_response(applied.response);
            self.shared.fill(&mut resp.header);
            return Ok(Response::new(resp));
        }
    }

    async fn delete_range(
        &self,
        req: Request<pb::DeleteRangeRequest>,
    ) -> Result<Response<pb::DeleteRangeResponse>, Status> {
        let who = auth::caller(&self.shared, &req).await?;
        let mut req = req.into_inner();
        loop {
            if self.shared.raft().is_some() {
                let s = &self.shared;
                let d = convert::delete_request(req.clone());
                s.store.check_delete_range(&d, req.encoded_len())?;
                let h = auth::header(&who);
                let Resp::DeleteRange(mut r) =
                    apply::propose_as(s, Req::DeleteRange(req), h).await?
                else {
                    return Err(Error::Internal.into());
                };
                s.fill(&mut r.header);
                return Ok(Response::new(r));
            }
            let size = req.encoded_len();
            let applied = {
                let gate = self.shared.auth.write_gate();
                if gate.is_some() {
                    auth::check_delete(&self.shared, who.as_ref(), &req)?;
                }
                self.shared.store.delete_range(convert::delete_request(req), size)
            };
            let applied = match applied {
                Ok(a) => a,
                Err(Refused::Error(e)) => return Err(e.into()),
                Err(Refused::Closed(r)) => {
                    req = convert::delete_back(r);
                    self.shared.growth_settled().await;
                    continue;
                }
            };
            self.shared.store.wait_visible(applied.visible_at).await;
            let mut resp = convert::delete_response(applied.response);
            self.shared.fill(&mut resp.header);
            return Ok(Response::new(resp));
        }
    }

    async fn txn(&self, req: Request<pb::TxnRequest>) -> Result<Response<pb::TxnResponse>, Status> {
        let who = auth::caller(&self.shared, &req).await?;
        let mut req = req.into_inner();
        loop {
            if self.shared.raft().is_some() {
                return self.txn_in_cluster(req, who).await.map(Response::new);
            }
            self.shared.alarms.check_space(&self.shared.store, alarm::txn_cost(&req))?;
            let size = req.encoded_len();
            let applied = {
                let gate = self.shared.auth.write_gate();
                if gate.is_some() {
                    auth::check_txn(&self.shared, who.as_ref(), &req)?;
                }
                self.shared.store.txn(convert::txn_request(req)?, size)
            };
            let applied = match applied {
                Ok(a) => a,
                Err(Refused::Error(e)) => return Err(refused(&self.shared, e).await),
                Err(Refused::Closed(t)) => {
                    req = convert::txn_back(t);
                    self.shared.growth_settled().await;
                    continue;
                }
            };
            self.shared.store.wait_visible(applied.visible_at).await;
            let mut resp = convert::txn_response(applied.response);
            self.shared.fill(&mut resp.header);
            return Ok(Response::new(resp));
        }
    }

    async fn compact(
        &self,
        req: Request<pb::CompactionRequest>,
    ) -> Result<Response<pb::CompactionResponse>, Status> {
        // Only root may compact, checked before the proposal (etcd's kvServer.Compact).
        auth::admin(&self.shared, &req).await?;
        let req = req.into_inner();
        let _alone = self.shared.alone_writes().await;
        if self.shared.raft().is_some() {
            let Resp::Compaction(mut r) = propose(&self.shared, Req::Compaction(req)).await? else {
                return Err(Error::Internal.into());
            };
            self.shared.fill(&mut r.header);
            return Ok(Response::new(r));
        }
        let rev = req.revision;
        // Off the runtime's threads: a compaction waits for the WAL and walks every partition.
        let shared = self.shared.clone();
        let c = tokio::task::spawn_blocking(move || shared.store.compact(rev))
            .await
            .map_err(|e| Status::internal(format!("compaction task failed: {e}")))??;
        Ok(Response::new(pb::CompactionResponse { header: self.shared.header(c.revision) }))
    }
}
