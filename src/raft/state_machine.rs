//! The replicated state machine: what the log is applied to ([`StateMachine`], implemented by
//! the server's `apply::Applier`, which runs each request through the store's one write path),
//! the store openraft drives it through ([`StateMachineStore`]: applied position, membership,
//! snapshots, as openraft's examples name it), and its snapshots.
//!
//! Raft hands committed entries to the store in log order, on every member; each request is
//! passed to the [`StateMachine`].
//! Because every member applies the same requests in the same order from the same state,
//! every member assigns the same revisions and produces the same history and events.
//!
//! # Snapshots
//! A snapshot is the machine's state at one applied log id, in a file
//! `<data-dir>/raft/snap/<term>-<index>.snap`:
//!
//! ```text
//! "MEMETCDS", format version (u32 LE), 4 reserved bytes
//! meta length (u32 LE), SnapshotMeta (protobuf: last log id, membership)
//! the machine's bytes (its own format, with its own checksum)
//! ```
//!
//! The state is fixed between two applies (cheaply: see [`StateMachine::snapshot`]) and written
//! while applying goes on. Snapshots bound the Raft log (entries they cover are purged) and
//! bring a lagging or new member up to date. In `--wal-mode none` the directory only holds
//! snapshots on their way to other members and is emptied at start.

use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, RaftSnapshotBuilder};
use prost::Message;
use tokio_stream::{Stream, StreamExt};

use super::rafthttp::codec;
use super::types::{
    CommittedLeaderId, LogId, PeerNode, SnapshotMeta, StoredMembership, TypeConfig,
};
use crate::data_dir::sync_dir;
use crate::proto::memetcdpb as pb;

const MAGIC: &[u8; 8] = b"MEMETCDS";
const VERSION: u32 = 1;

/// A snapshot as openraft hands it around: its metadata and its file.
pub type Snapshot = openraft::Snapshot<CommittedLeaderId, u64, PeerNode, SnapshotFile>;

/// What Raft replicates: the server's applier.
pub trait StateMachine: Send + Sync + std::fmt::Debug + 'static {
    /// Applies one committed request (as proposed) and, if `answer`, returns the encoded answer
    /// for the member that proposed it (only the leader that appended it has someone waiting
    /// for one: every other member's would be thrown away, so it is not made). Must be
    /// deterministic: every member calls it with the same requests in the same order.
    fn apply(&self, request: &[u8], answer: bool) -> bytes::Bytes;

    /// A batch of committed entries is about to be applied.
    fn batch_started(&self) {}

    /// The batch was applied: what it wrote becomes visible (to readers and watchers) by the
    /// time this returns, and not before, so that watchers get the batch's revisions together.
    fn batch_applied(&self) {}

    /// Fixes the current state for a snapshot. Called between two applies, so it must be
    /// cheap; the returned job writes that state later, on a blocking thread, while applying
    /// goes on.
    fn snapshot(&self) -> Box<dyn SnapshotJob>;

    /// Replaces the whole state with a snapshot's (a member far behind, or a new one): the
    /// machine's bytes start `offset` bytes into the file at `path`.
    fn install(&self, path: &Path, offset: u64) -> io::Result<()>;

    /// The hash of the state's key-value versions at `rev` (0: the current revision), as
    /// Maintenance.HashKV computes it.
    fn hash_kv(&self, rev: i64) -> crate::error::Result<KvHash>;
}

/// A member's answer to HashKV, which its peers compare with theirs (`corrupt`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvHash {
    pub hash: u32,
    /// The revision hashed.
    pub hash_revision: i64,
    /// The member's compaction revision: two members' hashes of one revision are equal only
    /// if they compacted to the same revision.
    pub compact_revision: i64,
    /// The member's current revision, once hashed (etcd's response header revision).
    pub revision: i64,
    /// A digest of the prefixes compacted on their own (tenants') that the hash reflects (0
    /// if none): two members' hashes of one revision are equal only if these are too.
    pub floors: u64,
}

/// A snapshot of a fixed state, to be written.
pub trait SnapshotJob: Send + Sync {
    fn write(self: Box<Self>, out: &mut dyn Write) -> io::Result<()>;
}

/// A snapshot's file (openraft's `SnapshotData`): read from the start of the machine's bytes.
#[derive(Debug)]
pub struct SnapshotFile {
    pub path: PathBuf,
}

/// openraft's side of the [`StateMachine`]: the applied position, the membership and the
/// snapshot directory.
#[derive(Debug)]
pub struct StateMachineStore {
    machine: Arc<dyn StateMachine>,
    applied: Option<LogId>,
    membership: StoredMembership,
    dir: PathBuf,
    /// Whether snapshots are synced to disk (not in `--wal-mode none`).
    durable: bool,
    /// Told the applied index after every batch (waiters for local reads after a proposal).
    progress: Arc<tokio::sync::watch::Sender<u64>>,
}

impl StateMachineStore {
    /// Opens the snapshot directory: installs the newest snapshot into the machine (unless
    /// `durable` is off, when old files are removed instead). `holds_newest`: the machine
    /// already holds the newest snapshot's state (it was just written from that state: a
    /// member founding a cluster of itself, see `restore`), so only its position is taken.
    pub fn open(
        machine: Arc<dyn StateMachine>,
        dir: PathBuf,
        durable: bool,
        progress: Arc<tokio::sync::watch::Sender<u64>>,
        holds_newest: bool,
    ) -> io::Result<Self> {
        if !durable && dir.exists() {
            fs::remove_dir_all(&dir)?;
        }
        fs::create_dir_all(&dir)?;
        let mut sm = Self {
            machine,
            applied: None,
            membership: StoredMembership::default(),
            dir,
            durable,
            progress,
        };
        if let Some(path) = newest(&sm.dir)? {
            let (meta, offset) = open_snapshot(&path)?;
            if !holds_newest {
                sm.machine.install(&path, offset)?;
            }
            tracing::info!(snapshot = %path.display(), index = meta.last_log_id.map(|l| l.index), "raft: state loaded from snapshot");
            sm.set_applied(meta.last_log_id, meta.last_membership);
        }
        Ok(sm)
    }

    fn set_applied(&mut self, applied: Option<LogId>, membership: StoredMembership) {
        self.applied = applied;
        self.membership = membership;
        self.progress.send_replace(applied.map_or(0, |l| l.index));
    }
}

/// The newest snapshot file in `dir`.
pub fn newest(dir: &Path) -> io::Result<Option<PathBuf>> {
    let mut best: Option<((u64, u64), PathBuf)> = None;
    for e in fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name();
        let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".snap")) else { continue };
        let Some((t, i)) = stem.split_once('-') else { continue };
        let (Ok(t), Ok(i)) = (u64::from_str_radix(t, 16), u64::from_str_radix(i, 16)) else {
            continue;
        };
        if best.as_ref().is_none_or(|b| (t, i) > b.0) {
            best = Some(((t, i), e.path()));
        }
    }
    Ok(best.map(|b| b.1))
}

/// Reads a snapshot file's meta, and where the machine's bytes start.
pub fn open_snapshot(path: &Path) -> io::Result<(SnapshotMeta, u64)> {
    let bad = |why: &str| {
        io::Error::new(io::ErrorKind::InvalidData, format!("snapshot {}: {why}", path.display()))
    };
    let mut r = BufReader::new(File::open(path)?);
    let mut head = [0u8; 20];
    r.read_exact(&mut head).map_err(|_| bad("cut short"))?;
    if &head[..8] != MAGIC {
        return Err(bad("not a mem_etcd Raft snapshot"));
    }
    if u32::from_le_bytes(head[8..12].try_into().expect("4 bytes")) != VERSION {
        return Err(bad("unknown format version"));
    }
    let len = u32::from_le_bytes(head[16..20].try_into().expect("4 bytes")) as usize;
    let mut meta = vec![0u8; len];
    r.read_exact(&mut meta).map_err(|_| bad("cut short"))?;
    let meta = pb::SnapshotMeta::decode(&meta[..]).map_err(|_| bad("meta does not decode"))?;
    let meta = codec::from_snapshot_meta(&Some(meta)).map_err(|e| bad(&e.to_string()))?;
    Ok((meta, 20 + len as u64))
}

/// The file name of the snapshot at `last`.
pub fn file_name(last: &Option<LogId>) -> String {
    let (t, i) = last.map_or((0, 0), |l| (l.leader_id.term, l.index));
    format!("{t:016x}-{i:016x}.snap")
}

/// Removes every snapshot file but `keep`, and leftovers of unfinished ones.
fn remove_others(dir: &Path, keep: &Path) -> io::Result<()> {
    for e in fs::read_dir(dir)? {
        let p = e?.path();
        if p != keep {
            let _ = fs::remove_file(&p);
        }
    }
    Ok(())
}

/// A place for a snapshot being written or received: `<dir>/tmp-<n>`, unique per process.
pub fn temp_path(dir: &Path) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    dir.join(format!("tmp-{}-{n}", std::process::id()))
}

/// Writes the header and meta of a snapshot file.
pub fn write_header(out: &mut dyn Write, meta: &SnapshotMeta) -> io::Result<()> {
    let meta = codec::snapshot_meta(meta).encode_to_vec();
    let mut head = [0u8; 20];
    head[..8].copy_from_slice(MAGIC);
    head[8..12].copy_from_slice(&VERSION.to_le_bytes());
    head[16..20].copy_from_slice(&(meta.len() as u32).to_le_bytes());
    out.write_all(&head)?;
    out.write_all(&meta)
}

/// Builds a snapshot of the state fixed at its creation.
pub struct Builder {
    job: Option<Box<dyn SnapshotJob>>,
    meta: SnapshotMeta,
    dir: PathBuf,
    durable: bool,
}

impl std::fmt::Debug for Builder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder").field("last_log_id", &self.meta.last_log_id).finish()
    }
}

impl RaftSnapshotBuilder<TypeConfig> for Builder {
    type SnapshotData = SnapshotFile;

    async fn build_snapshot(&mut self) -> Result<Snapshot, io::Error> {
        let job = self.job.take().ok_or_else(|| io::Error::other("snapshot built twice"))?;
        let (meta, dir, durable) = (self.meta.clone(), self.dir.clone(), self.durable);
        let started = std::time::Instant::now();
        let path = tokio::task::spawn_blocking(move || -> io::Result<PathBuf> {
            let tmp = temp_path(&dir);
            let result = (|| {
                let mut out = BufWriter::with_capacity(1 << 20, File::create(&tmp)?);
                write_header(&mut out, &meta)?;
                job.write(&mut out)?;
                let f = out.into_inner().map_err(|e| e.into_error())?;
                if durable {
                    f.sync_all()?;
                }
                let path = dir.join(file_name(&meta.last_log_id));
                fs::rename(&tmp, &path)?;
                if durable {
                    sync_dir(&dir)?;
                }
                remove_others(&dir, &path)?;
                Ok(path)
            })();
            if result.is_err() {
                let _ = fs::remove_file(&tmp);
            }
            result
        })
        .await
        .map_err(io::Error::other)??;
        tracing::info!(
            index = self.meta.last_log_id.map(|l| l.index),
            bytes = fs::metadata(&path).map(|m| m.len()).unwrap_or(0),
            seconds = format!("{:.3}", started.elapsed().as_secs_f64()),
            "raft: snapshot written"
        );
        Ok(Snapshot { meta: self.meta.clone(), snapshot: SnapshotFile { path } })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotData = SnapshotFile;
    type SnapshotBuilder = Builder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), io::Error> {
        Ok((self.applied, self.membership.clone()))
    }

    async fn apply<S>(&mut self, mut entries: S) -> Result<(), io::Error>
    where
        S: Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>> + Unpin + Send,
    {
        self.machine.batch_started();
        // Answered once the whole batch is visible: a client told its write succeeded must
        // find it in its next read.
        let mut answers = Vec::new();
        while let Some(item) = entries.next().await {
            let (entry, responder) = match item {
                Ok(e) => e,
                Err(e) => {
                    self.machine.batch_applied();
                    return Err(e);
                }
            };
            let answer = match &entry.payload {
                EntryPayload::Normal(p) => self.machine.apply(&p.0, responder.is_some()),
                EntryPayload::Membership(m) => {
                    self.membership = StoredMembership::new(Some(entry.log_id), m.clone());
                    bytes::Bytes::new()
                }
                EntryPayload::Blank => bytes::Bytes::new(),
            };
            self.applied = Some(entry.log_id);
            if let Some(r) = responder {
                answers.push((r, answer));
            }
        }
        self.machine.batch_applied();
        for (r, answer) in answers {
            r.send(answer);
        }
        self.progress.send_replace(self.applied.map_or(0, |l| l.index));
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        Builder {
            job: Some(self.machine.snapshot()),
            meta: SnapshotMeta {
                last_log_id: self.applied,
                last_membership: self.membership.clone(),
            },
            dir: self.dir.clone(),
            durable: self.durable,
        }
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: SnapshotFile,
    ) -> Result<(), io::Error> {
        let started = std::time::Instant::now();
        let (_, offset) = open_snapshot(&snapshot.path)?;
        let machine = self.machine.clone();
        // Rebuilding the store takes a while for a large one: off the runtime's other tasks.
        tokio::task::block_in_place(|| machine.install(&snapshot.path, offset))?;
        let path = self.dir.join(file_name(&meta.last_log_id));
        if snapshot.path != path {
            fs::rename(&snapshot.path, &path)?;
        }
        if self.durable {
            File::open(&path)?.sync_all()?;
            sync_dir(&self.dir)?;
        }
        remove_others(&self.dir, &path)?;
        tracing::info!(
            index = meta.last_log_id.map(|l| l.index),
            seconds = format!("{:.3}", started.elapsed().as_secs_f64()),
            "raft: snapshot installed"
        );
        self.set_applied(meta.last_log_id, meta.last_membership.clone());
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, io::Error> {
        let Some(path) = newest(&self.dir)? else { return Ok(None) };
        let (meta, _) = open_snapshot(&path)?;
        Ok(Some(Snapshot { meta, snapshot: SnapshotFile { path } }))
    }
}
