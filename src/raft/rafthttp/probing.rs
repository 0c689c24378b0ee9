//! Peer liveness (etcd's rafthttp peer status): every member probes every other member of its
//! membership once per heartbeat interval, so that each knows since when each peer has been
//! reachable (etcd's `ActiveSince`, which the membership checks and the leadership hand-over
//! read), whatever its role.
//!
//! etcd learns this from the streams every pair of its members keeps open. mem_etcd's Raft
//! traffic flows from the leader only, so without probes a follower would know nothing of the
//! other followers, and a new leader would refuse membership changes for etcd's health interval
//! (5 s) after every election, as it would have been "connected" to no one for that long.
//!
//! The probes received are the other half: a peer whose probes stop arriving cannot reach this
//! member, and Raft then sends it nothing (`network`'s module doc says why); logged here.
//!
//! A leader does not probe a follower that answered its appends within the interval: those
//! appends already serve both halves (the follower admits each one as it would a probe, and
//! their answers show the follower reachable), as etcd's heartbeats serve its members. At rest
//! that leaves the followers' probes, four calls per interval in a cluster of three where six
//! were (probes were about two thirds of an idle cluster's CPU).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::network::{Network, Peers};
use crate::proto::memetcdpb as pb;

/// Probes, every `every`, the peers of member `me` that `members` lists (with their peer URLs)
/// until it answers `None` (the node is gone). At most one probe per peer is in flight: a peer
/// that does not answer within the `election` timeout counts as unreachable. A peer that
/// refuses `me` as a removed member is passed to `removed` (every heartbeat a member missed
/// its own removal, as etcd's learns it from its peers' 410 Gone).
pub(in crate::raft) async fn run(
    peers: Arc<Peers>,
    me: u64,
    every: Duration,
    election: Duration,
    members: impl Fn() -> Option<BTreeMap<u64, Vec<String>>>,
    removed: Arc<dyn Fn(u64) + Send + Sync>,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut in_flight: HashMap<u64, tokio::task::JoinHandle<()>> = HashMap::new();
    // Peers whose calls stopped reaching this member (see `network`), to log each change once.
    let mut one_way = HashSet::new();
    loop {
        tick.tick().await;
        let Some(nodes) = members() else { return };
        in_flight.retain(|_, probe| !probe.is_finished());
        let window = Network::one_way_window(every, election);
        for (id, urls) in nodes {
            if id == me {
                continue;
            }
            let stats = peers.stats.of(id);
            if stats.silent_for(window) {
                if one_way.insert(id) {
                    tracing::warn!(
                        peer = format!("{id:x}"),
                        "raft: no call from this peer reached this member for {window:?}; \
                         sending it nothing until one does"
                    );
                }
            } else if one_way.remove(&id) {
                tracing::info!(
                    peer = format!("{id:x}"),
                    "raft: the peer reaches this member again"
                );
            }
            if in_flight.contains_key(&id) {
                continue;
            }
            if stats.answered_within(every) {
                stats.active_since.lock().get_or_insert_with(Instant::now);
                continue;
            }
            let Some(mut client) = peers.raft_client(id, &urls) else {
                *stats.active_since.lock() = None;
                continue;
            };
            let timeout = election;
            let removed = removed.clone();
            in_flight.insert(
                id,
                tokio::spawn(async move {
                    let started = Instant::now();
                    let probe = client.probe(pb::ProbeRequest { peer_urls: Vec::new() });
                    let answer = tokio::time::timeout(timeout, probe).await;
                    if let Ok(Err(status)) = &answer
                        && super::network::is_member_removed(status)
                    {
                        removed(id);
                    }
                    let answered = matches!(answer, Ok(Ok(_)));
                    let mut since = stats.active_since.lock();
                    if answered {
                        since.get_or_insert(started);
                    } else {
                        *since = None;
                    }
                }),
            );
        }
    }
}
