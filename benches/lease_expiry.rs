//! Lease expiry at scale: N leases with one key each, all due at once, expired by the server's
//! own expiry loop while a writer keeps writing. Prints how long after the deadline the last key
//! was gone and the writer's latency during that window.
//!
//! Run: `cargo bench --bench lease_expiry` (100K leases); `-- --test` runs 1K as a smoke test.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mem_etcd::config::Config;
use mem_etcd::mvcc::{PutRequest, RangeRequest};
use mem_etcd::server::etcdserver::lessor;
use mem_etcd::server::etcdserver::member::Member;

/// Resident memory of this process, from /proc (Linux).
fn rss_bytes() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<usize>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn main() {
    let smoke = std::env::args().any(|a| a == "--test");
    // LEASES overrides the count (e.g. LEASES=1000000 for the memory figure).
    let n: usize = std::env::var("LEASES").ok().and_then(|v| v.parse().ok()).unwrap_or(if smoke {
        1_000
    } else {
        100_000
    });
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async move {
        let shared = Arc::new(Member::new(Config::parse_from(["mem_etcd", "--wal-mode", "none"])).expect("in-memory store"));
        let ttl = if n > 200_000 { 20 } else { 3 };
        let rss0 = rss_bytes();
        let t0 = Instant::now();
        for i in 0..n {
            let (id, _) = shared.lessor.grant(0, ttl).unwrap();
            let key = Bytes::from(format!("/registry/events/ns-{}/ev-{i:07}", i % 100));
            let put = PutRequest { key, value: Bytes::from(vec![b'e'; 300]), lease: id, ..Default::default() };
            let a = shared.store.put(put, 350).unwrap();
            shared.store.wait_visible(a.visible_at).await;
        }
        let deadline = t0 + Duration::from_secs(ttl as u64);
        let rss1 = rss_bytes();
        println!(
            "granted {n} leases with one key each (300-byte values) in {:?}; RSS grew {} MiB, {} bytes per lease+key",
            t0.elapsed(),
            (rss1 - rss0) >> 20,
            (rss1 - rss0) / n
        );
        tokio::spawn(lessor::expiry_loop(shared.clone()));

        // A writer on another resource measures put latency from just before the deadline until
        // every leased key is gone.
        let writer = {
            let shared = shared.clone();
            tokio::spawn(async move {
                let mut lat = Vec::new();
                let key = Bytes::from_static(b"/registry/leases/kube-node-lease/node-1");
                loop {
                    let s = Instant::now();
                    let put = PutRequest { key: key.clone(), value: Bytes::from_static(b"renew"), ..Default::default() };
                    let a = shared.store.put(put, 64).unwrap();
                    shared.store.wait_visible(a.visible_at).await;
                    if s >= deadline {
                        lat.push(s.elapsed());
                    }
                    tokio::task::yield_now().await;
                    if shared.lessor.is_empty() && lat.len() > 100 {
                        return lat;
                    }
                }
            })
        };
        let events = RangeRequest {
            key: Bytes::from_static(b"/registry/events/"),
            range_end: Bytes::from_static(b"/registry/events0"),
            count_only: true,
            ..Default::default()
        };
        loop {
            if shared.store.range(&events).unwrap().count == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let gone = Instant::now();
        let expiry_revisions = shared.store.current_revision();
        let mut lat = writer.await.unwrap();
        lat.sort();
        let pct = |p: f64| lat[((lat.len() - 1) as f64 * p) as usize];
        println!(
            "all {n} keys gone {:?} after the deadline (revision {} by then); writer from the deadline on: {} puts, p50 {:?}, p99 {:?}, max {:?}",
            gone.saturating_duration_since(deadline),
            expiry_revisions,
            lat.len(),
            pct(0.5),
            pct(0.99),
            lat.last().unwrap()
        );
    });
}
