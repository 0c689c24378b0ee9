//! The member, cluster and v3 discovery flags.

use std::path::PathBuf;
use std::time::Duration;

use crate::duration::parse_duration;

/// The oldest etcd version kube-apiserver enables consistent reads from cache and WatchList for.
const MIN_EMULATED_VERSION: (u64, u64, u64) = (3, 5, 13);

/// Who this member is and where it listens and is reached: etcd's member flags.
#[derive(clap::Args, Clone, Debug)]
pub struct MemberFlags {
    /// Human-readable name for this member.
    #[arg(long, env = "ETCD_NAME", default_value = "default", display_order = 3)]
    pub name: String,

    /// The etcd version reported by Status and /version. kube-apiserver switches consistent
    /// reads from its watch cache off below 3.5.13, so lower values are refused.
    #[arg(long, env = "MEM_ETCD_EMULATED_VERSION", default_value = "3.6.16", value_parser = parse_version, display_order = 56)]
    pub emulated_version: String,

    /// URLs to serve clients on: http://host:port, https://host:port, unix://path or
    /// unixs://path (TLS on a unix socket), comma-separated. Each serves gRPC, the HTTP endpoints (/health, /version, /metrics) and
    /// etcd's JSON gateway (/v3/...). An http and an https URL on one host:port share its
    /// socket, as etcd's do.
    #[arg(
        long,
        env = "ETCD_LISTEN_CLIENT_URLS",
        default_value = "http://127.0.0.1:2379",
        value_delimiter = ',',
        action = clap::ArgAction::Set,
        display_order = 14
    )]
    pub listen_client_urls: Vec<String>,

    /// URLs serving only HTTP (the JSON gateway, /health and the probes, /version, /metrics;
    /// no gRPC), comma-separated. When given, the --listen-client-urls serve gRPC only, as
    /// etcd's do.
    #[arg(
        long,
        env = "ETCD_LISTEN_CLIENT_HTTP_URLS",
        value_delimiter = ',',
        action = clap::ArgAction::Set,
        display_order = 64
    )]
    pub listen_client_http_urls: Vec<String>,

    /// Extra URLs serving only /metrics and the health probes (http:// or https://host:port),
    /// comma-separated; the client URLs serve them too.
    #[arg(long, env = "ETCD_LISTEN_METRICS_URLS", value_delimiter = ',',
        action = clap::ArgAction::Set,
        display_order = 24
    )]
    pub listen_metrics_urls: Vec<String>,

    /// Client URLs advertised to clients (MemberList); defaults to the listen URLs.
    #[arg(long, env = "ETCD_ADVERTISE_CLIENT_URLS", value_delimiter = ',',
        action = clap::ArgAction::Set,
        display_order = 25
    )]
    pub advertise_client_urls: Vec<String>,

    /// Serve etcd's JSON gateway (POST /v3/kv/range and the rest) on the client URLs.
    #[arg(
        long,
        env = "ETCD_ENABLE_GRPC_GATEWAY",
        num_args = 0..=1,
        default_missing_value = "true",
        default_value = "true",
        action = clap::ArgAction::Set,
        display_order = 15
    )]
    pub enable_grpc_gateway: bool,

    /// Where this member accepts the other members' traffic (http://, https://, unix:// or
    /// unixs://, comma-separated). Only a member of a cluster of several listens.
    #[arg(
        long,
        env = "ETCD_LISTEN_PEER_URLS",
        default_value = "http://localhost:2380",
        value_delimiter = ',',
        action = clap::ArgAction::Set,
        display_order = 27
    )]
    pub listen_peer_urls: Vec<String>,

    /// This member's peer URLs, as the other members reach it (comma-separated).
    #[arg(
        long,
        env = "ETCD_INITIAL_ADVERTISE_PEER_URLS",
        default_value = "http://localhost:2380",
        value_delimiter = ',',
        action = clap::ArgAction::Set,
        display_order = 26
    )]
    pub initial_advertise_peer_urls: Vec<String>,
}

/// How the member founds or joins its cluster, and how Raft runs in it.
#[derive(clap::Args, Clone, Debug)]
pub struct ClusterFlags {
    /// The founding members: name=peerURL,... (a name given twice has several URLs). Default:
    /// this member alone (`<name>=<first --initial-advertise-peer-urls>`), which runs without
    /// Raft. Ignored once the data directory holds a cluster member's state.
    #[arg(long, env = "ETCD_INITIAL_CLUSTER", display_order = 28)]
    pub initial_cluster: Option<String>,

    /// new: found the cluster with the members of --initial-cluster; existing: join a running
    /// cluster this member was added to (MemberAdd).
    #[arg(
        long,
        env = "ETCD_INITIAL_CLUSTER_STATE",
        value_enum,
        default_value = "new",
        display_order = 29
    )]
    pub initial_cluster_state: ClusterState,

    /// Mixed into the member and cluster ids, so that two clusters never take each other's
    /// members for their own.
    #[arg(
        long,
        env = "ETCD_INITIAL_CLUSTER_TOKEN",
        default_value = "etcd-cluster",
        display_order = 31
    )]
    pub initial_cluster_token: String,

    /// Restart this cluster member as the only member of a new cluster (etcd's
    /// `--force-new-cluster`): it keeps every entry it had committed, drops the rest of its
    /// log and the other members, and keeps its ids. No effect without a cluster member's data
    /// directory.
    #[arg(
        long,
        env = "ETCD_FORCE_NEW_CLUSTER",
        num_args = 0..=1,
        default_missing_value = "true",
        default_value = "false",
        action = clap::ArgAction::Set,
        display_order = 30
    )]
    pub force_new_cluster: bool,

    /// Refuse membership changes that could cost the cluster its quorum (etcd's
    /// `--strict-reconfig-check`): too few started members, or this member not connected to
    /// enough of them for the health interval.
    #[arg(
        long,
        env = "ETCD_STRICT_RECONFIG_CHECK",
        num_args = 0..=1,
        default_missing_value = "true",
        default_value = "true",
        action = clap::ArgAction::Set,
        display_order = 52
    )]
    pub strict_reconfig_check: bool,

    /// A cluster member keeps at most this many of the newest Raft log entries in memory (etcd
    /// keeps its Raft log in memory from its last snapshot, taken every this many entries), and
    /// none that every member has and it applied; the others are read back from the log files
    /// when a lagging member needs them.
    #[arg(long, env = "ETCD_SNAPSHOT_COUNT", default_value_t = crate::raft::log_store::DEFAULT_KEEP_IN_MEMORY, display_order = 49)]
    pub snapshot_count: u64,

    /// Raft heartbeat interval, in milliseconds.
    #[arg(long, env = "ETCD_HEARTBEAT_INTERVAL", default_value_t = 100, display_order = 50)]
    pub heartbeat_interval: u64,

    /// Raft election timeout, in milliseconds.
    #[arg(long, env = "ETCD_ELECTION_TIMEOUT", default_value_t = 1000, display_order = 51)]
    pub election_timeout: u64,

    /// Fault injection for tests: a file listing member ids (hex) whose peer calls this member
    /// refuses, as if the network dropped them.
    #[arg(long, hide = true, display_order = 13)]
    pub peer_failpoint: Option<PathBuf>,
}

/// v3 discovery (`embed::discovery`): the founding members find each other through a running
/// etcd cluster instead of `--initial-cluster`.
#[derive(clap::Args, Clone, Debug)]
pub struct DiscoveryFlags {
    /// v3 discovery: the gRPC endpoints of a running etcd cluster where the founding members
    /// find each other (`embed::discovery`), instead of --initial-cluster.
    #[arg(long, env = "ETCD_DISCOVERY_ENDPOINTS", value_delimiter = ',', display_order = 32)]
    pub discovery_endpoints: Vec<String>,

    /// v3 discovery: the token of the cluster being founded (its keys are under
    /// `/_etcd/registry/<token>/`); it also takes --initial-cluster-token's place in the ids.
    #[arg(long, env = "ETCD_DISCOVERY_TOKEN", default_value = "", display_order = 33)]
    pub discovery_token: String,

    /// v3 discovery: how long a connection to the discovery service may take.
    #[arg(long, env = "ETCD_DISCOVERY_DIAL_TIMEOUT", default_value = "2s", value_parser = parse_duration, display_order = 34)]
    pub discovery_dial_timeout: Duration,

    /// v3 discovery: how long one request to the discovery service may take.
    #[arg(long, env = "ETCD_DISCOVERY_REQUEST_TIMEOUT", default_value = "5s", value_parser = parse_duration, display_order = 35)]
    pub discovery_request_timeout: Duration,

    /// v3 discovery: keepalive pings on the connections to the discovery service.
    #[arg(long, env = "ETCD_DISCOVERY_KEEPALIVE_TIME", default_value = "2s", value_parser = parse_duration, display_order = 36)]
    pub discovery_keepalive_time: Duration,

    /// v3 discovery: how long a keepalive ping may go unanswered.
    #[arg(long, env = "ETCD_DISCOVERY_KEEPALIVE_TIMEOUT", default_value = "6s", value_parser = parse_duration, display_order = 37)]
    pub discovery_keepalive_timeout: Duration,

    /// v3 discovery: plain-text connections unless certificates are given (etcd's default).
    #[arg(
        long,
        env = "ETCD_DISCOVERY_INSECURE_TRANSPORT",
        num_args = 0..=1,
        default_missing_value = "true",
        default_value = "true",
        action = clap::ArgAction::Set,
        display_order = 38
    )]
    pub discovery_insecure_transport: bool,

    /// v3 discovery: take any certificate from the discovery service (testing only).
    #[arg(
        long,
        env = "ETCD_DISCOVERY_INSECURE_SKIP_TLS_VERIFY",
        num_args = 0..=1,
        default_missing_value = "true",
        default_value = "false",
        action = clap::ArgAction::Set,
        display_order = 39
    )]
    pub discovery_insecure_skip_tls_verify: bool,

    /// v3 discovery: the client certificate presented to the discovery service (PEM).
    #[arg(long, env = "ETCD_DISCOVERY_CERT", display_order = 40)]
    pub discovery_cert: Option<PathBuf>,

    /// v3 discovery: the key of --discovery-cert.
    #[arg(long, env = "ETCD_DISCOVERY_KEY", display_order = 41)]
    pub discovery_key: Option<PathBuf>,

    /// v3 discovery: the CA bundle the discovery service's certificate is checked against.
    #[arg(long, env = "ETCD_DISCOVERY_CACERT", display_order = 42)]
    pub discovery_cacert: Option<PathBuf>,

    /// v3 discovery: the user to authenticate to the discovery service as, with
    /// --discovery-password (as etcd's client, which calls without a user unless given both).
    #[arg(long, env = "ETCD_DISCOVERY_USER", display_order = 43)]
    pub discovery_user: Option<String>,

    /// v3 discovery: the password of --discovery-user.
    #[arg(long, env = "ETCD_DISCOVERY_PASSWORD", display_order = 44)]
    pub discovery_password: Option<String>,
}

/// `--initial-cluster-state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ClusterState {
    New,
    Existing,
}

/// `--emulated-version`: a version like 3.6.16, no older than kube-apiserver needs.
fn parse_version(s: &str) -> Result<String, String> {
    let parts: Vec<u64> = s
        .split('.')
        .map(|p| p.parse::<u64>().map_err(|_| format!("{s:?} is not a version like 3.6.16")))
        .collect::<Result<_, _>>()?;
    let [major, minor, patch] = parts[..] else {
        return Err(format!("{s:?} is not a version like 3.6.16"));
    };
    if (major, minor, patch) < MIN_EMULATED_VERSION {
        return Err(format!("{s} is below 3.5.13, which kube-apiserver needs"));
    }
    Ok(s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_below_3_5_13_are_refused() {
        assert!(parse_version("3.6.16").is_ok());
        assert!(parse_version("3.5.13").is_ok());
        assert!(parse_version("3.5.12").is_err());
        assert!(parse_version("3.6").is_err());
    }
}
