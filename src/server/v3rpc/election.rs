//! The Election service (etcd's `v3election`): Campaign, Proclaim, Leader, Observe, Resign.
//!
//! An election named `n` is led by the oldest key under `n/`, whose value is the leader's
//! proclamation. Campaign writes the candidate's key (`n/<lease hex>`, with its lease) and
//! waits until every older candidate's key is deleted; Proclaim and Resign change or delete
//! the leader's key while it is still the one created at the leader's revision. Built on
//! `v3rpc::concurrency`, as etcd's on its `concurrency.Election`; errors reach the client as
//! etcd's client-side errors do (`status::through_client`).

use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status};

use crate::error::{Error, Result};
use crate::proto::etcdserverpb as pb;
use crate::proto::mvccpb;
use crate::proto::v3electionpb as epb;
use crate::server::etcdserver::member::Member;
use crate::server::v3rpc::auth;
use crate::server::v3rpc::concurrency::{self as cc, Client, Undo};
use crate::server::v3rpc::status;

#[derive(Debug)]
pub struct ElectionService {
    shared: Arc<Member>,
}

impl ElectionService {
    pub fn new(shared: Arc<Member>) -> Self {
        Self { shared }
    }

    fn client<T>(&self, req: &Request<T>) -> Client {
        Client::new(self.shared.clone(), auth::credentials(&self.shared, req))
    }
}

type Answer<T> = std::result::Result<Response<T>, Status>;

#[tonic::async_trait]
impl epb::election_server::Election for ElectionService {
    async fn campaign(&self, req: Request<epb::CampaignRequest>) -> Answer<epb::CampaignResponse> {
        let c = self.client(&req);
        campaign(&c, req.into_inner()).await.map(Response::new).map_err(status::through_client)
    }

    async fn proclaim(&self, req: Request<epb::ProclaimRequest>) -> Answer<epb::ProclaimResponse> {
        let c = self.client(&req);
        let req = req.into_inner();
        let answer = async {
            let leader = req.leader.ok_or(Error::MissingLeaderKey)?;
            let lease = c.session(leader.lease).await?;
            proclaim(&c, &leader.key, leader.rev, lease, req.value).await
        };
        let header = answer.await.map_err(status::through_client)?;
        Ok(Response::new(epb::ProclaimResponse { header }))
    }

    async fn leader(&self, req: Request<epb::LeaderRequest>) -> Answer<epb::LeaderResponse> {
        let c = self.client(&req);
        leader(&c, &req.into_inner().name)
            .await
            .map(|(header, kv)| Response::new(epb::LeaderResponse { header, kv: Some(kv) }))
            .map_err(status::through_client)
    }

    type ObserveStream =
        Pin<Box<dyn Stream<Item = std::result::Result<epb::LeaderResponse, Status>> + Send>>;

    async fn observe(&self, req: Request<epb::LeaderRequest>) -> Answer<Self::ObserveStream> {
        let c = self.client(&req);
        let (tx, mut rx) = mpsc::channel(OBSERVE_BUFFER);
        let name = req.into_inner().name;
        tokio::spawn(async move {
            // The inner reads and watches end with the stream.
            tokio::select! {
                _ = observe(&c, &name, &tx) => {}
                _ = tx.closed() => {}
            }
        });
        // The answer starts with its first message, as etcd's (grpc-go sends a stream's
        // headers with its first message): a client waiting for the call to be answered waits
        // for a leader. A stream that ends first is answered empty.
        let Some(first) = rx.recv().await else {
            return Ok(Response::new(Box::pin(tokio_stream::empty())));
        };
        let rest = ReceiverStream::new(rx);
        Ok(Response::new(Box::pin(tokio_stream::once(first).chain(rest))))
    }

    async fn resign(&self, req: Request<epb::ResignRequest>) -> Answer<epb::ResignResponse> {
        let c = self.client(&req);
        let req = req.into_inner();
        let answer = async {
            let leader = req.leader.ok_or(Error::MissingLeaderKey)?;
            // A session as etcd opens one, though resigning writes nothing with its lease.
            c.session(leader.lease).await?;
            c.txn(resignation(leader.key, leader.rev)).await
        };
        let t = answer.await.map_err(status::through_client)?;
        Ok(Response::new(epb::ResignResponse { header: t.header }))
    }
}

/// Leader changes buffered towards an Observe client before its task waits for it.
const OBSERVE_BUFFER: usize = 16;

/// etcd's `Election.Campaign` in a session on the request's lease.
async fn campaign(c: &Client, req: epb::CampaignRequest) -> Result<epb::CampaignResponse> {
    let lease = c.session(req.lease).await?;
    let prefix = cc::prefix(&req.name);
    let key = cc::session_key(&prefix, lease);
    let t = pb::TxnRequest {
        compare: vec![cc::created_at(&key, 0)],
        success: vec![cc::put_op(key.clone(), req.value.clone(), lease)],
        failure: vec![cc::range_op(cc::get(key.clone()))],
    };
    let t = c.txn(t).await?;
    let mut rev = t.header.as_ref().map_or(0, |h| h.revision);
    if !t.succeeded {
        // This session is a candidate already: it campaigns again with the new value.
        let kv = cc::read_kvs(&t, 0).first().ok_or(Error::Internal)?;
        rev = kv.create_revision;
        if kv.value != req.value
            && let Err(e) = proclaim(c, &key, rev, lease, req.value).await
        {
            let _ = c.txn(resignation(key, rev)).await;
            return Err(e);
        }
    }
    // Resigned if the call is dropped while it waits (its client went), as etcd resigns on a
    // canceled context; a wait that fails otherwise leaves the candidacy, as etcd's does.
    let resign = Undo::new(c, resignation(key.clone(), rev));
    let waited = cc::wait_deletes(c, &prefix, rev - 1).await;
    resign.disarm();
    waited?;
    let leader = epb::LeaderKey { name: req.name, key, rev, lease };
    // The header is the candidacy's write's, as etcd answers.
    Ok(epb::CampaignResponse { header: t.header, leader: Some(leader) })
}

/// etcd's `Election.Proclaim`: the leader's key gets `value` if it is still the key created
/// at `rev`.
async fn proclaim(
    c: &Client,
    key: &Bytes,
    rev: i64,
    lease: i64,
    value: Bytes,
) -> Result<Option<pb::ResponseHeader>> {
    let t = pb::TxnRequest {
        compare: vec![cc::created_at(key, rev)],
        success: vec![cc::put_op(key.clone(), value, lease)],
        failure: vec![],
    };
    let t = c.txn(t).await?;
    if !t.succeeded {
        return Err(Error::ElectionNotLeader);
    }
    Ok(t.header)
}

/// etcd's `Election.Resign`: the leader's key deleted if it is still the key created at `rev`.
fn resignation(key: Bytes, rev: i64) -> pb::TxnRequest {
    pb::TxnRequest {
        compare: vec![cc::created_at(&key, rev)],
        success: vec![cc::delete_op(key)],
        failure: vec![],
    }
}

/// The leader's key: the oldest under `name/`.
async fn leader(c: &Client, name: &[u8]) -> Result<(Option<pb::ResponseHeader>, mvccpb::KeyValue)> {
    let r = c.get(cc::first_created(&cc::prefix(name))).await?;
    let kv = r.kvs.into_iter().next().ok_or(Error::ElectionNoLeader)?;
    Ok((r.header, kv))
}

type Out = mpsc::Sender<std::result::Result<epb::LeaderResponse, Status>>;

/// etcd's `Election.Observe`: the leader, then each change of its value, then the next leader
/// once its key is deleted, and so on. A failed read or watch ends the stream without an
/// error, as etcd's does.
async fn observe(c: &Client, name: &[u8], out: &Out) {
    let prefix = cc::prefix(name);
    let s = c.member();
    loop {
        let Ok(r) = c.get(cc::first_created(&prefix)).await else { return };
        let (rev, kv) = match r.kvs.into_iter().next() {
            Some(kv) => (r.header.map_or(0, |h| h.revision), kv),
            None => {
                // No leader: the first key written under the prefix is the next one.
                let from = r.header.map_or(0, |h| h.revision);
                let (end_key, range_end) = {
                    let all = cc::first_created(&prefix);
                    (all.key, all.range_end)
                };
                let Ok(mut w) = c.watch(end_key, range_end, from).await else { return };
                loop {
                    let Ok((_, events)) = w.next().await else { return };
                    let put = events.into_iter().find(|e| e.r#type == PUT).and_then(|e| e.kv);
                    if let Some(kv) = put {
                        // The header at the leader's write, not at the last of its revision.
                        break (kv.mod_revision, kv);
                    }
                }
            }
        };
        let key = kv.key.clone();
        if send(out, s.header(rev), kv).await.is_err() {
            return;
        }
        // Its changes until it is deleted.
        let Ok(mut w) = c.watch(key, Bytes::new(), rev + 1).await else { return };
        'leader: loop {
            let Ok((rev, events)) = w.next().await else { return };
            for e in events {
                if e.r#type != PUT {
                    break 'leader;
                }
                let Some(kv) = e.kv else { continue };
                if send(out, s.header(rev), kv).await.is_err() {
                    return;
                }
            }
        }
    }
}

const PUT: i32 = mvccpb::event::EventType::Put as i32;

async fn send(
    out: &Out,
    header: Option<pb::ResponseHeader>,
    kv: mvccpb::KeyValue,
) -> std::result::Result<(), ()> {
    out.send(Ok(epb::LeaderResponse { header, kv: Some(kv) })).await.map_err(|_| ())
}
