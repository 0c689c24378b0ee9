//! Store micro-benchmarks (no gRPC): the costs the KV API is built from.
//!
//! Run: `cargo bench --bench store`. CI runs `cargo bench --bench store -- --test` so they keep
//! compiling and running.

use std::hint::black_box;

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use mem_etcd::mvcc::*;

fn store() -> Store {
    Store::new(StoreConfig::default())
}

fn put(s: &Store, key: Bytes, value: Bytes) -> i64 {
    let a = s.put(PutRequest { key, value, ..Default::default() }, 0).unwrap();
    s.wait_visible_blocking(a.visible_at);
    a.response.revision
}

fn pod(i: usize) -> Bytes {
    Bytes::from(format!("/registry/pods/ns-{:03}/pod-{i:08}", i % 100))
}

/// Kubernetes-sized values (a small Lease object is ~350 bytes).
fn value() -> Bytes {
    Bytes::from(vec![b'v'; 350])
}

fn writes(c: &mut Criterion) {
    let s = store();
    let key = Bytes::from_static(b"/registry/leases/kube-node-lease/node-1");
    put(&s, key.clone(), value());
    c.bench_function("put/existing key", |b| b.iter(|| put(&s, key.clone(), value())));

    let s = store();
    let mut i = 0;
    c.bench_function("put/new key", |b| {
        b.iter(|| {
            i += 1;
            put(&s, pod(i), value())
        })
    });

    // kube-apiserver's GuaranteedUpdate: compare mod_revision, put, else read.
    let s = store();
    let mut rev = put(&s, key.clone(), value());
    c.bench_function("txn/cas update (kube-apiserver shape)", |b| {
        b.iter(|| {
            let t = TxnRequest {
                compare: vec![Compare {
                    key: key.clone(),
                    range_end: Bytes::new(),
                    target: CompareTarget::Mod(rev),
                    result: CompareResult::Equal,
                }],
                success: vec![RequestOp::Put(PutRequest {
                    key: key.clone(),
                    value: value(),
                    ..Default::default()
                })],
                failure: vec![RequestOp::Range(RangeRequest {
                    key: key.clone(),
                    ..Default::default()
                })],
            };
            let a = s.txn(t, 400).unwrap();
            s.wait_visible_blocking(a.visible_at);
            assert!(a.response.succeeded);
            rev = a.response.revision;
        })
    });
}

fn reads(c: &mut Criterion) {
    let s = store();
    for i in 0..100_000 {
        put(&s, pod(i), value());
    }
    let first_page = RangeRequest {
        key: Bytes::from_static(b"/registry/pods/"),
        range_end: Bytes::from_static(b"/registry/pods0"),
        limit: 500,
        ..Default::default()
    };
    c.bench_function("range/limit 500 of 100K keys, with count", |b| {
        b.iter(|| {
            let r = s.range(black_box(&first_page)).unwrap();
            assert_eq!((r.kvs.len(), r.count), (500, 100_000));
        })
    });
    // A later page pinned at the first page's revision while writes go on: the count must undo
    // the creates made since.
    let pinned = s.current_revision();
    for i in 100_000..101_000 {
        put(&s, pod(i), value());
    }
    let page = RangeRequest { revision: pinned, ..first_page.clone() };
    c.bench_function("range/limit 500 of 100K keys at a pinned revision (1K creates since)", |b| {
        b.iter(|| {
            let r = s.range(black_box(&page)).unwrap();
            assert_eq!((r.kvs.len(), r.count), (500, 100_000));
        })
    });

    let s = store();
    for i in 0..1_000_000 {
        put(&s, pod(i), Bytes::from_static(b"v"));
    }
    let count = RangeRequest { count_only: true, ..first_page };
    c.bench_function("range/count_only over 1M keys", |b| {
        b.iter(|| assert_eq!(s.range(black_box(&count)).unwrap().count, 1_000_000))
    });
}

/// How the write path scales with threads: `threads` writers each putting existing keys of
/// their own resource (so their own partition), or all in one resource (one partition lock).
/// Criterion's time is per put across all threads, so perfect scaling halves it from 1 to 2
/// threads; what does not halve is the shared part (revision allocation, the in-order
/// publisher, the event log and watch hub) or the partition lock.
fn scaling(c: &mut Criterion) {
    let mut g = c.benchmark_group("scaling");
    for (name, own_partition) in [("own resource", true), ("same resource", false)] {
        for threads in [1usize, 2] {
            let s = store();
            let keys: Vec<Vec<Bytes>> = (0..threads)
                .map(|t| {
                    let resource = if own_partition { format!("res{t}") } else { "res".into() };
                    (0..1000)
                        .map(|i| Bytes::from(format!("/registry/{resource}/ns/obj-{t}-{i:04}")))
                        .collect()
                })
                .collect();
            for k in keys.iter().flatten() {
                put(&s, k.clone(), value());
            }
            g.bench_function(format!("put/{name}/{threads} thread(s)"), |b| {
                b.iter_custom(|iters| {
                    let per = (iters as usize).div_ceil(threads);
                    let start = std::time::Instant::now();
                    std::thread::scope(|sc| {
                        for ks in &keys {
                            let s = &s;
                            sc.spawn(move || {
                                for i in 0..per {
                                    put(s, ks[i % ks.len()].clone(), value());
                                }
                            });
                        }
                    });
                    start.elapsed()
                })
            });
        }
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(std::time::Duration::from_secs(3));
    targets = writes, reads, scaling
}
criterion_main!(benches);
