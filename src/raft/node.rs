//! This member's Raft node (etcd's `raftNode` and the parts of `EtcdServer` that talk to it):
//! starting or joining a cluster, proposing requests (forwarded to the leader from a
//! follower), linearizable read barriers, membership changes and leader transfer.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use openraft::async_runtime::WatchReceiver;
use openraft::error::{ClientWriteError, RaftError};
use openraft::{ChangeMembers, EntryPayload, Membership, Precondition, ReadPolicy, ServerState};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_stream::StreamExt;

use super::forward::{Answer, Forwarded, LeaderRequests, LeaderStream};
use super::log_store::{LogOptions, LogStore};
use super::membership::InitialMember;
use super::network::{Network, Peers, RaftClient};
use super::state_machine::{StateMachine, StateMachineStore};
use super::types::{PeerNode, Proposal, TypeConfig};
use crate::data_dir::RaftDir;
use crate::error::Error;
use crate::proto::memetcdpb as pb;
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
    pub tls: Option<super::tls::PeerTls>,
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

/// A member's Raft status (Maintenance.Status's raft fields).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaftStatus {
    /// This member's id.
    pub id: u64,
    /// The index of the last entry in its log.
    pub last_index: u64,
    /// The index of the last entry it knows committed.
    pub commit: u64,
    pub applied_index: u64,
    pub term: u64,
    /// The member it voted for in this term (0: none).
    pub vote: u64,
    /// The leader it knows (0: none).
    pub leader: u64,
    pub is_learner: bool,
    /// Its role by etcd's raft's names: `StateLeader`, `StateCandidate`, `StateFollower` (a
    /// learner too).
    pub state: &'static str,
    /// On the leader: (member, index of the last entry it is known to hold) for every member,
    /// itself included (etcd's progress); elsewhere empty.
    pub progress: Vec<(u64, u64)>,
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

/// The Raft node and what serving clients needs of it.
#[derive(Debug)]
pub struct RaftNode {
    pub id: u64,
    pub cluster_id: u64,
    pub raft: Raft,
    pub(super) peers: Arc<Peers>,
    /// The replicated state, for the hash peers ask of it (`corrupt`).
    pub(super) machine: Arc<dyn StateMachine>,
    log: LogStore,
    /// The applied index, after each batch of entries applied.
    applied: watch::Receiver<u64>,
    /// Leader, term and whether this member leads, from openraft's metrics.
    role: watch::Receiver<Role>,
    /// Cached for every response header (raft_term) without a channel borrow.
    term: AtomicU64,
    pub leader_changes: AtomicU64,
    pub proposals_failed: AtomicU64,
    pub proposals_pending: AtomicU64,
    /// In `--wal-mode none`, a member that came back without its state must not vote (nor
    /// campaign) until its cluster has re-admitted it: it may have acknowledged entries it no
    /// longer holds. Refusing a vote never endangers Raft's safety, only its progress.
    voting_blocked: AtomicBool,
    /// When the leader last sent an append, in ms since `started` (0: never); written by the
    /// peer service, read by the role watcher.
    leader_heard_ms: AtomicU64,
    started: std::time::Instant,
    /// Injected network faults (`--peer-failpoint`); `None` outside fault tests.
    faults: Option<Arc<super::faults::PeerFaults>>,
    /// Set once this member learns it was removed from the cluster (written by the role
    /// watcher and the prober, awaited by the daemon, which then stops as etcd's member does):
    /// how long to wait before stopping.
    removed: watch::Sender<Option<Duration>>,
    /// The members this one saw leave the applied membership while it ran (etcd's
    /// `IsIDRemoved`): their peer calls are refused with [`super::network::MEMBER_REMOVED`],
    /// which tells a removed member that missed its removal to stop.
    removed_members: parking_lot::Mutex<BTreeSet<u64>>,
    /// The server's side of the forwarded requests it serves when this member leads (see
    /// [`LeaderRequests`]): set once, as the server starts the node, before it serves peers.
    leader_requests: OnceLock<Arc<dyn LeaderRequests>>,
    /// The stream to the leader this member forwards on (see [`LeaderStream`]), with the
    /// leader's id and peer URLs: replaced when either changes or the stream ends. Locked to
    /// find it, never across a call.
    leader_stream: parking_lot::Mutex<Option<ToLeader>>,
    /// The linearizable reads waiting for the next shared read index round.
    reads: Arc<super::read_index::SharedReadIndex>,
    /// The proposals waiting for the next batch to the leader.
    proposals: Arc<super::batch::ProposalBatcher>,
    opts: NodeOptions,
}

/// The stream to the leader, with the leader's id and peer URLs it was opened for.
type ToLeader = (u64, Vec<String>, Arc<LeaderStream>);

/// How long a proposal may take before it is answered "request timed out" (etcd: 5 s plus two
/// election timeouts).
pub(super) fn request_timeout(election: Duration) -> Duration {
    Duration::from_secs(5) + 2 * election
}

fn raft_config(o: &NodeOptions) -> std::result::Result<openraft::Config, String> {
    let hb = o.heartbeat.as_millis().max(10) as u64;
    let el = o.election.as_millis().max(hb as u128 * 4) as u64;
    // etcd's --election-timeout is how long a follower goes without hearing from the leader
    // before it may win an election: its followers refuse votes for that long (CheckQuorum's
    // lease), and each campaigns after a random time in [et, 2 et), the first at 1.33 et on
    // average with two followers. An openraft follower refuses votes for election_timeout_max
    // after it last heard the leader (the lease) and campaigns a random time in
    // [election_timeout_min, election_timeout_max) after the lease ended. A lease of 3/4 et and
    // a timer from et/4 put every campaign in [et, 1.5 et): never before etcd's earliest, and
    // the voter's lease has always ended when a candidate asks it, so the first campaign wins.
    // (A lease of et and a timer in [et/2, et) put campaigns in [1.5 et, 2 et): failovers
    // 0.4 s slower than etcd's.)
    let timer = (el / 4).max(hb + 1);
    let c = openraft::Config {
        cluster_name: format!("{:x}", o.cluster_id),
        heartbeat_interval: hb,
        election_timeout_min: timer,
        election_timeout_max: el - timer,
        // Snapshots are triggered by `snapshot_if_due`, by bytes logged, as the WAL's are.
        snapshot_policy: openraft::SnapshotPolicy::Never,
        // Entries kept after a snapshot, so a follower slightly behind catches up from the log
        // rather than by a snapshot (etcd keeps 5,000).
        max_in_snapshot_log_to_keep: 5000,
        max_payload_entries: 4096,
        enable_pre_vote: Some(true),
        // In `none` mode a restarted member's log goes back to nothing by design. Its first
        // answer to the leader may come before it asked to be re-admitted (which also allows
        // the revert once): without this the leader recorded the conflict, kept the old match
        // and stopped replicating to it (seen once in CI). Safety does not rest on this: a
        // member without its state votes in no election until it is re-admitted.
        allow_log_reversion: Some(o.mode == Mode::None),
        install_snapshot_timeout: 60_000,
        ..Default::default()
    };
    c.validate().map_err(|e| format!("raft config: {e}"))
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
    /// Starts this member's node: a restarted member resumes from its log and snapshot; a new
    /// one founds the cluster with the other `--initial-cluster` members or waits to be
    /// reached by a running cluster's leader (`existing`).
    pub async fn start(
        opts: NodeOptions,
        machine: Arc<dyn StateMachine>,
    ) -> std::result::Result<Arc<Self>, String> {
        Self::start_with(opts, machine, None).await
    }

    /// Starts the node of a member whose `<data-dir>/raft` was just founded from the state
    /// `machine` already holds (by [`super::restore::write_member`]: a member alone grown into
    /// a cluster of itself, or a member forced into a new cluster), so the founding snapshot is
    /// not loaded again. Its first vote is for `term`, so that the term its headers carry does
    /// not go back: its election takes the next.
    pub async fn start_founded(
        opts: NodeOptions,
        machine: Arc<dyn StateMachine>,
        term: u64,
    ) -> std::result::Result<Arc<Self>, String> {
        Self::start_with(opts, machine, Some(term)).await
    }

    /// `founded`: see [`Self::start_founded`] (the term of its first vote).
    async fn start_with(
        opts: NodeOptions,
        machine: Arc<dyn StateMachine>,
        founded: Option<u64>,
    ) -> std::result::Result<Arc<Self>, String> {
        let durable = opts.mode != Mode::None;
        let dir = opts.dir.path();
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let restarted = durable && opts.dir.has_member();
        let log = LogStore::open(&LogOptions {
            dir: opts.dir.log(),
            mode: opts.mode,
            segment_bytes: opts.segment_bytes,
            flush_interval: opts.flush_interval,
            keep_in_memory: opts.keep_in_memory,
        })
        .map_err(|e| format!("raft log: {e}"))?;
        if let Some(term) = founded
            && log.is_pristine()
        {
            use openraft::storage::RaftLogStorage;
            let vote = super::types::Vote::new(term, opts.member_id);
            log.clone().save_vote(&vote).await.map_err(|e| format!("raft log: {e}"))?;
        }
        let (applied_tx, applied) = watch::channel(0);
        let snap = opts.dir.snapshots();
        let sm = StateMachineStore::open(
            machine.clone(),
            snap,
            durable,
            Arc::new(applied_tx),
            founded.is_some(),
        )
        .map_err(|e| format!("raft snapshot: {e}"))?;
        let peers = Peers::new(opts.cluster_id, opts.member_id, opts.tls.clone(), opts.election);
        let config = Arc::new(raft_config(&opts)?);
        let pristine = log.is_pristine();
        let raft = Raft::new(
            opts.member_id,
            config,
            Network {
                peers: peers.clone(),
                one_way_after: Network::one_way_window(opts.heartbeat, opts.election),
            },
            log.clone(),
            sm,
        )
        .await
        .map_err(|e| format!("raft: {e}"))?;
        let role =
            watch::channel(Role { leader: None, term: 0, is_leader: false, is_learner: false });
        let node = Arc::new(Self {
            id: opts.member_id,
            cluster_id: opts.cluster_id,
            raft,
            peers,
            machine,
            log,
            applied,
            role: role.1,
            term: AtomicU64::new(0),
            leader_changes: AtomicU64::new(0),
            proposals_failed: AtomicU64::new(0),
            proposals_pending: AtomicU64::new(0),
            voting_blocked: AtomicBool::new(false),
            leader_heard_ms: AtomicU64::new(0),
            started: std::time::Instant::now(),
            faults: opts.failpoint.clone().map(super::faults::PeerFaults::start),
            removed: watch::channel(None).0,
            removed_members: Default::default(),
            leader_requests: OnceLock::new(),
            leader_stream: parking_lot::Mutex::new(None),
            reads: Arc::default(),
            proposals: Arc::default(),
            opts,
        });
        tokio::spawn(node.clone().watch_metrics(role.0));
        let weak = Arc::downgrade(&node);
        let removed = node.removed.clone();
        tokio::spawn(super::probing::run(
            node.peers.clone(),
            node.id,
            node.opts.heartbeat,
            node.opts.election,
            move || weak.upgrade().map(|n| n.membership().1),
            Arc::new(move |by: u64| {
                // etcd's member stops at once when a peer answers that it was removed.
                let first = removed.send_if_modified(|r| {
                    let first = r.is_none();
                    r.get_or_insert(Duration::ZERO);
                    first
                });
                if first {
                    tracing::warn!(
                        by = format!("{by:x}"),
                        "raft: a peer refused this member: it was removed from the cluster"
                    );
                }
            }),
        ));
        let weak = Arc::downgrade(&node);
        let reads = node.reads.clone();
        tokio::spawn(async move {
            reads
                .run(|| {
                    let node = weak.upgrade();
                    async move { Some(node?.confirm_read_index().await) }
                })
                .await
        });
        let weak = Arc::downgrade(&node);
        let proposals = node.proposals.clone();
        tokio::spawn(async move {
            proposals
                .run(|requests| {
                    let node = weak.upgrade()?;
                    Some(async move { node.forward_proposals(requests).await })
                })
                .await
        });
        if pristine && !restarted {
            if durable {
                // The ids are kept from now on: a restart resumes this member, whatever flags
                // it is given (as etcd ignores --initial-* once it has a data directory).
                let dir = &node.opts.dir;
                dir.write_member(node.id, node.cluster_id)
                    .map_err(|e| format!("{}: {e}", dir.display()))?;
                if node.opts.new_cluster {
                    node.found().await?;
                }
            } else {
                // A member without state may be one that lost it: it finds out before voting.
                node.voting_blocked.store(true, Ordering::SeqCst);
                node.raft.runtime_config().elect(false);
                tokio::spawn(node.clone().join_without_state());
            }
        }
        // As etcd's, only a member that had state checks (a new one has nothing to compare),
        // before it serves its peers; it campaigns in no election meanwhile.
        if restarted && node.opts.initial_corrupt_check {
            node.raft.runtime_config().elect(false);
            let committed = {
                use openraft::storage::RaftLogStorage;
                node.log.clone().read_committed().await.map_err(|e| format!("raft log: {e}"))?
            };
            // The store as this member left it: its snapshot and the entries it had committed,
            // which openraft applies as it starts.
            let mut applied = node.applied.clone();
            let target = committed.map_or(0, |c| c.index);
            let _ = tokio::time::timeout(
                request_timeout(node.opts.election),
                applied.wait_for(|a| *a >= target),
            )
            .await;
            let timeout = request_timeout(node.opts.election);
            super::corrupt::initial_check(&*node, timeout).await?;
            node.raft.runtime_config().elect(true);
        }
        if node.opts.corrupt_check.is_some() || node.opts.compact_hash_check.is_some() {
            let (every, compact) = (node.opts.corrupt_check, node.opts.compact_hash_check);
            tokio::spawn(super::corrupt::monitor(Arc::downgrade(&node), every, compact));
        }
        Ok(node)
    }

    /// Settles this member's id and its cluster's before anything is served: a restarted member
    /// takes the ids it stored (whatever the flags say, as etcd does); a member joining a
    /// running cluster (`existing`) asks the members of `--initial-cluster` for them, and is
    /// refused start-up if none answers within 30 s or none knows its peer URLs, or at once
    /// when a member refuses its TLS handshake.
    pub async fn resolve_ids(opts: &mut NodeOptions) -> std::result::Result<(), String> {
        if opts.mode != Mode::None
            && let Some((member, cluster)) = opts.dir.read_member()?
        {
            (opts.member_id, opts.cluster_id) = (member, cluster);
            return Ok(());
        }
        if opts.new_cluster {
            return Ok(());
        }
        let peers = Peers::new(0, 0, opts.tls.clone(), opts.election);
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut why = String::from("no member of --initial-cluster answered");
        let mut refused_tls = false;
        while Instant::now() < deadline {
            for (id, m) in &opts.initial {
                if m.peer_urls == opts.peer_urls {
                    continue;
                }
                let Some(mut c) = peers.raft_client(*id, &m.peer_urls) else { continue };
                let mut req =
                    tonic::Request::new(pb::ProbeRequest { peer_urls: opts.peer_urls.clone() });
                req.set_timeout(Duration::from_millis(500));
                match c.probe(req).await {
                    Ok(r) if r.get_ref().your_id != 0 => {
                        let r = r.into_inner();
                        (opts.member_id, opts.cluster_id) = (r.your_id, r.cluster_id);
                        tracing::info!(
                            member = format!("{:x}", r.your_id),
                            cluster = format!("{:x}", r.cluster_id),
                            "raft: joining a running cluster"
                        );
                        return Ok(());
                    }
                    Ok(_) => {
                        why = format!(
                            "the cluster has no member with peer URLs {:?}: add it first \
                             (etcdctl member add)",
                            opts.peer_urls
                        )
                    }
                    Err(e) => {
                        let (cause, tls) = probe_failure(&e);
                        why = format!(
                            "no member of --initial-cluster answered (last: {}: {cause})",
                            m.peer_urls.join(",")
                        );
                        refused_tls |= tls;
                    }
                }
            }
            // A peer that refused this member's TLS (its certificate, its TLS versions) will
            // go on refusing it: given up at once, as etcd gives up after one round.
            if refused_tls {
                break;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        Err(format!("--initial-cluster-state existing: {why}"))
    }

    /// Founds the cluster: every founding member proposes the same first membership (openraft
    /// accepts that from several members).
    async fn found(&self) -> std::result::Result<(), String> {
        let members: BTreeMap<u64, PeerNode> = self
            .opts
            .initial
            .iter()
            .map(|(id, m)| (*id, PeerNode { peer_urls: m.peer_urls.clone() }))
            .collect();
        match self.raft.initialize(members).await {
            Ok(()) => Ok(()),
            Err(RaftError::APIError(openraft::error::InitializeError::NotAllowed(_))) => Ok(()),
            Err(e) => Err(format!("raft: founding the cluster: {e}")),
        }
    }

    /// `--wal-mode none`: decides whether this member founds the cluster (every founding member
    /// is up and none has state) or comes back into a running one (any peer has state), in
    /// which case the leader re-admits it as a learner until it has caught up, then as a voter.
    async fn join_without_state(self: Arc<Self>) {
        let others: Vec<(u64, Vec<String>)> = self
            .opts
            .initial
            .iter()
            .filter(|(id, _)| **id != self.id)
            .map(|(id, m)| (*id, m.peer_urls.clone()))
            .collect();
        loop {
            let mut answers = Vec::new();
            for (id, urls) in &others {
                if let Some(mut c) = self.peers.raft_client(*id, urls) {
                    let mut req = tonic::Request::new(pb::ProbeRequest {
                        peer_urls: self.opts.peer_urls.clone(),
                    });
                    req.set_timeout(Duration::from_secs(2));
                    if let Ok(r) = c.probe(req).await {
                        answers.push(r.into_inner());
                    }
                }
            }
            tracing::debug!(?answers, "raft: without state; what the other members say");
            // A peer past its cluster's founding (it had a leader, so entries after the
            // founding membership) proves a running cluster; peers still founding do not, and
            // founding along with them is what openraft allows.
            if let Some(a) = answers.iter().find(|a| a.initialized && a.last_log_index > 0) {
                // Whether this member votes is the leader's to say (another peer may not have
                // seen the newest membership yet).
                let Some(a) = answers.iter().find(|b| b.leader != 0 && b.member_id == b.leader)
                else {
                    let leader = a.leader;
                    if leader != 0 && self.readmit(leader).await {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                };
                if !a.knows_you || !a.you_are_voter {
                    // A learner or a member being added: catching up from the leader is all
                    // it needs; it votes only once promoted, by which time it holds the log.
                    break;
                }
                let leader = a.leader;
                if leader != 0 && self.readmit(leader).await {
                    break;
                }
            } else if self.opts.new_cluster && answers.len() == others.len() {
                if let Err(e) = self.found().await {
                    tracing::error!(error = %e, "raft: founding failed; retrying");
                } else {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        self.voting_blocked.store(false, Ordering::SeqCst);
        self.raft.runtime_config().elect(true);
        tracing::info!("raft: this member is back in its cluster and votes again");
    }

    /// Asks `leader` to re-admit this member (see [`Self::readmit_member`]); true once done.
    async fn readmit(&self, leader: u64) -> bool {
        let Some(urls) = self.peer_urls_of(leader) else { return false };
        let Some(mut c) = self.peers.raft_client(leader, &urls) else { return false };
        tracing::info!(
            leader = format!("{leader:x}"),
            "raft: without state; asking the leader to re-admit this member"
        );
        c.readmit(pb::ReadmitRequest { member_id: self.id }).await.is_ok()
    }

    /// On the leader: a member that lost its state becomes a learner, catches up, and becomes
    /// a voter again.
    pub async fn readmit_member(&self, id: u64) -> Result<()> {
        // The member's log went back to nothing: openraft must accept that from it once,
        // rather than resending from where it was before (forever).
        let _ = self.raft.trigger().allow_next_revert(&id, true).await;
        if self.membership().0.contains(&id) {
            let deadline = Instant::now() + self.request_timeout();
            self.change_voters(deadline, 0, |voters, _| {
                voters.remove(&id);
            })
            .await?;
        }
        // Back as a voter once it holds everything up to its demotion: every entry it may have
        // acknowledged before it lost its state is in there.
        let target = self.metrics().last_log_index.unwrap_or(0);
        let deadline = Instant::now() + Duration::from_secs(600);
        while self.matched(id) < target {
            if Instant::now() > deadline {
                return Err(Error::Timeout);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.promote_member(id).await
    }

    /// Follows openraft's metrics: leader, term and role changes.
    async fn watch_metrics(self: Arc<Self>, tx: watch::Sender<Role>) {
        use openraft::Instant as _;
        let mut rx = self.raft.metrics();
        let mut last_leader = None;
        // etcd's CheckQuorum: a leader that has not heard from a quorum within the election
        // timeout, and a follower that has not heard from its leader as long, count as having
        // no leader (etcd's would have stepped down, or started a pre-vote), so `has_leader`,
        // `/health`, `/livez`, `/readyz` and leader-requiring watches say so. openraft itself
        // already refuses writes then.
        let lease = self.opts.election;
        // Whether this member was ever in the applied membership, and since when it has had no
        // leader: how it finds out it was removed (see `check_removed`).
        let mut was_member = false;
        let mut leaderless_since: Option<Instant> = None;
        // The members of the membership last seen applied, to find who left it.
        let mut applied_nodes: Option<BTreeSet<u64>> = None;
        // The membership as last seen (its log id, and whether it was applied), so the sets
        // below are built when it changes, not on every change of openraft's metrics (the
        // leader's change with every acknowledgement).
        let mut seen_config = None;
        let mut membership = MembershipSeen::default();
        let mut tick = tokio::time::interval(self.opts.heartbeat.max(Duration::from_millis(50)));
        // The log's entries up to here are no longer held in memory (see `held_upto`).
        let mut released = 0;
        loop {
            let (role, upto, config_changed) = {
                let m = rx.borrow_and_update();
                let is_leader = m.state == ServerState::Leader;
                let cut_off = if is_leader {
                    m.last_quorum_acked.as_ref().is_none_or(|t| t.elapsed() > lease)
                        && m.membership_config.membership().voter_ids().count() > 1
                } else {
                    self.since_leader_heard().is_none_or(|d| d > lease)
                };
                let role = Role {
                    leader: if cut_off { None } else { m.current_leader },
                    term: m.current_term,
                    is_leader: is_leader && !cut_off,
                    is_learner: m.state == ServerState::Learner
                        && m.membership_config.membership().get_node(&m.id).is_some(),
                };
                let config = &m.membership_config;
                let applied =
                    config.log_id().as_ref().is_some_and(|l| Some(l) <= m.last_applied.as_ref());
                let key = (*config.log_id(), applied);
                let config_changed = seen_config.as_ref() != Some(&key);
                if config_changed {
                    membership = MembershipSeen {
                        nodes: config.membership().nodes().map(|(id, _)| *id).collect(),
                        named: config.membership().get_node(&m.id).is_some(),
                        applied,
                    };
                    seen_config = Some(key);
                }
                (role, held_upto(&m), config_changed)
            };
            // After the metrics borrow ends: openraft waits for it to publish, and the log's
            // lock may be busy with an append.
            if upto > released {
                self.log.release(upto);
                released = upto;
            }
            self.term.store(role.term, Ordering::Relaxed);
            if config_changed {
                self.note_removed_members(&membership, &mut applied_nodes);
            }
            self.check_removed(
                role.leader.is_some(),
                &membership,
                &mut was_member,
                &mut leaderless_since,
            );
            if role.leader != last_leader {
                if role.leader.is_some() {
                    self.leader_changes.fetch_add(1, Ordering::Relaxed);
                }
                tracing::info!(
                    leader = role.leader.map(|l| format!("{l:x}")),
                    term = role.term,
                    "raft: leader changed"
                );
                last_leader = role.leader;
            }
            tx.send_if_modified(|r| {
                let changed = *r != role;
                *r = role;
                changed
            });
            tokio::select! {
                changed = rx.changed() => if changed.is_err() {
                    return;
                },
                _ = tick.tick() => {}
            }
        }
    }

    /// Records the members that left the applied membership since `last` was seen (etcd's
    /// removed members: only an applied removal counts, as one that is not committed yet may
    /// be undone by the next leader).
    fn note_removed_members(&self, now: &MembershipSeen, last: &mut Option<BTreeSet<u64>>) {
        if !now.applied {
            return;
        }
        if let Some(before) = last.as_ref() {
            let gone: Vec<u64> =
                before.difference(&now.nodes).copied().filter(|id| *id != self.id).collect();
            if !gone.is_empty() {
                self.removed_members.lock().extend(gone);
            }
        }
        *last = Some(now.nodes.clone());
    }

    /// Whether member `id` was seen leaving this cluster (see [`Self::note_removed_members`]).
    pub fn is_member_removed(&self, id: u64) -> bool {
        self.removed_members.lock().contains(&id)
    }

    /// Finds out whether this member was removed from the cluster: its applied membership no
    /// longer names it, or (when it missed its removal: the leader stops replicating to a
    /// member as it removes it) a member of the cluster that has a leader no longer knows it.
    fn check_removed(
        &self,
        has_leader: bool,
        membership: &MembershipSeen,
        was_member: &mut bool,
        leaderless_since: &mut Option<Instant>,
    ) {
        if self.removed.borrow().is_some() {
            return;
        }
        if membership.named {
            *was_member = true;
        } else if *was_member && membership.applied {
            tracing::warn!(
                member = format!("{:x}", self.id),
                "raft: this member was removed from the cluster"
            );
            // etcd's member stops a second after applying its own removal.
            self.removed.send_replace(Some(Duration::from_secs(1)));
            return;
        }
        if !*was_member || has_leader {
            *leaderless_since = None;
            return;
        }
        let since = *leaderless_since.get_or_insert_with(Instant::now);
        // Asked at most once per election timeout, once the leader has been gone a while.
        if since.elapsed() < self.opts.election * 3 {
            return;
        }
        *leaderless_since = Some(Instant::now());
        let m = self.metrics();
        let peers: Vec<(u64, Vec<String>)> = m
            .membership_config
            .membership()
            .nodes()
            .filter(|(id, _)| **id != self.id)
            .map(|(id, n)| (*id, n.peer_urls.clone()))
            .collect();
        let node = self.removed.clone();
        let (client, me, cluster) = (self.peers.clone(), self.id, self.cluster_id);
        let urls = self.opts.peer_urls.clone();
        tokio::spawn(async move {
            for (id, peer_urls) in peers {
                let Some(mut c) = client.raft_client(id, &peer_urls) else { continue };
                let mut req = tonic::Request::new(pb::ProbeRequest { peer_urls: urls.clone() });
                req.set_timeout(Duration::from_millis(500));
                if let Ok(r) = c.probe(req).await {
                    let r = r.into_inner();
                    if r.cluster_id == cluster && r.initialized && r.leader != 0 && !r.knows_you {
                        tracing::warn!(
                            member = format!("{me:x}"),
                            by = format!("{id:x}"),
                            "raft: this member is no longer in the cluster"
                        );
                        node.send_replace(Some(Duration::ZERO));
                        return;
                    }
                }
            }
        });
    }

    /// Resolves once this member was removed from the cluster: a second after it applied its
    /// own removal, at once when a peer refused it as removed (as etcd's member stops).
    pub async fn removed(&self) {
        let mut rx = self.removed.subscribe();
        let delay = rx.wait_for(|r| r.is_some()).await.map(|r| r.unwrap_or_default());
        // The sender lives as long as this node: no error while it runs.
        tokio::time::sleep(delay.unwrap_or_default()).await;
    }

    /// etcd's `TransferLeadership` as it stops: a leader with other voters hands over to the
    /// one it has been connected to longest and waits (at most a request timeout) until that
    /// one leads, so the others go on one term later rather than after an election.
    pub async fn hand_over(&self) {
        if !self.is_leader() {
            return;
        }
        let (voters, _) = self.membership();
        let to = voters
            .iter()
            .filter(|v| **v != self.id)
            .filter_map(|v| self.active_since(*v).map(|t| (t, *v)))
            .min()
            .map(|(_, v)| v);
        let Some(to) = to else {
            tracing::info!("raft: skipped leadership transfer: no other voter is connected");
            return;
        };
        tracing::info!(to = format!("{to:x}"), "raft: leadership transfer starting");
        match self.transfer_leader(to).await {
            Ok(()) => tracing::info!(to = format!("{to:x}"), "raft: leadership transfer finished"),
            Err(e) => tracing::warn!(error = %e, "raft: leadership transfer failed"),
        }
    }

    /// Called by the peer service for every append from a leader.
    pub fn heard_from_leader(&self) {
        let ms = self.started.elapsed().as_millis() as u64;
        self.leader_heard_ms.store(ms.max(1), Ordering::Relaxed);
    }

    /// How long ago the leader last sent this member anything (`None`: never).
    fn since_leader_heard(&self) -> Option<Duration> {
        let at = self.leader_heard_ms.load(Ordering::Relaxed);
        (at != 0).then(|| self.started.elapsed().saturating_sub(Duration::from_millis(at)))
    }

    /// openraft's metrics, as last published.
    fn metrics(&self) -> openraft::RaftMetrics<TypeConfig> {
        self.raft.metrics().borrow_watched().clone()
    }

    /// The committed index.
    pub fn committed_index(&self) -> u64 {
        self.metrics().local_committed.map_or(0, |l| l.index)
    }

    /// Admits a peer call: from a member of this cluster ([`super::network::check_stamp`])
    /// whose calls are not being dropped by an injected fault. Returns the caller's member id.
    pub fn check_peer<T>(
        &self,
        req: &tonic::Request<T>,
    ) -> std::result::Result<u64, tonic::Status> {
        let from = super::network::check_stamp(req, self.cluster_id)?;
        self.admit(from)?;
        Ok(from)
    }

    /// Admits one message of member `from` (on a stream, each is checked as a call of its
    /// own): refused while an injected fault drops its calls, or once it was seen removed.
    pub fn admit(&self, from: u64) -> std::result::Result<(), tonic::Status> {
        self.check_fault(from)?;
        if self.is_member_removed(from) {
            return Err(super::network::member_removed());
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
    pub fn peer_stats(&self) -> &super::network::PeerStats {
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

    /// Peer URLs of member `id`, from the membership this member knows.
    /// Borrows openraft's metrics rather than cloning them: every forwarded request asks.
    pub fn peer_urls_of(&self, id: u64) -> Option<Vec<String>> {
        let rx = self.raft.metrics();
        let urls = rx
            .borrow_watched()
            .membership_config
            .membership()
            .get_node(&id)
            .map(|n| n.peer_urls.clone());
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

    /// Proposes an encoded request and returns the log index it was applied at and the
    /// encoded answer. The request goes to the leader in the next batch of this member's
    /// proposals ([`super::batch`]), and the answer comes back once this member has applied it
    /// too (so a client reading from this member next sees its write). A failure never hides
    /// a commit: an answer is success only once committed.
    pub async fn propose(&self, request: Bytes) -> Result<(u64, Bytes)> {
        self.proposals_pending.fetch_add(1, Ordering::Relaxed);
        let r = self.propose_inner(request).await;
        self.proposals_pending.fetch_sub(1, Ordering::Relaxed);
        if r.is_err() {
            self.proposals_failed.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    async fn propose_inner(&self, request: Bytes) -> Result<(u64, Bytes)> {
        let deadline = Instant::now() + self.request_timeout();
        loop {
            let answer = tokio::time::timeout_at(deadline, self.proposals.propose(request.clone()))
                .await
                .unwrap_or(Err(Error::Timeout));
            match answer {
                Ok((index, response)) => {
                    tokio::time::timeout_at(deadline, self.wait_applied(index))
                        .await
                        .map_err(|_| Error::Timeout)?;
                    return Ok((index, response));
                }
                // Not appended: a leader that lost its leadership as the batch came, while
                // others of the batch were appended (a whole batch refused is sent again by
                // `at_leader`). Safe to send again, to whoever leads now.
                Err(Error::NotLeader) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(Error::NotLeader) => return Err(Error::Timeout),
                Err(e) => return Err(e),
            }
        }
    }

    /// One batch of this member's proposals, through the one road to the leader: the answers,
    /// one per request, in order.
    async fn forward_proposals(&self, requests: Vec<Bytes>) -> Result<Vec<super::batch::Answer>> {
        let answer = self.at_leader(Forwarded::Propose(pb::Proposals { requests })).await?;
        let Answer::Propose(proposed) = answer else { return Err(Error::Internal) };
        Ok(proposed
            .answers
            .into_iter()
            .map(|a| match a.error {
                Some(code) => Err(Error::from_code(code).unwrap_or(Error::Internal)),
                None => Ok((a.index, a.response)),
            })
            .collect())
    }

    /// Registers the server's side of the forwarded requests (see [`LeaderRequests`]); once.
    pub fn serve_leader_requests(&self, serve: Arc<dyn LeaderRequests>) {
        let _ = self.leader_requests.set(serve);
    }

    /// The one road to the leader, for every request only the leader can serve: runs
    /// `request` on this member if it leads, else forwards it to the leader, within the request
    /// timeout (etcd's). Without a leader the request waits for one, as etcd's do, and fails by
    /// the deadline as etcd's do (see [`super::forward::errors`]; "etcdserver: no leader" for a
    /// proposal is for clients that asked to require one). A request that was not delivered
    /// (the leader does not lead, or could not be reached at all) is sent again to whoever
    /// leads; any other failure of a call to the leader is answered with the leader's error if
    /// it is one of etcd's, else as `errors` says. A call whose leader another member replaced
    /// meanwhile ends at once: sent again to the new leader if repeating it changes nothing
    /// ([`super::forward::resendable`]), else answered as a failed call (a proposal, which
    /// may still commit, is never sent twice). A proposal the leader answered is answered
    /// here once this member has applied it too, as etcd's followers answer from their own
    /// apply (so a client reading from this member next sees its write).
    pub async fn at_leader(&self, request: Forwarded) -> Result<Answer> {
        let deadline = Instant::now() + self.request_timeout();
        let (no_leader, failed) = super::forward::errors(&request);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let leader = match self.leader() {
                Some(l) => l,
                None => match self.wait_leader(left).await {
                    Some(l) => l,
                    None => return Err(no_leader),
                },
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout);
            }
            if leader == self.id {
                match tokio::time::timeout(left, self.serve_forwarded(request.clone())).await {
                    Err(_) => return Err(Error::Timeout),
                    Ok(Err(Error::NotLeader)) => {
                        // Not appended: safe to send again, to whoever leads now.
                        self.wait_role_change(leader, deadline).await;
                        continue;
                    }
                    Ok(r) => return r,
                }
            }
            let Some(stream) = self.leader_stream(leader) else {
                return Err(Error::NoLeader);
            };
            // A call to a leader that another member has replaced ends at once, as etcd's
            // follower stops forwarding to a leader it lost: a request that changes nothing
            // twice goes to the new leader, any other ends as a proposal caught in a leader's
            // failure does in etcd (it may still commit). No request waits behind it.
            let answered = tokio::select! {
                answered = stream.call(request.clone(), left) => answered,
                () = self.replaced(leader) => {
                    if super::forward::resendable(&request) {
                        continue;
                    }
                    return Err(failed);
                }
            };
            match answered {
                Ok(v) => return Ok(v),
                Err(s)
                    if Error::from_message(s.message()) == Some(Error::NotLeader)
                        || not_delivered(&s) =>
                {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    self.wait_role_change(leader, deadline).await;
                }
                Err(s) if s.code() == tonic::Code::DeadlineExceeded => {
                    return Err(Error::from_message(s.message()).unwrap_or(Error::Timeout));
                }
                Err(s) => return Err(Error::from_message(s.message()).unwrap_or(failed)),
            }
        }
    }

    /// The stream to `leader`, opened if this member has none to it that still works.
    fn leader_stream(&self, leader: u64) -> Option<Arc<LeaderStream>> {
        let urls = self.peer_urls_of(leader)?;
        let mut g = self.leader_stream.lock();
        if let Some((id, u, s)) = g.as_ref()
            && *id == leader
            && *u == urls
            && !s.ended()
        {
            return Some(s.clone());
        }
        let stream = Arc::new(LeaderStream::open(self.peers.raft_client(leader, &urls)?));
        *g = Some((leader, urls, stream.clone()));
        Some(stream)
    }

    /// Serves a request a follower forwarded. Its read index joins this leader's own shared
    /// round (see [`super::read_index`]): one quorum confirmation then serves this member's
    /// reads and every follower's waiting at that moment, where each follower's call used to
    /// cost one of its own. The round starts after the call arrived, as a round of its own
    /// would; the round itself confirms through [`RaftNode::serve_forwarded`].
    pub async fn serve_peer_forward(&self, request: Forwarded) -> Result<Answer> {
        match request {
            Forwarded::ReadIndex(_) if self.is_leader() => {
                Ok(Answer::ReadIndex(pb::ReadIndexResponse { index: self.read_index().await? }))
            }
            other => self.serve_forwarded(other).await,
        }
    }

    /// Serves a forwarded request on this member, which must lead (`NotLeader`: it does not,
    /// and did nothing): the request of a follower, or of this member's own client.
    pub async fn serve_forwarded(&self, request: Forwarded) -> Result<Answer> {
        match request {
            Forwarded::Propose(p) => Ok(Answer::Propose(self.propose_local(p.requests).await?)),
            Forwarded::ReadIndex(_) => {
                let index = self.read_index_local().await?;
                Ok(Answer::ReadIndex(pb::ReadIndexResponse { index }))
            }
            other => {
                if !self.leads_confirmed().await {
                    return Err(Error::NotLeader);
                }
                let Some(server) = self.leader_requests.get() else {
                    tracing::error!("raft: a forwarded request before the server registered");
                    return Err(Error::Internal);
                };
                server.serve(other).await
            }
        }
    }

    /// Whether this member leads by the role's rule (a quorum heard from within an election
    /// timeout, so that a deposed leader renews no lease). One that Raft has just elected
    /// waits for its first quorum's answers, at most an election timeout, rather than turning
    /// a request away: the followers already forward to it, and one turned away would wait
    /// for another leader.
    async fn leads_confirmed(&self) -> bool {
        if self.is_leader() {
            return true;
        }
        if self.raft.metrics().borrow_watched().state != ServerState::Leader {
            return false;
        }
        let mut rx = self.role.clone();
        let confirmed = tokio::time::timeout(self.opts.election, rx.wait_for(|r| r.is_leader));
        matches!(confirmed.await, Ok(Ok(_)))
    }

    /// Waits (until `deadline`, or a little) for the leader to be someone other than `old`.
    async fn wait_role_change(&self, old: u64, deadline: Instant) {
        let until = deadline.min(Instant::now() + self.opts.election);
        let _ = tokio::time::timeout_at(until, self.replaced(old)).await;
    }

    /// Resolves once this member knows another leader than `old` (itself, maybe); never if the
    /// node stops first.
    async fn replaced(&self, old: u64) {
        let mut rx = self.role.clone();
        if rx.wait_for(|r| r.leader.is_some_and(|l| l != old)).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Proposes a batch on this member, which must lead, as one message to Raft, and answers
    /// each request once applied. `NotLeader` (for the whole batch, or for one request): not
    /// appended.
    async fn propose_local(&self, requests: Vec<Bytes>) -> Result<pb::Proposed> {
        let n = requests.len();
        let failed = |e: Error| pb::ProposeResponse { error: Some(e.code()), ..Default::default() };
        let mut results =
            match self.raft.client_write_many(requests.into_iter().map(Proposal)).await {
                Ok(s) => s,
                Err(_) => return Err(Error::Stopped),
            };
        let mut answers = Vec::with_capacity(n);
        while let Some(r) = results.next().await {
            answers.push(match r {
                Ok(Ok(w)) => {
                    pb::ProposeResponse { index: w.log_id.index, response: w.response, error: None }
                }
                Ok(Err(ClientWriteError::ForwardToLeader(_))) => failed(Error::NotLeader),
                Ok(Err(ClientWriteError::LogEntryDiscarded(_))) => failed(Error::TimeoutLeaderFail),
                Ok(Err(e)) => {
                    tracing::error!(error = %e, "raft: proposal failed");
                    failed(Error::Internal)
                }
                // Raft stopped: what it did with the rest is unknown.
                Err(_) => break,
            });
        }
        answers.resize_with(n, || failed(Error::TimeoutLeaderFail));
        if answers.iter().all(|a| a.error == Some(Error::NotLeader.code())) {
            return Err(Error::NotLeader);
        }
        Ok(pb::Proposed { answers })
    }

    /// The index a linearizable read must wait for: the next shared round's
    /// ([`super::read_index`]), within the request timeout.
    pub async fn read_index(&self) -> Result<u64> {
        tokio::time::timeout(self.request_timeout(), self.reads.read_index())
            .await
            .unwrap_or(Err(Error::Timeout))
    }

    /// One read index, confirmed with a quorum by the leader: a shared round's.
    async fn confirm_read_index(&self) -> Result<u64> {
        match self.at_leader(Forwarded::ReadIndex(pb::Empty {})).await? {
            Answer::ReadIndex(r) => Ok(r.index),
            _ => Err(Error::Internal),
        }
    }

    /// On the leader: the read index, once a quorum confirmed this member still leads.
    pub async fn read_index_local(&self) -> Result<u64> {
        match self.raft.get_read_linearizer(ReadPolicy::ReadIndex).await {
            Ok(l) => Ok(l.read_log_id().index()),
            Err(RaftError::APIError(openraft::error::LinearizableReadError::ForwardToLeader(
                _,
            ))) => Err(Error::NotLeader),
            Err(RaftError::APIError(_)) => Err(Error::Timeout),
            Err(RaftError::Fatal(_)) => Err(Error::Stopped),
        }
    }

    /// A linearizable read barrier: once it returns, this member's applied state holds every
    /// write acknowledged before it was called.
    pub async fn linearizable(&self) -> Result<()> {
        let index = self.read_index().await?;
        let deadline = Instant::now() + self.request_timeout();
        tokio::time::timeout_at(deadline, self.wait_applied(index))
            .await
            .map_err(|_| Error::Timeout)
    }

    /// Whether learner `id` has replicated at least `fraction` of the leader's log (etcd
    /// promotes a learner only at 90%).
    pub fn learner_in_sync(&self, id: u64, fraction: f64) -> bool {
        let m = self.metrics();
        let leader_last = m.last_log_index.unwrap_or(0);
        let matched = matched_in(&m, id);
        matched as f64 >= leader_last as f64 * fraction && (matched > 0 || leader_last == 0)
    }

    /// Since when member `id` has answered every probe of this member ([`super::probing`];
    /// `None`: unreachable, or not probed yet; this member itself: always).
    pub fn active_since(&self, id: u64) -> Option<std::time::Instant> {
        if id == self.id {
            return Some(std::time::Instant::now() - Duration::from_secs(3600));
        }
        *self.peers.stats.of(id).active_since.lock()
    }

    /// Whether a quorum of voters reaches this member: waits until enough voters (this member
    /// counting for itself) have each sent it two probes since it was called, until
    /// `deadline`. Every member probes every other once per heartbeat, and sends its next
    /// probe only once the last was answered ([`super::probing`]), so the second proves that
    /// the link carried a probe, its answer and another probe after this began (one probe
    /// alone could have been on its way before). A member whose incoming peer traffic is cut
    /// still reaches the others with its own calls, and may still confirm a read index for a
    /// while (see `network`); etcd's member in that state cannot, as its messages travel on
    /// connections its peers dial. The health checks ask this first.
    pub async fn reached_by_quorum(&self, deadline: Instant) -> bool {
        let (voters, _) = self.membership();
        let probes = |id: u64| self.peers.stats.of(id).probes.load(Ordering::Relaxed);
        let before: BTreeMap<u64, u64> = voters.iter().map(|&id| (id, probes(id))).collect();
        loop {
            let reached =
                before.iter().filter(|&(&id, &n)| id == self.id || probes(id) >= n + 2).count();
            if reached > before.len() / 2 {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Members the leader heard from within `within` (empty on a follower).
    pub fn recently_heard(&self, within: Duration) -> BTreeSet<u64> {
        use openraft::Instant as _;
        let m = self.metrics();
        m.heartbeat
            .as_ref()
            .map(|h| {
                h.iter()
                    .filter(|(_, t)| t.as_ref().is_some_and(|t| t.elapsed() <= within))
                    .map(|(id, _)| *id)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// How far member `id` has replicated this leader's log (0 if unknown).
    fn matched(&self, id: u64) -> u64 {
        matched_in(&self.metrics(), id)
    }

    /// The membership this member knows: voters, learners and every node's peer URLs.
    pub fn membership(&self) -> (BTreeSet<u64>, BTreeMap<u64, Vec<String>>) {
        let m = self.metrics().membership_config;
        let voters = m.membership().voter_ids().collect();
        let nodes = m.membership().nodes().map(|(id, n)| (*id, n.peer_urls.clone())).collect();
        (voters, nodes)
    }

    /// Raft's status for Maintenance.Status and the metrics.
    pub fn status(&self) -> RaftStatus {
        let m = self.metrics();
        let last_index = m.last_log_index.unwrap_or(0);
        RaftStatus {
            id: self.id,
            last_index,
            commit: m.cluster_committed.map_or(0, |l| l.index),
            applied_index: m.last_applied.map_or(0, |l| l.index),
            term: m.current_term,
            vote: m.vote.leader_id.voted_for,
            leader: m.current_leader.unwrap_or(0),
            is_learner: !m.membership_config.membership().voter_ids().any(|v| v == self.id),
            state: match m.state {
                openraft::ServerState::Leader => "StateLeader",
                openraft::ServerState::Candidate => "StateCandidate",
                _ => "StateFollower",
            },
            progress: m.replication.as_ref().map_or_else(Vec::new, |r| {
                r.iter()
                    .map(|(&id, l)| {
                        let held =
                            if id == self.id { last_index } else { l.map_or(0, |l| l.index) };
                        (id, held)
                    })
                    .collect()
            }),
        }
    }

    /// Adds a member (on the leader). A voter counts toward the quorum at once, as in etcd:
    /// a cluster of one adds its second member at once, and waits for it for everything
    /// after (see [`Self::change_voters`]).
    pub async fn add_member(&self, id: u64, peer_urls: Vec<String>, learner: bool) -> Result<()> {
        let deadline = Instant::now() + self.request_timeout();
        let add = self.raft.add_learner(id, PeerNode { peer_urls }, false);
        let added = bounded(deadline, add).await?;
        if learner {
            return Ok(());
        }
        // Built on the learner's entry (else the new voter is not among the nodes).
        self.change_voters(deadline, added.log_id.index, |voters, _| {
            voters.insert(id);
        })
        .await
    }

    /// Promotes a learner to voter (on the leader).
    pub async fn promote_member(&self, id: u64) -> Result<()> {
        let deadline = Instant::now() + self.request_timeout();
        self.change_voters(deadline, 0, |voters, _| {
            voters.insert(id);
        })
        .await
    }

    /// Removes a member (on the leader).
    pub async fn remove_member(&self, id: u64) -> Result<()> {
        let deadline = Instant::now() + self.request_timeout();
        if self.membership().0.contains(&id) {
            return self
                .change_voters(deadline, 0, |voters, nodes| {
                    voters.remove(&id);
                    nodes.remove(&id);
                })
                .await;
        }
        let change = ChangeMembers::RemoveNodes(BTreeSet::from([id]));
        bounded(deadline, self.raft.change_membership(change, false)).await.map(drop)
    }

    /// Changes a member's peer URLs (on the leader). The voters stay: one entry, as any
    /// change that moves no voter.
    pub async fn update_member(&self, id: u64, peer_urls: Vec<String>) -> Result<()> {
        let deadline = Instant::now() + self.request_timeout();
        let nodes = BTreeMap::from([(id, PeerNode { peer_urls })]);
        let change = ChangeMembers::SetNodes(nodes);
        bounded(deadline, self.raft.change_membership(change, false)).await.map(drop)
    }

    /// Changes the voters by one, as etcd's configuration changes do, and answers at etcd's
    /// point, by `deadline` ("request timed out", as etcd's proposals).
    ///
    /// etcd commits a configuration change with a quorum of the configuration before it: a
    /// cluster of one adds a second voter at once, though the new member has not started.
    /// openraft commits a configuration with a quorum of the configuration itself, which there
    /// is the new member too. So the change goes in as one entry (the single-server change, no
    /// joint configuration whose flattening would be left to this call), runs to its end
    /// whatever happens to this call, and is answered once a quorum of the previous voters
    /// holds it: from then on every leader to come has it (a candidate without it cannot win
    /// a quorum of the previous voters), which is what etcd's commit promises. openraft
    /// commits it as soon as the new configuration's quorum answers.
    ///
    /// The change is computed from the membership in openraft's metrics, once they show the
    /// membership entry at `after` or a later one: openraft answers for an entry (the learner
    /// `add_member` just added) before it may publish the metrics that show it.
    async fn change_voters(
        &self,
        deadline: Instant,
        after: u64,
        change: impl FnOnce(&mut BTreeSet<u64>, &mut BTreeMap<u64, PeerNode>),
    ) -> Result<()> {
        let mut metrics = self.raft.metrics();
        let observed = loop {
            let m = metrics.borrow_watched().membership_config.clone();
            if m.log_id().as_ref().map_or(0, |l| l.index) >= after {
                break m;
            }
            match tokio::time::timeout_at(deadline, metrics.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err(Error::Stopped),
                Err(_) => return Err(Error::Timeout),
            }
        };
        let old: BTreeSet<u64> = observed.membership().voter_ids().collect();
        let mut voters = old.clone();
        let mut nodes: BTreeMap<u64, PeerNode> =
            observed.membership().nodes().map(|(id, n)| (*id, n.clone())).collect();
        change(&mut voters, &mut nodes);
        let proposed = Membership::new(vec![voters.clone()], nodes).map_err(|e| {
            tracing::error!(error = %e, "raft: membership to propose is not valid");
            Error::Internal
        })?;
        // Proposed only on the membership the change was computed from.
        let guard =
            Precondition::LastMembershipLogId { last_membership_log_id: *observed.log_id() };
        let raft = self.raft.clone();
        let mut appended = tokio::spawn(async move {
            raft.append_membership(proposed, EntryPayload::Blank, [guard]).await
        });
        loop {
            tokio::select! {
                done = &mut appended => {
                    return match done {
                        Ok(r) => r.map(|_| ()).map_err(write_error),
                        Err(_) => Err(Error::Stopped),
                    };
                }
                _ = tokio::time::sleep_until(deadline) => return Err(Error::Timeout),
                _ = metrics.changed() => {}
            }
            let m = metrics.borrow_watched().clone();
            let current = &m.membership_config;
            if current.membership().voter_ids().collect::<BTreeSet<_>>() != voters {
                continue;
            }
            let Some(at) = current.log_id().as_ref().map(|l| l.index) else { continue };
            let holding = old.iter().filter(|v| matched_in(&m, **v) >= at).count();
            if holding > old.len() / 2 {
                return Ok(());
            }
        }
    }

    /// Hands leadership to `to` (on the leader) and waits until it leads.
    pub async fn transfer_leader(&self, to: u64) -> Result<()> {
        self.raft.trigger().transfer_leader(to).await.map_err(|_| Error::Stopped)?;
        let mut rx = self.role.clone();
        let wait = rx.wait_for(|r| r.leader == Some(to));
        match tokio::time::timeout(self.request_timeout(), wait).await {
            Ok(Ok(_)) => Ok(()),
            _ => Err(Error::Timeout),
        }
    }

    /// Where the log stood at the last snapshot, for [`RaftNode::snapshot_if_due`] (its
    /// caller keeps it between checks). Counted from when the log opened, not from the first
    /// check: whatever was logged before that check counts towards the next snapshot too.
    pub fn snapshot_mark(&self) -> SnapshotMark {
        SnapshotMark { logged: 0, snapshot: self.metrics().snapshot }
    }

    /// Takes a snapshot if enough was logged since the last one (`mark`, updated), so the log
    /// (and restart time) stays bounded; openraft then purges what it covers. Called by the
    /// server's snapshot loop, which checks the WAL's snapshots alike.
    pub async fn snapshot_if_due(&self, mark: &mut SnapshotMark, machine_size: u64) {
        let snap = self.metrics().snapshot;
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

/// A failed probe's innermost cause (what an operator can act on), and whether it was the TLS
/// handshake that failed (rustls' errors reach the transport as `InvalidData`), which waiting
/// does not mend.
fn probe_failure(s: &tonic::Status) -> (String, bool) {
    let mut cause = s.message().to_string();
    let mut tls = false;
    let mut next = std::error::Error::source(s);
    while let Some(e) = next {
        cause = e.to_string();
        tls |= e
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::InvalidData);
        next = e.source();
    }
    (cause, tls)
}

/// Whether a call to the leader was certainly not delivered (it never left this member, see
/// `forward::NOT_SENT`): safe to send again, a proposal too.
fn not_delivered(s: &tonic::Status) -> bool {
    s.code() == tonic::Code::Unavailable && s.message() == super::forward::NOT_SENT
}

/// What the node's metrics watch takes from the membership openraft reports.
#[derive(Debug, Default)]
struct MembershipSeen {
    /// Its members.
    nodes: BTreeSet<u64>,
    /// Whether it names this member.
    named: bool,
    /// Whether this member applied it.
    applied: bool,
}

/// Up to which index the log need not hold its entries in memory: this member applied them
/// and, on a leader, every member it replicates to has them. Only a member that falls behind
/// later asks for them again, and gets them read back from the log's files.
fn held_upto(m: &openraft::RaftMetrics<TypeConfig>) -> u64 {
    let applied = m.last_applied.map_or(0, |l| l.index);
    match &m.replication {
        Some(r) => r.values().map(|l| l.map_or(0, |l| l.index)).fold(applied, u64::min),
        None => applied,
    }
}

/// How far member `id` has replicated the log of the leader whose metrics these are (0 if
/// unknown, or not a leader's). A new entry's index is never 0, so 0 never counts as holding it.
fn matched_in(m: &openraft::RaftMetrics<TypeConfig>, id: u64) -> u64 {
    m.replication.as_ref().and_then(|r| r.get(&id).cloned()).flatten().map_or(0, |l| l.index)
}

/// A membership change's outcome by `deadline`, in etcd's terms.
async fn bounded<T>(
    deadline: Instant,
    change: impl std::future::Future<
        Output = std::result::Result<T, RaftError<TypeConfig, ClientWriteError<TypeConfig>>>,
    >,
) -> Result<T> {
    match tokio::time::timeout_at(deadline, change).await {
        Ok(r) => r.map_err(write_error),
        Err(_) => Err(Error::Timeout),
    }
}

/// A membership change's error, in etcd's terms.
fn write_error(e: RaftError<TypeConfig, ClientWriteError<TypeConfig>>) -> Error {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(_)) => Error::NotLeader,
        RaftError::APIError(ClientWriteError::LogEntryDiscarded(_)) => Error::TimeoutLeaderFail,
        RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => {
            tracing::warn!(error = %e, "raft: membership change refused");
            Error::UnhealthyCluster
        }
        RaftError::APIError(e) => {
            tracing::error!(error = %e, "raft: membership change failed");
            Error::Internal
        }
        RaftError::Fatal(_) => Error::Stopped,
    }
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
