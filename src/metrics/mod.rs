//! What the layers count on their hot paths, and the page of metric families `/metrics` is
//! built as; `grpc`: the gRPC call counters a member keeps. Histograms and the text format are
//! the `prometheus` crate's; etcd's names and labels are given where a family is reported.
//!
//! Updates are a few atomic adds: no lock, no allocation. Counters are read one by one when
//! scraped, so one read during an update may miss that update, which Prometheus tolerates (its
//! own client libraries behave the same); a histogram is read whole (the crate's two shards).

pub mod grpc;

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub use prometheus::proto::MetricType;
use prometheus::proto::{self, MetricFamily};

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

/// Histograms are the `prometheus` crate's: an observation is a few atomic adds on the hot
/// one of two shards (no lock, no allocation), and a scrape flips the shards, so that it never
/// reads a histogram half-updated.
pub use prometheus::Histogram;

/// A histogram with upper bounds `bounds`. The name it is made with is never shown: the layers
/// that observe know nothing of etcd's names, and `/metrics` names each histogram (and gives it
/// its labels) where it reports it ([`Page::series`]).
fn histogram(unit: &str, bounds: &[f64]) -> Histogram {
    let opts = prometheus::HistogramOpts::new(unit, unit).buckets(bounds.to_vec());
    Histogram::with_opts(opts).expect("constant, increasing bounds")
}

/// A histogram of durations, observed in seconds.
pub fn seconds() -> Histogram {
    histogram("seconds", LATENCY_BOUNDS)
}

/// A histogram of item counts.
pub fn counts() -> Histogram {
    histogram("items", COUNT_BOUNDS)
}

/// A histogram of durations, observed in milliseconds.
pub fn millis() -> Histogram {
    histogram("milliseconds", MILLIS_BOUNDS)
}

/// A histogram of lease TTLs, observed in whole seconds.
pub fn ttls() -> Histogram {
    histogram("ttl_seconds", TTL_BOUNDS)
}

/// A sample's value: the integers the layers count in, as the text format's float.
pub trait Value {
    fn into_f64(self) -> f64;
}

macro_rules! value_as_f64 {
    ($($t:ty),*) => {
        $(impl Value for $t {
            fn into_f64(self) -> f64 {
                self as f64
            }
        })*
    };
}
value_as_f64!(i32, i64, u32, u64, usize);

impl Value for f64 {
    fn into_f64(self) -> f64 {
        self
    }
}

impl Value for bool {
    fn into_f64(self) -> f64 {
        f64::from(u8::from(self))
    }
}

/// Time spent inside a section of code that one thread at a time runs for every write (the
/// in-order publisher, the WAL writer, one resource's partition lock), and how many revisions
/// (or writes) it served: their quotient is the section's serial cost per revision, whose
/// inverse caps the server's write rate however many cores it has (`benches/README.md`, "The
/// serial ceiling"). Two clock reads and two relaxed adds per section entered.
#[derive(Debug, Default)]
pub struct Serial {
    nanos: AtomicU64,
    count: AtomicU64,
    /// Passes through the section: a pass serves a batch of revisions, so revisions per pass
    /// say how much of the section's cost the measured rate shared out (more at higher rates).
    passes: AtomicU64,
}

impl Serial {
    /// Counts a pass through the section that began at `started` and served `count` revisions.
    pub fn record(&self, started: std::time::Instant, count: u64) {
        self.nanos.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        self.count.fetch_add(count, Ordering::Relaxed);
        self.passes.fetch_add(1, Ordering::Relaxed);
    }

    /// Passes through the section so far.
    pub fn passes(&self) -> u64 {
        self.passes.load(Ordering::Relaxed)
    }

    /// Seconds spent in the section so far.
    pub fn seconds(&self) -> f64 {
        self.nanos.load(Ordering::Relaxed) as f64 / 1e9
    }

    /// Revisions (or writes) the section served so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

/// The metric families of one `/metrics` page, in the order it shows them, written in
/// Prometheus' text format by the `prometheus` crate's encoder. Built afresh for each scrape
/// from the figures the layers keep: the gauges are read when scraped, and the counters stay
/// plain atomics where they are counted.
#[derive(Debug, Default)]
pub struct Page {
    families: Vec<MetricFamily>,
}

impl Page {
    /// Starts family `name`; the samples added next are its.
    pub fn family(&mut self, name: &str, help: &str, kind: MetricType) {
        let mut f = MetricFamily::default();
        f.set_name(name.to_string());
        f.set_help(help.to_string());
        f.set_field_type(kind);
        self.families.push(f);
    }

    /// A sample of the counter or gauge family started last.
    pub fn sample(&mut self, labels: &[(&str, &str)], value: impl Value) {
        let mut m = proto::Metric::from_label(label_pairs(labels));
        let v = value.into_f64();
        if self.last().get_field_type() == MetricType::COUNTER {
            let mut c = proto::Counter::default();
            c.set_value(v);
            m.set_counter(c);
        } else {
            let mut g = proto::Gauge::default();
            g.set_value(v);
            m.set_gauge(g);
        }
        self.last().mut_metric().push(m);
    }

    /// A series of the histogram family started last.
    pub fn series(&mut self, labels: &[(&str, &str)], h: &Histogram) {
        use prometheus::core::Metric as _;
        let mut m = h.metric();
        m.set_label(label_pairs(labels));
        self.last().mut_metric().push(m);
    }

    /// A sample the caller made (a summary's).
    pub fn metric(&mut self, m: proto::Metric) {
        self.last().mut_metric().push(m);
    }

    /// A counter without labels.
    pub fn counter(&mut self, name: &str, help: &str, value: impl Value) {
        self.family(name, help, MetricType::COUNTER);
        self.sample(&[], value);
    }

    /// A gauge without labels.
    pub fn gauge(&mut self, name: &str, help: &str, value: impl Value) {
        self.family(name, help, MetricType::GAUGE);
        self.sample(&[], value);
    }

    /// A histogram without labels.
    pub fn histogram(&mut self, name: &str, help: &str, h: &Histogram) {
        self.family(name, help, MetricType::HISTOGRAM);
        self.series(&[], h);
    }

    fn last(&mut self) -> &mut MetricFamily {
        self.families.last_mut().expect("a sample follows its family")
    }

    /// The page in Prometheus' text format.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(16 << 10);
        let encoder = prometheus::TextEncoder::new();
        for f in &self.families {
            if f.get_metric().is_empty() {
                // The crate's encoder refuses a family without samples, which the page has
                // always announced (a vector nothing was counted in yet, the peers of a member
                // alone); the two lines it would write are written here.
                let kind = match f.get_field_type() {
                    MetricType::COUNTER => "counter",
                    MetricType::GAUGE => "gauge",
                    MetricType::HISTOGRAM => "histogram",
                    MetricType::SUMMARY => "summary",
                    MetricType::UNTYPED => "untyped",
                };
                let _ = writeln!(out, "# HELP {} {}", f.name(), f.help());
                let _ = writeln!(out, "# TYPE {} {kind}", f.name());
            } else {
                let one = std::slice::from_ref(f);
                encoder.encode_utf8(one, &mut out).expect("a named family with samples");
            }
        }
        out
    }
}

fn label_pairs(labels: &[(&str, &str)]) -> Vec<proto::LabelPair> {
    let pair = |(name, value): &(&str, &str)| {
        let mut p = proto::LabelPair::default();
        p.set_name(name.to_string());
        p.set_value(value.to_string());
        p
    };
    labels.iter().map(pair).collect()
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
        Self { save_seconds: seconds(), marshal_seconds: seconds(), fsync_seconds: seconds() }
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
        let pair = || [seconds(), seconds()];
        Self {
            apply: ApplyOp::ALL.iter().map(|_| pair()).collect(),
            range: pair(),
            slow_applies: AtomicU64::new(0),
            applies: AtomicU64::new(0),
            put_bytes: AtomicU64::new(0),
            hash_seconds: seconds(),
            hash_rev_seconds: seconds(),
            defrag_seconds: seconds(),
            snapshot_seconds: seconds(),
            compaction_ms: millis(),
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
        self.apply[i][usize::from(success)].observe(took.as_secs_f64());
        self.applies.fetch_add(1, Ordering::Relaxed);
        if took > SLOW_APPLY {
            self.slow_applies.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn ranged(&self, success: bool, took: Duration) {
        self.range[usize::from(success)].observe(took.as_secs_f64());
    }

    /// A compaction that took `took`, now.
    pub fn compacted(&self, took: Duration) {
        self.compaction_ms.observe(took.as_secs_f64() * 1e3);
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        self.compaction_last.store(now.map_or(0, |d| d.as_secs()), Ordering::Relaxed);
    }

    /// `etcd_server_apply_duration_seconds` and `etcd_server_range_duration_seconds`: a series
    /// for each label set observed at least once (etcd's vectors show only those).
    pub fn report_durations(&self, page: &mut Page) {
        page.family(
            "etcd_server_apply_duration_seconds",
            "The latency distributions of v2 apply called by backend.",
            MetricType::HISTOGRAM,
        );
        for (op, pair) in ApplyOp::ALL.iter().zip(&self.apply) {
            for (success, h) in ["false", "true"].into_iter().zip(pair) {
                if h.get_sample_count() > 0 {
                    let labels = [("op", op.name()), ("success", success), ("version", "v3")];
                    page.series(&labels, h);
                }
            }
        }
        page.family(
            "etcd_server_range_duration_seconds",
            "The latency distributions of txn.Range",
            MetricType::HISTOGRAM,
        );
        for (success, h) in ["false", "true"].into_iter().zip(&self.range) {
            if h.get_sample_count() > 0 {
                page.series(&[("success", success)], h);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page_of(h: &Histogram) -> String {
        let mut page = Page::default();
        page.histogram("x_seconds", "help", h);
        page.render()
    }

    #[test]
    fn buckets_are_cumulative_and_resolve_below_a_millisecond() {
        let h = seconds();
        for d in [
            Duration::from_micros(30),
            Duration::from_micros(400),
            Duration::from_millis(3),
            Duration::from_secs(60),
        ] {
            h.observe(d.as_secs_f64());
        }
        let out = page_of(&h);
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
        let h = counts();
        for n in [1.0, 2.0, 3.0] {
            h.observe(n);
        }
        let out = page_of(&h);
        assert!(out.contains("x_seconds_bucket{le=\"1\"} 1\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{le=\"2\"} 2\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{le=\"4\"} 3\n"), "{out}");
    }

    #[test]
    fn a_family_without_samples_keeps_its_header_and_labels_are_escaped() {
        let mut page = Page::default();
        page.family("empty_total", "Nothing yet.", MetricType::COUNTER);
        page.family("g", "A gauge.", MetricType::GAUGE);
        page.sample(&[("prefix", "a\"b\\c\nd")], 7u64);
        let out = page.render();
        assert_eq!(
            out,
            "# HELP empty_total Nothing yet.\n# TYPE empty_total counter\n\
             # HELP g A gauge.\n# TYPE g gauge\ng{prefix=\"a\\\"b\\\\c\\nd\"} 7\n"
        );
    }
}
