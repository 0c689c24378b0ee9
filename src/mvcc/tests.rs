//! Store tests that attack the invariants directly (the gRPC surface is covered by tests/it).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use bytes::Bytes;

use super::key_index::KeyRecord;
use super::*;
use crate::error::Error;
use crate::keyspace::KeyRange;

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
    let data = |s: &Store| s.size_bytes() - super::store::EMPTY_BYTES;
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
        dir: crate::data_dir::DataDir::new(dir),
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

/// Drives the same random workload (puts, deletes, range deletes, cross-partition txns,
/// compactions) into `stores`, calling `check` after every step.
fn random_workload(stores: &[&Store], steps: usize, mut check: impl FnMut(usize)) {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move |n: u64| {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (x >> 33) % n
    };
    let prefixes = ["/registry/pods/", "/registry/configmaps/", "/registry/secrets/", "other/"];
    for step in 0..steps {
        let key = |p: u64, k: u64| format!("{}k{k}", prefixes[p as usize]);
        let (p, k) = (next(4), next(12));
        match next(10) {
            0..=4 => {
                let v = "v".repeat(next(40) as usize) + &step.to_string();
                stores.iter().for_each(|s| _ = put(s, &key(p, k), &v));
            }
            5 => stores.iter().for_each(|s| _ = del(s, &key(p, k), "")),
            6 => {
                let (a, b) = (key(p, 0), key(p, 6));
                stores.iter().for_each(|s| _ = del(s, &a, &b));
            }
            7 | 8 => {
                let (k1, k2) = (key(p, k), key((p + 1) % 4, k));
                let t = TxnRequest {
                    compare: vec![],
                    success: vec![
                        RequestOp::Put(PutRequest {
                            key: b(&k1),
                            value: b("t1"),
                            ..Default::default()
                        }),
                        RequestOp::DeleteRange(DeleteRangeRequest {
                            key: b(&k2),
                            range_end: Bytes::new(),
                            prev_kv: false,
                        }),
                    ],
                    failure: vec![],
                };
                for s in stores {
                    let a = s.txn(t.clone(), 0).unwrap();
                    s.wait_visible_blocking(a.visible_at);
                }
            }
            _ => {
                let cur = stores[0].current_revision();
                let from = stores[0].compact_revision() + 1;
                if cur > from && next(4) == 0 {
                    let at = from + next((cur - from) as u64) as i64;
                    stores.iter().for_each(|s| _ = s.compact(at).unwrap());
                }
            }
        }
        check(step);
    }
}

/// Every committed revision's events as published (what watchers got live).
#[derive(Debug, Default)]
struct Recorder(std::sync::Mutex<Vec<(i64, RevisionEvents)>>);

impl CommitObserver for Recorder {
    fn on_commit(&self, batch: &[(i64, RevisionEvents)]) {
        self.0.lock().unwrap().extend(batch.iter().cloned());
    }
}

impl Recorder {
    /// What a log that kept every published revision would answer to `read`.
    fn read(&self, log: &EventLog, from: i64, to: i64, revs: usize, bytes: usize) -> ReadResult {
        if from < log.compacted() {
            return Err(log.compacted());
        }
        let mut out = Vec::new();
        let mut n = 0;
        for (rev, evs) in self.0.lock().unwrap().iter() {
            if *rev < from.max(log.first()) {
                continue;
            }
            if *rev > to || out.len() >= revs || (n >= bytes && !out.is_empty()) {
                break;
            }
            n += evs.iter().map(|e| e.kv.key.len() + e.kv.value.len()).sum::<usize>();
            out.push((*rev, evs.clone()));
        }
        Ok(out)
    }
}

type ReadResult = Result<Vec<(i64, RevisionEvents)>, i64>;

#[test]
fn events_read_back_from_the_partitions_are_the_events_that_were_published() {
    // None kept as published nor shared: every read is rebuilt from the partitions; then a
    // few: reads start in the rebuilt part or in the kept one, or in a block rebuilt for an
    // earlier read.
    for (recent, rebuilt) in [(0, 0), (16, 0), (0, 4), (16, 4)] {
        events_read_back_are_the_events_published(recent, rebuilt);
    }
}

fn events_read_back_are_the_events_published(recent: usize, rebuilt: usize) {
    let s = store();
    s.event_log().keep(recent, rebuilt);
    let published = Arc::new(Recorder::default());
    s.set_observer(published.clone());
    let (mut events, mut with_prev) = (0, 0);
    random_workload(&[&s], 1500, |step| {
        if step % 50 != 0 {
            return;
        }
        let (cur, log) = (s.current_revision(), s.event_log());
        let low = s.compact_revision().saturating_sub(2).max(1);
        for from in low..=cur + 1 {
            for (to, revs, bytes) in [
                (cur, usize::MAX, usize::MAX),
                (cur - 3, 3, usize::MAX),
                (cur, 1000, 1),
                (cur, 7, 90),
            ] {
                let want = published.read(log, from, to, revs, bytes);
                let got = log.read(from, to, revs, bytes);
                assert_eq!(got, want, "step {step}: read({from}, {to}, {revs}, {bytes})");
                for (_, evs) in want.iter().flatten() {
                    events += evs.len();
                    with_prev += evs.iter().filter(|e| e.prev_kv.is_some()).count();
                }
            }
        }
    });
    assert!(s.compact_revision() > 500, "compacted at {}", s.compact_revision());
    assert!(events > 100_000 && with_prev > 50_000, "{events} events, {with_prev} with prev_kv");
}

#[test]
fn watchers_far_behind_share_the_revisions_rebuilt() {
    let s = store();
    s.event_log().keep(0, 4);
    // Revisions 2 to 601.
    for i in 0..600 {
        put(&s, &format!("k{}", i % 10), "v");
    }
    let log = s.event_log();
    let revs = |r: &[(i64, RevisionEvents)]| r.iter().map(|(r, _)| *r).collect::<Vec<_>>();
    let shared = |a: &[(i64, RevisionEvents)], b: &[(i64, RevisionEvents)]| {
        a.iter().zip(b).all(|(a, b)| a.0 == b.0 && Arc::ptr_eq(&a.1, &b.1))
    };
    let first = log.read(2, 601, 50, usize::MAX).unwrap();
    assert_eq!(revs(&first), (2..=51).collect::<Vec<_>>());
    assert!(first.iter().all(|(r, evs)| evs.len() == 1 && evs[0].kv.mod_revision == *r));
    // Readers of the same revisions get the same events, not copies rebuilt for them, across
    // the blocks the revisions were rebuilt in.
    let again = log.read(2, 601, 50, usize::MAX).unwrap();
    assert!(shared(&first, &again), "rebuilt again");
    let inside = log.read(40, 601, 1000, usize::MAX).unwrap();
    assert_eq!(revs(&inside), (40..=601).collect::<Vec<_>>());
    assert!(shared(&first[38..], &inside), "rebuilt again");
    let across = log.read(250, 260, 1000, usize::MAX).unwrap();
    assert_eq!(revs(&across), (250..=260).collect::<Vec<_>>());
    assert!(shared(&inside[210..], &across), "rebuilt again");
    let later = log.read(300, 601, 10, usize::MAX).unwrap();
    assert_eq!(revs(&later), (300..=309).collect::<Vec<_>>());
    assert!(shared(&inside[260..], &later), "rebuilt again");
}

#[test]
fn event_reads_race_writes_and_compactions() {
    let s = Arc::new(store());
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (s, stop) = (s.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut reads = 0;
                while !stop.load(Ordering::SeqCst) {
                    let log = s.event_log();
                    let from = log.compacted().max(1);
                    if let Ok(revs) = log.read(from, i64::MAX, 50, 4096) {
                        for w in revs.windows(2) {
                            assert_eq!(w[1].0, w[0].0 + 1, "contiguous revisions");
                        }
                        for (rev, evs) in &revs {
                            assert!(evs.iter().all(|e| e.kv.mod_revision == *rev));
                        }
                        reads += 1;
                    }
                }
                reads
            })
        })
        .collect();
    random_workload(&[&s], 3000, |step| {
        if step % 100 == 0 {
            // Lets the readers in, on a machine with fewer cores than threads.
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    });
    stop.store(true, Ordering::SeqCst);
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
}

/// Not a test: loads `MEM_KEYS` (default 100000) Lease-sized keys `MEM_ROUNDS` (default 1)
/// times each through the store's write path and prints where the memory went, for heap
/// profilers (`heaptrack` on the test binary: the tests use the system allocator). With
/// `MEM_PIN=1` every key and value is a slice of its own 8 KiB buffer, as tonic decodes a
/// unary request. Run:
/// `cargo test --release --lib memory_profile_load -- --ignored --nocapture`.
#[test]
#[ignore]
fn memory_profile_load() {
    let env = |k: &str, d: usize| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let (keys, rounds, pin) = (env("MEM_KEYS", 100_000), env("MEM_ROUNDS", 1), env("MEM_PIN", 0));
    let rss = || {
        let s = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = s.lines().find(|l| l.starts_with("VmRSS:")).unwrap().to_string();
        line.split_whitespace().nth(1).unwrap().parse::<usize>().unwrap() * 1024
    };
    let s = store();
    let value = vec![b'v'; 362];
    let before = rss();
    let mut raw = 0;
    for round in 0..rounds {
        for i in 0..keys {
            let key = format!("/registry/leases/kube-node-lease/node-{i:07}");
            let (key, value) = if pin == 1 {
                let mut buf = bytes::BytesMut::with_capacity(8192);
                buf.extend_from_slice(key.as_bytes());
                buf.extend_from_slice(&value);
                let key = buf.split_to(key.len()).freeze();
                (key, buf.split_to(value.len()).freeze())
            } else {
                (Bytes::from(key), Bytes::copy_from_slice(&value))
            };
            raw += key.len() + value.len();
            let a = s.put(PutRequest { key, value, ..Default::default() }, 0).unwrap();
            if (round * keys + i) % 1024 == 0 {
                s.wait_visible_blocking(a.visible_at);
            }
        }
    }
    s.wait_visible_blocking(s.current_revision());
    let versions = keys * rounds;
    let grown = rss() - before;
    println!(
        "{keys} keys x {rounds}: raw {raw} B, RSS +{grown} B: {} B per version ({} raw)",
        grown / versions,
        raw / versions
    );
    println!(
        "size_of: KeyRecord {}, KeyHistory {}, index Entry {}, Event {}, KeyValue {}",
        std::mem::size_of::<key_index::KeyRecord>(),
        std::mem::size_of::<key_index::KeyHistory>(),
        std::mem::size_of::<index::Entry>(),
        std::mem::size_of::<Event>(),
        std::mem::size_of::<KeyValue>(),
    );
}

#[test]
fn a_restored_backup_is_the_store_at_the_backups_revision() {
    let s = store();
    for i in 0..40 {
        put(&s, &format!("/registry/pods/p{}", i % 7), &format!("v{i}"));
        put(&s, &format!("/registry/configmaps/c{}", i % 5), "x");
        if i % 9 == 0 {
            del(&s, "/registry/pods/", "/registry/pods0");
        }
    }
    s.compact(30).unwrap();
    put(&s, "other", "o");
    let before = observe(&s);
    let auth = Bytes::from_static(b"the auth state, opaque to the store");
    let backup = s.backup(|| vec![(5, 60), (6, 3600)]).with_auth(auth.clone());
    // Writes after the backup's revision is fixed, also to keys not read yet and to a new
    // partition, must not reach it.
    for i in 0..20 {
        put(&s, &format!("/registry/pods/p{i}"), "later");
        put(&s, &format!("/registry/zz/z{i}"), "later");
    }
    del(&s, "\0", "");
    let size = backup.size();
    let mut bytes = Vec::new();
    assert!(backup.write(&mut |piece| {
        bytes.extend(piece);
        true
    }));
    drop(backup);
    assert_eq!(bytes.len() as u64, size + 32);

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("backup.db");
    std::fs::write(&file, &bytes).unwrap();
    let data = dir.path().join("data");
    let carried = std::sync::Mutex::new(None);
    let summary = crate::wal::backup::restore(&file, &data, false, &|_, state| {
        *carried.lock().unwrap() = Some(state.clone());
        Ok(())
    })
    .unwrap();
    assert_eq!(summary.rev, before.0);
    assert_eq!(carried.into_inner().unwrap(), Some(auth));
    let (r, rec) = Store::open(StoreConfig::default(), wal_options(&data, u64::MAX)).unwrap();
    assert_eq!(rec.rev, before.0);
    assert_eq!(rec.leases, vec![(5, 60), (6, 3600)]);
    assert_eq!(r.compact_revision(), 30);
    assert_eq!(observe(&r), before);
    // Writing goes on after the backup's revision.
    assert_eq!(put(&r, "next", "n"), before.0 + 1);
}

/// Revisions applied while publishing is held (a cluster member's batch of Raft entries)
/// reach readers and the observer only at the release, all together and in order; a release
/// in the middle (a request that reads the published revision) keeps holding.
#[test]
fn held_revisions_are_published_together_at_the_release() {
    let s = store();
    let seen = Arc::new(Recorder::default());
    s.set_observer(seen.clone());
    let put = |k: &str| {
        s.put_logged(PutRequest { key: b(k), value: b("v"), ..Default::default() })
            .unwrap()
            .response
            .revision
    };
    assert_eq!(put("a"), 2);
    assert_eq!(s.current_revision(), 2, "published at once when not held");
    s.hold_publishing();
    assert_eq!((put("b"), put("c")), (3, 4));
    assert_eq!(s.current_revision(), 2, "held: readers do not see them yet");
    assert_eq!(s.range(&RangeRequest { key: b("b"), ..Default::default() }).unwrap().count, 0);
    assert_eq!(seen.0.lock().unwrap().len(), 1, "nor do watchers");
    s.publish_held();
    assert_eq!(s.current_revision(), 4);
    assert_eq!(put("d"), 5);
    assert_eq!(s.current_revision(), 4, "still held after a release in the middle");
    s.stop_holding();
    assert_eq!(s.current_revision(), 5);
    assert_eq!(put("e"), 6);
    assert_eq!(s.current_revision(), 6, "published at once again");
    let revs: Vec<i64> = seen.0.lock().unwrap().iter().map(|(r, _)| *r).collect();
    assert_eq!(revs, [2, 3, 4, 5, 6], "every revision once, in order");
}

/// Whether `key`'s history reads its key from its newest record's buffer, so that no buffer of
/// a version compaction dropped stays alive for the key's sake; and whether each record's key
/// and value sit side by side in one buffer.
fn key_views_the_newest_version(s: &Store, key: &str) -> bool {
    let p = s.partition_for_key(key.as_bytes());
    let st = p.state.read();
    let h = st.history(key.as_bytes()).expect("the key has a history");
    let newest = h.last().expect("a history has records");
    let side_by_side = |r: &KeyRecord| {
        let (k, v) = (r.data.key(), r.data.value());
        k.as_ptr().wrapping_add(k.len()) == v.as_ptr()
    };
    h.key() == key.as_bytes()
        && std::ptr::eq(h.key(), newest.data.key())
        && h.records().iter().all(side_by_side)
}

#[test]
fn a_key_never_pins_a_superseded_versions_allocation() {
    let dir = tempfile::tempdir().unwrap();
    let (s, _) = Store::open(StoreConfig::default(), wal_options(dir.path(), u64::MAX)).unwrap();
    let k = "/registry/leases/kube-node-lease/n1";
    let ignored = |s: &Store, lease: i64| {
        let req = PutRequest { key: b(k), ignore_value: true, lease, ..Default::default() };
        let a = s.put(req, 0).unwrap();
        s.wait_visible_blocking(a.visible_at);
    };
    let steps: [&dyn Fn(&Store); 7] = [
        &|s| {
            put(s, k, "first");
        },
        &|s| {
            put(s, k, "second");
        },
        &|s| ignored(s, 0),
        &|s| {
            put(s, k, "");
        },
        &|s| {
            put(s, k, "after the empty one");
        },
        &|s| {
            del(s, k, "");
        },
        &|s| {
            put(s, k, "after the delete");
        },
    ];
    for (i, step) in steps.iter().enumerate() {
        step(&s);
        assert!(key_views_the_newest_version(&s, k), "after step {i}");
        let head = s.current_revision();
        let p = s.partition_for_key(k.as_bytes());
        let latest = p.state.read().get(k.as_bytes(), i64::MAX);
        // Compacting at the head leaves the newest version alone, viewed by the key.
        if i == 3 || i == 6 {
            s.compact(head).unwrap();
            let st = p.state.read();
            assert_eq!(st.history(k.as_bytes()).unwrap().records().len(), 1);
            assert_eq!(st.get(k.as_bytes(), i64::MAX), latest);
        }
    }
    assert!(key_views_the_newest_version(&s, k));
    // Versions restored from the log follow the same rule.
    put(&s, k, "logged, not compacted");
    drop(s);
    let (s, _) = Store::open(StoreConfig::default(), wal_options(dir.path(), u64::MAX)).unwrap();
    assert!(key_views_the_newest_version(&s, k));
    let got = range(&s, k, "", 0, 0);
    assert_eq!(got.kvs[0].value, b("logged, not compacted"));
}

/// A read at the current revision is never refused as compacted, even when a compaction to a
/// revision just committed finishes while it reads (a history check caught a plain get
/// answered "required revision has been compacted").
#[test]
fn reads_at_the_current_revision_are_never_compacted() {
    let s = Arc::new(store());
    put(&s, "/registry/pods/ns/a", "v0");
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (s, stop) = (s.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) && i < 200_000 {
                let rev = put(&s, "/registry/pods/ns/a", &format!("v{i}"));
                // Compact to the revision just committed: the tightest a client can ask for.
                let _ = s.compact(rev);
                i += 1;
            }
        })
    };
    let started = std::time::Instant::now();
    let mut reads = 0u64;
    while started.elapsed() < std::time::Duration::from_secs(2) {
        let r = s.range(&RangeRequest { key: b("/registry/pods/ns/a"), ..Default::default() });
        assert!(r.is_ok(), "a read at the current revision failed: {r:?} (after {reads} reads)");
        reads += 1;
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
}

/// A compaction set and not walked yet (a cluster member's apply leaves the walks to a
/// thread) already serves the compacted state: reads below it are refused, reads at and above
/// it and HashKV answer what they answer once it is walked, and a later compaction can be set
/// meanwhile. The walks then free what a compaction in one go frees.
#[test]
fn a_compaction_set_serves_the_compacted_state_before_its_walks() {
    let (walked_later, at_once) = (store(), store());
    for s in [&walked_later, &at_once] {
        for i in 0..40 {
            put(s, &format!("/registry/pods/ns/p{}", i % 7), &format!("{i}{}", "v".repeat(300)));
        }
        del(s, "/registry/pods/ns/p3", "");
    }
    let rev = at_once.current_revision() - 5;
    let later = at_once.current_revision();
    at_once.compact(rev).unwrap();
    let hash_at_once = at_once.hash_kv(0).unwrap();
    let listed = |s: &Store, at: i64| range(s, "/registry/pods/", "/registry/pods0", at, 0).kvs;

    walked_later.set_compaction(rev).unwrap();
    let refused = walked_later.range(&RangeRequest {
        key: b("/registry/pods/"),
        revision: rev - 1,
        ..Default::default()
    });
    assert_eq!(refused.unwrap_err(), Error::Compacted, "refused below it at once");
    assert_eq!(walked_later.set_compaction(rev).unwrap_err(), Error::Compacted);
    assert_eq!(listed(&walked_later, rev), listed(&at_once, rev));
    assert_eq!(listed(&walked_later, 0), listed(&at_once, 0));
    assert_eq!(walked_later.hash_kv(0).unwrap(), hash_at_once, "HashKV before the walks");
    let freed = |s: &Store| s.size_bytes();
    assert!(freed(&walked_later) > freed(&at_once), "nothing freed before the walks");

    walked_later.walk_compactions();
    assert_eq!(walked_later.hash_kv(0).unwrap(), hash_at_once, "HashKV after the walks");
    assert_eq!(freed(&walked_later), freed(&at_once), "the walks freed what compact frees");
    // Two compactions set before one walk: walked in order, both freed.
    walked_later.set_compaction(later - 2).unwrap();
    walked_later.set_compaction(later).unwrap();
    at_once.compact(later - 2).unwrap();
    at_once.compact(later).unwrap();
    walked_later.walk_compactions();
    assert_eq!(walked_later.hash_kv(0).unwrap(), at_once.hash_kv(0).unwrap());
    assert_eq!(freed(&walked_later), freed(&at_once));
    assert_eq!(listed(&walked_later, later), listed(&at_once, later));
}

/// A prefix compacted on its own (a tenant's, `Store::compact_prefix`): its reads and watches
/// below the revision are refused, its superseded versions freed, every other prefix's history
/// kept whole, events from the revision on read back complete; and all of it the same after
/// reopening from the log, from a snapshot, and from a backup.
#[test]
fn a_prefix_compacted_alone_keeps_every_other_history_across_reopening() {
    let config = || StoreConfig {
        registry_prefix: vec!["/registry".into(), "/tenant-a".into(), "/tenant-b".into()],
        ..Default::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let (s, _) = Store::open(config(), wal_options(dir.path(), u64::MAX)).unwrap();
    for i in 0..30 {
        put(&s, &format!("/tenant-a/pods/p{}", i % 3), &"a".repeat(1000));
        put(&s, &format!("/tenant-b/pods/p{}", i % 3), &format!("b{i}"));
        put(&s, &format!("/registry/pods/p{}", i % 3), &format!("r{i}"));
    }
    let all_events =
        |s: &Store| s.event_log().read(2, s.current_revision(), usize::MAX, usize::MAX);
    let before = all_events(&s).unwrap();
    let a_bytes = |s: &Store| s.bytes_under(b"/tenant-a/", |_| true);
    let full = a_bytes(&s);
    let at = 86; // a write to /tenant-a/ (every third revision from 2), near the end
    let a = b("/tenant-a/");
    s.compact_prefix(&a, 1).unwrap();
    assert_eq!(s.compact_prefix(&a, 1).unwrap_err(), Error::Compacted);
    s.compact_prefix(&a, at).unwrap();
    assert_eq!(s.compact_prefix(&a, at).unwrap_err(), Error::Compacted);
    assert_eq!(s.compact_prefix(&b("/tenant-b/"), 1000).unwrap_err(), Error::FutureRev);
    assert!(a_bytes(&s) < full / 3, "{} of {full} bytes left", a_bytes(&s));
    // A partition created under the prefix afterwards is compacted there too.
    let later = put(&s, "/tenant-a/secrets/s", "x");

    let check = |s: &Store| {
        let read = |k: &str, end: &str, rev: i64| {
            s.range(&RangeRequest {
                key: b(k),
                range_end: b(end),
                revision: rev,
                ..Default::default()
            })
        };
        assert_eq!(read("/tenant-a/", "/tenant-a0", at - 1).unwrap_err(), Error::Compacted);
        assert_eq!(
            read("/tenant-a/secrets/", "/tenant-a/secrets0", at - 1).unwrap_err(),
            Error::Compacted
        );
        assert_eq!(read("\0", "\0", at - 1).unwrap_err(), Error::Compacted);
        assert_eq!(read("/tenant-a/", "/tenant-a0", at).unwrap().count, 3);
        assert_eq!(read("/tenant-a/", "/tenant-a0", later).unwrap().count, 4);
        assert_eq!(read("/tenant-b/", "/tenant-b0", 3).unwrap().count, 1);
        assert_eq!(read("/registry/", "/registry0", 4).unwrap().count, 1);
        let ka = KeyRange::from_request(b"/tenant-a/", b"/tenant-a0");
        let kb = KeyRange::from_request(b"/tenant-b/", b"/tenant-b0");
        assert_eq!(s.event_log().floor_for(&ka), at);
        assert_eq!(s.event_log().floor_for(&KeyRange::from_request(b"\0", b"\0")), at);
        assert_eq!(s.event_log().floor_for(&kb), 0);
        // Rebuilt from the partitions: every event but A's below the floor.
        s.event_log().keep(0, 0);
        let last = before.last().unwrap().0;
        let got = s.event_log().read(2, last, usize::MAX, usize::MAX).unwrap();
        let want: Vec<_> = before
            .iter()
            .map(|(r, evs)| {
                let kept: Vec<_> = evs
                    .iter()
                    .filter(|e| *r >= at || !e.kv.key.starts_with(b"/tenant-a/"))
                    .cloned()
                    .collect();
                (*r, kept)
            })
            .collect();
        let got: Vec<_> = got.into_iter().map(|(r, evs)| (r, evs.to_vec())).collect();
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert!(g == w, "events of revision {}: {} against {}", w.0, g.1.len(), w.1.len());
        }
    };
    check(&s);
    let hash = s.hash_kv(0).unwrap();
    drop(s);
    let (s, rec) = Store::open(config(), wal_options(dir.path(), u64::MAX)).unwrap();
    assert_eq!(rec.floors, vec![(a.clone(), at)]);
    check(&s);
    assert_eq!(s.hash_kv(0).unwrap(), hash);
    s.snapshot(Vec::new).unwrap();
    drop(s);
    let (s, rec) = Store::open(config(), wal_options(dir.path(), u64::MAX)).unwrap();
    assert_eq!(rec.floors, vec![(a.clone(), at)]);
    check(&s);
    assert_eq!(s.hash_kv(0).unwrap(), hash);

    let backup = s.backup(Vec::new);
    let mut bytes = Vec::new();
    assert!(backup.write(&mut |piece| {
        bytes.extend(piece);
        true
    }));
    drop(backup);
    let file = dir.path().join("backup.db");
    std::fs::write(&file, &bytes).unwrap();
    let data = dir.path().join("restored");
    let summary = crate::wal::backup::restore(&file, &data, false, &|_, _| Ok(())).unwrap();
    assert_eq!(summary.floors, vec![(a.clone(), at)]);
    let (r, _) = Store::open(config(), wal_options(&data, u64::MAX)).unwrap();
    check(&r);
    assert_eq!(r.hash_kv(0).unwrap(), hash);
    // The store's own compaction above the floor leaves nothing of it.
    r.compact(at + 5).unwrap();
    drop(r);
    let (r, rec) = Store::open(config(), wal_options(&data, u64::MAX)).unwrap();
    assert!(rec.floors.is_empty(), "{:?}", rec.floors);
    assert_eq!(r.compact_revision(), at + 5);
}
