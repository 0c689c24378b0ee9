//! etcd's server flags as clap parses them, grouped by concern. These are the flags as given;
//! the server reads the configuration derived from them once ([`super::runtime::Config`]).
//!
//! Every flag carries a `display_order`: `--help` lists the flags in the order they had before
//! they were grouped, which operators and tests read. The names, env variables, defaults and
//! help texts are etcd's contract (see `compat` for the flags only its tables declare).

pub mod experimental;
pub mod member;
pub mod service;
pub mod storage;
pub mod tls;

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

/// etcd's default `--warning-unary-request-duration`.
pub const DEFAULT_WARNING_UNARY_REQUEST_DURATION: Duration = Duration::from_millis(300);

/// etcd's default `--snapshot-catchup-entries`.
pub const DEFAULT_SNAPSHOT_CATCHUP_ENTRIES: u64 = 5000;

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
pub struct Flags {
    /// Print etcd's version lines (with the emulated version) and mem_etcd's, and exit.
    #[arg(long, display_order = 0)]
    pub version: bool,

    /// An etcd YAML configuration file (keys are the flag names; `client-transport-security`
    /// and `peer-transport-security` hold the TLS ones). When given, the other flags and the
    /// environment variables are ignored, as etcd ignores them.
    #[arg(long, env = "ETCD_CONFIG_FILE", display_order = 1)]
    pub config_file: Option<PathBuf>,

    // The groups (flattened: on the command line they are one flat list, as etcd's).
    #[command(flatten)]
    pub member: member::MemberFlags,

    #[command(flatten)]
    pub cluster: member::ClusterFlags,

    #[command(flatten)]
    pub discovery: member::DiscoveryFlags,

    #[command(flatten)]
    pub client_tls: tls::ClientTlsFlags,

    #[command(flatten)]
    pub peer_tls: tls::PeerTlsFlags,

    #[command(flatten)]
    pub tls: tls::TlsFlags,

    #[command(flatten)]
    pub storage: storage::StorageFlags,

    #[command(flatten)]
    pub compaction: storage::CompactionFlags,

    #[command(flatten)]
    pub limits: service::LimitFlags,

    #[command(flatten)]
    pub log: service::LogFlags,

    #[command(flatten)]
    pub auth: service::AuthFlags,

    #[command(flatten)]
    pub experimental: experimental::ExperimentalFlags,

    /// Values of flags that only etcd's compatibility tables declare (`compat::NO_EFFECT`),
    /// which clap hands over untyped; `load` parses them as etcd does.
    #[arg(skip)]
    pub table: TableValues,
}

/// The values of the flags declared by `compat`'s table that mem_etcd acts on or shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableValues {
    /// `--warning-unary-request-duration` (or its `--experimental-` form): a unary gRPC request
    /// that takes longer is logged ("request stats").
    pub warning_unary_request_duration: Duration,
    /// `--snapshot-catchup-entries` (or its `--experimental-` form): no effect (openraft sends
    /// a lagging member a snapshot by its own rule), but etcd writes it in its startup line,
    /// which tools read.
    pub snapshot_catchup_entries: u64,
    /// `--bootstrap-defrag-threshold-megabytes` (or its `--experimental-` form): etcd
    /// defragments its bbolt file at start when that would free this much; 0: never. Only
    /// logged here (see `main`).
    pub bootstrap_defrag_threshold_megabytes: u64,
    /// `--v2-deprecation=write-only-skip-check`: the one stage etcd keeps when asked (it
    /// enforces `write-only` for any other); only its startup line shows it.
    pub v2_deprecation_skip_check: bool,
}

impl Default for TableValues {
    fn default() -> Self {
        Self {
            warning_unary_request_duration: DEFAULT_WARNING_UNARY_REQUEST_DURATION,
            snapshot_catchup_entries: DEFAULT_SNAPSHOT_CATCHUP_ENTRIES,
            bootstrap_defrag_threshold_megabytes: 0,
            v2_deprecation_skip_check: false,
        }
    }
}

impl Flags {
    /// What etcd checks once its flags are parsed, in its words.
    pub fn validate(&self) -> Result<(), String> {
        let versions = tls::tls_versions(&self.tls.tls_min_version, &self.tls.tls_max_version)?;
        if versions == [tls::TlsVersion::Tls13] && !self.tls.cipher_suites.is_empty() {
            return Err("cipher suites cannot be configured when only TLS1.3 is enabled".into());
        }
        let log = &self.log;
        match log.logger.as_str() {
            "zap" => {}
            "capnslog" => return Err("--logger=capnslog is removed in v3.5".into()),
            l => return Err(format!("unknown logger option {l:?}")),
        }
        if log.log_outputs.len() > 1 && log.log_outputs.iter().any(|o| o == "default") {
            return Err("multi logoutput for \"default\" is not supported yet".into());
        }
        match log.log_format.as_str() {
            "json" | "console" | "" => {}
            f => return Err(format!("unknown log format: {f}, supported values json, console")),
        }
        self.storage.tenants()?;
        let d = &self.discovery;
        if !d.discovery_endpoints.is_empty() && self.cluster.initial_cluster.is_some() {
            return Err("multiple discovery or bootstrap flags are set. Choose one of \
                        \"initial-cluster\", \"discovery\", \"discovery-endpoints\" or \
                        \"discovery-srv\""
                .into());
        }
        if d.discovery_token.is_empty() != d.discovery_endpoints.is_empty() {
            return Err("both --discovery-token and --discovery-endpoints must be set".into());
        }
        if d.discovery_endpoints.iter().any(|e| e.trim().is_empty()) {
            return Err("--discovery-endpoints must not contain empty endpoints".into());
        }
        Ok(())
    }
}
