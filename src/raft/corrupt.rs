//! etcd's initial corruption check (the InitialCorruptCheck feature gate, formerly
//! `--experimental-initial-corrupt-check`): a member restarting on its data, before it takes
//! part in its cluster, asks every peer for the hash of its store at this member's revision
//! (over the peer URL, as etcd's `/members/hashkv`) and refuses to start if a peer that has
//! compacted to the same revision has a different hash. A peer that cannot answer (down, behind,
//! compacted past that revision, of another cluster) is logged and passed over, as in etcd.

use std::collections::BTreeMap;
use std::time::Duration;

use super::network::Peers;
use super::state_machine::Machine;
use crate::error::Error;
use crate::proto::etcdserverpb as epb;

/// The check of member `id`, whose store is `machine`, against the peers `members` lists (every
/// member's peer URLs, by id); an error (in etcd's words) when its data differs from a peer's.
pub async fn initial_check(
    id: u64,
    machine: &dyn Machine,
    peers: &Peers,
    members: impl Fn() -> BTreeMap<u64, Vec<String>>,
    timeout: Duration,
) -> Result<(), String> {
    let me_id = id;
    let me = format!("{me_id:x}");
    tracing::info!(local_member_id = %me, ?timeout, "starting initial corruption check");
    let (hash, rev, compact) =
        machine.hash_kv(0).map_err(|e| format!("{me} failed to fetch hash ({e})"))?;
    // The membership openraft recovered from the snapshot and the log (published as it starts).
    let start = tokio::time::Instant::now();
    let mut known = members();
    while known.is_empty() && start.elapsed() < timeout {
        tokio::time::sleep(Duration::from_millis(20)).await;
        known = members();
    }
    let mut mismatch = 0;
    for (id, urls) in known.iter().filter(|(id, _)| **id != me_id) {
        let peer = format!("{id:x}");
        let Some(mut client) = peers.raft_client(*id, urls) else { continue };
        let mut req = tonic::Request::new(epb::HashKvRequest { revision: rev });
        req.set_timeout(timeout);
        let answer = tokio::time::timeout(timeout, client.hash_kv(req)).await;
        let r = match answer {
            Ok(Ok(r)) => r.into_inner(),
            Ok(Err(status)) => {
                let endpoint = urls.first().cloned().unwrap_or_default();
                tracing::warn!(
                    local_member_id = %me,
                    requested_revision = rev,
                    remote_peer_endpoint = %endpoint,
                    error = %status.message(),
                    "failed hash kv request"
                );
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
                    tracing::warn!(
                        local_member_id = %me,
                        local_member_revision = rev,
                        local_member_compact_revision = compact,
                        local_member_hash = hash,
                        remote_peer_id = %peer,
                        remote_peer_endpoints = ?urls,
                        "{why}"
                    );
                }
                continue;
            }
            Err(_) => {
                let endpoint = urls.first().cloned().unwrap_or_default();
                tracing::warn!(
                    local_member_id = %me,
                    requested_revision = rev,
                    remote_peer_endpoint = %endpoint,
                    error = "context deadline exceeded",
                    "failed hash kv request"
                );
                continue;
            }
        };
        if r.hash == hash {
            continue;
        }
        let same_compaction = r.compact_revision == compact;
        let what = if same_compaction {
            mismatch += 1;
            "found different hash values from remote peer"
        } else {
            "found different compact revision values from remote peer"
        };
        tracing::warn!(
            local_member_id = %me,
            local_member_revision = rev,
            local_member_compact_revision = compact,
            local_member_hash = hash,
            remote_peer_id = %peer,
            remote_peer_endpoints = ?urls,
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
