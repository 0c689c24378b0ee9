//! `etcd grpc-proxy start`: etcd's gRPC proxy, a stateless server that clients use in place of
//! the cluster. It serves etcd's gRPC services (and `/health`, `/proxy/health`) on one address
//! and passes every call on to one of the cluster's client endpoints.
//!
//! etcd's proxy decodes each call and makes it again with its own client, caching serializable
//! ranges and merging watches of the same key. This one passes the HTTP/2 stream through as it
//! is (headers, messages, trailers: a watch or a lease keep-alive stream stays one stream to
//! one member), which gives the answers etcd's gives without a cache to keep coherent. As in
//! etcd's, `Cluster.MemberList` names the proxy itself (its `--advertise-client-url`), so
//! clients that sync their endpoints stay on the proxy, and `MemberPromote` is not
//! implemented; every other call gets the cluster's own answer.
//!
//! Endpoints are taken in turn; one whose connection fails is skipped for a second (the call
//! that found it gets `UNAVAILABLE`, and the client retries). With
//! `--endpoints-auto-sync-interval` the list follows the cluster's membership: every interval
//! the client URLs of the started voting members replace it, as etcd's client syncs.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use clap::Parser;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use parking_lot::{Mutex, RwLock};
use tokio::net::TcpListener;
use tonic::body::Body;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Endpoint};
use tower::ServiceExt;

use super::flag::{go_bool, go_duration};
use crate::proto::etcdserverpb as pb;
use crate::raft::rafthttp::tls::PeerTls;
use pb::cluster_client::ClusterClient;
use pb::cluster_server::{Cluster, ClusterServer};

/// etcd's `grpc-proxy start` flags (cobra takes them before or after `start`).
#[derive(Parser, Debug)]
#[command(name = "etcd grpc-proxy", about = "grpc-proxy related command")]
pub struct Flags {
    #[command(subcommand)]
    command: Option<Command>,

    /// listen address
    #[arg(long, global = true, default_value = "127.0.0.1:23790")]
    listen_addr: String,

    /// comma separated etcd cluster endpoints
    #[arg(long, global = true, value_delimiter = ',', default_value = "127.0.0.1:2379")]
    endpoints: Vec<String>,

    /// etcd endpoints auto sync interval (disabled by default)
    #[arg(long, global = true, default_value = "0s", value_parser = go_duration)]
    endpoints_auto_sync_interval: Duration,

    /// advertise address to register (must be reachable by client)
    #[arg(long, global = true, default_value = "127.0.0.1:23790")]
    advertise_client_url: String,

    /// identify secure connections with etcd servers using this TLS certificate file
    #[arg(long, global = true)]
    cert: Option<String>,

    /// identify secure connections with etcd servers using this TLS key file
    #[arg(long, global = true)]
    key: Option<String>,

    /// verify certificates of TLS-enabled secure etcd servers using this CA bundle
    #[arg(long, global = true)]
    cacert: Option<String>,

    /// identify secure connections to the proxy using this TLS certificate file
    #[arg(long, global = true)]
    cert_file: Option<String>,

    /// identify secure connections to the proxy using this TLS key file
    #[arg(long, global = true)]
    key_file: Option<String>,

    /// verify certificates of TLS-enabled secure proxy using this CA bundle
    #[arg(long, global = true)]
    trusted_ca_file: Option<String>,

    /// proxy client certificate revocation list file
    #[arg(long, global = true)]
    client_crl_file: Option<String>,

    /// comma-separated list of supported TLS cipher suites between client/proxy
    #[arg(long, global = true, value_delimiter = ',')]
    listen_cipher_suites: Vec<String>,

    /// proxy TLS using generated certificates
    #[arg(long, global = true, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "false", value_parser = go_bool)]
    auto_tls: bool,

    /// the validity period of the proxy certificates, unit is year
    #[arg(long, global = true, default_value = "1")]
    self_signed_cert_validity: u32,

    /// data directory for persistent data (the --auto-tls certificates)
    #[arg(long, global = true, default_value = "default.proxy")]
    data_dir: String,

    /// minimum TLS version supported by grpc proxy: TLS1.2, TLS1.3
    #[arg(long, global = true, default_value = "TLS1.2")]
    tls_min_version: String,

    /// maximum TLS version supported by grpc proxy: TLS1.2, TLS1.3 (empty: the newest)
    #[arg(long, global = true, default_value = "")]
    tls_max_version: String,

    /// Flags of etcd's proxy that shape its own gRPC client and server connections
    /// (keepalives, message limits, stream limits, logging); they change nothing in a proxy
    /// that passes streams through, and are listed in a log line when given.
    #[arg(long = "dial-keepalive-time", global = true, hide = true)]
    _dial_keepalive_time: Option<String>,
    #[arg(long = "dial-keepalive-timeout", global = true, hide = true)]
    _dial_keepalive_timeout: Option<String>,
    #[arg(long = "permit-without-stream", global = true, hide = true, num_args = 0..=1,
          require_equals = true, default_missing_value = "true")]
    _permit_without_stream: Option<String>,
    #[arg(long = "max-send-bytes", global = true, hide = true)]
    _max_send_bytes: Option<String>,
    #[arg(long = "max-recv-bytes", global = true, hide = true)]
    _max_recv_bytes: Option<String>,
    #[arg(long = "grpc-keepalive-min-time", global = true, hide = true)]
    _grpc_keepalive_min_time: Option<String>,
    #[arg(long = "grpc-keepalive-interval", global = true, hide = true)]
    _grpc_keepalive_interval: Option<String>,
    #[arg(long = "grpc-keepalive-timeout", global = true, hide = true)]
    _grpc_keepalive_timeout: Option<String>,
    #[arg(long = "max-concurrent-streams", global = true, hide = true)]
    _max_concurrent_streams: Option<String>,
    #[arg(long = "experimental-enable-grpc-logging", global = true, hide = true,
          num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    _experimental_enable_grpc_logging: Option<String>,
    #[arg(long = "debug", global = true, hide = true, num_args = 0..=1, require_equals = true,
          default_missing_value = "true")]
    _debug: Option<String>,

    /// Flags of etcd's proxy this one does not implement: given, they stop it at start
    /// rather than be silently ignored.
    #[arg(long = "discovery-srv", global = true, hide = true)]
    discovery_srv: Option<String>,
    #[arg(long = "discovery-srv-name", global = true, hide = true)]
    discovery_srv_name: Option<String>,
    #[arg(long = "insecure-discovery", global = true, hide = true, num_args = 0..=1,
          require_equals = true, default_missing_value = "true")]
    insecure_discovery: Option<String>,
    #[arg(long = "insecure-skip-tls-verify", global = true, hide = true, num_args = 0..=1,
          require_equals = true, default_missing_value = "true")]
    insecure_skip_tls_verify: Option<String>,
    #[arg(long = "metrics-addr", global = true, hide = true)]
    metrics_addr: Option<String>,
    #[arg(long = "resolver-prefix", global = true, hide = true)]
    resolver_prefix: Option<String>,
    #[arg(long = "resolver-ttl", global = true, hide = true)]
    resolver_ttl: Option<String>,
    #[arg(long = "namespace", global = true, hide = true)]
    namespace: Option<String>,
    #[arg(long = "enable-pprof", global = true, hide = true, num_args = 0..=1,
          require_equals = true, default_missing_value = "true")]
    enable_pprof: Option<String>,
    #[arg(long = "experimental-serializable-ordering", global = true, hide = true,
          num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    experimental_serializable_ordering: Option<String>,
    #[arg(long = "experimental-leasing-prefix", global = true, hide = true)]
    experimental_leasing_prefix: Option<String>,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// start the grpc proxy
    Start,
}

impl Flags {
    /// The flags given that this proxy does not implement.
    fn unsupported(&self) -> Vec<&'static str> {
        let given = [
            ("--discovery-srv", self.discovery_srv.is_some()),
            ("--discovery-srv-name", self.discovery_srv_name.is_some()),
            ("--insecure-discovery", self.insecure_discovery.as_deref().is_some_and(is_true)),
            (
                "--insecure-skip-tls-verify",
                self.insecure_skip_tls_verify.as_deref().is_some_and(is_true),
            ),
            ("--metrics-addr", self.metrics_addr.as_deref().is_some_and(|a| !a.is_empty())),
            ("--resolver-prefix", self.resolver_prefix.as_deref().is_some_and(|a| !a.is_empty())),
            ("--resolver-ttl", self.resolver_ttl.as_deref().is_some_and(|a| a != "0")),
            ("--namespace", self.namespace.as_deref().is_some_and(|a| !a.is_empty())),
            ("--enable-pprof", self.enable_pprof.as_deref().is_some_and(is_true)),
            (
                "--experimental-serializable-ordering",
                self.experimental_serializable_ordering.as_deref().is_some_and(is_true),
            ),
            (
                "--experimental-leasing-prefix",
                self.experimental_leasing_prefix.as_deref().is_some_and(|a| !a.is_empty()),
            ),
        ];
        given.iter().filter(|(_, g)| *g).map(|(n, _)| *n).collect()
    }

    /// The given flags that change nothing here.
    fn no_effect(&self) -> Vec<&'static str> {
        let given = [
            ("--dial-keepalive-time", self._dial_keepalive_time.is_some()),
            ("--dial-keepalive-timeout", self._dial_keepalive_timeout.is_some()),
            ("--permit-without-stream", self._permit_without_stream.is_some()),
            ("--max-send-bytes", self._max_send_bytes.is_some()),
            ("--max-recv-bytes", self._max_recv_bytes.is_some()),
            ("--grpc-keepalive-min-time", self._grpc_keepalive_min_time.is_some()),
            ("--grpc-keepalive-interval", self._grpc_keepalive_interval.is_some()),
            ("--grpc-keepalive-timeout", self._grpc_keepalive_timeout.is_some()),
            ("--max-concurrent-streams", self._max_concurrent_streams.is_some()),
            (
                "--experimental-enable-grpc-logging",
                self._experimental_enable_grpc_logging.is_some(),
            ),
            ("--debug", self._debug.is_some()),
        ];
        given.iter().filter(|(_, g)| *g).map(|(n, _)| *n).collect()
    }

    /// The listener's TLS, read by the server's own TLS code from the same-named flags.
    fn listen_tls(&self) -> Result<Option<Arc<tokio_rustls::rustls::ServerConfig>>, String> {
        let mut args = vec![
            format!("--tls-min-version={}", self.tls_min_version),
            format!("--tls-max-version={}", self.tls_max_version),
        ];
        let (mut cert, mut key) = (self.cert_file.clone(), self.key_file.clone());
        if cert.is_none() && key.is_none() && self.trusted_ca_file.is_none() && self.auto_tls {
            let dir = std::path::Path::new(&self.data_dir).join("fixtures").join("proxy");
            let url = format!("https://{}", self.listen_addr);
            let (c, k) = crate::tls::self_signed(&dir, &[url], self.self_signed_cert_validity)?;
            cert = Some(c.display().to_string());
            key = Some(k.display().to_string());
        }
        for (flag, v) in [
            ("cert-file", &cert),
            ("key-file", &key),
            ("trusted-ca-file", &self.trusted_ca_file),
            ("client-crl-file", &self.client_crl_file),
        ] {
            if let Some(v) = v {
                args.push(format!("--{flag}={v}"));
            }
        }
        if !self.listen_cipher_suites.is_empty() {
            args.push(format!("--cipher-suites={}", self.listen_cipher_suites.join(",")));
        }
        let config = crate::config::from_flags(&args)?;
        config.tls_versions()?;
        if cert.is_none() && key.is_none() {
            // etcd's proxy serves TLS only with a certificate; a CA alone is an error.
            if self.trusted_ca_file.is_some() {
                return Err("--trusted-ca-file needs --cert-file and --key-file".into());
            }
            return Ok(None);
        }
        crate::tls::server_config(&config)
    }

    /// How the proxy dials `https://` endpoints: the server's peer dialer, from the same
    /// files (etcd's proxy presents `--cert` to the members, as a member presents its peer
    /// certificate).
    fn dial_tls(&self) -> Result<Option<PeerTls>, String> {
        if self.cert.is_none() && self.key.is_none() {
            if self.cacert.is_some() {
                return Err("--cacert needs --cert and --key here".into());
            }
            return Ok(None);
        }
        // etcd's proxy asks for a certificate without a common name: the members would take
        // its common name as the user of every call it passes on (see `auth::cert`).
        if let Some(cert) = &self.cert {
            let der = crate::raft::rafthttp::tls::read_certs(std::path::Path::new(cert), "--cert")?;
            if let Some(cn) = der.first().and_then(|c| crate::auth::cert::common_name(c))
                && !cn.is_empty()
            {
                return Err(format!("cert has non empty Common Name ({cn}): {cert}"));
            }
        }
        crate::tls::client_from_files(
            self.cacert.as_deref(),
            self.cert.as_deref(),
            self.key.as_deref(),
        )
    }
}

fn is_true(v: &str) -> bool {
    go_bool(v).unwrap_or(true)
}

/// Runs the proxy until the process is stopped; the exit status on a start-up error.
pub async fn run(flags: Flags) -> i32 {
    if flags.command.is_none() {
        use clap::CommandFactory;
        let _ = Flags::command().print_help();
        return 0;
    }
    let unsupported = flags.unsupported();
    if !unsupported.is_empty() {
        eprintln!("mem_etcd grpc-proxy: not supported: {}", unsupported.join(", "));
        return 1;
    }
    let no_effect = flags.no_effect();
    if !no_effect.is_empty() {
        tracing::info!(flags = ?no_effect, "flags with no effect in a proxy that passes streams through");
    }
    let tls = match flags.listen_tls() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    if tls.is_some() {
        tracing::info!(
            cert_file = ?flags.cert_file,
            key_file = ?flags.key_file,
            trusted_ca_file = ?flags.trusted_ca_file,
            "gRPC proxy server TLS"
        );
    }
    let dial_tls = match flags.dial_tls() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    let backends = Arc::new(Backends {
        list: RwLock::new(Vec::new()),
        next: AtomicUsize::new(0),
        tls: dial_tls,
    });
    if let Err(e) = backends.set(&flags.endpoints) {
        eprintln!("{e}");
        return 1;
    }
    let listener = match TcpListener::bind(flags.listen_addr.as_str()).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("listen tcp {}: {e}", flags.listen_addr);
            return 1;
        }
    };
    tracing::info!(address = %flags.listen_addr, "listening for gRPC proxy client requests");
    if !flags.endpoints_auto_sync_interval.is_zero() {
        tokio::spawn(auto_sync(backends.clone(), flags.endpoints_auto_sync_interval));
    }
    let proxy = Proxy {
        cluster: ClusterServer::new(ClusterProxy {
            backends: backends.clone(),
            advertise: flags.advertise_client_url.clone(),
        }),
        backends,
    };
    let server = tonic::transport::Server::builder().accept_http1(true);
    tracing::info!(address = %flags.listen_addr, "started gRPC proxy");
    let served = match tls {
        Some(tls) => {
            server.serve_with_incoming(proxy, crate::tls::incoming(listener, tls, "client")).await
        }
        None => {
            let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
            server.serve_with_incoming(proxy, incoming).await
        }
    };
    match served {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

/// The cluster's client endpoints the proxy passes calls to.
#[derive(Debug)]
struct Backends {
    /// Replaced whole by an auto-sync, read by every call: a read lock held only to clone
    /// one channel.
    list: RwLock<Vec<Arc<Backend>>>,
    /// Whose turn it is.
    next: AtomicUsize,
    tls: Option<PeerTls>,
}

#[derive(Debug)]
struct Backend {
    url: String,
    channel: Channel,
    /// Set when a connection to it failed: it is skipped until then (its channel keeps
    /// trying to reconnect meanwhile).
    down_until: Mutex<Option<Instant>>,
}

/// How long an endpoint whose connection failed is passed over.
const DOWN_FOR: Duration = Duration::from_secs(1);

impl Backends {
    /// Makes `urls` the endpoints, keeping the channels of those already there.
    fn set(&self, urls: &[String]) -> Result<(), String> {
        let old: BTreeMap<String, Arc<Backend>> =
            self.list.read().iter().map(|b| (b.url.clone(), b.clone())).collect();
        let mut list = Vec::new();
        for url in urls {
            if let Some(b) = old.get(url) {
                list.push(b.clone());
                continue;
            }
            // etcd's client takes `host:port` as plain http.
            let uri = if url.contains("://") { url.clone() } else { format!("http://{url}") };
            let endpoint = Endpoint::from_shared(uri.clone())
                .map_err(|e| format!("bad endpoint {url:?}: {e}"))?
                .connect_timeout(Duration::from_secs(5))
                .tcp_nodelay(true);
            let channel = match (&self.tls, uri.starts_with("https://")) {
                (Some(tls), true) => tls.connect_lazy(endpoint),
                (None, true) => {
                    return Err(format!("endpoint {url}: https needs --cert, --key and --cacert"));
                }
                _ => endpoint.connect_lazy(),
            };
            list.push(Arc::new(Backend {
                url: url.clone(),
                channel,
                down_until: Mutex::new(None),
            }));
        }
        if list.is_empty() {
            return Err("no endpoints".into());
        }
        *self.list.write() = list;
        Ok(())
    }

    fn urls(&self) -> Vec<String> {
        self.list.read().iter().map(|b| b.url.clone()).collect()
    }

    /// The next endpoint not known to be down, or the next one if all are.
    fn pick(&self) -> Arc<Backend> {
        let list = self.list.read();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        (0..list.len())
            .map(|i| &list[(start + i) % list.len()])
            .find(|b| b.down_until.lock().is_none_or(|t| t <= now))
            .unwrap_or(&list[start % list.len()])
            .clone()
    }
}

/// Every `interval`, the client URLs of the cluster's started voting members become the
/// endpoints (etcd's client `Sync`: members with a name, learners left out).
async fn auto_sync(backends: Arc<Backends>, interval: Duration) {
    loop {
        tokio::time::sleep(interval).await;
        let b = backends.pick();
        let mut client = ClusterClient::new(b.channel.clone());
        let call = client.member_list(pb::MemberListRequest { linearizable: true });
        let members = match tokio::time::timeout(interval.max(Duration::from_secs(1)), call).await {
            Ok(Ok(r)) => r.into_inner().members,
            Ok(Err(e)) => {
                tracing::warn!(endpoint = %b.url, error = %e.message(), "endpoints auto sync failed");
                continue;
            }
            Err(_) => continue,
        };
        let urls: Vec<String> = members
            .into_iter()
            .filter(|m| !m.name.is_empty() && !m.is_learner)
            .flat_map(|m| m.client_ur_ls)
            .collect();
        if urls.is_empty() || urls == backends.urls() {
            continue;
        }
        match backends.set(&urls) {
            Ok(()) => tracing::info!(endpoints = ?urls, "set endpoints"),
            Err(e) => tracing::warn!(error = %e, "endpoints auto sync failed"),
        }
    }
}

/// The proxy's one service: health endpoints and the Cluster service here, every other call
/// passed on.
#[derive(Clone, Debug)]
struct Proxy {
    backends: Arc<Backends>,
    cluster: ClusterServer<ClusterProxy>,
}

type ProxyFuture = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

impl tower_service::Service<Request<Body>> for Proxy {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = ProxyFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> ProxyFuture {
        let path = req.uri().path();
        let grpc = req
            .headers()
            .get(header::CONTENT_TYPE)
            .is_some_and(|t| t.as_bytes().starts_with(b"application/grpc"));
        if grpc && path.starts_with("/etcdserverpb.Cluster/") {
            let cluster = self.cluster.clone();
            return Box::pin(async move {
                Ok(cluster.oneshot(req).await.unwrap_or_else(|e| match e {}))
            });
        }
        let backends = self.backends.clone();
        if grpc {
            return Box::pin(async move { Ok(forward(&backends, req).await) });
        }
        let proxy_health = match path {
            "/health" => false,
            "/proxy/health" => true,
            _ => {
                return Box::pin(async { Ok(text(StatusCode::NOT_FOUND, "404 page not found\n")) });
            }
        };
        let method = req.method().clone();
        Box::pin(async move {
            if method != Method::GET {
                let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed\n");
                r.headers_mut().insert(header::ALLOW, HeaderValue::from_static("GET"));
                return Ok(r);
            }
            let b = backends.pick();
            let reason = match check_get(&b).await {
                Some(r) => Some(r),
                None if proxy_health => check_watch(&b).await,
                None => None,
            };
            Ok(match reason {
                None => text(StatusCode::OK, "{\"health\":\"true\",\"reason\":\"\"}"),
                Some(r) => {
                    let body = serde_json::json!({"health": "false", "reason": r}).to_string();
                    text(StatusCode::SERVICE_UNAVAILABLE, format!("{body}\n"))
                }
            })
        })
    }
}

/// Passes one call to the next endpoint. A connection that fails marks the endpoint down and
/// answers `UNAVAILABLE`, as a client's own dial failure does.
async fn forward(backends: &Backends, req: Request<Body>) -> Response<Body> {
    let b = backends.pick();
    match b.channel.clone().oneshot(req).await {
        Ok(res) => res,
        Err(e) => {
            *b.down_until.lock() = Some(Instant::now() + DOWN_FOR);
            tracing::warn!(endpoint = %b.url, error = %e, "endpoint unreachable");
            tonic::Status::unavailable(format!("{}: {e}", b.url)).into_http()
        }
    }
}

/// etcd's proxy health: a range of key `a` within a second (a permission error counts as
/// healthy: the cluster answered). An endpoint that cannot be reached is tried again until the
/// second is up, as etcd's client retries, so the reason is then the deadline.
async fn check_get(b: &Backend) -> Option<String> {
    let mut kv = pb::kv_client::KvClient::new(b.channel.clone());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
    loop {
        let call = kv.range(pb::RangeRequest { key: "a".into(), ..Default::default() });
        match tokio::time::timeout_at(deadline, call).await {
            Ok(Ok(_)) => return None,
            Ok(Err(s)) if s.message() == "etcdserver: permission denied" => return None,
            Ok(Err(s)) if !unreachable(&s) => {
                return Some(format!("GET ERROR:{}", s.message()));
            }
            Ok(Err(_)) if tokio::time::Instant::now() + Duration::from_millis(50) < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            _ => return Some("GET ERROR:context deadline exceeded".into()),
        }
    }
}

/// Whether a call failed because the endpoint could not be reached. A connection that goes
/// away under a call in flight (a cluster stopping) is tonic's `UNKNOWN` "transport error",
/// where grpc-go's client, hence etcd's proxy, sees `UNAVAILABLE` and tries again.
fn unreachable(s: &tonic::Status) -> bool {
    s.code() == tonic::Code::Unavailable
        || (s.code() == tonic::Code::Unknown && s.message() == "transport error")
}

/// `/proxy/health` also needs a watch created within 3 seconds.
async fn check_watch(b: &Backend) -> Option<String> {
    let mut w = pb::watch_client::WatchClient::new(b.channel.clone());
    let create = pb::WatchRequest {
        request_union: Some(pb::watch_request::RequestUnion::CreateRequest(
            pb::WatchCreateRequest { key: "a".into(), ..Default::default() },
        )),
    };
    // The stream stays open until the answer came (closing it first would cancel the watch).
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let _ = tx.send(create).await;
    let call = async move {
        let mut stream =
            w.watch(tokio_stream::wrappers::ReceiverStream::new(rx)).await?.into_inner();
        stream.message().await
    };
    let created = tokio::time::timeout(Duration::from_secs(3), call).await;
    drop(tx);
    match created {
        Ok(Ok(Some(_))) => None,
        _ => Some("WATCH TIMEOUT".into()),
    }
}

fn text(status: StatusCode, body: impl Into<String>) -> Response<Body> {
    let mut r = Response::new(Body::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

/// The Cluster service as etcd's proxy answers it.
#[derive(Debug)]
struct ClusterProxy {
    backends: Arc<Backends>,
    /// `--advertise-client-url`: what MemberList names (etcd's proxy without a resolver
    /// prefix lists itself alone).
    advertise: String,
}

impl ClusterProxy {
    fn client(&self) -> ClusterClient<Channel> {
        ClusterClient::new(self.backends.pick().channel.clone())
    }
}

type Reply<T> = Result<tonic::Response<T>, tonic::Status>;

#[tonic::async_trait]
impl Cluster for ClusterProxy {
    async fn member_add(
        &self,
        r: tonic::Request<pb::MemberAddRequest>,
    ) -> Reply<pb::MemberAddResponse> {
        self.client().member_add(r.into_inner()).await
    }

    async fn member_remove(
        &self,
        r: tonic::Request<pb::MemberRemoveRequest>,
    ) -> Reply<pb::MemberRemoveResponse> {
        self.client().member_remove(r.into_inner()).await
    }

    async fn member_update(
        &self,
        r: tonic::Request<pb::MemberUpdateRequest>,
    ) -> Reply<pb::MemberUpdateResponse> {
        self.client().member_update(r.into_inner()).await
    }

    async fn member_list(
        &self,
        r: tonic::Request<pb::MemberListRequest>,
    ) -> Reply<pb::MemberListResponse> {
        if self.advertise.is_empty() {
            return self.client().member_list(r.into_inner()).await;
        }
        let name = hostname();
        Ok(tonic::Response::new(pb::MemberListResponse {
            members: vec![pb::Member {
                name,
                client_ur_ls: vec![self.advertise.clone()],
                ..Default::default()
            }],
            ..Default::default()
        }))
    }

    async fn member_promote(
        &self,
        _: tonic::Request<pb::MemberPromoteRequest>,
    ) -> Reply<pb::MemberPromoteResponse> {
        // grpc-go's answer to a handler's plain error.
        Err(tonic::Status::unknown("not implemented"))
    }
}

/// The machine's host name, as Go's `os.Hostname` reads it.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}
