//! Starting this member's Raft node: opening its log and snapshots, founding a cluster or
//! joining a running one (and, without state, being re-admitted to it), and the initial
//! corruption check of a restarted member.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use openraft::error::RaftError;
use tokio::sync::watch;
use tokio::time::Instant;

use super::{NodeOptions, Raft, RaftNode, Role, request_timeout};
use crate::proto::memetcdpb as pb;
use crate::raft::log_store::{LogOptions, LogStore};
use crate::raft::rafthttp::network::{Network, Peers};
use crate::raft::state_machine::{StateMachine, StateMachineStore};
use crate::raft::types::PeerNode;
use crate::wal::Mode;

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
    // openraft's tick (its election timer's and heartbeat timer's resolution) fires every
    // 13/64 of the heartbeat by default: 50 wake-ups a second of an idle member for its tick
    // task and its core, where etcd's raft ticks once per heartbeat. Two ticks per heartbeat
    // keep the elections' timing finer than etcd's; a heartbeat falls due an eighth of an
    // interval before every second tick, so it goes out every `hb` all the same.
    let tick = (hb / 2).max(1);
    let c = openraft::Config {
        cluster_name: format!("{:x}", o.cluster_id),
        heartbeat_interval: hb - hb / 8,
        tick_interval: Some(tick),
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
    /// `machine` already holds (by [`crate::raft::restore::write_member`]: a member alone grown into
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
            let vote = crate::raft::types::Vote::new(term, opts.member_id);
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
            faults: opts.failpoint.clone().map(crate::raft::rafthttp::faults::PeerFaults::start),
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
        tokio::spawn(crate::raft::rafthttp::probing::run(
            node.peers.clone(),
            node.id,
            node.opts.heartbeat,
            node.opts.election,
            // A member without a membership yet (founding, joining, or back without its
            // state) probes the members it was started with: a leader re-admitting it sends
            // it nothing once its probes stop (`network`), and it learns the membership only
            // from what the leader sends.
            move || {
                weak.upgrade().map(|n| {
                    let (_, nodes) = n.membership();
                    if !nodes.is_empty() {
                        return nodes;
                    }
                    n.opts.initial.iter().map(|(id, m)| (*id, m.peer_urls.clone())).collect()
                })
            },
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
            crate::raft::corrupt::initial_check(&*node, timeout).await?;
            node.raft.runtime_config().elect(true);
        }
        if node.opts.corrupt_check.is_some() || node.opts.compact_hash_check.is_some() {
            let (every, compact) = (node.opts.corrupt_check, node.opts.compact_hash_check);
            tokio::spawn(crate::raft::corrupt::monitor(Arc::downgrade(&node), every, compact));
        }
        Ok(node)
    }

    /// Settles this member's id and its cluster's before anything is served: a restarted member
    /// takes the ids it stored (whatever the flags say, as etcd does), unless the cluster has
    /// since replaced it (see [`replacement`]); a member joining a
    /// running cluster (`existing`) asks the members of `--initial-cluster` for them, and is
    /// refused start-up if none answers within 30 s or none knows its peer URLs, or at once
    /// when a member refuses its TLS handshake.
    pub async fn resolve_ids(opts: &mut NodeOptions) -> std::result::Result<(), String> {
        if opts.mode != Mode::None
            && let Some((member, cluster)) = opts.dir.read_member()?
        {
            (opts.member_id, opts.cluster_id) = (member, cluster);
            if !opts.new_cluster
                && let Some(added) = replacement(opts).await
            {
                tracing::warn!(
                    removed = format!("{member:x}"),
                    member = format!("{added:x}"),
                    "raft: the cluster removed this member and added another at its peer URLs \
                     (etcdctl member remove, then member add); its old state is dropped and it \
                     joins as the new member"
                );
                // Under the data directory's lock: never the state of a member running on it.
                let data = opts.dir.data_dir();
                let failed = |e: std::io::Error| format!("{}: {e}", data.display());
                let _lock = crate::wal::lock_dir(&data).map_err(failed)?;
                data.remove_alone_state().map_err(failed)?;
                opts.dir.discard().map_err(failed)?;
                opts.member_id = added;
            }
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
                let Some(answer) = probe(&peers, *id, &m.peer_urls, &opts.peer_urls).await else {
                    continue;
                };
                match answer {
                    Ok(r) if r.your_id != 0 => {
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
    /// which case it votes again once the leader has re-admitted it (it holds the log again).
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
}

/// The member the cluster's leader lists at this restarted member's peer URLs in its place,
/// if it no longer lists this one (`--initial-cluster-state existing` only).
///
/// etcd's removed member stops for good ("the member has been permanently removed"), and an
/// operator then wipes its data directory and adds it again. k0smotron's init container does
/// the remove and the add on every restart of a member whose data directory has no etcd
/// database (`member/snap/db`, which mem_etcd does not write), then starts it with `existing`:
/// that member joins as the one added for it, as if its directory had been wiped. Only the
/// leader's word counts: a follower behind it may still list a member removed earlier at the
/// same URLs. Peers that do not answer within half a second each are passed over, so a
/// member whose cluster is down resumes as before.
async fn replacement(opts: &NodeOptions) -> Option<u64> {
    use crate::raft::rafthttp::network::is_member_removed;
    let me = Peers::new(opts.cluster_id, opts.member_id, opts.tls.clone(), opts.election);
    let anonymous = Peers::new(0, 0, opts.tls.clone(), opts.election);
    for (id, m) in &opts.initial {
        if m.peer_urls == opts.peer_urls {
            continue;
        }
        let answer = match probe(&me, *id, &m.peer_urls, &opts.peer_urls).await {
            Some(Ok(r)) => r,
            // A peer that saw the removal refuses this member's id: asked again by a stranger,
            // it says who has the URLs now.
            Some(Err(s)) if is_member_removed(&s) => {
                match probe(&anonymous, *id, &m.peer_urls, &opts.peer_urls).await {
                    Some(Ok(r)) => r,
                    _ => continue,
                }
            }
            _ => continue,
        };
        if answer.leader == 0 || answer.leader != answer.member_id {
            continue;
        }
        let replaced = answer.cluster_id == opts.cluster_id
            && !answer.knows_you
            && answer.your_id != 0
            && answer.your_id != opts.member_id;
        return replaced.then_some(answer.your_id);
    }
    None
}

/// Asks the member `id` at `urls` what it knows of the member with peer URLs `mine`, within
/// half a second (`None`: no client could be made for `urls`).
async fn probe(
    peers: &Peers,
    id: u64,
    urls: &[String],
    mine: &[String],
) -> Option<Result<pb::ProbeResponse, tonic::Status>> {
    let mut c = peers.raft_client(id, urls)?;
    let mut req = tonic::Request::new(pb::ProbeRequest { peer_urls: mine.to_vec() });
    req.set_timeout(Duration::from_millis(500));
    Some(c.probe(req).await.map(tonic::Response::into_inner))
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
