//! A member alone growing into a cluster: what kubeadm's stacked etcd needs. The first
//! control-plane node's etcd starts alone, and every joining node runs `member add` against it
//! before starting its own member with `--initial-cluster-state existing`.
//!
//! A member alone runs without Raft (the parallel write path and its own WAL, see the crate
//! docs). Its first MemberAdd turns it into the only member of a Raft cluster, with the same
//! member and cluster ids, its own state and its revisions going on from there; the member is
//! then added through Raft as in any cluster. In order:
//!
//! 1. The member's writes other than KV's wait ([`Member::alone`], held exclusively), and the
//!    store stops applying KV writes directly ([`crate::mvcc::Store::close_direct`]): a write
//!    the store hands back waits, then goes through Raft. Writes already under way finish,
//!    and the member waits until its WAL has them (the store's watermark): the state is then
//!    fixed at one revision R, every acknowledged write included.
//! 2. `<data-dir>/raft` gets a founding Raft snapshot of a one-member cluster holding that
//!    state (the same format a cluster's snapshots have, written the way `mem_etcd snapshot
//!    restore --initial-cluster` writes one), fsync'd, then the member file, last: from the
//!    moment it exists, a start resumes a cluster member from `<data-dir>/raft`.
//! 3. Raft starts on the running server without loading the snapshot (the store holds its
//!    state already), elects this member, and the write path switches to proposing. Watches,
//!    leases (with their remaining TTLs) and the auth state stay as they were; revisions go on
//!    at R + 1.
//! 4. The peer listeners, which serve from the start (as etcd's), take Raft's calls, and the
//!    writes that waited go on through Raft.
//!
//! The member's own WAL keeps being written, and snapshotted as before so that it stays
//! bounded, until the member restarts (it is no longer read: a start
//! with the member file resumes from Raft and removes it, [`retire_alone_state`]), so that
//! nothing has to be detached from the store's write path while it runs. A crash before the
//! member file exists restarts a member alone from its WAL (the MemberAdd was not answered;
//! the partial Raft directory is replaced at the next try); a crash after it restarts a
//! cluster member of itself, from the snapshot (everything acknowledged up to R) and the Raft
//! log (everything after).
//!
//! `--wal-mode none` does not grow ("not capable", as before): such a member keeps nothing, so
//! after a restart nothing would say it had become a cluster member (its flags still say it is
//! alone), while the cluster would count it. Neither does a member with
//! `--wal-exclude-prefix`: a Raft snapshot must hold every key.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::data_dir::DataDir;
use crate::error::Error;
use crate::mvcc::persist::OpenError;
use crate::proto::memetcdpb::MemberAttributes;
use crate::raft::{NodeOptions, RaftNode, StateMachine, restore};
use crate::server::etcdserver::apply;
use crate::server::etcdserver::member::Member;

/// The term a grown member's first vote is for: its election then takes the term a member
/// alone reports in its headers.
const GROWN_VOTE_TERM: u64 = crate::server::etcdserver::member::RAFT_TERM - 1;

/// How long the one-member cluster may take to elect this member.
const ELECTION_WAIT: Duration = Duration::from_secs(10);

/// Tests only: a `--wal-failpoint` file saying this makes the process abort right after the
/// founding Raft state is durable, before Raft starts (a crash between steps 2 and 3).
const FAILPOINT: &str = "grow-abort";

/// Tests only: a `--wal-failpoint` file saying this holds the growth for [`STALL`] at the same
/// point, as writing the founding snapshot of a store of gigabytes does, so that a test can give
/// up on the MemberAdd there.
const STALL_FAILPOINT: &str = "grow-stall";
const STALL: Duration = Duration::from_secs(3);

/// Makes this member alone the only member of a Raft cluster (see the module docs); nothing
/// to do for a cluster member. On an error the member stays alone, as it was.
///
/// The growth runs to its end on a task of its own, whatever the caller does: a caller that
/// gives up (a client's deadline; etcdctl's 5 s is shorter than writing the founding snapshot
/// of a few GiB) drops only its wait. Dropped half-way with the call, a growth would leave the
/// store closed to direct writes with no Raft to take them (every write retrying forever) and
/// its founding state written all the same: a member wedged until it restarted.
pub async fn grow(s: &Arc<Member>) -> Result<(), GrowError> {
    let s = s.clone();
    tokio::spawn(async move { grow_to_end(&s).await })
        .await
        .unwrap_or_else(|e| Err(GrowError::Failed(format!("growing into a cluster: {e}"))))
}

/// Why a member alone could not grow into a cluster (its growth undone: still a member alone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GrowError {
    /// Growing is not possible with this member's flags: no WAL, or kinds left out of it
    /// (etcd's "not capable").
    Unsupported,
    /// The member's flags do not make a cluster (its peer URLs, their TLS): the operator's
    /// to fix.
    Refused(String),
    /// Writing the founding state or starting Raft failed (disk, ports): may work later.
    Unavailable(String),
    /// The growth task itself failed (the server log says why).
    Failed(String),
}

impl std::fmt::Display for GrowError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GrowError::Unsupported => f.write_str(Error::MemberChangeUnsupported.message()),
            GrowError::Refused(m) | GrowError::Unavailable(m) | GrowError::Failed(m) => {
                f.write_str(m)
            }
        }
    }
}

async fn grow_to_end(s: &Arc<Member>) -> Result<(), GrowError> {
    let _alone = s.alone.write().await;
    if s.raft().is_some() {
        return Ok(());
    }
    let wal = s.config.wal_options();
    if wal.mode == crate::wal::Mode::None || !wal.exclude.is_empty() {
        return Err(GrowError::Unsupported);
    }
    let mut opts =
        s.config.grown_cluster((s.cluster_id, s.member_id)).map_err(GrowError::Refused)?;
    opts.tls = crate::tls::peer_client(&s.config).map_err(GrowError::Refused)?;
    let rev = s.store.close_direct();
    s.store.wait_visible(rev).await;
    tracing::info!(revision = rev, "growing into a cluster: this member's state is fixed");
    let node = match found(s, opts).await {
        Ok(node) => node,
        Err(e) => {
            s.store.reopen_direct();
            tracing::error!(error = %e, "growing into a cluster failed; still a member alone");
            return Err(GrowError::Unavailable(format!("growing into a cluster: {e}")));
        }
    };
    // The leases keep their remaining TTLs: this member kept their deadlines and now leads
    // (the lessor's renewal on a new leader is for a leader that did not keep them).
    s.lease_term.store(node.term(), std::sync::atomic::Ordering::SeqCst);
    // The peer listeners, open since the start, serve Raft's calls from now on.
    let _ = s.set_raft(node);
    tracing::info!(revision = rev, "grown into a cluster of one member; writes go through Raft");
    Ok(())
}

/// Writes the founding Raft state of this member's cluster of one and starts its node; undone
/// (back to a member alone) if anything fails.
async fn found(s: &Arc<Member>, opts: NodeOptions) -> Result<Arc<RaftNode>, String> {
    let me = MemberAttributes {
        member_id: s.member_id,
        name: s.config.name.clone(),
        client_urls: s.config.advertised_client_urls(),
    };
    // This member's name and client URLs, as a cluster member publishes them through the log:
    // in the founding snapshot's machine state.
    s.members.lock().insert(s.member_id, me);
    let dir = opts.dir.clone();
    let undo = |e: String| {
        s.members.lock().clear();
        // The member file first: without it the rest is ignored.
        let _ = dir.remove_member();
        let _ = std::fs::remove_dir_all(dir.path());
        e
    };
    let applier = Arc::new(apply::Applier { shared: Arc::downgrade(s) });
    let job = applier.snapshot();
    let members = BTreeMap::from([(s.member_id, opts.peer_urls.clone())]);
    let (member_id, cluster_id) = (s.member_id, s.cluster_id);
    let raft_dir = dir.clone();
    let written = tokio::task::spawn_blocking(move || {
        // What an earlier attempt left (it has no member file, or this member would have
        // started as a cluster member).
        if raft_dir.path().exists() {
            std::fs::remove_dir_all(raft_dir.path())?;
        }
        let mut job = Some(job);
        let at = restore::founding();
        restore::write_member(&raft_dir, member_id, cluster_id, &members, at, &mut |out| {
            job.take().expect("written once").write(out)
        })
    })
    .await;
    match written {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(undo(format!("{}: {e}", dir.display()))),
        Err(e) => return Err(undo(format!("writing the founding snapshot: {e}"))),
    }
    let failpoint = s.config.wal_options().failpoint;
    match failpoint.and_then(|f| std::fs::read_to_string(f).ok()).as_deref().map(str::trim) {
        Some(FAILPOINT) => {
            tracing::error!("wal failpoint {FAILPOINT}: aborting after the founding Raft state");
            std::process::abort();
        }
        Some(STALL_FAILPOINT) => {
            tracing::warn!("wal failpoint {STALL_FAILPOINT}: holding the growth for {STALL:?}");
            tokio::time::sleep(STALL).await;
        }
        _ => {}
    }
    let node = match RaftNode::start_founded(opts, applier, GROWN_VOTE_TERM).await {
        Ok(node) => node,
        Err(e) => return Err(undo(e)),
    };
    if node.wait_leader(ELECTION_WAIT).await != Some(s.member_id) {
        node.shutdown().await;
        return Err(undo("the cluster of one did not elect this member".into()));
    }
    Ok(node)
}

/// At the start of a cluster member: a member alone that grew leaves its WAL and auth file
/// behind (it kept writing them until it stopped); once its Raft member file exists they hold
/// nothing the Raft state does not, and go.
pub(in crate::server) fn retire_alone_state(dir: &DataDir) -> Result<(), OpenError> {
    if !dir.raft().has_member() {
        return Ok(());
    }
    let wal = dir.wal();
    if wal.exists() {
        tracing::info!(
            wal = %wal.display(),
            "this member grew from a member alone into a cluster: its WAL is retired (the Raft \
             log holds its state)"
        );
    }
    dir.remove_alone_state().map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(())
}
