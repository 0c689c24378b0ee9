//! This member's Raft node (etcd's `raftNode` and the parts of `EtcdServer` that talk to it):
//! the node's state and its small accessors. Its methods are spread over the files of this
//! room, one concern each: [`start`] (starting or joining a cluster), [`to_leader`] (proposals
//! and read barriers, the one road to the leader), [`conf_change`] (membership changes and
//! leader transfer), [`role_watch`] (the leader and role watch; finding out this member was
//! removed) and [`status`] (what this member knows of its peers' progress). Its fields are
//! `pub(super)`, seen by all of `raft` (the transport's server side reads them too).

pub mod conf_change;
pub mod role_watch;
pub mod start;
pub mod status;
pub mod to_leader;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use openraft::async_runtime::WatchReceiver;
use tokio::sync::watch;

use super::forward::{LeaderRequests, LeaderStream};
use super::log_store::LogStore;
use super::membership::InitialMember;
use super::rafthttp::network::{Peers, RaftClient};
use super::state_machine::{StateMachine, StateMachineStore};
use super::types::TypeConfig;
use crate::data_dir::RaftDir;
use crate::error::Error;
use crate::wal::Mode;

/// What a member needs to start its Raft node.
#[derive(Clone, Debug)]
pub struct NodeOptions {
    pub name: String,
    /// This member's id and the cluster's, as derived from the flags (a restarted member uses
    /// the ids it stored instead).
    pub member_id: u64,
    pub cluster_id: u64,
    /// This member's peer URLs as others reach it (`--initial-advertise-peer-urls`).
    pub peer_urls: Vec<String>,
    /// `--initial-cluster`, with ids.
    pub initial: BTreeMap<u64, InitialMember>,
    /// `--initial-cluster-state new` (false: `existing`, join a running cluster).
    pub new_cluster: bool,
    /// `<data-dir>/raft`.
    pub dir: RaftDir,
    pub mode: Mode,
    /// `--wal-segment-bytes`: the Raft log starts a new segment past this size.
    pub segment_bytes: u64,
    pub flush_interval: Duration,
    /// A snapshot is taken once this many bytes were logged since the last one (or the
    /// machine's size, if larger).
    pub snapshot_bytes: u64,
    /// `--snapshot-count`: the newest Raft log entries kept in memory (with a disk).
    pub keep_in_memory: u64,
    pub heartbeat: Duration,
    pub election: Duration,
    pub tls: Option<super::rafthttp::tls::PeerTls>,
    /// `--peer-failpoint`: the file listing members whose calls to refuse (tests only).
    pub failpoint: Option<std::path::PathBuf>,
    /// The InitialCorruptCheck feature gate: a restarted member compares its store's hash with
    /// its peers' before it takes part in the cluster (`corrupt::initial_check`).
    pub initial_corrupt_check: bool,
    /// `--corrupt-check-time`: how often the leader compares every member's hash with its own
    /// (`corrupt::monitor`); `None`: never.
    pub corrupt_check: Option<Duration>,
    /// The CompactHashCheck feature gate's `--compact-hash-check-time`; `None`: the gate is off.
    pub compact_hash_check: Option<Duration>,
}

/// openraft's Raft with mem_etcd's types and state machine.
pub type Raft = openraft::Raft<TypeConfig, StateMachineStore>;

/// Why a proposal or read did not succeed, in etcd's terms.
pub type Result<T> = std::result::Result<T, Error>;

/// This member's role, for the lessor (only the leader expires leases) and metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Role {
    pub leader: Option<u64>,
    pub term: u64,
    pub is_leader: bool,
    /// A learner serves only Status, MemberList and serializable reads.
    pub is_learner: bool,
}

/// The Raft node and what serving clients needs of it. Its fields are `pub(super)` for the
/// files of this module that hold its methods (see the module docs).
#[derive(Debug)]
pub struct RaftNode {
    pub id: u64,
    pub cluster_id: u64,
    pub raft: Raft,
    pub(super) peers: Arc<Peers>,
    /// The replicated state, for the hash peers ask of it (`corrupt`).
    pub(super) machine: Arc<dyn StateMachine>,
    pub(super) log: LogStore,
    /// The applied index, after each batch of entries applied.
    pub(super) applied: watch::Receiver<u64>,
    /// Leader, term and whether this member leads, from openraft's metrics.
    pub(super) role: watch::Receiver<Role>,
    /// Cached for every response header (raft_term) without a channel borrow.
    pub(super) term: AtomicU64,
    pub leader_changes: AtomicU64,
    pub proposals_failed: AtomicU64,
    pub proposals_pending: AtomicU64,
    /// In `--wal-mode none`, a member that came back without its state must not vote (nor
    /// campaign) until its cluster has re-admitted it: it may have acknowledged entries it no
    /// longer holds. Refusing a vote never endangers Raft's safety, only its progress.
    pub(super) voting_blocked: AtomicBool,
    /// When the leader last sent an append, in ms since `started` (0: never); written by the
    /// peer service, read by the role watcher.
    pub(super) leader_heard_ms: AtomicU64,
    pub(super) started: std::time::Instant,
    /// Injected network faults (`--peer-failpoint`); `None` outside fault tests.
    pub(super) faults: Option<Arc<super::rafthttp::faults::PeerFaults>>,
    /// Set once this member learns it was removed from the cluster (written by the role
    /// watcher and the prober, awaited by the daemon, which then stops as etcd's member does):
    /// how long to wait before stopping.
    pub(super) removed: watch::Sender<Option<Duration>>,
    /// The members this one saw leave the applied membership while it ran (etcd's
    /// `IsIDRemoved`): their peer calls are refused with [`super::rafthttp::network::MEMBER_REMOVED`],
    /// which tells a removed member that missed its removal to stop.
    pub(super) removed_members: parking_lot::Mutex<BTreeSet<u64>>,
    /// The server's side of the forwarded requests it serves when this member leads (see
    /// [`LeaderRequests`]): set once, as the server starts the node, before it serves peers.
    pub(super) leader_requests: OnceLock<Arc<dyn LeaderRequests>>,
    /// The stream to the leader this member forwards on (see [`LeaderStream`]), with the
    /// leader's id and peer URLs: replaced when either changes or the stream ends. Locked to
    /// find it, never across a call.
    pub(super) leader_stream: parking_lot::Mutex<Option<ToLeader>>,
    /// The linearizable reads waiting for the next shared read index round.
    pub(super) reads: Arc<super::read_index::SharedReadIndex>,
    /// The proposals waiting for the next batch to the leader.
    pub(super) proposals: Arc<super::batch::ProposalBatcher>,
    pub(super) opts: NodeOptions,
}

/// The stream to the leader, with the leader's id and peer URLs it was opened for.
type ToLeader = (u64, Vec<String>, Arc<LeaderStream>);

/// How long a proposal may take before it is answered "request timed out" (etcd: 5 s plus two
/// election timeouts).
pub(super) fn request_timeout(election: Duration) -> Duration {
    Duration::from_secs(5) + 2 * election
}

/// Where the log stood at the last snapshot ([`RaftNode::snapshot_mark`]).
#[derive(Debug)]
pub struct SnapshotMark {
    /// Bytes appended to the log by then.
    logged: u64,
    /// The last snapshot then.
    snapshot: Option<super::types::LogId>,
}

impl RaftNode {
    /// Reads openraft's metrics as last published, without copying them: they hold the whole
    /// membership, and probes, health checks and `/metrics` read a field or two of them. `f`
    /// runs under the watch's read lock, which openraft waits for to publish: keep it short.
    pub(super) fn with_metrics<R>(
        &self,
        f: impl FnOnce(&openraft::RaftMetrics<TypeConfig>) -> R,
    ) -> R {
        let rx = self.raft.metrics();
        let m = rx.borrow_watched();
        f(&m)
    }

    /// The committed index.
    pub fn committed_index(&self) -> u64 {
        self.with_metrics(|m| m.local_committed.map_or(0, |l| l.index))
    }

    /// Admits a peer call: from a member of this cluster ([`super::rafthttp::stamp::check_stamp`])
    /// whose calls are not being dropped by an injected fault. Returns the caller's member id.
    pub fn check_peer<T>(
        &self,
        req: &tonic::Request<T>,
    ) -> std::result::Result<u64, tonic::Status> {
        let from = super::rafthttp::stamp::check_stamp(req, self.cluster_id)?;
        self.admit(from)?;
        Ok(from)
    }

    /// Admits one message of member `from` (on a stream, each is checked as a call of its
    /// own): refused while an injected fault drops its calls, or once it was seen removed.
    pub fn admit(&self, from: u64) -> std::result::Result<(), tonic::Status> {
        self.check_fault(from)?;
        if self.is_member_removed(from) {
            return Err(super::rafthttp::network::member_removed());
        }
        Ok(())
    }

    /// Refuses a call from member `from` while an injected fault drops its calls.
    /// Records every call admitted (see `network`: Raft uses a link only both ways).
    pub fn check_fault(&self, from: u64) -> std::result::Result<(), tonic::Status> {
        if self.faults.as_ref().is_some_and(|f| f.refuses(from)) {
            return Err(tonic::Status::unavailable(
                "peer failpoint: calls from this member are dropped",
            ));
        }
        if from != 0 {
            self.peers.stats.of(from).heard();
        }
        Ok(())
    }

    /// Traffic with the other members.
    pub fn peer_stats(&self) -> &super::rafthttp::network::PeerStats {
        &self.peers.stats
    }

    /// The current term (for response headers).
    pub fn term(&self) -> u64 {
        self.term.load(Ordering::Relaxed)
    }

    /// Leader, term and role, as a channel that changes with them.
    pub fn role(&self) -> watch::Receiver<Role> {
        self.role.clone()
    }

    pub fn leader(&self) -> Option<u64> {
        self.role.borrow().leader
    }

    pub fn is_leader(&self) -> bool {
        self.role.borrow().is_leader
    }

    pub fn voting_blocked(&self) -> bool {
        self.voting_blocked.load(Ordering::SeqCst)
    }

    pub fn request_timeout(&self) -> Duration {
        request_timeout(self.opts.election)
    }

    pub fn election_timeout(&self) -> Duration {
        self.opts.election
    }

    /// The applied index.
    pub fn applied_index(&self) -> u64 {
        *self.applied.borrow()
    }

    /// Peer URLs of member `id`, from the membership this member knows (every forwarded
    /// request asks).
    pub fn peer_urls_of(&self, id: u64) -> Option<Vec<String>> {
        let urls = self.with_metrics(|m| {
            m.membership_config.membership().get_node(&id).map(|n| n.peer_urls.clone())
        });
        urls.or_else(|| self.opts.initial.get(&id).map(|i| i.peer_urls.clone()))
    }

    /// Waits until this member has applied `index`.
    pub async fn wait_applied(&self, index: u64) {
        let mut rx = self.applied.clone();
        let _ = rx.wait_for(|a| *a >= index).await;
    }

    /// Waits for a leader, at most `max`; `None` if there is none by then.
    pub async fn wait_leader(&self, max: Duration) -> Option<u64> {
        let mut rx = self.role.clone();
        match tokio::time::timeout(max, rx.wait_for(|r| r.leader.is_some())).await {
            Ok(Ok(r)) => r.leader,
            _ => None,
        }
    }

    /// Where the log stood at the last snapshot, for [`RaftNode::snapshot_if_due`] (its
    /// caller keeps it between checks). Counted from when the log opened, not from the first
    /// check: whatever was logged before that check counts towards the next snapshot too.
    pub fn snapshot_mark(&self) -> SnapshotMark {
        SnapshotMark { logged: 0, snapshot: self.with_metrics(|m| m.snapshot) }
    }

    /// Takes a snapshot if enough was logged since the last one (`mark`, updated), so the log
    /// (and restart time) stays bounded; openraft then purges what it covers. Called by the
    /// server's snapshot loop, which checks the WAL's snapshots alike.
    pub async fn snapshot_if_due(&self, mark: &mut SnapshotMark, machine_size: u64) {
        let snap = self.with_metrics(|m| m.snapshot);
        if snap != mark.snapshot {
            // Taken (or installed from the leader) since we last looked.
            mark.snapshot = snap;
            mark.logged = self.log.appended_bytes();
        }
        let logged = self.log.appended_bytes() - mark.logged;
        if logged >= self.opts.snapshot_bytes.max(machine_size) {
            mark.logged = self.log.appended_bytes();
            let _ = self.raft.trigger().snapshot().await;
        }
    }

    /// Stops the node and syncs the log.
    pub async fn shutdown(&self) {
        let _ = self.raft.shutdown().await;
        self.log.close();
    }
}

/// How far member `id` has replicated the log of the leader whose metrics these are (0 if
/// unknown, or not a leader's). A new entry's index is never 0, so 0 never counts as holding it.
pub(super) fn matched_in(m: &openraft::RaftMetrics<TypeConfig>, id: u64) -> u64 {
    m.replication.as_ref().and_then(|r| r.get(&id).cloned()).flatten().map_or(0, |l| l.index)
}

/// What the corruption checks need of this member.
impl super::corrupt::Hasher for RaftNode {
    fn member_id(&self) -> u64 {
        self.id
    }

    fn hash(&self, rev: i64) -> crate::error::Result<super::state_machine::KvHash> {
        self.machine.hash_kv(rev)
    }

    fn members(&self) -> BTreeMap<u64, Vec<String>> {
        self.membership().1
    }

    fn peer(&self, id: u64, urls: &[String]) -> Option<RaftClient> {
        self.peers.raft_client(id, urls)
    }

    fn is_leader(&self) -> bool {
        RaftNode::is_leader(self)
    }

    fn request_timeout(&self) -> Duration {
        RaftNode::request_timeout(self)
    }

    async fn linearizable(&self) -> Result<()> {
        RaftNode::linearizable(self).await
    }

    async fn propose(&self, request: Bytes) -> Result<()> {
        RaftNode::propose(self, request).await.map(|_| ())
    }
}
