//! Store tests that attack the invariants directly (the gRPC surface is covered by tests/it).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use bytes::Bytes;

use super::*;
use crate::error::Error;

fn store() -> Store {
    Store::new(StoreConfig::default())
}

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn put(s: &Store, k: &str, v: &str) -> i64 {
    let a = s.put(PutRequest { key: b(k), value: b(v), ..Default::default() }, 0).unwrap();
    s.wait_visible_blocking(a.visible_at);
    a.response.revision
}

fn del(s: &Store, k: &str, end: &str) -> i64 {
    let req = DeleteRangeRequest { key: b(k), range_end: b(end), prev_kv: false };
    let a = s.delete_range(req, 0).unwrap();
    s.wait_visible_blocking(a.visible_at);
    a.response.deleted
}

fn range(s: &Store, k: &str, end: &str, rev: i64, limit: i64) -> RangeResponse {
    s.range(&RangeRequest {
        key: b(k),
        range_end: b(end),
        revision: rev,
        limit,
        ..Default::default()
    })
    .unwrap()
}

fn create_if_absent(k: &str, v: &str) -> TxnRequest {
    TxnRequest {
        compare: vec![Compare {
            key: b(k),
            range_end: Bytes::new(),
            target: CompareTarget::Mod(0),
            result: CompareResult::Equal,
        }],
        success: vec![RequestOp::Put(PutRequest { key: b(k), value: b(v), ..Default::default() })],
        failure: vec![],
    }
}

#[test]
fn revisions_start_at_one_and_only_writes_bump_them() {
    let s = store();
    assert_eq!(s.current_revision(), 1);
    assert_eq!(put(&s, "a", "1"), 2);
    assert_eq!(del(&s, "zzz", ""), 0, "deleting nothing");
    assert_eq!(s.current_revision(), 2);
    let t = s.txn(create_if_absent("a", "x"), 0).unwrap();
    assert!(!t.response.succeeded);
    assert_eq!(t.response.revision, 2, "a failed compare does not bump");
    assert_eq!(range(&s, "a", "", 0, 0).revision, 2);
    assert_eq!(put(&s, "/registry/pods/ns/p", "1"), 3);
}

#[test]
fn racing_creates_on_a_new_key_have_exactly_one_winner() {
    for round in 0..50 {
        let s = Arc::new(store());
        let wins = Arc::new(AtomicUsize::new(0));
        let key = format!("/registry/things/ns/k{round}");
        let threads: Vec<_> = (0..4)
            .map(|i| {
                let (s, wins, key) = (s.clone(), wins.clone(), key.clone());
                std::thread::spawn(move || {
                    let a = s.txn(create_if_absent(&key, &i.to_string()), 0).unwrap();
                    if a.response.succeeded {
                        wins.fetch_add(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(wins.load(Ordering::SeqCst), 1, "round {round}");
        assert_eq!(s.current_revision(), 2);
    }
}

/// A naive model: every key's full history.
#[derive(Default)]
struct Model {
    hist: BTreeMap<Bytes, Vec<(i64, Option<Bytes>)>>,
}

impl Model {
    fn live_at(&self, rev: i64) -> Vec<(Bytes, Bytes)> {
        self.hist
            .iter()
            .filter_map(|(k, h)| {
                let v = h.iter().rev().find(|(r, _)| *r <= rev)?.1.clone()?;
                Some((k.clone(), v))
            })
            .collect()
    }
}

#[test]
fn counts_and_pages_at_past_revisions_match_a_naive_model() {
    let s = store();
    let mut m = Model::default();
    let mut x: u64 = 7;
    let mut rnd = |n: u64| {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (x >> 33) % n
    };
    let keys: Vec<String> = (0..60)
        .map(|i| match i % 3 {
            0 => format!("/registry/pods/ns/p{i:02}"),
            1 => format!("/registry/example.com/widgets/ns/w{i:02}"),
            _ => format!("/other/k{i:02}"),
        })
        .collect();
    for step in 0..600 {
        let k = &keys[rnd(keys.len() as u64) as usize];
        if rnd(4) == 0 {
            if del(&s, k, "") == 1 {
                m.hist.get_mut(&b(k)).unwrap().push((s.current_revision(), None));
            }
        } else {
            let v = format!("v{step}");
            let rev = put(&s, k, &v);
            m.hist.entry(b(k)).or_default().push((rev, Some(b(&v))));
        }
        if step % 97 == 0 {
            // Compaction must not change what reads at or above it see.
            let c = s.current_revision() - 40;
            if c > s.compact_revision() {
                s.compact(c).unwrap();
            }
        }
    }
    let current = s.current_revision();
    let ranges = [
        ("\0", "\0"),
        ("/registry/", "/registry0"),
        ("/registry/pods/", "/registry/pods0"),
        ("/o", "/p"),
    ];
    for rev in (s.compact_revision()..=current).step_by(7) {
        let want_all = m.live_at(rev);
        for (start, end) in ranges {
            let want: Vec<_> = want_all
                .iter()
                .filter(|(k, _)| {
                    k[..] >= *start.as_bytes() && (end == "\0" || k[..] < *end.as_bytes())
                })
                .cloned()
                .collect();
            let got = range(&s, start, end, rev, 0);
            assert_eq!(got.count as usize, want.len(), "count {start}..{end} at {rev}");
            let got_kv: Vec<_> =
                got.kvs.iter().map(|kv| (kv.key.clone(), kv.value.clone())).collect();
            assert_eq!(got_kv, want, "kvs {start}..{end} at {rev}");
            // Page through with limit 5 and continue keys, pinned at `rev`.
            let mut from = start.to_string();
            let mut paged = Vec::new();
            loop {
                let page = range(&s, &from, end, rev, 5);
                assert_eq!(page.count as usize, want.len() - paged.len(), "page count");
                assert_eq!(page.more, page.count > 5);
                paged.extend(page.kvs.iter().map(|kv| (kv.key.clone(), kv.value.clone())));
                if !page.more {
                    break;
                }
                let last = &page.kvs.last().unwrap().key;
                from = format!("{}\0", String::from_utf8_lossy(last));
            }
            assert_eq!(paged, want, "paged {start}..{end} at {rev}");
        }
    }
    let below = s.compact_revision() - 1;
    if below > 0 {
        let err = s.range(&RangeRequest { key: b("a"), revision: below, ..Default::default() });
        assert_eq!(err.unwrap_err(), Error::Compacted);
    }
}

#[test]
fn readers_never_see_half_of_a_cross_partition_txn() {
    let s = Arc::new(store());
    let stop = Arc::new(AtomicBool::new(false));
    let pair = |v: &str| TxnRequest {
        compare: vec![],
        success: vec![
            RequestOp::Put(PutRequest {
                key: b("/registry/aa/ns/x"),
                value: b(v),
                ..Default::default()
            }),
            RequestOp::Put(PutRequest {
                key: b("/registry/bb/ns/x"),
                value: b(v),
                ..Default::default()
            }),
        ],
        failure: vec![],
    };
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let s = s.clone();
            std::thread::spawn(move || {
                for i in 0..3000 {
                    s.txn(pair(&format!("{w}-{i}")), 0).unwrap();
                    // Unrelated writes in other partitions interleave revisions.
                    put(&s, &format!("/registry/cc{w}/ns/y"), "z");
                }
            })
        })
        .collect();
    let reader = {
        let (s, stop) = (s.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut checked = 0;
            while !stop.load(Ordering::SeqCst) {
                let r = range(&s, "/registry/aa/", "/registry/bb0", 0, 0);
                if r.kvs.len() == 2 {
                    assert_eq!(r.kvs[0].value, r.kvs[1].value, "torn read at {}", r.revision);
                    assert_eq!(r.kvs[0].mod_revision, r.kvs[1].mod_revision);
                    checked += 1;
                }
            }
            checked
        })
    };
    writers.into_iter().for_each(|t| t.join().unwrap());
    stop.store(true, Ordering::SeqCst);
    assert!(reader.join().unwrap() > 0);
    assert_eq!(s.current_revision(), 1 + 2 * 3000 * 2);
}

#[test]
fn compaction_keeps_live_keys_and_frees_superseded_versions() {
    let s = store();
    put(&s, "/registry/pods/ns/a", &"x".repeat(1000));
    for i in 0..50 {
        put(&s, "/registry/pods/ns/b", &format!("{i}{}", "y".repeat(1000)));
    }
    put(&s, "/registry/pods/ns/c", "gone");
    del(&s, "/registry/pods/ns/c", "");
    let data = |s: &Store| s.size_bytes() - crate::revision::FIXED_BYTES;
    let before = data(&s);
    let rev = s.current_revision();
    s.compact(rev).unwrap();
    assert!(data(&s) < before / 10, "{} -> {}", before, data(&s));
    let r = range(&s, "/registry/pods/", "/registry/pods0", rev, 0);
    assert_eq!(r.count, 2, "a survives although it was last written long before the compaction");
    assert_eq!(r.kvs[1].version, 50);
    assert_eq!(s.compact(rev).unwrap_err(), Error::Compacted);
    assert_eq!(s.compact(rev + 1).unwrap_err(), Error::FutureRev);
}

fn wal_options(dir: &std::path::Path, snapshot_bytes: u64) -> crate::wal::Options {
    crate::wal::Options {
        dir: dir.to_path_buf(),
        mode: crate::wal::Mode::Buffered,
        exclude: vec![b("/registry/events/")],
        flush_interval: std::time::Duration::from_millis(5),
        segment_bytes: 4096,
        snapshot_bytes,
        repair: false,
        failpoint: None,
    }
}

/// Everything a client can observe of a store: the revision, every key's versions at every
/// revision since the compaction (via ranges), the hash, and the event log.
type Observed = (i64, Vec<RangeResponse>, u32, Vec<(i64, Vec<(EventKind, KeyValue)>)>);

fn observe(s: &Store) -> Observed {
    let cur = s.current_revision();
    let from = s.compact_revision().max(1);
    let ranges = (from..=cur).map(|r| range(s, "\0", "", r, 0)).collect();
    let events = s
        .event_log()
        .read(from.max(2), cur, usize::MAX, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|(r, evs)| (r, evs.iter().map(|e| (e.kind, e.kv.clone())).collect()))
        .collect();
    (cur, ranges, s.hash_kv(0).unwrap().0, events)
}

#[test]
fn a_reopened_store_is_exactly_the_store_that_was_closed() {
    let dir = tempfile::tempdir().unwrap();
    let (s, _) = Store::open(StoreConfig::default(), wal_options(dir.path(), u64::MAX)).unwrap();
    for i in 0..50 {
        put(&s, &format!("/registry/pods/p{}", i % 7), &format!("v{i}"));
        put(&s, &format!("/registry/configmaps/c{}", i % 5), "x");
        if i % 9 == 0 {
            del(&s, "/registry/pods/", "/registry/pods0");
        }
        let t = TxnRequest {
            compare: vec![],
            success: vec![
                RequestOp::Put(PutRequest {
                    key: b("/registry/secrets/s"),
                    value: b(&format!("{i}")),
                    ..Default::default()
                }),
                RequestOp::Put(PutRequest { key: b("other"), value: b("o"), ..Default::default() }),
            ],
            failure: vec![],
        };
        let a = s.txn(t, 0).unwrap();
        s.wait_visible_blocking(a.visible_at);
    }
    s.compact(40).unwrap();
    // The newest write is to an excluded prefix: its revision must survive all the same.
    let last = put(&s, "/registry/events/e", "gone after restart");
    let before = observe(&s);
    drop(s);

    let (s, rec) = Store::open(StoreConfig::default(), wal_options(dir.path(), u64::MAX)).unwrap();
    assert_eq!(rec.rev, last);
    assert_eq!(s.compact_revision(), 40);
    assert!(range(&s, "/registry/events/", "/registry/events0", 0, 0).kvs.is_empty());
    let after = observe(&s);
    assert_eq!(after.0, before.0);
    // The excluded key is the only difference.
    let strip = |o: &Observed| {
        o.1.iter()
            .map(|r| {
                r.kvs
                    .iter()
                    .filter(|kv| !kv.key.starts_with(b"/registry/events/"))
                    .cloned()
                    .collect::<Vec<_>>()
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(strip(&after), strip(&before), "every version at every revision since compaction");
    let strip_events = |o: &Observed| {
        o.3.iter()
            .map(|(r, evs)| {
                (
                    *r,
                    evs.iter()
                        .filter(|e| !e.1.key.starts_with(b"/registry/events/"))
                        .cloned()
                        .collect::<Vec<_>>(),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(strip_events(&after), strip_events(&before), "the event log is rebuilt");

    // A snapshot, more writes, and a third opening: the snapshot plus the log's tail.
    s.snapshot(|| vec![(7, 60)]).unwrap();
    put(&s, "/registry/pods/after-snapshot", "1");
    let before = observe(&s);
    drop(s);
    let (s, rec) = Store::open(StoreConfig::default(), wal_options(dir.path(), u64::MAX)).unwrap();
    assert_eq!(rec.leases, vec![(7, 60)]);
    let after = observe(&s);
    assert_eq!(strip(&after), strip(&before));
    assert_eq!(after.0, before.0);
    // Revisions go on from there.
    assert_eq!(put(&s, "k", "v"), before.0 + 1);
}
