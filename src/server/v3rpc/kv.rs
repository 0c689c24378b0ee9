//! The KV service: Range, Put, DeleteRange, Txn, Compact.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::auth::AuthInfo;
use crate::error::Error;
use crate::proto::etcdserverpb as pb;
use crate::server::etcdserver::apply;
use crate::server::etcdserver::convert;
use crate::server::etcdserver::member::Member;
use crate::server::etcdserver::submit::{TenantCompaction, submit};
use crate::server::etcdserver::tenant;
use crate::server::v3rpc::auth;
use crate::server::v3rpc::request_stats::{Asked, RequestStats};

#[derive(Debug)]
pub struct KvService {
    shared: Arc<Member>,
}

impl KvService {
    pub fn new(shared: Arc<Member>) -> Self {
        Self { shared }
    }
}

/// Reads `req` as `who` (identified once the member caught up, for a linearizable read): the
/// permission check, the read, and the answer's header. The Lock and Election services read
/// through it too, as etcd's read through its KV.
pub(in crate::server) fn range(
    s: &Member,
    who: Option<&AuthInfo>,
    req: pb::RangeRequest,
) -> Result<pb::RangeResponse, Error> {
    if s.auth.is_enabled() {
        s.auth.check_range(who, &req.key, &req.range_end, false)?;
    }
    s.tenants.read(&s.auth, &req.key);
    let r = convert::range_request(req)?;
    let started = std::time::Instant::now();
    let read = s.store.range(&r);
    s.metrics.ranged(read.is_ok(), started.elapsed());
    let mut resp = convert::range_response(read?);
    // The auth state changed while reading: the answer may hold what the caller may no
    // longer read (etcd's doSerialize checks the same).
    if who.is_some_and(|w| w.revision != s.auth.revision()) {
        return Err(Error::AuthOldRevision);
    }
    s.fill(&mut resp.header);
    Ok(resp)
}

/// The key a txn is counted under for its tenant: its first compare's, else its first
/// operation's (kube-apiserver's txns compare and write one object).
fn txn_key(t: &pb::TxnRequest) -> Option<&[u8]> {
    if let Some(c) = t.compare.first() {
        return Some(&c.key);
    }
    t.success.iter().chain(&t.failure).find_map(|op| match &op.request {
        Some(pb::request_op::Request::RequestRange(r)) => Some(&r.key[..]),
        Some(pb::request_op::Request::RequestPut(p)) => Some(&p.key[..]),
        Some(pb::request_op::Request::RequestDeleteRange(d)) => Some(&d.key[..]),
        _ => None,
    })
}

/// Serves one KV call of `method` with `serve`, timed for etcd's "request stats" line.
macro_rules! timed {
    ($self:ident, $req:ident, $method:literal, $asked:expr, $serve:expr) => {{
        let stats = RequestStats::start($method, $req.remote_addr(), $asked($req.get_ref()));
        let answer: Result<_, Status> = $serve.await;
        stats.finish($self.shared.config.warning_unary_request_duration, &answer);
        answer.map(Response::new)
    }};
}

#[tonic::async_trait]
impl pb::kv_server::Kv for KvService {
    async fn range(
        &self,
        req: Request<pb::RangeRequest>,
    ) -> Result<Response<pb::RangeResponse>, Status> {
        timed!(self, req, "/etcdserverpb.KV/Range", Asked::range, async {
            if !req.get_ref().serializable {
                apply::linearizable(&self.shared).await?;
            }
            // Who, and whether they may, once caught up and before reading (etcd's doSerialize).
            let who = auth::caller(&self.shared, &req).await?;
            Ok(range(&self.shared, who.as_ref(), req.into_inner())?)
        })
    }

    async fn put(&self, req: Request<pb::PutRequest>) -> Result<Response<pb::PutResponse>, Status> {
        timed!(self, req, "/etcdserverpb.KV/Put", Asked::put, async {
            self.shared.tenants.wrote(&self.shared.auth, &req.get_ref().key);
            let who = auth::caller(&self.shared, &req).await?;
            let mut r = submit(&self.shared, &who, req.into_inner()).await?;
            self.shared.fill(&mut r.header);
            Ok(r)
        })
    }

    async fn delete_range(
        &self,
        req: Request<pb::DeleteRangeRequest>,
    ) -> Result<Response<pb::DeleteRangeResponse>, Status> {
        timed!(self, req, "/etcdserverpb.KV/DeleteRange", Asked::delete_range, async {
            self.shared.tenants.wrote(&self.shared.auth, &req.get_ref().key);
            let who = auth::caller(&self.shared, &req).await?;
            let mut r = submit(&self.shared, &who, req.into_inner()).await?;
            self.shared.fill(&mut r.header);
            Ok(r)
        })
    }

    async fn txn(&self, req: Request<pb::TxnRequest>) -> Result<Response<pb::TxnResponse>, Status> {
        timed!(self, req, "/etcdserverpb.KV/Txn", Asked::txn, async {
            if let Some(key) = txn_key(req.get_ref()) {
                self.shared.tenants.wrote(&self.shared.auth, key);
            }
            let who = auth::caller(&self.shared, &req).await?;
            let mut t = req.into_inner();
            // kube-apiserver's compactor: a tenant's sees its own compact_rev_key.
            let own = who
                .as_ref()
                .filter(|_| tenant::names_compact_rev_key(&t))
                .and_then(|w| self.shared.tenants.owned_by(&self.shared.auth, Some(w)));
            if let Some(tenant) = &own {
                tenant.own_txn(&mut t);
            }
            let mut r = submit(&self.shared, &who, t).await?;
            if let Some(tenant) = &own {
                tenant.shown_txn(&mut r);
            }
            self.shared.fill(&mut r.header);
            Ok(r)
        })
    }

    async fn compact(
        &self,
        req: Request<pb::CompactionRequest>,
    ) -> Result<Response<pb::CompactionResponse>, Status> {
        timed!(self, req, "/etcdserverpb.KV/Compact", |_| Asked::Other, async {
            let who = auth::caller(&self.shared, &req).await?;
            // A tenant's user compacts its own prefix (mem_etcd's own: etcd refuses it).
            if let Some(t) = self.shared.tenants.owned_by(&self.shared.auth, who.as_ref()) {
                let change =
                    TenantCompaction { prefix: t.prefix.clone(), request: req.into_inner() };
                let mut r = submit(&self.shared, &who, change).await?;
                self.shared.fill(&mut r.header);
                return Ok(r);
            }
            // Only root may compact, checked before the change (etcd's kvServer.Compact).
            self.shared.auth.check_admin(who.as_ref())?;
            let mut r = submit(&self.shared, &who, req.into_inner()).await?;
            self.shared.fill(&mut r.header);
            Ok(r)
        })
    }
}
