//! The Watch service: one task per bidirectional stream.
//!
//! The task reads the client's create, cancel and progress requests and hands them to the hub;
//! it sends, in order, what the hub queued for the stream (batching consecutive revisions of a
//! watch into one response, never splitting a revision), and replays history for watches that
//! started in the past or fell behind. Its output channel is small, so a client that stops
//! reading stops this task and, through HTTP/2 flow control, nothing else: the hub moves that
//! stream's watches off the live path once their queues fill.

use std::sync::Arc;

use prost::Message as _;
use tokio::sync::{Notify, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::Shared;
use crate::mvcc::{Event, EventKind};
use crate::proto::etcdserverpb as pb;
use crate::proto::mvccpb;
use crate::watch::{CatchUp, CreateRequest, Message, WatchOptions};

/// Responses buffered towards the client before the stream task waits for it.
const OUT_BUFFER: usize = 16;
/// Soft bound on the events gathered into one response.
const MAX_BATCH_BYTES: usize = 1 << 20;
/// Queued messages taken per drain before the task looks at requests and catch-up again.
const MAX_DRAIN: usize = 512;

#[derive(Debug)]
pub struct WatchService {
    shared: Arc<Shared>,
}

impl WatchService {
    pub fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }
}

type Out = mpsc::Sender<Result<pb::WatchResponse, Status>>;

#[tonic::async_trait]
impl pb::watch_server::Watch for WatchService {
    type WatchStream = ReceiverStream<Result<pb::WatchResponse, Status>>;

    async fn watch(
        &self,
        req: Request<Streaming<pb::WatchRequest>>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let (tx, rx) = mpsc::channel(OUT_BUFFER);
        tokio::spawn(run_stream(self.shared.clone(), req.into_inner(), tx));
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

async fn run_stream(shared: Arc<Shared>, mut inbound: Streaming<pb::WatchRequest>, out: Out) {
    let hub = &shared.hub;
    let (sid, mut rx, wake) = hub.open_stream();
    let interval = shared.config.progress_notify_interval();
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let ok = tokio::select! {
            biased;
            _ = out.closed() => false,
            req = inbound.message() => match req {
                Ok(Some(r)) => {
                    handle_request(&shared, sid, r);
                    true
                }
                // A half-close or a broken stream ends the watch stream, as in etcd.
                _ => false,
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
        };
        if !ok || catch_up(&shared, sid, &out, &wake).await.is_err() {
            break;
        }
    }
    hub.close_stream(sid);
}

fn handle_request(shared: &Shared, sid: u64, req: pb::WatchRequest) {
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
async fn catch_up(shared: &Shared, sid: u64, out: &Out, wake: &Notify) -> Result<(), ()> {
    for _ in 0..4 {
        match shared.hub.catch_up(sid) {
            CatchUp::Idle => return Ok(()),
            CatchUp::Events { watch_id, revision, events, opts } => {
                if !events.is_empty() {
                    send_events(shared, out, watch_id, revision, &events, opts).await?;
                }
            }
            CatchUp::Compacted { watch_id, revision, compact_revision } => {
                let resp = pb::WatchResponse {
                    header: shared.header(revision),
                    watch_id,
                    canceled: true,
                    compact_revision,
                    ..Default::default()
                };
                send(out, resp).await?;
            }
        }
    }
    wake.notify_one();
    Ok(())
}

/// Sends `first` and whatever else is queued, merging consecutive revisions of a watch.
async fn drain(
    shared: &Shared,
    first: Message,
    rx: &mut mpsc::UnboundedReceiver<Message>,
    out: &Out,
) -> Result<(), ()> {
    // Per watch, in order of first appearance: (watch, header revision, events, options, bytes).
    let mut acc: Vec<(i64, i64, Vec<Event>, WatchOptions, usize)> = Vec::new();
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
            Message::Events { watch_id, revision, events, opts, done } => {
                done.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                let size: usize = events.iter().map(|e| e.kv.key.len() + e.kv.value.len()).sum();
                let i = match acc.iter().position(|a| a.0 == watch_id) {
                    Some(i) => i,
                    None => {
                        acc.push((watch_id, revision, Vec::new(), opts, 0));
                        acc.len() - 1
                    }
                };
                let a = &mut acc[i];
                a.1 = revision;
                a.2.extend(events);
                a.4 += size;
                if a.4 >= MAX_BATCH_BYTES {
                    let (wid, rev, evs, opts, _) = acc.remove(i);
                    send_events(shared, out, wid, rev, &evs, opts).await?;
                }
            }
            other => {
                // Anything else is ordered after the events queued before it.
                for (wid, rev, evs, opts, _) in acc.drain(..) {
                    send_events(shared, out, wid, rev, &evs, opts).await?;
                }
                send(out, control_response(shared, other)).await?;
            }
        }
    }
    for (wid, rev, evs, opts, _) in acc.drain(..) {
        send_events(shared, out, wid, rev, &evs, opts).await?;
    }
    Ok(())
}

fn control_response(shared: &Shared, msg: Message) -> pb::WatchResponse {
    match msg {
        Message::Created { watch_id, revision, canceled, cancel_reason, done } => {
            if let Some(d) = done {
                d.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            }
            pb::WatchResponse {
                header: shared.header(revision),
                watch_id,
                created: true,
                canceled,
                cancel_reason,
                ..Default::default()
            }
        }
        Message::Canceled { watch_id, revision, compact_revision } => pb::WatchResponse {
            header: shared.header(revision),
            watch_id,
            canceled: true,
            compact_revision,
            ..Default::default()
        },
        Message::Progress { watch_id, revision } => {
            pb::WatchResponse { header: shared.header(revision), watch_id, ..Default::default() }
        }
        Message::Events { .. } => unreachable!("events are batched by the caller"),
    }
}

fn event(e: &Event, prev_kv: bool) -> mvccpb::Event {
    mvccpb::Event {
        r#type: match e.kind {
            EventKind::Put => mvccpb::event::EventType::Put as i32,
            EventKind::Delete => mvccpb::event::EventType::Delete as i32,
        },
        kv: Some(super::convert::kv(e.kv.clone())),
        prev_kv: if prev_kv { e.prev_kv.clone().map(super::convert::kv) } else { None },
    }
}

/// Sends a watch's events, split into fragments only if the watch asked for it and the
/// response would exceed `--max-request-bytes` (etcd's rule).
async fn send_events(
    shared: &Shared,
    out: &Out,
    watch_id: i64,
    revision: i64,
    events: &[Event],
    opts: WatchOptions,
) -> Result<(), ()> {
    let resp = pb::WatchResponse {
        header: shared.header(revision),
        watch_id,
        events: events.iter().map(|e| event(e, opts.prev_kv)).collect(),
        ..Default::default()
    };
    let limit = shared.config.max_request_bytes as usize;
    if !opts.fragment || resp.events.len() < 2 || resp.encoded_len() < limit {
        return send(out, resp).await;
    }
    let mut rest = resp.events.into_iter().peekable();
    while rest.peek().is_some() {
        let mut part = pb::WatchResponse {
            header: resp.header,
            watch_id,
            fragment: true,
            ..Default::default()
        };
        while let Some(e) = rest.peek() {
            if !part.events.is_empty() && part.encoded_len() + e.encoded_len() + 8 >= limit {
                break;
            }
            part.events.push(rest.next().expect("peeked"));
        }
        part.fragment = rest.peek().is_some();
        send(out, part).await?;
    }
    Ok(())
}

async fn send(out: &Out, resp: pb::WatchResponse) -> Result<(), ()> {
    out.send(Ok(resp)).await.map_err(|_| ())
}
