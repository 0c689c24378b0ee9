//! The exact request shapes kube-apiserver sends (k8s.io/apiserver/pkg/storage/etcd3), and the
//! response fields it reads.

use std::sync::Arc;

use etcd_client::{
    Client, Compare, CompareOp, GetOptions, GetResponse, Txn, TxnOp, TxnOpResponse, TxnResponse,
};
use tonic::Code;

use crate::api::kv::put;
use crate::support::*;

/// `store.Create`: `MOD(k) == 0 -> Put(k, v)`, no else.
fn create(k: &str, v: &str) -> Txn {
    Txn::new()
        .when([Compare::mod_revision(k, CompareOp::Equal, 0)])
        .and_then([TxnOp::put(k, v, None)])
}

/// `GuaranteedUpdate`: `MOD(k) == orig -> Put(k, v), else Range(k)`.
fn update(k: &str, v: &str, orig: i64) -> Txn {
    Txn::new()
        .when([Compare::mod_revision(k, CompareOp::Equal, orig)])
        .and_then([TxnOp::put(k, v, None)])
        .or_else([TxnOp::get(k, None)])
}

/// `OptimisticDelete`: `MOD(k) == orig -> DeleteRange(k), else Range(k)`.
fn delete(k: &str, orig: i64) -> Txn {
    Txn::new()
        .when([Compare::mod_revision(k, CompareOp::Equal, orig)])
        .and_then([TxnOp::delete(k, None)])
        .or_else([TxnOp::get(k, None)])
}

fn only_range(t: &TxnResponse) -> GetResponse {
    match &t.op_responses()[..] {
        [TxnOpResponse::Get(g)] => g.clone(),
        other => panic!("expected exactly one Range response, got {other:?}"),
    }
}

const POD: &str = "/registry/pods/default/web-0";

#[tokio::test]
async fn create_shape() {
    let s = server!();
    let mut c = s.client().await;
    let t = c.txn(create(POD, "v1")).await.unwrap();
    assert!(t.succeeded());
    assert_eq!(rev(t.header()), 2);
    match &t.op_responses()[..] {
        [TxnOpResponse::Put(p)] => assert_eq!(rev(p.header()), 2),
        other => panic!("{other:?}"),
    }
    // The header revision is the object's resourceVersion: it equals the key's mod_revision.
    let g = c.get(POD, Some(GetOptions::new().with_limit(1))).await.unwrap();
    assert_eq!(kvs(g.kvs()), vec![kv(POD, "v1", 2, 2, 1)]);

    // AlreadyExists: not succeeded, no responses, revision unchanged.
    let t = c.txn(create(POD, "v2")).await.unwrap();
    assert!(!t.succeeded());
    assert_eq!((rev(t.header()), t.op_responses().len()), (2, 0));
    assert_eq!(kvs(c.get(POD, None).await.unwrap().kvs()), vec![kv(POD, "v1", 2, 2, 1)]);

    // After a delete, create works again with a new create_revision.
    c.delete(POD, None).await.unwrap(); // 3
    let t = c.txn(create(POD, "v3")).await.unwrap();
    assert!(t.succeeded());
    assert_eq!(rev(t.header()), 4);
    assert_eq!(kvs(c.get(POD, None).await.unwrap().kvs()), vec![kv(POD, "v3", 4, 4, 1)]);
}

#[tokio::test]
async fn update_shape_both_outcomes() {
    let s = server!();
    let mut c = s.client().await;
    c.txn(create(POD, "v1")).await.unwrap(); // 2
    put(&mut c, "/registry/other", "x").await; // 3

    let t = c.txn(update(POD, "v2", 2)).await.unwrap();
    assert!(t.succeeded());
    assert_eq!(rev(t.header()), 4);
    match &t.op_responses()[..] {
        [TxnOpResponse::Put(p)] => assert_eq!((rev(p.header()), p.prev_key().is_none()), (4, true)),
        other => panic!("{other:?}"),
    }
    assert_eq!(kvs(c.get(POD, None).await.unwrap().kvs()), vec![kv(POD, "v2", 2, 4, 2)]);

    // Conflict: stale origRev. k8s reads responses[0].response_range.kvs to retry.
    let t = c.txn(update(POD, "v3", 2)).await.unwrap();
    assert!(!t.succeeded());
    assert_eq!(rev(t.header()), 4);
    let g = only_range(&t);
    assert_eq!(kvs(g.kvs()), vec![kv(POD, "v2", 2, 4, 2)]);
    assert_eq!((g.count(), g.more(), rev(g.header())), (1, false, 4));
    // Retry with the returned mod_revision succeeds.
    let t = c.txn(update(POD, "v3", 4)).await.unwrap();
    assert!(t.succeeded());
    assert_eq!(rev(t.header()), 5);

    // The object was deleted meanwhile: the failure Range is empty.
    c.delete(POD, None).await.unwrap(); // 6
    let t = c.txn(update(POD, "v4", 5)).await.unwrap();
    assert!(!t.succeeded());
    assert_eq!(rev(t.header()), 6);
    let g = only_range(&t);
    assert_eq!((g.kvs().len(), g.count(), rev(g.header())), (0, 0, 6));
}

#[tokio::test]
async fn update_with_orig_rev_zero_creates() {
    let s = server!();
    let mut c = s.client().await;
    put(&mut c, "/registry/unrelated", "x").await; // 2
    let t = c.txn(update(POD, "created-by-update", 0)).await.unwrap();
    assert!(t.succeeded());
    assert_eq!(rev(t.header()), 3);
    assert_eq!(
        kvs(c.get(POD, None).await.unwrap().kvs()),
        vec![kv(POD, "created-by-update", 3, 3, 1)]
    );
    // Now that it exists, origRev 0 conflicts and returns the object.
    let t = c.txn(update(POD, "again", 0)).await.unwrap();
    assert!(!t.succeeded());
    assert_eq!(kvs(only_range(&t).kvs()), vec![kv(POD, "created-by-update", 3, 3, 1)]);
}

#[tokio::test]
async fn delete_shape_both_outcomes() {
    let s = server!();
    let mut c = s.client().await;
    c.txn(create(POD, "v1")).await.unwrap(); // 2
    c.txn(update(POD, "v2", 2)).await.unwrap(); // 3

    // Stale revision: the failure Range returns the current object, nothing is deleted.
    let t = c.txn(delete(POD, 2)).await.unwrap();
    assert!(!t.succeeded());
    assert_eq!(rev(t.header()), 3);
    assert_eq!(kvs(only_range(&t).kvs()), vec![kv(POD, "v2", 2, 3, 2)]);

    let t = c.txn(delete(POD, 3)).await.unwrap();
    assert!(t.succeeded());
    assert_eq!(rev(t.header()), 4);
    // Kubernetes 1.31 reads the nested DeleteRange header's revision.
    match &t.op_responses()[..] {
        [TxnOpResponse::Delete(d)] => {
            assert_eq!((rev(d.header()), d.deleted(), d.prev_kvs().len()), (4, 1, 0));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(c.get(POD, None).await.unwrap().count(), 0);
    // Deleting again: MOD == 0 now holds for the missing key but the shape uses the old rev.
    let t = c.txn(delete(POD, 3)).await.unwrap();
    assert!(!t.succeeded());
    assert_eq!(rev(t.header()), 4);
    assert_eq!(only_range(&t).kvs().len(), 0);
}

#[tokio::test]
async fn current_resource_version_and_single_get_shapes() {
    let s = server!();
    let mut c = s.client().await;
    for i in 0..3 {
        put(&mut c, format!("/registry/pods/default/p{i}"), "x").await;
    }
    // GetCurrentResourceVersion: Range{key:"/registry/pods", limit:1}; "/registry/pods" itself is
    // not a key, so kvs is empty; the header revision is what k8s reads.
    let r = c.get("/registry/pods", Some(GetOptions::new().with_limit(1))).await.unwrap();
    assert_eq!((r.kvs().len(), r.count(), r.more(), rev(r.header())), (0, 0, false, 4));
    // Health check: Range{key:"/registry/health"}.
    let r = c.get("/registry/health", None).await.unwrap();
    assert_eq!((r.kvs().len(), rev(r.header())), (0, 4));
    // Get object: Range{key, limit:1}.
    let r =
        c.get("/registry/pods/default/p1", Some(GetOptions::new().with_limit(1))).await.unwrap();
    assert_eq!(kvs(r.kvs()), vec![kv("/registry/pods/default/p1", "x", 3, 3, 1)]);
    assert_eq!((r.count(), r.more()), (1, false));
}

#[tokio::test]
async fn count_only_and_keys_only_on_a_resource_prefix() {
    let s = server!();
    let mut c = s.client().await;
    for i in 0..7 {
        put(&mut c, format!("/registry/pods/ns{}/p{i}", i % 2), "x").await;
    }
    put(&mut c, "/registry/podtemplates/ns0/t", "x").await;
    put(&mut c, "/registry/pods0", "x").await; // just outside the prefix range
    c.delete("/registry/pods/ns0/p2", None).await.unwrap();
    let pre = || GetOptions::new().with_range("/registry/pods0");
    let r = c.get("/registry/pods/", Some(pre().with_count_only())).await.unwrap();
    assert_eq!((r.kvs().len(), r.count(), r.more(), rev(r.header())), (0, 6, false, 11));
    let r = c.get("/registry/pods/", Some(pre().with_keys_only())).await.unwrap();
    assert_eq!(
        keys(r.kvs()),
        [
            "/registry/pods/ns0/p0",
            "/registry/pods/ns0/p4",
            "/registry/pods/ns0/p6",
            "/registry/pods/ns1/p1",
            "/registry/pods/ns1/p3",
            "/registry/pods/ns1/p5"
        ]
    );
    assert!(r.kvs().iter().all(|k| k.value().is_empty() && k.version() == 1));
    assert_eq!(r.count(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paged_list_at_a_pinned_revision_while_writes_continue() {
    let s = server!();
    let mut c = s.client().await;
    const PREFIX: &str = "/registry/pods/";
    const END: &str = "/registry/pods0";
    let name = |i: usize| format!("{PREFIX}ns/p{i:02}");
    for i in 0..25 {
        put(&mut c, name(i), format!("v{i}")).await; // revisions 2..=26
    }
    put(&mut c, "/registry/podtemplates/ns/t", "x").await; // 27
    put(&mut c, "/registry/services/specs/ns/s", "x").await; // 28
    let snapshot: Vec<Kv> =
        (0..25).map(|i| kv(name(i), format!("v{i}"), 2 + i as i64, 2 + i as i64, 1)).collect();

    let limit = 10;
    let first =
        c.get(PREFIX, Some(GetOptions::new().with_range(END).with_limit(limit))).await.unwrap();
    let pinned = rev(first.header());
    assert_eq!(pinned, 28);
    let at_pinned = snapshot;
    let mut got = kvs(first.kvs());
    assert_eq!(got, at_pinned[..10].to_vec());
    assert_eq!((first.count(), first.more()), (25, true));

    // From now on writers keep going under the same prefix while the pages are read: updates,
    // creates that sort between listed keys, and deletes of keys not yet listed.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    let writer = {
        let stop = stop.clone();
        let mut w = s.client().await;
        tokio::spawn(async move {
            let mut n = 0u64;
            let mut started = Some(started_tx);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                w.put(format!("{PREFIX}ns/p05"), format!("w{n}"), None).await.unwrap();
                w.put(format!("{PREFIX}ns/p10a{n}"), "new", None).await.unwrap();
                w.delete(format!("{PREFIX}ns/p1{}", n % 10), None).await.unwrap();
                w.delete(format!("{PREFIX}ns/p2{}", n % 5), None).await.unwrap();
                n += 1;
                if let Some(tx) = started.take() {
                    let _ = tx.send(());
                }
            }
            n
        })
    };
    started_rx.await.unwrap();

    let mut last_key = got.last().unwrap().key.clone();
    let mut pages = 1;
    let mut seen = pinned;
    loop {
        // Make sure writes land between pages.
        wait_until("a write since the last page", std::time::Duration::from_secs(10), || {
            let mut c = c.clone();
            async move { current_rev(&mut c).await > seen }
        })
        .await;
        let mut next = last_key.clone();
        next.push(0);
        let page = c
            .get(
                next.clone(),
                Some(GetOptions::new().with_range(END).with_limit(limit).with_revision(pinned)),
            )
            .await
            .unwrap();
        pages += 1;
        let remaining: Vec<Kv> = at_pinned.iter().filter(|k| k.key > last_key).cloned().collect();
        let want: Vec<Kv> = remaining.iter().take(limit as usize).cloned().collect();
        assert_eq!(kvs(page.kvs()), want, "page {pages}");
        // count covers the keys from the continue key to the end, at the pinned revision.
        assert_eq!(page.count(), remaining.len() as i64, "page {pages} count");
        assert_eq!(page.more(), remaining.len() > limit as usize, "page {pages} more");
        assert!(rev(page.header()) > pinned, "the header carries the current revision");
        seen = rev(page.header());
        got.extend(kvs(page.kvs()));
        if !page.more() {
            break;
        }
        last_key = got.last().unwrap().key.clone();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let rounds = writer.await.unwrap();
    assert_eq!(got, at_pinned, "the pages concatenate to the list at the pinned revision");
    assert!(rounds > 0, "the writer made progress during paging");
    let now = c.get(PREFIX, Some(GetOptions::new().with_range(END))).await.unwrap();
    assert!(rev(now.header()) > pinned);
}

/// Drives the apiserver compactor protocol (pkg/storage/etcd3/compact.go) for two apiservers.
#[tokio::test]
async fn compaction_cas_and_compact() {
    let s = server!();
    let mut c = s.client().await;
    const KEY: &str = "compact_rev_key";
    // One compactor tick: returns the new (version, rev) state.
    async fn tick(
        c: &mut Client,
        t: i64,
        r: i64,
    ) -> (i64, i64, Option<Result<i64, tonic::Status>>) {
        let resp = c
            .txn(
                Txn::new()
                    .when([Compare::version(KEY, CompareOp::Equal, t)])
                    .and_then([TxnOp::put(KEY, r.to_string(), None)])
                    .or_else([TxnOp::get(KEY, None)]),
            )
            .await
            .unwrap();
        let cur = rev(resp.header());
        if !resp.succeeded() {
            let g = only_range(&resp);
            return (g.kvs()[0].version(), cur, None);
        }
        if r == 0 {
            return (t + 1, cur, None);
        }
        let compacted = match c.compact(r, None).await {
            Ok(cr) => Ok(rev(cr.header())),
            Err(etcd_client::Error::GRpcStatus(st)) => Err(st),
            Err(e) => panic!("{e}"),
        };
        (t + 1, cur, Some(compacted))
    }
    let writes = |c: &mut Client, n: usize, tag: &'static str| {
        let mut c = c.clone();
        async move {
            for i in 0..n {
                put(&mut c, format!("/registry/events/{tag}{i}"), "e").await;
            }
        }
    };

    // Apiserver A bootstraps: writes the key, does not compact.
    let (a_t, a_r, compacted) = tick(&mut c, 0, 0).await;
    assert_eq!((a_t, a_r, compacted.is_none()), (1, 2, true));
    let g = c.get(KEY, None).await.unwrap();
    assert_eq!(kvs(g.kvs()), vec![kv(KEY, "0", 2, 2, 1)]);
    writes(&mut c, 5, "a").await; // 3..=7
    // Apiserver B starts later, loses the CAS and adopts the version.
    let (b_t, b_r, compacted) = tick(&mut c, 0, 0).await;
    assert_eq!((b_t, b_r, compacted.is_none()), (1, 7, true));

    // A's next tick wins and compacts at the revision remembered from its previous tick.
    let (a_t, a_r, compacted) = tick(&mut c, a_t, a_r).await;
    assert_eq!((a_t, a_r), (2, 8));
    assert_eq!(compacted.unwrap().unwrap(), 8);
    let g = c.get(KEY, None).await.unwrap();
    assert_eq!(kvs(g.kvs()), vec![kv(KEY, "2", 2, 8, 2)]);
    assert_err(
        c.get(KEY, Some(GetOptions::new().with_revision(1))).await,
        Code::OutOfRange,
        E_COMPACTED,
    );
    let g = c.get(KEY, Some(GetOptions::new().with_revision(2))).await.unwrap();
    assert_eq!(kvs(g.kvs()), vec![kv(KEY, "0", 2, 2, 1)], "reads at the compact revision work");

    writes(&mut c, 3, "b").await; // 9..=11
    // B's tick: version is 2 now, B (at 1) loses and adopts again.
    let (b_t, b_r, compacted) = tick(&mut c, b_t, b_r).await;
    assert_eq!((b_t, b_r, compacted.is_none()), (2, 11, true));
    // B wins the next round and compacts at 11.
    let (b_t, b_r, compacted) = tick(&mut c, b_t, b_r).await;
    assert_eq!((b_t, b_r), (3, 12));
    assert_eq!(compacted.unwrap().unwrap(), 12);
    let g = c.get(KEY, None).await.unwrap();
    assert_eq!(
        kvs(g.kvs()),
        vec![kv(KEY, "11", 2, 12, 3)],
        "the key's Version is the shared clock"
    );
    // A's next tick loses (version 3); a compactor that compacts a revision already compacted
    // gets ErrCompacted, which k8s logs and ignores.
    let (a_t, _, compacted) = tick(&mut c, a_t, a_r).await;
    assert_eq!((a_t, compacted.is_none()), (3, true));
    assert_err(c.compact(8, None).await, Code::OutOfRange, E_COMPACTED);
    let events = c
        .get("/registry/events/", Some(GetOptions::new().with_prefix().with_count_only()))
        .await
        .unwrap();
    assert_eq!(events.count(), 8);
    assert_err(
        c.get("/registry/events/", Some(GetOptions::new().with_prefix().with_revision(10))).await,
        Code::OutOfRange,
        E_COMPACTED,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_creates_have_exactly_one_winner() {
    let s = server!();
    const TASKS: usize = 8;
    const KEYS: usize = 25;
    let mut clients = Vec::new();
    for _ in 0..TASKS {
        // Separate connections, so the requests really race.
        clients.push(s.client().await);
    }
    let barrier = Arc::new(tokio::sync::Barrier::new(TASKS));
    let mut handles = Vec::new();
    for (task, mut c) in clients.into_iter().enumerate() {
        let barrier = barrier.clone();
        handles.push(tokio::spawn(async move {
            let mut wins = Vec::new();
            for k in 0..KEYS {
                barrier.wait().await;
                let key = format!("/registry/leases/race/{k:02}");
                let t = c.txn(create(&key, &format!("task-{task}"))).await.unwrap();
                if t.succeeded() {
                    wins.push((k, rev(t.header())));
                } else {
                    assert_eq!(t.op_responses().len(), 0);
                }
            }
            (task, wins)
        }));
    }
    let mut winners = vec![Vec::new(); KEYS];
    for h in handles {
        let (task, wins) = h.await.unwrap();
        for (k, r) in wins {
            winners[k].push((task, r));
        }
    }
    let mut c = s.client().await;
    let mut revs = Vec::new();
    for (k, w) in winners.iter().enumerate() {
        assert_eq!(w.len(), 1, "key {k}: winners {w:?}");
        let (task, r) = w[0];
        let key = format!("/registry/leases/race/{k:02}");
        let g = c.get(key.clone(), None).await.unwrap();
        assert_eq!(kvs(g.kvs()), vec![kv(&key, format!("task-{task}"), r, r, 1)]);
        revs.push(r);
    }
    revs.sort();
    revs.dedup();
    assert_eq!(revs.len(), KEYS, "every winning create got its own revision");
    assert_eq!(current_rev(&mut c).await, 1 + KEYS as i64, "only the winners wrote");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guaranteed_update_retry_loops_lose_no_increment() {
    let s = server!();
    let mut c = s.client().await;
    const KEY: &str = "/registry/configmaps/default/counter";
    c.txn(create(KEY, "0")).await.unwrap();
    const TASKS: usize = 4;
    const INCREMENTS: usize = 25;
    let mut handles = Vec::new();
    for _ in 0..TASKS {
        let mut c = s.client().await;
        handles.push(tokio::spawn(async move {
            let g = c.get(KEY, None).await.unwrap();
            let mut cur: (i64, i64) = (
                String::from_utf8_lossy(g.kvs()[0].value()).parse().unwrap(),
                g.kvs()[0].mod_revision(),
            );
            let mut conflicts = 0;
            for _ in 0..INCREMENTS {
                loop {
                    let t = c.txn(update(KEY, &(cur.0 + 1).to_string(), cur.1)).await.unwrap();
                    if t.succeeded() {
                        cur = (cur.0 + 1, rev(t.header()));
                        break;
                    }
                    conflicts += 1;
                    let g = only_range(&t);
                    let kv = &g.kvs()[0];
                    cur = (String::from_utf8_lossy(kv.value()).parse().unwrap(), kv.mod_revision());
                }
            }
            conflicts
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    let g = c.get(KEY, None).await.unwrap();
    let total = (TASKS * INCREMENTS) as i64;
    assert_eq!(kvs(g.kvs()), vec![kv(KEY, total.to_string(), 2, 2 + total, 1 + total)]);
}
