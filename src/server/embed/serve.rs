//! Serving a member: its client, metrics and peer listeners, the services on them, and the
//! tasks that run beside them (lease expiry, auto-compaction, Raft snapshots, publishing this
//! member's name), until it shuts down.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;
use tower_layer::{Identity, Stack};
use tracing::info;

use crate::proto::etcdserverpb as pb;
use crate::server::etcdhttp::http;
use crate::server::etcdhttp::raft_streams;
use crate::server::etcdhttp::upgrade::{self, Divert};
use crate::server::etcdhttp::websocket;
use crate::server::etcdserver::compactor;
use crate::server::etcdserver::member::{GRPC_OVERHEAD_BYTES, Member};
use crate::server::etcdserver::submit;
use crate::server::v3rpc::auth;
use crate::server::v3rpc::cluster;
use crate::server::v3rpc::election;
use crate::server::v3rpc::floor::Floor;
use crate::server::v3rpc::health;
use crate::server::v3rpc::kv;
use crate::server::v3rpc::lease;
use crate::server::v3rpc::lock;
use crate::server::v3rpc::maintenance;
use crate::server::v3rpc::watch;
use crate::tls;

/// One bound listener.
#[derive(Debug)]
pub enum Listener {
    Tcp(TcpListener),
    /// An `https://` listener and the TLS settings its connections get.
    Tls(TcpListener, Arc<tokio_rustls::rustls::ServerConfig>),
    /// An address both an `http://` and an `https://` client URL name (etcd serves both on one
    /// socket): each connection is TLS or plaintext as its first byte says
    /// ([`tls::incoming_either`]).
    Either(TcpListener, Arc<tokio_rustls::rustls::ServerConfig>),
    Unix(tokio::net::UnixListener, String),
    /// A `unixs://` URL's socket: TLS over a unix socket.
    UnixTls(tokio::net::UnixListener, String, Arc<tokio_rustls::rustls::ServerConfig>),
}

/// What a listen URL names: the address etcd keys its listeners by (`host:port`, or a unix
/// socket's path) and how connections to it are served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scheme {
    Http,
    Https,
    Unix,
    /// TLS over a unix socket.
    Unixs,
}

impl Scheme {
    fn unix(self) -> bool {
        matches!(self, Scheme::Unix | Scheme::Unixs)
    }

    fn secure(self) -> bool {
        matches!(self, Scheme::Https | Scheme::Unixs)
    }
}

fn split_url(url: &str) -> std::io::Result<(Scheme, &str)> {
    let bad =
        || std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("bad listen URL {url:?}"));
    let (scheme, rest) = url.trim().split_once("://").ok_or_else(bad)?;
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "http" => Scheme::Http,
        "https" => Scheme::Https,
        "unix" => Scheme::Unix,
        "unixs" => Scheme::Unixs,
        _ => return Err(bad()),
    };
    let addr = if scheme.unix() { rest } else { rest.trim_end_matches('/') };
    if addr.is_empty() {
        return Err(bad());
    }
    Ok((scheme, addr))
}

impl Listener {
    /// Binds `url` (`http://host:port`, `https://host:port`, `unix://path` or
    /// `unixs://path`); an https or unixs URL needs `tls` (from --cert-file and --key-file, or
    /// their peer counterparts).
    pub async fn bind(
        url: &str,
        tls: Option<&Arc<tokio_rustls::rustls::ServerConfig>>,
    ) -> std::io::Result<Self> {
        let (scheme, addr) = split_url(url)?;
        Self::bind_addr(url, addr, !scheme.secure(), scheme.secure(), scheme.unix(), tls).await
    }

    /// Binds `addr` (a unix socket's path if `unix`), serving plaintext if `plain`, TLS if
    /// `secure` (both, on TCP: sniffed per connection).
    async fn bind_addr(
        url: &str,
        addr: &str,
        plain: bool,
        secure: bool,
        unix: bool,
        tls: Option<&Arc<tokio_rustls::rustls::ServerConfig>>,
    ) -> std::io::Result<Self> {
        let invalid = |msg: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, msg);
        let tls = match (secure, tls) {
            (false, _) => None,
            (true, Some(tls)) => Some(tls.clone()),
            (true, None) if unix => {
                return Err(invalid(format!(
                    "{url}: a unixs URL needs --cert-file and --key-file"
                )));
            }
            (true, None) => {
                return Err(invalid(format!(
                    "{url}: an https URL needs --cert-file and --key-file"
                )));
            }
        };
        if unix {
            if plain && secure {
                return Err(invalid(format!(
                    "{url}: unix:// and unixs:// on the same socket are not served by mem_etcd"
                )));
            }
            // As etcd: a socket left by an earlier run is replaced.
            let _ = std::fs::remove_file(addr);
            let l = tokio::net::UnixListener::bind(addr)?;
            return Ok(match tls {
                Some(tls) => Listener::UnixTls(l, addr.to_string(), tls),
                None => Listener::Unix(l, addr.to_string()),
            });
        }
        let sock: SocketAddr = match addr.parse() {
            Ok(a) => a,
            Err(_) => tokio::net::lookup_host(addr).await?.next().ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("bad listen URL {url:?}"),
                )
            })?,
        };
        let l = TcpListener::bind(sock).await?;
        Ok(match tls {
            Some(tls) if plain => Listener::Either(l, tls),
            Some(tls) => Listener::Tls(l, tls),
            None => Listener::Tcp(l),
        })
    }

    /// The client listeners of `--listen-client-urls` and of `--listen-client-http-urls`, one
    /// per address as etcd binds them: URLs naming the same address (the same `host:port` as
    /// written, or the same socket path) share one listener, which serves both plaintext and
    /// TLS when an `http://` and an `https://` URL name it. An address named by both flags is
    /// refused, in etcd's words. URLs with port 0 each get a free port of their own.
    pub async fn bind_client(
        urls: &[String],
        http_urls: &[String],
        tls: Option<&Arc<tokio_rustls::rustls::ServerConfig>>,
    ) -> Result<(Vec<Listener>, Vec<Listener>), String> {
        /// One address: a URL naming it, its kind of socket, the schemes that name it, and
        /// whether it is an HTTP-only one.
        struct Addr<'a> {
            url: &'a str,
            addr: &'a str,
            unix: bool,
            plain: bool,
            secure: bool,
            http_only: bool,
        }
        let mut addrs: Vec<Addr<'_>> = Vec::new();
        let tagged = urls.iter().map(|u| (u, false)).chain(http_urls.iter().map(|u| (u, true)));
        for (url, http_only) in tagged {
            let (scheme, addr) = split_url(url).map_err(|e| format!("listen on {url}: {e}"))?;
            let unix = scheme.unix();
            // Port 0 asks for a free port: each such URL gets one of its own (etcd would bind
            // the same `host:0` once).
            let any_port = !unix && addr.ends_with(":0");
            let same = |a: &Addr<'_>| !any_port && a.addr == addr && a.unix == unix;
            let i = match addrs.iter().position(same) {
                Some(i) if addrs[i].http_only != http_only => {
                    return Err(format!(
                        "cannot bind both --listen-client-urls and --listen-client-http-urls on \
                         the same url {url}"
                    ));
                }
                Some(i) => i,
                None => {
                    let (plain, secure) = (false, false);
                    addrs.push(Addr { url, addr, unix, plain, secure, http_only });
                    addrs.len() - 1
                }
            };
            addrs[i].plain |= !scheme.secure();
            addrs[i].secure |= scheme.secure();
        }
        let (mut client, mut http) = (Vec::new(), Vec::new());
        for a in addrs {
            let l = Self::bind_addr(a.url, a.addr, a.plain, a.secure, a.unix, tls)
                .await
                .map_err(|e| format!("listen on {}: {e}", a.url))?;
            if a.http_only { http.push(l) } else { client.push(l) }
        }
        Ok((client, http))
    }

    pub fn describe(&self) -> String {
        match self {
            Listener::Tcp(l) | Listener::Tls(l, _) | Listener::Either(l, _) => {
                l.local_addr().map(|a| a.to_string()).unwrap_or_default()
            }
            Listener::Unix(_, p) => format!("unix://{p}"),
            Listener::UnixTls(_, p, _) => format!("unixs://{p}"),
        }
    }
}

/// A client listener's service: etcd's gRPC services, with the HTTP endpoints in front.
type ClientRouter = tonic::transport::server::Router<Stack<http::HttpLayer, Identity>>;

/// A `--listen-metrics-urls` listener's service: the probes and /metrics, no gRPC.
fn metrics_router(shared: &Arc<Member>) -> ClientRouter {
    Server::builder()
        .accept_http1(true)
        .layer(http::HttpLayer::metrics_only(shared.clone()))
        .add_routes(tonic::service::Routes::default())
}

/// The gateway's WebSocket calls on a client listener, served beside tonic by `stack`, the
/// listener's own (see `etcdhttp::websocket`).
fn gateway(stack: http::Http) -> Arc<dyn Divert> {
    Arc::new(websocket::Gateway { max_message: stack.gateway_body_limit(), http: stack })
}

/// Which KV service the client listeners serve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kv {
    /// The member's: its store, through every check a request gets.
    Member,
    /// The floor (`v3rpc::floor`), for `benches/compare_etcd.sh floor`: the same stack in front
    /// of a KV that answers at once and touches no store.
    Floor,
}

/// A client listener's router, and the same stack for the gateway's WebSocket calls, which
/// are served beside tonic (see `etcdhttp::websocket`).
fn router(shared: &Arc<Member>, serves: http::Serves, kv: Kv) -> (ClientRouter, http::Http) {
    let recv = shared.config.max_request_bytes as usize + GRPC_OVERHEAD_BYTES;
    fn kv_call(kv: impl pb::kv_server::Kv, recv: usize) -> http::KvCall {
        let svc = pb::kv_server::KvServer::new(kv)
            .max_decoding_message_size(recv)
            .max_encoding_message_size(usize::MAX);
        Arc::new(move |req| tower_service::Service::call(&mut svc.clone(), req))
    }
    let kv = match kv {
        Kv::Member => kv_call(kv::KvService::new(shared.clone()), recv),
        Kv::Floor => kv_call(Floor::new(shared.header(0).unwrap_or_default()), recv),
    };
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
    let lock = crate::proto::v3lockpb::lock_server::LockServer::new(lock::LockService::new(
        shared.clone(),
    ))
    .max_decoding_message_size(recv);
    let election = crate::proto::v3electionpb::election_server::ElectionServer::new(
        election::ElectionService::new(shared.clone()),
    )
    .max_decoding_message_size(recv)
    .max_encoding_message_size(usize::MAX);
    // KV is not among them: `HttpLayer` calls it directly (see `http::KvCall`).
    let routes = tonic::service::Routes::new(maintenance)
        .add_service(cluster)
        .add_service(auth)
        .add_service(watch)
        .add_service(lease)
        .add_service(lock)
        .add_service(election)
        .add_service(health::service());
    let layer = http::HttpLayer::new(shared.clone(), serves, Some(kv));
    let stack = tower_layer::Layer::layer(&layer, routes.clone());
    let router = Server::builder()
        .tcp_nodelay(true)
        // HTTP/1.1 for the probes and /metrics; gRPC clients speak HTTP/2 as before.
        .accept_http1(true)
        .layer(layer)
        // etcd allows effectively unlimited streams per connection (--max-concurrent-streams);
        // kube-apiserver multiplexes every watch of a resource onto one.
        .max_concurrent_streams(shared.config.max_concurrent_streams)
        .add_routes(routes);
    (router, stack)
}

/// Serves every client listener (gRPC and HTTP, with `kv` for KV calls) and metrics listener
/// (HTTP) until `shutdown` resolves, then drains in-flight requests.
pub async fn serve(
    shared: Arc<Member>,
    kv: Kv,
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
    // Serves router `r` on listener `l` (a `client` or `peer` endpoint, as refused TLS
    // handshakes are logged) until the shutdown signal; with `ws` (a client listener's stack)
    // the gateway's WebSocket handshakes are taken out first.
    macro_rules! serve_on {
        ($r:expr, $l:expr, $endpoint:expr, $ws:expr) => {{
            let mut rx = tx.subscribe();
            let signal = async move {
                let _ = rx.recv().await;
            };
            let (r, divert): (_, Option<Arc<dyn Divert>>) = ($r, $ws);
            macro_rules! with_ws {
                ($incoming:expr) => {
                    match divert {
                        Some(divert) => {
                            let incoming = upgrade::incoming($incoming, divert);
                            tasks.spawn(r.serve_with_incoming_shutdown(incoming, signal))
                        }
                        None => tasks.spawn(r.serve_with_incoming_shutdown($incoming, signal)),
                    }
                };
            }
            match $l {
                Listener::Tcp(t) => {
                    // Without TCP_NODELAY small responses wait for delayed ACKs (tens of ms).
                    with_ws!(TcpIncoming::from(t).with_nodelay(Some(true)))
                }
                Listener::Tls(t, tls) => with_ws!(tls::incoming(t, tls, $endpoint)),
                Listener::Either(t, tls) => with_ws!(tls::incoming_either(t, tls, $endpoint)),
                Listener::Unix(u, _) => with_ws!(UnixListenerStream::new(u)),
                Listener::UnixTls(u, _, tls) => with_ws!(tls::incoming_unix(u, tls, $endpoint)),
            };
        }};
    }
    for l in peer_listeners {
        info!(peer_address = %l.describe(), "serving the other members");
        let (r, streams) = peer_router(&shared);
        serve_on!(r, l, "peer", Some(streams));
    }
    for l in metrics_listeners {
        info!(metrics_address = %l.describe(), "serving /metrics and health probes");
        serve_on!(metrics_router(&shared), l, "client", None);
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
        let address = l.describe();
        info!(address = %address, "ready to serve client requests");
        // etcd's own lines for each kind of listener, which its e2e framework waits for.
        if !matches!(l, Listener::Tls(..) | Listener::UnixTls(..)) {
            info!(traffic = "grpc+http", address = %address, "serving client traffic insecurely; this is strongly discouraged!");
        }
        if !matches!(l, Listener::Tcp(..) | Listener::Unix(..)) {
            info!(traffic = "grpc+http", address = %address, "serving client traffic securely");
        }
        let (r, stack) = router(&shared, serves, kv);
        serve_on!(r, l, "client", Some(gateway(stack)));
    }
    for l in http_listeners {
        info!(address = %l.describe(), "ready to serve client HTTP requests (no gRPC)");
        let (r, stack) = router(&shared, http::Serves::HttpOnly, kv);
        serve_on!(r, l, "client", Some(gateway(stack)));
    }
    // The hash of a compaction the restart finished (see `Store::open`), off the way to serving.
    crate::server::etcdserver::apply::walk_compactions(&shared);
    let expiry = tokio::spawn(crate::server::etcdserver::lessor::expiry_loop(shared.clone()));
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

/// The floor's second anchor (`mem_etcd bench-floor-tonic`): the floor's KV alone on `addr`,
/// served as tonic serves by default, with none of the member's layers or settings.
pub async fn serve_tonic_floor(addr: SocketAddr) -> Result<(), tonic::transport::Error> {
    let header = pb::ResponseHeader { revision: 1, raft_term: 2, ..Default::default() };
    Server::builder()
        .add_service(pb::kv_server::KvServer::new(Floor::new(header)))
        .serve(addr)
        .await
}

/// A peer listener's service: Raft's messages and the requests forwarded to the leader.
pub(in crate::server) fn peer_router(shared: &Arc<Member>) -> (ClientRouter, Arc<dyn Divert>) {
    // A member alone serves its peer URLs from its start, as etcd's does, with Raft's calls
    // refused until it grows into a cluster (`grow`), when its node appears.
    let weak = Arc::downgrade(shared);
    let node: crate::raft::rafthttp::peer::NodeSource =
        Arc::new(move || weak.upgrade().and_then(|s| s.raft().cloned()));
    let snap_dir = shared.config.wal_options().dir.raft().snapshots();
    let streams = Arc::new(raft_streams::RaftStreams { node: node.clone() });
    let peer = crate::proto::memetcdpb::raft_server::RaftServer::new(
        crate::raft::rafthttp::peer::PeerService::new(node, snap_dir),
    )
    .max_decoding_message_size(usize::MAX)
    .max_encoding_message_size(usize::MAX);
    let router = Server::builder()
        .tcp_nodelay(true)
        // etcd's peer handler is HTTP/1.1 (`/version`, `/members`, its Raft streams).
        .accept_http1(true)
        .layer(http::HttpLayer::new(shared.clone(), http::Serves::Peer, None))
        .initial_stream_window_size(4 << 20)
        .initial_connection_window_size(16 << 20)
        .max_concurrent_streams(u32::MAX)
        .add_service(peer);
    (router, streams)
}

/// Publishes this member's name and client URLs through the log (etcd's `publish`), so that
/// MemberList shows them on every member; retried until it goes through.
async fn publish_member(shared: Arc<Member>) {
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
async fn snapshot_loop(shared: Arc<Member>) {
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
