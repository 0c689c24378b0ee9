//! The member: the state every service of this member shares (etcd's `EtcdServer`): its store,
//! watchers, leases, auth, alarms, ids, configuration and, in a cluster, its Raft node. How it is
//! opened and how its Raft node starts is [`crate::server::etcdserver::bootstrap`]; how it serves
//! is `embed::serve`.

use std::sync::Arc;

use crate::config::Config;
use crate::lease::Lessor;
use crate::metrics::grpc::GrpcStats;
use crate::mvcc::Store;
use crate::proto::etcdserverpb as pb;
use crate::server::etcdserver::alarm;
use crate::watch::WatchHub;

/// gRPC's own framing on top of a request, allowed beyond `--max-request-bytes` so that an
/// oversized request still reaches etcd's size check and gets etcd's error (etcd adds the same).
pub const GRPC_OVERHEAD_BYTES: usize = 512 * 1024;

/// The raft term reported in headers: a single member that never holds an election.
pub const RAFT_TERM: u64 = 2;

/// What every service of this member shares.
#[derive(Debug)]
pub struct Member {
    pub store: Store,
    /// Every watcher; the store publishes committed revisions to it.
    pub hub: Arc<WatchHub>,
    /// Every lease; the store tells it which keys are attached.
    pub lessor: Arc<Lessor>,
    pub cluster_id: u64,
    pub member_id: u64,
    pub config: Config,
    /// gRPC calls started and handled, per method and code (for `/metrics`).
    pub grpc_stats: GrpcStats,
    /// Applies, reads, maintenance calls, scrapes and health checks (for `/metrics`).
    pub metrics: crate::metrics::ServerMetrics,
    /// Raised alarms and the space quota every write that adds data checks.
    pub alarms: alarm::Alarms,
    /// The hosted control planes sharing the store (`--tenant`): their quotas, which every
    /// write to a tenant's keys checks, and their figures.
    pub tenants: crate::server::etcdserver::tenant::Tenants,
    /// The Raft node, in a cluster (set once: right after start-up, or when a member alone
    /// grows into a cluster; a member alone has none). [`submit`] reads it to choose a change's
    /// road; linearizable reads, Status and membership calls read it too.
    pub raft: std::sync::OnceLock<Arc<crate::raft::RaftNode>>,
    /// Every member's name and client URLs, as each published them through the log (a
    /// cluster's MemberList); written only by the apply of those entries and by snapshots.
    pub members: parking_lot::Mutex<
        std::collections::BTreeMap<u64, crate::proto::memetcdpb::MemberAttributes>,
    >,
    /// The Raft term in which this member last gave every lease its full TTL on becoming
    /// leader (`etcdserver::lessor::promoted`).
    pub lease_term: std::sync::atomic::AtomicU64,
    /// Users, roles, permissions and tokens; every request checks its enabled flag.
    pub auth: crate::auth::AuthStore,
    /// Serializes a member alone's auth changes, so that its auth file is written in the
    /// order they were applied (async: held across the file write).
    pub auth_changes: tokio::sync::Mutex<()>,
    /// A member alone's writes other than KV's (leases, their expiry, compaction, auth,
    /// alarms) hold it shared across their change ([`Member::alone_writes`]); growing into a
    /// cluster holds it exclusively ([`grow`]), so that none of them straddles the moment the
    /// member's state is handed to Raft, and KV writes the store handed back wait on it. Never
    /// taken by KV's writes nor in a cluster.
    pub alone: tokio::sync::RwLock<()>,
    /// Raised when the server starts shutting down: what stops the peer listeners a member
    /// that grew into a cluster opened after start-up.
    pub stopping: tokio::sync::watch::Sender<bool>,
}

impl Member {
    /// For a member alone's write other than KV's: a guard that keeps it a member alone
    /// until the write is done (see [`Member::alone`]); `None` in a cluster, including once
    /// the member has grown into one while the caller waited.
    pub async fn alone_writes(&self) -> Option<tokio::sync::RwLockReadGuard<'_, ()>> {
        if self.raft().is_some() {
            return None;
        }
        let guard = self.alone.read().await;
        self.raft().is_none().then_some(guard)
    }

    /// Waits while a member alone grows into a cluster (a KV write the store handed back
    /// goes on once it is over: through Raft, or directly again if growing failed).
    pub async fn growth_settled(&self) {
        drop(self.alone.read().await);
    }

    /// The Raft node, in a cluster.
    pub fn raft(&self) -> Option<&Arc<crate::raft::RaftNode>> {
        self.raft.get()
    }

    /// What Status and `/debug/vars` report of Raft. A member alone has no Raft log: it leads
    /// itself, and the revision is the closest monotonic counter clients can watch advance.
    pub fn raft_status(&self) -> crate::raft::RaftStatus {
        if let Some(r) = self.raft() {
            return r.status();
        }
        let rev = self.store.current_revision() as u64;
        crate::raft::RaftStatus {
            id: self.member_id,
            last_index: rev,
            commit: rev,
            applied_index: rev,
            term: RAFT_TERM,
            vote: self.member_id,
            leader: self.member_id,
            is_learner: false,
            state: "StateLeader",
            progress: vec![(self.member_id, rev)],
        }
    }

    /// Writes out the WAL (a member alone's, or the one a member that grew into a cluster
    /// kept writing until it restarts) and stops its writer (after the listeners stopped).
    pub fn close(&self) {
        if let Some(w) = self.store.wal() {
            w.close();
        }
    }

    /// The top-level response header: ids, term, and the revision (the current one if the
    /// response does not carry its own).
    pub fn header(&self, revision: i64) -> Option<pb::ResponseHeader> {
        Some(pb::ResponseHeader {
            cluster_id: self.cluster_id,
            member_id: self.member_id,
            revision: if revision == 0 { self.store.current_revision() } else { revision },
            raft_term: self.raft_term(),
        })
    }

    /// The Raft term for headers: the cluster's, or a fixed one for a member alone.
    pub fn raft_term(&self) -> u64 {
        self.raft().map_or(RAFT_TERM, |r| r.term())
    }

    /// A header with exactly this revision, 0 included (etcd's watch responses do not fill in
    /// the current revision).
    pub fn header_exact(&self, revision: i64) -> Option<pb::ResponseHeader> {
        Some(pb::ResponseHeader {
            cluster_id: self.cluster_id,
            member_id: self.member_id,
            revision,
            raft_term: self.raft_term(),
        })
    }

    /// Fills a header in place the way etcd's `header.fill` does.
    pub fn fill(&self, h: &mut Option<pb::ResponseHeader>) {
        let rev = h.as_ref().map_or(0, |h| h.revision);
        *h = self.header(rev);
    }
}
