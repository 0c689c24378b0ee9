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
//! that leaves the followers' probes, four per interval in a cluster of three where six were
//! (probes were about two thirds of an idle cluster's CPU).
//!
//! A probe is a frame on a `Probe` stream of its own to the peer (`stream`), kept open from one
//! probe to the next, as etcd's streams are: a frame written and an answer read, where a gRPC
//! call cost a task on each side, HTTP/2's framing and the channel's hops.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::network::{Network, PeerCounters, Peers};
use super::stream::{self, Incoming, Outgoing};

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
    let mut links: HashMap<u64, Link> = HashMap::new();
    // Peers whose calls stopped reaching this member (see `network`), to log each change once.
    let mut one_way = HashSet::new();
    loop {
        tick.tick().await;
        let Some(nodes) = members() else { return };
        // A peer gone from the membership, or moved to other URLs, loses its link.
        links.retain(|id, l| nodes.get(id) == Some(&l.urls));
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
            if stats.answered_within(every) {
                stats.active_since.lock().get_or_insert_with(Instant::now);
                continue;
            }
            let link = links.entry(id).or_insert_with(|| {
                Link::start(peers.clone(), id, urls, stats, election, removed.clone())
            });
            // A probe still in flight takes this one's place (`Notify` keeps one permit).
            link.due.notify_one();
        }
    }
}

/// The task that probes one peer, on a `Probe` stream it keeps open between probes.
struct Link {
    /// The peer URLs the stream was dialed to.
    urls: Vec<String>,
    /// Set when a probe is due; the task sends one when it is not waiting for an answer.
    due: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Link {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Link {
    fn start(
        peers: Arc<Peers>,
        id: u64,
        urls: Vec<String>,
        stats: Arc<PeerCounters>,
        timeout: Duration,
        removed: Arc<dyn Fn(u64) + Send + Sync>,
    ) -> Self {
        let due = Arc::new(Notify::new());
        let task = tokio::spawn({
            let (due, urls) = (due.clone(), urls.clone());
            async move {
                let mut open: Option<(Outgoing, Incoming)> = None;
                loop {
                    due.notified().await;
                    let started = Instant::now();
                    let answer =
                        tokio::time::timeout(timeout, probe(&peers, &urls, &mut open)).await;
                    if let Ok(Err(status)) = &answer
                        && super::network::is_member_removed(status)
                    {
                        removed(id);
                    }
                    let answered = matches!(answer, Ok(Ok(())));
                    let mut since = stats.active_since.lock();
                    if answered {
                        since.get_or_insert(started);
                    } else {
                        // Opened again for the next probe: a late answer must not be read as
                        // that one's.
                        open = None;
                        *since = None;
                    }
                }
            }
        });
        Link { urls, due, task }
    }
}

/// One probe of the peer at `urls`, on the stream `open` (opened first if it is not).
async fn probe(
    peers: &Peers,
    urls: &[String],
    open: &mut Option<(Outgoing, Incoming)>,
) -> Result<(), tonic::Status> {
    if open.is_none() {
        let io = peers.dial(urls).await.map_err(|e| tonic::Status::unavailable(e.to_string()))?;
        let opened = stream::open(io, stream::PROBE_PATH, peers.cluster_id, peers.member_id).await;
        *open = Some(opened.map_err(stream::NotOpened::status)?);
    }
    let (out, answers) = open.as_mut().expect("opened");
    stream::probe(out, answers).await
}
