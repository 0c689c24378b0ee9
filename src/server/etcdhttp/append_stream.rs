//! A leader's `Append` streams to this member (`raft::rafthttp::stream`), taken from the peer
//! listener's tonic by their upgrade (`upgrade`).

use std::sync::Arc;

use bytes::BytesMut;
use futures_util::future::BoxFuture;

use crate::raft::rafthttp::peer::NodeSource;
use crate::raft::rafthttp::stamp::{CLUSTER_ID_KEY, MEMBER_ID_KEY};
use crate::raft::rafthttp::stream;
use crate::server::etcdhttp::upgrade::{Conn, Divert, Head};

/// The `Append` streams of a peer listener, served by the node `node` finds (none while the
/// member runs alone: the stream is refused).
pub struct AppendStreams {
    pub node: NodeSource,
}

impl Divert for AppendStreams {
    fn takes(&self, h: &Head) -> bool {
        h.uri.path() == stream::PATH && h.upgrades_to(stream::UPGRADE)
    }

    fn serve(
        self: Arc<Self>,
        conn: Box<dyn Conn>,
        rest: BytesMut,
        h: Head,
    ) -> BoxFuture<'static, ()> {
        let node = (self.node)();
        Box::pin(async move {
            stream::serve(node, h.get(CLUSTER_ID_KEY), h.get(MEMBER_ID_KEY), conn, rest).await;
        })
    }
}
