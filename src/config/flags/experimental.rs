//! etcd's feature gates and its `--experimental-*` flags (their tables are in `compat`).

use std::time::Duration;

use crate::duration::parse_duration;

/// etcd's feature gates, the deprecated `--experimental-*` flags that set them, and the
/// periodic store checks with their etcd 3.5 names (resolved once, in `runtime`).
#[derive(clap::Args, Clone, Debug)]
pub struct ExperimentalFlags {
    /// etcd's server feature gates, `Name=true|false,...` (StopGRPCServiceOnDefrag,
    /// InitialCorruptCheck, CompactHashCheck, TxnModeWriteWithSharedBuffer, LeaseCheckpoint,
    /// LeaseCheckpointPersist, SetMemberLocalAddr, AllAlpha, AllBeta); unknown names are
    /// refused as etcd refuses them. Given twice, both apply (etcd merges them too).
    #[arg(long, env = "ETCD_FEATURE_GATES", action = clap::ArgAction::Append, display_order = 2)]
    pub feature_gates: Vec<String>,

    /// Deprecated alias of `--feature-gates=InitialCorruptCheck=...`.
    #[arg(
        long,
        env = "ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK",
        num_args = 0..=1,
        default_missing_value = "true",
        action = clap::ArgAction::Set,
        display_order = 88
    )]
    pub experimental_initial_corrupt_check: Option<bool>,

    /// How often a cluster's leader compares its store's hash with every member's (etcd's
    /// periodic corruption check); a member whose store differs gets the CORRUPT alarm, which
    /// refuses writes until it is disarmed. 0 (the default): never.
    #[arg(long, env = "ETCD_CORRUPT_CHECK_TIME", value_parser = parse_duration, display_order = 89)]
    pub corrupt_check_time: Option<Duration>,

    /// etcd 3.5's name for --corrupt-check-time; wins when given.
    #[arg(long, env = "ETCD_EXPERIMENTAL_CORRUPT_CHECK_TIME", value_parser = parse_duration, display_order = 90)]
    pub experimental_corrupt_check_time: Option<Duration>,

    /// How often a cluster's leader, with the CompactHashCheck feature gate, compares the
    /// hash of the store at the last compaction with every member's.
    #[arg(long, env = "ETCD_COMPACT_HASH_CHECK_TIME", value_parser = parse_duration, display_order = 91)]
    pub compact_hash_check_time: Option<Duration>,

    /// etcd 3.5's name for --compact-hash-check-time; wins when given.
    #[arg(long, env = "ETCD_EXPERIMENTAL_COMPACT_HASH_CHECK_TIME", value_parser = parse_duration, display_order = 92)]
    pub experimental_compact_hash_check_time: Option<Duration>,

    /// Deprecated alias of `--feature-gates=StopGRPCServiceOnDefrag=...`.
    #[arg(
        long,
        env = "ETCD_EXPERIMENTAL_STOP_GRPC_SERVICE_ON_DEFRAG",
        num_args = 0..=1,
        default_missing_value = "true",
        action = clap::ArgAction::Set,
        display_order = 93
    )]
    pub experimental_stop_grpc_service_on_defrag: Option<bool>,

    /// Deprecated alias of `--feature-gates=CompactHashCheck=...`.
    #[arg(
        long,
        env = "ETCD_EXPERIMENTAL_COMPACT_HASH_CHECK_ENABLED",
        num_args = 0..=1,
        default_missing_value = "true",
        action = clap::ArgAction::Set,
        display_order = 94
    )]
    pub experimental_compact_hash_check_enabled: Option<bool>,

    /// Deprecated alias of `--feature-gates=TxnModeWriteWithSharedBuffer=...`.
    #[arg(
        long,
        env = "ETCD_EXPERIMENTAL_TXN_MODE_WRITE_WITH_SHARED_BUFFER",
        num_args = 0..=1,
        default_missing_value = "true",
        action = clap::ArgAction::Set,
        display_order = 95
    )]
    pub experimental_txn_mode_write_with_shared_buffer: Option<bool>,

    /// Deprecated alias of `--feature-gates=LeaseCheckpoint=...`.
    #[arg(
        long,
        env = "ETCD_EXPERIMENTAL_ENABLE_LEASE_CHECKPOINT",
        num_args = 0..=1,
        default_missing_value = "true",
        action = clap::ArgAction::Set,
        display_order = 96
    )]
    pub experimental_enable_lease_checkpoint: Option<bool>,

    /// Deprecated alias of `--feature-gates=LeaseCheckpointPersist=...`.
    #[arg(
        long,
        env = "ETCD_EXPERIMENTAL_ENABLE_LEASE_CHECKPOINT_PERSIST",
        num_args = 0..=1,
        default_missing_value = "true",
        action = clap::ArgAction::Set,
        display_order = 97
    )]
    pub experimental_enable_lease_checkpoint_persist: Option<bool>,
}
