//! The configuration the server runs with: derived once from the parsed [`Flags`], with etcd's
//! fallbacks resolved (an `--experimental-` name wins over the new one), the default-host
//! rewrite and the auto-TLS certificates applied, and the WAL settings settled. The rest of the
//! crate reads it under the flags' own names; nothing changes it once it is built (what v3
//! discovery finds at start is a [`super::Founders`] of its own).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::flags::Flags;
use super::flags::member::ClusterState;
use super::flags::storage::AutoCompactionMode;
use super::flags::tls::{TlsVersion, tls_versions};

/// The background sync interval with --unsafe-no-fsync: in effect never.
const NO_FSYNC_INTERVAL: Duration = Duration::from_secs(24 * 3600);

/// The server's settings. Fields keep the names of the flags they come from (see
/// [`super::flags`] for what each flag means); only the derived ones say more.
#[derive(Clone, Debug)]
pub struct Config {
    // This member and its URLs.
    pub name: String,
    pub emulated_version: String,
    pub listen_client_urls: Vec<String>,
    pub listen_client_http_urls: Vec<String>,
    pub listen_metrics_urls: Vec<String>,
    /// As given, or rewritten to the default host (see [`DefaultHost`]).
    pub advertise_client_urls: Vec<String>,
    pub enable_grpc_gateway: bool,
    pub listen_peer_urls: Vec<String>,
    /// As given, or rewritten to the default host (see [`DefaultHost`]).
    pub initial_advertise_peer_urls: Vec<String>,

    // The cluster. v3 discovery finds other founders in their place (see `super::Founders`).
    pub initial_cluster: Option<String>,
    pub initial_cluster_state: ClusterState,
    pub initial_cluster_token: String,
    pub force_new_cluster: bool,
    pub strict_reconfig_check: bool,
    pub snapshot_count: u64,
    pub heartbeat_interval: u64,
    pub election_timeout: u64,
    pub peer_failpoint: Option<PathBuf>,

    // v3 discovery.
    pub discovery_endpoints: Vec<String>,
    pub discovery_token: String,
    pub discovery_dial_timeout: Duration,
    pub discovery_request_timeout: Duration,
    pub discovery_keepalive_time: Duration,
    pub discovery_keepalive_timeout: Duration,
    pub discovery_insecure_transport: bool,
    pub discovery_insecure_skip_tls_verify: bool,
    pub discovery_cert: Option<PathBuf>,
    pub discovery_key: Option<PathBuf>,
    pub discovery_cacert: Option<PathBuf>,
    pub discovery_user: Option<String>,
    pub discovery_password: Option<String>,

    // Client TLS.
    /// `--cert-file`, or the `--auto-tls` certificate when none was given.
    pub cert_file: Option<PathBuf>,
    /// `--key-file`, or the `--auto-tls` key when no certificate was given.
    pub key_file: Option<PathBuf>,
    pub trusted_ca_file: Option<PathBuf>,
    pub client_cert_auth: bool,
    pub client_crl_file: Option<PathBuf>,
    pub client_cert_allowed_hostname: Vec<String>,

    // Peer TLS.
    /// `--peer-cert-file`, or the `--peer-auto-tls` certificate when none was given.
    pub peer_cert_file: Option<PathBuf>,
    /// `--peer-key-file`, or the `--peer-auto-tls` key when no certificate was given.
    pub peer_key_file: Option<PathBuf>,
    pub peer_trusted_ca_file: Option<PathBuf>,
    pub peer_client_cert_auth: bool,
    pub peer_crl_file: Option<PathBuf>,
    pub peer_cert_allowed_cn: Vec<String>,
    pub peer_cert_allowed_hostname: Vec<String>,
    pub peer_client_cert_file: Option<PathBuf>,
    pub peer_client_key_file: Option<PathBuf>,
    /// Whether --peer-auto-tls made this member's peer certificate: peers' own self-signed
    /// certificates are then taken without a CA, as etcd takes them.
    pub peer_self_signed: bool,

    // Shared by both TLS sides.
    pub tls_min_version: String,
    pub tls_max_version: String,
    pub cipher_suites: Vec<String>,

    // Storage.
    pub data_dir: Option<PathBuf>,
    /// The WAL settings, settled once from `--wal-mode`, `--fsync`, `--unsafe-no-fsync` and
    /// the `--wal-*` flags (see [`Config::wal_options`]).
    wal: crate::wal::Options,
    pub registry_prefix: Vec<String>,
    /// The hosted control planes `--tenant` declares, each with its quota settled (checked
    /// when the flags were loaded).
    pub tenants: Vec<super::flags::storage::TenantSpec>,
    /// `--tenants-from-auth`: tenants also come from the auth state, each with this quota
    /// (`--tenant-quota-backend-bytes`; 0: none). `None`: only `--tenant`'s.
    pub tenants_from_auth: Option<u64>,
    pub auto_compaction_mode: AutoCompactionMode,
    pub auto_compaction_retention: String,
    pub auto_compaction_revision_interval: Duration,

    // Limits.
    pub max_request_bytes: u32,
    pub max_txn_ops: u32,
    pub max_concurrent_streams: u32,
    pub quota_backend_bytes: i64,
    pub worker_threads: usize,
    /// `--experimental-watch-progress-notify-interval` if given, else
    /// `--watch-progress-notify-interval`, at least 1ms.
    progress_notify_interval: Duration,
    /// See `flags::TableValues`.
    pub warning_unary_request_duration: Duration,

    // Metrics and auth.
    pub metrics: String,
    pub auth_token: String,
    pub auth_token_ttl: u64,
    pub bcrypt_cost: u32,

    // Feature gates and checks.
    /// `--feature-gates` as given (etcd's startup line shows it).
    pub feature_gates: Vec<String>,
    /// Every feature gate's state: defaults, deprecated flags, then `--feature-gates`.
    pub gates: BTreeMap<&'static str, bool>,
    /// `--experimental-corrupt-check-time` if given, else `--corrupt-check-time` (0: never).
    pub corrupt_check_time: Duration,
    /// `--experimental-compact-hash-check-time` if given, else `--compact-hash-check-time`
    /// (etcd's default: a minute).
    pub compact_hash_check_time: Duration,

    // Shown at start only (see `flags::TableValues`).
    pub snapshot_catchup_entries: u64,
    pub bootstrap_defrag_threshold_megabytes: u64,
    pub v2_deprecation_skip_check: bool,
    pub unsafe_no_fsync: bool,
    pub config_file: Option<PathBuf>,
}

/// etcd's default-host rewrite (`UpdateDefaultClusterFromName`): an advertised URL left at its
/// default (`http://localhost:2380` for peers, `http://localhost:2379` for clients) while the
/// first listen URL of its kind is on `0.0.0.0` becomes `http://<default host>:` the listen
/// URL's port, so that the others can reach it, and the member id is derived from it, as
/// etcd's is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DefaultHost {
    /// The host found (logged at start).
    pub host: String,
    peer_urls: Option<Vec<String>>,
    client_urls: Option<Vec<String>>,
}

impl DefaultHost {
    /// The rewrite `flags` ask for, if any. `default_host` finds the host
    /// ([`crate::netutil::default_host`]), asked only when a URL qualifies.
    pub fn resolve(
        flags: &Flags,
        default_host: impl FnOnce() -> Option<std::net::Ipv4Addr>,
    ) -> Option<Self> {
        /// The port of `url` if its host is `0.0.0.0`.
        fn any_address_port(url: Option<&String>) -> Option<String> {
            let rest = url?.split_once("://")?.1;
            let authority = rest.split('/').next()?;
            let (host, port) = authority.rsplit_once(':')?;
            (host == "0.0.0.0").then(|| port.to_string())
        }
        let m = &flags.member;
        let peer = (m.initial_advertise_peer_urls == ["http://localhost:2380"])
            .then(|| any_address_port(m.listen_peer_urls.first()))
            .flatten();
        let client = (m.advertise_client_urls == ["http://localhost:2379"])
            .then(|| any_address_port(m.listen_client_urls.first()))
            .flatten();
        if peer.is_none() && client.is_none() {
            return None;
        }
        let host = default_host()?.to_string();
        Some(Self {
            peer_urls: peer.map(|port| vec![format!("http://{host}:{port}")]),
            client_urls: client.map(|port| vec![format!("http://{host}:{port}")]),
            host,
        })
    }
}

/// The certificates `--auto-tls` and `--peer-auto-tls` made (`main` makes them: the TLS layer
/// is above this module), as (certificate, key) files.
#[derive(Clone, Debug, Default)]
pub struct AutoTls {
    pub client: Option<(PathBuf, PathBuf)>,
    pub peer: Option<(PathBuf, PathBuf)>,
}

/// The data directory `flags` name: `--data-dir`, or `<name>.mem_etcd` in the working directory.
pub fn data_dir(flags: &Flags) -> crate::data_dir::DataDir {
    crate::data_dir::DataDir::new(
        flags
            .storage
            .data_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("{}.mem_etcd", flags.member.name))),
    )
}

impl Config {
    /// The configuration `flags` ask for, with the default-host rewrite and the auto-TLS
    /// certificates applied. Built once; every fallback between two names of a flag is
    /// resolved here and nowhere else.
    pub fn new(flags: Flags, default_host: Option<DefaultHost>, auto_tls: AutoTls) -> Self {
        let dir = data_dir(&flags);
        // Refused by `load` before anything derives them; a configuration built for the
        // proxies (`from_flags`) reads no gate.
        let gates = flags.experimental.feature_gates_state().unwrap_or_default();
        let Flags {
            version: _,
            config_file,
            member: m,
            cluster: c,
            discovery: d,
            client_tls: ct,
            peer_tls: pt,
            tls,
            storage: s,
            compaction,
            limits,
            log,
            auth,
            experimental: x,
            table,
        } = flags;
        let tenants = s.tenants().unwrap_or_default();
        let tenants_from_auth = s.tenants_from_auth.then_some(s.tenant_quota_backend_bytes);
        let (mut advertise_client_urls, mut initial_advertise_peer_urls) =
            (m.advertise_client_urls, m.initial_advertise_peer_urls);
        if let Some(h) = default_host {
            advertise_client_urls = h.client_urls.unwrap_or(advertise_client_urls);
            initial_advertise_peer_urls = h.peer_urls.unwrap_or(initial_advertise_peer_urls);
        }
        let (cert_file, key_file) = match auto_tls.client {
            Some((c, k)) => (Some(c), Some(k)),
            None => (ct.cert_file, ct.key_file),
        };
        let peer_self_signed = auto_tls.peer.is_some();
        let (peer_cert_file, peer_key_file) = match auto_tls.peer {
            Some((c, k)) => (Some(c), Some(k)),
            None => (pt.peer_cert_file, pt.peer_key_file),
        };
        let mode = if s.fsync { crate::wal::Mode::Fsync } else { s.wal_mode };
        // --unsafe-no-fsync: written to the OS at once, as in buffered mode, but the background
        // sync waits a day: only shutdown (and snapshots) sync.
        let (mode, flush_interval) = match mode {
            crate::wal::Mode::None => (mode, s.wal_flush_interval),
            _ if s.unsafe_no_fsync => (crate::wal::Mode::Buffered, NO_FSYNC_INTERVAL),
            _ => (mode, s.wal_flush_interval),
        };
        let wal = crate::wal::Options {
            dir,
            mode,
            exclude: s
                .wal_exclude_prefix
                .iter()
                .filter(|p| !p.is_empty())
                .map(|p| bytes::Bytes::copy_from_slice(p.as_bytes()))
                .collect(),
            flush_interval: flush_interval.max(Duration::from_millis(1)),
            segment_bytes: s.wal_segment_bytes.max(4096),
            snapshot_bytes: s.wal_snapshot_bytes,
            repair: s.wal_repair,
            failpoint: s.wal_failpoint,
        };
        Config {
            name: m.name,
            emulated_version: m.emulated_version,
            listen_client_urls: m.listen_client_urls,
            listen_client_http_urls: m.listen_client_http_urls,
            listen_metrics_urls: m.listen_metrics_urls,
            advertise_client_urls,
            enable_grpc_gateway: m.enable_grpc_gateway,
            listen_peer_urls: m.listen_peer_urls,
            initial_advertise_peer_urls,
            initial_cluster: c.initial_cluster,
            initial_cluster_state: c.initial_cluster_state,
            initial_cluster_token: c.initial_cluster_token,
            force_new_cluster: c.force_new_cluster,
            strict_reconfig_check: c.strict_reconfig_check,
            snapshot_count: c.snapshot_count,
            heartbeat_interval: c.heartbeat_interval,
            election_timeout: c.election_timeout,
            peer_failpoint: c.peer_failpoint,
            discovery_endpoints: d.discovery_endpoints,
            discovery_token: d.discovery_token,
            discovery_dial_timeout: d.discovery_dial_timeout,
            discovery_request_timeout: d.discovery_request_timeout,
            discovery_keepalive_time: d.discovery_keepalive_time,
            discovery_keepalive_timeout: d.discovery_keepalive_timeout,
            discovery_insecure_transport: d.discovery_insecure_transport,
            discovery_insecure_skip_tls_verify: d.discovery_insecure_skip_tls_verify,
            discovery_cert: d.discovery_cert,
            discovery_key: d.discovery_key,
            discovery_cacert: d.discovery_cacert,
            discovery_user: d.discovery_user,
            discovery_password: d.discovery_password,
            cert_file,
            key_file,
            trusted_ca_file: ct.trusted_ca_file,
            client_cert_auth: ct.client_cert_auth,
            client_crl_file: ct.client_crl_file,
            client_cert_allowed_hostname: ct.client_cert_allowed_hostname,
            peer_cert_file,
            peer_key_file,
            peer_trusted_ca_file: pt.peer_trusted_ca_file,
            peer_client_cert_auth: pt.peer_client_cert_auth,
            peer_crl_file: pt.peer_crl_file,
            peer_cert_allowed_cn: pt.peer_cert_allowed_cn,
            peer_cert_allowed_hostname: pt.peer_cert_allowed_hostname,
            peer_client_cert_file: pt.peer_client_cert_file,
            peer_client_key_file: pt.peer_client_key_file,
            peer_self_signed,
            tls_min_version: tls.tls_min_version,
            tls_max_version: tls.tls_max_version,
            cipher_suites: tls.cipher_suites,
            data_dir: s.data_dir,
            wal,
            tenants,
            tenants_from_auth,
            registry_prefix: s.registry_prefix,
            auto_compaction_mode: compaction.auto_compaction_mode,
            auto_compaction_retention: compaction.auto_compaction_retention,
            auto_compaction_revision_interval: compaction.auto_compaction_revision_interval,
            max_request_bytes: limits.max_request_bytes,
            max_txn_ops: limits.max_txn_ops,
            max_concurrent_streams: limits.max_concurrent_streams,
            quota_backend_bytes: limits.quota_backend_bytes,
            worker_threads: limits.worker_threads,
            progress_notify_interval: limits
                .experimental_watch_progress_notify_interval
                .unwrap_or(limits.watch_progress_notify_interval)
                .max(Duration::from_millis(1)),
            warning_unary_request_duration: table.warning_unary_request_duration,
            metrics: log.metrics,
            auth_token: auth.auth_token,
            auth_token_ttl: auth.auth_token_ttl,
            bcrypt_cost: auth.bcrypt_cost,
            feature_gates: x.feature_gates,
            gates,
            corrupt_check_time: x
                .experimental_corrupt_check_time
                .or(x.corrupt_check_time)
                .unwrap_or_default(),
            compact_hash_check_time: x
                .experimental_compact_hash_check_time
                .or(x.compact_hash_check_time)
                .unwrap_or(Duration::from_secs(60)),
            snapshot_catchup_entries: table.snapshot_catchup_entries,
            bootstrap_defrag_threshold_megabytes: table.bootstrap_defrag_threshold_megabytes,
            v2_deprecation_skip_check: table.v2_deprecation_skip_check,
            unsafe_no_fsync: s.unsafe_no_fsync,
            config_file,
        }
    }

    /// The WAL settings these flags ask for.
    pub fn wal_options(&self) -> crate::wal::Options {
        self.wal.clone()
    }

    /// A feature gate's state (false for names etcd does not have).
    pub fn gate(&self, gate: &str) -> bool {
        self.gates.get(gate).copied().unwrap_or(false)
    }

    /// The effective progress-notify interval.
    pub fn progress_notify_interval(&self) -> Duration {
        self.progress_notify_interval
    }

    /// The TLS versions https listeners accept, oldest first.
    pub fn tls_versions(&self) -> Result<Vec<TlsVersion>, String> {
        tls_versions(&self.tls_min_version, &self.tls_max_version)
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
}
