//! A tenant over its quota stops alone: mem_etcd's `--tenant PREFIX=BYTES` against a shared
//! etcd's one `--quota-backend-bytes`, in the same steps, on a member alone and on a cluster.

use std::time::{Duration, Instant};

use etcd_client::{AlarmAction, AlarmType, Client, DeleteOptions, Txn, TxnOp};

use crate::cluster::harness::Cluster;
use crate::operations::http_get;
use crate::support::*;

/// Tenant A's and tenant B's objects, as their kube-apiservers (`--etcd-prefix=/tenant-a`,
/// `/tenant-b`) store ConfigMaps.
fn a_key(n: usize) -> String {
    format!("/tenant-a/configmaps/default/cm-{n}")
}
const B_KEY: &str = "/tenant-b/configmaps/default/cm";

/// What a call answered: `Ok`, or its code and message.
fn outcome<T>(r: Result<T, etcd_client::Error>) -> String {
    match r {
        Ok(_) => "Ok".into(),
        Err(e) => format!("{:?}", status_of(&e)),
    }
}

/// The steps: A fills its share until NOSPACE, then each tenant writes, A frees its keys, root
/// compacts, and each writes again. Returns what each step answered.
async fn steps(c: &mut Client, quota: usize) -> Vec<String> {
    let mut log = Vec::new();
    let big = "x".repeat(20_000);
    // etcd checks its quota against its bbolt file, which grows when a batch commits (every
    // 100 ms): put until NOSPACE, bounded in count and time, pausing past etcd's commit
    // interval once the data alone is over the quota.
    let start = Instant::now();
    let mut n = 0;
    let err = loop {
        n += 1;
        assert!(
            n < 500 && start.elapsed() < Duration::from_secs(30),
            "no NOSPACE after {n} puts of 20 KB in {:?}",
            start.elapsed()
        );
        if let Err(e) = c.put(a_key(n), big.as_str(), None).await {
            break e;
        }
        if n * big.len() > quota {
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    };
    assert!(n > 3, "NOSPACE after {n} puts");
    log.push(format!("A past its quota: {:?}", status_of(&err)));
    let again = c.put(a_key(0), big.as_str(), None).await;
    log.push(format!("A's put again: {}", outcome(again)));
    log.push(format!("B's put: {}", outcome(c.put(B_KEY, "1", None).await)));
    let txn = Txn::new().and_then([TxnOp::put(B_KEY, "2", None)]);
    log.push(format!("B's txn put: {}", outcome(c.txn(txn).await)));
    let alarms = c.alarm(AlarmAction::Get, AlarmType::None, None).await.unwrap();
    let types: Vec<_> = alarms.alarms().iter().map(|a| a.alarm()).collect();
    log.push(format!("alarms: {types:?}"));
    log.push(format!("A's get: {}", outcome(c.get(a_key(1), None).await)));
    let all = DeleteOptions::new().with_prefix();
    log.push(format!("A's delete: {}", outcome(c.delete("/tenant-a/", Some(all)).await)));
    let cur = current_rev(c).await;
    let physical = etcd_client::CompactionOptions::new().with_physical();
    c.compact(cur, Some(physical)).await.unwrap();
    c.defragment().await.unwrap();
    log.push(format!("A's put after compaction: {}", outcome(c.put(a_key(1), "1", None).await)));
    log.push(format!("B's put after compaction: {}", outcome(c.put(B_KEY, "3", None).await)));
    log
}

const NOSPACE: &str = "(ResourceExhausted, \"etcdserver: mvcc: database space exceeded\")";

/// What mem_etcd answers: only A's writes that add data are refused, no alarm is raised, and A
/// writes again once compaction brought it under its quota.
fn isolated() -> Vec<String> {
    vec![
        format!("A past its quota: {NOSPACE}"),
        format!("A's put again: {NOSPACE}"),
        "B's put: Ok".into(),
        "B's txn put: Ok".into(),
        "alarms: []".into(),
        "A's get: Ok".into(),
        "A's delete: Ok".into(),
        "A's put after compaction: Ok".into(),
        "B's put after compaction: Ok".into(),
    ]
}

/// What a shared etcd answers: the quota is the store's, so A filling it raises NOSPACE for
/// every tenant, and it holds after the compaction until an operator disarms it.
fn shared() -> Vec<String> {
    vec![
        format!("A past its quota: {NOSPACE}"),
        format!("A's put again: {NOSPACE}"),
        format!("B's put: {NOSPACE}"),
        format!("B's txn put: {NOSPACE}"),
        "alarms: [Nospace]".into(),
        "A's get: Ok".into(),
        "A's delete: Ok".into(),
        format!("A's put after compaction: {NOSPACE}"),
        format!("B's put after compaction: {NOSPACE}"),
    ]
}

/// The value of the sample `name{tenant="..."}` on a /metrics page.
fn sample(page: &str, name: &str, tenant: &str) -> f64 {
    let head = format!("{name}{{tenant=\"{tenant}\"}} ");
    let line = page.lines().find(|l| l.starts_with(&head));
    let line = line.unwrap_or_else(|| panic!("no {head:?} on /metrics"));
    line[head.len()..].parse().expect("a number")
}

#[tokio::test]
async fn a_tenant_over_its_quota_stops_alone_where_a_shared_etcd_stops_every_tenant() {
    const QUOTA: usize = 400_000;
    let tenants = format!("--tenant=/tenant-a={QUOTA},/tenant-b");
    let mem = server_of!(Kind::MemEtcd, [tenants.as_str()]);
    let mut c = mem.client().await;
    let mut watch = c.watch("/tenant-b/", None).await.unwrap();
    assert!(watch.message().await.unwrap().expect("created").created());
    let mem_steps = steps(&mut c, QUOTA).await;
    // Its figures: A's keys and bytes, B's watcher, both tenants' quotas.
    let page = http_get(mem.addr(), "/metrics").await.body;
    assert_eq!(sample(&page, "mem_etcd_tenant_keys", "tenant-a"), 1.0);
    assert_eq!(sample(&page, "mem_etcd_tenant_keys", "tenant-b"), 1.0);
    assert_eq!(sample(&page, "mem_etcd_tenant_quota_bytes", "tenant-a"), QUOTA as f64);
    assert_eq!(sample(&page, "mem_etcd_tenant_quota_bytes", "tenant-b"), 0.0);
    assert_eq!(sample(&page, "mem_etcd_tenant_watchers", "tenant-b"), 1.0);
    assert_eq!(sample(&page, "mem_etcd_tenant_watchers", "tenant-a"), 0.0);
    let a_bytes = sample(&page, "mem_etcd_tenant_bytes", "tenant-a");
    assert!(a_bytes > 0.0 && a_bytes < 1000.0, "A holds one small key: {a_bytes} B");
    assert!(sample(&page, "mem_etcd_tenant_writes_total", "tenant-a") > 10.0);
    assert_eq!(sample(&page, "mem_etcd_tenant_writes_total", "tenant-b"), 3.0);
    assert_eq!(sample(&page, "mem_etcd_tenant_reads_total", "tenant-a"), 1.0);

    let etcd_quota = format!("--quota-backend-bytes={QUOTA}");
    let etcd = server_of!(Kind::Etcd, [etcd_quota.as_str()]);
    let etcd_steps = steps(&mut etcd.client().await, QUOTA).await;
    assert_eq!(mem_steps, isolated(), "mem_etcd");
    assert_eq!(etcd_steps, shared(), "etcd");
}

#[tokio::test]
async fn a_tenant_over_its_quota_stops_alone_on_every_member_of_a_cluster() {
    const QUOTA: usize = 400_000;
    let tenants = format!("--tenant=/tenant-a={QUOTA},/tenant-b");
    let Some(cluster) = Cluster::start(Kind::MemEtcd, 3, &["--wal-mode=none", &tenants]).await
    else {
        return;
    };
    // Through a follower: the quota is checked where the write enters, before it is proposed.
    let leader = cluster.leader().await;
    let mut c = cluster.client((leader + 1) % 3).await;
    assert_eq!(steps(&mut c, QUOTA).await, isolated());
    let mut c = cluster.client(leader).await;
    let r = c.put(a_key(2), "x".repeat(QUOTA), None).await;
    assert_eq!(outcome(r), NOSPACE, "A's put past its quota through the leader");
    assert_eq!(outcome(c.put(B_KEY, "x".repeat(QUOTA), None).await), "Ok");
}
