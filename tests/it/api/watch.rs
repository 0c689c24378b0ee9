//! The Watch service at the stream level, through the generated client so every WatchResponse is
//! seen exactly: the create handshake, ids, refusals, start revisions, events, filters, prev_kv,
//! compaction, cancel, progress (periodic and on request), half-close and disconnect.
//!
//! Every expectation holds for a real etcd 3.6.16 (`MEM_ETCD_TEST_TARGET=etcd`) except where a
//! test says it checks mem_etcd's own rule. The concurrency and slow-consumer tests are in
//! `watch_stress.rs`, the side-by-side comparison with etcd in `watch_diff.rs`; the helpers they
//! share are here.

use std::time::{Duration, Instant};

use bytes::Bytes;
use mvccpb::event::EventType;
use pb::watch_create_request::FilterType;
use pb::watch_request::RequestUnion;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::Channel;

use crate::support::*;

/// How long a test waits for something the server must send.
pub const WAIT: Duration = Duration::from_secs(10);
/// How long a test listens to be sure the server sends nothing more.
pub const QUIET: Duration = Duration::from_millis(300);

// ---------------------------------------------------------------------------------------------
// A watch stream

/// One bidirectional Watch stream. A task reads the gRPC response stream and forwards every
/// response into a bounded channel, so a test that stops calling [`Ws::next`] stops that task
/// from reading and, through HTTP/2 flow control, stalls the server's sends on this stream.
#[derive(Debug)]
pub struct Ws {
    tx: Option<mpsc::UnboundedSender<pb::WatchRequest>>,
    rx: mpsc::Receiver<Result<pb::WatchResponse, tonic::Status>>,
    task: tokio::task::JoinHandle<()>,
    /// Every response received so far, in order.
    pub seen: Vec<pb::WatchResponse>,
    ended: bool,
}

impl Drop for Ws {
    fn drop(&mut self) {
        // Dropping the response stream resets the HTTP/2 stream.
        self.task.abort();
    }
}

/// How a stream ended.
#[derive(Debug)]
pub enum End {
    /// The server closed the response stream with an OK status.
    Closed,
    /// The server (or the transport) ended it with this status.
    Status(#[allow(dead_code, reason = "shown through Debug in failure messages")] tonic::Status),
}

impl Ws {
    /// A stream on a new connection to `s`.
    pub async fn open(s: &Server) -> Ws {
        let ch = s.channel().await.unwrap_or_else(|e| panic!("connect {}: {e:?}", s.endpoint()));
        Ws::on(ch, 64)
    }

    /// A stream on `channel`; at most `buffer` responses wait in the forwarding channel.
    pub fn on(channel: Channel, buffer: usize) -> Ws {
        let (tx, req_rx) = mpsc::unbounded_channel();
        let (out, rx) = mpsc::channel(buffer.max(1));
        let task = tokio::spawn(async move {
            let mut client = pb::watch_client::WatchClient::new(channel)
                .max_decoding_message_size(256 << 20)
                .max_encoding_message_size(256 << 20);
            // tonic waits for the response headers, which etcd sends with its first response:
            // this task owns that wait so a stream with nothing to say yet blocks nobody.
            let mut stream = match client.watch(UnboundedReceiverStream::new(req_rx)).await {
                Ok(r) => r.into_inner(),
                Err(e) => {
                    let _ = out.send(Err(e)).await;
                    return;
                }
            };
            loop {
                match stream.message().await {
                    Ok(Some(m)) => {
                        if out.send(Ok(m)).await.is_err() {
                            return;
                        }
                    }
                    Ok(None) => return,
                    Err(e) => {
                        let _ = out.send(Err(e)).await;
                        return;
                    }
                }
            }
        });
        Ws { tx: Some(tx), rx, task, seen: Vec::new(), ended: false }
    }

    pub fn send(&self, req: RequestUnion) {
        self.tx
            .as_ref()
            .expect("the stream is half-closed")
            .send(pb::WatchRequest { request_union: Some(req) })
            .expect("the stream task is gone");
    }

    pub fn create(&self, c: pb::WatchCreateRequest) {
        self.send(RequestUnion::CreateRequest(c));
    }

    pub fn cancel(&self, watch_id: i64) {
        self.send(RequestUnion::CancelRequest(pb::WatchCancelRequest { watch_id }));
    }

    pub fn progress(&self) {
        self.send(RequestUnion::ProgressRequest(pb::WatchProgressRequest {}));
    }

    /// Asks for progress unless the stream already ended (a killed server): the end then shows
    /// in the next response.
    pub fn try_progress(&self) {
        let req = RequestUnion::ProgressRequest(pb::WatchProgressRequest {});
        if let Some(tx) = &self.tx {
            let _ = tx.send(pb::WatchRequest { request_union: Some(req) });
        }
    }

    /// Half-closes the stream: the client sends nothing more.
    pub fn close_send(&mut self) {
        self.tx = None;
    }

    /// The next response within `d`: `Ok(None)` on timeout, `Err` when the stream ended.
    pub async fn next_within(&mut self, d: Duration) -> Result<Option<pb::WatchResponse>, End> {
        assert!(!self.ended, "the stream already ended");
        match tokio::time::timeout(d, self.rx.recv()).await {
            Err(_) => Ok(None),
            Ok(None) => {
                self.ended = true;
                Err(End::Closed)
            }
            Ok(Some(Err(s))) => {
                self.ended = true;
                Err(End::Status(s))
            }
            Ok(Some(Ok(r))) => {
                check_response(&r);
                self.seen.push(r.clone());
                Ok(Some(r))
            }
        }
    }

    /// The next response; panics after [`WAIT`] or when the stream ends.
    #[track_caller]
    pub fn next(&mut self) -> impl Future<Output = pb::WatchResponse> + '_ {
        let caller = std::panic::Location::caller();
        async move {
            match self.next_within(WAIT).await {
                Ok(Some(r)) => r,
                Ok(None) => panic!("{caller}: no watch response within {WAIT:?}"),
                Err(e) => panic!("{caller}: the watch stream ended: {e:?}"),
            }
        }
    }

    /// Asserts that nothing arrives for [`QUIET`].
    #[track_caller]
    pub fn quiet(&mut self) -> impl Future<Output = ()> + '_ {
        let caller = std::panic::Location::caller();
        async move {
            match self.next_within(QUIET).await {
                Ok(None) => {}
                Ok(Some(r)) => panic!("{caller}: expected silence, got {}", show(&r)),
                Err(e) => panic!("{caller}: expected silence, the stream ended: {e:?}"),
            }
        }
    }

    /// Creates a watch and returns its id, checking the `created` answer.
    #[track_caller]
    pub fn watch(&mut self, c: pb::WatchCreateRequest) -> impl Future<Output = i64> + '_ {
        let caller = std::panic::Location::caller();
        async move {
            self.create(c.clone());
            let r = self.next().await;
            assert!(
                r.created && !r.canceled && r.events.is_empty() && r.watch_id >= 0,
                "{caller}: expected a created response for {c:?}, got {}",
                show(&r)
            );
            r.watch_id
        }
    }

    /// Receives until the events of watch `id` reach revision `rev` and returns those events;
    /// any other response on the way is a failure.
    #[track_caller]
    pub fn events_until(&mut self, id: i64, rev: i64) -> impl Future<Output = Vec<Ev>> + '_ {
        let caller = std::panic::Location::caller();
        async move {
            let mut evs = Vec::new();
            while evs.last().is_none_or(|e: &Ev| e.kv.mod_revision < rev) {
                let r = self.next().await;
                assert!(
                    r.watch_id == id && !r.created && !r.canceled && !r.events.is_empty(),
                    "{caller}: expected events of watch {id} up to revision {rev}, got {}",
                    show(&r)
                );
                evs.extend(r.events.iter().map(Ev::from));
            }
            assert_eq!(evs.last().map(|e| e.kv.mod_revision), Some(rev), "{caller}: overshoot");
            evs
        }
    }

    /// Sends progress requests until one is answered (a request is dropped while a watch on
    /// the stream is behind); nothing else may arrive meanwhile.
    #[track_caller]
    pub fn progress_eventually(&mut self) -> impl Future<Output = pb::WatchResponse> + '_ {
        let caller = std::panic::Location::caller();
        async move {
            let start = Instant::now();
            loop {
                self.progress();
                match self.next_within(QUIET).await {
                    Ok(Some(r)) if is_progress(&r) && r.watch_id == -1 => return r,
                    Ok(Some(r)) => panic!("{caller}: expected progress, got {}", show(&r)),
                    Ok(None) => assert!(start.elapsed() < WAIT, "{caller}: no progress"),
                    Err(e) => panic!("{caller}: the stream ended: {e:?}"),
                }
            }
        }
    }

    /// Sends a progress request and waits for its answer (`watch_id -1`, no events), which must
    /// come next, but for periodic progress notifications (`--watch-progress-notify-interval`
    /// may fire while the request is on its way, on a loaded machine); returns its revision.
    #[track_caller]
    pub fn progress_now(&mut self) -> impl Future<Output = i64> + '_ {
        let caller = std::panic::Location::caller();
        async move {
            self.progress();
            loop {
                let r = self.next().await;
                if is_progress(&r) && r.watch_id != -1 {
                    continue;
                }
                assert!(is_progress(&r) && r.watch_id == -1, "{caller}: got {}", show(&r));
                return hrev(&r);
            }
        }
    }
}

/// Checks every response: a header with the ids and a revision (etcd's client dereferences it).
#[track_caller]
pub fn check_response(r: &pb::WatchResponse) {
    let h = r.header.as_ref().unwrap_or_else(|| panic!("a watch response without a header: {r:?}"));
    assert!(h.cluster_id != 0 && h.member_id != 0, "header without ids: {r:?}");
    // etcd's compacted cancel of a watch that fell behind may carry revision 0; nothing else.
    if r.compact_revision == 0 {
        assert!(h.revision > 0, "header without a revision: {r:?}");
    }
    for e in &r.events {
        let kv = e.kv.as_ref().unwrap_or_else(|| panic!("an event without a kv: {r:?}"));
        assert!(kv.mod_revision <= h.revision, "an event newer than its header: {r:?}");
    }
    // Revisions ascend within a response.
    let revs: Vec<i64> =
        r.events.iter().filter_map(|e| e.kv.as_ref()).map(|k| k.mod_revision).collect();
    assert!(revs.is_sorted(), "events out of revision order: {r:?}");
}

pub fn hrev(r: &pb::WatchResponse) -> i64 {
    r.header.as_ref().map_or(0, |h| h.revision)
}

/// What etcd's client takes for a progress notification.
pub fn is_progress(r: &pb::WatchResponse) -> bool {
    r.events.is_empty()
        && !r.canceled
        && !r.created
        && r.compact_revision == 0
        && r.header.as_ref().is_some_and(|h| h.revision != 0)
}

/// A one-line description of a response, for failure messages.
pub fn show(r: &pb::WatchResponse) -> String {
    let mut s = format!("{{id {} rev {}", r.watch_id, hrev(r));
    for (flag, name) in [(r.created, "created"), (r.canceled, "canceled"), (r.fragment, "fragment")]
    {
        if flag {
            s += " ";
            s += name;
        }
    }
    if r.compact_revision != 0 {
        s += &format!(" compact {}", r.compact_revision);
    }
    if !r.cancel_reason.is_empty() {
        s += &format!(" reason {:?}", r.cancel_reason);
    }
    if !r.events.is_empty() {
        let evs: Vec<String> = r.events.iter().map(|e| Ev::from(e).brief()).collect();
        s += &format!(" events [{}]", evs.join(", "));
    }
    s + "}"
}

// ---------------------------------------------------------------------------------------------
// Events as plain data

/// An event as plain data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ev {
    pub put: bool,
    pub kv: Kv,
    pub prev: Option<Kv>,
}

impl From<&mvccpb::Event> for Ev {
    fn from(e: &mvccpb::Event) -> Ev {
        Ev {
            put: e.r#type == EventType::Put as i32,
            kv: Kv::from(e.kv.as_ref().expect("an event without a kv")),
            prev: e.prev_kv.as_ref().map(Kv::from),
        }
    }
}

impl Ev {
    /// `PUT key@mod` or `DEL key@mod`, with `(prev@mod)` when present.
    pub fn brief(&self) -> String {
        let mut s = format!(
            "{} {}@{}",
            if self.put { "PUT" } else { "DEL" },
            String::from_utf8_lossy(&self.kv.key),
            self.kv.mod_revision
        );
        if let Some(p) = &self.prev {
            let v = String::from_utf8_lossy(&p.value);
            let v: String = v.chars().take(16).collect();
            s += &format!(" (prev {v}@{})", p.mod_revision);
        }
        s
    }
}

/// The expected PUT event.
pub fn put_ev(k: &str, v: &str, create: i64, modr: i64, version: i64, prev: Option<Kv>) -> Ev {
    Ev { put: true, kv: kv(k, v, create, modr, version), prev }
}

/// The expected DELETE event: only the key and the revision.
pub fn del_ev(k: &str, modr: i64, prev: Option<Kv>) -> Ev {
    Ev { put: false, kv: kv(k, "", 0, modr, 0), prev }
}

// ---------------------------------------------------------------------------------------------
// Requests

/// A create request for one key.
pub fn on_key(key: &str) -> pb::WatchCreateRequest {
    pb::WatchCreateRequest { key: key.as_bytes().to_vec().into(), ..Default::default() }
}

/// A create request for every key under `prefix`.
pub fn on_prefix(prefix: &str) -> pb::WatchCreateRequest {
    pb::WatchCreateRequest {
        key: prefix.as_bytes().to_vec().into(),
        range_end: prefix_end(prefix.as_bytes()).into(),
        ..Default::default()
    }
}

/// A create request for every key.
pub fn on_all() -> pb::WatchCreateRequest {
    pb::WatchCreateRequest {
        key: Bytes::from_static(b"\0"),
        range_end: Bytes::from_static(b"\0"),
        ..Default::default()
    }
}

pub trait CreateExt {
    fn with_end(self, end: &str) -> Self;
    fn since(self, rev: i64) -> Self;
    fn prev(self) -> Self;
    fn id(self, id: i64) -> Self;
    fn filter(self, f: FilterType) -> Self;
    fn notify(self) -> Self;
}

impl CreateExt for pb::WatchCreateRequest {
    fn with_end(mut self, end: &str) -> Self {
        self.range_end = b(end);
        self
    }
    fn since(mut self, rev: i64) -> Self {
        self.start_revision = rev;
        self
    }
    fn prev(mut self) -> Self {
        self.prev_kv = true;
        self
    }
    fn id(mut self, id: i64) -> Self {
        self.watch_id = id;
        self
    }
    fn filter(mut self, f: FilterType) -> Self {
        self.filters.push(f as i32);
        self
    }
    fn notify(mut self) -> Self {
        self.progress_notify = true;
        self
    }
}

pub fn prefix_end(p: &[u8]) -> Vec<u8> {
    let mut end = p.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

// ---------------------------------------------------------------------------------------------
// Writes through the raw KV client

pub fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

pub async fn put(kv: &mut Raw, k: &str, v: &str) -> i64 {
    let r = kv.kv.put(pb::PutRequest { key: b(k), value: b(v), ..Default::default() }).await;
    r.unwrap_or_else(|e| panic!("put {k}: {e:?}")).into_inner().header.expect("header").revision
}

pub async fn del(kv: &mut Raw, k: &str) -> i64 {
    let r = kv.kv.delete_range(pb::DeleteRangeRequest { key: b(k), ..Default::default() }).await;
    let r = r.unwrap_or_else(|e| panic!("delete {k}: {e:?}")).into_inner();
    assert_eq!(r.deleted, 1, "delete {k}: nothing deleted");
    r.header.expect("header").revision
}

pub fn put_op(k: &str, v: &str) -> pb::RequestOp {
    pb::RequestOp {
        request: Some(pb::request_op::Request::RequestPut(pb::PutRequest {
            key: b(k),
            value: b(v),
            ..Default::default()
        })),
    }
}

pub fn del_op(k: &str) -> pb::RequestOp {
    pb::RequestOp {
        request: Some(pb::request_op::Request::RequestDeleteRange(pb::DeleteRangeRequest {
            key: b(k),
            ..Default::default()
        })),
    }
}

/// An unconditional txn; returns its revision.
pub async fn txn(kv: &mut Raw, ops: Vec<pb::RequestOp>) -> i64 {
    let r = kv.kv.txn(pb::TxnRequest { success: ops, ..Default::default() }).await;
    let r = r.unwrap_or_else(|e| panic!("txn: {e:?}")).into_inner();
    assert!(r.succeeded);
    r.header.expect("header").revision
}

pub async fn compact(kv: &mut Raw, rev: i64) {
    kv.kv
        .compact(pb::CompactionRequest { revision: rev, physical: true })
        .await
        .unwrap_or_else(|e| panic!("compact {rev}: {e:?}"));
}

pub async fn current(kv: &mut Raw) -> i64 {
    let r = kv.kv.range(pb::RangeRequest { key: b("\u{1}probe"), ..Default::default() }).await;
    r.expect("range").into_inner().header.expect("header").revision
}

// ---------------------------------------------------------------------------------------------
// The server process, for CPU accounting

/// The pid of the process listening on `port` (from /proc/net/tcp and the fds in /proc).
pub fn pid_listening_on(port: u16) -> Option<u32> {
    let port_of =
        |addr: &str| addr.rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok());
    let inodes = socket_inodes(|f| f[3] == "0A" && port_of(f[1]) == Some(port));
    if inodes.is_empty() {
        return None;
    }
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .filter_map(|p| p.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .find(|pid| holds_socket(*pid, &inodes))
}

/// CPU time (user + system) a process has used so far.
pub fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read /proc/pid/stat");
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    // USER_HZ is 100 on every Linux this runs on.
    Duration::from_millis(ticks * 10)
}

// ---------------------------------------------------------------------------------------------
// Creates: the handshake, ids and refusals

#[tokio::test]
async fn creates_are_answered_in_order_with_ids_from_zero() {
    let s = server!();
    let mut raw = s.raw_clients().await;
    let cur = put(&mut raw, "a", "1").await;
    let mut ws = Ws::open(&s).await;
    // Sent back to back, without waiting for the answers.
    ws.create(on_key("a"));
    ws.create(on_prefix("p/").prev());
    ws.create(on_key("b").id(3));
    ws.create(on_key("c")); // auto: 2
    ws.create(on_key("d")); // auto: 4, skipping the client's 3
    ws.create(on_key("e").id(100));
    ws.create(on_key("f")); // auto: 5
    let mut ids = Vec::new();
    for _ in 0..7 {
        let r = ws.next().await;
        assert!(r.created && !r.canceled && r.events.is_empty(), "{}", show(&r));
        assert_eq!(hrev(&r), cur, "a created response carries the current revision");
        assert_eq!((r.compact_revision, r.cancel_reason.as_str()), (0, ""));
        ids.push(r.watch_id);
    }
    assert_eq!(ids, [0, 1, 3, 2, 4, 100, 5]);
    ws.quiet().await;

    // Ids are per stream: another stream starts from 0 again.
    let mut other = Ws::open(&s).await;
    assert_eq!(other.watch(on_key("a")).await, 0);

    // Each watch gets its own events, under its own id.
    let r2 = put(&mut raw, "a", "2").await;
    let r = ws.next().await;
    assert_eq!((r.watch_id, r.events.len(), hrev(&r)), (0, 1, r2), "{}", show(&r));
    let r = other.next().await;
    assert_eq!((r.watch_id, r.events.len()), (0, 1), "{}", show(&r));
    let r3 = put(&mut raw, "e", "1").await;
    let r = ws.next().await;
    assert_eq!(r.watch_id, 100, "{}", show(&r));
    assert_eq!(Ev::from(&r.events[0]), put_ev("e", "1", r3, r3, 1, None));
    ws.quiet().await;
    other.quiet().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_never_come_before_their_created_answer() {
    let s = server!();
    let mut raw = s.raw_clients().await;
    let mut last = 0;
    for i in 0..300 {
        last = put(&mut raw, &format!("e/{}", i % 7), "v").await;
    }
    let mut ws = Ws::open(&s).await;
    // Back to back: each replay can start before the next create is answered.
    let n = 8;
    for i in 0..n {
        ws.create(on_prefix("e/").since(1 + 30 * i).prev());
    }
    let mut created: Vec<i64> = Vec::new();
    let mut upto = vec![0_i64; n as usize];
    while created.len() < n as usize || upto.iter().any(|&r| r < last) {
        let r = ws.next().await;
        if r.created {
            assert_eq!(r.watch_id, created.len() as i64, "answers in request order");
            created.push(r.watch_id);
            continue;
        }
        let id = r.watch_id;
        assert!(created.contains(&id), "events of watch {id} before its created answer");
        let w = &mut upto[id as usize];
        for e in &r.events {
            let rev = e.kv.as_ref().unwrap().mod_revision;
            let want = if *w == 0 { (1 + 30 * id).max(2) } else { *w + 1 };
            assert_eq!(rev, want, "watch {id}: a gap or a duplicate");
            *w = rev;
        }
    }
    ws.quiet().await;
}

#[tokio::test]
async fn refused_creates() {
    let s = server!();
    let mut raw = s.raw_clients().await;
    let cur = put(&mut raw, "a", "1").await;
    let mut ws = Ws::open(&s).await;
    assert_eq!(ws.watch(on_key("a").id(7)).await, 7);
    assert_eq!(ws.watch(on_key("a")).await, 0);
    assert_eq!(ws.watch(on_key("a").id(2)).await, 2);

    let refusal = |reason: &str| pb::WatchResponse {
        header: None,
        watch_id: -1,
        created: true,
        canceled: true,
        compact_revision: 0,
        cancel_reason: reason.to_string(),
        fragment: false,
        events: vec![],
    };
    let cases: Vec<(pb::WatchCreateRequest, &str)> = vec![
        (on_key("b").id(7), "mvcc: duplicate watch ID provided on the WatchStream"),
        (on_key("b").with_end("a"), "mvcc: watcher range is empty"),
        (on_key("b").with_end("b"), "mvcc: watcher range is empty"),
        (on_key("a").since(-1), E_COMPACTED),
        (on_prefix("a").since(-100).prev(), E_COMPACTED),
    ];
    for (req, reason) in cases {
        ws.create(req.clone());
        let mut r = ws.next().await;
        assert_eq!(hrev(&r), cur, "{req:?}");
        r.header = None;
        assert_eq!(r, refusal(reason), "{req:?}");
    }
    // Refusals take no id (and an id of 0 asks for one); valid creates still work on the
    // stream, and "\0" as range_end is "every key from key on", never empty.
    assert_eq!(ws.watch(on_key("b").with_end("\0").id(0)).await, 1);
    assert_eq!(ws.watch(on_key("b")).await, 3);
    let r2 = put(&mut raw, "zz", "1").await;
    let r = ws.next().await;
    assert_eq!((r.watch_id, hrev(&r)), (1, r2), "{}", show(&r));
    ws.quiet().await;
}

// ---------------------------------------------------------------------------------------------
// start_revision

#[tokio::test]
async fn start_revision_now_past_and_future() {
    let s = server!();
    let mut raw = s.raw_clients().await;
    let r2 = put(&mut raw, "k", "a").await;
    let r3 = put(&mut raw, "k", "b").await;
    let r4 = put(&mut raw, "k", "c").await;

    let mut now = Ws::open(&s).await;
    let mut past = Ws::open(&s).await;
    let mut future = Ws::open(&s).await;
    now.watch(on_key("k")).await;
    // The replay starts at start_revision, inclusive.
    past.watch(on_key("k").since(r3)).await;
    future.watch(on_key("k").since(r4 + 2)).await;
    assert_eq!(
        past.events_until(0, r4).await,
        [put_ev("k", "b", r2, r3, 2, None), put_ev("k", "c", r2, r4, 3, None)]
    );
    now.quiet().await;
    future.quiet().await;

    let r5 = put(&mut raw, "k", "d").await;
    let r6 = put(&mut raw, "k", "e").await;
    assert_eq!(r6, r4 + 2);
    let d = put_ev("k", "d", r2, r5, 4, None);
    let e = put_ev("k", "e", r2, r6, 5, None);
    assert_eq!(now.events_until(0, r6).await, [d.clone(), e.clone()]);
    assert_eq!(past.events_until(0, r6).await, [d, e.clone()]);
    // The future watch waited for its revision and starts exactly there.
    assert_eq!(future.events_until(0, r6).await, [e]);
    for ws in [&mut now, &mut past, &mut future] {
        ws.quiet().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_turns_live_without_gap_or_duplicate() {
    let s = server!();
    let raw = s.raw_clients().await;
    let writes = 600;
    let writer = {
        let mut raw = s.raw_clients().await;
        tokio::spawn(async move {
            let mut revs = Vec::new();
            for i in 0..writes {
                revs.push(put(&mut raw, &format!("/r/{}", i % 37), &format!("v{i}")).await);
            }
            revs
        })
    };
    // Start watches from the past while the writer runs, at different points of its history.
    let mut streams = Vec::new();
    for (n, at) in [(0, 50), (1, 200), (2, 400)] {
        wait_until("the writer's progress", WAIT, || {
            let mut raw = raw.clone();
            async move { current(&mut raw).await >= at }
        })
        .await;
        let mut ws = Ws::open(&s).await;
        ws.watch(on_prefix("/r/").since(1 + n * 7).prev()).await;
        streams.push((1 + n * 7, ws));
    }
    let revs = writer.await.unwrap();
    let last = *revs.last().unwrap();
    assert_eq!(revs, (2..=last).collect::<Vec<_>>(), "one revision per put");
    for (start, mut ws) in streams {
        let evs = ws.events_until(0, last).await;
        let got: Vec<i64> = evs.iter().map(|e| e.kv.mod_revision).collect();
        assert_eq!(got, (start.max(2)..=last).collect::<Vec<_>>(), "start {start}");
        for e in &evs {
            let i = e.kv.mod_revision - 2;
            assert_eq!(e.kv.value, format!("v{i}").as_bytes());
            // Every key is created by one of the first 37 puts, later ones modify it.
            assert_eq!(e.prev.is_some(), i >= 37, "{}", e.brief());
        }
        ws.quiet().await;
    }
}

// ---------------------------------------------------------------------------------------------
// Events

#[tokio::test]
async fn event_shapes_prev_kv_and_create_versus_modify() {
    let s = server!();
    let mut raw = s.raw_clients().await;
    let mut ws = Ws::open(&s).await;
    let with_prev = ws.watch(on_key("a").prev()).await;
    let plain = ws.watch(on_key("a")).await;

    let r1 = put(&mut raw, "a", "1").await;
    let r2 = put(&mut raw, "a", "2").await;
    let r3 = del(&mut raw, "a").await;
    let r4 = put(&mut raw, "a", "3").await;
    let r5 = put(&mut raw, "a", "4").await;
    let want = [
        put_ev("a", "1", r1, r1, 1, None),
        put_ev("a", "2", r1, r2, 2, Some(kv("a", "1", r1, r1, 1))),
        del_ev("a", r3, Some(kv("a", "2", r1, r2, 2))),
        // A put after a delete is a create: a new create revision, version 1, no prev_kv.
        put_ev("a", "3", r4, r4, 1, None),
        put_ev("a", "4", r4, r5, 2, Some(kv("a", "3", r4, r4, 1))),
    ];
    let mut got: Vec<(i64, Ev)> = Vec::new();
    while got.len() < 2 * want.len() {
        let r = ws.next().await;
        got.extend(r.events.iter().map(|e| (r.watch_id, Ev::from(e))));
    }
    let of =
        |id: i64| got.iter().filter(|(w, _)| *w == id).map(|(_, e)| e.clone()).collect::<Vec<Ev>>();
    let without_prev: Vec<Ev> = want.iter().map(|e| Ev { prev: None, ..e.clone() }).collect();
    assert_eq!(of(with_prev), want);
    assert_eq!(of(plain), without_prev);
    ws.quiet().await;
}

#[tokio::test]
async fn filters_drop_puts_or_deletes() {
    let s = server!();
    let mut raw = s.raw_clients().await;
    let mut ws = Ws::open(&s).await;
    let no_put = ws.watch(on_prefix("f/").filter(FilterType::Noput).prev()).await;
    let no_del = ws.watch(on_prefix("f/").filter(FilterType::Nodelete)).await;
    let both =
        ws.watch(on_prefix("f/").filter(FilterType::Noput).filter(FilterType::Nodelete)).await;
    let r1 = put(&mut raw, "f/a", "1").await;
    let r2 = txn(&mut raw, vec![put_op("f/b", "1"), del_op("f/a")]).await;
    let r3 = del(&mut raw, "f/b").await;
    let mut got: Vec<(i64, Vec<Ev>)> = Vec::new();
    while got.iter().map(|g| g.1.len()).sum::<usize>() < 4 {
        let r = ws.next().await;
        got.push((r.watch_id, r.events.iter().map(Ev::from).collect()));
    }
    let of =
        |id: i64| got.iter().filter(|g| g.0 == id).flat_map(|g| g.1.clone()).collect::<Vec<Ev>>();
    assert_eq!(
        of(no_put),
        vec![
            del_ev("f/a", r2, Some(kv("f/a", "1", r1, r1, 1))),
            del_ev("f/b", r3, Some(kv("f/b", "1", r2, r2, 1))),
        ]
    );
    assert_eq!(
        of(no_del),
        vec![put_ev("f/a", "1", r1, r1, 1, None), put_ev("f/b", "1", r2, r2, 1, None)]
    );
    assert_eq!(of(both), Vec::<Ev>::new());
    ws.quiet().await;
}

#[tokio::test]
async fn a_txn_arrives_whole_in_operation_order() {
    let s = server!();
    let mut raw = s.raw_clients().await;
    let r1 = txn(&mut raw, vec![put_op("t/c", "0"), put_op("t/x", "0")]).await;
    let mut ws = Ws::open(&s).await;
    let all = ws.watch(on_prefix("t/").prev()).await;
    let one = ws.watch(on_key("t/a")).await;
    // Operation order, not key order.
    let r2 = txn(
        &mut raw,
        vec![put_op("t/d", "1"), put_op("t/a", "1"), del_op("t/c"), put_op("t/x", "1")],
    )
    .await;
    // One response per watch, in either order.
    let mut by_watch = std::collections::BTreeMap::new();
    for _ in 0..2 {
        let r = ws.next().await;
        assert_eq!(hrev(&r), r2, "{}", show(&r));
        let evs: Vec<Ev> = r.events.iter().map(Ev::from).collect();
        assert!(by_watch.insert(r.watch_id, evs).is_none(), "{}", show(&r));
    }
    assert_eq!(
        by_watch[&all],
        [
            put_ev("t/d", "1", r2, r2, 1, None),
            put_ev("t/a", "1", r2, r2, 1, None),
            del_ev("t/c", r2, Some(kv("t/c", "0", r1, r1, 1))),
            put_ev("t/x", "1", r1, r2, 2, Some(kv("t/x", "0", r1, r1, 1))),
        ]
    );
    assert_eq!(by_watch[&one], [put_ev("t/a", "1", r2, r2, 1, None)]);

    // Replayed from history, several revisions may share a response; none is ever split.
    let mut revs = vec![r1, r2];
    for i in 0..40 {
        let ops = (0..(i % 5 + 1)).map(|j| put_op(&format!("t/{j}"), &format!("{i}"))).collect();
        revs.push(txn(&mut raw, ops).await);
    }
    let last = *revs.last().unwrap();
    let mut replay = Ws::open(&s).await;
    replay.watch(on_prefix("t/").since(1)).await;
    let mut per_response: Vec<Vec<i64>> = Vec::new();
    while per_response.last().and_then(|r| r.last()).is_none_or(|&r| r < last) {
        let r = replay.next().await;
        assert!(!r.events.is_empty(), "{}", show(&r));
        per_response.push(r.events.iter().map(|e| e.kv.as_ref().unwrap().mod_revision).collect());
    }
    assert_no_split(&per_response);
    let flat: Vec<i64> = per_response.concat();
    let mut want = vec![r1, r1, r2, r2, r2, r2];
    for (i, r) in revs[2..].iter().enumerate() {
        want.extend(std::iter::repeat_n(*r, i % 5 + 1));
    }
    assert_eq!(flat, want);
    replay.quiet().await;
}

/// A watch that keeps up gets one response per revision, however fast revisions come: etcd
/// sends a watcher in step each revision as it commits (it batches only one catching up), and
/// kube-apiserver's watch cache, which hands a response's events back to back to watchers with
/// small buffers, closes more of them when revisions arrive merged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_in_step_gets_one_revision_per_response() {
    let s = server!();
    let mut ws = Ws::open(&s).await;
    let id = ws.watch(on_prefix("step/")).await;
    let (writers, each) = (8, 50);
    let mut tasks = Vec::new();
    for w in 0..writers {
        let mut raw = s.raw_clients().await;
        tasks.push(tokio::spawn(async move {
            let mut last = 0;
            for i in 0..each {
                last = put(&mut raw, &format!("step/{w}"), &format!("{i}")).await;
            }
            last
        }));
    }
    let mut last = 0;
    for t in tasks {
        last = last.max(t.await.unwrap());
    }
    let mut per_response: Vec<Vec<i64>> = Vec::new();
    while per_response.iter().map(Vec::len).sum::<usize>() < writers * each {
        let r = ws.next().await;
        assert!(r.watch_id == id && !r.events.is_empty(), "{}", show(&r));
        let revs: Vec<i64> = r.events.iter().map(|e| e.kv.as_ref().unwrap().mod_revision).collect();
        assert!(
            revs.iter().all(|&v| v == revs[0]) && hrev(&r) == revs[0],
            "a response carries revisions {revs:?} (header {})",
            hrev(&r)
        );
        per_response.push(revs);
    }
    assert_eq!(per_response.last().map(|r| r[0]), Some(last));
    ws.quiet().await;
}

/// Asserts that no revision's events are split across responses (given each response's event
/// revisions, in order).
#[track_caller]
pub fn assert_no_split(per_response: &[Vec<i64>]) {
    let mut seen = std::collections::HashSet::new();
    for (i, revs) in per_response.iter().enumerate() {
        let mut here: Vec<i64> = revs.clone();
        here.dedup();
        for r in here {
            assert!(seen.insert(r), "revision {r} split across responses (again in response {i})");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Compaction

#[tokio::test]
async fn watches_below_the_compaction_revision_are_canceled() {
    let s = server!();
    let mut raw = s.raw_clients().await;
    let r1 = put(&mut raw, "c", "1").await;
    let r2 = put(&mut raw, "c", "2").await;
    let r3 = put(&mut raw, "c", "3").await;
    compact(&mut raw, r2).await;

    let mut ws = Ws::open(&s).await;
    ws.create(on_key("c").since(r1));
    ws.create(on_key("c").since(r2).prev());
    // etcd may answer the second create before canceling the first watch.
    let mut control = Vec::new();
    let mut evs = Vec::new();
    while control.len() < 3 || evs.len() < 2 {
        let r = ws.next().await;
        if r.events.is_empty() {
            control.push(r);
        } else {
            assert_eq!(r.watch_id, 1, "{}", show(&r));
            evs.extend(r.events.iter().map(Ev::from));
        }
    }
    let brief: Vec<(i64, bool, bool, i64)> =
        control.iter().map(|r| (r.watch_id, r.created, r.canceled, r.compact_revision)).collect();
    let created0 = brief.iter().position(|c| *c == (0, true, false, 0)).expect("created 0");
    let compacted0 = brief.iter().position(|c| *c == (0, false, true, r2)).expect("compacted 0");
    assert!(brief.contains(&(1, true, false, 0)), "{brief:?}");
    assert!(created0 < compacted0, "{brief:?}");
    assert!(control.iter().all(|r| r.cancel_reason.is_empty()));
    // Starting at the compaction revision itself works: its state is kept. The previous
    // value of its event is older than the compaction, so prev_kv is left out (etcd reads it
    // at send time, and kube-apiserver's storage tests rely on its absence).
    assert_eq!(
        evs,
        [
            put_ev("c", "2", r1, r2, 2, None),
            put_ev("c", "3", r1, r3, 3, Some(kv("c", "2", r1, r2, 2))),
        ]
    );
    // The compacted watch is gone; the other one lives on.
    let r4 = put(&mut raw, "c", "4").await;
    assert_eq!(ws.events_until(1, r4).await.len(), 1);
    ws.quiet().await;
}

// ---------------------------------------------------------------------------------------------
// Cancel

#[tokio::test]
async fn cancel_is_answered_once_and_stops_events() {
    let s = server!();
    let mut raw = s.raw_clients().await;
    let mut ws = Ws::open(&s).await;
    let a = ws.watch(on_key("a").id(5)).await;
    let all = ws.watch(on_key("\0").with_end("\0")).await;
    assert_eq!((a, all), (5, 0));
    let r1 = put(&mut raw, "a", "1").await;
    let mut n = 0;
    while n < 2 {
        n += ws.next().await.events.len();
    }
    ws.cancel(a);
    let r = ws.next().await;
    assert_eq!(hrev(&r), r1);
    assert_eq!(
        (r.watch_id, r.created, r.canceled, r.compact_revision, r.cancel_reason.as_str()),
        (a, false, true, 0, ""),
        "{}",
        show(&r)
    );
    assert!(r.events.is_empty());
    // Again, and for an id that never existed: no answer at all.
    ws.cancel(a);
    ws.cancel(42);
    ws.cancel(-1);
    ws.quiet().await;
    // No more events for the canceled watch; the other one still gets them.
    let r2 = put(&mut raw, "a", "2").await;
    let r = ws.next().await;
    assert_eq!((r.watch_id, hrev(&r), r.events.len()), (all, r2, 1), "{}", show(&r));
    ws.quiet().await;
    // A canceled client-chosen id may be used again.
    assert_eq!(ws.watch(on_key("a").id(a)).await, a);
}

// ---------------------------------------------------------------------------------------------
// Progress

#[tokio::test]
async fn progress_requests() {
    let s = server!();
    let mut raw = s.raw_clients().await;
    put(&mut raw, "x", "1").await;
    let mut ws = Ws::open(&s).await;
    // No watch on the stream: nothing is sent.
    ws.progress();
    ws.quiet().await;
    ws.watch(on_prefix("p/")).await;
    ws.watch(on_key("q").since(1)).await;
    let cur = current(&mut raw).await;
    // The answer: watch_id -1, the current revision, nothing else. (While the second watch
    // is still replaying, the request is dropped: ask until answered, as clients do.)
    let r = ws.progress_eventually().await;
    assert_eq!(
        r,
        pb::WatchResponse { header: r.header, watch_id: -1, ..Default::default() },
        "{}",
        show(&r)
    );
    assert_eq!(hrev(&r), cur);
    ws.quiet().await;

    // Writes nobody on the stream watches still move the progress revision.
    let other = put(&mut raw, "x", "2").await;
    assert_eq!(ws.progress_now().await, other);

    // Asked right after writes the stream does watch, the answer comes after their events.
    let mut last_progress = other;
    for round in 0..20 {
        let mut written = Vec::new();
        for i in 0..round % 4 {
            written.push(put(&mut raw, &format!("p/{i}"), &format!("{round}")).await);
        }
        ws.progress();
        let mut delivered = Vec::new();
        let progress = loop {
            match ws.next_within(QUIET).await {
                Ok(Some(r)) if is_progress(&r) => break hrev(&r),
                Ok(Some(r)) => {
                    delivered.extend(r.events.iter().map(|e| Ev::from(e).kv.mod_revision))
                }
                // Dropped while a watch was behind: the client asks again.
                Ok(None) => ws.progress(),
                Err(e) => panic!("stream ended: {e:?}"),
            }
        };
        assert_eq!(delivered, written, "round {round}: every event up to the progress first");
        assert!(progress >= last_progress, "progress went back: {progress} < {last_progress}");
        assert_eq!(progress, current(&mut raw).await);
        last_progress = progress;
    }
    ws.quiet().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_requests_wait_for_a_replaying_watch() {
    let s = server!();
    let mut raw = s.raw_clients().await;
    let value = "v".repeat(2000);
    let mut last = 0;
    for i in 0..1500 {
        last = put(&mut raw, &format!("h/{}", i % 100), &value).await;
    }
    let mut ws = Ws::open(&s).await;
    ws.watch(on_key("idle")).await;
    // A long replay, and progress requests while it runs.
    ws.create(on_prefix("h/").since(1));
    ws.progress();
    let mut delivered = 0;
    let mut created = false;
    let mut progress = None;
    while progress.is_none() {
        match ws.next_within(QUIET).await.unwrap_or_else(|e| panic!("{e:?}")) {
            Some(r) if r.created => created = true,
            Some(r) if is_progress(&r) => {
                // Answered only once everything up to it went out.
                assert_eq!(hrev(&r), last);
                assert_eq!(delivered, 1500, "progress before the replay finished: {}", show(&r));
                progress = Some(hrev(&r));
            }
            Some(r) => {
                assert!(created, "events before created: {}", show(&r));
                delivered += r.events.len();
            }
            // The request was dropped while the replay ran (etcd may also defer it): ask again.
            None => ws.progress(),
        }
    }
    ws.quiet().await;
}

#[tokio::test]
async fn periodic_progress_for_idle_watches_that_asked() {
    let s = server!(["--watch-progress-notify-interval", "300ms"]);
    let mut raw = s.raw_clients().await;
    let r1 = put(&mut raw, "a", "1").await;
    let mut ws = Ws::open(&s).await;
    let asked = ws.watch(on_key("a").notify()).await;
    let _quiet = ws.watch(on_key("b")).await;
    let mut seen = 0;
    while seen < 2 {
        let r = ws.next().await;
        assert!(is_progress(&r), "{}", show(&r));
        assert_eq!((r.watch_id, hrev(&r)), (asked, r1), "{}", show(&r));
        seen += 1;
    }
    // Writes the watch does not match move the revision it hears.
    let r2 = put(&mut raw, "zzz", "1").await;
    let r3 = put(&mut raw, "a", "2").await;
    let mut revs = Vec::new();
    loop {
        let r = ws.next().await;
        assert_eq!(r.watch_id, asked, "only the watch that asked: {}", show(&r));
        if r.events.is_empty() {
            assert!(is_progress(&r), "{}", show(&r));
            revs.push(hrev(&r));
            if hrev(&r) == r3 {
                break;
            }
        } else {
            assert_eq!(Ev::from(&r.events[0]).kv.mod_revision, r3);
            revs.push(r3);
        }
    }
    assert!(revs.is_sorted(), "progress went back: {revs:?}");
    assert!(revs.iter().all(|r| [r1, r2, r3].contains(r)), "{revs:?}");
}

/// mem_etcd answers progress when `current >= start_revision - 1`; etcd 3.6.16 only when
/// `current >= start_revision`. Both say nothing while `current < start_revision - 1`.
#[tokio::test]
async fn progress_rule_for_watches_that_start_in_the_future() {
    let s = server!(["--watch-progress-notify-interval", "200ms"]);
    let mem = target() == Kind::MemEtcd;
    let mut raw = s.raw_clients().await;
    let cur = put(&mut raw, "a", "1").await;

    // start = current + 2: silent everywhere, on request and periodically.
    let mut far = Ws::open(&s).await;
    far.watch(on_key("a").since(cur + 2).notify()).await;
    far.progress();
    far.quiet().await;

    // start = current + 1 (Kubernetes watches from its list revision + 1).
    let mut next = Ws::open(&s).await;
    next.watch(on_key("a").since(cur + 1).notify()).await;
    if mem {
        assert_eq!(next.progress_now().await, cur);
        let r = next.next().await;
        assert!(is_progress(&r) && r.watch_id == 0 && hrev(&r) == cur, "{}", show(&r));
    } else {
        next.progress();
        next.quiet().await;
    }

    // One unrelated write: now `far` is at start - 1.
    let r2 = put(&mut raw, "b", "1").await;
    assert_eq!(r2, cur + 1);
    if mem {
        assert_eq!(far.progress_now().await, r2);
    } else {
        far.progress();
        far.quiet().await;
    }
    // Once the store reaches the start revision, every server answers.
    let r3 = put(&mut raw, "b", "2").await;
    far.progress();
    let mut revs = Vec::new();
    loop {
        let r = far.next().await;
        assert!(is_progress(&r), "{}", show(&r));
        revs.push(hrev(&r));
        if r.watch_id == -1 {
            assert_eq!(hrev(&r), r3);
            break;
        }
    }
    assert!(revs.is_sorted(), "progress went back: {revs:?}");
}

// ---------------------------------------------------------------------------------------------
// The end of a stream

/// etcd keeps a stream whose client half-closed it: grpc-gateway's HTTP watches half-close
/// right after sending the create and still expect the events.
#[tokio::test]
async fn a_half_closed_stream_still_delivers() {
    let s = server!();
    let mut raw = s.raw_clients().await;
    let mut ws = Ws::open(&s).await;
    ws.watch(on_prefix("k/")).await;
    ws.close_send();
    let r1 = put(&mut raw, "k/1", "x").await;
    match ws.next_within(WAIT).await {
        Ok(Some(r)) => assert_eq!(Ev::from(&r.events[0]).kv.mod_revision, r1, "{}", show(&r)),
        other => panic!("expected the event after the half-close, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnects_clean_up_and_leave_the_server_idle() {
    let s = server!();
    let pid = pid_listening_on(s.addr().port()).expect("the server's pid");
    let mut raw = s.raw_clients().await;
    let value = "x".repeat(4096);
    // Streams with watches of every kind: live, replaying, future, and one whose client
    // stopped reading with lots of events pending.
    let mut streams = Vec::new();
    for n in 0..4 {
        let ch = tonic::transport::Endpoint::from_shared(s.endpoint())
            .unwrap()
            .initial_stream_window_size(Some(65_535))
            .initial_connection_window_size(Some(65_535))
            .connect()
            .await
            .unwrap();
        let mut ws = Ws::on(ch, 1);
        ws.watch(on_prefix("d/").prev()).await;
        ws.watch(on_prefix("d/").since(1)).await;
        ws.watch(on_key("d/never").since(1_000_000)).await;
        ws.watch(on_prefix("").notify().id(10 + n)).await;
        streams.push(ws);
    }
    for i in 0..600 {
        put(&mut raw, &format!("d/{}", i % 50), &value).await;
    }
    // Half of them read a little, the others nothing at all; one also half-closes.
    for ws in streams.iter_mut().take(2) {
        ws.next().await;
    }
    streams[3].close_send();
    drop(streams);

    // The server still serves, watches included.
    let mut ws = Ws::open(&s).await;
    ws.watch(on_key("after")).await;
    let r = put(&mut raw, "after", "1").await;
    assert_eq!(ws.events_until(0, r).await.len(), 1);
    drop(ws);

    // And does nothing once the clients are gone: no task spins on a dead stream. (First the
    // server closes the connections its clients left: only `raw`'s stays open or half-closed.)
    let port = format!(":{:04X}", s.addr().port());
    wait_until("the server to close the connections its clients left", WAIT, || {
        let open = socket_inodes(|f| f[1].ends_with(&port) && matches!(f[3], "01" | "08"));
        std::future::ready(open.len() <= 1)
    })
    .await;
    let before = cpu_time(pid);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let used = cpu_time(pid) - before;
    assert!(used < Duration::from_millis(250), "the idle server used {used:?} of CPU in 1 s");
}

/// A watch that asked for `fragment` gets a response bigger than `--max-request-bytes` plus
/// gRPC's 512 KiB overhead split into fragments (all but the last flagged), never split
/// otherwise; the events are the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fragment_splits_big_responses_only_when_asked() {
    let s = server!(["--max-request-bytes", "1024"]);
    let mut raw = s.raw_clients().await;
    let big = "v".repeat(900);
    // 700 revisions of 900 bytes (each put under the 1 KiB limit); a watch from the first gets
    // them in one replay of about 650 KB, over 1 KiB + 512 KiB.
    const N: i64 = 700;
    let rev = put(&mut raw, "fr/000", &big).await;
    for i in 1..N {
        put(&mut raw, &format!("fr/{i:03}"), &big).await;
    }
    let mut ws = Ws::open(&s).await;
    let mut create = on_prefix("fr/").since(rev);
    create.fragment = true;
    let fragmented = ws.watch(create).await;
    let mut parts = Vec::new();
    let mut events = Vec::new();
    loop {
        let r = ws.next().await;
        assert_eq!(r.watch_id, fragmented, "{}", show(&r));
        events.extend(r.events.iter().map(Ev::from));
        parts.push((r.fragment, r.events.len()));
        if !r.fragment {
            break;
        }
    }
    assert!(parts.len() > 1, "a 650 KB response over a 513 KiB limit is fragmented: {parts:?}");
    assert!(parts.iter().all(|&(_, n)| n >= 1), "{parts:?}");
    let revs: Vec<i64> = events.iter().map(|e| e.kv.mod_revision).collect();
    assert_eq!(revs, (rev..rev + N).collect::<Vec<_>>());
    let whole = ws.watch(on_prefix("fr/").since(rev)).await;
    let r = ws.next().await;
    assert_eq!((r.watch_id, r.fragment, r.events.len() as i64), (whole, false, N), "{}", show(&r));
    ws.quiet().await;
}
