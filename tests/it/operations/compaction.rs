//! Auto-compaction: periodic and revision retention, next to etcd, and a meaningless retention
//! refused at start.

use std::time::{Duration, Instant};

use crate::support::*;

/// Polls until a read at `rev` answers "compacted", or panics after `within`.
async fn wait_compacted(c: &mut etcd_client::Client, rev: i64, within: Duration) -> Duration {
    let start = Instant::now();
    wait_until(&format!("revision {rev} to be compacted"), within, || {
        let mut c = c.clone();
        async move {
            let opts = etcd_client::GetOptions::new().with_revision(rev);
            match c.get("k", Some(opts)).await {
                Err(e) if status_of(&e).1 == E_COMPACTED => true,
                Err(e) => panic!("read at {rev}: {e:?}"),
                Ok(_) => false,
            }
        }
    })
    .await;
    start.elapsed()
}

/// `--auto-compaction-retention=2s` (periodic): history older than the period goes, history
/// younger than it stays; the same against etcd.
async fn periodic(kind: Kind) {
    let s = server_of!(kind, ["--auto-compaction-retention=2s"]);
    let mut c = s.client().await;
    let first = rev(c.put("k", "v0", None).await.unwrap().header());
    // The compactor samples every 200 ms and compacts at the sample of 2 s ago, once the first
    // 2 s are over: `first` goes within a few seconds.
    let took = wait_compacted(&mut c, first - 1, Duration::from_secs(15)).await;
    assert!(took >= Duration::from_millis(1500), "{kind:?}: compacted after {took:?}");
    // Whatever is written now is younger than any sample the compactor may compact at.
    let recent = rev(c.put("k", "v1", None).await.unwrap().header());
    c.put("k", "v2", None).await.unwrap();
    let opts = etcd_client::GetOptions::new().with_revision(recent);
    let got = c.get("k", Some(opts)).await.expect("a revision younger than the period");
    assert_eq!(kvs(got.kvs()), [kv("k", "v1", first, recent, 2)]);
}

#[tokio::test]
async fn periodic_auto_compaction_keeps_the_retention_period() {
    periodic(Kind::MemEtcd).await;
}

#[tokio::test]
async fn periodic_auto_compaction_on_etcd_behaves_the_same() {
    periodic(Kind::Etcd).await;
}

/// Revision mode keeps exactly the newest `retention` revisions (checked every 200 ms here; etcd
/// checks every 5 minutes, too slow to compare in a test).
#[tokio::test]
async fn revision_auto_compaction_keeps_the_newest_revisions() {
    let s = server!([
        "--auto-compaction-mode=revision",
        "--auto-compaction-retention=5",
        "--auto-compaction-revision-interval=200ms"
    ]);
    let mut c = s.client().await;
    let mut last = 0;
    for i in 0..20 {
        last = rev(c.put("k", format!("v{i}"), None).await.unwrap().header());
    }
    wait_compacted(&mut c, last - 6, Duration::from_secs(10)).await;
    // Nothing newer than current - retention goes, however long we wait.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let opts = etcd_client::GetOptions::new().with_revision(last - 5);
    let got = c.get("k", Some(opts)).await.expect("current - retention is kept");
    assert_eq!(got.kvs()[0].mod_revision(), last - 5);
    assert!(!s.grep_log("auto revision compaction").is_empty(), "{}", s.log_tail());
}

#[tokio::test]
async fn a_meaningless_retention_is_refused_at_start() {
    let dir = DataDir::new();
    let ex = dir
        .start_expecting_failure(&[
            "--auto-compaction-mode=revision",
            "--auto-compaction-retention=1h",
        ])
        .await;
    assert!(!ex.status.success());
    let why = ex.grep("expected a number of revisions for --auto-compaction-mode revision");
    assert!(!why.is_empty(), "{}", ex.output());
}
