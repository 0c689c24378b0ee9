//! Requests only the leader can serve, which the member a client called forwards to it on its
//! `Forward` stream ([`LeaderStream`]): proposals and read indexes, which
//! Raft serves, and lease renewals, TimeToLive and membership changes, which the server serves
//! for it ([`LeaderRequests`]). The road itself, one deadline and one retry policy for all of
//! them, is `RaftNode::at_leader`.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use prost::Message;

use super::rafthttp::network::Peers;
use super::rafthttp::stream;
use crate::error::Error;
use crate::proto::memetcdpb as pb;

/// A forwarded request.
pub use crate::proto::memetcdpb::forward_request::Request as Forwarded;
/// Its answer: the member of the same name.
pub use crate::proto::memetcdpb::forward_response::Response as Answer;

/// What the leader answers for the server: the forwarded requests Raft does not serve itself
/// (lease renewals and TimeToLive, since the leader keeps the leases' deadlines; membership
/// changes, with etcd's checks). Registered on the node by the server as it starts it.
pub trait LeaderRequests: Send + Sync + std::fmt::Debug + 'static {
    /// Serves `request` on this member, which leads.
    fn serve(
        &self,
        request: Forwarded,
    ) -> Pin<Box<dyn Future<Output = Result<Answer, Error>> + Send + '_>>;
}

/// etcd's answers for a request that found no leader by its deadline, and for one whose call to
/// the leader failed otherwise (unless the leader answered one of etcd's errors).
pub(super) fn errors(request: &Forwarded) -> (Error, Error) {
    match request {
        // A proposal the leader may have received before it failed may still commit.
        Forwarded::Propose(_) => (Error::Timeout, Error::TimeoutLeaderFail),
        Forwarded::ReadIndex(_) => (Error::Timeout, Error::Timeout),
        // etcd's lease calls wait for a leader until their deadline, then answer "no leader"
        // (`waitLeader`); membership changes answer so too (etcd's would time out).
        _ => (Error::NoLeader, Error::Timeout),
    }
}

/// Whether a request that may have reached a leader that is no longer leading may be sent
/// again to the next one: read indexes and lease calls, which change nothing twice (a renewal
/// renews; TimeToLive reads). Never a proposal or a membership change: the old leader may have
/// appended it, and the next may commit it, so sending it again could apply it twice.
pub(super) fn resendable(request: &Forwarded) -> bool {
    matches!(
        request,
        Forwarded::ReadIndex(_) | Forwarded::LeaseRenew(_) | Forwarded::LeaseTimeToLive(_)
    )
}

/// A call that never left this member (the stream to the leader had ended, or could not open
/// because the leader could not be reached): safe to send again.
pub(super) const NOT_SENT: &str = "the forward stream to the leader had ended: not sent";

/// The stream a member keeps to the leader for the requests it forwards (a `Forward` stream,
/// `rafthttp::stream`): one call per request cost an HTTP/2 stream, its headers and a handler
/// on both sides, and a follower makes one for every round of its linearizable reads and every
/// batch of its proposals. Calls on it are answered as the leader serves them, matched by id.
#[derive(Debug)]
pub(super) struct LeaderStream {
    /// The calls, which a task writes to the stream.
    calls: tokio::sync::mpsc::UnboundedSender<pb::ForwardCall>,
    /// What the calls and the reader of the answers share.
    shared: Arc<Shared>,
    /// The id of the next call.
    next_id: AtomicU64,
}

/// A call's answer, or the status a call of its own would have failed with.
type Reply = std::result::Result<Answer, tonic::Status>;

#[derive(Debug, Default)]
struct Shared {
    /// The calls sent and not answered, by id, and whether the stream ended: locked by a call
    /// to register and by the reader to answer, once each per call, so a call either is
    /// answered or finds the stream ended.
    pending: Mutex<(HashMap<u64, oneshot::Sender<Reply>>, bool)>,
}

impl Shared {
    /// The stream ended: every call still waiting gets `why`.
    fn end(&self, why: tonic::Status) {
        let waiting = {
            let mut g = self.pending.lock();
            g.1 = true;
            std::mem::take(&mut g.0)
        };
        for (_, w) in waiting {
            let _ = w.send(Err(why.clone()));
        }
    }
}

impl LeaderStream {
    /// Opens the stream to the leader at `urls` through `peers`; the answers are read by a task
    /// of their own, which ends with the stream.
    pub(super) fn open(peers: Arc<Peers>, urls: Vec<String>) -> Self {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let shared = Arc::new(Shared::default());
        let reader = shared.clone();
        tokio::spawn(async move {
            // A leader that could not be reached was sent nothing.
            let opened = match peers.dial(&urls).await {
                Err(_) => Err(tonic::Status::unavailable(NOT_SENT)),
                // A refusal, as a call of its own (with the leader's message); a stream that
                // did not open otherwise carried nothing.
                Ok(io) => stream::open(io, stream::FORWARD_PATH, peers.cluster_id, peers.member_id)
                    .await
                    .map_err(|e| match e {
                        stream::NotOpened::Refused(s) => s,
                        stream::NotOpened::Failed(_) => tonic::Status::unavailable(NOT_SENT),
                    }),
            };
            let why = match opened {
                Err(status) => status,
                Ok((write, mut answers)) => {
                    let calls = tokio_stream::wrappers::UnboundedReceiverStream::new(rx);
                    let writer = tokio::spawn(stream::send(write, calls));
                    let why = loop {
                        match answers.next().await {
                            Ok(Some(frame)) => {
                                let Ok(reply) = pb::ForwardReply::decode(frame) else {
                                    break tonic::Status::unavailable(
                                        "the leader sent a malformed forward reply",
                                    );
                                };
                                let waiter = reader.pending.lock().0.remove(&reply.id);
                                if let Some(w) = waiter {
                                    let _ = w.send(reply_of(reply));
                                }
                            }
                            // Calls in flight may have reached the leader: never "not sent".
                            Ok(None) => {
                                break tonic::Status::unavailable(
                                    "the leader ended the forward stream",
                                );
                            }
                            Err(e) => {
                                break tonic::Status::unavailable(format!(
                                    "the forward stream to the leader failed ({e})"
                                ));
                            }
                        }
                    };
                    writer.abort();
                    why
                }
            };
            reader.end(why);
        });
        Self { calls: tx, shared, next_id: AtomicU64::new(1) }
    }

    /// Whether the stream ended (a new one is needed).
    pub(super) fn ended(&self) -> bool {
        self.shared.pending.lock().1
    }

    /// Sends `request` and waits at most `left` for its answer.
    pub(super) async fn call(&self, request: Forwarded, left: Duration) -> Reply {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut g = self.shared.pending.lock();
            if g.1 {
                return Err(tonic::Status::unavailable(NOT_SENT));
            }
            g.0.insert(id, tx);
        }
        // Until answered, the call is forgotten however this future ends: by its deadline, or
        // dropped by a caller that gave up on this leader (`RaftNode::at_leader`).
        let unanswered = Unanswered { shared: &self.shared, id };
        let call = pb::ForwardCall {
            id,
            request: Some(pb::ForwardRequest { request: Some(request) }),
            timeout_ms: left.as_millis() as u64,
        };
        if self.calls.send(call).is_err() {
            return Err(tonic::Status::unavailable(NOT_SENT));
        }
        let answer = match tokio::time::timeout(left, rx).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(_)) => Err(tonic::Status::unavailable("the leader ended the forward stream")),
            Err(_) => {
                return Err(tonic::Status::deadline_exceeded("the leader did not answer in time"));
            }
        };
        // Answered, or ended with the stream: no longer in `pending`.
        std::mem::forget(unanswered);
        answer
    }
}

/// A call in `pending` that its caller stopped waiting for: removed when dropped.
struct Unanswered<'a> {
    shared: &'a Shared,
    id: u64,
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        self.shared.pending.lock().0.remove(&self.id);
    }
}

/// A reply as the caller takes it.
fn reply_of(reply: pb::ForwardReply) -> Reply {
    match reply.response {
        Some(r) => r.response.ok_or_else(|| tonic::Status::internal("a forward without answer")),
        None => Err(tonic::Status::new(tonic::Code::from(reply.code), reply.message)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::rafthttp::stream::reply;

    /// A leader that cannot be reached was sent nothing: its calls end as not sent, the one
    /// failure after which even a proposal may go again.
    #[tokio::test]
    async fn calls_to_a_leader_that_cannot_be_reached_end_as_not_sent() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", closed.local_addr().unwrap());
        drop(closed);
        let peers = crate::raft::rafthttp::network::Peers::new(1, 2, None, Duration::from_secs(1));
        let stream = LeaderStream::open(peers, vec![url]);
        let propose = Forwarded::Propose(pb::Proposals { requests: Vec::new() });
        let failed = stream.call(propose, Duration::from_secs(5)).await.unwrap_err();
        assert_eq!((failed.code(), failed.message()), (tonic::Code::Unavailable, NOT_SENT));
    }

    /// A call on the stream fails as a call of its own did: same code, same message, so the
    /// caller's retry policy (`not_delivered`, `Error::from_message`) reads it the same.
    #[test]
    fn a_reply_carries_the_answer_or_the_status_of_a_call_of_its_own() {
        let failed = tonic::Status::unavailable(Error::NotLeader.message());
        let back = reply_of(reply(7, Err(failed))).unwrap_err();
        assert_eq!(back.code(), tonic::Code::Unavailable);
        assert_eq!(Error::from_message(back.message()), Some(Error::NotLeader));
        let late = reply_of(reply(8, Err(tonic::Status::deadline_exceeded("late")))).unwrap_err();
        assert_eq!((late.code(), late.message()), (tonic::Code::DeadlineExceeded, "late"));
        let answer = Answer::ReadIndex(pb::ReadIndexResponse { index: 42 });
        let r = reply(9, Ok(answer.clone()));
        assert_eq!(r.id, 9);
        assert_eq!(reply_of(r).unwrap(), answer);
    }
}
