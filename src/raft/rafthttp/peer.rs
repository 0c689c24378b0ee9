//! The peer service (etcd's `rafthttp`, serving side): what other members of this cluster send
//! this one over its peer URL. Raft's own messages go to openraft; the requests only the leader
//! can serve, which other members forward to it (`forward`), are served here when this member
//! leads.

use std::io::Write;
use std::sync::Arc;

use openraft::Snapshot;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

use super::codec;
use super::stamp::MEMBER_ID_KEY;
use crate::error::Error;
use crate::proto::memetcdpb as pb;
use crate::raft::node::RaftNode;
use crate::raft::state_machine::{SnapshotFile, open_snapshot, temp_path};

/// Where the peer service finds this member's Raft node: nowhere while the member runs alone
/// (its peer listeners serve from its start, as etcd's do; its node starts as it grows into a
/// cluster, `etcdserver::grow`).
pub type NodeSource = Arc<dyn Fn() -> Option<Arc<RaftNode>> + Send + Sync>;

/// The Raft service of this member.
#[derive(Clone)]
pub struct PeerService {
    node: NodeSource,
    /// Where snapshots are received (`<data-dir>/raft/snap-incoming`): apart from the snapshots
    /// themselves, which a snapshot being built clears out around it.
    incoming: std::path::PathBuf,
}

impl PeerService {
    /// The service of the node `node` finds, whose snapshots are in `snap_dir`.
    pub fn new(node: NodeSource, snap_dir: std::path::PathBuf) -> Self {
        let incoming = snap_dir.with_file_name("snap-incoming");
        // What a crash left half received.
        let _ = std::fs::remove_dir_all(&incoming);
        Self { node, incoming }
    }

    /// This member's node; a member alone has none, and refuses Raft's calls (it is in no
    /// cluster the caller could be in).
    fn node(&self) -> Result<Arc<RaftNode>, Status> {
        (self.node)()
            .ok_or_else(|| Status::unavailable("this member runs alone: it is in no cluster yet"))
    }
}

impl std::fmt::Debug for PeerService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerService").field("incoming", &self.incoming).finish()
    }
}

fn status(e: Error) -> Status {
    // The calling member maps the error back by its message (`Error::from_message`) and
    // answers its client through the server's table.
    Status::unavailable(e.message())
}

#[tonic::async_trait]
impl pb::raft_server::Raft for PeerService {
    async fn vote(
        &self,
        req: Request<pb::VoteRequest>,
    ) -> Result<Response<pb::VoteResponse>, Status> {
        self.vote_or_pre_vote(req, false).await
    }

    async fn pre_vote(
        &self,
        req: Request<pb::VoteRequest>,
    ) -> Result<Response<pb::VoteResponse>, Status> {
        self.vote_or_pre_vote(req, true).await
    }

    async fn install_snapshot(
        &self,
        req: Request<Streaming<pb::SnapshotChunk>>,
    ) -> Result<Response<pb::SnapshotReply>, Status> {
        let node = self.node()?;
        node.check_peer(&req)?;
        let mut stream = req.into_inner();
        let Some(Ok(pb::SnapshotChunk { kind: Some(pb::snapshot_chunk::Kind::Header(h)) })) =
            stream.next().await
        else {
            return Err(Status::invalid_argument("a snapshot stream starts with its header"));
        };
        let vote = codec::from_vote(&h.vote)?;
        std::fs::create_dir_all(&self.incoming).map_err(|e| Status::internal(e.to_string()))?;
        let path = temp_path(&self.incoming);
        let received = async {
            let mut f = std::io::BufWriter::with_capacity(
                1 << 20,
                std::fs::File::create(&path).map_err(|e| Status::internal(e.to_string()))?,
            );
            let mut n = 0u64;
            while let Some(chunk) = stream.next().await {
                match chunk?.kind {
                    Some(pb::snapshot_chunk::Kind::Data(d)) => {
                        n += d.len() as u64;
                        f.write_all(&d).map_err(|e| Status::internal(e.to_string()))?;
                    }
                    _ => return Err(Status::invalid_argument("a second snapshot header")),
                }
            }
            f.flush().map_err(|e| Status::internal(e.to_string()))?;
            if n != h.size {
                return Err(Status::data_loss(format!(
                    "snapshot cut short: {n} of {} bytes",
                    h.size
                )));
            }
            Ok(())
        }
        .await;
        if let Err(s) = received {
            let _ = std::fs::remove_file(&path);
            return Err(s);
        }
        let meta = match open_snapshot(&path) {
            Ok((meta, _)) => meta,
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                return Err(Status::invalid_argument(e.to_string()));
            }
        };
        let snapshot = Snapshot { meta, snapshot: SnapshotFile { path: path.clone() } };
        let resp = node.raft.install_full_snapshot(vote, snapshot).await;
        let _ = std::fs::remove_file(&path);
        let resp = resp.map_err(|e| Status::unavailable(e.to_string()))?;
        Ok(Response::new(pb::SnapshotReply { vote: Some(codec::vote(&resp.vote)) }))
    }

    async fn transfer_leader(
        &self,
        req: Request<pb::TransferLeaderRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        let node = self.node()?;
        node.check_peer(&req)?;
        let rpc = codec::from_transfer_leader(req.into_inner())?;
        match node.raft.handle_transfer_leader(rpc).await {
            Ok(Ok(())) => Ok(Response::new(pb::Empty {})),
            Ok(Err(e)) => Err(Status::failed_precondition(e.to_string())),
            Err(e) => Err(Status::unavailable(e.to_string())),
        }
    }

    async fn probe(
        &self,
        req: Request<pb::ProbeRequest>,
    ) -> Result<Response<pb::ProbeResponse>, Status> {
        let node = self.node()?;
        // Answered whatever the caller's cluster: a member joining learns the cluster id here.
        let caller = req
            .metadata()
            .get(MEMBER_ID_KEY)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| u64::from_str_radix(v, 16).ok())
            .unwrap_or(0);
        node.check_fault(caller)?;
        if node.is_member_removed(caller) {
            return Err(super::network::member_removed());
        }
        if caller != 0 {
            node.peer_stats().of(caller).probes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let (voters, nodes) = node.membership();
        let initialized = !nodes.is_empty() && !node.voting_blocked();
        let mut urls = req.into_inner().peer_urls;
        urls.sort();
        let your_id = nodes
            .iter()
            .find(|(_, u)| {
                let mut u = (*u).clone();
                u.sort();
                u == urls
            })
            .map_or(0, |(id, _)| *id);
        Ok(Response::new(pb::ProbeResponse {
            member_id: node.id,
            initialized,
            leader: node.leader().unwrap_or(0),
            knows_you: nodes.contains_key(&caller),
            you_are_voter: voters.contains(&caller),
            cluster_id: node.cluster_id,
            your_id,
            last_log_index: node.status().last_index,
        }))
    }

    async fn hash_kv(
        &self,
        req: Request<crate::proto::etcdserverpb::HashKvRequest>,
    ) -> Result<Response<crate::proto::etcdserverpb::HashKvResponse>, Status> {
        let node = self.node()?;
        node.check_peer(&req)?;
        let rev = req.into_inner().revision;
        let h = node.machine.hash_kv(rev).map_err(status)?;
        let mut answer = Response::new(crate::proto::etcdserverpb::HashKvResponse {
            header: Some(crate::proto::etcdserverpb::ResponseHeader {
                cluster_id: node.cluster_id,
                member_id: node.id,
                revision: h.revision,
                raft_term: node.term(),
            }),
            hash: h.hash,
            compact_revision: h.compact_revision,
            hash_revision: h.hash_revision,
        });
        let floors = tonic::metadata::MetadataValue::from(h.floors);
        answer.metadata_mut().insert(crate::raft::corrupt::FLOORS_KEY, floors);
        Ok(answer)
    }

    async fn readmit(
        &self,
        req: Request<pb::ReadmitRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        let node = self.node()?;
        let caller = node.check_peer(&req)?;
        let id = req.into_inner().member_id;
        if id != caller {
            return Err(Status::permission_denied("a member may only ask to re-admit itself"));
        }
        if !node.is_leader() {
            return Err(status(Error::NotLeader));
        }
        tracing::warn!(
            member = format!("{id:x}"),
            "raft: member came back without its state; it votes again once it holds the log"
        );
        node.readmit_member(id).await.map_err(status)?;
        Ok(Response::new(pb::Empty {}))
    }
}

impl PeerService {
    async fn vote_or_pre_vote(
        &self,
        req: Request<pb::VoteRequest>,
        pre: bool,
    ) -> Result<Response<pb::VoteResponse>, Status> {
        let node = self.node()?;
        node.check_peer(&req)?;
        let rpc = codec::from_vote_request(req.into_inner())?;
        if node.voting_blocked() {
            return Ok(Response::new(self.refusal(&rpc)));
        }
        let raft = &node.raft;
        let resp = if pre { raft.pre_vote(rpc).await } else { raft.vote(rpc).await };
        let resp = resp.map_err(|e| Status::unavailable(e.to_string()))?;
        Ok(Response::new(codec::vote_response(&resp)))
    }

    /// A vote refused by a member that may not vote yet: its own vote (lower than any
    /// candidate's) and no log, so the candidate learns nothing from it.
    fn refusal(
        &self,
        rpc: &openraft::raft::VoteRequest<crate::raft::TypeConfig>,
    ) -> pb::VoteResponse {
        let _ = rpc;
        pb::VoteResponse { vote: Some(pb::Vote::default()), granted: false, last_log_id: None }
    }
}
