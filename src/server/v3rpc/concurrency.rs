//! etcd's `client/v3/concurrency` on the server's side: what the Lock and Election services
//! (`v3rpc::lock`, `v3rpc::election`) are made of.
//!
//! etcd serves those two services as clients of its own KV, Lease and Watch, with the caller's
//! credentials. So does this module: every read, write and watch goes through the entry points
//! the gRPC services use (`kv::range` after a read barrier, [`submit`], the watch hub), checked
//! against the caller's identity as each of etcd's inner calls is, so that they behave alike on
//! a member alone and on a cluster member (whose writes take the one road to the leader).
//!
//! A waiter's key is `<name>/<lease id in hex>`, written with the session's lease; keys under a
//! name are served in the order of their create revisions ([`wait_deletes`]).

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use tokio::sync::{Notify, mpsc};

use crate::auth::AuthInfo;
use crate::error::{Error, Result};
use crate::mvcc::EventKind;
use crate::proto::etcdserverpb as pb;
use crate::proto::mvccpb;
use crate::server::etcdserver::apply;
use crate::server::etcdserver::convert;
use crate::server::etcdserver::member::Member;
use crate::server::etcdserver::submit::{Change, submit};
use crate::server::v3rpc::auth;
use crate::server::v3rpc::kv;
use crate::watch::{CatchUp, CreateRequest, Message};

/// The TTL of the lease a session grants when the request names none (etcd's
/// `defaultSessionTTL`); nothing keeps it alive afterwards (etcd's services orphan the
/// session), so such a lock or candidacy goes a minute later unless released first.
const SESSION_TTL: i64 = 60;

/// The caller of a Lock or Election call, as etcd's in-process client acts for it.
#[derive(Clone, Debug)]
pub(in crate::server) struct Client {
    s: Arc<Member>,
    creds: auth::Credentials,
}

impl Client {
    pub fn new(s: Arc<Member>, creds: auth::Credentials) -> Self {
        Self { s, creds }
    }

    pub fn member(&self) -> &Arc<Member> {
        &self.s
    }

    /// Who the caller is now: identified for each inner call, as etcd authenticates each one
    /// (a long wait may outlive a change of the auth state).
    async fn who(&self) -> Result<Option<AuthInfo>> {
        auth::identify(&self.s, &self.creds).await
    }

    /// A change made as the caller.
    pub async fn submit<C: Change>(&self, change: C) -> Result<C::Answer> {
        let who = self.who().await?;
        submit(&self.s, &who, change).await
    }

    pub async fn txn(&self, t: pb::TxnRequest) -> Result<pb::TxnResponse> {
        let mut r = self.submit(t).await?;
        self.s.fill(&mut r.header);
        Ok(r)
    }

    pub async fn delete(&self, key: Bytes) -> Result<pb::DeleteRangeResponse> {
        let mut r = self.submit(pb::DeleteRangeRequest { key, ..Default::default() }).await?;
        self.s.fill(&mut r.header);
        Ok(r)
    }

    /// A linearizable read, as the client's default Get.
    pub async fn get(&self, r: pb::RangeRequest) -> Result<pb::RangeResponse> {
        apply::linearizable(&self.s).await?;
        let who = self.who().await?;
        kv::range(&self.s, who.as_ref(), r)
    }

    /// etcd's `NewSession`: the request's lease, or (for lease 0) a lease granted for
    /// [`SESSION_TTL`]. A lease that does not exist is not refused here: the first write with
    /// it is.
    pub async fn session(&self, lease: i64) -> Result<i64> {
        if lease != 0 {
            return Ok(lease);
        }
        let who = self.who().await?;
        auth::require(&self.s, &who)?;
        let g = pb::LeaseGrantRequest { ttl: SESSION_TTL, id: 0 };
        Ok(submit(&self.s, &who, g).await?.id)
    }

    /// A watch of `[key, range_end)` from revision `rev`, checked as a watch create is.
    pub async fn watch(&self, key: Bytes, range_end: Bytes, rev: i64) -> Result<Watcher> {
        if self.s.auth.is_enabled() {
            let who = self.who().await?;
            self.s.auth.check_range(who.as_ref(), &key, &range_end, false)?;
        }
        Ok(Watcher::new(self.s.clone(), key, range_end, rev))
    }
}

/// `name` followed by `/`: the prefix of the keys of a lock's or election's waiters.
pub(in crate::server) fn prefix(name: &[u8]) -> Bytes {
    let mut p = BytesMut::with_capacity(name.len() + 1);
    p.put_slice(name);
    p.put_u8(b'/');
    p.freeze()
}

/// A session's key under `prefix`: the lease id in hex as Go's `%x` prints it (a negative id
/// with a minus sign, though no write accepts one).
pub(in crate::server) fn session_key(prefix: &[u8], lease: i64) -> Bytes {
    let hex = if lease < 0 { format!("-{:x}", lease.unsigned_abs()) } else { format!("{lease:x}") };
    let mut k = BytesMut::with_capacity(prefix.len() + hex.len());
    k.put_slice(prefix);
    k.put_slice(hex.as_bytes());
    k.freeze()
}

fn prefix_range(prefix: &[u8]) -> (Bytes, Bytes) {
    let end = crate::keyspace::prefix_end(prefix).unwrap_or_else(|| Bytes::from_static(b"\0"));
    (Bytes::copy_from_slice(prefix), end)
}

/// The oldest key under `prefix` by create revision: a lock's holder, an election's leader
/// (etcd's `WithFirstCreate`).
pub(in crate::server) fn first_created(prefix: &[u8]) -> pb::RangeRequest {
    let (key, range_end) = prefix_range(prefix);
    pb::RangeRequest {
        key,
        range_end,
        limit: 1,
        sort_order: pb::range_request::SortOrder::Ascend as i32,
        sort_target: pb::range_request::SortTarget::Create as i32,
        ..Default::default()
    }
}

/// The newest key under `prefix` created at or before `max_create_rev` (etcd's
/// `WithLastCreate` and `WithMaxCreateRev`).
fn last_created_by(prefix: &[u8], max_create_rev: i64) -> pb::RangeRequest {
    let (key, range_end) = prefix_range(prefix);
    pb::RangeRequest {
        key,
        range_end,
        limit: 1,
        sort_order: pb::range_request::SortOrder::Descend as i32,
        sort_target: pb::range_request::SortTarget::Create as i32,
        max_create_revision: max_create_rev,
        ..Default::default()
    }
}

pub(in crate::server) fn get(key: Bytes) -> pb::RangeRequest {
    pb::RangeRequest { key, ..Default::default() }
}

/// The compare "`key`'s create revision is `rev`" (0: the key does not exist).
pub(in crate::server) fn created_at(key: &Bytes, rev: i64) -> pb::Compare {
    pb::Compare {
        result: pb::compare::CompareResult::Equal as i32,
        target: pb::compare::CompareTarget::Create as i32,
        key: key.clone(),
        target_union: Some(pb::compare::TargetUnion::CreateRevision(rev)),
        ..Default::default()
    }
}

pub(in crate::server) fn put_op(key: Bytes, value: Bytes, lease: i64) -> pb::RequestOp {
    let put = pb::PutRequest { key, value, lease, ..Default::default() };
    pb::RequestOp { request: Some(pb::request_op::Request::RequestPut(put)) }
}

pub(in crate::server) fn range_op(r: pb::RangeRequest) -> pb::RequestOp {
    pb::RequestOp { request: Some(pb::request_op::Request::RequestRange(r)) }
}

pub(in crate::server) fn delete_op(key: Bytes) -> pb::RequestOp {
    let d = pb::DeleteRangeRequest { key, ..Default::default() };
    pb::RequestOp { request: Some(pb::request_op::Request::RequestDeleteRange(d)) }
}

/// The keys a Txn's `i`th answer read (none if it was not a read).
pub(in crate::server) fn read_kvs(t: &pb::TxnResponse, i: usize) -> &[mvccpb::KeyValue] {
    match t.responses.get(i).and_then(|r| r.response.as_ref()) {
        Some(pb::response_op::Response::ResponseRange(r)) => &r.kvs,
        _ => &[],
    }
}

/// etcd's `waitDeletes`: returns once every key under `prefix` created at or before
/// `max_create_rev` is gone, waiting for the newest of them to be deleted, then looking again.
pub(in crate::server) async fn wait_deletes(
    c: &Client,
    prefix: &[u8],
    max_create_rev: i64,
) -> Result<()> {
    loop {
        let r = c.get(last_created_by(prefix, max_create_rev)).await?;
        let Some(last) = r.kvs.into_iter().next() else { return Ok(()) };
        let from = r.header.map_or(0, |h| h.revision);
        let mut w = c.watch(last.key, Bytes::new(), from).await?;
        loop {
            let (_, events) = w.next().await?;
            if events.iter().any(|e| e.r#type == mvccpb::event::EventType::Delete as i32) {
                break;
            }
        }
    }
}

/// A change made if the call is dropped before [`Undo::disarm`] (its client went away): the
/// lock key released or the candidacy resigned of a Lock or Campaign canceled while it waited,
/// as etcd's do on a canceled context.
pub(in crate::server) struct Undo<C: Change + 'static> {
    c: Client,
    change: Option<C>,
}

impl<C: Change + 'static> Undo<C> {
    pub fn new(c: &Client, change: C) -> Self {
        Self { c: c.clone(), change: Some(change) }
    }

    pub fn disarm(mut self) {
        self.change = None;
    }

    /// Makes the change now (a failed wait), whatever it answers.
    pub async fn now(mut self) {
        if let Some(change) = self.change.take() {
            let _ = self.c.submit(change).await;
        }
    }
}

impl<C: Change + 'static> Drop for Undo<C> {
    fn drop(&mut self) {
        if let Some(change) = self.change.take() {
            let c = self.c.clone();
            tokio::spawn(async move {
                if let Err(e) = c.submit(change).await {
                    tracing::debug!(error = %e, "a canceled Lock or Campaign was not undone");
                }
            });
        }
    }
}

/// One watch on the member's watch hub, read here rather than sent to a client: the inner
/// watches of `wait_deletes` and Observe.
pub(in crate::server) struct Watcher {
    s: Arc<Member>,
    /// The hub stream holding the one watch (closed on drop).
    sid: u64,
    rx: mpsc::UnboundedReceiver<Message>,
    wake: Arc<Notify>,
}

impl Watcher {
    fn new(s: Arc<Member>, key: Bytes, range_end: Bytes, start_revision: i64) -> Self {
        let (sid, rx, wake) = s.hub.open_stream();
        s.hub.create(sid, CreateRequest { key, range_end, start_revision, ..Default::default() });
        Self { s, sid, rx, wake }
    }

    /// The next revision with events for the watch: its header revision and events. A watch
    /// whose history is compacted fails as etcd's does.
    pub async fn next(&mut self) -> Result<(i64, Vec<mvccpb::Event>)> {
        loop {
            match self.s.hub.catch_up(self.sid) {
                CatchUp::Idle => {}
                CatchUp::Events { revision, events, .. } => {
                    let evs: Vec<_> =
                        events.iter().flat_map(|(evs, picks)| picks.iter(evs)).map(event).collect();
                    if !evs.is_empty() {
                        return Ok((revision, evs));
                    }
                    continue;
                }
                CatchUp::Compacted { .. } => return Err(Error::Compacted),
            }
            tokio::select! {
                m = self.rx.recv() => match m {
                    Some(Message::Events { revision, events, picks, done, .. }) => {
                        done.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                        let evs: Vec<_> = picks.iter(&events).map(event).collect();
                        if !evs.is_empty() {
                            return Ok((revision, evs));
                        }
                    }
                    Some(Message::Created { canceled, done, .. }) => {
                        if let Some(d) = done {
                            d.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                        }
                        if canceled {
                            return Err(Error::Compacted);
                        }
                    }
                    Some(Message::Canceled { .. }) => return Err(Error::Compacted),
                    Some(Message::Progress { .. }) => {}
                    None => return Err(Error::Stopped),
                },
                _ = self.wake.notified() => {}
            }
        }
    }
}

fn event(e: &crate::mvcc::Event) -> mvccpb::Event {
    let kind = match e.kind {
        EventKind::Put => mvccpb::event::EventType::Put,
        EventKind::Delete => mvccpb::event::EventType::Delete,
    };
    mvccpb::Event { r#type: kind as i32, kv: Some(convert::kv(e.kv.clone())), prev_kv: None }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.s.hub.close_stream(self.sid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_keys_print_the_lease_as_go_does() {
        assert_eq!(&session_key(b"l/", 0x694d_8a1b_2c3d_4e5f)[..], b"l/694d8a1b2c3d4e5f");
        assert_eq!(&session_key(b"l/", 10)[..], b"l/a");
        assert_eq!(&session_key(b"l/", -1)[..], b"l/-1");
        assert_eq!(&session_key(b"l/", i64::MIN)[..], b"l/-8000000000000000");
        assert_eq!(&prefix(b"name")[..], b"name/");
    }
}
