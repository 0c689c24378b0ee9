//! The storage flags: the data directory, the WAL, the keyspace, auto-compaction.

use std::path::PathBuf;
use std::time::Duration;

use crate::duration::parse_duration;

/// Where and how the store is logged (mem_etcd's own WAL; etcd's bbolt flags have no effect).
#[derive(clap::Args, Clone, Debug)]
pub struct StorageFlags {
    /// Where the write-ahead log and snapshots live (default: `<name>.mem_etcd` in the working
    /// directory; unused with --wal-mode none).
    #[arg(long, env = "ETCD_DATA_DIR", display_order = 4)]
    pub data_dir: Option<PathBuf>,

    /// none: nothing on disk, a restart starts empty; buffered: a write is acknowledged once
    /// written to the OS and fdatasync'd within --wal-flush-interval; fsync: acknowledged once
    /// fdatasync'd (group commit).
    #[arg(
        long,
        env = "MEM_ETCD_WAL_MODE",
        value_enum,
        default_value = "buffered",
        display_order = 5
    )]
    pub wal_mode: crate::wal::Mode,

    /// Shorthand for --wal-mode fsync.
    #[arg(long, env = "MEM_ETCD_FSYNC", display_order = 6)]
    pub fsync: bool,

    /// Never fsync: the log is written to the OS and synced only at shutdown (a crash of the
    /// machine loses what the OS had not written). Overrides --wal-mode fsync.
    #[arg(
        long,
        env = "ETCD_UNSAFE_NO_FSYNC",
        num_args = 0..=1,
        default_missing_value = "true",
        default_value = "false",
        action = clap::ArgAction::Set,
        display_order = 87
    )]
    pub unsafe_no_fsync: bool,

    /// Keys starting with this prefix are kept in memory only (repeatable), e.g.
    /// /registry/events/. Their revisions are still logged, so revisions never go backwards.
    #[arg(long, env = "MEM_ETCD_WAL_EXCLUDE_PREFIX", value_delimiter = ',', display_order = 7)]
    pub wal_exclude_prefix: Vec<String>,

    /// Buffered mode: how often written log data is fdatasync'd; an OS crash or power loss
    /// loses at most about this much.
    #[arg(long, env = "MEM_ETCD_WAL_FLUSH_INTERVAL", default_value = "10ms", value_parser = parse_duration, display_order = 8)]
    pub wal_flush_interval: Duration,

    /// WAL segment size: a segment is closed and a new one started past it (a member alone's
    /// WAL; a cluster member's Raft log).
    #[arg(long, env = "MEM_ETCD_WAL_SEGMENT_BYTES", default_value_t = 64 << 20, display_order = 9)]
    pub wal_segment_bytes: u64,

    /// A snapshot is written (and the log segments it covers deleted) once this many bytes,
    /// or the store's size if larger, were logged since the last one.
    #[arg(long, env = "MEM_ETCD_WAL_SNAPSHOT_BYTES", default_value_t = 256 << 20, display_order = 10)]
    pub wal_snapshot_bytes: u64,

    /// On a corrupt log record, truncate the log there (dropping it and what follows in its
    /// stream) instead of refusing to start.
    #[arg(long, env = "MEM_ETCD_WAL_REPAIR", display_order = 11)]
    pub wal_repair: bool,

    /// Fault injection for tests: a file whose content (`enospc`, `short`) makes WAL writes
    /// fail.
    #[arg(long, hide = true, display_order = 12)]
    pub wal_failpoint: Option<PathBuf>,

    /// kube-apiserver's --etcd-prefix: keys below it are partitioned per resource. Several
    /// (comma-separated or repeated) where several kube-apiservers share the store, each under
    /// its own prefix, as hosted control planes do.
    #[arg(
        long,
        env = "MEM_ETCD_REGISTRY_PREFIX",
        value_delimiter = ',',
        default_value = "/registry",
        display_order = 98
    )]
    pub registry_prefix: Vec<String>,

    /// A hosted control plane sharing the store: its kube-apiserver's --etcd-prefix, and
    /// optionally its own space quota in bytes (`/tenant-a` or `/tenant-a=1073741824`);
    /// comma-separated or repeated. Its resources are partitioned as --registry-prefix's are,
    /// and `/metrics` reports it on its own (mem_etcd's own flag).
    #[arg(long, env = "MEM_ETCD_TENANT", value_delimiter = ',', display_order = 99)]
    pub tenant: Vec<String>,

    /// The space quota of each --tenant that names none of its own, in bytes: a tenant past
    /// it gets etcd's NOSPACE error for its writes that add data, while the others write on;
    /// 0: none (mem_etcd's own flag).
    #[arg(
        long,
        env = "MEM_ETCD_TENANT_QUOTA_BACKEND_BYTES",
        default_value_t = 0,
        display_order = 100
    )]
    pub tenant_quota_backend_bytes: u64,

    /// Tenants come and go with the auth state, with no restart: a user whose roles grant
    /// READWRITE on one prefix `/<tenant>/` and nothing outside it (Kamaji's provisioning)
    /// makes that prefix a tenant, with --tenant-quota-backend-bytes, until the user or its
    /// grant goes; every top-level key segment's resources get partitions of their own
    /// (mem_etcd's own flag).
    #[arg(long, env = "MEM_ETCD_TENANTS_FROM_AUTH", display_order = 101)]
    pub tenants_from_auth: bool,
}

impl StorageFlags {
    /// The tenants `--tenant` declares, each with its quota (its own, or
    /// `--tenant-quota-backend-bytes`; 0: none).
    pub fn tenants(&self) -> Result<Vec<TenantSpec>, String> {
        let mut out: Vec<TenantSpec> = Vec::new();
        for spec in self.tenant.iter().map(|t| t.trim()).filter(|t| !t.is_empty()) {
            let (prefix, quota) = match spec.split_once('=') {
                None => (spec, self.tenant_quota_backend_bytes),
                Some((p, q)) => {
                    let q = q.trim().parse::<u64>().map_err(|_| {
                        format!("--tenant {spec:?}: the quota after '=' must be a number of bytes")
                    })?;
                    (p, q)
                }
            };
            let prefix = prefix.trim().trim_end_matches('/');
            if !prefix.starts_with('/') || prefix.len() < 2 {
                return Err(format!(
                    "--tenant {spec:?}: a tenant is its kube-apiserver's --etcd-prefix, such as \
                     /tenant-a"
                ));
            }
            if out.iter().any(|t| t.prefix == prefix) {
                return Err(format!("--tenant {prefix} is declared twice"));
            }
            out.push(TenantSpec { prefix: prefix.to_string(), quota_bytes: quota });
        }
        Ok(out)
    }
}

/// A tenant as declared: a hosted control plane's storage prefix and its space quota.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantSpec {
    /// Its kube-apiserver's --etcd-prefix, without a trailing slash (`/tenant-a`).
    pub prefix: String,
    /// Bytes it may hold (by the store's measure of its partitions); 0: no quota.
    pub quota_bytes: u64,
}

/// Auto-compaction: how much history the store keeps.
#[derive(clap::Args, Clone, Debug)]
pub struct CompactionFlags {
    /// How --auto-compaction-retention is read: `periodic` (a duration; a plain number is
    /// hours) or `revision` (a number of revisions).
    #[arg(
        long,
        env = "ETCD_AUTO_COMPACTION_MODE",
        value_enum,
        default_value = "periodic",
        display_order = 61
    )]
    pub auto_compaction_mode: AutoCompactionMode,

    /// How much history auto-compaction keeps (see --auto-compaction-mode); 0 turns it off.
    /// kube-apiserver compacts on its own every 5 minutes, so a Kubernetes datastore rarely
    /// needs it.
    #[arg(long, env = "ETCD_AUTO_COMPACTION_RETENTION", default_value = "0", display_order = 62)]
    pub auto_compaction_retention: String,

    /// How often revision-mode auto-compaction runs (etcd: a fixed 5 minutes); for tests.
    #[arg(long, hide = true, default_value = "5m", value_parser = parse_duration, display_order = 63)]
    pub auto_compaction_revision_interval: Duration,
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
