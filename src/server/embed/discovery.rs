//! v3 discovery (etcd's `--discovery-endpoints` and `--discovery-token`): the founding members
//! of a new cluster find each other through a running etcd cluster, the discovery service,
//! instead of being listed in `--initial-cluster`.
//!
//! The protocol is etcd's, key for key, so that mem_etcd and etcd members can found a cluster
//! through the same service and an operator's tooling reads the same registry:
//!
//! - the operator puts the cluster's size at `/_etcd/registry/<token>/_config/size`;
//! - each member puts `name=peerURL,...` (its advertised peer URLs) at
//!   `/_etcd/registry/<token>/members/<member id in hex>`, its id derived as etcd derives it
//!   with the token in place of `--initial-cluster-token`;
//! - then it watches the members' prefix until `size` members are registered; the first `size`
//!   by create revision are the founders (members that register at once may overshoot), and a
//!   member that finds the cluster full before it registers gives up (`discovery: cluster is
//!   full`).
//!
//! The result is the founders the member then starts with ([`Founders`]: what it found in place
//! of `--initial-cluster`, and the token in place of `--initial-cluster-token`). A data directory that already holds a member's state ignores
//! discovery, as etcd's does. While the service cannot be reached the member retries, waiting
//! 2, 4, ... up to 256 seconds between tries, as etcd's does.

use std::time::Duration;

use bytes::Bytes;
use tonic::Request;
use tonic::metadata::AsciiMetadataValue;
use tonic::transport::{Channel, Endpoint};

use crate::config::{Config, Founders};
use crate::proto::etcdserverpb as pb;

/// Where every discovery token's keys live (etcd's `discoveryPrefix`).
const REGISTRY: &str = "/_etcd/registry";

/// Longest wait between tries, as a power of two seconds (etcd's `maxExponentialRetries`).
const MAX_BACKOFF_EXPONENT: u32 = 8;

/// Why discovery ended without a cluster, in etcd's words.
#[derive(Debug)]
enum Failure {
    SizeNotFound,
    BadSizeKey,
    FullCluster,
    InvalidUrl,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Failure::SizeNotFound => "discovery: size key not found",
            Failure::BadSizeKey => "discovery: size key is bad",
            Failure::FullCluster => "discovery: cluster is full",
            Failure::InvalidUrl => "discovery: invalid peer URL",
        })
    }
}

/// What a call to the service got instead of an answer (then the member tries again).
type Unreachable = String;

/// Whether this member founds its cluster through v3 discovery.
pub fn wanted(config: &Config) -> bool {
    !config.discovery_endpoints.is_empty()
}

/// Runs discovery for `config` (see the module docs) and returns the founders it found; or the
/// flags' own, when the data directory already holds a member. Returns once every founding
/// member has registered; an error ends the member's start.
pub async fn bootstrap(config: &Config) -> Result<Founders, String> {
    let wal = config.wal_options();
    if wal.mode != crate::wal::Mode::None
        && (wal.dir.raft().has_member() || matches!(wal.dir.read_alone_ids(), Ok(Some(_))))
    {
        tracing::warn!(
            "wal-dir" = %wal.dir.display(),
            "discovery token is ignored since cluster already initialized; valid logs are found"
        );
        return Ok(config.founders());
    }
    tracing::info!("Bootstrapping cluster using v3 discovery.");
    let token = config.discovery_token.clone();
    let advertised = config.advertised_peer_urls()?;
    let member_id = crate::raft::membership::member_id(&advertised, &token, None);
    // etcd's `URLsMap.String()` of this member alone: `name=url` pairs, sorted.
    let mut pairs: Vec<String> =
        advertised.iter().map(|u| format!("{}={u}", config.name)).collect();
    pairs.sort();
    let mut d = Discovery::new(config, member_id)?;
    let joined = d.join(&pairs.join(",")).await;
    let (cluster, founders) = joined.map_err(|e| {
        tracing::error!("cluster" = "", "error" = %e, "discovery failed to join cluster");
        format!("failed to join discovery cluster ({e})")
    })?;
    tracing::info!("cluster" = %cluster, "discovery joined cluster successfully");
    let mut urls: Vec<&String> = founders.iter().flat_map(|m| &m.peer_urls).collect();
    urls.sort();
    if urls.windows(2).any(|w| w[0] == w[1]) {
        return Err(format!("discovery cluster {cluster} has duplicate url"));
    }
    Ok(Founders { initial_cluster: Some(cluster), token })
}

/// One registered member: its key, its `name=url,...` and when it registered.
#[derive(Debug)]
struct Registered {
    key: String,
    urls: String,
    create_revision: i64,
}

/// A discovery in progress: the service's endpoints and what this member is.
struct Discovery {
    /// One lazily connecting channel per endpoint; a call tries them in turn from `next`.
    channels: Vec<Channel>,
    next: usize,
    /// `--discovery-user` and `--discovery-password`, and the token they were last given.
    user: Option<(String, String)>,
    auth_token: Option<AsciiMetadataValue>,
    request_timeout: Duration,
    /// `/_etcd/registry/<token>/members`, and this member's key under it.
    members_prefix: String,
    own_key: String,
    size_key: String,
    /// Tries in a row that found the service unreachable.
    retries: u32,
}

impl Discovery {
    fn new(config: &Config, member_id: u64) -> Result<Self, String> {
        let tls = crate::tls::discovery_client(config)?;
        let mut channels = Vec::new();
        for url in &config.discovery_endpoints {
            let url = url.trim();
            // As etcd's client: https:// always dials TLS, http:// never, a bare host:port
            // does when TLS settings are given.
            let (uri, secure) = match url.split_once("://") {
                Some(("https" | "unixs", _)) => (url.replacen("unixs://", "https://", 1), true),
                Some(_) => (url.replacen("unix://", "http://", 1), false),
                None => (format!("http://{url}"), tls.is_some()),
            };
            let endpoint = Endpoint::from_shared(uri)
                .map_err(|e| format!("--discovery-endpoints: bad endpoint {url:?}: {e}"))?
                .connect_timeout(config.discovery_dial_timeout)
                .http2_keep_alive_interval(config.discovery_keepalive_time)
                .keep_alive_timeout(config.discovery_keepalive_timeout)
                .tcp_nodelay(true);
            channels.push(match (&tls, secure) {
                (Some(tls), true) => tls.connect_lazy(endpoint),
                (None, true) => {
                    return Err(format!(
                        "--discovery-endpoints {url}: TLS needs --discovery-cacert (mem_etcd does \
                         not read the system's certificates) or --discovery-insecure-skip-tls-verify"
                    ));
                }
                (_, false) => endpoint.connect_lazy(),
            });
        }
        // As etcd's client: it authenticates only when given both (etcd 3.6 does not split a
        // `user:password` given to --discovery-user alone, and then calls without a user).
        let user = match (&config.discovery_user, &config.discovery_password) {
            (Some(u), Some(p)) if !u.is_empty() && !p.is_empty() => Some((u.clone(), p.clone())),
            _ => None,
        };
        let cluster = format!("{REGISTRY}/{}", config.discovery_token);
        Ok(Self {
            channels,
            next: 0,
            user,
            auth_token: None,
            request_timeout: config.discovery_request_timeout,
            members_prefix: format!("{cluster}/members"),
            own_key: format!("{cluster}/members/{member_id:x}"),
            size_key: format!("{cluster}/_config/size"),
            retries: 0,
        })
    }

    /// etcd's `joinCluster`: check, register, check again, wait for the rest. The founders as
    /// an `--initial-cluster` and parsed.
    async fn join(
        &mut self,
        registration: &str,
    ) -> Result<(String, Vec<crate::raft::membership::InitialMember>), Failure> {
        self.check().await?;
        self.register(registration).await;
        let (mut members, size, revision) = self.check().await?;
        self.wait(&mut members, size, revision).await;
        let founders: Vec<&str> = members.iter().take(size).map(|m| m.urls.as_str()).collect();
        let cluster = founders.join(",");
        match crate::raft::membership::parse_initial_cluster(&cluster) {
            Ok(founders) => Ok((cluster, founders)),
            Err(_) => Err(Failure::InvalidUrl),
        }
    }

    /// The cluster's size, the members registered so far (by create revision) and the
    /// revision they were read at. The cluster is full when `size` members registered before
    /// this one (or without it).
    async fn check(&mut self) -> Result<(Vec<Registered>, usize, i64), Failure> {
        loop {
            let size = match self.range(&self.size_key.clone(), false).await {
                Ok(r) => match r.kvs.first() {
                    None => return Err(Failure::SizeNotFound),
                    Some(kv) => match std::str::from_utf8(&kv.value).ok().map(str::parse::<i64>) {
                        Some(Ok(n)) if n > 0 => n as usize,
                        _ => return Err(Failure::BadSizeKey),
                    },
                },
                Err(e) => {
                    tracing::warn!(
                        "clusterSizeKey" = %self.size_key, "error" = %e,
                        "failed to get cluster size from discovery service"
                    );
                    self.back_off("cluster status check").await;
                    continue;
                }
            };
            let r = match self.range(&self.members_prefix.clone(), true).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(
                        "membersKeyPrefix" = %self.members_prefix, "error" = %e,
                        "failed to get cluster members from discovery service"
                    );
                    self.back_off("cluster status check").await;
                    continue;
                }
            };
            self.retries = 0;
            let mut members = Vec::new();
            for kv in &r.kvs {
                self.add(&mut members, &kv.key, &kv.value, kv.create_revision);
            }
            let revision = r.header.map_or(0, |h| h.revision);
            let before =
                members.iter().position(|m| m.key == self.own_key).unwrap_or(members.len());
            if before >= size {
                return Err(Failure::FullCluster);
            }
            return Ok((members, size, revision));
        }
    }

    /// Puts this member's key, trying until the service takes it.
    async fn register(&mut self, registration: &str) {
        loop {
            match self.put(&self.own_key.clone(), registration).await {
                Ok(()) => {
                    self.retries = 0;
                    tracing::info!(
                        "memberKey" = %self.own_key, "memberInfo" = %registration,
                        "register member itself successfully"
                    );
                    return;
                }
                Err(e) => {
                    tracing::warn!(
                        "memberKey" = %self.own_key, "error" = %e,
                        "failed to register members itself to the discovery service"
                    );
                    self.back_off("register member itself").await;
                }
            }
        }
    }

    /// Watches the members' prefix after `revision` until `size` members are registered.
    async fn wait(&mut self, members: &mut Vec<Registered>, size: usize, mut revision: i64) {
        if members.len() >= size {
            return;
        }
        tracing::info!(
            "clusterSize" = size,
            "found-peers" = members.len(),
            "waiting for peers from discovery service"
        );
        while members.len() < size {
            match self.watch_once(members, size, &mut revision).await {
                Ok(()) => {}
                Err(e) => {
                    tracing::warn!("error" = %e, "watch on the discovery service ended");
                    self.back_off("watch members").await;
                }
            }
        }
        tracing::info!(
            "clusterSize" = size,
            "found-peers" = members.len(),
            "found all needed peers from discovery service"
        );
    }

    /// One watch of the members' prefix from `revision + 1`, until `size` members are
    /// registered or the watch ends (`Err`); `revision` follows the events seen, so that the
    /// next watch starts after them.
    async fn watch_once(
        &mut self,
        members: &mut Vec<Registered>,
        size: usize,
        revision: &mut i64,
    ) -> Result<(), Unreachable> {
        let create = pb::WatchRequest {
            request_union: Some(pb::watch_request::RequestUnion::CreateRequest(
                pb::WatchCreateRequest {
                    key: Bytes::copy_from_slice(self.members_prefix.as_bytes()),
                    range_end: prefix_end(self.members_prefix.as_bytes()),
                    start_revision: *revision + 1,
                    ..Default::default()
                },
            )),
        };
        // The request stream stays open while the watch runs (closing it ends the watch).
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        tx.send(create).await.map_err(|e| e.to_string())?;
        let channel = self.channel().await?;
        let mut client = pb::watch_client::WatchClient::new(channel);
        let request = self.authorized(tokio_stream::wrappers::ReceiverStream::new(rx));
        let mut stream =
            client.watch(request).await.map_err(|e| e.message().to_string())?.into_inner();
        while members.len() < size {
            let Some(resp) = stream.message().await.map_err(|e| e.message().to_string())? else {
                return Err("the watch stream ended".into());
            };
            if resp.canceled {
                return Err(format!("the watch was canceled: {}", resp.cancel_reason));
            }
            for ev in &resp.events {
                if let Some(kv) = &ev.kv {
                    self.add(members, &kv.key, &kv.value, kv.create_revision);
                    *revision = (*revision).max(kv.mod_revision);
                }
            }
        }
        drop(tx);
        Ok(())
    }

    /// etcd's `clusterInfo.add`: a well-formed registration not seen yet, kept in create
    /// revision order.
    fn add(&self, members: &mut Vec<Registered>, key: &[u8], value: &[u8], create_revision: i64) {
        let key = String::from_utf8_lossy(key).trim().to_string();
        let urls = String::from_utf8_lossy(value).trim().to_string();
        let problem = if !key.starts_with(&self.members_prefix) {
            Some("invalid peer registry key")
        } else if !urls.contains('=') {
            Some("invalid peer info returned from discovery service")
        } else if members.iter().any(|m| m.key == key) {
            Some("found duplicate peer from discovery service")
        } else {
            None
        };
        if let Some(p) = problem {
            tracing::warn!("memberKey" = %key, "memberInfo" = %urls, "{p}");
            return;
        }
        tracing::info!("memberKey" = %key, "memberInfo" = %urls, "found peer from discovery service");
        members.push(Registered { key, urls, create_revision });
        members.sort_by_key(|m| m.create_revision);
    }

    /// etcd's `logAndBackoffForRetry`: 2^tries seconds, at most 2^8.
    async fn back_off(&mut self, step: &str) {
        self.retries += 1;
        let wait = Duration::from_secs(1 << self.retries.min(MAX_BACKOFF_EXPONENT));
        tracing::warn!(
            "reason" = step, "backoff" = %crate::duration::go_format(wait),
            "retry connecting to discovery service"
        );
        tokio::time::sleep(wait).await;
    }

    async fn range(&mut self, key: &str, prefix: bool) -> Result<pb::RangeResponse, Unreachable> {
        let req = pb::RangeRequest {
            key: Bytes::copy_from_slice(key.as_bytes()),
            range_end: if prefix { prefix_end(key.as_bytes()) } else { Bytes::new() },
            ..Default::default()
        };
        self.call(|c, r| async move { pb::kv_client::KvClient::new(c).range(r).await }, req).await
    }

    async fn put(&mut self, key: &str, value: &str) -> Result<(), Unreachable> {
        let req = pb::PutRequest {
            key: Bytes::copy_from_slice(key.as_bytes()),
            value: Bytes::copy_from_slice(value.as_bytes()),
            ..Default::default()
        };
        self.call(|c, r| async move { pb::kv_client::KvClient::new(c).put(r).await }, req)
            .await
            .map(drop)
    }

    /// One unary call, on each endpoint in turn until one answers, each try bounded by
    /// `--discovery-request-timeout`.
    async fn call<Q, A, F, Fut>(&mut self, f: F, req: Q) -> Result<A, Unreachable>
    where
        Q: Clone,
        F: Fn(Channel, Request<Q>) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<A>, tonic::Status>>,
    {
        let mut last = String::from("no endpoint");
        for _ in 0..self.channels.len() {
            let channel = self.channel().await?;
            let request = self.authorized(req.clone());
            match tokio::time::timeout(self.request_timeout, f(channel, request)).await {
                Ok(Ok(a)) => return Ok(a.into_inner()),
                Ok(Err(s)) => {
                    if s.code() == tonic::Code::Unauthenticated {
                        self.auth_token = None;
                    }
                    last = s.message().to_string();
                }
                Err(_) => last = "context deadline exceeded".into(),
            }
            self.next = (self.next + 1) % self.channels.len();
        }
        Err(last)
    }

    /// The channel of the endpoint in turn, authenticated first when a user is given.
    async fn channel(&mut self) -> Result<Channel, Unreachable> {
        let channel = self.channels[self.next].clone();
        if let (Some((name, password)), None) = (&self.user, &self.auth_token) {
            let req = pb::AuthenticateRequest { name: name.clone(), password: password.clone() };
            let mut client = pb::auth_client::AuthClient::new(channel.clone());
            let answer = tokio::time::timeout(self.request_timeout, client.authenticate(req)).await;
            let token = match answer {
                Ok(Ok(r)) => r.into_inner().token,
                Ok(Err(s)) => return Err(s.message().to_string()),
                Err(_) => return Err("context deadline exceeded".into()),
            };
            self.auth_token = Some(token.parse().map_err(|_| "a token that is not ASCII")?);
        }
        Ok(channel)
    }

    fn authorized<T>(&self, message: T) -> Request<T> {
        let mut r = Request::new(message);
        if let Some(t) = &self.auth_token {
            r.metadata_mut().insert("token", t.clone());
        }
        r
    }
}

/// The end of the range of keys that start with `prefix` (etcd's `GetPrefixRangeEnd`).
fn prefix_end(prefix: &[u8]) -> Bytes {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end.into();
        }
    }
    Bytes::from_static(&[0])
}
