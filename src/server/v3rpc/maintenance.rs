//! The Maintenance service: Status, Alarm, Defragment, Hash, HashKV, Snapshot.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::backend::schema::{AuthState, DbView};
use crate::error::Error;
use crate::proto::etcdserverpb as pb;
use crate::server::etcdserver::member::Member;
use crate::server::etcdserver::membership;
use crate::server::etcdserver::submit::submit;
use crate::server::v3rpc::auth;

#[derive(Debug)]
pub struct MaintenanceService {
    shared: Arc<Member>,
}

impl MaintenanceService {
    pub fn new(shared: Arc<Member>) -> Self {
        Self { shared }
    }
}

type SnapshotStream = Pin<Box<dyn Stream<Item = Result<pb::SnapshotResponse, Status>> + Send>>;

#[tonic::async_trait]
impl pb::maintenance_server::Maintenance for MaintenanceService {
    async fn alarm(
        &self,
        req: Request<pb::AlarmRequest>,
    ) -> Result<Response<pb::AlarmResponse>, Status> {
        let who = if req.get_ref().action == pb::alarm_request::AlarmAction::Get as i32 {
            auth::authenticated(&self.shared, &req).await?
        } else {
            auth::admin(&self.shared, &req).await?
        };
        let mut a = submit(&self.shared, &who, req.into_inner()).await?;
        self.shared.fill(&mut a.header);
        Ok(Response::new(a))
    }

    async fn status(
        &self,
        req: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        auth::authenticated(&self.shared, &req).await?;
        let s = &self.shared;
        let rev = s.store.current_revision();
        let size = s.store.size_bytes() as i64;
        let raft = s.raft_status();
        Ok(Response::new(pb::StatusResponse {
            header: s.header(rev),
            version: s.config.emulated_version.clone(),
            db_size: size,
            leader: raft.leader,
            raft_index: raft.last_index,
            raft_term: raft.term,
            raft_applied_index: raft.applied_index,
            // etcd lists raised alarms as their protobuf text form.
            errors: s
                .alarms
                .get(pb::AlarmType::None as i32)
                .into_iter()
                .map(|(m, a)| {
                    format!(
                        "memberID:{m} alarm:{} ",
                        crate::server::etcdserver::alarm::alarm_name(a)
                    )
                })
                .collect(),
            db_size_in_use: size,
            is_learner: raft.is_learner,
            storage_version: s.config.storage_version(),
            db_size_quota: s.alarms.quota_bytes(),
            downgrade_info: Some(pb::DowngradeInfo::default()),
        }))
    }

    async fn defragment(
        &self,
        req: Request<pb::DefragmentRequest>,
    ) -> Result<Response<pb::DefragmentResponse>, Status> {
        auth::admin(&self.shared, &req).await?;
        // Memory is returned as compaction frees it; there is nothing to defragment. The
        // call is timed all the same, as etcd times its defragmentation.
        let started = std::time::Instant::now();
        self.shared.metrics.defrag_seconds.observe(started.elapsed().as_secs_f64());
        // etcd's Defragment response carries no header.
        Ok(Response::new(pb::DefragmentResponse { header: None }))
    }

    async fn hash(
        &self,
        req: Request<pb::HashRequest>,
    ) -> Result<Response<pb::HashResponse>, Status> {
        auth::admin(&self.shared, &req).await?;
        let started = std::time::Instant::now();
        let hashed =
            crate::server::etcdserver::blocking::off_the_runtime(|| self.shared.store.hash_kv(0));
        self.shared.metrics.hash_seconds.observe(started.elapsed().as_secs_f64());
        let (hash, rev, _) = hashed?;
        Ok(Response::new(pb::HashResponse { header: self.shared.header(rev), hash }))
    }

    async fn hash_kv(
        &self,
        req: Request<pb::HashKvRequest>,
    ) -> Result<Response<pb::HashKvResponse>, Status> {
        auth::admin(&self.shared, &req).await?;
        let started = std::time::Instant::now();
        let rev = req.into_inner().revision;
        let hashed =
            crate::server::etcdserver::blocking::off_the_runtime(|| self.shared.store.hash_kv(rev));
        self.shared.metrics.hash_rev_seconds.observe(started.elapsed().as_secs_f64());
        let (hash, hash_revision, compact_revision) = hashed?;
        Ok(Response::new(pb::HashKvResponse {
            header: self.shared.header(0),
            hash,
            compact_revision,
            hash_revision,
        }))
    }

    type SnapshotStream = SnapshotStream;

    async fn snapshot(
        &self,
        req: Request<pb::SnapshotRequest>,
    ) -> Result<Response<Self::SnapshotStream>, Status> {
        auth::admin(&self.shared, &req).await?;
        let (tx, rx) = tokio::sync::mpsc::channel(SNAPSHOT_QUEUE);
        let complete = Arc::new(AtomicBool::new(false));
        let (shared, done) = (self.shared.clone(), complete.clone());
        tokio::task::spawn_blocking(move || {
            let started = std::time::Instant::now();
            if send_snapshot(&shared, &tx) {
                done.store(true, Ordering::Release);
                shared.metrics.snapshot_seconds.observe(started.elapsed().as_secs_f64());
            }
        });
        Ok(Response::new(Box::pin(SnapshotBody { rx, complete, ended: false })))
    }

    async fn move_leader(
        &self,
        req: Request<pb::MoveLeaderRequest>,
    ) -> Result<Response<pb::MoveLeaderResponse>, Status> {
        auth::admin(&self.shared, &req).await?;
        membership::move_leader(&self.shared, req.into_inner().target_id).await?;
        Ok(Response::new(pb::MoveLeaderResponse { header: self.shared.header(0) }))
    }

    async fn downgrade(
        &self,
        req: Request<pb::DowngradeRequest>,
    ) -> Result<Response<pb::DowngradeResponse>, Status> {
        auth::admin(&self.shared, &req).await?;
        use pb::downgrade_request::DowngradeAction as Action;
        let req = req.into_inner();
        let cluster = self.shared.config.cluster_version();
        let answer =
            |s: &Member| pb::DowngradeResponse { header: s.header(0), version: cluster.clone() };
        match Action::try_from(req.action) {
            // No downgrade is ever in progress here, so there is none to cancel (etcd answers a
            // cancel without one the same way).
            Ok(Action::Cancel) => Ok(Response::new(answer(&self.shared))),
            Ok(Action::Validate) => {
                downgrade_target(&req.version, &cluster)?;
                Ok(Response::new(answer(&self.shared)))
            }
            // etcd lowers the cluster version and its storage schema to the target's and then
            // expects its members to be replaced by the older etcd; mem_etcd has no older
            // release or schema to go back to. The target is checked as etcd checks it first.
            Ok(Action::Enable) => {
                downgrade_target(&req.version, &cluster)?;
                Err(Status::unimplemented("downgrade is not supported"))
            }
            Err(_) => Err(Error::UnknownMethod.into()),
        }
    }
}

/// Checks a downgrade target as etcd does: semver `X.Y.Z` (a prerelease and build metadata
/// allowed) or `X.Y`, and exactly one minor version below the cluster version `cluster`
/// (`major.minor`).
fn downgrade_target(version: &str, cluster: &str) -> Result<(), Error> {
    let semver = |v: &str| -> Option<(i64, i64)> {
        let core = v.split_once('+').map_or(v, |(c, _)| c);
        let core = core.split_once('-').map_or(core, |(c, _)| c);
        let parts: Vec<i64> = core.split('.').map(|p| p.parse().ok()).collect::<Option<_>>()?;
        match parts[..] {
            [major, minor, _patch] => Some((major, minor)),
            _ => None,
        }
    };
    let (major, minor) = semver(version)
        .or_else(|| semver(&format!("{version}.0")))
        .ok_or(Error::WrongDowngradeVersionFormat)?;
    let (cmajor, cminor) = semver(&format!("{cluster}.0")).ok_or(Error::Internal)?;
    if major != cmajor || minor != cminor - 1 {
        return Err(Error::InvalidDowngradeTargetVersion);
    }
    Ok(())
}

/// etcd's blob size (`snapshotSendBufferSize`).
const SNAPSHOT_BLOB: usize = 32 << 10;
/// Blobs queued for a slow client: the backup waits (holding off the freeing of compacted
/// versions, see `mvcc::backup`) rather than buffering the store.
const SNAPSHOT_QUEUE: usize = 16;
/// How long a client may read nothing before its snapshot is abandoned, so that a stalled
/// client does not keep compacted versions in memory for good.
const SNAPSHOT_STALL: Duration = Duration::from_secs(60);

type SnapshotItem = Result<pb::SnapshotResponse, Status>;

/// The blobs as the sender queues them, ended by an error unless the sender finished: a
/// stream cut short must not look complete.
struct SnapshotBody {
    rx: tokio::sync::mpsc::Receiver<SnapshotItem>,
    complete: Arc<AtomicBool>,
    ended: bool,
}

impl Stream for SnapshotBody {
    type Item = SnapshotItem;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<SnapshotItem>> {
        if self.ended {
            return Poll::Ready(None);
        }
        match self.rx.poll_recv(cx) {
            Poll::Ready(None) => {
                self.ended = true;
                Poll::Ready(
                    (!self.complete.load(Ordering::Acquire))
                        .then(|| Err(Error::SnapshotFailed.into())),
                )
            }
            other => other,
        }
    }
}

/// Streams the store as etcd streams its database: an etcd snapshot.db (bbolt, see
/// `backend::schema`) in blobs of 32 KiB, each with the bytes still to come, then the sha256
/// of all of them in a message of its own, so that `etcdutl snapshot status|restore` read what
/// `etcdctl snapshot save` saves. Runs on a blocking thread: it reads the whole store. Returns
/// whether everything was queued.
fn send_snapshot(shared: &Member, tx: &tokio::sync::mpsc::Sender<SnapshotItem>) -> bool {
    let started = std::time::Instant::now();
    let runtime = tokio::runtime::Handle::current();
    // etcd sends its storage version here, not its binary's.
    let version = shared.config.storage_version();
    // Auth changes make no revision, so the auth state read just after the revision is fixed
    // is the member's at that revision as far as a client can tell (etcd reads both in one
    // transaction).
    let backup = shared.store.backup(|| shared.lessor.snapshot());
    let auth = AuthState::from_auth(&shared.auth.export());
    let rev = backup.revision();
    // Sorted into the `key` bucket's order; the values are the store's own, shared. The
    // backup keeps its pin until the stream ends: a compaction meanwhile frees (in the store's
    // accounting, which the quota checks) nothing the stream still holds.
    let versions = backup.versions();
    let mut leases = backup.leases().to_vec();
    leases.sort_unstable();
    let compacted = backup.compacted();
    let db = DbView { compacted, versions: &versions, leases: &leases, auth: &auth };
    let layout = db.layout();
    let total = layout.bytes() as usize;
    tracing::info!(revision = rev, total_bytes = total, "sending database snapshot to client");
    let mut header = shared.header(rev);
    let mut pending = bytes::BytesMut::with_capacity(2 * SNAPSHOT_BLOB);
    let mut sent = 0;
    let mut stalled = false;
    let mut send = |blob: bytes::Bytes, remaining: usize| {
        // The first header says which revision the snapshot holds (etcd leaves it empty).
        let resp = pb::SnapshotResponse {
            header: header.take(),
            remaining_bytes: remaining as u64,
            blob,
            version: version.clone(),
        };
        match runtime.block_on(tx.send_timeout(Ok(resp), SNAPSHOT_STALL)) {
            Ok(()) => true,
            Err(tokio::sync::mpsc::error::SendTimeoutError::Timeout(_)) => {
                stalled = true;
                false
            }
            Err(tokio::sync::mpsc::error::SendTimeoutError::Closed(_)) => false,
        }
    };
    let done = db.write(layout, &mut |piece| {
        pending.extend_from_slice(piece);
        while pending.len() >= SNAPSHOT_BLOB && sent + SNAPSHOT_BLOB <= total {
            sent += SNAPSHOT_BLOB;
            if !send(pending.split_to(SNAPSHOT_BLOB).freeze(), total - sent) {
                return false;
            }
        }
        true
    });
    drop(backup);
    if !done {
        tracing::warn!(
            revision = rev,
            "snapshot: {}; stopped sending",
            if stalled { "the client read nothing for 60 s" } else { "the client went away" }
        );
        return false;
    }
    if pending.len() != total - sent + crate::wal::backup::SHA_LEN {
        tracing::error!(
            revision = rev,
            "snapshot: {} bytes, {total} expected; ending the stream with an error",
            (sent + pending.len()).saturating_sub(crate::wal::backup::SHA_LEN)
        );
        return false;
    }
    let sha = pending.split_off(total - sent).freeze();
    if !((pending.is_empty() || send(pending.freeze(), 0)) && send(sha, 0)) {
        return false;
    }
    tracing::info!(
        revision = rev,
        total_bytes = total,
        seconds = format!("{:.3}", started.elapsed().as_secs_f64()),
        "sent database snapshot to client"
    );
    true
}
