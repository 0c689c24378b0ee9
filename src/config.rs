//! Command-line configuration, with etcd's flag names and `ETCD_*` environment variables so
//! mem_etcd can stand in for etcd in scripts, manifests and test frameworks.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

pub use crate::duration::parse_duration;

/// The background sync interval with --unsafe-no-fsync: in effect never.
const NO_FSYNC_INTERVAL: Duration = Duration::from_secs(24 * 3600);

/// The oldest etcd version kube-apiserver enables consistent reads from cache and WatchList for.
const MIN_EMULATED_VERSION: (u64, u64, u64) = (3, 5, 13);

#[derive(Parser, Clone, Debug)]
#[command(
    name = "mem_etcd",
    // etcd's flags are Go flags: the last of a flag given twice wins (see `load`).
    args_override_self = true,
    disable_version_flag = true,
    allow_negative_numbers = true,
    about = "An in-memory, etcd v3 compatible server for Kubernetes",
    after_help = "Backups (taken with `etcdctl snapshot save`):\n  \
                  mem_etcd snapshot restore FILE --data-dir DIR [--skip-hash-check]\n  \
                  mem_etcd snapshot restore FILE --data-dir DIR --name NAME --initial-cluster ... \
                  [--initial-cluster-token T]   (one member of a cluster founded from FILE)\n  \
                  mem_etcd snapshot status FILE\n\n\
                  FILE is an etcd snapshot.db, from mem_etcd or from etcd (`etcdutl snapshot \
                  restore` takes it too): restore keeps its revisions, compaction, leases and \
                  auth. A backup an older mem_etcd saved in its own format:\n  \
                  mem_etcd snapshot export FILE --output etcd-snapshot.db   (for `etcdutl snapshot restore`)"
)]
pub struct Config {
    /// Print etcd's version lines (with the emulated version) and mem_etcd's, and exit.
    #[arg(long)]
    pub version: bool,

    /// An etcd YAML configuration file (keys are the flag names; `client-transport-security`
    /// and `peer-transport-security` hold the TLS ones). When given, the other flags and the
    /// environment variables are ignored, as etcd ignores them.
    #[arg(long, env = "ETCD_CONFIG_FILE")]
    pub config_file: Option<PathBuf>,

    /// etcd's server feature gates, `Name=true|false,...` (StopGRPCServiceOnDefrag,
    /// InitialCorruptCheck, CompactHashCheck, TxnModeWriteWithSharedBuffer, LeaseCheckpoint,
    /// LeaseCheckpointPersist, SetMemberLocalAddr, AllAlpha, AllBeta); unknown names are
    /// refused as etcd refuses them. Given twice, both apply (etcd merges them too).
    #[arg(long, env = "ETCD_FEATURE_GATES", action = clap::ArgAction::Append)]
    pub feature_gates: Vec<String>,

    /// Human-readable name for this member.
    #[arg(long, env = "ETCD_NAME", default_value = "default")]
    pub name: String,

    /// Where the write-ahead log and snapshots live (default: `<name>.mem_etcd` in the working
    /// directory; unused with --wal-mode none).
    #[arg(long, env = "ETCD_DATA_DIR")]
    pub data_dir: Option<PathBuf>,

    /// none: nothing on disk, a restart starts empty; buffered: a write is acknowledged once
    /// written to the OS and fdatasync'd within --wal-flush-interval; fsync: acknowledged once
    /// fdatasync'd (group commit).
    #[arg(long, env = "MEM_ETCD_WAL_MODE", value_enum, default_value = "buffered")]
    pub wal_mode: crate::wal::Mode,

    /// Shorthand for --wal-mode fsync.
    #[arg(long, env = "MEM_ETCD_FSYNC")]
    pub fsync: bool,

    /// Keys starting with this prefix are kept in memory only (repeatable), e.g.
    /// /registry/events/. Their revisions are still logged, so revisions never go backwards.
    #[arg(long, env = "MEM_ETCD_WAL_EXCLUDE_PREFIX", value_delimiter = ',')]
    pub wal_exclude_prefix: Vec<String>,

    /// Buffered mode: how often written log data is fdatasync'd; an OS crash or power loss
    /// loses at most about this much.
    #[arg(long, env = "MEM_ETCD_WAL_FLUSH_INTERVAL", default_value = "10ms", value_parser = parse_duration)]
    pub wal_flush_interval: Duration,

    /// WAL segment size: a segment is closed and a new one started past it (a member alone's
    /// WAL; a cluster member's Raft log).
    #[arg(long, env = "MEM_ETCD_WAL_SEGMENT_BYTES", default_value_t = 64 << 20)]
    pub wal_segment_bytes: u64,

    /// A snapshot is written (and the log segments it covers deleted) once this many bytes,
    /// or the store's size if larger, were logged since the last one.
    #[arg(long, env = "MEM_ETCD_WAL_SNAPSHOT_BYTES", default_value_t = 256 << 20)]
    pub wal_snapshot_bytes: u64,

    /// On a corrupt log record, truncate the log there (dropping it and what follows in its
    /// stream) instead of refusing to start.
    #[arg(long, env = "MEM_ETCD_WAL_REPAIR")]
    pub wal_repair: bool,

    /// Fault injection for tests: a file whose content (`enospc`, `short`) makes WAL writes
    /// fail.
    #[arg(long, hide = true)]
    pub wal_failpoint: Option<PathBuf>,

    /// Fault injection for tests: a file listing member ids (hex) whose peer calls this member
    /// refuses, as if the network dropped them.
    #[arg(long, hide = true)]
    pub peer_failpoint: Option<PathBuf>,

    /// URLs to serve clients on: http://host:port, https://host:port, unix://path or
    /// unixs://path (TLS on a unix socket), comma-separated. Each serves gRPC, the HTTP endpoints (/health, /version, /metrics) and
    /// etcd's JSON gateway (/v3/...). An http and an https URL on one host:port share its
    /// socket, as etcd's do.
    #[arg(
        long,
        env = "ETCD_LISTEN_CLIENT_URLS",
        default_value = "http://127.0.0.1:2379",
        value_delimiter = ',',
        action = clap::ArgAction::Set
    )]
    pub listen_client_urls: Vec<String>,

    /// Serve etcd's JSON gateway (POST /v3/kv/range and the rest) on the client URLs.
    #[arg(
        long,
        env = "ETCD_ENABLE_GRPC_GATEWAY",
        num_args = 0..=1,
        default_missing_value = "true",
        default_value = "true",
        action = clap::ArgAction::Set
    )]
    pub enable_grpc_gateway: bool,

    /// `basic`, or `extensive` to add the gRPC handling-time histograms
    /// (`grpc_server_handling_seconds`), as etcd's flag.
    #[arg(long, env = "ETCD_METRICS", default_value = "basic")]
    pub metrics: String,

    /// The server's certificate (PEM, chain first) for https:// listen URLs.
    #[arg(long, env = "ETCD_CERT_FILE")]
    pub cert_file: Option<PathBuf>,

    /// The private key of --cert-file (PEM).
    #[arg(long, env = "ETCD_KEY_FILE")]
    pub key_file: Option<PathBuf>,

    /// CA certificates (PEM) that client certificates must chain to (with --client-cert-auth).
    #[arg(long, env = "ETCD_TRUSTED_CA_FILE")]
    pub trusted_ca_file: Option<PathBuf>,

    /// Refuse https clients without a certificate signed by --trusted-ca-file; with auth
    /// enabled, the certificate's common name is the user when a request has no token.
    #[arg(
        long,
        env = "ETCD_CLIENT_CERT_AUTH",
        num_args = 0..=1,
        default_missing_value = "true",
        default_value = "false",
        action = clap::ArgAction::Set
    )]
    pub client_cert_auth: bool,

    /// Tokens Authenticate hands out: `simple` (etcd's default: random, kept in memory by
    /// every member, valid --auth-token-ttl seconds after their last use), or
    /// `jwt,sign-method=M,priv-key=FILE[,pub-key=FILE][,ttl=5m]`: signed tokens carrying the
    /// user and auth revision, M one of RS256/384/512, PS256/384/512, ES256/384, EdDSA,
    /// HS256/384/512 (a public key alone: this member checks tokens, issues none).
    #[arg(long, env = "ETCD_AUTH_TOKEN", default_value = "simple")]
    pub auth_token: String,

    /// Seconds a simple token stays valid after its last use.
    #[arg(long, env = "ETCD_AUTH_TOKEN_TTL", default_value_t = 300)]
    pub auth_token_ttl: u64,

    /// bcrypt cost of the password hashes this member makes (4 to 31; others: 10).
    #[arg(long, env = "ETCD_BCRYPT_COST", default_value_t = 10)]
    pub bcrypt_cost: u32,

    /// Extra URLs serving only /metrics and the health probes (http:// or https://host:port),
    /// comma-separated; the client URLs serve them too.
    #[arg(long, env = "ETCD_LISTEN_METRICS_URLS", value_delimiter = ',',
        action = clap::ArgAction::Set)]
    pub listen_metrics_urls: Vec<String>,

    /// Client URLs advertised to clients (MemberList); defaults to the listen URLs.
    #[arg(long, env = "ETCD_ADVERTISE_CLIENT_URLS", value_delimiter = ',',
        action = clap::ArgAction::Set)]
    pub advertise_client_urls: Vec<String>,

    /// This member's peer URLs, as the other members reach it (comma-separated).
    #[arg(
        long,
        env = "ETCD_INITIAL_ADVERTISE_PEER_URLS",
        default_value = "http://localhost:2380",
        value_delimiter = ',',
        action = clap::ArgAction::Set
    )]
    pub initial_advertise_peer_urls: Vec<String>,

    /// Where this member accepts the other members' traffic (http://, https://, unix:// or
    /// unixs://, comma-separated). Only a member of a cluster of several listens.
    #[arg(
        long,
        env = "ETCD_LISTEN_PEER_URLS",
        default_value = "http://localhost:2380",
        value_delimiter = ',',
        action = clap::ArgAction::Set
    )]
    pub listen_peer_urls: Vec<String>,

    /// The founding members: name=peerURL,... (a name given twice has several URLs). Default:
    /// this member alone (`<name>=<first --initial-advertise-peer-urls>`), which runs without
    /// Raft. Ignored once the data directory holds a cluster member's state.
    #[arg(long, env = "ETCD_INITIAL_CLUSTER")]
    pub initial_cluster: Option<String>,

    /// new: found the cluster with the members of --initial-cluster; existing: join a running
    /// cluster this member was added to (MemberAdd).
    #[arg(long, env = "ETCD_INITIAL_CLUSTER_STATE", value_enum, default_value = "new")]
    pub initial_cluster_state: ClusterState,

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
        action = clap::ArgAction::Set
    )]
    pub force_new_cluster: bool,

    /// Mixed into the member and cluster ids, so that two clusters never take each other's
    /// members for their own.
    #[arg(long, env = "ETCD_INITIAL_CLUSTER_TOKEN", default_value = "etcd-cluster")]
    pub initial_cluster_token: String,

    /// v3 discovery: the gRPC endpoints of a running etcd cluster where the founding members
    /// find each other (`embed::discovery`), instead of --initial-cluster.
    #[arg(long, env = "ETCD_DISCOVERY_ENDPOINTS", value_delimiter = ',')]
    pub discovery_endpoints: Vec<String>,

    /// v3 discovery: the token of the cluster being founded (its keys are under
    /// `/_etcd/registry/<token>/`); it also takes --initial-cluster-token's place in the ids.
    #[arg(long, env = "ETCD_DISCOVERY_TOKEN", default_value = "")]
    pub discovery_token: String,

    /// v3 discovery: how long a connection to the discovery service may take.
    #[arg(long, env = "ETCD_DISCOVERY_DIAL_TIMEOUT", default_value = "2s", value_parser = parse_duration)]
    pub discovery_dial_timeout: Duration,

    /// v3 discovery: how long one request to the discovery service may take.
    #[arg(long, env = "ETCD_DISCOVERY_REQUEST_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub discovery_request_timeout: Duration,

    /// v3 discovery: keepalive pings on the connections to the discovery service.
    #[arg(long, env = "ETCD_DISCOVERY_KEEPALIVE_TIME", default_value = "2s", value_parser = parse_duration)]
    pub discovery_keepalive_time: Duration,

    /// v3 discovery: how long a keepalive ping may go unanswered.
    #[arg(long, env = "ETCD_DISCOVERY_KEEPALIVE_TIMEOUT", default_value = "6s", value_parser = parse_duration)]
    pub discovery_keepalive_timeout: Duration,

    /// v3 discovery: plain-text connections unless certificates are given (etcd's default).
    #[arg(
        long,
        env = "ETCD_DISCOVERY_INSECURE_TRANSPORT",
        num_args = 0..=1,
        default_missing_value = "true",
        default_value = "true",
        action = clap::ArgAction::Set
    )]
    pub discovery_insecure_transport: bool,

    /// v3 discovery: take any certificate from the discovery service (testing only).
    #[arg(
        long,
        env = "ETCD_DISCOVERY_INSECURE_SKIP_TLS_VERIFY",
        num_args = 0..=1,
        default_missing_value = "true",
        default_value = "false",
        action = clap::ArgAction::Set
    )]
    pub discovery_insecure_skip_tls_verify: bool,

    /// v3 discovery: the client certificate presented to the discovery service (PEM).
    #[arg(long, env = "ETCD_DISCOVERY_CERT")]
    pub discovery_cert: Option<PathBuf>,

    /// v3 discovery: the key of --discovery-cert.
    #[arg(long, env = "ETCD_DISCOVERY_KEY")]
    pub discovery_key: Option<PathBuf>,

    /// v3 discovery: the CA bundle the discovery service's certificate is checked against.
    #[arg(long, env = "ETCD_DISCOVERY_CACERT")]
    pub discovery_cacert: Option<PathBuf>,

    /// v3 discovery: the user to authenticate to the discovery service as, with
    /// --discovery-password (as etcd's client, which calls without a user unless given both).
    #[arg(long, env = "ETCD_DISCOVERY_USER")]
    pub discovery_user: Option<String>,

    /// v3 discovery: the password of --discovery-user.
    #[arg(long, env = "ETCD_DISCOVERY_PASSWORD")]
    pub discovery_password: Option<String>,

    /// This member's certificate for https:// peer URLs (PEM), presented to and used to call
    /// the other members.
    #[arg(long, env = "ETCD_PEER_CERT_FILE")]
    pub peer_cert_file: Option<PathBuf>,

    /// The private key of --peer-cert-file (PEM).
    #[arg(long, env = "ETCD_PEER_KEY_FILE")]
    pub peer_key_file: Option<PathBuf>,

    /// CA certificates (PEM) the other members' certificates must chain to.
    #[arg(long, env = "ETCD_PEER_TRUSTED_CA_FILE")]
    pub peer_trusted_ca_file: Option<PathBuf>,

    /// Refuse peers without a certificate signed by --peer-trusted-ca-file.
    #[arg(
        long,
        env = "ETCD_PEER_CLIENT_CERT_AUTH",
        num_args = 0..=1,
        default_missing_value = "true",
        default_value = "false",
        action = clap::ArgAction::Set
    )]
    pub peer_client_cert_auth: bool,

    /// A cluster member keeps at most this many of the newest Raft log entries in memory (etcd
    /// keeps its Raft log in memory from its last snapshot, taken every this many entries), and
    /// none that every member has and it applied; the others are read back from the log files
    /// when a lagging member needs them.
    #[arg(long, env = "ETCD_SNAPSHOT_COUNT", default_value_t = crate::raft::log_store::DEFAULT_KEEP_IN_MEMORY)]
    pub snapshot_count: u64,

    /// Raft heartbeat interval, in milliseconds.
    #[arg(long, env = "ETCD_HEARTBEAT_INTERVAL", default_value_t = 100)]
    pub heartbeat_interval: u64,

    /// Raft election timeout, in milliseconds.
    #[arg(long, env = "ETCD_ELECTION_TIMEOUT", default_value_t = 1000)]
    pub election_timeout: u64,

    /// Refuse membership changes that could cost the cluster its quorum (etcd's
    /// `--strict-reconfig-check`): too few started members, or this member not connected to
    /// enough of them for the health interval.
    #[arg(
        long,
        env = "ETCD_STRICT_RECONFIG_CHECK",
        num_args = 0..=1,
        default_missing_value = "true",
        default_value = "true",
        action = clap::ArgAction::Set
    )]
    pub strict_reconfig_check: bool,

    /// Largest request a client may send, as encoded for the log.
    #[arg(long, env = "ETCD_MAX_REQUEST_BYTES", default_value_t = 1_572_864)]
    pub max_request_bytes: u32,

    /// Most compares, success ops or failure ops in one txn.
    #[arg(long, env = "ETCD_MAX_TXN_OPS", default_value_t = 128)]
    pub max_txn_ops: u32,

    /// debug, info, warn or error (or a tracing filter directive).
    #[arg(long, env = "ETCD_LOG_LEVEL", default_value = "info")]
    pub log_level: String,

    /// The etcd version reported by Status and /version. kube-apiserver switches consistent
    /// reads from its watch cache off below 3.5.13, so lower values are refused.
    #[arg(long, env = "MEM_ETCD_EMULATED_VERSION", default_value = "3.6.16", value_parser = parse_version)]
    pub emulated_version: String,

    /// How often watches with progress_notify hear the current revision when idle (Kubernetes
    /// runs etcd with 5s).
    #[arg(
        long,
        env = "ETCD_WATCH_PROGRESS_NOTIFY_INTERVAL",
        default_value = "5s",
        value_parser = parse_duration
    )]
    pub watch_progress_notify_interval: Duration,

    /// etcd 3.5's name for --watch-progress-notify-interval; wins when given.
    #[arg(
        long,
        env = "ETCD_EXPERIMENTAL_WATCH_PROGRESS_NOTIFY_INTERVAL",
        value_parser = parse_duration
    )]
    pub experimental_watch_progress_notify_interval: Option<Duration>,

    /// Threads serving gRPC and HTTP (0: one per CPU core). Storage work runs on them too; the
    /// WAL has its own writer and syncer threads.
    #[arg(long, env = "MEM_ETCD_WORKER_THREADS", default_value_t = 0)]
    pub worker_threads: usize,

    /// The most memory the store may hold, in bytes (its own estimate, reported as the db
    /// size): past it writes fail with "database space exceeded" and the NOSPACE alarm is
    /// raised until disarmed. 0: etcd's default, 2 GiB; negative: no quota. The process's RSS
    /// runs about a quarter above the store's estimate; leave room for it.
    #[arg(
        long,
        env = "ETCD_QUOTA_BACKEND_BYTES",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    pub quota_backend_bytes: i64,

    /// How --auto-compaction-retention is read: `periodic` (a duration; a plain number is
    /// hours) or `revision` (a number of revisions).
    #[arg(long, env = "ETCD_AUTO_COMPACTION_MODE", value_enum, default_value = "periodic")]
    pub auto_compaction_mode: AutoCompactionMode,

    /// How much history auto-compaction keeps (see --auto-compaction-mode); 0 turns it off.
    /// kube-apiserver compacts on its own every 5 minutes, so a Kubernetes datastore rarely
    /// needs it.
    #[arg(long, env = "ETCD_AUTO_COMPACTION_RETENTION", default_value = "0")]
    pub auto_compaction_retention: String,

    /// How often revision-mode auto-compaction runs (etcd: a fixed 5 minutes); for tests.
    #[arg(long, hide = true, default_value = "5m", value_parser = parse_duration)]
    pub auto_compaction_revision_interval: Duration,

    /// URLs serving only HTTP (the JSON gateway, /health and the probes, /version, /metrics;
    /// no gRPC), comma-separated. When given, the --listen-client-urls serve gRPC only, as
    /// etcd's do.
    #[arg(
        long,
        env = "ETCD_LISTEN_CLIENT_HTTP_URLS",
        value_delimiter = ',',
        action = clap::ArgAction::Set
    )]
    pub listen_client_http_urls: Vec<String>,

    /// The most HTTP/2 streams (concurrent gRPC calls) a client connection may open (default:
    /// no limit, as etcd's).
    #[arg(long, env = "ETCD_MAX_CONCURRENT_STREAMS", default_value_t = u32::MAX)]
    pub max_concurrent_streams: u32,

    /// A unary gRPC request that takes longer than this is logged ("request stats", etcd's
    /// `--warning-unary-request-duration`, or its `--experimental-` form). Set by [`load`]
    /// from those flags, which are parsed with the no-effect ones.
    #[arg(skip = DEFAULT_WARNING_UNARY_REQUEST_DURATION)]
    pub warning_unary_request_duration: Duration,

    /// `--snapshot-catchup-entries` (or its `--experimental-` form): no effect (openraft sends
    /// a lagging member a snapshot by its own rule), but etcd writes it in its startup line,
    /// which tools read. Set by [`load`].
    #[arg(skip = DEFAULT_SNAPSHOT_CATCHUP_ENTRIES)]
    pub snapshot_catchup_entries: u64,

    /// `--bootstrap-defrag-threshold-megabytes` (or its `--experimental-` form): etcd
    /// defragments its bbolt file at start when that would free this much; 0: never. Only
    /// logged here (see `main`). Set by [`load`].
    #[arg(skip)]
    pub bootstrap_defrag_threshold_megabytes: u64,

    /// `--v2-deprecation=write-only-skip-check`: the one stage etcd keeps when asked (it
    /// enforces `write-only` for any other); only its startup line shows it. Set by [`load`].
    #[arg(skip)]
    pub v2_deprecation_skip_check: bool,

    /// The oldest TLS version https listeners accept: TLS1.2 or TLS1.3.
    #[arg(long, env = "ETCD_TLS_MIN_VERSION", default_value = "TLS1.2")]
    pub tls_min_version: String,

    /// The newest TLS version https listeners accept: TLS1.2, TLS1.3, or empty (the newest).
    #[arg(long, env = "ETCD_TLS_MAX_VERSION", default_value = "")]
    pub tls_max_version: String,

    /// The TLS 1.2 cipher suites https listeners accept, in Go's names, comma-separated
    /// (empty: rustls' defaults). TLS 1.3 suites are always all enabled, as in Go. Suites
    /// rustls does not implement (RSA key exchange, CBC, 3DES, RC4) are refused.
    #[arg(long, env = "ETCD_CIPHER_SUITES", value_delimiter = ',', action = clap::ArgAction::Set)]
    pub cipher_suites: Vec<String>,

    /// Certificate revocation lists (PEM or DER): a client certificate they revoke is refused
    /// (with --client-cert-auth).
    #[arg(long, env = "ETCD_CLIENT_CRL_FILE")]
    pub client_crl_file: Option<PathBuf>,

    /// As --client-crl-file, for the other members' certificates on the peer URLs.
    #[arg(long, env = "ETCD_PEER_CRL_FILE")]
    pub peer_crl_file: Option<PathBuf>,

    /// A client certificate must name one of these hostnames (DNS or IP SAN), comma-separated.
    #[arg(
        long,
        env = "ETCD_CLIENT_CERT_ALLOWED_HOSTNAME",
        value_delimiter = ',',
        action = clap::ArgAction::Set
    )]
    pub client_cert_allowed_hostname: Vec<String>,

    /// A member's certificate (on the peer URLs) must have one of these common names.
    #[arg(
        long,
        env = "ETCD_PEER_CERT_ALLOWED_CN",
        value_delimiter = ',',
        action = clap::ArgAction::Set
    )]
    pub peer_cert_allowed_cn: Vec<String>,

    /// A member's certificate (on the peer URLs) must name one of these hostnames.
    #[arg(
        long,
        env = "ETCD_PEER_CERT_ALLOWED_HOSTNAME",
        value_delimiter = ',',
        action = clap::ArgAction::Set
    )]
    pub peer_cert_allowed_hostname: Vec<String>,

    /// The certificate this member presents when it calls the others (default:
    /// --peer-cert-file).
    #[arg(long, env = "ETCD_PEER_CLIENT_CERT_FILE")]
    pub peer_client_cert_file: Option<PathBuf>,

    /// The private key of --peer-client-cert-file.
    #[arg(long, env = "ETCD_PEER_CLIENT_KEY_FILE")]
    pub peer_client_key_file: Option<PathBuf>,

    /// https client URLs with a self-signed certificate made at start (in
    /// <data-dir>/fixtures/client), when no --cert-file is given.
    #[arg(
        long,
        env = "ETCD_AUTO_TLS",
        num_args = 0..=1,
        default_missing_value = "true",
        default_value = "false",
        action = clap::ArgAction::Set
    )]
    pub auto_tls: bool,

    /// https peer URLs with a self-signed certificate made at start (in
    /// <data-dir>/fixtures/peer), when no --peer-cert-file is given.
    #[arg(
        long,
        env = "ETCD_PEER_AUTO_TLS",
        num_args = 0..=1,
        default_missing_value = "true",
        default_value = "false",
        action = clap::ArgAction::Set
    )]
    pub peer_auto_tls: bool,

    /// Set at start when --peer-auto-tls made this member's peer certificate: peers' own
    /// self-signed certificates are then taken without a CA, as etcd takes them.
    #[arg(skip)]
    pub peer_self_signed: bool,

    /// Years the --auto-tls and --peer-auto-tls certificates are valid.
    #[arg(long, env = "ETCD_SELF_SIGNED_CERT_VALIDITY", default_value_t = 1)]
    pub self_signed_cert_validity: u32,

    /// etcd's logger: only `zap` (etcd's only one) is accepted; logs are mem_etcd's own.
    #[arg(long, env = "ETCD_LOGGER", default_value = "zap")]
    pub logger: String,

    /// Where logs go: stderr, stdout, default (stderr) or file paths, comma-separated
    /// (systemd/journal: stderr).
    #[arg(
        long,
        env = "ETCD_LOG_OUTPUTS",
        default_value = "default",
        value_delimiter = ',',
        action = clap::ArgAction::Set
    )]
    pub log_outputs: Vec<String>,

    /// json (one JSON object a line, with etcd's level, ts, caller and msg) or console (text).
    #[arg(long, env = "ETCD_LOG_FORMAT", default_value = "json")]
    pub log_format: String,

    /// Never fsync: the log is written to the OS and synced only at shutdown (a crash of the
    /// machine loses what the OS had not written). Overrides --wal-mode fsync.
    #[arg(
        long,
        env = "ETCD_UNSAFE_NO_FSYNC",
        num_args = 0..=1,
        default_missing_value = "true",
        default_value = "false",
        action = clap::ArgAction::Set
    )]
    pub unsafe_no_fsync: bool,

    /// Deprecated alias of `--feature-gates=InitialCorruptCheck=...`.
    #[arg(
        long,
        env = "ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK",
        num_args = 0..=1,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub experimental_initial_corrupt_check: Option<bool>,

    /// How often a cluster's leader compares its store's hash with every member's (etcd's
    /// periodic corruption check); a member whose store differs gets the CORRUPT alarm, which
    /// refuses writes until it is disarmed. 0 (the default): never.
    #[arg(long, env = "ETCD_CORRUPT_CHECK_TIME", value_parser = parse_duration)]
    pub corrupt_check_time: Option<Duration>,

    /// etcd 3.5's name for --corrupt-check-time; wins when given.
    #[arg(long, env = "ETCD_EXPERIMENTAL_CORRUPT_CHECK_TIME", value_parser = parse_duration)]
    pub experimental_corrupt_check_time: Option<Duration>,

    /// How often a cluster's leader, with the CompactHashCheck feature gate, compares the
    /// hash of the store at the last compaction with every member's.
    #[arg(long, env = "ETCD_COMPACT_HASH_CHECK_TIME", value_parser = parse_duration)]
    pub compact_hash_check_time: Option<Duration>,

    /// etcd 3.5's name for --compact-hash-check-time; wins when given.
    #[arg(long, env = "ETCD_EXPERIMENTAL_COMPACT_HASH_CHECK_TIME", value_parser = parse_duration)]
    pub experimental_compact_hash_check_time: Option<Duration>,

    /// Deprecated alias of `--feature-gates=StopGRPCServiceOnDefrag=...`.
    #[arg(
        long,
        env = "ETCD_EXPERIMENTAL_STOP_GRPC_SERVICE_ON_DEFRAG",
        num_args = 0..=1,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub experimental_stop_grpc_service_on_defrag: Option<bool>,

    /// Deprecated alias of `--feature-gates=CompactHashCheck=...`.
    #[arg(
        long,
        env = "ETCD_EXPERIMENTAL_COMPACT_HASH_CHECK_ENABLED",
        num_args = 0..=1,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub experimental_compact_hash_check_enabled: Option<bool>,

    /// Deprecated alias of `--feature-gates=TxnModeWriteWithSharedBuffer=...`.
    #[arg(
        long,
        env = "ETCD_EXPERIMENTAL_TXN_MODE_WRITE_WITH_SHARED_BUFFER",
        num_args = 0..=1,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub experimental_txn_mode_write_with_shared_buffer: Option<bool>,

    /// Deprecated alias of `--feature-gates=LeaseCheckpoint=...`.
    #[arg(
        long,
        env = "ETCD_EXPERIMENTAL_ENABLE_LEASE_CHECKPOINT",
        num_args = 0..=1,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub experimental_enable_lease_checkpoint: Option<bool>,

    /// Deprecated alias of `--feature-gates=LeaseCheckpointPersist=...`.
    #[arg(
        long,
        env = "ETCD_EXPERIMENTAL_ENABLE_LEASE_CHECKPOINT_PERSIST",
        num_args = 0..=1,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub experimental_enable_lease_checkpoint_persist: Option<bool>,

    /// kube-apiserver's --etcd-prefix: keys below it are partitioned per resource.
    #[arg(long, env = "MEM_ETCD_REGISTRY_PREFIX", default_value = "/registry")]
    pub registry_prefix: String,
}

/// `--initial-cluster-state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ClusterState {
    New,
    Existing,
}

/// `--wal-mode` takes the WAL's own [`Mode`](crate::wal::Mode) (the log keeps no command-line
/// types: its values are listed here).
impl clap::ValueEnum for crate::wal::Mode {
    fn value_variants<'a>() -> &'a [Self] {
        use crate::wal::Mode;
        &[Mode::None, Mode::Buffered, Mode::Fsync]
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        use crate::wal::Mode;
        Some(clap::builder::PossibleValue::new(match self {
            Mode::None => "none",
            Mode::Buffered => "buffered",
            Mode::Fsync => "fsync",
        }))
    }
}

/// `--auto-compaction-mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AutoCompactionMode {
    Periodic,
    Revision,
}

/// What auto-compaction does, from `--auto-compaction-mode` and `--auto-compaction-retention`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AutoCompaction {
    /// Keep at least this much time of history.
    Periodic(Duration),
    /// Keep this many revisions, checking every `every`.
    Revision { retention: i64, every: Duration },
}

impl Config {
    /// The auto-compaction these flags ask for (`None`: off), or why they make no sense. As in
    /// etcd, a plain number is hours in periodic mode; unlike etcd, a duration is refused in
    /// revision mode rather than read as nanoseconds' worth of revisions.
    pub fn auto_compaction(&self) -> Result<Option<AutoCompaction>, String> {
        let r = self.auto_compaction_retention.trim();
        let plain = r.parse::<i64>().ok();
        let policy = match (self.auto_compaction_mode, plain) {
            (_, Some(n)) if n < 0 => None,
            (AutoCompactionMode::Revision, Some(n)) => Some(AutoCompaction::Revision {
                retention: n,
                every: self.auto_compaction_revision_interval,
            }),
            (AutoCompactionMode::Revision, None) => None,
            (AutoCompactionMode::Periodic, Some(h)) => {
                Some(AutoCompaction::Periodic(Duration::from_secs(h as u64 * 3600)))
            }
            (AutoCompactionMode::Periodic, None) => {
                parse_duration(r).ok().map(AutoCompaction::Periodic)
            }
        };
        let Some(policy) = policy else {
            return Err(format!(
                "--auto-compaction-retention {r:?}: expected {} for --auto-compaction-mode {}",
                match self.auto_compaction_mode {
                    AutoCompactionMode::Periodic => "a duration (5m, 1h) or a number of hours",
                    AutoCompactionMode::Revision => "a number of revisions",
                },
                match self.auto_compaction_mode {
                    AutoCompactionMode::Periodic => "periodic",
                    AutoCompactionMode::Revision => "revision",
                },
            ));
        };
        Ok(match policy {
            AutoCompaction::Periodic(d) if d.is_zero() => None,
            AutoCompaction::Revision { retention: 0, .. } => None,
            p => Some(p),
        })
    }

    /// The WAL settings these flags ask for.
    pub fn wal_options(&self) -> crate::wal::Options {
        let mode = if self.fsync { crate::wal::Mode::Fsync } else { self.wal_mode };
        // --unsafe-no-fsync: written to the OS at once, as in buffered mode, but the background
        // sync waits a day: only shutdown (and snapshots) sync.
        let (mode, flush_interval) = match mode {
            crate::wal::Mode::None => (mode, self.wal_flush_interval),
            _ if self.unsafe_no_fsync => (crate::wal::Mode::Buffered, NO_FSYNC_INTERVAL),
            _ => (mode, self.wal_flush_interval),
        };
        let dir = crate::data_dir::DataDir::new(
            self.data_dir
                .clone()
                .unwrap_or_else(|| PathBuf::from(format!("{}.mem_etcd", self.name))),
        );
        crate::wal::Options {
            dir,
            mode,
            exclude: self
                .wal_exclude_prefix
                .iter()
                .filter(|p| !p.is_empty())
                .map(|p| bytes::Bytes::copy_from_slice(p.as_bytes()))
                .collect(),
            flush_interval: flush_interval.max(Duration::from_millis(1)),
            segment_bytes: self.wal_segment_bytes.max(4096),
            snapshot_bytes: self.wal_snapshot_bytes,
            repair: self.wal_repair,
            failpoint: self.wal_failpoint.clone(),
        }
    }

    /// etcd's default-host rewrite (`UpdateDefaultClusterFromName`): an advertised URL left at
    /// its default (`http://localhost:2380` for peers, `http://localhost:2379` for clients)
    /// while the first listen URL of its kind is on `0.0.0.0` becomes `http://<default host>:`
    /// the listen URL's port, so that the others can reach it, and the member id is derived
    /// from it, as etcd's is. `default_host` finds the host ([`crate::netutil::default_host`]),
    /// asked only when a URL qualifies. Returns the host if it was used.
    pub fn use_default_host(
        &mut self,
        default_host: impl FnOnce() -> Option<std::net::Ipv4Addr>,
    ) -> Option<String> {
        /// The port of `url` if its host is `0.0.0.0`.
        fn any_address_port(url: Option<&String>) -> Option<String> {
            let rest = url?.split_once("://")?.1;
            let authority = rest.split('/').next()?;
            let (host, port) = authority.rsplit_once(':')?;
            (host == "0.0.0.0").then(|| port.to_string())
        }
        let peer = (self.initial_advertise_peer_urls == ["http://localhost:2380"])
            .then(|| any_address_port(self.listen_peer_urls.first()))
            .flatten();
        let client = (self.advertise_client_urls == ["http://localhost:2379"])
            .then(|| any_address_port(self.listen_client_urls.first()))
            .flatten();
        if peer.is_none() && client.is_none() {
            return None;
        }
        let host = default_host()?.to_string();
        if let Some(port) = peer {
            self.initial_advertise_peer_urls = vec![format!("http://{host}:{port}")];
        }
        if let Some(port) = client {
            self.advertise_client_urls = vec![format!("http://{host}:{port}")];
        }
        Some(host)
    }

    /// The Raft node these flags ask for, or `None` for a member alone (no Raft: the default).
    /// A member runs Raft when `--initial-cluster` names other members, when it joins a
    /// running cluster (`--initial-cluster-state existing`), or when its data directory
    /// already holds a cluster member's state (then the `--initial-*` flags are ignored, as
    /// etcd ignores them). An error says which flags disagree.
    pub fn cluster(&self) -> Result<Option<crate::raft::NodeOptions>, String> {
        self.node_options(false)
    }

    /// The Raft node of this member alone grown into a cluster of itself (by its first
    /// `member add`, see `etcdserver::grow`): these flags' node, with the (cluster id, member id)
    /// it answers with (kept from its first start).
    pub fn grown_cluster(&self, ids: (u64, u64)) -> Result<crate::raft::NodeOptions, String> {
        let mut o = self.node_options(true)?.ok_or("not a member alone")?;
        (o.cluster_id, o.member_id) = ids;
        let me = crate::raft::membership::InitialMember {
            name: self.name.clone(),
            peer_urls: o.peer_urls.clone(),
        };
        o.initial = std::collections::BTreeMap::from([(o.member_id, me)]);
        Ok(o)
    }

    /// `--initial-advertise-peer-urls`, normalized as etcd's URL parser leaves them, or which
    /// one is not a peer URL.
    pub fn advertised_peer_urls(&self) -> Result<Vec<String>, String> {
        self.initial_advertise_peer_urls
            .iter()
            .map(|u| {
                crate::raft::membership::normalize_url(u).ok_or_else(|| {
                    format!("--initial-advertise-peer-urls: {u:?} is not an http(s) or unix URL")
                })
            })
            .collect()
    }

    fn node_options(&self, grow: bool) -> Result<Option<crate::raft::NodeOptions>, String> {
        use crate::raft::membership;
        let wal = self.wal_options();
        let dir = wal.dir.raft();
        let existing_state = wal.mode != crate::wal::Mode::None && dir.has_member();
        let advertised = self.advertised_peer_urls()?;
        let initial = match &self.initial_cluster {
            Some(c) => membership::parse_initial_cluster(c)?,
            None => vec![membership::InitialMember {
                name: self.name.clone(),
                peer_urls: advertised.clone(),
            }],
        };
        let join = self.initial_cluster_state == ClusterState::Existing;
        if initial.len() < 2 && !join && !existing_state && !grow {
            return Ok(None);
        }
        let Some(me) = initial.iter().find(|m| m.name == self.name) else {
            return Err(format!(
                "--initial-cluster has no member named {:?} (--name): it must list this member",
                self.name
            ));
        };
        let (mut mine, mut adv) = (me.peer_urls.clone(), advertised.clone());
        mine.sort();
        adv.sort();
        if mine != adv {
            return Err(format!(
                "--initial-cluster gives {:?} the peer URLs {:?}, --initial-advertise-peer-urls                  gives {:?}: they must match",
                self.name, me.peer_urls, advertised
            ));
        }
        let token = &self.initial_cluster_token;
        let members = membership::initial_members(&initial, token);
        let member_id = membership::member_id(&advertised, token, None);
        let ids: Vec<u64> = members.keys().copied().collect();
        Ok(Some(crate::raft::NodeOptions {
            name: self.name.clone(),
            // A joining member learns its id and its cluster's from the running cluster.
            member_id: if join { 0 } else { member_id },
            cluster_id: if join { 0 } else { membership::cluster_id(&ids) },
            peer_urls: advertised,
            initial: members,
            new_cluster: !join,
            dir,
            mode: wal.mode,
            segment_bytes: wal.segment_bytes,
            flush_interval: wal.flush_interval,
            snapshot_bytes: wal.snapshot_bytes,
            keep_in_memory: self.snapshot_count,
            heartbeat: Duration::from_millis(self.heartbeat_interval.max(1)),
            election: Duration::from_millis(self.election_timeout.max(1)),
            // The caller's: TLS settings are the server's to build (`tls::peer_client`).
            tls: None,
            failpoint: self.peer_failpoint.clone(),
            initial_corrupt_check: self
                .feature_gates_state()?
                .get("InitialCorruptCheck")
                .copied()
                .unwrap_or(false),
            corrupt_check: self
                .experimental_corrupt_check_time
                .or(self.corrupt_check_time)
                .filter(|t| !t.is_zero()),
            compact_hash_check: self
                .feature_gates_state()?
                .get("CompactHashCheck")
                .copied()
                .unwrap_or(false)
                .then(|| {
                    self.experimental_compact_hash_check_time
                        .or(self.compact_hash_check_time)
                        .unwrap_or(Duration::from_secs(60))
                        .max(Duration::from_millis(1))
                }),
        }))
    }

    /// The effective progress-notify interval.
    pub fn progress_notify_interval(&self) -> Duration {
        self.experimental_watch_progress_notify_interval
            .unwrap_or(self.watch_progress_notify_interval)
            .max(Duration::from_millis(1))
    }

    /// The URLs clients are told to use.
    pub fn advertised_client_urls(&self) -> Vec<String> {
        if self.advertise_client_urls.is_empty() {
            self.listen_client_urls.clone()
        } else {
            self.advertise_client_urls.clone()
        }
    }

    /// Whether `--metrics=extensive` asks for the gRPC handling-time histograms.
    pub fn extensive_metrics(&self) -> bool {
        self.metrics == "extensive"
    }

    /// The emulated version's `major.minor`: etcd's cluster version (`/version`, metrics).
    pub fn cluster_version(&self) -> String {
        let mut parts = self.emulated_version.split('.');
        format!("{}.{}", parts.next().unwrap_or("3"), parts.next().unwrap_or("6"))
    }

    /// etcd reports its storage schema version as `major.minor.0` (Status, Snapshot, `/version`).
    pub fn storage_version(&self) -> String {
        format!("{}.0", self.cluster_version())
    }

    /// A member alone's member and cluster ids, derived from its flags as etcd derives them
    /// (so that the same flags give the same ids as an etcd member would show): the member's
    /// from its peer URLs in `--initial-cluster` (by default `<name>=` each
    /// `--initial-advertise-peer-urls`) and `--initial-cluster-token`, the cluster's from every
    /// member `--initial-cluster` names.
    pub fn ids(&self) -> (u64, u64) {
        use crate::raft::membership::{self, InitialMember, normalize_url};
        let advertised: Vec<String> = self
            .initial_advertise_peer_urls
            .iter()
            .map(|u| normalize_url(u).unwrap_or_else(|| u.trim().to_string()))
            .collect();
        let initial = self
            .initial_cluster
            .as_deref()
            .and_then(|c| membership::parse_initial_cluster(c).ok())
            .unwrap_or_else(|| {
                vec![InitialMember { name: self.name.clone(), peer_urls: advertised.clone() }]
            });
        let token = &self.initial_cluster_token;
        let mine = initial
            .iter()
            .find(|m| m.name == self.name)
            .map_or(advertised, |m| m.peer_urls.clone());
        let founders: Vec<u64> =
            membership::initial_members(&initial, token).keys().copied().collect();
        (membership::cluster_id(&founders), membership::member_id(&mine, token, None))
    }
}

/// etcd's default `--warning-unary-request-duration`.
pub const DEFAULT_WARNING_UNARY_REQUEST_DURATION: Duration = Duration::from_millis(300);

/// etcd's default `--snapshot-catchup-entries`.
pub const DEFAULT_SNAPSHOT_CATCHUP_ENTRIES: u64 = 5000;

/// How a flag that mem_etcd accepts without acting on it takes its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Takes {
    /// A Go bool flag: `--flag`, `--flag=false`.
    Bool,
    /// `--flag=v` or `--flag v`.
    Value,
}

/// etcd 3.6's flags that tune an etcd internal mem_etcd does not have, or a service it does
/// not offer: accepted (with their `ETCD_*` variables), and listed once at start as having no
/// effect. The README's flag table says why for each.
const NO_EFFECT: &[(&str, Takes)] = {
    use Takes::*;
    &[
        // bbolt, etcd's WAL files and its snapshots: mem_etcd has its own log (--wal-*).
        ("wal-dir", Value),
        ("max-snapshots", Value),
        ("max-wals", Value),
        ("snapshot-catchup-entries", Value),
        ("experimental-snapshot-catchup-entries", Value),
        ("backend-bbolt-freelist-type", Value),
        ("backend-batch-interval", Value),
        ("backend-batch-limit", Value),
        ("compaction-batch-limit", Value),
        ("experimental-compaction-batch-limit", Value),
        ("compaction-sleep-interval", Value),
        ("experimental-compaction-sleep-interval", Value),
        ("bootstrap-defrag-threshold-megabytes", Value),
        ("experimental-bootstrap-defrag-threshold-megabytes", Value),
        ("memory-mlock", Bool),
        ("experimental-memory-mlock", Bool),
        // Raft: openraft's own transport, Pre-Vote always on, no tick advance.
        ("initial-election-tick-advance", Bool),
        ("pre-vote", Bool),
        ("raft-read-timeout", Value),
        ("raft-write-timeout", Value),
        ("max-learners", Value),
        // gRPC and sockets.
        ("grpc-keepalive-min-time", Value),
        ("grpc-keepalive-interval", Value),
        ("grpc-keepalive-timeout", Value),
        ("socket-reuse-port", Bool),
        ("socket-reuse-address", Bool),
        // v2 and DNS SRV discovery (v3 discovery is `embed::discovery`).
        ("discovery", Value),
        ("discovery-fallback", Value),
        ("discovery-proxy", Value),
        ("discovery-srv", Value),
        ("discovery-srv-name", Value),
        // etcd's gRPC gateway dials its own gRPC port with these; mem_etcd's calls in process.
        ("client-cert-file", Value),
        ("client-key-file", Value),
        ("peer-skip-client-san-verification", Bool),
        ("experimental-peer-skip-client-san-verification", Bool),
        // v2 and HTTP extras.
        ("v2-deprecation", Value),
        ("cors", Value),
        ("host-whitelist", Value),
        ("enable-pprof", Bool),
        // Logging extras.
        ("enable-log-rotation", Bool),
        ("log-rotation-config-json", Value),
        // Tracing.
        ("enable-distributed-tracing", Bool),
        ("experimental-enable-distributed-tracing", Bool),
        ("distributed-tracing-address", Value),
        ("experimental-distributed-tracing-address", Value),
        ("distributed-tracing-service-name", Value),
        ("experimental-distributed-tracing-service-name", Value),
        ("distributed-tracing-instance-id", Value),
        ("experimental-distributed-tracing-instance-id", Value),
        ("distributed-tracing-sampling-rate", Value),
        ("experimental-distributed-tracing-sampling-rate", Value),
        // Periodic checks and warnings of etcd's apply loop and hash checks.
        ("downgrade-check-time", Value),
        ("experimental-downgrade-check-time", Value),
        ("warning-apply-duration", Value),
        ("experimental-warning-apply-duration", Value),
        // Acted on (`Config::warning_unary_request_duration`), parsed here with the others.
        ("warning-unary-request-duration", Value),
        ("experimental-warning-unary-request-duration", Value),
        // Flags etcd itself ignores (its `ignored` list, from etcd 2).
        ("cluster-active-size", Bool),
        ("cluster-remove-delay", Bool),
        ("cluster-sync-interval", Bool),
        ("config", Bool),
        ("force", Bool),
        ("max-result-buffer", Bool),
        ("max-retry-attempts", Bool),
        ("peer-heartbeat-interval", Bool),
        ("peer-election-timeout", Bool),
        ("retry-interval", Bool),
        ("snapshot", Bool),
        ("v", Bool),
        ("vv", Bool),
    ]
};

/// The flags parsed with [`NO_EFFECT`]'s that mem_etcd acts on.
const ACTED_ON: &[&str] =
    &["warning-unary-request-duration", "experimental-warning-unary-request-duration"];

/// etcd 3.6's deprecated flags and the warning it logs at start for each one given
/// (etcd's `deprecatedFlags`, word for word: log pipelines and etcd's tests look for them).
const DEPRECATED: &[(&str, &str)] = &[
    ("max-snapshots", "--max-snapshots is deprecated in 3.6 and will be decommissioned in 3.8."),
    (
        "v2-deprecation",
        "--v2-deprecation is deprecated and scheduled for removal in v3.8. The default value is enforced, ignoring user input.",
    ),
    (
        "experimental-compact-hash-check-enabled",
        "--experimental-compact-hash-check-enabled is deprecated in 3.6 and will be decommissioned in 3.7. Use '--feature-gates=CompactHashCheck=true' instead.",
    ),
    (
        "experimental-compact-hash-check-time",
        "--experimental-compact-hash-check-time is deprecated in 3.6 and will be decommissioned in 3.7. Use '--compact-hash-check-time' instead.",
    ),
    (
        "experimental-txn-mode-write-with-shared-buffer",
        "--experimental-txn-mode-write-with-shared-buffer is deprecated in v3.6 and will be decommissioned in v3.7. Use '--feature-gates=TxnModeWriteWithSharedBuffer=true' instead.",
    ),
    (
        "experimental-corrupt-check-time",
        "--experimental-corrupt-check-time is deprecated in v3.6 and will be decommissioned in v3.7. Use '--corrupt-check-time' instead.",
    ),
    (
        "experimental-compaction-batch-limit",
        "--experimental-compaction-batch-limit is deprecated in v3.6 and will be decommissioned in v3.7. Use '--compaction-batch-limit' instead.",
    ),
    (
        "experimental-watch-progress-notify-interval",
        "--experimental-watch-progress-notify-interval is deprecated in v3.6 and will be decommissioned in v3.7. Use '--watch-progress-notify-interval' instead.",
    ),
    (
        "experimental-warning-apply-duration",
        "--experimental-warning-apply-duration is deprecated in v3.6 and will be decommissioned in v3.7. Use '--warning-apply-duration' instead.",
    ),
    (
        "experimental-bootstrap-defrag-threshold-megabytes",
        "--experimental-bootstrap-defrag-threshold-megabytes is deprecated in v3.6 and will be decommissioned in v3.7. Use '--bootstrap-defrag-threshold-megabytes' instead.",
    ),
    (
        "experimental-memory-mlock",
        "--experimental-memory-mlock is deprecated in v3.6 and will be decommissioned in v3.7. Use '--memory-mlock' instead.",
    ),
    (
        "experimental-snapshot-catchup-entries",
        "--experimental-snapshot-catchup-entries is deprecated in v3.6 and will be decommissioned in v3.7. Use '--snapshot-catchup-entries' instead.",
    ),
    (
        "experimental-compaction-sleep-interval",
        "--experimental-compaction-sleep-interval is deprecated in v3.6 and will be decommissioned in v3.7. Use 'compaction-sleep-interval' instead.",
    ),
    (
        "experimental-downgrade-check-time",
        "--experimental-downgrade-check-time is deprecated in v3.6 and will be decommissioned in v3.7. Use '--downgrade-check-time' instead.",
    ),
    (
        "experimental-enable-distributed-tracing",
        "--experimental-enable-distributed-tracing is deprecated in 3.6 and will be decommissioned in 3.7. Use --enable-distributed-tracing instead.",
    ),
    (
        "experimental-distributed-tracing-address",
        "--experimental-distributed-tracing-address is deprecated in 3.6 and will be decommissioned in 3.7. Use --distributed-tracing-address instead.",
    ),
    (
        "experimental-distributed-tracing-service-name",
        "--experimental-distributed-tracing-service-name is deprecated in 3.6 and will be decommissioned in 3.7. Use --distributed-tracing-service-name instead.",
    ),
    (
        "experimental-distributed-tracing-instance-id",
        "--experimental-distributed-tracing-instance-id is deprecated in 3.6 and will be decommissioned in 3.7. Use --distributed-tracing-instance-id instead.",
    ),
    (
        "experimental-distributed-tracing-sampling-rate",
        "--experimental-distributed-tracing-sampling-rate is deprecated in 3.6 and will be decommissioned in 3.7. Use --distributed-tracing-sampling-rate instead.",
    ),
];

/// The stages `--v2-deprecation` takes (etcd checks the value, then ignores it).
const V2_DEPRECATION_STAGES: &[&str] =
    &["write-only", "write-only-skip-check", "write-only-drop-data", "gone"];

/// etcd 3.6's server feature gates and their defaults (etcd's `server/features`), and the
/// deprecated flags that set them.
const FEATURE_GATES: &[(&str, bool, Option<&str>)] = &[
    ("CompactHashCheck", false, Some("experimental-compact-hash-check-enabled")),
    ("InitialCorruptCheck", false, Some("experimental-initial-corrupt-check")),
    ("LeaseCheckpoint", false, Some("experimental-enable-lease-checkpoint")),
    ("LeaseCheckpointPersist", false, Some("experimental-enable-lease-checkpoint-persist")),
    ("SetMemberLocalAddr", false, None),
    ("StopGRPCServiceOnDefrag", false, Some("experimental-stop-grpc-service-on-defrag")),
    ("TxnModeWriteWithSharedBuffer", true, Some("experimental-txn-mode-write-with-shared-buffer")),
];

/// A feature gate's default (false for names etcd does not have).
pub fn feature_gate_default(gate: &str) -> bool {
    FEATURE_GATES.iter().any(|(g, default, _)| *g == gate && *default)
}

/// The flags, as parsed (see [`load`]).
#[derive(Debug)]
pub struct Loaded {
    pub config: Config,
    /// Flags given that have no effect in mem_etcd (for one line at start).
    pub no_effect: Vec<String>,
    /// etcd's warnings for the deprecated flags given, logged at start as etcd logs them.
    pub deprecated: Vec<&'static str>,
    /// Keys of the configuration file that are no flag (etcd ignores them too).
    pub unknown_keys: Vec<String>,
}

/// Why the flags were refused.
#[derive(Debug)]
pub enum LoadError {
    /// clap's own (unknown flag, bad value, --help): it prints and exits itself.
    Usage(clap::Error),
    /// A value etcd refuses while parsing its flags (feature gates): exit status 2.
    Flag(String),
    /// A configuration etcd refuses after parsing (TLS versions, a logger, the file).
    Invalid(String),
}

/// The command line parser: [`Config`]'s flags and the no-effect ones.
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    let mut cmd = Config::command();
    for (name, takes) in NO_EFFECT {
        let env = format!("ETCD_{}", name.to_uppercase().replace('-', "_"));
        let arg = clap::Arg::new(*name).long(*name).env(env).hide(true);
        cmd = cmd.arg(match takes {
            Takes::Bool => arg.num_args(0..=1).default_missing_value("true").require_equals(true),
            Takes::Value => arg.num_args(1).allow_hyphen_values(true),
        });
    }
    cmd
}

/// Parses etcd's command line (and `ETCD_*` variables) as etcd parses it: Go's flag syntax
/// (`-flag` and `--flag`, `=v` or a separate value), the last of a repeated flag wins, and with
/// `--config-file` (or `ETCD_CONFIG_FILE`) the file alone counts. The first argument is the
/// program's name.
pub fn load<I, T>(args: I) -> Result<Loaded, LoadError>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString>,
{
    use clap::FromArgMatches;
    let args: Vec<std::ffi::OsString> = args.into_iter().map(|a| go_style(a.into())).collect();
    let cmd = command();
    let mut matches = cmd.clone().try_get_matches_from(&args).map_err(LoadError::Usage)?;
    let mut unknown_keys = Vec::new();
    let file = matches.get_one::<PathBuf>("config_file").cloned();
    let file = file.filter(|_| !matches.get_flag("version"));
    if let Some(path) = &file {
        let (file_args, unknown) = file_args(path, &cmd)?;
        unknown_keys = unknown;
        let quiet = cmd.mut_args(|a| a.env(None::<&str>));
        let argv = std::iter::once("mem_etcd".to_string()).chain(file_args);
        matches = quiet.try_get_matches_from(argv).map_err(|e| {
            LoadError::Invalid(format!("{}: {}", path.display(), e.kind()).replace('\n', " "))
        })?;
    }
    let mut config = Config::from_arg_matches(&matches).map_err(LoadError::Usage)?;
    if file.is_some() {
        config.config_file = file;
    }
    // Whether a flag was given (on the command line, in a variable or in the file); `id` is
    // clap's id: a no-effect flag's name, or a field of `Config`.
    let given = |id: &str| {
        matches.ids().any(|i| i.as_str() == id)
            && matches!(
                matches.value_source(id),
                Some(
                    clap::parser::ValueSource::CommandLine | clap::parser::ValueSource::EnvVariable
                )
            )
    };
    let no_effect = NO_EFFECT
        .iter()
        .filter(|(name, _)| given(name) && !ACTED_ON.contains(name))
        .map(|(name, _)| name.to_string())
        .collect();
    let deprecated = DEPRECATED
        .iter()
        .filter(|(name, _)| given(name) || given(&name.replace('-', "_")))
        .map(|(_, warning)| *warning)
        .collect();
    if !config.version {
        config.feature_gates_state().map_err(LoadError::Flag)?;
        // Values etcd's flag parser refuses although the flag then changes nothing.
        if let Some(v) = matches.get_one::<String>("v2-deprecation")
            && let Some(bad) = v.split(',').find(|s| !V2_DEPRECATION_STAGES.contains(s))
        {
            return Err(LoadError::Flag(format!(
                "invalid value {v:?} for flag -v2-deprecation: invalid value {bad:?}"
            )));
        }
        let nonzero = |id: &str| {
            matches
                .get_one::<String>(id)
                .is_some_and(|v| crate::duration::parse_duration(v).map_or(true, |d| !d.is_zero()))
        };
        if nonzero("warning-unary-request-duration")
            && nonzero("experimental-warning-unary-request-duration")
        {
            return Err(LoadError::Invalid(
                "both --experimental-warning-unary-request-duration and \
                 --warning-unary-request-duration flags are set. Use only \
                 --warning-unary-request-duration"
                    .into(),
            ));
        }
        config.validate().map_err(LoadError::Invalid)?;
        // etcd takes the `--experimental-` form when it is given, the new name otherwise.
        let pick = |name: &str| {
            let old = format!("experimental-{name}");
            let id = if given(&old) { old } else { name.to_string() };
            matches.get_one::<String>(&id).map(|v| (id, v.clone()))
        };
        let flag_error = |id: &str, v: &str| {
            LoadError::Flag(format!("invalid value {v:?} for flag -{id}: parse error"))
        };
        config.v2_deprecation_skip_check = matches
            .get_one::<String>("v2-deprecation")
            .is_some_and(|v| v == "write-only-skip-check");
        if let Some((id, v)) = pick("snapshot-catchup-entries") {
            config.snapshot_catchup_entries = v.parse().map_err(|_| flag_error(&id, &v))?;
        }
        if let Some((id, v)) = pick("bootstrap-defrag-threshold-megabytes") {
            config.bootstrap_defrag_threshold_megabytes =
                v.parse().map_err(|_| flag_error(&id, &v))?;
        }
        // Unlike the others, the new name wins, and 0 is the default (etcd's
        // parseWarningUnaryRequestDuration).
        for id in ["experimental-warning-unary-request-duration", "warning-unary-request-duration"]
        {
            if let Some(v) = matches.get_one::<String>(id) {
                let d = crate::duration::parse_duration(v).map_err(|_| flag_error(id, v))?;
                if !d.is_zero() {
                    config.warning_unary_request_duration = d;
                }
            }
        }
    }
    Ok(Loaded { config, no_effect, deprecated, unknown_keys })
}

/// A configuration from `flags` alone, with every other setting at its default (no environment
/// variables, no file): how `etcd gateway` and `etcd grpc-proxy` (`proxy`) build their
/// listeners' TLS from the same flags, read by the same code, as the server's.
pub fn from_flags(flags: &[String]) -> Result<Config, String> {
    use clap::FromArgMatches;
    let cmd = command().mut_args(|a| a.env(None::<&str>));
    let argv = std::iter::once("mem_etcd".to_string()).chain(flags.iter().cloned());
    let matches = cmd.try_get_matches_from(argv).map_err(|e| e.to_string())?;
    Config::from_arg_matches(&matches).map_err(|e| e.to_string())
}

/// Go's flag package takes `-flag` as `--flag`; clap knows only the latter.
pub(crate) fn go_style(a: std::ffi::OsString) -> std::ffi::OsString {
    match a.to_str() {
        Some(s)
            if s.starts_with('-')
                && !s.starts_with("--")
                && s[1..].starts_with(|c: char| c.is_ascii_alphabetic())
                && s != "-h" =>
        {
            format!("-{s}").into()
        }
        _ => a,
    }
}

/// The flags an etcd YAML configuration file (`--config-file`) sets, as `--key=value`, and
/// its keys that are no flag. The keys are the flag names, but for the TLS settings, which are
/// under `client-transport-security` and `peer-transport-security`.
fn file_args(
    path: &std::path::Path,
    cmd: &clap::Command,
) -> Result<(Vec<String>, Vec<String>), LoadError> {
    use yaml_rust2::Yaml;
    let fail = |e: String| LoadError::Invalid(format!("--config-file {}: {e}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
    let docs = yaml_rust2::YamlLoader::load_from_str(&text).map_err(|e| fail(e.to_string()))?;
    let known = |k: &str| cmd.get_arguments().any(|a| a.get_long() == Some(k));
    fn scalar(v: &Yaml) -> Option<String> {
        match v {
            Yaml::String(s) | Yaml::Real(s) => Some(s.clone()),
            Yaml::Integer(i) => Some(i.to_string()),
            Yaml::Boolean(b) => Some(b.to_string()),
            Yaml::Array(a) => Some(a.iter().filter_map(scalar).collect::<Vec<_>>().join(",")),
            _ => None,
        }
    }
    let (mut args, mut unknown) = (Vec::new(), Vec::new());
    let Some(doc) = docs.into_iter().next() else { return Ok((args, unknown)) };
    let Yaml::Hash(map) = doc else {
        return Err(fail("not a map of flag names to values".into()));
    };
    for (k, v) in &map {
        let Some(key) = k.as_str() else { continue };
        let tls = match key {
            "client-transport-security" => Some(""),
            "peer-transport-security" => Some("peer-"),
            _ => None,
        };
        if let Some(prefix) = tls {
            let Yaml::Hash(inner) = v else {
                if v.is_null() {
                    continue;
                }
                return Err(fail(format!("invalid {key}")));
            };
            for (k, v) in inner {
                let Some(k) = k.as_str() else { continue };
                let flag = match (prefix, k) {
                    ("", "allowed-hostname") => "client-cert-allowed-hostname".to_string(),
                    ("peer-", "allowed-cn" | "allowed-hostname") => {
                        format!("peer-cert-{k}")
                    }
                    (p, k) => format!("{p}{k}"),
                };
                match scalar(v) {
                    Some(v) if known(&flag) => args.push(format!("--{flag}={v}")),
                    _ => unknown.push(format!("{key}.{k}")),
                }
            }
            continue;
        }
        let flag = match key {
            // etcd reads this misspelling too.
            "experimental-snapshot-catch-up-entries" => "experimental-snapshot-catchup-entries",
            k => k,
        };
        match scalar(v) {
            Some(v) if known(flag) && flag != "config-file" => args.push(format!("--{flag}={v}")),
            None if v.is_null() => {}
            _ => unknown.push(key.to_string()),
        }
    }
    Ok((args, unknown))
}

/// The TLS protocol versions `--tls-min-version` and `--tls-max-version` allow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    Tls12,
    Tls13,
}

/// etcd's names of TLS versions (empty: the newest).
fn tls_version(v: &str) -> Result<Option<TlsVersion>, String> {
    match v {
        "" => Ok(None),
        "TLS1.2" => Ok(Some(TlsVersion::Tls12)),
        "TLS1.3" => Ok(Some(TlsVersion::Tls13)),
        _ => Err(format!("unexpected TLS version {v:?} (must be one of: TLS1.2, TLS1.3)")),
    }
}

impl Config {
    /// The TLS versions https listeners accept, oldest first.
    pub fn tls_versions(&self) -> Result<Vec<TlsVersion>, String> {
        let min = tls_version(&self.tls_min_version)?.unwrap_or(TlsVersion::Tls12);
        let max = tls_version(&self.tls_max_version)?.unwrap_or(TlsVersion::Tls13);
        if min > max {
            return Err(format!(
                "min version ({}) is greater than max version ({})",
                self.tls_min_version, self.tls_max_version
            ));
        }
        Ok([TlsVersion::Tls12, TlsVersion::Tls13]
            .into_iter()
            .filter(|v| min <= *v && *v <= max)
            .collect())
    }

    /// Every feature gate's state: the defaults, then the deprecated flags, then
    /// `--feature-gates`, as etcd sets them; an error in etcd's words.
    pub fn feature_gates_state(
        &self,
    ) -> Result<std::collections::BTreeMap<&'static str, bool>, String> {
        let mut set: std::collections::BTreeMap<&'static str, bool> = Default::default();
        for value in &self.feature_gates {
            let refuse =
                |why: String| format!("invalid value {value:?} for flag -feature-gates: {why}");
            for item in value.split(',').filter(|s| !s.is_empty()) {
                let (k, v) = match item.split_once('=') {
                    Some((k, v)) => (k.trim(), v.trim()),
                    None => return Err(refuse(format!("missing bool value for {}", item.trim()))),
                };
                let b = go_bool(v).ok_or_else(|| {
                    refuse(format!(
                        "invalid value of {k}={v}, err: strconv.ParseBool: parsing {v:?}: invalid syntax"
                    ))
                })?;
                let name = ["AllAlpha", "AllBeta"]
                    .into_iter()
                    .chain(FEATURE_GATES.iter().map(|g| g.0))
                    .find(|n| *n == k)
                    .ok_or_else(|| refuse(format!("unrecognized feature gate: {k}")))?;
                set.insert(name, b);
            }
        }
        let all_gates = self.feature_gates.join(",");
        let mut state = std::collections::BTreeMap::new();
        for (gate, default, flag) in FEATURE_GATES {
            // AllBeta covers the one beta gate; AllAlpha the others.
            let all = if *gate == "TxnModeWriteWithSharedBuffer" { "AllBeta" } else { "AllAlpha" };
            let mut on = set.get(all).copied().unwrap_or(*default);
            if let Some(flag) = flag
                && let Some(v) = self.experimental_gate_flag(flag)
            {
                if all_gates.contains(gate) {
                    let g = set.get(gate).copied().unwrap_or(*default);
                    return Err(format!(
                        "cannot specify both flags: --{flag}={v} and --feature-gates={gate}={g} at \
                         the same time, please just use --feature-gates={gate}={g}"
                    ));
                }
                on = v;
            }
            state.insert(*gate, set.get(gate).copied().unwrap_or(on));
        }
        Ok(state)
    }

    fn experimental_gate_flag(&self, flag: &str) -> Option<bool> {
        match flag {
            "experimental-compact-hash-check-enabled" => {
                self.experimental_compact_hash_check_enabled
            }
            "experimental-initial-corrupt-check" => self.experimental_initial_corrupt_check,
            "experimental-enable-lease-checkpoint" => self.experimental_enable_lease_checkpoint,
            "experimental-enable-lease-checkpoint-persist" => {
                self.experimental_enable_lease_checkpoint_persist
            }
            "experimental-stop-grpc-service-on-defrag" => {
                self.experimental_stop_grpc_service_on_defrag
            }
            "experimental-txn-mode-write-with-shared-buffer" => {
                self.experimental_txn_mode_write_with_shared_buffer
            }
            _ => None,
        }
    }

    /// What etcd checks once its flags are parsed, in its words.
    pub fn validate(&self) -> Result<(), String> {
        let versions = self.tls_versions()?;
        if versions == [TlsVersion::Tls13] && !self.cipher_suites.is_empty() {
            return Err("cipher suites cannot be configured when only TLS1.3 is enabled".into());
        }
        match self.logger.as_str() {
            "zap" => {}
            "capnslog" => return Err("--logger=capnslog is removed in v3.5".into()),
            l => return Err(format!("unknown logger option {l:?}")),
        }
        if self.log_outputs.len() > 1 && self.log_outputs.iter().any(|o| o == "default") {
            return Err("multi logoutput for \"default\" is not supported yet".into());
        }
        match self.log_format.as_str() {
            "json" | "console" | "" => {}
            f => return Err(format!("unknown log format: {f}, supported values json, console")),
        }
        if !self.discovery_endpoints.is_empty() && self.initial_cluster.is_some() {
            return Err("multiple discovery or bootstrap flags are set. Choose one of \
                        \"initial-cluster\", \"discovery\", \"discovery-endpoints\" or \
                        \"discovery-srv\""
                .into());
        }
        if self.discovery_token.is_empty() != self.discovery_endpoints.is_empty() {
            return Err("both --discovery-token and --discovery-endpoints must be set".into());
        }
        if self.discovery_endpoints.iter().any(|e| e.trim().is_empty()) {
            return Err("--discovery-endpoints must not contain empty endpoints".into());
        }
        Ok(())
    }
}

/// Go's `strconv.ParseBool` (the server's feature gates, the proxies' bool flags).
pub fn go_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

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

    #[test]
    fn auto_compaction_reads_retention_as_etcd_does() {
        let policy = |args: &[&str]| {
            Config::parse_from(std::iter::once("mem_etcd").chain(args.iter().copied()))
                .auto_compaction()
        };
        assert_eq!(policy(&[]), Ok(None));
        let hours = policy(&["--auto-compaction-retention", "2"]);
        assert_eq!(hours, Ok(Some(AutoCompaction::Periodic(Duration::from_secs(7200)))));
        let mins = policy(&["--auto-compaction-retention", "5m"]);
        assert_eq!(mins, Ok(Some(AutoCompaction::Periodic(Duration::from_secs(300)))));
        let revs =
            policy(&["--auto-compaction-mode", "revision", "--auto-compaction-retention", "1000"]);
        assert_eq!(
            revs,
            Ok(Some(AutoCompaction::Revision { retention: 1000, every: Duration::from_secs(300) }))
        );
        assert_eq!(policy(&["--auto-compaction-mode", "revision"]), Ok(None));
        assert!(
            policy(&["--auto-compaction-mode", "revision", "--auto-compaction-retention", "5m"])
                .is_err()
        );
        assert!(policy(&["--auto-compaction-retention", "soon"]).is_err());
        assert!(policy(&["--auto-compaction-retention=-1"]).is_err());
    }

    #[test]
    fn defaults_serve_on_localhost_2379() {
        let c = Config::parse_from(["mem_etcd"]);
        assert_eq!(c.listen_client_urls, ["http://127.0.0.1:2379"]);
        assert_eq!(c.max_request_bytes, 1_572_864);
        // etcd 3.6 with its default flags: member 8e9e05c52164694d, cluster cdf818194e3a8c32.
        let (cluster, member) = c.ids();
        assert_eq!((cluster, member), (0xcdf818194e3a8c32, 0x8e9e05c52164694d));
    }

    #[test]
    fn default_advertised_urls_on_any_address_take_the_default_host_as_etcds_do() {
        let host = || Some(std::net::Ipv4Addr::new(192, 0, 2, 7));
        let mut c = from_flags(&["--listen-peer-urls=http://0.0.0.0:12380".into()]).unwrap();
        assert_eq!(c.use_default_host(host).as_deref(), Some("192.0.2.7"));
        assert_eq!(c.initial_advertise_peer_urls, ["http://192.0.2.7:12380"]);
        // The id then follows the rewritten URL, as etcd's (sha1 of it and the token).
        let id = crate::raft::membership::member_id(
            &["http://192.0.2.7:12380".to_string()],
            "etcd-cluster",
            None,
        );
        assert_eq!(c.ids().1, id);
        // Clients too, when their advertised URL is etcd's default.
        let mut c = from_flags(&[
            "--listen-client-urls=http://0.0.0.0:12379".into(),
            "--advertise-client-urls=http://localhost:2379".into(),
        ])
        .unwrap();
        assert_eq!(c.use_default_host(host).as_deref(), Some("192.0.2.7"));
        assert_eq!(c.advertise_client_urls, ["http://192.0.2.7:12379"]);
        assert_eq!(c.initial_advertise_peer_urls, ["http://localhost:2380"]);
        // An advertised URL given, or a listen URL on a named host: left alone, and the
        // default host is not even looked for.
        for flags in [
            [
                "--listen-peer-urls=http://0.0.0.0:12380",
                "--initial-advertise-peer-urls=http://a:2380",
            ],
            ["--listen-peer-urls=http://127.0.0.1:12380", "--name=x"],
        ] {
            let flags: Vec<String> = flags.iter().map(|f| f.to_string()).collect();
            let mut c = from_flags(&flags).unwrap();
            let before = c.initial_advertise_peer_urls.clone();
            assert_eq!(c.use_default_host(|| panic!("not asked")), None);
            assert_eq!(c.initial_advertise_peer_urls, before);
        }
        // No default route: nothing changes.
        let mut c = from_flags(&["--listen-peer-urls=http://0.0.0.0:12380".into()]).unwrap();
        assert_eq!(c.use_default_host(|| None), None);
        assert_eq!(c.initial_advertise_peer_urls, ["http://localhost:2380"]);
    }

    #[test]
    fn ids_of_etcds_e2e_member_are_the_bytes_its_tests_expect() {
        // etcd's e2e TestCtlV3GetFormat runs one member as its framework starts it (peer auto
        // TLS: https peer URLs on localhost, base port 20000, token "new") and finds these
        // bytes in `etcdctl get -w protobuf`: the header's cluster_id (field 1) and the start
        // of its member_id (field 2), as protobuf varints.
        let name = "TestCtlV3GetFormat-test-0";
        let c = Config::parse_from([
            "mem_etcd",
            &format!("--name={name}"),
            "--listen-client-urls=http://localhost:20000",
            "--listen-peer-urls=https://localhost:20001",
            "--initial-advertise-peer-urls=https://localhost:20001",
            "--initial-cluster-token=new",
            &format!("--initial-cluster={name}=https://localhost:20001"),
            "--initial-cluster-state=new",
        ]);
        let (cluster, member) = c.ids();
        let varint = |mut v: u64| {
            let mut out = Vec::new();
            while v >= 0x80 {
                out.push((v as u8) | 0x80);
                v >>= 7;
            }
            out.push(v as u8);
            out
        };
        let mut header = vec![0x08];
        header.extend(varint(cluster));
        header.push(0x10);
        header.extend(varint(member));
        let want = b"\x08\x93\xe7\xf6\x93\xd4\xc5\x86\xe1\x34\x10\xed";
        assert_eq!(&header[..want.len()], want, "{cluster:x} {member:x}");
    }

    #[test]
    fn go_flag_syntax_and_the_last_of_a_repeat_wins() {
        let c = load([
            "mem_etcd",
            "-name",
            "a",
            "--name=b",
            "--max-snapshots=1",
            "--max-snapshots",
            "2",
            "--snapshot-count=1",
            "--snapshot-count",
            "2",
        ])
        .expect("parses");
        assert_eq!(c.config.name, "b");
        assert_eq!(c.config.snapshot_count, 2);
        assert_eq!(c.no_effect, ["max-snapshots"]);
        let c = load([
            "mem_etcd",
            "--listen-client-urls=http://127.0.0.1:1,http://127.0.0.1:2",
            "--listen-client-urls=http://127.0.0.1:3",
            "--client-cert-auth=true",
            "--client-cert-auth=false",
            "-auto-tls",
        ])
        .expect("parses");
        assert_eq!(c.config.listen_client_urls, ["http://127.0.0.1:3"]);
        assert!(!c.config.client_cert_auth && c.config.auto_tls);
    }

    #[test]
    fn feature_gates_as_etcd_reads_them() {
        let gates = |args: &[&str]| {
            let c = Config::parse_from(std::iter::once("mem_etcd").chain(args.iter().copied()));
            c.feature_gates_state()
        };
        let g = gates(&["--feature-gates=InitialCorruptCheck=true"]).unwrap();
        assert!(g["InitialCorruptCheck"]);
        assert!(g["TxnModeWriteWithSharedBuffer"]);
        let g = gates(&["--experimental-initial-corrupt-check"]).unwrap();
        assert!(g["InitialCorruptCheck"]);
        assert_eq!(
            gates(&["--feature-gates=Foo=true"]).unwrap_err(),
            "invalid value \"Foo=true\" for flag -feature-gates: unrecognized feature gate: Foo"
        );
        assert!(
            gates(&[
                "--feature-gates=InitialCorruptCheck=true",
                "--experimental-initial-corrupt-check"
            ])
            .unwrap_err()
            .starts_with("cannot specify both flags")
        );
    }

    #[test]
    fn config_file_ignores_the_command_line() {
        let dir = std::env::temp_dir().join(format!("mem_etcd-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("etcd.yaml");
        std::fs::write(
            &file,
            "name: yaml\nlisten-client-urls: http://127.0.0.1:1,http://127.0.0.1:2\n\
             client-transport-security:\n  cert-file: /c\n  key-file: /k\n  client-cert-auth: true\n\
             peer-transport-security:\n  allowed-cn: m\nbogus: 1\n",
        )
        .unwrap();
        let arg = format!("--config-file={}", file.display());
        let c = load(["mem_etcd", &arg, "--name=cmdline", "--max-txn-ops=5"]).expect("parses");
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(c.config.name, "yaml");
        assert_eq!(c.config.max_txn_ops, 128);
        assert_eq!(c.config.listen_client_urls.len(), 2);
        assert_eq!(c.config.cert_file, Some(PathBuf::from("/c")));
        assert!(c.config.client_cert_auth);
        assert_eq!(c.config.peer_cert_allowed_cn, ["m"]);
        assert_eq!(c.unknown_keys, ["bogus"]);
    }
}
