//! The Lock service (etcd's `v3lock`): Lock, Unlock.
//!
//! A lock named `n` is held by the oldest key under `n/`: Lock writes the caller's key
//! (`n/<lease hex>`, with its lease, if it does not exist yet) and waits until every older key
//! under `n/` is deleted; Unlock deletes a key. Built on `v3rpc::concurrency`, as etcd's on its
//! `concurrency.Mutex`; errors reach the client as etcd's client-side errors do
//! (`status::through_client`).

use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::error::{Error, Result};
use crate::proto::etcdserverpb as pb;
use crate::proto::v3lockpb as lpb;
use crate::server::etcdserver::member::Member;
use crate::server::v3rpc::auth;
use crate::server::v3rpc::concurrency::{self as cc, Client, Undo};
use crate::server::v3rpc::status;

#[derive(Debug)]
pub struct LockService {
    shared: Arc<Member>,
}

impl LockService {
    pub fn new(shared: Arc<Member>) -> Self {
        Self { shared }
    }

    fn client<T>(&self, req: &Request<T>) -> Client {
        Client::new(self.shared.clone(), auth::credentials(&self.shared, req))
    }
}

#[tonic::async_trait]
impl lpb::lock_server::Lock for LockService {
    async fn lock(
        &self,
        req: Request<lpb::LockRequest>,
    ) -> Result<Response<lpb::LockResponse>, Status> {
        let c = self.client(&req);
        lock(&c, req.into_inner()).await.map(Response::new).map_err(status::through_client)
    }

    async fn unlock(
        &self,
        req: Request<lpb::UnlockRequest>,
    ) -> Result<Response<lpb::UnlockResponse>, Status> {
        let c = self.client(&req);
        let r = c.delete(req.into_inner().key).await.map_err(status::through_client)?;
        Ok(Response::new(lpb::UnlockResponse { header: r.header }))
    }
}

/// etcd's `Mutex.Lock` in a session on the request's lease.
async fn lock(c: &Client, req: lpb::LockRequest) -> Result<lpb::LockResponse> {
    let lease = c.session(req.lease).await?;
    let prefix = cc::prefix(&req.name);
    let key = cc::session_key(&prefix, lease);
    // One round trip when uncontended: the key written (or, the session's key existing
    // already, read back), and the holder read, in one Txn.
    let holder = || cc::range_op(cc::first_created(&prefix));
    let t = pb::TxnRequest {
        compare: vec![cc::created_at(&key, 0)],
        success: vec![cc::put_op(key.clone(), Default::default(), lease), holder()],
        failure: vec![cc::range_op(cc::get(key.clone())), holder()],
    };
    let t = c.txn(t).await?;
    let mine = if t.succeeded {
        t.header.as_ref().map_or(0, |h| h.revision)
    } else {
        cc::read_kvs(&t, 0).first().ok_or(Error::Internal)?.create_revision
    };
    if cc::read_kvs(&t, 1).first().is_none_or(|kv| kv.create_revision == mine) {
        return Ok(lpb::LockResponse { header: t.header, key });
    }
    // Released if the wait fails, or the call is dropped while it waits (its client went).
    let release = Undo::new(c, pb::DeleteRangeRequest { key: key.clone(), ..Default::default() });
    if let Err(e) = cc::wait_deletes(c, &prefix, mine - 1).await {
        release.now().await;
        return Err(e);
    }
    // The key may have gone with its lease while the call waited.
    let got = match c.get(cc::get(key.clone())).await {
        Ok(g) => g,
        Err(e) => {
            release.now().await;
            return Err(e);
        }
    };
    release.disarm();
    if got.kvs.is_empty() {
        return Err(Error::SessionExpired);
    }
    Ok(lpb::LockResponse { header: got.header, key })
}
