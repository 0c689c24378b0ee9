//! Command-line configuration, with etcd's flag names and `ETCD_*` environment variables so
//! mem_etcd can stand in for etcd in scripts, manifests and test frameworks.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

pub use crate::duration::parse_duration;

/// The oldest etcd version kube-apiserver enables consistent reads from cache and WatchList for.
const MIN_EMULATED_VERSION: (u64, u64, u64) = (3, 5, 13);

#[derive(Parser, Clone, Debug)]
#[command(
    name = "mem_etcd",
    version,
    about = "An in-memory, etcd v3 compatible server for Kubernetes",
    after_help = "Backups (taken with `etcdctl snapshot save`):\n  \
                  mem_etcd snapshot restore FILE --data-dir DIR [--skip-hash-check]\n  \
                  mem_etcd snapshot restore FILE --data-dir DIR --name NAME --initial-cluster ... \
                  [--initial-cluster-token T]   (one member of a cluster founded from FILE)\n  \
                  mem_etcd snapshot status FILE\n\n\
                  FILE may also be an etcd snapshot.db (`etcdctl snapshot save` against etcd): \
                  restore keeps its revisions, compaction and leases. The way back:\n  \
                  mem_etcd snapshot export FILE --output etcd-snapshot.db   (for `etcdutl snapshot restore`)"
)]
pub struct Config {
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
    pub wal_mode: WalMode,

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

    /// WAL segment size: a segment is closed and a new one started past it.
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

    /// URLs to serve clients on: http://host:port or unix://path, comma-separated. Each serves
    /// gRPC, the HTTP endpoints (/health, /version, /metrics) and etcd's JSON gateway (/v3/...).
    #[arg(
        long,
        env = "ETCD_LISTEN_CLIENT_URLS",
        default_value = "http://127.0.0.1:2379",
        value_delimiter = ','
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
    #[arg(long, env = "ETCD_LISTEN_METRICS_URLS", value_delimiter = ',')]
    pub listen_metrics_urls: Vec<String>,

    /// Client URLs advertised to clients (MemberList); defaults to the listen URLs.
    #[arg(long, env = "ETCD_ADVERTISE_CLIENT_URLS", value_delimiter = ',')]
    pub advertise_client_urls: Vec<String>,

    /// This member's peer URLs, as the other members reach it (comma-separated).
    #[arg(
        long,
        env = "ETCD_INITIAL_ADVERTISE_PEER_URLS",
        default_value = "http://localhost:2380",
        value_delimiter = ','
    )]
    pub initial_advertise_peer_urls: Vec<String>,

    /// Where this member accepts the other members' traffic (http:// or https://, comma-
    /// separated). Only a member of a cluster of several listens.
    #[arg(
        long,
        env = "ETCD_LISTEN_PEER_URLS",
        default_value = "http://localhost:2380",
        value_delimiter = ','
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

    /// Mixed into the member and cluster ids, so that two clusters never take each other's
    /// members for their own.
    #[arg(long, env = "ETCD_INITIAL_CLUSTER_TOKEN", default_value = "etcd-cluster")]
    pub initial_cluster_token: String,

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

    /// Accepted for etcd's command lines. A cluster member snapshots its state by bytes
    /// logged, as --wal-snapshot-bytes says, not by entry count.
    #[arg(long, env = "ETCD_SNAPSHOT_COUNT", hide = true)]
    pub snapshot_count: Option<u64>,

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

/// `--wal-mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum WalMode {
    None,
    Buffered,
    Fsync,
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
        let mode = match (self.fsync, self.wal_mode) {
            (true, _) | (_, WalMode::Fsync) => crate::wal::Mode::Fsync,
            (_, WalMode::Buffered) => crate::wal::Mode::Buffered,
            (_, WalMode::None) => crate::wal::Mode::None,
        };
        let dir = self
            .data_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("{}.mem_etcd", self.name)));
        crate::wal::Options {
            dir,
            mode,
            exclude: self
                .wal_exclude_prefix
                .iter()
                .filter(|p| !p.is_empty())
                .map(|p| bytes::Bytes::copy_from_slice(p.as_bytes()))
                .collect(),
            flush_interval: self.wal_flush_interval.max(Duration::from_millis(1)),
            segment_bytes: self.wal_segment_bytes.max(4096),
            snapshot_bytes: self.wal_snapshot_bytes,
            repair: self.wal_repair,
            failpoint: self.wal_failpoint.clone(),
        }
    }

    /// The Raft node these flags ask for, or `None` for a member alone (no Raft: the default).
    /// A member runs Raft when `--initial-cluster` names other members, when it joins a
    /// running cluster (`--initial-cluster-state existing`), or when its data directory
    /// already holds a cluster member's state (then the `--initial-*` flags are ignored, as
    /// etcd ignores them). An error says which flags disagree.
    pub fn cluster(&self) -> Result<Option<crate::raft::NodeOptions>, String> {
        use crate::raft::membership::{self, normalize_url};
        let wal = self.wal_options();
        let dir = wal.dir.join("raft");
        let existing_state = wal.mode != crate::wal::Mode::None && dir.join("member").exists();
        let advertised: Vec<String> = self
            .initial_advertise_peer_urls
            .iter()
            .map(|u| {
                normalize_url(u).ok_or_else(|| {
                    format!("--initial-advertise-peer-urls: {u:?} is not an http(s) URL")
                })
            })
            .collect::<Result<_, _>>()?;
        let initial = match &self.initial_cluster {
            Some(c) => membership::parse_initial_cluster(c)?,
            None => vec![membership::InitialMember {
                name: self.name.clone(),
                peer_urls: advertised.clone(),
            }],
        };
        let join = self.initial_cluster_state == ClusterState::Existing;
        if initial.len() < 2 && !join && !existing_state {
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
        let tls = match (&self.peer_cert_file, &self.peer_key_file) {
            (Some(c), Some(k)) => {
                Some(crate::raft::tls::PeerTls::new(c, k, self.peer_trusted_ca_file.as_deref())?)
            }
            (None, None) => None,
            _ => return Err("--peer-cert-file and --peer-key-file go together".into()),
        };
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
            heartbeat: Duration::from_millis(self.heartbeat_interval.max(1)),
            election: Duration::from_millis(self.election_timeout.max(1)),
            tls,
            failpoint: self.peer_failpoint.clone(),
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

    /// The emulated version's `major.minor`: etcd's cluster version (`/version`, metrics).
    pub fn cluster_version(&self) -> String {
        let mut parts = self.emulated_version.split('.');
        format!("{}.{}", parts.next().unwrap_or("3"), parts.next().unwrap_or("6"))
    }

    /// etcd reports its storage schema version as `major.minor.0` (Status, Snapshot, `/version`).
    pub fn storage_version(&self) -> String {
        format!("{}.0", self.cluster_version())
    }

    /// Member and cluster ids: stable for the same name and advertised URLs (as etcd derives
    /// them from its configuration), never zero.
    pub fn ids(&self) -> (u64, u64) {
        let mut member = crc32c::crc32c(self.name.as_bytes()) as u64;
        for u in self.advertised_client_urls() {
            member = (member << 7) ^ crc32c::crc32c(u.as_bytes()) as u64;
        }
        let member = (member.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 1) | 1;
        let cluster = (member.rotate_left(17).wrapping_mul(0xBF58_476D_1CE4_E5B9) >> 1) | 1;
        (cluster, member)
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
        let (cluster, member) = c.ids();
        assert!(cluster != 0 && member != 0 && cluster != member);
    }
}
