//! Txn through etcd-client: compares, branches, nesting, limits and validation.

use etcd_client::{
    Client, Compare, CompareOp, DeleteOptions, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse,
};
use tonic::Code;

use crate::api::kv::put;
use crate::support::*;

async fn succeeded(c: &mut Client, cmp: Compare) -> bool {
    let before = current_rev(c).await;
    let t = c.txn(Txn::new().when([cmp.clone()])).await.unwrap_or_else(|e| panic!("{cmp:?}: {e}"));
    assert_eq!(rev(t.header()), before, "a txn without writes keeps the revision");
    assert!(t.op_responses().is_empty());
    t.succeeded()
}

#[tokio::test]
async fn compare_every_target_with_every_result() {
    let s = server!();
    let mut c = s.client().await;
    put(&mut c, "other", "x").await; // 2
    put(&mut c, "c", "v2").await; // 3: c create 3
    put(&mut c, "other", "y").await; // 4
    put(&mut c, "c", "v5").await; // 5: c mod 5 version 2 value "v5"
    use CompareOp::*;
    // (compare against below, equal, above the key's actual value)
    let expect = |op: CompareOp| match op {
        Equal => [false, true, false],
        NotEqual => [true, false, true],
        Greater => [true, false, false],
        Less => [false, false, true],
    };
    for op in [Equal, NotEqual, Greater, Less] {
        let got = [
            succeeded(&mut c, Compare::version("c", op, 1)).await,
            succeeded(&mut c, Compare::version("c", op, 2)).await,
            succeeded(&mut c, Compare::version("c", op, 3)).await,
        ];
        assert_eq!(got, expect(op), "VERSION {op:?}");
        let got = [
            succeeded(&mut c, Compare::create_revision("c", op, 2)).await,
            succeeded(&mut c, Compare::create_revision("c", op, 3)).await,
            succeeded(&mut c, Compare::create_revision("c", op, 4)).await,
        ];
        assert_eq!(got, expect(op), "CREATE {op:?}");
        let got = [
            succeeded(&mut c, Compare::mod_revision("c", op, 4)).await,
            succeeded(&mut c, Compare::mod_revision("c", op, 5)).await,
            succeeded(&mut c, Compare::mod_revision("c", op, 6)).await,
        ];
        assert_eq!(got, expect(op), "MOD {op:?}");
        let got = [
            succeeded(&mut c, Compare::value("c", op, "v4")).await,
            succeeded(&mut c, Compare::value("c", op, "v5")).await,
            succeeded(&mut c, Compare::value("c", op, "v50")).await,
        ];
        assert_eq!(got, expect(op), "VALUE {op:?}");
        let got = [
            succeeded(&mut c, Compare::lease("c", op, -1)).await,
            succeeded(&mut c, Compare::lease("c", op, 0)).await,
            succeeded(&mut c, Compare::lease("c", op, 1)).await,
        ];
        assert_eq!(got, expect(op), "LEASE {op:?}");
    }
    // Bytes compare for values: "" < "\0" < "v5" < "v5\0" < "w".
    assert!(succeeded(&mut c, Compare::value("c", Greater, "")).await);
    assert!(succeeded(&mut c, Compare::value("c", Less, "v5\0")).await);
    assert!(succeeded(&mut c, Compare::value("c", Less, "w")).await);
    // All compares must hold.
    let t = c
        .txn(Txn::new().when([Compare::version("c", Equal, 2), Compare::value("c", Equal, "nope")]))
        .await
        .unwrap();
    assert!(!t.succeeded());
    let t = c
        .txn(
            Txn::new().when([Compare::version("c", Equal, 2), Compare::value("other", Equal, "y")]),
        )
        .await
        .unwrap();
    assert!(t.succeeded());
    assert_eq!(rev(t.header()), 5);
}

#[tokio::test]
async fn compare_on_missing_and_deleted_keys() {
    let s = server!();
    let mut c = s.client().await;
    put(&mut c, "gone", "x").await;
    c.delete("gone", None).await.unwrap();
    use CompareOp::*;
    for key in ["missing", "gone"] {
        // A missing key compares as zero for VERSION, CREATE, MOD and LEASE ...
        for (cmp, want) in [
            (Compare::version(key, Equal, 0), true),
            (Compare::create_revision(key, Equal, 0), true),
            (Compare::mod_revision(key, Equal, 0), true),
            (Compare::lease(key, Equal, 0), true),
            (Compare::mod_revision(key, Less, 1), true),
            (Compare::mod_revision(key, Greater, 0), false),
            (Compare::version(key, NotEqual, 0), false),
            (Compare::create_revision(key, Greater, -1), true),
            // ... and a VALUE compare on a missing key is always false.
            (Compare::value(key, Equal, ""), false),
            (Compare::value(key, NotEqual, "x"), false),
            (Compare::value(key, Less, "z"), false),
            (Compare::value(key, Greater, ""), false),
        ] {
            assert_eq!(succeeded(&mut c, cmp.clone()).await, want, "{key}: {cmp:?}");
        }
    }
}

#[tokio::test]
async fn compare_over_ranges() {
    let s = server!();
    let mut c = s.client().await;
    put(&mut c, "r/a", "1").await; // 2
    put(&mut c, "r/b", "1").await; // 3
    put(&mut c, "r/b", "2").await; // 4 (version 2)
    put(&mut c, "s", "1").await; // 5
    use CompareOp::*;
    let pre = |cmp: Compare| cmp.with_prefix();
    for (cmp, want) in [
        (pre(Compare::version("r/", Greater, 0)), true),
        (pre(Compare::version("r/", Equal, 1)), false),
        (pre(Compare::version("r/", Less, 3)), true),
        (pre(Compare::version("r/", NotEqual, 2)), false),
        (pre(Compare::value("r/", Equal, "1")), false),
        (pre(Compare::value("r/", Less, "3")), true),
        (pre(Compare::mod_revision("r/", Less, 5)), true),
        (pre(Compare::create_revision("r/", Greater, 1)), true),
        (Compare::mod_revision("r/a", Equal, 2).with_range("r/b"), true),
        (Compare::mod_revision("r/a", Equal, 2).with_range("r/c"), false),
        // An empty range compares like a missing key.
        (pre(Compare::mod_revision("x/", Equal, 0)), true),
        (pre(Compare::version("x/", Equal, 0)), true),
        (pre(Compare::value("x/", NotEqual, "q")), false),
        (Compare::create_revision("r/b", Equal, 0).with_range("r/a"), true),
        // range_end "\0": every key from key on.
        (Compare::version("r/b", Greater, 0).with_range("\0"), true),
        (Compare::mod_revision("r/b", Greater, 3).with_range("\0"), true),
        (Compare::mod_revision("r/a", Greater, 2).with_range("\0"), false),
        // key = range_end = "\0": all keys.
        (Compare::lease("\0", Equal, 0).with_range("\0"), true),
        (Compare::version("\0", Equal, 1).with_range("\0"), false),
    ] {
        assert_eq!(succeeded(&mut c, cmp.clone()).await, want, "{cmp:?}");
    }
}

#[tokio::test]
async fn branches_several_ops_and_one_revision() {
    let s = server!();
    let mut c = s.client().await;
    put(&mut c, "a", "old").await; // 2
    put(&mut c, "c", "doomed").await; // 3

    // Success branch: writes share one revision; reads see earlier writes of the same txn.
    let t = c
        .txn(
            Txn::new()
                .when([Compare::value("a", CompareOp::Equal, "old")])
                .and_then([
                    TxnOp::get("a", None),
                    TxnOp::put("a", "new", Some(PutOptions::new().with_prev_key())),
                    TxnOp::put("b", "1", None),
                    TxnOp::delete("c", Some(DeleteOptions::new().with_prev_key())),
                    TxnOp::get("\0", Some(GetOptions::new().with_all_keys())),
                ])
                .or_else([TxnOp::put("never", "x", None)]),
        )
        .await
        .unwrap();
    assert!(t.succeeded());
    assert_eq!(rev(t.header()), 4);
    let ops = t.op_responses();
    assert_eq!(ops.len(), 5);
    match &ops[0] {
        TxnOpResponse::Get(g) => {
            assert_eq!(kvs(g.kvs()), vec![kv("a", "old", 2, 2, 1)]);
            assert_eq!((g.count(), g.more(), rev(g.header())), (1, false, 3));
        }
        other => panic!("{other:?}"),
    }
    match &ops[1] {
        TxnOpResponse::Put(p) => {
            assert_eq!(rev(p.header()), 4);
            assert_eq!(p.prev_key().map(Kv::from), Some(kv("a", "old", 2, 2, 1)));
        }
        other => panic!("{other:?}"),
    }
    match &ops[2] {
        TxnOpResponse::Put(p) => assert_eq!((rev(p.header()), p.prev_key().is_none()), (4, true)),
        other => panic!("{other:?}"),
    }
    match &ops[3] {
        TxnOpResponse::Delete(d) => {
            assert_eq!((rev(d.header()), d.deleted()), (4, 1));
            assert_eq!(kvs(d.prev_kvs()), vec![kv("c", "doomed", 3, 3, 1)]);
        }
        other => panic!("{other:?}"),
    }
    match &ops[4] {
        TxnOpResponse::Get(g) => {
            assert_eq!(kvs(g.kvs()), vec![kv("a", "new", 2, 4, 2), kv("b", "1", 4, 4, 1)]);
            assert_eq!((g.count(), rev(g.header())), (2, 4));
        }
        other => panic!("{other:?}"),
    }
    // Failure branch with a write: bumps the revision once.
    let t = c
        .txn(
            Txn::new()
                .when([Compare::value("a", CompareOp::Equal, "old")])
                .and_then([TxnOp::put("never", "x", None)])
                .or_else([TxnOp::put("x", "1", None), TxnOp::put("y", "1", None)]),
        )
        .await
        .unwrap();
    assert!(!t.succeeded());
    assert_eq!(rev(t.header()), 5);
    assert_eq!(t.op_responses().len(), 2);
    assert!(c.get("never", None).await.unwrap().kvs().is_empty());
    assert_eq!(kvs(c.get("y", None).await.unwrap().kvs()), vec![kv("y", "1", 5, 5, 1)]);

    // An empty txn succeeds and changes nothing.
    let t = c.txn(Txn::new()).await.unwrap();
    assert!(t.succeeded());
    assert_eq!((rev(t.header()), t.op_responses().len()), (5, 0));
    // A failed compare with an empty failure branch changes nothing.
    let t = c
        .txn(
            Txn::new()
                .when([Compare::version("a", CompareOp::Equal, 9)])
                .and_then([TxnOp::put("a", "z", None)]),
        )
        .await
        .unwrap();
    assert!(!t.succeeded());
    assert_eq!((rev(t.header()), t.op_responses().len()), (5, 0));
    // A read-only branch keeps the revision, and a delete that deletes nothing too.
    let t = c
        .txn(Txn::new().and_then([TxnOp::get("a", None), TxnOp::delete("nothing", None)]))
        .await
        .unwrap();
    assert_eq!(rev(t.header()), 5);
    match &t.op_responses()[1] {
        TxnOpResponse::Delete(d) => assert_eq!((rev(d.header()), d.deleted()), (5, 0)),
        other => panic!("{other:?}"),
    }
    assert_eq!(current_rev(&mut c).await, 5);
    // A delete after a write in the same txn: its header carries the new revision even when it
    // deletes nothing.
    let t = c
        .txn(Txn::new().and_then([TxnOp::put("p", "1", None), TxnOp::delete("nothing", None)]))
        .await
        .unwrap();
    assert_eq!(rev(t.header()), 6);
    match &t.op_responses()[1] {
        TxnOpResponse::Delete(d) => assert_eq!((rev(d.header()), d.deleted()), (6, 0)),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn nested_txns_and_their_headers() {
    let s = server!();
    let mut c = s.client().await;
    put(&mut c, "n", "1").await; // 2
    let inner = |v: &str| {
        Txn::new()
            .when([Compare::value("n", CompareOp::Equal, v)])
            .and_then([TxnOp::put(format!("inner-then-{v}"), v, None), TxnOp::get("n", None)])
            .or_else([TxnOp::get("inner-else", None)])
    };
    let t = c
        .txn(Txn::new().when([Compare::version("n", CompareOp::Equal, 1)]).and_then([
            // The nested compares are evaluated against the state before the outer
            // txn runs: this put of n is not visible to them.
            TxnOp::put("n", "2", None),
            TxnOp::txn(inner("1")),
            TxnOp::txn(inner("2")),
            TxnOp::get("n", None),
        ]))
        .await
        .unwrap();
    assert!(t.succeeded());
    assert_eq!(rev(t.header()), 3);
    let ops = t.op_responses();
    assert_eq!(ops.len(), 4);
    match &ops[1] {
        TxnOpResponse::Txn(n) => {
            assert!(n.succeeded(), "inner compare sees n=1 from before the txn");
            // The nested TxnResponse's own header is empty (revision 0) in etcd.
            assert_eq!(n.header().map(|h| h.revision()), Some(0));
            let inner_ops = n.op_responses();
            match (&inner_ops[0], &inner_ops[1]) {
                (TxnOpResponse::Put(p), TxnOpResponse::Get(g)) => {
                    assert_eq!(rev(p.header()), 3);
                    assert_eq!(
                        kvs(g.kvs()),
                        vec![kv("n", "2", 2, 3, 2)],
                        "but reads see the writes"
                    );
                    assert_eq!(rev(g.header()), 3);
                }
                other => panic!("{other:?}"),
            }
        }
        other => panic!("{other:?}"),
    }
    match &ops[2] {
        TxnOpResponse::Txn(n) => {
            assert!(!n.succeeded());
            match &n.op_responses()[..] {
                [TxnOpResponse::Get(g)] => {
                    assert_eq!((g.kvs().len(), g.count(), rev(g.header())), (0, 0, 3));
                }
                other => panic!("{other:?}"),
            }
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        kvs(c.get("inner-then-1", None).await.unwrap().kvs()),
        vec![kv("inner-then-1", "1", 3, 3, 1)]
    );
    assert!(c.get("inner-then-2", None).await.unwrap().kvs().is_empty());

    // Deeper nesting on the failure side, read-only.
    let t = c
        .txn(Txn::new().when([Compare::version("n", CompareOp::Equal, 100)]).or_else([TxnOp::txn(
            Txn::new().and_then([TxnOp::txn(
                Txn::new().and_then([TxnOp::get("n", Some(GetOptions::new().with_keys_only()))]),
            )]),
        )]))
        .await
        .unwrap();
    assert!(!t.succeeded());
    assert_eq!(rev(t.header()), 3);
    let TxnOpResponse::Txn(l1) = &t.op_responses()[0] else { panic!() };
    assert!(l1.succeeded());
    let TxnOpResponse::Txn(l2) = &l1.op_responses()[0] else { panic!() };
    let TxnOpResponse::Get(g) = &l2.op_responses()[0] else { panic!() };
    assert_eq!(kvs(g.kvs()), vec![kv("n", "", 2, 3, 2)]);
}

fn puts(prefix: &str, n: usize) -> Vec<TxnOp> {
    (0..n).map(|i| TxnOp::put(format!("{prefix}{i:04}"), "v", None)).collect()
}

#[tokio::test]
async fn too_many_ops_with_the_default_limit() {
    let s = server!();
    let mut c = s.client().await;
    assert_err(
        c.txn(Txn::new().and_then(puts("k", MAX_TXN_OPS + 1))).await,
        Code::InvalidArgument,
        E_TOO_MANY_OPS,
    );
    assert_err(
        c.txn(Txn::new().or_else(puts("k", MAX_TXN_OPS + 1))).await,
        Code::InvalidArgument,
        E_TOO_MANY_OPS,
    );
    let cmps: Vec<Compare> =
        (0..=MAX_TXN_OPS).map(|i| Compare::version(format!("c{i}"), CompareOp::Equal, 0)).collect();
    assert_err(c.txn(Txn::new().when(cmps)).await, Code::InvalidArgument, E_TOO_MANY_OPS);
    assert_eq!(current_rev(&mut c).await, 1);

    // 128 is fine, and all puts share one revision.
    let t = c.txn(Txn::new().and_then(puts("k", MAX_TXN_OPS))).await.unwrap();
    assert_eq!((rev(t.header()), t.op_responses().len()), (2, MAX_TXN_OPS));
    let r = c.get("k", Some(GetOptions::new().with_prefix().with_count_only())).await.unwrap();
    assert_eq!(r.count(), MAX_TXN_OPS as i64);
    // The limit is per list (compares, success, failure), not their sum.
    let cmps: Vec<Compare> = (0..MAX_TXN_OPS)
        .map(|i| Compare::version(format!("k{i:04}"), CompareOp::Equal, 1))
        .collect();
    let t = c
        .txn(Txn::new().when(cmps).and_then(puts("k", MAX_TXN_OPS)).or_else(puts("j", MAX_TXN_OPS)))
        .await
        .unwrap();
    assert!(t.succeeded());
    assert_eq!(rev(t.header()), 3);
}

#[tokio::test]
async fn too_many_ops_with_a_custom_limit() {
    let s = server!(["--max-txn-ops", "4"]);
    let mut c = s.client().await;
    assert_err(
        c.txn(Txn::new().and_then(puts("k", 5))).await,
        Code::InvalidArgument,
        E_TOO_MANY_OPS,
    );
    let t = c.txn(Txn::new().and_then(puts("k", 4))).await.unwrap();
    assert_eq!(rev(t.header()), 2);
    let cmps: Vec<Compare> =
        (0..5).map(|i| Compare::version(format!("k{i}"), CompareOp::Equal, 0)).collect();
    assert_err(c.txn(Txn::new().when(cmps)).await, Code::InvalidArgument, E_TOO_MANY_OPS);
    // Nested txns share the budget: a nested txn may use what its parent's widest list left.
    let nested = |n: usize| TxnOp::txn(Txn::new().and_then(puts("n", n)));
    let t = c.txn(Txn::new().and_then([TxnOp::put("x", "1", None), nested(2)])).await.unwrap();
    assert_eq!(rev(t.header()), 3);
    assert_err(
        c.txn(Txn::new().and_then([TxnOp::put("y", "1", None), nested(3)])).await,
        Code::InvalidArgument,
        E_TOO_MANY_OPS,
    );
    assert_eq!(current_rev(&mut c).await, 3);
}

#[tokio::test]
async fn duplicate_keys_in_one_branch_are_rejected() {
    let s = server!();
    let mut c = s.client().await;
    let rejected = [
        Txn::new().and_then([TxnOp::put("a", "1", None), TxnOp::put("a", "2", None)]),
        Txn::new().or_else([TxnOp::put("a", "1", None), TxnOp::put("a", "2", None)]),
        Txn::new().and_then([TxnOp::put("a", "1", None), TxnOp::delete("a", None)]),
        Txn::new().and_then([TxnOp::delete("a", None), TxnOp::put("a", "1", None)]),
        Txn::new().and_then([
            TxnOp::delete("a", Some(DeleteOptions::new().with_range("c"))),
            TxnOp::put("b", "1", None),
        ]),
        Txn::new().and_then([
            TxnOp::put("p/x", "1", None),
            TxnOp::delete("p/", Some(DeleteOptions::new().with_prefix())),
        ]),
        Txn::new().and_then([
            TxnOp::put("a", "1", None),
            TxnOp::txn(Txn::new().and_then([TxnOp::put("a", "2", None)])),
        ]),
        Txn::new().and_then([
            TxnOp::txn(Txn::new().and_then([TxnOp::put("a", "2", None)])),
            TxnOp::txn(Txn::new().or_else([TxnOp::put("a", "3", None)])),
        ]),
        Txn::new().and_then([
            TxnOp::delete("a", None),
            TxnOp::txn(Txn::new().or_else([TxnOp::put("a", "3", None)])),
        ]),
    ];
    for t in rejected {
        let dbg = format!("{t:?}");
        let r = c.txn(t).await;
        match r {
            Err(e) => {
                assert_eq!(status_of(&e), (Code::InvalidArgument, E_DUPLICATE.into()), "{dbg}")
            }
            Ok(r) => panic!("expected a duplicate-key error for {dbg}, got {r:?}"),
        }
    }
    assert_eq!(current_rev(&mut c).await, 1);

    // Allowed: the same key in the two branches, overlapping deletes, reads and writes of one
    // key, and the then/else branches of one nested txn.
    let allowed = [
        Txn::new().and_then([TxnOp::put("a", "1", None)]).or_else([TxnOp::put("a", "2", None)]),
        Txn::new().and_then([
            TxnOp::delete("a", None),
            TxnOp::delete("a", Some(DeleteOptions::new().with_range("c"))),
        ]),
        Txn::new().and_then([
            TxnOp::get("a", None),
            TxnOp::put("a", "1", None),
            TxnOp::get("a", None),
        ]),
        Txn::new().and_then([TxnOp::txn(
            Txn::new().and_then([TxnOp::put("a", "2", None)]).or_else([TxnOp::put("a", "3", None)]),
        )]),
    ];
    let mut want = 1;
    for t in allowed {
        let dbg = format!("{t:?}");
        let r = c.txn(t).await.unwrap_or_else(|e| panic!("{dbg}: {e}"));
        // Each of these writes (the overlapping deletes only delete once "a" exists).
        want += 1;
        assert_eq!(rev(r.header()), want, "{dbg}");
    }
}

#[tokio::test]
async fn txn_validation_and_apply_errors_change_nothing() {
    let s = server!();
    let mut c = s.client().await;
    put(&mut c, "a", "1").await; // 2
    // Empty keys anywhere.
    for t in [
        Txn::new().when([Compare::version("", CompareOp::Equal, 0)]),
        Txn::new().and_then([TxnOp::put("", "v", None)]),
        Txn::new().or_else([TxnOp::get("", None)]),
        Txn::new().and_then([TxnOp::delete("", None)]),
        Txn::new().and_then([TxnOp::txn(Txn::new().or_else([TxnOp::put("", "v", None)]))]),
    ] {
        let dbg = format!("{t:?}");
        match c.txn(t).await {
            Err(e) => {
                assert_eq!(status_of(&e), (Code::InvalidArgument, E_EMPTY_KEY.into()), "{dbg}")
            }
            Ok(r) => panic!("{dbg}: {r:?}"),
        }
    }
    // Put flags in a txn.
    assert_err(
        c.txn(Txn::new().and_then([TxnOp::put(
            "a",
            "v",
            Some(PutOptions::new().with_ignore_value()),
        )]))
        .await,
        Code::InvalidArgument,
        E_VALUE_PROVIDED,
    );
    assert_err(
        c.txn(Txn::new().and_then([TxnOp::put(
            "a",
            "",
            Some(PutOptions::new().with_ignore_lease().with_lease(3)),
        )]))
        .await,
        Code::InvalidArgument,
        E_LEASE_PROVIDED,
    );
    // Errors found while applying: nothing of the txn is applied.
    assert_err(
        c.txn(Txn::new().and_then([
            TxnOp::put("b", "1", None),
            TxnOp::put("c", "1", Some(PutOptions::new().with_lease(99))),
        ]))
        .await,
        Code::NotFound,
        E_LEASE_NOT_FOUND,
    );
    assert_err(
        c.txn(Txn::new().and_then([
            TxnOp::put("b", "1", None),
            TxnOp::put("missing", "", Some(PutOptions::new().with_ignore_value())),
        ]))
        .await,
        Code::InvalidArgument,
        E_KEY_NOT_FOUND,
    );
    assert_err(
        c.txn(Txn::new().and_then([
            TxnOp::put("b", "1", None),
            TxnOp::get("a", Some(GetOptions::new().with_revision(3))),
        ]))
        .await,
        Code::OutOfRange,
        E_FUTURE,
    );
    assert_eq!(current_rev(&mut c).await, 2);
    assert!(c.get("b", None).await.unwrap().kvs().is_empty());
    // The branch not taken is not checked while applying.
    let t = c
        .txn(
            Txn::new()
                .when([Compare::version("a", CompareOp::Equal, 1)])
                .and_then([TxnOp::put("b", "1", None)])
                .or_else([TxnOp::put("c", "1", Some(PutOptions::new().with_lease(99)))]),
        )
        .await
        .unwrap();
    assert!(t.succeeded());
    assert_eq!(rev(t.header()), 3);
    // ignore_value inside a txn keeps the value.
    let t = c
        .txn(Txn::new().and_then([TxnOp::put(
            "a",
            "",
            Some(PutOptions::new().with_ignore_value().with_prev_key()),
        )]))
        .await
        .unwrap();
    assert_eq!(rev(t.header()), 4);
    match &t.op_responses()[..] {
        [TxnOpResponse::Put(p)] => {
            assert_eq!(p.prev_key().map(Kv::from), Some(kv("a", "1", 2, 2, 1)))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(kvs(c.get("a", None).await.unwrap().kvs()), vec![kv("a", "1", 2, 4, 2)]);
}

#[tokio::test]
async fn txn_reads_at_past_revisions_and_after_compaction() {
    let s = server!();
    let mut c = s.client().await;
    put(&mut c, "a", "1").await; // 2
    put(&mut c, "a", "2").await; // 3
    put(&mut c, "a", "3").await; // 4
    c.compact(3, None).await.unwrap();
    // Read-only txn at the compact revision and at the latest.
    let t = c
        .txn(Txn::new().and_then([
            TxnOp::get("a", Some(GetOptions::new().with_revision(3))),
            TxnOp::get("a", Some(GetOptions::new().with_revision(0))),
        ]))
        .await
        .unwrap();
    let ops = t.op_responses();
    let (TxnOpResponse::Get(g0), TxnOpResponse::Get(g1)) = (&ops[0], &ops[1]) else {
        panic!("{ops:?}")
    };
    assert_eq!(kvs(g0.kvs()), vec![kv("a", "2", 2, 3, 2)]);
    assert_eq!(kvs(g1.kvs()), vec![kv("a", "3", 2, 4, 3)]);
    assert_eq!((rev(g0.header()), rev(g1.header()), rev(t.header())), (4, 4, 4));
    // A write txn that reads below the compact revision fails as a whole.
    assert_err(
        c.txn(Txn::new().and_then([
            TxnOp::put("b", "1", None),
            TxnOp::get("a", Some(GetOptions::new().with_revision(2))),
        ]))
        .await,
        Code::OutOfRange,
        E_COMPACTED,
    );
    assert_eq!(current_rev(&mut c).await, 4);
    // k8s's update shape after compaction: the failure Range has revision 0 and works.
    let t = c
        .txn(
            Txn::new()
                .when([Compare::mod_revision("a", CompareOp::Equal, 2)])
                .and_then([TxnOp::put("a", "x", None)])
                .or_else([TxnOp::get("a", None)]),
        )
        .await
        .unwrap();
    assert!(!t.succeeded());
    let TxnOpResponse::Get(g) = &t.op_responses()[0] else { panic!() };
    assert_eq!(kvs(g.kvs()), vec![kv("a", "3", 2, 4, 3)]);
}
