//! How far `follow`'s copy is behind its source: per revision, the time from the moment the
//! source's watch delivered it to the moment the target answered its Txn, and the revisions
//! still to apply. Reported in the log every 10 s and over the whole run at the cut-over, and,
//! with `--listen-metrics-urls`, on a `/metrics` page for Prometheus.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::metrics::{Histogram, Page};

/// The follower's lag.
pub(super) struct Lag {
    /// Since the last report, in microseconds.
    window: Vec<u32>,
    /// Before the last report (4 bytes a revision: a million revisions hold 4 MB).
    earlier: Vec<u32>,
    /// What `/metrics` shows, shared with the task that serves it.
    shown: Arc<Shown>,
}

/// The figures `/metrics` reads; atomics, as the page is read by another task.
struct Shown {
    /// The last source revision the copy holds.
    applied: AtomicI64,
    /// The source's head at its last poll (every 250 ms).
    source: AtomicI64,
    /// The lag of the last revision applied, in microseconds.
    last_micros: AtomicI64,
    per_revision: Histogram,
}

impl Lag {
    pub(super) fn new(applied: i64) -> Self {
        let shown = Shown {
            applied: AtomicI64::new(applied),
            source: AtomicI64::new(applied),
            last_micros: AtomicI64::new(0),
            per_revision: crate::metrics::seconds(),
        };
        Lag { window: Vec::new(), earlier: Vec::new(), shown: Arc::new(shown) }
    }

    /// Revision `rev` applied, `d` after the watch delivered it.
    pub(super) fn applied(&mut self, rev: i64, d: Duration) {
        let micros = d.as_micros().min(u32::MAX as u128) as u32;
        self.window.push(micros);
        self.shown.applied.store(rev, Ordering::Relaxed);
        self.shown.last_micros.store(i64::from(micros), Ordering::Relaxed);
        self.shown.per_revision.observe(d.as_secs_f64());
    }

    /// The source's head, as last polled.
    pub(super) fn source_at(&self, head: i64) {
        self.shown.source.store(head, Ordering::Relaxed);
    }

    /// "N revisions, lag p50 .. p99 .. max .." since the last report, then starts a new one.
    pub(super) fn report(&mut self) -> String {
        let line = summary(&mut self.window);
        self.earlier.append(&mut self.window);
        line
    }

    /// The same over every revision followed.
    pub(super) fn whole(&mut self) -> String {
        self.earlier.append(&mut self.window);
        summary(&mut self.earlier)
    }

    /// Serves `/metrics` on `url` (`http://host:port`) until the command ends.
    pub(super) async fn serve(&self, url: &str) -> Result<(), String> {
        let addr = url.strip_prefix("http://").unwrap_or(url).trim_end_matches('/');
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| format!("--listen-metrics-urls {url}: {e}"))?;
        let shown = self.shown.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let shown = shown.clone();
                tokio::spawn(async move {
                    // One request a connection; its first line is all that is read.
                    let mut buf = [0u8; 1024];
                    let n = conn.read(&mut buf).await.unwrap_or(0);
                    let asked = &buf[..n];
                    let (status, body) = if asked.starts_with(b"GET /metrics ") {
                        ("200 OK", shown.page())
                    } else {
                        ("404 Not Found", "404 page not found\n".to_string())
                    };
                    let head = format!(
                        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\n\
                         Content-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = conn.write_all(head.as_bytes()).await;
                    let _ = conn.write_all(body.as_bytes()).await;
                });
            }
        });
        Ok(())
    }
}

impl Shown {
    fn page(&self) -> String {
        let (applied, source) =
            (self.applied.load(Ordering::Relaxed), self.source.load(Ordering::Relaxed));
        let mut p = Page::default();
        p.gauge(
            "mem_etcd_follow_applied_revision",
            "The last source revision the copy holds.",
            applied,
        );
        p.gauge(
            "mem_etcd_follow_source_revision",
            "The source's revision at its last poll (every 250 ms).",
            source,
        );
        p.gauge(
            "mem_etcd_follow_behind_revisions",
            "Source revisions the copy does not hold yet, as of the last poll.",
            (source - applied).max(0),
        );
        p.gauge(
            "mem_etcd_follow_last_lag_seconds",
            "From the source's watch answer to the copy's Txn answer, for the last revision.",
            self.last_micros.load(Ordering::Relaxed) as f64 / 1e6,
        );
        p.histogram(
            "mem_etcd_follow_revision_lag_seconds",
            "From the source's watch answer to the copy's Txn answer, per revision.",
            &self.per_revision,
        );
        p.render()
    }
}

fn summary(m: &mut [u32]) -> String {
    if m.is_empty() {
        return "no revisions".into();
    }
    m.sort_unstable();
    let at = |q: f64| m[((m.len() - 1) as f64 * q) as usize] as f64 / 1000.0;
    format!(
        "{} revisions, lag p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        m.len(),
        at(0.5),
        at(0.99),
        at(1.0)
    )
}
