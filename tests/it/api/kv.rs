//! The KV service through etcd-client: Range, Put, DeleteRange, Compact and the revision clock.
//!
//! Every expectation here was checked against a real etcd 3.6 (`MEM_ETCD_TEST_TARGET=etcd`).

use etcd_client::{
    Client, CompactionOptions, DeleteOptions, GetOptions, PutOptions, SortOrder, SortTarget,
};
use tonic::Code;

use crate::support::*;

/// Puts and returns the header revision of the response.
pub async fn put(c: &mut Client, k: impl Into<Vec<u8>>, v: impl Into<Vec<u8>>) -> i64 {
    rev(c.put(k, v, None).await.expect("put").header())
}

async fn get_kvs(c: &mut Client, k: impl Into<Vec<u8>>, o: GetOptions) -> Vec<Kv> {
    kvs(c.get(k, Some(o)).await.expect("get").kvs())
}

#[tokio::test]
async fn revisions_start_at_one_and_only_writes_bump_them() {
    let s = server!();
    let mut c = s.client().await;

    let r = c.get("a", None).await.unwrap();
    assert_eq!((rev(r.header()), r.count(), r.more(), r.kvs().len()), (1, 0, false, 0));

    let p = c.put("a", "1", None).await.unwrap();
    assert_eq!(rev(p.header()), 2, "the first write of an empty store gets revision 2");
    assert!(p.prev_key().is_none());

    let r = c.get("a", None).await.unwrap();
    assert_eq!(rev(r.header()), 2);
    assert_eq!(kvs(r.kvs()), vec![kv("a", "1", 2, 2, 1)]);
    assert_eq!((r.count(), r.more()), (1, false));
    // Reads, repeated, never move the clock.
    for _ in 0..3 {
        assert_eq!(current_rev(&mut c).await, 2);
    }

    assert_eq!(put(&mut c, "a", "2").await, 3);
    assert_eq!(put(&mut c, "b", "1").await, 4);
    assert_eq!(get_kvs(&mut c, "a", GetOptions::new()).await, vec![kv("a", "2", 2, 3, 2)]);
    assert_eq!(get_kvs(&mut c, "b", GetOptions::new()).await, vec![kv("b", "1", 4, 4, 1)]);

    // A failed write does not bump the revision.
    assert_err(
        c.put("a", "x", Some(PutOptions::new().with_lease(0x1234))).await,
        Code::NotFound,
        E_LEASE_NOT_FOUND,
    );
    assert_eq!(current_rev(&mut c).await, 4);
    // Neither does deleting nothing.
    let d = c.delete("nope", None).await.unwrap();
    assert_eq!((rev(d.header()), d.deleted()), (4, 0));
    assert_eq!(current_rev(&mut c).await, 4);
    // A delete that removes something does.
    let d = c.delete("a", None).await.unwrap();
    assert_eq!((rev(d.header()), d.deleted()), (5, 1));
    // Re-creating a deleted key starts a new life: new create_revision, version 1.
    assert_eq!(put(&mut c, "a", "3").await, 6);
    assert_eq!(get_kvs(&mut c, "a", GetOptions::new()).await, vec![kv("a", "3", 6, 6, 1)]);
}

#[tokio::test]
async fn range_limit_count_and_more() {
    let s = server!();
    let mut c = s.client().await;
    for i in 0..10 {
        assert_eq!(put(&mut c, format!("k{i}"), format!("v{i}")).await, 2 + i);
    }
    put(&mut c, "j", "before").await; // 12
    put(&mut c, "l", "after").await; // 13
    let all: Vec<Kv> =
        (0..10).map(|i| kv(format!("k{i}"), format!("v{i}"), 2 + i, 2 + i, 1)).collect();

    for (limit, more) in [(0, false), (1, true), (3, true), (9, true), (10, false), (11, false)] {
        let r = c.get("k", Some(GetOptions::new().with_prefix().with_limit(limit))).await.unwrap();
        let n = if limit == 0 { 10 } else { (limit as usize).min(10) };
        assert_eq!(kvs(r.kvs()), all[..n].to_vec(), "limit {limit}");
        assert_eq!((r.count(), r.more(), rev(r.header())), (10, more, 13), "limit {limit}");
    }
    // A negative limit means no limit, as 0 does.
    let r = c.get("k", Some(GetOptions::new().with_prefix().with_limit(-1))).await.unwrap();
    assert_eq!((r.kvs().len(), r.count(), r.more()), (10, 10, false));

    // count is the number of keys in [key, range_end), whatever the limit.
    let r = c.get("k3", Some(GetOptions::new().with_range("k7").with_limit(2))).await.unwrap();
    assert_eq!(kvs(r.kvs()), all[3..5].to_vec());
    assert_eq!((r.count(), r.more()), (4, true));
    // A continue-style page: from after the last key, limit 2.
    let r = c.get("k4\0", Some(GetOptions::new().with_range("k7").with_limit(2))).await.unwrap();
    assert_eq!(kvs(r.kvs()), all[5..7].to_vec());
    assert_eq!((r.count(), r.more()), (2, false));
    // Single-key ranges count 0 or 1.
    let r = c.get("k5", Some(GetOptions::new().with_limit(1))).await.unwrap();
    assert_eq!((kvs(r.kvs()), r.count(), r.more()), (all[5..6].to_vec(), 1, false));
    let r = c.get("k", Some(GetOptions::new().with_limit(1))).await.unwrap();
    assert_eq!((r.kvs().len(), r.count(), r.more()), (0, 0, false));
}

#[tokio::test]
async fn range_keys_only_and_count_only() {
    let s = server!();
    let mut c = s.client().await;
    for (i, k) in ["p/a", "p/b", "p/c", "p/d", "q"].iter().enumerate() {
        put(&mut c, *k, format!("value-{i}")).await;
    }
    put(&mut c, "p/b", "again").await; // 7

    let r = c.get("p/", Some(GetOptions::new().with_prefix().with_keys_only())).await.unwrap();
    assert_eq!(
        kvs(r.kvs()),
        vec![
            kv("p/a", "", 2, 2, 1),
            kv("p/b", "", 3, 7, 2),
            kv("p/c", "", 4, 4, 1),
            kv("p/d", "", 5, 5, 1)
        ]
    );
    assert_eq!((r.count(), r.more(), rev(r.header())), (4, false, 7));

    let r = c
        .get("p/", Some(GetOptions::new().with_prefix().with_keys_only().with_limit(2)))
        .await
        .unwrap();
    assert_eq!(keys(r.kvs()), ["p/a", "p/b"]);
    assert!(r.kvs().iter().all(|k| k.value().is_empty()));
    assert_eq!((r.count(), r.more()), (4, true));

    let r = c.get("p/", Some(GetOptions::new().with_prefix().with_count_only())).await.unwrap();
    assert_eq!((r.kvs().len(), r.count(), r.more(), rev(r.header())), (0, 4, false, 7));
    // count_only with a limit: etcd counts everything and, returning no kvs, reports more=false.
    let r = c
        .get("p/", Some(GetOptions::new().with_prefix().with_count_only().with_limit(1)))
        .await
        .unwrap();
    assert_eq!((r.kvs().len(), r.count(), r.more()), (0, 4, false));
    // count_only at a past revision counts what existed then.
    let r = c
        .get("p/", Some(GetOptions::new().with_prefix().with_count_only().with_revision(3)))
        .await
        .unwrap();
    assert_eq!((r.kvs().len(), r.count(), rev(r.header())), (0, 2, 7));
    let r = c.get("zz", Some(GetOptions::new().with_count_only())).await.unwrap();
    assert_eq!((r.kvs().len(), r.count(), r.more()), (0, 0, false));
}

#[tokio::test]
async fn range_at_past_revisions() {
    let s = server!();
    let mut c = s.client().await;
    assert_eq!(put(&mut c, "a", "1").await, 2);
    assert_eq!(put(&mut c, "a", "2").await, 3);
    assert_eq!(put(&mut c, "b", "1").await, 4);
    assert_eq!(rev(c.delete("a", None).await.unwrap().header()), 5);
    assert_eq!(put(&mut c, "a", "3").await, 6);
    assert_eq!(put(&mut c, "c", "1").await, 7);

    let at = |r: i64| GetOptions::new().with_revision(r);
    let cases: Vec<(i64, Vec<Kv>)> = vec![
        (1, vec![]),
        (2, vec![kv("a", "1", 2, 2, 1)]),
        (3, vec![kv("a", "2", 2, 3, 2)]),
        (4, vec![kv("a", "2", 2, 3, 2), kv("b", "1", 4, 4, 1)]),
        (5, vec![kv("b", "1", 4, 4, 1)]),
        (6, vec![kv("a", "3", 6, 6, 1), kv("b", "1", 4, 4, 1)]),
        (7, vec![kv("a", "3", 6, 6, 1), kv("b", "1", 4, 4, 1), kv("c", "1", 7, 7, 1)]),
    ];
    for (r, want) in cases {
        let resp = c.get("\0", Some(at(r).with_from_key())).await.unwrap();
        assert_eq!(kvs(resp.kvs()), want, "all keys at revision {r}");
        // The header always carries the current revision, not the one read at.
        assert_eq!((resp.count(), rev(resp.header())), (want.len() as i64, 7), "revision {r}");
        let single = c.get("a", Some(at(r))).await.unwrap();
        let want_a: Vec<Kv> = want.iter().filter(|k| k.key == b"a").cloned().collect();
        assert_eq!(kvs(single.kvs()), want_a, "key a at revision {r}");
        assert_eq!(single.count(), want_a.len() as i64);
    }
    // Revision 0 means the latest.
    assert_eq!(get_kvs(&mut c, "a", at(0)).await, vec![kv("a", "3", 6, 6, 1)]);
    // With a limit at a past revision.
    let r = c.get("a", Some(at(4).with_range("z").with_limit(1))).await.unwrap();
    assert_eq!((kvs(r.kvs()), r.count(), r.more()), (vec![kv("a", "2", 2, 3, 2)], 2, true));

    assert_err(c.get("a", Some(at(8))).await, Code::OutOfRange, E_FUTURE);
    assert_err(c.get("a", Some(at(1000).with_prefix())).await, Code::OutOfRange, E_FUTURE);
    assert_eq!(current_rev(&mut c).await, 7);
}

/// Builds a store where every sort target orders the three keys differently.
///
/// final state: s/a create 3 mod 7 version 2 value "f"; s/b create 4 mod 4 version 1 value "a";
/// s/c create 2 mod 6 version 3 value "e".
async fn sort_fixture(c: &mut Client) {
    for (k, v) in
        [("s/c", "b"), ("s/a", "c"), ("s/b", "a"), ("s/c", "d"), ("s/c", "e"), ("s/a", "f")]
    {
        put(c, k, v).await;
    }
}

#[tokio::test]
async fn range_sort_by_every_target_and_order() {
    let s = server!();
    let mut c = s.client().await;
    sort_fixture(&mut c).await;
    use SortOrder::*;
    use SortTarget::*;
    let cases = [
        (Key, None, ["s/a", "s/b", "s/c"]),
        (Key, Ascend, ["s/a", "s/b", "s/c"]),
        (Key, Descend, ["s/c", "s/b", "s/a"]),
        (Version, Ascend, ["s/b", "s/a", "s/c"]),
        (Version, Descend, ["s/c", "s/a", "s/b"]),
        (Create, Ascend, ["s/c", "s/a", "s/b"]),
        (Create, Descend, ["s/b", "s/a", "s/c"]),
        (Mod, Ascend, ["s/b", "s/c", "s/a"]),
        (Mod, Descend, ["s/a", "s/c", "s/b"]),
        (Value, Ascend, ["s/b", "s/c", "s/a"]),
        (Value, Descend, ["s/a", "s/c", "s/b"]),
        // NONE with a target other than KEY sorts ascending.
        (Version, None, ["s/b", "s/a", "s/c"]),
        (Create, None, ["s/c", "s/a", "s/b"]),
        (Mod, None, ["s/b", "s/c", "s/a"]),
        (Value, None, ["s/b", "s/c", "s/a"]),
    ];
    for (target, order, want) in cases {
        let r = c
            .get("s/", Some(GetOptions::new().with_prefix().with_sort(target, order)))
            .await
            .unwrap();
        assert_eq!(keys(r.kvs()), want, "sort {target:?} {order:?}");
        assert_eq!((r.count(), r.more(), rev(r.header())), (3, false, 7));
        // The limit applies after sorting the whole range.
        let r = c
            .get("s/", Some(GetOptions::new().with_prefix().with_sort(target, order).with_limit(2)))
            .await
            .unwrap();
        assert_eq!(keys(r.kvs()), want[..2], "sort {target:?} {order:?} limit 2");
        assert_eq!((r.count(), r.more()), (3, true), "sort {target:?} {order:?} limit 2");
    }
    // Sorted kvs are complete, not just keys.
    let r =
        c.get("s/", Some(GetOptions::new().with_prefix().with_sort(Mod, Descend))).await.unwrap();
    assert_eq!(
        kvs(r.kvs()),
        vec![kv("s/a", "f", 3, 7, 2), kv("s/c", "e", 2, 6, 3), kv("s/b", "a", 4, 4, 1)]
    );
    // Sorting combines with keys_only and with past revisions (at 5: s/c has version 2).
    let r = c
        .get(
            "s/",
            Some(
                GetOptions::new()
                    .with_prefix()
                    .with_sort(Version, Descend)
                    .with_revision(5)
                    .with_keys_only(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        kvs(r.kvs()),
        vec![kv("s/c", "", 2, 5, 2), kv("s/a", "", 3, 3, 1), kv("s/b", "", 4, 4, 1)]
    );
}

#[tokio::test]
async fn range_sort_ties_keep_key_order_on_small_ranges() {
    // etcd sorts with Go's sort.Sort, which is an insertion sort (stable) up to 12 elements:
    // equal targets stay in ascending key order, for ASCEND and DESCEND alike.
    let s = server!();
    let mut c = s.client().await;
    for k in ["t/e", "t/b", "t/d", "t/a", "t/c"] {
        put(&mut c, k, "same").await;
    }
    put(&mut c, "t/d", "same").await; // t/d has version 2
    for (target, order, want) in [
        (SortTarget::Version, SortOrder::Ascend, ["t/a", "t/b", "t/c", "t/e", "t/d"]),
        (SortTarget::Version, SortOrder::Descend, ["t/d", "t/a", "t/b", "t/c", "t/e"]),
        (SortTarget::Value, SortOrder::Ascend, ["t/a", "t/b", "t/c", "t/d", "t/e"]),
        (SortTarget::Value, SortOrder::Descend, ["t/a", "t/b", "t/c", "t/d", "t/e"]),
    ] {
        let r = c
            .get("t/", Some(GetOptions::new().with_prefix().with_sort(target, order)))
            .await
            .unwrap();
        assert_eq!(keys(r.kvs()), want, "sort {target:?} {order:?}");
    }
}

#[tokio::test]
async fn range_min_max_revision_filters() {
    let s = server!();
    let mut c = s.client().await;
    for i in 0..5 {
        put(&mut c, format!("f{i}"), "v").await; // f0..f4 at 2..6
    }
    put(&mut c, "f0", "w").await; // 7: f0 create 2 mod 7
    put(&mut c, "g", "v").await; // 8, outside the range
    let o = || GetOptions::new().with_prefix();
    let cases: Vec<(GetOptions, Vec<&str>)> = vec![
        (o().with_min_mod_revision(5), vec!["f0", "f3", "f4"]),
        (o().with_max_mod_revision(4), vec!["f1", "f2"]),
        (o().with_min_create_revision(4), vec!["f2", "f3", "f4"]),
        (o().with_max_create_revision(3), vec!["f0", "f1"]),
        (o().with_min_mod_revision(3).with_max_mod_revision(5), vec!["f1", "f2", "f3"]),
        (o().with_min_create_revision(3).with_max_create_revision(3), vec!["f1"]),
        (o().with_min_mod_revision(100), vec![]),
    ];
    for (opts, want) in cases {
        let dbg = format!("{opts:?}");
        let r = c.get("f", Some(opts)).await.unwrap();
        assert_eq!(keys(r.kvs()), want, "{dbg}");
        // count ignores the filters: it is the number of keys in the range.
        assert_eq!((r.count(), r.more(), rev(r.header())), (5, false, 8), "{dbg}");
    }
    // With a limit, `more` says whether the FILTERED list was cut.
    let r = c.get("f", Some(o().with_min_mod_revision(5).with_limit(2))).await.unwrap();
    assert_eq!((keys(r.kvs()), r.count(), r.more()), (vec!["f0".into(), "f3".into()], 5, true));
    let r = c.get("f", Some(o().with_min_mod_revision(5).with_limit(3))).await.unwrap();
    assert_eq!((r.kvs().len(), r.count(), r.more()), (3, 5, false));
    let r = c.get("f", Some(o().with_max_mod_revision(4).with_limit(2))).await.unwrap();
    assert_eq!((keys(r.kvs()), r.count(), r.more()), (vec!["f1".into(), "f2".into()], 5, false));
    // Filters apply to the state at the read revision.
    let r = c.get("f", Some(o().with_min_mod_revision(2).with_revision(3))).await.unwrap();
    assert_eq!(
        (kvs(r.kvs()), r.count()),
        (vec![kv("f0", "v", 2, 2, 1), kv("f1", "v", 3, 3, 1)], 2)
    );
    // Filters with a sort.
    let r = c
        .get("f", Some(o().with_min_mod_revision(4).with_sort(SortTarget::Mod, SortOrder::Descend)))
        .await
        .unwrap();
    assert_eq!(keys(r.kvs()), ["f0", "f4", "f3", "f2"]);
}

#[tokio::test]
async fn range_serializable_reads_the_same() {
    let s = server!();
    let mut c = s.client().await;
    put(&mut c, "x/1", "a").await;
    put(&mut c, "x/2", "b").await;
    put(&mut c, "x/1", "c").await;
    let lin = c.get("x/", Some(GetOptions::new().with_prefix())).await.unwrap();
    let ser = c.get("x/", Some(GetOptions::new().with_prefix().with_serializable())).await.unwrap();
    assert_eq!(kvs(ser.kvs()), kvs(lin.kvs()));
    assert_eq!(kvs(ser.kvs()), vec![kv("x/1", "c", 2, 4, 2), kv("x/2", "b", 3, 3, 1)]);
    assert_eq!((ser.count(), ser.more(), rev(ser.header())), (2, false, 4));
    let ser = c
        .get("x/", Some(GetOptions::new().with_prefix().with_serializable().with_revision(2)))
        .await
        .unwrap();
    assert_eq!(kvs(ser.kvs()), vec![kv("x/1", "a", 2, 2, 1)]);
}

/// Keys on both sides of several `/registry/<resource>/` prefixes and outside `/registry`.
const MIXED_KEYS: &[&[u8]] = &[
    b"/registry/configmaps/default/cm",
    b"/registry/health",
    b"/registry/pods/default/a",
    b"/registry/pods/default/b",
    b"/registry/pods/kube-system/c",
    b"/registry/podtemplates/default/t",
    b"/registry/secrets/default/s",
    b"/registry/services/endpoints/default/kubernetes",
    b"/registry/services/specs/default/kubernetes",
    b"/registry0",
    b"a",
    b"compact_rev_key",
    b"z\xff",
    b"z\xff\x01",
    b"\xff",
    b"\xff\xff",
];

fn mixed_between(from: &[u8], to: Option<&[u8]>) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = MIXED_KEYS
        .iter()
        .filter(|k| **k >= from && to.is_none_or(|t| **k < t))
        .map(|k| k.to_vec())
        .collect();
    v.sort();
    v
}

/// (name, key, options, expected keys)
type RangeCase = (&'static str, Vec<u8>, GetOptions, Vec<Vec<u8>>);

fn raw_keys(list: &[etcd_client::KeyValue]) -> Vec<Vec<u8>> {
    list.iter().map(|k| k.key().to_vec()).collect()
}

#[tokio::test]
async fn range_ends_prefixes_and_key_order_across_resources() {
    let s = server!();
    let mut c = s.client().await;
    // Written in a scrambled order; every answer must still be in byte order.
    let mut order: Vec<&[u8]> = MIXED_KEYS.to_vec();
    order.reverse();
    order.swap(0, 7);
    order.swap(3, 11);
    for k in &order {
        put(&mut c, k.to_vec(), "v").await;
    }
    let n = MIXED_KEYS.len() as i64;
    let cases: Vec<RangeCase> = vec![
        (
            "prefix /registry/",
            b"/registry/".to_vec(),
            GetOptions::new().with_prefix(),
            mixed_between(b"/registry/", Some(b"/registry0")),
        ),
        (
            "prefix /registry/pods/",
            b"/registry/pods/".to_vec(),
            GetOptions::new().with_prefix(),
            mixed_between(b"/registry/pods/", Some(b"/registry/pods0")),
        ),
        (
            "prefix /registry/pod (pods and podtemplates)",
            b"/registry/pod".to_vec(),
            GetOptions::new().with_prefix(),
            mixed_between(b"/registry/pod", Some(b"/registry/poe")),
        ),
        (
            "range crossing resources",
            b"/registry/pods/default/b".to_vec(),
            GetOptions::new().with_range("/registry/services/specs"),
            mixed_between(b"/registry/pods/default/b", Some(b"/registry/services/specs")),
        ),
        (
            "range leaving /registry",
            b"/registry/services/".to_vec(),
            GetOptions::new().with_range("b"),
            mixed_between(b"/registry/services/", Some(b"b")),
        ),
        (
            "from key (range_end \\0)",
            b"/registry/secrets".to_vec(),
            GetOptions::new().with_from_key(),
            mixed_between(b"/registry/secrets", None),
        ),
        (
            "all keys (key = range_end = \\0)",
            b"\0".to_vec(),
            GetOptions::new().with_all_keys(),
            mixed_between(b"", None),
        ),
        (
            "from key \\0",
            b"\0".to_vec(),
            GetOptions::new().with_from_key(),
            mixed_between(b"", None),
        ),
        (
            "prefix ending in 0xff",
            b"z\xff".to_vec(),
            GetOptions::new().with_prefix(),
            vec![b"z\xff".to_vec(), b"z\xff\x01".to_vec()],
        ),
        (
            "prefix of all-0xff key is from-key",
            b"\xff".to_vec(),
            GetOptions::new().with_prefix(),
            vec![b"\xff".to_vec(), b"\xff\xff".to_vec()],
        ),
        ("inverted range", b"b".to_vec(), GetOptions::new().with_range("a"), vec![]),
        ("empty range", b"a".to_vec(), GetOptions::new().with_range("a"), vec![]),
        (
            "range between keys",
            b"a\0".to_vec(),
            GetOptions::new().with_range("compact_rev_key"),
            vec![],
        ),
    ];
    for (name, key, opts, want) in cases {
        let r = c.get(key, Some(opts)).await.unwrap();
        assert_eq!(raw_keys(r.kvs()), want, "{name}");
        assert_eq!(
            (r.count(), r.more(), rev(r.header())),
            (want.len() as i64, false, n + 1),
            "{name}"
        );
    }
    // Limit across prefixes.
    let r = c
        .get("/registry/pods/", Some(GetOptions::new().with_range("a").with_limit(4)))
        .await
        .unwrap();
    let want = mixed_between(b"/registry/pods/", Some(b"a"));
    assert_eq!(raw_keys(r.kvs()), want[..4].to_vec());
    assert_eq!((r.count(), r.more()), (want.len() as i64, true));
}

#[tokio::test]
async fn range_rejects_an_empty_key() {
    let s = server!();
    let mut c = s.client().await;
    assert_err(c.get("", None).await, Code::InvalidArgument, E_EMPTY_KEY);
    assert_err(
        c.get("", Some(GetOptions::new().with_range("z"))).await,
        Code::InvalidArgument,
        E_EMPTY_KEY,
    );
}

#[tokio::test]
async fn put_prev_kv_and_values() {
    let s = server!();
    let mut c = s.client().await;
    let p = c.put("k", "v1", Some(PutOptions::new().with_prev_key())).await.unwrap();
    assert_eq!(rev(p.header()), 2);
    assert!(p.prev_key().is_none(), "no previous kv for a new key");
    let p = c.put("k", "v2", Some(PutOptions::new().with_prev_key())).await.unwrap();
    assert_eq!(rev(p.header()), 3);
    assert_eq!(p.prev_key().map(Kv::from), Some(kv("k", "v1", 2, 2, 1)));
    // Without prev_kv nothing comes back.
    let p = c.put("k", "v3", None).await.unwrap();
    assert!(p.prev_key().is_none());
    // An empty value is a value.
    let p = c.put("k", "", Some(PutOptions::new().with_prev_key())).await.unwrap();
    assert_eq!(rev(p.header()), 5);
    assert_eq!(p.prev_key().map(Kv::from), Some(kv("k", "v3", 2, 4, 3)));
    assert_eq!(get_kvs(&mut c, "k", GetOptions::new()).await, vec![kv("k", "", 2, 5, 4)]);
    // Binary keys and values round-trip.
    let key = vec![0u8, 1, 0xff, b'/', 0];
    let val: Vec<u8> = (0..=255u8).collect();
    assert_eq!(put(&mut c, key.clone(), val.clone()).await, 6);
    let got = get_kvs(&mut c, key.clone(), GetOptions::new()).await;
    assert_eq!(got, vec![kv(&key, &val, 6, 6, 1)]);
    // prev_kv after a delete: none.
    c.delete("k", None).await.unwrap(); // 7
    let p = c.put("k", "again", Some(PutOptions::new().with_prev_key())).await.unwrap();
    assert_eq!(rev(p.header()), 8);
    assert!(p.prev_key().is_none());
}

#[tokio::test]
async fn put_errors_and_ignore_flags() {
    let s = server!();
    let mut c = s.client().await;
    assert_err(c.put("", "v", None).await, Code::InvalidArgument, E_EMPTY_KEY);
    assert_err(
        c.put("k", "v", Some(PutOptions::new().with_lease(7587))).await,
        Code::NotFound,
        E_LEASE_NOT_FOUND,
    );
    assert_err(
        c.put("k", "", Some(PutOptions::new().with_ignore_value())).await,
        Code::InvalidArgument,
        E_KEY_NOT_FOUND,
    );
    assert_err(
        c.put("k", "", Some(PutOptions::new().with_ignore_lease())).await,
        Code::InvalidArgument,
        E_KEY_NOT_FOUND,
    );
    assert_err(
        c.put("k", "v", Some(PutOptions::new().with_ignore_value())).await,
        Code::InvalidArgument,
        E_VALUE_PROVIDED,
    );
    assert_err(
        c.put("k", "v", Some(PutOptions::new().with_ignore_lease().with_lease(5))).await,
        Code::InvalidArgument,
        E_LEASE_PROVIDED,
    );
    // The lease is checked before the key's existence.
    assert_err(
        c.put("k", "", Some(PutOptions::new().with_ignore_value().with_lease(5))).await,
        Code::NotFound,
        E_LEASE_NOT_FOUND,
    );
    assert_eq!(current_rev(&mut c).await, 1, "failed puts do not bump the revision");
    assert!(c.get("k", None).await.unwrap().kvs().is_empty());

    assert_eq!(put(&mut c, "k", "orig").await, 2);
    let p =
        c.put("k", "", Some(PutOptions::new().with_ignore_value().with_prev_key())).await.unwrap();
    assert_eq!(rev(p.header()), 3);
    assert_eq!(p.prev_key().map(Kv::from), Some(kv("k", "orig", 2, 2, 1)));
    assert_eq!(get_kvs(&mut c, "k", GetOptions::new()).await, vec![kv("k", "orig", 2, 3, 2)]);
    let p = c.put("k", "new", Some(PutOptions::new().with_ignore_lease())).await.unwrap();
    assert_eq!(rev(p.header()), 4);
    assert_eq!(get_kvs(&mut c, "k", GetOptions::new()).await, vec![kv("k", "new", 2, 4, 3)]);
    let p = c
        .put("k", "", Some(PutOptions::new().with_ignore_lease().with_ignore_value()))
        .await
        .unwrap();
    assert_eq!(rev(p.header()), 5);
    assert_eq!(get_kvs(&mut c, "k", GetOptions::new()).await, vec![kv("k", "new", 2, 5, 4)]);
    // ignore_value on a deleted key fails again.
    c.delete("k", None).await.unwrap(); // 6
    assert_err(
        c.put("k", "", Some(PutOptions::new().with_ignore_value())).await,
        Code::InvalidArgument,
        E_KEY_NOT_FOUND,
    );
    assert_eq!(current_rev(&mut c).await, 6);
}

#[tokio::test]
async fn delete_ranges_and_prev_kvs() {
    let s = server!();
    let mut c = s.client().await;
    for k in ["d/a", "d/b", "d/c", "d/d", "e", "f"] {
        put(&mut c, k, format!("{k}-v")).await; // 2..7
    }
    put(&mut c, "d/b", "d/b-v2").await; // 8

    // Single key with prev_kv.
    let d = c.delete("d/a", Some(DeleteOptions::new().with_prev_key())).await.unwrap();
    assert_eq!((rev(d.header()), d.deleted()), (9, 1));
    assert_eq!(kvs(d.prev_kvs()), vec![kv("d/a", "d/a-v", 2, 2, 1)]);
    // Deleting it again deletes nothing and keeps the revision.
    let d = c.delete("d/a", Some(DeleteOptions::new().with_prev_key())).await.unwrap();
    assert_eq!((rev(d.header()), d.deleted(), d.prev_kvs().len()), (9, 0, 0));
    // A range: one revision for all keys, prev_kvs in key order.
    let d = c
        .delete("d/b", Some(DeleteOptions::new().with_range("d/d").with_prev_key()))
        .await
        .unwrap();
    assert_eq!((rev(d.header()), d.deleted()), (10, 2));
    assert_eq!(kvs(d.prev_kvs()), vec![kv("d/b", "d/b-v2", 3, 8, 2), kv("d/c", "d/c-v", 4, 4, 1)]);
    // Without prev_kv, nothing comes back.
    let d = c.delete("d/", Some(DeleteOptions::new().with_prefix())).await.unwrap();
    assert_eq!((rev(d.header()), d.deleted(), d.prev_kvs().len()), (11, 1, 0));
    let r = c.get("d/", Some(GetOptions::new().with_prefix())).await.unwrap();
    assert_eq!((r.count(), rev(r.header())), (0, 11));
    // History still shows the deleted keys.
    let r = c.get("d/", Some(GetOptions::new().with_prefix().with_revision(10))).await.unwrap();
    assert_eq!(kvs(r.kvs()), vec![kv("d/d", "d/d-v", 5, 5, 1)]);
    // An empty range deletes nothing.
    let d = c.delete("f", Some(DeleteOptions::new().with_range("e"))).await.unwrap();
    assert_eq!((rev(d.header()), d.deleted()), (11, 0));
    // From key.
    let d =
        c.delete("e\0", Some(DeleteOptions::new().with_from_key().with_prev_key())).await.unwrap();
    assert_eq!((rev(d.header()), d.deleted()), (12, 1));
    assert_eq!(kvs(d.prev_kvs()), vec![kv("f", "f-v", 7, 7, 1)]);
    // All keys.
    put(&mut c, "g", "1").await; // 13
    let d =
        c.delete("\0", Some(DeleteOptions::new().with_all_keys().with_prev_key())).await.unwrap();
    assert_eq!((rev(d.header()), d.deleted()), (14, 2));
    assert_eq!(kvs(d.prev_kvs()), vec![kv("e", "e-v", 6, 6, 1), kv("g", "1", 13, 13, 1)]);
    let r = c.get("\0", Some(GetOptions::new().with_all_keys())).await.unwrap();
    assert_eq!((r.count(), rev(r.header())), (0, 14));
    // Re-creating a deleted key.
    assert_eq!(put(&mut c, "e", "new").await, 15);
    assert_eq!(get_kvs(&mut c, "e", GetOptions::new()).await, vec![kv("e", "new", 15, 15, 1)]);

    assert_err(c.delete("", None).await, Code::InvalidArgument, E_EMPTY_KEY);
    assert_eq!(current_rev(&mut c).await, 15);
}

#[tokio::test]
async fn delete_across_resource_prefixes() {
    let s = server!();
    let mut c = s.client().await;
    for k in MIXED_KEYS {
        put(&mut c, k.to_vec(), "v").await;
    }
    let n = MIXED_KEYS.len() as i64;
    let d = c
        .delete(
            "/registry/pods/default/b",
            Some(DeleteOptions::new().with_range("/registry/services/specs")),
        )
        .await
        .unwrap();
    let gone = mixed_between(b"/registry/pods/default/b", Some(b"/registry/services/specs"));
    assert_eq!((rev(d.header()), d.deleted()), (n + 2, gone.len() as i64));
    let r = c.get("\0", Some(GetOptions::new().with_all_keys().with_keys_only())).await.unwrap();
    let left: Vec<Vec<u8>> =
        mixed_between(b"", None).into_iter().filter(|k| !gone.contains(k)).collect();
    assert_eq!(raw_keys(r.kvs()), left);
}

#[tokio::test]
async fn compact_errors_and_reads_around_the_compact_revision() {
    let s = server!();
    let mut c = s.client().await;
    assert_eq!(put(&mut c, "a", "1").await, 2);
    assert_eq!(put(&mut c, "b", "1").await, 3);
    assert_eq!(put(&mut c, "a", "2").await, 4);
    assert_eq!(put(&mut c, "c", "1").await, 5);
    assert_eq!(rev(c.delete("c", None).await.unwrap().header()), 6);
    assert_eq!(put(&mut c, "d", "1").await, 7);
    assert_eq!(put(&mut c, "a", "3").await, 8);

    assert_err(c.compact(9, None).await, Code::OutOfRange, E_FUTURE);
    assert_err(c.compact(100, None).await, Code::OutOfRange, E_FUTURE);

    let r = c.compact(5, None).await.unwrap();
    assert_eq!(rev(r.header()), 8, "Compact answers with the current revision");
    assert_eq!(current_rev(&mut c).await, 8, "Compact does not bump the revision");

    let all_at = |r: i64| GetOptions::new().with_all_keys().with_revision(r);
    // Reading at the compact revision still works, and sees the newest version of each key
    // at or below it, even if that version is older than the compact revision.
    let want: Vec<(i64, Vec<Kv>)> = vec![
        (5, vec![kv("a", "2", 2, 4, 2), kv("b", "1", 3, 3, 1), kv("c", "1", 5, 5, 1)]),
        (6, vec![kv("a", "2", 2, 4, 2), kv("b", "1", 3, 3, 1)]),
        (7, vec![kv("a", "2", 2, 4, 2), kv("b", "1", 3, 3, 1), kv("d", "1", 7, 7, 1)]),
        (8, vec![kv("a", "3", 2, 8, 3), kv("b", "1", 3, 3, 1), kv("d", "1", 7, 7, 1)]),
    ];
    for (r, kvs_at) in &want {
        let resp = c.get("\0", Some(all_at(*r))).await.unwrap();
        assert_eq!(kvs(resp.kvs()), *kvs_at, "at {r}");
        assert_eq!((resp.count(), rev(resp.header())), (kvs_at.len() as i64, 8));
    }
    for r in [1, 2, 4] {
        assert_err(
            c.get("a", Some(GetOptions::new().with_revision(r))).await,
            Code::OutOfRange,
            E_COMPACTED,
        );
        assert_err(c.get("\0", Some(all_at(r))).await, Code::OutOfRange, E_COMPACTED);
    }
    // Compacting at or below the compact revision again fails.
    assert_err(c.compact(5, None).await, Code::OutOfRange, E_COMPACTED);
    assert_err(c.compact(3, None).await, Code::OutOfRange, E_COMPACTED);
    assert_err(c.compact(9, None).await, Code::OutOfRange, E_FUTURE);

    // Compact again, past the delete of c: c is gone everywhere that is still readable.
    let r = c.compact(7, Some(CompactionOptions::new().with_physical())).await.unwrap();
    assert_eq!(rev(r.header()), 8);
    for (r, kvs_at) in &want[2..] {
        let resp = c.get("\0", Some(all_at(*r))).await.unwrap();
        assert_eq!(kvs(resp.kvs()), *kvs_at, "at {r} after the second compaction");
    }
    for r in [5, 6] {
        assert_err(c.get("\0", Some(all_at(r))).await, Code::OutOfRange, E_COMPACTED);
    }
    // Versions survive compaction: the next write of a continues its life.
    assert_eq!(put(&mut c, "a", "4").await, 9);
    assert_eq!(get_kvs(&mut c, "a", GetOptions::new()).await, vec![kv("a", "4", 2, 9, 4)]);
    // Compacting at the current revision is allowed.
    let r = c.compact(9, None).await.unwrap();
    assert_eq!(rev(r.header()), 9);
    assert_eq!(
        get_kvs(&mut c, "\0", all_at(9)).await,
        vec![kv("a", "4", 2, 9, 4), kv("b", "1", 3, 3, 1), kv("d", "1", 7, 7, 1)]
    );
    assert_err(
        c.get("a", Some(GetOptions::new().with_revision(8))).await,
        Code::OutOfRange,
        E_COMPACTED,
    );
}

#[tokio::test]
async fn compact_then_txn_compares_and_counts_still_work() {
    let s = server!();
    let mut c = s.client().await;
    for i in 0..20 {
        put(&mut c, format!("h/{:02}", i % 5), format!("{i}")).await; // 2..21
    }
    c.compact(21, None).await.unwrap();
    let r = c.get("h/", Some(GetOptions::new().with_prefix())).await.unwrap();
    let want: Vec<Kv> = (15..20)
        .map(|i| kv(format!("h/{:02}", i % 5), format!("{i}"), 2 + i % 5, 2 + i, 4))
        .collect();
    assert_eq!(kvs(r.kvs()), want);
    assert_eq!(r.count(), 5);
    use etcd_client::{Compare, CompareOp, Txn, TxnOp};
    let t = c
        .txn(
            Txn::new()
                .when([
                    Compare::version("h/00", CompareOp::Equal, 4),
                    Compare::create_revision("h/04", CompareOp::Equal, 6),
                ])
                .and_then([TxnOp::put("h/00", "x", None)]),
        )
        .await
        .unwrap();
    assert!(t.succeeded());
    assert_eq!(rev(t.header()), 22);
    assert_eq!(get_kvs(&mut c, "h/00", GetOptions::new()).await, vec![kv("h/00", "x", 2, 22, 5)]);
}
