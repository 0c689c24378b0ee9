//! The `Append` stream between a leader and a follower (etcd's `rafthttp` message streams):
//! the one message a cluster sends for every write, twice, and answers twice, so it travels
//! as cheaply as a message can. A stream is a connection of its own to the follower's peer
//! URL, opened with an HTTP/1.1 upgrade ([`PATH`], `Upgrade: memetcd-append`) that carries
//! the caller's stamp as the gRPC calls' metadata does; after the follower's `101`, each
//! message is a frame: its length (4 bytes, big endian) and its protobuf bytes.
//!
//! Why not a gRPC stream, as the other peer calls are: HTTP/2 costs each message its
//! framing, flow control, the connection task's hop and the stream task's hop on each side,
//! and those were most of a 3-member cluster's CPU per write behind kube-apiserver (etcd's
//! peers use HTTP/1.1 streams of length-prefixed messages for the same reason). Here the
//! task that makes a message writes it to the socket, every message ready goes in one
//! write, and the task that reads a message hands it on itself.
//!
//! The leader writes `AppendRequest`s; the follower answers each, in order, with a frame
//! whose first byte says what follows: [`ANSWER`] and an `AppendResponse`, or [`REFUSED`],
//! a gRPC code (4 bytes) and a message, after which the follower ends the stream. A
//! refused upgrade answers an HTTP status with the same code and message in headers.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use futures_util::{FutureExt, Stream, StreamExt};
use prost::Message;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::codec;
use crate::proto::memetcdpb as pb;
use crate::raft::node::RaftNode;

/// The upgrade's request path on the peer URL.
pub const PATH: &str = "/raft/stream/append";
/// The upgrade's protocol token.
pub const UPGRADE: &str = "memetcd-append";

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
struct Frames<R> {
    io: R,
    /// What was read and not yet taken as a frame.
    buf: BytesMut,
}

impl<R: AsyncRead + Unpin> Frames<R> {
    fn new(io: R, buf: BytesMut) -> Self {
        Self { io, buf }
    }

    /// The next frame's bytes; `None` when the other side ended the stream between frames.
    async fn next(&mut self) -> std::io::Result<Option<Bytes>> {
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
    frames: Frames<tokio::io::ReadHalf<BoxIo>>,
}

impl std::fmt::Debug for Answers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Answers").field("buffered", &self.frames.buf.len()).finish()
    }
}

impl Answers {
    /// The next answer; `None` when the follower ended the stream; an error for a refusal or a
    /// broken connection.
    pub async fn message(&mut self) -> Result<Option<pb::AppendResponse>, tonic::Status> {
        let Some(mut frame) = self.frames.next().await.map_err(broken)? else {
            return Ok(None);
        };
        match frame.first() {
            Some(&ANSWER) => {
                frame.advance(1);
                pb::AppendResponse::decode(frame)
                    .map(Some)
                    .map_err(|e| tonic::Status::internal(format!("a malformed append answer: {e}")))
            }
            Some(&REFUSED) if frame.len() >= 5 => {
                frame.advance(1);
                let code = tonic::Code::from(frame.get_i32());
                Err(tonic::Status::new(code, String::from_utf8_lossy(&frame).into_owned()))
            }
            _ => Err(tonic::Status::internal("a malformed append answer frame")),
        }
    }
}

fn broken(e: std::io::Error) -> tonic::Status {
    tonic::Status::unavailable(format!("the append stream broke: {e}"))
}

/// Opens a stream on `io` (dialed to the follower), stamped with this member's `cluster` and
/// `member` ids; returns where the requests go and where their answers come from. The
/// follower's refusal comes back as its status.
pub async fn open(
    io: BoxIo,
    cluster: u64,
    member: u64,
) -> Result<(tokio::io::WriteHalf<BoxIo>, Answers), tonic::Status> {
    let mut io = io;
    let head = format!(
        "POST {PATH} HTTP/1.1\r\nHost: member\r\nConnection: Upgrade\r\nUpgrade: {UPGRADE}\r\n\
         {}: {cluster:x}\r\n{}: {member:x}\r\n\r\n",
        super::stamp::CLUSTER_ID_KEY,
        super::stamp::MEMBER_ID_KEY,
    );
    io.write_all(head.as_bytes()).await.map_err(broken)?;
    let mut buf = BytesMut::with_capacity(1024);
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > MAX_HEAD {
            return Err(tonic::Status::internal("the append stream's answer head is too long"));
        }
        if io.read_buf(&mut buf).await.map_err(broken)? == 0 {
            return Err(tonic::Status::unavailable("the peer closed the append stream's upgrade"));
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
            Some(c) => tonic::Status::new(
                tonic::Code::from(c),
                header("memetcd-message").unwrap_or_default(),
            ),
            // Not a mem_etcd member: nothing to stream to.
            None => tonic::Status::unimplemented(format!(
                "the peer does not serve append streams: {status_line}"
            )),
        });
    }
    let (read, write) = tokio::io::split(io);
    Ok((write, Answers { frames: Frames::new(read, buf) }))
}

/// Writes the requests of `requests` to `write` until they end or the connection breaks; each
/// write takes every request ready by then.
pub async fn send<S>(mut write: tokio::io::WriteHalf<BoxIo>, requests: S)
where
    S: Stream<Item = pb::AppendRequest> + Unpin,
{
    let mut requests = requests;
    let mut buf = BytesMut::with_capacity(8192);
    while let Some(first) = requests.next().await {
        put_frame(&mut buf, None, &first);
        while buf.len() < WRITE_BATCH {
            match requests.next().now_or_never() {
                Some(Some(more)) => put_frame(&mut buf, None, &more),
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

/// Serves a stream a leader opened on `conn` (`rest`: what it sent after the upgrade's head,
/// whose stamp headers were `cluster` and `member`), on this member's `node` (none while it
/// runs alone): each request goes to openraft as it arrives and each answer back as it comes.
pub async fn serve<C>(
    node: Option<Arc<RaftNode>>,
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
    let (read, mut write) = tokio::io::split(conn);
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
    let mut answers = std::pin::pin!(answers.chain(stopped));
    let mut buf = BytesMut::with_capacity(1024);
    let mut ended = false;
    while !ended {
        let Some(first) = answers.next().await else { break };
        let mut next = Some(first);
        while let Some(answer) = next.take() {
            match answer {
                Ok(a) => put_frame(&mut buf, Some(ANSWER), &a),
                Err(s) => {
                    put_refusal(&mut buf, &s);
                    ended = true;
                    break;
                }
            }
            if buf.len() < WRITE_BATCH {
                next = answers.next().now_or_never().flatten();
            }
        }
        if write.write_all(&buf).await.is_err() {
            return;
        }
        buf.clear();
    }
    let _ = write.shutdown().await;
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
            let mut answers = Answers { frames: Frames::new(read, BytesMut::from(&head[..])) };
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
}
