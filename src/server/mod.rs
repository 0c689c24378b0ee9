//! The gRPC server: etcd's v3 services over tonic (etcd's `etcdserver/api/v3rpc`).
//!
//! Services are thin: check the request and who sent it, then read the store, or hand a change
//! of state to [`submit`] (which applies it in place on a member alone and proposes it in a
//! cluster), fill the header, translate errors through [`status`]. Methods this server does not
//! know answer UNIMPLEMENTED.

pub mod alarm;
pub mod apply;
pub mod apply_auth;
pub mod auth;
pub mod cluster;
pub mod codec;
pub mod compactor;
pub mod convert;
pub mod force_new_cluster;
pub mod forward;
pub mod gateway;
pub mod grow;
pub mod health;
pub mod http;
pub mod kv;
pub mod lease;
pub mod maintenance;
pub mod metrics;
pub mod status;
pub mod submit;
pub mod tls;
pub mod watch;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;
use tower_layer::{Identity, Stack};
use tracing::info;

use crate::config::Config;
use crate::lease::Lessor;
use crate::mvcc::{Store, StoreConfig};
use crate::proto::etcdserverpb as pb;
use crate::watch::WatchHub;

/// gRPC's own framing on top of a request, allowed beyond `--max-request-bytes` so that an
/// oversized request still reaches etcd's size check and gets etcd's error (etcd adds the same).
pub const GRPC_OVERHEAD_BYTES: usize = 512 * 1024;

/// The raft term reported in headers: a single member that never holds an election.
pub const RAFT_TERM: u64 = 2;

/// What every service shares.
#[derive(Debug)]
pub struct Shared {
    pub store: Store,
    /// Every watcher; the store publishes committed revisions to it.
    pub hub: Arc<WatchHub>,
    /// Every lease; the store tells it which keys are attached.
    pub lessor: Arc<Lessor>,
    pub cluster_id: u64,
    pub member_id: u64,
    pub config: Config,
    /// gRPC calls started and handled, per method and code (for `/metrics`).
    pub grpc_stats: metrics::GrpcStats,
    /// Raised alarms and the space quota every write that adds data checks.
    pub alarms: alarm::Alarms,
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
    /// leader (`server::lease::promoted`).
    pub lease_term: std::sync::atomic::AtomicU64,
    /// Users, roles, permissions and tokens; every request checks its enabled flag.
    pub auth: crate::auth::AuthStore,
    /// Serializes a member alone's auth changes, so that its auth file is written in the
    /// order they were applied (async: held across the file write).
    pub auth_changes: tokio::sync::Mutex<()>,
    /// A member alone's writes other than KV's (leases, their expiry, compaction, auth,
    /// alarms) hold it shared across their change ([`Shared::alone_writes`]); growing into a
    /// cluster holds it exclusively ([`grow`]), so that none of them straddles the moment the
    /// member's state is handed to Raft, and KV writes the store handed back wait on it. Never
    /// taken by KV's writes nor in a cluster.
    pub alone: tokio::sync::RwLock<()>,
    /// Raised when the server starts shutting down: what stops the peer listeners a member
    /// that grew into a cluster opened after start-up.
    pub stopping: tokio::sync::watch::Sender<bool>,
}

impl Shared {
    /// Opens the store (recovering it from the data directory) and wires the services' shared
    /// state around it. A member alone.
    pub fn new(config: Config) -> Result<Self, crate::mvcc::persist::OpenError> {
        Self::open(config, None)
    }

    /// [`Shared::new`] for a member alone (`cluster: None`) or of a cluster with these
    /// (cluster id, member id): its store then keeps no WAL (the Raft log is the WAL) and is
    /// filled from the Raft log and snapshots by [`Shared::start_raft`].
    pub fn open(
        config: Config,
        cluster: Option<(u64, u64)>,
    ) -> Result<Self, crate::mvcc::persist::OpenError> {
        config.auto_compaction()?;
        let (cluster_id, member_id) = cluster.unwrap_or_else(|| config.ids());
        let mut wal_options = config.wal_options();
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
            registry_prefix: config.registry_prefix.clone(),
            max_txn_ops: config.max_txn_ops as usize,
            max_request_bytes: config.max_request_bytes as usize,
        };
        // A member alone keeps its auth state in a file of its own; a cluster member gets it
        // from its Raft log and snapshots.
        let auth_path = (cluster.is_none() && wal_options.mode != crate::wal::Mode::None)
            .then(|| wal_options.dir.auth_file());
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
        let grpc_stats = metrics::GrpcStats::default();
        let alarms = alarm::Alarms::new(config.quota_backend_bytes, member_id);
        Ok(Self {
            store,
            hub,
            lessor,
            cluster_id,
            member_id,
            config,
            grpc_stats,
            alarms,
            raft: std::sync::OnceLock::new(),
            members: Default::default(),
            lease_term: Default::default(),
            auth,
            auth_changes: Default::default(),
            alone: Default::default(),
            stopping: tokio::sync::watch::channel(false).0,
        })
    }

    /// For a member alone's write other than KV's: a guard that keeps it a member alone
    /// until the write is done (see [`Shared::alone`]); `None` in a cluster, including once
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

/// One bound listener.
#[derive(Debug)]
pub enum Listener {
    Tcp(TcpListener),
    /// An `https://` listener and the TLS settings its connections get.
    Tls(TcpListener, Arc<tokio_rustls::rustls::ServerConfig>),
    Unix(tokio::net::UnixListener, String),
}

impl Listener {
    /// Binds `url` (`http://host:port`, `https://host:port` or `unix://path`); an https URL
    /// needs `tls` (from --cert-file and --key-file).
    pub async fn bind(
        url: &str,
        tls: Option<&Arc<tokio_rustls::rustls::ServerConfig>>,
    ) -> std::io::Result<Self> {
        let bad = || {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("bad listen URL {url:?}"))
        };
        if let Some(path) = url.strip_prefix("unix://") {
            let _ = std::fs::remove_file(path);
            return Ok(Listener::Unix(tokio::net::UnixListener::bind(path)?, path.to_string()));
        }
        let (hostport, tls) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
            (Some(h), _) => (h, None),
            (_, Some(h)) => {
                let tls = tls.ok_or_else(|| {
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        format!("{url}: an https URL needs --cert-file and --key-file"),
                    )
                })?;
                (h, Some(tls.clone()))
            }
            _ => return Err(bad()),
        };
        let hostport = hostport.trim_end_matches('/');
        let addr: SocketAddr = match hostport.parse() {
            Ok(a) => a,
            Err(_) => tokio::net::lookup_host(hostport).await?.next().ok_or_else(bad)?,
        };
        let l = TcpListener::bind(addr).await?;
        Ok(match tls {
            Some(tls) => Listener::Tls(l, tls),
            None => Listener::Tcp(l),
        })
    }

    pub fn describe(&self) -> String {
        match self {
            Listener::Tcp(l) | Listener::Tls(l, _) => {
                l.local_addr().map(|a| a.to_string()).unwrap_or_default()
            }
            Listener::Unix(_, p) => format!("unix://{p}"),
        }
    }
}

/// A client listener's service: etcd's gRPC services, with the HTTP endpoints in front.
type ClientRouter = tonic::transport::server::Router<Stack<http::HttpLayer, Identity>>;

/// A `--listen-metrics-urls` listener's service: the probes and /metrics, no gRPC.
fn metrics_router(shared: &Arc<Shared>) -> ClientRouter {
    Server::builder()
        .accept_http1(true)
        .layer(http::HttpLayer::metrics_only(shared.clone()))
        .add_routes(tonic::service::Routes::default())
}

fn router(shared: &Arc<Shared>, serves: http::Serves) -> ClientRouter {
    let recv = shared.config.max_request_bytes as usize + GRPC_OVERHEAD_BYTES;
    let kv = pb::kv_server::KvServer::new(kv::KvService::new(shared.clone()))
        .max_decoding_message_size(recv)
        .max_encoding_message_size(usize::MAX);
    let maintenance = pb::maintenance_server::MaintenanceServer::new(
        maintenance::MaintenanceService::new(shared.clone()),
    )
    .max_decoding_message_size(recv)
    .max_encoding_message_size(usize::MAX);
    // etcd's receive limit is one gRPC server option, so it holds for every service; tonic's
    // default (4 MiB) let a keep-alive of 3 MiB through where etcd refuses it.
    let cluster =
        pb::cluster_server::ClusterServer::new(cluster::ClusterService::new(shared.clone()))
            .max_decoding_message_size(recv);
    let auth = pb::auth_server::AuthServer::new(auth::AuthService::new(shared.clone()))
        .max_decoding_message_size(recv);
    let lease = pb::lease_server::LeaseServer::new(lease::LeaseService::new(shared.clone()))
        .max_decoding_message_size(recv);
    let watch = crate::proto::wire::watch_server::WatchServer::new(watch::WatchService::new(
        shared.clone(),
    ))
    .max_decoding_message_size(recv)
    .max_encoding_message_size(usize::MAX);
    Server::builder()
        .tcp_nodelay(true)
        // HTTP/1.1 for the probes and /metrics; gRPC clients speak HTTP/2 as before.
        .accept_http1(true)
        .layer(http::HttpLayer::new(shared.clone(), serves))
        // etcd allows effectively unlimited streams per connection (--max-concurrent-streams);
        // kube-apiserver multiplexes every watch of a resource onto one.
        .max_concurrent_streams(shared.config.max_concurrent_streams)
        .add_service(kv)
        .add_service(maintenance)
        .add_service(cluster)
        .add_service(auth)
        .add_service(watch)
        .add_service(lease)
        .add_service(health::service())
}

/// Serves every client listener (gRPC and HTTP) and metrics listener (HTTP) until `shutdown`
/// resolves, then drains in-flight requests.
pub async fn serve(
    shared: Arc<Shared>,
    listeners: Vec<Listener>,
    http_listeners: Vec<Listener>,
    metrics_listeners: Vec<Listener>,
    peer_listeners: Vec<Listener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    let (tx, _) = tokio::sync::broadcast::channel::<()>(1);
    let (stopping_tx, mut stopping) = tokio::sync::watch::channel(false);
    {
        let tx = tx.clone();
        let shared_stop = shared.clone();
        tokio::spawn(async move {
            shutdown.await;
            info!("shutting down");
            let _ = tx.send(());
            let _ = stopping_tx.send(true);
            shared_stop.stopping.send_replace(true);
        });
    }
    let mut tasks = tokio::task::JoinSet::new();
    // Serves router `r` on listener `l` until the shutdown signal.
    macro_rules! serve_on {
        ($r:expr, $l:expr) => {{
            let mut rx = tx.subscribe();
            let signal = async move {
                let _ = rx.recv().await;
            };
            let r = $r;
            match $l {
                Listener::Tcp(t) => {
                    // Without TCP_NODELAY small responses wait for delayed ACKs (tens of ms).
                    let incoming = TcpIncoming::from(t).with_nodelay(Some(true));
                    tasks.spawn(r.serve_with_incoming_shutdown(incoming, signal))
                }
                Listener::Tls(t, tls) => {
                    tasks.spawn(r.serve_with_incoming_shutdown(tls::incoming(t, tls), signal))
                }
                Listener::Unix(u, _) => {
                    tasks.spawn(r.serve_with_incoming_shutdown(UnixListenerStream::new(u), signal))
                }
            };
        }};
    }
    for l in peer_listeners {
        info!(peer_address = %l.describe(), "serving the other members");
        serve_on!(peer_router(&shared), l);
    }
    for l in metrics_listeners {
        info!(metrics_address = %l.describe(), "serving /metrics and health probes");
        serve_on!(metrics_router(&shared), l);
    }
    if shared.raft().is_some() {
        // As etcd, a cluster member serves clients once it has published itself through the
        // log: it then has a leader and its cluster's state up to that point.
        tokio::select! {
            _ = publish_member(shared.clone()) => {}
            _ = stopping.wait_for(|s| *s) => {}
        }
    }
    let serves =
        if http_listeners.is_empty() { http::Serves::Client } else { http::Serves::GrpcOnly };
    for l in listeners {
        info!(address = %l.describe(), "ready to serve client requests");
        serve_on!(router(&shared, serves), l);
    }
    for l in http_listeners {
        info!(address = %l.describe(), "ready to serve client HTTP requests (no gRPC)");
        serve_on!(router(&shared, http::Serves::HttpOnly), l);
    }
    let expiry = tokio::spawn(lease::expiry_loop(shared.clone()));
    let snapshots = tokio::spawn(snapshot_loop(shared.clone()));
    let compactor = shared.config.auto_compaction().ok().flatten().map(|policy| {
        let shared = shared.clone();
        tokio::spawn(async move {
            let s = &shared;
            compactor::run_with(&shared.store, policy, &|rev| {
                Box::pin(async move {
                    // In a cluster only the leader compacts, through the log (etcd's compactor
                    // pauses on followers).
                    if s.raft().is_some_and(|r| !r.is_leader()) {
                        return Ok(());
                    }
                    let c = pb::CompactionRequest { revision: rev, physical: false };
                    match submit::submit(s, &None, c).await {
                        Ok(_) | Err(crate::error::Error::Compacted) => Ok(()),
                        Err(e) => Err(e),
                    }
                })
            })
            .await
        })
    });
    // Listeners stop accepting at once and let requests in flight finish; watch and keep-alive
    // streams never finish on their own, so connections still open after the grace period
    // are closed (etcd does the same).
    let grace = async move {
        let _ = stopping.wait_for(|s| *s).await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    tokio::pin!(grace);
    loop {
        tokio::select! {
            res = tasks.join_next() => match res {
                Some(res) => res.expect("listener task panicked")?,
                None => break,
            },
            _ = &mut grace => {
                info!("closing the connections still open (watch and keep-alive streams)");
                tasks.abort_all();
                break;
            }
        }
    }
    expiry.abort();
    snapshots.abort();
    if let Some(c) = compactor {
        c.abort();
    }
    Ok(())
}

/// A peer listener's service: Raft's messages and the requests forwarded to the leader.
fn peer_router(shared: &Arc<Shared>) -> tonic::transport::server::Router {
    let raft = shared.raft().expect("peer listeners serve a cluster member").clone();
    let snap_dir = shared.config.wal_options().dir.raft().snapshots();
    let peer = crate::proto::memetcdpb::raft_server::RaftServer::new(
        crate::raft::peer::PeerService::new(raft, snap_dir),
    )
    .max_decoding_message_size(usize::MAX)
    .max_encoding_message_size(usize::MAX);
    Server::builder()
        .tcp_nodelay(true)
        .initial_stream_window_size(4 << 20)
        .initial_connection_window_size(16 << 20)
        .max_concurrent_streams(u32::MAX)
        .add_service(peer)
}

/// Publishes this member's name and client URLs through the log (etcd's `publish`), so that
/// MemberList shows them on every member; retried until it goes through.
async fn publish_member(shared: Arc<Shared>) {
    let attrs = crate::proto::memetcdpb::MemberAttributes {
        member_id: shared.member_id,
        name: shared.config.name.clone(),
        client_urls: shared.config.advertised_client_urls(),
    };
    loop {
        let known = shared.members.lock().get(&shared.member_id) == Some(&attrs);
        if known {
            return;
        }
        match submit::submit(&shared, &None, attrs.clone()).await {
            Ok(_) => {
                info!(name = %attrs.name, "published this member's name and client URLs to the cluster");
                return;
            }
            Err(e) => {
                tracing::debug!(error = %e, "publishing this member's attributes; will retry")
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}

/// How long a graceful shutdown waits for open connections before closing them.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// How often the snapshot loop checks whether a snapshot is due.
const SNAPSHOT_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// Takes snapshots as the logs grow, so that they (and restart time) stay bounded: the WAL's
/// (a member alone's, or the one a member that grew into a cluster keeps writing until it
/// restarts: a member that never restarts must not fill its disk), whenever enough was logged
/// since the last one (see `wal::Options`), and the Raft log's (a cluster member's, see
/// `RaftNode::snapshot_if_due`).
async fn snapshot_loop(shared: Arc<Shared>) {
    // Where the Raft log stood at its last snapshot, once this member is in a cluster.
    let mut raft_mark = None;
    loop {
        tokio::time::sleep(SNAPSHOT_CHECK).await;
        let size = shared.store.size_bytes() as u64;
        if let Some(raft) = shared.raft() {
            let mark = raft_mark.get_or_insert_with(|| raft.snapshot_mark());
            raft.snapshot_if_due(mark, size).await;
        }
        if !shared.store.wal().is_some_and(|wal| wal.snapshot_due(size)) {
            continue;
        }
        let s = shared.clone();
        let result =
            tokio::task::spawn_blocking(move || s.store.snapshot(|| s.lessor.snapshot())).await;
        match result {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "wal: snapshot failed; will retry"),
            Err(e) => tracing::error!(error = %e, "wal: snapshot task failed"),
        }
    }
}
