//! Histograms the layers update on their hot paths, and the Prometheus text format the
//! `/metrics` endpoint writes them in; `grpc`: the gRPC call counters a member keeps.
//!
//! Updates are a few relaxed atomic adds: no lock, no allocation. A scrape reads the atomics
//! one by one, so a histogram read during an update may be off by that one observation, which
//! Prometheus tolerates (its own client libraries behave the same).

pub mod grpc;

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Bucket bounds for latencies, in seconds: etcd's 1 ms to 8 s doubling series, below which
/// come the sub-millisecond buckets an in-memory server needs (a page-cache write or a tmpfs
/// fdatasync takes microseconds).
pub const LATENCY_BOUNDS: &[f64] = &[
    0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032,
    0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096, 8.192,
];

/// Bucket bounds for sizes counted in items (revisions per WAL batch).
pub const COUNT_BOUNDS: &[f64] =
    &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 4096.0];

/// Bucket bounds for durations counted in milliseconds (etcd's compaction histograms): 0.5 ms
/// doubling to about 9 minutes.
pub const MILLIS_BOUNDS: &[f64] = &[
    0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0,
    16384.0, 32768.0, 65536.0, 131072.0, 262144.0, 524288.0,
];

/// Bucket bounds for lease TTLs in seconds: etcd's 1 s doubling to about 97 days.
pub const TTL_BOUNDS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0,
    16384.0, 32768.0, 65536.0, 131072.0, 262144.0, 524288.0, 1048576.0, 2097152.0, 4194304.0,
    8388608.0,
];

/// A cumulative histogram with fixed bounds. Values are kept in integer units (nanoseconds
/// for durations) so that the sum is exact and lock-free.
#[derive(Debug)]
pub struct Histogram {
    /// Upper bounds in the rendered unit (seconds, items).
    bounds: &'static [f64],
    /// Observations per bucket (not cumulative; the last one is +Inf).
    counts: Box<[AtomicU64]>,
    /// Sum of the observations, in units of `1 / scale` of the rendered unit.
    sum: AtomicU64,
    /// 1e9 for durations (kept in nanoseconds), 1 for counts.
    scale: f64,
}

impl Histogram {
    /// A histogram of durations, rendered in seconds.
    pub fn seconds() -> Self {
        Self::new(LATENCY_BOUNDS, 1e9)
    }

    /// A histogram of item counts.
    pub fn counts() -> Self {
        Self::new(COUNT_BOUNDS, 1.0)
    }

    /// A histogram of durations, rendered in milliseconds.
    pub fn millis() -> Self {
        Self::new(MILLIS_BOUNDS, 1e6)
    }

    /// A histogram of lease TTLs, observed in whole seconds.
    pub fn ttls() -> Self {
        Self::new(TTL_BOUNDS, 1.0)
    }

    fn new(bounds: &'static [f64], scale: f64) -> Self {
        Self {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
            scale,
        }
    }

    pub fn observe_duration(&self, d: Duration) {
        self.observe_units(d.as_nanos().min(u64::MAX as u128) as u64);
    }

    pub fn observe(&self, n: u64) {
        self.observe_units(n);
    }

    fn observe_units(&self, units: u64) {
        let v = units as f64 / self.scale;
        let i = self.bounds.partition_point(|b| *b < v);
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(units, Ordering::Relaxed);
    }

    /// Number of observations.
    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// Appends the histogram as `name` in Prometheus' text format.
    pub fn render(&self, out: &mut String, name: &str, help: &str) {
        header(out, name, help, "histogram");
        self.render_series(out, name, "");
    }

    /// Appends the histogram's lines (no header) with extra `labels` (`To="..."`), for a
    /// histogram with one series per label value.
    pub fn render_series(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0;
        for (i, c) in self.counts.iter().enumerate() {
            cumulative += c.load(Ordering::Relaxed);
            let le = self.bounds.get(i).map_or_else(|| "+Inf".to_string(), |b| b.to_string());
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {cumulative}");
        }
        let sum = self.sum.load(Ordering::Relaxed) as f64 / self.scale;
        let braces = if labels.is_empty() { String::new() } else { format!("{{{labels}}}") };
        let _ = writeln!(out, "{name}_sum{braces} {sum}");
        let _ = writeln!(out, "{name}_count{braces} {cumulative}");
    }
}

/// The `# HELP` and `# TYPE` lines of a metric.
pub fn header(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// A metric without labels, with its header.
pub fn single(out: &mut String, name: &str, help: &str, kind: &str, value: impl std::fmt::Display) {
    header(out, name, help, kind);
    let _ = writeln!(out, "{name} {value}");
}

/// A field of a `/proc` file (`name` starts its line; the first word after it), 0 if absent
/// (not Linux).
pub fn proc_field(file: &str, name: &str) -> u64 {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let line = text.lines().find(|l| l.starts_with(name)).unwrap_or("");
    let value = line[name.len().min(line.len())..].split_whitespace().next();
    value.and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// The process's resident memory in bytes.
pub fn resident_bytes() -> u64 {
    proc_field("/proc/self/status", "VmRSS:") * 1024
}

/// File descriptors open and the soft limit on them.
pub fn file_descriptors() -> (usize, u64) {
    let used = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count());
    (used, proc_field("/proc/self/limits", "Max open files"))
}

/// Bytes of gRPC messages exchanged with clients (etcd's `etcd_network_client_grpc_*`),
/// counted by the protobuf codec as it encodes a reply or decodes a request. Process-wide,
/// as etcd's are: the codec runs in tonic's generated code, with no member at hand.
#[derive(Debug, Default)]
pub struct ClientGrpcBytes {
    pub sent: AtomicU64,
    pub received: AtomicU64,
}

pub static CLIENT_GRPC_BYTES: ClientGrpcBytes =
    ClientGrpcBytes { sent: AtomicU64::new(0), received: AtomicU64::new(0) };

/// An operation applied to the state (etcd's `op` label of `etcd_server_apply_duration_seconds`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApplyOp {
    Put,
    DeleteRange,
    Txn,
    Compaction,
    LeaseGrant,
    LeaseRevoke,
    Alarm,
}

impl ApplyOp {
    pub const ALL: [ApplyOp; 7] = [
        ApplyOp::Put,
        ApplyOp::DeleteRange,
        ApplyOp::Txn,
        ApplyOp::Compaction,
        ApplyOp::LeaseGrant,
        ApplyOp::LeaseRevoke,
        ApplyOp::Alarm,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ApplyOp::Put => "Put",
            ApplyOp::DeleteRange => "DeleteRange",
            ApplyOp::Txn => "Txn",
            ApplyOp::Compaction => "Compaction",
            ApplyOp::LeaseGrant => "LeaseGrant",
            ApplyOp::LeaseRevoke => "LeaseRevoke",
            ApplyOp::Alarm => "Alarm",
        }
    }
}

/// Snapshots saved (etcd's `etcd_debugging_snap_save_*` and `etcd_snap_fsync_duration_seconds`).
#[derive(Debug)]
pub struct SnapshotStats {
    /// Each snapshot, from its start until it is complete.
    pub save_seconds: Histogram,
    /// Encoding the state that is not streamed (a cluster member's machine state).
    pub marshal_seconds: Histogram,
    /// The sync that makes a snapshot durable.
    pub fsync_seconds: Histogram,
}

impl Default for SnapshotStats {
    fn default() -> Self {
        Self {
            save_seconds: Histogram::seconds(),
            marshal_seconds: Histogram::seconds(),
            fsync_seconds: Histogram::seconds(),
        }
    }
}

/// etcd's `--warning-apply-duration` default: an apply slower than this is a slow apply.
pub const SLOW_APPLY: Duration = Duration::from_millis(100);

/// The server's own figures that no other part keeps: applies, reads, maintenance calls,
/// scrapes and health checks. All atomics, updated where the work is done.
#[derive(Debug)]
pub struct ServerMetrics {
    /// `[op][success]`.
    apply: Vec<[Histogram; 2]>,
    /// `[success]`.
    range: [Histogram; 2],
    pub slow_applies: AtomicU64,
    /// Changes applied (timed above): a member alone's proposals, committed as it applies them.
    pub applies: AtomicU64,
    /// Bytes of keys and values put (etcd's `etcd_debugging_mvcc_total_put_size_in_bytes`).
    pub put_bytes: AtomicU64,
    pub hash_seconds: Histogram,
    pub hash_rev_seconds: Histogram,
    pub defrag_seconds: Histogram,
    pub snapshot_seconds: Histogram,
    pub compaction_ms: Histogram,
    /// Unix time of the last compaction (0 before the first since start).
    pub compaction_last: AtomicU64,
    pub health_success: AtomicU64,
    pub health_failures: AtomicU64,
    pub scrapes: AtomicU64,
    pub scrapes_in_flight: AtomicU64,
    pub learner_promotions: AtomicU64,
    /// Leases revoked (by a client or on expiry), as each member applies it.
    pub leases_revoked: AtomicU64,
    /// Events sent to watchers.
    pub watch_events: AtomicU64,
    /// A cluster member's snapshots (a member alone's are its WAL's).
    pub snapshots: SnapshotStats,
    /// 1 while a snapshot from the leader is being installed.
    pub snapshot_installing: AtomicU64,
}

impl Default for ServerMetrics {
    fn default() -> Self {
        let pair = || [Histogram::seconds(), Histogram::seconds()];
        Self {
            apply: ApplyOp::ALL.iter().map(|_| pair()).collect(),
            range: pair(),
            slow_applies: AtomicU64::new(0),
            applies: AtomicU64::new(0),
            put_bytes: AtomicU64::new(0),
            hash_seconds: Histogram::seconds(),
            hash_rev_seconds: Histogram::seconds(),
            defrag_seconds: Histogram::seconds(),
            snapshot_seconds: Histogram::seconds(),
            compaction_ms: Histogram::millis(),
            compaction_last: AtomicU64::new(0),
            health_success: AtomicU64::new(0),
            health_failures: AtomicU64::new(0),
            scrapes: AtomicU64::new(0),
            scrapes_in_flight: AtomicU64::new(0),
            learner_promotions: AtomicU64::new(0),
            leases_revoked: AtomicU64::new(0),
            watch_events: AtomicU64::new(0),
            snapshots: SnapshotStats::default(),
            snapshot_installing: AtomicU64::new(0),
        }
    }
}

impl ServerMetrics {
    /// An operation applied in `took`; one over [`SLOW_APPLY`] counts as a slow apply.
    pub fn applied(&self, op: ApplyOp, success: bool, took: Duration) {
        let i = ApplyOp::ALL.iter().position(|o| *o == op).unwrap_or(0);
        self.apply[i][usize::from(success)].observe_duration(took);
        self.applies.fetch_add(1, Ordering::Relaxed);
        if took > SLOW_APPLY {
            self.slow_applies.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn ranged(&self, success: bool, took: Duration) {
        self.range[usize::from(success)].observe_duration(took);
    }

    /// A compaction that took `took`, now.
    pub fn compacted(&self, took: Duration) {
        self.compaction_ms.observe_duration(took);
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        self.compaction_last.store(now.map_or(0, |d| d.as_secs()), Ordering::Relaxed);
    }

    /// `etcd_server_apply_duration_seconds` and `etcd_server_range_duration_seconds`: a series
    /// for each label set observed at least once (etcd's vectors show only those).
    pub fn render_durations(&self, out: &mut String) {
        let name = "etcd_server_apply_duration_seconds";
        header(out, name, "The latency distributions of v2 apply called by backend.", "histogram");
        for (op, pair) in ApplyOp::ALL.iter().zip(&self.apply) {
            for (success, h) in [false, true].iter().zip(pair) {
                if h.count() > 0 {
                    let labels =
                        format!("op=\"{}\",success=\"{success}\",version=\"v3\"", op.name());
                    h.render_series(out, name, &labels);
                }
            }
        }
        let name = "etcd_server_range_duration_seconds";
        header(out, name, "The latency distributions of txn.Range", "histogram");
        for (success, h) in [false, true].iter().zip(&self.range) {
            if h.count() > 0 {
                h.render_series(out, name, &format!("success=\"{success}\""));
            }
        }
    }
}

/// A label value escaped as the text format wants it.
pub fn label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_resolve_below_a_millisecond() {
        let h = Histogram::seconds();
        h.observe_duration(Duration::from_micros(30));
        h.observe_duration(Duration::from_micros(400));
        h.observe_duration(Duration::from_millis(3));
        h.observe_duration(Duration::from_secs(60));
        let mut out = String::new();
        h.render(&mut out, "x_seconds", "help");
        assert!(out.contains("x_seconds_bucket{le=\"0.000025\"} 0\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{le=\"0.00005\"} 1\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{le=\"0.0005\"} 2\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{le=\"0.004\"} 3\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{le=\"8.192\"} 3\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{le=\"+Inf\"} 4\n"), "{out}");
        assert!(out.contains("x_seconds_sum 60.00343\n"), "{out}");
        assert!(out.contains("x_seconds_count 4\n"), "{out}");
        assert!(out.starts_with("# HELP x_seconds help\n# TYPE x_seconds histogram\n"));
    }

    #[test]
    fn a_value_on_a_bound_falls_in_that_bucket() {
        let h = Histogram::counts();
        h.observe(1);
        h.observe(2);
        h.observe(3);
        let mut out = String::new();
        h.render(&mut out, "n", "help");
        assert!(out.contains("n_bucket{le=\"1\"} 1\n"), "{out}");
        assert!(out.contains("n_bucket{le=\"2\"} 2\n"), "{out}");
        assert!(out.contains("n_bucket{le=\"4\"} 3\n"), "{out}");
    }
}
