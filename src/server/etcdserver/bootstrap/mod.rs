//! Opening a member (etcd's `etcdserver/bootstrap`): its store recovered from the data
//! directory, the services' state wired around it, and, for a cluster member, its Raft node
//! started on it (with `--force-new-cluster`, as the only member of a new cluster).

pub(crate) mod etcd_data_dir;
pub(crate) mod force_new_cluster;

use std::sync::Arc;

use crate::config::Config;
use crate::lease::Lessor;
use crate::metrics::grpc::GrpcStats;
use crate::mvcc::{Store, StoreConfig};
use crate::server::etcdserver::alarm;
use crate::server::etcdserver::apply;
use crate::server::etcdserver::forward;
use crate::server::etcdserver::grow;
use crate::server::etcdserver::member::Member;
use crate::watch::WatchHub;

impl Member {
    /// Opens the store (recovering it from the data directory) and wires the services' shared
    /// state around it. A member alone.
    pub fn new(config: Config) -> Result<Self, crate::mvcc::persist::OpenError> {
        let founders = config.founders();
        Self::open(config, &founders, None)
    }

    /// [`Member::new`] for a member alone (`cluster: None`; its ids derive from `founders` at
    /// its first start) or of a cluster with these (cluster id, member id): its store then
    /// keeps no WAL (the Raft log is the WAL) and is filled from the Raft log and snapshots by
    /// [`Member::start_raft`].
    pub fn open(
        config: Config,
        founders: &crate::config::Founders,
        cluster: Option<(u64, u64)>,
    ) -> Result<Self, crate::mvcc::persist::OpenError> {
        config.auto_compaction()?;
        let mut wal_options = config.wal_options();
        let (cluster_id, member_id) = match cluster {
            Some(ids) => ids,
            None => alone_ids(config.ids(founders), &wal_options)?,
        };
        if cluster.is_some() {
            if wal_options.mode != crate::wal::Mode::None {
                grow::retire_alone_state(&wal_options.dir)?;
            }
            if wal_options.dir.wal().exists() {
                return Err(format!(
                    "{} holds the data of a member alone (a WAL); a cluster member keeps its \
                     state in a Raft log: give it a directory of its own (and move the data \
                     with a snapshot: etcdctl snapshot save, then mem_etcd snapshot restore)",
                    wal_options.dir.display()
                )
                .into());
            }
            if !wal_options.exclude.is_empty() {
                // Every member must apply every entry of the log: none can leave keys out.
                tracing::warn!(
                    "--wal-exclude-prefix has no effect in a cluster: the Raft log holds every write"
                );
            }
            wal_options.mode = crate::wal::Mode::None;
        }
        let store_config = StoreConfig {
            // A tenant's resources are partitioned as the Kubernetes prefix's are.
            registry_prefix: config
                .registry_prefix
                .iter()
                .chain(config.tenants.iter().map(|t| &t.prefix))
                .cloned()
                .collect(),
            top_level_prefixes: config.tenants_from_auth.is_some(),
            max_txn_ops: config.max_txn_ops as usize,
            max_request_bytes: config.max_request_bytes as usize,
        };
        // A member alone keeps its auth state in a file of its own; a cluster member gets it
        // from its Raft log and snapshots.
        let auth_path = (cluster.is_none() && wal_options.mode != crate::wal::Mode::None)
            .then(|| wal_options.dir.auth_file());
        if auth_path.is_some() {
            etcd_data_dir::import(&wal_options.dir)?;
        }
        let (store, recovered) = Store::open(store_config, wal_options)?;
        let hub = Arc::new(WatchHub::new(
            store.keyspace().clone(),
            store.event_log().clone(),
            store.current_revision(),
        ));
        store.set_observer(hub.clone());
        // Generated lease ids start from the member id and the start time, so ids from an
        // earlier run of this member are not handed out again.
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let seed = (((member_id & 0xffff) as i64) << 46) | (now_ms & ((1 << 46) - 1));
        let lessor = Lessor::new(seed);
        store.set_lease_index(lessor.clone());
        // Recovered leases get their full TTL again, as in etcd.
        for (id, ttl) in recovered.leases {
            let _ = lessor.grant(id, ttl);
        }
        store.attach_recovered_leases();
        let tokens = crate::auth::jwt::TokenKind::parse(&config.auth_token)
            .map_err(|e| format!("--auth-token: {e}"))?;
        let auth = crate::auth::AuthStore::new(
            config.bcrypt_cost,
            std::time::Duration::from_secs(config.auth_token_ttl),
        )
        .with_tokens(tokens);
        if let Some(path) = auth_path {
            match crate::auth::file::load(&path) {
                Ok(Some(state)) => auth.restore(state),
                Ok(None) => {}
                Err(e) => return Err(format!("{}: {e}", path.display()).into()),
            }
        }
        let grpc_stats = GrpcStats::default();
        let alarms = alarm::Alarms::new(config.quota_backend_bytes, member_id);
        let tenants = crate::server::etcdserver::tenant::Tenants::new(
            &config.tenants,
            config.tenants_from_auth,
        );
        Ok(Self {
            store,
            hub,
            lessor,
            cluster_id,
            member_id,
            config,
            grpc_stats,
            metrics: Default::default(),
            alarms,
            tenants,
            raft: std::sync::OnceLock::new(),
            members: Default::default(),
            lease_term: Default::default(),
            auth,
            auth_changes: Default::default(),
            alone: Default::default(),
            stopping: tokio::sync::watch::channel(false).0,
        })
    }

    /// Starts this member's Raft node (a cluster member): the store is filled from its snapshot
    /// and log, and from then on every write goes through Raft. With `--force-new-cluster` on a
    /// member's data, in a new cluster of this member alone ([`force_new_cluster`]).
    pub async fn start_raft(
        self: &Arc<Self>,
        opts: crate::raft::NodeOptions,
    ) -> Result<(), String> {
        if force_new_cluster::applies(self, &opts) {
            return force_new_cluster::start(self, opts).await;
        }
        let applier = Arc::new(apply::Applier { shared: Arc::downgrade(self) });
        let node = crate::raft::RaftNode::start(opts, applier).await?;
        self.set_raft(node)
    }

    /// Makes `node` this member's Raft node, which serves the requests forwarded to it as the
    /// leader through this server (`forward`). From then on every request takes a cluster
    /// member's path.
    pub fn set_raft(self: &Arc<Self>, node: Arc<crate::raft::RaftNode>) -> Result<(), String> {
        node.serve_leader_requests(forward::leader_requests(self));
        self.raft.set(node).map_err(|_| "the Raft node is started once".to_string())
    }
}

/// A member alone's (cluster id, member id): `derived` from its flags as etcd derives them at
/// its first start, then kept in its data directory, as etcd keeps them (a restart with other
/// peer URLs or another `--initial-cluster-token` is still the same member of the same
/// cluster). Without a data directory (`--wal-mode none`) every start is a first start.
fn alone_ids(
    derived: (u64, u64),
    wal: &crate::wal::Options,
) -> Result<(u64, u64), crate::mvcc::persist::OpenError> {
    if wal.mode == crate::wal::Mode::None {
        return Ok(derived);
    }
    let dir = &wal.dir;
    if let Some((member, cluster)) = dir.read_alone_ids()? {
        if (cluster, member) != derived {
            tracing::info!(
                "member-id" = %format!("{member:x}"),
                "cluster-id" = %format!("{cluster:x}"),
                "ids from the flags" = %format!("{:x}/{:x}", derived.1, derived.0),
                "kept the member and cluster ids of this data directory's first start"
            );
        }
        return Ok((cluster, member));
    }
    let io = |e: std::io::Error| format!("{}: {e}", dir.display());
    std::fs::create_dir_all(dir.path()).map_err(io)?;
    dir.write_alone_ids(derived.1, derived.0).map_err(io)?;
    Ok(derived)
}
