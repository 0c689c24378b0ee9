//! Reaching the other members (etcd's `rafthttp`, client side): one HTTP/2 connection per peer
//! over its peer URL, shared by openraft's votes and snapshots and the start-up calls; and the
//! streams that carry a message per write or per heartbeat, each a connection of its own
//! ([`super::stream`]): replication to a follower on an `Append` stream, with a few requests in
//! flight ([`APPEND_WINDOW`]), requests forwarded to the leader (`raft::forward`), and probes
//! (`super::probing`). Every call
//! and stream is stamped with this member's cluster id and member id, which the receiving peer
//! checks (`super::stamp`).
//!
//! Raft's messages travel only while a link works both ways, as etcd's do (etcd sends each
//! message on a stream the receiver dialed, so a link blocked one way carries nothing). Here
//! the sender dials, so a member whose incoming peer traffic is blocked would still reach the
//! others, and, leading, keep them from electing a leader they could reach. So a peer that
//! this member heard from once (every peer probes it each heartbeat, [`super::probing`], or
//! sends it appends) but not for [`Network::one_way_after`] gets no Raft message until it is
//! heard again.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use openraft::base::{BoxFuture, BoxStream};
use openraft::error::{NetworkError, RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{Backoff, RPCOption, RaftNetworkFactory, RaftNetworkV2};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, StreamAppendError,
    StreamAppendResult, TransferLeaderRequest, TransferLeaderResponse, VoteRequest, VoteResponse,
};
use parking_lot::Mutex;
use tonic::metadata::MetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

use prost::Message;

use super::codec;
use super::stamp::Stamp;
use crate::metrics::{Histogram, MetricType, Page};
use crate::proto::memetcdpb as pb;
use crate::raft::state_machine::Snapshot;
use crate::raft::state_machine::SnapshotFile;
use crate::raft::types::{PeerNode, TypeConfig, Vote};

/// Snapshot bytes per message.
const SNAPSHOT_CHUNK: usize = 1 << 20;

/// What a member answers the calls of a member it saw removed (etcd's `errMemberRemoved`, its
/// peer handler's 410 Gone), which stops on hearing it.
pub const MEMBER_REMOVED: &str = "the member has been permanently removed from the cluster";

/// The refusal of a removed member's call.
pub fn member_removed() -> tonic::Status {
    tonic::Status::failed_precondition(MEMBER_REMOVED)
}

/// Whether a peer refused a call as coming from a removed member.
pub fn is_member_removed(status: &tonic::Status) -> bool {
    status.code() == tonic::Code::FailedPrecondition && status.message() == MEMBER_REMOVED
}

pub type RaftClient = pb::raft_client::RaftClient<InterceptedService<Channel, Stamp>>;

/// Traffic with one peer (etcd's `etcd_network_peer_*` metrics).
#[derive(Debug)]
pub struct PeerCounters {
    pub sent_bytes: AtomicU64,
    pub received_bytes: AtomicU64,
    /// Append and vote round trips, as the sender measures them.
    pub round_trip: Histogram,
    /// When this member last admitted a call from the peer (ms since [`epoch_ms`]; 0: never).
    pub heard_ms: AtomicU64,
    /// Probes ([`super::probing`]) and `Append` requests admitted from the peer. The peer
    /// sends its next probe only once it has the answer to the last, and a leader's appends
    /// stop a few requests after its follower's answers do, so two arriving after a moment
    /// prove that the link carried traffic both ways after it (`RaftNode::reached_by_quorum`).
    pub probes: AtomicU64,
    /// When the peer last answered one of this member's `Append` requests (ms since
    /// [`epoch_ms`]; 0: never): a leader does not probe a follower its appends just reached.
    pub answered_ms: AtomicU64,
    /// Since when the peer has answered every probe (`None` while unreachable): etcd's
    /// `ActiveSince`, which its membership checks use. Written by the prober alone
    /// ([`super::probing`]); locked for that write and for the membership checks' reads.
    pub active_since: Mutex<Option<std::time::Instant>>,
}

/// Milliseconds since this process's first call of it (never 0).
fn epoch_ms() -> u64 {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    EPOCH.get_or_init(std::time::Instant::now).elapsed().as_millis() as u64 + 1
}

impl PeerCounters {
    /// Records a call from the peer that this member admitted.
    pub fn heard(&self) {
        self.heard_ms.store(epoch_ms(), Ordering::Relaxed);
    }

    /// Records an answer of the peer to one of this member's `Append` requests.
    pub fn answered(&self) {
        self.answered_ms.store(epoch_ms(), Ordering::Relaxed);
    }

    /// Whether the peer answered one of this member's `Append` requests within `window`.
    pub fn answered_within(&self, window: Duration) -> bool {
        let at = self.answered_ms.load(Ordering::Relaxed);
        at != 0 && epoch_ms().saturating_sub(at) <= window.as_millis() as u64
    }

    /// Whether the peer was heard from once, but not within `window`: its calls no longer
    /// reach this member.
    pub fn silent_for(&self, window: Duration) -> bool {
        let at = self.heard_ms.load(Ordering::Relaxed);
        at != 0 && epoch_ms().saturating_sub(at) > window.as_millis() as u64
    }
}

/// Traffic with every peer, by member id.
#[derive(Debug, Default)]
pub struct PeerStats {
    /// Locked to find a peer's counters (a map lookup per message), never while counting.
    peers: Mutex<BTreeMap<u64, Arc<PeerCounters>>>,
}

impl PeerStats {
    pub fn of(&self, id: u64) -> Arc<PeerCounters> {
        self.peers
            .lock()
            .entry(id)
            .or_insert_with(|| {
                Arc::new(PeerCounters {
                    sent_bytes: AtomicU64::new(0),
                    received_bytes: AtomicU64::new(0),
                    round_trip: crate::metrics::seconds(),
                    heard_ms: AtomicU64::new(0),
                    probes: AtomicU64::new(0),
                    answered_ms: AtomicU64::new(0),
                    active_since: Mutex::new(None),
                })
            })
            .clone()
    }

    /// The metrics, with etcd's names and labels.
    pub fn report(&self, page: &mut Page) {
        let peers: Vec<(String, Arc<PeerCounters>)> =
            self.peers.lock().iter().map(|(k, v)| (format!("{k:x}"), v.clone())).collect();
        page.family(
            "etcd_network_peer_sent_bytes_total",
            "The total number of bytes sent to peers.",
            MetricType::COUNTER,
        );
        for (id, c) in &peers {
            page.sample(&[("To", id)], c.sent_bytes.load(Ordering::Relaxed));
        }
        page.family(
            "etcd_network_peer_received_bytes_total",
            "The total number of bytes received from peers.",
            MetricType::COUNTER,
        );
        for (id, c) in &peers {
            page.sample(&[("From", id)], c.received_bytes.load(Ordering::Relaxed));
        }
        page.family(
            "etcd_network_peer_round_trip_time_seconds",
            "Round-Trip-Time histogram between peers",
            MetricType::HISTOGRAM,
        );
        for (id, c) in &peers {
            page.series(&[("To", id)], &c.round_trip);
        }
    }
}

/// Connections to peers, by member id, made on first use and kept while the peer's URLs stay
/// the same. Shared by every replication task and by the forwarding of client requests.
#[derive(Debug)]
pub struct Peers {
    stamp: Stamp,
    /// The stamp's values, for the streams' upgrades.
    pub cluster_id: u64,
    pub member_id: u64,
    /// TLS for https peer URLs (`--peer-*` flags), if configured.
    tls: Option<super::tls::PeerTls>,
    /// Locked to look up or add a connection (cheap: a channel clones a handle).
    channels: Mutex<HashMap<u64, (Vec<String>, Channel)>>,
    /// How long a connection attempt may take.
    connect_timeout: Duration,
    /// Bytes and round trips, per peer.
    pub stats: PeerStats,
}

impl Peers {
    pub fn new(
        cluster_id: u64,
        member_id: u64,
        tls: Option<super::tls::PeerTls>,
        connect_timeout: Duration,
    ) -> Arc<Self> {
        let v = |n: u64| MetadataValue::try_from(format!("{n:x}")).expect("hex is ascii");
        Arc::new(Self {
            stamp: Stamp { cluster: v(cluster_id), member: v(member_id) },
            cluster_id,
            member_id,
            tls,
            channels: Mutex::new(HashMap::new()),
            connect_timeout,
            stats: PeerStats::default(),
        })
    }

    /// The connection to member `id` at `urls` (the first URL; etcd picks one too).
    pub fn channel(&self, id: u64, urls: &[String]) -> Option<Channel> {
        let mut g = self.channels.lock();
        if let Some((u, ch)) = g.get(&id)
            && u == urls
        {
            return Some(ch.clone());
        }
        let url = urls.first()?;
        let socket = crate::raft::membership::unix_socket_path(url);
        // A unix socket's URL is no URI a connection can take its authority from: the channel
        // gets a placeholder, and the connector dials the socket.
        let uri = if socket.is_some() { "http://localhost".to_string() } else { url.clone() };
        let endpoint = Endpoint::from_shared(uri)
            .ok()?
            .connect_timeout(self.connect_timeout)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(5))
            .keep_alive_timeout(Duration::from_secs(5))
            .keep_alive_while_idle(true)
            .initial_stream_window_size(4 << 20)
            .initial_connection_window_size(16 << 20);
        let secure = url.starts_with("https://") || url.starts_with("unixs://");
        let ch = match (&self.tls, secure, socket) {
            (Some(tls), true, Some(path)) => tls.connect_unix_lazy(endpoint, path),
            (_, _, Some(path)) => {
                // etcd's peers dial a unix URL's socket (the path relative to the working
                // directory, as its listener made it) and speak plain HTTP over it.
                let path = std::path::PathBuf::from(path);
                endpoint.connect_with_connector_lazy(tower::service_fn(move |_: http::Uri| {
                    let path = path.clone();
                    async move {
                        let s = tokio::net::UnixStream::connect(path).await?;
                        Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(s))
                    }
                }))
            }
            (Some(tls), true, None) => tls.connect_lazy(endpoint),
            _ => endpoint.connect_lazy(),
        };
        g.insert(id, (urls.to_vec(), ch.clone()));
        Some(ch)
    }

    /// A connection of its own to a peer at `urls` (the first URL, as [`Self::channel`]), for
    /// an `Append` or `Forward` stream ([`super::stream`]).
    pub async fn dial(&self, urls: &[String]) -> std::io::Result<super::stream::BoxIo> {
        let bad = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, why);
        let url = urls.first().ok_or_else(|| bad("no peer URL".to_string()))?;
        let secure = url.starts_with("https://") || url.starts_with("unixs://");
        let dial = async {
            if let Some(path) = crate::raft::membership::unix_socket_path(url) {
                return Ok::<super::stream::BoxIo, std::io::Error>(match (&self.tls, secure) {
                    (Some(tls), true) => Box::new(tls.connect_unix(path).await?),
                    _ => Box::new(tokio::net::UnixStream::connect(path).await?),
                });
            }
            let uri: http::Uri = url.parse().map_err(|e| bad(format!("peer URL {url}: {e}")))?;
            let host = uri.host().unwrap_or("localhost").trim_matches(['[', ']']);
            let port = uri.port_u16().unwrap_or(if secure { 443 } else { 80 });
            Ok(match (&self.tls, secure) {
                (Some(tls), true) => Box::new(tls.connect_tcp(host, port).await?),
                (None, true) => return Err(bad(format!("{url}: no peer TLS configured"))),
                _ => {
                    let tcp = tokio::net::TcpStream::connect((host, port)).await?;
                    tcp.set_nodelay(true)?;
                    Box::new(tcp)
                }
            })
        };
        tokio::time::timeout(self.connect_timeout, dial)
            .await
            .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
    }

    pub fn raft_client(&self, id: u64, urls: &[String]) -> Option<RaftClient> {
        let ch = self.channel(id, urls)?;
        Some(
            pb::raft_client::RaftClient::with_interceptor(ch, self.stamp.clone())
                .max_decoding_message_size(usize::MAX)
                .max_encoding_message_size(usize::MAX),
        )
    }
}

/// openraft's network factory: a connection per target.
#[derive(Clone, Debug)]
pub struct Network {
    pub peers: Arc<Peers>,
    /// How long a peer heard from before may stay silent before Raft stops sending it
    /// anything (the module's doc says why).
    pub one_way_after: Duration,
}

impl Network {
    /// [`Network::one_way_after`]: three heartbeat intervals, or a quarter of the election
    /// timeout if longer. Every peer probes (or appends) every heartbeat, so a working link is
    /// not cut by a late probe or two; and the followers of a leader whose incoming traffic
    /// stops hear from it no longer than that, then elect another after their election
    /// timeout, as etcd's would, whose leader's messages stop at once. (Two election timeouts made that
    /// failover 3-4 s where etcd's takes 1-2.)
    pub fn one_way_window(heartbeat: Duration, election: Duration) -> Duration {
        (3 * heartbeat).max(election / 4)
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Connection;

    async fn new_client(&mut self, target: u64, node: &PeerNode) -> Connection {
        Connection {
            client: self.peers.raft_client(target, &node.peer_urls),
            peers: self.peers.clone(),
            urls: node.peer_urls.clone(),
            target,
            stats: self.peers.stats.of(target),
            one_way_after: self.one_way_after,
            pipe: None,
        }
    }
}

/// openraft's view of one peer.
#[derive(Debug)]
pub struct Connection {
    /// `None` when the peer has no usable URL: every call is then unreachable.
    client: Option<RaftClient>,
    /// Where the `Append` stream is dialed from, and to.
    peers: Arc<Peers>,
    urls: Vec<String>,
    target: u64,
    stats: Arc<PeerCounters>,
    one_way_after: Duration,
    /// The `Append` stream this connection's sessions share, once opened.
    pipe: Option<Pipe>,
}

fn unreachable(e: impl std::fmt::Display) -> RPCError<TypeConfig> {
    RPCError::Unreachable(Unreachable::from_string(e.to_string()))
}

/// A failed call: unreachable (openraft backs off) unless the peer answered with an error.
fn rpc_error(s: tonic::Status) -> RPCError<TypeConfig> {
    match s.code() {
        tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Cancelled => {
            unreachable(s.message())
        }
        _ => RPCError::Network(NetworkError::from_string(format!("{}: {}", s.code(), s.message()))),
    }
}

/// Refuses to send to `target` while its calls no longer reach this member (see the module).
fn both_ways(
    stats: &PeerCounters,
    target: u64,
    window: Duration,
) -> Result<(), RPCError<TypeConfig>> {
    if stats.silent_for(window) {
        return Err(unreachable(format!(
            "member {target:x} has not reached this member for {window:?}: the link works one \
             way at most"
        )));
    }
    Ok(())
}

impl Connection {
    fn client(&self) -> Result<RaftClient, RPCError<TypeConfig>> {
        both_ways(&self.stats, self.target, self.one_way_after)?;
        self.client
            .clone()
            .ok_or_else(|| unreachable(format!("member {:x} has no peer URL", self.target)))
    }
}

/// Requests in flight on one `Append` stream. The leader sends entries appended meanwhile
/// without waiting for the answer to the previous request (etcd's raft pipelines its appends
/// too, up to `MaxInflightMsgs`): a follower's log and commit keep up a round trip sooner, and
/// in the 3-member e2e bench puts cost about 15% less CPU than with one request at a time
/// (79 against 93 µs). Four were as good as sixteen; the window bounds what is sent ahead.
const APPEND_WINDOW: usize = 4;

/// The answers of an `Append` session, as openraft takes them.
type AppendAnswers<'s> =
    BoxStream<'s, Result<StreamAppendResult<TypeConfig>, RPCError<TypeConfig>>>;

/// The requests of one session, as openraft makes them.
type AppendRequests = BoxStream<'static, AppendEntriesRequest<TypeConfig>>;

/// A long-lived `Append` stream to the peer, which carries every session openraft opens on
/// this connection, one after another (etcd's peers keep their message streams open too).
/// openraft opens a session for each heartbeat, and each round of linearizable reads is a
/// heartbeat: a stream for each would cost the leader and the follower its opening and
/// openraft's follower-side task, per round.
///
/// The stream's writer pulls each session's requests itself ([`PipeBody`]), so a request goes
/// from openraft to the socket in one hop.
#[derive(Debug)]
struct Pipe {
    /// Hands each session's requests to the body.
    sessions: tokio::sync::mpsc::UnboundedSender<AppendRequests>,
    /// The peer's answers, one per request, in order.
    answers: super::stream::Answers,
    /// What the body and the sessions share.
    shared: Arc<PipeShared>,
}

/// What a pipe's body and its sessions share.
#[derive(Debug, Default)]
struct PipeShared {
    /// Locked by the body once per request and by the session once per answer; never across
    /// an await.
    state: Mutex<PipeState>,
    /// Wakes the session when its requests ended, so it ends once they are answered.
    input_done: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct PipeState {
    /// When each request not answered yet went, oldest first: for the round-trip metric, the
    /// deadline and the window.
    sent: std::collections::VecDeque<Instant>,
    /// Whether the current session's requests ended (a session ends when they are answered).
    input_done: bool,
    /// Why the body stopped the session's requests, when it did (the link works one way).
    stopped: Option<RPCError<TypeConfig>>,
    /// The body, while the window is full.
    body: Option<std::task::Waker>,
}

/// What a pipe's writer sends: the requests of each session in turn.
struct PipeBody {
    sessions: tokio::sync::mpsc::UnboundedReceiver<AppendRequests>,
    /// The session whose requests go now.
    current: Option<AppendRequests>,
    shared: Arc<PipeShared>,
    stats: Arc<PeerCounters>,
    target: u64,
    one_way: Duration,
}

impl PipeBody {
    /// The current session's requests ended (or were stopped): the session is told.
    fn end_session(&mut self, stopped: Option<RPCError<TypeConfig>>) {
        self.current = None;
        let mut g = self.shared.state.lock();
        g.input_done = true;
        g.stopped = stopped;
        drop(g);
        self.shared.input_done.notify_one();
    }
}

impl futures_util::Stream for PipeBody {
    type Item = pb::AppendRequest;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<pb::AppendRequest>> {
        use std::task::Poll;
        let this = &mut *self;
        loop {
            let Some(current) = this.current.as_mut() else {
                match this.sessions.poll_recv(cx) {
                    Poll::Ready(Some(requests)) => {
                        this.current = Some(requests);
                        continue;
                    }
                    // The connection dropped the pipe: the call ends.
                    Poll::Ready(None) => return Poll::Ready(None),
                    Poll::Pending => return Poll::Pending,
                }
            };
            {
                let mut g = this.shared.state.lock();
                if g.sent.len() >= APPEND_WINDOW {
                    g.body = Some(cx.waker().clone());
                    return Poll::Pending;
                }
            }
            match current.poll_next_unpin(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => this.end_session(None),
                Poll::Ready(Some(rpc)) => {
                    if let Err(e) = both_ways(&this.stats, this.target, this.one_way) {
                        this.end_session(Some(e));
                        continue;
                    }
                    let msg = codec::append_request(&rpc);
                    this.stats.sent_bytes.fetch_add(msg.encoded_len() as u64, Ordering::Relaxed);
                    this.shared.state.lock().sent.push_back(Instant::now());
                    return Poll::Ready(Some(msg));
                }
            }
        }
    }
}

/// One session on the pipe, as openraft reads its answers.
struct Session<'s> {
    /// The connection's pipe; `None` once the session left it unusable (a refusal, which ends
    /// the peer's side, any failure, or answers still owed when the session was dropped).
    pipe: &'s mut Option<Pipe>,
    stats: Arc<PeerCounters>,
    target: u64,
    /// openraft's heartbeat interval: an answer later than this makes the peer unreachable,
    /// as for one call.
    ttl: Duration,
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        // openraft gave up on the session before it ended: its requests may still be going,
        // and answers to them coming. The next session opens a new stream.
        if let Some(pipe) = self.pipe.as_ref() {
            let g = pipe.shared.state.lock();
            if !g.input_done || !g.sent.is_empty() {
                drop(g);
                *self.pipe = None;
            }
        }
    }
}

/// What a session waited for.
enum Step {
    Answer(Result<Option<pb::AppendResponse>, tonic::Status>),
    InputDone,
    Late,
}

impl Session<'_> {
    /// The next answer (`None`: the session is over); the `bool` says whether the session
    /// goes on after it.
    async fn next(
        &mut self,
    ) -> Option<(Result<StreamAppendResult<TypeConfig>, RPCError<TypeConfig>>, bool)> {
        loop {
            let pipe = self.pipe.as_mut()?;
            let late_at = {
                let mut g = pipe.shared.state.lock();
                if g.input_done && g.sent.is_empty() {
                    return g.stopped.take().map(|e| (Err(e), false));
                }
                g.sent.front().map(|at| *at + self.ttl)
            };
            let step = tokio::select! {
                biased;
                answer = pipe.answers.message() => Step::Answer(answer),
                _ = pipe.shared.input_done.notified() => Step::InputDone,
                _ = tokio::time::sleep_until(late_at.unwrap_or_else(Instant::now).into()),
                    if late_at.is_some() => Step::Late,
            };
            let failed = match step {
                Step::InputDone => continue,
                Step::Answer(Ok(Some(msg))) => {
                    let (at, body) = {
                        let mut g = pipe.shared.state.lock();
                        (g.sent.pop_front(), g.body.take())
                    };
                    if let Some(at) = at {
                        self.stats.round_trip.observe(at.elapsed().as_secs_f64());
                    }
                    self.stats.answered();
                    if let Some(body) = body {
                        body.wake();
                    }
                    let r = codec::from_append_result(msg)
                        .map_err(|e| RPCError::Network(NetworkError::from_string(e.to_string())));
                    // openraft stops at the first refusal, and the peer ends its side.
                    let go_on = matches!(r, Ok(Ok(_)));
                    if !go_on {
                        *self.pipe = None;
                    }
                    return Some((r, go_on));
                }
                Step::Answer(Ok(None)) => {
                    unreachable(format!("member {:x} ended the append stream", self.target))
                }
                Step::Answer(Err(status)) => rpc_error(status),
                Step::Late => unreachable(format!(
                    "member {:x}: no append answer in {:?}",
                    self.target, self.ttl
                )),
            };
            *self.pipe = None;
            return Some((Err(failed), false));
        }
    }
}

impl Connection {
    /// Sends `input` to the peer on the connection's `Append` stream, opened first if there
    /// is none.
    async fn open_append_stream<S>(
        &mut self,
        input: S,
        ttl: Duration,
    ) -> Result<AppendAnswers<'_>, RPCError<TypeConfig>>
    where
        S: futures_util::Stream<Item = AppendEntriesRequest<TypeConfig>> + Send + Unpin + 'static,
    {
        // The first request is taken before the stream opens: openraft waits out its backoff
        // while producing it, so a peer that is down is retried at the backoff's pace and not
        // in a loop of failed connects.
        let mut input = input;
        let Some(first) = input.next().await else {
            return Ok(Box::pin(futures_util::stream::empty()));
        };
        both_ways(&self.stats, self.target, self.one_way_after)?;
        let requests: AppendRequests =
            Box::pin(futures_util::stream::once(async { first }).chain(input));
        let handed = match &self.pipe {
            Some(pipe) => {
                *pipe.shared.state.lock() = PipeState::default();
                pipe.sessions.send(requests).map_err(|e| e.0)
            }
            None => Err(requests),
        };
        if let Err(requests) = handed {
            self.client()?;
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            let _ = tx.send(requests);
            let shared = Arc::new(PipeShared::default());
            let body = PipeBody {
                sessions: rx,
                current: None,
                shared: shared.clone(),
                stats: self.stats.clone(),
                target: self.target,
                one_way: self.one_way_after,
            };
            self.pipe = None;
            let peers = &self.peers;
            let open = async {
                let io = peers.dial(&self.urls).await.map_err(unreachable)?;
                let (write, read) = super::stream::open(
                    io,
                    super::stream::APPEND_PATH,
                    peers.cluster_id,
                    peers.member_id,
                )
                .await
                .map_err(|e| rpc_error(e.status()))?;
                Ok::<_, RPCError<TypeConfig>>((write, super::stream::Answers::new(read)))
            };
            let (write, answers) = match tokio::time::timeout(ttl, open).await {
                Ok(r) => r?,
                Err(_) => {
                    return Err(unreachable(format!(
                        "member {:x}: no answer in {ttl:?}",
                        self.target
                    )));
                }
            };
            // The requests are written by a task of their own, which ends when the pipe is
            // dropped (its sessions' sender with it) and closes its side of the connection.
            tokio::spawn(super::stream::send(write, body));
            self.pipe = Some(Pipe { sessions: tx, answers, shared });
        }
        let session =
            Session { pipe: &mut self.pipe, stats: self.stats.clone(), target: self.target, ttl };
        let answers = futures_util::stream::unfold(Some(session), |session| async move {
            let mut session = session?;
            let (answer, go_on) = session.next().await?;
            Some((answer, go_on.then_some(session)))
        });
        Ok(Box::pin(answers))
    }
}

fn with_timeout<T>(msg: T, ttl: Duration) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.set_timeout(ttl);
    r
}

impl RaftNetworkV2<TypeConfig> for Connection {
    type SnapshotData = SnapshotFile;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        // openraft sends everything through `stream_append`; this is the same road for one.
        let mut answers = self.stream_append(futures_util::stream::iter([rpc]), option).await?;
        match answers.next().await {
            Some(Ok(Ok(matched))) => Ok(AppendEntriesResponse::PartialSuccess(matched)),
            Some(Ok(Err(StreamAppendError::Conflict(_)))) => Ok(AppendEntriesResponse::Conflict),
            Some(Ok(Err(StreamAppendError::HigherVote(v)))) => {
                Ok(AppendEntriesResponse::HigherVote(v))
            }
            Some(Err(e)) => Err(e),
            None => Err(unreachable("the peer ended the append stream without an answer")),
        }
    }

    fn stream_append<'s, S>(
        &'s mut self,
        input: S,
        option: RPCOption,
    ) -> BoxFuture<'s, Result<AppendAnswers<'s>, RPCError<TypeConfig>>>
    where
        S: futures_util::Stream<Item = AppendEntriesRequest<TypeConfig>>
            + openraft::OptionalSend
            + Unpin
            + 'static,
    {
        Box::pin(async move {
            let answers: AppendAnswers<'s> =
                self.open_append_stream(input, option.soft_ttl()).await?;
            Ok(answers)
        })
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        let req = with_timeout(codec::vote_request(&rpc), option.soft_ttl());
        let resp = self.client()?.vote(req).await.map_err(rpc_error)?;
        codec::from_vote_response(resp.into_inner())
            .map_err(|e| RPCError::Network(NetworkError::from_string(e.to_string())))
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        let req = with_timeout(codec::vote_request(&rpc), option.soft_ttl());
        let resp = self.client()?.pre_vote(req).await.map_err(rpc_error)?;
        codec::from_vote_response(resp.into_inner())
            .map_err(|e| RPCError::Network(NetworkError::from_string(e.to_string())))
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl std::future::Future<Output = ReplicationClosed> + Send + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let mut client = self.client().map_err(StreamingError::from)?;
        let path = snapshot.snapshot.path.clone();
        let header = pb::SnapshotChunk {
            kind: Some(pb::snapshot_chunk::Kind::Header(pb::SnapshotHeader {
                vote: Some(codec::vote(&vote)),
                meta: Some(codec::snapshot_meta(&snapshot.meta)),
                size: std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0),
            })),
        };
        // The file is read on a blocking thread, a chunk at a time, as the peer takes them.
        let (tx, rx) = tokio::sync::mpsc::channel::<pb::SnapshotChunk>(4);
        let reader = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            let mut f = std::fs::File::open(&path)?;
            f.seek(SeekFrom::Start(0))?;
            if tx.blocking_send(header).is_err() {
                return Ok(());
            }
            loop {
                let mut buf = vec![0u8; SNAPSHOT_CHUNK];
                let n = f.read(&mut buf)?;
                if n == 0 {
                    return Ok(());
                }
                buf.truncate(n);
                let chunk =
                    pb::SnapshotChunk { kind: Some(pb::snapshot_chunk::Kind::Data(buf.into())) };
                if tx.blocking_send(chunk).is_err() {
                    return Ok(());
                }
            }
        });
        let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
        let send = client.install_snapshot(stream);
        tokio::pin!(cancel);
        let resp = tokio::select! {
            r = send => r,
            closed = &mut cancel => {
                reader.abort();
                return Err(StreamingError::Closed(closed));
            }
        };
        let _ = reader.await;
        let resp = resp.map_err(|s| StreamingError::from(rpc_error(s)))?.into_inner();
        let vote = codec::from_vote(&resp.vote)
            .map_err(|e| StreamingError::Network(NetworkError::from_string(e.to_string())))?;
        Ok(SnapshotResponse::new(vote))
    }

    async fn transfer_leader(
        &mut self,
        req: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        let req = with_timeout(codec::transfer_leader(&req), option.soft_ttl());
        self.client()?.transfer_leader(req).await.map_err(rpc_error)?;
        Ok(Ok(()))
    }

    fn backoff(&self) -> Option<Backoff> {
        // A member that is down is retried every 200 ms: quick to notice it back, cheap while
        // it stays away.
        Some(Backoff::new(std::iter::repeat(Duration::from_millis(200))))
    }
}
