//! Founding a cluster from a state held outside Raft: the member's `<data-dir>/raft` gets a
//! Raft snapshot of that state and of the founding membership, and the member file. Three
//! callers found this way:
//!
//! - `mem_etcd snapshot restore --initial-cluster ...` (what `etcdutl snapshot restore` does
//!   for etcd): each member's data directory gets the same snapshot, at the position a freshly
//!   founded cluster starts from (log index 0), holding the backup's state. Started with the
//!   same `--initial-cluster`, the members find a cluster that already exists, elect a leader
//!   and go on from the backup's revision; nothing is replicated to found it.
//! - A member alone growing into a cluster of itself (`etcdserver::grow`), from the state it
//!   serves.
//! - `--force-new-cluster` (`etcdserver::bootstrap::force_new_cluster`): a cluster member's own committed
//!   state ([`replay_committed`]) becomes a cluster of itself alone, at the log position it
//!   had reached, its Raft state replaced as a whole ([`replace_member`], [`settle`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::Path;

use openraft::EntryPayload;

use super::state_machine::StateMachine;
use super::types::{
    CommittedLeaderId, LogId, Membership, PeerNode, SnapshotMeta, StoredMembership,
};
use super::{log_store, state_machine};
use crate::data_dir::{RaftDir, sync_dir};

/// Where openraft's `initialize` puts the founding membership: the position of a cluster
/// founded from nothing but the snapshot.
pub fn founding() -> LogId {
    LogId::new(CommittedLeaderId::new(0), 0)
}

/// Writes member `member_id`'s Raft state into `dir` (`<data-dir>/raft`, which must not hold one):
/// a snapshot at log position `at` of the founding membership `members` (id -> peer URLs) whose
/// machine bytes `machine` writes (as [`super::StateMachine::install`] reads them), then the member
/// file, last, since its presence is what makes a start resume rather than found.
pub fn write_member(
    dir: &RaftDir,
    member_id: u64,
    cluster_id: u64,
    members: &BTreeMap<u64, Vec<String>>,
    at: LogId,
    machine: &mut dyn FnMut(&mut dyn Write) -> io::Result<()>,
) -> io::Result<()> {
    let snap = dir.snapshots();
    fs::create_dir_all(&snap)?;
    let voters: BTreeSet<u64> = members.keys().copied().collect();
    let nodes: BTreeMap<u64, PeerNode> =
        members.iter().map(|(id, urls)| (*id, PeerNode { peer_urls: urls.clone() })).collect();
    let membership = Membership::new(vec![voters], nodes)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
    let meta = SnapshotMeta {
        last_log_id: Some(at),
        last_membership: StoredMembership::new(Some(at), membership),
    };
    let tmp = state_machine::temp_path(&snap);
    let mut out = BufWriter::with_capacity(1 << 20, File::create(&tmp)?);
    state_machine::write_header(&mut out, &meta)?;
    machine(&mut out)?;
    out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    fs::rename(&tmp, snap.join(state_machine::file_name(&meta.last_log_id)))?;
    sync_dir(&snap)?;
    dir.write_member(member_id, cluster_id)
}

/// What a member's committed state is, as [`replay_committed`] rebuilt it.
#[derive(Debug)]
pub struct Replayed {
    /// The log position of the last entry applied (the newest snapshot's, if no entry after
    /// it was committed; `None` if the member had nothing).
    pub applied: Option<LogId>,
    /// The newest term this member knew (its vote's): a new cluster's first election must
    /// take a later one.
    pub term: u64,
    /// The membership in force at `applied`.
    pub membership: Membership,
    /// Entries in the log past `applied`: not known to be committed, so dropped.
    pub discarded: u64,
}

/// Rebuilds in `machine` the state member `dir` (`<data-dir>/raft`) had committed: its newest
/// snapshot, then every entry of its log after it up to the committed log id the log holds,
/// as a restart applies them before it hears from anyone. Entries after that are not known to
/// be committed (they may be a deposed leader's, never acknowledged) and are left out, as etcd
/// leaves out the entries past the commit index of its WAL's hard state when it forces a new
/// cluster. The files are only read.
pub fn replay_committed(dir: &RaftDir, machine: &dyn StateMachine) -> io::Result<Replayed> {
    let log = log_store::read_local(&dir.log())?;
    let mut applied = None;
    let mut membership = Membership::default();
    let snap = dir.snapshots();
    if let Some(path) = snap.exists().then(|| state_machine::newest(&snap)).transpose()?.flatten() {
        let (meta, offset) = state_machine::open_snapshot(&path)?;
        machine.install(&path, offset)?;
        applied = meta.last_log_id;
        membership = meta.last_membership.membership().clone();
    }
    // openraft may have applied up to the snapshot without saving a newer committed id.
    let committed = log.committed.max(applied);
    let mut discarded = 0;
    let next_of = |l: Option<LogId>| l.map_or(0, |l| l.index + 1);
    for e in &log.entries {
        if e.log_id.index < next_of(applied) {
            continue;
        }
        if e.log_id.index >= next_of(committed) {
            discarded += 1;
            continue;
        }
        let next = next_of(applied);
        if e.log_id.index != next {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "raft log {}: entry {} follows {next}: the entries between are missing",
                    dir.display(),
                    e.log_id.index
                ),
            ));
        }
        match &e.payload {
            EntryPayload::Normal(p) => {
                machine.apply(&p.0, false);
            }
            EntryPayload::Membership(m) => membership = m.clone(),
            EntryPayload::Blank => {}
        }
        applied = Some(e.log_id);
    }
    if next_of(committed) > next_of(applied) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "raft log {}: committed up to {} but the log ends at {}",
                dir.display(),
                committed.map_or(0, |l| l.index),
                applied.map_or(0, |l| l.index)
            ),
        ));
    }
    let term =
        log.vote.map_or(0, |v| v.leader_id.term).max(applied.map_or(0, |l| l.leader_id.term));
    Ok(Replayed { applied, term, membership, discarded })
}

/// [`write_member`] in place of the Raft state `dir` holds, crash-safely: the new state is
/// written beside it in full (member file last), then takes its place by two renames; at every
/// moment a start finds one complete state, the old or the new, once [`settle`] has run.
pub fn replace_member(
    dir: &RaftDir,
    member_id: u64,
    cluster_id: u64,
    members: &BTreeMap<u64, Vec<String>>,
    at: LogId,
    machine: &mut dyn FnMut(&mut dyn Write) -> io::Result<()>,
) -> io::Result<()> {
    let (new, old) = (dir.beside(".new"), dir.beside(".old"));
    for leftover in [new.path(), old.path()] {
        if leftover.exists() {
            fs::remove_dir_all(leftover)?;
        }
    }
    write_member(&new, member_id, cluster_id, members, at, machine)?;
    let parent = dir.path().parent().unwrap_or(Path::new("."));
    fs::rename(dir.path(), old.path())?;
    fs::rename(new.path(), dir.path())?;
    sync_dir(parent)?;
    fs::remove_dir_all(old.path())
}

/// At start, before anything reads `dir` (`<data-dir>/raft`): finishes a [`replace_member`] a
/// crash interrupted after the new state was complete, or drops the unfinished new state (the
/// old one is still in place); then removes what is left of the replaced one.
pub fn settle(dir: &RaftDir) -> io::Result<()> {
    let (new, old) = (dir.beside(".new"), dir.beside(".old"));
    let parent = dir.path().parent().unwrap_or(Path::new("."));
    if !dir.path().exists() {
        let from = if new.has_member() { &new } else { &old };
        if from.path().exists() {
            tracing::warn!(
                from = %from.display(),
                "raft: finishing a replacement of this member's Raft state that a crash interrupted"
            );
            fs::rename(from.path(), dir.path())?;
            sync_dir(parent)?;
        }
    }
    for leftover in [new.path(), old.path()] {
        if leftover.exists() {
            fs::remove_dir_all(leftover)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use openraft::storage::{IOFlushed, RaftLogStorage};
    use parking_lot::Mutex;

    use super::*;
    use crate::data_dir::DataDir;
    use crate::raft::log_store::{DEFAULT_KEEP_IN_MEMORY, LogOptions, LogStore};
    use crate::raft::{Entry, Proposal, SnapshotJob, TypeConfig, Vote};
    use crate::wal::Mode;

    /// Records what it is asked to do.
    #[derive(Debug, Default)]
    struct Recorder(Mutex<Vec<String>>);

    impl StateMachine for Recorder {
        fn apply(&self, request: &[u8], _answer: bool) -> Bytes {
            self.0.lock().push(String::from_utf8_lossy(request).into_owned());
            Bytes::new()
        }
        fn snapshot(&self) -> Box<dyn SnapshotJob> {
            unreachable!("not snapshotted here")
        }
        fn install(&self, path: &Path, offset: u64) -> io::Result<()> {
            let bytes = fs::read(path)?;
            let machine = String::from_utf8_lossy(&bytes[offset as usize..]).into_owned();
            self.0.lock().push(format!("install {machine}"));
            Ok(())
        }
        fn hash_kv(&self, _rev: i64) -> crate::error::Result<crate::raft::KvHash> {
            unreachable!("not hashed here")
        }
    }

    fn id(term: u64, index: u64) -> LogId {
        LogId::new(CommittedLeaderId::new(term), index)
    }

    fn normal(term: u64, index: u64, data: &'static str) -> Entry {
        Entry { log_id: id(term, index), payload: EntryPayload::Normal(Proposal(data.into())) }
    }

    fn three() -> Membership {
        let nodes = (1..=3).map(|i| (i, PeerNode { peer_urls: vec![format!("http://m{i}")] }));
        Membership::new(vec![BTreeSet::from([1, 2, 3])], nodes.collect::<BTreeMap<_, _>>()).unwrap()
    }

    /// A member's log: the founding membership, then `a`..`e` at 1..=5, committed up to 3.
    async fn member_log(dir: &RaftDir) {
        use openraft::type_config::TypeConfigExt;
        let opts = LogOptions {
            dir: dir.log(),
            mode: Mode::Buffered,
            segment_bytes: 1 << 20,
            flush_interval: std::time::Duration::from_millis(5),
            keep_in_memory: DEFAULT_KEEP_IN_MEMORY,
        };
        let mut log = LogStore::open(&opts).unwrap();
        log.save_vote(&Vote::new_committed(4, 2)).await.unwrap();
        let mut entries =
            vec![Entry { log_id: id(1, 0), payload: EntryPayload::Membership(three()) }];
        entries.extend([
            normal(1, 1, "a"),
            normal(2, 2, "b"),
            normal(2, 3, "c"),
            normal(4, 4, "d"),
            normal(4, 5, "e"),
        ]);
        let (tx, rx) = TypeConfig::oneshot();
        log.append(entries, IOFlushed::signal(tx)).await.unwrap();
        rx.await.unwrap().unwrap();
        log.save_committed(Some(id(2, 3))).await.unwrap();
        log.close();
    }

    #[tokio::test]
    async fn a_member_replays_what_it_had_committed_and_drops_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let raft = DataDir::new(dir.path()).raft();
        member_log(&raft).await;
        let m = Recorder::default();
        let r = replay_committed(&raft, &m).unwrap();
        assert_eq!(*m.0.lock(), ["a", "b", "c"]);
        assert_eq!((r.applied, r.term, r.discarded), (Some(id(2, 3)), 4, 2));
        assert_eq!(r.membership, three());
        // With a snapshot at 2: the snapshot, then what follows it up to the committed id.
        let members = BTreeMap::from([(2, vec!["http://m2".to_string()])]);
        write_member(&raft, 2, 9, &members, id(2, 2), &mut |out| out.write_all(b"S")).unwrap();
        let m = Recorder::default();
        let r = replay_committed(&raft, &m).unwrap();
        assert_eq!(*m.0.lock(), ["install S", "c"]);
        assert_eq!((r.applied, r.discarded), (Some(id(2, 3)), 2));
        assert_eq!(r.membership.voter_ids().collect::<Vec<_>>(), [2]);
    }

    #[tokio::test]
    async fn a_replaced_state_survives_a_crash_at_any_step() {
        let dir = tempfile::tempdir().unwrap();
        let raft = DataDir::new(dir.path()).raft();
        member_log(&raft).await;
        raft.write_member(2, 9).unwrap();
        let me = BTreeMap::from([(2, vec!["http://m2".to_string()])]);
        let mut write = |out: &mut dyn Write| out.write_all(b"N");
        replace_member(&raft, 2, 9, &me, id(2, 3), &mut write).unwrap();
        let (new, old) = (raft.beside(".new"), raft.beside(".old"));
        assert!(raft.has_member() && !new.path().exists() && !old.path().exists());
        let replaced = |raft: &RaftDir| {
            let m = Recorder::default();
            let r = replay_committed(raft, &m).unwrap();
            assert_eq!(*m.0.lock(), ["install N"]);
            r.applied
        };
        assert_eq!(replaced(&raft), Some(id(2, 3)));
        // A crash between the two renames: the new state is complete and takes the place.
        fs::rename(raft.path(), new.path()).unwrap();
        fs::create_dir_all(old.path()).unwrap();
        settle(&raft).unwrap();
        assert!(raft.has_member() && !new.path().exists() && !old.path().exists());
        assert_eq!(replaced(&raft), Some(id(2, 3)));
        // A crash while the new state was written: the old one stays.
        fs::create_dir_all(new.snapshots()).unwrap();
        settle(&raft).unwrap();
        assert!(raft.has_member() && !new.path().exists());
        assert_eq!(replaced(&raft), Some(id(2, 3)));
    }
}
