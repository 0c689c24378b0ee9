//! HTTP beside gRPC, as etcd serves it on its client port: `/health`, `/livez`, `/readyz`,
//! `/version`, `/metrics`, and the JSON gateway under `/v3/` (`etcdhttp::gateway`). Listeners of
//! `--listen-metrics-urls` serve only the probes and `/metrics` (no gRPC, no `/version`, as
//! etcd's). With `--listen-client-http-urls`, as in etcd, those serve the HTTP endpoints and no
//! gRPC, and the client URLs gRPC alone.
//!
//! It is a layer in front of the gRPC routes: a request whose path is a known gRPC method goes
//! on to the routes and is counted (`grpc_server_started_total`, `grpc_server_handled_total`);
//! anything else is answered here. KV calls, the hot ones, go straight to the KV service
//! ([`KvCall`]) instead of through the routes. The layer's future and body wrapper are plain enums and
//! structs over tonic's (which are `Unpin`), so a unary call costs a method lookup and a few
//! atomic adds, and no allocation; a streaming call's request body is wrapped (one allocation
//! per stream) to count the messages it brings.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use tonic::body::Body;
use tonic::codegen::BoxFuture;
use tonic::service::Routes;

use crate::metrics::grpc::{GrpcKind, MessageCounter};
use crate::server::etcdhttp::metrics;
use crate::server::etcdserver::member::Member;

/// What a listener serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Serves {
    /// A client URL: gRPC, the gateway, probes, /version, /metrics.
    Client,
    /// A client URL when --listen-client-http-urls is given: gRPC only.
    GrpcOnly,
    /// A --listen-client-http-urls URL: the gateway, probes, /version, /metrics; no gRPC.
    HttpOnly,
    /// A --listen-metrics-urls URL: probes and /metrics.
    Metrics,
    /// A peer URL: the peer service (gRPC), and etcd's peer `/version` and `/members`.
    Peer,
}

impl Serves {
    fn grpc(self) -> bool {
        matches!(self, Serves::Client | Serves::GrpcOnly | Serves::Peer)
    }

    fn http(self) -> bool {
        matches!(self, Serves::Client | Serves::HttpOnly)
    }
}

/// The KV service, called with each request under [`KV_PATH`]. tonic's routes are an axum
/// router that boxes a request's body twice, stores the path's captures and boxes the answer's
/// body twice more: on a one-key read that was a tenth of the serving stack's CPU.
pub type KvCall = Arc<dyn Fn(Request<Body>) -> BoxFuture<Response<Body>, Infallible> + Send + Sync>;

/// Where KV methods live (`etcdserverpb.KV`'s gRPC paths).
pub const KV_PATH: &str = "/etcdserverpb.KV/";

/// Puts the HTTP endpoints in front of a listener's gRPC routes.
#[derive(Clone)]
pub struct HttpLayer {
    shared: Arc<Member>,
    serves: Serves,
    /// The listener's KV service, where it serves one (client listeners).
    kv: Option<KvCall>,
}

impl std::fmt::Debug for HttpLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpLayer").field("serves", &self.serves).finish()
    }
}

impl HttpLayer {
    pub fn new(shared: Arc<Member>, serves: Serves, kv: Option<KvCall>) -> Self {
        Self { shared, serves, kv }
    }

    pub fn metrics_only(shared: Arc<Member>) -> Self {
        Self { shared, serves: Serves::Metrics, kv: None }
    }
}

impl tower_layer::Layer<Routes> for HttpLayer {
    type Service = Http;

    fn layer(&self, routes: Routes) -> Http {
        Http { routes, kv: self.kv.clone(), shared: self.shared.clone(), serves: self.serves }
    }
}

#[derive(Clone)]
pub struct Http {
    routes: Routes,
    /// See [`HttpLayer::kv`].
    kv: Option<KvCall>,
    shared: Arc<Member>,
    serves: Serves,
}

impl std::fmt::Debug for Http {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Http").field("serves", &self.serves).finish()
    }
}

impl Http {
    /// Whether this listener's JSON gateway answers `path` (etcd's gateway is on the listeners
    /// that serve HTTP, with --enable-grpc-gateway).
    pub fn serves_gateway(&self, path: &str) -> bool {
        self.serves.http()
            && self.shared.config.enable_grpc_gateway
            && crate::server::etcdhttp::gateway::handles(path)
    }

    /// The longest JSON body the gateway reads for one request.
    pub fn gateway_body_limit(&self) -> usize {
        4 * (self.shared.config.max_request_bytes as usize)
            + crate::server::etcdserver::member::GRPC_OVERHEAD_BYTES
    }
}

impl tower_service::Service<Request<Body>> for Http {
    type Response = Response<Body>;
    type Error = std::convert::Infallible;
    type Future = HttpFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        tower_service::Service::<Request<Body>>::poll_ready(&mut self.routes, cx)
    }

    fn call(&mut self, req: Request<Body>) -> HttpFuture {
        if self.serves.grpc() {
            let method = self.shared.grpc_stats.method(req.uri().path());
            let grpc = req
                .headers()
                .get(header::CONTENT_TYPE)
                .is_some_and(|t| t.as_bytes().starts_with(b"application/grpc"));
            let stats = &self.shared.grpc_stats;
            if let Some(m) = method {
                stats.started(m);
                stats.client_request(
                    m,
                    req.headers().get("client-api-version").map(|v| v.as_bytes()),
                );
            }
            // etcd's `WithRequireLeader`: a cluster member without a leader refuses the call
            // at once, so the client tries another member (a member alone always leads).
            if let Some(raft) = self.shared.raft()
                && req.headers().get("hasleader").is_some_and(|v| v.as_bytes() == b"true")
                && raft.leader().is_none()
            {
                let refused = tonic::Status::from(crate::error::Error::NoLeader).into_http();
                return HttpFuture::Ready(Some(refused));
            }
            // Unknown methods too, for gRPC's own UNIMPLEMENTED answer (not counted, as in
            // etcd). (The routes are always ready: no need to swap in a clone polled ready.)
            if method.is_some() || grpc {
                let req = match method {
                    // A unary call's one request (go-grpc-prometheus counts it as its handler
                    // starts, before any answer).
                    Some(m) if stats.kind(m) == GrpcKind::Unary => {
                        stats.received(m, 1);
                        req
                    }
                    Some(m) => req.map(|b| {
                        Body::new(CountReceived {
                            body: b,
                            shared: self.shared.clone(),
                            method: m,
                            messages: MessageCounter::default(),
                        })
                    }),
                    None => req,
                };
                let started = self.shared.config.extensive_metrics().then(std::time::Instant::now);
                let fut = match &self.kv {
                    Some(kv) if req.uri().path().starts_with(KV_PATH) => GrpcCall::Kv(kv(req)),
                    _ => GrpcCall::Routes(tower_service::Service::call(&mut self.routes, req)),
                };
                return HttpFuture::Grpc { fut, shared: self.shared.clone(), method, started };
            }
        }
        if matches!(self.serves, Serves::Metrics) || self.serves.http() {
            let path = req.uri().path();
            if matches!(path, "/health" | "/livez" | "/readyz") {
                let (shared, path) = (self.shared.clone(), path.to_string());
                let query = req.uri().query().unwrap_or("").to_string();
                return HttpFuture::Boxed(Box::pin(async move {
                    checked(&shared, &path, &query).await
                }));
            }
        }
        if !self.serves.http() {
            let answer = match self.serves {
                Serves::Metrics => answer(&self.shared, &req, false),
                Serves::Peer => peer_answer(&self.shared, &req),
                _ => not_found(),
            };
            return HttpFuture::Ready(Some(answer));
        }
        if self.serves_gateway(req.uri().path()) {
            // Its gRPC calls come back through this same stack (on an HTTP-only listener too:
            // the routes are there, only clients' own gRPC calls are not taken).
            let limit = self.gateway_body_limit();
            let mut inner = self.clone();
            inner.serves = Serves::Client;
            return HttpFuture::Boxed(Box::pin(crate::server::etcdhttp::gateway::serve(
                inner, req, limit,
            )));
        }
        HttpFuture::Ready(Some(answer(&self.shared, &req, true)))
    }
}

/// The routes' future (tonic does not export its name).
type RoutesFuture = <Routes as tower_service::Service<Request<Body>>>::Future;

/// A gRPC call's answer on its way: from the KV service, or from the routes.
// The routes' future is the big one (axum's); boxing it would allocate per call.
#[allow(clippy::large_enum_variant)]
pub enum GrpcCall {
    Kv(BoxFuture<Response<Body>, Infallible>),
    Routes(RoutesFuture),
}

impl Future for GrpcCall {
    type Output = Result<Response<Body>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            GrpcCall::Kv(f) => f.as_mut().poll(cx),
            GrpcCall::Routes(f) => Pin::new(f).poll(cx),
        }
    }
}

/// A gRPC call on its way, or an HTTP answer.
// The gRPC variant is the big one and the common one: boxing it would allocate per call.
#[allow(clippy::large_enum_variant)]
pub enum HttpFuture {
    Grpc {
        fut: GrpcCall,
        shared: Arc<Member>,
        method: Option<usize>,
        /// When the call started, to time it (`--metrics=extensive` only).
        started: Option<std::time::Instant>,
    },
    Ready(Option<Response<Body>>),
    /// An answer that waits: the JSON gateway's calls, the health checks' reads.
    Boxed(crate::server::etcdhttp::gateway::GatewayFuture),
}

impl std::fmt::Debug for HttpFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HttpFuture::Grpc { method, .. } => {
                f.debug_struct("Grpc").field("method", method).finish()
            }
            HttpFuture::Ready(_) => f.write_str("Ready"),
            HttpFuture::Boxed(_) => f.write_str("Boxed"),
        }
    }
}

impl Future for HttpFuture {
    type Output = Result<Response<Body>, std::convert::Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            HttpFuture::Ready(r) => Poll::Ready(Ok(r.take().expect("polled after completion"))),
            HttpFuture::Boxed(f) => f.as_mut().poll(cx).map(Ok),
            HttpFuture::Grpc { fut, shared, method, started } => {
                let res = std::task::ready!(Pin::new(fut).poll(cx));
                let Ok(mut res) = res;
                too_large_as_grpc_go(res.headers_mut());
                let Some(method) = *method else { return Poll::Ready(Ok(res)) };
                // An error answered before any message (the usual way a call fails) carries
                // its status in the headers ("trailers-only").
                let code = res.headers().get("grpc-status").map(parse_code);
                let stats = &shared.grpc_stats;
                let started = *started;
                let timed = |stats: &crate::metrics::grpc::GrpcStats| {
                    if let Some(t) = started {
                        stats.handling(method, t.elapsed());
                    }
                };
                Poll::Ready(Ok(match (stats.kind(method), code) {
                    (_, Some(code)) => {
                        stats.handled(method, code);
                        timed(stats);
                        res
                    }
                    // A unary call that succeeded: its OK status is in the trailers, its one
                    // answer in the body.
                    (GrpcKind::Unary, None) => {
                        stats.handled(method, 0);
                        stats.sent(method, 1);
                        timed(stats);
                        res
                    }
                    // A stream ends when its body does.
                    _ => res.map(|b| {
                        Body::new(CountOnEnd {
                            body: b,
                            shared: shared.clone(),
                            method,
                            done: false,
                            started,
                            messages: MessageCounter::default(),
                        })
                    }),
                }))
            }
        }
    }
}

/// A request over the receive limit: tonic's decoder answers OUT_OF_RANGE, which etcd clients
/// read as an etcd error (compacted or future revision); grpc-go, hence etcd, answers
/// RESOURCE_EXHAUSTED "grpc: received message larger than max (N vs. M)". Rewritten here, where
/// every answer passes, so that clients see etcd's. Only error answers are looked at: the
/// headers of a call refused before it started, and the trailers of a stream that failed on a
/// later message (a watch or keep-alive request over the limit).
fn too_large_as_grpc_go(h: &mut http::HeaderMap) {
    if h.get("grpc-status").is_none_or(|c| c.as_bytes() != b"11") {
        return;
    }
    let Some(msg) = h.get("grpc-message").and_then(|m| m.to_str().ok()) else { return };
    let msg = msg.replace("%20", " ");
    if !msg.contains("decoded message length too large") {
        return;
    }
    // "... found {len} bytes, the limit is: {limit} bytes"
    let numbers: Vec<&str> =
        msg.split(|c: char| !c.is_ascii_digit()).filter(|n| !n.is_empty()).collect();
    let text = match numbers.as_slice() {
        [len, limit, ..] => format!("grpc: received message larger than max ({len} vs. {limit})"),
        _ => "grpc: received message larger than max".to_string(),
    };
    h.insert("grpc-status", HeaderValue::from_static("8"));
    if let Ok(v) = HeaderValue::from_str(&text) {
        h.insert("grpc-message", v);
    }
}

fn parse_code(v: &HeaderValue) -> u8 {
    v.to_str().ok().and_then(|s| s.parse().ok()).filter(|c| *c <= 16).unwrap_or(2)
}

/// A streaming call's response body, counting the messages it sends and the call as handled
/// when it ends: with the status in its trailers, or as Canceled when the client goes away
/// first.
struct CountOnEnd {
    body: Body,
    shared: Arc<Member>,
    method: usize,
    done: bool,
    started: Option<std::time::Instant>,
    messages: MessageCounter,
}

impl CountOnEnd {
    fn finish(&mut self, code: u8) {
        if !self.done {
            self.done = true;
            self.shared.grpc_stats.handled(self.method, code);
            if let Some(t) = self.started {
                self.shared.grpc_stats.handling(self.method, t.elapsed());
            }
        }
    }
}

/// A streaming call's request body, counting the messages the client sends.
struct CountReceived {
    body: Body,
    shared: Arc<Member>,
    method: usize,
    messages: MessageCounter,
}

impl http_body::Body for CountReceived {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, tonic::Status>>> {
        let this = self.get_mut();
        let frame = std::task::ready!(Pin::new(&mut this.body).poll_frame(cx));
        if let Some(Ok(f)) = &frame
            && let Some(data) = f.data_ref()
        {
            let n = this.messages.feed(data);
            if n > 0 {
                this.shared.grpc_stats.received(this.method, n);
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

impl http_body::Body for CountOnEnd {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, tonic::Status>>> {
        let this = self.get_mut();
        let mut frame = std::task::ready!(Pin::new(&mut this.body).poll_frame(cx));
        match &mut frame {
            Some(Ok(f)) => {
                if let Some(data) = f.data_ref() {
                    let n = this.messages.feed(data);
                    if n > 0 {
                        this.shared.grpc_stats.sent(this.method, n);
                    }
                }
                if let Some(t) = f.trailers_mut() {
                    too_large_as_grpc_go(t);
                    this.finish(t.get("grpc-status").map_or(0, parse_code));
                }
            }
            Some(Err(s)) => this.finish(s.code() as u8),
            None => this.finish(0),
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

impl Drop for CountOnEnd {
    fn drop(&mut self) {
        self.finish(tonic::Code::Cancelled as u8);
    }
}

/// What etcd's peer handler answers that mem_etcd's peers do not call over gRPC: `/version`,
/// and `/members` (the members as JSON, as `etcdctl` and etcd's joining members read them).
fn peer_answer(shared: &Member, req: &Request<Body>) -> Response<Body> {
    match req.uri().path() {
        "/version" => version(shared),
        "/members" if req.method() != Method::GET => {
            let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed\n");
            r.headers_mut().insert(header::ALLOW, HeaderValue::from_static("GET"));
            r
        }
        "/members" => {
            let members: Vec<String> = crate::server::etcdserver::membership::list(shared)
                .iter()
                .map(|m| {
                    // etcd's membership.Member as encoding/json writes it, in its field
                    // order: isLearner, name and client URLs left out when empty.
                    let mut o = format!(
                        "{{\"id\":{},\"peerURLs\":{}",
                        m.id,
                        serde_json::json!(m.peer_ur_ls)
                    );
                    if m.is_learner {
                        o.push_str(",\"isLearner\":true");
                    }
                    if !m.name.is_empty() {
                        o.push_str(&format!(",\"name\":{}", serde_json::json!(m.name)));
                    }
                    if !m.client_ur_ls.is_empty() {
                        o.push_str(&format!(
                            ",\"clientURLs\":{}",
                            serde_json::json!(m.client_ur_ls)
                        ));
                    }
                    o.push('}');
                    o
                })
                .collect();
            let mut r =
                respond(StatusCode::OK, "application/json", format!("[{}]\n", members.join(",")));
            if let Ok(id) = HeaderValue::from_str(&format!("{:x}", shared.cluster_id)) {
                r.headers_mut().insert("x-etcd-cluster-id", id);
            }
            r
        }
        _ => not_found(),
    }
}

/// etcd's `/version` body.
fn version(shared: &Member) -> Response<Body> {
    let v = &shared.config.emulated_version;
    let storage = shared.config.storage_version();
    let body = format!(
        "{{\"etcdserver\":\"{v}\",\"etcdcluster\":\"{storage}\",\"storage\":\"{storage}\"}}"
    );
    respond(StatusCode::OK, "application/json", body)
}

/// The answer to an HTTP request that is not a gRPC call.
fn answer(shared: &Member, req: &Request<Body>, grpc: bool) -> Response<Body> {
    let path = req.uri().path();
    match path {
        p if p.starts_with("/livez/") || p.starts_with("/readyz/") => {
            let (probe_path, check) = p[1..].split_once('/').expect("checked");
            let known = checks(&format!("/{probe_path}")).contains(&check);
            if known { text(StatusCode::OK, "ok\n") } else { not_found() }
        }
        "/version" if grpc => version(shared),
        "/metrics" => {
            use std::sync::atomic::Ordering::Relaxed;
            // promhttp counts a scrape once answered; the page shows the ones before it.
            let m = &shared.metrics;
            m.scrapes_in_flight.fetch_add(1, Relaxed);
            let page = metrics::render(shared);
            m.scrapes_in_flight.fetch_sub(1, Relaxed);
            m.scrapes.fetch_add(1, Relaxed);
            respond(StatusCode::OK, "text/plain; version=0.0.4; charset=utf-8", page)
        }
        "/debug/vars" if grpc => match *req.method() {
            Method::GET => respond(StatusCode::OK, "application/json; charset=utf-8", vars(shared)),
            _ => text(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed\n"),
        },
        _ => not_found(),
    }
}

/// etcd's `/debug/vars` (Go's expvar): one JSON object, a key a line in name order, with the
/// command line, the open-files limit, memory (Go's `memstats`; of its fields mem_etcd has
/// `Sys`, here the resident memory) and Raft's status as etcd's raft reports it.
fn vars(shared: &Member) -> String {
    let cmdline: Vec<String> = std::env::args().collect();
    let r = shared.raft_status();
    let id = |n: u64| format!("{n:x}");
    let progress: serde_json::Map<String, serde_json::Value> = r
        .progress
        .iter()
        .map(|&(m, held)| {
            let p = serde_json::json!({"match": held, "next": held + 1, "state": "StateReplicate"});
            (id(m), p)
        })
        .collect();
    let raft = serde_json::json!({
        "id": id(r.id),
        "term": r.term,
        "vote": id(r.vote),
        "commit": r.commit,
        "lead": id(r.leader),
        "raftState": r.state,
        "applied": r.applied_index,
        "progress": progress,
        "leadtransferee": "0",
    });
    let vars = [
        ("cmdline", serde_json::json!(cmdline)),
        ("file_descriptor_limit", crate::metrics::file_descriptors().1.into()),
        ("memstats", serde_json::json!({"Sys": crate::metrics::resident_bytes()})),
        ("raft.status", raft),
    ];
    let body: Vec<String> = vars.iter().map(|(k, v)| format!("{k:?}: {v}")).collect();
    format!("{{\n{}\n}}\n", body.join(",\n"))
}

/// The checks `/livez` and `/readyz` report, as etcd names them.
fn checks(path: &str) -> &'static [&'static str] {
    match path {
        "/livez" => &["serializable_read"],
        _ => &["data_corruption", "serializable_read", "linearizable_read", "non_learner"],
    }
}

/// `/health`, `/livez` and `/readyz`, whose linearizable reads wait for a quorum.
async fn checked(shared: &Member, path: &str, query: &str) -> Response<Body> {
    if path != "/health" {
        let verbose = query.split('&').any(|p| p == "verbose" || p.starts_with("verbose="));
        return probe(shared, path, verbose).await;
    }
    let r = health(shared, query).await;
    let counter = if r.status() == StatusCode::OK {
        &shared.metrics.health_success
    } else {
        &shared.metrics.health_failures
    };
    counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    r
}

/// The linearizable read etcd's health checks make: a read index a quorum confirmed, applied
/// here, within etcd's request timeout. A cluster member must also be reached by a quorum of
/// its peers ([`crate::raft::RaftNode::reached_by_quorum`], which waits up to a heartbeat for
/// their next probes): a member whose incoming peer traffic is cut can still confirm reads
/// with its own calls for a while, where etcd's cannot (its messages travel on connections its
/// peers dial), and etcd's checks report such a member unhealthy. A member alone reads its own
/// state.
/// The member losing its leader meanwhile ends the read at once (`NoLeader`).
async fn linearizable_read(shared: &Member) -> Result<(), crate::error::Error> {
    use crate::error::Error;
    let Some(raft) = shared.raft() else { return Ok(()) };
    let deadline = tokio::time::Instant::now() + raft.request_timeout();
    let read = async {
        if !raft.reached_by_quorum(deadline).await {
            return Err(Error::Timeout);
        }
        tokio::time::timeout_at(deadline, raft.linearizable()).await.unwrap_or(Err(Error::Timeout))
    };
    let mut role = raft.role();
    tokio::select! {
        r = read => r,
        _ = role.wait_for(|r| r.leader.is_none()) => Err(Error::NoLeader),
    }
}

/// Why a `/livez` or `/readyz` check fails, if it does: the CORRUPT alarm, a cluster member
/// without a leader or whose linearizable read fails, and a learner (not ready, as in etcd).
async fn failing(shared: &Member, check: &str) -> Option<String> {
    if check == "data_corruption" {
        return shared.alarms.check_corrupt().err().map(|_| "alarm activated: CORRUPT".into());
    }
    let raft = shared.raft()?;
    let role = *raft.role().borrow();
    match check {
        "linearizable_read" if role.leader.is_none() => Some("etcdserver: no leader".into()),
        "linearizable_read" => linearizable_read(shared).await.err().map(|e| e.to_string()),
        "non_learner" if role.is_learner => {
            Some("etcdserver: rpc not supported for learner".into())
        }
        _ => None,
    }
}

/// `/livez` and `/readyz`, in the format of etcd's (Kubernetes') health checks.
async fn probe(shared: &Member, path: &str, verbose: bool) -> Response<Body> {
    let mut results: Vec<(&str, Option<String>)> = Vec::new();
    for c in checks(path) {
        results.push((c, failing(shared, c).await));
    }
    let failed = results.iter().any(|r| r.1.is_some());
    if !verbose && !failed {
        return text(StatusCode::OK, "ok\n");
    }
    let mut body = String::new();
    for (c, why) in &results {
        match why {
            None if verbose => body.push_str(&format!("[+]{c} ok\n")),
            None => {}
            Some(why) => body.push_str(&format!("[-]{c} failed: {why}\n")),
        }
    }
    if failed {
        body.push_str(&format!("{} check failed\n", path.trim_start_matches('/')));
        return text(StatusCode::SERVICE_UNAVAILABLE, body);
    }
    body.push_str("ok\n");
    text(StatusCode::OK, body)
}

/// `/health`: etcd's JSON. Unhealthy (503) while an alarm is raised (`ALARM NOSPACE`) unless
/// `?exclude=NOSPACE` says to ignore it, as in etcd, and while the WAL cannot write, since
/// writes fail then. A cluster member without a leader is unhealthy (`RAFT NO LEADER`), and so
/// is one whose linearizable read fails (`RANGE ERROR:...`), except for `?serializable=true`,
/// which asks only whether this member serves its own reads, as etcd's does (kubeadm's
/// liveness probe asks it: a member cut off from the others is not restarted for it).
async fn health(shared: &Member, query: &str) -> Response<Body> {
    let params = || query.split('&');
    let excluded: Vec<&str> = params().filter_map(|p| p.strip_prefix("exclude=")).collect();
    let serializable = params().any(|p| p == "serializable=true");
    let alarm = shared.alarms.first_not_excluded(&excluded).map(|a| format!("ALARM {a}"));
    let mut reason = alarm.or_else(|| match shared.raft() {
        Some(r) if !serializable && r.leader().is_none() => Some("RAFT NO LEADER".to_string()),
        _ => None,
    });
    if reason.is_none() && !serializable {
        reason = match linearizable_read(shared).await {
            Ok(()) => None,
            Err(crate::error::Error::NoLeader) => Some("RAFT NO LEADER".to_string()),
            Err(e) => Some(format!("RANGE ERROR:{e}")),
        };
    }
    let reason = reason.or_else(|| match shared.store.wal() {
        Some(w) if !w.writable() => Some("WAL UNAVAILABLE".to_string()),
        _ => None,
    });
    let (status, body) = match reason {
        None => (StatusCode::OK, "{\"health\":\"true\",\"reason\":\"\"}".to_string()),
        // (etcd writes an unhealthy answer through http.Error, which ends it with a newline.)
        Some(r) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{{\"health\":\"false\",\"reason\":\"{r}\"}}\n"),
        ),
    };
    respond(status, "text/plain; charset=utf-8", body)
}

fn not_found() -> Response<Body> {
    text(StatusCode::NOT_FOUND, "404 page not found\n")
}

fn text(status: StatusCode, body: impl Into<String>) -> Response<Body> {
    respond(status, "text/plain; charset=utf-8", body.into())
}

fn respond(status: StatusCode, content_type: &'static str, body: String) -> Response<Body> {
    let mut r = Response::new(Body::new(body));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}
