//! The flags of the services the member offers: limits, logging and metrics, auth.

use std::time::Duration;

use crate::duration::parse_duration;

/// What one request, one connection, the store and the watches may take.
#[derive(clap::Args, Clone, Debug)]
pub struct LimitFlags {
    /// Largest request a client may send, as encoded for the log.
    #[arg(long, env = "ETCD_MAX_REQUEST_BYTES", default_value_t = 1_572_864, display_order = 53)]
    pub max_request_bytes: u32,

    /// Most compares, success ops or failure ops in one txn.
    #[arg(long, env = "ETCD_MAX_TXN_OPS", default_value_t = 128, display_order = 54)]
    pub max_txn_ops: u32,

    /// The most HTTP/2 streams (concurrent gRPC calls) a client connection may open (default:
    /// no limit, as etcd's).
    #[arg(long, env = "ETCD_MAX_CONCURRENT_STREAMS", default_value_t = u32::MAX, display_order = 65)]
    pub max_concurrent_streams: u32,

    /// The most memory the store may hold, in bytes (its own estimate, reported as the db
    /// size): past it writes fail with "database space exceeded" and the NOSPACE alarm is
    /// raised until disarmed. 0: etcd's default, 2 GiB; negative: no quota. The process's RSS
    /// runs about a quarter above the store's estimate; leave room for it.
    #[arg(
        long,
        env = "ETCD_QUOTA_BACKEND_BYTES",
        default_value_t = 0,
        allow_negative_numbers = true,
        display_order = 60
    )]
    pub quota_backend_bytes: i64,

    /// Threads serving gRPC and HTTP (0: one per CPU core). Storage work runs on them too; the
    /// WAL has its own writer and syncer threads.
    #[arg(long, env = "MEM_ETCD_WORKER_THREADS", default_value_t = 0, display_order = 59)]
    pub worker_threads: usize,

    /// How often watches with progress_notify hear the current revision when idle (Kubernetes
    /// runs etcd with 5s).
    #[arg(
        long,
        env = "ETCD_WATCH_PROGRESS_NOTIFY_INTERVAL",
        default_value = "5s",
        value_parser = parse_duration,
        display_order = 57
    )]
    pub watch_progress_notify_interval: Duration,

    /// etcd 3.5's name for --watch-progress-notify-interval; wins when given.
    #[arg(
        long,
        env = "ETCD_EXPERIMENTAL_WATCH_PROGRESS_NOTIFY_INTERVAL",
        value_parser = parse_duration,
        display_order = 58
    )]
    pub experimental_watch_progress_notify_interval: Option<Duration>,
}

/// Logging and metrics.
#[derive(clap::Args, Clone, Debug)]
pub struct LogFlags {
    /// debug, info, warn or error (or a tracing filter directive).
    #[arg(long, env = "ETCD_LOG_LEVEL", default_value = "info", display_order = 55)]
    pub log_level: String,

    /// etcd's logger: only `zap` (etcd's only one) is accepted; logs are mem_etcd's own.
    #[arg(long, env = "ETCD_LOGGER", default_value = "zap", display_order = 84)]
    pub logger: String,

    /// Where logs go: stderr, stdout, default (stderr) or file paths, comma-separated
    /// (systemd/journal: stderr).
    #[arg(
        long,
        env = "ETCD_LOG_OUTPUTS",
        default_value = "default",
        value_delimiter = ',',
        action = clap::ArgAction::Set,
        display_order = 85
    )]
    pub log_outputs: Vec<String>,

    /// json (one JSON object a line, with etcd's level, ts, caller and msg) or console (text).
    #[arg(long, env = "ETCD_LOG_FORMAT", default_value = "json", display_order = 86)]
    pub log_format: String,

    /// `basic`, or `extensive` to add the gRPC handling-time histograms
    /// (`grpc_server_handling_seconds`), as etcd's flag.
    #[arg(long, env = "ETCD_METRICS", default_value = "basic", display_order = 16)]
    pub metrics: String,
}

/// Authentication tokens and password hashes.
#[derive(clap::Args, Clone, Debug)]
pub struct AuthFlags {
    /// Tokens Authenticate hands out: `simple` (etcd's default: random, kept in memory by
    /// every member, valid --auth-token-ttl seconds after their last use), or
    /// `jwt,sign-method=M,priv-key=FILE[,pub-key=FILE][,ttl=5m]`: signed tokens carrying the
    /// user and auth revision, M one of RS256/384/512, PS256/384/512, ES256/384, EdDSA,
    /// HS256/384/512 (a public key alone: this member checks tokens, issues none).
    #[arg(long, env = "ETCD_AUTH_TOKEN", default_value = "simple", display_order = 21)]
    pub auth_token: String,

    /// Seconds a simple token stays valid after its last use.
    #[arg(long, env = "ETCD_AUTH_TOKEN_TTL", default_value_t = 300, display_order = 22)]
    pub auth_token_ttl: u64,

    /// bcrypt cost of the password hashes this member makes (4 to 31; others: 10).
    #[arg(long, env = "ETCD_BCRYPT_COST", default_value_t = 10, display_order = 23)]
    pub bcrypt_cost: u32,
}
