//! The streams between members that carry a message per write or per heartbeat (etcd's
//! `rafthttp` message streams): a leader's `Append` stream to each follower, each member's
//! `Forward` stream to the leader, on which it sends the requests only the leader can serve
//! (`raft::forward`), and each member's `Probe` stream to every peer (`probing`). A stream is
//! a connection of its own to the receiver's peer URL, opened with an HTTP/1.1 upgrade
//! ([`APPEND_PATH`], [`FORWARD_PATH`] or [`PROBE_PATH`], `Upgrade: memetcd-raft`) that carries the
//! caller's stamp as the gRPC calls' metadata does; after the receiver's `101`, each message
//! is a frame: its length (4 bytes, big endian) and its protobuf bytes.
//!
//! Why not gRPC streams, as the other peer calls are: HTTP/2 costs each message its framing,
//! flow control, the connection task's hop and the stream task's hop on each side, and those
//! were most of a 3-member cluster's CPU per write behind kube-apiserver (etcd's peers use
//! HTTP/1.1 streams of length-prefixed messages for the same reason). Here the task that
//! makes a message writes it to the socket, every message ready goes in one write, and the
//! task that reads a message hands it on itself.
//!
//! On an `Append` stream the leader writes `AppendRequest`s; the follower answers each, in
//! order, with a frame whose first byte says what follows: [`ANSWER`] and an `AppendResponse`,
//! or [`REFUSED`], a gRPC code (4 bytes) and a message, after which the follower ends the
//! stream. On a `Forward` stream a member writes `ForwardCall`s and the leader answers each
//! with a `ForwardReply` as it is served, matched by id. On a `Probe` stream each probe is an
//! empty frame, admitted as any call from the prober, and answered as an `Append` request is,
//! with an empty [`ANSWER`] or a [`REFUSED`] (a removed member's, a dropped caller's). A
//! refused upgrade answers an HTTP status with the code and message in headers.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use futures_util::{FutureExt, Stream, StreamExt};
use prost::Message;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::codec;
use crate::proto::memetcdpb as pb;
use crate::raft::node::RaftNode;

/// The `Append` stream's upgrade path on the peer URL.
pub const APPEND_PATH: &str = "/raft/stream/append";
/// The `Forward` stream's upgrade path on the peer URL.
pub const FORWARD_PATH: &str = "/raft/stream/forward";
/// The `Probe` stream's upgrade path on the peer URL.
pub const PROBE_PATH: &str = "/raft/stream/probe";
/// The upgrades' protocol token.
pub const UPGRADE: &str = "memetcd-raft";

/// An answer frame: an `AppendResponse` follows.
const ANSWER: u8 = 0;
/// An answer frame: the follower refused the request and ends the stream.
const REFUSED: u8 = 1;

/// The longest answer head a leader reads before giving up on the upgrade.
const MAX_HEAD: usize = 16 * 1024;

/// Bytes gathered before a write, at most (more ready messages wait for the next).
const WRITE_BATCH: usize = 1 << 20;

/// A connection a stream runs on (TCP, a unix socket, TLS over either).
pub trait Io: AsyncRead + AsyncWrite + Send + Sync + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Sync + Unpin + 'static> Io for T {}

/// A dialed connection.
pub type BoxIo = Box<dyn Io>;

/// Appends one frame holding `msg` to `buf`.
fn put_frame(buf: &mut BytesMut, tag: Option<u8>, msg: &impl Message) {
    let len = msg.encoded_len() + usize::from(tag.is_some());
    buf.reserve(4 + len);
    buf.put_u32(len as u32);
    if let Some(t) = tag {
        buf.put_u8(t);
    }
    msg.encode(buf).expect("reserved");
}

/// Appends a refusal frame.
fn put_refusal(buf: &mut BytesMut, status: &tonic::Status) {
    let text = status.message().as_bytes();
    buf.put_u32((1 + 4 + text.len()) as u32);
    buf.put_u8(REFUSED);
    buf.put_i32(status.code() as i32);
    buf.put_slice(text);
}

/// Reads frames from one side of a stream.
pub struct Frames<R> {
    io: R,
    /// What was read and not yet taken as a frame.
    buf: BytesMut,
}

impl<R: AsyncRead + Unpin> Frames<R> {
    fn new(io: R, buf: BytesMut) -> Self {
        Self { io, buf }
    }

    /// The next frame's bytes; `None` when the other side ended the stream between frames.
    pub async fn next(&mut self) -> std::io::Result<Option<Bytes>> {
        loop {
            if self.buf.len() >= 4 {
                let len = u32::from_be_bytes(self.buf[..4].try_into().expect("4 bytes")) as usize;
                if self.buf.len() >= 4 + len {
                    self.buf.advance(4);
                    return Ok(Some(self.buf.split_to(len).freeze()));
                }
                self.buf.reserve(4 + len - self.buf.len());
            } else if self.buf.capacity() - self.buf.len() < 4096 {
                self.buf.reserve(8192);
            }
            if self.io.read_buf(&mut self.buf).await? == 0 {
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(std::io::ErrorKind::UnexpectedEof.into())
                };
            }
        }
    }
}

/// The follower's answers, as the leader reads them.
pub struct Answers {
    frames: Incoming,
}

impl Answers {
    /// The answers read from `frames`, an `Append` stream's.
    pub fn new(frames: Incoming) -> Self {
        Self { frames }
    }
}

impl<R> std::fmt::Debug for Frames<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Frames").field("buffered", &self.buf.len()).finish()
    }
}

/// The reading side of a stream this member opened.
pub type Incoming = Frames<tokio::io::ReadHalf<BoxIo>>;

/// The writing side of a stream this member opened.
pub type Outgoing = tokio::io::WriteHalf<BoxIo>;

impl std::fmt::Debug for Answers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Answers").field("buffered", &self.frames.buf.len()).finish()
    }
}

impl Answers {
    /// The next answer; `None` when the follower ended the stream; an error for a refusal or a
    /// broken connection.
    pub async fn message(&mut self) -> Result<Option<pb::AppendResponse>, tonic::Status> {
        let Some(frame) = self.frames.next().await.map_err(broken)? else {
            return Ok(None);
        };
        pb::AppendResponse::decode(answer(frame)?)
            .map(Some)
            .map_err(|e| tonic::Status::internal(format!("a malformed append answer: {e}")))
    }
}

/// What an answer frame carries: the answer's bytes, or the refusal's status.
fn answer(mut frame: Bytes) -> Result<Bytes, tonic::Status> {
    match frame.first() {
        Some(&ANSWER) => {
            frame.advance(1);
            Ok(frame)
        }
        Some(&REFUSED) if frame.len() >= 5 => {
            frame.advance(1);
            let code = tonic::Code::from(frame.get_i32());
            Err(tonic::Status::new(code, String::from_utf8_lossy(&frame).into_owned()))
        }
        _ => Err(tonic::Status::internal("a malformed answer frame")),
    }
}

/// Sends one probe on a `Probe` stream this member opened and waits for its answer: `Ok` once
/// the peer admitted it, its refusal, or the broken stream's status.
pub async fn probe(out: &mut Outgoing, answers: &mut Incoming) -> Result<(), tonic::Status> {
    out.write_all(&0u32.to_be_bytes()).await.map_err(broken)?;
    match answers.next().await.map_err(broken)? {
        Some(frame) => answer(frame).map(drop),
        None => Err(tonic::Status::unavailable("the peer ended the probe stream")),
    }
}

fn broken(e: std::io::Error) -> tonic::Status {
    tonic::Status::unavailable(format!("the stream broke: {e}"))
}

/// Why a stream did not open. Nothing was sent on it either way.
#[derive(Debug)]
pub enum NotOpened {
    /// The receiver refused it, as it would have refused a call: its status.
    Refused(tonic::Status),
    /// The connection failed, or the receiver does not serve the stream.
    Failed(tonic::Status),
}

impl NotOpened {
    /// The status a call would have failed with.
    pub fn status(self) -> tonic::Status {
        match self {
            Self::Refused(s) | Self::Failed(s) => s,
        }
    }
}

/// Opens the stream at `path` on `io` (dialed to the receiver), stamped with this member's
/// `cluster` and `member` ids; returns where the messages go and where the answers come from.
/// Nothing is sent on the stream before it opens, so a failure to open it says so.
pub async fn open(
    io: BoxIo,
    path: &str,
    cluster: u64,
    member: u64,
) -> Result<(Outgoing, Incoming), NotOpened> {
    let mut io = io;
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: member\r\nConnection: Upgrade\r\nUpgrade: {UPGRADE}\r\n\
         {}: {cluster:x}\r\n{}: {member:x}\r\n\r\n",
        super::stamp::CLUSTER_ID_KEY,
        super::stamp::MEMBER_ID_KEY,
    );
    io.write_all(head.as_bytes()).await.map_err(|e| NotOpened::Failed(broken(e)))?;
    let mut buf = BytesMut::with_capacity(1024);
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > MAX_HEAD {
            return Err(NotOpened::Failed(tonic::Status::internal(
                "the stream's answer head is too long",
            )));
        }
        if io.read_buf(&mut buf).await.map_err(|e| NotOpened::Failed(broken(e)))? == 0 {
            return Err(NotOpened::Failed(tonic::Status::unavailable(
                "the peer closed the stream's upgrade",
            )));
        }
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    buf.advance(end);
    let status_line = head.lines().next().unwrap_or("");
    if !status_line.starts_with("HTTP/1.1 101 ") {
        let header = |name: &str| {
            head.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_string())
            })
        };
        let code = header("memetcd-code").and_then(|c| c.parse::<i32>().ok());
        return Err(match code {
            Some(c) => NotOpened::Refused(tonic::Status::new(
                tonic::Code::from(c),
                header("memetcd-message").unwrap_or_default(),
            )),
            // Not a mem_etcd member: nothing to stream to.
            None => NotOpened::Failed(tonic::Status::unimplemented(format!(
                "the peer does not serve {path}: {status_line}"
            ))),
        });
    }
    let (read, write) = tokio::io::split(io);
    Ok((write, Frames::new(read, buf)))
}

/// Writes the messages of `requests` to `write` until they end or the connection breaks; each
/// write takes every message ready by then.
pub async fn send<W, S, M>(write: W, requests: S)
where
    W: AsyncWrite + Unpin,
    S: Stream<Item = M> + Unpin,
    M: Message,
{
    send_with(write, requests, |buf, m| {
        put_frame(buf, None, &m);
        false
    })
    .await
}

/// Writes what `put` makes of each item of `items` to `write`, every item ready in one write,
/// until the items end, `put` says the last went (true), or the connection breaks.
async fn send_with<W, S, T>(mut write: W, items: S, mut put: impl FnMut(&mut BytesMut, T) -> bool)
where
    W: AsyncWrite + Unpin,
    S: Stream<Item = T> + Unpin,
{
    let mut items = items;
    let mut buf = BytesMut::with_capacity(8192);
    let mut last = false;
    while !last {
        let Some(first) = items.next().await else { break };
        last = put(&mut buf, first);
        while !last && buf.len() < WRITE_BATCH {
            match items.next().now_or_never() {
                Some(Some(more)) => last = put(&mut buf, more),
                _ => break,
            }
        }
        if write.write_all(&buf).await.is_err() {
            return;
        }
        buf.clear();
    }
    let _ = write.shutdown().await;
}

/// What a follower answers a refused upgrade.
async fn refuse<C: AsyncWrite + Unpin>(conn: &mut C, status: &tonic::Status) {
    let message: String =
        status.message().chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    let head = format!(
        "HTTP/1.1 403 Forbidden\r\nmemetcd-code: {}\r\nmemetcd-message: {message}\r\n\
         Content-Length: 0\r\nConnection: close\r\n\r\n",
        status.code() as i32
    );
    let _ = conn.write_all(head.as_bytes()).await;
    let _ = conn.shutdown().await;
}

/// Serves a stream another member opened on `conn` with an upgrade to `path` (`rest`: what
/// it sent after the upgrade's head, whose stamp headers were `cluster` and `member`), on this
/// member's `node` (none while it runs alone: refused).
pub async fn serve<C>(
    node: Option<Arc<RaftNode>>,
    path: &str,
    cluster: Option<&str>,
    member: Option<&str>,
    mut conn: C,
    rest: BytesMut,
) where
    C: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let parse = |v: Option<&str>| v.and_then(|v| u64::from_str_radix(v, 16).ok());
    let admitted = match node {
        None => Err(tonic::Status::unavailable("this member runs alone: it is in no cluster yet")),
        Some(node) => super::stamp::check_ids(parse(cluster), parse(member), node.cluster_id)
            .and_then(|from| node.admit(from).map(|()| (node, from))),
    };
    let (node, from) = match admitted {
        Ok(a) => a,
        Err(status) => return refuse(&mut conn, &status).await,
    };
    let upgraded = format!(
        "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: {UPGRADE}\r\n\r\n"
    );
    if conn.write_all(upgraded.as_bytes()).await.is_err() {
        return;
    }
    match path {
        FORWARD_PATH => serve_forward(node, from, conn, rest).await,
        PROBE_PATH => serve_probe(node, from, conn, rest).await,
        _ => serve_append(node, from, conn, rest).await,
    }
}

/// Serves a member's `Probe` stream: each probe admitted as a call from it (which is what the
/// probe is for: `network`'s one-way rule counts the calls admitted) and answered, until one
/// is refused or the prober goes.
async fn serve_probe<C>(node: Arc<RaftNode>, from: u64, conn: C, rest: BytesMut)
where
    C: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (read, write) = tokio::io::split(conn);
    let counters = node.peer_stats().of(from);
    let probes = futures_util::stream::unfold(Frames::new(read, rest), |mut frames| async move {
        matches!(frames.next().await, Ok(Some(_))).then_some(((), frames))
    });
    let answers = std::pin::pin!(probes.map(|()| {
        let admitted = node.admit(from);
        if admitted.is_ok() {
            counters.probes.fetch_add(1, Ordering::Relaxed);
        }
        admitted
    }));
    // A refusal is the stream's last answer.
    send_with(write, answers, |buf, admitted| match admitted {
        Ok(()) => {
            buf.put_u32(1);
            buf.put_u8(ANSWER);
            false
        }
        Err(s) => {
            put_refusal(buf, &s);
            true
        }
    })
    .await
}

/// Serves a leader's `Append` stream: each request goes to openraft as it arrives and each
/// answer back as it comes.
async fn serve_append<C>(node: Arc<RaftNode>, from: u64, conn: C, rest: BytesMut)
where
    C: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (read, write) = tokio::io::split(conn);
    // Why the requests stopped, when this side stopped them (a fault injected since the
    // stream opened, a malformed message): the leader gets it after the answers to what was
    // accepted before, so no answer is lost and none is made up.
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<tonic::Status>();
    let counters = node.peer_stats().of(from);
    let requests = futures_util::stream::unfold(
        (Frames::new(read, rest), node.clone(), counters, Some(stop_tx)),
        move |(mut frames, node, counters, mut stop)| async move {
            let refused = match frames.next().await {
                Ok(Some(frame)) => match node.check_fault(from) {
                    Err(s) => s,
                    Ok(()) => {
                        counters.received_bytes.fetch_add(frame.len() as u64, Ordering::Relaxed);
                        // The leader's appends stand in for its probes (`probing`).
                        counters.probes.fetch_add(1, Ordering::Relaxed);
                        match pb::AppendRequest::decode(frame)
                            .map_err(|e| tonic::Status::invalid_argument(e.to_string()))
                            .and_then(|m| {
                                codec::from_append_request(m).map_err(tonic::Status::from)
                            }) {
                            Ok(rpc) => {
                                if rpc.vote.committed {
                                    node.heard_from_leader();
                                }
                                return Some((rpc, (frames, node, counters, stop)));
                            }
                            Err(s) => s,
                        }
                    }
                },
                // The leader closed its side, or the connection went: the answers still owed
                // are sent (or fail) on their own.
                Ok(None) | Err(_) => return None,
            };
            if let Some(tx) = stop.take() {
                let _ = tx.send(refused);
            }
            None
        },
    );
    let answers = node.raft.stream_append(Box::pin(requests)).map(|r| match r {
        Ok(result) => Ok(codec::append_result(&result)),
        Err(fatal) => Err(tonic::Status::unavailable(fatal.to_string())),
    });
    let stopped =
        futures_util::stream::once(stop_rx).filter_map(|r| async move { r.ok().map(Err) });
    let answers = std::pin::pin!(answers.chain(stopped));
    // A refusal is the stream's last answer.
    send_with(write, answers, |buf, answer| match answer {
        Ok(a) => {
            put_frame(buf, Some(ANSWER), &a);
            false
        }
        Err(s) => {
            put_refusal(buf, &s);
            true
        }
    })
    .await
}

/// A forwarded request.
type Forwarded = pb::forward_request::Request;

/// The reply to forwarded call `id`, from how it was served: the answer, or the status a call
/// of its own would have failed with (the caller's retry policy reads it the same).
pub fn reply(
    id: u64,
    served: Result<pb::forward_response::Response, tonic::Status>,
) -> pb::ForwardReply {
    match served {
        Ok(a) => pb::ForwardReply {
            id,
            response: Some(pb::ForwardResponse { response: Some(a) }),
            code: 0,
            message: String::new(),
        },
        Err(s) => pb::ForwardReply {
            id,
            response: None,
            code: s.code() as i32,
            message: s.message().to_string(),
        },
    }
}

/// One forwarded call, checked as a call of its own would be: the caller's calls may have
/// been cut (an injected fault) or the caller removed since the stream opened.
async fn serve_forward_call(
    node: &RaftNode,
    from: u64,
    request: Option<pb::ForwardRequest>,
    timeout_ms: u64,
) -> Result<pb::forward_response::Response, tonic::Status> {
    node.admit(from)?;
    let Some(mut request) = request.and_then(|r| r.request) else {
        return Err(tonic::Status::invalid_argument("a forwarded call without a request"));
    };
    if let Forwarded::Propose(p) = &mut request {
        // A view into the received frame would pin that whole read buffer for as long as the
        // entry stays in the log: the log keeps its own copy, of the exact size.
        for r in &mut p.requests {
            *r = Bytes::copy_from_slice(r);
        }
    }
    // The caller's deadline, and never more than this member's request timeout.
    let left = std::time::Duration::from_millis(timeout_ms).min(node.request_timeout());
    tokio::time::timeout(left, node.serve_peer_forward(request))
        .await
        .unwrap_or(Err(crate::error::Error::Timeout))
        // The calling member maps the error back by its message (`Error::from_message`) and
        // answers its client through the server's table.
        .map_err(|e| tonic::Status::unavailable(e.message()))
}

/// Serves a member's `Forward` stream while this member leads: each call on its own, as a
/// call of its own was (a proposal's batch waits for its commit while the read index rounds
/// behind it go on), answered as it is served.
async fn serve_forward<C>(node: Arc<RaftNode>, from: u64, conn: C, rest: BytesMut)
where
    C: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (read, write) = tokio::io::split(conn);
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<pb::ForwardReply>();
    let writer =
        tokio::spawn(send(write, tokio_stream::wrappers::UnboundedReceiverStream::new(rx)));
    let mut frames = Frames::new(read, rest);
    while let Ok(Some(frame)) = frames.next().await {
        let Ok(call) = pb::ForwardCall::decode(frame) else { break };
        let (node, tx) = (node.clone(), tx.clone());
        tokio::spawn(async move {
            let served = serve_forward_call(&node, from, call.request, call.timeout_ms).await;
            let _ = tx.send(reply(call.id, served));
        });
    }
    // The caller closed its side: the replies still owed go out, then the stream ends.
    drop(tx);
    let _ = writer.await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_split_anywhere_come_back_whole() {
        let mut buf = BytesMut::new();
        let a = pb::AppendResponse {
            result: Some(pb::append_response::Result::Matched(true)),
            log_id: None,
        };
        put_frame(&mut buf, Some(ANSWER), &a);
        put_refusal(&mut buf, &tonic::Status::failed_precondition("gone"));
        let bytes = buf.freeze();
        for cut in 0..bytes.len() {
            let (mut w, r) = tokio::io::duplex(64);
            let (head, tail) = (bytes.slice(..cut), bytes.slice(cut..));
            let boxed: BoxIo = Box::new(r);
            let (read, _write) = tokio::io::split(boxed);
            let mut answers = Answers::new(Frames::new(read, BytesMut::from(&head[..])));
            let writer = tokio::spawn(async move {
                w.write_all(&tail).await.unwrap();
                w.shutdown().await.unwrap();
            });
            assert_eq!(answers.message().await.unwrap(), Some(a), "cut at {cut}");
            let refused = answers.message().await.unwrap_err();
            assert_eq!(
                (refused.code(), refused.message()),
                (tonic::Code::FailedPrecondition, "gone")
            );
            assert_eq!(answers.message().await.unwrap(), None);
            writer.await.unwrap();
        }
    }

    /// A probe is an empty frame; its answer comes back as `Ok`, a refusal as its status, and
    /// a peer that went as a broken stream.
    #[tokio::test]
    async fn a_probe_reads_its_answer_or_its_refusal() {
        let (client, mut peer) = tokio::io::duplex(4096);
        let boxed: BoxIo = Box::new(client);
        let (read, mut out) = tokio::io::split(boxed);
        let mut answers = Frames::new(read, BytesMut::new());
        let answering = tokio::spawn(async move {
            let mut probe = [0u8; 4];
            peer.read_exact(&mut probe).await.unwrap();
            assert_eq!(probe, [0, 0, 0, 0], "a probe is an empty frame");
            peer.write_all(&[0, 0, 0, 1, ANSWER]).await.unwrap();
            peer.read_exact(&mut probe).await.unwrap();
            let mut buf = BytesMut::new();
            put_refusal(&mut buf, &tonic::Status::failed_precondition("removed"));
            peer.write_all(&buf).await.unwrap();
            peer.read_exact(&mut probe).await.unwrap();
        });
        probe(&mut out, &mut answers).await.expect("answered");
        let refused = probe(&mut out, &mut answers).await.unwrap_err();
        assert_eq!(
            (refused.code(), refused.message()),
            (tonic::Code::FailedPrecondition, "removed")
        );
        let gone = probe(&mut out, &mut answers).await.unwrap_err();
        assert_eq!(gone.code(), tonic::Code::Unavailable, "{gone:?}");
        answering.await.unwrap();
    }

    /// The upgrade's refusal reaches the opener as the status a call would have got, and
    /// marks the stream as never opened (nothing was sent on it).
    #[tokio::test]
    async fn a_refused_upgrade_comes_back_as_its_status() {
        for path in [APPEND_PATH, FORWARD_PATH, PROBE_PATH] {
            let (client, server) = tokio::io::duplex(4096);
            let served =
                tokio::spawn(serve(None, path, Some("1"), Some("2"), server, BytesMut::new()));
            let Err(NotOpened::Refused(status)) = open(Box::new(client), path, 1, 2).await else {
                panic!("{path}: the upgrade was not refused");
            };
            assert_eq!(
                (status.code(), status.message()),
                (tonic::Code::Unavailable, "this member runs alone: it is in no cluster yet")
            );
            served.await.unwrap();
        }
        // A peer that answers something else than mem_etcd's upgrade: failed, not refused.
        let (client, mut server) = tokio::io::duplex(4096);
        tokio::spawn(async move {
            let mut head = [0u8; 64];
            let _ = server.read(&mut head).await;
            let _ = server.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n").await;
        });
        let Err(NotOpened::Failed(status)) = open(Box::new(client), APPEND_PATH, 1, 2).await else {
            panic!("a 404 is no refusal");
        };
        assert_eq!(status.code(), tonic::Code::Unimplemented, "{status:?}");
    }
}
