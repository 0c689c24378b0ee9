//! Auto-compaction (etcd's `v3compactor`), for operators who run mem_etcd without a
//! kube-apiserver compacting it.
//!
//! - **periodic** keeps at least the retention period of history. As etcd does it: the current
//!   revision is sampled every tenth of the period (of an hour, for periods over an hour), so
//!   the oldest of the last samples is the revision of one period ago. Nothing is compacted
//!   during the first period; after that the compactor compacts at that sample once per period
//!   (at most hourly), and after a failure tries again at the next sample.
//! - **revision** keeps the newest `retention` revisions: every 5 minutes it compacts at the
//!   current revision minus the retention, unless it compacted there already.
//!
//! A compaction here is the same as a client's Compact: logged, and answered only once the log
//! has it.

use std::collections::VecDeque;
use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{info, warn};

use crate::config::AutoCompaction;
use crate::error::Error;
use crate::mvcc::Store;

/// The longest wait between two periodic compactions, whatever the period.
const MAX_INTERVAL: Duration = Duration::from_secs(3600);

/// Samples per period (and tries per interval after a failure).
const SAMPLES: u32 = 10;

/// How a compaction at a revision is done: on the store, or proposed to the cluster.
pub type CompactFn<'a> = &'a (dyn Fn(i64) -> BoxFuture<'a> + Send + Sync);
type BoxFuture<'a> = std::pin::Pin<Box<dyn Future<Output = Result<(), Error>> + Send + 'a>>;

/// Compacts `store` by `policy`, forever, directly on the store (the tests' driver: the server
/// compacts through `submit`, with `run_with`).
#[cfg(test)]
async fn run(store: &Store, policy: AutoCompaction) {
    run_with(store, policy, &|rev| Box::pin(compact(store, rev))).await
}

/// Compacts by `policy` with `compact`, forever (a cluster proposes its compactions; only the
/// leader's compactor does, as in etcd).
pub async fn run_with(store: &Store, policy: AutoCompaction, compact: CompactFn<'_>) {
    match policy {
        AutoCompaction::Periodic(period) => periodic(store, period, compact).await,
        AutoCompaction::Revision { retention, every } => {
            by_revision(store, retention, every, compact).await
        }
    }
}

async fn periodic(store: &Store, period: Duration, compact: CompactFn<'_>) {
    let interval = period.min(MAX_INTERVAL);
    // A period of a few nanoseconds must not spin.
    let sample_every = (interval / SAMPLES).max(Duration::from_millis(1));
    // Enough samples that the oldest is one period old.
    let keep = (period.as_nanos() / sample_every.as_nanos()) as usize + 1;
    let mut samples = VecDeque::with_capacity(keep + 1);
    let (mut last_rev, mut last_done, mut wait) = (0, Instant::now(), period);
    loop {
        samples.push_back(store.current_revision());
        if samples.len() > keep {
            samples.pop_front();
        }
        tokio::time::sleep(sample_every).await;
        let rev = samples[0];
        if last_done.elapsed() < wait || rev == last_rev {
            continue;
        }
        wait = interval;
        info!(revision = rev, period = ?period, "compactor: auto periodic compaction");
        match compact(rev).await {
            Ok(()) => (last_rev, last_done) = (rev, Instant::now()),
            Err(e) => warn!(revision = rev, error = %e, retry_in = ?sample_every,
                "compactor: auto periodic compaction failed"),
        }
    }
}

async fn by_revision(store: &Store, retention: i64, every: Duration, compact: CompactFn<'_>) {
    let every = every.max(Duration::from_millis(1));
    let mut last_rev = 0;
    loop {
        tokio::time::sleep(every).await;
        let rev = store.current_revision() - retention;
        if rev <= 0 || rev == last_rev {
            continue;
        }
        info!(revision = rev, retention, "compactor: auto revision compaction");
        match compact(rev).await {
            Ok(()) => last_rev = rev,
            Err(e) => warn!(revision = rev, error = %e, retry_in = ?every,
                "compactor: auto revision compaction failed"),
        }
    }
}

/// Compacts at `rev`, waiting until the log has it; a compaction that someone else already did
/// (at `rev` or later) counts as done.
#[cfg(test)]
async fn compact(store: &Store, rev: i64) -> Result<(), Error> {
    // A compaction waits for a snapshot being streamed. A single-threaded runtime (the
    // paused-time tests) must not have a buffered WAL, whose flusher task it would wait for.
    let compacted = crate::server::etcdserver::blocking::off_the_runtime(|| store.compact(rev));
    match compacted {
        Ok(_) => Ok(()),
        Err(Error::Compacted) => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mvcc::{PutRequest, StoreConfig};

    fn put(s: &Store) -> i64 {
        let req = PutRequest { key: "k".into(), value: "v".into(), ..Default::default() };
        let a = s.put(req, 0).unwrap();
        s.wait_visible_blocking(a.visible_at);
        a.visible_at
    }

    /// One put per second for `secs` seconds of (paused, auto-advancing) time; returns the
    /// revision written at each second.
    async fn write_for(s: &Store, secs: u64) -> Vec<i64> {
        let mut revs = Vec::new();
        for _ in 0..secs {
            revs.push(put(s));
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        revs
    }

    #[tokio::test(start_paused = true)]
    async fn periodic_keeps_one_period_of_history_and_compacts_once_per_period() {
        let s = std::sync::Arc::new(Store::new(StoreConfig::default()));
        let c = tokio::spawn({
            let s = s.clone();
            async move { run(&s, AutoCompaction::Periodic(Duration::from_secs(10))).await }
        });
        // Nothing during the first period.
        write_for(&s, 9).await;
        assert_eq!(s.compact_revision(), 0, "compacted within the first period");
        let revs = write_for(&s, 30).await;
        // Now at 39 s: the last compaction was at a sample at least 10 s old.
        let at = s.compact_revision();
        assert!(at > 0, "never compacted");
        let ten_ago = revs[revs.len() - 10];
        assert!(at <= ten_ago, "compacted at {at}, later than the revision of 10 s ago {ten_ago}");
        // ... and at most a period plus a sample older than that (one compaction per period).
        let oldest = revs[revs.len() - 22];
        assert!(at >= oldest, "compacted at {at}, older than two periods ago ({oldest})");
        c.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn revision_mode_keeps_the_newest_revisions() {
        let s = std::sync::Arc::new(Store::new(StoreConfig::default()));
        let every = Duration::from_secs(300);
        let c = tokio::spawn({
            let s = s.clone();
            async move { run(&s, AutoCompaction::Revision { retention: 5, every }).await }
        });
        for _ in 0..3 {
            put(&s);
        }
        tokio::time::sleep(every + Duration::from_secs(1)).await;
        // 4 revisions, fewer than the retention + 1: nothing to compact.
        assert_eq!(s.compact_revision(), 0);
        for _ in 0..20 {
            put(&s);
        }
        tokio::time::sleep(every).await;
        assert_eq!(s.compact_revision(), s.current_revision() - 5);
        c.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_compaction_already_done_by_a_client_counts_as_done() {
        let s = Store::new(StoreConfig::default());
        for _ in 0..10 {
            put(&s);
        }
        s.compact(8).unwrap();
        assert!(compact(&s, 5).await.is_ok());
        assert_eq!(s.compact_revision(), 8);
    }
}
