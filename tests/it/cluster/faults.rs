//! Faults a 3-member mem_etcd cluster meets, caused on this machine (loopback only): a leader cut
//! off from the others by a network partition, a leader paused (SIGSTOP) long enough to be
//! replaced and then woken, a follower far behind that catches up from a snapshot while writes
//! go on, a membership change under load, and every member killed at once.
//!
//! The partition is the members' `--peer-failpoint` (see `src/raft/rafthttp/faults.rs`): both sides
//! refuse each other's peer calls, as if the network dropped them. What is checked under each
//! fault: no request reports success for a write that did not commit (every acknowledged write
//! is read back at its revision from every member afterwards), no linearizable read returns a
//! value older than a write acknowledged before it was sent, the majority goes on, and the
//! members converge to one revision and one HashKV.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::cluster::harness::Cluster;
use crate::support::*;

macro_rules! cluster {
    ($n:expr, [$($f:expr),* $(,)?]) => {
        match Cluster::start(Kind::MemEtcd, $n, &[$($f),*]).await {
            Some(c) => c,
            None => return,
        }
    };
}

fn put_req(key: &str, value: &str) -> pb::PutRequest {
    pb::PutRequest {
        key: key.as_bytes().to_vec().into(),
        value: value.as_bytes().to_vec().into(),
        ..Default::default()
    }
}

fn range_req(key: &str, serializable: bool) -> pb::RangeRequest {
    pb::RangeRequest { key: key.as_bytes().to_vec().into(), serializable, ..Default::default() }
}

/// The value of `key` in a Range answer.
fn value(r: &pb::RangeResponse) -> Option<String> {
    r.kvs.first().map(|kv| String::from_utf8_lossy(&kv.value).into_owned())
}

/// Every event under `prefix` from revision 1, as (revision, key, value), read from member `i`
/// with a watch (deletes have an empty value).
async fn history(c: &Cluster, i: usize, prefix: &str, upto: i64) -> Vec<(i64, String, String)> {
    let mut cl = c.client(i).await;
    let opts = etcd_client::WatchOptions::new().with_prefix().with_start_revision(1);
    let mut stream = cl.watch(prefix, Some(opts)).await.expect("watch");
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while seen.last().is_none_or(|(r, _, _)| *r < upto) {
        let left = deadline.saturating_duration_since(Instant::now());
        let msg = tokio::time::timeout(left, stream.message())
            .await
            .unwrap_or_else(|_| panic!("m{i}: history of {prefix} stops at {:?}", seen.last()))
            .expect("watch stream")
            .expect("watch open");
        for ev in msg.events() {
            let kv = ev.kv().expect("kv");
            let v = String::from_utf8_lossy(kv.value()).into_owned();
            seen.push((kv.mod_revision(), kv.key_str().unwrap().to_string(), v));
        }
        if msg.canceled() {
            panic!("m{i}: watch canceled: {}", msg.cancel_reason());
        }
    }
    seen
}

/// A leader cut off from both followers acknowledges no write and serves no linearizable read;
/// the two others elect a leader and take writes within seconds; once healed, the old leader
/// follows, its refused write is nowhere, and every member converges.
#[tokio::test]
async fn a_leader_cut_off_acknowledges_nothing_and_the_majority_goes_on() {
    let c = cluster!(3, ["--wal-mode=buffered"]);
    let l = c.leader().await;
    let mut on_l = c.raw(l).await;
    on_l.kv.put(put_req("/f/k", "before")).await.expect("put before the partition");

    c.partition(l).await;
    let cut = Instant::now();
    // The old leader: a write and a linearizable read both fail (in flight together).
    let mut on_l2 = c.raw(l).await;
    let other = (0..3).find(|i| *i != l).unwrap();
    let on_other = c.raw(other).await;
    // Meanwhile the majority: a write through a follower goes through once it has elected a
    // leader.
    let majority = async {
        let within = Duration::from_secs(15).saturating_sub(cut.elapsed());
        let r = wait_until("the majority to take a write", within, || {
            let mut kv = on_other.kv.clone();
            async move { kv.put(put_req("/f/k", "after")).await }
        })
        .await;
        (r.into_inner().header.unwrap().revision, cut.elapsed())
    };
    let (w, r, (after_rev, majority_after)) = tokio::join!(
        tokio::time::timeout(Duration::from_secs(20), on_l.kv.put(put_req("/f/k", "cut-off"))),
        tokio::time::timeout(Duration::from_secs(20), on_l2.kv.range(range_req("/f/k", false))),
        majority,
    );
    let w = w.expect("the cut-off leader answers the write within 20 s");
    let r = r.expect("the cut-off leader answers the read within 20 s");
    assert!(w.is_err(), "the cut-off leader acknowledged a write: {w:?}");
    assert!(r.is_err(), "the cut-off leader served a linearizable read: {r:?}");
    let (w, r) = (w.unwrap_err(), r.unwrap_err());
    // A serializable read is still served, from its own (old) state.
    let s = on_l.kv.range(range_req("/f/k", true)).await.expect("serializable read").into_inner();
    assert_eq!(value(&s).as_deref(), Some("before"));
    say(&format!(
        "\npartition: the cut-off leader answered the write {:?} {:?} and the read {:?} {:?}; \
         the majority took a write {} ms after the cut\n",
        w.code(),
        w.message(),
        r.code(),
        r.message(),
        majority_after.as_millis()
    ));

    c.heal().await;
    // The old leader follows the new one: a linearizable read there sees the majority's write.
    let r = wait_until("the old leader to rejoin", Duration::from_secs(15), || {
        let mut kv = on_l.kv.clone();
        async move { kv.range(range_req("/f/k", false)).await }
    })
    .await;
    assert_eq!(value(r.get_ref()).as_deref(), Some("after"), "stale read after healing");
    let rev = c.converged().await;
    assert!(rev >= after_rev);
    // The refused write took effect nowhere.
    for i in 0..3 {
        let h = history(&c, i, "/f/", after_rev).await;
        assert!(h.iter().all(|(_, _, v)| v != "cut-off"), "m{i}: a refused write committed: {h:?}");
        let vals: Vec<&str> = h.iter().map(|(_, _, v)| v.as_str()).collect();
        assert_eq!(vals, ["before", "after"], "m{i}");
    }
}

/// A leader paused (SIGSTOP) until the others replaced it, then woken (SIGCONT), still believes
/// it leads for a moment: reads and writes sent to it the instant it wakes must not see the
/// state from before the pause, and a write it acknowledges must have committed.
#[tokio::test]
async fn a_paused_leader_that_wakes_serves_no_stale_read_and_acknowledges_no_lost_write() {
    let c = cluster!(3, ["--wal-mode=buffered"]);
    for round in 0..2 {
        let l = c.leader().await;
        let l_id = c.member_id(l).await;
        let key = format!("/p/{round}");
        let mut on_l: Vec<Raw> = Vec::new();
        for _ in 0..4 {
            on_l.push(c.raw(l).await);
        }
        on_l[0].kv.put(put_req(&key, "before")).await.expect("put before the pause");

        c.signal(l, "STOP");
        // The others elect a leader and take a write.
        let others: Vec<usize> = (0..3).filter(|i| *i != l).collect();
        let on_other = c.raw(others[0]).await;
        let paused = Instant::now();
        let what = format!("a new leader without m{l} to take a write");
        let newer_rev = wait_until(&what, Duration::from_secs(15), || {
            let (mut on_other, key) = (on_other.clone(), key.clone());
            async move {
                let st = on_other.maint.status(pb::StatusRequest {}).await.map(|s| s.into_inner());
                if let Ok(st) = st
                    && st.leader != 0
                    && st.leader != l_id
                    && let Ok(r) = on_other.kv.put(put_req(&key, "newer")).await
                {
                    return Some(r.into_inner().header.unwrap().revision);
                }
                None
            }
        })
        .await;
        let replaced_after = paused.elapsed();

        c.signal(l, "CONT");
        // Sent the instant it wakes, on connections it accepted before the pause.
        let [mut a, mut b, mut d, mut w] = <[Raw; 4]>::try_from(on_l).ok().unwrap();
        let bound = Duration::from_secs(20);
        let (ra, rb, rd, rw) = tokio::join!(
            tokio::time::timeout(bound, a.kv.range(range_req(&key, false))),
            tokio::time::timeout(bound, b.kv.range(range_req(&key, false))),
            tokio::time::timeout(bound, d.kv.range(range_req(&key, false))),
            tokio::time::timeout(bound, w.kv.put(put_req(&key, "from-woken"))),
        );
        let mut outcomes = Vec::new();
        for r in [ra, rb, rd] {
            match r.expect("a woken leader answers within 20 s") {
                Ok(r) => {
                    let v = value(r.get_ref());
                    assert!(
                        matches!(v.as_deref(), Some("newer") | Some("from-woken")),
                        "round {round}: the woken leader served a stale read: {v:?}"
                    );
                    outcomes.push(format!("read {v:?}"));
                }
                Err(e) => outcomes.push(format!("read failed: {}", e.message())),
            }
        }
        let acked = match rw.expect("a woken leader answers within 20 s") {
            Ok(r) => {
                let rev = r.into_inner().header.unwrap().revision;
                assert!(
                    rev > newer_rev,
                    "round {round}: acknowledged at {rev}, not after {newer_rev}"
                );
                outcomes.push(format!("write acknowledged at {rev}"));
                Some(rev)
            }
            Err(e) => {
                outcomes.push(format!("write failed: {}", e.message()));
                None
            }
        };
        say(&format!(
            "\npaused leader, round {round}: replaced {} ms into the pause; on waking: {}\n",
            replaced_after.as_millis(),
            outcomes.join(", ")
        ));
        let rev = c.converged().await;
        // An acknowledged write is there, at its revision, on every member.
        if let Some(at) = acked {
            for i in 0..3 {
                let mut raw = c.raw(i).await;
                let mut req = range_req(&key, true);
                req.revision = at;
                let r = raw.kv.range(req).await.expect("read at the acknowledged revision");
                let kv = r.get_ref().kvs.first().cloned().expect("the acknowledged write");
                assert_eq!((kv.mod_revision, &kv.value[..]), (at, &b"from-woken"[..]), "m{i}");
            }
        }
        assert!(rev >= newer_rev);
    }
}

/// Puts `/load/<tag>/<writer>-<n % keys>` through `endpoints` from `writers` tasks until
/// `stop` is set or `max` writes were sent; returns the acknowledged keys with their revisions.
fn load(
    endpoints: Vec<String>,
    tag: &'static str,
    (writers, keys): (usize, usize),
    max: usize,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Vec<(String, i64)>> {
    tokio::spawn(async move {
        let per = max / writers;
        let tasks: Vec<_> = (0..writers)
            .map(|w| {
                let endpoints = endpoints.clone();
                let stop = stop.clone();
                tokio::spawn(async move {
                    let mut cl =
                        etcd_client::Client::connect(&endpoints, None).await.expect("connect");
                    let mut acked = Vec::new();
                    let pad = "v".repeat(200);
                    for n in 0..per {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let key = format!("/load/{tag}/{w}-{}", n % keys);
                        let put = cl.put(key.as_str(), pad.as_str(), None);
                        if let Ok(Ok(r)) = tokio::time::timeout(Duration::from_secs(10), put).await
                        {
                            acked.push((key, r.header().unwrap().revision()));
                        }
                    }
                    acked
                })
            })
            .collect();
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.expect("writer"));
        }
        all
    })
}

/// Every acknowledged key is on member `i` (serializable reads of the prefix), last modified
/// at the revision its last acknowledged write got or later (a later write whose answer was
/// lost may have committed).
async fn all_there(c: &Cluster, i: usize, prefix: &str, acked: &[(String, i64)]) {
    let mut cl = c.client(i).await;
    // Keys and revisions only: tens of thousands of values would pass the client's 4 MiB limit.
    let opts = etcd_client::GetOptions::new().with_prefix().with_serializable().with_keys_only();
    let r = cl.get(prefix, Some(opts)).await.expect("list");
    let have: std::collections::HashMap<String, i64> =
        r.kvs().iter().map(|kv| (kv.key_str().unwrap().to_string(), kv.mod_revision())).collect();
    let mut last: std::collections::HashMap<&str, i64> = Default::default();
    for (k, rev) in acked {
        let e = last.entry(k.as_str()).or_default();
        *e = (*e).max(*rev);
    }
    for (k, rev) in last {
        let got = have.get(k).copied();
        assert!(got.is_some_and(|g| g >= rev), "m{i}: {k} acknowledged at {rev}, has {got:?}");
    }
}

/// A follower cut off while the leader logs far more than it keeps after a snapshot catches up
/// from a snapshot once healed, while writes go on, and ends with everything acknowledged.
#[tokio::test]
async fn a_follower_far_behind_catches_up_from_a_snapshot_while_writes_go_on() {
    let c = cluster!(3, ["--wal-mode=buffered", "--wal-snapshot-bytes=65536"]);
    let l = c.leader().await;
    let f = (0..3).find(|i| *i != l).unwrap();
    let live: Vec<String> = (0..3).filter(|i| *i != f).map(|i| c.endpoint(i)).collect();
    c.partition(f).await;
    // More entries than the leader keeps after a snapshot (5,000).
    let stop = Arc::new(AtomicBool::new(false));
    let before = load(live.clone(), "behind", (8, 20), 8_000, stop.clone()).await.expect("load");
    assert!(before.len() > 7_000, "only {} writes acknowledged", before.len());
    // Compacted, the store is far smaller than what was logged: a snapshot follows.
    let top = before.iter().map(|(_, r)| *r).max().unwrap();
    c.client(l).await.compact(top, None).await.expect("compact");
    // The leader snapshots and purges its log past the cut-off member's last entry.
    let leader = c.members[l].server.as_ref().unwrap();
    wait_until("the leader to purge its log", Duration::from_secs(15), || {
        std::future::ready(!leader.grep_log("raft log: purged").is_empty())
    })
    .await;
    let fs = c.members[f].server.as_ref().unwrap();
    assert!(fs.grep_log("snapshot installed").is_empty(), "a snapshot reached the cut-off member");
    // Healed under load.
    let during = load(live, "during", (4, 1_000_000), 40_000, stop.clone());
    c.writes_go_on(l, 100, "the load before healing").await;
    c.heal().await;
    let start = Instant::now();
    wait_until("the healed member to install a snapshot", Duration::from_secs(20), || {
        std::future::ready(!fs.grep_log("snapshot installed").is_empty())
    })
    .await;
    let caught = start.elapsed();
    c.writes_go_on(l, 500, "the load once the member caught up").await;
    stop.store(true, Ordering::Relaxed);
    let during = during.await.expect("load");
    assert!(!during.is_empty());
    let rev = c.converged().await;
    for i in 0..3 {
        all_there(&c, i, "/load/behind/", &before).await;
        all_there(&c, i, "/load/during/", &during).await;
    }
    say(&format!(
        "\nfollower far behind: {} writes while cut off, snapshot installed {} ms after healing, \
         {} writes meanwhile; converged at revision {rev}\n",
        before.len(),
        caught.as_millis(),
        during.len()
    ));
}

/// Under a steady write load: a learner is added, catches up, is promoted, and a founding
/// member is removed; no acknowledged write is lost and the members converge.
#[tokio::test]
async fn membership_changes_under_load_lose_nothing() {
    let mut c = cluster!(3, ["--wal-mode=buffered"]);
    let l = c.leader().await;
    // The member to remove later: a follower; the load goes to the two others.
    let gone = (0..3).find(|i| *i != l).unwrap();
    let live: Vec<String> = (0..3).filter(|i| *i != gone).map(|i| c.endpoint(i)).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let writes = load(live.clone(), "members", (4, 1_000_000), 200_000, stop.clone());
    let ctl = etcd_client::Client::connect(&live, None).await.expect("connect");

    let slot = c.add_slot();
    // Refused as "unhealthy cluster" until every member has been connected for 5 s, as in etcd.
    let added = c.add_learner(&ctl, slot, Duration::from_secs(15)).await;
    let new_id = added.member().unwrap().id();
    c.join(slot).await;
    let start = Instant::now();
    wait_until("the learner's promotion", Duration::from_secs(30), || {
        let mut ctl = ctl.clone();
        async move {
            let r = ctl.member_promote(new_id).await;
            if let Err(e) = &r {
                assert!(e.to_string().contains("in sync"), "promote: {e}");
            }
            r
        }
    })
    .await;
    let promoted = start.elapsed();
    let gone_id = c.member_id(gone).await;
    wait_until("the removal", Duration::from_secs(15), || {
        let mut ctl = ctl.clone();
        async move { ctl.member_remove(gone_id).await }
    })
    .await;
    c.writes_go_on(l, 100, "the load once the member is removed").await;
    stop.store(true, Ordering::Relaxed);
    let acked = writes.await.expect("load");
    // As etcd's, the removed member stops by itself once it learns of its removal.
    let mut removed = c.members[gone].server.take().expect("the removed member was running");
    wait_until("the removed member to stop", Duration::from_secs(15), || {
        std::future::ready(removed.exited())
    })
    .await;
    let exited = removed.ended().expect("the removed member has exited");
    assert!(exited.status.success(), "the removed member's exit: {}", exited.output());
    let rev = c.converged().await;
    for i in c.running() {
        all_there(&c, i, "/load/members/", &acked).await;
        let list = c.client(i).await.member_list().await.expect("member list");
        let ids: BTreeSet<u64> = list.members().iter().map(|m| m.id()).collect();
        assert!(
            ids.contains(&new_id) && !ids.contains(&gone_id) && ids.len() == 3,
            "m{i}: {ids:x?}"
        );
    }
    say(&format!(
        "\nmembership under load: learner promoted {} ms after joining, a member removed; {} \
         writes acknowledged meanwhile, converged at revision {rev}\n",
        promoted.as_millis(),
        acked.len()
    ));
}

/// Every member killed at once (SIGKILL) under load and restarted: in buffered and fsync mode
/// nothing acknowledged is lost, and revisions go on from where they were.
#[tokio::test]
async fn every_member_killed_at_once_loses_nothing_acknowledged() {
    for mode in ["--wal-mode=buffered", "--wal-mode=fsync"] {
        let mut c = cluster!(3, [mode]);
        let stop = Arc::new(AtomicBool::new(false));
        let endpoints: Vec<String> = (0..3).map(|i| c.endpoint(i)).collect();
        let writes = load(endpoints, "all", (8, 1_000_000), 100_000, stop.clone());
        c.writes_go_on(0, 1000, "the load").await;
        for i in 0..3 {
            c.kill9(i);
        }
        stop.store(true, Ordering::Relaxed);
        let acked = writes.await.expect("load");
        assert!(acked.len() > 100, "{mode}: only {} writes acknowledged", acked.len());
        let last = acked.iter().map(|(_, r)| *r).max().unwrap();
        c.restart_all(&[0, 1, 2]).await;
        c.leader().await;
        let rev = c.converged().await;
        assert!(rev >= last, "{mode}: revision {rev} after restart, {last} acknowledged before");
        for i in 0..3 {
            all_there(&c, i, "/load/all/", &acked).await;
        }
        let mut cl = c.client(0).await;
        let next = cl.put("/after", "x", None).await.expect("write after restart");
        assert!(next.header().unwrap().revision() > rev);
        say(&format!(
            "\nall members killed ({mode}): {} writes acknowledged, all there after the restart \
             (revision {rev})\n",
            acked.len()
        ));
    }
}
