//! Histograms the layers update on their hot paths, and the Prometheus text format the
//! `/metrics` endpoint writes them in.
//!
//! Updates are a few relaxed atomic adds: no lock, no allocation. A scrape reads the atomics
//! one by one, so a histogram read during an update may be off by that one observation, which
//! Prometheus tolerates (its own client libraries behave the same).

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
