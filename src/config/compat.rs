//! etcd's compatibility tables: the flags mem_etcd accepts without acting on them, the
//! deprecated names and etcd's warnings for them, and the feature gates with the deprecated
//! flags that set them. `loader` registers and reads the first two; the gates are read here.

use super::flags::experimental::ExperimentalFlags;

/// How a flag that mem_etcd accepts without acting on it takes its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Takes {
    /// A Go bool flag: `--flag`, `--flag=false`.
    Bool,
    /// `--flag=v` or `--flag v`.
    Value,
}

/// etcd 3.6's flags that tune an etcd internal mem_etcd does not have, or a service it does
/// not offer: accepted (with their `ETCD_*` variables), and listed once at start as having no
/// effect. The README's flag table says why for each.
pub(super) const NO_EFFECT: &[(&str, Takes)] = {
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
        // Acted on (`Config::warning_unary_request_duration`, set by `load`), parsed here with the others.
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
pub(super) const ACTED_ON: &[&str] =
    &["warning-unary-request-duration", "experimental-warning-unary-request-duration"];

/// etcd 3.6's deprecated flags and the warning it logs at start for each one given
/// (etcd's `deprecatedFlags`, word for word: log pipelines and etcd's tests look for them).
pub(super) const DEPRECATED: &[(&str, &str)] = &[
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
pub(super) const V2_DEPRECATION_STAGES: &[&str] =
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

impl ExperimentalFlags {
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
}

/// Go's `strconv.ParseBool` (the server's feature gates, the proxies' bool flags).
pub fn go_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}
