//! The Watch service: one task per bidirectional stream.
//!
//! The task reads the client's create, cancel and progress requests and hands them to the hub;
//! it sends, in order, what the hub queued for the stream (one response per revision of a watch,
//! as etcd does), and replays history for watches that started in the past or fell behind
//! (several revisions per response, never splitting one). Its output channel is small, so a client that stops
//! reading stops this task and, through HTTP/2 flow control, nothing else: the hub moves that
//! stream's watches off the live path once their queues fill.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use prost::Message as _;
use tokio::sync::{Notify, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::mvcc::{Event, EventKind, RevisionEvents};
use crate::proto::etcdserverpb as pb;
use crate::proto::{mvccpb, wire};
use crate::server::etcdserver::leader::LeaderMonitor;
use crate::server::etcdserver::member::Member;
use crate::watch::{CatchUp, CreateRequest, Message, Picks, WatchOptions};

/// Responses buffered towards the client before the stream task waits for it.
const OUT_BUFFER: usize = 16;
/// Queued messages taken per drain before the task looks at requests and catch-up again.
const MAX_DRAIN: usize = 512;

/// etcd's `WatchResponse` as sent: the same fields and numbers, but each event is already
/// encoded (a repeated message and a repeated bytes field look the same on the wire), so the
/// encoding made for one watcher serves them all.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WatchFrame {
    #[prost(message, optional, tag = "1")]
    pub header: Option<pb::ResponseHeader>,
    #[prost(int64, tag = "2")]
    pub watch_id: i64,
    #[prost(bool, tag = "3")]
    pub created: bool,
    #[prost(bool, tag = "4")]
    pub canceled: bool,
    #[prost(int64, tag = "5")]
    pub compact_revision: i64,
    #[prost(string, tag = "6")]
    pub cancel_reason: String,
    #[prost(bool, tag = "7")]
    pub fragment: bool,
    /// Encoded `mvccpb.Event`s.
    #[prost(bytes = "bytes", repeated, tag = "11")]
    pub events: Vec<Bytes>,
}

#[derive(Debug)]
pub struct WatchService {
    shared: Arc<Member>,
}

impl WatchService {
    pub fn new(shared: Arc<Member>) -> Self {
        Self { shared }
    }
}

type Out = mpsc::Sender<Result<WatchFrame, Status>>;

#[tonic::async_trait]
impl wire::watch_server::Watch for WatchService {
    type WatchStream = ReceiverStream<Result<WatchFrame, Status>>;

    async fn watch(
        &self,
        req: Request<Streaming<pb::WatchRequest>>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        // kube-apiserver's watches ask for a leader (`WithRequireLeader`): in a cluster, a
        // member without one refuses them, and ends them if it loses its leader, so that the
        // client moves to a member that has one.
        let require_leader =
            req.metadata().get(REQUIRE_LEADER_KEY).is_some_and(|v| v.as_bytes() == b"true");
        let leader = if require_leader { LeaderMonitor::of(&self.shared) } else { None };
        if leader.as_ref().is_some_and(|m| !m.has_leader()) {
            return Err(crate::error::Error::NoLeader.into());
        }
        // Read once per stream (not per event): each create is checked with it while auth is
        // enabled, as etcd checks the stream's context.
        let creds = crate::server::v3rpc::auth::credentials(&self.shared, &req);
        let (tx, rx) = mpsc::channel(OUT_BUFFER);
        tokio::spawn(run_stream(self.shared.clone(), req.into_inner(), tx, leader, creds));
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// The metadata key (and value `true`) of etcd's `WithRequireLeader`.
const REQUIRE_LEADER_KEY: &str = "hasleader";

/// Resolves once a stream that asked for a leader has been without one too long; never for
/// one that did not ask (or on a member alone).
async fn leader_lost(leader: &mut Option<LeaderMonitor>) {
    match leader {
        Some(m) => m.lost().await,
        None => std::future::pending().await,
    }
}

async fn run_stream(
    shared: Arc<Member>,
    mut inbound: Streaming<pb::WatchRequest>,
    out: Out,
    mut leader: Option<LeaderMonitor>,
    creds: crate::server::v3rpc::auth::Credentials,
) {
    let hub = &shared.hub;
    let (sid, mut rx, wake) = hub.open_stream();
    let interval = shared.config.progress_notify_interval();
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // After the client half-closes, its watches keep delivering (as in etcd) until it goes
    // away; the request side is simply no longer polled, so nothing spins on it.
    let mut requests_open = true;
    loop {
        let ok = tokio::select! {
            biased;
            _ = out.closed() => false,
            req = inbound.message(), if requests_open => match req {
                Ok(Some(r)) => match denied(&shared, &r, &creds).await {
                    Some(frame) => send(&out, frame).await.is_ok(),
                    None => {
                        handle_request(&shared, sid, r);
                        true
                    }
                },
                Ok(None) => {
                    requests_open = false;
                    true
                }
                // A request that does not decode ends the stream with its error, as etcd ends
                // it (INTERNAL); after a reset or transport error nobody reads it any more.
                Err(status) => {
                    let _ = out.send(Err(status)).await;
                    false
                }
            },
            msg = rx.recv() => match msg {
                Some(m) => drain(&shared, m, &mut rx, &out).await.is_ok(),
                None => false,
            },
            _ = wake.notified() => true,
            _ = ticker.tick() => {
                hub.tick(sid);
                true
            }
            _ = leader_lost(&mut leader) => {
                let _ = out.send(Err(crate::error::Error::NoLeader.into())).await;
                false
            }
        };
        if !ok || catch_up(&shared, sid, &out, &wake).await.is_err() {
            break;
        }
    }
    hub.close_stream(sid);
}

/// While auth is enabled: the answer to a create its sender may not read (etcd's
/// `isWatchPermitted`): created and at once canceled, with the error as reason.
async fn denied(
    shared: &Member,
    req: &pb::WatchRequest,
    creds: &crate::server::v3rpc::auth::Credentials,
) -> Option<WatchFrame> {
    use crate::error::Error;
    use pb::watch_request::RequestUnion as U;
    if !shared.auth.is_enabled() {
        return None;
    }
    let Some(U::CreateRequest(c)) = &req.request_union else { return None };
    let who = crate::server::v3rpc::auth::identify(shared, creds).await;
    let checked =
        who.and_then(|w| shared.auth.check_range(w.as_ref(), &c.key, &c.range_end, false));
    let reason = match checked {
        Ok(()) => return None,
        Err(e @ (Error::InvalidAuthToken | Error::AuthOldRevision | Error::UserEmpty)) => e,
        Err(_) => Error::PermissionDenied,
    };
    // etcd's reason is the gRPC error's text, code included.
    let status = tonic::Status::from(reason);
    Some(WatchFrame {
        header: shared.header(0),
        watch_id: -1,
        created: true,
        canceled: true,
        cancel_reason: format!(
            "rpc error: code = {} desc = {}",
            go_code(status.code()),
            status.message()
        ),
        ..Default::default()
    })
}

/// grpc-go's name of a code, as its errors print it.
fn go_code(c: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match c {
        PermissionDenied => "PermissionDenied",
        Unauthenticated => "Unauthenticated",
        InvalidArgument => "InvalidArgument",
        FailedPrecondition => "FailedPrecondition",
        _ => "Unknown",
    }
}

fn handle_request(shared: &Member, sid: u64, req: pb::WatchRequest) {
    use pb::watch_create_request::FilterType;
    use pb::watch_request::RequestUnion as U;
    match req.request_union {
        Some(U::CreateRequest(c)) => {
            let has = |f: FilterType| c.filters.contains(&(f as i32));
            shared.hub.create(
                sid,
                CreateRequest {
                    no_put: has(FilterType::Noput),
                    no_delete: has(FilterType::Nodelete),
                    key: c.key,
                    range_end: c.range_end,
                    start_revision: c.start_revision,
                    watch_id: c.watch_id,
                    progress_notify: c.progress_notify,
                    prev_kv: c.prev_kv,
                    fragment: c.fragment,
                },
            )
        }
        Some(U::CancelRequest(c)) => shared.hub.cancel(sid, c.watch_id),
        Some(U::ProgressRequest(_)) => shared.hub.request_progress(sid),
        None => {}
    }
}

/// Runs a few catch-up steps, then lets the task look at its other work; if there may be more
/// to replay it wakes itself up again.
async fn catch_up(shared: &Member, sid: u64, out: &Out, wake: &Notify) -> Result<(), ()> {
    for _ in 0..4 {
        match shared.hub.catch_up(sid) {
            CatchUp::Idle => return Ok(()),
            CatchUp::Events { watch_id, revision, events, opts } => {
                let mut batch = Batch::new(watch_id, revision, opts);
                for (evs, picks) in &events {
                    batch.add(evs, picks, shared.store.compact_revision());
                }
                if !batch.events.is_empty() {
                    batch.send(shared, out).await?;
                }
            }
            CatchUp::Compacted { watch_id, revision, compact_revision } => {
                let frame = WatchFrame {
                    header: shared.header_exact(revision),
                    watch_id,
                    canceled: true,
                    compact_revision,
                    ..Default::default()
                };
                send(out, frame).await?;
            }
        }
    }
    wake.notify_one();
    Ok(())
}

/// One watch's encoded events on their way into a response.
struct Batch {
    watch_id: i64,
    revision: i64,
    opts: WatchOptions,
    events: Vec<Bytes>,
}

impl Batch {
    fn new(watch_id: i64, revision: i64, opts: WatchOptions) -> Self {
        Self { watch_id, revision, opts, events: Vec::new() }
    }

    /// Adds the picked events; `compacted` is the store's compaction revision now.
    fn add(&mut self, events: &RevisionEvents, picks: &Picks, compacted: i64) {
        for e in picks.iter(events) {
            self.events.push(encoded(e, self.opts.prev_kv, compacted));
        }
    }

    /// Sends the batch, split into fragments only if the watch asked for it and the response
    /// would exceed `--max-request-bytes` plus gRPC's overhead (etcd's rule).
    async fn send(self, shared: &Member, out: &Out) -> Result<(), ()> {
        let n = self.events.len() as u64;
        shared.metrics.watch_events.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        let frame = WatchFrame {
            header: shared.header(self.revision),
            watch_id: self.watch_id,
            events: self.events,
            ..Default::default()
        };
        // etcd fragments at its gRPC receive limit: the request limit plus gRPC's overhead.
        let limit = shared.config.max_request_bytes as usize
            + crate::server::etcdserver::member::GRPC_OVERHEAD_BYTES;
        if !self.opts.fragment || frame.events.len() < 2 || frame.encoded_len() < limit {
            return send(out, frame).await;
        }
        let header = frame.header;
        let mut rest = frame.events.into_iter().peekable();
        while rest.peek().is_some() {
            let mut part = WatchFrame {
                header,
                watch_id: self.watch_id,
                fragment: true,
                ..Default::default()
            };
            while let Some(e) = rest.peek() {
                if !part.events.is_empty() && part.encoded_len() + e.len() + 8 >= limit {
                    break;
                }
                part.events.push(rest.next().expect("peeked"));
            }
            part.fragment = rest.peek().is_some();
            send(out, part).await?;
        }
        Ok(())
    }
}

/// Sends `first` and whatever else is queued, in order: one response per revision of a watch,
/// as etcd sends to a watcher that is in step (kube-apiserver's watch cache hands a response's
/// events back to back to watchers with small buffers, and closes those that overflow: when
/// queued revisions were merged into one response, up to 34 at a time under load, it closed
/// eight times as many as on etcd). A watch replaying history is batched by `catch_up`, as
/// etcd batches one that is catching up.
async fn drain(
    shared: &Member,
    first: Message,
    rx: &mut mpsc::UnboundedReceiver<Message>,
    out: &Out,
) -> Result<(), ()> {
    let compacted = shared.store.compact_revision();
    let mut next = Some(first);
    for _ in 0..MAX_DRAIN {
        let msg = match next.take() {
            Some(m) => m,
            None => match rx.try_recv() {
                Ok(m) => m,
                Err(_) => break,
            },
        };
        match msg {
            Message::Events { watch_id, revision, events, picks, opts, done } => {
                done.fetch_sub(1, Ordering::SeqCst);
                let mut batch = Batch::new(watch_id, revision, opts);
                batch.add(&events, &picks, compacted);
                batch.send(shared, out).await?;
            }
            other => send(out, control_frame(shared, other)).await?,
        }
    }
    Ok(())
}

fn control_frame(shared: &Member, msg: Message) -> WatchFrame {
    match msg {
        Message::Created { watch_id, revision, canceled, cancel_reason, done } => {
            if let Some(d) = done {
                d.fetch_sub(1, Ordering::SeqCst);
            }
            WatchFrame {
                header: shared.header(revision),
                watch_id,
                created: true,
                canceled,
                cancel_reason,
                ..Default::default()
            }
        }
        Message::Canceled { watch_id, revision, compact_revision } => WatchFrame {
            header: shared.header_exact(revision),
            watch_id,
            canceled: true,
            compact_revision,
            ..Default::default()
        },
        Message::Progress { watch_id, revision } => {
            WatchFrame { header: shared.header(revision), watch_id, ..Default::default() }
        }
        Message::Events { .. } => unreachable!("events are batched by the caller"),
    }
}

/// An event's encoding with or without its previous version, made once and then shared by
/// every watcher (etcd sends prev_kv only for events that are not creates; ours are `None`
/// for creates). etcd reads the previous version when it sends, at the event's revision - 1,
/// and leaves it out once that revision is compacted; kube-apiserver turns such an event into
/// an error, which its storage tests expect after a compaction.
fn encoded(e: &Event, want_prev: bool, compacted: i64) -> Bytes {
    let with_prev = want_prev && e.prev_kv.is_some() && e.kv.mod_revision > compacted;
    let cell = if with_prev { &e.wire.with_prev } else { &e.wire.plain };
    cell.get_or_init(|| {
        let ev = mvccpb::Event {
            r#type: match e.kind {
                EventKind::Put => mvccpb::event::EventType::Put as i32,
                EventKind::Delete => mvccpb::event::EventType::Delete as i32,
            },
            kv: Some(crate::server::etcdserver::convert::kv(e.kv.clone())),
            prev_kv: if with_prev {
                e.prev_kv.clone().map(crate::server::etcdserver::convert::kv)
            } else {
                None
            },
        };
        Bytes::from(ev.encode_to_vec())
    })
    .clone()
}

async fn send(out: &Out, frame: WatchFrame) -> Result<(), ()> {
    out.send(Ok(frame)).await.map_err(|_| ())
}
