//! etcd's corruption checks: members compare the hashes of their stores (Maintenance.HashKV,
//! asked over the peer URL as etcd's `/members/hashkv`). Every member applies the same requests
//! in the same order, so two members' hashes of one revision differ only if one's store went
//! wrong (a disk, memory or a bug).
//!
//! - The initial check (the InitialCorruptCheck feature gate, formerly
//!   `--experimental-initial-corrupt-check`): a member restarting on its data, before it takes
//!   part in its cluster, asks every peer for the hash at its own revision and refuses to start
//!   if a peer that compacted to the same revision has another.
//! - The periodic check (`--corrupt-check-time`): the leader hashes its store, asks every peer
//!   for the hash at that revision, confirms it still leads (a read index), and raises the
//!   CORRUPT alarm for a member whose hash differs at the same compaction revision, or that is
//!   ahead of the leader. The alarm goes through the log, so every member refuses writes until
//!   an operator disarms it.
//! - The compaction check (the CompactHashCheck gate, every `--compact-hash-check-time`): the
//!   leader compares the hashes of the last compaction revision, a revision every member has
//!   settled; the members outside a majority that agrees get the alarm (member 0 when no
//!   majority agrees).
//!
//! A peer that cannot answer (down, behind, compacted past the revision, of another cluster) is
//! logged and passed over, as in etcd.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Weak;
use std::time::Duration;

use bytes::Bytes;
use prost::Message;

use super::rafthttp::network::RaftClient;
use super::state_machine::KvHash;
use crate::error::Error;
use crate::proto::etcdserverpb as epb;
use crate::proto::memetcdpb as mpb;

/// What the checks need of a member (etcd's `Hasher`); the Raft node is one.
pub trait Hasher: Send + Sync + 'static {
    /// This member's id.
    fn member_id(&self) -> u64;
    /// Its store's hash at `rev` (0: the current revision).
    fn hash(&self, rev: i64) -> crate::error::Result<KvHash>;
    /// Every member's peer URLs, by id.
    fn members(&self) -> BTreeMap<u64, Vec<String>>;
    /// A client of member `id`'s peer service.
    fn peer(&self, id: u64, urls: &[String]) -> Option<RaftClient>;
    fn is_leader(&self) -> bool;
    fn request_timeout(&self) -> Duration;
    /// Returns once this member has applied every write committed before the call.
    fn linearizable(&self) -> impl Future<Output = Result<(), Error>> + Send;
    /// Proposes `request` (a `memetcdpb.Request`) through the log.
    fn propose(&self, request: Bytes) -> impl Future<Output = Result<(), Error>> + Send;
}

/// A peer's HashKV answer, or `None` (logged) when it could not give one.
type PeerHash = (u64, Option<epb::HashKvResponse>);

/// The response metadata in which a peer's HashKV answer carries its [`KvHash::floors`].
pub const FLOORS_KEY: &str = "mem-etcd-floors";

/// Asks every peer for the hash of its store at `rev`, one after another, each within
/// `timeout`. `skipped` logs why a peer that answered with an error was passed over. A peer
/// whose prefixes compacted on their own (tenants') are not `floors` (this member's, as hashed)
/// has applied more or fewer of those compactions, which change the hash of a revision
/// without changing the compaction revision: it is passed over, as one of another compaction
/// revision would be.
async fn peer_hashes(
    node: &impl Hasher,
    rev: i64,
    floors: u64,
    timeout: Duration,
    skipped: impl Fn(u64, &[String], &str),
) -> Vec<PeerHash> {
    let me = format!("{:x}", node.member_id());
    let members = node.members();
    let mut out = Vec::new();
    for (id, urls) in members.iter().filter(|(id, _)| **id != node.member_id()) {
        let Some(mut client) = node.peer(*id, urls) else {
            out.push((*id, None));
            continue;
        };
        let endpoint = urls.first().cloned().unwrap_or_default();
        let mut req = tonic::Request::new(epb::HashKvRequest { revision: rev });
        req.set_timeout(timeout);
        let error = match tokio::time::timeout(timeout, client.hash_kv(req)).await {
            Ok(Ok(r)) => {
                let theirs = r.metadata().get(FLOORS_KEY).and_then(|v| v.to_str().ok());
                if theirs.and_then(|v| v.parse::<u64>().ok()).unwrap_or(0) != floors {
                    tracing::info!(
                        remote_peer_id = %format!("{id:x}"),
                        "peer's prefix compactions differ from this member's; hash not compared"
                    );
                    out.push((*id, None));
                } else {
                    out.push((*id, Some(r.into_inner())));
                }
                continue;
            }
            Ok(Err(status)) => {
                let why = match Error::from_message(status.message()) {
                    Some(Error::FutureRev) => Some("cannot fetch hash from slow remote peer"),
                    Some(Error::Compacted) => {
                        Some("cannot fetch hash from remote peer; local member is behind")
                    }
                    _ if status.code() == tonic::Code::FailedPrecondition => {
                        Some("cluster ID mismatch")
                    }
                    _ => None,
                };
                if let Some(why) = why {
                    skipped(*id, urls, why);
                }
                status.message().to_string()
            }
            Err(_) => "context deadline exceeded".to_string(),
        };
        tracing::warn!(
            local_member_id = %me,
            requested_revision = rev,
            remote_peer_endpoint = %endpoint,
            %error,
            "failed hash kv request"
        );
        out.push((*id, None));
    }
    out
}

/// The initial check; an error (in etcd's words) when this member's data differs from a peer's.
pub async fn initial_check(node: &impl Hasher, timeout: Duration) -> Result<(), String> {
    let me = format!("{:x}", node.member_id());
    tracing::info!(local_member_id = %me, ?timeout, "starting initial corruption check");
    let h = node.hash(0).map_err(|e| format!("{me} failed to fetch hash ({e})"))?;
    // The membership openraft recovered from the snapshot and the log (published as it starts).
    let start = tokio::time::Instant::now();
    while node.members().is_empty() && start.elapsed() < timeout {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let skipped = |id: u64, urls: &[String], why: &str| {
        tracing::warn!(
            local_member_id = %me,
            local_member_revision = h.hash_revision,
            local_member_compact_revision = h.compact_revision,
            local_member_hash = h.hash,
            remote_peer_id = %format!("{id:x}"),
            remote_peer_endpoints = ?urls,
            "{why}"
        );
    };
    let mut mismatch = 0;
    for (id, r) in peer_hashes(node, h.hash_revision, h.floors, timeout, skipped).await {
        let Some(r) = r else { continue };
        if r.hash == h.hash {
            continue;
        }
        let what = if r.compact_revision == h.compact_revision {
            mismatch += 1;
            "found different hash values from remote peer"
        } else {
            "found different compact revision values from remote peer"
        };
        tracing::warn!(
            local_member_id = %me,
            local_member_revision = h.hash_revision,
            local_member_compact_revision = h.compact_revision,
            local_member_hash = h.hash,
            remote_peer_id = %format!("{id:x}"),
            remote_peer_revision = r.header.as_ref().map_or(0, |h| h.revision),
            remote_peer_compact_revision = r.compact_revision,
            remote_peer_hash = r.hash,
            "{what}"
        );
    }
    if mismatch > 0 {
        let e = format!("{me} found data inconsistency with peers");
        tracing::error!(error = %e, "checkInitialHashKV failed");
        return Err(e);
    }
    tracing::info!(local_member_id = %me, "initial corruption checking passed; no corruption");
    Ok(())
}

/// Runs the periodic check every `every` and the compaction check every `compact_every` (each
/// when given) while this member leads, until the node is dropped.
pub async fn monitor<H: Hasher>(
    node: Weak<H>,
    every: Option<Duration>,
    compact_every: Option<Duration>,
) {
    if let Some(t) = every {
        let id = node.upgrade().map_or(0, |n| n.member_id());
        tracing::info!(local_member_id = %format!("{id:x}"), interval = ?t, "enabled corruption checking");
    }
    let far = Duration::from_secs(365 * 24 * 3600);
    let now = tokio::time::Instant::now();
    let mut periodic = tokio::time::interval_at(now + every.unwrap_or(far), every.unwrap_or(far));
    let mut compact =
        tokio::time::interval_at(now + compact_every.unwrap_or(far), compact_every.unwrap_or(far));
    // The compaction revision last checked on every member (etcd's latestRevisionChecked).
    let mut compact_checked = 0;
    loop {
        let periodic_due = tokio::select! {
            _ = periodic.tick() => true,
            _ = compact.tick() => false,
        };
        let Some(node) = node.upgrade() else { return };
        if !node.is_leader() {
            continue;
        }
        if periodic_due {
            if let Err(e) = periodic_check(&*node).await {
                tracing::warn!(error = %e, "failed to check hash KV");
            }
        } else {
            compact_hash_check(&*node, &mut compact_checked).await;
        }
    }
}

/// One periodic check (etcd's `PeriodicCheck`), on the leader.
async fn periodic_check(node: &impl Hasher) -> Result<(), Error> {
    let timeout = node.request_timeout();
    let h = node.hash(0)?;
    let peers = peer_hashes(node, h.hash_revision, h.floors, timeout, |_, _, _| {}).await;
    // Every write acknowledged before the peers answered is applied here now: no peer can be
    // ahead of what the leader then holds, and the leader's own hash must not have changed.
    node.linearizable().await?;
    let h2 = node.hash(0)?;
    let mut corrupt = None;
    if h2.hash != h.hash
        && h2.hash_revision == h.hash_revision
        && h2.compact_revision == h.compact_revision
        && h2.floors == h.floors
    {
        tracing::warn!(
            revision_1 = h.hash_revision,
            compact_revision_1 = h.compact_revision,
            hash_1 = h.hash,
            revision_2 = h2.hash_revision,
            compact_revision_2 = h2.compact_revision,
            hash_2 = h2.hash,
            "found hash mismatch"
        );
        corrupt.get_or_insert(node.member_id());
    }
    let mut checked = 0;
    for (id, r) in &peers {
        let Some(r) = r else { continue };
        checked += 1;
        let peer = format!("{id:x}");
        let revision = r.header.as_ref().map_or(0, |h| h.revision);
        if revision > h2.revision {
            tracing::warn!(
                leader_revision = h2.revision,
                follower_revision = revision,
                follower_peer_id = %peer,
                "revision from follower must be less than or equal to leader's"
            );
            corrupt.get_or_insert(*id);
        }
        if r.compact_revision > h2.compact_revision {
            tracing::warn!(
                leader_compact_revision = h2.compact_revision,
                follower_compact_revision = r.compact_revision,
                follower_peer_id = %peer,
                "compact revision from follower must be less than or equal to leader's"
            );
            corrupt.get_or_insert(*id);
        }
        if r.compact_revision == h.compact_revision && r.hash != h.hash {
            tracing::warn!(
                leader_compact_revision = h2.compact_revision,
                leader_hash = h.hash,
                follower_compact_revision = r.compact_revision,
                follower_hash = r.hash,
                follower_peer_id = %peer,
                "same compact revision then hashes must match"
            );
            corrupt.get_or_insert(*id);
        }
    }
    if let Some(id) = corrupt {
        raise_alarm(node, id).await;
    }
    tracing::info!(number_of_peers_checked = checked, "finished peer corruption check");
    Ok(())
}

/// One compaction check (etcd's `CompactHashCheck`), on the leader: the hashes of the last
/// compaction revision, once per compaction.
async fn compact_hash_check(node: &impl Hasher, checked: &mut i64) {
    let me = node.member_id();
    tracing::info!(local_member_id = %format!("{me:x}"), timeout = ?node.request_timeout(), "starting compact hash check");
    let at = match node.hash(0) {
        Ok(h) => h.compact_revision,
        Err(_) => return,
    };
    if at == 0 || at <= *checked {
        tracing::info!(number_of_hashes_checked = 0, "finished compaction hash check");
        return;
    }
    let Ok(h) = node.hash(at) else { return };
    let peers = peer_hashes(node, at, h.floors, node.request_timeout(), |_, _, _| {}).await;
    let mut groups: BTreeMap<u32, Vec<u64>> = BTreeMap::from([(h.hash, vec![me])]);
    let mut answered = 0;
    for (id, r) in &peers {
        let reason = match r {
            None => "no response".to_string(),
            Some(r) if r.compact_revision != h.compact_revision => format!(
                "the peer's CompactRevision {} doesn't match leader's CompactRevision {}",
                r.compact_revision, h.compact_revision
            ),
            Some(r) => {
                answered += 1;
                groups.entry(r.hash).or_default().push(*id);
                continue;
            }
        };
        tracing::warn!(
            number_of_peers = peers.len(),
            leader_id = %format!("{me:x}"),
            peer_id = %format!("{id:x}"),
            %reason,
            "Skipped peer's hash"
        );
    }
    if groups.len() == 1 {
        if answered == peers.len() {
            tracing::info!(
                number_of_peers_checked = answered,
                revision = at,
                compact_revision = h.compact_revision,
                "successfully checked hash on whole cluster"
            );
            *checked = at;
        } else {
            tracing::warn!(
                number_of_peers_checked = answered,
                number_of_peers = peers.len(),
                revision = at,
                compact_revision = h.compact_revision,
                "skipped revision in compaction hash check; was not able to check all peers"
            );
        }
        tracing::info!(number_of_hashes_checked = 1, "finished compaction hash check");
        return;
    }
    // The members outside a majority (of the peers and the leader) that agrees are the corrupt
    // ones; without such a majority nobody can tell which, and the alarm is raised for the
    // cluster (member 0).
    let quorum = peers.len().div_ceil(2) + 1;
    let majority = groups.iter().find(|(_, m)| m.len() >= quorum).map(|(hash, _)| *hash);
    if majority.is_none() {
        tracing::error!(
            leader_id = %format!("{me:x}"),
            leader_revision = at,
            leader_compact_revision = h.compact_revision,
            leader_hash = h.hash,
            "Detected compaction hash mismatch but cannot identify the corrupted members, so \
             intentionally set the memberID as 0"
        );
        raise_alarm(node, 0).await;
    }
    for (hash, members) in groups.iter().filter(|(hash, _)| Some(**hash) != majority) {
        if majority.is_some() {
            for id in members {
                raise_alarm(node, *id).await;
            }
        }
        let ids: Vec<String> = members.iter().map(|id| format!("{id:x}")).collect();
        tracing::error!(
            leader_id = %format!("{me:x}"),
            leader_revision = at,
            leader_compact_revision = h.compact_revision,
            leader_hash = h.hash,
            peer_hash = hash,
            peer_ids = ?ids,
            quorum_exist = majority.is_some(),
            "Detected compaction hash mismatch"
        );
    }
    *checked = at;
    tracing::info!(number_of_hashes_checked = 1, "finished compaction hash check");
}

/// Proposes the CORRUPT alarm for `member` (0: the whole cluster), so that every member raises
/// it in log order and refuses writes.
async fn raise_alarm(node: &impl Hasher, member: u64) {
    let request = mpb::Request {
        request: Some(mpb::request::Request::Alarm(epb::AlarmRequest {
            action: epb::alarm_request::AlarmAction::Activate as i32,
            member_id: member,
            alarm: epb::AlarmType::Corrupt as i32,
        })),
        header: None,
    };
    if let Err(e) = node.propose(request.encode_to_vec().into()).await {
        tracing::warn!(member = %format!("{member:x}"), error = %e, "could not raise the CORRUPT alarm");
    }
}
