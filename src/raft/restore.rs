//! Founding a cluster from a backup: what `etcdutl snapshot restore --initial-cluster ...`
//! does for etcd. Each member's data directory gets the same Raft snapshot, at the position a
//! freshly founded cluster starts from (the founding membership, log index 0), holding the
//! backup's state; and the member file with the ids the flags give. Started with the same
//! `--initial-cluster`, the members find a cluster that already exists, elect a leader and
//! go on from the backup's revision; nothing is replicated to found it, and every member holds
//! the same state, so every member serves the same revisions from the first request.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::Path;

use super::{CommittedLeaderId, LogId, Membership, PeerNode, SnapshotMeta, StoredMembership};
use super::{node, state_machine};
use crate::wal::segment::sync_dir;

/// Writes member `member_id`'s Raft state into `dir` (`<data-dir>/raft`, which must not hold
/// one): a snapshot of the founding membership `members` (id -> peer URLs) whose machine bytes
/// `machine` writes (as [`super::Machine::install`] reads them), then the member file, last,
/// since its presence is what makes a start resume rather than found.
pub fn write_member(
    dir: &Path,
    member_id: u64,
    cluster_id: u64,
    members: &BTreeMap<u64, Vec<String>>,
    machine: &mut dyn FnMut(&mut dyn Write) -> io::Result<()>,
) -> io::Result<()> {
    let snap = dir.join("snap");
    fs::create_dir_all(&snap)?;
    // Where openraft's `initialize` puts the founding membership.
    let first = LogId::new(CommittedLeaderId::new(0), 0);
    let voters: BTreeSet<u64> = members.keys().copied().collect();
    let nodes: BTreeMap<u64, PeerNode> =
        members.iter().map(|(id, urls)| (*id, PeerNode { peer_urls: urls.clone() })).collect();
    let membership = Membership::new(vec![voters], nodes)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
    let meta = SnapshotMeta {
        last_log_id: Some(first),
        last_membership: StoredMembership::new(Some(first), membership),
    };
    let tmp = state_machine::temp_path(&snap);
    let mut out = BufWriter::with_capacity(1 << 20, File::create(&tmp)?);
    state_machine::write_header(&mut out, &meta)?;
    machine(&mut out)?;
    out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    fs::rename(&tmp, snap.join(state_machine::file_name(&meta.last_log_id)))?;
    sync_dir(&snap)?;
    let member = node::member_file(dir);
    let mut f = File::create(&member)?;
    f.write_all(format!("{member_id:x} {cluster_id:x}\n").as_bytes())?;
    f.sync_all()?;
    sync_dir(dir)
}
