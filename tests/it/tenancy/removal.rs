//! Removing a tenant: its whole prefix deleted in one call while another tenant writes, next to
//! a shared etcd 3.6 in the same steps. What it checks: every key of the removed tenant goes in
//! one revision and none of the other's, the other's writes all succeed, and compaction returns
//! the removed tenant's memory. What it reports: how long the other tenant's writes waited
//! (the pause is a figure, not a bound: benches/README.md's tenants section holds the goal).

use std::time::{Duration, Instant};

use etcd_client::{Client, DeleteOptions, GetOptions, Txn, TxnOp};

use crate::support::*;

const RESOURCES: usize = 10;
const PER_RESOURCE: usize = 2_000;
const B_NODES: usize = 100;

/// RSS in bytes of process `pid`.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let kb = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).expect("VmRSS");
    kb.split_whitespace().next().and_then(|v| v.parse::<u64>().ok()).expect("kB") * 1024
}

/// What one run measured.
struct Removal {
    deleted: i64,
    took: Duration,
    /// The longest stretch in which tenant B's writer got no acknowledgement, from the delete's
    /// start to its end.
    gap: Duration,
    /// B's slowest write, and its writes' p99 outside the delete.
    slowest: Duration,
    p99: Duration,
    /// RSS after the fill, after the delete and a compaction.
    rss: (u64, u64),
}

async fn remove_a_tenant(s: &Server) -> Removal {
    let mut c = s.client().await;
    let value = "v".repeat(1024);
    for r in 0..RESOURCES {
        for chunk in 0..PER_RESOURCE / 100 {
            let ops: Vec<TxnOp> = (0..100)
                .map(|i| {
                    let key = format!("/tenant-a/res{r}/default/obj-{}", chunk * 100 + i);
                    TxnOp::put(key, value.as_str(), None)
                })
                .collect();
            c.txn(Txn::new().and_then(ops)).await.unwrap();
        }
    }
    for n in 0..B_NODES {
        c.put(format!("/tenant-b/leases/kube-node-lease/node-{n}"), "0", None).await.unwrap();
    }
    let filled = rss(s.pid());
    // Tenant B renews its Leases one after another, bounded in count and time, while A goes.
    let mut b = s.client().await;
    let writer = tokio::spawn(async move {
        let mut done: Vec<(Instant, Instant)> = Vec::new();
        let start = Instant::now();
        for i in 0..200_000 {
            if start.elapsed() > Duration::from_secs(4) {
                break;
            }
            let key = format!("/tenant-b/leases/kube-node-lease/node-{}", i % B_NODES);
            let t = Instant::now();
            b.put(key, i.to_string(), None).await.expect("B's write");
            done.push((t, Instant::now()));
        }
        done
    });
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let started = Instant::now();
    let all = DeleteOptions::new().with_prefix();
    let deleted = c.delete("/tenant-a/", Some(all)).await.unwrap().deleted();
    let ended = Instant::now();
    let done = writer.await.unwrap();
    let gap = longest_unacknowledged(done.iter().map(|d| d.1), started, ended);
    let slowest = done.iter().map(|d| d.1 - d.0).max().unwrap_or_default();
    let mut outside: Vec<Duration> =
        done.iter().filter(|d| d.1 < started || d.0 > ended).map(|d| d.1 - d.0).collect();
    outside.sort_unstable();
    let p99 = outside[outside.len() * 99 / 100];
    // Nothing of A's is left, all of B's is.
    let count = |c: &mut Client, p: &'static str| {
        let mut c = c.clone();
        async move {
            let opts = GetOptions::new().with_prefix().with_count_only();
            c.get(p, Some(opts)).await.unwrap().count()
        }
    };
    assert_eq!(count(&mut c, "/tenant-a/").await, 0);
    assert_eq!(count(&mut c, "/tenant-b/").await, B_NODES as i64);
    let cur = current_rev(&mut c).await;
    let physical = etcd_client::CompactionOptions::new().with_physical();
    c.compact(cur, Some(physical)).await.unwrap();
    c.defragment().await.unwrap();
    // The allocator hands freed pages back within a second or two.
    tokio::time::sleep(Duration::from_secs(3)).await;
    Removal { deleted, took: ended - started, gap, slowest, p99, rss: (filled, rss(s.pid())) }
}

#[tokio::test]
async fn removing_a_tenant_deletes_its_prefix_in_one_call_while_another_writes_on() {
    let mem = server_of!(Kind::MemEtcd, ["--tenant=/tenant-a,/tenant-b"]);
    let m = remove_a_tenant(&mem).await;
    let etcd = server_of!(Kind::Etcd);
    let e = remove_a_tenant(&etcd).await;
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    for (who, r) in [("mem_etcd", &m), ("etcd", &e)] {
        say(&format!(
            "{who}: {} keys deleted in {:.1} ms; B's writes: no acknowledgement for {:.1} ms, \
             slowest {:.1} ms, p99 outside the delete {:.2} ms; RSS {:.0} MiB filled, {:.0} MiB \
             after the delete and a compaction",
            r.deleted,
            ms(r.took),
            ms(r.gap),
            ms(r.slowest),
            ms(r.p99),
            mib(r.rss.0),
            mib(r.rss.1)
        ));
    }
    for r in [&m, &e] {
        assert_eq!(r.deleted, (RESOURCES * PER_RESOURCE) as i64);
    }
    // Most of A's 20,000 values of 1 KiB (about 24 MiB with their keys) are returned.
    assert!(m.rss.1 + 12 * (1 << 20) < m.rss.0, "RSS {} -> {} MiB", mib(m.rss.0), mib(m.rss.1));
}
