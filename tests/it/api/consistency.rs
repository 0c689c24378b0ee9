//! Concurrency: unique revisions, atomic multi-key txns seen whole by reads that cross resource
//! prefixes, read-your-writes across connections, consistent paging across resources.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use etcd_client::{GetOptions, Txn, TxnOp};

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_get_unique_consecutive_revisions() {
    let s = server!();
    const TASKS: usize = 6;
    const PUTS: usize = 40;
    let mut handles = Vec::new();
    for t in 0..TASKS {
        let mut c = s.client().await;
        handles.push(tokio::spawn(async move {
            let mut revs = Vec::new();
            for i in 0..PUTS {
                // Spread over several resources and a shared hot key.
                let key = match i % 3 {
                    0 => format!("/registry/pods/ns/t{t}-{i}"),
                    1 => format!("/registry/configmaps/ns/t{t}"),
                    _ => "/registry/leases/kube-system/hot".to_string(),
                };
                revs.push(rev(c.put(key, format!("{t}-{i}"), None).await.unwrap().header()));
            }
            revs
        }));
    }
    let mut all = Vec::new();
    for h in handles {
        let revs = h.await.unwrap();
        assert!(revs.windows(2).all(|w| w[0] < w[1]), "one client's revisions increase: {revs:?}");
        all.extend(revs);
    }
    all.sort();
    let want: Vec<i64> = (2..2 + (TASKS * PUTS) as i64).collect();
    assert_eq!(all, want, "every put got its own revision, with no gaps");
    let mut c = s.client().await;
    let hot = c.get("/registry/leases/kube-system/hot", None).await.unwrap();
    let hot_writes = (0..PUTS).filter(|i| i % 3 == 2).count() * TASKS;
    assert_eq!(hot.kvs()[0].version(), hot_writes as i64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_key_txns_are_seen_whole_across_prefixes() {
    let s = server!();
    let keys =
        ["/registry/configmaps/ns/x", "/registry/pods/ns/x", "/registry/secrets/ns/x", "other/x"];
    let mut c = s.client().await;
    let t = c.txn(Txn::new().and_then(keys.map(|k| TxnOp::put(k, "0", None)))).await.unwrap();
    assert_eq!(rev(t.header()), 2);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let mut c = s.client().await;
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let ops = keys.map(|k| TxnOp::put(k, n.to_string(), None));
                c.txn(Txn::new().and_then(ops)).await.unwrap();
            }
            n
        })
    };
    let mut reads = 0;
    let mut distinct = std::collections::BTreeSet::new();
    while reads < 300 {
        // One Range over every key, crossing several resource prefixes and leaving /registry.
        let r = c.get("/registry/", Some(GetOptions::new().with_range("p"))).await.unwrap();
        let kv = kvs(r.kvs());
        assert_eq!(kv.len(), 4, "{kv:?}");
        let first = &kv[0];
        for k in &kv {
            assert_eq!(
                (&k.value, k.mod_revision, k.version),
                (&first.value, first.mod_revision, first.version),
                "a txn was seen partially: {kv:?}"
            );
        }
        assert!(rev(r.header()) >= first.mod_revision);
        // The same at a past revision.
        let past = first.mod_revision;
        let r = c
            .get("/registry/", Some(GetOptions::new().with_range("p").with_revision(past)))
            .await
            .unwrap();
        assert!(kvs(r.kvs()).iter().all(|k| k.mod_revision == past && k.value == first.value));
        distinct.insert(first.value.clone());
        reads += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let writes = writer.await.unwrap();
    assert!(writes > 0 && distinct.len() > 1, "reads overlapped writes ({writes} txns)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_is_visible_to_every_later_read() {
    let s = server!();
    let mut writer = s.client().await;
    let mut readers = Vec::new();
    for _ in 0..3 {
        readers.push(s.client().await);
    }
    let mut last_header = 0;
    for i in 0..150 {
        let key = format!("/registry/events/ns/e{}", i % 7);
        let r = rev(writer.put(key.clone(), i.to_string(), None).await.unwrap().header());
        let reader = &mut readers[i % 3];
        let g = reader.get(key.clone(), None).await.unwrap();
        assert!(rev(g.header()) >= r, "read after write {i}: header {} < {r}", rev(g.header()));
        assert!(rev(g.header()) >= last_header, "header revisions never go back");
        last_header = rev(g.header());
        assert_eq!(kvs(g.kvs())[0].mod_revision, r, "write {i} visible to another connection");
        let count = reader
            .get("/registry/events/", Some(GetOptions::new().with_prefix().with_count_only()))
            .await
            .unwrap();
        assert_eq!(count.count(), (i + 1).min(7) as i64);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paging_across_resources_at_a_pinned_revision() {
    let s = server!();
    let mut c = s.client().await;
    let resources = ["configmaps", "events", "pods", "secrets", "services/specs"];
    let mut expected = Vec::new();
    let mut r = 1;
    for (ri, res) in resources.iter().enumerate() {
        // Few large txns instead of many puts, to keep the test fast.
        let keys: Vec<String> =
            (0..120).map(|i| format!("/registry/{res}/ns{}/o{i:03}", i % 3)).collect();
        for chunk in keys.chunks(100) {
            let ops: Vec<TxnOp> =
                chunk.iter().map(|k| TxnOp::put(k.as_str(), format!("{ri}"), None)).collect();
            r = rev(c.txn(Txn::new().and_then(ops)).await.unwrap().header());
            for k in chunk {
                expected.push(kv(k, format!("{ri}"), r, r, 1));
            }
        }
    }
    expected.sort();
    let pinned = r;
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let mut w = s.client().await;
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let res = resources[n % resources.len()];
                w.put(format!("/registry/{res}/ns1/o{:03}", n % 120), "changed", None)
                    .await
                    .unwrap();
                w.delete(format!("/registry/{res}/ns2/o{:03}", (n * 7) % 120), None).await.unwrap();
                w.put(format!("/registry/{res}/ns0/new{n}"), "new", None).await.unwrap();
                n += 1;
            }
        })
    };
    let limit = 97;
    let end = "/registry0";
    let mut got: Vec<Kv> = Vec::new();
    let mut key = b"/registry/".to_vec();
    loop {
        let page = c
            .get(
                key.clone(),
                Some(GetOptions::new().with_range(end).with_limit(limit).with_revision(pinned)),
            )
            .await
            .unwrap();
        let remaining = expected.len() - got.len();
        assert_eq!(
            page.count(),
            remaining as i64,
            "count at page starting {}",
            String::from_utf8_lossy(&key)
        );
        assert_eq!(page.more(), remaining > limit as usize);
        got.extend(kvs(page.kvs()));
        if !page.more() {
            break;
        }
        key = got.last().unwrap().key.clone();
        key.push(0);
    }
    stop.store(true, Ordering::Relaxed);
    writer.await.unwrap();
    assert_eq!(got.len(), expected.len());
    assert!(got == expected, "the pages differ from the snapshot at the pinned revision");
}
