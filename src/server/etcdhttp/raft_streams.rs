//! The streams other members open to this one (`raft::rafthttp::stream`: a leader's `Append`
//! stream, a member's `Forward` stream to this leader, every peer's `Probe` stream), taken from
//! the peer listener's tonic by their upgrade (`upgrade`).

use std::sync::Arc;

use bytes::BytesMut;
use futures_util::future::BoxFuture;

use crate::raft::rafthttp::peer::NodeSource;
use crate::raft::rafthttp::stamp::{CLUSTER_ID_KEY, MEMBER_ID_KEY};
use crate::raft::rafthttp::stream;
use crate::server::etcdhttp::upgrade::{Conn, Divert, Head};

/// The streams of a peer listener, served by the node `node` finds (none while the member
/// runs alone: the stream is refused).
pub struct RaftStreams {
    pub node: NodeSource,
}

impl Divert for RaftStreams {
    fn takes(&self, h: &Head) -> bool {
        matches!(h.uri.path(), stream::APPEND_PATH | stream::FORWARD_PATH | stream::PROBE_PATH)
            && h.upgrades_to(stream::UPGRADE)
    }

    fn serve(
        self: Arc<Self>,
        conn: Box<dyn Conn>,
        rest: BytesMut,
        h: Head,
    ) -> BoxFuture<'static, ()> {
        let node = (self.node)();
        Box::pin(async move {
            let path = h.uri.path();
            stream::serve(node, path, h.get(CLUSTER_ID_KEY), h.get(MEMBER_ID_KEY), conn, rest)
                .await;
        })
    }
}
