//! Watches under load: concurrent writers and watchers checked against the MVCC history, and
//! clients that stop reading.
//!
//! The history is rebuilt from the writers' acknowledged responses: every write that changed
//! something has its own revision, so sorting them by revision and replaying them through a
//! small model gives every event (with its create revision, version and previous value) that any
//! watch must deliver.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pb::watch_create_request::FilterType;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tonic::transport::Channel;

use crate::api::watch::*;
use crate::support::*;

// ---------------------------------------------------------------------------------------------
// The history model

/// One operation of an acknowledged write; `changed` is false for a delete that found nothing.
#[derive(Clone, Debug)]
struct Op {
    key: String,
    value: Option<String>,
    changed: bool,
}

/// A write that produced a revision.
#[derive(Clone, Debug)]
struct Applied {
    rev: i64,
    ops: Vec<Op>,
}

/// Every event of the history, in (revision, operation) order.
fn history(mut applied: Vec<Applied>, first_rev: i64) -> Vec<Ev> {
    applied.sort_by_key(|a| a.rev);
    let revs: Vec<i64> = applied.iter().map(|a| a.rev).collect();
    let want: Vec<i64> = (first_rev..first_rev + revs.len() as i64).collect();
    assert_eq!(revs, want, "the acknowledged writes do not cover the revisions one to one");
    let mut state: BTreeMap<String, Kv> = BTreeMap::new();
    let mut events = Vec::new();
    for a in applied {
        for op in a.ops.iter().filter(|o| o.changed) {
            let prev = state.get(&op.key).cloned();
            match &op.value {
                Some(v) => {
                    let kv = Kv {
                        key: op.key.as_bytes().to_vec(),
                        value: v.as_bytes().to_vec(),
                        create_revision: prev.as_ref().map_or(a.rev, |p| p.create_revision),
                        mod_revision: a.rev,
                        version: prev.as_ref().map_or(1, |p| p.version + 1),
                        lease: 0,
                    };
                    state.insert(op.key.clone(), kv.clone());
                    events.push(Ev { put: true, kv, prev });
                }
                None => {
                    assert!(prev.is_some(), "rev {}: {} deleted but absent", a.rev, op.key);
                    state.remove(&op.key);
                    events.push(del_ev(&op.key, a.rev, prev));
                }
            }
        }
    }
    events
}

/// Does a create request's range hold `key`?
fn in_range(c: &pb::WatchCreateRequest, key: &[u8]) -> bool {
    let start = &c.key[..];
    match &c.range_end[..] {
        [] => key == start,
        [0] => key >= start,
        end => key >= start && key < end,
    }
}

/// The events a watch created with `c` sees of `all` (any start revision).
fn visible(c: &pb::WatchCreateRequest, all: &[Ev]) -> Vec<Ev> {
    let no_put = c.filters.contains(&(FilterType::Noput as i32));
    let no_del = c.filters.contains(&(FilterType::Nodelete as i32));
    all.iter()
        .filter(|e| in_range(c, &e.kv.key) && if e.put { !no_put } else { !no_del })
        .map(|e| Ev { prev: if c.prev_kv { e.prev.clone() } else { None }, ..e.clone() })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Writers

const PREFIXES: [&str; 3] =
    ["/registry/pods/default/", "/registry/leases/kube-node-lease/", "/registry/configmaps/ns/"];

fn random_key(rng: &mut SmallRng) -> String {
    let p = PREFIXES[rng.random_range(0..PREFIXES.len())];
    format!("{p}k{}", rng.random_range(0..10))
}

/// One random write; returns what it did when it produced a revision.
async fn random_write(raw: &mut Raw, rng: &mut SmallRng, tag: &str) -> Option<Applied> {
    use pb::response_op::Response as Rs;
    let roll = rng.random_range(0..100);
    if roll < 40 {
        let key = random_key(rng);
        let rev = put(raw, &key, tag).await;
        return Some(Applied {
            rev,
            ops: vec![Op { key, value: Some(tag.into()), changed: true }],
        });
    }
    if roll < 55 {
        let key = random_key(rng);
        let r = raw
            .kv
            .delete_range(pb::DeleteRangeRequest { key: b(&key), ..Default::default() })
            .await
            .unwrap_or_else(|e| panic!("delete {key}: {e:?}"))
            .into_inner();
        let rev = r.header.expect("header").revision;
        return (r.deleted > 0)
            .then(|| Applied { rev, ops: vec![Op { key, value: None, changed: true }] });
    }
    // A txn over distinct keys, mixing puts and deletes across resources.
    let n = rng.random_range(2..=4);
    let mut keys: Vec<String> = Vec::new();
    while keys.len() < n {
        let k = random_key(rng);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let mut ops: Vec<Op> = keys
        .into_iter()
        .map(|key| {
            let value = if rng.random_range(0..3) == 0 { None } else { Some(tag.to_string()) };
            Op { key, value, changed: true }
        })
        .collect();
    let req: Vec<pb::RequestOp> = ops
        .iter()
        .map(|o| match &o.value {
            Some(v) => put_op(&o.key, v),
            None => del_op(&o.key),
        })
        .collect();
    let r = raw
        .kv
        .txn(pb::TxnRequest { success: req, ..Default::default() })
        .await
        .unwrap_or_else(|e| panic!("txn {ops:?}: {e:?}"))
        .into_inner();
    assert!(r.succeeded);
    for (op, resp) in ops.iter_mut().zip(&r.responses) {
        if let Some(Rs::ResponseDeleteRange(d)) = &resp.response {
            op.changed = d.deleted > 0;
        }
    }
    let rev = r.header.expect("header").revision;
    ops.iter().any(|o| o.changed).then_some(Applied { rev, ops })
}

// ---------------------------------------------------------------------------------------------
// Reading one stream and checking it

/// A watch as the test created it, and what it received.
#[derive(Debug)]
struct Instance {
    req: pb::WatchCreateRequest,
    /// The resume chain it belongs to, if any.
    chain: Option<usize>,
    id: i64,
    created_rev: i64,
    events: Vec<Ev>,
    /// The event revisions of each response, to prove no revision was split.
    responses: Vec<Vec<i64>>,
    canceled: bool,
    /// How many events it had when the test sent its cancel.
    cancel_sent_after: Option<usize>,
    /// The highest revision a progress notification promised for this watch.
    bookmark: i64,
}

/// Follows a stream's responses: matches creates to their answers (in order), and checks as it
/// goes that nothing arrives for a watch before it is created or after it is canceled, that
/// revisions only go up, and that no progress notification runs ahead of the events.
#[derive(Debug, Default)]
struct Tracker {
    name: String,
    pending: std::collections::VecDeque<(pb::WatchCreateRequest, Option<usize>)>,
    instances: Vec<Instance>,
    live: HashMap<i64, usize>,
    stream_progress: i64,
    progress_seen: usize,
}

impl Tracker {
    fn create(&mut self, ws: &Ws, req: pb::WatchCreateRequest, chain: Option<usize>) {
        ws.create(req.clone());
        self.pending.push_back((req, chain));
    }

    /// Takes one response; returns the index of the instance it concerns, if any.
    fn take(&mut self, r: &pb::WatchResponse) -> Option<usize> {
        let name = &self.name;
        let rev = hrev(r);
        if r.created {
            let (req, chain) = self.pending.pop_front().expect("a created answer nobody asked for");
            assert!(!r.canceled && r.watch_id >= 0, "{name}: create refused: {}", show(r));
            assert!(!self.live.contains_key(&r.watch_id), "{name}: id {} reused", r.watch_id);
            self.instances.push(Instance {
                req,
                chain,
                id: r.watch_id,
                created_rev: rev,
                events: vec![],
                responses: vec![],
                canceled: false,
                cancel_sent_after: None,
                bookmark: 0,
            });
            self.live.insert(r.watch_id, self.instances.len() - 1);
            return Some(self.instances.len() - 1);
        }
        if r.watch_id == -1 {
            assert!(is_progress(r), "{name}: {}", show(r));
            assert!(rev >= self.stream_progress, "{name}: progress went back to {rev}");
            self.stream_progress = rev;
            self.progress_seen += 1;
            // It speaks for the watches that existed when the server took the request. etcd
            // may send a create's answer ahead of an earlier request's progress, so only a
            // watch created at a lower revision is surely one of them.
            for &i in self.live.values() {
                let w = &mut self.instances[i];
                if w.created_rev < rev {
                    w.bookmark = w.bookmark.max(rev);
                }
            }
            return None;
        }
        let Some(&i) = self.live.get(&r.watch_id) else {
            panic!("{name}: a response for a watch that is not live: {}", show(r))
        };
        let w = &mut self.instances[i];
        if r.canceled {
            assert!(r.events.is_empty() && r.compact_revision == 0, "{name}: {}", show(r));
            w.canceled = true;
            self.live.remove(&r.watch_id);
            return Some(i);
        }
        if r.events.is_empty() {
            // A periodic progress notification for this watch.
            assert!(is_progress(r), "{name}: {}", show(r));
            let last = w.events.last().map_or(0, |e| e.kv.mod_revision);
            assert!(rev >= last, "{name}: watch {} heard progress {rev} after event {last}", w.id);
            w.bookmark = w.bookmark.max(rev);
            self.progress_seen += 1;
            return Some(i);
        }
        assert!(!r.fragment, "{name}: nobody asked for fragments");
        let revs: Vec<i64> = r.events.iter().map(|e| e.kv.as_ref().unwrap().mod_revision).collect();
        let last = w.events.last().map_or(0, |e| e.kv.mod_revision);
        assert!(
            revs[0] >= last,
            "{name}: watch {} went back from {last} to {}: {}",
            w.id,
            revs[0],
            show(r)
        );
        assert!(
            revs[0] > w.bookmark,
            "{name}: watch {} got revision {} after progress {} promised everything up to it",
            w.id,
            revs[0],
            w.bookmark
        );
        w.events.extend(r.events.iter().map(Ev::from));
        w.responses.push(revs);
        Some(i)
    }
}

/// The expected events of a watch that started at `start` (> 0), up to `last`.
fn expected_from(all: &[Ev], req: &pb::WatchCreateRequest, start: i64, last: i64) -> Vec<Ev> {
    visible(req, all)
        .into_iter()
        .filter(|e| e.kv.mod_revision >= start && e.kv.mod_revision <= last)
        .collect()
}

/// The events of an instance, as checked. etcd looks prev_kv up when it sends an event, in a
/// map that a cancel request clears: events of a watch that were on their way when the client
/// asked to cancel it go out without prev_kv. That is etcd's bug, tolerated for etcd only.
fn received(w: &Instance, all: &[Ev]) -> Vec<Ev> {
    let mut got = w.events.clone();
    if let (Kind::Etcd, Some(from), true) = (target(), w.cancel_sent_after, w.req.prev_kv) {
        for e in got.iter_mut().skip(from).filter(|e| e.prev.is_none()) {
            e.prev = all
                .iter()
                .find(|h| h.kv.key == e.kv.key && h.kv.mod_revision == e.kv.mod_revision)
                .and_then(|h| h.prev.clone());
        }
    }
    got
}

/// Checks a finished instance against the history.
fn check_instance(name: &str, w: &Instance, all: &[Ev], last: i64) {
    let what = format!("{name}: watch {} ({:?} start {})", w.id, w.req.key, w.req.start_revision);
    crate::api::watch::assert_no_split(&w.responses);
    let got = &received(w, all);
    let want = if w.req.start_revision > 0 {
        expected_from(all, &w.req, w.req.start_revision, last)
    } else {
        // From "now": everything after the created revision. etcd reads that revision just
        // after registering the watch, so a write in between may show up too; such extra
        // events must then be exactly the history's, right before.
        let after = expected_from(all, &w.req, w.created_rev + 1, last);
        let extra = got.len().saturating_sub(after.len());
        let before = expected_from(all, &w.req, 1, w.created_rev);
        let mut want = before[before.len().saturating_sub(extra)..].to_vec();
        want.extend(after);
        want
    };
    if w.canceled {
        assert!(got.len() <= want.len(), "{what}: more events than the history has");
        compare(&what, got, &want[..got.len()]);
    } else {
        compare(&what, got, &want);
    }
}

#[track_caller]
fn compare(what: &str, got: &[Ev], want: &[Ev]) {
    if got == want {
        return;
    }
    let at = got.iter().zip(want).position(|(g, w)| g != w).unwrap_or(got.len().min(want.len()));
    let near = |v: &[Ev]| {
        v.iter().skip(at.saturating_sub(3)).take(6).map(Ev::brief).collect::<Vec<_>>().join("; ")
    };
    panic!(
        "{what}: events differ from the history at #{at} (got {}, want {})\n  got:  {}\n  want: {}\n  \
         got #{at}:  {:?}\n  want #{at}: {:?}",
        got.len(),
        want.len(),
        near(got),
        near(want),
        got.get(at),
        want.get(at)
    );
}

/// What a stream driver does besides reading.
#[derive(Debug, Clone, Copy, Default)]
struct Behaviour {
    /// Cancel the resumable watch (chain 0) every this many events and re-create it from the
    /// revision after the last one delivered (which is never above the final revision: the
    /// last write is outside every watched range).
    resume_every: Option<usize>,
}

/// Reads a stream until a progress notification reaches `final_rev` (set once the writers are
/// done), sending progress requests all along. Returns the tracker with everything received.
async fn drive(
    mut ws: Ws,
    mut t: Tracker,
    how: Behaviour,
    final_rev: Arc<tokio::sync::OnceCell<i64>>,
) -> Tracker {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last_progress_req = Instant::now();
    let mut canceling: Option<i64> = None;
    let mut since_resume = 0;
    loop {
        assert!(Instant::now() < deadline, "{}: did not finish; log tail: {:?}", t.name, {
            let n = ws.seen.len();
            ws.seen[n.saturating_sub(5)..].iter().map(show).collect::<Vec<_>>()
        });
        if last_progress_req.elapsed() > Duration::from_millis(25) {
            ws.progress();
            last_progress_req = Instant::now();
        }
        let r = match ws.next_within(Duration::from_millis(25)).await {
            Ok(Some(r)) => r,
            Ok(None) => continue,
            Err(e) => panic!("{}: stream ended: {e:?}", t.name),
        };
        let i = t.take(&r);
        if r.watch_id == -1
            && let Some(&f) = final_rev.get()
            && hrev(&r) >= f
            && canceling.is_none()
            && t.pending.is_empty()
        {
            return finish(ws, t, f, deadline).await;
        }
        let Some(every) = how.resume_every else { continue };
        let Some(i) = i else { continue };
        if t.instances[i].chain != Some(0) {
            continue;
        }
        if r.canceled && canceling == Some(r.watch_id) {
            canceling = None;
            let w = &t.instances[i];
            let next = w.events.last().map_or(w.req.start_revision, |e| e.kv.mod_revision + 1);
            let req = pb::WatchCreateRequest { start_revision: next, ..w.req.clone() };
            t.create(&ws, req, Some(0));
            since_resume = 0;
        } else if !r.events.is_empty() {
            since_resume += r.events.len();
            if since_resume >= every && canceling.is_none() {
                canceling = Some(r.watch_id);
                t.instances[i].cancel_sent_after = Some(t.instances[i].events.len());
                ws.cancel(r.watch_id);
            }
        }
    }
}

/// The last barrier: a progress answer that surely speaks for every watch of the stream. (etcd
/// may send a create's answer before the answer to a progress request it took earlier, so the
/// answer that ended `drive` might predate the last re-created watch.) Lets everything on its
/// way arrive, then asks once at a time until answered.
async fn finish(mut ws: Ws, mut t: Tracker, last: i64, deadline: Instant) -> Tracker {
    loop {
        assert!(Instant::now() < deadline, "{}: no final progress", t.name);
        while let Some(r) = ws.next_within(Duration::from_millis(100)).await.expect("stream") {
            t.take(&r);
        }
        ws.progress();
        if let Some(r) = ws.next_within(Duration::from_millis(100)).await.expect("stream") {
            t.take(&r);
            if r.watch_id == -1 && hrev(&r) >= last {
                return t;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_and_watchers_agree_with_the_history() {
    let s = server!(["--watch-progress-notify-interval", "150ms"]);
    let mut raw = s.raw_clients().await;
    let seed = 0x5eed_u64;

    // Some history before any watch exists.
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut applied = Vec::new();
    for i in 0..80 {
        applied.extend(random_write(&mut raw, &mut rng, &format!("pre{i}")).await);
    }
    let mid = current(&mut raw).await / 2;

    let final_rev = Arc::new(tokio::sync::OnceCell::new());
    let start_stream = |name: &str, reqs: Vec<(pb::WatchCreateRequest, Option<usize>)>| {
        let name = name.to_string();
        let fin = final_rev.clone();
        let how = Behaviour { resume_every: reqs.iter().any(|r| r.1 == Some(0)).then_some(17) };
        let endpoint = s.endpoint();
        tokio::spawn(async move {
            let ch = Channel::from_shared(endpoint).unwrap().connect().await.expect("connect");
            let ws = Ws::on(ch, 64);
            let mut t = Tracker { name, ..Default::default() };
            for (req, chain) in reqs {
                t.create(&ws, req, chain);
            }
            drive(ws, t, how, fin).await
        })
    };

    let mut streams = vec![start_stream(
        "A",
        vec![
            (on_prefix("/registry/pods/").since(1).prev(), None),
            (on_prefix("/registry/leases/").prev(), None),
            (on_prefix("/registry/").since(mid).prev().notify(), None),
            (on_key("/registry/pods/default/k3").prev().notify(), None),
        ],
    )];

    // The writers.
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let endpoint = s.endpoint();
            tokio::spawn(async move {
                let ch = Channel::from_shared(endpoint).unwrap().connect().await.expect("connect");
                let mut raw = Raw::new(ch);
                let mut rng = SmallRng::seed_from_u64(seed + 1 + w);
                let mut applied = Vec::new();
                for i in 0..250 {
                    applied.extend(random_write(&mut raw, &mut rng, &format!("w{w}-{i}")).await);
                }
                applied
            })
        })
        .collect();

    // More streams while the writers run, from past revisions and from now.
    let before = current(&mut raw).await;
    wait_until("the writers to start", WAIT, || {
        let mut raw = raw.clone();
        async move { current(&mut raw).await > before + 30 }
    })
    .await;
    let now = current(&mut raw).await;
    streams.push(start_stream(
        "B",
        vec![
            (on_prefix("/registry/").since(1).prev(), None),
            (on_prefix("/registry/configmaps/").since(now - 20).filter(FilterType::Nodelete), None),
            (on_prefix("/registry/leases/").since(now - 5).filter(FilterType::Noput).prev(), None),
            (on_key("/registry/leases/kube-node-lease/k1").since(now + 40).prev(), None),
        ],
    ));
    streams.push(start_stream(
        "C",
        vec![
            (on_prefix("/registry/").since(mid).prev(), Some(0)),
            (on_prefix("/registry/pods/"), None),
        ],
    ));

    for w in writers {
        applied.extend(w.await.expect("writer"));
    }
    // A last write outside every watched range, so every watch (even one re-created from the
    // revision after the last event) is at or below the current revision and gets progress.
    let last = put(&mut raw, "/sentinel", "x").await;
    applied.push(Applied {
        rev: last,
        ops: vec![Op { key: "/sentinel".into(), value: Some("x".into()), changed: true }],
    });
    final_rev.set(last).unwrap();
    let all = history(applied, 2);

    let mut checked = 0;
    for st in streams {
        let t = st.await.expect("stream task");
        for w in &t.instances {
            check_instance(&t.name, w, &all, last);
            checked += w.events.len();
        }
        eprintln!(
            "stream {}: {} watches, {} events, {} progress notifications, last progress {}",
            t.name,
            t.instances.len(),
            t.instances.iter().map(|w| w.events.len()).sum::<usize>(),
            t.progress_seen,
            t.stream_progress
        );
        // The resumed watch, end to end: each incarnation starts right after the previous
        // one's last event, and together they deliver the history exactly once.
        let chain: Vec<&Instance> = t.instances.iter().filter(|w| w.chain == Some(0)).collect();
        if let Some(first) = chain.first() {
            assert!(chain.len() > 2, "{}: the watch was never resumed", t.name);
            let got: Vec<Ev> = chain.iter().flat_map(|w| received(w, &all)).collect();
            compare(
                &format!("{}: resumed chain", t.name),
                &got,
                &expected_from(&all, &first.req, first.req.start_revision, last),
            );
        }
    }
    assert!(checked > 1000, "too few events checked: {checked}");
}

/// Percentile of a list of durations.
fn pct(mut v: Vec<Duration>, p: f64) -> Duration {
    v.sort();
    v[((v.len() - 1) as f64 * p) as usize]
}

/// A channel with small HTTP/2 windows, so that a client that stops reading stalls the
/// server's sends after a few tens of kilobytes.
async fn small_window_channel(s: &Server) -> Channel {
    tonic::transport::Endpoint::from_shared(s.endpoint())
        .unwrap()
        .initial_stream_window_size(Some(65_535))
        .initial_connection_window_size(Some(65_535))
        .connect()
        .await
        .expect("connect")
}

/// A live watcher on its own connection that records when each revision arrives.
fn timed_watcher(
    mut ws: Ws,
) -> (tokio::sync::mpsc::UnboundedReceiver<(i64, Instant)>, tokio::task::JoinHandle<()>) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        loop {
            match ws.next_within(Duration::from_secs(60)).await {
                Ok(Some(r)) => {
                    let at = Instant::now();
                    for e in &r.events {
                        let _ = tx.send((e.kv.as_ref().unwrap().mod_revision, at));
                    }
                }
                _ => return,
            }
        }
    });
    (rx, task)
}

/// Puts `n` values under `/s/` and returns each put's (revision, acknowledgement time, latency).
/// The keys go round `/s/0` to `/s/63`, starting at `/s/{first % 64}`.
async fn timed_puts(
    raw: &mut Raw,
    first: usize,
    n: usize,
    value: &str,
) -> Vec<(i64, Instant, Duration)> {
    let mut out = Vec::with_capacity(n);
    for i in first..first + n {
        let t0 = Instant::now();
        let rev = put(raw, &format!("/s/{}", i % 64), value).await;
        out.push((rev, Instant::now(), t0.elapsed()));
    }
    out
}

/// How long after each acknowledgement the live watcher had the revision.
async fn lags(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<(i64, Instant)>,
    puts: &[(i64, Instant, Duration)],
) -> Vec<Duration> {
    let mut arrived = HashMap::new();
    let last = puts.last().unwrap().0;
    while !arrived.contains_key(&last) {
        let (rev, at) = tokio::time::timeout(WAIT, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("the live watcher stopped getting events before {last}"))
            .expect("live watcher ended");
        assert!(arrived.insert(rev, at).is_none(), "revision {rev} twice");
    }
    puts.iter().map(|(rev, acked, _)| arrived[rev].saturating_duration_since(*acked)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_blocks_nobody_and_misses_nothing() {
    let s = server!();
    let mut raw = s.raw_clients().await;
    let value = "v".repeat(500);
    const N: usize = 1500;

    let mut live_ws = Ws::open(&s).await;
    live_ws.watch(on_prefix("/s/")).await;
    let (mut live, live_task) = timed_watcher(live_ws);

    // Baseline: nobody stalls.
    let base = timed_puts(&mut raw, 0, N, &value).await;
    let base_lag = lags(&mut live, &base).await;

    // A watcher whose client reads its created answer and then nothing.
    let mut stalled = Ws::on(small_window_channel(&s).await, 1);
    let id = stalled.watch(on_prefix("/s/").prev()).await;
    let from = current(&mut raw).await + 1;
    let during = timed_puts(&mut raw, N, N, &value).await;
    let during_lag = lags(&mut live, &during).await;

    let lat = |v: &[(i64, Instant, Duration)]| v.iter().map(|p| p.2).collect::<Vec<_>>();
    let (p99_base, p99_during) = (pct(lat(&base), 0.99), pct(lat(&during), 0.99));
    let (lag_base, lag_during) = (pct(base_lag, 0.99), pct(during_lag.clone(), 0.99));
    eprintln!(
        "put p99: {p99_base:?} baseline, {p99_during:?} with a stalled watcher; live watcher \
         lag p99: {lag_base:?}, {lag_during:?} (max {:?})",
        during_lag.iter().max()
    );
    assert!(
        p99_during < p99_base * 10 + Duration::from_millis(5),
        "writers slowed down by a stalled watcher: p99 {p99_during:?} vs {p99_base:?}"
    );
    assert!(
        lag_during < lag_base * 10 + Duration::from_millis(20),
        "the live watcher fell behind: lag p99 {lag_during:?} vs {lag_base:?}"
    );

    // The stalled client reads again and gets every event, in order, exactly once.
    let last = during.last().unwrap().0;
    let evs = stalled.events_until(id, last).await;
    let revs: Vec<i64> = evs.iter().map(|e| e.kv.mod_revision).collect();
    assert_eq!(revs, (from..=last).collect::<Vec<_>>(), "gaps or duplicates after the stall");
    for (i, e) in evs.iter().enumerate() {
        assert!(e.put && e.kv.value == value.as_bytes(), "{}", e.brief());
        assert_eq!(e.kv.key, format!("/s/{}", (N + i) % 64).as_bytes());
        let prev = e.prev.as_ref().expect("prev_kv");
        assert_eq!(prev.mod_revision, e.kv.mod_revision - 64, "{}", e.brief());
    }
    stalled.quiet().await;
    live_task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_watcher_whose_history_was_compacted_is_told_so() {
    let s = server!();
    let mut raw = s.raw_clients().await;
    let value = "v".repeat(500);
    let mut stalled = Ws::on(small_window_channel(&s).await, 1);
    let id = stalled.watch(on_prefix("/s/")).await;
    let from = current(&mut raw).await + 1;
    let puts = timed_puts(&mut raw, 0, 1500, &value).await;
    let last = puts.last().unwrap().0;
    compact(&mut raw, last).await;
    // A live watcher is unaffected by the compaction.
    let mut live = Ws::open(&s).await;
    live.watch(on_prefix("/s/").since(last)).await;
    assert_eq!(live.events_until(0, last).await.len(), 1);

    // What was already on its way arrives in order, then the watch is canceled as compacted.
    let mut next = from;
    loop {
        let r = stalled.next().await;
        assert_eq!(r.watch_id, id, "{}", show(&r));
        if r.canceled {
            assert_eq!((r.compact_revision, r.events.len()), (last, 0), "{}", show(&r));
            break;
        }
        for e in &r.events {
            assert_eq!(e.kv.as_ref().unwrap().mod_revision, next, "gap before the cancel");
            next += 1;
        }
    }
    assert!(next < last, "everything arrived ({next}): the watch never fell behind");
    // The watch is gone.
    put(&mut raw, "/s/after", "x").await;
    stalled.quiet().await;
}
