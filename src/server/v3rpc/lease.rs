//! The Lease service. Where leases are renewed and expired (this member or its cluster's
//! leader) is the member's business (`etcdserver::lessor`).

use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::auth::AuthInfo;
use crate::error::Error;
use crate::proto::etcdserverpb as pb;
use crate::server::etcdserver::lessor;
use crate::server::etcdserver::member::Member;
use crate::server::etcdserver::submit::submit;
use crate::server::v3rpc::auth;

#[derive(Debug)]
pub struct LeaseService {
    shared: Arc<Member>,
}

impl LeaseService {
    pub fn new(shared: Arc<Member>) -> Self {
        Self { shared }
    }
}

type KeepAliveStream =
    Pin<Box<dyn Stream<Item = Result<pb::LeaseKeepAliveResponse, Status>> + Send>>;

/// Every key of these leases may be read by `who` (root may read all): etcd's checks of
/// TimeToLive with keys and of Leases.
fn check_reads(s: &Member, who: &Option<AuthInfo>, leases: &[i64]) -> Result<(), Error> {
    if !s.auth.is_enabled() {
        return Ok(());
    }
    auth::require(s, who)?;
    if s.auth.check_admin(who.as_ref()).is_ok() {
        return Ok(());
    }
    for id in leases {
        for k in s.lessor.time_to_live(*id, true).iter().flat_map(|t| &t.keys) {
            s.auth.check_range(who.as_ref(), k, b"", false)?;
        }
    }
    Ok(())
}

/// etcd's `checkLeaseRenew`: a keep-alive needs write permission on the lease's keys.
fn check_renew(s: &Member, who: &Option<AuthInfo>, id: i64) -> Result<(), Error> {
    if !s.auth.is_enabled() {
        return Ok(());
    }
    auth::require(s, who)?;
    if s.auth.check_admin(who.as_ref()).is_ok() {
        return Ok(());
    }
    for k in s.lessor.time_to_live(id, true).iter().flat_map(|t| &t.keys) {
        s.auth.check_range(who.as_ref(), k, b"", true)?;
    }
    Ok(())
}

#[tonic::async_trait]
impl pb::lease_server::Lease for LeaseService {
    async fn lease_grant(
        &self,
        req: Request<pb::LeaseGrantRequest>,
    ) -> Result<Response<pb::LeaseGrantResponse>, Status> {
        // Any authenticated user may grant (etcd's requireAuthInfo), before the change.
        let who = auth::authenticated(&self.shared, &req).await?;
        let mut g = submit(&self.shared, &who, req.into_inner()).await?;
        self.shared.fill(&mut g.header);
        Ok(Response::new(g))
    }

    async fn lease_revoke(
        &self,
        req: Request<pb::LeaseRevokeRequest>,
    ) -> Result<Response<pb::LeaseRevokeResponse>, Status> {
        // Someone, checked here; whether they may write the lease's keys, where it is applied.
        let who = auth::authenticated(&self.shared, &req).await?;
        let mut r = submit(&self.shared, &who, req.into_inner()).await?;
        self.shared.fill(&mut r.header);
        Ok(Response::new(r))
    }

    type LeaseKeepAliveStream = KeepAliveStream;

    async fn lease_keep_alive(
        &self,
        req: Request<Streaming<pb::LeaseKeepAliveRequest>>,
    ) -> Result<Response<Self::LeaseKeepAliveStream>, Status> {
        // Read once per stream; checked for each renewal while auth is enabled.
        let creds = auth::credentials(&self.shared, &req);
        let mut inbound = req.into_inner();
        let (tx, rx) = mpsc::channel(16);
        let shared = self.shared.clone();
        tokio::spawn(async move {
            loop {
                let r = match inbound.message().await {
                    Ok(Some(r)) => r,
                    Ok(None) => break,
                    // A request that does not decode or is over the receive limit fails the
                    // stream with its error, as etcd's does, so the client can tell its broken
                    // request from a server that ended the stream. After a reset nobody reads
                    // it; the send then fails harmlessly.
                    Err(status) => {
                        let _ = tx.send(Err(status)).await;
                        break;
                    }
                };
                if shared.auth.is_enabled() {
                    let who = auth::identify(&shared, &creds).await;
                    if let Err(e) = who.and_then(|w| check_renew(&shared, &w, r.id)) {
                        let _ = tx.send(Err(e.into())).await;
                        break;
                    }
                }
                // An unknown lease answers TTL 0, as in etcd; so does an expiring one, but only
                // once its keys are gone (etcd's renew waits for the revocation).
                let ttl = match lessor::renew_anywhere(&shared, r.id).await {
                    Ok(ttl) => ttl,
                    Err(e) => {
                        let _ = tx.send(Err(e.into())).await;
                        break;
                    }
                };
                let resp = pb::LeaseKeepAliveResponse { header: shared.header(0), id: r.id, ttl };
                if tx.send(Ok(resp)).await.is_err() {
                    break;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn lease_time_to_live(
        &self,
        req: Request<pb::LeaseTimeToLiveRequest>,
    ) -> Result<Response<pb::LeaseTimeToLiveResponse>, Status> {
        let who = auth::authenticated(&self.shared, &req).await?;
        let r = req.into_inner();
        if r.keys {
            check_reads(&self.shared, &who, &[r.id])?;
        }
        Ok(Response::new(lessor::time_to_live_anywhere(&self.shared, r).await?))
    }

    async fn lease_leases(
        &self,
        req: Request<pb::LeaseLeasesRequest>,
    ) -> Result<Response<pb::LeaseLeasesResponse>, Status> {
        let who = auth::caller(&self.shared, &req).await?;
        let ids = self.shared.lessor.leases();
        // A lease left out is gone with its keys for every read after the answer.
        self.shared.store.wait_settled().await;
        check_reads(&self.shared, &who, &ids)?;
        let leases = ids.into_iter().map(|id| pb::LeaseStatus { id }).collect();
        Ok(Response::new(pb::LeaseLeasesResponse { header: self.shared.header(0), leases }))
    }
}
